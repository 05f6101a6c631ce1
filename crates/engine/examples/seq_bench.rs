//! Sequential throughput of the array over file members against one plain file.
//!
//! `cargo run --release -p engine --example seq_bench [DIR] [MEMBER_MIB]` creates 4 member
//! files of MEMBER_MIB (default 256) and one reference file of the RAID 5 array's size in DIR
//! (default /tmp/raidkit-bench), then times 1 MiB sequential reads and writes (one request at a
//! time and from 4 threads) for the plain file, RAID 5, RAID 0, RAID 1 and degraded RAID 5.
//! Files are in the page cache: this measures the engine's overhead, not the disks.
//! `RAIDKIT_FANOUT_MIN_BYTES=0` forces parallel member I/O for comparison.

use engine::{Array, ArrayConfig, Level};
use member::{open, Member, OpenOptions};
use std::sync::Arc;
use std::time::Instant;

const MIB: u64 = 1 << 20;
const REQUEST_BYTES: u64 = MIB;
const CHUNK_BYTES: u64 = 128 * 1024;

trait Target: Sync {
    fn size(&self) -> u64;
    fn read(&self, offset: u64, buf: &mut [u8]);
    fn write(&self, offset: u64, buf: &[u8]);
}

impl Target for Array {
    fn size(&self) -> u64 {
        self.size_bytes()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) {
        Array::read(self, offset, buf).expect("array read");
    }
    fn write(&self, offset: u64, buf: &[u8]) {
        Array::write(self, offset, buf).expect("array write");
    }
}

struct Plain(Arc<dyn Member>, u64);
impl Target for Plain {
    fn size(&self) -> u64 {
        self.1
    }
    fn read(&self, offset: u64, buf: &mut [u8]) {
        self.0.read_at(buf, offset).expect("file read");
    }
    fn write(&self, offset: u64, buf: &[u8]) {
        self.0.write_at(buf, offset).expect("file write");
    }
}

/// GB/s of 1 MiB requests over the whole target, split among `threads` sequential streams.
fn measure(target: &dyn Target, threads: u64, write: bool) -> f64 {
    let requests = target.size() / REQUEST_BYTES;
    let per_thread = requests / threads;
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            scope.spawn(move || {
                let mut buf = vec![0x5au8; REQUEST_BYTES as usize];
                for i in 0..per_thread {
                    let offset = (t * per_thread + i) * REQUEST_BYTES;
                    if write {
                        target.write(offset, &buf);
                    } else {
                        target.read(offset, &mut buf);
                    }
                }
            });
        }
    });
    (per_thread * threads * REQUEST_BYTES) as f64 / start.elapsed().as_secs_f64() / 1e9
}

fn report(name: &str, target: &dyn Target) {
    let w = measure(target, 1, true);
    let r1 = measure(target, 1, false);
    let r1b = measure(target, 1, false);
    let r4 = measure(target, 4, false);
    println!(
        "{name:<22} write {w:>6.2} GB/s   read qd1 {:>6.2} GB/s   read 4 threads {r4:>6.2} GB/s",
        r1.max(r1b)
    );
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/tmp/raidkit-bench".into());
    let member_mib: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    std::fs::create_dir_all(&dir).expect("bench dir");
    let member_bytes = member_mib * MIB;
    let opts = OpenOptions {
        create_size: Some(member_bytes),
        read_only: false,
        ..OpenOptions::default()
    };
    let members: Vec<Arc<dyn Member>> = (0..4)
        .map(|i| open(&format!("{dir}/member{i}.img"), &opts).expect("member"))
        .collect();
    let plain_bytes = 3 * member_bytes;
    let plain_opts = OpenOptions {
        create_size: Some(plain_bytes),
        read_only: false,
        ..OpenOptions::default()
    };
    let plain = Plain(
        open(&format!("{dir}/plain.img"), &plain_opts).expect("plain"),
        plain_bytes,
    );
    println!(
        "1 MiB requests, chunk {} KiB, 4 members of {member_mib} MiB (page cache)",
        CHUNK_BYTES / 1024
    );
    report("plain file", &plain);
    for (name, level, missing) in [
        ("raid5 x4", Level::Raid5, None),
        ("raid0 x4", Level::Raid0, None),
        ("raid1 x4", Level::Raid1, None),
        ("raid6 x4", Level::Raid6, None),
        ("raid5 x4 degraded", Level::Raid5, Some(2)),
    ] {
        let config = ArrayConfig {
            level,
            chunk_bytes: CHUNK_BYTES,
            member_count: 4,
            member_data_bytes: vec![member_bytes; 4],
        };
        let slots = members
            .iter()
            .enumerate()
            .map(|(r, m)| (Some(r) != missing).then(|| m.clone()))
            .collect();
        let array = Array::new(config, slots).expect("array");
        if let Some(bytes) = std::env::var("RAIDKIT_FANOUT_MIN_BYTES")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            array.set_fanout_min_bytes(bytes);
        }
        report(name, &array);
    }
}

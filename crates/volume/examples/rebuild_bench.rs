//! Rebuild speed and degraded reads on members limited like disks (docs/PERFORMANCE.md,
//! "Degraded reads and rebuild"; issue 4's goals: unthrottled rebuild ≥ 80 % of the raw
//! sequential write speed of the member being rebuilt, degraded reads ≥ 60 % of healthy).
//!
//! Every member is its own `nbdkit --filter=blocksize --filter=rate memory` server on a Unix
//! socket (read and write each limited to RATE megabits per second, separately, as the rate
//! filter does; requests split into 256 KiB pieces before the limit), used
//! through raidkit's `NbdMember` client (`nbd+unix://`). So the member's speed is a device
//! limit, not a memory copy, and the comparison means something on a busy 2-core machine.
//!
//! For RAID 5 over 4 and RAID 6 over 5 members: sequential reads of the whole array (1 MiB
//! requests, 4 in flight) healthy and with member 1 left out, interleaved rounds; then an
//! unthrottled rebuild of member 1 onto a fresh rate-limited member (through the volume: fail,
//! remove, add, wait_idle — includes the spare promotion, checkpoints and the final flush)
//! against a raw sequential write (4 MiB writes one after another, then a flush) of the same
//! size to another fresh rate-limited member through the same client, interleaved. Best of
//! 3 rounds each.
//!
//! Usage: `cargo run --release -p volume --example rebuild_bench [RATE_MBIT] [MEMBER_MIB]`
//! (defaults: 400 Mbit/s per direction — nbdkit's M is 2^20, so 50 MiB/s — and 256 MiB
//! members). Needs `nbdkit` on PATH.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use member::{Member, OpenOptions};
use ondisk::{create, CreateOptions};
use volume::{assemble, AssembleOptions};

mod common;

const READ_BYTES: u64 = 1 << 20;
const READERS: u64 = 4;
const WRITE_BYTES: usize = 4 << 20;
use common::MIB;
const ROUNDS: usize = 3;
/// Rate-filter bucket, in seconds of the rate (nbdkit's default is 2 s). It must be much
/// smaller than the time of one rebuild step (4 MiB): else a member idle during the other
/// half of a step refills its bucket and serves the next step at once, so even a rebuild that
/// never overlaps reads with writes looks write-bound. 20 ms = 1 MiB at 50 MiB/s. The
/// blocksize filter in front splits requests into 256 KiB pieces, below the bucket (the rate
/// filter is slow and lumpy on requests larger than its bucket: 4 MiB writes got a quarter of
/// the rate).
const BURSTINESS: &str = "0.02";

/// The nbdkit servers started by this bench; killed (by their own pids) when dropped.
struct Servers {
    dir: PathBuf,
    children: Vec<Child>,
    rate_mbit: u64,
    member_bytes: u64,
}

impl Servers {
    /// Starts one rate-limited nbdkit memory server; returns its member.
    fn member(&mut self, name: &str) -> Arc<dyn Member> {
        let sock = self.dir.join(format!("{name}.sock"));
        let child = Command::new("nbdkit")
            .args(["-f", "--exit-with-parent", "-U"])
            .arg(&sock)
            .args([
                "--filter=blocksize",
                "--filter=rate",
                "memory",
                "maxdata=256K",
            ])
            .arg(format!("size={}", self.member_bytes))
            .arg(format!("rate={}M", self.rate_mbit))
            .arg(format!("burstiness={BURSTINESS}"))
            .spawn()
            .expect("start nbdkit (is it installed?)");
        self.children.push(child);
        // The socket appears (bind) a moment before nbdkit listens: retry until connected.
        let uri = format!("nbd+unix:///?socket={}", sock.display());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match member::open(&uri, &OpenOptions::default()) {
                Ok(m) => return m,
                Err(e) if Instant::now() >= deadline => panic!("open the NBD member {uri}: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rate_mbit: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(400);
    let member_mib: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(256);
    let dir = std::env::temp_dir().join(format!("raidkit-rebuild-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("socket directory");
    println!(
        "members: nbdkit memory + rate filter, {rate_mbit} Mbit/s ({:.1} MiB/s) read and write each, burstiness {BURSTINESS} s, {member_mib} MiB; 128 KiB chunks",
        rate_mbit as f64 / 8.0
    );
    println!("| level | healthy read MiB/s | degraded read MiB/s | degraded/healthy | raw write MiB/s | rebuild MiB/s | rebuild/raw |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (level, count) in [("raid5", 4), ("raid6", 5)] {
        let mut servers = Servers {
            dir: dir.join(level),
            children: Vec::new(),
            rate_mbit,
            member_bytes: member_mib << 20,
        };
        std::fs::create_dir_all(&servers.dir).expect("socket directory");
        run(&mut servers, level, count);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads the whole array in `READ_BYTES` requests, `READERS` in flight.
fn read_all(array: &engine::Array) -> f64 {
    let size = array.size_bytes();
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..READERS {
            s.spawn(move || {
                let mut buf = vec![0u8; READ_BYTES as usize];
                let mut at = t * READ_BYTES;
                while at < size {
                    let n = (size - at).min(READ_BYTES) as usize;
                    array.read(at, &mut buf[..n]).expect("read");
                    at += READERS * READ_BYTES;
                }
            });
        }
    });
    size as f64 / MIB / start.elapsed().as_secs_f64()
}

/// [`common::view`] with every member share on its own thread (members are slow devices,
/// not page-cache copies).
fn view(v: &volume::Volume, members: &[Arc<dyn Member>], missing: Option<usize>) -> engine::Array {
    let array = common::view(v, members, missing);
    array.set_fanout_min_bytes(0);
    array
}

fn run(servers: &mut Servers, level: &str, count: usize) {
    let members: Vec<Arc<dyn Member>> = (0..count)
        .map(|i| servers.member(&format!("m{i}")))
        .collect();
    let mut opts = CreateOptions::new(level.parse().expect("level"), "bench");
    opts.chunk_bytes = 128 * 1024;
    opts.assume_clean = true; // nbdkit memory members start zeroed: consistent
    create(&members, &opts).expect("create");
    let v = assemble(members.clone(), &AssembleOptions::default()).expect("assemble");
    common::unthrottle_and_fill(&v, WRITE_BYTES);
    let (healthy, degraded) = common::best_reads(
        ROUNDS,
        &view(&v, &members, None),
        &view(&v, &members, Some(1)),
        read_all,
    );
    // Both closures start servers: one at a time.
    let servers = std::cell::RefCell::new(servers);
    let (raw, rebuild) = common::best_rebuilds(
        &v,
        ROUNDS,
        |round, bytes| {
            let target = servers.borrow_mut().member(&format!("raw{round}"));
            common::raw_write(target.as_ref(), bytes)
        },
        |round| servers.borrow_mut().member(&format!("spare{round}")),
    );
    println!(
        "| {level} x{count} | {healthy:.1} | {degraded:.1} | {:.0} % | {raw:.1} | {rebuild:.1} | {:.0} % |",
        100.0 * degraded / healthy,
        100.0 * rebuild / raw
    );
}

//! Degraded reads and rebuild, measured in one run on file members (docs/PERFORMANCE.md,
//! "Degraded reads and rebuild").
//!
//! For RAID 5 and RAID 6: sequential read throughput of the healthy array, then with one member
//! failed (reconstructing its share from parity); then an unthrottled rebuild of that member
//! onto a fresh file, against the raw sequential write speed (same request size, one fdatasync
//! at the end) of a fresh file of the same size in the same directory.
//!
//! Usage: `cargo run --release -p metadata --example degraded_bench [DIR] [MEMBER_MIB]`
//! (files go in a new subdirectory of DIR, default the temporary directory, removed at
//! the end; 256 MiB members).

use std::sync::Arc;
use std::time::{Duration, Instant};

use member::{Member, OpenOptions};
use metadata::{assemble, create, AssembleOptions, CreateOptions, SpeedLimits};

const READ_BYTES: usize = 1 << 20;
const MIB: f64 = 1048576.0;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let base = args
        .get(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = bench_dir(&base);
    let member_mib: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(256);
    println!("member size {member_mib} MiB, files in {}", dir.display());
    println!("| level | members | healthy read MiB/s | degraded read MiB/s | degraded/healthy | raw write MiB/s | rebuild MiB/s | rebuild/raw |");
    println!("|---|---|---|---|---|---|---|---|");
    for (level, count) in [("raid5", 4), ("raid6", 5)] {
        run(&dir, level, count, member_mib << 20);
    }
    std::fs::remove_dir_all(&dir).expect("remove the bench directory");
}

/// A new directory of our own under `base`, removed at the end.
fn bench_dir(base: &std::path::Path) -> std::path::PathBuf {
    let dir = base.join(format!("raidkit-degraded-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    dir
}

fn file(dir: &std::path::Path, name: &str, bytes: u64) -> Arc<dyn Member> {
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let opts = OpenOptions {
        create_size: Some(bytes),
        read_only: false,
    };
    member::open(path.to_str().expect("utf-8 path"), &opts).expect("member file")
}

fn read_all(v: &metadata::Volume) -> f64 {
    let mut buf = vec![0u8; READ_BYTES];
    let size = v.size_bytes();
    let start = Instant::now();
    let mut at = 0;
    while at < size {
        let n = (size - at).min(READ_BYTES as u64) as usize;
        v.read(at, &mut buf[..n]).expect("read");
        at += n as u64;
    }
    size as f64 / MIB / start.elapsed().as_secs_f64()
}

fn raw_write(dir: &std::path::Path, bytes: u64) -> f64 {
    let m = file(dir, "raw", bytes);
    let buf = vec![0x5au8; 4 << 20];
    let start = Instant::now();
    let mut at = 0;
    while at < bytes {
        let n = (bytes - at).min(buf.len() as u64) as usize;
        m.write_at(&buf[..n], at).expect("raw write");
        at += n as u64;
    }
    m.flush().expect("flush");
    bytes as f64 / MIB / start.elapsed().as_secs_f64()
}

fn run(dir: &std::path::Path, level: &str, count: usize, member_bytes: u64) {
    let members: Vec<Arc<dyn Member>> = (0..count)
        .map(|i| file(dir, &format!("{level}-{i}"), member_bytes))
        .collect();
    let opts = CreateOptions::new(level.parse().expect("level"), "bench");
    create(&members, &opts).expect("create");
    let v = assemble(members, &AssembleOptions::default()).expect("assemble");
    v.set_speed_limits(SpeedLimits {
        min_bytes_per_sec: u64::MAX / 4,
        max_bytes_per_sec: u64::MAX / 2,
    });
    let data: Vec<u8> = (0..READ_BYTES).map(|i| (i * 7 + 3) as u8).collect();
    let mut at = 0;
    while at < v.size_bytes() {
        let n = (v.size_bytes() - at).min(READ_BYTES as u64) as usize;
        v.write(at, &data[..n]).expect("fill");
        at += n as u64;
    }
    v.flush().expect("flush");
    let healthy = best_of(3, || read_all(&v));
    v.fail("role 1").expect("fail");
    let degraded = best_of(3, || read_all(&v));
    let data_bytes = v.array().geometry().member_data_bytes(1);
    let raw = raw_write(dir, data_bytes + (1 << 20));
    let spare = file(dir, &format!("{level}-spare"), member_bytes);
    let start = Instant::now();
    v.add(spare).expect("add");
    assert!(
        v.wait_idle(Duration::from_secs(3600)),
        "rebuild did not finish"
    );
    let rebuild = data_bytes as f64 / MIB / start.elapsed().as_secs_f64();
    assert!(v.array().check().expect("check").is_consistent());
    v.close().expect("close");
    println!(
        "| {level} | {count} | {healthy:.0} | {degraded:.0} | {:.0}% | {raw:.0} | {rebuild:.0} | {:.0}% |",
        100.0 * degraded / healthy,
        100.0 * rebuild / raw
    );
}

fn best_of(rounds: usize, mut f: impl FnMut() -> f64) -> f64 {
    (0..rounds).map(|_| f()).fold(0.0, f64::max)
}

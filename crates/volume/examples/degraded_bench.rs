//! Degraded reads and rebuild, measured in one run on file members (docs/PERFORMANCE.md,
//! "Degraded reads and rebuild").
//!
//! For RAID 5 and RAID 6: sequential read throughput (1 MiB reads) of the healthy array and of
//! the same data with one member left out (reconstructing its share from parity), in
//! interleaved rounds; then an unthrottled rebuild of that member onto a fresh file (through
//! the volume: fail, remove, add, wait), against the raw sequential write speed (4 MiB
//! writes, one fdatasync at the end) of a fresh file of the same size in the same directory,
//! also interleaved. Best of 3 rounds each.
//!
//! Usage: `cargo run --release -p volume --example degraded_bench [DIR] [MEMBER_MIB]`
//! (files go in a new subdirectory of DIR, default the temporary directory, removed at
//! the end; 256 MiB members).

use std::sync::Arc;
use std::time::Instant;

use member::Member;
use ondisk::{create, CreateOptions};
use volume::{assemble, AssembleOptions};

mod common;
use common::{
    best_reads, best_rebuilds, new_file_member, raw_write, unthrottle_and_fill, view, MIB,
};

const READ_BYTES: usize = 1 << 20;
const ROUNDS: usize = 3;

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

fn read_all(array: &engine::Array) -> f64 {
    let mut buf = vec![0u8; READ_BYTES];
    let size = array.size_bytes();
    let start = Instant::now();
    let mut at = 0;
    while at < size {
        let n = (size - at).min(READ_BYTES as u64) as usize;
        array.read(at, &mut buf[..n]).expect("read");
        at += n as u64;
    }
    size as f64 / MIB / start.elapsed().as_secs_f64()
}

fn run(dir: &std::path::Path, level: &str, count: usize, member_bytes: u64) {
    let members: Vec<Arc<dyn Member>> = (0..count)
        .map(|i| new_file_member(&dir.join(format!("{level}-{i}")), member_bytes))
        .collect();
    let opts = CreateOptions::new(level.parse().expect("level"), "bench");
    create(&members, &opts).expect("create");
    let v = assemble(members.clone(), &AssembleOptions::default()).expect("assemble");
    unthrottle_and_fill(&v, READ_BYTES);
    let (healthy, degraded) = best_reads(
        ROUNDS,
        &view(&v, &members, None),
        &view(&v, &members, Some(1)),
        read_all,
    );
    let (raw, rebuild) = best_rebuilds(
        &v,
        ROUNDS,
        |_, bytes| raw_write(new_file_member(&dir.join("raw"), bytes).as_ref(), bytes),
        |round| new_file_member(&dir.join(format!("{level}-spare{round}")), member_bytes),
    );
    println!(
        "| {level} | {count} | {healthy:.0} | {degraded:.0} | {:.0}% | {raw:.0} | {rebuild:.0} | {:.0}% |",
        100.0 * degraded / healthy,
        100.0 * rebuild / raw
    );
}

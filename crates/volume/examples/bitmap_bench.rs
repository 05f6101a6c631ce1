//! Sequential writes through a `Volume` with the write-intent bitmap on vs off.
//!
//! `cargo run --release -p volume --example bitmap_bench -- [DIR] [MIB] [ROUNDS]`
//! creates RAID 1 (2 members), RAID 5 (3) and RAID 10 (4) arrays of file members in DIR
//! (default: a temporary directory under /work, members sparse; DIR `mem`: RAM members),
//! writes MIB MiB (default 1024) sequentially in 1 MiB requests, flushes, and reports MB/s.
//! Rounds alternate bitmap on / off and which of the two goes first; each round uses a fresh
//! array, so every region starts clean and pays for its bit. The overhead is the ratio of the
//! medians: of the wall-clock rate, and of the CPU time per GiB written (user + system, from
//! /proc/self/stat; the steadier figure on a shared machine).

use std::sync::Arc;
use std::time::Instant;

use layout::Level;
use member::{Member, OpenOptions};
use ondisk::{create, CreateOptions};
use volume::{assemble, AssembleOptions};

#[allow(dead_code)] // the benchmarks' shared helpers; this one uses few of them
mod common;

const REQUEST_BYTES: usize = 1 << 20;
/// DIR `mem`: RAM members (the cheapest data path, so the largest relative overhead).
static RAM: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn make_members(
    dir: &std::path::Path,
    tag: &str,
    count: usize,
    bytes: u64,
) -> Vec<Arc<dyn Member>> {
    (0..count)
        .map(|i| {
            if RAM.load(std::sync::atomic::Ordering::Relaxed) {
                let spec = format!("mem:{bytes}");
                return member::open(&spec, &OpenOptions::default()).expect("RAM member");
            }
            common::new_file_member(&dir.join(format!("{tag}{i}")), bytes)
        })
        .collect()
}

/// CPU seconds (user + system) used by this process so far, from /proc/self/stat.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime (fields 14 and 15 of the line) are the 12th and 13th after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// One round: a fresh array, `total` bytes written sequentially, flushed; (MB/s, CPU ms per
/// GiB).
fn round(
    dir: &std::path::Path,
    level: Level,
    count: usize,
    total: u64,
    bitmap: bool,
) -> (f64, f64) {
    // The share of `total` each member holds, from the level's own geometry.
    let unit = 1 << 30;
    let g = layout::Geometry::new(level, layout::CHUNK_BYTES_DEFAULT, &vec![unit; count])
        .expect("bench geometry");
    let data_per_member = total * unit / g.size_bytes();
    let member_bytes = data_per_member + (3 << 20);
    let members = make_members(dir, if bitmap { "on" } else { "off" }, count, member_bytes);
    let mut opts = CreateOptions::new(level, "bench");
    if !bitmap {
        opts.bitmap_region_bytes = None;
    }
    create(&members, &opts).expect("create");
    let v = assemble(members, &AssembleOptions::default()).expect("assemble");
    let total = total.min(v.size_bytes()) / REQUEST_BYTES as u64 * REQUEST_BYTES as u64;
    let buf: Vec<u8> = (0..REQUEST_BYTES).map(|i| (i * 7 + 1) as u8).collect();
    let started = Instant::now();
    let cpu_started = cpu_secs();
    let mut at = 0;
    while at < total {
        v.write(at, &buf).expect("write");
        at += REQUEST_BYTES as u64;
    }
    v.flush().expect("flush");
    let secs = started.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu_started;
    if bitmap {
        let b = v.bitmap_status().expect("bitmap");
        assert!(b.block_writes > 0, "bits were set");
    }
    v.close().expect("close");
    let gib = total as f64 / (1u64 << 30) as f64;
    (total as f64 / secs / 1e6, cpu * 1e3 / gib)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut base = args.get(1).cloned().unwrap_or_else(|| "/work".into());
    if base == "mem" {
        RAM.store(true, std::sync::atomic::Ordering::Relaxed);
        base = std::env::temp_dir().to_string_lossy().into_owned();
    }
    let mib: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let rounds: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(5);
    let dir = tempfile::Builder::new()
        .prefix("bitmap-bench")
        .tempdir_in(&base)
        .expect("temporary directory");
    println!(
        "sequential 1 MiB writes, {mib} MiB per round, {rounds} rounds each, members in {base}"
    );
    println!(
        "{:<10} {:>9} {:>9} {:>9} {:>12} {:>12} {:>9}",
        "array", "off MB/s", "on MB/s", "wall", "off CPU ms", "on CPU ms", "CPU"
    );
    for (level, count) in [(Level::Raid1, 2), (Level::Raid5, 3), (Level::Raid10, 4)] {
        let (mut on, mut off) = (Vec::new(), Vec::new());
        // Alternate which goes first, so neither always runs on a warmer machine.
        for i in 0..rounds {
            for bitmap in [i % 2 == 0, i % 2 != 0] {
                let result = round(dir.path(), level, count, mib << 20, bitmap);
                if bitmap {
                    on.push(result)
                } else {
                    off.push(result)
                }
            }
        }
        let split = |v: &[(f64, f64)]| -> (f64, f64) {
            (
                median(v.iter().map(|x| x.0).collect()),
                median(v.iter().map(|x| x.1).collect()),
            )
        };
        let ((off_mbs, off_cpu), (on_mbs, on_cpu)) = (split(&off), split(&on));
        println!(
            "{:<10} {:>9.0} {:>9.0} {:>8.1}% {:>12.0} {:>12.0} {:>8.1}%",
            format!("{level} x{count}"),
            off_mbs,
            on_mbs,
            (off_mbs / on_mbs - 1.0) * 100.0,
            off_cpu,
            on_cpu,
            (on_cpu / off_cpu - 1.0) * 100.0
        );
    }
}

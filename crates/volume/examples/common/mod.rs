//! What the volume benchmarks share.

use std::sync::Arc;

use member::{Member, OpenOptions, Window};

/// A new file member of `bytes` at `path` (an old file there is replaced).
#[allow(dead_code)] // rebuild_bench opens its members by URI
pub fn new_file_member(path: &std::path::Path, bytes: u64) -> Arc<dyn Member> {
    let _ = std::fs::remove_file(path);
    let opts = OpenOptions {
        create_size: Some(bytes),
        read_only: false,
        ..OpenOptions::default()
    };
    member::open(path.to_str().expect("utf-8 path"), &opts).expect("open member")
}

/// A second engine array over the data areas of `v`'s `members` (in role order), with
/// `missing` left out: the benchmarks time degraded reads and rebuild steps on it without
/// touching the volume's own state.
pub fn view(
    v: &volume::Volume,
    members: &[Arc<dyn Member>],
    missing: Option<usize>,
) -> engine::Array {
    let g = v.geometry();
    let config = engine::ArrayConfig {
        level: g.level(),
        chunk_bytes: g.chunk_bytes(),
        member_count: g.member_count(),
        member_data_bytes: (0..g.member_count())
            .map(|r| g.member_data_bytes(r))
            .collect(),
    };
    let data_area = |r: usize| -> Arc<dyn Member> {
        let m = Arc::clone(&members[r]);
        let sb = ondisk::read_superblock(m.as_ref()).expect("superblock");
        Arc::new(Window::new(m, sb.data_offset_bytes, g.member_data_bytes(r)))
    };
    let members = (0..g.member_count())
        .map(|r| (Some(r) != missing).then(|| data_area(r)))
        .collect();
    engine::Array::new(config, members).expect("array view")
}

pub const MIB: f64 = 1048576.0;

/// Lets background work run unthrottled, then writes the whole of `v` (a pattern, in
/// `chunk_bytes` writes) and flushes it.
pub fn unthrottle_and_fill(v: &volume::Volume, chunk_bytes: usize) {
    v.set_speed_limits(volume::SpeedLimits {
        min_bytes_per_sec: u64::MAX / 4,
        max_bytes_per_sec: u64::MAX / 2,
    });
    let data: Vec<u8> = (0..chunk_bytes).map(|i| (i * 7 + 3) as u8).collect();
    let mut at = 0;
    while at < v.size_bytes() {
        let n = (v.size_bytes() - at).min(data.len() as u64) as usize;
        v.write(at, &data[..n]).expect("fill");
        at += n as u64;
    }
    v.flush().expect("flush");
}

/// The best MiB/s of `rounds` whole-array reads (`read_all`) of `healthy` and of `degraded`,
/// interleaved: background load on the machine then hits both alike.
pub fn best_reads(
    rounds: usize,
    healthy: &engine::Array,
    degraded: &engine::Array,
    read_all: fn(&engine::Array) -> f64,
) -> (f64, f64) {
    let (mut healthy_best, mut degraded_best) = (0f64, 0f64);
    for _ in 0..rounds {
        healthy_best = healthy_best.max(read_all(healthy));
        degraded_best = degraded_best.max(read_all(degraded));
    }
    (healthy_best, degraded_best)
}

/// The best MiB/s of `rounds` raw writes of role 1's data size (`raw`, given the round and the
/// size) and of rebuilds of role 1 onto a fresh member (`spare`, given the round) through the
/// volume (fail, remove, add, wait), interleaved; then checks the array and closes it.
pub fn best_rebuilds(
    v: &volume::Volume,
    rounds: usize,
    mut raw: impl FnMut(usize, u64) -> f64,
    mut spare: impl FnMut(usize) -> std::sync::Arc<dyn member::Member>,
) -> (f64, f64) {
    let data_bytes = v.geometry().member_data_bytes(1);
    let (mut raw_best, mut rebuild_best) = (0f64, 0f64);
    for round in 0..rounds {
        raw_best = raw_best.max(raw(round, data_bytes));
        v.fail("role 1").expect("fail");
        v.remove("role 1").expect("remove");
        let spare = spare(round);
        let start = std::time::Instant::now();
        v.add(spare).expect("add");
        assert!(
            v.wait_idle(std::time::Duration::from_secs(3600)),
            "rebuild did not finish"
        );
        rebuild_best = rebuild_best.max(data_bytes as f64 / MIB / start.elapsed().as_secs_f64());
    }
    assert!(v.check().expect("check").is_consistent());
    v.close().expect("close");
    (raw_best, rebuild_best)
}

/// MiB/s of writing `bytes` to `m` in 4 MiB writes one after another, then a flush.
pub fn raw_write(m: &dyn member::Member, bytes: u64) -> f64 {
    let buf = vec![0x5au8; 4 << 20];
    let start = std::time::Instant::now();
    let mut at = 0;
    while at < bytes {
        let n = (bytes - at).min(buf.len() as u64) as usize;
        m.write_at(&buf[..n], at).expect("raw write");
        at += n as u64;
    }
    m.flush().expect("flush");
    bytes as f64 / MIB / start.elapsed().as_secs_f64()
}

//! Reference-model test: seeded random reads (random and sequential), writes, trims,
//! write-zeroes and cache hints against a flat `Vec` image, through a tiny cache (8 blocks, so
//! almost every insert evicts) with read-ahead off, on and adaptive racing in the background.
//! Every read must equal the model, and the cache's memory must stay within its limit after
//! every operation. Replay one seed with `RAIDKIT_SEED=N`.

mod common;

use cache::{CacheConfig, ReadAhead, ReadCache};
use common::{seeds, small_config, MemExport, Rng, SeedGuard};
use nbd::Export;
use std::time::{Duration, Instant};

const BLOCK: u64 = 4096;
/// Not a whole number of blocks: the last block is partial.
const SIZE: u64 = 256 * 1024 + 1234;

fn tiny_config(mode: ReadAhead) -> CacheConfig {
    small_config(8, mode)
}

/// A random range `[offset, offset + len)` inside the export, `len` in `1..=max_len`.
fn range(rng: &mut Rng, max_len: u64) -> (u64, u64) {
    let offset = rng.below(SIZE);
    let len = 1 + rng.below(max_len.min(SIZE - offset));
    (offset, len)
}

fn random_bytes(rng: &mut Rng, len: u64) -> Vec<u8> {
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

fn check_read(cache: &ReadCache<MemExport>, model: &[u8], offset: u64, len: u64, step: u64) {
    let mut buf = vec![0xEE; len as usize];
    cache.read(offset, &mut buf).expect("read");
    let want = &model[offset as usize..(offset + len) as usize];
    if let Some(at) = testsupport::first_difference(&buf, want) {
        panic!(
            "step {step}: read [{offset}, +{len}) differs from the model at byte {}",
            offset + at as u64
        );
    }
}

/// One random operation; `seq` is the position of the sequential reader.
fn step(cache: &ReadCache<MemExport>, model: &mut [u8], rng: &mut Rng, seq: &mut u64, n: u64) {
    match rng.below(100) {
        0..=34 => {
            let (offset, len) = range(rng, 24 * 1024);
            check_read(cache, model, offset, len, n);
        }
        35..=59 => {
            let len = (4096 * (1 + rng.below(4))).min(SIZE - *seq);
            check_read(cache, model, *seq, len, n);
            *seq = if *seq + len >= SIZE { 0 } else { *seq + len };
        }
        60..=79 => {
            let (offset, len) = range(rng, 20 * 1024);
            let data = random_bytes(rng, len);
            cache.write(offset, &data, rng.chance(10)).expect("write");
            model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
        }
        80..=86 => {
            let (offset, len) = range(rng, 40 * 1024);
            cache.trim(offset, len).expect("trim");
            model[offset as usize..(offset + len) as usize].fill(0);
        }
        87..=93 => {
            let (offset, len) = range(rng, 40 * 1024);
            cache.write_zeroes(offset, len, true).expect("write_zeroes");
            model[offset as usize..(offset + len) as usize].fill(0);
        }
        94..=97 => {
            let (offset, len) = range(rng, 64 * 1024);
            cache.cache(offset, len).expect("cache hint");
        }
        _ => cache.flush().expect("flush"),
    }
}

fn run(seed: u64, mode: ReadAhead, ops: u64) {
    let _guard = SeedGuard(seed, "model test");
    let mut rng = Rng::new(seed);
    let mut model = random_bytes(&mut rng, SIZE);
    let export = MemExport::with_data(model.clone());
    let cache = ReadCache::new(export, tiny_config(mode)).expect("valid config");
    let mut seq = 0;
    for n in 0..ops {
        step(&cache, &mut model, &mut rng, &mut seq, n);
        let stats = cache.stats();
        assert!(
            stats.allocated_bytes <= stats.capacity_bytes,
            "step {n}: {stats:?}"
        );
        assert!(stats.resident_blocks * BLOCK <= stats.allocated_bytes);
    }
    check_read(&cache, &model, 0, SIZE, ops);
    assert!(
        cache.inner().contents() == model,
        "export below differs from the model"
    );
    let stats = cache.stats();
    assert!(stats.evictions > 0 && stats.hits > 0, "{stats:?}");
    if mode != ReadAhead::Off {
        // On a loaded machine the workers may have lagged the whole run (their jobs then
        // found the blocks cached, or the full queue dropped them): read a stream from an
        // emptied cache, pausing after each read so the workers can get ahead of it, until
        // one prefetch lands. (Waiting without reading could wait for nothing: a dropped job
        // is offered again only by the stream's next read.)
        cache.invalidate_all();
        let deadline = Instant::now() + Duration::from_secs(20);
        let blocks = SIZE / BLOCK;
        let mut block = 0;
        while cache.stats().prefetched_bytes == 0 && Instant::now() < deadline {
            check_read(&cache, &model, block * BLOCK, BLOCK, ops);
            block = (block + 1) % blocks;
            std::thread::sleep(Duration::from_millis(5));
        }
        let stats = cache.stats();
        assert!(
            stats.prefetched_bytes > 0,
            "{mode}: no read-ahead: {stats:?}"
        );
    }
}

#[test]
fn reads_match_model_without_read_ahead() {
    for seed in seeds(1000, 12) {
        run(seed, ReadAhead::Off, 3000);
    }
}

#[test]
fn reads_match_model_with_read_ahead_on() {
    for seed in seeds(2000, 12) {
        run(seed, ReadAhead::On, 3000);
    }
}

#[test]
fn reads_match_model_with_adaptive_read_ahead() {
    for seed in seeds(3000, 12) {
        run(seed, ReadAhead::Adaptive, 3000);
    }
}

#[test]
fn size_zero_is_a_pass_through() {
    let mut rng = Rng::new(7);
    let data = random_bytes(&mut rng, SIZE);
    let cache = ReadCache::new(MemExport::with_data(data.clone()), CacheConfig::disabled())
        .expect("disabled config is valid");
    for _ in 0..100 {
        let (offset, len) = range(&mut rng, 64 * 1024);
        check_read(&cache, &data, offset, len, 0);
    }
    let reads = cache
        .inner()
        .reads
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(reads, 100, "every read went below");
    assert_eq!(cache.stats(), cache::CacheStats::default());
}

#[test]
fn memory_stays_bounded_under_large_reads() {
    let config = CacheConfig {
        size_bytes: 1 << 20,
        block_bytes: 64 << 10,
        window_bytes: 256 << 10,
        // `on`: reads as large as the window bypass the cache in the other modes.
        read_ahead: ReadAhead::On,
        ..CacheConfig::default()
    };
    let size = 16 << 20;
    let cache = ReadCache::new(MemExport::new(size), config).expect("valid config");
    let mut buf = vec![0; 4 << 20];
    for round in 0..8u64 {
        let offset = (round * (3 << 20) + 4096) % (size as u64 - buf.len() as u64);
        cache.read(offset, &mut buf).expect("read");
        let stats = cache.stats();
        assert!(stats.allocated_bytes <= 1 << 20, "{stats:?}");
        assert!(stats.capacity_bytes == 1 << 20);
    }
    assert!(cache.stats().evictions > 0);
}

//! Read-ahead decisions seen through the stats: adaptive mode reads ahead for sequential
//! streams and not for random reads, `on` always does, `off` never; read-ahead never reads past
//! the end of the export; and a scan with read-ahead does not flush re-used blocks (2Q).

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cache::{CacheConfig, CacheStats, ReadAhead, ReadCache};
use common::{pattern, seeds, PatternExport, Rng, SeedGuard};
use nbd::Export;

const K: u64 = 1024;
const READ: u64 = 128 * K;

fn config(mode: ReadAhead) -> CacheConfig {
    CacheConfig {
        size_bytes: 8 << 20,
        block_bytes: 64 * K,
        read_ahead: mode,
        window_bytes: 1 << 20,
        ..CacheConfig::default()
    }
}

fn cache(mode: ReadAhead, size: u64) -> ReadCache<PatternExport> {
    ReadCache::new(PatternExport::new(size), config(mode)).expect("valid config")
}

fn read_checked(cache: &ReadCache<PatternExport>, offset: u64, len: u64) {
    let mut buf = vec![0; len as usize];
    cache.read(offset, &mut buf).expect("read");
    for (i, byte) in buf.iter().enumerate() {
        assert_eq!(
            *byte,
            pattern(offset + i as u64),
            "byte {}",
            offset + i as u64
        );
    }
}

/// Waits (bounded) until `done(stats)`; returns the last stats.
fn wait_for(cache: &ReadCache<PatternExport>, done: impl Fn(&CacheStats) -> bool) -> CacheStats {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = cache.stats();
        if done(&stats) || Instant::now() > deadline {
            return stats;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn random_reads(cache: &ReadCache<PatternExport>, seed: u64, count: u64) {
    let mut rng = Rng::new(seed);
    let slots = cache.size() / READ;
    for _ in 0..count {
        read_checked(cache, rng.below(slots) * READ, READ);
    }
}

#[test]
fn adaptive_reads_ahead_of_a_sequential_stream() {
    let cache = cache(ReadAhead::Adaptive, 64 << 30);
    read_checked(&cache, 0, READ);
    assert_eq!(cache.stats().prefetch_jobs, 0, "one read is not a stream");
    read_checked(&cache, READ, READ);
    let stats = wait_for(&cache, |s| s.prefetched_bytes >= 1 << 20);
    assert_eq!(stats.prefetch_jobs, 4, "a window in 4 pieces: {stats:?}");
    assert_eq!(stats.prefetched_bytes, 1 << 20, "the window after the read");
    let inner_reads = cache.inner().reads.load(Ordering::SeqCst);
    for i in 2..10 {
        read_checked(&cache, i * READ, READ);
    }
    let stats = wait_for(&cache, |s| s.prefetch_hits >= 16);
    assert_eq!(
        stats.prefetch_hits, 16,
        "8 reads of 2 prefetched blocks: {stats:?}"
    );
    let demand = stats.misses;
    assert_eq!(demand, 4, "only the first two reads missed: {stats:?}");
    // Reads kept the window ahead: new read-ahead jobs, but no demand read went below.
    assert!(stats.prefetch_jobs >= 6, "{stats:?}");
    let stats = wait_for(&cache, |s| s.prefetched_bytes > 1 << 20);
    assert!(stats.prefetched_bytes > 1 << 20, "{stats:?}");
    assert!(cache.inner().reads.load(Ordering::SeqCst) > inner_reads);
}

#[test]
fn adaptive_stays_off_for_random_reads_and_stops_when_access_turns_random() {
    for seed in seeds(50, 3) {
        let _guard = SeedGuard(seed, "adaptive random test");
        let cache = cache(ReadAhead::Adaptive, 64 << 30);
        random_reads(&cache, seed, 200);
        let stats = cache.stats();
        assert_eq!(
            (stats.prefetch_jobs, stats.prefetched_bytes),
            (0, 0),
            "{stats:?}"
        );
        for i in 0..20 {
            read_checked(&cache, (1 << 30) + i * READ, READ);
        }
        let jobs = wait_for(&cache, |s| s.prefetched_bytes > 0).prefetch_jobs;
        assert!(jobs > 0, "a sequential stream turns read-ahead on");
        random_reads(&cache, seed + 1, 200);
        assert_eq!(
            cache.stats().prefetch_jobs,
            jobs,
            "random reads turn it off again"
        );
    }
}

#[test]
fn on_always_reads_ahead_and_off_never_does() {
    let on = cache(ReadAhead::On, 64 << 30);
    random_reads(&on, 5, 20);
    let stats = on.stats();
    assert!(
        stats.prefetch_jobs + stats.prefetch_dropped >= 20,
        "{stats:?}"
    );
    let off = cache(ReadAhead::Off, 64 << 30);
    for i in 0..50 {
        read_checked(&off, i * READ, READ);
    }
    random_reads(&off, 6, 20);
    let stats = off.stats();
    assert_eq!(
        (stats.prefetch_jobs, stats.prefetched_bytes),
        (0, 0),
        "{stats:?}"
    );
    assert!(stats.hits == 0 && stats.misses == 140, "{stats:?}");
}

#[test]
fn read_ahead_never_reads_past_the_end() {
    for mode in [ReadAhead::On, ReadAhead::Adaptive] {
        let size = (3 << 20) + 5000;
        let cache = cache(mode, size);
        // A hint reaching far past the end fetches only up to it.
        cache.cache(size - 10_000, 1 << 30).expect("cache hint");
        let first_block_offset = (size - 10_000) / (64 * K) * (64 * K);
        let stats = wait_for(&cache, |s| s.prefetched_bytes >= size - first_block_offset);
        assert_eq!(
            stats.prefetched_bytes,
            size - first_block_offset,
            "{mode}: {stats:?}"
        );
        // Sequential reads to the end: every window is cut at the end.
        let mut offset = 0;
        while offset < size {
            let len = READ.min(size - offset);
            read_checked(&cache, offset, len);
            offset += len;
        }
        let stats = cache.stats();
        let inner = cache.into_inner(); // joins the workers
        assert_eq!(
            inner.overruns.load(Ordering::SeqCst),
            0,
            "{mode}: {stats:?}"
        );
        assert_eq!(stats.prefetch_errors, 0, "{mode}: {stats:?}");
    }
}

#[test]
fn a_scan_does_not_flush_reused_blocks() {
    for mode in [ReadAhead::Off, ReadAhead::Adaptive] {
        // 16 shards of 8 blocks; the hot set has one block per shard.
        let cache = cache(mode, 64 << 30);
        let block = 64 * K;
        let read_blocks = |first: u64, count: u64| {
            for i in first..first + count {
                read_checked(&cache, i * block, block);
            }
        };
        read_blocks(0, 16);
        // 8 more blocks per shard: each hot block leaves the probation FIFO (a ghost)...
        read_blocks(1000, 128);
        // ...so reading it again makes it "re-used" (main LRU).
        read_blocks(0, 16);
        // A sequential scan of 4x the cache (with read-ahead in adaptive mode).
        read_blocks(5000, 512);
        wait_for(&cache, |s| s.prefetch_jobs == 0 || s.prefetched_bytes > 0);
        let before = cache.stats().hits;
        read_blocks(0, 16);
        let stats = cache.stats();
        assert_eq!(
            stats.hits,
            before + 16,
            "{mode}: hot blocks survived: {stats:?}"
        );
    }
}

/// Bytes the export below has been asked for so far.
fn below(cache: &ReadCache<PatternExport>) -> u64 {
    cache.inner().read_bytes.load(Ordering::SeqCst)
}

#[test]
fn random_misses_read_exactly_the_request_and_large_reads_bypass() {
    let cache = cache(ReadAhead::Adaptive, 64 << 30);
    let block = 64 * K;
    // A 4 KiB random miss reads 4 KiB below (not its 64 KiB block) and caches nothing.
    read_checked(&cache, (7 << 30) + 5000, 4 * K);
    assert_eq!(below(&cache), 4 * K);
    assert_eq!(cache.stats().resident_blocks, 0);
    // An unaligned 200 KiB miss reads 200 KiB and caches the 2 blocks it fully covers.
    let offset = (9 << 30) + 3 * K;
    read_checked(&cache, offset, 200 * K);
    assert_eq!(below(&cache), 204 * K);
    assert_eq!(cache.stats().resident_blocks, 2, "{:?}", cache.stats());
    // Those blocks hit; a read that is partly cached reads below only the rest.
    read_checked(&cache, offset - 3 * K + block, block);
    assert_eq!(below(&cache), 204 * K, "a hit reads nothing below");
    read_checked(&cache, offset - 3 * K + block - 8 * K, 16 * K);
    assert_eq!(below(&cache), 212 * K, "8 KiB missed, 8 KiB hit");
    // A read as long as the window goes straight below, uncached, and is not a stream.
    let stats = cache.stats();
    for i in 0..4 {
        read_checked(&cache, (20 << 30) + i * (1 << 20), 1 << 20);
    }
    assert_eq!(below(&cache), 212 * K + (4 << 20));
    let after = cache.stats();
    assert_eq!(
        (after.resident_blocks, after.misses, after.prefetch_jobs),
        (stats.resident_blocks, stats.misses, 0),
        "{after:?}"
    );
}

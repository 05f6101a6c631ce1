//! A failing export below: failed writes (clean or torn) must leave the cache claiming
//! nothing about the range, failed reads must cache nothing, failed read-ahead must release
//! the blocks it claimed (no reader waits forever), and under seeded random faults every read
//! that succeeds equals what the export below holds. Replay with `RAIDKIT_SEED=N`.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cache::{CacheConfig, ReadAhead, ReadCache};
use common::{seeds, small_config, MemExport, Rng, SeedGuard};
use nbd::Export;

const BLOCK: u64 = 4096;
const SIZE: u64 = 128 * 1024;

fn config(mode: ReadAhead) -> CacheConfig {
    small_config(16, mode)
}

fn filled(seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..SIZE).map(|_| rng.next_u64() as u8).collect()
}

/// Reads `[offset, offset + len)` through the cache and compares with the export below.
fn agrees(cache: &ReadCache<MemExport>, offset: u64, len: u64) {
    let mut buf = vec![0; len as usize];
    cache.read(offset, &mut buf).expect("read with faults off");
    let truth = cache.inner().contents();
    let want = &truth[offset as usize..(offset + len) as usize];
    assert!(
        buf == want,
        "cache disagrees with the export in [{offset}, +{len})"
    );
}

#[test]
fn a_failed_write_leaves_nothing_claimed() {
    for tear in [false, true] {
        let cache = ReadCache::new(MemExport::with_data(filled(1)), config(ReadAhead::Off))
            .expect("valid config");
        agrees(&cache, 0, SIZE); // the whole export is now cached (and evicting)
        agrees(&cache, 8 * BLOCK, 8 * BLOCK);
        let inner = cache.inner();
        inner.tear_writes.store(tear, Ordering::SeqCst);
        inner.fail_writes.store(true, Ordering::SeqCst);
        let new = vec![0xAB; (6 * BLOCK) as usize];
        assert!(cache.write(9 * BLOCK + 100, &new, false).is_err());
        assert!(cache.write_zeroes(12 * BLOCK, BLOCK, false).is_err());
        assert!(cache.trim(10 * BLOCK, 3 * BLOCK).is_err());
        inner.fail_writes.store(false, Ordering::SeqCst);
        agrees(&cache, 0, SIZE);
        assert!(cache.stats().invalidations > 0);
    }
}

/// A range below that cannot be read fails exactly the client reads that touch it: a
/// streaming read whose whole-block read below fails is served from its own part alone
/// (before, every read of a block with an unreadable byte failed once read-ahead saw a
/// stream).
#[test]
fn an_unreadable_range_fails_only_the_reads_that_touch_it() {
    for mode in [ReadAhead::On, ReadAhead::Adaptive, ReadAhead::Off] {
        let cache =
            ReadCache::new(MemExport::with_data(filled(4)), config(mode)).expect("valid config");
        let (bad, bad_len) = (2 * BLOCK + 2048, 512);
        *cache.inner().fail_range.lock().unwrap() = Some((bad, bad_len));
        let truth = cache.inner().contents();
        for at in (0..4 * BLOCK).step_by(1000) {
            let len = 1000.min(4 * BLOCK - at);
            let mut buf = vec![0; len as usize];
            let touches = at < bad + bad_len && bad < at + len;
            match cache.read(at, &mut buf) {
                Ok(()) => {
                    assert!(
                        !touches,
                        "{mode:?}: read at {at} touches the range yet succeeded"
                    );
                    assert!(
                        buf[..] == truth[at as usize..(at + len) as usize],
                        "{mode:?} {at}"
                    );
                }
                Err(_) => assert!(touches, "{mode:?}: read at {at} failed"),
            }
        }
    }
}

#[test]
fn a_failed_read_caches_nothing() {
    let cache = ReadCache::new(MemExport::with_data(filled(2)), config(ReadAhead::Off))
        .expect("valid config");
    cache.inner().fail_reads.store(true, Ordering::SeqCst);
    let mut buf = vec![0; (3 * BLOCK) as usize];
    assert!(cache.read(BLOCK, &mut buf).is_err());
    assert_eq!(cache.stats().resident_blocks, 0);
    cache.inner().fail_reads.store(false, Ordering::SeqCst);
    agrees(&cache, BLOCK, 3 * BLOCK);
    assert_eq!(cache.stats().resident_blocks, 3);
}

#[test]
fn failed_read_ahead_releases_its_blocks() {
    let cache = ReadCache::new(MemExport::with_data(filled(3)), config(ReadAhead::On))
        .expect("valid config");
    cache.inner().fail_reads.store(true, Ordering::SeqCst);
    let mut buf = vec![0; BLOCK as usize];
    assert!(cache.read(0, &mut buf).is_err());
    let deadline = Instant::now() + Duration::from_secs(20);
    while cache.stats().prefetch_errors == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(cache.stats().prefetch_errors > 0, "{:?}", cache.stats());
    cache.inner().fail_reads.store(false, Ordering::SeqCst);
    // The blocks read-ahead failed on are readable (no reader waits on a stale claim).
    agrees(&cache, 0, 8 * BLOCK);
}

/// One random operation, run with faults on when `faulty`; errors are expected then.
fn step(cache: &ReadCache<MemExport>, rng: &mut Rng, faulty: bool) {
    let inner = cache.inner();
    inner
        .fail_reads
        .store(faulty && rng.chance(50), Ordering::SeqCst);
    inner.fail_writes.store(faulty, Ordering::SeqCst);
    inner.tear_writes.store(rng.chance(50), Ordering::SeqCst);
    let offset = rng.below(SIZE);
    let len = 1 + rng.below((8 * BLOCK).min(SIZE - offset));
    let result = match rng.below(10) {
        0..=4 => cache.read(offset, &mut vec![0; len as usize]),
        5..=7 => {
            let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            cache.write(offset, &data, false)
        }
        8 => cache.trim(offset, len),
        _ => cache.write_zeroes(offset, len, false),
    };
    inner.fail_reads.store(false, Ordering::SeqCst);
    inner.fail_writes.store(false, Ordering::SeqCst);
    if !faulty {
        result.expect("operation without faults");
    }
}

#[test]
fn random_faults_never_make_the_cache_disagree() {
    for seed in seeds(500, 8) {
        let _guard = SeedGuard(seed, "fault test");
        for mode in [ReadAhead::Off, ReadAhead::Adaptive] {
            let mut rng = Rng::new(seed);
            let cache = ReadCache::new(MemExport::with_data(filled(seed)), config(mode))
                .expect("valid config");
            for _ in 0..1500 {
                let faulty = rng.chance(15);
                step(&cache, &mut rng, faulty);
                let offset = rng.below(SIZE);
                agrees(
                    &cache,
                    offset,
                    1 + rng.below((4 * BLOCK).min(SIZE - offset)),
                );
            }
            agrees(&cache, 0, SIZE);
        }
    }
}

#[test]
fn invalidate_forgets_changes_made_below() {
    let cache = ReadCache::new(MemExport::with_data(filled(4)), config(ReadAhead::Off))
        .expect("valid config");
    agrees(&cache, 0, 8 * BLOCK);
    // A repair below the cache: the cache still serves the old bytes until told.
    cache
        .inner()
        .write(BLOCK, &[0x5A; 100], false)
        .expect("write below");
    let mut buf = vec![0; 100];
    cache.read(BLOCK, &mut buf).expect("read");
    assert_ne!(buf, [0x5A; 100], "served from the cache");
    cache.invalidate(BLOCK + 50, 10);
    agrees(&cache, 0, 8 * BLOCK);
    cache
        .inner()
        .write(0, &[0xA5; 10], false)
        .expect("write below");
    cache.invalidate_all();
    agrees(&cache, 0, SIZE);
}

#[test]
fn dropping_the_cache_does_not_wait_for_queued_read_ahead() {
    let mut slow = MemExport::new(64 << 20);
    slow.read_latency = Duration::from_millis(200);
    let config = CacheConfig {
        size_bytes: 16 << 20,
        block_bytes: 64 << 10,
        read_ahead: ReadAhead::On,
        window_bytes: 1 << 20,
        prefetch_workers: 2,
        prefetch_queue: 16,
        streams: 4,
    };
    let cache = ReadCache::new(slow, config).expect("valid config");
    cache.cache(0, 64 << 20).expect("hint");
    let queued = cache.stats().prefetch_jobs;
    assert!(queued >= 16, "{:?}", cache.stats());
    std::thread::sleep(Duration::from_millis(20)); // the workers take their first jobs
    let start = Instant::now();
    drop(cache);
    let waited = start.elapsed();
    // Running jobs finish (one 200 ms read each); the other queued ones are dropped.
    assert!(
        waited < Duration::from_millis(1500),
        "drop waited {waited:?} for {queued} jobs"
    );
}

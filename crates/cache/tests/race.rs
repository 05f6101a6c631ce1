//! Coherence under concurrency: writer threads and reader threads (random and sequential, so
//! read-ahead races too) on overlapping blocks of a small cache.
//!
//! The check: every write stamps its regions (one cache block each) with a number from a
//! global counter, taken while the writer holds those regions' locks, so stamps only grow in
//! each region; after the write returns, `completed[region]` is raised to the stamp. A reader
//! notes `completed` for its regions *before* it starts; every region it then reads must be
//! one whole stamp (no torn block) at least that large — data older than a write that
//! completed before the read began is a failure. The same harness is run against a naive
//! cache that inserts without generation checks, to show that it does catch stale data.
//! Replay with `RAIDKIT_SEED=N`.

mod common;

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use cache::{CacheConfig, ReadAhead, ReadCache};
use common::{seeds, MemExport, Rng, SeedGuard};
use nbd::Export;

const REGION: u64 = 4096;
const REGIONS: u64 = 64;
const WRITES_PER_WRITER: u64 = 2500;

struct Shared {
    export: Arc<dyn Export>,
    locks: Vec<Mutex<()>>,
    completed: Vec<AtomicU64>,
    counter: AtomicU64,
    /// Reads completed, so writers can wait for readers to keep up (see `writer`).
    reads: AtomicU64,
    done: AtomicBool,
    failure: Mutex<Option<String>>,
}

impl Shared {
    fn fail(&self, message: String) {
        self.failure.lock().unwrap().get_or_insert(message);
        self.done.store(true, Ordering::SeqCst);
    }
}

/// Waits (bounded) until readers have completed `count` more reads.
fn wait_for_reads(shared: &Shared, count: u64, limit: Duration) {
    let target = shared.reads.load(Ordering::SeqCst) + count;
    let deadline = Instant::now() + limit;
    while shared.reads.load(Ordering::SeqCst) < target && Instant::now() < deadline {
        thread::yield_now();
    }
}

fn writer(shared: &Shared, seed: u64) {
    let mut rng = Rng::new(seed);
    // Writes interleave with reads even when the scheduler would let writers run ahead
    // (on 2 cores they can finish before a reader has cached anything, and then nothing races).
    wait_for_reads(shared, 20, Duration::from_secs(5));
    for i in 0..WRITES_PER_WRITER {
        if shared.done.load(Ordering::SeqCst) {
            return;
        }
        if i % 8 == 0 {
            wait_for_reads(shared, 1, Duration::from_millis(5));
        }
        let count = 1 + rng.below(3);
        let first = rng.below(REGIONS - count + 1);
        let _held: Vec<_> = (first..first + count)
            .map(|r| shared.locks[r as usize].lock().unwrap())
            .collect();
        let stamp = shared.counter.fetch_add(1, Ordering::SeqCst) + 1;
        let data: Vec<u8> = (0..count * REGION / 8)
            .flat_map(|_| stamp.to_le_bytes())
            .collect();
        if let Err(e) = shared.export.write(first * REGION, &data, false) {
            return shared.fail(format!("write failed: {e}"));
        }
        for r in first..first + count {
            shared.completed[r as usize].fetch_max(stamp, Ordering::SeqCst);
        }
    }
}

/// Reads regions `first..first + count` and checks them against `completed` noted before.
fn read_and_check(shared: &Shared, first: u64, count: u64) -> Result<(), String> {
    let floors: Vec<u64> = (first..first + count)
        .map(|r| shared.completed[r as usize].load(Ordering::SeqCst))
        .collect();
    let mut buf = vec![0; (count * REGION) as usize];
    shared
        .export
        .read(first * REGION, &mut buf)
        .map_err(|e| format!("read failed: {e}"))?;
    for (i, region) in buf.chunks(REGION as usize).enumerate() {
        let stamp = u64::from_le_bytes(region[..8].try_into().unwrap());
        if region.chunks(8).any(|w| w != stamp.to_le_bytes()) {
            return Err(format!("region {} torn", first + i as u64));
        }
        if stamp < floors[i] {
            return Err(format!(
                "region {}: read stamp {stamp}, but write {} had completed before the read",
                first + i as u64,
                floors[i]
            ));
        }
    }
    Ok(())
}

fn reader(shared: &Shared, seed: u64, sequential: bool) {
    let mut rng = Rng::new(seed);
    let mut next = 0;
    while !shared.done.load(Ordering::SeqCst) {
        let count = if sequential { 2 } else { 1 + rng.below(4) };
        let first = if sequential {
            let first = next;
            next = (next + count) % (REGIONS - 1);
            first
        } else {
            rng.below(REGIONS - count + 1)
        };
        if let Err(message) = read_and_check(shared, first, count) {
            return shared.fail(message);
        }
        shared.reads.fetch_add(1, Ordering::SeqCst);
    }
}

/// Runs 2 writers, 2 random readers and 2 sequential readers; the first violation, if any.
fn hammer(export: Arc<dyn Export>, seed: u64) -> Result<(), String> {
    let shared = Arc::new(Shared {
        export,
        locks: (0..REGIONS).map(|_| Mutex::new(())).collect(),
        completed: (0..REGIONS).map(|_| AtomicU64::new(0)).collect(),
        counter: AtomicU64::new(0),
        done: AtomicBool::new(false),
        reads: AtomicU64::new(0),
        failure: Mutex::new(None),
    });
    let readers: Vec<_> = (0..4)
        .map(|i| {
            let shared = Arc::clone(&shared);
            thread::spawn(move || reader(&shared, seed * 10 + i, i >= 2))
        })
        .collect();
    let writers: Vec<_> = (0..2)
        .map(|i| {
            let shared = Arc::clone(&shared);
            thread::spawn(move || writer(&shared, seed * 10 + 5 + i))
        })
        .collect();
    for handle in writers {
        handle.join().expect("writer panicked");
    }
    shared.done.store(true, Ordering::SeqCst);
    for handle in readers {
        handle.join().expect("reader panicked");
    }
    if let Some(message) = shared.failure.lock().unwrap().take() {
        return Err(message);
    }
    // Quiet now: every region must read exactly its last stamp.
    read_and_check(&shared, 0, REGIONS)
}

fn small_cache(mode: ReadAhead) -> CacheConfig {
    CacheConfig {
        size_bytes: 16 * REGION,
        block_bytes: REGION,
        read_ahead: mode,
        window_bytes: 4 * REGION,
        prefetch_workers: 2,
        prefetch_queue: 4,
        streams: 4,
    }
}

#[test]
fn reads_never_older_than_completed_writes() {
    for seed in seeds(1, 3) {
        let _guard = SeedGuard(seed, "race test");
        for mode in [ReadAhead::Adaptive, ReadAhead::On] {
            let inner = MemExport::new((REGIONS * REGION) as usize);
            let cache = Arc::new(ReadCache::new(inner, small_cache(mode)).unwrap());
            let result = hammer(Arc::clone(&cache) as Arc<dyn Export>, seed);
            let stats = cache.stats();
            assert_eq!(result, Ok(()), "{mode}: {stats:?}");
            assert!(stats.hits > 0 && stats.invalidations > 0, "{stats:?}");
        }
    }
}

/// Caches whole blocks with no generation check: a read that began before a write can
/// insert its old data after the write completed. To make that race happen on every run, not
/// only when the scheduler is unkind, a miss holds its data back until two more writes to the
/// block have completed (bounded wait): writes to one block are serialized by the harness, so
/// the second of them began after the miss had read, and the inserted data is older than it.
struct NaiveCache {
    inner: MemExport,
    blocks: Mutex<HashMap<u64, Vec<u8>>>,
    writes_done: Vec<AtomicU64>,
}

impl NaiveCache {
    fn new() -> Self {
        NaiveCache {
            inner: MemExport::new((REGIONS * REGION) as usize),
            blocks: Mutex::new(HashMap::new()),
            writes_done: (0..REGIONS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Waits (at most 20 ms) until `block` has seen `count` more completed writes.
    fn wait_for_writes(&self, block: u64, count: u64) {
        let done = &self.writes_done[block as usize];
        let target = done.load(Ordering::SeqCst) + count;
        let deadline = Instant::now() + Duration::from_millis(20);
        while done.load(Ordering::SeqCst) < target && Instant::now() < deadline {
            thread::sleep(Duration::from_micros(20));
        }
    }
}

impl Export for NaiveCache {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        for (i, chunk) in buf.chunks_mut(REGION as usize).enumerate() {
            let block = offset / REGION + i as u64;
            let cached = self.blocks.lock().unwrap().get(&block).cloned();
            if let Some(data) = cached {
                chunk.copy_from_slice(&data);
                continue;
            }
            self.inner.read(block * REGION, chunk)?;
            self.wait_for_writes(block, 2);
            self.blocks.lock().unwrap().insert(block, chunk.to_vec());
        }
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        let range = offset / REGION..(offset + data.len() as u64).div_ceil(REGION);
        let mut blocks = self.blocks.lock().unwrap();
        for b in range.clone() {
            blocks.remove(&b);
        }
        drop(blocks);
        self.inner.write(offset, data, fua)?;
        for b in range {
            self.writes_done[b as usize].fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> io::Result<()> {
        self.inner.write_zeroes(offset, len, may_trim)
    }
}

#[test]
fn the_check_catches_a_naive_cache() {
    let result = hammer(Arc::new(NaiveCache::new()), 99);
    let message = result.expect_err("a cache without generations serves stale data");
    assert!(
        message.contains("had completed before the read"),
        "{message}"
    );
}

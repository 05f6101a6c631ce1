//! [`CacheStats`]: counters for `raidkit status`, kept as atomics on the hot path.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of the cache's counters. Block counts are in cache blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CacheStats {
    /// Block lookups by client reads answered from memory.
    pub hits: u64,
    /// Block lookups by client reads that went to the export below.
    pub misses: u64,
    /// Hits on blocks brought in by read-ahead and not read by a client before.
    pub prefetch_hits: u64,
    /// Bytes read from the export below by read-ahead.
    pub prefetched_bytes: u64,
    /// Read-ahead jobs queued for a worker.
    pub prefetch_jobs: u64,
    /// Read-ahead jobs dropped because the queue was full.
    pub prefetch_dropped: u64,
    /// Read-ahead reads that failed (nothing was cached from them).
    pub prefetch_errors: u64,
    /// Blocks evicted to make room.
    pub evictions: u64,
    /// Cached blocks dropped because a write, trim or write-zeroes overlapped them.
    pub invalidations: u64,
    /// Blocks not cached because a write overlapped them while they were being read.
    pub stale_skips: u64,
    /// Blocks held now.
    pub resident_blocks: u64,
    /// Memory held by block buffers now (never above `capacity_bytes`).
    pub allocated_bytes: u64,
    /// The memory limit for block buffers (whole blocks of the configured size).
    pub capacity_bytes: u64,
}

/// The live counters behind [`CacheStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub prefetch_hits: AtomicU64,
    pub prefetched_bytes: AtomicU64,
    pub prefetch_jobs: AtomicU64,
    pub prefetch_dropped: AtomicU64,
    pub prefetch_errors: AtomicU64,
    pub evictions: AtomicU64,
    pub invalidations: AtomicU64,
    pub stale_skips: AtomicU64,
    pub resident_blocks: AtomicU64,
    pub allocated_bytes: AtomicU64,
}

/// Adds `n` to a counter (relaxed: counters order nothing).
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// Subtracts `n` from a gauge.
pub(crate) fn sub(counter: &AtomicU64, n: u64) {
    let before = counter.fetch_sub(n, Ordering::Relaxed);
    assert!(before >= n, "cache gauge below zero: {before} - {n}");
}

impl Counters {
    pub fn snapshot(&self, capacity_bytes: u64) -> CacheStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CacheStats {
            hits: get(&self.hits),
            misses: get(&self.misses),
            prefetch_hits: get(&self.prefetch_hits),
            prefetched_bytes: get(&self.prefetched_bytes),
            prefetch_jobs: get(&self.prefetch_jobs),
            prefetch_dropped: get(&self.prefetch_dropped),
            prefetch_errors: get(&self.prefetch_errors),
            evictions: get(&self.evictions),
            invalidations: get(&self.invalidations),
            stale_skips: get(&self.stale_skips),
            resident_blocks: get(&self.resident_blocks),
            allocated_bytes: get(&self.allocated_bytes),
            capacity_bytes,
        }
    }
}

//! The block store: cache blocks spread over shards (block `b` lives in shard `b % shards`),
//! with the counters.
//!
//! **Locking contract.** Each shard has one mutex guarding all its state (slots, 2Q lists,
//! generations, loading set) and a condition variable signalled when read-ahead finishes
//! loading blocks. A thread holds at most one shard lock at a time, never across I/O to the
//! export below, and never while waiting for anything but that condition variable. The
//! shard's generations are atomics ([`Gens`]) outside the lock: a write takes the lock only
//! when a block it overlaps may be cached.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::config::CacheConfig;
use crate::gens::Gens;
use crate::shard::{Insert, Lookup, Shard, Snapshot};
use crate::stats::{add, sub, CacheStats, Counters};

/// Shards at most (a power of two); fewer for tiny caches so each holds a block.
const SHARDS_MAX: u64 = 16;

#[derive(Debug)]
struct Cell {
    shard: Mutex<Shard>,
    loaded: Condvar,
    /// The shard's generations, also held by the shard.
    gens: Arc<Gens>,
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Store {
    block_bytes: u64,
    export_bytes: u64,
    capacity_bytes: u64,
    cells: Box<[Cell]>,
    pub counters: Counters,
}

impl Store {
    /// A store for an export of `export_bytes`; `config` must be valid and enabled.
    pub fn new(config: &CacheConfig, export_bytes: u64) -> Store {
        assert!(config.enabled() && config.validate().is_ok());
        let capacity = config.capacity_blocks();
        let mut shards = SHARDS_MAX.min(capacity);
        while !shards.is_power_of_two() {
            shards -= 1;
        }
        let cells = (0..shards)
            .map(|index| {
                let blocks = capacity / shards + u64::from(index < capacity % shards);
                let gens = Arc::new(Gens::new());
                let shard = Shard::new(config.block_bytes as usize, blocks as usize, gens.clone());
                Cell {
                    shard: Mutex::new(shard),
                    loaded: Condvar::new(),
                    gens,
                }
            })
            .collect();
        Store {
            block_bytes: config.block_bytes,
            export_bytes,
            capacity_bytes: capacity * config.block_bytes,
            cells,
            counters: Counters::default(),
        }
    }

    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    /// Blocks needed to cover the export.
    pub fn export_blocks(&self) -> u64 {
        self.export_bytes.div_ceil(self.block_bytes)
    }

    /// Bytes of `block` inside the export (less than a block only for the last one).
    pub fn block_len(&self, block: u64) -> usize {
        assert!(
            block < self.export_blocks(),
            "block {block} past the export"
        );
        let start = block * self.block_bytes;
        self.block_bytes.min(self.export_bytes - start) as usize
    }

    fn shard_count(&self) -> u64 {
        self.cells.len() as u64
    }

    fn route(&self, block: u64) -> (&Cell, u64) {
        let n = self.shard_count();
        (&self.cells[(block % n) as usize], block / n)
    }

    fn lock(cell: &Cell) -> MutexGuard<'_, Shard> {
        cell.shard
            .lock()
            .expect("cache shard lock poisoned by a panic")
    }

    /// Copies bytes `within` of `block` into `dst` if cached, waiting while read-ahead loads
    /// it. Returns `None` on a hit, or the snapshot to insert with after reading below.
    pub fn lookup(&self, block: u64, within: Range<usize>, dst: &mut [u8]) -> Option<Snapshot> {
        assert!(within.end <= self.block_len(block));
        let (cell, local) = self.route(block);
        let mut shard = Self::lock(cell);
        loop {
            match shard.lookup(local, within.clone(), dst) {
                Lookup::Loading => {
                    shard = cell.loaded.wait(shard).expect("cache shard lock poisoned");
                }
                Lookup::Hit { prefetched } => {
                    add(&self.counters.hits, 1);
                    add(&self.counters.prefetch_hits, u64::from(prefetched));
                    return None;
                }
                Lookup::Miss(snapshot) => {
                    add(&self.counters.misses, 1);
                    return Some(snapshot);
                }
            }
        }
    }

    /// Caches `data` as `block` (its whole in-export length) unless a write overlapped it
    /// since `snapshot`.
    pub fn insert(&self, block: u64, data: &[u8], snapshot: Snapshot, prefetched: bool) {
        assert_eq!(data.len(), self.block_len(block));
        let (cell, local) = self.route(block);
        // The gauges change under the shard lock, so that a write dropping this block (under
        // the same lock, later) subtracts only after it was added.
        let mut shard = Self::lock(cell);
        let outcome = shard.insert(local, data, snapshot, prefetched);
        match outcome {
            Insert::Inserted { evicted, allocated } => {
                if evicted {
                    add(&self.counters.evictions, 1);
                } else {
                    add(&self.counters.resident_blocks, 1);
                }
                if allocated {
                    add(&self.counters.allocated_bytes, self.block_bytes);
                }
            }
            Insert::Stale => add(&self.counters.stale_skips, 1),
            Insert::Present => {}
        }
        drop(shard);
        let allocated = self.counters.allocated_bytes.load(Ordering::Relaxed);
        assert!(
            allocated <= self.capacity_bytes,
            "cache memory above its limit"
        );
    }

    /// Cache blocks overlapping `[offset, offset + len)`.
    fn blocks(&self, offset: u64, len: u64) -> Range<u64> {
        let end = offset.checked_add(len).expect("range overflows u64");
        assert!(end <= self.export_bytes, "range past the export");
        offset / self.block_bytes..end.div_ceil(self.block_bytes)
    }

    /// Local indices in shard `shard` of the global blocks `blocks`.
    fn local_range(&self, blocks: &Range<u64>, shard: u64) -> Range<u64> {
        let n = self.shard_count();
        let first = |b: u64| {
            if b <= shard {
                0
            } else {
                (b - shard).div_ceil(n)
            }
        };
        let lo = first(blocks.start);
        lo..first(blocks.end).max(lo)
    }

    /// A write to the range is about to reach the export: drop overlapping blocks and make
    /// every read that began before it unable to insert. Must be paired with `end_write`.
    /// Takes a shard lock only where an overlapping block may be cached.
    pub fn begin_write(&self, offset: u64, len: u64) {
        let blocks = self.blocks(offset, len);
        for (shard, cell) in self.cells.iter().enumerate() {
            let range = self.local_range(&blocks, shard as u64);
            if !range.is_empty() && cell.gens.begin_write(range.clone()) {
                let mut shard = Self::lock(cell);
                let dropped = shard.drop_range(range);
                add(&self.counters.invalidations, dropped);
                sub(&self.counters.resident_blocks, dropped);
                drop(shard);
            }
        }
    }

    /// The write announced by `begin_write(offset, len)` has ended, successfully or not.
    pub fn end_write(&self, offset: u64, len: u64) {
        let blocks = self.blocks(offset, len);
        for (shard, cell) in self.cells.iter().enumerate() {
            let range = self.local_range(&blocks, shard as u64);
            if !range.is_empty() {
                cell.gens.end_write(range);
            }
        }
    }

    /// Claims `block` for read-ahead; `None` if cached or already being fetched.
    pub fn try_mark_loading(&self, block: u64) -> Option<Snapshot> {
        let (cell, local) = self.route(block);
        Self::lock(cell).try_mark_loading(local)
    }

    /// Ends read-ahead's claim on `block` and wakes readers waiting for it.
    pub fn clear_loading(&self, block: u64) {
        let (cell, local) = self.route(block);
        Self::lock(cell).clear_loading(local);
        cell.loaded.notify_all();
    }

    pub fn stats(&self) -> CacheStats {
        self.counters.snapshot(self.capacity_bytes)
    }

    /// Resident blocks and allocated buffers counted shard by shard (for tests).
    #[cfg(test)]
    pub fn census(&self) -> (usize, usize) {
        self.cells.iter().fold((0, 0), |(r, a), cell| {
            let shard = Self::lock(cell);
            (r + shard.resident(), a + shard.allocated())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(capacity_blocks: u64) -> Store {
        let config = CacheConfig {
            size_bytes: capacity_blocks * 4096,
            block_bytes: 4096,
            read_ahead: crate::ReadAhead::Off,
            ..CacheConfig::default()
        };
        Store::new(&config, 1 << 30)
    }

    #[test]
    fn local_ranges_partition_blocks() {
        let store = store(64);
        assert_eq!(store.shard_count(), 16);
        for (lo, hi) in [(0, 1), (3, 40), (17, 18), (5, 5), (100, 1000)] {
            let mut seen = Vec::new();
            for shard in 0..16 {
                for local in store.local_range(&(lo..hi), shard) {
                    seen.push(local * 16 + shard);
                }
            }
            seen.sort_unstable();
            assert_eq!(seen, (lo..hi).collect::<Vec<_>>());
        }
    }

    #[test]
    fn counters_track_memory() {
        let store = store(5);
        assert_eq!(store.shard_count(), 4);
        let data = vec![7u8; 4096];
        let mut out = vec![0u8; 4096];
        for block in 0..50 {
            let snap = store.lookup(block, 0..4096, &mut out).expect("miss");
            store.insert(block, &data, snap, false);
            let stats = store.stats();
            assert!(stats.allocated_bytes <= stats.capacity_bytes);
            assert_eq!(store.census().0 as u64, stats.resident_blocks);
        }
        assert_eq!(store.stats().resident_blocks, 5);
        store.begin_write(0, 1 << 30);
        store.end_write(0, 1 << 30);
        let stats = store.stats();
        assert_eq!((stats.resident_blocks, stats.invalidations), (0, 5));
        assert_eq!(stats.allocated_bytes, 5 * 4096, "buffers kept for reuse");
    }
}

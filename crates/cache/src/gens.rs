//! [`Gens`]: a shard's write generations and per-bucket counts of resident blocks, as
//! atomics, so that a write can bump generations and see that it overlaps nothing cached
//! without taking the shard lock.
//!
//! Every block hashes (by its local index modulo [`GEN_BUCKETS`]) to one bucket word
//! `seq << WRITER_BITS | writers` and one resident count.
//!
//! **Lock-free write check** (a Dekker pair, all operations `SeqCst`): a writer first bumps
//! the bucket word, then loads the resident count, and takes the shard lock to drop blocks
//! only if it is non-zero. An insert (under the shard lock) first raises the resident count,
//! then compares the bucket word with its snapshot. In the single order of `SeqCst`
//! operations one of the two comes second and sees the other: either the insert sees the
//! bumped word and gives up, or the writer sees the count and drops the block under the lock
//! (after the insert released it). So a block read before a write is never left cached
//! after it, and a write that overlaps nothing cached takes no lock.

use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};

/// Generation buckets per shard.
pub(crate) const GEN_BUCKETS: u64 = 1024;

/// Low bits of a bucket word counting writes in flight.
const WRITER_BITS: u32 = 24;
const WRITERS_MASK: u64 = (1 << WRITER_BITS) - 1;
const ONE_SEQ: u64 = 1 << WRITER_BITS;

/// The state of a block's generation bucket when a read of it began; `None` when a write
/// was in flight then (the read's data must not be cached).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot(pub Option<u64>);

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Gens {
    words: Box<[AtomicU64]>,
    resident: Box<[AtomicU32]>,
}

fn bucket(local: u64) -> usize {
    (local % GEN_BUCKETS) as usize
}

impl Gens {
    pub fn new() -> Self {
        Gens {
            words: (0..GEN_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            resident: (0..GEN_BUCKETS).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    pub fn snapshot(&self, local: u64) -> Snapshot {
        let word = self.words[bucket(local)].load(SeqCst);
        Snapshot((word & WRITERS_MASK == 0).then_some(word))
    }

    /// The buckets of local blocks `range` (all of them for a long range).
    fn buckets(range: Range<u64>) -> Range<usize> {
        let len = range.end - range.start;
        let lo = bucket(range.start);
        if len < GEN_BUCKETS && lo as u64 + len <= GEN_BUCKETS {
            lo..lo + len as usize
        } else {
            0..GEN_BUCKETS as usize // long, or wrapping around: all (conservative)
        }
    }

    /// A write to local blocks `range` is starting: bump their generations and count the
    /// writer. Returns whether a block of the range may be resident (then the caller drops
    /// them under the shard lock).
    pub fn begin_write(&self, range: Range<u64>) -> bool {
        let buckets = Self::buckets(range);
        for word in &self.words[buckets.clone()] {
            let old = word.fetch_add(ONE_SEQ + 1, SeqCst);
            assert!(old & WRITERS_MASK < WRITERS_MASK, "cache writers overflow");
        }
        self.resident[buckets].iter().any(|r| r.load(SeqCst) > 0)
    }

    /// The write that [`Gens::begin_write`] announced has ended (done or failed).
    pub fn end_write(&self, range: Range<u64>) {
        for word in &self.words[Self::buckets(range)] {
            let old = word.fetch_add(ONE_SEQ - 1, SeqCst);
            assert!(
                old & WRITERS_MASK > 0,
                "cache write generation released twice"
            );
        }
    }

    /// Under the shard lock, before caching block `local` read with `snapshot`: counts it
    /// resident and says whether it may stay (no write overlapped it since the snapshot);
    /// if not, the count is undone.
    pub fn try_admit(&self, local: u64, snapshot: Snapshot) -> bool {
        if snapshot.0.is_none() {
            return false;
        }
        let resident = &self.resident[bucket(local)];
        resident.fetch_add(1, SeqCst);
        if self.snapshot(local) == snapshot {
            return true;
        }
        resident.fetch_sub(1, SeqCst);
        false
    }

    /// Under the shard lock: block `local` is no longer resident.
    pub fn evicted(&self, local: u64) {
        let old = self.resident[bucket(local)].fetch_sub(1, SeqCst);
        assert!(old > 0, "resident count of block {local} below zero");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_the_range() {
        assert_eq!(Gens::buckets(5..9), 5..9);
        assert_eq!(Gens::buckets(1020..1030), 0..1024);
        assert_eq!(Gens::buckets(2048..2049), 0..1);
        assert_eq!(Gens::buckets(1023..1024), 1023..1024);
        assert_eq!(Gens::buckets(7..7), 7..7);
        assert_eq!(Gens::buckets(0..5000), 0..1024);
    }

    #[test]
    fn writes_refuse_older_snapshots_and_see_residents() {
        let gens = Gens::new();
        let before = gens.snapshot(3);
        assert!(!gens.begin_write(3..4), "nothing resident");
        assert_eq!(gens.snapshot(3), Snapshot(None));
        assert!(!gens.try_admit(3, before));
        gens.end_write(3..4);
        assert!(!gens.try_admit(3, before));
        let after = gens.snapshot(3);
        assert!(gens.try_admit(3, after));
        assert!(gens.begin_write(1027..1028), "bucket 3 is resident");
        gens.end_write(1027..1028);
        gens.evicted(3);
        assert!(!gens.begin_write(3..4));
        gens.end_write(3..4);
    }
}

//! Sync units whose redundancy a failed write may have left inconsistent.
//!
//! A write that some members took and others refused for lack of space (ENOSPC, EDQUOT: see
//! [`crate::is_no_space`]) fails without failing a member, so the array keeps every member —
//! but the units it touched may now hold parity or mirror copies that disagree with their data.
//! [`crate::Array::write`], `trim` and `write_zeroes` record such a request's units here; they
//! are made consistent again by [`crate::Array::resync_next_unsynced`] (the volume's background
//! worker calls it once there is space; a resync recomputes parity from the data, or copies the
//! first mirror over the others, as after a crash). A mirrored read of such a unit resyncs it
//! first, so two reads never return different copies. Those operations are in `scrub`; this
//! module is the record.
//!
//! Bounded: at most [`UNSYNCED_RANGES_MAX`] ranges of units; past that the two closest ranges
//! are merged (more units are resynced than needed, none is forgotten).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Most disjoint unit ranges kept (16 bytes each).
pub const UNSYNCED_RANGES_MAX: usize = 1024;

/// Disjoint, non-adjacent ranges `[start, end)` of sync units, keyed by start.
#[derive(Debug, Default)]
pub(crate) struct Unsynced {
    ranges: Mutex<BTreeMap<u64, u64>>,
    /// Units in `ranges` (read without the lock on the hot path).
    units: AtomicU64,
}

impl Unsynced {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, u64>> {
        self.ranges.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn count(&self) -> u64 {
        self.units.load(Ordering::Acquire)
    }

    /// Adds `[lo, hi)`, merging with overlapping or adjacent ranges.
    pub(crate) fn add(&self, lo: u64, hi: u64) {
        assert!(lo < hi);
        let mut ranges = self.lock();
        let (mut lo, mut hi) = (lo, hi);
        let touching: Vec<u64> = ranges
            .range(..=hi)
            .rev()
            .take_while(|(_, &end)| end >= lo)
            .map(|(&start, _)| start)
            .collect();
        for start in touching {
            let end = ranges.remove(&start).expect("listed");
            lo = lo.min(start);
            hi = hi.max(end);
        }
        ranges.insert(lo, hi);
        while ranges.len() > UNSYNCED_RANGES_MAX {
            merge_closest(&mut ranges);
        }
        self.store_count(&ranges);
    }

    pub(crate) fn contains(&self, unit: u64) -> bool {
        if self.count() == 0 {
            return false;
        }
        let ranges = self.lock();
        ranges
            .range(..=unit)
            .next_back()
            .is_some_and(|(_, &end)| unit < end)
    }

    /// Removes `unit`; true when it was there.
    pub(crate) fn remove(&self, unit: u64) -> bool {
        let mut ranges = self.lock();
        let Some((&start, &end)) = ranges.range(..=unit).next_back() else {
            return false;
        };
        if unit >= end {
            return false;
        }
        ranges.remove(&start);
        if start < unit {
            ranges.insert(start, unit);
        }
        if unit + 1 < end {
            ranges.insert(unit + 1, end);
        }
        self.store_count(&ranges);
        true
    }

    /// Takes the lowest unit out (under one lock: two callers never get the same unit, and
    /// `None` means the set was empty).
    pub(crate) fn pop_first(&self) -> Option<u64> {
        let mut ranges = self.lock();
        let (start, end) = ranges.pop_first()?;
        if start + 1 < end {
            ranges.insert(start + 1, end);
        }
        self.store_count(&ranges);
        Some(start)
    }

    fn store_count(&self, ranges: &BTreeMap<u64, u64>) {
        let units = ranges.iter().map(|(s, e)| e - s).sum();
        self.units.store(units, Ordering::Release);
    }
}

/// Merges the two neighbouring ranges with the smallest gap between them.
fn merge_closest(ranges: &mut BTreeMap<u64, u64>) {
    let pairs = ranges.iter().zip(ranges.iter().skip(1));
    let Some(((&a, _), (&b, &b_end))) = pairs.min_by_key(|((_, &a_end), (&b, _))| b - a_end) else {
        return;
    };
    ranges.remove(&b);
    ranges.insert(a, b_end);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_split_and_stay_bounded() {
        let u = Unsynced::default();
        u.add(10, 12);
        u.add(12, 14);
        u.add(20, 21);
        assert_eq!(u.count(), 5);
        assert!(u.contains(13) && !u.contains(14) && u.contains(20));
        assert!(u.remove(11));
        assert!(!u.remove(11));
        assert_eq!(u.count(), 4);
        assert_eq!(u.pop_first(), Some(10));
        assert_eq!(u.pop_first(), Some(12));
        u.add(0, 30);
        assert_eq!(u.count(), 30);
        let many = Unsynced::default();
        for i in 0..(UNSYNCED_RANGES_MAX as u64 + 10) {
            many.add(i * 3, i * 3 + 1);
        }
        assert!(many.lock().len() <= UNSYNCED_RANGES_MAX);
        for i in 0..(UNSYNCED_RANGES_MAX as u64 + 10) {
            assert!(many.contains(i * 3), "unit {} forgotten", i * 3);
        }
    }
}

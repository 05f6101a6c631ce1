//! Sync units whose redundancy a failed write may have left inconsistent.
//!
//! A write that some members took and others refused for lack of space (ENOSPC, EDQUOT: see
//! [`crate::is_no_space`]) fails without failing a member, so the array keeps every member —
//! but the units it touched may now hold parity or mirror copies that disagree with their data.
//! [`Array::write`], `trim` and `write_zeroes` record such a request's units here; they are
//! made consistent again by [`Array::resync_next_unsynced`] (the volume's background worker
//! calls it once there is space; a resync recomputes parity from the data, or copies the first
//! mirror over the others, as after a crash). A mirrored read of such a unit resyncs it first,
//! so two reads never return different copies.
//!
//! Bounded: at most [`UNSYNCED_RANGES_MAX`] ranges of units; past that the two closest ranges
//! are merged (more units are resynced than needed, none is forgotten).

use crate::error::IoError;
use crate::scrub::{SyncMode, UnitReport};
use crate::Array;
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

impl Array {
    /// Records that a failed write to `[offset, offset+len)` may have left its units'
    /// redundancy inconsistent (levels without redundancy have nothing to record).
    pub(crate) fn mark_unsynced(&self, offset: u64, len: u64) {
        if len == 0 || self.sync_unit_count() == 0 {
            return;
        }
        let (lo, hi) = self.sync_units_of(offset, len);
        self.unsynced.add(lo, hi);
    }

    /// Sync units a write refused for lack of space may have left inconsistent (see the
    /// module docs); 0 when every unit's redundancy is as trusted as the rest of the array.
    pub fn unsynced_units(&self) -> u64 {
        self.unsynced.count()
    }

    /// True when sync unit `unit` awaits such a resync: its parity (or mirror copies) may
    /// not match its data.
    pub fn is_unsynced(&self, unit: u64) -> bool {
        self.unsynced.contains(unit)
    }

    /// Resyncs the lowest unsynced unit; `None` when there is none. On an error (still no
    /// space, a member lost) the unit stays recorded. A unit that could not be compared
    /// (members missing) stays recorded too: its redundancy is still unknown.
    pub fn resync_next_unsynced(&self) -> Option<Result<UnitReport, IoError>> {
        // Taken out before the sync: a write that fails meanwhile records it again after
        // its member requests finished, so no mark is lost.
        let unit = self.unsynced.pop_first()?;
        let result = self.sync_unit(unit, SyncMode::Resync);
        if !result.as_ref().is_ok_and(|r| r.checked) {
            self.unsynced.add(unit, unit + 1);
        }
        Some(result)
    }

    /// Mirrored levels: resyncs the unsynced units `[offset, offset+len)` touches before they
    /// are read, so every read returns the copy the resync keeps. Errors leave them recorded
    /// (the read then returns whichever copy it picks).
    pub(crate) fn resync_unsynced_before_read(&self, offset: u64, len: u64) {
        if self.unsynced.count() == 0 || !self.geometry.is_mirrored() || len == 0 {
            return;
        }
        let (lo, hi) = self.sync_units_of(offset, len);
        for unit in lo..hi {
            if self.unsynced.remove(unit) {
                let result = self.sync_unit(unit, SyncMode::Resync);
                if !result.is_ok_and(|r| r.checked) {
                    self.unsynced.add(unit, unit + 1);
                }
            }
        }
    }
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

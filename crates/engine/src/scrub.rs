//! The array's operations on sync units (RAID 5/6 stripe, RAID 1/10 logical chunk), one unit at
//! a time under its lock, so client I/O continues between units: the consistency check
//! ([`Array::check`]), scrub and resync ([`Array::sync_unit`], in a [`SyncMode`]), and the
//! resync of the units a write refused for lack of space left unsynced (`unsynced`).
//!
//! - `Check` counts and locates mismatches. For RAID 6, when P and Q both disagree and the
//!   syndrome points at exactly one data block (every byte satisfies Qδ = g^z · Pδ for the same
//!   z < k), the mismatch is reported as that data member's.
//! - `Repair` makes the unit consistent: mirrors from the first readable copy (md's choice:
//!   with two copies there is no majority, and the first is as good as any); parity recomputed
//!   from the data — except the RAID 6 single-data-block case, where the data block is fixed
//!   (D_z ^= Pδ) and parity is left alone.
//! - `Resync` (after an unclean shutdown or for an initial sync) is `Repair` without the RAID 6
//!   location: parity always follows the data.
//!
//! Read errors met on the way are repaired like a client read's (`levels::repair`). The
//! passes themselves are the level's (`LevelIo::check_unit`, `LevelIo::sync_unit`:
//! `levels::mirror`, `levels::raid56::scrub`); what they find is a `report` type.

use crate::error::IoError;
use crate::report::{CheckReport, SyncMode, UnitReport};
use crate::Array;

impl Array {
    /// Checks parity (RAID 5/6) or mirrors (RAID 1/10) of the whole array. Each unit is
    /// checked under its lock, so concurrent writes cannot cause false alarms. Linear and
    /// RAID 0 have nothing to compare and report zero units.
    pub fn check(&self) -> Result<CheckReport, IoError> {
        self.check_where(|_| true)
    }

    /// [`Array::check`] of the units `wanted` says hold data (the others are neither
    /// compared nor counted): a volume with a used-regions map passes over the units of
    /// never-written regions, whose member bytes mean nothing.
    pub fn check_where(&self, wanted: impl Fn(u64) -> bool) -> Result<CheckReport, IoError> {
        let mut report = CheckReport::default();
        for unit in 0..self.parts.geometry.sync_unit_count() {
            if wanted(unit) {
                self.level_io.check_unit(&self.parts, unit, &mut report)?;
            }
        }
        Ok(report)
    }

    /// Number of units a scrub or resync walks (0 for levels without redundancy).
    pub fn sync_unit_count(&self) -> u64 {
        self.parts.geometry.sync_unit_count()
    }

    /// The sync units `[lo, hi)` holding array bytes `[offset, offset+len)` (`len > 0`).
    fn sync_units_of(&self, offset: u64, len: u64) -> (u64, u64) {
        assert!(len > 0 && self.sync_unit_count() > 0);
        let unit_bytes = self.parts.geometry.unit_bytes();
        let hi = (offset + len)
            .div_ceil(unit_bytes)
            .min(self.sync_unit_count());
        (offset / unit_bytes, hi)
    }

    /// Checks (and in `Repair`/`Resync` mode fixes) one unit.
    pub fn sync_unit(&self, unit: u64, mode: SyncMode) -> Result<UnitReport, IoError> {
        assert!(
            unit < self.sync_unit_count(),
            "unit {unit} beyond the array"
        );
        self.recovering(|| self.level_io.sync_unit(&self.parts, unit, mode))
    }

    /// Records that a failed write to `[offset, offset+len)` may have left its units'
    /// redundancy inconsistent (levels without redundancy have nothing to record).
    pub(crate) fn mark_unsynced(&self, offset: u64, len: u64) {
        if len == 0 || self.sync_unit_count() == 0 {
            return;
        }
        let (lo, hi) = self.sync_units_of(offset, len);
        self.parts.unsynced.add(lo, hi);
    }

    /// Sync units a write refused for lack of space may have left inconsistent (see
    /// `unsynced`); 0 when every unit's redundancy is as trusted as the rest of the array.
    pub fn unsynced_units(&self) -> u64 {
        self.parts.unsynced.count()
    }

    /// True when sync unit `unit` awaits such a resync: its parity (or mirror copies) may
    /// not match its data.
    pub fn is_unsynced(&self, unit: u64) -> bool {
        self.parts.unsynced.contains(unit)
    }

    /// Resyncs the lowest unsynced unit; `None` when there is none. On an error (still no
    /// space, a member lost) the unit stays recorded. A unit that could not be compared
    /// (members missing) stays recorded too: its redundancy is still unknown.
    pub fn resync_next_unsynced(&self) -> Option<Result<UnitReport, IoError>> {
        // Taken out before the sync: a write that fails meanwhile records it again after
        // its member requests finished, so no mark is lost.
        let unit = self.parts.unsynced.pop_first()?;
        let result = self.sync_unit(unit, SyncMode::Resync);
        if !result.as_ref().is_ok_and(|r| r.checked) {
            self.parts.unsynced.add(unit, unit + 1);
        }
        Some(result)
    }

    /// Mirrored levels: resyncs the unsynced units `[offset, offset+len)` touches before they
    /// are read, so every read returns the copy the resync keeps. Errors leave them recorded
    /// (the read then returns whichever copy it picks).
    pub(crate) fn resync_unsynced_before_read(&self, offset: u64, len: u64) {
        if self.parts.unsynced.count() == 0 || !self.parts.geometry.is_mirrored() || len == 0 {
            return;
        }
        let (lo, hi) = self.sync_units_of(offset, len);
        for unit in lo..hi {
            if self.parts.unsynced.remove(unit) {
                let result = self.sync_unit(unit, SyncMode::Resync);
                if !result.is_ok_and(|r| r.checked) {
                    self.parts.unsynced.add(unit, unit + 1);
                }
            }
        }
    }
}

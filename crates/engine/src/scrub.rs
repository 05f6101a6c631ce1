//! Scrub and resync, one unit (RAID 5/6 stripe, RAID 1/10 logical chunk) at a time under its
//! lock, so client I/O continues between units.
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
//! Read errors met on the way are repaired like a client read's ([`Array::recovering`]). The
//! passes themselves are the level's (`LevelIo::sync_unit`: `levels::mirror`, `levels::raid56::scrub`).

use crate::check::Mismatch;
use crate::error::IoError;
use crate::Array;

/// What a pass over a unit does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    Check,
    Repair,
    Resync,
}

/// The outcome for one unit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnitReport {
    /// False when members were missing and the unit could not be compared.
    pub checked: bool,
    pub mismatches: Vec<Mismatch>,
    /// Blocks rewritten.
    pub repaired: u64,
}

impl Array {
    /// Number of units a scrub or resync walks (0 for levels without redundancy).
    pub fn sync_unit_count(&self) -> u64 {
        self.geometry.sync_unit_count()
    }

    /// The sync units `[lo, hi)` holding array bytes `[offset, offset+len)` (`len > 0`).
    pub(crate) fn sync_units_of(&self, offset: u64, len: u64) -> (u64, u64) {
        assert!(len > 0 && self.sync_unit_count() > 0);
        let unit_bytes = self.geometry.unit_bytes();
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
        self.recovering(|| self.level_io.sync_unit(self, unit, mode))
    }
}

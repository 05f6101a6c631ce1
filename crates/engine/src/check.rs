//! Consistency check: every stripe's P (and Q) against its data, every mirror copy against the
//! others. Each unit is checked under its lock, so concurrent writes cannot cause false alarms;
//! the comparison is the level's (`LevelIo::check_unit`: `levels::mirror`, `levels::raid56::scrub`).

use crate::error::IoError;
use crate::Array;

/// At most this many mismatches are listed in a report (all are counted).
pub const MISMATCHES_REPORTED_MAX: usize = 64;

/// What disagrees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MismatchKind {
    /// P does not match the data of its stripe.
    P,
    /// Q does not match the data of its stripe.
    Q,
    /// A mirror copy differs from the first present copy.
    Mirror,
    /// RAID 6 scrub: P and Q both disagree in the way one bad data block explains (the
    /// syndrome names the member).
    Data,
}

/// One inconsistent block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Stripe (RAID 5/6), row (RAID 1) or logical chunk (RAID 10).
    pub unit: u64,
    pub kind: MismatchKind,
    /// The member holding the block that disagrees.
    pub role: usize,
    /// Member offset of the first differing byte.
    pub member_offset: u64,
    /// Array offset of the data the block covers (its stripe's start for P and Q).
    pub array_offset: u64,
}

/// Outcome of [`Array::check`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Units (stripes, rows or chunks) fully compared.
    pub units_checked: u64,
    /// Units that could not be compared because members are missing.
    pub units_skipped: u64,
    /// Every mismatch found.
    pub mismatch_count: u64,
    /// The first [`MISMATCHES_REPORTED_MAX`] mismatches.
    pub mismatches: Vec<Mismatch>,
}

impl CheckReport {
    /// True when nothing disagreed.
    pub fn is_consistent(&self) -> bool {
        self.mismatch_count == 0
    }

    pub(crate) fn record(&mut self, mismatch: Mismatch) {
        self.mismatch_count += 1;
        if self.mismatches.len() < MISMATCHES_REPORTED_MAX {
            self.mismatches.push(mismatch);
        }
    }
}

pub(crate) fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).position(|(x, y)| x != y)
}

impl Array {
    /// Checks parity (RAID 5/6) or mirrors (RAID 1/10) of the whole array. Linear and RAID 0
    /// have nothing to compare and report zero units.
    pub fn check(&self) -> Result<CheckReport, IoError> {
        let mut report = CheckReport::default();
        for unit in 0..self.geometry.sync_unit_count() {
            self.level_io.check_unit(self, unit, &mut report)?;
        }
        Ok(report)
    }
}

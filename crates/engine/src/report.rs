//! What a check or a sync of units finds: [`CheckReport`] for a whole-array check,
//! [`UnitReport`] for one unit's pass in a [`SyncMode`]. The passes are the level's
//! (`LevelIo::check_unit` and `sync_unit`: `levels::mirror`, `levels::raid56::scrub`); the
//! array's operations that run them are in `scrub`.

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

/// Outcome of [`crate::Array::check`].
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

pub(crate) fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).position(|(x, y)| x != y)
}

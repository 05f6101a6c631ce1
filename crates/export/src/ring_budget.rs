//! [`RingBudget`]: how the write-back cache shares the journal ring, and why that cannot
//! deadlock (docs/DESIGN.md "Bounds and no deadlock" tells the same argument; its code is all
//! here and in the applier policy of [`crate::writeback`]).
//!
//! The journal is mechanism: it keeps records in a ring, counts the bytes used and reserved,
//! and admits records by the sizes it is given ([`journal::Admission`], [`Journal::try_reserve`]).
//! The engine states a fact of its geometry: a bound of the records one apply logs
//! (`Volume::logged_bytes_bound`). The rules are this module's:
//!
//! - Records are at most ring/16 (the journal's format). Write-back (`ArrayWrite`) records hold
//!   at most ring/8 between them ([`RingBudget::array_write_bytes_max`]; the buffer at most
//!   `min(64 MiB, ring/8)`), and are admitted only while a quarter of the ring stays free, the
//!   *reserve* ([`RingBudget::admission`]); writers wait beyond that. Write-through records take
//!   any free space and wait for a checkpoint when none is left.
//! - A checkpoint releases only the complete records in front of the oldest incomplete one, R.
//!   Appliers work by offset, not by age, so R can stay unapplied while newer write-back data is
//!   applied, and each application appends `StripeApply` records behind R that nothing can
//!   release yet. No ratio between a logical record and the physical records of applying it
//!   bounds this, and new write-back records keep being admitted as others complete; unbounded,
//!   the ring filled and the applier, needing space to log its next stripe, waited for a
//!   checkpoint that needed R applied. So each apply first reserves the ring its records can
//!   take ([`RingBudget::reserve_apply`]: the engine's bound, plus one wrap's waste), admitted
//!   only while the reserve stays free: `used + reserved ≤ ring − reserve` holds whatever the
//!   appliers in flight append.
//! - When a reservation fails the ring is *under pressure*: one applier at a time applies the
//!   oldest record's extents with a forced reservation that may use the reserve
//!   ([`RingBudget::force_reserve_apply`]). Applying one record (≤ ring/16 of data) logs at most
//!   its parity and references over the stripes it touches, well under the reserve for any
//!   geometry that passes the attach check (`JournalLayer::attach`: a stripe's record fits
//!   ring/16), so R completes, the next checkpoint releases everything up to the next
//!   incomplete record, and the ring drains.
//! - Before that, once half the ring is in use ([`RingBudget::half_full`]), appliers take the
//!   oldest free extent instead of the next by offset, so an extent skipped by the offset sweep
//!   does not wait a whole sweep while write-through records pile up behind it.

use std::sync::Arc;

use journal::{Admission, Journal, RecordsBound};

/// Write-back records hold at most a `WRITE_BACK_SHARE`th of the ring between them.
pub const WRITE_BACK_SHARE: u64 = 8;
/// New write-back records and parallel applies leave a `RESERVE_SHARE`th of the ring free.
pub const RESERVE_SHARE: u64 = 4;

/// The write-back cache's rules over one journal's ring (see the module documentation).
pub struct RingBudget {
    journal: Arc<Journal>,
    ring_bytes: u64,
}

impl RingBudget {
    pub fn new(journal: Arc<Journal>) -> RingBudget {
        let ring_bytes = journal.superblock().ring_bytes;
        RingBudget {
            journal,
            ring_bytes,
        }
    }

    /// Ring bytes write-back records may hold at once: an eighth of the ring.
    pub fn array_write_bytes_max(&self) -> u64 {
        self.ring_bytes / WRITE_BACK_SHARE
    }

    /// Largest data of one write-back record: what one record holds, and at most half of
    /// what write-back records may hold together.
    pub fn piece_bytes_max(&self) -> u64 {
        (self.journal.max_array_write_bytes()).min(self.array_write_bytes_max() / 2)
    }

    /// Ring bytes new write-back records and parallel applies leave free: a quarter.
    fn reserve(&self) -> u64 {
        self.ring_bytes / RESERVE_SHARE
    }

    /// Where write-back records are admitted: within their share, leaving the reserve free.
    pub fn admission(&self) -> Admission {
        Admission {
            array_write_bytes_max: self.array_write_bytes_max(),
            keep_free: self.reserve(),
        }
    }

    /// Reserves ring for the records of one apply (`records`: the engine's bound), if that
    /// leaves the reserve free: the bytes reserved (0 when the apply logs nothing), for
    /// [`RingBudget::release_apply`]. `None`: the ring is under pressure, nothing reserved;
    /// apply the oldest record alone with [`RingBudget::force_reserve_apply`].
    pub fn reserve_apply(&self, records: RecordsBound) -> Option<u64> {
        let bytes = records.ring_bytes_max();
        (bytes == 0 || self.journal.try_reserve(bytes, self.reserve())).then_some(bytes)
    }

    /// Reserves for the single oldest-record apply under pressure, whatever is left (the
    /// reserve is there for it); returns the bytes reserved.
    pub fn force_reserve_apply(&self, records: RecordsBound) -> u64 {
        let bytes = records.ring_bytes_max();
        self.journal.reserve_forced(bytes);
        bytes
    }

    /// Returns an apply's reservation once its records are appended (they count as used).
    pub fn release_apply(&self, bytes: u64) {
        if bytes > 0 {
            self.journal.release_reserved(bytes);
        }
    }

    /// True when half the ring is in use: records behind the oldest incomplete one cannot be
    /// released, so the appliers should apply the oldest records next.
    pub fn half_full(&self) -> bool {
        self.journal.in_use_bytes() * 2 > self.ring_bytes
    }
}

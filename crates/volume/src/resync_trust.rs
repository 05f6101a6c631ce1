//! The volume's answer to `engine::ParityTrust` while a RAID 5/6 initial sync or resync is
//! pending: a stripe's parity is untrusted while the sync still awaits it
//! ([`VolumeCore::unit_awaits_resync`]: at or past the sync's progress and, for a resync
//! limited by the bitmap, below the full-resync offset only in a pending region).
//!
//! Set when a sync becomes pending (assembly of a dirty array or one with an initial sync to
//! do, [`crate::Volume::resync`]) and removed by the worker once the sync has passed every
//! stripe. Why it is safe against the sync moving concurrently: the sync rewrites a stripe's
//! parity under that stripe's lock, and publishes its progress (`resync_progress`) only after
//! the whole step returned; a write asks under its stripes' locks. So a stripe reported
//! trusted has been synced, and a stripe synced but not yet published is merely
//! reconstruct-written (correct, a few reads more). Pending regions are resolved only once the
//! whole resync has finished.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use engine::ParityTrust;

use crate::volume::VolumeCore;

/// `engine::ParityTrust` over a volume's running sync.
struct ResyncTrust {
    core: Weak<VolumeCore>,
    /// `PendingResync::full_from` when the sync was set up (it changes only at assembly
    /// and when the sync finishes, after this is removed).
    full_from: Option<u64>,
}

impl ParityTrust for ResyncTrust {
    fn parity_untrusted(&self, stripe: u64) -> bool {
        // Only atomics behind this: no lock a writer could hold.
        match self.core.upgrade() {
            Some(core) => core.unit_awaits_resync(stripe, self.full_from),
            None => true,
        }
    }
}

/// `member::ChecksumTrust` over a volume's running sync: a block whose row some role's sync
/// unit still awaits may hold a torn update, so its checksum is rewritten from its data, not
/// taken for corruption (docs/DESIGN.md "Block checksums"). Conservative: any role's unit at
/// that row (RAID 10 rows hold two logical chunks).
struct ResyncChecksums {
    core: Weak<VolumeCore>,
    full_from: Option<u64>,
}

impl member::ChecksumTrust for ResyncChecksums {
    fn unsynced(&self, offset: u64) -> bool {
        let Some(core) = self.core.upgrade() else {
            return true;
        };
        // Only atomics and the bitmap behind this, no lock a member call could hold; the hook
        // is removed once the sync has passed every unit.
        let geometry = core.array.geometry();
        if !geometry.level().has_redundancy() {
            return false;
        }
        let row = offset / geometry.chunk_bytes();
        if row >= geometry.rows() {
            return false;
        }
        (0..geometry.member_count())
            .map(|role| geometry.unit_of_row(role, row))
            .any(|unit| core.unit_awaits_resync(unit, self.full_from))
    }

    /// Redundancy decides torn from corrupt: a mismatch there is reconstructed from the
    /// mirror copy or parity and the version matching the checksum kept (`Member::settle`).
    fn redundant(&self) -> bool {
        self.core
            .upgrade()
            .is_some_and(|core| core.array.geometry().level().has_redundancy())
    }
}

/// Linear and RAID 0 after an unclean shutdown: no resync says which blocks a torn update may
/// have left, so every mismatch rewrites the checksum until a clean close.
pub(crate) struct UncleanSingleCopy;

impl member::ChecksumTrust for UncleanSingleCopy {
    fn unsynced(&self, _offset: u64) -> bool {
        true
    }
}

impl VolumeCore {
    /// A sync is pending from `progress` (array bytes): until it passes a stripe, RAID 5/6
    /// writes there regenerate the stripe's parity, and on every level a checksum mismatch
    /// there rewrites the checksum. Called before the worker may run the sync.
    pub(crate) fn distrust_unsynced_parity(&self, progress: u64, full_from: Option<u64>) {
        self.checksums.set_trust(Some(Arc::new(ResyncChecksums {
            core: self.this.clone(),
            full_from,
        })));
        if !self.level().has_parity() {
            return;
        }
        self.resync_progress.store(progress, Ordering::Release);
        let hook = ResyncTrust {
            core: self.this.clone(),
            full_from,
        };
        self.array.set_parity_trust(Some(Arc::new(hook)));
    }

    /// The sync has passed every stripe: writes need not ask any more.
    pub(crate) fn trust_synced_parity(&self) {
        self.checksums.set_trust(None);
        self.array.set_parity_trust(None);
    }
}

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

impl VolumeCore {
    /// A RAID 5/6 sync is pending from `progress` (array bytes): until it passes a stripe,
    /// writes there regenerate the stripe's parity. Called before the worker may run the
    /// sync.
    pub(crate) fn distrust_unsynced_parity(&self, progress: u64, full_from: Option<u64>) {
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
        self.array.set_parity_trust(None);
    }
}

//! Which RAID 5/6 stripes have parity that may not match their data: [`ParityTrust`].
//!
//! During an initial sync or a resync after a crash, the stripes the sync has not reached yet
//! may hold parity that disagrees with their data. A read-modify-write there keeps the error
//! (P' = P ^ D_old ^ D_new), and a member lost later reconstructs garbage over acknowledged
//! writes. So a write to an untrusted stripe regenerates its parity from the data over the
//! write's parity range instead (reconstruct-write, or a rebuild-write when a data member is
//! missing): those bytes are protected at once, before the sync arrives (md's rule for stripes
//! at or past its resync point).
//!
//! The layer that runs the sync (`volume`) knows which stripes are untrusted and sets a
//! [`ParityTrust`] on the array while a sync is pending. The engine itself knows the stripes a
//! write refused for lack of space may have left inconsistent (`unsynced`); they are untrusted
//! too until resynced. With no hook set and nothing unsynced — the normal case — the write path
//! pays one atomic load per request and one per stripe.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// Answers, for a RAID 5/6 stripe, whether its parity is not known to match its data.
pub trait ParityTrust: Send + Sync {
    /// True when stripe `stripe`'s parity (P, and Q for RAID 6) may disagree with its data.
    ///
    /// Called by a write that holds the stripe's lock. It must stay true until the sync step
    /// that rewrites that stripe's parity has returned (being conservative costs only reads),
    /// and it must not block on anything a writer may hold (a stripe lock, the volume's gate).
    fn parity_untrusted(&self, stripe: u64) -> bool;
}

/// The array's slot for a [`ParityTrust`], with a flag read without a lock.
pub(crate) struct TrustSlot {
    set: AtomicBool,
    hook: RwLock<Option<Arc<dyn ParityTrust>>>,
}

impl TrustSlot {
    pub(crate) fn new() -> TrustSlot {
        TrustSlot {
            set: AtomicBool::new(false),
            hook: RwLock::new(None),
        }
    }

    /// Sets (or, with `None`, removes) the hook.
    pub(crate) fn set(&self, hook: Option<Arc<dyn ParityTrust>>) {
        let mut slot = self.hook.write().unwrap_or_else(|p| p.into_inner());
        let set = hook.is_some();
        *slot = hook;
        self.set.store(set, Ordering::Release);
    }

    /// The hook in force, if any (`None` without taking a lock when none is set).
    pub(crate) fn get(&self) -> Option<Arc<dyn ParityTrust>> {
        if !self.set.load(Ordering::Acquire) {
            return None;
        }
        self.hook.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

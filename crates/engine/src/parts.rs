//! [`Parts`]: what a level's data path (`levels`) works with — the geometry, the member table
//! and its runner, the stripe locks, scratch buffers, stripe gathering, the journal slot and
//! what says a stripe's parity is untrusted. `Array` owns one and adds what is the array's
//! alone: the level's `LevelIo`, the client-request counter and the public operations. This
//! module names neither (`Array` uses `Parts`, the levels take `&Parts`).

use crate::error::IoError;
use crate::gather::Gather;
use crate::io::{FanOut, MemOp, Runner, FANOUT_MIN_BYTES_DEFAULT};
use crate::locks::{Held, StripeLocks};
use crate::members::Members;
use crate::scratch::{ScratchPool, SCRATCH_IDLE_MAX_BYTES_DEFAULT};
use crate::state::MemberHealth;
use crate::trust::{ParityTrust, TrustSlot};
use crate::unsynced::Unsynced;
use layout::Geometry;
use member::Member;
use std::sync::{Arc, RwLock};

/// An array's parts, each a type whose fields are private to its module.
pub(crate) struct Parts {
    pub(crate) geometry: Geometry,
    /// Per role: the members, their health, fault counters and requests in flight.
    pub(crate) members: Members,
    pub(crate) locks: StripeLocks,
    /// Per-member share of a batch from which member I/O fans out to threads.
    pub(crate) fanout: FanOut,
    /// The journal RAID 5/6 member writes are logged to first (see `write_log`).
    pub(crate) journal: RwLock<Option<Arc<journal::Journal>>>,
    /// Chunk-sized buffers for RAID 5/6 parity and stripe reads, reused across requests.
    pub(crate) scratch: ScratchPool,
    /// RAID 5/6: adjacent concurrent writes that share a stripe write it whole, once.
    pub(crate) gather: Gather,
    /// Sync units a write refused for lack of space may have left inconsistent (`unsynced`).
    pub(crate) unsynced: Unsynced,
    /// RAID 5/6: which stripes' parity may disagree with their data (during a sync).
    pub(crate) trust: TrustSlot,
}

impl Parts {
    /// The parts of an array of `geometry` over `members` (`None`: missing), with the default
    /// tuning and no journal, parity-trust hook or unsynced unit.
    pub(crate) fn new(geometry: Geometry, members: Vec<Option<Arc<dyn Member>>>) -> Parts {
        let chunk_bytes = geometry.chunk_bytes();
        Parts {
            geometry,
            members: Members::new(members),
            locks: StripeLocks::new(),
            fanout: FanOut::new(FANOUT_MIN_BYTES_DEFAULT),
            journal: RwLock::new(None),
            scratch: ScratchPool::new(chunk_bytes, SCRATCH_IDLE_MAX_BYTES_DEFAULT),
            gather: Gather::new(),
            unsynced: Default::default(),
            trust: TrustSlot::new(),
        }
    }

    /// Readable members, or `ArrayFailed` when they no longer hold all the data.
    pub(crate) fn usable(&self) -> Result<Vec<bool>, IoError> {
        let present = self.present_snapshot();
        if self.geometry.survives(&present) {
            Ok(present)
        } else {
            Err(IoError::ArrayFailed {
                level: self.geometry.level(),
                missing: missing_roles(&present),
            })
        }
    }

    /// Which roles may be read (in sync: not missing, failed or being rebuilt).
    pub(crate) fn present_snapshot(&self) -> Vec<bool> {
        self.members
            .health_snapshot()
            .iter()
            .map(|h| h.readable())
            .collect()
    }

    /// Which roles every write must reach (in sync or being rebuilt).
    pub(crate) fn writable_snapshot(&self) -> Vec<bool> {
        self.members
            .health_snapshot()
            .iter()
            .map(|h| h.writable())
            .collect()
    }

    /// The health of `role`.
    pub(crate) fn health_of(&self, role: usize) -> MemberHealth {
        self.members.health_of(role)
    }

    /// The member-I/O runner over these members.
    fn io(&self) -> Runner<'_> {
        Runner::new(&self.geometry, &self.members, &self.fanout)
    }

    /// One member operation (see [`Runner::member_io`]).
    pub(crate) fn member_io(&self, op: MemOp<'_>) -> Result<(), IoError> {
        self.io().member_io(op)
    }

    /// A batch of member operations (see [`Runner::run`]).
    pub(crate) fn run(&self, ops: Vec<MemOp<'_>>) -> Result<(), IoError> {
        self.io().run(ops)
    }

    /// Whether `stripe`'s parity is untrusted: `hook` (from [`TrustSlot::get`], taken once
    /// per request) says a sync has not reached it, or a write refused for lack of space left
    /// it unsynced (`unsynced`). Called under the stripe's lock.
    pub(crate) fn parity_untrusted(
        &self,
        hook: Option<&Arc<dyn ParityTrust>>,
        stripe: u64,
    ) -> bool {
        self.unsynced.contains(stripe) || hook.is_some_and(|h| h.parity_untrusted(stripe))
    }

    /// Lock keys of the rows of `role` in `[offset, offset+len)`, taken at once.
    pub(crate) fn lock_member_range(&self, role: usize, offset: u64, len: u64) -> Held<'_> {
        self.locks
            .lock(self.member_range_keys(role, offset, len).into_iter())
    }

    /// Stripe-lock keys of the rows of `role` in `[offset, offset+len)`.
    pub(crate) fn member_range_keys(&self, role: usize, offset: u64, len: u64) -> Vec<u64> {
        let chunk = self.geometry.chunk_bytes();
        assert!(len > 0);
        let first_row = offset / chunk;
        let end_row = (offset + len).div_ceil(chunk);
        (first_row..end_row)
            .map(|row| self.geometry.unit_of_row(role, row))
            .collect()
    }
}

/// The roles `present` says are not.
pub(crate) fn missing_roles(present: &[bool]) -> Vec<usize> {
    (0..present.len()).filter(|&r| !present[r]).collect()
}

//! The member table: per role, the member serving it (and during a replace the member being
//! filled), its health, its fault counters and its requests in flight; the state epoch and
//! the fault policy. Fields are private: health changes only through [`Members::transition`]
//! (one match arm per allowed move, under the transitions mutex, the table in `state`), slots
//! only through the swap methods below, each of which bumps the epoch where a reader must
//! notice. Health, epoch and in-flight counts are atomics: the data path reads them without
//! locks.

use crate::speed::Speed;
use crate::state::{FaultCounters, FaultPolicy, FaultReason, FaultStats, MemberHealth};
use iostats::{IoCounters, IoSnapshot, OpKind};
use layout::Geometry;
use member::Member;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockWriteGuard};

/// A member of a slot, if any.
pub(crate) type MaybeMember = Option<Arc<dyn Member>>;

/// A requested health change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Move {
    /// Stop using the member; `forced` even if data is then lost.
    Fail { forced: bool },
    /// A new member starts its rebuild.
    Attach,
    /// The rebuild reached the end.
    Finish,
    /// The faulty member is taken away.
    Detach,
}

/// The members of one role.
#[derive(Debug)]
struct Slot {
    member: MaybeMember,
    /// During a replace: the member being filled; every write to the role reaches it too.
    replacement: MaybeMember,
}

pub(crate) struct Members {
    slots: Vec<RwLock<Slot>>,
    /// Per role: a [`MemberHealth`] code; changed only by [`Members::transition`].
    health: Vec<AtomicU8>,
    /// Bumped on every health change and member swap (before the change is visible).
    epoch: AtomicU64,
    /// Serialises health transitions (survival checks must see a stable set).
    transitions: Mutex<()>,
    faults: Vec<FaultCounters>,
    policy: RwLock<FaultPolicy>,
    /// Per role: the I/O counters of its member operations (requests in flight among them).
    io: Vec<IoCounters>,
    /// Per role: outstanding read bytes, read latency, the slow verdict, write-mostly.
    speed: Speed,
}

impl Members {
    /// `members[role]` serves `role` (in sync), `None` is missing.
    pub(crate) fn new(members: Vec<MaybeMember>) -> Members {
        let n = members.len();
        let health = members.iter().map(|m| {
            let h = match m {
                Some(_) => MemberHealth::InSync,
                None => MemberHealth::Missing,
            };
            AtomicU8::new(h.code())
        });
        Members {
            health: health.collect(),
            slots: members
                .into_iter()
                .map(|member| {
                    RwLock::new(Slot {
                        member,
                        replacement: None,
                    })
                })
                .collect(),
            epoch: AtomicU64::new(0),
            transitions: Mutex::new(()),
            faults: (0..n).map(|_| FaultCounters::default()).collect(),
            policy: RwLock::new(FaultPolicy::default()),
            io: (0..n).map(|_| IoCounters::new()).collect(),
            speed: Speed::new(n),
        }
    }

    /// Number of roles.
    pub(crate) fn count(&self) -> usize {
        self.slots.len()
    }

    /// Applies `mv` to `role` if allowed from its current state; returns the new state. A
    /// non-forced fail is refused when `geometry` would not survive without the member.
    pub(crate) fn transition(
        &self,
        role: usize,
        mv: Move,
        geometry: &Geometry,
    ) -> Option<MemberHealth> {
        use MemberHealth::*;
        assert!(role < self.count(), "no member {role}");
        let _serial = self.transitions.lock().unwrap_or_else(|p| p.into_inner());
        let from = self.health_of(role);
        let to = match (from, mv) {
            // A recovering member holds no data anyone depends on: failing it is always safe.
            (Recovering, Move::Fail { .. }) => Faulty,
            (InSync, Move::Fail { forced }) => {
                let mut present: Vec<bool> = self
                    .health_snapshot()
                    .iter()
                    .map(|h| h.readable())
                    .collect();
                present[role] = false;
                if !forced && !geometry.survives(&present) {
                    return None;
                }
                Faulty
            }
            (Missing | Faulty, Move::Attach) => Recovering,
            (Recovering, Move::Finish) => InSync,
            (Faulty, Move::Detach) => Missing,
            _ => return None,
        };
        // Bump the epoch first: whoever sees the new state also sees the new epoch.
        self.bump_epoch();
        self.health[role].store(to.code(), Ordering::Release);
        Some(to)
    }

    /// The health of `role`.
    #[inline]
    pub(crate) fn health_of(&self, role: usize) -> MemberHealth {
        MemberHealth::from_code(self.health[role].load(Ordering::Acquire))
    }

    /// The health of every role.
    #[inline]
    pub(crate) fn health_snapshot(&self) -> Vec<MemberHealth> {
        (0..self.count()).map(|r| self.health_of(r)).collect()
    }

    /// Counter bumped on every member state change.
    #[inline]
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn bump_epoch(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// (member, replacement) of `role`, cloned out of the slot.
    #[inline]
    pub(crate) fn slot(&self, role: usize) -> (MaybeMember, MaybeMember) {
        let slot = self.slots[role].read().unwrap_or_else(|p| p.into_inner());
        (slot.member.clone(), slot.replacement.clone())
    }

    fn slot_mut(&self, role: usize) -> RwLockWriteGuard<'_, Slot> {
        self.slots[role].write().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts `member` in `role`'s slot (the caller transitions its health); returns the
    /// previous one. The epoch moves while the slot is held: a read that finds the new member
    /// sees the new epoch afterwards (`plain::read` relies on it).
    pub(crate) fn set_member(&self, role: usize, member: MaybeMember) -> MaybeMember {
        let mut slot = self.slot_mut(role);
        self.bump_epoch();
        self.speed.reset(role);
        std::mem::replace(&mut slot.member, member)
    }

    /// Starts filling `new` as the replacement of `role`; refused (with the role's health)
    /// unless the role is in sync with no replace under way.
    pub(crate) fn start_replace(
        &self,
        role: usize,
        new: Arc<dyn Member>,
    ) -> Result<(), MemberHealth> {
        let state = self.health_of(role);
        let mut slot = self.slot_mut(role);
        if state != MemberHealth::InSync || slot.replacement.is_some() {
            return Err(state);
        }
        slot.replacement = Some(new);
        Ok(())
    }

    /// Makes the replacement of `role` its member, with fresh counters; returns the old one.
    pub(crate) fn finish_replace(&self, role: usize) -> MaybeMember {
        let mut slot = self.slot_mut(role);
        let new = slot.replacement.take()?;
        self.bump_epoch();
        self.faults[role].reset();
        self.speed.reset(role);
        slot.member.replace(new)
    }

    /// Abandons the replace of `role`; returns the replacement.
    pub(crate) fn cancel_replace(&self, role: usize) -> MaybeMember {
        self.slot_mut(role).replacement.take()
    }

    /// A write to `new`, the replacement of `role`, failed (a client write repeated on it or a
    /// copy step): the replace is abandoned and the role keeps its member. The one place this
    /// happens, whoever saw the error. The state epoch moves, so the volume rewrites the
    /// superblocks (dropping the replace) before the request that saw the error completes:
    /// the replacement missed that write and must never be trusted to hold the role.
    pub(crate) fn drop_failed_replacement(
        &self,
        role: usize,
        new: &Arc<dyn Member>,
        e: &std::io::Error,
    ) {
        let mut slot = self.slot_mut(role);
        let current = slot.replacement.as_ref();
        if !current.is_some_and(|r| Arc::ptr_eq(r, new)) {
            return; // already cancelled, or a later replace: not ours to drop
        }
        slot.replacement = None;
        // Bump the epoch while the slot is held: whoever sees no replacement sees the new epoch.
        self.bump_epoch();
        drop(slot);
        let reason = FaultReason::WriteError(format!("replacement {}: {e}", new.name()));
        self.record_fault(role, reason);
    }

    /// Declares `role` faulty for `reason` unless `geometry` would lose data without it; a
    /// replacement in progress is dropped with its role. True when the member is (now or
    /// already) not in use.
    pub(crate) fn try_fail(&self, role: usize, reason: FaultReason, geometry: &Geometry) -> bool {
        let failed = self.transition(role, Move::Fail { forced: false }, geometry);
        self.after_fail(role, failed.is_some(), reason)
    }

    /// [`Members::try_fail`] for the answer of a call made to `called`: judged only while
    /// `called` still serves `role`. A member failed and swapped out while its call ran (a
    /// spare attached, a replace finished) is no longer in use, and its late timeout or error
    /// says nothing of the member now in the role, which it must not fail.
    pub(crate) fn try_fail_called(
        &self,
        role: usize,
        called: &Arc<dyn Member>,
        reason: FaultReason,
        geometry: &Geometry,
    ) -> bool {
        // The slot is held across the transition, so no swap comes between the check and it
        // (swaps take the slot exclusively; `transition` takes no slot).
        let slot = self.slots[role].read().unwrap_or_else(|p| p.into_inner());
        if !slot.member.as_ref().is_some_and(|m| Arc::ptr_eq(m, called)) {
            return true;
        }
        let failed = self.transition(role, Move::Fail { forced: false }, geometry);
        drop(slot);
        self.after_fail(role, failed.is_some(), reason)
    }

    /// Whether `called` serves `role` now (see [`Members::try_fail_called`]).
    pub(crate) fn serves(&self, role: usize, called: &Arc<dyn Member>) -> bool {
        let slot = self.slots[role].read().unwrap_or_else(|p| p.into_inner());
        slot.member.as_ref().is_some_and(|m| Arc::ptr_eq(m, called))
    }

    fn after_fail(&self, role: usize, failed: bool, reason: FaultReason) -> bool {
        if failed {
            self.record_fault(role, reason);
            self.cancel_replace(role);
            return true;
        }
        !self.health_of(role).readable()
    }

    /// A `kind` operation of `len` bytes starts on `role`'s member: counted (`io`), and a
    /// read's bytes outstanding (`speed`).
    #[inline]
    pub(crate) fn begin(&self, role: usize, kind: OpKind, len: u64) -> iostats::Started {
        if kind == OpKind::Read {
            self.speed.read_begins(role, len);
        }
        self.io[role].begin()
    }

    /// The operation `started` by [`Members::begin`] ended: counted, its latency fed to the
    /// read balance and the slow-member window (judged here when the window is over).
    /// `own`: the member's own time for a call started ahead and waited for later (its
    /// counted time also holds the wait for the batch's earlier members, which must not make
    /// it look slow). Returns the counted time.
    #[inline]
    pub(crate) fn end(
        &self,
        role: usize,
        started: iostats::Started,
        kind: OpKind,
        len: u64,
        ok: bool,
        own: Option<std::time::Duration>,
    ) -> std::time::Duration {
        let took = self.io[role].end(started, kind, len, ok);
        let (read, flush) = (kind == OpKind::Read, kind == OpKind::Flush);
        let own = own.unwrap_or(took).as_nanos() as u64;
        self.speed.ended(role, read, flush, len, own);
        let now = iostats::now_ns();
        if self.speed.window_over(now) {
            let readable: Vec<bool> = self
                .health_snapshot()
                .iter()
                .map(|h| h.readable())
                .collect();
            self.speed.judge(now, &readable);
        }
        took
    }

    /// What reads balance on and the slow verdicts (`speed`).
    #[inline]
    pub(crate) fn speed(&self) -> &Speed {
        &self.speed
    }

    /// The I/O counters of every role now.
    pub(crate) fn io_snapshot(&self) -> Vec<IoSnapshot> {
        self.io.iter().map(IoCounters::snapshot).collect()
    }

    /// The fault counters of `role`.
    #[inline]
    pub(crate) fn faults(&self, role: usize) -> &FaultCounters {
        &self.faults[role]
    }

    /// Records why `role` was last declared faulty.
    pub(crate) fn record_fault(&self, role: usize, reason: FaultReason) {
        self.faults[role].record(reason);
    }

    /// Error counters of `role`.
    pub(crate) fn fault_stats(&self, role: usize) -> FaultStats {
        self.faults[role].stats()
    }

    /// The fault policy in force.
    #[inline]
    pub(crate) fn policy(&self) -> FaultPolicy {
        *self.policy.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the fault policy (takes effect for the next member request).
    pub(crate) fn set_policy(&self, policy: FaultPolicy) {
        *self.policy.write().unwrap_or_else(|p| p.into_inner()) = policy;
    }
}

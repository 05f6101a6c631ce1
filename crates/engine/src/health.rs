//! Health transitions of the roles (the table is in `state`): every change goes through
//! [`Array::transition`], one match arm per allowed move, under the transitions mutex.

use crate::array::missing_roles;
use crate::error::EngineError;
use crate::state::{FaultPolicy, FaultReason, FaultStats, MemberHealth};
use crate::Array;
use member::Member;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A member of a slot, if any.
pub(crate) type MaybeMember = Option<Arc<dyn Member>>;

/// A requested health change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Move {
    /// Stop using the member; `forced` even if data is then lost.
    Fail { forced: bool },
    /// A new member starts its rebuild.
    Attach,
    /// The rebuild reached the end.
    Finish,
    /// The faulty member is taken away.
    Detach,
}

impl Array {
    /// Applies `mv` to `role` if allowed from its current state; returns the new state.
    fn transition(&self, role: usize, mv: Move) -> Option<MemberHealth> {
        use MemberHealth::*;
        assert!(role < self.slots.len(), "no member {role}");
        let _serial = self.transitions.lock().unwrap_or_else(|p| p.into_inner());
        let from = MemberHealth::from_code(self.health[role].load(Ordering::Acquire));
        let to = match (from, mv) {
            // A recovering member holds no data anyone depends on: failing it is always safe.
            (Recovering, Move::Fail { .. }) => Faulty,
            (InSync, Move::Fail { forced }) => {
                let mut present = self.present_snapshot();
                present[role] = false;
                if !forced && !self.geometry.survives(&present) {
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
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.health[role].store(to.code(), Ordering::Release);
        Some(to)
    }

    /// Stops using member `role` even if data is lost; the array then behaves as if it were
    /// missing (tests, and the operator's explicit fail).
    pub fn fail_member(&self, role: usize) {
        if self.transition(role, Move::Fail { forced: true }).is_some() {
            self.record_fault(role, FaultReason::Requested);
        }
    }

    /// Declares member `role` faulty unless the array would lose data without it. True when
    /// the member is (now or already) not in use.
    pub fn try_fail_member(&self, role: usize, reason: FaultReason) -> bool {
        if self
            .transition(role, Move::Fail { forced: false })
            .is_some()
        {
            self.record_fault(role, reason);
            // A replacement in progress is dropped with its role.
            self.slot_mut(role).replacement = None;
            return true;
        }
        !self.health_of(role).readable()
    }

    fn record_fault(&self, role: usize, reason: FaultReason) {
        *self.faults[role]
            .last_fault
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(reason);
    }

    /// Puts `member` (a data-area view) into the missing or faulty role `role`; from now on
    /// every write reaches it, and it is read once [`Array::finish_rebuild`] is called.
    pub fn attach_member(&self, role: usize, member: Arc<dyn Member>) -> Result<(), EngineError> {
        let needed_bytes = self.geometry.member_data_bytes(role);
        if member.len() < needed_bytes {
            return Err(EngineError::MemberTooSmall {
                role,
                name: member.name().to_string(),
                len_bytes: member.len(),
                needed_bytes,
            });
        }
        if !self.geometry.has_redundancy() {
            return Err(EngineError::NoRedundancy {
                level: self.geometry.level(),
            });
        }
        // Install the member before the state says writable, under all stripe locks so no
        // write is between planning and issuing.
        let _all = self.locks.lock_range(0, crate::STRIPE_LOCKS_COUNT as u64);
        let previous = self.slot_mut(role).member.replace(member);
        if self.transition(role, Move::Attach).is_none() {
            self.slot_mut(role).member = previous;
            return Err(EngineError::RoleBusy {
                role,
                state: self.health_of(role),
            });
        }
        self.faults[role].reset();
        Ok(())
    }

    /// Ends the rebuild of `role`: it is in sync and read from now on.
    pub fn finish_rebuild(&self, role: usize) -> bool {
        self.transition(role, Move::Finish).is_some()
    }

    /// Removes the faulty member of `role` (it becomes missing); returns it.
    pub fn detach_member(&self, role: usize) -> Option<Arc<dyn Member>> {
        let _all = self.locks.lock_range(0, crate::STRIPE_LOCKS_COUNT as u64);
        self.transition(role, Move::Detach)?;
        self.slot_mut(role).member.take()
    }

    /// The member (data area) serving `role`, if any.
    pub fn member(&self, role: usize) -> Option<Arc<dyn Member>> {
        self.slot(role).0
    }

    /// The health of `role`.
    pub fn health_of(&self, role: usize) -> MemberHealth {
        MemberHealth::from_code(self.health[role].load(Ordering::Acquire))
    }

    /// Counts a write to `role`'s member refused for lack of space outside the data path (its
    /// bitmap or superblock area), so `fault_stats` shows it with the data-path ones.
    pub fn count_no_space(&self, role: usize) {
        self.faults[role]
            .no_space_errors
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Error counters of `role`.
    pub fn fault_stats(&self, role: usize) -> FaultStats {
        let c = &self.faults[role];
        FaultStats {
            read_errors: c.read_errors.load(Ordering::Relaxed),
            write_errors: c.write_errors.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
            no_space_errors: c.no_space_errors.load(Ordering::Relaxed),
            last_fault: c
                .last_fault
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map(|r| r.to_string()),
        }
    }

    /// The fault policy in force.
    pub fn fault_policy(&self) -> FaultPolicy {
        *self.policy.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the fault policy (takes effect for the next member request).
    pub fn set_fault_policy(&self, policy: FaultPolicy) {
        *self.policy.write().unwrap_or_else(|p| p.into_inner()) = policy;
    }

    /// Roles that are not readable.
    pub fn missing_roles(&self) -> Vec<usize> {
        missing_roles(&self.present_snapshot())
    }

    /// (member, replacement) of `role`, cloned out of the slot.
    pub(crate) fn slot(&self, role: usize) -> (MaybeMember, MaybeMember) {
        let slot = self.slots[role].read().unwrap_or_else(|p| p.into_inner());
        (slot.member.clone(), slot.replacement.clone())
    }

    pub(crate) fn slot_mut(
        &self,
        role: usize,
    ) -> std::sync::RwLockWriteGuard<'_, crate::array::Slot> {
        self.slots[role].write().unwrap_or_else(|p| p.into_inner())
    }
}

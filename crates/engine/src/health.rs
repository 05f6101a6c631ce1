//! The array's member operations: failing, attaching, finishing and detaching members, and
//! their health and counters. The table itself and its one transition function are in
//! `members`; the allowed moves are listed in `state`.

use crate::error::EngineError;
use crate::members::Move;
use crate::parts::missing_roles;
use crate::speed::{MemberSpeed, ReadBalance, SlowPolicy};
use crate::state::{FaultPolicy, FaultReason, FaultStats, MemberHealth};
use crate::Array;
use member::Member;
use std::sync::Arc;

impl Array {
    fn transition(&self, role: usize, mv: Move) -> Option<MemberHealth> {
        self.parts
            .members
            .transition(role, mv, &self.parts.geometry)
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
        self.parts
            .members
            .try_fail(role, reason, &self.parts.geometry)
    }

    fn record_fault(&self, role: usize, reason: FaultReason) {
        self.parts.members.record_fault(role, reason);
    }

    /// Puts `member` (a data-area view) into the missing or faulty role `role`; from now on
    /// every write reaches it, and it is read once [`Array::finish_rebuild`] is called.
    pub fn attach_member(&self, role: usize, member: Arc<dyn Member>) -> Result<(), EngineError> {
        let needed_bytes = self.parts.geometry.member_data_bytes(role);
        EngineError::check_fits(role, member.as_ref(), needed_bytes)?;
        if !self.parts.geometry.has_redundancy() {
            return Err(EngineError::NoRedundancy {
                level: self.parts.geometry.level(),
            });
        }
        // Install the member before the state says writable, under all stripe locks so no
        // write is between planning and issuing.
        let _all = self.parts.locks.lock_all();
        let previous = self.parts.members.set_member(role, Some(member));
        if self.transition(role, Move::Attach).is_none() {
            self.parts.members.set_member(role, previous);
            return Err(EngineError::RoleBusy {
                role,
                state: self.health_of(role),
            });
        }
        self.parts.members.faults(role).reset();
        Ok(())
    }

    /// Ends the rebuild of `role`: it is in sync and read from now on.
    pub fn finish_rebuild(&self, role: usize) -> bool {
        self.transition(role, Move::Finish).is_some()
    }

    /// Removes the faulty member of `role` (it becomes missing); returns it.
    pub fn detach_member(&self, role: usize) -> Option<Arc<dyn Member>> {
        let _all = self.parts.locks.lock_all();
        self.transition(role, Move::Detach)?;
        self.parts.members.set_member(role, None)
    }

    /// The member (data area) serving `role`, if any.
    pub fn member(&self, role: usize) -> Option<Arc<dyn Member>> {
        self.parts.members.slot(role).0
    }

    /// The health of `role`.
    pub fn health_of(&self, role: usize) -> MemberHealth {
        self.parts.members.health_of(role)
    }

    /// Counts a write to `role`'s member refused for lack of space outside the data path (its
    /// bitmap or superblock area), so `fault_stats` shows it with the data-path ones.
    pub fn count_no_space(&self, role: usize) {
        self.parts.members.faults(role).note_no_space();
    }

    /// The I/O counters of every role's member operations now (the one place they pass:
    /// `Parts::member_io`), by role. Superblock, bitmap and journal I/O do not pass there.
    pub fn member_io_stats(&self) -> Vec<iostats::IoSnapshot> {
        self.parts.members.io_snapshot()
    }

    /// Error counters of `role`.
    pub fn fault_stats(&self, role: usize) -> FaultStats {
        self.parts.members.fault_stats(role)
    }

    /// Marks the member serving `role` write-mostly (md's flag: on RAID 1 and 10 it is read
    /// only when no other copy can serve) or not. A member put into the role later (a spare,
    /// a replacement) starts unmarked: the caller marks it again if its name says so.
    pub fn set_write_mostly(&self, role: usize, on: bool) {
        self.parts.members.speed().set_write_mostly(role, on);
    }

    /// How reads choose a copy (RAID 1, 10) and whether they go around a slow member (RAID
    /// 5, 6): [`ReadBalance`]; `Latency` until set.
    pub fn set_read_balance(&self, balance: ReadBalance) {
        self.parts.members.speed().set_balance(balance);
    }

    /// The read balance in force.
    pub fn read_balance(&self) -> ReadBalance {
        self.parts.members.speed().balance()
    }

    /// What is measured of `role`'s speed, its slow verdict and its write-mostly mark.
    pub fn member_speed(&self, role: usize) -> MemberSpeed {
        self.parts.members.speed().report(role)
    }

    /// What makes a member slow (`SlowPolicy::default()` until set): a slow member's reads
    /// are served by the other copies (RAID 1, 10) or reconstructed when that is cheaper
    /// (RAID 5, 6), and `member_speed` reports it.
    pub fn set_slow_policy(&self, policy: SlowPolicy) {
        self.parts.members.speed().set_policy(policy);
    }

    /// The fault policy in force.
    pub fn fault_policy(&self) -> FaultPolicy {
        self.parts.members.policy()
    }

    /// Changes the fault policy (takes effect for the next member request).
    pub fn set_fault_policy(&self, policy: FaultPolicy) {
        self.parts.members.set_policy(policy);
    }

    /// Roles that are not readable.
    pub fn missing_roles(&self) -> Vec<usize> {
        missing_roles(&self.present_snapshot())
    }
}

//! Recovery from redundancy: what a role's member should hold, computed from the others.
//!
//! - [`Array::recovering`] wraps every client request: a member read error is repaired by
//!   rewriting the range from redundancy (as md does) and the request is retried; the caller
//!   sees an error only when the data cannot be served.
//! - [`Array::rebuild_step`] fills a recovering member, [`Array::replace_step`] copies a member
//!   onto its replacement; both work on member ranges under the stripe locks of those rows, so
//!   client I/O continues around them.
//! - [`Array::reconstruct`] is the level's (`LevelIo::reconstruct`: from a copy in
//!   `levels::mirror`, from parity in `levels::raid56::reconstruct`).

use crate::error::{IoError, Op};
use crate::io::MemOp;
use crate::locks::Held;
use crate::state::{FaultReason, MemberHealth};
use crate::Array;
use member::Member;
use std::sync::Arc;

/// Retries beyond the read-error limit and two per member before a request gives up.
const RETRIES_EXTRA: usize = 4;

impl Array {
    /// Runs `attempt`, repairing member read errors and retrying, a bounded number of times.
    pub(crate) fn recovering<T>(
        &self,
        mut attempt: impl FnMut() -> Result<T, IoError>,
    ) -> Result<T, IoError> {
        let limit =
            self.fault_policy().read_errors_max as usize + 2 * self.member_count() + RETRIES_EXTRA;
        let mut tries = 0;
        loop {
            match attempt() {
                Err(IoError::Member {
                    role,
                    name,
                    op: Op::Read,
                    offset,
                    len,
                    source,
                }) => {
                    tries += 1;
                    if tries > limit || !self.recover_read_error(role, offset, len) {
                        return Err(IoError::Member {
                            role,
                            name,
                            op: Op::Read,
                            offset,
                            len,
                            source,
                        });
                    }
                }
                other => return other,
            }
        }
    }

    /// After a read error on `role` at `[offset, offset+len)`: rewrite the range from
    /// redundancy. True when retrying the request may succeed.
    fn recover_read_error(&self, role: usize, offset: u64, len: u64) -> bool {
        if !self.health_of(role).readable() {
            return true;
        }
        if self.level_io.rows_untrusted(self, offset, len) {
            // Reconstructing from parity that may not match its data would return (and write
            // back over the member) bytes that were never there: the read fails instead, as
            // an I/O error the client sees, and the member keeps what it holds. Its read error
            // was counted like any other.
            return false;
        }
        match self.rewrite_range(role, offset, len) {
            Ok(()) => true,
            // Another member failed while reconstructing: its error was counted; retry.
            Err(IoError::Member { role: other, .. }) if other != role => true,
            // No space to write the repaired range back: not the member's fault; the read
            // fails (it was not served from redundancy either).
            Err(e) if e.is_no_space() => false,
            Err(e) => self.try_fail_member(role, FaultReason::Unrepairable(e.to_string())),
        }
    }

    /// Reconstructs `role`'s `[offset, offset+len)` from the other members and writes it back.
    fn rewrite_range(&self, role: usize, offset: u64, len: u64) -> Result<(), IoError> {
        let _held = self.lock_member_range(role, offset, len);
        let mut readable = self.present_snapshot();
        readable[role] = false;
        let mut buf = vec![0u8; len as usize];
        self.reconstruct(role, offset, &mut buf, &readable, false)?;
        self.member_io(MemOp::Write {
            role,
            offset,
            buf: &buf,
        })
    }

    /// Rebuilds `[offset, offset+len)` of the recovering member of `role` from the others.
    /// A write error fails the new member (check [`Array::health_of`] afterwards).
    /// Read errors on the other members are repaired and retried like a client read's.
    pub fn rebuild_step(&self, role: usize, offset: u64, len: u64) -> Result<(), IoError> {
        assert!(offset + len <= self.geometry.member_data_bytes(role));
        self.recovering(|| self.rebuild_step_locked(role, offset, len))
    }

    fn rebuild_step_locked(&self, role: usize, offset: u64, len: u64) -> Result<(), IoError> {
        let _held = self.lock_member_range(role, offset, len);
        if self.health_of(role) != MemberHealth::Recovering {
            return Ok(());
        }
        let readable = self.present_snapshot();
        assert!(!readable[role]);
        let mut buf = vec![0u8; len as usize];
        self.reconstruct(role, offset, &mut buf, &readable, true)?;
        self.member_io(MemOp::Write {
            role,
            offset,
            buf: &buf,
        })
    }

    /// Copies `[offset, offset+len)` of `role` onto its replacement (reconstructing what the
    /// old member cannot read). False when the replacement is gone (a write to it failed); an
    /// error that is a lack of space keeps it (redo the step later).
    pub fn replace_step(&self, role: usize, offset: u64, len: u64) -> Result<bool, IoError> {
        assert!(offset + len <= self.geometry.member_data_bytes(role));
        self.recovering(|| self.replace_step_locked(role, offset, len))
    }

    fn replace_step_locked(&self, role: usize, offset: u64, len: u64) -> Result<bool, IoError> {
        let _held = self.lock_member_range(role, offset, len);
        let Some(new) = self.members.slot(role).1 else {
            return Ok(false);
        };
        let mut buf = vec![0u8; len as usize];
        let read = self.member_io(MemOp::Read {
            role,
            offset,
            buf: &mut buf,
        });
        if read.is_err() || !self.health_of(role).readable() {
            let mut readable = self.present_snapshot();
            readable[role] = false;
            self.reconstruct(role, offset, &mut buf, &readable, false)?;
        }
        if let Err(e) = new.write_at(&buf, offset) {
            if crate::is_no_space(&e) {
                // The new member's filesystem is full: not its fault, and it missed no client
                // write. The copy does not advance; the step is redone once there is space.
                return Err(IoError::Member {
                    role,
                    name: new.name().to_string(),
                    op: Op::Write,
                    offset,
                    len,
                    source: e,
                });
            }
            self.members.drop_failed_replacement(role, &new, &e);
            return Ok(false);
        }
        Ok(true)
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

    /// What `role` should hold at `[offset, offset + buf.len())`, from the `readable` members
    /// (`readable[role]` must be false). The caller holds the rows' locks. `reuse`: keep the
    /// read buffers for this thread's next call (background rebuild steps only, so the memory
    /// held stays bounded by one worker's step).
    pub(crate) fn reconstruct(
        &self,
        role: usize,
        offset: u64,
        buf: &mut [u8],
        readable: &[bool],
        reuse: bool,
    ) -> Result<(), IoError> {
        assert!(!readable[role]);
        if !self.geometry.survives(readable) {
            return Err(IoError::ArrayFailed {
                level: self.geometry.level(),
                missing: crate::array::missing_roles(readable),
            });
        }
        let lost = crate::levels::Lost {
            role,
            offset,
            readable,
            reuse,
        };
        self.level_io.reconstruct(self, &lost, buf)
    }

    /// Starts filling `new` (a data-area view) with `role`'s data; from now on every write to
    /// the role reaches it too. The role stays in sync throughout.
    pub fn start_replace(
        &self,
        role: usize,
        new: Arc<dyn Member>,
    ) -> Result<(), crate::EngineError> {
        let needed_bytes = self.geometry.member_data_bytes(role);
        if new.len() < needed_bytes {
            return Err(crate::EngineError::MemberTooSmall {
                role,
                name: new.name().to_string(),
                len_bytes: new.len(),
                needed_bytes,
            });
        }
        if !self.geometry.has_redundancy() {
            return Err(crate::EngineError::NoRedundancy {
                level: self.geometry.level(),
            });
        }
        let _all = self.locks.lock_all();
        self.members
            .start_replace(role, new)
            .map_err(|state| crate::EngineError::RoleBusy { role, state })
    }

    /// The replacement being filled for `role`, if any.
    pub fn replacement(&self, role: usize) -> Option<Arc<dyn Member>> {
        self.members.slot(role).1
    }

    /// Makes the replacement of `role` its member (under every stripe lock, so no write is
    /// half-way); returns the old member.
    pub fn finish_replace(&self, role: usize) -> Option<Arc<dyn Member>> {
        let _all = self.locks.lock_all();
        self.members.finish_replace(role)
    }

    /// Abandons the replace of `role`; returns the replacement.
    pub fn cancel_replace(&self, role: usize) -> Option<Arc<dyn Member>> {
        self.members.cancel_replace(role)
    }
}

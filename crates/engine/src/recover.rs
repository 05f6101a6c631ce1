//! Rebuild and replace: [`Array::rebuild_step`] fills a recovering member,
//! [`Array::replace_step`] copies a member onto its replacement; both work on member ranges
//! under the stripe locks of those rows, so client I/O continues around them. What a role's
//! member should hold is computed from the others by the level (`levels::repair::reconstruct`,
//! `LevelIo::reconstruct`), which also repairs read errors met on the way (`recovering`).

use crate::error::{IoError, Op};
use crate::io::MemOp;
use crate::levels::repair;
use crate::state::{FaultReason, MemberHealth};
use crate::{Array, LOST_PIECE_BYTES};
use member::Member;
use std::sync::Arc;

impl Array {
    /// Rebuilds `[offset, offset+len)` of the recovering member of `role` from the others.
    /// A write error fails the new member (check [`Array::health_of`] afterwards).
    /// Read errors on the other members are repaired and retried like a client read's. A
    /// range that cannot be read anywhere (no redundancy left for it) is, when the new member
    /// keeps a bad-block list, recorded there as lost (durably, before this returns) in 4 KiB
    /// pieces, and the rest of the step is rebuilt: the rebuild goes on (md's badblocks). With
    /// no list the step fails as before; with a full list the new member is failed.
    pub fn rebuild_step(&self, role: usize, offset: u64, len: u64) -> Result<(), IoError> {
        assert!(offset + len <= self.parts.geometry.member_data_bytes(role));
        match self.recovering(|| self.rebuild_step_locked(role, offset, len)) {
            Err(e) if self.unreadable_source(role, &e) => {
                self.rebuild_recording_lost(role, offset, len, e)
            }
            done => done,
        }
    }

    /// A read error of another member than the recovering `role` that repair could not get
    /// past: the range has no redundancy left.
    fn unreadable_source(&self, role: usize, e: &IoError) -> bool {
        matches!(e, IoError::Member { role: r, op: Op::Read, .. } if *r != role)
            && self.health_of(role) == MemberHealth::Recovering
    }

    /// [`Array::rebuild_step`] piece by piece, recording the pieces no member can provide in
    /// `role`'s bad-block list. `first`: the error that sent the step here.
    fn rebuild_recording_lost(
        &self,
        role: usize,
        offset: u64,
        len: u64,
        first: IoError,
    ) -> Result<(), IoError> {
        let Some(member) = self.parts.members.slot(role).0 else {
            return Err(first);
        };
        let end = offset + len;
        let mut at = offset;
        while at < end {
            let n = LOST_PIECE_BYTES.min(end - at);
            match self.recovering(|| self.rebuild_step_locked(role, at, n)) {
                Err(e) if self.unreadable_source(role, &e) => {
                    match member.record_lost(at, n) {
                        Some(Ok(true)) => {}
                        None => return Err(e),
                        Some(Ok(false)) => {
                            // md fails a member whose list is full: the rebuild ends.
                            let reason = FaultReason::Unrepairable(format!(
                                "bad-block list full; could not record bytes {at}..{} as lost ({e})",
                                at + n
                            ));
                            self.parts
                                .members
                                .try_fail(role, reason, &self.parts.geometry);
                            return Err(e);
                        }
                        Some(Err(source)) => {
                            let reason = FaultReason::WriteError(format!(
                                "writing its bad-block list: {source}"
                            ));
                            self.parts
                                .members
                                .try_fail(role, reason, &self.parts.geometry);
                            return Err(IoError::Member {
                                role,
                                name: member.name().to_string(),
                                op: Op::Write,
                                offset: at,
                                len: n,
                                source: Arc::new(source),
                            });
                        }
                    }
                }
                other => other?,
            }
            at += n;
        }
        Ok(())
    }

    fn rebuild_step_locked(&self, role: usize, offset: u64, len: u64) -> Result<(), IoError> {
        let _held = self.parts.lock_member_range(role, offset, len);
        if self.health_of(role) != MemberHealth::Recovering {
            return Ok(());
        }
        let readable = self.present_snapshot();
        assert!(!readable[role]);
        let mut buf = vec![0u8; len as usize];
        let (level, parts) = (self.level_io, &self.parts);
        repair::reconstruct(level, parts, role, offset, &mut buf, &readable, true)?;
        self.parts.member_io(MemOp::Write {
            role,
            offset,
            buf: &buf,
        })
    }

    /// Copies `[offset, offset+len)` of `role` onto its replacement (reconstructing what the
    /// old member cannot read). False when the replacement is gone (a write to it failed); an
    /// error that is a lack of space keeps it (redo the step later).
    ///
    /// A range neither the old member nor the redundancy can provide (the old member's read
    /// fails, e.g. on a range its bad-block list records, and so does another member's in the
    /// same rows) is, when the replacement keeps a bad-block list, recorded there as lost in
    /// 4 KiB pieces (durably, before this returns) and the rest copied, as a rebuild does. So
    /// every range of the old member's list ends on the replacement either rebuilt from
    /// redundancy or recorded as lost: the list goes with the role. With no list the step
    /// fails as before; a full list or one that cannot be written drops the replacement.
    pub fn replace_step(&self, role: usize, offset: u64, len: u64) -> Result<bool, IoError> {
        assert!(offset + len <= self.parts.geometry.member_data_bytes(role));
        match self.recovering(|| self.replace_step_locked(role, offset, len)) {
            Err(e) if unprovidable(role, &e) => self.replace_recording_lost(role, offset, len, e),
            done => done,
        }
    }

    /// [`Array::replace_step`] piece by piece, recording the pieces nothing can provide in the
    /// replacement's bad-block list. `first`: the error that sent the step here.
    fn replace_recording_lost(
        &self,
        role: usize,
        offset: u64,
        len: u64,
        first: IoError,
    ) -> Result<bool, IoError> {
        let end = offset + len;
        let mut at = offset;
        while at < end {
            let n = LOST_PIECE_BYTES.min(end - at);
            match self.recovering(|| self.replace_step_locked(role, at, n)) {
                Err(e) if unprovidable(role, &e) => {
                    let Some(new) = self.parts.members.slot(role).1 else {
                        return Ok(false);
                    };
                    let failed = match new.record_lost(at, n) {
                        Some(Ok(true)) => None,
                        None => return Err(first),
                        Some(Ok(false)) => Some(std::io::Error::other(format!(
                            "bad-block list full; could not record bytes {at}..{} as lost ({e})",
                            at + n
                        ))),
                        Some(Err(source)) => Some(std::io::Error::other(format!(
                            "writing its bad-block list: {source}"
                        ))),
                    };
                    if let Some(why) = failed {
                        // As md fails a member whose list is full: the replace ends without it.
                        self.parts.members.drop_failed_replacement(role, &new, &why);
                        return Ok(false);
                    }
                }
                Ok(true) => {}
                other => return other,
            }
            at += n;
        }
        Ok(true)
    }

    fn replace_step_locked(&self, role: usize, offset: u64, len: u64) -> Result<bool, IoError> {
        let _held = self.parts.lock_member_range(role, offset, len);
        let Some(new) = self.parts.members.slot(role).1 else {
            return Ok(false);
        };
        let mut buf = vec![0u8; len as usize];
        let read = self.parts.member_io(MemOp::Read {
            role,
            offset,
            buf: &mut buf,
        });
        if read.is_err() || !self.health_of(role).readable() {
            let mut readable = self.present_snapshot();
            readable[role] = false;
            let (level, parts) = (self.level_io, &self.parts);
            repair::reconstruct(level, parts, role, offset, &mut buf, &readable, false)?;
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
                    source: Arc::new(e),
                });
            }
            self.parts.members.drop_failed_replacement(role, &new, &e);
            return Ok(false);
        }
        Ok(true)
    }

    /// Starts filling `new` (a data-area view) with `role`'s data; from now on every write to
    /// the role reaches it too. The role stays in sync throughout.
    pub fn start_replace(
        &self,
        role: usize,
        new: Arc<dyn Member>,
    ) -> Result<(), crate::EngineError> {
        let needed_bytes = self.parts.geometry.member_data_bytes(role);
        crate::EngineError::check_fits(role, new.as_ref(), needed_bytes)?;
        if !self.parts.geometry.has_redundancy() {
            return Err(crate::EngineError::NoRedundancy {
                level: self.parts.geometry.level(),
            });
        }
        let _all = self.parts.locks.lock_all();
        self.parts
            .members
            .start_replace(role, new)
            .map_err(|state| crate::EngineError::RoleBusy { role, state })
    }

    /// The replacement being filled for `role`, if any.
    pub fn replacement(&self, role: usize) -> Option<Arc<dyn Member>> {
        self.parts.members.slot(role).1
    }

    /// Makes the replacement of `role` its member (under every stripe lock, so no write is
    /// half-way); returns the old member.
    pub fn finish_replace(&self, role: usize) -> Option<Arc<dyn Member>> {
        let _all = self.parts.locks.lock_all();
        self.parts.members.finish_replace(role)
    }

    /// Abandons the replace of `role`; returns the replacement.
    pub fn cancel_replace(&self, role: usize) -> Option<Arc<dyn Member>> {
        self.parts.members.cancel_replace(role)
    }
}

/// A read error of another member than `role` (whose own read failed first) that repair could
/// not get past: the range has no redundancy left.
fn unprovidable(role: usize, e: &IoError) -> bool {
    matches!(e, IoError::Member { role: r, op: Op::Read, .. } if *r != role)
}

//! Recovery from redundancy: what a role's member should hold, computed from the others.
//!
//! - [`Array::recovering`] wraps every client request: a member read error is repaired by
//!   rewriting the range from redundancy (as md does) and the request is retried; the caller
//!   sees an error only when the data cannot be served.
//! - [`Array::rebuild_step`] fills a recovering member, [`Array::replace_step`] copies a member
//!   onto its replacement; both work on member ranges under the stripe locks of those rows, so
//!   client I/O continues around them.

use crate::error::{IoError, Op};
use crate::io::MemOp;
use crate::locks::Held;
use crate::raid56::block_role;
use crate::state::{FaultReason, MemberHealth};
use crate::Array;
use layout::Level;
use member::Member;
use std::sync::Arc;

/// Largest per-member buffer kept for reuse: a background step (4 MiB). A thread keeps at most
/// one set (members × this).
const SCRATCH_KEEP_BYTES_MAX: u64 = 4 << 20;

thread_local! {
    /// Per-thread read buffers of `reconstruct_parity`, reused by the next call.
    static SCRATCH: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

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
        if self.parity_untrusted_rows(offset, len) {
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

    /// True when a RAID 5/6 stripe holding a member's `[offset, offset+len)` has untrusted parity
    /// (see [`crate::ParityTrust`]): nothing of it can be reconstructed correctly yet.
    /// (On RAID 5/6 a member's row r belongs to stripe r on every role.)
    fn parity_untrusted_rows(&self, offset: u64, len: u64) -> bool {
        if !matches!(self.geometry.level(), Level::Raid5 | Level::Raid6) || len == 0 {
            return false;
        }
        let hook = self.trust.get();
        let chunk = self.geometry.chunk_bytes();
        (offset / chunk..(offset + len).div_ceil(chunk))
            .any(|stripe| self.parity_untrusted(hook.as_ref(), stripe))
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
        let Some(new) = self.slot(role).1 else {
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
            self.drop_failed_replacement(role, &new, &e);
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
        match self.geometry.level() {
            Level::Raid5 | Level::Raid6 => {
                self.reconstruct_parity(role, offset, buf, readable, reuse)
            }
            Level::Raid1 | Level::Raid10 => self.reconstruct_mirror(role, offset, buf, readable),
            level => panic!("{level} has no redundancy to reconstruct from"),
        }
    }

    /// RAID 5/6: one contiguous read per readable member, then each stripe's lost blocks.
    fn reconstruct_parity(
        &self,
        role: usize,
        offset: u64,
        buf: &mut [u8],
        readable: &[bool],
        reuse: bool,
    ) -> Result<(), IoError> {
        let g = &self.geometry;
        let n = self.member_count();
        let len = buf.len();
        // Buffers are reused between calls on the same thread (a rebuild runs step after step
        // on one worker): every byte is overwritten by the reads or the reconstruction.
        let mut others = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
        others.resize_with(n, Vec::new);
        for (r, b) in others.iter_mut().enumerate() {
            b.resize(if r == role { 0 } else { len }, 0);
        }
        let ops = others
            .iter_mut()
            .enumerate()
            .filter(|(r, _)| readable[*r])
            .map(|(r, b)| MemOp::Read {
                role: r,
                offset,
                buf: b.as_mut_slice(),
            })
            .collect();
        self.run(ops)?;
        // The role's own block is rebuilt straight into `buf`.
        let mut views: Vec<&mut [u8]> = Vec::with_capacity(n);
        let mut out = Some(buf);
        for (r, b) in others.iter_mut().enumerate() {
            views.push(match r == role {
                true => out.take().expect("one output"),
                false => b.as_mut_slice(),
            });
        }
        let chunk = g.chunk_bytes();
        let mut at = offset;
        while at < offset + len as u64 {
            let stripe = at / chunk;
            let end = ((stripe + 1) * chunk).min(offset + len as u64);
            let range = (at - offset) as usize..(end - offset) as usize;
            rebuild_stripe(g, stripe, &mut views, range, readable);
            at = end;
        }
        drop(views);
        if reuse && len as u64 <= SCRATCH_KEEP_BYTES_MAX {
            SCRATCH.with(|s| *s.borrow_mut() = others);
        }
        Ok(())
    }

    /// RAID 1/10: each row piece from a readable copy of the same logical chunk.
    fn reconstruct_mirror(
        &self,
        role: usize,
        offset: u64,
        buf: &mut [u8],
        readable: &[bool],
    ) -> Result<(), IoError> {
        let g = &self.geometry;
        let chunk = g.chunk_bytes();
        let n = self.member_count() as u64;
        let mut ops = Vec::new();
        let mut rest: &mut [u8] = buf;
        let mut at = offset;
        while !rest.is_empty() {
            let row = at / chunk;
            let within = at % chunk;
            let piece = (chunk - within).min(rest.len() as u64) as usize;
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(piece);
            rest = tail;
            at += piece as u64;
            let logical = match g.level() {
                Level::Raid10 => (row * n + role as u64) / 2,
                _ => row,
            };
            if logical >= g.logical_chunk_count() {
                head.fill(0); // the unused last slot of an odd RAID 10
                continue;
            }
            let copy = g
                .chunk_copies(logical)
                .into_iter()
                .find(|c| c.role != role && readable[c.role])
                .expect("survives() promised a readable copy");
            ops.push(MemOp::Read {
                role: copy.role,
                offset: copy.member_offset + within,
                buf: head,
            });
        }
        self.run(ops)
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
        if !self.geometry.level().has_parity() && !self.is_mirrored() {
            return Err(crate::EngineError::NoRedundancy {
                level: self.geometry.level(),
            });
        }
        let _all = self.locks.lock_range(0, crate::STRIPE_LOCKS_COUNT as u64);
        let state = self.health_of(role);
        let mut slot = self.slot_mut(role);
        if state != MemberHealth::InSync || slot.replacement.is_some() {
            return Err(crate::EngineError::RoleBusy { role, state });
        }
        slot.replacement = Some(new);
        Ok(())
    }

    /// The replacement being filled for `role`, if any.
    pub fn replacement(&self, role: usize) -> Option<Arc<dyn Member>> {
        self.slot(role).1
    }

    /// Makes the replacement of `role` its member (under every stripe lock, so no write is
    /// half-way); returns the old member.
    pub fn finish_replace(&self, role: usize) -> Option<Arc<dyn Member>> {
        let _all = self.locks.lock_range(0, crate::STRIPE_LOCKS_COUNT as u64);
        let mut slot = self.slot_mut(role);
        let new = slot.replacement.take()?;
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.faults[role].reset();
        slot.member.replace(new)
    }

    /// Abandons the replace of `role`; returns the replacement.
    pub fn cancel_replace(&self, role: usize) -> Option<Arc<dyn Member>> {
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
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        drop(slot);
        *self.faults[role]
            .last_fault
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(FaultReason::WriteError(format!(
            "replacement {}: {e}",
            new.name()
        )));
    }
}

/// Rebuilds the lost blocks of `stripe` over `range` of the per-role buffers.
fn rebuild_stripe(
    g: &layout::Geometry,
    stripe: u64,
    bufs: &mut [&mut [u8]],
    range: std::ops::Range<usize>,
    readable: &[bool],
) {
    let count = g.member_count();
    let mut by_role: Vec<Option<&mut [u8]>> = bufs
        .iter_mut()
        .map(|b| Some(&mut b[range.clone()]))
        .collect();
    let mut blocks: Vec<&mut [u8]> = (0..count)
        .map(|b| {
            by_role[block_role(g, stripe, b)]
                .take()
                .expect("each role holds one block")
        })
        .collect();
    let lost: Vec<usize> = (0..count)
        .filter(|&b| !readable[block_role(g, stripe, b)])
        .collect();
    assert!(lost.len() <= g.level().parity_count());
    if !lost.is_empty() {
        parity::reconstruct(&mut blocks, g.q_role(stripe).is_some(), &lost);
    }
}

//! Read-error repair ([`recovering`]): every client request and background step runs inside
//! it; a member read error is repaired by rewriting that member range from the level's
//! redundancy (`LevelIo::reconstruct`: from a copy in `mirror`, from parity in
//! `raid56::reconstruct`), as md does, and the request is retried; the caller sees an error
//! only when the data cannot be served.

use super::{LevelIo, Lost};
use crate::error::{IoError, Op};
use crate::io::MemOp;
use crate::parts::{missing_roles, Parts};
use crate::state::FaultReason;
use crate::LOST_PIECE_BYTES;

/// Retries beyond the read-error limit and two per member before a request gives up.
const RETRIES_EXTRA: usize = 4;

/// Runs `attempt`, repairing member read errors from `level`'s redundancy and retrying, a
/// bounded number of times.
pub(crate) fn recovering<L: LevelIo + ?Sized, T>(
    level: &L,
    io: &Parts,
    mut attempt: impl FnMut() -> Result<T, IoError>,
) -> Result<T, IoError> {
    let limit =
        io.members.policy().read_errors_max as usize + 2 * io.members.count() + RETRIES_EXTRA;
    let mut tries = 0;
    loop {
        let error = match attempt() {
            Err(error) => error,
            done => return done,
        };
        let IoError::Member {
            role,
            op: Op::Read,
            offset,
            len,
            ref source,
            ..
        } = error
        else {
            return Err(error);
        };
        let recorded = member::bad_block_of(source);
        tries += 1;
        if tries > limit {
            return Err(error);
        }
        let retry = match member::is_unsettled(source) {
            true => settle_range(level, io, role, offset, len),
            false => recover_read_error(level, io, role, offset, len, recorded),
        };
        if !retry {
            return Err(error);
        }
    }
}

/// After a read error on `role` at `[offset, offset+len)`: rewrite the range from
/// redundancy. True when retrying the request may succeed. `recorded`: the range is in the
/// member's bad-block list (its content lost, the member not at fault): the rewrite makes it
/// valid again; when it cannot be made, the read fails and the member stays.
fn recover_read_error<L: LevelIo + ?Sized>(
    level: &L,
    io: &Parts,
    role: usize,
    offset: u64,
    len: u64,
    recorded: Option<&member::BadBlock>,
) -> bool {
    if !io.health_of(role).readable() {
        return true;
    }
    let mut others = io.present_snapshot();
    others[role] = false;
    if !io.geometry.survives(&others) {
        // Nothing to rebuild the range from (linear, RAID 0, or an array already degraded
        // as far as it can be): the read fails, the member keeps what it holds. (Linear has
        // no rows to lock: trying panicked here.) A degraded array's unreadable range is
        // not recorded on the member that cannot read it (it may read again: a rebuild
        // records what it could not copy on the new member, see `Array::rebuild_step`).
        return false;
    }
    if level.rows_untrusted(io, offset, len) {
        // Reconstructing from parity that may not match its data would return (and write
        // back over the member) bytes that were never there: the read fails instead, as
        // an I/O error the client sees, and the member keeps what it holds. Its read error
        // was counted like any other.
        return false;
    }
    match rewrite_range(level, io, role, offset, len) {
        Ok(()) => true,
        // Another member's recorded bad block: nothing to reconstruct from there. An
        // unreadable range of this member in the same rows is then lost too: recorded in its
        // list (md does the same), so later reads fail at once, uncounted, and the member
        // stays; the request is retried and fails on the record.
        Err(IoError::Member { source, .. }) if member::is_bad_block(&source) => {
            let lost = member::bad_block_of(&source);
            recorded.is_none() && lost.is_some_and(|b| record_unreadable(io, role, offset, len, b))
        }
        // This range is a recorded loss and another member cannot read the same rows: that
        // range is lost as well (recorded likewise); the read fails, both members stay.
        Err(IoError::Member {
            role: other,
            op: Op::Read,
            offset: at,
            len: n,
            ..
        }) if other != role && recorded.is_some() => {
            let lost = recorded.expect("checked");
            record_unreadable(io, other, at, n, lost);
            false
        }
        // Another member's block a torn update may have left (after an unclean shutdown):
        // settled first (the redundancy decides), then the retry.
        Err(IoError::Member {
            role: other,
            op: Op::Read,
            offset: at,
            len: n,
            source,
            ..
        }) if other != role && member::is_unsettled(&source) => {
            settle_range(level, io, other, at, n)
        }
        // Another member's read failed while reconstructing: where both keep bad-block
        // lists, find piece by piece what redundancy still provides (rewritten) and what
        // nothing provides (recorded on every member that cannot read it), then retry: the
        // retry is served, or fails at once on the record. Without lists the other member's
        // error was counted; retry.
        Err(IoError::Member {
            role: other,
            op: Op::Read,
            ..
        }) if other != role => {
            heal_or_record(level, io, role, offset, len);
            true
        }
        // Another member failed while reconstructing: its error was counted; retry.
        Err(IoError::Member { role: other, .. }) if other != role => true,
        // Lost content the redundancy left cannot rebuild: the read fails, the member stays.
        Err(_) if recorded.is_some() => false,
        // No space to write the repaired range back: not the member's fault; the read
        // fails (it was not served from redundancy either).
        Err(e) if e.is_no_space() => false,
        Err(e) => {
            let reason = FaultReason::Unrepairable(e.to_string());
            io.members.try_fail(role, reason, &io.geometry)
        }
    }
}

/// After an unclean shutdown, `role`'s `[offset, offset+len)` holds a block whose data does not
/// match its checksum where a sync is pending ([`member::is_unsettled`]): a torn update or
/// corruption. The range is reconstructed from the others (parity trusted or not: only a
/// version that matches the checksum is taken) and handed to the member's checksum check
/// (`Member::settle`), which keeps per block the reconstruction where it matches the stored
/// checksum (the member's bytes were corrupt, or torn back to the old content), else rewrites
/// the checksum from the data (a torn update). True when the read may be retried.
fn settle_range<L: LevelIo + ?Sized>(
    level: &L,
    io: &Parts,
    role: usize,
    offset: u64,
    len: u64,
) -> bool {
    let _held = io.lock_member_range(role, offset, len);
    settle_locked(level, io, role, offset, len)
}

/// [`settle_range`] with the rows' locks held.
fn settle_locked<L: LevelIo + ?Sized>(
    level: &L,
    io: &Parts,
    role: usize,
    offset: u64,
    len: u64,
) -> bool {
    let Some(member) = io.members.slot(role).0 else {
        return false;
    };
    let mut readable = io.present_snapshot();
    readable[role] = false;
    let mut buf = vec![0u8; len as usize];
    // No version from the others (they are gone, or unreadable there, or torn themselves):
    // the member's data is kept and its checksum rewritten.
    let rebuilt = readable.iter().any(|&r| r)
        && io.geometry.survives(&readable)
        && reconstruct(level, io, role, offset, &mut buf, &readable, false).is_ok();
    let candidate = rebuilt.then_some(&buf[..]);
    matches!(member.settle(offset, len, candidate), Some(Ok(())))
}

/// `role`'s `[offset, offset+len)` failed to read and the plain repair could not rewrite it:
/// goes over it in [`LOST_PIECE_BYTES`] pieces, each under its rows' locks. A piece that
/// reads is left; one that does not is reconstructed without every member found unable to
/// read the same rows (so RAID 6 rebuilds two bad blocks of a row from P and Q, and a
/// three-way mirror reads its third copy), written back, and the others' pieces rewritten
/// from it; a piece no member set can provide is recorded as lost on `role` and on every
/// member whose read of those rows failed (md records unreadable sectors it cannot rewrite),
/// so its reads fail at once, uncounted, and a scrub goes past it.
fn heal_or_record<L: LevelIo + ?Sized>(level: &L, io: &Parts, role: usize, offset: u64, len: u64) {
    let piece = LOST_PIECE_BYTES;
    let end = (offset + len)
        .div_ceil(piece)
        .saturating_mul(piece)
        .min(io.geometry.member_data_bytes(role));
    let mut at = offset / piece * piece;
    while at < end {
        let n = piece.min(end - at);
        heal_piece(level, io, role, at, n);
        at += n;
    }
}

/// [`heal_or_record`] of one piece.
fn heal_piece<L: LevelIo + ?Sized>(level: &L, io: &Parts, role: usize, offset: u64, len: u64) {
    let _held = io.lock_member_range(role, offset, len);
    let mut buf = vec![0u8; len as usize];
    let read = io.member_io(MemOp::Read {
        role,
        offset,
        buf: &mut buf,
    });
    match read {
        Ok(()) => return,
        Err(IoError::Member { ref source, .. }) if member::is_bad_block(source) => return,
        Err(_) => {}
    }
    // The member ranges of these rows that cannot be read (role, offset, len); `role`'s
    // first. (A mirror's copy may sit at another offset: odd RAID 10.)
    let mut unreadable = vec![(role, offset, len)];
    // Members whose block a torn update may have left, settled here (once each).
    let mut settled = Vec::new();
    loop {
        let mut readable = io.present_snapshot();
        for &(r, _, _) in &unreadable {
            readable[r] = false;
        }
        if !readable.iter().any(|&r| r) || !io.geometry.survives(&readable) {
            break;
        }
        match reconstruct(level, io, role, offset, &mut buf, &readable, false) {
            Ok(()) => {
                if io
                    .member_io(MemOp::Write {
                        role,
                        offset,
                        buf: &buf,
                    })
                    .is_err()
                {
                    return; // the write's error was judged
                }
                // The others' pieces of these rows, rebuilt now that `role` holds its own.
                for &(other, at, n) in &unreadable[1..] {
                    let mut readable = io.present_snapshot();
                    readable[other] = false;
                    let mut copy = vec![0u8; n as usize];
                    if reconstruct(level, io, other, at, &mut copy, &readable, false).is_ok() {
                        let _ = io.member_io(MemOp::Write {
                            role: other,
                            offset: at,
                            buf: &copy,
                        });
                    }
                }
                return;
            }
            Err(IoError::Member {
                role: other,
                op: Op::Read,
                offset: at,
                len: n,
                source,
                ..
            }) if member::is_unsettled(&source) && !settled.contains(&other) => {
                settled.push(other);
                settle_locked(level, io, other, at, n);
            }
            Err(IoError::Member {
                role: other,
                op: Op::Read,
                offset: at,
                len: n,
                ..
            }) if unreadable.iter().all(|u| u.0 != other) => unreadable.push((other, at, n)),
            // Anything else (a write error, a member gone): judged where it happened.
            Err(_) => return,
        }
    }
    // Nothing provides these rows' piece of `role`: recorded where it cannot be read (a
    // member without a list records nothing: its reads go on failing and counting, as before;
    // one whose list is full or cannot be written is failed, see `record_or_fail`).
    for &(r, at, n) in &unreadable {
        record_or_fail(io, r, at, n);
    }
}

/// Records in `role`'s bad-block list the part of its unreadable `[offset, offset+len)` that
/// lies in the rows of another member's recorded range `b` (the same member offsets on every
/// level with redundancy). True when something was recorded.
fn record_unreadable(io: &Parts, role: usize, offset: u64, len: u64, b: &member::BadBlock) -> bool {
    let (lo, hi) = (offset.max(b.offset), (offset + len).min(b.offset + b.len));
    lo < hi && record_or_fail(io, role, lo, hi - lo)
}

/// Records `role`'s unreadable `[offset, offset+len)` as lost in its bad-block list. A list
/// that is full or cannot be written fails the member (if the array keeps its data without
/// it), as a rebuild's recording does (`Array::rebuild_step`; md fails a member whose list
/// cannot take a range): otherwise its reads of the range would go on failing, each counted,
/// until the read-error limit failed it anyway, with the range never reported. True when
/// recorded; false also for a member without a list (its reads fail and count, as before).
fn record_or_fail(io: &Parts, role: usize, offset: u64, len: u64) -> bool {
    let Some(member) = io.members.slot(role).0 else {
        return false;
    };
    let end = offset + len;
    let reason = match member.record_lost(offset, len) {
        Some(Ok(true)) => return true,
        None => return false,
        Some(Ok(false)) => FaultReason::Unrepairable(format!(
            "bad-block list full; could not record unreadable bytes {offset}..{end} as lost"
        )),
        Some(Err(source)) => FaultReason::WriteError(format!(
            "writing its bad-block list (recording unreadable bytes {offset}..{end} as lost): \
             {source}"
        )),
    };
    io.members
        .try_fail_called(role, &member, reason, &io.geometry);
    false
}

/// Reconstructs `role`'s `[offset, offset+len)` from the other members and writes it back.
fn rewrite_range<L: LevelIo + ?Sized>(
    level: &L,
    io: &Parts,
    role: usize,
    offset: u64,
    len: u64,
) -> Result<(), IoError> {
    let _held = io.lock_member_range(role, offset, len);
    let mut readable = io.present_snapshot();
    readable[role] = false;
    let mut buf = vec![0u8; len as usize];
    reconstruct(level, io, role, offset, &mut buf, &readable, false)?;
    io.member_io(MemOp::Write {
        role,
        offset,
        buf: &buf,
    })
}

/// What `role` should hold at `[offset, offset + buf.len())`, from the `readable` members
/// (`readable[role]` must be false). The caller holds the rows' locks. `reuse`: keep the
/// read buffers for this thread's next call (background rebuild steps only, so the memory
/// held stays bounded by one worker's step).
pub(crate) fn reconstruct<L: LevelIo + ?Sized>(
    level: &L,
    io: &Parts,
    role: usize,
    offset: u64,
    buf: &mut [u8],
    readable: &[bool],
    reuse: bool,
) -> Result<(), IoError> {
    assert!(!readable[role]);
    if !io.geometry.survives(readable) {
        return Err(IoError::ArrayFailed {
            level: io.geometry.level(),
            missing: missing_roles(readable),
        });
    }
    let lost = Lost {
        role,
        offset,
        readable,
        reuse,
    };
    level.reconstruct(io, &lost, buf)
}

//! The pieces path of the levels without parity (linear, RAID 0, RAID 1 and RAID 10; their
//! `LevelIo` defaults, see `levels`). Reads go to one copy (the cheapest by outstanding
//! bytes weighted by latency, a stream kept on its copy, write-mostly and slow members read
//! around: `speed::Speed::pick_copy`); writes go to every present copy, under the
//! chunk's lock for mirrors so concurrent writers leave the copies identical.

use crate::error::IoError;
use crate::io::MemOp;
use crate::parts::Parts;
use crate::speed::ReadPlan;
use crate::Discard;
use layout::Piece;

/// Reads without a lock when no member changes state meanwhile, else again under the chunks'
/// locks. A plan names roles, and `member_io` reads whichever member serves a role when it
/// runs: a read planned while a mirror's role was in sync, whose I/O runs after that member
/// was failed and a spare attached in its slot, would read the spare's not yet rebuilt bytes.
/// Every such swap is preceded by a state change that moves the epoch (the fail, the detach,
/// the attach), so an unchanged epoch after the read proves the plan held throughout. Under
/// the chunks' locks no member is swapped (attach, detach and the end of a replace take every
/// stripe lock) and every write to those chunks is wholly before or after, its failed copies
/// already out of the snapshot (RAID 5/6's healthy read does the same, `raid56_read`).
pub(crate) fn read(io: &Parts, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
    let pieces = io.geometry.pieces(offset, buf.len() as u64);
    let epoch = io.members.epoch();
    let present = io.usable()?;
    read_pieces(io, &pieces, buf, &present)?;
    if io.members.epoch() == epoch {
        return Ok(());
    }
    let _held = io.locks.lock(mirror_keys(io, &pieces).into_iter());
    let present = io.usable()?;
    read_pieces(io, &pieces, buf, &present)
}

/// Reads `pieces` into `buf`, each from one copy `present` allows.
fn read_pieces(
    io: &Parts,
    pieces: &[Piece],
    buf: &mut [u8],
    present: &[bool],
) -> Result<(), IoError> {
    let mut ops = Vec::with_capacity(pieces.len());
    let mut rest: &mut [u8] = buf;
    let mut plan = ReadPlan::new(present.len(), io.fanout.min_bytes(), iostats::now_ns());
    let speed = io.members.speed();
    for piece in pieces {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(piece.len as usize);
        rest = tail;
        let copy = match piece.copies.len() {
            1 => piece.copies[0],
            _ => speed.pick_copy(piece, present, &mut plan),
        };
        ops.push(MemOp::Read {
            role: copy.role,
            offset: copy.member_offset,
            buf: head,
        });
    }
    assert!(rest.is_empty());
    io.run(ops)
}

/// Lock keys for mirrored levels (none for linear / RAID 0, which have one copy).
fn mirror_keys(io: &Parts, pieces: &[Piece]) -> Vec<u64> {
    match io.geometry.is_mirrored() {
        true => pieces.iter().map(|p| p.chunk).collect(),
        false => Vec::new(),
    }
}

pub(crate) fn write(io: &Parts, offset: u64, buf: &[u8]) -> Result<(), IoError> {
    let pieces = io.geometry.pieces(offset, buf.len() as u64);
    let _held = io.locks.lock(mirror_keys(io, &pieces).into_iter());
    io.usable()?;
    let present = io.writable_snapshot();
    let mut ops = Vec::with_capacity(pieces.len() * 2);
    for piece in &pieces {
        let data = &buf[piece.buf_offset as usize..(piece.buf_offset + piece.len) as usize];
        for copy in piece.copies.iter().filter(|c| present[c.role]) {
            ops.push(MemOp::Write {
                role: copy.role,
                offset: copy.member_offset,
                buf: data,
            });
        }
    }
    io.run(ops)
}

/// Discards in windows of at most `STRIPE_LOCKS_COUNT` chunks, so a huge trim needs
/// bounded memory for its pieces and lock keys.
pub(crate) fn discard(io: &Parts, offset: u64, len: u64, how: Discard) -> Result<(), IoError> {
    let window = io.geometry.chunk_bytes() * crate::STRIPE_LOCKS_COUNT as u64;
    let end = offset + len;
    let mut at = offset;
    while at < end {
        let n = window.min(end - at);
        discard_window(io, at, n, how)?;
        at += n;
    }
    Ok(())
}

fn discard_window(io: &Parts, offset: u64, len: u64, how: Discard) -> Result<(), IoError> {
    let pieces = io.geometry.pieces(offset, len);
    let _held = io.locks.lock(mirror_keys(io, &pieces).into_iter());
    io.usable()?;
    let present = io.writable_snapshot();
    let mut ops = Vec::with_capacity(pieces.len() * 2);
    for piece in &pieces {
        for copy in piece.copies.iter().filter(|c| present[c.role]) {
            ops.push(how.op(copy.role, copy.member_offset, piece.len));
        }
    }
    io.run(ops)
}

//! The pieces path of the levels without parity (linear, RAID 0, RAID 1 and RAID 10; their
//! `LevelIo` defaults, see `levels`). Reads go to one copy (the cheapest by outstanding
//! bytes weighted by latency, a stream kept on its copy, write-mostly and slow members read
//! around: `pick_copy`); writes go to every present copy, under the
//! chunk's lock for mirrors so concurrent writers leave the copies identical.

use crate::error::IoError;
use crate::io::MemOp;
use crate::parts::Parts;
use crate::speed::{keeps_stream, near};
use crate::Discard;
use layout::{MemberAddress, Piece};

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
    let mut plan = ReadPlan {
        planned: vec![0; present.len()],
        run_bytes: io.fanout.min_bytes(),
        now: iostats::now_ns(),
    };
    for piece in pieces {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(piece.len as usize);
        rest = tail;
        let copy = match piece.copies.len() {
            1 => piece.copies[0],
            _ => pick_copy(io, piece, present, &mut plan),
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

/// What one read request gave each copy so far.
struct ReadPlan {
    /// Bytes of this request per role.
    planned: Vec<u64>,
    /// A copy keeps the pieces of a stream until it has this many bytes of the request (the
    /// fan-out threshold: from there a share runs on its own thread, so splitting gains).
    run_bytes: u64,
    now: u64,
}

/// The copy of `piece` to read (`speed` holds what this weighs):
/// - which copies: those `present` allows, not write-mostly and not judged slow; failing
///   that, not write-mostly; failing that, any (md's write-mostly: read only when no other
///   copy can serve; a slow member is read around while another copy can serve);
/// - a copy (write-mostly aside) not read for a probe interval gets this piece, so every
///   copy's latency stays measured and a slow one's recovery is seen;
/// - a copy whose last read ended where this piece starts keeps the stream (read-ahead below
///   stays sequential) while its share of this request is under the fan-out threshold and
///   its cost is at most twice the best copy's;
/// - otherwise the cheapest: fewest outstanding bytes (this request's own included) weighted
///   by its read latency; copies within an eighth of the cheapest count as ties, which
///   rotate by chunk number.
fn pick_copy(io: &Parts, piece: &Piece, present: &[bool], plan: &mut ReadPlan) -> MemberAddress {
    let speed = io.members.speed();
    let live = |c: &&MemberAddress| present[c.role];
    let readable = |c: &&MemberAddress| live(c) && !speed.is_write_mostly(c.role);
    let preferred = |c: &&MemberAddress| readable(c) && !speed.is_slow(c.role);
    let probe = (piece.copies.iter().filter(readable))
        .find(|c| plan.planned[c.role] == 0 && speed.claim_probe(c.role, plan.now));
    if let Some(&probe) = probe {
        // A stream on another copy skips this piece and stays where it is.
        for c in piece.copies.iter().filter(live) {
            speed.skip_over(c.role, c.member_offset, piece.len);
        }
        plan.planned[probe.role] += piece.len;
        return probe;
    }
    let filters: [&dyn Fn(&&MemberAddress) -> bool; 3] = [&preferred, &readable, &live];
    let tier: Vec<MemberAddress> = (filters.into_iter())
        .map(|keep| {
            piece
                .copies
                .iter()
                .filter(keep)
                .copied()
                .collect::<Vec<_>>()
        })
        .find(|t| !t.is_empty())
        .unwrap_or_else(|| panic!("survives() promised a copy of chunk {}", piece.chunk));
    let chosen = pick_in(io, piece, &tier, plan);
    plan.planned[chosen.role] += piece.len;
    speed.chosen(chosen.role, chosen.member_offset, piece.len, plan.now);
    chosen
}

/// The cheapest of `tier` for `piece`, or the copy its stream is on (see [`pick_copy`]).
fn pick_in(io: &Parts, piece: &Piece, tier: &[MemberAddress], plan: &ReadPlan) -> MemberAddress {
    let speed = io.members.speed();
    // Rotate by chunk, shifted every `member_count` chunks: with near-2 RAID 10 on an
    // even member count, plain `chunk mod copies` would always pick the same member of
    // each pair.
    let n = io.members.count() as u64;
    let start = ((piece.chunk + piece.chunk / n) % tier.len() as u64) as usize;
    let costs: Vec<(MemberAddress, u128)> = (0..tier.len())
        .map(|i| tier[(start + i) % tier.len()])
        .map(|c| (c, speed.cost(c.role, plan.planned[c.role], piece.len)))
        .collect();
    let least = costs
        .iter()
        .map(|&(_, cost)| cost)
        .min()
        .expect("tier is not empty");
    let (best, best_cost) = *costs
        .iter()
        .find(|&&(_, cost)| near(cost, least))
        .expect("the least is near itself");
    let stream = tier.iter().find(|c| {
        speed.continues(c.role, c.member_offset)
            && plan.planned[c.role] < plan.run_bytes.max(piece.len)
            && keeps_stream(speed.cost(c.role, 0, piece.len), best_cost)
    });
    match stream {
        Some(c) => *c,
        None => best,
    }
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

//! RAID 5 and 6: reads (direct when healthy, rebuilt under the stripe lock when degraded),
//! writes (see `write`), trims and write-zeroes that keep parity correct.

pub(crate) mod columns;
mod merged;
mod reconstruct;
mod scrub;
mod write;

pub(crate) use columns::{block_count, block_role, gen_parity, Columns};

use super::repair::recovering;
use super::{LevelIo, Lost};
use crate::error::IoError;
use crate::io::MemOp;
use crate::parts::Parts;
use crate::report::{CheckReport, SyncMode, UnitReport};
use crate::Discard;

use journal::DataSource;
use layout::StripeSpan;

/// Largest zero buffer used to turn a partial-stripe trim into writes.
const ZERO_BUF_BYTES: usize = 1 << 20;

/// The data path of the parity levels; RAID 5 and RAID 6 differ only in their parity count
/// (`Geometry::parity_count`: one block or two per stripe).
pub(crate) struct Parity;

impl LevelIo for Parity {
    fn read(&self, io: &Parts, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        raid56_read(io, offset, buf)
    }

    fn write(&self, io: &Parts, offset: u64, buf: &[u8]) -> Result<(), IoError> {
        write::gathered_write(io, offset, buf)
    }

    /// Not gathered: appliers write disjoint stripes, so no other write in flight could
    /// complete a stripe of this one, and a tail waiting for one would only wait. Several
    /// pieces are written as one write per stripe (`merged`).
    fn write_applied(
        &self,
        io: &Parts,
        pieces: &[(u64, &[u8])],
        sources: &[DataSource],
    ) -> Result<(), IoError> {
        recovering(self, io, || match pieces {
            [(offset, buf)] => write::raid56_write(io, *offset, buf, Some(sources)),
            _ => merged::merged_write(io, pieces, sources),
        })
    }

    fn discard(&self, io: &Parts, offset: u64, len: u64, how: Discard) -> Result<(), IoError> {
        raid56_discard(io, offset, len, how)
    }

    fn check_unit(&self, io: &Parts, unit: u64, out: &mut CheckReport) -> Result<(), IoError> {
        scrub::check_stripe(io, unit, out)
    }

    fn sync_unit(&self, io: &Parts, unit: u64, mode: SyncMode) -> Result<UnitReport, IoError> {
        scrub::sync_stripe(io, unit, mode)
    }

    fn reconstruct(&self, io: &Parts, lost: &Lost<'_>, buf: &mut [u8]) -> Result<(), IoError> {
        reconstruct::reconstruct_parity(io, lost, buf)
    }

    fn rows_untrusted(&self, io: &Parts, offset: u64, len: u64) -> bool {
        reconstruct::parity_untrusted_rows(io, offset, len)
    }
}

fn raid56_read(io: &Parts, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
    let spans = io.geometry.stripes(offset, buf.len() as u64);
    let all_present = |p: &[bool]| p.iter().all(|x| *x);
    let epoch = io.members.epoch();
    let snapshot = io.present_snapshot();
    if all_present(&snapshot) {
        let around = slow_to_read_around(io, &spans, &snapshot);
        if !around.is_empty() {
            return read_around(io, &spans, buf, &around);
        }
        degraded_read(io, &spans, buf, &snapshot)?;
        // No member changed state before the read finished, so no write skipped one we
        // read.
        if io.members.epoch() == epoch {
            return Ok(());
        }
    }
    let _held = io.locks.lock(spans.iter().map(|s| s.stripe));
    let present = io.usable()?;
    degraded_read(io, &spans, buf, &present)
}

/// The members judged slow that this healthy read should be served around: those it touches
/// whose estimated cost (outstanding bytes × latency) is more than twice that of the slowest
/// of the others, which would each read the same bytes in parallel to reconstruct them (see
/// `speed::Speed::cheaper_around`), and whose probe is not due (a slow member still gets a
/// read a probe interval, so its recovery is seen). Empty when none is slow (one atomic
/// load), when the read balance is not `latency`, or when the array would not survive
/// without them.
fn slow_to_read_around(io: &Parts, spans: &[StripeSpan], present: &[bool]) -> Vec<usize> {
    let speed = io.members.speed();
    if !speed.any_slow() || speed.balance() != crate::ReadBalance::Latency {
        return Vec::new();
    }
    let now = iostats::now_ns();
    let n = present.len();
    let mut around = Vec::new();
    for role in (0..n).filter(|&r| speed.is_slow(r)) {
        let bytes: u64 = (spans.iter().flat_map(|s| &s.chunks))
            .filter(|c| c.role == role)
            .map(|c| c.len)
            .sum();
        if bytes == 0 || speed.claim_probe(role, now) {
            continue;
        }
        let others = (0..n).filter(|&r| r != role && present[r]);
        if speed.cheaper_around(role, bytes, others) {
            around.push(role);
        }
    }
    let mut without = present.to_vec();
    around.iter().for_each(|&r| without[r] = false);
    match io.geometry.survives(&without) {
        true => around,
        false => Vec::new(),
    }
}

/// Reads `spans` with the members `around` left out, their chunks reconstructed from the
/// others under the stripe locks (as a degraded read), unless a stripe's parity is
/// untrusted (a sync has not reached it): then every chunk is read where it is.
fn read_around(
    io: &Parts,
    spans: &[StripeSpan],
    buf: &mut [u8],
    around: &[usize],
) -> Result<(), IoError> {
    let _held = io.locks.lock(spans.iter().map(|s| s.stripe));
    let mut present = io.usable()?;
    let hook = io.trust.get();
    let trusted = (spans.iter()).all(|s| !io.parity_untrusted(hook.as_ref(), s.stripe));
    let mut without = present.clone();
    around.iter().for_each(|&r| without[r] = false);
    if trusted && io.geometry.survives(&without) {
        present = without;
    }
    degraded_read(io, spans, buf, &present)
}

/// Reads present chunks straight into `buf` and rebuilds the missing ones from the rest
/// of their stripe. With every member present this is a plain parallel read.
fn degraded_read(
    io: &Parts,
    spans: &[StripeSpan],
    buf: &mut [u8],
    present: &[bool],
) -> Result<(), IoError> {
    let g = &io.geometry;
    let mut rebuilds: Vec<(Columns, &StripeSpan)> = Vec::new();
    for span in spans {
        let missing = span.chunks.iter().filter(|c| !present[c.role]);
        let lo = missing.clone().map(|c| c.start).min();
        let hi = missing.map(|c| c.start + c.len).max();
        if let (Some(lo), Some(hi)) = (lo, hi) {
            let columns = Columns::new(g, &io.scratch, span.stripe, (lo, hi), present);
            rebuilds.push((columns, span));
        }
    }
    // Present chunks inside a rebuilt range are copied from the columns, not read twice.
    let from_columns = |span: &StripeSpan, c: &layout::ChunkSpan| {
        rebuilds.iter().any(|(col, s)| {
            s.stripe == span.stripe && col.lo <= c.start && c.start + c.len <= col.hi()
        })
    };
    let mut ops = Vec::new();
    let mut rest: &mut [u8] = buf;
    for span in spans {
        for c in &span.chunks {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(c.len as usize);
            rest = tail;
            if present[c.role] && !from_columns(span, c) {
                let offset = span.member_offset + c.start;
                ops.push(MemOp::Read {
                    role: c.role,
                    offset,
                    buf: head,
                });
            }
        }
    }
    for (columns, _) in rebuilds.iter_mut() {
        columns.rebuild_read_ops(g, &mut ops);
    }
    io.run(ops)?;
    for (columns, span) in rebuilds.iter_mut() {
        columns.rebuild(g);
        let hi = columns.hi();
        let copied = |c: &&layout::ChunkSpan| {
            !present[c.role] || (columns.lo <= c.start && c.start + c.len <= hi)
        };
        for c in span.chunks.iter().filter(copied) {
            let from = (c.start - columns.lo) as usize;
            let block = &columns.blocks[c.data_index][from..from + c.len as usize];
            let at = c.buf_offset as usize;
            buf[at..at + c.len as usize].copy_from_slice(block);
        }
    }
    Ok(())
}

fn raid56_discard(io: &Parts, offset: u64, len: u64, how: Discard) -> Result<(), IoError> {
    let stripe_bytes = io.geometry.stripe_data_bytes();
    let end = offset + len;
    let first_full = offset.div_ceil(stripe_bytes);
    let end_full = end / stripe_bytes;
    if first_full >= end_full {
        return write_zero_range(io, offset, end);
    }
    write_zero_range(io, offset, first_full * stripe_bytes)?;
    discard_stripes(io, first_full, end_full, how)?;
    write_zero_range(io, end_full * stripe_bytes, end)
}

/// Whole stripes: zero data has zero P and Q, so every member's rows are discarded.
fn discard_stripes(io: &Parts, first: u64, end: u64, how: Discard) -> Result<(), IoError> {
    let _held = io.locks.lock_range(first, end);
    io.usable()?;
    let writable = io.writable_snapshot();
    let chunk = io.geometry.chunk_bytes();
    let ops = (0..writable.len())
        .filter(|&role| writable[role])
        .map(|role| how.op(role, first * chunk, (end - first) * chunk))
        .collect::<Vec<_>>();
    let group_end = [ops.len()];
    io.run_logged(ops, &group_end, None)
}

/// Partial stripes: zeroes through the write path, so parity follows.
fn write_zero_range(io: &Parts, start: u64, end: u64) -> Result<(), IoError> {
    let zeroes = vec![0u8; ((end - start) as usize).min(ZERO_BUF_BYTES)];
    let mut at = start;
    while at < end {
        let n = (end - at).min(zeroes.len() as u64);
        write::raid56_write(io, at, &zeroes[..n as usize], None)?;
        at += n;
    }
    Ok(())
}

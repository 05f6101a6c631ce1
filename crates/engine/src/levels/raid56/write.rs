//! RAID 5/6 writes. Each touched stripe gets a plan ([`StripeWrite`]) in one of four modes:
//!
//! - `Rcw` (reconstruct-write): read the untouched data over the parity range, compute parity
//!   from all data. A full-stripe write is the case with nothing to read.
//! - `Rmw` (read-modify-write): read the old touched data and old parity, apply the deltas.
//! - `Rebuild` (degraded, a touched data member missing, not every data block written over the
//!   parity range — that is an `Rcw` reading nothing): read every present block, rebuild
//!   the lost ones, overlay the new data, regenerate parity.
//! - `DataOnly`: no parity member present (RAID 5 missing P): write the data alone.
//!
//! Healthy stripes take whichever of Rcw and Rmw reads fewer bytes (md's rule; ties go to
//! Rcw) — except stripes whose parity is untrusted (an initial sync or resync has not reached
//! them, see `trust`): they never use Rmw, which would keep the old parity's error, but
//! regenerate parity from all data over the range (Rcw, or Rebuild when a data member is
//! missing). All plans of one request read in one parallel batch, compute, then write in one
//! parallel batch, all under the request's stripe locks.

use super::columns::{block_role, Columns};
use super::{gen_parity, Parity};
use crate::error::IoError;
use crate::gather::{Gather, Outcome, Taken};
use crate::io::MemOp;
use crate::levels::repair::recovering;
use crate::parts::Parts;
use crate::scratch::{Scratch, ScratchPool};
use crate::write_log::Applied;
use journal::DataSource;
use layout::{Geometry, StripeSpan};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    DataOnly,
    Rmw,
    Rcw,
    Rebuild,
}

/// One stripe's part of a write.
struct StripeWrite<'p> {
    span: StripeSpan,
    lo: u64,
    hi: u64,
    mode: Mode,
    /// Per block index (data 0..k, P, Q): scratch; empty when the block needs none.
    blocks: Vec<Scratch<'p>>,
    /// Rebuild mode only.
    columns: Option<Columns<'p>>,
}

/// `present`: readable members; `writable`: members every write must reach (a superset:
/// members being rebuilt are written but not read); `untrusted`: the stripe's parity may
/// disagree with its data.
fn choose_mode(
    g: &Geometry,
    span: &StripeSpan,
    present: &[bool],
    writable: &[bool],
    untrusted: bool,
) -> Mode {
    let k = g.data_per_stripe();
    let parity = k..k + g.parity_count();
    let parity_role = |b: usize| block_role(g, span.stripe, b);
    let parity_present = parity.clone().filter(|&b| present[parity_role(b)]).count() as u64;
    let parity_write_only = parity
        .clone()
        .any(|b| writable[parity_role(b)] && !present[parity_role(b)]);
    if parity_present == 0 && !parity_write_only {
        return Mode::DataOnly;
    }
    let data_all_readable = (0..k).all(|i| present[g.data_role(span.stripe, i)]);
    let (lo, hi) = span.parity_range();
    let all_data_written = (0..k).all(|i| {
        span.chunk(i)
            .is_some_and(|c| c.start == lo && c.start + c.len == hi)
    });
    if all_data_written {
        // Every data block over the parity range is written (a full-stripe write): parity
        // comes from the new data alone, nothing is read, degraded or not (a missing member's
        // block is simply not written). Rebuild would read every present block for nothing,
        // and fail on a recorded bad range the write is about to replace.
        return Mode::Rcw;
    }
    if !span.chunks.iter().all(|c| present[c.role]) {
        return Mode::Rebuild;
    }
    if parity_write_only || untrusted {
        // The old parity cannot be read, or may be wrong (an Rmw would keep its error): it is
        // computed from all the data. With a data member missing, its part is what the
        // stripe's parity reconstructs — all that is known of it; the written bytes and the
        // present data are then protected by parity consistent with them.
        return if data_all_readable {
            Mode::Rcw
        } else {
            Mode::Rebuild
        };
    }
    if !data_all_readable {
        return Mode::Rmw;
    }
    let touched: u64 = span.chunks.iter().map(|c| c.len).sum();
    let rmw_reads = touched + parity_present * (hi - lo);
    let rcw_reads = k as u64 * (hi - lo) - touched;
    if rmw_reads < rcw_reads {
        Mode::Rmw
    } else {
        Mode::Rcw
    }
}

impl<'p> StripeWrite<'p> {
    fn plan(
        g: &Geometry,
        pool: &'p ScratchPool,
        span: StripeSpan,
        present: &[bool],
        writable: &[bool],
        untrusted: bool,
    ) -> StripeWrite<'p> {
        let k = g.data_per_stripe();
        let (lo, hi) = span.parity_range();
        let width = (hi - lo) as usize;
        let mode = choose_mode(g, &span, present, writable, untrusted);
        if untrusted {
            assert_ne!(
                mode,
                Mode::Rmw,
                "stripe {}: Rmw on untrusted parity",
                span.stripe
            );
        }
        let mut blocks: Vec<Scratch<'p>> =
            (0..g.member_count()).map(|_| Scratch::empty()).collect();
        let mut columns = None;
        match mode {
            Mode::DataOnly => {}
            Mode::Rmw => {
                for c in &span.chunks {
                    blocks[c.data_index] = pool.take(c.len as usize);
                }
            }
            Mode::Rcw => {
                for (i, block) in blocks.iter_mut().enumerate().take(k) {
                    let whole = span
                        .chunk(i)
                        .is_some_and(|c| c.start == lo && c.start + c.len == hi);
                    if !whole {
                        *block = pool.take(width);
                    }
                }
            }
            Mode::Rebuild => {
                columns = Some(Columns::new(g, pool, span.stripe, (lo, hi), present));
            }
        }
        if matches!(mode, Mode::Rmw | Mode::Rcw) {
            for block in blocks.iter_mut().skip(k) {
                *block = pool.take(width);
            }
        }
        StripeWrite {
            span,
            lo,
            hi,
            mode,
            blocks,
            columns,
        }
    }

    fn read_ops<'s>(&'s mut self, g: &Geometry, present: &[bool], ops: &mut Vec<MemOp<'s>>) {
        let k = g.data_per_stripe();
        let base = self.span.member_offset;
        let (span, lo, hi) = (&self.span, self.lo, self.hi);
        match self.mode {
            Mode::DataOnly => {}
            Mode::Rebuild => self.columns.as_mut().expect("planned").read_ops(g, ops),
            Mode::Rmw => {
                for (b, block) in self.blocks.iter_mut().enumerate() {
                    let role = block_role(g, span.stripe, b);
                    if block.is_empty() || !present[role] {
                        continue;
                    }
                    let start = if b < k {
                        span.chunk(b).expect("touched").start
                    } else {
                        lo
                    };
                    ops.push(MemOp::Read {
                        role,
                        offset: base + start,
                        buf: block,
                    });
                }
            }
            Mode::Rcw => {
                for (i, block) in self.blocks.iter_mut().enumerate().take(k) {
                    if block.is_empty() {
                        continue;
                    }
                    let role = g.data_role(span.stripe, i);
                    let (a, b) = span
                        .chunk(i)
                        .map_or((hi, hi), |c| (c.start, c.start + c.len));
                    // Untouched parts: [lo, a) and [b, hi).
                    let (left, rest) = block.split_at_mut((a - lo) as usize);
                    let right = &mut rest[(b - a) as usize..];
                    for (buf, start) in [(left, lo), (right, b)] {
                        if !buf.is_empty() {
                            ops.push(MemOp::Read {
                                role,
                                offset: base + start,
                                buf,
                            });
                        }
                    }
                }
            }
        }
    }

    fn compute(&mut self, g: &Geometry, buf: &[u8]) {
        let k = g.data_per_stripe();
        let lo = self.lo;
        let new =
            |c: &layout::ChunkSpan| &buf[c.buf_offset as usize..(c.buf_offset + c.len) as usize];
        match self.mode {
            Mode::DataOnly => {}
            Mode::Rebuild => {
                let columns = self.columns.as_mut().expect("planned");
                columns.rebuild(g);
                for c in &self.span.chunks {
                    let at = (c.start - lo) as usize;
                    columns.blocks[c.data_index][at..at + c.len as usize].copy_from_slice(new(c));
                }
                columns.regenerate_parity(g);
            }
            Mode::Rmw => {
                let (data, parity) = self.blocks.split_at_mut(k);
                for c in &self.span.chunks {
                    let delta = &mut data[c.data_index];
                    parity::xor_into(delta, new(c));
                    let range = (c.start - lo) as usize..(c.start - lo + c.len) as usize;
                    let (p, q) = parity.split_at_mut(1);
                    let q = q.first_mut().map(|q| &mut q[range.clone()]);
                    parity::pq_update(delta, c.data_index, &mut p[0][range], q);
                }
            }
            Mode::Rcw => {
                let (data, parity) = self.blocks.split_at_mut(k);
                for c in &self.span.chunks {
                    let block = &mut data[c.data_index];
                    if !block.is_empty() {
                        let at = (c.start - lo) as usize;
                        block[at..at + c.len as usize].copy_from_slice(new(c));
                    }
                }
                let refs: Vec<&[u8]> = (0..k)
                    .map(|i| match data[i].is_empty() {
                        true => new(self.span.chunk(i).expect("whole chunk touched")),
                        false => &*data[i],
                    })
                    .collect();
                gen_parity(&refs, parity);
            }
        }
    }

    /// Pushes the stripe's member writes to `ops`, and for each the array offset of the data
    /// it writes (`None` for parity) to `from_buf`, `buf` being at array offset `offset`.
    fn write_ops<'s>(
        &'s self,
        g: &Geometry,
        present: &[bool],
        (offset, buf): (u64, &'s [u8]),
        ops: &mut Vec<MemOp<'s>>,
        from_buf: &mut Vec<Option<u64>>,
    ) {
        let k = g.data_per_stripe();
        let base = self.span.member_offset;
        for c in self.span.chunks.iter().filter(|c| present[c.role]) {
            let data = &buf[c.buf_offset as usize..(c.buf_offset + c.len) as usize];
            ops.push(MemOp::Write {
                role: c.role,
                offset: base + c.start,
                buf: data,
            });
            from_buf.push(Some(offset + c.buf_offset));
        }
        let blocks = match (&self.columns, self.mode) {
            (_, Mode::DataOnly) => return,
            (Some(columns), _) => &columns.blocks,
            (None, _) => &self.blocks,
        };
        for (b, block) in blocks.iter().enumerate().skip(k) {
            let role = block_role(g, self.span.stripe, b);
            if present[role] {
                ops.push(MemOp::Write {
                    role,
                    offset: base + self.lo,
                    buf: block,
                });
                from_buf.push(None);
            }
        }
    }
}

/// Writes `buf` at `offset` under the stripe locks. `sources`: the write is a write-back apply
/// whose bytes those `ArrayWrite` records hold, so its data is logged by reference.
pub(super) fn raid56_write(
    io: &Parts,
    offset: u64,
    buf: &[u8],
    sources: Option<&[DataSource]>,
) -> Result<(), IoError> {
    let g = &io.geometry;
    let spans = g.stripes(offset, buf.len() as u64);
    let _held = io.locks.lock(spans.iter().map(|s| s.stripe));
    let present = io.usable()?;
    let writable = io.writable_snapshot();
    // Asked under the stripe locks: a sync step rewrites a stripe under its lock too.
    let trust = io.trust.get();
    let plan_all = |no_rmw: bool| -> Vec<StripeWrite> {
        (spans.iter().cloned())
            .map(|span| {
                let untrusted = no_rmw || io.parity_untrusted(trust.as_ref(), span.stripe);
                StripeWrite::plan(g, &io.scratch, span, &present, &writable, untrusted)
            })
            .collect()
    };
    let mut plans = plan_all(false);
    let mut reads = Vec::new();
    for plan in plans.iter_mut() {
        plan.read_ops(g, &present, &mut reads);
    }
    let read = io.run(reads);
    if let Err(IoError::Member { source, .. }) = &read {
        if member::is_bad_block(source) && plans.iter().any(|p| p.mode == Mode::Rmw) {
            // A read-modify-write met a recorded bad range (its old data or parity is lost):
            // planned again as reconstruct-writes, which read only the data the write does
            // not cover, so a write covering the lost range regenerates parity from data it
            // holds and the range is valid again (md does the same); the record is cleared
            // once the write completes. Where the untouched data is lost too, this fails.
            drop(plans);
            plans = plan_all(true);
            let mut reads = Vec::new();
            for plan in plans.iter_mut() {
                plan.read_ops(g, &present, &mut reads);
            }
            io.run(reads)?;
        } else {
            read?;
        }
    } else {
        read?;
    }
    for plan in plans.iter_mut() {
        plan.compute(g, buf);
    }
    let mut writes = Vec::new();
    let mut from_buf = Vec::new();
    let mut group_ends = Vec::with_capacity(plans.len());
    for plan in &plans {
        plan.write_ops(g, &writable, (offset, buf), &mut writes, &mut from_buf);
        group_ends.push(writes.len());
    }
    let applied = sources.map(|sources| Applied {
        array_offsets: &from_buf,
        sources,
    });
    io.run_logged(writes, &group_ends, applied)
}

/// Puts a taken tail back if its taker or claimer unwinds before reporting (see `gather`).
struct TakenGuard<'a> {
    gather: &'a Gather,
    stripe: Option<u64>,
}

impl Drop for TakenGuard<'_> {
    fn drop(&mut self) {
        if let Some(stripe) = self.stripe {
            self.gather.untake(stripe);
        }
    }
}

/// Writes a taken or claimed tail (see `gather`) and tells its waiters the result.
fn write_taken(io: &Parts, taken: &Taken, stripe_bytes: u64) -> Result<(), IoError> {
    let mut guard = TakenGuard {
        gather: &io.gather,
        stripe: Some(taken.stripe),
    };
    let written = recovering(&Parity, io, || {
        raid56_write(io, taken.lo, &taken.union, None)
    });
    guard.stripe = None;
    io.gather.finish_taken(taken, &written, stripe_bytes);
    written
}

/// A RAID 5/6 write through stripe gathering (`gather`): a head that completes a pending
/// tail writes the whole stripe for all its writers; a write inside a stripe that continues a
/// pending tail joins it; a tail that may be completed soon waits for the next write of its
/// stream. Each write below retries read errors (`recovering`).
pub(super) fn gathered_write(io: &Parts, offset: u64, buf: &[u8]) -> Result<(), IoError> {
    let stripe_bytes = io.geometry.stripe_data_bytes();
    let plan = io.gather.enter(offset, buf, stripe_bytes);
    let mut result = Ok(());
    if let Some(taken) = &plan.take {
        result = write_taken(io, taken, stripe_bytes);
    }
    let (lo, hi) = plan.body;
    if lo < hi {
        let body = &buf[(lo - offset) as usize..(hi - offset) as usize];
        result = result.and(recovering(&Parity, io, || raid56_write(io, lo, body, None)));
    }
    if let Some(stripe) = plan.tail_stripe {
        let tail = match io.gather.wait_for_tail(stripe) {
            Outcome::Written(written) => written,
            Outcome::Claimed(claimed) => write_taken(io, &claimed, stripe_bytes),
        };
        result = result.and(tail);
    }
    io.gather.leave(&plan);
    result
}

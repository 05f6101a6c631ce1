//! RAID 1 and RAID 10: the levels that keep two or more copies of every chunk. Reads and writes
//! go through the pieces path (`plain`: reads from one copy, writes to every copy under the
//! chunk's lock); what is theirs alone is checking, resyncing and rebuilding from a copy.
//! Which copies a chunk has (RAID 1: every member's row; RAID 10: two near slots) is the
//! level's module in `layout`.

use super::{LevelIo, Lost};
use crate::error::IoError;
use crate::io::MemOp;
use crate::parts::Parts;
use crate::report::{first_difference, CheckReport, Mismatch, MismatchKind, SyncMode, UnitReport};
use layout::MemberAddress;

/// The data path of the mirrored levels.
pub(crate) struct Mirror;

impl LevelIo for Mirror {
    /// A check is a sync that writes nothing; a unit with fewer than two copies is skipped.
    fn check_unit(&self, io: &Parts, unit: u64, out: &mut CheckReport) -> Result<(), IoError> {
        let found = self.sync_unit(io, unit, SyncMode::Check)?;
        if !found.checked {
            out.units_skipped += 1;
            return Ok(());
        }
        for mismatch in found.mismatches {
            out.record(mismatch);
        }
        out.units_checked += 1;
        Ok(())
    }

    /// Every copy compared with the first present one; `Repair` and `Resync` copy the first
    /// over the others (md's choice: with two copies there is no majority).
    fn sync_unit(&self, io: &Parts, unit: u64, mode: SyncMode) -> Result<UnitReport, IoError> {
        let _held = io.locks.lock(std::iter::once(unit));
        let mut report = UnitReport::default();
        let Some((copies, bufs)) = read_present_copies(io, unit)? else {
            return Ok(report);
        };
        report.checked = true;
        let mut writes = Vec::new();
        for (copy, buf) in copies.iter().zip(&bufs).skip(1) {
            let Some(at) = first_difference(&bufs[0], buf) else {
                continue;
            };
            report.mismatches.push(Mismatch {
                unit,
                kind: MismatchKind::Mirror,
                role: copy.role,
                member_offset: copy.member_offset + at as u64,
                array_offset: unit * io.geometry.chunk_bytes() + at as u64,
            });
            if mode != SyncMode::Check {
                writes.push(MemOp::Write {
                    role: copy.role,
                    offset: copy.member_offset,
                    buf: &bufs[0],
                });
            }
        }
        report.repaired += writes.len() as u64;
        io.run(writes)?;
        Ok(report)
    }

    /// Each row piece from a readable copy of the same logical chunk.
    fn reconstruct(&self, io: &Parts, lost: &Lost<'_>, buf: &mut [u8]) -> Result<(), IoError> {
        let (role, offset, readable) = (lost.role, lost.offset, lost.readable);
        let g = &io.geometry;
        let chunk = g.chunk_bytes();
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
            // A mirror's unit is its logical chunk.
            let logical = g.unit_of_row(role, row);
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
        io.run(ops)
    }
}

/// The present copies of one mirror chunk and what each holds.
type MirrorCopies = (Vec<MemberAddress>, Vec<Vec<u8>>);

/// Reads every present copy of mirror chunk `unit` (caller holds its stripe lock); `None`
/// when fewer than two copies are present (nothing to compare).
fn read_present_copies(io: &Parts, unit: u64) -> Result<Option<MirrorCopies>, IoError> {
    let present = io.usable()?;
    let copies: Vec<MemberAddress> = io
        .geometry
        .chunk_copies(unit)
        .into_iter()
        .filter(|c| present[c.role])
        .collect();
    if copies.len() < 2 {
        return Ok(None);
    }
    let chunk = io.geometry.chunk_bytes() as usize;
    let mut bufs = vec![vec![0u8; chunk]; copies.len()];
    let ops = copies
        .iter()
        .zip(bufs.iter_mut())
        .map(|(c, buf)| MemOp::Read {
            role: c.role,
            offset: c.member_offset,
            buf,
        })
        .collect();
    io.run(ops)?;
    Ok(Some((copies, bufs)))
}

//! Consistency check: every stripe's P (and Q) against its data, every mirror copy against the
//! others. Each unit is checked under its lock, so concurrent writes cannot cause false alarms.

use crate::error::IoError;
use crate::io::MemOp;
use crate::raid56::{block_count, block_role, gen_parity};
use crate::Array;
use layout::{Extent, Level};

/// At most this many mismatches are listed in a report (all are counted).
pub const MISMATCHES_REPORTED_MAX: usize = 64;

/// What disagrees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MismatchKind {
    /// P does not match the data of its stripe.
    P,
    /// Q does not match the data of its stripe.
    Q,
    /// A mirror copy differs from the first present copy.
    Mirror,
    /// RAID 6 scrub: P and Q both disagree in the way one bad data block explains (the
    /// syndrome names the member).
    Data,
}

/// One inconsistent block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Stripe (RAID 5/6), row (RAID 1) or logical chunk (RAID 10).
    pub unit: u64,
    pub kind: MismatchKind,
    /// The member holding the block that disagrees.
    pub role: usize,
    /// Member offset of the first differing byte.
    pub member_offset: u64,
    /// Array offset of the data the block covers (its stripe's start for P and Q).
    pub array_offset: u64,
}

/// Outcome of [`Array::check`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Units (stripes, rows or chunks) fully compared.
    pub units_checked: u64,
    /// Units that could not be compared because members are missing.
    pub units_skipped: u64,
    /// Every mismatch found.
    pub mismatch_count: u64,
    /// The first [`MISMATCHES_REPORTED_MAX`] mismatches.
    pub mismatches: Vec<Mismatch>,
}

impl CheckReport {
    /// True when nothing disagreed.
    pub fn is_consistent(&self) -> bool {
        self.mismatch_count == 0
    }

    pub(crate) fn record(&mut self, mismatch: Mismatch) {
        self.mismatch_count += 1;
        if self.mismatches.len() < MISMATCHES_REPORTED_MAX {
            self.mismatches.push(mismatch);
        }
    }
}

/// The present copies of one mirror chunk and what each holds.
pub(crate) type MirrorCopies = (Vec<Extent>, Vec<Vec<u8>>);

pub(crate) fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).position(|(x, y)| x != y)
}

impl Array {
    /// Checks parity (RAID 5/6) or mirrors (RAID 1/10) of the whole array. Linear and RAID 0
    /// have nothing to compare and report zero units.
    pub fn check(&self) -> Result<CheckReport, IoError> {
        let mut report = CheckReport::default();
        match self.geometry.level() {
            Level::Linear | Level::Raid0 => {}
            Level::Raid5 | Level::Raid6 => {
                for stripe in 0..self.geometry.rows() {
                    self.check_stripe(stripe, &mut report)?;
                }
            }
            Level::Raid1 | Level::Raid10 => {
                for unit in 0..self.geometry.logical_chunk_count() {
                    self.check_mirror(unit, &mut report)?;
                }
            }
        }
        Ok(report)
    }

    fn check_stripe(&self, stripe: u64, report: &mut CheckReport) -> Result<(), IoError> {
        let g = &self.geometry;
        let _held = self.locks.lock(std::iter::once(stripe));
        let present = self.usable()?;
        let k = g.data_per_stripe();
        let mut columns =
            crate::raid56::Columns::new(g, &self.scratch, stripe, (0, g.chunk_bytes()), &present);
        if columns.lost.iter().any(|&b| b < k) || columns.lost.len() == block_count(g) - k {
            report.units_skipped += 1;
            return Ok(());
        }
        let mut ops = Vec::new();
        columns.read_ops(g, &mut ops);
        self.run(ops)?;
        let (data, parity) = columns.blocks.split_at(k);
        let refs: Vec<&[u8]> = data.iter().map(|b| &**b).collect();
        let mut expected = vec![vec![0u8; g.chunk_bytes() as usize]; parity.len()];
        gen_parity(&refs, &mut expected);
        for (i, (have, want)) in parity.iter().zip(&expected).enumerate() {
            let block = k + i;
            if columns.lost.contains(&block) {
                continue;
            }
            if let Some(at) = first_difference(have, want) {
                report.record(Mismatch {
                    unit: stripe,
                    kind: if i == 0 {
                        MismatchKind::P
                    } else {
                        MismatchKind::Q
                    },
                    role: block_role(g, stripe, block),
                    member_offset: columns.member_offset + at as u64,
                    array_offset: stripe * g.stripe_data_bytes(),
                });
            }
        }
        report.units_checked += 1;
        Ok(())
    }

    /// Reads every present copy of mirror chunk `unit` (caller holds its stripe lock); `None`
    /// when fewer than two copies are present (nothing to compare).
    pub(crate) fn read_present_copies(&self, unit: u64) -> Result<Option<MirrorCopies>, IoError> {
        let present = self.usable()?;
        let copies: Vec<Extent> = self
            .geometry
            .chunk_copies(unit)
            .into_iter()
            .filter(|c| present[c.role])
            .collect();
        if copies.len() < 2 {
            return Ok(None);
        }
        let chunk = self.geometry.chunk_bytes() as usize;
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
        self.run(ops)?;
        Ok(Some((copies, bufs)))
    }

    fn check_mirror(&self, unit: u64, report: &mut CheckReport) -> Result<(), IoError> {
        let _held = self.locks.lock(std::iter::once(unit));
        let Some((copies, bufs)) = self.read_present_copies(unit)? else {
            report.units_skipped += 1;
            return Ok(());
        };
        for (copy, buf) in copies.iter().zip(&bufs).skip(1) {
            if let Some(at) = first_difference(&bufs[0], buf) {
                report.record(Mismatch {
                    unit,
                    kind: MismatchKind::Mirror,
                    role: copy.role,
                    member_offset: copy.member_offset + at as u64,
                    array_offset: unit * self.geometry.chunk_bytes() + at as u64,
                });
            }
        }
        report.units_checked += 1;
        Ok(())
    }
}

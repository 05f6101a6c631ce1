//! Scrub and resync, one unit (RAID 5/6 stripe, RAID 1/10 logical chunk) at a time under its
//! lock, so client I/O continues between units.
//!
//! - `Check` counts and locates mismatches. For RAID 6, when P and Q both disagree and the
//!   syndrome points at exactly one data block (every byte satisfies Qδ = g^z · Pδ for the same
//!   z < k), the mismatch is reported as that data member's.
//! - `Repair` makes the unit consistent: mirrors from the first readable copy (md's choice:
//!   with two copies there is no majority, and the first is as good as any); parity recomputed
//!   from the data — except the RAID 6 single-data-block case, where the data block is fixed
//!   (D_z ^= Pδ) and parity is left alone.
//! - `Resync` (after an unclean shutdown or for an initial sync) is `Repair` without the RAID 6
//!   location: parity always follows the data.
//!
//! Read errors met on the way are repaired like a client read's ([`Array::recovering`]).

use crate::check::{first_difference, Mismatch, MismatchKind};
use crate::error::IoError;
use crate::io::MemOp;
use crate::raid56::{block_count, block_role, gen_parity, Columns};
use crate::Array;
use layout::Level;

/// What a pass over a unit does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    Check,
    Repair,
    Resync,
}

/// The outcome for one unit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnitReport {
    /// False when members were missing and the unit could not be compared.
    pub checked: bool,
    pub mismatches: Vec<Mismatch>,
    /// Blocks rewritten.
    pub repaired: u64,
}

impl Array {
    /// Number of units a scrub or resync walks (0 for levels without redundancy).
    pub fn sync_unit_count(&self) -> u64 {
        self.geometry.sync_unit_count()
    }

    /// The sync units `[lo, hi)` holding array bytes `[offset, offset+len)` (`len > 0`).
    pub(crate) fn sync_units_of(&self, offset: u64, len: u64) -> (u64, u64) {
        assert!(len > 0 && self.sync_unit_count() > 0);
        let unit_bytes = self.geometry.unit_bytes();
        let hi = (offset + len)
            .div_ceil(unit_bytes)
            .min(self.sync_unit_count());
        (offset / unit_bytes, hi)
    }

    /// Checks (and in `Repair`/`Resync` mode fixes) one unit.
    pub fn sync_unit(&self, unit: u64, mode: SyncMode) -> Result<UnitReport, IoError> {
        assert!(
            unit < self.sync_unit_count(),
            "unit {unit} beyond the array"
        );
        self.recovering(|| match self.geometry.level() {
            Level::Raid5 | Level::Raid6 => self.sync_stripe(unit, mode),
            _ => self.sync_mirror(unit, mode),
        })
    }

    fn sync_stripe(&self, stripe: u64, mode: SyncMode) -> Result<UnitReport, IoError> {
        let g = &self.geometry;
        let _held = self.locks.lock(std::iter::once(stripe));
        let present = self.usable()?;
        let mut report = UnitReport::default();
        let mut columns = Columns::new(g, &self.scratch, stripe, (0, g.chunk_bytes()), &present);
        if !columns.lost.is_empty() {
            return Ok(report);
        }
        let mut ops = Vec::new();
        columns.read_ops(g, &mut ops);
        self.run(ops)?;
        let k = g.data_per_stripe();
        let (data, parity) = columns.blocks.split_at_mut(k);
        let refs: Vec<&[u8]> = data.iter().map(|b| &**b).collect();
        let mut expected = vec![vec![0u8; g.chunk_bytes() as usize]; parity.len()];
        gen_parity(&refs, &mut expected);
        report.checked = true;
        let base = stripe * g.chunk_bytes();
        let array_base = stripe * g.stripe_data_bytes();
        let diffs: Vec<Option<usize>> = parity
            .iter()
            .zip(&expected)
            .map(|(have, want)| first_difference(have, want))
            .collect();
        if diffs.iter().all(Option::is_none) {
            return Ok(report);
        }
        if mode != SyncMode::Resync && diffs.len() == 2 && diffs.iter().all(Option::is_some) {
            if let Some(z) =
                locate_data_error(&parity[0], &expected[0], &parity[1], &expected[1], k)
            {
                let role = g.data_role(stripe, z);
                let at = first_difference(&parity[0], &expected[0]).expect("P differs");
                report.mismatches.push(Mismatch {
                    unit: stripe,
                    kind: MismatchKind::Data,
                    role,
                    member_offset: base + at as u64,
                    array_offset: array_base + z as u64 * g.chunk_bytes() + at as u64,
                });
                if mode == SyncMode::Repair {
                    let mut fixed = data[z].to_vec();
                    parity::xor_into(&mut fixed, &parity[0]);
                    parity::xor_into(&mut fixed, &expected[0]);
                    self.run(vec![MemOp::Write {
                        role,
                        offset: base,
                        buf: &fixed,
                    }])?;
                    report.repaired += 1;
                }
                return Ok(report);
            }
        }
        let mut writes = Vec::new();
        for (i, at) in diffs.iter().enumerate() {
            let Some(at) = at else { continue };
            let role = block_role(g, stripe, k + i);
            report.mismatches.push(Mismatch {
                unit: stripe,
                kind: if i == 0 {
                    MismatchKind::P
                } else {
                    MismatchKind::Q
                },
                role,
                member_offset: base + *at as u64,
                array_offset: array_base,
            });
            if mode != SyncMode::Check {
                writes.push(MemOp::Write {
                    role,
                    offset: base,
                    buf: &expected[i],
                });
            }
        }
        report.repaired += writes.len() as u64;
        self.run(writes)?;
        assert!(block_count(g) == k + parity.len());
        Ok(report)
    }

    fn sync_mirror(&self, unit: u64, mode: SyncMode) -> Result<UnitReport, IoError> {
        let _held = self.locks.lock(std::iter::once(unit));
        let mut report = UnitReport::default();
        let Some((copies, bufs)) = self.read_present_copies(unit)? else {
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
                array_offset: unit * self.geometry.chunk_bytes() + at as u64,
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
        self.run(writes)?;
        Ok(report)
    }
}

/// RAID 6: the data index z < k whose corruption explains both syndromes at every byte
/// (Qδ = g^z · Pδ), or `None` when no single data block does.
fn locate_data_error(p: &[u8], p_want: &[u8], q: &[u8], q_want: &[u8], k: usize) -> Option<usize> {
    let delta = |i: usize| (p[i] ^ p_want[i], q[i] ^ q_want[i]);
    let first = (0..p.len()).find(|&i| delta(i).0 != 0)?;
    let (pd, qd) = delta(first);
    let z = (0..k).find(|&z| parity::gf_mul(parity::gf_pow2(z), pd) == qd)?;
    let g_z = parity::gf_pow2(z);
    (0..p.len())
        .all(|i| {
            let (pd, qd) = delta(i);
            parity::gf_mul(g_z, pd) == qd
        })
        .then_some(z)
}

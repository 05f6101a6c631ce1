//! RAID 5/6 check, scrub and resync of one stripe under its lock (see `crate::scrub` for the
//! modes): parity recomputed from the data and compared; for RAID 6, a mismatch of both P and
//! Q that one data block explains is located and, in `Repair`, fixed in that block.

use super::{block_count, block_role, gen_parity, Columns};
use crate::error::IoError;
use crate::io::MemOp;
use crate::parts::Parts;
use crate::report::{first_difference, CheckReport, Mismatch, MismatchKind, SyncMode, UnitReport};

pub(super) fn check_stripe(
    io: &Parts,
    stripe: u64,
    report: &mut CheckReport,
) -> Result<(), IoError> {
    let g = &io.geometry;
    let _held = io.locks.lock(std::iter::once(stripe));
    let present = io.usable()?;
    let k = g.data_per_stripe();
    let mut columns = super::Columns::new(g, &io.scratch, stripe, (0, g.chunk_bytes()), &present);
    if columns.lost.iter().any(|&b| b < k) || columns.lost.len() == block_count(g) - k {
        report.units_skipped += 1;
        return Ok(());
    }
    let mut ops = Vec::new();
    columns.read_ops(g, &mut ops);
    io.run(ops)?;
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

pub(super) fn sync_stripe(io: &Parts, stripe: u64, mode: SyncMode) -> Result<UnitReport, IoError> {
    let g = &io.geometry;
    let _held = io.locks.lock(std::iter::once(stripe));
    let present = io.usable()?;
    let mut report = UnitReport::default();
    let mut columns = Columns::new(g, &io.scratch, stripe, (0, g.chunk_bytes()), &present);
    if !columns.lost.is_empty() {
        return Ok(report);
    }
    let mut ops = Vec::new();
    columns.read_ops(g, &mut ops);
    io.run(ops)?;
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
        if let Some(z) = locate_data_error(&parity[0], &expected[0], &parity[1], &expected[1], k) {
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
                io.run(vec![MemOp::Write {
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
    io.run(writes)?;
    assert!(block_count(g) == k + parity.len());
    Ok(report)
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

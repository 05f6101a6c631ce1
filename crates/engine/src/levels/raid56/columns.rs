//! Block-index helpers for RAID 5/6 stripes and the "columns" of one stripe: every block
//! (data 0..k, then P, then Q) over one in-chunk byte range, used to rebuild missing blocks.

use crate::io::MemOp;
use crate::scratch::{Scratch, ScratchPool};
use layout::Geometry;

/// Member holding block `block` (data index, then P at k, Q at k+1) of `stripe`.
pub(crate) fn block_role(g: &Geometry, stripe: u64, block: usize) -> usize {
    let k = g.data_per_stripe();
    match block.checked_sub(k) {
        None => g.data_role(stripe, block),
        Some(0) => g.p_role(stripe),
        Some(1) => g.q_role(stripe).expect("block k+1 is Q, only in RAID 6"),
        Some(_) => panic!("block {block} beyond the stripe"),
    }
}

/// Number of blocks per stripe (data + parity).
pub(crate) fn block_count(g: &Geometry) -> usize {
    g.member_count()
}

/// All blocks of one stripe over in-chunk range `[lo, hi)`, in scratch from the array's pool.
pub(crate) struct Columns<'p> {
    pub stripe: u64,
    pub member_offset: u64,
    pub lo: u64,
    pub blocks: Vec<Scratch<'p>>,
    /// Block indices whose member is missing.
    pub lost: Vec<usize>,
}

impl<'p> Columns<'p> {
    pub(crate) fn new(
        g: &Geometry,
        pool: &'p ScratchPool,
        stripe: u64,
        (lo, hi): (u64, u64),
        present: &[bool],
    ) -> Columns<'p> {
        assert!(lo < hi && hi <= g.chunk_bytes());
        let width = (hi - lo) as usize;
        let count = block_count(g);
        let lost: Vec<usize> = (0..count)
            .filter(|&b| !present[block_role(g, stripe, b)])
            .collect();
        assert!(
            lost.len() <= g.parity_count(),
            "stripe {stripe} beyond repair"
        );
        Columns {
            stripe,
            member_offset: stripe * g.chunk_bytes(),
            lo,
            blocks: (0..count).map(|_| pool.take(width)).collect(),
            lost,
        }
    }

    /// End of the in-chunk range the columns cover.
    pub(crate) fn hi(&self) -> u64 {
        self.lo + self.blocks.first().map_or(0, |b| b.len() as u64)
    }

    /// Reads of every present block.
    pub(crate) fn read_ops<'s>(&'s mut self, g: &Geometry, ops: &mut Vec<MemOp<'s>>) {
        let offset = self.member_offset + self.lo;
        for (b, block) in self.blocks.iter_mut().enumerate() {
            if self.lost.contains(&b) {
                continue;
            }
            ops.push(MemOp::Read {
                role: block_role(g, self.stripe, b),
                offset,
                buf: block,
            });
        }
    }

    /// Reads needed to rebuild the lost blocks, for columns used by `rebuild` only (degraded
    /// reads): as `read_ops`, except that a RAID 6 stripe that lost one data block is rebuilt
    /// from P alone (`parity::reconstruct` does not use Q then), so Q is not read and its
    /// buffer is left as it was.
    pub(crate) fn rebuild_read_ops<'s>(&'s mut self, g: &Geometry, ops: &mut Vec<MemOp<'s>>) {
        let k = g.data_per_stripe();
        let has_q = g.q_role(self.stripe).is_some();
        let skip_q = has_q && self.lost.len() == 1 && self.lost[0] < k;
        let offset = self.member_offset + self.lo;
        for (b, block) in self.blocks.iter_mut().enumerate() {
            if self.lost.contains(&b) || (skip_q && b == k + 1) {
                continue;
            }
            ops.push(MemOp::Read {
                role: block_role(g, self.stripe, b),
                offset,
                buf: block,
            });
        }
    }

    /// Recomputes the lost blocks from the others.
    pub(crate) fn rebuild(&mut self, g: &Geometry) {
        if self.lost.is_empty() {
            return;
        }
        let has_q = g.q_role(self.stripe).is_some();
        let mut refs: Vec<&mut [u8]> = self.blocks.iter_mut().map(|b| &mut **b).collect();
        parity::reconstruct(&mut refs, has_q, &self.lost);
    }

    /// Recomputes P (and Q) from the data blocks.
    pub(crate) fn regenerate_parity(&mut self, g: &Geometry) {
        let k = g.data_per_stripe();
        let (data, parity) = self.blocks.split_at_mut(k);
        let data: Vec<&[u8]> = data.iter().map(|b| &**b).collect();
        gen_parity(&data, parity);
    }
}

/// Computes P (parity.len() == 1) or P and Q (parity.len() == 2) of `data`.
pub(crate) fn gen_parity<B: AsMut<[u8]>>(data: &[&[u8]], parity: &mut [B]) {
    match parity {
        [p] => parity::xor_gen(data, p.as_mut()),
        [p, q] => parity::pq_gen(data, p.as_mut(), q.as_mut()),
        _ => panic!(
            "a stripe has one or two parity blocks, not {}",
            parity.len()
        ),
    }
}

//! What RAID 5 and RAID 6 share: md's left-symmetric placement of data, P and Q, splitting a
//! logical range into the stripes it touches, and the rules of a level with `parity_count`
//! parity blocks per stripe ([`ParityStripes`]).

use super::LevelRules;
use crate::{Geometry, MemberAddress, Piece};

/// The rules of a left-symmetric parity level with `parity_count` parity blocks per stripe
/// (RAID 5: 1, RAID 6: 2): it needs two data members at least, survives the loss of any
/// `parity_count` members, and locks, syncs and prefers writes by whole stripes.
pub(crate) struct ParityStripes {
    pub parity_count: usize,
}

impl LevelRules for ParityStripes {
    fn min_members(&self) -> usize {
        self.parity_count + 2
    }

    fn max_missing(&self, _member_count: usize) -> usize {
        self.parity_count
    }

    fn parity_count(&self) -> usize {
        self.parity_count
    }

    fn size_bytes(&self, g: &Geometry) -> u64 {
        g.data_per_stripe() as u64 * g.member_data_bytes(0)
    }

    /// The data copy (parity holds no copy of a byte).
    fn locate(&self, g: &Geometry, offset: u64) -> Vec<MemberAddress> {
        let chunk = offset / g.chunk_bytes();
        let k = g.data_per_stripe() as u64;
        let stripe = chunk / k;
        vec![MemberAddress {
            role: g.data_role(stripe, (chunk % k) as usize),
            member_offset: stripe * g.chunk_bytes() + offset % g.chunk_bytes(),
        }]
    }

    fn piece_at(&self, g: &Geometry, at: u64, _remaining: u64, _buf_offset: u64) -> Piece {
        panic!("{} is split into stripes, not pieces (at {at})", g.level())
    }

    fn unit_bytes(&self, g: &Geometry) -> u64 {
        g.stripe_data_bytes()
    }

    /// A stripe is one row of every member.
    fn sync_unit_count(&self, g: &Geometry) -> u64 {
        g.rows()
    }

    fn rows_of(&self, g: &Geometry, offset: u64, end: u64) -> (u64, u64) {
        let stripe_bytes = g.stripe_data_bytes();
        (offset / stripe_bytes, (end - 1) / stripe_bytes)
    }

    fn full_stripe_bytes(&self, g: &Geometry) -> u64 {
        g.stripe_data_bytes()
    }
}

/// What a member holds in one stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Data chunk with this data index (also its Q coefficient exponent).
    Data(usize),
    P,
    Q,
}

/// The part of one data chunk a request touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkSpan {
    /// Data index within the stripe (0 = first data chunk).
    pub data_index: usize,
    /// Member holding the chunk.
    pub role: usize,
    /// First touched byte, relative to the chunk start.
    pub start: u64,
    /// Touched bytes.
    pub len: u64,
    /// Where these bytes are in the request buffer (relative to the request offset).
    pub buf_offset: u64,
}

/// The part of one stripe a request touches. Chunks are in data-index order and contiguous
/// in logical space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripeSpan {
    pub stripe: u64,
    /// Member offset of the stripe's row (the same on every member).
    pub member_offset: u64,
    pub chunks: Vec<ChunkSpan>,
}

impl StripeSpan {
    /// In-chunk byte range `[lo, hi)` whose parity the request changes: the union of the
    /// touched chunk ranges.
    pub fn parity_range(&self) -> (u64, u64) {
        let lo = self.chunks.iter().map(|c| c.start).min().unwrap_or(0);
        let hi = self
            .chunks
            .iter()
            .map(|c| c.start + c.len)
            .max()
            .unwrap_or(0);
        assert!(lo <= hi);
        (lo, hi)
    }

    /// True when the request covers every data byte of the stripe.
    pub fn is_full(&self, geometry: &Geometry) -> bool {
        self.chunks.len() == geometry.data_per_stripe()
            && self.chunks.iter().all(|c| c.len == geometry.chunk_bytes())
    }

    /// The touched span of data index `data_index`, if any.
    pub fn chunk(&self, data_index: usize) -> Option<&ChunkSpan> {
        self.chunks.iter().find(|c| c.data_index == data_index)
    }
}

impl Geometry {
    /// Data chunks per stripe (RAID 5: n-1, RAID 6: n-2).
    pub fn data_per_stripe(&self) -> usize {
        assert!(self.has_parity());
        self.member_count() - self.parity_count()
    }

    /// Logical data bytes per stripe.
    pub fn stripe_data_bytes(&self) -> u64 {
        self.data_per_stripe() as u64 * self.chunk_bytes()
    }

    /// Member holding P in `stripe`: (n-1) - (stripe mod n).
    pub fn p_role(&self, stripe: u64) -> usize {
        assert!(self.has_parity());
        let n = self.member_count() as u64;
        (n - 1 - stripe % n) as usize
    }

    /// Member holding Q in `stripe` (RAID 6): the one after P.
    pub fn q_role(&self, stripe: u64) -> Option<usize> {
        (self.parity_count() == 2).then(|| (self.p_role(stripe) + 1) % self.member_count())
    }

    /// Member holding data index `data_index` of `stripe`: (P + 1 + i) mod n for RAID 5,
    /// (P + 2 + i) mod n for RAID 6.
    pub fn data_role(&self, stripe: u64, data_index: usize) -> usize {
        assert!(data_index < self.data_per_stripe());
        let skip = self.parity_count();
        (self.p_role(stripe) + skip + data_index) % self.member_count()
    }

    /// What `role` holds in `stripe`.
    pub fn slot_of(&self, stripe: u64, role: usize) -> Slot {
        let n = self.member_count();
        assert!(role < n);
        let p = self.p_role(stripe);
        if role == p {
            return Slot::P;
        }
        if self.q_role(stripe) == Some(role) {
            return Slot::Q;
        }
        let skip = self.parity_count();
        Slot::Data((role + n - p - skip) % n)
    }

    /// The stripes touched by logical range `[offset, offset+len)`, in order.
    pub fn stripes(&self, offset: u64, len: u64) -> Vec<StripeSpan> {
        assert!(self.has_parity());
        assert!(offset
            .checked_add(len)
            .is_some_and(|end| end <= self.size_bytes()));
        let chunk_bytes = self.chunk_bytes();
        let k = self.data_per_stripe() as u64;
        let mut spans: Vec<StripeSpan> = Vec::new();
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let chunk = at / chunk_bytes;
            let start = at % chunk_bytes;
            let piece = (chunk_bytes - start).min(end - at);
            let stripe = chunk / k;
            let data_index = (chunk % k) as usize;
            if spans.last().is_none_or(|s| s.stripe != stripe) {
                spans.push(StripeSpan {
                    stripe,
                    member_offset: stripe * chunk_bytes,
                    chunks: Vec::with_capacity(k as usize),
                });
            }
            let span = spans.last_mut().expect("pushed above");
            span.chunks.push(ChunkSpan {
                data_index,
                role: self.data_role(stripe, data_index),
                start,
                len: piece,
                buf_offset: at - offset,
            });
            at += piece;
        }
        spans
    }
}

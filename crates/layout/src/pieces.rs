//! Levels without parity (linear, 0, 1, 10): splitting a logical range into pieces that each
//! live contiguously on every copy.

use crate::{Geometry, MemberAddress};

/// A part of a request that is contiguous on each of its copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Where the piece starts in the request buffer (relative to the request offset).
    pub buf_offset: u64,
    pub len: u64,
    /// Logical chunk index (linear: the member role); used to spread reads over mirrors.
    pub chunk: u64,
    /// Every copy of the piece (1 for linear/0, 2 for 10, n for 1).
    pub copies: Vec<MemberAddress>,
}

impl Geometry {
    /// Splits logical range `[offset, offset+len)` at chunk (linear: member) boundaries.
    pub fn pieces(&self, offset: u64, len: u64) -> Vec<Piece> {
        assert!(!self.has_parity());
        assert!(offset
            .checked_add(len)
            .is_some_and(|end| end <= self.size_bytes()));
        let mut pieces = Vec::new();
        let end = offset + len;
        let mut at = offset;
        while at < end {
            let piece = self
                .level()
                .rules()
                .piece_at(self, at, end - at, at - offset);
            assert!(piece.len > 0);
            at += piece.len;
            pieces.push(piece);
        }
        pieces
    }
}

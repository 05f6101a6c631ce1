//! Levels without parity (linear, 0, 1, 10): splitting a logical range into pieces that each
//! live contiguously on every copy.

use crate::{Extent, Geometry, Level};

/// A part of a request that is contiguous on each of its copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Where the piece starts in the request buffer (relative to the request offset).
    pub buf_offset: u64,
    pub len: u64,
    /// Logical chunk index (linear: the member role); used to spread reads over mirrors.
    pub chunk: u64,
    /// Every copy of the piece (1 for linear/0, 2 for 10, n for 1).
    pub copies: Vec<Extent>,
}

impl Geometry {
    /// Splits logical range `[offset, offset+len)` at chunk (linear: member) boundaries.
    pub fn pieces(&self, offset: u64, len: u64) -> Vec<Piece> {
        assert!(!self.level().has_parity());
        assert!(offset
            .checked_add(len)
            .is_some_and(|end| end <= self.size_bytes()));
        let mut pieces = Vec::new();
        let end = offset + len;
        let mut at = offset;
        while at < end {
            let piece = self.piece_at(at, end - at, at - offset);
            assert!(piece.len > 0);
            at += piece.len;
            pieces.push(piece);
        }
        pieces
    }

    fn piece_at(&self, at: u64, remaining: u64, buf_offset: u64) -> Piece {
        if self.level() == Level::Linear {
            let copies = self.locate(at);
            let role = copies[0].role;
            let member_left = self.member_data_bytes(role) - copies[0].member_offset;
            return Piece {
                buf_offset,
                len: member_left.min(remaining),
                chunk: role as u64,
                copies,
            };
        }
        let chunk_bytes = self.chunk_bytes();
        let chunk = at / chunk_bytes;
        let within = at % chunk_bytes;
        let mut copies = self.chunk_copies(chunk);
        for copy in &mut copies {
            copy.member_offset += within;
        }
        Piece {
            buf_offset,
            len: (chunk_bytes - within).min(remaining),
            chunk,
            copies,
        }
    }
}

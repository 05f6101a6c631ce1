//! Linear (md "linear", alias concat): members concatenated one after another, each used
//! whole; no redundancy.

use super::LevelRules;
use crate::{Geometry, MemberAddress, Piece};

pub(crate) struct Linear;

impl LevelRules for Linear {
    fn min_members(&self) -> usize {
        1
    }

    fn max_missing(&self, _member_count: usize) -> usize {
        0
    }

    fn member_bytes_min(&self, _chunk_bytes: u64) -> u64 {
        1
    }

    fn member_data_bytes(&self, _chunk_bytes: u64, member_sizes: &[u64]) -> Vec<u64> {
        member_sizes.to_vec()
    }

    fn member_starts(&self, member_data_bytes: &[u64]) -> Vec<u64> {
        let mut starts = Vec::with_capacity(member_data_bytes.len() + 1);
        let mut at = 0u64;
        starts.push(at);
        for &bytes in member_data_bytes {
            at = at
                .checked_add(bytes)
                .expect("linear array size overflows u64");
            starts.push(at);
        }
        starts
    }

    fn size_bytes(&self, g: &Geometry) -> u64 {
        g.member_starts()[g.member_count()]
    }

    fn locate(&self, g: &Geometry, offset: u64) -> Vec<MemberAddress> {
        let role = role_at(g, offset);
        vec![MemberAddress {
            role,
            member_offset: offset - g.member_starts()[role],
        }]
    }

    /// A piece runs to the end of its member; its `chunk` is the member's role.
    fn piece_at(&self, g: &Geometry, at: u64, remaining: u64, buf_offset: u64) -> Piece {
        let copies = self.locate(g, at);
        let role = copies[0].role;
        let member_left = g.member_data_bytes(role) - copies[0].member_offset;
        Piece {
            buf_offset,
            len: member_left.min(remaining),
            chunk: role as u64,
            copies,
        }
    }

    fn sync_unit_count(&self, _g: &Geometry) -> u64 {
        0
    }

    /// Rows do not line up across members: the bound is every row of every member.
    fn rows_of(&self, g: &Geometry, _offset: u64, _end: u64) -> (u64, u64) {
        let largest = (0..g.member_count()).map(|r| g.member_data_bytes(r)).max();
        (0, largest.unwrap_or(0).div_ceil(g.chunk_bytes()))
    }

    fn full_stripe_bytes(&self, _g: &Geometry) -> u64 {
        4096
    }
}

/// The member holding logical byte `offset`: the last whose start is at or before it.
fn role_at(g: &Geometry, offset: u64) -> usize {
    g.member_starts().partition_point(|&s| s <= offset) - 1
}

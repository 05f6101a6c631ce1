//! RAID 10, md's "near" layout with two copies: logical chunk c at slots 2c and 2c+1, slot j
//! on member j mod n at row j div n; an odd slot count leaves the last slot unused. Survives
//! while every mirror pair keeps one copy; its unit of locking and syncing is a logical chunk.

use super::{slot_extent, LevelRules};
use crate::{Geometry, MemberAddress};

pub(crate) struct Raid10;

impl LevelRules for Raid10 {
    fn min_members(&self) -> usize {
        2
    }

    /// One per mirror pair.
    fn max_missing(&self, member_count: usize) -> usize {
        member_count / 2
    }

    fn is_mirrored(&self) -> bool {
        true
    }

    fn size_bytes(&self, g: &Geometry) -> u64 {
        (g.member_count() as u64 * g.rows() / 2) * g.chunk_bytes()
    }

    fn chunk_copies(&self, g: &Geometry, chunk: u64) -> Vec<MemberAddress> {
        vec![slot_extent(g, 2 * chunk), slot_extent(g, 2 * chunk + 1)]
    }

    fn survives(&self, g: &Geometry, present: &[bool]) -> bool {
        // The pattern of copy pairs repeats every `member_count` logical chunks.
        let period = g.logical_chunk_count().min(g.member_count() as u64);
        (0..period).all(|chunk| self.chunk_copies(g, chunk).iter().any(|e| present[e.role]))
    }

    fn sync_unit_count(&self, g: &Geometry) -> u64 {
        g.logical_chunk_count()
    }

    /// Row `row` of `role` is slot row·n + role, a copy of logical chunk slot / 2.
    fn unit_of_row(&self, g: &Geometry, role: usize, row: u64) -> u64 {
        (row * g.member_count() as u64 + role as u64) / 2
    }

    fn rows_of(&self, g: &Geometry, offset: u64, end: u64) -> (u64, u64) {
        let (n, chunk) = (g.member_count() as u64, g.chunk_bytes());
        (2 * (offset / chunk) / n, (2 * ((end - 1) / chunk) + 1) / n)
    }

    /// Half the members hold distinct data in one row.
    fn full_stripe_bytes(&self, g: &Geometry) -> u64 {
        (g.member_count() as u64 / 2).max(1) * g.chunk_bytes()
    }
}

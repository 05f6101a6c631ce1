//! RAID 0: chunk c on member c mod n, row c div n; no redundancy.

use super::{slot_extent, LevelRules};
use crate::{Geometry, MemberAddress};

pub(crate) struct Raid0;

impl LevelRules for Raid0 {
    fn min_members(&self) -> usize {
        2
    }

    fn max_missing(&self, _member_count: usize) -> usize {
        0
    }

    fn size_bytes(&self, g: &Geometry) -> u64 {
        g.member_count() as u64 * g.member_data_bytes(0)
    }

    fn chunk_copies(&self, g: &Geometry, chunk: u64) -> Vec<MemberAddress> {
        vec![slot_extent(g, chunk)]
    }

    fn sync_unit_count(&self, _g: &Geometry) -> u64 {
        0
    }

    fn full_stripe_bytes(&self, g: &Geometry) -> u64 {
        g.member_count() as u64 * g.chunk_bytes()
    }
}

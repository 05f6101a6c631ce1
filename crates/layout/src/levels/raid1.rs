//! RAID 1: an n-way mirror; chunk c at row c of every member. Survives while one member is
//! left; its unit of locking and syncing is a row.

use super::LevelRules;
use crate::{Geometry, MemberAddress};

pub(crate) struct Raid1;

impl LevelRules for Raid1 {
    fn min_members(&self) -> usize {
        2
    }

    fn max_missing(&self, member_count: usize) -> usize {
        member_count - 1
    }

    fn is_mirrored(&self) -> bool {
        true
    }

    fn size_bytes(&self, g: &Geometry) -> u64 {
        g.member_data_bytes(0)
    }

    fn chunk_copies(&self, g: &Geometry, chunk: u64) -> Vec<MemberAddress> {
        (0..g.member_count())
            .map(|role| MemberAddress {
                role,
                member_offset: chunk * g.chunk_bytes(),
            })
            .collect()
    }

    fn sync_unit_count(&self, g: &Geometry) -> u64 {
        g.rows()
    }

    /// Nothing is read to write: no stripe to fill.
    fn full_stripe_bytes(&self, _g: &Geometry) -> u64 {
        4096
    }
}

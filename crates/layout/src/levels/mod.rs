//! One module per RAID level, each a [`LevelRules`]: what an array of that level is made of
//! (member counts, sizes), where each logical byte lives (mapping), what it survives, and its
//! stripe geometry (the unit of locking and syncing, the full-stripe write size).
//!
//! The rules are stateless (SPDK's per-level module table): the shape of one array (chunk size,
//! member sizes) is the [`Geometry`] passed in, and [`Level::rules`] is the only place that
//! names every level. `Geometry`'s public methods ask the rules; nothing else matches on the
//! level. RAID 5 and 6 share their stripe arithmetic (`parity_stripes`).

mod linear;
mod parity_stripes;
mod raid0;
mod raid1;
mod raid10;
mod raid5;
mod raid6;

use crate::{Geometry, Level, MemberAddress, Piece};

pub use parity_stripes::{ChunkSpan, Slot, StripeSpan};

/// The rules of one RAID level. Methods taking a [`Geometry`] answer for that array's shape;
/// the defaults are those of a chunked level whose stripe is one chunk (RAID 0, 1, 10).
pub(crate) trait LevelRules: Sync {
    /// Fewest members an array of this level may have.
    fn min_members(&self) -> usize;

    /// Most members that may be missing in the best case (see [`Level::max_missing`]).
    fn max_missing(&self, member_count: usize) -> usize;

    /// Parity blocks per stripe.
    fn parity_count(&self) -> usize {
        0
    }

    /// True for the levels that keep copies of every chunk (RAID 1, RAID 10).
    fn is_mirrored(&self) -> bool {
        false
    }

    /// The fewest data bytes a member must have.
    fn member_bytes_min(&self, chunk_bytes: u64) -> u64 {
        chunk_bytes
    }

    /// Per role, the bytes of its data area the array uses: the smallest member rounded down
    /// to the chunk, on every member.
    fn member_data_bytes(&self, chunk_bytes: u64, member_sizes: &[u64]) -> Vec<u64> {
        let smallest = member_sizes.iter().copied().min().unwrap_or(0);
        vec![smallest / chunk_bytes * chunk_bytes; member_sizes.len()]
    }

    /// Logical start of each member's data (concatenated levels only), plus the array size.
    fn member_starts(&self, _member_data_bytes: &[u64]) -> Vec<u64> {
        Vec::new()
    }

    /// Logical size of the array.
    fn size_bytes(&self, g: &Geometry) -> u64;

    /// Where the copies of logical chunk `chunk` live (levels with chunk copies).
    fn chunk_copies(&self, g: &Geometry, chunk: u64) -> Vec<MemberAddress> {
        panic!(
            "chunk_copies is not defined for {} (chunk {chunk})",
            g.level()
        )
    }

    /// Every member byte holding logical byte `offset`.
    fn locate(&self, g: &Geometry, offset: u64) -> Vec<MemberAddress> {
        let within = offset % g.chunk_bytes();
        let mut extents = self.chunk_copies(g, offset / g.chunk_bytes());
        for e in &mut extents {
            e.member_offset += within;
        }
        extents
    }

    /// The piece of a request starting at logical `at`: up to the end of its chunk.
    fn piece_at(&self, g: &Geometry, at: u64, remaining: u64, buf_offset: u64) -> Piece {
        let chunk_bytes = g.chunk_bytes();
        let (chunk, within) = (at / chunk_bytes, at % chunk_bytes);
        let mut copies = self.chunk_copies(g, chunk);
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

    /// Whether all data is still there with only the members marked in `present`.
    fn survives(&self, g: &Geometry, present: &[bool]) -> bool {
        let missing = present.iter().filter(|p| !**p).count();
        missing <= self.max_missing(g.member_count())
    }

    /// Logical bytes of one unit of locking and syncing: a stripe's data (RAID 5/6), else a
    /// chunk.
    fn unit_bytes(&self, g: &Geometry) -> u64 {
        g.chunk_bytes()
    }

    /// Units a scrub or resync walks; 0 without redundancy.
    fn sync_unit_count(&self, g: &Geometry) -> u64;

    /// The unit holding row `row` of member `role` (row = member offset / chunk).
    fn unit_of_row(&self, _g: &Geometry, _role: usize, row: u64) -> u64 {
        row
    }

    /// The member rows `[first, last]` holding logical bytes `[offset, end)` on any member
    /// (`offset < end`): the chunk's own row for RAID 1 (and, as a bound, RAID 0).
    fn rows_of(&self, g: &Geometry, offset: u64, end: u64) -> (u64, u64) {
        (offset / g.chunk_bytes(), (end - 1) / g.chunk_bytes())
    }

    /// Logical bytes of a write that reads nothing and touches every data member once (a full
    /// stripe); 4 KiB for levels that never read to write and do not stripe.
    fn full_stripe_bytes(&self, g: &Geometry) -> u64;
}

/// Slot `slot` of a striped layout: member `slot mod n`, row `slot div n`.
fn slot_extent(g: &Geometry, slot: u64) -> MemberAddress {
    let n = g.member_count() as u64;
    MemberAddress {
        role: (slot % n) as usize,
        member_offset: (slot / n) * g.chunk_bytes(),
    }
}

impl Level {
    /// This level's rules: the one place that names every level's module.
    pub(crate) fn rules(self) -> &'static dyn LevelRules {
        match self {
            Level::Linear => &linear::Linear,
            Level::Raid0 => &raid0::Raid0,
            Level::Raid1 => &raid1::Raid1,
            Level::Raid10 => &raid10::Raid10,
            Level::Raid5 => &raid5::RAID5,
            Level::Raid6 => &raid6::RAID6,
        }
    }
}

//! `Geometry`: the size of an array and which member bytes hold each logical byte.

use crate::Level;
use std::fmt;

/// Smallest chunk (stripe unit) accepted.
pub const CHUNK_BYTES_MIN: u64 = 4 * 1024;
/// Largest chunk (stripe unit) accepted.
pub const CHUNK_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// Chunk size used when the user gives none.
pub const CHUNK_BYTES_DEFAULT: u64 = 128 * 1024;

/// Why a geometry could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// Fewer members than the level needs.
    TooFewMembers {
        level: Level,
        member_count: usize,
        min: usize,
    },
    /// Chunk size not a power of two within [4 KiB, 4 MiB].
    BadChunk { chunk_bytes: u64 },
    /// A member cannot hold even one chunk (or, for linear, is empty).
    MemberTooSmall {
        role: usize,
        bytes: u64,
        chunk_bytes: u64,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::TooFewMembers {
                level,
                member_count,
                min,
            } => write!(
                f,
                "{level} needs at least {min} members, {member_count} given"
            ),
            LayoutError::BadChunk { chunk_bytes } => write!(
                f,
                "chunk size {chunk_bytes} bytes is not a power of two between {CHUNK_BYTES_MIN} and {CHUNK_BYTES_MAX}"
            ),
            LayoutError::MemberTooSmall {
                role,
                bytes,
                chunk_bytes,
            } => write!(
                f,
                "member {role} has {bytes} data bytes, less than one chunk of {chunk_bytes} bytes"
            ),
        }
    }
}

impl std::error::Error for LayoutError {}

/// One place on one member: `role` is the member's index in the array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberAddress {
    pub role: usize,
    pub member_offset: u64,
}

/// Shape of an array: level, chunk size, members and their usable data sizes. What depends on
/// the level is asked of the level's rules (`levels`); an array whose layout changes (a
/// reshape) holds two geometries and asks the one that covers an offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    level: Level,
    chunk_bytes: u64,
    member_count: usize,
    /// The level's parity blocks per stripe, kept here: the stripe arithmetic asks it per chunk.
    parity_count: usize,
    /// Per role: bytes of that member's data area the array uses.
    member_data_bytes: Vec<u64>,
    /// Concatenated levels only: logical start of each member, plus the array size at the end.
    member_starts: Vec<u64>,
    size_bytes: u64,
}

impl Geometry {
    /// Builds the geometry for members whose data areas are `member_sizes` bytes (by role).
    /// Every level but linear uses the smallest member's size rounded down to the chunk.
    pub fn new(
        level: Level,
        chunk_bytes: u64,
        member_sizes: &[u64],
    ) -> Result<Geometry, LayoutError> {
        let rules = level.rules();
        let member_count = member_sizes.len();
        if member_count < rules.min_members() {
            return Err(LayoutError::TooFewMembers {
                level,
                member_count,
                min: rules.min_members(),
            });
        }
        let chunk_ok = chunk_bytes.is_power_of_two()
            && (CHUNK_BYTES_MIN..=CHUNK_BYTES_MAX).contains(&chunk_bytes);
        if !chunk_ok {
            return Err(LayoutError::BadChunk { chunk_bytes });
        }
        let floor = rules.member_bytes_min(chunk_bytes);
        if let Some((role, &bytes)) = member_sizes.iter().enumerate().find(|(_, b)| **b < floor) {
            return Err(LayoutError::MemberTooSmall {
                role,
                bytes,
                chunk_bytes,
            });
        }
        let member_data_bytes = rules.member_data_bytes(chunk_bytes, member_sizes);
        assert_eq!(member_data_bytes.len(), member_count);
        let member_starts = rules.member_starts(&member_data_bytes);
        let mut geometry = Geometry {
            level,
            chunk_bytes,
            member_count,
            parity_count: rules.parity_count(),
            member_data_bytes,
            member_starts,
            size_bytes: 0,
        };
        geometry.size_bytes = rules.size_bytes(&geometry);
        assert!(geometry.size_bytes > 0);
        Ok(geometry)
    }

    pub fn level(&self) -> Level {
        self.level
    }
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }
    pub fn member_count(&self) -> usize {
        self.member_count
    }
    /// Bytes of `role`'s data area that the array uses.
    pub fn member_data_bytes(&self, role: usize) -> u64 {
        self.member_data_bytes[role]
    }
    /// Logical size of the array in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    /// Chunk rows per member (not for linear): for RAID 5/6 this is the stripe count.
    pub fn rows(&self) -> u64 {
        assert!(self.member_starts.is_empty(), "linear has no rows");
        self.member_data_bytes[0] / self.chunk_bytes
    }
    /// Logical chunks in the array (not for linear).
    pub fn logical_chunk_count(&self) -> u64 {
        assert!(self.member_starts.is_empty(), "linear has no chunks");
        self.size_bytes / self.chunk_bytes
    }

    /// Linear only: logical offset where `role`'s data starts.
    pub fn linear_start(&self, role: usize) -> u64 {
        assert!(
            !self.member_starts.is_empty(),
            "{} is not linear",
            self.level
        );
        self.member_starts[role]
    }

    /// Concatenated levels: each member's logical start, then the array size.
    pub(crate) fn member_starts(&self) -> &[u64] {
        &self.member_starts
    }

    /// Where the copies of logical chunk `chunk` live (levels 0, 1, 10); member offsets are of
    /// the chunk's first byte.
    pub fn chunk_copies(&self, chunk: u64) -> Vec<MemberAddress> {
        assert!(
            chunk < self.logical_chunk_count(),
            "chunk {chunk} beyond the array"
        );
        self.level.rules().chunk_copies(self, chunk)
    }

    /// Every member byte holding logical byte `offset` (all copies; for RAID 5/6 the data copy).
    pub fn locate(&self, offset: u64) -> Vec<MemberAddress> {
        assert!(offset < self.size_bytes, "offset {offset} beyond the array");
        self.level.rules().locate(self, offset)
    }

    /// Whether the array keeps all its data with only the members marked in `present`.
    pub fn survives(&self, present: &[bool]) -> bool {
        assert_eq!(present.len(), self.member_count);
        self.level.rules().survives(self, present)
    }

    /// Parity blocks per stripe: 1 for RAID 5, 2 for RAID 6, 0 otherwise.
    pub fn parity_count(&self) -> usize {
        self.parity_count
    }

    /// True for the levels whose stripes carry parity (RAID 5 and 6).
    pub fn has_parity(&self) -> bool {
        self.parity_count() > 0
    }

    /// True for the levels that keep copies of every chunk (RAID 1 and 10).
    pub fn is_mirrored(&self) -> bool {
        self.level.is_mirrored()
    }

    /// True for the levels that can lose a member and keep their data (resync, rebuild and
    /// scrub apply).
    pub fn has_redundancy(&self) -> bool {
        self.level.has_redundancy()
    }

    /// Logical bytes of one *unit*, the grain of stripe locking, resync and scrub: a stripe's
    /// data for RAID 5/6, a chunk otherwise. Unit `u` covers logical bytes
    /// `[u·unit_bytes, (u+1)·unit_bytes)`.
    pub fn unit_bytes(&self) -> u64 {
        self.level.rules().unit_bytes(self)
    }

    /// Units a scrub or resync walks (0 for levels without redundancy).
    pub fn sync_unit_count(&self) -> u64 {
        self.level.rules().sync_unit_count(self)
    }

    /// The unit holding row `row` (member offset / chunk) of member `role` (not for linear).
    pub fn unit_of_row(&self, role: usize, row: u64) -> u64 {
        assert!(role < self.member_count && row < self.rows());
        self.level.rules().unit_of_row(self, role, row)
    }

    /// The byte range of `role`'s data area whose rows may hold logical bytes
    /// `[offset, offset+len)` (`len > 0`); empty when none. A bound (whole rows, on every
    /// member alike), used to resync after a member comes back.
    pub fn member_range(&self, role: usize, offset: u64, len: u64) -> (u64, u64) {
        assert!(len > 0 && offset + len <= self.size_bytes);
        let (first, last) = self.level.rules().rows_of(self, offset, offset + len);
        assert!(first <= last);
        let member_end = self.member_data_bytes[role];
        let lo = (first * self.chunk_bytes).min(member_end);
        let hi = ((last + 1) * self.chunk_bytes).min(member_end);
        (lo, hi)
    }

    /// Logical bytes of a full stripe, the preferred write size: a write of this size and
    /// alignment reads nothing back. 4 KiB for the levels that do not stripe (linear, RAID 1).
    pub fn full_stripe_bytes(&self) -> u64 {
        self.level.rules().full_stripe_bytes(self)
    }
}

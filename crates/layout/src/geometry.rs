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
pub struct Extent {
    pub role: usize,
    pub member_offset: u64,
}

/// Shape of an array: level, chunk size, members and their usable data sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    level: Level,
    chunk_bytes: u64,
    member_count: usize,
    /// Per role: bytes of that member's data area the array uses.
    member_data_bytes: Vec<u64>,
    /// Linear only: logical start of each member, plus the array size at the end.
    linear_starts: Vec<u64>,
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
        let member_count = member_sizes.len();
        if member_count < level.min_members() {
            return Err(LayoutError::TooFewMembers {
                level,
                member_count,
                min: level.min_members(),
            });
        }
        let chunk_ok = chunk_bytes.is_power_of_two()
            && (CHUNK_BYTES_MIN..=CHUNK_BYTES_MAX).contains(&chunk_bytes);
        if !chunk_ok {
            return Err(LayoutError::BadChunk { chunk_bytes });
        }
        let floor = if level == Level::Linear {
            1
        } else {
            chunk_bytes
        };
        if let Some((role, &bytes)) = member_sizes.iter().enumerate().find(|(_, b)| **b < floor) {
            return Err(LayoutError::MemberTooSmall {
                role,
                bytes,
                chunk_bytes,
            });
        }
        let member_data_bytes = usable_sizes(level, chunk_bytes, member_sizes);
        let linear_starts = linear_starts(level, &member_data_bytes);
        let mut geometry = Geometry {
            level,
            chunk_bytes,
            member_count,
            member_data_bytes,
            linear_starts,
            size_bytes: 0,
        };
        geometry.size_bytes = geometry.compute_size_bytes();
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
    /// Chunk rows per member (non-linear levels): for RAID 5/6 this is the stripe count.
    pub fn rows(&self) -> u64 {
        assert!(self.level != Level::Linear);
        self.member_data_bytes[0] / self.chunk_bytes
    }
    /// Logical chunks in the array (non-linear levels).
    pub fn logical_chunk_count(&self) -> u64 {
        assert!(self.level != Level::Linear);
        self.size_bytes / self.chunk_bytes
    }

    fn compute_size_bytes(&self) -> u64 {
        let n = self.member_count as u64;
        match self.level {
            Level::Linear => self.linear_starts[self.member_count],
            Level::Raid1 => self.member_data_bytes[0],
            Level::Raid10 => (n * self.rows() / 2) * self.chunk_bytes,
            other => (n - other.parity_count() as u64) * self.member_data_bytes[0],
        }
    }

    /// Linear only: logical offset where `role`'s data starts.
    pub fn linear_start(&self, role: usize) -> u64 {
        assert!(self.level == Level::Linear);
        self.linear_starts[role]
    }

    /// Where the copies of logical chunk `chunk` live (levels 0, 1, 10); member offsets are of
    /// the chunk's first byte.
    pub fn chunk_copies(&self, chunk: u64) -> Vec<Extent> {
        assert!(
            chunk < self.logical_chunk_count(),
            "chunk {chunk} beyond the array"
        );
        let n = self.member_count as u64;
        let c = self.chunk_bytes;
        match self.level {
            Level::Raid0 => vec![slot_extent(chunk, n, c)],
            Level::Raid1 => (0..self.member_count)
                .map(|role| Extent {
                    role,
                    member_offset: chunk * c,
                })
                .collect(),
            Level::Raid10 => vec![
                slot_extent(2 * chunk, n, c),
                slot_extent(2 * chunk + 1, n, c),
            ],
            level => panic!("chunk_copies is not defined for {level}"),
        }
    }

    /// Every member byte holding logical byte `offset` (all copies; for RAID 5/6 the data copy).
    pub fn locate(&self, offset: u64) -> Vec<Extent> {
        assert!(offset < self.size_bytes, "offset {offset} beyond the array");
        if self.level == Level::Linear {
            let role = self.linear_starts.partition_point(|&s| s <= offset) - 1;
            return vec![Extent {
                role,
                member_offset: offset - self.linear_starts[role],
            }];
        }
        let within = offset % self.chunk_bytes;
        let chunk = offset / self.chunk_bytes;
        let mut extents = if self.level.has_parity() {
            let k = self.data_per_stripe() as u64;
            let stripe = chunk / k;
            vec![Extent {
                role: self.data_role(stripe, (chunk % k) as usize),
                member_offset: stripe * self.chunk_bytes,
            }]
        } else {
            self.chunk_copies(chunk)
        };
        for e in &mut extents {
            e.member_offset += within;
        }
        extents
    }

    /// Whether the array keeps all its data with only the members marked in `present`.
    pub fn survives(&self, present: &[bool]) -> bool {
        assert_eq!(present.len(), self.member_count);
        let missing = present.iter().filter(|p| !**p).count();
        match self.level {
            Level::Linear | Level::Raid0 => missing == 0,
            Level::Raid1 => missing < self.member_count,
            Level::Raid5 => missing <= 1,
            Level::Raid6 => missing <= 2,
            Level::Raid10 => {
                // The pattern of copy pairs repeats every `member_count` logical chunks.
                let period = self.logical_chunk_count().min(self.member_count as u64);
                (0..period).all(|chunk| self.chunk_copies(chunk).iter().any(|e| present[e.role]))
            }
        }
    }
}

/// Slot `slot` of a near layout: member `slot mod n`, row `slot div n`.
fn slot_extent(slot: u64, n: u64, chunk_bytes: u64) -> Extent {
    Extent {
        role: (slot % n) as usize,
        member_offset: (slot / n) * chunk_bytes,
    }
}

fn usable_sizes(level: Level, chunk_bytes: u64, member_sizes: &[u64]) -> Vec<u64> {
    if level == Level::Linear {
        return member_sizes.to_vec();
    }
    let smallest = member_sizes.iter().copied().min().unwrap_or(0);
    let usable = smallest / chunk_bytes * chunk_bytes;
    vec![usable; member_sizes.len()]
}

fn linear_starts(level: Level, member_data_bytes: &[u64]) -> Vec<u64> {
    if level != Level::Linear {
        return Vec::new();
    }
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

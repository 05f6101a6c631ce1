//! `Array`: construction, member presence, and dispatch of each request to its level family.

use crate::error::{EngineError, IoError};
use crate::io::MemOp;
use crate::locks::StripeLocks;
use layout::{Geometry, Level};
use member::Member;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Default per-member share of one batch (bytes) from which member I/O runs on parallel
/// threads; measured in docs/PERFORMANCE.md ("engine").
pub const FANOUT_MIN_BYTES_DEFAULT: u64 = 1 << 20;

/// What an array is made of; `member_data_bytes[role]` is the size of that member's data area.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayConfig {
    pub level: Level,
    pub chunk_bytes: u64,
    pub member_count: usize,
    pub member_data_bytes: Vec<u64>,
}

/// A RAID array over data-area members. All methods take `&self` and are safe to call from
/// many threads at once.
pub struct Array {
    pub(crate) geometry: Geometry,
    pub(crate) members: Vec<Option<Arc<dyn Member>>>,
    /// Per role: false once missing or failed. Never goes back to true.
    pub(crate) present: Vec<AtomicBool>,
    pub(crate) in_flight: Vec<AtomicUsize>,
    pub(crate) locks: StripeLocks,
    /// Per-member share of a batch from which member I/O fans out to threads.
    pub(crate) fanout_min_bytes: AtomicU64,
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Array")
            .field("geometry", &self.geometry)
            .field("members", &self.members)
            .field("present", &self.present_snapshot())
            .finish()
    }
}

impl Array {
    /// Builds an array. `members[role]` is that member's data area, `None` when missing.
    /// Refuses when the geometry is invalid, a member is too small, or too many are missing.
    pub fn new(
        config: ArrayConfig,
        members: Vec<Option<Arc<dyn Member>>>,
    ) -> Result<Array, EngineError> {
        let n = config.member_count;
        if config.member_data_bytes.len() != n || members.len() != n {
            return Err(EngineError::MemberCountMismatch {
                member_count: n,
                sizes_given: config.member_data_bytes.len(),
                members_given: members.len(),
            });
        }
        let geometry = Geometry::new(config.level, config.chunk_bytes, &config.member_data_bytes)?;
        for (role, member) in members.iter().enumerate() {
            let Some(member) = member else { continue };
            let needed_bytes = geometry.member_data_bytes(role);
            if member.len() < needed_bytes {
                return Err(EngineError::MemberTooSmall {
                    role,
                    name: member.name().to_string(),
                    len_bytes: member.len(),
                    needed_bytes,
                });
            }
        }
        let present: Vec<bool> = members.iter().map(Option::is_some).collect();
        if !geometry.survives(&present) {
            return Err(EngineError::TooManyMissing {
                level: config.level,
                missing: missing_roles(&present),
            });
        }
        Ok(Array {
            geometry,
            members,
            present: present.into_iter().map(AtomicBool::new).collect(),
            in_flight: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            locks: StripeLocks::new(),
            fanout_min_bytes: AtomicU64::new(FANOUT_MIN_BYTES_DEFAULT),
        })
    }

    /// Logical size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.geometry.size_bytes()
    }

    /// The array's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Which roles are in use (not missing, not failed).
    pub fn present_snapshot(&self) -> Vec<bool> {
        self.present
            .iter()
            .map(|p| p.load(Ordering::Acquire))
            .collect()
    }

    /// Stops using member `role`; the array then behaves as if it were missing.
    pub fn fail_member(&self, role: usize) {
        assert!(role < self.members.len(), "no member {role}");
        self.present[role].store(false, Ordering::Release);
    }

    /// Present members, or `ArrayFailed` when they no longer hold all the data.
    pub(crate) fn usable(&self) -> Result<Vec<bool>, IoError> {
        let present = self.present_snapshot();
        if self.geometry.survives(&present) {
            Ok(present)
        } else {
            Err(IoError::ArrayFailed {
                level: self.geometry.level(),
                missing: missing_roles(&present),
            })
        }
    }

    fn assert_range(&self, offset: u64, len: u64) {
        assert!(
            offset
                .checked_add(len)
                .is_some_and(|end| end <= self.size_bytes()),
            "request {offset}+{len} beyond array of {} bytes",
            self.size_bytes()
        );
    }

    /// Reads `buf.len()` bytes at `offset`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.assert_range(offset, buf.len() as u64);
        if buf.is_empty() {
            return Ok(());
        }
        if self.geometry.level().has_parity() {
            self.raid56_read(offset, buf)
        } else {
            self.plain_read(offset, buf)
        }
    }

    /// Writes `buf` at `offset`, keeping every copy and parity block consistent.
    pub fn write(&self, offset: u64, buf: &[u8]) -> Result<(), IoError> {
        self.assert_range(offset, buf.len() as u64);
        if buf.is_empty() {
            return Ok(());
        }
        if self.geometry.level().has_parity() {
            self.raid56_write(offset, buf)
        } else {
            self.plain_write(offset, buf)
        }
    }

    /// Makes every earlier completed write durable on every present member (in parallel).
    pub fn flush(&self) -> Result<(), IoError> {
        let present = self.usable()?;
        let ops = (0..present.len())
            .filter(|&role| present[role])
            .map(|role| MemOp::Flush { role })
            .collect();
        self.run(ops)
    }

    /// Discards `[offset, offset+len)`; it reads back as zeroes afterwards.
    pub fn trim(&self, offset: u64, len: u64) -> Result<(), IoError> {
        self.discard(offset, len, crate::Discard::Trim)
    }

    /// Writes zeroes over `[offset, offset+len)`.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), IoError> {
        self.discard(offset, len, crate::Discard::Zero)
    }

    fn discard(&self, offset: u64, len: u64, how: crate::Discard) -> Result<(), IoError> {
        self.assert_range(offset, len);
        if len == 0 {
            return Ok(());
        }
        if self.geometry.level().has_parity() {
            self.raid56_discard(offset, len, how)
        } else {
            self.plain_discard(offset, len, how)
        }
    }
}

pub(crate) fn missing_roles(present: &[bool]) -> Vec<usize> {
    (0..present.len()).filter(|&r| !present[r]).collect()
}

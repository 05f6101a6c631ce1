//! `Array`: construction, member presence, and dispatch of each request to its level's data
//! path (`levels`).

use crate::error::{EngineError, IoError};
use crate::gather::Gather;
use crate::io::MemOp;
use crate::locks::StripeLocks;
use crate::members::Members;
use crate::scratch::{ScratchPool, SCRATCH_IDLE_MAX_BYTES_DEFAULT};
use crate::state::MemberHealth;
use layout::{Geometry, Level};
use member::Member;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

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
    /// The level's data path (`levels`), chosen once from the geometry's level.
    pub(crate) level_io: &'static dyn crate::levels::LevelIo,
    /// Per role: the members, their health, fault counters and requests in flight.
    pub(crate) members: Members,
    /// Client requests started (reads, writes, trims, flushes): background work backs off
    /// while this moves.
    client_requests: AtomicU64,
    pub(crate) locks: StripeLocks,
    /// Per-member share of a batch from which member I/O fans out to threads.
    pub(crate) fanout: crate::io::FanOut,
    /// The journal RAID 5/6 member writes are logged to first (see `write_log`).
    pub(crate) journal: RwLock<Option<Arc<journal::Journal>>>,
    /// Chunk-sized buffers for RAID 5/6 parity and stripe reads, reused across requests.
    pub(crate) scratch: ScratchPool,
    /// RAID 5/6: adjacent concurrent writes that share a stripe write it whole, once.
    pub(crate) gather: Gather,
    /// Sync units a write refused for lack of space may have left inconsistent (`unsynced`).
    pub(crate) unsynced: crate::unsynced::Unsynced,
    /// RAID 5/6: which stripes' parity may disagree with their data (during a sync).
    pub(crate) trust: crate::trust::TrustSlot,
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Array")
            .field("geometry", &self.geometry)
            .field("health", &self.health_snapshot())
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
            level_io: crate::levels::for_level(geometry.level()),
            geometry,
            members: Members::new(members),
            client_requests: AtomicU64::new(0),
            locks: StripeLocks::new(),
            fanout: crate::io::FanOut::new(FANOUT_MIN_BYTES_DEFAULT),
            journal: RwLock::new(None),
            scratch: ScratchPool::new(config.chunk_bytes, SCRATCH_IDLE_MAX_BYTES_DEFAULT),
            gather: Gather::new(),
            unsynced: Default::default(),
            trust: crate::trust::TrustSlot::new(),
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

    /// Which roles may be read (in sync: not missing, failed or being rebuilt).
    pub fn present_snapshot(&self) -> Vec<bool> {
        self.health_snapshot()
            .iter()
            .map(|h| h.readable())
            .collect()
    }

    /// Which roles every write must reach (in sync or being rebuilt).
    pub fn writable_snapshot(&self) -> Vec<bool> {
        self.health_snapshot()
            .iter()
            .map(|h| h.writable())
            .collect()
    }

    /// The health of every role.
    pub fn health_snapshot(&self) -> Vec<MemberHealth> {
        self.members.health_snapshot()
    }

    /// Number of members (roles).
    pub fn member_count(&self) -> usize {
        self.members.count()
    }

    /// Counter bumped on every member state change: compare two readings to learn whether
    /// anything changed in between.
    pub fn state_epoch(&self) -> u64 {
        self.members.epoch()
    }

    /// Client requests started so far (for background throttling).
    pub fn client_requests(&self) -> u64 {
        self.client_requests.load(Ordering::Relaxed)
    }

    /// Readable members, or `ArrayFailed` when they no longer hold all the data.
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

    /// Reads `buf.len()` bytes at `offset`. A member read error is repaired from redundancy
    /// (see `recover`), so the caller only sees errors for data that cannot be served.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.assert_range(offset, buf.len() as u64);
        self.client_requests.fetch_add(1, Ordering::Relaxed);
        if buf.is_empty() {
            return Ok(());
        }
        self.resync_unsynced_before_read(offset, buf.len() as u64);
        self.recovering(|| self.level_io.read(self, offset, &mut *buf))
    }

    /// Writes `buf` at `offset`, keeping every copy and parity block consistent. A member that
    /// refuses for lack of space fails the write (`IoError::is_no_space`) without being failed;
    /// the units written are then resynced later (see [`Array::unsynced_units`]).
    pub fn write(&self, offset: u64, buf: &[u8]) -> Result<(), IoError> {
        self.assert_range(offset, buf.len() as u64);
        self.client_requests.fetch_add(1, Ordering::Relaxed);
        if buf.is_empty() {
            return Ok(());
        }
        let result = self.level_io.write(self, offset, buf);
        self.note_failed_write(&result, offset, buf.len() as u64);
        result
    }

    /// A write refused for lack of space may have reached some members and not others: its
    /// units are recorded for a resync (see `unsynced`). Other errors fail members instead.
    fn note_failed_write(&self, result: &Result<(), IoError>, offset: u64, len: u64) {
        if result.as_ref().is_err_and(IoError::is_no_space) {
            self.mark_unsynced(offset, len);
        }
    }

    /// Makes every earlier completed write durable on every writable member (in parallel).
    pub fn flush(&self) -> Result<(), IoError> {
        self.client_requests.fetch_add(1, Ordering::Relaxed);
        self.usable()?;
        let writable = self.writable_snapshot();
        let ops = (0..writable.len())
            .filter(|&role| writable[role])
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
        self.client_requests.fetch_add(1, Ordering::Relaxed);
        if len == 0 {
            return Ok(());
        }
        let result = self.recovering(|| self.level_io.discard(self, offset, len, how));
        self.note_failed_write(&result, offset, len);
        result
    }
}

pub(crate) fn missing_roles(present: &[bool]) -> Vec<usize> {
    (0..present.len()).filter(|&r| !present[r]).collect()
}

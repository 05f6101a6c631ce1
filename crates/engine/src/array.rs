//! `Array`: construction, member presence, dispatch of each request to its level's data path
//! (`levels`), and the tuning knobs and hooks of its parts. The other operations are in
//! files that use `Array` and that this one does not use: `health` (members), `recover`
//! (rebuild, replace), `rebuild_pipeline`, `scrub` (check, sync units) and `write_log` (the
//! journal).

use crate::error::{EngineError, IoError};
use crate::io::MemOp;
use crate::levels::{for_level, repair, LevelIo};
use crate::parts::{missing_roles, Parts};
use crate::state::MemberHealth;
use crate::trust::ParityTrust;
use layout::{Geometry, Level};
use member::Member;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
    /// What the level's data path works with: geometry, members, runner, locks, ...
    pub(crate) parts: Parts,
    /// The level's data path (`levels`), chosen once from the geometry's level.
    pub(crate) level_io: &'static dyn LevelIo,
    /// Client requests started (reads, writes, trims, flushes): background work backs off
    /// while this moves.
    client_requests: AtomicU64,
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Array")
            .field("geometry", &self.parts.geometry)
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
            EngineError::check_fits(role, member.as_ref(), geometry.member_data_bytes(role))?;
        }
        let present: Vec<bool> = members.iter().map(Option::is_some).collect();
        if !geometry.survives(&present) {
            return Err(EngineError::TooManyMissing {
                level: config.level,
                missing: missing_roles(&present),
            });
        }
        Ok(Array {
            level_io: for_level(geometry.level()),
            parts: Parts::new(geometry, members),
            client_requests: AtomicU64::new(0),
        })
    }

    /// Logical size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.parts.geometry.size_bytes()
    }

    /// The array's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.parts.geometry
    }

    /// Which roles may be read (in sync: not missing, failed or being rebuilt).
    pub fn present_snapshot(&self) -> Vec<bool> {
        self.parts.present_snapshot()
    }

    /// Which roles every write must reach (in sync or being rebuilt).
    pub fn writable_snapshot(&self) -> Vec<bool> {
        self.parts.writable_snapshot()
    }

    /// The health of every role.
    pub fn health_snapshot(&self) -> Vec<MemberHealth> {
        self.parts.members.health_snapshot()
    }

    /// Number of members (roles).
    pub fn member_count(&self) -> usize {
        self.parts.members.count()
    }

    /// Counter bumped on every member state change: compare two readings to learn whether
    /// anything changed in between.
    pub fn state_epoch(&self) -> u64 {
        self.parts.members.epoch()
    }

    /// Client requests started so far (for background throttling).
    pub fn client_requests(&self) -> u64 {
        self.client_requests.load(Ordering::Relaxed)
    }

    /// Runs `attempt`, repairing member read errors from the level's redundancy and retrying
    /// (see `levels::repair`).
    pub(crate) fn recovering<T>(
        &self,
        attempt: impl FnMut() -> Result<T, IoError>,
    ) -> Result<T, IoError> {
        repair::recovering(self.level_io, &self.parts, attempt)
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
        self.recovering(|| self.level_io.read(&self.parts, offset, &mut *buf))
    }

    /// Writes `buf` at `offset`, keeping every copy and parity block consistent. A member that
    /// refuses for lack of space fails the write (`IoError::is_no_space`) without being failed;
    /// the units written are then resynced later (see [`Array::unsynced_units`]).
    pub fn write(&self, offset: u64, buf: &[u8]) -> Result<(), IoError> {
        self.write_by(offset, buf, || {
            self.level_io.write(&self.parts, offset, buf)
        })
    }

    /// A write-back apply: [`Array::write`] of `pieces` (sorted by offset, disjoint), bytes
    /// the journal's `ArrayWrite` records hold already (`sources`, sorted by offset, covering
    /// every piece), so a RAID 5/6 stripe's record logs its parity and only refers to its data
    /// (`journal::Record::StripeApply`). On RAID 5/6, pieces that share a stripe are written
    /// together: the stripe is read once for all of them and its parity written once.
    pub fn write_applied(
        &self,
        pieces: &[(u64, &[u8])],
        sources: &[journal::DataSource],
    ) -> Result<(), IoError> {
        let (Some(&(offset, _)), Some(&(last, tail))) = (pieces.first(), pieces.last()) else {
            return Ok(());
        };
        for &(at, data) in pieces {
            self.assert_range(at, data.len() as u64);
        }
        let len = last + tail.len() as u64 - offset;
        self.client_requests.fetch_add(1, Ordering::Relaxed);
        let result = (self.level_io).write_applied(&self.parts, pieces, sources);
        self.note_failed_write(&result, offset, len);
        result
    }

    fn write_by(
        &self,
        offset: u64,
        buf: &[u8],
        write: impl FnOnce() -> Result<(), IoError>,
    ) -> Result<(), IoError> {
        self.assert_range(offset, buf.len() as u64);
        self.client_requests.fetch_add(1, Ordering::Relaxed);
        if buf.is_empty() {
            return Ok(());
        }
        let result = write();
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
        self.parts.usable()?;
        let writable = self.writable_snapshot();
        let ops = (0..writable.len())
            .filter(|&role| writable[role])
            .map(|role| MemOp::Flush { role })
            .collect();
        self.parts.run(ops)
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
        let result = self.recovering(|| self.level_io.discard(&self.parts, offset, len, how));
        self.note_failed_write(&result, offset, len);
        result
    }

    /// Sets the per-member share (bytes) from which a batch fans out to parallel threads.
    /// 0 makes every multi-member batch parallel; `u64::MAX` runs everything inline except
    /// flushes.
    pub fn set_fanout_min_bytes(&self, bytes: u64) {
        self.parts.fanout.set(bytes);
    }

    /// How long a RAID 5/6 write's tail waits for the next write of a sequential stream to
    /// complete its stripe (`Duration::ZERO`: never; default [`crate::GATHER_WAIT_DEFAULT`]).
    pub fn set_gather_wait(&self, wait: Duration) {
        self.parts.gather.set_wait(wait);
    }

    /// Stripes written whole because adjacent writes were gathered.
    pub fn gathered_stripes(&self) -> u64 {
        self.parts.gather.gathered()
    }

    /// Writes now waiting for a pending stripe tail to be completed or claimed (gathering).
    pub fn gather_waiting(&self) -> usize {
        self.parts.gather.waiting()
    }

    /// Sets (or, with `None`, removes) what tells RAID 5/6 writes which stripes' parity is
    /// untrusted (see `trust`). Remove it only once every stripe it called untrusted has been
    /// synced.
    pub fn set_parity_trust(&self, hook: Option<Arc<dyn ParityTrust>>) {
        self.parts.trust.set(hook);
    }

    /// True while a [`ParityTrust`] is set.
    pub fn has_parity_trust(&self) -> bool {
        self.parts.trust.get().is_some()
    }
}

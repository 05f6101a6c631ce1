//! `Volume`: an `engine::Array` plus the superblock state it must keep on disk.
//!
//! State machine (one transition per arm of [`Volume::write_state`]'s callers):
//! - clean → dirty: before the first write (or trim, write-zeroes) after assembly or after
//!   `close`, every present member's superblock is rewritten with `Dirty` and `events + 1`, and
//!   flushed, before the write is issued.
//! - dirty → clean: `close` flushes the array, then writes `Clean` and `events + 1` — unless the
//!   array was assembled dirty and has not been resynced since ([`Volume::resync`]), in which
//!   case it stays `Dirty` (its redundancy is not known to be consistent).
//!
//! Writes hold a shared "gate" for their whole duration; `close` and each `resync` step hold it
//! exclusively, so no write is in flight while the state is marked clean.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use engine::{Array, ArrayConfig, IoError};
use layout::Level;
use member::{Member, Window};
use uuid::Uuid;

use crate::plan::{AssembleError, Plan, StaleMember};
use crate::superblock::{ArrayState, RoleState, Superblock, SUPERBLOCK_OFFSET};

/// Bytes read and rewritten per step of [`Volume::resync`].
const RESYNC_STEP_BYTES_MAX: u64 = 4 << 20;

/// An I/O error of a volume.
#[derive(Debug)]
pub enum VolumeError {
    /// The array's data path failed.
    Array(IoError),
    /// Writing or flushing a superblock failed.
    Superblock { name: String, source: io::Error },
}

impl fmt::Display for VolumeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VolumeError::Array(e) => write!(f, "{e}"),
            VolumeError::Superblock { name, source } => {
                write!(f, "member {name}: cannot update the superblock: {source}")
            }
        }
    }
}

impl std::error::Error for VolumeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VolumeError::Array(e) => Some(e),
            VolumeError::Superblock { source, .. } => Some(source),
        }
    }
}

impl From<IoError> for VolumeError {
    fn from(e: IoError) -> VolumeError {
        VolumeError::Array(e)
    }
}

impl From<VolumeError> for io::Error {
    fn from(e: VolumeError) -> io::Error {
        io::Error::other(e)
    }
}

/// One role of the array, for status display.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    pub role: usize,
    /// The member serving the role, if any.
    pub name: Option<String>,
    /// `Active`, `Faulty` (failed while running) or `Missing`.
    pub state: RoleState,
}

struct MetaState {
    /// Per role: the member's own superblock as last written; `None` for missing roles.
    superblocks: Vec<Option<Superblock>>,
    events: u64,
    /// Assembled dirty and not resynced since: never mark clean.
    needs_resync: bool,
}

/// An assembled array. Thread-safe: every method takes `&self`.
pub struct Volume {
    array: Array,
    /// Per role: the whole member (for superblock updates); `None` when missing.
    members: Vec<Option<Arc<dyn Member>>>,
    level: Level,
    chunk_bytes: u64,
    name: String,
    uuid: Uuid,
    stale: Vec<StaleMember>,
    warnings: Vec<String>,
    dirty: AtomicBool,
    gate: RwLock<()>,
    meta: Mutex<MetaState>,
}

impl fmt::Debug for Volume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Volume")
            .field("name", &self.name)
            .field("uuid", &self.uuid)
            .field("array", &self.array)
            .finish()
    }
}

impl Volume {
    /// Builds the volume `plan` decided; `members` and `own` (each member's superblock) are in
    /// the order the plan indexes.
    pub(crate) fn start(
        plan: Plan,
        members: Vec<Arc<dyn Member>>,
        own: Vec<Superblock>,
    ) -> Result<Volume, AssembleError> {
        assert_eq!(members.len(), own.len());
        let sb = &plan.superblock;
        let count = sb.member_count as usize;
        assert_eq!(plan.roles.len(), count);
        let role_members: Vec<Option<Arc<dyn Member>>> = plan
            .roles
            .iter()
            .map(|index| index.map(|i| Arc::clone(&members[i])))
            .collect();
        let windows = role_members
            .iter()
            .zip(&plan.roles)
            .map(|(m, index)| {
                let (m, i) = (m.as_ref()?, (*index)?);
                let w = Window::new(Arc::clone(m), own[i].data_offset_bytes, own[i].data_bytes);
                Some(Arc::new(w) as Arc<dyn Member>)
            })
            .collect();
        let config = ArrayConfig {
            level: sb.level,
            chunk_bytes: sb.chunk_bytes,
            member_count: count,
            member_data_bytes: (0..count).map(|r| sb.roles[r].data_bytes).collect(),
        };
        let array =
            Array::new(config, windows).map_err(|e| AssembleError::Engine(e.to_string()))?;
        assert_eq!(array.size_bytes(), sb.array_size_bytes);
        let superblocks = plan
            .roles
            .iter()
            .map(|index| index.map(|i| own[i].clone()))
            .collect();
        let needs_resync = sb.state == ArrayState::Dirty;
        Ok(Volume {
            array,
            members: role_members,
            level: sb.level,
            chunk_bytes: sb.chunk_bytes,
            name: sb.name.clone(),
            uuid: sb.array_uuid,
            stale: plan.stale,
            warnings: plan.warnings,
            dirty: AtomicBool::new(false),
            gate: RwLock::new(()),
            meta: Mutex::new(MetaState {
                superblocks,
                events: sb.events,
                needs_resync,
            }),
        })
    }

    pub fn size_bytes(&self) -> u64 {
        self.array.size_bytes()
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }
    pub fn level(&self) -> Level {
        self.level
    }
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }
    /// Members left out at assembly because their events counter was behind.
    pub fn stale(&self) -> &[StaleMember] {
        &self.stale
    }
    /// Notes from assembly (members left out, risks taken).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
    /// The engine array (for checks and fault injection in tests).
    pub fn array(&self) -> &Array {
        &self.array
    }
    /// The events counter last written to the superblocks.
    pub fn events(&self) -> u64 {
        self.lock_meta().events
    }
    /// True while the on-disk state says dirty because of writes since the last `close`.
    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// The state of every role.
    pub fn member_status(&self) -> Vec<MemberStatus> {
        let present = self.array.present_snapshot();
        self.members
            .iter()
            .enumerate()
            .map(|(role, m)| MemberStatus {
                role,
                name: m.as_ref().map(|m| m.name().to_string()),
                state: match (m, present[role]) {
                    (None, _) => RoleState::Missing,
                    (Some(_), false) => RoleState::Faulty,
                    (Some(_), true) => RoleState::Active,
                },
            })
            .collect()
    }

    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), VolumeError> {
        Ok(self.array.read(offset, buf)?)
    }

    pub fn write(&self, offset: u64, buf: &[u8]) -> Result<(), VolumeError> {
        let _gate = self.begin_write()?;
        Ok(self.array.write(offset, buf)?)
    }

    pub fn trim(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        let _gate = self.begin_write()?;
        Ok(self.array.trim(offset, len)?)
    }

    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        let _gate = self.begin_write()?;
        Ok(self.array.write_zeroes(offset, len)?)
    }

    pub fn flush(&self) -> Result<(), VolumeError> {
        Ok(self.array.flush()?)
    }

    /// Clean shutdown: flushes the array and marks it clean (events + 1) on every present
    /// member. The volume stays usable; a later write marks it dirty again.
    pub fn close(&self) -> Result<(), VolumeError> {
        let _exclusive = self.gate.write().unwrap_or_else(|p| p.into_inner());
        self.array.flush()?;
        if !self.dirty.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut meta = self.lock_meta();
        let state = if meta.needs_resync {
            ArrayState::Dirty
        } else {
            ArrayState::Clean
        };
        self.write_state(&mut meta, state)?;
        self.dirty.store(false, Ordering::Release);
        Ok(())
    }

    /// Makes redundancy consistent after an unclean shutdown by reading and rewriting the whole
    /// array (full-stripe writes recompute parity; mirrored writes reach every copy). Writes
    /// wait during each step. Afterwards `close` may mark the array clean.
    pub fn resync(&self) -> Result<(), VolumeError> {
        let size = self.size_bytes();
        let step = self.resync_step_bytes();
        let mut buf = vec![0u8; step as usize];
        let mut offset = 0;
        while offset < size {
            let len = step.min(size - offset) as usize;
            drop(self.begin_write()?);
            let _exclusive = self.gate.write().unwrap_or_else(|p| p.into_inner());
            self.array.read(offset, &mut buf[..len])?;
            self.array.write(offset, &buf[..len])?;
            offset += len as u64;
        }
        self.array.flush()?;
        self.lock_meta().needs_resync = false;
        Ok(())
    }

    /// A whole number of stripes, at most `RESYNC_STEP_BYTES_MAX` (or one stripe if larger).
    fn resync_step_bytes(&self) -> u64 {
        let data_members = match self.level {
            Level::Linear | Level::Raid1 => 1,
            Level::Raid10 => 1,
            _ => self.members.len() - self.level.parity_count(),
        } as u64;
        let stripe = self.chunk_bytes * data_members;
        (RESYNC_STEP_BYTES_MAX / stripe).max(1) * stripe
    }

    /// Waits for the dirty mark to be durable before a write; returns the shared gate.
    fn begin_write(&self) -> Result<RwLockReadGuard<'_, ()>, VolumeError> {
        let gate = self.gate.read().unwrap_or_else(|p| p.into_inner());
        if !self.dirty.load(Ordering::Acquire) {
            let mut meta = self.lock_meta();
            if !self.dirty.load(Ordering::Acquire) {
                self.write_state(&mut meta, ArrayState::Dirty)?;
                self.dirty.store(true, Ordering::Release);
            }
        }
        Ok(gate)
    }

    fn lock_meta(&self) -> std::sync::MutexGuard<'_, MetaState> {
        self.meta.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `state` with `events + 1` to every present member's superblock, then flushes.
    fn write_state(&self, meta: &mut MetaState, state: ArrayState) -> Result<(), VolumeError> {
        let events = meta.events.checked_add(1).expect("events counter overflow");
        let now = crate::now_secs();
        let table = self.role_table(meta);
        for (role, member) in self.members.iter().enumerate() {
            let (Some(member), Some(sb)) = (member, meta.superblocks[role].as_mut()) else {
                continue;
            };
            sb.events = events;
            sb.state = state;
            sb.utime_secs = now;
            sb.roles = table.clone();
            let bytes = sb.encode();
            let write = member.write_at(&bytes[..], SUPERBLOCK_OFFSET);
            write.map_err(|source| VolumeError::Superblock {
                name: member.name().to_string(),
                source,
            })?;
        }
        for member in self.members.iter().flatten() {
            member.flush().map_err(|source| VolumeError::Superblock {
                name: member.name().to_string(),
                source,
            })?;
        }
        meta.events = events;
        Ok(())
    }

    /// The role table to record: each role's state as the array sees it now.
    fn role_table(&self, meta: &MetaState) -> Vec<crate::RoleEntry> {
        let template = meta
            .superblocks
            .iter()
            .flatten()
            .next()
            .expect("an assembled array has a present member");
        let mut table = template.roles.clone();
        for status in self.member_status() {
            table[status.role].state = status.state;
        }
        table
    }
}

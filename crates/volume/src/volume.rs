//! `Volume`: an `engine::Array` plus the superblock state it must keep on disk, and a
//! background worker (`tasks`) for rebuild, replace, resync and scrub.
//!
//! On-disk state (one transition per arm; see docs/DESIGN.md "Faults, rebuild and scrub"):
//! - clean → dirty: before the first write (or trim, write-zeroes) after assembly or `close`,
//!   every in-use member's superblock is rewritten with `Dirty` and `events + 1`, and flushed,
//!   before the write is issued.
//! - dirty → clean: `close` pauses background work, flushes the array, then writes `Clean`,
//!   `events + 1`, with the resync offset (if a resync is unfinished) and every rebuilding
//!   member's recovery offset, so the next assembly resumes them.
//! - member state change (fault, rebuild start/end, replace, add, remove): `events + 1` and the
//!   new role table on every in-use member and spare, before the request that saw the change
//!   completes ([`VolumeCore::settle`]): a write is never acknowledged while the superblocks
//!   still claim a faulty member is in sync.
//!
//! Writes hold a shared "gate" for their whole duration; `close` holds it exclusively, so no
//! write is in flight while the state is marked clean.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use engine::{Array, IoError, MemberHealth};
use layout::Level;
use member::{ChecksumShared, Checksummed, Member, Window};
use uuid::Uuid;

use crate::badblocks::{BadBlockWindow, BadBlocks};
use crate::bitmap::{Bitmap, WriteIntent};
use ondisk::StaleMember;

use crate::at_risk::AtRisk;
use crate::work::{Resync, Work};
use crate::{BitmapStatus, MemberStatus, SpeedLimits, TakenOver, VolumeStatus};
use ondisk::Owner;
use ondisk::{ArrayState, RoleEntry, RoleState, Superblock, UNUSED_ROLE};
use ondisk::{MAX_MEMBERS, SUPERBLOCK_OFFSET};

/// An error of a volume operation.
#[derive(Debug)]
pub enum VolumeError {
    /// The array's data path failed.
    Array(IoError),
    /// Writing or flushing a superblock failed.
    Superblock { name: String, source: io::Error },
    /// No member or role matches what was named.
    NoSuchMember { name: String },
    /// The operation is not allowed in the member's or array's current state.
    Refused { what: String, reason: String },
    /// A member given to `add` or `replace` cannot be used.
    BadMember { name: String, reason: String },
    /// Waiting for background work timed out.
    Busy { reason: String },
}

impl fmt::Display for VolumeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VolumeError::Array(e) => write!(f, "{e}"),
            VolumeError::Superblock { name, source } => {
                write!(f, "member {name}: cannot update the superblock: {source}")
            }
            VolumeError::NoSuchMember { name } => write!(
                f,
                "no member {name:?} in this array (give a member name as listed by status, or \"role N\")"
            ),
            VolumeError::Refused { what, reason } => write!(f, "cannot {what}: {reason}"),
            VolumeError::BadMember { name, reason } => write!(f, "member {name}: {reason}"),
            VolumeError::Busy { reason } => write!(f, "busy: {reason}"),
        }
    }
}

impl std::error::Error for VolumeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VolumeError::Array(e) => Some(e),
            VolumeError::Superblock { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<IoError> for VolumeError {
    fn from(e: IoError) -> VolumeError {
        VolumeError::Array(e)
    }
}

impl VolumeError {
    /// A member refused a write for lack of space (ENOSPC, EDQUOT; see [`engine::is_no_space`]).
    pub fn is_no_space(&self) -> bool {
        match self {
            VolumeError::Array(e) => e.is_no_space(),
            VolumeError::Superblock { source, .. } => engine::is_no_space(source),
            _ => false,
        }
    }
}

impl From<VolumeError> for io::Error {
    /// Keeps a lack of space's kind (an NBD client gets `ENOSPC`); anything else is `Other`.
    fn from(e: VolumeError) -> io::Error {
        let kind = match &e {
            VolumeError::Array(a) => a.kind(),
            VolumeError::Superblock { source, .. } if engine::is_no_space(source) => source.kind(),
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

/// A whole member (for its superblock) and the superblock it carries.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    pub whole: Arc<dyn Member>,
    pub sb: Superblock,
    /// The member's bad-block list, when its superblock names one.
    pub bad: Option<Arc<BadBlocks>>,
    /// The array's checksum counters and trust hook (used when `sb.checksum` is set).
    pub checksums: Arc<ChecksumShared>,
}

impl Held {
    /// The data-area view the engine uses, of `data_bytes`: with block checksums, the window
    /// checked against (and updating) the member's checksum area (`member::Checksummed`);
    /// over that the bad-block list when the member keeps one (a recorded range fails before
    /// its bytes are checked).
    pub(crate) fn window(&self, data_bytes: u64) -> Arc<dyn Member> {
        let data: Arc<dyn Member> = Arc::new(Window::new(
            Arc::clone(&self.whole),
            self.sb.data_offset_bytes,
            data_bytes,
        ));
        let data: Arc<dyn Member> = match self.sb.checksum {
            Some(at) => {
                let area = Arc::new(Window::new(
                    Arc::clone(&self.whole),
                    at.offset_bytes,
                    at.bytes,
                ));
                Arc::new(Checksummed::new(data, area, Arc::clone(&self.checksums)))
            }
            None => data,
        };
        match &self.bad {
            Some(bad) => Arc::new(BadBlockWindow::new(data, Arc::clone(bad))),
            None => data,
        }
    }
}

/// A resync not finished yet (`MetaState::resync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PendingResync {
    /// After an unclean shutdown, or the initial sync.
    pub kind: Resync,
    /// Array bytes below which redundancy is known consistent.
    pub offset: u64,
    /// A resync limited by the bitmap: array bytes from this offset are resynced in full
    /// (an initial sync or resync the crash interrupted), below it only pending regions.
    pub full_from: Option<u64>,
}

pub(crate) struct MetaState {
    /// Per role: the member holding it (in sync, rebuilding or faulty); `None` when missing.
    pub roles: Vec<Option<Held>>,
    pub spares: Vec<Held>,
    /// A replace in progress: the role and the new member (carrying a spare superblock).
    pub replacing: Option<(usize, Held)>,
    pub events: u64,
    /// The state last written.
    pub disk_state: ArrayState,
    /// The resync or initial sync still to do; `None`: redundancy is consistent everywhere.
    pub resync: Option<PendingResync>,
    /// Array-wide fields and the role table (uuids and sizes; states are derived).
    pub template: Superblock,
    /// Per role: a rebuild limited to these member ranges (a re-added member: the regions
    /// written while it was away), sorted and disjoint.
    pub partial_rebuild: Vec<Option<Vec<(u64, u64)>>>,
    /// The owner record every superblock write carries (see `lease.rs`); `None`: none.
    pub owner: Option<ondisk::Owner>,
    /// Names of the members read only when no other copy can serve (RAID 1, 10: the
    /// configuration's write-mostly list; `Volume::set_write_mostly`). Not on disk.
    pub write_mostly: Vec<String>,
}

/// An assembled array. Thread-safe: every method takes `&self`. A handle to its
/// `VolumeCore`, which runs the operations and which the background worker shares; its
/// methods (its `impl Volume` block and `forward_to_core!`) are the whole interface, the
/// engine array stays inside. Dropping the volume stops its background worker (progress is
/// kept in the superblocks).
pub struct Volume {
    core: Arc<VolumeCore>,
    worker: Option<JoinHandle<()>>,
    clearer: Option<JoinHandle<()>>,
}

impl Drop for Volume {
    fn drop(&mut self) {
        self.core.work.stop();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
        if let Some(clearer) = self.clearer.take() {
            let _ = clearer.join();
        }
    }
}

impl fmt::Debug for Volume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Volume")
            .field("name", &self.core.name)
            .field("uuid", &self.core.uuid)
            .field("array", &self.core.array)
            .finish()
    }
}

/// The shared part of a [`Volume`] (its worker thread holds it too).
pub(crate) struct VolumeCore {
    pub(crate) array: Array,
    level: Level,
    chunk_bytes: u64,
    name: String,
    uuid: Uuid,
    stale: Vec<StaleMember>,
    warnings: Vec<String>,
    dirty: AtomicBool,
    gate: RwLock<()>,
    pub(crate) meta: Mutex<MetaState>,
    persisted_epoch: AtomicU64,
    pub(crate) work: Work,
    /// Called with `(array offset, len)` after background work changed what the volume reads
    /// there (a layer above may hold the old bytes).
    data_changed: RwLock<Option<DataChangedHook>>,
    /// The write-intent bitmap, if the array has one.
    pub(crate) bitmap: Option<Bitmap>,
    /// The used-regions map, if the array has one.
    pub(crate) used: Option<crate::used::UsedMap>,
    /// Mirrored level with a resync pending: reads of units not yet resynced resync them
    /// first, so two reads never see different copies.
    pub(crate) read_fixup: AtomicBool,
    /// Array bytes below which the running resync has passed.
    pub(crate) resync_progress: AtomicU64,
    /// Where notices for the operator go (see [`Volume::set_notice_hook`]).
    notice: RwLock<Option<NoticeHook>>,
    /// When the last "out of space" notice was given, and writes refused since.
    no_space_noted: Mutex<(Option<std::time::Instant>, u64)>,
    /// Started dirty and degraded by force: the ranges at risk, until every member is in
    /// sync again (`crate::at_risk`).
    pub(crate) at_risk: Mutex<Option<crate::AtRisk>>,
    /// This core (for hooks handed to the engine, which must not keep it alive).
    pub(crate) this: std::sync::Weak<VolumeCore>,
    /// Block checksums' counters and trust hook, shared by every checksummed member window.
    pub(crate) checksums: Arc<ChecksumShared>,
}

/// Ranges at risk named in the start warning and the notice that ends them (all are in
/// `status`).
pub(crate) const AT_RISK_LISTED_IN_WARNING: usize = 16;

/// See [`Volume::set_data_changed_hook`].
pub type DataChangedHook = Box<dyn Fn(u64, u64) + Send + Sync>;

/// See [`Volume::set_notice_hook`].
pub type NoticeHook = Box<dyn Fn(&str) + Send + Sync>;

/// At most one "out of space" notice per this interval (each says how many writes were refused).
const NO_SPACE_NOTICE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

impl Volume {
    /// The volume over `core`, with its background worker and (with a bitmap) its lazy
    /// clear thread; stops and joins them when dropped.
    pub(crate) fn new(
        core: Arc<VolumeCore>,
        worker: JoinHandle<()>,
        clearer: Option<JoinHandle<()>>,
    ) -> Volume {
        Volume {
            core,
            worker: Some(worker),
            clearer,
        }
    }

    /// The shared part, for the crate's own steps (assembly).
    pub(crate) fn core(&self) -> &VolumeCore {
        &self.core
    }

    /// Checks parity (RAID 5/6) or mirrors (RAID 1/10) of the whole array, in the foreground
    /// (a scrub's check without its pacing; linear and RAID 0 report zero units). As a scrub,
    /// it passes over the units of regions the used-regions map says were never written
    /// (their member bytes mean nothing until a first write zeroes them).
    pub fn check(&self) -> Result<engine::CheckReport, IoError> {
        self.core
            .array
            .check_where(|unit| self.core.unit_used(unit))
    }

    /// Roles whose member is not readable (missing, faulty, or being rebuilt).
    pub fn missing_roles(&self) -> Vec<usize> {
        self.core.array.missing_roles()
    }

    /// Stops using role `role`'s member at once, as a member fault would: unlike [`Volume::fail`],
    /// nothing is refused (data may be lost) and no superblock is written. For tests.
    pub fn fail_member(&self, role: usize) {
        self.core.array.fail_member(role)
    }

    /// True while a RAID 5/6 sync has stripes left whose parity is not trusted yet (writes
    /// there regenerate their stripe's parity).
    pub fn parity_sync_pending(&self) -> bool {
        self.core.array.has_parity_trust()
    }

    /// RAID 5/6: how long the partial last stripe of a sequential write may wait for the write
    /// that completes it (zero: never).
    pub fn set_gather_wait(&self, wait: Duration) {
        self.core.array.set_gather_wait(wait)
    }

    /// How reads choose a copy (RAID 1, 10) and whether they go around a slow member (RAID
    /// 5, 6): `engine::ReadBalance`; status reports it.
    pub fn set_read_balance(&self, balance: engine::ReadBalance) {
        self.core.array.set_read_balance(balance)
    }

    /// What makes a member slow (see `engine::SlowPolicy`); status reports the verdicts.
    pub fn set_slow_policy(&self, policy: engine::SlowPolicy) {
        self.core.array.set_slow_policy(policy)
    }

    /// Replays the stripes logged to the journal on `member` (its superblock `sb`, checked to be
    /// this array's) onto the members; see `engine::Array::replay_journal`.
    pub fn replay_journal(
        &self,
        member: &dyn Member,
        sb: &journal::Superblock,
    ) -> Result<journal::ScanSummary, journal::JournalError> {
        self.core.array.replay_journal(member, sb)
    }

    /// Sets (or, with `None`, removes) the journal RAID 5/6 stripe writes are logged to
    /// before they are written in place.
    pub fn set_journal(&self, journal: Option<Arc<journal::Journal>>) {
        self.core.array.set_journal(journal)
    }

    /// A bound of the records a write-back apply of `len` bytes at `offset` from `sources`
    /// sources logs (zero unless RAID 5/6 with a journal set); see
    /// `engine::Array::logged_bytes_bound`.
    pub fn logged_bytes_bound(
        &self,
        offset: u64,
        len: u64,
        sources: usize,
    ) -> journal::RecordsBound {
        self.core.array.logged_bytes_bound(offset, len, sources)
    }
}

/// `Volume`'s operations that its core runs (the core is shared with the background worker,
/// so the volume is a handle to it): each listed method is `Volume`'s, calling the core's.
macro_rules! forward_to_core {
    ($($(#[$attr:meta])* fn $name:ident(&self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?;)*) => {
        impl Volume {
            $(
                $(#[$attr])*
                pub fn $name(&self $(, $arg: $ty)*) $(-> $ret)? {
                    self.core.$name($($arg),*)
                }
            )*
        }
    };
}

forward_to_core! {
    fn size_bytes(&self) -> u64;
    /// Marks the members named write-mostly (RAID 1, 10: read only when no other copy can
    /// serve; a spare named is marked when it takes a role); refused on other levels and for
    /// a name that is no member or spare of the array. Replaces the earlier list.
    fn set_write_mostly(&self, names: &[String]) -> Result<(), VolumeError>;
    fn name(&self) -> &str;
    fn uuid(&self) -> Uuid;
    fn level(&self) -> Level;
    fn chunk_bytes(&self) -> u64;
    /// Members left out at assembly because their events counter was behind.
    fn stale(&self) -> &[StaleMember];
    /// Notes from assembly (members left out, risks taken).
    fn warnings(&self) -> &[String];
    /// The array's shape: level, chunk, members, and what depends on the level.
    fn geometry(&self) -> &layout::Geometry;
    /// The events counter last written to the superblocks.
    fn events(&self) -> u64;
    /// True while the on-disk state says dirty because of writes since the last `close`.
    fn is_dirty(&self) -> bool;
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), VolumeError>;
    fn write(&self, offset: u64, buf: &[u8]) -> Result<(), VolumeError>;
    /// A write-back apply: [`Volume::write`] of `pieces` (sorted, disjoint), bytes the
    /// journal's `ArrayWrite` records `sources` hold already; RAID 5/6 pieces sharing a stripe
    /// are written together (see `engine::Array::write_applied`).
    fn write_applied(
        &self,
        pieces: &[(u64, &[u8])],
        sources: &[engine::DataSource]
    ) -> Result<(), VolumeError>;
    fn trim(&self, offset: u64, len: u64) -> Result<(), VolumeError>;
    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), VolumeError>;
    /// Marks the array dirty (superblocks Dirty, events + 1, flushed on every in-use member)
    /// if it is not already, as the first write after assembly or `close` would, without
    /// writing any data. A write-back journal calls this before it acknowledges anything, so
    /// that a clean superblock state always means "the journal is drained"; after a replay
    /// (written below the volume) it also lets `close` mark the array clean.
    fn mark_dirty(&self) -> Result<(), VolumeError>;
    fn flush(&self) -> Result<(), VolumeError>;
    /// Clean shutdown: pauses background work, flushes the array and marks it clean
    /// (dirty if units a lack of space left half-written cannot be resynced yet, while the
    /// resync after a crash has not finished, or while ranges are at risk after a forced
    /// dirty and degraded start; events + 1) with the
    /// progress of unfinished resyncs and rebuilds, so the next assembly
    /// resumes them. The volume stays usable; a later write marks it dirty again and resumes
    /// background work.
    fn close(&self) -> Result<(), VolumeError>;
    /// Makes redundancy consistent (as after an unclean shutdown): asks the background worker
    /// for a resync if none is pending and waits for it to finish.
    fn resync(&self) -> Result<(), VolumeError>;
    /// Registers `hook`, called with `(array offset, len)` whenever a scrub repair or a resync
    /// changes what the volume reads in that range: a RAID 6 data block fixed from the
    /// syndrome, or a mirror copy overwritten by the first copy. (Rebuilds, parity repairs and
    /// read-error rewrites never change what is read.) For a read cache above the volume.
    fn set_data_changed_hook(&self, hook: DataChangedHook);
    /// The journal given as `AssembleOptions::journal_replay` has been replayed: background
    /// work (rebuild, resync), held until now, may start.
    fn journal_replayed(&self);
    /// Registers `hook`, called with one line for the operator when something needs their
    /// attention that is not an error of a request: a member's filesystem is full (at most
    /// one line every 10 s, naming the member, the filesystem and the writes refused).
    fn set_notice_hook(&self, hook: NoticeHook);
    /// How long a region must see no write before its bit is cleared (default 5 s).
    fn set_bitmap_idle(&self, idle: Duration);
    /// The bitmap's state, if the array has one.
    fn bitmap_status(&self) -> Option<BitmapStatus>;
    /// Renews the lease on every member. Refuses, writing nothing, when a member's record
    /// names another process: it took the array over.
    fn renew_owner(&self) -> Result<(), TakenOver>;
    /// Clears the owner record (a clean stop), except on members another process has since
    /// recorded itself on.
    fn release_owner(&self);
    /// The owner this volume records, if any.
    fn owner(&self) -> Option<Owner>;
    /// Marks a member faulty (by name or "role N"). Refused when the array would lose data.
    fn fail(&self, member: &str) -> Result<(), VolumeError>;
    /// Takes a faulty member, a spare or a replacement target out of the array. An active
    /// member is refused: fail it first.
    fn remove(&self, member: &str) -> Result<(), VolumeError>;
    /// The member this volume holds (in a role, faulty or not, as a spare or as a replacement)
    /// that is the storage `identity` names: a member given back to `add` after `fail` is
    /// the one the array still holds, and cannot be opened a second time while held.
    fn held_member(&self, identity: &member::Identity) -> Option<Arc<dyn Member>>;
    /// Takes the spare `name` out of this array (the other members' superblocks no longer
    /// list it, as `remove` does) and erases its superblock, so another array's `add` takes
    /// it as a blank device: a spare lent within a spare group. The handle is returned still
    /// open (its lock held). Refused for anything but a spare.
    fn take_spare(&self, name: &str) -> Result<Arc<dyn Member>, VolumeError>;
    /// Each spare's name and whole size in bytes.
    fn spare_sizes(&self) -> Vec<(String, u64)>;
    /// The size in bytes a whole member needs to take any role of this array (`add` refuses
    /// a smaller one).
    fn member_bytes_needed(&self) -> u64;
    /// Adds a member: it receives a spare superblock of this array and becomes a spare, or
    /// the target of a rebuild when a role is missing or faulty (the worker starts it).
    /// A member coming back to the role it held (faulty or missing) is re-added with a rebuild
    /// of only the bitmap's dirty regions when the bitmap bounds what it missed; otherwise a
    /// faulty holder is taken out of its role first and rebuilt in full as a spare.
    fn add(&self, member: Arc<dyn Member>) -> Result<(), VolumeError>;
    /// Starts copying `member`'s role onto `with` while `member` keeps serving; the worker
    /// then gives `with` the role. Redundancy never drops.
    fn replace(&self, member: &str, with: Arc<dyn Member>) -> Result<(), VolumeError>;
    /// Starts a scrub (check, or with `repair` make consistent) in the background; the report
    /// is in `status().last_scrub`.
    fn scrub(&self, repair: bool) -> Result<(), VolumeError>;
    /// `Some(reason)`: scrubs, resyncs after a crash and initial syncs wait (the daemon's
    /// background window is closed): a running one returns after its current step, keeping
    /// its position, and `status().task` shows it paused with `reason`; rebuilds, replaces and
    /// operator actions go on. `None`: they go on from where they stopped.
    fn defer_background(&self, reason: Option<String>);
    /// Changes the background rate limits (takes effect at the next step). Zero counts as 1
    /// byte/s and a minimum above the maximum as the maximum, so the maximum always holds.
    fn set_speed_limits(&self, limits: SpeedLimits);
    fn speed_limits(&self) -> SpeedLimits;
    /// Changes when members are declared faulty.
    fn set_fault_policy(&self, policy: engine::FaultPolicy);
    /// Waits until no background work runs or is due; false on timeout.
    fn wait_idle(&self, timeout: Duration) -> bool;
    /// The state of every role, in order (spares and replacement targets are in `status`).
    fn member_status(&self) -> Vec<MemberStatus>;
    /// Everything about the array, for display.
    fn status(&self) -> VolumeStatus;
    /// The I/O counters of each role's member operations now, by role.
    fn member_io_stats(&self) -> Vec<iostats::IoSnapshot>;
}

impl VolumeCore {
    /// The shared part of a volume over `array`, in the state `meta` describes (its template
    /// names the array). No thread runs yet: `assemble` starts them.
    pub(crate) fn new(
        array: Array,
        meta: MetaState,
        (bitmap, used): (Option<Bitmap>, Option<crate::used::UsedMap>),
        at_risk: Option<AtRisk>,
        stale: Vec<StaleMember>,
        warnings: Vec<String>,
        checksums: Arc<ChecksumShared>,
    ) -> Arc<VolumeCore> {
        let sb = meta.template.clone();
        let resync_offset = meta.resync.map(|r| r.offset);
        Arc::new_cyclic(|this| VolumeCore {
            this: this.clone(),
            checksums,
            persisted_epoch: AtomicU64::new(array.state_epoch()),
            array,
            level: sb.level,
            chunk_bytes: sb.chunk_bytes,
            name: sb.name,
            uuid: sb.array_uuid,
            stale,
            warnings,
            dirty: AtomicBool::new(false),
            gate: RwLock::new(()),
            read_fixup: AtomicBool::new(resync_offset.is_some() && sb.level.is_mirrored()),
            resync_progress: AtomicU64::new(resync_offset.unwrap_or(0)),
            meta: Mutex::new(meta),
            work: Work::new(),
            data_changed: RwLock::new(None),
            bitmap,
            used,
            notice: RwLock::new(None),
            no_space_noted: Mutex::new((None, 0)),
            at_risk: Mutex::new(at_risk),
        })
    }
}

// The `pub(crate)` methods here that `Volume` offers are documented where it lists them
// (`forward_to_core!` in volume.rs).
impl VolumeCore {
    pub(crate) fn size_bytes(&self) -> u64 {
        self.array.size_bytes()
    }
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
    pub(crate) fn uuid(&self) -> Uuid {
        self.uuid
    }
    pub(crate) fn level(&self) -> Level {
        self.level
    }
    pub(crate) fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }
    pub(crate) fn stale(&self) -> &[StaleMember] {
        &self.stale
    }
    pub(crate) fn warnings(&self) -> &[String] {
        &self.warnings
    }
    pub(crate) fn geometry(&self) -> &layout::Geometry {
        self.array.geometry()
    }
    pub(crate) fn events(&self) -> u64 {
        self.lock_meta().events
    }
    pub(crate) fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// Runs one client request with one deadline for every member call it makes (the data
    /// batches, their retries in `Array::recovering`, the dirty mark, bitmap and superblock
    /// writes after a fault): with `serve --local-io-deadline`, a call starting past it gets a
    /// quarter of the timeout (`member::Detached`), so members stuck in one request cost one
    /// timeout and a quarter per further member, not one timeout each.
    fn within_deadline<R>(&self, f: impl FnOnce() -> R) -> R {
        let deadline = std::time::Instant::now() + self.array.fault_policy().io_timeout;
        member::with_deadline(deadline, f)
    }

    pub(crate) fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), VolumeError> {
        self.within_deadline(|| {
            if self.read_fixup.load(Ordering::Acquire) && !buf.is_empty() {
                self.resync_before_read(offset, buf.len() as u64)?;
            }
            let result = match &self.used {
                Some(used) if !buf.is_empty() => self.read_used(used, offset, buf),
                _ => self.array.read(offset, buf),
            };
            self.settle()?;
            Ok(result?)
        })
    }

    pub(crate) fn write(&self, offset: u64, buf: &[u8]) -> Result<(), VolumeError> {
        self.changing(offset, buf.len() as u64, true, || {
            self.array.write(offset, buf)
        })
    }

    /// The write-intent bits are set over the pieces' whole envelope.
    pub(crate) fn write_applied(
        &self,
        pieces: &[(u64, &[u8])],
        sources: &[engine::DataSource],
    ) -> Result<(), VolumeError> {
        let (Some(&(offset, _)), Some(&(last, tail))) = (pieces.first(), pieces.last()) else {
            return Ok(());
        };
        let len = last + tail.len() as u64 - offset;
        self.changing(offset, len, true, || {
            self.array.write_applied(pieces, sources)
        })
    }

    pub(crate) fn trim(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        match &self.used {
            Some(used) if len > 0 => {
                self.discard_used(used, offset, len, |o, l| self.array.trim(o, l))
            }
            _ => self.changing(offset, len, false, || self.array.trim(offset, len)),
        }
    }

    pub(crate) fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        match &self.used {
            Some(used) if len > 0 => {
                self.discard_used(used, offset, len, |o, l| self.array.write_zeroes(o, l))
            }
            _ => self.changing(offset, len, false, || self.array.write_zeroes(offset, len)),
        }
    }

    /// Runs `change` (a write, trim or write-zeroes of `[offset, offset + len)`) as every change
    /// of the array's contents runs: within the request's deadline, under the shared write
    /// gate, with the write-intent bits set before (and with `sets_used`, a write, its regions
    /// marked used) and the superblocks settled after; a refusal for lack of space (of the bits
    /// or the data) is told to the operator.
    pub(crate) fn changing(
        &self,
        offset: u64,
        len: u64,
        sets_used: bool,
        change: impl FnOnce() -> Result<(), engine::IoError>,
    ) -> Result<(), VolumeError> {
        self.within_deadline(|| {
            let _gate = self.begin_write()?;
            let intent = self
                .intend(offset, len)
                .inspect_err(|e| self.note_no_space(e))?;
            let used = match sets_used {
                true => self
                    .use_regions(offset, len)
                    .inspect_err(|e| self.note_no_space(e))?,
                false => None,
            };
            let result = change();
            drop(used);
            drop(intent);
            self.settle()?;
            let result = result.map_err(VolumeError::from);
            if let Err(e) = &result {
                self.note_no_space(e);
            }
            result
        })
    }

    pub(crate) fn mark_dirty(&self) -> Result<(), VolumeError> {
        self.within_deadline(|| {
            let _gate = self.begin_write()?;
            self.settle()
        })
    }

    pub(crate) fn flush(&self) -> Result<(), VolumeError> {
        self.within_deadline(|| {
            let result = self.array.flush();
            self.settle()?;
            Ok(result?)
        })
    }

    pub(crate) fn close(&self) -> Result<(), VolumeError> {
        self.work.pause();
        let _exclusive = self.gate.write().unwrap_or_else(|p| p.into_inner());
        self.array.flush()?;
        // Units a lack of space left half-written are resynced now if there is space again;
        // those left keep the array marked dirty (and their bitmap bits set), so the next
        // assembly resyncs them.
        while let Some(Ok(found)) = self.array.resync_next_unsynced() {
            if !found.checked {
                break;
            }
        }
        // A forced dirty and degraded start whose missing members are not rebuilt yet stays
        // dirty too: the next start must again be forced, and reports the ranges at risk.
        let unsynced = self.array.unsynced_units() > 0 || self.at_risk().is_some();
        self.clear_bitmap_at_close()?;
        let mut meta = self.lock_meta();
        let progress = meta.resync.is_some()
            || meta
                .roles
                .iter()
                .flatten()
                .any(|h| h.sb.recovery_offset_bytes.is_some());
        let changed = self.array.state_epoch() != self.persisted();
        // The disk may say Dirty without a write in this session: assembled after a crash (and
        // resynced since) or rewritten below the volume by a journal replay.
        let disk_dirty = meta.disk_state != ArrayState::Clean;
        if !self.dirty.load(Ordering::Acquire) && !progress && !changed && !disk_dirty {
            return Ok(());
        }
        // So does a resync after a crash that has not finished: the stripes it has not reached
        // may hold parity the crash left stale, and a start without a member must still see
        // the write hole (its progress is kept, but a dirty start resyncs from the bitmap, or
        // from 0 without one).
        let crash_resync = meta.resync.is_some_and(|r| r.kind == Resync::AfterCrash);
        let keep_dirty = unsynced || crash_resync;
        meta.disk_state = match keep_dirty {
            true => ArrayState::Dirty,
            false => ArrayState::Clean,
        };
        self.write_superblocks(&mut meta)?;
        self.dirty.store(keep_dirty, Ordering::Release);
        Ok(())
    }

    pub(crate) fn resync(&self) -> Result<(), VolumeError> {
        {
            let mut meta = self.lock_meta();
            if meta.resync.is_none() && self.level.has_redundancy() {
                meta.resync = Some(PendingResync {
                    kind: Resync::Initial,
                    offset: 0,
                    full_from: None,
                });
                self.distrust_unsynced_parity(0, None);
            }
        }
        self.work.resume();
        self.work.notify();
        while self.lock_meta().resync.is_some() {
            if self.work.stopped() {
                return Err(VolumeError::Busy {
                    reason: "the volume is shutting down".into(),
                });
            }
            let health = self.array.health_snapshot();
            let all_in_sync = health.iter().all(|h| *h == MemberHealth::InSync);
            if !all_in_sync && !self.work.is_busy() && self.next_task().is_none() {
                return Err(VolumeError::Refused {
                    what: "resync".into(),
                    reason: "a member is missing, faulty or rebuilding; the resync runs once \
                             every member is in sync"
                        .into(),
                });
            }
            self.work.wait_change(std::time::Duration::from_millis(50));
        }
        Ok(())
    }

    pub(crate) fn set_data_changed_hook(&self, hook: DataChangedHook) {
        *self.data_changed.write().unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    pub(crate) fn journal_replayed(&self) {
        self.work.release_replay_hold();
    }

    /// The ranges a forced dirty and degraded start put at risk, while some member is not in
    /// sync yet.
    pub fn at_risk(&self) -> Option<crate::AtRisk> {
        self.at_risk
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every member is in sync again: the stripes at risk have been recomputed by the rebuild.
    /// Says so (once) and stops reporting them.
    pub(crate) fn at_risk_rebuilt(&self) {
        let in_sync = self
            .array
            .health_snapshot()
            .iter()
            .all(|h| *h == MemberHealth::InSync);
        if !in_sync {
            return;
        }
        let risk = self
            .at_risk
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(risk) = risk {
            self.notice(&format!(
                "array \"{}\": every member is rebuilt, so the stripes at risk since the \
                 dirty and degraded start are consistent again; they hold what was reconstructed \
                 there, which may be wrong: {}",
                self.name,
                risk.describe(AT_RISK_LISTED_IN_WARNING)
            ));
        }
    }

    /// Each checksum mismatch found is told to the operator (the first 100, then every
    /// 1000th: a failing disk must not flood the log), with the count so far.
    pub(crate) fn watch_checksums(&self) {
        let core = self.this.clone();
        let told = AtomicU64::new(0);
        self.checksums.set_on_mismatch(Box::new(move |m| {
            let n = told.fetch_add(1, Ordering::Relaxed) + 1;
            if n > 100 && !n.is_multiple_of(1000) {
                return;
            }
            if let Some(core) = core.upgrade() {
                core.notice(&format!(
                    "array \"{}\": {m} ({n} found since the array was assembled)",
                    core.name
                ));
            }
        }));
    }

    pub(crate) fn set_notice_hook(&self, hook: NoticeHook) {
        *self.notice.write().unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    fn notice(&self, line: &str) {
        let hook = self.notice.read().unwrap_or_else(|p| p.into_inner());
        if let Some(hook) = hook.as_ref() {
            hook(line);
        }
    }

    /// A write refused for lack of space (by a member's data area, or its bitmap or superblock
    /// area): told to the operator, rate-limited, with the member and the filesystem that is
    /// full.
    fn note_no_space(&self, e: &VolumeError) {
        if !e.is_no_space() {
            return;
        }
        let mut noted = self
            .no_space_noted
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        noted.1 += 1;
        if noted
            .0
            .is_some_and(|t| t.elapsed() < NO_SPACE_NOTICE_INTERVAL)
        {
            return;
        }
        let refused = std::mem::take(&mut noted.1);
        noted.0 = Some(std::time::Instant::now());
        drop(noted);
        let name = match e {
            VolumeError::Array(engine::IoError::Member { role, .. }) => self.lock_meta().roles
                [*role]
                .as_ref()
                .map(|h| h.whole.name().to_string())
                .unwrap_or_default(),
            VolumeError::Superblock { name, .. } => name.clone(),
            _ => String::new(),
        };
        let place = crate::status::FilesystemStatus::of_member(&name)
            .map(|fs| format!(" ({fs})"))
            .unwrap_or_default();
        self.notice(&format!(
            "array \"{}\": member {name} is out of space{place}: {refused} write(s) refused \
             with \"no space left on device\" since the last notice; no member was failed. Free \
             space there (or raise the quota) and writes succeed again; the stripes those writes \
             left half-written are then resynced",
            self.name
        ));
    }

    pub(crate) fn data_changed(&self, offset: u64, len: u64) {
        let hook = self.data_changed.read().unwrap_or_else(|p| p.into_inner());
        if let Some(hook) = hook.as_ref() {
            hook(offset, len);
        }
    }

    /// Waits for the dirty mark to be durable before a write; returns the shared gate.
    pub(crate) fn begin_write(&self) -> Result<RwLockReadGuard<'_, ()>, VolumeError> {
        let gate = self.gate.read().unwrap_or_else(|p| p.into_inner());
        if !self.dirty.load(Ordering::Acquire) {
            let mut meta = self.lock_meta();
            if !self.dirty.load(Ordering::Acquire) {
                meta.disk_state = ArrayState::Dirty;
                self.write_superblocks(&mut meta)?;
                self.dirty.store(true, Ordering::Release);
                self.work.resume();
            }
        }
        Ok(gate)
    }

    /// Counts a write to `[offset, offset + len)` in the bitmap and makes its regions' bits
    /// durable first. A member whose bitmap cannot be written is failed (if the array keeps
    /// its data without it) and the bits are written to the others.
    pub(crate) fn intend(
        &self,
        offset: u64,
        len: u64,
    ) -> Result<Option<WriteIntent<'_>>, VolumeError> {
        let Some(bitmap) = &self.bitmap else {
            return Ok(None);
        };
        if len == 0 {
            return Ok(None);
        }
        let regions = bitmap.regions_of(offset, len);
        let mut tries = 0;
        loop {
            let e = match bitmap.start_write(regions.clone(), || self.array.writable_snapshot()) {
                Ok(intent) => return Ok(Some(intent)),
                Err(e) => e,
            };
            tries += 1;
            self.map_write_failed(e, "bitmap", tries)?;
        }
    }

    /// A bitmap or used-map block could not be written to a member: that member is failed
    /// (if the array keeps its data without it) and the caller tries again (`Ok`); a lack of
    /// space, or too many tries, fails the request instead (nothing was written).
    pub(crate) fn map_write_failed(
        &self,
        e: crate::bitmap::BitmapWriteError,
        map: &str,
        tries: usize,
    ) -> Result<(), VolumeError> {
        let reason = engine::FaultReason::WriteError(format!("{map}: {}", e.source));
        // A lack of space fails the write (nothing was written), not the member.
        let no_space = engine::is_no_space(&e.source);
        if no_space {
            self.array.count_no_space(e.role);
        }
        if no_space || tries > MAX_MEMBERS || !self.array.try_fail_member(e.role, reason) {
            return Err(VolumeError::Superblock {
                name: e.name,
                source: e.source,
            });
        }
        Ok(())
    }

    pub(crate) fn lock_meta(&self) -> MutexGuard<'_, MetaState> {
        self.meta.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn persisted(&self) -> u64 {
        self.persisted_epoch.load(Ordering::Acquire)
    }

    /// If a member changed state since the superblocks were last written, records it
    /// (events + 1) before the caller's request completes, and wakes the background worker.
    pub(crate) fn settle(&self) -> Result<(), VolumeError> {
        if self.array.state_epoch() == self.persisted() {
            return Ok(());
        }
        let mut meta = self.lock_meta();
        if self.array.state_epoch() != self.persisted() {
            self.write_superblocks(&mut meta)?;
        }
        drop(meta);
        self.work.notify();
        Ok(())
    }

    /// Writes every in-use member's and spare's superblock with `events + 1`, the current
    /// state, role table and offsets, then flushes them. A member whose superblock cannot be
    /// written is failed (if the array survives without it).
    pub(crate) fn write_superblocks(&self, meta: &mut MetaState) -> Result<(), VolumeError> {
        for _ in 0..MAX_MEMBERS {
            let epoch = self.array.state_epoch();
            self.write_superblocks_once(meta)?;
            self.persisted_epoch.store(epoch, Ordering::Release);
            if self.array.state_epoch() == epoch {
                return Ok(());
            }
        }
        Ok(())
    }

    fn write_superblocks_once(&self, meta: &mut MetaState) -> Result<(), VolumeError> {
        // The engine dropped a replacement whose write failed (it missed that write): the
        // replace ends on disk too, before the request that saw the error completes.
        if let Some((role, _)) = &meta.replacing {
            if self.array.replacement(*role).is_none() {
                meta.replacing = None;
            }
        }
        let events = meta.events.checked_add(1).expect("events counter overflow");
        let now = ondisk::now_secs();
        let table = self.role_table(meta);
        let health = self.array.health_snapshot();
        let (state, resync) = (meta.disk_state, meta.resync.map(|r| r.offset));
        let owner = meta.owner.clone().map(|mut o| {
            o.renewed_secs = now;
            o
        });
        let mut targets: Vec<(Option<usize>, &mut Held)> = Vec::new();
        for (role, held) in meta.roles.iter_mut().enumerate() {
            if let (Some(held), true) = (held.as_mut(), health[role].writable()) {
                targets.push((Some(role), held));
            }
        }
        targets.extend(meta.spares.iter_mut().map(|h| (None, h)));
        targets.extend(meta.replacing.iter_mut().map(|(_, h)| (None, h)));
        for held in targets.iter_mut().map(|(_, h)| &mut **h) {
            held.sb.events = events;
            held.sb.state = state;
            held.sb.utime_secs = now;
            held.sb.roles = table.clone();
            held.sb.set_resync_offset(resync);
            held.sb.sync_replace_feature();
            held.sb.set_owner(owner.clone());
        }
        // One member at a time, each written and flushed before the next is written: a power
        // cut tears at most one superblock, which assembly rebuilds from its first sector and
        // its peers (`ondisk::read_for_assembly`); written in parallel, a cut could tear them
        // all. Then failures are judged.
        let results: Vec<(Option<usize>, String, io::Result<()>)> = targets
            .iter()
            .map(|(role, held)| {
                // On this thread, so under the request's deadline: a member stalled here
                // must not hold the request (and the metadata mutex) for a timeout of its own.
                let whole = &held.whole;
                let written = (whole.write_at(&held.sb.encode()[..], SUPERBLOCK_OFFSET))
                    .and_then(|()| whole.flush());
                (*role, whole.name().to_string(), written)
            })
            .collect();
        for (role, name, result) in results {
            let Err(source) = result else { continue };
            // A lack of space is not the member's fault: the request fails instead. The
            // member's superblock is then one event behind, which assembly accepts (margin),
            // and the next write of the superblocks writes the same events again.
            let no_space = engine::is_no_space(&source);
            if let (true, Some(r)) = (no_space, role) {
                self.array.count_no_space(r);
            }
            let failed = !no_space
                && role.is_some_and(|r| {
                    self.array
                        .try_fail_member(r, engine::FaultReason::WriteError(source.to_string()))
                });
            if !failed {
                return Err(VolumeError::Superblock { name, source });
            }
        }
        meta.template.roles = table;
        meta.template.events = events;
        meta.events = events;
        Ok(())
    }

    /// The role table to record: uuids and sizes of the members holding each role, their
    /// state as the engine sees it, then the spares.
    fn role_table(&self, meta: &MetaState) -> Vec<RoleEntry> {
        let mut table = meta.template.roles.clone();
        let health = self.array.health_snapshot();
        for (role, entry) in table.iter_mut().enumerate().take(health.len()) {
            entry.state = match health[role] {
                MemberHealth::InSync | MemberHealth::Recovering => RoleState::Active,
                MemberHealth::Faulty => RoleState::Faulty,
                MemberHealth::Missing => RoleState::Missing,
            };
            if let Some(held) = &meta.roles[role] {
                entry.member_uuid = held.sb.member_uuid;
            }
        }
        let spares = meta
            .spares
            .iter()
            .map(|h| (h, None))
            .chain((meta.replacing.iter()).map(|(role, h)| (h, Some(*role as u32))));
        let mut slot = health.len();
        for entry in table.iter_mut().skip(health.len()) {
            *entry = UNUSED_ROLE;
        }
        for (held, replacing) in spares {
            assert!(slot < MAX_MEMBERS, "more spares than role-table slots");
            table[slot] = RoleEntry {
                member_uuid: held.sb.member_uuid,
                data_bytes: held.sb.data_bytes,
                state: RoleState::Spare,
                replacing,
            };
            slot += 1;
        }
        table
    }
}

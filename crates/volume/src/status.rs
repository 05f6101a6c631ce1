//! What `Volume::status` reports: plain data with stable snake_case field names (serde), for
//! the admin endpoint and the CLI, which encode and decode these same types (no copy to drift);
//! and [`TakenOver`], what a lease renewal reports when another process owns the array.

use layout::Level;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::at_risk::AtRisk;

pub use engine::FaultPolicy;

/// Background I/O rate limits, per member (like md's speed_limit_min / _max).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpeedLimits {
    /// Kept even while clients are busy.
    pub min_bytes_per_sec: u64,
    /// Never exceeded.
    pub max_bytes_per_sec: u64,
}

impl Default for SpeedLimits {
    fn default() -> SpeedLimits {
        SpeedLimits {
            min_bytes_per_sec: 1 << 20,
            max_bytes_per_sec: 200 << 20,
        }
    }
}

/// The array as /proc/mdstat would describe it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrayHealth {
    /// Every member in sync, no writes since the last clean close.
    Clean,
    /// Every member in sync, written since assembly (marked dirty on disk).
    Active,
    /// A member is missing or faulty and nothing is rebuilding it.
    Degraded,
    /// Redundancy is being recomputed (after an unclean shutdown, or an initial sync).
    Resyncing,
    /// A member is being rebuilt or replaced.
    Rebuilding,
    /// Too many members lost: some data cannot be served.
    Failed,
}

/// One member's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberState {
    Active,
    Faulty,
    Missing,
    Rebuilding,
    Spare,
    /// The old member of a role being replaced (still serving).
    Replacing,
    /// The new member a replace is filling.
    ReplacementTarget,
}

/// One member (or empty role) of the array.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    /// `None` for spares.
    pub role: Option<usize>,
    /// As given by the user; empty for a missing role.
    pub name: String,
    pub state: MemberState,
    pub read_errors: u64,
    pub write_errors: u64,
    pub timeouts: u64,
    /// Writes the member refused for lack of space (ENOSPC, EDQUOT): not faults, the
    /// member stays in the array and those writes failed with "no space" to the client.
    pub no_space_errors: u64,
    /// Calls to a local member abandoned at their deadline and still stuck in the kernel
    /// (each holds a thread until it returns; see `member::Detached`).
    pub stuck_calls: u64,
    /// Calls to a local member abandoned at their deadline since it was opened.
    pub abandoned_calls: u64,
    /// After such a refusal, the filesystem holding a file member, as it is now.
    pub filesystem: Option<FilesystemStatus>,
    /// Rebuilding members: data-area bytes rebuilt so far.
    pub rebuild_offset_bytes: Option<u64>,
    /// Read only when no other copy can serve (RAID 1, 10; the configuration's
    /// `write_mostly`).
    #[serde(default)]
    pub write_mostly: bool,
    /// Judged slow: its latency an outlier against its peers' over the last windows; reads
    /// are served around it where redundancy allows (`engine::SlowPolicy`).
    #[serde(default)]
    pub slow: bool,
    /// Its mean latency per operation over the last window that judged it (one with enough
    /// operations), µs (`None`: none yet).
    #[serde(default)]
    pub latency_us: Option<u64>,
    /// The median of the other members' over the same window, µs.
    #[serde(default)]
    pub peers_latency_us: Option<u64>,
}

impl MemberStatus {
    /// Member `name` in `state`, with no error, stuck call, filesystem or progress to report.
    pub fn new(role: Option<usize>, name: impl Into<String>, state: MemberState) -> MemberStatus {
        MemberStatus {
            role,
            name: name.into(),
            state,
            read_errors: 0,
            write_errors: 0,
            timeouts: 0,
            no_space_errors: 0,
            stuck_calls: 0,
            abandoned_calls: 0,
            filesystem: None,
            rebuild_offset_bytes: None,
            write_mostly: false,
            slow: false,
            latency_us: None,
            peers_latency_us: None,
        }
    }
}

/// The filesystem under a file member (see [`MemberStatus::filesystem`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesystemStatus {
    pub mount_point: String,
    pub fs_type: String,
    pub free_bytes: u64,
    pub size_bytes: u64,
}

impl FilesystemStatus {
    /// The filesystem holding the member named `name` when that is a regular file's path.
    pub fn of_member(name: &str) -> Option<FilesystemStatus> {
        let path = std::path::Path::new(name);
        if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
            return None;
        }
        let fs = member::filesystem_of(path).ok()?;
        Some(FilesystemStatus {
            mount_point: fs.mount_point.display().to_string(),
            fs_type: fs.fs_type,
            free_bytes: fs.free_bytes,
            size_bytes: fs.size_bytes,
        })
    }
}

impl FilesystemStatus {
    /// The mount point, with the filesystem's type when known: `/mnt/t (tmpfs)`.
    pub fn place(&self) -> String {
        match self.fs_type.is_empty() {
            true => self.mount_point.clone(),
            false => format!("{} ({})", self.mount_point, self.fs_type),
        }
    }
}

impl std::fmt::Display for FilesystemStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "filesystem {}: {} free of {}",
            self.place(),
            mib(self.free_bytes),
            mib(self.size_bytes)
        )
    }
}

/// 104857600 → "100.0 MiB" (one decimal; small sizes in bytes).
fn mib(bytes: u64) -> String {
    match bytes {
        0..=1023 => format!("{bytes} B"),
        _ => format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64),
    }
}

/// A kind of background work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    Rebuild,
    Replace,
    Scrub,
    Repair,
    Resync,
    InitialSync,
}

/// The background work in progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStatus {
    pub kind: TaskKind,
    pub role: Option<usize>,
    pub done_bytes: u64,
    pub total_bytes: u64,
    /// Recent rate (per member).
    pub bytes_per_sec: u64,
    pub eta_secs: Option<u64>,
    /// A rebuild or replace that copies only the regions holding data (the used-regions map):
    /// the role's whole data area, of which `total_bytes` are copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub of_member_bytes: Option<u64>,
    /// Why the task waits, keeping its position (`outside the background window
    /// 19:00-05:00`); `None` while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<String>,
}

impl TaskStatus {
    /// A running (not paused) task of `kind` on `role`, `done_bytes` of `total_bytes` done.
    pub fn new(
        kind: TaskKind,
        role: Option<usize>,
        done_bytes: u64,
        total_bytes: u64,
        bytes_per_sec: u64,
        eta_secs: Option<u64>,
    ) -> TaskStatus {
        TaskStatus {
            kind,
            role,
            done_bytes,
            total_bytes,
            bytes_per_sec,
            eta_secs,
            of_member_bytes: None,
            paused: None,
        }
    }
}

/// Where a scrub found a mismatch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MismatchLocation {
    /// RAID 5/6 stripe, RAID 1 row, RAID 10 logical chunk.
    pub stripe: u64,
    pub array_offset: u64,
    pub role: usize,
    pub member: String,
    /// Offset in the member's data area of the first differing byte.
    pub member_offset: u64,
    /// `p`, `q`, `mirror` or `data` (RAID 6: the syndrome named the data member).
    pub kind: String,
}

/// Most mismatches listed in a scrub report (all are counted).
pub const SCRUB_MISMATCHES_LISTED_MAX: usize = 100;

/// The outcome of the last (or running) scrub.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubReport {
    pub stripes_checked: u64,
    pub mismatches: u64,
    pub repaired: u64,
    pub first_mismatches: Vec<MismatchLocation>,
    pub finished: bool,
    /// Units the scrub could not compare because they hold ranges no member and no
    /// redundancy can provide (a read error or a checksum mismatch in every copy): each such
    /// range was recorded in the bad-block list of every member that cannot read it, and the
    /// scrub went on.
    #[serde(default)]
    pub units_lost: u64,
    /// Those ranges (the first [`SCRUB_MISMATCHES_LISTED_MAX`]): array offset, member and
    /// member offset, as `bad_blocks` lists them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<BadBlockStatus>,
}

/// The bitmap as `status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BitmapStatus {
    /// Array bytes per bit.
    pub region_bytes: u64,
    pub regions: u64,
    /// Regions whose bit is set on the members now.
    pub dirty_regions: u64,
    /// Regions dirty at an unclean shutdown and not resynced yet.
    pub resync_pending_regions: u64,
    /// Bitmap block writes issued so far (per member).
    pub block_writes: u64,
}

/// Block checksums as `status` shows them (since the array was assembled).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChecksumStatus {
    /// The algorithm (`crc32c`).
    pub algorithm: String,
    /// Blocks read and checked.
    pub verified_blocks: u64,
    /// Blocks whose data did not match their checksum: silent corruption, each rewritten from
    /// redundancy where the level has it (else the read failed).
    pub mismatches: u64,
    /// Blocks a sync after an unclean shutdown awaited whose checksum was rewritten from
    /// their data (a torn update, not corruption).
    pub rehashed: u64,
    /// Blocks a sync awaited whose data did not match their checksum but the redundancy's
    /// version did, which replaced them (a torn update rolled back, or corruption healed).
    #[serde(default)]
    pub settled: u64,
}

/// The used-regions map as `status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsedMapStatus {
    /// Array bytes per bit.
    pub region_bytes: u64,
    pub regions: u64,
    /// Regions that hold data (written, not trimmed whole since).
    pub used_regions: u64,
    /// Their array bytes: what a rebuild copies, as a share of the array.
    pub used_bytes: u64,
    /// Map block writes issued so far (per member).
    pub block_writes: u64,
}

/// Everything `status` shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeStatus {
    pub name: String,
    pub uuid: Uuid,
    pub level: String,
    pub chunk_bytes: u64,
    pub size_bytes: u64,
    pub health: ArrayHealth,
    /// Roles in order, then the replacement target (if any), then spares.
    pub members: Vec<MemberStatus>,
    pub task: Option<TaskStatus>,
    pub speed_limits: SpeedLimits,
    pub last_scrub: Option<ScrubReport>,
    pub events: u64,
    /// The write-intent bitmap, if the array has one.
    pub bitmap: Option<BitmapStatus>,
    /// The used-regions map, if the array has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_map: Option<UsedMapStatus>,
    /// Array bytes whose parity or mirror copies a write refused for lack of space may have
    /// left inconsistent; resynced in the background once there is space (health shows
    /// `resyncing` meanwhile).
    pub unsynced_bytes: u64,
    /// Started dirty and degraded without a journal (`--start-dirty-degraded`): the array
    /// ranges whose data may be wrong, until every member is in sync again.
    pub at_risk: Option<AtRisk>,
    /// Ranges the members' bad-block lists record as lost (reads of them fail), role order.
    #[serde(default)]
    pub bad_blocks: Vec<BadBlockStatus>,
    /// Block checksums, if the array keeps them.
    #[serde(default)]
    pub checksum: Option<ChecksumStatus>,
    /// How reads choose a copy and whether they go around a slow member
    /// (`engine::ReadBalance`: `latency`, `round-robin` or `first`; `None` from a server older
    /// than the setting, which balanced by latency).
    #[serde(default)]
    pub read_balance: Option<String>,
}

/// One range a member's bad-block list records as lost.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadBlockStatus {
    pub role: usize,
    pub member: String,
    /// Bytes of the member's data area.
    pub member_offset: u64,
    pub len: u64,
    /// The array byte the range's first byte holds; `None` where it holds parity (then the
    /// stripe at `stripe_array_offset` cannot be rebuilt if another of its members is lost).
    pub array_offset: Option<u64>,
    /// The array offset of the stripe (RAID 5/6) or chunk (mirrors) the range starts in.
    pub stripe_array_offset: u64,
}

impl VolumeStatus {
    /// Array `name` (nil UUID, no events) of `level` with `members`: no task, scrub report,
    /// bitmap or range at risk, the default speed limits.
    pub fn new(
        name: impl Into<String>,
        level: impl Into<String>,
        chunk_bytes: u64,
        size_bytes: u64,
        health: ArrayHealth,
        members: Vec<MemberStatus>,
    ) -> VolumeStatus {
        VolumeStatus {
            name: name.into(),
            uuid: Uuid::nil(),
            level: level.into(),
            chunk_bytes,
            size_bytes,
            health,
            members,
            task: None,
            speed_limits: SpeedLimits::default(),
            last_scrub: None,
            events: 0,
            bitmap: None,
            used_map: None,
            unsynced_bytes: 0,
            at_risk: None,
            bad_blocks: Vec::new(),
            checksum: None,
            read_balance: None,
        }
    }
}

/// Another process took the array over (a member's owner record names it, not this process):
/// this one must stop writing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TakenOver {
    pub member: String,
    pub owner: Box<ondisk::Owner>,
}

impl std::fmt::Display for TakenOver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "member {}: the array was taken over by raidkit pid {} on host {} (started with \
             --force-owner, or after this process's lease ran out)",
            self.member, self.owner.process.pid, self.owner.process.host_name
        )
    }
}

impl std::error::Error for TakenOver {}

pub(crate) fn level_name(level: Level) -> String {
    level.to_string()
}

pub(crate) fn eta(done: u64, total: u64, rate: u64) -> Option<u64> {
    (rate > 0).then(|| total.saturating_sub(done) / rate)
}

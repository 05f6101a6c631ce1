//! A running raidkit array: [`Volume`] (a handle to its core, which the background worker
//! shares; its methods are the whole public interface, the engine array stays inside) is an
//! `engine::Array`
//! over the members' data areas plus the superblock state it keeps on disk (the format is the
//! `ondisk` crate's): it marks the array dirty before the first write and clean on `close`,
//! records member faults before the request that met them completes, and runs background work
//! on one worker thread (rebuild onto spares, replace, resync / initial sync, scrub), throttled
//! by [`SpeedLimits`] and resumable from the superblocks. [`assemble`] reads the members'
//! superblocks, lets `ondisk::plan` decide, and starts a volume.
//!
//! [`grow`]: `raidkit grow` on a stopped array (the offline reshape's orchestration).
//!
//! Operator actions: `fail`, `remove`, `add`, `replace`, `scrub`, `set_speed_limits`; `status`
//! returns a [`VolumeStatus`] ([`ArrayHealth`], [`MemberStatus`], [`TaskStatus`],
//! [`ScrubReport`], and [`AtRisk`]: the ranges a forced dirty and degraded start put at risk).

mod assemble;
mod at_risk;
mod badblocks;
mod bitmap;
mod bitmap_volume;
pub mod grow;
mod lease;
mod manage;
mod options;
mod resync_trust;
mod status;
mod tasks;
mod used;
mod used_volume;
mod volume;
mod work;

pub use assemble::assemble;
pub use at_risk::{ArrayRange, AtRisk, AT_RISK_RANGES_LISTED_MAX};
pub use engine::ReadBalance;
pub use options::AssembleOptions;
pub use status::{
    ArrayHealth, BadBlockStatus, BitmapStatus, ChecksumStatus, FaultPolicy, FilesystemStatus,
    MemberState, MemberStatus, MismatchLocation, ScrubReport, SpeedLimits, TakenOver, TaskKind,
    TaskStatus, UsedMapStatus, VolumeStatus, SCRUB_MISMATCHES_LISTED_MAX,
};
pub use volume::{DataChangedHook, NoticeHook, Volume, VolumeError};

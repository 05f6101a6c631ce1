//! On-disk metadata: superblocks, creating arrays, and putting them back together.
//!
//! The main types:
//! - [`Superblock`]: the versioned, crc32c-checksummed 4 KiB block at byte 4096 of every member
//!   (docs/FORMAT.md), with [`Superblock::encode`] / [`Superblock::decode`].
//! - [`create`] with [`CreateOptions`]: checks members, zeroes them and writes superblocks.
//! - [`plan`]: the pure assembly decision (roles, freshness, refusals) from superblocks;
//!   [`assemble`] reads the members' superblocks, plans, and returns a [`Volume`].
//! - [`Volume`] (dereferencing to [`VolumeCore`]): an `engine::Array` over the members' data
//!   areas plus the superblock state: it marks the array dirty before the first write and clean
//!   on `close`, records member faults before the request that met them completes, and runs
//!   background work on one worker thread (rebuild onto spares, replace, resync / initial sync,
//!   scrub), throttled by [`SpeedLimits`] and resumable from the superblocks. Operator actions:
//!   `fail`, `remove`, `add`, `replace`, `scrub`, `set_speed_limits`; `status` returns a
//!   [`VolumeStatus`] ([`ArrayHealth`], [`MemberStatus`], [`TaskStatus`], [`ScrubReport`],
//!   and [`AtRisk`]: the ranges a forced dirty and degraded start put at risk).
//!
//! ```
//! use metadata::{create, plan, read_superblock, AssembleOptions, CreateOptions};
//! let members: Vec<_> = (0..3)
//!     .map(|_| member::open("mem:4M", &member::OpenOptions::default()).unwrap())
//!     .collect();
//! let opts = CreateOptions::new("raid5".parse().unwrap(), "demo");
//! let written = create(&members, &opts).unwrap();
//! let found: Vec<_> = members
//!     .iter()
//!     .map(|m| (m.name().to_string(), read_superblock(m.as_ref()).unwrap()))
//!     .collect();
//! let plan = plan(&found, &AssembleOptions::default()).unwrap();
//! assert_eq!(plan.superblock.array_uuid, written[0].array_uuid);
//! assert!(!plan.degraded);
//! ```

mod assemble;
mod at_risk;
mod bitmap;
mod bitmap_volume;
mod create;
mod lease;
mod manage;
pub mod owner;
mod plan;
mod resync_trust;
mod status;
mod superblock;
mod tasks;
mod volume;

use std::fmt;
use std::io;
use std::sync::Arc;

pub use assemble::{assemble, check_owner, refuse_if_served};
pub use at_risk::{ArrayRange, AtRisk, AT_RISK_RANGES_LISTED_MAX};
pub use bitmap::{
    BITMAP_BLOCK_BYTES, BITMAP_IDLE_DEFAULT, BITMAP_OFFSET, BITMAP_REGIONS_MAX,
    BITMAP_REGION_DEFAULT, BITS_PER_BLOCK,
};
pub use bitmap_volume::BitmapStatus;
pub use create::{create, CreateError, CreateOptions, IN_USE_CHECK_BYTES};
pub use lease::TakenOver;
pub use plan::{plan, AssembleError, AssembleOptions, DirtyDegradedStart, Plan, StaleMember};
pub use status::{
    ArrayHealth, FaultPolicy, FilesystemStatus, MemberState, MemberStatus, MismatchLocation,
    ScrubReport, SpeedLimits, TaskKind, TaskStatus, VolumeStatus, SCRUB_MISMATCHES_LISTED_MAX,
};
pub use superblock::{
    checksum, level_code, validate_name, ArrayState, BitmapRef, JournalRef, Owner, Role, RoleEntry,
    RoleState, Superblock, SuperblockError, DATA_OFFSET_DEFAULT, FEATURE_COMPAT_OWNER,
    FEATURE_COMPAT_REPLACE, FEATURE_COMPAT_RESYNC_OFFSET, FEATURE_INCOMPAT_BITMAP, FORMAT_VERSION,
    MAGIC, MAX_MEMBERS, NAME_BYTES_MAX, SUPERBLOCK_BYTES, SUPERBLOCK_OFFSET, UNUSED_ROLE,
};
pub use uuid::Uuid;
pub use volume::{DataChangedHook, NoticeHook, Volume, VolumeCore, VolumeError};

use member::Member;

/// Why a member's superblock could not be read.
#[derive(Debug)]
pub enum ReadSuperblockError {
    /// The member could not be read (or is too small to hold a superblock).
    Io(io::Error),
    /// The bytes are not a valid superblock.
    Invalid(SuperblockError),
}

impl fmt::Display for ReadSuperblockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadSuperblockError::Io(e) => write!(f, "cannot read the superblock: {e}"),
            ReadSuperblockError::Invalid(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ReadSuperblockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadSuperblockError::Io(e) => Some(e),
            ReadSuperblockError::Invalid(e) => Some(e),
        }
    }
}

/// Reads and validates the superblock of `member`. Never writes.
pub fn read_superblock(member: &dyn Member) -> Result<Superblock, ReadSuperblockError> {
    let end = SUPERBLOCK_OFFSET + SUPERBLOCK_BYTES as u64;
    if member.len() < end {
        return Err(ReadSuperblockError::Invalid(SuperblockError::NoMagic));
    }
    let mut bytes = Box::new([0u8; SUPERBLOCK_BYTES]);
    member
        .read_at(&mut bytes[..], SUPERBLOCK_OFFSET)
        .map_err(ReadSuperblockError::Io)?;
    let sb = Superblock::decode(&bytes).map_err(ReadSuperblockError::Invalid)?;
    if sb.member_bytes > member.len() {
        return Err(ReadSuperblockError::Invalid(SuperblockError::Field {
            field: "member_bytes",
            reason: format!(
                "the superblock describes {} bytes but the member has {}",
                sb.member_bytes,
                member.len()
            ),
        }));
    }
    Ok(sb)
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// True when `a` and `b` are the same member given twice: the same object, the same path, or
/// the same storage under two names (`Member::identity`: a file's device and inode, a block
/// device's number, an NBD server and export). Two `mem:SIZE` members with the same spec are
/// different RAM members.
pub(crate) fn same_member(a: &Arc<dyn Member>, b: &Arc<dyn Member>) -> bool {
    let same_object = std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b));
    let same_path = a.name() == b.name() && !a.name().starts_with(member::MEM_PREFIX);
    let same_storage = a.identity().is_some() && a.identity() == b.identity();
    same_object || same_path || same_storage
}

/// The first member of `all` that is the same member as an earlier one ([`same_member`]), as
/// (its name, the earlier one's name).
pub(crate) fn find_duplicate(all: &[Arc<dyn Member>]) -> Option<(String, String)> {
    all.iter().enumerate().find_map(|(i, m)| {
        let earlier = all[..i].iter().find(|other| same_member(other, m))?;
        Some((m.name().to_string(), earlier.name().to_string()))
    })
}

/// "member X: given more than once", or, when the two names differ, which other name it is.
pub(crate) fn describe_duplicate(name: &str, other: &str) -> String {
    if name == other {
        format!("member {name}: given more than once")
    } else {
        format!(
            "member {name}: is the same storage as member {other} (one file, device or export \
             under two names, e.g. a symlink or a relative and an absolute path): give it once"
        )
    }
}

//! The on-disk format of a raidkit array and the pure decisions over it: no threads, no running
//! array (that is the `volume` crate's).
//!
//! - [`Superblock`]: the versioned, crc32c-checksummed 4 KiB block at byte 4096 of every member
//!   (docs/FORMAT.md), with [`Superblock::encode`] / [`Superblock::decode`];
//!   [`read_superblock`] reads and validates one member's.
//! - [`bitmap`]: the write-intent bitmap's blocks on disk (a codec the used map shares).
//! - [`usedmap`]: the used-regions map (which regions ever held data) on disk.
//! - [`metadata`]: where the metadata areas go between the superblock and the data.
//! - [`create`] with [`CreateOptions`]: checks members, zeroes them and writes superblocks.
//! - [`freshest_superblock`], [`set_journal_ref`]: the journal reference of a stopped array.
//! - [`read_for_assembly`]: every member's superblock for assembly, a torn one rebuilt from its
//!   first sector and its peers.
//! - [`plan`]: the assembly decision (roles, freshness, refusals) from superblocks, as a pure
//!   function; [`check_owner`] / [`refuse_if_served`]: the owner records judged ([`owner`]).
//!
//! ```
//! use ondisk::{create, plan, read_superblock, CreateOptions, AssemblyPlanOptions};
//! let members: Vec<_> = (0..3)
//!     .map(|_| member::open("mem:4M", &member::OpenOptions::default()).unwrap())
//!     .collect();
//! let opts = CreateOptions::new("raid5".parse().unwrap(), "demo");
//! let written = create(&members, &opts).unwrap();
//! let found: Vec<_> = members
//!     .iter()
//!     .map(|m| (m.name().to_string(), read_superblock(m.as_ref()).unwrap()))
//!     .collect();
//! let plan = plan(&found, &AssemblyPlanOptions::default()).unwrap();
//! assert_eq!(plan.superblock.array_uuid, written[0].array_uuid);
//! assert!(!plan.degraded);
//! ```

pub mod badblocks;
pub mod bitmap;
mod checksum_area;
mod create;
mod duplicate;
mod grow;
mod grow_reshape;
mod journal_ref;
pub mod metadata;
pub mod owner;
mod plan;
pub mod reshape_record;
mod served;
mod superblock;
mod torn;
pub mod usedmap;

pub use badblocks::{BadBlockList, BadBlocksRef, BadRange, BAD_BLOCKS_AREA_BYTES, BAD_BLOCKS_MAX};
pub use bitmap::{
    BitmapRef, BITMAP_BLOCK_BYTES, BITMAP_BYTES_MAX, BITMAP_IDLE_DEFAULT, BITMAP_OFFSET,
    BITMAP_REGIONS_MAX, BITMAP_REGION_DEFAULT, BITS_PER_BLOCK,
};
pub use checksum_area::{
    ChecksumAlg, ChecksumRef, CHECKSUM_BLOCK_BYTES, FEATURE_INCOMPAT_CHECKSUM,
};
pub use create::{create, CreateError, CreateOptions, IN_USE_CHECK_BYTES};
pub use duplicate::{describe_duplicate, find_duplicate, same_member};
pub use grow::{grow_add_linear, grow_size_max, GrowError, GrowReport, NewSpace};
pub use grow_reshape::{
    backup_area_bytes, repair_torn_superblocks, reshape_finish, reshape_open,
    reshape_record_position, reshape_settle, reshape_start, reshape_used_image, Reshaping,
};
pub use journal_ref::{
    freshest_superblock, rewrite_superblocks, set_journal_ref, SetJournalRefError,
};
pub use plan::{
    plan, AssembleError, AssemblyPlan, AssemblyPlanOptions, DirtyDegradedStart, StaleMember,
};
pub use reshape_record::{ReshapeRecord, FEATURE_INCOMPAT_RESHAPE};
pub use served::{check_owner, refuse_if_served};
pub use superblock::{
    checksum, level_code, now_secs, read_superblock, validate_name, ArrayState, JournalRef, Owner,
    OwnerProcess, ReadSuperblockError, Role, RoleEntry, RoleState, Superblock, SuperblockError,
    DATA_OFFSET_DEFAULT, FEATURE_COMPAT_OWNER, FEATURE_COMPAT_REPLACE,
    FEATURE_COMPAT_RESYNC_OFFSET, FEATURE_INCOMPAT_BAD_BLOCKS, FEATURE_INCOMPAT_BITMAP,
    FEATURE_INCOMPAT_ENCRYPTED, FEATURE_INCOMPAT_KNOWN, FEATURE_INCOMPAT_USED_MAP, FORMAT_VERSION,
    MAGIC, MAX_MEMBERS, NAME_BYTES_MAX, SUPERBLOCK_BYTES, SUPERBLOCK_OFFSET, UNUSED_ROLE,
};
pub use torn::{read_for_assembly, ReadForAssembly};
pub use uuid::Uuid;

//! `create`: write a new array's superblocks to its members.

use std::fmt;
use std::io;
use std::sync::Arc;

use layout::{Geometry, LayoutError, Level};
use member::Member;
use uuid::Uuid;

use crate::superblock::{
    validate_name, ArrayState, Role, RoleEntry, RoleState, Superblock, SuperblockError,
    DATA_OFFSET_DEFAULT, FORMAT_VERSION, MAX_MEMBERS, SUPERBLOCK_BYTES, SUPERBLOCK_OFFSET,
    UNUSED_ROLE,
};
use crate::{now_secs, read_superblock, ReadSuperblockError};

/// Bytes at the start of a member that must be all zero unless `force` is given.
pub const IN_USE_CHECK_BYTES: u64 = 1 << 20;

/// What to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateOptions {
    pub level: Level,
    pub chunk_bytes: u64,
    pub name: String,
    /// Overwrite members that carry a superblock or data.
    pub force: bool,
    /// Start of the data area on every member (4 KiB-aligned, past the superblock).
    pub data_offset_bytes: u64,
}

impl CreateOptions {
    /// Options with the default chunk (128 KiB) and data offset (1 MiB).
    pub fn new(level: Level, name: &str) -> CreateOptions {
        CreateOptions {
            level,
            chunk_bytes: layout::CHUNK_BYTES_DEFAULT,
            name: name.to_string(),
            force: false,
            data_offset_bytes: DATA_OFFSET_DEFAULT,
        }
    }
}

/// Why an array could not be created. Nothing was written unless the error is `Io` during the
/// write phase.
#[derive(Debug)]
pub enum CreateError {
    /// The options themselves are invalid (name, chunk, member count, data offset).
    Invalid(String),
    /// The same member was given twice.
    DuplicateMember { name: String },
    /// A member is too small for the data offset plus one chunk.
    MemberTooSmall { name: String, bytes: u64, need: u64 },
    /// A member looks in use and `force` was not given.
    InUse { name: String, reason: String },
    /// Reading or writing a member failed.
    Io {
        name: String,
        action: &'static str,
        source: io::Error,
    },
}

impl fmt::Display for CreateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CreateError::Invalid(reason) => write!(f, "cannot create the array: {reason}"),
            CreateError::DuplicateMember { name } => {
                write!(f, "member {name}: given more than once")
            }
            CreateError::MemberTooSmall { name, bytes, need } => write!(
                f,
                "member {name}: too small ({bytes} bytes; needs at least {need})"
            ),
            CreateError::InUse { name, reason } => write!(
                f,
                "member {name}: {reason}; refusing to overwrite it without --force"
            ),
            CreateError::Io {
                name,
                action,
                source,
            } => write!(f, "member {name}: cannot {action}: {source}"),
        }
    }
}

impl std::error::Error for CreateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CreateError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Creates a new array on `members` (role = position): checks the options and every member,
/// then zeroes each member (so redundancy is consistent with no initial sync: zero data has zero
/// parity) and writes and flushes its superblock. Returns the superblocks written, by role.
pub fn create(
    members: &[Arc<dyn Member>],
    opts: &CreateOptions,
) -> Result<Vec<Superblock>, CreateError> {
    check_options(members, opts)?;
    let geometry = geometry_for(members, opts)?;
    if !opts.force {
        for member in members {
            check_unused(member.as_ref())?;
        }
    }
    let superblocks = build_superblocks(members, opts, &geometry);
    for (member, sb) in members.iter().zip(&superblocks) {
        write_new(member.as_ref(), sb)?;
    }
    for member in members {
        member.flush().map_err(io_err(member.name(), "flush"))?;
    }
    Ok(superblocks)
}

fn io_err<'a>(name: &'a str, action: &'static str) -> impl FnOnce(io::Error) -> CreateError + 'a {
    move |source| CreateError::Io {
        name: name.to_string(),
        action,
        source,
    }
}

fn check_options(members: &[Arc<dyn Member>], opts: &CreateOptions) -> Result<(), CreateError> {
    validate_name(&opts.name).map_err(CreateError::Invalid)?;
    let count = members.len();
    let min = opts.level.min_members();
    if count < min {
        return Err(CreateError::Invalid(format!(
            "{} needs at least {min} members, {count} given",
            opts.level
        )));
    }
    if count > MAX_MEMBERS {
        return Err(CreateError::Invalid(format!(
            "{count} members given; the most is {MAX_MEMBERS}"
        )));
    }
    let chunk = opts.chunk_bytes;
    if !chunk.is_power_of_two()
        || !(layout::CHUNK_BYTES_MIN..=layout::CHUNK_BYTES_MAX).contains(&chunk)
    {
        return Err(CreateError::Invalid(
            LayoutError::BadChunk { chunk_bytes: chunk }.to_string(),
        ));
    }
    let sb_end = SUPERBLOCK_OFFSET + SUPERBLOCK_BYTES as u64;
    if opts.data_offset_bytes < sb_end || !opts.data_offset_bytes.is_multiple_of(4096) {
        return Err(CreateError::Invalid(format!(
            "data offset {} is not 4 KiB-aligned past the superblock",
            opts.data_offset_bytes
        )));
    }
    for (i, m) in members.iter().enumerate() {
        if members[..i]
            .iter()
            .any(|other| crate::same_member(other, m))
        {
            return Err(CreateError::DuplicateMember {
                name: m.name().to_string(),
            });
        }
    }
    Ok(())
}

fn geometry_for(
    members: &[Arc<dyn Member>],
    opts: &CreateOptions,
) -> Result<Geometry, CreateError> {
    let min_area = if opts.level == Level::Linear {
        4096
    } else {
        opts.chunk_bytes
    };
    let need = opts.data_offset_bytes + min_area;
    if let Some(m) = members.iter().find(|m| m.len() < need) {
        return Err(CreateError::MemberTooSmall {
            name: m.name().to_string(),
            bytes: m.len(),
            need,
        });
    }
    let areas: Vec<u64> = members
        .iter()
        .map(|m| m.len() - opts.data_offset_bytes)
        .collect();
    Geometry::new(opts.level, opts.chunk_bytes, &areas).map_err(|e| match e {
        LayoutError::MemberTooSmall { role, bytes, .. } => CreateError::MemberTooSmall {
            name: members[role].name().to_string(),
            bytes: bytes + opts.data_offset_bytes,
            need,
        },
        other => CreateError::Invalid(other.to_string()),
    })
}

/// Refuses a member that carries any raidkit superblock or non-zero bytes in its first MiB.
fn check_unused(member: &dyn Member) -> Result<(), CreateError> {
    let in_use = |reason: String| CreateError::InUse {
        name: member.name().to_string(),
        reason,
    };
    match read_superblock(member) {
        Ok(sb) => {
            return Err(in_use(format!(
                "carries a raidkit superblock (array {} \"{}\", {})",
                sb.array_uuid, sb.name, sb.level
            )))
        }
        Err(ReadSuperblockError::Invalid(SuperblockError::NoMagic)) => {}
        Err(ReadSuperblockError::Invalid(e)) => {
            return Err(in_use(format!(
                "carries a damaged raidkit superblock ({e})"
            )))
        }
        Err(ReadSuperblockError::Io(source)) => {
            return Err(CreateError::Io {
                name: member.name().to_string(),
                action: "read the superblock of",
                source,
            })
        }
    }
    let len = IN_USE_CHECK_BYTES.min(member.len());
    let mut buf = vec![0u8; len as usize];
    member
        .read_at(&mut buf, 0)
        .map_err(io_err(member.name(), "read the start of"))?;
    if let Some(at) = buf.iter().position(|&b| b != 0) {
        return Err(in_use(format!(
            "has non-zero data in its first MiB (at byte {at})"
        )));
    }
    Ok(())
}

fn build_superblocks(
    members: &[Arc<dyn Member>],
    opts: &CreateOptions,
    geometry: &Geometry,
) -> Vec<Superblock> {
    let now = now_secs();
    let array_uuid = Uuid::new_v4();
    let member_uuids: Vec<Uuid> = members.iter().map(|_| Uuid::new_v4()).collect();
    let mut roles = vec![UNUSED_ROLE; MAX_MEMBERS];
    for (role, uuid) in member_uuids.iter().enumerate() {
        roles[role] = RoleEntry {
            member_uuid: *uuid,
            data_bytes: geometry.member_data_bytes(role),
            state: RoleState::Active,
        };
    }
    let make = |role: usize| Superblock {
        version: FORMAT_VERSION,
        feature_compat: 0,
        feature_incompat: 0,
        array_uuid,
        member_uuid: member_uuids[role],
        name: opts.name.clone(),
        level: opts.level,
        layout: 0,
        chunk_bytes: opts.chunk_bytes,
        member_count: members.len() as u32,
        role: Role::Active(role as u32),
        data_offset_bytes: opts.data_offset_bytes,
        data_bytes: geometry.member_data_bytes(role),
        array_size_bytes: geometry.size_bytes(),
        member_bytes: members[role].len(),
        ctime_secs: now,
        utime_secs: now,
        events: 1,
        state: ArrayState::Clean,
        recovery_offset_bytes: None,
        bitmap: None,
        journal: None,
        roles: roles.clone(),
    };
    (0..members.len()).map(make).collect()
}

/// Zeroes the whole member, then writes its superblock.
fn write_new(member: &dyn Member, sb: &Superblock) -> Result<(), CreateError> {
    member
        .trim(0, member.len())
        .map_err(io_err(member.name(), "zero"))?;
    member
        .write_at(&sb.encode()[..], SUPERBLOCK_OFFSET)
        .map_err(io_err(member.name(), "write the superblock to"))
}

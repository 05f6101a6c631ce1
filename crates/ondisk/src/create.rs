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
#[derive(Clone, Debug)]
pub struct CreateOptions {
    pub level: Level,
    pub chunk_bytes: u64,
    pub name: String,
    /// Overwrite members that carry a superblock or data.
    pub force: bool,
    /// Start of the data area on every member (4 KiB-aligned, past the superblock).
    pub data_offset_bytes: u64,
    /// Hot spares: they receive a spare superblock of the new array.
    pub spares: Vec<Arc<dyn Member>>,
    /// Members that are not cheap to zero (block devices, remote members) are trusted to be
    /// consistent already: no initial sync (as mdadm's --assume-clean).
    pub assume_clean: bool,
    /// Array bytes per write-intent bitmap bit (a power of two ≥ 4 KiB; grown if the array
    /// would need more than `BITMAP_REGIONS_MAX` bits); `None`: no bitmap. Default: 64 MiB for
    /// redundant levels, none for linear and RAID 0.
    pub bitmap_region_bytes: Option<u64>,
    /// Array bytes per used-regions map bit asked for (rounded up to whole sync units, grown
    /// if the array would need more than `USED_REGIONS_MAX` bits); `None`: no map, rebuilds
    /// copy everything. Default: 4 MiB for redundant levels, none for linear and RAID 0.
    pub used_region_bytes: Option<u64>,
    /// Encrypt the array at rest: the key area (`crypt::KeyArea::create`) every member's
    /// superblock carries; `None`: plaintext.
    pub encryption: Option<crypt::KeyArea>,
    /// Keep a bad-block list on every member (docs/FORMAT.md "Bad-block list"): on by default
    /// for levels with redundancy (only a rebuild records bad blocks).
    pub bad_blocks: bool,
    /// Keep a checksum of every 4 KiB data block of every member in a checksum area
    /// (`metadata_layout` puts it, last; the data offset grows past the default when it does not fit);
    /// `None`: no checksums.
    pub checksum: Option<crate::ChecksumAlg>,
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
            spares: Vec::new(),
            assume_clean: false,
            bitmap_region_bytes: level
                .has_redundancy()
                .then_some(crate::bitmap::BITMAP_REGION_DEFAULT),
            used_region_bytes: level
                .has_redundancy()
                .then_some(crate::usedmap::USED_REGION_DEFAULT),
            encryption: None,
            bad_blocks: level.has_redundancy(),
            checksum: None,
        }
    }
}

/// Why an array could not be created. Nothing was written unless the error is `Io` during the
/// write phase.
#[derive(Debug)]
pub enum CreateError {
    /// The options themselves are invalid (name, chunk, member count, data offset).
    Invalid(String),
    /// The same member was given twice (`other`: the name it was given first).
    DuplicateMember { name: String, other: String },
    /// A member is too small for the data offset plus one chunk.
    MemberTooSmall { name: String, bytes: u64, need: u64 },
    /// A member looks in use and `force` was not given.
    InUse { name: String, reason: String },
    /// A member belongs to an array another live process serves (its owner record): never
    /// overwritten, `force` or not. The reason names the process and what to do.
    Served { reason: String },
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
            CreateError::DuplicateMember { name, other } => {
                f.write_str(&crate::describe_duplicate(name, other))
            }
            CreateError::MemberTooSmall { name, bytes, need } => write!(
                f,
                "member {name}: too small ({bytes} bytes; needs at least {need})"
            ),
            CreateError::InUse { name, reason } => write!(
                f,
                "member {name}: {reason}; refusing to overwrite it without --force"
            ),
            CreateError::Served { reason } => write!(
                f,
                "cannot create the array: {reason} (--force does not override a served array)"
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

/// Creates a new array on `members` (role = position) with `opts.spares` as hot spares:
/// checks the options and every member, then writes and flushes the superblocks. Members that
/// are cheap to zero (files, RAM) are zeroed whole, so redundancy is consistent at once (zero
/// data has zero parity). Otherwise only the metadata area is zeroed and the array records a
/// resync offset of 0: assembly then runs a background initial sync — unless
/// `opts.assume_clean`. Returns the superblocks written: roles in order, then spares.
pub fn create(
    members: &[Arc<dyn Member>],
    opts: &CreateOptions,
) -> Result<Vec<Superblock>, CreateError> {
    let all: Vec<Arc<dyn Member>> = members.iter().chain(&opts.spares).cloned().collect();
    check_options(members, opts)?;
    check_distinct(&all)?;
    let (geometry, metadata) = layout_for(members, &all, opts)?;
    let grown;
    let opts = match metadata.data_offset_bytes == opts.data_offset_bytes {
        true => opts,
        false => {
            grown = CreateOptions {
                data_offset_bytes: metadata.data_offset_bytes,
                ..opts.clone()
            };
            &grown
        }
    };
    check_spares(&opts.spares, opts, &geometry)?;
    crate::refuse_if_served(&all).map_err(|e| CreateError::Served {
        reason: e.to_string(),
    })?;
    if !opts.force {
        for member in &all {
            check_unused(member.as_ref())?;
        }
    }
    let zero_all = all.iter().all(|m| cheap_to_zero(m.as_ref()));
    if metadata.checksum.is_some()
        && !zero_all
        && !opts.assume_clean
        && !opts.level.has_redundancy()
    {
        // The checksums of blocks create does not zero would be wrong, and without
        // redundancy no sync can make them right.
        return Err(CreateError::Invalid(format!(
            "checksums on {} need members create can zero (files, RAM), or --assume-clean \
             for members known to be zeroed: a block device's or remote member's existing \
             blocks would not match their checksums",
            opts.level
        )));
    }
    let mut superblocks = build_superblocks(&all, members.len(), opts, &geometry);
    for sb in &mut superblocks {
        sb.set_bitmap(metadata.bitmap);
        sb.set_used_map(metadata.used_map);
        sb.set_bad_blocks(metadata.bad_blocks);
        sb.set_encryption(opts.encryption.clone());
        sb.set_checksum(metadata.checksum);
    }
    if !zero_all && !opts.assume_clean && opts.level.has_redundancy() {
        for sb in &mut superblocks {
            sb.set_resync_offset(Some(0));
        }
    }
    for (member, sb) in all.iter().zip(&superblocks) {
        write_new(member.as_ref(), sb, zero_all)?;
    }
    for member in &all {
        member.flush().map_err(io_err(member.name(), "flush"))?;
    }
    Ok(superblocks)
}

/// The metadata areas of a new array (docs/FORMAT.md "Member layout").
struct Metadata {
    bitmap: Option<crate::BitmapRef>,
    used_map: Option<crate::usedmap::UsedMapRef>,
    bad_blocks: Option<crate::BadBlocksRef>,
    checksum: Option<crate::ChecksumRef>,
    data_offset_bytes: u64,
}

/// The geometry and the metadata areas: the bitmap first, then the others one after another
/// (`metadata::metadata_layout`); a default data offset grows when they do not fit (and the
/// geometry is then that of the smaller data areas).
fn layout_for(
    members: &[Arc<dyn Member>],
    all: &[Arc<dyn Member>],
    opts: &CreateOptions,
) -> Result<(Geometry, Metadata), CreateError> {
    let mut geometry = geometry_for(members, opts)?;
    let bitmap = bitmap_for(opts, &geometry)?;
    let used_region = used_region_for(opts)?;
    let areas = |g: &Geometry| {
        let mut areas = Vec::new();
        if let Some(region) = used_region {
            let region = crate::usedmap::region_for(g, region);
            let bytes = crate::usedmap::area_bytes(g.size_bytes().div_ceil(region));
            areas.push((
                crate::metadata::AreaRequest {
                    name: "used-regions map",
                    bytes,
                },
                region,
            ));
        }
        if opts.bad_blocks {
            let bytes = crate::BAD_BLOCKS_AREA_BYTES;
            areas.push((
                crate::metadata::AreaRequest {
                    name: BAD_BLOCKS_AREA,
                    bytes,
                },
                0,
            ));
        }
        if let Some(alg) = opts.checksum {
            // Sized for the largest member or spare, whatever the data offset: every data
            // area is covered, and the area does not change when the offset grows.
            let largest = all.iter().map(|m| m.len()).max().unwrap_or(0);
            let bytes = crate::ChecksumRef::area_bytes(alg, largest);
            areas.push((
                crate::metadata::AreaRequest {
                    name: CHECKSUM_AREA,
                    bytes,
                },
                0,
            ));
        }
        areas
    };
    let requests: Vec<_> = areas(&geometry).iter().map(|(a, _)| *a).collect();
    let placed =
        crate::metadata::metadata_layout(bitmap.as_ref(), &requests, opts.data_offset_bytes)
            .map_err(CreateError::Invalid)?;
    if placed.data_offset_bytes != opts.data_offset_bytes {
        let grown = CreateOptions {
            data_offset_bytes: placed.data_offset_bytes,
            ..opts.clone()
        };
        // Smaller data areas: the regions (and so the areas) can only shrink.
        geometry = geometry_for(members, &grown)?;
    }
    let (mut used_map, mut bad_blocks, mut checksum) = (None, None, None);
    for (request, (offset, (_, region))) in requests
        .iter()
        .zip(placed.offsets.iter().zip(areas(&geometry)))
    {
        if request.name == "used-regions map" {
            used_map = Some(crate::usedmap::UsedMapRef {
                offset_bytes: *offset,
                bytes: request.bytes,
                region_bytes: region,
            });
        }
        if request.name == BAD_BLOCKS_AREA {
            bad_blocks = Some(crate::BadBlocksRef {
                offset_bytes: *offset,
                bytes: request.bytes,
            });
        }
        if request.name == CHECKSUM_AREA {
            checksum = opts.checksum.map(|alg| crate::ChecksumRef {
                offset_bytes: *offset,
                bytes: request.bytes,
                alg,
            });
        }
    }
    Ok((
        geometry,
        Metadata {
            bitmap,
            used_map,
            bad_blocks,
            checksum,
            data_offset_bytes: placed.data_offset_bytes,
        },
    ))
}

/// The bad-block list's name among the metadata areas.
const BAD_BLOCKS_AREA: &str = "bad-block list";
/// The checksum area's name among the metadata areas.
const CHECKSUM_AREA: &str = "checksum area";

/// The used-map region asked for, if the options ask for a map; refused when the level has no
/// redundancy or the size is not a multiple of 4 KiB.
fn used_region_for(opts: &CreateOptions) -> Result<Option<u64>, CreateError> {
    let Some(region) = opts.used_region_bytes else {
        return Ok(None);
    };
    if !opts.level.has_redundancy() {
        return Err(CreateError::Invalid(format!(
            "{} keeps no redundancy: a used-regions map is of no use (nothing is rebuilt)",
            opts.level
        )));
    }
    if region == 0 || !region.is_multiple_of(4096) {
        return Err(CreateError::Invalid(format!(
            "used-map region {region} is not a multiple of 4 KiB"
        )));
    }
    Ok(Some(region))
}

/// Where the bitmap goes, if the options ask for one; refused when the level has no
/// redundancy or the data offset leaves no room.
fn bitmap_for(
    opts: &CreateOptions,
    geometry: &Geometry,
) -> Result<Option<crate::BitmapRef>, CreateError> {
    let Some(region) = opts.bitmap_region_bytes else {
        return Ok(None);
    };
    if !opts.level.has_redundancy() {
        return Err(CreateError::Invalid(format!(
            "{} keeps no redundancy: a write-intent bitmap is of no use",
            opts.level
        )));
    }
    if !region.is_power_of_two() || region < 4096 {
        return Err(CreateError::Invalid(format!(
            "bitmap region {region} is not a power of two of at least 4 KiB"
        )));
    }
    let at = crate::bitmap::layout_for(geometry.size_bytes(), region);
    if at.offset_bytes + at.bytes > opts.data_offset_bytes {
        return Err(CreateError::Invalid(format!(
            "data offset {} leaves no room for a bitmap of {} bytes at {}; \
             use a larger data offset or no bitmap",
            opts.data_offset_bytes, at.bytes, at.offset_bytes
        )));
    }
    Ok(Some(at))
}

/// Files (hole punch) and RAM members (disk models too: their trim costs no media time) are
/// zeroed instantly; block devices and remote members
/// may not be.
pub(crate) fn cheap_to_zero(member: &dyn Member) -> bool {
    member::ram_spec(member.name()) || std::fs::metadata(member.name()).is_ok_and(|m| m.is_file())
}

fn check_distinct(all: &[Arc<dyn Member>]) -> Result<(), CreateError> {
    match crate::find_duplicate(all) {
        Some((name, other)) => Err(CreateError::DuplicateMember { name, other }),
        None => Ok(()),
    }
}

fn check_spares(
    spares: &[Arc<dyn Member>],
    opts: &CreateOptions,
    geometry: &Geometry,
) -> Result<(), CreateError> {
    if !spares.is_empty() && !opts.level.has_redundancy() {
        return Err(CreateError::Invalid(format!(
            "{} keeps no redundancy: spares are of no use",
            opts.level
        )));
    }
    if geometry.member_count() + spares.len() > MAX_MEMBERS {
        return Err(CreateError::Invalid(format!(
            "{} members and spares given; the most is {MAX_MEMBERS}",
            geometry.member_count() + spares.len()
        )));
    }
    let need = opts.data_offset_bytes + geometry.member_data_bytes(0);
    match spares.iter().find(|s| s.len() < need) {
        Some(s) => Err(CreateError::MemberTooSmall {
            name: s.name().to_string(),
            bytes: s.len(),
            need,
        }),
        None => Ok(()),
    }
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
    Ok(())
}

fn geometry_for(
    members: &[Arc<dyn Member>],
    opts: &CreateOptions,
) -> Result<Geometry, CreateError> {
    // One chunk, or one 4 KiB block for linear (whose members are used whole).
    let min_area = opts.level.member_bytes_min(opts.chunk_bytes).max(4096);
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
pub(crate) fn check_unused(member: &dyn Member) -> Result<(), CreateError> {
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

/// Superblocks for `all` members: the first `count` hold roles, the rest are spares.
fn build_superblocks(
    all: &[Arc<dyn Member>],
    count: usize,
    opts: &CreateOptions,
    geometry: &Geometry,
) -> Vec<Superblock> {
    let now = now_secs();
    let array_uuid = Uuid::new_v4();
    let member_uuids: Vec<Uuid> = all.iter().map(|_| Uuid::new_v4()).collect();
    let data_bytes = |i: usize| match i < count {
        true => geometry.member_data_bytes(i),
        false => all[i].len() - opts.data_offset_bytes,
    };
    let mut roles = vec![UNUSED_ROLE; MAX_MEMBERS];
    for (i, uuid) in member_uuids.iter().enumerate() {
        roles[i] = RoleEntry {
            member_uuid: *uuid,
            data_bytes: data_bytes(i),
            state: if i < count {
                RoleState::Active
            } else {
                RoleState::Spare
            },
            replacing: None,
        };
    }
    let make = |role: usize| Superblock {
        replace_offset_bytes: None,
        version: FORMAT_VERSION,
        feature_compat: 0,
        feature_incompat: 0,
        array_uuid,
        member_uuid: member_uuids[role],
        name: opts.name.clone(),
        level: opts.level,
        layout: 0,
        chunk_bytes: opts.chunk_bytes,
        member_count: count as u32,
        role: match role < count {
            true => Role::Active(role as u32),
            false => Role::Spare,
        },
        data_offset_bytes: opts.data_offset_bytes,
        data_bytes: data_bytes(role),
        array_size_bytes: geometry.size_bytes(),
        member_bytes: all[role].len(),
        ctime_secs: now,
        utime_secs: now,
        events: 1,
        state: ArrayState::Clean,
        recovery_offset_bytes: None,
        resync_offset_bytes: None,
        bitmap: None,
        used_map: None,
        bad_blocks: None,
        journal: None,
        owner: None,
        roles: roles.clone(),
        encryption: None,
        checksum: None,
        reshape: None,
    };
    (0..all.len()).map(make).collect()
}

/// Zeroes the whole member (or only its metadata area), then writes its superblock.
fn write_new(member: &dyn Member, sb: &Superblock, whole: bool) -> Result<(), CreateError> {
    let zeroed = match whole {
        true => member.trim(0, member.len()),
        false => member.write_zeroes(0, sb.data_offset_bytes),
    };
    zeroed.map_err(io_err(member.name(), "zero"))?;
    if let Some(at) = &sb.bitmap {
        crate::bitmap::write_blank(member, &sb.array_uuid, &at.area())
            .map_err(io_err(member.name(), "write the bitmap to"))?;
    }
    if let Some(at) = &sb.used_map {
        crate::bitmap::write_blank(member, &sb.array_uuid, &at.area())
            .map_err(io_err(member.name(), "write the used-regions map to"))?;
    }
    if let Some(at) = &sb.bad_blocks {
        crate::badblocks::write_blank(member, &sb.array_uuid, at)
            .map_err(io_err(member.name(), "write the bad-block list to"))?;
    }
    member
        .write_at(&sb.encode()[..], SUPERBLOCK_OFFSET)
        .map_err(io_err(member.name(), "write the superblock to"))
}

//! The on-disk superblock: one 4 KiB block at byte [`SUPERBLOCK_OFFSET`] of every member.
//! docs/FORMAT.md documents it byte by byte; the offsets below are the same table.

use std::fmt;
use std::io;

use layout::Level;
use member::Member;
use uuid::Uuid;

use crate::badblocks::{BadBlocksRef, BAD_BLOCKS_AREA_BYTES};
use crate::bitmap::{BitmapRef, BITMAP_BYTES_MAX, BITMAP_REGIONS_MAX, BITS_PER_BLOCK};
use crate::checksum_area::{ChecksumRef, FEATURE_INCOMPAT_CHECKSUM};
use crate::reshape_record::{ReshapeRecord, FEATURE_INCOMPAT_RESHAPE};
use crate::usedmap::{UsedMapRef, USED_BYTES_MAX, USED_REGIONS_MAX};

/// Identifies a raidkit superblock.
pub const MAGIC: [u8; 8] = *b"RAIDKSB\0";
/// The format version this code writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
/// Where the superblock starts on each member.
pub const SUPERBLOCK_OFFSET: u64 = 4096;
/// Length of the superblock.
pub const SUPERBLOCK_BYTES: usize = 4096;
/// Default start of the data area on each member.
pub const DATA_OFFSET_DEFAULT: u64 = 1 << 20;
/// Most members (roles plus spares) one array can have: the size of the role table.
pub const MAX_MEMBERS: usize = 64;
/// Longest array name, in bytes of UTF-8.
pub const NAME_BYTES_MAX: usize = 32;
/// Role value stored for a spare member.
const ROLE_SPARE: u32 = u32::MAX;
/// Recovery offset stored when no recovery is in progress.
const RECOVERY_NONE: u64 = u64::MAX;

/// Whether `first` (at least the first 512 bytes of a superblock, which may be torn) holds the
/// magic and `array_uuid`.
pub(crate) fn names_array(first: &[u8], array_uuid: &Uuid) -> bool {
    first.len() >= OFF_ARRAY_UUID + 16
        && first[OFF_MAGIC..OFF_MAGIC + 8] == MAGIC
        && first[OFF_ARRAY_UUID..OFF_ARRAY_UUID + 16] == array_uuid.as_bytes()[..]
}

/// The member uuid of `raw` (a superblock's bytes, maybe torn) when its first sector holds the
/// magic and `array_uuid`.
pub(crate) fn member_of(raw: &[u8], array_uuid: &Uuid) -> Option<Uuid> {
    let bytes: [u8; 16] = raw
        .get(OFF_MEMBER_UUID..OFF_MEMBER_UUID + 16)?
        .try_into()
        .ok()?;
    names_array(raw, array_uuid).then(|| Uuid::from_bytes(bytes))
}

// Field offsets (see docs/FORMAT.md).
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_SB_BYTES: usize = 12;
const OFF_FEATURE_COMPAT: usize = 16;
const OFF_FEATURE_INCOMPAT: usize = 24;
const OFF_ARRAY_UUID: usize = 32;
const OFF_MEMBER_UUID: usize = 48;
const OFF_NAME: usize = 64;
const OFF_LEVEL: usize = 96;
const OFF_LAYOUT: usize = 100;
const OFF_CHUNK: usize = 104;
const OFF_MEMBER_COUNT: usize = 112;
const OFF_ROLE: usize = 116;
const OFF_DATA_OFFSET: usize = 120;
const OFF_DATA_BYTES: usize = 128;
const OFF_ARRAY_SIZE: usize = 136;
const OFF_MEMBER_BYTES: usize = 144;
const OFF_CTIME: usize = 152;
const OFF_UTIME: usize = 160;
const OFF_EVENTS: usize = 168;
const OFF_STATE: usize = 176;
const OFF_RECOVERY: usize = 184;
const OFF_BITMAP_OFFSET: usize = 192;
const OFF_BITMAP_BYTES: usize = 200;
const OFF_BITMAP_REGION: usize = 208;
const OFF_JOURNAL_UUID: usize = 216;
const OFF_JOURNAL_KIND: usize = 232;
const OFF_RESYNC: usize = 240;
const OFF_REPLACE: usize = 248;
const OFF_ROLE_TABLE: usize = 256;
const ROLE_ENTRY_BYTES: usize = 32;
// The owner record (`feature_compat` bit 1), in bytes reserved before it: 2304..2440.
const OFF_OWNER_HOST_ID: usize = 2304;
const OFF_OWNER_BOOT_ID: usize = 2320;
const OFF_OWNER_PID: usize = 2336;
const OFF_OWNER_LEASE: usize = 2340;
const OFF_OWNER_START_TICKS: usize = 2344;
const OFF_OWNER_SINCE: usize = 2352;
const OFF_OWNER_RENEWED: usize = 2360;
const OFF_OWNER_PID_NS: usize = 2368;
const OFF_OWNER_HOST_NAME: usize = 2376;
/// The key area (`feature_incompat` bit 1): the encryption header and key slots,
/// `crypt::KEY_AREA_BYTES` bytes from here (2440..3680).
const OFF_KEY_AREA: usize = 2440;
/// The bad-block list reference (`feature_incompat` bit 3): offset and length of the list area,
/// in bytes 3744..3776 (the rest of that range is zero).
const OFF_BAD_BLOCKS_OFFSET: usize = 3744;
const OFF_BAD_BLOCKS_BYTES: usize = 3752;
const BAD_BLOCKS_RANGE: std::ops::Range<usize> = 3744..3776;
/// The used-regions map (`feature_incompat` bit 5): its offset, length and region size
/// (u64 each), then 8 zero bytes: 3808..3840.
const OFF_USED_OFFSET: usize = 3808;
const OFF_USED_BYTES: usize = 3816;
const OFF_USED_REGION: usize = 3824;
const OFF_USED_END: usize = 3840;
/// Longest host name an owner record keeps, in bytes of UTF-8 (longer ones are cut).
pub const OWNER_HOST_NAME_BYTES_MAX: usize = 64;
const OFF_CHECKSUM: usize = SUPERBLOCK_BYTES - 4;

/// `feature_incompat` bit: the array keeps a write-intent bitmap (bytes 192..216 say where).
/// Incompatible because a reader that ignored it would write without setting bits, and a
/// later resync trusting the bitmap would then skip regions that need it.
pub const FEATURE_INCOMPAT_BITMAP: u64 = 1;
/// `feature_incompat` bit (bit 1): the array's data is encrypted at rest; the key area (bytes
/// 2440..3680: the encryption header and key slots, [`crypt::KeyArea`]) is meaningful.
/// Incompatible because a reader that ignored it would serve the ciphertext as the data, and
/// write plaintext among it.
pub const FEATURE_INCOMPAT_ENCRYPTED: u64 = 1 << 1;
/// `feature_incompat` bit (bit 5): the array keeps a used-regions map (bytes 3808..3840 say
/// where). Incompatible because a reader that ignored it would write to regions without
/// setting their bits, and a later rebuild trusting the map would skip them: data lost.
pub const FEATURE_INCOMPAT_USED_MAP: u64 = 1 << 5;
/// `feature_incompat` bit 3: the member keeps a bad-block list (bytes 3744..3760 say where). A
/// reader that ignored it would serve the recorded ranges' lost content as data.
pub const FEATURE_INCOMPAT_BAD_BLOCKS: u64 = 1 << 3;
/// Feature flags a reader must understand to use the array.
pub const FEATURE_INCOMPAT_KNOWN: u64 = FEATURE_INCOMPAT_BITMAP
    | FEATURE_INCOMPAT_ENCRYPTED
    | FEATURE_INCOMPAT_RESHAPE
    | FEATURE_INCOMPAT_BAD_BLOCKS
    | FEATURE_INCOMPAT_USED_MAP
    | FEATURE_INCOMPAT_CHECKSUM;
/// `feature_compat` bit: `resync_offset_bytes` (byte 240) is meaningful.
pub const FEATURE_COMPAT_RESYNC_OFFSET: u64 = 1;
/// `feature_compat` bit (bit 1): an owner record (bytes 2304..2440) names the process serving
/// the array and its lease ([`Owner`]). A reader that ignores it assembles the array without
/// the lease check, as raidkit did before the record existed.
pub const FEATURE_COMPAT_OWNER: u64 = 1 << 1;
/// `feature_compat` bit (bit 2): a replace is recorded — a spare role-table entry's
/// `replacing` (entry bytes 25..32) and the replacement's own `replace_offset_bytes` (byte
/// 248) are meaningful. A reader that ignores it sees the replacement as a plain spare, which
/// is safe: the old member kept its role and every write.
pub const FEATURE_COMPAT_REPLACE: u64 = 1 << 2;
/// Role-table entry byte 25: flags; bit 0 = the entry's spare is replacing the role at 28..32.
const ENTRY_FLAG_REPLACING: u8 = 1;

/// Whether the array was shut down cleanly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArrayState {
    /// Every write reached every member and was flushed; redundancy is consistent.
    Clean,
    /// Writes may have been in flight: parity/mirrors may disagree with data.
    Dirty,
}

/// This member's place in the array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Holds role `n` of `0..member_count`.
    Active(u32),
    /// A hot spare waiting to replace a failed member.
    Spare,
}

/// State of one slot in the role table, as last recorded by the array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleState {
    /// A slot past `member_count` with no spare.
    Unused,
    /// The role's member is present and in sync.
    Active,
    /// The role's member failed and was taken out.
    Faulty,
    /// The role's member was absent (or stale) when the array was last written.
    Missing,
    /// A slot past `member_count` naming a spare.
    Spare,
}

/// One slot of the role table: which member holds it, how much of it the array uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoleEntry {
    pub member_uuid: Uuid,
    pub data_bytes: u64,
    pub state: RoleState,
    /// A spare entry only: this spare is the target of a replace of that role (the role's
    /// member keeps serving until the copy is done). Needs [`FEATURE_COMPAT_REPLACE`].
    pub replacing: Option<u32>,
}

/// Which journal protects the array (reserved; not used by version 1 code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalRef {
    pub uuid: Uuid,
    pub kind: u32,
}

/// What identifies a process as an owner: its host, boot, pid namespace, pid and start time
/// (`owner::ThisHost::get` reads this process's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerProcess {
    /// `/etc/machine-id` of the owner's host (or a hash of its host name when there is none).
    pub host_id: [u8; 16],
    /// `/proc/sys/kernel/random/boot_id` of the owner's host when it took the array: a
    /// different one on the same host means the host rebooted since (the owner is gone).
    pub boot_id: [u8; 16],
    /// The inode of the owner's pid namespace (`/proc/self/ns/pid`): its pid means something
    /// only to a reader in the same namespace.
    pub pid_namespace: u64,
    pub pid: u32,
    /// The owner process's start time, clock ticks after boot (`/proc/PID/stat` field 22):
    /// tells a reused pid from the owner. 0: unknown.
    pub start_ticks: u64,
    /// The owner's host name, for messages (UTF-8, at most [`OWNER_HOST_NAME_BYTES_MAX`]).
    pub host_name: String,
}

/// The process that has the array assembled for writing, recorded on every member while it
/// serves (docs/FORMAT.md "Owner record"; `owner.rs` judges whether it is still alive).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Which process it is.
    pub process: OwnerProcess,
    /// When the owner assembled the array, seconds since the Unix epoch (its clock).
    pub since_secs: u64,
    /// When the owner last renewed the lease (its clock).
    pub renewed_secs: u64,
    /// The lease: past `renewed_secs + lease_secs` without a renewal, the owner is presumed
    /// gone. At least 1.
    pub lease_secs: u32,
}

/// A decoded superblock. Every field is validated by [`Superblock::decode`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub version: u32,
    pub feature_compat: u64,
    pub feature_incompat: u64,
    pub array_uuid: Uuid,
    pub member_uuid: Uuid,
    pub name: String,
    pub level: Level,
    /// 0: the level's only layout (md left-symmetric for 5/6, near-2 for 10).
    pub layout: u32,
    pub chunk_bytes: u64,
    pub member_count: u32,
    pub role: Role,
    pub data_offset_bytes: u64,
    /// Bytes of this member's data area the array uses.
    pub data_bytes: u64,
    pub array_size_bytes: u64,
    /// Size of the whole member when the array was created.
    pub member_bytes: u64,
    pub ctime_secs: u64,
    pub utime_secs: u64,
    pub events: u64,
    pub state: ArrayState,
    /// Data before this offset of the member's data area is rebuilt; `None`: fully in sync.
    pub recovery_offset_bytes: Option<u64>,
    /// Array bytes before this offset have consistent redundancy; the rest awaits a resync
    /// (initial sync, or a resync stopped by a clean shutdown). `None`: all in sync. Present
    /// exactly when `feature_compat` has [`FEATURE_COMPAT_RESYNC_OFFSET`].
    pub resync_offset_bytes: Option<u64>,
    /// The replacement target of a replace only (a spare superblock): its data-area bytes
    /// before this offset were copied from the role and flushed, as of a clean shutdown.
    /// Needs [`FEATURE_COMPAT_REPLACE`].
    pub replace_offset_bytes: Option<u64>,
    pub bitmap: Option<BitmapRef>,
    /// The used-regions map: present exactly when `feature_incompat` has
    /// [`FEATURE_INCOMPAT_USED_MAP`].
    pub used_map: Option<UsedMapRef>,
    pub journal: Option<JournalRef>,
    /// The process serving the array, if one is (or was, and did not close it): present
    /// exactly when `feature_compat` has [`FEATURE_COMPAT_OWNER`].
    pub owner: Option<Owner>,
    /// `MAX_MEMBERS` slots; slot `r < member_count` describes role `r`.
    pub roles: Vec<RoleEntry>,
    /// The encryption header and key slots: present exactly when `feature_incompat` has
    /// [`FEATURE_INCOMPAT_ENCRYPTED`].
    pub encryption: Option<crypt::KeyArea>,
    /// Where this member's bad-block list is; present exactly when `feature_incompat` has
    /// [`FEATURE_INCOMPAT_BAD_BLOCKS`].
    pub bad_blocks: Option<BadBlocksRef>,
    /// The member's checksum area: present exactly when `feature_incompat` has
    /// [`FEATURE_INCOMPAT_CHECKSUM`] (bytes 3776..3808, "Block checksums").
    pub checksum: Option<ChecksumRef>,
    /// A reshape in progress: present exactly when `feature_incompat` has
    /// [`FEATURE_INCOMPAT_RESHAPE`] (bytes 3680..3744, "Reshape"). While it is, `member_count`
    /// and the role table are the new geometry's and `array_size_bytes` the old array's.
    pub reshape: Option<ReshapeRecord>,
}

/// Why bytes are not a valid superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SuperblockError {
    /// No raidkit magic: not a raidkit member.
    NoMagic,
    /// The stored checksum does not match the contents.
    Checksum { stored: u32, computed: u32 },
    /// A format version this code does not read.
    Version { found: u32 },
    /// Incompatible features this code does not know.
    Features { unknown: u64 },
    /// A field holds an impossible value.
    Field { field: &'static str, reason: String },
}

impl fmt::Display for SuperblockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SuperblockError::NoMagic => write!(f, "no raidkit superblock (magic not found)"),
            SuperblockError::Checksum { stored, computed } => write!(
                f,
                "superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
            SuperblockError::Version { found } => write!(
                f,
                "superblock format version {found} is not supported (this raidkit reads version {FORMAT_VERSION})"
            ),
            SuperblockError::Features { unknown } => write!(
                f,
                "superblock uses unknown incompatible features {unknown:#x}"
            ),
            SuperblockError::Field { field, reason } => {
                write!(f, "superblock field {field} is invalid: {reason}")
            }
        }
    }
}

impl std::error::Error for SuperblockError {}

fn field_err(field: &'static str, reason: impl Into<String>) -> SuperblockError {
    SuperblockError::Field {
        field,
        reason: reason.into(),
    }
}

/// `field` is recorded exactly when its feature bit is set (`what`: the field, for the message).
fn present_with_bit(
    field: &'static str,
    has_bit: bool,
    present: bool,
    what: &str,
) -> Result<(), SuperblockError> {
    match has_bit == present {
        true => Ok(()),
        false => Err(field_err(
            field,
            format!("present without its feature bit, or the bit without {what}"),
        )),
    }
}

/// `field`'s `offset` is 4 KiB-aligned and past the superblock.
fn aligned_past_superblock(field: &'static str, offset: u64) -> Result<(), SuperblockError> {
    let sb_end = SUPERBLOCK_OFFSET + SUPERBLOCK_BYTES as u64;
    match offset < sb_end || !offset.is_multiple_of(4096) {
        true => Err(field_err(
            field,
            format!("{offset} is not 4 KiB-aligned past the superblock"),
        )),
        false => Ok(()),
    }
}

/// `field`'s offset, when there is one, is at most `limit`; `past` names what lies beyond.
fn offset_within(
    field: &'static str,
    offset: Option<u64>,
    limit: u64,
    past: &str,
) -> Result<(), SuperblockError> {
    match offset.is_some_and(|r| r > limit) {
        true => Err(field_err(field, format!("past {past}"))),
        false => Ok(()),
    }
}

/// Level ⇄ on-disk code.
pub fn level_code(level: Level) -> u32 {
    match level {
        Level::Linear => 0,
        Level::Raid0 => 1,
        Level::Raid1 => 2,
        Level::Raid10 => 3,
        Level::Raid5 => 4,
        Level::Raid6 => 5,
    }
}

fn level_from_code(code: u32) -> Option<Level> {
    Level::ALL.into_iter().find(|l| level_code(*l) == code)
}

fn role_state_code(state: RoleState) -> u8 {
    match state {
        RoleState::Unused => 0,
        RoleState::Active => 1,
        RoleState::Faulty => 2,
        RoleState::Missing => 3,
        RoleState::Spare => 4,
    }
}

fn role_state_from_code(code: u8) -> Option<RoleState> {
    use RoleState::*;
    [Unused, Active, Faulty, Missing, Spare]
        .into_iter()
        .find(|s| role_state_code(*s) == code)
}

/// Checks an array name: 1..=32 bytes of UTF-8 with no control characters.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the array name is empty".into());
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(format!(
            "the array name {name:?} is {} bytes long; the most is {NAME_BYTES_MAX}",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(format!(
            "the array name {name:?} contains control characters"
        ));
    }
    Ok(())
}

struct Buf<'a>(&'a mut [u8; SUPERBLOCK_BYTES]);

impl Buf<'_> {
    fn put(&mut self, at: usize, bytes: &[u8]) {
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
    }
    fn u32(&mut self, at: usize, v: u32) {
        self.put(at, &v.to_le_bytes());
    }
    fn u64(&mut self, at: usize, v: u64) {
        self.put(at, &v.to_le_bytes());
    }
}

fn get<const N: usize>(b: &[u8; SUPERBLOCK_BYTES], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[at..at + N]);
    out
}
fn get_u32(b: &[u8; SUPERBLOCK_BYTES], at: usize) -> u32 {
    u32::from_le_bytes(get(b, at))
}
fn get_u64(b: &[u8; SUPERBLOCK_BYTES], at: usize) -> u64 {
    u64::from_le_bytes(get(b, at))
}

/// crc32c of a superblock's bytes before the checksum field.
pub fn checksum(bytes: &[u8; SUPERBLOCK_BYTES]) -> u32 {
    crc32c::crc32c(&bytes[..OFF_CHECKSUM])
}

impl Superblock {
    /// The role number, or `None` for a spare.
    pub fn role_index(&self) -> Option<usize> {
        match self.role {
            Role::Active(r) => Some(r as usize),
            Role::Spare => None,
        }
    }

    /// Sets (or clears) the resync offset together with its feature bit.
    pub fn set_resync_offset(&mut self, offset: Option<u64>) {
        self.resync_offset_bytes = offset;
        match offset {
            Some(_) => self.feature_compat |= FEATURE_COMPAT_RESYNC_OFFSET,
            None => self.feature_compat &= !FEATURE_COMPAT_RESYNC_OFFSET,
        }
    }

    /// Records `owner` (or none), with [`FEATURE_COMPAT_OWNER`] set exactly when there is one.
    pub fn set_owner(&mut self, owner: Option<Owner>) {
        match owner {
            Some(_) => self.feature_compat |= FEATURE_COMPAT_OWNER,
            None => self.feature_compat &= !FEATURE_COMPAT_OWNER,
        }
        self.owner = owner;
    }

    /// Sets [`FEATURE_COMPAT_REPLACE`] exactly when a replace is recorded (a `replacing` entry
    /// or a `replace_offset_bytes`); call after changing either.
    pub fn sync_replace_feature(&mut self) {
        let recorded =
            self.replace_offset_bytes.is_some() || self.roles.iter().any(|e| e.replacing.is_some());
        match recorded {
            true => self.feature_compat |= FEATURE_COMPAT_REPLACE,
            false => self.feature_compat &= !FEATURE_COMPAT_REPLACE,
        }
    }

    /// The role a replace is copying onto the spare `member_uuid`, if the table records one.
    pub fn replacing_role(&self, member_uuid: Uuid) -> Option<usize> {
        self.roles
            .iter()
            .find(|e| e.state == RoleState::Spare && e.member_uuid == member_uuid)
            .and_then(|e| e.replacing)
            .map(|r| r as usize)
    }

    /// Sets (or removes) the key area together with its feature bit.
    pub fn set_encryption(&mut self, area: Option<crypt::KeyArea>) {
        match area {
            Some(_) => self.feature_incompat |= FEATURE_INCOMPAT_ENCRYPTED,
            None => self.feature_incompat &= !FEATURE_INCOMPAT_ENCRYPTED,
        }
        self.encryption = area;
    }

    /// Sets (or removes) the bad-block list area together with its feature bit.
    pub fn set_bad_blocks(&mut self, at: Option<BadBlocksRef>) {
        self.bad_blocks = at;
        match at {
            Some(_) => self.feature_incompat |= FEATURE_INCOMPAT_BAD_BLOCKS,
            None => self.feature_incompat &= !FEATURE_INCOMPAT_BAD_BLOCKS,
        }
    }

    /// Sets (or removes) the write-intent bitmap together with its feature bit.
    pub fn set_bitmap(&mut self, bitmap: Option<BitmapRef>) {
        self.bitmap = bitmap;
        match bitmap {
            Some(_) => self.feature_incompat |= FEATURE_INCOMPAT_BITMAP,
            None => self.feature_incompat &= !FEATURE_INCOMPAT_BITMAP,
        }
    }

    /// Sets (or removes) the reshape record together with its feature bit.
    pub fn set_reshape(&mut self, reshape: Option<ReshapeRecord>) {
        self.reshape = reshape;
        match reshape {
            Some(_) => self.feature_incompat |= FEATURE_INCOMPAT_RESHAPE,
            None => self.feature_incompat &= !FEATURE_INCOMPAT_RESHAPE,
        }
    }

    /// Sets (or removes) the used-regions map together with its feature bit.
    pub fn set_used_map(&mut self, used: Option<UsedMapRef>) {
        self.used_map = used;
        match used {
            Some(_) => self.feature_incompat |= FEATURE_INCOMPAT_USED_MAP,
            None => self.feature_incompat &= !FEATURE_INCOMPAT_USED_MAP,
        }
    }

    /// Encodes to the on-disk bytes, checksum included. Asserts the superblock is valid: an
    /// invalid one is a bug in the caller, and must never reach a disk.
    pub fn encode(&self) -> Box<[u8; SUPERBLOCK_BYTES]> {
        if let Err(e) = self.validate() {
            panic!("refusing to encode an invalid superblock: {e}");
        }
        let mut bytes = Box::new([0u8; SUPERBLOCK_BYTES]);
        let mut b = Buf(&mut bytes);
        self.encode_header(&mut b);
        self.encode_reserved_refs(&mut b);
        for (slot, entry) in self.roles.iter().enumerate() {
            let at = OFF_ROLE_TABLE + slot * ROLE_ENTRY_BYTES;
            b.put(at, entry.member_uuid.as_bytes());
            b.u64(at + 16, entry.data_bytes);
            b.put(at + 24, &[role_state_code(entry.state)]);
            if let Some(role) = entry.replacing {
                b.put(at + 25, &[ENTRY_FLAG_REPLACING]);
                b.u32(at + 28, role);
            }
        }
        let crc = checksum(&bytes);
        bytes[OFF_CHECKSUM..].copy_from_slice(&crc.to_le_bytes());
        let decoded = Superblock::decode(&bytes);
        assert_eq!(
            decoded.as_ref(),
            Ok(self),
            "superblock encode/decode roundtrip"
        );
        bytes
    }

    fn encode_header(&self, b: &mut Buf<'_>) {
        b.put(OFF_MAGIC, &MAGIC);
        b.u32(OFF_VERSION, self.version);
        b.u32(OFF_SB_BYTES, SUPERBLOCK_BYTES as u32);
        b.u64(OFF_FEATURE_COMPAT, self.feature_compat);
        b.u64(OFF_FEATURE_INCOMPAT, self.feature_incompat);
        b.put(OFF_ARRAY_UUID, self.array_uuid.as_bytes());
        b.put(OFF_MEMBER_UUID, self.member_uuid.as_bytes());
        b.put(OFF_NAME, self.name.as_bytes());
        b.u32(OFF_LEVEL, level_code(self.level));
        b.u32(OFF_LAYOUT, self.layout);
        b.u64(OFF_CHUNK, self.chunk_bytes);
        b.u32(OFF_MEMBER_COUNT, self.member_count);
        let role = match self.role {
            Role::Active(r) => r,
            Role::Spare => ROLE_SPARE,
        };
        b.u32(OFF_ROLE, role);
        b.u64(OFF_DATA_OFFSET, self.data_offset_bytes);
        b.u64(OFF_DATA_BYTES, self.data_bytes);
        b.u64(OFF_ARRAY_SIZE, self.array_size_bytes);
        b.u64(OFF_MEMBER_BYTES, self.member_bytes);
        b.u64(OFF_CTIME, self.ctime_secs);
        b.u64(OFF_UTIME, self.utime_secs);
        b.u64(OFF_EVENTS, self.events);
        let state = match self.state {
            ArrayState::Clean => 0,
            ArrayState::Dirty => 1,
        };
        b.u32(OFF_STATE, state);
    }

    fn encode_reserved_refs(&self, b: &mut Buf<'_>) {
        b.u64(
            OFF_RECOVERY,
            self.recovery_offset_bytes.unwrap_or(RECOVERY_NONE),
        );
        if let Some(bitmap) = self.bitmap {
            b.u64(OFF_BITMAP_OFFSET, bitmap.offset_bytes);
            b.u64(OFF_BITMAP_BYTES, bitmap.bytes);
            b.u64(OFF_BITMAP_REGION, bitmap.region_bytes);
        }
        if let Some(used) = self.used_map {
            b.u64(OFF_USED_OFFSET, used.offset_bytes);
            b.u64(OFF_USED_BYTES, used.bytes);
            b.u64(OFF_USED_REGION, used.region_bytes);
        }
        if let Some(resync) = self.resync_offset_bytes {
            b.u64(OFF_RESYNC, resync);
        }
        if let Some(offset) = self.replace_offset_bytes {
            b.u64(OFF_REPLACE, offset);
        }
        if let Some(journal) = self.journal {
            b.put(OFF_JOURNAL_UUID, journal.uuid.as_bytes());
            b.u32(OFF_JOURNAL_KIND, journal.kind);
        }
        if let Some(owner) = &self.owner {
            b.put(OFF_OWNER_HOST_ID, &owner.process.host_id);
            b.put(OFF_OWNER_BOOT_ID, &owner.process.boot_id);
            b.u32(OFF_OWNER_PID, owner.process.pid);
            b.u32(OFF_OWNER_LEASE, owner.lease_secs);
            b.u64(OFF_OWNER_START_TICKS, owner.process.start_ticks);
            b.u64(OFF_OWNER_SINCE, owner.since_secs);
            b.u64(OFF_OWNER_RENEWED, owner.renewed_secs);
            b.u64(OFF_OWNER_PID_NS, owner.process.pid_namespace);
            b.put(OFF_OWNER_HOST_NAME, owner.process.host_name.as_bytes());
        }
        if let Some(area) = &self.encryption {
            b.put(OFF_KEY_AREA, &area.encode());
        }
        if let Some(at) = self.bad_blocks {
            b.u64(OFF_BAD_BLOCKS_OFFSET, at.offset_bytes);
            b.u64(OFF_BAD_BLOCKS_BYTES, at.bytes);
        }
        if let Some(at) = &self.checksum {
            at.encode(b.0);
        }
        if let Some(record) = &self.reshape {
            record.encode(b.0);
        }
    }

    /// Decodes and validates on-disk bytes.
    pub fn decode(bytes: &[u8; SUPERBLOCK_BYTES]) -> Result<Superblock, SuperblockError> {
        if get::<8>(bytes, OFF_MAGIC) != MAGIC {
            return Err(SuperblockError::NoMagic);
        }
        let stored = get_u32(bytes, OFF_CHECKSUM);
        let computed = checksum(bytes);
        if stored != computed {
            return Err(SuperblockError::Checksum { stored, computed });
        }
        let version = get_u32(bytes, OFF_VERSION);
        if version != FORMAT_VERSION {
            return Err(SuperblockError::Version { found: version });
        }
        let feature_incompat = get_u64(bytes, OFF_FEATURE_INCOMPAT);
        if feature_incompat & !FEATURE_INCOMPAT_KNOWN != 0 {
            return Err(SuperblockError::Features {
                unknown: feature_incompat & !FEATURE_INCOMPAT_KNOWN,
            });
        }
        let sb = Superblock::decode_fields(bytes, version, feature_incompat)?;
        sb.validate()?;
        Ok(sb)
    }

    fn decode_fields(
        bytes: &[u8; SUPERBLOCK_BYTES],
        version: u32,
        feature_incompat: u64,
    ) -> Result<Superblock, SuperblockError> {
        let sb_bytes = get_u32(bytes, OFF_SB_BYTES);
        if sb_bytes as usize != SUPERBLOCK_BYTES {
            return Err(field_err(
                "superblock_bytes",
                format!("{sb_bytes}, expected 4096"),
            ));
        }
        let level_raw = get_u32(bytes, OFF_LEVEL);
        let level = level_from_code(level_raw)
            .ok_or_else(|| field_err("level", format!("unknown level code {level_raw}")))?;
        let role = match get_u32(bytes, OFF_ROLE) {
            ROLE_SPARE => Role::Spare,
            r => Role::Active(r),
        };
        let state = match get_u32(bytes, OFF_STATE) {
            0 => ArrayState::Clean,
            1 => ArrayState::Dirty,
            s => return Err(field_err("state", format!("unknown state code {s}"))),
        };
        Ok(Superblock {
            version,
            feature_compat: get_u64(bytes, OFF_FEATURE_COMPAT),
            feature_incompat,
            array_uuid: Uuid::from_bytes(get(bytes, OFF_ARRAY_UUID)),
            member_uuid: Uuid::from_bytes(get(bytes, OFF_MEMBER_UUID)),
            name: decode_name(bytes)?,
            level,
            layout: get_u32(bytes, OFF_LAYOUT),
            chunk_bytes: get_u64(bytes, OFF_CHUNK),
            member_count: get_u32(bytes, OFF_MEMBER_COUNT),
            role,
            data_offset_bytes: get_u64(bytes, OFF_DATA_OFFSET),
            data_bytes: get_u64(bytes, OFF_DATA_BYTES),
            array_size_bytes: get_u64(bytes, OFF_ARRAY_SIZE),
            member_bytes: get_u64(bytes, OFF_MEMBER_BYTES),
            ctime_secs: get_u64(bytes, OFF_CTIME),
            utime_secs: get_u64(bytes, OFF_UTIME),
            events: get_u64(bytes, OFF_EVENTS),
            state,
            recovery_offset_bytes: match get_u64(bytes, OFF_RECOVERY) {
                RECOVERY_NONE => None,
                r => Some(r),
            },
            resync_offset_bytes: (get_u64(bytes, OFF_FEATURE_COMPAT)
                & FEATURE_COMPAT_RESYNC_OFFSET
                != 0)
                .then(|| get_u64(bytes, OFF_RESYNC)),
            replace_offset_bytes: decode_replace_offset(bytes),
            bitmap: decode_bitmap(bytes),
            used_map: decode_used_map(bytes, feature_incompat)?,
            journal: decode_journal(bytes),
            owner: decode_owner(bytes)?,
            roles: decode_roles(bytes)?,
            encryption: decode_key_area(bytes, feature_incompat)?,
            bad_blocks: decode_bad_blocks(bytes, feature_incompat)?,
            checksum: ChecksumRef::decode(bytes, feature_incompat).map_err(checksum_field)?,
            reshape: ReshapeRecord::decode(bytes, feature_incompat)
                .map_err(|reason| field_err("reshape", reason))?,
        })
    }

    /// Checks every invariant of a superblock (used before encoding and after decoding).
    pub fn validate(&self) -> Result<(), SuperblockError> {
        validate_name(&self.name).map_err(|r| field_err("name", r))?;
        if self.layout != 0 {
            return Err(field_err(
                "layout",
                format!("unknown layout {}", self.layout),
            ));
        }
        let chunk = self.chunk_bytes;
        if !chunk.is_power_of_two()
            || !(layout::CHUNK_BYTES_MIN..=layout::CHUNK_BYTES_MAX).contains(&chunk)
        {
            return Err(field_err(
                "chunk_bytes",
                format!("{chunk} is not a power of two in 4 KiB..4 MiB"),
            ));
        }
        let count = self.member_count as usize;
        if count < self.level.min_members() || count > MAX_MEMBERS {
            return Err(field_err(
                "member_count",
                format!("{count} members for {}", self.level),
            ));
        }
        if let Role::Active(r) = self.role {
            if r as usize >= count {
                return Err(field_err(
                    "role",
                    format!("role {r} but only {count} members"),
                ));
            }
        }
        let data_end = self.data_offset_bytes.checked_add(self.data_bytes);
        aligned_past_superblock("data_offset", self.data_offset_bytes)?;
        if data_end.is_none_or(|end| end > self.member_bytes) || self.data_bytes == 0 {
            return Err(field_err(
                "data_bytes",
                format!(
                    "{} bytes at {} do not fit a member of {} bytes",
                    self.data_bytes, self.data_offset_bytes, self.member_bytes
                ),
            ));
        }
        self.validate_refs()?;
        self.validate_roles()
    }

    fn validate_refs(&self) -> Result<(), SuperblockError> {
        self.validate_bitmap()?;
        self.validate_used_map()?;
        self.validate_checksum()?;
        self.validate_reshape()?;
        if self.journal.is_some_and(|j| j.kind == 0) {
            return Err(field_err("journal", "a journal of kind 0"));
        }
        offset_within(
            "recovery_offset",
            self.recovery_offset_bytes,
            self.data_bytes,
            "the data area",
        )?;
        present_with_bit(
            "resync_offset",
            self.feature_compat & FEATURE_COMPAT_RESYNC_OFFSET != 0,
            self.resync_offset_bytes.is_some(),
            "the offset",
        )?;
        offset_within(
            "resync_offset",
            self.resync_offset_bytes,
            self.array_size_bytes,
            "the end of the array",
        )?;
        self.validate_owner()?;
        present_with_bit(
            "encryption",
            self.feature_incompat & FEATURE_INCOMPAT_ENCRYPTED != 0,
            self.encryption.is_some(),
            "a key area",
        )?;
        self.validate_replace()?;
        self.validate_bad_blocks()
    }

    fn validate_bad_blocks(&self) -> Result<(), SuperblockError> {
        present_with_bit(
            "bad_blocks",
            self.feature_incompat & FEATURE_INCOMPAT_BAD_BLOCKS != 0,
            self.bad_blocks.is_some(),
            "a bad-block list",
        )?;
        let Some(at) = self.bad_blocks else {
            return Ok(());
        };
        aligned_past_superblock("bad_blocks_offset", at.offset_bytes)?;
        if at.bytes != BAD_BLOCKS_AREA_BYTES {
            return Err(field_err(
                "bad_blocks_bytes",
                format!("{}, expected {BAD_BLOCKS_AREA_BYTES}", at.bytes),
            ));
        }
        if at.offset_bytes + at.bytes > self.data_offset_bytes {
            return Err(field_err(
                "bad_blocks_offset",
                format!(
                    "the list at {} ({} bytes) runs into the data area at {}",
                    at.offset_bytes, at.bytes, self.data_offset_bytes
                ),
            ));
        }
        let others = [
            self.bitmap.map(|b| ("bitmap", b.offset_bytes, b.bytes)),
            self.used_map.map(|u| ("used map", u.offset_bytes, u.bytes)),
        ];
        for (name, offset, bytes) in others.into_iter().flatten() {
            if at.offset_bytes < offset + bytes && offset < at.offset_bytes + at.bytes {
                return Err(field_err(
                    "bad_blocks_offset",
                    format!(
                        "the list at {} overlaps the {name} at {offset} ({bytes} bytes)",
                        at.offset_bytes
                    ),
                ));
            }
        }
        Ok(())
    }

    fn validate_owner(&self) -> Result<(), SuperblockError> {
        present_with_bit(
            "owner",
            self.feature_compat & FEATURE_COMPAT_OWNER != 0,
            self.owner.is_some(),
            "an owner",
        )?;
        let Some(owner) = &self.owner else {
            return Ok(());
        };
        if owner.lease_secs == 0 {
            return Err(field_err("owner", "a lease of 0 seconds"));
        }
        let name = owner.process.host_name.as_bytes();
        if name.len() > OWNER_HOST_NAME_BYTES_MAX || name.contains(&0) {
            return Err(field_err(
                "owner",
                "a host name longer than 64 bytes or with a NUL",
            ));
        }
        Ok(())
    }

    fn validate_replace(&self) -> Result<(), SuperblockError> {
        let recorded =
            self.replace_offset_bytes.is_some() || self.roles.iter().any(|e| e.replacing.is_some());
        if recorded && self.feature_compat & FEATURE_COMPAT_REPLACE == 0 {
            return Err(field_err("replace", "recorded without its feature bit"));
        }
        // The copy offset is recorded exactly on the spare the table names as replacing.
        let target = self.role == Role::Spare && self.replacing_role(self.member_uuid).is_some();
        if self.replace_offset_bytes.is_some() != target {
            return Err(field_err(
                "replace_offset",
                "present on a member that is not the recorded replacement, or missing on it",
            ));
        }
        offset_within(
            "replace_offset",
            self.replace_offset_bytes,
            self.data_bytes,
            "the data area",
        )
    }

    /// The metadata areas (name, offset, length) the superblock records: the bitmap, the used
    /// map, the bad-block list and, with `checksum`, the checksum area.
    fn metadata_areas(&self, checksum: bool) -> Vec<(&'static str, u64, u64)> {
        [
            self.bitmap.map(|b| ("bitmap", b.offset_bytes, b.bytes)),
            self.used_map.map(|u| ("used map", u.offset_bytes, u.bytes)),
            self.bad_blocks
                .map(|b| ("bad-block list", b.offset_bytes, b.bytes)),
            self.checksum
                .filter(|_| checksum)
                .map(|c| ("checksum area", c.offset_bytes, c.bytes)),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn validate_checksum(&self) -> Result<(), SuperblockError> {
        present_with_bit(
            "checksum",
            self.feature_incompat & FEATURE_INCOMPAT_CHECKSUM != 0,
            self.checksum.is_some(),
            "a checksum area",
        )?;
        let Some(at) = self.checksum else {
            return Ok(());
        };
        let others = self.metadata_areas(false);
        // A spare's own data area may be larger than any role's; the area covers the roles'.
        let covered = match self.role {
            Role::Active(_) => self.data_bytes,
            Role::Spare => 0,
        };
        let sb_end = crate::SUPERBLOCK_OFFSET + SUPERBLOCK_BYTES as u64;
        at.validate(sb_end, &others, self.data_offset_bytes, covered)
            .map_err(checksum_field)
    }

    fn validate_reshape(&self) -> Result<(), SuperblockError> {
        present_with_bit(
            "reshape",
            self.feature_incompat & FEATURE_INCOMPAT_RESHAPE != 0,
            self.reshape.is_some(),
            "a reshape record",
        )?;
        let Some(record) = self.reshape else {
            return Ok(());
        };
        let others = self.metadata_areas(true);
        let sb_end = crate::SUPERBLOCK_OFFSET + SUPERBLOCK_BYTES as u64;
        record
            .validate(
                self.level,
                self.chunk_bytes,
                self.member_count,
                sb_end,
                &others,
                self.data_offset_bytes,
            )
            .map_err(|reason| field_err("reshape", reason))
    }

    /// Sets (or removes) the checksum area together with its feature bit.
    pub fn set_checksum(&mut self, checksum: Option<ChecksumRef>) {
        self.checksum = checksum;
        match checksum {
            Some(_) => self.feature_incompat |= FEATURE_INCOMPAT_CHECKSUM,
            None => self.feature_incompat &= !FEATURE_INCOMPAT_CHECKSUM,
        }
    }

    fn validate_bitmap(&self) -> Result<(), SuperblockError> {
        present_with_bit(
            "bitmap",
            self.feature_incompat & FEATURE_INCOMPAT_BITMAP != 0,
            self.bitmap.is_some(),
            "a bitmap",
        )?;
        let Some(b) = self.bitmap else {
            return Ok(());
        };
        aligned_past_superblock("bitmap_offset", b.offset_bytes)?;
        let end = b.offset_bytes.checked_add(b.bytes);
        if b.bytes == 0
            || !b.bytes.is_multiple_of(4096)
            || end.is_none_or(|e| e > self.data_offset_bytes)
        {
            return Err(field_err(
                "bitmap_bytes",
                format!(
                    "{} bytes at {} do not fit before the data area",
                    b.bytes, b.offset_bytes
                ),
            ));
        }
        if !b.region_bytes.is_power_of_two() || b.region_bytes < 4096 {
            return Err(field_err(
                "bitmap_region_bytes",
                format!("{} is not a power of two of at least 4 KiB", b.region_bytes),
            ));
        }
        // The format's bound (what `create` writes, `bitmap::layout_for`): at most
        // BITMAP_REGIONS_MAX regions in at most BITMAP_BYTES_MAX bytes. A larger area, even
        // with a valid checksum, would have assembly read (and allocate) all of it.
        if b.bytes > BITMAP_BYTES_MAX {
            return Err(field_err(
                "bitmap_bytes",
                format!(
                    "{} bytes: a bitmap has at most {BITMAP_BYTES_MAX} ({BITMAP_REGIONS_MAX} regions)",
                    b.bytes
                ),
            ));
        }
        let regions = self.array_size_bytes.div_ceil(b.region_bytes);
        if regions > BITMAP_REGIONS_MAX {
            return Err(field_err(
                "bitmap_region_bytes",
                format!(
                    "{} bytes give {regions} regions of the array's {} bytes: at most {BITMAP_REGIONS_MAX}",
                    b.region_bytes, self.array_size_bytes
                ),
            ));
        }
        let capacity = b.bytes / 4096 * BITS_PER_BLOCK;
        if regions > capacity {
            return Err(field_err(
                "bitmap_bytes",
                format!(
                    "{} bytes hold {capacity} bits but the array has {regions} regions",
                    b.bytes
                ),
            ));
        }
        Ok(())
    }

    fn validate_used_map(&self) -> Result<(), SuperblockError> {
        present_with_bit(
            "used_map",
            self.feature_incompat & FEATURE_INCOMPAT_USED_MAP != 0,
            self.used_map.is_some(),
            "a used-regions map",
        )?;
        let Some(u) = self.used_map else {
            return Ok(());
        };
        aligned_past_superblock("used_map_offset", u.offset_bytes)?;
        let end = u.offset_bytes.checked_add(u.bytes);
        if u.bytes == 0
            || !u.bytes.is_multiple_of(4096)
            || u.bytes > USED_BYTES_MAX
            || end.is_none_or(|e| e > self.data_offset_bytes)
        {
            return Err(field_err(
                "used_map_bytes",
                format!(
                    "{} bytes at {} do not fit before the data area (at most {USED_BYTES_MAX})",
                    u.bytes, u.offset_bytes
                ),
            ));
        }
        // Not over the bitmap (the other metadata areas check themselves against it too).
        if let Some(b) = self.bitmap {
            if u.offset_bytes < b.offset_bytes + b.bytes
                && b.offset_bytes < u.offset_bytes + u.bytes
            {
                return Err(field_err(
                    "used_map_offset",
                    format!(
                        "the used map at {}..{} overlaps the bitmap at {}..{}",
                        u.offset_bytes,
                        u.offset_bytes + u.bytes,
                        b.offset_bytes,
                        b.offset_bytes + b.bytes
                    ),
                ));
            }
        }
        // Whole sync units (stripes, mirror chunks): a region's stripes are its own. During a
        // reshape the map keeps the old geometry's region (it is remapped at the end).
        let count = match self.reshape {
            Some(r) => r.old_member_count as usize,
            None => self.member_count as usize,
        };
        let areas: Vec<u64> = self.roles[..count].iter().map(|e| e.data_bytes).collect();
        let unit = layout::Geometry::new(self.level, self.chunk_bytes, &areas)
            .map(|g| g.unit_bytes())
            .map_err(|e| field_err("used_map_region_bytes", e.to_string()))?;
        let regions = self.array_size_bytes.div_ceil(u.region_bytes.max(1));
        if u.region_bytes == 0 || !u.region_bytes.is_multiple_of(unit) {
            return Err(field_err(
                "used_map_region_bytes",
                format!(
                    "{} is not a multiple of the sync unit ({unit})",
                    u.region_bytes
                ),
            ));
        }
        if regions > USED_REGIONS_MAX || regions > u.bytes / 4096 * BITS_PER_BLOCK {
            return Err(field_err(
                "used_map_region_bytes",
                format!(
                    "{} bytes give {regions} regions: at most {USED_REGIONS_MAX}, and {} bytes of map",
                    u.region_bytes, u.bytes
                ),
            ));
        }
        Ok(())
    }

    fn validate_roles(&self) -> Result<(), SuperblockError> {
        if self.roles.len() != MAX_MEMBERS {
            return Err(field_err(
                "roles",
                format!("{} slots, expected {MAX_MEMBERS}", self.roles.len()),
            ));
        }
        let count = self.member_count as usize;
        for (slot, entry) in self.roles.iter().enumerate() {
            let ok = match entry.state {
                RoleState::Active | RoleState::Faulty | RoleState::Missing => slot < count,
                RoleState::Unused | RoleState::Spare => slot >= count,
            };
            if !ok {
                return Err(field_err(
                    "roles",
                    format!("slot {slot} is {:?} in an array of {count}", entry.state),
                ));
            }
        }
        let replacing: Vec<(usize, u32)> = (self.roles.iter().enumerate())
            .filter_map(|(slot, e)| e.replacing.map(|r| (slot, r)))
            .collect();
        if let Some(&(slot, role)) = replacing.first() {
            let spare = self.roles[slot].state == RoleState::Spare;
            if replacing.len() > 1 || !spare || role as usize >= count {
                return Err(field_err(
                    "roles",
                    format!("slot {slot}: a replace of role {role} recorded on a slot that is not the only replacing spare"),
                ));
            }
        }
        if let Some(r) = self.role_index() {
            let entry = &self.roles[r];
            if entry.member_uuid != self.member_uuid || entry.data_bytes != self.data_bytes {
                return Err(field_err(
                    "roles",
                    format!("slot {r} does not describe this member"),
                ));
            }
        }
        Ok(())
    }
}

fn decode_name(bytes: &[u8; SUPERBLOCK_BYTES]) -> Result<String, SuperblockError> {
    let raw = &bytes[OFF_NAME..OFF_NAME + NAME_BYTES_MAX];
    let len = raw.iter().position(|&c| c == 0).unwrap_or(NAME_BYTES_MAX);
    if raw[len..].iter().any(|&c| c != 0) {
        return Err(field_err("name", "bytes after the terminating NUL"));
    }
    String::from_utf8(raw[..len].to_vec()).map_err(|_| field_err("name", "not UTF-8"))
}

fn decode_bitmap(bytes: &[u8; SUPERBLOCK_BYTES]) -> Option<BitmapRef> {
    let offset_bytes = get_u64(bytes, OFF_BITMAP_OFFSET);
    let enabled = get_u64(bytes, OFF_FEATURE_INCOMPAT) & FEATURE_INCOMPAT_BITMAP != 0;
    (offset_bytes != 0 || enabled).then(|| BitmapRef {
        offset_bytes,
        bytes: get_u64(bytes, OFF_BITMAP_BYTES),
        region_bytes: get_u64(bytes, OFF_BITMAP_REGION),
    })
}

/// The used-regions map, when `feature_incompat` says there is one; its bytes must be zero
/// otherwise.
fn decode_used_map(
    bytes: &[u8; SUPERBLOCK_BYTES],
    feature_incompat: u64,
) -> Result<Option<UsedMapRef>, SuperblockError> {
    if feature_incompat & FEATURE_INCOMPAT_USED_MAP == 0 {
        return match bytes[OFF_USED_OFFSET..OFF_USED_END].iter().all(|&b| b == 0) {
            true => Ok(None),
            false => Err(field_err(
                "used_map",
                "used-map bytes 3808..3840 present without feature_incompat bit 5",
            )),
        };
    }
    if get_u64(bytes, OFF_USED_REGION + 8) != 0 {
        return Err(field_err("used_map", "reserved bytes 3832..3840 not zero"));
    }
    Ok(Some(UsedMapRef {
        offset_bytes: get_u64(bytes, OFF_USED_OFFSET),
        bytes: get_u64(bytes, OFF_USED_BYTES),
        region_bytes: get_u64(bytes, OFF_USED_REGION),
    }))
}

fn decode_journal(bytes: &[u8; SUPERBLOCK_BYTES]) -> Option<JournalRef> {
    let kind = get_u32(bytes, OFF_JOURNAL_KIND);
    (kind != 0).then(|| JournalRef {
        uuid: Uuid::from_bytes(get(bytes, OFF_JOURNAL_UUID)),
        kind,
    })
}

/// The owner record, when `feature_compat` bit 1 says there is one.
/// The key area, when `feature_incompat` says there is one.
fn decode_key_area(
    bytes: &[u8; SUPERBLOCK_BYTES],
    feature_incompat: u64,
) -> Result<Option<crypt::KeyArea>, SuperblockError> {
    let area = &bytes[OFF_KEY_AREA..OFF_KEY_AREA + crypt::KEY_AREA_BYTES];
    if feature_incompat & FEATURE_INCOMPAT_ENCRYPTED == 0 {
        // Zero in every array without encryption: key slots without the bit are damage (or
        // the bit lost), never something to serve as plaintext.
        return match area.iter().all(|&b| b == 0) {
            true => Ok(None),
            false => Err(field_err(
                "encryption",
                "key area bytes present without feature_incompat bit 1",
            )),
        };
    }
    crypt::KeyArea::decode(area)
        .map(Some)
        .map_err(|e| field_err("encryption", e.0))
}

/// The bad-block list reference, when `feature_incompat` bit 3 says there is one; without the
/// bit its bytes must be zero (as the key area's).
fn decode_bad_blocks(
    bytes: &[u8; SUPERBLOCK_BYTES],
    feature_incompat: u64,
) -> Result<Option<BadBlocksRef>, SuperblockError> {
    let with_bit = feature_incompat & FEATURE_INCOMPAT_BAD_BLOCKS != 0;
    let rest_zero = bytes[OFF_BAD_BLOCKS_BYTES + 8..BAD_BLOCKS_RANGE.end]
        .iter()
        .all(|&b| b == 0);
    if !rest_zero || (!with_bit && bytes[BAD_BLOCKS_RANGE].iter().any(|&b| b != 0)) {
        return Err(field_err(
            "bad_blocks",
            "bytes 3744..3776 hold more than the list reference, or one without feature_incompat bit 3",
        ));
    }
    Ok(with_bit.then(|| BadBlocksRef {
        offset_bytes: get_u64(bytes, OFF_BAD_BLOCKS_OFFSET),
        bytes: get_u64(bytes, OFF_BAD_BLOCKS_BYTES),
    }))
}

fn decode_owner(bytes: &[u8; SUPERBLOCK_BYTES]) -> Result<Option<Owner>, SuperblockError> {
    if get_u64(bytes, OFF_FEATURE_COMPAT) & FEATURE_COMPAT_OWNER == 0 {
        return Ok(None);
    }
    let raw = &bytes[OFF_OWNER_HOST_NAME..OFF_OWNER_HOST_NAME + OWNER_HOST_NAME_BYTES_MAX];
    let len = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
    if raw[len..].iter().any(|&c| c != 0) {
        return Err(field_err(
            "owner",
            "host name bytes after the terminating NUL",
        ));
    }
    let host_name = String::from_utf8(raw[..len].to_vec())
        .map_err(|_| field_err("owner", "host name not UTF-8"))?;
    Ok(Some(Owner {
        process: OwnerProcess {
            host_id: get(bytes, OFF_OWNER_HOST_ID),
            boot_id: get(bytes, OFF_OWNER_BOOT_ID),
            pid_namespace: get_u64(bytes, OFF_OWNER_PID_NS),
            pid: get_u32(bytes, OFF_OWNER_PID),
            start_ticks: get_u64(bytes, OFF_OWNER_START_TICKS),
            host_name,
        },
        since_secs: get_u64(bytes, OFF_OWNER_SINCE),
        renewed_secs: get_u64(bytes, OFF_OWNER_RENEWED),
        lease_secs: get_u32(bytes, OFF_OWNER_LEASE),
    }))
}

fn has_replace(bytes: &[u8; SUPERBLOCK_BYTES]) -> bool {
    get_u64(bytes, OFF_FEATURE_COMPAT) & FEATURE_COMPAT_REPLACE != 0
}

/// The copy offset, on the replacement target only (a spare its own table names as replacing).
fn decode_replace_offset(bytes: &[u8; SUPERBLOCK_BYTES]) -> Option<u64> {
    let spare = get_u32(bytes, OFF_ROLE) == ROLE_SPARE;
    (has_replace(bytes) && spare && replace_target(bytes)).then(|| get_u64(bytes, OFF_REPLACE))
}

/// Whether this spare's own uuid is recorded as a replacement target in its table.
fn replace_target(bytes: &[u8; SUPERBLOCK_BYTES]) -> bool {
    let uuid: [u8; 16] = get(bytes, OFF_MEMBER_UUID);
    (0..MAX_MEMBERS).any(|slot| {
        let at = OFF_ROLE_TABLE + slot * ROLE_ENTRY_BYTES;
        get::<16>(bytes, at) == uuid && bytes[at + 25] & ENTRY_FLAG_REPLACING != 0
    })
}

fn decode_roles(bytes: &[u8; SUPERBLOCK_BYTES]) -> Result<Vec<RoleEntry>, SuperblockError> {
    let replace = has_replace(bytes);
    (0..MAX_MEMBERS)
        .map(|slot| {
            let at = OFF_ROLE_TABLE + slot * ROLE_ENTRY_BYTES;
            let code = bytes[at + 24];
            let state = role_state_from_code(code).ok_or_else(|| {
                field_err("roles", format!("slot {slot}: unknown state code {code}"))
            })?;
            let flagged = replace && bytes[at + 25] & ENTRY_FLAG_REPLACING != 0;
            Ok(RoleEntry {
                member_uuid: Uuid::from_bytes(get(bytes, at)),
                data_bytes: get_u64(bytes, at + 16),
                state,
                replacing: flagged.then(|| get_u32(bytes, at + 28)),
            })
        })
        .collect()
}

/// An unused role-table slot.
pub const UNUSED_ROLE: RoleEntry = RoleEntry {
    member_uuid: Uuid::nil(),
    data_bytes: 0,
    state: RoleState::Unused,
    replacing: None,
};

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

/// The bytes of a superblock's first sector that are the member's own (its uuid, role, sizes,
/// events, state, recovery and replace offsets): what a torn superblock's first sector
/// contributes to [`splice_torn`].
const OWN_FIRST_SECTOR: [std::ops::Range<usize>; 6] = [
    OFF_MEMBER_UUID..OFF_NAME,
    OFF_ROLE..OFF_DATA_OFFSET,
    OFF_DATA_BYTES..OFF_ARRAY_SIZE,
    OFF_MEMBER_BYTES..OFF_CTIME,
    OFF_EVENTS..OFF_BITMAP_OFFSET,
    OFF_REPLACE..OFF_ROLE_TABLE,
];
/// First-sector bytes that change from one generation of the array's superblocks to the next
/// (compatible features, times, journal reference, resync offset, the first role-table
/// entries): taken from the peer.
const GENERATION_FIRST_SECTOR: [std::ops::Range<usize>; 4] = [
    OFF_FEATURE_COMPAT..OFF_FEATURE_INCOMPAT,
    OFF_CTIME..OFF_EVENTS,
    OFF_JOURNAL_UUID..OFF_REPLACE,
    OFF_ROLE_TABLE..FIRST_SECTOR_BYTES,
];
/// A disk writes a 512-byte sector whole or not at all (md and every filesystem rely on it).
const FIRST_SECTOR_BYTES: usize = 512;

/// A torn superblock (`raw`: its checksum fails) rebuilt from its first sector and `peer`, the
/// freshest valid superblock of the array its first sector names. A power cut during a rewrite
/// tears the 4 KiB at 512-byte sectors, so the first sector is one whole version of this
/// member's superblock, the one before or the one after the rewrite: its own fields there
/// (member uuid, role, data and member sizes, events, state, recovery and replace offsets) are
/// what the member held just before or just after its write, and both are states the assembly
/// rules already judge. Everything else (the role table, owner, key area, area references) is
/// the peer's. `None` when the first sector does not match the peer in everything array-wide
/// (magic, version, incompatible features, array uuid, name, level, layout, chunk, member count,
/// data offset, array size, bitmap reference): then it is not provably this array's member as
/// the peers describe it. The result never claims more events than the peer (`min`), so it is
/// never the one superblock that decides the array, and it is dirty when either says dirty.
pub(crate) fn splice_torn(raw: &[u8; SUPERBLOCK_BYTES], peer: &Superblock) -> Option<Superblock> {
    let mut bytes = peer.encode();
    let own = |i: &usize| OWN_FIRST_SECTOR.iter().any(|r| r.contains(i));
    let generation = |i: &usize| GENERATION_FIRST_SECTOR.iter().any(|r| r.contains(i));
    let array_wide_equal = (0..FIRST_SECTOR_BYTES)
        .filter(|i| !own(i) && !generation(i))
        .all(|i| raw[i] == bytes[i]);
    if !array_wide_equal {
        return None;
    }
    for range in OWN_FIRST_SECTOR {
        bytes[range.clone()].copy_from_slice(&raw[range]);
    }
    let crc = checksum(&bytes);
    bytes[OFF_CHECKSUM..].copy_from_slice(&crc.to_le_bytes());
    let mut sb = Superblock::decode(&bytes).ok()?;
    sb.events = sb.events.min(peer.events);
    if peer.state == ArrayState::Dirty {
        sb.state = ArrayState::Dirty;
    }
    Some(sb)
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A checksum area's reason for refusing, as the superblock's `checksum` field error.
fn checksum_field(reason: String) -> SuperblockError {
    SuperblockError::Field {
        field: "checksum",
        reason,
    }
}

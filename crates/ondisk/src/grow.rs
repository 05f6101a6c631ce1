//! Growing a stopped array without moving data (`raidkit grow`, docs/DESIGN.md "Reshape"):
//! [`grow_size_max`] takes the room of members replaced by larger ones, [`grow_add_linear`]
//! appends members to a linear array. Both rewrite every member's superblock with `events + 1`
//! (the new size recorded crash-safely: see "Crash safety" in docs/FORMAT.md "Growing").

use std::fmt;
use std::io;
use std::sync::Arc;

use layout::{Geometry, Level};
use member::Member;
use uuid::Uuid;

use crate::bitmap::{
    encode_area, put_bit, read_image, read_map_image, BitmapRef, BITS_BYTES_PER_BLOCK,
    BITS_PER_BLOCK,
};
use crate::now_secs;
use crate::superblock::{
    read_superblock, ArrayState, Role, RoleEntry, RoleState, Superblock, MAX_MEMBERS,
    SUPERBLOCK_OFFSET,
};
use crate::usedmap::{UsedMapRef, USED_REGIONS_MAX};

/// The incompatible features whose metadata a grow keeps right: the bitmap and the used map
/// (their region grows), the key area (the tweak is the array sector: unchanged), the
/// bad-block lists (member offsets: unchanged). A feature added later is refused until grow
/// learns it.
const GROWS_WITH: u64 = crate::superblock::FEATURE_INCOMPAT_BITMAP
    | crate::superblock::FEATURE_INCOMPAT_ENCRYPTED
    | crate::superblock::FEATURE_INCOMPAT_USED_MAP
    | crate::superblock::FEATURE_INCOMPAT_BAD_BLOCKS;

/// Why a grow did not happen. Nothing was written unless the error is `Io` while writing.
#[derive(Debug)]
pub enum GrowError {
    /// The array cannot grow as asked; the text names the array, the reason and what to do.
    Refused(String),
    /// Reading or writing a member failed.
    Io {
        name: String,
        action: &'static str,
        source: io::Error,
    },
}

impl fmt::Display for GrowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrowError::Refused(reason) => f.write_str(reason),
            GrowError::Io {
                name,
                action,
                source: _,
            } => write!(f, "member {name}: cannot {action}"),
        }
    }
}

impl std::error::Error for GrowError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GrowError::Io { source, .. } => Some(source),
            GrowError::Refused(_) => None,
        }
    }
}

/// How the room a grow added became consistent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewSpace {
    /// The level keeps no redundancy: nothing to make consistent.
    NoRedundancy,
    /// Every member was cheap to zero (files, RAM): the new part of each data area was zeroed
    /// (zero data has zero parity and equal mirrors).
    Zeroed,
    /// A resync offset at the old size was recorded: the next start resyncs the new part in
    /// the background.
    Resync { from: u64 },
}

/// What a grow did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrowReport {
    /// "\"NAME\" UUID".
    pub array: String,
    pub old_size: u64,
    pub new_size: u64,
    pub new_space: NewSpace,
    /// Events after the grow.
    pub events: u64,
    /// Things the operator should know (room left unused, ...).
    pub notes: Vec<String>,
}

pub(crate) fn io_err<'a>(
    name: &'a str,
    action: &'static str,
) -> impl FnOnce(io::Error) -> GrowError + 'a {
    move |source| GrowError::Io {
        name: name.to_string(),
        action,
        source,
    }
}

/// The superblocks [`read_array`] read and checked.
pub(crate) struct Read {
    /// Each member's, in the order given.
    pub(crate) sbs: Vec<Superblock>,
    /// The freshest (all are as fresh: checked).
    pub(crate) fresh: Superblock,
    /// "\"NAME\" UUID", for messages.
    pub(crate) array: String,
}

pub(crate) fn refusal(array: &str, why: String) -> GrowError {
    GrowError::Refused(format!("cannot grow array {array}: {why}"))
}

/// Every member's superblock (in the order given) and the freshest of them; a member of
/// another array is refused.
pub(crate) fn read_superblocks(
    members: &[Arc<dyn Member>],
) -> Result<(Vec<Superblock>, Superblock), GrowError> {
    let mut sbs = Vec::with_capacity(members.len());
    for m in members {
        let sb = read_superblock(m.as_ref()).map_err(|e| {
            GrowError::Refused(format!(
                "member {}: {e}; give only the members of one stopped array",
                m.name()
            ))
        })?;
        sbs.push(sb);
    }
    let Some(fresh) = sbs.iter().max_by_key(|sb| sb.events).cloned() else {
        return Err(GrowError::Refused("no members given".to_string()));
    };
    let array = format!("\"{}\" {}", fresh.name, fresh.array_uuid);
    for (m, sb) in members.iter().zip(&sbs) {
        if sb.array_uuid != fresh.array_uuid {
            return Err(refusal(
                &array,
                format!(
                    "member {} belongs to array \"{}\" {}; give only this array's members",
                    m.name(),
                    sb.name,
                    sb.array_uuid
                ),
            ));
        }
    }
    Ok((sbs, fresh))
}

/// The stopped array on `members` (every member holding a role and every listed spare, any
/// order), read and checked: one array, every member current, clean, every role active and
/// in sync, no replace, no bitmap bit set.
pub(crate) fn read_array(members: &[Arc<dyn Member>]) -> Result<Read, GrowError> {
    let (sbs, fresh) = read_superblocks(members)?;
    let array = format!("\"{}\" {}", fresh.name, fresh.array_uuid);
    let refuse = |why: String| refusal(&array, why);
    for (m, sb) in members.iter().zip(&sbs) {
        if sb.events != fresh.events {
            return Err(refuse(format!(
                "member {} is behind (events {} < {}); start the array once (it is rebuilt or \
                 left out), stop it cleanly and grow without it if it is left out",
                m.name(),
                sb.events,
                fresh.events
            )));
        }
        if !fresh
            .roles
            .iter()
            .any(|e| e.member_uuid == sb.member_uuid && e.state != RoleState::Unused)
        {
            return Err(refuse(format!(
                "member {} is not listed by the array's role table; leave it out",
                m.name()
            )));
        }
    }
    let unknown = fresh.feature_incompat & !GROWS_WITH;
    if unknown != 0 {
        return Err(refuse(format!(
            "it uses features (incompatible bits {unknown:#x}) whose metadata grow does not \
             resize yet"
        )));
    }
    if fresh.state != ArrayState::Clean {
        return Err(refuse(
            "it was not stopped cleanly (state dirty); start it, let its resync finish and \
             stop it, then grow"
                .to_string(),
        ));
    }
    if fresh.roles.iter().any(|e| e.replacing.is_some()) {
        return Err(refuse(
            "a replace is under way; start the array and let it finish first".to_string(),
        ));
    }
    let given = |uuid: Uuid| sbs.iter().position(|sb| sb.member_uuid == uuid);
    for (r, entry) in fresh.roles.iter().enumerate() {
        let needed = r < fresh.member_count as usize || entry.state == RoleState::Spare;
        if !needed {
            continue;
        }
        if r < fresh.member_count as usize && entry.state != RoleState::Active {
            return Err(refuse(format!(
                "role {r} is {:?}; start the array and let it rebuild the role (raidkit add), \
                 then grow",
                entry.state
            )));
        }
        let Some(i) = given(entry.member_uuid) else {
            return Err(refuse(format!(
                "the member holding {} ({}) was not given; grow needs every member and spare",
                match r < fresh.member_count as usize {
                    true => format!("role {r}"),
                    false => "a spare".to_string(),
                },
                entry.member_uuid
            )));
        };
        if sbs[i].recovery_offset_bytes.is_some() {
            return Err(refuse(format!(
                "member {} is being rebuilt; start the array and let the rebuild finish first",
                members[i].name()
            )));
        }
    }
    if let Some(at) = fresh.bitmap {
        let regions = fresh.array_size_bytes.div_ceil(at.region_bytes);
        for (m, sb) in members.iter().zip(&sbs) {
            if sb.role_index().is_none() {
                continue;
            }
            let (image, bad) = read_image(m.as_ref(), &fresh.array_uuid, &at, regions)
                .map_err(io_err(m.name(), "read the write-intent bitmap of"))?;
            if bad > 0 || image.iter().any(|b| *b != 0) {
                return Err(refuse(format!(
                    "member {}'s write-intent bitmap has dirty regions (writes whose resync is \
                     pending); start the array, let its resync finish and stop it, then grow",
                    m.name()
                )));
            }
        }
    }
    Ok(Read { sbs, fresh, array })
}

/// The bitmap for an array of `size` bytes in the area `old` has: the same area, the region
/// doubled until the area's bits cover the array (all bits are clear: [`read_array`] checked,
/// so no bit changes meaning and no block is rewritten).
pub(crate) fn bitmap_for(old: BitmapRef, size: u64) -> BitmapRef {
    let capacity = old.bytes / 4096 * BITS_PER_BLOCK;
    let mut region = old.region_bytes;
    while size.div_ceil(region) > capacity.min(crate::BITMAP_REGIONS_MAX) {
        region *= 2;
    }
    BitmapRef {
        region_bytes: region,
        ..old
    }
}

/// The used-regions map for an array of `size` bytes in the area `old` has: the same area, the
/// region doubled until the area's bits cover the array (still whole sync units).
pub(crate) fn used_map_for(old: UsedMapRef, size: u64) -> UsedMapRef {
    let capacity = old.bytes / 4096 * BITS_PER_BLOCK;
    let mut region = old.region_bytes;
    while size.div_ceil(region) > capacity.min(USED_REGIONS_MAX) {
        region *= 2;
    }
    UsedMapRef {
        region_bytes: region,
        ..old
    }
}

/// The used-regions map of the array: the union of the role members' maps (a block that fails
/// its check counts as all used), `regions` bits.
pub(crate) fn read_used(
    holders: &[&Arc<dyn Member>],
    uuid: &Uuid,
    at: &UsedMapRef,
    regions: u64,
) -> Result<Vec<u8>, GrowError> {
    let mut union = vec![0u8; regions.div_ceil(8) as usize];
    for m in holders {
        let (image, _) = read_map_image(m.as_ref(), uuid, &at.area(), regions)
            .map_err(io_err(m.name(), "read the used-regions map of"))?;
        union.iter_mut().zip(&image).for_each(|(u, i)| *u |= i);
    }
    Ok(union)
}

/// Writes `image` as the used-regions map at `at` on every one of `holders`, then flushes them.
pub(crate) fn write_used(
    holders: &[&Arc<dyn Member>],
    uuid: &Uuid,
    at: &UsedMapRef,
    image: &[u8],
) -> Result<(), GrowError> {
    let area = encode_area(uuid, &at.area(), image);
    for m in holders {
        m.write_at(&area, at.offset_bytes)
            .map_err(io_err(m.name(), "write the used-regions map to"))?;
    }
    for m in holders {
        m.flush().map_err(io_err(m.name(), "flush"))?;
    }
    Ok(())
}

/// Files (hole punch) and RAM members are zeroed instantly (as `create` judges).
fn cheap_to_zero(member: &dyn Member) -> bool {
    crate::create::cheap_to_zero(member)
}

/// Writes `sbs[i]` to `members[i]` for every `i`, then flushes them all.
/// Each member's superblock written and flushed before the next one's: a stop tears at most
/// one (which the offline grow's rerun rewrites from its peers, `repair_torn_superblocks`).
pub(crate) fn write_all(members: &[Arc<dyn Member>], sbs: &[Superblock]) -> Result<(), GrowError> {
    for (m, sb) in members.iter().zip(sbs) {
        m.write_at(&sb.encode()[..], SUPERBLOCK_OFFSET)
            .map_err(io_err(m.name(), "write the superblock to"))?;
        m.flush().map_err(io_err(m.name(), "flush"))?;
    }
    Ok(())
}

/// `raidkit grow --size max` on a stopped array: every role's data area grows to what its
/// member now holds (the smallest member, rounded down to the chunk, for the striped and
/// mirrored levels; linear: the last member only, since the others' data would move). The
/// new part of a redundant array is zeroed when every member is cheap to zero, otherwise
/// resynced by the next start (a resync offset at the old size). Refused when nothing grows.
pub fn grow_size_max(members: &[Arc<dyn Member>]) -> Result<GrowReport, GrowError> {
    let Read { sbs, fresh, array } = read_array(members)?;
    let refuse = |why: String| refusal(&array, why);
    let count = fresh.member_count as usize;
    let holder = |r: usize| {
        sbs.iter()
            .position(|sb| sb.role_index() == Some(r))
            .expect("read_array found every role")
    };
    let mut notes = Vec::new();
    let mut areas = Vec::with_capacity(count);
    for r in 0..count {
        let m = &members[holder(r)];
        let old = fresh.roles[r].data_bytes;
        let room = m.len().saturating_sub(fresh.data_offset_bytes);
        if room < old {
            return Err(refuse(format!(
                "member {} has {} bytes, less than the {} the array uses on it",
                m.name(),
                m.len(),
                fresh.data_offset_bytes + old
            )));
        }
        let last = r + 1 == count;
        if fresh.level == Level::Linear && !last {
            if room > old {
                notes.push(format!(
                    "member {} (role {r}) has {} bytes more, left unused: in a linear array only \
                     the last member can grow (the others' data would move)",
                    m.name(),
                    room - old
                ));
            }
            areas.push(old);
        } else {
            areas.push(room);
        }
    }
    let geometry =
        Geometry::new(fresh.level, fresh.chunk_bytes, &areas).map_err(|e| refuse(e.to_string()))?;
    let old_size = fresh.array_size_bytes;
    let new_size = geometry.size_bytes();
    if new_size <= old_size {
        return Err(refuse(format!(
            "it already uses all the room its members have ({old_size} bytes); replace \
             members by larger ones (raidkit replace) first{}",
            match fresh.level {
                Level::Linear => ", or add members (raidkit grow --add)",
                _ => "",
            }
        )));
    }
    let new_role_bytes: Vec<u64> = (0..count).map(|r| geometry.member_data_bytes(r)).collect();
    if fresh.level != Level::Linear {
        for (i, sb) in sbs.iter().enumerate() {
            let Role::Spare = sb.role else { continue };
            let room = members[i].len().saturating_sub(fresh.data_offset_bytes);
            if room < new_role_bytes[0] {
                return Err(refuse(format!(
                    "spare {} has a data area of {room} bytes, too small for the new {} per \
                     member; remove it (raidkit remove) or replace it by a larger one first",
                    members[i].name(),
                    new_role_bytes[0]
                )));
            }
        }
    }
    let new_space = if !fresh.level.has_redundancy() {
        NewSpace::NoRedundancy
    } else if members.iter().all(|m| cheap_to_zero(m.as_ref())) {
        for r in 0..count {
            let m = &members[holder(r)];
            let from = fresh.data_offset_bytes + fresh.roles[r].data_bytes;
            let len = new_role_bytes[r] - fresh.roles[r].data_bytes;
            m.trim(from, len)
                .map_err(io_err(m.name(), "zero the new part of"))?;
        }
        for m in members {
            m.flush().map_err(io_err(m.name(), "flush"))?;
        }
        NewSpace::Zeroed
    } else {
        let from = fresh.resync_offset_bytes.unwrap_or(old_size).min(old_size);
        NewSpace::Resync { from }
    };
    // The used-regions map (a bit per region that ever held data) keeps its area; when the
    // region must grow, its bits change meaning: every bit is set (all used: safe under either
    // region size) before the superblocks change, and the merged bits written after.
    let role_members: Vec<&Arc<dyn Member>> = (0..count).map(|r| &members[holder(r)]).collect();
    let uuid = fresh.array_uuid;
    let used = match fresh.used_map {
        Some(old) => {
            let image = read_used(&role_members, &uuid, &old, old.regions(old_size))?;
            let all = vec![0xFF; (old.bytes / 4096) as usize * BITS_BYTES_PER_BLOCK];
            write_used(&role_members, &uuid, &old, &all)?;
            Some((old, used_map_for(old, new_size), image))
        }
        None => None,
    };
    let now = now_secs();
    let events = fresh.events + 1;
    let mut table = fresh.roles.clone();
    for (r, bytes) in new_role_bytes.iter().enumerate() {
        table[r].data_bytes = *bytes;
    }
    // A spare's data size is its whole usable size (as `create` records it): it grows too.
    let spare_room = |m: &Arc<dyn Member>| m.len() - fresh.data_offset_bytes;
    for (m, sb) in members.iter().zip(&sbs) {
        if sb.role == Role::Spare {
            let entry = table
                .iter_mut()
                .find(|e| e.state == RoleState::Spare && e.member_uuid == sb.member_uuid)
                .expect("read_array found every spare listed");
            entry.data_bytes = spare_room(m);
        }
    }
    let updated: Vec<Superblock> = members
        .iter()
        .zip(&sbs)
        .map(|(m, sb)| {
            let mut sb = sb.clone();
            sb.events = events;
            sb.utime_secs = now;
            sb.array_size_bytes = new_size;
            sb.data_bytes = match sb.role_index() {
                Some(r) => new_role_bytes[r],
                None => spare_room(m),
            };
            sb.member_bytes = m.len();
            sb.roles = table.clone();
            sb.set_bitmap(fresh.bitmap.map(|b| bitmap_for(b, new_size)));
            if let NewSpace::Resync { from } = new_space {
                sb.set_resync_offset(Some(from));
            }
            sb.set_used_map(used.as_ref().map(|(_, new, _)| *new));
            sb
        })
        .collect();
    write_all(members, &updated)?;
    if let Some((old, new, image)) = used {
        let factor = new.region_bytes / old.region_bytes;
        let regions = new.regions(new_size);
        let mut merged = vec![0u8; regions.div_ceil(8) as usize];
        for r in 0..old.regions(old_size) {
            if crate::bitmap::bit(&image, r) {
                put_bit(&mut merged, r / factor, true);
            }
        }
        write_used(&role_members, &uuid, &new, &merged)?;
    }
    Ok(GrowReport {
        array,
        old_size,
        new_size,
        new_space,
        events,
        notes,
    })
}

/// `raidkit grow --add` on a stopped linear array: each new member is appended after the last
/// (no data moves), one at a time — the new member's superblock first, then every other
/// member's, each step `events + 1` — so a crash between two steps leaves an array with some
/// of the members added, every one of its superblocks naming members that carry one.
pub fn grow_add_linear(
    members: &[Arc<dyn Member>],
    new: &[Arc<dyn Member>],
    force: bool,
) -> Result<GrowReport, GrowError> {
    let Read { sbs, fresh, array } = read_array(members)?;
    let refuse = |why: String| refusal(&array, why);
    if fresh.level != Level::Linear {
        return Err(refuse(format!(
            "adding members to a {} array moves its data (a reshape), which this raidkit does \
             not do yet; only linear arrays take new members (raidkit add gives a redundant \
             array a spare)",
            fresh.level
        )));
    }
    if new.is_empty() {
        return Err(refuse("no new member given".to_string()));
    }
    let count = fresh.member_count as usize;
    if count + new.len() > MAX_MEMBERS {
        return Err(refuse(format!(
            "{} members and {} new ones: the most is {MAX_MEMBERS}",
            count,
            new.len()
        )));
    }
    let all: Vec<Arc<dyn Member>> = members.iter().chain(new).cloned().collect();
    if let Some((name, other)) = crate::find_duplicate(&all) {
        return Err(GrowError::Refused(crate::describe_duplicate(&name, &other)));
    }
    let min = fresh.data_offset_bytes + 4096;
    for m in new {
        if m.len() < min {
            return Err(refuse(format!(
                "new member {} has {} bytes; it needs at least {min} (the data offset and one \
                 4 KiB block)",
                m.name(),
                m.len()
            )));
        }
        if !force {
            crate::create::check_unused(m.as_ref())
                .map_err(|e| refuse(format!("{e} (raidkit grow --force)")))?;
        }
    }
    let old_size = fresh.array_size_bytes;
    let mut current: Vec<Superblock> = sbs;
    let mut holders: Vec<Arc<dyn Member>> = members.to_vec();
    for m in new {
        let base = current
            .iter()
            .max_by_key(|sb| sb.events)
            .cloned()
            .expect("read");
        let role = base.member_count as usize;
        let data_bytes = m.len() - base.data_offset_bytes;
        let mut sizes: Vec<u64> = (0..role).map(|r| base.roles[r].data_bytes).collect();
        sizes.push(data_bytes);
        let geometry = Geometry::new(base.level, base.chunk_bytes, &sizes)
            .map_err(|e| refuse(e.to_string()))?;
        let mut table = base.roles.clone();
        let uuid = Uuid::new_v4();
        table[role] = RoleEntry {
            member_uuid: uuid,
            data_bytes,
            state: RoleState::Active,
            replacing: None,
        };
        let now = now_secs();
        let bump = |sb: &Superblock| {
            let mut sb = sb.clone();
            sb.events = base.events + 1;
            sb.utime_secs = now;
            sb.member_count = role as u32 + 1;
            sb.array_size_bytes = geometry.size_bytes();
            sb.roles = table.clone();
            sb
        };
        let mut own = bump(&base);
        own.member_uuid = uuid;
        own.role = Role::Active(role as u32);
        own.data_bytes = data_bytes;
        own.member_bytes = m.len();
        own.recovery_offset_bytes = None;
        m.write_zeroes(0, base.data_offset_bytes)
            .map_err(io_err(m.name(), "zero the metadata area of"))?;
        write_all(std::slice::from_ref(m), std::slice::from_ref(&own))?;
        let rest: Vec<Superblock> = current.iter().map(bump).collect();
        write_all(&holders, &rest)?;
        current = rest;
        current.push(own);
        holders.push(m.clone());
    }
    let last = current.last().expect("a member was added");
    Ok(GrowReport {
        array,
        old_size,
        new_size: last.array_size_bytes,
        new_space: NewSpace::NoRedundancy,
        events: last.events,
        notes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{create, plan, AssemblyPlanOptions, CreateOptions};
    use std::path::{Path, PathBuf};

    const MIB: u64 = 1 << 20;

    fn files(dir: &Path, count: usize, bytes: u64) -> Vec<PathBuf> {
        (0..count)
            .map(|i| {
                let path = dir.join(format!("m{i}"));
                std::fs::File::create(&path)
                    .unwrap()
                    .set_len(bytes)
                    .unwrap();
                path
            })
            .collect()
    }

    fn open(paths: &[PathBuf]) -> Vec<Arc<dyn Member>> {
        paths
            .iter()
            .map(|p| member::open(p.to_str().unwrap(), &Default::default()).unwrap())
            .collect()
    }

    fn resize(paths: &[PathBuf], bytes: u64) {
        for p in paths {
            std::fs::OpenOptions::new()
                .write(true)
                .open(p)
                .unwrap()
                .set_len(bytes)
                .unwrap();
        }
    }

    fn assembled(members: &[Arc<dyn Member>]) -> crate::AssemblyPlan {
        let found: Vec<(String, Superblock)> = members
            .iter()
            .map(|m| (m.name().to_string(), read_superblock(m.as_ref()).unwrap()))
            .collect();
        plan(&found, &AssemblyPlanOptions::default()).unwrap()
    }

    fn refused(result: Result<GrowReport, GrowError>, says: &str) {
        match result {
            Err(GrowError::Refused(text)) => assert!(text.contains(says), "{text}"),
            other => panic!("expected a refusal saying {says:?}, got {other:?}"),
        }
    }

    /// A member as a file that `grow` cannot tell is one (a block device or remote member
    /// behaves so): the new part is resynced, not zeroed.
    #[derive(Debug)]
    struct Opaque(Arc<dyn Member>);

    impl Member for Opaque {
        fn name(&self) -> &str {
            "opaque"
        }
        fn len(&self) -> u64 {
            self.0.len()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.0.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            self.0.write_at(buf, offset)
        }
        fn flush(&self) -> io::Result<()> {
            self.0.flush()
        }
        fn trim(&self, _: u64, _: u64) -> io::Result<()> {
            panic!("grow must not zero a member it cannot zero cheaply")
        }
        fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
            self.0.write_zeroes(offset, len)
        }
    }

    #[test]
    fn raid5_takes_the_room_of_larger_members_and_zeroes_it() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), 3, 4 * MIB);
        let members = open(&paths);
        create(&members, &CreateOptions::new(Level::Raid5, "g")).unwrap();
        let before = assembled(&members).superblock;
        drop(members);
        // Old bytes in the room the larger members bring: the grow must zero them.
        resize(&paths, 8 * MIB);
        let members = open(&paths);
        for m in &members {
            m.write_at(&[0xAB; 4096], 6 * MIB).unwrap();
        }
        let report = grow_size_max(&members).unwrap();
        assert_eq!(report.old_size, before.array_size_bytes);
        assert_eq!(report.new_space, NewSpace::Zeroed);
        assert_eq!(report.events, before.events + 1);
        let after = assembled(&members).superblock;
        assert_eq!(after.array_size_bytes, report.new_size);
        assert_eq!(after.array_size_bytes, 2 * (7 * MIB));
        assert_eq!(after.events, before.events + 1);
        assert_eq!(after.resync_offset_bytes, None);
        for m in &members {
            let sb = read_superblock(m.as_ref()).unwrap();
            assert_eq!(sb.data_bytes, 7 * MIB);
            assert_eq!(sb.member_bytes, 8 * MIB);
            let mut buf = vec![1u8; 4096];
            m.read_at(&mut buf, 6 * MIB).unwrap();
            assert!(buf.iter().all(|b| *b == 0), "the new part is zeroed");
        }
        // The bitmap's one region covers the larger array too.
        let bitmap = after.bitmap.unwrap();
        assert!(
            after.array_size_bytes.div_ceil(bitmap.region_bytes)
                <= bitmap.bytes / 4096 * BITS_PER_BLOCK
        );
        refused(grow_size_max(&members), "already uses all the room");
    }

    #[test]
    fn the_used_map_keeps_its_area_and_its_used_regions_when_its_region_doubles() {
        let dir = tempfile::tempdir().unwrap();
        // Sparse files: RAID 5 of 3 x 127 MiB data, 8 KiB stripes and 8 KiB regions: 32512
        // regions, one block of map (32640 bits). Grown to 255 MiB each: the region doubles.
        let paths = files(dir.path(), 3, 128 * MIB);
        let mut opts = CreateOptions::new(Level::Raid5, "u");
        opts.chunk_bytes = 4096;
        opts.used_region_bytes = Some(8192);
        create(&open(&paths), &opts).unwrap();
        let members = open(&paths);
        let sb = read_superblock(members[0].as_ref()).unwrap();
        let old = sb.used_map.unwrap();
        assert_eq!((old.region_bytes, old.bytes), (8192, 4096));
        let regions = old.regions(sb.array_size_bytes);
        let mut image = vec![0u8; regions.div_ceil(8) as usize];
        for r in [5, 32000, 32511] {
            put_bit(&mut image, r, true);
        }
        // Region 7 is used on one member only: the union counts.
        let mut one = image.clone();
        put_bit(&mut one, 7, true);
        for (i, m) in members.iter().enumerate() {
            let bits = if i == 1 { &one } else { &image };
            m.write_at(
                &encode_area(&sb.array_uuid, &old.area(), bits),
                old.offset_bytes,
            )
            .unwrap();
        }
        drop(members);
        resize(&paths, 256 * MIB);
        let members = open(&paths);
        let report = grow_size_max(&members).unwrap();
        assert_eq!(report.new_size, 2 * 255 * MIB);
        let sb = assembled(&members).superblock;
        let new = sb.used_map.unwrap();
        assert_eq!((new.offset_bytes, new.bytes), (old.offset_bytes, old.bytes));
        assert_eq!(new.region_bytes, 16384);
        let regions = new.regions(sb.array_size_bytes);
        for m in &members {
            let (bits, bad) =
                read_map_image(m.as_ref(), &sb.array_uuid, &new.area(), regions).unwrap();
            assert_eq!(bad, 0);
            let set: Vec<u64> = (0..regions)
                .filter(|r| crate::bitmap::bit(&bits, *r))
                .collect();
            assert_eq!(set, vec![2, 3, 16000, 16255], "{}", m.name());
        }
    }

    #[test]
    fn members_that_cannot_be_zeroed_get_a_resync_from_the_old_size() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), 2, 4 * MIB);
        create(&open(&paths), &CreateOptions::new(Level::Raid1, "g")).unwrap();
        resize(&paths, 6 * MIB);
        let members: Vec<Arc<dyn Member>> = open(&paths)
            .into_iter()
            .map(|m| Arc::new(Opaque(m)) as Arc<dyn Member>)
            .collect();
        let report = grow_size_max(&members).unwrap();
        assert_eq!(report.new_space, NewSpace::Resync { from: 3 * MIB });
        let sb = assembled(&members).superblock;
        assert_eq!(sb.array_size_bytes, 5 * MIB);
        assert_eq!(sb.resync_offset_bytes, Some(3 * MIB));
    }

    #[test]
    fn a_crash_between_superblock_writes_assembles_the_grown_array() {
        // Before check_agrees took the size fields only from current members, this plan was
        // refused ("array_size_bytes" disagrees).
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), 4, 4 * MIB);
        create(&open(&paths), &CreateOptions::new(Level::Raid6, "g")).unwrap();
        let mut old = vec![0u8; 4096];
        open(&paths)[3]
            .read_at(&mut old, SUPERBLOCK_OFFSET)
            .unwrap();
        resize(&paths, 5 * MIB);
        let members = open(&paths);
        let report = grow_size_max(&members).unwrap();
        // The crash: the last member's superblock write never happened.
        members[3].write_at(&old, SUPERBLOCK_OFFSET).unwrap();
        let plan = assembled(&members);
        assert_eq!(plan.superblock.array_size_bytes, report.new_size);
        assert_eq!(plan.roles, vec![Some(0), Some(1), Some(2), Some(3)]);
        assert!(plan.stale.is_empty());
    }

    #[test]
    fn linear_grows_only_its_last_member_and_appends_new_ones() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), 2, 3 * MIB);
        create(&open(&paths), &CreateOptions::new(Level::Linear, "l")).unwrap();
        resize(&paths, 4 * MIB);
        let report = grow_size_max(&open(&paths)).unwrap();
        assert_eq!(report.new_size, 2 * MIB + 3 * MIB);
        assert_eq!(report.notes.len(), 1, "{:?}", report.notes);
        assert_eq!(report.new_space, NewSpace::NoRedundancy);

        let extra: Vec<PathBuf> = (0..2)
            .map(|i| {
                let p = dir.path().join(format!("new{i}"));
                std::fs::File::create(&p).unwrap().set_len(2 * MIB).unwrap();
                p
            })
            .collect();
        let members = open(&paths);
        let new = open(&extra);
        let report = grow_add_linear(&members, &new, false).unwrap();
        assert_eq!(
            report.new_size,
            5 * MIB + 2 * MIB,
            "two data areas of 1 MiB added"
        );
        let all: Vec<Arc<dyn Member>> = members.iter().chain(&new).cloned().collect();
        let plan = assembled(&all);
        assert_eq!(plan.superblock.member_count, 4);
        assert_eq!(plan.roles, vec![Some(0), Some(1), Some(2), Some(3)]);
        assert_eq!(plan.superblock.array_size_bytes, 7 * MIB);
    }

    #[test]
    fn a_crash_after_the_new_linear_member_s_superblock_assembles_it_added() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), 2, 3 * MIB);
        create(&open(&paths), &CreateOptions::new(Level::Linear, "l")).unwrap();
        let new_path = dir.path().join("new");
        std::fs::File::create(&new_path)
            .unwrap()
            .set_len(4 * MIB)
            .unwrap();
        let members = open(&paths);
        let before: Vec<Vec<u8>> = members
            .iter()
            .map(|m| {
                let mut b = vec![0u8; 4096];
                m.read_at(&mut b, SUPERBLOCK_OFFSET).unwrap();
                b
            })
            .collect();
        let new = open(&[new_path]);
        grow_add_linear(&members, &new, false).unwrap();
        // The crash: the old members' superblock writes never happened.
        for (m, b) in members.iter().zip(&before) {
            m.write_at(b, SUPERBLOCK_OFFSET).unwrap();
        }
        let all: Vec<Arc<dyn Member>> = members.iter().chain(&new).cloned().collect();
        let plan = assembled(&all);
        assert_eq!(plan.superblock.member_count, 3);
        assert_eq!(plan.superblock.array_size_bytes, 4 * MIB + 3 * MIB);
        assert_eq!(plan.roles, vec![Some(0), Some(1), Some(2)]);
        // Without the new member, the old members are the array as it was: nothing lost.
        let old = assembled(&members).superblock;
        assert_eq!((old.member_count, old.array_size_bytes), (2, 4 * MIB));
    }

    #[test]
    fn a_spare_too_small_for_the_new_size_is_refused_and_a_grown_one_grows_with_the_array() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), 3, 4 * MIB);
        let mut opts = CreateOptions::new(Level::Raid1, "s");
        let spare = open(&paths[2..]);
        opts.spares = spare.clone();
        create(&open(&paths[..2]), &opts).unwrap();
        drop((opts, spare));
        resize(&paths[..2], 8 * MIB);
        refused(grow_size_max(&open(&paths)), "spare");
        resize(&paths[2..], 8 * MIB);
        let members = open(&paths);
        grow_size_max(&members).unwrap();
        let plan = assembled(&members);
        assert_eq!(plan.spares, vec![2], "{:?}", plan.warnings);
        let spare = read_superblock(members[2].as_ref()).unwrap();
        assert_eq!(spare.data_bytes, 7 * MIB);
        assert_eq!(plan.superblock.roles[2].data_bytes, 7 * MIB);
    }

    #[test]
    fn refusals_name_the_array_and_the_remedy() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), 3, 4 * MIB);
        create(&open(&paths), &CreateOptions::new(Level::Raid0, "r")).unwrap();
        resize(&paths, 8 * MIB);
        let members = open(&paths);
        refused(grow_size_max(&members[..2]), "grow needs every member");
        let extra = dir.path().join("extra");
        std::fs::File::create(&extra)
            .unwrap()
            .set_len(8 * MIB)
            .unwrap();
        refused(
            grow_add_linear(&members, &open(&[extra]), false),
            "not do yet",
        );
        // A dirty array (a crash while served) must be resynced first.
        for m in &members {
            let mut sb = read_superblock(m.as_ref()).unwrap();
            sb.state = ArrayState::Dirty;
            m.write_at(&sb.encode()[..], SUPERBLOCK_OFFSET).unwrap();
        }
        refused(grow_size_max(&members), "not stopped cleanly");
    }
}

//! The superblock side of `raidkit grow --add` on RAID 0/5/6 (a reshape that moves data,
//! docs/DESIGN.md "Reshape"): [`reshape_start`] records it on a stopped array (the new
//! members' superblocks first, then the old ones', `events + 1`), [`reshape_open`] reads an
//! array mid-reshape, [`reshape_record_position`] records `P_rec`, [`reshape_finish`] records
//! the new geometry and clears the record. The data is moved by `engine::reshape` (the caller,
//! `raidkit grow`, runs it between these).

use std::sync::Arc;

use layout::{Geometry, Level};
use member::Member;
use uuid::Uuid;

use crate::grow::{
    bitmap_for, io_err, read_array, read_used, refusal, write_all, write_used, GrowError,
};
use crate::reshape_record::ReshapeRecord;
use crate::superblock::{Role, RoleEntry, RoleState, Superblock, MAX_MEMBERS};
use crate::usedmap::{UsedMapRef, USED_REGIONS_MAX};
use crate::{now_secs, FEATURE_INCOMPAT_CHECKSUM};

/// Bytes every member's reshape backup area holds for a new geometry of `level` with
/// `chunk_bytes`: a 4 KiB header and `parity + 1` chunks (`engine::reshape::BackupArea`'s
/// `bytes_per_member`, which `raidkit grow` asserts is the same).
pub fn backup_area_bytes(level: Level, chunk_bytes: u64) -> u64 {
    let parity = match level {
        Level::Raid5 => 1,
        Level::Raid6 => 2,
        _ => 0,
    };
    4096 + (parity + 1) * chunk_bytes
}

/// The members holding roles `0..count`, by role.
fn old_role_members<'a>(
    members: &'a [Arc<dyn Member>],
    sbs: &[Superblock],
    count: usize,
) -> Vec<&'a Arc<dyn Member>> {
    (0..count)
        .map(|r| {
            let i = sbs
                .iter()
                .position(|sb| sb.role_index() == Some(r))
                .expect("read_array found every role");
            &members[i]
        })
        .collect()
}

/// The array's used-regions map while it reshapes (the old region, the union of the given role
/// members' maps), or `None` without one: the mover copies zeroes for a clear region, so every
/// byte of a region the new map counts used holds what the array served.
pub fn reshape_used_image(
    members: &[Arc<dyn Member>],
    state: &Reshaping,
) -> Result<Option<(u64, Vec<u8>)>, GrowError> {
    let Some(at) = state.fresh.used_map else {
        return Ok(None);
    };
    let holders: Vec<&Arc<dyn Member>> =
        state.roles.iter().flatten().map(|&i| &members[i]).collect();
    let image = read_used(
        &holders,
        &state.fresh.array_uuid,
        &at,
        at.regions(state.fresh.array_size_bytes),
    )?;
    Ok(Some((at.region_bytes, image)))
}

/// The used map's region for the new geometry: its sync unit doubled until at least the old
/// region and until the map's area holds a bit per region of `size`.
fn region_for_new(old: &UsedMapRef, unit: u64, size: u64) -> u64 {
    let capacity = (old.bytes / 4096 * crate::bitmap::BITS_PER_BLOCK).min(USED_REGIONS_MAX);
    let mut region = unit;
    while region < old.region_bytes || size.div_ceil(region) > capacity {
        region *= 2;
    }
    region
}

/// An array mid-reshape, as its members' superblocks record it.
pub struct Reshaping {
    /// "\"NAME\" UUID".
    pub array: String,
    /// The freshest superblock (its record is the one that counts).
    pub fresh: Superblock,
    pub record: ReshapeRecord,
    /// For each role of the new geometry: the index of the member given for it, `None` if
    /// missing.
    pub roles: Vec<Option<usize>>,
    /// Every given member's superblock, in the order given.
    pub sbs: Vec<Superblock>,
    pub old: Geometry,
    pub new: Geometry,
    /// Roles whose members were not given and which `fresh.roles` now records missing, not yet
    /// on disk: the next position record must be written before data moves without them.
    pub unrecorded_missing: Vec<usize>,
}

/// `raidkit grow --add NEW… MEMBER…` on a stopped RAID 0/5/6 array: checks it (as `grow
/// --size max` does: every member current, clean, in sync; plus no journal, no block
/// checksums, room for the backup area) and records the reshape — each new member's metadata
/// area zeroed and its superblock written and flushed first, then every old member's and
/// spare's (`events + 1`, position 0). Returns the array as [`reshape_open`] would read it.
pub fn reshape_start(
    members: &[Arc<dyn Member>],
    new: &[Arc<dyn Member>],
    force: bool,
) -> Result<Reshaping, GrowError> {
    let crate::grow::Read { sbs, fresh, array } = read_array(members)?;
    let refuse = |why: String| refusal(&array, why);
    if !matches!(fresh.level, Level::Raid0 | Level::Raid5 | Level::Raid6) {
        return Err(refuse(format!(
            "adding members to a {} array is not built (built: linear, raid0, raid5, raid6); \
             raidkit add gives a redundant array a spare",
            fresh.level
        )));
    }
    if fresh.feature_incompat & FEATURE_INCOMPAT_CHECKSUM != 0 {
        return Err(refuse(
            "it keeps block checksums, which a reshape does not move yet".to_string(),
        ));
    }
    if let Some(j) = fresh.journal {
        return Err(refuse(format!(
            "it has a journal ({}); remove it first (raidkit journal remove), grow, then add it \
             again",
            j.uuid
        )));
    }
    if new.is_empty() {
        return Err(refuse("no new member given".to_string()));
    }
    // A bad-block list names member offsets, which the reshape gives other array addresses.
    for (m, sb) in members.iter().zip(&sbs) {
        let Some(at) = &sb.bad_blocks else { continue };
        let list = crate::badblocks::read_list(m.as_ref(), &fresh.array_uuid, at);
        if !list.as_ref().is_ok_and(|l| l.is_empty()) {
            return Err(refuse(format!(
                "member {} has a bad-block list that is not empty (or cannot be read), and a \
                 reshape does not move recorded bad blocks yet; start the array, rewrite the \
                 ranges `raidkit examine` lists (a write clears them) or replace the member, \
                 then grow",
                m.name()
            )));
        }
    }
    let count = fresh.member_count as usize;
    let spares = fresh
        .roles
        .iter()
        .filter(|e| e.state == RoleState::Spare)
        .count();
    if count + spares + new.len() > MAX_MEMBERS {
        return Err(refuse(format!(
            "{count} members, {spares} spares and {} new ones: the most is {MAX_MEMBERS}",
            new.len()
        )));
    }
    let all: Vec<Arc<dyn Member>> = members.iter().chain(new).cloned().collect();
    if let Some((name, other)) = crate::find_duplicate(&all) {
        return Err(GrowError::Refused(crate::describe_duplicate(&name, &other)));
    }
    let data_bytes = fresh.roles[0].data_bytes;
    if (0..count).any(|r| fresh.roles[r].data_bytes != data_bytes) {
        return Err(refuse(
            "its roles' data areas differ in size; run raidkit grow --size max first".to_string(),
        ));
    }
    let need = fresh.data_offset_bytes + data_bytes;
    for m in new {
        if m.len() < need {
            return Err(refuse(format!(
                "new member {} has {} bytes; it needs at least {need} (the data offset and the \
                 {data_bytes} bytes each member holds)",
                m.name(),
                m.len()
            )));
        }
        if !force && !left_by_interrupted_start(m.as_ref(), &fresh, count) {
            crate::create::check_unused(m.as_ref())
                .map_err(|e| refuse(format!("{e} (raidkit grow --force)")))?;
        }
    }
    let m_count = count + new.len();
    let old_geometry = Geometry::new(fresh.level, fresh.chunk_bytes, &vec![data_bytes; count])
        .map_err(|e| refuse(e.to_string()))?;
    let new_geometry = Geometry::new(fresh.level, fresh.chunk_bytes, &vec![data_bytes; m_count])
        .map_err(|e| refuse(e.to_string()))?;
    // The backup area goes after every other metadata area, before the data.
    let areas_end = [
        fresh.bitmap.map(|b| b.offset_bytes + b.bytes),
        fresh.used_map.map(|u| u.offset_bytes + u.bytes),
        fresh.bad_blocks.map(|b| b.offset_bytes + b.bytes),
        Some(crate::SUPERBLOCK_OFFSET + crate::SUPERBLOCK_BYTES as u64),
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(0);
    let backup_offset = areas_end.div_ceil(4096) * 4096;
    let backup_bytes = backup_area_bytes(fresh.level, fresh.chunk_bytes);
    if backup_offset + backup_bytes > fresh.data_offset_bytes {
        return Err(refuse(format!(
            "no room for the reshape backup area ({backup_bytes} bytes: a header and {} chunks \
             of {}) between the metadata, which ends at member byte {areas_end}, and the data at \
             {}; an array created with a larger --data-offset (or a smaller --chunk) can be \
             reshaped",
            backup_bytes / fresh.chunk_bytes,
            fresh.chunk_bytes,
            fresh.data_offset_bytes
        )));
    }
    let events = fresh.events + 1;
    let record = ReshapeRecord {
        old_member_count: count as u32,
        position_bytes: 0,
        backup_offset_bytes: backup_offset,
        backup_bytes,
        generation: events,
    };
    let now = now_secs();
    let mut table = fresh.roles.clone();
    // Spares keep their entries; the new roles take the slots after the old roles, so any
    // spare entry in the way moves to a free slot past them.
    let mut moved: Vec<RoleEntry> = Vec::new();
    for slot in table.iter_mut().take(m_count).skip(count) {
        if slot.state != RoleState::Unused {
            moved.push(*slot);
        }
    }
    let new_uuids: Vec<Uuid> = new.iter().map(|_| Uuid::new_v4()).collect();
    for (i, uuid) in new_uuids.iter().enumerate() {
        table[count + i] = RoleEntry {
            member_uuid: *uuid,
            data_bytes,
            state: RoleState::Active,
            replacing: None,
        };
    }
    for entry in moved {
        let free = table
            .iter()
            .enumerate()
            .skip(m_count)
            .find(|(_, e)| e.state == RoleState::Unused)
            .map(|(i, _)| i)
            .expect("counted: room for every spare");
        table[free] = entry;
    }
    let bump = |sb: &Superblock| {
        let mut sb = sb.clone();
        sb.events = events;
        sb.utime_secs = now;
        sb.member_count = m_count as u32;
        sb.roles = table.clone();
        sb.set_reshape(Some(record));
        sb
    };
    let mut new_sbs = Vec::with_capacity(new.len());
    for (i, m) in new.iter().enumerate() {
        let mut own = bump(&fresh);
        own.member_uuid = new_uuids[i];
        own.role = Role::Active((count + i) as u32);
        own.data_bytes = data_bytes;
        own.member_bytes = m.len();
        own.recovery_offset_bytes = None;
        own.replace_offset_bytes = None;
        own.set_owner(None);
        new_sbs.push(own);
    }
    // Each new member's superblock first (written and flushed), so whatever a stop leaves on
    // a new member before the old members record the reshape carries this array's superblock
    // (or a torn one) and a rerun may reuse it (`left_by_interrupted_start`); then the rest
    // of its metadata area, flushed before any old member records the reshape.
    write_all(new, &new_sbs)?;
    let sb_end = crate::SUPERBLOCK_OFFSET + crate::SUPERBLOCK_BYTES as u64;
    for (m, own) in new.iter().zip(&new_sbs) {
        m.write_zeroes(0, crate::SUPERBLOCK_OFFSET)
            .and_then(|()| m.write_zeroes(sb_end, fresh.data_offset_bytes - sb_end))
            .map_err(io_err(m.name(), "zero the metadata area of"))?;
        if let Some(at) = &own.bad_blocks {
            crate::badblocks::write_blank(m.as_ref(), &fresh.array_uuid, at)
                .map_err(io_err(m.name(), "write the bad-block list of"))?;
        }
        // A clear bitmap (the array is clean: every bit is clear) and the array's used map,
        // so neither reads as damaged on the new member.
        if let Some(at) = &own.bitmap {
            let blank = vec![0u8; (at.bytes / 4096) as usize * crate::bitmap::BITS_BYTES_PER_BLOCK];
            m.write_at(
                &crate::bitmap::encode_area(&fresh.array_uuid, &at.area(), &blank),
                at.offset_bytes,
            )
            .map_err(io_err(m.name(), "write the write-intent bitmap of"))?;
        }
    }
    // The used-regions map keeps the old region (whole stripes of the old geometry) until the
    // end; the new members get the array's map before the old members name them.
    if let Some(at) = &fresh.used_map {
        let image = read_used(
            &old_role_members(members, &sbs, count),
            &fresh.array_uuid,
            at,
            at.regions(fresh.array_size_bytes),
        )?;
        let targets: Vec<&Arc<dyn Member>> = new.iter().collect();
        write_used(&targets, &fresh.array_uuid, at, &image)?;
    }
    for m in new {
        m.flush().map_err(io_err(m.name(), "flush"))?;
    }
    let old_sbs: Vec<Superblock> = sbs.iter().map(bump).collect();
    write_all(members, &old_sbs)?;
    let all_sbs: Vec<Superblock> = old_sbs.into_iter().chain(new_sbs).collect();
    let fresh = all_sbs[0].clone();
    let roles = (0..m_count)
        .map(|r| all_sbs.iter().position(|sb| sb.role_index() == Some(r)))
        .collect();
    Ok(Reshaping {
        array,
        fresh,
        record,
        roles,
        sbs: all_sbs,
        old: old_geometry,
        new: new_geometry,
        unrecorded_missing: Vec::new(),
    })
}

/// Before an offline grow's rerun: rewrites each superblock a stop tore while a grow or a
/// reshape rewrote it (a checksum or field error, the first sector still naming this array and
/// a member the freshest valid superblock's role table holds active in a role no valid member
/// holds) from that freshest superblock, with the member's own fields (uuid, role, its role's
/// data bytes, its size; in sync, no replace). The members hold the same data as their peers
/// (a grow runs on a clean array in sync, a reshape writes every member's data before any
/// record), so the member is what its peers say it is. Returns the names rewritten; a damaged
/// superblock that does not qualify is left for the grow to refuse, naming it.
pub fn repair_torn_superblocks(members: &[Arc<dyn Member>]) -> Result<Vec<String>, GrowError> {
    let read: Vec<_> = members
        .iter()
        .map(|m| crate::read_superblock(m.as_ref()))
        .collect();
    let Some(fresh) = read
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .max_by_key(|sb| sb.events)
        .cloned()
    else {
        return Ok(Vec::new());
    };
    let held: Vec<usize> = read
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .filter(|sb| sb.array_uuid == fresh.array_uuid)
        .filter_map(|sb| sb.role_index())
        .collect();
    let mut repaired = Vec::new();
    for (m, r) in members.iter().zip(&read) {
        if !matches!(r, Err(crate::ReadSuperblockError::Invalid(e)) if !matches!(e, crate::SuperblockError::NoMagic))
        {
            continue;
        }
        let mut raw = vec![0u8; crate::SUPERBLOCK_BYTES];
        m.read_at(&mut raw, crate::SUPERBLOCK_OFFSET)
            .map_err(io_err(m.name(), "read the superblock of"))?;
        let Some(member_uuid) = crate::superblock::member_of(&raw, &fresh.array_uuid) else {
            continue;
        };
        let count = fresh.member_count as usize;
        let Some(role) = (0..count).find(|&r| {
            fresh.roles[r].member_uuid == member_uuid && fresh.roles[r].state == RoleState::Active
        }) else {
            continue;
        };
        if held.contains(&role) {
            continue;
        }
        let mut sb = fresh.clone();
        sb.member_uuid = member_uuid;
        sb.role = Role::Active(role as u32);
        sb.data_bytes = fresh.roles[role].data_bytes;
        sb.member_bytes = m.len();
        sb.recovery_offset_bytes = None;
        sb.replace_offset_bytes = None;
        write_all(std::slice::from_ref(m), std::slice::from_ref(&sb))?;
        repaired.push(m.name().to_string());
    }
    Ok(repaired)
}

/// After a reshape whose last superblock rewrite a stop cut (the freshest superblock records
/// the new geometry and no reshape, some members are still one event behind with the record):
/// rewrites each member behind with the freshest superblock and its own fields (uuid, role,
/// data bytes, size, offsets), flushed. Members of another array or in no role of the
/// freshest table are left alone. Returns how many were rewritten.
pub fn reshape_settle(members: &[Arc<dyn Member>]) -> Result<usize, GrowError> {
    let (sbs, fresh) = crate::grow::read_superblocks(members)?;
    if fresh.reshape.is_some() {
        return Ok(0);
    }
    let mut settled = 0;
    for (m, sb) in members.iter().zip(&sbs) {
        if sb.events == fresh.events || sb.array_uuid != fresh.array_uuid {
            continue;
        }
        let Some(role) = sb.role_index() else {
            continue;
        };
        if role >= fresh.member_count as usize || fresh.roles[role].member_uuid != sb.member_uuid {
            continue;
        }
        let mut own = fresh.clone();
        own.member_uuid = sb.member_uuid;
        own.role = sb.role;
        own.data_bytes = fresh.roles[role].data_bytes;
        own.member_bytes = sb.member_bytes;
        own.recovery_offset_bytes = sb.recovery_offset_bytes;
        own.replace_offset_bytes = sb.replace_offset_bytes;
        write_all(std::slice::from_ref(m), std::slice::from_ref(&own))?;
        settled += 1;
    }
    Ok(settled)
}

/// A new member as a `reshape_start` of this array (`fresh`: the old members' freshest
/// superblock, `count` their roles) left it when it stopped before any old member recorded
/// the reshape: it carries this array's superblock for a new role with the record that start
/// wrote (generation `events + 1`), or a superblock torn by the stop (nothing non-zero in the
/// first MiB outside the superblock, whose first sector is blank or this array's). The rerun
/// overwrites it without `--force`: nothing on it is anyone's data.
fn left_by_interrupted_start(m: &dyn Member, fresh: &Superblock, count: usize) -> bool {
    match crate::read_superblock(m) {
        Ok(sb) => {
            sb.array_uuid == fresh.array_uuid
                && sb.role_index().is_some_and(|r| r >= count)
                && sb.reshape.map(|r| r.generation) == Some(fresh.events + 1)
        }
        Err(crate::ReadSuperblockError::Invalid(_)) => {
            let len = crate::create::IN_USE_CHECK_BYTES.min(m.len()) as usize;
            let mut buf = vec![0u8; len];
            let start = crate::SUPERBLOCK_OFFSET as usize;
            let end = start + crate::SUPERBLOCK_BYTES;
            if len < end || m.read_at(&mut buf, 0).is_err() {
                return false;
            }
            let outside_blank = buf[..start].iter().chain(&buf[end..]).all(|&b| b == 0);
            let first = &buf[start..start + 512];
            let ours = first.iter().all(|&b| b == 0)
                || crate::superblock::names_array(first, &fresh.array_uuid);
            outside_blank && ours
        }
        Err(crate::ReadSuperblockError::Io(_)) => false,
    }
}

/// Reads an array mid-reshape from `members` (old and new members and spares, any order; a
/// role's member may be missing if the level survives without it). `Ok(None)` when the array
/// records no reshape. A member one event behind the freshest (a position record cut by a
/// stop) is used: its data is the same.
pub fn reshape_open(members: &[Arc<dyn Member>]) -> Result<Option<Reshaping>, GrowError> {
    let (sbs, fresh) = crate::grow::read_superblocks(members)?;
    let Some(record) = fresh.reshape else {
        return Ok(None);
    };
    let array = format!("\"{}\" {}", fresh.name, fresh.array_uuid);
    let refuse = |why: String| refusal(&array, why);
    let m_count = fresh.member_count as usize;
    let old_count = record.old_member_count as usize;
    let holds_record =
        |sb: &Superblock| sb.reshape.map(|r| r.generation) == Some(record.generation);
    // The reshape is recorded once an old member holds the record (`reshape_start` writes
    // the new members first): before, only new members do and the start is redone.
    if !sbs
        .iter()
        .any(|sb| holds_record(sb) && sb.role_index().is_some_and(|r| r < old_count))
    {
        return Ok(None);
    }
    let mut roles = vec![None; m_count];
    for (i, (m, sb)) in members.iter().zip(&sbs).enumerate() {
        // An old member whose superblock the start's record did not reach (a stop while the
        // old members were rewritten): its data is the old layout's, as every member's.
        let missed_start = sb.reshape.is_none()
            && sb.events + 1 == record.generation
            && sb.role_index().is_some_and(|r| r < old_count);
        // A member holding this reshape's record is as current as its peers however many
        // position records it missed (they change nothing else); one the reshape went on
        // without is recorded missing first (below), and refused here.
        if !missed_start && !holds_record(sb) {
            return Err(refuse(format!(
                "member {} is behind (events {} < {}) or not part of this reshape; leave it out \
                 (raid5/6 go on without one member, raid6 without two) and add it after the \
                 reshape",
                m.name(),
                sb.events,
                fresh.events
            )));
        }
        let Some(r) = sb.role_index() else { continue };
        if r < m_count && fresh.roles[r].state != RoleState::Active {
            return Err(refuse(format!(
                "member {} holds role {r}, which the reshape went on without (recorded {:?}): \
                 its data is stale; leave it out and add it as a spare after the reshape (it \
                 is rebuilt then)",
                m.name(),
                fresh.roles[r].state
            )));
        }
        if fresh.roles[r].member_uuid != sb.member_uuid {
            return Err(refuse(format!(
                "member {} is not the member the role table records for role {r}; leave it out",
                m.name()
            )));
        }
        roles[r] = Some(i);
    }
    let data_bytes = fresh.roles[0].data_bytes;
    let (old, new) = record
        .geometries(
            fresh.level,
            fresh.chunk_bytes,
            fresh.member_count,
            data_bytes,
        )
        .map_err(|e| refuse(e.to_string()))?;
    let present: Vec<bool> = roles.iter().map(Option::is_some).collect();
    if !new.survives(&present) {
        let missing: Vec<usize> = (0..m_count).filter(|&r| roles[r].is_none()).collect();
        return Err(refuse(format!(
            "the members holding roles {missing:?} were not given and {} cannot do without \
             them; give every member and spare",
            fresh.level
        )));
    }
    // The roles not given are recorded missing before any data moves without them
    // (`unrecorded_missing`), so their members, stale from then on, are never taken back.
    let mut fresh = fresh;
    let mut unrecorded_missing = Vec::new();
    for (r, given) in roles.iter().enumerate() {
        if given.is_none() && fresh.roles[r].state == RoleState::Active {
            fresh.roles[r].state = RoleState::Missing;
            unrecorded_missing.push(r);
        }
    }
    Ok(Some(Reshaping {
        array,
        fresh,
        record,
        roles,
        sbs,
        old,
        new,
        unrecorded_missing,
    }))
}

/// Every given member's superblock with `events`, `utime` and the freshest role table: what
/// a position record and the end change next.
fn next_superblocks(
    state: &Reshaping,
    events: u64,
    now: u64,
) -> impl Iterator<Item = Superblock> + '_ {
    state.sbs.iter().map(move |sb| {
        let mut sb = sb.clone();
        sb.events = events;
        sb.utime_secs = now;
        sb.roles = state.fresh.roles.clone();
        sb.member_count = state.fresh.member_count;
        sb
    })
}

/// Rewrites every given member's superblock (`members`, the order [`Reshaping::sbs`] has)
/// with the reshape position `position` and `events + 1`, flushed.
pub fn reshape_record_position(
    members: &[Arc<dyn Member>],
    state: &mut Reshaping,
    position: u64,
) -> Result<(), GrowError> {
    let events = state.fresh.events + 1;
    let now = now_secs();
    state.record.position_bytes = position;
    let record = state.record;
    let sbs: Vec<Superblock> = next_superblocks(state, events, now)
        .map(|mut sb| {
            sb.set_reshape(Some(record));
            sb
        })
        .collect();
    write_all(members, &sbs)?;
    state.sbs = sbs;
    state.unrecorded_missing.clear();
    state.fresh.events = events;
    state.fresh.set_reshape(Some(record));
    Ok(())
}

/// The move is done (every byte in the new layout, flushed): records the new geometry — the
/// array's new size, the bitmap's and used map's regions for it (the used map set all-used
/// before, merged after, as `grow --size max` does) — and clears the reshape record,
/// `events + 1`.
pub fn reshape_finish(
    members: &[Arc<dyn Member>],
    state: &Reshaping,
) -> Result<crate::GrowReport, GrowError> {
    let old_size = state.fresh.array_size_bytes;
    let new_size = state.new.size_bytes();
    let uuid = state.fresh.array_uuid;
    let holders: Vec<&Arc<dyn Member>> =
        state.roles.iter().flatten().map(|&i| &members[i]).collect();
    let used = match state.fresh.used_map {
        Some(old) => {
            let image = read_used(&holders, &uuid, &old, old.regions(old_size))?;
            let all = vec![0xFF; (old.bytes / 4096) as usize * crate::bitmap::BITS_BYTES_PER_BLOCK];
            write_used(&holders, &uuid, &old, &all)?;
            let region = region_for_new(&old, state.new.unit_bytes(), new_size);
            let new = UsedMapRef {
                region_bytes: region,
                ..old
            };
            Some((old, new, image))
        }
        None => None,
    };
    let events = state.fresh.events + 1;
    let now = now_secs();
    let sbs: Vec<Superblock> = next_superblocks(state, events, now)
        .map(|mut sb| {
            sb.array_size_bytes = new_size;
            sb.set_reshape(None);
            sb.set_bitmap(state.fresh.bitmap.map(|b| bitmap_for(b, new_size)));
            sb.set_used_map(used.as_ref().map(|(_, new, _)| *new));
            sb
        })
        .collect();
    write_all(members, &sbs)?;
    if let Some((old, new, image)) = used {
        // A new region is used when any old region it overlaps was (the mover wrote zeroes
        // for the clear ones, so the rest of such a region reads zero as it did).
        let mut merged = vec![0u8; new.regions(new_size).div_ceil(8) as usize];
        for i in 0..old.regions(old_size) {
            if crate::bitmap::bit(&image, i) {
                let first = i * old.region_bytes / new.region_bytes;
                let last = ((i + 1) * old.region_bytes - 1).min(old_size - 1) / new.region_bytes;
                for j in first..=last {
                    crate::bitmap::put_bit(&mut merged, j, true);
                }
            }
        }
        write_used(&holders, &uuid, &new, &merged)?;
    }
    Ok(crate::GrowReport {
        array: state.array.clone(),
        old_size,
        new_size,
        new_space: match state.fresh.level.has_redundancy() {
            true => crate::NewSpace::Zeroed,
            false => crate::NewSpace::NoRedundancy,
        },
        events,
        notes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{create, plan, read_superblock, AssembleError, AssemblyPlanOptions, CreateOptions};

    const MIB: u64 = 1 << 20;

    fn mems(count: usize, prefix: &str) -> Vec<Arc<dyn Member>> {
        (0..count)
            .map(|i| {
                Arc::new(member::MemMember::new(&format!("{prefix}{i}"), 8 * MIB).unwrap())
                    as Arc<dyn Member>
            })
            .collect()
    }

    fn found(members: &[Arc<dyn Member>]) -> Vec<(String, Superblock)> {
        members
            .iter()
            .map(|m| (m.name().to_string(), read_superblock(m.as_ref()).unwrap()))
            .collect()
    }

    #[test]
    fn start_records_the_reshape_on_every_member_and_assembly_refuses_it() {
        let old = mems(3, "m");
        let new = mems(1, "n");
        let mut opts = CreateOptions::new(Level::Raid5, "rs");
        opts.chunk_bytes = 64 << 10;
        create(&old, &opts).unwrap();
        let before = read_superblock(old[0].as_ref()).unwrap();
        let state = reshape_start(&old, &new, false).unwrap();
        assert_eq!(state.record.old_member_count, 3);
        assert_eq!(state.record.position_bytes, 0);
        assert_eq!(
            state.record.backup_bytes,
            backup_area_bytes(Level::Raid5, 64 << 10)
        );
        assert_eq!(state.new.member_count(), 4);
        let all: Vec<Arc<dyn Member>> = old.iter().chain(&new).cloned().collect();
        for (name, sb) in found(&all) {
            assert_eq!(sb.events, before.events + 1, "{name}");
            assert_eq!(sb.member_count, 4, "{name}");
            assert_eq!(sb.array_size_bytes, before.array_size_bytes, "{name}");
            assert_eq!(sb.reshape, Some(state.record), "{name}");
            assert!(sb.feature_incompat & crate::FEATURE_INCOMPAT_RESHAPE != 0);
        }
        assert_eq!(
            read_superblock(new[0].as_ref()).unwrap().role,
            Role::Active(3)
        );
        match plan(&found(&all), &AssemblyPlanOptions::default()) {
            Err(e @ AssembleError::MidReshape { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains("\"rs\"") && text.contains("raidkit grow m0 m1 m2 n0"),
                    "{text}"
                );
            }
            other => panic!("expected MidReshape, got {other:?}"),
        }
        // Reopened, a position record, then the end: the record is gone and the size grown.
        let mut open = reshape_open(&all).unwrap().expect("mid-reshape");
        let stripe = 3 * (64 << 10);
        reshape_record_position(&all, &mut open, stripe).unwrap();
        let again = reshape_open(&all).unwrap().unwrap();
        assert_eq!(again.record.position_bytes, stripe);
        let report = reshape_finish(&all, &again).unwrap();
        assert_eq!(report.new_size, again.new.size_bytes());
        let done = plan(&found(&all), &AssemblyPlanOptions::default()).unwrap();
        assert_eq!(done.superblock.reshape, None);
        assert_eq!(
            done.superblock.feature_incompat & crate::FEATURE_INCOMPAT_RESHAPE,
            0
        );
        assert_eq!(done.superblock.array_size_bytes, report.new_size);
        assert!(reshape_open(&all).unwrap().is_none());
    }

    #[test]
    fn a_start_cut_before_the_old_members_leaves_the_old_array() {
        let old = mems(3, "m");
        let new = mems(1, "n");
        create(&old, &CreateOptions::new(Level::Raid0, "cut")).unwrap();
        let saved: Vec<Vec<u8>> = old
            .iter()
            .map(|m| {
                let mut b = vec![0u8; 4096];
                m.read_at(&mut b, crate::SUPERBLOCK_OFFSET).unwrap();
                b
            })
            .collect();
        reshape_start(&old, &new, false).unwrap();
        for (m, b) in old.iter().zip(&saved) {
            m.write_at(b, crate::SUPERBLOCK_OFFSET).unwrap();
        }
        let decided = plan(&found(&old), &AssemblyPlanOptions::default()).unwrap();
        assert_eq!(decided.superblock.member_count, 3);
        assert_eq!(decided.superblock.reshape, None);
    }

    #[test]
    fn refusals_name_the_array_and_the_remedy() {
        let old = mems(4, "m");
        create(&old, &CreateOptions::new(Level::Raid10, "ten")).unwrap();
        let err = reshape_start(&old, &mems(1, "n"), false)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("\"ten\"") && err.contains("raid10 array is not built"),
            "{err}"
        );
        let old = mems(3, "m");
        create(&old, &CreateOptions::new(Level::Raid5, "five")).unwrap();
        let small: Vec<Arc<dyn Member>> =
            vec![Arc::new(member::MemMember::new("tiny", 2 * MIB).unwrap())];
        let err = reshape_start(&old, &small, false)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("\"five\"") && err.contains("needs at least"),
            "{err}"
        );
    }
}

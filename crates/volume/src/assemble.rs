//! `assemble`: read every member's superblock, decide with [`plan`], start a [`Volume`]: its
//! engine array, its state (resync, bitmap, ranges at risk), its worker and bitmap threads.
//! Nothing is written by a refusal: every member byte stays as it was. (Spares given in the
//! options receive their spare superblock once the array has started.)

use std::sync::Arc;

use engine::{Array, ArrayConfig};
use member::Member;
use ondisk::owner::LEASE_SECS;
use ondisk::{check_owner, plan, read_for_assembly, AssembleError, ReadForAssembly};
use ondisk::{now_secs, ArrayState, AssemblyPlan, DirtyDegradedStart, RoleState, Superblock};

use crate::badblocks::BadBlocks;
use crate::options::AssembleOptions;
use crate::volume::AT_RISK_LISTED_IN_WARNING;
use crate::volume::{Held, MetaState, PendingResync, Volume, VolumeCore};
use crate::work::Resync;

/// Assembles an array from its members, given in any order.
pub fn assemble(
    members: Vec<Arc<dyn Member>>,
    opts: &AssembleOptions,
) -> Result<Volume, AssembleError> {
    let all: Vec<Arc<dyn Member>> = members.iter().chain(&opts.spares).cloned().collect();
    if let Some((name, other)) = ondisk::find_duplicate(&all) {
        return Err(AssembleError::DuplicateMember { name, other });
    }
    // A superblock torn by a power cut is rebuilt from its first sector and its peers
    // (`read_for_assembly`); its note joins the warnings.
    let ReadForAssembly { found, notes } = read_for_assembly(&members)?;
    let decided_by = opts.plan_options();
    check_owner(&found, &decided_by)?;
    let mut decided = plan(&found, &decided_by)?;
    decided.warnings.splice(0..0, notes);
    // Members that were absent (recorded missing, not faulty) are re-added if the bitmap
    // bounds what they missed; a faulty one waits for the operator's `add`.
    let stale: Vec<Arc<dyn Member>> = decided
        .stale
        .iter()
        .filter(|s| decided.superblock.roles[s.role].state == RoleState::Missing)
        .filter_map(|s| members.iter().find(|m| m.name() == s.name).cloned())
        .collect();
    let own: Vec<_> = found.into_iter().map(|(_, sb)| sb).collect();
    let volume = start(decided, members, own, opts)?;
    if let Some(me) = &opts.owner {
        volume
            .core()
            .claim_owner(me.owner_record(now_secs(), LEASE_SECS));
    }
    for member in stale {
        volume
            .core()
            .re_add_stale(&member)
            .map_err(|e| AssembleError::Engine(format!("re-adding {}: {e}", member.name())))?;
    }
    for spare in &opts.spares {
        volume
            .add(Arc::clone(spare))
            .map_err(|e| AssembleError::Spare {
                name: spare.name().to_string(),
                reason: e.to_string(),
            })?;
    }
    Ok(volume)
}

/// Builds the volume `plan` decided; `members` and `own` (each member's superblock) are in the
/// order the plan indexes. Starts the background worker, which resumes a rebuild, starts a
/// resync of a dirty array, or puts a spare into a missing role.
fn start(
    mut plan: AssemblyPlan,
    members: Vec<Arc<dyn Member>>,
    own: Vec<Superblock>,
    opts: &AssembleOptions,
) -> Result<Volume, AssembleError> {
    assert_eq!(members.len(), own.len());
    let sb = &plan.superblock;
    let count = sb.member_count as usize;
    assert_eq!(plan.roles.len(), count);
    let checksums = member::ChecksumShared::new();
    let mut lists = Vec::with_capacity(members.len());
    for (m, sb) in members.iter().zip(&own) {
        let list = BadBlocks::load(m, sb)
            .map_err(|e| AssembleError::Engine(format!("member {}: {e}", m.name())))?;
        lists.push(list);
    }
    // One key area for the array: a `raidkit key` command cut short by a crash may have
    // rewritten only some members' superblocks; each member's next superblock write (the
    // owner claim at start, if nothing else) carries the one of the superblock the plan chose
    // (`test_encrypt.py`
    // `test_a_key_change_cut_short_still_opens_and_the_next_start_makes_members_agree`).
    let held = |i: usize| {
        let mut own = own[i].clone();
        if own.encryption != sb.encryption {
            own.set_encryption(sb.encryption.clone());
        }
        Held {
            whole: Arc::clone(&members[i]),
            sb: own,
            bad: lists[i].clone(),
            checksums: Arc::clone(&checksums),
        }
    };
    let roles: Vec<Option<Held>> = plan.roles.iter().map(|i| i.map(held)).collect();
    // Members that were being rebuilt join as missing, then are attached as recovering.
    let windows = roles
        .iter()
        .enumerate()
        .map(|(r, h)| {
            let h = h.as_ref()?;
            h.sb.recovery_offset_bytes
                .is_none()
                .then(|| h.window(sb.roles[r].data_bytes))
        })
        .collect();
    let config = ArrayConfig {
        level: sb.level,
        chunk_bytes: sb.chunk_bytes,
        member_count: count,
        member_data_bytes: (0..count).map(|r| sb.roles[r].data_bytes).collect(),
    };
    let array = Array::new(config, windows).map_err(|e| AssembleError::Engine(e.to_string()))?;
    assert_eq!(array.size_bytes(), sb.array_size_bytes);
    mark_recovering(&array, &roles, sb)?;
    let crashed = sb.state == ArrayState::Dirty && sb.level.has_redundancy();
    let resync_offset = match crashed {
        true => Some(0),
        false => sb.resync_offset_bytes,
    };
    let bitmap = crate::bitmap_volume::load(sb, &roles);
    let used = crate::used_volume::load(sb, &roles).map_err(AssembleError::Engine)?;
    let resync_offset = resync_offset.filter(|_| sb.level.has_redundancy());
    let resync_full_from = match (&bitmap, crashed) {
        (Some(b), true) => {
            let dirty = b.dirty_regions();
            b.set_pending(dirty.into_iter());
            Some(sb.resync_offset_bytes.unwrap_or(sb.array_size_bytes))
        }
        _ => None,
    };
    let replacing = plan.replacing.and_then(|(role, i, offset)| {
        let mut h = held(i);
        h.sb.replace_offset_bytes = Some(offset);
        let window = h.window(sb.roles[role].data_bytes);
        array.start_replace(role, window).ok()?;
        Some((role, h))
    });
    let mut spares: Vec<Held> = plan.spares.iter().map(|&i| held(i)).collect();
    if let (Some((role, i, _)), None) = (plan.replacing, &replacing) {
        plan.warnings.push(format!(
            "member {}: the replace of role {role} cannot resume; kept as a spare",
            members[i].name()
        ));
        spares.push(held(i));
    }
    let at_risk = (plan.dirty_degraded == Some(DirtyDegradedStart::Forced)).then(|| {
        let dirty = bitmap
            .as_ref()
            .map(|b| (b.dirty_regions(), b.region_bytes()));
        let full_from = resync_full_from.unwrap_or(0);
        let dirty = dirty.as_ref().map(|(r, bytes)| (&r[..], *bytes));
        let risk = crate::AtRisk::new(dirty, full_from, sb.array_size_bytes);
        plan.warnings.push(format!(
            "array \"{}\" {}: started dirty and degraded (--start-dirty-degraded) without \
             a journal: data in these array ranges may read back wrong (stripes being \
             written at the crash, whose missing chunks are reconstructed from parity that \
             may be stale): {}. `raidkit status` lists them until every missing member is \
             rebuilt",
            sb.name,
            sb.array_uuid,
            risk.describe(AT_RISK_LISTED_IN_WARNING)
        ));
        risk
    });
    if sb.checksum.is_some() && sb.state == ArrayState::Dirty && !sb.level.has_redundancy() {
        checksums.set_trust(Some(Arc::new(crate::resync_trust::UncleanSingleCopy)));
        plan.warnings.push(format!(
            "array \"{}\" {}: {} after an unclean shutdown keeps no redundancy to tell a torn \
             update from corruption: checksum mismatches are rewritten (not reported as \
             corruption) until the array is closed cleanly",
            sb.name, sb.array_uuid, sb.level
        ));
    }
    let mut template = sb.clone();
    template.replace_offset_bytes = None;
    let meta = MetaState {
        partial_rebuild: vec![None; count],
        roles,
        spares,
        replacing,
        events: sb.events,
        disk_state: sb.state,
        resync: resync_offset.map(|offset| PendingResync {
            kind: match crashed {
                true => Resync::AfterCrash,
                false => Resync::Initial,
            },
            offset,
            full_from: resync_full_from,
        }),
        template,
        owner: None,
        write_mostly: Vec::new(),
    };
    let core = VolumeCore::new(
        array,
        meta,
        (bitmap, used),
        at_risk,
        plan.stale,
        plan.warnings,
        Arc::clone(&checksums),
    );
    core.watch_checksums();
    if let Some(progress) = resync_offset {
        core.distrust_unsynced_parity(progress, resync_full_from);
    }
    // Before the worker starts: its first step already obeys the limits.
    core.set_fault_policy(opts.fault_policy);
    core.set_speed_limits(opts.speed_limits);
    if opts.journal_replay.is_some() {
        // No rebuild or resync may read a stripe before the journal's replay made it
        // consistent: the worker waits for `journal_replayed` (re-adds, spares and writes
        // do not lift that hold).
        core.work.hold_for_replay();
    }
    let worker = crate::tasks::spawn(Arc::clone(&core));
    let clearer = core
        .bitmap
        .is_some()
        .then(|| crate::bitmap_volume::spawn_clearer(Arc::clone(&core)));
    Ok(Volume::new(core, worker, clearer))
}

/// Roles whose member carries a recovery offset were being rebuilt: they resume as such.
fn mark_recovering(
    array: &Array,
    roles: &[Option<Held>],
    sb: &Superblock,
) -> Result<(), AssembleError> {
    for (role, held) in roles.iter().enumerate() {
        let Some(held) = held else { continue };
        if held.sb.recovery_offset_bytes.is_none() {
            continue;
        }
        array
            .attach_member(role, held.window(sb.roles[role].data_bytes))
            .map_err(|e| AssembleError::Engine(e.to_string()))?;
    }
    Ok(())
}

//! The assembly decision as a pure function: superblocks in, a plan (or a refusal) out.
//! No I/O happens here, so every refusal is tested without members.

use std::fmt;

use layout::{Geometry, Level};
use uuid::Uuid;

use crate::superblock::{ArrayState, Role, RoleState, Superblock, SuperblockError};

/// What the assembly decision ([`plan`], [`crate::check_owner`]) is told besides the
/// superblocks (the runtime's assemble options carry these and more).
#[derive(Clone, Debug, Default)]
pub struct AssemblyPlanOptions {
    /// Start a RAID 5/6 array that is both dirty and degraded without a journal to replay,
    /// risking the write hole (`serve --start-dirty-degraded`, md's start_dirty_degraded):
    /// the volume then reports the array ranges at risk.
    pub start_dirty_degraded: bool,
    /// The journal the caller replays into the volume before anything else reads or writes it.
    /// When it is the array's own journal (same UUID as the superblocks' reference), a dirty
    /// and degraded RAID 5/6 array starts without `start_dirty_degraded`: the replay makes
    /// every stripe that was being written consistent (docs/DESIGN.md, durability contract).
    pub journal_replay: Option<Uuid>,
    /// Assemble for writing as this process: refuse an array another live process owns
    /// ([`crate::owner`]). `None`: no check (read-only use, tests).
    pub owner: Option<crate::owner::ThisHost>,
    /// Take the array from an owner on another host that still looks alive (its lease has not
    /// run out): the operator knows that host is gone. Never overrides a process that runs on
    /// this host.
    pub force_owner: bool,
}

/// A member left out because it missed writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleMember {
    pub name: String,
    pub role: usize,
    pub events: u64,
    pub events_expected: u64,
}

/// What assembly decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssemblyPlan {
    /// The freshest superblock: the array's current state.
    pub superblock: Superblock,
    /// Per role: index (into the input) of the member used for it, `None` if missing.
    pub roles: Vec<Option<usize>>,
    /// Members left out because their events counter is behind.
    pub stale: Vec<StaleMember>,
    /// Human-readable notes about members left out and risks taken.
    pub warnings: Vec<String>,
    /// Some role has no member.
    pub degraded: bool,
    /// Indices (into the input) of this array's spares.
    pub spares: Vec<usize>,
    /// Why a dirty and degraded RAID 5/6 array may start, if it is one.
    pub dirty_degraded: Option<DirtyDegradedStart>,
    /// A replace to resume: the role, the index (into the input) of its replacement, and the
    /// offset to copy from (the recorded one after a clean shutdown, 0 after a crash).
    pub replacing: Option<(usize, usize, u64)>,
}

/// Why a dirty and degraded RAID 5/6 array was let start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirtyDegradedStart {
    /// Its journal is replayed before anything reads or writes it: no stripe is at risk.
    JournalReplay,
    /// `start_dirty_degraded` without a journal: the stripes written at the crash are at risk.
    Forced,
}

/// Why an array was not assembled. No member byte was changed.
#[derive(Debug)]
pub enum AssembleError {
    NoMembers,
    /// The same member given twice (`other`: the name it was given first).
    DuplicateMember {
        name: String,
        other: String,
    },
    Read {
        name: String,
        source: std::io::Error,
    },
    BadSuperblock {
        name: String,
        source: SuperblockError,
    },
    ForeignArray {
        name: String,
        found: String,
        expected: String,
        reference: String,
    },
    Disagree {
        name: String,
        field: &'static str,
        found: String,
        expected: String,
        reference: String,
    },
    SameRole {
        role: usize,
        first: String,
        second: String,
    },
    TooFewMembers {
        array: String,
        level: Level,
        missing: Vec<usize>,
        stale: Vec<String>,
    },
    WriteHole {
        array: String,
        level: Level,
        missing: Vec<usize>,
        /// The array's journal, which was not given (it would have closed the hole).
        journal: Option<Uuid>,
        /// The array has a write-intent bitmap (only its dirty regions would be at risk).
        bitmap: bool,
    },
    Engine(String),
    /// A spare given at assembly cannot be used.
    Spare {
        name: String,
        reason: String,
    },
    /// Another live process serves the array (its owner record on member `name`).
    Owned {
        array: String,
        name: String,
        owner: Box<crate::Owner>,
        /// It runs on this host (seen in /proc), rather than presumed alive by its lease.
        local: bool,
        now_secs: u64,
        /// The command can take over (`serve --force-owner`); else only waiting helps.
        forcible: bool,
    },
    /// The array is mid-reshape (`grow --add` stopped before the end): it is finished offline
    /// by running `raidkit grow` again with every member.
    MidReshape {
        array: String,
        position: u64,
        old_size: u64,
        /// The members given, for the command to run.
        members: Vec<String>,
    },
}

impl fmt::Display for AssembleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use AssembleError::*;
        match self {
            NoMembers => write!(f, "no members given"),
            MidReshape {
                array,
                position,
                old_size,
                members,
            } => write!(
                f,
                "array {array} is in the middle of a reshape (grow --add stopped at array byte \
                 {position} of {old_size}); serving it during a reshape is not built: finish it \
                 first with `raidkit grow {}` (it resumes where it stopped), then start it",
                members.join(" ")
            ),
            DuplicateMember { name, other } => f.write_str(&crate::describe_duplicate(name, other)),
            Read { name, source } => {
                write!(f, "member {name}: cannot read the superblock: {source}")
            }
            BadSuperblock {
                name,
                source: source @ SuperblockError::Checksum { .. },
            } => write!(
                f,
                "member {name}: {source}: its superblock is damaged (a write torn by a power cut, \
                 or corruption); assemble the array without {name} if the other members \
                 suffice, then zero its superblock (bytes {}..{}) and add it back to rebuild it",
                crate::SUPERBLOCK_OFFSET,
                crate::SUPERBLOCK_OFFSET + crate::SUPERBLOCK_BYTES as u64
            ),
            BadSuperblock {
                name,
                source:
                    source @ SuperblockError::Field {
                        field: "member_bytes",
                        ..
                    },
            } => write!(
                f,
                "member {name}: {source}: it is smaller than when it joined the array \
                 (truncated, or another device under that name), so part of its data is not \
                 there; give it back at its full size, or start the array without {name} if \
                 the other members suffice and add a replacement (raidkit add)"
            ),
            BadSuperblock {
                name,
                source: source @ SuperblockError::NoMagic,
            } => write!(
                f,
                "member {name}: {source}: it is not a member of this array, or its superblock \
                 was overwritten; give only the array's members: the array starts without \
                 {name} if the others suffice, and `raidkit add` puts it back to be rebuilt"
            ),
            BadSuperblock { name, source } => write!(f, "member {name}: {source}"),
            ForeignArray {
                name,
                found,
                expected,
                reference,
            } => write!(
                f,
                "member {name}: belongs to another array ({found}), not {expected} like {reference}"
            ),
            Disagree {
                name,
                field,
                found,
                expected,
                reference,
            } => write!(
                f,
                "member {name}: superblock field {field} is {found} but {reference} says {expected}"
            ),
            SameRole {
                role,
                first,
                second,
            } => write!(f, "members {first} and {second} both claim role {role}"),
            TooFewMembers {
                array,
                level,
                missing,
                stale,
            } => {
                write!(
                    f,
                    "array {array}: too few members for {level}: missing roles {missing:?}"
                )?;
                if !stale.is_empty() {
                    write!(f, " (left out as stale: {})", stale.join(", "))?;
                }
                Ok(())
            }
            WriteHole {
                array,
                level,
                missing,
                journal,
                bitmap,
            } => {
                write!(
                    f,
                    "array {array}: {level} was not shut down cleanly and roles {missing:?} are \
                     missing: the parity of stripes being written at the crash may be wrong (the \
                     write hole), so data of the missing members reconstructed there may read \
                     back wrong. "
                )?;
                match journal {
                    Some(uuid) => write!(
                        f,
                        "Give its journal {uuid} (--journal PATH): its replay closes the hole; or \
                         bring"
                    )?,
                    None => write!(f, "Bring")?,
                }
                let at_risk = match bitmap {
                    true => "the regions its write-intent bitmap marks as being written",
                    false => "the whole array (it has no write-intent bitmap)",
                };
                write!(
                    f,
                    " the missing members back; or start it anyway with \
                     `raidkit serve --start-dirty-degraded`: it then serves degraded and reports \
                     the array ranges at risk ({at_risk}), where data may be wrong"
                )
            }
            Engine(reason) => write!(f, "cannot start the array: {reason}"),
            Spare { name, reason } => write!(f, "spare {name}: {reason}"),
            Owned {
                array,
                name,
                owner,
                local,
                now_secs,
                forcible,
            } => describe_owned(f, array, name, owner, (*local, *forcible), *now_secs),
        }
    }
}

impl std::error::Error for AssembleError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AssembleError::Read { source, .. } => Some(source),
            AssembleError::BadSuperblock { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn describe_owned(
    f: &mut fmt::Formatter<'_>,
    array: &str,
    name: &str,
    owner: &crate::Owner,
    (local, forcible): (bool, bool),
    now_secs: u64,
) -> fmt::Result {
    let (pid, host) = (owner.process.pid, &owner.process.host_name);
    let since = now_secs.saturating_sub(owner.since_secs);
    write!(
        f,
        "array {array} is in use by raidkit pid {pid} on host {host} since {since} s ago \
         (owner record on member {name}"
    )?;
    if local {
        return write!(
            f,
            "; that process runs on this host): stop it first (SIGTERM closes the array cleanly)"
        );
    }
    let renewed = now_secs.saturating_sub(owner.renewed_secs);
    let left = crate::owner::lease_left_secs(owner, now_secs);
    write!(
        f,
        ", lease renewed {renewed} s ago): stop that server first; if host {host} is down or \
         cut off from the members, wait {left} s for its lease to run out"
    )?;
    if forcible {
        write!(
            f,
            ", or start with --force-owner (two servers writing at once corrupt the array)"
        )?;
    }
    Ok(())
}

fn describe_array(sb: &Superblock) -> String {
    format!("\"{}\" {}", sb.name, sb.array_uuid)
}

/// Decides roles and freshness from `(member name, superblock)` pairs given in any order.
pub fn plan(
    found: &[(String, Superblock)],
    opts: &AssemblyPlanOptions,
) -> Result<AssemblyPlan, AssembleError> {
    if found.is_empty() {
        return Err(AssembleError::NoMembers);
    }
    check_same_array(found)?;
    let fresh_index = freshest(found);
    let reference = &found[fresh_index];
    for (name, sb) in found {
        check_agrees(name, sb, reference)?;
    }
    let mut plan = AssemblyPlan {
        superblock: reference.1.clone(),
        roles: vec![None; reference.1.member_count as usize],
        stale: Vec::new(),
        warnings: Vec::new(),
        degraded: false,
        spares: Vec::new(),
        replacing: None,
        dirty_degraded: None,
    };
    assign_roles(found, &mut plan)?;
    assign_replacement(found, &mut plan);
    if let Some(record) = plan.superblock.reshape {
        return Err(AssembleError::MidReshape {
            array: format!(
                "\"{}\" {}",
                plan.superblock.name, plan.superblock.array_uuid
            ),
            position: record.position_bytes,
            old_size: plan.superblock.array_size_bytes,
            members: found.iter().map(|(name, _)| name.clone()).collect(),
        });
    }
    check_survives(&mut plan, opts)?;
    Ok(plan)
}

/// The array UUID held by most members (ties: the one seen first); any other member is foreign.
fn check_same_array(found: &[(String, Superblock)]) -> Result<(), AssembleError> {
    let count = |uuid: Uuid| found.iter().filter(|(_, sb)| sb.array_uuid == uuid).count();
    let best = found
        .iter()
        .max_by_key(|(_, sb)| {
            (
                count(sb.array_uuid),
                std::cmp::Reverse(first_seen(found, sb.array_uuid)),
            )
        })
        .map(|(name, sb)| (name, sb));
    let Some((ref_name, ref_sb)) = best else {
        return Err(AssembleError::NoMembers);
    };
    match found
        .iter()
        .find(|(_, sb)| sb.array_uuid != ref_sb.array_uuid)
    {
        Some((name, sb)) => Err(AssembleError::ForeignArray {
            name: name.clone(),
            found: describe_array(sb),
            expected: describe_array(ref_sb),
            reference: ref_name.clone(),
        }),
        None => Ok(()),
    }
}

fn first_seen(found: &[(String, Superblock)], uuid: Uuid) -> usize {
    found
        .iter()
        .position(|(_, sb)| sb.array_uuid == uuid)
        .unwrap_or(usize::MAX)
}

/// Index of the member with the highest events counter (ties: the first given).
fn freshest(found: &[(String, Superblock)]) -> usize {
    let max = found.iter().map(|(_, sb)| sb.events).max().unwrap_or(0);
    let index = found.iter().position(|(_, sb)| sb.events == max);
    index.unwrap_or(0)
}

/// Fields that never change after creation must be the same on every member; the size
/// fields a grow changes (member count, array size, the roles' data sizes: `ondisk::grow`,
/// with events + 1) must be the same on every member as current as the freshest. A member
/// behind may hold the size before a grow (a crash in the middle of one): it is judged by its
/// events (`assign_roles`), and assembly uses the freshest superblock's sizes.
fn check_agrees(
    name: &str,
    sb: &Superblock,
    reference: &(String, Superblock),
) -> Result<(), AssembleError> {
    let r = &reference.1;
    type Field = fn(&Superblock) -> String;
    let fields: [(&'static str, Field, bool); 8] = [
        ("level", |s| s.level.to_string(), false),
        ("layout", |s| s.layout.to_string(), false),
        ("chunk_bytes", |s| s.chunk_bytes.to_string(), false),
        ("member_count", |s| s.member_count.to_string(), true),
        ("array_size_bytes", |s| s.array_size_bytes.to_string(), true),
        (
            "data_offset_bytes",
            |s| s.data_offset_bytes.to_string(),
            false,
        ),
        ("ctime_secs", |s| s.ctime_secs.to_string(), false),
        (
            "feature_incompat",
            |s| s.feature_incompat.to_string(),
            false,
        ),
    ];
    let current = sb.events == r.events;
    let differs = fields
        .into_iter()
        .filter(|(_, _, grows)| current || !grows)
        .map(|(field, value, _)| (field, value(sb), value(r)))
        .find(|(_, found, expected)| found != expected);
    if let Some((field, found, expected)) = differs {
        return Err(AssembleError::Disagree {
            name: name.to_string(),
            field,
            found,
            expected,
            reference: reference.0.clone(),
        });
    }
    check_role_identity(name, sb, reference)
}

/// The member's own role must be recorded for it (uuid, data size) in the freshest role table,
/// and every role's data size must agree.
fn check_role_identity(
    name: &str,
    sb: &Superblock,
    reference: &(String, Superblock),
) -> Result<(), AssembleError> {
    let r = &reference.1;
    let disagree = |field, found: String, expected: String| AssembleError::Disagree {
        name: name.to_string(),
        field,
        found,
        expected,
        reference: reference.0.clone(),
    };
    let count = match sb.events == r.events {
        true => r.member_count as usize,
        false => 0,
    };
    for role in 0..count {
        let (mine, theirs) = (sb.roles[role].data_bytes, r.roles[role].data_bytes);
        if mine != theirs {
            return Err(disagree(
                "roles.data_bytes",
                format!("{mine} for role {role}"),
                theirs.to_string(),
            ));
        }
    }
    if let (Some(role), true) = (sb.role_index(), sb.events == r.events) {
        let recorded = r.roles[role].member_uuid;
        if recorded != sb.member_uuid {
            return Err(disagree(
                "member_uuid",
                format!("{} for role {role}", sb.member_uuid),
                recorded.to_string(),
            ));
        }
    }
    Ok(())
}

fn assign_roles(
    found: &[(String, Superblock)],
    plan: &mut AssemblyPlan,
) -> Result<(), AssembleError> {
    let max_events = plan.superblock.events;
    let mut claimed: Vec<Option<usize>> = vec![None; plan.roles.len()];
    for (index, (name, sb)) in found.iter().enumerate() {
        let Role::Active(role) = sb.role else {
            let listed = plan
                .superblock
                .roles
                .iter()
                .any(|e| e.state == RoleState::Spare && e.member_uuid == sb.member_uuid);
            if listed {
                plan.spares.push(index);
            } else {
                plan.warnings.push(format!(
                    "member {name}: a spare no longer listed by the array; left out"
                ));
            }
            continue;
        };
        let role = role as usize;
        if role >= plan.roles.len() {
            // Only a member behind can differ in member count (check_agrees): one whose role
            // the freshest table does not have is no member of the array as it is now.
            plan.warnings.push(format!(
                "member {name}: role {role} is past the array's {} roles (events {} < {max_events}); left out",
                plan.roles.len(),
                sb.events
            ));
            continue;
        }
        let holder = plan.superblock.roles[role].member_uuid;
        if sb.member_uuid != holder {
            // A former member (replaced, or rebuilt onto another): the freshest role table
            // names someone else. Never a claimant of the role.
            plan.warnings.push(format!(
                "member {name}: no longer holds role {role} (now {holder}); left out"
            ));
            continue;
        }
        if let Some(first) = claimed[role] {
            return Err(AssembleError::SameRole {
                role,
                first: found[first].0.clone(),
                second: name.clone(),
            });
        }
        claimed[role] = Some(index);
        if sb.events < max_events && !missed_only_a_mark(name, sb, role, plan) {
            plan.warnings.push(format!(
                "member {name}: stale (events {} < {max_events}): it missed writes and is left out",
                sb.events
            ));
            plan.stale.push(StaleMember {
                name: name.clone(),
                role,
                events: sb.events,
                events_expected: max_events,
            });
            continue;
        }
        let recorded = plan.superblock.roles[role].state;
        if recorded != RoleState::Active {
            plan.warnings.push(format!(
                "member {name}: role {role} is recorded as {recorded:?}; left out"
            ));
            continue;
        }
        plan.roles[role] = Some(index);
    }
    Ok(())
}

/// A spare the freshest table records as replacing role `r` resumes the replace if `r`'s
/// member is present and in sync; otherwise it stays a spare (and is rebuilt into `r` if the
/// role is missing, as a replace whose old member failed). The copy restarts from 0 unless the
/// array was shut down cleanly and the spare's superblock is current: after a crash, a write
/// in flight may have reached one of the two members only.
fn assign_replacement(found: &[(String, Superblock)], plan: &mut AssemblyPlan) {
    let sb = &plan.superblock;
    let target = plan.spares.iter().enumerate().find_map(|(i, &index)| {
        let role = sb.replacing_role(found[index].1.member_uuid)?;
        Some((i, index, role))
    });
    let Some((i, index, role)) = target else {
        return;
    };
    let (name, spare) = &found[index];
    let in_sync = plan.roles[role].is_some_and(|h| found[h].1.recovery_offset_bytes.is_none());
    if !in_sync {
        plan.warnings.push(format!(
            "member {name}: was replacing role {role}, which is not in sync now; kept as a spare"
        ));
        return;
    }
    let current = spare.events == sb.events && sb.state == ArrayState::Clean;
    let offset = match current {
        true => spare.replace_offset_bytes.unwrap_or(0),
        false => 0,
    };
    plan.spares.remove(i);
    plan.replacing = Some((role, index, offset));
    plan.warnings.push(format!(
        "member {name}: the replace of role {role} resumes at data offset {offset}"
    ));
}

/// md's event margin: a member exactly one event behind whose role the freshest table still
/// records as active (in sync) with its uuid missed only a superblock rewrite that changed no
/// member's state — a dirty or clean mark cut short by a crash (the dirty mark is flushed on
/// every member before any data write, the clean mark follows the last flush), so it holds the
/// same data. A member that failed is recorded `faulty` in that same bump and stays stale.
/// Accepting one makes the array dirty if its superblock says dirty, so the resync runs.
fn missed_only_a_mark(name: &str, sb: &Superblock, role: usize, plan: &mut AssemblyPlan) -> bool {
    let max_events = plan.superblock.events;
    assert!(sb.events < max_events, "only a member behind can lag");
    let entry = &plan.superblock.roles[role];
    let one_behind = max_events - sb.events == 1;
    if !one_behind || entry.state != RoleState::Active || entry.member_uuid != sb.member_uuid {
        return false;
    }
    plan.warnings.push(format!(
        "member {name}: one event behind (events {} < {max_events}) but recorded in sync for \
         role {role}: an interrupted dirty/clean mark; used",
        sb.events
    ));
    if sb.state == ArrayState::Dirty {
        plan.superblock.state = ArrayState::Dirty;
    }
    true
}

fn check_survives(
    plan: &mut AssemblyPlan,
    opts: &AssemblyPlanOptions,
) -> Result<(), AssembleError> {
    let sb = &plan.superblock;
    let array = describe_array(sb);
    let missing: Vec<usize> = (0..plan.roles.len())
        .filter(|r| plan.roles[*r].is_none())
        .collect();
    let sizes: Vec<u64> = (0..plan.roles.len())
        .map(|r| sb.roles[r].data_bytes)
        .collect();
    let geometry = Geometry::new(sb.level, sb.chunk_bytes, &sizes)
        .map_err(|e| AssembleError::Engine(format!("array {array}: {e}")))?;
    if geometry.size_bytes() != sb.array_size_bytes {
        return Err(AssembleError::Engine(format!(
            "array {array}: recorded size {} differs from the computed {}",
            sb.array_size_bytes,
            geometry.size_bytes()
        )));
    }
    let present: Vec<bool> = plan.roles.iter().map(Option::is_some).collect();
    if !geometry.survives(&present) {
        let stale = plan.stale.iter().map(|s| s.name.clone()).collect();
        return Err(AssembleError::TooFewMembers {
            array,
            level: sb.level,
            missing,
            stale,
        });
    }
    plan.degraded = !missing.is_empty();
    if plan.degraded && sb.state == ArrayState::Dirty && sb.level.has_parity() {
        let start = dirty_degraded_start(sb, opts).ok_or_else(|| AssembleError::WriteHole {
            array: array.clone(),
            level: sb.level,
            missing,
            journal: sb.journal.map(|j| j.uuid),
            bitmap: sb.bitmap.is_some(),
        })?;
        plan.dirty_degraded = Some(start);
        if start == DirtyDegradedStart::JournalReplay {
            plan.warnings.push(format!(
                "array {array}: not shut down cleanly and degraded: its journal is replayed \
                 before it is used, which makes every stripe written at the crash consistent"
            ));
        }
        // (Forced: the volume warns with the ranges at risk, which it reads from the bitmap.)
    } else if sb.state == ArrayState::Dirty && sb.level.has_redundancy() {
        plan.warnings.push(format!(
            "array {array}: was not shut down cleanly; redundancy of stripes written at the crash may be inconsistent"
        ));
    }
    Ok(())
}

/// May a dirty and degraded RAID 5/6 array with superblock `sb` start, and why: its own
/// journal (by UUID) will be replayed, or the caller forces it.
fn dirty_degraded_start(sb: &Superblock, opts: &AssemblyPlanOptions) -> Option<DirtyDegradedStart> {
    let own_journal = sb.journal.map(|j| j.uuid);
    if opts.journal_replay.is_some() && opts.journal_replay == own_journal {
        return Some(DirtyDegradedStart::JournalReplay);
    }
    opts.start_dirty_degraded
        .then_some(DirtyDegradedStart::Forced)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{create, CreateOptions};

    /// A clean RAID 5 of 3 members at events `base`, as `(name, superblock)` pairs.
    fn raid5(base: u64) -> Vec<(String, Superblock)> {
        let members: Vec<Arc<dyn member::Member>> = (0..3)
            .map(|_| member::open("mem:4M", &Default::default()).expect("mem member"))
            .collect();
        let mut opts = CreateOptions::new(Level::Raid5, "lag");
        opts.chunk_bytes = 64 * 1024;
        let sbs = create(&members, &opts).expect("create");
        sbs.into_iter()
            .enumerate()
            .map(|(i, mut sb)| {
                sb.events = base;
                (format!("m{i}"), sb)
            })
            .collect()
    }

    /// Members `fresh` get `events + 1` with `state` (and `faulty` roles in their table); the
    /// others keep `base` with `old_state`.
    fn bump(
        found: &mut [(String, Superblock)],
        fresh: &[usize],
        state: ArrayState,
        old_state: ArrayState,
        faulty: &[usize],
    ) {
        for (i, (_, sb)) in found.iter_mut().enumerate() {
            sb.state = old_state;
            if fresh.contains(&i) {
                sb.events += 1;
                sb.state = state;
                for &f in faulty {
                    sb.roles[f].state = RoleState::Faulty;
                }
            }
        }
    }

    /// [`raid5`] at `base` after [`bump`].
    fn bumped(
        base: u64,
        fresh: &[usize],
        state: ArrayState,
        old_state: ArrayState,
        faulty: &[usize],
    ) -> Vec<(String, Superblock)> {
        let mut found = raid5(base);
        bump(&mut found, fresh, state, old_state, faulty);
        found
    }

    fn plan_by_default(found: &[(String, Superblock)]) -> Result<AssemblyPlan, AssembleError> {
        plan(found, &AssemblyPlanOptions::default())
    }

    #[test]
    fn one_event_behind_and_recorded_active_is_used_and_dirty() {
        // The clean mark reached member 0 only: 0 says clean at 8, 1 and 2 say dirty at 7.
        let found = bumped(7, &[0], ArrayState::Clean, ArrayState::Dirty, &[]);
        let plan = plan_by_default(&found).expect("assembles");
        assert_eq!(plan.roles, vec![Some(0), Some(1), Some(2)]);
        assert!(plan.stale.is_empty(), "{:?}", plan.stale);
        assert!(!plan.degraded);
        assert_eq!(plan.superblock.events, 8);
        assert_eq!(plan.superblock.state, ArrayState::Dirty, "resync must run");
        assert!(
            plan.warnings
                .iter()
                .any(|w| w.contains("m1") && w.contains("one event behind")),
            "{:?}",
            plan.warnings
        );
    }

    #[test]
    fn dirty_mark_cut_short_keeps_the_freshest_dirty_state() {
        // The dirty mark reached members 0 and 2: they say dirty at 4, member 1 clean at 3.
        let found = bumped(3, &[0, 2], ArrayState::Dirty, ArrayState::Clean, &[]);
        let plan = plan_by_default(&found).expect("assembles");
        assert_eq!(plan.roles, vec![Some(0), Some(1), Some(2)]);
        assert!(plan.stale.is_empty());
        assert_eq!(plan.superblock.state, ArrayState::Dirty);
    }

    #[test]
    fn all_clean_one_event_behind_stays_clean() {
        let found = bumped(3, &[1], ArrayState::Clean, ArrayState::Clean, &[]);
        let plan = plan_by_default(&found).expect("assembles");
        assert!(plan.stale.is_empty());
        assert_eq!(plan.superblock.state, ArrayState::Clean);
    }

    #[test]
    fn one_event_behind_but_recorded_faulty_is_stale() {
        // Member 2 failed: the others recorded it faulty in the bump it missed.
        let found = bumped(5, &[0, 1], ArrayState::Dirty, ArrayState::Dirty, &[2]);
        let err = plan_by_default(&found).expect_err("dirty and degraded");
        assert!(err.to_string().contains("write hole"), "{err}");
        let force = AssemblyPlanOptions {
            start_dirty_degraded: true,
            ..AssemblyPlanOptions::default()
        };
        let plan = plan(&found, &force).expect("assembles degraded by force");
        assert_eq!(plan.roles, vec![Some(0), Some(1), None]);
        assert!(plan.degraded);
        assert_eq!(plan.stale.len(), 1);
        assert_eq!(plan.stale[0].name, "m2");
        assert_eq!(
            (plan.stale[0].events, plan.stale[0].events_expected),
            (5, 6)
        );
    }

    /// A RAID 5 of 3 that crashed (dirty) and lost member 2, whose superblocks reference
    /// `journal` (write-back).
    fn dirty_degraded(journal: Option<Uuid>) -> Vec<(String, Superblock)> {
        let mut found = bumped(5, &[0, 1, 2], ArrayState::Dirty, ArrayState::Dirty, &[]);
        for (_, sb) in &mut found {
            sb.journal = journal.map(|uuid| crate::JournalRef { uuid, kind: 2 });
        }
        found.truncate(2);
        found
    }

    #[test]
    fn dirty_degraded_starts_when_its_own_journal_is_replayed() {
        let journal = Uuid::new_v4();
        let found = dirty_degraded(Some(journal));
        let replay = |uuid| AssemblyPlanOptions {
            journal_replay: Some(uuid),
            ..AssemblyPlanOptions::default()
        };
        let plan = plan(&found, &replay(journal)).expect("starts: the journal closes the hole");
        assert!(plan.degraded);
        assert_eq!(plan.dirty_degraded, Some(DirtyDegradedStart::JournalReplay));
        assert_eq!(plan.roles, vec![Some(0), Some(1), None]);
        // Another journal (not the one the superblocks name) does not close it.
        let err = super::plan(&found, &replay(Uuid::new_v4())).expect_err("foreign journal");
        assert!(err.to_string().contains("write hole"), "{err}");
        // Without it, the refusal names the journal and the flag.
        let err = plan_by_default(&found).expect_err("no journal");
        let msg = err.to_string();
        for needle in [
            format!("Give its journal {journal} (--journal PATH)"),
            "closes the hole; or bring the missing members back;".into(),
            "raidkit serve --start-dirty-degraded".into(),
            "the regions its write-intent bitmap marks".into(),
            "may read back wrong".into(),
        ] {
            assert!(msg.contains(&needle), "{needle:?} not in: {msg}");
        }
    }

    #[test]
    fn dirty_degraded_without_a_journal_starts_only_when_forced() {
        let found = dirty_degraded(None);
        // A journal to replay is not the array's when the array has none.
        let replay = AssemblyPlanOptions {
            journal_replay: Some(Uuid::new_v4()),
            ..AssemblyPlanOptions::default()
        };
        let err = plan(&found, &replay).expect_err("no journal of its own");
        let msg = err.to_string();
        assert!(!msg.contains("Give its journal"), "{msg}");
        assert!(
            msg.contains("back wrong. Bring the missing members back;"),
            "{msg}"
        );
        let forced = AssemblyPlanOptions {
            start_dirty_degraded: true,
            ..AssemblyPlanOptions::default()
        };
        let plan = plan(&found, &forced).expect("forced");
        assert_eq!(plan.dirty_degraded, Some(DirtyDegradedStart::Forced));
        // Clean or healthy arrays need no decision.
        let healthy = bumped(5, &[0, 1, 2], ArrayState::Dirty, ArrayState::Dirty, &[]);
        let plan = super::plan(&healthy, &AssemblyPlanOptions::default()).expect("healthy");
        assert_eq!(plan.dirty_degraded, None);
    }

    #[test]
    fn one_event_behind_but_recorded_missing_is_stale() {
        let mut found = bumped(5, &[0, 1], ArrayState::Clean, ArrayState::Clean, &[]);
        for (_, sb) in &mut found[..2] {
            sb.roles[2].state = RoleState::Missing;
        }
        let plan = plan_by_default(&found).expect("assembles degraded");
        assert_eq!(plan.roles, vec![Some(0), Some(1), None]);
        assert_eq!(plan.stale.len(), 1);
        assert_eq!(plan.stale[0].name, "m2");
    }

    #[test]
    fn two_events_behind_is_stale() {
        let mut found = bumped(5, &[0, 1], ArrayState::Clean, ArrayState::Clean, &[]);
        bump(
            &mut found,
            &[0, 1],
            ArrayState::Dirty,
            ArrayState::Clean,
            &[],
        );
        found[0].1.state = ArrayState::Clean;
        found[1].1.state = ArrayState::Clean;
        let plan = plan_by_default(&found).expect("assembles degraded");
        assert_eq!(plan.roles, vec![Some(0), Some(1), None]);
        assert_eq!(plan.stale.len(), 1);
        assert_eq!(
            (plan.stale[0].events, plan.stale[0].events_expected),
            (5, 7)
        );
        assert_eq!(plan.superblock.state, ArrayState::Clean);
    }

    #[test]
    fn one_event_behind_on_two_of_three_raid5_members_still_assembles() {
        // Only member 0 got the clean mark: both others lag by one and are used.
        let found = bumped(9, &[0], ArrayState::Clean, ArrayState::Dirty, &[]);
        let plan = plan_by_default(&found).expect("assembles");
        assert!(!plan.degraded && plan.stale.is_empty());
    }

    #[test]
    fn checksum_refusal_names_the_member_and_what_to_do() {
        let err = AssembleError::BadSuperblock {
            name: "disk7".into(),
            source: SuperblockError::Checksum {
                stored: 1,
                computed: 2,
            },
        };
        let msg = err.to_string();
        for needle in [
            "member disk7",
            "checksum mismatch",
            "without disk7",
            "add it back",
        ] {
            assert!(msg.contains(needle), "{needle:?} not in: {msg}");
        }
    }
}

//! `assemble`: read every member's superblock, decide with [`plan`], start a [`Volume`].
//! Nothing is written by a refusal: every member byte stays as it was. (Spares given in the
//! options receive their spare superblock once the array has started.)

use std::sync::Arc;

use member::Member;

use crate::owner::{judge, Liveness, ThisHost, LEASE_SECS};
use crate::plan::{plan, AssembleError, AssembleOptions};
use crate::superblock::RoleState;
use crate::{read_superblock, ReadSuperblockError, Volume};

/// Assembles an array from its members, given in any order.
pub fn assemble(
    members: Vec<Arc<dyn Member>>,
    opts: &AssembleOptions,
) -> Result<Volume, AssembleError> {
    let all: Vec<Arc<dyn Member>> = members.iter().chain(&opts.spares).cloned().collect();
    if let Some((name, other)) = crate::find_duplicate(&all) {
        return Err(AssembleError::DuplicateMember { name, other });
    }
    let mut found = Vec::with_capacity(members.len());
    for m in &members {
        let name = m.name().to_string();
        match read_superblock(m.as_ref()) {
            Ok(sb) => found.push((name, sb)),
            Err(ReadSuperblockError::Io(source)) => {
                return Err(AssembleError::Read { name, source })
            }
            Err(ReadSuperblockError::Invalid(source)) => {
                return Err(AssembleError::BadSuperblock { name, source })
            }
        }
    }
    check_owner(&found, opts)?;
    let decided = plan(&found, opts)?;
    // Members that were absent (recorded missing, not faulty) are re-added if the bitmap
    // bounds what they missed; a faulty one waits for the operator's `add`.
    let stale: Vec<Arc<dyn Member>> = decided
        .stale
        .iter()
        .filter(|s| decided.superblock.roles[s.role].state == RoleState::Missing)
        .filter_map(|s| members.iter().find(|m| m.name() == s.name).cloned())
        .collect();
    let own: Vec<_> = found.into_iter().map(|(_, sb)| sb).collect();
    let volume = Volume::start(decided, members, own, opts)?;
    if let Some(me) = &opts.owner {
        volume.claim_owner(me.owner_record(crate::now_secs(), LEASE_SECS));
    }
    for member in stale {
        volume
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

/// Refuses an array whose owner record (on any member) names another live process, unless
/// `force_owner` and that owner is on another host. Pure (nothing is written); `assemble`
/// runs it first, and `raidkit serve` before it rewrites superblocks ahead of assembly.
pub fn check_owner(
    found: &[(String, crate::Superblock)],
    opts: &AssembleOptions,
) -> Result<(), AssembleError> {
    let Some(me) = &opts.owner else {
        return Ok(());
    };
    match live_owner(found, me) {
        Err(AssembleError::Owned { local: false, .. }) if opts.force_owner => Ok(()),
        other => other,
    }
}

/// `Owned` (that can be forced) when a member's owner record names another live process: the
/// one on this host first, else the most recently renewed.
fn live_owner(found: &[(String, crate::Superblock)], me: &ThisHost) -> Result<(), AssembleError> {
    let now_secs = crate::now_secs();
    let live = found
        .iter()
        .filter_map(|(name, sb)| Some((name, sb, sb.owner.as_ref()?)))
        .filter_map(|(name, sb, owner)| match judge(owner, me, now_secs) {
            Liveness::Live { local } => Some((name, sb, owner, local)),
            Liveness::ThisProcess | Liveness::Gone => None,
        })
        .max_by_key(|(_, _, owner, local)| (*local, owner.renewed_secs));
    match live {
        None => Ok(()),
        Some((name, sb, owner, local)) => Err(AssembleError::Owned {
            array: format!("\"{}\"", sb.name),
            name: name.clone(),
            owner: Box::new(owner.clone()),
            local,
            now_secs,
            forcible: true,
        }),
    }
}

/// For commands that rewrite the superblocks of a stopped array (`journal add|remove`,
/// `create`): refuses members whose array another live process serves (its owner record),
/// with no way to force it. Members without a readable superblock are not judged here.
pub fn refuse_if_served(members: &[Arc<dyn Member>]) -> Result<(), AssembleError> {
    let found: Vec<(String, crate::Superblock)> = members
        .iter()
        .filter_map(|m| Some((m.name().to_string(), read_superblock(m.as_ref()).ok()?)))
        .collect();
    live_owner(&found, &ThisHost::get()).map_err(|e| match e {
        AssembleError::Owned {
            array,
            name,
            owner,
            local,
            now_secs,
            ..
        } => AssembleError::Owned {
            array,
            name,
            owner,
            local,
            now_secs,
            forcible: false,
        },
        other => other,
    })
}

//! Is the array served by another live process? The owner records of the superblocks judged
//! as this process sees them ([`crate::owner`]); nothing is written.

use std::sync::Arc;

use member::Member;

use crate::owner::{judge, Liveness, ThisHost};
use crate::plan::{AssembleError, AssemblyPlanOptions};
use crate::superblock::{read_superblock, Superblock};

/// Refuses an array whose owner record (on any member) names another live process, unless
/// `force_owner` and that owner is on another host. Pure (nothing is written); `assemble`
/// runs it first, and `raidkit serve` before it rewrites superblocks ahead of assembly.
pub fn check_owner(
    found: &[(String, Superblock)],
    opts: &AssemblyPlanOptions,
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
fn live_owner(found: &[(String, Superblock)], me: &ThisHost) -> Result<(), AssembleError> {
    let now_secs = crate::superblock::now_secs();
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
    let found: Vec<(String, Superblock)> = members
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

//! `assemble`: read every member's superblock, decide with [`plan`], start a [`Volume`].
//! Nothing is written by a refusal: every member byte stays as it was. (Spares given in the
//! options receive their spare superblock once the array has started.)

use std::sync::Arc;

use member::Member;

use crate::options::AssembleOptions;
use crate::volume::Volume;
use ondisk::owner::LEASE_SECS;
use ondisk::{check_owner, plan, read_superblock, AssembleError, ReadSuperblockError};
use ondisk::{now_secs, RoleState};

/// Assembles an array from its members, given in any order.
pub fn assemble(
    members: Vec<Arc<dyn Member>>,
    opts: &AssembleOptions,
) -> Result<Volume, AssembleError> {
    let all: Vec<Arc<dyn Member>> = members.iter().chain(&opts.spares).cloned().collect();
    if let Some((name, other)) = ondisk::find_duplicate(&all) {
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
    let decided_by = opts.plan_options();
    check_owner(&found, &decided_by)?;
    let decided = plan(&found, &decided_by)?;
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
        volume.claim_owner(me.owner_record(now_secs(), LEASE_SECS));
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

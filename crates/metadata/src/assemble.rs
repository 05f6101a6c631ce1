//! `assemble`: read every member's superblock, decide with [`plan`], start a [`Volume`].
//! Nothing is written: a refusal leaves every member byte as it was.

use std::sync::Arc;

use member::Member;

use crate::plan::{plan, AssembleError, AssembleOptions};
use crate::{read_superblock, ReadSuperblockError, Volume};

/// Assembles an array from its members, given in any order.
pub fn assemble(
    members: Vec<Arc<dyn Member>>,
    opts: &AssembleOptions,
) -> Result<Volume, AssembleError> {
    for (i, m) in members.iter().enumerate() {
        if members[..i]
            .iter()
            .any(|other| crate::same_member(other, m))
        {
            return Err(AssembleError::DuplicateMember {
                name: m.name().to_string(),
            });
        }
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
    let decided = plan(&found, opts)?;
    let own: Vec<_> = found.into_iter().map(|(_, sb)| sb).collect();
    Volume::start(decided, members, own)
}

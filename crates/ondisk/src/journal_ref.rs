//! The journal reference in the superblocks of a stopped array: which journal the array
//! uses ([`freshest_superblock`]'s `journal`), and [`set_journal_ref`] to record or forget it
//! (`raidkit journal add|remove`, and a lost journal detached at assembly).

use std::fmt;
use std::io;
use std::sync::Arc;

use member::Member;

use crate::superblock::{read_superblock, JournalRef, Superblock, SUPERBLOCK_OFFSET};

/// The superblock with the most events among `members` (those without a valid one are
/// skipped); `None` if no member carries one.
pub fn freshest_superblock(members: &[Arc<dyn Member>]) -> Option<Superblock> {
    members
        .iter()
        .filter_map(|m| read_superblock(m.as_ref()).ok())
        .max_by_key(|sb| sb.events)
}

/// Why [`set_journal_ref`] failed: a member's superblock could not be written or flushed.
#[derive(Debug)]
pub struct SetJournalRefError {
    pub member: String,
    /// "write the superblock" or "flush".
    pub action: &'static str,
    pub source: io::Error,
}

impl fmt::Display for SetJournalRefError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "member {}: cannot {}", self.member, self.action)
    }
}

impl std::error::Error for SetJournalRefError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Rewrites every member's superblock with `journal` as its journal reference (nothing else
/// changes: no events bump), then flushes them. Only on a stopped array: a running one
/// rewrites its superblocks itself. Members without a valid superblock are left alone.
pub fn set_journal_ref(
    members: &[Arc<dyn Member>],
    journal: Option<JournalRef>,
) -> Result<(), SetJournalRefError> {
    rewrite_superblocks(members, |sb| sb.journal = journal)
}

/// Rewrites every member's superblock as `change` makes it (nothing else changes: no events
/// bump), then flushes them: [`set_journal_ref`], and `raidkit key`'s new key area. Only on
/// a stopped array. Members without a valid superblock are left alone.
pub fn rewrite_superblocks(
    members: &[Arc<dyn Member>],
    change: impl Fn(&mut Superblock),
) -> Result<(), SetJournalRefError> {
    let failed = |m: &Arc<dyn Member>, action| {
        let member = m.name().to_string();
        move |source| SetJournalRefError {
            member,
            action,
            source,
        }
    };
    for m in members {
        let Ok(mut sb) = read_superblock(m.as_ref()) else {
            continue;
        };
        change(&mut sb);
        // Each flushed before the next is written: a power cut tears at most one.
        m.write_at(&sb.encode()[..], SUPERBLOCK_OFFSET)
            .map_err(failed(m, "write the superblock"))?;
        m.flush().map_err(failed(m, "flush"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{create, CreateOptions};

    #[test]
    fn the_reference_is_recorded_and_forgotten_on_every_member() {
        let members: Vec<_> = (0..3)
            .map(|_| member::open("mem:4M", &member::OpenOptions::default()).unwrap())
            .collect();
        create(&members, &CreateOptions::new("raid5".parse().unwrap(), "j")).unwrap();
        let before = freshest_superblock(&members).unwrap();
        assert_eq!(before.journal, None);
        let reference = JournalRef {
            uuid: uuid::Uuid::new_v4(),
            kind: 2,
        };
        set_journal_ref(&members, Some(reference)).unwrap();
        for m in &members {
            let sb = read_superblock(m.as_ref()).unwrap();
            assert_eq!(sb.journal, Some(reference));
            assert_eq!(sb.events, before.events, "no events bump");
        }
        set_journal_ref(&members, None).unwrap();
        assert_eq!(freshest_superblock(&members).unwrap().journal, None);
    }
}

//! Assembling an array with its journal ([`assemble`]): spares sorted into members of this
//! array and blank ones, the journal checked against the superblocks (a lost journal dropped
//! or refused, one on RAM refused or warned about), then `volume::assemble` replaying the
//! journal's UUID. The journal is attached after this (`stack::ArrayStack::build`), before
//! anything else writes.

use std::sync::Arc;

use anyhow::{bail, Context};
use member::Member;
use ondisk::ArrayState;
use volume::{AssembleOptions, Volume};

use crate::array_journal::{self, DroppedJournal, JournalAtStart, JournalOptions, VolatileJournal};

/// What [`assemble`] tells the operator as it goes (each before the next step, so a refusal
/// that follows does not hide it).
pub enum StartNotice {
    /// The array's journal was not given: it starts without it.
    JournalDropped(DroppedJournal),
    /// The journal is on RAM.
    JournalVolatile(VolatileJournal),
}

/// An assembled array, its journal not yet attached.
pub struct Assembled {
    pub volume: Volume,
    /// It was found dirty (not shut down cleanly) and is not read-only: resync it while it is
    /// served (`lifecycle::start_resync`), after the journal is attached.
    pub needs_resync: bool,
    /// What to attach (`stack::ArrayStack::build`).
    pub journal: JournalAtStart,
}

/// Assembles the array on `members` with `spares` (those that already carry this array's
/// superblock are members, blank ones become spares). `opts` are the assembly options but
/// `spares` and `journal_replay`, which are decided here (a `read_only` start neither claims
/// the array nor detaches a lost journal); `created`: the array was just
/// created on these members (its spares are written already, and a new journal's storage
/// was checked when it was written). Without `created`, RAM members are refused: they start
/// empty.
pub fn assemble(
    mut members: Vec<Arc<dyn Member>>,
    spares: Vec<Arc<dyn Member>>,
    mut opts: AssembleOptions,
    journal: &JournalOptions,
    read_only: bool,
    created: bool,
    notice: &dyn Fn(StartNotice),
) -> anyhow::Result<Assembled> {
    assert!(opts.spares.is_empty() && opts.journal_replay.is_none());
    if !created && members.iter().any(|m| member::ram_spec(m.name())) {
        bail!(
            "RAM members (mem:SIZE, sim:CLASS:SIZE) start empty: use --create to make a new array \
             on them"
        );
    }
    // The first valid one: a member's superblock may be torn (assembly rebuilds it).
    let first = (members.iter()).find_map(|m| ondisk::read_superblock(m.as_ref()).ok());
    let was_dirty = first
        .as_ref()
        .is_some_and(|sb| sb.state == ArrayState::Dirty);
    // Spares that already belong to this array (from an earlier start) are members to
    // assemble; blank ones get a spare superblock.
    let uuid = first.as_ref().map(|sb| sb.array_uuid);
    let (known, blank): (Vec<_>, Vec<_>) = spares.into_iter().partition(|m| {
        ondisk::read_superblock(m.as_ref()).is_ok_and(|sb| Some(sb.array_uuid) == uuid)
    });
    members.extend(known);
    if !created {
        opts.spares = blank;
    }
    let start = array_journal::check_before_assembly(journal, &members, read_only, &opts)?;
    match (&start, created) {
        (JournalAtStart::Dropped(dropped), _) => {
            notice(StartNotice::JournalDropped(dropped.clone()));
        }
        (JournalAtStart::Use(jm, jsb), false) => {
            let allow = journal.allow_volatile;
            if let Some(volatile) = array_journal::check_storage(jm.name(), jsb.mode, allow)? {
                notice(StartNotice::JournalVolatile(volatile));
            }
        }
        _ => {}
    }
    opts.journal_replay = start.replayed_uuid();
    let volume = volume::assemble(members, &opts).context("assembling the array")?;
    Ok(Assembled {
        volume,
        needs_resync: was_dirty && !read_only,
        journal: start,
    })
}

//! The journal in `raidkit`: `--journal PATH [--journal-mode M]` at create and serve, the
//! checks at assembly (a lost write-back journal refuses to start without
//! `--force-journal-loss`), and attaching it (replay, the write-through hook, the write-back
//! export: the `journaled` crate, shared with the power-loss simulation).
//!
//! The superblocks reference the journal by UUID and mode (`journal_uuid`, `journal_kind`);
//! the journal's path is not recorded: give it again with `--journal PATH` at every start.

use std::sync::Arc;

use ::journaled::AttachOptions;
pub use ::journaled::Journaled;
use anyhow::{bail, Context};
use journal::Mode;
use member::{Member, OpenOptions};
use ondisk::{ArrayState, JournalRef, Superblock, SUPERBLOCK_OFFSET};
use volume::Volume;

/// Journal options shared by `create` and `serve`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct JournalArgs {
    /// Journal member: a file or block device on a fast *durable* device (an SSD or NVMe with
    /// power-loss protection, a battery-backed or persistent-memory device). At create, a new
    /// journal is written to it; at serve, the array's journal is replayed from it and used.
    /// Not tmpfs or a RAM disk: a power cut empties them (see --allow-volatile-journal).
    #[arg(long, value_name = "PATH")]
    pub journal: Option<String>,

    /// With a new journal: write-through (closes the RAID 5/6 write hole) or write-back
    /// (acknowledges writes once logged, applies them in the background).
    #[arg(long, value_name = "MODE", default_value = "write-through", value_parser = parse_mode)]
    pub journal_mode: Mode,

    /// With --journal at create: size of a journal file that does not exist yet.
    #[arg(long, value_name = "SIZE", value_parser = crate::cmd::size_arg)]
    pub journal_size: Option<u64>,

    /// Start even though the array's write-back journal is not given: acknowledged writes
    /// that were only in the journal are lost.
    #[arg(long)]
    pub force_journal_loss: bool,

    /// Accept a write-back journal on RAM (tmpfs such as /dev/shm, ramfs, a RAM disk): a
    /// power cut then loses every write it acknowledged that was not yet applied to the
    /// members and flushed there. Refused without this flag; for tests and benchmarks.
    #[arg(long)]
    pub allow_volatile_journal: bool,
}

fn parse_mode(text: &str) -> Result<Mode, String> {
    text.parse()
}

/// Default size of a new journal file.
pub const JOURNAL_SIZE_DEFAULT: u64 = 256 << 20;

/// Opens the journal member named by `path` (created with `size` if given and missing).
pub fn open_journal_member(path: &str, size: Option<u64>) -> anyhow::Result<Arc<dyn Member>> {
    let opts = OpenOptions {
        create_size: size,
        ..OpenOptions::default()
    };
    member::open(path, &opts).with_context(|| format!("cannot open journal {path}"))
}

/// The journal reference of the freshest superblock among `members`, with that superblock.
pub fn array_journal(members: &[Arc<dyn Member>]) -> Option<(Superblock, Option<JournalRef>)> {
    members
        .iter()
        .filter_map(|m| ondisk::read_superblock(m.as_ref()).ok())
        .max_by_key(|sb| sb.events)
        .map(|sb| {
            let j = sb.journal;
            (sb, j)
        })
}

/// Rewrites every member's superblock with `journal` as its journal reference (nothing else
/// changes), then flushes. Only on a stopped array (before assembly).
pub fn set_journal_ref(
    members: &[Arc<dyn Member>],
    journal: Option<JournalRef>,
) -> anyhow::Result<()> {
    for m in members {
        let Ok(mut sb) = ondisk::read_superblock(m.as_ref()) else {
            continue;
        };
        sb.journal = journal;
        m.write_at(&sb.encode()[..], SUPERBLOCK_OFFSET)
            .with_context(|| format!("member {}: cannot write the superblock", m.name()))?;
    }
    for m in members {
        m.flush()
            .with_context(|| format!("member {}: cannot flush", m.name()))?;
    }
    Ok(())
}

/// Before creating a journal (create, serve --create, journal add), before anything is
/// written: [`check_storage`] of `--journal` in `--journal-mode`.
pub fn check_new(args: &JournalArgs) -> anyhow::Result<()> {
    if let Some(path) = &args.journal {
        check_storage(path, args.journal_mode, args.allow_volatile_journal)?;
    }
    Ok(())
}

/// Writes a new journal for the array on `members` and records it in their superblocks
/// (after [`check_new`]).
pub fn add_journal(
    members: &[Arc<dyn Member>],
    args: &JournalArgs,
) -> anyhow::Result<journal::Superblock> {
    let path = args.journal.as_deref().context("no --journal PATH given")?;
    let (sb, existing) = array_journal(members).context("no member carries a superblock")?;
    if sb.state == ArrayState::Dirty || sb.resync_offset_bytes.is_some() {
        // A journal added now would not hold the writes of that crash, yet would let a dirty
        // and degraded start through as if its replay had closed the write hole.
        bail!(
            "array \"{}\" was not shut down cleanly, or its resync (or initial sync) has not \
             finished: serve it without a journal until `raidkit status` shows the resync \
             done, stop it, then add the journal (a journal added now would not hold the \
             writes of that crash)",
            sb.name
        );
    }
    if let Some(j) = existing {
        bail!(
            "array \"{}\" already has journal {} ({}): remove it first",
            sb.name,
            j.uuid,
            mode_name(j.kind)
        );
    }
    let size = args.journal_size.or(Some(JOURNAL_SIZE_DEFAULT));
    let jm = open_journal_member(path, size)?;
    let jsb = journal::format(jm.as_ref(), sb.array_uuid, args.journal_mode)
        .with_context(|| format!("cannot write a journal on {path}"))?;
    set_journal_ref(
        members,
        Some(JournalRef {
            uuid: jsb.journal_uuid,
            kind: args.journal_mode.code(),
        }),
    )?;
    Ok(jsb)
}

/// Checks where a journal in `mode` would live: on RAM ([`member::volatile_storage`]) a
/// write-back journal is refused unless `allow` (`--allow-volatile-journal`), with what it
/// risks; a write-through one is started with a warning. Returns what makes it volatile.
pub fn check_storage(
    path: &str,
    mode: Mode,
    allow: bool,
) -> anyhow::Result<Option<member::Volatile>> {
    let volatile = member::volatile_storage(path)
        .with_context(|| format!("cannot tell what storage journal {path} is on"))?;
    let Some(what) = &volatile else {
        return Ok(None);
    };
    match (mode, allow) {
        (Mode::WriteBack, false) => bail!(
            "write-back journal {path} is {what}: a power cut empties it, losing every write \
             it acknowledged that was not yet applied to the members and flushed there by a \
             checkpoint, and the array then starts only with --force-journal-loss. Put the journal on a fast durable device (an SSD \
             or NVMe with power-loss protection, a battery-backed or persistent-memory \
             device), or use --journal-mode write-through, or give --allow-volatile-journal \
             to accept that loss (tests, benchmarks)"
        ),
        (Mode::WriteBack, true) => eprintln!(
            "raidkit: warning: write-back journal {path} is {what} (--allow-volatile-journal): \
             a power cut loses every write it acknowledged that was not yet applied to the \
             members and flushed there by a checkpoint"
        ),
        (Mode::WriteThrough, _) => eprintln!(
            "raidkit: warning: write-through journal {path} is {what}: a power cut empties it. \
             On RAID 5/6 a FLUSH relies on the journal and the members are flushed only at its \
             checkpoints (every 0.5 s), so writes flushed since the last checkpoint can be lost \
             with it; and the next start must go without --journal (the array forgets the \
             journal and resyncs), so stripes being written at the cut are repaired only by \
             that resync: if a member is lost too, they may read back wrong (the write hole). \
             Put the journal on a fast durable device"
        ),
    }
    Ok(volatile)
}

fn mode_name(kind: u32) -> String {
    Mode::from_code(kind).map_or_else(|| format!("unknown mode {kind}"), |m| m.to_string())
}

/// What `check_before_assembly` decided.
pub enum Plan {
    /// No journal.
    None,
    /// Use the journal on this member (its superblock matches the array's reference).
    Use(Arc<dyn Member>, journal::Superblock),
}

impl Plan {
    /// The UUID of the journal `attach` will replay (for `AssembleOptions::journal_replay`).
    pub fn replayed_uuid(&self) -> Option<ondisk::Uuid> {
        match self {
            Plan::None => None,
            Plan::Use(_, jsb) => Some(jsb.journal_uuid),
        }
    }
}

/// Before assembly: compares the array's journal reference with `--journal`. A referenced
/// write-through journal that is not given is dropped from the superblocks with a warning (the
/// array is back to the write hole); a write-back one refuses without
/// `--force-journal-loss`, saying what may be lost.
///
/// `assemble` are the options the array is then assembled with (without `journal_replay`): a
/// journal is detached only if the array then starts without it — no other live server owns
/// it, and the plan accepts it — so a refused start leaves it attached (its replay is what
/// would let a dirty and degraded RAID 5/6 array start).
pub fn check_before_assembly(
    args: &JournalArgs,
    members: &[Arc<dyn Member>],
    read_only: bool,
    assemble: &volume::AssembleOptions,
) -> anyhow::Result<Plan> {
    let Some((sb, reference)) = array_journal(members) else {
        return Ok(Plan::None);
    };
    match (reference, &args.journal) {
        (None, None) => Ok(Plan::None),
        (None, Some(path)) => bail!(
            "array \"{}\" has no journal; add {path} with `raidkit journal add` first",
            sb.name
        ),
        (Some(j), None) => {
            let lost = LostJournal {
                reference: j,
                read_only,
                assemble,
            };
            lost_journal(args, members, &sb, lost)
        }
        (Some(j), Some(path)) => {
            let jm = open_journal_member(path, None)?;
            let jsb = journal::read_superblock(jm.as_ref())
                .with_context(|| format!("cannot use journal {path}"))?;
            if jsb.journal_uuid != j.uuid || jsb.array_uuid != sb.array_uuid {
                bail!(
                    "journal {path} ({}) is not the journal of array \"{}\" (it expects {})",
                    jsb.journal_uuid,
                    sb.name,
                    j.uuid
                );
            }
            Ok(Plan::Use(jm, jsb))
        }
    }
}

/// The array's journal, not given (`lost_journal`), and how the array is started.
struct LostJournal<'a> {
    reference: JournalRef,
    read_only: bool,
    assemble: &'a volume::AssembleOptions,
}

fn lost_journal(
    args: &JournalArgs,
    members: &[Arc<dyn Member>],
    sb: &Superblock,
    lost: LostJournal<'_>,
) -> anyhow::Result<Plan> {
    let (j, read_only) = (lost.reference, lost.read_only);
    let name = &sb.name;
    if j.kind == Mode::WriteBack.code() && !args.force_journal_loss {
        let risk = match sb.state {
            ArrayState::Clean => "it was shut down cleanly, so the journal was drained and \
                                  probably nothing is lost"
                .to_string(),
            ArrayState::Dirty => "it was not shut down cleanly: every acknowledged write still \
                                  in the journal (up to the journal's size) is lost, and stripes \
                                  being written may be inconsistent"
                .to_string(),
        };
        bail!(
            "array \"{name}\" uses write-back journal {} but no --journal was given; {risk}. \
             Give --journal PATH, or --force-journal-loss to start without it",
            j.uuid
        );
    }
    if !read_only {
        // Only if the array starts without it: a refused start keeps the journal, whose
        // replay may be what the next start needs (a dirty and degraded RAID 5/6 array).
        would_start_without_journal(members, lost.assemble)
            .with_context(|| format!("journal {} kept attached to array \"{name}\"", j.uuid))?;
    }
    eprintln!(
        "raidkit: warning: array \"{name}\": {} journal {} not given; running without it{}",
        mode_name(j.kind),
        j.uuid,
        if j.kind == Mode::WriteBack.code() {
            " (forced: acknowledged writes only in the journal are lost)"
        } else {
            " (the RAID 5/6 write hole is open again)"
        }
    );
    if !read_only {
        // A journal left referenced could later replay stale records over newer data.
        set_journal_ref(members, None)?;
        eprintln!("raidkit: journal {} detached from array \"{name}\"", j.uuid);
    }
    Ok(Plan::None)
}

/// The owner check and the assembly plan (pure: nothing is written) of `members` with the
/// options `assemble` and no journal replayed: their refusal (another live server owns the
/// array; a dirty and degraded RAID 5/6 array without `--start-dirty-degraded`; too few
/// members...) before anything is detached.
fn would_start_without_journal(
    members: &[Arc<dyn Member>],
    assemble: &volume::AssembleOptions,
) -> anyhow::Result<()> {
    assert!(
        assemble.journal_replay.is_none(),
        "judged without the journal"
    );
    let mut found = Vec::with_capacity(members.len());
    for m in members {
        let sb = ondisk::read_superblock(m.as_ref())
            .with_context(|| format!("member {}: cannot read the superblock", m.name()))?;
        found.push((m.name().to_string(), sb));
    }
    let decided_by = assemble.plan_options();
    ondisk::check_owner(&found, &decided_by)?;
    ondisk::plan(&found, &decided_by).context("the array would not start without it")?;
    Ok(())
}

/// After assembly, before serving (and before any resync): replays the journal into the
/// volume, starts a new journal session and hooks it into the write path (`journaled`).
pub fn attach(plan: Plan, volume: &Arc<Volume>, read_only: bool) -> anyhow::Result<Journaled> {
    let Plan::Use(jm, jsb) = plan else {
        return Ok(Journaled::none(volume));
    };
    let (name, mode) = (jm.name().to_string(), jsb.mode);
    let opts = AttachOptions { read_only };
    let (journaled, summary) =
        Journaled::attach(jm, jsb, volume, opts).with_context(|| format!("journal {name}"))?;
    eprintln!(
        "raidkit: journal {name} ({mode}): replayed {} records ({} write-back writes, {} bytes)",
        summary.records, summary.array_writes, summary.array_write_bytes
    );
    Ok(journaled)
}

/// Clean shutdown, first half (before `Volume::close`): applies every buffered write.
pub fn drain(journaled: &Journaled) -> anyhow::Result<()> {
    journaled.drain().context("draining the write-back journal")
}

/// Clean shutdown, second half (after `Volume::close`): checkpoints the journal empty.
pub fn close(journaled: &Journaled) -> anyhow::Result<()> {
    if let Some((name, live)) = journaled.close().context("closing the journal")? {
        if live > 0 {
            eprintln!("raidkit: journal {name}: {live} records left for replay");
        }
    }
    Ok(())
}

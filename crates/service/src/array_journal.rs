//! The array's journal from outside the data path: [`add`] writes a new journal and records
//! it in the superblocks of a stopped array, [`check_before_assembly`] compares the array's
//! journal reference with the journal given, `attach` replays it into the assembled volume
//! and hooks it into the write path (the `export` crate, shared with the power-loss
//! simulation), and [`remove`] replays and forgets it.
//!
//! The superblocks reference the journal by UUID and mode (`journal_uuid`, `journal_kind`);
//! the journal's path is not recorded: a front end gives it again at every start.

use std::fmt;
use std::sync::Arc;

use anyhow::{bail, Context};
use export::{AttachOptions, JournalLayer};
use journal::Mode;
use member::{Member, OpenOptions};
use ondisk::{ArrayState, JournalRef, Superblock, Uuid};
use volume::{AssembleOptions, Volume};

/// The journal options of one array, as the operator gave them.
#[derive(Debug, Clone, Default)]
pub struct JournalOptions {
    /// The journal member (a file or block device); `None`: no journal given.
    pub path: Option<String>,
    /// The mode of a new journal.
    pub mode: Mode,
    /// The size of a new journal file that does not exist yet (default
    /// [`JOURNAL_SIZE_DEFAULT`]).
    pub size: Option<u64>,
    /// Start without the array's write-back journal, losing what only it held.
    pub force_loss: bool,
    /// Accept a write-back journal on RAM (see [`check_storage`]).
    pub allow_volatile: bool,
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

/// A journal on storage that a power cut empties, accepted with a warning (its `Display`).
#[derive(Debug, Clone)]
pub struct VolatileJournal {
    pub path: String,
    pub mode: Mode,
    /// What makes it volatile.
    pub what: member::Volatile,
}

impl fmt::Display for VolatileJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (path, what) = (&self.path, &self.what);
        match self.mode {
            Mode::WriteBack => write!(
                f,
                "write-back journal {path} is {what} (--allow-volatile-journal): a power cut \
                 loses every write it acknowledged that was not yet applied to the members and \
                 flushed there by a checkpoint"
            ),
            Mode::WriteThrough => write!(
                f,
                "write-through journal {path} is {what}: a power cut empties it. FLUSH and FUA \
                 still flush the members (nothing flushed is lost), but the next start must go \
                 without --journal (the array forgets the journal and resyncs), so stripes \
                 being written at the cut are repaired only by that resync: if a member is \
                 lost too, they may read back wrong (the write hole). Put the journal on a fast \
                 durable device"
            ),
        }
    }
}

/// Checks where a journal in `mode` would live: on RAM ([`member::volatile_storage`]) a
/// write-back journal is refused unless `allow` (`--allow-volatile-journal`), with what it
/// risks; a write-through one is accepted. Returns what the operator must be warned of.
pub fn check_storage(
    path: &str,
    mode: Mode,
    allow: bool,
) -> anyhow::Result<Option<VolatileJournal>> {
    let volatile = member::volatile_storage(path)
        .with_context(|| format!("cannot tell what storage journal {path} is on"))?;
    let Some(what) = volatile else {
        return Ok(None);
    };
    if mode == Mode::WriteBack && !allow {
        bail!(
            "write-back journal {path} is {what}: a power cut empties it, losing every write \
             it acknowledged that was not yet applied to the members and flushed there by a \
             checkpoint, and the array then starts only with --force-journal-loss. Put the \
             journal on a fast durable device (an SSD or NVMe with power-loss protection, a \
             battery-backed or persistent-memory device), or use --journal-mode \
             write-through, or give --allow-volatile-journal to accept that loss (tests, \
             benchmarks)"
        );
    }
    Ok(Some(VolatileJournal {
        path: path.to_string(),
        mode,
        what,
    }))
}

/// Before creating a journal (create, serve --create, journal add), before anything is
/// written: [`check_storage`] of the journal given, in the mode given.
pub fn check_new(opts: &JournalOptions) -> anyhow::Result<Option<VolatileJournal>> {
    match &opts.path {
        Some(path) => check_storage(path, opts.mode, opts.allow_volatile),
        None => Ok(None),
    }
}

/// Writes a new journal on `path` for the stopped array on `members` and records it in their
/// superblocks (after [`check_new`]).
pub fn add(
    members: &[Arc<dyn Member>],
    path: &str,
    opts: &JournalOptions,
) -> anyhow::Result<journal::Superblock> {
    let sb = ondisk::freshest_superblock(members).context("no member carries a superblock")?;
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
    if let Some(j) = sb.journal {
        bail!(
            "array \"{}\" already has journal {} ({}): remove it first",
            sb.name,
            j.uuid,
            mode_name(j.kind)
        );
    }
    let size = opts.size.or(Some(JOURNAL_SIZE_DEFAULT));
    let jm = open_journal_member(path, size)?;
    let jsb = journal::format(jm.as_ref(), sb.array_uuid, opts.mode)
        .with_context(|| format!("cannot write a journal on {path}"))?;
    let reference = JournalRef {
        uuid: jsb.journal_uuid,
        kind: opts.mode.code(),
    };
    ondisk::set_journal_ref(members, Some(reference))?;
    Ok(jsb)
}

fn mode_name(kind: u32) -> String {
    Mode::from_code(kind).map_or_else(|| format!("unknown mode {kind}"), |m| m.to_string())
}

/// What the array starts with, as [`check_before_assembly`] decided.
pub enum JournalAtStart {
    /// No journal.
    None,
    /// The journal on this member (its superblock matches the array's reference).
    Use(Arc<dyn Member>, journal::Superblock),
    /// The array's journal was not given: it starts without it (see [`DroppedJournal`]).
    Dropped(DroppedJournal),
}

impl JournalAtStart {
    /// The UUID of the journal `attach` will replay (for `AssembleOptions::journal_replay`).
    pub fn replayed_uuid(&self) -> Option<Uuid> {
        match self {
            JournalAtStart::Use(_, jsb) => Some(jsb.journal_uuid),
            JournalAtStart::None | JournalAtStart::Dropped(_) => None,
        }
    }
}

/// The array's journal, not given, and the array started without it: a write-through one
/// (the RAID 5/6 write hole is open again), or a write-back one with `force_loss`. Its
/// `Display` is the warning.
#[derive(Debug, Clone)]
pub struct DroppedJournal {
    pub array: String,
    pub reference: JournalRef,
    /// Forgotten by the superblocks (not when served read-only): a journal left referenced
    /// could later replay stale records over newer data.
    pub detached: bool,
}

impl fmt::Display for DroppedJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let j = self.reference;
        write!(
            f,
            "array \"{}\": {} journal {} not given; running without it{}",
            self.array,
            mode_name(j.kind),
            j.uuid,
            if j.kind == Mode::WriteBack.code() {
                " (forced: acknowledged writes only in the journal are lost)"
            } else {
                " (the RAID 5/6 write hole is open again)"
            }
        )
    }
}

/// Before assembly: compares the array's journal reference with the journal given. A
/// referenced write-through journal that is not given is dropped from the superblocks (the
/// array is back to the write hole); a write-back one refuses without `force_loss`, saying
/// what may be lost. A journal given is not checked for volatile storage here
/// ([`check_storage`]).
///
/// `assemble` are the options the array is then assembled with (without `journal_replay`): a
/// journal is detached only if the array then starts without it — no other live server owns
/// it, and the assembly plan accepts it — so a refused start leaves it attached (its replay
/// is what would let a dirty and degraded RAID 5/6 array start).
pub fn check_before_assembly(
    opts: &JournalOptions,
    members: &[Arc<dyn Member>],
    read_only: bool,
    assemble: &AssembleOptions,
) -> anyhow::Result<JournalAtStart> {
    let Some(sb) = ondisk::freshest_superblock(members) else {
        return Ok(JournalAtStart::None);
    };
    match (sb.journal, &opts.path) {
        (None, None) => Ok(JournalAtStart::None),
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
            lost_journal(opts, members, &sb, lost).map(JournalAtStart::Dropped)
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
            Ok(JournalAtStart::Use(jm, jsb))
        }
    }
}

/// The array's journal, not given (`lost_journal`), and how the array is started.
struct LostJournal<'a> {
    reference: JournalRef,
    read_only: bool,
    assemble: &'a AssembleOptions,
}

fn lost_journal(
    opts: &JournalOptions,
    members: &[Arc<dyn Member>],
    sb: &Superblock,
    lost: LostJournal<'_>,
) -> anyhow::Result<DroppedJournal> {
    let (j, read_only) = (lost.reference, lost.read_only);
    let name = &sb.name;
    if j.kind == Mode::WriteBack.code() && !opts.force_loss {
        let risk = match sb.state {
            ArrayState::Clean => {
                "it was shut down cleanly, so the journal was drained and \
                                  probably nothing is lost"
            }
            ArrayState::Dirty => {
                "it was not shut down cleanly: every acknowledged write still \
                                  in the journal (up to the journal's size) is lost, and stripes \
                                  being written may be inconsistent"
            }
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
        // A journal left referenced could later replay stale records over newer data.
        ondisk::set_journal_ref(members, None)?;
    }
    Ok(DroppedJournal {
        array: name.clone(),
        reference: j,
        detached: !read_only,
    })
}

/// The owner check and the assembly plan (pure: nothing is written) of `members` with the
/// options `assemble` and no journal replayed: their refusal (another live server owns the
/// array; a dirty and degraded RAID 5/6 array without `--start-dirty-degraded`; too few
/// members...) before anything is detached.
fn would_start_without_journal(
    members: &[Arc<dyn Member>],
    assemble: &AssembleOptions,
) -> anyhow::Result<()> {
    assert!(
        assemble.journal_replay.is_none(),
        "judged without the journal"
    );
    let found = ondisk::read_for_assembly(members)?.found;
    let decided_by = assemble.plan_options();
    ondisk::check_owner(&found, &decided_by)?;
    ondisk::plan(&found, &decided_by).context("the array would not start without it")?;
    Ok(())
}

/// What `attach` replayed; its `Display` is the report line.
#[derive(Debug, Clone)]
pub struct Replayed {
    pub journal: String,
    pub mode: Mode,
    pub summary: journal::ScanSummary,
}

impl fmt::Display for Replayed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.summary;
        write!(
            f,
            "journal {} ({}): replayed {} records ({} write-back writes, {} bytes)",
            self.journal, self.mode, s.records, s.array_writes, s.array_write_bytes
        )
    }
}

/// After assembly, before serving (and before any resync): replays the journal into the
/// volume, starts a new journal session and hooks it into the write path (`export`).
/// Without a journal, the volume alone (and no replay). Called by `stack::ArrayStack::build`.
pub(crate) fn attach(
    start: JournalAtStart,
    volume: &Arc<Volume>,
    read_only: bool,
) -> anyhow::Result<(JournalLayer, Option<Replayed>)> {
    let JournalAtStart::Use(jm, jsb) = start else {
        return Ok((JournalLayer::none(volume), None));
    };
    let (journal, mode) = (jm.name().to_string(), jsb.mode);
    // A journal on RAM is not durable: FLUSH and FUA must still reach the members (its storage
    // was judged, and a write-back journal there refused or accepted, before assembly).
    let volatile = member::volatile_storage(jm.name()).ok().flatten().is_some();
    let opts = AttachOptions {
        read_only,
        volatile,
    };
    let (journaled, summary) = JournalLayer::attach(jm, jsb, volume, opts)
        .with_context(|| format!("journal {journal}"))?;
    let replayed = Replayed {
        journal,
        mode,
        summary,
    };
    Ok((journaled, Some(replayed)))
}

/// What [`remove`] did.
#[derive(Debug, Clone)]
pub struct Removed {
    /// The array's name and the journal it no longer references.
    pub array: String,
    pub reference: JournalRef,
    /// Not given: forgotten without a replay (see [`check_before_assembly`]).
    pub dropped: Option<DroppedJournal>,
    /// Given: replayed into the array first.
    pub replayed: Option<Replayed>,
    /// Records the journal still held when it was closed (none after a drain), by name.
    pub left: Option<(String, u64)>,
}

/// Removes the journal of the stopped array on `members`: given (`opts.path`), it is replayed
/// into the array first (a write-back journal is drained: assemble, attach, drain, close),
/// then forgotten; not given, a write-through one is forgotten and a write-back one only with
/// `opts.force_loss` (its data is lost). The caller has checked that no process serves the
/// array (`ondisk::refuse_if_served`).
pub fn remove(members: &[Arc<dyn Member>], opts: &JournalOptions) -> anyhow::Result<Removed> {
    let Some(sb) = ondisk::freshest_superblock(members) else {
        bail!("the array has no journal");
    };
    let Some(reference) = sb.journal else {
        bail!("the array has no journal");
    };
    let start = check_before_assembly(opts, members, false, &AssembleOptions::default())?;
    let (jm, jsb) = match start {
        JournalAtStart::Use(jm, jsb) => (jm, jsb),
        JournalAtStart::Dropped(dropped) => {
            return Ok(Removed {
                array: sb.name,
                reference,
                dropped: Some(dropped),
                replayed: None,
                left: None,
            })
        }
        JournalAtStart::None => bail!("the array has no journal"),
    };
    let assemble = AssembleOptions {
        owner: Some(ondisk::owner::ThisHost::get()),
        journal_replay: Some(jsb.journal_uuid),
        ..AssembleOptions::default()
    };
    let volume = volume::assemble(members.to_vec(), &assemble)
        .context("assembling the array to replay its journal")?;
    let volume = Arc::new(volume);
    let (attached, replayed) = attach(JournalAtStart::Use(jm, jsb), &volume, false)?;
    attached
        .drain()
        .context("draining the write-back journal")?;
    volume.close().context("closing the array")?;
    volume.release_owner();
    let left = attached.close().context("closing the journal")?;
    drop(attached);
    drop(volume);
    ondisk::set_journal_ref(members, None)?;
    Ok(Removed {
        array: sb.name,
        reference,
        dropped: None,
        replayed,
        left,
    })
}

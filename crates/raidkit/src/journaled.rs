//! The journal in `raidkit`: `--journal PATH [--journal-mode M]` at create and serve, the
//! checks at assembly (a lost write-back journal refuses to start without
//! `--force-journal-loss`), replay, the write-through hook, and the write-back export.
//!
//! The superblocks reference the journal by UUID and mode (`journal_uuid`, `journal_kind`);
//! the journal's path is not recorded: give it again with `--journal PATH` at every start.

use std::io;
use std::sync::{Arc, Weak};

use anyhow::{bail, Context};
use journal::{Backing, Journal, Mode, WriteBack, WriteThroughLog};
use member::{Member, OpenOptions};
use metadata::{ArrayState, JournalRef, Superblock, Volume, SUPERBLOCK_OFFSET};

/// Journal options shared by `create` and `serve`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct JournalArgs {
    /// Journal member (a file or block device on a fast device, e.g. under /dev/shm): at
    /// create, a new journal is written to it; at serve, the array's journal is replayed from
    /// it and used.
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
        .filter_map(|m| metadata::read_superblock(m.as_ref()).ok())
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
        let Ok(mut sb) = metadata::read_superblock(m.as_ref()) else {
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

/// Writes a new journal for the array on `members` and records it in their superblocks.
pub fn add_journal(
    members: &[Arc<dyn Member>],
    args: &JournalArgs,
) -> anyhow::Result<journal::Superblock> {
    let path = args.journal.as_deref().context("no --journal PATH given")?;
    let (sb, existing) = array_journal(members).context("no member carries a superblock")?;
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

/// Before assembly: compares the array's journal reference with `--journal`. A referenced
/// write-through journal that is not given is dropped from the superblocks with a warning (the
/// array is back to the write hole); a write-back one refuses without
/// `--force-journal-loss`, saying what may be lost.
pub fn check_before_assembly(
    args: &JournalArgs,
    members: &[Arc<dyn Member>],
    read_only: bool,
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
        (Some(j), None) => lost_journal(args, members, &sb, j, read_only),
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

fn lost_journal(
    args: &JournalArgs,
    members: &[Arc<dyn Member>],
    sb: &Superblock,
    j: JournalRef,
    read_only: bool,
) -> anyhow::Result<Plan> {
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

/// The journal attached to a running volume.
pub struct Journaled {
    volume: Arc<Volume>,
    journal: Option<Arc<Journal>>,
    writeback: Option<WriteBack>,
    /// Every write (RAID 5/6 with a journal) is durable in the journal once acknowledged, so
    /// FLUSH and FUA need no member flush.
    logs_every_write: bool,
}

/// Test hook: `RAIDKIT_TEST_APPLY_DELAY_MS` slows every write-back apply, so a test can kill
/// the server while acknowledged writes are only in the journal.
const APPLY_DELAY_ENV: &str = "RAIDKIT_TEST_APPLY_DELAY_MS";

/// `Volume` as the write-back cache's backing store.
struct VolumeBacking(Arc<Volume>, Option<std::time::Duration>);

impl Backing for VolumeBacking {
    fn size(&self) -> u64 {
        self.0.size_bytes()
    }
    fn stripe_bytes(&self) -> u64 {
        let geometry = self.0.array().geometry();
        match geometry.level().has_parity() {
            true => geometry.stripe_data_bytes(),
            false => geometry.chunk_bytes(),
        }
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        Ok(self.0.read(offset, buf)?)
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        if let Some(delay) = self.1 {
            std::thread::sleep(delay);
        }
        Ok(self.0.write(offset, data)?)
    }
    fn flush(&self) -> io::Result<()> {
        Ok(self.0.flush()?)
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        Ok(self.0.trim(offset, len)?)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        Ok(self.0.write_zeroes(offset, len)?)
    }
}

/// After assembly, before serving (and before any resync): replays the journal into the
/// volume, starts a new journal session and hooks it into the write path.
pub fn attach(plan: Plan, volume: &Arc<Volume>, read_only: bool) -> anyhow::Result<Journaled> {
    let Plan::Use(jm, jsb) = plan else {
        return Ok(Journaled {
            volume: Arc::clone(volume),
            journal: None,
            writeback: None,
            logs_every_write: false,
        });
    };
    let delay = std::env::var(APPLY_DELAY_ENV)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map(std::time::Duration::from_millis);
    // One stripe's member writes (every member's chunk) must fit one record.
    let stripe_record = volume.chunk_bytes() * volume.member_status().len() as u64 + 4096;
    if volume.level().has_parity() && stripe_record > jsb.max_record_bytes() {
        bail!(
            "journal {} is too small for this array: a stripe record needs {stripe_record} \
             bytes, the journal takes records of at most {} (a sixteenth of its ring); use a \
             journal of at least {} bytes",
            jm.name(),
            jsb.max_record_bytes(),
            stripe_record * 16 + 8192
        );
    }
    let backing = Arc::new(VolumeBacking(Arc::clone(volume), delay));
    let summary = journal::recover(jm.as_ref(), &jsb, volume.array(), Some(backing.as_ref()))
        .with_context(|| format!("replaying journal {}", jm.name()))?;
    eprintln!(
        "raidkit: journal {} ({}): replayed {} records ({} write-back writes, {} bytes)",
        jm.name(),
        jsb.mode,
        summary.records,
        summary.array_writes,
        summary.array_write_bytes
    );
    let weak: Weak<Volume> = Arc::downgrade(volume);
    let flusher: journal::Flusher = Arc::new(move || match weak.upgrade() {
        Some(v) => Ok(v.flush()?),
        None => Ok(()),
    });
    let mode = jsb.mode;
    let j = Journal::start(jm, jsb, &summary, flusher).context("starting the journal")?;
    if volume.level().has_parity() {
        volume
            .array()
            .set_write_log(Some(Arc::new(WriteThroughLog::new(Arc::clone(&j)))));
    }
    if (mode == Mode::WriteBack || summary.records > 0) && !read_only {
        // Acknowledged writes may sit in the journal from now on: the superblocks must say
        // dirty (an empty write marks them), so a clean state always means "drained". After a
        // replay (written below the volume) this also lets `close` mark the array clean.
        volume.write(0, &[]).context("marking the array dirty")?;
    }
    let writeback = match mode {
        Mode::WriteThrough => None,
        Mode::WriteBack => Some(
            WriteBack::start(Arc::clone(&j), backing, journal::BUFFER_BYTES_DEFAULT)
                .context("starting the write-back cache")?,
        ),
    };
    Ok(Journaled {
        volume: Arc::clone(volume),
        logs_every_write: volume.level().has_parity(),
        journal: Some(j),
        writeback,
    })
}

impl Journaled {
    /// The NBD export over `inner` (the volume's): reads, writes, flushes and discards go
    /// through the write-back cache when there is one, straight to `inner` otherwise.
    pub fn export<E: nbd::Export>(self: &Arc<Self>, inner: E) -> JournaledExport<E> {
        JournaledExport {
            journaled: Arc::clone(self),
            inner,
        }
    }

    /// Clean shutdown, first half (before `Volume::close`): applies every buffered write.
    pub fn drain(&self) -> anyhow::Result<()> {
        if let Some(wb) = &self.writeback {
            wb.close().context("draining the write-back journal")?;
        }
        Ok(())
    }

    /// Clean shutdown, second half (after `Volume::close`): checkpoints the journal empty and
    /// unhooks it.
    pub fn close(&self) -> anyhow::Result<()> {
        if let Some(j) = &self.journal {
            let live = j.close().context("closing the journal")?;
            self.volume.array().set_write_log(None);
            if live > 0 {
                eprintln!(
                    "raidkit: journal {}: {live} records left for replay",
                    j.name()
                );
            }
        }
        Ok(())
    }
}

/// An export with the write-back cache (if any) in front of `inner`.
pub struct JournaledExport<E> {
    journaled: Arc<Journaled>,
    inner: E,
}

impl<E: nbd::Export> nbd::Export for JournaledExport<E> {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        match &self.journaled.writeback {
            Some(wb) => wb.read(offset, buf),
            None => self.inner.read(offset, buf),
        }
    }
    /// With a journal logging every write, durable once acknowledged: FUA needs nothing more.
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        match &self.journaled.writeback {
            Some(wb) => wb.write(offset, data),
            None => {
                let fua = fua && !self.journaled.logs_every_write;
                self.inner.write(offset, data, fua)
            }
        }
    }
    /// With a journal logging every write, every acknowledged write is already durable in it
    /// (replay restores it), so a FLUSH returns at once; the members are flushed by
    /// checkpoints.
    fn flush(&self) -> io::Result<()> {
        match (&self.journaled.writeback, &self.journaled.journal) {
            (Some(wb), _) => wb.flush(),
            (None, Some(j)) if self.journaled.logs_every_write => match j.failure() {
                Some(reason) => Err(io::Error::other(format!("journal {}: {reason}", j.name()))),
                None => Ok(()),
            },
            _ => self.inner.flush(),
        }
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        match &self.journaled.writeback {
            Some(wb) => wb.trim(offset, len),
            None => self.inner.trim(offset, len),
        }
    }
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> io::Result<()> {
        match &self.journaled.writeback {
            Some(wb) => wb.write_zeroes(offset, len),
            None => self.inner.write_zeroes(offset, len, may_trim),
        }
    }
    /// Buffered writes are not in `inner`'s map: with write-back, everything is data.
    fn block_status(&self, offset: u64, len: u32) -> io::Result<Vec<nbd::Extent>> {
        match &self.journaled.writeback {
            Some(_) => Ok(vec![nbd::Extent::data(len)]),
            None => self.inner.block_status(offset, len),
        }
    }
    fn preferred_block_size(&self) -> u32 {
        self.inner.preferred_block_size()
    }
    /// The journal is shared by every connection, as the volume is.
    fn can_multi_conn(&self) -> bool {
        self.inner.can_multi_conn()
    }
    fn can_fast_zero(&self) -> bool {
        self.journaled.writeback.is_none() && self.inner.can_fast_zero()
    }
}

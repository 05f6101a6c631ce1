//! The volume as an NBD export with its journal layer in front: what `raidkit serve` serves,
//! in a library so that the power-loss simulation (`simtest`) tests this code and not a copy.
//!
//! - [`JournalLayer::attach`]: after assembly and before anything else writes, replays the journal
//!   into the volume (`engine::Array::replay_journal`, then [`replay_array_writes`]), starts a
//!   new journal session, has the engine log RAID 5/6 stripes to it (`Array::set_journal`),
//!   starts its [`Checkpointer`] and, in write-back mode, the write-back cache.
//! - [`JournalExport`] (`JournalLayer::export`): the volume as an [`nbd::Export`] through its
//!   journal layer: reads, writes and discards go through the write-back cache when there is
//!   one, to the volume otherwise (FUA = write then flush; the preferred block size is one
//!   full stripe of data); with a journal logging every write (RAID 5/6), FLUSH returns at
//!   once and FUA needs no member flush, because every acknowledged write is durable in the
//!   journal already and replay restores it. Without a journal ([`JournalLayer::none`]) it is
//!   the volume as it is.
//! - [`WriteBack`]: the write-back cache, whose appliers write to the volume, sharing the
//!   journal ring by the rules of `ring_budget` (where the argument that a write-back journal
//!   cannot deadlock lives, with its code); [`checkpoint`]:
//!   flush the volume, then release the journal's complete records. Everything here calls
//!   down: the journal and the volume call nothing in this crate.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # fn demo(volume: Arc<volume::Volume>, jm: Arc<dyn member::Member>) -> Result<(), Box<dyn std::error::Error>> {
//! use export::{AttachOptions, JournalLayer};
//! let jsb = journal::read_superblock(jm.as_ref())?;
//! let (journaled, replayed) = JournalLayer::attach(jm, jsb, &volume, AttachOptions::default())?;
//! let journaled = Arc::new(journaled);
//! let export = journaled.export();
//! // ... serve `export` (nbd::serve), then at shutdown:
//! journaled.drain()?;
//! volume.close()?;
//! journaled.close()?;
//! # let _ = (export, replayed); Ok(()) }
//! ```

use std::fmt;
use std::io;
use std::sync::Arc;

mod checkpoint;
mod ring_budget;
mod writeback;

pub use checkpoint::{checkpoint, Checkpointer};
pub use writeback::{
    replay_array_write, replay_array_writes, WriteBack, APPLIERS, APPLY_BYTES_MAX,
    BUFFER_BYTES_DEFAULT, NO_SPACE_RETRY,
};

use journal::{Journal, JournalError, Mode, ScanSummary};
use member::Member;
use volume::{Volume, VolumeError};

/// How [`JournalLayer::attach`] attaches a journal.
#[derive(Debug, Clone, Copy, Default)]
pub struct AttachOptions {
    /// The volume is served read-only: replay still writes below it, but nothing marks it.
    pub read_only: bool,
    /// The journal is on storage a power cut empties (tmpfs, ramfs, a RAM disk, `mem:`;
    /// `member::volatile_storage`): what it logged is not durable, so a write-through journal
    /// does not make FLUSH and FUA free — they flush the members as without a journal. (A
    /// write-back journal there is refused unless the operator accepted the loss.)
    pub volatile: bool,
}

/// Why a journal could not be attached.
#[derive(Debug)]
pub enum AttachError {
    /// One stripe's member writes do not fit one journal record.
    TooSmall {
        journal: String,
        stripe_record_bytes: u64,
        max_record_bytes: u64,
    },
    /// Replaying the journal into the volume failed.
    Replay(JournalError),
    /// The new journal session could not start.
    Start(JournalError),
    /// The volume could not be marked dirty before acknowledged writes may sit in the journal.
    MarkDirty(VolumeError),
    /// The write-back cache's applier could not start.
    WriteBack(io::Error),
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttachError::TooSmall {
                journal,
                stripe_record_bytes,
                max_record_bytes,
            } => write!(
                f,
                "journal {journal} is too small for this array: a stripe record needs \
                 {stripe_record_bytes} bytes, the journal takes records of at most \
                 {max_record_bytes} (a sixteenth of its ring); use a journal of at least {} \
                 bytes",
                stripe_record_bytes * 16 + 8192
            ),
            AttachError::Replay(e) => write!(f, "replaying the journal: {e}"),
            AttachError::Start(e) => write!(f, "starting the journal: {e}"),
            AttachError::MarkDirty(e) => write!(f, "marking the array dirty: {e}"),
            AttachError::WriteBack(e) => write!(f, "starting the write-back cache: {e}"),
        }
    }
}

impl std::error::Error for AttachError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AttachError::TooSmall { .. } => None,
            AttachError::Replay(e) | AttachError::Start(e) => Some(e),
            AttachError::MarkDirty(e) => Some(e),
            AttachError::WriteBack(e) => Some(e),
        }
    }
}

/// A running journal's state.
#[derive(Debug, Clone)]
pub struct JournalStatus {
    pub name: String,
    pub write_back: bool,
    pub stats: journal::JournalStats,
    /// Write-back: acknowledged bytes not yet written to the members.
    pub unapplied_bytes: Option<u64>,
}

/// The journal layer of a served volume: the journal attached to it (or none), its checkpoints
/// and, in write-back mode, its write-back cache.
pub struct JournalLayer {
    volume: Arc<Volume>,
    journal: Option<Arc<Journal>>,
    writeback: Option<WriteBack>,
    /// Runs the journal's checkpoints (with a journal). Declared after `writeback`, so it is
    /// dropped after the appliers stopped: an applier may wait for a checkpoint to make room.
    checkpointer: Option<Checkpointer>,
    /// Every write (RAID 5/6 with a journal on durable storage) is durable in the journal
    /// once acknowledged, so FLUSH and FUA need no member flush.
    logs_every_write: bool,
}

impl JournalLayer {
    /// A volume without a journal: the export passes everything through.
    pub fn none(volume: &Arc<Volume>) -> JournalLayer {
        JournalLayer {
            volume: Arc::clone(volume),
            journal: None,
            checkpointer: None,
            writeback: None,
            logs_every_write: false,
        }
    }

    /// After assembly, before serving (and before any resync): replays the journal on `jm`
    /// (whose superblock is `jsb`, already checked to belong to this array) into `volume`,
    /// starts a new journal session and hooks it into the write path. Returns what replay
    /// found.
    pub fn attach(
        jm: Arc<dyn Member>,
        jsb: journal::Superblock,
        volume: &Arc<Volume>,
        opts: AttachOptions,
    ) -> Result<(JournalLayer, ScanSummary), AttachError> {
        // One stripe's member writes (every member's chunk) must fit one record, with room for
        // an apply's table: at most two operations per member (a data write split at source
        // records carries its bytes once references would outweigh them).
        let members = volume.member_status().len() as u64;
        let stripe_record_bytes =
            journal::Record::member_ops_ring_bytes_max(2 * members, volume.chunk_bytes() * members);
        if volume.level().has_parity() && stripe_record_bytes > jsb.max_record_bytes() {
            return Err(AttachError::TooSmall {
                journal: jm.name().to_string(),
                stripe_record_bytes,
                max_record_bytes: jsb.max_record_bytes(),
            });
        }
        // Replay: the stripes logged write-through first (afterwards every stripe being
        // written at the crash is consistent), then the write-back records, through the volume.
        let summary = volume
            .replay_journal(jm.as_ref(), &jsb)
            .map_err(AttachError::Replay)?;
        replay_array_writes(jm.as_ref(), &jsb, &summary, volume).map_err(AttachError::Replay)?;
        // Every stripe being written at a crash is consistent now: background work held back
        // for the replay (`AssembleOptions::journal_replay`) may start.
        volume.journal_replayed();
        let mode = jsb.mode;
        let j = Journal::start(jm, jsb, &summary).map_err(AttachError::Start)?;
        let checkpointer = Checkpointer::start(&j, volume).map_err(|source| {
            AttachError::Start(JournalError::Io {
                name: j.name().to_string(),
                what: "start the checkpoint thread",
                source,
            })
        })?;
        if volume.level().has_parity() {
            volume.set_journal(Some(Arc::clone(&j)));
        }
        if (mode == Mode::WriteBack || summary.records > 0) && !opts.read_only {
            // Acknowledged writes may sit in the journal from now on: the superblocks must
            // say dirty, so a clean state always means "drained".
            volume.mark_dirty().map_err(AttachError::MarkDirty)?;
        }
        let writeback = match mode {
            Mode::WriteThrough => None,
            Mode::WriteBack => Some(
                WriteBack::start(Arc::clone(&j), Arc::clone(volume), BUFFER_BYTES_DEFAULT)
                    .map_err(AttachError::WriteBack)?,
            ),
        };
        let journaled = JournalLayer {
            volume: Arc::clone(volume),
            logs_every_write: volume.level().has_parity() && !opts.volatile,
            journal: Some(j),
            checkpointer: Some(checkpointer),
            writeback,
        };
        Ok((journaled, summary))
    }

    /// The volume as an NBD export with this layer in front: reads, writes, flushes and
    /// discards go through the write-back cache when there is one, to the volume otherwise.
    pub fn export(self: &Arc<Self>) -> JournalExport {
        JournalExport {
            layer: Arc::clone(self),
        }
    }

    /// The journal's state for `raidkit status` (`None` without a journal).
    pub fn status(&self) -> Option<JournalStatus> {
        let j = self.journal.as_ref()?;
        Some(JournalStatus {
            name: j.name().to_string(),
            write_back: self.writeback.is_some(),
            stats: j.stats(),
            unapplied_bytes: self.writeback.as_ref().map(WriteBack::buffered_bytes),
        })
    }

    /// True with a write-back journal: every acknowledged write is durable.
    pub fn acks_are_durable(&self) -> bool {
        self.writeback.is_some()
    }

    /// Clean shutdown, first half (before `Volume::close`): applies every buffered write.
    pub fn drain(&self) -> io::Result<()> {
        match &self.writeback {
            Some(wb) => wb.close(),
            None => Ok(()),
        }
    }

    /// Clean shutdown, second half (after `Volume::close`): checkpoints the journal empty and
    /// unhooks it. Returns the records left for replay (0 after a clean drain), and the
    /// journal's name.
    pub fn close(&self) -> Result<Option<(String, u64)>, JournalError> {
        let Some(j) = &self.journal else {
            return Ok(None);
        };
        let released = checkpoint::checkpoint(j, &self.volume);
        let live = self.checkpointer.as_ref().map_or(0, Checkpointer::stop);
        released?;
        self.volume.set_journal(None);
        Ok(Some((j.name().to_string(), live)))
    }
}

/// The volume as an NBD export, through its journal layer: the write-back cache when there is
/// one, else the volume (FUA = write then flush, unless the journal logs every write).
pub struct JournalExport {
    layer: Arc<JournalLayer>,
}

impl nbd::Export for JournalExport {
    fn size(&self) -> u64 {
        self.layer.volume.size_bytes()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        match &self.layer.writeback {
            Some(wb) => wb.read(offset, buf),
            None => Ok(self.layer.volume.read(offset, buf)?),
        }
    }
    /// With a journal logging every write, durable once acknowledged: FUA needs nothing more.
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        let volume = &self.layer.volume;
        match &self.layer.writeback {
            Some(wb) => wb.write(offset, data),
            None => {
                volume.write(offset, data)?;
                if fua && !self.layer.logs_every_write {
                    volume.flush()?;
                }
                Ok(())
            }
        }
    }
    /// With a journal logging every write, every acknowledged write is already durable in it
    /// (replay restores it), so a FLUSH returns at once; the members are flushed by
    /// checkpoints.
    fn flush(&self) -> io::Result<()> {
        match (&self.layer.writeback, &self.layer.journal) {
            (Some(wb), _) => wb.flush(),
            (None, Some(j)) if self.layer.logs_every_write => match j.failure() {
                Some(reason) => Err(io::Error::other(format!("journal {}: {reason}", j.name()))),
                None => Ok(()),
            },
            _ => Ok(self.layer.volume.flush()?),
        }
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        match &self.layer.writeback {
            Some(wb) => wb.trim(offset, len),
            None => Ok(self.layer.volume.trim(offset, len)?),
        }
    }
    fn write_zeroes(&self, offset: u64, len: u64, _may_trim: bool) -> io::Result<()> {
        match &self.layer.writeback {
            Some(wb) => wb.write_zeroes(offset, len),
            None => Ok(self.layer.volume.write_zeroes(offset, len)?),
        }
    }
    /// One full stripe of data (no read-modify-write).
    fn preferred_block_size(&self) -> u32 {
        let bytes = self.layer.volume.geometry().full_stripe_bytes();
        u32::try_from(bytes).unwrap_or(u32::MAX)
    }
    /// Flush flushes every member (or the journal holds every acknowledged write), and nothing
    /// is cached per connection: a flush on any connection covers writes completed on all of
    /// them.
    fn can_multi_conn(&self) -> bool {
        true
    }
}

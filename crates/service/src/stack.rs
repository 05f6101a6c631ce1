//! [`ArrayStack`]: what serves one assembled array, from the volume up: its journal layer
//! (replayed and attached), the read cache in front of it, the export a server serves, the
//! admin control whose status carries the journal and cache sections, and the close in its
//! safe order. `raidkit serve` builds one; the daemon builds one per array.

use std::sync::{Arc, Weak};
use std::time::Duration;

use admin::control::VolumeControl;
use admin::status::{JournalMode, JournalSection, Status};
use anyhow::Context;
use cache::{CacheConfig, ReadCache};
use crypt::{DataCipher, Encrypted};
use export::{JournalExport, JournalLayer, JournalStatus};
use member::{OpenOptions, RemoteOptions};
use volume::Volume;

use crate::array_journal::{self, JournalAtStart, Replayed};
use crate::lifecycle::{self, Closed};

/// How the stack over one array is built.
#[derive(Debug, Clone, Default)]
pub struct StackOptions {
    /// Nothing is written: a replayed journal does not mark the array dirty.
    pub read_only: bool,
    /// RAID 5/6: how long the partial last stripe of a sequential write may wait for the write
    /// that completes it (zero: never).
    pub gather_wait: Duration,
    /// The read cache (`size_bytes` 0: a pass-through); validated by the caller.
    pub cache: CacheConfig,
    /// Members (as named) read only when no other copy can serve: RAID 1, 10
    /// (`Volume::set_write_mostly`, which refuses other levels and unknown names).
    pub write_mostly: Vec<String>,
    /// How reads choose a copy and whether they go around a slow member
    /// (`Volume::set_read_balance`).
    pub read_balance: volume::ReadBalance,
}

/// The volume as an export: its requests counted as the clients sent them, then through the
/// read cache (plaintext), the encryption layer (a pass-through for an array without
/// encryption), then the journal layer (ciphertext, as everything below).
pub type CachedExport = nbd::Counted<ReadCache<Encrypted<JournalExport>>>;

/// One array's serving stack: volume ← journal layer ← read cache ← client counters.
pub struct ArrayStack {
    volume: Arc<Volume>,
    /// Every member of the array is behind it (see [`member::Fence`]).
    fence: member::Fence,
    journal: Arc<JournalLayer>,
    export: Arc<CachedExport>,
}

impl ArrayStack {
    /// After assembly (`start::assemble`), before anything else reads or writes the array
    /// (resync included): attaches the journal with its replay and puts the read cache in
    /// front, with the encryption layer between them when `cipher` is given (the array is
    /// encrypted: `crate::unlock`). Returns what the replay found, for the operator.
    /// `fence` is the one the array's members (and journal) are behind; members the admin
    /// actions open are put behind it too.
    pub fn build(
        volume: Volume,
        journal: JournalAtStart,
        opts: &StackOptions,
        cipher: Option<DataCipher>,
        fence: member::Fence,
    ) -> anyhow::Result<(ArrayStack, Option<Replayed>)> {
        let volume = Arc::new(volume);
        volume.set_gather_wait(opts.gather_wait);
        volume
            .set_write_mostly(&opts.write_mostly)
            .context("--write-mostly")?;
        volume.set_read_balance(opts.read_balance);
        let (journal, replayed) = array_journal::attach(journal, &volume, opts.read_only)?;
        let journal = Arc::new(journal);
        let encrypted = Encrypted::new(journal.export(), cipher);
        let cache =
            ReadCache::new(encrypted, opts.cache.clone()).context("starting the read cache")?;
        let export = Arc::new(nbd::Counted::new(cache));
        // A scrub repair or a resync can change what the volume reads underneath the cache (a
        // RAID 6 data fix, a mirror copy rewritten): drop those blocks. Weak, so the volume
        // does not keep the cache (and, through it, itself) alive.
        let weak = Arc::downgrade(&export);
        volume.set_data_changed_hook(Box::new(move |offset, len| {
            if let Some(export) = weak.upgrade() {
                export.inner().invalidate(offset, len);
            }
        }));
        let stack = ArrayStack {
            volume,
            fence,
            journal,
            export,
        };
        Ok((stack, replayed))
    }

    pub fn volume(&self) -> &Arc<Volume> {
        &self.volume
    }

    /// The journal layer (its `status` is `None` without a journal): what the monitor reads
    /// the journal's pressure from.
    pub fn journal(&self) -> &Arc<JournalLayer> {
        &self.journal
    }

    /// What a server serves. Every clone must be dropped before [`ArrayStack::close`].
    pub fn export(&self) -> Arc<CachedExport> {
        Arc::clone(&self.export)
    }

    /// The admin actions on this array, its status carrying the journal and read-cache
    /// sections (`admin::status::Status`), its stats the client counters. `open` and `remote` open the members `add` and
    /// `replace` name, as the array's own were opened; `log` hears each action done.
    pub fn control(
        &self,
        open: OpenOptions,
        remote: RemoteOptions,
        log: admin::Log,
    ) -> VolumeControl {
        let journal = Arc::clone(&self.journal);
        let cache: Weak<CachedExport> = Arc::downgrade(&self.export);
        // What makes the journal's storage volatile (checked at start already).
        let volatile = journal
            .status()
            .and_then(|j| member::volatile_storage(&j.name).ok().flatten());
        let control = VolumeControl::new(Arc::clone(&self.volume), open, remote, log)
            .with_fence(self.fence.clone());
        let client = Arc::clone(self.export.counters());
        (control.with_client_counters(client)).with_status(Box::new(move |volume| Status {
            volume,
            journal: journal_section(journal.status(), volatile.as_ref()),
            cache: cache.upgrade().map(|c| c.inner().stats()),
            qos: None,
        }))
    }

    /// Once the server returned and dropped its exports (and the reconnect thread stopped):
    /// stops the read cache, then `lifecycle::close` (drain, close the volume, checkpoint the
    /// journal, release the owner record).
    pub fn close(self) -> Closed {
        let ArrayStack {
            volume,
            journal,
            export,
            fence: _,
        } = self;
        drop(export);
        lifecycle::close(&volume, &journal)
    }
}

/// The journal's part of the admin status (null without a journal). `volatile`: what makes
/// the journal's storage lose its contents at a power cut.
fn journal_section(
    status: Option<JournalStatus>,
    volatile: Option<&member::Volatile>,
) -> Option<JournalSection> {
    let j = status?;
    Some(JournalSection {
        name: j.name,
        mode: match j.write_back {
            true => JournalMode::WriteBack,
            false => JournalMode::WriteThrough,
        },
        volatile: volatile.is_some(),
        volatile_reason: volatile.map(ToString::to_string),
        ring_bytes: j.stats.capacity_bytes,
        used_bytes: j.stats.used_bytes,
        write_back_record_bytes: j.stats.array_write_bytes,
        records_live: j.stats.records_live,
        commits: j.stats.commits,
        checkpoints: j.stats.checkpoints,
        pressure_applies: j.stats.pressure_applies,
        unapplied_bytes: j.unapplied_bytes,
    })
}

//! The journal options of `create` and `serve` (`--journal PATH [--journal-mode M]`...), as
//! `service::array_journal::JournalOptions`, and the lines `raidkit` prints about the journal.

use journal::Mode;
use service::array_journal::{DroppedJournal, JournalOptions, Replayed, VolatileJournal};

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

impl JournalArgs {
    pub fn options(&self) -> JournalOptions {
        JournalOptions {
            path: self.journal.clone(),
            mode: self.journal_mode,
            size: self.journal_size,
            force_loss: self.force_journal_loss,
            allow_volatile: self.allow_volatile_journal,
        }
    }
}

/// Warns of a journal on RAM, if it is.
pub fn warn_volatile(volatile: Option<VolatileJournal>) {
    if let Some(volatile) = volatile {
        eprintln!("raidkit: warning: {volatile}");
    }
}

/// Warns that the array runs without its journal, and whether it was detached.
pub fn warn_dropped(dropped: &DroppedJournal) {
    eprintln!("raidkit: warning: {dropped}");
    if dropped.detached {
        eprintln!(
            "raidkit: journal {} detached from array \"{}\"",
            dropped.reference.uuid, dropped.array
        );
    }
}

/// Reports a replay.
pub fn report_replayed(replayed: Option<Replayed>) {
    if let Some(replayed) = replayed {
        eprintln!("raidkit: {replayed}");
    }
}

/// Reports records a closed journal left for the next replay.
pub fn report_left(left: Option<(String, u64)>) {
    if let Some((name, live)) = left.filter(|(_, live)| *live > 0) {
        eprintln!("raidkit: journal {name}: {live} records left for replay");
    }
}

//! `raidkit journal add|remove`: attach a journal to a stopped array, or take it away
//! (replaying it first, so a write-back journal is drained).

use std::sync::Arc;

use anyhow::Context;
use member::{Member, OpenOptions};
use service::array_journal::{self, JournalOptions};

use crate::journal_args;

/// Add or remove the journal of a stopped array.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Write a new journal on PATH and record it in the members' superblocks.
    Add {
        /// write-through (closes the RAID 5/6 write hole) or write-back.
        #[arg(long, value_name = "MODE", default_value = "write-through")]
        mode: journal::Mode,
        /// Size of the journal file if it does not exist yet (default 256M).
        #[arg(long, value_name = "SIZE", value_parser = super::size_arg)]
        size: Option<u64>,
        /// Accept a write-back journal on RAM (tmpfs, ramfs, a RAM disk): a power cut loses
        /// every write it acknowledged that was not yet flushed to the members.
        #[arg(long)]
        allow_volatile_journal: bool,
        /// The journal member: a file or block device on a fast durable device (SSD, NVMe,
        /// battery-backed or persistent memory), not tmpfs.
        #[arg(value_name = "PATH")]
        path: String,
        /// The array's members (any order).
        #[arg(value_name = "MEMBER", required = true)]
        members: Vec<String>,
    },
    /// Replay the journal into the array (draining a write-back journal), then forget it.
    Remove {
        /// The journal member; needed to drain a write-back journal.
        #[arg(long, value_name = "PATH")]
        journal: Option<String>,
        /// Without --journal, forget a write-back journal anyway (its data is lost).
        #[arg(long)]
        force_journal_loss: bool,
        /// The array's members (any order).
        #[arg(value_name = "MEMBER", required = true)]
        members: Vec<String>,
    },
}

/// Opens the members of a stopped array: refused while another process serves it (its owner
/// record names a live process), since its superblocks are rewritten here (`what`: what is
/// done, for the message).
pub(crate) fn open_stopped(specs: &[String], what: &str) -> anyhow::Result<Vec<Arc<dyn Member>>> {
    let members = specs
        .iter()
        .map(|s| {
            member::open(s, &OpenOptions::default()).with_context(|| format!("cannot open {s}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    ondisk::refuse_if_served(&members)
        .with_context(|| format!("{what} only on a stopped array"))?;
    Ok(members)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.action {
        Action::Add {
            mode,
            size,
            allow_volatile_journal,
            path,
            members,
        } => {
            let opts = JournalOptions {
                path: Some(path.clone()),
                mode,
                size,
                force_loss: false,
                allow_volatile: allow_volatile_journal,
            };
            journal_args::warn_volatile(array_journal::check_new(&opts)?);
            let members = open_stopped(&members, "the journal is added or removed")?;
            let jsb = array_journal::add(&members, &path, &opts)?;
            println!(
                "raidkit: journal {} ({mode}) added on {path}",
                jsb.journal_uuid
            );
            Ok(())
        }
        Action::Remove {
            journal,
            force_journal_loss,
            members,
        } => {
            let members = open_stopped(&members, "the journal is added or removed")?;
            let opts = JournalOptions {
                path: journal,
                force_loss: force_journal_loss,
                ..JournalOptions::default()
            };
            let removed = array_journal::remove(&members, &opts)?;
            if let Some(dropped) = &removed.dropped {
                journal_args::warn_dropped(dropped);
            }
            journal_args::report_replayed(removed.replayed);
            journal_args::report_left(removed.left);
            println!(
                "raidkit: journal {} removed from array \"{}\"",
                removed.reference.uuid, removed.array
            );
            Ok(())
        }
    }
}

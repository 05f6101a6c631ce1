//! `raidkit grow`: a stopped array takes more room — `--size max` (every level: members
//! replaced by larger ones), `--add` on linear (members appended) and on RAID 0/5/6 (a reshape
//! that moves the data, offline, resumed when run again; the work is `volume::grow`'s, this
//! module parses and prints: `progress`). More members for RAID 10,
//! `--chunk`, `--level` and growing a running array are not built yet and are refused, saying
//! so (docs/DESIGN.md "Reshape").

use std::path::PathBuf;

use anyhow::{bail, Context};
use ondisk::{GrowReport, NewSpace};
use volume::grow::GrowOptions;

use crate::units::human_bytes;

mod progress;

/// Grow a stopped array: use the room of members replaced by larger ones (--size max, every
/// level), append members to a linear array (--add), or add members to a RAID 0, 5 or 6 array
/// by moving its data to the wider layout (--add: a reshape, run by this command with a
/// progress bar). The new size is recorded in every member's superblock (events + 1); clients
/// see it when the array is served again.
///
/// The array must be stopped cleanly with every role in sync. The new part of a RAID 1, 10, 5
/// or 6 array is zeroed when every member is a file (hole punch), otherwise resynced in the
/// background by the next start; a reshape writes it with zeroes. A reshape that stops (kill,
/// crash, power cut) loses nothing: run the same command again (or grow with every member,
/// the new ones too) and it resumes; until it ends the array does not start. Not built yet
/// (refused): growing a running array (--admin), adding members to RAID 10, --chunk and
/// --level; a reshape of an array with a journal or block checksums.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// "max": every member's data area grows to what the member holds now (the smallest
    /// member, rounded down to the chunk; linear: the last member).
    #[arg(long, value_name = "max", required_unless_present_any = ["add", "chunk", "level"])]
    size: Option<String>,
    /// A new member (repeat for more): appended to a linear array; on RAID 0/5/6 the data moves
    /// to the layout with the new members (a reshape). It must be unused (or --force) and at
    /// least as large as the data offset plus the data each member holds.
    #[arg(long, value_name = "NEW", conflicts_with = "size")]
    add: Vec<String>,
    /// Change the chunk size (a reshape): not built yet.
    #[arg(long, value_name = "SIZE")]
    chunk: Option<String>,
    /// Convert to another level (a reshape): not built yet.
    #[arg(long, value_name = "LEVEL")]
    level: Option<String>,
    /// Overwrite new members that carry a superblock or data.
    #[arg(long)]
    force: bool,
    /// The admin socket of a server running the array: growing a running array is not built
    /// yet (refused, saying how to grow it stopped).
    #[arg(long, value_name = "PATH")]
    admin: Option<PathBuf>,
    /// The array, when the server (a `raidkit daemon`) serves several.
    #[arg(long, value_name = "NAME", requires = "admin")]
    array: Option<String>,
    /// The stopped array's members and spares (any order): every one of them.
    #[arg(value_name = "MEMBER", required_unless_present = "admin")]
    members: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let what = match (&args.chunk, &args.level) {
        (Some(_), _) => Some("changing the chunk size (--chunk)"),
        (_, Some(_)) => Some("converting the level (--level)"),
        _ => None,
    };
    if let Some(what) = what {
        bail!(
            "{what} moves every stripe (a reshape), which this raidkit does not \
             do yet; built are --size max (every level) and --add (linear), on a stopped array"
        );
    }
    if let Some(admin) = &args.admin {
        let array = match &args.array {
            Some(name) => format!("array {name} served at {}", admin.display()),
            None => format!("the array served at {}", admin.display()),
        };
        bail!(
            "growing a running array is not built yet ({array}); stop it, run \
             `raidkit grow {} MEMBER...` with every member and spare, then start it again",
            match args.add.is_empty() {
                true => "--size max".to_string(),
                false => args
                    .add
                    .iter()
                    .map(|a| format!("--add {a}"))
                    .collect::<Vec<_>>()
                    .join(" "),
            }
        );
    }
    if let Some(size) = &args.size {
        if size != "max" {
            bail!(
                "--size {size}: only \"max\" is supported (the array takes all \
                 the room its members have)"
            );
        }
    }
    let members = super::journal::open_stopped(&args.members, "an array is grown")?;
    // An array mid-reshape (a grow --add that stopped): the same command, or grow with every
    // member, resumes it (a member given both ways counts once).
    let fresh_add: Vec<String> = args
        .add
        .iter()
        .filter(|s| !args.members.contains(s))
        .cloned()
        .collect();
    let new = open_new(&fresh_add)?;
    let options = GrowOptions {
        force: args.force,
        ..GrowOptions::default()
    };
    let mut progress = progress::Progress::new();
    let report = volume::grow::grow(&members, &new, &options, &mut |event| {
        progress.event(event);
        Ok(())
    });
    progress.finish();
    let report = match report {
        Ok(report) => report,
        Err(e) => {
            // A member failed and the level goes on without it: the exact command that
            // finishes the reshape degraded.
            if let volume::grow::GrowAddError::MemberFailed {
                member,
                survives: true,
                ..
            } = &e
            {
                if args.add.contains(member) || args.members.contains(member) {
                    let mut rerun = vec!["raidkit grow".to_string()];
                    rerun.extend(
                        args.add
                            .iter()
                            .filter(|a| *a != member && !args.members.contains(a))
                            .map(|a| format!("--add {a}")),
                    );
                    rerun.extend(args.members.iter().filter(|m| *m != member).cloned());
                    bail!("{e}:\n  {}", rerun.join(" "));
                }
            }
            return Err(e.into());
        }
    };
    print!("{}", said(&report));
    Ok(())
}

fn open_new(add: &[String]) -> anyhow::Result<Vec<std::sync::Arc<dyn member::Member>>> {
    let new = add
        .iter()
        .map(|s| {
            member::open(s, &member::OpenOptions::default())
                .with_context(|| format!("cannot open new member {s}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    ondisk::refuse_if_served(&new).context("a new member belongs to a served array")?;
    Ok(new)
}

/// What `grow` prints about a grow that happened.
fn said(report: &GrowReport) -> String {
    let mut out = format!(
        "raidkit: array {} grown from {} to {} (events {})\n",
        report.array,
        human_bytes(report.old_size),
        human_bytes(report.new_size),
        report.events
    );
    match report.new_space {
        NewSpace::NoRedundancy => {}
        NewSpace::Zeroed => out.push_str("raidkit: the new part was zeroed (no resync needed)\n"),
        NewSpace::Resync { from } => out.push_str(&format!(
            "raidkit: the new part is resynced in the background from array byte {from} when \
             the array starts\n"
        )),
    }
    for note in &report.notes {
        out.push_str(&format!("raidkit: note: {note}\n"));
    }
    out.push_str(
        "raidkit: NBD clients see the new size when they connect again (the size is sent at \
         the handshake)\n",
    );
    out
}

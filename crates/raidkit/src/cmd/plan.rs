//! `raidkit plan`: predicts array configurations over disk models in virtual time and
//! recommends one (crate `plan`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use bench::workload::{self, Goal, Pattern, Profile};
use cache::{CacheConfig, ReadAhead};
use layout::Level;
use plan::config::{Disks, JournalMode, MemberIo};
use plan::sweep::{gb, Ask, Plan};

/// Predict how arrays of the given disks would serve a workload, and recommend one: sweeps
/// level × member count (up to the disks given) × chunk × read-ahead × journal mode, each
/// configuration run in virtual time on the disk models (`sim:` members' models, so an hour of
/// disk time takes seconds), healthy and with one disk failed, and reports predicted IOPS,
/// MB/s, latency p50/p99, usable capacity, failures survived, rebuild time and the chance that
/// an unrecoverable read error during a rebuild loses data. Workloads: file-server, database,
/// video, backup, build; or one of bench's (rand-read, seq-write, …) with --size, --qd,
/// --clients. The prediction is of the case `raidkit bench` runs with the same arguments (its
/// command is printed), through the same stack: read cache and journal included.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The disks: COUNTxCLASS[:SIZE][:OPTIONS], CLASS one of hdd7200, hdd10k, hdd15k, ssd,
    /// nvme (e.g. 4xhdd7200, 6xssd:2T, 4xhdd7200:1G:cache=off); SIZE defaults to the modelled
    /// drive's (hdd7200 4T, hdd10k 900G, hdd15k 600G, ssd and nvme 1T).
    #[arg(long, value_name = "SPEC")]
    disks: String,

    /// The workload: file-server, database, video, backup, build, or a bench workload
    /// (seq-read, seq-write, seq-rw, rand-read, rand-write, rand-rw, database).
    #[arg(long, short = 'w', value_name = "NAME")]
    workload: String,

    /// Usable capacity needed: smaller configurations are shown but not recommended.
    #[arg(long, value_name = "SIZE", value_parser = super::size_arg)]
    capacity: Option<u64>,

    /// With a bench workload: request size (default the workload's).
    #[arg(long, value_name = "SIZE", value_parser = super::size_arg)]
    size: Option<u64>,

    /// With a bench workload: requests in flight per client.
    #[arg(long, value_name = "N", default_value_t = 1)]
    qd: u32,

    /// With a bench workload: parallel clients.
    #[arg(long, value_name = "N", default_value_t = 1)]
    clients: u32,

    /// Only these levels (repeat or comma-separate; default all).
    #[arg(long, short = 'l', value_name = "LEVEL", value_delimiter = ',', value_parser = parse_level)]
    level: Vec<Level>,

    /// Only arrays of these member counts (default 2 up to the disks given).
    #[arg(long, value_name = "N", value_delimiter = ',')]
    members: Vec<usize>,

    /// Only these chunk sizes (default 64K, 128K, 512K).
    #[arg(long, value_name = "SIZE", value_delimiter = ',', value_parser = super::size_arg)]
    chunk: Vec<u64>,

    /// Only these read-ahead modes: off, on, adaptive.
    #[arg(long, value_name = "MODE", value_delimiter = ',', value_parser = parse_read_ahead)]
    read_ahead: Vec<ReadAhead>,

    /// Only these journal modes: none, write-through, write-back.
    #[arg(long, value_name = "MODE", value_delimiter = ',', value_parser = parse_journal)]
    journal_mode: Vec<JournalMode>,

    /// The journal device of configurations with a journal (COUNT must be 1).
    #[arg(long, value_name = "SPEC", default_value = "1xssd:64G")]
    journal_disk: String,

    /// How the members are reached: ring (block devices and files, through io_uring: a
    /// request's member operations all at once) or threads (sim: and NBD members: shares of
    /// 1 MiB or more on their own threads, the rest one after another), as the engine does.
    /// Predicting a `raidkit bench` run on sim: members takes threads.
    #[arg(long, value_name = "MODE", default_value = "ring", value_parser = parse_member_io)]
    member_io: MemberIo,

    /// The read cache's size in front of each array (serve's --cache-size; 0: none).
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = super::size_arg)]
    cache_size: u64,

    /// Seconds of virtual (disk) time each configuration runs.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    runtime: f64,

    /// Rebuild rate cap per disk, MB/s (serve's speed limit), for the rebuild time.
    #[arg(long, value_name = "MB/S")]
    rebuild_cap: Option<f64>,

    /// Print every configuration (default: the 15 best and the recommended one).
    #[arg(long)]
    all: bool,

    /// Write the whole plan as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// Draw the sweep into FILE.svg.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,

    /// Seed of the workload's offsets (default: RAIDKIT_SEED, else 1).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
}

fn parse_level(text: &str) -> Result<Level, String> {
    text.parse::<Level>().map_err(|e| e.to_string())
}

fn parse_read_ahead(text: &str) -> Result<ReadAhead, String> {
    text.parse::<ReadAhead>().map_err(|e| e.to_string())
}

fn parse_member_io(text: &str) -> Result<MemberIo, String> {
    match text {
        "ring" => Ok(MemberIo::Ring),
        "threads" => Ok(MemberIo::Threads),
        _ => Err(format!("member I/O {text:?}: give ring or threads")),
    }
}

fn parse_journal(text: &str) -> Result<JournalMode, String> {
    match text {
        "none" => Ok(JournalMode::None),
        "write-through" => Ok(JournalMode::WriteThrough),
        "write-back" => Ok(JournalMode::WriteBack),
        _ => Err(format!(
            "journal mode {text:?}: give none, write-through or write-back"
        )),
    }
}

/// The profile `args` asks for: a named one, or a bench workload at a size, depth and clients.
fn profile(args: &Args) -> anyhow::Result<Profile> {
    if let Ok(p) = workload::profile(&args.workload) {
        if args.size.is_some() || args.qd != 1 || args.clients != 1 {
            bail!(
                "--size, --qd and --clients go with a bench workload; {} is a profile ({})",
                p.name,
                p.bench_args()
            );
        }
        return Ok(p);
    }
    let kind = workload::kind(&args.workload).map_err(|_| {
        let names: Vec<&str> = workload::PROFILES
            .iter()
            .map(|p| p.name)
            .chain(workload::KINDS.iter().map(|k| k.name))
            .collect();
        anyhow::anyhow!(
            "unknown workload {:?}: give one of {}",
            args.workload,
            names.join(", ")
        )
    })?;
    let p = Profile {
        name: kind.name,
        kind: kind.name,
        size: args.size.unwrap_or(kind.default_size),
        queue_depth: args.qd,
        clients: args.clients,
        goal: match kind.pattern {
            Pattern::Random => Goal::Iops,
            Pattern::Sequential => Goal::Throughput,
        },
        about: kind.about,
    };
    // The bounds bench keeps.
    workload::Sweep {
        workloads: vec![kind],
        sizes: vec![p.size],
        queue_depths: vec![p.queue_depth],
        clients: vec![p.clients],
        working_set: 0,
        limit: workload::Limit {
            runtime: Duration::from_secs(1),
            ops: None,
        },
    }
    .cases()
    .map_err(anyhow::Error::msg)?;
    Ok(p)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut disks = Disks::parse(&args.disks, super::size_arg).map_err(anyhow::Error::msg)?;
    disks.member_io = args.member_io;
    let journal = Disks::parse(&args.journal_disk, super::size_arg).map_err(anyhow::Error::msg)?;
    if journal.count != 1 {
        bail!(
            "--journal-disk {}: a journal is one device (1xCLASS[:SIZE])",
            args.journal_disk
        );
    }
    let profile = profile(&args)?;
    if !(0.1..=3600.0).contains(&args.runtime) {
        bail!("--runtime {}: give 0.1 to 3600 seconds", args.runtime);
    }
    if let Some(c) = args.rebuild_cap {
        if c.is_nan() || c <= 0.0 {
            bail!("--rebuild-cap {c}: give a rate above 0 MB/s");
        }
    }
    if let Some(plot) = &args.plot {
        if plot.extension().and_then(|e| e.to_str()) != Some("svg") {
            bail!("--plot {}: the file name must end in .svg", plot.display());
        }
    }
    let cache = if args.cache_size == 0 {
        CacheConfig::disabled()
    } else {
        CacheConfig::sized(args.cache_size, ReadAhead::Adaptive, None)
            .map_err(|e| anyhow::anyhow!("--cache-size: {e}"))?
    };
    let seed = args
        .seed
        .or_else(|| std::env::var("RAIDKIT_SEED").ok()?.parse().ok())
        .unwrap_or(1);
    let ask = Ask {
        disks,
        journal,
        profile,
        capacity: args.capacity,
        runtime: Duration::from_secs_f64(args.runtime),
        seed,
        rebuild_cap: args.rebuild_cap,
        cache,
    };
    let configs: Vec<_> = plan::sweep::configurations(&ask)
        .into_iter()
        .filter(|c| args.level.is_empty() || args.level.contains(&c.level))
        .filter(|c| args.members.is_empty() || args.members.contains(&c.members))
        .filter(|c| {
            args.chunk.is_empty()
                || args.chunk.contains(&c.chunk)
                || matches!(c.level, Level::Linear | Level::Raid1)
        })
        .filter(|c| args.read_ahead.is_empty() || args.read_ahead.contains(&c.read_ahead))
        .filter(|c| args.journal_mode.is_empty() || args.journal_mode.contains(&c.journal))
        .collect();
    if configs.is_empty() {
        bail!(
            "no configuration is left to predict: the filters (--level, --members, --chunk, \
             --read-ahead, --journal-mode) exclude every one the disks allow"
        );
    }
    let plan = plan::sweep::plan_of(&ask, &configs).map_err(anyhow::Error::msg)?;
    print!("{}", table(&plan, args.all));
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&plan)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        plan::plot::plot(&plan, path).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

fn table(plan: &Plan, all: bool) -> String {
    let mut out = format!(
        "raidkit plan: {} ({}) on {}, {} s of virtual time per configuration, seed {}\n\
         predicted (diskmodel, virtual time); degraded = one disk failed; loss = chance an \
         unrecoverable read error in the rebuild after a failure loses data\n\n",
        plan.workload, plan.about, plan.disks, plan.runtime_s, plan.seed
    );
    out.push_str(&format!(
        "{:<38} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9} {:>5} {:>8} {:>7}\n",
        "configuration",
        "IOPS",
        "MB/s",
        "p50 ms",
        "p99 ms",
        "degraded",
        "usable",
        "fails",
        "rebuild",
        "loss"
    ));
    let mut order: Vec<usize> = (0..plan.rows.len()).collect();
    order.sort_by(|&a, &b| {
        plan.rows[b]
            .score(plan.goal)
            .total_cmp(&plan.rows[a].score(plan.goal))
    });
    let shown = if all { order.len() } else { 15 };
    for (n, &i) in order.iter().enumerate() {
        if n >= shown && Some(i) != plan.recommended {
            continue;
        }
        let r = &plan.rows[i];
        let degraded = r.degraded.map_or("-".to_string(), |d| match plan.goal {
            Goal::Iops => format!("{:.0}", d.iops),
            Goal::Throughput => format!("{:.0}", d.mb_s),
        });
        out.push_str(&format!(
            "{:<38} {:>9.0} {:>8.1} {:>8.2} {:>8.2} {:>9} {:>9} {:>5} {:>8} {:>7}{}{}\n",
            r.label,
            r.figures.iops,
            r.figures.mb_s,
            r.figures.latency.p50_ms,
            r.figures.latency.p99_ms,
            degraded,
            gb(r.risk.usable_bytes),
            r.risk.failures_survived,
            r.risk
                .rebuild_hours
                .map_or("-".into(), |h| format!("{h:.1} h")),
            r.risk
                .rebuild_loss_chance
                .map_or("all".into(), |p| format!("{:.2}%", p * 100.0)),
            if r.fits { "" } else { "  (too small)" },
            if Some(i) == plan.recommended {
                "  <- recommended"
            } else {
                ""
            }
        ));
    }
    if !all && order.len() > shown {
        out.push_str(&format!(
            "… {} more configurations (--all, --json)\n",
            order.len() - shown
        ));
    }
    out.push('\n');
    match plan.recommended {
        Some(_) => out.push_str("recommended: "),
        None => out.push_str("no recommendation: "),
    }
    for (n, w) in plan.why.iter().enumerate() {
        if n > 0 {
            out.push_str("  ");
        }
        out.push_str(w);
        out.push('\n');
    }
    if let Some(cmd) = &plan.bench_command {
        out.push_str(&format!("measure it: {cmd}\n"));
        if plan.member_io == MemberIo::Ring {
            out.push_str(
                "  (sim: members are reached without io_uring: predict that run with \
                 --member-io threads)\n",
            );
        }
    }
    out
}

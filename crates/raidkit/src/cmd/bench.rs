//! `raidkit bench`: built-in workloads against NBD exports, or against arrays bench builds and
//! serves itself, measured with raidkit's own NBD client (crate `bench`).

use std::io::{BufRead, BufReader, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context};
use bench::report::{Report, Target};
use bench::stats::Measured;
use bench::workload::{self, Case, Limit, Sweep};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use layout::Level;

/// How long a served array may take to start.
const SERVE_START: Duration = Duration::from_secs(120);
/// How long a served array may take to stop after SIGTERM before it is killed.
const SERVE_STOP: Duration = Duration::from_secs(60);

/// Measure NBD exports with built-in workloads (no fio): sequential and random reads and
/// writes, read/write mixes and a flush-heavy database mix, at request sizes from 512 B to
/// 1 MiB, queue depths and parallel clients (NBD connections) from 1 to 64, through raidkit's
/// own NBD client. TARGET is an NBD URI (nbd://HOST[:PORT]/EXPORT, nbd+unix:///EXPORT?socket=PATH,
/// nbds://…, as members take), or give --members and --level and bench creates and serves the
/// array itself (`raidkit serve --create` on a Unix socket), once per --level. With several
/// targets (--compare) every case runs on each in turn, A B A B, for --rounds rounds, and the
/// table gives each figure's ratio to the first target. Workloads that write need
/// --allow-writes against a URI (its data are overwritten), and against --members that are not
/// RAM or disk models (creating the array overwrites them).
///
/// Workloads: seq-read, seq-write, seq-rw (50 % reads), rand-read, rand-write, rand-rw (70 %
/// reads), database (random 8 KiB, half reads, each write followed by a flush, timed as one
/// operation).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// NBD URIs to measure.
    #[arg(value_name = "TARGET")]
    targets: Vec<String>,

    /// Members of an array bench builds (member specs as `serve` takes: mem:SIZE,
    /// sim:CLASS:SIZE, files, devices, NBD URIs).
    #[arg(long, num_args = 1.., value_name = "SPEC", requires = "level")]
    members: Vec<String>,

    /// RAID level of the array built from --members; repeat to compare levels (each array
    /// gets its own members: RAM and disk-model members only).
    #[arg(long, short = 'l', value_name = "LEVEL", requires = "members", value_parser = parse_level)]
    level: Vec<Level>,

    /// An extra argument for the `raidkit serve --create` of each built array (e.g.
    /// --serve-arg=--chunk=64K); repeat for more. The arrays are served with serve's defaults,
    /// its 64 MiB read cache included: --serve-arg=--cache-size=0 measures without it.
    #[arg(long = "serve-arg", value_name = "ARG", allow_hyphen_values = true)]
    serve_args: Vec<String>,

    /// Workloads to run, comma-separated.
    #[arg(
        long,
        short = 'w',
        value_name = "NAME",
        value_delimiter = ',',
        default_value = "rand-read"
    )]
    workload: Vec<String>,

    /// Request sizes, comma-separated (512 to 1M; default: each workload's own, 4K random,
    /// 1M sequential, 8K database).
    #[arg(long, value_name = "SIZE", value_delimiter = ',', value_parser = super::size_arg)]
    sizes: Vec<u64>,

    /// Queue depths (requests in flight per client), comma-separated, 1 to 64.
    #[arg(long, value_name = "N", value_delimiter = ',', default_value = "1")]
    qd: Vec<u32>,

    /// Parallel clients (NBD connections), comma-separated, 1 to 64.
    #[arg(long, value_name = "N", value_delimiter = ',', default_value = "1")]
    clients: Vec<u32>,

    /// Seconds each case runs on each target per round.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    runtime: f64,

    /// Stop each case after this many operations (over all clients), if sooner.
    #[arg(long, value_name = "N")]
    ops: Option<u64>,

    /// Bytes from the start of each target that requests go to (default: the whole target).
    #[arg(long, value_name = "SIZE", value_parser = super::size_arg)]
    working_set: Option<u64>,

    /// Measure several targets in one run, interleaved, with ratios to the first.
    #[arg(long)]
    compare: bool,

    /// Rounds over the targets (A B A B …); each target's rounds are added up.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,

    /// Let write workloads overwrite the targets' data.
    #[arg(long)]
    allow_writes: bool,

    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// Draw IOPS, MB/s and latency percentiles into FILE (.svg or .png).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,

    /// Run the file-level tests instead of the block workloads: ext4 is made on each target
    /// (through nbdfuse and a loop device: root and the tools needed), then one large file is
    /// written and read, and many small files are created, read and deleted, each read after a
    /// remount. Destroys the target's data: needs --allow-writes against a URI.
    #[arg(long)]
    files: bool,

    /// With --files: size of the large file.
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = super::size_arg)]
    large_file: u64,

    /// With --files: how many small files.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    small_files: u64,

    /// With --files: size of each small file.
    #[arg(long, value_name = "SIZE", default_value = "4K", value_parser = super::size_arg)]
    small_size: u64,

    /// Seed of every random choice (default: RAIDKIT_SEED, else the clock).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
}

fn parse_level(text: &str) -> Result<Level, String> {
    text.parse::<Level>().map_err(|e| e.to_string())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let cases = sweep(&args)?.cases().map_err(anyhow::Error::msg)?;
    let writes = args.files || cases.iter().any(Case::writes);
    if args.files {
        if args.plot.is_some() {
            bail!("--plot draws the block workloads; the file tests have their table and --json");
        }
        if !(1..=bench::files::MAX_SMALL_FILES).contains(&args.small_files)
            || !(1..=1 << 30).contains(&args.small_size)
            || args.large_file == 0
        {
            bail!(
                "--files: give --small-files 1 to {}, --small-size and --large-file above 0 \
                 (--small-size at most 1G)",
                bench::files::MAX_SMALL_FILES
            );
        }
        bench::files::check_environment(rustix::process::geteuid().is_root())
            .map_err(anyhow::Error::msg)?;
    }
    check_targets(&args, writes)?;
    if let Some(plot) = &args.plot {
        // Refuse a bad plot name before the run, not after it.
        match plot.extension().and_then(|e| e.to_str()) {
            Some("svg" | "png" | "SVG" | "PNG") => {}
            _ => bail!(
                "--plot {}: the file name must end in .svg or .png",
                plot.display()
            ),
        }
    }
    let seed = args
        .seed
        .or_else(|| std::env::var("RAIDKIT_SEED").ok()?.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });

    let mut servers = Servers::new()?;
    let mut targets: Vec<(Target, String)> = Vec::new();
    for uri in &args.targets {
        targets.push((target_named(uri.clone(), uri.clone(), uri)?, uri.clone()));
    }
    for level in &args.level {
        let uri = servers.start(*level, &args.members, &args.serve_args)?;
        let name = level.to_string();
        let description = format!("raidkit serve --level {level} {}", args.members.join(" "));
        targets.push((target_named(name, description, &uri)?, uri));
    }

    if args.files {
        return run_files(&args, seed, targets, servers);
    }
    let per_target: Vec<Vec<Case>> = targets
        .iter()
        .map(|(t, _)| {
            cases
                .iter()
                .map(|c| {
                    c.on_target(t.bytes)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", t.name))
                })
                .collect()
        })
        .collect::<anyhow::Result<_>>()?;
    // Each target runs the cases over its own working set: the one given, else its whole size.
    let mut measured: Vec<Vec<Measured>> =
        vec![vec![Measured::default(); targets.len()]; cases.len()];
    let runs = (args.rounds as usize * cases.len() * targets.len()) as u64;
    let bar = progress_bar(runs);
    for round in 0..args.rounds {
        for (ci, _) in cases.iter().enumerate() {
            for (ti, (target, uri)) in targets.iter().enumerate() {
                let case = &per_target[ti][ci];
                bar.set_message(format!(
                    "{} {} (round {})",
                    target.name,
                    case.label(),
                    round + 1
                ));
                let open = |qd| bench::run::open_client(uri, case.writes(), qd);
                let round_seed = seed ^ u64::from(round).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let m = bench::run::run_case(&open, case, round_seed, &|ops| {
                    bar.set_message(format!(
                        "{} {} (round {}): {ops} ops",
                        target.name,
                        case.label(),
                        round + 1
                    ))
                })
                .map_err(|e| anyhow::anyhow!("{}: {e}", target.name))?;
                measured[ci][ti].merge(&m);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    servers.stop_all()?;

    let report_cases: Vec<Case> = per_target[0].clone();
    let mut report = Report::measured(
        seed,
        args.rounds,
        targets.into_iter().map(|(t, _)| t).collect(),
        &report_cases,
        &measured,
    );
    // Each result names the working set its target ran (its whole size when not given).
    for (i, r) in report.results.iter_mut().enumerate() {
        r.case.working_set = per_target[i % per_target.len()][i / per_target.len()].working_set;
    }
    print!("{}", report.table());
    println!("seed {seed}");
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        write_new(path, text.as_bytes())?;
    }
    if let Some(path) = &args.plot {
        bench::plot::plot(&report, path).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// `--files`: the file tests on each target in turn, for each round.
fn run_files(
    args: &Args,
    seed: u64,
    targets: Vec<(Target, String)>,
    mut servers: Servers,
) -> anyhow::Result<()> {
    let test = bench::files::FileTest {
        large_bytes: args.large_file,
        small_files: args.small_files,
        small_bytes: args.small_size,
    };
    for (t, _) in &targets {
        let need = test
            .large_bytes
            .max(test.small_files * test.small_bytes.max(4096));
        if need + need / 4 + (64 << 20) > t.bytes {
            bail!(
                "{}: {} bytes is too small for the file tests ({need} bytes of files, plus \
                 ext4's own): give a smaller --large-file or fewer --small-files",
                t.name,
                t.bytes
            );
        }
    }
    let bar = progress_bar(u64::from(args.rounds) * targets.len() as u64);
    let mut files = Vec::new();
    let work = servers.dir()?;
    for round in 0..args.rounds {
        for (i, (target, uri)) in targets.iter().enumerate() {
            let dir = work.join(format!("files-{round}-{i}"));
            std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let phases = bench::files::run(&target.name, uri, &dir, &test, &|phase| {
                bar.set_message(format!("{} (round {}): {phase}", target.name, round + 1))
            })
            .map_err(|e| anyhow::anyhow!("{}: file tests: {e}", target.name))?;
            let _ = std::fs::remove_dir_all(&dir);
            files.extend(phases);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    servers.stop_all()?;
    let report = Report {
        format: bench::report::FORMAT,
        source: "bench".into(),
        seed,
        rounds: args.rounds,
        targets: targets.into_iter().map(|(t, _)| t).collect(),
        results: Vec::new(),
        files,
    };
    print!("{}", bench::report::files_table(&report.files));
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        write_new(path, text.as_bytes())?;
    }
    Ok(())
}

/// The sweep the flags ask for.
fn sweep(args: &Args) -> anyhow::Result<Sweep> {
    if !(args.runtime.is_finite() && args.runtime > 0.0 && args.runtime <= 86_400.0) {
        bail!(
            "--runtime {}: give seconds above 0, at most a day",
            args.runtime
        );
    }
    let workloads = args
        .workload
        .iter()
        .map(|n| workload::kind(n))
        .collect::<Result<_, _>>()
        .map_err(anyhow::Error::msg)?;
    Ok(Sweep {
        workloads,
        sizes: args.sizes.clone(),
        queue_depths: args.qd.clone(),
        clients: args.clients.clone(),
        working_set: args.working_set.unwrap_or(0),
        limit: Limit {
            runtime: Duration::from_secs_f64(args.runtime),
            ops: args.ops,
        },
    })
}

/// Refuses targets that are missing, many without --compare, or writes nobody allowed.
fn check_targets(args: &Args, writes: bool) -> anyhow::Result<()> {
    let count = args.targets.len() + args.level.len();
    if count == 0 {
        bail!("no target: give an NBD URI, or --members SPEC… --level LEVEL");
    }
    if count > 1 && !args.compare {
        bail!("{count} targets: give --compare to measure several targets in one run");
    }
    for t in &args.targets {
        if !member::is_nbd_uri(t) {
            bail!("{t}: not an NBD URI (nbd://HOST[:PORT]/EXPORT, nbd+unix:///EXPORT?socket=PATH, nbds://…); to build an array give --members and --level");
        }
        if args.files && !args.allow_writes {
            bail!(
                "{t}: --files makes ext4 on the export, which destroys its data: give \
                 --allow-writes if that is meant"
            );
        }
        if writes && !args.allow_writes {
            bail!(
                "{t}: the workloads write, which overwrites the export's data: give \
                 --allow-writes if that is meant, or read-only workloads (seq-read, rand-read)"
            );
        }
    }
    if !args.level.is_empty() {
        let stored: Vec<&String> = args
            .members
            .iter()
            .filter(|m| !member::ram_spec(m))
            .collect();
        if !stored.is_empty() && !args.allow_writes {
            bail!(
                "creating the array overwrites {}: give --allow-writes if that is meant, or \
                 RAM and disk-model members (mem:SIZE, sim:CLASS:SIZE)",
                stored
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if !stored.is_empty() && args.level.len() > 1 {
            bail!(
                "--level given {} times: each array needs members of its own, so comparing \
                 levels takes RAM or disk-model members only (not {})",
                args.level.len(),
                stored[0]
            );
        }
    }
    Ok(())
}

/// A target's name, description and size (one read-only connection to learn it).
fn target_named(name: String, description: String, uri: &str) -> anyhow::Result<Target> {
    let client = bench::run::open_client(uri, false, 1).map_err(anyhow::Error::msg)?;
    Ok(Target {
        name,
        description,
        bytes: client.len(),
    })
}

fn progress_bar(runs: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(runs), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("[{bar:30}] {pos}/{len} {elapsed_precise} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Writes a new file (never over an existing one) in full.
fn write_new(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}

/// The arrays bench serves: `raidkit serve --create` processes on Unix sockets in a private
/// directory, stopped (SIGTERM) and the directory removed at the end, or on drop.
struct Servers {
    dir: PathBuf,
    running: Vec<Child>,
}

impl Servers {
    fn new() -> anyhow::Result<Servers> {
        Ok(Servers {
            dir: PathBuf::new(),
            running: Vec::new(),
        })
    }

    fn dir(&mut self) -> anyhow::Result<PathBuf> {
        if self.dir.as_os_str().is_empty() {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let dir =
                std::env::temp_dir().join(format!("raidkit-bench-{}-{nanos}", std::process::id()));
            std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
            self.dir = dir;
        }
        Ok(self.dir.clone())
    }

    /// Starts `raidkit serve --create --level LEVEL` on `members`; returns its URI.
    fn start(
        &mut self,
        level: Level,
        members: &[String],
        extra: &[String],
    ) -> anyhow::Result<String> {
        let dir = self.dir()?;
        let n = self.running.len();
        let sock = dir.join(format!("array{n}.sock"));
        let log = dir.join(format!("array{n}.log"));
        let exe = std::env::current_exe().context("finding the raidkit binary")?;
        let mut cmd = Command::new(exe);
        cmd.arg("serve")
            .arg("--create")
            .arg("--level")
            .arg(level.to_string())
            .arg("--unix")
            .arg(&sock);
        if level.has_redundancy() {
            // A new array's used-regions map answers reads of never-written regions with zeroes
            // from memory: a read workload would measure that, not the members.
            cmd.arg("--no-used-map");
        }
        cmd.args(extra)
            .arg("--")
            .args(members)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(
                std::fs::File::create(&log)
                    .with_context(|| format!("creating {}", log.display()))?,
            );
        let mut child = cmd.spawn().context("starting raidkit serve")?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next();
            let _ = tx.send(first);
            // Drain the rest so the server never blocks on a full pipe.
            for _ in lines {}
        });
        let first = rx.recv_timeout(SERVE_START);
        let stderr_text = || std::fs::read_to_string(&log).unwrap_or_default();
        let line = match first {
            Ok(Some(Ok(line))) if line.starts_with("raidkit: serving") => line,
            Ok(_) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "raidkit serve --create --level {level} {} did not start: {}",
                    members.join(" "),
                    stderr_text().trim()
                );
            }
        };
        self.running.push(child);
        let uri = line
            .rsplit_once(" at ")
            .map(|(_, u)| u.trim().to_string())
            .with_context(|| format!("no URI in serve's line {line:?}"))?;
        Ok(uri)
    }

    /// Stops every server (SIGTERM, then a clean exit); an unclean one is an error.
    fn stop_all(&mut self) -> anyhow::Result<()> {
        let mut failed = Vec::new();
        for mut child in self.running.drain(..) {
            let pid = child.id();
            // Our own child, not yet waited for: its pid is still its own.
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
            }
            let deadline = std::time::Instant::now() + SERVE_STOP;
            loop {
                match child.try_wait() {
                    Ok(Some(status)) if status.success() => break,
                    Ok(Some(status)) => {
                        failed.push(format!("served array (pid {pid}) exited with {status}"));
                        break;
                    }
                    Ok(None) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        failed.push(format!("served array (pid {pid}) did not stop in 60 s"));
                        break;
                    }
                }
            }
        }
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
            self.dir = PathBuf::new();
        }
        if !failed.is_empty() {
            bail!("{}", failed.join("; "));
        }
        Ok(())
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = self.stop_all();
    }
}

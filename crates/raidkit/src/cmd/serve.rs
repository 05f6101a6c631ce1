//! `raidkit serve`: assemble (or create) an array and serve it over NBD until SIGINT/SIGTERM.
//!
//! Shutdown order: stop accepting, stop reading requests, answer those in flight
//! (`nbd::serve` returns), then `Volume::close` flushes every member and marks the array clean.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use admin::metrics::MetricsListener;
use admin::server::{AdminSocket, Arrays};
use alerts::Alerter;
use anyhow::{bail, Context};
use cache::{CacheConfig, ReadAhead};
use layout::Level;
use member::{Member, OpenOptions, RemoteOptions};
use ondisk::CreateOptions;
use volume::{AssembleOptions, FaultPolicy, SpeedLimits, Volume};

use service::array_journal;
use service::mdstat_file::{MdstatFile, Statuses};
use service::monitor::{Monitor, WatchOptions};
use service::reconnect;
use service::running::{self, ArrayOptions, Happening, RunningArray};
use service::stack::{CachedExport, StackOptions};
use service::start::StartNotice;

use crate::client_limits::ClientLimits;
use crate::journal_args;

/// NBD's registered port.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:10809";

/// `serve`'s defaults, which the daemon's configuration file takes for a key left out.
pub(crate) mod defaults {
    pub const READ_ERRORS_MAX: u32 = 20;
    pub const READ_ERROR_WINDOW_SECS: u64 = 60;
    pub const IO_TIMEOUT_SECS: u64 = 30;
    pub const SPEED_MIN: &str = "1M";
    pub const SPEED_MAX: &str = "200M";
    pub const GATHER_WAIT_MS: u64 = 2;
    pub const BUFFER_MEMORY: &str = "256M";
    pub const CACHE_SIZE: &str = "64M";
    pub const RECONNECT_INTERVAL_MAX_SECS: u64 = 30;
}

/// Serve an array over NBD (Network Block Device) until SIGINT or SIGTERM.
///
/// Assembles the array from MEMBER... (any order) and serves it to NBD clients (nbdinfo,
/// qemu-img, nbdcopy, nbdfuse, nbd-client). With --create it first creates a new array on the
/// members, which is the only way to use RAM members (mem:SIZE, and the disk models
/// sim:CLASS:SIZE). Listens on 127.0.0.1:10809 unless --unix or --listen says otherwise; it
/// never binds a non-loopback address unless --listen names one. Prints one line with the NBD URI when ready. On SIGINT/SIGTERM it
/// finishes requests in flight, flushes, marks the array clean and exits 0. An array found
/// dirty (after a crash) is resynced in the background while it is served.
///
/// Faults: a member with a write error, more than --read-errors-max read errors within
/// --read-error-window, or a request slower than --io-timeout is marked faulty and the array
/// continues degraded; a read error is repaired from redundancy. A remote member whose server
/// cannot be reached at start is left out: the array starts degraded if it can. A remote
/// member that disconnected (or was left out) is retried in the background and added back,
/// with a rebuild, once its server answers with this array's superblock (--no-reconnect
/// turns this off). When a member fails and a spare is present, the rebuild starts by itself,
/// throttled between --speed-min and --speed-max; its progress is kept in the superblocks and
/// resumes after a restart. With --admin PATH the operator commands (raidkit status, fail,
/// remove, add, replace, scrub, speed-limit) control the running array. With --mdstat PATH
/// the array is also described in a file in /proc/mdstat's format, for the tools that watch md
/// arrays (node_exporter, telegraf).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Listen on a Unix socket at PATH (it must not exist) instead of TCP.
    #[arg(long, value_name = "PATH", conflicts_with = "listen")]
    unix: Option<PathBuf>,

    /// Listen on TCP HOST:PORT (default 127.0.0.1:10809; port 0 picks a free port).
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,

    /// Export name clients ask for (default: the array name). The empty default name also
    /// selects the export.
    #[arg(long, value_name = "NAME")]
    export: Option<String>,

    /// Refuse writes (clients get EPERM); members are opened read-only.
    #[arg(long, conflicts_with = "create")]
    read_only: bool,

    /// Create a new array on the members first (destroys nothing unless --force).
    #[arg(long, requires = "level")]
    create: bool,

    /// With --create: RAID level (linear, 0, 1, 10, 5, 6).
    #[arg(long, short = 'l', value_name = "LEVEL", requires = "create", value_parser = parse_level)]
    level: Option<Level>,

    /// With --create: chunk (stripe unit) size, a power of two from 4K to 4M.
    #[arg(long, short = 'c', value_name = "SIZE", requires = "create", value_parser = super::size_arg)]
    chunk: Option<u64>,

    /// With --create: create missing member files, sparse, with this size.
    #[arg(long, short = 's', value_name = "SIZE", requires = "create", value_parser = super::size_arg)]
    size: Option<u64>,

    /// With --create: array name stored in the superblocks (default "raidkit").
    #[arg(long, short = 'n', value_name = "NAME", requires = "create")]
    name: Option<String>,

    /// With --create: overwrite members that carry a superblock or data.
    #[arg(long, short = 'f', requires = "create")]
    force: bool,

    /// With --create: skip the initial sync of members that cannot be zeroed cheaply (block
    /// devices, remote members): you promise they are zeroed or otherwise consistent.
    #[arg(long, requires = "create")]
    assume_clean: bool,

    /// With --create: reserve the member files' blocks now (fallocate) instead of leaving
    /// them sparse, so a full filesystem never refuses the array's writes.
    #[arg(long, requires = "create")]
    preallocate: bool,

    /// Start a RAID 5/6 array that was not shut down cleanly and misses members, without a
    /// journal to replay (as mdadm --assemble --force, md's start_dirty_degraded). Risk: the
    /// parity of stripes being written at the crash may be wrong, so data of the missing
    /// members reconstructed there may read back wrong (the write hole). The array ranges at
    /// risk (the write-intent bitmap's dirty regions; the whole array without a bitmap) are
    /// printed and shown by `raidkit status` until the missing members are rebuilt. Not
    /// needed when the array's journal is given (--journal): its replay closes the hole.
    #[arg(long, conflicts_with = "create")]
    start_dirty_degraded: bool,

    #[command(flatten)]
    bitmap: super::create::BitmapArgs,

    /// With --create: encrypt the new array at rest (see `raidkit create --encrypt`).
    #[arg(long, requires = "create")]
    encrypt: bool,

    /// With --create: keep a checksum (ALG: crc32c) of every 4 KiB block of every member (see
    /// `raidkit create --checksum`).
    #[arg(long, value_name = "ALG", requires = "create")]
    checksum: Option<ondisk::ChecksumAlg>,

    #[command(flatten)]
    key: crate::key_args::KeyArgs,

    #[command(flatten)]
    kdf: crate::key_args::KdfArgs,

    /// A hot spare (repeatable): it receives a spare superblock of this array (or already
    /// carries one) and takes the place of the first member that fails.
    #[arg(long, value_name = "MEMBER")]
    spare: Vec<String>,

    /// Serve the admin API (HTTP + JSON) on a Unix socket at PATH (created mode 0600, removed
    /// at exit), used by `raidkit status`, `fail`, `add`, `replace`, `scrub`…
    #[arg(long, value_name = "PATH", conflicts_with = "read_only")]
    admin: Option<PathBuf>,

    /// Also serve the admin API on TCP HOST:PORT (a port alone is 127.0.0.1:PORT), for an
    /// operator on another machine (`raidkit status --admin https://HOST:PORT`): TLS only
    /// (--admin-tls-certificates) and only for requests with the token (--admin-token-file).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "read_only")]
    admin_listen: Option<String>,

    /// The TCP admin listener's certificates: DIR/server-cert.pem and DIR/server-key.pem
    /// (nbdkit's layout, as --tls-certificates).
    #[arg(long, value_name = "DIR", requires = "admin_listen")]
    admin_tls_certificates: Option<PathBuf>,

    /// The token every TCP admin request must carry (`Authorization: Bearer TOKEN`), in a file
    /// only its owner can read: (umask 077; head -c 24 /dev/urandom | base64 > FILE).
    #[arg(long, value_name = "FILE", requires = "admin_listen")]
    admin_token_file: Option<PathBuf>,

    /// The TCP admin listener also requires a client certificate signed by
    /// --admin-tls-certificates DIR/ca-cert.pem (as --tls-verify-peer for NBD clients); the CLI
    /// presents one with --admin-client-certificates.
    #[arg(long, requires = "admin_listen")]
    admin_tls_verify_peer: bool,

    /// Serve Prometheus metrics (text format, `GET /metrics`) on TCP HOST:PORT; a port alone
    /// is 127.0.0.1:PORT. The address is bound as given: the metrics name the array and its
    /// members to whoever can reach it.
    #[arg(long, value_name = "HOST:PORT")]
    metrics: Option<String>,

    /// Keep a file at PATH describing the array in exactly /proc/mdstat's format (replaced
    /// atomically when its state changes, every 500 ms while a rebuild, resync or scrub runs;
    /// left listing no array at exit), for node_exporter's mdadm collector (PATH =
    /// DIR/mdstat, --path.procfs=DIR), telegraf's mdstat input (file_name) and md's scripts.
    #[arg(long, value_name = "PATH")]
    mdstat: Option<PathBuf>,
    /// Enable the dashboard's actions (fail, remove, add, scrub) for whoever gives the token in
    /// FILE (a file only its owner can read). Without it the dashboard (at `/` on the --metrics
    /// listener) is read-only.
    #[arg(
        long,
        value_name = "FILE",
        requires = "metrics",
        conflicts_with = "read_only"
    )]
    dashboard_token_file: Option<PathBuf>,

    /// A member with more read errors than this within --read-error-window is marked faulty.
    #[arg(long, value_name = "N", default_value_t = defaults::READ_ERRORS_MAX)]
    read_errors_max: u32,

    /// The window over which read errors are counted, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = defaults::READ_ERROR_WINDOW_SECS, value_parser = clap::value_parser!(u64).range(1..))]
    read_error_window: u64,

    /// A member request slower than this (seconds) marks the member faulty. Remote members
    /// also use it as their connect and request deadline, so no client waits on them longer
    /// (members stalled in the same request time out together); file and block-device
    /// members only with --local-io-deadline.
    #[arg(long, value_name = "SECS", default_value_t = defaults::IO_TIMEOUT_SECS, value_parser = clap::value_parser!(u64).range(1..))]
    io_timeout: u64,

    /// Give file and block-device members --io-timeout as a deadline too: their I/O runs on
    /// worker threads, and a call stuck in the kernel (a dying disk, a hung NFS or FUSE file)
    /// is abandoned at the deadline, the member marked faulty and never written again, and the
    /// array serves degraded (status counts the stuck calls). Costs CPU on every member call
    /// (docs/PERFORMANCE.md); without it a stuck local call holds its request until the
    /// kernel returns.
    #[arg(long)]
    local_io_deadline: bool,

    /// How file and block-device members are read and written: `direct` (O_DIRECT: nothing is
    /// cached below raidkit, every read and write reaches the device; the filesystem of a file
    /// member must support it), `buffered` (through the kernel's page cache) or `auto` (direct
    /// for block devices, buffered for files). RAM and remote members are not affected.
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = parse_member_cache)]
    member_cache: member::MemberCache,

    /// RAID 1/10: read this member (named as in the member list or --spare) only when no other
    /// copy can serve, as md's --write-mostly: a slow or remote leg that still gets every
    /// write. May be given several times. Kept in the configuration, not on disk.
    #[arg(long, value_name = "MEMBER")]
    write_mostly: Vec<String>,

    /// How RAID 1/10 reads choose a copy: `latency` (the copy with the least queued work by
    /// its measured latency, a sequential stream kept on one copy, slow members read around;
    /// RAID 5/6 reconstruct around a slow member), `round-robin` (copies take turns by chunk,
    /// nothing measured weighed) or `first` (the first copy that can serve). Write-mostly
    /// members are read last in every mode; slow members are judged and reported in every
    /// mode, read around only with `latency`.
    #[arg(long, value_name = "MODE", default_value = "latency", value_parser = parse_read_balance)]
    read_balance: engine::ReadBalance,

    /// How file and block-device members' reads and writes are submitted: `auto` (io_uring
    /// where it measured faster: a request's operations on direct members together, large
    /// shares instead of a thread each; positional calls otherwise, and where the kernel
    /// refuses io_uring, said once at start), `uring` (every read and write of a request that
    /// can go through io_uring does; refused where it is unavailable) or `threads` (positional
    /// calls on raidkit's threads). Members under --local-io-deadline keep their worker threads.
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = parse_member_io)]
    member_io: member::MemberIo,

    /// Background work (rebuild, resync, scrub) keeps at least this rate per member, even
    /// under client load (bytes per second, K/M/G suffixes).
    #[arg(long, value_name = "SIZE/s", default_value = defaults::SPEED_MIN, value_parser = super::manage::rate_arg)]
    speed_min: u64,

    /// Background work never exceeds this rate per member (bytes per second, K/M/G suffixes).
    #[arg(long, value_name = "SIZE/s", default_value = defaults::SPEED_MAX, value_parser = super::manage::rate_arg)]
    speed_max: u64,

    /// RAID 5/6: how long the partial last stripe of a sequential write may wait for the next
    /// write to complete it, so that the stripe is written once, whole, without reading the
    /// rest of it first (milliseconds; 0 = never wait). It only waits while other writes are
    /// in flight.
    #[arg(long, value_name = "MS", default_value_t = defaults::GATHER_WAIT_MS, value_parser = clap::value_parser!(u64).range(0..=1000))]
    gather_wait: u64,

    /// Memory for request and reply data held at once, over all clients: a request that
    /// would go beyond it waits until others finish. A quarter of it (at most 64M) stays
    /// allocated between requests for reuse. At least 64M (two maximum requests).
    #[arg(long, value_name = "SIZE", default_value = defaults::BUFFER_MEMORY, value_parser = buffer_memory_arg)]
    buffer_memory: u64,

    /// Read cache in memory, shared by all clients and kept coherent with their writes
    /// (0 = no cache).
    #[arg(long, value_name = "SIZE", default_value = defaults::CACHE_SIZE, value_parser = super::size_arg)]
    cache_size: u64,

    /// Read-ahead: off, on (after every read) or adaptive (once a client reads sequentially,
    /// until its reads turn random).
    #[arg(long, value_name = "MODE", default_value = "adaptive", value_parser = parse_read_ahead)]
    read_ahead: ReadAhead,

    /// Bytes kept read ahead of each sequential client: a multiple of 64K, at most half the
    /// cache (default 1M, or half a smaller cache).
    #[arg(long, value_name = "SIZE", value_parser = super::size_arg)]
    read_ahead_window: Option<u64>,

    #[command(flatten)]
    journal: crate::journal_args::JournalArgs,

    /// Do not reconnect remote members in the background. By default a remote (NBD) member
    /// whose server disconnected, or could not be reached at start, is retried with backoff
    /// and, once its server answers again with this array's superblock, added back (rebuilt
    /// from the write-intent bitmap when it can be).
    #[arg(long)]
    no_reconnect: bool,

    /// Start even though the array's superblocks name another raidkit, on another host, whose
    /// lease has not run out: you know that host is down or cut off from the members. (A
    /// raidkit that runs on this host is never overridden: stop it.)
    #[arg(long, conflicts_with = "read_only")]
    force_owner: bool,

    /// Longest wait between two reconnect attempts of one member (the wait doubles from 1 s).
    #[arg(long, value_name = "SECS", default_value_t = defaults::RECONNECT_INTERVAL_MAX_SECS, value_parser = clap::value_parser!(u64).range(1..))]
    reconnect_interval_max: u64,

    /// TLS for NBD clients (NBD_OPT_STARTTLS): off; on (clients may upgrade or stay in
    /// plaintext); require (every option but STARTTLS is refused with NBD_REP_ERR_TLS_REQD:
    /// no data moves in plaintext). on and require need --tls-certificates.
    #[arg(long, value_name = "MODE", default_value = "off", value_parser = parse_tls_mode)]
    tls: nbd::TlsMode,

    /// Directory of the server's certificates, in nbdkit's layout: server-cert.pem,
    /// server-key.pem, and ca-cert.pem (the CA client certificates must be signed by, used
    /// with --tls-verify-peer).
    #[arg(long, value_name = "DIR")]
    tls_certificates: Option<PathBuf>,

    /// Require a client certificate signed by DIR/ca-cert.pem; clients without one are refused.
    #[arg(long)]
    tls_verify_peer: bool,

    #[command(flatten)]
    limits: ClientLimits,

    /// Member files, block devices or (with --create) RAM (mem:SIZE) or disk models
    /// (sim:hdd7200:SIZE, sim:ssd:SIZE, ...: README "Disk-model members"); role order for
    /// --create.
    #[arg(value_name = "MEMBER", required = true)]
    members: Vec<String>,
}

fn parse_level(text: &str) -> Result<Level, String> {
    text.parse::<Level>().map_err(|e| e.to_string())
}

/// Largest NBD request raidkit serves (the NBD maximum block size it advertises).
pub(crate) const MAX_REQUEST_BYTES: u64 = 32 << 20;

fn buffer_memory_arg(text: &str) -> Result<u64, String> {
    let bytes = super::size_arg(text)?;
    if bytes < 2 * MAX_REQUEST_BYTES {
        return Err(format!(
            "{text} is below 64M: room for two of the largest (32M) requests is needed"
        ));
    }
    Ok(bytes)
}

fn parse_read_ahead(text: &str) -> Result<ReadAhead, String> {
    text.parse::<ReadAhead>().map_err(|e| e.to_string())
}

/// The read cache the flags ask for, checked before anything is opened.
fn cache_config(args: &Args) -> anyhow::Result<CacheConfig> {
    CacheConfig::sized(args.cache_size, args.read_ahead, args.read_ahead_window)
        .context("--cache-size, --read-ahead, --read-ahead-window")
}

/// The NBD server's identity and limits for one array's export (the listener's are set by
/// [`ClientLimits::listener`]).
pub(crate) fn server_config(
    export_name: String,
    volume: &Volume,
    read_only: bool,
    buffer_memory: u64,
    limits: &ClientLimits,
) -> nbd::ServerConfig {
    limits.export(nbd::ServerConfig {
        export_name,
        description: describe(volume),
        read_only,
        max_request_bytes: MAX_REQUEST_BYTES as u32,
        max_buffer_bytes: buffer_memory,
        max_idle_buffer_bytes: (buffer_memory / 4).min(64 << 20),
        ..nbd::ServerConfig::default()
    })
}

/// Where to listen, decided before anything is opened.
enum Endpoint {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

/// Allocations of at least this size are mapped from the kernel and given back when freed.
const MMAP_THRESHOLD_BYTES: i32 = 1 << 20;

/// Keeps freed large buffers from staying resident. glibc raises its mmap threshold after each
/// large free (up to 32 MiB), so request-sized buffers then come from per-thread arenas, which
/// keep them after they are freed: under 1-32 MiB requests from three clients a server with
/// 80 MiB of configured limits and a 122 MiB peak of live heap reached 600 MiB resident. With
/// the threshold fixed, its peak is 116-128 MiB. Hot buffers do not pay for it: request
/// buffers and RAID 5/6 scratch are pooled (docs/DESIGN.md "Memory bounds").
pub(crate) fn fix_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; it is called before the server
    // starts any thread, and a failure (0) leaves the defaults.
    unsafe {
        if libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 0 {
            eprintln!("raidkit: warning: cannot set the allocator's mmap threshold");
        }
    }
}

/// `--tls`: off, on or require.
pub(crate) fn parse_tls_mode(s: &str) -> Result<nbd::TlsMode, String> {
    match s {
        "off" => Ok(nbd::TlsMode::Off),
        "on" => Ok(nbd::TlsMode::On),
        "require" => Ok(nbd::TlsMode::Require),
        _ => Err(format!("{s:?} is not a TLS mode: use off, on or require")),
    }
}

/// The listener's TLS from `--tls`, `--tls-certificates` and `--tls-verify-peer`, checked
/// (and the certificates read) before anything is opened.
pub(crate) fn tls_config(
    mode: nbd::TlsMode,
    certificates: Option<&std::path::Path>,
    verify_peer: bool,
) -> anyhow::Result<Option<nbd::Tls>> {
    match (mode, certificates) {
        (nbd::TlsMode::Off, None) if !verify_peer => Ok(None),
        (nbd::TlsMode::Off, _) => {
            bail!("--tls-certificates and --tls-verify-peer need --tls on or --tls require")
        }
        (_, None) => bail!(
            "--tls on/require needs --tls-certificates DIR (server-cert.pem, server-key.pem, \
             ca-cert.pem; see README \"TLS\")"
        ),
        (mode, Some(dir)) => Ok(Some(nbd::Tls::load(dir, mode, verify_peer)?)),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    fix_mmap_threshold();
    crate::log::forward_library_warnings();
    if args.member_io == member::MemberIo::Auto {
        crate::log::note_member_io();
    }
    let tls = tls_config(
        args.tls,
        args.tls_certificates.as_deref(),
        args.tls_verify_peer,
    )?;
    if !args.create
        && (args.bitmap.no_bitmap
            || args.bitmap.bitmap_region.is_some()
            || args.bitmap.no_bad_blocks
            || args.bitmap.used_region.is_some()
            || args.bitmap.no_used_map)
    {
        bail!("--no-bitmap, --bitmap-region, --no-bad-blocks, --used-region and --no-used-map choose how a new array is made: use them with --create");
    }
    let endpoint = endpoint(&args)?;
    let stack_options = StackOptions {
        read_only: args.read_only,
        gather_wait: Duration::from_millis(args.gather_wait),
        cache: cache_config(&args)?,
        write_mostly: args.write_mostly.clone(),
        read_balance: args.read_balance,
    };
    // What can fail without the array is made first: once it is assembled (owned, maybe
    // dirty), every way out goes through `running.close()`.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let log: admin::Log = Arc::new(|line| eprintln!("raidkit: {line}"));
    let admin = match &args.admin {
        Some(path) => Some(
            AdminSocket::bind(path, &log)
                .with_context(|| format!("cannot create the admin socket {}", path.display()))?,
        ),
        None => None,
    };
    let admin_tcp = (args.admin_listen.as_deref())
        .map(|addr| {
            bind_admin_tcp(
                addr,
                args.admin_tls_certificates.as_deref(),
                args.admin_token_file.as_deref(),
                args.admin_tls_verify_peer,
            )
        })
        .transpose()?;
    let metrics = args.metrics.as_deref().map(bind_metrics).transpose()?;
    let token = (args.dashboard_token_file.as_deref())
        .map(|p| dashboard::token::Token::from_file(p, dashboard::token::TOKEN_FILE))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    // Listed in the mdstat file once assembled (the file is written first, empty).
    let listed: Arc<OnceLock<Arc<Volume>>> = Arc::default();
    let mdstat = match &args.mdstat {
        Some(path) => Some(MdstatFile::start(
            path,
            listed_statuses(&listed),
            Arc::clone(&log),
        )?),
        None => None,
    };
    let running = start_array(&args, stack_options)?;
    let volume = Arc::clone(running.volume());
    let _ = listed.set(Arc::clone(&volume));
    let monitor = watch(&running, &log);
    let export_name = args
        .export
        .clone()
        .unwrap_or_else(|| volume.name().to_string());
    let arrays = || -> Arc<Arrays> {
        let stack = running.stack();
        let control = stack.control(open_options(&args), remote_options(&args), Arc::clone(&log));
        let arrays = Arc::new(Arrays::default());
        assert!(arrays.insert(volume.name(), Arc::new(control)));
        arrays
    };
    let served_arrays = (admin.is_some() || admin_tcp.is_some() || metrics.is_some()).then(arrays);
    let admin_served = (admin.as_ref().zip(served_arrays.clone()))
        .map(|(socket, arrays)| (socket, arrays, Arc::clone(&log)));
    let admin_tcp_served =
        (admin_tcp.zip(served_arrays.clone())).map(|(tcp, arrays)| (tcp, arrays, Arc::clone(&log)));
    let metrics_served = metrics.zip(served_arrays);
    let dashboard = (metrics_served.as_ref())
        .map(|(_, arrays)| Arc::new(dashboard::Dashboard::start(Arc::clone(arrays), token)));
    let pages = dashboard.clone().map(|d| d as Arc<dyn admin::pages::Pages>);
    let served = runtime.block_on(serve(
        &volume,
        running.stack().export(),
        endpoint,
        args.limits.listener(nbd::ServerConfig {
            tls,
            ..server_config(
                export_name,
                &volume,
                args.read_only,
                args.buffer_memory,
                &args.limits,
            )
        }),
        admin_served,
        admin_tcp_served,
        metrics_served.map(|(listener, arrays)| (listener, arrays, Arc::clone(&log), pages)),
    ));
    drop(admin);
    drop(dashboard);
    monitor.forget(&volume);
    // Close even if serving failed: requests already answered must be flushed.
    let closed = running.close();
    if let Ok(left) = &closed.journal {
        journal_args::report_left(left.clone());
    }
    // Closed (or not): the process serves no array any more.
    let listed_none = mdstat.map_or(Ok(()), MdstatFile::finish);
    served?;
    closed.drained?;
    closed.volume?;
    closed.journal?;
    listed_none?;
    eprintln!("raidkit: array \"{}\" closed cleanly", volume.name());
    Ok(())
}

/// Logs what the daemon's monitor alerts on (mdadm --monitor's events: Fail, DegradedArray,
/// RebuildStarted, Rebuild20…, RebuildFinished, MismatchesFound, …) as it happens; the
/// serving line already says what NewArray would.
fn watch(running: &RunningArray, log: &admin::Log) -> Monitor {
    let alerter = Arc::new(Alerter::log_only(Arc::clone(log)));
    let monitor = Monitor::start(Arc::clone(&alerter));
    let opts = WatchOptions {
        name: running.volume().name().to_string(),
        spares_listed: 0,
        spare_group: None,
    };
    for alert in monitor.watch(running.stack(), opts) {
        if alert.event != alerts::Event::NewArray {
            alerter.raise(alert);
        }
    }
    monitor
}

/// Binds the TCP listener for `what` at `text`: `HOST:PORT`, or a port alone on 127.0.0.1;
/// also the host as written.
fn bind_tcp(text: &str, what: &str) -> anyhow::Result<(std::net::TcpListener, String)> {
    let addr_text = match text.parse::<u16>() {
        Ok(port) => format!("127.0.0.1:{port}"),
        Err(_) => text.to_string(),
    };
    let addr = addr_text
        .to_socket_addrs()
        .with_context(|| format!("{what} address {text:?}: not HOST:PORT or a port"))?
        .next()
        .with_context(|| format!("{what} address {text:?}: the host has no address"))?;
    let socket = std::net::TcpListener::bind(addr)
        .with_context(|| format!("cannot listen for {what} on {addr}"))?;
    socket
        .set_nonblocking(true)
        .with_context(|| format!("{what} listener: non-blocking mode"))?;
    let host = addr_text
        .rsplit_once(':')
        .map_or(addr_text.as_str(), |(host, _)| host);
    Ok((socket, host.to_string()))
}

/// Binds the metrics listener at `text`: `HOST:PORT`, or a port alone on 127.0.0.1. Requests
/// may address it by HOST when it is a name (`admin::metrics::host_allowed`).
pub(crate) fn bind_metrics(text: &str) -> anyhow::Result<MetricsListener> {
    let (socket, host) = bind_tcp(text, "metrics")?;
    Ok(MetricsListener::new(socket, &host))
}

/// Binds the TCP admin listener at `text` (as [`bind_metrics`]) with the certificates of
/// `certificates` (nbdkit's layout) and the token of `token_file`; refuses without either.
/// With `verify_peer`, clients must also present a certificate signed by the directory's
/// ca-cert.pem.
pub(crate) fn bind_admin_tcp(
    text: &str,
    certificates: Option<&std::path::Path>,
    token_file: Option<&std::path::Path>,
    verify_peer: bool,
) -> anyhow::Result<admin::tcp::AdminTcp> {
    let Some(certificates) = certificates else {
        bail!(
            "the TCP admin listener {text} speaks TLS only: give its certificates \
             (--admin-tls-certificates DIR, [daemon] admin_tls_certificates: server-cert.pem and \
             server-key.pem)"
        );
    };
    let Some(token_file) = token_file else {
        bail!(
            "the TCP admin listener {text} needs a token (--admin-token-file FILE, [daemon] \
             admin_token_file): make one with (umask 077; head -c 24 /dev/urandom | base64 > FILE)"
        );
    };
    let tls = nbd::Tls::load(certificates, nbd::TlsMode::Require, verify_peer)
        .context("the TCP admin listener's certificates")?;
    let token = admin::token::Token::from_file(token_file, "the admin token file")
        .map_err(anyhow::Error::msg)?;
    let (socket, _) = bind_tcp(text, "the admin API")?;
    admin::tcp::AdminTcp::new(socket, tls.acceptor(), token).context("the TCP admin listener")
}

/// Serves the metrics of `arrays` on `listener` (bound by [`bind_metrics`]) until `stop`.
/// Must run inside the runtime.
pub(crate) async fn serve_metrics(
    listener: MetricsListener,
    arrays: Arc<Arrays>,
    log: admin::Log,
    pages: Option<Arc<dyn admin::pages::Pages>>,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let addr = listener
        .socket
        .local_addr()
        .context("metrics listener address")?;
    eprintln!(
        "raidkit: metrics on http://{addr}{}",
        admin::metrics::METRICS_PATH
    );
    if pages.is_some() {
        eprintln!("raidkit: dashboard on http://{addr}/");
    }
    admin::metrics::serve(listener, arrays, log, pages, stop)
        .await
        .context("metrics listener")
}

/// The served array's status under its name, once there is one.
fn listed_statuses(listed: &Arc<OnceLock<Arc<Volume>>>) -> Statuses {
    let listed = Arc::clone(listed);
    Box::new(move || {
        Ok((listed.get().into_iter())
            .map(|v| (v.name().to_string(), v.status()))
            .collect())
    })
}

fn endpoint(args: &Args) -> anyhow::Result<Endpoint> {
    if let Some(path) = &args.unix {
        return Ok(Endpoint::Unix(path.clone()));
    }
    let text = args.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
    let addr = text
        .to_socket_addrs()
        .with_context(|| format!("--listen {text:?}: not a HOST:PORT address"))?
        .next()
        .with_context(|| format!("--listen {text:?}: the host has no address"))?;
    Ok(Endpoint::Tcp(addr))
}

fn open_options(args: &Args) -> OpenOptions {
    OpenOptions {
        create_size: args.size,
        read_only: args.read_only,
        ..OpenOptions::default()
    }
}

fn remote_options(args: &Args) -> RemoteOptions {
    RemoteOptions {
        io_timeout: Duration::from_secs(args.io_timeout),
        local_deadline: args.local_io_deadline,
        member_cache: args.member_cache,
        member_io: args.member_io,
        ..RemoteOptions::default()
    }
}

fn parse_member_cache(text: &str) -> Result<member::MemberCache, String> {
    text.parse()
}

fn parse_member_io(text: &str) -> Result<member::MemberIo, String> {
    text.parse()
}

fn parse_read_balance(text: &str) -> Result<engine::ReadBalance, String> {
    text.parse()
}

fn fault_policy(args: &Args) -> FaultPolicy {
    FaultPolicy {
        read_errors_max: args.read_errors_max,
        read_error_window: Duration::from_secs(args.read_error_window),
        io_timeout: Duration::from_secs(args.io_timeout),
    }
}

fn speed_limits(args: &Args) -> anyhow::Result<SpeedLimits> {
    if args.speed_min > args.speed_max {
        bail!(
            "--speed-min ({} bytes/s) is above --speed-max ({} bytes/s)",
            args.speed_min,
            args.speed_max
        );
    }
    Ok(SpeedLimits {
        min_bytes_per_sec: args.speed_min,
        max_bytes_per_sec: args.speed_max,
    })
}

/// Opens (with --create: creates), assembles and starts serving the array, printing what
/// happens to it as it happens.
fn start_array(args: &Args, stack: StackOptions) -> anyhow::Result<RunningArray> {
    let journal = args.journal.options();
    if args.create {
        journal_args::warn_volatile(array_journal::check_new(&journal)?);
    }
    let opts = ArrayOptions {
        uuid: None,
        members: args.members.clone(),
        spares: args.spare.clone(),
        group_spares: Vec::new(),
        journal: journal.clone(),
        read_only: args.read_only,
        open: open_options(args),
        remote: remote_options(args),
        assemble: AssembleOptions {
            fault_policy: fault_policy(args),
            speed_limits: speed_limits(args)?,
            start_dirty_degraded: args.start_dirty_degraded,
            // A read-only server writes nothing, so it neither claims the array nor is refused.
            owner: (!args.read_only).then(ondisk::owner::ThisHost::get),
            force_owner: args.force_owner,
            ..AssembleOptions::default()
        },
        stack,
        // Asked for only if the array is encrypted (a prompt needs a terminal).
        key: Some(args.key.source()),
        key_how: crate::key_args::HOW,
        // Not with --no-reconnect; RunningArray leaves out read-only and non-redundant arrays.
        reconnect: (!args.no_reconnect).then(|| reconnect::Config {
            interval_max: Duration::from_secs(args.reconnect_interval_max),
            open: open_options(args),
            remote: remote_options(args),
        }),
    };
    let create = |members: &[Arc<dyn Member>], spares: &[Arc<dyn Member>]| {
        let key = create(args, members, spares)?;
        if let Some(path) = &journal.path {
            array_journal::add(members, path, &journal)?;
        }
        Ok(key)
    };
    let create: Option<running::Create> = args.create.then_some(&create);
    RunningArray::start(opts, create, tell())
}

/// The line saying an array is encrypted and how (serve and the daemon).
pub(crate) fn encrypted(implementation: crypt::Implementation) -> String {
    format!(
        "encrypted: AES-256-XTS, {} implementation ({}=portable|vaes|auto chooses)",
        implementation.name(),
        crypt::IMPLEMENTATION_ENV
    )
}

/// Prints what happens to the array (`RunningArray`'s happenings) as `serve` always has.
fn tell() -> running::Tell {
    Arc::new(|happening| match happening {
        Happening::LeftOut(left) => eprintln!("raidkit: warning: {left}"),
        Happening::Start(StartNotice::JournalDropped(dropped)) => {
            journal_args::warn_dropped(&dropped)
        }
        Happening::Start(StartNotice::JournalVolatile(volatile)) => {
            journal_args::warn_volatile(Some(volatile))
        }
        Happening::Encrypted(implementation) => eprintln!("raidkit: {}", encrypted(implementation)),
        Happening::Warning(line) => eprintln!("raidkit: warning: {line}"),
        Happening::Replayed(replayed) => journal_args::report_replayed(Some(replayed)),
        Happening::ResyncStarted(name) => eprintln!(
            "raidkit: array \"{name}\" was not shut down cleanly: resyncing in the background"
        ),
        Happening::ResyncFinished(name, Ok(())) => {
            eprintln!("raidkit: resync of \"{name}\" finished")
        }
        Happening::ResyncFinished(name, Err(e)) => {
            eprintln!("raidkit: resync of \"{name}\" failed: {e}")
        }
        Happening::Reconnect(event) => eprintln!("raidkit: {event}"),
        Happening::ReconnectUnavailable(e) => eprintln!(
            "raidkit: warning: cannot start the reconnect thread ({e}): remote members will \
             not come back by themselves"
        ),
        Happening::TakenOver(name, taken) => {
            eprintln!(
                "raidkit: error: array \"{name}\": {taken}; stopping now without writing \
                 anything more"
            );
            std::process::exit(3);
        }
    })
}

/// Creates the array; returns its data key when --encrypt made it encrypted.
fn create(
    args: &Args,
    members: &[Arc<dyn Member>],
    spares: &[Arc<dyn Member>],
) -> anyhow::Result<Option<crypt::DataKey>> {
    let level = args.level.context("--create needs --level")?;
    let name = args.name.as_deref().unwrap_or("raidkit");
    let (encryption, key) = match args.encrypt {
        true => {
            let (area, key) = crate::key_args::new_key_area(&args.key, &args.kdf, name)?;
            (Some(area), Some(key))
        }
        false => (None, None),
    };
    let defaults = CreateOptions::new(level, name);
    let opts = CreateOptions {
        chunk_bytes: args.chunk.unwrap_or(defaults.chunk_bytes),
        force: args.force,
        spares: spares.to_vec(),
        assume_clean: args.assume_clean,
        bitmap_region_bytes: args.bitmap.region(defaults.bitmap_region_bytes),
        bad_blocks: defaults.bad_blocks && !args.bitmap.no_bad_blocks,
        used_region_bytes: args.bitmap.used_region(defaults.used_region_bytes),
        encryption,
        checksum: args.checksum,
        ..defaults
    };
    let superblocks =
        crate::space::create_with(&args.members, &args.spare, args.preallocate, || {
            ondisk::create(members, &opts)
                .with_context(|| format!("creating {level} array \"{name}\""))
        })?;
    for line in super::create::unused_space(&args.members, &superblocks) {
        eprintln!("raidkit: {line}");
    }
    Ok(key)
}

async fn serve(
    volume: &Arc<Volume>,
    export: Arc<CachedExport>,
    endpoint: Endpoint,
    config: nbd::ServerConfig,
    admin: Option<(&AdminSocket, Arc<Arrays>, admin::Log)>,
    admin_tcp: Option<(admin::tcp::AdminTcp, Arc<Arrays>, admin::Log)>,
    metrics: Option<MetricsServed>,
) -> anyhow::Result<()> {
    let listener = match &endpoint {
        Endpoint::Unix(path) => nbd::Listener::bind_unix(path)
            .with_context(|| format!("cannot listen on Unix socket {}", path.display()))?,
        Endpoint::Tcp(addr) => nbd::Listener::bind_tcp(*addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?,
    };
    let export_name = config.export_name.clone();
    let uri = listener.uri(&export_name);
    // One stop flag for both servers: set by SIGINT/SIGTERM, or when the NBD server ends.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let on_signal = Arc::clone(&stop_tx);
    // Register for the signals before announcing the export: a SIGTERM sent as soon as the
    // "serving" line appears must stop the server cleanly, not kill it (default action).
    let signals = ShutdownSignals::register();
    let signal_task = tokio::spawn(async move {
        signals.recv().await;
        let _ = on_signal.send(true);
    });
    if let Some((socket, _, _)) = &admin {
        eprintln!("raidkit: admin API on {}", socket.path().display());
    }
    if let Some((tcp, _, _)) = &admin_tcp {
        announce_admin_tcp(tcp)?;
    }
    println!(
        "raidkit: serving \"{export_name}\" ({}) at {uri}",
        describe(volume)
    );
    std::io::stdout().flush().context("writing to stdout")?;
    let export: Arc<dyn nbd::Export> = export;
    let nbd_served = async {
        let result = nbd::serve(listener, export, config, stopped(stop_rx.clone())).await;
        let _ = stop_tx.send(true);
        result
    };
    let admin_served = async {
        match admin {
            Some((socket, arrays, log)) => {
                admin::server::serve(socket, arrays, log, stopped(stop_rx.clone())).await
            }
            None => Ok(()),
        }
    };
    let admin_tcp_served = async {
        match admin_tcp {
            Some((tcp, arrays, log)) => {
                let served = admin::tcp::serve(&tcp, arrays, log, stopped(stop_rx.clone())).await;
                // Closed at the stop, not at exit: a client that connects during the NBD drain
                // is refused instead of waiting in the backlog for an answer that never comes.
                drop(tcp);
                served
            }
            None => Ok(()),
        }
    };
    let metrics_served = async {
        match metrics {
            Some((listener, arrays, log, pages)) => {
                serve_metrics(listener, arrays, log, pages, stopped(stop_rx.clone())).await
            }
            None => Ok(()),
        }
    };
    let (nbd_result, admin_result, admin_tcp_result, metrics_result) =
        tokio::join!(nbd_served, admin_served, admin_tcp_served, metrics_served);
    signal_task.abort();
    nbd_result?;
    admin_result.context("admin socket")?;
    admin_tcp_result.context("TCP admin listener")?;
    metrics_result?;
    Ok(())
}

/// Says where the TCP admin listener is (stderr).
pub(crate) fn announce_admin_tcp(tcp: &admin::tcp::AdminTcp) -> anyhow::Result<()> {
    let addr = tcp.local_addr().context("TCP admin listener address")?;
    eprintln!("raidkit: admin API on https://{addr} (TLS, token required)");
    Ok(())
}

/// The metrics listener, the arrays it shows, the log and the dashboard's pages.
type MetricsServed = (
    MetricsListener,
    Arc<Arrays>,
    admin::Log,
    Option<Arc<dyn admin::pages::Pages>>,
);

/// Completes when the stop flag is set.
async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// SIGINT and SIGTERM, registered up front (from then on they no longer kill the process).
pub(crate) struct ShutdownSignals(
    Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
);

impl ShutdownSignals {
    /// Must run inside the runtime.
    pub(crate) fn register() -> ShutdownSignals {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(int), Ok(term)) => ShutdownSignals(Some((int, term))),
            _ => {
                crate::log::emit("cannot install signal handlers; serving until killed");
                ShutdownSignals(None)
            }
        }
    }

    /// Completes on the first SIGINT or SIGTERM.
    pub(crate) async fn recv(self) {
        let Some((mut int, mut term)) = self.0 else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        crate::log::emit("shutting down: finishing requests in flight");
    }
}

/// "raid5, 4 members, 3.0 GiB"
pub(crate) fn describe(volume: &Volume) -> String {
    let members = volume.member_status().len();
    let plural = if members == 1 { "" } else { "s" };
    format!(
        "{}, {members} member{plural}, {}",
        volume.level(),
        crate::units::human_bytes(volume.size_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_options_that_do_not_go_together_are_refused_before_anything_is_read() {
        assert_eq!(parse_tls_mode("require"), Ok(nbd::TlsMode::Require));
        assert!(parse_tls_mode("yes")
            .unwrap_err()
            .contains("off, on or require"));
        assert!(tls_config(nbd::TlsMode::Off, None, false)
            .unwrap()
            .is_none());
        let dir = std::path::Path::new("/nonexistent/pki");
        for (certificates, verify_peer) in [(Some(dir), false), (None, true)] {
            let refused = tls_config(nbd::TlsMode::Off, certificates, verify_peer).unwrap_err();
            assert!(refused.to_string().contains("need --tls on"), "{refused}");
        }
        for mode in [nbd::TlsMode::On, nbd::TlsMode::Require] {
            let refused = tls_config(mode, None, false).unwrap_err();
            assert!(
                refused.to_string().contains("needs --tls-certificates DIR"),
                "{refused}"
            );
        }
        // On with a directory: the certificates are read, and a missing one is named.
        let missing = tls_config(nbd::TlsMode::On, Some(dir), false).unwrap_err();
        assert!(
            format!("{missing:#}").contains("server-cert.pem"),
            "{missing:#}"
        );
    }
}

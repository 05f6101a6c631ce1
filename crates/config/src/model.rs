//! What the file may say. Unknown keys are refused (`deny_unknown_fields`): a misspelt key
//! silently ignored is how a spare or a journal goes missing. Tunables left out are `None` and
//! take `raidkit serve`'s default for the same option (named in each field's comment), so the
//! two front ends cannot drift apart.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::schedule::Schedule;
use crate::values::{Rate, Size, TimeWindow};

/// Where the daemon reads its configuration unless told otherwise.
pub const DEFAULT_PATH: &str = "/etc/raidkit/raidkit.toml";

/// The daemon's NBD listener when `[daemon]` names none (as `raidkit serve`'s).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:10809";

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub daemon: Daemon,
    #[serde(default)]
    pub alerts: Alerts,
    /// `[[array]]` tables, in file order.
    #[serde(default, rename = "array")]
    pub arrays: Vec<ArrayConfig>,
}

/// `[daemon]`: the service as a whole.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Daemon {
    /// TCP listeners (`HOST:PORT`) every array without its own listener is served on, each
    /// under its export name. Default: [`DEFAULT_LISTEN`] unless `unix` is given.
    #[serde(default)]
    pub listen: Vec<Spanned<String>>,
    /// A Unix socket listener (the path must not exist).
    pub unix: Option<Spanned<PathBuf>>,
    /// The admin API's Unix socket (`raidkit status --admin`, `fail`, `add`, ...).
    pub admin: Option<Spanned<PathBuf>>,
    /// The admin API on TCP (`HOST:PORT`), for operators on other machines: TLS only, with
    /// `admin_tls_certificates`, and only for requests with the token of `admin_token_file`.
    pub admin_listen: Option<Spanned<String>>,
    /// The TCP admin listener's certificates (server-cert.pem, server-key.pem; nbdkit's layout).
    pub admin_tls_certificates: Option<Spanned<PathBuf>>,
    /// The file holding the token every TCP admin request must carry (`Authorization: Bearer`;
    /// readable by its owner only).
    pub admin_token_file: Option<Spanned<PathBuf>>,
    /// The TCP admin listener also requires a client certificate signed by
    /// `admin_tls_certificates`/ca-cert.pem (serve's `--admin-tls-verify-peer`).
    pub admin_tls_verify_peer: Option<Spanned<bool>>,
    /// The metrics and dashboard listener (`HOST:PORT`).
    pub metrics: Option<Spanned<String>>,
    /// The file the daemon keeps in exactly /proc/mdstat's format for its arrays, for the
    /// tools that watch md arrays (node_exporter's mdadm collector, telegraf's mdstat input).
    /// Default: `mdstat` in the admin socket's directory ([`Daemon::mdstat_path`]).
    pub mdstat: Option<Spanned<PathBuf>>,
    /// A file holding the token that enables the dashboard's actions (read-only without it).
    pub dashboard_token_file: Option<Spanned<PathBuf>>,
    /// How the daemon's log lines on stderr are written: `text` (default) or `json`, one
    /// object per line with time, level, array, event and message (`--log-format` overrides).
    #[serde(default)]
    pub log_format: LogFormat,
    /// TLS for NBD clients on every listener (`raidkit serve --tls`): `off` (default), `on`
    /// or `require`; `on` and `require` need `tls_certificates`.
    pub tls: Option<Spanned<TlsMode>>,
    /// The certificates' directory in nbdkit's layout (server-cert.pem, server-key.pem,
    /// ca-cert.pem).
    pub tls_certificates: Option<Spanned<PathBuf>>,
    /// Require a client certificate signed by the directory's ca-cert.pem.
    #[serde(default)]
    pub tls_verify_peer: bool,
    /// Seconds a client has to finish the NBD handshake (serve's `--handshake-timeout`,
    /// default 10, 1 to 3600).
    pub handshake_timeout_secs: Option<Spanned<u64>>,
    /// Connections open at once on each listener (serve's `--max-connections`, default 64,
    /// 1 to 1024).
    pub max_connections: Option<Spanned<u32>>,
    /// Connections open at once from one client address on each listener (serve's
    /// `--max-connections-per-client`, default 16, 1 to 1024).
    pub max_connections_per_client: Option<Spanned<u32>>,
    /// Largest data of one handshake option (serve's `--max-option-size`, default 64K, 8K
    /// to 1M).
    pub max_option_size: Option<Spanned<Size>>,
    /// Seconds without a request after which a client is disconnected (serve's
    /// `--idle-timeout`, default 0: never).
    pub idle_timeout_secs: Option<Spanned<u64>>,
    /// Seconds a client may take no byte of a reply before it is disconnected (serve's
    /// `--reply-timeout`, default 60, at most 3600; 0: never).
    pub reply_timeout_secs: Option<Spanned<u64>>,
    /// Requests of one connection in flight at once (serve's
    /// `--max-requests-per-connection`, default 64, 1 to 1024).
    pub max_requests_per_connection: Option<Spanned<u32>>,
}

impl Daemon {
    /// Where the mdstat file is kept: `mdstat` if given, else `mdstat` beside the admin socket
    /// at `admin` (so /run/raidkit/mdstat for the default socket, and two daemons with their
    /// own sockets keep their own files).
    pub fn mdstat_path(&self, admin: &Path) -> PathBuf {
        match &self.mdstat {
            Some(path) => path.get_ref().clone(),
            None => admin.with_file_name("mdstat"),
        }
    }
}

/// `[daemon] tls`: how the NBD listeners treat TLS.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TlsMode {
    #[default]
    Off,
    On,
    Require,
}

/// One log line per event: for people (`text`) or for machines (`json`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `[alerts]`: where events (Fail, DegradedArray, RebuildFinished, ...) are sent. Each is
/// optional and several may be given; events are logged whatever is configured.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Alerts {
    /// Run as `program EVENT ARRAY [MEMBER]`, details in environment variables (mdadm's
    /// PROGRAM convention).
    pub program: Option<Spanned<PathBuf>>,
    /// Mail each event to this address through `mail_command`.
    pub mail_to: Option<Spanned<String>>,
    /// A sendmail-compatible command reading the message on stdin (default
    /// `/usr/sbin/sendmail -t`).
    pub mail_command: Option<Spanned<String>>,
    /// POST each event as JSON to this `http://` URL.
    pub webhook: Option<Spanned<String>>,
    /// Also send each event to syslog (journald).
    #[serde(default)]
    pub syslog: bool,
}

/// `[[array]]`: one array the daemon assembles from its members and serves.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrayConfig {
    /// The array's name in status, alerts and the admin API; also its export name unless
    /// `export` says otherwise. Letters, digits, `.`, `_` and `-`.
    pub name: Spanned<String>,
    /// The array's UUID (as `raidkit examine` prints it): when given, a member whose
    /// superblock names another array is refused.
    pub uuid: Option<Spanned<String>>,
    /// The export name clients ask for (default: `name`).
    pub export: Option<Spanned<String>>,
    /// Member files, block devices or NBD URIs, in any order (roles come from superblocks).
    pub members: Vec<Spanned<String>>,
    /// Hot spares of this array. One that cannot be opened at start, or that carries another
    /// array's superblock, is left out (the array starts without it); fewer spares present
    /// than listed raises `SparesMissing`.
    #[serde(default)]
    pub spares: Vec<Spanned<String>>,
    /// Arrays sharing a spare group lend each other their spares (mdadm's `spare-group`):
    /// when one is degraded and has no spare of its own, the daemon moves to it the smallest
    /// spare that fits from another array of the group that is not degraded itself (raising
    /// `MoveSpare`); that array rebuilds onto it. At start, an array also assembles any spare
    /// its group's other arrays list that carries its superblock (one lent to it earlier). A
    /// `read_only` array takes no part (it writes no superblock).
    pub spare_group: Option<Spanned<String>>,
    /// The array's journal device (serve's `--journal`).
    pub journal: Option<Spanned<String>>,
    /// Accept a write-back journal on RAM (serve's `--allow-volatile-journal`; default false).
    #[serde(default)]
    pub allow_volatile_journal: bool,
    /// Serve read-only (serve's `--read-only`; default false).
    #[serde(default)]
    pub read_only: bool,
    /// This array's own TCP listeners instead of the daemon's.
    pub listen: Option<Vec<Spanned<String>>>,
    /// This array's own Unix socket listener instead of the daemon's.
    pub unix: Option<Spanned<PathBuf>>,
    /// Read cache size (serve's `--cache-size`, default 64M; 0 = none).
    pub cache_size: Option<Spanned<Size>>,
    /// `off`, `on` or `adaptive` (serve's `--read-ahead`, default adaptive).
    pub read_ahead: Option<Spanned<String>>,
    /// Bytes read ahead of a sequential client (serve's `--read-ahead-window`).
    pub read_ahead_window: Option<Spanned<Size>>,
    /// Memory for request data in flight (serve's `--buffer-memory`, default 256M, ≥ 64M).
    pub buffer_memory: Option<Spanned<Size>>,
    /// Background work's minimum rate per member (serve's `--speed-min`, default 1M).
    pub speed_min: Option<Spanned<Rate>>,
    /// Background work's maximum rate per member (serve's `--speed-max`, default 200M).
    pub speed_max: Option<Spanned<Rate>>,
    /// RAID 5/6 partial-stripe wait (serve's `--gather-wait`, default 2, at most 1000).
    pub gather_wait_ms: Option<Spanned<u64>>,
    /// The daemon's QoS: this array's latency target in µs (10..=10,000,000). While more than a
    /// tenth of its requests take longer, the arrays without a target (or with a larger one)
    /// are throttled. Daemon only (`serve` has no other array to hold back).
    pub latency_target_us: Option<Spanned<u64>>,
    /// The daemon's QoS: caps on this array's clients, as Linux's io.max — bytes read and
    /// written per second (at least 1M/s) and requests per second (at least 10). Daemon only.
    pub max_bandwidth: Option<Spanned<Rate>>,
    pub max_iops: Option<Spanned<u64>>,
    /// The niceness (-20 to 19) of this array's request threads, which run its clients'
    /// requests (parity, copies, encryption, the member calls): 19 gives them a small share of
    /// a core other arrays' threads want (the scheduler's weight 15 against 1024 at 0), as
    /// `nice` would a process of its own. Below the daemon's own needs CAP_SYS_NICE. Daemon
    /// only; default: the daemon's.
    pub nice: Option<Spanned<i32>>,
    /// Read errors before a member is failed (serve's `--read-errors-max`, default 20).
    pub read_errors_max: Option<Spanned<u32>>,
    /// Window of `read_errors_max`, seconds (serve's `--read-error-window`, default 60).
    pub read_error_window_secs: Option<Spanned<u64>>,
    /// Member request deadline, seconds (serve's `--io-timeout`, default 30).
    pub io_timeout_secs: Option<Spanned<u64>>,
    /// Give local members the deadline too (serve's `--local-io-deadline`; default false).
    #[serde(default)]
    pub local_io_deadline: bool,
    /// `direct`, `buffered` or `auto` (serve's `--member-cache`, default auto: direct I/O for
    /// block-device members, the page cache for files).
    pub member_cache: Option<Spanned<String>>,
    /// RAID 1/10: members (named as in `members` or `spares`) read only when no other copy can
    /// serve (serve's `--write-mostly`, md's write-mostly).
    #[serde(default)]
    pub write_mostly: Vec<Spanned<String>>,
    /// `latency`, `round-robin` or `first` (serve's `--read-balance`, default latency): how
    /// RAID 1/10 reads choose a copy, and whether reads go around a slow member.
    pub read_balance: Option<Spanned<String>>,
    /// How file and block-device members' reads and writes are submitted: `auto` (io_uring where
    /// it measured faster, when the kernel allows it), `uring` or `threads` (serve's
    /// `--member-io`, default auto).
    pub member_io: Option<Spanned<String>>,
    /// Reconnect remote members in the background (default true; serve's `--no-reconnect`).
    pub reconnect: Option<bool>,
    /// Longest wait between reconnect attempts, seconds (serve's `--reconnect-interval-max`,
    /// default 30).
    pub reconnect_interval_max_secs: Option<Spanned<u64>>,
    /// When the daemon starts a scrub (check only) by itself: `off` (default), `daily`,
    /// `weekly`, `monthly`, a cron spec or `every DURATION` (see [`Schedule`]); skipped, with
    /// a log line, while the array is degraded or any background task runs (docs/DESIGN.md
    /// "Scheduled scrubs and the background window").
    pub scrub_schedule: Option<Spanned<Schedule>>,
    /// Daily local-time window for scrubs and resyncs, `"HH:MM-HH:MM"` (default: any time):
    /// outside it they pause where they are and resume when it opens (see [`TimeWindow`]);
    /// rebuilds and replaces do not.
    pub background_window: Option<Spanned<TimeWindow>>,
    /// An encrypted array's key file (its bytes are the key; serve's `--key-file`). Read at
    /// the array's start; the daemon never asks on a terminal.
    pub key_file: Option<Spanned<PathBuf>>,
    /// An encrypted array's passphrase file (its final newline not part of it; serve's
    /// `--passphrase-file`). At most one of `key_file` and `passphrase_file`.
    pub passphrase_file: Option<Spanned<PathBuf>>,
}

impl ArrayConfig {
    /// The export name clients ask for.
    pub fn export_name(&self) -> &str {
        self.export.as_ref().unwrap_or(&self.name).get_ref()
    }

    /// True when the array has a listener of its own.
    pub fn has_own_listener(&self) -> bool {
        self.listen.is_some() || self.unix.is_some()
    }
}

//! Reading and checking the file: first TOML and the types (toml and serde, with the line of
//! the first error), then the rules no type can say — names and devices used once, values in
//! range — each problem with its line and key.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use cache::{CacheConfig, ReadAhead};
use toml::Spanned;

use crate::model::{ArrayConfig, Config, Daemon, TlsMode, DEFAULT_LISTEN};

/// One thing wrong in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line, when the problem has a place in the file.
    pub line: Option<usize>,
    /// The key the problem is about (`members`, `daemon.listen`, ...), when there is one.
    pub key: Option<String>,
    pub message: String,
}

/// Everything wrong in one file; `Display` prints one `FILE:LINE: key: message` line each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problems {
    pub origin: PathBuf,
    pub list: Vec<Problem>,
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        for (i, p) in self.list.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}", self.origin.display())?;
            if let Some(line) = p.line {
                write!(f, ":{line}")?;
            }
            write!(f, ": ")?;
            if let Some(key) = &p.key {
                write!(f, "key `{key}`: ")?;
            }
            write!(f, "{}", p.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for Problems {}

/// Smallest request memory: room for two of the largest (32 MiB) NBD requests.
const BUFFER_MEMORY_MIN: u64 = 64 << 20;
/// Longest partial-stripe wait.
const GATHER_WAIT_MS_MAX: u64 = 1000;
/// Range of `latency_target_us`: 10 µs (below that the clock and a thread wake-up are the
/// latency) to 10 s.
pub const LATENCY_TARGET_US: std::ops::RangeInclusive<u64> = 10..=10_000_000;
/// Longest array name (it appears in URLs, alerts and metric labels).
const NAME_BYTES_MAX: usize = 64;

impl Config {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Config, Problems> {
        let text = std::fs::read_to_string(path).map_err(|e| Problems {
            origin: path.to_path_buf(),
            list: vec![Problem {
                line: None,
                key: None,
                message: format!("cannot read the configuration: {e}"),
            }],
        })?;
        Config::parse(&text, path)
    }

    /// Parses and checks `text`, read from `origin` (named in every problem).
    pub fn parse(text: &str, origin: &Path) -> Result<Config, Problems> {
        let mut checker = Checker {
            text,
            problems: Vec::new(),
        };
        let config = match toml::from_str::<Config>(text) {
            Ok(config) => Some(config),
            Err(e) => {
                let span = e.span();
                let key = span.as_ref().and_then(|s| key_on_line(text, s.start));
                checker.problems.push(Problem {
                    line: span.map(|s| line_of(text, s.start)),
                    key,
                    message: e.message().trim().to_string(),
                });
                None
            }
        };
        if let Some(config) = &config {
            checker.daemon(&config.daemon);
            checker.alerts(config);
            for array in &config.arrays {
                checker.array(array);
            }
            checker.unique_names(&config.arrays);
            checker.unique_devices(&config.arrays);
            checker.listeners(config);
        }
        checker.problems.sort_by_key(|p| p.line);
        match config {
            Some(config) if checker.problems.is_empty() => Ok(config),
            _ => Err(Problems {
                origin: origin.to_path_buf(),
                list: checker.problems,
            }),
        }
    }
}

/// 1-based line of byte `offset`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The key assigned on the line holding `offset` (`cache_size` of `cache_size = "64X"`).
fn key_on_line(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next()?.trim();
    let key = match line.split_once('=') {
        Some((key, _)) => key,
        None => line
            .strip_prefix('[')?
            .split(']')
            .next()?
            .trim_start_matches('['),
    };
    let key = key.trim().trim_matches('"');
    (!key.is_empty()).then(|| key.to_string())
}

struct Checker<'a> {
    text: &'a str,
    problems: Vec<Problem>,
}

impl Checker<'_> {
    fn at(&mut self, span: Range<usize>, key: &str, message: String) {
        self.problems.push(Problem {
            line: Some(line_of(self.text, span.start)),
            key: Some(key.to_string()),
            message,
        });
    }

    fn daemon(&mut self, daemon: &Daemon) {
        for addr in &daemon.listen {
            self.address(addr, "daemon.listen");
        }
        if let Some(metrics) = &daemon.metrics {
            self.address(metrics, "daemon.metrics");
        }
        self.admin_listener(daemon);
        if let (Some(token), None) = (&daemon.dashboard_token_file, &daemon.metrics) {
            self.at(
                token.span(),
                "daemon.dashboard_token_file",
                "the dashboard is served on the metrics listener: set daemon.metrics too"
                    .to_string(),
            );
        }
        if let Some(mdstat) = &daemon.mdstat {
            self.mdstat(mdstat, daemon);
        }
        let tls_on = (daemon.tls.as_ref()).filter(|t| *t.get_ref() != TlsMode::Off);
        match (tls_on, &daemon.tls_certificates) {
            (Some(tls), None) => self.at(
                tls.span(),
                "daemon.tls",
                "TLS needs its certificates: set daemon.tls_certificates to a directory with \
                 server-cert.pem, server-key.pem and ca-cert.pem"
                    .to_string(),
            ),
            (None, Some(dir)) => self.at(
                dir.span(),
                "daemon.tls_certificates",
                "certificates without TLS: set daemon.tls to \"on\" or \"require\"".to_string(),
            ),
            _ => {}
        }
        self.client_limits(daemon);
    }

    /// The TCP admin listener starts only with TLS and a token; either without it is a mistake.
    fn admin_listener(&mut self, daemon: &Daemon) {
        let (certificates, token) = (&daemon.admin_tls_certificates, &daemon.admin_token_file);
        let Some(listen) = &daemon.admin_listen else {
            let set = [
                (
                    "daemon.admin_tls_certificates",
                    certificates.as_ref().map(|c| c.span()),
                ),
                ("daemon.admin_token_file", token.as_ref().map(|t| t.span())),
                (
                    "daemon.admin_tls_verify_peer",
                    daemon.admin_tls_verify_peer.as_ref().map(|v| v.span()),
                ),
            ];
            for (key, span) in set {
                if let Some(span) = span {
                    let message = "only the TCP admin listener uses it: set daemon.admin_listen \
                                   too, or remove it"
                        .to_string();
                    self.at(span, key, message);
                }
            }
            return;
        };
        self.address(listen, "daemon.admin_listen");
        if certificates.is_none() {
            let message = "the TCP admin listener speaks TLS only: set \
                           daemon.admin_tls_certificates to a directory with server-cert.pem and \
                           server-key.pem"
                .to_string();
            self.at(listen.span(), "daemon.admin_listen", message);
        }
        if token.is_none() {
            let message = "the TCP admin listener needs a token: set daemon.admin_token_file \
                           to a file only its owner can read (umask 077; head -c 24 \
                           /dev/urandom | base64 > FILE)"
                .to_string();
            self.at(listen.span(), "daemon.admin_listen", message);
        }
    }

    /// The NBD client limits' ranges (serve's flags of the same names).
    fn client_limits(&mut self, daemon: &Daemon) {
        if let Some(secs) = &daemon.handshake_timeout_secs {
            if !(1..=3600).contains(secs.get_ref()) {
                let message = "must be from 1 to 3600 seconds".to_string();
                self.at(secs.span(), "daemon.handshake_timeout_secs", message);
            }
        }
        if let Some(secs) = &daemon.reply_timeout_secs {
            if *secs.get_ref() > 3600 {
                let message = "must be at most 3600 seconds (0: never)".to_string();
                self.at(secs.span(), "daemon.reply_timeout_secs", message);
            }
        }
        for (value, key) in [
            (&daemon.max_connections, "daemon.max_connections"),
            (
                &daemon.max_connections_per_client,
                "daemon.max_connections_per_client",
            ),
            (
                &daemon.max_requests_per_connection,
                "daemon.max_requests_per_connection",
            ),
        ] {
            if let Some(v) = value.as_ref().filter(|v| !(1..=1024).contains(v.get_ref())) {
                self.at(v.span(), key, "must be from 1 to 1024".to_string());
            }
        }
        if let Some(size) = &daemon.max_option_size {
            if !(8 << 10..=1 << 20).contains(&size.get_ref().0) {
                let message = "must be from 8K to 1M".to_string();
                self.at(size.span(), "daemon.max_option_size", message);
            }
        }
    }

    /// A file's path, not a directory's nor a socket's of the daemon.
    fn mdstat(&mut self, mdstat: &Spanned<PathBuf>, daemon: &Daemon) {
        let path = mdstat.get_ref();
        let sockets = [
            (&daemon.admin, "daemon.admin"),
            (&daemon.unix, "daemon.unix"),
        ];
        let taken = sockets
            .into_iter()
            .find(|(socket, _)| socket.as_ref().is_some_and(|s| s.get_ref() == path));
        let message = if path.file_name().is_none() || path.to_string_lossy().ends_with('/') {
            format!(
                "{:?} names no file (e.g. /run/raidkit/mdstat)",
                path.display()
            )
        } else if let Some((_, key)) = taken {
            format!("{:?} is {key}'s socket too", path.display())
        } else {
            return;
        };
        self.at(mdstat.span(), "daemon.mdstat", message);
    }

    fn alerts(&mut self, config: &Config) {
        let alerts = &config.alerts;
        if let Some(url) = &alerts.webhook {
            if !url.get_ref().starts_with("http://") {
                self.at(
                    url.span(),
                    "alerts.webhook",
                    format!("{:?} is not an http:// URL", url.get_ref()),
                );
            }
        }
        for (value, key) in [
            (&alerts.mail_to, "alerts.mail_to"),
            (&alerts.mail_command, "alerts.mail_command"),
        ] {
            if let Some(v) = value.as_ref().filter(|v| v.get_ref().trim().is_empty()) {
                self.at(v.span(), key, "is empty".to_string());
            }
        }
        if let (Some(cmd), None) = (&alerts.mail_command, &alerts.mail_to) {
            self.at(
                cmd.span(),
                "alerts.mail_command",
                "is given without alerts.mail_to: whom should it mail?".to_string(),
            );
        }
    }

    /// `HOST:PORT`, as the listeners take it.
    fn address(&mut self, addr: &Spanned<String>, key: &str) {
        let text = addr.get_ref();
        let ok = text
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !ok {
            self.at(
                addr.span(),
                key,
                format!("{text:?} is not a HOST:PORT address"),
            );
        }
    }

    fn array(&mut self, a: &ArrayConfig) {
        let name = a.name.get_ref();
        let name_ok = !name.is_empty()
            && name.len() <= NAME_BYTES_MAX
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !name_ok {
            self.at(
                a.name.span(),
                "name",
                format!(
                    "{name:?}: an array name is 1 to {NAME_BYTES_MAX} letters, digits, '.', '_' \
                     or '-' (it appears in URLs, alerts and metric labels)"
                ),
            );
        }
        if let Some(uuid) = &a.uuid {
            if uuid.get_ref().parse::<ondisk::Uuid>().is_err() {
                self.at(
                    uuid.span(),
                    "uuid",
                    format!(
                        "{:?} is not a UUID (raidkit examine prints the array's)",
                        uuid.get_ref()
                    ),
                );
            }
        }
        if let Some(export) = a.export.as_ref().filter(|e| e.get_ref().is_empty()) {
            self.at(
                export.span(),
                "export",
                "is empty: name the export".to_string(),
            );
        }
        if a.members.is_empty() {
            self.at(
                a.name.span(),
                "members",
                format!("array {name:?} names no member"),
            );
        }
        for spec in a.members.iter().chain(&a.spares) {
            if member::ram_spec(spec.get_ref()) {
                self.at(
                    spec.span(),
                    "members",
                    format!(
                        "{:?}: a RAM member is empty at every start, so the array could never be \
                         assembled from it; use `raidkit serve --create` for an array in RAM",
                        spec.get_ref()
                    ),
                );
            }
        }
        for addr in a.listen.iter().flatten() {
            self.address(addr, "listen");
        }
        self.tunables(a);
    }

    fn tunables(&mut self, a: &ArrayConfig) {
        if let Some(m) = &a.buffer_memory {
            if m.get_ref().0 < BUFFER_MEMORY_MIN {
                self.at(
                    m.span(),
                    "buffer_memory",
                    "is below 64M: room for two of the largest (32M) requests is needed"
                        .to_string(),
                );
            }
        }
        if let Some(ms) = a
            .gather_wait_ms
            .as_ref()
            .filter(|ms| *ms.get_ref() > GATHER_WAIT_MS_MAX)
        {
            self.at(
                ms.span(),
                "gather_wait_ms",
                format!("is above {GATHER_WAIT_MS_MAX}"),
            );
        }
        if let Some(t) = a
            .latency_target_us
            .as_ref()
            .filter(|t| !LATENCY_TARGET_US.contains(t.get_ref()))
        {
            self.at(
                t.span(),
                "latency_target_us",
                format!(
                    "must be from {} to {} (µs)",
                    LATENCY_TARGET_US.start(),
                    LATENCY_TARGET_US.end()
                ),
            );
        }
        if let Some(b) = (a.max_bandwidth.as_ref()).filter(|b| b.get_ref().0 < (1 << 20)) {
            self.at(
                b.span(),
                "max_bandwidth",
                "must be at least 1M/s (the largest request then waits 32 s)".to_string(),
            );
        }
        if let Some(n) = (a.max_iops.as_ref()).filter(|n| *n.get_ref() < 10) {
            self.at(n.span(), "max_iops", "must be at least 10".to_string());
        }
        if let Some(n) = (a.nice.as_ref()).filter(|n| !(-20..=19).contains(n.get_ref())) {
            self.at(
                n.span(),
                "nice",
                "must be from -20 (most CPU) to 19 (least), as nice(1)".to_string(),
            );
        }
        for (value, key) in [
            (&a.read_error_window_secs, "read_error_window_secs"),
            (&a.io_timeout_secs, "io_timeout_secs"),
            (
                &a.reconnect_interval_max_secs,
                "reconnect_interval_max_secs",
            ),
        ] {
            if let Some(v) = value.as_ref().filter(|v| *v.get_ref() == 0) {
                self.at(v.span(), key, "must be at least 1 second".to_string());
            }
        }
        if let (Some(min), Some(max)) = (&a.speed_min, &a.speed_max) {
            if min.get_ref().0 > max.get_ref().0 {
                self.at(min.span(), "speed_min", "is above speed_max".to_string());
            }
        }
        self.cache(a);
        for named in &a.write_mostly {
            let listed =
                (a.members.iter().chain(&a.spares)).any(|m| m.get_ref() == named.get_ref());
            if !listed {
                self.at(
                    named.span(),
                    "write_mostly",
                    format!(
                        "{:?} is not one of this array's members or spares (name it as they do)",
                        named.get_ref()
                    ),
                );
            }
        }
        if let (Some(_), Some(pass)) = (&a.key_file, &a.passphrase_file) {
            self.at(
                pass.span(),
                "passphrase_file",
                "give key_file or passphrase_file, not both".to_string(),
            );
        }
        if let Some(text) = &a.member_cache {
            if let Err(e) = text.get_ref().parse::<member::MemberCache>() {
                self.at(text.span(), "member_cache", e);
            }
        }
        if let Some(text) = &a.read_balance {
            if let Err(e) = text.get_ref().parse::<engine::ReadBalance>() {
                self.at(text.span(), "read_balance", e);
            }
        }
        if let Some(text) = &a.member_io {
            if let Err(e) = text.get_ref().parse::<member::MemberIo>() {
                self.at(text.span(), "member_io", e);
            }
        }
    }

    /// The read cache is checked as `raidkit serve` checks it.
    fn cache(&mut self, a: &ArrayConfig) {
        let mut read_ahead = ReadAhead::default();
        if let Some(text) = &a.read_ahead {
            match text.get_ref().parse() {
                Ok(mode) => read_ahead = mode,
                Err(e) => return self.at(text.span(), "read_ahead", e.to_string()),
            }
        }
        let size = a
            .cache_size
            .as_ref()
            .map_or(CacheConfig::default().size_bytes, |s| s.get_ref().0);
        let window = a.read_ahead_window.as_ref().map(|w| w.get_ref().0);
        if let Err(e) = CacheConfig::sized(size, read_ahead, window) {
            let (span, key) = match (&a.read_ahead_window, &a.cache_size) {
                (Some(w), _) => (w.span(), "read_ahead_window"),
                (None, Some(s)) => (s.span(), "cache_size"),
                (None, None) => (a.name.span(), "cache_size"),
            };
            self.at(span, key, e.to_string());
        }
    }

    fn unique_names(&mut self, arrays: &[ArrayConfig]) {
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut exports: HashMap<&str, usize> = HashMap::new();
        // Values are the byte offsets of first uses (two tables may share a line).
        for a in arrays {
            let at = a.name.span().start;
            let first = *names.entry(a.name.get_ref()).or_insert(at);
            if first != at {
                let first = line_of(self.text, first);
                self.at(
                    a.name.span(),
                    "name",
                    format!(
                        "array {:?} is named twice (first at line {first})",
                        a.name.get_ref()
                    ),
                );
            }
            if a.export.is_none() && names[a.name.get_ref().as_str()] != at {
                continue; // the name's own problem says it
            }
            let export = a.export.as_ref().unwrap_or(&a.name);
            let at = export.span().start;
            let first = *exports.entry(export.get_ref()).or_insert(at);
            if first != at {
                let first = line_of(self.text, first);
                self.at(
                    export.span(),
                    "export",
                    format!(
                        "export name {:?} is used twice (first at line {first}): clients could \
                         not tell the arrays apart",
                        export.get_ref()
                    ),
                );
            }
        }
    }

    /// A device may belong to one place only: one array's members, spares or journal.
    fn unique_devices(&mut self, arrays: &[ArrayConfig]) {
        let mut seen: HashMap<String, (usize, String)> = HashMap::new();
        for a in arrays {
            let devices = a
                .members
                .iter()
                .map(|m| (m, "members"))
                .chain(a.spares.iter().map(|s| (s, "spares")))
                .chain(a.journal.iter().map(|j| (j, "journal")));
            for (spec, key) in devices {
                let id = identity(spec.get_ref());
                let line = line_of(self.text, spec.span().start);
                let place = format!("array {:?}'s {key}", a.name.get_ref());
                match seen.get(&id) {
                    Some((first, where_)) => {
                        let message = format!(
                            "{:?} is also in {where_} (line {first}): a device belongs to one \
                             array, once",
                            spec.get_ref()
                        );
                        self.at(spec.span(), key, message);
                    }
                    None => {
                        seen.insert(id, (line, place));
                    }
                }
            }
        }
    }

    /// Every array needs a listener, and two listeners cannot share an address.
    fn listeners(&mut self, config: &Config) {
        let shared = config.arrays.iter().any(|a| !a.has_own_listener());
        let mut seen: HashMap<String, usize> = HashMap::new();
        let daemon = &config.daemon;
        let daemon_addrs = daemon.listen.iter().map(|l| (l, "daemon.listen"));
        let array_addrs = config
            .arrays
            .iter()
            .flat_map(|a| a.listen.iter().flatten().map(|l| (l, "listen")));
        for (addr, key) in daemon_addrs.chain(array_addrs) {
            let line = line_of(self.text, addr.span().start);
            if let Some(first) = seen.insert(addr.get_ref().clone(), line) {
                self.at(
                    addr.span(),
                    key,
                    format!("{:?} is also listened on at line {first}", addr.get_ref()),
                );
            }
        }
        if shared && daemon.listen.is_empty() && daemon.unix.is_none() {
            // The default listener is used; an array may not claim it for itself.
            for a in &config.arrays {
                for addr in a.listen.iter().flatten() {
                    if addr.get_ref() == DEFAULT_LISTEN {
                        self.at(
                            addr.span(),
                            "listen",
                            format!("{DEFAULT_LISTEN} is the daemon's default listener"),
                        );
                    }
                }
            }
        }
    }
}

/// What makes two device specs the same device: the resolved path of a file or block device
/// that exists (so `/dev/disk/by-id/...` and `/dev/sdb` match), else the text as written.
fn identity(spec: &str) -> String {
    if spec.contains("://") {
        return spec.to_string();
    }
    std::fs::canonicalize(spec)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| spec.to_string())
}

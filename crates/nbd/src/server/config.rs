//! Server limits and identity.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::tls::Tls;
use crate::codec::consts::MAX_STRING_BYTES;
use crate::qos::QosClass;

/// Configuration of [`serve`](super::serve). Every resource has a bound here.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The export's name; the empty (default) name also selects it.
    pub export_name: String,
    /// Shown by `NBD_OPT_LIST` and `NBD_INFO_DESCRIPTION`.
    pub description: String,
    /// Refuse writes (`NBD_EPERM`) and advertise `NBD_FLAG_READ_ONLY`.
    pub read_only: bool,
    /// Largest READ/WRITE payload (advertised as the maximum block size). Default 32 MiB.
    pub max_request_bytes: u32,
    /// Requests in flight per connection; at the limit the server stops reading. Default 64.
    pub max_in_flight_per_conn: usize,
    /// Open connections of a listener; more are accepted and closed at once. Default 64.
    pub max_connections: usize,
    /// Open connections of a listener from one client address (a TCP peer's IPv4 address or
    /// IPv6 /64; Unix-socket clients count in `max_connections` only); more are accepted and
    /// closed at once. Default 16.
    pub max_connections_per_client: usize,
    /// Export calls running at once, over all connections. Default 32.
    pub max_blocking_calls: usize,
    /// Bytes of request and reply buffers held at once, over all connections. Default 1 GiB.
    pub max_buffer_bytes: u64,
    /// Bytes of idle buffers kept for reuse by later requests (buffers of 64 KiB and more,
    /// in power-of-two classes); beyond it a finished request's buffer is freed. Default
    /// 64 MiB.
    pub max_idle_buffer_bytes: u64,
    /// Largest option data accepted during the handshake: a longer option is refused with
    /// `NBD_REP_ERR_TOO_BIG` (unless it is `NBD_OPT_EXPORT_NAME`, which cannot be answered
    /// with an error) and the connection closed, its data never read. Default 64 KiB.
    pub max_option_bytes: u32,
    /// Options one connection may send before it is closed. Default 1024.
    pub max_options_per_conn: u32,
    /// Time allowed for the whole handshake, from the accept to the end of option haggling
    /// (TLS included); a client still negotiating then is disconnected. Default 10 s.
    pub handshake_timeout: Duration,
    /// A connection in transmission with no request in flight and none received for this
    /// long is disconnected (`None`: never). Default `None`.
    pub idle_timeout: Option<Duration>,
    /// A reply write that makes no progress for this long — the client reads none of it —
    /// ends the connection (`None`: never), so a client that never reads its replies cannot
    /// hold buffer budget and request threads. Default 60 s.
    pub reply_timeout: Option<Duration>,
    /// After shutdown, time allowed for connections to finish before they are cut. Default 60 s.
    pub shutdown_grace: Duration,
    /// TLS (STARTTLS) for clients, optional or required; `None`: STARTTLS is refused.
    pub tls: Option<Tls>,
    /// The export's class in a [`QosGroup`](crate::QosGroup) (its latency target, or the
    /// throttle it gets while another export misses its target); `None`: never throttled.
    pub qos: Option<Arc<QosClass>>,
    /// The niceness (-20 to 19) of this export's request threads, which run its export calls
    /// (Linux: each thread's own scheduling weight, set as it starts; [`check_thread_nice`]
    /// tells whether the process may). `None`: the process's. Default `None`.
    pub thread_nice: Option<i32>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            export_name: String::new(),
            description: String::new(),
            read_only: false,
            max_request_bytes: 32 << 20,
            max_in_flight_per_conn: 64,
            max_connections: 64,
            max_connections_per_client: 16,
            max_blocking_calls: 32,
            max_buffer_bytes: 1 << 30,
            max_idle_buffer_bytes: 64 << 20,
            max_option_bytes: 64 << 10,
            max_options_per_conn: 1024,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: None,
            reply_timeout: Some(Duration::from_secs(60)),
            shutdown_grace: Duration::from_secs(60),
            tls: None,
            qos: None,
            thread_nice: None,
        }
    }
}

/// Range of [`ServerConfig::max_option_bytes`]: an option holds names and queries of at most
/// 4 KiB each, and every connection in its handshake may hold one option's data (at the
/// maximum, 64 connections × 1 MiB).
pub const MIN_OPTION_BYTES: u32 = 8 << 10;
pub const MAX_OPTION_BYTES: u32 = 1 << 20;

/// Niceness values ([`ServerConfig::thread_nice`]).
pub const NICE: std::ops::RangeInclusive<i32> = -20..=19;

/// Gives the calling thread the niceness `nice` (Linux: a thread's own; threads it starts
/// inherit it).
pub(crate) fn set_thread_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: gettid has no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
    // SAFETY: plain integer arguments; `tid` is this thread.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether this process may run threads at niceness `nice` (a value below the process's needs
/// CAP_SYS_NICE or an RLIMIT_NICE that allows it): tried on a thread of its own, which then
/// ends, so the caller's niceness is unchanged.
pub fn check_thread_nice(nice: i32) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("nice-check".into())
        .spawn(move || set_thread_nice(nice))?
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the niceness check thread panicked")))
}

/// Granularity of the buffer budget (see [`ServerConfig::max_buffer_bytes`]).
pub(crate) const BUFFER_UNIT_BYTES: u64 = 4096;

impl ServerConfig {
    /// Checks every field; [`serve`](super::serve) calls this first.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field: &'static str, reason: &'static str| Err(ConfigError { field, reason });
        if self.export_name.len() > MAX_STRING_BYTES || self.export_name.contains('\0') {
            return bad("export_name", "must be at most 4096 bytes without NUL");
        }
        if self.description.len() > MAX_STRING_BYTES || self.description.contains('\0') {
            return bad("description", "must be at most 4096 bytes without NUL");
        }
        if self.max_request_bytes < 1 << 20 {
            return bad("max_request_bytes", "must be at least 1 MiB");
        }
        if self.max_in_flight_per_conn == 0
            || self.max_connections == 0
            || self.max_connections_per_client == 0
        {
            return bad(
                "max_in_flight_per_conn/max_connections/max_connections_per_client",
                "must be at least 1",
            );
        }
        let zero = |t: Option<Duration>| t.is_some_and(|t| t.is_zero());
        if self.handshake_timeout.is_zero() || zero(self.idle_timeout) || zero(self.reply_timeout) {
            return bad(
                "handshake_timeout/idle_timeout/reply_timeout",
                "must be above zero",
            );
        }
        if self.max_blocking_calls == 0 {
            return bad("max_blocking_calls", "must be at least 1");
        }
        let units = self.max_buffer_bytes / BUFFER_UNIT_BYTES;
        // A request's buffer is charged its size class: up to twice its length.
        let request_bytes = u64::from(self.max_request_bytes).next_power_of_two();
        let request_units = request_bytes.div_ceil(BUFFER_UNIT_BYTES);
        if units < request_units || units > u64::from(u32::MAX) {
            return bad(
                "max_buffer_bytes",
                "must hold one maximum request and be below 16 TiB",
            );
        }
        if !(MIN_OPTION_BYTES..=MAX_OPTION_BYTES).contains(&self.max_option_bytes) {
            return bad("max_option_bytes", "must be from 8 KiB to 1 MiB");
        }
        if self.thread_nice.is_some_and(|n| !NICE.contains(&n)) {
            return bad("thread_nice", "must be from -20 to 19");
        }
        Ok(())
    }
}

/// A [`ServerConfig`] field with an unusable value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub field: &'static str,
    pub reason: &'static str,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid NBD server configuration: {} {}",
            self.field, self.reason
        )
    }
}

impl std::error::Error for ConfigError {}

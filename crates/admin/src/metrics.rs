//! Prometheus metrics of the arrays in an [`Arrays`]: the text exposition format (0.0.4,
//! written by the `prometheus-client` crate from each array's [`Snapshot`] at scrape time) on
//! a small HTTP listener (`raidkit serve --metrics HOST:PORT`, the daemon's `[daemon]
//! metrics`).
//!
//! Names start with `raidkit_`, carry their unit (`_bytes`, `_seconds`) and counters end in
//! `_total`; labels are `array`, `member`, `role`, `op`, and `state`/`health`/`task` for the
//! gauges of a state set (1 for the current state, 0 for the others). The listener answers
//! `GET /metrics` (and every other path with the process's [`Pages`], the web dashboard, if
//! it has one: [`crate::pages::serve_page`]), to at most [`CONNECTIONS_MAX`] connections at
//! once (more get a 503),
//! with headers within [`HEADER_READ_TIMEOUT`] and a connection's life bounded by
//! [`CONNECTION_TIMEOUT`]. It exposes array and member names to whoever can reach it: it binds
//! what it is given (loopback by default). It answers only requests addressed to itself
//! ([`host_allowed`]: the `Host` header names its address, `localhost` on loopback, this
//! machine's host name, or the name it was bound by; 421 otherwise), so a page of another site
//! cannot read it through DNS rebinding.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request as HttpRequest, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use iostats::{latency_bucket_upper_ns, IoSnapshot, KindSnapshot, OpKind, LATENCY_BUCKETS};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use volume::{ArrayHealth, MemberState};

use crate::pages::Pages;
use crate::server::{http_response, Arrays};
use crate::stats::Snapshot;
use crate::status::wire_name;
use crate::Log;

/// The path metrics are served on.
pub const METRICS_PATH: &str = "/metrics";
/// Connections served at once: scrapes, and a browser loading the dashboard (up to six).
pub const CONNECTIONS_MAX: usize = 16;
/// Time allowed to send the request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest life of one connection.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest request head (hyper's read buffer).
pub const REQUEST_BYTES_MAX: usize = 16 * 1024;

/// The text exposition of every array in `arrays` (an array that cannot give its counters is
/// left out).
pub fn render(arrays: &Arrays) -> String {
    let snapshots: Vec<(String, Snapshot)> = (arrays.all().into_iter())
        .filter_map(|(name, control)| Some((name, control.snapshot().ok()?)))
        .collect();
    encode(snapshots)
}

/// The text exposition of these arrays' snapshots, by array name.
pub fn encode(arrays: Vec<(String, Snapshot)>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape { arrays }));
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
        .expect("writing to a String cannot fail");
    text
}

/// One scrape's snapshots, encoded once.
#[derive(Debug)]
struct Scrape {
    arrays: Vec<(String, Snapshot)>,
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in self.families() {
            family.encode(&mut encoder)?;
        }
        Ok(())
    }
}

/// A metric's labels.
type Labels = Vec<(&'static str, String)>;

/// One metric family: its samples under one descriptor.
struct Family {
    name: String,
    help: String,
    samples: Vec<(Labels, Value)>,
}

enum Value {
    Counter(u64),
    /// A counter of seconds.
    Seconds(f64),
    Gauge(i64),
    /// Per-bucket counts with each bucket's upper bound, and the sum.
    Histogram(Vec<(f64, u64)>, f64),
}

impl Family {
    fn new(
        name: impl Into<String>,
        help: impl Into<String>,
        samples: Vec<(Labels, Value)>,
    ) -> Family {
        Family {
            name: name.into(),
            help: help.into(),
            samples,
        }
    }

    fn encode(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some((_, first)) = self.samples.first() else {
            return Ok(()); // nothing to say (no journal, no task): no family
        };
        let kind = match first {
            Value::Counter(_) | Value::Seconds(_) => MetricType::Counter,
            Value::Gauge(_) => MetricType::Gauge,
            Value::Histogram(..) => MetricType::Histogram,
        };
        let mut family = encoder.encode_descriptor(&self.name, &self.help, None, kind)?;
        for (labels, value) in &self.samples {
            let mut metric = family.encode_family(labels)?;
            match value {
                Value::Counter(v) => ConstCounter::new(*v).encode(metric)?,
                Value::Seconds(v) => ConstCounter::new(*v).encode(metric)?,
                Value::Gauge(v) => ConstGauge::new(*v).encode(metric)?,
                Value::Histogram(buckets, sum) => {
                    let count = buckets.iter().map(|(_, n)| n).sum();
                    metric.encode_histogram::<NoLabelSet>(*sum, count, buckets, None)?
                }
            }
        }
        Ok(())
    }
}

/// The latency histogram of one kind of operation, in seconds.
fn latency(k: &KindSnapshot) -> Value {
    let buckets = (0..LATENCY_BUCKETS)
        .map(|b| {
            let upper = latency_bucket_upper_ns(b).map_or(f64::INFINITY, |ns| ns as f64 / 1e9);
            (upper, k.latency[b])
        })
        .collect();
    Value::Histogram(buckets, k.time_ns as f64 / 1e9)
}

/// A device's I/O families, `{prefix}_requests_total`, `_bytes_total`, `_errors_total`,
/// `_request_duration_seconds` (by `op`), `_requests_in_flight` and `_busy_seconds_total`, for
/// `devices` (each one's labels and counters).
fn io_families(prefix: &str, what: &str, devices: &[(Labels, &IoSnapshot)]) -> Vec<Family> {
    let per_op = |value: fn(&KindSnapshot) -> Value| -> Vec<(Labels, Value)> {
        let mut samples = Vec::new();
        for (labels, io) in devices {
            for op in OpKind::ALL {
                let mut labels = labels.clone();
                labels.push(("op", op.name().to_string()));
                samples.push((labels, value(io.kind(op))));
            }
        }
        samples
    };
    let per_device = |value: fn(&IoSnapshot) -> Value| -> Vec<(Labels, Value)> {
        (devices.iter())
            .map(|(labels, io)| (labels.clone(), value(io)))
            .collect()
    };
    vec![
        Family::new(
            format!("{prefix}_requests"),
            format!("Requests completed {what}, by operation."),
            per_op(|k| Value::Counter(k.ops)),
        ),
        Family::new(
            format!("{prefix}_bytes"),
            format!("Bytes of the requests completed {what}, by operation."),
            per_op(|k| Value::Counter(k.bytes)),
        ),
        Family::new(
            format!("{prefix}_errors"),
            format!("Requests that failed {what}, by operation."),
            per_op(|k| Value::Counter(k.errors)),
        ),
        Family::new(
            format!("{prefix}_request_duration_seconds"),
            format!(
                "Time of the requests {what}, by operation; the rate of the sums over all \
                 operations is iostat's aqu-sz."
            ),
            per_op(latency),
        ),
        Family::new(
            format!("{prefix}_requests_in_flight"),
            format!("Requests started and not finished {what}."),
            per_device(|io| gauge(io.in_flight)),
        ),
        Family::new(
            format!("{prefix}_busy_seconds"),
            format!(
                "Time with at least one request in flight {what}; its rate is iostat's %util / 100."
            ),
            per_device(|io| Value::Seconds(io.busy_ns as f64 / 1e9)),
        ),
    ]
}

const HEALTHS: [ArrayHealth; 6] = [
    ArrayHealth::Clean,
    ArrayHealth::Active,
    ArrayHealth::Degraded,
    ArrayHealth::Resyncing,
    ArrayHealth::Rebuilding,
    ArrayHealth::Failed,
];

const MEMBER_STATES: [MemberState; 7] = [
    MemberState::Active,
    MemberState::Faulty,
    MemberState::Missing,
    MemberState::Rebuilding,
    MemberState::Spare,
    MemberState::Replacing,
    MemberState::ReplacementTarget,
];

fn array_labels(name: &str) -> Labels {
    vec![("array", name.to_string())]
}

fn member_labels(array: &str, member: &str, role: Option<usize>) -> Labels {
    vec![
        ("array", array.to_string()),
        ("member", member.to_string()),
        ("role", role.map(|r| r.to_string()).unwrap_or_default()),
    ]
}

fn gauge(v: u64) -> Value {
    Value::Gauge(i64::try_from(v).unwrap_or(i64::MAX))
}

fn counter(v: u64) -> Value {
    Value::Counter(v)
}

impl Scrape {
    /// Every family, each with the samples of every array.
    fn families(&self) -> Vec<Family> {
        let arrays = &self.arrays;
        let mut families = self.state_families();
        let clients: Vec<(Labels, &IoSnapshot)> = (arrays.iter())
            .filter_map(|(name, s)| Some((array_labels(name), s.client.as_ref()?)))
            .collect();
        families.extend(io_families(
            "raidkit_array",
            "by the array's clients",
            &clients,
        ));
        let members: Vec<(Labels, &IoSnapshot)> = (arrays.iter())
            .flat_map(|(name, s)| {
                (s.members.iter().enumerate()).map(move |(role, io)| {
                    let member = s.member_name(role).unwrap_or_default();
                    (member_labels(name, member, Some(role)), io)
                })
            })
            .collect();
        families.extend(io_families(
            "raidkit_member",
            "by the array to the member",
            &members,
        ));
        families.extend(self.section_families());
        families
    }

    /// Size, health, member states and error counts, the background task.
    fn state_families(&self) -> Vec<Family> {
        let mut info = Vec::new();
        let mut size = Vec::new();
        let mut health = Vec::new();
        let mut states = Vec::new();
        let (mut read_errors, mut write_errors, mut timeouts) =
            (Vec::new(), Vec::new(), Vec::new());
        let (mut task_done, mut task_total) = (Vec::new(), Vec::new());
        let (mut sum_bad, mut sum_checked) = (Vec::new(), Vec::new());
        for (name, s) in &self.arrays {
            let v = &s.status.volume;
            if let Some(c) = &v.checksum {
                sum_bad.push((array_labels(name), counter(c.mismatches)));
                sum_checked.push((array_labels(name), counter(c.verified_blocks)));
            }
            let mut labels = array_labels(name);
            labels.push(("level", v.level.clone()));
            labels.push(("uuid", v.uuid.to_string()));
            info.push((labels, gauge(1)));
            size.push((array_labels(name), gauge(v.size_bytes)));
            for h in HEALTHS {
                let mut labels = array_labels(name);
                labels.push(("health", wire_name(h)));
                health.push((labels, gauge(u64::from(v.health == h))));
            }
            for m in &v.members {
                let labels = member_labels(name, &m.name, m.role);
                for state in MEMBER_STATES {
                    let mut labels = labels.clone();
                    labels.push(("state", wire_name(state)));
                    states.push((labels, gauge(u64::from(m.state == state))));
                }
                read_errors.push((labels.clone(), counter(m.read_errors)));
                write_errors.push((labels.clone(), counter(m.write_errors)));
                timeouts.push((labels, counter(m.timeouts)));
            }
            if let Some(task) = &v.task {
                let mut labels = array_labels(name);
                labels.push(("task", wire_name(task.kind)));
                task_done.push((labels.clone(), gauge(task.done_bytes)));
                task_total.push((labels, gauge(task.total_bytes)));
            }
        }
        vec![
            Family::new("raidkit_array_info", "The arrays served, with their level and UUID.", info),
            Family::new("raidkit_array_size_bytes", "Size of the array as its clients see it.", size),
            Family::new(
                "raidkit_array_health",
                "The array's health: 1 for the current one (clean, active, degraded, resyncing, rebuilding, failed).",
                health,
            ),
            Family::new(
                "raidkit_member_state",
                "Each member's state: 1 for the current one (role empty for spares).",
                states,
            ),
            Family::new("raidkit_member_read_errors", "Read errors of the member (repaired from redundancy).", read_errors),
            Family::new("raidkit_member_write_errors", "Write errors of the member.", write_errors),
            Family::new("raidkit_member_timeouts", "Member requests slower than the I/O timeout.", timeouts),
            Family::new("raidkit_task_done_bytes", "The background task's progress, per member.", task_done),
            Family::new("raidkit_task_total_bytes", "The background task's size, per member.", task_total),
            Family::new(
                "raidkit_checksum_mismatches",
                "4 KiB blocks whose data did not match their checksum (silent corruption), arrays with checksums.",
                sum_bad,
            ),
            Family::new("raidkit_checksum_verified_blocks", "4 KiB blocks read and checked against their checksum.", sum_checked),
        ]
    }

    /// The read cache and the journal.
    fn section_families(&self) -> Vec<Family> {
        let mut f: Vec<Family> = [
            (
                "raidkit_cache_hits",
                "Read-cache block lookups answered from memory.",
            ),
            (
                "raidkit_cache_misses",
                "Read-cache block lookups that read below.",
            ),
            (
                "raidkit_cache_allocated_bytes",
                "Memory the read cache holds.",
            ),
            (
                "raidkit_cache_capacity_bytes",
                "The read cache's memory limit.",
            ),
            ("raidkit_journal_ring_bytes", "Size of the journal's ring."),
            ("raidkit_journal_used_bytes", "Journal ring bytes in use."),
            ("raidkit_journal_commits", "Journal group commits."),
            ("raidkit_journal_checkpoints", "Journal checkpoints."),
            (
                "raidkit_journal_pressure_applies",
                "Write-back applies forced by a full ring.",
            ),
            (
                "raidkit_journal_unapplied_bytes",
                "Write-back: acknowledged bytes not yet on the members.",
            ),
            (
                "raidkit_qos_latency_target_microseconds",
                "The array's latency target (daemon QoS).",
            ),
            (
                "raidkit_qos_throttle_level",
                "How hard the array is throttled for another's latency target (0: not).",
            ),
            (
                "raidkit_qos_throttled_requests",
                "Requests that waited for admission or paused for another array's target.",
            ),
            (
                "raidkit_qos_throttled_seconds",
                "Time the array's requests waited or paused for another array's target.",
            ),
            (
                "raidkit_qos_capped_requests",
                "Requests that waited for the array's max_bandwidth or max_iops.",
            ),
            (
                "raidkit_qos_capped_seconds",
                "Time the array's requests waited for its max_bandwidth or max_iops.",
            ),
            (
                "raidkit_qos_windows_missed",
                "Windows in which more than a tenth of the array's requests missed its target.",
            ),
        ]
        .into_iter()
        .map(|(name, help)| Family::new(name, help, vec![]))
        .collect();
        for (name, s) in &self.arrays {
            let l = || array_labels(name);
            if let Some(c) = &s.status.cache {
                f[0].samples.push((l(), counter(c.hits)));
                f[1].samples.push((l(), counter(c.misses)));
                f[2].samples.push((l(), gauge(c.allocated_bytes)));
                f[3].samples.push((l(), gauge(c.capacity_bytes)));
            }
            if let Some(j) = &s.status.journal {
                f[4].samples.push((l(), gauge(j.ring_bytes)));
                f[5].samples.push((l(), gauge(j.used_bytes)));
                f[6].samples.push((l(), counter(j.commits)));
                f[7].samples.push((l(), counter(j.checkpoints)));
                f[8].samples.push((l(), counter(j.pressure_applies)));
                if let Some(unapplied) = j.unapplied_bytes {
                    f[9].samples.push((l(), gauge(unapplied)));
                }
            }
            if let Some(q) = &s.status.qos {
                if let Some(target) = q.latency_target_us {
                    f[10].samples.push((l(), gauge(target)));
                }
                f[11]
                    .samples
                    .push((l(), gauge(u64::from(q.throttle_level))));
                f[12].samples.push((l(), counter(q.throttled_requests)));
                f[13]
                    .samples
                    .push((l(), Value::Seconds(q.throttled_us as f64 / 1e6)));
                f[14].samples.push((l(), counter(q.capped_requests)));
                f[15]
                    .samples
                    .push((l(), Value::Seconds(q.capped_us as f64 / 1e6)));
                f[16].samples.push((l(), counter(q.windows_missed)));
            }
        }
        f
    }
}

/// A metrics listener's socket and the names, besides its address, a request may address it
/// by (see [`host_allowed`]).
#[derive(Debug)]
pub struct MetricsListener {
    pub socket: std::net::TcpListener,
    pub names: Vec<String>,
}

impl MetricsListener {
    /// `socket`, bound by `host` (what the user wrote before the port: an address or a name),
    /// answering requests addressed by this machine's host name or by `host` when it is a name.
    pub fn new(socket: std::net::TcpListener, host: &str) -> MetricsListener {
        let mut names = Vec::new();
        if let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
            names.push(name.trim().to_string());
        }
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.parse::<IpAddr>().is_err() {
            names.push(host.to_string());
        }
        names.retain(|n| !n.is_empty());
        MetricsListener { socket, names }
    }
}

/// Serves the metrics of `arrays` on `listener` until `shutdown` completes. Must run inside a
/// tokio runtime.
pub async fn serve(
    listener: MetricsListener,
    arrays: Arc<Arrays>,
    log: Log,
    pages: Option<Arc<dyn Pages>>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let MetricsListener { socket, names } = listener;
    let socket = tokio::net::TcpListener::from_std(socket)?;
    let local = socket.local_addr()?;
    let to = Arc::new(Addressed { local, names });
    let accept = || async { socket.accept().await.map(|(stream, _)| stream) };
    let served = |stream| {
        serve_connection(
            stream,
            Arc::clone(&to),
            Arc::clone(&arrays),
            pages.clone(),
            Arc::clone(&log),
        )
    };
    let refuse = crate::server::refuse_busy;
    crate::server::accept_bounded(
        accept,
        CONNECTIONS_MAX,
        "metrics",
        &log,
        shutdown,
        served,
        refuse,
    )
    .await;
    Ok(())
}

/// What a request's `Host` may name: the listener's address, or one of `names`.
#[derive(Debug)]
pub struct Addressed {
    pub local: SocketAddr,
    pub names: Vec<String>,
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    to: Arc<Addressed>,
    arrays: Arc<Arrays>,
    pages: Option<Arc<dyn Pages>>,
    log: Log,
) {
    let service =
        service_fn(move |req| scrape(req, Arc::clone(&to), Arc::clone(&arrays), pages.clone()));
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(REQUEST_BYTES_MAX)
        .serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(CONNECTION_TIMEOUT, conn).await {
        Ok(Ok(())) | Err(_) => {}
        Ok(Err(e)) if e.is_incomplete_message() => {}
        Ok(Err(e)) => log(&format!("metrics connection: {e}")),
    }
}

async fn scrape(
    req: HttpRequest<Incoming>,
    to: Arc<Addressed>,
    arrays: Arc<Arrays>,
    pages: Option<Arc<dyn Pages>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let host = req.headers().get(hyper::header::HOST);
    if let Some(host) = host.filter(|h| !host_allowed(h.as_bytes(), &to)) {
        let host = String::from_utf8_lossy(host.as_bytes());
        let local = to.local;
        let names = to.names.join(", ");
        let message = format!(
            "Host {host:?} refused: this listener answers only requests addressed to \
             {local} by its address, by localhost when it listens on loopback, or by the names \
             {names} (this machine's host name and the name it was bound by), so that a page of \
             another site cannot read it through DNS rebinding; open http://{local}/, or bind \
             the listener by the name you address it with (--metrics NAME:PORT, \
             [daemon] metrics = \"NAME:PORT\")\n"
        );
        return Ok(http_response(421, "text/plain; charset=utf-8", message));
    }
    if let Some(pages) = pages.filter(|_| req.uri().path() != METRICS_PATH) {
        return Ok(crate::pages::serve_page(req, pages).await);
    }
    let (status, content_type, body) = match (req.method().as_str(), req.uri().path()) {
        ("GET", METRICS_PATH) => {
            // Reading a status may touch the members' filesystems: off the runtime's threads.
            match tokio::task::spawn_blocking(move || render(&arrays)).await {
                Ok(text) => (
                    200,
                    prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                    text,
                ),
                Err(e) => (500, "text/plain", format!("metrics failed: {e}\n")),
            }
        }
        (_, METRICS_PATH) => (405, "text/plain", format!("only GET {METRICS_PATH}\n")),
        (_, path) => (
            404,
            "text/plain",
            format!("no {path} here: metrics are at {METRICS_PATH}\n"),
        ),
    };
    Ok(http_response(status, content_type, body))
}

/// True when a request whose `Host` header is `host` is addressed to the listener `to`: the
/// port is the listener's (80 when absent) and the host is its IP address (any IP address when
/// it listens on all of them), or, when it listens on loopback (or on all addresses), a loopback
/// address or `localhost`, or one of its names (this machine's host name, the name it was bound
/// by). Any other name is refused: a DNS-rebinding page's requests carry its own site's name.
pub fn host_allowed(host: &[u8], to: &Addressed) -> bool {
    let local = to.local;
    let Ok(authority) = hyper::http::uri::Authority::try_from(host) else {
        return false;
    };
    if authority.port_u16().unwrap_or(80) != local.port() {
        return false;
    }
    let name = authority.host();
    let bracketed = name.strip_prefix('[').and_then(|n| n.strip_suffix(']'));
    let loopback_ok = local.ip().is_loopback() || local.ip().is_unspecified();
    match bracketed.unwrap_or(name).parse::<IpAddr>() {
        Ok(ip) => {
            ip == local.ip()
                || local.ip().is_unspecified()
                || (local.ip().is_loopback() && ip.is_loopback())
        }
        Err(_) => {
            (loopback_ok && name.eq_ignore_ascii_case("localhost"))
                || to.names.iter().any(|n| n.eq_ignore_ascii_case(name))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_listeners_own_address_and_names_are_hosts_allowed() {
        let to = |local| Addressed {
            local,
            names: Vec::new(),
        };
        let loopback: SocketAddr = "127.0.0.1:9108".parse().unwrap();
        for good in [
            "127.0.0.1:9108",
            "localhost:9108",
            "LocalHost:9108",
            "[::1]:9108",
        ] {
            assert!(host_allowed(good.as_bytes(), &to(loopback)), "{good}");
        }
        for bad in [
            "evil.example:9108",
            "127.0.0.1.nip.io:9108",
            "localhost.evil.example:9108",
            "127.0.0.1:80",
            "127.0.0.1",
            "10.0.0.5:9108",
            "",
            "a b:9108",
        ] {
            assert!(!host_allowed(bad.as_bytes(), &to(loopback)), "{bad}");
        }
        let lan: SocketAddr = "192.168.1.20:9108".parse().unwrap();
        assert!(host_allowed(b"192.168.1.20:9108", &to(lan)));
        assert!(!host_allowed(b"localhost:9108", &to(lan)));
        assert!(!host_allowed(b"127.0.0.1:9108", &to(lan)));
        assert!(!host_allowed(b"nas.lan:9108", &to(lan)));
        let v6: SocketAddr = "[::1]:9108".parse().unwrap();
        assert!(host_allowed(b"[::1]:9108", &to(v6)) && host_allowed(b"localhost:9108", &to(v6)));
        let all: SocketAddr = "0.0.0.0:9108".parse().unwrap();
        assert!(
            host_allowed(b"192.168.1.20:9108", &to(all))
                && host_allowed(b"localhost:9108", &to(all))
        );
        assert!(!host_allowed(b"nas.lan:9108", &to(all)));
        let port80: SocketAddr = "127.0.0.1:80".parse().unwrap();
        assert!(host_allowed(b"127.0.0.1", &to(port80)) && host_allowed(b"localhost", &to(port80)));
        // Its names: this machine's and the one it was bound by, and no other.
        let named = Addressed {
            local: all,
            names: vec!["nas".into(), "nas.lan".into()],
        };
        assert!(host_allowed(b"nas.lan:9108", &named) && host_allowed(b"NAS:9108", &named));
        assert!(!host_allowed(b"nas.evil.example:9108", &named));
        assert!(!host_allowed(b"nas.lan:9109", &named));
    }

    #[test]
    fn the_exposition_names_units_labels_and_histograms() {
        let mut status = crate::status::tests::full();
        status.volume.members[0].name = "a \"quoted\" \\ name".into();
        let mut client = IoSnapshot::default();
        client.write.ops = 3;
        client.write.bytes = 3 * 4096;
        client.write.latency[2] = 3;
        client.write.time_ns = 9_000;
        client.busy_ns = 1_500_000_000;
        let snapshot = Snapshot {
            unix_ms: 1,
            status,
            client: Some(client),
            members: vec![client, IoSnapshot::default()],
        };
        let text = encode(vec![("home".into(), snapshot)]);
        let has = |line: &str| assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        has("# TYPE raidkit_array_requests_total counter");
        has(r#"raidkit_array_requests_total{array="home",op="write"} 3"#);
        has(r#"raidkit_array_bytes_total{array="home",op="write"} 12288"#);
        has(r#"raidkit_array_busy_seconds_total{array="home"} 1.5"#);
        has("# TYPE raidkit_array_request_duration_seconds histogram");
        has(
            r#"raidkit_array_request_duration_seconds_bucket{array="home",op="write",le="2e-06"} 0"#,
        );
        has(
            r#"raidkit_array_request_duration_seconds_bucket{array="home",op="write",le="4e-06"} 3"#,
        );
        has(
            r#"raidkit_array_request_duration_seconds_bucket{array="home",op="write",le="+Inf"} 3"#,
        );
        has(r#"raidkit_array_request_duration_seconds_count{array="home",op="write"} 3"#);
        has(r#"raidkit_array_health{array="home",health="rebuilding"} 1"#);
        has(r#"raidkit_array_health{array="home",health="clean"} 0"#);
        // Label values are escaped.
        has(
            r#"raidkit_member_state{array="home",member="a \"quoted\" \\ name",role="0",state="active"} 1"#,
        );
        has(r#"raidkit_member_requests_total{array="home",member="b",role="1",op="read"} 0"#);
        has(r#"raidkit_journal_unapplied_bytes{array="home"} 1048576"#);
        has(r#"raidkit_qos_latency_target_microseconds{array="home"} 500"#);
        has(r#"raidkit_qos_throttle_level{array="home"} 3"#);
        has(r#"raidkit_qos_throttled_requests_total{array="home"} 15"#);
        has(r#"raidkit_qos_throttled_seconds_total{array="home"} 0.000016"#);
        has(r#"raidkit_qos_windows_missed_total{array="home"} 18"#);
        has(r#"raidkit_qos_capped_requests_total{array="home"} 23"#);
        has(r#"raidkit_qos_capped_seconds_total{array="home"} 0.000024"#);
        has(r#"raidkit_task_done_bytes{array="home",task="replace"} 1048576"#);
        assert!(!text.contains("# EOF"), "Prometheus text, not OpenMetrics");
    }
}

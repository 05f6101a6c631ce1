//! The web dashboard of the arrays one process serves, on the metrics listener at `/`.
//!
//! - [`Dashboard::start`] samples every array of an `admin::server::Arrays` once a
//!   [`SAMPLE_INTERVAL`] on a thread of its own (`Control::snapshot`: counters and status) and
//!   keeps, per array, the last snapshot, the rates since the one before, a ring of
//!   [`history::HISTORY_POINTS`] points for the graphs, and the last [`history::EVENTS_KEPT`]
//!   events of all arrays ([`history`]). The events come from one [`EventSource`]: the
//!   status changes between samples (`service::monitor`'s pure functions: `raidkit serve`,
//!   which has no alerter), or the alerts a process raises, fed through [`Dashboard::tap`]
//!   (the daemon: every alert of its monitor and alerter, `DeviceDisappeared`,
//!   `JournalPressure`, `TestMessage`... included, each once).
//! - [`Dashboard::handle`] answers one HTTP request, whatever server carries it: the page and
//!   its assets, embedded in the binary ([`assets`]); `GET /api/dashboard[?since=MS]`, the JSON
//!   the page polls every second (the status of each array with its `[4/3] [UU_U]` as
//!   `admin::mdstat` writes it, rates, the graph points after `since`, events); and `POST /api/arrays/NAME/ACTION` (fail, add, remove, scrub: the admin
//!   API's bodies and actions), only with the [`token::Token`] in the [`token::TOKEN_HEADER`]
//!   header. Without a token the dashboard is read-only and the page shows no actions.
//!
//! Bounded: memory is the points and events above per array (an array's ring is dropped with
//! the array); connections, body sizes and time are the carrying server's.

pub mod assets;
pub mod history;
pub mod token;

use std::collections::BTreeMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use admin::api::ApiError;
use admin::server::Arrays;
use serde_json::{json, Value};

use crate::history::{ArrayHistory, Events};
use crate::token::Token;

/// How often every array is sampled (and the page polls).
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// Events the JSON carries (newest first).
pub const EVENTS_SERVED: usize = 50;
const _: () = assert!(EVENTS_SERVED <= history::EVENTS_KEPT);
/// The actions the dashboard offers (with a token), as the admin API names them.
pub const ACTIONS: [&str; 4] = ["fail", "add", "remove", "scrub"];

pub use admin::pages::{PageRequest as Request, PageResponse as Response};

fn json_response(status: u16, value: &Value) -> Response {
    Response {
        status,
        content_type: "application/json",
        body: value.to_string().into_bytes(),
        cache: "no-store",
    }
}

fn error_response(e: ApiError) -> Response {
    json_response(e.status, &json!({ "error": e.message }))
}

/// Where the dashboard's events come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventSource {
    /// Computed from the status changes between samples (a process without an alerter).
    StatusChanges,
    /// Only the alerts fed through [`Dashboard::tap`] / [`Dashboard::record`] (the daemon's
    /// alerter): the status changes are not turned into events too, so none shows twice.
    Alerts,
}

struct Shared {
    arrays: Arc<Arrays>,
    token: Option<Token>,
    source: EventSource,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    arrays: BTreeMap<String, ArrayHistory>,
    events: Events,
}

/// The dashboard of one process: its sampling thread and its answers.
pub struct Dashboard {
    shared: Arc<Shared>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Dashboard {
    /// Starts sampling `arrays` (arrays added and removed later are followed). With `token`,
    /// actions are enabled for requests that carry it.
    pub fn start(arrays: Arc<Arrays>, token: Option<Token>) -> Dashboard {
        Dashboard::start_with(arrays, token, EventSource::StatusChanges)
    }

    /// [`Dashboard::start`] with its events from `source`.
    pub fn start_with(arrays: Arc<Arrays>, token: Option<Token>, source: EventSource) -> Dashboard {
        let shared = Arc::new(Shared {
            arrays,
            token,
            source,
            state: Mutex::default(),
        });
        let sampled = Arc::clone(&shared);
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("dashboard".into())
            .spawn(move || loop {
                sampled.sample();
                match stopped.recv_timeout(SAMPLE_INTERVAL) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
            })
            .expect("spawning the dashboard thread");
        Dashboard {
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Keeps `alert` among the events (the oldest dropped past [`history::EVENTS_KEPT`]).
    /// Takes the dashboard's lock for a moment only (never held over I/O).
    pub fn record(&self, alert: &alerts::Alert) {
        self.shared.record(alert);
    }

    /// A tap for `alerts::Alerter::tap` that [`Dashboard::record`]s every alert raised; it
    /// does nothing once the dashboard is dropped.
    pub fn tap(&self) -> alerts::Tap {
        let shared: Weak<Shared> = Arc::downgrade(&self.shared);
        Arc::new(move |alert: &alerts::Alert| {
            if let Some(shared) = shared.upgrade() {
                shared.record(alert);
            }
        })
    }

    /// True when actions are enabled (a token was given).
    pub fn actions_enabled(&self) -> bool {
        self.shared.token.is_some()
    }

    /// Answers one request. May block (an action writes superblocks, an `add` may open a
    /// remote member): call it on a blocking thread.
    pub fn handle(&self, request: &Request) -> Response {
        let Request { method, path, .. } = *request;
        if let Some(asset) = assets::find(path) {
            return match method {
                "GET" | "HEAD" => Response {
                    status: 200,
                    content_type: asset.content_type,
                    body: asset.body.to_vec(),
                    cache: "no-cache",
                },
                _ => error_response(not_allowed(method, path, "GET")),
            };
        }
        if path == "/api/dashboard" {
            return match method {
                "GET" => json_response(200, &self.shared.json(since(request.query))),
                _ => error_response(not_allowed(method, path, "GET")),
            };
        }
        if path == "/api/unlock" {
            return match method {
                "POST" => (self
                    .shared
                    .allowed(request)
                    .map(|()| json_response(200, &json!({ "ok": true }))))
                .unwrap_or_else(error_response),
                _ => error_response(not_allowed(method, path, "POST")),
            };
        }
        if let Some(rest) = path.strip_prefix("/api/arrays/") {
            return match method {
                "POST" => self
                    .shared
                    .act(rest, request)
                    .unwrap_or_else(error_response),
                _ => error_response(not_allowed(method, path, "POST")),
            };
        }
        error_response(ApiError::new(404, format!("no page {path}")))
    }
}

impl admin::pages::Pages for Dashboard {
    fn token_header(&self) -> &'static str {
        token::TOKEN_HEADER
    }

    fn answer(&self, request: &Request) -> Response {
        self.handle(request)
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn not_allowed(method: &str, path: &str, allowed: &str) -> ApiError {
    ApiError::new(
        405,
        format!("{method} is not allowed on {path} (use {allowed})"),
    )
}

fn severity(severity: alerts::Severity) -> &'static str {
    match severity {
        alerts::Severity::Critical => "critical",
        alerts::Severity::Warning => "warning",
        alerts::Severity::Info => "info",
    }
}

/// `since=MS` of a query; 0 (everything) when absent or not a number.
fn since(query: Option<&str>) -> u64 {
    let pairs = query.unwrap_or("").split('&');
    let value = pairs.filter_map(|p| p.strip_prefix("since=")).next();
    value.and_then(|v| v.parse().ok()).unwrap_or(0)
}

impl Shared {
    fn record(&self, alert: &alerts::Alert) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.events.push(alert.clone());
    }

    /// One sample of every array: snapshots first (outside the lock), then the rings.
    fn sample(&self) {
        let taken: Vec<(String, Option<admin::stats::Snapshot>)> = (self.arrays.all().into_iter())
            .map(|(name, control)| (name, control.snapshot().ok()))
            .collect();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state
            .arrays
            .retain(|name, _| taken.iter().any(|(n, _)| n == name));
        for (name, snapshot) in taken {
            let Some(snapshot) = snapshot else { continue };
            let events = state.arrays.entry(name).or_default().sample(snapshot);
            if self.source == EventSource::StatusChanges {
                for event in events {
                    state.events.push(event);
                }
            }
        }
    }

    fn json(&self, since_ms: u64) -> Value {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let arrays: Vec<Value> = (state.arrays.iter())
            .filter_map(|(name, history)| {
                let last = history.last()?;
                Some(json!({
                    "name": name,
                    "unix_ms": last.unix_ms,
                    "status": last.status,
                    "sync": admin::mdstat::sync_summary(&last.status.volume.members),
                    "client": history.client_rates(),
                    "members": history.member_rates(),
                    "history": history.columns_since(since_ms),
                }))
            })
            .collect();
        let events: Vec<Value> = (state.events.newest_first().take(EVENTS_SERVED))
            .map(|alert| {
                let mut event = json!(alert);
                event["severity"] = json!(severity(alert.event.severity()));
                event
            })
            .collect();
        json!({
            "unix_ms": admin::stats::unix_ms(),
            "version": env!("CARGO_PKG_VERSION"),
            "interval_ms": SAMPLE_INTERVAL.as_millis() as u64,
            "history_points": history::HISTORY_POINTS,
            "actions": self.token.is_some(),
            "arrays": arrays,
            "events": events,
        })
    }

    /// `NAME/ACTION`: the admin API's action on array NAME, if the token allows it.
    fn act(&self, rest: &str, request: &Request) -> Result<Response, ApiError> {
        self.allowed(request)?;
        let (name, action) = rest
            .rsplit_once('/')
            .ok_or_else(|| ApiError::new(404, format!("no page {}", request.path)))?;
        if !ACTIONS.contains(&action) {
            return Err(ApiError::new(
                404,
                format!(
                    "no action {action:?} (the dashboard offers {})",
                    ACTIONS.join(", ")
                ),
            ));
        }
        let name = percent_decode(name)?;
        let admin_request = admin::api::parse("POST", &format!("/v1/{action}"), request.body)?;
        let control = self.arrays.pick(Some(&name))?;
        let answer = control.handle(admin_request)?;
        Ok(json_response(200, &answer))
    }

    /// Ok when actions are enabled and `request` carries the token.
    fn allowed(&self, request: &Request) -> Result<(), ApiError> {
        let Some(token) = &self.token else {
            return Err(ApiError::new(
                403,
                "the dashboard is read-only: actions need a token (raidkit serve \
                 --dashboard-token-file FILE)",
            ));
        };
        if !request.token.is_some_and(|given| token.matches(given)) {
            return Err(ApiError::new(
                401,
                format!("a wrong or missing token (header {})", token::TOKEN_HEADER),
            ));
        }
        Ok(())
    }
}

/// `%XX` escapes decoded (an array name in a path); anything not UTF-8 is refused.
fn percent_decode(text: &str) -> Result<String, ApiError> {
    let bad = || ApiError::bad_request(format!("bad escape in {text:?}"));
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        rest = tail;
        if b != b'%' {
            bytes.push(b);
            continue;
        }
        let hex = rest.get(..2).ok_or_else(bad)?;
        let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
        bytes.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
        rest = &rest[2..];
    }
    String::from_utf8(bytes).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_decode_and_bad_ones_are_refused() {
        assert_eq!(percent_decode("home").unwrap(), "home");
        assert_eq!(percent_decode("my%20array%2F2").unwrap(), "my array/2");
        assert_eq!(percent_decode("caf%C3%A9").unwrap(), "café");
        for bad in ["a%2", "a%zz", "%FF", "%"] {
            assert_eq!(percent_decode(bad).unwrap_err().status, 400, "{bad}");
        }
    }

    #[test]
    fn since_reads_the_query() {
        assert_eq!(since(None), 0);
        assert_eq!(since(Some("since=1234")), 1234);
        assert_eq!(since(Some("x=1&since=99")), 99);
        assert_eq!(since(Some("since=soon")), 0);
    }
}

//! The admin API: what each endpoint takes, parsed without I/O.
//!
//! | method | path | body | does |
//! |---|---|---|---|
//! | GET | `/v1/status` | — | the volume's status (JSON) |
//! | GET | `/v1/stats` | — | I/O counters of the array and its members, with the status ([`crate::stats::Snapshot`]) |
//! | POST | `/v1/fail` | `{"member": M}` | mark M faulty |
//! | POST | `/v1/remove` | `{"member": M}` | remove a faulty or spare M |
//! | POST | `/v1/add` | `{"member": M}` | open M on the server; spare, or rebuild if degraded |
//! | POST | `/v1/replace` | `{"member": M, "with": N}` | fill N while M serves, then swap |
//! | POST | `/v1/scrub` | `{"repair": bool}` | start a scrub (check, or repair) |
//! | POST | `/v1/speed` | `{"min": B, "max": B}` | background rate limits, bytes/s per member |
//! | POST | `/v1/wait` | `{"timeout_secs": S}` | wait (≤ 10 s) until no background work |
//!
//! Each path acts on the only array the socket serves; `/v1/arrays/NAME/status` (and so on for
//! every endpoint) names one of several ([`route`]).
//!
//! Three requests are about the whole process rather than one array ([`parse_process`]):
//!
//! | method | path | body | does |
//! |---|---|---|---|
//! | GET | `/v1/arrays` | — | `{"arrays": {NAME: status, ...}}`: every array's status |
//! | POST | `/v1/monitor/test` | — | raise `TestMessage` for every array (a daemon's alerts) |
//! | POST | `/v1/reload` | — | re-read a daemon's configuration file and apply what changed |
//!
//! Success: 200 with a JSON object. Failure: a 4xx/5xx status with `{"error": "..."}`.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;

/// Longest a single `/v1/wait` request may block (clients loop for longer waits).
pub const WAIT_SECS_MAX: u64 = 10;
/// Longest member name accepted in a request (URIs with socket paths fit easily).
pub const MEMBER_NAME_BYTES_MAX: usize = 4096;

/// One admin request, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Status,
    Stats,
    Fail { member: String },
    Remove { member: String },
    Add { member: String },
    Replace { member: String, with: String },
    Scrub { repair: bool },
    Speed { min: Option<u64>, max: Option<u64> },
    Wait { timeout: Duration },
}

/// A refused or failed request: an HTTP status and a message for the operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, message: impl Into<String>) -> ApiError {
        assert!(
            (400..600).contains(&status),
            "not an error status: {status}"
        );
        ApiError {
            status,
            message: message.into(),
        }
    }
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, message)
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (HTTP {})", self.message, self.status)
    }
}

impl std::error::Error for ApiError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberBody {
    member: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplaceBody {
    member: String,
    with: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScrubBody {
    #[serde(default)]
    repair: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpeedBody {
    min: Option<u64>,
    max: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitBody {
    timeout_secs: u64,
}

/// A request about the whole process, not one of its arrays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessRequest {
    /// Every array's status, by name.
    AllStatus,
    /// Raise a `TestMessage` alert for every array (`raidkit monitor --test`).
    TestAlerts,
    /// Re-read the configuration file and apply what changed (`raidkit reload`).
    Reload,
}

/// The path of every array's status.
pub const ALL_STATUS_PATH: &str = "/v1/arrays";
/// The path that raises a test alert for every array.
pub const TEST_ALERTS_PATH: &str = "/v1/monitor/test";
/// The path that reloads a daemon's configuration.
pub const RELOAD_PATH: &str = "/v1/reload";

/// Parses a request about the whole process; `None` when the path is not one of those.
pub fn parse_process(method: &str, path: &str) -> Option<Result<ProcessRequest, ApiError>> {
    let (request, allowed) = match path {
        ALL_STATUS_PATH => (ProcessRequest::AllStatus, "GET"),
        TEST_ALERTS_PATH => (ProcessRequest::TestAlerts, "POST"),
        RELOAD_PATH => (ProcessRequest::Reload, "POST"),
        _ => return None,
    };
    if method != allowed {
        return Some(Err(ApiError::new(
            405,
            format!("{method} is not allowed on {path} (use {allowed})"),
        )));
    }
    Some(Ok(request))
}

/// The prefix of a path that names its array: `/v1/arrays/NAME/ENDPOINT`.
pub const ARRAY_PATH_PREFIX: &str = "/v1/arrays/";

/// The array a request path names, if any, and the endpoint's path: `/v1/arrays/home/status`
/// is `(Some("home"), "/v1/status")`; a path without a name is `(None, path)`, for the only
/// array.
pub fn route(path: &str) -> (Option<&str>, Cow<'_, str>) {
    let Some(named) = path.strip_prefix(ARRAY_PATH_PREFIX) else {
        return (None, Cow::Borrowed(path));
    };
    let (name, endpoint) = named.split_once('/').unwrap_or((named, ""));
    (Some(name), Cow::Owned(format!("/v1/{endpoint}")))
}

/// Parses one request. `body` is the whole request body (already bounded by the server).
pub fn parse(method: &str, path: &str, body: &[u8]) -> Result<Request, ApiError> {
    match (method, path) {
        ("GET", "/v1/status") => Ok(Request::Status),
        ("GET", "/v1/stats") => Ok(Request::Stats),
        ("POST", p) if is_post_path(p) => parse_post(path, body),
        (_, p) if is_get_path(p) || is_post_path(p) => Err(ApiError::new(
            405,
            format!("{method} is not allowed on {path}"),
        )),
        _ => Err(ApiError::new(404, format!("no endpoint {path}"))),
    }
}

fn is_get_path(path: &str) -> bool {
    matches!(path, "/v1/status" | "/v1/stats")
}

fn is_post_path(path: &str) -> bool {
    matches!(
        path,
        "/v1/fail"
            | "/v1/remove"
            | "/v1/add"
            | "/v1/replace"
            | "/v1/scrub"
            | "/v1/speed"
            | "/v1/wait"
    )
}

fn parse_post(path: &str, body: &[u8]) -> Result<Request, ApiError> {
    let request = match path {
        "/v1/fail" => Request::Fail {
            member: member(json::<MemberBody>(path, body)?.member)?,
        },
        "/v1/remove" => Request::Remove {
            member: member(json::<MemberBody>(path, body)?.member)?,
        },
        "/v1/add" => Request::Add {
            member: member(json::<MemberBody>(path, body)?.member)?,
        },
        "/v1/replace" => {
            let b = json::<ReplaceBody>(path, body)?;
            Request::Replace {
                member: member(b.member)?,
                with: member(b.with)?,
            }
        }
        "/v1/scrub" => Request::Scrub {
            repair: json::<ScrubBody>(path, body)?.repair,
        },
        "/v1/speed" => speed(json::<SpeedBody>(path, body)?)?,
        "/v1/wait" => Request::Wait {
            timeout: Duration::from_secs(
                json::<WaitBody>(path, body)?
                    .timeout_secs
                    .min(WAIT_SECS_MAX),
            ),
        },
        _ => return Err(ApiError::new(404, format!("no endpoint {path}"))),
    };
    Ok(request)
}

fn json<'a, T: Deserialize<'a>>(path: &str, body: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("{path}: invalid JSON body: {e}")))
}

fn member(name: String) -> Result<String, ApiError> {
    if name.is_empty() {
        return Err(ApiError::bad_request("member name is empty"));
    }
    if name.len() > MEMBER_NAME_BYTES_MAX {
        return Err(ApiError::bad_request(format!(
            "member name is {} bytes (at most {MEMBER_NAME_BYTES_MAX})",
            name.len()
        )));
    }
    Ok(name)
}

fn speed(b: SpeedBody) -> Result<Request, ApiError> {
    if b.min.is_none() && b.max.is_none() {
        return Err(ApiError::bad_request("/v1/speed: give min, max or both"));
    }
    if b.min == Some(0) || b.max == Some(0) {
        return Err(ApiError::bad_request(
            "/v1/speed: a speed limit must be at least 1 byte/s",
        ));
    }
    if let (Some(min), Some(max)) = (b.min, b.max) {
        if min > max {
            return Err(ApiError::bad_request(format!(
                "/v1/speed: min ({min} bytes/s) is above max ({max} bytes/s)"
            )));
        }
    }
    Ok(Request::Speed {
        min: b.min,
        max: b.max,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_endpoint() {
        assert_eq!(parse("GET", "/v1/status", b"").unwrap(), Request::Status);
        assert_eq!(parse("GET", "/v1/stats", b"").unwrap(), Request::Stats);
        assert_eq!(parse("POST", "/v1/stats", b"").unwrap_err().status, 405);
        assert_eq!(
            parse("POST", "/v1/fail", br#"{"member":"a.img"}"#).unwrap(),
            Request::Fail {
                member: "a.img".into()
            }
        );
        assert_eq!(
            parse("POST", "/v1/replace", br#"{"member":"a","with":"b"}"#).unwrap(),
            Request::Replace {
                member: "a".into(),
                with: "b".into()
            }
        );
        assert_eq!(
            parse("POST", "/v1/scrub", b"{}").unwrap(),
            Request::Scrub { repair: false }
        );
        assert_eq!(
            parse("POST", "/v1/speed", br#"{"max":1048576}"#).unwrap(),
            Request::Speed {
                min: None,
                max: Some(1 << 20)
            }
        );
        assert_eq!(
            parse("POST", "/v1/wait", br#"{"timeout_secs":999}"#).unwrap(),
            Request::Wait {
                timeout: Duration::from_secs(WAIT_SECS_MAX)
            }
        );
    }

    #[test]
    fn refuses_bad_input_with_a_status() {
        let cases: [(&str, &str, &[u8], u16); 9] = [
            ("GET", "/v2/status", b"", 404),
            ("POST", "/v1/status", b"", 405),
            ("GET", "/v1/fail", b"", 405),
            ("POST", "/v1/fail", b"{", 400),
            ("POST", "/v1/fail", b"\xff\xfe", 400),
            ("POST", "/v1/fail", br#"{"member":""}"#, 400),
            ("POST", "/v1/fail", br#"{"member":"a","x":1}"#, 400),
            ("POST", "/v1/speed", br#"{"min":5,"max":4}"#, 400),
            ("POST", "/v1/speed", b"{}", 400),
        ];
        for (method, path, body, status) in cases {
            let e = parse(method, path, body).unwrap_err();
            assert_eq!(e.status, status, "{method} {path} {body:?}: {e}");
            assert!(!e.message.is_empty());
        }
    }

    #[test]
    fn parses_the_process_requests() {
        assert_eq!(
            parse_process("GET", "/v1/arrays"),
            Some(Ok(ProcessRequest::AllStatus))
        );
        assert_eq!(
            parse_process("POST", "/v1/monitor/test"),
            Some(Ok(ProcessRequest::TestAlerts))
        );
        assert_eq!(
            parse_process("POST", "/v1/reload"),
            Some(Ok(ProcessRequest::Reload))
        );
        assert_eq!(
            parse_process("GET", "/v1/reload")
                .unwrap()
                .unwrap_err()
                .status,
            405
        );
        assert_eq!(
            parse_process("POST", "/v1/arrays")
                .unwrap()
                .unwrap_err()
                .status,
            405
        );
        assert_eq!(
            parse_process("GET", "/v1/monitor/test")
                .unwrap()
                .unwrap_err()
                .status,
            405
        );
        assert_eq!(parse_process("GET", "/v1/status"), None);
        // A path naming an array is that array's, never the process's.
        assert_eq!(parse_process("GET", "/v1/arrays/home/status"), None);
        assert_eq!(parse_process("GET", "/v1/arrays/"), None);
    }

    #[test]
    fn routes_a_path_to_its_array() {
        assert_eq!(route("/v1/status"), (None, Cow::Borrowed("/v1/status")));
        assert_eq!(route("/v1/arrays/home/status").0, Some("home"));
        assert_eq!(route("/v1/arrays/home/status").1, "/v1/status");
        assert_eq!(route("/v1/arrays/home/fail").1, "/v1/fail");
        // No endpoint: a path that parses to "no endpoint".
        let (name, endpoint) = route("/v1/arrays/home");
        assert_eq!((name, endpoint.as_ref()), (Some("home"), "/v1/"));
        assert_eq!(parse("GET", &endpoint, b"").unwrap_err().status, 404);
    }
}

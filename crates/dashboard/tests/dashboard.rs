//! The dashboard over a scripted array: the history ring's bound and rates, the events between
//! samples, the JSON the page polls, the assets, and the token's guard on actions.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use admin::api::{ApiError, Request as AdminRequest};
use admin::server::{Arrays, Control};
use admin::stats::Snapshot;
use admin::status::Status;
use alerts::{Alert, Event};
use dashboard::history::{ArrayHistory, Events, EVENTS_KEPT, HISTORY_POINTS};
use dashboard::token::Token;
use dashboard::{Dashboard, EventSource, Request, Response};
use iostats::IoSnapshot;
use serde_json::{json, Value};
use volume::VolumeStatus;

const TOKEN: &str = "0123456789abcdef-token";

fn status(states: &[&str], task: Value) -> Status {
    let members: Vec<Value> = (states.iter().enumerate())
        .map(|(role, state)| {
            json!({
                "role": role, "name": format!("/m/{role}.img"), "state": state,
                "read_errors": 0, "write_errors": 0, "timeouts": 0, "no_space_errors": 0,
                "stuck_calls": 0, "abandoned_calls": 0, "filesystem": null,
                "rebuild_offset_bytes": null,
            })
        })
        .collect();
    let degraded = states.iter().any(|s| *s != "active");
    let volume: VolumeStatus = serde_json::from_value(json!({
        "name": "home", "uuid": "6a0f8a5e-2f0e-4c8b-9a53-0c1b2d3e4f50", "level": "raid5",
        "chunk_bytes": 65536, "size_bytes": 3u64 << 30,
        "health": if degraded { "degraded" } else { "active" },
        "members": members, "task": task,
        "speed_limits": {"min_bytes_per_sec": 1048576, "max_bytes_per_sec": 209715200},
        "last_scrub": null, "events": 7, "bitmap": null, "unsynced_bytes": 0, "at_risk": null,
    }))
    .unwrap();
    Status {
        volume,
        journal: None,
        cache: None,
        qos: None,
    }
}

/// Client counters after `secs` seconds of 100 reads and 50 writes of 4 KiB a second.
fn counters(secs: u64) -> IoSnapshot {
    let mut c = IoSnapshot {
        at_ns: secs * 1_000_000_000,
        ..IoSnapshot::default()
    };
    c.read.ops = 100 * secs;
    c.read.bytes = 100 * secs * 4096;
    c.read.time_ns = 100 * secs * 2_000_000; // 2 ms each
    c.write.ops = 50 * secs;
    c.write.bytes = 50 * secs * 4096;
    c.busy_ns = secs * 500_000_000;
    c
}

fn snapshot(secs: u64, states: &[&str]) -> Snapshot {
    Snapshot {
        unix_ms: 1_700_000_000_000 + secs * 1000,
        status: status(states, Value::Null),
        client: Some(counters(secs)),
        members: vec![counters(secs); states.len()],
    }
}

#[test]
fn the_ring_keeps_the_last_points_with_their_rates() {
    let mut history = ArrayHistory::default();
    let first = history.sample(snapshot(0, &["active"; 3]));
    let names: Vec<&str> = first.iter().map(|a| a.event.name()).collect();
    assert_eq!(
        names,
        ["NewArray"],
        "what the monitor says of an array first seen"
    );
    assert!(history.is_empty(), "rates need two samples");
    for secs in 1..=(HISTORY_POINTS as u64 + 100) {
        assert!(history.sample(snapshot(secs, &["active"; 3])).is_empty());
    }
    assert_eq!(history.len(), HISTORY_POINTS, "bounded");
    let all = history.columns_since(0);
    assert_eq!(all.t.len(), HISTORY_POINTS);
    assert_eq!(all.t[0], 1_700_000_000.0 + 101.0, "the oldest were dropped");
    assert_eq!(all.read_ops_per_sec.last(), Some(&100.0));
    assert_eq!(all.write_bytes_per_sec.last(), Some(&(50.0 * 4096.0)));
    assert_eq!(all.read_await_ms.last(), Some(&2.0));
    assert_eq!(all.util_percent.last(), Some(&50.0));
    let since = (1_700_000_000 + HISTORY_POINTS as u64 + 98) * 1000;
    assert_eq!(
        history.columns_since(since).t.len(),
        2,
        "only points after since"
    );
    assert_eq!(history.member_rates().len(), 3);
    assert_eq!(history.member_rates()[2].read.ops_per_sec, 100.0);
}

#[test]
fn a_failed_member_is_an_event() {
    let mut history = ArrayHistory::default();
    history.sample(snapshot(0, &["active"; 3]));
    let events = history.sample(snapshot(1, &["active", "faulty", "active"]));
    let names: Vec<&str> = events.iter().map(|a| a.event.name()).collect();
    assert_eq!(names, ["Fail", "DegradedArray"]);
    assert_eq!(events[0].member.as_deref(), Some("/m/1.img"));
}

#[test]
fn the_events_kept_are_bounded_and_newest_first() {
    let mut events = Events::default();
    for n in 0..EVENTS_KEPT + 50 {
        events.push(Alert::new(Event::TestMessage, "home", None, n.to_string()));
    }
    assert_eq!(events.len(), EVENTS_KEPT);
    let newest: Vec<&str> = events.newest_first().map(|a| a.message.as_str()).collect();
    assert_eq!(newest[0], (EVENTS_KEPT + 49).to_string());
    assert_eq!(newest[EVENTS_KEPT - 1], "50");
}

/// An array whose snapshots the test scripts; actions are recorded.
struct Scripted {
    snapshot: Mutex<Snapshot>,
    done: Mutex<Vec<AdminRequest>>,
}

impl Control for Scripted {
    fn handle(&self, request: AdminRequest) -> Result<Value, ApiError> {
        self.done.lock().unwrap().push(request);
        Ok(json!({"ok": true, "message": "done"}))
    }
    fn snapshot(&self) -> Result<Snapshot, ApiError> {
        Ok(self.snapshot.lock().unwrap().clone())
    }
}

fn served(token: Option<&str>) -> (Dashboard, Arc<Scripted>) {
    let array = Arc::new(Scripted {
        snapshot: Mutex::new(snapshot(0, &["active"; 4])),
        done: Mutex::default(),
    });
    let arrays = Arc::new(Arrays::default());
    assert!(arrays.insert("home", Arc::clone(&array) as Arc<dyn Control>));
    let token = token.map(|t| Token::new(t).unwrap());
    (Dashboard::start(arrays, token), array)
}

fn get(dashboard: &Dashboard, path: &str, query: Option<&str>) -> Response {
    dashboard.handle(&Request {
        method: "GET",
        path,
        query,
        token: None,
        body: b"",
    })
}

fn post(dashboard: &Dashboard, path: &str, token: Option<&str>, body: &str) -> Response {
    dashboard.handle(&Request {
        method: "POST",
        path,
        query: None,
        token: token.map(str::as_bytes),
        body: body.as_bytes(),
    })
}

fn json_of(response: &Response) -> Value {
    serde_json::from_slice(&response.body).unwrap()
}

/// Polls the JSON until `done` holds (the sampler runs once a second).
fn poll_until(dashboard: &Dashboard, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = json_of(&get(dashboard, "/api/dashboard", None));
        if done(&answer) {
            return answer;
        }
        assert!(Instant::now() < deadline, "never: {answer}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_page_and_the_json_are_served() {
    let (dashboard, array) = served(None);
    let page = get(&dashboard, "/", None);
    assert_eq!(
        (page.status, page.content_type),
        (200, "text/html; charset=utf-8")
    );
    let html = String::from_utf8(page.body).unwrap();
    for asset in [
        "/assets/dashboard.js",
        "/assets/dashboard.css",
        "/assets/uPlot.iife.min.js",
    ] {
        assert!(html.contains(asset), "{asset}");
        assert_eq!(get(&dashboard, asset, None).status, 200, "{asset}");
    }
    assert_eq!(get(&dashboard, "/nope", None).status, 404);
    assert_eq!(post(&dashboard, "/", None, "").status, 405);

    let first = poll_until(&dashboard, |d| {
        d["arrays"].as_array().is_some_and(|a| !a.is_empty())
    });
    assert_eq!(first["actions"], false);
    assert_eq!(first["arrays"][0]["name"], "home");
    assert_eq!(first["arrays"][0]["status"]["level"], "raid5");
    assert_eq!(first["arrays"][0]["sync"], "[4/4] [UUUU]");
    assert_eq!(first["events"][0]["event"], "NewArray");
    assert_eq!(first["events"][0]["severity"], "info");

    // A member fails and the counters move on: the next sample has a point and the events.
    *array.snapshot.lock().unwrap() = snapshot(1, &["active", "active", "faulty", "active"]);
    let after = poll_until(&dashboard, |d| d["events"][0]["event"] == "DegradedArray");
    let a = &after["arrays"][0];
    assert_eq!(a["status"]["members"][2]["state"], "faulty");
    assert_eq!(a["status"]["health"], "degraded");
    assert_eq!(a["sync"], "[4/3] [UU_U]");
    assert_eq!(a["history"]["read_ops_per_sec"], json!([100.0]));
    assert_eq!(a["client"]["write"]["ops_per_sec"], 50.0);
    assert_eq!(after["events"][1]["event"], "Fail");
    assert_eq!(after["events"][1]["severity"], "critical");
    let since = a["history"]["t"][0].as_f64().unwrap() * 1000.0;
    let later = get(
        &dashboard,
        "/api/dashboard",
        Some(&format!("since={since}")),
    );
    assert_eq!(json_of(&later)["arrays"][0]["history"]["t"], json!([]));
}

#[test]
fn fed_alerts_are_the_only_events_and_each_shows_once() {
    let array = Arc::new(Scripted {
        snapshot: Mutex::new(snapshot(0, &["active"; 4])),
        done: Mutex::default(),
    });
    let arrays = Arc::new(Arrays::default());
    assert!(arrays.insert("home", Arc::clone(&array) as Arc<dyn Control>));
    let dashboard = Dashboard::start_with(arrays, None, EventSource::Alerts);
    let tap = dashboard.tap();
    tap(&Alert::new(Event::TestMessage, "home", None, "a test"));
    tap(&Alert::new(
        Event::JournalPressure,
        "media",
        None,
        "journal 90% full",
    ));
    // The member fails: the status changes, and the alerter raises its Fail (once).
    *array.snapshot.lock().unwrap() = snapshot(1, &["active", "active", "faulty", "active"]);
    poll_until(&dashboard, |d| {
        d["arrays"][0]["status"]["members"][2]["state"] == "faulty"
    });
    dashboard.record(&Alert::new(Event::Fail, "home", Some("/m/2.img"), "failed"));
    // Two more samples: the status diff (Fail, DegradedArray) must not add events.
    std::thread::sleep(dashboard::SAMPLE_INTERVAL * 2 + Duration::from_millis(200));
    let state = json_of(&get(&dashboard, "/api/dashboard", None));
    let events: Vec<(&str, &str)> = (state["events"].as_array().unwrap().iter())
        .map(|e| (e["event"].as_str().unwrap(), e["array"].as_str().unwrap()))
        .collect();
    assert_eq!(
        events,
        [
            ("Fail", "home"),
            ("JournalPressure", "media"),
            ("TestMessage", "home")
        ],
        "newest first, no NewArray/DegradedArray from the status, each once"
    );
    assert_eq!(state["events"][0]["severity"], "critical");

    // Once the dashboard is gone, its tap does nothing (and does not keep it alive).
    drop(dashboard);
    tap(&Alert::new(Event::TestMessage, "home", None, "after"));
}

#[test]
fn actions_need_the_token() {
    let (read_only, array) = served(None);
    let refused = post(
        &read_only,
        "/api/arrays/home/fail",
        Some(TOKEN),
        r#"{"member":"a"}"#,
    );
    assert_eq!(refused.status, 403, "read-only without a token configured");
    assert!(String::from_utf8_lossy(&refused.body).contains("--dashboard-token-file"));
    assert_eq!(
        post(&read_only, "/api/unlock", Some(TOKEN), "{}").status,
        403
    );
    assert!(array.done.lock().unwrap().is_empty());

    let (dashboard, array) = served(Some(TOKEN));
    let fail = r#"{"member":"/m/1.img"}"#;
    assert_eq!(
        post(&dashboard, "/api/arrays/home/fail", None, fail).status,
        401
    );
    let wrong = "0123456789abcdef-tokem";
    assert_eq!(
        post(&dashboard, "/api/arrays/home/fail", Some(wrong), fail).status,
        401
    );
    assert_eq!(
        post(&dashboard, "/api/unlock", Some(wrong), "{}").status,
        401
    );
    assert!(
        array.done.lock().unwrap().is_empty(),
        "nothing done without the token"
    );

    assert_eq!(
        post(&dashboard, "/api/unlock", Some(TOKEN), "{}").status,
        200
    );
    let done = post(&dashboard, "/api/arrays/home/fail", Some(TOKEN), fail);
    assert_eq!(done.status, 200, "{}", String::from_utf8_lossy(&done.body));
    let scrub = post(
        &dashboard,
        "/api/arrays/home/scrub",
        Some(TOKEN),
        r#"{"repair":false}"#,
    );
    assert_eq!(scrub.status, 200);
    assert_eq!(
        *array.done.lock().unwrap(),
        [
            AdminRequest::Fail {
                member: "/m/1.img".into()
            },
            AdminRequest::Scrub { repair: false }
        ]
    );
    // Only the dashboard's actions, on arrays that exist, with the admin API's bodies.
    let speed = post(
        &dashboard,
        "/api/arrays/home/speed",
        Some(TOKEN),
        r#"{"max":1}"#,
    );
    assert_eq!(speed.status, 404);
    assert_eq!(
        post(&dashboard, "/api/arrays/away/fail", Some(TOKEN), fail).status,
        404
    );
    let bad = post(
        &dashboard,
        "/api/arrays/home/fail",
        Some(TOKEN),
        r#"{"x":1}"#,
    );
    assert_eq!(bad.status, 400);
    assert_eq!(get(&dashboard, "/api/arrays/home/fail", None).status, 405);
    assert_eq!(array.done.lock().unwrap().len(), 2);
    let answer = json_of(&get(&dashboard, "/api/dashboard", None));
    assert_eq!(answer["actions"], true);
}

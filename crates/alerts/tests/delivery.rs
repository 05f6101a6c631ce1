//! Alerts reach each kind of target — a program, mail, a webhook, syslog — quickly, failed
//! deliveries are retried and then logged, and nothing a target does can block the caller.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alerts::{Alert, Alerter, Event, Log, Targets, QUEUE_ALERTS};

/// A log that keeps its lines for the test to read.
fn log() -> (Log, Arc<Mutex<Vec<String>>>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&lines);
    (
        Arc::new(move |line: &str| kept.lock().unwrap().push(line.to_string())),
        lines,
    )
}

fn logged(lines: &Mutex<Vec<String>>, needle: &str) -> bool {
    lines.lock().unwrap().iter().any(|l| l.contains(needle))
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Polls until `path` holds `needle` (or 5 s passed); the time it took.
fn wait_for_file(path: &Path, needle: &str) -> Duration {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{needle:?} not in {path:?}: {text:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn quick(targets: Targets) -> Targets {
    Targets {
        attempts: 2,
        backoff: Duration::from_millis(50),
        timeout: Duration::from_secs(5),
        ..targets
    }
}

#[test]
fn a_program_is_run_with_event_array_and_member_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("calls");
    let program = script(
        dir.path(),
        "alert",
        &format!(
            "echo \"$@|$RAIDKIT_MESSAGE|$RAIDKIT_READ_ERRORS\" >> {}",
            out.display()
        ),
    );
    let (log, lines) = log();
    let alerter = Alerter::start(
        &quick(Targets {
            program: Some(program),
            ..Targets::default()
        }),
        log,
    );
    assert_eq!(alerter.target_kinds(), ["program"]);
    let alert = Alert::new(
        Event::Fail,
        "home",
        Some("/dev/sdb"),
        "21 read errors in 60 s",
    )
    .with("read_errors", 21);
    alerter.raise(alert);
    let took = wait_for_file(&out, "Fail home /dev/sdb|21 read errors in 60 s|21");
    assert!(
        took < Duration::from_secs(1),
        "the program ran after {took:?}"
    );
    alerter.raise(Alert::new(
        Event::DegradedArray,
        "home",
        None,
        "1 of 4 members missing",
    ));
    wait_for_file(&out, "DegradedArray home|1 of 4 members missing|");
    assert!(
        logged(&lines, "ALERT: Fail on array \"home\", member /dev/sdb"),
        "{lines:?}"
    );
    assert!(logged(&lines, "alerts go to: program"));
    alerter.shutdown(Duration::from_secs(5));
}

#[test]
fn mail_goes_through_the_mail_command_with_headers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mail");
    let sendmail = script(dir.path(), "sendmail", &format!("cat > {}", out.display()));
    let (log, _) = log();
    let alerter = Alerter::start(
        &quick(Targets {
            mail_to: Some("root@example.org".into()),
            mail_command: format!("{} -t", sendmail.display()),
            ..Targets::default()
        }),
        log,
    );
    alerter.raise(Alert::new(
        Event::RebuildFinished,
        "media",
        Some("/dev/sde"),
        "rebuilt",
    ));
    wait_for_file(&out, "host: ");
    let mail = std::fs::read_to_string(&out).unwrap();
    assert!(
        mail.starts_with(
            "To: root@example.org\nSubject: raidkit RebuildFinished event on array media"
        ),
        "{mail}"
    );
    assert!(
        mail.contains("RebuildFinished on array \"media\", member /dev/sde: rebuilt"),
        "{mail}"
    );
    alerter.shutdown(Duration::from_secs(5));
}

/// A one-request-at-a-time HTTP server answering with `statuses` in turn; the bodies it got.
fn http_server(statuses: Vec<u16>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/raid?token=1", listener.local_addr().unwrap());
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let got = Arc::clone(&bodies);
    std::thread::spawn(move || {
        for status in statuses {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut length, mut request_line) = (0, String::new());
            reader.read_line(&mut request_line).unwrap();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            got.lock().unwrap().push(format!(
                "{}{}",
                request_line.trim(),
                String::from_utf8(body).unwrap()
            ));
            let mut stream = stream;
            write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
        }
    });
    (url, bodies)
}

#[test]
fn a_webhook_gets_the_alert_as_json_and_a_failed_post_is_retried() {
    let (url, bodies) = http_server(vec![500, 200]);
    let (log, lines) = log();
    let alerter = Alerter::start(
        &quick(Targets {
            webhook: Some(url),
            ..Targets::default()
        }),
        log,
    );
    alerter.raise(Alert::new(
        Event::Fail,
        "home",
        Some("nbd://backup/home"),
        "timed out",
    ));
    let start = Instant::now();
    while bodies.lock().unwrap().len() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            lines.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let second = bodies.lock().unwrap()[1].clone();
    assert!(
        second.starts_with("POST /raid?token=1 HTTP/1.1{"),
        "{second}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&second["POST /raid?token=1 HTTP/1.1".len()..]).unwrap();
    assert_eq!(json["event"], "Fail");
    assert_eq!(json["array"], "home");
    assert_eq!(json["member"], "nbd://backup/home");
    assert_eq!(json["message"], "timed out");
    assert!(json["time"].as_str().unwrap().ends_with('Z'));
    alerter.shutdown(Duration::from_secs(5));
    assert!(
        logged(&lines, "alert Fail to webhook failed (POST"),
        "{:?}",
        lines.lock().unwrap()
    );
    assert!(
        !logged(&lines, "not delivered"),
        "{:?}",
        lines.lock().unwrap()
    );
}

#[test]
fn a_target_that_keeps_failing_is_logged_and_never_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let program = script(dir.path(), "broken", "exit 3");
    let (log, lines) = log();
    let alerter = Alerter::start(
        &quick(Targets {
            program: Some(program),
            webhook: Some("http://127.0.0.1:1/nothing-listens".into()),
            ..Targets::default()
        }),
        log,
    );
    alerter.raise(Alert::new(Event::TestMessage, "home", None, "test"));
    alerter.shutdown(Duration::from_secs(10));
    let lines = lines.lock().unwrap();
    for needle in [
        "alert TestMessage for array \"home\" not delivered to program after 2 tries",
        "exited with exit status: 3",
        "not delivered to webhook after 2 tries: cannot connect to 127.0.0.1:1",
    ] {
        assert!(
            lines.iter().any(|l| l.contains(needle)),
            "{needle:?} in {lines:#?}"
        );
    }
}

#[test]
fn a_stuck_target_never_blocks_the_caller_and_its_queue_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let program = script(dir.path(), "stuck", "sleep 30");
    let (log, lines) = log();
    let alerter = Alerter::start(
        &Targets {
            program: Some(program),
            attempts: 1,
            timeout: Duration::from_secs(60),
            ..Targets::default()
        },
        log,
    );
    let start = Instant::now();
    let raised = QUEUE_ALERTS + 50;
    for i in 0..raised {
        alerter.raise(Alert::new(
            Event::MemberTimeout,
            "home",
            None,
            format!("#{i}"),
        ));
    }
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "raise blocked: {:?}",
        start.elapsed()
    );
    let dropped = alerter.dropped()[0].1 as usize;
    // One alert is with the program, QUEUE_ALERTS wait; the rest were dropped.
    assert!(
        (raised - QUEUE_ALERTS - 1..=raised - QUEUE_ALERTS).contains(&dropped),
        "{dropped}"
    );
    assert!(logged(&lines, "alerts are waiting for it already"));
    alerter.shutdown(Duration::from_millis(100));
    assert!(logged(
        &lines,
        "still waiting for program after 100ms are not sent"
    ));
}

#[test]
fn without_a_target_every_event_is_still_logged_and_the_silence_is_said() {
    let (log, lines) = log();
    let alerter = Alerter::start(&Targets::default(), log);
    assert!(logged(&lines, "no alert will reach anyone"));
    assert!(alerter.target_kinds().is_empty());
    alerter.raise(Alert::new(
        Event::DegradedArray,
        "home",
        None,
        "started degraded",
    ));
    assert!(logged(
        &lines,
        "ALERT: DegradedArray on array \"home\": started degraded"
    ));
    alerter.shutdown(Duration::from_secs(1));
}

#[test]
fn the_tap_sees_every_alert_raised_after_it_is_set_with_or_without_targets() {
    let (log, _lines) = log();
    let alerter = Alerter::start(&Targets::default(), log);
    alerter.raise(Alert::new(Event::TestMessage, "before", None, "not tapped"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    alerter.tap(Arc::new(move |a: &Alert| {
        kept.lock().unwrap().push((a.event, a.array.clone()))
    }));
    alerter.raise(Alert::new(Event::Fail, "home", Some("/dev/b"), "failed"));
    alerter.raise(Alert::new(Event::TestMessage, "media", None, "a test"));
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (Event::Fail, "home".to_string()),
            (Event::TestMessage, "media".to_string())
        ]
    );
    alerter.shutdown(Duration::from_secs(1));
}

#[test]
fn syslog_gets_one_line_with_the_daemon_facility_and_severity() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("log");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let (log, _) = log();
    let alerter = Alerter::start(
        &quick(Targets {
            syslog: true,
            syslog_socket: socket_path,
            ..Targets::default()
        }),
        log,
    );
    alerter.raise(Alert::new(
        Event::Fail,
        "home",
        Some("/dev/sdb"),
        "write error",
    ));
    alerter.raise(Alert::new(
        Event::RebuildStarted,
        "home",
        Some("/dev/sde"),
        "rebuilding",
    ));
    let mut buf = [0u8; 1024];
    let n = socket.recv(&mut buf).unwrap();
    let line = String::from_utf8_lossy(&buf[..n]).to_string();
    // daemon (3) * 8 + critical (2) = 26; + info (6) = 30.
    let pid = std::process::id();
    assert_eq!(
        line,
        format!("<26>raidkit[{pid}]: Fail on array \"home\", member /dev/sdb: write error")
    );
    let n = socket.recv(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("<30>raidkit["));
    alerter.shutdown(Duration::from_secs(1));
}

#[test]
fn rebuild_progress_raises_each_mark_once() {
    assert_eq!(Event::rebuild_progress(0, 19), None);
    assert_eq!(Event::rebuild_progress(19, 20), Some(Event::Rebuild20));
    assert_eq!(Event::rebuild_progress(20, 39), None);
    assert_eq!(
        Event::rebuild_progress(35, 65),
        Some(Event::Rebuild60),
        "the highest mark crossed"
    );
    assert_eq!(Event::rebuild_progress(79, 100), Some(Event::Rebuild80));
    assert_eq!(Event::rebuild_progress(80, 100), None);
}

#[test]
fn retarget_sends_later_alerts_to_the_new_targets_and_delivers_the_queued_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (old_out, new_out) = (dir.path().join("old"), dir.path().join("new"));
    // The old program is slow: its alert is still queued when the targets change.
    let old = script(
        dir.path(),
        "old",
        &format!("sleep 0.3; echo \"$@\" >> {}", old_out.display()),
    );
    let new = script(
        dir.path(),
        "new",
        &format!("echo \"$@\" >> {}", new_out.display()),
    );
    let (log, lines) = log();
    let alerter = Alerter::start(
        &quick(Targets {
            program: Some(old),
            ..Targets::default()
        }),
        log,
    );
    alerter.raise(Alert::new(Event::Fail, "home", Some("a"), "first"));
    alerter.raise(Alert::new(Event::Fail, "home", Some("b"), "queued"));
    alerter.retarget(&quick(Targets {
        program: Some(new),
        ..Targets::default()
    }));
    alerter.raise(Alert::new(Event::DegradedArray, "home", None, "after"));
    wait_for_file(&new_out, "DegradedArray home");
    wait_for_file(&old_out, "Fail home b");
    assert!(
        !std::fs::read_to_string(&new_out).unwrap().contains("Fail"),
        "an alert raised before the change went to the new target"
    );
    assert!(
        !std::fs::read_to_string(&old_out)
            .unwrap()
            .contains("DegradedArray"),
        "an alert raised after the change went to the old target"
    );
    assert_eq!(
        lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("alerts go to: program"))
            .count(),
        2
    );
    alerter.shutdown(Duration::from_secs(5));
}

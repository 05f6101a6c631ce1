//! The admin API of `raidkit serve --admin PATH`, end to end over its Unix socket: the socket
//! is mode 0600 and removed at exit; bad JSON, unknown endpoints, oversized bodies, unknown
//! members and the removal of an active member are refused with a JSON error and the right
//! HTTP status, and the server keeps answering; fail → degraded, add → rebuilt, scrub clean,
//! speed limits change; the commands name the socket when no server is there.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::raidkit;
use serde_json::Value;

/// A `raidkit serve --create` of a RAID 5 over three RAM members with an admin socket.
struct Server {
    server: common::Server,
    admin: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let admin = dir.path().join("admin.sock");
        let nbd = dir.path().join("nbd.sock");
        let (nbd, admin_str) = (nbd.display().to_string(), admin.display().to_string());
        let args = ["--create", "--level", "5", "--chunk", "64K", "--unix", &nbd];
        let args = [
            &args[..],
            &["--admin", &admin_str, "mem:32M", "mem:32M", "mem:32M"],
        ]
        .concat();
        Server {
            server: common::Server::start(&args, Stdio::inherit()),
            admin,
            _dir: dir,
        }
    }

    /// SIGTERM and wait; asserts exit 0.
    fn stop(self) {
        self.server.stop_ok();
    }

    fn cli(&self, args: &[&str]) -> Output {
        raidkit()
            .args(args)
            .arg("--admin")
            .arg(&self.admin)
            .output()
            .expect("run raidkit")
    }

    fn status(&self) -> Value {
        let (code, body) = http(&self.admin, "GET", "/v1/status", b"");
        assert_eq!(code, 200, "{body}");
        body
    }
}

/// One raw HTTP/1.1 request; returns the status code and the JSON body.
fn http(socket: &Path, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let mut stream = UnixStream::connect(socket).expect("connect to the admin socket");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: raidkit\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    // A connection refused at accept (503, over the connection bound) is answered and closed
    // before the request is read, and a refused oversized body before it is all sent: a write
    // may then fail (EPIPE) while the reply waits to be read.
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply).into_owned();
    let code: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let json = text.split("\r\n\r\n").nth(1).unwrap_or("");
    let value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    (code, value)
}

fn error_of(v: &Value) -> &str {
    v.get("error")
        .and_then(Value::as_str)
        .expect("an error message")
}

#[test]
fn socket_is_private_and_removed_at_exit() {
    let server = Server::start();
    let mode = std::fs::metadata(&server.admin)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "admin socket mode {mode:o}");
    let admin = server.admin.clone();
    server.stop();
    assert!(!admin.exists(), "the admin socket was left behind");
}

#[test]
fn bad_requests_are_refused_and_the_server_keeps_serving() {
    let server = Server::start();
    let s = &server.admin;
    let cases: [(&str, &str, &[u8], u16, &str); 6] = [
        ("POST", "/v1/fail", b"{not json", 400, "invalid JSON"),
        ("POST", "/v1/fail", b"\x00\xff", 400, "invalid JSON"),
        ("POST", "/v1/fail", br#"{"member": 5}"#, 400, "invalid JSON"),
        (
            "POST",
            "/v1/add",
            br#"{"member":"x","extra":1}"#,
            400,
            "unknown field",
        ),
        ("GET", "/v1/nothing", b"", 404, "no endpoint"),
        ("DELETE", "/v1/status", b"", 405, "not allowed"),
    ];
    for (method, path, body, code, text) in cases {
        let (got, v) = http(s, method, path, body);
        assert_eq!(got, code, "{method} {path}: {v}");
        assert!(error_of(&v).contains(text), "{method} {path}: {v}");
    }
    let big = vec![b' '; 1 << 20];
    let (got, v) = http(s, "POST", "/v1/scrub", &big);
    assert_eq!(got, 413, "{v}");
    assert_eq!(server.status()["health"], "clean");
    server.stop();
}

/// `/v1/arrays/NAME/...` addresses the array by name (the daemon serves several under one
/// socket); an unknown name is 404.
#[test]
fn the_array_can_be_named_in_the_path() {
    let server = Server::start();
    let s = &server.admin;
    let (code, v) = http(s, "GET", "/v1/arrays/raidkit/status", b"");
    assert_eq!((code, &v["name"]), (200, &Value::from("raidkit")), "{v}");
    let (code, v) = http(
        s,
        "POST",
        "/v1/arrays/raidkit/speed",
        br#"{"max": 5000000}"#,
    );
    assert_eq!(code, 200, "{v}");
    let (code, v) = http(s, "GET", "/v1/arrays/other/status", b"");
    assert_eq!(code, 404, "{v}");
    assert!(error_of(&v).contains("no array \"other\""), "{v}");
    server.stop();
}

#[test]
fn unknown_member_and_active_member_removal_are_refused() {
    let server = Server::start();
    let s = &server.admin;
    let (code, v) = http(s, "POST", "/v1/fail", br#"{"member":"/no/such.img"}"#);
    assert_eq!(code, 404, "{v}");
    assert!(error_of(&v).contains("/no/such.img"), "{v}");
    let (code, v) = http(s, "POST", "/v1/remove", br#"{"member":"role 1"}"#);
    assert_eq!(code, 409, "{v}");
    assert!(error_of(&v).contains("fail it first"), "{v}");
    let (code, v) = http(s, "POST", "/v1/add", br#"{"member":"/no/such/dir/x.img"}"#);
    assert_eq!(code, 400, "{v}");
    assert!(error_of(&v).contains("/no/such/dir/x.img"), "{v}");
    let out = server.cli(&["remove", "role 0"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("fail it first"), "{stderr}");
    assert_eq!(server.status()["health"], "clean");
    server.stop();
}

#[test]
fn fail_add_scrub_and_speed_through_the_commands() {
    let server = Server::start();
    let out = server.cli(&["fail", "role 2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&server.cli(&["status"]).stdout).into_owned();
    assert!(text.contains("degraded [3/2] [UU_]"), "{text}");
    assert!(server
        .cli(&["speed-limit", "--max", "100M"])
        .status
        .success());
    let out = server.cli(&["add", "mem:32M", "--wait"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = server.status();
    assert_eq!(status["speed_limits"]["max_bytes_per_sec"], 100 << 20);
    assert!(status["task"].is_null(), "{status}");
    let states: Vec<&str> = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["state"].as_str())
        .collect();
    assert_eq!(states, ["active", "active", "active"], "{status}");
    let out = server.cli(&["scrub", "--wait"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && text.contains(" 0 mismatches"),
        "{text}"
    );
    server.stop();
}

#[test]
fn commands_name_the_socket_when_no_server_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nobody.sock");
    for args in [&["status"][..], &["fail", "role 0"], &["scrub"]] {
        let out = raidkit()
            .args(args)
            .arg("--admin")
            .arg(&missing)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(missing.to_str().unwrap()), "{stderr}");
    }
}

#[test]
fn connections_over_the_bound_are_refused_with_503() {
    let server = Server::start();
    // Idle connections hold their slots (until the header timeout).
    let idle: Vec<UnixStream> = (0..8)
        .map(|_| UnixStream::connect(&server.admin).expect("connect"))
        .collect();
    let (code, v) = http(&server.admin, "GET", "/v1/status", b"");
    assert_eq!(code, 503, "{v}");
    assert!(error_of(&v).contains("too many admin connections"), "{v}");
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, _) = http(&server.admin, "GET", "/v1/status", b"");
        if code == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "slots not released");
        std::thread::sleep(Duration::from_millis(50));
    }
    server.stop();
}

#[test]
fn a_stale_socket_is_replaced_and_a_live_one_refused() {
    let server = Server::start();
    // A second server on the same live admin socket is refused, naming it.
    let dir = tempfile::tempdir().unwrap();
    let out = raidkit()
        .args(["serve", "--create", "--level", "1", "--unix"])
        .arg(dir.path().join("nbd.sock"))
        .arg("--admin")
        .arg(&server.admin)
        .args(["mem:8M", "mem:8M"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("another server is listening"), "{stderr}");
    assert_eq!(server.status()["health"], "clean");
    server.stop();
    // A socket nobody listens on (a killed server's) is removed and bound again.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let nbd2 = dir.path().join("nbd2.sock").display().to_string();
    let stale_str = stale.display().to_string();
    let args = ["--create", "--level", "1", "--unix", &nbd2];
    let args = [&args[..], &["--admin", &stale_str, "mem:8M", "mem:8M"]].concat();
    let _server = common::Server::start(&args, Stdio::null());
    let (code, _) = http(&stale, "GET", "/v1/status", b"");
    assert_eq!(code, 200);
}

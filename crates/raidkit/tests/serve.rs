//! `raidkit serve` end to end: create and serve each level over a Unix socket, write and read
//! patterns with qemu-io, SIGTERM → exit 0 and every superblock clean, restart over TCP from the
//! same member files and read the same data back. Fails without qemu-io (see
//! `testsupport::require_tool`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{assert_success, qemu_io, raidkit, Server};

/// `raidkit serve ARGS` with its stderr shown, once it printed "raidkit: serving \"NAME\"".
fn start(args: &[&str]) -> Server {
    let server = Server::start(args, Stdio::inherit());
    assert!(
        server.line.starts_with("raidkit: serving \""),
        "unexpected line {:?}",
        server.line
    );
    server
}

const WRITES: &[&str] = &[
    "write -P 0x5a 0 1M",
    "write -f -P 0x6b 1M 192k",
    "write -P 0x7c 3000001 77777",
    "write -z 2M 256k",
    "write -P 0x11 5M 1M",
    "discard 5M 512k",
    "flush",
];

const READS: &[&str] = &[
    "read -P 0x5a 0 1M",
    "read -P 0x6b 1M 192k",
    "read -P 0x7c 3000001 77777",
    "read -P 0 2M 256k",
    "read -P 0 5M 512k",
    "read -P 0x11 5767168 512k",
];

fn assert_clean(members: &[String]) {
    let mut args = vec!["examine".to_string(), "--json".to_string()];
    args.extend(members.iter().cloned());
    let out = raidkit().args(&args).output().expect("examine");
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("examine JSON");
    for sb in v.as_array().expect("array") {
        assert_eq!(sb["state"], "clean", "member {} not clean", sb["member"]);
    }
}

fn member_paths(dir: &Path, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| dir.join(format!("m{i}")).to_str().unwrap().to_string())
        .collect()
}

fn serve_level(level: &str, count: usize) {
    if !testsupport::require_tool("qemu-io") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let members = member_paths(dir.path(), count);
    let socket: PathBuf = dir.path().join("nbd.sock");
    let mut args = vec![
        "--create", "--level", level, "--chunk", "64K", "--size", "16M",
    ];
    args.extend(["--name", "arr", "--unix", socket.to_str().unwrap()]);
    args.extend(members.iter().map(String::as_str));
    let server = start(&args);
    let plural = if count == 1 { "" } else { "s" };
    assert!(
        server
            .line
            .contains(&format!("({level}, {count} member{plural}, ")),
        "{}",
        server.line
    );
    assert!(
        server.uri.starts_with("nbd+unix:///arr?socket="),
        "{}",
        server.uri
    );
    qemu_io(&server.uri, WRITES);
    qemu_io(&server.uri, READS);
    assert!(server.stop().success(), "exit status after SIGTERM");
    assert!(!socket.exists(), "socket file removed on exit");
    assert_clean(&members);

    // Restart from the same members, over TCP on a free loopback port.
    let mut args = vec!["--listen", "127.0.0.1:0"];
    args.extend(members.iter().map(String::as_str));
    let server = start(&args);
    assert!(server.uri.starts_with("nbd://127.0.0.1:"), "{}", server.uri);
    qemu_io(&server.uri, READS);
    qemu_io(
        &server.uri,
        &["write -P 0x22 8M 64k", "read -P 0x22 8M 64k"],
    );
    assert!(server.stop().success());
    assert_clean(&members);
}

#[test]
fn serve_linear() {
    serve_level("linear", 1);
}

#[test]
fn serve_raid0() {
    serve_level("raid0", 2);
}

#[test]
fn serve_raid1() {
    serve_level("raid1", 2);
}

#[test]
fn serve_raid10() {
    serve_level("raid10", 4);
}

#[test]
fn serve_raid5() {
    serve_level("raid5", 4);
}

#[test]
fn serve_raid6() {
    serve_level("raid6", 4);
}

#[test]
fn ram_members_are_served_with_create_only() {
    let out = raidkit()
        .args(["serve", "--unix", "/nonexistent/x.sock", "mem:8M", "mem:8M"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--create"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if !testsupport::require_tool("qemu-io") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("ram.sock");
    let args = [
        "--create",
        "--level",
        "5",
        "--unix",
        socket.to_str().unwrap(),
        "mem:8M",
        "mem:8M",
        "mem:8M",
    ];
    let server = start(&args);
    assert!(
        server.line.contains("(raid5, 3 members, "),
        "{}",
        server.line
    );
    qemu_io(
        &server.uri,
        &["write -P 0x42 100 1M", "read -P 0x42 100 1M"],
    );
    assert!(server.stop().success());
}

/// SIGTERM the moment the "serving" line is out must still be a clean stop (exit 0): the
/// signal handlers are registered before the line is printed, not in a task that may not have
/// run yet.
#[test]
fn sigterm_right_after_the_serving_line_is_a_clean_stop() {
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s.sock");
        let args = [
            "--create",
            "--level",
            "1",
            "--unix",
            socket.to_str().unwrap(),
            "mem:4M",
            "mem:4M",
        ];
        let status = start(&args).stop();
        assert!(status.success(), "round {round}: {status:?}");
    }
}

/// `--buffer-memory` must hold two of the largest requests; a smaller value is refused before
/// anything is opened (the member file is not created).
#[test]
fn buffer_memory_below_two_maximum_requests_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let member = dir.path().join("m.img");
    let out = raidkit()
        .args(["serve", "--create", "--level", "linear", "--size", "8M"])
        .args(["--buffer-memory", "32M", "--unix"])
        .arg(dir.path().join("s.sock"))
        .arg(&member)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--buffer-memory") && stderr.contains("below 64M"),
        "{stderr}"
    );
    assert!(!member.exists(), "nothing is created on a refused flag");
}

/// A failure after the array was assembled (here: the admin socket cannot be made) still
/// leaves every member clean and unowned, so the next start needs no resync and no
/// --take-over.
#[test]
fn a_serve_that_fails_to_start_leaves_the_array_clean_and_unowned() {
    let dir = tempfile::tempdir().unwrap();
    let members: Vec<String> = (0..3)
        .map(|i| dir.path().join(format!("m{i}")).display().to_string())
        .collect();
    let mut create = vec!["create", "--level", "5", "--size", "8M"];
    create.extend(members.iter().map(String::as_str));
    assert_success(&raidkit().args(&create).output().unwrap());
    let socket = dir.path().join("no-such-dir").join("admin.sock");
    let socket = socket.to_str().unwrap();
    let mut serve = vec![
        "serve",
        "--unix",
        "/nonexistent-dir/nbd.sock",
        "--admin",
        socket,
    ];
    serve.extend(members.iter().map(String::as_str));
    let (ok, text) = common::run_raidkit(&serve);
    assert!(!ok, "{text}");
    assert!(text.contains("cannot create the admin socket"), "{text}");
    let mut examine = vec!["examine", "--json"];
    examine.extend(members.iter().map(String::as_str));
    let out = raidkit().args(&examine).output().unwrap();
    assert_success(&out);
    let superblocks: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for sb in superblocks.as_array().unwrap() {
        assert_eq!(sb["state"], "clean", "{sb}");
        assert!(sb["owner"].is_null(), "{sb}");
    }
}

/// A member shorter than its superblock says (truncated behind the array's back) is refused
/// with what to do, the reason said once; without it the array serves degraded.
#[test]
fn a_truncated_member_is_refused_with_the_remedy_and_the_rest_serves_degraded() {
    let dir = tempfile::tempdir().unwrap();
    let members = member_paths(dir.path(), 3);
    let mut create = vec!["create", "--level", "5", "--size", "16M"];
    create.extend(members.iter().map(String::as_str));
    assert_success(&raidkit().args(&create).output().unwrap());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&members[1])
        .unwrap()
        .set_len(12 << 20)
        .unwrap();
    let socket = dir.path().join("s.sock");
    let socket = socket.to_str().unwrap();
    let mut serve = vec!["serve", "--unix", socket];
    serve.extend(members.iter().map(String::as_str));
    let (ok, text) = common::run_raidkit(&serve);
    assert!(!ok, "{text}");
    assert!(
        text.contains(&format!(
            "member {}: superblock field member_bytes",
            members[1]
        )),
        "{text}"
    );
    assert!(
        text.contains("smaller than when it joined the array")
            && text.contains(&format!("start the array without {}", members[1])),
        "{text}"
    );
    assert_eq!(
        text.matches("the superblock describes").count(),
        1,
        "the reason said once: {text}"
    );

    let server = start(&["--unix", socket, &members[0], &members[2]]);
    assert!(server.line.contains("raid5, 3 members"), "{}", server.line);
    assert_eq!(server.stop().code(), Some(0));
}

/// `serve` logs what the daemon's monitor alerts on: a member failing, the array degraded,
/// the rebuild onto a spare from start to finish (before, a member failed in silence).
#[test]
fn serve_logs_a_member_failing_and_the_rebuild_that_follows() {
    let dir = tempfile::tempdir().unwrap();
    let members = member_paths(dir.path(), 3);
    let mut create = vec!["create", "--level", "1", "--size", "8M"];
    create.extend(members[..2].iter().map(String::as_str));
    assert_success(&raidkit().args(&create).output().unwrap());
    let socket = dir.path().join("s.sock");
    let (admin, log) = (dir.path().join("a.sock"), dir.path().join("serve.log"));
    let admin = admin.to_str().unwrap();
    let mut serve = vec!["--unix", socket.to_str().unwrap(), "--admin", admin];
    serve.extend(members[..2].iter().map(String::as_str));
    let server = Server::start_logged(&serve, &log);
    let logged = |wanted: &[String]| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(&log).unwrap();
            let missing: Vec<&String> = wanted
                .iter()
                .filter(|w| !text.contains(w.as_str()))
                .collect();
            if missing.is_empty() {
                return text;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no {missing:?} in the log:\n{text}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let fail = ["fail", "--admin", admin, &members[1]];
    assert_success(&raidkit().args(fail).output().unwrap());
    logged(&[
        format!("ALERT: Fail on array \"raidkit\", member {}", members[1]),
        "ALERT: DegradedArray on array \"raidkit\"".to_string(),
    ]);
    std::fs::File::create(&members[2])
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    let add = ["add", "--admin", admin, &members[2]];
    assert_success(&raidkit().args(add).output().unwrap());
    let text = logged(&[
        "event: RebuildStarted on array \"raidkit\"".to_string(),
        "event: RebuildFinished on array \"raidkit\"".to_string(),
    ]);
    assert!(
        !text.contains("NewArray"),
        "the serving line says it:\n{text}"
    );
    server.stop_ok();
}

//! Members are what they are, not what they are called, and an array holds them exclusively:
//! the same file under two names is refused at create and serve, a second server on members a
//! running server holds is refused naming the member and the process, read-only commands
//! still work, and a RAM member is refused by `create` without --force.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn raidkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_raidkit"))
        .args(args)
        .output()
        .expect("run raidkit")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn members(dir: &Path, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| dir.join(format!("m{i}.img")).to_str().unwrap().to_string())
        .collect()
}

fn create(level: &str, specs: &[String]) {
    let mut args = vec!["create", "--level", level, "--size", "8M", "--force"];
    args.extend(specs.iter().map(String::as_str));
    let out = raidkit(&args);
    assert!(out.status.success(), "create: {}", stderr(&out));
}

/// A running `raidkit serve`; killed on drop.
struct Server(Child);

impl Server {
    fn start(socket: &Path, specs: &[String]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_raidkit"))
            .arg("serve")
            .arg("--unix")
            .arg(socket)
            .args(specs)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn raidkit serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("raidkit serve printed no line: {:?}", child.try_wait()));
        assert!(line.starts_with("raidkit: serving"), "{line}");
        Server(child)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_same_file_under_two_names_is_one_member() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.img");
    let x_str = x.to_str().unwrap().to_string();
    // The same file as a relative-looking path with a `.` component.
    let dotted = dir.path().join(".").join("x.img");
    let out = raidkit(&[
        "create",
        "--level",
        "1",
        "--size",
        "8M",
        &x_str,
        dotted.to_str().unwrap(),
    ]);
    assert!(!out.status.success(), "create accepted one file twice");
    let err = stderr(&out);
    assert!(err.contains("x.img"), "{err}");
    assert!(
        err.contains("under another name") || err.contains("same storage"),
        "{err}"
    );

    // A RAID 5 whose second member is a symlink to its first.
    let specs = members(dir.path(), 3);
    for s in &specs {
        std::fs::File::create(s).unwrap().set_len(8 << 20).unwrap();
    }
    let link = dir.path().join("link.img");
    std::os::unix::fs::symlink(&specs[0], &link).unwrap();
    let out = raidkit(&[
        "create",
        "--level",
        "5",
        &specs[0],
        link.to_str().unwrap(),
        &specs[2],
    ]);
    assert!(
        !out.status.success(),
        "create accepted a symlink to a member"
    );
    assert!(
        stderr(&out).contains("link.img") || stderr(&out).contains("m0.img"),
        "{}",
        stderr(&out)
    );

    // serve of an existing array with one member named twice (and the real one left out).
    create("5", &specs);
    let sock = dir.path().join("nbd.sock");
    let out = raidkit(&[
        "serve",
        "--unix",
        sock.to_str().unwrap(),
        &specs[0],
        link.to_str().unwrap(),
        &specs[2],
    ]);
    assert!(!out.status.success(), "serve accepted a member twice");
    assert!(
        stderr(&out).contains("under another name") || stderr(&out).contains("same storage"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_second_server_on_the_same_members_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let specs = members(dir.path(), 3);
    create("5", &specs);
    let first = Server::start(&dir.path().join("a.sock"), &specs);
    let out = raidkit(&[
        "serve",
        "--unix",
        dir.path().join("b.sock").to_str().unwrap(),
        &specs[0],
        &specs[1],
        &specs[2],
    ]);
    assert!(!out.status.success(), "a second server started");
    let err = stderr(&out);
    assert!(err.contains("m0.img") && err.contains("in use"), "{err}");
    assert!(
        err.contains(&format!("pid {}", first.0.id())),
        "the holder is named: {err}"
    );
    // Through a symlink too (the lock is on the file, not the name).
    let link = dir.path().join("link.img");
    std::os::unix::fs::symlink(&specs[1], &link).unwrap();
    let out = raidkit(&[
        "create",
        "--level",
        "1",
        "--force",
        link.to_str().unwrap(),
        dir.path().join("other.img").to_str().unwrap(),
        "--size",
        "8M",
    ]);
    assert!(
        !out.status.success(),
        "create --force overwrote a served member"
    );
    assert!(stderr(&out).contains("in use"), "{}", stderr(&out));
    // Read-only commands still work while it is served.
    let out = raidkit(&["examine", &specs[0]]);
    assert!(out.status.success(), "examine: {}", stderr(&out));
    drop(first);
    // Once the first server is gone (even killed), the members are free.
    let second = Server::start(&dir.path().join("b.sock"), &specs);
    drop(second);
}

#[test]
fn create_refuses_a_ram_member_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("d.img");
    let out = raidkit(&[
        "create",
        "--level",
        "1",
        "--size",
        "8M",
        disk.to_str().unwrap(),
        "mem:8M",
    ]);
    assert!(!out.status.success(), "create accepted a RAM member");
    let err = stderr(&out);
    assert!(
        err.contains("mem:8M") && err.contains("serve --create") && err.contains("--force"),
        "{err}"
    );
    assert!(!disk.exists(), "nothing was created before the refusal");
    let out = raidkit(&[
        "create",
        "--level",
        "1",
        "--size",
        "8M",
        "--force",
        disk.to_str().unwrap(),
        "mem:8M",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning"), "{}", stderr(&out));
}

//! Members are what they are, not what they are called, and an array holds them exclusively:
//! the same file under two names is refused at create and serve, a second server on members a
//! running server holds is refused naming the member and the process, read-only commands
//! still work, and a RAM member is refused by `create` without --force.

mod common;

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Output, Stdio};

use common::Server;

fn raidkit(args: &[&str]) -> Output {
    common::raidkit().args(args).output().expect("run raidkit")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn members(dir: &Path, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| dir.join(format!("m{i}.img")).to_str().unwrap().to_string())
        .collect()
}

/// `raidkit create --level LEVEL --size 8M ARGS`.
fn create_8m(level: &str, args: &[&str]) -> Output {
    raidkit(&[&["create", "--level", level, "--size", "8M"][..], args].concat())
}

fn create(level: &str, specs: &[String]) {
    let mut args = vec!["--force"];
    args.extend(specs.iter().map(String::as_str));
    let out = create_8m(level, &args);
    assert!(out.status.success(), "create: {}", stderr(&out));
}

/// `raidkit serve --unix SOCKET SPECS`, its stderr dropped; killed on drop.
fn serve(socket: &Path, specs: &[String]) -> Server {
    let mut args = vec![OsStr::new("--unix"), socket.as_os_str()];
    args.extend(specs.iter().map(OsStr::new));
    Server::start(&args, Stdio::null())
}

#[test]
fn the_same_file_under_two_names_is_one_member() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.img");
    let x_str = x.to_str().unwrap().to_string();
    // The same file as a relative-looking path with a `.` component.
    let dotted = dir.path().join(".").join("x.img");
    let out = create_8m("1", &[&x_str, dotted.to_str().unwrap()]);
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
    let first = serve(&dir.path().join("a.sock"), &specs);
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
        err.contains(&format!("pid {}", first.child.id())),
        "the holder is named: {err}"
    );
    // Through a symlink too (the lock is on the file, not the name).
    let link = dir.path().join("link.img");
    std::os::unix::fs::symlink(&specs[1], &link).unwrap();
    let other = dir.path().join("other.img");
    let out = create_8m(
        "1",
        &["--force", link.to_str().unwrap(), other.to_str().unwrap()],
    );
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
    let second = serve(&dir.path().join("b.sock"), &specs);
    drop(second);
}

#[test]
fn create_refuses_a_ram_member_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("d.img");
    let out = create_8m("1", &[disk.to_str().unwrap(), "mem:8M"]);
    assert!(!out.status.success(), "create accepted a RAM member");
    let err = stderr(&out);
    assert!(
        err.contains("mem:8M") && err.contains("serve --create") && err.contains("--force"),
        "{err}"
    );
    assert!(!disk.exists(), "nothing was created before the refusal");
    let out = create_8m("1", &["--force", disk.to_str().unwrap(), "mem:8M"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning"), "{}", stderr(&out));
}

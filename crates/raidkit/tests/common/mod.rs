//! Helpers shared by the binary's end-to-end tests: the `raidkit` command, a running
//! `raidkit serve` ([`Server`]: started once it printed its "serving" line, SIGTERM or SIGKILL,
//! killed on drop), qemu-io with its failures asserted, and the checks on a command's result.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a server may take to print its "serving" line, and to exit after SIGTERM.
const SERVER_WAIT: Duration = Duration::from_secs(30);

pub fn raidkit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_raidkit"))
}

/// Runs `raidkit ARGS`: whether it succeeded, and its stdout followed by its stderr.
pub fn run_raidkit(args: &[&str]) -> (bool, String) {
    let out = raidkit().args(args).output().expect("run raidkit");
    (out.status.success(), output_text(&out))
}

/// A command's stdout followed by its stderr.
pub fn output_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// Asserts that a command succeeded, showing its stderr when it did not.
pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A running `raidkit serve`, the line it printed first and the URI at its end.
pub struct Server {
    pub child: Child,
    pub line: String,
    pub uri: String,
}

impl Server {
    /// Spawns `raidkit serve ARGS` with its stderr to `stderr` and waits for its first line
    /// on stdout, which must be the "raidkit: serving … at URI" line.
    pub fn start<S: AsRef<OsStr>>(args: &[S], stderr: Stdio) -> Server {
        Server::spawn(args, stderr, None)
    }

    /// [`Server::start`] with stderr to the file `log` (shown if the server does not start).
    pub fn start_logged<S: AsRef<OsStr>>(args: &[S], log: &Path) -> Server {
        let file = std::fs::File::create(log).expect("stderr file");
        Server::spawn(args, file.into(), Some(log))
    }

    fn spawn<S: AsRef<OsStr>>(args: &[S], stderr: Stdio, log: Option<&Path>) -> Server {
        let mut child = raidkit()
            .arg("serve")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn raidkit serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let Ok(line) = rx.recv_timeout(SERVER_WAIT) else {
            let _ = child.kill();
            let log = log.map(std::fs::read_to_string).and_then(Result::ok);
            let args: Vec<&OsStr> = args.iter().map(AsRef::as_ref).collect();
            panic!(
                "raidkit serve {args:?} printed no line: {:?}\n{}",
                child.wait(),
                log.unwrap_or_default()
            );
        };
        assert!(
            line.starts_with("raidkit: serving"),
            "unexpected line {line:?}"
        );
        let uri = line.rsplit(" at ").next().expect("URI").to_string();
        Server { child, line, uri }
    }

    /// SIGTERM, then wait for the exit status.
    pub fn stop(mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(sent.success());
        let deadline = Instant::now() + SERVER_WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "raidkit serve did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// [`Server::stop`], asserting exit 0.
    pub fn stop_ok(self) {
        let status = self.stop();
        assert!(status.success(), "serve exited with {status}");
    }

    /// SIGKILL, then wait.
    pub fn kill9(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("wait");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs qemu-io on `uri` with each of `commands` (`-c`); asserts none failed.
pub fn qemu_io<S: AsRef<str>>(uri: &str, commands: &[S]) {
    let mut cmd = Command::new("qemu-io");
    cmd.args(["-f", "raw", uri]);
    for c in commands {
        cmd.args(["-c", c.as_ref()]);
    }
    let out = cmd.output().expect("run qemu-io");
    let text = output_text(&out);
    assert!(out.status.success(), "qemu-io failed: {text}");
    assert!(
        !text.contains("failed") && !text.contains("error"),
        "qemu-io: {text}"
    );
}

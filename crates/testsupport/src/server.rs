//! NBD servers started by tests (nbdkit, qemu-nbd, nbd-server …) on Unix sockets: started,
//! waited for until they listen, killed when the test ends.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A server process, killed (and reaped) when dropped.
#[derive(Debug)]
pub struct Server {
    child: Child,
}

impl Server {
    /// Spawns `command`, which must write `pid_file` once it listens (nbdkit `-P`, qemu-nbd
    /// `--pid-file`), and waits for that.
    pub fn start(mut command: Command, pid_file: &Path) -> Server {
        let _ = std::fs::remove_file(pid_file);
        let child = command
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {:?}: {e}", command.get_program()));
        let mut server = Server { child };
        server.wait_until_ready(pid_file);
        server
    }

    /// Takes over a server spawned by the caller (one that writes no pid file: the caller
    /// waits for it in its own way); it is killed when dropped.
    pub fn adopt(child: Child) -> Server {
        Server { child }
    }

    /// The server's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server now and waits for it to exit.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn wait_until_ready(&mut self, pid_file: &Path) {
        let start = Instant::now();
        while start.elapsed() < START_TIMEOUT {
            if std::fs::metadata(pid_file).is_ok_and(|m| m.len() > 0) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "server writing {} exited early: {status}",
                    pid_file.display()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "server did not write {} in {START_TIMEOUT:?}",
            pid_file.display()
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The pid file beside a server's socket.
pub fn pid_file(sock: &Path) -> PathBuf {
    sock.with_extension("pid")
}

/// Starts `nbdkit -f -U SOCK ARGS…` (exiting with the test process) and waits until it listens.
pub fn nbdkit(sock: &Path, args: &[&str]) -> Server {
    let _ = std::fs::remove_file(sock);
    let pid = pid_file(sock);
    let mut command = Command::new("nbdkit");
    command
        .args(["-f", "--exit-with-parent", "-P"])
        .arg(&pid)
        .arg("-U")
        .arg(sock)
        .args(args);
    Server::start(command, &pid)
}

/// Starts `qemu-nbd --pid-file PID -k SOCK ARGS…` and waits until it listens.
pub fn qemu_nbd(sock: &Path, args: &[&str]) -> Server {
    let _ = std::fs::remove_file(sock);
    let pid = pid_file(sock);
    let mut command = Command::new("qemu-nbd");
    command
        .arg("--pid-file")
        .arg(&pid)
        .arg("-k")
        .arg(sock)
        .args(args);
    Server::start(command, &pid)
}

/// A sparse file of `len` bytes at `path` (created or truncated), for a member or a server's
/// backing; returns the path.
pub fn sparse_file(path: &Path, len: u64) -> PathBuf {
    std::fs::File::create(path)
        .and_then(|f| f.set_len(len))
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    path.to_path_buf()
}

/// The NBD URI of `export` on the Unix socket `sock`.
pub fn unix_uri(sock: &Path, export: &str) -> String {
    format!("nbd+unix:///{export}?socket={}", sock.display())
}

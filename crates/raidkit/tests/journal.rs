//! The journal end to end with the real binary and qemu-io: `kill -9` of `raidkit serve` with a
//! write-back journal holding unapplied writes → restart replays them; a lost write-back
//! journal refuses to start without `--force-journal-loss`; `journal add` / `remove` on a
//! stopped array; write-zeroes and discards through the write-back cache. Offsets and patterns
//! come from a seed (`RAIDKIT_SEED`, printed). Fails without qemu-io
//! (see `testsupport::require_tool`).
//!
//! To hold acknowledged writes in the write-back journal, a test serves the member files to
//! the binary over NBD from this process, through `FaultyMember`s it slows down
//! ([`SlowMembers`]): the binary has no test hook for it.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{assert_success, qemu_io, raidkit, run_raidkit, Server};
use member::{FaultControl, FaultyMember, Member};

/// A member as an NBD export (for [`SlowMembers`]).
struct MemberExport(Arc<dyn Member>);

impl nbd::Export for MemberExport {
    fn size(&self) -> u64 {
        self.0.len()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.read_at(buf, offset)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> std::io::Result<()> {
        self.0.write_at(data, offset)?;
        if fua {
            self.0.flush()?;
        }
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        self.0.flush()
    }
    fn trim(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.0.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64, _may_trim: bool) -> std::io::Result<()> {
        self.0.write_zeroes(offset, len)
    }
    fn can_multi_conn(&self) -> bool {
        true
    }
}

/// Member files served over NBD by this process (one Unix socket each), each through a
/// `FaultyMember` whose delay the test sets: with slow members the write-back applier falls
/// behind, so acknowledged writes stay only in the journal. Dropped: the servers stop once
/// the requests in flight are answered (a `kill -9`ed server's last member writes land first,
/// as they would on a disk), before the test opens the files itself.
struct SlowMembers {
    uris: Vec<String>,
    controls: Vec<FaultControl>,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
}

impl SlowMembers {
    fn serve(files: &[String], dir: &Path) -> SlowMembers {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (mut uris, mut controls, mut servers) = (Vec::new(), Vec::new(), Vec::new());
        for (i, file) in files.iter().enumerate() {
            let opts = member::OpenOptions {
                exclusive: false,
                ..member::OpenOptions::default()
            };
            let faulty = FaultyMember::new(member::open(file, &opts).expect("open member file"));
            controls.push(faulty.control());
            let sock = dir.join(format!("member{i}.sock"));
            let _ = std::fs::remove_file(&sock);
            let listener = runtime
                .block_on(async { nbd::Listener::bind_unix(&sock) })
                .expect("bind member socket");
            uris.push(listener.uri(""));
            let export: Arc<dyn nbd::Export> = Arc::new(MemberExport(Arc::new(faulty)));
            let mut stopped = stopped.clone();
            let shutdown = async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            };
            let config = nbd::ServerConfig {
                shutdown_grace: Duration::from_secs(10),
                ..nbd::ServerConfig::default()
            };
            servers.push(nbd::serve(listener, export, config, shutdown));
        }
        let thread = std::thread::spawn(move || {
            runtime.block_on(async {
                let mut tasks = tokio::task::JoinSet::new();
                for server in servers {
                    tasks.spawn(server);
                }
                while let Some(done) = tasks.join_next().await {
                    done.expect("member server task")
                        .expect("member server config");
                }
            })
        });
        SlowMembers {
            uris,
            controls,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Every member operation waits `delay` first (zero: none).
    fn set_delay(&self, delay: Duration) {
        for control in &self.controls {
            control.set_delay(delay);
        }
    }
}

impl Drop for SlowMembers {
    fn drop(&mut self) {
        self.set_delay(Duration::ZERO);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Non-overlapping 4 KiB-aligned writes with distinct patterns, from the seed.
fn workload(seed: u64, count: u64) -> (Vec<String>, Vec<String>) {
    let (mut writes, mut reads) = (Vec::new(), Vec::new());
    let mut x = seed | 1;
    for i in 0..count {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = 4096 * (1 + x % 24);
        let offset = i * (128 << 10) + 4096 * ((x >> 8) % 8);
        let pattern = 1 + (x >> 16) % 250;
        writes.push(format!("write -P {pattern} {offset} {len}"));
        reads.push(format!("read -P {pattern} {offset} {len}"));
    }
    (writes, reads)
}

/// The temporary directory may be a tmpfs (Debian's /tmp): these tests kill the process, not
/// the power, so a journal there keeps what they check.
const ALLOW_VOLATILE: &str = "--allow-volatile-journal";

struct Array {
    dir: tempfile::TempDir,
    members: Vec<String>,
    journal: String,
}

impl Array {
    /// [`Array::create`] for a test that needs qemu-io: None when it is missing (and allowed
    /// to be, see `testsupport::require_tool`).
    fn create_for_qemu(mode: Option<&str>) -> Option<Array> {
        testsupport::require_tool("qemu-io").then(|| Array::create(mode))
    }

    fn create(mode: Option<&str>) -> Array {
        let dir = tempfile::tempdir().expect("tempdir");
        let members: Vec<String> = (0..4)
            .map(|i| dir.path().join(format!("m{i}")).display().to_string())
            .collect();
        let journal = dir.path().join("journal").display().to_string();
        let mut args = vec!["create", "-l", "5", "-c", "64K", "-s", "32M"];
        let journal_args = [
            "--journal",
            &journal,
            "--journal-size",
            "16M",
            "--journal-mode",
        ];
        if let Some(mode) = mode {
            args.extend(journal_args);
            args.extend([mode, ALLOW_VOLATILE]);
        }
        args.extend(members.iter().map(String::as_str));
        let out = raidkit().args(&args).output().expect("create");
        assert_success(&out);
        Array {
            dir,
            members,
            journal,
        }
    }

    fn serve_args(&self, extra: &[&str]) -> Vec<String> {
        self.serve_args_on(extra, &self.members)
    }

    /// Arguments of `serve` with `extra` on `members` (the files, or their [`SlowMembers`]).
    fn serve_args_on(&self, extra: &[&str], members: &[String]) -> Vec<String> {
        let sock = self.dir.path().join("nbd.sock");
        let _ = std::fs::remove_file(&sock);
        let mut args = vec!["--unix".to_string(), sock.display().to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        if extra.contains(&"--journal") {
            args.push(ALLOW_VOLATILE.to_string());
        }
        args.extend(members.iter().cloned());
        args
    }

    fn serve(&self, extra: &[&str]) -> (Server, String) {
        let args = self.serve_args(extra);
        let server = self.start(&args);
        let text = std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default();
        (server, text)
    }

    /// Serves the array on its members behind [`SlowMembers`], slowed to `delay` once the
    /// server is up (assembly and replay run at full speed).
    fn serve_slow(&self, extra: &[&str], delay: Duration) -> (Server, SlowMembers) {
        let slow = SlowMembers::serve(&self.members, self.dir.path());
        let server = self.start(&self.serve_args_on(extra, &slow.uris));
        slow.set_delay(delay);
        (server, slow)
    }

    fn start(&self, args: &[String]) -> Server {
        Server::start_logged(args, &self.dir.path().join("serve.log"))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }
}

#[test]
fn kill9_with_unapplied_write_back_data_replays_on_restart() {
    if !testsupport::require_tool("qemu-io") {
        return;
    }
    let seed = testsupport::seed("kill9_with_unapplied_write_back_data_replays_on_restart");
    for round in 0..3 {
        let a = Array::create(Some("write-back"));
        let j = a.journal.clone();
        let (writes, reads) = workload(seed.wrapping_add(round), 24);
        // Each member operation takes 300 ms: most acknowledged writes are only in the journal.
        let (s, slow) = a.serve_slow(&["--journal", &j], Duration::from_millis(300));
        qemu_io(&s.uri, &writes);
        s.kill9();
        drop(slow);
        let (s, _) = a.serve(&["--journal", &j]);
        let log = a.log();
        let replayed = log
            .split("replayed ")
            .nth(1)
            .and_then(|t| t.split(" records (").nth(1))
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("seed {seed}: no replay line in {log}"));
        assert!(
            replayed > 0,
            "seed {seed}: nothing was left to replay: {log}"
        );
        qemu_io(&s.uri, &reads);
        s.stop_ok();
        // After a clean stop the journal is drained; data is still there.
        let (s, _) = a.serve(&["--journal", &j]);
        qemu_io(&s.uri, &reads);
        s.stop_ok();
    }
}

#[test]
fn lost_write_back_journal_refuses_without_force() {
    let Some(a) = Array::create_for_qemu(Some("write-back")) else {
        return;
    };
    let j = a.journal.clone();
    let (writes, _) = workload(
        testsupport::seed("lost_write_back_journal_refuses_without_force"),
        8,
    );
    let (s, slow) = a.serve_slow(&["--journal", &j], Duration::from_millis(300));
    qemu_io(&s.uri, &writes);
    s.kill9();
    drop(slow);
    std::fs::remove_file(&j).expect("lose the journal");
    let args = a.serve_args(&[]);
    let out = raidkit().arg("serve").args(&args).output().expect("serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "started without its write-back journal: {err}"
    );
    assert!(
        err.contains("write-back journal") && err.contains("--force-journal-loss"),
        "{err}"
    );
    assert!(err.contains("not shut down cleanly"), "{err}");
    // Nothing was changed by the refusal: it refuses again.
    let out = raidkit().arg("serve").args(&args).output().expect("serve");
    assert!(!out.status.success());
    let (s, _) = a.serve(&["--force-journal-loss"]);
    qemu_io(&s.uri, &["write -P 9 0 4k", "read -P 9 0 4k"]);
    s.stop_ok();
    // The journal was detached: a plain start works now.
    let (s, _) = a.serve(&[]);
    qemu_io(&s.uri, &["read -P 9 0 4k"]);
    s.stop_ok();
}

#[test]
fn journal_add_and_remove_on_a_stopped_array() {
    let Some(a) = Array::create_for_qemu(None) else {
        return;
    };
    let j = a.journal.clone();
    let mut add = vec!["journal", "add", "--mode", "write-back", "--size", "8M"];
    add.extend([ALLOW_VOLATILE, &j]);
    add.extend(a.members.iter().map(String::as_str));
    let out = raidkit().args(&add).output().expect("journal add");
    assert_success(&out);
    let (writes, reads) = workload(
        testsupport::seed("journal_add_and_remove_on_a_stopped_array"),
        16,
    );
    let (s, slow) = a.serve_slow(&["--journal", &j], Duration::from_millis(200));
    qemu_io(&s.uri, &writes);
    qemu_io(&s.uri, &["write -z 0 64k", "read -P 0 0 64k"]);
    s.kill9();
    drop(slow);
    // remove replays (drains) the write-back journal first.
    let mut remove = vec!["journal", "remove", "--journal", &j];
    remove.extend(a.members.iter().map(String::as_str));
    let out = raidkit().args(&remove).output().expect("journal remove");
    assert_success(&out);
    let (s, _) = a.serve(&[]);
    qemu_io(&s.uri, &reads[1..]);
    qemu_io(&s.uri, &["read -P 0 0 64k"]);
    s.stop_ok();
}

#[test]
fn write_through_journal_survives_kill9_and_a_lost_one_is_detached() {
    let Some(a) = Array::create_for_qemu(Some("write-through")) else {
        return;
    };
    let seed = testsupport::seed("write_through_journal_survives_kill9_and_a_lost_one_is_detached");
    let j = a.journal.clone();
    let (writes, reads) = workload(seed, 24);
    let (s, _) = a.serve(&["--journal", &j]);
    qemu_io(&s.uri, &writes);
    s.kill9();
    let (s, _) = a.serve(&["--journal", &j]);
    assert!(a.log().contains("(write-through): replayed"), "{}", a.log());
    qemu_io(&s.uri, &reads);
    s.kill9();
    // Without its write-through journal the array starts (warning) and forgets the journal.
    let (s, _) = a.serve(&[]);
    let log = a.log();
    assert!(
        log.contains("write hole is open again") && log.contains("detached"),
        "{log}"
    );
    qemu_io(&s.uri, &reads);
    s.stop_ok();
    // The old journal is refused now: it no longer belongs to the array.
    let args = a.serve_args(&["--journal", &j]);
    let out = raidkit().arg("serve").args(&args).output().expect("serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("has no journal"),
        "{err}"
    );
}

/// A crash that also takes a disk, restarted without the write-through journal: the refusal
/// (write hole) names the journal and leaves it attached, so the restart with it replays it
/// and starts the dirty and degraded array with no flag; the data reads back degraded.
/// (Before: the journal was detached before the refusal, and the retry said "has no journal".)
#[test]
fn a_refused_start_without_the_journal_keeps_it_attached() {
    let Some(a) = Array::create_for_qemu(Some("write-through")) else {
        return;
    };
    let seed = testsupport::seed("a_refused_start_without_the_journal_keeps_it_attached");
    let j = a.journal.clone();
    let (writes, reads) = workload(seed, 24);
    let (s, _) = a.serve(&["--journal", &j]);
    qemu_io(&s.uri, &writes);
    s.kill9();
    let without_m0 = |extra: &[&str]| -> Vec<String> {
        let mut args = a.serve_args(extra);
        args.retain(|arg| arg != &a.members[0]);
        args
    };
    let args = without_m0(&[]);
    let out = raidkit().arg("serve").args(&args).output().expect("serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("write hole")
            && err.contains("Give its journal")
            && err.contains("kept attached")
            && !err.contains("detached")
            && !err.contains("running without it"),
        "seed {seed}: {err}"
    );
    let args = without_m0(&["--journal", &j]);
    let s = a.start(&args);
    assert!(a.log().contains("(write-through): replayed"), "{}", a.log());
    qemu_io(&s.uri, &reads);
    s.stop_ok();
}

/// `raidkit status` shows the journal (mode, ring use, acknowledged bytes not yet on the
/// members) and the read cache, from the running server.
#[test]
fn status_shows_the_write_back_journal_and_the_cache() {
    let Some(a) = Array::create_for_qemu(Some("write-back")) else {
        return;
    };
    let j = a.journal.clone();
    let admin = a.dir.path().join("admin.sock").display().to_string();
    // Each member operation takes 3 s: the writes below are only in the journal for a while.
    let (s, slow) = a.serve_slow(
        &["--journal", &j, "--admin", &admin],
        Duration::from_secs(3),
    );
    qemu_io(&s.uri, &["write -P 7 0 64k", "write -P 9 1M 8k"]);
    let status = |json: bool| {
        let mut args = vec!["status", "--admin", &admin];
        if json {
            args.push("--json");
        }
        let out = raidkit().args(&args).output().expect("raidkit status");
        assert_success(&out);
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let v: serde_json::Value = serde_json::from_str(&status(true)).expect("JSON status");
    let journal = &v["journal"];
    assert_eq!(journal["name"], j.as_str(), "{v}");
    assert_eq!(journal["mode"], "write-back", "{v}");
    // The 16 MiB journal less its two superblock copies (docs/FORMAT.md).
    assert_eq!(journal["ring_bytes"], (16 << 20) - 8192, "{v}");
    assert!(journal["used_bytes"].as_u64() > Some(72 << 10), "{v}");
    assert!(journal["commits"].as_u64() >= Some(1), "{v}");
    let unapplied = journal["unapplied_bytes"]
        .as_u64()
        .expect("unapplied bytes");
    assert!(unapplied > 0 && unapplied <= 72 << 10, "{v}");
    assert_eq!(v["cache"]["capacity_bytes"], 64 << 20, "{v}");
    let text = status(false);
    assert!(
        text.contains(&format!("journal {j} (write-back): "))
            && text.contains("not yet on the members"),
        "{text}"
    );
    assert!(text.contains("read cache: "), "{text}");
    slow.set_delay(Duration::ZERO);
    s.stop_ok();
    drop(slow);
    let (s, _) = a.serve(&["--journal", &j]);
    qemu_io(&s.uri, &["read -P 7 0 64k", "read -P 9 1M 8k"]);
    s.stop_ok();
}

/// A journal added after a crash holds none of that crash's writes: `journal add` refuses a
/// dirty array (else a dirty and degraded start would pass as if its replay closed the hole).
#[test]
fn journal_add_refuses_an_array_that_was_not_shut_down_cleanly() {
    let a = Array::create(None);
    let (s, _) = a.serve(&[]);
    qemu_io(&s.uri, &["write -P 3 0 64k"]);
    s.kill9();
    let m: Vec<&str> = a.members.iter().map(String::as_str).collect();
    let add = ["journal", "add", "--size", "8M", &a.journal];
    let (ok, text) = run_raidkit(&[&add[..], &m].concat());
    assert!(!ok && text.contains("was not shut down cleanly"), "{text}");
    assert!(
        !Path::new(&a.journal).exists(),
        "the refusal wrote the journal"
    );
    // After the resync has run and a clean stop, it is added.
    let (s, _) = a.serve(&[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !a.log().contains("resync of \"raidkit\" finished") {
        assert!(Instant::now() < deadline, "no resync: {}", a.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    s.stop_ok();
    let (ok, text) = run_raidkit(&[&add[..], &m].concat());
    assert!(ok, "{text}");
}

/// A write-back journal on tmpfs (/dev/shm) is refused by create, journal add, serve and serve
/// --create unless --allow-volatile-journal is given, before anything is written; with the flag
/// it works and `status` shows it volatile. A write-through one there is only warned about.
#[test]
fn a_write_back_journal_on_tmpfs_needs_allow_volatile_journal() {
    let shm = tempfile::tempdir_in("/dev/shm").expect("a directory in /dev/shm (tmpfs)");
    let j = shm.path().join("journal").display().to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let members: Vec<String> = (0..4)
        .map(|i| dir.path().join(format!("m{i}")).display().to_string())
        .collect();
    let m: Vec<&str> = members.iter().map(String::as_str).collect();
    let wb = [
        "--journal",
        &j,
        "--journal-size",
        "16M",
        "--journal-mode",
        "write-back",
    ];
    let create = [
        &["create", "-l", "5", "-c", "64K", "-s", "32M"][..],
        &wb,
        &m,
    ]
    .concat();
    let (ok, text) = run_raidkit(&create);
    assert!(!ok, "created with a write-back journal on tmpfs: {text}");
    let refusal = |text: &str| {
        text.contains("is on tmpfs")
            && text.contains("power cut")
            && text.contains("--allow-volatile-journal")
    };
    assert!(refusal(&text), "{text}");
    assert!(
        !Path::new(&j).exists() && !Path::new(&members[0]).exists(),
        "the refusal wrote something"
    );
    let (ok, text) =
        run_raidkit(&[&["create", "-l", "5", "-c", "64K", "-s", "32M"][..], &m].concat());
    assert!(ok, "{text}");
    let add = ["journal", "add", "--mode", "write-back", "--size", "16M"];
    let (ok, text) = run_raidkit(&[&add[..], &[&j], &m].concat());
    assert!(!ok && refusal(&text), "{text}");
    assert!(!Path::new(&j).exists(), "the refusal wrote the journal");
    let (ok, text) = run_raidkit(&[&add[..], &["--allow-volatile-journal", &j], &m].concat());
    assert!(ok && text.contains("warning: write-back journal"), "{text}");
    // serve refuses it too (every start is checked: the flag is not recorded).
    let sock = dir.path().join("nbd.sock").display().to_string();
    let (ok, text) = run_raidkit(&[&["serve", "--unix", &sock, "--journal", &j][..], &m].concat());
    assert!(!ok && refusal(&text), "{text}");
    let admin = dir.path().join("admin.sock").display().to_string();
    let log = dir.path().join("serve.log");
    let args = [
        &["--unix", &sock, "--admin", &admin, "--journal", &j][..],
        &["--allow-volatile-journal"],
        &m,
    ]
    .concat();
    let server = Server::start_logged(&args, &log);
    let (ok, text) = run_raidkit(&["status", "--admin", &admin, "--json"]);
    assert!(ok, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON status");
    assert_eq!(v["journal"]["volatile"], true, "{v}");
    let reason = v["journal"]["volatile_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("tmpfs"), "{v}");
    let (ok, text) = run_raidkit(&["status", "--admin", &admin]);
    assert!(ok && text.contains("VOLATILE (on tmpfs"), "{text}");
    server.stop_ok();
    // Removing it is never refused; a write-through journal there is a warning.
    let (ok, text) = run_raidkit(&[&["journal", "remove", "--journal", &j][..], &m].concat());
    assert!(ok, "{text}");
    std::fs::remove_file(&j).expect("remove the old journal file");
    let add = [
        "journal",
        "add",
        "--mode",
        "write-through",
        "--size",
        "16M",
        &j,
    ];
    let (ok, text) = run_raidkit(&[&add[..], &m].concat());
    assert!(ok, "{text}");
    assert!(
        text.contains("warning: write-through journal") && text.contains("write hole"),
        "{text}"
    );
    // serve --create checks before creating anything.
    let j2 = shm.path().join("j2").display().to_string();
    let wb2 = ["--journal", &j2, "--journal-mode", "write-back"];
    let serve = [
        "serve", "--unix", &sock, "--create", "-l", "1", "mem:16M", "mem:16M",
    ];
    let (ok, text) = run_raidkit(&[&serve[..], &wb2].concat());
    assert!(!ok && refusal(&text) && !Path::new(&j2).exists(), "{text}");
}

//! `NbdMember` against real NBD servers started here on Unix sockets and loopback TCP: nbdkit
//! (memory, file; error, delay and blocksize-policy filters) and qemu-nbd. Covers round trips
//! (unaligned, trim/write-zeroes leave zeroes), the EXPORT_NAME fallback, concurrent threads on
//! one connection, splitting at the server's maximum, read-modify-write under a minimum block
//! size, a killed server (every waiter and every later request fails fast), a stalled server
//! (TimedOut within the deadline), server errno reporting, and reconnect after a restart.
//! Random data comes from `RAIDKIT_SEED` (printed; set it to replay).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use member::{
    open, open_with, Member, NbdMember, NbdServerError, OpenOptions, RemoteOptions, SimRng,
};
use tempfile::TempDir;
use testsupport::server::{nbdkit, qemu_nbd, sparse_file, unix_uri, Server};

mod common;

/// A new temporary directory and the socket path `s` in it, once `tool` is there (None when
/// it is missing and may be: see `testsupport::require_tool`).
/// With `tool` installed: a temporary directory and an 8 MiB sparse `disk.img` in it; `None`
/// (the skip recorded) without it.
fn with_disk(tool: &str) -> Option<(TempDir, PathBuf)> {
    if !testsupport::require_tool(tool) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = sparse_file(&dir.path().join("disk.img"), 8 << 20);
    Some((dir, file))
}

fn socket_dir(tool: &str) -> Option<(TempDir, PathBuf)> {
    if !testsupport::require_tool(tool) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s");
    Some((dir, sock))
}

/// nbdkit with `args` on a socket in a new temporary directory, and an `NbdMember` on it with
/// `remote`'s options; the directory and the server last as long as the caller keeps them.
/// None when nbdkit is missing (see [`socket_dir`]).
fn nbdkit_member(args: &[&str], remote: &RemoteOptions) -> Option<(TempDir, Server, NbdMember)> {
    let (dir, sock) = socket_dir("nbdkit")?;
    let server = nbdkit(&sock, args);
    Some((dir, server, unix_nbd_member(&sock, remote)))
}

/// A member on the default export of the NBD server on `sock`.
fn unix_member(sock: &Path) -> Arc<dyn Member> {
    open(&unix_uri(sock, ""), &OpenOptions::default()).unwrap()
}

/// An `NbdMember` on the default export of the NBD server on `sock`, with `remote`'s options.
fn unix_nbd_member(sock: &Path, remote: &RemoteOptions) -> NbdMember {
    NbdMember::open(&unix_uri(sock, ""), &OpenOptions::default(), remote).unwrap()
}

fn seed() -> u64 {
    testsupport::seed("member nbd")
}

fn remote(timeout_ms: u64) -> RemoteOptions {
    RemoteOptions {
        io_timeout: Duration::from_millis(timeout_ms),
        ..RemoteOptions::default()
    }
}

fn random_bytes(rng: &mut SimRng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

fn read(m: &dyn Member, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0xAAu8; len];
    m.read_at(&mut buf, offset).unwrap();
    buf
}

/// Round trips every operation, unaligned, on an all-zero member of at least 4 MiB.
fn exercise(m: &dyn Member, rng: &mut SimRng) {
    let size = m.len();
    assert!(size >= 4 << 20);
    assert_eq!(read(m, 0, 8192), vec![0u8; 8192]);
    let data = random_bytes(rng, 300_001);
    let at = 65_536 - 777;
    m.write_at(&data, at).unwrap();
    assert_eq!(read(m, at, data.len()), data);
    assert_eq!(read(m, at - 1, 1), [0], "byte before the write untouched");
    assert_eq!(
        read(m, at + data.len() as u64, 1),
        [0],
        "byte after untouched"
    );
    m.trim(at + 1000, 200_003).unwrap();
    let mut want = data.clone();
    want[1000..201_003].fill(0);
    assert_eq!(
        read(m, at, data.len()),
        want,
        "trim leaves zeroes, neighbours kept"
    );
    m.write_zeroes(at + 5, 17).unwrap();
    want[5..22].fill(0);
    assert_eq!(read(m, at, data.len()), want);
    m.flush().unwrap();
    m.write_at(&[7], size - 1).unwrap();
    assert_eq!(read(m, size - 1, 1), [7]);
    let err = m.write_at(&[1, 2], size - 1).unwrap_err();
    assert!(err.to_string().contains(m.name()), "{err}");
    let mut two = [0u8; 2];
    assert!(m.read_at(&mut two, size - 1).is_err());
    assert!(m.trim(u64::MAX, 2).is_err());
    m.write_at(&[], size).unwrap();
    // Vectored: parts cut anywhere, one request (or pieces of the server's maximum).
    let parts = [
        random_bytes(rng, 1000),
        random_bytes(rng, 7192),
        Vec::new(),
        random_bytes(rng, 3 << 20),
    ];
    let slices: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
    let whole = parts.concat();
    for at in [4096, 4097] {
        m.write_vectored_at(&slices, at).unwrap();
        assert_eq!(read(m, at, whole.len()), whole, "vectored write at {at}");
        let (mut x, mut y) = (vec![0u8; 12_345], vec![0u8; whole.len() - 12_345]);
        m.read_vectored_at(&mut [&mut x, &mut y], at).unwrap();
        assert_eq!([x, y].concat(), whole, "vectored read at {at}");
    }
    assert!(m.write_vectored_at(&[&[1], &[2]], size - 1).is_err());
}

#[test]
fn nbdkit_memory_over_unix_socket() {
    let Some((_dir, sock)) = socket_dir("nbdkit") else {
        return;
    };
    let _server = nbdkit(&sock, &["memory", "64M"]);
    let m = unix_member(&sock);
    assert_eq!(m.len(), 64 << 20);
    exercise(m.as_ref(), &mut SimRng::new(seed()));
}

#[test]
fn nbdkit_memory_over_tcp_ipv4_and_ipv6() {
    if !testsupport::require_tool("nbdkit") {
        return;
    }
    for (bind, host) in [("127.0.0.1", "127.0.0.1"), ("::1", "[::1]")] {
        let Ok(listener) = std::net::TcpListener::bind((bind, 0)) else {
            testsupport::skip_environment(&format!("cannot bind {bind} (no IPv6 here?)"));
            continue;
        };
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let mut child = Command::new("nbdkit")
            .args([
                "-f",
                "--exit-with-parent",
                "-i",
                bind,
                "-p",
                &port.to_string(),
            ])
            .args(["memory", "8M"])
            .spawn()
            .unwrap();
        let spec = format!("nbd://{host}:{port}/");
        let start = Instant::now();
        let m = loop {
            match open(&spec, &OpenOptions::default()) {
                Ok(m) => break m,
                Err(e) if start.elapsed() < Duration::from_secs(10) => {
                    assert!(child.try_wait().unwrap().is_none(), "nbdkit exited: {e}");
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("{spec}: {e}"),
            }
        };
        let _server = Server::adopt(child);
        assert_eq!(m.name(), spec);
        exercise(m.as_ref(), &mut SimRng::new(seed()));
    }
}

#[test]
fn nbdkit_file_plugin_data_lands_in_the_file() {
    let Some((dir, file)) = with_disk("nbdkit") else {
        return;
    };
    let sock = dir.path().join("s");
    let _server = nbdkit(&sock, &["file", file.to_str().unwrap()]);
    let m = unix_member(&sock);
    exercise(m.as_ref(), &mut SimRng::new(seed()));
    m.write_at(b"landed", 4096 * 3 + 1).unwrap();
    m.flush().unwrap();
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(&bytes[4096 * 3 + 1..4096 * 3 + 7], b"landed");
    let desc = format!("{m:?}");
    assert!(desc.contains("NBD_CMD_FLUSH"), "{desc}");
}

#[test]
fn qemu_nbd_named_export() {
    let Some((dir, file)) = with_disk("qemu-nbd") else {
        return;
    };
    let sock = dir.path().join("q");
    let file = file.to_str().unwrap();
    let _server = qemu_nbd(
        &sock,
        &["-f", "raw", "-x", "disk one", "-t", "--shared=8", file],
    );
    let m = open(&unix_uri(&sock, "disk%20one"), &OpenOptions::default()).unwrap();
    exercise(m.as_ref(), &mut SimRng::new(seed()));
    let err = open(&unix_uri(&sock, "nope"), &OpenOptions::default()).unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

#[test]
fn export_name_fallback_without_fixed_newstyle() {
    let Some((_dir, sock)) = socket_dir("nbdkit") else {
        return;
    };
    // Masking every global handshake flag leaves plain newstyle: only NBD_OPT_EXPORT_NAME.
    let _server = nbdkit(&sock, &["--mask-handshake=0", "memory", "4M"]);
    let m = unix_member(&sock);
    exercise(m.as_ref(), &mut SimRng::new(seed()));
}

#[test]
fn oldstyle_server_and_bad_uris_are_refused_clearly() {
    let Some((dir, sock)) = socket_dir("nbdkit") else {
        return;
    };
    let _server = nbdkit(&sock, &["-o", "memory", "4M"]);
    let err = open(&unix_uri(&sock, ""), &OpenOptions::default()).unwrap_err();
    assert!(err.to_string().contains("oldstyle"), "{err}");
    let err = open("nbds://h/x", &OpenOptions::default()).unwrap_err();
    assert!(err.to_string().contains("TLS"), "{err}");
    let missing = dir.path().join("missing");
    let err = open(&unix_uri(&missing, ""), &OpenOptions::default()).unwrap_err();
    assert!(err.to_string().contains("connect"), "{err}");
}

#[test]
fn write_zeroes_falls_back_to_written_zeroes() {
    let Some((_dir, _server, m)) = nbdkit_member(
        &["--filter=nozero", "memory", "8M", "zeromode=none"],
        &RemoteOptions::default(),
    ) else {
        return;
    };
    assert!(
        m.description().contains("written zeroes"),
        "{}",
        m.description()
    );
    m.write_at(&vec![5u8; 3 << 20], 0).unwrap();
    m.trim(1, 3 << 20).unwrap();
    assert_eq!(read(&m, 0, 1), [5]);
    assert_eq!(read(&m, 1, (3 << 20) - 1), vec![0u8; (3 << 20) - 1]);
}

#[test]
fn min_block_size_read_modify_write_and_max_split() {
    // The policy filter advertises these sizes and fails any request that breaks them (EINVAL).
    let args = [
        "--filter=blocksize-policy",
        "memory",
        "16M",
        "blocksize-minimum=4096",
        "blocksize-preferred=65536",
        "blocksize-maximum=1048576",
        "blocksize-error-policy=error",
    ];
    let Some((_dir, _server, m)) = nbdkit_member(&args, &RemoteOptions::default()) else {
        return;
    };
    assert!(
        m.description().contains("minimum block 4096"),
        "{}",
        m.description()
    );
    let mut rng = SimRng::new(seed());
    exercise(&m, &mut rng);
    // 5 MiB + a bit, unaligned: split into 1 MiB pieces, edges read-modify-written.
    let big = random_bytes(&mut rng, (5 << 20) + 3);
    m.write_at(&big, 8 << 20 | 5).unwrap();
    assert_eq!(read(&m, 8 << 20 | 5, big.len()), big);
}

/// To a server with a minimum block size, a partial write is a read-modify-write of its edge
/// blocks; an aligned write of its head block landing between that read and write must not be
/// undone (block locks, as direct I/O has). Before, only partial writes took (edge) locks, and
/// the aligned write's bytes outside the partial one came back old.
#[test]
fn aligned_write_racing_a_partial_write_of_its_block_is_not_undone() {
    let args = [
        "--filter=blocksize-policy",
        "memory",
        "4M",
        "blocksize-minimum=4096",
        "blocksize-error-policy=error",
    ];
    let Some((_dir, _server, m)) = nbdkit_member(&args, &RemoteOptions::default()) else {
        return;
    };
    let m: Arc<dyn Member> = Arc::new(m);
    let writer = Arc::clone(&m);
    common::race_aligned_and_partial_writes(&m, 4096, 300, |b| writer.write_at(b, 0).unwrap());
}

#[test]
fn concurrent_threads_share_one_connection() {
    let Some((_dir, _server, m)) = nbdkit_member(&["memory", "64M"], &RemoteOptions::default())
    else {
        return;
    };
    let m = Arc::new(m);
    let seed = seed();
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                let mut rng = SimRng::new(seed ^ t);
                let region = t * (8 << 20);
                for i in 0..40 {
                    let len = 1 + rng.below(200_000) as usize;
                    let at = region + rng.below((8 << 20) - len as u64);
                    let data = random_bytes(&mut rng, len);
                    m.write_at(&data, at).unwrap();
                    assert_eq!(read(m.as_ref(), at, len), data, "thread {t} op {i}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(m.in_flight(), 0);
    // A 40 MiB request is split at 32 MiB.
    let big = random_bytes(&mut SimRng::new(seed), 40 << 20);
    m.write_at(&big, 0).unwrap();
    assert_eq!(read(m.as_ref(), 0, big.len()), big);
}

#[test]
fn killed_server_fails_every_request_quickly() {
    let Some((_dir, sock)) = socket_dir("nbdkit") else {
        return;
    };
    let args = ["--filter=delay", "memory", "8M", "rdelay=10", "wdelay=10"];
    let mut server = nbdkit(&sock, &args);
    let m = Arc::new(unix_nbd_member(&sock, &remote(30_000)));
    let readers: Vec<_> = (0..8u64)
        .map(|t| {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 4096];
                if t % 2 == 0 {
                    m.read_at(&mut buf, t * 4096).unwrap_err()
                } else {
                    m.write_at(&buf, t * 4096).unwrap_err()
                }
            })
        })
        .collect();
    let start = Instant::now();
    while m.in_flight() < 8 && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        m.in_flight(),
        8,
        "reads and writes are waiting on the server"
    );
    let killed = Instant::now();
    server.kill();
    for r in readers {
        let err = r.join().unwrap();
        assert!(err.to_string().contains(m.name()), "{err}");
    }
    let failed_after = killed.elapsed();
    assert!(
        failed_after < Duration::from_secs(1),
        "waiters failed after {failed_after:?}"
    );
    assert!(!m.is_connected());
    let start = Instant::now();
    let err = m.write_at(&[1], 0).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotConnected, "{err}");
    assert!(start.elapsed() < Duration::from_millis(100));
    assert!(err.to_string().contains(m.name()), "{err}");
}

#[test]
fn stalled_server_times_out_within_the_deadline() {
    let Some((_dir, sock)) = socket_dir("nbdkit") else {
        return;
    };
    let _server = nbdkit(&sock, &["--filter=delay", "memory", "8M", "rdelay=5"]);
    let m = open_with(&unix_uri(&sock, ""), &OpenOptions::default(), &remote(1000)).unwrap();
    m.write_at(&[1; 4096], 0).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    let err = m.read_at(&mut buf, 0).unwrap_err();
    let took = start.elapsed();
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    assert!(err.to_string().contains(m.name()), "{err}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2000),
        "{took:?}"
    );
    let start = Instant::now();
    assert!(
        m.write_at(&[1], 0).is_err(),
        "the connection is broken after a timeout"
    );
    assert!(start.elapsed() < Duration::from_millis(100));
}

/// Requests started on two stalled servers before either is waited for (`Member::start`, as
/// the engine does for a batch) time out together at the request's deadline: one timeout, not
/// one and a grace as when called one after the other (below). A started request on a healthy
/// server returns its bytes, timed until its reply came, not until it was waited for.
#[test]
fn requests_started_together_time_out_together() {
    if !testsupport::require_tool("nbdkit") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socks = [
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    ];
    let _servers: Vec<Server> = socks
        .iter()
        .enumerate()
        .map(|(i, s)| match i {
            2 => nbdkit(s, &["memory", "8M"]),
            _ => nbdkit(s, &["--filter=delay", "memory", "8M", "rdelay=5"]),
        })
        .collect();
    let members: Vec<_> = socks
        .iter()
        .map(|s| open_with(&unix_uri(s, ""), &OpenOptions::default(), &remote(1000)).unwrap())
        .collect();
    let pattern: Vec<u8> = (0..4096).map(|i| (i % 253) as u8).collect();
    let written = members[2]
        .start(member::StartCall::Write {
            offset: 4096,
            bufs: &[&pattern[..1000], &pattern[1000..]],
        })
        .expect("an aligned write starts");
    written.finish(&mut |_| {}).0.unwrap();
    let start = Instant::now();
    member::with_deadline(start + Duration::from_millis(1000), || {
        let read = member::StartCall::Read {
            offset: 4096,
            len: 4096,
        };
        let started: Vec<_> = members
            .iter()
            .map(|m| m.start(read).expect("an aligned read starts"))
            .collect();
        for (i, call) in started.into_iter().enumerate() {
            let mut got = Vec::new();
            let (result, took) = call.finish(&mut |data| got.extend_from_slice(data));
            if i == 2 {
                result.unwrap();
                assert_eq!(got, pattern);
                assert!(took < Duration::from_millis(500), "{took:?}");
            } else {
                let err = result.unwrap_err();
                assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
                assert!(err.to_string().contains(members[i].name()), "{err}");
            }
        }
    });
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(1150),
        "{took:?}"
    );
}

/// Two stalled servers called one after the other under one request deadline
/// (`member::with_deadline`, as the engine does for a batch) time out together: one timeout
/// plus the grace of a quarter, not one timeout each.
#[test]
fn stalled_servers_share_the_request_deadline() {
    if !testsupport::require_tool("nbdkit") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socks = [dir.path().join("a"), dir.path().join("b")];
    let _servers: Vec<Server> = socks
        .iter()
        .map(|s| nbdkit(s, &["--filter=delay", "memory", "8M", "rdelay=5"]))
        .collect();
    let members: Vec<_> = socks
        .iter()
        .map(|s| open_with(&unix_uri(s, ""), &OpenOptions::default(), &remote(1000)).unwrap())
        .collect();
    let start = Instant::now();
    member::with_deadline(start + Duration::from_millis(1000), || {
        for m in &members {
            let mut buf = [0u8; 4096];
            let err = m.read_at(&mut buf, 0).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
        }
    });
    let took = start.elapsed();
    // 1 s + 0.25 s grace; each with its own deadline it took 2 s.
    assert!(
        took >= Duration::from_millis(1200) && took < Duration::from_millis(1700),
        "{took:?}"
    );
    // Without a request deadline each request has its own full timeout.
    let start = Instant::now();
    let m = open_with(
        &unix_uri(&socks[0], ""),
        &OpenOptions::default(),
        &remote(1000),
    )
    .unwrap();
    let mut buf = [0u8; 4096];
    assert!(m.read_at(&mut buf, 0).is_err());
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
}

fn server_errno(err: &std::io::Error) -> u32 {
    err.get_ref()
        .and_then(|e| e.downcast_ref::<NbdServerError>())
        .unwrap_or_else(|| panic!("not a server error: {err}"))
        .errno
}

#[test]
fn server_errors_carry_errno_op_and_range() {
    let Some((dir, sock)) = socket_dir("nbdkit") else {
        return;
    };
    let trigger = dir.path().join("trigger");
    let trigger_arg = format!("error-file={}", trigger.display());
    let args = [
        "--filter=error",
        "memory",
        "8M",
        "error=ENOSPC",
        "error-rate=1",
        &trigger_arg,
    ];
    let _server = nbdkit(&sock, &args);
    let m = unix_member(&sock);
    m.write_at(&[3; 4096], 8192).unwrap();
    std::fs::write(&trigger, b"").unwrap();
    let err = m.write_at(&[3; 100], 8192).unwrap_err();
    assert_eq!(server_errno(&err), 28, "{err}");
    assert_eq!(err.kind(), ErrorKind::StorageFull);
    let text = err.to_string();
    for want in [m.name(), "write", "100 bytes", "offset 8192", "ENOSPC"] {
        assert!(text.contains(want), "{want:?} missing in {text}");
    }
    let mut buf = [0u8; 10];
    let err = m.read_at(&mut buf, 8192).unwrap_err();
    assert_eq!(server_errno(&err), 28, "{err}");
    std::fs::remove_file(&trigger).unwrap();
    m.read_at(&mut buf, 8192).unwrap();
    assert_eq!(buf, [3; 10], "errors do not break the connection");
}

#[test]
fn server_eio_on_reads() {
    let Some((_dir, sock)) = socket_dir("nbdkit") else {
        return;
    };
    let args = [
        "--filter=error",
        "memory",
        "8M",
        "error-pread=EIO",
        "error-pread-rate=1",
    ];
    let _server = nbdkit(&sock, &args);
    let m = unix_member(&sock);
    m.write_at(&[3; 4096], 0).unwrap();
    let mut buf = [0u8; 4096];
    let err = m.read_at(&mut buf, 0).unwrap_err();
    assert_eq!(server_errno(&err), 5, "{err}");
    assert!(err.to_string().contains("EIO"), "{err}");
}

fn start_file_server(sock: &Path, file: &Path) -> Server {
    nbdkit(sock, &["file", file.to_str().unwrap()])
}

#[test]
fn reconnect_after_the_server_restarts() {
    if !testsupport::require_tool("nbdkit") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file: PathBuf = dir.path().join("disk.img");
    std::fs::File::create(&file)
        .unwrap()
        .set_len(4 << 20)
        .unwrap();
    let sock = dir.path().join("s");
    let mut server = start_file_server(&sock, &file);
    let m: Arc<dyn Member> = unix_member(&sock);
    m.write_at(b"before", 100).unwrap();
    m.flush().unwrap();
    server.kill();
    assert!(m.write_at(b"x", 0).is_err());
    assert!(m.reconnect().is_err(), "nobody listens yet");
    let _server = start_file_server(&sock, &file);
    m.reconnect().unwrap();
    assert_eq!(read(m.as_ref(), 100, 6), b"before");
    m.write_at(b"after", 200).unwrap();
    assert_eq!(read(m.as_ref(), 200, 5), b"after");
    // A server with a different size is refused.
    drop(_server);
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    let _server = start_file_server(&sock, &file);
    let err = m.reconnect().unwrap_err();
    assert!(err.to_string().contains("size"), "{err}");
}

#[test]
fn requests_in_flight_stay_bounded() {
    let Some((_dir, sock)) = socket_dir("nbdkit") else {
        return;
    };
    let _server = nbdkit(&sock, &["--filter=delay", "memory", "8M", "rdelay=200ms"]);
    let opts = RemoteOptions {
        max_in_flight: 2,
        ..RemoteOptions::default()
    };
    let m = Arc::new(unix_nbd_member(&sock, &opts));
    let start = Instant::now();
    let readers: Vec<_> = (0..6u64)
        .map(|t| {
            let m = Arc::clone(&m);
            std::thread::spawn(move || read(m.as_ref(), t * 4096, 4096))
        })
        .collect();
    let mut max_seen = 0;
    while readers.iter().any(|r| !r.is_finished()) {
        max_seen = max_seen.max(m.in_flight());
        std::thread::sleep(Duration::from_millis(5));
    }
    for r in readers {
        assert_eq!(r.join().unwrap(), vec![0u8; 4096]);
    }
    assert_eq!(max_seen, 2, "two slots, both used, never more");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(550),
        "6 reads through 2 slots took {took:?}"
    );
}

#[test]
fn qemu_nbd_with_4k_alignment() {
    let Some((dir, file)) = with_disk("qemu-nbd") else {
        return;
    };
    let sock = dir.path().join("q");
    let image = format!(
        "driver=blkdebug,align=4096,image.driver=file,image.filename={}",
        file.display()
    );
    let _server = qemu_nbd(&sock, &["--image-opts", &image, "-t", "--shared=8"]);
    let m = unix_nbd_member(&sock, &RemoteOptions::default());
    assert!(
        m.description().contains("minimum block 4096"),
        "{}",
        m.description()
    );
    exercise(&m, &mut SimRng::new(seed()));
}

#[test]
fn server_without_flush_is_described_as_not_durable() {
    if !testsupport::require_tool("nbdkit") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = sparse_file(&dir.path().join("disk.img"), 1 << 20);
    let sock = dir.path().join("s");
    let f = file.display();
    let get_size = "get_size=echo 1048576".to_string();
    let pread =
        format!("pread=dd if={f} skip=$4 count=$3 iflag=skip_bytes,count_bytes status=none");
    let pwrite = format!("pwrite=dd of={f} seek=$4 conv=notrunc oflag=seek_bytes status=none");
    let args = [
        "eval",
        &get_size,
        &pread,
        &pwrite,
        "can_flush=exit 3",
        "can_write=exit 0",
    ];
    let _server = nbdkit(&sock, &args);
    let m = unix_nbd_member(&sock, &RemoteOptions::default());
    assert!(
        m.description().contains("NOT guaranteed"),
        "{}",
        m.description()
    );
    m.write_at(b"kept", 10).unwrap();
    m.flush().unwrap();
    assert_eq!(read(&m, 10, 4), b"kept");
}

#[test]
fn silent_server_times_out_the_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("silent");
    // Accepts connections (the kernel does, into the backlog) but never says anything.
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let start = Instant::now();
    let err = open_with(&unix_uri(&sock, ""), &OpenOptions::default(), &remote(300)).unwrap_err();
    let took = start.elapsed();
    assert!(err.to_string().contains("handshake took longer"), "{err}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
}

/// Seeded random operations against a RAM reference, on a server that refuses unaligned
/// requests (minimum block 4096): every unaligned edge goes through read-modify-write. Four
/// threads own adjacent regions whose borders fall inside blocks, and write mostly across
/// those borders, so a lost update in a shared block would show.
#[test]
fn random_ops_match_a_reference_under_min_block_size() {
    let args = [
        "--filter=blocksize-policy",
        "memory",
        "8M",
        "blocksize-minimum=4096",
        "blocksize-error-policy=error",
    ];
    let Some((_dir, _server, m)) = nbdkit_member(&args, &RemoteOptions::default()) else {
        return;
    };
    let m = Arc::new(m);
    let seed = seed();
    const REGION: u64 = (1 << 20) + 1001;
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                let mut rng = SimRng::new(seed.wrapping_add(t));
                let base = 5000 + t * REGION;
                let mut model = vec![0u8; REGION as usize];
                for _ in 0..400 {
                    let len = 1 + rng.below(9000);
                    let at = match rng.below(3) {
                        0 => 0,
                        1 => REGION - len,
                        _ => rng.below(REGION - len),
                    };
                    let range = at as usize..(at + len) as usize;
                    match rng.below(4) {
                        0 => {
                            m.write_zeroes(base + at, len).unwrap();
                            model[range].fill(0);
                        }
                        1 => {
                            m.trim(base + at, len).unwrap();
                            model[range].fill(0);
                        }
                        _ => {
                            let data = random_bytes(&mut rng, len as usize);
                            m.write_at(&data, base + at).unwrap();
                            model[range].copy_from_slice(&data);
                        }
                    }
                }
                (base, model)
            })
        })
        .collect();
    for t in threads {
        let (base, model) = t.join().unwrap();
        let got = read(m.as_ref(), base, model.len());
        let first_bad = got.iter().zip(&model).position(|(a, b)| a != b);
        assert_eq!(
            first_bad, None,
            "region at {base} differs (RAIDKIT_SEED={seed})"
        );
    }
}

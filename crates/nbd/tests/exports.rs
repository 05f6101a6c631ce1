//! Several exports on one listener (the daemon's arrays): each selected by its name with its
//! own size and flags, listed by NBD_OPT_LIST, added and removed while the listener serves,
//! a removed one's connections answered before they close.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use nbd::codec::consts::*;
use nbd::codec::*;
use nbd::{AddError, Exports, ServerConfig};

fn export_config(name: &str, read_only: bool) -> ServerConfig {
    ServerConfig {
        description: format!("array {name}"),
        read_only,
        ..config(name)
    }
}

/// GO to `name`; the export's (size, transmission flags), or the option's error reply type.
fn go_to(client: &mut RawClient, name: &str) -> Result<(u64, u16), u32> {
    client.start();
    let replies = client.option_replies(&ClientOption::Go(InfoRequest {
        name: name.into(),
        requests: vec![],
    }));
    if let [OptionReply::Error { reply_type, .. }] = replies.as_slice() {
        return Err(*reply_type);
    }
    assert_eq!(replies.last(), Some(&OptionReply::Ack), "{replies:?}");
    Ok(export_info(&replies))
}

/// Adds a writable 1 MiB RAM export named `name`.
fn add_mem(exports: &Exports, name: &str) {
    let export = Arc::new(MemExport::new(1 << 20));
    exports.add(export, export_config(name, false)).unwrap();
}

fn listed(server: &TestServer) -> Vec<(String, String)> {
    let mut client = server.connect();
    client.start();
    client
        .option_replies(&ClientOption::List { has_data: false })
        .into_iter()
        .filter_map(|r| match r {
            OptionReply::Server { name, details } => Some((name, details)),
            OptionReply::Ack => None,
            other => panic!("unexpected reply {other:?}"),
        })
        .collect()
}

fn read(client: &mut RawClient, cookie: u64, offset: u64, len: u32) -> Reply {
    client.request(CMD_READ, 0, cookie, offset, len);
    client.reply(len as usize).unwrap()
}

#[test]
fn each_export_is_selected_by_name_with_its_own_size_and_flags() {
    let exports = Exports::new();
    let (home, media) = (
        Arc::new(MemExport::new(1 << 20)),
        Arc::new(MemExport::new(3 << 20)),
    );
    exports
        .add(home.clone(), export_config("home", false))
        .unwrap();
    exports
        .add(media.clone(), export_config("media", true))
        .unwrap();
    let server = TestServer::start_exports(exports.clone(), config(""), Transport::Unix);

    assert_eq!(
        listed(&server),
        [
            ("home".to_string(), "array home".to_string()),
            ("media".to_string(), "array media".to_string())
        ]
    );
    let mut a = server.connect();
    let (size, flags) = go_to(&mut a, "home").unwrap();
    assert_eq!((size, flags & FLAG_READ_ONLY), (1 << 20, 0));
    let mut b = server.connect();
    let (size, flags) = go_to(&mut b, "media").unwrap();
    assert_eq!((size, flags & FLAG_READ_ONLY), (3 << 20, FLAG_READ_ONLY));

    // A write reaches the export it was sent to, and only that one.
    a.write(1, 4096, &[0xAB; 512], 0);
    assert_eq!(a.reply(0).unwrap().error, 0);
    assert_eq!(home.bytes.lock().unwrap()[4096..4608], [0xAB; 512]);
    assert!(media.bytes.lock().unwrap().iter().all(|&b| b == 0));
    b.write(2, 0, &[1; 512], 0);
    assert_eq!(b.reply(0).unwrap().error, EPERM, "media is read-only");

    // With two exports the default name selects neither; an unknown name is refused.
    assert_eq!(go_to(&mut server.connect(), ""), Err(REP_ERR_UNKNOWN));
    assert_eq!(go_to(&mut server.connect(), "backup"), Err(REP_ERR_UNKNOWN));
    let mut c = server.connect();
    c.start();
    c.send_option(&ClientOption::ExportName("backup".into()));
    assert!(c.is_closed(), "EXPORT_NAME of an unknown export closes");
}

#[test]
fn exports_are_added_while_serving_and_names_are_unique() {
    let exports = Exports::new();
    add_mem(&exports, "home");
    let server = TestServer::start_exports(exports.clone(), config(""), Transport::Tcp);
    // One export: the default name selects it, as with `serve`.
    assert_eq!(go_to(&mut server.connect(), "").unwrap().0, 1 << 20);

    exports
        .add(
            Arc::new(MemExport::new(2 << 20)),
            export_config("new", false),
        )
        .unwrap();
    assert_eq!(go_to(&mut server.connect(), "new").unwrap().0, 2 << 20);
    assert_eq!(listed(&server).len(), 2);

    let again = exports.add(
        Arc::new(MemExport::new(1 << 20)),
        export_config("home", false),
    );
    assert_eq!(again, Err(AddError::Duplicate("home".into())));
    let bad = ServerConfig {
        max_request_bytes: 1,
        ..export_config("bad", false)
    };
    assert!(matches!(
        exports.add(Arc::new(MemExport::new(1 << 20)), bad),
        Err(AddError::Config(_))
    ));
    assert_eq!(exports.names(), ["home", "new"]);
}

#[test]
fn a_removed_export_answers_what_it_read_then_closes_and_others_keep_serving() {
    let exports = Exports::new();
    let slow = Arc::new(MemExport {
        slow_offset: Some(8192),
        slow_for: Duration::from_millis(500),
        ..MemExport::new(1 << 20)
    });
    slow.bytes.lock().unwrap()[8192..8192 + 512].fill(0x5A);
    exports.add(slow, export_config("old", false)).unwrap();
    add_mem(&exports, "stays");
    let server = TestServer::start_exports(exports.clone(), config(""), Transport::Unix);
    let mut old = server.connect();
    go_to(&mut old, "old").unwrap();
    let mut stays = server.connect();
    go_to(&mut stays, "stays").unwrap();

    // A read in flight (the export takes 0.5 s), then the export is removed.
    old.request(CMD_READ, 0, 7, 8192, 512);
    std::thread::sleep(Duration::from_millis(100));
    let removed = exports.remove("old").expect("old is served");
    assert!(exports.remove("old").is_none());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let started = Instant::now();
    let drain = runtime.spawn(removed.drained());

    let reply = old.reply(512).unwrap();
    assert_eq!(
        (reply.cookie, reply.error),
        (7, 0),
        "the request read before is answered"
    );
    assert_eq!(reply.data, [0x5A; 512]);
    assert!(old.is_closed(), "then the connection closes");
    runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), drain).await })
        .expect("drained once its connection closed")
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "not before the reply"
    );

    assert_eq!(go_to(&mut server.connect(), "old"), Err(REP_ERR_UNKNOWN));
    assert_eq!(
        listed(&server),
        [("stays".to_string(), "array stays".to_string())]
    );
    // The other export's connection never noticed.
    assert_eq!(read(&mut stays, 9, 0, 4096).error, 0);
    // With one export left, the default name selects it.
    assert!(go_to(&mut server.connect(), "").is_ok());
}

#[test]
fn removing_an_export_nobody_uses_drains_at_once() {
    let exports = Exports::new();
    add_mem(&exports, "idle");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let removed = exports.remove("idle").unwrap();
    runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(5), removed.drained()).await })
        .expect("nothing to wait for");
    assert!(exports.names().is_empty());
}

#[test]
fn a_removed_exports_client_that_reads_no_reply_is_cut_after_the_grace() {
    let exports = Exports::new();
    let export = Arc::new(MemExport::new(1 << 20));
    let grace = Duration::from_millis(300);
    let config = ServerConfig {
        shutdown_grace: grace,
        ..export_config("deaf", false)
    };
    exports.add(export, config).unwrap();
    let server = TestServer::start_exports(exports.clone(), common::config(""), Transport::Unix);
    let mut deaf = server.connect();
    go_to(&mut deaf, "deaf").unwrap();
    // 32 MiB of replies asked for and none read: the server's writes block on the socket.
    for cookie in 0..32 {
        deaf.request(CMD_READ, 0, cookie, 0, 1 << 20);
    }
    std::thread::sleep(Duration::from_millis(200));
    let removed = exports.remove("deaf").unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let started = Instant::now();
    runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), removed.drained()).await })
        .expect("a client that reads nothing held the drain past the grace");
    let took = started.elapsed();
    assert!(took >= grace, "cut before the grace: {took:?}");
    assert!(
        took < grace + Duration::from_secs(3),
        "drained after {took:?}"
    );
}

/// The niceness of the calling thread.
fn own_nice() -> i32 {
    // SAFETY: gettid has no arguments; getpriority takes plain integers.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::getpriority(libc::PRIO_PROCESS, tid)
    }
}

/// An export whose reads answer with the niceness of the thread that runs them (one byte,
/// offset by 20 so -20..=19 fits in 0..=39).
struct NiceProbe;

impl nbd::Export for NiceProbe {
    fn size(&self) -> u64 {
        1 << 20
    }
    fn read(&self, _offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        buf.fill((own_nice() + 20) as u8);
        Ok(())
    }
    fn write(&self, _offset: u64, _data: &[u8], _fua: bool) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn trim(&self, _offset: u64, _len: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn write_zeroes(&self, _offset: u64, _len: u64, _may_trim: bool) -> std::io::Result<()> {
        Ok(())
    }
}

/// An export's `thread_nice` is the niceness of the threads running its requests (the
/// daemon's per-array `nice`); another export's on the same listener keep the process's.
#[test]
fn an_exports_request_threads_run_at_its_niceness_and_others_at_the_processs() {
    let base = own_nice();
    let niced = if base < 19 { 19 } else { 18 };
    let exports = Exports::new();
    let calm = ServerConfig {
        thread_nice: Some(niced),
        ..export_config("calm", false)
    };
    exports.add(Arc::new(NiceProbe), calm).unwrap();
    exports
        .add(Arc::new(NiceProbe), export_config("plain", false))
        .unwrap();
    let server = TestServer::start_exports(exports.clone(), config(""), Transport::Unix);
    let (mut a, mut b) = (server.connect(), server.connect());
    go_to(&mut a, "calm").unwrap();
    go_to(&mut b, "plain").unwrap();
    // Several requests in flight: each request thread of the connection is checked.
    for round in 0..4u64 {
        for cookie in 0..8 {
            a.request(CMD_READ, 0, round * 8 + cookie, 0, 512);
            b.request(CMD_READ, 0, round * 8 + cookie, 0, 512);
        }
        for _ in 0..8 {
            let (ra, rb) = (a.reply(512).unwrap(), b.reply(512).unwrap());
            assert_eq!(
                ra.data,
                vec![(niced + 20) as u8; 512],
                "calm ran at another niceness"
            );
            assert_eq!(
                rb.data,
                vec![(base + 20) as u8; 512],
                "plain's threads were niced"
            );
        }
    }
    assert_eq!(own_nice(), base, "the test's own thread was niced");
    // A niceness out of range is refused when the export is added.
    let bad = ServerConfig {
        thread_nice: Some(20),
        ..export_config("bad", false)
    };
    assert!(matches!(
        exports.add(Arc::new(NiceProbe), bad),
        Err(AddError::Config(e)) if e.field == "thread_nice"
    ));
    assert!(nbd::check_thread_nice(niced).is_ok());
    assert_eq!(own_nice(), base, "the check niced its caller");
}

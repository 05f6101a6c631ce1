//! The limits a hostile client meets, each driven by a raw socket while a well-behaved
//! client is served: connections in total and per client address, the handshake deadline
//! (silent and one-byte-at-a-time clients), the option size, the idle timeout, requests in
//! flight per connection and the reply timeout (a client that never reads its replies).
//!
//! Timing: deadlines are set short here (1 s) and every bound on how late something may
//! happen has a margin of 10 s or more for a loaded machine; nothing is asserted to happen
//! earlier than its deadline allows.

mod common;

use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::*;
use nbd::codec::consts::*;
use nbd::codec::*;
use nbd::{Export, ServerConfig, StatusExtent};

const SIZE: usize = 4 << 20;
/// How much later than its deadline something may happen on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_secs(10);

fn start(config: ServerConfig, transport: Transport) -> (Arc<MemExport>, TestServer) {
    let export = Arc::new(MemExport::new(SIZE));
    export.bytes.lock().unwrap()[..4].copy_from_slice(b"data");
    let server = TestServer::start(export.clone(), config, transport);
    (export, server)
}

/// A well-behaved client: a full handshake on a new connection, then its data.
fn served(server: &TestServer) {
    let mut c = server.connect();
    c.go(true, false);
    c.request(CMD_READ, 0, 7, 0, 4);
    let r = c.reply(4).unwrap();
    assert_eq!((r.cookie, r.error, &r.data[..]), (7, 0, &b"data"[..]));
}

/// A TCP connection to `server` from the local address `from` (any loopback address works).
fn connect_from(server: &TestServer, from: &str) -> RawClient {
    let to = server.tcp_addr.expect("a TCP server");
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: SocketAddr = format!("{from}:0").parse().unwrap();
    socket.bind(&from.into()).unwrap();
    socket.connect(&to.into()).unwrap();
    RawClient {
        stream: Box::new(TcpStream::from(socket)),
        structured: false,
    }
}

/// Reads (and drops) what the server sends until it closes the connection; how long that
/// took. Fails if it is still open after `bound`.
fn closed_within(c: &mut RawClient, bound: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        let left = bound.saturating_sub(started.elapsed());
        assert!(!left.is_zero(), "connection still open after {bound:?}");
        c.stream.set_timeout(left);
        match c.stream.read(&mut buf) {
            Ok(0) => return started.elapsed(),
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return started.elapsed(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("connection still open after {bound:?}: {e}"),
        }
    }
}

/// The greeting arrives: the server took the connection and waits for the client.
fn greeted(c: &mut RawClient) {
    c.stream.set_timeout(MARGIN);
    let g = Greeting::decode(&c.read_exact(Greeting::SIZE).unwrap()).unwrap();
    assert_eq!(g.handshake_flags, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
}

/// `n` connections that were greeted and then say nothing.
fn silent_clients(server: &TestServer, n: usize) -> Vec<RawClient> {
    let mut silent: Vec<RawClient> = (0..n).map(|_| server.connect()).collect();
    for c in &mut silent {
        greeted(c);
    }
    silent
}

/// Connects until the server greets a connection instead of closing it; how many it closed.
/// Fails after `bound`.
fn greeted_within(server: &TestServer, bound: Duration) -> usize {
    let started = Instant::now();
    let mut refused = 0;
    loop {
        let mut c = server.connect();
        c.stream.set_timeout(MARGIN);
        let mut greeting = [0u8; Greeting::SIZE];
        if c.stream.read_exact(&mut greeting).is_ok() {
            return refused;
        }
        refused += 1;
        assert!(started.elapsed() < bound, "never greeted within {bound:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn silent_connections_from_one_address_leave_the_other_slots_to_other_clients() {
    let config = ServerConfig {
        max_connections: 8,
        max_connections_per_client: 3,
        ..config("d")
    };
    let (_export, server) = start(config, Transport::Tcp);
    // 300 connections from 127.0.0.2 that never speak: three are taken, the rest closed at
    // once (before any greeting).
    let mut kept = Vec::new();
    let mut refused = 0;
    for _ in 0..300 {
        let mut c = connect_from(&server, "127.0.0.2");
        let mut first = [0u8; 1];
        c.stream.set_timeout(MARGIN);
        match c.stream.read(&mut first) {
            Ok(1) => kept.push(c),
            Ok(_) => refused += 1,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => refused += 1,
            Err(e) => panic!("neither greeted nor closed within {MARGIN:?}: {e}"),
        }
    }
    assert_eq!((kept.len(), refused), (3, 297));
    // A client from 127.0.0.1 is served while the three silent ones hold their slots.
    let started = Instant::now();
    served(&server);
    served(&server);
    assert!(started.elapsed() < MARGIN);
    // Another address takes its own three.
    let others: Vec<_> = (0..3).map(|_| connect_from(&server, "127.0.0.3")).collect();
    for mut c in others {
        greeted(&mut c);
    }
    drop(kept);
}

#[test]
fn total_limit_refuses_at_once_and_a_closed_connection_frees_its_slot() {
    // Unix-socket clients have no address: they count in the total only.
    let config = ServerConfig {
        max_connections: 4,
        max_connections_per_client: 1,
        ..config("d")
    };
    let (_export, server) = start(config, Transport::Unix);
    let mut silent = silent_clients(&server, 4);
    let mut extra = server.connect();
    closed_within(&mut extra, MARGIN);
    drop(silent.pop());
    // The slot is given back when the server sees the close: retried until then.
    greeted_within(&server, MARGIN);
}

#[test]
fn handshake_deadline_drops_silent_and_one_byte_at_a_time_clients() {
    let deadline = Duration::from_secs(1);
    let config = ServerConfig {
        handshake_timeout: deadline,
        ..config("d")
    };
    let (_export, server) = start(config, Transport::Tcp);
    let mut silent = server.connect();
    let silent_started = Instant::now();
    // One byte every 100 ms: each read succeeds, the handshake never ends.
    let server_addr = server.tcp_addr;
    let slow = std::thread::spawn(move || {
        let mut c = RawClient {
            stream: Box::new(TcpStream::connect(server_addr.unwrap()).unwrap()),
            structured: false,
        };
        let started = Instant::now();
        greeted(&mut c);
        let mut bytes = ClientFlags(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
            .encode()
            .to_vec();
        let (code, data) = ClientOption::List { has_data: false }.encode();
        let header = OptionHeader {
            option: code,
            length: data.len() as u32,
        };
        bytes.extend_from_slice(&header.encode());
        let mut sent = 0;
        for byte in bytes.iter().cycle().take(1000) {
            if io::Write::write_all(&mut c.stream, &[*byte]).is_err() {
                break; // the server closed
            }
            sent += 1;
            std::thread::sleep(Duration::from_millis(100));
            if started.elapsed() > deadline + MARGIN {
                break;
            }
        }
        (sent, started.elapsed(), closed_within(&mut c, MARGIN))
    });
    // Well-behaved clients are served meanwhile.
    served(&server);
    let closed = closed_within(&mut silent, deadline + MARGIN);
    let silent_for = silent_started.elapsed();
    assert!(
        silent_for >= deadline,
        "dropped before its deadline: {closed:?}"
    );
    let (sent, slow_for, _) = slow.join().unwrap();
    assert!(sent >= 2, "the slow client sent {sent} bytes");
    assert!(
        slow_for >= deadline && slow_for < deadline + MARGIN,
        "slow client closed after {slow_for:?}"
    );
    served(&server);
}

#[test]
fn after_the_handshake_deadline_a_client_of_a_flooded_address_gets_in() {
    // Every slot of 127.0.0.1 (and of the listener) taken by silent connections: a real
    // client from that address is refused until the deadline drops them.
    let deadline = Duration::from_secs(1);
    let config = ServerConfig {
        handshake_timeout: deadline,
        max_connections: 16,
        max_connections_per_client: 16,
        ..config("d")
    };
    let (_export, server) = start(config, Transport::Tcp);
    let silent = silent_clients(&server, 16);
    let refused = greeted_within(&server, deadline + MARGIN);
    assert!(refused >= 1, "the flood did not hold the slots");
    served(&server);
    for mut c in silent {
        closed_within(&mut c, MARGIN);
    }
}

#[test]
fn oversized_option_is_refused_with_too_big_and_the_client_dropped() {
    let config = ServerConfig {
        max_option_bytes: 16 << 10,
        ..config("d")
    };
    let (_export, server) = start(config, Transport::Tcp);
    // Only the header: the server answers without waiting for the 1 GiB.
    let mut c = server.connect();
    c.start();
    let header = OptionHeader {
        option: OPT_GO,
        length: 1 << 30,
    };
    c.send_raw(&header.encode());
    let (code, reply) = c.option_reply();
    assert_eq!(code, OPT_GO);
    let OptionReply::Error {
        reply_type,
        message,
    } = reply
    else {
        panic!("{reply:?}");
    };
    assert_eq!(reply_type, REP_ERR_TOO_BIG, "{message}");
    assert!(message.contains("16384"), "{message}");
    closed_within(&mut c, MARGIN);

    // With some of the data already sent: the same reply comes first.
    let mut c = server.connect();
    c.start();
    let header = OptionHeader {
        option: OPT_INFO,
        length: (16 << 10) + 1,
    };
    c.send_raw(&header.encode());
    c.send_raw(&[0u8; 8 << 10]);
    let (code, reply) = c.option_reply();
    assert_eq!(code, OPT_INFO);
    assert!(
        matches!(reply, OptionReply::Error { reply_type, .. } if reply_type == REP_ERR_TOO_BIG),
        "{reply:?}"
    );
    closed_within(&mut c, MARGIN);

    // EXPORT_NAME cannot be answered with an error: closed without a reply.
    let mut c = server.connect();
    c.start();
    let header = OptionHeader {
        option: OPT_EXPORT_NAME,
        length: 1 << 20,
    };
    c.send_raw(&header.encode());
    let mut rest = Vec::new();
    c.stream.set_timeout(MARGIN);
    c.stream.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "{rest:?}");

    // At the limit the option is read and answered, and the negotiation goes on.
    let mut c = server.connect();
    c.start();
    let header = OptionHeader {
        option: OPT_LIST,
        length: 16 << 10,
    };
    c.send_raw(&header.encode());
    c.send_raw(&[0u8; 16 << 10]);
    let (_, reply) = c.option_reply();
    assert!(
        matches!(reply, OptionReply::Error { reply_type, .. } if reply_type == REP_ERR_INVALID),
        "{reply:?}"
    );
    let list = c.option_replies(&ClientOption::List { has_data: false });
    assert_eq!(list.last(), Some(&OptionReply::Ack));
    served(&server);
}

#[test]
fn idle_connections_are_closed_and_busy_or_active_ones_are_not() {
    let limit = Duration::from_secs(1);
    let mut export = MemExport::new(SIZE);
    // A request at 1 MiB runs for three idle limits.
    export.slow_offset = Some(1 << 20);
    export.slow_for = 3 * limit;
    let config = ServerConfig {
        idle_timeout: Some(limit),
        ..config("d")
    };
    let server = TestServer::start(Arc::new(export), config, Transport::Unix);
    let mut idle = server.connect();
    idle.go(true, false);
    let idle_since = Instant::now();
    let mut slow = server.connect();
    slow.go(true, false);
    slow.request(CMD_READ, 0, 1, 1 << 20, 4096);
    let active = std::thread::scope(|s| {
        let active = s.spawn(|| {
            // A request every 200 ms for 3 s: never idle for the limit.
            let mut c = server.connect();
            c.go(true, false);
            let started = Instant::now();
            let mut cookie = 0;
            while started.elapsed() < 3 * limit {
                cookie += 1;
                c.request(CMD_READ, 0, cookie, 0, 512);
                let r = c.reply(512).unwrap();
                assert_eq!((r.cookie, r.error), (cookie, 0));
                std::thread::sleep(Duration::from_millis(200));
            }
            cookie
        });
        let closed = closed_within(&mut idle, limit + MARGIN);
        assert!(idle_since.elapsed() >= limit, "closed early: {closed:?}");
        active.join().unwrap()
    });
    assert!(active >= 5, "{active} requests");
    // The slow request outlived three limits in flight and is answered.
    let r = slow.reply(4096).unwrap();
    assert_eq!((r.cookie, r.error), (1, 0));
    // Then, idle, it is closed too.
    closed_within(&mut slow, limit + MARGIN);
}

/// An export whose reads at `BLOCKED_AT` wait until released, counting the calls that
/// entered.
struct Held {
    inner: MemExport,
    entered: AtomicUsize,
    released: Mutex<bool>,
    wake: Condvar,
}

const BLOCKED_AT: u64 = 1 << 20;

impl Held {
    fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.wake.notify_all();
    }
}

impl Export for Held {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if offset == BLOCKED_AT {
            self.entered.fetch_add(1, Ordering::SeqCst);
            let released = self.released.lock().unwrap();
            let _released = self.wake.wait_while(released, |r| !*r).unwrap();
        }
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        self.inner.write(offset, data, fua)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> io::Result<()> {
        self.inner.write_zeroes(offset, len, may_trim)
    }
    fn block_status(&self, offset: u64, len: u32) -> io::Result<Vec<StatusExtent>> {
        self.inner.block_status(offset, len)
    }
}

#[test]
fn requests_in_flight_per_connection_stop_the_reading_not_the_connection() {
    let held = Arc::new(Held {
        inner: MemExport::new(SIZE),
        entered: AtomicUsize::new(0),
        released: Mutex::new(false),
        wake: Condvar::new(),
    });
    held.inner.bytes.lock().unwrap()[..4].copy_from_slice(b"data");
    let config = ServerConfig {
        max_in_flight_per_conn: 4,
        ..config("d")
    };
    let server = TestServer::start(held.clone(), config, Transport::Unix);
    let mut c = server.connect();
    c.go(true, false);
    for cookie in 0..10 {
        c.request(CMD_READ, 0, cookie, BLOCKED_AT, 512);
    }
    let started = Instant::now();
    while held.entered.load(Ordering::SeqCst) < 4 {
        assert!(started.elapsed() < MARGIN, "four requests never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The other six were sent but are not read while four are in flight. (A wait cannot
    // prove a negative; a fifth call in this time would be a failure.)
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(held.entered.load(Ordering::SeqCst), 4);
    // Another connection is served meanwhile.
    served(&server);
    held.release();
    let mut cookies: Vec<u64> = (0..10).map(|_| c.reply(0).unwrap().cookie).collect();
    cookies.sort();
    assert_eq!(cookies, (0..10).collect::<Vec<_>>());
    assert_eq!(held.entered.load(Ordering::SeqCst), 10);
}

#[test]
fn a_client_that_never_reads_its_replies_is_cut_and_frees_the_buffer_budget() {
    let limit = Duration::from_secs(1);
    let config = ServerConfig {
        max_request_bytes: 1 << 20,
        max_buffer_bytes: 2 << 20,
        reply_timeout: Some(limit),
        ..config("d")
    };
    let (_export, server) = start(config, Transport::Unix);
    // 32 reads of 1 MiB, never read: the socket buffers fill, a reply write stalls holding
    // its buffer, and the others wait for the 2 MiB budget.
    let mut hog = server.connect();
    hog.go(false, false);
    for cookie in 0..32 {
        hog.request(CMD_READ, 0, cookie, 0, 1 << 20);
    }
    // Another client's read needs the budget: served once the stalled connection is cut.
    let started = Instant::now();
    served(&server);
    assert!(started.elapsed() < limit + MARGIN);
    // The hog is cut: checked without reading (reading its replies would let them through,
    // and a client that reads is rightly not cut; the other client may have been served
    // before the hog's replies stalled).
    hog.hung_up_within(limit + MARGIN);

    // A client that reads its replies slowly, but reads them, is not cut.
    let mut slow = server.connect();
    slow.go(false, false);
    for cookie in 0..8 {
        slow.request(CMD_READ, 0, cookie, 0, 1 << 20);
    }
    for _ in 0..8 {
        let magic = slow.read_exact(16).unwrap();
        assert_eq!(&magic[4..8], &[0; 4], "error in {magic:?}");
        let mut left = 1 << 20;
        while left > 0 {
            let n = left.min(256 << 10);
            slow.read_exact(n).unwrap();
            left -= n;
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

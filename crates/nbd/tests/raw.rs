//! The server driven byte by byte: handshake answers, every bad input the spec names, and
//! that a misbehaving connection never disturbs another.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use nbd::codec::consts::*;
use nbd::codec::*;

const SIZE: usize = 4 << 20;

fn server(transport: Transport) -> (Arc<MemExport>, TestServer) {
    let export = Arc::new(MemExport::new(SIZE));
    let server = TestServer::start(export.clone(), config("disk0"), transport);
    (export, server)
}

/// A fresh connection reads back what `offset` holds, proving the server still serves.
fn still_serves(server: &TestServer, offset: u64, expected: &[u8]) {
    let mut c = server.connect();
    c.go(true, false);
    c.request(CMD_READ, 0, 99, offset, expected.len() as u32);
    let r = c.reply(expected.len()).unwrap();
    assert_eq!((r.cookie, r.error), (99, 0));
    assert_eq!(r.data, expected);
}

#[test]
fn options_are_answered_and_negotiation_goes_on() {
    let (_export, server) = server(Transport::Unix);
    let mut c = server.connect();
    c.start();
    let list = c.option_replies(&ClientOption::List { has_data: false });
    let server_entry = OptionReply::Server {
        name: "disk0".into(),
        details: "test export".into(),
    };
    assert_eq!(list, vec![server_entry, OptionReply::Ack]);
    for unsupported in [
        ClientOption::StartTls { has_data: false },
        ClientOption::ExtendedHeaders,
        ClientOption::Unknown(4242),
    ] {
        c.expect_option_error(&unsupported, REP_ERR_UNSUP);
    }
    let unknown = InfoRequest {
        name: "nope".into(),
        requests: vec![],
    };
    c.expect_option_error(&ClientOption::Info(unknown), REP_ERR_UNKNOWN);
    c.expect_option_error(&ClientOption::List { has_data: true }, REP_ERR_INVALID);
    // Meta contexts need structured replies first.
    let meta = MetaContextRequest {
        name: "disk0".into(),
        queries: vec!["base:allocation".into()],
    };
    c.expect_option_error(&ClientOption::SetMetaContext(meta.clone()), REP_ERR_INVALID);
    assert_eq!(
        c.option_replies(&ClientOption::StructuredReply { has_data: false }),
        vec![OptionReply::Ack]
    );
    let listed = c.option_replies(&ClientOption::ListMetaContext(MetaContextRequest {
        name: "".into(),
        queries: vec![],
    }));
    assert_eq!(
        listed,
        vec![
            OptionReply::MetaContext {
                id: 0,
                name: "base:allocation".into()
            },
            OptionReply::Ack
        ]
    );
    let set = c.option_replies(&ClientOption::SetMetaContext(meta));
    assert_eq!(
        set,
        vec![
            OptionReply::MetaContext {
                id: 1,
                name: "base:allocation".into()
            },
            OptionReply::Ack
        ]
    );
    let info = InfoRequest {
        name: "disk0".into(),
        requests: vec![INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE],
    };
    let r = c.option_replies(&ClientOption::Info(info));
    assert!(
        r.contains(&OptionReply::Info(Info::BlockSize {
            minimum: 1,
            preferred: 256 << 10,
            maximum: 32 << 20
        })),
        "{r:?}"
    );
    assert!(r.contains(&OptionReply::Info(Info::Name("disk0".into()))));
    assert!(r.contains(&OptionReply::Info(Info::Description("test export".into()))));
    let flags = FLAG_HAS_FLAGS
        | FLAG_SEND_FLUSH
        | FLAG_SEND_FUA
        | FLAG_SEND_TRIM
        | FLAG_SEND_WRITE_ZEROES
        | FLAG_SEND_FAST_ZERO
        | FLAG_SEND_CACHE
        | FLAG_SEND_DF
        | FLAG_CAN_MULTI_CONN;
    assert!(
        r.contains(&OptionReply::Info(Info::Export {
            size: SIZE as u64,
            transmission_flags: flags
        })),
        "{r:?}"
    );
    assert_eq!(
        c.option_replies(&ClientOption::Abort),
        vec![OptionReply::Ack]
    );
    assert!(c.is_closed());
}

#[test]
fn export_name_with_and_without_zeroes() {
    let (_export, server) = server(Transport::Tcp);
    for no_zeroes in [true, false] {
        let mut c = server.connect();
        c.read_exact(Greeting::SIZE).unwrap();
        let flags = if no_zeroes {
            FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES
        } else {
            FLAG_C_FIXED_NEWSTYLE
        };
        c.send_raw(&ClientFlags(flags).encode());
        c.send_option(&ClientOption::ExportName("disk0".into()));
        let len = if no_zeroes { 10 } else { 134 };
        let reply = ExportNameReply::decode(&c.read_exact(len).unwrap(), no_zeroes).unwrap();
        assert_eq!(reply.size, SIZE as u64);
        assert_eq!(
            reply.transmission_flags & FLAG_SEND_DF,
            0,
            "no DF without structured replies"
        );
        c.write(1, 4096, b"hello", 0);
        assert_eq!(c.reply(0).unwrap().error, 0);
        c.request(CMD_READ, 0, 2, 4096, 5);
        assert_eq!(c.reply(5).unwrap().data, b"hello");
    }
    // An unknown name cannot be refused politely: the connection is closed.
    let mut c = server.connect();
    c.start();
    c.send_option(&ClientOption::ExportName("other".into()));
    assert!(c.is_closed());
}

#[test]
fn every_command_works_with_simple_and_structured_replies() {
    let (export, server) = server(Transport::Unix);
    for structured in [false, true] {
        let mut c = server.connect();
        c.go(structured, structured);
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        c.write(1, 12_345, &data, CMD_FLAG_FUA);
        assert_eq!(c.reply(0).unwrap(), Reply::done(1));
        assert!(export.fua_writes.load(Ordering::SeqCst) >= 1);
        c.request(CMD_READ, 0, 2, 12_345, data.len() as u32);
        assert_eq!(c.reply(data.len()).unwrap().data, data);
        let flushes = export.flushes.load(Ordering::SeqCst);
        c.request(CMD_FLUSH, 0, 3, 0, 0);
        assert_eq!(c.reply(0).unwrap().error, 0);
        assert_eq!(export.flushes.load(Ordering::SeqCst), flushes + 1);
        c.request(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 4, 12_345, 1000);
        c.request(CMD_TRIM, CMD_FLAG_FUA, 5, 20_000, 1000);
        c.request(CMD_CACHE, 0, 6, 0, 1 << 20);
        for _ in 0..3 {
            assert_eq!(c.reply(0).unwrap().error, 0);
        }
        c.request(CMD_READ, 0, 7, 12_345, 9000);
        let back = c.reply(9000).unwrap().data;
        assert!(back[..1000].iter().all(|b| *b == 0));
        assert_eq!(back[1000..7655], data[1000..7655]);
        assert!(back[7655..8655].iter().all(|b| *b == 0));
        if structured {
            c.request(CMD_BLOCK_STATUS, 0, 8, 1 << 20, 1 << 20);
            let r = c.reply(0).unwrap();
            assert_eq!(
                r.descriptors,
                vec![BlockDescriptor {
                    length: 1 << 20,
                    status: STATE_ZERO
                }]
            );
            c.request(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 9, 16_384, 100);
            assert_eq!(
                c.reply(0).unwrap().descriptors,
                vec![BlockDescriptor {
                    length: 100,
                    status: 0
                }]
            );
        }
        c.request(CMD_DISC, 0, 10, 0, 0);
        assert!(c.is_closed());
        export.bytes.lock().unwrap().fill(0);
    }
}

#[test]
fn bad_magic_closes_only_that_connection() {
    let (_export, server) = server(Transport::Tcp);
    let mut good = server.connect();
    good.go(false, false);
    good.write(1, 0, b"kept", 0);
    assert_eq!(good.reply(0).unwrap().error, 0);
    let mut bad = server.connect();
    bad.go(false, false);
    let mut req = Request {
        flags: 0,
        kind: CMD_READ,
        cookie: 1,
        offset: 0,
        length: 4,
    }
    .encode();
    req[0] = 0x12;
    bad.send_raw(&req);
    assert!(bad.is_closed());
    // The earlier connection and a new one both still work.
    good.request(CMD_READ, 0, 2, 0, 4);
    assert_eq!(good.reply(4).unwrap().data, b"kept");
    still_serves(&server, 0, b"kept");
}

#[test]
fn truncated_request_and_payload_close_only_that_connection() {
    let (export, server) = server(Transport::Unix);
    let mut c = server.connect();
    c.go(false, false);
    c.send_raw(&header(CMD_READ, 4)[..13]);
    drop(c);
    let mut c = server.connect();
    c.go(false, false);
    // A write whose payload never fully arrives must not be applied.
    c.send_raw(&header(CMD_WRITE, 8));
    c.send_raw(b"half");
    drop(c);
    std::thread::sleep(Duration::from_millis(100));
    assert!(export.bytes.lock().unwrap()[..8].iter().all(|b| *b == 0));
    still_serves(&server, 0, &[0; 8]);
}

#[test]
fn client_mistakes_get_errors_and_the_stream_stays_in_step() {
    let (_export, server) = server(Transport::Tcp);
    for structured in [false, true] {
        let mut c = server.connect();
        c.go(structured, false);
        let cases: [(u16, u16, u64, u32, u32); 9] = [
            (42, 0, 0, 512, EINVAL),                       // unknown command
            (CMD_READ, CMD_FLAG_NO_HOLE, 0, 512, EINVAL),  // inapplicable flag
            (CMD_READ, 1 << 9, 0, 512, EINVAL),            // unknown flag
            (CMD_READ, 0, SIZE as u64 - 1, 2, EINVAL),     // past the end
            (CMD_TRIM, 0, SIZE as u64, 1, EINVAL),         // trim past the end
            (CMD_WRITE_ZEROES, 0, SIZE as u64, 1, ENOSPC), // zeroes past the end
            (CMD_READ, 0, 0, (32 << 20) + 1, EINVAL),      // over the maximum size
            (CMD_FLUSH, 0, 1, 0, EINVAL),                  // flush with an offset
            (CMD_BLOCK_STATUS, 0, 0, 512, EINVAL),         // no meta context negotiated
        ];
        for (i, (kind, flags, offset, length, errno)) in cases.into_iter().enumerate() {
            c.request(kind, flags, i as u64, offset, length);
            let r = c.reply(0).unwrap();
            assert_eq!((r.cookie, r.error), (i as u64, errno), "case {i}");
        }
        // Refused writes: the payload is skipped, so the next request parses correctly.
        c.write(100, SIZE as u64 - 2, b"abcd", 0);
        assert_eq!(c.reply(0).unwrap().error, ENOSPC);
        let huge = vec![7u8; (32 << 20) + 1];
        c.write(101, 0, &huge, 0);
        assert_eq!(c.reply(0).unwrap().error, EINVAL);
        c.write(102, 0, b"fine", 0);
        assert_eq!(c.reply(0).unwrap(), Reply::done(102));
        c.request(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 103, 0, 4);
        assert_eq!(
            c.reply(0).unwrap().error,
            ENOTSUP,
            "MemExport cannot zero fast"
        );
        c.request(CMD_READ, 0, 104, 0, 4);
        assert_eq!(c.reply(4).unwrap().data, b"fine");
    }
}

#[test]
fn read_only_export_refuses_writes() {
    let export = Arc::new(MemExport::new(SIZE));
    let config = nbd::ServerConfig {
        read_only: true,
        ..config("ro")
    };
    let server = TestServer::start(export.clone(), config, Transport::Unix);
    let mut c = server.connect();
    let (_, flags) = c.go(true, false);
    assert_ne!(flags & FLAG_READ_ONLY, 0);
    assert_eq!(
        flags & (FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FUA),
        0
    );
    c.write(1, 0, b"nope", 0);
    assert_eq!(c.reply(0).unwrap().error, EPERM);
    c.request(CMD_TRIM, 0, 2, 0, 4);
    assert_eq!(c.reply(0).unwrap().error, EPERM);
    c.request(CMD_WRITE_ZEROES, 0, 3, 0, 4);
    assert_eq!(c.reply(0).unwrap().error, EPERM);
    c.request(CMD_READ, 0, 4, 0, 4);
    assert_eq!(c.reply(4).unwrap().data, [0; 4]);
    assert!(export.bytes.lock().unwrap().iter().all(|b| *b == 0));
}

#[test]
fn oversized_option_and_bad_client_flags_close_the_connection() {
    let (_export, server) = server(Transport::Unix);
    let mut c = server.connect();
    c.start();
    c.send_raw(
        &OptionHeader {
            option: OPT_GO,
            length: 1 << 30,
        }
        .encode(),
    );
    assert!(c.is_closed());
    let mut c = server.connect();
    c.read_exact(Greeting::SIZE).unwrap();
    c.send_raw(&ClientFlags(1 << 7).encode());
    assert!(c.is_closed());
    let mut c = server.connect();
    c.start();
    c.send_raw(&[0x49, 0x48, 0x41, 0x56, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0]);
    assert!(c.is_closed(), "bad option magic");
    still_serves(&server, 0, &[0; 16]);
}

#[test]
fn replies_go_out_as_requests_complete() {
    let mut export = MemExport::new(SIZE);
    export.slow_offset = Some(1 << 20);
    let server = TestServer::start(Arc::new(export), config("d"), Transport::Tcp);
    let mut c = server.connect();
    c.go(true, false);
    c.request(CMD_READ, 0, 1, 1 << 20, 4096); // slow
    c.request(CMD_READ, 0, 2, 0, 4096); // fast
    assert_eq!(
        c.reply(0).unwrap().cookie,
        2,
        "the fast read is answered first"
    );
    assert_eq!(c.reply(0).unwrap().cookie, 1);
}

#[test]
fn shutdown_answers_requests_in_flight_then_returns() {
    let mut export = MemExport::new(SIZE);
    export.slow_offset = Some(0);
    let mut server = TestServer::start(Arc::new(export), config("d"), Transport::Unix);
    let mut c = server.connect();
    c.go(false, false);
    c.write(1, 0, &[5; 512], 0);
    std::thread::sleep(Duration::from_millis(50)); // let the server pick it up
    let started = Instant::now();
    server.signal_stop();
    let r = c.reply(0).unwrap();
    assert_eq!((r.cookie, r.error), (1, 0));
    assert!(
        c.is_closed(),
        "connection closes once in-flight requests are answered"
    );
    server.stop();
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn many_connections_with_many_requests_in_flight() {
    let seed = seed();
    let (export, server) = server(Transport::Unix);
    let server = Arc::new(server);
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let server = server.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(seed ^ t);
                let mut c = server.connect();
                c.go(t % 2 == 0, false);
                let region = t * (1 << 20);
                let mut model = vec![0u8; 1 << 20];
                for round in 0..20u64 {
                    // 16 writes in flight (to disjoint 64 KiB slots: concurrent overlapping
                    // writes have no defined order), then check every reply arrived.
                    for i in 0..16u64 {
                        let len = 1 + rng.below(16 << 10) as usize;
                        let at = (i * 65536 + rng.below(65536 - len as u64)) as usize;
                        rng.fill(&mut model[at..at + len]);
                        c.write(round * 100 + i, region + at as u64, &model[at..at + len], 0);
                    }
                    let mut cookies: Vec<u64> =
                        (0..16).map(|_| c.reply(0).unwrap().cookie).collect();
                    cookies.sort();
                    assert_eq!(
                        cookies,
                        (0..16).map(|i| round * 100 + i).collect::<Vec<_>>()
                    );
                }
                for i in 0..16u64 {
                    c.request(CMD_READ, 0, i, region + i * 65536, 65536);
                }
                for _ in 0..16 {
                    let r = c.reply(65536).unwrap();
                    let at = r.cookie as usize * 65536;
                    assert!(
                        r.data == model[at..at + 65536],
                        "data differs: seed {seed} thread {t}"
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
    assert!(export.bytes.lock().unwrap()[4 << 20..].is_empty());
}

/// Requests sent in the same packet as EXPORT_NAME (before its reply) are read by the
/// handshake's buffer: transmission must start from those bytes, not lose them.
#[test]
fn requests_pipelined_behind_the_handshake_are_served() {
    let (_export, server) = server(Transport::Unix);
    let mut c = server.connect();
    c.read_exact(Greeting::SIZE).unwrap();
    let mut bytes = ClientFlags(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
        .encode()
        .to_vec();
    let (code, data) = ClientOption::ExportName("disk0".into()).encode();
    let header = OptionHeader {
        option: code,
        length: data.len() as u32,
    };
    bytes.extend_from_slice(&header.encode());
    bytes.extend_from_slice(&data);
    let write = Request {
        flags: 0,
        kind: CMD_WRITE,
        cookie: 1,
        offset: 8192,
        length: 6,
    };
    bytes.extend_from_slice(&write.encode());
    bytes.extend_from_slice(b"pipeln");
    c.send_raw(&bytes);
    ExportNameReply::decode(&c.read_exact(10).unwrap(), true).unwrap();
    assert_eq!(c.reply(0).unwrap(), Reply::done(1));
    c.request(CMD_READ, 0, 2, 8192, 6);
    assert_eq!(c.reply(6).unwrap().data, b"pipeln");
}

/// With one request in flight per connection the server reads the next request only after
/// answering the previous one, and every reply still arrives, in order.
#[test]
fn one_request_in_flight_serves_a_queue_in_order() {
    let export = Arc::new(MemExport::new(SIZE));
    let config = nbd::ServerConfig {
        max_in_flight_per_conn: 1,
        max_blocking_calls: 1,
        ..config("one")
    };
    let server = TestServer::start(export, config, Transport::Tcp);
    let mut c = server.connect();
    c.go(true, false);
    for i in 0..32u64 {
        c.write(i, i * 512, &[i as u8; 512], 0);
    }
    for i in 0..32u64 {
        c.request(CMD_READ, 0, 100 + i, i * 512, 512);
    }
    let cookies: Vec<u64> = (0..32).map(|_| c.reply(0).unwrap().cookie).collect();
    assert_eq!(cookies, (0..32).collect::<Vec<_>>());
    for i in 0..32u64 {
        let r = c.reply(512).unwrap();
        assert_eq!(r.cookie, 100 + i);
        assert_eq!(r.data, vec![i as u8; 512]);
    }
}

/// A client that stops mid-way through a large write payload is cut off and the server
/// still shuts down promptly (the thread blocked in the payload read is woken).
#[test]
fn shutdown_wakes_a_thread_blocked_in_a_payload_read() {
    let (export, mut server) = server(Transport::Unix);
    let mut c = server.connect();
    c.go(false, false);
    c.send_raw(&header(CMD_WRITE, 1 << 20));
    c.send_raw(&[9u8; 4096]);
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    server.stop();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(c.is_closed());
    assert!(
        export.bytes.lock().unwrap().iter().all(|b| *b == 0),
        "partial write applied"
    );
}

/// The header of request `kind` for `length` bytes at offset 0 (cookie 1, no flags).
fn header(kind: u16, length: u32) -> [u8; 28] {
    Request {
        flags: 0,
        kind,
        cookie: 1,
        offset: 0,
        length,
    }
    .encode()
}

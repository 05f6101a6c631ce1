//! Writes the seed corpora (`fuzz/corpus/TARGET/`): valid messages and images made with the
//! project's own encoders, so each target starts past its magic numbers and checksums.
//! `cargo run --release --bin make-seeds -- fuzz/corpus` (scripts/fuzz.sh seeds).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use member::{MemMember, Member};
use nbd_codec::consts::*;
use nbd_codec::{
    Chunk, ChunkHeader, ClientFlags, ClientOption, ExportNameReply, Greeting, Info, InfoRequest,
    MetaContextRequest, OptionReply, Request, SimpleReply,
};
use raidkit_fuzz::join_chunks;

fn main() {
    let root = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    let mut w = Writer { root };
    nbd_handshake(&mut w);
    nbd_requests(&mut w);
    member_replies(&mut w);
    codec_replies(&mut w);
    disk(&mut w);
    config(&mut w);
}

struct Writer {
    root: PathBuf,
}

impl Writer {
    fn put(&mut self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.root.join(target);
        std::fs::create_dir_all(&dir).expect("create corpus directory");
        let path: &Path = &dir.join(name);
        std::fs::write(path, bytes).expect("write seed");
    }
}

fn request(kind: u16, flags: u16, cookie: u64, offset: u64, length: u32) -> Vec<u8> {
    Request {
        flags,
        kind,
        cookie,
        offset,
        length,
    }
    .encode()
    .to_vec()
}

fn go(name: &str) -> ClientOption {
    ClientOption::Go(InfoRequest {
        name: name.into(),
        requests: vec![INFO_BLOCK_SIZE, INFO_DESCRIPTION, INFO_NAME],
    })
}

fn meta(name: &str) -> MetaContextRequest {
    MetaContextRequest {
        name: name.into(),
        queries: vec![META_BASE_ALLOCATION.into()],
    }
}

/// A mix of every command, valid and not, for `rw` (1000 bytes short of 196 KiB).
fn requests() -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(request(CMD_READ, 0, 1, 0, 4096));
    out.extend(request(CMD_WRITE, CMD_FLAG_FUA, 2, 4096, 512));
    out.extend([0xA5; 512]);
    out.extend(request(CMD_FLUSH, 0, 3, 0, 0));
    out.extend(request(CMD_TRIM, 0, 4, 8192, 8192));
    out.extend(request(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 5, 0, 65536));
    out.extend(request(CMD_CACHE, 0, 6, 0, 4096));
    out.extend(request(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 7, 0, 65536));
    out.extend(request(CMD_READ, CMD_FLAG_DF, 8, 196 << 10, 2000));
    out.extend(request(CMD_WRITE, 0, 9, (196 << 10) - 100, 100));
    out.extend([0x5A; 100]);
    out.extend(request(CMD_DISC, 0, 10, 0, 0));
    out
}

fn nbd_handshake(w: &mut Writer) {
    let flags = ClientFlags(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).encode();
    let mut list_info_go = flags.to_vec();
    list_info_go.extend(ClientOption::List { has_data: false }.encode_message());
    list_info_go.extend(
        ClientOption::Info(InfoRequest {
            name: "ro".into(),
            requests: vec![],
        })
        .encode_message(),
    );
    list_info_go.extend(go("rw").encode_message());
    list_info_go.extend(requests());
    w.put("nbd_handshake", "list-info-go", &list_info_go);

    let mut structured = flags.to_vec();
    structured.extend(ClientOption::StructuredReply { has_data: false }.encode_message());
    structured.extend(ClientOption::ListMetaContext(meta("rw")).encode_message());
    structured.extend(ClientOption::SetMetaContext(meta("rw")).encode_message());
    structured.extend(go("rw").encode_message());
    structured.extend(requests());
    w.put("nbd_handshake", "structured-meta-go", &structured);

    let mut export_name = ClientFlags(FLAG_C_FIXED_NEWSTYLE).encode().to_vec();
    export_name.extend(ClientOption::ExportName("ro".into()).encode_message());
    export_name.extend(request(CMD_READ, 0, 1, 0, 512));
    export_name.extend(request(CMD_WRITE, 0, 2, 0, 4));
    export_name.extend([1, 2, 3, 4]);
    w.put("nbd_handshake", "export-name-ro", &export_name);

    let mut refused = flags.to_vec();
    refused.extend(ClientOption::StartTls { has_data: false }.encode_message());
    refused.extend(ClientOption::ExtendedHeaders.encode_message());
    refused.extend(ClientOption::Unknown(0x1234).encode_message());
    refused.extend(go("no-such-export").encode_message());
    refused.extend(ClientOption::Abort.encode_message());
    w.put("nbd_handshake", "refused-then-abort", &refused);
}

fn nbd_requests(w: &mut Writer) {
    for choice in [0x00u8, 0x03, 0x04, 0x08, 0x13] {
        let mut input = vec![choice];
        input.extend(requests());
        w.put("nbd_requests", &format!("mix-{choice:02x}"), &input);
    }
    // A pipeline deeper than the server's requests in flight.
    let mut deep = vec![0x01u8];
    for cookie in 0..32u64 {
        deep.extend(request(CMD_READ, 0, cookie, cookie * 4096, 4096));
    }
    w.put("nbd_requests", "deep-reads", &deep);
}

/// What a good server answers to `raidkit_fuzz::exercise`: the greeting, the GO replies,
/// then a simple reply per request in order (cookies from 1).
fn member_replies(w: &mut Writer) {
    let size: u64 = 1 << 20;
    let flags = FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FUA;
    for (name, minimum, maximum) in [("go-byte", 1u32, 1u32 << 20), ("go-512-64k", 512, 65536)] {
        let mut chunks = vec![Greeting {
            handshake_flags: FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES,
        }
        .encode()
        .to_vec()];
        let mut reply = OptionReply::Info(Info::Export {
            size,
            transmission_flags: flags,
        })
        .encode(OPT_GO);
        reply.extend(
            OptionReply::Info(Info::BlockSize {
                minimum,
                preferred: 4096,
                maximum,
            })
            .encode(OPT_GO),
        );
        reply.extend(OptionReply::Ack.encode(OPT_GO));
        chunks.push(reply);
        // read 4096, write 4096, read 1000 at 1, write 1000 at 513, flush, trim and
        // write-zeroes, the big read in pieces, the tail: data for reads.
        let reads = [4096usize, 0, 1000, 0, 0, 0, 0];
        for (i, data) in reads.iter().enumerate() {
            let mut r = SimpleReply {
                error: 0,
                cookie: i as u64 + 1,
            }
            .encode()
            .to_vec();
            r.extend(std::iter::repeat_n(0x42, *data));
            chunks.push(r);
        }
        w.put("member_replies", name, &join_chunks(&chunks));
    }
    // A server without NBD_OPT_GO: EXPORT_NAME's reply, then an error for the first read.
    let chunks = vec![
        Greeting {
            handshake_flags: FLAG_FIXED_NEWSTYLE,
        }
        .encode()
        .to_vec(),
        OptionReply::Error {
            reply_type: REP_ERR_UNSUP,
            message: "no GO".into(),
        }
        .encode(OPT_GO),
        ExportNameReply {
            size: 65536,
            transmission_flags: FLAG_HAS_FLAGS,
            no_zeroes: false,
        }
        .encode(),
        SimpleReply {
            error: EIO,
            cookie: 1,
        }
        .encode()
        .to_vec(),
    ];
    w.put("member_replies", "export-name-eio", &join_chunks(&chunks));
}

fn codec_replies(w: &mut Writer) {
    let mut put = |name: &str, kind: u8, bytes: &[u8]| {
        let mut input = vec![kind];
        input.extend_from_slice(bytes);
        w.put("codec_replies", name, &input);
    };
    put("greeting", 0, &Greeting { handshake_flags: 3 }.encode());
    put(
        "rep-server",
        1,
        &OptionReply::Server {
            name: "rw".into(),
            details: "fuzz".into(),
        }
        .encode(OPT_LIST),
    );
    put(
        "rep-info",
        1,
        &OptionReply::Info(Info::BlockSize {
            minimum: 1,
            preferred: 4096,
            maximum: 1 << 25,
        })
        .encode(OPT_GO),
    );
    put(
        "rep-meta",
        1,
        &OptionReply::MetaContext {
            id: 1,
            name: META_BASE_ALLOCATION.into(),
        }
        .encode(OPT_SET_META_CONTEXT),
    );
    put(
        "rep-error",
        1,
        &OptionReply::Error {
            reply_type: REP_ERR_POLICY,
            message: "no".into(),
        }
        .encode(OPT_GO),
    );
    put(
        "export-name",
        2,
        &ExportNameReply {
            size: 1 << 30,
            transmission_flags: 1,
            no_zeroes: true,
        }
        .encode(),
    );
    put(
        "simple",
        3,
        &SimpleReply {
            error: 0,
            cookie: 7,
        }
        .encode(),
    );
    put(
        "chunk-data",
        4,
        &Chunk::OffsetData {
            offset: 4096,
            data: vec![1; 64],
        }
        .encode(7, REPLY_FLAG_DONE),
    );
    put(
        "chunk-hole",
        4,
        &Chunk::OffsetHole {
            offset: 0,
            length: 4096,
        }
        .encode(7, 0),
    );
    put(
        "chunk-status",
        4,
        &Chunk::BlockStatus {
            context_id: 1,
            descriptors: vec![nbd_codec::BlockDescriptor {
                length: 4096,
                status: 3,
            }],
        }
        .encode(7, REPLY_FLAG_DONE),
    );
    put(
        "chunk-error",
        4,
        &Chunk::ErrorOffset {
            error: EIO,
            message: "bad".into(),
            offset: 512,
        }
        .encode(7, REPLY_FLAG_DONE),
    );
    let _ = ChunkHeader::SIZE;
}

fn disk(w: &mut Writer) {
    use layout::Level;
    for (level, count, name) in [
        (Level::Raid1, 2, "raid1"),
        (Level::Raid5, 3, "raid5"),
        (Level::Raid6, 4, "raid6"),
        (Level::Raid0, 2, "raid0"),
    ] {
        let members: Vec<Arc<dyn Member>> = (0..count)
            .map(|i| {
                Arc::new(MemMember::new(&format!("m{i}"), 64 << 20).expect("member"))
                    as Arc<dyn Member>
            })
            .collect();
        let mut opts = ondisk::CreateOptions::new(level, name);
        opts.force = true;
        opts.assume_clean = true;
        if level != Level::Raid0 {
            opts.bitmap_region_bytes = Some(64 << 10);
        }
        let sbs = ondisk::create(&members, &opts).expect("create");
        let mut input = vec![0u8];
        for sb in &sbs {
            input.extend_from_slice(&sb.encode()[..]);
        }
        w.put("superblock", name, &input);
        if let Some(at) = sbs[0].bitmap {
            // The superblock, then its bitmap area as written (all clear), one bit set.
            let mut area = vec![0u8; at.bytes as usize];
            members[0]
                .read_at(&mut area, at.offset_bytes)
                .expect("read bitmap");
            area[0] = 0x81;
            let mut input = vec![0u8];
            input.extend_from_slice(&sbs[0].encode()[..]);
            input.extend_from_slice(&area);
            w.put("bitmap", name, &input);
        }
    }
    // A write-back journal with records of each kind, and a write-through one.
    for mode in [journal::Mode::WriteBack, journal::Mode::WriteThrough] {
        let m: Arc<dyn Member> = Arc::new(MemMember::new("journal", 2 << 20).expect("member"));
        let sb = journal::format(m.as_ref(), uuid::Uuid::new_v4(), mode).expect("format");
        let empty = journal::scan(m.as_ref(), &sb, |_, _| Ok(())).expect("scan");
        let j = journal::Journal::start(Arc::clone(&m), sb, &empty).expect("start");
        let ops = [
            journal::MemberOp::Write {
                role: 0,
                offset: 0,
                data: &[7; 600],
            },
            journal::MemberOp::Zero {
                role: 1,
                offset: 4096,
                len: 4096,
            },
        ];
        j.append(&[journal::Record::MemberOps(ops.to_vec())])
            .expect("append");
        let write = j
            .append(&[journal::Record::ArrayWrite {
                offset: 8192,
                data: &[9; 1000],
            }])
            .expect("append");
        if mode == journal::Mode::WriteBack {
            // A write-back apply's stripe: parity, and data by reference to the write above.
            let apply = [
                journal::MemberOp::FromRecord {
                    role: 0,
                    offset: 0,
                    len: 1000,
                    seq: write.first,
                    array_offset: 8192,
                },
                journal::MemberOp::Write {
                    role: 2,
                    offset: 0,
                    data: &[3; 1000],
                },
            ];
            j.append(&[journal::Record::StripeApply(apply.to_vec())])
                .expect("append");
        }
        drop(j);
        let sb = journal::read_superblock(m.as_ref()).expect("superblock");
        let mut image = vec![0u8; (journal::RING_OFFSET + 8192) as usize];
        m.read_at(&mut image[..journal::RING_OFFSET as usize], 0)
            .expect("read");
        m.read_at(
            &mut image[journal::RING_OFFSET as usize..],
            journal::RING_OFFSET + sb.tail_offset,
        )
        .expect("read ring");
        let mut input = vec![0u8];
        input.extend_from_slice(&image);
        let name = match mode {
            journal::Mode::WriteBack => "write-back-apply",
            journal::Mode::WriteThrough => "write-through",
        };
        w.put("journal", name, &input);
    }
}

fn config(w: &mut Writer) {
    w.put(
        "config",
        "full",
        br#"[daemon]
listen = ["127.0.0.1:10809", "[::1]:10810"]
admin = "/run/raidkit/admin.sock"
metrics = "127.0.0.1:9090"
log_format = "json"

[alerts]
program = "/usr/local/bin/raid-alert"
mail_to = "root@localhost"
syslog = true

[[array]]
name = "backup"
members = ["/dev/sdb", "/dev/sdc", "/dev/sdd"]
spares = ["/dev/sde"]
spare_group = "main"
journal = "/dev/nvme0n1p2"
cache_size = "256M"
read_ahead = "adaptive"
read_ahead_window = "4M"
buffer_memory = "128M"
speed_min = "1M"
speed_max = "200M"
gather_wait_ms = 5
io_timeout_secs = 30
member_cache = "direct"
reconnect = true
reconnect_interval_max_secs = 60
scrub_schedule = "0 3 * * 0"
background_window = "01:00-05:00"

[[array]]
name = "fast"
export = "fast"
members = ["nbd://127.0.0.2/disk", "/srv/fast.img"]
unix = "/run/raidkit/fast.sock"
scrub_schedule = "every 12h"
background_window = "22:30-02:00"
"#,
    );
    w.put("config", "monthly", b"[[array]]\nname = \"a\"\nmembers = [\"/a\", \"/b\", \"/c\", \"/d\"]\nscrub_schedule = \"monthly\"\n");
}

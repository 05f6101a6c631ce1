//! Round trips of every message, and "arbitrary bytes never panic a decoder".

use super::consts::*;
use super::*;
use proptest::prelude::*;

fn nbd_string() -> impl Strategy<Value = String> + Clone {
    "[a-zA-Z0-9:/ _.-]{0,40}"
}

fn info() -> impl Strategy<Value = Info> {
    prop_oneof![
        (any::<u64>(), any::<u16>()).prop_map(|(size, transmission_flags)| Info::Export {
            size,
            transmission_flags
        }),
        nbd_string().prop_map(Info::Name),
        nbd_string().prop_map(Info::Description),
        (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(minimum, preferred, maximum)| {
            Info::BlockSize {
                minimum,
                preferred,
                maximum,
            }
        }),
        (4u16.., proptest::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(info_type, data)| Info::Unknown { info_type, data }),
    ]
}

fn option_reply() -> impl Strategy<Value = OptionReply> {
    prop_oneof![
        Just(OptionReply::Ack),
        (nbd_string(), nbd_string())
            .prop_map(|(name, details)| OptionReply::Server { name, details }),
        info().prop_map(OptionReply::Info),
        (any::<u32>(), nbd_string()).prop_map(|(id, name)| OptionReply::MetaContext { id, name }),
        ((1u32 << 31)..=u32::MAX, nbd_string()).prop_map(|(reply_type, message)| {
            OptionReply::Error {
                reply_type,
                message,
            }
        }),
    ]
}

fn client_option() -> impl Strategy<Value = ClientOption> {
    let info_req = || {
        (nbd_string(), proptest::collection::vec(any::<u16>(), 0..8))
            .prop_map(|(name, requests)| InfoRequest { name, requests })
    };
    let meta_req = || {
        (nbd_string(), proptest::collection::vec(nbd_string(), 0..5))
            .prop_map(|(name, queries)| MetaContextRequest { name, queries })
    };
    prop_oneof![
        nbd_string().prop_map(ClientOption::ExportName),
        Just(ClientOption::Abort),
        any::<bool>().prop_map(|has_data| ClientOption::List { has_data }),
        any::<bool>().prop_map(|has_data| ClientOption::StartTls { has_data }),
        info_req().prop_map(ClientOption::Info),
        info_req().prop_map(ClientOption::Go),
        any::<bool>().prop_map(|has_data| ClientOption::StructuredReply { has_data }),
        meta_req().prop_map(ClientOption::ListMetaContext),
        meta_req().prop_map(ClientOption::SetMetaContext),
        Just(ClientOption::ExtendedHeaders),
        (12u32..).prop_map(ClientOption::Unknown),
    ]
}

fn chunk() -> impl Strategy<Value = Chunk> {
    let descriptor = (any::<u32>(), any::<u32>())
        .prop_map(|(length, status)| BlockDescriptor { length, status });
    prop_oneof![
        Just(Chunk::None),
        (any::<u64>(), proptest::collection::vec(any::<u8>(), 1..64))
            .prop_map(|(offset, data)| Chunk::OffsetData { offset, data }),
        (any::<u64>(), any::<u32>())
            .prop_map(|(offset, length)| Chunk::OffsetHole { offset, length }),
        (any::<u32>(), proptest::collection::vec(descriptor, 1..10)).prop_map(
            |(context_id, descriptors)| Chunk::BlockStatus {
                context_id,
                descriptors
            }
        ),
        (1u32.., nbd_string()).prop_map(|(error, message)| Chunk::Error { error, message }),
        (1u32.., nbd_string(), any::<u64>()).prop_map(|(error, message, offset)| {
            Chunk::ErrorOffset {
                error,
                message,
                offset,
            }
        }),
    ]
}

proptest! {
    #[test]
    fn request_round_trip(flags: u16, kind: u16, cookie: u64, offset: u64, length: u32) {
        let r = Request { flags, kind, cookie, offset, length };
        prop_assert_eq!(Request::decode(&r.encode()), Ok(r));
    }

    #[test]
    fn simple_reply_round_trip(error: u32, cookie: u64) {
        let r = SimpleReply { error, cookie };
        prop_assert_eq!(SimpleReply::decode(&r.encode()), Ok(r));
    }

    #[test]
    fn handshake_round_trips(flags16: u16, flags32: u32, option: u32, length: u32, size: u64, nz: bool) {
        let g = Greeting { handshake_flags: flags16 };
        prop_assert_eq!(Greeting::decode(&g.encode()), Ok(g));
        prop_assert_eq!(ClientFlags::decode(&ClientFlags(flags32).encode()), Ok(ClientFlags(flags32)));
        let h = OptionHeader { option, length };
        prop_assert_eq!(OptionHeader::decode(&h.encode()), Ok(h));
        let rh = OptionReplyHeader { option, reply_type: flags32, length };
        prop_assert_eq!(OptionReplyHeader::decode(&rh.encode()), Ok(rh));
        let e = ExportNameReply { size, transmission_flags: flags16, no_zeroes: nz };
        let bytes = e.encode();
        prop_assert_eq!(bytes.len(), if nz { 10 } else { 134 });
        prop_assert_eq!(ExportNameReply::decode(&bytes, nz), Ok(e));
    }

    #[test]
    fn client_option_round_trip(o in client_option()) {
        let (code, data) = o.encode();
        prop_assert_eq!(ClientOption::decode(code, &data), Ok(o));
    }

    #[test]
    fn option_reply_round_trip(r in option_reply(), option: u32) {
        let bytes = r.encode(option);
        let header = OptionReplyHeader::decode(&bytes[..OptionReplyHeader::SIZE]).unwrap();
        prop_assert_eq!(header.option, option);
        prop_assert_eq!(header.length as usize, bytes.len() - OptionReplyHeader::SIZE);
        let data = &bytes[OptionReplyHeader::SIZE..];
        prop_assert_eq!(OptionReply::decode(header.reply_type, data), Ok(r));
    }

    #[test]
    fn chunk_round_trip(c in chunk(), cookie: u64, flags: u16) {
        let bytes = c.encode(cookie, flags);
        let header = ChunkHeader::decode(&bytes[..ChunkHeader::SIZE]).unwrap();
        prop_assert_eq!((header.cookie, header.flags, header.kind), (cookie, flags, c.kind()));
        prop_assert_eq!(Chunk::decode(&header, &bytes[ChunkHeader::SIZE..]), Ok(c));
    }

    #[test]
    fn offset_data_header_matches_chunk(cookie: u64, offset: u64, data in proptest::collection::vec(any::<u8>(), 1..64)) {
        let whole = Chunk::OffsetData { offset, data: data.clone() }.encode(cookie, REPLY_FLAG_DONE);
        let header = offset_data_header(cookie, REPLY_FLAG_DONE, offset, data.len() as u32);
        prop_assert_eq!(&whole[..28], &header[..]);
        prop_assert_eq!(&whole[28..], &data[..]);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), code: u32, kind: u16) {
        let _ = Greeting::decode(&bytes);
        let _ = ClientFlags::decode(&bytes);
        let _ = OptionHeader::decode(&bytes);
        let _ = OptionReplyHeader::decode(&bytes);
        let _ = ExportNameReply::decode(&bytes, code & 1 == 0);
        let _ = Request::decode(&bytes);
        let _ = SimpleReply::decode(&bytes);
        let _ = ChunkHeader::decode(&bytes);
        for option in 0..13 {
            let _ = ClientOption::decode(option, &bytes);
        }
        let _ = ClientOption::decode(code, &bytes);
        for reply_type in [REP_ACK, REP_SERVER, REP_INFO, REP_META_CONTEXT, REP_ERR_UNSUP, code] {
            let _ = OptionReply::decode(reply_type, &bytes);
        }
        for k in [0, 1, 2, 5, REPLY_TYPE_ERROR, REPLY_TYPE_ERROR_OFFSET, kind] {
            let header = ChunkHeader { flags: 0, kind: k, cookie: 0, length: bytes.len() as u32 };
            let _ = Chunk::decode(&header, &bytes);
        }
    }

    /// What a client sends is what the server reads: header then data.
    #[test]
    fn client_option_message_round_trip(o in client_option()) {
        let bytes = o.encode_message();
        let header = OptionHeader::decode(&bytes[..OptionHeader::SIZE]).unwrap();
        prop_assert_eq!(header.length as usize, bytes.len() - OptionHeader::SIZE);
        prop_assert_eq!(ClientOption::decode(header.option, &bytes[OptionHeader::SIZE..]), Ok(o));
    }

    /// The client decodes option replies from a server it does not trust: damaged replies
    /// (bytes changed, cut short) are errors, never panics.
    #[test]
    fn mutated_option_replies_never_panic(r in option_reply(), option: u32, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4), cut: usize) {
        let mut bytes = r.encode(option);
        for (at, value) in flips {
            let n = bytes.len();
            bytes[at % n] = value;
        }
        let keep = cut % (bytes.len() + 1);
        let _ = OptionReplyHeader::decode(&bytes[..keep.min(OptionReplyHeader::SIZE)]);
        if let Ok(header) = OptionReplyHeader::decode(&bytes[..OptionReplyHeader::SIZE]) {
            let data = &bytes[OptionReplyHeader::SIZE..];
            let _ = OptionReply::decode(header.reply_type, data);
            let _ = OptionReply::decode(header.reply_type, &data[..keep.min(data.len())]);
        }
    }

    /// Structured inputs with a valid prefix reach deeper decoder paths than random bytes.
    #[test]
    fn mutated_options_never_panic(o in client_option(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4), cut: usize) {
        let (code, mut data) = o.encode();
        for (at, value) in flips {
            if !data.is_empty() {
                let n = data.len();
                data[at % n] = value;
            }
        }
        let keep = if data.is_empty() { 0 } else { cut % (data.len() + 1) };
        let _ = ClientOption::decode(code, &data[..keep]);
        let _ = ClientOption::decode(code, &data);
    }
}

#[test]
fn bad_request_magic_is_an_error() {
    let mut bytes = Request {
        flags: 0,
        kind: CMD_READ,
        cookie: 1,
        offset: 0,
        length: 512,
    }
    .encode();
    assert!(matches!(
        Request::decode(&bytes[..27]),
        Err(DecodeError::Truncated { .. })
    ));
    bytes[0] ^= 0xff;
    assert!(matches!(
        Request::decode(&bytes),
        Err(DecodeError::BadMagic { .. })
    ));
}

#[test]
fn error_text_is_decoded_leniently_and_lengths_strictly() {
    let reply = OptionReply::decode(REP_ERR_POLICY, b"no \xff way").unwrap();
    assert_eq!(
        reply,
        OptionReply::Error {
            reply_type: REP_ERR_POLICY,
            message: "no \u{fffd} way".into()
        }
    );
    let reply = OptionReply::decode(REP_INFO, &[0, 2, b'a', 0xff]).unwrap();
    assert_eq!(
        reply,
        OptionReply::Info(Info::Description("a\u{fffd}".into()))
    );
    // An export info one byte short or long is an error, not a guess.
    let mut export = vec![0u8; 12];
    assert!(OptionReply::decode(REP_INFO, &export[..11]).is_err());
    export.push(0);
    assert!(OptionReply::decode(REP_INFO, &export).is_err());
}

/// Found by the `codec_replies` fuzz target (docs/FUZZING.md): an `NBD_INFO_DESCRIPTION` of
/// more than 4096 bytes (or one whose invalid UTF-8, replaced, grew past 4096) decoded, and
/// encoding the decoded reply hit the string-length assertion: a value `decode` made could not
/// be encoded. Free text is now cut to the spec's 4096 bytes (at a character boundary) as it is
/// decoded, so it still shows and every decoded reply encodes and decodes back to itself.
#[test]
fn free_text_longer_than_a_string_is_cut_to_4096_bytes_and_round_trips() {
    let long = [b'd'; 5000];
    let invalid = [0xffu8; 3000]; // 3000 replacement characters: 9000 bytes
    for text in [&long[..], &invalid[..]] {
        let mut data = INFO_DESCRIPTION.to_be_bytes().to_vec();
        data.extend_from_slice(text);
        let reply = OptionReply::decode(REP_INFO, &data).unwrap();
        let OptionReply::Info(Info::Description(d)) = &reply else {
            panic!("{reply:?}");
        };
        assert!(
            d.len() <= MAX_STRING_BYTES && d.len() > MAX_STRING_BYTES - 4,
            "{}",
            d.len()
        );
        let again = reply.encode(OPT_GO);
        let body = &again[OptionReplyHeader::SIZE..];
        assert_eq!(OptionReply::decode(REP_INFO, body).unwrap(), reply);

        let error = OptionReply::decode(REP_ERR_POLICY, text).unwrap();
        let OptionReply::Error { message, .. } = &error else {
            panic!("{error:?}");
        };
        assert!(message.len() <= MAX_STRING_BYTES, "{}", message.len());
        let again = error.encode(OPT_GO);
        let body = &again[OptionReplyHeader::SIZE..];
        assert_eq!(OptionReply::decode(REP_ERR_POLICY, body).unwrap(), error);
    }
}

#[test]
fn names_of_errors() {
    assert_eq!(errno_name(ENOSPC), "ENOSPC");
    assert_eq!(errno_name(4242), "unknown error");
    assert_eq!(rep_error_name(REP_ERR_TOO_BIG), "NBD_REP_ERR_TOO_BIG");
    assert_eq!(rep_error_name(REP_ACK), "error");
}

#[test]
fn info_request_rejects_inconsistent_lengths() {
    // name length larger than the data.
    let data = [0, 0, 0, 9, b'a', 0, 0];
    assert!(ClientOption::decode(OPT_GO, &data).is_err());
    // count says 2 requests, only 1 present.
    let data = [0, 0, 0, 0, 0, 2, 0, 3];
    assert!(ClientOption::decode(OPT_GO, &data).is_err());
    // huge meta query count is rejected before allocating.
    let data = [0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
    assert!(ClientOption::decode(OPT_SET_META_CONTEXT, &data).is_err());
}

#[test]
fn known_bytes_of_a_read_request() {
    let r = Request {
        flags: 1,
        kind: CMD_WRITE,
        cookie: 0x0102,
        offset: 0x1000,
        length: 512,
    };
    let expected: [u8; 28] = [
        0x25, 0x60, 0x95, 0x13, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0x10, 0, 0,
        0, 2, 0,
    ];
    assert_eq!(r.encode(), expected);
    assert_eq!(r.payload_len(), 512);
}

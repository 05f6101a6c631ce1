//! What a server sends, through `nbd-codec`'s decoders (the member client reads the greeting,
//! option replies, the EXPORT_NAME reply and simple replies; structured reply chunks are
//! decoded by the same crate for clients that ask for them). `data[0]` picks the message; every
//! message that decodes must decode again, equal, from its own encoding.

use nbd_codec::{
    Chunk, ChunkHeader, ExportNameReply, Greeting, OptionReply, OptionReplyHeader, SimpleReply,
};

pub fn codec_replies(data: &[u8]) {
    let Some((&kind, bytes)) = data.split_first() else {
        return;
    };
    match kind % 5 {
        0 => {
            if let Ok(g) = Greeting::decode(bytes) {
                assert_eq!(Greeting::decode(&g.encode()), Ok(g));
            }
        }
        1 => {
            let Some((head, payload)) = bytes.split_at_checked(OptionReplyHeader::SIZE) else {
                return;
            };
            let Ok(h) = OptionReplyHeader::decode(head) else {
                return;
            };
            if let Ok(reply) = OptionReply::decode(h.reply_type, payload) {
                let again = reply.encode(h.option);
                let h2 = OptionReplyHeader::decode(&again[..OptionReplyHeader::SIZE])
                    .expect("an encoded header decodes");
                assert_eq!((h2.option, h2.reply_type), (h.option, h.reply_type));
                let decoded = OptionReply::decode(h2.reply_type, &again[OptionReplyHeader::SIZE..]);
                assert_eq!(decoded, Ok(reply));
            }
        }
        2 => {
            for no_zeroes in [false, true] {
                if let Ok(r) = ExportNameReply::decode(bytes, no_zeroes) {
                    assert_eq!(ExportNameReply::decode(&r.encode(), no_zeroes), Ok(r));
                }
            }
        }
        3 => {
            if let Ok(r) = SimpleReply::decode(bytes) {
                assert_eq!(SimpleReply::decode(&r.encode()), Ok(r));
            }
        }
        _ => {
            let Some((head, payload)) = bytes.split_at_checked(ChunkHeader::SIZE) else {
                return;
            };
            let Ok(h) = ChunkHeader::decode(head) else {
                return;
            };
            if let Ok(chunk) = Chunk::decode(&h, payload) {
                let again = chunk.encode(h.cookie, h.flags);
                let h2 = ChunkHeader::decode(&again[..ChunkHeader::SIZE])
                    .expect("an encoded chunk header decodes");
                assert_eq!((h2.cookie, h2.flags, h2.kind), (h.cookie, h.flags, h.kind));
                assert_eq!(Chunk::decode(&h2, &again[ChunkHeader::SIZE..]), Ok(chunk));
            }
        }
    }
}

//! raidkit's fuzz targets, one function each, called by the AFL++ binaries in `fuzz_targets/`
//! (docs/FUZZING.md). Each feeds its bytes to the real code the way a client, a server, a disk or
//! an operator's file would, and asserts what must hold afterwards; a panic anywhere (a failed
//! assertion, an overflow, an out-of-range index, on any thread) is a crash the fuzzer records.
//!
//! - [`nbd_handshake`]: the bytes a client sends to `nbd::serve_exports`, from the first byte.
//! - [`nbd_requests`]: a valid handshake (options chosen by the first byte), then the bytes
//!   as transmission requests.
//! - [`member_replies`]: the bytes a server sends to `member::NbdMember` (handshake and replies).
//! - [`codec_replies`]: server-to-client messages through `nbd-codec`'s decoders.
//! - [`superblock`], [`bitmap`], [`journal`]: member bytes through `ondisk` and `journal`.
//! - [`config`]: the configuration file through `config::Config::parse`.

mod codec;
mod disk;
mod file;
mod member_client;
mod nbd_server;

pub use codec::codec_replies;
pub use disk::{bitmap, journal, superblock};
pub use file::config;
pub use member_client::{join as join_chunks, member_replies};
pub use nbd_server::{nbd_handshake, nbd_requests};

/// A fuzz target: takes any bytes.
pub type Target = fn(&[u8]);

/// The targets by name, as `scripts/fuzz.sh` and the corpus tests name them.
pub const TARGETS: &[(&str, Target)] = &[
    ("nbd_handshake", nbd_handshake),
    ("nbd_requests", nbd_requests),
    ("member_replies", member_replies),
    ("codec_replies", codec_replies),
    ("superblock", superblock),
    ("bitmap", bitmap),
    ("journal", journal),
    ("config", config),
];

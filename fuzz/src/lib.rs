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

/// Waits until `fd` is ready for one of `events` (`libc::POLLIN`, `POLLOUT`) or `wait` passes
/// (a signal does not end the wait); returns the events that came (`POLLERR` and `POLLHUP`
/// among them), none when the time passed.
pub(crate) fn poll(
    fd: &impl std::os::fd::AsRawFd,
    events: libc::c_short,
    wait: std::time::Duration,
) -> std::io::Result<libc::c_short> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let mut pollfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        };
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        // Rounded up, so a wait shorter than a millisecond still waits.
        let ms = libc::c_int::try_from(left.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd, for the duration of the call.
        if unsafe { libc::poll(&mut pollfd, 1, ms) } >= 0 {
            return Ok(pollfd.revents);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

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

//! Member devices: the storage an array is built from.
//!
//! The main types:
//! - [`Member`]: the one trait every backend implements (`read_at`, `write_at`, `flush`, `trim`,
//!   `write_zeroes`, `len`). All methods take `&self` and are safe to call from many threads.
//! - [`MemMember`]: a sparse RAM member (`mem:SIZE`), gone when the process exits.
//! - [`FileMember`]: a regular file or a block device, with positional I/O.
//! - [`Detached`]: runs a local member's system calls on worker threads that a call stuck in
//!   the kernel can be abandoned on at its deadline (`ErrorKind::TimedOut`); [`open_with`]
//!   wraps file and block-device members in one when `RemoteOptions::local_deadline` is set.
//! - [`Window`]: a `[offset, offset + len)` view of another member (e.g. a data area past the
//!   superblock).
//! - [`NbdMember`]: an export of an NBD server (`nbd://HOST[:PORT]/EXPORT`,
//!   `nbd+unix:///EXPORT?socket=PATH`), a synchronous pipelined client with per-request deadlines
//!   ([`RemoteOptions`]) and [`Member::reconnect`].
//! - [`Hooked`]: forwards every call to another member after a caller-given hook saw it (and
//!   let it through), for tests that watch, hold or fail a member's calls.
//! - [`FaultyMember`] + [`FaultControl`]: wraps a member and injects seeded faults (errors by
//!   range, every Nth, by probability; delays; vanishing) for fault-handling tests.
//! - [`ModelMember`]: a disk-model member (`sim:hdd7200:1G`, `sim:ssd:4G`, ...): data in RAM,
//!   each call taking the time a modelled hard disk or flash drive would ([`diskmodel`]).
//! - [`SimMember`]: an in-memory member that keeps written apart from durable data and simulates
//!   a power loss ([`SimMember::crash`]) for crash tests.
//! - [`filesystem_of`], [`allocated_bytes`], [`preallocate`]: the filesystem under a file
//!   member and how much of it a sparse member takes (for "filesystem full" reports and
//!   `create --preallocate`).
//! - [`volatile_storage`]: whether a member lives in RAM that a power loss empties (tmpfs,
//!   ramfs, RAM disks, `mem:`), for the write-back journal's check.
//! - [`open`] turns what the user typed (`mem:1G`, a path, an NBD URI) into an `Arc<dyn Member>`;
//!   [`parse_size`] is the size parser (`K`, `M`, `G`, `T` suffixes, powers of 1024) shared with
//!   the command line.
//!
//! Contract: `read_at`/`write_at` transfer the whole buffer or fail; an access past the end is an
//! error naming the member, never a panic; `flush` makes earlier writes durable; after `trim` or
//! `write_zeroes` the range reads as zeroes (RAID 5/6 parity relies on it: zero data has zero
//! parity). Every method may fail with an `io::Error` naming the member, and durability is only
//! promised by `flush` (everything written before it) and `write_durable_at` (that write).
//!
//! ```
//! use member::{open, Member, OpenOptions};
//! let m = open("mem:1M", &OpenOptions::default()).unwrap();
//! m.write_at(b"hello", 4093).unwrap();
//! let mut buf = [0u8; 7];
//! m.read_at(&mut buf, 4092).unwrap();
//! assert_eq!(&buf, b"\0hello\0");
//! ```

mod aligned;
mod block_locks;
mod checksum;
mod detached;
mod direct;
mod error;
mod exclusive;
mod faulty;
mod fence;
mod file;
mod hooked;
mod mem;
mod model;
mod nbd;
mod sim;
mod size;
mod space;
mod sys;
pub mod uring;
mod volatile;
mod window;

use std::path::Path;
use std::sync::Arc;

pub use aligned::{AlignedBuf, DIRECT_ALIGN};
pub use block_locks::{BlockLocks, Held};
pub use checksum::{
    block_checksum, is_checksum_error, is_unsettled, ChecksumShared, ChecksumStats, ChecksumTrust,
    Checksummed, Mismatch, MismatchHook, CHECKSUM_CACHE_BLOCKS,
};
pub use detached::{
    carry_deadline, current_deadline, scatter, with_deadline, Detached, StartCall, Started,
    STUCK_MAX, WORKERS_MAX,
};
pub use diskmodel::SimRng;
pub use error::{check_range, Holder, MemberError};
pub use exclusive::{holder_of, Identity};
pub use faulty::{FaultControl, FaultRule, FaultyMember};
pub use fence::Fence;
pub use file::FileMember;
pub use hooked::{Call, Hook, Hooked, Op};
pub use mem::MemMember;
pub use model::{ModelMember, RealClock, MODEL_PREFIX, SLEEP_SLACK_NS};
pub use nbd::{
    client_identity, is_nbd_uri, parse_nbd_uri, pem_certificates, NbdAddress, NbdMember,
    NbdServerError, NbdTarget, RemoteOptions, TlsSettings, DEFAULT_PORT, MAX_REQUEST_BYTES,
};
pub use sim::{SimMember, SECTOR_BYTES, SIM_MAX_BYTES};
pub use size::{parse_size, SizeError};
pub use space::{allocated_bytes, filesystem_of, preallocate, FilesystemSpace};
pub use uring::{MemberIo, RingAsk, RingTarget};
pub use volatile::{volatile_storage, Volatile};
pub use window::Window;

/// The error of a read that touches a range the member's bad-block list records as lost: not a
/// fault of the member (it answered), so it is not counted against it; the data is served
/// from redundancy where some is left, else the request fails.
#[derive(Debug)]
pub struct BadBlock {
    pub member: String,
    /// The recorded range met (bytes of the member's data area).
    pub offset: u64,
    pub len: u64,
}

impl std::fmt::Display for BadBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "member {}: bytes {}..{} are recorded as lost (bad-block list)",
            self.member,
            self.offset,
            self.offset + self.len
        )
    }
}

impl std::error::Error for BadBlock {}

impl BadBlock {
    /// As an `io::Error` (kind `Other`, recognised by [`is_bad_block`]).
    pub fn into_io(self) -> std::io::Error {
        std::io::Error::other(self)
    }
}

/// Whether `e` is a read of a recorded bad block ([`BadBlock`]).
pub fn is_bad_block(e: &std::io::Error) -> bool {
    bad_block_of(e).is_some()
}

/// The recorded range `e` met, if it is a [`BadBlock`].
pub fn bad_block_of(e: &std::io::Error) -> Option<&BadBlock> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<BadBlock>())
}

/// A device an array is built from. See the crate docs for the contract.
pub trait Member: Send + Sync + std::fmt::Debug {
    /// What the user typed: a path, `mem:1G`, a URI.
    fn name(&self) -> &str;
    /// Size in bytes; fixed for the member's lifetime.
    fn len(&self) -> u64;
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()>;
    /// Reads `bufs` one after the other from `offset` on: the bytes of
    /// `[offset, offset + total length)`, as one request where the backend can (`preadv` for
    /// files, one NBD read for remote members). The default reads each buffer in turn.
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> std::io::Result<()> {
        let len = vectored_len(bufs.iter().map(|b| b.len()));
        error::check_range(self.name(), "read", offset, len, self.len())?;
        read_each(self, bufs, offset)
    }
    /// Writes `bufs` one after the other from `offset` on, as one request where the backend
    /// can (`pwritev`, one NBD write). The default writes each buffer in turn. Like two
    /// `write_at` calls, it is not atomic: a crash may leave any part of it written.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> std::io::Result<()> {
        let len = vectored_len(bufs.iter().map(|b| b.len()));
        error::check_range(self.name(), "write", offset, len, self.len())?;
        write_each(self, bufs, offset)
    }
    /// Returns when every earlier completed write is durable.
    fn flush(&self) -> std::io::Result<()>;
    /// Writes all of `buf` at `offset` and returns once those bytes are durable. Unlike
    /// `write_at` + `flush` it promises nothing about other writes: a file member syncs only
    /// this range (`RWF_DSYNC`), so a small metadata write does not force the writeback of
    /// everything written before it. The default is `write_at` then `flush`.
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.write_at(buf, offset)?;
        self.flush()
    }
    /// Releases `[offset, offset + len)`; afterwards the range reads as zeroes.
    fn trim(&self, offset: u64, len: u64) -> std::io::Result<()>;
    /// Makes `[offset, offset + len)` read as zeroes.
    fn write_zeroes(&self, offset: u64, len: u64) -> std::io::Result<()>;
    /// Connects again after a disconnect (remote members); checks the member is unchanged.
    /// Local members have nothing to reconnect: `ErrorKind::Unsupported`.
    fn reconnect(&self) -> std::io::Result<()> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            format!(
                "member {}: reconnect is only for remote members",
                self.name()
            ),
        ))
    }
    /// What the member is, whatever name it was given (device and inode of a file, a block
    /// device's number, an NBD server and export): two members with the same identity are the
    /// same storage. `None` for storage that cannot be named twice (RAM, simulated members).
    fn identity(&self) -> Option<Identity> {
        None
    }
    /// Starts `call` on another thread and returns at once, so that the calls of one batch to
    /// several members run, and wait out their deadline, together ([`Detached`]); `None` (the
    /// default) when the member makes its calls on the caller's thread: the caller then makes
    /// the call as usual.
    fn start(&self, call: StartCall<'_>) -> Option<Started> {
        let _ = call;
        None
    }
    /// The local file under this member where a batch can submit `ask` itself through io_uring
    /// ([`uring::submit`]): a [`FileMember`] opened with [`MemberIo::Auto`] or
    /// [`MemberIo::Uring`] for an operation it can take as it is (in range, writable, aligned
    /// when direct), through the wrappers that forward every call unchanged (`Window`,
    /// `Fence`). `None` (the default): the member's own calls make it — members that watch,
    /// fault or detach each call, RAM and remote members.
    fn ring_target(&self, ask: RingAsk) -> Option<RingTarget<'_>> {
        let _ = ask;
        None
    }
    /// Calls abandoned at their deadline and still stuck in the kernel, and calls abandoned
    /// since the member was opened ([`Detached`]; other members never abandon a call).
    fn stuck_calls(&self) -> (usize, u64) {
        (0, 0)
    }
    /// Records `[offset, offset + len)` as lost in the member's bad-block list and makes the
    /// record durable: `Some(Ok(true))` recorded (its reads fail with [`BadBlock`] from then
    /// on, until a write covers it), `Some(Ok(false))` the list is full, `None` (the default)
    /// the member keeps no list.
    fn record_lost(&self, offset: u64, len: u64) -> Option<std::io::Result<bool>> {
        let _ = (offset, len);
        None
    }
    /// A checksummed member after an [`Unsettled`] read of `[offset, offset + len)`: keeps,
    /// block by block, the `candidate` (what the array's redundancy gives for the range, when
    /// it could be reconstructed) where it matches the stored checksum, else rewrites the
    /// checksum from the data. `None` (the default): the member keeps no checksums.
    fn settle(
        &self,
        offset: u64,
        len: u64,
        candidate: Option<&[u8]>,
    ) -> Option<std::io::Result<()>> {
        let _ = (offset, len, candidate);
        None
    }
    /// True when the member has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Reads `bufs` one after the other from `offset` with `read_at` (a vectored read where the
/// backend has no single request for it).
pub(crate) fn read_each<M: Member + ?Sized>(
    member: &M,
    bufs: &mut [&mut [u8]],
    offset: u64,
) -> std::io::Result<()> {
    let mut at = offset;
    for buf in bufs.iter_mut() {
        member.read_at(buf, at)?;
        at += buf.len() as u64;
    }
    Ok(())
}

/// Writes `bufs` one after the other from `offset` with `write_at`.
pub(crate) fn write_each<M: Member + ?Sized>(
    member: &M,
    bufs: &[&[u8]],
    offset: u64,
) -> std::io::Result<()> {
    let mut at = offset;
    for buf in bufs {
        member.write_at(buf, at)?;
        at += buf.len() as u64;
    }
    Ok(())
}

/// Total bytes of a vectored request's buffers.
pub(crate) fn vectored_len(lens: impl Iterator<Item = usize>) -> u64 {
    lens.map(|l| l as u64).sum()
}

/// How [`open`] opens a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    /// Create a missing file, sparse, with this many bytes. `None`: a missing file is an error.
    pub create_size: Option<u64>,
    /// Open read-only; writes, trims and flushes-after-writes fail.
    pub read_only: bool,
    /// Hold a local member exclusively while it is open for writing (an OFD lock on a file,
    /// `O_EXCL` on a block device), so no second array or program can use it meanwhile: see
    /// `exclusive.rs`. On by default; off only for tools and tests that look at a member
    /// behind the back of the array that holds it. Read-only opens never hold.
    pub exclusive: bool,
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions {
            create_size: None,
            read_only: false,
            exclusive: true,
        }
    }
}

/// Whether a file or block-device member is read and written through the page cache or with
/// direct I/O (`O_DIRECT`, nothing cached below raidkit). RAM and remote members ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemberCache {
    /// Direct I/O for block devices, the page cache for regular files.
    #[default]
    Auto,
    /// Direct I/O for every file and block-device member; a filesystem without it (tmpfs) is
    /// refused at open.
    Direct,
    /// The page cache for every member.
    Buffered,
}

impl std::str::FromStr for MemberCache {
    type Err = String;
    fn from_str(s: &str) -> Result<MemberCache, String> {
        match s {
            "auto" => Ok(MemberCache::Auto),
            "direct" => Ok(MemberCache::Direct),
            "buffered" => Ok(MemberCache::Buffered),
            _ => Err(format!(
                "unknown member cache {s:?}: give direct, buffered or auto (direct for block \
                 devices, buffered for files)"
            )),
        }
    }
}

impl std::fmt::Display for MemberCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemberCache::Auto => "auto",
            MemberCache::Direct => "direct",
            MemberCache::Buffered => "buffered",
        })
    }
}

/// The prefix of a RAM member spec: `mem:SIZE`.
pub const MEM_PREFIX: &str = "mem:";

/// Whether `spec` names a member kept in this process's RAM (`mem:SIZE`, `sim:CLASS:SIZE`):
/// empty at every start, never the same storage as another member of the same name.
pub fn ram_spec(spec: &str) -> bool {
    spec.starts_with(MEM_PREFIX) || spec.starts_with(MODEL_PREFIX)
}

/// Opens the member the user named: `mem:SIZE` (a new sparse RAM member), `sim:CLASS:SIZE`
/// (a disk-model member), an NBD URI (with the default [`RemoteOptions`]) or a path to a
/// regular file or block device.
pub fn open(spec: &str, opts: &OpenOptions) -> Result<Arc<dyn Member>, MemberError> {
    open_with(spec, opts, &RemoteOptions::default())
}

/// [`open`] with settings for remote members (request timeout, requests in flight); with
/// `remote.local_deadline` the timeout is also the deadline of a file or block-device member's
/// calls ([`Detached`]). An NBD
/// export already exists: `opts.create_size` does not apply to it, `opts.read_only` does.
pub fn open_with(
    spec: &str,
    opts: &OpenOptions,
    remote: &RemoteOptions,
) -> Result<Arc<dyn Member>, MemberError> {
    if is_nbd_uri(spec) {
        return Ok(Arc::new(NbdMember::open(spec, opts, remote)?));
    }
    if let Some(size_text) = spec.strip_prefix(MEM_PREFIX) {
        let size = parse_size(size_text).map_err(|source| MemberError::BadSpec {
            spec: spec.to_string(),
            source,
        })?;
        return Ok(Arc::new(MemMember::new(spec, size)?));
    }
    if spec.starts_with(MODEL_PREFIX) {
        return Ok(Arc::new(ModelMember::open(spec)?));
    }
    if spec.is_empty() {
        return Err(MemberError::EmptySpec);
    }
    let member = FileMember::open_cached(Path::new(spec), spec, opts, remote.member_cache)?
        .with_member_io(remote.member_io)?;
    if !remote.local_deadline {
        return Ok(Arc::new(member));
    }
    // A local call can hang in the kernel (a dying disk, a hung NFS or FUSE file): it runs
    // where it can be abandoned at the same deadline as a remote request.
    Ok(Arc::new(Detached::new(Arc::new(member), remote.io_timeout)))
}

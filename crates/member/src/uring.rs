//! io_uring submission of a batch's reads and writes to local file and block-device members
//! (DESIGN "Member I/O submission"; the measurement that chose it: docs/PERFORMANCE.md "Member
//! I/O submission").
//!
//! The engine runs a batch of member operations; where the members under them are local files
//! ([`crate::Member::ring_target`]: a [`crate::FileMember`], through a `Window` or `Fence`), it
//! may push the batch's reads and writes to this thread's ring and make one `io_uring_enter`
//! submitting them and waiting for all ([`submit`]) instead of one positional call after
//! another (or a thread per large share). Each thread that runs such a batch has its own ring
//! of [`RING_ENTRIES`] entries, made on first use and closed when the thread ends.
//!
//! Soundness: the kernel reads and writes the callers' buffers until each operation completes,
//! so [`submit`] returns only once every operation it submitted has completed: the buffers'
//! borrows (`RingData`) outlive every use the kernel makes of them. That is also why an io_uring
//! operation cannot be abandoned at a deadline as [`crate::Detached`] abandons a call: members
//! under `--local-io-deadline` (wrapped in `Detached`) never offer a ring target.
//!
//! Where io_uring is unavailable (`io_uring_setup` refused: EPERM under a seccomp policy or
//! `kernel.io_uring_disabled`, ENOSYS on an old kernel) [`probe`] says why, once, and members
//! opened with [`MemberIo::Auto`] use their own calls.

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};

use crate::block_locks::{BlockLocks, Held};
use crate::error::annotate;

/// Submission queue entries of one thread's ring: the operations of a batch in flight at once
/// (a larger batch is submitted in turns as operations complete).
pub const RING_ENTRIES: u32 = 64;

/// Buffers one ring operation may carry (the kernel's `IOV_MAX`); an operation with more is
/// made by the member's own call.
pub const RING_IOV_MAX: usize = 1024;

/// How a file or block-device member's reads and writes are submitted (`serve --member-io`,
/// the daemon's `member_io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemberIo {
    /// io_uring where it measured faster (a batch's operations on direct members when it has two
    /// or more, large shares that would otherwise run on threads), positional calls otherwise;
    /// positional calls only where io_uring is unavailable.
    #[default]
    Auto,
    /// Every read and write of a batch that can go to the ring does (refused at open where
    /// io_uring is unavailable).
    Uring,
    /// Positional calls (`preadv`/`pwritev`) on the engine's threads, as before io_uring.
    Threads,
}

impl std::str::FromStr for MemberIo {
    type Err = String;
    fn from_str(s: &str) -> Result<MemberIo, String> {
        match s {
            "auto" => Ok(MemberIo::Auto),
            "uring" => Ok(MemberIo::Uring),
            "threads" => Ok(MemberIo::Threads),
            _ => Err(format!(
                "unknown member I/O {s:?}: give auto (io_uring where it is faster, when the \
                 kernel allows it), uring or threads"
            )),
        }
    }
}

impl std::fmt::Display for MemberIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemberIo::Auto => "auto",
            MemberIo::Uring => "uring",
            MemberIo::Threads => "threads",
        })
    }
}

/// Whether this process can use io_uring, asked of the kernel once (a ring made and closed):
/// `Err` says why not.
pub fn probe() -> Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let ring = IoUring::new(8).map_err(|e| match e.raw_os_error() {
                Some(libc::EPERM) => "io_uring_setup was refused (EPERM: a seccomp policy or \
                                      sysctl kernel.io_uring_disabled)"
                    .to_string(),
                Some(libc::ENOSYS) => "the kernel has no io_uring (ENOSYS)".to_string(),
                _ => format!("io_uring_setup failed: {e}"),
            })?;
            // Waiting with a timeout (`submit`) needs IORING_FEAT_EXT_ARG (Linux 5.11).
            match ring.params().is_feature_ext_arg() {
                true => Ok(()),
                false => {
                    Err("the kernel's io_uring cannot wait with a timeout (Linux < 5.11)".into())
                }
            }
        })
        .clone()
}

/// Operations completed through a ring since the process started (tests assert which path a
/// batch took).
pub fn ring_ops() -> u64 {
    RING_OPS.load(Ordering::Relaxed)
}

/// Operations completed through this thread's ring ([`ring_ops`] for the calling thread).
pub fn thread_ring_ops() -> u64 {
    THREAD_RING_OPS.with(|n| n.get())
}

static RING_OPS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
    static THREAD_RING_OPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// True when this thread has a ring for [`submit`] (made now if it had none); false when
/// io_uring is unavailable or the ring could not be made: the caller then makes the members'
/// own calls.
pub fn ready() -> bool {
    if probe().is_err() {
        return false;
    }
    RING.with(|ring| {
        let mut ring = ring.borrow_mut();
        if ring.is_none() {
            *ring = IoUring::new(RING_ENTRIES).ok();
        }
        ring.is_some()
    })
}

/// What a batch asks of a member for one read or write ([`crate::Member::ring_target`]): its
/// range and what its buffers look like (direct I/O takes only aligned ones).
#[derive(Debug, Clone, Copy)]
pub struct RingAsk {
    pub write: bool,
    pub offset: u64,
    pub len: u64,
    /// The buffers' addresses OR-ed together (their common alignment).
    pub addr_bits: usize,
    /// The buffers' lengths OR-ed together.
    pub len_bits: u64,
    pub buffers: usize,
}

impl RingAsk {
    fn new<'a>(write: bool, offset: u64, bufs: impl Iterator<Item = &'a [u8]>) -> RingAsk {
        let mut ask = RingAsk {
            write,
            offset,
            len: 0,
            addr_bits: 0,
            len_bits: 0,
            buffers: 0,
        };
        for b in bufs {
            ask.len += b.len() as u64;
            ask.addr_bits |= b.as_ptr() as usize;
            ask.len_bits |= b.len() as u64;
            ask.buffers += 1;
        }
        ask
    }

    /// A read of `bufs` one after the other from `offset`.
    pub fn read(offset: u64, bufs: &[&mut [u8]]) -> RingAsk {
        RingAsk::new(false, offset, bufs.iter().map(|b| &**b))
    }

    /// A write of `bufs` one after the other from `offset`.
    pub fn write(offset: u64, bufs: &[&[u8]]) -> RingAsk {
        RingAsk::new(true, offset, bufs.iter().copied())
    }

    /// The same operation `by` bytes further into the file (a `Window`'s start).
    pub fn moved(mut self, by: u64) -> RingAsk {
        self.offset += by;
        self
    }
}

/// Where a batch submits one read or write itself: the file under the member and the offset in
/// it. Made by [`crate::FileMember`] (through the wrappers that forward it).
pub struct RingTarget<'m> {
    pub(crate) file: &'m File,
    pub(crate) name: &'m str,
    pub(crate) offset: u64,
    /// A direct write's block locks (taken by [`submit`], all of a batch's in one order).
    pub(crate) locks: Option<(&'m BlockLocks, u64)>,
    pub(crate) direct: bool,
    pub(crate) forced: bool,
}

impl RingTarget<'_> {
    /// The member was opened with direct I/O.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// The member was opened with [`MemberIo::Uring`]: the ring for everything it can take.
    pub fn is_forced(&self) -> bool {
        self.forced
    }
}

/// The buffers of one ring operation, borrowed until [`submit`] returns.
pub enum RingData<'s, 'b> {
    Read(&'s mut [&'b mut [u8]]),
    Write(&'s [&'b [u8]]),
}

impl RingData<'_, '_> {
    fn len(&self) -> u64 {
        match self {
            RingData::Read(bufs) => crate::vectored_len(bufs.iter().map(|b| b.len())),
            RingData::Write(bufs) => crate::vectored_len(bufs.iter().map(|b| b.len())),
        }
    }
}

/// One operation of a batch: where, and its buffers.
pub struct RingIo<'t, 's, 'b> {
    pub target: RingTarget<'t>,
    pub data: RingData<'s, 'b>,
}

/// Submits every operation of `ios` through this thread's ring and waits for all of them: one
/// `io_uring_enter` for a batch of up to [`RING_ENTRIES`] that completes within `slow_after`.
/// Returns each operation's result (its error naming the member, the operation, the length and
/// the offset, as the member's own call would) and the time from submission until its
/// completion was seen. Completions are collected all together until `slow_after` has passed
/// and one by one after it, so a member slower than that is timed by itself, not the others
/// with it. Direct writes hold their block locks (`crate::block_locks`) from before their
/// submission to the end: the locks of all of them taken in one order (by member, then lock
/// index), one range per member, so two batches never wait for each other crosswise.
///
/// Call [`ready`] first, on this thread; panics if it was not true.
pub fn submit(
    ios: &mut [RingIo<'_, '_, '_>],
    slow_after: Duration,
) -> Vec<(io::Result<()>, Duration)> {
    let _held = hold_write_locks(ios);
    let n = ios.len();
    let expected: Vec<u64> = ios.iter().map(|io| io.data.len()).collect();
    // The iovecs the kernel reads each operation's buffers from, kept until the end.
    let iovecs: Vec<Vec<libc::iovec>> = ios
        .iter_mut()
        .map(|io| match &mut io.data {
            RingData::Read(bufs) => bufs
                .iter_mut()
                .map(|b| libc::iovec {
                    iov_base: b.as_mut_ptr().cast(),
                    iov_len: b.len(),
                })
                .collect(),
            RingData::Write(bufs) => bufs
                .iter()
                .map(|b| libc::iovec {
                    iov_base: b.as_ptr() as *mut libc::c_void,
                    iov_len: b.len(),
                })
                .collect(),
        })
        .collect();
    let mut results: Vec<Option<(io::Result<()>, Duration)>> = (0..n).map(|_| None).collect();
    let start = Instant::now();
    RING.with(|cell| {
        let mut cell = cell.borrow_mut();
        let ring = cell.as_mut().expect("uring::ready() before uring::submit");
        let (mut next, mut in_flight, mut done) = (0usize, 0usize, 0usize);
        while done < n {
            {
                let mut sq = ring.submission();
                while next < n && in_flight < RING_ENTRIES as usize {
                    let io = &ios[next];
                    let v = &iovecs[next];
                    assert!(v.len() <= RING_IOV_MAX);
                    let fd = types::Fd(io.target.file.as_raw_fd());
                    let entry = match io.data {
                        RingData::Read(_) => opcode::Readv::new(fd, v.as_ptr(), v.len() as u32)
                            .offset(io.target.offset)
                            .build(),
                        RingData::Write(_) => opcode::Writev::new(fd, v.as_ptr(), v.len() as u32)
                            .offset(io.target.offset)
                            .build(),
                    }
                    .user_data(next as u64);
                    // SAFETY: the entry names a descriptor borrowed from the member for 'm
                    // and iovecs (`iovecs[next]`) over buffers borrowed for the call; both
                    // outlive the operation, since this function returns only after every
                    // submitted operation completed (the loop runs until `done == n`, and
                    // nothing in it returns or panics early with operations in flight except
                    // the abort below, which ends the process).
                    unsafe { sq.push(&entry) }.expect("room: fewer in flight than entries");
                    next += 1;
                    in_flight += 1;
                }
            }
            let waited = start.elapsed();
            let entered = match slow_after.checked_sub(waited) {
                Some(left) if !left.is_zero() => {
                    let ts = types::Timespec::from(left);
                    let args = types::SubmitArgs::new().timespec(&ts);
                    ring.submitter().submit_with_args(in_flight, &args)
                }
                _ => ring.submitter().submit_and_wait(1),
            };
            if let Err(e) = entered {
                let again = matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EAGAIN | libc::EBUSY)
                );
                if !again {
                    // Operations in flight hold borrowed buffers: returning would hand them
                    // back while the kernel may still write them. A ring that can no longer be
                    // entered is a broken invariant.
                    eprintln!("io_uring_enter failed with member operations in flight: {e}");
                    std::process::abort();
                }
            }
            let seen = start.elapsed();
            let completed: Vec<(usize, i32)> = ring
                .completion()
                .map(|cqe| (cqe.user_data() as usize, cqe.result()))
                .collect();
            for (i, res) in completed {
                in_flight -= 1;
                done += 1;
                let result = finish(&mut ios[i], res, expected[i]);
                results[i] = Some((result, seen));
            }
        }
    });
    RING_OPS.fetch_add(n as u64, Ordering::Relaxed);
    THREAD_RING_OPS.with(|c| c.set(c.get() + n as u64));
    results
        .into_iter()
        .map(|r| r.expect("every operation completed"))
        .collect()
}

/// An operation's completion `res` (bytes moved or −errno) as its result: a short transfer is
/// continued with positional calls, as the members' own calls continue theirs; EAGAIN and EINTR
/// redo it that way.
fn finish(io: &mut RingIo<'_, '_, '_>, res: i32, expected: u64) -> io::Result<()> {
    let (op, offset) = match io.data {
        RingData::Read(_) => ("read", io.target.offset),
        RingData::Write(_) => ("write", io.target.offset),
    };
    let moved = match res {
        r if r >= 0 => r as u64,
        r if -r == libc::EAGAIN || -r == libc::EINTR => 0,
        r => {
            let e = io::Error::from_raw_os_error(-r);
            return Err(annotate(io.target.name, op, offset, expected, e));
        }
    };
    if moved >= expected {
        return Ok(());
    }
    let file = io.target.file;
    let skip = moved as usize;
    match &mut io.data {
        RingData::Read(bufs) => {
            let mut rest = rest_mut(bufs, skip);
            crate::sys::preadv_all(file, &mut rest, offset + moved)
        }
        RingData::Write(bufs) => {
            let rest = rest(bufs, skip);
            crate::sys::pwritev_all(file, &rest, offset + moved)
        }
    }
    .map_err(|e| annotate(io.target.name, op, offset, expected, e))
}

/// The buffers past their first `skip` bytes.
fn rest_mut<'a>(bufs: &'a mut [&mut [u8]], mut skip: usize) -> Vec<&'a mut [u8]> {
    let mut out = Vec::new();
    for b in bufs.iter_mut() {
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        out.push(&mut b[skip..]);
        skip = 0;
    }
    out
}

fn rest<'a>(bufs: &[&'a [u8]], mut skip: usize) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    for b in bufs {
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        out.push(&b[skip..]);
        skip = 0;
    }
    out
}

/// The block locks of the batch's direct writes: per member (`BlockLocks`), one hold over the
/// range covering its writes, members in address order.
fn hold_write_locks<'m>(ios: &[RingIo<'m, '_, '_>]) -> Vec<Held<'m>> {
    let mut ranges: Vec<(&'m BlockLocks, u64, u64, u64)> = Vec::new();
    for io in ios {
        let (Some((locks, block)), RingData::Write(_)) = (io.target.locks, &io.data) else {
            continue;
        };
        let (start, end) = (io.target.offset, io.target.offset + io.data.len());
        match ranges.iter_mut().find(|r| std::ptr::eq(r.0, locks)) {
            Some(r) => {
                r.2 = r.2.min(start);
                r.3 = r.3.max(end);
            }
            None => ranges.push((locks, block, start, end)),
        }
    }
    ranges.sort_by_key(|r| r.0 as *const BlockLocks as usize);
    ranges
        .into_iter()
        .map(|(locks, block, start, end)| locks.hold(block, start, end - start))
        .collect()
}

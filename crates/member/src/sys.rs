//! The only `unsafe` of this crate: Linux ioctls, fallocate, statvfs, statfs and vectored positional
//! I/O on a raw file descriptor.
//!
//! Each call passes a valid, open descriptor borrowed from a `File` that outlives the call, and
//! pointers to locals of exactly the size the kernel reads or writes, so each block is sound.

use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::AsRawFd;

// Block-device ioctl numbers from <linux/fs.h>, in the generic _IOC encoding used by x86, x86_64,
// arm, aarch64 and riscv (dir << 30 | size << 16 | type << 8 | nr). The `libc` crate does not
// define them.
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64"
)))]
compile_error!("block-device ioctl numbers are only defined for the generic _IOC encoding");

/// `_IOR(0x12, 114, size_t)`: size of a block device in bytes.
const BLKGETSIZE64: u64 =
    (2 << 30) | ((std::mem::size_of::<usize>() as u64) << 16) | (0x12 << 8) | 114;
/// `_IO(0x12, 127)`: zero a byte range `[start, start + len)` of a block device.
const BLKZEROOUT: u64 = (0x12 << 8) | 127;

/// Size in bytes of the block device open as `file`.
pub fn block_device_size(file: &File) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 to the pointer, which points to a live local u64.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64 as _, &mut size as *mut u64) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size)
}

/// Zeroes `[offset, offset + len)` of a block device with BLKZEROOUT (both 512-byte aligned).
pub fn block_zero_out(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let range: [u64; 2] = [offset, len];
    // SAFETY: BLKZEROOUT reads two u64s from the pointer, which points to a live local array.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKZEROOUT as _, range.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The fallocate modes raidkit uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallocate {
    /// Deallocate the range; it reads as zeroes; the size is unchanged.
    PunchHole,
    /// Make the range read as zeroes (may keep it allocated); the size is unchanged.
    ZeroRange,
    /// Allocate the range's blocks (holes read as zeroes still); the size is unchanged.
    Allocate,
}

/// fallocate(2) with `mode` on `[offset, offset + len)`.
pub fn fallocate(file: &File, mode: Fallocate, offset: u64, len: u64) -> io::Result<()> {
    let flags = match mode {
        Fallocate::PunchHole => libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        Fallocate::ZeroRange => libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
        Fallocate::Allocate => libc::FALLOC_FL_KEEP_SIZE,
    };
    let offset = i64::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let len = i64::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: fallocate takes only integers and a descriptor that `file` keeps open.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), flags, offset, len) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// True for errors meaning "this way of zeroing is not supported here": try the next way.
pub fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL) | Some(libc::ENOTTY)
    )
}

/// Runs `call(at)`, one positioned system call for the part not yet transferred at file
/// offset `at`, until it returns `None` (nothing left): partial transfers are continued (the
/// call moves its buffers past what it returns), EINTR is retried, and a call that transfers
/// nothing is the error `nothing`. The call must return the syscall's result untouched, so
/// that `errno` is still its own when the result is negative.
fn transfer_all(
    mut offset: u64,
    nothing: io::ErrorKind,
    mut call: impl FnMut(i64) -> Option<isize>,
) -> io::Result<()> {
    loop {
        let at = i64::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let Some(rc) = call(at) else {
            return Ok(());
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if rc == 0 {
            return Err(nothing.into());
        }
        offset += rc as u64;
    }
}

/// pwritev2(2) with `RWF_DSYNC` of all of `buf` at `offset`: returns once those bytes (and the
/// metadata needed to read them back) are durable, syncing only this range (unlike
/// `fdatasync`, which writes back every dirty page of the file). Partial writes are continued.
/// `Unsupported` errors (EOPNOTSUPP, ENOSYS: a kernel before 4.7 or a filter) are returned as
/// they are, for the caller to fall back to write + fdatasync.
pub fn pwrite_dsync(file: &File, mut buf: &[u8], offset: u64) -> io::Result<()> {
    transfer_all(offset, io::ErrorKind::WriteZero, |at| {
        if buf.is_empty() {
            return None;
        }
        let iov = libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: one iovec describing `buf`, which is live and unchanged for the call; the
        // kernel only reads from it (a write). The descriptor is kept open by `file`.
        let rc = unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, at, libc::RWF_DSYNC) };
        if rc > 0 {
            let n = rc as usize;
            assert!(n <= buf.len(), "pwritev2 wrote more than asked");
            buf = &buf[n..];
        }
        Some(rc)
    })
}

/// Buffers passed to one `preadv`/`pwritev` call at most (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// pwritev(2) of all of `bufs`, one after the other, at `offset`; partial writes are
/// continued.
pub fn pwritev_all(file: &File, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = bufs
        .iter()
        .filter(|b| !b.is_empty())
        .map(|b| IoSlice::new(b))
        .collect();
    let mut rest = &mut slices[..];
    transfer_all(offset, io::ErrorKind::WriteZero, |at| {
        if rest.is_empty() {
            return None;
        }
        let count = rest.len().min(IOV_MAX) as libc::c_int;
        // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix (std guarantees it); the
        // first `count` entries describe buffers borrowed for the call, which the kernel only
        // reads. The descriptor is kept open by `file`.
        let rc = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                rest.as_ptr().cast::<libc::iovec>(),
                count,
                at,
            )
        };
        if rc > 0 {
            IoSlice::advance_slices(&mut rest, rc as usize);
        }
        Some(rc)
    })
}

/// preadv(2) filling all of `bufs`, one after the other, from `offset`; partial reads are
/// continued, and the end of the file before they are full is `UnexpectedEof`.
pub fn preadv_all(file: &File, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
    let mut slices: Vec<IoSliceMut<'_>> = bufs
        .iter_mut()
        .filter(|b| !b.is_empty())
        .map(|b| IoSliceMut::new(b))
        .collect();
    let mut rest = &mut slices[..];
    transfer_all(offset, io::ErrorKind::UnexpectedEof, |at| {
        if rest.is_empty() {
            return None;
        }
        let count = rest.len().min(IOV_MAX) as libc::c_int;
        // SAFETY: `IoSliceMut` is ABI-compatible with `iovec` on Unix (std guarantees it); the
        // first `count` entries describe buffers exclusively borrowed for the call, which the
        // kernel fills. The descriptor is kept open by `file`.
        let rc = unsafe {
            libc::preadv(
                file.as_raw_fd(),
                rest.as_ptr().cast::<libc::iovec>(),
                count,
                at,
            )
        };
        if rc > 0 {
            IoSliceMut::advance_slices(&mut rest, rc as usize);
        }
        Some(rc)
    })
}

/// True when pwritev2 with `RWF_DSYNC` is not available here (fall back to write + fdatasync).
pub fn dsync_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
    )
}

/// Space of the filesystem holding `path` (statvfs): bytes available to unprivileged users and
/// total bytes.
pub fn statvfs(path: &std::path::Path) -> io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is a NUL-terminated string and `st` a live local the call fills.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &mut st) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let unit = st.f_frsize as u64;
    Ok((st.f_bavail as u64 * unit, st.f_blocks as u64 * unit))
}

/// The filesystem type of the filesystem holding `path` (statfs `f_type`, a `*_MAGIC` number of
/// <linux/magic.h>).
pub fn statfs_type(path: &std::path::Path) -> io::Result<i64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is a NUL-terminated string and `st` a live local the call fills.
    let rc = unsafe { libc::statfs(c_path.as_ptr(), &mut st) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
    Ok(st.f_type as i64)
}

/// The logical block size of the block device open as `file` (BLKSSZGET): the unit `O_DIRECT`
/// offsets and lengths must be multiples of.
pub fn logical_block_size(file: &File) -> io::Result<u64> {
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int to the pointer, which points to a live local int.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::BLKSSZGET as _, &mut size) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size.max(0) as u64)
}

/// What `statx(STATX_DIOALIGN)` says of `file`: `Some((offset and length alignment, memory
/// alignment))` for `O_DIRECT`, or `None` where the kernel or filesystem does not tell
/// (before Linux 6.1, or a filesystem that does not report it).
pub fn dio_align(file: &File) -> io::Result<Option<(u64, u64)>> {
    // SAFETY: an all-zero statx is a valid value of this plain C struct.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: the path is a NUL-terminated empty string (AT_EMPTY_PATH: the descriptor itself),
    // and `st` a live local the call fills.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut st,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::EINVAL) => Ok(None),
            _ => Err(e),
        };
    }
    if st.stx_mask & libc::STATX_DIOALIGN == 0 || st.stx_dio_offset_align == 0 {
        return Ok(None);
    }
    Ok(Some((
        u64::from(st.stx_dio_offset_align),
        u64::from(st.stx_dio_mem_align),
    )))
}

/// The calling thread's timer slack in nanoseconds (how late the kernel may wake a sleep to
/// batch wake-ups; 50 µs by default).
pub fn timer_slack() -> u64 {
    // SAFETY: PR_GET_TIMERSLACK takes no pointer and only reads the calling thread's setting.
    let rc = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    u64::try_from(rc).unwrap_or(50_000)
}

/// Sets the calling thread's timer slack (nanoseconds, at least 1).
pub fn set_timer_slack(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes a plain value and changes only the calling thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns.max(1) as libc::c_ulong, 0, 0, 0) };
}

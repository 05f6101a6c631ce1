//! `FileMember`: a regular file or a block device, with positional I/O.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

use crate::aligned::AlignedBuf;
use crate::direct::Direct;
use crate::error::{annotate, check_range, MemberError};
use crate::exclusive::{self, Identity};
use crate::sys::{self, Fallocate};
use crate::uring::{self, MemberIo, RingAsk, RingTarget};
use crate::{Member, MemberCache, OpenOptions};

/// Largest buffer used when zeroes have to be written out.
const ZERO_BUFFER_BYTES: u64 = 1 << 20;
/// Block devices take fallocate/BLKZEROOUT ranges on this alignment; the unaligned edges are
/// written as zeroes.
const DEVICE_ALIGN_BYTES: u64 = 4096;
/// The direct-I/O alignment of a file whose filesystem does not report one (STATX_DIOALIGN).
const FILE_DIRECT_ALIGN: u64 = 4096;

/// What kind of file backs a [`FileMember`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Regular,
    BlockDevice,
}

/// A member backed by a regular file or a block device.
#[derive(Debug)]
pub struct FileMember {
    file: File,
    name: String,
    size_bytes: u64,
    kind: FileKind,
    read_only: bool,
    identity: Identity,
    /// `Some` when opened with `O_DIRECT`: its alignment rules.
    direct: Option<Direct>,
    /// How a batch may submit its reads and writes: `Threads` when io_uring is unavailable.
    io: MemberIo,
}

fn io_err<'a>(name: &'a str, action: &'static str) -> impl FnOnce(io::Error) -> MemberError + 'a {
    move |source| MemberError::Io {
        name: name.to_string(),
        action,
        source,
    }
}

impl FileMember {
    /// Opens `path` (called `name` in messages); creates it sparse if missing and
    /// `opts.create_size` is given. Block devices get direct I/O, files the page cache
    /// ([`MemberCache::Auto`]).
    pub fn open(path: &Path, name: &str, opts: &OpenOptions) -> Result<FileMember, MemberError> {
        FileMember::open_cached(path, name, opts, MemberCache::Auto)
    }

    /// [`FileMember::open`] with direct I/O (`O_DIRECT`) or the page cache as `cache` says.
    /// Direct I/O asked for where the filesystem has none (tmpfs) is refused, saying so.
    pub fn open_cached(
        path: &Path,
        name: &str,
        opts: &OpenOptions,
        cache: MemberCache,
    ) -> Result<FileMember, MemberError> {
        let exists = path.try_exists().map_err(io_err(name, "look up"))?;
        if !exists {
            create_sparse(path, name, opts)?;
        }
        // A block device opened for writing is claimed exclusively (O_EXCL): refused while
        // mounted or held by another array; a regular file is locked after opening.
        let device = std::fs::metadata(path)
            .map_err(io_err(name, "stat"))?
            .file_type()
            .is_block_device();
        let exclusive = device && !opts.read_only && opts.exclusive;
        let want_direct = match cache {
            MemberCache::Direct => true,
            MemberCache::Buffered => false,
            MemberCache::Auto => device,
        };
        let open = |direct: bool| {
            let flags =
                if exclusive { libc::O_EXCL } else { 0 } | if direct { libc::O_DIRECT } else { 0 };
            std::fs::OpenOptions::new()
                .read(true)
                .write(!opts.read_only)
                .custom_flags(flags)
                .open(path)
        };
        let opened = match open(want_direct) {
            // EINVAL: no O_DIRECT here. By default that is no reason to refuse the member.
            Err(e) if want_direct && e.raw_os_error() == Some(libc::EINVAL) => {
                if cache == MemberCache::Direct {
                    return Err(no_direct(name));
                }
                open(false).map(|f| (f, false))
            }
            other => other.map(|f| (f, want_direct)),
        };
        let (file, direct) = opened.map_err(|source| {
            if exclusive && source.raw_os_error() == Some(libc::EBUSY) {
                in_use(path, name)
            } else {
                io_err(name, "open")(source)
            }
        })?;
        let file_type = file.metadata().map_err(io_err(name, "stat"))?.file_type();
        if file_type.is_file()
            && !opts.read_only
            && opts.exclusive
            && !exclusive::lock_file_waiting(&file, exclusive::RELEASE_WAIT, || {
                exclusive::holder_of(path).is_some()
            })
            .map_err(io_err(name, "lock"))?
        {
            return Err(in_use(path, name));
        }
        let identity = Identity::of_file(&file).map_err(io_err(name, "stat"))?;
        let (kind, size_bytes) = if file_type.is_file() {
            let len = file.metadata().map_err(io_err(name, "stat"))?.len();
            (FileKind::Regular, len)
        } else if file_type.is_block_device() {
            let len = sys::block_device_size(&file).map_err(io_err(name, "read the size of"))?;
            (FileKind::BlockDevice, len)
        } else {
            let kind = describe(&file_type).to_string();
            return Err(MemberError::NotFileOrDevice {
                name: name.to_string(),
                kind,
            });
        };
        if size_bytes == 0 {
            return Err(MemberError::Empty {
                name: name.to_string(),
            });
        }
        let direct = if direct {
            Some(direct_rules(&file, kind, name, size_bytes)?)
        } else {
            None
        };
        Ok(FileMember {
            file,
            name: name.to_string(),
            size_bytes,
            kind,
            read_only: opts.read_only,
            identity,
            direct,
            io: if uring::probe().is_ok() {
                MemberIo::Auto
            } else {
                MemberIo::Threads
            },
        })
    }

    /// The member with its reads and writes submitted as `io` says ([`crate::uring`]): `Auto`
    /// falls back to positional calls where io_uring is unavailable ([`uring::probe`] says
    /// why); `Uring` is refused there, naming the reason.
    pub fn with_member_io(mut self, io: MemberIo) -> Result<FileMember, MemberError> {
        self.io = match (io, uring::probe()) {
            (MemberIo::Threads, _) | (MemberIo::Auto, Err(_)) => MemberIo::Threads,
            (MemberIo::Uring, Err(why)) => {
                return Err(MemberError::Refused {
                    name: self.name,
                    reason: format!(
                        "io_uring is unavailable here ({why}): use --member-io threads or auto \
                         (member_io = \"threads\")"
                    ),
                })
            }
            (io, Ok(())) => io,
        };
        Ok(self)
    }

    /// How a batch submits this member's reads and writes (`Threads` where io_uring is
    /// unavailable).
    pub fn member_io(&self) -> MemberIo {
        self.io
    }

    /// True when the member was opened for direct I/O (`O_DIRECT`): nothing of it is cached
    /// in the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// The offset and length alignment of direct I/O (`None`: buffered).
    pub fn direct_align(&self) -> Option<u64> {
        self.direct.as_ref().map(Direct::align)
    }

    /// Writes all of `buf` at `offset`, through the bounce path when direct and unaligned.
    fn write_raw(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        match &self.direct {
            Some(d) => d.write(&self.file, &[buf], offset),
            None => self.file.write_all_at(buf, offset),
        }
    }

    /// Regular file or block device.
    pub fn kind(&self) -> FileKind {
        self.kind
    }

    fn check_writable(&self, op: &str) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("member {}: {op} refused: opened read-only", self.name),
            ));
        }
        Ok(())
    }

    /// Zeroes the range by writing zero buffers (the fallback that always works).
    fn write_zero_bytes(&self, offset: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let zeroes = AlignedBuf::zeroed(len.min(ZERO_BUFFER_BYTES) as usize, 0);
        let mut done = 0u64;
        while done < len {
            let piece = (len - done).min(ZERO_BUFFER_BYTES);
            self.write_raw(&zeroes[..piece as usize], offset + done)?;
            done += piece;
        }
        Ok(())
    }

    /// Zeroes `[offset, offset + len)` trying each way in `modes` in turn, then BLKZEROOUT on
    /// block devices, then written zeroes. Every way leaves zeroes behind.
    fn zero(&self, offset: u64, len: u64, modes: &[Fallocate]) -> io::Result<()> {
        let (start, end) = match self.kind {
            FileKind::Regular => (offset, offset + len),
            FileKind::BlockDevice => aligned_inner(offset, len),
        };
        if start >= end {
            return self.write_zero_bytes(offset, len);
        }
        self.write_zero_bytes(offset, start - offset)?;
        self.write_zero_bytes(end, offset + len - end)?;
        if self.zero_in_kernel(start, end, modes)? {
            return Ok(());
        }
        self.write_zero_bytes(start, end - start)
    }

    /// Zeroes `[start, end)` (device-aligned for a block device) with `modes` or the block
    /// device's zero-out; `Ok(false)` when none is supported. Under the block locks of the
    /// range when direct: a read-modify-write of a partial block in it is wholly before or after.
    fn zero_in_kernel(&self, start: u64, end: u64, modes: &[Fallocate]) -> io::Result<bool> {
        let _held = self.direct.as_ref().map(|d| d.hold(start, end - start));
        for &mode in modes {
            match sys::fallocate(&self.file, mode, start, end - start) {
                Ok(()) => return Ok(true),
                Err(e) if sys::is_unsupported(&e) => continue,
                Err(e) => return Err(e),
            }
        }
        if self.kind == FileKind::BlockDevice {
            match sys::block_zero_out(&self.file, start, end - start) {
                Ok(()) => return Ok(true),
                Err(e) if sys::is_unsupported(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }
}

/// The largest device-aligned sub-range `[start, end)` of `[offset, offset + len)`.
fn aligned_inner(offset: u64, len: u64) -> (u64, u64) {
    let start = offset.div_ceil(DEVICE_ALIGN_BYTES) * DEVICE_ALIGN_BYTES;
    let end = (offset + len) / DEVICE_ALIGN_BYTES * DEVICE_ALIGN_BYTES;
    (start, end.max(start))
}

/// The direct-I/O alignment of `file`: a block device's logical block size; what the filesystem
/// reports for a file (STATX_DIOALIGN), else 4096. A file whose size is not a multiple of it is
/// refused (its last block could not be read or written directly).
fn direct_rules(
    file: &File,
    kind: FileKind,
    name: &str,
    size_bytes: u64,
) -> Result<Direct, MemberError> {
    let (align, mem_align) = match kind {
        FileKind::BlockDevice => {
            let lbs =
                sys::logical_block_size(file).map_err(io_err(name, "read the block size of"))?;
            let lbs = if lbs.is_power_of_two() { lbs } else { 512 };
            (lbs, lbs)
        }
        FileKind::Regular => match sys::dio_align(file).map_err(io_err(name, "stat"))? {
            Some((offset, memory)) if offset.is_power_of_two() => (
                offset,
                if memory.is_power_of_two() {
                    memory
                } else {
                    offset
                },
            ),
            _ => (FILE_DIRECT_ALIGN, FILE_DIRECT_ALIGN),
        },
    };
    if !size_bytes.is_multiple_of(align) {
        return Err(MemberError::Refused {
            name: name.to_string(),
            reason: format!(
                "its size ({size_bytes} bytes) is not a multiple of its direct-I/O block size \
                 ({align} bytes): use --member-cache buffered, or make it a multiple"
            ),
        });
    }
    Ok(Direct::new(align, mem_align))
}

/// The error for direct I/O asked for where the filesystem has none.
fn no_direct(name: &str) -> MemberError {
    MemberError::Refused {
        name: name.to_string(),
        reason: "its filesystem does not support direct I/O (O_DIRECT): use --member-cache buffered (member_cache = \"buffered\")"
            .to_string(),
    }
}

/// The error for a member another array or program holds.
fn in_use(path: &Path, name: &str) -> MemberError {
    MemberError::InUse {
        name: name.to_string(),
        holder: exclusive::holder_of(path),
    }
}

fn create_sparse(path: &Path, name: &str, opts: &OpenOptions) -> Result<(), MemberError> {
    let size = match opts.create_size {
        Some(size) if !opts.read_only => size,
        _ => {
            return Err(MemberError::Missing {
                name: name.to_string(),
            })
        }
    };
    if size == 0 {
        return Err(MemberError::Empty {
            name: name.to_string(),
        });
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_err(name, "create"))?;
    file.set_len(size).map_err(io_err(name, "set the size of"))
}

fn describe(file_type: &std::fs::FileType) -> &'static str {
    if file_type.is_dir() {
        "directory"
    } else if file_type.is_char_device() {
        "character device"
    } else if file_type.is_fifo() {
        "fifo"
    } else if file_type.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

impl Member for FileMember {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.size_bytes
    }

    fn identity(&self) -> Option<Identity> {
        Some(self.identity.clone())
    }

    /// The descriptor for a ring batch, for a read or write in range (a write only when
    /// writable) whose buffers a direct descriptor takes as they are; anything else (an
    /// unaligned direct operation goes through the bounce buffer) is the member's own call.
    fn ring_target(&self, ask: RingAsk) -> Option<RingTarget<'_>> {
        let fits = ask
            .offset
            .checked_add(ask.len)
            .is_some_and(|end| end <= self.size_bytes);
        if self.io == MemberIo::Threads
            || !fits
            || ask.len == 0
            || ask.buffers > uring::RING_IOV_MAX
            || (ask.write && self.read_only)
        {
            return None;
        }
        let locks = match &self.direct {
            Some(d) if !d.aligned_bits(ask.offset, ask.addr_bits, ask.len_bits) => return None,
            Some(d) if ask.write => Some((d.locks(), d.align())),
            _ => None,
        };
        Some(RingTarget {
            file: &self.file,
            name: &self.name,
            offset: ask.offset,
            locks,
            direct: self.direct.is_some(),
            forced: self.io == MemberIo::Uring,
        })
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let len = buf.len() as u64;
        check_range(&self.name, "read", offset, len, self.size_bytes)?;
        match &self.direct {
            Some(d) => d.read(&self.file, &mut [buf], offset),
            None => self.file.read_exact_at(buf, offset),
        }
        .map_err(|e| annotate(&self.name, "read", offset, len, e))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let len = buf.len() as u64;
        check_range(&self.name, "write", offset, len, self.size_bytes)?;
        self.check_writable("write")?;
        self.write_raw(buf, offset)
            .map_err(|e| annotate(&self.name, "write", offset, len, e))
    }

    /// One `preadv` for all of `bufs` (a request's contiguous chunks on this member).
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
        check_range(&self.name, "read", offset, len, self.size_bytes)?;
        match &self.direct {
            Some(d) => d.read(&self.file, bufs, offset),
            None => sys::preadv_all(&self.file, bufs, offset),
        }
        .map_err(|e| annotate(&self.name, "read", offset, len, e))
    }

    /// One `pwritev` for all of `bufs`.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
        check_range(&self.name, "write", offset, len, self.size_bytes)?;
        self.check_writable("write")?;
        match &self.direct {
            Some(d) => d.write(&self.file, bufs, offset),
            None => sys::pwritev_all(&self.file, bufs, offset),
        }
        .map_err(|e| annotate(&self.name, "write", offset, len, e))
    }

    fn flush(&self) -> io::Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.file
            .sync_data()
            .map_err(|e| annotate(&self.name, "flush", 0, self.size_bytes, e))
    }

    /// One `pwritev2(RWF_DSYNC)`: only this range is written back and synced (plus the
    /// device cache flush), not the file's other dirty pages as `fdatasync` would. With direct
    /// I/O the same (the kernel sends the write with FUA or follows it with a cache flush); an
    /// unaligned one goes through the bounce path, then `fdatasync`.
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let len = buf.len() as u64;
        check_range(&self.name, "write", offset, len, self.size_bytes)?;
        self.check_writable("write")?;
        let aligned = self
            .direct
            .as_ref()
            .is_none_or(|d| d.is_aligned(buf, offset));
        let result = match aligned {
            true => {
                let _held = self.direct.as_ref().map(|d| d.hold(offset, len));
                sys::pwrite_dsync(&self.file, buf, offset)
            }
            false => Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
        };
        let result = match result {
            Err(e) if sys::dsync_unsupported(&e) => self
                .write_raw(buf, offset)
                .and_then(|()| self.file.sync_data()),
            other => other,
        };
        result.map_err(|e| annotate(&self.name, "durable write", offset, len, e))
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        check_range(&self.name, "trim", offset, len, self.size_bytes)?;
        self.check_writable("trim")?;
        self.zero(offset, len, &[Fallocate::PunchHole])
            .map_err(|e| annotate(&self.name, "trim", offset, len, e))
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        check_range(&self.name, "write-zeroes", offset, len, self.size_bytes)?;
        self.check_writable("write-zeroes")?;
        let modes = [Fallocate::ZeroRange, Fallocate::PunchHole];
        self.zero(offset, len, &modes)
            .map_err(|e| annotate(&self.name, "write-zeroes", offset, len, e))
    }
}

#[cfg(test)]
mod tests {
    use super::aligned_inner;

    #[test]
    fn aligned_inner_range() {
        assert_eq!(aligned_inner(0, 8192), (0, 8192));
        assert_eq!(aligned_inner(1, 8192), (4096, 8192));
        assert_eq!(aligned_inner(1, 100), (4096, 4096));
        assert_eq!(aligned_inner(4095, 4098), (4096, 8192));
    }
}

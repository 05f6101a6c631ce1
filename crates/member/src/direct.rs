//! Direct I/O (`O_DIRECT`) for a [`crate::FileMember`]: transfers that bypass the page cache, so
//! nothing is cached below raidkit and every read and write reaches the device.
//!
//! `O_DIRECT` wants the file offset, the length and the memory address of every transfer aligned
//! (to the device's logical block size; for a file, what `statx(STATX_DIOALIGN)` reports, else
//! 4096). A transfer that is aligned goes straight to the kernel from the caller's buffers (the
//! engine's and the NBD server's buffers are [`crate::AlignedBuf`]s). Any other is done here, in
//! this one place, through an aligned bounce buffer on the same descriptor (a second, buffered
//! descriptor would not be coherent with this one): a read reads the covering aligned blocks and
//! copies the asked bytes out; a write with an unaligned start or end reads the partial head and
//! tail blocks and writes the covering blocks back (read-modify-write).
//!
//! A partial write's read-modify-write holds its blocks' locks (`crate::block_locks`: why,
//! and what every other write holds).
//! Bounce buffers are at most 1 MiB: a larger transfer goes through in pieces.

use crate::aligned::AlignedBuf;
use crate::block_locks::{BlockLocks, Held};
use crate::sys;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Largest bounce buffer; longer unaligned transfers go in pieces of this size.
const BOUNCE_BYTES: u64 = 1 << 20;

/// The alignment rules of one direct-I/O descriptor, and its block locks.
pub(crate) struct Direct {
    /// Offsets and lengths must be multiples of this (a power of two).
    align: u64,
    /// Buffer addresses must be multiples of this (a power of two).
    mem_align: usize,
    blocks: BlockLocks,
}

impl Direct {
    /// `align` for offsets and lengths, `mem_align` for addresses (both powers of two, not 0).
    pub(crate) fn new(align: u64, mem_align: u64) -> Direct {
        assert!(align.is_power_of_two() && mem_align.is_power_of_two());
        Direct {
            align,
            mem_align: mem_align.max(1) as usize,
            blocks: BlockLocks::new(),
        }
    }

    /// The offset and length alignment.
    pub(crate) fn align(&self) -> u64 {
        self.align
    }

    /// True when an operation at `offset` over buffers whose addresses and lengths OR to
    /// `addr_bits` and `len_bits` can go to the kernel as it is.
    pub(crate) fn aligned_bits(&self, offset: u64, addr_bits: usize, len_bits: u64) -> bool {
        offset.is_multiple_of(self.align)
            && addr_bits.is_multiple_of(self.mem_align)
            && len_bits.is_multiple_of(self.align)
    }

    /// The block locks (a ring batch takes them itself: `uring::submit`).
    pub(crate) fn locks(&self) -> &BlockLocks {
        &self.blocks
    }

    fn aligned(&self, offset: u64, bufs: impl Iterator<Item = (usize, usize)>) -> bool {
        let a = self.align;
        offset.is_multiple_of(a)
            && bufs.into_iter().all(|(addr, len)| {
                addr.is_multiple_of(self.mem_align) && (len as u64).is_multiple_of(a)
            })
    }

    /// True when `buf` at `offset` can go to the kernel as it is.
    pub(crate) fn is_aligned(&self, buf: &[u8], offset: u64) -> bool {
        self.aligned(offset, std::iter::once((buf.as_ptr() as usize, buf.len())))
    }

    fn bounce(&self, start: u64, end: u64) -> AlignedBuf {
        AlignedBuf::zeroed(
            (end - start).min(BOUNCE_BYTES) as usize,
            self.align as usize,
        )
    }

    fn cover(&self, offset: u64, len: u64) -> (u64, u64) {
        let a = self.align;
        (offset / a * a, (offset + len).div_ceil(a) * a)
    }

    /// Reads `bufs` one after the other from `offset`.
    pub(crate) fn read(&self, file: &File, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        if self.aligned(offset, bufs.iter().map(|b| (b.as_ptr() as usize, b.len()))) {
            return sys::preadv_all(file, bufs, offset);
        }
        let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
        if len == 0 {
            return Ok(());
        }
        let (start, end) = self.cover(offset, len);
        let mut bounce = self.bounce(start, end);
        let mut at = start;
        while at < end {
            let piece = (end - at).min(BOUNCE_BYTES);
            let b = &mut bounce[..piece as usize];
            file.read_exact_at(b, at)?;
            let lo = at.max(offset);
            let hi = (at + piece).min(offset + len);
            scatter(
                bufs,
                (lo - offset) as usize,
                &b[(lo - at) as usize..(hi - at) as usize],
            );
            at += piece;
        }
        Ok(())
    }

    /// Writes `bufs` one after the other from `offset`.
    pub(crate) fn write(&self, file: &File, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
        if self.aligned(offset, bufs.iter().map(|b| (b.as_ptr() as usize, b.len()))) {
            let _held = self.hold(offset, len);
            return sys::pwritev_all(file, bufs, offset);
        }
        if len == 0 {
            return Ok(());
        }
        let (start, end) = self.cover(offset, len);
        let _held = self.hold(offset, len);
        let mut bounce = self.bounce(start, end);
        let mut at = start;
        while at < end {
            let piece = (end - at).min(BOUNCE_BYTES);
            let b = &mut bounce[..piece as usize];
            let a = self.align as usize;
            if at < offset {
                file.read_exact_at(&mut b[..a], at)?;
            }
            if at + piece > offset + len {
                let last = b.len() - a;
                file.read_exact_at(&mut b[last..], at + last as u64)?;
            }
            let lo = at.max(offset);
            let hi = (at + piece).min(offset + len);
            gather(
                bufs,
                (lo - offset) as usize,
                &mut b[(lo - at) as usize..(hi - at) as usize],
            );
            file.write_all_at(b, at)?;
            at += piece;
        }
        Ok(())
    }

    /// Takes the block locks a write of `[offset, offset + len)` that holds none yet needs
    /// ([`BlockLocks::hold`] over this descriptor's alignment).
    pub(crate) fn hold(&self, offset: u64, len: u64) -> Held<'_> {
        self.blocks.hold(self.align, offset, len)
    }
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Direct")
            .field("align", &self.align)
            .field("mem_align", &self.mem_align)
            .finish()
    }
}

/// Copies `src` into the concatenation of `bufs`, starting `skip` bytes into it.
fn scatter(bufs: &mut [&mut [u8]], mut skip: usize, mut src: &[u8]) {
    for buf in bufs.iter_mut() {
        if src.is_empty() {
            return;
        }
        if skip >= buf.len() {
            skip -= buf.len();
            continue;
        }
        let n = (buf.len() - skip).min(src.len());
        buf[skip..skip + n].copy_from_slice(&src[..n]);
        src = &src[n..];
        skip = 0;
    }
}

/// Fills `dst` from the concatenation of `bufs`, starting `skip` bytes into it.
fn gather(bufs: &[&[u8]], mut skip: usize, mut dst: &mut [u8]) {
    for buf in bufs {
        if dst.is_empty() {
            return;
        }
        if skip >= buf.len() {
            skip -= buf.len();
            continue;
        }
        let n = (buf.len() - skip).min(dst.len());
        dst[..n].copy_from_slice(&buf[skip..skip + n]);
        dst = &mut dst[n..];
        skip = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_and_gather_cross_buffers() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 4];
        {
            let mut bufs: [&mut [u8]; 2] = [&mut a, &mut b];
            scatter(&mut bufs, 2, &[1, 2, 3]);
        }
        assert_eq!((a, b), ([0, 0, 1], [2, 3, 0, 0]));
        let mut dst = [0u8; 4];
        gather(&[&a, &b], 1, &mut dst);
        assert_eq!(dst, [0, 1, 2, 3]);
    }
}

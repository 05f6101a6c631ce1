//! [`ScratchPool`]: the chunk-sized buffers RAID 5/6 requests compute in (parity, data read
//! for read-modify-write or reconstruct-write, the columns of a degraded stripe), reused
//! across requests.
//!
//! Every such buffer is at most one chunk, and a large write needs one or two per stripe: a
//! 32 MiB RAID 6 write over 4 members allocated and freed 32 MiB of them. Freed to the
//! allocator by many request threads, glibc's per-thread arenas kept them (a server measured
//! 612 MiB resident with 16 + 64 MiB of configured limits, docs/DESIGN.md "Memory bounds");
//! returning them to the kernel instead (a low trim threshold) cost 2.6x the CPU per write.
//! A pool of chunk-sized buffers keeps the memory and its pages warm, and bounds what stays
//! idle: at most `idle_max_bytes`, beyond which a returned buffer is freed.
//!
//! Buffers are [`member::AlignedBuf`]s (page-aligned), so a direct-I/O member (`O_DIRECT`)
//! reads into and writes from them without a bounce copy.
//!
//! A [`Scratch`] is not zeroed when it is reused: every user fills the part it reads (member
//! reads, parity generation and reconstruction overwrite their output) before anything of it
//! is written to a member or copied to a client.

use member::AlignedBuf;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

/// Idle scratch kept for reuse, by default (a few requests' worth).
pub const SCRATCH_IDLE_MAX_BYTES_DEFAULT: u64 = 32 << 20;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct ScratchPool {
    /// Every pooled buffer is exactly this long: the array's chunk.
    buf_bytes: usize,
    idle: Mutex<Vec<AlignedBuf>>,
    idle_max_count: usize,
}

impl ScratchPool {
    pub fn new(chunk_bytes: u64, idle_max_bytes: u64) -> ScratchPool {
        assert!(chunk_bytes > 0);
        ScratchPool {
            buf_bytes: usize::try_from(chunk_bytes).expect("chunk fits in memory"),
            idle: Mutex::new(Vec::new()),
            idle_max_count: (idle_max_bytes / chunk_bytes) as usize,
        }
    }

    /// A buffer of `len` bytes (at most a chunk) with unspecified contents: the caller fills
    /// whatever it reads.
    pub fn take(&self, len: usize) -> Scratch<'_> {
        assert!(
            len <= self.buf_bytes,
            "scratch of {len} bytes above the chunk ({} bytes)",
            self.buf_bytes
        );
        let reused = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let bytes = reused.unwrap_or_else(|| AlignedBuf::zeroed(self.buf_bytes, 0));
        assert_eq!(bytes.len(), self.buf_bytes);
        Scratch {
            pool: Some(self),
            bytes,
            len,
        }
    }

    fn give(&self, bytes: AlignedBuf) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.idle_max_count {
            idle.push(bytes);
        }
    }

    /// Buffers idle now (for tests).
    #[cfg(test)]
    pub fn idle_count(&self) -> usize {
        self.idle.lock().unwrap().len()
    }
}

/// A chunk-sized buffer from a [`ScratchPool`], seen as its first `len` bytes; goes back to
/// the pool when dropped. [`Scratch::empty`] holds nothing (a block a plan does not need).
#[derive(Debug)]
pub(crate) struct Scratch<'p> {
    pool: Option<&'p ScratchPool>,
    bytes: AlignedBuf,
    len: usize,
}

impl Scratch<'_> {
    pub fn empty() -> Self {
        Scratch {
            pool: None,
            bytes: AlignedBuf::zeroed(0, 0),
            len: 0,
        }
    }
}

impl Default for Scratch<'_> {
    fn default() -> Self {
        Scratch::empty()
    }
}

impl Deref for Scratch<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl DerefMut for Scratch<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..self.len]
    }
}

impl AsMut<[u8]> for Scratch<'_> {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        if let Some(pool) = self.pool {
            pool.give(std::mem::take(&mut self.bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_up_to_the_idle_limit() {
        let pool = ScratchPool::new(4096, 2 * 4096);
        let a = pool.take(4096);
        let b = pool.take(100);
        let c = pool.take(0);
        assert_eq!((a.len(), b.len(), c.len()), (4096, 100, 0));
        let a_ptr = a.as_ptr();
        drop(a);
        assert_eq!(pool.idle_count(), 1);
        let again = pool.take(10);
        assert_eq!(again.as_ptr(), a_ptr, "reused");
        drop(again);
        drop(b);
        drop(c); // beyond the limit of two: freed
        assert_eq!(pool.idle_count(), 2);
        let empty = Scratch::empty();
        assert!(empty.is_empty());
        drop(empty);
        assert_eq!(pool.idle_count(), 2);
    }

    #[test]
    #[should_panic(expected = "above the chunk")]
    fn larger_than_a_chunk_is_a_bug() {
        ScratchPool::new(4096, 0).take(4097);
    }
}

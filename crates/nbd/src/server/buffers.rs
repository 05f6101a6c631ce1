//! [`BufferPool`]: request and reply buffers reused across requests.
//!
//! A 1 MiB read used to allocate a zero-filled buffer, read into it, send it and free it. The
//! zero-fill alone was ~5 % of the server's CPU on sequential reads, and a freed buffer of that
//! size goes back to the kernel (`munmap`) only to be faulted in again for the next request.
//! Buffers of at least [`POOLED_MIN_BYTES`] now come from size classes (powers of two) and go
//! back to them after the reply is sent; a reused buffer is never zeroed, because every byte a
//! client can see is written first (the export fills a read buffer whole or the read fails and
//! the buffer is not sent; a write payload is read whole from the socket).
//!
//! Every buffer is a [`member::AlignedBuf`] (page-aligned): a direct-I/O member (`O_DIRECT`)
//! reads into and writes from it as it is, where a `Vec` (glibc puts large blocks 16 bytes into
//! a page) would cost a bounce copy in the member.
//!
//! Bounds: idle buffers hold at most `idle_max_bytes` (a buffer given back beyond that is
//! freed); buffers in use are bounded by the server's buffer budget, which is charged the
//! class size ([`BufferPool::charged_bytes`]), not the requested length.

use member::AlignedBuf;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Buffers smaller than this are allocated per request (cheap, and would crowd the pool).
pub(crate) const POOLED_MIN_BYTES: usize = 64 << 10;

/// A request's bytes: the first `len` bytes of an initialized allocation.
#[derive(Debug, Default)]
pub(crate) struct Buffer {
    bytes: AlignedBuf,
    len: usize,
}

impl Buffer {
    /// A buffer holding exactly `bytes`.
    #[cfg(test)]
    pub fn from_vec(bytes: Vec<u8>) -> Buffer {
        let len = bytes.len();
        let mut aligned = AlignedBuf::zeroed(len, 0);
        aligned.copy_from_slice(&bytes);
        Buffer {
            bytes: aligned,
            len,
        }
    }
}

impl Deref for Buffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..self.len]
    }
}

/// See the module documentation.
pub(crate) struct BufferPool {
    /// Class `k` holds idle buffers of `POOLED_MIN_BYTES << k` bytes.
    classes: Box<[Mutex<Vec<AlignedBuf>>]>,
    idle_bytes: AtomicU64,
    idle_max_bytes: u64,
}

impl BufferPool {
    /// A pool for buffers up to `max_request_bytes`, keeping at most `idle_max_bytes` idle.
    pub fn new(max_request_bytes: u32, idle_max_bytes: u64) -> BufferPool {
        let top = class_index(max_request_bytes.max(1) as usize).unwrap_or(0);
        BufferPool {
            classes: (0..=top).map(|_| Mutex::new(Vec::new())).collect(),
            idle_bytes: AtomicU64::new(0),
            idle_max_bytes,
        }
    }

    /// Bytes a buffer of `len` really occupies (what the buffer budget is charged).
    pub fn charged_bytes(len: usize) -> u64 {
        match class_index(len) {
            Some(k) => (POOLED_MIN_BYTES << k) as u64,
            None => len.next_multiple_of(member::DIRECT_ALIGN) as u64,
        }
    }

    /// A buffer of `len` bytes whose contents are unspecified (zeroes or an earlier request's
    /// bytes): the caller must overwrite all of it before anyone reads it.
    pub fn take(&self, len: usize) -> Buffer {
        let Some(k) = class_index(len) else {
            return Buffer {
                bytes: AlignedBuf::zeroed(len, 0),
                len,
            };
        };
        assert!(
            k < self.classes.len(),
            "buffer of {len} bytes above the pool"
        );
        let idle = self.classes[k]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        let bytes = match idle {
            Some(bytes) => {
                self.idle_bytes
                    .fetch_sub(bytes.len() as u64, Ordering::Relaxed);
                bytes
            }
            None => AlignedBuf::zeroed(POOLED_MIN_BYTES << k, 0),
        };
        assert!(bytes.len() >= len);
        Buffer { bytes, len }
    }

    /// Takes `buffer` back for reuse, or frees it if the pool is full or it is not pooled.
    pub fn give(&self, buffer: Buffer) {
        let bytes = buffer.bytes;
        let Some(k) = class_index(bytes.len()) else {
            return;
        };
        if bytes.len() != POOLED_MIN_BYTES << k || k >= self.classes.len() {
            return; // not one of ours
        }
        let size = bytes.len() as u64;
        let before = self.idle_bytes.fetch_add(size, Ordering::Relaxed);
        if before + size > self.idle_max_bytes {
            self.idle_bytes.fetch_sub(size, Ordering::Relaxed);
            return;
        }
        self.classes[k]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(bytes);
    }

    /// Bytes held by idle buffers now.
    #[cfg(test)]
    pub fn idle_bytes(&self) -> u64 {
        self.idle_bytes.load(Ordering::Relaxed)
    }
}

/// The size class of a buffer of `len` bytes, `None` below the pooled minimum.
fn class_index(len: usize) -> Option<usize> {
    if len < POOLED_MIN_BYTES {
        return None;
    }
    let rounded = len.next_power_of_two();
    Some((rounded / POOLED_MIN_BYTES).trailing_zeros() as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_round_up_to_powers_of_two() {
        assert_eq!(class_index(4096), None);
        assert_eq!(class_index(POOLED_MIN_BYTES - 1), None);
        assert_eq!(class_index(POOLED_MIN_BYTES), Some(0));
        assert_eq!(class_index(POOLED_MIN_BYTES + 1), Some(1));
        assert_eq!(class_index(1 << 20), Some(4));
        assert_eq!(class_index(32 << 20), Some(9));
        // A small buffer is a whole page (aligned for direct I/O); an empty one is nothing.
        assert_eq!(BufferPool::charged_bytes(100), 4096);
        assert_eq!(BufferPool::charged_bytes(4097), 8192);
        assert_eq!(BufferPool::charged_bytes(0), 0);
        assert_eq!(BufferPool::charged_bytes((1 << 20) + 1), 2 << 20);
    }

    #[test]
    fn buffers_are_reused_and_idle_bytes_bounded() {
        let pool = BufferPool::new(32 << 20, 3 << 20);
        let mut a = pool.take(1 << 20);
        assert_eq!(a.len(), 1 << 20);
        a.fill(7);
        let a_ptr = a.as_ptr();
        pool.give(a);
        assert_eq!(pool.idle_bytes(), 1 << 20);
        // A smaller request of the same class gets the same allocation, length as asked.
        let b = pool.take(700 << 10);
        assert_eq!((b.as_ptr(), b.len()), (a_ptr, 700 << 10));
        assert_eq!(pool.idle_bytes(), 0);
        let c = pool.take(1 << 20);
        let d = pool.take(2 << 20);
        let e = pool.take(1 << 20);
        pool.give(b);
        pool.give(c);
        pool.give(d); // 1 + 1 + 2 > 3 MiB: freed
        assert_eq!(pool.idle_bytes(), 2 << 20);
        pool.give(e);
        assert_eq!(pool.idle_bytes(), 3 << 20);
        // Small buffers are never pooled.
        let small = pool.take(4096);
        assert_eq!(small.len(), 4096);
        pool.give(small);
        assert_eq!(pool.idle_bytes(), 3 << 20);
        // The largest request fits a class.
        let top = pool.take(32 << 20);
        assert_eq!(top.len(), 32 << 20);
    }

    #[test]
    fn empty_pool_gives_zeroed_buffers() {
        let pool = BufferPool::new(1 << 20, 0);
        let a = pool.take(100 << 10);
        assert!(a.iter().all(|&b| b == 0));
        pool.give(a);
        assert_eq!(pool.idle_bytes(), 0, "idle limit 0 keeps nothing");
    }
}

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
//!
//! Pooled buffers are mapped from the kernel ([`AlignedBuf::mapped`]), not taken from the
//! allocator, so a freed one really leaves the process. And the idle bound is not held by the
//! wrong size: a buffer given back when the idle buffers fill the bound first frees idle
//! buffers of other classes (largest first), since the load has moved to this class. Both
//! together were issue 17's ~400 MiB beyond every bound with 4 connections: after a 1 MiB
//! sequential write, 64 idle 1 MiB buffers filled the 64 MiB idle bound for ever, so every one
//! of nbdcopy's 512 KiB reads allocated a buffer and freed it after the reply; those came from
//! glibc's 16 per-thread arenas (512 KiB is under the 1 MiB mmap threshold `raidkit serve`
//! sets), each of which kept the most its threads ever held, 16-40 MiB each: 616 MiB resident
//! for 180 MiB of live heap (docs/PERFORMANCE.md).

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
            None => AlignedBuf::mapped(POOLED_MIN_BYTES << k),
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
        if !self.make_room(k, bytes.len() as u64) {
            return; // the idle bound is full of this class: freed
        }
        self.classes[k]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(bytes);
    }

    /// Counts `size` more idle bytes for a buffer of class `k` if the bound allows, freeing idle
    /// buffers of other classes (largest first) until it does. `false`: class `k`'s own idle
    /// buffers fill the bound, nothing counted.
    fn make_room(&self, k: usize, size: u64) -> bool {
        loop {
            let before = self.idle_bytes.fetch_add(size, Ordering::Relaxed);
            if before + size <= self.idle_max_bytes {
                return true;
            }
            self.idle_bytes.fetch_sub(size, Ordering::Relaxed);
            let other = (0..self.classes.len())
                .rev()
                .filter(|&j| j != k)
                .find_map(|j| {
                    self.classes[j]
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .pop()
                });
            match other {
                Some(other) => {
                    self.idle_bytes
                        .fetch_sub(other.len() as u64, Ordering::Relaxed);
                }
                None => return false,
            }
        }
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
        assert!(
            d.bytes.is_mapped(),
            "pooled buffers come from the kernel, not an arena"
        );
        pool.give(b);
        pool.give(c);
        pool.give(e); // 1 + 1 + 1 MiB: the bound
        assert_eq!(pool.idle_bytes(), 3 << 20);
        let f = pool.take(1 << 20);
        pool.give(f); // its own class fills the bound: freed
        assert_eq!(pool.idle_bytes(), 3 << 20);
        // 1 + 1 + 1 + 2 > 3 MiB: a 1 MiB buffer of the other class makes room.
        pool.give(d);
        assert_eq!(pool.idle_bytes(), 3 << 20);
        assert_eq!(
            pool.classes[class_index(1 << 20).unwrap()]
                .lock()
                .unwrap()
                .len(),
            1
        );
        // Small buffers are never pooled.
        let small = pool.take(4096);
        assert_eq!(small.len(), 4096);
        pool.give(small);
        assert_eq!(pool.idle_bytes(), 3 << 20);
        // The largest request fits a class.
        let top = pool.take(32 << 20);
        assert_eq!(top.len(), 32 << 20);
    }

    /// Issue 17: idle buffers of one size must not keep another size from being reused. After
    /// 1 MiB writes filled the idle bound, every 512 KiB read allocated and freed a buffer
    /// (and glibc's arenas kept what they freed: 600 MiB resident with 4 connections).
    #[test]
    fn idle_buffers_of_another_size_give_way_to_the_size_in_use() {
        let pool = BufferPool::new(32 << 20, 4 << 20);
        let writes: Vec<Buffer> = (0..4).map(|_| pool.take(1 << 20)).collect();
        writes.into_iter().for_each(|b| pool.give(b));
        assert_eq!(pool.idle_bytes(), 4 << 20);
        // Rounds of 8 reads of 512 KiB in flight: the first round's buffers are kept and the
        // later rounds reuse exactly them.
        let mut seen = std::collections::HashSet::new();
        for round in 0..4 {
            let reads: Vec<Buffer> = (0..8).map(|_| pool.take(512 << 10)).collect();
            let addrs: std::collections::HashSet<usize> =
                reads.iter().map(|b| b.as_ptr() as usize).collect();
            if round > 0 {
                assert_eq!(addrs, seen, "round {round}: reads got buffers not reused");
            }
            seen = addrs;
            reads.into_iter().for_each(|b| pool.give(b));
            assert_eq!(pool.idle_bytes(), 4 << 20);
        }
        assert!(pool.classes[class_index(1 << 20).unwrap()]
            .lock()
            .unwrap()
            .is_empty());
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

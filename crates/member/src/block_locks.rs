//! Block locks: what keeps a read-modify-write of a partial block from putting back old bytes.
//!
//! A member that can only transfer whole blocks (a direct-I/O descriptor; an NBD server with a
//! minimum block size) writes a partial block by reading it, merging the new bytes and writing
//! it back. An aligned write of that block landing between the read and the write would be
//! undone outside the partial write's bytes: bytes neither write left. So a read-modify-write
//! holds its partial blocks' locks exclusively from its read to its write, and every other write
//! (aligned, the whole blocks inside an unaligned one, a durable write, a hole punched or zeroed)
//! holds the locks of the blocks it covers shared: it is wholly before or after any
//! read-modify-write of those blocks, and writes of whole blocks never wait for each other.
//! Writes to the same bytes at the same time have no order, as on a disk (the engine's stripe
//! lock orders them for mirrors and parity).
//!
//! A layer above the members that rewrites whole blocks from partial writes (the encryption
//! layer's 512-byte units, `crypt::Encrypted`) takes them too, and its reads hold their blocks
//! shared ([`BlockLocks::read`]) so that no read decrypts a block half rewritten.
//!
//! 64 readers-writer locks, by block number modulo; taken in index order, so two writers never
//! wait for each other crosswise. A write of 64 blocks or more holds every lock.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks (one bit each in a `u64` mask).
const LOCKS: u32 = u64::BITS;

/// The block locks of one member (or layer).
pub struct BlockLocks {
    locks: Vec<RwLock<()>>,
}

/// Block locks held by one write ([`BlockLocks::hold`]), released on drop.
#[must_use]
pub struct Held<'a>(
    #[allow(dead_code)] // held for their drop
    Vec<Guard<'a>>,
);

enum Guard<'a> {
    Shared(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

impl Default for BlockLocks {
    fn default() -> BlockLocks {
        BlockLocks::new()
    }
}

impl BlockLocks {
    pub fn new() -> BlockLocks {
        BlockLocks {
            locks: (0..LOCKS).map(|_| RwLock::new(())).collect(),
        }
    }

    /// Takes the locks a write of `[offset, offset + len)` over blocks of `block` bytes (a
    /// power of two) needs, holding none yet: its partial head and tail blocks exclusively,
    /// its whole blocks shared.
    pub fn hold(&self, block: u64, offset: u64, len: u64) -> Held<'_> {
        self.take(block, offset, len, true)
    }

    /// Takes the locks a read of `[offset, offset + len)` that must see each of its blocks
    /// whole needs, holding none yet: every block it touches, shared.
    pub fn read(&self, block: u64, offset: u64, len: u64) -> Held<'_> {
        self.take(block, offset, len, false)
    }

    /// The locks of the blocks `[offset, offset + len)` touches; with `partial_exclusive`
    /// its partial head and tail blocks exclusively.
    fn take(&self, block: u64, offset: u64, len: u64, partial_exclusive: bool) -> Held<'_> {
        if len == 0 {
            return Held(Vec::new());
        }
        let (start, end) = (
            offset / block * block,
            (offset + len).div_ceil(block) * block,
        );
        let (first, last) = (start / block, end / block - 1);
        let bit = |block: u64| 1u64 << (block % u64::from(LOCKS));
        let blocks = last - first + 1;
        let all = match blocks >= u64::from(LOCKS) {
            true => u64::MAX,
            false => ((1u64 << blocks) - 1).rotate_left((first % u64::from(LOCKS)) as u32),
        };
        let mut exclusive = 0;
        if partial_exclusive && offset > start {
            exclusive |= bit(first);
        }
        if partial_exclusive && offset + len < end {
            exclusive |= bit(last);
        }
        let mut guards = Vec::with_capacity(all.count_ones() as usize);
        let mut left = all;
        while left != 0 {
            let i = left.trailing_zeros();
            left &= left - 1;
            let lock = &self.locks[i as usize];
            guards.push(match exclusive & (1 << i) != 0 {
                true => Guard::Exclusive(lock.write().unwrap_or_else(|e| e.into_inner())),
                false => Guard::Shared(lock.read().unwrap_or_else(|e| e.into_inner())),
            });
        }
        Held(guards)
    }
}

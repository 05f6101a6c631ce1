//! `Checksummed`: a member's data area whose every 4 KiB block has a crc32c kept in a checksum
//! area of the same member (docs/FORMAT.md "Block checksums", docs/DESIGN.md "Block
//! checksums").
//!
//! - **Read**: the blocks a read touches are read whole and checked against their stored
//!   checksums. A mismatch is an `InvalidData` error of that read ([`is_checksum_error`]),
//!   which the engine treats like any read error of the member: it rewrites the range from
//!   redundancy and reads again. Where a sync still awaits the block ([`ChecksumTrust`]: after
//!   an unclean shutdown, a torn update may have reached the data and not its checksum or the
//!   reverse) the read fails with [`Unsettled`] instead when the array has redundancy (the
//!   engine reconstructs the block and [`Member::settle`] keeps whichever version matches the
//!   checksum, else rewrites the checksum from the data); without redundancy the checksum is
//!   rewritten from the data at once. Both counted apart from mismatches.
//! - **Write, trim, write-zeroes**: the new blocks' checksums are stored after the data; a
//!   partial block is read, its old content checked against its checksum (a mismatch is
//!   carried over, not laundered), merged and its whole new content hashed.
//! - **Cache**: checksum blocks (1024 checksums, 4 MiB of data each) are cached, at most
//!   [`CHECKSUM_CACHE_BLOCKS`] per member; a dirty one is written when evicted and at every
//!   [`Member::flush`] before the member itself is flushed, so a flush makes both durable.
//! - **Order**: 64 granule locks (64 KiB each, by granule modulo) are held shared by reads
//!   and exclusively by writes from the data I/O to the checksum update, so no read sees new
//!   data with an old checksum.
//!
//! The stored value of a block is crc32c(block) XOR crc32c(4096 zero bytes): a zeroed area
//! is right for zeroed data, so `create` need only zero a member.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::check_member_range;
use crate::Member;

/// Data bytes per checksum.
pub const BLOCK: u64 = 4096;
/// Checksums per checksum block.
const PER_BLOCK: u64 = BLOCK / 4;
/// Checksum blocks cached per member (each 4 KiB, covering 4 MiB of data): 1 MiB of memory
/// per member, covering 1 GiB of its data.
pub const CHECKSUM_CACHE_BLOCKS: usize = 256;
/// Granule locks and their size.
const LOCKS: usize = 64;
const GRANULE: u64 = 64 << 10;

/// Counters shared by the checksummed members of one array.
#[derive(Debug, Default)]
pub struct ChecksumStats {
    /// Blocks whose data did not match their checksum (reported as read errors).
    pub mismatches: AtomicU64,
    /// Blocks a sync awaited whose checksum was rewritten from their data.
    pub rehashed: AtomicU64,
    /// Blocks read and checked.
    pub verified: AtomicU64,
    /// Blocks a sync awaited whose checksum did not match their data but did match the
    /// content the array's redundancy gave (mirror copy, parity reconstruction), which was
    /// written over them (`Member::settle`): a torn update rolled back, or corruption healed.
    pub settled: AtomicU64,
}

/// Says whether a block may hold a torn update (a sync has not reached it since an unclean
/// shutdown): there a mismatch rewrites the checksum instead of failing the read.
pub trait ChecksumTrust: Send + Sync {
    /// True when the block at data-area byte `offset` of the member awaits a sync. Must not
    /// block on anything a member call may hold.
    fn unsynced(&self, offset: u64) -> bool;
    /// True when the array has redundancy to decide a torn update from corruption: a
    /// mismatch in an unsynced block is then an [`Unsettled`] read error, which the engine
    /// answers with `Member::settle` and the redundancy's version of the block; false (linear,
    /// RAID 0): the checksum is rewritten from the data at once.
    fn redundant(&self) -> bool {
        false
    }
}

/// What a mismatch in a block means while a trust hook is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    /// No sync awaits the block: corruption.
    No,
    /// A torn update may be there and nothing can tell: rewrite the checksum.
    Rehash,
    /// A torn update may be there: the redundancy decides ([`Unsettled`]).
    Ask,
}

/// Told of each mismatch found (for the operator's log).
pub type MismatchHook = Box<dyn Fn(&Mismatch) + Send + Sync>;

/// What the checksummed members of one array share: counters, the trust hook and the
/// mismatch hook.
#[derive(Default)]
pub struct ChecksumShared {
    pub stats: ChecksumStats,
    trust: RwLock<Option<Arc<dyn ChecksumTrust>>>,
    on_mismatch: RwLock<Option<MismatchHook>>,
}

impl std::fmt::Debug for ChecksumShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChecksumShared")
            .field("stats", &self.stats)
            .finish()
    }
}

impl ChecksumShared {
    pub fn new() -> Arc<ChecksumShared> {
        Arc::new(ChecksumShared::default())
    }

    /// Sets (or with `None` removes) the hook saying which blocks a sync awaits.
    pub fn set_trust(&self, hook: Option<Arc<dyn ChecksumTrust>>) {
        *self.trust.write().unwrap_or_else(|p| p.into_inner()) = hook;
    }

    /// Sets the hook told of each mismatch found.
    pub fn set_on_mismatch(&self, hook: MismatchHook) {
        *self.on_mismatch.write().unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    fn mismatch(&self, m: &Mismatch) {
        if let Some(hook) = self
            .on_mismatch
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            hook(m);
        }
    }

    fn pending(&self, offset: u64) -> Pending {
        let hook = self.trust.read().unwrap_or_else(|p| p.into_inner()).clone();
        match hook {
            Some(h) if h.unsynced(offset) => match h.redundant() {
                true => Pending::Ask,
                false => Pending::Rehash,
            },
            _ => Pending::No,
        }
    }
}

/// True when `e` is an [`Unsettled`] block: a mismatch where a torn update may be.
pub fn is_unsettled(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Unsettled>())
}

/// A block a sync awaits (after an unclean shutdown) whose data does not match its checksum:
/// a torn update or corruption. Not a fault of the member: the engine reconstructs the block
/// from redundancy and hands it to `Member::settle`, which keeps whichever of the two
/// versions matches the checksum, or rewrites the checksum from the data when neither does.
#[derive(Debug)]
pub struct Unsettled {
    pub member: String,
    /// Data-area byte of the block.
    pub offset: u64,
}

impl std::fmt::Display for Unsettled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "member {}: the 4 KiB block at data byte {} does not match its checksum where a \
             sync after an unclean shutdown is pending (a torn update or corruption: the \
             redundancy decides)",
            self.member, self.offset
        )
    }
}

impl std::error::Error for Unsettled {}

/// True when `e` is a checksum mismatch reported by a [`Checksummed`] member.
pub fn is_checksum_error(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::InvalidData
        && e.get_ref().is_some_and(|inner| inner.is::<Mismatch>())
}

/// A block whose data does not match its checksum.
#[derive(Debug)]
pub struct Mismatch {
    pub member: String,
    /// Data-area byte of the block.
    pub offset: u64,
    pub stored: u32,
    pub computed: u32,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "member {}: checksum mismatch in the 4 KiB block at data byte {} (stored {:#010x}, \
             data gives {:#010x}): silent corruption, rewritten from redundancy where the \
             array has it",
            self.member, self.offset, self.stored, self.computed
        )
    }
}

impl std::error::Error for Mismatch {}

/// True when `offset` and every buffer length are whole blocks.
fn whole_blocks(offset: u64, mut lens: impl Iterator<Item = usize>) -> bool {
    offset.is_multiple_of(BLOCK) && lens.all(|len| (len as u64).is_multiple_of(BLOCK))
}

/// The value stored for a block's bytes (0 for a zero block).
pub fn block_checksum(block: &[u8]) -> u32 {
    debug_assert_eq!(block.len() as u64, BLOCK);
    crc32c::crc32c(block) ^ zero_block_crc()
}

fn zero_block_crc() -> u32 {
    static ZERO: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *ZERO.get_or_init(|| crc32c::crc32c(&[0u8; BLOCK as usize]))
}

struct Entry {
    bytes: Box<[u8]>,
    dirty: bool,
    used: u64,
}

/// Cached checksum blocks, at most [`CHECKSUM_CACHE_BLOCKS`].
#[derive(Default)]
struct Cache {
    blocks: HashMap<u64, Entry>,
    tick: u64,
}

/// A data area with per-block checksums (see the module docs).
#[derive(Debug)]
pub struct Checksummed {
    data: Arc<dyn Member>,
    /// The checksum area: `4 * blocks` bytes or more, a multiple of 4096.
    area: Arc<dyn Member>,
    shared: Arc<ChecksumShared>,
    cache: Mutex<Cache>,
    /// At most this many checksum blocks cached.
    cache_blocks: usize,
    locks: Vec<RwLock<()>>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} checksum blocks cached", self.blocks.len())
    }
}

enum Guard<'a> {
    Shared(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

impl Checksummed {
    /// `data` (a multiple of 4 KiB long) with its checksums in `area`.
    ///
    /// Panics if the area cannot hold a checksum per block (a caller bug: the superblock's
    /// validation guarantees it).
    pub fn new(
        data: Arc<dyn Member>,
        area: Arc<dyn Member>,
        shared: Arc<ChecksumShared>,
    ) -> Checksummed {
        let blocks = data.len().div_ceil(BLOCK);
        assert!(
            area.len() >= blocks * 4,
            "checksum area of {} bytes for {blocks} blocks of {}",
            area.len(),
            data.name()
        );
        Checksummed {
            data,
            area,
            shared,
            cache: Mutex::new(Cache::default()),
            cache_blocks: CHECKSUM_CACHE_BLOCKS,
            locks: (0..LOCKS).map(|_| RwLock::new(())).collect(),
        }
    }

    /// The granule locks of `[offset, offset + len)`, in index order.
    fn lock(&self, offset: u64, len: u64, exclusive: bool) -> Vec<Guard<'_>> {
        if len == 0 {
            return Vec::new();
        }
        let (first, last) = (offset / GRANULE, (offset + len - 1) / GRANULE);
        let mut take = [false; LOCKS];
        for g in first..=last.min(first + LOCKS as u64 - 1) {
            take[(g % LOCKS as u64) as usize] = true;
        }
        let mut held = Vec::new();
        for (_, lock) in self.locks.iter().enumerate().filter(|(i, _)| take[*i]) {
            held.push(match exclusive {
                true => Guard::Exclusive(lock.write().unwrap_or_else(|p| p.into_inner())),
                false => Guard::Shared(lock.read().unwrap_or_else(|p| p.into_inner())),
            });
        }
        held
    }

    /// Runs `f` over the cached checksum block `index`, loaded (and another evicted) first
    /// if needed. Called with the cache locked.
    fn with_block<T>(
        &self,
        cache: &mut Cache,
        index: u64,
        f: impl FnOnce(&mut Entry) -> T,
    ) -> io::Result<T> {
        cache.tick += 1;
        let tick = cache.tick;
        if !cache.blocks.contains_key(&index) {
            if cache.blocks.len() >= self.cache_blocks {
                self.evict(cache)?;
            }
            let mut bytes = vec![0u8; BLOCK as usize].into_boxed_slice();
            self.area.read_at(&mut bytes, index * BLOCK)?;
            cache.blocks.insert(
                index,
                Entry {
                    bytes,
                    dirty: false,
                    used: tick,
                },
            );
        }
        let entry = cache.blocks.get_mut(&index).expect("loaded above");
        entry.used = tick;
        Ok(f(entry))
    }

    /// Drops the least recently used block, written first if dirty.
    fn evict(&self, cache: &mut Cache) -> io::Result<()> {
        let Some((&index, entry)) = cache.blocks.iter().min_by_key(|(_, e)| e.used) else {
            return Ok(());
        };
        if entry.dirty {
            self.area.write_at(&entry.bytes, index * BLOCK)?;
        }
        cache.blocks.remove(&index);
        Ok(())
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stored checksums of blocks `first..first + count`.
    fn stored(&self, first: u64, count: u64) -> io::Result<Vec<u32>> {
        let mut out = Vec::with_capacity(count as usize);
        let mut cache = self.cache();
        let mut block = first;
        while block < first + count {
            let (index, at) = (block / PER_BLOCK, block % PER_BLOCK);
            let n = (PER_BLOCK - at).min(first + count - block);
            self.with_block(&mut cache, index, |e| {
                for i in at..at + n {
                    let b = &e.bytes[i as usize * 4..i as usize * 4 + 4];
                    out.push(u32::from_le_bytes(b.try_into().unwrap()));
                }
            })?;
            block += n;
        }
        Ok(out)
    }

    /// Stores `values` as the checksums of blocks from `first` on.
    fn store(&self, first: u64, values: &[u32]) -> io::Result<()> {
        let mut cache = self.cache();
        let mut done = 0u64;
        while done < values.len() as u64 {
            let block = first + done;
            let (index, at) = (block / PER_BLOCK, block % PER_BLOCK);
            let n = (PER_BLOCK - at).min(values.len() as u64 - done);
            self.with_block(&mut cache, index, |e| {
                for i in 0..n {
                    let v = values[(done + i) as usize].to_le_bytes();
                    let o = (at + i) as usize * 4;
                    e.bytes[o..o + 4].copy_from_slice(&v);
                }
                e.dirty = true;
            })?;
            done += n;
        }
        Ok(())
    }

    /// Writes every dirty cached checksum block (not flushed).
    fn write_dirty(&self) -> io::Result<()> {
        let mut cache = self.cache();
        let mut dirty: Vec<u64> = (cache.blocks.iter())
            .filter(|(_, e)| e.dirty)
            .map(|(&i, _)| i)
            .collect();
        dirty.sort_unstable();
        for index in dirty {
            let entry = cache.blocks.get_mut(&index).expect("listed above");
            self.area.write_at(&entry.bytes, index * BLOCK)?;
            entry.dirty = false;
        }
        Ok(())
    }

    /// Checks `buf`, the whole blocks from data byte `start`, against their checksums.
    fn verify(&self, buf: &[u8], start: u64) -> io::Result<()> {
        let first = start / BLOCK;
        let count = buf.len() as u64 / BLOCK;
        let stored = self.stored(first, count)?;
        let stats = &self.shared.stats;
        stats.verified.fetch_add(count, Ordering::Relaxed);
        for (i, block) in buf.chunks_exact(BLOCK as usize).enumerate() {
            let computed = block_checksum(block);
            if computed == stored[i] {
                continue;
            }
            let offset = start + i as u64 * BLOCK;
            match self.shared.pending(offset) {
                Pending::Rehash => {
                    self.store(first + i as u64, &[computed])?;
                    stats.rehashed.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Pending::Ask => {
                    let u = Unsettled {
                        member: self.data.name().to_string(),
                        offset,
                    };
                    return Err(io::Error::new(io::ErrorKind::InvalidData, u));
                }
                Pending::No => {}
            }
            stats.mismatches.fetch_add(1, Ordering::Relaxed);
            let m = Mismatch {
                member: self.data.name().to_string(),
                offset,
                stored: stored[i],
                computed,
            };
            self.shared.mismatch(&m);
            return Err(io::Error::new(io::ErrorKind::InvalidData, m));
        }
        Ok(())
    }

    /// The whole blocks around `[offset, offset + len)`.
    fn aligned(&self, offset: u64, len: u64) -> (u64, u64) {
        let start = offset / BLOCK * BLOCK;
        let end = ((offset + len).div_ceil(BLOCK) * BLOCK).min(self.data.len());
        (start, end)
    }

    /// Writes `buf` at `offset` with the caller holding the granules: partial blocks are
    /// merged with what the member holds, then every block's checksum stored.
    fn write_locked(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let (start, end) = self.aligned(offset, buf.len() as u64);
        if start == offset && end == offset + buf.len() as u64 {
            let sums: Vec<u32> = buf.chunks(BLOCK as usize).map(block_checksum).collect();
            self.data.write_at(buf, offset)?;
            return self.store(start / BLOCK, &sums);
        }
        // A partial block: what the member holds around the write, with the write merged.
        let mut whole = vec![0u8; (end - start) as usize];
        let head = (offset - start) as usize;
        let tail = head + buf.len();
        let last = whole.len() - BLOCK as usize;
        let read_head = head > 0;
        let read_tail = tail < whole.len() && (!read_head || last > 0);
        if read_head {
            self.data.read_at(&mut whole[..BLOCK as usize], start)?;
        }
        if read_tail {
            self.data.read_at(&mut whole[last..], end - BLOCK)?;
        }
        // The old content of the partial blocks, to check before it is merged.
        let old_head = read_head.then(|| block_checksum(&whole[..BLOCK as usize]));
        let old_tail = (tail < whole.len()).then(|| block_checksum(&whole[last..]));
        whole[head..tail].copy_from_slice(buf);
        let mut sums: Vec<u32> = whole.chunks(BLOCK as usize).map(block_checksum).collect();
        let n = sums.len() - 1;
        if let Some(old) = old_head {
            sums[0] = self.carried(start, old, sums[0])?;
        }
        if let (Some(old), true) = (old_tail, n > 0 || old_head.is_none()) {
            sums[n] = self.carried(end - BLOCK, old, sums[n])?;
        }
        self.data.write_at(buf, offset)?;
        self.store(start / BLOCK, &sums)
    }

    /// The checksum to store for the block at data byte `at` that a partial write changes
    /// from content hashing to `old` to content hashing to `new`. When the old content did
    /// not match its stored checksum (silent corruption in the bytes the write keeps), the
    /// mismatch is carried over: `stored ^ old ^ new` differs from `new` exactly as `stored`
    /// differed from `old`, so the block keeps failing its check (and is healed from
    /// redundancy at its next read or scrub) instead of getting a fresh checksum over bad
    /// bytes. Where a sync awaits the block (a possibly torn update, or corruption: nothing
    /// here tells) on a level with redundancy, the mismatch is carried too, uncounted: the
    /// block's next read is then `Unsettled` and the redundancy decides (`Member::settle`: the
    /// copy or parity, which received this write too, is taken where it matches the carried
    /// checksum — the kept bytes were corrupt —, else the checksum is rewritten from the data —
    /// a torn update). Without redundancy (linear, RAID 0 after a crash) the new content's
    /// checksum is stored, as a read there would rewrite it.
    fn carried(&self, at: u64, old: u32, new: u32) -> io::Result<u32> {
        let stored = self.stored(at / BLOCK, 1)?[0];
        if stored == old {
            return Ok(new);
        }
        match self.shared.pending(at) {
            Pending::Rehash => return Ok(new),
            Pending::Ask => return Ok(stored ^ old ^ new),
            Pending::No => {}
        }
        self.shared.stats.mismatches.fetch_add(1, Ordering::Relaxed);
        self.shared.mismatch(&Mismatch {
            member: self.data.name().to_string(),
            offset: at,
            stored,
            computed: old,
        });
        Ok(stored ^ old ^ new)
    }

    /// [`Member::settle`] with the granules held.
    fn settle_locked(&self, offset: u64, len: u64, candidate: Option<&[u8]>) -> io::Result<()> {
        let (start, end) = self.aligned(offset, len);
        let stats = &self.shared.stats;
        let mut block = vec![0u8; BLOCK as usize];
        let mut at = start;
        while at < end {
            let stored = self.stored(at / BLOCK, 1)?[0];
            // The redundancy's version of the whole block, when the candidate covers it.
            let offered = candidate.filter(|_| at >= offset && at + BLOCK <= offset + len);
            let offered = offered.map(|c| &c[(at - offset) as usize..][..BLOCK as usize]);
            self.data.read_at(&mut block, at)?;
            let computed = block_checksum(&block);
            match offered {
                _ if computed == stored => {} // settled meanwhile, or never unsettled
                Some(c) if block_checksum(c) == stored => {
                    self.data.write_at(c, at)?;
                    stats.settled.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    self.store(at / BLOCK, &[computed])?;
                    stats.rehashed.fetch_add(1, Ordering::Relaxed);
                }
            }
            at += BLOCK;
        }
        Ok(())
    }

    /// The data bytes where the blocks `[offset, offset + len)` covers only in part start
    /// (none, one or two).
    fn partial_ends(&self, offset: u64, len: u64) -> Vec<u64> {
        let (start, end) = self.aligned(offset, len);
        let mut at = Vec::with_capacity(2);
        if offset > start {
            at.push(start);
        }
        if offset + len < end && (at.is_empty() || end - start > BLOCK) {
            at.push(end - BLOCK);
        }
        at
    }

    /// After a trim of `[offset, offset + len)`: whole blocks get the zero checksum, partial
    /// ones are read and hashed as the member now holds them, with the mismatch of their old
    /// content carried over ([`Checksummed::carried`]): `olds` are the hashes of the partial
    /// blocks at `partial` (from [`Checksummed::partial_ends`]) taken before the trim.
    fn trimmed(&self, offset: u64, len: u64, partial: &[u64], olds: &[u32]) -> io::Result<()> {
        let (start, end) = self.aligned(offset, len);
        let mut whole = vec![0u8; (end - start) as usize];
        for &at in partial {
            let i = (at - start) as usize;
            self.data.read_at(&mut whole[i..][..BLOCK as usize], at)?;
        }
        let mut sums: Vec<u32> = whole.chunks(BLOCK as usize).map(block_checksum).collect();
        for (&at, &old) in partial.iter().zip(olds) {
            let i = ((at - start) / BLOCK) as usize;
            sums[i] = self.carried(at, old, sums[i])?;
        }
        self.store(start / BLOCK, &sums)
    }
}

impl Member for Checksummed {
    fn name(&self) -> &str {
        self.data.name()
    }

    fn identity(&self) -> Option<crate::Identity> {
        self.data.identity()
    }

    fn len(&self) -> u64 {
        self.data.len()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_member_range(self, "read", offset, buf.len() as u64)?;
        let _held = self.lock(offset, buf.len() as u64, false);
        let (start, end) = self.aligned(offset, buf.len() as u64);
        if start == offset && end == offset + buf.len() as u64 {
            self.data.read_at(buf, offset)?;
            return self.verify(buf, offset);
        }
        let mut whole = vec![0u8; (end - start) as usize];
        self.data.read_at(&mut whole, start)?;
        self.verify(&whole, start)?;
        let head = (offset - start) as usize;
        buf.copy_from_slice(&whole[head..head + buf.len()]);
        Ok(())
    }

    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
        check_member_range(self, "read", offset, len)?;
        let whole_blocks = whole_blocks(offset, bufs.iter().map(|b| b.len()));
        if !whole_blocks {
            let mut all = vec![0u8; len as usize];
            self.read_at(&mut all, offset)?;
            crate::scatter(&all, bufs);
            return Ok(());
        }
        let _held = self.lock(offset, len, false);
        self.data.read_vectored_at(bufs, offset)?;
        let mut at = offset;
        for buf in bufs.iter() {
            self.verify(buf, at)?;
            at += buf.len() as u64;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_member_range(self, "write", offset, buf.len() as u64)?;
        let _held = self.lock(offset, buf.len() as u64, true);
        self.write_locked(buf, offset)
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
        check_member_range(self, "write", offset, len)?;
        let whole_blocks = whole_blocks(offset, bufs.iter().map(|b| b.len()));
        let _held = self.lock(offset, len, true);
        if !whole_blocks {
            return self.write_locked(&bufs.concat(), offset);
        }
        let sums: Vec<u32> = (bufs.iter())
            .flat_map(|b| b.chunks(BLOCK as usize))
            .map(block_checksum)
            .collect();
        self.data.write_vectored_at(bufs, offset)?;
        self.store(offset / BLOCK, &sums)
    }

    /// Dirty checksum blocks are written, then the member flushed: both are durable.
    fn flush(&self) -> io::Result<()> {
        self.write_dirty()?;
        self.data.flush()?;
        self.area.flush()
    }

    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_at(buf, offset)?;
        self.flush()
    }

    /// A partial block at either end keeps what the trim does not cover: its old content is
    /// checked as a partial write's (a corrupt block keeps failing, not laundered by a fresh
    /// hash), then it is hashed as the member holds it after the trim.
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        check_member_range(self, "trim", offset, len)?;
        let _held = self.lock(offset, len, true);
        let partial = self.partial_ends(offset, len);
        let mut olds = Vec::with_capacity(partial.len());
        let mut block = vec![0u8; BLOCK as usize];
        for &at in &partial {
            self.data.read_at(&mut block, at)?;
            olds.push(block_checksum(&block));
        }
        self.data.trim(offset, len)?;
        self.trimmed(offset, len, &partial, &olds)
    }

    /// Partial blocks at either end are written as zero bytes (their old content checked,
    /// as any partial write's), the whole blocks between zeroed.
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        check_member_range(self, "write-zeroes", offset, len)?;
        let _held = self.lock(offset, len, true);
        let end = offset + len;
        let (first, last) = (offset.div_ceil(BLOCK) * BLOCK, end / BLOCK * BLOCK);
        if first >= last {
            return self.write_locked(&vec![0u8; len as usize], offset);
        }
        if first > offset {
            self.write_locked(&vec![0u8; (first - offset) as usize], offset)?;
        }
        self.data.write_zeroes(first, last - first)?;
        self.store(
            first / BLOCK,
            &vec![0u32; ((last - first) / BLOCK) as usize],
        )?;
        if end > last {
            self.write_locked(&vec![0u8; (end - last) as usize], last)?;
        }
        Ok(())
    }

    fn stuck_calls(&self) -> (usize, u64) {
        self.data.stuck_calls()
    }

    /// Each block of `[offset, offset + len)` whose data does not match its checksum: the
    /// candidate's block is written when *it* matches (the member's bytes were corrupt, or
    /// torn back: the redundancy that agrees with the checksum wins), else the checksum is
    /// rewritten from the data (a torn update). Blocks that match are left.
    fn settle(&self, offset: u64, len: u64, candidate: Option<&[u8]>) -> Option<io::Result<()>> {
        if let Err(e) = check_member_range(self, "settle", offset, len) {
            return Some(Err(e));
        }
        let _held = self.lock(offset, len, true);
        Some(self.settle_locked(offset, len, candidate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemMember;

    fn member(blocks: u64) -> (Arc<dyn Member>, Arc<dyn Member>, Checksummed) {
        let data: Arc<dyn Member> = Arc::new(MemMember::new("data", blocks * BLOCK).unwrap());
        let area: Arc<dyn Member> = Arc::new(MemMember::new("area", 4096).unwrap());
        let c = Checksummed::new(data.clone(), area.clone(), ChecksumShared::new());
        (data, area, c)
    }

    #[test]
    fn a_zeroed_member_verifies_and_written_blocks_read_back() {
        let (_, _, c) = member(64);
        let mut buf = vec![1u8; 3 * BLOCK as usize];
        c.read_at(&mut buf, 0).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        c.write_at(&[7u8; 1000], 5000).unwrap(); // partial head and tail
        c.write_at(&[9u8; 8192], 16384).unwrap();
        let mut buf = vec![0u8; 1000];
        c.read_at(&mut buf, 5000).unwrap();
        assert!(buf.iter().all(|&b| b == 7));
        let mut all = vec![0u8; 64 * BLOCK as usize];
        c.read_at(&mut all, 0).unwrap();
        assert_eq!(c.shared.stats.mismatches.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn bytes_changed_behind_its_back_are_a_checksum_error_of_that_block() {
        let (data, _, c) = member(64);
        c.write_at(&[5u8; 8192], 8192).unwrap();
        data.write_at(&[6u8; 3], 12288 + 100).unwrap();
        let mut buf = vec![0u8; 4 * BLOCK as usize];
        let e = c.read_at(&mut buf, 0).unwrap_err();
        assert!(is_checksum_error(&e), "{e}");
        assert!(e.to_string().contains("data byte 12288"), "{e}");
        assert_eq!(c.shared.stats.mismatches.load(Ordering::Relaxed), 1);
        // The block rewritten (as the engine's repair does) reads again.
        c.write_at(&[5u8; 4096], 12288).unwrap();
        c.read_at(&mut buf, 0).unwrap();
    }

    #[test]
    fn flush_writes_dirty_checksums_and_the_cache_stays_bounded() {
        let blocks = 24 * PER_BLOCK;
        let data: Arc<dyn Member> = Arc::new(MemMember::new("data", blocks * BLOCK).unwrap());
        let area: Arc<dyn Member> = Arc::new(MemMember::new("area", blocks * 4).unwrap());
        let mut c = Checksummed::new(data.clone(), area.clone(), ChecksumShared::new());
        c.cache_blocks = 16;
        for i in 0..blocks / PER_BLOCK {
            c.write_at(&[i as u8 + 1; 4096], i * PER_BLOCK * BLOCK)
                .unwrap();
            assert!(c.cache().blocks.len() <= 16);
        }
        c.flush().unwrap();
        // A new wrapper over the same area (a restart) verifies every block.
        let again = Checksummed::new(data, area, ChecksumShared::new());
        for i in 0..blocks / PER_BLOCK {
            let mut buf = vec![0u8; 4096];
            again.read_at(&mut buf, i * PER_BLOCK * BLOCK).unwrap();
            assert_eq!(buf[0], i as u8 + 1);
        }
    }

    /// A write smaller than a block merges with the bytes around it: when those were
    /// changed behind the wrapper's back, the block must keep failing its check (it got a
    /// fresh checksum over the bad bytes before), and a whole-block rewrite still heals it.
    #[test]
    fn a_partial_write_over_a_corrupt_block_keeps_it_failing() {
        let (data, _, c) = member(8);
        c.write_at(&[5u8; 3 * 4096], 0).unwrap();
        data.write_at(&[6u8; 3], 4096 + 100).unwrap(); // corrupt block 1
        data.write_at(&[6u8; 3], 8192 + 4000).unwrap(); // corrupt block 2
        c.write_at(&[7u8; 512], 4096 + 2048).unwrap(); // inside block 1
        c.write_zeroes(8192 + 512, 512).unwrap(); // inside block 2
        c.write_zeroes(2048, 8192).unwrap(); // the tail of block 0, block 1, head of block 2
        assert_eq!(c.shared.stats.mismatches.load(Ordering::Relaxed), 3);
        for (block, bad) in [(0, false), (1, false), (2, true)] {
            let mut buf = vec![0u8; 4096];
            let got = c.read_at(&mut buf, block * BLOCK);
            assert_eq!(got.is_err(), bad, "block {block}: {got:?}");
            if let Err(e) = got {
                assert!(is_checksum_error(&e), "{e}");
            }
        }
        // Block 1 was rewritten whole by the zeroing; block 2 still holds the corruption.
        c.write_at(&[8u8; 4096], 8192).unwrap();
        let mut all = vec![0u8; 3 * 4096];
        c.read_at(&mut all, 0).unwrap();
        assert!(all[..2048].iter().all(|&b| b == 5));
        assert!(all[2048..8192].iter().all(|&b| b == 0));
        assert!(all[8192..].iter().all(|&b| b == 8));
    }

    struct All;
    impl ChecksumTrust for All {
        fn unsynced(&self, _: u64) -> bool {
            true
        }
    }

    #[test]
    fn where_a_sync_is_pending_a_mismatch_rewrites_the_checksum() {
        let (data, _, c) = member(8);
        data.write_at(&[3u8; 4096], 0).unwrap();
        c.shared.set_trust(Some(Arc::new(All)));
        let mut buf = vec![0u8; 4096];
        c.read_at(&mut buf, 0).unwrap();
        assert_eq!(c.shared.stats.rehashed.load(Ordering::Relaxed), 1);
        c.shared.set_trust(None);
        c.read_at(&mut buf, 0).unwrap();
        assert_eq!(c.shared.stats.mismatches.load(Ordering::Relaxed), 0);
    }

    /// A trim smaller than a block (or the partial blocks at the ends of a larger one) keeps
    /// bytes of the block: when those were changed behind the wrapper's back, the block keeps
    /// failing its check (it got a fresh checksum over them before, like a sub-block write
    /// did before `carried`); blocks the trim leaves intact verify.
    #[test]
    fn a_partial_trim_over_a_corrupt_block_keeps_it_failing() {
        let (data, _, c) = member(8);
        c.write_at(&[5u8; 6 * 4096], 0).unwrap();
        data.write_at(&[6u8; 3], 4096 + 100).unwrap(); // corrupt block 1
        data.write_at(&[6u8; 3], 3 * 4096 + 4000).unwrap(); // corrupt block 3
        c.trim(4096 + 2048, 512).unwrap(); // inside block 1
        c.trim(2 * 4096 + 1024, 8192).unwrap(); // the tail of block 2, block 3 whole, head of 4
        c.trim(5 * 4096, 1000).unwrap(); // the head of block 5 (intact)
        assert_eq!(c.shared.stats.mismatches.load(Ordering::Relaxed), 1);
        for (block, bad) in [
            (0, false),
            (1, true),
            (2, false),
            (3, false),
            (4, false),
            (5, false),
        ] {
            let mut buf = vec![0u8; 4096];
            let got = c.read_at(&mut buf, block * BLOCK);
            assert_eq!(got.is_err(), bad, "block {block}: {got:?}");
            if let Err(e) = got {
                assert!(is_checksum_error(&e), "{e}");
            }
        }
        // A whole-block write heals it.
        c.write_at(&[8u8; 4096], 4096).unwrap();
        let mut buf = vec![0u8; 4096];
        c.read_at(&mut buf, 4096).unwrap();
    }

    struct Redundant;
    impl ChecksumTrust for Redundant {
        fn unsynced(&self, _: u64) -> bool {
            true
        }
        fn redundant(&self) -> bool {
            true
        }
    }

    /// Where a sync is pending and the array has redundancy, a mismatch is `Unsettled` (not
    /// counted); `settle` keeps the offered version where it matches the stored checksum, else
    /// rewrites the checksum from the data; matching blocks are left.
    #[test]
    fn settle_keeps_the_version_that_matches_the_checksum() {
        let (data, _, c) = member(8);
        c.write_at(&[5u8; 3 * 4096], 0).unwrap();
        data.write_at(&[6u8; 4096], 0).unwrap(); // block 0: corrupt (or torn back)
        data.write_at(&[7u8; 4096], 4096).unwrap(); // block 1: a torn update
        c.shared.set_trust(Some(Arc::new(Redundant)));
        let mut buf = vec![0u8; 3 * 4096];
        let e = c.read_at(&mut buf, 0).unwrap_err();
        assert!(is_unsettled(&e) && !is_checksum_error(&e), "{e}");
        assert_eq!(c.shared.stats.mismatches.load(Ordering::Relaxed), 0);
        // The redundancy offers the old content of every block.
        let offered = vec![5u8; 3 * 4096];
        c.settle(0, 3 * 4096, Some(&offered)).unwrap().unwrap();
        c.shared.set_trust(None);
        c.read_at(&mut buf, 0).unwrap();
        assert!(buf[..4096].iter().all(|&b| b == 5), "block 0 healed");
        assert!(
            buf[4096..8192].iter().all(|&b| b == 5),
            "block 1 rolled back"
        );
        assert!(buf[8192..].iter().all(|&b| b == 5));
        let stats = &c.shared.stats;
        assert_eq!(stats.settled.load(Ordering::Relaxed), 2);
        // Nothing offered (or a version that does not match): the data's checksum is taken.
        data.write_at(&[9u8; 4096], 8192).unwrap();
        c.settle(8192, 4096, Some(&[1u8; 4096])).unwrap().unwrap();
        c.read_at(&mut buf, 0).unwrap();
        assert!(buf[8192..].iter().all(|&b| b == 9));
        assert_eq!(stats.rehashed.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn trim_and_vectored_io_keep_checksums_right() {
        let (_, _, c) = member(16);
        c.write_vectored_at(&[&[1u8; 4096], &[2u8; 8192]], 4096)
            .unwrap();
        c.write_vectored_at(&[&[4u8; 100], &[5u8; 50]], 20000)
            .unwrap();
        c.trim(8192, 4096).unwrap();
        c.write_zeroes(4000, 200).unwrap();
        let (mut a, mut b) = (vec![0u8; 8192], vec![0u8; 4096 * 14]);
        c.read_vectored_at(&mut [&mut a, &mut b], 0).unwrap();
        assert_eq!(a[4096 + 300], 1);
        assert_eq!(b[0], 0); // trimmed
        assert_eq!(b[4096], 2);
        assert_eq!(b[20000 - 8192], 4);
    }
}

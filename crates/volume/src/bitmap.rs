//! The in-memory write-intent bitmap of a volume (the on-disk format is `ondisk::bitmap`).
//!
//! Per region an atomic `set` flag (the bit is durable on every in-use member), `started` /
//! `finished` write counters (in flight = started − finished; the lazy clear needs both equal and
//! `started` unchanged for the idle time), and `pending` (dirty at assembly, not yet resynced).
//! The hot path of a write to a dirty region is one `fetch_add`, one load and (when the write
//! ends) one `fetch_add`.
//!
//! Race between a writer and the clearer (both `SeqCst`): the writer bumps `started`, then
//! loads `set`; the clearer stores `set = false`, then loads `started`. Either the writer sees
//! `false` (it takes the slow path, which waits for the clearer's lock and sets the bit again)
//! or the clearer sees the new count (it puts the flag back and leaves the region alone).

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use member::Member;
use ondisk::bitmap::{
    bit, encode_map_block, put_bit, BitmapRef, MapArea, BITMAP_BLOCK_BYTES, BITMAP_IDLE_DEFAULT,
    BITS_PER_BLOCK,
};
use uuid::Uuid;

/// What the lazy clear and the writers share under the bitmap lock.
struct Disk {
    /// The bits as last written to the members.
    image: Vec<u8>,
    /// Regions set in `image`.
    dirty: BTreeSet<u64>,
    /// Per set region: `started` when last seen, and since when it has not moved.
    quiet: HashMap<u64, (u32, Instant)>,
}

/// Why a bitmap (or used-map) update could not be written.
pub(crate) struct BitmapWriteError {
    pub role: usize,
    pub name: String,
    pub source: io::Error,
}

/// The members a map of one bit per region (the write-intent bitmap, the used-regions map) is
/// written to, and how: the whole map to a member that takes a role, changed blocks durably
/// to every writable one in parallel. The maps differ in when bits change, not in this.
pub(crate) struct MapWriter {
    area: MapArea,
    array_uuid: Uuid,
    /// Per role: the whole member that receives map writes (`None`: missing or faulty).
    targets: RwLock<Vec<Option<Arc<dyn Member>>>>,
    /// Block writes issued (per member), for tests and status.
    pub block_writes: AtomicU64,
}

impl MapWriter {
    pub(crate) fn new(
        area: MapArea,
        array_uuid: Uuid,
        targets: Vec<Option<Arc<dyn Member>>>,
    ) -> MapWriter {
        MapWriter {
            area,
            array_uuid,
            targets: RwLock::new(targets),
            block_writes: AtomicU64::new(0),
        }
    }

    /// Roles (present or not) the writer knows.
    pub(crate) fn role_count(&self) -> usize {
        self.targets.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Changes the member receiving map writes for `role`; a new one first receives the whole
    /// map `image` (flushed). The caller holds its map's lock, so no update is missed.
    pub(crate) fn set_target(
        &self,
        role: usize,
        whole: Option<Arc<dyn Member>>,
        image: &[u8],
    ) -> io::Result<()> {
        if let Some(m) = &whole {
            let area = ondisk::bitmap::encode_area(&self.array_uuid, &self.area, image);
            m.write_at(&area, self.area.offset_bytes)?;
            m.flush()?;
        }
        self.targets.write().unwrap_or_else(|p| p.into_inner())[role] = whole;
        Ok(())
    }

    /// Writes `blocks` of `image` durably to every writable target, in parallel.
    pub(crate) fn write_blocks(
        &self,
        image: &[u8],
        blocks: &BTreeSet<usize>,
        writable: &[bool],
    ) -> Result<(), BitmapWriteError> {
        let targets: Vec<(usize, Arc<dyn Member>)> = {
            let t = self.targets.read().unwrap_or_else(|p| p.into_inner());
            t.iter()
                .enumerate()
                .filter(|(role, _)| writable.get(*role).copied().unwrap_or(false))
                .filter_map(|(role, m)| Some((role, Arc::clone(m.as_ref()?))))
                .collect()
        };
        let encoded: Vec<(u64, Vec<u8>)> = blocks
            .iter()
            .map(|&i| {
                let at = self.area.offset_bytes + i as u64 * BITMAP_BLOCK_BYTES;
                (
                    at,
                    encode_map_block(self.area.magic, &self.array_uuid, image, i),
                )
            })
            .collect();
        // A durable write of each block, not write + flush: on a file member a flush
        // (fdatasync) would also write back every data page written before it, so a
        // sequential writer would wait for the page cache at each new region.
        let write_one = |m: &Arc<dyn Member>| -> io::Result<()> {
            for (at, block) in &encoded {
                m.write_durable_at(block, *at)?;
            }
            Ok(())
        };
        let results: Vec<(usize, String, io::Result<()>)> = if targets.len() == 1 {
            let (role, m) = &targets[0];
            vec![(*role, m.name().to_string(), write_one(m))]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = targets
                    .iter()
                    .map(|(role, m)| {
                        let write = member::carry_deadline(|| write_one(m));
                        (*role, m.name().to_string(), s.spawn(write))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|(role, name, h)| {
                        let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                        (role, name, r)
                    })
                    .collect()
            })
        };
        self.block_writes
            .fetch_add((targets.len() * encoded.len()) as u64, Ordering::Relaxed);
        match results.into_iter().find(|(_, _, r)| r.is_err()) {
            Some((role, name, Err(source))) => Err(BitmapWriteError { role, name, source }),
            _ => Ok(()),
        }
    }
}

/// The in-memory bitmap of a volume (see the module docs).
pub(crate) struct Bitmap {
    pub at: BitmapRef,
    regions: u64,
    set: Box<[AtomicBool]>,
    started: Box<[AtomicU32]>,
    finished: Box<[AtomicU32]>,
    pending: Box<[AtomicBool]>,
    pending_count: AtomicU64,
    disk: Mutex<Disk>,
    /// Where the blocks go (`writer.block_writes`: block writes issued, per member).
    pub writer: MapWriter,
    idle: Mutex<Duration>,
}

impl Bitmap {
    /// A bitmap whose durable bits are `image` (the union read at assembly).
    pub(crate) fn new(
        at: BitmapRef,
        array_uuid: Uuid,
        array_bytes: u64,
        image: Vec<u8>,
        targets: Vec<Option<Arc<dyn Member>>>,
    ) -> Bitmap {
        let regions = array_bytes.div_ceil(at.region_bytes).max(1);
        assert!(regions <= at.bytes / BITMAP_BLOCK_BYTES * BITS_PER_BLOCK);
        assert_eq!(image.len() as u64, regions.div_ceil(8));
        let dirty: BTreeSet<u64> = (0..regions).filter(|&r| bit(&image, r)).collect();
        let set = (0..regions)
            .map(|r| AtomicBool::new(bit(&image, r)))
            .collect();
        Bitmap {
            at,
            writer: MapWriter::new(at.area(), array_uuid, targets),
            regions,
            set,
            started: (0..regions).map(|_| AtomicU32::new(0)).collect(),
            finished: (0..regions).map(|_| AtomicU32::new(0)).collect(),
            pending: (0..regions).map(|_| AtomicBool::new(false)).collect(),
            pending_count: AtomicU64::new(0),
            disk: Mutex::new(Disk {
                image,
                dirty,
                quiet: HashMap::new(),
            }),
            idle: Mutex::new(BITMAP_IDLE_DEFAULT),
        }
    }

    pub(crate) fn regions(&self) -> u64 {
        self.regions
    }
    pub(crate) fn region_bytes(&self) -> u64 {
        self.at.region_bytes
    }
    /// Regions overlapping array bytes `[offset, offset + len)`, `len > 0`.
    pub(crate) fn regions_of(&self, offset: u64, len: u64) -> std::ops::Range<u64> {
        assert!(len > 0);
        let first = offset / self.at.region_bytes;
        let last = (offset + len - 1) / self.at.region_bytes;
        assert!(last < self.regions, "write past the bitmap");
        first..last + 1
    }
    pub(crate) fn is_set(&self, r: u64) -> bool {
        self.set[r as usize].load(Ordering::SeqCst)
    }
    pub(crate) fn dirty_count(&self) -> u64 {
        self.lock_disk().dirty.len() as u64
    }
    /// Regions whose bit is set now (durably).
    pub(crate) fn dirty_regions(&self) -> Vec<u64> {
        self.lock_disk().dirty.iter().copied().collect()
    }
    pub(crate) fn set_idle(&self, idle: Duration) {
        *self.idle.lock().unwrap_or_else(|p| p.into_inner()) = idle;
    }
    pub(crate) fn idle(&self) -> Duration {
        *self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_disk(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks `regions` as awaiting a resync (they hold set bits).
    pub(crate) fn set_pending(&self, regions: impl Iterator<Item = u64>) {
        for r in regions {
            assert!(self.is_set(r), "a pending region must hold its bit");
            if !self.pending[r as usize].swap(true, Ordering::AcqRel) {
                self.pending_count.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
    pub(crate) fn is_pending(&self, r: u64) -> bool {
        self.pending[r as usize].load(Ordering::Acquire)
    }
    pub(crate) fn pending_count(&self) -> u64 {
        self.pending_count.load(Ordering::Acquire)
    }
    pub(crate) fn resolve_all_pending(&self) {
        if self.pending_count() == 0 {
            return;
        }
        for r in 0..self.regions {
            self.resolve_pending(r);
        }
    }
    pub(crate) fn resolve_pending(&self, r: u64) {
        if self.pending[r as usize].swap(false, Ordering::AcqRel) {
            self.pending_count.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Changes the member receiving bitmap writes for `role`; a new one first receives the
    /// whole current bitmap (flushed).
    pub(crate) fn set_target(&self, role: usize, whole: Option<Arc<dyn Member>>) -> io::Result<()> {
        let disk = self.lock_disk();
        self.writer.set_target(role, whole, &disk.image)
    }

    /// Counts a write to `regions` as started and makes sure their bits are durable; the
    /// returned guard counts it finished when dropped. `writable[role]` says which members
    /// take bitmap writes now.
    pub(crate) fn start_write<'a>(
        &'a self,
        regions: std::ops::Range<u64>,
        writable: impl Fn() -> Vec<bool>,
    ) -> Result<WriteIntent<'a>, BitmapWriteError> {
        let mut missing = false;
        for r in regions.clone() {
            self.started[r as usize].fetch_add(1, Ordering::SeqCst);
            missing |= !self.set[r as usize].load(Ordering::SeqCst);
        }
        let intent = WriteIntent {
            bitmap: self,
            regions: regions.clone(),
        };
        if missing {
            self.set_bits(regions, &writable())?;
        }
        Ok(intent)
    }

    /// The slow path: under the lock, writes the bits not yet durable to every member in
    /// `writable` and flushes them; then publishes them.
    fn set_bits(
        &self,
        regions: std::ops::Range<u64>,
        writable: &[bool],
    ) -> Result<(), BitmapWriteError> {
        let mut disk = self.lock_disk();
        let todo: Vec<u64> = regions.filter(|&r| !self.is_set(r)).collect();
        if todo.is_empty() {
            return Ok(());
        }
        for &r in &todo {
            if !bit(&disk.image, r) {
                put_bit(&mut disk.image, r, true);
                disk.dirty.insert(r);
            }
        }
        let blocks: BTreeSet<usize> = todo
            .iter()
            .map(|&r| (r / BITS_PER_BLOCK) as usize)
            .collect();
        self.writer.write_blocks(&disk.image, &blocks, writable)?;
        for &r in &todo {
            disk.quiet.remove(&r);
            self.set[r as usize].store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// One pass of the lazy clear: regions set, not pending, with no write in flight and no
    /// write started for the idle time. `flush_all` makes every member's data durable (the
    /// array flush) and says whether it succeeded with the same members in sync. Returns the
    /// number of regions cleared.
    pub(crate) fn clear_idle(
        &self,
        now: Instant,
        flush_all: impl FnOnce() -> bool,
        writable: &[bool],
    ) -> Result<u64, BitmapWriteError> {
        let idle = self.idle();
        let mut disk = self.lock_disk();
        let mut candidates = Vec::new();
        let dirty: Vec<u64> = disk.dirty.iter().copied().collect();
        for r in dirty {
            let i = r as usize;
            let started = self.started[i].load(Ordering::SeqCst);
            let in_flight = started != self.finished[i].load(Ordering::SeqCst);
            if in_flight || self.is_pending(r) || !self.is_set(r) {
                disk.quiet.remove(&r);
                continue;
            }
            match disk.quiet.get(&r) {
                Some(&(seen, since)) if seen == started => {
                    if now.duration_since(since) >= idle {
                        candidates.push((r, started));
                    }
                }
                _ => {
                    disk.quiet.insert(r, (started, now));
                }
            }
        }
        self.clear_regions(&mut disk, candidates, flush_all, writable)
    }

    /// Clears every set region with no write in flight (a clean close: no writer can start).
    pub(crate) fn clear_all(
        &self,
        flush_all: impl FnOnce() -> bool,
        writable: &[bool],
    ) -> Result<u64, BitmapWriteError> {
        let mut disk = self.lock_disk();
        let candidates: Vec<(u64, u32)> = disk
            .dirty
            .iter()
            .map(|&r| (r, self.started[r as usize].load(Ordering::SeqCst)))
            .filter(|&(r, s)| {
                s == self.finished[r as usize].load(Ordering::SeqCst) && !self.is_pending(r)
            })
            .collect();
        self.clear_regions(&mut disk, candidates, flush_all, writable)
    }

    fn clear_regions(
        &self,
        disk: &mut Disk,
        candidates: Vec<(u64, u32)>,
        flush_all: impl FnOnce() -> bool,
        writable: &[bool],
    ) -> Result<u64, BitmapWriteError> {
        // Withdraw the flags first; a writer that started meanwhile keeps its region.
        let mut cleared = Vec::new();
        for (r, started) in candidates {
            self.set[r as usize].store(false, Ordering::SeqCst);
            if self.started[r as usize].load(Ordering::SeqCst) == started {
                cleared.push(r);
            } else {
                self.set[r as usize].store(true, Ordering::SeqCst);
            }
        }
        if cleared.is_empty() {
            return Ok(0);
        }
        // Writes that finished may not be durable yet: flush every member before any bit
        // goes. A failed flush or a member state change keeps every bit.
        if !flush_all() {
            for &r in &cleared {
                self.set[r as usize].store(true, Ordering::SeqCst);
            }
            return Ok(0);
        }
        for &r in &cleared {
            put_bit(&mut disk.image, r, false);
            disk.dirty.remove(&r);
            disk.quiet.remove(&r);
        }
        let blocks: BTreeSet<usize> = cleared
            .iter()
            .map(|&r| (r / BITS_PER_BLOCK) as usize)
            .collect();
        self.writer.write_blocks(&disk.image, &blocks, writable)?;
        Ok(cleared.len() as u64)
    }
}

/// A write counted as in flight on its regions; dropping it counts the write finished.
pub(crate) struct WriteIntent<'a> {
    bitmap: &'a Bitmap,
    regions: std::ops::Range<u64>,
}

impl Drop for WriteIntent<'_> {
    fn drop(&mut self) {
        for r in self.regions.clone() {
            self.bitmap.finished[r as usize].fetch_add(1, Ordering::SeqCst);
        }
    }
}

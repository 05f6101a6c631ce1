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
//!
//! The slow path is a group commit: a writer puts its bits into the image and the `queued`
//! set under the lock; the first writer to find no round being written leads the next round
//! (takes `queued`, encodes the touched blocks from the image, writes them with the lock
//! released); the others wait on a condvar for the round that took their bits, so the bits
//! wanted while one round is written go out together in the next. The lazy clear and target
//! changes write with the lock held and only while no round is being written
//! (`Bitmap::lock_exclusive`). Why the DESIGN rule holds: docs/DESIGN.md "Write-intent
//! bitmap".

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use member::Member;
use ondisk::bitmap::{
    bit, encode_map_block, put_bit, BitmapRef, MapArea, BITMAP_BLOCK_BYTES, BITMAP_IDLE_DEFAULT,
    BITS_PER_BLOCK,
};
use uuid::Uuid;

/// What the lazy clear and the writers share under the bitmap lock.
struct Disk {
    /// The bits as written to the members, and the bits queued for the next update round.
    image: Vec<u8>,
    /// Regions set in `image`.
    dirty: BTreeSet<u64>,
    /// Per set region: `started` when last seen, and since when it has not moved.
    quiet: HashMap<u64, (u32, Instant)>,
    /// Regions whose bits writers wait for and no round has taken yet (set in `image`).
    queued: BTreeSet<u64>,
    /// The round that will take `queued`.
    next: Arc<Round>,
    /// The round being written (the lock is not held during its I/O), with its regions.
    writing: Option<(Arc<Round>, BTreeSet<u64>)>,
    /// Lazy clears and target changes waiting for `writing` to end: no round starts meanwhile.
    blockers: u32,
}

/// One update round of the group commit: the queued bits, written together.
#[derive(Default)]
struct Round {
    /// Set (under the bitmap lock) when the round's writes have ended.
    result: std::sync::OnceLock<Result<(), RoundError>>,
}

/// A round's failure, handed to every writer that waited for it.
#[derive(Clone)]
struct RoundError {
    role: usize,
    name: String,
    kind: io::ErrorKind,
    raw: Option<i32>,
    text: String,
}

impl RoundError {
    fn of(e: &BitmapWriteError) -> RoundError {
        RoundError {
            role: e.role,
            name: e.name.clone(),
            kind: e.source.kind(),
            raw: e.source.raw_os_error(),
            text: e.source.to_string(),
        }
    }

    fn error(&self) -> BitmapWriteError {
        let source = match self.raw {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(self.kind, self.text.clone()),
        };
        BitmapWriteError {
            role: self.role,
            name: self.name.clone(),
            source,
        }
    }
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
        self.write_encoded(&self.encode(image, blocks), writable)
    }

    /// `blocks` of `image` as written: (member offset, block).
    fn encode(&self, image: &[u8], blocks: &BTreeSet<usize>) -> Vec<(u64, Vec<u8>)> {
        blocks
            .iter()
            .map(|&i| {
                let at = self.area.offset_bytes + i as u64 * BITMAP_BLOCK_BYTES;
                (
                    at,
                    encode_map_block(self.area.magic, &self.array_uuid, image, i),
                )
            })
            .collect()
    }

    /// Writes `encoded` blocks durably to every writable target, in parallel.
    fn write_encoded(
        &self,
        encoded: &[(u64, Vec<u8>)],
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
        // A durable write of each block, not write + flush: on a file member a flush
        // (fdatasync) would also write back every data page written before it, so a
        // sequential writer would wait for the page cache at each new region.
        let write_one = |m: &Arc<dyn Member>| -> io::Result<()> {
            for (at, block) in encoded {
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
    /// Signalled (under `disk`) when a round ends or a blocker leaves.
    round_done: Condvar,
    /// Where the blocks go (`writer.block_writes`: block writes issued, per member).
    pub writer: MapWriter,
    idle: Mutex<Duration>,
    /// Update rounds written (tests).
    rounds: AtomicU64,
    /// Writers waiting for a round another writer leads (tests).
    waiting: AtomicU64,
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
                queued: BTreeSet::new(),
                next: Arc::default(),
                writing: None,
                blockers: 0,
            }),
            round_done: Condvar::new(),
            idle: Mutex::new(BITMAP_IDLE_DEFAULT),
            rounds: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
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

    fn wait_round<'a>(&self, disk: MutexGuard<'a, Disk>) -> MutexGuard<'a, Disk> {
        self.round_done
            .wait(disk)
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The lock with no round being written, and none starting until it is released: for the
    /// lazy clear and target changes, which write blocks with the lock held.
    fn lock_exclusive(&self) -> MutexGuard<'_, Disk> {
        let mut disk = self.lock_disk();
        if disk.writing.is_some() {
            disk.blockers += 1;
            while disk.writing.is_some() {
                disk = self.wait_round(disk);
            }
            disk.blockers -= 1;
            // Writers that saw a blocker wait for the round; they go on once this guard drops.
            self.round_done.notify_all();
        }
        disk
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
        let disk = self.lock_exclusive();
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
            self.set_bits(regions, &writable)?;
        }
        Ok(intent)
    }

    /// The slow path (group commit): queues the bits of `regions` not yet durable and waits
    /// for the round that writes them; the first writer to find no round being written leads
    /// the next one (see [`Self::lead_round`]). A round that fails fails every writer that
    /// waited for it.
    fn set_bits(
        &self,
        regions: std::ops::Range<u64>,
        writable: &dyn Fn() -> Vec<bool>,
    ) -> Result<(), BitmapWriteError> {
        let mut disk = self.lock_disk();
        loop {
            let todo: Vec<u64> = regions.clone().filter(|&r| !self.is_set(r)).collect();
            if todo.is_empty() {
                return Ok(());
            }
            // The round being written covers them only if it took every one of them (after
            // their bits were in the image); else they go into the next round.
            let round = match &disk.writing {
                Some((round, taken)) if todo.iter().all(|r| taken.contains(r)) => Arc::clone(round),
                _ => {
                    for &r in &todo {
                        if !bit(&disk.image, r) {
                            put_bit(&mut disk.image, r, true);
                            disk.dirty.insert(r);
                        }
                        disk.queued.insert(r);
                    }
                    Arc::clone(&disk.next)
                }
            };
            let mut waiting = false;
            let done = loop {
                if let Some(done) = round.result.get() {
                    break done.clone();
                }
                if disk.writing.is_none() && disk.blockers == 0 {
                    if waiting {
                        self.waiting.fetch_sub(1, Ordering::SeqCst);
                        waiting = false;
                    }
                    disk = self.lead_round(disk, writable);
                    continue;
                }
                if !waiting {
                    self.waiting.fetch_add(1, Ordering::SeqCst);
                    waiting = true;
                }
                disk = self.wait_round(disk);
            };
            if waiting {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
            }
            // Success published every bit the round took: the loop ends at the next check.
            done.map_err(|e| e.error())?;
        }
    }

    /// Writes the next round: takes the queued regions and encodes their blocks from the
    /// image under the lock, writes them to every writable member without it, then (locked
    /// again) publishes the bits on success and wakes every writer.
    fn lead_round<'a>(
        &'a self,
        mut disk: MutexGuard<'a, Disk>,
        writable: &dyn Fn() -> Vec<bool>,
    ) -> MutexGuard<'a, Disk> {
        let taken = std::mem::take(&mut disk.queued);
        let round = std::mem::take(&mut disk.next);
        let blocks: BTreeSet<usize> = taken
            .iter()
            .map(|&r| (r / BITS_PER_BLOCK) as usize)
            .collect();
        let encoded = self.writer.encode(&disk.image, &blocks);
        disk.writing = Some((Arc::clone(&round), taken));
        drop(disk);
        // Ends the round even if the I/O panics, so no writer waits for it forever: then it
        // publishes nothing and ends without an error (no member is to blame), and its
        // writers, finding their bits not set, queue them again.
        struct Ending<'b> {
            bitmap: &'b Bitmap,
            round: Arc<Round>,
            result: Option<Result<(), RoundError>>,
        }
        impl Drop for Ending<'_> {
            fn drop(&mut self) {
                let b = self.bitmap;
                let mut disk = b.lock_disk();
                let (_, taken) = disk.writing.take().expect("the round being written");
                if let Some(Ok(())) = self.result {
                    for &r in &taken {
                        disk.quiet.remove(&r);
                        b.set[r as usize].store(true, Ordering::SeqCst);
                    }
                }
                let _ = (self.round.result).set(self.result.take().unwrap_or(Ok(())));
                b.rounds.fetch_add(1, Ordering::SeqCst);
                b.round_done.notify_all();
            }
        }
        let mut ending = Ending {
            bitmap: self,
            round,
            result: None,
        };
        let written = if blocks.is_empty() {
            Ok(())
        } else {
            self.writer.write_encoded(&encoded, &writable())
        };
        ending.result = Some(written.map_err(|e| RoundError::of(&e)));
        drop(ending);
        self.lock_disk()
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
        let mut disk = self.lock_exclusive();
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
        let mut disk = self.lock_exclusive();
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

#[cfg(test)]
mod tests {
    use std::sync::Condvar;

    use member::{Call, Hooked, OpenOptions};
    use ondisk::bitmap::{encode_area, read_map_image, BITMAP_OFFSET};

    use super::*;

    const REGION: u64 = 1 << 20;
    const BLOCKS: u64 = 3;
    const WAIT: Duration = Duration::from_secs(60);
    const HOUR: Duration = Duration::from_secs(3600);

    /// Holds every bitmap-area write until opened; says when the first one arrived.
    #[derive(Default)]
    struct Gate {
        /// (a bitmap write is waiting or passed, open)
        state: Mutex<(bool, bool)>,
        cond: Condvar,
    }

    impl Gate {
        fn pass(&self) {
            let mut s = self.state.lock().unwrap();
            s.0 = true;
            self.cond.notify_all();
            while !s.1 {
                s = self.cond.wait(s).unwrap();
            }
        }
        fn wait_entered(&self) {
            let s = self.state.lock().unwrap();
            let (s, timeout) = self.cond.wait_timeout_while(s, WAIT, |s| !s.0).unwrap();
            assert!(!timeout.timed_out(), "no bitmap write arrived: {:?}", *s);
        }
        fn open(&self) {
            self.state.lock().unwrap().1 = true;
            self.cond.notify_all();
        }
    }

    /// What the members of a test bitmap saw.
    #[derive(Default)]
    struct Seen {
        gate: Gate,
        /// Bitmap-area writes per member.
        writes: Vec<AtomicU64>,
        /// Bitmap-area writes of this role fail once the gate is open.
        failing_role: Option<usize>,
    }

    /// A bitmap of `BLOCKS` blocks on `count` RAM members whose bitmap-area writes pass
    /// `seen.gate` and are counted.
    fn bitmap_on(count: usize, failing_role: Option<usize>) -> (Bitmap, Arc<Seen>, MapArea) {
        let at = BitmapRef {
            offset_bytes: BITMAP_OFFSET,
            bytes: BLOCKS * BITMAP_BLOCK_BYTES,
            region_bytes: REGION,
        };
        let regions = BLOCKS * BITS_PER_BLOCK;
        let uuid = Uuid::new_v4();
        let image = vec![0u8; regions.div_ceil(8) as usize];
        let seen = Arc::new(Seen {
            writes: (0..count).map(|_| AtomicU64::new(0)).collect(),
            failing_role,
            ..Seen::default()
        });
        let area = at.area();
        let members = (0..count)
            .map(|role| {
                let m = member::open("mem:1M", &OpenOptions::default()).unwrap();
                m.write_at(&encode_area(&uuid, &area, &image), area.offset_bytes)
                    .unwrap();
                let seen = Arc::clone(&seen);
                let hook = move |call: &Call| {
                    let in_area =
                        (area.offset_bytes..area.offset_bytes + area.bytes).contains(&call.offset);
                    if call.changes_bytes() && in_area {
                        seen.gate.pass();
                        seen.writes[role].fetch_add(1, Ordering::SeqCst);
                        if seen.failing_role == Some(role) {
                            return Err(io::Error::other("injected bitmap write error"));
                        }
                    }
                    Ok(())
                };
                Some(Arc::new(Hooked::new(m, hook)) as Arc<dyn Member>)
            })
            .collect();
        let b = Bitmap::new(at, uuid, regions * REGION, image, members);
        (b, seen, area)
    }

    /// Waits until `until` holds (polled), at most `WAIT`.
    fn wait_for(what: &str, until: impl Fn() -> bool) {
        let deadline = Instant::now() + WAIT;
        while !until() {
            assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The bitmap image on each target member.
    fn member_images(b: &Bitmap, area: &MapArea) -> Vec<Vec<u8>> {
        let targets = b.writer.targets.read().unwrap().clone();
        let uuid = b.writer.array_uuid;
        (targets.iter().flatten())
            .map(|m| {
                read_map_image(m.as_ref(), &uuid, area, b.regions())
                    .unwrap()
                    .0
            })
            .collect()
    }

    /// The first update is held at the gate until every other writer waits for the bitmap
    /// (or one returned: its bits were reported durable during the held update); returns each
    /// writer's result. A writer whose bits are reported durable checks them on every
    /// writable member before its intent ends (what a data write may rely on).
    fn writers_meet_a_held_update(
        b: &Bitmap,
        seen: &Seen,
        first: std::ops::Range<u64>,
        others: &[std::ops::Range<u64>],
        writable: &[bool],
    ) -> Vec<Result<(), BitmapWriteError>> {
        let area = b.at.area();
        std::thread::scope(|s| {
            let write = |regions: std::ops::Range<u64>| {
                let w = writable.to_vec();
                move || {
                    let intent = b.start_write(regions.clone(), || w.clone())?;
                    let images = member_images(b, &area);
                    for (role, image) in images.iter().enumerate() {
                        for r in regions.clone() {
                            let durable = bit(image, r) || !w[role];
                            assert!(durable, "region {r}: reported set, not on role {role}");
                        }
                    }
                    drop(intent);
                    Ok(())
                }
            };
            let lead = s.spawn(write(first));
            seen.gate.wait_entered();
            let rest: Vec<_> = others.iter().map(|r| s.spawn(write(r.clone()))).collect();
            wait_for("writers waiting for the bitmap", || {
                b.waiting.load(Ordering::SeqCst) == others.len() as u64
                    || rest.iter().any(|h| h.is_finished())
            });
            seen.gate.open();
            std::iter::once(lead)
                .chain(rest)
                .map(|h| h.join().unwrap())
                .collect()
        })
    }

    /// Writers that meet clean regions while an update is being written share the next
    /// update: one write per touched block per member, not one update each.
    #[test]
    fn writers_waiting_for_the_bitmap_share_one_update() {
        let (b, seen, area) = bitmap_on(2, None);
        let k = BITS_PER_BLOCK;
        // Regions in block 0, 1 and 2, one write across the block 0/1 boundary, and one more
        // in the region of the held update (it waits for that update, not the next).
        let others = [
            7..8,
            9..10,
            k + 1..k + 2,
            k - 1..k + 1,
            2 * k + 3..2 * k + 4,
            5..6,
        ];
        let results = writers_meet_a_held_update(&b, &seen, 5..6, &others, &[true, true]);
        assert!(results.iter().all(|r| r.is_ok()));
        let rounds = b.rounds.load(Ordering::SeqCst);
        assert_eq!(
            rounds,
            2,
            "{} writers waiting for the bitmap took {rounds} update rounds, not 2 (the held one, then one for all of them)",
            others.len()
        );
        // Round 1: block 0; round 2: blocks 0, 1 and 2.
        for (role, w) in seen.writes.iter().enumerate() {
            assert_eq!(w.load(Ordering::SeqCst), 4, "role {role}");
        }
        for (role, image) in member_images(&b, &area).iter().enumerate() {
            for r in others.iter().cloned().flatten() {
                assert!(bit(image, r), "region {r} not durable on role {role}");
                assert!(b.is_set(r));
            }
        }
        assert_eq!(b.dirty_count(), 7);
    }

    /// A failed update reaches every writer waiting for it (each fails that member and
    /// tries again, as `VolumeCore::intend` does); the bits are written to the others then.
    #[test]
    fn a_failed_update_fails_every_writer_of_its_round() {
        let (b, seen, _) = bitmap_on(2, Some(1));
        let others = [7..8, 9..10, BITS_PER_BLOCK + 1..BITS_PER_BLOCK + 2];
        let results = writers_meet_a_held_update(&b, &seen, 5..6, &others, &[true, true]);
        for r in &results {
            match r {
                Err(e) => assert_eq!(
                    (e.role, e.source.to_string().as_str()),
                    (1, "injected bitmap write error")
                ),
                Ok(()) => panic!("a writer's bits were reported durable on a failed update"),
            }
        }
        for r in [5, 7, 9, BITS_PER_BLOCK + 1] {
            assert!(!b.is_set(r), "region {r}");
        }
        // Role 1 failed: the same writes go to role 0 alone.
        for r in [5, 7, 9, BITS_PER_BLOCK + 1] {
            drop(b.start_write(r..r + 1, || vec![true, false]).ok().unwrap());
            assert!(b.is_set(r));
        }
    }

    /// A lazy clear waits for the update being written and no update starts during it; its
    /// block carries the bits queued meanwhile (a 0 only for the region it clears).
    #[test]
    fn a_clear_waits_for_the_update_being_written() {
        let (b, seen, area) = bitmap_on(2, None);
        let writable = [true, true];
        let (held, idle, queued) = (5, 6, 7);
        seen.gate.open();
        drop(
            b.start_write(idle..idle + 1, || writable.to_vec())
                .ok()
                .unwrap(),
        );
        let start = Instant::now();
        assert_eq!(b.clear_idle(start, || true, &writable).ok(), Some(0));
        *seen.gate.state.lock().unwrap() = (false, false);
        std::thread::scope(|s| {
            let lead = s.spawn(|| b.start_write(held..held + 1, || writable.to_vec()).is_ok());
            seen.gate.wait_entered();
            let clear = s.spawn(|| b.clear_idle(start + HOUR, || true, &writable).ok());
            wait_for("the clear waiting", || b.lock_disk().blockers == 1);
            let next = s.spawn(|| {
                b.start_write(queued..queued + 1, || writable.to_vec())
                    .is_ok()
            });
            wait_for("the writer queued", || {
                b.lock_disk().queued.contains(&queued)
            });
            assert!(!clear.is_finished(), "a clear ran during an update");
            seen.gate.open();
            assert!(lead.join().unwrap() && next.join().unwrap());
            assert_eq!(clear.join().unwrap(), Some(1));
        });
        for (role, image) in member_images(&b, &area).iter().enumerate() {
            let bits = [held, idle, queued].map(|r| bit(image, r));
            assert_eq!(
                bits,
                [true, false, true],
                "role {role}: regions {held}, {idle}, {queued}"
            );
        }
        assert_eq!(b.dirty_regions(), vec![held, queued]);
    }
}

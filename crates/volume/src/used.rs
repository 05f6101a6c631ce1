//! The in-memory used-regions map of a volume (the on-disk format is `ondisk::usedmap`; the
//! blocks go through the bitmap's `MapWriter`).
//!
//! Per region an atomic `used` flag (the bit is durable on every in-use member) and `started`
//! / `finished` counters of the writes that reached it. A write to a used region costs one
//! `fetch_add`, one load and (when it ends) one `fetch_add`. The first write to an unused
//! region takes the map's lock, zeroes the region's stripes through the array (the caller's
//! `zero`, flushed), writes the bit durably, then publishes it: so a used region's stripes are
//! always consistent (they were whole-stripe zeroes before any data), whatever the members
//! held before (block devices are not zeroed by `create`; a spare rebuilt only where data was
//! holds its old bytes elsewhere).
//!
//! Clearing after a trim (the same Dekker-style race as the bitmap's, both `SeqCst`): the
//! clearer stores `used = false`, then loads `started` and `finished`; a writer bumps
//! `started`, then loads `used`. Either the writer sees `false` (it takes the slow path, which
//! waits for the clearer's lock and zeroes and sets the region again) or the clearer sees the
//! bump (it puts the flag back).

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use member::Member;
use ondisk::bitmap::{bit, put_bit, BITS_PER_BLOCK};
use ondisk::usedmap::UsedMapRef;
use uuid::Uuid;

use crate::bitmap::{BitmapWriteError, MapWriter};

/// Why marking a region used failed.
pub(crate) enum UseError<E> {
    /// Zeroing the region's stripes (or flushing them) failed: nothing was marked.
    Zero(E),
    /// The map's block could not be written to a member.
    Map(BitmapWriteError),
}

/// The used-regions map of a volume (see the module docs).
pub(crate) struct UsedMap {
    pub at: UsedMapRef,
    regions: u64,
    array_bytes: u64,
    used: Box<[AtomicBool]>,
    started: Box<[AtomicU32]>,
    finished: Box<[AtomicU32]>,
    /// The bits as last written to the members; its lock orders every change.
    image: Mutex<Vec<u8>>,
    pub writer: MapWriter,
}

impl UsedMap {
    /// A map whose durable bits are `image` (the union read at assembly).
    pub(crate) fn new(
        at: UsedMapRef,
        array_uuid: Uuid,
        array_bytes: u64,
        image: Vec<u8>,
        targets: Vec<Option<Arc<dyn Member>>>,
    ) -> UsedMap {
        let regions = at.regions(array_bytes);
        assert!(regions <= at.bytes / 4096 * BITS_PER_BLOCK);
        assert_eq!(image.len() as u64, regions.div_ceil(8));
        UsedMap {
            at,
            regions,
            array_bytes,
            used: (0..regions)
                .map(|r| AtomicBool::new(bit(&image, r)))
                .collect(),
            started: (0..regions).map(|_| AtomicU32::new(0)).collect(),
            finished: (0..regions).map(|_| AtomicU32::new(0)).collect(),
            image: Mutex::new(image),
            writer: MapWriter::new(at.area(), array_uuid, targets),
        }
    }

    pub(crate) fn regions(&self) -> u64 {
        self.regions
    }
    pub(crate) fn region_bytes(&self) -> u64 {
        self.at.region_bytes
    }
    /// Array bytes of region `r`.
    pub(crate) fn region_range(&self, r: u64) -> (u64, u64) {
        let start = r * self.at.region_bytes;
        (start, (start + self.at.region_bytes).min(self.array_bytes))
    }
    /// Regions overlapping array bytes `[offset, offset + len)`, `len > 0`.
    pub(crate) fn regions_of(&self, offset: u64, len: u64) -> Range<u64> {
        assert!(len > 0);
        let first = offset / self.at.region_bytes;
        let last = (offset + len - 1) / self.at.region_bytes;
        assert!(last < self.regions, "an operation past the used map");
        first..last + 1
    }
    /// Regions wholly inside `[offset, offset + len)`.
    pub(crate) fn whole_regions(&self, offset: u64, len: u64) -> Range<u64> {
        let first = offset.div_ceil(self.at.region_bytes);
        let end = offset + len;
        let mut last = end / self.at.region_bytes;
        if end == self.array_bytes {
            last = self.regions; // the last region may be shorter
        }
        first..last.max(first)
    }
    pub(crate) fn is_used(&self, r: u64) -> bool {
        self.used[r as usize].load(Ordering::SeqCst)
    }
    pub(crate) fn started(&self, r: u64) -> u32 {
        self.started[r as usize].load(Ordering::SeqCst)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        self.image.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Regions whose bit is durable now, under the map's lock: a region whose first write is
    /// under way is either in the list or zeroed after this returns (so it reaches whatever
    /// member was attached before the call).
    pub(crate) fn used_regions(&self) -> Vec<u64> {
        let _image = self.lock();
        (0..self.regions).filter(|&r| self.is_used(r)).collect()
    }
    pub(crate) fn used_count(&self) -> u64 {
        (0..self.regions).filter(|&r| self.is_used(r)).count() as u64
    }

    /// `[offset, offset + len)` cut at region boundaries into runs of the same state:
    /// `(start, len, used)`.
    pub(crate) fn runs(&self, offset: u64, len: u64) -> Vec<(u64, u64, bool)> {
        let mut out: Vec<(u64, u64, bool)> = Vec::new();
        if len == 0 {
            return out;
        }
        for r in self.regions_of(offset, len) {
            let (a, b) = self.region_range(r);
            let (a, b) = (a.max(offset), b.min(offset + len));
            let used = self.is_used(r);
            match out.last_mut() {
                Some(last) if last.2 == used && last.0 + last.1 == a => last.1 += b - a,
                _ => out.push((a, b - a, used)),
            }
        }
        out
    }

    /// Writes the whole map durably to every member that receives its writes (assembly, when
    /// the members' copies disagree: see `used_volume::load`).
    pub(crate) fn write_whole(&self) -> Result<(), BitmapWriteError> {
        let image = self.lock();
        let blocks: BTreeSet<usize> = (0..self.regions.div_ceil(BITS_PER_BLOCK) as usize).collect();
        let all = vec![true; self.writer.role_count()];
        self.writer.write_blocks(&image, &blocks, &all)
    }

    /// Changes the member receiving map writes for `role`; a new one first receives the whole
    /// map (flushed).
    pub(crate) fn set_target(
        &self,
        role: usize,
        whole: Option<Arc<dyn Member>>,
    ) -> std::io::Result<()> {
        let image = self.lock();
        self.writer.set_target(role, whole, &image)
    }

    /// Counts a write to `regions` as started and makes sure they are used: the regions not
    /// used yet are zeroed by `zero(first_region, end_region)` (which must leave them durable),
    /// then their bits are written durably to every member in `writable()`, then published.
    /// The returned guard counts the write finished when dropped.
    pub(crate) fn start_write<'a, E>(
        &'a self,
        regions: Range<u64>,
        zero: impl FnOnce(&[u64]) -> Result<(), E>,
        writable: impl FnOnce() -> Vec<bool>,
    ) -> Result<UseGuard<'a>, UseError<E>> {
        let mut missing = false;
        for r in regions.clone() {
            self.started[r as usize].fetch_add(1, Ordering::SeqCst);
            missing |= !self.used[r as usize].load(Ordering::SeqCst);
        }
        let guard = UseGuard {
            map: self,
            regions: regions.clone(),
        };
        if missing {
            let mut image = self.lock();
            let todo: Vec<u64> = regions.filter(|&r| !self.is_used(r)).collect();
            if todo.is_empty() {
                return Ok(guard);
            }
            zero(&todo).map_err(UseError::Zero)?;
            for &r in &todo {
                put_bit(&mut image, r, true);
            }
            let blocks: BTreeSet<usize> = todo
                .iter()
                .map(|&r| (r / BITS_PER_BLOCK) as usize)
                .collect();
            self.writer
                .write_blocks(&image, &blocks, &writable())
                .map_err(UseError::Map)?;
            for &r in &todo {
                self.used[r as usize].store(true, Ordering::SeqCst);
            }
        }
        Ok(guard)
    }

    /// After a trim or write-zeroes of whole regions: clears the bits of `snapshot`'s regions
    /// (each with its `started` count from before the operation) that no write reached since
    /// and none is in flight on. `flush_all` makes the operation durable on every member
    /// (false: nothing is cleared). Returns the regions cleared.
    pub(crate) fn clear(
        &self,
        snapshot: &[(u64, u32)],
        flush_all: impl FnOnce() -> bool,
        writable: &[bool],
    ) -> Result<u64, BitmapWriteError> {
        let mut image = self.lock();
        let mut cleared = Vec::new();
        for &(r, before) in snapshot {
            let i = r as usize;
            if !self.is_used(r) {
                continue;
            }
            self.used[i].store(false, Ordering::SeqCst);
            let started = self.started[i].load(Ordering::SeqCst);
            let finished = self.finished[i].load(Ordering::SeqCst);
            match started == before && finished == before {
                true => cleared.push(r),
                false => self.used[i].store(true, Ordering::SeqCst),
            }
        }
        if cleared.is_empty() {
            return Ok(0);
        }
        if !flush_all() {
            for &r in &cleared {
                self.used[r as usize].store(true, Ordering::SeqCst);
            }
            return Ok(0);
        }
        for &r in &cleared {
            put_bit(&mut image, r, false);
        }
        let blocks: BTreeSet<usize> = cleared
            .iter()
            .map(|&r| (r / BITS_PER_BLOCK) as usize)
            .collect();
        // A failed write leaves the bits set on that member: the union at assembly keeps
        // the region used (its trimmed stripes are consistent zeroes).
        self.writer.write_blocks(&image, &blocks, writable)?;
        Ok(cleared.len() as u64)
    }
}

/// A write counted on its regions; dropping it counts the write finished.
pub(crate) struct UseGuard<'a> {
    map: &'a UsedMap,
    regions: Range<u64>,
}

impl Drop for UseGuard<'_> {
    fn drop(&mut self) {
        for r in self.regions.clone() {
            self.map.finished[r as usize].fetch_add(1, Ordering::SeqCst);
        }
    }
}

//! The used-regions map in a [`VolumeCore`]: loading it at assembly, marking regions used
//! before the first write (zeroing their stripes first), reads of unused regions (zeroes),
//! trims and write-zeroes that clear whole regions, what a rebuild, replace or resync copies,
//! and what `status` shows. The map itself is in `used`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ondisk::Superblock;

use crate::status::UsedMapStatus;
use crate::used::{UseError, UseGuard, UsedMap};
use crate::volume::{Held, VolumeCore, VolumeError};

/// The used map of an array being assembled: the union of the bits on every member holding a
/// role (a block that fails its check, or a member that cannot be read, counts as all used).
///
/// When the members disagree — a cut while a bit was being written reached some members and
/// not others — the union is written back to every one of them before the array serves: a
/// bit is a promise that the region's data are on the members, and the journal's replay (or a
/// write the cut interrupted and the client repeats) puts data there without setting it
/// again. Left on one member only, the bit would be lost with that member, and a degraded
/// array would read the region as never written (zeroes).
pub(crate) fn load(sb: &Superblock, roles: &[Option<Held>]) -> Result<Option<UsedMap>, String> {
    // `create` gives only redundant levels a map (nothing else is rebuilt or resynced).
    let Some(at) = sb.used_map.filter(|_| sb.level.has_redundancy()) else {
        return Ok(None);
    };
    let regions = at.regions(sb.array_size_bytes);
    let loaded = crate::bitmap_volume::union_of(sb, roles, &at.area(), regions);
    let map = UsedMap::new(
        at,
        sb.array_uuid,
        sb.array_size_bytes,
        loaded.union,
        loaded.targets,
    );
    if !loaded.agree {
        map.write_whole().map_err(|e| {
            format!(
                "writing the used-regions map back to member {} (role {}): {}",
                e.name, e.role, e.source
            )
        })?;
    }
    Ok(Some(map))
}

// The `pub(crate)` methods here that `Volume` offers are documented where it lists them
// (`forward_to_core!` in volume.rs).
impl VolumeCore {
    /// Counts a write to `[offset, offset + len)` in the used map and makes its regions used
    /// first: a region not used yet has its stripes zeroed (whole stripes through the array,
    /// then flushed) and its bit written durably before the write goes on. A member whose map
    /// cannot be written is failed (if the array keeps its data without it).
    pub(crate) fn use_regions(
        &self,
        offset: u64,
        len: u64,
    ) -> Result<Option<UseGuard<'_>>, VolumeError> {
        let Some(used) = &self.used else {
            return Ok(None);
        };
        if len == 0 {
            return Ok(None);
        }
        let regions = used.regions_of(offset, len);
        let mut tries = 0;
        loop {
            let zero = |todo: &[u64]| self.zero_regions(used, todo);
            let e = match used.start_write(regions.clone(), zero, || self.array.writable_snapshot())
            {
                Ok(guard) => return Ok(Some(guard)),
                Err(UseError::Zero(e)) => return Err(e),
                Err(UseError::Map(e)) => e,
            };
            tries += 1;
            self.map_write_failed(e, "used map", tries)?;
        }
    }

    /// Zeroes the stripes of `regions` (sorted) on every writable member and makes the zeroes
    /// durable: whole stripes, so data and parity are zero and mirrors equal.
    fn zero_regions(&self, used: &UsedMap, regions: &[u64]) -> Result<(), VolumeError> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &r in regions {
            let (a, b) = used.region_range(r);
            match runs.last_mut() {
                Some(last) if last.1 == a => last.1 = b,
                _ => runs.push((a, b)),
            }
        }
        for (a, b) in runs {
            self.array.write_zeroes(a, b - a)?;
        }
        Ok(self.array.flush()?)
    }

    /// Reads `[offset, offset + buf.len())`: unused regions as zeroes (their member bytes
    /// mean nothing), the rest from the array.
    pub(crate) fn read_used(
        &self,
        used: &UsedMap,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), engine::IoError> {
        for (start, len, is_used) in used.runs(offset, buf.len() as u64) {
            let part = &mut buf[(start - offset) as usize..][..len as usize];
            match is_used {
                true => self.array.read(start, part)?,
                false => part.fill(0),
            }
        }
        Ok(())
    }

    /// A trim or write-zeroes (`op`) of `[offset, offset + len)`: only the used regions are
    /// passed on (the others read as zeroes already); the whole regions it covered are then
    /// cleared once it is durable, unless a write reached them meanwhile.
    pub(crate) fn discard_used(
        &self,
        used: &UsedMap,
        offset: u64,
        len: u64,
        op: impl Fn(u64, u64) -> Result<(), engine::IoError>,
    ) -> Result<(), VolumeError> {
        let snapshot: Vec<(u64, u32)> = used
            .whole_regions(offset, len)
            .filter(|&r| used.is_used(r))
            .map(|r| (r, used.started(r)))
            .collect();
        for (start, n, is_used) in used.runs(offset, len) {
            if is_used {
                self.changing(start, n, false, || op(start, n))?;
            }
        }
        if snapshot.is_empty() {
            return Ok(());
        }
        let _gate = self.begin_write()?;
        let epoch = self.array.state_epoch();
        let writable = self.array.writable_snapshot();
        let flush_all = || self.array.flush().is_ok() && self.array.state_epoch() == epoch;
        if let Err(e) = used.clear(&snapshot, flush_all, &writable) {
            // The bits stay set on that member: the region stays used there, which is safe.
            // The member is failed like after any other map write error (or, for a lack of
            // space, kept: the trim itself succeeded).
            let _ = self.map_write_failed(e, "used map", 1);
        }
        self.settle()
    }

    /// `role`'s member ranges that hold data (rows of used regions, sorted and merged);
    /// `None` without a used map (everything is copied).
    pub(crate) fn used_member_ranges(&self, role: usize) -> Option<Vec<(u64, u64)>> {
        let used = self.used.as_ref()?;
        let regions = used.used_regions();
        Some(self.member_ranges_of(role, &regions, used.region_bytes()))
    }

    /// Whether sync unit `unit` lies in a used region (always, without a map).
    pub(crate) fn unit_used(&self, unit: u64) -> bool {
        let Some(used) = &self.used else { return true };
        let r = unit * self.sync_unit_array_bytes() / used.region_bytes();
        used.is_used(r)
    }

    /// The first unit from `unit` in a used region (`units` when none): resyncs and initial
    /// syncs skip the rest, whose stripes the first write zeroes anyway.
    pub(crate) fn next_used_unit(&self, unit: u64, units: u64) -> u64 {
        let Some(used) = &self.used else { return unit };
        let ub = self.sync_unit_array_bytes();
        let per_region = used.region_bytes() / ub;
        let mut r = unit * ub / used.region_bytes();
        while r < used.regions() && !used.is_used(r) {
            r += 1;
        }
        match r < used.regions() {
            true => unit.max(r * per_region).min(units),
            false => units,
        }
    }

    /// `whole` now holds `role`: it receives the whole used map, then every update. A failed
    /// write fails it.
    pub(crate) fn adopt_used_map(&self, role: usize, whole: Option<Arc<dyn member::Member>>) {
        let Some(used) = &self.used else { return };
        if let Err(e) = used.set_target(role, whole) {
            self.array.try_fail_member(
                role,
                engine::FaultReason::WriteError(format!("used map: {e}")),
            );
        }
    }

    pub(crate) fn used_map_status(&self) -> Option<UsedMapStatus> {
        let used = self.used.as_ref()?;
        let used_regions = used.used_count();
        Some(UsedMapStatus {
            region_bytes: used.region_bytes(),
            regions: used.regions(),
            used_regions,
            used_bytes: (used_regions * used.region_bytes()).min(self.size_bytes()),
            block_writes: used.writer.block_writes.load(Ordering::Relaxed),
        })
    }
}

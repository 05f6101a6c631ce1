//! The write-intent bitmap in a [`VolumeCore`]: loading it at assembly, the lazy clear
//! thread, reads during a resync of mirrors, re-adding a member that was away for a while,
//! and what `status` shows. The bitmap itself is in `bitmap`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use engine::{MemberHealth, SyncMode};
use member::Member;

use ondisk::bitmap::read_map_image;

use crate::bitmap::{Bitmap, BitmapWriteError};
use crate::status::BitmapStatus;
use crate::volume::{Held, MetaState, VolumeCore, VolumeError};
use ondisk::Superblock;

/// The bitmap of an array being assembled: the union of the bits on every member holding a
/// role (a block that fails its check, or a member that cannot be read, counts as all set).
pub(crate) fn load(sb: &Superblock, roles: &[Option<Held>]) -> Option<Bitmap> {
    let at = sb.bitmap?;
    let regions = sb.array_size_bytes.div_ceil(at.region_bytes).max(1);
    let loaded = union_of(sb, roles, &at.area(), regions);
    Some(Bitmap::new(
        at,
        sb.array_uuid,
        sb.array_size_bytes,
        loaded.union,
        loaded.targets,
    ))
}

/// The map of one bit per region as assembly found it on the members holding a role.
pub(crate) struct LoadedMap {
    /// The union (OR) of their maps (a block that fails its check, or a member that cannot be
    /// read, counts as all set).
    pub union: Vec<u8>,
    /// The members that receive its updates, per role.
    pub targets: Vec<Option<Arc<dyn Member>>>,
    /// Whether every member's map read whole and equal to the union.
    pub agree: bool,
}

/// The map at `area` of `regions` bits on every member holding a role. The bitmap's and the
/// used map's loading.
pub(crate) fn union_of(
    sb: &Superblock,
    roles: &[Option<Held>],
    area: &ondisk::bitmap::MapArea,
    regions: u64,
) -> LoadedMap {
    let mut union = vec![0u8; regions.div_ceil(8) as usize];
    let mut images = Vec::new();
    let mut agree = true;
    for held in roles.iter().flatten() {
        match read_map_image(held.whole.as_ref(), &sb.array_uuid, area, regions) {
            Ok((image, bad)) => {
                agree &= bad == 0;
                union.iter_mut().zip(&image).for_each(|(u, b)| *u |= b);
                images.push(image);
            }
            Err(_) => {
                agree = false;
                union.fill(0xFF);
            }
        }
    }
    for r in regions..union.len() as u64 * 8 {
        union[(r / 8) as usize] &= !(1 << (r % 8));
    }
    agree &= images.iter().all(|image| *image == union);
    let targets = roles
        .iter()
        .map(|h| h.as_ref().map(|h| Arc::clone(&h.whole)))
        .collect();
    LoadedMap {
        union,
        targets,
        agree,
    }
}

/// Starts the lazy clear thread; it ends when the volume's worker is told to stop.
pub(crate) fn spawn_clearer(core: Arc<VolumeCore>) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(format!("raidkit-bm-{}", core.name()))
        .spawn(move || {
            while !core.work.stopped() {
                let tick = core.bitmap_tick();
                core.work.wait_change(tick);
                core.clear_pass();
            }
        })
        .expect("cannot start the bitmap thread")
}

/// The next piece of a rebuild from `offset` (< `total`): `[from, end)`. Without `ranges` the
/// rest of the member; with them the part of the next range that ends past `offset`.
pub(crate) fn next_piece(
    ranges: Option<&[(u64, u64)]>,
    offset: u64,
    total: u64,
) -> Option<(u64, u64)> {
    let Some(ranges) = ranges else {
        return (offset < total).then_some((offset, total));
    };
    let &(lo, hi) = ranges.iter().find(|r| r.1 > offset)?;
    let (from, end) = (lo.max(offset), hi.min(total));
    (from < end).then_some((from, end))
}

/// Bytes a rebuild from `start` has to do (see [`next_piece`]).
pub(crate) fn ranges_bytes(ranges: Option<&[(u64, u64)]>, start: u64, total: u64) -> u64 {
    let mut bytes = 0;
    let mut at = start;
    while let Some((from, end)) = next_piece(ranges, at, total) {
        bytes += end - from;
        at = end;
    }
    bytes
}

// The `pub(crate)` methods here that `Volume` offers are documented where it lists them
// (`forward_to_core!` in volume.rs).
impl VolumeCore {
    /// The first unit from `unit` the running resync has to do (`units` when none): one it
    /// awaits (see [`Self::next_awaiting_unit`]) in a used region.
    pub(crate) fn next_resync_unit(&self, unit: u64, units: u64, full_from: Option<u64>) -> u64 {
        let mut u = unit;
        loop {
            u = self.next_awaiting_unit(u, units, full_from);
            if u >= units {
                return units;
            }
            match self.next_used_unit(u, units) {
                next if next == u => return u,
                next => u = next,
            }
        }
    }

    /// The first unit from `unit` the resync awaits: all of them, or with a bitmap after a
    /// crash the units of pending regions and all from `full_from`.
    fn next_awaiting_unit(&self, unit: u64, units: u64, full_from: Option<u64>) -> u64 {
        let (Some(full_from), Some(bitmap)) = (full_from, &self.bitmap) else {
            return unit;
        };
        let ub = self.sync_unit_array_bytes();
        let region = bitmap.region_bytes();
        let full_unit = (full_from / ub).min(units);
        let mut u = unit;
        let mut r = u * ub / region;
        while u < full_unit {
            while r < bitmap.regions() && !bitmap.is_pending(r) {
                r += 1;
            }
            if r >= bitmap.regions() {
                return full_unit;
            }
            u = u.max(r * region / ub);
            if u >= full_unit || self.unit_awaits_resync(u, Some(full_from)) {
                return u.min(full_unit);
            }
            u += 1;
            r = r.max(u * ub / region);
        }
        u.min(units)
    }

    /// Units the resync still has to do from `unit`.
    pub(crate) fn resync_units_left(&self, unit: u64, units: u64, full_from: Option<u64>) -> u64 {
        let mut count = 0;
        let mut u = self.next_resync_unit(unit, units, full_from);
        while u < units {
            count += 1;
            u = self.next_resync_unit(u + 1, units, full_from);
        }
        count
    }

    fn bitmap_tick(&self) -> Duration {
        let idle = self
            .bitmap
            .as_ref()
            .map_or(Duration::from_secs(1), |b| b.idle());
        (idle / 4).clamp(Duration::from_millis(10), Duration::from_millis(500))
    }

    /// Clearing is allowed only with every role in sync (a member away keeps its bits: it is
    /// caught up from them), no resync pending and no unit left unsynced by a lack of space.
    fn may_clear(&self, bitmap: &Bitmap) -> bool {
        // Units a write refused for lack of space may have half-written keep their regions'
        // bits until resynced: a crash meanwhile resyncs them at assembly.
        if !self.resync_finished() || self.array.unsynced_units() > 0 {
            return false;
        }
        let all_in_sync = self
            .array
            .health_snapshot()
            .iter()
            .all(|h| *h == MemberHealth::InSync);
        all_in_sync && bitmap.pending_count() == 0
    }

    /// True when no resync is pending; then nothing awaits one any more (pending regions are
    /// resolved, reads need no fix-up).
    pub(crate) fn resync_finished(&self) -> bool {
        if self.lock_meta().resync.is_some() {
            return false;
        }
        self.read_fixup.store(false, Ordering::Release);
        if let Some(bitmap) = &self.bitmap {
            bitmap.resolve_all_pending();
        }
        true
    }

    /// One pass of the lazy clear (see `Bitmap::clear_idle`).
    pub(crate) fn clear_pass(&self) {
        let Some(bitmap) = &self.bitmap else { return };
        if bitmap.dirty_count() == 0 || !self.may_clear(bitmap) {
            return;
        }
        let epoch = self.array.state_epoch();
        let writable = self.array.writable_snapshot();
        let flush_all = || self.array.flush().is_ok() && self.array.state_epoch() == epoch;
        let result = bitmap.clear_idle(Instant::now(), flush_all, &writable);
        self.bitmap_error(result.map(|_| ()));
    }

    /// A failed bitmap write fails that member (if the array survives it) and is recorded;
    /// one refused for lack of space fails nothing (the bits it did not clear stay set).
    fn bitmap_error(&self, result: Result<(), BitmapWriteError>) {
        match result {
            Err(e) if !engine::is_no_space(&e.source) => {
                let reason = engine::FaultReason::WriteError(format!("bitmap: {}", e.source));
                self.array.try_fail_member(e.role, reason);
                let _ = self.settle();
            }
            _ => {}
        }
    }

    /// At a clean close (no write in flight, array flushed): clears every bit if allowed.
    pub(crate) fn clear_bitmap_at_close(&self) -> Result<(), VolumeError> {
        let Some(bitmap) = &self.bitmap else {
            return Ok(());
        };
        if bitmap.dirty_count() == 0 || !self.may_clear(bitmap) {
            return Ok(());
        }
        let epoch = self.array.state_epoch();
        let writable = self.array.writable_snapshot();
        let flush_all = || self.array.flush().is_ok() && self.array.state_epoch() == epoch;
        let result = bitmap.clear_all(flush_all, &writable);
        self.bitmap_error(result.map(|_| ()));
        Ok(())
    }

    pub(crate) fn set_bitmap_idle(&self, idle: Duration) {
        if let Some(b) = &self.bitmap {
            b.set_idle(idle);
        }
        self.work.notify();
    }

    pub(crate) fn bitmap_status(&self) -> Option<BitmapStatus> {
        let b = self.bitmap.as_ref()?;
        Some(BitmapStatus {
            region_bytes: b.region_bytes(),
            regions: b.regions(),
            dirty_regions: b.dirty_count(),
            resync_pending_regions: b.pending_count(),
            block_writes: b.writer.block_writes.load(Ordering::Relaxed),
        })
    }

    /// Whether sync unit `unit` still awaits the running resync.
    pub(crate) fn unit_awaits_resync(&self, unit: u64, full_from: Option<u64>) -> bool {
        let ub = self.sync_unit_array_bytes();
        let (start, end) = (unit * ub, (unit + 1) * ub);
        if end <= self.resync_progress.load(Ordering::Acquire) {
            return false;
        }
        let (Some(full_from), Some(bitmap)) = (full_from, &self.bitmap) else {
            return true;
        };
        if end > full_from {
            return true;
        }
        let len = end.min(self.size_bytes()) - start;
        bitmap.regions_of(start, len).any(|r| bitmap.is_pending(r))
    }

    /// RAID 1/10 with a resync pending: the units a read touches are resynced first (the
    /// first readable copy wins, as the resync decides), so every read of them returns the
    /// same copy.
    pub(crate) fn resync_before_read(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        let ub = self.sync_unit_array_bytes();
        if self.resync_finished() {
            return Ok(());
        }
        let full_from = self.lock_meta().resync.and_then(|r| r.full_from);
        for unit in offset / ub..=(offset + len - 1) / ub {
            if !self.read_fixup.load(Ordering::Acquire) {
                return Ok(());
            }
            if !self.unit_awaits_resync(unit, full_from) {
                continue;
            }
            let _gate = self.begin_write()?;
            let found = self.array.sync_unit(unit, SyncMode::Resync)?;
            if found.repaired > 0 {
                let start = unit * ub;
                self.data_changed(start, ub.min(self.size_bytes() - start));
            }
        }
        Ok(())
    }

    /// Re-adds `member` to the role it held (it failed or went missing and came back) with a
    /// rebuild of only the regions whose bits are set: no bit is cleared while a role is not
    /// in sync, so they cover every write it missed. False (nothing changed) when that cannot
    /// be bounded: no bitmap, another array or bitmap, a member the role table no longer
    /// names, a member that was itself being rebuilt, or a role not faulty/missing.
    pub(crate) fn try_re_add(
        &self,
        meta: &mut MetaState,
        member: &Arc<dyn Member>,
    ) -> Result<bool, VolumeError> {
        let Some(bitmap) = &self.bitmap else {
            return Ok(false);
        };
        let Ok(sb) = ondisk::read_superblock(member.as_ref()) else {
            return Ok(false);
        };
        let Some(role) = self.re_add_role(meta, &sb) else {
            return Ok(false);
        };
        // It keeps what it recorded as lost; an unreadable list makes it a new spare instead.
        let Ok(bad) = crate::badblocks::BadBlocks::load(member, &sb) else {
            return Ok(false);
        };
        if self.array.health_of(role) == MemberHealth::Faulty {
            self.array.detach_member(role);
        }
        let data_bytes = meta.template.roles[role].data_bytes;
        let mut held = Held {
            whole: Arc::clone(member),
            sb,
            bad,
            checksums: Arc::clone(&self.checksums),
        };
        held.sb.recovery_offset_bytes = Some(0);
        let window = held.window(data_bytes);
        meta.roles[role] = Some(held);
        self.array
            .attach_member(role, window)
            .map_err(|e| VolumeError::Refused {
                what: format!("re-add role {role}"),
                reason: e.to_string(),
            })?;
        // From the attach on every write reaches it; the bits set by then cover the rest.
        if let Err(source) = bitmap.set_target(role, Some(Arc::clone(member))) {
            self.array
                .try_fail_member(role, engine::FaultReason::WriteError(source.to_string()));
            self.write_superblocks(meta)?;
            return Ok(true);
        }
        self.adopt_used_map(role, Some(Arc::clone(member)));
        let ranges = self.member_ranges(role, &bitmap.dirty_regions());
        meta.partial_rebuild[role] = Some(ranges);
        self.write_superblocks(meta)?;
        Ok(true)
    }

    /// At assembly: re-adds a member left out as stale if the bitmap bounds what it missed.
    pub(crate) fn re_add_stale(&self, member: &Arc<dyn Member>) -> Result<bool, VolumeError> {
        let mut meta = self.lock_meta();
        let added = self.try_re_add(&mut meta, member)?;
        drop(meta);
        if added {
            self.work.resume();
            self.work.notify();
        }
        Ok(added)
    }

    /// The role `sb`'s member may be re-added to, if any.
    fn re_add_role(&self, meta: &MetaState, sb: &Superblock) -> Option<usize> {
        let t = &meta.template;
        let role = sb.role_index()?;
        let same = sb.array_uuid == t.array_uuid
            && sb.bitmap == t.bitmap
            && sb.recovery_offset_bytes.is_none()
            && role < meta.roles.len()
            && t.roles[role].member_uuid == sb.member_uuid
            && t.roles[role].data_bytes == sb.data_bytes;
        let away = matches!(
            self.array.health_of(role),
            MemberHealth::Faulty | MemberHealth::Missing
        );
        let holder_ok = meta.roles[role]
            .as_ref()
            .is_none_or(|h| h.sb.member_uuid == sb.member_uuid);
        (same && away && holder_ok).then_some(role)
    }

    /// The member ranges of `role` holding the array bytes of `regions`, sorted and merged.
    pub(crate) fn member_ranges(&self, role: usize, regions: &[u64]) -> Vec<(u64, u64)> {
        let Some(bitmap) = &self.bitmap else {
            return Vec::new();
        };
        self.member_ranges_of(role, regions, bitmap.region_bytes())
    }

    /// The member ranges of `role` holding the array bytes of `regions` (sorted) of
    /// `region_bytes` each, sorted and merged.
    pub(crate) fn member_ranges_of(
        &self,
        role: usize,
        regions: &[u64],
        region_bytes: u64,
    ) -> Vec<(u64, u64)> {
        let g = self.array.geometry();
        let mut out: Vec<(u64, u64)> = Vec::new();
        for &r in regions {
            let a = r * region_bytes;
            let b = ((r + 1) * region_bytes).min(self.size_bytes());
            if a >= b {
                continue;
            }
            let (lo, hi) = g.member_range(role, a, b - a);
            match out.last_mut() {
                Some(last) if last.1 >= lo => last.1 = last.1.max(hi),
                _ if lo < hi => out.push((lo, hi)),
                _ => {}
            }
        }
        out
    }
}

//! The reshape mover (docs/DESIGN.md "Reshape"): moves an array's data from an old geometry to
//! a new one with more members (same level, same chunk), window by window, so that a stop after
//! any member write resumes from what is durable (the recorded position `P_rec` and the backup
//! area) with no byte lost.
//!
//! - [`ReshapePlan`] (pure): the two geometries and the rule. Bytes below the position `P` are
//!   in the new layout, from `P` on in the old. New row `r` lies on the member bytes of old row
//!   `r`, so writing it destroys the old row's addresses `[r·S_old, (r+1)·S_old)`. The
//!   invariant: a new row is written only when every old address it destroys is below `P_rec`
//!   (already copied, the copy durable and recorded), so a resume that reads the old layout from
//!   `P_rec` on finds it intact. [`ReshapePlan::next`] picks the next window and says whether
//!   `P` must be recorded first (it makes the window safe) or, near the start where a window
//!   destroys its own old addresses (the *critical section*), whether it goes through the
//!   backup area first (one new stripe: recorded `P_rec = P`, backup written and flushed, then
//!   written in place; a resume finding a complete backup at `P_rec` writes it in place again).
//! - [`ReshapeTarget`]: what the mover reads, writes and records (the old and new layouts, the
//!   backup area, the position); [`ArrayTarget`] is it over two `Array`s on the same members.
//! - [`BackupArea`]: the backup of one window, spread over every member's backup area with
//!   `parity + 1` copies of each chunk (so it survives what the level survives), each member's
//!   part with a header and a crc32c (docs/FORMAT.md "Reshape").
//! - [`resume`] and [`run`]: the executor (offline: nothing else uses the arrays).
//! - [`OnlineReshape`]: the array served from both geometries while the mover goes on window
//!   by window (client requests below the position in the new layout, from the window's end
//!   in the old, waiting while they touch the window being moved).

use crate::{Array, IoError};

mod online;
use layout::{Geometry, Level};
use member::Member;
pub use online::OnlineReshape;
use std::io;
use std::sync::Arc;

/// Largest window the mover copies at once (bounded memory: one buffer of this size).
pub const WINDOW_BYTES_MAX: u64 = 16 << 20;

/// One step of the copy: new-layout rows holding `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start: u64,
    pub end: u64,
    /// `P = start` must be recorded (data flushed, then the position) before the window is
    /// written: the window destroys old addresses in `[P_rec, P)`.
    pub record_first: bool,
    /// The window destroys old addresses of its own (the critical section): it is one new
    /// stripe, written to the backup area (at `P_rec = start`) and flushed before it is written
    /// in place.
    pub via_backup: bool,
}

impl Window {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// The old and new geometry of a reshape that adds members, and the rule of its windows.
#[derive(Clone, Debug)]
pub struct ReshapePlan {
    old: Geometry,
    new: Geometry,
    /// Logical bytes of one old / new stripe row (data chunks × chunk).
    old_stripe: u64,
    new_stripe: u64,
    /// Where the copy ends: the new array's end (the rows past the old data are written with
    /// zeroes, so RAID 5/6 parity holds there and no level shows stale bytes in the grown part).
    end: u64,
    /// New rows per window outside the critical section.
    window_rows: u64,
}

impl ReshapePlan {
    /// The plan for moving `old` to `new`; windows of at most `window_bytes` (rounded to new
    /// stripes, at least one). Refuses what this mover does not do, saying what.
    pub fn new(old: Geometry, new: Geometry, window_bytes: u64) -> Result<ReshapePlan, String> {
        if !matches!(old.level(), Level::Raid0 | Level::Raid5 | Level::Raid6) {
            return Err(format!(
                "a reshape that moves data is built for raid0, raid5 and raid6, not {}",
                old.level()
            ));
        }
        if new.level() != old.level() {
            return Err(format!(
                "the level changes ({} to {}): not built",
                old.level(),
                new.level()
            ));
        }
        if new.chunk_bytes() != old.chunk_bytes() {
            return Err(format!(
                "the chunk changes ({} to {} bytes): not built",
                old.chunk_bytes(),
                new.chunk_bytes()
            ));
        }
        if new.member_count() <= old.member_count() {
            return Err(format!(
                "the new geometry has {} members, not more than the old {}",
                new.member_count(),
                old.member_count()
            ));
        }
        if new.rows() != old.rows() {
            return Err(format!(
                "the new geometry has {} rows per member, the old {}: a reshape keeps the data \
                 area of every member",
                new.rows(),
                old.rows()
            ));
        }
        let chunk = old.chunk_bytes();
        let old_stripe = chunk * (old.member_count() - old.parity_count()) as u64;
        let new_stripe = chunk * (new.member_count() - new.parity_count()) as u64;
        let end = new.size_bytes();
        assert!(end <= new.size_bytes() && end >= old.size_bytes());
        let window_rows = (window_bytes.min(WINDOW_BYTES_MAX) / new_stripe).max(1);
        Ok(ReshapePlan {
            old,
            new,
            old_stripe,
            new_stripe,
            end,
            window_rows,
        })
    }

    pub fn old(&self) -> &Geometry {
        &self.old
    }
    pub fn new_geometry(&self) -> &Geometry {
        &self.new
    }
    /// Logical bytes of one new stripe row: positions are multiples of it, and it is the
    /// backup's length.
    pub fn new_stripe_bytes(&self) -> u64 {
        self.new_stripe
    }
    /// Logical bytes of one old stripe row.
    pub fn old_stripe_bytes(&self) -> u64 {
        self.old_stripe
    }
    /// Where the copy ends (the position that means done).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The old addresses destroyed by writing new rows `[0, rows_end)`: all below this.
    pub fn destroyed_below(&self, rows_end: u64) -> u64 {
        (rows_end * self.old_stripe).min(self.old.size_bytes())
    }

    /// The next window from position `p` with `p_rec` recorded (`p_rec <= p`, both multiples
    /// of a new stripe); `None` when the copy is done (`p == end`).
    pub fn next(&self, p: u64, p_rec: u64) -> Option<Window> {
        assert!(p_rec <= p && p <= self.end, "p_rec {p_rec}, p {p}");
        assert_eq!(p % self.new_stripe, 0, "position {p} not on a new stripe");
        assert_eq!(
            p_rec % self.new_stripe,
            0,
            "position {p_rec} not on a new stripe"
        );
        if p == self.end {
            return None;
        }
        let row0 = p / self.new_stripe;
        let k_max = self.window_rows.min((self.end - p) / self.new_stripe);
        // The most rows whose destroyed old addresses all lie below `safe`.
        let rows_safe_below = |safe: u64| -> u64 {
            if self.old.size_bytes() <= safe {
                return k_max;
            }
            (safe / self.old_stripe).saturating_sub(row0).min(k_max)
        };
        let window = |rows: u64, record_first: bool, via_backup: bool| Window {
            start: p,
            end: p + rows * self.new_stripe,
            record_first,
            via_backup,
        };
        let k_rec = rows_safe_below(p_rec);
        if k_rec == k_max {
            return Some(window(k_max, false, false));
        }
        let k_p = rows_safe_below(p);
        if k_p >= 1 && k_p > k_rec {
            return Some(window(k_p, true, false));
        }
        if k_rec >= 1 {
            return Some(window(k_rec, false, false));
        }
        Some(window(1, p_rec != p, true))
    }
}

/// What the mover works on. Every method returns only when its writes are done; `flush_new`
/// makes them durable; `record` and `write_backup` return once what they wrote is durable.
pub trait ReshapeTarget {
    /// Reads logical `[offset, offset + buf.len())` of the old layout; past the old array's
    /// end it reads zeroes.
    fn read_old(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes whole new stripes at `offset` in the new layout.
    fn write_new(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Makes every earlier `write_new` durable.
    fn flush_new(&self) -> io::Result<()>;
    /// Records `p_rec` durably (the superblocks).
    fn record(&self, p_rec: u64) -> io::Result<()>;
    /// Writes the backup of `[position, position + data.len())` durably.
    fn write_backup(&self, position: u64, data: &[u8]) -> io::Result<()>;
    /// The complete backup of `len` bytes at `position`, if the backup area holds one.
    fn read_backup(&self, position: u64, len: u64) -> io::Result<Option<Vec<u8>>>;
}

/// After a stop: the position to go on from, given the recorded `p_rec`. A complete backup at
/// `p_rec` is written in place first (its window may have been half written when the copy
/// stopped).
pub fn resume(plan: &ReshapePlan, target: &dyn ReshapeTarget, p_rec: u64) -> io::Result<u64> {
    if p_rec == plan.end() {
        return Ok(p_rec);
    }
    match target.read_backup(p_rec, plan.new_stripe_bytes())? {
        Some(data) => {
            target.write_new(p_rec, &data)?;
            target.flush_new()?;
            Ok(p_rec + plan.new_stripe_bytes())
        }
        None => Ok(p_rec),
    }
}

/// How the copy goes on: how often the position is recorded even when no window needs it, and
/// what the caller sees after each window (the new `P`; an error there stops the copy, e.g. a
/// pause or a failed array).
pub struct RunOptions<'a> {
    /// Record `P` when it is this far past `P_rec` (bounds the work redone after a stop).
    pub record_every_bytes: u64,
    /// Called after each window with the position reached and whether it was recorded.
    pub progress: &'a mut dyn FnMut(u64) -> io::Result<()>,
}

/// Copies from `p` (with `p_rec` recorded) to the end, window by window; returns once the last
/// window is flushed and `end` recorded. The caller then records the finished reshape.
pub fn run(
    plan: &ReshapePlan,
    target: &dyn ReshapeTarget,
    mut p: u64,
    mut p_rec: u64,
    options: RunOptions<'_>,
) -> io::Result<()> {
    let mut buf = Vec::new();
    while let Some(window) = plan.next(p, p_rec) {
        let overdue = p - p_rec >= options.record_every_bytes;
        if (window.record_first || overdue) && p_rec != p {
            target.flush_new()?;
            target.record(p)?;
            p_rec = p;
        }
        copy_window(target, &window, p_rec, &mut buf)?;
        p = window.end;
        (options.progress)(p)?;
    }
    target.flush_new()?;
    if p_rec != p {
        target.record(p)?;
    }
    Ok(())
}

/// One window's copy (no flush, no record): its bytes read from the old layout, written to
/// the backup area first when the window goes through it (then `p_rec` must be its start), and
/// written in the new layout. `buf` is the caller's buffer, resized to the window.
pub fn copy_window(
    target: &dyn ReshapeTarget,
    window: &Window,
    p_rec: u64,
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    buf.resize(window.len() as usize, 0);
    target.read_old(window.start, buf)?;
    if window.via_backup {
        assert_eq!(
            p_rec, window.start,
            "a backup window starts at the recorded position"
        );
        target.write_backup(window.start, buf)?;
    }
    target.write_new(window.start, buf)
}

/// The backup of one window, in every member's backup area: header block, then `copies`
/// chunk slots. Slot `c` of role `j` holds the window's chunk `(j - c) mod m` when that is one
/// of its `d` data chunks (m members, d data chunks per new stripe), so each chunk is on
/// `copies` consecutive roles.
pub struct BackupArea {
    /// Per role: the member bytes of its backup area (a window), `None` when missing.
    areas: Vec<Option<Arc<dyn Member>>>,
    chunk: u64,
    data_chunks: usize,
    copies: usize,
    generation: u64,
}

/// The header of each member's backup part (docs/FORMAT.md "Reshape").
pub const BACKUP_MAGIC: &[u8; 8] = b"RKRSBAK1";
/// Bytes of the header block before the slots.
pub const BACKUP_HEADER_BYTES: u64 = 4096;

impl BackupArea {
    /// The bytes each member's backup area needs for `new` (the new geometry).
    pub fn bytes_per_member(new: &Geometry) -> u64 {
        BACKUP_HEADER_BYTES + Self::copies_of(new) as u64 * new.chunk_bytes()
    }

    fn copies_of(new: &Geometry) -> usize {
        new.parity_count() + 1
    }

    /// Over `areas[role]` (each at least [`BackupArea::bytes_per_member`] bytes) for the new
    /// geometry `new`; `generation` tells this reshape's backups from an earlier one's.
    pub fn new(areas: Vec<Option<Arc<dyn Member>>>, new: &Geometry, generation: u64) -> Self {
        assert_eq!(areas.len(), new.member_count());
        let need = Self::bytes_per_member(new);
        for area in areas.iter().flatten() {
            assert!(area.len() >= need, "backup area {} too small", area.name());
        }
        BackupArea {
            areas,
            chunk: new.chunk_bytes(),
            data_chunks: new.member_count() - new.parity_count(),
            copies: Self::copies_of(new),
            generation,
        }
    }

    fn chunk_in_slot(&self, role: usize, slot: usize) -> Option<usize> {
        let m = self.areas.len();
        let chunk = (role + m - slot) % m;
        (chunk < self.data_chunks).then_some(chunk)
    }

    fn header(&self, role: usize, position: u64, len: u64, slots: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; BACKUP_HEADER_BYTES as usize];
        h[0..8].copy_from_slice(BACKUP_MAGIC);
        h[8..16].copy_from_slice(&self.generation.to_le_bytes());
        h[16..24].copy_from_slice(&position.to_le_bytes());
        h[24..32].copy_from_slice(&len.to_le_bytes());
        h[32..40].copy_from_slice(&self.chunk.to_le_bytes());
        h[40..44].copy_from_slice(&(role as u32).to_le_bytes());
        h[44..48].copy_from_slice(&(self.copies as u32).to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&h[0..48]), slots);
        h[48..52].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Writes the backup of `data` (one new stripe) at `position` to every present member's
    /// area, then flushes them.
    pub fn write(&self, position: u64, data: &[u8]) -> io::Result<()> {
        assert_eq!(data.len() as u64, self.chunk * self.data_chunks as u64);
        for (role, area) in self.areas.iter().enumerate() {
            let Some(area) = area else { continue };
            let mut part = vec![0u8; (self.copies as u64 * self.chunk) as usize];
            for slot in 0..self.copies {
                if let Some(chunk) = self.chunk_in_slot(role, slot) {
                    let c = self.chunk as usize;
                    part[slot * c..(slot + 1) * c]
                        .copy_from_slice(&data[chunk * c..(chunk + 1) * c]);
                }
            }
            let mut whole = self.header(role, position, data.len() as u64, &part);
            whole.extend_from_slice(&part);
            area.write_at(&whole, 0)?;
        }
        for area in self.areas.iter().flatten() {
            area.flush()?;
        }
        Ok(())
    }

    /// The complete backup at `position` of `len` bytes: every chunk found in a part whose
    /// header matches (magic, generation, position, length, crc); `None` if any chunk has no
    /// such copy (the backup was being written when the copy stopped, so nothing was written
    /// in place yet).
    pub fn read(&self, position: u64, len: u64) -> io::Result<Option<Vec<u8>>> {
        let c = self.chunk as usize;
        let mut data = vec![0u8; len as usize];
        let mut found = vec![false; self.data_chunks];
        if len != self.chunk * self.data_chunks as u64 {
            return Ok(None);
        }
        for (role, area) in self.areas.iter().enumerate() {
            let Some(area) = area else { continue };
            let mut whole =
                vec![0u8; (BACKUP_HEADER_BYTES + self.copies as u64 * self.chunk) as usize];
            area.read_at(&mut whole, 0)?;
            let (head, part) = whole.split_at(BACKUP_HEADER_BYTES as usize);
            if self.header(role, position, len, part)[..52] != head[..52] {
                continue;
            }
            for slot in 0..self.copies {
                if let Some(chunk) = self.chunk_in_slot(role, slot) {
                    data[chunk * c..(chunk + 1) * c]
                        .copy_from_slice(&part[slot * c..(slot + 1) * c]);
                    found[chunk] = true;
                }
            }
        }
        Ok(found.iter().all(|&f| f).then_some(data))
    }
}

/// The target over two arrays on the same members (the old one on roles `0..n`, the new on
/// `0..m`), a backup area and a recorder of the position.
pub struct ArrayTarget {
    pub old: Array,
    pub new: Array,
    pub backup: BackupArea,
    pub recorder: Box<dyn Fn(u64) -> io::Result<()> + Send + Sync>,
    /// Regions of the old array that hold nothing and read as zeroes (the used-regions map:
    /// region bytes and one bit per region, set = holds data); their bytes are copied as
    /// zeroes, so a region the new map counts used (it is coarser) reads zero where the old one
    /// did. `None`: every byte is copied.
    pub used: Option<(u64, Vec<u8>)>,
}

fn io_error(e: IoError) -> io::Error {
    io::Error::other(e.to_string())
}

impl ReshapeTarget for ArrayTarget {
    fn read_old(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let old_end = self.old.size_bytes();
        let inside = old_end.saturating_sub(offset).min(buf.len() as u64) as usize;
        let (head, tail) = buf.split_at_mut(inside);
        if !head.is_empty() {
            self.old.read(offset, head).map_err(io_error)?;
        }
        tail.fill(0);
        if let Some((region, image)) = &self.used {
            let end = offset + buf.len() as u64;
            let mut at = offset;
            while at < end {
                let r = at / region;
                let next = ((r + 1) * region).min(end);
                let set = image
                    .get((r / 8) as usize)
                    .is_some_and(|byte| byte & (1 << (r % 8)) != 0);
                if !set {
                    buf[(at - offset) as usize..(next - offset) as usize].fill(0);
                }
                at = next;
            }
        }
        Ok(())
    }
    fn write_new(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.new.write(offset, buf).map_err(io_error)
    }
    fn flush_new(&self) -> io::Result<()> {
        self.new.flush().map_err(io_error)
    }
    fn record(&self, p_rec: u64) -> io::Result<()> {
        (self.recorder)(p_rec)
    }
    fn write_backup(&self, position: u64, data: &[u8]) -> io::Result<()> {
        self.backup.write(position, data)
    }
    fn read_backup(&self, position: u64, len: u64) -> io::Result<Option<Vec<u8>>> {
        self.backup.read(position, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(level: &str, members: usize, rows: u64) -> Geometry {
        Geometry::new(level.parse().unwrap(), 4096, &vec![rows * 4096; members]).unwrap()
    }

    /// Walks the plan as the executor does (recording only when told) and checks the
    /// invariant at every window: what it destroys lies below `P_rec`, or (backup) below its
    /// own end with `P_rec` at its start.
    fn walk(level: &str, n: usize, m: usize, rows: u64, window: u64) -> (usize, usize) {
        let plan =
            ReshapePlan::new(geometry(level, n, rows), geometry(level, m, rows), window).unwrap();
        let (mut p, mut p_rec) = (0, 0);
        let (mut backups, mut records) = (0, 0);
        while let Some(w) = plan.next(p, p_rec) {
            if w.record_first {
                p_rec = p;
                records += 1;
            }
            let destroyed = plan.destroyed_below(w.end / plan.new_stripe_bytes());
            if w.via_backup {
                assert_eq!(p_rec, w.start);
                assert_eq!(w.len(), plan.new_stripe_bytes());
                assert!(destroyed <= w.end);
                backups += 1;
            } else {
                assert!(
                    destroyed <= p_rec,
                    "{level} {n}->{m}: window {w:?} destroys below {destroyed}, p_rec {p_rec}"
                );
            }
            p = w.end;
        }
        assert_eq!(p, plan.end());
        (backups, records)
    }

    #[test]
    fn every_window_destroys_only_recorded_or_backed_up_old_addresses() {
        for (level, n, m) in [
            ("raid0", 2, 3),
            ("raid0", 3, 5),
            ("raid5", 3, 4),
            ("raid5", 4, 6),
            ("raid6", 4, 5),
            ("raid6", 5, 7),
        ] {
            for window in [4096, 64 << 10, 1 << 20] {
                let (backups, _) = walk(level, n, m, 64, window);
                assert!(backups >= 1, "{level} {n}->{m}: no critical section");
            }
        }
    }

    #[test]
    fn the_critical_section_is_the_first_old_data_chunks_rows() {
        // RAID 5 4 -> 5: d_old 3, d_new 4; new row k destroys old rows up to k, holding
        // addresses up to (k+1)·3 chunks, above its own start k·4 chunks while k < 3.
        let (backups, _) = walk("raid5", 4, 5, 64, 1 << 20);
        assert_eq!(backups, 3);
    }

    #[test]
    fn refusals_name_what_is_not_built() {
        let e =
            ReshapePlan::new(geometry("raid1", 2, 8), geometry("raid1", 3, 8), 4096).unwrap_err();
        assert!(e.contains("raid1"), "{e}");
        let e =
            ReshapePlan::new(geometry("raid5", 4, 8), geometry("raid5", 4, 8), 4096).unwrap_err();
        assert!(e.contains("not more"), "{e}");
    }
}

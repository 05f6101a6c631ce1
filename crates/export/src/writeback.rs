//! [`WriteBack`]: the write-back cache in front of a volume.
//!
//! A write is logged as `ArrayWrite` records, kept in a bounded in-memory buffer of
//! non-overlapping extents, and acknowledged once the records are durable. Reads overlay the
//! buffer on the volume. [`APPLIERS`] applier threads write buffered extents to the volume
//! (`Volume::write_applied`, whose RAID 5/6 stripes the engine logs to the same journal as
//! `StripeApply` records: parity, and references to the records the bytes came from) in
//! offset order (a cursor sweeps the buffer), each taking the extents within a window of
//! whole stripes ([`APPLY_BYTES_MAX`]), contiguous or not: the engine writes the pieces that
//! share a stripe as one write (one read of the stripe, one parity write; a full-stripe write
//! when they cover it, so small sequential writes become full-stripe writes), and they mark
//! their records complete; the journal then checkpoints. A record is complete once every byte of it is on the array or superseded
//! by a newer record, and no apply that copied bytes of it is still running (a `StripeApply`
//! record may refer to it until then: replay needs it in the ring).
//!
//! Appliers work in parallel on disjoint stripes: an extent in a stripe another applier is
//! writing is left until that write is done, so an older version of some bytes can never land
//! on the array after a newer one (the newer extent replaced it in the buffer while the older
//! one was being written; it is applied after). Each apply reserves ring space for its
//! stripe records first; when none is left, one applier at a time applies the oldest record,
//! which lets the journal checkpoint ([`crate::ring_budget`] has the rules and the argument
//! that they cannot deadlock; `Shared::take_batch` follows them).
//!
//! When the array refuses an apply for lack of space (its members' filesystem is full), the
//! extents stay buffered and their records in the journal: appliers try again every
//! [`NO_SPACE_RETRY`], a client write that would have to wait for buffer space fails with
//! `StorageFull` instead, and a drain (trim, close) fails the same way, leaving the records for
//! the next start's replay.
//!
//! Locks, in order: `order` (serialises submits so buffer order = sequence order) → `buf` →
//! the journal's own lock. Appliers take only `buf` and then the journal's lock, and hold
//! neither while writing, so they always make progress.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use journal::{
    scan, DataSource, Journal, JournalError, Record, ScanSummary, Superblock, APPLY_ENTRY_BYTES,
};
use member::Member;
use volume::Volume;

use crate::checkpoint::checkpoint;
use crate::ring_budget::RingBudget;

/// Largest array write an applier issues at once.
pub const APPLY_BYTES_MAX: u64 = 4 << 20;
/// Most extents one apply takes (4 KiB writes filling [`APPLY_BYTES_MAX`]; fewer when a
/// stripe holds less than that many references): bounds the references its stripe records
/// hold and the work of one apply.
pub const APPLY_EXTENTS_MAX: usize = 1024;
/// Applier threads: array writes in flight at once (each one of them an RMW on RAID 5/6, so a
/// single applier was bound by member latency: 3x fewer random writes than without a journal).
pub const APPLIERS: usize = 8;
/// Default bound of buffered (acknowledged, not yet applied) bytes.
pub const BUFFER_BYTES_DEFAULT: u64 = 64 << 20;

struct BufferedRange {
    data: Vec<u8>,
    seq: u64,
    /// Changes whenever the extent is replaced or split, so the applier removes only what it
    /// wrote.
    id: u64,
}

#[derive(Default)]
struct Buffer {
    extents: BTreeMap<u64, BufferedRange>,
    bytes: u64,
    /// Per record: extents still holding its data, and applies in flight writing a copy of
    /// some (a record is complete only once no apply refers to it: see [`Batch::sources`]).
    refs: HashMap<u64, u32>,
    next_id: u64,
    cursor: u64,
    /// What appliers are writing now (at most [`APPLIERS`]): the byte range from an apply's
    /// first piece to the end of its last, and the bytes it copied.
    in_flight: Vec<InFlight>,
    /// An apply of the oldest record under ring pressure is running (one at a time).
    forced: bool,
    shutdown: bool,
    failed: Option<String>,
    /// The array refused the last apply for lack of space (ENOSPC, EDQUOT): the extents stay
    /// buffered (their records stay in the journal) and appliers wait until this instant
    /// before trying again; the error says what happened. Cleared by a successful apply.
    no_space: Option<(Instant, String)>,
}

/// One apply in flight.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct InFlight {
    lo: u64,
    hi: u64,
    copied: u64,
}

/// After the array refused an apply for lack of space, appliers try again this much later.
pub const NO_SPACE_RETRY: Duration = Duration::from_secs(1);

struct Shared {
    journal: Arc<Journal>,
    /// How write-back records and applies share the journal's ring.
    budget: RingBudget,
    volume: Arc<Volume>,
    buf: Mutex<Buffer>,
    cond: Condvar,
    order: Mutex<()>,
    /// Writes shared, trims exclusive (a trim drains the buffer first).
    gate: RwLock<()>,
    buffer_max: u64,
}

/// The write-back cache. Thread-safe.
pub struct WriteBack {
    shared: Arc<Shared>,
    appliers: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl WriteBack {
    /// Starts the cache and its applier threads. Buffered bytes are at most
    /// `min(buffer_bytes_max, RingBudget::array_write_bytes_max())`.
    pub fn start(
        journal: Arc<Journal>,
        volume: Arc<Volume>,
        buffer_bytes_max: u64,
    ) -> io::Result<WriteBack> {
        let budget = RingBudget::new(Arc::clone(&journal));
        let buffer_max = buffer_bytes_max
            .min(budget.array_write_bytes_max())
            .max(4096);
        let shared = Arc::new(Shared {
            journal,
            budget,
            volume,
            buf: Mutex::new(Buffer::default()),
            cond: Condvar::new(),
            order: Mutex::new(()),
            gate: RwLock::new(()),
            buffer_max,
        });
        let wb = WriteBack {
            shared,
            appliers: Mutex::new(Vec::with_capacity(APPLIERS)),
        };
        for i in 0..APPLIERS {
            let worker = Arc::clone(&wb.shared);
            let handle = std::thread::Builder::new()
                .name(format!("journal-apply{i}"))
                .spawn(move || worker.apply_loop())?;
            lock(&wb.appliers).push(handle);
        }
        Ok(wb)
    }

    pub fn journal(&self) -> &Arc<Journal> {
        &self.shared.journal
    }

    /// Acknowledged bytes not yet on the array.
    pub fn buffered_bytes(&self) -> u64 {
        lock(&self.shared.buf).bytes
    }

    /// Logs `data` at `offset` and buffers it; returns once it is durable in the journal.
    pub fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        assert!(offset + data.len() as u64 <= self.shared.volume.size_bytes());
        if data.is_empty() {
            return Ok(());
        }
        let _gate = self.shared.gate.read().unwrap_or_else(|p| p.into_inner());
        let piece = self.shared.budget.piece_bytes_max() as usize;
        let mut done = 0;
        while done < data.len() {
            let n = piece
                .min(data.len() - done)
                .min(self.shared.buffer_max as usize);
            self.shared
                .write_piece(offset + done as u64, &data[done..done + n])?;
            done += n;
        }
        Ok(())
    }

    /// Reads the newest data: the array with the buffer laid over it.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = offset + buf.len() as u64;
        let overlay: Vec<(u64, Vec<u8>)> = {
            let b = lock(&self.shared.buf);
            overlapping(&b.extents, offset, end)
                .map(|(&start, e)| {
                    let lo = start.max(offset);
                    let hi = (start + e.data.len() as u64).min(end);
                    (
                        lo,
                        e.data[(lo - start) as usize..(hi - start) as usize].to_vec(),
                    )
                })
                .collect()
        };
        self.shared.volume.read(offset, buf)?;
        for (at, bytes) in overlay {
            let from = (at - offset) as usize;
            buf[from..from + bytes.len()].copy_from_slice(&bytes);
        }
        Ok(())
    }

    /// Every acknowledged write is already durable in the journal: nothing to wait for.
    pub fn flush(&self) -> io::Result<()> {
        self.shared.check_failed()
    }

    /// Drains the buffer, checkpoints (so replay cannot bring older data back), trims, and
    /// flushes the array: the trim is not in the journal, and FLUSH does not flush the array.
    pub fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        let _gate = self.shared.drain_exclusive()?;
        self.shared.volume.trim(offset, len)?;
        Ok(self.shared.volume.flush()?)
    }

    /// As [`WriteBack::trim`], with zeroes.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        let _gate = self.shared.drain_exclusive()?;
        self.shared.volume.write_zeroes(offset, len)?;
        Ok(self.shared.volume.flush()?)
    }

    /// Applies everything buffered, flushes the array, checkpoints the journal empty and
    /// stops the appliers.
    pub fn close(&self) -> io::Result<()> {
        let drained = self.shared.drain_exclusive().map(drop);
        self.stop_appliers();
        drained
    }

    fn stop_appliers(&self) {
        lock(&self.shared.buf).shutdown = true;
        self.shared.cond.notify_all();
        let handles = std::mem::take(&mut *lock(&self.appliers));
        for handle in handles {
            let _ = handle.join();
        }
    }
}

impl Drop for WriteBack {
    /// If a thread failed to start, `start` returns an error and this stops those that did.
    fn drop(&mut self) {
        self.stop_appliers();
    }
}

/// Extents overlapping `[start, end)`.
fn overlapping(
    extents: &BTreeMap<u64, BufferedRange>,
    start: u64,
    end: u64,
) -> impl Iterator<Item = (&u64, &BufferedRange)> {
    let first = extents
        .range(..=start)
        .next_back()
        .filter(|(&s, e)| s + e.data.len() as u64 > start)
        .map(|(&s, _)| s)
        .unwrap_or(start);
    extents.range(first..end)
}

impl Shared {
    fn check_failed(&self) -> io::Result<()> {
        if let Some(reason) = &lock(&self.buf).failed {
            return Err(io::Error::other(format!(
                "write-back journal {}: applying to the array failed: {reason}",
                self.journal.name()
            )));
        }
        if let Some(reason) = self.journal.failure() {
            return Err(io::Error::other(format!(
                "journal {}: {reason}",
                self.journal.name()
            )));
        }
        Ok(())
    }

    fn write_piece(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let len = data.len() as u64;
        let ticket = {
            let _order = lock(&self.order);
            let mut b = lock(&self.buf);
            while b.bytes > 0 && b.bytes + len > self.buffer_max && b.failed.is_none() {
                // The buffer drains only once the array has space again: refuse, not hang.
                if let Some((_, reason)) = &b.no_space {
                    return Err(self.no_space_error(reason, b.bytes));
                }
                self.cond.notify_all();
                b = self.cond.wait(b).unwrap_or_else(|p| p.into_inner());
            }
            drop(b);
            self.check_failed()?;
            let ticket = self.journal.submit(
                &[Record::ArrayWrite { offset, data }],
                self.budget.admission(),
            )?;
            assert_eq!(ticket.first, ticket.last);
            let mut b = lock(&self.buf);
            self.insert(&mut b, offset, data.to_vec(), ticket.first);
            self.cond.notify_all();
            ticket
        };
        self.journal.wait(ticket)?;
        Ok(())
    }

    /// Puts `data` at `offset` over whatever the buffer held there.
    fn insert(&self, b: &mut Buffer, offset: u64, data: Vec<u8>, seq: u64) {
        let end = offset + data.len() as u64;
        let hit: Vec<u64> = overlapping(&b.extents, offset, end)
            .map(|(&s, _)| s)
            .collect();
        for start in hit {
            let old = b.extents.remove(&start).expect("listed");
            let old_end = start + old.data.len() as u64;
            b.bytes -= old.data.len() as u64;
            if start < offset {
                let keep = old.data[..(offset - start) as usize].to_vec();
                self.add(b, start, keep, old.seq);
            }
            if old_end > end {
                let keep = old.data[(end - start) as usize..].to_vec();
                self.add(b, end, keep, old.seq);
            }
            self.release(b, old.seq);
        }
        self.add(b, offset, data, seq);
    }

    fn add(&self, b: &mut Buffer, offset: u64, data: Vec<u8>, seq: u64) {
        b.next_id += 1;
        b.bytes += data.len() as u64;
        *b.refs.entry(seq).or_insert(0) += 1;
        let id = b.next_id;
        let previous = b.extents.insert(offset, BufferedRange { data, seq, id });
        assert!(previous.is_none(), "buffer extents overlap at {offset}");
    }

    fn release(&self, b: &mut Buffer, seq: u64) {
        let refs = b.refs.get_mut(&seq).expect("record referenced");
        *refs -= 1;
        if *refs == 0 {
            b.refs.remove(&seq);
            self.journal.complete_seq(seq);
        }
    }

    /// Waits until the buffer is empty with writes excluded, then checkpoints the journal.
    fn drain_exclusive(&self) -> io::Result<std::sync::RwLockWriteGuard<'_, ()>> {
        let gate = self.gate.write().unwrap_or_else(|p| p.into_inner());
        let mut b = lock(&self.buf);
        while (b.bytes > 0 || !b.in_flight.is_empty()) && b.failed.is_none() {
            if let (Some((_, reason)), true) = (&b.no_space, b.in_flight.is_empty()) {
                return Err(self.no_space_error(reason, b.bytes));
            }
            self.cond.notify_all();
            b = self.cond.wait(b).unwrap_or_else(|p| p.into_inner());
        }
        drop(b);
        self.check_failed()?;
        self.volume.flush()?;
        checkpoint(&self.journal, &self.volume)?;
        Ok(gate)
    }

    /// "No space" for a client request while applies are refused for lack of space.
    fn no_space_error(&self, reason: &str, buffered: u64) -> io::Error {
        io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "write-back journal {}: {buffered} bytes wait to be applied to the array, \
                 whose members are out of space ({reason}); they stay in the journal and are \
                 applied once space is freed (or at the next start)",
                self.journal.name()
            ),
        )
    }

    fn apply_loop(&self) {
        loop {
            let batch = {
                let mut b = lock(&self.buf);
                loop {
                    // Shutting down while out of space: the records stay in the journal.
                    let give_up = b.shutdown && b.no_space.is_some();
                    if b.failed.is_some() || (b.shutdown && b.extents.is_empty()) || give_up {
                        return;
                    }
                    if let Some(wait) = b
                        .no_space
                        .as_ref()
                        .and_then(|(at, _)| at.checked_duration_since(Instant::now()))
                    {
                        b = self
                            .cond
                            .wait_timeout(b, wait)
                            .map(|(g, _)| g)
                            .unwrap_or_else(|p| p.into_inner().0);
                        continue;
                    }
                    if let Some(batch) = self.take_batch(&mut b) {
                        break batch;
                    }
                    b = self.cond.wait(b).unwrap_or_else(|p| p.into_inner());
                }
            };
            let pieces: Vec<(u64, &[u8])> = batch
                .pieces
                .iter()
                .map(|&(offset, at, len)| (offset, &batch.data[at..at + len]))
                .collect();
            let result = self
                .volume
                .write_applied(&pieces, &batch.sources)
                .map_err(io::Error::from);
            drop(pieces);
            self.budget.release_apply(batch.reserved);
            let mut b = lock(&self.buf);
            let at = b
                .in_flight
                .iter()
                .position(|&r| r == batch.in_flight)
                .expect("an applied range is in flight");
            b.in_flight.swap_remove(at);
            if batch.forced {
                b.forced = false;
            }
            for source in &batch.sources {
                self.release(&mut b, source.seq);
            }
            match result {
                Ok(()) => {
                    b.no_space = None;
                    self.retire(&mut b, &batch.parts);
                }
                // Not a failure of the array: keep the extents, try again later.
                Err(e) if engine::is_no_space(&e) => {
                    b.no_space = Some((Instant::now() + NO_SPACE_RETRY, e.to_string()));
                }
                Err(e) => b.failed = Some(e.to_string()),
            }
            self.cond.notify_all();
        }
    }

    /// The next batch to apply, registered in flight with its ring space reserved, or `None`
    /// when this applier must wait for another to finish.
    ///
    /// Normally the extents no other applier is writing from the cursor on (an elevator over
    /// the buffer, in offset order), within [`APPLY_BYTES_MAX`] of whole stripes from the first
    /// one's stripe and at most [`APPLY_EXTENTS_MAX`] of them, contiguous or not: the array
    /// writes the pieces that share a stripe together (one read of the stripe, one parity
    /// write; a full-stripe write when they cover it). When the ring has no room for its
    /// stripe records ([`RingBudget::reserve_apply`]) it is instead the oldest buffered extent
    /// alone, once no other applier is writing it or applying an oldest extent.
    fn take_batch(&self, b: &mut Buffer) -> Option<Batch> {
        let stripe = self.volume.geometry().unit_bytes().max(1);
        let limit = (APPLY_BYTES_MAX / stripe).max(1) * stripe;
        // Appliers work on different stripes: same-stripe writes would only queue on the
        // engine's stripe lock (and the same bytes must never be written by two at once).
        let stripe_span = |lo: u64, hi: u64| (lo / stripe, hi.div_ceil(stripe));
        let busy = |b: &Buffer, s: u64, e: &BufferedRange| {
            let (lo, hi) = stripe_span(s, s + e.data.len() as u64);
            b.in_flight.iter().any(|f| {
                let (flo, fhi) = stripe_span(f.lo, f.hi);
                lo < fhi && flo < hi
            })
        };
        // By offset from the cursor (sequential data becomes full-stripe writes), but oldest
        // first once the ring is half full, before it comes under pressure.
        let start = {
            let free = |from: u64| b.extents.range(from..).filter(|&(&s, e)| !busy(b, s, e));
            match self.budget.half_full() {
                true => free(0).min_by_key(|&(&s, e)| (e.seq, s)),
                false => free(b.cursor).next().or_else(|| free(0).next()),
            }
            .map(|(&s, _)| s)?
        };
        // Applies in flight copy at most about 2 x APPLY_BYTES_MAX of the buffer.
        let copied: u64 = b.in_flight.iter().map(|f| f.copied).sum();
        if copied >= APPLY_BYTES_MAX {
            return None;
        }
        // Each extent costs at most three entries (APPLY_ENTRY_BYTES: a reference, and a
        // parity write per parity block, RAID 6 having two) in a stripe's record: at most a
        // stripe's data of them, so a record stays within what the attach check let in.
        let entries = 3 * APPLY_ENTRY_BYTES as u64;
        let extents_max = APPLY_EXTENTS_MAX.min((stripe / entries).max(1) as usize);
        // The window: whole stripes from the first extent's. Extents before it in its stripe
        // are taken too (it is theirs as well); a busy extent ends the batch (or, before the
        // first extent, restarts it after the busy one).
        let window_lo = start / stripe * stripe;
        let window_hi = window_lo.saturating_add(limit);
        let mut parts: Vec<(u64, u64, u64)> = Vec::new();
        for (&s, e) in b.extents.range(window_lo..) {
            let end = s + e.data.len() as u64;
            let full = parts.len() >= extents_max || (end > window_hi && s > start);
            if s > start && (full || busy(b, s, e)) {
                break;
            }
            if busy(b, s, e) {
                parts.clear();
                continue;
            }
            parts.push((s, e.data.len() as u64, e.id));
        }
        assert!(
            parts.iter().any(|p| p.0 == start),
            "the first extent is taken"
        );
        let lo = parts[0].0;
        let hi = parts.last().map(|&(s, len, _)| s + len).expect("a part");
        let mut batch = Batch::default();
        let logged = self.volume.logged_bytes_bound(lo, hi - lo, parts.len());
        if let Some(reserved) = self.budget.reserve_apply(logged) {
            batch.reserved = reserved;
        } else {
            // Ring pressure: only the oldest record's extents, one at a time.
            if b.forced {
                return None;
            }
            let (&s, e) = b.extents.iter().min_by_key(|&(&s, e)| (e.seq, s))?;
            if busy(b, s, e) {
                return None;
            }
            parts = vec![(s, e.data.len() as u64, e.id)];
            let logged = self.volume.logged_bytes_bound(s, e.data.len() as u64, 1);
            batch.reserved = self.budget.force_reserve_apply(logged);
            batch.forced = true;
            b.forced = true;
        }
        let bytes: u64 = parts.iter().map(|p| p.1).sum();
        batch.data.reserve_exact(bytes as usize);
        for &(s, len, id) in &parts {
            let e = &b.extents[&s];
            // Contiguous extents make one piece.
            match batch.pieces.last_mut() {
                Some((at, _, n)) if *at + *n as u64 == s => *n += len as usize,
                _ => batch.pieces.push((s, batch.data.len(), len as usize)),
            }
            batch.data.extend_from_slice(&e.data);
            batch.sources.push(DataSource {
                offset: s,
                len,
                seq: e.seq,
            });
            batch.parts.push((s, id));
        }
        for source in &batch.sources {
            *b.refs.get_mut(&source.seq).expect("a buffered record") += 1;
        }
        let (first, last) = (batch.parts[0].0, *batch.sources.last().expect("a source"));
        batch.in_flight = InFlight {
            lo: first,
            hi: last.offset + last.len,
            copied: bytes,
        };
        if !batch.forced {
            b.cursor = batch.in_flight.hi;
        }
        b.in_flight.push(batch.in_flight);
        Some(batch)
    }

    /// Removes the extents the applier wrote, unless a newer write replaced them meanwhile.
    fn retire(&self, b: &mut Buffer, parts: &[(u64, u64)]) {
        for &(start, id) in parts {
            if b.extents.get(&start).is_some_and(|e| e.id == id) {
                let e = b.extents.remove(&start).expect("present");
                b.bytes -= e.data.len() as u64;
                self.release(b, e.seq);
            }
        }
    }
}

#[derive(Default)]
struct Batch {
    /// What `in_flight` holds for this apply.
    in_flight: InFlight,
    /// The pieces' bytes, one after the other.
    data: Vec<u8>,
    /// Per piece (a run of contiguous extents): array offset, offset in `data`, length.
    pieces: Vec<(u64, usize, usize)>,
    /// The extents copied: start and id.
    parts: Vec<(u64, u64)>,
    /// Where `data`'s bytes come from, extent by extent: the journal logs the apply's data by
    /// reference to them. Each holds a reference on its record until the apply returned, so
    /// the record stays incomplete (and in the ring) while an apply that copied it may still
    /// log a record referring to it, even if a newer write superseded the extent meanwhile.
    sources: Vec<DataSource>,
    /// Ring bytes reserved for the apply's stripe records.
    reserved: u64,
    /// The oldest record's apply under ring pressure.
    forced: bool,
}

/// Replays every write-back (`ArrayWrite`) record of the journal on `member` onto `volume`,
/// in sequence, as whole-stripe rewrites ([`replay_array_write`]), then flushes it. Runs after
/// the stripes logged write-through were replayed (`engine::Array::replay_journal`, which
/// found `summary`), so a degraded read of a stripe reconstructs from consistent parity.
pub fn replay_array_writes(
    member: &dyn Member,
    sb: &Superblock,
    summary: &ScanSummary,
    volume: &Volume,
) -> Result<(), JournalError> {
    if summary.array_writes == 0 {
        return Ok(());
    }
    let again = scan(member, sb, |_, record| match record {
        Record::ArrayWrite { offset, data } => replay_array_write(volume, *offset, data),
        _ => Ok(()),
    })?;
    assert_eq!(&again, summary, "the journal changed during replay");
    volume.flush().map_err(|e| JournalError::Apply {
        name: member.name().to_string(),
        seq: summary.next_seq,
        source: e.into(),
    })
}

/// Replays one write-back record onto the volume as whole stripes: reads the stripes the
/// record touches, lays the record over them and writes them back, so parity is computed
/// afresh (a torn stripe from the crash is made consistent; replaying twice gives the same
/// result).
pub fn replay_array_write(volume: &Volume, offset: u64, data: &[u8]) -> io::Result<()> {
    let stripe = volume.geometry().unit_bytes().max(1);
    let size = volume.size_bytes();
    let end = offset + data.len() as u64;
    assert!(end <= size, "replayed record past the array end");
    let lo = offset / stripe * stripe;
    let hi = end.div_ceil(stripe).saturating_mul(stripe).min(size);
    let mut buf = vec![0u8; (hi - lo) as usize];
    volume.read(lo, &mut buf)?;
    buf[(offset - lo) as usize..(end - lo) as usize].copy_from_slice(data);
    Ok(volume.write(lo, &buf)?)
}

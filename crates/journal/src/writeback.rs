//! [`WriteBack`]: the write-back cache over an array ([`Backing`]).
//!
//! A write is logged as `ArrayWrite` records, kept in a bounded in-memory buffer of
//! non-overlapping extents, and acknowledged once the records are durable. Reads overlay the
//! buffer on the array. One applier thread writes buffered extents to the array, merging
//! contiguous ones (up to [`APPLY_BYTES_MAX`], cut at stripe boundaries) so small sequential
//! writes become full-stripe writes, and marks their records complete; the journal then
//! checkpoints. A record is complete once every byte of it is on the array or superseded by a
//! newer record.
//!
//! Locks, in order: `order` (serialises submits so buffer order = sequence order) → `buf` →
//! the journal's own lock. The applier takes only `buf`, so it always makes progress.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;

use crate::format::Record;
use crate::writer::Journal;

/// Largest array write the applier issues at once.
pub const APPLY_BYTES_MAX: u64 = 4 << 20;
/// Default bound of buffered (acknowledged, not yet applied) bytes.
pub const BUFFER_BYTES_DEFAULT: u64 = 64 << 20;

/// What the write-back cache writes to: the array (a `metadata::Volume` in raidkit).
pub trait Backing: Send + Sync + 'static {
    fn size(&self) -> u64;
    /// Data bytes of one full stripe (merging aligns to it); 4096 when there is no parity.
    fn stripe_bytes(&self) -> u64;
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    fn flush(&self) -> io::Result<()>;
    fn trim(&self, offset: u64, len: u64) -> io::Result<()>;
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()>;
}

struct Extent {
    data: Vec<u8>,
    seq: u64,
    /// Changes whenever the extent is replaced or split, so the applier removes only what it
    /// wrote.
    id: u64,
}

#[derive(Default)]
struct Buffer {
    extents: BTreeMap<u64, Extent>,
    bytes: u64,
    /// Per record: extents still holding its data.
    refs: HashMap<u64, u32>,
    next_id: u64,
    cursor: u64,
    applying: bool,
    shutdown: bool,
    failed: Option<String>,
}

struct Shared {
    journal: Arc<Journal>,
    backing: Arc<dyn Backing>,
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
    applier: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl WriteBack {
    /// Starts the cache and its applier thread. Buffered bytes are at most
    /// `min(buffer_bytes_max, journal.array_write_bytes_max())`.
    pub fn start(
        journal: Arc<Journal>,
        backing: Arc<dyn Backing>,
        buffer_bytes_max: u64,
    ) -> io::Result<WriteBack> {
        let buffer_max = buffer_bytes_max
            .min(journal.array_write_bytes_max())
            .max(4096);
        let shared = Arc::new(Shared {
            journal,
            backing,
            buf: Mutex::new(Buffer::default()),
            cond: Condvar::new(),
            order: Mutex::new(()),
            gate: RwLock::new(()),
            buffer_max,
        });
        let worker = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("journal-apply".into())
            .spawn(move || worker.apply_loop())?;
        Ok(WriteBack {
            shared,
            applier: Mutex::new(Some(handle)),
        })
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
        assert!(offset + data.len() as u64 <= self.shared.backing.size());
        if data.is_empty() {
            return Ok(());
        }
        let _gate = self.shared.gate.read().unwrap_or_else(|p| p.into_inner());
        let piece = self.shared.journal.max_array_write_bytes() as usize;
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
        self.shared.backing.read(offset, buf)?;
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
        self.shared.backing.trim(offset, len)?;
        self.shared.backing.flush()
    }

    /// As [`WriteBack::trim`], with zeroes.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        let _gate = self.shared.drain_exclusive()?;
        self.shared.backing.write_zeroes(offset, len)?;
        self.shared.backing.flush()
    }

    /// Applies everything buffered, flushes the array, checkpoints the journal empty and
    /// stops the applier.
    pub fn close(&self) -> io::Result<()> {
        let drained = self.shared.drain_exclusive().map(drop);
        lock(&self.shared.buf).shutdown = true;
        self.shared.cond.notify_all();
        if let Some(handle) = lock(&self.applier).take() {
            let _ = handle.join();
        }
        drained
    }
}

impl Drop for WriteBack {
    fn drop(&mut self) {
        lock(&self.shared.buf).shutdown = true;
        self.shared.cond.notify_all();
        if let Some(handle) = lock(&self.applier).take() {
            let _ = handle.join();
        }
    }
}

/// Extents overlapping `[start, end)`.
fn overlapping(
    extents: &BTreeMap<u64, Extent>,
    start: u64,
    end: u64,
) -> impl Iterator<Item = (&u64, &Extent)> {
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
                self.cond.notify_all();
                b = self.cond.wait(b).unwrap_or_else(|p| p.into_inner());
            }
            drop(b);
            self.check_failed()?;
            let ticket = self
                .journal
                .submit(&[Record::ArrayWrite { offset, data }])?;
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
        let previous = b.extents.insert(offset, Extent { data, seq, id });
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
        while (b.bytes > 0 || b.applying) && b.failed.is_none() {
            self.cond.notify_all();
            b = self.cond.wait(b).unwrap_or_else(|p| p.into_inner());
        }
        drop(b);
        self.check_failed()?;
        self.backing.flush()?;
        self.journal.checkpoint()?;
        Ok(gate)
    }

    fn apply_loop(&self) {
        loop {
            let batch = {
                let mut b = lock(&self.buf);
                while b.extents.is_empty() && !b.shutdown {
                    b = self.cond.wait(b).unwrap_or_else(|p| p.into_inner());
                }
                if b.extents.is_empty() || b.failed.is_some() {
                    return;
                }
                b.applying = true;
                self.take_batch(&mut b)
            };
            let result = self.backing.write(batch.offset, &batch.data);
            let mut b = lock(&self.buf);
            b.applying = false;
            match result {
                Ok(()) => self.retire(&mut b, &batch.parts),
                Err(e) => b.failed = Some(e.to_string()),
            }
            self.cond.notify_all();
        }
    }

    /// A contiguous run of extents from the cursor on (or, when the journal is under
    /// pressure, from the extent of the oldest record: see `Journal::under_pressure`), cut
    /// at a stripe boundary.
    fn take_batch(&self, b: &mut Buffer) -> Batch {
        let stripe = self.backing.stripe_bytes().max(1);
        let limit = (APPLY_BYTES_MAX / stripe).max(1) * stripe;
        let oldest = || b.extents.iter().min_by_key(|(_, e)| e.seq).map(|(&s, _)| s);
        let from_cursor = || b.extents.range(b.cursor..).next().map(|(&s, _)| s);
        let start = match self.journal.under_pressure() {
            true => oldest(),
            false => from_cursor(),
        }
        .or_else(|| b.extents.keys().next().copied())
        .expect("not empty");
        let mut batch = Batch {
            offset: start,
            data: Vec::new(),
            parts: Vec::new(),
        };
        for (&s, e) in b.extents.range(start..) {
            let at = start + batch.data.len() as u64;
            let room = limit.saturating_sub(batch.data.len() as u64);
            if s != at || (e.data.len() as u64 > room && !batch.data.is_empty()) {
                break;
            }
            batch.data.extend_from_slice(&e.data);
            batch.parts.push((s, e.id));
        }
        b.cursor = start + batch.data.len() as u64;
        batch
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

struct Batch {
    offset: u64,
    data: Vec<u8>,
    parts: Vec<(u64, u64)>,
}

/// Replays one write-back record onto the array as whole stripes: reads the stripes the record
/// touches, lays the record over them and writes them back, so parity is computed afresh
/// (a torn stripe from the crash is made consistent; replaying twice gives the same result).
pub fn replay_array_write(backing: &dyn Backing, offset: u64, data: &[u8]) -> io::Result<()> {
    let stripe = backing.stripe_bytes().max(1);
    let end = offset + data.len() as u64;
    assert!(end <= backing.size(), "replayed record past the array end");
    let lo = offset / stripe * stripe;
    let hi = end
        .div_ceil(stripe)
        .saturating_mul(stripe)
        .min(backing.size());
    let mut buf = vec![0u8; (hi - lo) as usize];
    backing.read(lo, &mut buf)?;
    buf[(offset - lo) as usize..(end - lo) as usize].copy_from_slice(data);
    backing.write(lo, &buf)
}

//! [`Journal`]: appends records durably with group commit, tracks which records are complete
//! (their in-place writes done), and checkpoints (advance the tail in the superblock) so ring
//! space is reused.
//!
//! Group commit: appenders encode their records into a queue under one mutex (which assigns
//! consecutive sequence numbers and ring positions); whichever appender finds no commit in
//! progress becomes the leader, writes the whole queue and issues one flush, then wakes the
//! followers whose records it made durable. Locking: `ring` is the only lock.
//!
//! Checkpoints are driven by the owner of the array the journal protects, which must flush
//! the array between [`Journal::begin_checkpoint`] and [`Checkpoint::finish`]: the journal
//! calls nothing above it. [`Journal::wait_checkpoint_due`] tells that owner's thread when.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use member::Member;
use uuid::Uuid;

use crate::format::{
    align_up, Mode, Record, Superblock, RECORD_ALIGN, RING_BYTES_MIN, RING_OFFSET,
};
use crate::scan::ScanSummary;
use crate::JournalError;

/// Checkpoint at least this often while records are complete.
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(500);

/// The sequence numbers of one append: `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    pub first: u64,
    pub last: u64,
}

/// The room write-back (`ArrayWrite`) records are admitted into: at most
/// `array_write_bytes_max` of ring held by such records at once, and `keep_free` bytes left
/// neither used nor reserved after them. Other records take any free space. (The write-back
/// cache's rule is `export::ring_budget`'s.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    pub array_write_bytes_max: u64,
    pub keep_free: u64,
}

impl Admission {
    /// No rule beyond free space.
    pub const ANY: Admission = Admission {
        array_write_bytes_max: u64::MAX,
        keep_free: 0,
    };
}

/// An upper bound of the records some writer will append: `total` ring bytes between them,
/// none larger than `largest`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordsBound {
    pub total: u64,
    pub largest: u64,
}

impl RecordsBound {
    /// The ring bytes such records take wherever they land: their own, and the waste of one
    /// wrap (a wrap wastes the ring's end, less than the record that did not fit there).
    pub fn ring_bytes_max(&self) -> u64 {
        self.total + self.largest
    }
}

/// Counters for status and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalStats {
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub array_write_bytes: u64,
    pub records_live: u64,
    pub commits: u64,
    pub checkpoints: u64,
    pub durable_seq: u64,
    /// Reservations made whatever was free ([`Journal::reserve_forced`]): the write-back
    /// cache's applies of its oldest record under ring pressure.
    pub pressure_applies: u64,
    /// Ring bytes of every record appended this session, the waste of wraps included.
    pub appended_bytes: u64,
}

struct Live {
    seq: u64,
    pos: u64,
    bytes: u64,
    complete: bool,
    logical: bool,
}

struct Ring {
    head: u64,
    next_seq: u64,
    used_bytes: u64,
    /// Ring bytes of write-back (`ArrayWrite`) records after the tail.
    logical_bytes: u64,
    /// Ring bytes reserved for records not appended yet ([`Journal::try_reserve`]).
    reserved: u64,
    live: VecDeque<Live>,
    queue: Vec<(u64, Vec<u8>)>,
    queued_last: u64,
    committing: bool,
    /// Every record with a smaller sequence number is durable.
    durable_next: u64,
    failed: Option<String>,
    checkpoint_wanted: bool,
    shutdown: bool,
    stats: JournalStats,
}

struct Shared {
    member: Arc<dyn Member>,
    name: String,
    sb: Mutex<Superblock>,
    ring: Mutex<Ring>,
    cond: Condvar,
    /// One checkpoint at a time.
    checkpoint_lock: Mutex<()>,
    capacity: u64,
    max_record: u64,
}

/// An open journal. Thread-safe; cheap to share in an `Arc`.
pub struct Journal {
    shared: Shared,
}

/// A checkpoint in progress (one at a time): the complete, durable records at the front of
/// the ring it releases. Their in-place writes returned before [`Journal::begin_checkpoint`];
/// the caller flushes the array, then calls [`Checkpoint::finish`] with the flush's result.
#[must_use = "a checkpoint releases nothing until it is finished"]
pub struct Checkpoint<'a> {
    shared: &'a Shared,
    _one: MutexGuard<'a, ()>,
    count: usize,
    tail: u64,
    tail_seq: u64,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("name", &self.shared.name)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Writes a new, empty journal for the array `array_uuid` over the whole member.
pub fn format(
    member: &dyn Member,
    array_uuid: Uuid,
    mode: Mode,
) -> Result<Superblock, JournalError> {
    let ring_bytes = member.len().saturating_sub(RING_OFFSET) / 4096 * 4096;
    if ring_bytes < RING_BYTES_MIN {
        return Err(JournalError::BadSize {
            name: member.name().to_string(),
            reason: format!(
                "{} bytes is too small for a journal (at least {} bytes)",
                member.len(),
                RING_OFFSET + RING_BYTES_MIN
            ),
        });
    }
    let sb = Superblock {
        mode,
        array_uuid,
        journal_uuid: Uuid::new_v4(),
        ring_bytes,
        generation: 1,
        tail_offset: 0,
        tail_seq: 1,
        nonce: random_u64(),
    };
    let io = |what, r: io::Result<()>| {
        r.map_err(|source| JournalError::Io {
            name: member.name().to_string(),
            what,
            source,
        })
    };
    io("clear the superblocks", member.write_zeroes(0, RING_OFFSET))?;
    io(
        "clear the ring start",
        member.write_zeroes(RING_OFFSET, RECORD_ALIGN),
    )?;
    io(
        "write the superblock",
        member.write_at(&sb.encode()[..], sb.copy_offset()),
    )?;
    io("flush", member.flush())?;
    Ok(sb)
}

fn random_u64() -> u64 {
    Uuid::new_v4().as_u64_pair().0
}

impl Journal {
    /// Starts a new session after replay: `summary` is what [`crate::scan`] found and the
    /// caller has applied every record and flushed the array. Writes a superblock whose tail
    /// is the end of the replayed records (so they are not replayed again) and a new nonce.
    /// Whoever owns the array then runs its checkpoints ([`Journal::wait_checkpoint_due`]).
    pub fn start(
        member: Arc<dyn Member>,
        mut sb: Superblock,
        summary: &ScanSummary,
    ) -> Result<Arc<Journal>, JournalError> {
        sb.generation += 1;
        sb.tail_offset = summary.end_offset;
        sb.tail_seq = summary.next_seq;
        sb.nonce = random_u64();
        let name = member.name().to_string();
        write_superblock(member.as_ref(), &sb)?;
        let capacity = sb.ring_bytes;
        let ring = Ring {
            head: sb.tail_offset,
            next_seq: sb.tail_seq,
            used_bytes: 0,
            logical_bytes: 0,
            reserved: 0,
            live: VecDeque::new(),
            queue: Vec::new(),
            queued_last: 0,
            committing: false,
            durable_next: sb.tail_seq,
            failed: None,
            checkpoint_wanted: false,
            shutdown: false,
            stats: JournalStats {
                capacity_bytes: capacity,
                ..JournalStats::default()
            },
        };
        let shared = Shared {
            max_record: sb.max_record_bytes(),
            capacity,
            member,
            name,
            sb: Mutex::new(sb),
            ring: Mutex::new(ring),
            cond: Condvar::new(),
            checkpoint_lock: Mutex::new(()),
        };
        Ok(Arc::new(Journal { shared }))
    }

    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn superblock(&self) -> Superblock {
        lock(&self.shared.sb).clone()
    }

    /// Largest record the ring takes.
    pub fn max_record_bytes(&self) -> u64 {
        self.shared.max_record
    }

    /// Largest data one write-back (`ArrayWrite`) record holds.
    pub fn max_array_write_bytes(&self) -> u64 {
        self.shared.max_record - RECORD_ALIGN
    }

    /// Ring bytes in use: records after the tail, and reservations.
    pub fn in_use_bytes(&self) -> u64 {
        let ring = lock(&self.shared.ring);
        ring.used_bytes + ring.reserved
    }

    /// Reserves `bytes` of ring for records to be appended later, if `keep_free` bytes stay
    /// neither used nor reserved afterwards; `false` (nothing reserved) otherwise. Records
    /// appended later take their space as usual: the caller returns the reservation with
    /// [`Journal::release_reserved`] once they are appended. (The write-back cache reserves
    /// for the stripe records of each apply: `export::ring_budget`.)
    pub fn try_reserve(&self, bytes: u64, keep_free: u64) -> bool {
        let mut ring = lock(&self.shared.ring);
        let fits = ring.used_bytes + ring.reserved + bytes + keep_free <= self.shared.capacity;
        if fits {
            ring.reserved += bytes;
        }
        fits
    }

    /// Reserves `bytes` whatever is left (counted in [`JournalStats::pressure_applies`]).
    pub fn reserve_forced(&self, bytes: u64) {
        let mut ring = lock(&self.shared.ring);
        ring.reserved += bytes;
        ring.stats.pressure_applies += 1;
    }

    /// Returns a reservation of `bytes`.
    pub fn release_reserved(&self, bytes: u64) {
        let mut ring = lock(&self.shared.ring);
        ring.reserved = ring
            .reserved
            .checked_sub(bytes)
            .expect("released more than was reserved");
        drop(ring);
        self.shared.cond.notify_all();
    }

    pub fn stats(&self) -> JournalStats {
        let ring = lock(&self.shared.ring);
        JournalStats {
            used_bytes: ring.used_bytes,
            array_write_bytes: ring.logical_bytes,
            records_live: ring.live.len() as u64,
            durable_seq: ring.durable_next.saturating_sub(1),
            ..ring.stats
        }
    }

    /// Appends `records` and returns once they are durable.
    pub fn append(&self, records: &[Record<'_>]) -> Result<Ticket, JournalError> {
        let ticket = self.submit(records, Admission::ANY)?;
        self.wait(ticket)?;
        Ok(ticket)
    }

    /// Queues `records` (consecutive sequence numbers, in order); waits for ring space first,
    /// and for `admission`'s room when they hold write-back records. Durable only after
    /// [`Journal::wait`].
    pub fn submit(
        &self,
        records: &[Record<'_>],
        admission: Admission,
    ) -> Result<Ticket, JournalError> {
        assert!(!records.is_empty());
        let s = &self.shared;
        for r in records {
            assert!(
                !matches!(r, Record::Wrap),
                "wrap records are the journal's own"
            );
            if r.ring_bytes() > s.max_record {
                return Err(JournalError::RecordTooLarge {
                    name: s.name.clone(),
                    record_bytes: r.ring_bytes(),
                    max_bytes: s.max_record,
                });
            }
        }
        let mut ring = s.wait_for_space(records, admission)?;
        let nonce = lock(&s.sb).nonce;
        let mut first = None;
        for r in records {
            let seq = s.place(&mut ring, r, nonce);
            first.get_or_insert(seq);
        }
        let last = ring.next_seq - 1;
        let first = first.expect("at least one record");
        Ok(Ticket { first, last })
    }

    /// Returns once every record up to `ticket.last` is durable (leading a group commit if
    /// none is in progress).
    pub fn wait(&self, ticket: Ticket) -> Result<(), JournalError> {
        self.shared.wait_durable(ticket.last)
    }

    /// Marks the records of `ticket` complete: their effect is on the array (in place).
    /// (Wrap markers inside the ticket are complete from the start.)
    pub fn complete(&self, ticket: Ticket) {
        let mut ring = lock(&self.shared.ring);
        for seq in ticket.first..=ticket.last {
            complete_one(&mut ring, seq);
        }
        if ring.checkpoint_wanted {
            self.shared.cond.notify_all();
        }
    }

    /// Marks one record complete.
    pub fn complete_seq(&self, seq: u64) {
        self.complete(Ticket {
            first: seq,
            last: seq,
        });
    }

    /// Starts a checkpoint: waits for one in progress, then takes the complete, durable
    /// records at the front of the ring. `None` when there are none to release.
    pub fn begin_checkpoint(&self) -> Result<Option<Checkpoint<'_>>, JournalError> {
        let s = &self.shared;
        let one = lock(&s.checkpoint_lock);
        let mut ring = lock(&s.ring);
        ring.checkpoint_wanted = false;
        s.failed(&ring)?;
        let durable_next = ring.durable_next;
        let count = ring
            .live
            .iter()
            .take_while(|l| l.complete && l.seq < durable_next)
            .count();
        if count == 0 {
            return Ok(None);
        }
        let (tail, tail_seq) = match ring.live.get(count) {
            Some(l) => (l.pos, l.seq),
            None => (
                ring.live[count - 1].pos + ring.live[count - 1].bytes,
                ring.live[count - 1].seq + 1,
            ),
        };
        Ok(Some(Checkpoint {
            shared: s,
            _one: one,
            count,
            tail: tail % s.capacity,
            tail_seq,
        }))
    }

    /// Waits until a checkpoint is due: [`CHECKPOINT_INTERVAL`] passed, or a writer waits for
    /// ring space, or the ring is half full. `false` once the journal is shut down. While the
    /// journal has failed, waits on (a failed journal checkpoints nothing).
    pub fn wait_checkpoint_due(&self) -> bool {
        let s = &self.shared;
        loop {
            let ring = lock(&s.ring);
            let (ring, _) = s
                .cond
                .wait_timeout_while(ring, CHECKPOINT_INTERVAL, |r| {
                    !r.shutdown && !r.checkpoint_wanted
                })
                .unwrap_or_else(|p| p.into_inner());
            if ring.shutdown {
                return false;
            }
            if ring.failed.is_none() {
                return true;
            }
            drop(ring);
            std::thread::sleep(CHECKPOINT_INTERVAL);
        }
    }

    /// Clean shutdown, after the owner's last checkpoint: [`Journal::wait_checkpoint_due`]
    /// returns `false` from now on. Returns the records still live (0 after a clean drain).
    pub fn close(&self) -> u64 {
        let mut ring = lock(&self.shared.ring);
        ring.shutdown = true;
        self.shared.cond.notify_all();
        ring.live.len() as u64
    }

    /// The sticky failure, if any.
    pub fn failure(&self) -> Option<String> {
        lock(&self.shared.ring).failed.clone()
    }
}

impl Checkpoint<'_> {
    /// Finishes the checkpoint once the caller flushed the array (`array_flushed` is that
    /// flush's result): writes the superblock with the new tail and releases the records.
    /// Returns the number released. A failed flush or superblock write fails the journal
    /// (sticky).
    pub fn finish(self, array_flushed: io::Result<()>) -> Result<u64, JournalError> {
        let s = self.shared;
        let result = array_flushed
            .map_err(|source| JournalError::Io {
                name: s.name.clone(),
                what: "flush the array before a checkpoint",
                source,
            })
            .and_then(|()| s.write_checkpoint(self.tail, self.tail_seq));
        let mut ring = lock(&s.ring);
        if let Err(e) = &result {
            ring.failed = Some(e.to_string());
            s.cond.notify_all();
            return Err(JournalError::Failed {
                name: s.name.clone(),
                reason: e.to_string(),
            });
        }
        for _ in 0..self.count {
            let l = ring.live.pop_front().expect("counted");
            assert!(l.complete);
            ring.used_bytes -= l.bytes;
        }
        ring.stats.checkpoints += 1;
        s.cond.notify_all();
        Ok(self.count as u64)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn complete_one(ring: &mut Ring, seq: u64) {
    let front = ring
        .live
        .front()
        .map(|l| l.seq)
        .expect("completing a record not live");
    assert!(seq >= front, "record {seq} completed twice");
    let entry = &mut ring.live[(seq - front) as usize];
    assert_eq!(entry.seq, seq);
    if !entry.complete {
        entry.complete = true;
        if entry.logical {
            ring.logical_bytes -= entry.bytes;
        }
    }
}

fn write_superblock(member: &dyn Member, sb: &Superblock) -> Result<(), JournalError> {
    let io = |what, r: io::Result<()>| {
        r.map_err(|source| JournalError::Io {
            name: member.name().to_string(),
            what,
            source,
        })
    };
    io(
        "write the superblock",
        member.write_at(&sb.encode()[..], sb.copy_offset()),
    )?;
    io("flush the superblock", member.flush())
}

impl Shared {
    fn failed(&self, ring: &Ring) -> Result<(), JournalError> {
        match &ring.failed {
            Some(reason) => Err(JournalError::Failed {
                name: self.name.clone(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Ring bytes `records` need placed at `head`, including a wrap's waste.
    fn bytes_needed(&self, mut head: u64, records: &[Record<'_>]) -> u64 {
        let mut total = 0;
        for r in records {
            let size = r.ring_bytes();
            if head + size > self.capacity {
                total += self.capacity - head;
                head = 0;
            }
            total += size;
            head = (head + size) % self.capacity;
        }
        total
    }

    fn wait_for_space(
        &self,
        records: &[Record<'_>],
        admission: Admission,
    ) -> Result<MutexGuard<'_, Ring>, JournalError> {
        let logical: u64 = records
            .iter()
            .filter(|r| r.is_logical())
            .map(|r| r.ring_bytes())
            .sum();
        let mut ring = lock(&self.ring);
        loop {
            self.failed(&ring)?;
            let needed = self.bytes_needed(ring.head, records);
            let fits = ring.used_bytes + needed <= self.capacity;
            let logical_fits = logical == 0
                || (ring.logical_bytes + logical <= admission.array_write_bytes_max
                    && ring.used_bytes + ring.reserved + needed + admission.keep_free
                        <= self.capacity);
            if fits && logical_fits {
                return Ok(ring);
            }
            ring.checkpoint_wanted = true;
            self.cond.notify_all();
            ring = self.cond.wait(ring).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Assigns the next sequence number and ring position to `r`, encodes it and queues it.
    /// Returns the record's sequence number (a wrap marker before it gets its own).
    fn place(&self, ring: &mut Ring, r: &Record<'_>, nonce: u64) -> u64 {
        let size = r.ring_bytes();
        if ring.head + size > self.capacity {
            let waste = self.capacity - ring.head;
            self.enqueue(ring, &Record::Wrap, waste, nonce);
            assert_eq!(ring.head, 0);
        }
        let seq = ring.next_seq;
        self.enqueue(ring, r, size, nonce);
        seq
    }

    fn enqueue(&self, ring: &mut Ring, r: &Record<'_>, bytes: u64, nonce: u64) {
        let seq = ring.next_seq;
        let mut buf = Vec::with_capacity(r.ring_bytes() as usize);
        r.encode_into(seq, nonce, &mut buf);
        assert_eq!(buf.len() as u64, align_up(buf.len() as u64));
        let pos = ring.head;
        ring.queue.push((pos, buf));
        ring.queued_last = seq;
        let logical = r.is_logical();
        ring.live.push_back(Live {
            seq,
            pos,
            bytes,
            complete: matches!(r, Record::Wrap),
            logical,
        });
        if logical {
            ring.logical_bytes += bytes;
        }
        ring.used_bytes += bytes;
        ring.stats.appended_bytes += bytes;
        assert!(ring.used_bytes <= self.capacity, "ring overfilled");
        ring.head = (pos + bytes) % self.capacity;
        ring.next_seq += 1;
    }

    fn wait_durable(&self, last: u64) -> Result<(), JournalError> {
        let mut ring = lock(&self.ring);
        loop {
            if ring.durable_next > last {
                return Ok(());
            }
            self.failed(&ring)?;
            if ring.committing {
                ring = self.cond.wait(ring).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            ring.committing = true;
            let batch = std::mem::take(&mut ring.queue);
            let upto = ring.queued_last;
            drop(ring);
            let written = self.write_batch(&batch);
            ring = lock(&self.ring);
            ring.committing = false;
            match written {
                Ok(()) => {
                    ring.durable_next = ring.durable_next.max(upto + 1);
                    ring.stats.commits += 1;
                }
                Err(e) => ring.failed = Some(e.to_string()),
            }
            let half_full = ring.used_bytes * 2 > self.capacity;
            ring.checkpoint_wanted |= half_full;
            self.cond.notify_all();
        }
    }

    /// Writes queued records (contiguous runs as one write each) and flushes once.
    fn write_batch(&self, batch: &[(u64, Vec<u8>)]) -> Result<(), JournalError> {
        let io = |what, r: io::Result<()>| {
            r.map_err(|source| JournalError::Io {
                name: self.name.clone(),
                what,
                source,
            })
        };
        let mut i = 0;
        while i < batch.len() {
            let start = batch[i].0;
            let mut end = i + 1;
            while end < batch.len()
                && batch[end].0 == batch[end - 1].0 + batch[end - 1].1.len() as u64
            {
                end += 1;
            }
            if end - i == 1 {
                io(
                    "write records",
                    self.member.write_at(&batch[i].1, RING_OFFSET + start),
                )?;
            } else {
                let joined: Vec<u8> = batch[i..end]
                    .iter()
                    .flat_map(|(_, b)| b.iter().copied())
                    .collect();
                io(
                    "write records",
                    self.member.write_at(&joined, RING_OFFSET + start),
                )?;
            }
            i = end;
        }
        io("flush records", self.member.flush())
    }

    fn write_checkpoint(&self, tail: u64, tail_seq: u64) -> Result<(), JournalError> {
        let mut sb = lock(&self.sb);
        let mut next = sb.clone();
        next.generation += 1;
        next.tail_offset = tail;
        next.tail_seq = tail_seq;
        write_superblock(self.member.as_ref(), &next)?;
        *sb = next;
        Ok(())
    }
}

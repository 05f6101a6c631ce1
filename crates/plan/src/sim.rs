//! One case on one configuration in virtual time: bench's closed loop of `qd × clients` slots,
//! each array request mapped through `layout::Geometry` to member requests in phases (reads,
//! journal, writes, flushes), fed to one `diskmodel::Drive` per member (and one for the
//! journal), in the order of a single global clock.
//!
//! Modelled: every level's mapping (linear, 0, 1, 10, 5, 6), RAID 5/6 writes as full-stripe,
//! read-modify-write or reconstruct-write (whichever reads fewer bytes, ties to reconstruct, as
//! the engine chooses), mirrors writing every copy and reading the copy with the fewest bytes
//! outstanding, degraded reads and writes with one member missing, a member's adjacent ranges
//! merged into one request, flushes on every member after a `database` write; the read cache
//! (its blocks, the misses that cache, `on` and `adaptive` read-ahead with their window and
//! workers, writes invalidating); the write-through journal (each stripe write logged and
//! flushed before it is written in place) and the write-back journal (a write acknowledged once
//! logged and flushed, applied by at most 8 appliers, clients held when the buffer is full).
//! The write-intent bitmap's update rounds (the first write to a region waits for the round
//! carrying its bit; regions needed while a round is written go together in the next).
//! Not modelled: the journal's group commit (each record is its own journal write and flush:
//! pessimistic at depth), the write-back buffer's merging of overlapping and adjacent writes,
//! stripe gathering across requests and stripe locks (two writes to one stripe overlap), the
//! CPU (parity, copies), and the NBD round trip beyond a fixed overhead per request.

use std::collections::{HashMap, HashSet, VecDeque};

use bench::stats::{Figures, Latencies};
use bench::workload::{Case, Op as BenchOp, Slot, Stream};
use cache::{CacheConfig, ReadAhead};
use diskmodel::{Drive, Nanos, Op, Request, Ticket, NS_PER_SEC};
use layout::Geometry;

use crate::config::{Config, Disks, JournalMode, MemberIo};

/// What every array request costs beyond its member requests: the client's NBD round trip and
/// the server's work, on an idle machine (loopback, a few µs of copies and parity).
pub const REQUEST_OVERHEAD_NS: Nanos = 50_000;
/// What every byte of a request costs the stack (NBD socket copies, the member's copy):
/// `raidkit bench` over four `mem:` members moves 1 MiB reads at a median of 0.16 ms, 4 KiB at
/// 0.028 ms, so ~0.12 ms per MiB.
pub const REQUEST_PS_PER_BYTE: Nanos = 110;
/// A read served from the read cache.
pub const CACHE_HIT_NS: Nanos = 20_000;
/// Write-back appliers (export's `WriteBack`).
pub const APPLIERS: usize = 8;
/// Journal ring modelled (records wrap around it).
pub const JOURNAL_RING_BYTES: u64 = 1 << 30;
/// Most array requests one prediction completes (each keeps its latency in the histogram).
pub const MAX_OPS: u64 = 2_000_000;

type JobId = usize;
/// Member requests of one phase: (drive, request).
type Phase = Vec<(usize, Request)>;

#[derive(Debug)]
enum Done {
    /// A client's operation: its slot, when it was issued, and time it takes beyond its member
    /// requests (a cache hit's copy).
    Client {
        slot: usize,
        start: Nanos,
        extra: Nanos,
    },
    /// A read-ahead fetch of these cache blocks.
    Prefetch { blocks: Vec<u64> },
    /// A write-back apply of this many buffered bytes.
    Apply { bytes: u64 },
    /// A client read's fill of these blocks into the cache.
    Fill { blocks: Vec<u64> },
    /// A write-intent bitmap update round: these regions' bits written and flushed on every
    /// member together.
    Bitmap { regions: Vec<u64> },
}

#[derive(Debug)]
struct Job {
    /// Phases still to run, the next one last.
    phases: Vec<Vec<(usize, Request)>>,
    /// Lanes of the running phase not yet complete.
    running: usize,
    /// The running phase's lanes: each runs its requests one after another, the lanes at once.
    lanes: Vec<VecDeque<(usize, Request)>>,
    /// Jobs this one waits for before its first phase.
    deps: usize,
    waiters: Vec<JobId>,
    done: Done,
}

/// Per-case result.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub figures: Figures,
    pub ops: u64,
    /// Virtual time of the run, seconds.
    pub seconds: f64,
    /// Member requests issued (reads, writes, flushes) over all drives, the bitmap's included.
    pub member_requests: u64,
    /// Write-intent bitmap update rounds (each the touched blocks written and flushed on every
    /// member).
    pub bitmap_updates: u64,
    /// Write-intent bitmap regions set (each by one of the rounds).
    pub bitmap_regions: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Present,
    Fetching(JobId),
}

/// The read cache in first order: a FIFO of whole blocks (2Q's first queue, which is what a
/// read-once workload lives in), the blocks being fetched, and the stream detectors.
struct CacheModel {
    config: CacheConfig,
    capacity: usize,
    blocks: HashMap<u64, Block>,
    fifo: VecDeque<u64>,
    /// Ends of recent reads (a read starting at one continues a stream), least recent first.
    streams: VecDeque<u64>,
    prefetches: usize,
}

impl CacheModel {
    fn new(config: CacheConfig) -> CacheModel {
        let capacity = (config.size_bytes / config.block_bytes.max(1)) as usize;
        CacheModel {
            config,
            capacity,
            blocks: HashMap::new(),
            fifo: VecDeque::new(),
            streams: VecDeque::new(),
            prefetches: 0,
        }
    }

    fn enabled(&self) -> bool {
        self.capacity > 0
    }

    fn block_range(&self, offset: u64, len: u64) -> std::ops::Range<u64> {
        let b = self.config.block_bytes;
        offset / b..(offset + len).div_ceil(b)
    }

    fn insert(&mut self, block: u64) {
        if self.blocks.insert(block, Block::Present).is_none() {
            self.fifo.push_back(block);
        }
        while self.fifo.len() > self.capacity {
            if let Some(old) = self.fifo.pop_front() {
                if self.blocks.get(&old) == Some(&Block::Present) {
                    self.blocks.remove(&old);
                }
            }
        }
    }

    /// A fetch finished: its blocks that still wait for it are cached.
    fn fetched(&mut self, job: JobId, blocks: Vec<u64>) {
        for b in blocks {
            if self.blocks.get(&b) == Some(&Block::Fetching(job)) {
                self.blocks.remove(&b);
                self.insert(b);
            }
        }
    }

    fn invalidate(&mut self, offset: u64, len: u64) {
        // A fetch in flight over the range is not cached when it returns (the cache's
        // generation check).
        for b in self.block_range(offset, len) {
            self.blocks.remove(&b);
        }
    }

    /// Whether the read continues a stream; remembers its end.
    fn stream(&mut self, offset: u64, len: u64) -> bool {
        let hit = self.streams.iter().position(|&e| e == offset);
        if let Some(i) = hit {
            self.streams.remove(i);
        }
        self.streams.push_back(offset + len);
        while self.streams.len() > self.config.streams {
            self.streams.pop_front();
        }
        hit.is_some()
    }
}

struct Sim<'a> {
    geometry: Geometry,
    config: &'a Config,
    missing: Option<usize>,
    drives: Vec<Drive>,
    /// Bytes outstanding per drive (mirror reads go to the least loaded copy).
    outstanding: Vec<u64>,
    journal_drive: Option<usize>,
    journal_at: u64,
    jobs: Vec<Option<Job>>,
    free_jobs: Vec<JobId>,
    /// Member requests in flight: drive, ticket, job, lane, bytes.
    inflight: Vec<(usize, Ticket, JobId, usize, u64)>,
    member_io: MemberIo,
    /// The members are disks: the engine deals a batch's operations of members whose average
    /// operation takes 0.5 ms or more (`Speed::wants_concurrency`) into threads at once.
    slow_members: bool,
    cache: CacheModel,
    /// Write-back: applies waiting for an applier, appliers busy, bytes buffered, clients held.
    apply_queue: VecDeque<JobId>,
    appliers_busy: usize,
    buffered: u64,
    held: VecDeque<JobId>,
    member_requests: u64,
    bitmap: Option<BitmapModel>,
}

/// The write-intent bitmap ("Write-intent bitmap" in DESIGN), on by default for the redundant
/// levels: the first write to a clean region waits while its bit is written and flushed on
/// every member (`Member::write_durable_at`: write and flush, the members at once). Group
/// commit: with no round being written, a round starts at once; else the region joins the
/// next round, which starts when the running one ends and writes every block its regions
/// touch. Later writes to a region wait for the round carrying it. The lazy clear (after 5 s
/// without writes to a region) is not modelled: a run keeps its bits.
struct BitmapModel {
    region_bytes: u64,
    set: HashSet<u64>,
    /// Regions whose round is running or queued: the job writing it.
    updating: HashMap<u64, JobId>,
    /// The round being written.
    running: Option<JobId>,
    /// The round gathering regions until `running` ends (it waits for it).
    next: Option<JobId>,
    /// Rounds started.
    rounds: u64,
}

/// `BITMAP_REGION_DEFAULT`: md's 64 MiB, doubled until at most 2^20 regions.
const BITMAP_REGION_BYTES: u64 = 64 << 20;
const BITMAP_MAX_REGIONS: u64 = 1 << 20;
/// Where the bitmap lies on each member (FORMAT.md: the first metadata area, at 8192).
const BITMAP_OFFSET: u64 = 8192;

impl BitmapModel {
    fn new(array_bytes: u64) -> BitmapModel {
        let mut region_bytes = BITMAP_REGION_BYTES;
        while array_bytes.div_ceil(region_bytes) > BITMAP_MAX_REGIONS {
            region_bytes *= 2;
        }
        BitmapModel {
            region_bytes,
            set: HashSet::new(),
            updating: HashMap::new(),
            running: None,
            next: None,
            rounds: 0,
        }
    }
}

/// Regions one bitmap block describes (`ondisk::bitmap::BITS_PER_BLOCK`).
const BITMAP_BITS_PER_BLOCK: u64 = 4080 * 8;

impl<'a> Sim<'a> {
    /// Marks `[offset, offset + len)` in the write-intent bitmap before a write: returns the
    /// bitmap rounds the write must wait for (started here, running, or the next one).
    fn mark(&mut self, offset: u64, len: u64, started: &mut Vec<JobId>) -> Vec<JobId> {
        let Some(bm) = &self.bitmap else {
            return Vec::new();
        };
        let rb = bm.region_bytes;
        let mut waits = Vec::new();
        let mut fresh = Vec::new();
        for region in offset / rb..(offset + len).div_ceil(rb) {
            if let Some(&id) = bm.updating.get(&region) {
                if !waits.contains(&id) {
                    waits.push(id);
                }
            } else if !bm.set.contains(&region) {
                fresh.push(region);
            }
        }
        if fresh.is_empty() {
            return waits;
        }
        let id = match (bm.running, bm.next) {
            (_, Some(next)) => next,
            (None, None) => {
                let phases = self.bitmap_round(&fresh);
                let id = self.new_job(
                    phases,
                    Done::Bitmap {
                        regions: Vec::new(),
                    },
                );
                let bm = self.bitmap.as_mut().expect("bitmap");
                bm.running = Some(id);
                bm.rounds += 1;
                started.push(id);
                id
            }
            (Some(running), None) => {
                // Its phases are set when it starts (the blocks of all its regions).
                let id = self.new_job(
                    Vec::new(),
                    Done::Bitmap {
                        regions: Vec::new(),
                    },
                );
                self.job(id).deps = 1;
                self.job(running).waiters.push(id);
                self.bitmap.as_mut().expect("bitmap").next = Some(id);
                id
            }
        };
        let bm = self.bitmap.as_mut().expect("bitmap");
        for &region in &fresh {
            bm.updating.insert(region, id);
        }
        if let Done::Bitmap { regions } = &mut self.job(id).done {
            regions.extend(fresh);
        }
        if !waits.contains(&id) {
            waits.push(id);
        }
        waits
    }

    /// A round's phases: each touched block written on every present member, then a flush of
    /// every member.
    fn bitmap_round(&self, regions: &[u64]) -> Vec<Phase> {
        let mut blocks: Vec<u64> = regions.iter().map(|r| r / BITMAP_BITS_PER_BLOCK).collect();
        blocks.sort_unstable();
        blocks.dedup();
        let present: Vec<usize> = (0..self.geometry.member_count())
            .filter_map(|r| self.role_drive(r))
            .collect();
        let write = present
            .iter()
            .flat_map(|&d| {
                blocks.iter().map(move |&b| {
                    let req = Request {
                        op: Op::Write,
                        offset: BITMAP_OFFSET + b * 4096,
                        len: 4096,
                    };
                    (d, req)
                })
            })
            .collect();
        vec![write, self.flush_all()]
    }

    /// A round ended: its regions are set; the next round (if any) becomes the running one,
    /// with the blocks of every region it gathered.
    fn bitmap_round_done(&mut self, regions: Vec<u64>) {
        let bm = self.bitmap.as_mut().expect("a bitmap round has a bitmap");
        for r in regions {
            bm.updating.remove(&r);
            bm.set.insert(r);
        }
        bm.running = bm.next.take();
        let Some(next) = bm.running else { return };
        bm.rounds += 1;
        let gathered = match &self.jobs[next].as_ref().expect("the next round").done {
            Done::Bitmap { regions } => regions.clone(),
            _ => unreachable!("the next round is a bitmap job"),
        };
        let mut phases = self.bitmap_round(&gathered);
        phases.retain(|p| !p.is_empty());
        phases.reverse();
        self.job(next).phases = phases;
    }

    /// Makes `id` wait for `deps` (bitmap updates); true when it waits for none.
    fn wait_for(&mut self, id: JobId, deps: &[JobId]) -> bool {
        for &d in deps {
            self.job(id).deps += 1;
            self.job(d).waiters.push(id);
        }
        deps.is_empty()
    }

    fn new_job(&mut self, phases: Vec<Vec<(usize, Request)>>, done: Done) -> JobId {
        let mut phases = phases;
        phases.retain(|p| !p.is_empty());
        phases.reverse();
        let job = Job {
            phases,
            running: 0,
            lanes: Vec::new(),
            deps: 0,
            waiters: Vec::new(),
            done,
        };
        if let Some(id) = self.free_jobs.pop() {
            self.jobs[id] = Some(job);
            id
        } else {
            self.jobs.push(Some(job));
            self.jobs.len() - 1
        }
    }

    fn job(&mut self, id: JobId) -> &mut Job {
        self.jobs[id].as_mut().expect("a live job")
    }

    /// Starts `id`'s next phase at `t`; returns the finished job's `Done` when none is left.
    fn start_phase(&mut self, id: JobId, t: Nanos, finished: &mut Vec<(JobId, Nanos)>) {
        let Some(phase) = self.job(id).phases.pop() else {
            finished.push((id, t));
            return;
        };
        let lanes = lanes(merge(phase), self.member_io, self.slow_members);
        let job = self.job(id);
        job.running = lanes.len();
        job.lanes = lanes;
        for lane in 0..self.job(id).lanes.len() {
            self.next_in_lane(id, lane, t);
        }
    }

    /// Submits the next request of `lane` of `id`'s phase at `t`; false when the lane is done.
    fn next_in_lane(&mut self, id: JobId, lane: usize, t: Nanos) -> bool {
        let Some((d, req)) = self.job(id).lanes[lane].pop_front() else {
            return false;
        };
        let ticket = self.drives[d]
            .submit(t, req)
            .expect("the closed loop stays below the drive's bound");
        self.outstanding[d] += req.len;
        self.member_requests += 1;
        self.inflight.push((d, ticket, id, lane, req.len));
        true
    }

    fn role_drive(&self, role: usize) -> Option<usize> {
        (Some(role) != self.missing).then_some(role)
    }

    /// The member reads of array range `[offset, offset + len)`.
    fn reads(&self, offset: u64, len: u64) -> Vec<(usize, Request)> {
        let g = &self.geometry;
        let mut out = Vec::new();
        let rd = |d: usize, off: u64, len: u64| {
            (
                d,
                Request {
                    op: Op::Read,
                    offset: off,
                    len,
                },
            )
        };
        if !g.has_parity() {
            for piece in g.pieces(offset, len) {
                let copy = piece
                    .copies
                    .iter()
                    .filter(|c| self.role_drive(c.role).is_some())
                    .min_by_key(|c| (self.outstanding[c.role], (c.role as u64 + piece.chunk) % 2))
                    .expect("a configuration plan predicts keeps a copy of every piece");
                out.push(rd(copy.role, copy.member_offset, piece.len));
            }
            return out;
        }
        for span in g.stripes(offset, len) {
            for c in &span.chunks {
                let at = span.member_offset + c.start;
                if self.role_drive(c.role).is_some() {
                    out.push(rd(c.role, at, c.len));
                    continue;
                }
                // Reconstructed from every other data chunk and P over the same range.
                for i in 0..g.member_count() - g.parity_count() {
                    let role = g.data_role(span.stripe, i);
                    if role != c.role {
                        out.push(rd(role, at, c.len));
                    }
                }
                out.push(rd(g.p_role(span.stripe), at, c.len));
            }
        }
        out
    }

    /// The member reads and writes of an array write: (reads, writes).
    fn writes(&self, offset: u64, len: u64) -> (Phase, Phase) {
        let g = &self.geometry;
        let mut reads = Vec::new();
        let mut writes = Vec::new();
        let req = |op, off, len| Request {
            op,
            offset: off,
            len,
        };
        if !g.has_parity() {
            for piece in g.pieces(offset, len) {
                for c in &piece.copies {
                    if self.role_drive(c.role).is_some() {
                        writes.push((c.role, req(Op::Write, c.member_offset, piece.len)));
                    }
                }
            }
            return (reads, writes);
        }
        let data = g.member_count() - g.parity_count();
        for span in g.stripes(offset, len) {
            let (lo, hi) = span.parity_range();
            let width = hi - lo;
            let row = span.member_offset;
            let mut parity: Vec<usize> = vec![g.p_role(span.stripe)];
            parity.extend(g.q_role(span.stripe));
            let touched: HashSet<usize> = span.chunks.iter().map(|c| c.data_index).collect();
            for c in &span.chunks {
                if self.role_drive(c.role).is_some() {
                    writes.push((c.role, req(Op::Write, row + c.start, c.len)));
                }
            }
            for &p in &parity {
                if self.role_drive(p).is_some() {
                    writes.push((p, req(Op::Write, row + lo, width)));
                }
            }
            if span.is_full(g) {
                continue;
            }
            let missing_parity = parity.iter().any(|&p| Some(p) == self.missing);
            if missing_parity && self.missing.is_some() && g.parity_count() == 1 {
                // P is gone: the data is written alone.
                continue;
            }
            let missing_data = self
                .missing
                .and_then(|m| (0..data).find(|&i| g.data_role(span.stripe, i) == m));
            let rmw_bytes: u64 =
                span.chunks.iter().map(|c| c.len).sum::<u64>() + g.parity_count() as u64 * width;
            let rcw_bytes: u64 = (0..data)
                .map(|i| {
                    if touched.contains(&i) {
                        let c = span.chunks.iter().find(|c| c.data_index == i).unwrap();
                        width - c.len
                    } else {
                        width
                    }
                })
                .sum();
            // Degraded: a missing touched chunk needs reconstruct-write; a missing untouched one
            // read-modify-write; healthy: the fewer bytes (ties to reconstruct).
            let rmw = match missing_data {
                Some(i) => !touched.contains(&i),
                None => rmw_bytes < rcw_bytes,
            };
            if rmw {
                for c in &span.chunks {
                    if self.role_drive(c.role).is_some() {
                        reads.push((c.role, req(Op::Read, row + c.start, c.len)));
                    }
                }
                for &p in &parity {
                    if self.role_drive(p).is_some() {
                        reads.push((p, req(Op::Read, row + lo, width)));
                    }
                }
            } else {
                for i in 0..data {
                    let role = g.data_role(span.stripe, i);
                    if self.role_drive(role).is_none() {
                        continue;
                    }
                    match span.chunks.iter().find(|c| c.data_index == i) {
                        None => reads.push((role, req(Op::Read, row + lo, width))),
                        Some(c) => {
                            if c.start > lo {
                                reads.push((role, req(Op::Read, row + lo, c.start - lo)));
                            }
                            let end = c.start + c.len;
                            if end < hi {
                                reads.push((role, req(Op::Read, row + end, hi - end)));
                            }
                        }
                    }
                }
            }
        }
        (reads, writes)
    }

    fn journal_append(&mut self, bytes: u64) -> Vec<Vec<(usize, Request)>> {
        let Some(d) = self.journal_drive else {
            return Vec::new();
        };
        let bytes = bytes.div_ceil(4096) * 4096;
        let ring = self.drives[d].size().min(JOURNAL_RING_BYTES);
        if self.journal_at + bytes > ring {
            self.journal_at = 0;
        }
        let at = self.journal_at;
        self.journal_at += bytes;
        vec![
            vec![(
                d,
                Request {
                    op: Op::Write,
                    offset: at,
                    len: bytes,
                },
            )],
            vec![(
                d,
                Request {
                    op: Op::Flush,
                    offset: 0,
                    len: 0,
                },
            )],
        ]
    }

    fn flush_all(&self) -> Vec<(usize, Request)> {
        (0..self.geometry.member_count())
            .filter_map(|r| self.role_drive(r))
            .map(|d| {
                (
                    d,
                    Request {
                        op: Op::Flush,
                        offset: 0,
                        len: 0,
                    },
                )
            })
            .collect()
    }

    /// Makes the job for one client operation (started by the caller unless held or waiting).
    fn client_op(&mut self, op: BenchOp, slot: usize, t: Nanos, started: &mut Vec<JobId>) {
        let done = Done::Client {
            slot,
            start: t,
            extra: 0,
        };
        match op {
            BenchOp::Read { offset, len } => self.client_read(offset, len, done, t, started),
            BenchOp::Write { offset, len, flush } => {
                self.cache.invalidate(offset, len);
                let (reads, writes) = self.writes(offset, len);
                let logged: u64 = writes.iter().map(|(_, r)| r.len).sum();
                match self.config.journal {
                    JournalMode::WriteBack => {
                        let phases = self.journal_append(len);
                        let id = self.new_job(phases, done);
                        // The apply, run once the client's record is durable.
                        // RAID 5/6 applies log their parity (StripeApply); the data was logged
                        // once, in the client's record.
                        let parity = if self.geometry.has_parity() {
                            logged.saturating_sub(len)
                        } else {
                            0
                        };
                        let mut apply = vec![reads];
                        apply.extend(self.journal_append(parity));
                        apply.push(writes);
                        let apply = self.new_job(apply, Done::Apply { bytes: len });
                        self.job(apply).deps = 1;
                        self.job(id).waiters.push(apply);
                        let marks = self.mark(offset, len, started);
                        self.wait_for(apply, &marks);
                        if self.buffered + len > export_buffer_bytes() {
                            self.held.push_back(id);
                        } else {
                            self.buffered += len;
                            started.push(id);
                        }
                    }
                    JournalMode::WriteThrough if self.geometry.has_parity() => {
                        let mut phases = vec![reads];
                        phases.extend(self.journal_append(logged));
                        phases.push(writes);
                        let marks = self.mark(offset, len, started);
                        let id = self.new_job(phases, done);
                        if self.wait_for(id, &marks) {
                            started.push(id);
                        }
                    }
                    _ => {
                        let mut phases = vec![reads, writes];
                        if flush {
                            phases.push(self.flush_all());
                        }
                        let marks = self.mark(offset, len, started);
                        let id = self.new_job(phases, done);
                        if self.wait_for(id, &marks) {
                            started.push(id);
                        }
                    }
                }
            }
        }
    }

    fn client_read(
        &mut self,
        offset: u64,
        len: u64,
        done: Done,
        t: Nanos,
        started: &mut Vec<JobId>,
    ) {
        let _ = t;
        if !self.cache.enabled() {
            let phases = vec![self.reads(offset, len)];
            started.push(self.new_job(phases, done));
            return;
        }
        let cfg = self.cache.config.clone();
        let stream = self.cache.stream(offset, len);
        let bypass = cfg.read_ahead == ReadAhead::Adaptive && len >= cfg.window_bytes;
        let fill_whole = cfg.read_ahead == ReadAhead::On
            || (cfg.read_ahead == ReadAhead::Adaptive && stream && !bypass);
        let range = self.cache.block_range(offset, len);
        let mut waits = Vec::new();
        let mut missing = Vec::new();
        if !bypass {
            for b in range.clone() {
                match self.cache.blocks.get(&b) {
                    Some(Block::Present) => {}
                    Some(Block::Fetching(j)) => waits.push(*j),
                    None => missing.push(b),
                }
            }
        }
        let id = if bypass {
            let phases = vec![self.reads(offset, len)];
            self.new_job(phases, done)
        } else if missing.is_empty() {
            // Served from the cache (after the fetches it waits for).
            let done = match done {
                Done::Client { slot, start, .. } => Done::Client {
                    slot,
                    start,
                    extra: CACHE_HIT_NS,
                },
                other => other,
            };
            self.new_job(Vec::new(), done)
        } else if fill_whole {
            // Whole missing blocks, each run of them one request below; cached.
            let b = cfg.block_bytes;
            let size = self.geometry.size_bytes();
            let mut reads = Vec::new();
            for run in runs(&missing) {
                let start = run.start * b;
                let end = (run.end * b).min(size);
                reads.extend(self.reads(start, end - start));
            }
            let id = self.new_job(
                vec![reads],
                Done::Fill {
                    blocks: missing.clone(),
                },
            );
            for &blk in &missing {
                self.cache.blocks.insert(blk, Block::Fetching(id));
            }
            started.push(id);
            let client = self.new_job(Vec::new(), done);
            self.job(client).deps = 1;
            self.job(id).waiters.push(client);
            client
        } else {
            // The exact bytes; only the blocks the read covers whole are cached.
            let phases = vec![self.reads(offset, len)];
            let b = cfg.block_bytes;
            let covered: Vec<u64> = (offset.div_ceil(b)..(offset + len) / b).collect();
            for blk in covered {
                self.cache.insert(blk);
            }
            self.new_job(phases, done)
        };
        let mut deps = 0;
        for w in waits {
            if self.jobs[w].is_some() {
                self.job(w).waiters.push(id);
                deps += 1;
            }
        }
        self.job(id).deps += deps;
        if self.job(id).deps == 0 {
            started.push(id);
        }
        // Read-ahead: the window after the read (on: always; adaptive: for a stream).
        let ahead = cfg.read_ahead == ReadAhead::On
            || (cfg.read_ahead == ReadAhead::Adaptive && stream && !bypass);
        if ahead && self.cache.prefetches < cfg.prefetch_workers + cfg.prefetch_queue {
            let b = cfg.block_bytes;
            let size_blocks = self.geometry.size_bytes() / b;
            let first = range.end;
            let last = (first + cfg.window_bytes / b).min(size_blocks);
            let want: Vec<u64> = (first..last)
                .filter(|blk| !self.cache.blocks.contains_key(blk))
                .collect();
            if !want.is_empty() {
                let mut reads = Vec::new();
                for run in runs(&want) {
                    reads.extend(self.reads(run.start * b, (run.end - run.start) * b));
                }
                let p = self.new_job(
                    vec![reads],
                    Done::Prefetch {
                        blocks: want.clone(),
                    },
                );
                for &blk in &want {
                    self.cache.blocks.insert(blk, Block::Fetching(p));
                }
                self.cache.prefetches += 1;
                started.push(p);
            }
        }
    }
}

/// The write-back buffer's bytes (export's default).
fn export_buffer_bytes() -> u64 {
    64 << 20
}

/// Consecutive runs of sorted block numbers.
fn runs(blocks: &[u64]) -> Vec<std::ops::Range<u64>> {
    let mut out: Vec<std::ops::Range<u64>> = Vec::new();
    for &b in blocks {
        match out.last_mut() {
            Some(r) if r.end == b => r.end += 1,
            _ => out.push(b..b + 1),
        }
    }
    out
}

/// How the engine submits one batch (`engine::io`'s `Runner::run`): with the ring every
/// member's share goes out at once; without it, shares of `FANOUT_MIN_BYTES_DEFAULT` or more (or a
/// flush) run on their own threads when there are at least two of them, and the rest one after
/// another on the request's thread; disk members (slow: 0.5 ms or more per operation) have
/// their operations dealt into threads at once, as with the ring.
fn lanes(phase: Phase, io: MemberIo, slow: bool) -> Vec<VecDeque<(usize, Request)>> {
    let mut groups: Vec<VecDeque<(usize, Request)>> = Vec::new();
    for (d, r) in phase {
        match groups
            .iter_mut()
            .find(|g| g.front().is_some_and(|(gd, _)| *gd == d))
        {
            Some(g) => g.push_back((d, r)),
            None => groups.push(VecDeque::from([(d, r)])),
        }
    }
    if io == MemberIo::Ring || slow {
        // One lane per request: the ring submits them all; a drive orders its own.
        return groups
            .into_iter()
            .flatten()
            .map(|x| VecDeque::from([x]))
            .collect();
    }
    let cost = |g: &VecDeque<(usize, Request)>| {
        g.iter().fold(0u64, |c, (_, r)| {
            c.saturating_add(if r.op == Op::Flush { u64::MAX } else { r.len })
        })
    };
    let (big, small): (Vec<_>, Vec<_>) = groups
        .into_iter()
        .partition(|g| cost(g) >= FANOUT_MIN_BYTES);
    if big.len() < 2 {
        let one: VecDeque<_> = big.into_iter().chain(small).flatten().collect();
        return vec![one];
    }
    let mut out = big;
    let here: VecDeque<_> = small.into_iter().flatten().collect();
    if !here.is_empty() {
        out.push(here);
    }
    out
}

/// The engine's fan-out threshold (`engine::FANOUT_MIN_BYTES_DEFAULT`).
pub const FANOUT_MIN_BYTES: u64 = 1 << 20;

/// One request per run of adjacent ranges of a drive (the engine's WriteV / ReadV).
fn merge(mut phase: Vec<(usize, Request)>) -> Vec<(usize, Request)> {
    phase.sort_by_key(|(d, r)| (*d, r.op == Op::Flush, r.offset));
    let mut out: Vec<(usize, Request)> = Vec::with_capacity(phase.len());
    for (d, r) in phase {
        if let Some((pd, p)) = out.last_mut() {
            if *pd == d && p.op == r.op && r.op != Op::Flush && p.offset + p.len == r.offset {
                p.len += r.len;
                continue;
            }
            if *pd == d && p.op == r.op && r.op == Op::Flush {
                continue;
            }
        }
        out.push((d, r));
    }
    out
}

/// Predicts `case` (already `on_target` of the array's size) on `config` over `disks`, with
/// member `missing` absent, for the case's runtime (or operation count) of virtual time.
/// `journal` is the journal device's class when the configuration has one.
pub fn predict(
    config: &Config,
    disks: &Disks,
    journal: Option<&Disks>,
    cache: CacheConfig,
    case: &Case,
    missing: Option<usize>,
    seed: u64,
) -> Result<Prediction, String> {
    let geometry = Geometry::new(
        config.level,
        config.chunk,
        &vec![disks.size; config.members],
    )
    .map_err(|e| e.to_string())?;
    if let Some(m) = missing {
        let present: Vec<bool> = (0..config.members).map(|r| r != m).collect();
        if !geometry.survives(&present) {
            return Err(format!(
                "{} without member {m} has lost data: nothing to predict",
                config.label()
            ));
        }
    }
    assert_eq!(
        case.working_set,
        geometry.size_bytes().min(case.working_set)
    );
    let model = disks.model();
    let mut drives: Vec<Drive> = (0..config.members)
        .map(|_| Drive::new(&model, &disks.options, disks.size))
        .collect();
    let journal_drive = match (config.journal, journal) {
        (JournalMode::None, _) => None,
        (_, Some(j)) => {
            drives.push(Drive::new(&j.model(), &j.options, j.size));
            Some(drives.len() - 1)
        }
        (_, None) => return Err("a configuration with a journal needs a journal device".into()),
    };
    let outstanding = vec![0; drives.len()];
    let mut cache_config = cache;
    cache_config.read_ahead = config.read_ahead;
    let mut sim = Sim {
        geometry,
        config,
        missing,
        drives,
        outstanding,
        journal_drive,
        journal_at: 0,
        jobs: Vec::new(),
        free_jobs: Vec::new(),
        inflight: Vec::new(),
        member_io: disks.member_io,
        slow_members: matches!(model, diskmodel::Model::Hdd(_)),
        cache: CacheModel::new(cache_config),
        apply_queue: VecDeque::new(),
        appliers_busy: 0,
        buffered: 0,
        held: VecDeque::new(),
        member_requests: 0,
        bitmap: None,
    };
    if config.level.has_redundancy() {
        sim.bitmap = Some(BitmapModel::new(sim.geometry.size_bytes()));
    }

    let runtime_ns = case.limit.runtime.as_nanos().min(u128::from(u64::MAX)) as u64;
    let op_limit = case.limit.ops.unwrap_or(MAX_OPS).min(MAX_OPS);
    let streams: Vec<Stream> = (0..case.clients).map(|_| Stream::default()).collect();
    let mut slots: Vec<(Slot, usize)> = Vec::new();
    for c in 0..case.clients {
        for s in 0..case.queue_depth {
            slots.push((Slot::new(case, seed, c, s), c as usize));
        }
    }
    let mut latencies = Latencies::default();
    let mut ops = 0u64;
    let mut bytes = 0u64;
    let mut issued = 0u64;
    let mut clients_in_flight = 0usize;
    let mut last_done: Nanos = 0;
    // Slots whose next operation is due at a time (after the per-request overhead).
    let mut due: Vec<(Nanos, usize)> = (0..slots.len()).map(|s| (0, s)).collect();
    let mut finished: Vec<(JobId, Nanos)> = Vec::new();
    let mut started: Vec<JobId> = Vec::new();
    let mut t: Nanos = 0;

    loop {
        // Issue every slot due now.
        due.sort_unstable_by_key(|&(at, s)| std::cmp::Reverse((at, s)));
        while let Some(&(at, s)) = due.last() {
            if at > t {
                break;
            }
            due.pop();
            if issued >= op_limit || at >= runtime_ns {
                continue;
            }
            let op = {
                let (slot, client) = &mut slots[s];
                slot.next(case, &streams[*client])
            };
            issued += 1;
            clients_in_flight += 1;
            sim.client_op(op, s, at, &mut started);
        }
        // Start what became ready, and run what finishes at once, until nothing does.
        loop {
            for id in std::mem::take(&mut started) {
                sim.start_phase(id, t, &mut finished);
            }
            if finished.is_empty() {
                break;
            }
            for (id, at) in std::mem::take(&mut finished) {
                let job = sim.jobs[id].take().expect("a finished job is live");
                sim.free_jobs.push(id);
                match job.done {
                    Done::Client { slot, start, extra } => {
                        let end = at
                            + REQUEST_OVERHEAD_NS
                            + case.size * REQUEST_PS_PER_BYTE / 1000
                            + extra;
                        latencies.record(std::time::Duration::from_nanos(end - start));
                        ops += 1;
                        bytes += case.size;
                        clients_in_flight -= 1;
                        last_done = last_done.max(end);
                        due.push((end, slot));
                    }
                    Done::Prefetch { blocks } => {
                        sim.cache.prefetches -= 1;
                        sim.cache.fetched(id, blocks);
                    }
                    Done::Fill { blocks } => sim.cache.fetched(id, blocks),
                    Done::Bitmap { regions } => sim.bitmap_round_done(regions),
                    Done::Apply { bytes } => {
                        sim.appliers_busy -= 1;
                        sim.buffered -= bytes;
                        while let Some(&h) = sim.held.front() {
                            // Every write of a case is the case's size.
                            let len = case.size;
                            if sim.buffered + len > export_buffer_bytes() {
                                break;
                            }
                            sim.held.pop_front();
                            sim.buffered += len;
                            started.push(h);
                        }
                    }
                }
                for w in job.waiters {
                    let wj = sim.job(w);
                    wj.deps -= 1;
                    if wj.deps == 0 {
                        if matches!(wj.done, Done::Apply { .. }) {
                            sim.apply_queue.push_back(w);
                        } else {
                            started.push(w);
                        }
                    }
                }
            }
            while sim.appliers_busy < APPLIERS {
                let Some(a) = sim.apply_queue.pop_front() else {
                    break;
                };
                sim.appliers_busy += 1;
                started.push(a);
            }
        }
        if clients_in_flight == 0
            && (issued >= op_limit || due.iter().all(|&(at, _)| at >= runtime_ns))
        {
            break;
        }
        // The next event: a known completion, a drive's own event, a slot due.
        let mut next: Option<(Nanos, u8, usize)> = None;
        let mut consider = |c: (Nanos, u8, usize)| {
            if next.is_none_or(|n| c < n) {
                next = Some(c);
            }
        };
        for (i, &(d, ticket, ..)) in sim.inflight.iter().enumerate() {
            if let Some(done) = sim.drives[d].completion(ticket) {
                consider((done, 0, i));
            }
        }
        for (d, drive) in sim.drives.iter().enumerate() {
            if let Some(e) = drive.next_event() {
                consider((e, 1, d));
            }
        }
        for &(at, s) in &due {
            if at < runtime_ns && issued < op_limit {
                consider((at, 2, s));
            }
        }
        let Some((at, kind, i)) = next else {
            return Err(format!(
                "{}: the simulation stalled with {clients_in_flight} requests in flight (a bug)",
                config.label()
            ));
        };
        t = t.max(at);
        match kind {
            0 => {
                let (d, ticket, id, lane, len) = sim.inflight.swap_remove(i);
                sim.drives[d].forget(ticket);
                sim.outstanding[d] -= len;
                if !sim.next_in_lane(id, lane, t) {
                    let job = sim.job(id);
                    job.running -= 1;
                    if job.running == 0 {
                        started.push(id);
                    }
                }
            }
            1 => sim.drives[i].advance(t),
            _ => {}
        }
    }
    let seconds = last_done as f64 / NS_PER_SEC as f64;
    let figures = Figures {
        iops: if seconds > 0.0 {
            ops as f64 / seconds
        } else {
            0.0
        },
        mb_s: if seconds > 0.0 {
            bytes as f64 / seconds / 1e6
        } else {
            0.0
        },
        latency: latencies.summary(),
    };
    Ok(Prediction {
        figures,
        ops,
        seconds,
        member_requests: sim.member_requests,
        bitmap_updates: sim.bitmap.as_ref().map_or(0, |b| b.rounds),
        bitmap_regions: sim.bitmap.as_ref().map_or(0, |b| b.set.len() as u64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bench::workload::{kind, Limit, Sweep};
    use std::time::Duration;

    pub(crate) fn disks(spec: &str) -> Disks {
        Disks::parse(spec, |s| {
            let n: u64 = s
                .trim_end_matches('G')
                .parse()
                .map_err(|_| "size".to_string())?;
            Ok(n << 30)
        })
        .unwrap()
    }

    fn config(level: &str, members: usize, ra: ReadAhead, journal: JournalMode) -> Config {
        Config {
            level: level.parse().unwrap(),
            members,
            chunk: 128 << 10,
            read_ahead: ra,
            journal,
        }
    }

    fn case(workload: &str, size: u64, qd: u32, secs: u64, target: u64) -> Case {
        Sweep {
            workloads: vec![kind(workload).unwrap()],
            sizes: vec![size],
            queue_depths: vec![qd],
            clients: vec![1],
            working_set: 0,
            limit: Limit {
                runtime: Duration::from_secs(secs),
                ops: None,
            },
        }
        .cases()
        .unwrap()[0]
            .on_target(target)
            .unwrap()
    }

    fn run(
        c: &Config,
        d: &Disks,
        w: &str,
        size: u64,
        qd: u32,
        missing: Option<usize>,
    ) -> Prediction {
        let g = Geometry::new(c.level, c.chunk, &vec![d.size; c.members]).unwrap();
        let journal = disks("1xssd:4G");
        let case = case(w, size, qd, 20, g.size_bytes());
        let t = std::time::Instant::now();
        let p = predict(
            c,
            d,
            Some(&journal),
            CacheConfig::default(),
            &case,
            missing,
            7,
        )
        .unwrap();
        eprintln!(
            "{} {w} {size} qd{qd} missing {missing:?}: {:.1} IOPS {:.1} MB/s p50 {:.2} p99 {:.2} \
             ({} ops, {} member requests, {:?})",
            c.label(),
            p.figures.iops,
            p.figures.mb_s,
            p.figures.latency.p50_ms,
            p.figures.latency.p99_ms,
            p.ops,
            p.member_requests,
            t.elapsed()
        );
        p
    }

    #[test]
    fn a_striped_array_at_qd1_reads_at_one_disks_random_rate() {
        let d = disks("4xhdd7200:1G");
        let one = diskmodel::workload::run(
            &d.model(),
            &d.options,
            d.size,
            &diskmodel::workload::Workload {
                op: Op::Read,
                size: 4096,
                access: diskmodel::workload::Access::Random,
                queue_depth: 1,
                requests: 2000,
            },
            7,
        );
        let c = config("raid0", 4, ReadAhead::Adaptive, JournalMode::None);
        let p = run(&c, &d, "rand-read", 4096, 1, None);
        // One disk's latency plus the request overhead.
        let expect = 1000.0 / (one.mean_ms() + REQUEST_OVERHEAD_NS as f64 / 1e6);
        assert!(
            (p.figures.iops / expect - 1.0).abs() < 0.1,
            "{} vs {expect}",
            p.figures.iops
        );
        assert_eq!(p.member_requests, p.ops);
        // At QD8 the four disks work at once (and each reorders its share).
        let p8 = run(&c, &d, "rand-read", 4096, 8, None);
        assert!(
            p8.figures.iops > 3.5 * p.figures.iops,
            "{} vs {}",
            p8.figures.iops,
            p.figures.iops
        );
    }

    #[test]
    fn raid5_small_writes_read_modify_write_and_raid10_writes_twice() {
        let d = disks("4xhdd7200:1G");
        let r5 = run(
            &config("raid5", 4, ReadAhead::Adaptive, JournalMode::None),
            &d,
            "rand-write",
            4096,
            8,
            None,
        );
        let r10 = run(
            &config("raid10", 4, ReadAhead::Adaptive, JournalMode::None),
            &d,
            "rand-write",
            4096,
            8,
            None,
        );
        // RAID 5: read data and P, write data and P; RAID 10: two writes. Besides: the
        // bitmap's first write to each 64 MiB region, a write and a flush on each member.
        assert!(r5.bitmap_updates > 0 && r5.bitmap_updates <= 48, "{r5:?}");
        assert!(
            r10.bitmap_updates > 0 && r10.bitmap_updates <= 32,
            "{r10:?}"
        );
        let data = |p: &Prediction| p.member_requests - 8 * p.bitmap_updates;
        let per5 = data(&r5) as f64 / r5.ops as f64;
        let per10 = data(&r10) as f64 / r10.ops as f64;
        assert!((per5 - 4.0).abs() < 0.05, "{per5}");
        assert!((per10 - 2.0).abs() < 0.05, "{per10}");
        assert!(r10.figures.iops > 1.5 * r5.figures.iops);
        // A full-stripe write reads nothing: 1 MiB aligned writes on RAID 5 of 5 (4 x 256 KiB).
        let c = Config {
            chunk: 256 << 10,
            ..config("raid5", 5, ReadAhead::Adaptive, JournalMode::None)
        };
        let full = run(&c, &disks("5xhdd7200:1G"), "seq-write", 1 << 20, 1, None);
        let full_data = full.member_requests - 10 * full.bitmap_updates;
        assert!((full_data as f64 / full.ops as f64 - 5.0).abs() < 0.05);
    }

    /// Random writes over 2,048 clean 64 MiB regions at QD8: the writers waiting for the
    /// bitmap share update rounds (group commit), so there are far fewer rounds than regions.
    #[test]
    fn writers_waiting_for_the_bitmap_share_update_rounds() {
        let c = config("raid10", 4, ReadAhead::Adaptive, JournalMode::None);
        let p = run(
            &c,
            &disks("4xhdd7200:64G:cache=off"),
            "rand-write",
            4096,
            8,
            None,
        );
        assert!(p.bitmap_regions > 100, "{p:?}");
        assert!(
            p.bitmap_updates * 3 < p.bitmap_regions,
            "{} rounds for {} regions",
            p.bitmap_updates,
            p.bitmap_regions
        );
        // Each round: one block written and one flush on each of the 4 members.
        let data = p.member_requests - 8 * p.bitmap_updates;
        assert!((data as f64 / p.ops as f64 - 2.0).abs() < 0.05, "{p:?}");
    }

    #[test]
    fn sequential_reads_stripe_over_the_members() {
        let d = disks("4xhdd7200:1G");
        let one = run(
            &config("raid0", 2, ReadAhead::Adaptive, JournalMode::None),
            &disks("2xhdd7200:1G"),
            "seq-read",
            1 << 20,
            1,
            None,
        );
        let four = run(
            &config("raid0", 4, ReadAhead::Adaptive, JournalMode::None),
            &d,
            "seq-read",
            1 << 20,
            4,
            None,
        );
        assert!(
            four.figures.mb_s > 1.6 * one.figures.mb_s,
            "{} vs {}",
            four.figures.mb_s,
            one.figures.mb_s
        );
        assert!(four.figures.mb_s < 4.0 * 200.0);
    }

    #[test]
    fn a_degraded_raid5_reads_the_lost_chunks_from_every_other_member() {
        let d = disks("4xhdd7200:1G");
        let c = config("raid5", 4, ReadAhead::Adaptive, JournalMode::None);
        let healthy = run(&c, &d, "rand-read", 4096, 8, None);
        let degraded = run(&c, &d, "rand-read", 4096, 8, Some(0));
        // A quarter of the chunks are on member 0: each read as 3 (2 data + P).
        let per = degraded.member_requests as f64 / degraded.ops as f64;
        assert!((1.3..1.7).contains(&per), "{per}");
        assert!(degraded.figures.iops < healthy.figures.iops);
        // RAID 0 without a member has lost data.
        let c0 = config("raid0", 4, ReadAhead::Adaptive, JournalMode::None);
        let g = Geometry::new(c0.level, c0.chunk, &[d.size; 4]).unwrap();
        let e = predict(
            &c0,
            &d,
            None,
            CacheConfig::default(),
            &case("rand-read", 4096, 1, 1, g.size_bytes()),
            Some(1),
            1,
        )
        .unwrap_err();
        assert!(e.contains("lost data"), "{e}");
    }

    #[test]
    fn read_ahead_serves_small_sequential_reads_and_costs_random_ones() {
        let d = disks("4xhdd7200:1G");
        let off = run(
            &config("raid5", 4, ReadAhead::Off, JournalMode::None),
            &d,
            "seq-read",
            16 << 10,
            1,
            None,
        );
        let adaptive = run(
            &config("raid5", 4, ReadAhead::Adaptive, JournalMode::None),
            &d,
            "seq-read",
            16 << 10,
            1,
            None,
        );
        assert!(
            adaptive.figures.mb_s > 1.5 * off.figures.mb_s,
            "{} vs {}",
            adaptive.figures.mb_s,
            off.figures.mb_s
        );
        let r_off = run(
            &config("raid5", 4, ReadAhead::Off, JournalMode::None),
            &d,
            "rand-read",
            4096,
            4,
            None,
        );
        let r_on = run(
            &config("raid5", 4, ReadAhead::On, JournalMode::None),
            &d,
            "rand-read",
            4096,
            4,
            None,
        );
        assert!(
            r_on.figures.iops < 0.9 * r_off.figures.iops,
            "{} vs {}",
            r_on.figures.iops,
            r_off.figures.iops
        );
    }

    #[test]
    fn a_write_back_journal_on_flash_hides_the_disks_write_latency() {
        let d = disks("4xhdd7200:1G:cache=off");
        let none = run(
            &config("raid5", 4, ReadAhead::Adaptive, JournalMode::None),
            &d,
            "rand-write",
            4096,
            1,
            None,
        );
        let wt = run(
            &config("raid5", 4, ReadAhead::Adaptive, JournalMode::WriteThrough),
            &d,
            "rand-write",
            4096,
            1,
            None,
        );
        let wb = run(
            &config("raid5", 4, ReadAhead::Adaptive, JournalMode::WriteBack),
            &d,
            "rand-write",
            4096,
            1,
            None,
        );
        assert!(wb.figures.latency.p50_ms < none.figures.latency.p50_ms / 5.0);
        assert!(wt.figures.latency.p50_ms > none.figures.latency.p50_ms);
    }
}

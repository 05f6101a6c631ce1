//! The hard disk model.
//!
//! - **Geometry.** The member's bytes are spread over the whole stroke, outer edge first, in
//!   [`ZONES`] zones of equal radial width (zoned bit recording): bytes per track, and so the
//!   transfer rate, fall linearly from `outer_mb_s` to `inner_mb_s` (the rate is proportional to
//!   the radius at a constant bit density, so `inner/outer` is the platter's inner/outer radius
//!   ratio), and each zone holds bytes in proportion to its rate. A byte's radial position `x`
//!   (0 = outer edge, 1 = inner edge) and angle (its place in its track) follow.
//! - **Seek.** Ruemmler & Wilkes' two-piece curve ("An introduction to disk drive modeling",
//!   IEEE Computer 1994): `t = t_track + a * sqrt(u)` for short seeks (the arm accelerating
//!   then braking), linear from the boundary `u0` to `t_full` for long ones (coasting at top
//!   speed), `u` the distance as a fraction of the stroke past one track. `a` is fitted so the
//!   mean over all seek pairs (the weighting datasheets use, triangular in the distance) is
//!   the published average. A write seeks longer by `write_settle` (datasheets give writes
//!   ~0.5 ms more, to settle on the track).
//! - **Rotation.** The platter turns continuously from time 0; after its seek a request waits
//!   until its first byte comes under the head, then transfers at its zone's rate.
//! - **Queue.** Up to `queue_depth` host commands are held by the drive (NCQ/TCQ tags); more
//!   wait in the host's FIFO. The drive picks the next command by [`Order`] (shortest access
//!   time first, as NCQ firmware does), except that a command older than [`MAX_WAIT`] goes
//!   first (no starvation).
//! - **Read-ahead.** After a read the drive keeps reading the following bytes into its buffer
//!   while idle (up to [`READ_AHEAD_BYTES`] ahead of what the host took), so a sequential
//!   reader streams at the media rate instead of losing a revolution per request.
//! - **Write cache.** With the cache on, a write is acknowledged once in the buffer (command
//!   overhead plus the interface transfer) and written later, reordered with the reads: the
//!   candidates are the next cached writes in elevator order (C-SCAN by offset from the head),
//!   so a full cache drains in a sweep, not a seek per write; a cached write older than
//!   [`MAX_WAIT`] makes the next pick a destage; a write over a cached one of the same start
//!   replaces it. A flush returns when every write acknowledged before it is on the media. A write that
//!   finds the cache full waits until destaging makes room; one larger than the whole cache is
//!   written through. With the cache off every write waits for the media.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::request::{Op, Request};
use crate::Nanos;

/// Zones of a modelled disk (real drives have 16–30).
pub const ZONES: usize = 24;
/// Seek distance (fraction of the stroke) where the curve turns from square root to linear
/// (Ruemmler & Wilkes' HP 97560: 383 of 1962 cylinders).
pub const SEEK_BOUNDARY: f64 = 0.2;
/// A command waiting longer than this is served next, whatever the order.
pub const MAX_WAIT: Nanos = 500_000_000;
/// How far the drive reads ahead of the host after a read.
pub const READ_AHEAD_BYTES: u64 = 2 * 1024 * 1024;
/// Destages the reordering looks at per pick (the oldest ones).
const DESTAGE_WINDOW: usize = 32;

/// How the drive picks its next command among those queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// In arrival order.
    Fifo,
    /// Shortest seek first.
    ShortestSeek,
    /// Shortest access time (seek + rotation) first: what NCQ and SCSI drives do.
    ShortestAccess,
}

/// A hard disk's parameters (times in milliseconds, rates in MB/s = 10^6 bytes/s).
#[derive(Debug, Clone, PartialEq)]
pub struct HddParams {
    /// Spindle speed.
    pub rpm: f64,
    /// Average seek (reads, no command overhead), over all seek pairs.
    pub seek_avg_ms: f64,
    /// One-track seek.
    pub seek_track_ms: f64,
    /// Full-stroke seek.
    pub seek_full_ms: f64,
    /// Added to every write's seek (settling on the track).
    pub write_settle_ms: f64,
    /// Tracks per surface (the granularity of a one-track seek).
    pub tracks: u64,
    /// Controller overhead per command.
    pub overhead_ms: f64,
    /// Sustained media rate at the outer edge.
    pub outer_mb_s: f64,
    /// Sustained media rate at the inner edge.
    pub inner_mb_s: f64,
    /// Interface rate (cache hits, cached writes).
    pub interface_mb_s: f64,
    /// Write cache size.
    pub cache_bytes: u64,
}

impl HddParams {
    /// One revolution.
    pub fn revolution_ns(&self) -> f64 {
        60e9 / self.rpm
    }

    /// Average rotational latency (half a revolution), as datasheets give it.
    pub fn avg_rotational_ms(&self) -> f64 {
        self.revolution_ns() / 2e6
    }

    /// The seek curve fitted to these parameters.
    pub fn seek_curve(&self) -> SeekCurve {
        SeekCurve::fit(
            self.seek_track_ms,
            self.seek_avg_ms,
            self.seek_full_ms,
            self.tracks,
        )
    }

    /// Average media rate of a whole-disk sequential read: each zone holds bytes in
    /// proportion to its rate, so each takes the same time and the average is the zones' mean.
    pub fn mean_mb_s(&self) -> f64 {
        (0..ZONES).map(|k| zone_rate(self, k)).sum::<f64>() / ZONES as f64
    }
}

fn zone_rate(p: &HddParams, k: usize) -> f64 {
    p.outer_mb_s + (p.inner_mb_s - p.outer_mb_s) * k as f64 / (ZONES - 1) as f64
}

/// Seek time by distance: Ruemmler & Wilkes' square root then linear, fitted to a datasheet's
/// one-track, average and full-stroke times.
#[derive(Debug, Clone, PartialEq)]
pub struct SeekCurve {
    track_ms: f64,
    full_ms: f64,
    sqrt_coef: f64,
    tracks: u64,
}

impl SeekCurve {
    /// The curve through `track_ms` (one track) and `full_ms` (full stroke) whose mean over all
    /// seek pairs is `avg_ms`. Panics when no such curve exists (`avg_ms` outside what the two
    /// ends allow): the parameters are constants, checked by the tests.
    pub fn fit(track_ms: f64, avg_ms: f64, full_ms: f64, tracks: u64) -> SeekCurve {
        assert!(track_ms > 0.0 && track_ms < avg_ms && avg_ms < full_ms && tracks > 1);
        let mut lo = 0.0;
        let mut hi = (full_ms - track_ms) / SEEK_BOUNDARY.sqrt();
        let curve = |a: f64| SeekCurve {
            track_ms,
            full_ms,
            sqrt_coef: a,
            tracks,
        };
        assert!(
            curve(lo).mean_ms() <= avg_ms && avg_ms <= curve(hi).mean_ms(),
            "no seek curve through {track_ms}/{avg_ms}/{full_ms} ms"
        );
        for _ in 0..60 {
            let mid = (lo + hi) / 2.0;
            if curve(mid).mean_ms() < avg_ms {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        curve((lo + hi) / 2.0)
    }

    /// Seek time over `u`, the distance past one track as a fraction of the rest of the
    /// stroke, in `[0, 1]`.
    fn at(&self, u: f64) -> f64 {
        let knee = self.track_ms + self.sqrt_coef * SEEK_BOUNDARY.sqrt();
        if u <= SEEK_BOUNDARY {
            self.track_ms + self.sqrt_coef * u.sqrt()
        } else {
            knee + (self.full_ms - knee) * (u - SEEK_BOUNDARY) / (1.0 - SEEK_BOUNDARY)
        }
    }

    /// Seek time in ms for a move of `distance` (fraction of the stroke, 0..=1); zero within
    /// one track.
    pub fn time_ms(&self, distance: f64) -> f64 {
        let tracks = distance.abs() * self.tracks as f64;
        if tracks < 1.0 {
            return 0.0;
        }
        self.at(((tracks - 1.0) / (self.tracks - 1) as f64).min(1.0))
    }

    /// Mean seek over all pairs of tracks (distance weighted `2 (1 - u)`), as datasheets
    /// define the average.
    pub fn mean_ms(&self) -> f64 {
        let steps = 4000;
        (0..steps)
            .map(|i| {
                let u = (i as f64 + 0.5) / steps as f64;
                2.0 * (1.0 - u) * self.at(u)
            })
            .sum::<f64>()
            / steps as f64
    }
}

/// One zone of the modelled member.
#[derive(Debug, Clone)]
struct Zone {
    start: u64,
    bytes: u64,
    /// Bytes per nanosecond.
    rate: f64,
    track_bytes: f64,
    x0: f64,
}

/// Where the member's bytes lie on the platter.
#[derive(Debug, Clone)]
pub struct Geometry {
    zones: Vec<Zone>,
    size: u64,
}

impl Geometry {
    /// The geometry of a member of `size` bytes modelled as a whole disk.
    pub fn new(p: &HddParams, size: u64) -> Geometry {
        assert!(
            size >= ZONES as u64 * 4096,
            "a modelled disk of {size} bytes is too small"
        );
        let rates: Vec<f64> = (0..ZONES).map(|k| zone_rate(p, k)).collect();
        let total: f64 = rates.iter().sum();
        let mut start = 0;
        let zones = rates
            .iter()
            .enumerate()
            .map(|(k, &rate_mb)| {
                let bytes = if k == ZONES - 1 {
                    size - start
                } else {
                    (size as f64 * rate_mb / total) as u64
                };
                let rate = rate_mb * 1e6 / 1e9;
                let zone = Zone {
                    start,
                    bytes,
                    rate,
                    track_bytes: rate * p.revolution_ns(),
                    x0: k as f64 / ZONES as f64,
                };
                start += bytes;
                zone
            })
            .collect();
        Geometry { zones, size }
    }

    fn zone(&self, offset: u64) -> &Zone {
        let offset = offset.min(self.size - 1);
        let i = self.zones.partition_point(|z| z.start <= offset) - 1;
        &self.zones[i]
    }

    /// Radial position of `offset`: 0 at the outer edge, 1 at the inner.
    pub fn x(&self, offset: u64) -> f64 {
        let z = self.zone(offset);
        z.x0 + (offset.min(self.size) - z.start) as f64 / z.bytes as f64 / ZONES as f64
    }

    /// Angle of `offset` in its track, as a fraction of a revolution.
    pub fn angle(&self, offset: u64) -> f64 {
        let z = self.zone(offset);
        ((offset - z.start) as f64 / z.track_bytes).fract()
    }

    /// Bytes in the track holding `offset`.
    pub fn track_bytes(&self, offset: u64) -> f64 {
        self.zone(offset).track_bytes
    }

    /// Media rate at `offset`, bytes per nanosecond.
    pub fn rate(&self, offset: u64) -> f64 {
        self.zone(offset).rate
    }
}

/// A command held by the drive.
#[derive(Debug, Clone)]
struct Cmd {
    ticket: u64,
    write: bool,
    offset: u64,
    len: u64,
    arrival: Nanos,
}

/// A flush waiting for the writes cached before it.
#[derive(Debug)]
struct FlushWait {
    ticket: u64,
    /// The last destage it waits for.
    upto: u64,
    /// The latest completion among its destages dispatched so far.
    done: Nanos,
}

/// The drive reading ahead after a read: the bytes from `first` up to the stream's position
/// are in the buffer.
#[derive(Debug, Clone)]
struct ReadAhead {
    first: u64,
    origin_offset: u64,
    origin_time: Nanos,
    consumed: u64,
    rate: f64,
}

impl ReadAhead {
    /// How far the buffer reaches at `t` (capped `READ_AHEAD_BYTES` past what the host took,
    /// and at the end of the disk).
    fn reach(&self, t: Nanos, size: u64) -> u64 {
        let streamed =
            self.origin_offset + (t.saturating_sub(self.origin_time) as f64 * self.rate) as u64;
        streamed.min(self.consumed + READ_AHEAD_BYTES).min(size)
    }

    /// The first byte still in the buffer: the stream's start, but no more than
    /// `READ_AHEAD_BYTES` behind what the host took (a stream that wrapped around to its start
    /// finds it long gone).
    fn low(&self) -> u64 {
        self.first
            .max(self.consumed.saturating_sub(READ_AHEAD_BYTES))
    }
}

/// One hard disk's state.
#[derive(Debug)]
pub struct Hdd {
    p: HddParams,
    geometry: Geometry,
    seek: SeekCurve,
    order: Order,
    queue_depth: usize,
    write_cache: bool,
    revolution: f64,
    /// Radial position of the head.
    head: f64,
    /// The byte after the last one the head passed.
    head_offset: u64,
    /// When the mechanism is free.
    busy_until: Nanos,
    /// Host commands holding a tag, not yet dispatched.
    tagged: Vec<Cmd>,
    /// Completion times of dispatched host commands still holding their tag.
    inflight: Vec<Nanos>,
    /// Host commands waiting for a tag (FIFO).
    host_wait: VecDeque<Cmd>,
    /// Writes waiting for room in a full write cache (FIFO).
    cache_wait: VecDeque<Cmd>,
    /// Cached writes not yet on the media, by sequence number.
    destages: BTreeMap<u64, Cmd>,
    /// The same destages by (offset, sequence number): the elevator's order.
    by_offset: BTreeSet<(u64, u64)>,
    next_destage: u64,
    dirty_bytes: u64,
    /// Latest completion of a dispatched destage.
    destaged_until: Nanos,
    flushes: Vec<FlushWait>,
    read_ahead: Option<ReadAhead>,
}

fn ms(v: f64) -> f64 {
    v * 1e6
}

impl Hdd {
    /// A disk of `size` bytes with these parameters.
    pub fn new(
        p: &HddParams,
        size: u64,
        order: Order,
        queue_depth: usize,
        write_cache: bool,
    ) -> Hdd {
        assert!(queue_depth >= 1);
        Hdd {
            geometry: Geometry::new(p, size),
            seek: p.seek_curve(),
            revolution: p.revolution_ns(),
            p: p.clone(),
            order,
            queue_depth,
            write_cache,
            head: 0.0,
            head_offset: 0,
            busy_until: 0,
            tagged: Vec::new(),
            inflight: Vec::new(),
            host_wait: VecDeque::new(),
            cache_wait: VecDeque::new(),
            destages: BTreeMap::new(),
            by_offset: BTreeSet::new(),
            next_destage: 0,
            dirty_bytes: 0,
            destaged_until: 0,
            flushes: Vec::new(),
            read_ahead: None,
        }
    }

    /// Host commands accepted and not yet dispatched.
    pub fn pending(&self) -> usize {
        self.tagged.len() + self.host_wait.len() + self.cache_wait.len()
    }

    fn interface_ns(&self, len: u64) -> Nanos {
        (len as f64 / (self.p.interface_mb_s * 1e6) * 1e9) as Nanos
    }

    fn overhead(&self) -> Nanos {
        ms(self.p.overhead_ms) as Nanos
    }

    /// Takes a request at `at` (the caller has advanced the model to `at`); completions
    /// known at once go to `done`.
    pub fn submit(&mut self, at: Nanos, ticket: u64, req: &Request, done: &mut Vec<(u64, Nanos)>) {
        let cmd = Cmd {
            ticket,
            write: req.op == Op::Write,
            offset: req.offset,
            len: req.len,
            arrival: at,
        };
        match req.op {
            Op::Read => {
                if let Some(ra) = &mut self.read_ahead {
                    let end = req.offset + req.len;
                    if req.offset >= ra.low() && end <= ra.reach(at, self.geometry.size) {
                        ra.consumed = ra.consumed.max(end);
                        done.push((ticket, at + self.overhead() + self.interface_ns(req.len)));
                        return;
                    }
                }
                self.enqueue(cmd);
            }
            Op::Write => {
                self.drop_read_ahead_over(req.offset, req.len);
                if !self.write_cache || req.len > self.p.cache_bytes {
                    self.enqueue(cmd);
                } else if self.cache_wait.is_empty()
                    && self.dirty_bytes + req.len <= self.p.cache_bytes
                {
                    self.cache(at, cmd, done);
                } else {
                    self.cache_wait.push_back(cmd);
                }
            }
            Op::Flush => match self.destages.keys().next_back() {
                None => done.push((ticket, at.max(self.destaged_until) + self.overhead())),
                Some(&upto) => self.flushes.push(FlushWait {
                    ticket,
                    upto,
                    done: at.max(self.destaged_until),
                }),
            },
            Op::Trim => {
                // Nothing moves: the member zeroes its RAM; a disk has no TRIM to model.
                done.push((ticket, at + self.overhead()));
            }
        }
    }

    /// Takes a write into the cache at `at` and acknowledges it. A cached write it overwrites
    /// whole (same start, no longer) that no flush waits for is dropped: only the new data go
    /// to the media, as a drive's cache keeps one copy of each sector.
    fn cache(&mut self, at: Nanos, mut cmd: Cmd, done: &mut Vec<(u64, Nanos)>) {
        let flushed_upto = self.flushes.iter().map(|f| f.upto).max();
        let superseded: Vec<u64> = self
            .by_offset
            .range((cmd.offset, 0)..(cmd.offset + 1, 0))
            .map(|&(_, seq)| seq)
            .filter(|&seq| {
                flushed_upto.is_none_or(|u| seq > u) && self.destages[&seq].len <= cmd.len
            })
            .collect();
        for seq in superseded {
            let old = self.destages.remove(&seq).expect("cached write");
            self.by_offset.remove(&(old.offset, seq));
            self.dirty_bytes -= old.len;
        }
        self.dirty_bytes += cmd.len;
        done.push((
            cmd.ticket,
            at + self.overhead() + self.interface_ns(cmd.len),
        ));
        cmd.arrival = at;
        self.by_offset.insert((cmd.offset, self.next_destage));
        self.destages.insert(self.next_destage, cmd);
        self.next_destage += 1;
    }

    fn drop_read_ahead_over(&mut self, offset: u64, len: u64) {
        if let Some(ra) = &self.read_ahead {
            if offset < ra.consumed + READ_AHEAD_BYTES && offset + len > ra.first {
                self.read_ahead = None;
            }
        }
    }

    fn enqueue(&mut self, cmd: Cmd) {
        if self.tagged.len() + self.inflight.len() < self.queue_depth {
            self.tagged.push(cmd);
        } else {
            self.host_wait.push_back(cmd);
        }
    }

    /// When the state next changes (a dispatch, or a tag freed for a waiting command).
    pub fn next_event(&self) -> Option<Nanos> {
        if !self.tagged.is_empty() || !self.destages.is_empty() {
            return Some(self.busy_until);
        }
        if !self.host_wait.is_empty() {
            return self.inflight.iter().copied().min();
        }
        None
    }

    /// Handles what happens at `e` (a time [`Hdd::next_event`] gave): tags freed, one dispatch.
    pub fn step(&mut self, e: Nanos, done: &mut Vec<(u64, Nanos)>) {
        self.inflight.retain(|&d| d > e);
        while self.tagged.len() + self.inflight.len() < self.queue_depth {
            match self.host_wait.pop_front() {
                Some(cmd) => self.tagged.push(cmd),
                None => break,
            }
        }
        if self.busy_until <= e && (!self.tagged.is_empty() || !self.destages.is_empty()) {
            self.dispatch(e, done);
        }
    }

    /// Positioning time (command overhead, seek, rotation) of `cmd` started at `t`, in ns,
    /// and the seek alone.
    fn access(&self, t: Nanos, cmd: &Cmd, overhead: bool) -> (f64, f64) {
        if !cmd.write && self.streams(t, cmd.offset) {
            return (0.0, 0.0);
        }
        // Within a track's bytes of the head there is no seek (the member's bytes are spread
        // over the whole stroke, so radial distance alone would make neighbours tracks apart).
        let near =
            cmd.offset.abs_diff(self.head_offset) as f64 <= self.geometry.track_bytes(cmd.offset);
        let x = self.geometry.x(cmd.offset);
        let mut seek = if near {
            0.0
        } else {
            ms(self.seek.time_ms(x - self.head))
        };
        if cmd.write && seek > 0.0 {
            seek += ms(self.p.write_settle_ms);
        }
        let ready = t as f64
            + if overhead {
                ms(self.p.overhead_ms)
            } else {
                0.0
            }
            + seek;
        let under_head = (ready / self.revolution).fract();
        let mut turn = (self.geometry.angle(cmd.offset) - under_head).rem_euclid(1.0);
        if turn > 1.0 - 1e-4 {
            // The sector is just under the head (back-to-back transfers; rounding to whole
            // nanoseconds put it a hair behind): no revolution lost.
            turn = 0.0;
        }
        let wait = turn * self.revolution;
        (ready - t as f64 + wait, seek)
    }

    /// Whether a read at `offset` started at `t` continues the read-ahead stream: it starts in
    /// the buffer, or ahead of where the stream has got to by less than a track, so that
    /// reading on reaches it within a revolution (what the drive is doing anyway; positioning
    /// afresh after the command overhead would find its first sector just passed and lose a
    /// whole revolution, as a RAID 5 member skipping a parity chunk did).
    fn streams(&self, t: Nanos, offset: u64) -> bool {
        self.read_ahead.as_ref().is_some_and(|ra| {
            let reach = ra.reach(t, self.geometry.size);
            offset >= ra.low()
                && offset
                    <= reach + self.geometry.track_bytes(reach.min(self.geometry.size - 1)) as u64
        })
    }

    /// The destages the next pick looks at: up to [`DESTAGE_WINDOW`] in elevator order (by
    /// offset from the head on, wrapping to the start: C-SCAN, as drives destage their write
    /// cache; only the next when it is within a track ahead; only those a waiting flush waits
    /// for), or the oldest with [`Order::Fifo`].
    fn destage_window(&self) -> Vec<u64> {
        if self.order == Order::Fifo {
            return self.destages.keys().take(DESTAGE_WINDOW).copied().collect();
        }
        // A flush waiting drains the writes cached before it first (a flush is a barrier:
        // writes cached after it would delay it by a sweep each).
        let limit = self
            .flushes
            .iter()
            .map(|f| f.upto)
            .min()
            .unwrap_or(u64::MAX);
        let from = (self.head_offset, 0);
        let mut next = self
            .by_offset
            .range(from..)
            .chain(self.by_offset.range(..from))
            .filter(|&&(_, seq)| seq <= limit);
        // The next one within a track ahead of the head is the only one: the sweep never
        // passes a cached write it is about to reach (it would take another sweep to come
        // back for it).
        match next.next() {
            None => Vec::new(),
            Some(&(offset, seq))
                if offset >= self.head_offset
                    && offset - self.head_offset
                        <= self
                            .geometry
                            .track_bytes(self.head_offset.min(self.geometry.size - 1))
                            as u64 =>
            {
                vec![seq]
            }
            Some(&(_, seq)) => std::iter::once(seq)
                .chain(next.take(DESTAGE_WINDOW - 1).map(|&(_, s)| s))
                .collect(),
        }
    }

    /// Picks and starts one command at `e`.
    fn dispatch(&mut self, e: Nanos, done: &mut Vec<(u64, Nanos)>) {
        enum Which {
            Host(usize),
            Destage(u64),
        }
        let mut best: Option<(Which, f64, Nanos)> = None;
        let waited = |a: Nanos| a + MAX_WAIT < e;
        // A host command waiting too long goes first (oldest first); then a destage, in the
        // elevator's order, when the oldest cached write has waited too long (the cache must
        // drain, and sweeping is how it drains fast: oldest-first would seek for every
        // write, and every write of a full cache is that old); otherwise the shortest access
        // among the host commands and the elevator's next destages.
        let host_starved = self.tagged.iter().any(|c| waited(c.arrival));
        let destage_starved = !host_starved
            && self
                .destages
                .values()
                .next()
                .is_some_and(|c| waited(c.arrival));
        let oldest_first = self.order == Order::Fifo || host_starved;
        let mut candidates: Vec<(Which, &Cmd, bool)> = Vec::new();
        if !destage_starved {
            candidates.extend(
                self.tagged
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (Which::Host(i), c, true)),
            );
        }
        if !host_starved || self.order == Order::Fifo {
            for seq in self.destage_window() {
                candidates.push((Which::Destage(seq), &self.destages[&seq], false));
            }
        }
        for (which, cmd, host) in candidates {
            let score = if oldest_first {
                0.0
            } else {
                let (access, seek) = self.access(e, cmd, host);
                match self.order {
                    Order::ShortestSeek => seek,
                    _ => access,
                }
            };
            let better = match &best {
                None => true,
                Some((_, s, arrival)) => score < *s || (score == *s && cmd.arrival < *arrival),
            };
            if better {
                best = Some((which, score, cmd.arrival));
            }
        }
        let (which, _, _) = best.expect("dispatch with nothing queued");
        let (cmd, destage) = match which {
            Which::Host(i) => (self.tagged.swap_remove(i), None),
            Which::Destage(s) => {
                let cmd = self.destages.remove(&s).expect("destage");
                self.by_offset.remove(&(cmd.offset, s));
                (cmd, Some(s))
            }
        };
        let host = destage.is_none();
        let finish = self.serve(e, &cmd, host);
        if let Some(seq) = destage {
            self.dirty_bytes -= cmd.len;
            while let Some(w) = self.cache_wait.front() {
                if self.dirty_bytes + w.len > self.p.cache_bytes {
                    break;
                }
                let w = self.cache_wait.pop_front().expect("front");
                self.cache(e, w, done);
            }
            self.destaged_until = self.destaged_until.max(finish);
            for f in &mut self.flushes {
                if seq <= f.upto {
                    f.done = f.done.max(finish);
                }
            }
            let first_dirty = self.destages.keys().next().copied();
            let overhead = self.overhead();
            self.flushes.retain(|f| {
                let clean = first_dirty.is_none_or(|s| s > f.upto);
                if clean {
                    done.push((f.ticket, f.done + overhead));
                }
                !clean
            });
        } else {
            done.push((cmd.ticket, finish));
            self.inflight.push(finish);
        }
    }

    /// Serves `cmd` on the mechanism from `e`: returns its completion and leaves the head,
    /// the busy time and the read-ahead where the command leaves them.
    fn serve(&mut self, e: Nanos, cmd: &Cmd, host: bool) -> Nanos {
        let size = self.geometry.size;
        let end = cmd.offset + cmd.len;
        if !cmd.write && self.streams(e, cmd.offset) {
            let rate_at = |o: u64| self.geometry.rate(o.min(size - 1));
            let ra = self.read_ahead.as_mut().expect("a stream");
            // Part of it is in the buffer, or the stream is about to reach it; the stream goes
            // on to its end, from where it is now (a stream paused with its buffer full
            // resumes), at the rate of the zone it has reached.
            let reach = ra.reach(e, size);
            ra.origin_offset = reach;
            ra.origin_time = e;
            ra.rate = rate_at(reach);
            // A command that waited in the queue may find all of it read already.
            let available = ra.origin_time
                + (end.saturating_sub(ra.origin_offset) as f64 / ra.rate).ceil() as Nanos;
            ra.consumed = ra.consumed.max(end);
            let finish = available.max(e + ms(self.p.overhead_ms) as Nanos);
            self.busy_until = available.max(e);
            self.head = self.geometry.x(end - 1);
            self.head_offset = end;
            return finish;
        }
        let (access, _) = self.access(e, cmd, host);
        let transfer = cmd.len as f64 / self.geometry.rate(cmd.offset);
        let finish = e + (access + transfer).ceil() as Nanos;
        self.busy_until = finish;
        self.head = self.geometry.x(end - 1);
        self.head_offset = end;
        self.read_ahead = if cmd.write {
            None
        } else {
            Some(ReadAhead {
                first: cmd.offset,
                origin_offset: end,
                origin_time: finish,
                consumed: end,
                rate: self.geometry.rate(end.min(size - 1)),
            })
        };
        finish
    }
}

//! How fast each member answers, and what the read path makes of it: which copy a mirrored
//! read goes to (`plain::read`), which members are *slow* (an outlier against their peers over
//! a window, ZFS's slow-disk "sit out"), and whether a RAID 5/6 read is cheaper reconstructed
//! around a slow member (`raid56`). Also the operator's `write-mostly` mark (md's flag: read a
//! member only when no other copy can serve).
//!
//! The data path touches only relaxed atomics here: per member operation, the bytes a role has
//! outstanding (reads), a moving average of its read latency, the window's operation count and
//! summed time, and the clock check that runs the judgement once per window. The judgement
//! itself (once a window, by whichever operation ends past the window's end) takes a mutex with
//! `try_lock`, so no request waits for it. Everything is a fixed amount per role: no history is
//! kept beyond the current window and the two streak counters.

use iostats::now_ns;
use layout::{MemberAddress, Piece};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

/// Fewer operations than this in a window leave a member's verdict as it was (too few to
/// judge).
pub const SLOW_MIN_OPS: u64 = 4;

/// A sequential read stays on the copy it is on while that copy's estimate is at most this
/// many times the best copy's (so equal legs keep a stream on one leg, and a leg 20× slower
/// loses it).
const SEQUENTIAL_SLACK: u128 = 2;

/// A copy passed over for its cost (not within an eighth of the cheapest) this many pieces
/// in a row gets the next piece it can serve: a probe.
pub const PROBE_AFTER_PASSES: u32 = 64;

/// A read's time counts as at most this many times its member's read latency estimate (see
/// `ewma`); a probe's time is taken whole.
const SPIKE_MAX: u64 = 8;

/// The least latency a member is assumed to have, ns: below it (RAM, the page cache) members
/// are weighed by their outstanding bytes alone, their microseconds of difference being
/// noise next to the copy.
const LATENCY_FLOOR_NS: u64 = 10_000;

/// From this moving average of a member's operation time on (reads and writes), the member
/// is a *disk* as far as submission goes: a batch's reads and writes of it are issued at once
/// from several threads (`io::Runner::run`), so its queue (NCQ, a disk model's tags) can
/// reorder them, rather than one after the other. A thread start (~20–50 µs on the loaded
/// 2-core machine) is then under a tenth of one operation; RAM, page-cache and flash members
/// (1–200 µs) stay on the calling thread or the ring.
pub const CONCURRENT_MIN_NS: u64 = 500_000;

/// How RAID 1/10 reads choose a copy, and whether RAID 5/6 reads go around a slow member
/// (`serve --read-balance`, the daemon's `read_balance`; see docs/DESIGN.md "Slow members and
/// the read balance"). Write-mostly members are read last in every mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadBalance {
    /// The copy with the fewest outstanding bytes weighted by its measured latency, a stream
    /// kept on its copy, probes, slow members read around (RAID 5/6: reconstructed around).
    #[default]
    Latency,
    /// Copies take turns by chunk number, nothing measured is weighed (as before the
    /// balance; md's RAID 10 and btrfs's `round-robin` spread reads so); a slow member is
    /// still judged and reported, not read around.
    RoundRobin,
    /// The first copy in role order that can serve (btrfs's `devid` read policy): the others
    /// are read only when it cannot; a slow member is judged and reported, not read around.
    First,
}

impl std::str::FromStr for ReadBalance {
    type Err = String;
    fn from_str(s: &str) -> Result<ReadBalance, String> {
        match s {
            "latency" => Ok(ReadBalance::Latency),
            "round-robin" => Ok(ReadBalance::RoundRobin),
            "first" => Ok(ReadBalance::First),
            _ => Err(format!(
                "unknown read balance {s:?}: give latency (the copy with the least queued \
                 work by measured latency, the default), round-robin (copies take turns by \
                 chunk) or first (the first copy that can serve)"
            )),
        }
    }
}

impl std::fmt::Display for ReadBalance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReadBalance::Latency => "latency",
            ReadBalance::RoundRobin => "round-robin",
            ReadBalance::First => "first",
        })
    }
}

impl ReadBalance {
    fn code(self) -> u8 {
        self as u8
    }

    fn from_code(code: u8) -> ReadBalance {
        match code {
            1 => ReadBalance::RoundRobin,
            2 => ReadBalance::First,
            _ => ReadBalance::Latency,
        }
    }
}

/// What makes a member slow, and how soon (see [`crate::Array::set_slow_policy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlowPolicy {
    /// Length of one judged window (member operations' mean latency over it).
    pub window: Duration,
    /// A member is an outlier in a window when its mean latency is above `ratio` times the
    /// median of its peers' ...
    pub ratio: u32,
    /// ... and above it by more than `min_excess` (RAM and page-cache members differ by
    /// large ratios of microseconds that no one should be told about). Zero ratio: never.
    pub min_excess: Duration,
    /// Consecutive outlier windows before the member is judged slow.
    pub windows_to_mark: u32,
    /// Consecutive windows within the bound before a slow member is trusted again.
    pub windows_to_clear: u32,
}

impl Default for SlowPolicy {
    fn default() -> SlowPolicy {
        SlowPolicy {
            window: Duration::from_secs(1),
            ratio: 4,
            min_excess: Duration::from_micros(500),
            windows_to_mark: 3,
            windows_to_clear: 3,
        }
    }
}

impl SlowPolicy {
    /// A member not read for this long (with nothing outstanding) gets the next read it can
    /// serve, so its latency estimate and a slow member's recovery stay measured: a tenth of a
    /// window (at most a few reads a second go to a slow member).
    fn probe_interval_ns(&self) -> u64 {
        (self.window.as_nanos() as u64 / 10).max(1)
    }
}

/// One member's speed figures, for status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberSpeed {
    /// Judged slow: reads are served around it where redundancy allows.
    pub slow: bool,
    /// Marked write-mostly: read only when no other copy can serve.
    pub write_mostly: bool,
    /// Its mean latency per operation over the last window that judged it (one where it and
    /// a peer had enough operations; `None`: none yet since it took its role). A window with
    /// too few operations leaves the verdict and these figures as they were.
    pub latency_us: Option<u64>,
    /// The median of its peers' over the same window.
    pub peers_latency_us: Option<u64>,
    /// Its read latency's moving average (what the read balance weighs), µs.
    pub read_latency_us: u64,
}

/// The live figures of one role. Aligned so two roles never share a cache line.
#[repr(align(128))]
#[derive(Default)]
struct Leg {
    /// Bytes of reads sent to the member and not yet returned.
    outstanding: AtomicU64,
    /// Moving average of its read latency, ns (α = 1/8); 0 until measured.
    read_ewma_ns: AtomicU64,
    /// Moving average of its read and write time, ns (α = 1/64, samples capped); 0 until
    /// measured.
    op_ewma_ns: AtomicU64,
    /// The member offset where the last read sent to it ends (a read starting there
    /// continues a stream).
    next_read_at: AtomicU64,
    /// When a read was last sent to it ([`now_ns`]).
    last_read_ns: AtomicU64,
    /// Pieces in a row it could have served and lost for its cost (not within an eighth of
    /// the cheapest copy's); from [`PROBE_AFTER_PASSES`] on it is probed.
    passed_over: AtomicU32,
    /// A probe was sent to it: the next read to end is the probe, and its time replaces the
    /// estimate (the estimate is stale, a moving average of it would keep most of it).
    probed: AtomicBool,
    /// The current window: operations ended and their summed time (flushes left out).
    window_ops: AtomicU64,
    window_ns: AtomicU64,
    write_mostly: AtomicBool,
    slow: AtomicBool,
}

impl Leg {
    /// Read just now, as far as probes are concerned: a new member is not probed before it
    /// had a probe interval to be read normally.
    fn new() -> Leg {
        let leg = Leg::default();
        leg.last_read_ns.store(now_ns(), Relaxed);
        leg
    }
}

/// What the last judgement found, per role.
#[derive(Clone, Default)]
struct Judged {
    outlier_streak: u32,
    normal_streak: u32,
    latency_ns: Option<u64>,
    peers_ns: Option<u64>,
}

/// The speed figures of every role of an array.
pub(crate) struct Speed {
    legs: Vec<Leg>,
    policy: Mutex<SlowPolicy>,
    /// When the current window ends ([`now_ns`]).
    window_end_ns: AtomicU64,
    /// The policy's probe interval (the data path reads no mutex).
    probe_ns: AtomicU64,
    /// Some role is slow (the RAID 5/6 read path's one load when none is).
    any_slow: AtomicBool,
    /// The [`ReadBalance`] in force ([`ReadBalance::code`]).
    balance: AtomicU8,
    judged: Mutex<Vec<Judged>>,
}

impl Speed {
    pub(crate) fn new(roles: usize) -> Speed {
        let policy = SlowPolicy::default();
        Speed {
            legs: (0..roles).map(|_| Leg::new()).collect(),
            window_end_ns: AtomicU64::new(now_ns() + policy.window.as_nanos() as u64),
            probe_ns: AtomicU64::new(policy.probe_interval_ns()),
            policy: Mutex::new(policy),
            any_slow: AtomicBool::new(false),
            balance: AtomicU8::new(ReadBalance::Latency.code()),
            judged: Mutex::new(vec![Judged::default(); roles]),
        }
    }

    fn policy(&self) -> SlowPolicy {
        *self.policy.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn set_policy(&self, policy: SlowPolicy) {
        *self.policy.lock().unwrap_or_else(|p| p.into_inner()) = policy;
        self.probe_ns.store(policy.probe_interval_ns(), Relaxed);
        self.window_end_ns
            .store(now_ns() + policy.window.as_nanos() as u64, Relaxed);
    }

    /// A read of `len` bytes is sent to `role`.
    #[inline]
    pub(crate) fn read_begins(&self, role: usize, len: u64) {
        self.legs[role].outstanding.fetch_add(len, Relaxed);
    }

    /// An operation sent to `role` ended after `took_ns`: a read of `len` bytes (`read`) or
    /// another kind (`flush`: left out of the window, a flush's time is the device cache's).
    #[inline]
    pub(crate) fn ended(&self, role: usize, read: bool, flush: bool, len: u64, took_ns: u64) {
        let leg = &self.legs[role];
        if read {
            leg.outstanding.fetch_sub(len, Relaxed);
            let estimate = match leg.probed.load(Relaxed) && leg.probed.swap(false, Relaxed) {
                true => took_ns.max(1),
                false => ewma(leg.read_ewma_ns.load(Relaxed), took_ns),
            };
            leg.read_ewma_ns.store(estimate, Relaxed);
        }
        if !flush {
            leg.window_ops.fetch_add(1, Relaxed);
            leg.window_ns.fetch_add(took_ns, Relaxed);
            // Slow to move (α = 1/64) and each sample capped at 4× the threshold, so a RAM
            // member whose thread was preempted now and then on a loaded machine is not taken
            // for a disk; a disk's every operation takes milliseconds.
            let sample = took_ns.min(4 * CONCURRENT_MIN_NS);
            let old = leg.op_ewma_ns.load(Relaxed);
            let new = match old {
                0 => sample.max(1),
                _ => (old - old / 64 + sample / 64).max(1),
            };
            leg.op_ewma_ns.store(new, Relaxed);
        }
    }

    /// Whether `role`'s operations take long enough that a batch's operations of it are
    /// better issued at once ([`CONCURRENT_MIN_NS`]).
    #[inline]
    pub(crate) fn wants_concurrency(&self, role: usize) -> bool {
        self.legs[role].op_ewma_ns.load(Relaxed) >= CONCURRENT_MIN_NS
    }

    /// Whether the current window is over at `now`.
    #[inline]
    pub(crate) fn window_over(&self, now: u64) -> bool {
        now >= self.window_end_ns.load(Relaxed)
    }

    /// Judges the window that just ended: each `readable` role's mean latency against the
    /// median of the others'. At most one caller judges; the others return at once.
    pub(crate) fn judge(&self, now: u64, readable: &[bool]) {
        let Ok(mut judged) = self.judged.try_lock() else {
            return;
        };
        if !self.window_over(now) {
            return; // judged by another caller meanwhile
        }
        let policy = self.policy();
        self.window_end_ns
            .store(now + policy.window.as_nanos() as u64, Relaxed);
        let means: Vec<Option<u64>> = (self.legs.iter().enumerate())
            .map(|(role, leg)| {
                let ops = leg.window_ops.swap(0, Relaxed);
                let ns = leg.window_ns.swap(0, Relaxed);
                (readable[role] && ops >= SLOW_MIN_OPS).then(|| ns / ops)
            })
            .collect();
        for (role, j) in judged.iter_mut().enumerate() {
            let leg = &self.legs[role];
            if !readable[role] {
                *j = Judged::default();
                leg.slow.store(false, Relaxed);
                continue;
            }
            let (Some(mean), Some(peers)) = (means[role], peers_median(&means, role)) else {
                continue; // too few to judge: the verdict stands, with its figures
            };
            (j.latency_ns, j.peers_ns) = (Some(mean), Some(peers));
            let outlier = policy.ratio > 0
                && mean > peers.saturating_mul(policy.ratio as u64)
                && mean - peers > policy.min_excess.as_nanos() as u64;
            if outlier {
                j.outlier_streak += 1;
                j.normal_streak = 0;
            } else {
                j.normal_streak += 1;
                j.outlier_streak = 0;
            }
            let slow = leg.slow.load(Relaxed);
            if !slow && j.outlier_streak >= policy.windows_to_mark {
                leg.slow.store(true, Relaxed);
            } else if slow && j.normal_streak >= policy.windows_to_clear {
                leg.slow.store(false, Relaxed);
            }
        }
        let any = self.legs.iter().any(|l| l.slow.load(Relaxed));
        self.any_slow.store(any, Relaxed);
    }

    #[inline]
    pub(crate) fn is_slow(&self, role: usize) -> bool {
        self.legs[role].slow.load(Relaxed)
    }

    #[inline]
    pub(crate) fn any_slow(&self) -> bool {
        self.any_slow.load(Relaxed)
    }

    #[inline]
    pub(crate) fn balance(&self) -> ReadBalance {
        ReadBalance::from_code(self.balance.load(Relaxed))
    }

    pub(crate) fn set_balance(&self, balance: ReadBalance) {
        self.balance.store(balance.code(), Relaxed);
    }

    #[inline]
    pub(crate) fn is_write_mostly(&self, role: usize) -> bool {
        self.legs[role].write_mostly.load(Relaxed)
    }

    pub(crate) fn set_write_mostly(&self, role: usize, on: bool) {
        self.legs[role].write_mostly.store(on, Relaxed);
    }

    /// A new member serves `role`: what was measured and marked of the old one is dropped.
    pub(crate) fn reset(&self, role: usize) {
        let leg = &self.legs[role];
        leg.read_ewma_ns.store(0, Relaxed);
        leg.op_ewma_ns.store(0, Relaxed);
        leg.last_read_ns.store(now_ns(), Relaxed);
        leg.passed_over.store(0, Relaxed);
        leg.probed.store(false, Relaxed);
        leg.write_mostly.store(false, Relaxed);
        leg.slow.store(false, Relaxed);
        let mut judged = self.judged.lock().unwrap_or_else(|p| p.into_inner());
        judged[role] = Judged::default();
        drop(judged);
        let any = self.legs.iter().any(|l| l.slow.load(Relaxed));
        self.any_slow.store(any, Relaxed);
    }

    /// The estimated cost of a read of `len` bytes on `role` with `planned` more bytes of this
    /// request already given to it: (outstanding + planned + len) × its read latency.
    #[inline]
    pub(crate) fn cost(&self, role: usize, planned: u64, len: u64) -> u128 {
        let leg = &self.legs[role];
        let bytes = leg.outstanding.load(Relaxed) + planned + len;
        let latency = leg.read_ewma_ns.load(Relaxed).max(LATENCY_FLOOR_NS);
        bytes as u128 * latency as u128
    }

    /// Whether a read at member offset `at` continues the last read sent to `role`.
    #[inline]
    pub(crate) fn continues(&self, role: usize, at: u64) -> bool {
        self.legs[role].next_read_at.load(Relaxed) == at
    }

    /// A read of `[at, at + len)` goes to `role`.
    #[inline]
    pub(crate) fn chosen(&self, role: usize, at: u64, len: u64, now: u64) {
        let leg = &self.legs[role];
        leg.next_read_at.store(at + len, Relaxed);
        leg.last_read_ns.store(now, Relaxed);
        if leg.passed_over.load(Relaxed) != 0 {
            leg.passed_over.store(0, Relaxed);
        }
    }

    /// A probe reads `[at, at + len)` elsewhere: a stream on `role` that reached `at` goes on
    /// after it.
    #[inline]
    pub(crate) fn skip_over(&self, role: usize, at: u64, len: u64) {
        let leg = &self.legs[role];
        let _ = leg
            .next_read_at
            .compare_exchange(at, at + len, Relaxed, Relaxed);
    }

    /// Whether `role` has gone unread (nothing outstanding) for a probe interval; if so, the
    /// caller is the one to send it the next read (claimed here, so one caller probes).
    #[inline]
    pub(crate) fn claim_probe(&self, role: usize, now: u64) -> bool {
        let leg = &self.legs[role];
        let last = leg.last_read_ns.load(Relaxed);
        let interval = self.probe_interval_ns();
        let claimed = now.saturating_sub(last) >= interval
            && leg.outstanding.load(Relaxed) == 0
            && leg
                .last_read_ns
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok();
        if claimed {
            leg.probed.store(true, Relaxed);
        }
        claimed
    }

    /// Whether `role` lost [`PROBE_AFTER_PASSES`] pieces in a row for its cost (and has
    /// nothing outstanding); if so, the caller is the one to send it the next read (claimed
    /// here, so one caller probes). So a leg whose estimate is high is measured again every
    /// so many reads, however fast reads come: an estimate raised by one preempted read
    /// cannot keep a leg unread, and unmeasured, for a whole run.
    #[inline]
    fn claim_count_probe(&self, role: usize) -> bool {
        let leg = &self.legs[role];
        let passes = leg.passed_over.load(Relaxed);
        let claimed = passes >= PROBE_AFTER_PASSES
            && leg.outstanding.load(Relaxed) == 0
            && leg
                .passed_over
                .compare_exchange(passes, 0, Relaxed, Relaxed)
                .is_ok();
        if claimed {
            leg.probed.store(true, Relaxed);
        }
        claimed
    }

    fn probe_interval_ns(&self) -> u64 {
        self.probe_ns.load(Relaxed)
    }

    /// Whether a read of `len` bytes that would go to the slow `role` is cheaper rebuilt from
    /// `others` (each of which would then read `len` bytes, in parallel): the slowest of them,
    /// its estimate doubled for the extra load and the stripe locks, still beats `role`.
    pub(crate) fn cheaper_around(
        &self,
        role: usize,
        len: u64,
        others: impl Iterator<Item = usize>,
    ) -> bool {
        let direct = self.cost(role, 0, len);
        let around = others.map(|r| self.cost(r, 0, len)).max().unwrap_or(0);
        around.saturating_mul(2) < direct
    }

    /// `role`'s figures for status.
    pub(crate) fn report(&self, role: usize) -> MemberSpeed {
        let leg = &self.legs[role];
        let judged = self.judged.lock().unwrap_or_else(|p| p.into_inner());
        let us = |ns: u64| ns.div_ceil(1_000);
        MemberSpeed {
            slow: leg.slow.load(Relaxed),
            write_mostly: leg.write_mostly.load(Relaxed),
            latency_us: judged[role].latency_ns.map(us),
            peers_latency_us: judged[role].peers_ns.map(us),
            read_latency_us: us(leg.read_ewma_ns.load(Relaxed)),
        }
    }
}

/// What one read request gave each copy so far.
pub(crate) struct ReadPlan {
    /// Bytes of this request per role.
    planned: Vec<u64>,
    /// A copy keeps the pieces of a stream until it has this many bytes of the request (the
    /// fan-out threshold: from there a share runs on its own thread, so splitting gains).
    run_bytes: u64,
    now: u64,
}

impl ReadPlan {
    /// A plan for a request over `roles` roles, at `now` ([`now_ns`]).
    pub(crate) fn new(roles: usize, run_bytes: u64, now: u64) -> ReadPlan {
        ReadPlan {
            planned: vec![0; roles],
            run_bytes,
            now,
        }
    }
}

impl Speed {
    /// The copy of `piece` to read (what this weighs is kept here):
    /// - which copies: those `present` allows, not write-mostly and not judged slow; failing
    ///   that, not write-mostly; failing that, any (md's write-mostly: read only when no other
    ///   copy can serve; a slow member is read around while another copy can serve);
    /// - a copy (write-mostly aside) not read for a probe interval gets this piece, so every
    ///   copy's latency stays measured and a slow one's recovery is seen; so does a copy
    ///   (neither write-mostly nor slow) that lost [`PROBE_AFTER_PASSES`] pieces in a row for
    ///   its cost; a probe's time replaces the copy's estimate;
    /// - a copy whose last read ended where this piece starts keeps the stream (read-ahead
    ///   below stays sequential) while its share of this request is under the fan-out
    ///   threshold and its cost is at most twice the best copy's;
    /// - otherwise the cheapest: fewest outstanding bytes (this request's own included)
    ///   weighted by its read latency; copies within an eighth of the cheapest count as ties,
    ///   which rotate by chunk number.
    ///
    /// That is [`ReadBalance::Latency`]; the other modes weigh nothing measured (see
    /// [`Speed::pick_plain`]).
    pub(crate) fn pick_copy(
        &self,
        piece: &Piece,
        present: &[bool],
        plan: &mut ReadPlan,
    ) -> MemberAddress {
        let balance = self.balance();
        if balance != ReadBalance::Latency {
            let chosen = self.pick_plain(balance, piece, present);
            plan.planned[chosen.role] += piece.len;
            return chosen;
        }
        let live = |c: &&MemberAddress| present[c.role];
        let readable = |c: &&MemberAddress| live(c) && !self.is_write_mostly(c.role);
        let preferred = |c: &&MemberAddress| readable(c) && !self.is_slow(c.role);
        let probe = (piece.copies.iter().filter(readable))
            .find(|c| plan.planned[c.role] == 0 && self.claim_probe(c.role, plan.now))
            .or_else(|| {
                (piece.copies.iter().filter(preferred))
                    .find(|c| plan.planned[c.role] == 0 && self.claim_count_probe(c.role))
            });
        if let Some(&probe) = probe {
            // A stream on another copy skips this piece and stays where it is.
            for c in piece.copies.iter().filter(live) {
                self.skip_over(c.role, c.member_offset, piece.len);
            }
            plan.planned[probe.role] += piece.len;
            return probe;
        }
        let filters: [&dyn Fn(&&MemberAddress) -> bool; 3] = [&preferred, &readable, &live];
        let tier: Vec<MemberAddress> = (filters.into_iter())
            .map(|keep| {
                piece
                    .copies
                    .iter()
                    .filter(keep)
                    .copied()
                    .collect::<Vec<_>>()
            })
            .find(|t| !t.is_empty())
            .unwrap_or_else(|| panic!("survives() promised a copy of chunk {}", piece.chunk));
        let chosen = self.pick_in(piece, &tier, plan);
        plan.planned[chosen.role] += piece.len;
        self.chosen(chosen.role, chosen.member_offset, piece.len, plan.now);
        chosen
    }

    /// `round-robin` and `first`: of the copies `present` allows, those not write-mostly
    /// (failing that, any), the one at the chunk's turn or the first in role order.
    fn pick_plain(&self, balance: ReadBalance, piece: &Piece, present: &[bool]) -> MemberAddress {
        let live: Vec<MemberAddress> = (piece.copies.iter())
            .filter(|c| present[c.role])
            .copied()
            .collect();
        let readable: Vec<MemberAddress> = (live.iter())
            .filter(|c| !self.is_write_mostly(c.role))
            .copied()
            .collect();
        let mut tier = if readable.is_empty() { live } else { readable };
        assert!(
            !tier.is_empty(),
            "survives() promised a copy of chunk {}",
            piece.chunk
        );
        match balance {
            ReadBalance::First => *tier.iter().min_by_key(|c| c.role).expect("not empty"),
            _ => {
                tier.sort_by_key(|c| c.role);
                let n = self.legs.len() as u64;
                tier[((piece.chunk + piece.chunk / n) % tier.len() as u64) as usize]
            }
        }
    }

    /// The cheapest of `tier` for `piece`, or the copy its stream is on (see
    /// [`Speed::pick_copy`]).
    fn pick_in(&self, piece: &Piece, tier: &[MemberAddress], plan: &ReadPlan) -> MemberAddress {
        // Rotate by chunk, shifted every `roles` chunks: with near-2 RAID 10 on an even
        // member count, plain `chunk mod copies` would always pick the same member of each
        // pair.
        let n = self.legs.len() as u64;
        let start = ((piece.chunk + piece.chunk / n) % tier.len() as u64) as usize;
        let costs: Vec<(MemberAddress, u128)> = (0..tier.len())
            .map(|i| tier[(start + i) % tier.len()])
            .map(|c| (c, self.cost(c.role, plan.planned[c.role], piece.len)))
            .collect();
        let least = costs
            .iter()
            .map(|&(_, cost)| cost)
            .min()
            .expect("tier is not empty");
        let (best, best_cost) = *costs
            .iter()
            .find(|&&(_, cost)| near(cost, least, piece.len))
            .expect("the least is near itself");
        let stream = tier.iter().find(|c| {
            self.continues(c.role, c.member_offset)
                && plan.planned[c.role] < plan.run_bytes.max(piece.len)
                && keeps_stream(self.cost(c.role, 0, piece.len), best_cost)
        });
        let chosen = stream.copied().unwrap_or(best);
        // The copies that lost for their cost count it (towards a probe).
        for &(c, cost) in &costs {
            if c.role != chosen.role && !near(cost, least, piece.len) {
                self.legs[c.role].passed_over.fetch_add(1, Relaxed);
            }
        }
        chosen
    }
}

/// The median of the other roles' means (the lower one of an even count), `None` when no
/// other role was measured.
fn peers_median(means: &[Option<u64>], role: usize) -> Option<u64> {
    let mut peers: Vec<u64> = (means.iter().enumerate())
        .filter(|&(r, _)| r != role)
        .filter_map(|(_, m)| *m)
        .collect();
    peers.sort_unstable();
    let n = peers.len();
    (n > 0).then(|| peers[(n - 1) / 2])
}

/// The moving average `old` (0: none yet) moved by a new time `took_ns` (α = 1/8), the time
/// taken as at most [`SPIKE_MAX`] times the average: one read of a RAM member whose thread was
/// preempted (milliseconds on a loaded machine) raises it by at most 7/8, a member that really
/// got slower is followed within a few reads (×1.875 a read: 1 µs to 10 ms in 15).
#[inline]
fn ewma(old: u64, took_ns: u64) -> u64 {
    match old {
        0 => took_ns.max(1),
        _ => {
            let sample = took_ns.min(old.saturating_mul(SPIKE_MAX));
            (old - old / 8 + sample / 8).max(1)
        }
    }
}

/// Whether a copy costing `cost` is as good as the cheapest (`best`) for a piece of `len`
/// bytes: within an eighth of it (so the noise of two equal members' latencies does not send
/// every read to one of them), or within one such piece at the latency floor (a RAM or
/// page-cache leg with one read more outstanding is no busier: on a loaded machine that read
/// is often a reader thread preempted between its start and end, and a leg must not lose
/// every read meanwhile).
#[inline]
fn near(cost: u128, best: u128, len: u64) -> bool {
    cost.saturating_mul(8) <= best.saturating_mul(9)
        || cost - best <= len as u128 * LATENCY_FLOOR_NS as u128
}

/// Whether a sequential candidate costing `candidate` keeps the stream against the best
/// alternative costing `best`.
#[inline]
fn keeps_stream(candidate: u128, best: u128) -> bool {
    candidate <= best.saturating_mul(SEQUENTIAL_SLACK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(speed: &Speed, role: usize, ops: u64, took_ns: u64) {
        for _ in 0..ops {
            speed.read_begins(role, 4096);
            speed.ended(role, true, false, 4096, took_ns);
        }
    }

    fn judge_now(speed: &Speed, readable: &[bool]) {
        speed.window_end_ns.store(0, Relaxed);
        speed.judge(now_ns(), readable);
    }

    #[test]
    fn an_outlier_is_slow_after_the_streak_and_trusted_again_after_the_clear_streak() {
        let speed = Speed::new(4);
        let all = [true; 4];
        for window in 0..3 {
            assert!(!speed.is_slow(2), "window {window}: marked too soon");
            for role in 0..4 {
                let ns = if role == 2 { 2_000_000 } else { 100_000 };
                feed(&speed, role, 10, ns);
            }
            judge_now(&speed, &all);
        }
        assert!(speed.is_slow(2) && speed.any_slow());
        assert!((0..4).filter(|&r| r != 2).all(|r| !speed.is_slow(r)));
        let report = speed.report(2);
        assert_eq!(
            (report.latency_us, report.peers_latency_us),
            (Some(2000), Some(100))
        );
        // A window with too few of its operations keeps the verdict and its figures.
        (0..4).for_each(|role| feed(&speed, role, if role == 2 { 1 } else { 10 }, 100_000));
        judge_now(&speed, &all);
        let kept = speed.report(2);
        assert!(kept.slow);
        assert_eq!(
            (kept.latency_us, kept.peers_latency_us),
            (Some(2000), Some(100))
        );
        for window in 0..3 {
            assert!(speed.is_slow(2), "window {window}: cleared too soon");
            (0..4).for_each(|role| feed(&speed, role, 10, 100_000));
            judge_now(&speed, &all);
        }
        assert!(!speed.is_slow(2) && !speed.any_slow());
    }

    #[test]
    fn small_excess_too_few_operations_and_unreadable_members_are_not_judged() {
        let speed = Speed::new(2);
        for _ in 0..5 {
            // 10× slower but only 90 µs more: below the excess.
            feed(&speed, 0, 10, 10_000);
            feed(&speed, 1, 10, 100_000);
            judge_now(&speed, &[true, true]);
        }
        assert!(!speed.is_slow(1));
        for _ in 0..5 {
            feed(&speed, 0, 10, 10_000);
            feed(&speed, 1, SLOW_MIN_OPS - 1, 100_000_000);
            judge_now(&speed, &[true, true]);
        }
        assert!(!speed.is_slow(1), "three operations a window judge nothing");
        for _ in 0..5 {
            feed(&speed, 0, 10, 10_000);
            feed(&speed, 1, 10, 100_000_000);
            judge_now(&speed, &[true, false]);
        }
        assert!(!speed.is_slow(1), "a member not in sync is not judged");
    }

    #[test]
    fn the_median_of_peers_ignores_one_other_slow_member() {
        assert_eq!(
            peers_median(&[Some(1), Some(1), Some(20), Some(20)], 3),
            Some(1)
        );
        assert_eq!(
            peers_median(&[Some(1), Some(1), Some(20), Some(20)], 0),
            Some(20)
        );
        assert_eq!(peers_median(&[Some(5), None], 1), Some(5));
        assert_eq!(peers_median(&[Some(5), None], 0), None);
    }

    #[test]
    fn cost_weighs_outstanding_bytes_by_latency() {
        let speed = Speed::new(2);
        feed(&speed, 0, 1, 10_000);
        feed(&speed, 1, 1, 200_000);
        assert!(speed.cost(0, 0, 4096) < speed.cost(1, 0, 4096));
        // 16 reads outstanding on the fast one still beat one on a member 20× slower.
        speed.read_begins(0, 16 * 4096);
        assert!(speed.cost(0, 0, 4096) < speed.cost(1, 0, 4096));
        speed.read_begins(0, 64 * 4096);
        assert!(speed.cost(0, 0, 4096) > speed.cost(1, 0, 4096));
    }
    /// A two-way mirror's piece `i`: a 4 KiB read of chunk `i` at a member offset no other
    /// piece continues (random reads).
    fn mirror_piece(i: u64) -> Piece {
        let at = (i * 7919 % 1024) * 65536 + 4096 * (i % 3);
        Piece {
            buf_offset: 0,
            len: 4096,
            chunk: i,
            copies: (0..2)
                .map(|role| MemberAddress {
                    role,
                    member_offset: at,
                })
                .collect(),
        }
    }

    /// Reads `count` pieces from `*next` on, one at a time, at the fixed time `now` (so no
    /// time probe is due), each taking `took_ns` on whichever copy serves it; returns the
    /// reads per role.
    fn serve(speed: &Speed, next: &mut u64, count: u64, now: u64, took_ns: u64) -> [u64; 2] {
        let mut got = [0; 2];
        for _ in 0..count {
            let piece = mirror_piece(*next);
            *next += 1;
            let mut plan = ReadPlan::new(2, 1 << 20, now);
            let copy = speed.pick_copy(&piece, &[true, true], &mut plan);
            speed.read_begins(copy.role, piece.len);
            speed.ended(copy.role, true, false, piece.len, took_ns);
            got[copy.role] += 1;
        }
        got
    }

    /// The flaky read balance seen under CPU load: one preempted read of a RAM leg (5 ms)
    /// raised its estimate 60-fold, the leg then got no reads, so nothing measured it again
    /// and the stale estimate held for the whole run ([1, 799]). Now one read's time moves
    /// the estimate by at most 7/8, and a leg passed over for its cost (however its estimate
    /// got high) is probed after a bounded number of reads, the probe's time replacing the
    /// estimate: it gets its share back within that many reads.
    #[test]
    fn a_leg_given_one_bad_estimate_gets_its_share_back_within_a_bounded_number_of_reads() {
        let speed = Speed::new(2);
        // No time passes: only what counts reads can bring the leg back.
        let now = speed.legs[0].last_read_ns.load(Relaxed);
        let mut next = 0;
        let warm = serve(&speed, &mut next, 64, now, 2_000);
        assert!(warm[0] >= 16 && warm[1] >= 16, "equal legs share: {warm:?}");
        // One preempted read on leg 1 raises its estimate by at most 7/8 ...
        speed.read_begins(1, 4096);
        speed.ended(1, true, false, 4096, 5_000_000);
        assert!(
            speed.report(1).read_latency_us <= 4,
            "{:?}",
            speed.report(1)
        );
        // ... a run of them makes it bad.
        feed(&speed, 1, 16, 5_000_000);
        let bad = speed.report(1).read_latency_us;
        assert!(bad >= 600, "16 reads of 5 ms: estimate {bad} us");
        let until_back = serve(&speed, &mut next, PROBE_AFTER_PASSES as u64 + 1, now, 2_000);
        assert!(until_back[1] >= 1, "leg 1 not read again: {until_back:?}");
        assert!(
            speed.report(1).read_latency_us < 10,
            "its estimate after the probe: {:?}",
            speed.report(1)
        );
        let after = serve(&speed, &mut next, 200, now, 2_000);
        assert!(
            after[0] >= 60 && after[1] >= 60,
            "equal legs share again: {after:?}"
        );
    }
}

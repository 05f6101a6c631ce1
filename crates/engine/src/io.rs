//! Member I/O: every byte the engine moves to or from a member goes through
//! [`Runner::member_io`], the one place where member errors surface (issue 4's fault handling —
//! reconstruct and rewrite on a read error, mark faulty on a write error — plugs in there).
//! [`Runner::run`] executes a batch of operations, fanning out to one scoped thread per member
//! with a large share (at most `member_count` threads), so a large request keeps all its
//! members busy at once. A [`Runner`] sees only the geometry, the member table and the fan-out
//! threshold (`Parts::run` and `Parts::member_io` build one per call).

use crate::error::{IoError, Op};
use crate::members::Members;
use crate::state::{is_no_space, FaultReason};
use layout::Geometry;
use member::uring::{self, RingData, RingIo};
use member::{Member, RingAsk, StartCall};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Default per-member share of one batch (bytes) from which member I/O runs on parallel
/// threads; measured in docs/PERFORMANCE.md ("engine").
pub const FANOUT_MIN_BYTES_DEFAULT: u64 = 1 << 20;

/// The per-member share of a batch (bytes) from which [`Runner::run`] fans member I/O out to
/// parallel threads.
pub(crate) struct FanOut(AtomicU64);

impl FanOut {
    pub(crate) fn new(min_bytes: u64) -> FanOut {
        FanOut(AtomicU64::new(min_bytes))
    }

    pub(crate) fn min_bytes(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn set(&self, min_bytes: u64) {
        self.0.store(min_bytes, Ordering::Relaxed);
    }
}

fn gone() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::NotFound,
        "member removed from the array",
    )
}

/// The most threads one batch's operations of slow members are issued from at once
/// ([`Runner::concurrent_lanes`]): a disk's queue (32 tags) is shared by the batches of every
/// request and applier, so a batch needs a part of it, not all.
pub(crate) const CONCURRENT_LANES_MAX: usize = 16;

/// One operation on one member.
pub(crate) enum MemOp<'a> {
    Read {
        role: usize,
        offset: u64,
        buf: &'a mut [u8],
    },
    Write {
        role: usize,
        offset: u64,
        buf: &'a [u8],
    },
    /// Adjacent reads of one member merged by `coalesce`: one request for all the buffers.
    ReadV {
        role: usize,
        offset: u64,
        bufs: Vec<&'a mut [u8]>,
    },
    /// Adjacent writes of one member merged by `coalesce`.
    WriteV {
        role: usize,
        offset: u64,
        bufs: Vec<&'a [u8]>,
    },
    Trim {
        role: usize,
        offset: u64,
        len: u64,
    },
    Zero {
        role: usize,
        offset: u64,
        len: u64,
    },
    Flush {
        role: usize,
    },
}

impl MemOp<'_> {
    pub(crate) fn role(&self) -> usize {
        match self {
            MemOp::Read { role, .. }
            | MemOp::Write { role, .. }
            | MemOp::ReadV { role, .. }
            | MemOp::WriteV { role, .. }
            | MemOp::Trim { role, .. }
            | MemOp::Zero { role, .. }
            | MemOp::Flush { role } => *role,
        }
    }

    fn describe(&self) -> (Op, u64, u64) {
        match self {
            MemOp::Read { offset, buf, .. } => (Op::Read, *offset, buf.len() as u64),
            MemOp::Write { offset, buf, .. } => (Op::Write, *offset, buf.len() as u64),
            MemOp::ReadV { offset, bufs, .. } => (Op::Read, *offset, total(bufs)),
            MemOp::WriteV { offset, bufs, .. } => (Op::Write, *offset, total(bufs)),
            MemOp::Trim { offset, len, .. } => (Op::Trim, *offset, *len),
            MemOp::Zero { offset, len, .. } => (Op::WriteZeroes, *offset, *len),
            MemOp::Flush { .. } => (Op::Flush, 0, 0),
        }
    }
}

impl MemOp<'_> {
    fn is_write(&self) -> bool {
        !matches!(self, MemOp::Read { .. } | MemOp::ReadV { .. })
    }

    fn apply(&self, member: &dyn Member) -> std::io::Result<()> {
        match self {
            MemOp::Read { .. } | MemOp::ReadV { .. } => {
                unreachable!("reads are applied in member_io")
            }
            MemOp::Write { offset, buf, .. } => member.write_at(buf, *offset),
            MemOp::WriteV { offset, bufs, .. } => member.write_vectored_at(bufs, *offset),
            MemOp::Trim { offset, len, .. } => member.trim(*offset, *len),
            MemOp::Zero { offset, len, .. } => member.write_zeroes(*offset, *len),
            MemOp::Flush { .. } => member.flush(),
        }
    }
}

/// Member I/O over an array's parts: the geometry (bounds), the member table (who serves a
/// role, health, counters, fault policy) and the fan-out threshold. It needs nothing else of
/// the array.
pub(crate) struct Runner<'a> {
    geometry: &'a Geometry,
    members: &'a Members,
    fanout: &'a FanOut,
}

impl<'a> Runner<'a> {
    pub(crate) fn new(geometry: &'a Geometry, members: &'a Members, fanout: &'a FanOut) -> Self {
        Runner {
            geometry,
            members,
            fanout,
        }
    }

    /// Performs one member operation: the single point where member I/O happens, where every
    /// request is timed and counted (`Members::io`: operations, bytes, latency, busy time), and
    /// where faults are judged (see [`Runner::judge`]). During a replace,
    /// every write-type operation on the role is repeated on the replacement.
    pub(crate) fn member_io(&self, op: MemOp<'_>) -> Result<(), IoError> {
        self.member_io_begun(op, None)
    }

    /// [`Runner::member_io`] of an operation whose call [`Runner::start`] may have handed to
    /// the member already (`begun`): then its result is waited for here.
    fn member_io_begun(&self, mut op: MemOp<'_>, begun: Option<Begun>) -> Result<(), IoError> {
        let role = op.role();
        let (kind, offset, len) = op.describe();
        if kind != Op::Flush {
            assert!(offset + len <= self.geometry.member_data_bytes(role));
        }
        let (member, replacement) = self.members.slot(role);
        let Some(member) = member else {
            match begun {
                Some(Begun::Started { call, counted }) => {
                    let (result, _) = call.finish(&mut |_| {});
                    let ok = result.is_ok();
                    self.members
                        .end(role, counted, kind.counted(), len, ok, None);
                }
                Some(Begun::Done {
                    result, counted, ..
                }) => {
                    let ok = result.is_ok();
                    self.members
                        .end(role, counted, kind.counted(), len, ok, None);
                }
                None => {}
            }
            // Removed after the request was planned: a write is moot, a read must be retried.
            return match kind {
                Op::Read => Err(self.member_error(role, "(removed)", kind, offset, len, gone())),
                _ => Ok(()),
            };
        };
        let mut called = member;
        let (result, elapsed) = match begun {
            // Timed by the call itself for the fault policy: it may have returned long before
            // this group's turn. The counters' latency runs from its start to here.
            Some(Begun::Started { call, counted }) => {
                let (result, took) = match &mut op {
                    MemOp::Read { buf, .. } => call.finish(&mut |data| buf.copy_from_slice(data)),
                    MemOp::ReadV { bufs, .. } => {
                        call.finish(&mut |data| member::scatter(data, bufs))
                    }
                    _ => call.finish(&mut |_| {}),
                };
                let ok = result.is_ok();
                self.members
                    .end(role, counted, kind.counted(), len, ok, Some(took));
                (result, took)
            }
            // Made through the ring on the member that served the role then.
            Some(Begun::Done {
                member,
                result,
                took,
                counted,
            }) => {
                let ok = result.is_ok();
                self.members
                    .end(role, counted, kind.counted(), len, ok, Some(took));
                called = member;
                (result, took)
            }
            None => {
                let started = self.members.begin(role, kind.counted(), len);
                let result = match &mut op {
                    MemOp::Read { offset, buf, .. } => called.read_at(buf, *offset),
                    MemOp::ReadV { offset, bufs, .. } => called.read_vectored_at(bufs, *offset),
                    other => other.apply(called.as_ref()),
                };
                let ok = result.is_ok();
                let elapsed = self
                    .members
                    .end(role, started, kind.counted(), len, ok, None);
                (result, elapsed)
            }
        };
        if let (Some(new), true) = (replacement, op.is_write()) {
            if let Err(e) = op.apply(new.as_ref()) {
                self.members.drop_failed_replacement(role, &new, &e);
            }
        }
        self.judge(role, &called, kind, result, elapsed)
            .map_err(|source| self.member_error(role, called.name(), kind, offset, len, source))
    }

    /// Hands `op`'s call to its member without waiting for it, where the member can
    /// (`member::Member::start`: a local member under `--local-io-deadline`); `None` otherwise
    /// (the call is then made by `member_io`).
    fn start(&self, op: &MemOp<'_>) -> Option<Begun> {
        let (kind, offset, len) = op.describe();
        let role = op.role();
        if kind != Op::Flush && offset + len > self.geometry.member_data_bytes(role) {
            return None; // member_io's bound check reports it
        }
        let member = self.members.slot(role).0?;
        let one: [&[u8]; 1];
        let call = match op {
            MemOp::Read { .. } | MemOp::ReadV { .. } => StartCall::Read { offset, len },
            MemOp::Write { buf, .. } => {
                one = [buf];
                StartCall::Write { offset, bufs: &one }
            }
            MemOp::WriteV { bufs, .. } => StartCall::Write { offset, bufs },
            MemOp::Trim { .. } => StartCall::Trim { offset, len },
            MemOp::Zero { .. } => StartCall::WriteZeroes { offset, len },
            MemOp::Flush { .. } => StartCall::Flush,
        };
        let call = member.start(call)?;
        let counted = self.members.begin(role, kind.counted(), len);
        Some(Begun::Started { call, counted })
    }

    fn member_error(
        &self,
        role: usize,
        name: &str,
        op: Op,
        offset: u64,
        len: u64,
        source: std::io::Error,
    ) -> IoError {
        IoError::Member {
            role,
            name: name.to_string(),
            op,
            offset,
            len,
            source: Arc::new(source),
        }
    }

    /// Fault policy for one finished member request of `called`: a write-type error or a
    /// timeout fails the member (the error is then absorbed: the array goes on without it) —
    /// except a lack of space (ENOSPC, EDQUOT), which is counted and returned, failing the
    /// request; a read error is counted (failing the member over the limit) and returned, so
    /// the request is repaired and retried from redundancy. A member swapped out of `role`
    /// while its call ran is no longer in use: its late error or timeout is not counted against,
    /// and never fails, the member serving the role now.
    fn judge(
        &self,
        role: usize,
        called: &Arc<dyn Member>,
        kind: Op,
        result: std::io::Result<()>,
        elapsed: Duration,
    ) -> std::io::Result<()> {
        let policy = self.members.policy();
        let timed_out = elapsed > policy.io_timeout
            || result
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::TimedOut);
        if !timed_out && result.is_ok() {
            return Ok(());
        }
        if !self.members.serves(role, called) {
            // A read is retried from redundancy; a write to a member out of use is moot.
            return match (result, kind) {
                (Err(e), Op::Read) => Err(e),
                _ => Ok(()),
            };
        }
        let fail = |reason| (self.members).try_fail_called(role, called, reason, self.geometry);
        let counters = self.members.faults(role);
        if timed_out {
            counters.note_timeout();
            let millis = elapsed.as_millis() as u64;
            let failed = fail(FaultReason::Timeout { millis });
            return match (result, kind, failed) {
                (Ok(()), _, _) => Ok(()),
                (Err(_), k, true) if k != Op::Read => Ok(()),
                (Err(e), _, _) => Err(e),
            };
        }
        let Err(e) = result else { return Ok(()) };
        if kind == Op::Read && (member::is_bad_block(&e) || member::is_unsettled(&e)) {
            // A range the member's bad-block list records, or a block whose checksum a torn
            // update may have left behind (the repair settles it): it answered, and is not
            // at fault.
            return Err(e);
        }
        if kind == Op::Read {
            if counters.note_read_error(&policy) {
                fail(FaultReason::ReadErrors {
                    count: policy.read_errors_max + 1,
                    window_secs: policy.read_error_window.as_secs(),
                });
            }
            return Err(e);
        }
        if is_no_space(&e) {
            // The storage under the member is full: not a member fault (see `is_no_space`).
            // The request fails; the caller marks what it may have left half-written.
            counters.note_no_space();
            return Err(e);
        }
        counters.note_write_error();
        if fail(FaultReason::WriteError(e.to_string())) {
            Ok(())
        } else {
            Err(e)
        }
    }

    /// Runs a batch: operations on the same member in order. Members whose share is large
    /// (at least the fan-out threshold, see [`crate::Array::set_fanout_min_bytes`]) run in parallel on
    /// scoped threads, the rest on the calling thread: for page-cache-speed members a thread
    /// costs more than the copy it would overlap, while flushes and large transfers gain.
    /// The batch has one deadline (`member::with_deadline`) that NBD requests and detached
    /// local calls both honour, so members stalled in one batch do not add up their timeouts
    /// (each one after the first adds at most its quarter-timeout grace).
    /// Every group runs even after a failure (a write batch must reach every member it can);
    /// returns the first error.
    pub(crate) fn run(&self, ops: Vec<MemOp<'_>>) -> Result<(), IoError> {
        // The request's deadline when it is earlier (a retry after a timeout). The scoped
        // threads of large shares carry it along (`member::carry_deadline`).
        let batch = Instant::now() + self.members.policy().io_timeout;
        let deadline = member::current_deadline().map_or(batch, |request| request.min(batch));
        member::with_deadline(deadline, || self.run_until(ops))
    }

    fn run_until(&self, ops: Vec<MemOp<'_>>) -> Result<(), IoError> {
        let mut groups: Vec<Vec<MemOp<'_>>> =
            (0..self.members.count()).map(|_| Vec::new()).collect();
        for op in ops {
            groups[op.role()].push(op);
        }
        let threshold = self.fanout.min_bytes();
        let groups: Vec<_> = groups
            .into_iter()
            .filter(|g| !g.is_empty())
            .map(coalesce)
            .collect();
        let (ringed, groups) = self.run_ring(groups, threshold);
        let (started, groups) = self.start_slow(groups);
        let (lanes, groups) = self.concurrent_lanes(groups);
        let (mut big, mut small): (Vec<_>, Vec<_>) =
            groups.into_iter().partition(|g| group_cost(g) >= threshold);
        if big.len() < 2 {
            small.append(&mut big);
        }
        if big.is_empty() && lanes.is_empty() {
            let mine = self.run_here(small);
            return ringed.and(mine).and(self.finish_started(started));
        }
        std::thread::scope(|scope| {
            let handles: Vec<_> = big
                .into_iter()
                .chain(lanes)
                .map(|group| {
                    scope.spawn(member::carry_deadline(move || self.run_group(group, None)))
                })
                .collect();
            let mine = self.run_here(small).and(self.finish_started(started));
            let mut first = Ok(());
            for handle in handles {
                let result = handle
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p));
                first = first.and(result);
            }
            ringed.and(first).and(mine)
        })
    }

    /// Runs through this thread's io_uring ring (`member::uring`) the groups it takes, all their
    /// reads and writes submitted together and waited for together, and returns the others.
    /// A group goes to the ring when its member offers a ring target for every operation
    /// (`Member::ring_target`: a local file member, the operation aligned if direct), its
    /// operations are reads and writes on disjoint ranges (so their order cannot be seen), and
    /// the measurement says the ring is faster (docs/PERFORMANCE.md "Member I/O submission"):
    /// direct members when the batch has two or more such operations, page-cache members only
    /// for the large shares that would otherwise fan out to threads; a member opened with
    /// `--member-io uring` always. Each operation is then judged as any other
    /// (`member_io_begun`), timed by its own completion.
    fn run_ring<'o>(
        &self,
        groups: Vec<Vec<MemOp<'o>>>,
        threshold: u64,
    ) -> (Result<(), IoError>, Vec<Vec<MemOp<'o>>>) {
        let called: Vec<Option<Arc<dyn Member>>> = groups
            .iter()
            .map(|g| {
                let role = g[0].role();
                let fits = g.iter().all(|op| {
                    let (_, offset, len) = op.describe();
                    ring_ask(op).is_some() && offset + len <= self.geometry.member_data_bytes(role)
                });
                match fits && disjoint(g) {
                    true => self.members.slot(role).0,
                    false => None,
                }
            })
            .collect();
        let kinds: Vec<Option<RingKind>> = groups
            .iter()
            .zip(&called)
            .map(|(g, member)| {
                let member = member.as_ref()?;
                let mut kind = RingKind {
                    direct: true,
                    forced: false,
                };
                for op in g {
                    let target = member.ring_target(ring_ask(op)?)?;
                    kind.direct &= target.is_direct();
                    kind.forced |= target.is_forced();
                }
                Some(kind)
            })
            .collect();
        let direct_ops: usize = groups
            .iter()
            .zip(&kinds)
            .filter(|(_, k)| k.is_some_and(|k| k.direct))
            .map(|(g, _)| g.len())
            .sum();
        let fans_out = groups.iter().filter(|g| group_cost(g) >= threshold).count() >= 2;
        let wanted: Vec<bool> = groups
            .iter()
            .zip(&kinds)
            .map(|(g, kind)| {
                kind.is_some_and(|k| {
                    k.forced
                        || (k.direct && direct_ops >= 2)
                        || (!k.direct && fans_out && group_cost(g) >= threshold)
                })
            })
            .collect();
        // This thread's ring is made only when a batch has something for it.
        let ready = wanted.iter().any(|&w| w) && uring::ready();
        let mut ring: Vec<(Vec<MemOp<'o>>, Arc<dyn Member>)> = Vec::new();
        let mut rest = Vec::new();
        for ((g, member), take) in groups.into_iter().zip(called).zip(wanted) {
            match (ready && take, member) {
                (true, Some(member)) => ring.push((g, member)),
                _ => rest.push(g),
            }
        }
        if ring.is_empty() {
            return (Ok(()), rest);
        }
        // Asked again: a target borrows its member, and the answer may have changed since
        // (a fence closed); an operation without one now is the member's own call.
        let mut counted = Vec::new();
        let mut own: Vec<Vec<bool>> = Vec::new();
        let slow_after = self.members.policy().io_timeout * 3 / 4;
        let results = {
            let mut ios: Vec<RingIo<'_, '_, '_>> = Vec::new();
            for (g, member) in ring.iter_mut() {
                let mut mine = Vec::new();
                for op in g.iter_mut() {
                    let target = ring_ask(op).and_then(|ask| member.ring_target(ask));
                    mine.push(target.is_none());
                    if let Some(target) = target {
                        let (kind, _, len) = op.describe();
                        counted.push(self.members.begin(op.role(), kind.counted(), len));
                        ios.push(RingIo {
                            target,
                            data: ring_data(op),
                        });
                    }
                }
                own.push(mine);
            }
            uring::submit(&mut ios, slow_after)
        };
        let mut results = results.into_iter().zip(counted);
        let mut first = Ok(());
        for ((g, member), own) in ring.into_iter().zip(own) {
            for (op, own) in g.into_iter().zip(own) {
                let begun = match own {
                    true => None,
                    false => {
                        let ((result, took), counted) = results.next().expect("one per op");
                        Some(Begun::Done {
                            member: Arc::clone(&member),
                            result,
                            took,
                            counted,
                        })
                    }
                };
                first = first.and(self.member_io_begun(op, begun));
            }
        }
        (first, rest)
    }

    /// Starts at once, from this thread, every operation of the groups that
    /// [`Runner::concurrent_lanes`] would deal into threads (slow members, reads and writes on
    /// disjoint ranges) whose member can start its calls itself ([`Member::start`]: a disk
    /// model queues them in the model, `Detached` hands them to its workers); returns them
    /// begun, to [`Runner::finish_started`], and the groups left (an operation its member did
    /// not start stays in its group). A thread spawned per operation instead waited, on the
    /// loaded 2-core machine, for a scheduler slice before its call began: 2 of a RAID 0
    /// request's 4 member reads started 3.5 ms late in one request of eight (a new thread
    /// queues behind the running ones; a woken one does not), so `sim:` arrays read
    /// sequentially at 0.6-0.8x the rate of their disks (DESIGN "raidkit plan", Validation).
    fn start_slow<'o>(
        &self,
        groups: Vec<Vec<MemOp<'o>>>,
    ) -> (Vec<(MemOp<'o>, Begun)>, Vec<Vec<MemOp<'o>>>) {
        let speed = self.members.speed();
        let mut started = Vec::new();
        let mut rest = Vec::with_capacity(groups.len());
        for group in groups {
            let eligible = speed.wants_concurrency(group[0].role())
                && group.iter().all(|op| ring_ask(op).is_some())
                && disjoint(&group);
            if !eligible {
                rest.push(group);
                continue;
            }
            let mut left = Vec::new();
            for op in group {
                match self.start(&op) {
                    Some(begun) => started.push((op, begun)),
                    None => left.push(op),
                }
            }
            if !left.is_empty() {
                rest.push(left);
            }
        }
        (started, rest)
    }

    /// Waits for the operations [`Runner::start_slow`] began, in turn; returns the first error
    /// (every one is waited for and judged).
    fn finish_started(&self, started: Vec<(MemOp<'_>, Begun)>) -> Result<(), IoError> {
        started
            .into_iter()
            .map(|(op, begun)| self.member_io_begun(op, Some(begun)))
            .fold(Ok(()), Result::and)
    }

    /// Takes out of `groups` the operations of members slow enough that they are better
    /// issued at once (`Speed::wants_concurrency`: disks, whose queue reorders what it holds),
    /// where the order of a group cannot be seen (reads and writes on disjoint ranges), and
    /// deals them round-robin into at most [`CONCURRENT_LANES_MAX`] lanes, each run on a
    /// thread of its own; returns the lanes and the groups left. Issued one after the other
    /// (a member's operations in order, the members in turn), a write-back apply's reads and
    /// writes of several stripes reached each disk one at a time: its queue never held two
    /// to reorder (docs/PERFORMANCE.md "Destage on disks: a batch's operations at once").
    fn concurrent_lanes<'o>(
        &self,
        groups: Vec<Vec<MemOp<'o>>>,
    ) -> (Vec<Vec<MemOp<'o>>>, Vec<Vec<MemOp<'o>>>) {
        let speed = self.members.speed();
        if !groups.iter().any(|g| speed.wants_concurrency(g[0].role())) {
            return (Vec::new(), groups);
        }
        let (slow, rest): (Vec<_>, Vec<_>) = groups.into_iter().partition(|g| {
            speed.wants_concurrency(g[0].role())
                && g.iter().all(|op| ring_ask(op).is_some())
                && disjoint(g)
        });
        let ops: usize = slow.iter().map(Vec::len).sum();
        if ops < 2 {
            return (Vec::new(), slow.into_iter().chain(rest).collect());
        }
        let count = ops.min(CONCURRENT_LANES_MAX);
        let mut lanes: Vec<Vec<MemOp<'o>>> = (0..count).map(|_| Vec::new()).collect();
        for (i, op) in slow.into_iter().flatten().enumerate() {
            lanes[i % count].push(op);
        }
        (lanes, rest)
    }

    /// Runs `groups` on the calling thread, one after the other. With two or more, the first
    /// call of each is handed to its member first where the member can start calls ahead
    /// ([`Runner::start`]): members stalled in one batch then wait out its deadline together,
    /// not one after the other.
    fn run_here(&self, groups: Vec<Vec<MemOp<'_>>>) -> Result<(), IoError> {
        let mut begun: Vec<Option<Begun>> = Vec::new();
        if groups.len() > 1 {
            begun = groups.iter().map(|g| self.start(g.first()?)).collect();
        }
        let mut begun = begun.into_iter();
        groups
            .into_iter()
            .map(|g| self.run_group(g, begun.next().flatten()))
            .fold(Ok(()), Result::and)
    }

    /// Runs operations in order (one member's group, or a lane of [`Runner::concurrent_lanes`]);
    /// the first one's call may have begun already.
    fn run_group(&self, group: Vec<MemOp<'_>>, begun: Option<Begun>) -> Result<(), IoError> {
        let mut begun = begun;
        let mut first = Ok(());
        for op in group {
            first = first.and(self.member_io_begun(op, begun.take()));
        }
        first
    }
}

/// A call made before its group's turn, and its counters' start.
enum Begun {
    /// Handed to its member ahead of waiting for it ([`Runner::start`]).
    Started {
        call: member::Started,
        counted: iostats::Started,
    },
    /// Made through the ring ([`Runner::run_ring`]) on `member`, and complete.
    Done {
        member: Arc<dyn Member>,
        result: std::io::Result<()>,
        took: Duration,
        counted: iostats::Started,
    },
}

/// How a group may go to the ring: its member's ring targets all direct, any forced
/// (`member::MemberIo::Uring`).
#[derive(Clone, Copy)]
struct RingKind {
    direct: bool,
    forced: bool,
}

/// What `op` asks of a ring (`None`: not a read or write).
fn ring_ask(op: &MemOp<'_>) -> Option<RingAsk> {
    Some(match op {
        MemOp::Read { offset, buf, .. } => RingAsk::read(*offset, std::slice::from_ref(buf)),
        MemOp::ReadV { offset, bufs, .. } => RingAsk::read(*offset, bufs),
        MemOp::Write { offset, buf, .. } => RingAsk::write(*offset, std::slice::from_ref(buf)),
        MemOp::WriteV { offset, bufs, .. } => RingAsk::write(*offset, bufs),
        _ => return None,
    })
}

/// `op`'s buffers for the ring (a read or write).
fn ring_data<'s, 'b>(op: &'s mut MemOp<'b>) -> RingData<'s, 'b> {
    match op {
        MemOp::Read { buf, .. } => RingData::Read(std::slice::from_mut(buf)),
        MemOp::ReadV { bufs, .. } => RingData::Read(bufs),
        MemOp::Write { buf, .. } => RingData::Write(std::slice::from_ref(buf)),
        MemOp::WriteV { bufs, .. } => RingData::Write(bufs),
        _ => unreachable!("only reads and writes go to the ring"),
    }
}

/// True when no two operations of `group` touch the same bytes: then the order in which the
/// ring completes them cannot be seen.
fn disjoint(group: &[MemOp<'_>]) -> bool {
    let mut ranges: Vec<(u64, u64)> = group
        .iter()
        .map(|op| {
            let (_, offset, len) = op.describe();
            (offset, offset + len)
        })
        .collect();
    ranges.sort_unstable();
    ranges.windows(2).all(|w| w[0].1 <= w[1].0)
}

/// Bytes a group moves; a flush (milliseconds on real disks) always counts as large.
fn group_cost(group: &[MemOp<'_>]) -> u64 {
    group.iter().fold(0u64, |cost, op| {
        let bytes = match op {
            MemOp::Trim { .. } => 0,
            MemOp::Flush { .. } => u64::MAX,
            moves => moves.describe().2,
        };
        cost.saturating_add(bytes)
    })
}

/// Bytes of a vectored operation's buffers.
fn total<B: AsRef<[u8]>>(bufs: &[B]) -> u64 {
    bufs.iter().map(|b| b.as_ref().len() as u64).sum()
}

/// Merges consecutive operations of one member on adjacent ranges into one: trims and
/// write-zeroes into one longer range, reads and writes into one vectored request (the chunks
/// a request has in consecutive stripes of a member are adjacent on it: one `preadv` or one
/// NBD request instead of one per chunk). Order is kept: only neighbours in the batch merge.
fn coalesce(ops: Vec<MemOp<'_>>) -> Vec<MemOp<'_>> {
    let mut out: Vec<MemOp<'_>> = Vec::with_capacity(ops.len());
    for op in ops {
        match out.pop() {
            None => out.push(op),
            Some(prev) => match merge(prev, op) {
                Ok(merged) => out.push(merged),
                Err((prev, op)) => {
                    out.push(prev);
                    out.push(op);
                }
            },
        }
    }
    out
}

/// `prev` and `op` as one operation, or both back when they do not continue each other.
fn merge<'a>(prev: MemOp<'a>, op: MemOp<'a>) -> Result<MemOp<'a>, (MemOp<'a>, MemOp<'a>)> {
    use MemOp::*;
    let (kind, offset, len) = prev.describe();
    let (next_kind, next_offset, _) = op.describe();
    let continues = prev.role() == op.role()
        && kind == next_kind
        && kind != Op::Flush
        && offset + len == next_offset;
    if !continues {
        return Err((prev, op));
    }
    match (prev, op) {
        (Trim { role, offset, len }, Trim { len: more, .. }) => Ok(Trim {
            role,
            offset,
            len: len + more,
        }),
        (Zero { role, offset, len }, Zero { len: more, .. }) => Ok(Zero {
            role,
            offset,
            len: len + more,
        }),
        (Read { role, offset, buf }, Read { buf: next, .. }) => Ok(ReadV {
            role,
            offset,
            bufs: vec![buf, next],
        }),
        (
            ReadV {
                role,
                offset,
                mut bufs,
            },
            Read { buf: next, .. },
        ) => {
            bufs.push(next);
            Ok(ReadV { role, offset, bufs })
        }
        (Write { role, offset, buf }, Write { buf: next, .. }) => Ok(WriteV {
            role,
            offset,
            bufs: vec![buf, next],
        }),
        (
            WriteV {
                role,
                offset,
                mut bufs,
            },
            Write { buf: next, .. },
        ) => {
            bufs.push(next);
            Ok(WriteV { role, offset, bufs })
        }
        (prev, op) => Err((prev, op)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(ops: &[MemOp<'_>]) -> Vec<(usize, Op, u64, u64, usize)> {
        ops.iter()
            .map(|op| {
                let (kind, offset, len) = op.describe();
                let parts = match op {
                    MemOp::ReadV { bufs, .. } => bufs.len(),
                    MemOp::WriteV { bufs, .. } => bufs.len(),
                    _ => 1,
                };
                (op.role(), kind, offset, len, parts)
            })
            .collect()
    }

    #[test]
    fn adjacent_operations_of_a_member_merge_in_order() {
        let data = [7u8; 100];
        let (mut a, mut b, mut c, mut d) =
            (vec![0u8; 10], vec![0u8; 20], vec![0u8; 5], vec![0u8; 5]);
        let ops = vec![
            MemOp::Read {
                role: 0,
                offset: 0,
                buf: &mut a,
            },
            MemOp::Read {
                role: 0,
                offset: 10,
                buf: &mut b,
            },
            MemOp::Read {
                role: 0,
                offset: 30,
                buf: &mut c,
            },
            // A gap: not merged.
            MemOp::Read {
                role: 0,
                offset: 40,
                buf: &mut d,
            },
            // Another member.
            MemOp::Write {
                role: 1,
                offset: 45,
                buf: &data[..5],
            },
            MemOp::Write {
                role: 1,
                offset: 50,
                buf: &data[5..15],
            },
            // A write after a read of the same range: different kinds never merge.
            MemOp::Trim {
                role: 1,
                offset: 60,
                len: 4,
            },
            MemOp::Trim {
                role: 1,
                offset: 64,
                len: 4,
            },
            MemOp::Zero {
                role: 1,
                offset: 68,
                len: 4,
            },
            MemOp::Flush { role: 1 },
            MemOp::Flush { role: 1 },
        ];
        let merged = coalesce(ops);
        assert_eq!(
            shape(&merged),
            vec![
                (0, Op::Read, 0, 35, 3),
                (0, Op::Read, 40, 5, 1),
                (1, Op::Write, 45, 15, 2),
                (1, Op::Trim, 60, 8, 1),
                (1, Op::WriteZeroes, 68, 4, 1),
                (1, Op::Flush, 0, 0, 1),
                (1, Op::Flush, 0, 0, 1),
            ]
        );
        // The merged read fills the original buffers in order.
        let member = member::MemMember::new("m", 1000).unwrap();
        let pattern: Vec<u8> = (0..100).collect();
        member.write_at(&pattern, 0).unwrap();
        let mut merged = merged;
        if let MemOp::ReadV { offset, bufs, .. } = &mut merged[0] {
            member.read_vectored_at(bufs, *offset).unwrap();
        }
        drop(merged);
        assert_eq!([a, b, c].concat(), pattern[..35].to_vec());
    }
}

//! Background work of a volume: one worker thread that, whenever the state machine in `work`
//! leaves it free, picks the most urgent task from the volume's state
//! ([`VolumeCore::next_task`], ranked by `work::choose`: replace > rebuild > resync or initial
//! sync > units left unsynced by a lack of space > requested scrub), runs it in throttled
//! steps, and checkpoints its progress in the superblocks so a restarted server resumes it.
//!
//! Throttle ([`Pacer`], like md's speed_limit_min/max, per member): after each step of `b`
//! bytes the next step may start `b / rate` seconds later, where `rate` is the maximum when no
//! client request arrived since the previous step and the minimum otherwise. So the rate never
//! exceeds the maximum, and never falls below the minimum (less the step's own I/O time) even
//! under client load.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use engine::{MemberHealth, SyncMode};

use crate::status::SCRUB_MISMATCHES_LISTED_MAX;
use crate::status::{MismatchLocation, ScrubReport, SpeedLimits, TaskKind, TaskStatus};
use crate::volume::{VolumeCore, VolumeError};
use crate::work::{choose, Facts, ScrubPosition, Task, Worker};

/// Largest step of background I/O per member.
const STEP_BYTES_MAX: u64 = 4 << 20;
/// Progress is checkpointed at least this often...
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(5);
/// ...or every this many percent of the work, but not more often than every
/// `CHECKPOINT_INTERVAL_MIN` (each checkpoint flushes the member and every superblock).
const CHECKPOINT_PERCENT: u64 = 5;
const CHECKPOINT_INTERVAL_MIN: Duration = Duration::from_secs(1);
/// Consecutive failed steps after which a task gives up (until the next state change).
const STEP_ERRORS_MAX: u32 = 10;
/// After a member refused a resync write for lack of space, the next try waits this long.
const NO_SPACE_RETRY: Duration = Duration::from_secs(1);

pub(crate) fn spawn(core: std::sync::Arc<VolumeCore>) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(format!("raidkit-bg-{}", core.name()))
        .spawn(move || worker(&core))
        .expect("cannot start the background worker thread")
}

fn worker(core: &VolumeCore) {
    loop {
        match core.work.worker() {
            Worker::Stopped => return,
            Worker::Idle => {}
            _ => {
                core.work.wait_change(Duration::from_millis(200));
                continue;
            }
        }
        let Some(task) = core.next_task() else {
            core.work.wait_change(Duration::from_millis(200));
            continue;
        };
        if !core.work.start(task) {
            continue; // paused, held or stopped since: the state decides again
        }
        if let Err(e) = core.run_task(task) {
            core.work.lock().last_error = Some(format!("{task:?}: {e}"));
            // Let the state change (a settle, an operator action) before retrying.
            core.work.wait_change(Duration::from_millis(500));
        }
        core.work.finish();
    }
}

/// Paces background steps (see the module docs) and measures their rate.
pub(crate) struct Pacer {
    next: Instant,
    started: Instant,
    last_client_requests: u64,
    rate: RateWindow,
    /// The last step's size (per member) and whether clients were busy then: the wait after it
    /// is recomputed from the limits in force, so a limit changed mid-wait applies at once.
    last_step_bytes: u64,
    last_busy: bool,
}

impl Pacer {
    fn new(core: &VolumeCore) -> Pacer {
        let now = Instant::now();
        Pacer {
            next: now,
            started: now,
            last_client_requests: core.array.client_requests(),
            rate: RateWindow::new(now),
            last_step_bytes: 0,
            last_busy: false,
        }
    }

    /// When the next step may start after the last one, at the limits in force now.
    fn deadline(&self, limits: SpeedLimits) -> Instant {
        let rate = if self.last_busy {
            limits.min_bytes_per_sec
        } else {
            limits.max_bytes_per_sec
        }
        .max(1);
        self.started + Duration::from_secs_f64(self.last_step_bytes as f64 / rate as f64)
    }

    /// Step size for the current maximum: about an eighth of a second's worth, whole units.
    fn step_bytes(&self, core: &VolumeCore, unit: u64) -> u64 {
        let max = core.work.limits().max_bytes_per_sec.max(1);
        let want = (max / 8).clamp(unit, STEP_BYTES_MAX.max(unit));
        want / unit * unit
    }

    /// True when the next step may not start yet (the throttle holds it back).
    fn must_wait(&self) -> bool {
        Instant::now() < self.next
    }

    /// Waits until a step may start; false when the task should yield instead.
    fn wait_turn(&mut self, core: &VolumeCore) -> bool {
        loop {
            if core.work.should_yield() {
                return false;
            }
            self.next = self.deadline(core.work.limits());
            let now = Instant::now();
            if self.next <= now {
                self.started = now;
                return true;
            }
            std::thread::sleep((self.next - now).min(Duration::from_millis(50)));
        }
    }

    /// Accounts a finished step of `bytes` (per member).
    fn done(&mut self, core: &VolumeCore, bytes: u64) {
        let clients = core.array.client_requests();
        self.last_busy = clients != self.last_client_requests;
        self.last_client_requests = clients;
        self.last_step_bytes = bytes;
        let now = Instant::now();
        self.next = self.deadline(core.work.limits());
        self.rate.add(bytes, now);
    }

    fn rate(&self) -> u64 {
        self.rate.rate(Instant::now())
    }
}

/// A task's rate in bytes per second, measured over windows of [`RateWindow::WINDOW`]. Until
/// the first window closes, the part of it seen so far stands in (once it is
/// [`RateWindow::FIRST_ESTIMATE_AFTER`] long), so the first status after a start shows a rate
/// and an ETA rather than "0 B/s".
struct RateWindow {
    start: Instant,
    bytes: u64,
    /// The last closed window's rate; None until one has closed.
    closed: Option<u64>,
}

impl RateWindow {
    const WINDOW: Duration = Duration::from_secs(1);
    const FIRST_ESTIMATE_AFTER: Duration = Duration::from_millis(100);

    fn new(now: Instant) -> RateWindow {
        RateWindow {
            start: now,
            bytes: 0,
            closed: None,
        }
    }

    fn add(&mut self, bytes: u64, now: Instant) {
        self.bytes += bytes;
        let elapsed = now.duration_since(self.start);
        if elapsed >= Self::WINDOW {
            self.closed = Some(per_second(self.bytes, elapsed));
            self.start = now;
            self.bytes = 0;
        }
    }

    /// Bytes per second; 0 while nothing can be said yet.
    fn rate(&self, now: Instant) -> u64 {
        match self.closed {
            Some(rate) => rate,
            None => {
                let elapsed = now.duration_since(self.start);
                if elapsed >= Self::FIRST_ESTIMATE_AFTER {
                    per_second(self.bytes, elapsed)
                } else {
                    0
                }
            }
        }
    }
}

fn per_second(bytes: u64, over: Duration) -> u64 {
    (bytes as f64 / over.as_secs_f64()) as u64
}

/// When to record progress in the superblocks.
struct Checkpoint {
    at: Instant,
    done: u64,
    total: u64,
}

impl Checkpoint {
    fn new(done: u64, total: u64) -> Checkpoint {
        Checkpoint {
            at: Instant::now(),
            done,
            total,
        }
    }
    fn due(&mut self, done: u64) -> bool {
        let percent = (done - self.done).saturating_mul(100) / self.total.max(1);
        let elapsed = self.at.elapsed();
        let by_percent = percent >= CHECKPOINT_PERCENT && elapsed >= CHECKPOINT_INTERVAL_MIN;
        if elapsed >= CHECKPOINT_INTERVAL || by_percent {
            self.at = Instant::now();
            self.done = done;
            return true;
        }
        false
    }
}

impl VolumeCore {
    /// The most urgent task the volume's state calls for, if any (see [`choose`]).
    pub(crate) fn next_task(&self) -> Option<Task> {
        choose(&self.facts())
    }

    /// What [`choose`] looks at, read from the volume's state.
    fn facts(&self) -> Facts {
        let meta = self.lock_meta();
        let health = self.array.health_snapshot();
        let recovering = health.iter().position(|h| *h == MemberHealth::Recovering);
        // A missing or faulty role with a spare big enough for it (else nothing to do: no spin).
        let unused = |h: &MemberHealth| matches!(h, MemberHealth::Faulty | MemberHealth::Missing);
        let fits = |role: usize| {
            let needed = meta.template.roles[role].data_bytes;
            meta.spares.iter().any(|h| h.sb.data_bytes >= needed)
        };
        let spare_for = (0..health.len())
            .find(|&r| unused(&health[r]) && fits(r))
            .filter(|_| {
                self.array
                    .geometry()
                    .survives(&self.array.present_snapshot())
            });
        let resync = meta.resync.map(|r| r.kind);
        let replacing = meta.replacing.as_ref().map(|(role, _)| *role);
        drop(meta);
        let work = self.work.lock();
        let retry_due = work.unsynced_not_before.is_none_or(|t| Instant::now() >= t);
        Facts {
            replacing,
            recovering,
            spare_for,
            all_in_sync: health.iter().all(|h| *h == MemberHealth::InSync),
            resync,
            unsynced_due: retry_due && self.array.unsynced_units() > 0,
            scrub: work.scrub_request,
            deferred: work.deferred.is_some(),
        }
    }

    /// A replace or rebuild is due: [`choose`] would pick it before a scrub.
    fn repair_of_redundancy_due(&self) -> bool {
        let f = self.facts();
        f.replacing.is_some() || f.recovering.is_some() || f.spare_for.is_some()
    }

    fn run_task(&self, task: Task) -> Result<(), VolumeError> {
        let result = match task {
            Task::Replace(role) => self.run_replace(role),
            Task::Rebuild(role) => self.run_rebuild(role),
            Task::CrashResync => self.run_resync(TaskKind::Resync),
            Task::InitialSync => self.run_resync(TaskKind::InitialSync),
            Task::Unsynced => self.run_unsynced(),
            Task::Scrub { repair } => self.run_scrub(repair),
        };
        self.settle()?;
        result
    }

    fn report(&self, kind: TaskKind, role: Option<usize>, done: u64, total: u64, pacer: &Pacer) {
        self.report_of(kind, role, done, total, None, pacer)
    }

    /// [`Self::report`] of a copy of only the used regions of a member of `of_member` bytes.
    fn report_of(
        &self,
        kind: TaskKind,
        role: Option<usize>,
        done: u64,
        total: u64,
        of_member: Option<u64>,
        pacer: &Pacer,
    ) {
        let rate = pacer.rate();
        self.work.progress(TaskStatus {
            kind,
            role,
            done_bytes: done,
            total_bytes: total,
            bytes_per_sec: rate,
            of_member_bytes: of_member,
            eta_secs: crate::status::eta(done, total, rate),
            paused: None,
        });
    }

    fn run_rebuild(&self, role: usize) -> Result<(), VolumeError> {
        let health = self.array.health_of(role);
        if matches!(health, MemberHealth::Faulty | MemberHealth::Missing)
            && !self.promote_spare(role)?
        {
            return Ok(());
        }
        let total = self.array.geometry().member_data_bytes(role);
        let start = self.lock_meta().roles[role]
            .as_ref()
            .and_then(|h| h.sb.recovery_offset_bytes)
            .unwrap_or(0);
        std::thread::scope(|scope| {
            let mut pipeline = self.array.rebuild_pipeline(role, scope);
            self.rebuild_steps(role, start, total, &mut pipeline)
        })
    }

    /// The rebuild loop over `[start, total)` of `role`. Steps overlap (one step's write with
    /// the next one's reads, see `engine::RebuildPipeline`), but no stripe lock is held while
    /// the pacer makes us wait, while the metadata lock is taken (settle, checkpoint: an
    /// operator's `remove` holds that lock while it waits for every stripe lock) or at the end.
    fn rebuild_steps(
        &self,
        role: usize,
        start: u64,
        total: u64,
        pipeline: &mut engine::RebuildPipeline<'_>,
    ) -> Result<(), VolumeError> {
        let chunk = self.chunk_bytes();
        let rows_max = (engine::STRIPE_LOCKS_COUNT / 2) as u64;
        let mut pacer = Pacer::new(self);
        let mut checkpoint = Checkpoint::new(start, total);
        // A re-added member: only the ranges of dirty regions (the rest it still holds). Else
        // with a used map, only the regions that hold data: the others read as zeroes and
        // their stripes are zeroed on every member (this one included: it is attached and
        // receives every write) by the first write that reaches them. Taken after the attach,
        // under the map's lock (see `UsedMap::used_regions`).
        let partial = self.lock_meta().partial_rebuild[role].clone();
        let (partial, of_member) = match partial {
            Some(p) => (Some(p), None),
            None => match self.used_member_ranges(role) {
                Some(used) => (Some(used), Some(total)),
                None => (None, None),
            },
        };
        let work = crate::bitmap_volume::ranges_bytes(partial.as_deref(), start, total);
        let mut done = 0;
        let mut offset = start;
        let mut errors = 0;
        let mut settled = self.array.state_epoch();
        self.settle()?;
        while offset < total {
            let Some((from, end)) =
                crate::bitmap_volume::next_piece(partial.as_deref(), offset, total)
            else {
                break;
            };
            offset = from;
            if pacer.must_wait() {
                pipeline.drain();
            }
            if self.array.health_of(role) != MemberHealth::Recovering {
                return Ok(());
            }
            if !pacer.wait_turn(self) {
                // Paused or stopping (a clean shutdown): save how far the rebuild got, so a
                // restart resumes here rather than at the last periodic checkpoint.
                pipeline.drain();
                if offset > start && self.array.health_of(role) == MemberHealth::Recovering {
                    self.checkpoint_rebuild(role, Some(offset))?;
                }
                return Ok(());
            }
            let len = pacer
                .step_bytes(self, chunk)
                .min(rows_max * chunk)
                .min(end - offset);
            let stepped = pipeline.step(offset, len);
            if let Some((_, e)) = pipeline.take_no_space() {
                // The new member's filesystem is full: end this run; the next one starts at
                // the last checkpoint, which never passes a step that was not written.
                return Err(e.into());
            }
            if let Err(e) = stepped {
                errors += 1;
                if errors > STEP_ERRORS_MAX {
                    return Err(e.into());
                }
                pipeline.drain();
                settled = self.array.state_epoch();
                self.settle()?;
                continue;
            }
            errors = 0;
            if self.array.state_epoch() != settled {
                pipeline.drain();
                settled = self.array.state_epoch();
                self.settle()?;
            }
            offset += len;
            done += len;
            pacer.done(self, len);
            // A full rebuild shows its offset; a partial one the dirty bytes rebuilt.
            let (shown, of) = match partial {
                Some(_) => (done, work),
                None => (offset, total),
            };
            self.report_of(TaskKind::Rebuild, Some(role), shown, of, of_member, &pacer);
            if checkpoint.due(offset) && offset < total {
                pipeline.drain();
                if let Some((_, e)) = pipeline.take_no_space() {
                    return Err(e.into());
                }
                self.checkpoint_rebuild(role, Some(offset))?;
            }
        }
        pipeline.drain();
        if let Some((_, e)) = pipeline.take_no_space() {
            return Err(e.into());
        }
        self.settle()?;
        if self.array.health_of(role) == MemberHealth::Recovering {
            self.checkpoint_rebuild(role, None)?;
        }
        Ok(())
    }

    /// Records `role`'s rebuild progress after making the rebuilt data durable; `None`: the
    /// rebuild is complete and the member becomes in sync.
    fn checkpoint_rebuild(&self, role: usize, offset: Option<u64>) -> Result<(), VolumeError> {
        if let Some(member) = self.array.member(role) {
            let flushed = member.flush();
            if let Err(source) = flushed {
                if engine::is_no_space(&source) {
                    // Not the new member's fault: the rebuild tries again later.
                    return Err(VolumeError::Array(engine::IoError::Member {
                        role,
                        name: member.name().to_string(),
                        op: engine::Op::Flush,
                        offset: 0,
                        len: 0,
                        source: std::sync::Arc::new(source),
                    }));
                }
                self.array.try_fail_member(
                    role,
                    engine::FaultReason::WriteError("flush of rebuilt data failed".into()),
                );
                return self.settle();
            }
        }
        let mut meta = self.lock_meta();
        if offset.is_none() && !self.array.finish_rebuild(role) {
            return Ok(());
        }
        if let Some(held) = meta.roles[role].as_mut() {
            held.sb.recovery_offset_bytes = offset;
        }
        if offset.is_none() {
            meta.partial_rebuild[role] = None;
        }
        self.write_superblocks(&mut meta)?;
        drop(meta);
        if offset.is_none() {
            self.at_risk_rebuilt();
        }
        Ok(())
    }

    /// Copies `role` onto its replacement from the recorded offset (0 for a new replace or
    /// after a crash; where a clean shutdown stopped it otherwise), then gives it the role.
    fn run_replace(&self, role: usize) -> Result<(), VolumeError> {
        let total = self.array.geometry().member_data_bytes(role);
        let chunk = self.chunk_bytes();
        let mut pacer = Pacer::new(self);
        let mut offset = self.replace_offset(role).min(total);
        // With a used map only the regions holding data are copied (the target receives every
        // write meanwhile, the zeroing of a region's first write included).
        let used = self.used_member_ranges(role);
        let of_member = used.as_ref().map(|_| total);
        let work = crate::bitmap_volume::ranges_bytes(used.as_deref(), offset, total);
        let mut done = 0;
        while offset < total {
            if self.array.health_of(role) != MemberHealth::InSync {
                return self.replace_becomes_rebuild(role);
            }
            let Some((from, end)) =
                crate::bitmap_volume::next_piece(used.as_deref(), offset, total)
            else {
                break;
            };
            offset = from;
            if !pacer.wait_turn(self) {
                // Paused or stopping (a clean shutdown): record how far the copy got, so the
                // next start resumes the replace there.
                return self.checkpoint_replace(role, offset);
            }
            let len = pacer.step_bytes(self, chunk).min(end - offset);
            if !self.array.replace_step(role, offset, len)? {
                return self.abandon_replace(role);
            }
            self.settle()?;
            offset += len;
            done += len;
            pacer.done(self, len);
            let (shown, of) = match used {
                Some(_) => (done, work),
                None => (offset, total),
            };
            self.report_of(TaskKind::Replace, Some(role), shown, of, of_member, &pacer);
        }
        self.finish_replace(role)
    }

    /// The resync after a crash or the initial sync (`kind` says which, for `status`).
    fn run_resync(&self, kind: TaskKind) -> Result<(), VolumeError> {
        let units = self.array.sync_unit_count();
        let unit_bytes = self.sync_unit_array_bytes();
        let pending = self
            .lock_meta()
            .resync
            .expect("chosen for a pending resync");
        let start = pending.offset / unit_bytes;
        let chunk = self.chunk_bytes();
        // With a bitmap after a crash only the units of dirty regions are resynced (and all
        // from `full_from` on); progress counts those units.
        let full_from = pending.full_from;
        self.resync_progress
            .store(start * unit_bytes, std::sync::atomic::Ordering::Release);
        let left = self.resync_units_left(start, units, full_from);
        // Resumed after it returned (the window closed, a pause): counted on from there.
        let counted = self.work.lock().resync_counted.take();
        let (mut done, total) = match counted {
            Some((done, _)) if start > 0 => (done, done + left),
            _ => (0, left),
        };
        let keep_count = |done: u64| self.work.lock().resync_counted = Some((done, total));
        let mut pacer = Pacer::new(self);
        let mut unit = self.next_resync_unit(start, units, full_from);
        while unit < units {
            let all_in_sync = self
                .array
                .health_snapshot()
                .iter()
                .all(|h| *h == MemberHealth::InSync);
            if !all_in_sync || !pacer.wait_turn(self) {
                keep_count(done);
                return Ok(());
            }
            let step = (pacer.step_bytes(self, chunk) / chunk).min(units - unit);
            let (synced, reached) = self.resync_step(unit, unit + step, full_from)?;
            self.settle()?;
            done += synced;
            pacer.done(self, synced.max(1) * chunk);
            // Published only now that every unit below `reached` is synced: writes trust the
            // parity below it (see `resync_trust`).
            self.resync_progress
                .store(reached * unit_bytes, std::sync::atomic::Ordering::Release);
            let mut meta = self.lock_meta();
            meta.resync.as_mut().expect("only this task ends it").offset = reached * unit_bytes;
            drop(meta);
            self.report(kind, None, done * chunk, total.max(done) * chunk, &pacer);
            if reached < unit + step {
                keep_count(done);
                return Ok(()); // a member left: the resync waits for it to be in sync again
            }
            unit = self.next_resync_unit(reached, units, full_from);
        }
        self.trust_synced_parity();
        let mut meta = self.lock_meta();
        meta.resync = None;
        let result = self.write_superblocks(&mut meta);
        drop(meta);
        self.resync_finished();
        result
    }

    /// Resyncs the units writes refused for lack of space may have half-written, one at a
    /// time under its lock. Still no space: tries again after [`NO_SPACE_RETRY`].
    fn run_unsynced(&self) -> Result<(), VolumeError> {
        let chunk = self.chunk_bytes();
        let mut pacer = Pacer::new(self);
        let total = self.array.unsynced_units();
        let mut done = 0;
        loop {
            if !pacer.wait_turn(self) {
                return Ok(());
            }
            let result = {
                let _gate = self.begin_write()?;
                self.array.resync_next_unsynced()
            };
            match result {
                None => return Ok(()),
                Some(Ok(found)) if !found.checked => return Ok(()), // degraded: kept
                Some(Ok(found)) => self.report_data_changes(&found),
                Some(Err(e)) if e.is_no_space() => {
                    self.work.lock().unsynced_not_before = Some(Instant::now() + NO_SPACE_RETRY);
                    return Ok(());
                }
                Some(Err(e)) => return Err(e.into()),
            }
            self.settle()?;
            done += 1;
            pacer.done(self, chunk);
            let left = self.array.unsynced_units();
            self.report(
                TaskKind::Resync,
                None,
                done * chunk,
                (done + left).max(total) * chunk,
                &pacer,
            );
        }
    }

    /// Resyncs the units of `[from, to)` that await it. Returns how many were synced and the
    /// unit reached: `to`, or the first unit that could not be synced because a member left
    /// meanwhile (it must not count as synced).
    fn resync_step(
        &self,
        from: u64,
        to: u64,
        full_from: Option<u64>,
    ) -> Result<(u64, u64), VolumeError> {
        let _gate = self.begin_write()?;
        let mut synced = 0;
        for u in from..to {
            if full_from.is_some() && !self.unit_awaits_resync(u, full_from) {
                continue;
            }
            // A region that never held data (or was trimmed whole) needs no resync: its
            // first write zeroes its stripes.
            if !self.unit_used(u) {
                continue;
            }
            let found = self.array.sync_unit(u, SyncMode::Resync)?;
            if !found.checked {
                return Ok((synced, u));
            }
            self.report_data_changes(&found);
            synced += 1;
        }
        Ok((synced, to))
    }

    /// Array bytes covered by one sync unit.
    pub(crate) fn sync_unit_array_bytes(&self) -> u64 {
        self.array.geometry().unit_bytes()
    }

    /// A scrub that fails (redundancy gone where a read error hit) is not retried: its report
    /// stays unfinished and the request is dropped.
    fn run_scrub(&self, repair: bool) -> Result<(), VolumeError> {
        let result = self.scrub_pass(repair);
        if result.is_err() {
            self.work.lock().scrub_request = None;
        }
        result
    }

    fn scrub_pass(&self, repair: bool) -> Result<(), VolumeError> {
        let units = self.array.sync_unit_count();
        let chunk = self.chunk_bytes();
        let mode = if repair {
            SyncMode::Repair
        } else {
            SyncMode::Check
        };
        let kind = if repair {
            TaskKind::Repair
        } else {
            TaskKind::Scrub
        };
        // A scrub that returned before its end (the window closed, a pause) goes on from
        // where it stopped, with its report so far.
        let kept = self.work.lock().scrub_position.take();
        let (mut unit, mut report) = match kept {
            Some(p) if p.repair == repair => (p.unit, p.report),
            _ => (0, ScrubReport::default()),
        };
        let mut pacer = Pacer::new(self);
        while unit < units {
            // A rebuild or replace became due (a member failed and a spare is there): it
            // restores redundancy, so it goes first; the scrub goes on from here after it.
            if self.repair_of_redundancy_due() || !pacer.wait_turn(self) {
                self.work.lock().scrub_position = Some(ScrubPosition {
                    repair,
                    unit,
                    report,
                });
                return Ok(());
            }
            let step = (pacer.step_bytes(self, chunk) / chunk).min(units - unit);
            let mut reached = unit + step;
            for u in unit..unit + step {
                // A region that holds nothing has no data to check: its member bytes mean
                // nothing until its first write zeroes its stripes.
                if !self.unit_used(u) {
                    continue;
                }
                let gate = if repair {
                    Some(self.begin_write()?)
                } else {
                    None
                };
                let found = match self.array.sync_unit(u, mode) {
                    Ok(found) => found,
                    // Rows no member and no redundancy can provide: recorded in the bad-block
                    // lists of the members that cannot read them (by the repair), reported
                    // here, and the scrub goes on with the next unit.
                    Err(e) if e.is_lost_range() => {
                        drop(gate);
                        self.add_lost_to_report(&mut report, u, &e);
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                drop(gate);
                if !found.checked && self.repair_of_redundancy_due() {
                    // A member left during the step and a rebuild is due: this unit is
                    // checked after the rebuild, not passed over.
                    reached = u;
                    break;
                }
                self.report_data_changes(&found);
                self.add_to_report(&mut report, found);
            }
            self.settle()?;
            pacer.done(self, (reached - unit).max(1) * chunk);
            unit = reached;
            self.report(kind, None, unit * chunk, units * chunk, &pacer);
            self.work.lock().last_scrub = Some(report.clone());
        }
        report.finished = true;
        let mut state = self.work.lock();
        state.last_scrub = Some(report);
        state.scrub_request = None;
        Ok(())
    }

    /// Tells the layer above which chunks a repair changed (data or mirror copies).
    fn report_data_changes(&self, found: &engine::UnitReport) {
        if found.repaired == 0 {
            return;
        }
        let chunk = self.chunk_bytes();
        for m in &found.mismatches {
            if matches!(
                m.kind,
                engine::MismatchKind::Data | engine::MismatchKind::Mirror
            ) {
                let start = m.array_offset / chunk * chunk;
                self.data_changed(start, chunk.min(self.size_bytes() - start));
            }
        }
    }

    /// Unit `unit` holds ranges nothing can provide (`e` met one): counts it and lists the
    /// recorded ranges in its rows (array offset, member, member offset), each once.
    fn add_lost_to_report(&self, report: &mut ScrubReport, unit: u64, e: &engine::IoError) {
        report.units_lost += 1;
        let unit_bytes = self.sync_unit_array_bytes();
        let meta = self.lock_meta();
        let ranges = self.bad_block_status(&meta);
        drop(meta);
        let mut listed = 0;
        for r in ranges {
            if r.stripe_array_offset / unit_bytes != unit {
                continue;
            }
            listed += 1;
            if !report.lost.contains(&r) && report.lost.len() < SCRUB_MISMATCHES_LISTED_MAX {
                report.lost.push(r);
            }
        }
        eprintln!(
            "raidkit: array {}: scrub: unit {unit} (array offset {}) holds {listed} range(s) no \
             member or redundancy can provide ({e}); recorded as lost, reads of them fail until \
             written; the scrub goes on",
            self.name(),
            unit * unit_bytes
        );
    }

    fn add_to_report(&self, report: &mut ScrubReport, found: engine::UnitReport) {
        report.stripes_checked += u64::from(found.checked);
        report.mismatches += found.mismatches.len() as u64;
        report.repaired += found.repaired;
        for m in found.mismatches {
            if report.first_mismatches.len() >= SCRUB_MISMATCHES_LISTED_MAX {
                break;
            }
            let member = self.lock_meta().roles[m.role]
                .as_ref()
                .map(|h| h.whole.name().to_string());
            report.first_mismatches.push(MismatchLocation {
                stripe: m.unit,
                array_offset: m.array_offset,
                role: m.role,
                member: member.unwrap_or_default(),
                member_offset: m.member_offset,
                kind: format!("{:?}", m.kind).to_lowercase(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_known_before_the_first_window_closes() {
        let t0 = Instant::now();
        let mut window = RateWindow::new(t0);
        assert_eq!(window.rate(t0), 0, "nothing measured yet");
        window.add(50 << 20, t0 + Duration::from_millis(250));
        let at = t0 + Duration::from_millis(500);
        assert_eq!(
            window.rate(at),
            100 << 20,
            "50 MiB in the first half second"
        );
        window.add(50 << 20, t0 + Duration::from_millis(1000));
        assert_eq!(
            window.rate(at + Duration::from_secs(3)),
            100 << 20,
            "the closed window's rate"
        );
        window.add(10 << 20, t0 + Duration::from_millis(1500));
        assert_eq!(
            window.rate(t0 + Duration::from_millis(1600)),
            100 << 20,
            "a closed window's rate holds while the next fills"
        );
    }
}

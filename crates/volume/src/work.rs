//! Background work as one state machine: what a volume's worker thread is doing ([`Worker`]),
//! the events that change it ([`Event`], through [`transition`] and nothing else), and which
//! task it runs next ([`choose`]). The tasks themselves run in `tasks`.
//!
//! The arms of [`transition`] are the table in docs/DESIGN.md "Faults, rebuild and scrub";
//! the unit test below checks every (state, event) pair against it.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::status::{ScrubReport, SpeedLimits, TaskStatus};

/// A unit of background work. [`choose`] ranks them in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Task {
    /// Copy a role onto its replacement while the old member serves.
    Replace(usize),
    /// Reconstruct a role onto a rebuilding member (or a spare promoted into it).
    Rebuild(usize),
    /// Recompute redundancy after an unclean shutdown (with a bitmap: its dirty regions).
    CrashResync,
    /// Compute redundancy for the first time (an array created without zeroing).
    InitialSync,
    /// Resync the units a write refused for lack of space may have half-written
    /// (`engine::unsynced`).
    Unsynced,
    /// Check (or with `repair`, make consistent) every stripe, as the operator asked.
    Scrub { repair: bool },
}

impl Task {
    /// Waits outside the background window ([`Event::Defer`]): scrubs, the resync after a
    /// crash and the initial sync. Not rebuilds and replaces (they restore redundancy a member
    /// loss took away; pausing them prolongs the time a second loss loses data), nor the few
    /// units a lack of space left unsynced (a short repair of a known exposure).
    pub(crate) fn deferrable(self) -> bool {
        matches!(
            self,
            Task::Scrub { .. } | Task::CrashResync | Task::InitialSync
        )
    }
}

/// What the worker is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Worker {
    /// Nothing may run until the journal given at assembly is replayed; `paused`: a `close`
    /// came meanwhile, so the release leaves the worker paused.
    Held {
        paused: bool,
    },
    /// Free to start the next task.
    Idle,
    /// `close` stopped background work; a write or an operator action resumes it.
    Paused,
    Running(Task),
    /// Running, told to pause: the task returns after its current step.
    Pausing(Task),
    /// Running a deferrable task when the background window closed: it returns after its
    /// current step, keeping its position, and the worker is free for other tasks.
    Deferring(Task),
    /// Running, told to stop (the volume is dropped): the task returns after its current step.
    Stopping(Task),
    /// The worker thread has ended or is ending; nothing runs again.
    Stopped,
}

/// What changes the worker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// Assembly with a journal to replay, before the worker starts.
    Hold,
    /// The journal has been replayed (`Volume::journal_replayed`).
    ReleaseHold,
    /// `close`: no background write may re-dirty a cleanly closed array.
    Pause,
    /// A write, `add`, `fail`, `replace`, `scrub`, `resync`, a re-added member.
    Resume,
    /// The worker chose a task (see [`choose`]).
    Start(Task),
    /// The running task returned (done, yielded, or failed).
    Finish,
    /// The volume is dropped.
    Stop,
    /// The background window closed: scrubs and resyncs wait (`Volume::defer_background`).
    Defer,
    /// The background window opened.
    Undefer,
}

/// The worker's next state. Every legal pair has its arm; any other pair is a bug and panics.
pub(crate) fn transition(state: Worker, event: Event) -> Worker {
    use Event::*;
    use Worker::*;
    match (state, event) {
        // Only before the worker starts (the volume is being assembled): nothing runs yet.
        (Idle, Hold) => Held { paused: false },
        // The replay made every stripe consistent: background work may read them.
        (Held { paused: false }, ReleaseHold) => Idle,
        // ...but a `close` during the hold still holds background writes back.
        (Held { paused: true }, ReleaseHold) => Paused,
        // No journal was replayed at assembly (or it was released already): nothing to lift.
        (
            s @ (Idle | Paused | Running(_) | Pausing(_) | Deferring(_) | Stopping(_) | Stopped),
            ReleaseHold,
        ) => s,
        // A close while held: remembered for when the hold is lifted.
        (Held { .. }, Pause) => Held { paused: true },
        (Idle | Paused, Pause) => Paused,
        // The task sees it at its next step (`should_yield`) and returns; the pause wins over
        // the window (the worker stays paused afterwards).
        (Running(t) | Pausing(t) | Deferring(t), Pause) => Pausing(t),
        // Stopping wins: nothing runs again either way.
        (s @ (Stopping(_) | Stopped), Pause) => s,
        // A write while held does not lift the hold (only the replay does), only the pause.
        (Held { .. }, Resume) => Held { paused: false },
        (Idle | Paused, Resume) => Idle,
        // The pause came before the task's next step: it simply goes on.
        (Running(t) | Pausing(t), Resume) => Running(t),
        // A write does not open the window.
        (Deferring(t), Resume) => Deferring(t),
        (s @ (Stopping(_) | Stopped), Resume) => s,
        // The worker starts a task only when free (under the same lock as this check).
        (Idle, Start(t)) => Running(t),
        // The task returned: the worker chooses again, stays paused, or ends.
        (Running(_), Finish) => Idle,
        // Returned for the window: free for a task that does not wait for it (a rebuild).
        (Deferring(_), Finish) => Idle,
        (Pausing(_), Finish) => Paused,
        (Stopping(_), Finish) => Stopped,
        // Nothing runs: the worker ends at once.
        (Held { .. } | Idle | Paused | Stopped, Stop) => Stopped,
        // A task runs: it returns after its current step, then the worker ends.
        (Running(t) | Pausing(t) | Deferring(t) | Stopping(t), Stop) => Stopping(t),
        // The window closed: a scrub or resync returns after its current step; a rebuild or
        // replace goes on.
        (Running(t), Defer) if t.deferrable() => Deferring(t),
        // Elsewhere the window only matters to what is chosen next (`Facts::deferred`).
        (
            s @ (Held { .. }
            | Idle
            | Paused
            | Running(_)
            | Pausing(_)
            | Deferring(_)
            | Stopping(_)
            | Stopped),
            Defer,
        ) => s,
        // The window opened before the deferred task's next step: it simply goes on.
        (Deferring(t), Undefer) => Running(t),
        (
            s @ (Held { .. } | Idle | Paused | Running(_) | Pausing(_) | Stopping(_) | Stopped),
            Undefer,
        ) => s,
        (state, event) => panic!("background work: no transition from {state:?} on {event:?}"),
    }
}

impl Worker {
    /// A task is running (possibly about to return).
    pub(crate) fn busy(self) -> bool {
        matches!(
            self,
            Worker::Running(_) | Worker::Pausing(_) | Worker::Deferring(_) | Worker::Stopping(_)
        )
    }
}

/// Which resync a volume has pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resync {
    AfterCrash,
    Initial,
}

/// What [`choose`] looks at, read from the volume's state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Facts {
    /// The role being replaced.
    pub replacing: Option<usize>,
    /// The first role rebuilding (`MemberHealth::Recovering`).
    pub recovering: Option<usize>,
    /// The first missing or faulty role a spare is big enough for, when the array survives
    /// without it (a spare is then promoted into it).
    pub spare_for: Option<usize>,
    /// Every role is in sync.
    pub all_in_sync: bool,
    pub resync: Option<Resync>,
    /// Some units a lack of space may have half-written, and their retry time has come.
    pub unsynced_due: bool,
    /// A requested scrub (`true`: repair).
    pub scrub: Option<bool>,
    /// Outside the background window: scrubs and resyncs wait ([`Task::deferrable`]).
    pub deferred: bool,
}

/// The most urgent task, if any: replace, rebuild, resync or initial sync (every role in
/// sync), units left unsynced by a lack of space (every role in sync), a requested scrub.
/// Outside the background window (`deferred`) the deferrable ones are passed over.
pub(crate) fn choose(f: &Facts) -> Option<Task> {
    if let Some(role) = f.replacing {
        return Some(Task::Replace(role));
    }
    if let Some(role) = f.recovering.or(f.spare_for) {
        return Some(Task::Rebuild(role));
    }
    match (f.all_in_sync && !f.deferred, f.resync) {
        (true, Some(Resync::AfterCrash)) => return Some(Task::CrashResync),
        (true, Some(Resync::Initial)) => return Some(Task::InitialSync),
        _ => {}
    }
    if f.all_in_sync && f.unsynced_due {
        return Some(Task::Unsynced);
    }
    f.scrub
        .filter(|_| !f.deferred)
        .map(|repair| Task::Scrub { repair })
}

/// The worker's mailbox: its state, the limits and requests it follows, and what it reports,
/// with a condition variable signalled at each change.
pub(crate) struct Work {
    state: Mutex<WorkState>,
    changed: Condvar,
}

pub(crate) struct WorkState {
    /// Changed only by [`Work::apply`] (through [`transition`]).
    worker: Worker,
    pub limits: SpeedLimits,
    /// A requested scrub (`true`: repair), until it ends.
    pub scrub_request: Option<bool>,
    pub current: Option<TaskStatus>,
    pub last_scrub: Option<ScrubReport>,
    pub last_error: Option<String>,
    /// No resync of unsynced units before this (a member refused one for lack of space).
    pub unsynced_not_before: Option<Instant>,
    /// Why scrubs and resyncs wait (outside the background window), while they do.
    pub deferred: Option<String>,
    /// Where a scrub that returned before its end goes on (until a new request or its end).
    pub scrub_position: Option<ScrubPosition>,
    /// A resync's progress when it returned before its end (units done, units in all), so the
    /// next run counts on from there.
    pub resync_counted: Option<(u64, u64)>,
    /// The last progress of a deferrable task that returned for the window (shown paused).
    pub deferred_progress: Option<TaskStatus>,
}

/// Where an unfinished scrub goes on: its next unit and its report so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ScrubPosition {
    pub repair: bool,
    pub unit: u64,
    pub report: ScrubReport,
}

impl Work {
    pub(crate) fn new() -> Work {
        Work {
            state: Mutex::new(WorkState {
                worker: Worker::Idle,
                limits: SpeedLimits::default(),
                scrub_request: None,
                current: None,
                last_scrub: None,
                last_error: None,
                unsynced_not_before: None,
                deferred: None,
                scrub_position: None,
                resync_counted: None,
                deferred_progress: None,
            }),
            changed: Condvar::new(),
        }
    }
    pub(crate) fn lock(&self) -> MutexGuard<'_, WorkState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    pub(crate) fn notify(&self) {
        self.changed.notify_all();
    }
    /// Applies `event`; wakes every waiter when the state changed. While deferred, every
    /// change is followed by `Defer`, so no deferrable task stays `Running` (a `Resume` of a
    /// `Pausing` scrub makes it `Running`, then `Deferring`).
    fn apply(&self, event: Event) {
        let mut state = self.lock();
        let mut next = transition(state.worker, event);
        if state.deferred.is_some() {
            next = transition(next, Event::Defer);
        }
        if next != state.worker {
            if let Worker::Deferring(_) = next {
                state.deferred_progress = state.current.clone();
            }
            state.worker = next;
            if !next.busy() {
                state.current = None;
            }
            self.notify();
        }
    }
    /// `Some(reason)`: scrubs and resyncs wait (a running one returns after its step, keeping
    /// its position); `None`: they go on.
    pub(crate) fn set_deferred(&self, reason: Option<String>) {
        let event = match &reason {
            Some(_) => Event::Defer,
            None => Event::Undefer,
        };
        let mut state = self.lock();
        if reason.is_none() {
            state.deferred_progress = None;
        }
        state.deferred = reason;
        drop(state);
        self.apply(event);
        self.notify();
    }
    pub(crate) fn worker(&self) -> Worker {
        self.lock().worker
    }
    pub(crate) fn stop(&self) {
        self.apply(Event::Stop);
    }
    pub(crate) fn stopped(&self) -> bool {
        matches!(self.worker(), Worker::Stopping(_) | Worker::Stopped)
    }
    /// Stops background work after its current step and waits for that.
    pub(crate) fn pause(&self) {
        self.apply(Event::Pause);
        let mut state = self.lock();
        while state.worker.busy() {
            state = self.wait(state, Duration::from_millis(50));
        }
    }
    /// Before the worker starts: no task runs until `release_replay_hold`.
    pub(crate) fn hold_for_replay(&self) {
        self.apply(Event::Hold);
    }
    pub(crate) fn release_replay_hold(&self) {
        self.apply(Event::ReleaseHold);
    }
    pub(crate) fn resume(&self) {
        self.apply(Event::Resume);
    }
    /// Starts `task` if the worker is still free (a pause or stop may have come since it
    /// chose); true when it runs.
    pub(crate) fn start(&self, task: Task) -> bool {
        let mut state = self.lock();
        if state.worker != Worker::Idle || (state.deferred.is_some() && task.deferrable()) {
            return false;
        }
        state.worker = transition(state.worker, Event::Start(task));
        drop(state);
        self.notify();
        true
    }
    /// The running task returned.
    pub(crate) fn finish(&self) {
        self.apply(Event::Finish);
    }
    /// True when the running task should return (stop or pause requested).
    pub(crate) fn should_yield(&self) -> bool {
        !matches!(self.worker(), Worker::Running(_))
    }
    pub(crate) fn limits(&self) -> SpeedLimits {
        self.lock().limits
    }
    pub(crate) fn wait_change(&self, timeout: Duration) {
        let state = self.lock();
        drop(self.wait(state, timeout));
    }
    fn wait<'a>(
        &self,
        state: MutexGuard<'a, WorkState>,
        timeout: Duration,
    ) -> MutexGuard<'a, WorkState> {
        self.changed
            .wait_timeout(state, timeout)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0)
    }
    pub(crate) fn is_busy(&self) -> bool {
        self.worker().busy()
    }
    pub(crate) fn progress(&self, status: TaskStatus) {
        self.lock().current = Some(status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Event::*;
    use Worker::*;

    /// A task that does not wait for the window, and one that does.
    const T: Task = Task::Rebuild(1);
    const S: Task = Task::Scrub { repair: false };

    /// Every state, and every event, once (the running states with both kinds of task).
    const STATES: [Worker; 10] = [
        Held { paused: false },
        Held { paused: true },
        Idle,
        Paused,
        Running(T),
        Running(S),
        Pausing(T),
        Deferring(S),
        Stopping(T),
        Stopped,
    ];
    const EVENTS: [Event; 9] = [
        Hold,
        ReleaseHold,
        Pause,
        Resume,
        Start(T),
        Finish,
        Stop,
        Defer,
        Undefer,
    ];

    /// The transition table, row by row (state) in the order of `STATES`, column by column
    /// (event) in the order of `EVENTS`; `None`: illegal, the transition panics.
    #[rustfmt::skip]
    fn table() -> [[Option<Worker>; 9]; 10] {
        let held = Held { paused: false };
        let held_paused = Held { paused: true };
        [
            //    Hold       ReleaseHold        Pause              Resume         Start(T)          Finish           Stop                 Defer               Undefer
            [None, Some(Idle), Some(held_paused), Some(held), None, None, Some(Stopped), Some(held), Some(held)],
            [None, Some(Paused), Some(held_paused), Some(held), None, None, Some(Stopped), Some(held_paused), Some(held_paused)],
            [Some(held), Some(Idle), Some(Paused), Some(Idle), Some(Running(T)), None, Some(Stopped), Some(Idle), Some(Idle)],
            [None, Some(Paused), Some(Paused), Some(Idle), None, None, Some(Stopped), Some(Paused), Some(Paused)],
            [None, Some(Running(T)), Some(Pausing(T)), Some(Running(T)), None, Some(Idle), Some(Stopping(T)), Some(Running(T)), Some(Running(T))],
            [None, Some(Running(S)), Some(Pausing(S)), Some(Running(S)), None, Some(Idle), Some(Stopping(S)), Some(Deferring(S)), Some(Running(S))],
            [None, Some(Pausing(T)), Some(Pausing(T)), Some(Running(T)), None, Some(Paused), Some(Stopping(T)), Some(Pausing(T)), Some(Pausing(T))],
            [None, Some(Deferring(S)), Some(Pausing(S)), Some(Deferring(S)), None, Some(Idle), Some(Stopping(S)), Some(Deferring(S)), Some(Running(S))],
            [None, Some(Stopping(T)), Some(Stopping(T)), Some(Stopping(T)), None, Some(Stopped), Some(Stopping(T)), Some(Stopping(T)), Some(Stopping(T))],
            [None, Some(Stopped), Some(Stopped), Some(Stopped), None, None, Some(Stopped), Some(Stopped), Some(Stopped)],
        ]
    }

    #[test]
    fn every_transition_is_as_the_table_says() {
        let table = table();
        for (s, state) in STATES.into_iter().enumerate() {
            for (e, event) in EVENTS.into_iter().enumerate() {
                let got = std::panic::catch_unwind(|| transition(state, event)).ok();
                assert_eq!(got, table[s][e], "{state:?} on {event:?}");
            }
        }
    }

    #[test]
    fn tasks_are_chosen_in_priority_order() {
        let all = Facts {
            replacing: Some(0),
            recovering: Some(1),
            spare_for: Some(2),
            all_in_sync: true,
            resync: Some(Resync::AfterCrash),
            unsynced_due: true,
            scrub: Some(true),
            deferred: false,
        };
        // Each row takes away the most urgent reason left: the next one decides.
        type Take = fn(&mut Facts);
        let rows: [(Take, Option<Task>); 9] = [
            (|_| {}, Some(Task::Replace(0))),
            (|f| f.replacing = None, Some(Task::Rebuild(1))),
            (|f| f.recovering = None, Some(Task::Rebuild(2))),
            (|f| f.spare_for = None, Some(Task::CrashResync)),
            (
                |f| f.resync = Some(Resync::Initial),
                Some(Task::InitialSync),
            ),
            (|f| f.resync = None, Some(Task::Unsynced)),
            (
                |f| f.unsynced_due = false,
                Some(Task::Scrub { repair: true }),
            ),
            (
                |f| f.scrub = Some(false),
                Some(Task::Scrub { repair: false }),
            ),
            (|f| f.scrub = None, None),
        ];
        let mut facts = all;
        for (take, want) in rows {
            take(&mut facts);
            assert_eq!(choose(&facts), want, "{facts:?}");
        }
    }

    #[test]
    fn resyncs_wait_for_every_role_in_sync_and_a_scrub_does_not() {
        let degraded = Facts {
            resync: Some(Resync::AfterCrash),
            unsynced_due: true,
            scrub: Some(false),
            ..Facts::default()
        };
        assert_eq!(choose(&degraded), Some(Task::Scrub { repair: false }));
        let idle = Facts {
            scrub: None,
            ..degraded
        };
        assert_eq!(choose(&idle), None);
    }

    #[test]
    fn outside_the_window_scrubs_and_resyncs_wait_and_repairs_do_not() {
        let all = Facts {
            replacing: Some(0),
            recovering: Some(1),
            all_in_sync: true,
            resync: Some(Resync::AfterCrash),
            unsynced_due: true,
            scrub: Some(false),
            deferred: true,
            ..Facts::default()
        };
        type Take = fn(&mut Facts);
        let rows: [(Take, Option<Task>); 6] = [
            (|_| {}, Some(Task::Replace(0))),
            (|f| f.replacing = None, Some(Task::Rebuild(1))),
            // The resync waits; the few units a lack of space left unsynced do not.
            (|f| f.recovering = None, Some(Task::Unsynced)),
            (|f| f.unsynced_due = false, None),
            (|f| f.resync = Some(Resync::Initial), None),
            (|f| f.deferred = false, Some(Task::InitialSync)),
        ];
        let mut facts = all;
        for (take, want) in rows {
            take(&mut facts);
            assert_eq!(choose(&facts), want, "{facts:?}");
        }
        for task in [
            Task::Scrub { repair: true },
            Task::CrashResync,
            Task::InitialSync,
        ] {
            assert!(task.deferrable(), "{task:?}");
        }
        for task in [Task::Replace(0), Task::Rebuild(0), Task::Unsynced] {
            assert!(!task.deferrable(), "{task:?}");
        }
    }

    #[test]
    fn a_deferred_scrub_returns_keeps_its_progress_and_a_rebuild_may_run() {
        let work = Work::new();
        assert!(work.start(S));
        let progress = TaskStatus {
            kind: crate::TaskKind::Scrub,
            role: None,
            done_bytes: 5,
            total_bytes: 10,
            bytes_per_sec: 1,
            eta_secs: Some(5),
            of_member_bytes: None,
            paused: None,
        };
        work.progress(progress.clone());
        work.set_deferred(Some("outside".into()));
        assert_eq!(work.worker(), Deferring(S));
        assert!(work.should_yield());
        work.finish();
        assert_eq!(work.worker(), Idle);
        assert_eq!(work.lock().deferred_progress, Some(progress));
        assert!(!work.start(S), "no scrub starts outside the window");
        assert!(work.start(T), "a rebuild does");
        work.set_deferred(None);
        assert_eq!(work.worker(), Running(T));
        assert_eq!(work.lock().deferred_progress, None);
        work.finish();
        // A close's pause wins over the window, and a write after it does not run the scrub
        // while the window is closed.
        assert!(work.start(S));
        work.set_deferred(Some("outside".into()));
        work.apply(Pause);
        assert_eq!(work.worker(), Pausing(S));
        work.resume();
        assert_eq!(
            work.worker(),
            Deferring(S),
            "resumed, but still outside the window"
        );
        work.set_deferred(None);
        assert_eq!(work.worker(), Running(S));
    }

    #[test]
    fn the_mailbox_follows_the_machine() {
        let work = Work::new();
        work.hold_for_replay();
        work.resume();
        assert!(!work.start(T), "held: a write does not lift the hold");
        work.release_replay_hold();
        assert!(work.start(T));
        assert!(work.is_busy() && !work.should_yield());
        work.progress(TaskStatus {
            kind: crate::TaskKind::Rebuild,
            role: Some(1),
            done_bytes: 0,
            total_bytes: 1,
            bytes_per_sec: 0,
            eta_secs: None,
            of_member_bytes: None,
            paused: None,
        });
        work.stop();
        assert!(work.stopped() && work.should_yield() && work.is_busy());
        work.finish();
        assert_eq!(work.worker(), Stopped);
        assert!(
            work.lock().current.is_none(),
            "no task status once none runs"
        );
    }
}

//! Scheduled scrubs and the background window of the daemon's arrays: [`Scheduler`], one
//! thread for every array, looks once a [`TICK`] at the time its [`Clock`] gives (local time)
//! and for each array it watches
//!
//! - applies the background window: outside it `Volume::defer_background` makes scrubs and
//!   resyncs wait where they are (shown paused in the status), inside it they go on; rebuilds
//!   and replaces are never paused (see docs/DESIGN.md "Faults, rebuild and scrub");
//! - starts the scheduled scrub when its time has come: a check (md's checkarray checks, it
//!   does not repair), at the array's background rate (its speed limits), only when the array
//!   is clean or active and no background task runs or waits ([`skip_reason`]). Otherwise the
//!   run is skipped with a log line and the next one is at the next occurrence (as
//!   checkarray run by cron: no retry, no alert — a degraded array has raised its own);
//! - tells when its scrub finished (the monitor raises `MismatchesFound` from the status).
//!
//! A run missed while the daemon was not running is not caught up: an array's next run is
//! computed from the time it is watched. Nothing here prints: what happens is told as
//! [`Note`]s. The clock is a trait so a test drives the scheduler with a fake one.

use std::fmt;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use config::{Schedule, TimeWindow};
use jiff::ZonedDateTime;
use volume::{ArrayHealth, ScrubReport, Volume, VolumeStatus};

use crate::periodic::Periodic;

/// How often the scheduler looks at the time: schedules and windows are to the minute, and
/// `every` intervals to the second.
pub const TICK: Duration = Duration::from_secs(1);

/// The time as the scheduler sees it: local time in the system's time zone, or a test's.
pub trait Clock: Send + Sync {
    fn now(&self) -> ZonedDateTime;
}

/// The system's clock and time zone (`TZ`, else `/etc/localtime`).
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> ZonedDateTime {
        ZonedDateTime::now()
    }
}

/// What an array's configuration asks of the scheduler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub schedule: Schedule,
    pub window: Option<TimeWindow>,
}

impl Plan {
    /// True when there is nothing to do (no schedule, no window).
    pub fn is_empty(&self) -> bool {
        self.schedule == Schedule::Off && self.window.is_none()
    }
}

/// What the scheduler did or found, for the log (one line each).
#[derive(Clone, Debug, PartialEq)]
pub enum Note {
    /// The array is watched: when its first scheduled scrub is.
    Planned {
        schedule: Schedule,
        next: Option<ZonedDateTime>,
    },
    /// A schedule on an array without redundancy (linear, RAID 0): nothing to check.
    NothingToCheck { level: String },
    /// The scheduled scrub was started (it waits for the window when `waits` says so).
    Started {
        next: Option<ZonedDateTime>,
        waits: Option<String>,
    },
    /// Its time came, but the array was not in a state to scrub.
    Skipped {
        reason: String,
        next: Option<ZonedDateTime>,
    },
    /// The volume refused the scrub.
    Refused {
        error: String,
        next: Option<ZonedDateTime>,
    },
    /// The scheduled scrub checked every stripe.
    Finished(ScrubReport),
    /// The scheduled scrub ended before checking every stripe (a read error it could not
    /// repair, or a new scrub asked for by the operator took its place).
    Ended(ScrubReport),
    /// The background window closed: scrubs and resyncs pause.
    WindowClosed(TimeWindow),
    /// The background window opened: scrubs and resyncs go on.
    WindowOpened(TimeWindow),
}

fn when(next: &Option<ZonedDateTime>) -> String {
    match next {
        Some(at) => format!("next at {}", at.strftime("%Y-%m-%d %H:%M:%S %Z")),
        None => "no next run".to_string(),
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Planned { schedule, next } => {
                write!(f, "scrub schedule \"{schedule}\": {}", when(next))
            }
            Note::NothingToCheck { level } => write!(
                f,
                "scrub_schedule ignored: a {level} array has no redundancy to check"
            ),
            Note::Started { next, waits } => {
                write!(
                    f,
                    "scheduled scrub started (check only, at the background rate)"
                )?;
                if let Some(why) = waits {
                    write!(f, "; it waits: {why}")?;
                }
                write!(f, "; {}", when(next))
            }
            Note::Skipped { reason, next } => {
                write!(f, "scheduled scrub skipped: {reason}; {}", when(next))
            }
            Note::Refused { error, next } => {
                write!(f, "scheduled scrub not started: {error}; {}", when(next))
            }
            Note::Finished(r) => write!(
                f,
                "scheduled scrub finished: {} stripes checked, {} mismatches",
                r.stripes_checked, r.mismatches
            ),
            Note::Ended(r) => write!(
                f,
                "scheduled scrub ended before its end: {} stripes checked, {} mismatches \
                 (`raidkit status` shows the last scrub)",
                r.stripes_checked, r.mismatches
            ),
            Note::WindowClosed(w) => write!(
                f,
                "outside the background window {w}: scrubs and resyncs pause where they are \
                 (rebuilds go on)"
            ),
            Note::WindowOpened(w) => write!(
                f,
                "inside the background window {w}: scrubs and resyncs go on"
            ),
        }
    }
}

/// Where the scheduler's notes go: `(array name, note)`.
pub type Tell = Arc<dyn Fn(&str, Note) + Send + Sync>;

/// Why a scheduled scrub must not start now, if it must not: the array is degraded, a
/// rebuild, replace or resync runs or is pending, or any background task runs or waits (a
/// scrub paused outside the window included).
pub fn skip_reason(status: &VolumeStatus) -> Option<String> {
    let why = match status.health {
        ArrayHealth::Failed => "the array has failed",
        ArrayHealth::Degraded => "the array is degraded",
        ArrayHealth::Rebuilding => "a rebuild or replace runs",
        ArrayHealth::Resyncing => "a resync is pending or runs",
        ArrayHealth::Clean | ArrayHealth::Active => {
            let task = status.task.as_ref()?;
            let kind = admin::status::wire_name(task.kind);
            return Some(match &task.paused {
                Some(why) => format!("a {kind} waits ({why})"),
                None => format!("a {kind} runs"),
            });
        }
    };
    Some(why.to_string())
}

/// One watched array.
struct Watched {
    name: String,
    volume: Arc<Volume>,
    plan: Plan,
    next: Option<ZonedDateTime>,
    /// Whether the window was closed at the last look (`None`: not looked yet).
    outside: Option<bool>,
    /// A scrub this scheduler started has not been seen to end yet.
    ours: bool,
}

impl Watched {
    fn tick(&mut self, now: &ZonedDateTime, tell: &Tell) {
        let say = |note| tell(&self.name, note);
        if let Some(window) = self.plan.window {
            let outside = !window.contains_time(now);
            if self.outside != Some(outside) {
                let reason = outside.then(|| format!("outside the background window {window}"));
                self.volume.defer_background(reason);
                match outside {
                    true => say(Note::WindowClosed(window)),
                    // At the first look, inside: nothing changed, nothing to say.
                    false if self.outside.is_some() => say(Note::WindowOpened(window)),
                    false => {}
                }
                self.outside = Some(outside);
            }
        }
        if let Some(due) = &self.next {
            if now.timestamp() >= due.timestamp() {
                // The next run counts from now: runs a stopped clock or a suspended machine
                // passed over are not made up.
                let next = self.plan.schedule.next_after(now);
                self.next = next.clone();
                let status = self.volume.status();
                let note = match skip_reason(&status) {
                    Some(reason) => Note::Skipped { reason, next },
                    None => match self.volume.scrub(false) {
                        Ok(()) => {
                            self.ours = true;
                            let waits = self.volume.status().task.and_then(|t| t.paused);
                            Note::Started { next, waits }
                        }
                        Err(e) => Note::Refused {
                            error: e.to_string(),
                            next,
                        },
                    },
                };
                say(note);
                return;
            }
        }
        if self.ours {
            let status = self.volume.status();
            match status.last_scrub {
                Some(report) if report.finished => {
                    self.ours = false;
                    say(Note::Finished(report));
                }
                Some(report) if status.task.is_none() => {
                    self.ours = false;
                    say(Note::Ended(report));
                }
                _ => {}
            }
        }
    }
}

/// The scheduler's state, shared with its thread.
struct Shared {
    clock: Arc<dyn Clock>,
    tell: Tell,
    /// One per served array (bounded by the configuration).
    watched: Mutex<Vec<Watched>>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Watched>> {
        self.watched.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The scheduling thread of one process's arrays (see the module docs); stops when dropped.
pub struct Scheduler {
    shared: Arc<Shared>,
    _ticking: Periodic,
}

impl Scheduler {
    /// Starts the thread, looking every `tick` (the daemon: [`TICK`]).
    pub fn start(clock: Arc<dyn Clock>, tell: Tell, tick: Duration) -> Scheduler {
        let shared = Arc::new(Shared {
            clock,
            tell,
            watched: Mutex::new(Vec::new()),
        });
        let looked = Arc::clone(&shared);
        let ticking = Periodic::start("scheduler", tick, move || {
            tick_all(&looked);
            ControlFlow::Continue(())
        })
        .expect("spawning the scheduler thread");
        Scheduler {
            shared,
            _ticking: ticking,
        }
    }

    /// Follows `plan` for `volume` (called `name` in the notes) from now on: its window
    /// applied at once (no window: nothing waits for one), its first scrub at the schedule's
    /// first time after now. A changed plan: [`Scheduler::forget`], then `watch` again.
    pub fn watch(&self, name: &str, volume: &Arc<Volume>, plan: Plan) {
        if plan.window.is_none() {
            volume.defer_background(None);
        }
        if plan.is_empty() {
            return;
        }
        let now = self.shared.clock.now();
        let tell = &self.shared.tell;
        let mut next = plan.schedule.next_after(&now);
        if next.is_some() && !volume.level().has_redundancy() {
            let level = volume.level().to_string();
            tell(name, Note::NothingToCheck { level });
            next = None;
        } else if plan.schedule != Schedule::Off {
            let note = Note::Planned {
                schedule: plan.schedule.clone(),
                next: next.clone(),
            };
            tell(name, note);
        }
        let mut watched = Watched {
            name: name.to_string(),
            volume: Arc::clone(volume),
            plan,
            next,
            outside: None,
            ours: false,
        };
        watched.tick(&now, tell);
        self.shared.lock().push(watched);
    }

    /// Stops following `volume` (it is being closed, or its plan changes). A window closed on
    /// it stays closed (a closing array must not start background work first) until a new
    /// [`Scheduler::watch`] sets it.
    pub fn forget(&self, volume: &Arc<Volume>) {
        self.shared
            .lock()
            .retain(|w| !Arc::ptr_eq(&w.volume, volume));
    }

    /// One look at every array at the clock's time: what the thread does every tick.
    pub fn tick(&self) {
        tick_all(&self.shared);
    }
}

fn tick_all(shared: &Shared) {
    let now = shared.clock.now();
    for w in shared.lock().iter_mut() {
        w.tick(&now, &shared.tell);
    }
}

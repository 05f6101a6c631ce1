//! Alerts: telling a person that an array needs them, the way `mdadm --monitor` and ZFS's zed
//! do. An [`Alert`] is one event (mdadm's names where mdadm has the event: `Fail`,
//! `DegradedArray`, `RebuildFinished`, ...) on one array, maybe about one member.
//!
//! [`Alerter::raise`] logs the alert and hands it to every configured target — a program run
//! as `program EVENT ARRAY [MEMBER]` (mdadm's PROGRAM convention, details in environment
//! variables), mail through a sendmail-compatible command, a syslog line, an HTTP POST of JSON
//! — and returns at once: each target has its own thread and a bounded queue
//! ([`QUEUE_ALERTS`]), so a slow or dead target never blocks I/O, another target or the
//! caller. A failed delivery is retried with backoff ([`Targets::attempts`]) and then logged;
//! nothing about a target is ever fatal. A queue that is full drops the new alert for that
//! target and says so in the log.
//!
//! One [`Tap`] ([`Alerter::tap`]) also sees every alert raised, on the raiser's thread (the
//! daemon's dashboard keeps its events this way): it must return at once.

mod deliver;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

/// Alerts waiting for one target at most; more are dropped (and logged).
pub const QUEUE_ALERTS: usize = 256;

/// What happened. mdadm's event names where mdadm has the event (`mdadm(8)`, MONITOR MODE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Event {
    /// A member was marked faulty.
    Fail,
    /// A spare being rebuilt onto failed.
    FailSpare,
    /// A spare finished rebuilding and is an active member.
    SpareActive,
    /// The array runs without full redundancy (raised at start too).
    DegradedArray,
    RebuildStarted,
    Rebuild20,
    Rebuild40,
    Rebuild60,
    Rebuild80,
    RebuildFinished,
    /// A member could no longer be reached (a remote member's server went away).
    DeviceDisappeared,
    /// An array was assembled and is served.
    NewArray,
    /// The array has fewer spares than its configuration names (or, degraded, none of its
    /// spare group fits it).
    SparesMissing,
    /// A spare was moved to this array from another of its spare group, to replace a failed
    /// or missing member.
    MoveSpare,
    /// A scrub found parity or mirror copies that disagree.
    MismatchesFound,
    /// Sent on request (`raidkit monitor --test`) to prove alerts arrive.
    TestMessage,
    /// A member request ran past its deadline.
    MemberTimeout,
    /// The journal's ring is under pressure: writers wait for room.
    JournalPressure,
    /// The write-back journal is on RAM: a power cut loses acknowledged writes.
    VolatileJournal,
    /// Another process took the array over (its owner lease): this one stopped serving it.
    TakenOver,
    /// A member answers much slower than its peers (an outlier over several windows): its
    /// reads are served by the others where redundancy allows.
    SlowMember,
    /// A member judged slow answers like its peers again and is read again.
    SlowMemberRecovered,
    /// A range was recorded in a member's bad-block list (md's badblocks): a rebuild met it
    /// unreadable with no redundancy left, so its data is lost and reads of it fail until it
    /// is written again.
    BadBlocks,
    /// Blocks whose data did not match their checksum were found (silent corruption; healed
    /// from redundancy where the level has it).
    ChecksumMismatch,
}

/// How bad an event is: syslog's severity and the log line's word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Critical,
    Warning,
    Info,
}

impl Event {
    /// The event's name, as mdadm spells it.
    pub fn name(self) -> &'static str {
        match self {
            Event::Fail => "Fail",
            Event::FailSpare => "FailSpare",
            Event::SpareActive => "SpareActive",
            Event::DegradedArray => "DegradedArray",
            Event::RebuildStarted => "RebuildStarted",
            Event::Rebuild20 => "Rebuild20",
            Event::Rebuild40 => "Rebuild40",
            Event::Rebuild60 => "Rebuild60",
            Event::Rebuild80 => "Rebuild80",
            Event::RebuildFinished => "RebuildFinished",
            Event::DeviceDisappeared => "DeviceDisappeared",
            Event::NewArray => "NewArray",
            Event::SparesMissing => "SparesMissing",
            Event::MoveSpare => "MoveSpare",
            Event::MismatchesFound => "MismatchesFound",
            Event::TestMessage => "TestMessage",
            Event::MemberTimeout => "MemberTimeout",
            Event::JournalPressure => "JournalPressure",
            Event::VolatileJournal => "VolatileJournal",
            Event::TakenOver => "TakenOver",
            Event::SlowMember => "SlowMember",
            Event::SlowMemberRecovered => "SlowMemberRecovered",
            Event::BadBlocks => "BadBlocks",
            Event::ChecksumMismatch => "ChecksumMismatch",
        }
    }

    pub fn severity(self) -> Severity {
        match self {
            Event::Fail
            | Event::FailSpare
            | Event::DegradedArray
            | Event::DeviceDisappeared
            | Event::MismatchesFound
            | Event::BadBlocks
            | Event::ChecksumMismatch
            | Event::TakenOver => Severity::Critical,
            Event::SparesMissing
            | Event::MemberTimeout
            | Event::JournalPressure
            | Event::VolatileJournal
            | Event::SlowMember => Severity::Warning,
            Event::SpareActive
            | Event::RebuildStarted
            | Event::Rebuild20
            | Event::Rebuild40
            | Event::Rebuild60
            | Event::Rebuild80
            | Event::RebuildFinished
            | Event::NewArray
            | Event::MoveSpare
            | Event::SlowMemberRecovered
            | Event::TestMessage => Severity::Info,
        }
    }

    /// The `RebuildNN` event a rebuild crossing from `before` to `after` percent raises, if
    /// it crossed 20, 40, 60 or 80.
    pub fn rebuild_progress(before: u8, after: u8) -> Option<Event> {
        [
            (80, Event::Rebuild80),
            (60, Event::Rebuild60),
            (40, Event::Rebuild40),
            (20, Event::Rebuild20),
        ]
        .into_iter()
        .find(|&(mark, _)| before < mark && after >= mark)
        .map(|(_, event)| event)
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One event on one array.
#[derive(Debug, Clone, Serialize)]
pub struct Alert {
    pub event: Event,
    pub array: String,
    /// The member the event is about, as the configuration names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// One sentence for a person.
    pub message: String,
    /// More facts (`rebuild_percent`, `mismatches`, ...), also passed to programs as
    /// `RAIDKIT_<KEY>` environment variables.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub details: BTreeMap<String, String>,
    pub host: String,
    /// RFC 3339, UTC.
    pub time: String,
}

impl Alert {
    pub fn new(
        event: Event,
        array: &str,
        member: Option<&str>,
        message: impl Into<String>,
    ) -> Alert {
        Alert {
            event,
            array: array.to_string(),
            member: member.map(str::to_string),
            message: message.into(),
            details: BTreeMap::new(),
            host: host_name(),
            time: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        }
    }

    pub fn with(mut self, key: &str, value: impl ToString) -> Alert {
        self.details.insert(key.to_string(), value.to_string());
        self
    }

    /// `Fail on array "home", member /dev/sdb: <message>`
    pub fn summary(&self) -> String {
        let member = match &self.member {
            Some(m) => format!(", member {m}"),
            None => String::new(),
        };
        format!(
            "{} on array {:?}{member}: {}",
            self.event, self.array, self.message
        )
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string())
}

/// Where alerts go ([alerts] in the configuration file). Each target is optional.
#[derive(Debug, Clone)]
pub struct Targets {
    pub program: Option<PathBuf>,
    pub mail_to: Option<String>,
    /// A sendmail-compatible command line (split on spaces) reading the message on stdin.
    pub mail_command: String,
    /// An `http://` URL that receives each alert as a JSON POST.
    pub webhook: Option<String>,
    pub syslog: bool,
    /// The syslog socket (default `/dev/log`, where syslog daemons and journald listen).
    pub syslog_socket: PathBuf,
    /// Tries per alert and target before it is given up (and logged).
    pub attempts: u32,
    /// Wait before the second try; it doubles before each next one.
    pub backoff: Duration,
    /// Longest one delivery may take (a program is killed after it).
    pub timeout: Duration,
}

/// The mail command when the configuration names none.
pub const MAIL_COMMAND_DEFAULT: &str = "/usr/sbin/sendmail -t";

impl Default for Targets {
    fn default() -> Self {
        Targets {
            program: None,
            mail_to: None,
            mail_command: MAIL_COMMAND_DEFAULT.to_string(),
            webhook: None,
            syslog: false,
            syslog_socket: PathBuf::from("/dev/log"),
            attempts: 4,
            backoff: Duration::from_secs(1),
            timeout: Duration::from_secs(30),
        }
    }
}

/// Where the alerter's own lines go (the daemon's log).
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// What sees every alert raised, on the raiser's thread: it must not block (keep the alert in
/// a bounded memory, or queue it with `try_send`).
pub type Tap = Arc<dyn Fn(&Alert) + Send + Sync>;

/// A running alerter; see the crate documentation.
pub struct Alerter {
    /// Replaced whole by [`Alerter::retarget`].
    sinks: RwLock<Vec<Sink>>,
    log: Log,
    tap: RwLock<Option<Tap>>,
}

struct Sink {
    target: deliver::Target,
    queue: SyncSender<Arc<Alert>>,
    dropped: Arc<AtomicU64>,
    thread: JoinHandle<()>,
}

impl Alerter {
    /// Starts one delivery thread per configured target. With none, says at once that no
    /// alert will reach anyone (events are still logged).
    pub fn start(targets: &Targets, log: Log) -> Alerter {
        Alerter {
            sinks: RwLock::new(Sink::start_all(targets, &log)),
            log,
            tap: RwLock::new(None),
        }
    }

    /// An alerter that only logs the alerts raised (sends them nowhere, and says nothing at
    /// start): `raidkit serve`, whose events go to its log; the daemon's `[alerts]` send them.
    pub fn log_only(log: Log) -> Alerter {
        Alerter {
            sinks: RwLock::new(Vec::new()),
            log,
            tap: RwLock::new(None),
        }
    }

    /// Shows every alert raised from now on to `tap` too (replacing the one set before).
    pub fn tap(&self, tap: Tap) {
        *self.tap.write().unwrap_or_else(|p| p.into_inner()) = Some(tap);
    }

    /// Sends the alerts raised from now on to `targets` instead (the configuration was
    /// reloaded): the new targets' threads start, the old ones deliver what they have queued
    /// and end by themselves. Says where alerts go now, as [`Alerter::start`] does.
    pub fn retarget(&self, targets: &Targets) {
        let new = Sink::start_all(targets, &self.log);
        let old = std::mem::replace(
            &mut *self.sinks.write().unwrap_or_else(|p| p.into_inner()),
            new,
        );
        // Dropping a queue's sender ends its thread once the alerts queued are delivered.
        drop(old);
    }

    fn sinks(&self) -> RwLockReadGuard<'_, Vec<Sink>> {
        self.sinks.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Logs `alert` and queues it for every target; never blocks.
    pub fn raise(&self, alert: Alert) {
        let word = match alert.event.severity() {
            Severity::Critical => "ALERT",
            Severity::Warning => "warning",
            Severity::Info => "event",
        };
        (self.log)(&format!("{word}: {}", alert.summary()));
        if let Some(tap) = &*self.tap.read().unwrap_or_else(|p| p.into_inner()) {
            tap(&alert);
        }
        let alert = Arc::new(alert);
        for sink in self.sinks().iter() {
            match sink.queue.try_send(Arc::clone(&alert)) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    let dropped = sink.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                    (self.log)(&format!(
                        "warning: alert {} not sent to {}: {QUEUE_ALERTS} alerts are waiting for \
                         it already ({dropped} dropped so far)",
                        alert.event,
                        sink.target.kind()
                    ));
                }
                Err(TrySendError::Disconnected(_)) => (self.log)(&format!(
                    "error: the {} alert thread is gone",
                    sink.target.kind()
                )),
            }
        }
    }

    /// The kinds of the configured targets (`program`, `mail`, `webhook`, `syslog`); empty
    /// when alerts are only logged.
    pub fn target_kinds(&self) -> Vec<&'static str> {
        self.sinks().iter().map(|s| s.target.kind()).collect()
    }

    /// Alerts dropped for each target because its queue was full.
    pub fn dropped(&self) -> Vec<(&'static str, u64)> {
        self.sinks()
            .iter()
            .map(|s| (s.target.kind(), s.dropped.load(Ordering::Relaxed)))
            .collect()
    }

    /// Stops taking alerts and gives the queued ones up to `grace` to be delivered; those
    /// still waiting then are logged as lost.
    pub fn shutdown(self, grace: Duration) {
        let deadline = Instant::now() + grace;
        let sinks = self.sinks.into_inner().unwrap_or_else(|p| p.into_inner());
        for sink in sinks {
            drop(sink.queue);
            while !sink.thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if !sink.thread.is_finished() {
                (self.log)(&format!(
                    "warning: alerts still waiting for {} after {grace:?} are not sent",
                    sink.target.kind()
                ));
            }
        }
    }
}

impl Sink {
    /// One sink per configured target, their threads started. With none, says at once that
    /// no alert will reach anyone (events are still logged).
    fn start_all(targets: &Targets, log: &Log) -> Vec<Sink> {
        let sinks: Vec<Sink> = deliver::Target::all(targets)
            .into_iter()
            .map(|target| Sink::start(target, targets, Arc::clone(log)))
            .collect();
        if sinks.is_empty() {
            log(
                "warning: no alert target is configured ([alerts] program, mail_to, webhook or \
                 syslog): events are only logged, no alert will reach anyone",
            );
        } else {
            let kinds: Vec<&str> = sinks.iter().map(|s| s.target.kind()).collect();
            log(&format!("alerts go to: {}", kinds.join(", ")));
        }
        sinks
    }

    fn start(target: deliver::Target, targets: &Targets, log: Log) -> Sink {
        let (queue, alerts) = mpsc::sync_channel(QUEUE_ALERTS);
        let policy = (targets.attempts.max(1), targets.backoff, targets.timeout);
        let worker = target.clone();
        let thread = std::thread::Builder::new()
            .name(format!("alerts-{}", target.kind()))
            .spawn(move || deliver_all(worker, alerts, policy, log))
            .expect("spawning an alert thread");
        Sink {
            target,
            queue,
            dropped: Arc::new(AtomicU64::new(0)),
            thread,
        }
    }
}

/// One target's thread: each alert in turn, tried `attempts` times with doubling waits.
fn deliver_all(
    target: deliver::Target,
    alerts: Receiver<Arc<Alert>>,
    (attempts, backoff, timeout): (u32, Duration, Duration),
    log: Log,
) {
    let kind = target.kind();
    let mut sender = target.sender();
    for alert in alerts {
        let mut wait = backoff;
        for attempt in 1..=attempts {
            match sender.send(&alert, timeout) {
                Ok(()) => break,
                Err(e) if attempt == attempts => log(&format!(
                    "error: alert {} for array {:?} not delivered to {} after {attempts} tries: \
                     {e}",
                    alert.event, alert.array, kind
                )),
                Err(e) => {
                    log(&format!(
                        "warning: alert {} to {kind} failed ({e}); trying again in {wait:?}",
                        alert.event
                    ));
                    std::thread::sleep(wait);
                    wait = wait.saturating_mul(2);
                }
            }
        }
    }
}

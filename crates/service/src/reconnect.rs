//! Background reconnect of remote members: [`Reconnector`] runs one thread
//! that watches `Volume::status` for roles whose remote (NBD URI) member is faulty, and for
//! remote members left out at start because their server could not be reached, and puts
//! such a member back (`Volume::remove` + `Volume::add`, which starts its rebuild) once its
//! server answers again with this array's superblock.
//!
//! A member is only put back after its server was seen *unreachable* (a disconnect), and then
//! answered on two probes at least [`CONFIRM`] apart: a member failed by the operator, or by
//! read/write errors or stalls of a server that kept answering, is left to the operator, and
//! so is a member the operator removed. Each member has its own capped exponential backoff.
//! Outcomes are reported once per change, as [`Event`]s to the front end's sink (`Tracked`
//! is the per-member state machine).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use member::{Member, OpenOptions, RemoteOptions};
use volume::{MemberState, Volume, VolumeStatus};

/// First retry delay after a failed probe.
pub const INTERVAL_MIN: Duration = Duration::from_secs(1);
/// A returning server must still answer this long after it first answered again.
pub const CONFIRM: Duration = Duration::from_secs(2);
/// Connect, handshake and superblock read deadline of one probe.
const PROBE_TIMEOUT_MAX: Duration = Duration::from_secs(5);
/// How often the thread looks at the volume's status.
const TICK: Duration = Duration::from_millis(250);
/// The reported outcome of a failed `Volume::add`.
const ADD_FAILED: &str = "add-failed";

/// What the reconnect thread reports, each once per change. `Display` is the line to log.
#[derive(Debug, Clone)]
pub enum Event {
    /// A tracked member's server was probed and something changed.
    Probed { uri: String, change: Change },
    /// The member answered twice with this array's superblock: it is added back, rebuilding
    /// the bitmap's dirty regions (`dirty_regions`) or, without a bitmap, in full.
    AddingBack {
        uri: String,
        dirty_regions: Option<u64>,
    },
    /// `Volume::remove` or `Volume::add` refused it; retried with backoff, reported once.
    AddFailed { uri: String, error: String },
}

/// What a probe found that changed since the last report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The server cannot be reached (why).
    Unreachable(String),
    /// The server answers, but not with this array's superblock (why).
    Refused(String),
    /// The member is faulty but its server kept answering: left to the operator.
    LeftToOperator,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Unreachable(why) => {
                write!(f, "is unreachable ({why}); retrying in the background")
            }
            Change::Refused(why) => write!(f, "answers but is not added back: {why}"),
            Change::LeftToOperator => write!(
                f,
                "is faulty but its server kept answering: left to the operator (raidkit remove \
                 / add)"
            ),
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Probed { uri, change } => write!(f, "member {uri} {change}"),
            Event::AddingBack { uri, dirty_regions } => {
                let rebuild = match dirty_regions {
                    Some(n) => format!("rebuild of {n} regions"),
                    None => "full rebuild".to_string(),
                };
                write!(
                    f,
                    "member {uri} is reachable again; adding it back ({rebuild})"
                )
            }
            Event::AddFailed { uri, error } => {
                write!(f, "member {uri} could not be added back: {error}; retrying")
            }
        }
    }
}

/// Where the thread's [`Event`]s go (a log line, an alert).
pub type EventSink = Box<dyn Fn(Event) + Send>;

/// What one probe of a member's server found.
#[derive(Debug)]
pub enum Probe {
    /// Connecting or the handshake failed.
    Unreachable(String),
    /// The server answers but its export is not this array's member (or cannot be read).
    Refused(String),
    /// The server answers with a superblock of this array.
    Ready(Arc<dyn Member>),
}

/// What to do after a probe.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Wait,
    AddBack,
}

/// One remote member being watched.
struct Tracked {
    /// Its server was seen unreachable (or could not be reached at start).
    was_down: bool,
    /// Status is expected to list it (false for members left out at start, or removed by us).
    listed: bool,
    /// When its server first answered again with the right superblock.
    ready_since: Option<Instant>,
    next_probe: Instant,
    backoff: Duration,
    /// The last outcome logged, so that each change is logged once.
    last_logged: String,
}

impl Tracked {
    fn new(now: Instant, was_down: bool, listed: bool) -> Tracked {
        Tracked {
            was_down,
            listed,
            ready_since: None,
            next_probe: now,
            backoff: INTERVAL_MIN,
            last_logged: String::new(),
        }
    }

    /// Schedules the next probe after the current backoff, then doubles it (capped).
    fn back_off(&mut self, now: Instant, cap: Duration) {
        self.next_probe = now + self.backoff.min(cap);
        self.backoff = (self.backoff * 2).min(cap);
    }

    /// Advances the state machine with a probe outcome; returns what changed, to report.
    fn on_probe(&mut self, probe: &Probe, now: Instant, cap: Duration) -> (Step, Option<Change>) {
        let (key, change) = match probe {
            Probe::Unreachable(why) => {
                self.was_down = true;
                self.ready_since = None;
                ("down", Change::Unreachable(why.clone()))
            }
            Probe::Refused(why) => {
                self.ready_since = None;
                ("refused", Change::Refused(why.clone()))
            }
            Probe::Ready(_) if !self.was_down => {
                self.ready_since = None;
                ("up", Change::LeftToOperator)
            }
            Probe::Ready(_) => match self.ready_since {
                Some(since) if now.duration_since(since) >= CONFIRM => {
                    return (Step::AddBack, None)
                }
                Some(_) => {
                    self.next_probe = now + TICK;
                    return (Step::Wait, None);
                }
                None => {
                    self.ready_since = Some(now);
                    self.next_probe = now + CONFIRM;
                    self.backoff = INTERVAL_MIN;
                    return (Step::Wait, None);
                }
            },
        };
        self.back_off(now, cap);
        let changed = self.last_logged != key;
        self.last_logged = key.to_string();
        (Step::Wait, changed.then_some(change))
    }
}

/// True when opening a remote member failed after its server answered, which speaks but not
/// as this member must: no TLS for an `nbds` URI, TLS required for an `nbd` one, a certificate
/// refused either way, a protocol error, an export that cannot be used. Such a server is
/// reported as refused rather than as unreachable.
fn answered(e: &member::MemberError) -> bool {
    use std::io::ErrorKind::{InvalidData, PermissionDenied, Unsupported};
    match e {
        member::MemberError::Io { source, .. } => {
            matches!(source.kind(), InvalidData | Unsupported | PermissionDenied)
        }
        member::MemberError::Refused { .. } | member::MemberError::Empty { .. } => true,
        _ => false,
    }
}

/// Settings of the reconnect thread.
#[derive(Debug, Clone)]
pub struct Config {
    /// Cap of the per-member retry delay (at least [`INTERVAL_MIN`]).
    pub interval_max: Duration,
    pub open: OpenOptions,
    pub remote: RemoteOptions,
}

/// The stop flag shared with the thread.
type StopFlag = Arc<(Mutex<bool>, Condvar)>;

/// The running reconnect thread; [`Reconnector::stop`] ends it.
pub struct Reconnector {
    stop: StopFlag,
    thread: JoinHandle<()>,
}

impl Reconnector {
    /// Starts watching `volume`; `left_out` are the remote members that could not be reached
    /// at start (not in the array). Fails only if the thread cannot be started.
    pub fn start(
        volume: Arc<Volume>,
        left_out: Vec<String>,
        config: Config,
        fence: member::Fence,
        report: EventSink,
    ) -> std::io::Result<Reconnector> {
        assert!(
            config.interval_max >= INTERVAL_MIN,
            "reconnect interval cap below 1 s"
        );
        let stop: StopFlag = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("reconnect".into())
            .spawn(move || Watcher::new(volume, left_out, config, fence, report).run(&flag))?;
        Ok(Reconnector { stop, thread })
    }

    /// Stops the thread and waits for it (at most one probe's timeout); `Err` if it panicked.
    pub fn stop(self) -> std::thread::Result<()> {
        let (lock, wake) = &*self.stop;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        wake.notify_all();
        self.thread.join()
    }
}

/// The thread's state.
struct Watcher {
    volume: Arc<Volume>,
    config: Config,
    /// The array's fence: a member added back is put behind it.
    fence: member::Fence,
    tracked: BTreeMap<String, Tracked>,
    report: EventSink,
}

impl Watcher {
    fn new(
        volume: Arc<Volume>,
        left_out: Vec<String>,
        mut config: Config,
        fence: member::Fence,
        report: EventSink,
    ) -> Watcher {
        config.remote.io_timeout = config.remote.io_timeout.min(PROBE_TIMEOUT_MAX);
        let now = Instant::now();
        let tracked = left_out
            .into_iter()
            .filter(|uri| member::is_nbd_uri(uri))
            .map(|uri| (uri, Tracked::new(now, true, false)))
            .collect();
        Watcher {
            volume,
            config,
            fence,
            tracked,
            report,
        }
    }

    fn run(mut self, stop: &StopFlag) {
        let (lock, wake) = &**stop;
        let mut stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
        while !*stopped {
            drop(stopped);
            self.tick(Instant::now());
            stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
            if *stopped {
                break;
            }
            stopped = wake
                .wait_timeout(stopped, TICK)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn tick(&mut self, now: Instant) {
        self.follow_status(&self.volume.status(), now);
        let due: Vec<String> = self
            .tracked
            .iter()
            .filter(|(_, t)| t.next_probe <= now)
            .map(|(uri, _)| uri.clone())
            .collect();
        for uri in due {
            self.probe_and_step(&uri);
        }
    }

    /// Starts tracking newly faulty remote members; stops tracking those that are back, or
    /// that someone else took out of the array.
    fn follow_status(&mut self, status: &VolumeStatus, now: Instant) {
        let roles: BTreeMap<&str, MemberState> = status
            .members
            .iter()
            .filter(|m| m.role.is_some() && !m.name.is_empty())
            .map(|m| (m.name.as_str(), m.state))
            .collect();
        for (name, state) in &roles {
            if *state == MemberState::Faulty && member::is_nbd_uri(name) {
                let entry = self.tracked.entry(name.to_string());
                entry
                    .or_insert_with(|| Tracked::new(now, false, true))
                    .listed = true;
            }
        }
        self.tracked.retain(|uri, t| match roles.get(uri.as_str()) {
            Some(state) => *state == MemberState::Faulty,
            // Not listed: keep it only if it was never listed (left out) or we removed it.
            None => !t.listed,
        });
    }

    fn probe_and_step(&mut self, uri: &str) {
        let probe = self.probe(uri);
        let now = Instant::now();
        let cap = self.config.interval_max;
        let Some(t) = self.tracked.get_mut(uri) else {
            return;
        };
        let (step, change) = t.on_probe(&probe, now, cap);
        if let Some(change) = change {
            let uri = uri.to_string();
            (self.report)(Event::Probed { uri, change });
        }
        if let (Step::AddBack, Probe::Ready(m)) = (step, probe) {
            self.add_back(uri, m, now);
        }
    }

    /// Connects to the member's server and reads its superblock.
    fn probe(&self, uri: &str) -> Probe {
        let member = match member::open_with(uri, &self.config.open, &self.config.remote) {
            Ok(m) => m,
            Err(e) if answered(&e) => return Probe::Refused(e.to_string()),
            Err(e) => return Probe::Unreachable(e.to_string()),
        };
        match ondisk::read_superblock(member.as_ref()) {
            Ok(sb) if sb.array_uuid == self.volume.uuid() => Probe::Ready(self.fence.wrap(member)),
            Ok(sb) => Probe::Refused(format!(
                "its superblock belongs to another array (\"{}\" {}), not \"{}\" {}",
                sb.name,
                sb.array_uuid,
                self.volume.name(),
                self.volume.uuid()
            )),
            Err(e) => Probe::Refused(format!("no superblock of this array: {e}")),
        }
    }

    /// `remove` (if still listed) then `add`: the volume starts the rebuild.
    fn add_back(&mut self, uri: &str, member: Arc<dyn Member>, now: Instant) {
        let cap = self.config.interval_max;
        // After a failed add, the retries stay quiet until something changes.
        let quiet = self
            .tracked
            .get(uri)
            .is_some_and(|t| t.last_logged == ADD_FAILED);
        if !quiet {
            let dirty_regions = self.volume.status().bitmap.map(|b| b.dirty_regions);
            let uri = uri.to_string();
            (self.report)(Event::AddingBack { uri, dirty_regions });
        }
        let listed = self
            .volume
            .status()
            .members
            .iter()
            .any(|m| m.role.is_some() && m.name == uri);
        let result = if listed {
            self.volume.remove(uri)
        } else {
            Ok(())
        };
        if let Some(t) = self.tracked.get_mut(uri) {
            // From here status may not list it: that is our doing, not the operator's.
            t.listed = t.listed && result.is_err();
        }
        match result.and_then(|()| self.volume.add(member)) {
            Ok(()) => {
                self.tracked.remove(uri);
            }
            Err(e) => {
                if !quiet {
                    let (uri, error) = (uri.to_string(), e.to_string());
                    (self.report)(Event::AddFailed { uri, error });
                }
                if let Some(t) = self.tracked.get_mut(uri) {
                    t.ready_since = None;
                    t.last_logged = ADD_FAILED.into();
                    t.back_off(now, cap);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Duration = Duration::from_secs(30);

    fn ready() -> Probe {
        Probe::Ready(Arc::new(
            member::MemMember::new("mem:1M", 1 << 20).expect("mem member"),
        ))
    }

    #[test]
    fn a_server_that_answers_wrongly_is_refused_not_unreachable() {
        use std::io::{Error, ErrorKind};
        let io = |kind| member::MemberError::Io {
            name: "nbds://h/".into(),
            action: "connect to",
            source: Error::new(kind, "x"),
        };
        // No TLS offered, a certificate refused, TLS required: the server answered.
        for kind in [
            ErrorKind::Unsupported,
            ErrorKind::InvalidData,
            ErrorKind::PermissionDenied,
        ] {
            assert!(answered(&io(kind)), "{kind:?}");
        }
        for kind in [
            ErrorKind::ConnectionRefused,
            ErrorKind::NotFound,
            ErrorKind::TimedOut,
        ] {
            assert!(!answered(&io(kind)), "{kind:?}");
        }
    }

    #[test]
    fn faulty_member_whose_server_kept_answering_is_not_added() {
        let t0 = Instant::now();
        let mut t = Tracked::new(t0, false, true);
        let (step, change) = t.on_probe(&ready(), t0, CAP);
        assert_eq!(step, Step::Wait);
        let line = change.expect("reported").to_string();
        assert!(line.contains("left to the operator"), "{line}");
        for i in 1..10 {
            let (step, change) = t.on_probe(&ready(), t0 + CONFIRM * i, CAP);
            assert_eq!(step, Step::Wait);
            assert!(change.is_none(), "reported once per change");
        }
    }

    #[test]
    fn disconnected_member_is_added_after_answering_twice() {
        let t0 = Instant::now();
        let mut t = Tracked::new(t0, false, true);
        let down = Probe::Unreachable("refused".into());
        assert!(t.on_probe(&down, t0, CAP).1.is_some());
        assert!(t.on_probe(&down, t0, CAP).1.is_none(), "reported once");
        assert_eq!(t.on_probe(&ready(), t0, CAP).0, Step::Wait);
        assert_eq!(t.next_probe, t0 + CONFIRM);
        assert_eq!(t.on_probe(&ready(), t0 + CONFIRM / 2, CAP).0, Step::Wait);
        assert_eq!(t.on_probe(&ready(), t0 + CONFIRM, CAP).0, Step::AddBack);
    }

    #[test]
    fn flapping_or_foreign_server_restarts_the_confirmation() {
        let t0 = Instant::now();
        let mut t = Tracked::new(t0, true, false);
        assert_eq!(t.on_probe(&ready(), t0, CAP).0, Step::Wait);
        let refused = Probe::Refused("another array".into());
        let (step, change) = t.on_probe(&refused, t0 + CONFIRM, CAP);
        assert_eq!(step, Step::Wait);
        let line = change.expect("reported").to_string();
        assert!(line.contains("another array"), "{line}");
        assert_eq!(t.on_probe(&ready(), t0 + CONFIRM * 2, CAP).0, Step::Wait);
        assert_eq!(t.on_probe(&ready(), t0 + CONFIRM * 3, CAP).0, Step::AddBack);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let t0 = Instant::now();
        let cap = Duration::from_secs(5);
        let mut t = Tracked::new(t0, true, false);
        let mut delays = Vec::new();
        for _ in 0..6 {
            t.on_probe(&Probe::Unreachable("x".into()), t0, cap);
            delays.push(t.next_probe.duration_since(t0).as_secs());
        }
        assert_eq!(delays, [1, 2, 4, 5, 5, 5]);
    }
}

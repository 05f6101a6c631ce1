//! What `mdadm --monitor` does for md: watching each array and raising an alert when
//! something an operator must know about happens. [`changes`] is the pure part — the events
//! between two status snapshots of one array —; [`Monitor`] polls every array's status every
//! [`POLL_INTERVAL`] on a thread of its own and raises what [`changes`] finds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use alerts::{Alert, Alerter, Event};
use volume::{ArrayHealth, MemberState, MemberStatus, TaskKind, TaskStatus, Volume, VolumeStatus};

/// How often each array's status is read (a status is an in-memory snapshot: cheap).
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// The alerts an array's status raises when first seen: `DegradedArray` for an array that
/// starts degraded (the alert mdadm users miss after a reboot).
pub fn at_start(status: &VolumeStatus) -> Vec<Alert> {
    let mut alerts = vec![Alert::new(
        Event::NewArray,
        &status.name,
        None,
        format!(
            "{} of {} bytes assembled and served",
            status.level, status.size_bytes
        ),
    )];
    if degraded(status.health) {
        alerts.push(degraded_alert(status));
    }
    alerts
}

fn degraded(health: ArrayHealth) -> bool {
    matches!(health, ArrayHealth::Degraded | ArrayHealth::Failed)
}

fn degraded_alert(status: &VolumeStatus) -> Alert {
    let missing = status
        .members
        .iter()
        .filter(|m| {
            m.role.is_some() && matches!(m.state, MemberState::Faulty | MemberState::Missing)
        })
        .count();
    Alert::new(
        Event::DegradedArray,
        &status.name,
        None,
        format!(
            "{missing} member(s) faulty or missing; health {:?}",
            status.health
        ),
    )
    .with("missing_members", missing)
}

/// Percent of a rebuild or replace done.
fn percent(task: &TaskStatus) -> u8 {
    (task.done_bytes.saturating_mul(100) / task.total_bytes.max(1)).min(100) as u8
}

fn rebuilding(task: &Option<TaskStatus>) -> Option<&TaskStatus> {
    task.as_ref()
        .filter(|t| matches!(t.kind, TaskKind::Rebuild | TaskKind::Replace))
}

/// The events between two snapshots of one array, in the order an operator reads them.
pub fn changes(before: &VolumeStatus, now: &VolumeStatus) -> Vec<Alert> {
    let name = &now.name;
    let mut alerts = Vec::new();
    let was: HashMap<&str, &MemberStatus> = before
        .members
        .iter()
        .map(|m| (m.name.as_str(), m))
        .collect();
    for m in now.members.iter().filter(|m| !m.name.is_empty()) {
        let earlier = was.get(m.name.as_str());
        let member = Some(m.name.as_str());
        match (earlier.map(|b| b.state), m.state) {
            (
                Some(MemberState::Rebuilding | MemberState::ReplacementTarget),
                MemberState::Faulty,
            ) => alerts.push(Alert::new(
                Event::FailSpare,
                name,
                member,
                "failed while being rebuilt onto",
            )),
            (Some(e), MemberState::Faulty) if e != MemberState::Faulty => alerts.push(
                Alert::new(Event::Fail, name, member, "marked faulty")
                    .with("read_errors", m.read_errors)
                    .with("write_errors", m.write_errors)
                    .with("timeouts", m.timeouts),
            ),
            _ => {}
        }
        if m.timeouts > earlier.map_or(0, |b| b.timeouts) {
            alerts.push(
                Alert::new(
                    Event::MemberTimeout,
                    name,
                    member,
                    "a request ran past its deadline",
                )
                .with("timeouts", m.timeouts),
            );
        }
    }
    // Roles whose member became active: a spare rebuilt onto the role (or a member re-added).
    let active_again: Vec<&str> = now
        .members
        .iter()
        .filter(|m| m.role.is_some() && m.state == MemberState::Active)
        .filter(|m| {
            before
                .members
                .iter()
                .find(|b| b.role == m.role)
                .is_some_and(|b| b.state != MemberState::Active || b.name != m.name)
        })
        .map(|m| m.name.as_str())
        .collect();
    let (was, is) = (rebuilding(&before.task), rebuilding(&now.task));
    if was.is_none() && (is.is_some() || !active_again.is_empty()) {
        // A small rebuild can start and finish between two looks: it is said all the same.
        let total = is.map_or(0, |t| t.total_bytes);
        alerts.push(
            Alert::new(Event::RebuildStarted, name, None, "rebuild started")
                .with("total_bytes", total),
        );
    }
    if let (Some(old), Some(task)) = (was, is) {
        if let Some(event) = Event::rebuild_progress(percent(old), percent(task)) {
            alerts.push(Alert::new(
                event,
                name,
                None,
                format!("{}% rebuilt", percent(task)),
            ))
        }
    }
    for member in &active_again {
        alerts.push(Alert::new(
            Event::SpareActive,
            name,
            Some(member),
            "rebuilt: now an active member",
        ));
    }
    if is.is_none() && (was.is_some() || !active_again.is_empty()) {
        alerts.push(Alert::new(Event::RebuildFinished, name, None, "finished"));
    }
    if degraded(now.health) && !degraded(before.health) {
        alerts.push(degraded_alert(now));
    }
    let mismatches = |s: &VolumeStatus| {
        s.last_scrub
            .as_ref()
            .filter(|r| r.finished)
            .map(|r| r.mismatches)
    };
    if let Some(found) = mismatches(now).filter(|&n| n > 0) {
        if before.last_scrub != now.last_scrub {
            alerts.push(
                Alert::new(
                    Event::MismatchesFound,
                    name,
                    None,
                    format!("a scrub found {found} mismatches"),
                )
                .with("mismatches", found),
            );
        }
    }
    alerts
}

/// The monitoring thread of one process's arrays.
pub struct Monitor {
    watched: Arc<Mutex<Vec<Watched>>>,
    /// Milliseconds after `started` of the last completed poll (the watchdog's heartbeat).
    polled_ms: Arc<AtomicU64>,
    started: Instant,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

struct Watched {
    volume: Arc<Volume>,
    last: VolumeStatus,
}

impl Monitor {
    pub fn start(alerter: Arc<Alerter>) -> Monitor {
        let watched: Arc<Mutex<Vec<Watched>>> = Arc::default();
        let (stop, stopped) = mpsc::channel::<()>();
        let polled = Arc::clone(&watched);
        let (polled_ms, started) = (Arc::new(AtomicU64::new(0)), Instant::now());
        let heartbeat = Arc::clone(&polled_ms);
        let thread = std::thread::Builder::new()
            .name("monitor".into())
            .spawn(move || loop {
                match stopped.recv_timeout(POLL_INTERVAL) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                let mut watched = polled.lock().unwrap_or_else(|p| p.into_inner());
                for w in watched.iter_mut() {
                    let now = w.volume.status();
                    for alert in changes(&w.last, &now) {
                        alerter.raise(alert);
                    }
                    w.last = now;
                }
                heartbeat.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
            })
            .expect("spawning the monitor thread");
        Monitor {
            watched,
            polled_ms,
            started,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Watches `volume` from now on; what [`at_start`] finds is returned to be raised.
    pub fn watch(&self, volume: &Arc<Volume>) -> Vec<Alert> {
        let last = volume.status();
        let alerts = at_start(&last);
        let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        watched.push(Watched {
            volume: Arc::clone(volume),
            last,
        });
        alerts
    }

    /// True when the monitor looked at every array within `within` (it is not stuck on one):
    /// what the daemon's systemd watchdog ping stands for.
    pub fn alive(&self, within: Duration) -> bool {
        let polled = Duration::from_millis(self.polled_ms.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(polled) <= within
    }

    /// Stops watching `volume` (it is being closed) and lets go of it. By identity, not by
    /// name: two arrays may carry the same name in their superblocks.
    pub fn forget(&self, volume: &Arc<Volume>) {
        let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        watched.retain(|w| !Arc::ptr_eq(&w.volume, volume));
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

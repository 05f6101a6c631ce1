//! What `mdadm --monitor` does for md: watching each array and raising an alert when
//! something an operator must know about happens. The pure part: [`changes`], the events
//! between two status snapshots of one array; [`spares_missing`], fewer spares present than
//! the configuration lists (at start, and when it becomes true); [`journal_pressure`], the
//! journal's ring filled up since the last alert (at most once per
//! [`PRESSURE_ALERT_INTERVAL`]). [`Monitor`] polls every array's status every
//! [`POLL_INTERVAL`] on a thread of its own and raises what they find.

use std::collections::{BTreeSet, HashMap};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::periodic::Periodic;
use crate::spares::{self, ArrayView, Decision};
use crate::stack::ArrayStack;
use alerts::{Alert, Alerter, Event};
use export::JournalLayer;
use volume::{ArrayHealth, MemberState, MemberStatus, TaskKind, TaskStatus, Volume, VolumeStatus};

/// How often each array's status is read (a status is an in-memory snapshot: cheap).
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// `JournalPressure` is raised at most this often per array (a journal too small for its
/// load fills up again and again: one alert with the figures says it).
pub const PRESSURE_ALERT_INTERVAL: Duration = Duration::from_secs(300);

/// Spares present: members with no role that are spares (not faulty, not being filled).
pub fn spares_present(status: &VolumeStatus) -> usize {
    status
        .members
        .iter()
        .filter(|m| m.role.is_none() && m.state == MemberState::Spare)
        .count()
}

/// `SparesMissing` (mdadm's name) when `now` has fewer spares than the `listed` ones the
/// configuration names: at start (`before` is `None`), or when it becomes true (a spare
/// failed, was removed, was rebuilt onto or lent to another array); not again while it stays
/// true.
pub fn spares_missing(
    listed: usize,
    before: Option<&VolumeStatus>,
    now: &VolumeStatus,
) -> Option<Alert> {
    let present = spares_present(now);
    let was_missing = before.is_some_and(|b| spares_present(b) < listed);
    (present < listed && !was_missing).then(|| {
        Alert::new(
            Event::SparesMissing,
            &now.name,
            None,
            format!("{present} spare(s) present, the configuration lists {listed}"),
        )
        .with("spares_present", present)
        .with("spares_listed", listed)
    })
}

/// The journal's figures the monitor alerts on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalFigures {
    /// Applies forced by a full ring since the journal was attached.
    pub pressure_applies: u64,
    pub used_bytes: u64,
    pub ring_bytes: u64,
}

/// What the last `JournalPressure` of one array said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PressureReported {
    /// The count of pressure applies it covered (at watch start: the count then).
    pub applies: u64,
    /// When it was raised; `None`: not yet.
    pub at: Option<Instant>,
}

/// `JournalPressure` when the count of applies forced by a full ring rose since the last
/// alert (`reported`) and that alert is at least [`PRESSURE_ALERT_INTERVAL`] old at `at`;
/// the alert counts the applies since it. The caller records what it raised.
pub fn journal_pressure(
    array: &str,
    reported: &PressureReported,
    now: &JournalFigures,
    at: Instant,
) -> Option<Alert> {
    let new = now.pressure_applies.checked_sub(reported.applies)?;
    let quiet = reported
        .at
        .is_none_or(|last| at.saturating_duration_since(last) >= PRESSURE_ALERT_INTERVAL);
    (new > 0 && quiet).then(|| {
        Alert::new(
            Event::JournalPressure,
            array,
            None,
            format!(
                "the journal's ring was full {new} time(s) since the last alert ({} in all): \
                 writes waited for records to be applied to the members; a larger journal \
                 would avoid it",
                now.pressure_applies
            ),
        )
        .with("pressure_applies", now.pressure_applies)
        .with("pressure_applies_new", new)
        .with("journal_used_bytes", now.used_bytes)
        .with("journal_ring_bytes", now.ring_bytes)
    })
}

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

/// `SlowMember` when `m` became slow since `earlier`, `SlowMemberRecovered` when it stopped
/// being slow (while still in the array: a slow member that failed is told by `Fail`).
fn slow_change(array: &str, earlier: Option<&MemberStatus>, m: &MemberStatus) -> Option<Alert> {
    let was = earlier.is_some_and(|b| b.slow);
    let ms = |us: Option<u64>| us.map_or("?".to_string(), |us| format!("{:.1}", us as f64 / 1e3));
    let alert = match (was, m.slow) {
        (false, true) => Alert::new(
            Event::SlowMember,
            array,
            Some(&m.name),
            format!(
                "answers in {} ms per request against {} ms for its peers: its reads are served                  by the other members where redundancy allows; check the device (SMART,                  cabling, the remote server and its network) before it fails",
                ms(m.latency_us),
                ms(m.peers_latency_us)
            ),
        ),
        (true, false) if m.state == MemberState::Active => Alert::new(
            Event::SlowMemberRecovered,
            array,
            Some(&m.name),
            format!(
                "answers like its peers again ({} ms against {} ms): it is read again",
                ms(m.latency_us),
                ms(m.peers_latency_us)
            ),
        ),
        _ => return None,
    };
    let alert = match m.latency_us {
        Some(us) => alert.with("latency_us", us),
        None => alert,
    };
    Some(match m.peers_latency_us {
        Some(us) => alert.with("peers_latency_us", us),
        None => alert,
    })
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
        if let Some(alert) = slow_change(name, earlier.copied(), m) {
            alerts.push(alert);
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
    for bad in (now.bad_blocks.iter()).filter(|b| !before.bad_blocks.contains(b)) {
        let held = match bad.array_offset {
            Some(at) => format!("array offset {at}"),
            None => format!(
                "parity of the stripe at array offset {}",
                bad.stripe_array_offset
            ),
        };
        alerts.push(
            Alert::new(
                Event::BadBlocks,
                name,
                Some(&bad.member),
                format!(
                    "role {} bytes {}..{} of its data area recorded as lost ({held}): reads \
                     fail until written again",
                    bad.role,
                    bad.member_offset,
                    bad.member_offset + bad.len
                ),
            )
            .with("member_offset", bad.member_offset)
            .with("len", bad.len),
        );
    }
    let mismatches = |s: &VolumeStatus| {
        s.last_scrub
            .as_ref()
            .filter(|r| r.finished)
            .map(|r| (r.mismatches, r.units_lost))
    };
    let corrupt = |s: &VolumeStatus| s.checksum.as_ref().map_or(0, |c| c.mismatches);
    if corrupt(now) > corrupt(before) {
        let (found, total) = (corrupt(now) - corrupt(before), corrupt(now));
        alerts.push(
            Alert::new(
                Event::ChecksumMismatch,
                name,
                None,
                format!(
                    "{found} block(s) did not match their checksum (silent corruption; \
                     rewritten from redundancy where the level has it), {total} since start"
                ),
            )
            .with("checksum_mismatches", total),
        );
    }
    if let Some((found, lost)) = mismatches(now).filter(|&(n, l)| n > 0 || l > 0) {
        if before.last_scrub != now.last_scrub {
            let mut text = format!("a scrub found {found} mismatches");
            if lost > 0 {
                // Where: the report's `lost` list (status), each range also raised as
                // `BadBlocks` when it was recorded.
                text += &format!(
                    " and {lost} stripes holding ranges no member or redundancy can provide \
                     (recorded as lost in the bad-block lists; see `raidkit status`)"
                );
            }
            alerts.push(
                Alert::new(Event::MismatchesFound, name, None, text)
                    .with("mismatches", found)
                    .with("units_lost", lost),
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
    _polling: Periodic,
}

/// What the monitor is told of an array beside its stack.
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    /// Its name in the configuration (unique in the daemon): what spare moves name.
    pub name: String,
    /// The spares its configuration lists.
    pub spares_listed: usize,
    /// Its spare group: arrays of one group lend each other their spares ([`spares`]).
    pub spare_group: Option<String>,
}

struct Watched {
    volume: Arc<Volume>,
    journal: Arc<JournalLayer>,
    opts: WatchOptions,
    last: VolumeStatus,
    pressure: PressureReported,
}

impl Watched {
    /// One look: the events since the last, which becomes this one.
    fn look(&mut self) -> Vec<Alert> {
        let now = self.volume.status();
        let mut alerts = changes(&self.last, &now);
        alerts.extend(spares_missing(
            self.opts.spares_listed,
            Some(&self.last),
            &now,
        ));
        if let Some(figures) = journal_figures(&self.journal) {
            let at = Instant::now();
            if let Some(alert) = journal_pressure(&now.name, &self.pressure, &figures, at) {
                self.pressure = PressureReported {
                    applies: figures.pressure_applies,
                    at: Some(at),
                };
                alerts.push(alert);
            }
        }
        self.last = now;
        alerts
    }
}

fn journal_figures(journal: &JournalLayer) -> Option<JournalFigures> {
    let stats = journal.status()?.stats;
    Some(JournalFigures {
        pressure_applies: stats.pressure_applies,
        used_bytes: stats.used_bytes,
        ring_bytes: stats.capacity_bytes,
    })
}

impl Monitor {
    pub fn start(alerter: Arc<Alerter>) -> Monitor {
        let watched: Arc<Mutex<Vec<Watched>>> = Arc::default();
        let polled = Arc::clone(&watched);
        let (polled_ms, started) = (Arc::new(AtomicU64::new(0)), Instant::now());
        let heartbeat = Arc::clone(&polled_ms);
        let mut lending = Lending::default();
        let poll = move || {
            let mut watched = polled.lock().unwrap_or_else(|p| p.into_inner());
            for w in watched.iter_mut() {
                for alert in w.look() {
                    alerter.raise(alert);
                }
            }
            for alert in lending.round(&watched) {
                alerter.raise(alert);
            }
            heartbeat.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
            ControlFlow::Continue(())
        };
        Monitor {
            watched,
            polled_ms,
            started,
            _polling: Periodic::start("monitor", POLL_INTERVAL, poll)
                .expect("spawning the monitor thread"),
        }
    }

    /// Watches the array `stack` serves from now on; what [`at_start`] and
    /// [`spares_missing`] find is returned to be raised.
    pub fn watch(&self, stack: &ArrayStack, opts: WatchOptions) -> Vec<Alert> {
        let volume = stack.volume();
        let last = volume.status();
        let mut alerts = at_start(&last);
        alerts.extend(spares_missing(opts.spares_listed, None, &last));
        let journal = Arc::clone(stack.journal());
        let pressure = PressureReported {
            applies: journal_figures(&journal).map_or(0, |f| f.pressure_applies),
            at: None,
        };
        let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        watched.push(Watched {
            volume: Arc::clone(volume),
            journal,
            opts,
            last,
            pressure,
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

/// The spare groups' moves, round after round (one round per poll), with what must not be
/// repeated: moves that failed, and arrays already told that no spare of their group fits.
#[derive(Default)]
struct Lending {
    failed: BTreeSet<(String, String)>,
    told_none_fits: BTreeSet<String>,
}

impl Lending {
    /// Decides ([`spares::decide`]) and makes the moves; returns the alerts to raise.
    fn round(&mut self, watched: &[Watched]) -> Vec<Alert> {
        let grouped: Vec<&Watched> = (watched.iter())
            .filter(|w| w.opts.spare_group.is_some())
            .collect();
        let still: BTreeSet<String> = (grouped.iter())
            .filter(|w| spares::roles_wanting(&w.last) > 0)
            .map(|w| w.opts.name.clone())
            .collect();
        self.told_none_fits.retain(|name| still.contains(name));
        if still.is_empty() {
            self.failed.clear();
            return Vec::new();
        }
        let views: Vec<ArrayView> = grouped
            .iter()
            .map(|w| ArrayView {
                name: w.opts.name.clone(),
                group: w.opts.spare_group.clone(),
                roles_wanting: spares::roles_wanting(&w.last),
                spares: w.volume.spare_sizes(),
                member_bytes_needed: w.volume.member_bytes_needed(),
            })
            .collect();
        let named = |name: &str| grouped.iter().find(|w| w.opts.name == name);
        let mut alerts = Vec::new();
        for decision in spares::decide(&views, &self.failed) {
            match decision {
                Decision::Move {
                    group,
                    from,
                    to,
                    spare,
                    spare_bytes,
                } => {
                    let (Some(lender), Some(borrower)) = (named(&from), named(&to)) else {
                        continue;
                    };
                    alerts.push(match move_spare(lender, borrower, &spare) {
                        Ok(()) => moved_alert(&group, &from, &to, &spare, spare_bytes),
                        Err(why) => {
                            let alert = not_moved_alert(&group, &from, &to, &spare, &why);
                            self.failed.insert((from, spare));
                            alert
                        }
                    });
                }
                Decision::NoneFits {
                    group,
                    to,
                    needed,
                    largest,
                } => {
                    if self.told_none_fits.insert(to.clone()) {
                        alerts.push(none_fits_alert(&group, &to, needed, &largest));
                    }
                }
            }
        }
        alerts
    }
}

/// `MoveSpare` on `to`: `spare` of array `from` was moved to it.
fn moved_alert(group: &str, from: &str, to: &str, spare: &str, spare_bytes: u64) -> Alert {
    Alert::new(
        Event::MoveSpare,
        to,
        Some(spare),
        format!(
            "spare moved from array \"{from}\" (spare group \"{group}\") to array \"{to}\", \
             which rebuilds onto it"
        ),
    )
    .with("from_array", from)
    .with("to_array", to)
    .with("spare_group", group)
    .with("spare_bytes", spare_bytes)
}

/// `SparesMissing` on `to`: `spare` of array `from` could not be moved to it (`why`).
fn not_moved_alert(group: &str, from: &str, to: &str, spare: &str, why: &str) -> Alert {
    Alert::new(
        Event::SparesMissing,
        to,
        Some(spare),
        format!(
            "degraded, and the spare of array \"{from}\" (spare group \"{group}\") could not \
             be moved to it: {why}"
        ),
    )
    .with("from_array", from)
}

/// `SparesMissing` on `to`: no spare of its group is large enough (`largest`: the lender, the
/// spare and its bytes).
fn none_fits_alert(group: &str, to: &str, needed: u64, largest: &(String, String, u64)) -> Alert {
    let (from, spare, bytes) = largest;
    Alert::new(
        Event::SparesMissing,
        to,
        None,
        format!(
            "degraded, and no spare of spare group \"{group}\" is large enough for it: a member \
             needs {needed} bytes, the largest spare ({spare} of array \"{from}\") has {bytes}; \
             nothing was moved"
        ),
    )
    .with("member_bytes_needed", needed)
    .with("largest_spare_bytes", *bytes)
}

/// Takes `spare` out of `lender` and adds it to `borrower` (which rebuilds onto it). If the
/// add fails, the spare is given back to `lender`. The error says what happened.
fn move_spare(lender: &Watched, borrower: &Watched, spare: &str) -> Result<(), String> {
    let taken = (lender.volume.take_spare(spare)).map_err(|e| format!("taking it: {e}"))?;
    let Err(refused) = borrower.volume.add(Arc::clone(&taken)) else {
        return Ok(());
    };
    match lender.volume.add(taken) {
        Ok(()) => Err(format!(
            "adding it: {refused}; it is the spare of its array again"
        )),
        Err(e) => Err(format!(
            "adding it: {refused}; giving it back failed too ({e}): it is in no array now"
        )),
    }
}

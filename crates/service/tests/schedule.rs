//! The scheduler on a fake clock: a scheduled scrub starts when its time comes (once), is
//! skipped on a degraded or busy array and runs at the next occurrence, reports its finish;
//! the background window pauses and resumes scrubs; missed runs are not made up; the thread
//! ticks and stops when dropped.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use config::{Schedule, TimeWindow};
use jiff::civil::date;
use jiff::tz::TimeZone;
use jiff::ZonedDateTime;
use member::{Member, OpenOptions};
use service::schedule::{skip_reason, Clock, Note, Plan, Scheduler, Tell};
use volume::{ArrayHealth, SpeedLimits, TaskKind, Volume};

/// A clock a test sets.
struct FakeClock(Mutex<ZonedDateTime>);

impl FakeClock {
    fn at(h: i8, m: i8) -> Arc<FakeClock> {
        Arc::new(FakeClock(Mutex::new(local(27, h, m))))
    }
    fn set(&self, day: i8, h: i8, m: i8) {
        *self.0.lock().unwrap() = local(day, h, m);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> ZonedDateTime {
        self.0.lock().unwrap().clone()
    }
}

/// November 2026 in Central European time.
fn local(day: i8, h: i8, m: i8) -> ZonedDateTime {
    let tz = TimeZone::posix("CET-1CEST,M3.5.0,M10.5.0/3").unwrap();
    tz.to_zoned_datetime(date(2026, 11, day).at(h, m, 0, 0))
        .unwrap()
}

/// A new array "home" of `level` on `count` RAM members of 4 MiB.
fn ram_array(level: &str, count: usize) -> Volume {
    let open = || member::open("mem:4M", &OpenOptions::default()).unwrap();
    let members: Vec<Arc<dyn Member>> = (0..count).map(|_| open()).collect();
    // Without the used-regions map: these scrubs check every stripe of a new array (the map
    // would skip the regions never written).
    let mut opts = ondisk::CreateOptions::new(level.parse().unwrap(), "home");
    opts.used_region_bytes = None;
    ondisk::create(&members, &opts).unwrap();
    volume::assemble(members, &volume::AssembleOptions::default()).unwrap()
}

/// A clean RAID 5 of three RAM members (fast background work unless `slow`).
fn array(slow: bool) -> Arc<Volume> {
    let v = ram_array("raid5", 3);
    run_at(&v, if slow { 256 << 10 } else { 1 << 40 });
    Arc::new(v)
}

/// Background work on `v` at `bytes_per_sec` per member, no more and no less.
fn run_at(v: &Volume, bytes_per_sec: u64) {
    v.set_speed_limits(SpeedLimits {
        min_bytes_per_sec: bytes_per_sec,
        max_bytes_per_sec: bytes_per_sec,
    });
}

/// A scheduler whose thread does not tick during the test (the test ticks), and its notes.
fn scheduler(clock: &Arc<FakeClock>) -> (Scheduler, mpsc::Receiver<Note>) {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let tell: Tell = Arc::new(move |name: &str, note| {
        assert_eq!(name, "home");
        tx.lock().unwrap().send(note).unwrap();
    });
    let clock: Arc<dyn Clock> = clock.clone();
    (Scheduler::start(clock, tell, Duration::from_secs(3600)), rx)
}

fn plan(schedule: &str, window: Option<&str>) -> Plan {
    Plan {
        schedule: Schedule::parse(schedule).unwrap(),
        window: window.map(|w| TimeWindow::parse(w).unwrap()),
    }
}

fn notes(rx: &mpsc::Receiver<Note>) -> Vec<Note> {
    rx.try_iter().collect()
}

/// Ticks once and asserts the one note is the run skipped for `why`, the next one at `at`.
fn tick_skips(s: &Scheduler, rx: &mpsc::Receiver<Note>, why: &str, at: ZonedDateTime) {
    s.tick();
    match &notes(rx)[..] {
        [Note::Skipped { reason, next }] => {
            assert_eq!(reason, why);
            assert_eq!(next, &Some(at));
        }
        other => panic!("{other:?}"),
    }
}

/// Ticks until a note comes (the scrub runs on the volume's worker meanwhile).
fn tick_until_note(s: &Scheduler, rx: &mpsc::Receiver<Note>) -> Note {
    for _ in 0..3000 {
        s.tick();
        if let Ok(note) = rx.try_recv() {
            return note;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no note within 30 s");
}

#[test]
fn a_scheduled_scrub_starts_when_due_once_and_its_finish_is_told() {
    let clock = FakeClock::at(0, 30);
    let (s, rx) = scheduler(&clock);
    let v = array(false);
    s.watch("home", &v, plan("daily", None));
    let planned = notes(&rx);
    assert!(
        matches!(&planned[..], [Note::Planned { next: Some(n), .. }] if *n == local(27, 1, 0)),
        "{planned:?}"
    );
    clock.set(27, 0, 59);
    s.tick();
    assert!(
        notes(&rx).is_empty() && v.status().last_scrub.is_none(),
        "not yet"
    );
    clock.set(27, 1, 0);
    s.tick();
    match &notes(&rx)[..] {
        [Note::Started { next, waits: None }] => assert_eq!(next, &Some(local(28, 1, 0))),
        other => panic!("{other:?}"),
    }
    match tick_until_note(&s, &rx) {
        Note::Finished(report) => {
            assert!(report.finished && report.stripes_checked > 0 && report.mismatches == 0)
        }
        other => panic!("{other:?}"),
    }
    // Later the same night: nothing more starts.
    clock.set(27, 3, 0);
    for _ in 0..5 {
        s.tick();
    }
    assert!(notes(&rx).is_empty());
    let line = Note::Started {
        next: Some(local(28, 1, 0)),
        waits: None,
    }
    .to_string();
    assert_eq!(
        line,
        "scheduled scrub started (check only, at the background rate); next at 2026-11-28 \
         01:00:00 CET"
    );
}

#[test]
fn a_run_missed_before_the_start_is_not_made_up() {
    // The daemon starts at 01:30: today's 01:00 run is gone; the next is tomorrow's.
    let clock = FakeClock::at(1, 30);
    let (s, rx) = scheduler(&clock);
    let v = array(false);
    s.watch("home", &v, plan("daily", None));
    s.tick();
    assert!(matches!(
        &notes(&rx)[..],
        [Note::Planned { next: Some(n), .. }] if *n == local(28, 1, 0)
    ));
    assert!(v.status().last_scrub.is_none());
    // A clock that jumps over several runs (a suspended machine) runs one, not each.
    clock.set(29, 12, 0);
    s.tick();
    match &notes(&rx)[..] {
        [Note::Started { next, .. }] => assert_eq!(next, &Some(local(30, 1, 0))),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_degraded_or_busy_array_skips_the_run_and_the_next_occurrence_runs() {
    let clock = FakeClock::at(0, 0);
    let (s, rx) = scheduler(&clock);
    let v = array(true);
    s.watch("home", &v, plan("0 * * * *", None));
    notes(&rx);
    // Busy: the operator's scrub runs (slowly).
    v.scrub(false).unwrap();
    assert!(wait_until(|| v.status().task.is_some()));
    clock.set(27, 1, 0);
    tick_skips(&s, &rx, "a scrub runs", local(27, 2, 0));
    // Degraded: the operator's scrub ends (at full speed), then a member fails (no spare).
    run_at(&v, 1 << 40);
    assert!(v.wait_idle(Duration::from_secs(30)));
    v.fail("role 1").unwrap();
    assert_eq!(v.status().health, ArrayHealth::Degraded);
    let before = v.status().last_scrub;
    clock.set(27, 2, 0);
    tick_skips(&s, &rx, "the array is degraded", local(27, 3, 0));
    assert_eq!(
        v.status().last_scrub,
        before,
        "no scrub on a degraded array"
    );
}

fn wait_until(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..3000 {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn skip_reasons_follow_the_status() {
    let v = array(false);
    let mut status = v.status();
    assert_eq!(skip_reason(&status), None, "a clean idle array scrubs");
    status.health = ArrayHealth::Active;
    assert_eq!(skip_reason(&status), None, "an active (written) one too");
    for (health, why) in [
        (ArrayHealth::Degraded, "the array is degraded"),
        (ArrayHealth::Failed, "the array has failed"),
        (ArrayHealth::Rebuilding, "a rebuild or replace runs"),
        (ArrayHealth::Resyncing, "a resync is pending or runs"),
    ] {
        status.health = health;
        assert_eq!(skip_reason(&status).as_deref(), Some(why));
    }
    status.health = ArrayHealth::Clean;
    status.task = Some(volume::TaskStatus {
        kind: TaskKind::Repair,
        role: None,
        done_bytes: 0,
        total_bytes: 1,
        bytes_per_sec: 0,
        eta_secs: None,
        of_member_bytes: None,
        paused: Some("outside the background window 19:00-05:00".into()),
    });
    assert_eq!(
        skip_reason(&status).as_deref(),
        Some("a repair waits (outside the background window 19:00-05:00)")
    );
}

#[test]
fn the_window_pauses_a_running_scrub_and_resumes_it_where_it_stopped() {
    let clock = FakeClock::at(18, 0);
    let (s, rx) = scheduler(&clock);
    let v = array(true);
    // The scrub is due at 04:00, an hour before the window closes.
    s.watch("home", &v, plan("0 4 * * *", Some("19:00-05:00")));
    let first = notes(&rx);
    assert!(
        matches!(&first[..], [Note::Planned { .. }, Note::WindowClosed(_)]),
        "{first:?}"
    );
    v.scrub(false).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let task = v.status().task.unwrap();
    assert_eq!(
        task.paused.as_deref(),
        Some("outside the background window 19:00-05:00")
    );
    // 19:00: the window opens; the operator's scrub runs.
    clock.set(27, 19, 0);
    s.tick();
    assert!(matches!(&notes(&rx)[..], [Note::WindowOpened(_)]));
    assert!(wait_until(|| v
        .status()
        .task
        .is_some_and(
            |t| t.paused.is_none() && t.done_bytes >= 2 * 64 * 1024
        )));
    // 05:00: it closes; the scrub stops where it is. The 04:00 run was due: skipped, since a
    // scrub runs already.
    clock.set(28, 5, 0);
    s.tick();
    let closed = notes(&rx);
    assert!(
        matches!(&closed[..], [Note::WindowClosed(_), Note::Skipped { reason, .. }]
            if reason.starts_with("a scrub")),
        "{closed:?}"
    );
    assert!(wait_until(|| v
        .status()
        .task
        .is_some_and(|t| t.paused.is_some())));
    let paused = v.status().task.unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(v.status().task.unwrap(), paused);
    // 19:00 again: it goes on from there.
    clock.set(28, 19, 0);
    s.tick();
    notes(&rx);
    let mut resumed = None;
    assert!(wait_until(|| {
        resumed = v.status().task.filter(|t| t.paused.is_none());
        resumed.is_some()
    }));
    assert!(resumed.unwrap().done_bytes > paused.done_bytes);
    // A new plan without a window (a reload) lifts a closed one.
    clock.set(29, 6, 0);
    s.tick();
    assert!(wait_until(|| v
        .status()
        .task
        .is_some_and(|t| t.paused.is_some())));
    s.forget(&v);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        v.status().task.unwrap().paused.is_some(),
        "forget alone keeps it"
    );
    s.watch("home", &v, plan("off", None));
    assert!(wait_until(|| v
        .status()
        .task
        .is_some_and(|t| t.paused.is_none())));
}

#[test]
fn a_schedule_on_raid0_is_ignored_with_a_note_and_the_thread_ticks_and_stops() {
    let v = Arc::new(ram_array("raid0", 2));
    let clock = FakeClock::at(0, 0);
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let tell: Tell = Arc::new(move |_: &str, note| tx.lock().unwrap().send(note).unwrap());
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let s = Scheduler::start(dyn_clock, tell, Duration::from_millis(10));
    s.watch("home", &v, plan("every 1m", None));
    assert_eq!(
        notes(&rx).first().map(|n| n.to_string()).as_deref(),
        Some("scrub_schedule ignored: a raid0 array has no redundancy to check")
    );
    // The thread ticks by itself: a RAID 5 with a schedule due gets its scrub.
    let r5 = array(false);
    s.watch("home", &r5, plan("every 1m", None));
    notes(&rx);
    clock.set(27, 0, 1);
    let started = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(matches!(started, Note::Started { .. }), "{started:?}");
    let begun = std::time::Instant::now();
    drop(s);
    assert!(
        begun.elapsed() < Duration::from_secs(1),
        "the thread stops at once"
    );
}

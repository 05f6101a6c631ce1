//! The background window (`Volume::defer_background`): outside it a scrub or a resync returns
//! after its step and waits, keeping its position, shown paused with the reason; a rebuild
//! goes on; when the window opens the waiting work goes on from where it stopped. A scrub also
//! gives way to a rebuild that becomes due, and goes on from its position after it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use member::{Member, OpenOptions};
use volume::{ArrayHealth, MemberState, SpeedLimits, TaskKind, TaskStatus, Volume};

const WAIT: Duration = Duration::from_secs(60);
const OUTSIDE: &str = "outside the background window 19:00-05:00";

fn limits(max: u64) -> SpeedLimits {
    SpeedLimits {
        min_bytes_per_sec: max,
        max_bytes_per_sec: max,
    }
}

fn task(v: &Volume) -> Option<TaskStatus> {
    v.status().task
}

/// A RAID 5 of three new files with a fourth as its spare, assembled.
/// Asserts the task `resumed` from where it was at `before` (not from the start), then lets
/// it run at full speed to its end.
fn resumed_past_then_finish(v: &Volume, resumed: &TaskStatus, before: &TaskStatus) {
    assert!(
        resumed.done_bytes > before.done_bytes,
        "resumed at {} after {} were done",
        resumed.done_bytes,
        before.done_bytes
    );
    v.set_speed_limits(limits(1 << 40));
    assert!(v.wait_idle(WAIT));
}

fn raid5_with_a_spare(dir: &std::path::Path, prefix: &str) -> Volume {
    let all = files(dir, prefix, 4);
    let mut opts = ondisk::CreateOptions::new("raid5".parse().unwrap(), prefix);
    opts.chunk_bytes = 64 * 1024;
    opts.spares = open_all(&all[3..]);
    ondisk::create(&open_all(&all[..3]), &opts).unwrap();
    let mut members: Vec<Arc<dyn Member>> = open_all(&all[..3]);
    members.extend(open_all(&all[3..]));
    volume::assemble(members, &volume::AssembleOptions::default()).unwrap()
}

#[test]
fn a_scrub_outside_the_window_pauses_at_its_position_and_goes_on_from_there() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "w", "raid5", 3);
    let v = assemble_paths(&paths);
    v.write(0, &pattern(v.size_bytes() as usize, 7)).unwrap();
    // A mismatch in stripe 1, found before the pause: the report must keep it.
    let g = v.geometry().clone();
    let role = g.p_role(1);
    let file = member::open(paths[role].to_str().unwrap(), &OpenOptions::default()).unwrap();
    let at = read_sb(&paths[role]).data_offset_bytes + g.chunk_bytes() + 5;
    let mut byte = [0u8; 1];
    file.read_at(&mut byte, at).unwrap();
    file.write_at(&[!byte[0]], at).unwrap();
    // One 64 KiB stripe every quarter second.
    v.set_speed_limits(limits(256 << 10));
    v.scrub(false).unwrap();
    let chunk = g.chunk_bytes();
    assert!(wait_for(30, || task(&v).is_some_and(|t| t.done_bytes >= 3 * chunk)));
    v.defer_background(Some(OUTSIDE.into()));
    assert!(wait_for(30, || task(&v).is_some_and(|t| t.paused.is_some())));
    let paused = task(&v).unwrap();
    assert_eq!(paused.kind, TaskKind::Scrub);
    assert_eq!(paused.paused.as_deref(), Some(OUTSIDE));
    assert!(paused.done_bytes >= 3 * chunk && paused.done_bytes < paused.total_bytes);
    // It stays where it is, whatever happens meanwhile (a write resumes background work,
    // the limits change), and the array needs no other work: wait_idle says idle.
    v.write(0, &pattern(4096, 8)).unwrap();
    v.set_speed_limits(limits(1 << 40));
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        task(&v),
        Some(paused.clone()),
        "no progress outside the window"
    );
    assert!(v.wait_idle(Duration::from_secs(1)));
    let report = v.status().last_scrub.unwrap();
    assert!(!report.finished && report.mismatches == 1, "{report:?}");
    // The window opens: the scrub goes on from its position (the first progress it reports
    // is past it, not a restart from the first stripe) and finishes with one report.
    v.set_speed_limits(limits(256 << 10));
    v.defer_background(None);
    let mut first = None;
    assert!(wait_for(30, || {
        first = task(&v).filter(|t| t.paused.is_none());
        first.is_some()
    }));
    let first = first.unwrap();
    resumed_past_then_finish(&v, &first, &paused);
    let report = v.status().last_scrub.unwrap();
    assert!(report.finished);
    assert_eq!(
        report.stripes_checked,
        paused.total_bytes / chunk,
        "every stripe once"
    );
    assert_eq!(report.mismatches, 1, "{report:?}");
    assert_eq!(report.first_mismatches[0].stripe, 1);
}

#[test]
fn a_scrub_asked_for_outside_the_window_waits_for_it_and_a_rebuild_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let v = raid5_with_a_spare(dir.path(), "r");
    v.set_speed_limits(limits(1 << 40));
    v.defer_background(Some(OUTSIDE.into()));
    v.scrub(false).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let waiting = task(&v).expect("the waiting scrub is shown");
    assert_eq!(
        (waiting.kind, waiting.done_bytes, waiting.paused.as_deref()),
        (TaskKind::Scrub, 0, Some(OUTSIDE))
    );
    assert!(v.status().last_scrub.is_none(), "it has not started");
    // A member fails: the spare is rebuilt although the window is closed.
    v.fail("role 0").unwrap();
    assert!(v.wait_idle(WAIT));
    let status = v.status();
    assert_eq!(status.health, ArrayHealth::Clean, "{status:?}");
    assert!(status.members[..3]
        .iter()
        .all(|m| m.state == MemberState::Active));
    assert!(status.last_scrub.is_none(), "the scrub still waits");
    v.defer_background(None);
    assert!(wait_for(30, || v
        .status()
        .last_scrub
        .is_some_and(|r| r.finished)));
}

#[test]
fn a_resync_outside_the_window_waits_and_finishes_after_it_opens() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "s", "raid5", 3);
    let v = Arc::new(assemble_paths(&paths));
    // Data to resync (the used-regions map skips regions never written).
    v.write(0, &vec![7u8; 1 << 20]).unwrap();
    v.set_speed_limits(limits(1 << 40));
    v.defer_background(Some(OUTSIDE.into()));
    let resyncing = Arc::clone(&v);
    let resync = std::thread::spawn(move || resyncing.resync());
    assert!(wait_for(30, || task(&v).is_some_and(|t| t.paused.is_some())));
    assert_eq!(task(&v).unwrap().kind, TaskKind::InitialSync);
    assert_eq!(v.status().health, ArrayHealth::Resyncing);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!resync.is_finished(), "the resync waits for the window");
    v.defer_background(None);
    resync.join().unwrap().unwrap();
    assert_eq!(v.status().health, ArrayHealth::Active);
    assert_eq!(v.check().unwrap().mismatch_count, 0);
}

#[test]
fn a_running_scrub_gives_way_to_a_rebuild_and_goes_on_from_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let v = raid5_with_a_spare(dir.path(), "g");
    v.write(0, &pattern(v.size_bytes() as usize, 9)).unwrap();
    v.set_speed_limits(limits(256 << 10));
    v.scrub(false).unwrap();
    let chunk = v.chunk_bytes();
    assert!(wait_for(30, || task(&v).is_some_and(|t| t.done_bytes >= 3 * chunk)));
    let before = task(&v).unwrap();
    v.fail("role 2").unwrap();
    // The rebuild onto the spare starts without waiting for the scrub's end.
    assert!(wait_for(30, || task(&v).is_some_and(|t| t.kind == TaskKind::Rebuild)));
    let mut at_fail = None;
    // Fast enough for the rebuild, slow enough to see the scrub's first step after it.
    v.set_speed_limits(limits(2 << 20));
    assert!(wait_for(30, || {
        let t = task(&v);
        if at_fail.is_none() {
            at_fail = v.status().last_scrub.map(|r| r.stripes_checked);
        }
        t.is_some_and(|t| t.kind == TaskKind::Scrub)
    }));
    let resumed = task(&v).unwrap();
    resumed_past_then_finish(&v, &resumed, &before);
    let status = v.status();
    assert_eq!(
        status.health,
        ArrayHealth::Active,
        "rebuilt (and written): {status:?}"
    );
    let report = status.last_scrub.unwrap();
    assert!(report.finished && report.mismatches == 0, "{report:?}");
    assert_eq!(
        report.stripes_checked,
        before.total_bytes / chunk,
        "every stripe once"
    );
    assert!(at_fail.is_some_and(|n| n < report.stripes_checked));
}

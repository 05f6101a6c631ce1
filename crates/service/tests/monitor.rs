//! The monitor's events from status changes, as `mdadm --monitor` raises them: a member
//! failing, an array going degraded, a rebuild starting, passing 20/40/60/80 % and finishing,
//! a spare becoming active, a scrub finding mismatches; an array that starts degraded says so.

use std::sync::Arc;

use alerts::Event;
use member::{Member, OpenOptions};
use service::monitor::{at_start, changes};
use volume::{ArrayHealth, MemberState, ScrubReport, TaskKind, TaskStatus, VolumeStatus};

/// The status of a clean RAID 5 of four RAM members with one spare.
fn status() -> VolumeStatus {
    let open = || member::open("mem:8M", &OpenOptions::default()).unwrap();
    let members: Vec<Arc<dyn Member>> = (0..4).map(|_| open()).collect();
    let mut create = ondisk::CreateOptions::new("raid5".parse().unwrap(), "home");
    create.spares = vec![open()];
    ondisk::create(&members, &create).unwrap();
    let mut all = members;
    all.extend(create.spares.clone());
    let volume = volume::assemble(all, &volume::AssembleOptions::default()).unwrap();
    let mut status = volume.status();
    volume.close().unwrap();
    // RAM members are all called "mem:8M"; configured members have distinct paths.
    for (i, m) in status.members.iter_mut().enumerate() {
        m.name = format!("/dev/sd{}", (b'a' + i as u8) as char);
    }
    status
}

fn events(before: &VolumeStatus, now: &VolumeStatus) -> Vec<(Event, Option<String>)> {
    changes(before, now)
        .into_iter()
        .map(|a| (a.event, a.member))
        .collect()
}

fn rebuild(done: u64) -> Option<TaskStatus> {
    Some(TaskStatus {
        kind: TaskKind::Rebuild,
        role: Some(1),
        done_bytes: done,
        total_bytes: 100,
        bytes_per_sec: 1,
        eta_secs: None,
        paused: None,
    })
}

#[test]
fn a_failure_then_a_rebuild_raise_mdadms_events_in_order() {
    let clean = status();
    assert_eq!(events(&clean, &clean), []);
    let failed_name = clean.members[1].name.clone();
    let spare_name = clean.members[4].name.clone();

    let mut failed = clean.clone();
    failed.members[1].state = MemberState::Faulty;
    failed.health = ArrayHealth::Degraded;
    assert_eq!(
        events(&clean, &failed),
        [
            (Event::Fail, Some(failed_name.clone())),
            (Event::DegradedArray, None)
        ]
    );

    // The spare takes role 1: it leaves the spare list and rebuilds in the role's slot.
    let mut rebuilding = failed.clone();
    let spare = rebuilding.members.remove(4);
    rebuilding.members[1].name = spare.name;
    rebuilding.members[1].state = MemberState::Rebuilding;
    rebuilding.health = ArrayHealth::Rebuilding;
    rebuilding.task = rebuild(5);
    assert_eq!(
        events(&failed, &rebuilding),
        [(Event::RebuildStarted, None)]
    );
    let mut at_45 = rebuilding.clone();
    at_45.task = rebuild(45);
    assert_eq!(events(&rebuilding, &at_45), [(Event::Rebuild40, None)]);
    let mut at_46 = rebuilding.clone();
    at_46.task = rebuild(46);
    assert_eq!(events(&at_45, &at_46), [], "each mark once");

    let mut done = at_46.clone();
    done.members[1].state = MemberState::Active;
    done.health = ArrayHealth::Active;
    done.task = None;
    assert_eq!(
        events(&at_46, &done),
        [
            (Event::SpareActive, Some(spare_name.clone())),
            (Event::RebuildFinished, None)
        ]
    );

    // The spare failing while it is rebuilt onto is FailSpare, not Fail.
    let mut spare_failed = rebuilding.clone();
    spare_failed.members[1].state = MemberState::Faulty;
    spare_failed.task = None;
    spare_failed.health = ArrayHealth::Degraded;
    let got = events(&rebuilding, &spare_failed);
    assert_eq!(got[0], (Event::FailSpare, Some(spare_name)));
    assert!(got.contains(&(Event::RebuildFinished, None)), "{got:?}");
}

#[test]
fn an_array_that_starts_degraded_says_so_and_timeouts_and_mismatches_are_raised() {
    let clean = status();
    let started: Vec<Event> = at_start(&clean).into_iter().map(|a| a.event).collect();
    assert_eq!(started, [Event::NewArray]);
    let mut degraded = clean.clone();
    degraded.members[2].state = MemberState::Missing;
    degraded.health = ArrayHealth::Degraded;
    let started: Vec<Event> = at_start(&degraded).into_iter().map(|a| a.event).collect();
    assert_eq!(started, [Event::NewArray, Event::DegradedArray]);

    let mut slow = clean.clone();
    slow.members[0].timeouts = 1;
    assert_eq!(
        events(&clean, &slow),
        [(Event::MemberTimeout, Some(clean.members[0].name.clone()))]
    );

    let mut scrubbed = clean.clone();
    scrubbed.last_scrub = Some(ScrubReport {
        stripes_checked: 10,
        mismatches: 3,
        repaired: 0,
        first_mismatches: vec![],
        finished: true,
    });
    let alerts = changes(&clean, &scrubbed);
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].event, Event::MismatchesFound);
    assert_eq!(alerts[0].details["mismatches"], "3");
    assert_eq!(
        events(&scrubbed, &scrubbed),
        [],
        "the same report is raised once"
    );
}

#[test]
fn a_rebuild_that_starts_and_ends_between_two_looks_is_still_said() {
    let clean = status();
    let mut failed = clean.clone();
    failed.members[1].state = MemberState::Faulty;
    failed.health = ArrayHealth::Degraded;
    let mut rebuilt = failed.clone();
    let spare = rebuilt.members.remove(4);
    rebuilt.members[1].name = spare.name.clone();
    rebuilt.members[1].state = MemberState::Active;
    rebuilt.health = ArrayHealth::Active;
    assert_eq!(
        events(&failed, &rebuilt),
        [
            (Event::RebuildStarted, None),
            (Event::SpareActive, Some(spare.name)),
            (Event::RebuildFinished, None)
        ]
    );
}

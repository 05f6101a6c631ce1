//! The monitor's events from status changes, as `mdadm --monitor` raises them: a member
//! failing, an array going degraded, a rebuild starting, passing 20/40/60/80 % and finishing,
//! a spare becoming active, a scrub finding mismatches, blocks failing their checksums; an array that starts degraded says so;
//! fewer spares than the configuration lists (at start and when it becomes true); a journal
//! whose ring filled up (rate-limited, with the figures).

use std::sync::Arc;

use alerts::Event;
use member::{Member, OpenOptions};
use std::time::{Duration, Instant};

use service::monitor::{
    at_start, changes, journal_pressure, spares_missing, spares_present, JournalFigures,
    PressureReported, PRESSURE_ALERT_INTERVAL,
};
use service::spares::roles_wanting;
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
    Some(TaskStatus::new(
        TaskKind::Rebuild,
        Some(1),
        done,
        100,
        1,
        None,
    ))
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
        units_lost: 0,
        lost: vec![],
    });
    let alerts = changes(&clean, &scrubbed);
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].event, Event::MismatchesFound);
    assert_eq!(alerts[0].details["mismatches"], "3");
    assert_eq!(alerts[0].details["units_lost"], "0");
    // A scrub that found no mismatch but met ranges nothing provides is raised too.
    let mut lost = clean.clone();
    lost.last_scrub = Some(ScrubReport {
        stripes_checked: 9,
        mismatches: 0,
        repaired: 0,
        first_mismatches: vec![],
        finished: true,
        units_lost: 1,
        lost: vec![],
    });
    let alerts = changes(&clean, &lost);
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].event, Event::MismatchesFound);
    assert_eq!(alerts[0].details["units_lost"], "1");
    assert!(
        alerts[0].message.contains("1 stripes holding ranges"),
        "{}",
        alerts[0].message
    );
    assert_eq!(
        events(&scrubbed, &scrubbed),
        [],
        "the same report is raised once"
    );

    let mut lost = clean.clone();
    lost.bad_blocks = vec![volume::BadBlockStatus {
        role: 2,
        member: clean.members[2].name.clone(),
        member_offset: 8192,
        len: 4096,
        array_offset: Some(1 << 20),
        stripe_array_offset: 1 << 20,
    }];
    let alerts = changes(&clean, &lost);
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].event, Event::BadBlocks);
    assert_eq!(alerts[0].details["member_offset"], "8192");
    assert!(
        alerts[0].message.contains("array offset 1048576"),
        "{}",
        alerts[0].message
    );
    assert_eq!(events(&lost, &lost), [], "a range is raised once");
    assert_eq!(events(&lost, &clean), [], "nor when it is cleared");
}

#[test]
fn a_member_turning_slow_and_recovering_is_raised_once_each_way() {
    let clean = status();
    let name = clean.members[1].name.clone();
    let mut slow = clean.clone();
    slow.members[1].slow = true;
    slow.members[1].latency_us = Some(21_000);
    slow.members[1].peers_latency_us = Some(1_000);
    let alerts = changes(&clean, &slow);
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0].event, Event::SlowMember);
    assert_eq!(alerts[0].member.as_deref(), Some(name.as_str()));
    assert!(
        alerts[0].message.contains("21.0 ms") && alerts[0].message.contains("1.0 ms"),
        "{}",
        alerts[0].message
    );
    assert_eq!(alerts[0].details["latency_us"], "21000");
    assert_eq!(events(&slow, &slow), [], "raised once while it stays slow");
    let mut recovered = slow.clone();
    recovered.members[1].slow = false;
    assert_eq!(
        events(&slow, &recovered),
        [(Event::SlowMemberRecovered, Some(name))]
    );
    // A slow member that fails is told by Fail, not as recovered.
    let mut failed = slow.clone();
    failed.members[1].slow = false;
    failed.members[1].state = MemberState::Faulty;
    let got: Vec<Event> = events(&slow, &failed).into_iter().map(|e| e.0).collect();
    assert!(!got.contains(&Event::SlowMemberRecovered), "{got:?}");
}

#[test]
fn checksum_mismatches_found_are_raised_when_the_count_rises() {
    let mut clean = status();
    clean.checksum = Some(volume::ChecksumStatus {
        algorithm: "crc32c".into(),
        verified_blocks: 10,
        mismatches: 0,
        rehashed: 0,
        settled: 0,
    });
    assert_eq!(events(&clean, &clean), []);
    let mut found = clean.clone();
    found.checksum.as_mut().unwrap().mismatches = 3;
    let alerts = changes(&clean, &found);
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0].event, Event::ChecksumMismatch);
    assert!(
        alerts[0].message.contains("3 block(s)"),
        "{}",
        alerts[0].message
    );
    assert_eq!(alerts[0].details["checksum_mismatches"], "3");
    assert_eq!(events(&found, &found), [], "raised once per rise");
    // Rewritten checksums after an unclean shutdown are no corruption.
    let mut rehashed = found.clone();
    rehashed.checksum.as_mut().unwrap().rehashed = 5;
    assert_eq!(events(&found, &rehashed), []);
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

#[test]
fn spares_missing_is_raised_at_start_and_when_it_becomes_true() {
    let one_spare = status();
    assert_eq!(spares_present(&one_spare), 1);
    assert!(spares_missing(1, None, &one_spare).is_none());
    assert!(spares_missing(0, None, &one_spare).is_none());
    let listed_two = spares_missing(2, None, &one_spare).expect("one of two missing at start");
    assert_eq!(listed_two.event, Event::SparesMissing);
    assert_eq!(listed_two.details["spares_present"], "1");
    assert_eq!(listed_two.details["spares_listed"], "2");
    assert!(
        spares_missing(2, Some(&one_spare), &one_spare).is_none(),
        "not again while it stays true"
    );

    // The spare is rebuilt onto a failed role: it is no longer a spare.
    let mut used = one_spare.clone();
    let spare = used.members.remove(4);
    used.members[1].name = spare.name;
    used.members[1].state = MemberState::Rebuilding;
    let alert = spares_missing(1, Some(&one_spare), &used).expect("became true");
    assert_eq!(alert.details["spares_present"], "0");
    assert!(spares_missing(1, Some(&used), &used).is_none());
    // A faulty spare is not a spare present.
    let mut faulty = one_spare.clone();
    faulty.members[4].state = MemberState::Faulty;
    assert_eq!(spares_present(&faulty), 0);
    assert!(spares_missing(1, Some(&one_spare), &faulty).is_some());
    // A spare added back: not missing; losing it again raises again.
    assert!(spares_missing(1, Some(&used), &one_spare).is_none());
    assert!(spares_missing(1, Some(&one_spare), &used).is_some());
}

#[test]
fn journal_pressure_is_raised_when_the_count_rises_at_most_once_an_interval() {
    let t0 = Instant::now();
    let figures = |applies| JournalFigures {
        pressure_applies: applies,
        used_bytes: 3 << 20,
        ring_bytes: 4 << 20,
    };
    let start = PressureReported {
        applies: 2,
        at: None,
    };
    // The applies counted before the monitor looked are not news.
    assert!(journal_pressure("home", &start, &figures(2), t0).is_none());
    let alert = journal_pressure("home", &start, &figures(5), t0).expect("the count rose");
    assert_eq!(alert.event, Event::JournalPressure);
    assert_eq!(alert.array, "home");
    assert_eq!(alert.details["pressure_applies"], "5");
    assert_eq!(alert.details["pressure_applies_new"], "3");
    assert_eq!(
        alert.details["journal_ring_bytes"],
        (4u64 << 20).to_string()
    );
    assert_eq!(
        alert.details["journal_used_bytes"],
        (3u64 << 20).to_string()
    );
    let raised = PressureReported {
        applies: 5,
        at: Some(t0),
    };
    let soon = t0 + Duration::from_secs(10);
    assert!(
        journal_pressure("home", &raised, &figures(9), soon).is_none(),
        "rate-limited"
    );
    let later = t0 + PRESSURE_ALERT_INTERVAL;
    assert!(journal_pressure("home", &raised, &figures(5), later).is_none());
    let again = journal_pressure("home", &raised, &figures(9), later).expect("risen, quiet long");
    assert_eq!(again.details["pressure_applies_new"], "4");
}

#[test]
fn roles_wanting_counts_faulty_and_missing_roles_of_an_array_not_failed() {
    let clean = status();
    assert_eq!(roles_wanting(&clean), 0);
    let mut hurt = clean.clone();
    hurt.members[1].state = MemberState::Faulty;
    hurt.members[2].state = MemberState::Missing;
    hurt.members[3].state = MemberState::Rebuilding;
    // A faulty spare holds no role: nothing to rebuild for it.
    hurt.members[4].state = MemberState::Faulty;
    hurt.health = ArrayHealth::Degraded;
    assert_eq!(roles_wanting(&hurt), 2);
    hurt.health = ArrayHealth::Failed;
    assert_eq!(roles_wanting(&hurt), 0, "nothing left to rebuild from");
}

//! Volume-level fault handling and background work over file members: faults recorded in the
//! superblocks, spares taking over, rebuild resuming after a restart, replace under writes,
//! scrub locating and repairing corruption, the throttle, and the initial sync.

mod common;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use member::{Member, OpenOptions};
use ondisk::{create, CreateOptions, RoleState};
use volume::{assemble, ArrayHealth, AssembleOptions, MemberState, SpeedLimits, TaskKind, Volume};

const WAIT: Duration = Duration::from_secs(60);
const MIB: u64 = 1 << 20;

fn name(p: &std::path::Path) -> String {
    p.to_str().unwrap().to_string()
}

/// An array of `level` over `count` new files plus `spares` spare files: the members, the
/// spares, and both.
fn array_with_spares(
    dir: &std::path::Path,
    prefix: &str,
    level: &str,
    count: usize,
    spares: usize,
) -> (Vec<PathBuf>, Vec<PathBuf>, Vec<PathBuf>) {
    let all = files(dir, prefix, count + spares);
    let (roles, spare_paths) = all.split_at(count);
    let mut opts = CreateOptions::new(level.parse().unwrap(), prefix);
    opts.chunk_bytes = 64 * 1024;
    opts.spares = open_all(spare_paths);
    // Whole-member rebuilds: these tests time and resume a copy of every byte (with the
    // used-regions map a rebuild copies only what was written: tests/used_map.rs).
    opts.used_region_bytes = None;
    create(&open_all(roles), &opts).unwrap();
    (roles.to_vec(), spare_paths.to_vec(), all)
}

/// Once `v`'s rebuild of role 0 is done: the array is consistent, and with role 1 failed
/// the rebuilt member serves its share of `model`.
fn rebuilt_serves(v: &Volume, model: &[u8]) {
    assert!(v.wait_idle(WAIT));
    assert!(v.check().unwrap().is_consistent());
    v.fail("role 1").unwrap();
    assert_data(v, model, "rebuilt member serves its share");
}

fn fill(v: &Volume, seed: u64) -> Vec<u8> {
    let data = pattern(v.size_bytes() as usize, seed);
    v.write(0, &data).unwrap();
    data
}

fn assert_data(v: &Volume, model: &[u8], what: &str) {
    let mut got = vec![0u8; model.len()];
    v.read(0, &mut got).unwrap();
    if let Some(at) = testsupport::first_difference(&got, model) {
        panic!("{what}: array byte {at} differs from the model");
    }
}

fn fast() -> SpeedLimits {
    SpeedLimits {
        min_bytes_per_sec: 1 << 30,
        max_bytes_per_sec: 1 << 40,
    }
}

#[test]
fn write_error_marks_member_faulty_in_the_superblocks() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "we", "raid5", 3);
    let wrapped: Vec<Wrapped> = open_all(&paths)
        .into_iter()
        .zip(&paths)
        .map(|(m, p)| Wrapped::new(m, &name(p)))
        .collect();
    let members: Vec<Arc<dyn Member>> = wrapped.iter().map(|w| w.member.clone()).collect();
    let v = assemble(members, &AssembleOptions::default()).unwrap();
    let model = fill(&v, 1);
    let events = v.events();
    wrapped[2].writes_fail.store(true, Ordering::Relaxed);
    v.write(0, &model[..100_000])
        .expect("the write succeeds without the member");
    let status = v.status();
    assert_eq!(status.members[2].state, MemberState::Faulty);
    assert!(status.members[2].write_errors >= 1);
    assert_eq!(status.health, ArrayHealth::Degraded);
    // Recorded before the write returned: the other members' role tables say faulty.
    let sb = read_sb(&paths[0]);
    assert_eq!(sb.roles[2].state, RoleState::Faulty);
    assert!(sb.events > events);
    assert_data(&v, &model, "degraded");
    v.close().unwrap();
    drop(v);
    let v = assemble_paths(&paths);
    assert_eq!(v.status().members[2].state, MemberState::Missing);
    assert_data(&v, &model, "reassembled without the faulty member");
}

#[test]
fn spare_takes_over_and_rebuild_completes_consistent() {
    for (level, count) in [("raid1", 2), ("raid5", 3), ("raid6", 4), ("raid10", 4)] {
        let dir = tempfile::tempdir().unwrap();
        let (_, spares, all) = array_with_spares(dir.path(), "sp", level, count, 1);
        let v = assemble(open_all(&all), &AssembleOptions::default()).unwrap();
        v.set_speed_limits(fast());
        assert_eq!(
            v.status().members[count].state,
            MemberState::Spare,
            "{level}"
        );
        let model = fill(&v, 2);
        v.fail("role 1").unwrap();
        assert!(v.wait_idle(WAIT), "{level}: rebuild did not finish");
        let status = v.status();
        assert_eq!(status.health, ArrayHealth::Active, "{level}: {status:?}");
        assert_eq!(status.members[1].name, name(&spares[0]), "{level}");
        assert_eq!(status.members[1].state, MemberState::Active, "{level}");
        assert!(v.check().unwrap().is_consistent(), "{level}");
        v.scrub(false).unwrap();
        assert!(v.wait_idle(WAIT));
        let scrub = v.status().last_scrub.unwrap();
        assert!(
            scrub.finished && scrub.mismatches == 0,
            "{level}: {scrub:?}"
        );
        assert_data(&v, &model, level);
        v.close().unwrap();
        drop(v);
        // The failed member is left out; the rebuilt spare holds role 1.
        let v = assemble_paths(&all);
        assert_eq!(v.status().members[1].name, name(&spares[0]), "{level}");
        assert_eq!(v.status().health, ArrayHealth::Clean, "{level}");
        assert_data(&v, &model, "after restart");
    }
}

#[test]
fn rebuild_resumes_after_restart_at_the_saved_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (_, spares, all) = array_with_spares(dir.path(), "rr", "raid5", 3, 1);
    let slow = SpeedLimits {
        min_bytes_per_sec: 256 << 10,
        max_bytes_per_sec: 512 << 10,
    };
    let opts = AssembleOptions {
        speed_limits: slow,
        ..AssembleOptions::default()
    };
    let v = assemble(open_all(&all), &opts).unwrap();
    let model = fill(&v, 3);
    v.fail("role 0").unwrap();
    let saved = || read_sb(&spares[0]).recovery_offset_bytes;
    assert!(
        wait_for(30, || saved().is_some_and(|x| x > 0)),
        "no checkpoint"
    );
    let before = saved().unwrap();
    drop(v); // no close: as if the server were killed
    let v = assemble(open_all(&all), &opts).unwrap();
    let status = v.status();
    assert_eq!(status.members[0].state, MemberState::Rebuilding);
    assert!(status.members[0].rebuild_offset_bytes.unwrap() >= before);
    // Capture the task the moment the rebuild shows (another task, e.g. a resync of the
    // unclean shutdown, may come and go around it).
    let mut seen = None;
    assert!(
        wait_for(10, || {
            seen = v.status().task.filter(|t| t.kind == TaskKind::Rebuild);
            seen.is_some()
        }),
        "the rebuild resumed"
    );
    let task = seen.unwrap();
    v.set_speed_limits(fast());
    assert!(
        task.done_bytes >= before,
        "{task:?} restarted below {before}"
    );
    rebuilt_serves(&v, &model);
}

#[test]
fn clean_close_mid_rebuild_saves_the_offset_reached() {
    // The periodic checkpoints are seconds apart; a clean shutdown (close) must save where the
    // rebuild got to, so the restarted rebuild starts at or past what status last showed.
    let dir = tempfile::tempdir().unwrap();
    let (_, spares, all) = array_with_spares(dir.path(), "rc", "raid5", 3, 1);
    let opts = AssembleOptions {
        speed_limits: SpeedLimits {
            min_bytes_per_sec: 256 << 10,
            max_bytes_per_sec: 512 << 10,
        },
        ..AssembleOptions::default()
    };
    let v = assemble(open_all(&all), &opts).unwrap();
    let model = fill(&v, 3);
    v.fail("role 0").unwrap();
    assert!(
        wait_for(30, || v.status().task.is_some_and(|t| t.done_bytes > 0)),
        "the rebuild started"
    );
    std::thread::sleep(std::time::Duration::from_millis(600));
    let shown = v.status().task.unwrap().done_bytes;
    v.close().unwrap();
    let saved = read_sb(&spares[0]).recovery_offset_bytes.unwrap();
    assert!(saved >= shown, "saved {saved} < shown {shown} before close");
    drop(v);
    let v = assemble(open_all(&all), &opts).unwrap();
    assert!(v.status().members[0].rebuild_offset_bytes.unwrap() >= shown);
    v.set_speed_limits(fast());
    rebuilt_serves(&v, &model);
}

#[test]
fn raising_the_speed_limit_applies_to_a_throttled_rebuild_at_once() {
    // Regression: the pacer computed its next start from the limit in force when a step ended,
    // so after one step at 1 byte/s a raised limit waited out days before taking effect.
    let dir = tempfile::tempdir().unwrap();
    let (_, _, all) = array_with_spares(dir.path(), "sl", "raid1", 2, 1);
    let crawl = SpeedLimits {
        min_bytes_per_sec: 1,
        max_bytes_per_sec: 1,
    };
    let opts = AssembleOptions {
        speed_limits: crawl,
        ..AssembleOptions::default()
    };
    let v = assemble(open_all(&all), &opts).unwrap();
    let model = fill(&v, 5);
    v.fail("role 0").unwrap();
    assert!(
        wait_for(30, || v.status().task.is_some_and(|t| t.done_bytes > 0)),
        "the first rebuild step ran"
    );
    v.set_speed_limits(fast());
    assert!(
        v.wait_idle(Duration::from_secs(20)),
        "the raised limit did not apply: {:?}",
        v.status().task
    );
    assert!(v.check().unwrap().is_consistent());
    v.fail("role 1").unwrap();
    assert_data(&v, &model, "rebuilt member serves everything");
}

#[test]
fn replace_under_writes_never_degrades() {
    for (level, count) in [("raid1", 2), ("raid5", 3), ("raid6", 4), ("raid10", 4)] {
        let dir = tempfile::tempdir().unwrap();
        let paths = new_array(dir.path(), "rp", level, count);
        let new = files(dir.path(), "new", 1);
        let v = Arc::new(assemble_paths(&paths));
        v.set_speed_limits(SpeedLimits {
            min_bytes_per_sec: 4 << 20,
            max_bytes_per_sec: 8 << 20,
        });
        let model = Arc::new(Mutex::new(fill(&v, 4)));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (v, model, stop) = (v.clone(), model.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut x = 99u64;
                while !stop.load(Ordering::Relaxed) {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let mut m = model.lock().unwrap();
                    let offset = (x >> 20) % (m.len() as u64 - 70_000);
                    let data = pattern(1 + (x % 65_536) as usize, x);
                    v.write(offset, &data).unwrap();
                    m[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
                }
            })
        };
        let with = member::open(&name(&new[0]), &OpenOptions::default()).unwrap();
        v.replace("role 1", with).unwrap();
        let deadline = Instant::now() + WAIT;
        loop {
            let status = v.status();
            assert!(
                !matches!(status.health, ArrayHealth::Degraded | ArrayHealth::Failed),
                "{level}: {status:?}"
            );
            assert!(status
                .members
                .iter()
                .all(|m| !matches!(m.state, MemberState::Faulty | MemberState::Missing)));
            if status.task.is_none() && v.wait_idle(Duration::from_millis(1)) {
                break;
            }
            assert!(Instant::now() < deadline, "{level}: replace did not finish");
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        let status = v.status();
        assert_eq!(status.members[1].name, name(&new[0]), "{level}");
        assert!(v.check().unwrap().is_consistent(), "{level}");
        assert_data(&v, &model.lock().unwrap(), level);
        v.close().unwrap();
        let model = model.lock().unwrap().clone();
        drop(v);
        // The old member is left out at the next assembly (a former member).
        let mut all = paths.clone();
        all.push(new[0].clone());
        let v = assemble_paths(&all);
        assert_eq!(v.status().members[1].name, name(&new[0]));
        assert!(v
            .warnings()
            .iter()
            .any(|w| w.contains("no longer holds role 1")));
        assert_data(&v, &model, "after restart");
    }
}

/// A replacement whose write fails (here a client write repeated on it) is dropped, and the
/// superblocks say so before the client's write completes: the client's write succeeds (the
/// role still has its member), and the role table no longer lists the replacement, which
/// missed that write. Before, the superblocks were rewritten with the dead replacement still
/// in them, so its failing superblock write failed the client's request.
#[test]
fn a_replacement_that_fails_a_client_write_is_dropped_on_disk_first() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "rf", "raid5", 3);
    let new = files(dir.path(), "new", 1);
    let v = assemble_paths(&paths);
    let model = fill(&v, 6);
    // One step, then the worker waits (for hours at 1 byte/s): only the client sees the error.
    v.set_speed_limits(SpeedLimits {
        min_bytes_per_sec: 1,
        max_bytes_per_sec: 1,
    });
    let with = Wrapped::new(open_all(&new).remove(0), &name(&new[0]));
    v.replace("role 1", with.member.clone()).unwrap();
    let deadline = Instant::now() + WAIT;
    while v.status().task.is_none_or(|t| t.done_bytes == 0) {
        assert!(Instant::now() < deadline, "the first copy step did not run");
        std::thread::sleep(Duration::from_millis(5));
    }
    let uuid = read_sb(&new[0]).member_uuid;
    assert!(read_sb(&paths[0])
        .roles
        .iter()
        .any(|e| e.member_uuid == uuid));
    with.writes_fail.store(true, Ordering::Relaxed);
    v.write(0, &model[..200_000])
        .expect("a failed replacement does not fail the client's write");
    let sb = read_sb(&paths[0]);
    assert!(
        sb.roles.iter().all(|e| e.member_uuid != uuid),
        "the replacement is still in the role table: {:?}",
        sb.roles
    );
    let status = v.status();
    assert_eq!(status.health, ArrayHealth::Active, "{status:?}");
    assert!(status.members.iter().all(|m| m.name != name(&new[0])));
    assert_data(&v, &model, "after the replacement failed");
}

/// Waits until the running replace of role 1 has copied something (one step at 1 byte/s).
fn wait_first_replace_step(v: &Volume) -> u64 {
    let deadline = Instant::now() + WAIT;
    loop {
        let task = v.status().task;
        if let Some(t) = task.filter(|t| t.kind == TaskKind::Replace && t.done_bytes > 0) {
            return t.done_bytes;
        }
        assert!(Instant::now() < deadline, "the replace made no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A replace stopped part-way — by a clean shutdown (`close`, as on SIGTERM) or by a crash
/// (the volume dropped dirty) — resumes as a replace at the next assembly, never as a spare
/// rebuild: the old member keeps serving in sync and the array is never degraded. After a
/// clean shutdown the copy resumes at the recorded offset, after a crash from 0 (a write in
/// flight may have reached only one of the two). Then the new member holds the role. Before,
/// the new member came back as a plain spare and nothing resumed.
#[test]
fn an_interrupted_replace_resumes_as_a_replace() {
    for (how, clean) in [("clean shutdown", true), ("crash", false)] {
        for (level, count) in [("raid5", 3), ("raid1", 2)] {
            let what = format!("{level}, {how}");
            let dir = tempfile::tempdir().unwrap();
            let paths = new_array(dir.path(), "ir", level, count);
            let new = files(dir.path(), "new", 1);
            let v = assemble_paths(&paths);
            let model = fill(&v, 8);
            v.set_speed_limits(SpeedLimits {
                min_bytes_per_sec: 1,
                max_bytes_per_sec: 1,
            });
            v.replace("role 1", open_all(&new).remove(0)).unwrap();
            let copied = wait_first_replace_step(&v);
            let total = v.status().task.unwrap().total_bytes;
            assert!(copied < total, "{what}: the copy finished in one step");
            if clean {
                v.close().unwrap();
            } else {
                v.write(0, &model[..4096]).unwrap(); // dirty: the drop below is a crash
            }
            drop(v);
            let new_sb = read_sb(&new[0]);
            let entry = read_sb(&paths[0]).roles[count];
            assert_eq!(entry.member_uuid, new_sb.member_uuid, "{what}");
            assert_eq!(
                entry.replacing,
                Some(1),
                "{what}: the table records the replace"
            );
            if clean {
                assert_eq!(new_sb.replace_offset_bytes, Some(copied), "{what}");
            }

            let mut all = paths.clone();
            all.push(new[0].clone());
            let v = assemble_paths(&all);
            let status = v.status();
            assert_eq!(status.health, ArrayHealth::Rebuilding, "{what}: {status:?}");
            assert_eq!(status.members[1].state, MemberState::Replacing, "{what}");
            assert_eq!(status.members[1].name, name(&paths[1]), "{what}");
            let target = status.members.iter().find(|m| m.name == name(&new[0]));
            let target = target.unwrap_or_else(|| panic!("{what}: no target in {status:?}"));
            assert_eq!(target.state, MemberState::ReplacementTarget, "{what}");
            let resumed_at = if clean { copied } else { 0 };
            let warning = format!("resumes at data offset {resumed_at}");
            assert!(
                v.warnings().iter().any(|w| w.contains(&warning)),
                "{what}: {:?}",
                v.warnings()
            );
            v.set_speed_limits(fast());
            let deadline = Instant::now() + WAIT;
            while !v.wait_idle(Duration::from_millis(10)) {
                let status = v.status();
                assert!(
                    status.members[..count]
                        .iter()
                        .all(|m| matches!(m.state, MemberState::Active | MemberState::Replacing)),
                    "{what}: a role left sync while the replace resumed: {status:?}"
                );
                if let Some(t) = &status.task {
                    assert_ne!(t.kind, TaskKind::Rebuild, "{what}: resumed as a rebuild");
                }
                assert!(
                    Instant::now() < deadline,
                    "{what}: the replace did not finish"
                );
            }
            let status = v.status();
            assert_eq!(status.members[1].name, name(&new[0]), "{what}");
            assert_eq!(status.members[1].state, MemberState::Active, "{what}");
            assert!(
                matches!(status.health, ArrayHealth::Clean | ArrayHealth::Active),
                "{what}: {status:?}"
            );
            assert!(v.check().unwrap().is_consistent(), "{what}");
            assert_data(&v, &model, &what);
            v.close().unwrap();
            drop(v);
            let sb = read_sb(&new[0]);
            assert_eq!(sb.role_index(), Some(1), "{what}");
            assert_eq!(sb.replace_offset_bytes, None, "{what}");
            assert!(sb.roles.iter().all(|e| e.replacing.is_none()), "{what}");
        }
    }
}

#[test]
fn scrub_locates_and_repairs_corruption_in_a_member_file() {
    for (level, count) in [("raid1", 2), ("raid5", 3), ("raid6", 4), ("raid10", 4)] {
        let dir = tempfile::tempdir().unwrap();
        let paths = new_array(dir.path(), "sc", level, count);
        let v = assemble_paths(&paths);
        let model = fill(&v, 5);
        let g = v.geometry().clone();
        let chunk = g.chunk_bytes();
        let unit = 5u64;
        // RAID 5 cannot tell data from parity: corrupt P. RAID 6: a data block (located).
        // Mirrors: the second copy.
        let (role, member_offset) = match level {
            "raid5" => (g.p_role(unit), unit * chunk + 777),
            "raid6" => (g.data_role(unit, 0), unit * chunk + 777),
            "raid1" => (1, unit * chunk + 777),
            _ => {
                let copy = g.chunk_copies(unit)[1];
                (copy.role, copy.member_offset + 777)
            }
        };
        let file = member::open(&name(&paths[role]), &OpenOptions::default()).unwrap();
        let at = read_sb(&paths[role]).data_offset_bytes + member_offset;
        let mut byte = [0u8; 1];
        file.read_at(&mut byte, at).unwrap();
        file.write_at(&[!byte[0]], at).unwrap();
        v.scrub(false).unwrap();
        assert!(v.wait_idle(WAIT));
        let report = v.status().last_scrub.unwrap();
        assert!(report.finished);
        assert_eq!(report.mismatches, 1, "{level}: {report:?}");
        let m = &report.first_mismatches[0];
        assert_eq!(
            (m.role, m.member_offset),
            (role, member_offset),
            "{level}: {m:?}"
        );
        assert_eq!(m.stripe, unit);
        assert_eq!(m.member, name(&paths[role]));
        if level == "raid6" {
            assert_eq!(m.kind, "data");
        }
        let changed = Arc::new(Mutex::new(Vec::new()));
        let seen = changed.clone();
        v.set_data_changed_hook(Box::new(move |o, l| seen.lock().unwrap().push((o, l))));
        v.scrub(true).unwrap();
        assert!(v.wait_idle(WAIT));
        assert_eq!(v.status().last_scrub.unwrap().repaired, 1, "{level}");
        let changed = changed.lock().unwrap().clone();
        if level == "raid5" {
            assert!(changed.is_empty(), "a parity repair changes no data");
        } else {
            assert_eq!(changed.len(), 1, "{level}");
            assert!(changed[0].0 <= m.array_offset && m.array_offset < changed[0].0 + changed[0].1);
        }
        v.scrub(false).unwrap();
        assert!(v.wait_idle(WAIT));
        assert_eq!(v.status().last_scrub.unwrap().mismatches, 0, "{level}");
        assert_data(&v, &model, level);
    }
}

#[test]
fn rebuild_rate_stays_under_the_maximum() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, all) = array_with_spares(dir.path(), "th", "raid5", 3, 1);
    let v = assemble(open_all(&all), &AssembleOptions::default()).unwrap();
    let max = MIB;
    v.set_speed_limits(SpeedLimits {
        min_bytes_per_sec: max / 2,
        max_bytes_per_sec: max,
    });
    let start = Instant::now();
    v.fail("role 2").unwrap();
    assert!(v.wait_idle(WAIT));
    let elapsed = start.elapsed().as_secs_f64();
    let bytes = v.geometry().member_data_bytes(2) as f64;
    let rate = bytes / elapsed;
    eprintln!(
        "rebuilt {bytes} bytes in {elapsed:.2} s: {:.0} KiB/s (max {} KiB/s)",
        rate / 1024.0,
        max / 1024
    );
    assert!(
        rate <= max as f64 * 1.1,
        "rate {rate} over the maximum {max}"
    );
    assert!(
        rate >= max as f64 * 0.5,
        "rate {rate} far below the maximum {max}"
    );
}

#[test]
fn initial_sync_on_members_not_cheap_to_zero_and_assume_clean() {
    for assume_clean in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), "is", 3);
        // Old data everywhere: parity over it is wrong until synced.
        for p in &paths {
            let m = member::open(&name(p), &OpenOptions::default()).unwrap();
            m.write_at(&pattern(MEMBER_BYTES as usize - (2 << 20), 9), 2 << 20)
                .unwrap();
        }
        let remote: Vec<Arc<dyn Member>> = open_all(&paths)
            .into_iter()
            .enumerate()
            .map(|(i, m)| Wrapped::new(m, &format!("remote{i}")).member)
            .collect();
        let mut opts = CreateOptions::new("raid5".parse().unwrap(), "is");
        opts.chunk_bytes = 64 * 1024;
        opts.force = true;
        opts.assume_clean = assume_clean;
        // The sync of every stripe (with the used-regions map it skips the regions never
        // written, which read as zeroes: tests/used_map.rs).
        opts.used_region_bytes = None;
        let written = create(&remote, &opts).unwrap();
        assert_eq!(written[0].resync_offset_bytes.is_some(), !assume_clean);
        let v = assemble(remote.clone(), &AssembleOptions::default()).unwrap();
        if assume_clean {
            assert_eq!(v.status().health, ArrayHealth::Clean);
            assert!(!v.check().unwrap().is_consistent());
            continue;
        }
        v.write(0, b"usable during the sync").unwrap();
        assert!(v.wait_idle(WAIT));
        assert!(v.check().unwrap().is_consistent());
        let mut got = [0u8; 22];
        v.read(0, &mut got).unwrap();
        assert_eq!(&got, b"usable during the sync");
        v.close().unwrap();
        assert_eq!(read_sb(&paths[0]).resync_offset_bytes, None);
    }
}

#[test]
fn remove_refuses_active_members_and_add_rebuilds_a_returning_one() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "ra", "raid1", 2);
    let v = assemble_paths(&paths);
    v.set_speed_limits(fast());
    let model = fill(&v, 6);
    let err = v.remove(&name(&paths[0])).unwrap_err().to_string();
    assert!(err.contains("fail it first"), "{err}");
    let err = v.fail("role 9").unwrap_err().to_string();
    assert!(err.contains("no member"), "{err}");
    v.fail(&name(&paths[1])).unwrap();
    let err = v.fail(&name(&paths[0])).unwrap_err().to_string();
    assert!(err.contains("last copy"), "{err}");
    let model1 = pattern(model.len(), 8);
    v.write(0, &model1).unwrap();
    // Re-adding the faulty member itself takes it out of its role and rebuilds it in full.
    v.add(open_unheld(&paths[1])).unwrap();
    assert!(v.wait_idle(WAIT));
    assert_eq!(v.status().members[1].state, MemberState::Active);
    v.fail("role 1").unwrap();
    v.remove(&name(&paths[1])).unwrap();
    assert_eq!(v.status().members[1].state, MemberState::Missing);
    let model2 = pattern(model.len(), 7);
    v.write(0, &model2).unwrap();
    // The stale member comes back: never trusted, rebuilt in full.
    v.add(open_unheld(&paths[1])).unwrap();
    assert!(v.wait_idle(WAIT));
    assert_eq!(v.status().members[1].state, MemberState::Active);
    v.fail("role 0").unwrap();
    assert_data(&v, &model2, "served by the rebuilt member alone");
}

/// Everything at once: writers on disjoint regions (each with its own model) while a member
/// fails on writes, a spare is rebuilt, a scrub runs and another member is replaced. Every
/// region must read back its model and redundancy must be consistent at the end.
#[test]
fn writers_survive_fault_rebuild_scrub_and_replace_together() {
    for (level, count) in [("raid5", 4), ("raid6", 5), ("raid10", 4), ("raid1", 3)] {
        let seed = seed();
        let dir = tempfile::tempdir().unwrap();
        let (paths, spares, _) = array_with_spares(dir.path(), "all", level, count, 1);
        let new = files(dir.path(), "new", 1);
        let wrapped: Vec<Wrapped> = open_all(&paths)
            .into_iter()
            .zip(&paths)
            .map(|(m, p)| Wrapped::new(m, &name(p)))
            .collect();
        let mut members: Vec<Arc<dyn Member>> = wrapped.iter().map(|w| w.member.clone()).collect();
        members.extend(open_all(&spares));
        let v = Arc::new(assemble(members, &AssembleOptions::default()).unwrap());
        v.set_speed_limits(SpeedLimits {
            min_bytes_per_sec: 8 << 20,
            max_bytes_per_sec: 32 << 20,
        });
        let writers = RegionWriters::start(&v, 3, seed, 40_000);
        std::thread::sleep(Duration::from_millis(100));
        wrapped[0].writes_fail.store(true, Ordering::Relaxed);
        // Role 0 leaves Active, or has already been rebuilt onto the spare (a one-step rebuild
        // can finish between two polls).
        assert!(wait_for(20, || {
            let m = &v.status().members[0];
            m.state != MemberState::Active || m.name == name(&spares[0])
        }));
        v.scrub(false).unwrap();
        let with = member::open(&name(&new[0]), &OpenOptions::default()).unwrap();
        v.replace("role 2", with).unwrap();
        assert!(v.wait_idle(WAIT), "{level}: background work did not finish");
        let models = writers.stop();
        let status = v.status();
        assert_eq!(
            status.health,
            ArrayHealth::Active,
            "{level} seed {seed}: {status:?}"
        );
        assert_eq!(status.members[0].name, name(&spares[0]));
        assert_eq!(status.members[2].name, name(&new[0]));
        assert!(v.check().unwrap().is_consistent(), "{level} seed {seed}");
        assert_regions(&v, &models, &format!("{level} seed {seed}"));
    }
}

/// Under client load the rebuild backs off to the minimum rate, and keeps it.
#[test]
fn rebuild_keeps_the_minimum_under_client_load() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, all) = array_with_spares(dir.path(), "ld", "raid5", 3, 1);
    let v = Arc::new(assemble(open_all(&all), &AssembleOptions::default()).unwrap());
    let (min, max) = (MIB, 4 * MIB);
    v.set_speed_limits(SpeedLimits {
        min_bytes_per_sec: min,
        max_bytes_per_sec: max,
    });
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = {
        let (v, stop) = (v.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            let mut at = 0;
            while !stop.load(Ordering::Relaxed) {
                v.read(at, &mut buf).unwrap();
                at = (at + 4096) % (v.size_bytes() - 4096);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let start = Instant::now();
    v.fail("role 1").unwrap();
    assert!(v.wait_idle(WAIT));
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    client.join().unwrap();
    let rate = v.geometry().member_data_bytes(1) as f64 / elapsed;
    eprintln!(
        "rebuild under load: {:.0} KiB/s (min {} KiB/s, max {} KiB/s)",
        rate / 1024.0,
        min / 1024,
        max / 1024
    );
    assert!(
        rate >= 0.8 * min as f64,
        "rate {rate} below the minimum {min}"
    );
    assert!(
        rate <= 0.5 * max as f64,
        "rate {rate}: no back-off under load (max {max})"
    );
}

/// A spare lent to another array (a spare group): `take_spare` takes it out of its array —
/// the other members' superblocks no longer list it — and erases its superblock, so the
/// borrowing array's `add` accepts it (it refuses another array's spare) and rebuilds onto
/// it. Only a spare can be taken; the sizes say whether it fits.
#[test]
fn a_spare_taken_from_one_array_rebuilds_another() {
    let dir = tempfile::tempdir().unwrap();
    let (a_paths, _, _) = array_with_spares(dir.path(), "a", "raid1", 2, 0);
    let (b_paths, b_spares, b_all) = array_with_spares(dir.path(), "b", "raid1", 2, 1);
    let a = assemble_paths(&a_paths);
    let b = assemble_paths(&b_all);
    a.set_speed_limits(fast());
    let model = fill(&a, 7);
    let spare = name(&b_spares[0]);
    let size = std::fs::metadata(&b_spares[0]).unwrap().len();
    assert_eq!(b.spare_sizes(), [(spare.clone(), size)]);
    assert!(a.spare_sizes().is_empty());
    assert!(a.member_bytes_needed() <= size && a.member_bytes_needed() > 0);

    a.fail("role 1").unwrap();
    let unheld = open_all(&b_spares[..1]).remove(0);
    let refused = a.add(unheld).unwrap_err().to_string();
    assert!(refused.contains("belongs to another array"), "{refused}");
    assert!(matches!(
        b.take_spare("role 0"),
        Err(volume::VolumeError::Refused { .. })
    ));

    let taken = b.take_spare(&spare).unwrap();
    assert!(b.spare_sizes().is_empty());
    assert!(b.status().members.iter().all(|m| m.name != spare));
    for path in &b_paths {
        let listed = read_sb(path)
            .roles
            .iter()
            .any(|r| r.state == RoleState::Spare);
        assert!(!listed, "{} still lists a spare", path.display());
    }
    assert!(ondisk::read_superblock(taken.as_ref()).is_err(), "erased");
    a.add(taken).unwrap();
    assert!(a.wait_idle(WAIT), "rebuild did not finish");
    let status = a.status();
    assert_eq!(status.health, ArrayHealth::Active, "{status:?}");
    assert_eq!(status.members[1].name, spare);
    assert_data(&a, &model, "after the rebuild onto the lent spare");
    assert_eq!(read_sb(&b_spares[0]).array_uuid, a.uuid());
    a.close().unwrap();
    b.close().unwrap();
}

//! Assembly: every refusal names the member and the reason and changes no member byte; members
//! in any order give the same array; stale members are left out; the RAID 5 write hole needs
//! `start_dirty_degraded`, which reports the ranges at risk; the Volume keeps dirty/clean and
//! events on disk.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::*;
use member::OpenOptions;
use ondisk::{ArrayState, RoleState};
use volume::{assemble, AssembleOptions, MemberState, Volume};

fn try_assemble(paths: &[PathBuf], force: bool) -> Result<Volume, ondisk::AssembleError> {
    assemble(
        open_all(paths),
        &AssembleOptions {
            start_dirty_degraded: force,
            ..AssembleOptions::default()
        },
    )
}

/// Asserts assembly of `paths` fails with a message containing every needle, and that no byte
/// of any member changed.
fn assert_refused(paths: &[PathBuf], needles: &[&str]) {
    let before = hash_files(paths);
    let err = try_assemble(paths, false).unwrap_err().to_string();
    for needle in needles {
        assert!(err.contains(needle), "expected {needle:?} in: {err}");
    }
    assert_eq!(hash_files(paths), before, "refusal changed member bytes");
}

fn name(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn refuses_member_of_another_array() {
    let dir = tempfile::tempdir().unwrap();
    let a = new_array(dir.path(), "a", "raid5", 3);
    let b = new_array(dir.path(), "b", "raid5", 3);
    let mixed = vec![a[0].clone(), b[1].clone(), a[2].clone()];
    assert_refused(&mixed, &[name(&b[1]), "belongs to another array"]);
}

#[test]
fn refuses_two_members_with_the_same_role() {
    let dir = tempfile::tempdir().unwrap();
    let a = new_array(dir.path(), "r", "raid1", 2);
    let copy = dir.path().join("r0-copy");
    std::fs::copy(&a[0], &copy).unwrap();
    let paths = vec![a[0].clone(), a[1].clone(), copy.clone()];
    assert_refused(&paths, &[name(&a[0]), name(&copy), "both claim role 0"]);
}

#[test]
fn refuses_too_few_members() {
    let dir = tempfile::tempdir().unwrap();
    let r5 = new_array(dir.path(), "five", "raid5", 4);
    assert_refused(
        &r5[..2],
        &["too few members for raid5", "missing roles [2, 3]"],
    );
    let r0 = new_array(dir.path(), "zero", "raid0", 3);
    assert_refused(
        &[r0[0].clone(), r0[2].clone()],
        &["too few members for raid0", "[1]"],
    );
    let lin = new_array(dir.path(), "lin", "linear", 2);
    assert_refused(&lin[1..], &["too few members for linear", "[0]"]);
    let r6 = new_array(dir.path(), "six", "raid6", 5);
    assert_refused(&r6[..2], &["too few members for raid6", "[2, 3, 4]"]);
}

#[test]
fn refuses_bad_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let a = new_array(dir.path(), "crc", "raid1", 3);
    let m = member::open(name(&a[1]), &OpenOptions::default()).unwrap();
    // Flip the bits of the chunk size's low byte in the first sector: the superblock fails its
    // checksum and its first sector disagrees with its peers array-wide, so nothing proves
    // what it is (a torn superblock's first sector is one whole version of it).
    let mut byte = [0u8];
    m.read_at(&mut byte, 4096 + 106).unwrap();
    m.write_at(&[byte[0] ^ 0xff], 4096 + 106).unwrap();
    assert_refused(&a, &[name(&a[1]), "checksum mismatch"]);
}

/// A superblock failing its checksum whose first sector agrees with its peers (here a byte of
/// the role table past it changed, as a torn rewrite leaves it) is rebuilt: the array
/// assembles whole, a warning names the member, and the next superblock write (the dirty
/// mark) writes it whole again. Before, assembly refused the array ("checksum mismatch").
#[test]
fn a_superblock_failing_its_checksum_is_rebuilt_from_its_first_sector() {
    let dir = tempfile::tempdir().unwrap();
    let a = new_array(dir.path(), "crc", "raid1", 3);
    let m = member::open(name(&a[1]), &OpenOptions::default()).unwrap();
    let mut byte = [0u8];
    m.read_at(&mut byte, 4096 + 1000).unwrap();
    m.write_at(&[byte[0] ^ 0xff], 4096 + 1000).unwrap();
    drop(m);
    let volume = try_assemble(&a, false).expect("assembles");
    let warned = volume.warnings().iter().any(|w| {
        w.contains(name(&a[1])) && w.contains("checksum mismatch") && w.contains("role 1")
    });
    assert!(warned, "{:?}", volume.warnings());
    assert!(volume.missing_roles().is_empty());
    volume.write(0, &[7u8; 4096]).unwrap();
    volume.close().unwrap();
    drop(volume);
    let sb = read_sb(&a[1]);
    assert_eq!(sb.role, ondisk::Role::Active(1));
    assert_eq!(sb.events, read_sb(&a[0]).events);
}

#[test]
fn refuses_disagreeing_fields() {
    let dir = tempfile::tempdir().unwrap();
    let a = new_array(dir.path(), "dis", "raid0", 2);
    let mut sb = read_sb(&a[1]);
    sb.chunk_bytes = 128 * 1024;
    write_sb(&a[1], &sb);
    assert_refused(&a, &[name(&a[1]), "chunk_bytes is 131072", "65536"]);
    let b = new_array(dir.path(), "lvl", "raid1", 2);
    let mut sb = read_sb(&b[0]);
    sb.level = "raid0".parse().unwrap();
    write_sb(&b[0], &sb);
    assert_refused(
        &b,
        &["superblock field level is", "says raid0", name(&b[1])],
    );
}

#[test]
fn refuses_non_member_and_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let a = new_array(dir.path(), "nm", "raid1", 2);
    let blank = files(dir.path(), "blank", 1);
    let paths = vec![a[0].clone(), blank[0].clone()];
    assert_refused(
        &paths,
        &[
            name(&blank[0]),
            "no raidkit superblock",
            "the array starts without",
        ],
    );
    let twice = vec![a[0].clone(), a[0].clone()];
    assert_refused(&twice, &[name(&a[0]), "given more than once"]);
}

#[test]
fn any_order_gives_the_same_array() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "ord", "raid6", 5);
    let data = pattern(300_000, 1);
    {
        let v = try_assemble(&paths, false).unwrap();
        v.write(12_345, &data).unwrap();
        v.close().unwrap();
    }
    let seed = seed();
    let mut x = seed | 1;
    for _ in 0..6 {
        let mut order = paths.clone();
        for i in (1..order.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let v = try_assemble(&order, false).unwrap();
        assert_eq!(v.size_bytes(), 3 * (3 << 20), "seed {seed}");
        assert_eq!(v.name(), "ord");
        let mut got = vec![0u8; data.len()];
        v.read(12_345, &mut got).unwrap();
        assert!(got == data, "order {order:?} (seed {seed})");
        let names: Vec<_> = v.member_status().into_iter().map(|s| s.name).collect();
        let want: Vec<_> = paths.iter().map(|p| name(p).to_string()).collect();
        assert_eq!(names, want, "roles come from superblocks (seed {seed})");
    }
}

#[test]
fn stale_member_is_left_out_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    // Without a bitmap nothing bounds what it missed (with one it is re-added: tests/bitmap.rs).
    let paths = new_array_with(dir.path(), "st", layout::Level::Raid1, 3, None);
    let old = pattern(100_000, 2);
    let new = pattern(100_000, 3);
    {
        let v = try_assemble(&paths, false).unwrap();
        v.write(0, &old).unwrap();
        v.close().unwrap();
    }
    {
        // Member 2 is away while the array is written.
        let v = try_assemble(&paths[..2], false).unwrap();
        v.write(0, &new).unwrap();
        v.close().unwrap();
    }
    let v = try_assemble(&paths, false).unwrap();
    assert_eq!(v.stale().len(), 1);
    assert_eq!(v.stale()[0].name, name(&paths[2]));
    assert_eq!(v.stale()[0].role, 2);
    assert!(
        v.warnings().iter().any(|w| w.contains("stale")),
        "{:?}",
        v.warnings()
    );
    let status = v.member_status();
    assert_eq!(status[2].state, MemberState::Missing);
    assert_eq!(status[2].name, "", "the stale member is not used");
    let mut got = vec![0u8; new.len()];
    v.read(0, &mut got).unwrap();
    assert!(got == new, "reads come from fresh members only");
}

/// Writes through a volume and drops it without `close`: a crash while dirty.
fn crash_after_write(paths: &[PathBuf], data: &[u8]) {
    let v = try_assemble(paths, false).unwrap();
    v.write(4096, data).unwrap();
    v.flush().unwrap();
    drop(v);
    assert_eq!(read_sb(&paths[0]).state, ArrayState::Dirty);
}

#[test]
fn dirty_degraded_raid5_needs_the_flag_and_reports_the_ranges_at_risk() {
    let dir = tempfile::tempdir().unwrap();
    // Bitmap regions of 64 KiB: the write below dirties regions 0-3.
    let region = 64 << 10;
    let paths = new_array_with(dir.path(), "wh", layout::Level::Raid5, 3, Some(region));
    let data = pattern(200_000, 4);
    crash_after_write(&paths, &data);
    let degraded = vec![paths[0].clone(), paths[2].clone()];
    assert_refused(
        &degraded,
        &[
            "raid5 was not shut down cleanly",
            "[1]",
            "write hole",
            "raidkit serve --start-dirty-degraded",
            "ranges at risk",
        ],
    );
    let v = try_assemble(&degraded, true).unwrap();
    // The regions the write dirtied are the range at risk, and nothing else.
    let warning = format!("bytes 0-{} (256.0 KiB)", 4 * region);
    assert!(
        v.warnings()
            .iter()
            .any(|w| w.contains("--start-dirty-degraded") && w.contains(&warning)),
        "{:?}",
        v.warnings()
    );
    let risk = v.status().at_risk.expect("ranges at risk in the status");
    assert_eq!((risk.ranges_count, risk.bytes), (1, 4 * region));
    assert_eq!(risk.ranges[0].offset_bytes, 0);
    assert!(!risk.whole_array);
    let mut got = vec![0u8; data.len()];
    v.read(4096, &mut got).unwrap();
    assert!(got == data, "degraded read reconstructs the data");
}

/// A clean stop before the resync after a crash has finished leaves the array dirty: the
/// stripes not resynced yet may still hold parity the crash left stale, so a start without a
/// member must refuse (or be forced) exactly as right after the crash.
#[test]
fn a_clean_stop_during_the_crash_resync_keeps_the_write_hole_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array_with(dir.path(), "cs", layout::Level::Raid5, 3, None);
    crash_after_write(&paths, &pattern(8192, 6));
    let slow = AssembleOptions {
        speed_limits: volume::SpeedLimits {
            min_bytes_per_sec: 4096,
            max_bytes_per_sec: 4096,
        },
        ..AssembleOptions::default()
    };
    let v = assemble(open_all(&paths), &slow).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    v.close().unwrap();
    drop(v);
    let sb = read_sb(&paths[0]);
    assert!(
        sb.resync_offset_bytes.is_some(),
        "the resync finished: {sb:?}"
    );
    assert_eq!(
        sb.state,
        ArrayState::Dirty,
        "a resync after a crash is pending"
    );
    assert_refused(&paths[1..], &["write hole", "--start-dirty-degraded"]);
    // With every member the resync resumes, and once it is done the array closes clean.
    let v = try_assemble(&paths, false).unwrap();
    assert!(v.wait_idle(std::time::Duration::from_secs(30)));
    v.close().unwrap();
    assert_eq!(read_sb(&paths[0]).state, ArrayState::Clean);
    assert_eq!(read_sb(&paths[0]).resync_offset_bytes, None);
}

/// With a journal to replay, no rebuild may read a stripe before the replay made it
/// consistent: a spare given at assembly (whose `add` wakes the worker) waits for
/// `journal_replayed`, then is rebuilt.
#[test]
fn background_work_waits_for_the_journal_replay() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "jr", "raid5", 3);
    let spare = files(dir.path(), "sp", 1);
    let opts = AssembleOptions {
        spares: open_all(&spare),
        journal_replay: Some(ondisk::Uuid::new_v4()),
        ..AssembleOptions::default()
    };
    let v = assemble(open_all(&paths[..2]), &opts).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let st = v.status();
    assert!(
        st.task.is_none() && st.members.iter().any(|m| m.state == MemberState::Spare),
        "background work started before the journal replay: {st:?}"
    );
    v.journal_replayed();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while v
        .status()
        .members
        .iter()
        .any(|m| m.state != MemberState::Active)
    {
        assert!(std::time::Instant::now() < deadline, "{:?}", v.status());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn dirty_degraded_raid5_without_a_bitmap_puts_the_whole_array_at_risk() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array_with(dir.path(), "nb", layout::Level::Raid5, 3, None);
    crash_after_write(&paths, &pattern(8192, 5));
    let degraded = vec![paths[1].clone(), paths[2].clone()];
    assert_refused(
        &degraded,
        &[
            "--start-dirty-degraded",
            "the whole array (it has no write-intent bitmap)",
        ],
    );
    let v = try_assemble(&degraded, true).unwrap();
    let risk = v.status().at_risk.expect("at risk");
    assert!(risk.whole_array && risk.bytes == v.size_bytes(), "{risk:?}");
    assert!(
        v.warnings().iter().any(|w| w.contains("the whole array")),
        "{:?}",
        v.warnings()
    );
}

#[test]
fn dirty_healthy_raid5_starts_with_a_warning_and_resyncs_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "rs", "raid5", 3);
    crash_after_write(&paths, &pattern(10_000, 5));
    // Damage redundancy behind the array's back, as a torn write would.
    let m = member::open(name(&paths[1]), &OpenOptions::default()).unwrap();
    m.write_at(&[0xEE; 512], (1 << 20) + 8192).unwrap();
    let v = try_assemble(&paths, false).unwrap();
    assert!(v
        .warnings()
        .iter()
        .any(|w| w.contains("not shut down cleanly")));
    assert!(v.wait_idle(std::time::Duration::from_secs(20)));
    assert!(
        v.check().unwrap().is_consistent(),
        "the background resync recomputed parity"
    );
    v.write(0, b"x").unwrap();
    v.close().unwrap();
    let sb = read_sb(&paths[0]);
    assert_eq!(sb.state, ArrayState::Clean);
    assert_eq!(sb.resync_offset_bytes, None);
    // An explicit resync also works (and waits).
    m.write_at(&[0xEE; 512], (1 << 20) + 8192).unwrap();
    v.resync().unwrap();
    assert!(v.check().unwrap().is_consistent());
}

#[test]
fn dirty_array_without_new_writes_is_marked_clean_on_close() {
    // Regression: close() skipped the superblock write when this session had written nothing,
    // leaving an array that was assembled dirty marked Dirty forever. RAID 0 has nothing to
    // resync, so nothing else in the session rewrites the superblocks (as after a journal
    // replay, which writes below the volume).
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "rc", "raid0", 3);
    crash_after_write(&paths, &pattern(10_000, 9));
    assert_eq!(read_sb(&paths[0]).state, ArrayState::Dirty);
    let v = try_assemble(&paths, false).unwrap();
    assert!(v.wait_idle(std::time::Duration::from_secs(20)));
    v.close().unwrap();
    for path in &paths {
        let sb = read_sb(path);
        assert_eq!(sb.state, ArrayState::Clean, "{path:?}");
        assert_eq!(sb.resync_offset_bytes, None, "{path:?}");
    }
}

#[test]
fn mark_dirty_marks_the_superblocks_and_writes_no_data() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "md", "raid5", 3);
    let v = try_assemble(&paths, false).unwrap();
    let mut before = vec![0u8; 64 << 10];
    v.read(0, &mut before).unwrap();
    v.mark_dirty().unwrap();
    for p in &paths {
        let sb = read_sb(p);
        assert_eq!((sb.state, sb.events), (ArrayState::Dirty, 2), "{}", name(p));
    }
    v.mark_dirty().unwrap();
    assert_eq!(read_sb(&paths[0]).events, 2, "marked once");
    let mut after = vec![0u8; before.len()];
    v.read(0, &mut after).unwrap();
    assert!(after == before, "no data written");
    v.close().unwrap();
    assert_eq!(read_sb(&paths[0]).state, ArrayState::Clean);
}

#[test]
fn volume_marks_dirty_before_writes_and_clean_on_close() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "dc", "raid10", 3);
    let v = try_assemble(&paths, false).unwrap();
    let before = hash_files(&paths);
    let mut buf = vec![0u8; 4096];
    v.read(0, &mut buf).unwrap();
    v.close().unwrap();
    assert_eq!(
        hash_files(&paths),
        before,
        "assembly, reads and a clean close write nothing"
    );
    assert_eq!(v.events(), 1);
    v.write(1000, b"hello").unwrap();
    for p in &paths {
        let sb = read_sb(p);
        assert_eq!((sb.state, sb.events), (ArrayState::Dirty, 2), "{}", name(p));
    }
    v.write(2000, b"again").unwrap();
    assert_eq!(
        read_sb(&paths[1]).events,
        2,
        "one transition, not one per write"
    );
    v.close().unwrap();
    for p in &paths {
        let sb = read_sb(p);
        assert_eq!((sb.state, sb.events), (ArrayState::Clean, 3), "{}", name(p));
    }
    assert!(!v.is_dirty());
}

#[test]
fn degraded_write_records_missing_role() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "mr", "raid6", 4);
    let v = try_assemble(
        &[paths[0].clone(), paths[1].clone(), paths[3].clone()],
        false,
    )
    .unwrap();
    v.write(0, &pattern(1 << 20, 6)).unwrap();
    v.close().unwrap();
    let sb = read_sb(&paths[0]);
    assert_eq!(sb.roles[2].state, RoleState::Missing);
    assert_eq!(sb.roles[3].state, RoleState::Active);
    assert_eq!(
        read_sb(&paths[2]).events,
        1,
        "the absent member is untouched"
    );
}

#[test]
fn many_threads_write_through_a_volume() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "mt", "raid5", 4);
    let v = Arc::new(try_assemble(&paths, false).unwrap());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let v = Arc::clone(&v);
            std::thread::spawn(move || v.write(t * 1_000_000, &pattern(500_000, t)).unwrap())
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    v.close().unwrap();
    let v = try_assemble(&paths, false).unwrap();
    for t in 0..4u64 {
        let mut got = vec![0u8; 500_000];
        v.read(t * 1_000_000, &mut got).unwrap();
        assert!(got == pattern(500_000, t));
    }
    assert_eq!(read_sb(&paths[0]).events, 3);
}

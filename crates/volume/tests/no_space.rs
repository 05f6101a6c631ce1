//! A volume whose members' filesystem is full: writes fail with "no space" (the client's
//! `io::Error` kind is `StorageFull`), no member is failed, status and the notice hook name
//! the full filesystem, and once space is back the background worker resyncs what the refused
//! writes left half-written, so every acknowledged write survives a member loss.

mod common;

use std::io::ErrorKind;
use std::sync::{Arc, Mutex};

use common::*;
use member::{FaultControl, FaultRule, FaultyMember, Member};
use volume::{assemble, ArrayHealth, AssembleOptions, MemberState, SpeedLimits, Volume};

fn wait_for_it(what: &str, mut cond: impl FnMut() -> bool) {
    assert!(wait_for(60, &mut cond), "timed out waiting for {what}");
}

/// The array of `paths` assembled over `FaultyMember`s, and their controls.
fn assemble_faulty(paths: &[std::path::PathBuf]) -> (Volume, Vec<FaultControl>) {
    let faulty: Vec<FaultyMember> = open_all(paths).into_iter().map(FaultyMember::new).collect();
    let controls: Vec<_> = faulty.iter().map(|f| f.control()).collect();
    let members: Vec<Arc<dyn Member>> = faulty.into_iter().map(|f| Arc::new(f) as _).collect();
    let v = assemble(members, &AssembleOptions::default()).unwrap();
    (v, controls)
}

/// Collects the volume's notices (its notice hook) into the list returned.
fn collect_notices(v: &Volume) -> Arc<Mutex<Vec<String>>> {
    let notices = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&notices);
    v.set_notice_hook(Box::new(move |line| {
        sink.lock().unwrap().push(line.to_string())
    }));
    notices
}

/// Writes to the data area of `control`'s member fail with `kind` (out of space); its
/// superblock and bitmap still take writes.
fn data_area_full(control: &FaultControl, data_offset: u64, kind: ErrorKind) {
    control.fail_writes_as(
        FaultRule::Range {
            offset: data_offset,
            len: u64::MAX / 2,
        },
        kind,
    );
}

#[test]
fn a_full_filesystem_refuses_writes_and_resyncs_when_space_is_back() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "ns", "raid5", 4);
    let data_offset = read_sb(&paths[0]).data_offset_bytes;
    let (v, controls) = assemble_faulty(&paths);
    v.set_speed_limits(SpeedLimits {
        min_bytes_per_sec: 1 << 30,
        max_bytes_per_sec: 1 << 30,
    });
    let notices = collect_notices(&v);
    let size = v.size_bytes() as usize;
    let mut model = pattern(size, seed);
    v.write(0, &model).unwrap();
    // The data areas of roles 1 and 3 are out of space (the bitmap bits are already set).
    for role in [1, 3] {
        data_area_full(&controls[role], data_offset, ErrorKind::StorageFull);
    }
    let mut unknown = vec![false; size];
    let mut refused = 0;
    for i in 0..20u64 {
        let offset = (i * 37 * 4096 + seed % 4096) as usize % (size - 300_000);
        let len = 1000 + (i as usize * 7919) % 200_000;
        let data = pattern(len, seed + i + 1);
        match v.write(offset as u64, &data) {
            Ok(()) => model[offset..offset + len].copy_from_slice(&data),
            Err(e) => {
                assert!(e.is_no_space(), "{e}");
                let io: std::io::Error = e.into();
                assert_eq!(io.kind(), ErrorKind::StorageFull, "{io}");
                unknown[offset..offset + len].fill(true);
                refused += 1;
            }
        }
    }
    assert!(refused > 0);
    let status = v.status();
    assert_eq!(status.health, ArrayHealth::Resyncing, "{status:?}");
    assert!(status.unsynced_bytes > 0);
    for m in &status.members {
        assert_eq!(m.state, MemberState::Active, "{m:?}");
        assert_eq!(m.write_errors, 0, "{m:?}");
    }
    for role in [1, 3] {
        let m = &status.members[role];
        assert!(m.no_space_errors > 0, "{m:?}");
        let fs = m.filesystem.as_ref().expect("the filesystem is named");
        assert!(paths[role].starts_with(&fs.mount_point), "{fs:?}");
    }
    {
        let notices = notices.lock().unwrap();
        assert_eq!(notices.len(), 1, "one notice per interval: {notices:?}");
        assert!(notices[0].contains("out of space"), "{}", notices[0]);
        assert!(notices[0].contains("filesystem "), "{}", notices[0]);
    }
    // Space is back: the worker resyncs, writes succeed.
    for c in &controls {
        c.heal();
    }
    wait_for_it("the resync of refused writes", || {
        v.status().unsynced_bytes == 0
    });
    for i in 0..5u64 {
        let offset = (i * 123_457) as usize % (size - 100_000);
        let data = pattern(100_000, seed + 100 + i);
        v.write(offset as u64, &data).unwrap();
        model[offset..offset + 100_000].copy_from_slice(&data);
        unknown[offset..offset + 100_000].fill(false);
    }
    assert!(v.check().unwrap().is_consistent());
    v.fail(&paths[2].display().to_string()).unwrap();
    let mut got = vec![0u8; size];
    v.read(0, &mut got).unwrap();
    let wrong = (0..size).find(|&i| !unknown[i] && got[i] != model[i]);
    assert_eq!(wrong, None, "acknowledged data reads back wrong degraded");
}

#[test]
fn a_close_while_still_full_leaves_the_array_to_resync() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "nc", "raid5", 3);
    let data_offset = read_sb(&paths[0]).data_offset_bytes;
    let (v, controls) = assemble_faulty(&paths);
    v.write(0, &pattern(300_000, 1)).unwrap();
    data_area_full(&controls[0], data_offset, ErrorKind::QuotaExceeded);
    let e = v.write(0, &pattern(300_000, 2)).unwrap_err();
    assert!(e.is_no_space(), "{e}");
    assert!(v.status().unsynced_bytes > 0);
    v.close().unwrap();
    drop(v);
    assert_eq!(
        read_sb(&paths[1]).state,
        ondisk::ArrayState::Dirty,
        "closed with half-written stripes: the next assembly must resync"
    );
    let v = assemble_paths(&paths);
    v.resync().unwrap();
    assert!(v.check().unwrap().is_consistent());
}

#[test]
fn a_bitmap_bit_refused_for_lack_of_space_fails_the_write_not_the_member() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "nb", "raid1", 2);
    let (v, controls) = assemble_faulty(&paths);
    v.write(0, &pattern(4096, 1)).unwrap(); // the dirty mark is written
    let notices = collect_notices(&v);
    // Once the region's bit is clear again, member 1 refuses every write, its bitmap block
    // included: the next write must set the bit first, and that is what fails.
    v.set_bitmap_idle(std::time::Duration::from_millis(100));
    assert!(wait_for(30, || v.bitmap_status().unwrap().dirty_regions == 0));
    controls[1].fail_writes_as(FaultRule::Always, ErrorKind::StorageFull);
    let e = v.write(0, &pattern(4096, 2));
    let status = v.status();
    assert!(
        status
            .members
            .iter()
            .all(|m| m.state == MemberState::Active),
        "{status:?}"
    );
    let e = e.expect_err("member 1 refuses every write");
    assert!(e.is_no_space(), "{e}");
    assert!(
        matches!(e, volume::VolumeError::Superblock { .. }),
        "the bitmap write is what fails: {e}"
    );
    let m = &status.members[1];
    assert_eq!(m.no_space_errors, 1, "{m:?}");
    assert!(m.filesystem.is_some(), "status names the filesystem: {m:?}");
    assert_eq!(notices.lock().unwrap().len(), 1);
    assert!(notices.lock().unwrap()[0].contains(&paths[1].display().to_string()));
    controls[1].heal();
    v.write(0, &pattern(4096, 3)).unwrap();
}

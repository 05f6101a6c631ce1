//! The used-regions map: a spare rebuild and a replace copy only the regions that were
//! written; a trim of whole regions clears them (durably); the first write to a region whose
//! members hold garbage leaves its stripes consistent (RAID 5/6 parity of a never-written
//! region); a crash between the region's zeroing, its bit and the data is safe.
//!
//! Seeded: `RAIDKIT_SEED=N cargo test -p volume --test used_map` replays the data patterns.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use layout::Level;
use member::{Call, Hooked, Member, Op, SimMember};
use ondisk::{create, CreateOptions};
use volume::{assemble, AssembleOptions, MemberState, SpeedLimits, TaskKind, Volume};

const WAIT: Duration = Duration::from_secs(120);
const KIB: u64 = 1024;
const MEMBER: u64 = 16 << 20;

fn fast() -> SpeedLimits {
    SpeedLimits {
        min_bytes_per_sec: 1 << 30,
        max_bytes_per_sec: 1 << 30,
    }
}

fn path_name(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// Data-area bytes written to a member.
fn counting(inner: Arc<dyn Member>, written: Arc<AtomicU64>) -> Arc<dyn Member> {
    Arc::new(Hooked::new(inner, move |call: &Call| {
        if call.changes_bytes() && call.offset >= ondisk::DATA_OFFSET_DEFAULT {
            written.fetch_add(call.len, Ordering::SeqCst);
        }
        Ok(())
    }))
}

/// An array of `count` file members of 16 MiB with 64 KiB chunks and the used map asked at
/// 256 KiB (rounded up to whole stripes).
fn new_used_array(dir: &Path, level: Level, count: usize) -> Vec<PathBuf> {
    let paths = sized_files(dir, "m", count, MEMBER);
    let mut opts = CreateOptions::new(level, "used");
    opts.chunk_bytes = 64 * KIB;
    opts.used_region_bytes = Some(256 * KIB);
    create(&open_all(&paths), &opts).unwrap();
    paths
}

fn open_volume(members: Vec<Arc<dyn Member>>) -> Volume {
    let v = assemble(members, &AssembleOptions::default()).unwrap();
    v.set_speed_limits(fast());
    v
}

fn read_all(v: &Volume) -> Vec<u8> {
    let mut got = vec![0u8; v.size_bytes() as usize];
    v.read(0, &mut got).unwrap();
    got
}

/// Writes about a tenth of the array in a few runs (not region-aligned) into `model`.
fn write_tenth(v: &Volume, model: &mut [u8], seed: u64) {
    let size = v.size_bytes();
    for (i, at) in [size / 7 + 1000, size / 2 + 12345, size * 9 / 10]
        .iter()
        .enumerate()
    {
        let data = pattern((size / 30) as usize, seed + i as u64);
        v.write(*at, &data).unwrap();
        model[*at as usize..][..data.len()].copy_from_slice(&data);
    }
}

/// Fails role 2, adds a blank spare and rebuilds: the spare is written only where data was
/// (plus whole regions around it), status says how much will be copied of how much, and the
/// array reads the same with the rebuilt member standing in for another.
fn spare_rebuild_copies_only_used(level: Level, count: usize) {
    let seed = seed();
    let what = format!("{level} x{count} RAIDKIT_SEED={seed}");
    let dir = tempfile::tempdir().unwrap();
    let paths = new_used_array(dir.path(), level, count);
    let v = open_volume(open_all(&paths));
    let mut model = vec![0u8; v.size_bytes() as usize];
    write_tenth(&v, &mut model, seed);
    let status = v.status().used_map.expect("a used map");
    assert!(
        status.used_bytes <= v.size_bytes() / 5 && status.used_bytes >= v.size_bytes() / 10,
        "{what}: {status:?}"
    );
    v.fail(&path_name(&paths[2])).unwrap();
    v.remove(&path_name(&paths[2])).unwrap();
    let spare = sized_files(dir.path(), "spare", 1, MEMBER);
    let written = Arc::new(AtomicU64::new(0));
    // Slow, so the rebuild's status can be read while it runs.
    v.set_speed_limits(SpeedLimits {
        min_bytes_per_sec: 1 << 20,
        max_bytes_per_sec: 1 << 20,
    });
    v.add(counting(open_all(&spare).remove(0), written.clone()))
        .unwrap();
    let mut seen = None;
    assert!(
        wait_for(60, || {
            seen = v.status().task.filter(|t| t.kind == TaskKind::Rebuild);
            seen.is_some()
        }),
        "{what}: no rebuild"
    );
    let task = seen.unwrap();
    let member_bytes = v.geometry().member_data_bytes(2);
    assert_eq!(task.of_member_bytes, Some(member_bytes), "{what}: {task:?}");
    assert!(
        task.total_bytes <= member_bytes / 4 && task.total_bytes >= member_bytes / 20,
        "{what}: copies {} of {member_bytes}",
        task.total_bytes
    );
    v.set_speed_limits(fast());
    assert!(v.wait_idle(WAIT), "{what}");
    assert_eq!(v.status().members[2].state, MemberState::Active, "{what}");
    let copied = written.load(Ordering::SeqCst);
    assert!(
        copied > 0 && copied <= member_bytes / 4,
        "{what}: the rebuild wrote {copied} of {member_bytes} bytes"
    );
    assert!(read_all(&v) == model, "{what}");
    assert!(v.check().unwrap().is_consistent(), "{what}");
    // The rebuilt member's bytes are right: read with another member gone.
    v.fail(&path_name(&paths[0])).unwrap();
    assert!(
        read_all(&v) == model,
        "{what}: degraded through the rebuilt member"
    );
}

#[test]
fn a_spare_rebuild_copies_only_the_regions_that_hold_data() {
    spare_rebuild_copies_only_used(Level::Raid5, 3);
    spare_rebuild_copies_only_used(Level::Raid6, 4);
    spare_rebuild_copies_only_used(Level::Raid1, 3);
    spare_rebuild_copies_only_used(Level::Raid10, 3);
}

#[test]
fn a_replace_copies_only_the_regions_that_hold_data() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let paths = new_used_array(dir.path(), Level::Raid5, 3);
    let v = open_volume(open_all(&paths));
    let mut model = vec![0u8; v.size_bytes() as usize];
    write_tenth(&v, &mut model, seed);
    let new = sized_files(dir.path(), "new", 1, MEMBER);
    let written = Arc::new(AtomicU64::new(0));
    v.replace(
        &path_name(&paths[1]),
        counting(open_all(&new).remove(0), written.clone()),
    )
    .unwrap();
    assert!(v.wait_idle(WAIT));
    let member_bytes = v.geometry().member_data_bytes(1);
    let copied = written.load(Ordering::SeqCst);
    assert!(
        copied > 0 && copied <= member_bytes / 4,
        "replace wrote {copied} of {member_bytes} (RAIDKIT_SEED={seed})"
    );
    assert_eq!(v.member_status()[1].name, path_name(&new[0]));
    v.fail(&path_name(&paths[0])).unwrap();
    assert!(read_all(&v) == model, "RAIDKIT_SEED={seed}");
}

/// A trim or write-zeroes of whole regions clears them (they read as zeroes, are not
/// rebuilt), durably: the next assembly sees them unused. Partly covered regions stay used.
#[test]
fn a_trim_of_whole_regions_clears_them() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let paths = new_used_array(dir.path(), Level::Raid5, 3);
    let region;
    {
        let v = open_volume(open_all(&paths));
        region = v.status().used_map.unwrap().region_bytes;
        v.write(0, &pattern((8 * region) as usize, seed)).unwrap();
        assert_eq!(v.status().used_map.unwrap().used_regions, 8);
        // Regions 2..6 whole, and half of region 1 and of region 6.
        v.trim(region + region / 2, 5 * region).unwrap();
        assert_eq!(v.status().used_map.unwrap().used_regions, 4);
        v.write_zeroes(7 * region, region).unwrap();
        assert_eq!(v.status().used_map.unwrap().used_regions, 3);
        let mut got = vec![1u8; (8 * region) as usize];
        v.read(0, &mut got).unwrap();
        let model = {
            let mut m = pattern((8 * region) as usize, seed);
            m[(region + region / 2) as usize..(6 * region + region / 2) as usize].fill(0);
            m[(7 * region) as usize..].fill(0);
            m
        };
        assert!(got == model, "RAIDKIT_SEED={seed}");
        // A write racing nothing: a cleared region is used again by its next write.
        v.write(3 * region, b"again").unwrap();
        assert_eq!(v.status().used_map.unwrap().used_regions, 4);
        v.close().unwrap();
    }
    let v = open_volume(open_all(&paths));
    assert_eq!(
        v.status().used_map.unwrap().used_regions,
        4,
        "the clears and the set are on disk"
    );
    let mut got = vec![0u8; 5];
    v.read(3 * region, &mut got).unwrap();
    assert_eq!(&got, b"again");
}

/// Members whose data areas hold garbage (a block device `create` does not zero, or a spare
/// rebuilt only where data was): small first writes to regions must still leave their stripes
/// consistent, or a degraded read reconstructs garbage. Before the used map zeroed a region
/// at its first write, a read-modify-write kept the garbage parity.
fn garbage_members_first_writes(level: Level, count: usize) {
    let seed = seed();
    let what = format!("{level} x{count} RAIDKIT_SEED={seed}");
    let dir = tempfile::tempdir().unwrap();
    let paths = new_used_array(dir.path(), level, count);
    for (i, p) in paths.iter().enumerate() {
        let m = open_unheld(p);
        let garbage = pattern(
            (MEMBER - ondisk::DATA_OFFSET_DEFAULT) as usize,
            seed + 100 + i as u64,
        );
        m.write_at(&garbage, ondisk::DATA_OFFSET_DEFAULT).unwrap();
        m.flush().unwrap();
    }
    let v = open_volume(open_all(&paths));
    let mut model = vec![0u8; v.size_bytes() as usize];
    // Never-written regions read as zeroes, not as the members' garbage.
    assert!(
        read_all(&v) == model,
        "{what}: unused regions read as zeroes"
    );
    let region = v.status().used_map.unwrap().region_bytes;
    for (i, at) in [100, 3 * region + 5000, 9 * region - 700]
        .into_iter()
        .enumerate()
    {
        let data = pattern(3000, seed + i as u64);
        v.write(at, &data).unwrap();
        model[at as usize..][..data.len()].copy_from_slice(&data);
    }
    assert!(read_all(&v) == model, "{what}");
    // The whole-array check passes over the never-written regions (garbage) as a scrub
    // does, and finds the written ones consistent; it counted the garbage before.
    let report = v.check().unwrap();
    assert!(
        report.is_consistent(),
        "{what}: check counted {} mismatches, first {:?}",
        report.mismatch_count,
        report.mismatches.first()
    );
    assert!(report.units_checked > 0, "{what}: nothing checked");
    v.close().unwrap();
    drop(v);
    for lost in 0..count {
        let others: Vec<PathBuf> = (paths.iter().enumerate())
            .filter(|(i, _)| *i != lost)
            .map(|(_, p)| p.clone())
            .collect();
        let v = open_volume(open_all(&others));
        assert!(
            read_all(&v) == model,
            "{what}: degraded without role {lost}: a stripe's parity kept the garbage"
        );
    }
}

#[test]
fn first_writes_over_members_holding_garbage_keep_stripes_consistent() {
    garbage_members_first_writes(Level::Raid5, 3);
    garbage_members_first_writes(Level::Raid6, 4);
    garbage_members_first_writes(Level::Raid1, 2);
    garbage_members_first_writes(Level::Raid10, 3);
}

/// A power cut at each step of a region's first write: after the zeroing (before the bit),
/// after the bit (before the data), and after the data without a flush. Every outcome reads
/// as zeroes or the data where it was written, consistent, and a rebuild afterwards copies the
/// region whenever its bit survived.
#[test]
fn a_crash_between_the_set_and_the_write_is_safe() {
    let seed = seed();
    for (step, stop_at) in ["map", "data", "none"].into_iter().enumerate() {
        let what = format!("crash before the {stop_at} write, RAIDKIT_SEED={seed}");
        let sims: Vec<Arc<SimMember>> = (0..3)
            .map(|i| Arc::new(SimMember::new(&format!("sim{i}"), MEMBER)))
            .collect();
        let plain: Vec<Arc<dyn Member>> = sims.iter().map(|s| s.clone() as _).collect();
        let mut opts = CreateOptions::new(Level::Raid5, "crash");
        opts.chunk_bytes = 64 * KIB;
        opts.used_region_bytes = Some(256 * KIB);
        let sb = create(&plain, &opts).unwrap().remove(0);
        let used_at = sb.used_map.unwrap().offset_bytes;
        // The crash images taken at the first write of the kind named.
        let images: Arc<Mutex<Option<Vec<SimMember>>>> = Arc::default();
        let armed = Arc::new(AtomicBool::new(false));
        let members: Vec<Arc<dyn Member>> = sims
            .iter()
            .map(|s| {
                let (all, images, armed) = (sims.clone(), images.clone(), armed.clone());
                let check = move |call: &Call| {
                    let hit = match stop_at {
                        "map" => {
                            call.offset >= used_at && call.offset < ondisk::DATA_OFFSET_DEFAULT
                        }
                        "data" => {
                            call.op == Op::Write && call.offset >= ondisk::DATA_OFFSET_DEFAULT
                        }
                        _ => false,
                    };
                    if hit && call.changes_bytes() && armed.swap(false, Ordering::SeqCst) {
                        let crashed = all
                            .iter()
                            .enumerate()
                            .map(|(i, m)| m.crash(seed + i as u64))
                            .collect();
                        *images.lock().unwrap() = Some(crashed);
                    }
                    Ok(())
                };
                Arc::new(Hooked::new(s.clone() as Arc<dyn Member>, check)) as _
            })
            .collect();
        let v = open_volume(members);
        let region = v.status().used_map.unwrap().region_bytes;
        // Region 1 is written and flushed before; region 5's first write is cut.
        let before = pattern(10_000, seed);
        v.write(region + 10, &before).unwrap();
        v.flush().unwrap();
        armed.store(true, Ordering::SeqCst);
        let data = pattern(20_000, seed + 1 + step as u64);
        v.write(5 * region + 77, &data).unwrap();
        drop(v);
        let crashed: Vec<SimMember> = images
            .lock()
            .unwrap()
            .take()
            .unwrap_or_else(|| sims.iter().map(|s| s.crash(seed)).collect());
        let crashed: Vec<Arc<SimMember>> = crashed.into_iter().map(Arc::new).collect();
        let v = open_volume(crashed.iter().map(|s| s.clone() as _).collect());
        assert!(v.wait_idle(WAIT), "{what}");
        let mut got = vec![0u8; before.len()];
        v.read(region + 10, &mut got).unwrap();
        assert!(got == before, "{what}: flushed data before the crash");
        let mut got = vec![0u8; data.len()];
        v.read(5 * region + 77, &mut got).unwrap();
        let zero = got.iter().all(|&b| b == 0);
        let new = got == data;
        match stop_at {
            "map" => assert!(zero, "{what}: the region was never marked"),
            _ => assert!(
                zero || new || step == 2,
                "{what}: region 5 reads neither zeroes nor the data"
            ),
        }
        assert!(v.check().unwrap().is_consistent(), "{what}");
        // Role 1 lost and rebuilt onto a blank spare: the region reads as before.
        let mut model = vec![0u8; v.size_bytes() as usize];
        v.read(0, &mut model).unwrap();
        v.fail_member(1);
        assert!(read_all(&v) == model, "{what}: degraded");
    }
}

#[test]
fn a_bit_a_cut_left_on_one_member_is_written_back_to_all_at_assembly() {
    // A power cut while a region's bit was being written can leave it on one member only; the
    // data under it (put there since by the journal's replay, which sets no bit) must outlive
    // that member. Before the fix the union was kept in memory only, and the array assembled
    // without that member read the region as never written: zeroes (simtest
    // power_loss_journal_write_back_raid5, RAIDKIT_SEED=551228225).
    let dir = tempfile::tempdir().unwrap();
    let paths = new_used_array(dir.path(), Level::Raid5, 3);
    let data = pattern(64 * KIB as usize, 11);
    let at = 1 << 20;
    let v = open_volume(open_all(&paths));
    v.write(at, &data).unwrap();
    v.close().unwrap();
    // The cut: members 1 and 2 never got the bit (their map all clear, as create wrote it).
    let sb = ondisk::read_superblock(open_all(&paths[..1])[0].as_ref()).unwrap();
    let map = sb.used_map.expect("a used map");
    let clear = vec![0u8; map.regions(sb.array_size_bytes).div_ceil(8) as usize];
    let area = ondisk::bitmap::encode_area(&sb.array_uuid, &map.area(), &clear);
    for member in open_all(&paths[1..]) {
        member.write_at(&area, map.area().offset_bytes).unwrap();
        member.flush().unwrap();
    }
    // Assembled whole: member 0's bit counts (the union).
    let v = open_volume(open_all(&paths));
    let mut got = vec![0u8; data.len()];
    v.read(at, &mut got).unwrap();
    assert!(got == data, "the healthy array reads the data");
    v.close().unwrap();
    // Without member 0 the bit must still be there.
    let v = open_volume(open_all(&paths[1..]));
    v.read(at, &mut got).unwrap();
    assert!(
        got == data,
        "without member 0 the region read as never written"
    );
    v.close().unwrap();
}

//! The write-intent bitmap: format and corruption detection, bits durable before data,
//! resync of only the dirty regions after a crash (reads meanwhile correct), lazy clear (after
//! idle, never with a write in flight, never while degraded), re-add of a member that was away
//! with a rebuild of only the dirty regions, and the full resync without a bitmap.
//!
//! Seeded: `RAIDKIT_SEED=N cargo test -p volume --test bitmap` replays the data patterns.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use layout::Level;
use member::{Call, Hooked, Member, Op, SimMember};
use ondisk::{
    create, read_superblock, CreateOptions, Superblock, SuperblockError, BITMAP_OFFSET,
    FEATURE_INCOMPAT_BITMAP, SUPERBLOCK_BYTES,
};
use volume::{assemble, ArrayHealth, AssembleOptions, MemberState, SpeedLimits, Volume};

const WAIT: Duration = Duration::from_secs(60);
const KIB: u64 = 1024;
const REGION: u64 = 256 * KIB;

/// The data-area bytes read and written on a member (offsets past the metadata area).
#[derive(Debug, Default)]
struct Counting {
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
}

impl Counting {
    fn reset(&self) {
        self.read_bytes.store(0, Ordering::SeqCst);
        self.written_bytes.store(0, Ordering::SeqCst);
    }

    /// `inner`, counting into `self`.
    fn watch(self: &Arc<Counting>, inner: Arc<dyn Member>) -> Arc<dyn Member> {
        let counts = Arc::clone(self);
        Arc::new(Hooked::new(inner, move |call: &Call| {
            if call.offset >= ondisk::DATA_OFFSET_DEFAULT {
                match call.op {
                    Op::Read => &counts.read_bytes,
                    _ if call.changes_bytes() => &counts.written_bytes,
                    _ => return Ok(()),
                }
                .fetch_add(call.len, Ordering::SeqCst);
            }
            Ok(())
        }))
    }
}

fn path_name(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

fn counted(paths: &[PathBuf]) -> (Vec<Arc<Counting>>, Vec<Arc<dyn Member>>) {
    let m = open_all(paths);
    let c: Vec<Arc<Counting>> = m.iter().map(|_| Arc::default()).collect();
    let m = c.iter().zip(m).map(|(c, m)| c.watch(m)).collect();
    (c, m)
}

fn fast() -> SpeedLimits {
    SpeedLimits {
        min_bytes_per_sec: 1 << 30,
        max_bytes_per_sec: 1 << 30,
    }
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

/// Writes `data` at the start of region `r` (within it).
fn write_region(v: &Volume, r: u64, data: &[u8]) {
    assert!(data.len() as u64 <= REGION);
    v.write(r * REGION, data).unwrap();
}

/// Flips bytes of member `path` at data-area offset `at` (a torn write seen afterwards).
fn corrupt(path: &Path, at: u64, len: usize) {
    let m = member::open(&path_name(path), &member::OpenOptions::default()).unwrap();
    let mut buf = vec![0u8; len];
    let offset = ondisk::DATA_OFFSET_DEFAULT + at;
    m.read_at(&mut buf, offset).unwrap();
    buf.iter_mut().for_each(|b| *b ^= 0x5A);
    m.write_at(&buf, offset).unwrap();
    m.flush().unwrap();
}

#[test]
fn format_records_the_bitmap_and_old_readers_refuse_it() {
    let members: Vec<Arc<dyn Member>> = (0..4)
        .map(|_| member::open("mem:8M", &member::OpenOptions::default()).unwrap())
        .collect();
    let opts = CreateOptions::new(Level::Raid6, "bm");
    let written = create(&members, &opts).unwrap();
    let sb = &written[0];
    let at = sb.bitmap.expect("on by default for RAID 6");
    assert_eq!(at.offset_bytes, BITMAP_OFFSET);
    assert_eq!(at.bytes, 4096);
    assert_eq!(at.region_bytes, 64 << 20);
    assert_ne!(sb.feature_incompat & FEATURE_INCOMPAT_BITMAP, 0);
    assert_eq!(Superblock::decode(&sb.encode()), Ok(sb.clone()));
    // A bit the reader does not know is refused (what an older raidkit does with the bitmap's):
    // the first one past every bit this build knows.
    let unknown = (ondisk::FEATURE_INCOMPAT_KNOWN + 1).next_power_of_two();
    assert_eq!(unknown & ondisk::FEATURE_INCOMPAT_KNOWN, 0);
    let mut bytes = *sb.encode();
    bytes[24..32].copy_from_slice(&(sb.feature_incompat | unknown).to_le_bytes());
    let crc = ondisk::checksum(&bytes);
    bytes[SUPERBLOCK_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(
        Superblock::decode(&bytes),
        Err(SuperblockError::Features { unknown })
    );
    // The bitmap without its feature bit is invalid.
    let mut bytes = *sb.encode();
    bytes[24] &= !1;
    let crc = ondisk::checksum(&bytes);
    bytes[SUPERBLOCK_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(
        Superblock::decode(&bytes),
        Err(SuperblockError::Field {
            field: "bitmap",
            ..
        })
    ));
    // Off for linear and RAID 0, off on request, refused where it cannot fit.
    for level in [Level::Linear, Level::Raid0] {
        assert_eq!(CreateOptions::new(level, "x").bitmap_region_bytes, None);
    }
    let fresh = |n: usize| -> Vec<Arc<dyn Member>> {
        (0..n)
            .map(|_| member::open("mem:8M", &member::OpenOptions::default()).unwrap())
            .collect()
    };
    let mut off = CreateOptions::new(Level::Raid1, "off");
    off.bitmap_region_bytes = None;
    off.used_region_bytes = None;
    let sb = &create(&fresh(2), &off).unwrap()[0];
    assert_eq!((sb.bitmap, sb.feature_incompat & 1), (None, 0));
    let mut tight = CreateOptions::new(Level::Raid1, "tight");
    tight.data_offset_bytes = 8192;
    assert!(
        create(&fresh(2), &tight).is_err(),
        "no room before the data"
    );
    let mut linear = CreateOptions::new(Level::Linear, "lin");
    linear.bitmap_region_bytes = Some(1 << 20);
    assert!(
        create(&fresh(2), &linear).is_err(),
        "linear has nothing to resync"
    );
    let mut odd = CreateOptions::new(Level::Raid5, "odd");
    odd.bitmap_region_bytes = Some(3 << 20);
    assert!(create(&fresh(3), &odd).is_err(), "not a power of two");
}

fn durable_bit(m: &SimMember, region: u64) -> bool {
    let mut block = vec![0u8; 4096];
    m.read_durable(&mut block, BITMAP_OFFSET).unwrap();
    block[(region / 8) as usize] & (1 << (region % 8)) != 0
}

fn bits_durable_before_data(level: Level, count: usize) {
    let seed = seed();
    let sims: Vec<Arc<SimMember>> = (0..count)
        .map(|i| Arc::new(SimMember::new(&format!("sim{i}"), 4 << 20)))
        .collect();
    let plain: Vec<Arc<dyn Member>> = sims.iter().map(|s| s.clone() as _).collect();
    let mut opts = CreateOptions::new(level, "order");
    opts.chunk_bytes = 16 * KIB;
    opts.bitmap_region_bytes = Some(REGION);
    // The bitmap alone: with a used-regions map, a write-zeroes or trim of a region never
    // written reaches no member at all, and a region's first write zeroes it whole first.
    opts.used_region_bytes = None;
    create(&plain, &opts).unwrap();
    let all = Arc::new(Mutex::new(sims.clone()));
    let violations = Arc::new(AtomicU64::new(0));
    let data_writes = Arc::new(AtomicU64::new(0));
    let region = 3;
    let members: Vec<Arc<dyn Member>> = sims
        .iter()
        .map(|s| {
            // Every data-area write checks that the bit of `region` is durable on every member.
            let (all, violations, data_writes) =
                (all.clone(), violations.clone(), data_writes.clone());
            let check = move |call: &Call| {
                if call.changes_bytes() && call.offset >= ondisk::DATA_OFFSET_DEFAULT {
                    data_writes.fetch_add(1, Ordering::SeqCst);
                    let all = all.lock().unwrap();
                    if !all.iter().all(|m| durable_bit(m, region)) {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                }
                Ok(())
            };
            Arc::new(Hooked::new(s.clone() as Arc<dyn Member>, check)) as _
        })
        .collect();
    let v = open_volume(members);
    let data = pattern(100_000, seed);
    match seed % 3 {
        0 => v.write(region * REGION + 4096, &data).unwrap(),
        1 => v.write_zeroes(region * REGION, 100_000).unwrap(),
        _ => v.trim(region * REGION + 8192, REGION / 2).unwrap(),
    }
    assert!(data_writes.load(Ordering::SeqCst) > 0);
    assert_eq!(
        violations.load(Ordering::SeqCst),
        0,
        "{level}: a data write reached a member before the bit was durable (RAIDKIT_SEED={seed})"
    );
    // Power cut right after: the reassembled array knows region 3 is dirty.
    drop(v);
    let crashed: Vec<Arc<dyn Member>> = sims
        .iter()
        .enumerate()
        .map(|(i, s)| Arc::new(s.crash(seed + i as u64)) as _)
        .collect();
    let v = assemble(crashed, &AssembleOptions::default()).unwrap();
    let status = v.bitmap_status().unwrap();
    assert!(status.dirty_regions >= 1, "{level}: {status:?}");
    assert!(v.wait_idle(WAIT));
    assert!(v.check().unwrap().is_consistent());
}

#[test]
fn bits_are_durable_before_data_reaches_members() {
    bits_durable_before_data(Level::Raid5, 3);
    bits_durable_before_data(Level::Raid1, 2);
    bits_durable_before_data(Level::Raid10, 3);
    bits_durable_before_data(Level::Raid6, 4);
}

/// Writes two regions, "crashes" (drop without close), tears redundancy in a dirty region and
/// in a clean one; the resync repairs only the dirty regions, reading only their stripes.
fn crash_resyncs_dirty_regions(level: Level, count: usize) {
    let seed = seed();
    let what = format!("{level} x{count} RAIDKIT_SEED={seed}");
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array_with(dir.path(), "cr", level, count, Some(REGION));
    let model = {
        let v = open_volume(open_all(&paths));
        let model = pattern(v.size_bytes() as usize, seed);
        v.write(0, &model).unwrap();
        v.close().unwrap();
        assert_eq!(
            v.bitmap_status().unwrap().dirty_regions,
            0,
            "cleared at close"
        );
        let v2 = open_volume(open_all(&paths));
        write_region(&v2, 1, &model[REGION as usize..][..50_000]);
        write_region(&v2, 4, &model[4 * REGION as usize..][..50_000]);
        v2.flush().unwrap();
        assert_eq!(v2.bitmap_status().unwrap().dirty_regions, 2, "{what}");
        drop(v2);
        drop(v);
        model
    };
    // Torn redundancy: the last member's copy in region 1 (dirty) and in region 7 (clean).
    // Member offsets of a region: same rows on every member (see member_ranges).
    let g_rows = |r: u64| -> u64 {
        let per_row = match level {
            Level::Raid5 | Level::Raid6 => 64 * KIB * (count as u64 - level.parity_count() as u64),
            Level::Raid10 => 64 * KIB * count as u64 / 2,
            _ => 64 * KIB,
        };
        r * REGION / per_row * 64 * KIB
    };
    corrupt(&paths[count - 1], g_rows(1) + 64 * KIB, 4096);
    corrupt(&paths[count - 1], g_rows(7) + 64 * KIB, 4096);
    let (counters, members) = counted(&paths);
    let v = open_volume(members);
    assert_eq!(
        v.bitmap_status().unwrap().resync_pending_regions,
        2,
        "{what}"
    );
    assert!(v.wait_idle(WAIT), "{what}");
    let read: u64 = counters
        .iter()
        .map(|c| c.read_bytes.load(Ordering::SeqCst))
        .sum();
    let full = count as u64 * (v.geometry().member_data_bytes(0));
    assert!(
        read > 0 && read <= full / 4,
        "{what}: resync read {read} of {full} bytes"
    );
    assert_eq!(v.status().health, ArrayHealth::Active);
    assert_eq!(v.bitmap_status().unwrap().resync_pending_regions, 0);
    let check = v.check().unwrap();
    assert!(
        check.mismatch_count >= 1,
        "{what}: the clean region was not resynced"
    );
    for m in &check.mismatches {
        assert_eq!(
            m.array_offset / REGION,
            7,
            "{what}: only the clean region's damage is left: {check:?}"
        );
    }
    v.scrub(true).unwrap();
    assert!(v.wait_idle(WAIT));
    assert!(v.check().unwrap().is_consistent(), "{what}");
    // Bytes outside the damaged regions read as written (inside, a "torn" data block is
    // one of the versions a crash may leave: parity follows the data).
    let got = read_all(&v);
    for r in (0..v.size_bytes() / REGION).filter(|r| ![1, 7].contains(r)) {
        let range = (r * REGION) as usize..((r + 1) * REGION) as usize;
        assert!(got[range.clone()] == model[range], "{what}: region {r}");
    }
}

#[test]
fn crash_resyncs_only_dirty_regions() {
    crash_resyncs_dirty_regions(Level::Raid5, 3);
    crash_resyncs_dirty_regions(Level::Raid6, 4);
    crash_resyncs_dirty_regions(Level::Raid1, 2);
    crash_resyncs_dirty_regions(Level::Raid10, 3);
}

#[test]
fn without_a_bitmap_the_whole_array_is_resynced() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array_with(dir.path(), "nb", Level::Raid5, 3, None);
    {
        let v = open_volume(open_all(&paths));
        assert!(v.bitmap_status().is_none());
        let model = pattern(v.size_bytes() as usize, seed);
        v.write(0, &model).unwrap();
        v.flush().unwrap();
    }
    corrupt(&paths[2], 64 * KIB, 4096);
    corrupt(&paths[2], 2 << 20, 4096);
    let (counters, members) = counted(&paths);
    let v = open_volume(members);
    assert!(v.wait_idle(WAIT));
    let read: u64 = counters
        .iter()
        .map(|c| c.read_bytes.load(Ordering::SeqCst))
        .sum();
    let full = 3 * v.geometry().member_data_bytes(0);
    assert!(
        read >= full,
        "the full resync reads everything: {read} < {full}"
    );
    assert!(v.check().unwrap().is_consistent(), "RAIDKIT_SEED={seed}");
}

#[test]
fn mirror_reads_during_the_resync_return_one_copy() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array_with(dir.path(), "mr", Level::Raid1, 2, Some(REGION));
    let model = {
        let v = open_volume(open_all(&paths));
        let model = pattern(v.size_bytes() as usize, seed);
        v.write(0, &model).unwrap();
        v.close().unwrap();
        let v = open_volume(open_all(&paths));
        write_region(&v, 2, &model[2 * REGION as usize..][..10_000]);
        v.flush().unwrap();
        model
    };
    // The second copy of region 2 differs (a write that reached only member 0).
    corrupt(&paths[1], 2 * REGION, 64 * KIB as usize);
    // Crawling from the start: limits set after assembly could come after the resync ended.
    let crawl = AssembleOptions {
        speed_limits: SpeedLimits {
            min_bytes_per_sec: 1,
            max_bytes_per_sec: 1,
        },
        ..AssembleOptions::default()
    };
    let v = assemble(open_all(&paths), &crawl).unwrap();
    assert_eq!(v.status().health, ArrayHealth::Resyncing);
    let want = &model[2 * REGION as usize..][..64 * KIB as usize];
    for i in 0..20 {
        let mut got = vec![0u8; 64 * KIB as usize];
        v.read(2 * REGION, &mut got).unwrap();
        assert!(
            got == want,
            "read {i}: not the first copy (RAIDKIT_SEED={seed})"
        );
    }
    v.set_speed_limits(fast());
    assert!(v.wait_idle(WAIT));
    assert!(read_all(&v) == model);
    assert!(v.check().unwrap().is_consistent());
}

#[test]
fn lazy_clear_after_idle_and_not_while_a_write_is_in_flight() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array_with(dir.path(), "lc", Level::Raid5, 3, Some(REGION));
    let faulty: Vec<member::FaultyMember> = open_all(&paths)
        .into_iter()
        .map(member::FaultyMember::new)
        .collect();
    let controls: Vec<_> = faulty.iter().map(|f| f.control()).collect();
    let members: Vec<Arc<dyn Member>> = faulty.into_iter().map(|f| Arc::new(f) as _).collect();
    let v = Arc::new(open_volume(members));
    v.set_bitmap_idle(Duration::from_millis(200));
    v.write(0, &pattern(4096, seed)).unwrap();
    assert_eq!(v.bitmap_status().unwrap().dirty_regions, 1);
    let started = Instant::now();
    while v.bitmap_status().unwrap().dirty_regions > 0 {
        assert!(started.elapsed() < WAIT, "never cleared");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "cleared before idle"
    );
    for m in open_all(&paths) {
        let mut block = vec![0u8; 4096];
        m.read_at(&mut block, BITMAP_OFFSET).unwrap();
        assert_eq!(block[0], 0, "{}: the bit is clear on disk", m.name());
        assert!(read_superblock(m.as_ref()).unwrap().bitmap.is_some());
    }
    // A slow write (each member op takes 150 ms) stays in flight for well over the idle time.
    controls
        .iter()
        .for_each(|c| c.set_delay(Duration::from_millis(150)));
    let writer = {
        let v = v.clone();
        std::thread::spawn(move || v.write(REGION, &pattern(200_000, seed + 1)).unwrap())
    };
    std::thread::sleep(Duration::from_millis(100));
    let mut seen_set = false;
    while !writer.is_finished() {
        let dirty = v.bitmap_status().unwrap().dirty_regions;
        seen_set |= dirty == 1;
        if seen_set {
            assert_eq!(dirty, 1, "cleared while a write was in flight");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    writer.join().unwrap();
    assert!(seen_set);
    controls.iter().for_each(|c| c.set_delay(Duration::ZERO));
    assert!(v.check().unwrap().is_consistent());
}

#[test]
fn degraded_keeps_bits_and_a_returning_member_rebuilds_only_dirty_regions() {
    let seed = seed();
    let what = format!("RAIDKIT_SEED={seed}");
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array_with(dir.path(), "ra", Level::Raid5, 3, Some(REGION));
    let (counters, members) = counted(&paths);
    let v = open_volume(members.clone());
    v.set_bitmap_idle(Duration::from_millis(50));
    let mut model = pattern(v.size_bytes() as usize, seed);
    v.write(0, &model).unwrap();
    v.close().unwrap();
    v.fail(&path_name(&paths[2])).unwrap();
    let new = pattern(30_000, seed + 1);
    v.write(5 * REGION + 1000, &new).unwrap();
    model[(5 * REGION + 1000) as usize..][..new.len()].copy_from_slice(&new);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        v.bitmap_status().unwrap().dirty_regions,
        1,
        "{what}: kept while degraded"
    );
    counters[2].reset();
    v.add(members[2].clone()).unwrap();
    assert!(v.wait_idle(WAIT), "{what}");
    let rebuilt = counters[2].written_bytes.load(Ordering::SeqCst);
    let member_bytes = v.geometry().member_data_bytes(2);
    assert!(
        rebuilt > 0 && rebuilt <= member_bytes / 4,
        "{what}: re-add wrote {rebuilt} of {member_bytes} bytes"
    );
    let status = v.status();
    assert_eq!(status.members[2].state, MemberState::Active, "{what}");
    assert!(read_all(&v) == model, "{what}");
    assert!(v.check().unwrap().is_consistent(), "{what}");
    // The data on the returned member is right: read without another member.
    v.fail(&path_name(&paths[0])).unwrap();
    assert!(
        read_all(&v) == model,
        "{what}: degraded read through the returned member"
    );
}

#[test]
fn a_member_missing_at_assembly_comes_back_with_a_partial_rebuild() {
    let seed = seed();
    let what = format!("RAIDKIT_SEED={seed}");
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array_with(dir.path(), "ma", Level::Raid1, 2, Some(REGION));
    let mut model;
    {
        let v = open_volume(open_all(&paths));
        model = pattern(v.size_bytes() as usize, seed);
        v.write(0, &model).unwrap();
        v.close().unwrap();
    }
    {
        let v = open_volume(open_all(&paths[..1]));
        assert_eq!(v.status().health, ArrayHealth::Degraded);
        let new = pattern(10_000, seed + 2);
        v.write(3 * REGION, &new).unwrap();
        model[(3 * REGION) as usize..][..new.len()].copy_from_slice(&new);
        v.close().unwrap();
        assert_eq!(
            v.bitmap_status().unwrap().dirty_regions,
            1,
            "kept at a degraded close"
        );
    }
    let (counters, members) = counted(&paths);
    let v = open_volume(members);
    assert!(v.wait_idle(WAIT), "{what}");
    assert_eq!(v.status().members[1].state, MemberState::Active, "{what}");
    let rebuilt = counters[1].written_bytes.load(Ordering::SeqCst);
    assert!(
        rebuilt > 0 && rebuilt <= REGION,
        "{what}: rebuilt {rebuilt}"
    );
    v.fail(&path_name(&paths[0])).unwrap();
    assert!(read_all(&v) == model, "{what}");
}

#[test]
fn a_different_member_is_rebuilt_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array_with(dir.path(), "df", Level::Raid1, 2, Some(REGION));
    let spare = files(dir.path(), "blank", 1);
    let (counters, members) = counted(&[paths[0].clone(), spare[0].clone()]);
    let v = open_volume(vec![members[0].clone()]);
    v.write(0, &pattern(4096, 1)).unwrap();
    v.add(members[1].clone()).unwrap();
    assert!(v.wait_idle(WAIT));
    let full = v.geometry().member_data_bytes(1);
    assert!(counters[1].written_bytes.load(Ordering::SeqCst) >= full);
}

#[test]
fn a_damaged_bitmap_block_counts_as_all_dirty() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array_with(dir.path(), "dm", Level::Raid5, 3, Some(REGION));
    {
        let v = open_volume(open_all(&paths));
        v.write(0, &pattern(4096, 3)).unwrap();
        v.flush().unwrap();
    }
    let m = member::open(&path_name(&paths[1]), &member::OpenOptions::default()).unwrap();
    m.write_at(&[0xEE; 16], BITMAP_OFFSET + 100).unwrap();
    let v = open_volume(open_all(&paths));
    let status = v.bitmap_status().unwrap();
    assert_eq!(status.dirty_regions, status.regions, "{status:?}");
    assert!(v.wait_idle(WAIT));
    assert!(v.check().unwrap().is_consistent());
}

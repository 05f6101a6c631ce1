//! Writes to stripes whose parity is not known to be correct (issue 10, item 1).
//!
//! While an initial sync or a post-crash resync has not reached a stripe, that stripe's parity
//! may not match its data. A read-modify-write there keeps the mismatch
//! (P' = P ^ D_old ^ D_new), so after a member is lost its chunks of that stripe reconstruct
//! wrong — acknowledged writes lost. Each test here: members whose parity is wrong (old random
//! data under an initial sync; torn parity after a crash, with and without a write-intent
//! bitmap), a throttled sync part-way, seeded random partial-stripe writes, trims and
//! write-zeroes recorded in a model, then every member (RAID 5) or pair of members (RAID 6)
//! dropped in turn: every written byte must read back as the model says.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use engine::{Array, ArrayConfig};
use layout::{Geometry, Level};
use member::{Member, OpenOptions, Window};
use ondisk::{create, CreateOptions, Superblock};
use volume::{assemble, ArrayHealth, AssembleOptions, SpeedLimits, Volume};

const CHUNK: u64 = 16 << 10;
/// Random client operations per run.
const OPS: usize = 300;
/// How long the operations are spread over (the sync advances meanwhile).
const OPS_SPREAD: Duration = Duration::from_millis(600);

use testsupport::Rng;

/// How the parity of the array comes to be wrong before the client writes.
#[derive(Clone, Copy, Debug)]
enum Unsynced {
    /// Members full of old random data, created with an initial sync.
    InitialSync,
    /// A crash left torn parity: everything written and suspect (no bitmap) ...
    CrashResync,
    /// ... or only the regions the bitmap has dirty.
    CrashResyncBitmap,
}

/// 512 KiB/s per member: the sync is under way but far from finished while the client
/// writes (3 MiB per member: about 6 s for the whole sync, the writes take 0.6 s).
fn crawl() -> SpeedLimits {
    SpeedLimits {
        min_bytes_per_sec: 512 << 10,
        max_bytes_per_sec: 512 << 10,
    }
}

fn name(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

fn model_image(v: &Volume) -> Vec<u8> {
    let mut image = vec![0u8; v.size_bytes() as usize];
    v.read(0, &mut image).unwrap();
    image
}

/// Members full of old data, not cheap to zero (named like remote members): `create` records
/// an initial sync instead of zeroing them.
fn initial_sync_array(dir: &Path, level: Level, count: usize, seed: u64) -> Vec<PathBuf> {
    let paths = files(dir, "m", count);
    for (i, p) in paths.iter().enumerate() {
        let m = member::open(&name(p), &OpenOptions::default()).unwrap();
        m.write_at(&pattern(MEMBER_BYTES as usize, seed ^ (i as u64 + 1)), 0)
            .unwrap();
    }
    let mut opts = CreateOptions::new(level, "u");
    opts.chunk_bytes = CHUNK;
    opts.force = true;
    // Writes meeting stripes the initial sync has not reached: without a used-regions map
    // (with one, nothing is synced and a region's first write zeroes its stripes:
    // tests/used_map.rs, first_writes_over_members_holding_garbage_keep_stripes_consistent).
    opts.used_region_bytes = None;
    let written = create(&remote(&paths), &opts).unwrap();
    assert_eq!(written[0].resync_offset_bytes, Some(0), "no initial sync");
    paths
}

fn remote(paths: &[PathBuf]) -> Vec<Arc<dyn Member>> {
    open_all(paths)
        .into_iter()
        .enumerate()
        .map(|(i, m)| Wrapped::new(m, &format!("remote{i}")).member)
        .collect()
}

/// An array that crashed with torn parity: data written, then the parity of every stripe the
/// resync will visit (all of them, or those of the dirty regions) overwritten with garbage.
fn crashed_array(
    dir: &Path,
    level: Level,
    count: usize,
    bitmap: bool,
    rng: &mut Rng,
) -> Vec<PathBuf> {
    let region = 64 << 10;
    let bitmap_region = bitmap.then_some(region);
    let paths = new_array_with(dir, "m", level, count, bitmap_region);
    let v = assemble(open_all(&paths), &AssembleOptions::default()).unwrap();
    let size = v.size_bytes();
    // With a bitmap, every other region is written (dirty); the rest stays clean.
    let mut dirty = Vec::new();
    for r in 0..size.div_ceil(region) {
        if bitmap && r % 2 == 1 {
            continue;
        }
        let (lo, hi) = (r * region, ((r + 1) * region).min(size));
        v.write(lo, &pattern((hi - lo) as usize, rng.next_u64()))
            .unwrap();
        dirty.push((lo, hi));
    }
    v.flush().unwrap();
    drop(v); // no close: the superblocks say dirty, as after a crash
    let sb = read_sb(&paths[0]);
    assert_eq!(sb.state, ondisk::ArrayState::Dirty);
    let g = geometry(&sb);
    let sdb = g.stripe_data_bytes();
    let members = open_all(&paths);
    for stripe in 0..g.rows() {
        let (lo, hi) = (stripe * sdb, (stripe + 1) * sdb);
        if !dirty.iter().any(|&(a, b)| a < hi && lo < b) {
            continue;
        }
        for role in std::iter::once(g.p_role(stripe)).chain(g.q_role(stripe)) {
            let garbage = pattern(CHUNK as usize, rng.next_u64());
            let at = sb.data_offset_bytes + stripe * CHUNK;
            members[role].write_at(&garbage, at).unwrap();
        }
    }
    paths
}

fn geometry(sb: &Superblock) -> Geometry {
    let count = sb.member_count as usize;
    let sizes: Vec<u64> = (0..count).map(|r| sb.roles[r].data_bytes).collect();
    Geometry::new(sb.level, sb.chunk_bytes, &sizes).unwrap()
}

/// Random writes, trims and write-zeroes of 512 B .. 64 KiB spread over `OPS_SPREAD`,
/// recorded in `model`; `written[i]` marks the bytes a client wrote. With `fail_live`, role 0
/// fails half-way (the sync stops; later writes are degraded).
fn client_ops(v: &Volume, model: &mut [u8], written: &mut [bool], rng: &mut Rng, fail_live: bool) {
    let size = v.size_bytes();
    let start = Instant::now();
    for i in 0..OPS {
        if fail_live && i == OPS / 2 {
            v.fail_member(0);
        }
        let len = (1 + rng.below(128)) * 512;
        let offset = rng.below((size - len) / 512 + 1) * 512;
        let (lo, hi) = (offset as usize, (offset + len) as usize);
        match rng.below(10) {
            0 => {
                v.write_zeroes(offset, len).unwrap();
                model[lo..hi].fill(0);
            }
            1 => {
                v.trim(offset, len).unwrap();
                model[lo..hi].fill(0);
            }
            _ => {
                let data = pattern(len as usize, rng.next_u64());
                v.write(offset, &data).unwrap();
                model[lo..hi].copy_from_slice(&data);
            }
        }
        written[lo..hi].fill(true);
        let due = OPS_SPREAD * (i as u32 + 1) / OPS as u32;
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
}

/// The array over the members' data areas with `dropped` roles missing.
fn degraded(paths: &[PathBuf], dropped: &[usize]) -> Array {
    let sb = read_sb(&paths[0]);
    let count = sb.member_count as usize;
    let sizes: Vec<u64> = (0..count).map(|r| sb.roles[r].data_bytes).collect();
    let members = open_all(paths)
        .into_iter()
        .enumerate()
        .map(|(r, m)| {
            let window = Window::new(m, sb.data_offset_bytes, sizes[r]);
            (!dropped.contains(&r)).then(|| Arc::new(window) as Arc<dyn Member>)
        })
        .collect();
    let config = ArrayConfig {
        level: sb.level,
        chunk_bytes: sb.chunk_bytes,
        member_count: count,
        member_data_bytes: sizes,
    };
    Array::new(config, members).unwrap()
}

/// Every byte a client wrote reads back as the model says with `dropped` roles missing.
fn check_dropped(paths: &[PathBuf], dropped: &[usize], model: &[u8], written: &[bool]) {
    let array = degraded(paths, dropped);
    let mut got = vec![0u8; model.len()];
    array.read(0, &mut got).unwrap();
    let bad = (0..model.len()).find(|&i| written[i] && got[i] != model[i]);
    if let Some(at) = bad {
        let lost = (at..model.len())
            .filter(|&i| written[i] && got[i] != model[i])
            .count();
        let stripe = at as u64 / array.geometry().stripe_data_bytes();
        panic!(
            "members {dropped:?} dropped: acknowledged write lost at array byte {at} \
             (stripe {stripe}); {lost} written bytes from there read back wrong"
        );
    }
}

/// See the module docs. With `fail_live`, role 0 fails half-way through the writes and every
/// drop includes it (RAID 6: the writes made while degraded survive a second loss).
fn run(level: Level, count: usize, unsynced: Unsynced, fail_live: bool) {
    let seed = seed();
    eprintln!("{level} of {count}, {unsynced:?}, fail_live {fail_live}: RAIDKIT_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let (paths, members) = match unsynced {
        Unsynced::InitialSync => {
            let paths = initial_sync_array(dir.path(), level, count, seed);
            let members = remote(&paths);
            (paths, members)
        }
        Unsynced::CrashResync | Unsynced::CrashResyncBitmap => {
            let bitmap = matches!(unsynced, Unsynced::CrashResyncBitmap);
            let paths = crashed_array(dir.path(), level, count, bitmap, &mut rng);
            let members = open_all(&paths);
            (paths, members)
        }
    };
    let opts = AssembleOptions {
        speed_limits: crawl(),
        ..AssembleOptions::default()
    };
    let v = assemble(members, &opts).unwrap();
    assert_eq!(v.status().health, ArrayHealth::Resyncing);
    let mut model = model_image(&v);
    let mut written = vec![false; model.len()];
    client_ops(&v, &mut model, &mut written, &mut rng, fail_live);
    // The sync must still be part-way, or the writes did not meet unsynced stripes.
    let expected = match fail_live {
        true => ArrayHealth::Degraded,
        false => ArrayHealth::Resyncing,
    };
    assert_eq!(
        v.status().health,
        expected,
        "the sync finished before the writes did (RAIDKIT_SEED={seed})"
    );
    assert!(
        v.parity_sync_pending(),
        "the sync is over (RAIDKIT_SEED={seed})"
    );
    drop(v); // the server stops mid-sync; the members keep what was written
    let first = if fail_live { 0..1 } else { 0..count };
    for a in first {
        match level.parity_count() {
            1 => check_dropped(&paths, &[a], &model, &written),
            _ => (a + 1..count).for_each(|b| check_dropped(&paths, &[a, b], &model, &written)),
        }
    }
}

#[test]
fn raid5_writes_during_the_initial_sync_survive_any_member_loss() {
    run(Level::Raid5, 5, Unsynced::InitialSync, false);
}

#[test]
fn raid5_writes_degraded_during_the_initial_sync_read_back() {
    run(Level::Raid5, 5, Unsynced::InitialSync, true);
}

#[test]
fn raid6_writes_degraded_during_the_initial_sync_survive_a_second_loss() {
    run(Level::Raid6, 6, Unsynced::InitialSync, true);
}

#[test]
fn raid6_writes_degraded_during_a_resync_survive_a_second_loss() {
    run(Level::Raid6, 6, Unsynced::CrashResync, true);
}

#[test]
fn raid6_writes_during_the_initial_sync_survive_any_two_member_losses() {
    run(Level::Raid6, 6, Unsynced::InitialSync, false);
}

#[test]
fn raid5_writes_during_a_resync_after_a_crash_survive_any_member_loss() {
    run(Level::Raid5, 5, Unsynced::CrashResync, false);
}

#[test]
fn raid6_writes_during_a_resync_after_a_crash_survive_any_two_member_losses() {
    run(Level::Raid6, 6, Unsynced::CrashResync, false);
}

#[test]
fn raid5_writes_during_a_bitmap_resync_survive_any_member_loss() {
    run(Level::Raid5, 5, Unsynced::CrashResyncBitmap, false);
}

#[test]
fn raid6_writes_during_a_bitmap_resync_survive_any_two_member_losses() {
    run(Level::Raid6, 6, Unsynced::CrashResyncBitmap, false);
}

//! After the power loss: reassemble from the crashed images, let recovery run, and check what
//! the durability contract promises — flushed and FUA data reads back, redundancy is consistent,
//! and with members removed every byte still reads the same (no write hole).

use std::sync::Arc;

use member::{Member, SimRng};
use ondisk::ArrayState;
use volume::{assemble, AssembleOptions, Volume};

use crate::grid::sub_seed;
use crate::model::RegionModel;
use crate::rig::{freshest_state, read_all, Shape};

/// Reassembles `images`, recovers, and checks every promise; panics naming the violation.
pub fn recover_and_verify(
    shape: &Shape,
    images: Vec<Arc<dyn Member>>,
    models: &[RegionModel],
    seed: u64,
    context: &str,
) {
    recover_with(shape, images, None, models, seed, context, false);
}

/// [`recover_and_verify`], replaying `journal` (the crashed journal member; `true`: once the
/// resync is idle, else at once) if given,
/// optionally skipping the resync (to prove the checks catch it).
pub fn recover_with(
    shape: &Shape,
    images: Vec<Arc<dyn Member>>,
    journal: Option<(Arc<dyn Member>, bool)>,
    models: &[RegionModel],
    seed: u64,
    context: &str,
    skip_resync: bool,
) {
    if skip_resync {
        mark_clean(&images);
    }
    let state = freshest_state(&images);
    let volume = assemble(images.clone(), &AssembleOptions::default()).unwrap_or_else(|e| {
        panic!(
            "{context}: assembly after the power loss refused: {e}\n{}",
            describe_superblocks(&images)
        )
    });
    let volume = Arc::new(volume);
    let attached = journal.map(|(jm, after_resync)| {
        if after_resync {
            wait_recovered(&volume, context);
        }
        crate::with_journal::attach(&volume, jm, context)
    });
    wait_recovered(&volume, context);
    let image = read_all(&volume);
    for model in models {
        let region = &image[model.start() as usize..(model.start() + model.len()) as usize];
        if let Err(e) = model.check_after_crash(region) {
            panic!("{context}: recovered data wrong (array was {state:?}): {e}");
        }
    }
    if shape.redundant() {
        check_consistent(&volume, context, state);
        if seed.is_multiple_of(8) {
            scrub_clean(&volume, context);
        }
    }
    match &attached {
        Some(attached) => crate::with_journal::close(&volume, attached, context),
        None => volume
            .close()
            .unwrap_or_else(|e| panic!("{context}: close after recovery: {e}")),
    }
    drop(attached);
    drop(volume);
    // Every level, linear and RAID 0 included (they stayed dirty before 26486fa).
    let after = freshest_state(&images);
    assert_eq!(
        after,
        ArrayState::Clean,
        "{context}: not clean after recovery and close"
    );
    for removed in removal_sets(shape, seed) {
        check_degraded(&images, &removed, &image, context);
    }
}

/// Sabotage: rewrites every superblock as clean, as if the array had not marked itself dirty
/// before writing, so assembly starts no resync.
fn mark_clean(images: &[Arc<dyn Member>]) {
    for m in images {
        let mut sb = ondisk::read_superblock(m.as_ref()).expect("superblock");
        sb.state = ArrayState::Clean;
        m.write_at(&sb.encode()[..], ondisk::SUPERBLOCK_OFFSET)
            .and_then(|()| m.flush())
            .expect("rewrite superblock");
    }
}

/// One line per member: events, state and the role table's states (for failure messages).
pub fn describe_superblocks(images: &[Arc<dyn Member>]) -> String {
    let mut text = String::new();
    for m in images {
        match ondisk::read_superblock(m.as_ref()) {
            Ok(sb) => {
                let n = sb.member_count as usize;
                let roles: Vec<_> = sb.roles[..n].iter().map(|r| r.state).collect();
                text += &format!(
                    "  {}: role {:?} events {} {:?} resync {:?} recovery {:?} roles {roles:?}\n",
                    m.name(),
                    sb.role,
                    sb.events,
                    sb.state,
                    sb.resync_offset_bytes,
                    sb.recovery_offset_bytes
                );
            }
            Err(e) => text += &format!("  {}: {e}\n", m.name()),
        }
    }
    text
}

/// Most time recovery (the background resync of a tiny array) may take.
pub const RECOVERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Waits for the background work assembly started (the resync of a dirty array).
pub fn wait_recovered(volume: &Volume, context: &str) {
    assert!(
        volume.wait_idle(RECOVERY_TIMEOUT),
        "{context}: background recovery not finished after {RECOVERY_TIMEOUT:?}: {:?}",
        volume.status().task
    );
}

/// Parity and mirrors agree everywhere (a clean array must be consistent without a resync).
fn check_consistent(volume: &Volume, context: &str, state: ArrayState) {
    let report = volume
        .check()
        .unwrap_or_else(|e| panic!("{context}: check: {e}"));
    assert_eq!(report.units_skipped, 0, "{context}: check skipped units");
    assert!(
        report.mismatch_count == 0,
        "{context}: {} parity/mirror mismatches after recovery of a {state:?} array; first: {:?}",
        report.mismatch_count,
        report.mismatches.iter().take(4).collect::<Vec<_>>()
    );
}

/// The operator's scrub (background, through the volume) finds nothing either.
fn scrub_clean(volume: &Volume, context: &str) {
    volume
        .scrub(false)
        .unwrap_or_else(|e| panic!("{context}: start a scrub: {e}"));
    wait_recovered(volume, context);
    let report = volume.status().last_scrub;
    let report = report.unwrap_or_else(|| panic!("{context}: no scrub report after a scrub"));
    assert!(report.finished, "{context}: scrub not finished: {report:?}");
    assert_eq!(
        report.mismatches, 0,
        "{context}: scrub found mismatches: {report:?}"
    );
}

/// Which roles to remove, one set at a time: every single member for RAID 1/5/10; for RAID 6
/// every single member and up to four seeded pairs. None for linear and RAID 0.
pub fn removal_sets(shape: &Shape, seed: u64) -> Vec<Vec<usize>> {
    let n = shape.member_count();
    if !shape.level.has_redundancy() {
        return Vec::new();
    }
    let mut sets: Vec<Vec<usize>> = (0..n).map(|r| vec![r]).collect();
    if shape.level.parity_count() == 2 {
        let mut rng = SimRng::new(sub_seed(seed, 4_000));
        for _ in 0..4 {
            let a = rng.below(n as u64) as usize;
            let b = (a + 1 + rng.below(n as u64 - 1) as usize) % n;
            sets.push(vec![a.min(b), a.max(b)]);
        }
    }
    sets
}

/// Assembles without the `removed` roles and checks every byte equals the healthy `image`.
fn check_degraded(images: &[Arc<dyn Member>], removed: &[usize], image: &[u8], context: &str) {
    let subset: Vec<Arc<dyn Member>> = images
        .iter()
        .enumerate()
        .filter(|(role, _)| !removed.contains(role))
        .map(|(_, m)| Arc::clone(m))
        .collect();
    let volume = assemble(subset, &AssembleOptions::default()).unwrap_or_else(|e| {
        panic!("{context}: assembly without roles {removed:?} after recovery refused: {e}")
    });
    let degraded = read_all(&volume);
    if let Some(at) = degraded.iter().zip(image).position(|(a, b)| a != b) {
        panic!(
            "{context}: without roles {removed:?}, byte {at} reads {:#04x} but the healthy \
             array holds {:#04x} (write hole: redundancy disagreed with data)",
            degraded[at], image[at]
        );
    }
}

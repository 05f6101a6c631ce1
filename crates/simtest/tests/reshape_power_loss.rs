//! Power lost during an offline reshape (issue 15): `raidkit grow --add` on RAID 0 2→3, RAID 5
//! 3→4 and 4→6, RAID 6 4→5, and RAID 5 3→4 / RAID 6 4→5 resumed with a member missing, cut
//! just before a member operation of the grow (superblock writes, backup writes, flushes and
//! the end included), then grown again as a user does (the same call), and every byte of the
//! grown array checked, also with each member left out (`simtest::reshape_power_loss_case`).
//!
//! Every cut point of each seed's reshape runs when they are at most `CUT_POINTS_MAX`; past
//! that a seeded sample of them (always the first and last ones, where the record and the end
//! are written). Seeds: `RAIDKIT_SEED=S` replays one seed, `RAIDKIT_SIM_SEEDS=N` runs N; a
//! failure prints the replay command.

use simtest::{
    count_reshape_ops, reshape_power_loss_case, run_seeds, ReshapeSabotage, ReshapeShape, SeedRun,
};

/// Cut points run per seed and shape at most (a sample past it).
const CUT_POINTS_MAX: u64 = 400;

fn cut_points(ops: u64, seed: u64) -> Vec<u64> {
    if ops <= CUT_POINTS_MAX {
        return (0..ops).collect();
    }
    let mut rng = member::SimRng::new(simtest::sub_seed(seed, 6_000));
    let mut points: Vec<u64> = (0..16).chain(ops - 16..ops).collect();
    while (points.len() as u64) < CUT_POINTS_MAX {
        points.push(16 + rng.below(ops - 32));
    }
    points.sort_unstable();
    points.dedup();
    points
}

fn suite(test_name: &str, level: &str, from: usize, to: usize, degraded: bool, seeds: u64) {
    let level = level.parse().expect("level");
    run_seeds(
        "reshape_power_loss",
        test_name,
        SeedRun::from_env(seeds),
        |seed| {
            let mut shape = ReshapeShape::seeded(level, from, to, seed);
            if degraded {
                shape = shape.degraded(seed);
            }
            let count = count_reshape_ops(&shape, seed);
            let points = cut_points(count.ops, seed);
            eprintln!(
                "{test_name}: seed {seed} {shape:?}: {} member operations, {} cut points",
                count.ops,
                points.len()
            );
            for cut_at in points {
                reshape_power_loss_case(&shape, seed, cut_at, &count, ReshapeSabotage::None);
            }
        },
    );
}

#[test]
fn reshape_power_loss_raid0_2_to_3() {
    suite("reshape_power_loss_raid0_2_to_3", "raid0", 2, 3, false, 2);
}

#[test]
fn reshape_power_loss_raid5_3_to_4() {
    suite("reshape_power_loss_raid5_3_to_4", "raid5", 3, 4, false, 2);
}

#[test]
fn reshape_power_loss_raid5_4_to_6() {
    suite("reshape_power_loss_raid5_4_to_6", "raid5", 4, 6, false, 1);
}

#[test]
fn reshape_power_loss_raid6_4_to_5() {
    suite("reshape_power_loss_raid6_4_to_5", "raid6", 4, 5, false, 1);
}

#[test]
fn reshape_power_loss_raid5_3_to_4_resumed_degraded() {
    suite(
        "reshape_power_loss_raid5_3_to_4_resumed_degraded",
        "raid5",
        3,
        4,
        true,
        1,
    );
}

#[test]
fn reshape_power_loss_raid6_4_to_5_resumed_degraded() {
    suite(
        "reshape_power_loss_raid6_4_to_5_resumed_degraded",
        "raid6",
        4,
        5,
        true,
        1,
    );
}

/// The proof catches a reshape without its backup area: with every write to the backup areas
/// dropped (test-only sabotage in the simulated members), some cut in the critical section
/// loses bytes.
#[test]
fn reshape_power_loss_catches_a_missing_backup() {
    let level = "raid5".parse().expect("level");
    let seed = SeedRun::from_env(1).first;
    let shape = ReshapeShape::seeded(level, 3, 4, seed);
    let count = count_reshape_ops(&shape, seed);
    let sabotage = ReshapeSabotage::NoBackup {
        offset: count.backup_offset_bytes,
        bytes: count.backup_bytes,
    };
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let failed = cut_points(count.ops, seed)
        .into_iter()
        .filter(|&cut_at| {
            std::panic::catch_unwind(|| {
                reshape_power_loss_case(&shape, seed, cut_at, &count, sabotage)
            })
            .is_err()
        })
        .count();
    std::panic::set_hook(hook);
    assert!(
        failed > 0,
        "seed {seed}: no cut failed with the backup area disabled: the proof cannot see a \
         missing backup"
    );
    eprintln!("seed {seed}: {failed} cut points lose data without the backup area");
}

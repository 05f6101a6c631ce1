//! Degraded reconstruction: after random data is written to a healthy array, every single and
//! double missing-member combination the level survives reads back exactly the model, both with
//! the members missing from the start and failed on a running array.

mod common;

use common::*;
use engine::Level;

fn combinations(n: usize, max: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = (0..n).map(|a| vec![a]).collect();
    if max >= 2 {
        for a in 0..n {
            for b in a + 1..n {
                out.push(vec![a, b]);
            }
        }
    }
    out
}

#[test]
fn every_single_and_double_missing_combination_reads_the_model() {
    for seed in seeds() {
        with_seed(
            "every_single_and_double_missing_combination_reads_the_model",
            seed,
            |rng| {
                for level in [Level::Raid1, Level::Raid10, Level::Raid5, Level::Raid6] {
                    for n in level.min_members()..=8 {
                        check_level(level, n, rng);
                    }
                }
            },
        );
    }
}

fn check_level(level: Level, n: usize, rng: &mut Rng) {
    let chunk = 4 * KIB;
    let members = mem_members(&member_sizes(n, chunk, 6));
    let healthy = array_over(level, chunk, &members, &[]);
    let mut model = vec![0u8; healthy.size_bytes() as usize];
    rng.fill(&mut model);
    // Leave a hole of zeroes made by trim, so rebuilt zero ranges are covered too.
    let hole = healthy.size_bytes() / 3;
    healthy.write(0, &model).expect("write");
    healthy.trim(hole, chunk * 3 + 100).expect("trim");
    model[hole as usize..(hole + chunk * 3 + 100) as usize].fill(0);
    let geometry = healthy.geometry().clone();
    for missing in combinations(n, level.max_missing(n).min(2)) {
        let present: Vec<bool> = (0..n).map(|r| !missing.contains(&r)).collect();
        if !geometry.survives(&present) {
            continue;
        }
        let what = format!("{level} n={n} missing {missing:?}");
        let array = array_over(level, chunk, &members, &missing);
        assert_reads(&array, &model, 0, array.size_bytes(), &what);
        let offset = rng.below(array.size_bytes() - 1);
        let len = 1 + rng.below(array.size_bytes() - offset);
        assert_reads(&array, &model, offset, len, &what);
        let failing = array_over(level, chunk, &members, &[]);
        for &role in &missing {
            failing.fail_member(role);
        }
        assert_reads(
            &failing,
            &model,
            0,
            failing.size_bytes(),
            &format!("{what} (failed)"),
        );
    }
}

#[test]
fn degraded_writes_are_readable_after_losing_another_member() {
    // RAID 6 missing one member keeps one member of redundancy: writes made while degraded
    // must survive the loss of any further member.
    for seed in seeds() {
        with_seed(
            "degraded_writes_are_readable_after_losing_another_member",
            seed,
            |rng| {
                for n in 4..=6 {
                    let chunk = 4 * KIB;
                    let members = mem_members(&member_sizes(n, chunk, 6));
                    let first = rng.below(n as u64) as usize;
                    let array = array_over(Level::Raid6, chunk, &members, &[first]);
                    let mut model = vec![0u8; array.size_bytes() as usize];
                    for _ in 0..30 {
                        let (offset, data) = random_write(&array, rng, 5 * chunk);
                        model[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
                    }
                    for second in (0..n).filter(|&r| r != first) {
                        let twice = array_over(Level::Raid6, chunk, &members, &[first, second]);
                        let what = format!("raid6 n={n} missing {first} then {second}");
                        assert_reads(&twice, &model, 0, twice.size_bytes(), &what);
                    }
                }
            },
        );
    }
}

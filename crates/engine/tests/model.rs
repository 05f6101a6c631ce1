//! The array against a reference model (a flat byte image): seeded random reads, writes,
//! flushes, trims and write-zeroes at random offsets and lengths (unaligned, chunk-crossing,
//! stripe-crossing, whole-array), for every level, member counts from the minimum to 8, chunk
//! sizes 4 KiB, 64 KiB and 1 MiB; healthy, with members missing from the start, and with
//! members failed in the middle of the sequence. After every write the written range (with a
//! margin) reads back as the model; reads compare directly; at the end (and at each failure)
//! the whole array is compared, and a healthy array must pass `check()`.
//!
//! Replay: `RAIDKIT_SEED=<seed> cargo test --release -p engine --test model <level test>`.

mod common;

use common::*;
use engine::{Array, Level};

#[derive(Clone, Debug)]
enum Scenario {
    Healthy,
    MissingFromStart(Vec<usize>),
    FailMidway(Vec<usize>),
}

/// (rows per member, operations) per chunk size: fewer, larger steps for large chunks.
fn shape(chunk: u64) -> (u64, usize) {
    match chunk {
        c if c <= 4 * KIB => (24, 40),
        c if c <= 64 * KIB => (6, 16),
        _ => (3, 6),
    }
}

fn random_range(rng: &mut Rng, array: &Array) -> (u64, u64) {
    let size = array.size_bytes();
    let chunk = array.geometry().chunk_bytes();
    let stripe = chunk * array.geometry().member_count() as u64;
    let max_len = match rng.below(20) {
        0 => return (0, size), // whole array
        1..=8 => 3 * chunk,    // within or across a few chunks
        9..=12 => 64,          // tiny, unaligned
        _ => 2 * stripe + chunk,
    };
    let mut offset = rng.below(size);
    if rng.below(3) == 0 {
        offset -= offset % chunk; // aligned start
    }
    let len = 1 + rng.below(max_len.min(size - offset));
    (offset, len)
}

fn step(rng: &mut Rng, array: &Array, model: &mut [u8], what: &str) {
    let (offset, len) = random_range(rng, array);
    let (o, l) = (offset as usize, len as usize);
    match rng.below(10) {
        0..=2 => assert_reads(array, model, offset, len, what),
        3..=6 => {
            let mut data = vec![0u8; l];
            rng.fill(&mut data);
            array.write(offset, &data).expect("write");
            model[o..o + l].copy_from_slice(&data);
        }
        7 => {
            array.trim(offset, len).expect("trim");
            model[o..o + l].fill(0);
        }
        8 => {
            array.write_zeroes(offset, len).expect("write_zeroes");
            model[o..o + l].fill(0);
        }
        _ => array.flush().expect("flush"),
    }
    let chunk = array.geometry().chunk_bytes();
    let from = offset.saturating_sub(chunk);
    let to = (offset + len + chunk).min(array.size_bytes());
    assert_reads(array, model, from, to - from, what);
}

fn run(level: Level, n: usize, chunk: u64, scenario: &Scenario, backing: Backing, rng: &mut Rng) {
    let (rows, ops) = shape(chunk);
    let backed = backed_members(backing, &member_sizes(n, chunk, rows));
    let members = &backed.members;
    let missing = match scenario {
        Scenario::MissingFromStart(set) => set.clone(),
        _ => Vec::new(),
    };
    let array = array_over(level, chunk, members, &missing);
    if rng.below(2) == 0 {
        array.set_fanout_min_bytes(0); // exercise the parallel member I/O path too
    }
    let mut model = vec![0u8; array.size_bytes() as usize];
    let what = format!("{level} n={n} chunk={chunk} {scenario:?} {backing:?}");
    for i in 0..ops {
        if i == ops / 2 {
            if let Scenario::FailMidway(set) = scenario {
                for &role in set {
                    array.fail_member(role);
                }
                assert_reads(&array, &model, 0, array.size_bytes(), &what);
            }
        }
        step(rng, &array, &mut model, &format!("{what} step {i}"));
    }
    assert_reads(&array, &model, 0, array.size_bytes(), &what);
    if matches!(scenario, Scenario::Healthy) {
        let report = array.check().expect("check");
        assert!(report.is_consistent(), "{what}: {report:?}");
    }
}

/// Every member count, chunk size and scenario of `level`, on each member backing of the test
/// matrix ([`backings`]: RAM, and files whose batches go through io_uring or positional calls).
/// A backing that uses the ring must have sent operations through it.
fn level_matrix(level: Level) {
    for backing in backings() {
        let ring_before = member::uring::thread_ring_ops();
        for seed in seeds() {
            with_seed(&format!("{level} {backing:?}"), seed, |rng| {
                for n in level.min_members()..=8 {
                    for chunk in [4 * KIB, 64 * KIB, MIB] {
                        let (rows, _) = shape(chunk);
                        let sizes = member_sizes(n, chunk, rows);
                        let geometry =
                            engine::Geometry::new(level, chunk, &sizes).expect("geometry");
                        let mut scenarios = vec![Scenario::Healthy];
                        for set in missing_sets(&geometry, rng, 1) {
                            scenarios.push(Scenario::MissingFromStart(set.clone()));
                            scenarios.push(Scenario::FailMidway(set));
                        }
                        for scenario in &scenarios {
                            run(level, n, chunk, scenario, backing, rng);
                        }
                    }
                }
            });
        }
        if backing.uses_ring() {
            assert!(
                member::uring::thread_ring_ops() > ring_before,
                "{level} {backing:?}: no operation went through io_uring"
            );
        }
    }
}

#[test]
fn linear() {
    level_matrix(Level::Linear);
}
#[test]
fn raid0() {
    level_matrix(Level::Raid0);
}
#[test]
fn raid1() {
    level_matrix(Level::Raid1);
}
#[test]
fn raid10() {
    level_matrix(Level::Raid10);
}
#[test]
fn raid5() {
    level_matrix(Level::Raid5);
}
#[test]
fn raid6() {
    level_matrix(Level::Raid6);
}

#[test]
fn too_many_missing_is_refused() {
    let members = mem_members(&member_sizes(4, 4 * KIB, 4));
    let sizes: Vec<u64> = members.iter().map(|m| m.len()).collect();
    for (level, missing) in [
        (Level::Raid0, vec![1]),
        (Level::Linear, vec![0]),
        (Level::Raid5, vec![0, 2]),
        (Level::Raid10, vec![0, 1]),
    ] {
        let slots = members
            .iter()
            .enumerate()
            .map(|(r, m)| (!missing.contains(&r)).then(|| m.clone()))
            .collect();
        let err = Array::new(config(level, 4 * KIB, &sizes), slots).unwrap_err();
        assert!(err.to_string().contains("cannot run"), "{level}: {err}");
    }
}

#[test]
fn failing_beyond_redundancy_fails_the_array() {
    let members = mem_members(&member_sizes(3, 4 * KIB, 4));
    let array = array_over(Level::Raid5, 4 * KIB, &members, &[]);
    array.fail_member(0);
    let mut buf = [0u8; 10];
    array.read(100, &mut buf).expect("one missing is fine");
    array.fail_member(2);
    let err = array.read(100, &mut buf).unwrap_err();
    assert!(matches!(err, engine::IoError::ArrayFailed { .. }), "{err}");
    assert!(err.to_string().contains("array failed"), "{err}");
    assert!(array.write(0, &buf).is_err());
}

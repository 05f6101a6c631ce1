//! Fault handling against `member::FaultyMember` (seeded injected faults): random read errors
//! under a random workload, a latent bad range, and a member that vanishes mid-run — with the
//! data checked against a model throughout.

mod common;

use common::*;
use engine::{Level, MemberHealth};
use member::{FaultControl, FaultRule, FaultyMember, MemMember, Member};
use std::sync::Arc;

fn faulty_array(
    level: Level,
    n: usize,
    chunk: u64,
    rows: u64,
    seed: u64,
) -> (Vec<FaultControl>, engine::Array) {
    let mut controls = Vec::new();
    let members: Vec<Arc<dyn Member>> = (0..n)
        .map(|i| {
            let inner: Arc<dyn Member> =
                Arc::new(MemMember::new(&format!("m{i}"), rows * chunk).unwrap());
            let faulty = FaultyMember::with_seed(inner, seed.wrapping_add(i as u64));
            controls.push(faulty.control());
            Arc::new(faulty) as Arc<dyn Member>
        })
        .collect();
    (controls, array_over(level, chunk, &members, &[]))
}

fn random_ops(array: &engine::Array, model: &mut [u8], rng: &mut Rng, count: usize) {
    for _ in 0..count {
        random_op(array, model, rng, 50_000);
    }
}

#[test]
fn random_read_errors_vanishing_member_and_bad_range() {
    for_each_seed("random_read_errors_vanishing_member_and_bad_range", |rng| {
        for (level, n) in REDUNDANT_SMALLEST {
            let chunk = 8 * KIB;
            let (controls, array) = faulty_array(level, n, chunk, 32, rng.next_u64());
            let mut model = vec![0u8; array.size_bytes() as usize];
            random_ops(&array, &mut model, rng, 50);
            // 2 % of reads fail on one member: repaired, never surfaced.
            let flaky = rng.below(n as u64) as usize;
            controls[flaky].fail_reads(FaultRule::Probability {
                per_million: 20_000,
            });
            random_ops(&array, &mut model, rng, 400);
            controls[flaky].heal();
            // A latent bad range on another member: reads there fail every time.
            let bad = (flaky + 1) % n;
            controls[bad].fail_reads(FaultRule::Range {
                offset: 4 * chunk,
                len: 4096,
            });
            assert_reads(&array, &model, 0, model.len() as u64, "bad range");
            random_ops(&array, &mut model, rng, 50);
            controls[bad].heal();
            // One member vanishes (everything fails): it is failed out, data stays.
            let gone = rng.below(n as u64) as usize;
            if array.health_of(gone) == MemberHealth::InSync {
                let others_ok = (0..n)
                    .filter(|&r| r != gone)
                    .all(|r| array.health_of(r) == MemberHealth::InSync);
                if others_ok {
                    controls[gone].vanish();
                    random_ops(&array, &mut model, rng, 200);
                    assert_eq!(array.health_of(gone), MemberHealth::Faulty, "{level}");
                }
            }
            assert_reads(&array, &model, 0, model.len() as u64, "final");
        }
    });
}

/// A replacement whose write fails is dropped the same way whoever saw the error — a client
/// write repeated on it or a copy step: the role keeps its member, the fault is recorded, and
/// the state epoch moves, which is what makes the volume rewrite the superblocks (dropping the
/// replace) before the request completes. (The copy-step path used to skip the epoch.)
#[test]
fn a_failed_replacement_is_dropped_and_the_epoch_moves_whoever_saw_the_error() {
    let chunk = 8 * KIB;
    for via_client_write in [false, true] {
        let (_controls, array) = faulty_array(Level::Raid5, 3, chunk, 16, 1);
        let size = array.geometry().member_data_bytes(1);
        let inner: Arc<dyn Member> = Arc::new(MemMember::new("new", size).unwrap());
        let new = FaultyMember::with_seed(inner, 7);
        let control = new.control();
        array.start_replace(1, Arc::new(new)).unwrap();
        assert!(array.replace_step(1, 0, chunk).unwrap());
        control.fail_writes(FaultRule::Always);
        let epoch = array.state_epoch();
        if via_client_write {
            array.write(0, &vec![7u8; 3 * chunk as usize]).unwrap();
        } else {
            assert!(!array.replace_step(1, chunk, chunk).unwrap());
        }
        let how = if via_client_write {
            "client write"
        } else {
            "copy step"
        };
        assert!(array.replacement(1).is_none(), "{how}: replacement kept");
        assert!(array.state_epoch() > epoch, "{how}: the epoch did not move");
        assert_eq!(array.health_of(1), MemberHealth::InSync, "{how}");
        let fault = array.fault_stats(1).last_fault.unwrap_or_default();
        assert!(fault.contains("replacement new"), "{how}: {fault:?}");
    }
}

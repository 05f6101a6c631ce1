//! `check()`: consistent after random writes on a healthy array; finds a byte corrupted
//! directly on a member (data, P, Q or mirror copy) at the right stripe / chunk and member.

mod common;

use common::*;
use engine::{Level, MismatchKind};
use layout::Slot;
use std::sync::Arc;

fn filled_array(
    level: Level,
    n: usize,
    rng: &mut Rng,
) -> (engine::Array, Vec<Arc<dyn member::Member>>) {
    let chunk = 4 * KIB;
    let members = mem_members(&member_sizes(n, chunk, 8));
    let array = array_over(level, chunk, &members, &[]);
    let mut data = vec![0u8; array.size_bytes() as usize];
    rng.fill(&mut data);
    array.write(0, &data).expect("write");
    for _ in 0..20 {
        random_write(&array, rng, 3 * chunk);
    }
    (array, members)
}

/// For every seed and every `(level, members)` case: an array filled with random writes, checked
/// consistent, then handed to `test`.
fn each_filled_array(
    name: &str,
    cases: [(Level, usize); 4],
    mut test: impl FnMut(&mut Rng, Level, usize, &engine::Array, &[Arc<dyn member::Member>]),
) {
    each_case(name, &cases, |rng, level, n| {
        let (array, members) = filled_array(level, n, rng);
        assert!(
            array.check().expect("check").is_consistent(),
            "{level} n={n}"
        );
        test(rng, level, n, &array, &members);
    });
}

fn corrupt(member: &dyn member::Member, offset: u64) {
    let mut byte = [0u8; 1];
    member.read_at(&mut byte, offset).expect("read");
    byte[0] ^= 0x5a;
    member.write_at(&byte, offset).expect("write");
}

#[test]
fn parity_corruption_is_found_at_its_stripe() {
    let cases = [
        (Level::Raid5, 3),
        (Level::Raid5, 5),
        (Level::Raid6, 4),
        (Level::Raid6, 7),
    ];
    each_filled_array(
        "parity_corruption_is_found_at_its_stripe",
        cases,
        |rng, level, n, array, members| {
            let g = array.geometry().clone();
            let stripe = rng.below(g.rows());
            let role = rng.below(n as u64) as usize;
            let member_offset = stripe * g.chunk_bytes() + rng.below(g.chunk_bytes());
            corrupt(&*members[role], member_offset);
            let report = array.check().expect("check");
            assert!(!report.is_consistent(), "{level} n={n}: corruption missed");
            assert!(
                report.mismatches.iter().all(|m| m.unit == stripe),
                "{report:?}"
            );
            let expected: Vec<MismatchKind> = match (g.slot_of(stripe, role), level) {
                (Slot::P, _) => vec![MismatchKind::P],
                (Slot::Q, _) => vec![MismatchKind::Q],
                (Slot::Data(_), Level::Raid5) => vec![MismatchKind::P],
                (Slot::Data(_), _) => vec![MismatchKind::P, MismatchKind::Q],
            };
            let kinds: Vec<MismatchKind> = report.mismatches.iter().map(|m| m.kind).collect();
            assert_eq!(kinds, expected, "{level} n={n} role {role} stripe {stripe}");
            for m in &report.mismatches {
                assert_eq!(m.member_offset, member_offset, "{m:?}");
            }
            assert_eq!(report.units_checked, g.rows());
        },
    );
}

#[test]
fn mirror_corruption_is_found_at_its_chunk() {
    let cases = [
        (Level::Raid1, 2),
        (Level::Raid1, 4),
        (Level::Raid10, 3),
        (Level::Raid10, 4),
    ];
    each_filled_array(
        "mirror_corruption_is_found_at_its_chunk",
        cases,
        |rng, level, n, array, members| {
            let g = array.geometry().clone();
            let chunk = rng.below(g.logical_chunk_count());
            let copies = g.chunk_copies(chunk);
            let victim = copies[1 + rng.below(copies.len() as u64 - 1) as usize];
            let within = rng.below(g.chunk_bytes());
            corrupt(&*members[victim.role], victim.member_offset + within);
            let report = array.check().expect("check");
            assert_eq!(report.mismatch_count, 1, "{level} n={n}: {report:?}");
            let m = report.mismatches[0];
            assert_eq!(
                (m.unit, m.kind, m.role),
                (chunk, MismatchKind::Mirror, victim.role)
            );
            assert_eq!(m.member_offset, victim.member_offset + within);
        },
    );
}

//! Differential tests: every kernel this CPU can run against the scalar reference, on random
//! data, random lengths (tiny, unaligned to 16/32/64, and several vectors long) and 1..=16 data
//! blocks, plus every recovery case. Seeded: RAIDKIT_SEED replays a run.

mod common;

use common::check::{self, Impl, SCALAR};
use common::{with_seed, Rng};
use parity::Kernel;

/// Lengths that hit every loop of a kernel: tail only, one vector, unrolled steps plus tails.
fn random_len(rng: &mut Rng) -> usize {
    match rng.range(0, 3) {
        0 => rng.range(0, 70),
        1 => rng.range(1, 8) * 64 + rng.range(0, 2) * rng.range(1, 63),
        2 => rng.range(200, 1100),
        _ => rng.range(4096, 4096 + 300),
    }
}

fn kernels() -> Vec<Impl> {
    let available = Kernel::available();
    eprintln!(
        "kernels under test: {available:?}; dispatch picks {:?}",
        Kernel::best()
    );
    available.into_iter().map(Impl::Kernel).collect()
}

#[test]
fn generation_matches_reference() {
    with_seed("generation_matches_reference", |rng| {
        for imp in kernels() {
            for n in 1..=16 {
                for _ in 0..3 {
                    let len = random_len(rng);
                    check::check_generation(imp, rng, n, len);
                }
            }
        }
    });
}

#[test]
fn xor_and_update_match_reference() {
    with_seed("xor_and_update_match_reference", |rng| {
        for imp in kernels() {
            for n in 1..=16 {
                let len = random_len(rng).max(1);
                check::check_update(imp, rng, n, len);
                let mut got = rng.bytes(len);
                let mut want = got.clone();
                let src = rng.bytes(len);
                imp.xor_into(&mut got, &src);
                SCALAR.xor_into(&mut want, &src);
                assert!(got == want, "{}: xor_into len={len}", imp.name());
            }
        }
    });
}

#[test]
fn every_loss_is_recovered_by_every_kernel() {
    with_seed("every_loss_is_recovered_by_every_kernel", |rng| {
        for imp in kernels() {
            for n in 1..=16 {
                let len = random_len(rng);
                check::check_all_losses(imp, rng, n, len.min(1100));
            }
        }
    });
}

#[test]
fn the_largest_stripe_is_recovered() {
    with_seed("the_largest_stripe_is_recovered", |rng| {
        let n = parity::MAX_DATA_BLOCKS;
        let stripe = check::random_stripe(rng, n, 200);
        for imp in kernels() {
            for lost in [
                vec![0, n - 1],
                vec![n - 2, n - 1],
                vec![n - 1, n],
                vec![n - 1, n + 1],
            ] {
                check::check_reconstruct(imp, rng, &stripe, true, &lost);
            }
        }
    });
}

#[test]
fn many_sources_spill_from_the_stack_correctly() {
    with_seed("many_sources_spill_from_the_stack_correctly", |rng| {
        for imp in kernels() {
            for n in [31, 32, 33, 64, parity::MAX_DATA_BLOCKS] {
                let len = random_len(rng).min(700);
                check::check_generation(imp, rng, n, len);
                check::check_update(imp, rng, n, len.max(1));
            }
        }
    });
}

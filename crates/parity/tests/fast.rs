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

/// Every output lives inside a larger buffer at a random misalignment, surrounded by guard
/// bytes; after each operation the guards must be untouched (no kernel writes outside a block,
/// e.g. through a wrong mask or step bound) and the result must match the reference.
#[test]
fn writes_stay_inside_the_blocks() {
    const GUARD: usize = 128;
    with_seed("writes_stay_inside_the_blocks", |rng| {
        for imp in kernels() {
            for _ in 0..40 {
                let (n, len) = (rng.range(1, 8), random_len(rng).min(2000));
                let stripe = check::random_stripe(rng, n, len);
                let mut outer: Vec<Vec<u8>> =
                    (0..n + 2).map(|_| rng.bytes(len + 2 * GUARD)).collect();
                let starts: Vec<usize> = (0..n + 2).map(|_| rng.range(1, GUARD)).collect();
                let guards = outer.clone();
                for ((buf, start), block) in outer.iter_mut().zip(&starts).zip(&stripe) {
                    buf[*start..*start + len].copy_from_slice(block);
                }
                let lost = [rng.range(0, n + 1), rng.range(0, n + 1)];
                let lost: &[usize] = if lost[0] == lost[1] {
                    &lost[..1]
                } else {
                    &lost
                };
                for &index in lost {
                    rng.fill(&mut outer[index][starts[index]..starts[index] + len]);
                }
                let mut refs: Vec<&mut [u8]> = outer
                    .iter_mut()
                    .zip(&starts)
                    .map(|(buf, &start)| &mut buf[start..start + len])
                    .collect();
                imp.reconstruct(&mut refs, true, lost);
                for (i, buf) in outer.iter().enumerate() {
                    let (start, end) = (starts[i], starts[i] + len);
                    assert!(
                        buf[start..end] == stripe[i],
                        "{}: block {i} wrong, lost={lost:?}",
                        imp.name()
                    );
                    assert!(
                        buf[..start] == guards[i][..start],
                        "{}: wrote before block {i}",
                        imp.name()
                    );
                    assert!(
                        buf[end..] == guards[i][end..],
                        "{}: wrote after block {i}",
                        imp.name()
                    );
                }
            }
        }
    });
}

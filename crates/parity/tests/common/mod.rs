//! Seeded randomness for the parity tests: `RAIDKIT_SEED=<n>` replays a run.

#![allow(dead_code)]

pub mod check;

pub use testsupport::Rng;

pub use testsupport::seed;

/// Runs `body` with a seeded RNG; on panic, names the seed that replays it.
pub fn with_seed(test: &str, body: impl FnOnce(&mut Rng)) {
    let seed = seed(test);
    let mut rng = Rng::new(seed);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut rng)));
    if let Err(panic) = result {
        eprintln!("{test} FAILED; replay with RAIDKIT_SEED={seed}");
        std::panic::resume_unwind(panic);
    }
}

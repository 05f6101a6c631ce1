//! Which seeds a simulation test runs, and how a failure names its replay command.
//!
//! `RAIDKIT_SEED=S` alone replays exactly the case with seed `S`. Otherwise the base seed comes
//! from `RAIDKIT_SEED` or the clock and `RAIDKIT_SIM_SEEDS` cases run (`base`, `base + 1`, …);
//! `RAIDKIT_SOAK=1` multiplies the default count by [`SOAK_FACTOR`].

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// How many times more seeds run under `RAIDKIT_SOAK=1`.
pub const SOAK_FACTOR: u64 = 20;

/// A run of consecutive seeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeedRun {
    pub first: u64,
    pub count: u64,
}

fn env_u64(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    match text.trim().parse() {
        Ok(v) => Some(v),
        Err(_) => panic!("{name}={text:?} is not a non-negative integer"),
    }
}

fn clock_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos % 1_000_000_007
}

impl SeedRun {
    /// The seeds to run for a test whose CI default is `default_count` cases.
    pub fn from_env(default_count: u64) -> SeedRun {
        assert!(default_count > 0);
        let seed = env_u64("RAIDKIT_SEED");
        let count = env_u64("RAIDKIT_SIM_SEEDS");
        let soak = std::env::var("RAIDKIT_SOAK").is_ok_and(|v| v == "1");
        let count = match (seed, count) {
            (Some(_), None) => 1,
            (_, Some(n)) => n.max(1),
            (None, None) if soak => default_count * SOAK_FACTOR,
            (None, None) => default_count,
        };
        SeedRun {
            first: seed.unwrap_or_else(clock_seed),
            count,
        }
    }
}

/// Runs `case(seed)` for every seed of `run`. On the first failure (a panic) prints the seed
/// and the exact command that replays it, then fails the test with the same panic.
pub fn run_seeds(test_file: &str, test_name: &str, run: SeedRun, mut case: impl FnMut(u64)) {
    eprintln!(
        "{test_name}: seeds {}..{} (RAIDKIT_SEED={} RAIDKIT_SIM_SEEDS={})",
        run.first,
        run.first + run.count,
        run.first,
        run.count
    );
    for seed in run.first..run.first + run.count {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| case(seed))) {
            eprintln!(
                "{test_name} FAILED with seed {seed}; replay: RAIDKIT_SEED={seed} cargo test \
                 --release -p simtest --test {test_file} -- --exact {test_name} --nocapture"
            );
            resume_unwind(panic);
        }
    }
}

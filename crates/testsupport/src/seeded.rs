//! Seeded randomness for tests: one generator and one way to choose, print and replay a seed
//! (`RAIDKIT_SEED=N` replays a run).

/// SplitMix64: small, fast, fully determined by its seed; good enough for test data and
/// workloads (not for anything that needs unpredictability).
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0; the modulo bias is irrelevant at test sizes).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "Rng::below(0)");
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        assert!(lo <= hi, "Rng::range({lo}, {hi})");
        lo + self.below((hi - lo) as u64 + 1) as usize
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.fill(&mut v);
        v
    }
}

/// The seed given in `RAIDKIT_SEED`, if any (a malformed one panics: a replay must not
/// silently run another seed).
pub fn given_seed() -> Option<u64> {
    let text = std::env::var("RAIDKIT_SEED").ok()?;
    Some(
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("RAIDKIT_SEED={text:?} is not a whole number")),
    )
}

/// The seed of a random test: `RAIDKIT_SEED` if set, else from the clock; printed with the
/// test's name so a failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let seed = given_seed().unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("{test}: RAIDKIT_SEED={seed}");
    seed
}

/// The seeds to run: `RAIDKIT_SEED` alone if set, else `count` seeds from `base`.
pub fn seeds(base: u64, count: u64) -> Vec<u64> {
    match given_seed() {
        Some(seed) => vec![seed],
        None => (base..base + count).collect(),
    }
}

/// Prints the seed and how to replay it if the test panics while this is alive.
pub struct SeedGuard(pub u64, pub &'static str);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "{} failed with seed {}: replay with RAIDKIT_SEED={}",
                self.1, self.0, self.0
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_splitmix64() {
        // The first outputs of SplitMix64 seeded with 0 (the reference implementation's).
        let mut rng = Rng::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn ranges_stay_inside_their_bounds() {
        let mut rng = Rng::new(7);
        for _ in 0..1000 {
            assert!(rng.below(3) < 3);
            assert!((5..=9).contains(&rng.range(5, 9)));
        }
        assert_eq!(rng.range(4, 4), 4);
        assert_eq!(rng.bytes(13).len(), 13);
    }
}

//! Seeded randomness for the parity tests: `RAIDKIT_SEED=<n>` replays a run.

#![allow(dead_code)]

pub mod check;

/// SplitMix64: tiny, good enough for test data, and fully determined by its seed.
pub struct Rng(u64);

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

    /// Uniform in lo..=hi.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        assert!(lo <= hi);
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
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

/// The seed from `RAIDKIT_SEED`, or one from the clock; printed so a failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let seed = match std::env::var("RAIDKIT_SEED") {
        Ok(text) => text.parse().expect("RAIDKIT_SEED must be a u64"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    };
    eprintln!("{test}: RAIDKIT_SEED={seed}");
    seed
}

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

//! Test helpers: a seeded RNG and `SimMember`, an in-memory member that keeps what was written
//! apart from what was flushed and can "lose power" keeping the durable image plus a seeded
//! subset of the unflushed writes, each torn at 512-byte sectors.

#![allow(dead_code)]

use std::io;
use std::sync::Mutex;

use member::Member;

pub const SECTOR: usize = 512;

/// splitmix64: small, seedable, good enough for tests.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The seed from `RAIDKIT_SEED`, else from the clock; printed so a failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("RAIDKIT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{test}: RAIDKIT_SEED={seed}");
    seed
}

/// Deterministic bytes for `(tag, len)`.
pub fn pattern(tag: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(tag ^ 0xA5A5_A5A5);
    (0..len).map(|_| rng.next() as u8).collect()
}

struct SimState {
    current: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<(usize, Vec<u8>)>,
}

#[derive(Debug)]
pub struct SimMember {
    name: String,
    state: Mutex<SimState>,
}

impl std::fmt::Debug for SimState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} pending writes", self.pending.len())
    }
}

impl SimMember {
    pub fn new(name: &str, len: usize) -> SimMember {
        SimMember {
            name: name.to_string(),
            state: Mutex::new(SimState {
                current: vec![0; len],
                durable: vec![0; len],
                pending: Vec::new(),
            }),
        }
    }

    /// What a power loss now could leave: durable data plus a seeded subset of the unflushed
    /// writes, in order, each torn at sector granularity.
    pub fn crash(&self, seed: u64) -> SimMember {
        let s = self.state.lock().unwrap();
        let mut rng = Rng::new(seed);
        let mut image = s.durable.clone();
        for (offset, data) in &s.pending {
            match rng.below(3) {
                0 => continue,
                1 => image[*offset..*offset + data.len()].copy_from_slice(data),
                _ => {
                    for (i, sector) in data.chunks(SECTOR).enumerate() {
                        if rng.below(2) == 0 {
                            let at = offset + i * SECTOR;
                            image[at..at + sector.len()].copy_from_slice(sector);
                        }
                    }
                }
            }
        }
        SimMember {
            name: self.name.clone(),
            state: Mutex::new(SimState {
                current: image.clone(),
                durable: image,
                pending: Vec::new(),
            }),
        }
    }

    /// Direct access for damaging bytes in tests (durable at once).
    pub fn poke(&self, offset: usize, bytes: &[u8]) {
        let mut s = self.state.lock().unwrap();
        s.current[offset..offset + bytes.len()].copy_from_slice(bytes);
        s.durable[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    pub fn peek(&self, offset: usize, len: usize) -> Vec<u8> {
        self.state.lock().unwrap().current[offset..offset + len].to_vec()
    }

    fn check(&self, offset: u64, len: usize, total: usize) -> io::Result<usize> {
        let end = offset as usize + len;
        if end > total {
            return Err(io::Error::other(format!(
                "{}: access past the end",
                self.name
            )));
        }
        Ok(offset as usize)
    }
}

impl Member for SimMember {
    fn name(&self) -> &str {
        &self.name
    }
    fn len(&self) -> u64 {
        self.state.lock().unwrap().current.len() as u64
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let s = self.state.lock().unwrap();
        let at = self.check(offset, buf.len(), s.current.len())?;
        buf.copy_from_slice(&s.current[at..at + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut s = self.state.lock().unwrap();
        let at = self.check(offset, buf.len(), s.current.len())?;
        s.current[at..at + buf.len()].copy_from_slice(buf);
        s.pending.push((at, buf.to_vec()));
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        let mut s = self.state.lock().unwrap();
        let s = &mut *s;
        s.durable.copy_from_slice(&s.current);
        s.pending.clear();
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.write_at(&vec![0; len as usize], offset)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.write_at(&vec![0; len as usize], offset)
    }
}

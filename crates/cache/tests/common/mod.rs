//! Test helpers: an in-memory export with fault injection and latency, a synthetic pattern
//! export, and a seeded PRNG whose seed is printed when a test fails.

#![allow(dead_code)]

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use nbd::Export;

/// SplitMix64: small, seedable, good enough for test workloads.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        self.next() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The seeds to run: `RAIDKIT_SEED` alone if set, else `count` seeds from `base`.
pub fn seeds(base: u64, count: u64) -> Vec<u64> {
    match std::env::var("RAIDKIT_SEED") {
        Ok(text) => vec![text.trim().parse().expect("RAIDKIT_SEED must be a u64")],
        Err(_) => (base..base + count).collect(),
    }
}

/// Prints the seed if the test panics while this is alive.
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

/// An in-memory export (one mutex: every call is atomic), with optional read latency and
/// injected failures.
pub struct MemExport {
    data: Mutex<Vec<u8>>,
    pub fail_reads: AtomicBool,
    pub fail_writes: AtomicBool,
    /// When set, a failing write first writes its first half (a torn write below).
    pub tear_writes: AtomicBool,
    pub read_latency: Duration,
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
}

impl MemExport {
    pub fn new(size: usize) -> Self {
        Self::with_data(vec![0; size])
    }

    pub fn with_data(data: Vec<u8>) -> Self {
        MemExport {
            data: Mutex::new(data),
            fail_reads: AtomicBool::new(false),
            fail_writes: AtomicBool::new(false),
            tear_writes: AtomicBool::new(false),
            read_latency: Duration::ZERO,
            reads: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
        }
    }

    /// A copy of the current contents.
    pub fn contents(&self) -> Vec<u8> {
        self.data.lock().unwrap().clone()
    }

    fn fail(op: &str) -> io::Error {
        io::Error::other(format!("injected {op} failure"))
    }

    fn change(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut image = self.data.lock().unwrap();
        let start = offset as usize;
        assert!(start + data.len() <= image.len(), "write past the export");
        if self.fail_writes.load(Ordering::SeqCst) {
            if self.tear_writes.load(Ordering::SeqCst) {
                let half = data.len() / 2;
                image[start..start + half].copy_from_slice(&data[..half]);
            }
            return Err(Self::fail("write"));
        }
        image[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }
}

impl Export for MemExport {
    fn size(&self) -> u64 {
        self.data.lock().unwrap().len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if !self.read_latency.is_zero() {
            std::thread::sleep(self.read_latency);
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.read_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        if self.fail_reads.load(Ordering::SeqCst) {
            return Err(Self::fail("read"));
        }
        let image = self.data.lock().unwrap();
        let start = offset as usize;
        buf.copy_from_slice(&image[start..start + buf.len()]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8], _fua: bool) -> io::Result<()> {
        self.change(offset, data)
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.change(offset, &vec![0; len as usize])
    }
    fn write_zeroes(&self, offset: u64, len: u64, _may_trim: bool) -> io::Result<()> {
        self.change(offset, &vec![0; len as usize])
    }
}

/// A huge read-only export whose byte at `offset` is a function of it; counts reads.
pub struct PatternExport {
    pub size: u64,
    /// Reads that reached past the end (each also failed).
    pub overruns: AtomicU64,
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
}

impl PatternExport {
    pub fn new(size: u64) -> Self {
        PatternExport {
            size,
            overruns: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
        }
    }
}

/// The pattern byte at `offset`.
pub fn pattern(offset: u64) -> u8 {
    (offset ^ (offset >> 9) ^ (offset >> 17)) as u8
}

impl Export for PatternExport {
    fn size(&self) -> u64 {
        self.size
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if offset + buf.len() as u64 > self.size {
            self.overruns.fetch_add(1, Ordering::SeqCst);
            return Err(io::Error::other("read past the end of the export"));
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.read_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        for (i, byte) in buf.iter_mut().enumerate() {
            *byte = pattern(offset + i as u64);
        }
        Ok(())
    }
    fn write(&self, _: u64, _: &[u8], _: bool) -> io::Result<()> {
        Err(io::Error::other("read-only"))
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, _: u64, _: u64) -> io::Result<()> {
        Err(io::Error::other("read-only"))
    }
    fn write_zeroes(&self, _: u64, _: u64, _: bool) -> io::Result<()> {
        Err(io::Error::other("read-only"))
    }
}

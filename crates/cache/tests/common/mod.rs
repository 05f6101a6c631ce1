//! Test helpers: an in-memory export with fault injection and latency, a synthetic pattern
//! export, and a seeded PRNG whose seed is printed when a test fails.

#![allow(dead_code)]

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use nbd::Export;

pub use testsupport::{seeds, Rng, SeedGuard};

/// A small cache of `blocks` 4 KiB blocks with read-ahead `mode` (4-block windows, two
/// prefetch workers, four streams).
pub fn small_config(blocks: u64, mode: cache::ReadAhead) -> cache::CacheConfig {
    cache::CacheConfig {
        size_bytes: blocks * 4096,
        block_bytes: 4096,
        read_ahead: mode,
        window_bytes: 4 * 4096,
        prefetch_workers: 2,
        prefetch_queue: 4,
        streams: 4,
    }
}

/// An in-memory export (one mutex: every call is atomic), with optional read latency and
/// injected failures.
pub struct MemExport {
    data: Mutex<Vec<u8>>,
    pub fail_reads: AtomicBool,
    /// Reads touching `[offset, offset + len)` fail (an unreadable range below).
    pub fail_range: Mutex<Option<(u64, u64)>>,
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
            fail_range: Mutex::new(None),
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
        let end = offset + buf.len() as u64;
        if let Some((at, len)) = *self.fail_range.lock().unwrap() {
            if offset < at + len && at < end {
                return Err(Self::fail("read of an unreadable range"));
            }
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

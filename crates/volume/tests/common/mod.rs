//! Helpers shared by the volume tests: the format helpers of `ondisk`'s tests (file members in a
//! temporary directory, superblocks, hashing), plus a member with injected write errors,
//! assembly and polling.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use member::Member;

#[path = "../../../ondisk/tests/common/mod.rs"]
mod format;
pub use format::*;

/// A member wrapper with injected write errors and an optional different name (a name that
/// is not a file path makes `create` treat the member as not cheap to zero, like a remote one).
#[derive(Debug)]
pub struct Wrapped {
    pub inner: Arc<dyn Member>,
    pub name: String,
    pub writes_fail: std::sync::atomic::AtomicBool,
}

impl Wrapped {
    pub fn new(inner: Arc<dyn Member>, name: &str) -> Arc<Wrapped> {
        Arc::new(Wrapped {
            inner,
            name: name.to_string(),
            writes_fail: std::sync::atomic::AtomicBool::new(false),
        })
    }
    fn check(&self) -> std::io::Result<()> {
        if self.writes_fail.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(std::io::Error::other("injected write error"));
        }
        Ok(())
    }
}

impl Member for Wrapped {
    fn name(&self) -> &str {
        &self.name
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.check()?;
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.check()?;
        self.inner.flush()
    }
    fn trim(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.check()?;
        self.inner.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.check()?;
        self.inner.write_zeroes(offset, len)
    }
}

/// Assembles the array on `paths` with default options.
pub fn assemble_paths(paths: &[PathBuf]) -> volume::Volume {
    volume::assemble(open_all(paths), &volume::AssembleOptions::default()).unwrap()
}

/// Polls `cond` every 10 ms for at most `secs` seconds.
pub fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

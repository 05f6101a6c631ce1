//! Helpers shared by the volume tests: the format helpers of `ondisk`'s tests (file members in a
//! temporary directory, superblocks, hashing), plus a member with injected write errors,
//! assembly and polling.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use member::{Call, Hooked, Member, Op};

#[path = "../../../ondisk/tests/common/mod.rs"]
mod format;
pub use format::*;

/// A member with injected write errors (writes, flushes, trims and write-zeroes fail while
/// `writes_fail`) under another name (a name that is not a file path makes `create` treat the
/// member as not cheap to zero, like a remote one).
#[derive(Debug)]
pub struct Wrapped {
    pub member: Arc<dyn Member>,
    pub writes_fail: Arc<AtomicBool>,
}

impl Wrapped {
    pub fn new(inner: Arc<dyn Member>, name: &str) -> Wrapped {
        let writes_fail = Arc::new(AtomicBool::new(false));
        let fail = Arc::clone(&writes_fail);
        let check = move |call: &Call| match (call.changes_bytes() || call.op == Op::Flush)
            && fail.load(Ordering::Relaxed)
        {
            true => Err(std::io::Error::other("injected write error")),
            false => Ok(()),
        };
        let member = Arc::new(Hooked::new(inner, check).named(name));
        Wrapped {
            member,
            writes_fail,
        }
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

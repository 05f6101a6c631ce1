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

/// `count` writer threads over equal regions of a volume, each making random writes (and, one
/// in four, read checks against its model) in its own region until stopped.
pub struct RegionWriters {
    stop: Arc<AtomicBool>,
    handles: Vec<std::thread::JoinHandle<Vec<u8>>>,
}

impl RegionWriters {
    /// Starts the writers; each write is 1 to `max_len` bytes, drawn from `seed`. Each model
    /// starts as what its region reads.
    pub fn start(v: &Arc<volume::Volume>, count: u64, seed: u64, max_len: u64) -> RegionWriters {
        RegionWriters::start_over(v, None, count, seed, max_len)
    }

    /// [`RegionWriters::start`] over a volume known to hold `initial` (its whole size): each
    /// model starts as its part of `initial`, and a first read of the region that differs
    /// fails the writer.
    pub fn start_with(
        v: &Arc<volume::Volume>,
        initial: &[u8],
        count: u64,
        seed: u64,
        max_len: u64,
    ) -> RegionWriters {
        assert_eq!(initial.len() as u64, v.size_bytes());
        RegionWriters::start_over(v, Some(initial), count, seed, max_len)
    }

    fn start_over(
        v: &Arc<volume::Volume>,
        initial: Option<&[u8]>,
        count: u64,
        seed: u64,
        max_len: u64,
    ) -> RegionWriters {
        let region = v.size_bytes() / count;
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (0..count)
            .map(|w| {
                let (v, stop) = (Arc::clone(v), Arc::clone(&stop));
                let seed = seed ^ (w + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let base = w * region;
                let known = initial.map(|i| i[base as usize..(base + region) as usize].to_vec());
                std::thread::spawn(move || {
                    region_writer(&v, base, region, known, (seed, max_len), &stop)
                })
            })
            .collect();
        RegionWriters { stop, handles }
    }

    /// Stops the writers: each one's model of its region.
    pub fn stop(self) -> Vec<Vec<u8>> {
        self.stop.store(true, Ordering::Relaxed);
        self.handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect()
    }
}

/// One writer's random writes and read checks over `[base, base + region)` until `stop`,
/// its model starting as `known` (checked against a first read) or else as that read;
/// returns its model of the region.
fn region_writer(
    v: &volume::Volume,
    base: u64,
    region: u64,
    known: Option<Vec<u8>>,
    (seed, max_len): (u64, u64),
    stop: &AtomicBool,
) -> Vec<u8> {
    let mut model = vec![0u8; region as usize];
    v.read(base, &mut model).unwrap();
    if let Some(known) = known {
        if let Some(at) = testsupport::first_difference(&model, &known) {
            panic!(
                "seed {seed}: the first read of the region at {base} differs from what was \
                 written at byte {}",
                base + at as u64
            );
        }
    }
    let mut x = seed | 1;
    while !stop.load(Ordering::Relaxed) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let len = 1 + (x >> 40) % max_len;
        let at = (x >> 8) % (region - len);
        let range = at as usize..(at + len) as usize;
        if x.is_multiple_of(4) {
            let mut got = vec![0u8; len as usize];
            v.read(base + at, &mut got).unwrap();
            assert!(
                got == model[range],
                "seed {seed}: read back at {}",
                base + at
            );
        } else {
            let data = pattern(len as usize, x);
            v.write(base + at, &data).unwrap();
            model[range].copy_from_slice(&data);
        }
    }
    model
}

/// Region `w` of `v` (each region as long as a model) reads as `models[w]`.
pub fn assert_regions(v: &volume::Volume, models: &[Vec<u8>], what: &str) {
    for (w, model) in models.iter().enumerate() {
        let mut got = vec![0u8; model.len()];
        v.read(w as u64 * model.len() as u64, &mut got).unwrap();
        if let Some(at) = testsupport::first_difference(&got, model) {
            panic!("{what}: region {w} byte {at} differs from the model");
        }
    }
}

//! Shared test helpers: a seeded RNG, seed handling that prints the replay command, RAM-member
//! arrays, and a reference model (a flat byte image).
#![allow(dead_code)]

use engine::{Array, ArrayConfig, Level};
use member::{Call, Hooked, MemMember, Member, Op};
use std::sync::Arc;

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * 1024;

pub use testsupport::Rng;

/// Seeds to run: `RAIDKIT_SEED` alone when set, else a fixed set plus one from the clock.
pub fn seeds() -> Vec<u64> {
    if let Some(seed) = testsupport::given_seed() {
        return vec![seed];
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    vec![1, now % 1_000_000_007]
}

/// Runs `body` with `seed`; on panic prints the seed and how to replay it.
pub fn with_seed(test_name: &str, seed: u64, body: impl FnOnce(&mut Rng)) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut Rng(seed))));
    if let Err(panic) = result {
        eprintln!(
            "{test_name} failed with seed {seed}; replay: RAIDKIT_SEED={seed} cargo test --release -p engine --test {} {test_name}",
            env!("CARGO_CRATE_NAME")
        );
        std::panic::resume_unwind(panic);
    }
}

/// Member writes allowed before a model crash (the caller's hook calls `allow` before each
/// write; after the stop every write fails, so none reaches a member); `i64::MAX` for none.
pub struct Trip(std::sync::atomic::AtomicI64);

impl Trip {
    pub fn new(writes: i64) -> Arc<Trip> {
        Arc::new(Trip(std::sync::atomic::AtomicI64::new(writes)))
    }
    pub fn allow(&self) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        if self.0.fetch_sub(1, Ordering::SeqCst) <= 0 {
            self.0.store(0, Ordering::SeqCst);
            return Err(std::io::Error::other("stopped (model crash)"));
        }
        Ok(())
    }
    /// Writes allowed so far, of `from` at the start.
    pub fn used(&self, from: i64) -> i64 {
        from - self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
    /// True once the stop came.
    pub fn fired(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst) <= 0
    }
}

/// RAM copies of `members` (their bytes now, same names and sizes): another run from the same
/// start.
pub fn ram_copies(members: &[Arc<dyn Member>]) -> Vec<Arc<dyn Member>> {
    members
        .iter()
        .map(|m| {
            let mut bytes = vec![0u8; m.len() as usize];
            m.read_at(&mut bytes, 0).unwrap();
            let c = MemMember::new(m.name(), m.len()).unwrap();
            c.write_at(&bytes, 0).unwrap();
            Arc::new(c) as Arc<dyn Member>
        })
        .collect()
}

/// `body` for every seed ([`seeds`]), the seed printed on failure ([`with_seed`]).
pub fn each_seed(test_name: &str, body: impl Fn(&mut Rng)) {
    for seed in seeds() {
        with_seed(test_name, seed, |rng| body(rng));
    }
}

/// For every seed ([`seeds`]) and every `(level, members)` case: `body`, the seed printed on
/// failure ([`with_seed`]).
pub fn each_case(
    test_name: &str,
    cases: &[(Level, usize)],
    mut body: impl FnMut(&mut Rng, Level, usize),
) {
    for seed in seeds() {
        with_seed(test_name, seed, |rng| {
            for &(level, n) in cases {
                body(rng, level, n);
            }
        });
    }
}

/// Each redundant level at its smallest width: (level, member count).
pub const REDUNDANT_SMALLEST: [(Level, usize); 4] = [
    (Level::Raid1, 2),
    (Level::Raid5, 4),
    (Level::Raid6, 5),
    (Level::Raid10, 4),
];

/// [`with_seed`] for each of [`seeds`].
pub fn for_each_seed(test_name: &str, mut body: impl FnMut(&mut Rng)) {
    for seed in seeds() {
        with_seed(test_name, seed, &mut body);
    }
}

/// How the members of the level tests (`model.rs`) are made: the test matrix's member
/// dimension, from `RAIDKIT_TEST_MEMBERS` (comma-separated; default `mem,file-uring,direct-auto`,
/// all: `mem,file-uring,file-threads,direct-uring,direct-auto,direct-threads`).
/// - `mem`: RAM members (calls on the engine's threads);
/// - `file-*`: page-cache files, `direct-*`: `O_DIRECT` files (in a temporary directory, each
///   behind a `Window` 4 KiB in, as an array's data area is);
/// - `*-uring`: every read and write of a batch through io_uring (`--member-io uring`),
///   `*-auto`: the default (io_uring where it measured faster), `*-threads`: positional calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    Mem,
    File(member::MemberCache, member::MemberIo),
}

impl Backing {
    pub fn uses_ring(self) -> bool {
        matches!(self, Backing::File(_, io) if io != member::MemberIo::Threads)
    }
}

/// The backings to run ([`Backing`]); panics on an unknown name.
pub fn backings() -> Vec<Backing> {
    use member::{MemberCache as C, MemberIo as I};
    let list = std::env::var("RAIDKIT_TEST_MEMBERS")
        .unwrap_or_else(|_| "mem,file-uring,direct-auto".to_string());
    list.split(',')
        .map(|name| match name.trim() {
            "mem" => Backing::Mem,
            "file-uring" => Backing::File(C::Buffered, I::Uring),
            "file-threads" => Backing::File(C::Buffered, I::Threads),
            "direct-uring" => Backing::File(C::Direct, I::Uring),
            "direct-auto" => Backing::File(C::Direct, I::Auto),
            "direct-threads" => Backing::File(C::Direct, I::Threads),
            other => panic!(
                "RAIDKIT_TEST_MEMBERS: unknown backing {other:?} (mem, file-uring, file-threads, \
                 direct-uring, direct-auto, direct-threads)"
            ),
        })
        .collect()
}

/// Members of the given data sizes made as `backing` says, and the directory holding their
/// files (removed when dropped).
pub struct Backed {
    pub members: Vec<Arc<dyn Member>>,
    _dir: Option<tempfile::TempDir>,
}

/// Fresh zeroed members of the given data sizes, made as `backing` says. A file backing that
/// cannot be made (io_uring refused here, no O_DIRECT) fails the test, naming why.
pub fn backed_members(backing: Backing, sizes: &[u64]) -> Backed {
    let Backing::File(cache, io) = backing else {
        return Backed {
            members: mem_members(sizes),
            _dir: None,
        };
    };
    let dir = tempfile::tempdir().expect("temporary directory");
    let members = sizes
        .iter()
        .enumerate()
        .map(|(role, &size)| {
            let path = dir.path().join(format!("m{role}.img"));
            let opts = member::OpenOptions {
                create_size: Some(4096 + size.next_multiple_of(4096)),
                ..member::OpenOptions::default()
            };
            let name = path.display().to_string();
            let file = member::FileMember::open_cached(&path, &name, &opts, cache)
                .and_then(|f| f.with_member_io(io))
                .unwrap_or_else(|e| panic!("{backing:?} member: {e}"));
            let file: Arc<dyn Member> = Arc::new(file);
            Arc::new(member::Window::new(file, 4096, size)) as Arc<dyn Member>
        })
        .collect();
    Backed {
        members,
        _dir: Some(dir),
    }
}

/// Fresh zeroed RAM members of the given data sizes.
pub fn mem_members(sizes: &[u64]) -> Vec<Arc<dyn Member>> {
    sizes
        .iter()
        .enumerate()
        .map(|(role, &size)| {
            Arc::new(MemMember::new(&format!("mem{role}"), size).expect("mem member"))
                as Arc<dyn Member>
        })
        .collect()
}

pub fn config(level: Level, chunk_bytes: u64, sizes: &[u64]) -> ArrayConfig {
    ArrayConfig {
        level,
        chunk_bytes,
        member_count: sizes.len(),
        member_data_bytes: sizes.to_vec(),
    }
}

/// An array over `members` with the roles in `missing` left out.
pub fn array_over(
    level: Level,
    chunk: u64,
    members: &[Arc<dyn Member>],
    missing: &[usize],
) -> Array {
    let sizes: Vec<u64> = members.iter().map(|m| m.len()).collect();
    let slots = members
        .iter()
        .enumerate()
        .map(|(role, m)| (!missing.contains(&role)).then(|| m.clone()))
        .collect();
    Array::new(config(level, chunk, &sizes), slots).expect("array")
}

/// Member sizes for a test array: `rows` chunks each, uneven by a few sectors so rounding to
/// the smallest member (and linear's use of every byte) is exercised.
pub fn member_sizes(n: usize, chunk: u64, rows: u64) -> Vec<u64> {
    (0..n as u64)
        .map(|r| rows * chunk + (r % 3) * 512)
        .collect()
}

/// Writes random bytes (at most `max_len`) at a random offset of `array`; returns where and
/// what.
pub fn random_write(array: &Array, rng: &mut Rng, max_len: u64) -> (u64, Vec<u8>) {
    let offset = rng.below(array.size_bytes() - 1);
    let len = 1 + rng.below((array.size_bytes() - offset).min(max_len));
    let mut data = vec![0u8; len as usize];
    rng.fill(&mut data);
    array.write(offset, &data).expect("write");
    (offset, data)
}

/// Asserts the array reads back `model[offset..offset+len]`, naming the first differing byte.
pub fn assert_reads(array: &Array, model: &[u8], offset: u64, len: u64, what: &str) {
    let mut buf = vec![0u8; len as usize];
    array.read(offset, &mut buf).expect("read");
    let want = &model[offset as usize..(offset + len) as usize];
    if let Some(at) = testsupport::first_difference(&buf, want) {
        panic!(
            "{what}: read {offset}+{len} differs from the model at array byte {} (got {:#04x}, want {:#04x})",
            offset + at as u64,
            buf[at],
            want[at]
        );
    }
}

/// One random operation of at most `max_len` bytes on `array`: a write of random bytes (made
/// in `model` too) or a read asserted against `model`.
pub fn random_op(array: &Array, model: &mut [u8], rng: &mut Rng, max_len: u64) {
    let offset = rng.below(model.len() as u64 - 1);
    let len = 1 + rng.below((model.len() as u64 - offset).min(max_len));
    if rng.below(2) == 0 {
        let mut data = vec![0u8; len as usize];
        rng.fill(&mut data);
        array.write(offset, &data).expect("write");
        model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
    } else {
        assert_reads(array, model, offset, len, "random read");
    }
}

/// Sets of roles that may be missing together, of each size from 1 to the level's limit;
/// for RAID 10 only survivable ones. At most `per_size` random sets per size.
pub fn missing_sets(
    array_geometry: &engine::Geometry,
    rng: &mut Rng,
    per_size: usize,
) -> Vec<Vec<usize>> {
    let n = array_geometry.member_count();
    let max = array_geometry.level().max_missing(n);
    let mut sizes: Vec<usize> = vec![1, 2, max];
    sizes.retain(|&s| s >= 1 && s <= max);
    sizes.dedup();
    let mut out = Vec::new();
    for size in sizes {
        let mut tries = 0;
        let mut found = 0;
        while found < per_size && tries < 50 {
            tries += 1;
            let mut set: Vec<usize> = Vec::new();
            while set.len() < size {
                let r = rng.below(n as u64) as usize;
                if !set.contains(&r) {
                    set.push(r);
                }
            }
            set.sort();
            let present: Vec<bool> = (0..n).map(|r| !set.contains(&r)).collect();
            if array_geometry.survives(&present) && !out.contains(&set) {
                out.push(set);
                found += 1;
            }
        }
    }
    out
}

/// What steers a RAM member with injected faults: the next N reads fail, every read fails,
/// every write fails, or every request is delayed. (A small stand-in for `member::FaultyMember`.)
/// `inner` is the RAM itself, for reading and writing past the faults.
#[derive(Debug)]
pub struct Flaky {
    pub inner: Arc<MemMember>,
    pub read_failures_left: std::sync::atomic::AtomicU64,
    pub reads_fail: std::sync::atomic::AtomicBool,
    pub writes_fail: std::sync::atomic::AtomicBool,
    pub delay_ms: std::sync::atomic::AtomicU64,
    pub reads: std::sync::atomic::AtomicU64,
}

impl Flaky {
    pub fn new(name: &str, len: u64) -> Flaky {
        use std::sync::atomic::{AtomicBool, AtomicU64};
        Flaky {
            inner: Arc::new(MemMember::new(name, len).expect("mem")),
            read_failures_left: AtomicU64::new(0),
            reads_fail: AtomicBool::new(false),
            writes_fail: AtomicBool::new(false),
            delay_ms: AtomicU64::new(0),
            reads: AtomicU64::new(0),
        }
    }

    /// The member: `inner` behind the faults.
    pub fn member(self: &Arc<Flaky>) -> Arc<dyn Member> {
        let flaky = Arc::clone(self);
        Arc::new(Hooked::new(self.inner.clone(), move |call: &Call| {
            flaky.before(call)
        }))
    }

    fn before(&self, call: &Call) -> std::io::Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        if call.op == Op::Reconnect {
            return Ok(());
        }
        let ms = self.delay_ms.load(Relaxed);
        if ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        match call.op {
            Op::Read => {
                self.reads.fetch_add(1, Relaxed);
                let once = self
                    .read_failures_left
                    .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
                    .is_ok();
                match once || self.reads_fail.load(Relaxed) {
                    true => Err(std::io::Error::other("injected read error")),
                    false => Ok(()),
                }
            }
            _ => match self.writes_fail.load(Relaxed) {
                true => Err(std::io::Error::other("injected write error")),
                false => Ok(()),
            },
        }
    }
}

/// `n` flaky members of `len` bytes, and the same as `Arc<dyn Member>`.
pub fn flaky_members(n: usize, len: u64) -> (Vec<Arc<Flaky>>, Vec<Arc<dyn Member>>) {
    let flaky: Vec<Arc<Flaky>> = (0..n)
        .map(|i| Arc::new(Flaky::new(&format!("flaky{i}"), len)))
        .collect();
    let members = flaky.iter().map(Flaky::member).collect();
    (flaky, members)
}

//! Test helpers: a seeded RNG (testsupport's) and a `World` of simulated members that keep what was written
//! apart from what was flushed and "lose power" *together*, each keeping its durable image plus
//! a seeded subset of its unflushed writes, torn at 512-byte sectors. (`member::SimMember`
//! does this for one member; the array tests need one instant for all members and the
//! journal while a background applier is writing, hence one lock over all of them.)

#![allow(dead_code)]

use std::io;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use journal::{Journal, JournalError};
use member::Member;

/// Runs a journal's checkpoints as the layer that owns the array does (`export`): waits
/// until one is due, calls `flush` (the array's flush), then finishes it; until closed or
/// dropped.
pub struct Checkpoints {
    journal: Arc<Journal>,
    flush: Arc<dyn Fn() -> io::Result<()> + Send + Sync>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpoints {
    pub fn start(
        journal: &Arc<Journal>,
        flush: impl Fn() -> io::Result<()> + Send + Sync + 'static,
    ) -> Checkpoints {
        let flush: Arc<dyn Fn() -> io::Result<()> + Send + Sync> = Arc::new(flush);
        let (j, f) = (Arc::clone(journal), Arc::clone(&flush));
        let thread = std::thread::spawn(move || {
            while j.wait_checkpoint_due() {
                let _ = checkpoint(&j, f.as_ref());
            }
        });
        Checkpoints {
            journal: Arc::clone(journal),
            flush,
            thread: Some(thread),
        }
    }

    /// One checkpoint now; the number of records released.
    pub fn checkpoint(&self) -> Result<u64, JournalError> {
        checkpoint(&self.journal, self.flush.as_ref())
    }

    /// Clean shutdown: a last checkpoint, then the journal closed. The records still live.
    pub fn close(mut self) -> Result<u64, JournalError> {
        let released = self.checkpoint();
        let live = self.stop();
        released.map(|_| live)
    }

    fn stop(&mut self) -> u64 {
        let live = self.journal.close();
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
        live
    }
}

impl Drop for Checkpoints {
    fn drop(&mut self) {
        self.stop();
    }
}

fn checkpoint(j: &Journal, flush: &dyn Fn() -> io::Result<()>) -> Result<u64, JournalError> {
    match j.begin_checkpoint()? {
        Some(checkpoint) => checkpoint.finish(flush()),
        None => Ok(0),
    }
}

pub const SECTOR: usize = 512;

pub use testsupport::{seed, Rng};

/// Deterministic bytes for `(tag, len)`.
pub fn pattern(tag: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(tag ^ 0xA5A5_A5A5);
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

#[derive(Default)]
struct SimState {
    current: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<(usize, Vec<u8>)>,
}

/// Members that share one lock, so a power loss cuts all of them at the same instant.
#[derive(Default)]
pub struct World {
    states: Mutex<Vec<SimState>>,
}

pub struct SimMember {
    name: String,
    world: Arc<World>,
    index: usize,
}

impl std::fmt::Debug for SimMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimMember({})", self.name)
    }
}

impl World {
    pub fn new() -> Arc<World> {
        Arc::new(World::default())
    }

    /// A new member of `len` zero bytes in this world.
    pub fn member(self: &Arc<World>, name: &str, len: usize) -> Arc<SimMember> {
        let mut states = self.states.lock().unwrap();
        states.push(SimState {
            current: vec![0; len],
            durable: vec![0; len],
            pending: Vec::new(),
        });
        Arc::new(SimMember {
            name: name.to_string(),
            world: Arc::clone(self),
            index: states.len() - 1,
        })
    }

    /// What a power loss now could leave on every member: durable data plus a seeded subset
    /// of the unflushed writes, in order, each torn at sector granularity. Returns a new world
    /// with the members in the same order.
    pub fn crash(&self, seed: u64, names: &[&str]) -> (Arc<World>, Vec<Arc<SimMember>>) {
        let states = self.states.lock().unwrap();
        assert_eq!(names.len(), states.len());
        let mut rng = Rng::new(seed);
        let world = World::new();
        let members = states
            .iter()
            .zip(names)
            .map(|(s, name)| {
                let image = torn_image(s, &mut rng);
                let m = world.member(name, image.len());
                m.poke(0, &image);
                m
            })
            .collect();
        (world, members)
    }
}

fn torn_image(s: &SimState, rng: &mut Rng) -> Vec<u8> {
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
    image
}

impl SimMember {
    /// A member alone in its own world.
    pub fn new(name: &str, len: usize) -> SimMember {
        let world = World::new();
        let m = world.member(name, len);
        SimMember {
            name: m.name.clone(),
            world,
            index: 0,
        }
    }

    /// This member's image after a power loss now (see [`World::crash`]).
    pub fn crash(&self, seed: u64) -> SimMember {
        let states = self.world.states.lock().unwrap();
        let image = torn_image(&states[self.index], &mut Rng::new(seed));
        let m = SimMember::new(&self.name, image.len());
        m.poke(0, &image);
        m
    }

    fn with<T>(&self, f: impl FnOnce(&mut SimState) -> T) -> T {
        f(&mut self.world.states.lock().unwrap()[self.index])
    }

    /// Direct access for damaging bytes in tests (durable at once).
    pub fn poke(&self, offset: usize, bytes: &[u8]) {
        self.with(|s| {
            s.current[offset..offset + bytes.len()].copy_from_slice(bytes);
            s.durable[offset..offset + bytes.len()].copy_from_slice(bytes);
        })
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
        self.with(|s| s.current.len() as u64)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.with(|s| {
            let at = self.check(offset, buf.len(), s.current.len())?;
            buf.copy_from_slice(&s.current[at..at + buf.len()]);
            Ok(())
        })
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.with(|s| {
            let at = self.check(offset, buf.len(), s.current.len())?;
            s.current[at..at + buf.len()].copy_from_slice(buf);
            s.pending.push((at, buf.to_vec()));
            Ok(())
        })
    }
    fn flush(&self) -> io::Result<()> {
        self.with(|s| {
            s.durable.copy_from_slice(&s.current);
            s.pending.clear();
            Ok(())
        })
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.write_at(&vec![0; len as usize], offset)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.write_at(&vec![0; len as usize], offset)
    }
}

/// Rounds per randomized array test: `RAIDKIT_JOURNAL_ROUNDS` (default 40).
pub fn rounds() -> u64 {
    std::env::var("RAIDKIT_JOURNAL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40)
}

/// The members of a test array of `level` (RAID 6: five, else four: `m0`, `m1`, …) and
/// `journal`, last.
pub fn names(level: engine::Level) -> Vec<String> {
    let n = if level == engine::Level::Raid6 { 5 } else { 4 };
    (0..n)
        .map(|i| format!("m{i}"))
        .chain(["journal".to_string()])
        .collect()
}

/// Runs `round(level, seed)` [`rounds`] times: the levels taken from `levels` in turn, the
/// seeds counting up from the test's [`seed`].
pub fn each_round<L: Copy>(test: &str, levels: &[L], mut round: impl FnMut(L, u64)) {
    let base = seed(test);
    for index in 0..rounds() {
        round(
            levels[index as usize % levels.len()],
            base.wrapping_add(index),
        );
    }
}

/// A random small write of at most `max_len` bytes: (offset, data) inside `size`.
pub fn random_write(rng: &mut Rng, size: u64, max_len: u64) -> (u64, Vec<u8>) {
    let len = 1 + rng.below(max_len);
    let offset = rng.below(size - len);
    (offset, pattern(rng.next_u64(), len as usize))
}

/// Reads `model.len()` bytes with `read` and panics, naming the first differing byte, unless
/// they equal `model`.
pub fn assert_reads_back(model: &[u8], what: &str, read: impl FnOnce(&mut [u8])) {
    let mut got = vec![0u8; model.len()];
    read(&mut got);
    if let Some(i) = (0..model.len()).find(|&i| got[i] != model[i]) {
        panic!(
            "{what}: byte {i} is {} but {} was written",
            got[i], model[i]
        );
    }
}

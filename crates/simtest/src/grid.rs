//! `PowerGrid`: the shared power supply of a set of [`SimMember`]s, able to cut the power of
//! all of them at once at a chosen member operation.
//!
//! Every member operation of every [`GridMember`] runs under one mutex, so a cut is atomic: it
//! happens between two member operations, never inside one, and all members lose power at the
//! same instant. Mutating operations (write, flush, trim, write-zeroes) are numbered from 0 once
//! the grid is armed; the cut happens just before operation `cut_at` (if the [`CutPolicy`]
//! allows it there, else at the next allowed operation). The cut takes
//! [`SimMember::crash`] of every member (durable data plus a seeded subset of the unflushed
//! writes, torn at 512-byte sectors) and keeps those images; the live members go on working,
//! so the code under test never sees the cut — the test stops its workload when
//! [`PowerGrid::is_cut`] turns true and ignores everything done after it.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use member::{Member, SimMember};
use ondisk::{Superblock, SUPERBLOCK_BYTES, SUPERBLOCK_OFFSET};

/// Longest [`PowerGrid::cut_now`] waits for a superblock rewrite to finish.
pub const CUT_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// Where a cut may fall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutPolicy {
    /// At any member operation, superblock rewrites included.
    Anywhere,
    /// Never while a superblock rewrite is in progress (a superblock written but not flushed,
    /// or members holding different events counters): for tests of the data path alone.
    OutsideSuperblockUpdates,
}

#[derive(Debug)]
struct GridState {
    armed: bool,
    ops_count: u64,
    cut_at: u64,
    images: Option<Vec<SimMember>>,
    /// Per member: a superblock write not yet flushed.
    sb_unflushed: Vec<bool>,
    /// Per member: events counter of the last superblock written.
    sb_events: Vec<u64>,
    /// Per member: carries an array superblock (else, e.g. a journal, not tracked).
    tracked: Vec<bool>,
    /// Sabotage: writes overlapping these member bytes are acknowledged and dropped.
    dropped: Option<(u64, u64)>,
}

/// The shared power supply. See the module docs.
#[derive(Debug)]
pub struct PowerGrid {
    sims: Vec<Arc<SimMember>>,
    state: Mutex<GridState>,
    cut: AtomicBool,
    lying_flush: AtomicBool,
    crash_seed: u64,
    policy: CutPolicy,
}

/// A member powered by a [`PowerGrid`]: forwards to its [`SimMember`] under the grid's lock.
#[derive(Debug)]
pub struct GridMember {
    grid: Arc<PowerGrid>,
    index: usize,
}

/// Mixes a seed with an index (SplitMix64 finaliser) for independent sub-seeds.
pub fn sub_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl PowerGrid {
    /// A grid over `sims`, unarmed (no cut until [`PowerGrid::arm`]).
    pub fn new(sims: Vec<Arc<SimMember>>, crash_seed: u64, policy: CutPolicy) -> Arc<PowerGrid> {
        assert!(!sims.is_empty());
        let count = sims.len();
        Arc::new(PowerGrid {
            sims,
            state: Mutex::new(GridState {
                armed: false,
                ops_count: 0,
                cut_at: u64::MAX,
                images: None,
                sb_unflushed: vec![false; count],
                sb_events: vec![0; count],
                tracked: vec![false; count],
                dropped: None,
            }),
            cut: AtomicBool::new(false),
            lying_flush: AtomicBool::new(false),
            crash_seed,
            policy,
        })
    }

    /// The members, as the array sees them.
    pub fn members(self: &Arc<PowerGrid>) -> Vec<Arc<dyn Member>> {
        (0..self.sims.len())
            .map(|index| {
                Arc::new(GridMember {
                    grid: Arc::clone(self),
                    index,
                }) as Arc<dyn Member>
            })
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, GridState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts counting mutating operations; the power is cut just before operation `cut_at`.
    /// Reads the events counter of every member that carries an array superblock (the others,
    /// e.g. a journal, are not tracked). Every member must be flushed.
    pub fn arm(&self, cut_at: u64) {
        let mut state = self.lock();
        assert!(!state.armed, "power grid armed twice");
        for (i, sim) in self.sims.iter().enumerate() {
            assert_eq!(
                sim.unflushed_count(),
                0,
                "member {i} has unflushed writes at arm"
            );
            if let Ok(sb) = ondisk::read_superblock(sim.as_ref()) {
                state.sb_events[i] = sb.events;
                state.tracked[i] = true;
            }
        }
        assert!(
            state.tracked.iter().any(|&t| t),
            "no member carries a superblock"
        );
        state.armed = true;
        state.ops_count = 0;
        state.cut_at = cut_at;
    }

    /// Sabotage for the harness's own tests: flushes of data do nothing (superblocks are
    /// still flushed), so acknowledged data is lost at the cut.
    pub fn set_lying_flush(&self, lying: bool) {
        self.lying_flush.store(lying, Ordering::SeqCst);
    }

    /// Sabotage for the reshape proof's own test: every `write_at` overlapping member bytes
    /// `[offset, offset + bytes)` (on any member) is counted and acknowledged but not written.
    pub fn set_dropped_range(&self, offset: u64, bytes: u64) {
        self.lock().dropped = Some((offset, bytes));
    }

    /// True once the power has been cut.
    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }

    /// Mutating operations counted since [`PowerGrid::arm`].
    pub fn ops_count(&self) -> u64 {
        self.lock().ops_count
    }

    /// Cuts the power now unless it already was (the workload ended before `cut_at`). Under
    /// [`CutPolicy::OutsideSuperblockUpdates`] waits (up to [`CUT_WAIT_MAX`]) for a superblock
    /// rewrite in progress (e.g. by the background worker) to finish first.
    pub fn cut_now(&self) {
        let deadline = std::time::Instant::now() + CUT_WAIT_MAX;
        loop {
            let mut state = self.lock();
            let busy = self.policy == CutPolicy::OutsideSuperblockUpdates
                && Self::superblock_update_in_progress(&state);
            if !busy || state.images.is_some() {
                self.take_images(&mut state);
                return;
            }
            drop(state);
            assert!(
                std::time::Instant::now() < deadline,
                "a superblock rewrite stayed unfinished for {CUT_WAIT_MAX:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// The images the power loss left, one per member in order (after a cut).
    pub fn crashed_images(&self) -> Vec<Arc<SimMember>> {
        let mut state = self.lock();
        let images = state.images.take().expect("crashed_images before the cut");
        images.into_iter().map(Arc::new).collect()
    }

    fn take_images(&self, state: &mut GridState) {
        if state.images.is_some() {
            return;
        }
        let images = self
            .sims
            .iter()
            .enumerate()
            .map(|(i, sim)| sim.crash(sub_seed(self.crash_seed, i as u64)))
            .collect();
        state.images = Some(images);
        self.cut.store(true, Ordering::SeqCst);
    }

    fn superblock_update_in_progress(state: &GridState) -> bool {
        let tracked = || (0..state.tracked.len()).filter(|&i| state.tracked[i]);
        let first = tracked().map(|i| state.sb_events[i]).next();
        let differ = tracked().any(|i| Some(state.sb_events[i]) != first);
        state.sb_unflushed.iter().any(|&u| u) || differ
    }

    /// Called before every mutating operation, under the lock.
    fn before_mutation(&self, state: &mut GridState, is_superblock_write: bool) {
        if !state.armed || state.images.is_some() {
            return;
        }
        let due = state.ops_count >= state.cut_at;
        let allowed = match self.policy {
            CutPolicy::Anywhere => true,
            CutPolicy::OutsideSuperblockUpdates => {
                !is_superblock_write && !Self::superblock_update_in_progress(state)
            }
        };
        if due && allowed {
            self.take_images(state);
        }
        state.ops_count += 1;
    }
}

fn is_superblock_write(buf: &[u8], offset: u64) -> bool {
    let start = SUPERBLOCK_OFFSET;
    let end = start + SUPERBLOCK_BYTES as u64;
    let overlaps = offset < end && offset + buf.len() as u64 > start;
    if overlaps {
        assert!(
            offset == start && buf.len() == SUPERBLOCK_BYTES,
            "partial superblock write at {offset} (+{})",
            buf.len()
        );
    }
    overlaps
}

impl GridMember {
    fn sim(&self) -> &SimMember {
        &self.grid.sims[self.index]
    }

    fn mutate(
        &self,
        sb_write: bool,
        op: impl FnOnce(&SimMember) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut state = self.grid.lock();
        self.grid.before_mutation(&mut state, sb_write);
        op(self.sim())
    }
}

impl Member for GridMember {
    fn name(&self) -> &str {
        self.sim().name()
    }

    fn len(&self) -> u64 {
        self.sim().len()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let _state = self.grid.lock();
        self.sim().read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut state = self.grid.lock();
        let sb_write = state.tracked[self.index] && is_superblock_write(buf, offset);
        self.grid.before_mutation(&mut state, sb_write);
        if sb_write && state.armed {
            let bytes: &[u8; SUPERBLOCK_BYTES] = buf.try_into().expect("superblock size");
            let sb = Superblock::decode(bytes).expect("the array wrote an invalid superblock");
            state.sb_events[self.index] = sb.events;
            state.sb_unflushed[self.index] = true;
        }
        if let Some((start, bytes)) = state.dropped {
            if offset < start + bytes && offset + buf.len() as u64 > start {
                return Ok(());
            }
        }
        self.sim().write_at(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        let mut state = self.grid.lock();
        self.grid.before_mutation(&mut state, false);
        let lying = self.grid.lying_flush.load(Ordering::SeqCst);
        if lying && !state.sb_unflushed[self.index] {
            return Ok(());
        }
        state.sb_unflushed[self.index] = false;
        self.sim().flush()
    }

    /// A durable write (the write-intent bitmap's blocks): only its own bytes survive every
    /// cut, the member's other unflushed writes stay at risk. Superblocks are never written
    /// this way (they are written, then flushed, and tracked as such).
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        assert!(
            !is_superblock_write(buf, offset),
            "superblock written with write_durable_at"
        );
        self.mutate(false, |sim| sim.write_durable_at(buf, offset))
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.mutate(false, |sim| sim.trim(offset, len))
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.mutate(false, |sim| sim.write_zeroes(offset, len))
    }
}

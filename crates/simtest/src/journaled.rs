//! Power loss with a journal (issue 5's "software battery") in front of the volume, wired the
//! way `raidkit serve` wires it (crates/raidkit/src/journaled.rs, which lives in the binary
//! crate and so is mirrored here): write-back — a write is acknowledged once durable in the
//! journal, FLUSH returns at once, trims drain the buffer then go to the volume; write-through
//! on RAID 5/6 — every stripe is logged before it is written in place, FLUSH and FUA need no
//! member flush. After the cut the journal member's image is replayed into the reassembled
//! volume (`journal::recover`) before the usual checks; with write-back every acknowledged
//! write must read back.

use std::io;
use std::sync::Arc;

use journal::{Backing, Journal, Mode, WriteBack, WriteThroughLog};
use layout::Level;
use member::{Member, SimMember, SimRng};
use metadata::{assemble, create, AssembleOptions, CreateOptions, Uuid, Volume};

use crate::grid::{sub_seed, CutPolicy, PowerGrid};
use crate::rig::{run_workload, Shape, Target, DATA_OFFSET_BYTES};

/// Size of the simulated journal member.
pub const JOURNAL_BYTES: u64 = 8 << 20;

/// `Volume` as the write-back cache's backing store (as raidkit's `VolumeBacking`).
pub struct VolumeBacking(pub Arc<Volume>);

impl Backing for VolumeBacking {
    fn size(&self) -> u64 {
        self.0.size_bytes()
    }
    /// As raidkit's: the full-stripe data size with parity, else the chunk.
    fn stripe_bytes(&self) -> u64 {
        let geometry = self.0.array().geometry();
        match geometry.level().has_parity() {
            true => geometry.stripe_data_bytes(),
            false => geometry.chunk_bytes(),
        }
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        Target::read(&*self.0, offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        Target::write(&*self.0, offset, data)
    }
    fn flush(&self) -> io::Result<()> {
        Target::flush(&*self.0)
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        Target::trim(&*self.0, offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        Target::write_zeroes(&*self.0, offset, len)
    }
}

/// A volume with a journal in front, as `raidkit serve --journal` exports it.
pub struct Journaled {
    volume: Arc<Volume>,
    journal: Arc<Journal>,
    writeback: Option<WriteBack>,
    logs_every_write: bool,
}

impl Journaled {
    /// Starts a journal session on `jm` (already formatted) over `volume`.
    pub fn start(volume: Arc<Volume>, jm: Arc<dyn Member>) -> Journaled {
        let jsb = journal::read_superblock(jm.as_ref()).expect("journal superblock");
        let backing = Arc::new(VolumeBacking(Arc::clone(&volume)));
        let summary = journal::recover(jm.as_ref(), &jsb, volume.array(), Some(backing.as_ref()))
            .expect("replay an empty journal");
        let weak = Arc::downgrade(&volume);
        let flusher: journal::Flusher = Arc::new(move || match weak.upgrade() {
            Some(v) => Ok(v.flush()?),
            None => Ok(()),
        });
        let mode = jsb.mode;
        let j = Journal::start(jm, jsb, &summary, flusher).expect("start the journal");
        if volume.level().has_parity() {
            let log = Arc::new(WriteThroughLog::new(Arc::clone(&j)));
            volume.array().set_write_log(Some(log));
        }
        let writeback = (mode == Mode::WriteBack).then(|| {
            volume.write(0, &[]).expect("mark dirty");
            WriteBack::start(Arc::clone(&j), backing, journal::BUFFER_BYTES_DEFAULT)
                .expect("start the write-back cache")
        });
        Journaled {
            logs_every_write: volume.level().has_parity(),
            volume,
            journal: j,
            writeback,
        }
    }
}

impl Target for Journaled {
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        match &self.writeback {
            Some(wb) => wb.write(offset, data),
            None => Ok(self.volume.write(offset, data)?),
        }
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        match &self.writeback {
            Some(wb) => wb.read(offset, buf),
            None => Ok(self.volume.read(offset, buf)?),
        }
    }
    fn flush(&self) -> io::Result<()> {
        match &self.writeback {
            Some(wb) => wb.flush(),
            None if self.logs_every_write => match self.journal.failure() {
                Some(reason) => Err(io::Error::other(reason)),
                None => Ok(()),
            },
            None => Ok(self.volume.flush()?),
        }
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        match &self.writeback {
            Some(wb) => wb.trim(offset, len),
            None => Ok(self.volume.trim(offset, len)?),
        }
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        match &self.writeback {
            Some(wb) => wb.write_zeroes(offset, len),
            None => Ok(self.volume.write_zeroes(offset, len)?),
        }
    }
    fn close(&self) -> Option<io::Result<()>> {
        None
    }
    fn ack_is_durable(&self) -> bool {
        self.writeback.is_some()
    }
}

/// After the cut: replays the crashed journal image into the reassembled volume.
pub fn replay(volume: &Arc<Volume>, jm: &dyn Member, context: &str) {
    let jsb = journal::read_superblock(jm)
        .unwrap_or_else(|e| panic!("{context}: journal superblock after the power loss: {e}"));
    let backing = VolumeBacking(Arc::clone(volume));
    journal::recover(jm, &jsb, volume.array(), Some(&backing))
        .unwrap_or_else(|e| panic!("{context}: journal replay after the power loss: {e}"));
}

/// When the crashed journal is replayed into the reassembled volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayOrder {
    /// Right after assembly, while the automatic resync of the dirty array may run (what
    /// `raidkit serve` does).
    AfterAssembly,
    /// Once assembly's background work (the resync) is idle: no concurrent writers.
    AfterResync,
}

/// One power-loss case of `level` with a journal in `mode`, replayed as `raidkit serve` does.
pub fn journal_case(level: Level, mode: Mode, seed: u64) {
    journal_case_ordered(level, mode, seed, ReplayOrder::AfterAssembly);
}

/// [`journal_case`] with the replay at `order`.
pub fn journal_case_ordered(level: Level, mode: Mode, seed: u64, order: ReplayOrder) {
    let mut rng = SimRng::new(seed);
    let mut shape = Shape::random(level, &mut rng);
    shape.initial_sync = false;
    let total_ops = (shape.threads * shape.ops_per_thread * (shape.member_count() + 2)) as u64;
    let cut_at = match rng.chance(1, 8) {
        true => u64::MAX,
        false => rng.below(total_ops + 1),
    };
    let mut sims: Vec<Arc<SimMember>> = shape
        .member_bytes
        .iter()
        .enumerate()
        .map(|(i, &bytes)| Arc::new(SimMember::new(&format!("sim{i}"), bytes)))
        .collect();
    sims.push(Arc::new(SimMember::new("journal", JOURNAL_BYTES)));
    let grid = PowerGrid::new(
        sims,
        sub_seed(seed, 1_000),
        CutPolicy::OutsideSuperblockUpdates,
    );
    let mut members = grid.members();
    let jm = members.pop().expect("journal member");
    let mut opts = CreateOptions::new(shape.level, "crash");
    opts.chunk_bytes = shape.chunk_bytes;
    opts.data_offset_bytes = DATA_OFFSET_BYTES;
    opts.assume_clean = true;
    create(&members, &opts).unwrap_or_else(|e| panic!("create {shape:?}: {e}"));
    journal::format(jm.as_ref(), Uuid::new_v4(), mode).expect("format the journal");
    jm.flush().expect("flush the journal");
    grid.arm(cut_at);
    let volume = Arc::new(assemble(members, &AssembleOptions::default()).expect("assemble"));
    let target = Journaled::start(Arc::clone(&volume), jm);
    let models = run_workload(&shape, seed, &grid, &target, volume.size_bytes());
    grid.cut_now();
    drop(target);
    drop(volume);
    let mut images: Vec<Arc<dyn Member>> = grid
        .crashed_images()
        .into_iter()
        .map(|m| m as Arc<dyn Member>)
        .collect();
    let jimage = images.pop();
    let context = format!("{shape:?}, journal {mode}, power cut before member op {cut_at}");
    let jimage = jimage.map(|jm| (jm, order == ReplayOrder::AfterResync));
    crate::recover::recover_with(&shape, images, jimage, &models, seed, &context, false);
}

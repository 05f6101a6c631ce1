//! Power loss with a journal (issue 5's "software battery") in front of the volume, attached
//! by the `export` crate — the code `raidkit serve` runs: write-back — a write is
//! acknowledged once durable in the journal, FLUSH returns at once, trims drain the buffer then
//! go to the volume; write-through on RAID 5/6 — every stripe is logged before it is written
//! in place, FLUSH and FUA need no member flush. After the cut the journal member's image is
//! attached to the reassembled volume as at a server start (replay, then a new session) before
//! the usual checks; with write-back every acknowledged write must read back.

use std::io;
use std::sync::Arc;

use export::{AttachOptions, JournalExport, VolumeExport};
use journal::Mode;
use layout::Level;
use member::{Member, SimMember, SimRng};
use nbd::Export;
use ondisk::{create, CreateOptions, Uuid};
use volume::{assemble, AssembleOptions, Volume};

use crate::grid::{sub_seed, CutPolicy, PowerGrid};
use crate::rig::{run_workload, Shape, Target, DATA_OFFSET_BYTES};

/// Size of the simulated journal member.
pub const JOURNAL_BYTES: u64 = 8 << 20;

/// A volume with a journal in front, exported as `raidkit serve --journal` exports it.
pub struct JournalTarget {
    attached: Arc<export::JournalLayer>,
    export: JournalExport<VolumeExport>,
}

impl JournalTarget {
    /// Starts a journal session on `jm` (already formatted) over `volume`.
    pub fn start(volume: Arc<Volume>, jm: Arc<dyn Member>) -> JournalTarget {
        let attached = attach(&volume, jm, "start");
        let export = attached.export(VolumeExport(volume));
        JournalTarget { attached, export }
    }
}

impl Target for JournalTarget {
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.export.write(offset, data, false)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.export.read(offset, buf)
    }
    fn flush(&self) -> io::Result<()> {
        self.export.flush()
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.export.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.export.write_zeroes(offset, len, true)
    }
    fn close(&self) -> Option<io::Result<()>> {
        None
    }
    fn ack_is_durable(&self) -> bool {
        self.attached.acks_are_durable()
    }
}

/// Attaches the journal on `jm` to `volume` as `raidkit serve` does at start: replay, then a
/// new session hooked into the write path.
pub fn attach(
    volume: &Arc<Volume>,
    jm: Arc<dyn Member>,
    context: &str,
) -> Arc<export::JournalLayer> {
    let jsb = journal::read_superblock(jm.as_ref())
        .unwrap_or_else(|e| panic!("{context}: journal superblock: {e}"));
    let (attached, _) = export::JournalLayer::attach(jm, jsb, volume, AttachOptions::default())
        .unwrap_or_else(|e| panic!("{context}: attaching the journal: {e}"));
    Arc::new(attached)
}

/// Clean shutdown of an attached journal around `Volume::close`, as `raidkit serve` does.
pub fn close(volume: &Volume, attached: &export::JournalLayer, context: &str) {
    attached
        .drain()
        .unwrap_or_else(|e| panic!("{context}: draining the journal: {e}"));
    (**volume)
        .close()
        .unwrap_or_else(|e| panic!("{context}: close after recovery: {e}"));
    attached
        .close()
        .unwrap_or_else(|e| panic!("{context}: closing the journal: {e}"));
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
    let target = JournalTarget::start(Arc::clone(&volume), jm);
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

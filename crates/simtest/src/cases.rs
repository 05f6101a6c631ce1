//! The cases a test runs: one seeded power loss (with or without a journal, with a second
//! loss during the recovery now and then), built by `rig`, recovered and checked by
//! `recover`. Here the harness's parts meet, so none of them needs another's case runner.

use std::sync::Arc;

use journal::Mode;
use layout::Level;
use member::{Member, SimMember, SimRng};
use ondisk::{create, CreateOptions, Uuid};
use volume::{assemble, AssembleOptions};

use crate::grid::{sub_seed, CutPolicy, PowerGrid};
use crate::recover::{recover_with, wait_recovered};
use crate::rig::{build, run_workload, Shape, DATA_OFFSET_BYTES};
use crate::with_journal::{JournalTarget, JOURNAL_BYTES};

/// A second power loss while the first one is being recovered from: assembles `images` on a
/// new grid, lets the resync of the dirty array run, and cuts the power again at a seeded
/// operation of it. Returns the new images and the cut point.
fn crash_during_recovery(
    images: Vec<Arc<SimMember>>,
    shape: &Shape,
    seed: u64,
    context: &str,
) -> (Vec<Arc<SimMember>>, u64) {
    let mut rng = SimRng::new(sub_seed(seed, 5_000));
    // A resync writes only what disagrees, then the superblocks (where no cut falls): most of
    // its operations come first.
    let cut_at = rng.below(2 * shape.member_count() as u64);
    let grid = PowerGrid::new(
        images,
        sub_seed(seed, 6_000),
        CutPolicy::OutsideSuperblockUpdates,
    );
    grid.arm(cut_at);
    let volume = assemble(grid.members(), &AssembleOptions::default())
        .unwrap_or_else(|e| panic!("{context}: first reassembly refused: {e}"));
    wait_recovered(&volume, context);
    if std::env::var("RAIDKIT_SIM_DEBUG").is_ok() {
        let mid = grid.is_cut();
        eprintln!(
            "seed {seed}: second cut_at {cut_at} mid-recovery {mid} ops {}",
            grid.ops_count()
        );
    }
    grid.cut_now();
    drop(volume);
    (grid.crashed_images(), cut_at)
}

/// Deliberate breakage, to prove the checks catch it (the harness's own tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sabotage {
    /// Member flushes do nothing (except for superblocks): acknowledged data is lost.
    pub lying_flush: bool,
    /// Recovery skips the resync of a dirty array: stale parity survives.
    pub skip_resync: bool,
}

/// One power-loss case of `level` with `seed`: panics with a description on any violation.
pub fn power_loss_case(level: Level, seed: u64) {
    power_loss_case_with(level, seed, Sabotage::default());
}

/// [`power_loss_case`] on an array with block checksums (`create --checksum`): the same
/// checks, so a torn update the recovery took for corruption (a read that fails on linear or
/// RAID 0, data "healed" to old bytes) fails the case.
pub fn power_loss_case_checksum(level: Level, seed: u64) {
    power_loss_case_shaped(level, seed, Sabotage::default(), true);
}

/// One case of the every-cut-point sweep: the array and one-thread workload `seed` gives for
/// `level` (block checksums on, no initial sync, so the member operation order is the same
/// in every run of the seed), the power cut before member operation `cut_at`, recovered and
/// checked as [`power_loss_case`] (every byte read, none may fail: a torn update must not be
/// taken for corruption, nor corruption healed with the wrong version). Returns false when
/// the run ended before `cut_at` (the sweep is over).
pub fn power_loss_checksum_at(level: Level, seed: u64, cut_at: u64) -> bool {
    let mut rng = SimRng::new(seed);
    let mut shape = Shape::random(level, &mut rng);
    shape.checksum = true;
    shape.initial_sync = false;
    shape.threads = 1;
    shape.ops_per_thread = 40;
    cut_and_recover(&shape, seed, cut_at, " (sweep)")
}

/// Builds `shape`, runs its workload with the power cut before member operation `cut_at`,
/// recovers and checks (`note` ends the context). Returns whether the cut fell in the run.
fn cut_and_recover(shape: &Shape, seed: u64, cut_at: u64, note: &str) -> bool {
    let (grid, volume) = build(shape, seed, CutPolicy::OutsideSuperblockUpdates, cut_at);
    let models = run_workload(shape, seed, &grid, &volume, volume.size_bytes());
    let cut = grid.is_cut();
    grid.cut_now();
    drop(volume);
    let images: Vec<Arc<dyn Member>> = (grid.crashed_images().into_iter())
        .map(|m| m as Arc<dyn Member>)
        .collect();
    let context = format!("{shape:?}, power cut before member op {cut_at}{note}");
    recover_with(shape, images, None, &models, seed, &context, false);
    cut
}

/// [`power_loss_case`] with the write-intent bitmap kept busy (`Shape::busy_bitmap`): two or
/// three threads writing over 4 KiB regions that the lazy clear keeps taking back, so bits
/// are set by shared update rounds while clears run. The recovery resyncs only the regions
/// whose bits survived: a data write that reached a member before its bit was durable, or a
/// clear that wrote a 0 over a bit a writer relied on, leaves a torn stripe the checks find.
pub fn power_loss_case_busy_bitmap(level: Level, seed: u64) {
    let mut rng = SimRng::new(seed);
    let mut shape = Shape::random(level, &mut rng);
    shape.busy_bitmap = true;
    shape.initial_sync = false;
    shape.threads = 2 + rng.below(2) as usize;
    let total_ops = (shape.threads * shape.ops_per_thread * (shape.member_count() + 1)) as u64;
    let cut_at = match rng.chance(1, 8) {
        true => u64::MAX,
        false => rng.below(total_ops + 1),
    };
    cut_and_recover(&shape, seed, cut_at, "");
}

/// [`power_loss_case`] with deliberate breakage.
pub fn power_loss_case_with(level: Level, seed: u64, sabotage: Sabotage) {
    power_loss_case_shaped(level, seed, sabotage, false);
}

fn power_loss_case_shaped(level: Level, seed: u64, sabotage: Sabotage, checksum: bool) {
    let mut rng = SimRng::new(seed);
    let mut shape = Shape::random(level, &mut rng);
    if checksum {
        shape.checksum = true;
        // Linear and RAID 0 have no initial sync to make checksums of unzeroed members right.
        shape.initial_sync &= level.has_redundancy();
    }
    let total_ops = (shape.threads * shape.ops_per_thread * (shape.member_count() + 1)) as u64;
    let cut_at = match rng.chance(1, 8) {
        true => u64::MAX,
        false => rng.below(total_ops + 1),
    };
    let (grid, volume) = build(&shape, seed, CutPolicy::OutsideSuperblockUpdates, cut_at);
    grid.set_lying_flush(sabotage.lying_flush);
    let models = run_workload(&shape, seed, &grid, &volume, volume.size_bytes());
    if std::env::var("RAIDKIT_SIM_DEBUG").is_ok() {
        eprintln!(
            "seed {seed}: cut_at {cut_at} mid-workload {} ops {}",
            grid.is_cut(),
            grid.ops_count()
        );
    }
    grid.cut_now();
    drop(volume);
    let mut images = grid.crashed_images();
    let mut context = format!("{shape:?}, power cut before member op {cut_at}");
    if shape.redundant() && rng.chance(1, 4) && sabotage == Sabotage::default() {
        let (second, again) = crash_during_recovery(images, &shape, seed, &context);
        images = second;
        context = format!("{context}, again before op {again} of the recovery");
    }
    let images: Vec<Arc<dyn Member>> = images.into_iter().map(|m| m as Arc<dyn Member>).collect();
    let context = match sabotage == Sabotage::default() {
        true => context,
        false => format!("{context}, sabotage {sabotage:?}"),
    };
    recover_with(
        &shape,
        images,
        None,
        &models,
        seed,
        &context,
        sabotage.skip_resync,
    );
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
    recover_with(&shape, images, jimage, &models, seed, &context, false);
}

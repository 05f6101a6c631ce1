//! Power lost during an offline reshape (`raidkit grow --add` on RAID 0/5/6, run as the
//! command runs it: `volume::grow::grow`), at every member operation of it, superblock writes
//! included (docs/DESIGN.md "Reshape").
//!
//! A case: a tiny array of `shape` is created on [`SimMember`]s and filled with a seeded
//! pattern (written, then closed cleanly), the new members are blank, and the grow runs behind
//! a [`PowerGrid`] armed to cut the power just before member operation `cut_at` (of the whole
//! grow: the record, every window, backup write, position record and the end). The crashed
//! images are then grown again the way a user does — the same call with the same members (a
//! degraded shape leaves one old member out of the rerun once the reshape is recorded; one
//! case in four has the rerun cut too, at a seeded operation, and runs it a third time) — and
//! checked: the array assembles, it has the new size, every byte of the old array reads back,
//! the grown part reads zero, RAID 5/6 parity agrees, and every byte reads the same with each
//! member (RAID 6 without a missing one: each further member) left out.

use std::io;
use std::sync::Arc;

use layout::Level;
use member::{Member, SimMember, SimRng};
use ondisk::{create, CreateOptions};
use volume::grow::{grow, GrowEvent, GrowOptions};
use volume::{assemble, AssembleOptions, Volume};

use crate::grid::{sub_seed, CutPolicy, PowerGrid};
use crate::recover::describe_superblocks;
use crate::rig::read_all;

/// Data area start on the members of a reshape case (room for the metadata and the backup
/// area of a RAID 6 with 8 KiB chunks).
pub const RESHAPE_DATA_OFFSET_BYTES: u64 = 128 * 1024;

/// One reshape to prove.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReshapeShape {
    pub level: Level,
    /// Members before and after.
    pub from: usize,
    pub to: usize,
    pub chunk_bytes: u64,
    /// Chunks per member's data area.
    pub rows: u64,
    /// The rerun after the cut leaves out this role's member (once the reshape was recorded
    /// on the others: before that the offline command refuses a degraded array).
    pub missing: Option<usize>,
}

impl ReshapeShape {
    /// `level` `from` -> `to` with a chunk and a row count from `seed` (4 or 8 KiB chunks,
    /// 6 to 11 rows), every member given to the rerun.
    pub fn seeded(level: Level, from: usize, to: usize, seed: u64) -> ReshapeShape {
        let mut rng = SimRng::new(sub_seed(seed, 5_000));
        ReshapeShape {
            level,
            from,
            to,
            chunk_bytes: if rng.chance(1, 2) { 4096 } else { 8192 },
            rows: 6 + rng.below(6),
            missing: None,
        }
    }

    /// The same, with the rerun leaving out a seeded old member (lost while the power was
    /// off).
    pub fn degraded(mut self, seed: u64) -> ReshapeShape {
        let mut rng = SimRng::new(sub_seed(seed, 5_001));
        self.missing = Some(rng.below(self.from as u64) as usize);
        self
    }

    fn member_bytes(&self) -> u64 {
        RESHAPE_DATA_OFFSET_BYTES + self.rows * self.chunk_bytes
    }
}

/// What the uncut grow of a shape does: its member operations (the cut points), and where
/// the record ends and where the backup area lies.
#[derive(Clone, Copy, Debug)]
pub struct ReshapeCount {
    /// Mutating member operations of the whole grow.
    pub ops: u64,
    /// Operations done when the reshape was recorded on every member (a cut at or past this
    /// finds the record).
    pub recorded_at: u64,
    pub backup_offset_bytes: u64,
    pub backup_bytes: u64,
}

/// Test-only sabotage of a case (the proof must catch each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReshapeSabotage {
    None,
    /// Writes to the backup areas are dropped (the members acknowledge them but keep their
    /// old bytes): the critical section has no backup.
    NoBackup {
        offset: u64,
        bytes: u64,
    },
}

fn pattern(len: u64, seed: u64) -> Vec<u8> {
    let mut rng = SimRng::new(sub_seed(seed, 5_100));
    let mut data = vec![0u8; len as usize];
    for piece in data.chunks_mut(8) {
        let v = rng.next_u64().to_le_bytes();
        piece.copy_from_slice(&v[..piece.len()]);
    }
    data
}

/// The old array of `shape` on fresh members (the old ones, then the new blank ones), filled
/// with the seeded pattern and closed cleanly. Returns the sims and the pattern.
fn build(shape: &ReshapeShape, seed: u64) -> (Vec<Arc<SimMember>>, Vec<u8>) {
    let sims: Vec<Arc<SimMember>> = (0..shape.to)
        .map(|i| Arc::new(SimMember::new(&format!("sim{i}"), shape.member_bytes())))
        .collect();
    let old: Vec<Arc<dyn Member>> = sims[..shape.from]
        .iter()
        .map(|s| s.clone() as Arc<dyn Member>)
        .collect();
    let mut opts = CreateOptions::new(shape.level, "reshape");
    opts.chunk_bytes = shape.chunk_bytes;
    opts.data_offset_bytes = RESHAPE_DATA_OFFSET_BYTES;
    opts.assume_clean = true;
    create(&old, &opts).unwrap_or_else(|e| panic!("create {shape:?}: {e}"));
    let volume = assemble(old, &AssembleOptions::default())
        .unwrap_or_else(|e| panic!("assemble {shape:?}: {e}"));
    let data = pattern(volume.size_bytes(), seed);
    volume.write(0, &data).expect("write the pattern");
    volume.close().expect("close the old array");
    drop(volume);
    (sims, data)
}

fn options(shape: &ReshapeShape) -> GrowOptions {
    let new_stripe = (shape.to - shape.level.parity_count()) as u64 * shape.chunk_bytes;
    GrowOptions {
        force: false,
        // One new stripe per window and a record at least every three: many windows, records
        // and critical-section steps in a tiny array.
        window_bytes: new_stripe,
        record_every_bytes: 3 * new_stripe,
    }
}

fn as_members(sims: &[Arc<SimMember>]) -> Vec<Arc<dyn Member>> {
    sims.iter().map(|s| s.clone() as Arc<dyn Member>).collect()
}

/// Runs the grow of `shape` uncut and counts its member operations.
pub fn count_reshape_ops(shape: &ReshapeShape, seed: u64) -> ReshapeCount {
    let (sims, _) = build(shape, seed);
    let grid = PowerGrid::new(sims, sub_seed(seed, 5_200), CutPolicy::Anywhere);
    grid.arm(u64::MAX);
    let members = grid.members();
    let mut recorded_at = 0;
    let mut backup = (0, 0);
    grow(
        &members[..shape.from],
        &members[shape.from..],
        &options(shape),
        &mut |event| {
            if let GrowEvent::Recorded(state) = event {
                recorded_at = grid.ops_count();
                backup = (state.record.backup_offset_bytes, state.record.backup_bytes);
            }
            Ok(())
        },
    )
    .unwrap_or_else(|e| panic!("{shape:?}: the uncut grow failed: {e}"));
    ReshapeCount {
        ops: grid.ops_count(),
        recorded_at,
        backup_offset_bytes: backup.0,
        backup_bytes: backup.1,
    }
}

/// One case: the grow of `shape` cut just before member operation `cut_at`, grown again,
/// checked. Panics naming the violation.
pub fn reshape_power_loss_case(
    shape: &ReshapeShape,
    seed: u64,
    cut_at: u64,
    count: &ReshapeCount,
    sabotage: ReshapeSabotage,
) {
    let context = format!("{shape:?} seed {seed}: power cut before grow op {cut_at}");
    let (sims, data) = build(shape, seed);
    let grid = PowerGrid::new(sims, sub_seed(seed, 5_300 + cut_at), CutPolicy::Anywhere);
    if let ReshapeSabotage::NoBackup { offset, bytes } = sabotage {
        grid.set_dropped_range(offset, bytes);
    }
    grid.arm(cut_at);
    let members = grid.members();
    let cut = |_: GrowEvent<'_>| match grid.is_cut() {
        true => Err(io::Error::other("the power is cut")),
        false => Ok(()),
    };
    let mut cut = cut;
    let first = grow(
        &members[..shape.from],
        &members[shape.from..],
        &options(shape),
        &mut cut,
    );
    if !grid.is_cut() {
        first.unwrap_or_else(|e| panic!("{context}: the grow failed before the cut: {e}"));
        grid.cut_now();
    }
    drop(members);
    let mut images = grid.crashed_images();
    // One time in four the rerun is cut too (at a seeded operation), and run a third time.
    let mut rng = SimRng::new(sub_seed(seed, 5_400 + cut_at));
    let second_cut = rng.chance(1, 4).then(|| rng.below(count.ops));
    // The rerun: every member, or (degraded) all but one once the reshape was recorded.
    let left_out = shape.missing.filter(|_| cut_at >= count.recorded_at);
    if let Some(cut2) = second_cut {
        let grid = PowerGrid::new(images, sub_seed(seed, 5_500 + cut_at), CutPolicy::Anywhere);
        grid.arm(cut2);
        let members = grid.members();
        let pick = |range: std::ops::Range<usize>| -> Vec<Arc<dyn Member>> {
            range
                .filter(|i| Some(*i) != left_out)
                .map(|i| members[i].clone())
                .collect()
        };
        let (old, new) = (pick(0..shape.from), pick(shape.from..shape.to));
        let mut cut = |_: GrowEvent<'_>| match grid.is_cut() {
            true => Err(io::Error::other("the power is cut")),
            false => Ok(()),
        };
        let second = grow(&old, &new, &options(shape), &mut cut);
        if !grid.is_cut() {
            second.unwrap_or_else(|e| {
                panic!("{context}: the rerun failed before its cut at op {cut2}: {e}")
            });
            grid.cut_now();
        }
        drop((old, new, members));
        images = grid.crashed_images();
    }
    let given = |range: std::ops::Range<usize>| -> Vec<Arc<dyn Member>> {
        range
            .filter(|i| Some(*i) != left_out)
            .map(|i| images[i].clone() as Arc<dyn Member>)
            .collect()
    };
    let (old, new) = (given(0..shape.from), given(shape.from..shape.to));
    let before = describe_superblocks(&as_members(&images));
    // The same call again, also when the grow had finished before the cut (it then says so
    // and changes nothing, or completes a last superblock rewrite the cut interrupted).
    if let Err(e) = grow(&old, &new, &options(shape), &mut |_| Ok(())) {
        panic!(
            "{context}: the rerun of the grow failed: {e}\nsuperblocks after the cut:\n{before}"
        );
    }
    // Nothing of the array is left in the backup areas of the members the reshape ended on.
    for (i, image) in images.iter().enumerate() {
        if Some(i) == left_out || count.backup_bytes == 0 {
            continue;
        }
        let mut area = vec![0u8; count.backup_bytes as usize];
        image
            .read_durable(&mut area, count.backup_offset_bytes)
            .expect("read the backup area");
        if let Some(at) = area.iter().position(|&b| b != 0) {
            panic!(
                "{context}: member {i}'s reshape backup area holds non-zero byte {at} after the \
                 grow (a copy of array data left behind)"
            );
        }
    }
    check_grown(shape, &images, left_out, &data, &context);
}

/// A copy of each member as it is (the rerun flushed everything).
fn copies(images: &[Arc<SimMember>]) -> Vec<Arc<dyn Member>> {
    images
        .iter()
        .map(|s| {
            assert_eq!(s.unflushed_count(), 0, "{} left unflushed", s.name());
            Arc::new(s.crash(0)) as Arc<dyn Member>
        })
        .collect()
}

fn open(members: Vec<Arc<dyn Member>>, context: &str, without: &[usize]) -> Volume {
    let described = describe_superblocks(&members);
    assemble(members, &AssembleOptions::default()).unwrap_or_else(|e| {
        panic!("{context}: assembly after the grow (without roles {without:?}) refused: {e}\n{described}")
    })
}

fn compare(image: &[u8], data: &[u8], context: &str, without: &[usize]) {
    if let Some(at) = image[..data.len()]
        .iter()
        .zip(data)
        .position(|(a, b)| a != b)
    {
        panic!(
            "{context}: without roles {without:?}, array byte {at} reads {:#04x}, the old \
             array held {:#04x}",
            image[at], data[at]
        );
    }
    if let Some(at) = image[data.len()..].iter().position(|&b| b != 0) {
        panic!(
            "{context}: without roles {without:?}, grown-part byte {} reads {:#04x}, not zero",
            data.len() + at,
            image[data.len() + at]
        );
    }
}

/// The grown array: new size, every byte, parity, and every byte with members left out.
fn check_grown(
    shape: &ReshapeShape,
    images: &[Arc<SimMember>],
    left_out: Option<usize>,
    data: &[u8],
    context: &str,
) {
    let data_bytes = shape.rows * shape.chunk_bytes;
    let parity = shape.level.parity_count();
    let new_size = (shape.to - parity) as u64 * data_bytes;
    let mut sets: Vec<Vec<usize>> = vec![left_out.into_iter().collect()];
    if shape.level.has_redundancy() {
        for r in 0..shape.to {
            let mut set: Vec<usize> = left_out.into_iter().collect();
            if set.contains(&r) {
                continue;
            }
            set.push(r);
            if set.len() <= parity {
                sets.push(set);
            }
        }
    }
    for without in sets {
        let members: Vec<Arc<dyn Member>> = copies(images)
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !without.contains(i))
            .map(|(_, m)| m)
            .collect();
        let volume = open(members, context, &without);
        assert_eq!(
            volume.size_bytes(),
            new_size,
            "{context}: without roles {without:?}, the array's size is not the grown size"
        );
        let image = read_all(&volume);
        compare(&image, data, context, &without);
        if without.is_empty() && shape.level.has_redundancy() {
            let report = volume
                .check()
                .unwrap_or_else(|e| panic!("{context}: check: {e}"));
            assert_eq!(
                report.mismatch_count,
                0,
                "{context}: parity mismatches after the grow: {:?}",
                report.mismatches.iter().take(4).collect::<Vec<_>>()
            );
        }
        drop(volume);
    }
}

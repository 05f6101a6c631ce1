//! Power lost while superblocks are being rewritten: the dirty mark before the first write, the
//! clean mark of `close`, each an events bump written and flushed member by member.
//!
//! A fixed script runs on a tiny array: write and flush (marks dirty), close (marks clean),
//! write and FUA, close, write (marks dirty again), flush, write, and on the redundant levels
//! close and a state change (a member failed: the role table rewritten). [`script_ops_count`] counts
//! its mutating member operations; [`torn_case`] cuts the power just before any one of them
//! (policy [`CutPolicy::Anywhere`]: superblock writes torn at sectors, some members rewritten
//! and others not), reassembles, and reports what assembly did. When it assembles, the data
//! the script had flushed must read back and redundancy must be consistent after recovery.

use std::sync::Arc;

use layout::Level;
use member::Member;
use ondisk::ArrayState;
use volume::{assemble, AssembleOptions, Volume};

use crate::grid::{CutPolicy, PowerGrid};
use crate::model::RegionModel;
use crate::rig::{build, freshest_state, read_all, Shape, DATA_OFFSET_BYTES};

/// What assembly made of the crashed images.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TornOutcome {
    /// Assembled (state of the freshest superblock); data and redundancy checked. `torn`: a
    /// torn superblock was rebuilt (the assembly's warnings say so).
    Assembled {
        state: ArrayState,
        degraded: bool,
        torn: bool,
    },
    /// Refused with this message.
    Refused(String),
}

/// The fixed shape the script runs on: `count` members of 2 chunks of 4 KiB.
pub fn torn_shape(level: Level, count: usize) -> Shape {
    Shape {
        level,
        chunk_bytes: 4096,
        member_bytes: vec![DATA_OFFSET_BYTES + 8192; count],
        threads: 1,
        ops_per_thread: 0,
        initial_sync: false,
        checksum: false,
        busy_bitmap: false,
    }
}

fn fill(len: u64, tag: u8) -> Vec<u8> {
    (0..len).map(|i| tag ^ (i as u8).wrapping_mul(31)).collect()
}

/// Runs the script; stops at the cut. Returns the model.
fn script(volume: &Volume, grid: &PowerGrid) -> RegionModel {
    let size = volume.size_bytes();
    let mut model = RegionModel::new(0, size);
    let steps: [(u64, u64, u8, &str); 4] = [
        (0, size, 0x11, "flush"),
        (size / 3, size / 2, 0x22, "fua-close"),
        (size / 5, size / 2, 0x33, "flush"),
        (size / 2, size / 2, 0x44, "none"),
    ];
    for (i, &(offset, len, tag, then)) in steps.iter().enumerate() {
        if grid.is_cut() {
            break;
        }
        let data = fill(len, tag);
        let seq = model.issue(offset, len, Some(&data));
        volume.write(offset, &data).expect("script write");
        let durable = match then {
            "flush" => volume.flush().map(|()| false),
            "fua-close" => volume.flush().map(|()| true),
            _ => Ok(false),
        };
        let fua = durable.expect("script flush");
        if !grid.is_cut() {
            match (then, fua) {
                ("flush", _) => model.flushed(),
                (_, true) => model.fua_done(seq),
                _ => {}
            }
        }
        if i < 2 && !grid.is_cut() {
            volume.close().expect("script close");
            if !grid.is_cut() {
                model.flushed();
            }
        }
    }
    if volume.level().has_redundancy() && !grid.is_cut() {
        // A state change on the closed (clean) array: member sim0 failed, the role table
        // rewritten (events + 1) on the others, one member at a time. (On a dirty array the
        // failure would leave RAID 5/6 dirty and degraded, which assembly refuses by design.)
        volume.close().expect("script close");
        if !grid.is_cut() {
            model.flushed();
            volume.fail("sim0").expect("script fail");
        }
    }
    model
}

/// Mutating member operations the script performs on `shape` (cut points are `0..=` this).
pub fn script_ops_count(shape: &Shape) -> u64 {
    let (grid, volume) = build(shape, 0, CutPolicy::Anywhere, u64::MAX);
    script(&volume, &grid);
    grid.ops_count()
}

/// Cuts the power just before member operation `cut_at` of the script, reassembles and checks.
pub fn torn_case(shape: &Shape, cut_at: u64, crash_seed: u64) -> TornOutcome {
    let (grid, volume) = build(shape, crash_seed, CutPolicy::Anywhere, cut_at);
    let model = script(&volume, &grid);
    grid.cut_now();
    drop(volume);
    let images: Vec<Arc<dyn Member>> = grid
        .crashed_images()
        .into_iter()
        .map(|m| m as Arc<dyn Member>)
        .collect();
    let context = format!("{shape:?}, cut before member op {cut_at}, crash seed {crash_seed}");
    match assemble(images.clone(), &AssembleOptions::default()) {
        Err(e) => TornOutcome::Refused(e.to_string()),
        Ok(volume) => verify(shape, &images, &volume, &model, &context),
    }
}

fn verify(
    shape: &Shape,
    images: &[Arc<dyn Member>],
    volume: &Volume,
    model: &RegionModel,
    context: &str,
) -> TornOutcome {
    let readable: Vec<&Arc<dyn Member>> = images
        .iter()
        .filter(|m| ondisk::read_superblock(m.as_ref()).is_ok())
        .collect();
    let owned: Vec<Arc<dyn Member>> = readable.into_iter().cloned().collect();
    let state = freshest_state(&owned);
    let degraded = !volume.missing_roles().is_empty();
    let torn = (volume.warnings().iter()).any(|w| w.contains("torn by a power cut"));
    crate::recover::wait_recovered(volume, context);
    let image = read_all(volume);
    if let Err(e) = model.check_after_crash(&image) {
        panic!("{context}: assembled, but the data is wrong: {e}");
    }
    if shape.redundant() && !degraded {
        let report = volume.check().expect("check");
        assert_eq!(report.mismatch_count, 0, "{context}: mismatches {report:?}");
    }
    TornOutcome::Assembled {
        state,
        degraded,
        torn,
    }
}

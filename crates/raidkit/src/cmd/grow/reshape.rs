//! `raidkit grow --add` on RAID 0/5/6, offline: runs `engine::reshape`'s mover over the
//! stopped array's members (two engine arrays on their data areas, the backup area of every
//! member, the position recorded in the superblocks), then records the new geometry
//! (docs/DESIGN.md "Reshape").

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use engine::reshape::{self, ArrayTarget, BackupArea, ReshapePlan, RunOptions};
use engine::{Array, ArrayConfig};
use indicatif::{ProgressBar, ProgressStyle};
use member::{Member, Window};
use ondisk::{GrowReport, Reshaping};

/// Window of the copy outside the critical section (rounded to new stripes).
const WINDOW_BYTES: u64 = 4 << 20;
/// The position is recorded at least this often (bounds the work redone after a stop).
const RECORD_EVERY_BYTES: u64 = 256 << 20;

/// Moves the data of the array mid-reshape in `state` (`members`: the order of `state.sbs`)
/// from its recorded position to the end, then records the new geometry.
pub fn run(members: &[Arc<dyn Member>], state: Reshaping) -> anyhow::Result<GrowReport> {
    let array = state.array.clone();
    let fresh = state.fresh.clone();
    let fresh = &fresh;
    let roles = state.roles.clone();
    let record = state.record;
    assert_eq!(
        BackupArea::bytes_per_member(&state.new),
        record.backup_bytes,
        "the backup area the superblock records is the mover's"
    );
    let data_bytes = fresh.roles[0].data_bytes;
    let window_of = |r: usize, offset: u64, len: u64| -> Option<Arc<dyn Member>> {
        roles[r].map(|i| Arc::new(Window::new(members[i].clone(), offset, len)) as Arc<dyn Member>)
    };
    let data = |count: usize| -> Vec<Option<Arc<dyn Member>>> {
        (0..count)
            .map(|r| window_of(r, fresh.data_offset_bytes, data_bytes))
            .collect()
    };
    let array_of = |count: usize| -> anyhow::Result<Array> {
        let a = Array::new(
            ArrayConfig {
                level: fresh.level,
                chunk_bytes: fresh.chunk_bytes,
                member_count: count,
                member_data_bytes: vec![data_bytes; count],
            },
            data(count),
        )
        .with_context(|| format!("array {array}: cannot build the {count}-member geometry"))?;
        a.set_gather_wait(Duration::ZERO);
        Ok(a)
    };
    let n = record.old_member_count as usize;
    let m = fresh.member_count as usize;
    let plan = ReshapePlan::new(state.old.clone(), state.new.clone(), WINDOW_BYTES)
        .map_err(|e| anyhow::anyhow!("array {array}: {e}"))?;
    let backup = BackupArea::new(
        (0..m)
            .map(|r| window_of(r, record.backup_offset_bytes, record.backup_bytes))
            .collect(),
        &state.new,
        record.generation,
    );
    let p_rec = record.position_bytes;
    let used = ondisk::reshape_used_image(members, &state)?;
    let shared = Arc::new(Mutex::new(state));
    let recorder_state = shared.clone();
    let recorder_members: Vec<Arc<dyn Member>> = members.to_vec();
    let target = ArrayTarget {
        old: array_of(n)?,
        new: array_of(m)?,
        backup,
        recorder: Box::new(move |p| {
            let mut state = recorder_state.lock().unwrap();
            ondisk::reshape_record_position(&recorder_members, &mut state, p)
                .map_err(std::io::Error::other)
        }),
        used,
    };
    let failed = |e: std::io::Error| {
        anyhow::anyhow!(
            "array {array}: the reshape stopped: {e}; nothing is lost: run the same raidkit grow \
             command again to resume it"
        )
    };
    let p = reshape::resume(&plan, &target, p_rec).map_err(failed)?;
    let end = plan.end();
    let tty = std::io::stdout().is_terminal();
    let bar = tty.then(|| {
        let bar = ProgressBar::new(end);
        let style = ProgressStyle::with_template(
            "{prefix:<16} [{bar:40}] {percent:>3}% {bytes}/{total_bytes} at {bytes_per_sec}, ETA {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix("reshape");
        bar.set_position(p);
        bar
    });
    let started = Instant::now();
    let mut last_line: Option<Instant> = None;
    reshape::run(
        &plan,
        &target,
        p,
        p_rec,
        RunOptions {
            record_every_bytes: RECORD_EVERY_BYTES,
            progress: &mut |at| {
                match &bar {
                    Some(bar) => bar.set_position(at),
                    None => {
                        if last_line.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                            last_line = Some(Instant::now());
                            println!(
                                "raidkit: reshape at array byte {at} of {end} ({:.1}%, {:.1} s)",
                                at as f64 * 100.0 / end as f64,
                                started.elapsed().as_secs_f64()
                            );
                        }
                    }
                }
                Ok(())
            },
        },
    )
    .map_err(failed)?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    drop(target);
    let state = Arc::try_unwrap(shared)
        .map_err(|_| anyhow::anyhow!("the recorder still holds the state"))?
        .into_inner()
        .unwrap();
    Ok(ondisk::reshape_finish(members, &state)?)
}

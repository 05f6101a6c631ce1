//! One power-loss case: build a tiny array on [`SimMember`]s behind a [`PowerGrid`], run a
//! seeded workload (one or several threads, each with its own [`RegionModel`]), cut the power,
//! reassemble from the crashed images, let recovery run and check everything the durability
//! contract promises. Every choice comes from the case's seed.

use std::sync::Arc;

use layout::Level;
use member::{Member, SimMember, SimRng};
use ondisk::{create, ArrayState, CreateOptions};
use volume::{assemble, AssembleOptions, Volume};

use crate::grid::{sub_seed, CutPolicy, PowerGrid};
use crate::model::{RegionModel, MAYBE_OPS_MAX};

/// Data area start on every simulated member (room for the superblock and a write-intent
/// bitmap).
pub const DATA_OFFSET_BYTES: u64 = 64 * 1024;

/// The array a case builds and the workload it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    pub level: Level,
    pub chunk_bytes: u64,
    /// Whole member sizes (superblock area included).
    pub member_bytes: Vec<u64>,
    pub threads: usize,
    pub ops_per_thread: usize,
    /// Let the new array run its background initial sync during the workload (members named
    /// `simN` are not "cheap to zero" for `create`); else create with `assume_clean`. The
    /// sync's timing makes a case's member operation order depend on the scheduler.
    pub initial_sync: bool,
    /// Keep block checksums (`create --checksum`): recovery must then read every block
    /// without a false mismatch.
    pub checksum: bool,
    /// 4 KiB write-intent bitmap regions (else create's 64 MiB: one region for these arrays),
    /// a lazy clear with no idle time and a seeded pause of up to 3 ms between a thread's
    /// steps: concurrent writers keep meeting clean regions (their bits set in shared update
    /// rounds) while the clear takes regions back behind them.
    pub busy_bitmap: bool,
}

fn pick<T: Copy>(rng: &mut SimRng, items: &[T]) -> T {
    items[rng.below(items.len() as u64) as usize]
}

fn member_count_range(level: Level) -> (u64, u64) {
    match level {
        Level::Linear => (1, 4),
        Level::Raid0 => (2, 4),
        Level::Raid1 => (2, 3),
        Level::Raid10 => (2, 5),
        Level::Raid5 => (3, 6),
        Level::Raid6 => (4, 6),
    }
}

impl Shape {
    /// A small random array of `level` and a workload for it.
    pub fn random(level: Level, rng: &mut SimRng) -> Shape {
        let (lo, hi) = member_count_range(level);
        let count = (lo + rng.below(hi - lo + 1)) as usize;
        let chunk_bytes = pick(rng, &[4096, 4096, 8192, 16384]);
        let rows = 2 + rng.below(4);
        let mut member_bytes: Vec<u64> = (0..count)
            .map(|_| match level {
                Level::Linear => 4096 * (1 + rng.below(8)),
                _ => chunk_bytes * rows,
            })
            .collect();
        if rng.chance(1, 4) {
            // A bigger member: only the smallest size is used (except linear).
            member_bytes[rng.below(count as u64) as usize] += 4096;
        }
        let threads = if rng.chance(1, 4) {
            2 + rng.below(2)
        } else {
            1
        };
        Shape {
            level,
            chunk_bytes,
            member_bytes: member_bytes.iter().map(|b| b + DATA_OFFSET_BYTES).collect(),
            threads: threads as usize,
            ops_per_thread: 8 + rng.below(33) as usize,
            initial_sync: rng.chance(1, 3),
            checksum: false,
            busy_bitmap: false,
        }
    }

    pub fn member_count(&self) -> usize {
        self.member_bytes.len()
    }

    pub fn redundant(&self) -> bool {
        self.level.has_redundancy()
    }
}

/// A new array of `shape` on fresh simulated members behind a grid, armed to cut the power
/// before member operation `cut_at` counted from just after `create` (so the operations of
/// the background work assembly starts are counted too).
pub fn build(shape: &Shape, seed: u64, policy: CutPolicy, cut_at: u64) -> (Arc<PowerGrid>, Volume) {
    let sims: Vec<Arc<SimMember>> = shape
        .member_bytes
        .iter()
        .enumerate()
        .map(|(i, &bytes)| Arc::new(SimMember::new(&format!("sim{i}"), bytes)))
        .collect();
    let grid = PowerGrid::new(sims, sub_seed(seed, 1_000), policy);
    let members = grid.members();
    let mut opts = CreateOptions::new(shape.level, "crash");
    opts.chunk_bytes = shape.chunk_bytes;
    opts.data_offset_bytes = DATA_OFFSET_BYTES;
    opts.assume_clean = !shape.initial_sync;
    if shape.checksum {
        opts.checksum = Some(ondisk::ChecksumAlg::Crc32c);
    }
    if shape.busy_bitmap {
        opts.bitmap_region_bytes = Some(4096);
    }
    create(&members, &opts).unwrap_or_else(|e| panic!("create {shape:?}: {e}"));
    grid.arm(cut_at);
    let volume = assemble(members, &AssembleOptions::default())
        .unwrap_or_else(|e| panic!("assemble a new array {shape:?}: {e}"));
    if shape.busy_bitmap {
        volume.set_bitmap_idle(std::time::Duration::ZERO);
    }
    (grid, volume)
}

/// Splits `[0, size)` into `count` ranges at random (unaligned) points: threads share stripes.
fn regions(size: u64, count: usize, rng: &mut SimRng) -> Vec<(u64, u64)> {
    assert!(size >= count as u64 * 4096);
    let mut cuts: Vec<u64> = (1..count)
        .map(|i| size * i as u64 / count as u64 + rng.below(2048) - 1024)
        .collect();
    cuts.insert(0, 0);
    cuts.push(size);
    cuts.windows(2).map(|w| (w[0], w[1] - w[0])).collect()
}

fn random_bytes(rng: &mut SimRng, len: u64) -> Vec<u8> {
    let mut data = vec![0u8; len as usize];
    for piece in data.chunks_mut(8) {
        let v = rng.next_u64().to_le_bytes();
        piece.copy_from_slice(&v[..piece.len()]);
    }
    data
}

/// A random `(offset, len)` inside the model's region: small, chunk-sized or region-wide.
fn random_range(rng: &mut SimRng, model: &RegionModel, chunk_bytes: u64) -> (u64, u64) {
    let region = model.len();
    let max = match rng.below(3) {
        0 => region.min(600),
        1 => region.min(2 * chunk_bytes),
        _ => region,
    };
    let len = 1 + rng.below(max);
    let offset = model.start() + rng.below(region - len + 1);
    (offset, len)
}

/// What a workload drives: the volume itself, or a journal in front of it.
pub trait Target: Sync {
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()>;
    fn read(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()>;
    fn flush(&self) -> std::io::Result<()>;
    fn trim(&self, offset: u64, len: u64) -> std::io::Result<()>;
    fn write_zeroes(&self, offset: u64, len: u64) -> std::io::Result<()>;
    /// A clean close that leaves the target usable (`Volume::close`); `None`: not offered.
    fn close(&self) -> Option<std::io::Result<()>>;
    /// Every acknowledged write is durable (a write-back journal).
    fn ack_is_durable(&self) -> bool;
}

impl Target for Volume {
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        Ok(Volume::write(self, offset, data)?)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        Ok(Volume::read(self, offset, buf)?)
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(Volume::flush(self)?)
    }
    fn trim(&self, offset: u64, len: u64) -> std::io::Result<()> {
        Ok(Volume::trim(self, offset, len)?)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> std::io::Result<()> {
        Ok(Volume::write_zeroes(self, offset, len)?)
    }
    fn close(&self) -> Option<std::io::Result<()>> {
        Some(Volume::close(self).map_err(Into::into))
    }
    fn ack_is_durable(&self) -> bool {
        false
    }
}

/// What a workload step does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Write { fua: bool },
    Trim,
    Zero,
    Flush,
    Read,
    Close,
}

fn random_step(rng: &mut SimRng, model: &RegionModel) -> Step {
    if model.maybe_count() + 1 >= MAYBE_OPS_MAX {
        return Step::Flush;
    }
    match rng.below(100) {
        0..45 => Step::Write {
            fua: rng.chance(1, 4),
        },
        45..53 => Step::Trim,
        53..61 => Step::Zero,
        61..78 => Step::Flush,
        78..97 => Step::Read,
        _ => Step::Close,
    }
}

/// One thread's workload on its region until `ops` steps are done or the power is cut, with
/// a seeded pause of up to `pause_max` before each step.
pub fn drive(
    volume: &dyn Target,
    grid: &PowerGrid,
    model: &mut RegionModel,
    rng: &mut SimRng,
    ops: usize,
    chunk_bytes: u64,
    pause_max: std::time::Duration,
) {
    for _ in 0..ops {
        if grid.is_cut() {
            return;
        }
        if !pause_max.is_zero() {
            let micros = rng.below(pause_max.as_micros() as u64 + 1);
            std::thread::sleep(std::time::Duration::from_micros(micros));
        }
        let step = random_step(rng, model);
        let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
            panic!("{what} failed on a healthy simulated array: {e}")
        };
        match step {
            Step::Write { fua } => {
                let (offset, len) = random_range(rng, model, chunk_bytes);
                let data = random_bytes(rng, len);
                let seq = model.issue(offset, len, Some(&data));
                volume
                    .write(offset, &data)
                    .unwrap_or_else(|e| fail("write", &e));
                if volume.ack_is_durable() && !grid.is_cut() {
                    model.fua_done(seq);
                } else if fua {
                    volume.flush().unwrap_or_else(|e| fail("FUA flush", &e));
                    if !grid.is_cut() {
                        model.fua_done(seq);
                    }
                }
            }
            Step::Trim | Step::Zero => {
                let (offset, len) = random_range(rng, model, chunk_bytes);
                model.issue(offset, len, None);
                let result = match step {
                    Step::Trim => volume.trim(offset, len),
                    _ => volume.write_zeroes(offset, len),
                };
                result.unwrap_or_else(|e| fail("trim/write-zeroes", &e));
            }
            Step::Flush | Step::Close => {
                let result = match step {
                    Step::Flush => volume.flush(),
                    _ => volume.close().unwrap_or_else(|| volume.flush()),
                };
                result.unwrap_or_else(|e| fail("flush/close", &e));
                if !grid.is_cut() {
                    model.flushed();
                }
            }
            Step::Read => {
                let (offset, len) = random_range(rng, model, chunk_bytes);
                let mut buf = vec![0u8; len as usize];
                volume
                    .read(offset, &mut buf)
                    .unwrap_or_else(|e| fail("read", &e));
                model
                    .check_live(offset, &buf)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
}

/// Runs the workload of `shape` on `volume` (of `size` bytes): threads on disjoint regions;
/// returns the models.
pub fn run_workload(
    shape: &Shape,
    seed: u64,
    grid: &PowerGrid,
    volume: &dyn Target,
    size: u64,
) -> Vec<RegionModel> {
    let mut rng = SimRng::new(sub_seed(seed, 2_000));
    // Each region at least 4 KiB (tiny linear / RAID 1 arrays get fewer threads).
    let threads = shape.threads.min((size / 8192).max(1) as usize);
    let regions = regions(size, threads, &mut rng);
    let mut models: Vec<RegionModel> = regions
        .iter()
        .map(|&(start, len)| RegionModel::new(start, len))
        .collect();
    let chunk = shape.chunk_bytes;
    let ops = shape.ops_per_thread;
    let pause = match shape.busy_bitmap {
        true => std::time::Duration::from_millis(3),
        false => std::time::Duration::ZERO,
    };
    if models.len() == 1 {
        drive(volume, grid, &mut models[0], &mut rng, ops, chunk, pause);
        return models;
    }
    std::thread::scope(|scope| {
        for (t, model) in models.iter_mut().enumerate() {
            let mut rng = SimRng::new(sub_seed(seed, 3_000 + t as u64));
            scope.spawn(move || drive(volume, grid, model, &mut rng, ops, chunk, pause));
        }
    });
    models
}

/// The state recorded by the freshest superblock among `members`.
pub fn freshest_state(members: &[Arc<dyn Member>]) -> ArrayState {
    let sbs = members.iter().map(|m| {
        ondisk::read_superblock(m.as_ref()).unwrap_or_else(|e| panic!("member {}: {e}", m.name()))
    });
    let freshest = sbs.max_by_key(|sb| sb.events).expect("members");
    freshest.state
}

/// Reads the whole array.
pub fn read_all(volume: &Volume) -> Vec<u8> {
    let mut image = vec![0u8; volume.size_bytes() as usize];
    volume
        .read(0, &mut image)
        .unwrap_or_else(|e| panic!("read the whole array: {e}"));
    image
}

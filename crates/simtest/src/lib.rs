//! Crash-consistency simulation for raidkit (test-only crate).
//!
//! The main types:
//! - [`PowerGrid`] and [`GridMember`]: `member::SimMember`s on one power supply; every member
//!   operation is serialised and numbered, and the power of all members is cut at once just
//!   before a chosen operation ([`CutPolicy`] says whether a cut may fall inside a superblock
//!   rewrite). The cut keeps each member's durable data plus a seeded subset of its unflushed
//!   writes, torn at 512-byte sectors.
//! - [`RegionModel`]: what a byte range may hold after the cut — its value at the last completed
//!   FLUSH (or FUA write), or the value of any write issued after it.
//! - [`Shape`] and [`power_loss_case`]: one seeded case — a tiny array of any level, a workload
//!   of writes (some FUA), flushes, trims, write-zeroes, reads and clean closes from one or
//!   several threads, a power cut, reassembly, recovery and the checks of
//!   [`recover_and_verify`].
//! - [`torn_case`]: power lost while superblocks are rewritten (dirty/clean marking), and
//!   what assembly makes of it ([`TornOutcome`]).
//! - [`journal_case`]: the same with a journal ([`JournalTarget`], wired as `raidkit serve` wires
//!   it) on its own simulated member, replayed after the cut.
//! - [`ReshapeShape`] and [`reshape_power_loss_case`]: power lost before any member operation
//!   of an offline `grow --add` (RAID 0/5/6), the grow run again, every byte checked.
//! - [`SeedRun`] and [`run_seeds`]: the seeds a test runs (`RAIDKIT_SEED`, `RAIDKIT_SIM_SEEDS`,
//!   `RAIDKIT_SOAK`) and the replay command printed on failure.
//!
//! ```
//! use simtest::power_loss_case;
//! power_loss_case("raid5".parse().unwrap(), 42); // panics, naming the violation, on a bug
//! ```

mod cases;
mod grid;
mod model;
mod recover;
mod reshape;
mod rig;
mod seeds;
mod torn;
mod with_journal;

pub use cases::{
    journal_case, journal_case_ordered, power_loss_case, power_loss_case_busy_bitmap,
    power_loss_case_checksum, power_loss_case_with, power_loss_checksum_at, ReplayOrder, Sabotage,
};
pub use grid::{sub_seed, CutPolicy, GridMember, PowerGrid};
pub use model::{RegionModel, MAYBE_OPS_MAX};
pub use recover::{
    recover_and_verify, recover_with, removal_sets, wait_recovered, RECOVERY_TIMEOUT,
};
pub use reshape::{
    count_reshape_ops, reshape_power_loss_case, ReshapeCount, ReshapeSabotage, ReshapeShape,
    RESHAPE_DATA_OFFSET_BYTES,
};
pub use rig::{
    build, drive, freshest_state, read_all, run_workload, Shape, Target, DATA_OFFSET_BYTES,
};
pub use seeds::{run_seeds, SeedRun, SOAK_FACTOR};
pub use torn::{script_ops_count, torn_case, torn_shape, TornOutcome};
pub use with_journal::{JournalTarget, JOURNAL_BYTES};

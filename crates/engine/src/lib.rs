//! The array data path of raidkit: one logical block device over a set of members.
//!
//! - [`Array`]: built from an [`ArrayConfig`] and the members' data areas
//!   (`Vec<Option<Arc<dyn member::Member>>>`, `None` = missing). It serves `read`, `write`,
//!   `flush`, `trim` and `write_zeroes` at any byte offset and length, for every level of
//!   [`layout::Level`], healthy or degraded, and `check` ([`CheckReport`]) compares parity and
//!   mirrors. `fail_member` stops using a member.
//! - [`IoError`]: a member operation failed (naming the member, the operation and the offset)
//!   or the array lost too many members; [`EngineError`]: the array cannot be built.
//! - Fault handling ([`FaultPolicy`], [`MemberHealth`], [`FaultStats`]): every member request
//!   is timed and judged in one place; write errors and timeouts fail the member (the array goes
//!   on degraded), read errors are repaired from redundancy and counted. Members move between
//!   `InSync`, `Faulty`, `Missing` and `Recovering` by explicit transitions (`health`).
//! - Background primitives used by `volume`'s worker: `attach_member` + `rebuild_step` +
//!   `finish_rebuild` (rebuild; [`RebuildPipeline`] overlaps one step's write with the next
//!   step's reads), `start_replace` + `replace_step` + `finish_replace` (replace),
//!   `sync_unit` with [`SyncMode`] (scrub, repair with RAID 6 single-member location, resync).
//! - [`ParityTrust`]: set by `volume` while an initial sync or resync is pending, it names
//!   the RAID 5/6 stripes whose parity may disagree with their data; writes there regenerate
//!   parity from the data (never read-modify-write), so they survive a member loss.
//!
//! Inside: each level's data path is a `LevelIo` (`levels`), chosen once from the level:
//! `levels::single_copy` (linear, RAID 0) and `levels::mirror` (RAID 1, 10) over `plain`,
//! the pieces path; `levels::raid56` (RAID 5, 6: stripe plans choosing read-modify-write or
//! reconstruct-write, stripe check and reconstruction); `levels::repair` read-error repair. A
//! level works on the array's `parts` (never the `Array`): `members` is the member table
//! (members, health and its one transition function, fault counters, the state epoch), `locks`
//! the bounded stripe-lock table, `io` the one place member I/O happens (fanned out over
//! members in parallel). `recover` holds rebuild and replace, `scrub` the per-unit
//! check/repair/resync.
//!
//! ```
//! use engine::{Array, ArrayConfig};
//! use member::{Member, MemMember};
//! use std::sync::Arc;
//! let members: Vec<Option<Arc<dyn Member>>> = (0..3)
//!     .map(|i| Some(Arc::new(MemMember::new(&format!("mem{i}"), 1 << 20).unwrap()) as Arc<dyn Member>))
//!     .collect();
//! let config = ArrayConfig {
//!     level: "raid5".parse().unwrap(),
//!     chunk_bytes: 64 * 1024,
//!     member_count: 3,
//!     member_data_bytes: vec![1 << 20; 3],
//! };
//! let array = Array::new(config, members).unwrap();
//! array.write(12345, b"hello").unwrap();
//! array.fail_member(1);
//! let mut buf = [0u8; 5];
//! array.read(12345, &mut buf).unwrap();
//! assert_eq!(&buf, b"hello");
//! ```

mod array;
mod error;
mod gather;
mod health;
mod io;
mod levels;
mod locks;
mod members;
mod parts;
mod plain;
mod rebuild_pipeline;
mod recover;

/// Granularity of bad-block records made by a rebuild or a repair: a step that meets a range no
/// member can provide is redone in pieces of this size, and each piece that fails is recorded
/// whole. (At the crate root: `recover` and `levels::repair` both use it, and neither may name
/// the other back.)
pub const LOST_PIECE_BYTES: u64 = 4096;
mod report;
pub mod reshape;
mod scratch;
mod scrub;
mod speed;
mod state;
mod trust;
mod unsynced;
mod write_log;

pub use array::{Array, ArrayConfig};
pub use error::{EngineError, IoError, Op};
pub use gather::GATHER_WAIT_DEFAULT;
pub use io::FANOUT_MIN_BYTES_DEFAULT;
pub use journal::DataSource;
pub use layout::{Geometry, Level};
pub use locks::STRIPE_LOCKS_COUNT;
pub use rebuild_pipeline::RebuildPipeline;
pub use report::{
    CheckReport, Mismatch, MismatchKind, SyncMode, UnitReport, MISMATCHES_REPORTED_MAX,
};
pub use scratch::SCRATCH_IDLE_MAX_BYTES_DEFAULT;
pub use speed::{MemberSpeed, ReadBalance, SlowPolicy, PROBE_AFTER_PASSES, SLOW_MIN_OPS};
pub use state::{is_no_space, FaultPolicy, FaultReason, FaultStats, MemberHealth};
pub use trust::ParityTrust;
pub use unsynced::UNSYNCED_RANGES_MAX;

/// How a discarded range is passed to members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Discard {
    Trim,
    Zero,
}

impl Discard {
    pub(crate) fn op(self, role: usize, offset: u64, len: u64) -> io::MemOp<'static> {
        match self {
            Discard::Trim => io::MemOp::Trim { role, offset, len },
            Discard::Zero => io::MemOp::Zero { role, offset, len },
        }
    }
}

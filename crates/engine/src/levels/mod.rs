//! Each level's data path behind one trait, [`LevelIo`]: reads, writes and discards, the
//! check and sync of one unit, and reconstruction of a member range from redundancy. Where
//! the bytes live, what a level survives and its units are `layout`'s per-level rules
//! (`Geometry`); the data path differs by how a level keeps redundancy, so there are three:
//!
//! - linear and RAID 0, one copy ([`single_copy`]);
//! - RAID 1 and RAID 10, copies ([`mirror`]);
//! - RAID 5 and RAID 6, parity ([`raid56`]).
//!
//! An `Array` holds the `&'static dyn LevelIo` of its level (built here, by [`for_level`],
//! the one place in the engine that names levels) and calls it once per request or unit:
//! the per-byte work stays in the level's own loops. A level sees the array's [`Parts`] (member
//! I/O, stripe locks, geometry, scratch, gathering, journal, parity trust), never the `Array`;
//! read errors are repaired from its redundancy by [`repair`].

pub(crate) mod mirror;
pub(crate) mod raid56;
pub(crate) mod repair;
pub(crate) mod single_copy;

use crate::error::IoError;
use crate::parts::Parts;
use crate::plain;
use crate::report::{CheckReport, SyncMode, UnitReport};
use crate::Discard;
use journal::DataSource;
use layout::Level;
use repair::recovering;

/// One level family's data path over an array's [`Parts`] (its geometry says where bytes
/// live). The defaults are the pieces path (`plain`) of the levels without parity.
pub(crate) trait LevelIo: Sync {
    /// Reads `buf.len()` bytes at `offset` (the caller repairs read errors: `repair`).
    fn read(&self, io: &Parts, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        plain::read(io, offset, buf)
    }

    /// Writes `buf` at `offset`, keeping every copy and parity block consistent, repairing
    /// read errors on the way (where the retries go is the level's choice: RAID 5/6 retries
    /// each part of a gathered write).
    fn write(&self, io: &Parts, offset: u64, buf: &[u8]) -> Result<(), IoError> {
        recovering(self, io, || plain::write(io, offset, buf))
    }

    /// A write-back apply's write (`Array::write_applied`): as [`LevelIo::write`] of each
    /// piece (sorted by offset, disjoint), except that a level logging its writes logs the
    /// data by reference to the `sources` holding it, and may write pieces sharing a stripe
    /// together.
    fn write_applied(
        &self,
        io: &Parts,
        pieces: &[(u64, &[u8])],
        _sources: &[DataSource],
    ) -> Result<(), IoError> {
        for &(offset, buf) in pieces {
            self.write(io, offset, buf)?;
        }
        Ok(())
    }

    /// Trims or zeroes `[offset, offset+len)` (the caller repairs read errors).
    fn discard(&self, io: &Parts, offset: u64, len: u64, how: Discard) -> Result<(), IoError> {
        plain::discard(io, offset, len, how)
    }

    /// Compares the redundancy of unit `unit` (< `Geometry::sync_unit_count`), under its lock.
    fn check_unit(&self, io: &Parts, unit: u64, out: &mut CheckReport) -> Result<(), IoError>;

    /// Checks (and in `Repair`/`Resync` fixes) unit `unit`, under its lock.
    fn sync_unit(&self, io: &Parts, unit: u64, mode: SyncMode) -> Result<UnitReport, IoError>;

    /// What `lost.role` should hold at `[lost.offset, lost.offset + buf.len())`, from the
    /// `lost.readable` members (the caller checked they survive and holds the rows' locks).
    fn reconstruct(&self, io: &Parts, lost: &Lost<'_>, buf: &mut [u8]) -> Result<(), IoError>;

    /// True when member rows of `[offset, offset+len)` cannot be reconstructed correctly yet
    /// (RAID 5/6 stripes whose parity is untrusted, see [`crate::ParityTrust`]).
    fn rows_untrusted(&self, _io: &Parts, _offset: u64, _len: u64) -> bool {
        false
    }
}

/// A member range to reconstruct, and from what.
pub(crate) struct Lost<'a> {
    pub role: usize,
    /// Member offset of the range.
    pub offset: u64,
    /// The members to read from (`readable[role]` is false).
    pub readable: &'a [bool],
    /// Keep read buffers for this thread's next call (background rebuild steps only, so the
    /// memory held stays bounded by one worker's step).
    pub reuse: bool,
}

/// The data path of `level`.
pub(crate) fn for_level(level: Level) -> &'static dyn LevelIo {
    match level {
        Level::Linear | Level::Raid0 => &single_copy::SingleCopy,
        Level::Raid1 | Level::Raid10 => &mirror::Mirror,
        Level::Raid5 | Level::Raid6 => &raid56::Parity,
    }
}

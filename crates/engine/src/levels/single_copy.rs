//! Linear and RAID 0: one copy of every byte, no redundancy. Reads, writes and discards go
//! through the pieces path (`plain`) without locks (one copy cannot disagree with another);
//! there is nothing to check, resync or reconstruct from, and the array never asks (it has no
//! sync units and refuses rebuilds and replaces: `Geometry::has_redundancy`).

use super::{LevelIo, Lost};
use crate::error::IoError;
use crate::parts::Parts;
use crate::report::{CheckReport, SyncMode, UnitReport};

/// The data path of the levels without redundancy.
pub(crate) struct SingleCopy;

impl LevelIo for SingleCopy {
    fn check_unit(&self, io: &Parts, unit: u64, _: &mut CheckReport) -> Result<(), IoError> {
        panic!("{} has no units to check ({unit})", io.geometry.level())
    }

    fn sync_unit(&self, io: &Parts, unit: u64, _: SyncMode) -> Result<UnitReport, IoError> {
        panic!("{} has no units to sync ({unit})", io.geometry.level())
    }

    fn reconstruct(&self, io: &Parts, lost: &Lost<'_>, _: &mut [u8]) -> Result<(), IoError> {
        let (level, role) = (io.geometry.level(), lost.role);
        panic!("{level} has no redundancy to rebuild {role} from")
    }
}

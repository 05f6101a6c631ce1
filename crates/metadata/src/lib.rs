//! Transitional: re-exports the `ondisk` (format) and `volume` (runtime) crates under their old
//! common name while callers move to them; removed once none is left.

pub use ondisk::*;
pub use volume::*;

pub mod owner {
    pub use ondisk::owner::*;
}

//! Pure geometry of raidkit arrays: no I/O.
//!
//! - [`Level`]: the RAID levels (linear, 0, 1, 10, 5, 6) and their names. Each level's rules
//!   (member counts, placement, what it survives, its stripe geometry) live in its own module
//!   under `levels`, behind one trait; [`Level`] and [`Geometry`] ask them.
//! - [`Geometry`]: level + chunk size + member sizes; the array size and, for each logical
//!   byte, the member bytes that hold it ([`Geometry::locate`]); the unit of locking and
//!   syncing ([`Geometry::unit_bytes`]) and the full-stripe write size
//!   ([`Geometry::full_stripe_bytes`]).
//! - For levels without parity, [`Geometry::pieces`] splits a range into [`Piece`]s, each
//!   contiguous on every copy. For RAID 5/6, [`Geometry::stripes`] splits it into
//!   [`StripeSpan`]s listing the touched data chunks, and [`Geometry::p_role`],
//!   [`Geometry::q_role`], [`Geometry::data_role`], [`Geometry::slot_of`] give the placement.
//!
//! Placement follows Linux md exactly: RAID 5 left-symmetric (P on member (n-1) - (s mod n),
//! data index i on (P + 1 + i) mod n); RAID 6 left-symmetric (Q after P, data from P + 2);
//! RAID 10 "near" with two copies (logical chunk c at slots 2c and 2c+1, slot j on member
//! j mod n at row j div n); RAID 0 chunk c on member c mod n, row c div n; linear members
//! concatenated.
//!
//! ```
//! use layout::{Geometry, Level, Slot};
//! let g = Geometry::new("raid5".parse().unwrap(), 64 * 1024, &[1 << 20; 4]).unwrap();
//! assert_eq!(g.size_bytes(), 3 << 20);
//! assert_eq!(g.p_role(0), 3);
//! assert_eq!(g.slot_of(1, 2), Slot::P);
//! assert_eq!(g.data_role(1, 0), 3);
//! ```

mod geometry;
mod level;
mod levels;
mod pieces;

pub use geometry::{
    Geometry, LayoutError, MemberAddress, CHUNK_BYTES_DEFAULT, CHUNK_BYTES_MAX, CHUNK_BYTES_MIN,
};
pub use level::{Level, ParseLevelError};
pub use levels::{ChunkSpan, Slot, StripeSpan};
pub use pieces::Piece;

//! `raidkit plan`'s library: predictions of array configurations over disk models, in virtual
//! time, pure (no I/O but the plot, no threads).
//!
//! - [`config`]: the disks asked about (`4xhdd7200[:SIZE][:OPTIONS]`) and one configuration
//!   (level, members, chunk, read-ahead, journal mode);
//! - [`sim`]: one of bench's cases on one configuration: the closed loop of bench's slots, each
//!   array request mapped through `layout::Geometry` to member requests fed to one
//!   `diskmodel::Drive` per member, with the read cache and the journals to first order;
//! - [`risk`]: usable capacity, failures survived, rebuild time, the chance of losing data to
//!   an unrecoverable read error during a rebuild;
//! - [`sweep`]: level × members × chunk × read-ahead × journal, and the recommendation;
//! - [`plot`]: the sweep as SVG.

pub mod config;
pub mod plot;
pub mod risk;
pub mod sim;
pub mod sweep;

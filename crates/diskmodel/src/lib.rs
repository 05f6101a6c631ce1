//! Disk models: how long a hard disk or a flash drive takes to serve each request.
//!
//! Pure arithmetic and a discrete-event simulation, no I/O and no threads; `member` builds the
//! `sim:CLASS:SIZE` members on it (data in RAM, each call waiting out the modelled time), and a
//! planner can run it in virtual time (an hour of disk time in seconds).
//!
//! - [`DiskClass`]: the named models (`hdd7200`, `hdd10k`, `hdd15k`, `ssd`, `nvme`), each after a
//!   real drive with its published figures ([`DiskClass::source`]), and [`Options`] (write cache,
//!   queue depth, reordering) parsed from the spec's tail.
//! - [`HddParams`] / [`FlashParams`] ([`Model`]): the parameters; [`hdd`] holds the mechanics
//!   (seek curve, zones, rotation, read-ahead, write cache), [`flash`] the channels and the link.
//! - [`Drive`]: one drive's state. [`Drive::submit`] a [`Request`] at a time, [`Drive::advance`]
//!   the model to a time, read a request's [`Drive::completion`] once it is known (at once for
//!   flash, at its dispatch for a disk that reorders), [`Drive::next_event`] to know when to look
//!   again. Times are [`Nanos`] on the caller's clock.
//! - [`Clock`], [`VirtualClock`], [`Disk`]: one drive behind a clock; [`Disk::io`] submits a
//!   request and waits until the model says it is done: really (a real-time clock, in `member`)
//!   or by moving the virtual clock.
//! - [`workload`]: closed-loop runs in virtual time (random or sequential, any size and queue
//!   depth) measuring IOPS, MB/s and latency: the validation against the published figures and
//!   the future `raidkit plan`.

pub mod flash;
pub mod hdd;
mod models;
mod rng;
pub mod workload;

mod drive;
mod request;

pub use drive::{Disk, Drive, QueueFull, Ticket, MAX_PENDING};
pub use flash::FlashParams;
pub use hdd::{HddParams, Order};
pub use models::{DiskClass, Model, Options};
pub use request::{Op, Request};
pub use rng::SimRng;

use std::sync::atomic::{AtomicU64, Ordering};

/// Nanoseconds on the clock a model runs on.
pub type Nanos = u64;

/// Nanoseconds in one second.
pub const NS_PER_SEC: u64 = 1_000_000_000;

/// The time a model runs on: real time (the caller sleeps until a completion) or virtual time
/// (waiting moves the clock).
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Nanos;
    /// Returns once `now() >= t`.
    fn wait_until(&self, t: Nanos);
}

/// A clock that only moves when told: waiting until `t` sets it to `t` at once. For one
/// caller at a time (a planner runs many requests at once through [`Drive`] and [`workload`]).
#[derive(Debug, Default)]
pub struct VirtualClock {
    now: AtomicU64,
}

impl VirtualClock {
    /// A clock at time 0.
    pub fn new() -> VirtualClock {
        VirtualClock::default()
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Nanos {
        self.now.load(Ordering::Acquire)
    }

    fn wait_until(&self, t: Nanos) {
        self.now.fetch_max(t, Ordering::AcqRel);
    }
}

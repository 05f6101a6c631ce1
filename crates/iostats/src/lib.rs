//! I/O counters cheap enough to stay on, and what is computed from them.
//!
//! - [`IoCounters`]: per device (an array as its clients see it, or one member as the engine
//!   drives it): operations, bytes and errors by [`OpKind`], the sum of request times, a latency
//!   and a request-size histogram per kind (log2 buckets, fixed size), requests in flight and
//!   the time at least one was (busy time). Relaxed atomics, no lock, no allocation: a request
//!   is [`IoCounters::begin`] and [`IoCounters::end`].
//! - [`IoSnapshot`]: the monotonic totals at one moment, plain data (serde, `Copy`): what the
//!   admin API serves and a scraper reads.
//! - [`rates`]: `iostat -x`'s figures (r/s, rMB/s, rareq-sz, r_await, aqu-sz, %util) from two
//!   snapshots, as iostat computes them from two readings of /proc/diskstats; [`continues`],
//!   whether the later counts on from the earlier (else they were reset in between).
//!
//! Time is [`now_ns`]: nanoseconds of the monotonic clock since the first call in the process.

mod counters;
mod rates;
mod snapshot;

pub use counters::{now_ns, IoCounters, Started};
pub use rates::{amplification, continues, rates, KindRates, Rates};
pub use snapshot::{
    latency_bucket, latency_bucket_upper_ns, size_bucket, size_bucket_upper_bytes, IoSnapshot,
    KindSnapshot, OpKind, PerKind, LATENCY_BUCKETS, SIZE_BUCKETS,
};

//! What a reading of [`crate::IoCounters`] holds, and the histogram buckets.

use serde::{Deserialize, Serialize};

/// The kinds of operation counted, NBD's and a member's alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    Read,
    Write,
    Flush,
    Trim,
    WriteZeroes,
}

impl OpKind {
    pub const ALL: [OpKind; 5] = [
        OpKind::Read,
        OpKind::Write,
        OpKind::Flush,
        OpKind::Trim,
        OpKind::WriteZeroes,
    ];

    /// Its position in [`OpKind::ALL`].
    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name the JSON and the metrics' `op` label give it.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Flush => "flush",
            OpKind::Trim => "trim",
            OpKind::WriteZeroes => "write_zeroes",
        }
    }
}

/// One `T` for each [`OpKind`]: a snapshot's counters ([`KindSnapshot`]) or the rates over an
/// interval ([`crate::KindRates`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PerKind<T> {
    pub read: T,
    pub write: T,
    pub flush: T,
    pub trim: T,
    pub write_zeroes: T,
}

impl<T> PerKind<T> {
    pub fn kind(&self, kind: OpKind) -> &T {
        match kind {
            OpKind::Read => &self.read,
            OpKind::Write => &self.write,
            OpKind::Flush => &self.flush,
            OpKind::Trim => &self.trim,
            OpKind::WriteZeroes => &self.write_zeroes,
        }
    }

    pub fn kind_mut(&mut self, kind: OpKind) -> &mut T {
        match kind {
            OpKind::Read => &mut self.read,
            OpKind::Write => &mut self.write,
            OpKind::Flush => &mut self.flush,
            OpKind::Trim => &mut self.trim,
            OpKind::WriteZeroes => &mut self.write_zeroes,
        }
    }
}

/// `Deref` from a device's figures (`$outer`, with a field `kinds: PerKind<$kind>`) to its
/// per-kind part, so `snapshot.read` and `snapshot.kind(k)` read it directly.
macro_rules! deref_kinds {
    ($outer:ty, $kind:ty) => {
        impl std::ops::Deref for $outer {
            type Target = $crate::PerKind<$kind>;
            fn deref(&self) -> &Self::Target {
                &self.kinds
            }
        }

        impl std::ops::DerefMut for $outer {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.kinds
            }
        }
    };
}
pub(crate) use deref_kinds;

/// Latency histogram buckets: bucket `k` < 31 counts requests that took at most 2^k µs (and
/// more than 2^(k-1) µs); the last counts the rest (over 2^30 µs, about 18 minutes).
pub const LATENCY_BUCKETS: usize = 32;
/// Request-size histogram buckets: bucket `k` < 23 counts requests of at most 2^(k+9) bytes
/// (512 B .. 2 GiB) and more than half that; the last counts larger ones (trims).
pub const SIZE_BUCKETS: usize = 24;

/// The bucket `n` falls in when bucket `k` holds `(2^(k-1), 2^k]` (bucket 0: `n` ≤ 1), the
/// last one everything above.
#[inline]
fn log2_bucket(n: u64, buckets: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    let k = (u64::BITS - (n - 1).leading_zeros()) as usize;
    k.min(buckets - 1)
}

/// The latency bucket of a request that took `ns` nanoseconds.
#[inline]
pub fn latency_bucket(ns: u64) -> usize {
    log2_bucket(ns.div_ceil(1000), LATENCY_BUCKETS)
}

/// The upper bound of latency bucket `k` in nanoseconds (`None` for the last, unbounded).
pub fn latency_bucket_upper_ns(k: usize) -> Option<u64> {
    (k + 1 < LATENCY_BUCKETS).then(|| (1u64 << k) * 1000)
}

/// The size bucket of a request of `bytes`.
#[inline]
pub fn size_bucket(bytes: u64) -> usize {
    log2_bucket(bytes.div_ceil(512), SIZE_BUCKETS)
}

/// The upper bound of size bucket `k` in bytes (`None` for the last, unbounded).
pub fn size_bucket_upper_bytes(k: usize) -> Option<u64> {
    (k + 1 < SIZE_BUCKETS).then(|| 512u64 << k)
}

/// The totals of one kind of operation since the counters were made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindSnapshot {
    /// Operations completed (successful or not).
    pub ops: u64,
    /// Bytes of the operations completed (a flush has none; a trim its range).
    pub bytes: u64,
    /// Operations that failed.
    pub errors: u64,
    /// Sum of the operations' times, nanoseconds (iostat's `await` numerator).
    pub time_ns: u64,
    /// Operations per latency bucket ([`latency_bucket`]).
    pub latency: [u64; LATENCY_BUCKETS],
    /// Operations per request-size bucket ([`size_bucket`]).
    pub sizes: [u64; SIZE_BUCKETS],
}

impl Default for KindSnapshot {
    fn default() -> Self {
        KindSnapshot {
            ops: 0,
            bytes: 0,
            errors: 0,
            time_ns: 0,
            latency: [0; LATENCY_BUCKETS],
            sizes: [0; SIZE_BUCKETS],
        }
    }
}

/// Every counter of one device at one moment: monotonic totals (rates are the difference of
/// two snapshots over the time between them) and the requests in flight then.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoSnapshot {
    /// [`crate::now_ns`] when it was read.
    pub at_ns: u64,
    /// The counters of each kind (in JSON, the fields `read` .. `write_zeroes`; in Rust, also
    /// `snapshot.read` through `Deref`).
    #[serde(flatten)]
    pub kinds: PerKind<KindSnapshot>,
    /// Requests started and not finished when it was read.
    pub in_flight: u64,
    /// Time with at least one request in flight, nanoseconds (iostat's %util numerator).
    pub busy_ns: u64,
}

deref_kinds!(IoSnapshot, KindSnapshot);

impl IoSnapshot {
    /// Operations of every kind.
    pub fn ops(&self) -> u64 {
        OpKind::ALL.iter().map(|&k| self.kind(k).ops).sum()
    }

    /// Sum of every operation's time, nanoseconds (iostat's `aqu-sz` numerator).
    pub fn time_ns(&self) -> u64 {
        OpKind::ALL.iter().map(|&k| self.kind(k).time_ns).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_values_up_to_their_bound() {
        // Bucket k holds (2^(k-1), 2^k] µs.
        assert_eq!(latency_bucket(0), 0);
        assert_eq!(latency_bucket(1000), 0);
        assert_eq!(latency_bucket(1001), 1);
        assert_eq!(latency_bucket(2000), 1);
        assert_eq!(latency_bucket(2001), 2);
        assert_eq!(latency_bucket(1_000_000), 10); // 1 ms ≤ 1024 µs
        assert_eq!(latency_bucket(u64::MAX), LATENCY_BUCKETS - 1);
        for ns in [1, 999, 1000, 1001, 77_777, 1 << 30, 123_456_789_012] {
            let k = latency_bucket(ns);
            if let Some(upper) = latency_bucket_upper_ns(k) {
                assert!(ns <= upper, "{ns} ns in bucket {k} (≤ {upper})");
            }
            if k > 0 {
                assert!(ns > latency_bucket_upper_ns(k - 1).unwrap(), "{ns} ns");
            }
        }
        assert_eq!(size_bucket(512), 0);
        assert_eq!(size_bucket(513), 1);
        assert_eq!(size_bucket(4096), 3);
        assert_eq!(size_bucket_upper_bytes(3), Some(4096));
        assert_eq!(size_bucket(1 << 20), 11);
        assert_eq!(size_bucket(u64::MAX), SIZE_BUCKETS - 1);
        assert_eq!(size_bucket_upper_bytes(SIZE_BUCKETS - 1), None);
    }

    #[test]
    fn a_snapshot_round_trips_through_json() {
        let mut s = IoSnapshot {
            at_ns: 5,
            in_flight: 2,
            busy_ns: 9,
            ..IoSnapshot::default()
        };
        s.write_zeroes.latency[31] = 4;
        s.read.sizes[23] = 1;
        let text = serde_json::to_string(&s).unwrap();
        assert!(text.contains("\"write_zeroes\""), "{text}");
        assert_eq!(serde_json::from_str::<IoSnapshot>(&text).unwrap(), s);
    }
}

//! Caps on an export's rate, as Linux's io.max: bytes per second and requests per second,
//! each a token bucket with a burst of `BURST` worth of its rate. Pure: the time in, the wait
//! out ([`Caps::reserve`]); [`super::QosClass`] sleeps it before the request's payload is read.
//!
//! Each cap keeps the time at which its bucket is empty again ("theoretical arrival time", the
//! GCRA form of a token bucket): a request costs `bytes / rate` (or `1 / iops`) of it, and
//! waits until no more than the burst is owed. So a request waits at most its own cost plus the
//! cost of the requests admitted before it, and over any stretch longer than the burst the
//! export moves at most the rate.

use std::time::Duration;

/// The burst each cap allows: this long's worth of its rate at once.
pub const BURST: Duration = Duration::from_millis(100);

/// The least a cap may be: 1 MiB/s (the largest request, 32 MiB, waits at most 32 s) and
/// 10 requests per second.
pub const MIN_BYTES_PER_SEC: u64 = 1 << 20;
pub const MIN_IOPS: u64 = 10;

/// One cap's bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bucket {
    per_sec: u64,
    /// When the bucket is empty again; nothing owed before it.
    empty_at: Duration,
}

impl Bucket {
    fn new(per_sec: u64) -> Bucket {
        Bucket {
            per_sec,
            empty_at: Duration::ZERO,
        }
    }

    /// Takes `units`; returns how long to wait before using them.
    fn reserve(&mut self, now: Duration, units: u64) -> Duration {
        // An idle bucket is full, not more: its debt starts from now.
        let start = self.empty_at.max(now);
        let cost = Duration::from_nanos(
            (u128::from(units) * 1_000_000_000 / u128::from(self.per_sec)) as u64,
        );
        self.empty_at = start + cost;
        // Within the burst: at once. Beyond it: until the bucket holds this request again.
        self.empty_at.saturating_sub(now + BURST)
    }
}

/// The caps of one export (each optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caps {
    bytes: Option<Bucket>,
    iops: Option<Bucket>,
}

impl Caps {
    /// Caps of `bytes_per_sec` and `iops` (each at least its minimum, checked by the caller's
    /// configuration; raised to it here).
    pub fn new(bytes_per_sec: Option<u64>, iops: Option<u64>) -> Caps {
        Caps {
            bytes: bytes_per_sec.map(|b| Bucket::new(b.max(MIN_BYTES_PER_SEC))),
            iops: iops.map(|n| Bucket::new(n.max(MIN_IOPS))),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_none() && self.iops.is_none()
    }

    pub fn bytes_per_sec(&self) -> Option<u64> {
        self.bytes.map(|b| b.per_sec)
    }

    pub fn iops(&self) -> Option<u64> {
        self.iops.map(|b| b.per_sec)
    }

    /// One request of `bytes` at `now`: how long it waits (the longer of the two caps').
    pub fn reserve(&mut self, now: Duration, bytes: u64) -> Duration {
        let by_bytes = self.bytes.as_mut().map_or(Duration::ZERO, |b| {
            if bytes == 0 {
                Duration::ZERO
            } else {
                b.reserve(now, bytes)
            }
        });
        let by_count = self
            .iops
            .as_mut()
            .map_or(Duration::ZERO, |b| b.reserve(now, 1));
        by_bytes.max(by_count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Requests of `bytes` sent back to back, each once its wait is over, for `span`: the
    /// bytes and requests admitted.
    fn run(caps: &mut Caps, bytes: u64, span: Duration) -> (u64, u64) {
        let (mut now, mut moved, mut n) = (Duration::ZERO, 0, 0);
        while now < span {
            now += caps.reserve(now, bytes);
            if now >= span {
                break;
            }
            moved += bytes;
            n += 1;
        }
        (moved, n)
    }

    #[test]
    fn a_bandwidth_cap_holds_over_time_with_one_burst() {
        let mut caps = Caps::new(Some(100 * MIB), None);
        let (moved, _) = run(&mut caps, MIB, Duration::from_secs(10));
        // 10 s at 100 MiB/s, plus at most the burst (10 MiB) and one request.
        assert!((999 * MIB..=1011 * MIB).contains(&moved), "{}", moved / MIB);
    }

    #[test]
    fn an_iops_cap_holds_and_bandwidth_is_not_counted_for_it() {
        let mut caps = Caps::new(None, Some(1000));
        let (_, n) = run(&mut caps, 4096, Duration::from_secs(5));
        assert!((4999..=5101).contains(&n), "{n}");
        assert_eq!(caps.bytes_per_sec(), None);
        assert_eq!(caps.iops(), Some(1000));
    }

    #[test]
    fn the_tighter_cap_decides() {
        // 1,000 requests/s of 1 MiB would be 1,000 MiB/s: the bandwidth cap wins.
        let mut caps = Caps::new(Some(50 * MIB), Some(1000));
        let (moved, n) = run(&mut caps, MIB, Duration::from_secs(4));
        assert!((199 * MIB..=206 * MIB).contains(&moved), "{}", moved / MIB);
        assert!(n < 4 * 1000);
    }

    #[test]
    fn within_the_burst_nothing_waits_and_an_idle_bucket_refills_only_to_the_burst() {
        let mut caps = Caps::new(Some(100 * MIB), None);
        // 10 MiB at once: the burst.
        for _ in 0..10 {
            assert_eq!(caps.reserve(Duration::ZERO, MIB), Duration::ZERO);
        }
        // The 11th waits its own cost (10 ms).
        assert_eq!(caps.reserve(Duration::ZERO, MIB), Duration::from_millis(10));
        // After a long idle time the burst is again 10 MiB, not more.
        let later = Duration::from_secs(60);
        let waits: Vec<Duration> = (0..11).map(|_| caps.reserve(later, MIB)).collect();
        assert!(waits[..10].iter().all(|w| w.is_zero()), "{waits:?}");
        assert_eq!(waits[10], Duration::from_millis(10));
    }

    #[test]
    fn requests_without_bytes_pass_a_bandwidth_cap_and_caps_are_raised_to_their_minimum() {
        let caps = Caps::new(Some(1), Some(1));
        assert_eq!(caps.bytes_per_sec(), Some(MIN_BYTES_PER_SEC));
        assert_eq!(caps.iops(), Some(MIN_IOPS));
        let mut bw_only = Caps::new(Some(MIN_BYTES_PER_SEC), None);
        for _ in 0..1000 {
            assert_eq!(bw_only.reserve(Duration::ZERO, 0), Duration::ZERO);
        }
        assert!(Caps::new(None, None).is_empty());
        assert!(!caps.is_empty());
    }

    #[test]
    fn the_largest_request_at_the_smallest_rate_waits_at_most_its_cost() {
        let mut caps = Caps::new(Some(MIN_BYTES_PER_SEC), None);
        let wait = caps.reserve(Duration::ZERO, 32 * MIB);
        assert!(wait <= Duration::from_secs(32), "{wait:?}");
        assert!(wait >= Duration::from_secs(31), "{wait:?}");
    }
}

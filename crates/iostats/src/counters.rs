//! [`IoCounters`]: the live counters, atomics only.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::snapshot::{
    latency_bucket, size_bucket, IoSnapshot, KindSnapshot, OpKind, LATENCY_BUCKETS, SIZE_BUCKETS,
};

/// Nanoseconds of the monotonic clock since the first call in this process (one
/// `clock_gettime` through the vDSO).
#[inline]
pub fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    epoch.elapsed().as_nanos() as u64
}

/// The counters of one kind of operation.
struct KindCounters {
    bytes: AtomicU64,
    errors: AtomicU64,
    time_ns: AtomicU64,
    latency: [AtomicU64; LATENCY_BUCKETS],
    sizes: [AtomicU64; SIZE_BUCKETS],
}

impl KindCounters {
    fn new() -> KindCounters {
        KindCounters {
            bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            time_ns: AtomicU64::new(0),
            latency: std::array::from_fn(|_| AtomicU64::new(0)),
            sizes: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// The totals; operations are the latency histogram's (one add less per operation).
    fn read(&self) -> KindSnapshot {
        let latency: [u64; LATENCY_BUCKETS] =
            std::array::from_fn(|k| self.latency[k].load(Relaxed));
        KindSnapshot {
            ops: latency.iter().sum(),
            bytes: self.bytes.load(Relaxed),
            errors: self.errors.load(Relaxed),
            time_ns: self.time_ns.load(Relaxed),
            latency,
            sizes: std::array::from_fn(|k| self.sizes[k].load(Relaxed)),
        }
    }
}

/// The counters of one device (an array as its clients see it, or one member). Every method
/// takes `&self` and is safe from many threads; the request path takes no lock and allocates
/// nothing. Readers may see one request's counters half updated (an operation counted before
/// its bytes): totals are exact once requests finish, a snapshot is off by the requests
/// finishing while it is read.
pub struct IoCounters {
    kinds: [KindCounters; 5],
    in_flight: AtomicU64,
    /// Time with at least one request in flight, accounted up to `stamp_ns`: each request's
    /// end adds the time since the stamp (the last end, or the start that ended an idle
    /// time) and moves the stamp; a start from idle moves it without adding.
    busy_ns: AtomicU64,
    /// When `busy_ns` was last brought up to date ([`now_ns`]).
    stamp_ns: AtomicU64,
}

/// A request begun with [`IoCounters::begin`]: when it started.
#[derive(Clone, Copy, Debug)]
#[must_use = "a begun request must end (IoCounters::end)"]
pub struct Started {
    at_ns: u64,
}

impl Default for IoCounters {
    fn default() -> Self {
        IoCounters::new()
    }
}

impl std::fmt::Debug for IoCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoCounters")
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

impl IoCounters {
    pub fn new() -> IoCounters {
        IoCounters {
            kinds: std::array::from_fn(|_| KindCounters::new()),
            in_flight: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            stamp_ns: AtomicU64::new(now_ns()),
        }
    }

    /// A request starts.
    #[inline]
    pub fn begin(&self) -> Started {
        let now = now_ns();
        if self.in_flight.fetch_add(1, Relaxed) == 0 {
            // Idle until now: busy time starts here.
            self.stamp_ns.store(now, Relaxed);
        }
        Started { at_ns: now }
    }

    /// The request `started` ended: a `kind` operation of `bytes`, successful or not. Returns
    /// how long it took.
    #[inline]
    pub fn end(&self, started: Started, kind: OpKind, bytes: u64, ok: bool) -> Duration {
        let now = now_ns();
        // Since the last stamp (a start from idle, or the last end) a request was in flight:
        // this one. One swap: each interval between stamps is accounted once.
        let stamp = self.stamp_ns.swap(now, Relaxed);
        self.busy_ns.fetch_add(now.saturating_sub(stamp), Relaxed);
        self.in_flight.fetch_sub(1, Relaxed);
        let ns = now.saturating_sub(started.at_ns);
        let k = &self.kinds[kind.index()];
        k.bytes.fetch_add(bytes, Relaxed);
        k.time_ns.fetch_add(ns, Relaxed);
        k.latency[latency_bucket(ns)].fetch_add(1, Relaxed);
        if kind != OpKind::Flush {
            k.sizes[size_bucket(bytes)].fetch_add(1, Relaxed);
        }
        if !ok {
            k.errors.fetch_add(1, Relaxed);
        }
        Duration::from_nanos(ns)
    }

    /// Requests in flight now.
    #[inline]
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Relaxed)
    }

    /// The totals now.
    pub fn snapshot(&self) -> IoSnapshot {
        let now = now_ns();
        let in_flight = self.in_flight.load(Relaxed);
        let mut busy = self.busy_ns.load(Relaxed);
        if in_flight > 0 {
            busy += now.saturating_sub(self.stamp_ns.load(Relaxed));
        }
        let mut s = IoSnapshot {
            at_ns: now,
            in_flight,
            busy_ns: busy,
            ..IoSnapshot::default()
        };
        for kind in OpKind::ALL {
            *s.kind_mut(kind) = self.kinds[kind.index()].read();
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_operations_bytes_errors_and_histograms_by_kind() {
        let c = IoCounters::new();
        let s = c.begin();
        assert_eq!(c.in_flight(), 1);
        let took = c.end(s, OpKind::Write, 4096, true);
        let s = c.begin();
        c.end(s, OpKind::Write, 1 << 20, false);
        let s = c.begin();
        c.end(s, OpKind::Flush, 0, true);
        let snap = c.snapshot();
        assert_eq!(snap.in_flight, 0);
        assert_eq!(snap.write.ops, 2);
        assert_eq!(snap.write.bytes, 4096 + (1 << 20));
        assert_eq!(snap.write.errors, 1);
        assert_eq!(snap.write.sizes[3], 1);
        assert_eq!(snap.write.sizes[11], 1);
        assert_eq!(snap.write.latency.iter().sum::<u64>(), 2);
        assert!(snap.write.time_ns >= took.as_nanos() as u64);
        assert_eq!(snap.flush.ops, 1);
        assert_eq!(
            snap.flush.sizes.iter().sum::<u64>(),
            0,
            "a flush has no size"
        );
        assert_eq!(snap.read, KindSnapshot::default());
        assert_eq!(snap.ops(), 3);
    }

    #[test]
    fn busy_time_is_the_time_a_request_was_in_flight() {
        let c = IoCounters::new();
        let idle = std::time::Duration::from_millis(30);
        std::thread::sleep(idle);
        let s = c.begin();
        std::thread::sleep(std::time::Duration::from_millis(50));
        // While in flight, a snapshot counts the busy time so far.
        let during = c.snapshot();
        assert_eq!(during.in_flight, 1);
        assert!(during.busy_ns >= 50_000_000, "{}", during.busy_ns);
        let took = c.end(s, OpKind::Read, 512, true);
        std::thread::sleep(idle);
        let after = c.snapshot();
        // Busy covers the request, not the idle time before and after it.
        assert!(after.busy_ns >= 50_000_000, "{}", after.busy_ns);
        assert!(
            after.busy_ns <= took.as_nanos() as u64,
            "{} > {took:?}",
            after.busy_ns
        );
        assert_eq!(after.read.time_ns, took.as_nanos() as u64);
    }

    #[test]
    fn overlapping_requests_count_busy_time_once_and_time_per_request() {
        let c = Arc::new(IoCounters::new());
        let started = now_ns();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        let s = c.begin();
                        std::thread::sleep(std::time::Duration::from_millis(2));
                        c.end(s, OpKind::Write, 4096, true);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let wall = now_ns() - started;
        let s = c.snapshot();
        assert_eq!(s.write.ops, 80);
        assert_eq!(s.in_flight, 0);
        // Four at a time: the requests' summed time is about four times the busy time, which
        // is at most the wall time.
        assert!(s.busy_ns <= wall, "busy {} > wall {wall}", s.busy_ns);
        assert!(
            s.write.time_ns > 2 * s.busy_ns,
            "{} vs {}",
            s.write.time_ns,
            s.busy_ns
        );
    }
}

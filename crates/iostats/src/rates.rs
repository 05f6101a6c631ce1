//! `iostat -x`'s figures from two snapshots, as iostat computes them from two readings of
//! /proc/diskstats: rates over the time between them, averages over the operations between
//! them.

use serde::{Deserialize, Serialize};

use crate::snapshot::{deref_kinds, IoSnapshot, KindSnapshot, OpKind};
use crate::PerKind;

/// One kind of operation over an interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KindRates {
    /// Operations per second (iostat's r/s, w/s, d/s, f/s).
    pub ops_per_sec: f64,
    /// Bytes per second (rMB/s × 2^20).
    pub bytes_per_sec: f64,
    /// Average request size, bytes (rareq-sz × 1024); 0 without requests.
    pub avg_size_bytes: f64,
    /// Average time per request, milliseconds (r_await); 0 without requests.
    pub await_ms: f64,
    /// Failed operations per second.
    pub errors_per_sec: f64,
}

/// A device over an interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    /// The interval, seconds.
    pub interval_secs: f64,
    /// The rates of each kind (in JSON, the fields `read` .. `write_zeroes`; in Rust, also
    /// `rates.read` through `Deref`).
    #[serde(flatten)]
    pub kinds: PerKind<KindRates>,
    /// Average requests in flight (aqu-sz): the requests' summed time over the interval.
    pub queue_size: f64,
    /// Share of the interval with a request in flight, percent (%util).
    pub util_percent: f64,
}

deref_kinds!(Rates, KindRates);

/// Whether `cur` continues `prev` (the same counters, read later); otherwise they were reset in
/// between (the server restarted) and `cur` counts from zero. Every figure over an interval
/// (rates, amplification, a histogram's) takes this one rule.
pub fn continues(prev: &IoSnapshot, cur: &IoSnapshot) -> bool {
    cur.at_ns >= prev.at_ns
        && cur.busy_ns >= prev.busy_ns
        && OpKind::ALL.iter().all(|&k| {
            let (p, c) = (prev.kind(k), cur.kind(k));
            c.ops >= p.ops && c.bytes >= p.bytes && c.time_ns >= p.time_ns && c.errors >= p.errors
        })
}

/// The figures over the interval from `prev` to `cur`; `prev` = `IoSnapshot::default()` gives
/// the figures since the counters started (iostat's first report). Counters reset in between
/// count from zero.
pub fn rates(prev: &IoSnapshot, cur: &IoSnapshot) -> Rates {
    let zero = IoSnapshot::default();
    let prev = if continues(prev, cur) { prev } else { &zero };
    let interval_ns = cur.at_ns - prev.at_ns;
    if interval_ns == 0 {
        return Rates::default();
    }
    let secs = interval_ns as f64 / 1e9;
    let mut r = Rates {
        interval_secs: secs,
        queue_size: (cur.time_ns() - prev.time_ns()) as f64 / interval_ns as f64,
        util_percent: ((cur.busy_ns - prev.busy_ns) as f64 / interval_ns as f64 * 100.0).min(100.0),
        ..Rates::default()
    };
    for kind in OpKind::ALL {
        *r.kind_mut(kind) = kind_rates(prev.kind(kind), cur.kind(kind), secs);
    }
    r
}

fn kind_rates(prev: &KindSnapshot, cur: &KindSnapshot, secs: f64) -> KindRates {
    let ops = (cur.ops - prev.ops) as f64;
    let bytes = (cur.bytes - prev.bytes) as f64;
    let per_op = |total: f64| if ops > 0.0 { total / ops } else { 0.0 };
    KindRates {
        ops_per_sec: ops / secs,
        bytes_per_sec: bytes / secs,
        avg_size_bytes: per_op(bytes),
        await_ms: per_op((cur.time_ns - prev.time_ns) as f64 / 1e6),
        errors_per_sec: (cur.errors - prev.errors) as f64 / secs,
    }
}

/// I/O amplification over an interval: member operations of each kind (all members together)
/// per client operation of any kind, in [`OpKind::ALL`]'s order. A RAID 5 read-modify-write of
/// 4 KiB is `[2, 2, 0, 0, 0]`. `None` when the client did nothing. Snapshots of a member not
/// read both times (added or removed in between) are left out.
pub fn amplification(
    client: (&IoSnapshot, &IoSnapshot),
    members: &[(&IoSnapshot, &IoSnapshot)],
) -> Option<[f64; 5]> {
    // Operations of `kind` (all kinds: `None`) between two readings.
    let delta = |(prev, cur): (&IoSnapshot, &IoSnapshot), kind: Option<OpKind>| {
        let count = |s: &IoSnapshot| kind.map_or_else(|| s.ops(), |k| s.kind(k).ops);
        match continues(prev, cur) {
            true => count(cur) - count(prev),
            false => count(cur),
        }
    };
    let client_ops = delta(client, None);
    if client_ops == 0 {
        return None;
    }
    Some(std::array::from_fn(|i| {
        let kind = Some(OpKind::ALL[i]);
        let member_ops: u64 = members.iter().map(|&pair| delta(pair, kind)).sum();
        member_ops as f64 / client_ops as f64
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(at_secs: u64, reads: u64, read_bytes: u64, read_ms: u64, busy_ms: u64) -> IoSnapshot {
        let mut s = IoSnapshot {
            at_ns: at_secs * 1_000_000_000,
            busy_ns: busy_ms * 1_000_000,
            ..IoSnapshot::default()
        };
        s.read.ops = reads;
        s.read.bytes = read_bytes;
        s.read.time_ns = read_ms * 1_000_000;
        s
    }

    #[test]
    fn figures_are_iostats_over_the_interval() {
        // 10 s apart: 1,000 reads of 4 KiB taking 2 ms each, overlapping two at a time, the
        // device busy half the time.
        let prev = snap(100, 500, 500 * 4096, 1_000, 20_000);
        let cur = snap(110, 1_500, 1_500 * 4096, 3_000, 25_000);
        let r = rates(&prev, &cur);
        assert_eq!(r.interval_secs, 10.0);
        assert_eq!(r.read.ops_per_sec, 100.0);
        assert_eq!(r.read.bytes_per_sec, 100.0 * 4096.0);
        assert_eq!(r.read.avg_size_bytes, 4096.0);
        assert_eq!(r.read.await_ms, 2.0);
        assert_eq!(r.queue_size, 0.2); // 2,000 ms of requests in 10,000 ms
        assert_eq!(r.util_percent, 50.0);
        // No writes: zero rates and averages, not NaN.
        assert_eq!(r.write, KindRates::default());
    }

    #[test]
    fn the_first_report_is_since_the_start_and_a_reset_counts_from_zero() {
        let cur = snap(4, 8, 8 * 512, 8, 1_000);
        let first = rates(&IoSnapshot::default(), &cur);
        assert_eq!(first.read.ops_per_sec, 2.0);
        assert_eq!(first.util_percent, 25.0);
        // The server restarted: fewer operations than before, an earlier clock.
        let before_restart = snap(1_000, 1_000_000, 1 << 40, 1_000_000, 900_000);
        assert_eq!(rates(&before_restart, &cur), first);
        // The same moment twice: nothing to divide by.
        assert_eq!(rates(&cur, &cur), Rates::default());
    }

    #[test]
    fn amplification_is_member_operations_per_client_operation() {
        // A RAID 5 of 3: 100 client writes of 4 KiB, each 2 member reads and 2 member writes.
        let mut client = (IoSnapshot::default(), IoSnapshot::default());
        client.1.write.ops = 100;
        let mut members = [(IoSnapshot::default(), IoSnapshot::default()); 3];
        for (i, m) in members.iter_mut().enumerate() {
            m.0.read.ops = 7; // before the interval
            m.1.read.ops = 7 + [100, 50, 50][i];
            m.1.write.ops = [100, 60, 40][i];
        }
        let pairs: Vec<_> = members.iter().map(|(p, c)| (p, c)).collect();
        let amp = amplification((&client.0, &client.1), &pairs).unwrap();
        assert_eq!(amp, [2.0, 2.0, 0.0, 0.0, 0.0]);
        assert_eq!(amplification((&client.1, &client.1), &pairs), None);
    }
}

//! What the dashboard remembers of each array: the last snapshot, the rates since the one
//! before (the array's and each member's), a bounded ring of per-second points for the graphs,
//! and the events between consecutive snapshots (`service::monitor`'s pure functions, so the
//! dashboard says what `mdadm --monitor` would, in `serve` as in the daemon).

use std::collections::VecDeque;

use admin::stats::Snapshot;
use alerts::Alert;
use iostats::{IoSnapshot, Rates};
use serde::Serialize;
use service::monitor;

/// Points kept per array: one a sample, so ten minutes at one sample a second.
pub const HISTORY_POINTS: usize = 600;

/// One sample's rates of an array as its clients see it: what the graphs draw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Point {
    /// Wall-clock time of the sample, milliseconds since the Unix epoch.
    pub unix_ms: u64,
    pub read_bytes_per_sec: f64,
    pub write_bytes_per_sec: f64,
    pub read_ops_per_sec: f64,
    pub write_ops_per_sec: f64,
    /// Average time of the interval's reads (r_await), milliseconds; 0 without reads.
    pub read_await_ms: f64,
    pub write_await_ms: f64,
    pub util_percent: f64,
}

impl Point {
    fn from_rates(unix_ms: u64, r: &Rates) -> Point {
        Point {
            unix_ms,
            read_bytes_per_sec: r.read.bytes_per_sec,
            write_bytes_per_sec: r.write.bytes_per_sec,
            read_ops_per_sec: r.read.ops_per_sec,
            write_ops_per_sec: r.write.ops_per_sec,
            read_await_ms: r.read.await_ms,
            write_await_ms: r.write.await_ms,
            util_percent: r.util_percent,
        }
    }
}

/// The points as columns (what a chart takes): `t` in seconds since the epoch.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Columns {
    pub t: Vec<f64>,
    pub read_bytes_per_sec: Vec<f64>,
    pub write_bytes_per_sec: Vec<f64>,
    pub read_ops_per_sec: Vec<f64>,
    pub write_ops_per_sec: Vec<f64>,
    pub read_await_ms: Vec<f64>,
    pub write_await_ms: Vec<f64>,
    pub util_percent: Vec<f64>,
}

impl Columns {
    fn push(&mut self, p: &Point) {
        self.t.push(p.unix_ms as f64 / 1000.0);
        self.read_bytes_per_sec.push(p.read_bytes_per_sec);
        self.write_bytes_per_sec.push(p.write_bytes_per_sec);
        self.read_ops_per_sec.push(p.read_ops_per_sec);
        self.write_ops_per_sec.push(p.write_ops_per_sec);
        self.read_await_ms.push(p.read_await_ms);
        self.write_await_ms.push(p.write_await_ms);
        self.util_percent.push(p.util_percent);
    }
}

/// One array's memory.
#[derive(Default)]
pub struct ArrayHistory {
    last: Option<Snapshot>,
    /// The array's rates between the last two snapshots (`None` before the second).
    client_rates: Option<Rates>,
    /// Each role's rates between the last two snapshots, by role.
    member_rates: Vec<Rates>,
    points: VecDeque<Point>,
}

impl ArrayHistory {
    /// Takes a new snapshot: rates since the last one, a point, and the events since (at the
    /// first, what `mdadm --monitor` says of an array first seen).
    pub fn sample(&mut self, now: Snapshot) -> Vec<Alert> {
        let events = match &self.last {
            None => monitor::at_start(&now.status.volume),
            Some(before) => monitor::changes(&before.status.volume, &now.status.volume),
        };
        if let Some(before) = &self.last {
            self.client_rates = rates_between(before.client.as_ref(), now.client.as_ref());
            self.member_rates = (now.members.iter().enumerate())
                .map(|(role, cur)| {
                    rates_between(before.members.get(role), Some(cur)).unwrap_or_default()
                })
                .collect();
            let point = Point::from_rates(now.unix_ms, &self.client_rates.unwrap_or_default());
            if self.points.len() == HISTORY_POINTS {
                self.points.pop_front();
            }
            self.points.push_back(point);
        }
        self.last = Some(now);
        events
    }

    pub fn last(&self) -> Option<&Snapshot> {
        self.last.as_ref()
    }

    pub fn client_rates(&self) -> Option<&Rates> {
        self.client_rates.as_ref()
    }

    pub fn member_rates(&self) -> &[Rates] {
        &self.member_rates
    }

    /// The points taken after `since_ms` (all with 0), oldest first.
    pub fn columns_since(&self, since_ms: u64) -> Columns {
        let mut columns = Columns::default();
        for p in self.points.iter().filter(|p| p.unix_ms > since_ms) {
            columns.push(p);
        }
        columns
    }

    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

fn rates_between(before: Option<&IoSnapshot>, now: Option<&IoSnapshot>) -> Option<Rates> {
    Some(iostats::rates(before?, now?))
}

/// The last [`EVENTS_KEPT`] events of every array, oldest first.
#[derive(Default)]
pub struct Events {
    kept: VecDeque<Alert>,
}

/// Events the dashboard keeps (the oldest is dropped first).
pub const EVENTS_KEPT: usize = 100;

impl Events {
    pub fn push(&mut self, alert: Alert) {
        if self.kept.len() == EVENTS_KEPT {
            self.kept.pop_front();
        }
        self.kept.push_back(alert);
    }

    /// Newest first.
    pub fn newest_first(&self) -> impl Iterator<Item = &Alert> {
        self.kept.iter().rev()
    }

    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }
}

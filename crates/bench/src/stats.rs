//! Latency histograms and the figures of one case: what a run measures and what a prediction
//! (`raidkit plan`) fills in alike.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Longest latency a histogram holds exactly (longer ones are counted as this).
const MAX_LATENCY_NS: u64 = 3_600_000_000_000;

/// Latencies of one case's operations, in nanoseconds, 3 significant digits (hdrhistogram).
#[derive(Debug, Clone)]
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Latencies(
            Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3)
                .expect("1 ns .. 1 h at 3 digits is a valid histogram"),
        )
    }
}

impl Latencies {
    /// Counts one operation that took `took`.
    pub fn record(&mut self, took: Duration) {
        let ns = (took.as_nanos() as u64).clamp(1, MAX_LATENCY_NS);
        self.0.saturating_record(ns);
    }

    /// Adds another histogram's counts (another slot's, another round's).
    pub fn merge(&mut self, other: &Latencies) {
        self.0
            .add(&other.0)
            .expect("histograms of the same bounds add");
    }

    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// The percentiles in milliseconds; all zero when nothing was recorded.
    pub fn summary(&self) -> Latency {
        if self.0.is_empty() {
            return Latency::default();
        }
        let ms = |ns: u64| ns as f64 / 1e6;
        Latency {
            mean_ms: self.0.mean() / 1e6,
            p50_ms: ms(self.0.value_at_quantile(0.50)),
            p90_ms: ms(self.0.value_at_quantile(0.90)),
            p99_ms: ms(self.0.value_at_quantile(0.99)),
            p999_ms: ms(self.0.value_at_quantile(0.999)),
            max_ms: ms(self.0.max()),
        }
    }
}

/// Latency percentiles of one case, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// The figures of one case on one target, measured or predicted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Operations per second (a write with its flush is one operation).
    pub iops: f64,
    /// Megabytes (10^6 bytes) of reads and writes per second.
    pub mb_s: f64,
    pub latency: Latency,
}

/// What one or more runs of a case on a target counted.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub bytes: u64,
    /// Wall time the clients ran (summed over rounds).
    pub elapsed: Duration,
    pub latencies: Latencies,
}

impl Measured {
    /// Operations (reads and writes; a flush after a write is part of the write's operation).
    pub fn ops(&self) -> u64 {
        self.reads + self.writes
    }

    /// Adds another round of the same case on the same target.
    pub fn merge(&mut self, other: &Measured) {
        self.reads += other.reads;
        self.writes += other.writes;
        self.flushes += other.flushes;
        self.bytes += other.bytes;
        self.elapsed += other.elapsed;
        self.latencies.merge(&other.latencies);
    }

    pub fn figures(&self) -> Figures {
        let secs = self.elapsed.as_secs_f64();
        let per_s = |n: f64| if secs > 0.0 { n / secs } else { 0.0 };
        Figures {
            iops: per_s(self.ops() as f64),
            mb_s: per_s(self.bytes as f64) / 1e6,
            latency: self.latencies.summary(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_recorded_latencies() {
        let mut l = Latencies::default();
        // 1..=1000 µs, one each: p50 = 500 µs, p90 = 900, p99 = 990, p99.9 = 999.
        for us in 1..=1000u64 {
            l.record(Duration::from_micros(us));
        }
        let s = l.summary();
        let near = |got: f64, want: f64| (got - want).abs() <= want * 0.002;
        assert!(near(s.p50_ms, 0.5), "{s:?}");
        assert!(near(s.p90_ms, 0.9), "{s:?}");
        assert!(near(s.p99_ms, 0.99), "{s:?}");
        assert!(near(s.p999_ms, 0.999), "{s:?}");
        assert!(near(s.max_ms, 1.0), "{s:?}");
        assert!(near(s.mean_ms, 0.5005), "{s:?}");
        assert_eq!(l.count(), 1000);
    }

    #[test]
    fn an_empty_histogram_summarises_to_zero() {
        assert_eq!(Latencies::default().summary(), Latency::default());
    }

    #[test]
    fn rounds_merge_into_one_set_of_figures() {
        let mut a = Measured {
            reads: 100,
            bytes: 100 * 4096,
            elapsed: Duration::from_secs(1),
            ..Measured::default()
        };
        a.latencies.record(Duration::from_millis(1));
        let mut b = Measured {
            reads: 50,
            writes: 50,
            flushes: 50,
            bytes: 100 * 4096,
            elapsed: Duration::from_secs(1),
            ..Measured::default()
        };
        b.latencies.record(Duration::from_millis(3));
        a.merge(&b);
        let f = a.figures();
        assert_eq!(a.ops(), 200);
        assert_eq!(a.flushes, 50);
        assert!((f.iops - 100.0).abs() < 1e-9);
        assert!((f.mb_s - 0.4096).abs() < 1e-9);
        assert!((f.latency.mean_ms - 2.0).abs() < 0.01, "{:?}", f.latency);
    }

    #[test]
    fn figures_serialise_with_their_field_names() {
        let f = Figures {
            iops: 80.5,
            mb_s: 0.33,
            latency: Latency {
                p99_ms: 20.0,
                ..Latency::default()
            },
        };
        let text = serde_json::to_string(&f).unwrap();
        assert!(
            text.contains("\"iops\":80.5") && text.contains("\"p99_ms\":20.0"),
            "{text}"
        );
        let back: Figures = serde_json::from_str(&text).unwrap();
        assert_eq!(back, f);
    }
}

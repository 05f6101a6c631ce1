//! A benchmark's results: the serialisable report (`--json`), the ratios of a comparison and the
//! table printed by default.

use serde::{Deserialize, Serialize};

use crate::stats::{Figures, Measured};
use crate::workload::{size_text, Case};

/// Version of the report's JSON layout.
pub const FORMAT: u32 = 1;

/// One target of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// Short name in tables and plots (`A`, `raid5`, …).
    pub name: String,
    /// What it is: the NBD URI, or the array bench built and served.
    pub description: String,
    pub bytes: u64,
}

/// Counts behind a measured case's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub bytes: u64,
    pub elapsed_s: f64,
}

/// One case's figures relative to the first target's (this / first): above 1 is more IOPS or
/// MB/s, or a longer latency.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    pub iops: f64,
    pub mb_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// One case on one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    pub target: String,
    pub case: Case,
    pub figures: Figures,
    /// What was counted (a prediction has none).
    pub counts: Option<Counts>,
    /// Against the first target, in a comparison.
    pub ratio: Option<Ratio>,
}

/// A whole run (or prediction): its targets and every case on each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub format: u32,
    /// `bench` for a measurement, `plan` for a prediction.
    pub source: String,
    pub seed: u64,
    /// Rounds each case ran on each target (interleaved: A B A B).
    pub rounds: u32,
    pub targets: Vec<Target>,
    pub results: Vec<CaseResult>,
    /// The file-level tests' phases, when run (`--files`).
    #[serde(default)]
    pub files: Vec<crate::files::FileResult>,
}

impl Report {
    /// A measured report: `measured[case][target]`, each the rounds merged.
    pub fn measured(
        seed: u64,
        rounds: u32,
        targets: Vec<Target>,
        cases: &[Case],
        measured: &[Vec<Measured>],
    ) -> Report {
        assert_eq!(cases.len(), measured.len());
        let mut results = Vec::new();
        for (case, per_target) in cases.iter().zip(measured) {
            assert_eq!(per_target.len(), targets.len());
            for (target, m) in targets.iter().zip(per_target) {
                results.push(CaseResult {
                    target: target.name.clone(),
                    case: case.clone(),
                    figures: m.figures(),
                    counts: Some(Counts {
                        reads: m.reads,
                        writes: m.writes,
                        flushes: m.flushes,
                        bytes: m.bytes,
                        elapsed_s: m.elapsed.as_secs_f64(),
                    }),
                    ratio: None,
                });
            }
        }
        let mut report = Report {
            format: FORMAT,
            source: "bench".into(),
            seed,
            rounds,
            targets,
            results,
            files: Vec::new(),
        };
        report.set_ratios();
        report
    }

    /// With two or more targets, each result's ratio to the first target's result of the same
    /// case (the first target's own is 1).
    pub fn set_ratios(&mut self) {
        if self.targets.len() < 2 {
            return;
        }
        let first = self.targets[0].name.clone();
        let base: Vec<(Case, Figures)> = self
            .results
            .iter()
            .filter(|r| r.target == first)
            .map(|r| (r.case.clone(), r.figures))
            .collect();
        let div = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        for r in &mut self.results {
            if let Some((_, b)) = base.iter().find(|(c, _)| c.same_load(&r.case)) {
                r.ratio = Some(Ratio {
                    iops: div(r.figures.iops, b.iops),
                    mb_s: div(r.figures.mb_s, b.mb_s),
                    p50_ms: div(r.figures.latency.p50_ms, b.latency.p50_ms),
                    p99_ms: div(r.figures.latency.p99_ms, b.latency.p99_ms),
                });
            }
        }
    }

    /// The table printed by default: one line per case and target.
    pub fn table(&self) -> String {
        let compare = self.targets.len() > 1;
        let mut rows: Vec<Vec<String>> = vec![{
            let mut h: Vec<String> = [
                "target", "workload", "size", "qd", "clients", "IOPS", "MB/s", "p50 ms", "p90 ms",
                "p99 ms", "p99.9 ms",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            if compare {
                h.push("IOPS ratio".into());
                h.push("p99 ratio".into());
            }
            h
        }];
        for r in &self.results {
            let f = &r.figures;
            let l = &f.latency;
            let mut row = vec![
                r.target.clone(),
                r.case.workload.clone(),
                size_text(r.case.size),
                r.case.queue_depth.to_string(),
                r.case.clients.to_string(),
                format!("{:.1}", f.iops),
                format!("{:.2}", f.mb_s),
                ms(l.p50_ms),
                ms(l.p90_ms),
                ms(l.p99_ms),
                ms(l.p999_ms),
            ];
            if compare {
                let (i, p) = r
                    .ratio
                    .map(|x| (format!("{:.2}", x.iops), format!("{:.2}", x.p99_ms)))
                    .unwrap_or_default();
                row.push(i);
                row.push(p);
            }
            rows.push(row);
        }
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for row in &rows {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(c, cell)| {
                    if c < 3 {
                        format!("{cell:<w$}", w = widths[c])
                    } else {
                        format!("{cell:>w$}", w = widths[c])
                    }
                })
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}

/// The file tests' table: one line per target and phase.
pub fn files_table(files: &[crate::files::FileResult]) -> String {
    let mut out = format!(
        "{:<24}  {:<12}  {:>8}  {:>10}  {:>9}  {:>9}\n",
        "target", "phase", "files", "MB", "MB/s", "files/s"
    );
    for f in files {
        out.push_str(&format!(
            "{:<24}  {:<12}  {:>8}  {:>10.1}  {:>9.1}  {:>9.0}\n",
            f.target,
            f.phase,
            f.files,
            f.bytes as f64 / 1e6,
            f.mb_s,
            f.files_per_s
        ));
    }
    out
}

/// A latency in ms with 3 significant digits or so.
fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{kind, Limit, Sweep};
    use std::time::Duration;

    fn cases() -> Vec<Case> {
        Sweep {
            workloads: vec![kind("rand-read").unwrap()],
            sizes: vec![4096, 65536],
            queue_depths: vec![1],
            clients: vec![1],
            working_set: 1 << 20,
            limit: Limit {
                runtime: Duration::from_secs(1),
                ops: None,
            },
        }
        .cases()
        .unwrap()
    }

    fn measured(ops: u64, size: u64, ms_each: u64) -> Measured {
        let mut m = Measured {
            reads: ops,
            bytes: ops * size,
            elapsed: Duration::from_secs(1),
            ..Measured::default()
        };
        for _ in 0..ops {
            m.latencies.record(Duration::from_millis(ms_each));
        }
        m
    }

    fn target(name: &str) -> Target {
        Target {
            name: name.into(),
            description: format!("nbd+unix:///{name}?socket=/x"),
            bytes: 1 << 20,
        }
    }

    #[test]
    fn a_comparison_gives_each_case_its_ratio_to_the_first_target() {
        let cases = cases();
        let m = vec![
            vec![measured(100, 4096, 10), measured(200, 4096, 5)],
            vec![measured(50, 65536, 20), measured(25, 65536, 40)],
        ];
        let r = Report::measured(1, 2, vec![target("A"), target("B")], &cases, &m);
        assert_eq!(r.results.len(), 4);
        // Targets of other sizes ran the same cases over other working sets.
        let mut other = r.clone();
        other.results[1].case.working_set = 2 << 20;
        other.results[1].ratio = None;
        other.set_ratios();
        assert_eq!(other.results[1].ratio, r.results[1].ratio);
        let b4k = &r.results[1];
        assert_eq!((b4k.target.as_str(), b4k.case.size), ("B", 4096));
        let ratio = b4k.ratio.unwrap();
        assert!((ratio.iops - 2.0).abs() < 1e-9 && (ratio.mb_s - 2.0).abs() < 1e-9);
        assert!((ratio.p50_ms - 0.5).abs() < 0.01, "{ratio:?}");
        let b64k = r.results[3].ratio.unwrap();
        assert!((b64k.iops - 0.5).abs() < 1e-9 && (b64k.p99_ms - 2.0).abs() < 0.01);
        assert!((r.results[0].ratio.unwrap().iops - 1.0).abs() < 1e-12);
        let table = r.table();
        assert!(
            table.lines().next().unwrap().contains("IOPS ratio"),
            "{table}"
        );
        assert!(table.contains("2.00"), "{table}");
    }

    #[test]
    fn one_target_has_no_ratios_and_the_report_round_trips_as_json() {
        let cases = cases();
        let m = vec![
            vec![measured(100, 4096, 10)],
            vec![measured(10, 65536, 100)],
        ];
        let r = Report::measured(7, 1, vec![target("A")], &cases, &m);
        assert!(r.results.iter().all(|x| x.ratio.is_none()));
        assert!(!r.table().contains("ratio"));
        assert!(r.table().contains("4KiB") && r.table().contains("100.0"));
        let text = serde_json::to_string(&r).unwrap();
        let back: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.results[1].counts.unwrap().bytes, 10 * 65536);
    }
}

//! The plot of a report (`--plot FILE.svg|FILE.png`): IOPS, MB/s and latency percentiles (p50,
//! p99) against request size, queue depth or clients (whichever the sweep varies; the cases'
//! order otherwise), one line per target and workload. plotters draws it; its text needs a
//! TrueType font, found at the usual places (or `RAIDKIT_FONT`).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::{CaseResult, Report};
use crate::workload::size_text;

/// Fonts tried in turn (Debian's fonts-dejavu-core, fonts-liberation).
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

const SIZE: (u32, u32) = (900, 1200);

/// What the x axis shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Axis {
    Size,
    QueueDepth,
    Clients,
    Case,
}

impl Axis {
    fn of(report: &Report) -> Axis {
        let distinct = |f: &dyn Fn(&CaseResult) -> u64| {
            report
                .results
                .iter()
                .map(f)
                .collect::<BTreeSet<u64>>()
                .len()
        };
        if distinct(&|r| r.case.size) > 1 {
            Axis::Size
        } else if distinct(&|r| u64::from(r.case.queue_depth)) > 1 {
            Axis::QueueDepth
        } else if distinct(&|r| u64::from(r.case.clients)) > 1 {
            Axis::Clients
        } else {
            Axis::Case
        }
    }

    fn value(self, r: &CaseResult, order: &[String]) -> u64 {
        match self {
            Axis::Size => r.case.size,
            Axis::QueueDepth => u64::from(r.case.queue_depth),
            Axis::Clients => u64::from(r.case.clients),
            Axis::Case => order
                .iter()
                .position(|w| *w == r.case.workload)
                .unwrap_or(0) as u64,
        }
    }

    fn label(self, v: u64, order: &[String]) -> String {
        match self {
            Axis::Size => size_text(v),
            Axis::QueueDepth | Axis::Clients => v.to_string(),
            Axis::Case => order.get(v as usize).cloned().unwrap_or_default(),
        }
    }

    fn title(self) -> &'static str {
        match self {
            Axis::Size => "request size",
            Axis::QueueDepth => "queue depth",
            Axis::Clients => "clients",
            Axis::Case => "workload",
        }
    }

    /// The name of a line: the target and what the axis does not show.
    fn series(self, r: &CaseResult) -> String {
        let c = &r.case;
        match self {
            Axis::Size => format!(
                "{} {} qd{} c{}",
                r.target, c.workload, c.queue_depth, c.clients
            ),
            Axis::QueueDepth => format!(
                "{} {} {} c{}",
                r.target,
                c.workload,
                size_text(c.size),
                c.clients
            ),
            Axis::Clients => format!(
                "{} {} {} qd{}",
                r.target,
                c.workload,
                size_text(c.size),
                c.queue_depth
            ),
            Axis::Case => r.target.clone(),
        }
    }
}

/// Registers the first font found as plotters' `sans-serif`, once per process (`raidkit plan`'s
/// plot uses it too).
pub fn font() -> Result<(), String> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let env = std::env::var("RAIDKIT_FONT").ok();
        let candidates: Vec<&str> = env
            .iter()
            .map(|s| s.as_str())
            .chain(FONT_PATHS.iter().copied())
            .collect();
        for path in &candidates {
            if let Ok(bytes) = std::fs::read(path) {
                // plotters keeps the font for the process's life.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                return plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                    .map_err(|_| format!("{path} is not a TrueType font the plot can use"));
            }
        }
        Err(format!(
            "no TrueType font for the plot's text: looked for {}; install fonts-dejavu-core \
             (scripts/install-deps.sh) or set RAIDKIT_FONT to a .ttf file",
            candidates.join(", ")
        ))
    })
    .clone()
}

/// Draws `report` into `path`: SVG for `.svg`, PNG for `.png`.
pub fn plot(report: &Report, path: &Path) -> Result<(), String> {
    if report.results.is_empty() {
        return Err("nothing to plot: the report has no results".into());
    }
    font()?;
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let shown = path.display();
    match ext.as_deref() {
        Some("svg") => {
            let root = SVGBackend::new(path, SIZE).into_drawing_area();
            draw(report, &root).map_err(|e| format!("{shown}: {e}"))?;
            root.present().map_err(|e| format!("{shown}: {e}"))
        }
        Some("png") => {
            let root = BitMapBackend::new(path, SIZE).into_drawing_area();
            draw(report, &root).map_err(|e| format!("{shown}: {e}"))?;
            root.present().map_err(|e| format!("{shown}: {e}"))
        }
        _ => Err(format!(
            "{shown}: the plot's file name must end in .svg or .png"
        )),
    }
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw<DB: DrawingBackend>(report: &Report, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let axis = Axis::of(report);
    let mut order: Vec<String> = Vec::new();
    for r in &report.results {
        if !order.contains(&r.case.workload) {
            order.push(r.case.workload.clone());
        }
    }
    let xs: BTreeSet<u64> = report
        .results
        .iter()
        .map(|r| axis.value(r, &order))
        .collect();
    let xs: Vec<u64> = xs.into_iter().collect();
    let mut series: Vec<String> = Vec::new();
    for r in &report.results {
        let s = axis.series(r);
        if !series.contains(&s) {
            series.push(s);
        }
    }
    type Pick = fn(&CaseResult) -> f64;
    let panels: [(&str, Vec<(&str, Pick)>); 3] = [
        ("IOPS", vec![("", |r| r.figures.iops)]),
        ("MB/s", vec![("", |r| r.figures.mb_s)]),
        (
            "latency ms (p50 solid, p99 dashed)",
            vec![
                ("p50", |r| r.figures.latency.p50_ms),
                ("p99", |r| r.figures.latency.p99_ms),
            ],
        ),
    ];
    let areas = root.split_evenly((3, 1));
    for (area, (title, picks)) in areas.iter().zip(panels.iter()) {
        let top = report
            .results
            .iter()
            .flat_map(|r| picks.iter().map(move |(_, p)| p(r)))
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.1;
        let n = xs.len();
        let mut chart = ChartBuilder::on(area)
            .caption(*title, ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0.0..top)?;
        chart
            .configure_mesh()
            .x_labels(n.min(20))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() > 1e-6 || i < 0.0 || i as usize >= n {
                    return String::new();
                }
                axis.label(xs[i as usize], &order)
            })
            .x_desc(axis.title())
            .draw()?;
        for (si, name) in series.iter().enumerate() {
            let color = Palette99::pick(si).to_rgba();
            for (pi, (suffix, pick)) in picks.iter().enumerate() {
                let points: Vec<(f64, f64)> = report
                    .results
                    .iter()
                    .filter(|r| axis.series(r) == *name)
                    .map(|r| {
                        let x = xs
                            .iter()
                            .position(|&v| v == axis.value(r, &order))
                            .unwrap_or(0);
                        (x as f64, pick(r))
                    })
                    .collect();
                let label = if suffix.is_empty() {
                    name.clone()
                } else {
                    format!("{name} {suffix}")
                };
                let style = ShapeStyle::from(color).stroke_width(2);
                if pi == 0 {
                    chart
                        .draw_series(LineSeries::new(points.clone(), style))?
                        .label(label)
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
                } else {
                    chart.draw_series(DashedLineSeries::new(points.clone(), 6, 4, style))?;
                }
                chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Target;
    use crate::stats::Measured;
    use crate::workload::{kind, Limit, Sweep};
    use std::time::Duration;

    fn report(sizes: &[u64], qd: &[u32]) -> Report {
        let cases = Sweep {
            workloads: vec![kind("rand-read").unwrap()],
            sizes: sizes.to_vec(),
            queue_depths: qd.to_vec(),
            clients: vec![1],
            working_set: 1 << 30,
            limit: Limit {
                runtime: Duration::from_secs(1),
                ops: None,
            },
        }
        .cases()
        .unwrap();
        let measured: Vec<Vec<Measured>> = cases
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut m = Measured {
                    reads: 100 * (i as u64 + 1),
                    bytes: 100 * (i as u64 + 1) * c.size,
                    elapsed: Duration::from_secs(1),
                    ..Measured::default()
                };
                m.latencies.record(Duration::from_millis(2 + i as u64));
                vec![m.clone(), m]
            })
            .collect();
        let t = |n: &str| Target {
            name: n.into(),
            description: n.into(),
            bytes: 1 << 30,
        };
        Report::measured(1, 1, vec![t("A"), t("B")], &cases, &measured)
    }

    #[test]
    fn the_axis_is_what_the_sweep_varies() {
        assert_eq!(Axis::of(&report(&[4096, 65536], &[1])), Axis::Size);
        assert_eq!(Axis::of(&report(&[4096], &[1, 4, 16])), Axis::QueueDepth);
        assert_eq!(Axis::of(&report(&[4096], &[1])), Axis::Case);
    }

    #[test]
    fn an_svg_and_a_png_are_written() {
        let dir = std::env::temp_dir().join(format!("bench-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = dir.join("p.svg");
        plot(&report(&[4096, 65536, 1 << 20], &[1]), &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
        assert!(text.contains("IOPS") && text.contains("64KiB") && text.contains("<polyline"));
        let png = dir.join("p.png");
        plot(&report(&[4096], &[1, 8]), &png).unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        let e = plot(&report(&[4096], &[1]), &dir.join("p.jpg")).unwrap_err();
        assert!(e.contains(".svg or .png"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

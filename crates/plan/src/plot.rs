//! The plot of a sweep (SVG, plotters): the profile's figure (IOPS or MB/s) against usable
//! capacity, and p99 latency against it, one point per configuration, coloured by level, the
//! recommended one ringed.

use std::path::Path;

use bench::workload::Goal;
use layout::Level;
use plotters::prelude::*;

use crate::sweep::Plan;

const SIZE: (u32, u32) = (900, 1000);

/// Draws `plan` into `path` (.svg).
pub fn plot(plan: &Plan, path: &Path) -> Result<(), String> {
    if path.extension().and_then(|e| e.to_str()) != Some("svg") {
        return Err(format!(
            "{}: the plan's plot is SVG: give a file name ending in .svg",
            path.display()
        ));
    }
    if plan.rows.is_empty() {
        return Err("nothing to plot: the sweep has no configurations".into());
    }
    bench::plot::font()?;
    let shown = path.display();
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    draw(plan, &root).map_err(|e| format!("{shown}: {e}"))?;
    root.present().map_err(|e| format!("{shown}: {e}"))
}

/// A panel: x axis title, its top, the x of a row.
type Panel<'a> = (&'a str, f64, Box<dyn Fn(&crate::sweep::Row) -> f64>);

type DrawResult = Result<(), DrawingAreaErrorKind<std::io::Error>>;

fn draw(plan: &Plan, root: &DrawingArea<SVGBackend, plotters::coord::Shift>) -> DrawResult {
    root.fill(&WHITE)?;
    let goal = plan.goal;
    let score = |r: &crate::sweep::Row| match goal {
        Goal::Iops => r.figures.iops,
        Goal::Throughput => r.figures.mb_s,
    };
    let goal_name = match goal {
        Goal::Iops => "IOPS",
        Goal::Throughput => "MB/s",
    };
    let top = plan.rows.iter().map(score).fold(0.0, f64::max).max(1e-9) * 1.1;
    let cap_top = plan
        .rows
        .iter()
        .map(|r| r.risk.usable_bytes as f64 / 1e12)
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let p99_top = plan
        .rows
        .iter()
        .map(|r| r.figures.latency.p99_ms)
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let title = format!(
        "raidkit plan {} on {} (predicted, virtual time)",
        plan.workload, plan.disks
    );
    let root = root.titled(&title, ("sans-serif", 22))?;
    let areas = root.split_evenly((2, 1));
    let panels: [Panel; 2] = [
        (
            "usable capacity TB",
            cap_top,
            Box::new(|r: &crate::sweep::Row| r.risk.usable_bytes as f64 / 1e12),
        ),
        (
            "p99 latency ms",
            p99_top,
            Box::new(|r: &crate::sweep::Row| r.figures.latency.p99_ms),
        ),
    ];
    for (area, (x_desc, x_top, x_of)) in areas.iter().zip(panels.iter()) {
        let mut chart = ChartBuilder::on(area)
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..*x_top, 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc(*x_desc)
            .y_desc(goal_name)
            .draw()?;
        for (li, level) in Level::ALL.iter().enumerate() {
            let color = Palette99::pick(li).to_rgba();
            let points: Vec<(f64, f64)> = plan
                .rows
                .iter()
                .filter(|r| r.config.level == *level)
                .map(|r| (x_of(r), score(r)))
                .collect();
            if points.is_empty() {
                continue;
            }
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?
                .label(level.name())
                .legend(move |(x, y)| Circle::new((x + 8, y), 4, color.filled()));
        }
        if let Some(i) = plan.recommended {
            let r = &plan.rows[i];
            let p = (x_of(r), score(r));
            chart.draw_series(std::iter::once(Circle::new(
                p,
                10,
                ShapeStyle::from(&BLACK).stroke_width(2),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("recommended: {}", r.label),
                p,
                ("sans-serif", 15),
            )))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

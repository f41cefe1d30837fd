//! The plots next to BENCHMARKS.md (SVG, written with `plotters` by every run that writes the
//! report): the B3 handoff-latency distribution, the B3 wait by the waiter's position in line,
//! and throughput against the number of tasks.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::contenders::{BenchResult, Kind};
use crate::report::{Report, HANDOFF_SVG, MIN_AT_POSITION, POSITIONS_SVG, THROUGHPUT_SVG};
use crate::stats::Samples;

/// Points on each distribution curve.
const CURVE_POINTS: usize = 200;

/// Writes the plots the report has data for under `root` (the repository); returns their paths.
pub(crate) fn write(report: &Report, root: &Path) -> BenchResult<Vec<PathBuf>> {
    let mut written = Vec::new();
    if !report.b3_gaps.is_empty() {
        let path = root.join(HANDOFF_SVG);
        create_parent(&path)?;
        handoff(report, &path)?;
        written.push(path);
    }
    if !report.b3_waits.is_empty() {
        let path = root.join(POSITIONS_SVG);
        create_parent(&path)?;
        positions(report, &path)?;
        written.push(path);
    }
    if !report.b1.is_empty() || !report.b2.is_empty() || !report.b3.is_empty() {
        let path = root.join(THROUGHPUT_SVG);
        create_parent(&path)?;
        throughput(report, &path)?;
        written.push(path);
    }
    Ok(written)
}

fn create_parent(path: &Path) -> BenchResult<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    Ok(())
}

/// One colour per contender, the same in every plot.
fn colour(kind: Kind) -> RGBColor {
    match kind {
        Kind::Ping => RGBColor(120, 120, 120),
        Kind::Floor => RGBColor(90, 90, 90),
        Kind::Redisson => RGBColor(140, 86, 75),
        Kind::Manual => RGBColor(31, 119, 180),
        Kind::ManualRun => RGBColor(44, 160, 44),
        Kind::Macro => RGBColor(23, 190, 207),
        Kind::Rslock => RGBColor(255, 127, 14),
        Kind::AsyncRedisLock => RGBColor(214, 39, 40),
    }
}

/// The distribution of the release → next acquire gap: one panel per task count, one curve per
/// contender (the fraction of handoffs at most x µs), with the round trip marked.
fn handoff(report: &Report, path: &Path) -> BenchResult<()> {
    let root = SVGBackend::new(path, (1100, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let (charts, strip) = root.split_vertically(440);
    let panels = charts.split_evenly((1, report.b3_gaps.len().max(1)));
    for ((tasks, gaps), panel) in report.b3_gaps.iter().zip(panels.iter()) {
        handoff_panel(report, *tasks, gaps, panel)?;
    }
    let mut entries: Vec<(String, ShapeStyle, bool)> = Vec::new();
    if report.rtt_us.is_finite() {
        entries.push((
            format!("1 round trip (PING p50, {:.0} µs)", report.rtt_us),
            BLACK.mix(0.6).stroke_width(1),
            true,
        ));
    }
    let kinds: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| report.b3_gaps.iter().any(|(_, g)| g.contains_key(k)))
        .collect();
    entries.extend(
        kinds
            .into_iter()
            .map(|k| (k.label().to_owned(), colour(k).stroke_width(2), false)),
    );
    legend(&strip, &entries)?;
    root.present()?;
    Ok(())
}

fn handoff_panel(
    report: &Report,
    tasks: usize,
    gaps: &HashMap<Kind, Samples>,
    panel: &DrawingArea<SVGBackend<'_>, Shift>,
) -> BenchResult<()> {
    let mut curves: Vec<(Kind, Vec<(f64, f64)>)> = Vec::new();
    for kind in Kind::ALL {
        let Some(samples) = gaps.get(&kind) else {
            continue;
        };
        let mut samples = samples.clone();
        if samples.len() == 0 {
            continue;
        }
        // Up to the 99.9th percentile, so that one outlier does not squeeze the rest.
        let points = (0..=CURVE_POINTS)
            .map(|i| {
                let q = (i as f64 / CURVE_POINTS as f64).min(0.999);
                // A log axis has no zero: a gap under 1 µs (the next acquire returned before
                // the release did) is drawn at 1 µs.
                (samples.quantile_us(q).max(1.0), q)
            })
            .collect();
        curves.push((kind, points));
    }
    let x_max = curves
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.0))
        .fold(10.0, f64::max)
        * 1.2;
    let mut chart = ChartBuilder::on(panel)
        .caption(
            format!("B3 handoff gap, {tasks} tasks on one lock"),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d((1.0..x_max).log_scale(), 0.0..1.0)?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .x_desc("release returned → next acquire returned (µs, log scale)")
        .y_desc("fraction of handoffs ≤ x")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()?;
    if report.rtt_us.is_finite() {
        let rtt = report.rtt_us;
        let style = BLACK.mix(0.6).stroke_width(1);
        chart.draw_series(DashedLineSeries::new([(rtt, 0.0), (rtt, 1.0)], 5, 4, style))?;
    }
    for (kind, points) in curves {
        chart.draw_series(LineSeries::new(points, colour(kind).stroke_width(2)))?;
    }
    Ok(())
}

/// The B3 wait by position in line: one panel per task count, the median wait (µs) of the
/// sections at each position, per implementation.
fn positions(report: &Report, path: &Path) -> BenchResult<()> {
    let root = SVGBackend::new(path, (1100, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let (charts, strip) = root.split_vertically(440);
    let panels = charts.split_evenly((1, report.b3_waits.len().max(1)));
    let mut drawn: Vec<Kind> = Vec::new();
    for ((tasks, waits), panel) in report.b3_waits.iter().zip(panels.iter()) {
        let mut curves: Vec<(Kind, Vec<(f64, f64)>)> = Vec::new();
        for kind in Kind::ALL {
            let Some(by_position) = waits.get(&kind) else {
                continue;
            };
            let points: Vec<(f64, f64)> = by_position
                .iter()
                .enumerate()
                .filter(|(_, s)| s.len() >= MIN_AT_POSITION)
                .map(|(at, s)| (at as f64, s.clone().quantile_us(0.5).max(1.0)))
                .collect();
            if !points.is_empty() {
                curves.push((kind, points));
                if !drawn.contains(&kind) {
                    drawn.push(kind);
                }
            }
        }
        let x_max = curves
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.0))
            .fold(1.0, f64::max)
            + 1.0;
        let y_max = curves
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.1))
            .fold(10.0, f64::max)
            * 1.5;
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!("B3 wait by position in line, {tasks} tasks"),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5..x_max, (1.0..y_max).log_scale())?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_desc("sections that entered while it waited")
            .y_desc("median wait (µs, log scale)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()?;
        for (kind, points) in curves {
            let style = colour(kind).stroke_width(2);
            chart.draw_series(LineSeries::new(points.clone(), style))?;
            chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, colour(kind).filled())),
            )?;
        }
    }
    let entries: Vec<(String, ShapeStyle, bool)> = Kind::ALL
        .into_iter()
        .filter(|k| drawn.contains(k))
        .map(|k| (k.label().to_owned(), colour(k).stroke_width(2), false))
        .collect();
    legend(&strip, &entries)?;
    root.present()?;
    Ok(())
}

/// Throughput against tasks: acquire + release cycles on distinct keys (B1 with 1 task, B2),
/// and critical sections on one contended key (B3).
fn throughput(report: &Report, path: &Path) -> BenchResult<()> {
    let root = SVGBackend::new(path, (1100, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let (charts, strip) = root.split_vertically(440);
    let panels = charts.split_evenly((1, 2));
    let mut distinct: HashMap<Kind, Vec<(f64, f64)>> = HashMap::new();
    for (kind, row) in &report.b1 {
        distinct.entry(*kind).or_default().push((1.0, row[0]));
    }
    for (tasks, rows) in &report.b2 {
        for (kind, row) in rows {
            distinct
                .entry(*kind)
                .or_default()
                .push((*tasks as f64, row[0]));
        }
    }
    let mut one_key: HashMap<Kind, Vec<(f64, f64)>> = HashMap::new();
    for row in &report.b3 {
        one_key
            .entry(row.kind)
            .or_default()
            .push((row.tasks as f64, row.per_sec));
    }
    throughput_panel(
        &panels[0],
        "distinct keys (B1: 1 task, B2)",
        "acquire + release cycles/s",
        &distinct,
    )?;
    throughput_panel(
        &panels[1],
        "one key, tasks waiting (B3)",
        "critical sections/s",
        &one_key,
    )?;
    let entries: Vec<(String, ShapeStyle, bool)> = Kind::ALL
        .into_iter()
        .filter(|k| distinct.contains_key(k) || one_key.contains_key(k))
        .map(|k| (k.label().to_owned(), colour(k).stroke_width(2), false))
        .collect();
    legend(&strip, &entries)?;
    root.present()?;
    Ok(())
}

fn throughput_panel(
    panel: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    y_desc: &str,
    series: &HashMap<Kind, Vec<(f64, f64)>>,
) -> BenchResult<()> {
    let points = || series.values().flatten();
    let x_max = points().map(|p| p.0).fold(2.0, f64::max) * 1.1;
    let y_max = points().map(|p| p.1).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(panel)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .x_desc("tasks")
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{:.0}k", y / 1000.0))
        .draw()?;
    for kind in Kind::ALL {
        let Some(points) = series.get(&kind) else {
            continue;
        };
        let mut points = points.clone();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart.draw_series(LineSeries::new(
            points.clone(),
            colour(kind).stroke_width(2),
        ))?;
        chart.draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 3, colour(kind).filled())),
        )?;
    }
    Ok(())
}

/// One legend for all panels, in rows along the bottom strip: (label, line style, dashed).
fn legend(
    strip: &DrawingArea<SVGBackend<'_>, Shift>,
    entries: &[(String, ShapeStyle, bool)],
) -> BenchResult<()> {
    let font = ("sans-serif", 14).into_font().color(&BLACK);
    let per_row = 4;
    let column = strip.dim_in_pixel().0 as i32 / per_row as i32;
    for (i, (label, style, dashed)) in entries.iter().enumerate() {
        let x = 20 + (i % per_row) as i32 * column;
        let y = 14 + (i / per_row) as i32 * 22;
        if *dashed {
            for dash in 0..3 {
                let from = x + dash * 10;
                strip.draw(&PathElement::new([(from, y), (from + 5, y)], *style))?;
            }
        } else {
            strip.draw(&PathElement::new([(x, y), (x + 25, y)], *style))?;
        }
        strip.draw(&Text::new(label.clone(), (x + 32, y - 8), font.clone()))?;
    }
    Ok(())
}

//! Each plot is drawn by plotters into an SVG string that the page inlines.

use crate::{Decision, Placement, Sample, TaskRecord};
use matrix::CommMatrix;
use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;

/// Runs a drawing closure against an SVG backend and returns the SVG text. A drawing error
/// (only possible on degenerate input) yields a short note instead of a broken page.
fn svg(
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, plotters::coord::Shift>) -> Result<(), String>,
) -> String {
    let mut out = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        let r = root
            .fill(&WHITE)
            .map_err(|e| e.to_string())
            .and_then(|_| draw(&root));
        let p = root.present().map_err(|e| e.to_string());
        r.and(p)
    };
    match result {
        Ok(()) => out,
        Err(e) => format!("<p class=\"note\">plot unavailable: {e}</p>"),
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The matrix as a heatmap: task i (y) against task j (x), brighter = more traffic.
pub fn heatmap(m: &CommMatrix, caption: &str, px: u32) -> String {
    let n = m.n().max(1);
    let max = (0..m.n())
        .flat_map(|i| m.row(i).iter().copied())
        .fold(0.0f64, f64::max);
    svg((px, px), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(caption, ("sans-serif", 14))
            .margin(6)
            .x_label_area_size(24)
            .y_label_area_size(28)
            .build_cartesian_2d((0..n).into_segmented(), (0..n).into_segmented())
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("task")
            .y_desc("task")
            .x_labels(n.min(8))
            .y_labels(n.min(8))
            .draw()
            .map_err(err)?;
        let cells = (0..m.n()).flat_map(|i| (0..m.n()).map(move |j| (i, j)));
        chart
            .draw_series(cells.map(|(i, j)| {
                let v = if max > 0.0 { m.get(i, j) / max } else { 0.0 };
                // Cell (i, j) sits in segment j of x and segment i of y, where the labels are.
                Rectangle::new(
                    [
                        (SegmentValue::Exact(j), SegmentValue::Exact(i)),
                        (SegmentValue::Exact(j + 1), SegmentValue::Exact(i + 1)),
                    ],
                    ViridisRGB::get_color(v).filled(),
                )
            }))
            .map_err(err)?;
        Ok(())
    })
}

/// Which PU each task ran on over time: one row per task, colour per PU, migration times marked.
pub fn timeline(
    placements: &[Placement],
    tasks: usize,
    duration: f64,
    pus: &[u32],
    migrations: &[f64],
) -> String {
    let height = (60 + 16 * tasks.max(1)).min(900) as u32;
    let end = duration.max(0.001);
    svg((860, height), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption("Where each task ran (colour = PU)", ("sans-serif", 14))
            .margin(6)
            .x_label_area_size(28)
            .y_label_area_size(36)
            .build_cartesian_2d(0.0..end, 0.0..tasks.max(1) as f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("seconds")
            .y_desc("task")
            .draw()
            .map_err(err)?;
        let colour = |pu: u32| {
            let k = pus.iter().position(|&p| p == pu).unwrap_or(0);
            Palette99::pick(k).filled()
        };
        // Each sample holds until the task's next sample.
        let mut by_task: Vec<Vec<&Placement>> = vec![Vec::new(); tasks];
        for p in placements.iter().filter(|p| p.task < tasks) {
            by_task[p.task].push(p);
        }
        for (task, samples) in by_task.iter().enumerate() {
            let bars = samples.iter().enumerate().map(|(k, p)| {
                let t1 = samples.get(k + 1).map_or(end, |q| q.t);
                let y = tasks as f64 - 1.0 - task as f64;
                Rectangle::new([(p.t, y + 0.1), (t1, y + 0.9)], colour(p.pu))
            });
            chart.draw_series(bars).map_err(err)?;
        }
        chart
            .draw_series(
                migrations.iter().map(|&t| {
                    PathElement::new(vec![(t, 0.0), (t, tasks as f64)], RED.stroke_width(2))
                }),
            )
            .map_err(err)?
            .label("migration")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED.stroke_width(2)));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        Ok(())
    })
}

type TimeChart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// A chart of a quantity over the run: seconds on x, 0..max (plus headroom) on y.
fn over_time<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    caption: &str,
    duration: f64,
    max: f64,
    y_desc: &str,
) -> Result<TimeChart<'a, 'b>, String> {
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 14))
        .margin(6)
        .x_label_area_size(28)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..duration.max(0.001), 0.0..max * 1.05)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// Predicted cost of the live mapping and of the best candidate at each decision.
pub fn costs(decisions: &[Decision], duration: f64) -> String {
    let max = decisions
        .iter()
        .map(|d| d.cost_current.max(d.cost_new))
        .fold(0.0f64, f64::max)
        .max(1.0);
    svg((860, 260), |root| {
        let caption = "Predicted communication cost (shared cost model)";
        let mut chart = over_time(root, caption, duration, max, "cost")?;
        chart
            .draw_series(LineSeries::new(
                decisions.iter().map(|d| (d.t, d.cost_current)),
                BLUE.stroke_width(2),
            ))
            .map_err(err)?
            .label("live mapping")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLUE.stroke_width(2)));
        chart
            .draw_series(LineSeries::new(
                decisions.iter().map(|d| (d.t, d.cost_new)),
                GREEN.stroke_width(1),
            ))
            .map_err(err)?
            .label("best candidate")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], GREEN.stroke_width(1)));
        chart
            .draw_series(
                decisions
                    .iter()
                    .filter(|d| d.action == "migrate")
                    .map(|d| Circle::new((d.t, d.cost_new), 5, RED.filled())),
            )
            .map_err(err)?
            .label("migration")
            .legend(|(x, y)| Circle::new((x + 8, y), 4, RED.filled()));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        Ok(())
    })
}

/// Detection events per second over the run.
pub fn events(samples: &[Sample], duration: f64) -> String {
    let max = samples
        .iter()
        .map(|s| s.events_per_s)
        .fold(0.0f64, f64::max)
        .max(1.0);
    svg((860, 220), |root| {
        let mut chart = over_time(
            root,
            "Detection events per second",
            duration,
            max,
            "events/s",
        )?;
        chart
            .draw_series(LineSeries::new(
                samples.iter().map(|s| (s.t, s.events_per_s)),
                BLUE.stroke_width(2),
            ))
            .map_err(err)?;
        Ok(())
    })
}

/// CPU seconds per task.
pub fn cpu(tasks: &[TaskRecord]) -> String {
    let max = tasks
        .iter()
        .map(|t| t.cpu_s)
        .fold(0.0f64, f64::max)
        .max(0.001);
    let n = tasks.len().max(1);
    svg((860, 220), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption("CPU time per task", ("sans-serif", 14))
            .margin(6)
            .x_label_area_size(28)
            .y_label_area_size(60)
            .build_cartesian_2d((0..n).into_segmented(), 0.0..max * 1.1)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("task")
            .y_desc("CPU s")
            .x_labels(n.min(16))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(tasks.iter().map(|t| {
                Rectangle::new(
                    [
                        (SegmentValue::Exact(t.index), 0.0),
                        (SegmentValue::Exact(t.index + 1), t.cpu_s),
                    ],
                    BLUE.mix(0.7).filled(),
                )
            }))
            .map_err(err)?;
        Ok(())
    })
}

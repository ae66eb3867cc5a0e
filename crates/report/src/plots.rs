//! Each plot is drawn by plotters into an SVG string that the page inlines.
//!
//! Tasks are always shown in the program's own order ([`crate::order::TaskOrder`]) and named,
//! never numbered by their place in tasks.json.

use crate::{Decision, Placement, Sample};
use matrix::CommMatrix;
use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;
use plotters::style::text_anchor::{HPos, Pos, VPos};

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
        Err(e) => format!("<p class=\"unavailable\">plot unavailable: {e}</p>"),
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A number for an axis or a label: whole numbers without decimals, large ones with a
/// k/M/G suffix, small ones with two significant decimals.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if a >= 1e9 {
        trim(format!("{:.1}", v / 1e9)) + "G"
    } else if a >= 1e6 {
        trim(format!("{:.1}", v / 1e6)) + "M"
    } else if a >= 1e4 {
        trim(format!("{:.1}", v / 1e3)) + "k"
    } else if a >= 10.0 || a == 0.0 || (v - v.round()).abs() < 1e-9 {
        format!("{:.0}", v)
    } else if a >= 1.0 {
        trim(format!("{:.1}", v))
    } else {
        trim(format!("{:.2}", v))
    }
}

/// A byte count with a binary unit.
pub fn fmt_bytes(v: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = v;
    let mut k = 0;
    while x.abs() >= 1024.0 && k + 1 < units.len() {
        x /= 1024.0;
        k += 1;
    }
    if k == 0 {
        format!("{:.0} B", x)
    } else {
        let s = format!("{:.1}", x);
        format!(
            "{} {}",
            s.trim_end_matches('0').trim_end_matches('.'),
            units[k]
        )
    }
}

/// A whole number with thousands separators (45,000).
pub fn fmt_int(v: f64) -> String {
    let s = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

/// A "nice" step (1, 2 or 5 times a power of ten) that cuts 0..max into about `n` parts.
fn nice_step(max: f64, n: usize) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / n.max(1) as f64;
    let p = 10f64.powf(raw.log10().floor());
    let f = raw / p;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * p
}

/// Width in pixels of `s` in a sans-serif font of `size` px (an estimate: no font is loaded).
fn text_width(s: &str, size: f64) -> f64 {
    s.chars().count() as f64 * size * 0.58
}

/// Cuts a label to `max_px` at `size`, ending it with an ellipsis.
fn fit(s: &str, size: f64, max_px: f64) -> String {
    if text_width(s, size) <= max_px {
        return s.to_string();
    }
    let keep = ((max_px / (size * 0.58)) as usize).saturating_sub(1).max(1);
    let mut t: String = s.chars().take(keep).collect();
    t.push('…');
    t
}

/// A sans-serif font `px` pixels high on the page (plotters' SVG backend writes
/// font-size = size / 1.24, so the size asked for is scaled up to match).
fn font(px: f64) -> TextStyle<'static> {
    ("sans-serif", px * 1.24).into_font().color(&BLACK)
}

/// The mesh every time chart shares: bold grid lines only, readable labels.
fn style_mesh<X: Ranged, Y: Ranged>(
    m: &mut plotters::chart::MeshStyle<'_, '_, X, Y, SVGBackend<'_>>,
) {
    m.light_line_style(TRANSPARENT)
        .bold_line_style(BLACK.mix(0.12))
        .label_style(font(12.0))
        .axis_desc_style(font(12.0));
}

/// The unit a heatmap's cells are in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Communication events: one block touched by a second task (MPI cells, if any, count
    /// bytes / block size in the same unit).
    Events,
    /// Bytes (the PMPI agent's rank matrix).
    Bytes,
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Events => "events",
            Unit::Bytes => "bytes",
        }
    }
    fn fmt(self, v: f64) -> String {
        match self {
            Unit::Events => fmt_num(v),
            Unit::Bytes => fmt_bytes(v),
        }
    }
}

/// A heatmap to draw: the matrix, the order and names of its rows (and columns).
pub struct Heatmap<'a> {
    pub matrix: &'a CommMatrix,
    /// Matrix indexes in display order (top row first, left column first).
    pub order: &'a [usize],
    /// The name of each displayed row, in display order.
    pub labels: &'a [String],
    pub caption: &'a str,
    pub unit: Unit,
    /// Width and height of the matrix area's box, in pixels.
    pub px: u32,
    /// Cells to mark with a dot (for example the cells the PMPI agent measured).
    pub marked: &'a dyn Fn(usize, usize) -> bool,
    /// Axis descriptions: rows, columns.
    pub axes: (&'a str, &'a str),
    /// Display positions where a new group of tasks (an MPI rank, ...) starts: a thin line.
    pub breaks: &'a [usize],
}

/// The matrix as a heatmap, with the names of the tasks on both axes and a colour scale
/// (viridis: dark = little, yellow = most) whose ticks carry the unit.
pub fn heatmap(h: &Heatmap) -> String {
    let n = h.order.len();
    let max = h
        .order
        .iter()
        .flat_map(|&i| h.order.iter().map(move |&j| (i, j)))
        .map(|(i, j)| h.matrix.get(i, j))
        .fold(0.0f64, f64::max);
    let px = h.px.max(160) as f64;
    // The colour scale's ticks, and the room their labels and the unit take.
    let scale_max = if max > 0.0 { max } else { 1.0 };
    let tick = match h.unit {
        Unit::Events => nice_step(scale_max, 5),
        // Bytes: a round number of the binary unit the maximum is written in.
        Unit::Bytes => {
            let base = 1024f64.powf((scale_max.log(1024.0)).floor().clamp(0.0, 4.0));
            nice_step(scale_max / base, 5) * base
        }
    };
    let ticks: Vec<f64> = (0..)
        .map(|k| k as f64 * tick)
        .take_while(|v| *v <= scale_max * (1.0 + 1e-9))
        .collect();
    let widest = ticks
        .iter()
        .map(|&v| text_width(&h.unit.fmt(v), 11.0))
        .fold(0.0, f64::max);
    let bar_w = 12.0 + 12.0 + 10.0 + widest + 18.0;
    let top = 28.0;
    // Names as large as the cells allow (8 to 12 px); every k-th name where even 8 px is
    // too large. The label area follows the longest name, up to 38% of the box.
    let longest = h
        .labels
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(1) as f64;
    let layout = |fsize: f64| {
        let area = (longest * fsize * 0.58 + 8.0).min(px * 0.38) + 16.0;
        let grid = (px - area - 6.0).max(40.0);
        (area, grid, grid / n.max(1) as f64)
    };
    let (_, _, first_cell) = layout(12.0);
    let fsize = (first_cell - 1.0).clamp(8.0, 12.0);
    let (label_area, grid, cell) = layout(fsize);
    let step = ((fsize + 1.0) / cell).ceil().max(1.0) as usize;
    let x0 = label_area;
    let y0 = top;
    let width = (x0 + grid + bar_w + 6.0) as u32;
    let height = (y0 + grid + label_area + 4.0) as u32;
    svg((width, height), |root| {
        root.draw(&Text::new(
            h.caption.to_string(),
            (4, 6),
            font(14.0).pos(Pos::new(HPos::Left, VPos::Top)),
        ))
        .map_err(err)?;
        let px_of = |v: f64| v.round() as i32;
        for (r, &i) in h.order.iter().enumerate() {
            for (c, &j) in h.order.iter().enumerate() {
                let v = h.matrix.get(i, j);
                let frac = if max > 0.0 { v / max } else { 0.0 };
                // Edges from the same products, so neighbouring cells share them exactly.
                let (ax, ay) = (x0 + c as f64 * cell, y0 + r as f64 * cell);
                let (bx, by) = (x0 + (c + 1) as f64 * cell, y0 + (r + 1) as f64 * cell);
                root.draw(&Rectangle::new(
                    [(px_of(ax), px_of(ay)), (px_of(bx), px_of(by))],
                    ViridisRGB::get_color(frac).filled(),
                ))
                .map_err(err)?;
                if (h.marked)(i, j) && cell >= 5.0 {
                    let colour = if frac > 0.6 { BLACK } else { WHITE };
                    root.draw(&Circle::new(
                        (px_of(ax + cell / 2.0), px_of(ay + cell / 2.0)),
                        (cell / 6.0).clamp(1.5, 3.0) as i32,
                        colour.filled(),
                    ))
                    .map_err(err)?;
                }
            }
        }
        for &b in h.breaks.iter().filter(|&&b| b > 0 && b < n) {
            let at = b as f64 * cell;
            let line = WHITE.mix(0.6).stroke_width(1);
            root.draw(&PathElement::new(
                vec![
                    (px_of(x0), px_of(y0 + at)),
                    (px_of(x0 + grid), px_of(y0 + at)),
                ],
                line,
            ))
            .map_err(err)?;
            root.draw(&PathElement::new(
                vec![
                    (px_of(x0 + at), px_of(y0)),
                    (px_of(x0 + at), px_of(y0 + grid)),
                ],
                line,
            ))
            .map_err(err)?;
        }
        root.draw(&Rectangle::new(
            [(px_of(x0), px_of(y0)), (px_of(x0 + grid), px_of(y0 + grid))],
            BLACK.stroke_width(1),
        ))
        .map_err(err)?;
        // Names: rows on the left, columns below (written upwards).
        let room = label_area - 16.0;
        for (k, l) in h.labels.iter().enumerate().take(n) {
            if k % step != 0 {
                continue;
            }
            let mid = k as f64 * cell + cell / 2.0;
            let l = fit(l, fsize, room);
            root.draw(&Text::new(
                l.clone(),
                (px_of(x0 - 4.0), px_of(y0 + mid)),
                font(fsize).pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(err)?;
            root.draw(&Text::new(
                l,
                (px_of(x0 + mid), px_of(y0 + grid + 4.0)),
                font(fsize)
                    .transform(FontTransform::Rotate270)
                    .pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(err)?;
        }
        // Axis descriptions.
        root.draw(&Text::new(
            h.axes.0.to_string(),
            (4, px_of(y0 + grid / 2.0)),
            font(12.0)
                .transform(FontTransform::Rotate270)
                .pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(err)?;
        root.draw(&Text::new(
            h.axes.1.to_string(),
            (px_of(x0 + grid / 2.0), height as i32 - 3),
            font(12.0).pos(Pos::new(HPos::Center, VPos::Bottom)),
        ))
        .map_err(err)?;
        // The colour scale: gradient, ticks with values in the unit, the unit's name.
        let bx = x0 + grid + 12.0;
        let bw = 12.0;
        let steps = 64;
        for s in 0..steps {
            let f0 = s as f64 / steps as f64;
            let f1 = (s + 1) as f64 / steps as f64;
            root.draw(&Rectangle::new(
                [
                    (px_of(bx), px_of(y0 + grid * (1.0 - f1))),
                    (px_of(bx + bw), px_of(y0 + grid * (1.0 - f0)) + 1),
                ],
                ViridisRGB::get_color((f0 + f1) / 2.0).filled(),
            ))
            .map_err(err)?;
        }
        root.draw(&Rectangle::new(
            [(px_of(bx), px_of(y0)), (px_of(bx + bw), px_of(y0 + grid))],
            BLACK.stroke_width(1),
        ))
        .map_err(err)?;
        for &v in &ticks {
            let y = y0 + grid * (1.0 - v / scale_max);
            root.draw(&PathElement::new(
                vec![(px_of(bx + bw), px_of(y)), (px_of(bx + bw + 3.0), px_of(y))],
                BLACK.stroke_width(1),
            ))
            .map_err(err)?;
            root.draw(&Text::new(
                h.unit.fmt(v),
                (px_of(bx + bw + 5.0), px_of(y)),
                font(11.0).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(err)?;
        }
        root.draw(&Text::new(
            format!("{} (max {})", h.unit.name(), h.unit.fmt(max)),
            (px_of(bx + bw + 10.0 + widest), px_of(y0 + grid / 2.0)),
            font(12.0)
                .transform(FontTransform::Rotate270)
                .pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(err)?;
        Ok(())
    })
}

/// The colours of PUs on the timeline: Tableau 10, then plotters' 99-colour palette.
pub fn pu_colour(k: usize) -> RGBColor {
    const T10: [(u8, u8, u8); 10] = [
        (0x4e, 0x79, 0xa7),
        (0xf2, 0x8e, 0x2b),
        (0x59, 0xa1, 0x4f),
        (0xb0, 0x7a, 0xa1),
        (0xed, 0xc9, 0x48),
        (0x76, 0xb7, 0xb2),
        (0xff, 0x9d, 0xa7),
        (0x9c, 0x75, 0x5f),
        (0xba, 0xb0, 0xac),
        (0xe1, 0x57, 0x59),
    ];
    match T10.get(k) {
        Some(&(r, g, b)) => RGBColor(r, g, b),
        None => {
            let c = Palette99::pick(k - T10.len()).to_rgba();
            RGBColor(c.0, c.1, c.2)
        }
    }
}

/// `#rrggbb` of a colour, for the HTML legends.
pub fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// Size of row names and which rows get one (every k-th) for `n` rows of `row_h` pixels in
/// a plot at most 1600 pixels high, `chrome` of which is not rows.
fn row_labels(n: usize, row_h: f64, chrome: f64) -> (f64, usize) {
    let height = (chrome + row_h * n as f64).min(1600.0);
    let row_px = (height - chrome - 20.0).max(1.0) / n.max(1) as f64;
    let size = (row_px - 2.0).clamp(8.0, 11.0);
    (size, ((size + 1.0) / row_px).ceil().max(1.0) as usize)
}

/// The y-axis label area for rows named `labels` at 11 px.
fn row_label_area(labels: &[String]) -> f64 {
    let longest = labels
        .iter()
        .map(|l| text_width(l, 11.0))
        .fold(0.0, f64::max);
    (longest + 12.0).clamp(40.0, 170.0)
}

/// Which PU each task ran on over time: one row per task (named, in program order), one
/// colour per PU (the legend is beside the plot in the page), migrations as black lines.
pub fn timeline(
    placements: &[Placement],
    rows: &[(usize, String)],
    duration: f64,
    pus: &[u32],
    migrations: &[f64],
) -> String {
    let n = rows.len().max(1);
    let row_h = if n > 48 { 8.0 } else { 16.0 };
    let (label_size, label_step) = row_labels(n, row_h, 64.0);
    let label_area = row_label_area(&rows.iter().map(|r| r.1.clone()).collect::<Vec<_>>());
    let height = (64.0 + row_h * n as f64).min(1600.0) as u32;
    let end = duration.max(0.001);
    svg((1000, height), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption("Where each task ran", font(15.0))
            .margin(6)
            .margin_right(14)
            .x_label_area_size(42)
            .y_label_area_size(label_area as u32)
            .build_cartesian_2d(0.0..end, 0.0..n as f64)
            .map_err(err)?;
        let mut mesh = chart.configure_mesh();
        style_mesh(&mut mesh);
        mesh.disable_y_mesh()
            .y_labels(0)
            .x_desc("seconds since start")
            .x_label_formatter(&|v| fmt_num(*v))
            .draw()
            .map_err(err)?;
        let colour = |pu: u32| {
            let k = pus.iter().position(|&p| p == pu).unwrap_or(0);
            pu_colour(k).filled()
        };
        // Each sample holds until the task's next sample.
        for (r, (task, label)) in rows.iter().enumerate() {
            let y = n as f64 - 1.0 - r as f64;
            let samples: Vec<&Placement> = placements.iter().filter(|p| p.task == *task).collect();
            let bars = samples.iter().enumerate().map(|(k, p)| {
                let t1 = samples.get(k + 1).map_or(end, |q| q.t);
                Rectangle::new([(p.t, y + 0.15), (t1, y + 0.85)], colour(p.pu))
            });
            chart.draw_series(bars).map_err(err)?;
            if r % label_step == 0 {
                let (x, yy) = chart.backend_coord(&(0.0, y + 0.5));
                root.draw(&Text::new(
                    fit(label, 11.0, label_area - 10.0),
                    (x - 5, yy),
                    font(label_size).pos(Pos::new(HPos::Right, VPos::Center)),
                ))
                .map_err(err)?;
            }
        }
        chart
            .draw_series(
                migrations.iter().map(|&t| {
                    PathElement::new(vec![(t, 0.0), (t, n as f64)], BLACK.stroke_width(2))
                }),
            )
            .map_err(err)?;
        Ok(())
    })
}

type TimeChart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// A chart of a quantity over the run: seconds on x, `lo..hi` on y; labels below 0 are left
/// out (a margin below 0 keeps a line at 0 off the axis).
fn over_time<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    caption: &str,
    duration: f64,
    (lo, hi): (f64, f64),
    y_desc: &str,
) -> Result<TimeChart<'a, 'b>, String> {
    let mut chart = ChartBuilder::on(root)
        .caption(caption, font(15.0))
        .margin(6)
        .margin_right(14)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..duration.max(0.001), lo..hi)
        .map_err(err)?;
    let mut mesh = chart.configure_mesh();
    style_mesh(&mut mesh);
    mesh.x_desc("seconds since start")
        .y_desc(y_desc)
        .x_label_formatter(&|v| fmt_num(*v))
        .y_label_formatter(&|v| if *v < 0.0 { String::new() } else { fmt_num(*v) })
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// The colours of the cost plot's lines, for the page's legend.
pub const LIVE_COLOUR: RGBColor = RGBColor(0x1f, 0x5f, 0xbf);
pub const CANDIDATE_COLOUR: RGBColor = RGBColor(0xe0, 0x7b, 0x00);

/// Predicted cost of the live mapping and of the best candidate at each decision. The y axis
/// starts a little below 0 so that a candidate of cost 0 (a perfect mapping) is a visible
/// line, not hidden on the axis; the candidate is drawn first, thick and dashed, so the live
/// line stays visible on top where the two meet. The legend is in the page, under the plot.
pub fn costs(decisions: &[Decision], duration: f64) -> String {
    let max = decisions
        .iter()
        .map(|d| d.cost_current.max(d.cost_new))
        .fold(0.0f64, f64::max)
        .max(1.0);
    svg((1000, 280), |root| {
        let caption = "Predicted communication cost (shared cost model)";
        let mut chart = over_time(
            root,
            caption,
            duration,
            (-0.06 * max, 1.1 * max),
            "cost (model units)",
        )?;
        let (blue, orange) = (LIVE_COLOUR, CANDIDATE_COLOUR);
        chart
            .draw_series(DashedLineSeries::new(
                decisions.iter().map(|d| (d.t, d.cost_new)),
                7,
                4,
                orange.stroke_width(4),
            ))
            .map_err(err)?;
        chart
            .draw_series(
                decisions
                    .iter()
                    .map(|d| TriangleMarker::new((d.t, d.cost_new), 5, orange.filled())),
            )
            .map_err(err)?;
        chart
            .draw_series(LineSeries::new(
                decisions.iter().map(|d| (d.t, d.cost_current)),
                blue.stroke_width(2),
            ))
            .map_err(err)?;
        chart
            .draw_series(
                decisions
                    .iter()
                    .map(|d| Circle::new((d.t, d.cost_current), 3, blue.filled())),
            )
            .map_err(err)?;
        chart
            .draw_series(
                decisions
                    .iter()
                    .filter(|d| d.action == "migrate")
                    .map(|d| Circle::new((d.t, d.cost_new), 6, RED.filled())),
            )
            .map_err(err)?;
        chart
            .draw_series(
                decisions
                    .iter()
                    .filter(|d| d.action == "migrate")
                    .map(|d| PathElement::new(vec![(d.t, 0.0), (d.t, max * 1.1)], RED.mix(0.4))),
            )
            .map_err(err)?;
        Ok(())
    })
}

/// The top of the detection-rate axis: the steady state, not a start-up spike. With the
/// rates sorted, the 80th percentile (nearest rank) times 1.25; when the highest rate is
/// more than three times that, the axis stops there, else it shows everything.
pub fn rate_ceiling(samples: &[Sample]) -> (f64, bool) {
    let mut r: Vec<f64> = samples
        .iter()
        .map(|s| s.events_per_s)
        .filter(|v| v.is_finite())
        .collect();
    r.sort_by(f64::total_cmp);
    let max = r.last().copied().unwrap_or(0.0).max(1.0);
    if r.len() < 4 {
        return (max, false);
    }
    let rank = ((0.8 * r.len() as f64).ceil() as usize).clamp(1, r.len());
    let cap = (1.25 * r[rank - 1]).max(1.0);
    if max > 3.0 * cap {
        (cap, true)
    } else {
        (max, false)
    }
}

/// Detection events per second over the run, on a scale that shows the steady state:
/// intervals above the ceiling ([`rate_ceiling`]) are drawn at the top, marked with a
/// triangle and their value.
pub fn events(samples: &[Sample], duration: f64) -> String {
    let (ceiling, clipped) = rate_ceiling(samples);
    svg((1000, 240), |root| {
        let mut chart = over_time(
            root,
            "Detection events per second",
            duration,
            (0.0, ceiling * 1.12),
            "events/s",
        )?;
        let blue = LIVE_COLOUR;
        chart
            .draw_series(LineSeries::new(
                samples.iter().map(|s| (s.t, s.events_per_s.min(ceiling))),
                blue.stroke_width(2),
            ))
            .map_err(err)?;
        chart
            .draw_series(
                samples
                    .iter()
                    .map(|s| Circle::new((s.t, s.events_per_s.min(ceiling)), 2, blue.filled())),
            )
            .map_err(err)?;
        if clipped {
            for s in samples.iter().filter(|s| s.events_per_s > ceiling) {
                chart
                    .draw_series(std::iter::once(TriangleMarker::new(
                        (s.t, ceiling),
                        6,
                        RED.filled(),
                    )))
                    .map_err(err)?;
                let (x, y) = chart.backend_coord(&(s.t, ceiling));
                root.draw(&Text::new(
                    format!("{} events/s (off scale)", fmt_int(s.events_per_s)),
                    (x + 8, y - 2),
                    font(11.0)
                        .color(&RED)
                        .pos(Pos::new(HPos::Left, VPos::Bottom)),
                ))
                .map_err(err)?;
            }
        }
        Ok(())
    })
}

/// CPU seconds per task: one bar per task (named, in program order), apart from each other,
/// with its value written beside it.
pub fn cpu(rows: &[(String, f64)]) -> String {
    let n = rows.len().max(1);
    let max = rows.iter().map(|r| r.1).fold(0.0f64, f64::max).max(0.001);
    let row_h = if n > 48 { 8.0 } else { 18.0 };
    let (label_size, label_step) = row_labels(n, row_h, 70.0);
    let label_area = row_label_area(&rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>());
    let height = (70.0 + row_h * n as f64).min(1600.0) as u32;
    svg((1000, height), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption("CPU time per task", font(15.0))
            .margin(6)
            .margin_right(14)
            .x_label_area_size(42)
            .y_label_area_size(label_area as u32)
            .build_cartesian_2d(0.0..max * 1.15, 0.0..n as f64)
            .map_err(err)?;
        let mut mesh = chart.configure_mesh();
        style_mesh(&mut mesh);
        mesh.disable_y_mesh()
            .y_labels(0)
            .x_desc("CPU seconds")
            .x_label_formatter(&|v| fmt_num(*v))
            .draw()
            .map_err(err)?;
        let blue = LIVE_COLOUR;
        for (r, (label, v)) in rows.iter().enumerate() {
            let y = n as f64 - 1.0 - r as f64;
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y + 0.2), (*v, y + 0.8)],
                    blue.mix(0.8).filled(),
                )))
                .map_err(err)?;
            if r % label_step == 0 {
                let (x, yy) = chart.backend_coord(&(0.0, y + 0.5));
                root.draw(&Text::new(
                    fit(label, 11.0, label_area - 10.0),
                    (x - 5, yy),
                    font(label_size).pos(Pos::new(HPos::Right, VPos::Center)),
                ))
                .map_err(err)?;
            }
            if row_h >= 12.0 {
                let (x, yy) = chart.backend_coord(&(*v, y + 0.5));
                root.draw(&Text::new(
                    format!("{v:.2} s"),
                    (x + 4, yy),
                    font(10.0).pos(Pos::new(HPos::Left, VPos::Center)),
                ))
                .map_err(err)?;
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64, rate: f64) -> Sample {
        Sample {
            t,
            events_per_s: rate,
            ..Default::default()
        }
    }

    #[test]
    fn numbers_are_short_and_whole_where_they_can_be() {
        assert_eq!(fmt_num(45000.0), "45k");
        assert_eq!(fmt_num(450.0), "450");
        assert_eq!(fmt_num(2.0), "2");
        assert_eq!(fmt_num(0.25), "0.25");
        assert_eq!(fmt_num(1.5e6), "1.5M");
        assert_eq!(fmt_bytes(177428351.0), "169.2 MiB");
        assert_eq!(fmt_bytes(512.0), "512 B");
        assert_eq!(fmt_int(43960.4), "43,960");
        assert_eq!(nice_step(446.0, 4), 200.0);
        assert_eq!(nice_step(98.0, 5), 20.0);
    }

    #[test]
    fn a_start_up_spike_does_not_set_the_rate_scale() {
        // distant-pairs x8: 44k events/s in the first interval, then ~70-330.
        let rates = [
            43960.0, 307.0, 325.0, 320.0, 273.0, 326.0, 217.0, 67.0, 84.0, 71.0, 80.0, 71.0, 80.0,
            69.0,
        ];
        let s: Vec<_> = rates
            .iter()
            .enumerate()
            .map(|(i, &r)| sample(i as f64, r))
            .collect();
        let (ceiling, clipped) = rate_ceiling(&s);
        assert!(clipped);
        assert!((400.0..420.0).contains(&ceiling), "{ceiling}");
        // A busy program without a spike keeps its whole range.
        let flat: Vec<_> = [0.0, 0.0, 32.0, 2684.0, 12560.0, 46733.0, 61240.0, 0.0]
            .iter()
            .enumerate()
            .map(|(i, &r)| sample(i as f64, r))
            .collect();
        assert_eq!(rate_ceiling(&flat), (61240.0, false));
        let svg = events(&s, 14.0);
        assert!(svg.contains("43,960 events/s (off scale)"), "{svg}");
    }

    #[test]
    fn a_heatmap_names_its_tasks_and_has_a_colour_scale_with_its_unit() {
        let mut m = CommMatrix::zeros(3);
        m.set(0, 2, 10.0);
        m.set(2, 0, 10.0);
        let labels = vec!["wl-task-0".to_string(), "b".into(), "c".into()];
        let svg = heatmap(&Heatmap {
            matrix: &m,
            order: &[2, 0, 1],
            labels: &labels,
            caption: "final",
            unit: Unit::Events,
            px: 300,
            marked: &|_, _| false,
            axes: ("task", "task"),
            breaks: &[2],
        });
        // plotters writes each text on its own line.
        assert!(svg.contains("\nwl-task-0\n</text>"), "{svg}");
        assert!(svg.contains("events (max 10)"), "{svg}");
    }
}

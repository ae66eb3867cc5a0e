//! The report page: one HTML file, plots inlined, no outside resources.
//!
//! Sections, each a `<section id=...>`: `communication` (heatmaps with colour scales),
//! `placement` (timeline with its PU legend, predicted cost), `migrations`, `tasks`,
//! `detection`, and last `measured` ("How this was measured": the run's notes and the raw
//! data files). Tasks appear everywhere in the program's own order ([`TaskOrder`]).

use crate::order::TaskOrder;
use crate::plots::{self, Heatmap, Unit};
use crate::RunData;
use matrix::CommMatrix;
use std::fmt::Write;

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(crate) const STYLE: &str = "\
body{font-family:sans-serif;max-width:1040px;margin:auto;padding:0 12px;color:#222;line-height:1.4}\
h1{font-size:1.5em;margin-bottom:.3em;word-break:break-word}\
h2{border-bottom:1px solid #ddd;padding-bottom:2px;margin-top:1.6em}\
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\
th{background:#f0f0f0}td.l,th.l{text-align:left}\
figure{margin:8px 0}figure.main{display:flex;gap:16px;align-items:flex-start}\
figure.main figcaption{max-width:340px;padding-top:40px}figcaption,.caption{color:#555;font-size:.9em;max-width:1000px}\
.row{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}\
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;font-size:.9em;margin:2px 0 10px 0}\
.key{display:inline-flex;align-items:center;gap:5px}\
.swatch{display:inline-block;width:14px;height:14px;border:1px solid #444}\
.line{display:inline-block;width:22px;height:0;border-top:2px solid #000}\
.dot{display:inline-block;width:11px;height:11px;border-radius:50%;background:#f00}\
.nw{white-space:nowrap}\
.unavailable{color:#666;font-style:italic}\
#measured ul{padding-left:1.2em}#measured li{margin:3px 0}\
code{background:#f4f4f4;padding:0 3px}";

/// The matrix rebuilt in rows, or None when the snapshot is not square.
fn snapshot_matrix(rows: &[Vec<f64>]) -> Option<CommMatrix> {
    if rows.is_empty() || rows.iter().any(|r| r.len() != rows.len()) {
        return None;
    }
    Some(CommMatrix::from_rows(rows.to_vec()))
}

pub fn render_html(d: &RunData) -> String {
    let i = &d.info;
    let order = TaskOrder::new(&d.tasks);
    let mut h = String::new();
    let title = format!("huddle run: {}", esc(&i.command.join(" ")));
    let _ = write!(
        h,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{title}</title>\
         <style>{STYLE}</style></head><body><h1>{title}</h1>"
    );
    let status = match (i.exit_code, i.exit_signal) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "still running when huddle stopped".into(),
    };
    let overhead = if i.target_cpu_s > 0.0 {
        100.0 * (i.huddle_cpu_s + i.agent_cpu_s) / i.target_cpu_s
    } else {
        0.0
    };
    let migrations: Vec<f64> = d
        .decisions
        .iter()
        .filter(|x| x.action == "migrate")
        .map(|x| x.t)
        .collect();
    let _ = write!(
        h,
        "<section id=summary><table>\
         <tr><th>program</th><td class=l>{}</td></tr>\
         <tr><th>outcome</th><td class=l>{status} after {:.2} s</td></tr>\
         <tr><th>machine</th><td class=l>{}</td></tr>\
         <tr><th>policy</th><td class=l>{} (migrate when predicted cost falls by &ge; {:.0}%)</td></tr>\
         <tr><th>tasks seen</th><td class=l>{}</td></tr>\
         <tr><th>detection</th><td class=l>{}: {} events, {} lost; {} pages re-armed for extra faults</td></tr>\
         <tr><th>migrations</th><td class=l>{}{}</td></tr>\
         <tr><th>huddle CPU time</th><td class=l>{:.3} s + agent helpers {:.3} s = {:.2}% of the program's {:.2} s</td></tr>\
         </table></section>",
        esc(&i.command.join(" ")),
        i.duration_s,
        esc(&i.machine),
        esc(&i.policy),
        i.threshold * 100.0,
        d.tasks.len(),
        esc(&i.detection_source),
        i.events,
        i.lost_events,
        i.rearmed_pages,
        migrations.len(),
        if i.pages_moved + i.pages_not_moved > 0 {
            format!(
                "; {} pages moved with their tasks, {} could not be moved",
                i.pages_moved, i.pages_not_moved
            )
        } else {
            String::new()
        },
        i.huddle_cpu_s,
        i.agent_cpu_s,
        overhead,
        i.target_cpu_s,
    );

    communication(&mut h, d, &order);
    placement(&mut h, d, &order, &migrations);
    migration_table(&mut h, d, &order, &migrations);
    tasks(&mut h, d, &order);
    detection(&mut h, d);
    measured(&mut h, d);
    h.push_str("</body></html>");
    h
}

/// Task order: "in the program's own order", said once per section that shows tasks.
const ORDER_NOTE: &str = "Tasks are in the program's own order: huddle workload threads by \
    index (wl-task-N), then MPI ranks by rank (each rank's MPI thread, then the other threads \
    of its process), then other threads by name.";

fn communication(h: &mut String, d: &RunData, order: &TaskOrder) {
    h.push_str("<section id=communication><h2>Communication</h2>");
    let mpi_cell = |i: usize, j: usize| {
        d.matrix_sources
            .as_ref()
            .and_then(|s| s.get(i))
            .and_then(|r| r.get(j))
            .is_some_and(|c| c == "mpi")
    };
    if let Some(src) = &d.matrix_sources {
        let count = |name: &str| {
            src.iter()
                .enumerate()
                .flat_map(|(i, r)| r.iter().skip(i + 1))
                .filter(|c| c.as_str() == name)
                .count()
        };
        let _ = write!(
            h,
            "<p>Pairs of tasks by source: {} from the PMPI agent (exact MPI bytes between \
             ranks, matrix-sources.csv says which), {} from page faults.</p>",
            count("mpi"),
            count("faults")
        );
    }
    let unit_text = "One event is a memory block touched by a second task (CDSM's page-fault \
                     detection); brighter cells are pairs that shared more.";
    if let Some(m) = &d.matrix {
        let rows = order.for_matrix(m.n());
        let labels: Vec<String> = rows.iter().map(|&t| order.label(t)).collect();
        let svg = plots::heatmap(&Heatmap {
            matrix: m,
            order: &rows,
            labels: &labels,
            caption: "Final communication matrix",
            unit: Unit::Events,
            px: 540,
            marked: &mpi_cell,
            axes: ("task", "task"),
            breaks: &order.breaks(&rows),
        });
        let _ = write!(
            h,
            "<figure class=\"heatmap main\" data-unit=events>{svg}<figcaption>Communication between \
             each pair of tasks in the final matrix (matrix.csv), in events. {unit_text}{} \
             {ORDER_NOTE}</figcaption></figure>",
            if d.matrix_sources.is_some() {
                " Dots mark the cells the PMPI agent measured: MPI bytes between the two \
                 ranks divided by the block size, so in the same unit as a fault event."
            } else {
                ""
            }
        );
    } else {
        h.push_str("<p>No communication matrix was recorded.</p>");
    }
    if let Some(r) = &d.rank_matrix {
        let rows: Vec<usize> = (0..r.n()).collect();
        let labels: Vec<String> = rows.iter().map(|k| format!("rank {k}")).collect();
        let svg = plots::heatmap(&Heatmap {
            matrix: r,
            order: &rows,
            labels: &labels,
            caption: "MPI bytes sent, rank to rank",
            unit: Unit::Bytes,
            px: 360,
            marked: &|_, _| false,
            axes: ("sender", "receiver"),
            breaks: &[],
        });
        let _ = write!(
            h,
            "<figure class=\"heatmap main\" data-unit=bytes>{svg}<figcaption>Bytes each rank (row) \
             sent to each other rank (column), counted exactly by the PMPI agent \
             (rank-matrix.csv).</figcaption></figure>"
        );
    }
    // Evolution: up to three earlier snapshots, each with its own scale.
    let k = d.snapshots.len();
    let mut shown = Vec::new();
    for j in [k / 4, k / 2, 3 * k / 4] {
        if shown.contains(&j) {
            continue;
        }
        shown.push(j);
    }
    let biggest = shown
        .iter()
        .filter_map(|&j| d.snapshots.get(j))
        .map(|s| s.matrix.len())
        .max()
        .unwrap_or(0);
    // Three in a row while their names fit; two, larger, for many tasks.
    let px = if biggest > 12 { 330 } else { 230 };
    let snaps: Vec<String> = shown
        .iter()
        .filter_map(|&j| d.snapshots.get(j))
        .filter_map(|s| {
            let m = snapshot_matrix(&s.matrix)?;
            let rows = order.for_matrix(m.n());
            let labels: Vec<String> = rows.iter().map(|&t| order.label(t)).collect();
            let caption = format!("at {:.1} s", s.t);
            Some(plots::heatmap(&Heatmap {
                matrix: &m,
                order: &rows,
                labels: &labels,
                caption: &caption,
                unit: Unit::Events,
                px,
                marked: &|_, _| false,
                axes: ("", ""),
                breaks: &order.breaks(&rows),
            }))
        })
        .collect();
    if !snaps.is_empty() {
        h.push_str("<h3>How the matrix evolved</h3><div class=row>");
        for s in snaps {
            let _ = write!(h, "<figure class=heatmap data-unit=events>{s}</figure>");
        }
        h.push_str(
            "</div><p class=caption>Earlier snapshots (snapshots.json), each on its own \
             colour scale (events); tasks that had not started yet are absent.</p>",
        );
    }
    h.push_str("</section>");
}

fn placement(h: &mut String, d: &RunData, order: &TaskOrder, migrations: &[f64]) {
    h.push_str("<section id=placement><h2>Placement</h2>");
    let mut pus: Vec<u32> = d.placements.iter().map(|p| p.pu).collect();
    pus.sort_unstable();
    pus.dedup();
    let n = d
        .placements
        .iter()
        .map(|p| p.task + 1)
        .chain(d.tasks.iter().map(|t| t.index + 1))
        .max()
        .unwrap_or(0);
    let rows: Vec<(usize, String)> = order
        .for_matrix(n)
        .into_iter()
        .map(|t| (t, order.label(t)))
        .collect();
    h.push_str(&plots::timeline(
        &d.placements,
        &rows,
        d.info.duration_s,
        &pus,
        migrations,
    ));
    h.push_str("<div class=legend id=pu-legend><span>colour = PU (OS index):</span>");
    for (k, pu) in pus.iter().enumerate() {
        let _ = write!(
            h,
            "<span class=key><span class=swatch style=\"background:{}\"></span>PU {pu}</span>",
            plots::hex(plots::pu_colour(k))
        );
    }
    h.push_str("<span class=key><span class=line></span>migration</span></div>");
    let _ = write!(
        h,
        "<p class=caption>The PU each task last ran on at every sample (placements.csv). \
         {ORDER_NOTE}</p>"
    );
    h.push_str(&plots::costs(&d.decisions, d.info.duration_s));
    let _ = write!(
        h,
        "<div class=legend id=cost-legend>\
         <span class=key><span class=line style=\"border-color:{}\"></span>live mapping</span>\
         <span class=key><span class=line style=\"border-top:4px dashed {}\"></span>best candidate</span>\
         <span class=key><span class=dot></span>migration (to the candidate)</span></div>",
        plots::hex(plots::LIVE_COLOUR),
        plots::hex(plots::CANDIDATE_COLOUR)
    );
    h.push_str(
        "<p class=caption>At each decision: the predicted cost of the live mapping and of the \
         best candidate mapping (lower is better; 0 means every communicating pair shares \
         the closest level). A migration moves the program to the candidate.</p></section>",
    );
}

fn migration_table(h: &mut String, d: &RunData, order: &TaskOrder, migrations: &[f64]) {
    h.push_str("<section id=migrations><h2>Migrations</h2>");
    if migrations.is_empty() {
        h.push_str("<p>No migration: no candidate mapping beat the live one by the threshold.</p>");
    } else {
        h.push_str(
            "<table><tr><th>t (s)</th><th>cost before</th><th>cost after</th>\
             <th>predicted gain</th><th class=l>new PU per task</th><th class=l>why</th></tr>",
        );
        for x in d.decisions.iter().filter(|x| x.action == "migrate") {
            let mut pairs: Vec<(usize, u32)> = x
                .mapping
                .iter()
                .enumerate()
                .map(|(k, &pu)| (x.tasks.get(k).copied().unwrap_or(k), pu))
                .collect();
            pairs.sort_by_key(|&(t, _)| order.position(t));
            let map: Vec<String> = pairs
                .iter()
                .map(|&(t, pu)| {
                    format!(
                        "<span class=nw>{}&nbsp;&rarr;&nbsp;PU&nbsp;{pu}</span>",
                        esc(&order.label(t))
                    )
                })
                .collect();
            let _ = write!(
                h,
                "<tr><td>{:.2}</td><td>{}</td><td>{}</td><td>{:.1}%</td><td class=l>{}</td><td class=l>{}</td></tr>",
                x.t,
                plots::fmt_int(x.cost_current),
                plots::fmt_int(x.cost_new),
                x.predicted_gain * 100.0,
                map.join(", "),
                esc(&x.reason)
            );
        }
        h.push_str("</table>");
    }
    h.push_str("</section>");
}

fn tasks(h: &mut String, d: &RunData, order: &TaskOrder) {
    h.push_str("<section id=tasks><h2>Tasks</h2>");
    let mut sorted: Vec<&crate::TaskRecord> = d.tasks.iter().collect();
    sorted.sort_by_key(|t| order.position(t.index));
    let bars: Vec<(String, f64)> = sorted
        .iter()
        .map(|t| (order.label(t.index), t.cpu_s))
        .collect();
    h.push_str(&plots::cpu(&bars));
    h.push_str(
        "<table id=task-table><tr><th class=l>task</th><th>MPI rank</th><th>tid</th><th>pid</th>\
         <th class=l>thread name</th><th>first seen (s)</th><th>CPU (s)</th>\
         <th>row in matrix.csv</th></tr>",
    );
    for t in sorted {
        let _ = write!(
            h,
            "<tr><td class=l>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=l>{}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td></tr>",
            esc(&order.label(t.index)),
            order.rank(t.index).map_or(String::new(), |r| r.to_string()),
            t.tid,
            t.pid,
            esc(&t.comm),
            t.first_seen_s,
            t.cpu_s,
            t.index
        );
    }
    let _ = write!(
        h,
        "</table><p class=caption>{ORDER_NOTE} \"row in matrix.csv\" is the task's index in \
         the raw data (tasks.json, matrix.csv), the order huddle first saw the tasks.</p></section>"
    );
}

fn detection(h: &mut String, d: &RunData) {
    h.push_str("<section id=detection><h2>Detection</h2>");
    h.push_str(&plots::events(&d.samples, d.info.duration_s));
    let (ceiling, clipped) = plots::rate_ceiling(&d.samples);
    if clipped {
        let above: Vec<&crate::Sample> = d
            .samples
            .iter()
            .filter(|s| s.events_per_s > ceiling)
            .collect();
        let top = above
            .iter()
            .max_by(|a, b| a.events_per_s.total_cmp(&b.events_per_s));
        let _ = write!(
            h,
            "<p class=caption id=rate-scale>Linear axis cut at {} events/s (1.25 &times; the \
             80th percentile of the intervals' rates) so that the steady state shows; {} \
             interval{} above it (highest: {} events/s at {:.2} s, typically the start-up \
             burst while the program first touches its memory) {} drawn at the top edge, \
             marked &#9650; with {} value.</p>",
            plots::fmt_int(ceiling),
            above.len(),
            if above.len() == 1 { "" } else { "s" },
            top.map_or(String::new(), |s| plots::fmt_int(s.events_per_s)),
            top.map_or(0.0, |s| s.t),
            if above.len() == 1 { "is" } else { "are" },
            if above.len() == 1 { "its" } else { "their" },
        );
    } else {
        h.push_str(
            "<p class=caption id=rate-scale>Linear axis from 0 to the highest rate: no \
             interval stands out from the rest.</p>",
        );
    }
    h.push_str("</section>");
}

fn measured(h: &mut String, d: &RunData) {
    h.push_str("<section id=measured><h2>How this was measured</h2><ul class=notes>");
    let _ = write!(
        h,
        "<li>Detection source: {}.</li>",
        esc(&d.info.detection_source)
    );
    for n in &d.info.notes {
        let _ = write!(h, "<li>{}</li>", esc(n));
    }
    let mut files = vec![
        "run.json",
        "tasks.json",
        "matrix.csv",
        "snapshots.json",
        "placements.csv",
        "decisions.json",
        "samples.json",
    ];
    for (present, name) in [
        (d.matrix_sources.is_some(), "matrix-sources.csv"),
        (d.matrix_faults.is_some(), "matrix-faults.csv"),
        (d.rank_matrix.is_some(), "rank-matrix.csv"),
    ] {
        if present {
            files.push(name);
        }
    }
    let _ = write!(
        h,
        "</ul><p>Raw data beside this page: {} (schema huddle.run/1, docs/report.md). \
         <code>huddle report DIR</code> renders this page again from them.</p></section>",
        files.join(", ")
    );
}

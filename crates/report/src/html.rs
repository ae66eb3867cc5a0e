//! The report page: one HTML file, plots inlined, no outside resources.

use crate::{plots, RunData};
use matrix::CommMatrix;
use std::fmt::Write;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub fn render_html(d: &RunData) -> String {
    let i = &d.info;
    let mut h = String::new();
    let title = format!("huddle run: {}", esc(&i.command.join(" ")));
    let _ = write!(
        h,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{title}</title><style>\
         body{{font-family:sans-serif;max-width:900px;margin:auto;color:#222}}\
         table{{border-collapse:collapse;margin:8px 0}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}\
         th{{background:#eee}}td.l{{text-align:left}}.note{{color:#a60}}.row{{display:flex;flex-wrap:wrap;gap:8px}}\
         </style></head><body><h1>{title}</h1>"
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
        "<table>\
         <tr><th>program</th><td class=l>{}</td></tr>\
         <tr><th>outcome</th><td class=l>{status} after {:.2} s</td></tr>\
         <tr><th>machine</th><td class=l>{}</td></tr>\
         <tr><th>policy</th><td class=l>{} (migrate when predicted cost falls by &ge; {:.0}%)</td></tr>\
         <tr><th>tasks seen</th><td class=l>{}</td></tr>\
         <tr><th>detection</th><td class=l>{}: {} events, {} lost; {} pages re-armed for extra faults</td></tr>\
         <tr><th>migrations</th><td class=l>{}{}</td></tr>\
         <tr><th>huddle CPU time</th><td class=l>{:.3} s + agent helpers {:.3} s = {:.2}% of the program's {:.2} s</td></tr>\
         </table>",
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
    for n in &i.notes {
        let _ = write!(h, "<p class=note>{}</p>", esc(n));
    }

    h.push_str("<h2>Communication</h2>");
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
    h.push_str("<div class=row>");
    if let Some(m) = &d.matrix {
        h.push_str(&plots::heatmap(m, "final matrix", 420));
    }
    // Evolution: up to three earlier snapshots beside the final one.
    let k = d.snapshots.len();
    for s in [k / 4, k / 2, 3 * k / 4]
        .iter()
        .filter_map(|&j| d.snapshots.get(j))
    {
        if s.matrix.is_empty() || s.matrix.iter().any(|r| r.len() != s.matrix.len()) {
            continue;
        }
        let m = CommMatrix::from_rows(s.matrix.clone());
        h.push_str(&plots::heatmap(&m, &format!("at {:.1} s", s.t), 280));
    }
    h.push_str("</div>");

    h.push_str("<h2>Placement</h2>");
    let mut pus: Vec<u32> = d.placements.iter().map(|p| p.pu).collect();
    pus.sort_unstable();
    pus.dedup();
    h.push_str(&plots::timeline(
        &d.placements,
        d.tasks.len(),
        i.duration_s,
        &pus,
        &migrations,
    ));
    h.push_str(&plots::costs(&d.decisions, i.duration_s));

    h.push_str("<h2>Migrations</h2>");
    if migrations.is_empty() {
        h.push_str("<p>No migration: no candidate mapping beat the live one by the threshold.</p>");
    } else {
        h.push_str("<table><tr><th>t (s)</th><th>cost before</th><th>cost after</th><th>predicted gain</th><th>new PU per task</th><th>why</th></tr>");
        for x in d.decisions.iter().filter(|x| x.action == "migrate") {
            let map: Vec<String> = x.mapping.iter().map(u32::to_string).collect();
            let _ = write!(
                h,
                "<tr><td>{:.2}</td><td>{:.0}</td><td>{:.0}</td><td>{:.1}%</td><td class=l>{}</td><td class=l>{}</td></tr>",
                x.t,
                x.cost_current,
                x.cost_new,
                x.predicted_gain * 100.0,
                map.join(","),
                esc(&x.reason)
            );
        }
        h.push_str("</table>");
    }

    h.push_str("<h2>Tasks</h2>");
    h.push_str(&plots::cpu(&d.tasks));
    h.push_str("<table><tr><th>task</th><th>tid</th><th>pid</th><th>command</th><th>first seen (s)</th><th>CPU (s)</th></tr>");
    for t in &d.tasks {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=l>{}</td><td>{:.2}</td><td>{:.2}</td></tr>",
            t.index,
            t.tid,
            t.pid,
            esc(&t.comm),
            t.first_seen_s,
            t.cpu_s
        );
    }
    h.push_str("</table>");

    h.push_str("<h2>Detection</h2>");
    h.push_str(&plots::events(&d.samples, i.duration_s));
    h.push_str(
        "<p>Raw data beside this page: run.json, tasks.json, matrix.csv, snapshots.json, \
         placements.csv, decisions.json, samples.json (schema huddle.run/1, docs/report.md). \
         <code>huddle report DIR</code> renders this page again from them.</p></body></html>",
    );
    h
}

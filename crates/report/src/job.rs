//! The page of a job over several nodes (`huddle run --node-managers --report DIR`): a
//! section per node from `DIR/node-HOST/node.json` (written by each `huddle node`), the job's
//! rank matrix (`DIR/rank-matrix.csv`, written by rank 0 at MPI_Finalize), and the placement
//! advised for the next run. The advice itself is computed by the caller (crates/mapping) and
//! handed in as plain rows, so that this crate stays a renderer.

use crate::html::{esc, STYLE};
use crate::plots::{self, Heatmap, Unit};
use crate::{write_text, ReportError};
use matrix::CommMatrix;
use serde_json::Value;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// What one node manager's node.json says (`huddle.node/1`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeSummary {
    /// The directory's name, `node-HOST`.
    pub dir_name: String,
    pub host: String,
    /// `running` (never finished: killed), `done` or `failed`.
    pub state: String,
    pub error: Option<String>,
    /// The ranks the node manager found on this host, by MPI rank.
    pub ranks: Vec<usize>,
    pub start_delay_s: Option<f64>,
    pub first_remap_s: Option<f64>,
    pub migrations: Option<u64>,
    pub duration_s: Option<f64>,
    pub huddle_cpu_s: Option<f64>,
    /// The node's own page exists (`node-HOST/index.html`).
    pub has_page: bool,
    /// How the report came: "shared file system", or through the launcher's stderr
    /// (`node-HOST/delivery.json`, written by `huddle run`, crates/relay), with what was lost.
    pub via: String,
}

/// One row of the next-run advice: a placement of the ranks over the nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacementRow {
    /// "blocked", "cyclic", "mapped" or "what ran".
    pub name: String,
    /// Bytes that cross the network.
    pub network: f64,
    /// The busiest node link's time at the advisor's link bandwidth.
    pub link_seconds: f64,
    /// The node (index into the page's nodes) of each rank.
    pub node_of: Vec<usize>,
}

/// The advisor's view of the next run, computed by the caller.
#[derive(Clone, Debug, PartialEq)]
pub struct NextRun {
    /// What ran, when every rank's node is known.
    pub ran: Option<PlacementRow>,
    /// Blocked, cyclic, mapped, in that order.
    pub options: Vec<PlacementRow>,
    /// Name of the recommended placement.
    pub best: String,
    /// An Open MPI rankfile for it.
    pub rankfile: String,
    pub link_bandwidth: f64,
    /// How the nodes were modelled (one line).
    pub model: String,
}

/// Whether `dir` is a job report: node directories and no run of its own.
pub fn is_job_dir(dir: &Path) -> bool {
    !dir.join("run.json").exists() && !node_dirs(dir).is_empty()
}

/// `DIR/node-*` directories that hold a node.json or a delivery.json (a report announced
/// through the launcher's stderr, arrived or not), sorted by name.
fn node_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("node-"))
                        && (p.join("node.json").is_file() || p.join("delivery.json").is_file())
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Every node's summary, in the order of their directory names.
pub fn load_nodes(dir: &Path) -> Result<Vec<NodeSummary>, ReportError> {
    node_dirs(dir)
        .iter()
        .map(|d| {
            let delivery = read_json(&d.join("delivery.json"))?;
            let path = d.join("node.json");
            // No node.json: announced through the launcher's stderr, never handed over.
            let v = read_json(&path)?
                .unwrap_or_else(|| serde_json::json!({ "state": "report did not arrive" }));
            let mut s = summary(&v, d);
            s.via = delivery.as_ref().map_or("shared file system".into(), via);
            Ok(s)
        })
        .collect()
}

/// A JSON file, or None where it is missing.
fn read_json(path: &Path) -> Result<Option<Value>, ReportError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ReportError::Io {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| ReportError::Format {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
}

/// What delivery.json says of the way a node's report came.
fn via(d: &Value) -> String {
    let lost: Vec<&str> = d["lost"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if d["handed_over"] != Value::Bool(true) {
        "launcher's stderr: never handed over (its ranks ended first)".into()
    } else if !lost.is_empty() {
        format!("launcher's stderr, incomplete: {} lost", lost.join(", "))
    } else if d["complete"] != Value::Bool(true) {
        "launcher's stderr, incomplete".into()
    } else {
        "launcher's stderr".into()
    }
}

fn summary(v: &Value, dir: &Path) -> NodeSummary {
    let dir_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut ranks: Vec<usize> = v["ranks"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r["rank"].as_u64())
                .map(|r| r as usize)
                .collect()
        })
        .unwrap_or_default();
    ranks.sort_unstable();
    NodeSummary {
        host: v["host"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| dir_name.trim_start_matches("node-").to_string()),
        dir_name,
        state: v["state"].as_str().unwrap_or("unknown").to_string(),
        error: v["error"].as_str().map(str::to_string),
        ranks,
        start_delay_s: v["start_delay_s"].as_f64(),
        first_remap_s: v["first_remap_s"].as_f64(),
        migrations: v["migrations"].as_u64(),
        duration_s: v["duration_s"].as_f64(),
        huddle_cpu_s: v["huddle_cpu_s"].as_f64(),
        has_page: dir.join("index.html").is_file(),
        via: String::new(),
    }
}

/// The node (index into `nodes`) of each of `n` ranks; None when some rank is on no node.
pub fn ranks_to_nodes(nodes: &[NodeSummary], n: usize) -> Option<Vec<usize>> {
    let mut node_of = vec![None; n];
    for (k, node) in nodes.iter().enumerate() {
        for &r in &node.ranks {
            if r < n {
                node_of[r] = Some(k);
            }
        }
    }
    node_of.into_iter().collect()
}

/// Writes `dir/index.html` for the job; returns the page's path.
pub fn render_job(
    dir: &Path,
    nodes: &[NodeSummary],
    ranks: Option<&CommMatrix>,
    next: Option<&NextRun>,
) -> Result<PathBuf, ReportError> {
    let path = dir.join("index.html");
    write_text(&path, &job_html(nodes, ranks, next))?;
    Ok(path)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("&ndash;".into(), |x| format!("{x:.digits$}"))
}

pub fn job_html(
    nodes: &[NodeSummary],
    ranks: Option<&CommMatrix>,
    next: Option<&NextRun>,
) -> String {
    let mut h = String::new();
    let nranks: usize = nodes.iter().map(|n| n.ranks.len()).sum();
    let title = format!(
        "huddle job: {} node{}, {nranks} rank{} seen",
        nodes.len(),
        if nodes.len() == 1 { "" } else { "s" },
        if nranks == 1 { "" } else { "s" }
    );
    let _ = write!(
        h,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{title}</title>\
         <style>{STYLE}</style></head><body><h1>{title}</h1>\
         <p>One <code>huddle node</code> managed the ranks of each node with that node's own \
         topology (docs/cluster.md). Each node's own page has its matrix, placements and \
         decisions.</p>"
    );
    // Nodes.
    h.push_str(
        "<section id=nodes><h2>Nodes</h2><table><tr><th class=l>node</th><th class=l>state</th>\
         <th class=l>ranks</th><th>manager start after board (s)</th><th>first remap (s)</th>\
         <th>migrations</th><th>managed (s)</th><th>huddle CPU (s)</th>\
         <th class=l>report came through</th></tr>",
    );
    for n in nodes {
        let name = if n.has_page {
            format!(
                "<a href=\"{}/index.html\">{}</a>",
                esc(&n.dir_name),
                esc(&n.host)
            )
        } else {
            esc(&n.host)
        };
        let state = match (n.state.as_str(), &n.error) {
            ("done", _) => "done".to_string(),
            ("failed", Some(e)) => format!("failed: {}", esc(e)),
            ("running", _) => "did not finish (killed?)".to_string(),
            (s, _) => esc(s),
        };
        let ranks = n
            .ranks
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let _ = write!(
            h,
            "<tr><td class=l>{name}</td><td class=l>{state}</td><td class=l>{ranks}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=l>{}</td></tr>",
            opt(n.start_delay_s, 2),
            opt(n.first_remap_s, 2),
            n.migrations.map_or("&ndash;".into(), |m| m.to_string()),
            opt(n.duration_s, 2),
            opt(n.huddle_cpu_s, 3),
            esc(&n.via),
        );
    }
    h.push_str("</table></section>");
    // The job's rank matrix, ranks grouped by node.
    h.push_str("<section id=ranks><h2>The job's rank matrix</h2>");
    match ranks {
        Some(m) => {
            let node_of = ranks_to_nodes(nodes, m.n());
            let mut order: Vec<usize> = (0..m.n()).collect();
            if let Some(k) = &node_of {
                order.sort_by_key(|&r| (k[r], r));
            }
            let label = |r: usize| match &node_of {
                Some(k) => format!("{r} ({})", nodes[k[r]].host),
                None => r.to_string(),
            };
            let labels: Vec<String> = order.iter().map(|&r| label(r)).collect();
            let breaks: Vec<usize> = match &node_of {
                Some(k) => (1..order.len())
                    .filter(|&p| k[order[p]] != k[order[p - 1]])
                    .collect(),
                None => vec![],
            };
            let svg = plots::heatmap(&Heatmap {
                matrix: m,
                order: &order,
                labels: &labels,
                caption: "MPI bytes sent, rank to rank",
                unit: Unit::Bytes,
                px: 420,
                marked: &|_, _| false,
                axes: ("sender", "receiver"),
                breaks: &breaks,
            });
            let _ = write!(
                h,
                "<figure class=\"heatmap main\" data-unit=bytes>{svg}<figcaption>Bytes each rank \
                 (row) sent to each other rank (column) over the whole job, counted by the PMPI \
                 agent (rank-matrix.csv).{}</figcaption></figure>",
                if node_of.is_some() {
                    " Ranks are grouped by the node they ran on; thin lines separate the nodes."
                } else {
                    " Not every rank's node is known (a node manager did not finish), so ranks \
                     are in rank order."
                }
            );
        }
        None => h.push_str(
            "<p class=unavailable>No rank-matrix.csv: rank 0 writes it at MPI_Finalize, so \
             the job did not finalize, or ran without a report directory.</p>",
        ),
    }
    h.push_str("</section>");
    // The next run.
    h.push_str("<section id=next><h2>Placement for the next run</h2>");
    match next {
        Some(nr) => next_run(&mut h, nodes, nr),
        None => h.push_str(
            "<p class=unavailable>No advice: it needs the job's rank matrix and at least two \
             nodes.</p>",
        ),
    }
    h.push_str("</section></body></html>");
    h
}

fn next_run(h: &mut String, nodes: &[NodeSummary], nr: &NextRun) {
    let _ = write!(
        h,
        "<p>Which ranks share a node, compared on the job's rank matrix as <code>huddle map \
         --advise</code> compares them: by the time the busiest node link needs for its traffic \
         (max of bytes out and in, at {} per second), then by the bytes that cross the network. \
         {}</p><table><tr><th class=l>placement</th><th>busiest link (s)</th>\
         <th>network bytes</th><th class=l>nodes of ranks 0, 1, 2, ...</th></tr>",
        plots::fmt_bytes(nr.link_bandwidth),
        esc(&nr.model)
    );
    let host = |k: usize| nodes.get(k).map_or(format!("node{k}"), |n| n.host.clone());
    for row in nr.ran.iter().chain(&nr.options) {
        let mark = if row.name == nr.best {
            " (advised)"
        } else {
            ""
        };
        let hosts = row
            .node_of
            .iter()
            .map(|&k| esc(&host(k)))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = write!(
            h,
            "<tr><td class=l>{}{mark}</td><td>{:.4}</td><td>{}</td><td class=l>{hosts}</td></tr>",
            esc(&row.name),
            row.link_seconds,
            plots::fmt_bytes(row.network),
        );
    }
    h.push_str("</table>");
    if let (Some(ran), Some(best)) = (&nr.ran, nr.options.iter().find(|o| o.name == nr.best)) {
        let text = if ran.node_of == best.node_of {
            "What ran already is the advised placement.".to_string()
        } else if ran.link_seconds > 0.0 {
            format!(
                "Predicted: the busiest link's time falls from {:.4} s to {:.4} s ({:.1}% less), \
                 network bytes from {} to {}. A prediction of the model, not a measurement.",
                ran.link_seconds,
                best.link_seconds,
                100.0 * (1.0 - best.link_seconds / ran.link_seconds),
                plots::fmt_bytes(ran.network),
                plots::fmt_bytes(best.network)
            )
        } else {
            "What ran sent nothing across the network.".to_string()
        };
        let _ = write!(h, "<p>{text}</p>");
    }
    let _ = write!(
        h,
        "<p>An Open MPI rankfile for the advised placement (<code>mpirun --rankfile FILE</code>):</p>\
         <pre>{}</pre>",
        esc(&nr.rankfile)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, ranks: &[usize]) -> NodeSummary {
        NodeSummary {
            dir_name: format!("node-{host}"),
            host: host.into(),
            state: "done".into(),
            ranks: ranks.to_vec(),
            migrations: Some(1),
            first_remap_s: Some(0.4),
            ..Default::default()
        }
    }

    #[test]
    fn nodes_say_which_way_their_report_came() {
        let dir = std::env::temp_dir().join(format!("job-via-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let node_json = r#"{"state": "done", "host": "h", "ranks": [{"rank": 0}]}"#;
        for (host, node, delivery) in [
            ("hA", Some(node_json), None),
            (
                "hB",
                Some(node_json),
                Some(r#"{"handed_over": true, "complete": true, "lost": []}"#),
            ),
            (
                "hC",
                None,
                Some(r#"{"handed_over": false, "complete": false, "lost": []}"#),
            ),
            (
                "hD",
                Some(node_json),
                Some(r#"{"handed_over": true, "complete": false, "lost": ["tasks.json"]}"#),
            ),
        ] {
            let d = dir.join(format!("node-{host}"));
            std::fs::create_dir_all(&d).unwrap();
            if let Some(t) = node {
                std::fs::write(d.join("node.json"), t).unwrap();
            }
            if let Some(t) = delivery {
                std::fs::write(d.join("delivery.json"), t).unwrap();
            }
        }
        let nodes = load_nodes(&dir).unwrap();
        let via: Vec<(&str, &str)> = nodes
            .iter()
            .map(|n| (n.state.as_str(), n.via.as_str()))
            .collect();
        assert_eq!(
            via,
            [
                ("done", "shared file system"),
                ("done", "launcher's stderr"),
                (
                    "report did not arrive",
                    "launcher's stderr: never handed over (its ranks ended first)"
                ),
                ("done", "launcher's stderr, incomplete: tasks.json lost"),
            ]
        );
        assert!(job_html(&nodes, None, None).contains("report did not arrive"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ranks_are_found_on_their_nodes() {
        let nodes = [node("hA", &[0, 3]), node("hB", &[1, 2])];
        assert_eq!(ranks_to_nodes(&nodes, 4), Some(vec![0, 1, 1, 0]));
        assert_eq!(ranks_to_nodes(&nodes, 5), None, "rank 4 ran nowhere known");
    }

    #[test]
    fn the_page_has_a_section_per_part_and_names_every_node() {
        let nodes = [node("hA", &[0, 1]), node("hB", &[2, 3])];
        let mut m = CommMatrix::zeros(4);
        m.set(0, 2, 100.0);
        m.set(2, 0, 100.0);
        let row = |name: &str, node_of: Vec<usize>, s: f64| PlacementRow {
            name: name.into(),
            network: s * 1e9,
            link_seconds: s,
            node_of,
        };
        let next = NextRun {
            ran: Some(row("what ran", vec![0, 0, 1, 1], 2.0)),
            options: vec![
                row("blocked", vec![0, 0, 1, 1], 2.0),
                row("cyclic", vec![0, 1, 0, 1], 1.0),
                row("mapped", vec![0, 1, 0, 1], 1.0),
            ],
            best: "cyclic".into(),
            rankfile: "rank 0=hA slot=0:0\n".into(),
            link_bandwidth: 1.25e9,
            model: "each node modelled as 2 cores".into(),
        };
        let page = job_html(&nodes, Some(&m), Some(&next));
        for id in [
            "<section id=nodes>",
            "<section id=ranks>",
            "<section id=next>",
        ] {
            assert!(page.contains(id), "{id}");
        }
        assert!(page.contains("hA") && page.contains("hB"));
        assert!(page.contains("cyclic (advised)"));
        assert!(page.contains("50.0% less"), "2 s -> 1 s");
        assert!(page.contains("rank 0=hA slot=0:0"));
        assert_eq!(
            page.matches("<svg").count(),
            1,
            "one heatmap (its colour scale inside)"
        );
        // Without a matrix the page says why, and offers no advice.
        let bare = job_html(&nodes, None, None);
        assert!(bare.contains("No rank-matrix.csv") && bare.contains("No advice"));
        assert!(!bare.contains("<svg"));
    }
}

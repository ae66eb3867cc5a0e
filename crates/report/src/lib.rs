//! What `huddle run --report DIR` leaves behind, and the page a person reads afterwards.
//!
//! The run directory holds the raw data (schema `huddle.run/1`, see docs/report.md), whose
//! types and files are the `rundata` crate's (re-exported here). [`render`] turns it into
//! `index.html`, one file that opens offline: every plot is an SVG drawn by the plotters
//! library and inlined.

mod html;
pub mod job;
pub mod order;
mod plots;

pub use html::render_html;
pub use rundata::*;

use std::path::{Path, PathBuf};

/// Reads `dir` and writes `dir/index.html`; returns the page's path.
pub fn render(dir: &Path) -> Result<PathBuf, ReportError> {
    let data = RunData::load(dir)?;
    let path = dir.join("index.html");
    write_text(&path, &render_html(&data))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use matrix::CommMatrix;

    fn sample_run() -> RunData {
        let mut m = CommMatrix::zeros(4);
        m.set(0, 2, 10.0);
        m.set(2, 0, 10.0);
        m.set(1, 3, 7.0);
        m.set(3, 1, 7.0);
        RunData {
            info: RunInfo {
                schema: SCHEMA.into(),
                command: vec!["prog".into(), "<arg>".into()],
                duration_s: 2.0,
                exit_code: Some(0),
                policy: "comm".into(),
                threshold: 0.05,
                ..Default::default()
            },
            tasks: (0..4)
                .map(|i| TaskRecord {
                    index: i,
                    tid: 100 + i as u32,
                    cpu_s: 0.5,
                    ..Default::default()
                })
                .collect(),
            matrix: Some(m.clone()),
            matrix_sources: Some(
                (0..4)
                    .map(|i| {
                        (0..4)
                            .map(|j| match (i + j) % 3 {
                                0 => "",
                                1 => "mpi",
                                _ => "faults",
                            })
                            .map(String::from)
                            .collect()
                    })
                    .collect(),
            ),
            matrix_faults: Some(m.clone()),
            rank_matrix: None,
            snapshots: vec![Snapshot {
                t: 1.0,
                matrix: m.to_rows(),
            }],
            placements: (0..4)
                .map(|i| Placement {
                    t: 0.1,
                    task: i,
                    pu: i as u32 % 2,
                })
                .collect(),
            decisions: vec![Decision {
                t: 1.0,
                action: "migrate".into(),
                cost_current: 68.0,
                cost_new: 34.0,
                predicted_gain: 0.5,
                mapping: vec![0, 1, 0, 1],
                reason: "partners 0-2 apart".into(),
                ..Default::default()
            }],
            samples: vec![Sample {
                t: 1.0,
                events: 100,
                events_per_s: 100.0,
                ..Default::default()
            }],
        }
    }

    #[test]
    fn renders_a_saved_run_as_a_self_contained_page() {
        let dir = std::env::temp_dir().join(format!("huddle-report-{}", std::process::id()));
        let run = sample_run();
        // Saving and loading are rundata's (and tested there).
        run.save(&dir).unwrap();
        let page = std::fs::read_to_string(render(&dir).unwrap()).unwrap();
        // Heatmaps, timeline, cost, events and CPU plots, all inline.
        assert!(
            page.matches("<svg").count() >= 6,
            "{} plots",
            page.matches("<svg").count()
        );
        assert!(!page.contains("<script") && !page.contains(" src=") && !page.contains("href="));
        assert!(page.contains("prog &lt;arg&gt;"), "command is escaped");
        assert!(page.contains("50.0%"), "predicted gain is shown");
        // Upper triangle: (0,1) (1,3) mpi, (0,2) (2,3) faults, (0,3) (1,2) none.
        assert!(
            page.contains("Pairs of tasks by source: 2 from the PMPI agent"),
            "sources are counted"
        );
        assert!(page.contains("2 from page faults"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("run.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

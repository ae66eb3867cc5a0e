//! The data a managed run leaves behind (schema `huddle.run/1`, docs/report.md): `run.json`,
//! `tasks.json`, `matrix.csv`, `snapshots.json`, `placements.csv`, `decisions.json`,
//! `samples.json`, and for MPI programs `matrix-sources.csv`, `matrix-faults.csv` and
//! `rank-matrix.csv`. The manager fills a [`RunData`] and saves it; `report` reads it back
//! and renders the page. Apart from the renderer so that the manager's build does not pull
//! in the plotting library.

use matrix::CommMatrix;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: {reason}")]
    Io { path: PathBuf, reason: String },
    #[error("{path}: {reason}")]
    Format { path: PathBuf, reason: String },
}

/// The run as a whole.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunInfo {
    pub schema: String,
    pub command: Vec<String>,
    pub pid: u32,
    /// Seconds since the Unix epoch.
    pub started_unix: f64,
    pub duration_s: f64,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub policy: String,
    /// How the machine model was obtained, and its size.
    pub machine: String,
    /// PU OS indexes the program may use.
    pub allowed_pus: Vec<u32>,
    /// Minimum predicted cost reduction (fraction) before a migration.
    pub threshold: f64,
    /// CPU time huddle itself used, and the target's, in seconds.
    pub huddle_cpu_s: f64,
    /// CPU time of the detection agents' helper threads inside the target (not in
    /// target_cpu_s, which counts the program's tasks only); absent in older runs.
    #[serde(default)]
    pub agent_cpu_s: f64,
    /// Pages the agents re-armed for extra faults (each costs the program a fault and, for
    /// private memory, TLB shootdowns); absent in older runs.
    #[serde(default)]
    pub rearmed_pages: u64,
    /// With --move-pages: pages moved to their task's new NUMA node, and pages move_pages
    /// could not move; absent in older runs.
    #[serde(default)]
    pub pages_moved: u64,
    #[serde(default)]
    pub pages_not_moved: u64,
    pub target_cpu_s: f64,
    pub detection_source: String,
    pub events: u64,
    pub lost_events: u64,
    /// Messages worth showing (fallbacks, missing privileges).
    pub notes: Vec<String>,
}

/// One task (thread or process) of the program.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TaskRecord {
    pub index: usize,
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub first_seen_s: f64,
    pub last_seen_s: f64,
    pub cpu_s: f64,
    /// The MPI rank (MPI_COMM_WORLD) whose MPI-calling thread this task is, where the PMPI
    /// agent reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi_rank: Option<usize>,
}

/// The communication matrix at one time.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Snapshot {
    pub t: f64,
    pub matrix: Vec<Vec<f64>>,
}

/// Where a task ran at one sample (from /proc/TID/stat, field "processor").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    pub t: f64,
    pub task: usize,
    pub pu: u32,
}

/// One decision of the control loop.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Decision {
    pub t: f64,
    pub interval_ms: u64,
    /// "migrate", "keep", "observe".
    pub action: String,
    pub cost_current: f64,
    pub cost_new: f64,
    /// (current - new) / current.
    pub predicted_gain: f64,
    /// PU OS index per task after the decision, for the tasks in `tasks`.
    pub mapping: Vec<u32>,
    /// Indexes (into tasks.json) of the live tasks the decision covered, in `mapping` order.
    #[serde(default)]
    pub tasks: Vec<usize>,
    pub reason: String,
}

/// Detection activity over one interval.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Sample {
    pub t: f64,
    pub events: u64,
    pub lost: u64,
    pub events_per_s: f64,
    pub tasks: usize,
}

/// Everything in a run directory.
#[derive(Clone, Debug, Default)]
pub struct RunData {
    pub info: RunInfo,
    pub tasks: Vec<TaskRecord>,
    pub matrix: Option<CommMatrix>,
    /// Where each cell of `matrix` came from ("faults", "mpi", "" for an empty cell), when
    /// several sources were merged (MPI programs): matrix-sources.csv.
    pub matrix_sources: Option<Vec<Vec<String>>>,
    /// The page-fault matrix alone, symmetric, where it was merged with another source:
    /// matrix-faults.csv (to compare the two).
    pub matrix_faults: Option<CommMatrix>,
    /// The PMPI agent's rank matrix (bytes, row = sender): rank-matrix.csv, which the agent
    /// writes itself at MPI_Finalize; read for the page, written by [`RunData::save`] only
    /// when set.
    pub rank_matrix: Option<CommMatrix>,
    pub snapshots: Vec<Snapshot>,
    pub placements: Vec<Placement>,
    pub decisions: Vec<Decision>,
    pub samples: Vec<Sample>,
}

pub const SCHEMA: &str = "huddle.run/1";

fn io_err(path: &Path, e: std::io::Error) -> ReportError {
    ReportError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// Creates a file readable only by its owner (reports may name processes and paths).
fn create_private(path: &Path) -> Result<std::fs::File, ReportError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| io_err(path, e))
}

/// Writes `text` into `path`, a new file readable only by its owner (reports may name
/// processes and paths).
pub fn write_text(path: &Path, text: &str) -> Result<(), ReportError> {
    use std::io::Write;
    create_private(path)?
        .write_all(text.as_bytes())
        .map_err(|e| io_err(path, e))
}

fn write_json<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<(), ReportError> {
    let text = serde_json::to_string_pretty(value).expect("run data serializes");
    write_text(&dir.join(name), &text)
}

fn read_json<T: for<'a> Deserialize<'a>>(dir: &Path, name: &str) -> Result<T, ReportError> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).map_err(|e| io_err(&path, e))?;
    serde_json::from_str(&text).map_err(|e| ReportError::Format {
        path,
        reason: e.to_string(),
    })
}

/// The matrix in `dir/name`, or None when there is no such file.
fn read_matrix(dir: &Path, name: &str) -> Result<Option<CommMatrix>, ReportError> {
    let path = dir.join(name);
    if !path.exists() {
        return Ok(None);
    }
    CommMatrix::read(&path)
        .map(Some)
        .map_err(|e| ReportError::Format {
            path,
            reason: e.to_string(),
        })
}

impl RunData {
    /// Writes the raw data files (0600) into `dir` (created 0700 if missing).
    pub fn save(&self, dir: &Path) -> Result<(), ReportError> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| io_err(dir, e))?;
        write_json(dir, "run.json", &self.info)?;
        write_json(dir, "tasks.json", &self.tasks)?;
        write_json(dir, "snapshots.json", &self.snapshots)?;
        write_json(dir, "decisions.json", &self.decisions)?;
        write_json(dir, "samples.json", &self.samples)?;
        if let Some(m) = &self.matrix {
            write_text(&dir.join("matrix.csv"), &m.to_csv())?;
        }
        if let Some(src) = &self.matrix_sources {
            let text: String = src.iter().map(|r| r.join(",") + "\n").collect();
            write_text(&dir.join("matrix-sources.csv"), &text)?;
        }
        if let Some(m) = &self.matrix_faults {
            write_text(&dir.join("matrix-faults.csv"), &m.to_csv())?;
        }
        if let Some(m) = &self.rank_matrix {
            write_text(&dir.join("rank-matrix.csv"), &m.to_csv())?;
        }
        let mut csv = String::from("t,task,pu\n");
        for p in &self.placements {
            csv.push_str(&format!("{:.3},{},{}\n", p.t, p.task, p.pu));
        }
        write_text(&dir.join("placements.csv"), &csv)
    }

    /// Reads a run directory written by [`RunData::save`].
    pub fn load(dir: &Path) -> Result<RunData, ReportError> {
        // Check the schema first so a file from another version says so.
        let raw: serde_json::Value = read_json(dir, "run.json")?;
        let schema = raw.get("schema").and_then(|s| s.as_str()).unwrap_or("none");
        if schema != SCHEMA {
            return Err(ReportError::Format {
                path: dir.join("run.json"),
                reason: format!("schema '{schema}' is not {SCHEMA}"),
            });
        }
        let info: RunInfo = read_json(dir, "run.json")?;
        let matrix = read_matrix(dir, "matrix.csv")?;
        let matrix_faults = read_matrix(dir, "matrix-faults.csv")?;
        // Written by the agent in the program, not by huddle: one left half-written by a
        // rank that died is left out of the page rather than costing the whole report.
        let rank_matrix = read_matrix(dir, "rank-matrix.csv").ok().flatten();
        let sources_path = dir.join("matrix-sources.csv");
        let matrix_sources = match std::fs::read_to_string(&sources_path) {
            Ok(text) => Some(
                text.lines()
                    .map(|l| l.split(',').map(String::from).collect())
                    .collect(),
            ),
            Err(_) => None,
        };
        let placements_path = dir.join("placements.csv");
        let text =
            std::fs::read_to_string(&placements_path).map_err(|e| io_err(&placements_path, e))?;
        let mut placements = Vec::new();
        for (i, line) in text.lines().enumerate().skip(1) {
            let bad = || ReportError::Format {
                path: placements_path.clone(),
                reason: format!("line {}: expected t,task,pu", i + 1),
            };
            let mut f = line.split(',');
            let (Some(t), Some(task), Some(pu)) = (f.next(), f.next(), f.next()) else {
                return Err(bad());
            };
            placements.push(Placement {
                t: t.parse().map_err(|_| bad())?,
                task: task.parse().map_err(|_| bad())?,
                pu: pu.parse().map_err(|_| bad())?,
            });
        }
        Ok(RunData {
            info,
            tasks: read_json(dir, "tasks.json")?,
            matrix,
            matrix_sources,
            matrix_faults,
            rank_matrix,
            snapshots: read_json(dir, "snapshots.json")?,
            placements,
            decisions: read_json(dir, "decisions.json")?,
            samples: read_json(dir, "samples.json")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_and_loads_every_file() {
        let dir = std::env::temp_dir().join(format!("huddle-rundata-{}", std::process::id()));
        let mut m = CommMatrix::zeros(2);
        m.set(0, 1, 3.0);
        m.set(1, 0, 3.0);
        let run = RunData {
            info: RunInfo {
                schema: SCHEMA.into(),
                command: vec!["prog".into()],
                ..Default::default()
            },
            tasks: vec![TaskRecord::default(); 2],
            matrix: Some(m.clone()),
            matrix_sources: Some(vec![
                vec!["".into(), "mpi".into()],
                vec!["mpi".into(), "".into()],
            ]),
            matrix_faults: Some(m),
            rank_matrix: None,
            snapshots: vec![Snapshot {
                t: 1.0,
                matrix: vec![vec![0.0, 3.0], vec![3.0, 0.0]],
            }],
            placements: vec![Placement {
                t: 0.5,
                task: 1,
                pu: 3,
            }],
            decisions: vec![Decision {
                mapping: vec![0, 1],
                ..Default::default()
            }],
            samples: vec![Sample::default()],
        };
        run.save(&dir).unwrap();
        let back = RunData::load(&dir).unwrap();
        assert_eq!(back.placements, run.placements);
        assert_eq!(back.matrix, run.matrix);
        assert_eq!(back.matrix_sources, run.matrix_sources);
        assert_eq!(back.matrix_faults, run.matrix_faults);
        assert_eq!(back.decisions[0].mapping, vec![0, 1]);
        assert_eq!(back.snapshots[0].matrix, run.snapshots[0].matrix);
        assert_eq!(back.info.command, vec!["prog".to_string()]);
        assert!(back.rank_matrix.is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_or_foreign_directory_is_an_error_naming_the_file() {
        let err = RunData::load(Path::new("/nonexistent-huddle-run"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("run.json"), "{err}");
        let dir = std::env::temp_dir().join(format!("huddle-report-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("run.json"), "{\"schema\": \"other/9\"}").unwrap();
        let err = RunData::load(&dir).unwrap_err().to_string();
        assert!(err.contains("other/9"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

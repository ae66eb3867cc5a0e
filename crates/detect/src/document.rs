//! What `huddle detect` writes: the `huddle.detect/1` JSON document (OUT.json, and stdout
//! with `--json`), its snapshots, and the task table (OUT.tasks.csv). The fields are
//! described in docs/detect.md ("Output of `huddle detect`").

use crate::{Granularity, SourceStatus, Stats, TaskInfo};
use serde::Serialize;

/// The schema name and version the document carries.
pub const SCHEMA: &str = "huddle.detect/1";

/// The matrix at one moment of the run.
#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    /// Seconds since the start (`start_monotonic_ns`).
    pub t_s: f64,
    /// Task indexes (into the document's `tasks`) of the rows.
    pub rows: Vec<usize>,
    /// The symmetric matrix over `rows`.
    pub matrix: Vec<Vec<f64>>,
    /// MPI programs: where each cell came from ("mpi", "faults", "" for zero).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cell_sources: Option<Vec<Vec<&'static str>>>,
    /// Faults recorded so far.
    pub faults: u64,
    /// Communication events so far.
    pub comm_events: u64,
}

/// The whole document.
#[derive(Clone, Debug, Serialize)]
pub struct Document<'a> {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Bytes per memory block of the sharer table.
    pub block_size: u64,
    /// Whether tasks are threads or whole processes.
    pub granularity: Granularity,
    /// The program's exit status as a shell gives it (128 + N for signal N).
    pub exit_status: i32,
    /// CLOCK_MONOTONIC ns at the start; snapshot `t_s` and task `first_seen_ms` count from it.
    pub start_monotonic_ns: u64,
    /// Task indexes (into `tasks`) of the matrix rows, in order.
    pub rows: &'a [usize],
    /// The symmetric matrix over `rows`.
    pub matrix: Vec<Vec<f64>>,
    /// MPI programs: where each cell came from ("mpi", "faults", "" for zero).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cell_sources: Option<Vec<Vec<&'static str>>>,
    /// MPI programs: for each row, the MPI rank whose MPI-calling thread it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub row_mpi_ranks: Option<Vec<Option<usize>>>,
    /// Every task seen, agent helper threads included.
    pub tasks: &'a [TaskInfo],
    /// Each event source, whether it ran, and why not.
    pub sources: &'a [SourceStatus],
    /// What the agents in the program reported (fallbacks, refusals).
    pub agent_notes: Vec<String>,
    /// Counters of the run.
    pub stats: Stats,
    /// The matrix every `--interval-ms`, and at the end.
    pub snapshots: &'a [Snapshot],
}

/// OUT.tasks.csv: one line per task seen, with its matrix row where it has one (`rows`:
/// the task index of each row).
pub fn tasks_csv(tasks: &[TaskInfo], rows: &[usize]) -> String {
    let mut table = String::from("index,tid,pid,comm,first_seen_ms,exited,agent,row\n");
    for (i, t) in tasks.iter().enumerate() {
        let row = rows
            .iter()
            .position(|&r| r == i)
            .map_or(String::new(), |r| r.to_string());
        table += &format!(
            "{i},{},{},{},{:.3},{},{},{row}\n",
            t.tid,
            t.pid,
            t.comm.replace([',', '\n'], "_"),
            t.first_seen_ms,
            t.exited,
            t.agent
        );
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(tid: u32, comm: &str, agent: bool) -> TaskInfo {
        TaskInfo {
            tid,
            pid: 7,
            comm: comm.into(),
            first_seen_ms: 1.5,
            exited: false,
            agent,
        }
    }

    #[test]
    fn the_task_table_names_each_task_s_row_and_cleans_commas() {
        let tasks = [
            task(7, "main", false),
            task(8, "huddle-agent", true),
            task(9, "a,b", false),
        ];
        let csv = tasks_csv(&tasks, &[0, 2]);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "index,tid,pid,comm,first_seen_ms,exited,agent,row"
        );
        assert_eq!(lines[1], "0,7,7,main,1.500,false,false,0");
        assert_eq!(lines[2], "1,8,7,huddle-agent,1.500,false,true,");
        assert_eq!(lines[3], "2,9,7,a_b,1.500,false,false,1");
    }

    #[test]
    fn the_document_carries_its_schema_and_leaves_out_mpi_fields_when_absent() {
        let tasks = [task(7, "main", false)];
        let snaps = [Snapshot {
            t_s: 0.5,
            rows: vec![0],
            matrix: vec![vec![0.0]],
            cell_sources: None,
            faults: 3,
            comm_events: 0,
        }];
        let doc = Document {
            schema: SCHEMA,
            command: vec!["true".into()],
            block_size: 256,
            granularity: Granularity::Thread,
            exit_status: 0,
            start_monotonic_ns: 1,
            rows: &[0],
            matrix: vec![vec![0.0]],
            cell_sources: None,
            row_mpi_ranks: None,
            tasks: &tasks,
            sources: &[],
            agent_notes: Vec::new(),
            stats: Stats::default(),
            snapshots: &snaps,
        };
        let v: serde_json::Value = serde_json::to_value(&doc).unwrap();
        assert_eq!(v["schema"], "huddle.detect/1");
        assert_eq!(v["granularity"], "thread");
        assert!(v.get("cell_sources").is_none() && v.get("row_mpi_ranks").is_none());
        assert_eq!(v["snapshots"][0]["faults"], 3);
        assert_eq!(v["tasks"][0]["comm"], "main");
        assert!(v["stats"].get("comm_events").is_some());
    }
}

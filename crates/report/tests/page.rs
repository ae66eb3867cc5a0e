//! The structure of the report page: its sections, legends and colour scales, the order in
//! which tasks appear, and where the run's notes go.

use matrix::CommMatrix;
use report::{
    render_html, Decision, Placement, RunData, RunInfo, Sample, Snapshot, TaskRecord, SCHEMA,
};

/// The notes a real run carries (internal detail, not warnings).
const NOTES: [&str; 2] = [
    "agent (extra faults): shared mappings by dropping PTEs, private memory by userfaultfd",
    "sharer table: 1048576 slots, 6 evictions",
];

fn task(index: usize, tid: u32, pid: u32, comm: &str, rank: Option<usize>) -> TaskRecord {
    TaskRecord {
        index,
        tid,
        pid,
        comm: comm.into(),
        cpu_s: 0.5,
        mpi_rank: rank,
        ..Default::default()
    }
}

/// A distant-pairs run of 8 threads as /proc lists them: the main thread, then
/// wl-task-1 2 4 5 7 0 3 6; pairs (k, k+4) communicate.
fn distant_pairs() -> RunData {
    let names = [
        "huddle",
        "wl-task-1",
        "wl-task-2",
        "wl-task-4",
        "wl-task-5",
        "wl-task-7",
        "wl-task-0",
        "wl-task-3",
        "wl-task-6",
    ];
    let tasks: Vec<TaskRecord> = names
        .iter()
        .enumerate()
        .map(|(i, n)| task(i, 100 + i as u32, 100, n, None))
        .collect();
    let index_of = |name: &str| names.iter().position(|n| *n == name).unwrap();
    let mut m = CommMatrix::zeros(names.len());
    for k in 0..4 {
        let (a, b) = (
            index_of(&format!("wl-task-{k}")),
            index_of(&format!("wl-task-{}", k + 4)),
        );
        m.set(a, b, 90.0 + k as f64);
        m.set(b, a, 90.0 + k as f64);
    }
    let rates = [
        45000.0, 310.0, 320.0, 300.0, 290.0, 80.0, 70.0, 75.0, 72.0, 71.0,
    ];
    RunData {
        info: RunInfo {
            schema: SCHEMA.into(),
            command: vec!["huddle".into(), "workload".into(), "distant-pairs".into()],
            duration_s: 4.0,
            exit_code: Some(0),
            policy: "comm".into(),
            threshold: 0.05,
            detection_source: "perf page faults".into(),
            notes: NOTES.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        },
        tasks,
        matrix: Some(m.clone()),
        snapshots: vec![Snapshot {
            t: 1.0,
            matrix: m.to_rows(),
        }],
        placements: (1..9)
            .flat_map(|i| {
                [
                    Placement {
                        t: 0.2,
                        task: i,
                        pu: (i % 2) as u32,
                    },
                    Placement {
                        t: 1.5,
                        task: i,
                        pu: ((i + 1) % 2) as u32,
                    },
                ]
            })
            .collect(),
        decisions: vec![
            Decision {
                t: 1.0,
                action: "keep".into(),
                cost_current: 300.0,
                cost_new: 0.0,
                ..Default::default()
            },
            Decision {
                t: 1.4,
                action: "migrate".into(),
                cost_current: 446.0,
                cost_new: 0.0,
                predicted_gain: 1.0,
                mapping: vec![1, 0],
                tasks: vec![index_of("wl-task-4"), index_of("wl-task-0")],
                reason: "huddle mapping".into(),
                ..Default::default()
            },
        ],
        samples: rates
            .iter()
            .enumerate()
            .map(|(k, &r)| Sample {
                t: 0.1 + 0.4 * k as f64,
                events_per_s: r,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// Where `needle` first occurs in `hay` after `from`, or a failed assertion naming it.
fn at(hay: &str, needle: &str, from: usize) -> usize {
    from + hay[from..]
        .find(needle)
        .unwrap_or_else(|| panic!("'{needle}' not found after byte {from}"))
}

/// An SVG text element's content as plotters writes it (on its own line).
fn svg_text(s: &str) -> String {
    format!("\n{s}\n</text>")
}

/// The text of the section with `id`.
fn section<'a>(page: &'a str, id: &str) -> &'a str {
    let start = at(page, &format!("<section id={id}>"), 0);
    let end = at(page, "</section>", start);
    &page[start..end]
}

#[test]
fn the_page_has_its_sections_in_order_with_the_notes_last() {
    let page = render_html(&distant_pairs());
    let mut pos = 0;
    for id in [
        "summary",
        "communication",
        "placement",
        "migrations",
        "tasks",
        "detection",
        "measured",
    ] {
        pos = at(&page, &format!("<section id={id}>"), pos);
    }
    assert!(section(&page, "measured").contains("<h2>How this was measured</h2>"));
    // Every note is listed under "How this was measured", and nowhere before it.
    let measured = at(&page, "<section id=measured>", 0);
    for n in NOTES {
        let n = n.replace('>', "&gt;");
        let first = at(&page, &n, 0);
        assert!(
            first > measured,
            "note '{n}' appears before the measured section"
        );
        assert!(section(&page, "measured").contains(&format!("<li>{n}</li>")));
    }
    // No warning styling left for ordinary notes.
    assert!(!page.contains("<p class=note"), "notes are not warnings");
    assert!(!page.contains("#a60"), "no warning colour");
}

#[test]
fn heatmaps_carry_a_colour_scale_with_their_unit() {
    let page = render_html(&distant_pairs());
    let comm = section(&page, "communication");
    // The final matrix and one snapshot, both in events, each with its scale.
    assert_eq!(comm.matches("<figure class=").count(), 2, "{comm}");
    assert_eq!(comm.matches("data-unit=events").count(), 2);
    assert_eq!(comm.matches("events (max 93)").count(), 2, "{comm}");
    // Tick labels of the scale: 0 and 80 (a step of 20 up to 93).
    assert!(comm.contains(&svg_text("80")) && comm.contains(&svg_text("0")));
    assert!(comm.contains("<figcaption>"));
}

#[test]
fn tasks_appear_in_the_programs_own_order_everywhere() {
    let page = render_html(&distant_pairs());
    let expect: Vec<String> = (0..8)
        .map(|k| format!("wl-task-{k}"))
        .chain(["huddle".to_string()])
        .collect();
    let in_order = |text: &str, what: &str| {
        let mut pos = 0;
        for name in &expect {
            pos = at(text, &svg_text(name), pos) + 1;
        }
        assert!(pos > 0, "{what}");
    };
    // The final heatmap's row names (its first SVG), the timeline's rows, the CPU bars and
    // the task table: each lists wl-task-0 .. wl-task-7, then the main thread.
    let comm = section(&page, "communication");
    let heat = &comm[..at(comm, "</svg>", 0)];
    in_order(heat, "heatmap");
    in_order(section(&page, "placement"), "timeline");
    let tasks = section(&page, "tasks");
    let cpu = &tasks[..at(tasks, "</svg>", 0)];
    in_order(cpu, "cpu bars");
    let table = &tasks[at(tasks, "<table id=task-table>", 0)..];
    let mut pos = 0;
    for name in &expect {
        pos = at(table, &format!("<tr><td class=l>{name}</td>"), pos) + 1;
    }
    // The heatmap's columns follow the rows: in the first row (wl-task-0) only the fifth
    // cell (wl-task-4) is lit, as in the workload's own ground truth.
    let fills: Vec<&str> = heat
        .match_indices("<rect ")
        .skip(1) // the white background
        .take(9)
        .map(|(k, _)| {
            let f = at(heat, "fill=\"", k) + 6;
            &heat[f..at(heat, "\"", f)]
        })
        .collect();
    let dark = fills[0];
    for (c, f) in fills.iter().enumerate() {
        assert_eq!(*f != dark, c == 4, "row wl-task-0, column {c}: {fills:?}");
    }
    // The migration table names tasks, in order, with their new PU.
    let mig = section(&page, "migrations");
    let a = at(mig, "wl-task-0&nbsp;&rarr;&nbsp;PU&nbsp;0", 0);
    let b = at(mig, "wl-task-4&nbsp;&rarr;&nbsp;PU&nbsp;1", 0);
    assert!(a < b, "{mig}");
}

#[test]
fn the_timeline_has_a_pu_legend_and_the_cost_plot_its_own() {
    let page = render_html(&distant_pairs());
    let place = section(&page, "placement");
    let legend = &place[at(place, "<div class=legend id=pu-legend>", 0)..];
    let legend = &legend[..at(legend, "</div>", 0)];
    assert_eq!(legend.matches("class=swatch").count(), 2, "{legend}");
    assert!(legend.contains("PU 0") && legend.contains("PU 1") && legend.contains("migration"));
    let cost = &place[at(place, "<div class=legend id=cost-legend>", 0)..];
    assert!(cost.contains("live mapping") && cost.contains("best candidate"));
}

#[test]
fn a_start_up_spike_does_not_flatten_the_detection_rate() {
    let page = render_html(&distant_pairs());
    let det = section(&page, "detection");
    assert!(det.contains("45,000 events/s (off scale)"), "{det}");
    let scale = &det[at(det, "id=rate-scale", 0)..];
    assert!(scale.contains("cut at"), "{scale}");
    assert!(
        scale.contains("highest: 45,000 events/s at 0.10 s"),
        "{scale}"
    );
    // The y axis reaches the steady state (~300-400), not 45k.
    let plot = &det[..at(det, "</svg>", 0)];
    assert!(!plot.contains(&svg_text("45k")) && !plot.contains(&svg_text("40k")));
    assert!(plot.contains(&svg_text("300")), "{plot}");
}

#[test]
fn mpi_runs_show_ranks_in_rank_order_and_a_bytes_heatmap() {
    // /proc order: the launcher, rank 1's process, rank 0's process.
    let tasks = vec![
        task(0, 10, 10, "mpirun", None),
        task(1, 20, 20, "lmp", Some(1)),
        task(2, 21, 20, "?", None),
        task(3, 30, 30, "lmp", Some(0)),
        task(4, 31, 30, "lmp", None),
    ];
    let mut m = CommMatrix::zeros(5);
    m.set(1, 3, 50.0);
    m.set(3, 1, 50.0);
    let mut ranks = CommMatrix::zeros(2);
    ranks.set(0, 1, 3.0 * 1024.0 * 1024.0);
    ranks.set(1, 0, 1024.0);
    let sources: Vec<Vec<String>> = (0..5)
        .map(|i| {
            (0..5)
                .map(|j| {
                    if (i == 1 && j == 3) || (i == 3 && j == 1) {
                        "mpi".to_string()
                    } else {
                        String::new()
                    }
                })
                .collect()
        })
        .collect();
    let run = RunData {
        info: RunInfo {
            schema: SCHEMA.into(),
            command: vec!["mpirun".into()],
            duration_s: 1.0,
            ..Default::default()
        },
        tasks,
        matrix: Some(m),
        matrix_sources: Some(sources),
        rank_matrix: Some(ranks),
        ..Default::default()
    };
    let page = render_html(&run);
    let table = section(&page, "tasks");
    let table = &table[at(table, "<table id=task-table>", 0)..];
    let mut pos = 0;
    for name in [
        "rank 0",
        "rank 0 · lmp",
        "rank 1",
        "rank 1 · tid 21",
        "mpirun",
    ] {
        pos = at(table, &format!("<tr><td class=l>{name}"), pos) + 1;
    }
    let comm = section(&page, "communication");
    assert!(comm.contains("data-unit=bytes"), "{comm}");
    assert!(comm.contains("bytes (max 3 MiB)"), "{comm}");
    assert!(comm.contains("Dots mark the cells the PMPI agent measured"));
}

#[test]
fn empty_partial_and_large_runs_still_render() {
    // Nothing recorded at all.
    let page = render_html(&RunData::default());
    assert!(page.contains("<section id=measured>") && page.ends_with("</html>"));
    assert!(page.contains("No communication matrix was recorded."));
    // A matrix larger than tasks.json, a ragged snapshot, a placement of an unknown task.
    let mut run = distant_pairs();
    run.matrix = Some(CommMatrix::zeros(11));
    run.snapshots.push(Snapshot {
        t: 2.0,
        matrix: vec![vec![0.0; 3], vec![0.0; 2]],
    });
    run.placements.push(Placement {
        t: 0.5,
        task: 12,
        pu: 7,
    });
    let page = render_html(&run);
    let comm = section(&page, "communication");
    assert!(
        comm.contains(&svg_text("task 10")),
        "unknown rows are named by index"
    );
    assert!(section(&page, "placement").contains(&svg_text("task 12")));
    assert!(section(&page, "placement").contains("PU 7"));
    // 300 threads: rows are thinned out, never unreadable overlaps of every name.
    let tasks: Vec<TaskRecord> = (0..300)
        .map(|i| task(i, 1000 + i as u32, 1000, &format!("worker-{i}"), None))
        .collect();
    let run = RunData {
        placements: (0..300)
            .map(|i| Placement {
                t: 0.1,
                task: i,
                pu: (i % 4) as u32,
            })
            .collect(),
        tasks,
        ..Default::default()
    };
    let page = render_html(&run);
    let place = section(&page, "placement");
    let named = (0..300)
        .filter(|i| place.contains(&svg_text(&format!("worker-{i}"))))
        .count();
    assert!((50..300).contains(&named), "{named} of 300 rows named");
    // Natural order: worker-2 before worker-10.
    let table = section(&page, "tasks");
    assert!(at(table, ">worker-2<", 0) < at(table, ">worker-10<", 0));
}

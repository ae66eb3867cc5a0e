//! `huddle tune-msg`: measure this machine's message-passing transports per locality class
//! and store the rule table that `huddle launch` uses.

use crate::exit::bad_input;
use huddle_msg::engine::Engine;
use huddle_msg::launch::{self, Launch};
use huddle_msg::rules::{default_rules_path, Class, RuleTable};
use huddle_msg::tune::{self, Plan, Point};
use std::path::PathBuf;
use std::time::Duration;
use topology::{Machine, ObjKind};

#[derive(clap::Args)]
#[command(
    long_about = "Measure, for one pair of PUs of each locality class present on this machine \
    (same core, shared L2, shared L3, same NUMA node, other package), ping-pong time with each \
    candidate pipeline fragment size and with single copy (process_vm_readv), from 8 KiB to \
    4 MiB and (fastest fragment and single copy only) at once and twice the last-level cache \
    size, and store the \
    per-class rule table (JSON, schema huddle.msg-rules/1, see docs/msg.md) where `huddle \
    launch` finds it: --output, else $HUDDLE_MSG_RULES, else \
    $XDG_CONFIG_HOME/huddle/msg-rules.json (~/.config/huddle/msg-rules.json). Classes with \
    no pair on this machine keep the rules derived from the cache sizes. The file is checked \
    for writing before anything is measured; only the default location's directory \
    (huddle/ in the config directory) is created, an --output or $HUDDLE_MSG_RULES file's \
    directory must exist."
)]
pub struct Args {
    /// Where to store the table (its directory must exist)
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Fewer candidates and sizes (seconds instead of a minute per class)
    #[arg(long)]
    pub quick: bool,
    /// Print the table and every measurement as JSON
    #[arg(long)]
    pub json: bool,
    /// Internal: run as a measuring rank and write the points here
    #[arg(long, hide = true, value_name = "FILE")]
    pub worker: Option<PathBuf>,
}

fn worker(out: &PathBuf, quick: bool) -> anyhow::Result<i32> {
    let mut e = Engine::from_env()?;
    // The last-level cache: past it, copies run from memory (tune.rs measures there too).
    let llc = Machine::from_system().ok().and_then(|m| {
        [
            ObjKind::L5,
            ObjKind::L4,
            ObjKind::L3,
            ObjKind::L2,
            ObjKind::L1,
        ]
        .into_iter()
        .find_map(|k| m.nodes_of(k).find_map(|n| n.cache_size))
    });
    let points = tune::measure(&mut e, &Plan::new(quick, llc))?;
    if e.rank() == 0 {
        std::fs::write(out, serde_json::to_string(&points)?)
            .map_err(|err| anyhow::anyhow!("{}: {err}", out.display()))?;
    }
    e.mark_finalized();
    Ok(0)
}

/// One pair of allowed PUs per class present, by logical index.
fn pairs(m: &Machine) -> Vec<(Class, usize, usize)> {
    let pus: Vec<usize> = m.allowed_pus().collect();
    let mut out: Vec<(Class, usize, usize)> = Vec::new();
    for (i, &a) in pus.iter().enumerate() {
        for &b in &pus[i + 1..] {
            let c = Class::from_level(m.level(a, b));
            if !out.iter().any(|x| x.0 == c) {
                out.push((c, a, b));
            }
        }
    }
    out.sort();
    out
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if let Some(out) = &args.worker {
        return worker(out, args.quick);
    }
    let path = match (&args.output, std::env::var_os("HUDDLE_MSG_RULES")) {
        (Some(p), _) => {
            crate::outputs::file("--output", p)?;
            p.clone()
        }
        (None, Some(p)) => {
            let p = PathBuf::from(p);
            crate::outputs::file("HUDDLE_MSG_RULES", &p)?;
            p
        }
        (None, None) => {
            let p = default_rules_path()
                .ok_or_else(|| bad_input("no HOME to store the rules under: give --output"))?;
            // The documented default: its directory in the user's config directory is made.
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| bad_input(format!("{}: {e}", dir.display())))?;
            }
            crate::outputs::file("the rule table", &p)?;
            p
        }
    };
    let m = Machine::from_system()?;
    let defaults = RuleTable::from_caches(&m);
    let mut table = defaults.clone();
    let exe = std::env::current_exe()?;
    let mut measured = Vec::new();
    let mut all_points: Vec<(Class, usize, usize, Vec<Point>)> = Vec::new();
    for (class, a, b) in pairs(&m) {
        let tmp = std::env::temp_dir().join(format!(
            "huddle-tune-msg-{}-{}.json",
            std::process::id(),
            class.name()
        ));
        let mut wargs = vec!["tune-msg".into(), "--worker".into(), tmp.clone().into()];
        if args.quick {
            wargs.push("--quick".into());
        }
        let outcome = launch::run(Launch {
            program: exe.clone().into(),
            args: wargs,
            job: launch::job_spec(&m, &[a, b], &defaults)?,
            grace: Duration::from_secs(5),
        });
        // The worker's file goes whatever happened.
        let text = std::fs::read_to_string(&tmp);
        let _ = std::fs::remove_file(&tmp);
        if let Some(f) = outcome?.failure {
            anyhow::bail!("measuring class {} on PUs {a},{b}: {f}", class.name());
        }
        let text = text?;
        let points: Vec<Point> = serde_json::from_str(&text)?;
        let base = defaults.rules[&class];
        let rule = tune::choose(&points, base);
        table.rules.insert(class, rule);
        let (osa, osb) = (m.pus[a].os_index, m.pus[b].os_index);
        measured.push(format!("{} on PUs P#{osa},P#{osb}", class.name()));
        all_points.push((class, osa as usize, osb as usize, points));
    }
    table.source = "tune-msg".into();
    table.basis = format!(
        "measured {} ({}); other classes from cache sizes ({})",
        if measured.is_empty() {
            "nothing".to_string()
        } else {
            measured.join(", ")
        },
        if args.quick {
            "quick plan"
        } else {
            "full plan"
        },
        defaults.basis
    );
    table.save(&path)?;
    if args.json {
        let detail: Vec<serde_json::Value> = all_points
            .iter()
            .map(|(c, a, b, p)| serde_json::json!({"class": c, "pus_os": [a, b], "points": p}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "stored": path, "table": table, "measurements": detail
            }))?
        );
        return Ok(0);
    }
    println!("rule table stored in {}", path.display());
    println!(
        "{:<8} {:>12} {:>14} {:>22} {:>12}  source",
        "class", "eager_limit", "fragment", "single_copy_threshold", "in_exchanges"
    );
    let bytes = |b: u64| {
        if b == u64::MAX {
            "never".to_string()
        } else {
            b.to_string()
        }
    };
    for (c, r) in &table.rules {
        // The exchange threshold always comes from the cache sizes.
        let src = if all_points.iter().any(|x| x.0 == *c) {
            "measured (in_exchanges: cache sizes)"
        } else {
            "cache sizes"
        };
        println!(
            "{:<8} {:>12} {:>14} {:>22} {:>12}  {src}",
            c.name(),
            r.eager_limit,
            r.fragment,
            bytes(r.single_copy_threshold),
            bytes(r.exchange_single_copy_threshold)
        );
    }
    Ok(0)
}

//! `huddle tune-msg`: measure this machine's message-passing transports per locality class
//! and store the rule table that `huddle launch` uses.

use crate::exit::bad_input;
use huddle_msg::rules::default_rules_path;
use huddle_msg::tune;
use std::path::PathBuf;
use topology::Machine;

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

pub fn run(args: Args) -> anyhow::Result<i32> {
    if let Some(out) = &args.worker {
        tune::run_worker(out, args.quick)?;
        return Ok(0);
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
    let exe: std::ffi::OsString = std::env::current_exe()?.into();
    let quick = args.quick;
    let worker = |out: &std::path::Path| {
        let mut a = vec![
            "tune-msg".into(),
            "--worker".into(),
            out.as_os_str().to_os_string(),
        ];
        if quick {
            a.push("--quick".into());
        }
        (exe.clone(), a)
    };
    let (table, measured) = tune::tune_machine(&m, quick, &worker)?;
    table.save(&path)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "stored": path, "table": table, "measurements": measured
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
        let src = if measured.iter().any(|x| x.class == *c) {
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

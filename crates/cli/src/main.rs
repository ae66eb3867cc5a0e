//! `huddle`: detect who talks to whom in a parallel program, map tasks onto the machine, and
//! move them while the program runs. Each subcommand lives in its own module.

mod agent;
mod detect;
mod exit;
mod launch;
mod machine_args;
mod map;
mod node;
mod outputs;
mod report;
mod run;
mod topo;
mod tune_msg;
mod workload;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "huddle",
    version,
    about = "Put communicating tasks, and their memory, close together on the machine",
    long_about = "huddle watches an unmodified parallel program (threads, processes, MPI ranks), \
                  detects which tasks communicate, maps them onto the machine's hierarchy so that \
                  partners share caches, and moves them while the program runs.\n\n\
                  Locations of CPUs use hwloc's syntax: pu:0-3, core:2, package:1.core:0, numa:0, \
                  or bare OS indexes 0-3,8 as taskset takes them.\n\n\
                  Exit codes: 0 success, 1 runtime failure, 2 bad input; `run` and `detect` \
                  return the target's own exit status."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    // `about` rather than doc comments: a doc comment would also reset the subcommand's
    // long_about, hiding the long help each Args struct carries.
    #[command(
        about = "Show the machine model: levels, caches, NUMA nodes, PU OS indexes (hwloc underneath)"
    )]
    Topo(topo::Args),
    #[command(
        about = "Run a built-in workload whose communication is known; write its ground-truth matrix"
    )]
    Workload(workload::Args),
    #[command(about = "Run a program with communication detection; write its task-by-task matrix")]
    Detect(detect::Args),
    #[command(
        about = "Map tasks onto PUs from a communication matrix; --advise compares blocked/cyclic/mapped"
    )]
    Map(map::Args),
    #[command(
        about = "Launch a program and move its tasks online so that communicating ones share caches"
    )]
    Run(run::RunArgs),
    #[command(
        about = "Manage an already running program (no extra faults: the agent cannot be preloaded)"
    )]
    Attach(run::AttachArgs),
    #[command(
        about = "Manage the MPI ranks of one job on this node (started by the job's PMPI agent with HUDDLE_NODE=1)"
    )]
    Node(node::NodeArgs),
    #[command(
        hide = true,
        about = "Internal: `huddle run --node-managers --report DIR` reads the launcher's stderr with it"
    )]
    Relay(node::RelayArgs),
    #[command(about = "Render the HTML report of a `huddle run --report DIR` directory again")]
    Report(report::Args),
    #[command(
        about = "Run an MPI program built with huddle-cc as N pinned ranks (huddle's message passing)"
    )]
    Launch(launch::Args),
    #[command(
        about = "Measure this machine's message-passing transports and store the per-class rule table"
    )]
    TuneMsg(tune_msg::Args),
}

/// Parses the command line. Every option that takes a value accepts negative numbers (so that
/// `--threshold -5` reaches the range check and its one-line message); clap's own errors are
/// printed on one line too, exit 2.
fn parse_cli() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let cmd = Cli::command().mut_subcommands(|sub| {
        sub.mut_args(|a| {
            if a.get_action().takes_values() {
                a.allow_negative_numbers(true)
            } else {
                a
            }
        })
    });
    cmd.try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
        .unwrap_or_else(|e| exit_on_usage_error(e))
}

fn exit_on_usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    // The message is the text before clap's usage and tips, on one line.
    let text = e.render().to_string();
    let message: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("tip:"))
        .collect();
    let message = message.join(" ");
    eprintln!(
        "huddle: {} (see --help)",
        message.strip_prefix("error: ").unwrap_or(&message)
    );
    std::process::exit(2);
}

fn main() {
    let cli = parse_cli();
    let result = match cli.command {
        Command::Topo(a) => topo::run(a),
        Command::Workload(a) => workload::run(a),
        Command::Detect(a) => detect::run(a),
        Command::Map(a) => map::run(a),
        Command::Run(a) => run::run(a),
        Command::Attach(a) => run::attach(a),
        Command::Node(a) => node::run(a),
        Command::Relay(a) => node::relay(a),
        Command::Report(a) => report::run(a),
        Command::Launch(a) => launch::run(a),
        Command::TuneMsg(a) => tune_msg::run(a),
    };
    std::process::exit(exit::report(result));
}

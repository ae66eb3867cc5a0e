//! `huddle report DIR`: render a run directory's raw data into DIR/index.html again.

use crate::exit::bad_input;
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(
    long_about = "Render the HTML report of a run directory written by `huddle run \
    --report DIR` again from its raw data (run.json, tasks.json, matrix.csv, snapshots.json, \
    placements.csv, decisions.json, samples.json). The page is one self-contained file that \
    opens offline."
)]
pub struct Args {
    /// The run directory
    pub dir: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let page = report::render(&args.dir).map_err(bad_input)?;
    println!("{}", page.display());
    Ok(0)
}

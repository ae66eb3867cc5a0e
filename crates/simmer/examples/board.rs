//! Prints a PMPI board as JSON (one snapshot), or its rank matrix as CSV with --matrix.
//! Usage: board PATH [--matrix]
use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: board PATH [--matrix]");
        std::process::exit(2);
    };
    let snap = match simmer::board::Board::open(Path::new(path)).and_then(|b| b.snapshot()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("board: {e}");
            std::process::exit(2);
        }
    };
    if args.iter().any(|a| a == "--matrix") {
        print!("{}", snap.rank_matrix().to_csv());
    } else {
        match serde_json::to_string_pretty(&snap) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("board: {e}");
                std::process::exit(1);
            }
        }
    }
}

//! Prints a PMPI board as JSON (one snapshot), or its rank matrix as CSV with --matrix.
//! Usage: board PATH [--matrix]
use std::io::Write;
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
    let text = if args.iter().any(|a| a == "--matrix") {
        snap.rank_matrix().to_csv()
    } else {
        match serde_json::to_string_pretty(&snap) {
            Ok(s) => s + "\n",
            Err(e) => {
                eprintln!("board: {e}");
                std::process::exit(1);
            }
        }
    };
    // A reader that stops early (`| head`, `grep -q`) is not an error worth a panic.
    if let Err(e) = std::io::stdout().write_all(text.as_bytes()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("board: writing stdout: {e}");
            std::process::exit(1);
        }
    }
}

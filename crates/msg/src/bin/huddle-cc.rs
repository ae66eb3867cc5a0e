//! `huddle-cc`: compiles and links an MPI C program against huddle's message-passing library,
//! as `mpicc` does for an MPI library. It runs `$HUDDLE_CC` (default `cc`) with the
//! arguments given, adding `-I <include>` for <mpi.h> and, when linking, `-L <lib>
//! -lhuddle_msg` with an rpath. `huddle-cc -show` prints the command instead of running it.
//!
//! The include directory is `$HUDDLE_MSG_INCLUDE`, else `include/huddle/msg` of the source
//! tree this binary was built in; the library directory is `$HUDDLE_MSG_LIB`, else the
//! directory of this binary (cargo puts libhuddle_msg.so beside it).

use std::path::PathBuf;
use std::process::{exit, Command};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let show = args.iter().any(|a| a == "-show" || a == "--show");
    let args: Vec<String> = args
        .into_iter()
        .filter(|a| a != "-show" && a != "--show")
        .collect();
    let include = std::env::var_os("HUDDLE_MSG_INCLUDE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../include/huddle/msg")
        });
    let lib = match std::env::var_os("HUDDLE_MSG_LIB") {
        Some(p) => PathBuf::from(p),
        None => match std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(PathBuf::from))
        {
            Some(d) => d,
            None => {
                eprintln!("huddle-cc: cannot locate its own directory; set HUDDLE_MSG_LIB");
                exit(2);
            }
        },
    };
    if !include.join("mpi.h").is_file() {
        eprintln!(
            "huddle-cc: {} has no mpi.h; set HUDDLE_MSG_INCLUDE",
            include.display()
        );
        exit(2);
    }
    // Compile-only and preprocess-only runs do not link.
    let link = !args
        .iter()
        .any(|a| a == "-c" || a == "-E" || a == "-S" || a == "-M" || a == "-MM");
    let cc = std::env::var("HUDDLE_CC").unwrap_or_else(|_| "cc".to_string());
    let mut full = vec![format!("-I{}", include.display())];
    full.extend(args);
    if link {
        full.push(format!("-L{}", lib.display()));
        full.push(format!("-Wl,-rpath,{}", lib.display()));
        full.push("-lhuddle_msg".into());
    }
    if show {
        println!("{cc} {}", full.join(" "));
        return;
    }
    match Command::new(&cc).args(&full).status() {
        Ok(st) => exit(st.code().unwrap_or(1)),
        Err(e) => {
            eprintln!("huddle-cc: cannot run {cc}: {e}");
            exit(2);
        }
    }
}

//! Exit codes and one-line error reports.
//!
//! Library errors that mean "the input is wrong" become exit code 2; everything else is a
//! runtime failure (1). Commands that run a target return its status as `Ok(code)`.

use std::fmt;

/// An error with the exit code it deserves.
#[derive(Debug)]
pub struct Exit {
    pub code: i32,
    pub message: String,
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

/// Bad input: exit code 2.
pub fn bad_input(e: impl fmt::Display) -> anyhow::Error {
    Exit {
        code: 2,
        message: e.to_string(),
    }
    .into()
}

/// Why a program could not be started, with the codes a shell gives: 127 not found, 126
/// found but not executable; a bad block size is bad input.
pub fn start_error(e: detect::DetectError) -> anyhow::Error {
    use detect::DetectError as E;
    let code = match e {
        E::CommandNotFound(_) => 127,
        E::Exec { .. } => 126,
        E::BlockSize(_) => return bad_input(e),
        other => return anyhow::Error::new(other),
    };
    Exit {
        code,
        message: e.to_string(),
    }
    .into()
}

/// Prints the error (one line, with its causes joined) and gives the exit code.
pub fn report(result: anyhow::Result<i32>) -> i32 {
    match result {
        Ok(code) => code,
        Err(e) => {
            let code = e.downcast_ref::<Exit>().map_or(1, |x| x.code);
            let line = format!("{e:#}").replace('\n', " ");
            eprintln!("huddle: {line}");
            code
        }
    }
}

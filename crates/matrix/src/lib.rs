//! Communication matrices in huddle's format: N lines of N comma-separated non-negative
//! numbers; entry (i, j) is the communication between tasks i and j (the format of
//! shared/data/matrices). Detection writes them, mapping reads them.

#![warn(missing_docs)]

use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// A parse error that names the file, line and column at fault (1-based).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MatrixError {
    /// A problem with the whole file: unreadable, empty, or cells beyond [`MAX_TOTAL`].
    #[error("{file}: {reason}")]
    File {
        /// The file's name, as given.
        file: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A problem at one cell: not a number, not finite, negative, or a row of the wrong length.
    #[error("{file}:{line}:{column}: {reason}")]
    Cell {
        /// The file's name, as given.
        file: String,
        /// Line in the text, 1-based, blank lines counted.
        line: usize,
        /// Comma-separated field in the line, 1-based (for a row of the wrong length, the
        /// first missing or extra one).
        column: usize,
        /// What is wrong with the cell.
        reason: String,
    },
}

/// The largest sum of cells a matrix may have (see [`CommMatrix::parse`]).
pub const MAX_TOTAL: f64 = 1e300;

/// A square matrix of non-negative, finite communication amounts.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CommMatrix {
    n: usize,
    data: Vec<f64>,
}

impl CommMatrix {
    /// An n x n matrix of zeros (n = 0 gives the empty matrix).
    pub fn zeros(n: usize) -> CommMatrix {
        CommMatrix {
            n,
            data: vec![0.0; n * n],
        }
    }

    /// From rows; panics if not square or a value is negative or not finite (for code that
    /// builds matrices itself; input files go through [`CommMatrix::parse`]).
    pub fn from_rows(rows: Vec<Vec<f64>>) -> CommMatrix {
        let n = rows.len();
        let mut m = CommMatrix::zeros(n);
        for (i, row) in rows.into_iter().enumerate() {
            assert_eq!(row.len(), n, "row {i} is not {n} long");
            for (j, v) in row.into_iter().enumerate() {
                m.set(i, j, v);
            }
        }
        m
    }

    /// Number of tasks: the number of rows, equal to the number of columns.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Entry at row i, column j: traffic from task i to task j. Both must be below `n()`.
    pub fn get(&self, i: usize, j: usize) -> f64 {
        debug_assert!(j < self.n, "column {j} of a {}-task matrix", self.n);
        self.data[i * self.n + j]
    }

    /// Sets entry (i, j); panics if `v` is negative or not finite. Both must be below `n()`.
    pub fn set(&mut self, i: usize, j: usize, v: f64) {
        assert!(
            v.is_finite() && v >= 0.0,
            "matrix entries are finite and >= 0, got {v}"
        );
        assert!(j < self.n, "column {j} of a {}-task matrix", self.n);
        self.data[i * self.n + j] = v;
    }

    /// Adds `v` to entry (i, j); panics if the result is negative or not finite.
    pub fn add(&mut self, i: usize, j: usize, v: f64) {
        let cur = self.get(i, j);
        self.set(i, j, cur + v);
    }

    /// Row i (what task i sends to each task), `n()` entries; panics if i >= `n()`.
    pub fn row(&self, i: usize) -> &[f64] {
        &self.data[i * self.n..(i + 1) * self.n]
    }

    /// (M + Mᵀ) / 2 with a zero diagonal: the undirected amount each pair exchanges.
    pub fn symmetrized(&self) -> CommMatrix {
        let mut out = CommMatrix::zeros(self.n);
        for i in 0..self.n {
            for j in 0..self.n {
                if i != j {
                    out.data[i * self.n + j] = (self.get(i, j) + self.get(j, i)) / 2.0;
                }
            }
        }
        out
    }

    /// Sum of the upper triangle (each pair once).
    pub fn total(&self) -> f64 {
        (0..self.n)
            .flat_map(|i| (i + 1..self.n).map(move |j| (i, j)))
            .map(|(i, j)| self.get(i, j))
            .sum()
    }

    /// Reads a matrix file; errors name the file, line and column.
    pub fn read(path: &Path) -> Result<CommMatrix, MatrixError> {
        let file = path.display().to_string();
        let text = inputfile::read_text(path).map_err(|e| MatrixError::File {
            file: file.clone(),
            reason: e.to_string(),
        })?;
        CommMatrix::parse(&text, &file)
    }

    /// Parses the CSV text; `name` is used in errors.
    pub fn parse(text: &str, name: &str) -> Result<CommMatrix, MatrixError> {
        let cell = |line: usize, column: usize, reason: String| MatrixError::Cell {
            file: name.to_string(),
            line,
            column,
            reason,
        };
        let lines: Vec<(usize, &str)> = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty())
            .collect();
        if lines.is_empty() {
            return Err(MatrixError::File {
                file: name.into(),
                reason: "empty matrix".into(),
            });
        }
        let n = lines.len();
        let mut m = CommMatrix::zeros(n);
        for (row, (line, text)) in lines.iter().enumerate() {
            let cells: Vec<&str> = text.split(',').map(str::trim).collect();
            for (col, c) in cells.iter().enumerate() {
                let v: f64 = c.parse().map_err(|_| {
                    let what = if row == 0 && c.chars().any(char::is_alphabetic) {
                        format!("'{c}' is not a number (header rows are not allowed)")
                    } else {
                        format!("'{c}' is not a number")
                    };
                    cell(*line, col + 1, what)
                })?;
                if !v.is_finite() {
                    return Err(cell(*line, col + 1, format!("'{c}' is not finite")));
                }
                if v < 0.0 {
                    return Err(cell(*line, col + 1, format!("negative value {c}")));
                }
                if col < n {
                    m.data[row * n + col] = v;
                }
            }
            if cells.len() != n {
                return Err(cell(
                    *line,
                    cells.len().min(n) + 1,
                    format!(
                        "row has {} values, the matrix has {n} rows (must be square)",
                        cells.len()
                    ),
                ));
            }
        }
        // Costs multiply the cells by level costs (at most 1e6) and sum them: beyond this the
        // sum could overflow to infinity and compare wrongly, so such a matrix is refused.
        // Every cell, both triangles: a matrix may carry its traffic in either.
        let total: f64 = m.data.iter().sum();
        if total > MAX_TOTAL {
            return Err(MatrixError::File {
                file: name.to_string(),
                reason: format!(
                    "the cells sum to {total:e}, beyond {MAX_TOTAL:e}: costs would overflow; scale the matrix down"
                ),
            });
        }
        Ok(m)
    }

    /// Whether m\[i\]\[j\] equals m\[j\]\[i\] everywhere (within a relative 1e-9).
    pub fn is_symmetric(&self) -> bool {
        (0..self.n).all(|i| {
            (i + 1..self.n).all(|j| {
                let (a, b) = (self.get(i, j), self.get(j, i));
                (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
            })
        })
    }

    /// The CSV text: whole numbers without a fractional part, others with up to 6 decimals.
    pub fn to_csv(&self) -> String {
        let mut out = String::with_capacity(self.n * self.n * 4);
        for i in 0..self.n {
            for j in 0..self.n {
                if j > 0 {
                    out.push(',');
                }
                let v = self.get(i, j);
                if v.fract() == 0.0 && v.abs() < 1e15 {
                    let _ = write!(out, "{}", v as i64);
                } else {
                    let _ = write!(out, "{}", (v * 1e6).round() / 1e6);
                }
            }
            out.push('\n');
        }
        out
    }

    /// Rows as nested vectors (the JSON form).
    pub fn to_rows(&self) -> Vec<Vec<f64>> {
        (0..self.n).map(|i| self.row(i).to_vec()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_shared_format() {
        let m = CommMatrix::parse("0,5,1\n5,0,2\n1,2,0\n", "t").unwrap();
        assert_eq!(m.n(), 3);
        assert_eq!(m.get(0, 1), 5.0);
        assert_eq!(m.total(), 8.0);
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = |t: &str| CommMatrix::parse(t, "f.csv").unwrap_err().to_string();
        assert_eq!(e("0,1\n1,x\n"), "f.csv:2:2: 'x' is not a number");
        assert_eq!(
            e("a,b\n0,1\n"),
            "f.csv:1:1: 'a' is not a number (header rows are not allowed)"
        );
        assert_eq!(e("0,1\n-1,0\n"), "f.csv:2:1: negative value -1");
        assert_eq!(e("0,NaN\n1,0\n"), "f.csv:1:2: 'NaN' is not finite");
        assert!(e("0,1,2\n1,0,2\n").contains("must be square"));
        assert!(e("0,1\n1\n").starts_with("f.csv:2:2:"));
        assert_eq!(e("\n\n"), "f.csv: empty matrix");
        assert!(e("0,1.7e308\n1.7e308,0\n").contains("costs would overflow"));
        // Traffic in the lower triangle alone counts as well.
        assert!(e("0,0\n1.7e308,0\n").contains("costs would overflow"));
    }

    #[test]
    fn reads_every_shared_matrix() {
        let dir = std::env::var("HUDDLE_SHARED")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared").into());
        let dir = Path::new(&dir).join("data/matrices");
        let mut count = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let m = CommMatrix::read(&p).unwrap();
            assert!(m.n() == 16 || m.n() == 32 || m.n() == 25, "{}", p.display());
            count += 1;
        }
        assert_eq!(count, 18);
    }

    proptest! {
        #[test]
        fn csv_round_trips(n in 1usize..12, seed in any::<u64>()) {
            let mut m = CommMatrix::zeros(n);
            let mut x = seed | 1;
            for i in 0..n { for j in 0..n {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                m.set(i, j, (x % 1000) as f64 / if x % 3 == 0 { 4.0 } else { 1.0 });
            }}
            let back = CommMatrix::parse(&m.to_csv(), "rt").unwrap();
            prop_assert_eq!(back, m);
        }
    }
}

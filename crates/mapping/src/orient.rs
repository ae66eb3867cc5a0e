//! Matrices stored with their columns reversed.
//!
//! The NAS matrices in shared/data/matrices hold the traffic between tasks i and n-1-j at
//! row i, column j (their zero self-traffic lies on the anti-diagonal, and they are symmetric
//! only once the columns are flipped back). Mapping such a file as it stands pairs the wrong
//! tasks, so callers can detect the layout and flip it.

use matrix::CommMatrix;
use serde::Serialize;

/// The column layout [`orient`] found in a matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Orientation {
    /// Column j is task j; the matrix was used as it stands.
    AsIs,
    /// Column j held task n-1-j; [`orient`] flipped it back.
    ReversedColumns,
}

/// Detects reversed columns: the anti-diagonal (self traffic when reversed) carries less
/// than a hundredth of the main diagonal's traffic, and flipping makes the matrix at least
/// ten times more symmetric. Returns the matrix in the as-is orientation and what was found.
pub fn orient(m: &CommMatrix) -> (CommMatrix, Orientation) {
    let n = m.n();
    if n < 3 {
        return (m.clone(), Orientation::AsIs);
    }
    let diag: f64 = (0..n).map(|i| m.get(i, i)).sum();
    let anti: f64 = (0..n).map(|i| m.get(i, n - 1 - i)).sum();
    let mut asym = 0.0;
    let mut asym_flipped = 0.0;
    for i in 0..n {
        for j in 0..n {
            asym += (m.get(i, j) - m.get(j, i)).abs();
            asym_flipped += (m.get(i, n - 1 - j) - m.get(j, n - 1 - i)).abs();
        }
    }
    if diag > 0.0 && anti * 100.0 <= diag && asym_flipped * 10.0 <= asym {
        (flip(m), Orientation::ReversedColumns)
    } else {
        (m.clone(), Orientation::AsIs)
    }
}

/// The matrix with column j moved to n-1-j.
pub fn flip(m: &CommMatrix) -> CommMatrix {
    let n = m.n();
    let mut out = CommMatrix::zeros(n);
    for i in 0..n {
        for j in 0..n {
            out.set(i, j, m.get(i, n - 1 - j));
        }
    }
    out
}

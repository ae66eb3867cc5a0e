//! The communication graph: the symmetrized matrix in compressed sparse rows, so that
//! algorithms touch only the pairs that talk.

use matrix::CommMatrix;

/// Undirected weighted graph over tasks; w(i, j) = (M\[i\]\[j\] + M\[j\]\[i\]) / 2, no self loops.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    xadj: Vec<usize>,
    adj: Vec<usize>,
    wgt: Vec<f64>,
}

impl Graph {
    /// The symmetrised matrix: an edge for each pair i < j with w(i, j) > 0; the diagonal
    /// is ignored.
    pub fn from_matrix(m: &CommMatrix) -> Graph {
        let n = m.n();
        let mut edges = Vec::new();
        for i in 0..n {
            let row = m.row(i);
            for (j, &v) in row.iter().enumerate().skip(i + 1) {
                let w = (v + m.get(j, i)) / 2.0;
                if w > 0.0 {
                    edges.push((i, j, w));
                }
            }
        }
        Graph::from_edges(n, &edges)
    }

    /// From undirected edges (i, j, w); repeated pairs add up, self loops and non-positive
    /// or non-finite weights are dropped, and indexes must be < n.
    pub fn from_edges(n: usize, edges: &[(usize, usize, f64)]) -> Graph {
        let mut pairs: Vec<(usize, usize, f64)> = Vec::with_capacity(edges.len() * 2);
        for &(i, j, w) in edges {
            if i != j && i < n && j < n && w.is_finite() && w > 0.0 {
                pairs.push((i, j, w));
                pairs.push((j, i, w));
            }
        }
        pairs.sort_unstable_by_key(|a| (a.0, a.1));
        let mut xadj = vec![0; n + 1];
        let mut adj = Vec::with_capacity(pairs.len());
        let mut wgt: Vec<f64> = Vec::with_capacity(pairs.len());
        let mut last = None;
        for (i, j, w) in pairs {
            if last == Some((i, j)) {
                if let Some(x) = wgt.last_mut() {
                    *x += w;
                }
                continue;
            }
            last = Some((i, j));
            xadj[i + 1] += 1;
            adj.push(j);
            wgt.push(w);
        }
        for i in 0..n {
            xadj[i + 1] += xadj[i];
        }
        Graph { xadj, adj, wgt }
    }

    /// Number of tasks (vertices), with or without edges; 0 for the default graph.
    pub fn n(&self) -> usize {
        self.xadj.len().saturating_sub(1)
    }

    /// Neighbours of `i` with the weight of each edge.
    pub fn neighbors(&self, i: usize) -> impl Iterator<Item = (usize, f64)> + '_ {
        let r = self.xadj[i]..self.xadj[i + 1];
        self.adj[r.clone()]
            .iter()
            .copied()
            .zip(self.wgt[r].iter().copied())
    }

    /// Number of distinct neighbours of `i`; panics if i >= `n()`.
    pub fn degree(&self, i: usize) -> usize {
        self.xadj[i + 1] - self.xadj[i]
    }

    /// Total weight of the edges at `i`.
    pub fn strength(&self, i: usize) -> f64 {
        self.wgt[self.xadj[i]..self.xadj[i + 1]].iter().sum()
    }

    /// Every edge once, i < j.
    pub fn edges(&self) -> impl Iterator<Item = (usize, usize, f64)> + '_ {
        (0..self.n()).flat_map(move |i| {
            self.neighbors(i)
                .filter(move |&(j, _)| j > i)
                .map(move |(j, w)| (i, j, w))
        })
    }

    /// Number of undirected edges, each pair once.
    pub fn num_edges(&self) -> usize {
        self.adj.len() / 2
    }
}

impl Graph {
    /// The graph induced by `tasks`, renumbered 0..tasks.len() in that order.
    pub fn subgraph(&self, tasks: &[usize]) -> Graph {
        let mut local = vec![usize::MAX; self.n()];
        for (k, &t) in tasks.iter().enumerate() {
            local[t] = k;
        }
        let mut edges = Vec::new();
        for (k, &t) in tasks.iter().enumerate() {
            for (u, w) in self.neighbors(t) {
                let l = local[u];
                if l != usize::MAX && k < l {
                    edges.push((k, l, w));
                }
            }
        }
        Graph::from_edges(tasks.len(), &edges)
    }
}

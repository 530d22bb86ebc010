//! Locally linear embedding as localization: the weights W are a discrete local kernel,
//! hollow (w_ii = 0), supported on the k nearest neighbours and with rows summing to one,
//! that reconstructs every point from its neighbours:
//!
//! ```text
//! w_i = argmin ‖x_i − Σ_j w_ij x_j‖²  subject to  Σ_j w_ij = 1.
//! ```
//!
//! With C the k×d matrix of neighbour offsets x_j − x_i and G = C Cᵀ (the local Gram
//! matrix), the solution is w ∝ G⁻¹ 1. When k > d, G is singular and is regularised as
//! G + R·I with R = reg · tr(G) (or `reg` when the trace is zero), as in scikit-learn.

use crate::algorithms::local_poly::solve_in_place;
use crate::engine::lanes;
use crate::error::{LocalizationError, Result};
use crate::real::Real;
use crate::neighbors::{Algorithm, Index};
use crate::parallel::Monitor;
use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

/// Barycentric weights of each query row over the listed rows of `x` (`nbrs`: m × k).
pub fn barycenter_weights<F: Real>(queries: ArrayView2<F>, x: ArrayView2<F>, nbrs: &[usize], k: usize, reg: f64) -> Result<Array2<f64>> {
    let (m, d) = queries.dim();
    if x.ncols() != d {
        return Err(LocalizationError::shape("X", format!("{d} features"), x.ncols()));
    }
    if k == 0 || nbrs.len() != m * k {
        return Err(LocalizationError::shape("neighbors", format!("{m} × {k}"), nbrs.len()));
    }
    if nbrs.iter().any(|&j| j >= x.nrows()) {
        return Err(LocalizationError::param("neighbors", format!("indices must be in [0, {})", x.nrows())));
    }
    if !(reg >= 0.0) || !reg.is_finite() {
        return Err(LocalizationError::param("reg", format!("must be finite and non-negative, got {reg}")));
    }
    let rows: Vec<Result<Vec<f64>>> = (0..m)
        .into_par_iter()
        // Scratch per task, not per point: the offsets C (k × d) and the Gram matrix.
        .map_init(
            || (vec![0.0f64; k * d], vec![0.0f64; k * k]),
            |(c, g), i| {
                let nb = &nbrs[i * k..(i + 1) * k];
                let qi = queries.row(i);
                // C row-major (k × d) in f64, then G = C Cᵀ.
                for (a, &j) in nb.iter().enumerate() {
                    for (dst, (&xv, &qv)) in c[a * d..(a + 1) * d].iter_mut().zip(x.row(j).iter().zip(qi.iter())) {
                        *dst = xv.f64() - qv.f64();
                    }
                }
                gram(c, k, d, g);
                let trace: f64 = (0..k).map(|a| g[a * k + a]).sum();
                let r = if trace > 0.0 { reg * trace } else { reg };
                for a in 0..k {
                    g[a * k + a] += r;
                }
                let mut w = vec![1.0f64; k];
                if !solve_in_place(g, &mut w, k, 1) {
                    return Err(LocalizationError::param(
                        "reg",
                        format!("the local Gram system of sample {i} is singular (its neighbours coincide with it); use reg > 0"),
                    ));
                }
                let s: f64 = w.iter().sum();
                if !(s.abs() > 0.0) || !s.is_finite() {
                    return Err(LocalizationError::param("reg", format!("the weights of sample {i} do not normalise; increase reg")));
                }
                w.iter_mut().for_each(|v| *v /= s);
                Ok(w)
            },
        )
        .collect();
    let mut out = Array2::<f64>::zeros((m, k));
    for (i, r) in rows.into_iter().enumerate() {
        out.row_mut(i).assign(&ndarray::ArrayView1::from(&r?));
    }
    Ok(out)
}

/// g = C Cᵀ for the k × d row-major offsets `c`: the k(k + 1)/2 dot products are most of
/// the weights' cost in high dimensions, so they run in interleaved lanes (a plain sum is one
/// serial chain), fused on CPUs with FMA. The order is fixed per CPU: the same weights for any
/// thread count.
fn gram(c: &[f64], k: usize, d: usize, g: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports the features the function is compiled for.
            return unsafe { gram_avx2(c, k, d, g) };
        }
    }
    gram_with::<false>(c, k, d, g)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gram_avx2(c: &[f64], k: usize, d: usize, g: &mut [f64]) {
    gram_with::<true>(c, k, d, g)
}

#[inline(always)]
fn gram_with<const FMA: bool>(c: &[f64], k: usize, d: usize, g: &mut [f64]) {
    for a in 0..k {
        for b in a..k {
            let v = lanes::dot::<f64, FMA>(&c[a * d..(a + 1) * d], &c[b * d..(b + 1) * d]);
            g[a * k + b] = v;
            g[b * k + a] = v;
        }
    }
}

/// The k nearest neighbours of each query among the rows of `x` (ascending, ties by index)
/// and their barycentric weights. With `queries = None` the queries are the rows of `x` and
/// each row's own index is left out (the hollow kernel).
pub fn neighbors_and_weights<F: Real>(x: ArrayView2<F>, queries: Option<ArrayView2<F>>, k: usize, reg: f64, algorithm: Algorithm, mon: &Monitor) -> Result<(Vec<usize>, Array2<f64>)> {
    let n = x.nrows();
    let hollow = queries.is_none();
    if k == 0 || k + hollow as usize > n {
        return Err(LocalizationError::param(
            "n_neighbors",
            format!("must be in [1, {}] for {n} samples, got {k}", n - hollow as usize),
        ));
    }
    let index = Index::build(x, algorithm, 30, mon)?;
    let q = queries.unwrap_or(x);
    let kk = k + hollow as usize;
    let found = index.knn(q, kk, mon)?;
    let nbrs: Vec<usize> = found
        .indices
        .chunks_exact(kk)
        .enumerate()
        .flat_map(|(i, row)| {
            // Leave out the point itself; if duplicates pushed it off the list, the farthest.
            let skip = if hollow { row.iter().position(|&j| j == i).unwrap_or(kk - 1) } else { kk };
            row.iter().enumerate().filter(move |&(t, _)| t != skip).map(|(_, &j)| j)
        })
        .collect();
    let w = barycenter_weights(q, x, &nbrs, k, reg)?;
    Ok((nbrs, w))
}

/// Number of weakly connected components of the graph i → nbrs[i·k..(i+1)·k].
fn components(n: usize, nbrs: &[usize], k: usize) -> usize {
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut count = n;
    for (i, row) in nbrs.chunks_exact(k).enumerate() {
        for &j in row {
            let (a, b) = (root(&mut parent, i), root(&mut parent, j));
            if a != b {
                parent[a.max(b)] = a.min(b);
                count -= 1;
            }
        }
    }
    count
}

/// x = M⁺b for M = AᵀA, A = I − W: the operator whose top eigenvectors are the bottom
/// ones of M (the LLE embedding), the constant null vector excluded.
///
/// A is singular (its rows sum to zero), so it is "grounded": Ã = A without its first row
/// and column is factorised once (sparse LU with partial pivoting and a COLAMD column
/// order, k + 1 entries per row; it is nonsingular when the neighbour graph is connected),
/// and Aᵀz = b, Ax = y are solved with z₀ = 0 and x₀ = 0, exact for consistent right-hand
/// sides. Between the two solves z is projected off A's left null vector u (so that it lies
/// in A's range), and x off the constant vector: the result is the pseudo-inverse, with no
/// shift and no amplified null direction.
///
/// The factorisation runs on one thread: a supernodal LU of this size (10⁴ rows, a few
/// million entries in L + U) was measured slower on two threads than on one.
pub struct GroundedInverse {
    lu: faer::sparse::linalg::solvers::Lu<usize, f64>,
    /// A's left null vector, unit norm.
    u: Vec<f64>,
}

impl GroundedInverse {
    /// From the hollow weights (`nbrs`, `weights`: n × k, row i over the listed columns).
    /// Polls `mon` while the factorisation runs: on a stop it returns `Interrupted` at once
    /// and leaves the factorisation to finish, and be dropped, on its own thread (it has no
    /// way to stop midway; on 60,000 Fashion-MNIST images it takes ~24 s).
    pub fn new(nbrs: &[usize], weights: &[f64], k: usize, mon: &Monitor) -> Result<Self> {
        use faer::sparse::{SparseColMat, SymbolicSparseColMat};
        let n = if k == 0 { 0 } else { nbrs.len() / k };
        if k == 0 || nbrs.len() != n * k || weights.len() != n * k {
            return Err(LocalizationError::shape("weights", "n × k neighbours and weights", weights.len()));
        }
        if n < 2 {
            return Err(LocalizationError::param("weights", "at least 2 samples are required"));
        }
        if nbrs.iter().any(|&j| j >= n) || weights.iter().any(|w| !w.is_finite()) {
            return Err(LocalizationError::param("weights", format!("indices must be in [0, {n}) and weights finite")));
        }
        let mut sorted = Vec::with_capacity(k);
        for row in nbrs.chunks_exact(k) {
            sorted.clear();
            sorted.extend_from_slice(row);
            sorted.sort_unstable();
            if sorted.windows(2).any(|p| p[0] == p[1]) {
                return Err(LocalizationError::param("neighbors", "a row lists the same neighbour twice"));
            }
        }
        let singular = || LocalizationError::param("n_neighbors", "the neighbour graph is disconnected (I − W is singular beyond its constant null vector): increase n_neighbors or use eigen_solver='dense'");
        // A disconnected graph leaves Ã only nearly singular in floating point: the LU would
        // not fail, and the solves would return a wrong subspace.
        if components(n, nbrs, k) > 1 {
            return Err(singular());
        }
        // Ã in compressed columns, built row by row so that every column's rows come in
        // increasing order. Row 0's weights give the right-hand side of u's system:
        // Ãᵀu' = −A[0, 1:]ᵀ.
        let rows = || nbrs.chunks_exact(k).zip(weights.chunks_exact(k)).enumerate().skip(1);
        let mut ptr = vec![0usize; n];
        for (i, (row, _)) in rows() {
            ptr[i] += 1;
            row.iter().filter(|&&j| j != 0 && j != i).for_each(|&j| ptr[j] += 1);
        }
        for c in 1..n {
            ptr[c] += ptr[c - 1];
        }
        // ptr[c] is now the end of column c of A, column c − 1 of Ã: with ptr[0] = 0, ptr is
        // Ã's column pointer array, and ptr[c] the start of Ã's column c.
        let mut next = ptr[..n - 1].to_vec();
        let (mut row_idx, mut values) = (vec![0usize; ptr[n - 1]], vec![0.0f64; ptr[n - 1]]);
        let mut put = |col: usize, row: usize, v: f64| {
            row_idx[next[col]] = row;
            values[next[col]] = v;
            next[col] += 1;
        };
        for (i, (row, w)) in rows() {
            // A neighbour equal to the row itself (never from the index) folds into the diagonal.
            let own: f64 = row.iter().zip(w).filter(|&(&j, _)| j == i).map(|(_, &v)| v).sum();
            put(i - 1, i - 1, 1.0 - own);
            for (&j, &v) in row.iter().zip(w).filter(|&(&j, _)| j != 0 && j != i) {
                put(j - 1, i - 1, -v);
            }
        }
        let a = SparseColMat::new(SymbolicSparseColMat::new_checked(n - 1, n - 1, ptr, None, row_idx), values);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("localization-lu".into())
            .spawn(move || {
                // The receiver is gone only when the caller stopped waiting.
                let _ = tx.send(a.sp_lu());
            })
            .map_err(|e| LocalizationError::ThreadPool { threads: 1, reason: e.to_string() })?;
        let lu = loop {
            match rx.recv_timeout(crate::parallel::TICK) {
                Ok(lu) => break lu.map_err(|_| singular())?,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if mon.stopped() => return Err(LocalizationError::Interrupted),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Err(LocalizationError::param("weights", "the sparse LU of I − W failed")),
            }
        };
        let mut rhs = faer::Mat::<f64>::zeros(n - 1, 1);
        nbrs[..k].iter().zip(&weights[..k]).filter(|&(&j, _)| j != 0).for_each(|(&j, &v)| rhs[(j - 1, 0)] += v);
        faer::linalg::solvers::Solve::solve_transpose_in_place(&lu, rhs.as_mut());
        let mut u: Vec<f64> = std::iter::once(1.0).chain((0..n - 1).map(|i| rhs[(i, 0)])).collect();
        let norm = u.iter().map(|t| t * t).sum::<f64>().sqrt();
        if !norm.is_finite() {
            return Err(singular());
        }
        u.iter_mut().for_each(|t| *t /= norm);
        Ok(GroundedInverse { lu, u })
    }

    pub fn n(&self) -> usize {
        self.u.len()
    }

    /// M⁺b for each column of `b` (n × c), in place. Errors if the result is not finite (a
    /// numerically singular Ã: a disconnected graph that the factorisation did not flag).
    pub fn apply(&self, mut b: ndarray::ArrayViewMut2<f64>) -> Result<()> {
        use faer::linalg::solvers::Solve;
        let n = self.n();
        if b.nrows() != n {
            return Err(LocalizationError::shape("b", format!("{n} rows"), b.nrows()));
        }
        let centre = |col: &mut faer::Mat<f64>| {
            for c in 0..col.ncols() {
                let mean = (0..n).map(|i| col[(i, c)]).sum::<f64>() / n as f64;
                (0..n).for_each(|i| col[(i, c)] -= mean);
            }
        };
        let mut y = faer::Mat::from_fn(n, b.ncols(), |i, c| b[[i, c]]);
        centre(&mut y);
        y.row_mut(0).fill(0.0);
        self.lu.solve_transpose_in_place(y.as_mut().subrows_mut(1, n - 1));
        for c in 0..y.ncols() {
            let along: f64 = (0..n).map(|i| self.u[i] * y[(i, c)]).sum();
            (0..n).for_each(|i| y[(i, c)] -= along * self.u[i]);
        }
        y.row_mut(0).fill(0.0);
        self.lu.solve_in_place(y.as_mut().subrows_mut(1, n - 1));
        centre(&mut y);
        if y.col_iter().any(|col| col.iter().any(|v| !v.is_finite())) {
            return Err(LocalizationError::param("n_neighbors", "the neighbour graph is disconnected (I − W is numerically singular): increase n_neighbors or use eigen_solver='dense'"));
        }
        b.indexed_iter_mut().for_each(|((i, c), v)| *v = y[(i, c)]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    #[test]
    fn weights_sum_to_one_and_reconstruct_points_in_the_span() {
        let mut rng = StdRng::seed_from_u64(5);
        // Points on a 2-D plane in 4-D: with k = 3 neighbours (k > intrinsic dim) and a
        // tiny reg, each point is an affine combination of its neighbours.
        let uv = Array2::from_shape_fn((200, 2), |_| rng.random::<f64>());
        let a = ndarray::arr2(&[[1.0, 0.5, -0.3, 2.0], [0.2, -1.0, 0.7, 0.1]]);
        let x = uv.dot(&a);
        let (nb, w) = neighbors_and_weights(x.view(), None, 5, 1e-9, Algorithm::Auto, &Monitor::default()).unwrap();
        for i in 0..200 {
            assert!((w.row(i).sum() - 1.0).abs() < 1e-12);
            assert!(!nb[i * 5..(i + 1) * 5].contains(&i));
            for c in 0..4 {
                let rec: f64 = (0..5).map(|t| w[(i, t)] * x[(nb[i * 5 + t], c)]).sum();
                assert!((rec - x[(i, c)]).abs() < 1e-6, "{i} {c} {rec} {}", x[(i, c)]);
            }
        }
        assert!(neighbors_and_weights(x.view(), None, 200, 1e-3, Algorithm::Auto, &Monitor::default()).is_err());
        assert!(neighbors_and_weights(x.view(), None, 5, -1.0, Algorithm::Auto, &Monitor::default()).is_err());
        // A point whose neighbours all coincide with it: singular without regularisation.
        let same = Array2::<f64>::zeros((4, 2));
        assert!(neighbors_and_weights(same.view(), None, 2, 0.0, Algorithm::Auto, &Monitor::default()).is_err());
        assert!(neighbors_and_weights(same.view(), None, 2, 1e-3, Algorithm::Auto, &Monitor::default()).is_ok());
    }

    /// M = (I − W)ᵀ(I − W) as a dense matrix.
    fn dense_m(nb: &[usize], w: &Array2<f64>, n: usize) -> Array2<f64> {
        let k = w.ncols();
        let mut a = Array2::<f64>::eye(n);
        for i in 0..n {
            for t in 0..k {
                a[[i, nb[i * k + t]]] -= w[[i, t]];
            }
        }
        a.t().dot(&a)
    }

    #[test]
    fn grounded_inverse_is_the_pseudo_inverse_of_m() {
        let mut rng = StdRng::seed_from_u64(3);
        let n = 120;
        let x = Array2::from_shape_fn((n, 3), |_| rng.random::<f64>());
        let (nb, w) = neighbors_and_weights(x.view(), None, 6, 1e-3, Algorithm::Auto, &Monitor::default()).unwrap();
        let inv = GroundedInverse::new(&nb, w.as_slice().unwrap(), 6, &Monitor::default()).unwrap();
        let m = dense_m(&nb, &w, n);
        let b = Array2::from_shape_fn((n, 2), |_| rng.random::<f64>() - 0.5);
        let mut x1 = b.clone();
        inv.apply(x1.view_mut()).unwrap();
        // M M⁺ b is b without its constant part, and M⁺b has none. M's condition number
        // here is ~2·10⁸ (its rounding reaches M M⁺ b at ~10⁻¹⁰ of b); a wrong projection
        // would be off by O(1).
        let centred = &b - &b.mean_axis(ndarray::Axis(0)).unwrap();
        let back = m.dot(&x1);
        let scale = centred.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        assert!(back.iter().zip(&centred).all(|(p, q)| (p - q).abs() < 1e-8 * scale));
        assert!(x1.mean_axis(ndarray::Axis(0)).unwrap().iter().all(|v| v.abs() < 1e-9));
        // Columns are independent: one column alone gives the same numbers.
        let mut one = b.column(1).to_owned().insert_axis(ndarray::Axis(1));
        inv.apply(one.view_mut()).unwrap();
        assert!(one.column(0).iter().zip(x1.column(1)).all(|(p, q)| (p - q).abs() <= 1e-12 * q.abs().max(1.0)));
        assert!(inv.apply(Array2::<f64>::zeros((n + 1, 1)).view_mut()).is_err());
    }

    #[test]
    fn grounded_inverse_refuses_a_disconnected_graph_and_bad_weights() {
        let mut rng = StdRng::seed_from_u64(4);
        let x = Array2::from_shape_fn((80, 2), |(i, _)| rng.random::<f64>() + if i < 40 { 0.0 } else { 100.0 });
        let (nb, w) = neighbors_and_weights(x.view(), None, 5, 1e-3, Algorithm::Auto, &Monitor::default()).unwrap();
        let err = GroundedInverse::new(&nb, w.as_slice().unwrap(), 5, &Monitor::default()).err().unwrap();
        assert_eq!(err.parameter(), Some("n_neighbors"));
        assert!(GroundedInverse::new(&[1, 0], &[1.0, f64::NAN], 1, &Monitor::default()).is_err());
        assert!(GroundedInverse::new(&[1, 5], &[1.0, 1.0], 1, &Monitor::default()).is_err());
        assert!(GroundedInverse::new(&[0], &[1.0], 1, &Monitor::default()).is_err());
        assert!(GroundedInverse::new(&[1, 0], &[1.0], 1, &Monitor::default()).is_err());
        assert!(GroundedInverse::new(&[1, 1, 0, 2, 0, 1], &[0.5; 6], 2, &Monitor::default()).is_err());
    }
}

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
}

//! MedoidShift (SPEC §4; Sheikh, Khan & Kanade 2007): every sample jumps to the sample
//! minimising its local weighted cost
//!
//! ```text
//! next(i) = argmin_j Σ_k K(x_i, x_k) · D(x_j, x_k)²,
//! ```
//!
//! and the map i → next(i) is a forest whose roots are the modes (see `forest`).
//!
//! Three computations live here; the Euclidean dense case needs none of them, because for
//! squared Euclidean D the cost is S₀·‖x_j − m(x_i)‖² + const (SPEC §9 identity 10): it is
//! one engine local mean plus a nearest-neighbour query, done by the caller.
//! * `dense_step`: any precomputed D. Inherently dense: O(N³) time (a blocked matrix product
//!   of the kernel rows with D∘D) and one extra N×N array (D∘D), allocated fallibly.
//! * `knn_step_euclidean` / `knn_step_precomputed`: the kNN-sparse variant, where both the
//!   sum over k and the candidates j are restricted to N(i), the k nearest samples of i
//!   (i itself included): O(N·k·d) and O(N·k²) time, nothing N×N.
//!
//! Ties in the arg-min go to the smallest index (so duplicated samples merge instead of
//! each staying a root), and results do not depend on the thread count. The arg-min is
//! invariant to scaling the distances with the bandwidth, and the weights, by a power of two:
//! extreme ones are brought into the floating range's middle first (`distance::Scale`), so
//! that squared distances and weighted costs neither overflow nor underflow.

use crate::distance::Scale;
use crate::checked::{Positive, Weights};
use crate::error::{LocalizationError, Result};
use crate::kernel::{dispatch_profile, Profile, ProfileFn};
use crate::real::Real;
use crate::memory;
use crate::parallel::Monitor;
use ndarray::{linalg::general_mat_mul, s, ArrayView1, ArrayView2};
use rayon::prelude::*;

/// log k(u) in f64 (exact for the exponential profiles, so tiny bandwidths do not underflow).
fn log_kernel(profile: Profile, u: f64) -> f64 {
    dispatch_profile!(profile, P, if profile.is_exponential() { P::log_k(u * u) } else { P::k(u * u).ln() })
}

/// Kernel weights of one row of distances, divided by their maximum (the arg-min is
/// invariant to a positive factor per row), times the sample weight of each column
/// (`sw(k)`). All zero if no distance is inside the support.
fn row_weights(dist: impl Iterator<Item = f64>, profile: Profile, h: f64, sw: impl Fn(usize) -> f64, out: &mut Vec<f64>) {
    out.clear();
    out.extend(dist.map(|d| log_kernel(profile, d / h)));
    let top = out.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let shift = if top.is_finite() { top } else { 0.0 };
    out.iter_mut().enumerate().for_each(|(k, v)| *v = (*v - shift).exp() * sw(k));
}

fn check_weights(w: Option<&[f64]>, n: usize) -> Result<()> {
    Weights::optional(w.map(ArrayView1::from), n).map(drop)
}

/// Candidate order: smaller cost, then the smaller index.
#[inline]
fn better(cost: f64, j: usize, best: (f64, usize)) -> bool {
    cost < best.0 || (cost == best.0 && j < best.1)
}

fn check_bandwidth(h: f64) -> Result<()> {
    Positive::new("bandwidth", h).map(drop)
}

/// Sample weights scaled into the comfortable range (None when they already are).
fn scaled_weights(w: Option<&[f64]>) -> Option<Vec<f64>> {
    let w = w?;
    let s = Scale::of_values(w.iter().copied());
    (!s.is_one()).then(|| w.iter().map(|&v| s.down(v)).collect())
}

// Rows of kernel weights per product: large enough that each packed panel of D∘D is reused.
const ROW_BLOCK: usize = 256;
// Columns per product, so that Ctrl-C is seen between products even for large N.
const COL_BLOCK: usize = 256;

/// next(i) for a precomputed N×N distance matrix (any metric; D[j, k] is read as D(x_j, x_k)).
/// `weights` multiply K(x_i, x_k) (sample weights).
pub fn dense_step<F: Real>(d: ArrayView2<F>, profile: Profile, h: f64, weights: Option<&[f64]>, mon: &Monitor) -> Result<Vec<usize>> {
    let n = d.nrows();
    if n == 0 {
        return Err(LocalizationError::EmptyInput { name: "X" });
    }
    if d.ncols() != n {
        return Err(LocalizationError::shape("X", "a square distance matrix", format!("{}×{}", n, d.ncols())));
    }
    check_bandwidth(h)?;
    check_weights(weights, n)?;
    let lengths = Scale::of_arrays(&[d]);
    let d = lengths.down_array(d)?;
    let d = d.view();
    let h = lengths.down(h);
    let sw = scaled_weights(weights);
    let weights = sw.as_deref().or(weights);
    // B[k, j] = D[j, k]², stored row-major so the product packs it with sequential reads.
    let mut d2t = memory::try_array("squared distance matrix", (n, n), F::zero())?;
    for (j, row) in d.rows().into_iter().enumerate() {
        if j % ROW_BLOCK == 0 {
            mon.check()?;
        }
        for (k, &v) in row.iter().enumerate() {
            d2t[(k, j)] = v * v;
        }
    }
    let blocks: Vec<usize> = (0..n).step_by(ROW_BLOCK).collect();
    mon.set_progress(0, n);
    let next: Vec<Vec<usize>> = blocks
        .into_par_iter()
        .map(|b0| {
            let b1 = (b0 + ROW_BLOCK).min(n);
            let mut kb = memory::try_array("kernel rows", (b1 - b0, n), F::zero())?;
            let mut w = Vec::with_capacity(n);
            for (r, mut row) in kb.rows_mut().into_iter().enumerate() {
                row_weights(d.row(b0 + r).iter().map(|v| v.f64()), profile, h, |k| weights.map_or(1.0, |sw| sw[k]), &mut w);
                row.iter_mut().zip(&w).for_each(|(a, &b)| *a = F::of(b));
            }
            // cost[i, j] = Σ_k K[i, k] · D[j, k]²: products per block of rows and of columns.
            let mut cost = memory::try_array("costs", (b1 - b0, n), F::zero())?;
            for c0 in (0..n).step_by(COL_BLOCK) {
                mon.check()?;
                let c1 = (c0 + COL_BLOCK).min(n);
                general_mat_mul(F::one(), &kb, &d2t.slice(s![.., c0..c1]), F::zero(), &mut cost.slice_mut(s![.., c0..c1]));
            }
            mon.advance(b1 - b0);
            Ok((b0..b1)
                .map(|i| {
                    let row = cost.row(i - b0);
                    let mut best = (row[i].f64(), i);
                    for (j, &c) in row.iter().enumerate() {
                        if better(c.f64(), j, best) {
                            best = (c.f64(), j);
                        }
                    }
                    best.1
                })
                .collect())
        })
        .collect::<Result<_>>()?;
    Ok(next.concat())
}

fn check_neighbors(n: usize, idx: &[usize], k: usize) -> Result<()> {
    if k == 0 || idx.len() != n * k {
        return Err(LocalizationError::shape("neighbors", format!("{n}×k indices with k ≥ 1"), idx.len()));
    }
    if idx.iter().any(|&j| j >= n) {
        return Err(LocalizationError::param("neighbors", "index out of range"));
    }
    Ok(())
}

/// kNN-sparse next(i) for Euclidean data: N(i) = row i of `idx` (k indices, i included),
/// `dist` the matching distances. By the identity of the dense case restricted to N(i),
/// next(i) = argmin_{j ∈ N(i)} ‖x_j − m̃_i‖², m̃_i the kernel-weighted mean over N(i).
#[allow(clippy::too_many_arguments)]
pub fn knn_step_euclidean<F: Real>(
    x: ArrayView2<F>, idx: &[usize], dist: &[F], k: usize, profile: Profile, h: f64, weights: Option<&[f64]>, mon: &Monitor,
) -> Result<Vec<usize>> {
    let (n, d) = x.dim();
    check_neighbors(n, idx, k)?;
    check_bandwidth(h)?;
    check_weights(weights, n)?;
    if dist.len() != n * k {
        return Err(LocalizationError::shape("distances", format!("{} values", n * k), dist.len()));
    }
    let lengths = Scale::of_arrays(&[x]);
    let x = lengths.down_array(x)?;
    let x = x.view();
    let h = lengths.down(h);
    let dist: Vec<F> = dist.iter().map(|&v| lengths.down(v)).collect();
    knn_steps(n, idx, k, profile, h, weights, mon, |i, c| dist[i * k + c].f64(), |i, nb, w| {
        let total: f64 = w.iter().sum();
        if !(total > 0.0) {
            return i;
        }
        let mut m = vec![0.0f64; d];
        for (&j, &wj) in nb.iter().zip(w) {
            for (a, &v) in m.iter_mut().zip(x.row(j).iter()) {
                *a += wj * v.f64();
            }
        }
        m.iter_mut().for_each(|v| *v /= total);
        let cost = |j: usize| x.row(j).iter().zip(&m).map(|(&v, &c)| (v.f64() - c) * (v.f64() - c)).sum::<f64>();
        cheapest(i, nb, cost)
    })
}

/// next(i) for every i, in parallel, polling `mon`: the kernel weights of i's k neighbours
/// (row i of `idx`) at the distances `dist(i, c)`, times their sample weights, handed to
/// `pick(i, neighbours, weights)`.
#[allow(clippy::too_many_arguments)]
fn knn_steps(
    n: usize, idx: &[usize], k: usize, profile: Profile, h: f64, weights: Option<&[f64]>, mon: &Monitor,
    dist: impl Fn(usize, usize) -> f64 + Sync, pick: impl Fn(usize, &[usize], &[f64]) -> usize + Sync,
) -> Result<Vec<usize>> {
    let sw = scaled_weights(weights);
    let weights = sw.as_deref().or(weights);
    mon.set_progress(0, n);
    (0..n)
        .into_par_iter()
        .map(|i| {
            mon.check()?;
            mon.advance(1);
            let nb = &idx[i * k..(i + 1) * k];
            let mut w = Vec::with_capacity(k);
            row_weights((0..k).map(|c| dist(i, c)), profile, h, |c| weights.map_or(1.0, |sw| sw[nb[c]]), &mut w);
            Ok(pick(i, nb, &w))
        })
        .collect()
}

/// The candidate among i and its neighbours with the lowest cost (ties: `better`).
fn cheapest(i: usize, nb: &[usize], cost: impl Fn(usize) -> f64) -> usize {
    let mut best = (cost(i), i);
    for &j in nb {
        let c = cost(j);
        if better(c, j, best) {
            best = (c, j);
        }
    }
    best.1
}

/// kNN-sparse next(i) from a precomputed distance matrix: weights K(x_i, x_k) for k ∈ N(i)
/// and the cost Σ_{k ∈ N(i)} K(x_i, x_k) D[j, k]² of every candidate j ∈ N(i). O(N·k²).
#[allow(clippy::too_many_arguments)]
pub fn knn_step_precomputed<F: Real>(
    dm: ArrayView2<F>, idx: &[usize], k: usize, profile: Profile, h: f64, weights: Option<&[f64]>, mon: &Monitor,
) -> Result<Vec<usize>> {
    let n = dm.nrows();
    check_weights(weights, n)?;
    if dm.ncols() != n {
        return Err(LocalizationError::shape("X", "a square distance matrix", format!("{}×{}", n, dm.ncols())));
    }
    check_neighbors(n, idx, k)?;
    check_bandwidth(h)?;
    let lengths = Scale::of_arrays(&[dm]);
    let dm = lengths.down_array(dm)?;
    let dm = dm.view();
    let h = lengths.down(h);
    knn_steps(n, idx, k, profile, h, weights, mon, |i, c| dm[(i, idx[i * k + c])].f64(), |i, nb, w| {
        let cost = |j: usize| nb.iter().zip(w).map(|(&c, &wc)| wc * dm[(j, c)].f64() * dm[(j, c)].f64()).sum::<f64>();
        cheapest(i, nb, cost)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn naive(dm: &Array2<f64>, profile: Profile, h: f64) -> Vec<usize> {
        let n = dm.nrows();
        (0..n)
            .map(|i| {
                let costs: Vec<f64> = (0..n).map(|j| (0..n).map(|k| profile.eval(dm[(i, k)] / h) * dm[(j, k)].powi(2)).sum()).collect();
                let min = costs.iter().copied().fold(f64::INFINITY, f64::min);
                costs.iter().position(|&c| c == min).unwrap()
            })
            .collect()
    }

    #[test]
    fn dense_and_knn_match_the_definition() {
        let mut rng = StdRng::seed_from_u64(11);
        let n = 150;
        let x = Array2::from_shape_fn((n, 2), |_| rng.random::<f64>());
        let dm = Array2::from_shape_fn((n, n), |(i, j)| {
            let a = x.row(i);
            let b = x.row(j);
            (a[0] - b[0]).abs() + (a[1] - b[1]).abs() // cityblock
        });
        let mon = Monitor::default();
        for (profile, h) in [(Profile::Gaussian, 0.2), (Profile::Epanechnikov, 0.3)] {
            let want = naive(&dm, profile, h);
            assert_eq!(dense_step(dm.view(), profile, h, None, &mon).unwrap(), want);
            // kNN with k = N (every row lists all samples) is the dense definition.
            let idx: Vec<usize> = (0..n).flat_map(|_| 0..n).collect();
            assert_eq!(knn_step_precomputed(dm.view(), &idx, n, profile, h, None, &mon).unwrap(), want);
            // Integer sample weights are duplicated samples.
            let w: Vec<f64> = (0..n).map(|i| (i % 3) as f64).collect();
            let a = dense_step(dm.view(), profile, h, Some(&w), &mon).unwrap();
            let b = knn_step_precomputed(dm.view(), &idx, n, profile, h, Some(&w), &mon).unwrap();
            assert_eq!(a, b);
        }
        assert_eq!(mon.progress(), (n, n), "every sample reported");
    }

    #[test]
    fn bad_inputs_are_errors() {
        let mon = Monitor::default();
        let dm = Array2::<f64>::zeros((3, 2));
        assert!(dense_step(dm.view(), Profile::Gaussian, 1.0, None, &mon).is_err());
        let dm = Array2::<f64>::zeros((3, 3));
        assert!(dense_step(dm.view(), Profile::Gaussian, 0.0, None, &mon).is_err());
        assert!(dense_step(dm.view(), Profile::Gaussian, 1.0, Some(&[1.0, -1.0, 1.0]), &mon).is_err());
        assert!(dense_step(dm.view(), Profile::Gaussian, 1.0, Some(&[1.0]), &mon).is_err());
        assert!(knn_step_precomputed(dm.view(), &[0, 1, 5], 1, Profile::Gaussian, 1.0, None, &mon).is_err());
        assert!(knn_step_precomputed(dm.view(), &[0, 1], 1, Profile::Gaussian, 1.0, None, &mon).is_err());
        let stopped = Monitor::default();
        stopped.stop();
        assert_eq!(dense_step(dm.view(), Profile::Gaussian, 1.0, None, &stopped), Err(LocalizationError::Interrupted));
    }
}

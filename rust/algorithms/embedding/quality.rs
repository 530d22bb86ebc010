//! Quality of an embedding: trustworthiness without the n×n rank matrix.
//!
//! Trustworthiness (Venna & Kaski) penalises points that are among the k nearest
//! neighbours of i in the embedding but not in the original space, by how far down i's
//! original ranking they are: T = 1 − 2/(n k (2n − 3k − 1)) · Σ_i Σ_{j ∈ E_i} max(r_ij − k, 0),
//! with r_ij = 1 + #{l ≠ i : ‖x_i − x_l‖ < ‖x_i − x_j‖}. This computes the double sum for
//! the given embedded neighbour lists E_i in O(n) memory: each anchor's distances to every
//! sample are produced tile by tile (a matrix product in high dimensions) and compared
//! with the k thresholds; comparisons within rounding distance of a threshold are redone
//! with exact differences, so the ranks are those of the exact distances.

use crate::distance::{row_sq_norms, sq_dist_tile_gemm, GEMM_MIN_DIM};
use crate::error::{LocalizationError, Result};
use crate::real::Real;
use crate::rows::row_major;
use ndarray::{s, Array2, ArrayView2};
use rayon::prelude::*;

const ANCHOR_BLOCK: usize = 64;
const TILE: usize = 512;

fn exact_d2<F: Real>(a: &[F], b: &[F]) -> f64 {
    a.iter().zip(b).map(|(x, y)| {
        let t = x.f64() - y.f64();
        t * t
    }).sum()
}

/// Σ_i Σ_{j ∈ E_i} max(r_ij − k, 0) over the anchors `anchors` (all rows when None), where
/// `emb_nbrs` lists k embedded neighbours per anchor (row-major, anchors × k).
pub fn trustworthiness_penalty<F: Real>(x: ArrayView2<F>, anchors: &[usize], emb_nbrs: &[usize], k: usize) -> Result<u64> {
    let (n, d) = x.dim();
    let m = anchors.len();
    if k == 0 || emb_nbrs.len() != m * k {
        return Err(LocalizationError::shape("neighbors", format!("{m} × {k}"), emb_nbrs.len()));
    }
    if anchors.iter().chain(emb_nbrs).any(|&j| j >= n) {
        return Err(LocalizationError::param("neighbors", format!("indices must be in [0, {n})")));
    }
    let xs = row_major(x);
    let row = |i: usize| &xs[i * d..(i + 1) * d];
    let use_gemm = d >= GEMM_MIN_DIM;
    let norms: Vec<F> = if use_gemm { row_sq_norms(x.view()) } else { Vec::new() };
    // Rounding of the product form: |error| ≲ c · ε · (‖a‖² + ‖b‖²).
    let rel_tol = F::epsilon().f64() * 64.0 * (d as f64).sqrt().max(1.0);
    let blocks: Vec<usize> = (0..m).step_by(ANCHOR_BLOCK).collect();
    let total: u64 = blocks
        .into_par_iter()
        .map(|b0| {
            let b1 = (b0 + ANCHOR_BLOCK).min(m);
            let nb = b1 - b0;
            let ids = &anchors[b0..b1];
            // Exact thresholds, sorted, with a count of strictly nearer samples per threshold.
            let thr: Vec<Vec<f64>> = (0..nb)
                .map(|a| {
                    let i = ids[a];
                    let mut t: Vec<f64> = emb_nbrs[(b0 + a) * k..(b0 + a + 1) * k].iter().map(|&j| exact_d2(row(i), row(j))).collect();
                    t.sort_by(|p, q| p.total_cmp(q));
                    t
                })
                .collect();
            // diff[a][p] counts samples nearer than thresholds p.. (a difference array).
            let mut diff = vec![vec![0i64; k + 1]; nb];
            let qb: Array2<F> = Array2::from_shape_fn((nb, d), |(a, c)| xs[ids[a] * d + c]);
            let qn: Vec<F> = if use_gemm { row_sq_norms(qb.view()) } else { Vec::new() };
            let mut tile = Array2::<F>::zeros((nb, TILE));
            for t0 in (0..n).step_by(TILE) {
                let t1 = (t0 + TILE).min(n);
                let mut tv = tile.slice_mut(s![.., 0..t1 - t0]);
                if use_gemm {
                    sq_dist_tile_gemm(qb.view(), &qn, x.slice(s![t0..t1, ..]), &norms[t0..t1], tv.view_mut());
                }
                for a in 0..nb {
                    let i = ids[a];
                    let t = &thr[a];
                    let tmax = t[k - 1];
                    for l in t0..t1 {
                        if l == i {
                            continue;
                        }
                        let (g, tol) = if use_gemm {
                            (tv[(a, l - t0)].f64(), rel_tol * (qn[a].f64() + norms[l].f64()))
                        } else {
                            (exact_d2(row(i), row(l)), 0.0)
                        };
                        if g - tol >= tmax {
                            continue; // not nearer than any threshold (the common case)
                        }
                        // Thresholds above g + tol: certainly farther than l.
                        let hi = t.partition_point(|&v| v <= g + tol);
                        diff[a][hi] += 1;
                        // Thresholds within rounding distance: compare exactly.
                        let lo = t.partition_point(|&v| v < g - tol);
                        if lo < hi {
                            let e = exact_d2(row(i), row(l));
                            for p in lo..hi {
                                if e < t[p] {
                                    diff[a][p] += 1;
                                    diff[a][p + 1] -= 1;
                                }
                            }
                        }
                    }
                }
            }
            let mut pen = 0u64;
            for a in 0..nb {
                let mut nearer = 0i64;
                for p in 0..k {
                    nearer += diff[a][p];
                    // rank = 1 + nearer; penalty max(rank − k, 0)
                    pen += (1 + nearer - k as i64).max(0) as u64;
                }
            }
            pen
        })
        .sum();
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn naive(x: &Array2<f64>, emb: &[usize], k: usize) -> u64 {
        let n = x.nrows();
        let mut pen = 0;
        for i in 0..n {
            let d: Vec<f64> = (0..n).map(|l| exact_d2(x.row(i).as_slice().unwrap(), x.row(l).as_slice().unwrap())).collect();
            for &j in &emb[i * k..(i + 1) * k] {
                let rank = 1 + (0..n).filter(|&l| l != i && d[l] < d[j]).count() as u64;
                pen += rank.saturating_sub(k as u64);
            }
        }
        pen
    }

    #[test]
    fn penalty_matches_the_definition() {
        let mut rng = StdRng::seed_from_u64(9);
        for d in [3usize, 40] {
            let n = 700;
            let x = Array2::from_shape_fn((n, d), |_| rng.random::<f64>());
            let k = 7;
            let emb: Vec<usize> = (0..n * k).map(|t| (t / k + 1 + rng.random_range(0..n - 1)) % n).collect();
            let all: Vec<usize> = (0..n).collect();
            assert_eq!(trustworthiness_penalty(x.view(), &all, &emb, k).unwrap(), naive(&x, &emb, k), "d={d}");
            let x32 = x.mapv(|v| v as f32);
            let x64 = x32.mapv(|v| v as f64);
            assert_eq!(trustworthiness_penalty(x32.view(), &all, &emb, k).unwrap(), naive(&x64, &emb, k), "f32 d={d}");
        }
    }
}

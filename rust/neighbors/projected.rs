//! A cheap lower bound of squared distances from a few principal directions, which lets the
//! brute-force k-NN skip most exact distances on data with low-rank structure (images,
//! embeddings, most real high-dimensional data).
//!
//! With P an m × d matrix of orthonormal rows (m ≪ d) and x̂ = x − μ, every difference splits
//! into its part in the span of P and the rest: ‖q − x‖² = ‖P(q̂ − x̂)‖² + ‖R(q̂ − x̂)‖², and by
//! the triangle inequality ‖R(q̂ − x̂)‖ ≥ |r_q − r_x| with r = ‖Rx̂‖ = √(‖x̂‖² − ‖Px̂‖²). So
//!
//!   ‖q − x‖² ≥ ‖z_q − z_x‖² + (r_q − r_x)²,  z = Px̂,
//!
//! an m-dimensional product instead of a d-dimensional one. A query block first takes, per
//! query, the 2k references of smallest bound and ranks them exactly: the k-th of those
//! exact distances bounds the k-th nearest from above. A second pass ranks exactly only the
//! references whose bound lies within that threshold (about 2 % on Fashion-MNIST with m = 48).
//! The exact distances are the direct differences the plain brute force ranks by, so the
//! result is the same bit for bit; the bound only decides what is skipped.
//!
//! Rounding. Everything on the bound's side runs in f64 whatever the data type. Its errors —
//! P only orthonormal to rounding, z and r rounded, the product form's cancellation — are a
//! few hundred units of f64 roundoff times ‖q̂‖² + ‖x̂‖²; the bound subtracts `SLACK` (10⁻⁹)
//! times that, orders of magnitude more. A reference is skipped only when its bound exceeds
//! the threshold by the direct difference's own rounding (relative (d + 4)ε of the data type),
//! so a skipped reference's computed distance is strictly above the threshold: it can be
//! neither among the k nearest nor tied with the k-th.
//!
//! P comes from a few steps of subspace iteration on a subsample; it only affects speed. When
//! the top directions hold less than half the data's energy (no low-rank structure: the bound
//! would skip little), no projection is built and the plain brute force runs.

use super::{query_block, Best, REF_TILE};
use crate::distance::packed::{minus_two_dots, Panels};
use crate::distance::sq_euclidean_wide;
use crate::parallel::Monitor;
use crate::real::Real;
use crate::rows::Rows;
use ndarray::{s, Array2, ArrayView2};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

/// Features from which a projection can pay: below, the full product is already cheap.
pub const MIN_DIM: usize = 64;
/// References from which the subspace iteration's cost is amortised.
pub const MIN_ROWS: usize = 2048;
/// Principal directions kept (at most d / 4).
const DIRECTIONS: usize = 48;
/// Rows of the subsample the directions are estimated from.
const SAMPLE_ROWS: usize = 4096;
const POWER_STEPS: usize = 3;
/// Smallest share of the data's energy the directions must hold to be used.
const MIN_ENERGY: f64 = 0.5;
/// Relative safety margin of the bound (see the module comment).
const SLACK: f64 = 1e-9;

/// The projected references of a brute-force index.
pub struct Projection {
    /// m × d, orthonormal rows.
    basis: Array2<f64>,
    centre: Vec<f64>,
    /// Projected references z_x, packed for the product.
    packed: Panels<f64>,
    /// Per reference: ‖z_x‖² − SLACK·‖x̂‖², and the residual norm's interval [r_lo, r_hi].
    low: Vec<f64>,
    r_lo: Vec<f64>,
    r_hi: Vec<f64>,
}

/// Rows per task of [`project`]: one matrix product each.
const PROJECT_ROWS: usize = 256;

/// Per row of `x`: z = P(x − μ) into `z` (m per row), and per row (‖z‖² − SLACK·‖x̂‖², r_lo, r_hi).
fn project<F: Real>(x: ArrayView2<F>, basis: &Array2<f64>, centre: &[f64], z: &mut [f64]) -> Vec<[f64; 3]> {
    let m = basis.nrows();
    let mut out = vec![[0.0; 3]; x.nrows()];
    z.par_chunks_mut(PROJECT_ROWS * m).zip(out.par_chunks_mut(PROJECT_ROWS)).enumerate().for_each(|(c, (zc, oc))| {
        let r0 = c * PROJECT_ROWS;
        let xc = Array2::from_shape_fn((oc.len(), x.ncols()), |(i, k)| x[[r0 + i, k]].f64() - centre[k]);
        let zb = xc.dot(&basis.t());
        for ((o, zr), (xr, zsrc)) in oc.iter_mut().zip(zc.chunks_mut(m)).zip(xc.rows().into_iter().zip(zb.rows())) {
            zr.iter_mut().zip(zsrc).for_each(|(a, &b)| *a = b);
            let sq: f64 = xr.iter().map(|t| t * t).sum();
            let zz: f64 = zr.iter().map(|t| t * t).sum();
            let (r2, e) = (sq - zz, SLACK * sq);
            *o = [zz - e, (r2 - e).max(0.0).sqrt(), (r2 + e).max(0.0).sqrt()];
        }
    });
    out
}

/// Orthonormal columns spanning those of `y` (modified Gram–Schmidt, twice for orthogonality
/// to rounding); columns that vanish (rank-deficient data) are dropped.
fn orthonormal_columns(y: Array2<f64>) -> Array2<f64> {
    let mut kept: Vec<Vec<f64>> = Vec::new();
    for col in y.columns() {
        let mut v = col.to_vec();
        let norm0 = v.iter().map(|t| t * t).sum::<f64>().sqrt();
        for _ in 0..2 {
            for u in &kept {
                let dot: f64 = u.iter().zip(&v).map(|(a, b)| a * b).sum();
                v.iter_mut().zip(u).for_each(|(t, a)| *t -= dot * a);
            }
        }
        let norm = v.iter().map(|t| t * t).sum::<f64>().sqrt();
        if norm > 1e-8 * norm0 && norm > 0.0 {
            v.iter_mut().for_each(|t| *t /= norm);
            kept.push(v);
        }
    }
    let d = y.nrows();
    Array2::from_shape_fn((d, kept.len()), |(i, c)| kept[c][i])
}

impl Projection {
    /// The projection of the (working-unit) references `x`, or None when it would not pay.
    pub fn build<F: Real>(x: ArrayView2<F>, centre: &[F]) -> Option<Self> {
        let (n, d) = x.dim();
        if d < MIN_DIM || n < MIN_ROWS {
            return None;
        }
        let centre: Vec<f64> = centre.iter().map(|c| c.f64()).collect();
        let step = n.div_ceil(SAMPLE_ROWS);
        let sample = Array2::from_shape_fn((n.div_ceil(step), d), |(i, k)| x[[i * step, k]].f64() - centre[k]);
        // Subspace iteration from a fixed random start: the directions only affect speed, and
        // a fixed start keeps the work (not just the result) the same from run to run.
        let m = DIRECTIONS.min(d / 4);
        let mut rng = ChaCha8Rng::seed_from_u64(0x6c6f_6361_6c69_7a65);
        let mut y = Array2::from_shape_fn((d, m), |_| rng.random_range(-1.0..1.0));
        for _ in 0..POWER_STEPS {
            y = orthonormal_columns(sample.t().dot(&sample.dot(&y)));
        }
        if y.ncols() == 0 {
            return None;
        }
        let basis = y.reversed_axes().as_standard_layout().into_owned();
        let captured: f64 = sample.dot(&basis.t()).iter().map(|t| t * t).sum();
        let total: f64 = sample.iter().map(|t| t * t).sum();
        if !(captured >= MIN_ENERGY * total) {
            return None;
        }
        let m = basis.nrows();
        let mut z = vec![0.0; n * m];
        let per_row = project(x, &basis, &centre, &mut z);
        let z = Array2::from_shape_vec((n, m), z).expect("n × m values");
        let packed = Panels::references(z.view(), &vec![0.0; m]).ok()?;
        let low = per_row.iter().map(|r| r[0]).collect();
        let r_lo = per_row.iter().map(|r| r[1]).collect();
        let r_hi = per_row.iter().map(|r| r[2]).collect();
        Some(Projection { basis, centre, packed, low, r_lo, r_hi })
    }
}

/// The per-query terms of the lower bounds of a query block.
struct Bounds<'a> {
    p: &'a Projection,
    /// Per query: ‖z_q‖² − SLACK·‖q̂‖², r_lo, r_hi.
    q: Vec<[f64; 3]>,
}

impl Bounds<'_> {
    /// Calls `visit(i, j, bound)` for every query i of the block and reference j in t0..t1
    /// whose bound is at most `limits[i]`, from the block's products −2 z_q·z_x in `tile`
    /// (row stride `REF_TILE`).
    #[inline]
    fn scan(&self, tile: &[f64], t0: usize, t1: usize, limits: &[f64], mut visit: impl FnMut(usize, usize, f64)) {
        const CHUNK: usize = 16;
        let (low, rl, rh) = (&self.p.low[t0..t1], &self.p.r_lo[t0..t1], &self.p.r_hi[t0..t1]);
        let mut bound = [0.0f64; CHUNK];
        for (i, &[ql, qrl, qrh]) in self.q.iter().enumerate() {
            let lim = limits[i];
            let row = &tile[i * REF_TILE..i * REF_TILE + (t1 - t0)];
            for (c0, ((vs, ls), (rls, rhs))) in row.chunks(CHUNK).zip(low.chunks(CHUNK)).zip(rl.chunks(CHUNK).zip(rh.chunks(CHUNK))).enumerate() {
                let len = vs.len();
                let mut hit = false;
                // Straight-line over equal-length slices: one vectorised pass per chunk.
                for ((((b, &v), &l), &lo), &hi) in bound[..len].iter_mut().zip(vs).zip(ls).zip(rls).zip(rhs) {
                    let gap = (qrl - hi).max(lo - qrh).max(0.0);
                    *b = (v + l) + ql + gap * gap;
                    hit |= *b <= lim;
                }
                if hit {
                    for (jj, &b) in bound[..len].iter().enumerate() {
                        if b <= lim {
                            visit(i, t0 + c0 * CHUNK + jj, b);
                        }
                    }
                }
            }
        }
    }
}

/// The brute-force k-NN of `q` (rows `q_rows`) against the references `x_rows` (working
/// units) with the projection `p` of the references; same contract and output as
/// `super::brute_knn`.
#[allow(clippy::too_many_arguments)]
pub fn knn<F: Real>(
    q: ArrayView2<F>, q_rows: Rows<'_, F>, x_rows: Rows<'_, F>, p: &Projection, k: usize, indices: &mut [usize], distances: &mut [F],
    mon: &Monitor, report: bool,
) {
    let (n, d) = (x_rows.nrows(), x_rows.ncols());
    let m = p.basis.nrows();
    let row_of = |j: usize| x_rows.row(j);
    // A skipped reference's bound exceeds the threshold by more than the direct difference's
    // rounding, so its computed distance lies strictly above the threshold.
    let widen = 1.0 + 2.0 * (d as f64 + 4.0) * F::epsilon().f64();
    let first = (2 * k).min(n);
    let block = query_block(q.nrows());
    let w = p.packed.width();
    indices.par_chunks_mut(block * k).zip(distances.par_chunks_mut(block * k)).enumerate().for_each(|(blk, (ind, dist))| {
        let b0 = blk * block;
        let b1 = (b0 + block).min(q.nrows());
        let qb = q.slice(s![b0..b1, ..]);
        let mut zq = vec![0.0; (b1 - b0) * m];
        let bounds = Bounds { p, q: project(qb, &p.basis, &p.centre, &mut zq) };
        let mut qp = Panels::queries(m);
        qp.repack(ndarray::ArrayView2::from_shape((b1 - b0, m), &zq).expect("block × m values"), &vec![0.0; m]);
        let mut tile = vec![0.0f64; qp.padded_rows() * REF_TILE];
        let qrow = |i: usize| q_rows.row(b0 + i);
        let sweep = |tile: &mut Vec<f64>, t0: usize, t1: usize| minus_two_dots(&qp, &p.packed, t0 / w..t1.div_ceil(w), tile, REF_TILE);
        // Pass 1: per query the `first` smallest bounds, ranked exactly.
        let mut seeds: Vec<Best<f64>> = (0..b1 - b0).map(|_| Best::new(first)).collect();
        for t0 in (0..n).step_by(REF_TILE) {
            if mon.stopped() {
                return;
            }
            let t1 = (t0 + REF_TILE).min(n);
            sweep(&mut tile, t0, t1);
            let limits: Vec<f64> = seeds.iter().map(|s| s.worst()).collect();
            bounds.scan(&tile, t0, t1, &limits, |i, j, b| seeds[i].offer(b, j));
        }
        let mut best: Vec<Best<F>> = (0..b1 - b0).map(|_| Best::new(k)).collect();
        let mut seen: Vec<Vec<usize>> = Vec::with_capacity(b1 - b0);
        for (i, s) in seeds.into_iter().enumerate() {
            let mut js: Vec<usize> = s.into_sorted().into_iter().map(|(_, j)| j).collect();
            for &j in &js {
                best[i].offer(sq_euclidean_wide(qrow(i), row_of(j)), j);
            }
            js.sort_unstable();
            seen.push(js);
        }
        // Pass 2: every other reference whose bound is within the k-th distance so far.
        let mut pending: Vec<(usize, usize)> = Vec::new();
        for t0 in (0..n).step_by(REF_TILE) {
            if mon.stopped() {
                return;
            }
            let t1 = (t0 + REF_TILE).min(n);
            sweep(&mut tile, t0, t1);
            pending.clear();
            let limits: Vec<f64> = best.iter().map(|b| b.worst().f64() * widen).collect();
            bounds.scan(&tile, t0, t1, &limits, |i, j, _| pending.push((i, j)));
            // By reference, so that each row is read from memory once per block and tile.
            pending.sort_unstable_by_key(|&(i, j)| (j, i));
            for &(i, j) in &pending {
                if seen[i].binary_search(&j).is_err() {
                    best[i].offer(sq_euclidean_wide(qrow(i), row_of(j)), j);
                }
            }
        }
        for (i, best) in best.into_iter().enumerate() {
            for (c, (d2, idx)) in best.into_sorted().into_iter().enumerate() {
                ind[i * k + c] = idx;
                dist[i * k + c] = d2.sqrt();
            }
        }
        if report {
            mon.advance(b1 - b0);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::super::{Algorithm, Index, Inner, Neighbors};
    use crate::parallel::Monitor;
    use ndarray::Array2;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// Rank-`r` data plus noise in d features around `offset`, with duplicated rows.
    fn low_rank(rng: &mut StdRng, n: usize, d: usize, r: usize, offset: f64) -> Array2<f64> {
        let basis = Array2::from_shape_fn((r, d), |_| rng.random::<f64>() - 0.5);
        let coef = Array2::from_shape_fn((n, r), |_| rng.random::<f64>() * 4.0 - 2.0);
        let mut x = coef.dot(&basis).mapv(|v| v + offset) + Array2::from_shape_fn((n, d), |_| 0.02 * rng.random::<f64>());
        for i in (0..n).step_by(11) {
            let src = x.row((i * 7 + 3) % n).to_owned();
            x.row_mut(i).assign(&src);
        }
        x
    }

    fn both<F: crate::real::Real>(x: &Array2<F>, q: &Array2<F>, k: usize) -> (Neighbors<F>, Neighbors<F>) {
        let mon = Monitor::default();
        let mut idx = Index::build(x.view(), Algorithm::Brute, 16, &mon).unwrap();
        let with = idx.knn(q.view(), k, &mon).unwrap();
        match &mut idx.inner {
            Inner::Brute(b) => {
                assert!(b.projection.is_some(), "low-rank data must get a projection");
                b.projection = None;
            }
            Inner::Tree(_) => unreachable!(),
        }
        (with, idx.knn(q.view(), k, &mon).unwrap())
    }

    #[test]
    fn the_projected_search_counts_its_queries_when_asked() {
        let mut rng = StdRng::seed_from_u64(5);
        let x = low_rank(&mut rng, 3000, 96, 6, 0.0);
        let q = low_rank(&mut rng, 333, 96, 6, 0.0);
        let idx = Index::build(x.view(), Algorithm::Brute, 16, &Monitor::default()).unwrap();
        assert!(matches!(&idx.inner, Inner::Brute(b) if b.projection.is_some()));
        let (quiet, counted) = (Monitor::default(), Monitor::default());
        let a = idx.knn(q.view(), 7, &quiet).unwrap();
        let b = idx.knn_reported(q.view(), 7, &counted, true).unwrap();
        assert_eq!((quiet.progress(), counted.progress()), ((0, 0), (333, 333)));
        assert_eq!((a.indices, a.distances), (b.indices, b.distances));
    }

    #[test]
    fn the_bound_only_skips_what_cannot_be_a_neighbour() {
        let mut rng = StdRng::seed_from_u64(17);
        for (d, offset) in [(96usize, 0.0), (200, 1e5), (70, -3e3)] {
            let x = low_rank(&mut rng, 3000, d, 6, offset);
            // Queries: some fitted rows (themselves and their duplicates at distance 0), some new.
            let mut q = low_rank(&mut rng, 130, d, 6, offset);
            for i in 0..40 {
                q.row_mut(i).assign(&x.row(i * 11));
            }
            for k in [1usize, 10, 57] {
                let (with, without) = both(&x, &q, k);
                assert_eq!(with.indices, without.indices, "d={d} offset={offset} k={k}");
                assert_eq!(with.distances, without.distances, "d={d} offset={offset} k={k}");
                let (x32, q32) = (x.mapv(|v| v as f32), q.mapv(|v| v as f32));
                let (with, without) = both(&x32, &q32, k);
                assert_eq!(with.indices, without.indices, "f32 d={d} offset={offset} k={k}");
                assert_eq!(with.distances, without.distances, "f32 d={d} offset={offset} k={k}");
            }
        }
    }

    #[test]
    fn the_same_for_any_thread_count() {
        let mut rng = StdRng::seed_from_u64(5);
        let x = low_rank(&mut rng, 2500, 80, 4, 0.0);
        let q = low_rank(&mut rng, 300, 80, 4, 0.0);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| both(&x, &q, 12).0)
        };
        let one = run(1);
        for t in [2, 3, 7] {
            let other = run(t);
            assert_eq!(one.indices, other.indices);
            assert_eq!(one.distances, other.distances);
        }
    }

    #[test]
    fn no_projection_without_low_rank_structure_or_below_the_thresholds() {
        let mut rng = StdRng::seed_from_u64(1);
        let mon = Monitor::default();
        let projected = |x: &Array2<f64>| match Index::build(x.view(), Algorithm::Brute, 16, &mon).unwrap().inner {
            Inner::Brute(b) => b.projection.is_some(),
            Inner::Tree(_) => unreachable!(),
        };
        // Isotropic noise: 32 directions of 128 hold a quarter of the energy.
        assert!(!projected(&Array2::from_shape_fn((3000, 128), |_| rng.random::<f64>())));
        assert!(!projected(&low_rank(&mut rng, super::MIN_ROWS - 1, 96, 3, 0.0)));
        assert!(!projected(&low_rank(&mut rng, 3000, super::MIN_DIM - 1, 3, 0.0)));
        // Constant rows (no direction at all).
        assert!(!projected(&Array2::from_elem((3000, 100), 2.5)));
    }
}

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
//! exact distances bounds the k-th nearest from above. A second pass visits the references
//! whose bound lies within that threshold (about 2.5 % on Fashion-MNIST with m = 48) and
//! tightens their bound with a second tier of directions, P₂ (up to 144 more, stored in single
//! precision, read only for these candidates):
//!
//!   ‖q − x‖² ≥ ‖z_q − z_x‖² + (‖z̃2_q − z̃2_x‖ − e_q − e_x)₊² + (r2_q − r2_x)²,
//!
//! with z̃2 = P₂x̂ rounded to f32, e the norm of that rounding and r2 the residual norm beyond
//! both tiers. Only references within the threshold by this bound too (0.5 %) are ranked
//! exactly. The exact distances are the direct differences the plain brute force ranks by,
//! so the result is the same bit for bit; the bounds only decide what is skipped.
//!
//! Queries are searched in blocks of nearby queries (recursive halving of their projections,
//! `super::coherent_order`): their candidates are mostly the same rows, read from memory once per
//! block. A query's answer does not depend on the queries searched with it.
//!
//! Rounding. The projections run in f64 whatever the data type. Their errors — P only
//! orthonormal to rounding, z and r rounded, the product form's cancellation — are a few
//! hundred units of f64 roundoff times ‖q̂‖² + ‖x̂‖²; the bound subtracts `SLACK` (10⁻⁹) times
//! that, orders of magnitude more. The first tier's product runs in f32 (half the work of the
//! pass over all pairs) and subtracts its own rounding bound, (m + 4)·2⁻²³ times the same. A reference is skipped only when its bound exceeds
//! the threshold by the direct difference's own rounding (relative (d + 4)ε of the data type),
//! so a skipped reference's computed distance is strictly above the threshold: it can be
//! neither among the k nearest nor tied with the k-th.
//!
//! P comes from a few steps of subspace iteration on a subsample; it only affects speed. When
//! the top directions hold less than half the data's energy (no low-rank structure: the bound
//! would skip little), or less than 95 % of it in fewer than 256 features (where the plain
//! product is cheap), no projection is built and the plain brute force runs.

use super::{coherent_order, query_block, search_in_blocks, Best, REF_TILE, SEGMENT};
use crate::distance::packed::{minus_two_dots, Panels};
use crate::distance::sq_euclidean_wide;
use crate::engine::lanes;
use crate::error::Result;
use crate::memory;
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
/// Principal directions of the product's bound, and of the second tier that only candidates
/// of the first pay for (at most d / 4 in all). On 10,000 Fashion-MNIST images 2.5 % of the
/// pairs pass the first tier's bound at the 10th neighbour's distance and 0.5 % both.
const DIRECTIONS: usize = 48;
const SECOND_DIRECTIONS: usize = 144;
/// Rows of the subsample the directions are estimated from.
const SAMPLE_ROWS: usize = 2048;
const POWER_STEPS: usize = 2;
/// Smallest share of the data's energy the directions must hold to be used.
const MIN_ENERGY: f64 = 0.5;
/// Below this many features the d / 4 directions must leave at most `NARROW_RESIDUAL` of the
/// energy: the plain product over d features is then cheap, and a looser bound lets too many
/// candidates through to pay for the scan, the sort and the exact distances. Measured on
/// 10,000 rows, one thread: Fashion-MNIST's top 64–200 principal coordinates (9–13 % of the
/// energy outside the directions) searched 1.0–2.0× faster without a projection (k = 11 and
/// 62); low-rank data in 100–200 features with 1–4.5 % outside, 1.2–1.5× faster with one at
/// k = 11 (0.87–0.98× at k = 62); from 256 features (784-pixel images: 2.3× at k = 11) the
/// projection pays on the energy rule alone.
const NARROW_DIM: usize = 256;
const NARROW_RESIDUAL: f64 = 0.05;
/// Relative safety margin of the bound (see the module comment).
const SLACK: f64 = 1e-9;

/// Margin, relative to ‖x̂‖² on each side, for the first tier's product in single precision:
/// rounding z to f32 and summing m products moves −2 z_q·z_x by at most
/// (m + 3)·2⁻²⁴·(‖z_q‖² + ‖z_x‖²) (any summation order, fused or not), and ‖z‖ ≤ ‖x̂‖; twice that.
fn product_slack(m: usize) -> f64 {
    (m as f64 + 4.0) * f32::EPSILON as f64
}

/// The projected references of a brute-force index.
pub struct Projection {
    /// m × d, orthonormal rows: the first `m1` give the product's bound, the rest the
    /// second tier's.
    basis: Array2<f64>,
    m1: usize,
    centre: Vec<f64>,
    /// Projected references z_x (first tier), rounded to single precision and packed for the
    /// product.
    packed: Panels<f32>,
    /// Second-tier coordinates, row by row, rounded to single precision (a sixth of the bytes
    /// of a Fashion-MNIST row in f32, a tenth in f64).
    z2: Vec<f32>,
    /// Per reference, the first tier's terms apart (the scan over all pairs vectorises over
    /// them) and all of them together (read per candidate).
    low: Vec<f64>,
    r_lo: Vec<f64>,
    r_hi: Vec<f64>,
    terms: Vec<Terms>,
}

/// Per row, the terms of its bounds (see the module comment).
#[derive(Clone, Copy, Default)]
struct Terms {
    /// ‖z‖² − (SLACK + product_slack)·‖x̂‖² (first tier).
    low: f64,
    /// Interval of the residual norm beyond the first tier, then beyond both.
    r: [f64; 2],
    r2: [f64; 2],
    /// Norm of the second-tier coordinates' rounding to single precision, rounded up.
    e2: f64,
}

/// Rows per task of [`project`]: one matrix product each.
const PROJECT_ROWS: usize = 256;

/// Per row of `x`: the first-tier coordinates into `z` (`m1` per row), and the second tier's
/// (row by row) with the rows' [`Terms`].
fn project<F: Real>(x: ArrayView2<F>, basis: &Array2<f64>, m1: usize, centre: &[f64], z: &mut [f64]) -> Result<(Vec<f32>, Vec<Terms>)> {
    let m2 = basis.nrows() - m1;
    let residual = |r2: f64, e: f64| [(r2 - e).max(0.0).sqrt(), (r2 + e).max(0.0).sqrt()];
    let parts: Vec<(Vec<f32>, Vec<Terms>)> = z
        .par_chunks_mut(PROJECT_ROWS * m1)
        .enumerate()
        .map(|(c, zc)| {
            let (r0, rows) = (c * PROJECT_ROWS, zc.len() / m1);
            let xc = Array2::from_shape_fn((rows, x.ncols()), |(i, k)| x[[r0 + i, k]].f64() - centre[k]);
            let zb = xc.dot(&basis.t());
            let (mut z2, mut terms) = (Vec::with_capacity(rows * m2), Vec::with_capacity(rows));
            for (zr, (xr, zsrc)) in zc.chunks_mut(m1).zip(xc.rows().into_iter().zip(zb.rows())) {
                let (first, second) = zsrc.as_slice().expect("a standard-layout product").split_at(m1);
                zr.copy_from_slice(first);
                let mut rounding = 0.0;
                for &v in second {
                    z2.push(v as f32);
                    rounding += (v - (v as f32) as f64).powi(2);
                }
                let xr = xr.as_slice().expect("a standard-layout row");
                let (sq, zz, zz2) = (lanes::dot::<f64, false>(xr, xr), lanes::dot::<f64, false>(first, first), lanes::dot::<f64, false>(second, second));
                let e = SLACK * sq;
                terms.push(Terms { low: zz - e - product_slack(m1) * sq, r: residual(sq - zz, e), r2: residual(sq - zz - zz2, e), e2: rounding.sqrt() * (1.0 + 1e-9) });
            }
            (z2, terms)
        })
        .collect();
    let n = x.nrows();
    let z2 = memory::try_collect("X", &[n, m2], parts.iter().flat_map(|p| p.0.iter().copied()))?;
    let terms = memory::try_collect("X", &[n], parts.iter().flat_map(|p| p.1.iter().copied()))?;
    Ok((z2, terms))
}

/// SᵀS·y, summed over blocks of S's rows in parallel (in a fixed order: the same directions
/// for any thread count).
fn gram_times(sample: &Array2<f64>, y: &Array2<f64>) -> Array2<f64> {
    let parts: Vec<Array2<f64>> = (0..sample.nrows()).step_by(PROJECT_ROWS).collect::<Vec<_>>().into_par_iter().map(|r0| {
        let s = sample.slice(s![r0..(r0 + PROJECT_ROWS).min(sample.nrows()), ..]);
        s.t().dot(&s.dot(y))
    }).collect();
    parts.into_iter().reduce(|a, b| a + b).expect("a non-empty sample")
}

/// Orthonormal columns spanning those of `y` (modified Gram–Schmidt, twice for orthogonality
/// to rounding); columns that vanish (rank-deficient data) are dropped.
fn orthonormal_columns(y: Array2<f64>) -> Array2<f64> {
    // Dot products in independent lanes: a plain sum is one dependent chain of additions,
    // which made this loop (up to 192 columns of 784) a fifth of an index build.
    let dot = lanes::dot::<f64, false>;
    let mut kept: Vec<Vec<f64>> = Vec::new();
    for col in y.columns() {
        let mut v = col.to_vec();
        let norm0 = dot(&v, &v).sqrt();
        for _ in 0..2 {
            for u in &kept {
                let along = dot(u, &v);
                v.iter_mut().zip(u).for_each(|(t, a)| *t -= along * a);
            }
        }
        let norm = dot(&v, &v).sqrt();
        if norm > 1e-8 * norm0 && norm > 0.0 {
            v.iter_mut().for_each(|t| *t /= norm);
            kept.push(v);
        }
    }
    let d = y.nrows();
    Array2::from_shape_fn((d, kept.len()), |(i, c)| kept[c][i])
}

impl Projection {
    /// The projection of the (working-unit) references `x`, or None when it would not pay;
    /// `OutOfMemory` when its arrays (a few hundred bytes per sample) do not fit.
    pub fn build<F: Real>(x: ArrayView2<F>, centre: &[F]) -> Result<Option<Self>> {
        let (n, d) = x.dim();
        if d < MIN_DIM || n < MIN_ROWS {
            return Ok(None);
        }
        let centre: Vec<f64> = centre.iter().map(|c| c.f64()).collect();
        let step = n.div_ceil(SAMPLE_ROWS);
        let sample = Array2::from_shape_fn((n.div_ceil(step), d), |(i, k)| x[[i * step, k]].f64() - centre[k]);
        // Subspace iteration from a fixed random start: the directions only affect speed, and
        // a fixed start keeps the work (not just the result) the same from run to run.
        let m = (DIRECTIONS + SECOND_DIRECTIONS).min(d / 4);
        let mut rng = ChaCha8Rng::seed_from_u64(0x6c6f_6361_6c69_7a65);
        let mut y = Array2::from_shape_fn((d, m), |_| rng.random_range(-1.0..1.0));
        for _ in 0..POWER_STEPS {
            y = orthonormal_columns(gram_times(&sample, &y));
        }
        if y.ncols() == 0 {
            return Ok(None);
        }
        let basis = y.reversed_axes().as_standard_layout().into_owned();
        // Summed per block in parallel, then in block order: the same number for any thread count.
        let captured: f64 = (0..sample.nrows()).step_by(PROJECT_ROWS).collect::<Vec<_>>().into_par_iter().map(|r0| {
            let s = sample.slice(s![r0..(r0 + PROJECT_ROWS).min(sample.nrows()), ..]);
            s.dot(&basis.t()).iter().map(|t| t * t).sum::<f64>()
        }).collect::<Vec<f64>>().into_iter().sum();
        let total: f64 = sample.iter().map(|t| t * t).sum();
        let needed = if d < NARROW_DIM { 1.0 - NARROW_RESIDUAL } else { MIN_ENERGY };
        if !(captured >= needed * total) {
            return Ok(None);
        }
        let m1 = basis.nrows().min(DIRECTIONS);
        let mut z = memory::try_vec("X", &[n, m1], 0.0)?;
        let (z2, terms) = project(x, &basis, m1, &centre, &mut z)?;
        let z = Array2::from_shape_vec((n, m1), z).expect("n × m1 values");
        let packed = Panels::references_from(z.view(), None, &vec![0.0; m1], 1.0)?.0;
        let per_row = |f: fn(&Terms) -> f64| memory::try_collect("X", &[n], terms.iter().map(f));
        let (low, r_lo, r_hi) = (per_row(|t| t.low)?, per_row(|t| t.r[0])?, per_row(|t| t.r[1])?);
        Ok(Some(Projection { basis, m1, centre, packed, z2, low, r_lo, r_hi, terms }))
    }
}

/// The per-query terms of the lower bounds of a query block, and their second-tier coordinates.
struct Bounds<'a> {
    p: &'a Projection,
    q: Vec<Terms>,
    z2: Vec<f32>,
}

impl Bounds<'_> {
    /// Calls `visit(i, j, near)` for every query i of the block and reference j in t0..t1
    /// whose first-tier bound is at most `limits[i]`, from the block's products −2 z_q·z_x in
    /// `tile` (row stride `stride`, reference t0 first); `near` is the bound's part in the
    /// first tier's span, ‖z_q − z_x‖² less the margins.
    ///
    /// The bounds are the same bits at every instruction set (no operation is fused); wider
    /// registers only evaluate more of them at once: the baseline build's two-lane loop was a
    /// fifth of the search on 10,000 Fashion-MNIST images.
    #[inline]
    fn scan(&self, tile: &[f32], stride: usize, t0: usize, t1: usize, limits: &[f64], visit: impl FnMut(usize, usize, f64)) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx2") {
                // SAFETY: the CPU supports the features the function is compiled for.
                return unsafe { self.scan_avx512(tile, stride, t0, t1, limits, visit) };
            }
            if has!("avx2") {
                // SAFETY: as above.
                return unsafe { self.scan_avx2(tile, stride, t0, t1, limits, visit) };
            }
        }
        self.scan_with(tile, stride, t0, t1, limits, visit)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn scan_avx2(&self, tile: &[f32], stride: usize, t0: usize, t1: usize, limits: &[f64], visit: impl FnMut(usize, usize, f64)) {
        self.scan_with(tile, stride, t0, t1, limits, visit)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,avx512f")]
    unsafe fn scan_avx512(&self, tile: &[f32], stride: usize, t0: usize, t1: usize, limits: &[f64], visit: impl FnMut(usize, usize, f64)) {
        self.scan_with(tile, stride, t0, t1, limits, visit)
    }

    #[inline(always)]
    fn scan_with(&self, tile: &[f32], stride: usize, t0: usize, t1: usize, limits: &[f64], mut visit: impl FnMut(usize, usize, f64)) {
        const CHUNK: usize = 16;
        let (low, rl, rh) = (&self.p.low[t0..t1], &self.p.r_lo[t0..t1], &self.p.r_hi[t0..t1]);
        let mut bound = [0.0f64; CHUNK];
        for (i, t) in self.q.iter().enumerate() {
            let (ql, [qrl, qrh]) = (t.low, t.r);
            let lim = limits[i];
            let row = &tile[i * stride..i * stride + (t1 - t0)];
            for (c0, ((vs, ls), (rls, rhs))) in row.chunks(CHUNK).zip(low.chunks(CHUNK)).zip(rl.chunks(CHUNK).zip(rh.chunks(CHUNK))).enumerate() {
                let len = vs.len();
                let mut hit = false;
                // Straight-line over equal-length slices: one vectorised pass per chunk.
                for ((((b, &v), &l), &lo), &hi) in bound[..len].iter_mut().zip(vs).zip(ls).zip(rls).zip(rhs) {
                    let gap = (qrl - hi).max(lo - qrh).max(0.0);
                    *b = (v as f64 + l) + ql + gap * gap;
                    hit |= *b <= lim;
                }
                if hit {
                    for (jj, &b) in bound[..len].iter().enumerate() {
                        if b <= lim {
                            visit(i, t0 + c0 * CHUNK + jj, (vs[jj] as f64 + ls[jj]) + ql);
                        }
                    }
                }
            }
        }
    }

    /// The bound of both tiers for query i and reference j from the first tier's `near`:
    /// near + (‖z̃2_q − z̃2_x‖ − e2_q − e2_x)₊² + (gap of the residuals beyond both)².
    #[inline]
    fn second(&self, i: usize, j: usize, near: f64) -> f64 {
        let m2 = self.p.basis.nrows() - self.p.m1;
        let (tq, tx) = (&self.q[i], &self.p.terms[j]);
        let (a, b) = (&self.z2[i * m2..(i + 1) * m2], &self.p.z2[j * m2..(j + 1) * m2]);
        // Summed in single precision: a sum of m2 squared rounded differences is within a
        // relative (m2 + 2)·2⁻²⁴ of the exact one (all terms are non-negative).
        let sq = sq_dist32(a, b) as f64 * (1.0 - 2.0 * (m2 as f64 + 2.0) * f32::EPSILON as f64);
        let span = (sq.sqrt() - tq.e2 - tx.e2).max(0.0);
        let gap = (tq.r2[0] - tx.r2[1]).max(tx.r2[0] - tq.r2[1]).max(0.0);
        near + span * span + gap * gap
    }
}

/// Σ (a − b)² in single precision: 16 partial sums (two AVX2 registers) added at the end.
/// Written with intrinsics because the compiler splits the portable 8- or 16-lane loop into
/// two-lane pieces and shuffles for f32, which made the second tier's distances a tenth of
/// the search.
#[inline]
fn sq_dist32(a: &[f32], b: &[f32]) -> f32 {
    let b = &b[..a.len()];
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2; `b` is as long as `a`.
            return unsafe { sq_dist32_avx2(a, b) };
        }
    }
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sq_dist32_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len();
    let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 ≤ n = a.len() = b.len().
        let (pa, pb) = unsafe { (a.as_ptr().add(i), b.as_ptr().add(i)) };
        let d0 = _mm256_sub_ps(unsafe { _mm256_loadu_ps(pa) }, unsafe { _mm256_loadu_ps(pb) });
        let d1 = _mm256_sub_ps(unsafe { _mm256_loadu_ps(pa.add(8)) }, unsafe { _mm256_loadu_ps(pb.add(8)) });
        s0 = _mm256_add_ps(s0, _mm256_mul_ps(d0, d0));
        s1 = _mm256_add_ps(s1, _mm256_mul_ps(d1, d1));
        i += 16;
    }
    let mut acc = [0.0f32; 8];
    // SAFETY: `acc` holds 8 floats.
    unsafe { _mm256_storeu_ps(acc.as_mut_ptr(), _mm256_add_ps(s0, s1)) };
    acc.iter().sum::<f32>() + a[i..].iter().zip(&b[i..]).map(|(x, y)| (x - y) * (x - y)).sum::<f32>()
}

/// Queries searched together: their rows (784 doubles each on Fashion-MNIST) stay in a
/// core's cache while their candidates are ranked.
const BLOCK: usize = 64;
/// Largest product matrix a block keeps from the first pass for the second (bytes); beyond
/// it the second pass computes its tiles again.
const KEEP_BYTES: usize = 32 << 20;

/// The brute-force k-NN of `q` (rows `q_rows`) against the references `x_rows` (working
/// units) with the projection `p` of the references; same contract and output as
/// `super::brute_knn`. A query's answer does not depend on the others searched with it, so
/// the queries are searched in a [`coherent_order`], a segment at a time.
#[allow(clippy::too_many_arguments)]
pub fn knn<F: Real>(
    q: ArrayView2<F>, q_rows: Rows<'_, F>, x_rows: Rows<'_, F>, p: &Projection, k: usize, indices: &mut [usize], distances: &mut [F],
    mon: &Monitor, report: bool,
) -> Result<()> {
    let (m, m2) = (p.m1, p.basis.nrows() - p.m1);
    // Queries that are the references (a self-join: LLE, TripletEmbedding, kneighbors()
    // without X) take the references' projections instead of computing them again.
    let fitted = q.nrows() == x_rows.nrows() && (0..q.nrows()).into_par_iter().all(|i| q_rows.row(i) == x_rows.row(i));
    for s0 in (0..q.nrows()).step_by(SEGMENT) {
        let s1 = (s0 + SEGMENT).min(q.nrows());
        let mut zq = vec![0.0; (s1 - s0) * m];
        let (zq2, terms) = if fitted {
            let mut row = vec![0.0f32; m];
            for (i, z) in zq.chunks_mut(m).enumerate() {
                p.packed.unpack_row(s0 + i, &mut row);
                z.iter_mut().zip(&row).for_each(|(a, &b)| *a = b as f64);
            }
            (p.z2[s0 * m2..s1 * m2].to_vec(), p.terms[s0..s1].to_vec())
        } else {
            project(q.slice(s![s0..s1, ..]), &p.basis, m, &p.centre, &mut zq)?
        };
        let mut order: Vec<usize> = (0..s1 - s0).collect();
        let block = query_block(s1 - s0).min(BLOCK);
        coherent_order(&|i, c| zq[i * m + c], m, &mut order, block);
        let search = |ids: &[usize]| search_block(ids, (&zq, &zq2), &terms, q_rows, s0, x_rows, p, k, mon);
        if !search_in_blocks(&order, s0, block, (k, &mut *indices, &mut *distances), mon, report, search) {
            break;
        }
    }
    Ok(())
}

/// The k nearest references of the queries `ids` (rows of the segment's projections `zq` of
/// both tiers and bound terms `terms`; query i is row `s0 + i` of `q_rows`), each sorted by
/// (distance, index).
#[allow(clippy::too_many_arguments)]
fn search_block<F: Real>(
    ids: &[usize], (zq, zq2): (&[f64], &[f32]), terms: &[Terms], q_rows: Rows<'_, F>, s0: usize, x_rows: Rows<'_, F>, p: &Projection, k: usize, mon: &Monitor,
) -> Vec<Vec<(F, usize)>> {
    let (n, d) = (x_rows.nrows(), x_rows.ncols());
    let (m, m2) = (p.m1, p.basis.nrows() - p.m1);
    // A skipped reference's bound exceeds the threshold by more than the direct difference's
    // rounding, so its computed distance lies strictly above the threshold.
    let widen = 1.0 + 2.0 * (d as f64 + 4.0) * F::epsilon().f64();
    let first = (2 * k).min(n);
    let w = p.packed.width();
    let bounds = Bounds { p, q: ids.iter().map(|&i| terms[i]).collect(), z2: ids.iter().flat_map(|&i| zq2[i * m2..(i + 1) * m2].iter().copied()).collect() };
    let zb: Vec<f64> = ids.iter().flat_map(|&i| zq[i * m..(i + 1) * m].iter().copied()).collect();
    let mut qp = Panels::<f32>::queries(m);
    qp.repack_from(ndarray::ArrayView2::from_shape((ids.len(), m), &zb).expect("block × m values"), &vec![0.0; m], 1.0);
    // The first pass's products serve the second when they fit; otherwise tile by tile again.
    let npad = n.next_multiple_of(w);
    let keep = qp.padded_rows() * npad * std::mem::size_of::<f32>() <= KEEP_BYTES;
    let stride = if keep { npad } else { REF_TILE };
    let mut products = vec![0.0f32; qp.padded_rows() * stride];
    let at = |t0: usize| if keep { t0 } else { 0 };
    let sweep = |products: &mut [f32], t0: usize, t1: usize| minus_two_dots(&qp, &p.packed, t0 / w..t1.div_ceil(w), &mut products[at(t0)..], stride);
    let (qrow, row_of) = (|i: usize| q_rows.row(s0 + i), |j: usize| x_rows.row(j));
    // Pass 1: per query the `first` smallest bounds, ranked exactly.
    let mut seeds: Vec<Best<f64>> = ids.iter().map(|_| Best::new(first)).collect();
    for t0 in (0..n).step_by(REF_TILE) {
        if mon.stopped() {
            return Vec::new();
        }
        let t1 = (t0 + REF_TILE).min(n);
        let limits: Vec<f64> = seeds.iter().map(|s| s.worst()).collect();
        sweep(&mut products, t0, t1);
        bounds.scan(&products[at(t0)..], stride, t0, t1, &limits, |i, j, near| seeds[i].offer(near, j));
    }
    let mut best: Vec<Best<F>> = ids.iter().map(|_| Best::new(k)).collect();
    let mut seen: Vec<Vec<usize>> = Vec::with_capacity(ids.len());
    for (i, s) in seeds.into_iter().enumerate() {
        let mut js: Vec<usize> = s.into_sorted().into_iter().map(|(_, j)| j).collect();
        for &j in &js {
            best[i].offer(sq_euclidean_wide(qrow(ids[i]), row_of(j)), j);
        }
        js.sort_unstable();
        seen.push(js);
    }
    // Pass 2: every other reference whose bound is within the k-th distance so far.
    let mut pending: Vec<(usize, usize, f64)> = Vec::new();
    for t0 in (0..n).step_by(REF_TILE) {
        if mon.stopped() {
            return Vec::new();
        }
        let t1 = (t0 + REF_TILE).min(n);
        pending.clear();
        let limits: Vec<f64> = best.iter().map(|b| b.worst().f64() * widen).collect();
        if !keep {
            sweep(&mut products, t0, t1);
        }
        bounds.scan(&products[at(t0)..], stride, t0, t1, &limits, |i, j, near| pending.push((i, j, near)));
        // By reference, so that each row is read from memory once per block and tile.
        pending.sort_unstable_by_key(|&(i, j, _)| (j, i));
        for &(i, j, near) in &pending {
            if bounds.second(i, j, near) <= best[i].worst().f64() * widen && seen[i].binary_search(&j).is_err() {
                best[i].offer(sq_euclidean_wide(qrow(ids[i]), row_of(j)), j);
            }
        }
    }
    best.into_iter().map(Best::into_sorted).collect()
}

#[cfg(test)]
mod tests {
    use super::super::{Algorithm, Index, Inner, Neighbors};
    use crate::parallel::Monitor;
    use ndarray::Array2;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// Rank-`r` data plus noise in d features around `offset`, with duplicated rows; the
    /// components decay slowly (as image data's do), so that both tiers of bounds matter.
    fn low_rank(rng: &mut StdRng, n: usize, d: usize, r: usize, offset: f64) -> Array2<f64> {
        let basis = Array2::from_shape_fn((r, d), |_| rng.random::<f64>() - 0.5);
        let coef = Array2::from_shape_fn((n, r), |(_, c)| (rng.random::<f64>() * 4.0 - 2.0) / (1.0 + c as f64 / 8.0));
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
                let p = b.projection.as_ref().expect("low-rank data must get a projection");
                assert_eq!(p.basis.nrows() > p.m1, x.ncols() / 4 > super::DIRECTIONS, "a second tier exactly when d / 4 > DIRECTIONS");
                b.projection = None;
                b.product = Some(super::super::Product::new(b.x.view()).unwrap());
            }
            Inner::Tree(_) => unreachable!(),
        }
        (with, idx.knn(q.view(), k, &mon).unwrap())
    }

    /// The projected search equals the plain one, on the data and on it rounded to f32.
    fn same_in_f64_and_f32(x: &Array2<f64>, q: &Array2<f64>, k: usize, label: &str) {
        let (with, without) = both(x, q, k);
        assert_eq!((with.indices, with.distances), (without.indices, without.distances), "{label}");
        let (with, without) = both(&x.mapv(|v| v as f32), &q.mapv(|v| v as f32), k);
        assert_eq!((with.indices, with.distances), (without.indices, without.distances), "f32 {label}");
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
        // The last two have a second tier (d / 4 > 48 directions).
        for (d, r, offset) in [(96usize, 6, 0.0), (200, 6, 1e5), (70, 6, -3e3), (400, 60, 0.0), (784, 150, 1e4)] {
            let x = low_rank(&mut rng, 3000, d, r, offset);
            // Queries: some fitted rows (themselves and their duplicates at distance 0), some new.
            let mut q = low_rank(&mut rng, 130, d, r, offset);
            for i in 0..40 {
                q.row_mut(i).assign(&x.row(i * 11));
            }
            for k in [1usize, 10, 57] {
                same_in_f64_and_f32(&x, &q, k, &format!("d={d} offset={offset} k={k}"));
            }
        }
    }

    #[test]
    fn queries_that_are_the_references_reuse_their_projections() {
        let mut rng = StdRng::seed_from_u64(23);
        for (d, r) in [(96usize, 6), (784, 150)] {
            let x = low_rank(&mut rng, 2500, d, r, 3.0);
            let mut q = x.clone();
            q[[7, 3]] += 0.5; // one row differs: projected afresh
            for (q, k) in [(&x, 1usize), (&x, 9), (&q, 9)] {
                same_in_f64_and_f32(&x, q, k, &format!("d={d} k={k}"));
            }
        }
    }

    #[test]
    fn more_queries_than_a_segment() {
        let mut rng = StdRng::seed_from_u64(9);
        let x = low_rank(&mut rng, 2100, 72, 8, 0.0);
        let q = low_rank(&mut rng, super::SEGMENT + 300, 72, 8, 0.0);
        let (with, without) = both(&x, &q, 5);
        assert_eq!(with.indices, without.indices);
        assert_eq!(with.distances, without.distances);
    }

    #[test]
    fn the_same_for_any_thread_count() {
        let mut rng = StdRng::seed_from_u64(5);
        let x = low_rank(&mut rng, 2500, 300, 40, 0.0);
        let q = low_rank(&mut rng, 300, 300, 40, 0.0);
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
        // A spread spectrum in 100 features (a fifth of the energy beyond the 25 directions),
        // as principal coordinates of images have: the plain product is faster.
        assert!(!projected(&low_rank(&mut rng, 3000, 100, 100, 0.0)));
        assert!(projected(&low_rank(&mut rng, 3000, 100, 6, 0.0)));
        // Constant rows (no direction at all).
        assert!(!projected(&Array2::from_elem((3000, 100), 2.5)));
    }
}

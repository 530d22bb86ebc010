//! Triplet (hyperkernel) embedding: a ternary kernel over (anchor i, near j, far k) fitted
//! by points in a low-dimensional space.
//!
//! A triplet t = (i, j, k) with weight w_t contributes w_t · ℓ(d²_ij, d²_ik), d² squared
//! distances in the embedding. The losses:
//! * `TriMap`: ℓ = (1 + d²_ij) / (2 + d²_ij + d²_ik) = 1 − K_Y(i,j,k), where K_Y is the
//!   contrastive hyperkernel q_ij / (q_ij + q_ik) of the heavy-tailed similarity
//!   q = 1 / (1 + d²) (Amid & Warmuth's TriMap);
//! * `Linear`: ℓ = d²_ij − d²_ik (ternary MDS; with the contrastive kernel as weights it is
//!   MDS with similarities S_ij = Σ_k K(i,j,k), SPEC identity 8);
//! * `Ste`: ℓ = −log p, p = e^{−d²_ij} / (e^{−d²_ij} + e^{−d²_ik}) (stochastic triplet
//!   embedding); `TSte`: the same with the Student-t similarity (1 + d²/α)^{−(α+1)/2}.
//!
//! TriMap's data-side weights come from the contrastive hyperkernel of the data: with
//! s_ij = exp(−‖x_i − x_j‖² / (σ_i σ_j)) (σ_i a local scale), K(i,j,k) = s_ij / (s_ij + s_ik),
//! and the weight is the (tempered) log-odds log(s_ij / s_ik) = log(K / (1 − K)).

use super::{stream, Emitter, Scatter};
use crate::error::{LocalizationError, Result};
use crate::real::Real;
use crate::rows::row_major;
use crate::parallel::Monitor;
use ndarray::{Array2, ArrayView2, Zip};
use rand::Rng;
use rayon::prelude::*;

#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Loss {
    TriMap,
    Linear,
    Ste,
    TSte { alpha: f64 },
}

impl Loss {
    pub fn from_name(name: &str, alpha: f64) -> Result<Self> {
        match name {
            "trimap" => Ok(Loss::TriMap),
            "linear" => Ok(Loss::Linear),
            "ste" => Ok(Loss::Ste),
            "tste" | "t-ste" => {
                if !(alpha > 0.0) || !alpha.is_finite() {
                    return Err(LocalizationError::param("alpha", format!("must be finite and > 0, got {alpha}")));
                }
                Ok(Loss::TSte { alpha })
            }
            o => Err(LocalizationError::param("loss", format!("unknown triplet loss {o:?}; use 'trimap', 'linear', 'ste' or 'tste'"))),
        }
    }

    /// (ℓ, ∂ℓ/∂a, ∂ℓ/∂b) at a = d²_ij, b = d²_ik.
    #[inline(always)]
    fn eval(self, a: f64, b: f64) -> (f64, f64, f64) {
        match self {
            Loss::TriMap => {
                // One division: it dominates the arithmetic of a triplet.
                let inv = 1.0 / (2.0 + a + b);
                let inv2 = inv * inv;
                ((1.0 + a) * inv, (1.0 + b) * inv2, -(1.0 + a) * inv2)
            }
            Loss::Linear => (a - b, 1.0, -1.0),
            Loss::Ste => {
                // −log σ(b − a) = softplus(a − b), computed without overflow.
                let z = a - b;
                let l = if z > 0.0 { z + (-z).exp().ln_1p() } else { z.exp().ln_1p() };
                let one_minus_p = 1.0 / (1.0 + (-z).exp());
                (l, one_minus_p, -one_minus_p)
            }
            Loss::TSte { alpha } => {
                let e = -(alpha + 1.0) / 2.0;
                let la = e * (a / alpha).ln_1p();
                let lb = e * (b / alpha).ln_1p();
                // p = q_a / (q_a + q_b); −log p = log(1 + exp(lb − la))
                let z = lb - la;
                let l = if z > 0.0 { z + (-z).exp().ln_1p() } else { z.exp().ln_1p() };
                let one_minus_p = 1.0 / (1.0 + (-z).exp());
                let c = (alpha + 1.0) / 2.0 * one_minus_p;
                (l, c / (alpha + a), -c / (alpha + b))
            }
        }
    }

    /// A bound on |∂(w·ℓ)/∂y| per coordinate of one point in one triplet, per unit weight,
    /// given R ≥ the largest |y| (so |y_i − y_j| ≤ 2R).
    fn grad_bound(self, r: f64) -> f64 {
        match self {
            // 2(1+b)|y_ij|/(2+a+b)² ≤ 2|y|/(1+|y|²) ≤ 1, twice at the anchor.
            Loss::TriMap => 2.0,
            Loss::Linear | Loss::Ste => 2.0 * 2.0 * (2.0 * r) + 1.0,
            // (α+1)|y|/(α+|y|²) ≤ (α+1)/(2√α), twice at the anchor.
            Loss::TSte { alpha } => 2.0 * (alpha + 1.0) / (2.0 * alpha.sqrt()),
        }
    }
}

/// Triplets as (i, j, k) rows.
pub type Triplet = [u32; 3];

pub fn check_triplets(triplets: &[Triplet], weights: &[f64], n: usize) -> Result<()> {
    if weights.len() != triplets.len() {
        return Err(LocalizationError::shape("weights", format!("{} entries", triplets.len()), weights.len()));
    }
    if triplets.iter().any(|t| t.iter().any(|&v| v as usize >= n)) {
        return Err(LocalizationError::param("triplets", format!("indices must be in [0, {n})")));
    }
    if weights.iter().any(|w| !w.is_finite()) {
        return Err(LocalizationError::NonFinite { name: "weights" });
    }
    Ok(())
}

/// Anchor groups per parallel task.
const CHUNK: usize = 64;
const SMALL_Q: usize = 8;

/// Runs of consecutive triplets sharing their anchor i, as (start, end) ranges: the unit of
/// work of the gradient (the anchor's own gradient is summed locally, and triplets that
/// also share j reuse y_i − y_j).
pub fn anchor_groups(triplets: &[Triplet]) -> Vec<(usize, usize)> {
    let mut groups = Vec::new();
    let mut start = 0;
    for t in 1..=triplets.len() {
        if t == triplets.len() || triplets[t][0] != triplets[start][0] {
            groups.push((start, t));
            start = t;
        }
    }
    groups
}

/// Σ_t w_t ℓ(d²_ij, d²_ik) and its gradient with respect to every coordinate of `y`.
/// Bit-identical for any thread count (see [`Scatter`]); fastest when triplets sharing an
/// anchor (and, within it, a near point j) are consecutive.
pub fn loss_grad(y: ArrayView2<f64>, triplets: &[Triplet], weights: &[f64], loss: Loss) -> Result<(f64, Array2<f64>)> {
    check_triplets(triplets, weights, y.nrows())?;
    check_embedding(y, "embedding")?;
    Ok(loss_grad_grouped(y, triplets, &anchor_groups(triplets), weights, abs_sum(weights), loss, true))
}

/// Finite coordinates small enough that the gradient's fixed-point bound stays finite.
fn check_embedding(y: ArrayView2<f64>, name: &'static str) -> Result<()> {
    if y.iter().any(|v| !v.is_finite()) {
        return Err(LocalizationError::NonFinite { name });
    }
    if y.iter().any(|v| v.abs() > 1e100) {
        return Err(LocalizationError::param(name, "coordinates beyond 1e100 in magnitude"));
    }
    Ok(())
}

/// Σ|w_t|: it bounds the gradient (with [`Loss::grad_bound`]); the optimiser sums it once.
fn abs_sum(weights: &[f64]) -> f64 {
    weights.iter().map(|w| w.abs()).sum()
}

/// Whether this CPU has the packed truncation of [`super::Emitter::add_packed`].
fn packed_scatter() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        has!("avx512f") && has!("avx512dq") && has!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `packed`: scatter through [`super::Emitter::add_packed`] (only where [`packed_scatter`]);
/// the same bits either way.
fn loss_grad_grouped(
    y: ArrayView2<f64>, triplets: &[Triplet], groups: &[(usize, usize)], weights: &[f64], wsum: f64, loss: Loss, packed: bool,
) -> (f64, Array2<f64>) {
    let (n, q) = y.dim();
    let ys = row_major(y);
    let r = ys.iter().fold(0.0f64, |m, v| m.max(v.abs())) * (q as f64).sqrt();
    let sc = Scatter::new(n, q, wsum * loss.grad_bound(r));
    #[cfg(target_arch = "x86_64")]
    if packed && q == 2 && loss == Loss::TriMap && packed_scatter() {
        // SAFETY: the CPU supports the features the function is compiled for.
        return unsafe { trimap_plane(&sc, &ys, triplets, groups, weights) };
    }
    // One copy of the loop per loss and for the usual q = 2, 3: with the loss and the row
    // length known at compile time the per-triplet match and the short coordinate loops
    // (with their bounds checks) go away.
    macro_rules! by_q {
        ($eval:expr) => {
            match q {
                2 => grouped::<2>(&sc, &ys, triplets, groups, weights, $eval, packed),
                3 => grouped::<3>(&sc, &ys, triplets, groups, weights, $eval, packed),
                _ => grouped::<0>(&sc, &ys, triplets, groups, weights, $eval, packed),
            }
        };
    }
    match loss {
        Loss::TriMap => by_q!(|a, b| Loss::TriMap.eval(a, b)),
        Loss::Linear => by_q!(|a, b| Loss::Linear.eval(a, b)),
        Loss::Ste => by_q!(|a, b| Loss::Ste.eval(a, b)),
        Loss::TSte { alpha } => by_q!(move |a, b| Loss::TSte { alpha }.eval(a, b)),
    }
}

/// The body of [`loss_grad_grouped`] for rows of `Q` coordinates (`Q = 0`: any, `sc.q`);
/// `eval` is the loss's [`Loss::eval`].
#[allow(clippy::too_many_arguments)]
fn grouped<const Q: usize>(
    sc: &Scatter, ys: &[f64], triplets: &[Triplet], groups: &[(usize, usize)], weights: &[f64], eval: impl Fn(f64, f64) -> (f64, f64, f64) + Sync,
    packed: bool,
) -> (f64, Array2<f64>) {
    #[cfg(target_arch = "x86_64")]
    if packed && packed_scatter() {
        // SAFETY: the CPU supports the features the function is compiled for.
        return unsafe { grouped_packed::<Q>(sc, ys, triplets, groups, weights, eval) };
    }
    let _ = packed;
    let (g, total) = sc.run(groups, CHUNK, |_, &(start, end), emit| group::<Q, false>(sc.q, ys, &triplets[start..end], &weights[start..end], &eval, emit));
    (total, g)
}

/// [`grouped`] compiled for AVX-512DQ, whose packed truncation makes the fixed-point scatter
/// a sixth cheaper (the closure inherits the features, so the loop is compiled with them).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl")]
fn grouped_packed<const Q: usize>(
    sc: &Scatter, ys: &[f64], triplets: &[Triplet], groups: &[(usize, usize)], weights: &[f64], eval: impl Fn(f64, f64) -> (f64, f64, f64) + Sync,
) -> (f64, Array2<f64>) {
    let (g, total) = sc.run(groups, CHUNK, |_, &(start, end), emit| group::<Q, true>(sc.q, ys, &triplets[start..end], &weights[start..end], &eval, emit));
    (total, g)
}

/// One anchor's run of triplets: its loss, with the gradients emitted. `q` is only read when
/// `Q = 0`: the closure that calls this is not inlined into [`Scatter::run`], so a row length
/// it captured would be a load, not a constant, and the coordinate loops would not unroll
/// (they ran at half the speed).
/// TriMap's loss in the plane (TripletEmbedding's default), two triplets per instruction:
/// [`group`]'s arithmetic lane by lane, so the same bits. The division and the chain of
/// dependent steps around it bound the one-triplet loop (its latency, not its instruction
/// count); two independent triplets per register halve that chain per triplet.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl")]
fn trimap_plane(sc: &Scatter, ys: &[f64], triplets: &[Triplet], groups: &[(usize, usize)], weights: &[f64]) -> (f64, Array2<f64>) {
    // SAFETY (the closure inherits this function's features): see `trimap_pairs`.
    let (g, total) = sc.run(groups, CHUNK, |_, &(start, end), emit| unsafe { trimap_pairs(ys, &triplets[start..end], &weights[start..end], emit) });
    (total, g)
}

/// One anchor's run of triplets for [`trimap_plane`]: triplet t in the low half of a 256-bit
/// register, t + 1 in the high half (each half one point's two coordinates). The running
/// sums (the anchor's gradient, the near point's, the loss) then take the halves in triplet
/// order, as [`group`] does.
///
/// # Safety
/// The CPU must support AVX-512F, DQ and VL; every index of `triplets` must be a row of `ys`
/// (two coordinates per row).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl")]
unsafe fn trimap_pairs(ys: &[f64], triplets: &[Triplet], weights: &[f64], emit: &mut Emitter) -> f64 {
    use std::arch::x86_64::*;
    let n = triplets.len();
    // SAFETY: the caller guarantees the features and that the rows exist.
    unsafe {
        let row = |r: u32| _mm_loadu_pd(ys.as_ptr().add(2 * r as usize));
        let yi = _mm256_broadcast_pd(&row(triplets[0][0]));
        let (one, two, minus) = (_mm256_set1_pd(1.0), _mm256_set1_pd(2.0), _mm256_set1_pd(-0.0));
        let (mut gi, mut gj) = (_mm_setzero_pd(), _mm_setzero_pd());
        let (mut cur_j, mut total) = (usize::MAX, 0.0);
        for t in (0..n).step_by(2) {
            // An odd run's last triplet fills both halves; the high one is then ignored.
            let u = (t + 1).min(n - 1);
            for ahead in [t + PREFETCH, t + 1 + PREFETCH] {
                if let Some(&[_, _, k]) = triplets.get(ahead) {
                    prefetch(ys.as_ptr().wrapping_add(2 * k as usize));
                    emit.prefetch(k as usize);
                }
            }
            let ([_, ja, ka], [_, jb, kb]) = (triplets[t], triplets[u]);
            let uij = _mm256_sub_pd(yi, _mm256_set_m128d(row(jb), row(ja)));
            let dk = _mm256_sub_pd(yi, _mm256_set_m128d(row(kb), row(ka)));
            // Squared norms in both lanes of a half: s0 + s1, which is group's 0 + s0 + s1.
            let (su, sk) = (_mm256_mul_pd(uij, uij), _mm256_mul_pd(dk, dk));
            let a = _mm256_add_pd(su, _mm256_permute_pd::<0b0101>(su));
            let b = _mm256_add_pd(sk, _mm256_permute_pd::<0b0101>(sk));
            // Loss::TriMap's eval, then group's coefficients, in the same order.
            let inv = _mm256_div_pd(one, _mm256_add_pd(_mm256_add_pd(two, a), b));
            let inv2 = _mm256_mul_pd(inv, inv);
            let one_a = _mm256_add_pd(one, a);
            let l = _mm256_mul_pd(one_a, inv);
            let la = _mm256_mul_pd(_mm256_add_pd(one, b), inv2);
            let lb = _mm256_mul_pd(_mm256_xor_pd(one_a, minus), inv2);
            let w = _mm256_set_pd(weights[u], weights[u], weights[t], weights[t]);
            let w2 = _mm256_mul_pd(two, w);
            let (ca, cb) = (_mm256_mul_pd(w2, la), _mm256_mul_pd(w2, lb));
            let to_j = _mm256_mul_pd(ca, uij);
            let to_i = _mm256_add_pd(to_j, _mm256_mul_pd(cb, dk));
            let to_k = _mm256_mul_pd(dk, _mm256_xor_pd(cb, minus));
            let wl = _mm256_mul_pd(w, l);
            // Triplet t's half, then (unless the run ended) t + 1's.
            let mut take = |j: u32, k: u32, to_j: __m128d, to_i: __m128d, to_k: __m128d, wl: __m128d| {
                let j = j as usize;
                if j != cur_j {
                    if cur_j != usize::MAX {
                        emit.add_pair(cur_j, 0, gj);
                    }
                    cur_j = j;
                    gj = _mm_setzero_pd();
                }
                gi = _mm_add_pd(gi, to_i);
                gj = _mm_sub_pd(gj, to_j);
                emit.add_pair(k as usize, 0, to_k);
                total += _mm_cvtsd_f64(wl);
            };
            let low = _mm256_castpd256_pd128;
            take(ja, ka, low(to_j), low(to_i), low(to_k), low(wl));
            if u > t {
                let high = _mm256_extractf128_pd::<1>;
                take(jb, kb, high(to_j), high(to_i), high(to_k), high(wl));
            }
        }
        if cur_j != usize::MAX {
            emit.add_pair(cur_j, 0, gj);
        }
        emit.add_pair(triplets[0][0] as usize, 0, gi);
        total
    }
}

/// `PACKED`: scatter with [`Emitter::add_packed`]; only [`grouped_packed`], compiled for and
/// dispatched on its features, instantiates it.
#[inline(always)]
fn group<const Q: usize, const PACKED: bool>(
    q: usize, ys: &[f64], triplets: &[Triplet], weights: &[f64], eval: &impl Fn(f64, f64) -> (f64, f64, f64), emit: &mut Emitter,
) -> f64 {
    let q = if Q == 0 { q } else { Q };
    let add = |emit: &mut Emitter, row: usize, v: &[f64]| {
        #[cfg(target_arch = "x86_64")]
        if PACKED {
            // SAFETY: see above.
            return unsafe { emit.add_packed(row, 0, v) };
        }
        emit.add(row, 0, v)
    };
    let row = |i: usize| &ys[i * q..(i + 1) * q];
    // Scratch rows on the stack for the usual small q: the anchor's gradient, the current
    // near point's, one far point's, and y_i − y_j.
    let mut stack = [0.0f64; 4 * SMALL_Q];
    let mut heap = Vec::new();
    let buf: &mut [f64] = if q <= SMALL_Q { &mut stack[..4 * q] } else { heap.resize(4 * q, 0.0); &mut heap };
    let (gi, rest) = buf.split_at_mut(q);
    let (gj, rest) = rest.split_at_mut(q);
    let (gk, uij) = rest.split_at_mut(q);
    let i = triplets[0][0] as usize;
    let yi = row(i);
    let mut cur_j = usize::MAX;
    let mut a = 0.0;
    let mut total = 0.0;
    for (t, (&[_, j, k], &w)) in triplets.iter().zip(weights).enumerate() {
        let (j, k) = (j as usize, k as usize);
        if let Some(&[_, _, ahead]) = triplets.get(t + PREFETCH) {
            let ahead = ahead as usize;
            prefetch(ys.as_ptr().wrapping_add(ahead * q));
            emit.prefetch(ahead);
        }
        if j != cur_j {
            if cur_j != usize::MAX {
                add(emit, cur_j, gj);
            }
            cur_j = j;
            gj.fill(0.0);
            let yj = row(j);
            a = 0.0;
            for c in 0..q {
                uij[c] = yi[c] - yj[c];
                a += uij[c] * uij[c];
            }
        }
        let yk = row(k);
        let mut b = 0.0;
        for c in 0..q {
            gk[c] = yi[c] - yk[c];
            b += gk[c] * gk[c];
        }
        let (l, la, lb) = eval(a, b);
        let (ca, cb) = (2.0 * w * la, 2.0 * w * lb);
        for c in 0..q {
            gi[c] += ca * uij[c] + cb * gk[c];
            gj[c] -= ca * uij[c];
            gk[c] *= -cb;
        }
        add(emit, k, gk);
        total += w * l;
    }
    if cur_j != usize::MAX {
        add(emit, cur_j, gj);
    }
    add(emit, i, gi);
    total
}

/// Triplets ahead whose far point's row and gradient entries are fetched into the cache:
/// the row is read and the entries updated at random, and waiting on the second-level cache
/// lengthened every triplet's chain of dependent instructions.
const PREFETCH: usize = 8;

/// A hint to load the cache line holding `p` (any address: a prefetch never faults).
#[inline(always)]
pub(super) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of every x86-64 CPU, and a prefetch does not dereference `p`.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
    }
}

/// How TriMap samples its triplets (defaults of the reference implementation).
#[derive(Clone, Debug)]
pub struct Sampling {
    pub n_inliers: usize,
    pub n_outliers: usize,
    pub n_random: usize,
    /// Temperature t of the tempered log applied to the weights (0: none, 1: log).
    pub weight_temp: f64,
    /// Factor on the random triplets' weights.
    pub random_weight: f64,
    pub seed: u64,
}

impl Sampling {
    fn validate(&self, n: usize, listed: usize) -> Result<()> {
        if self.n_inliers == 0 {
            return Err(LocalizationError::param("n_inliers", "must be at least 1"));
        }
        if self.n_outliers == 0 {
            return Err(LocalizationError::param("n_outliers", "must be at least 1"));
        }
        if self.n_inliers + 1 > listed {
            return Err(LocalizationError::param("n_inliers", format!("needs at least n_inliers + 1 = {} listed neighbours (self included), got {listed}", self.n_inliers + 1)));
        }
        if self.n_inliers + self.n_outliers + 1 > n {
            return Err(LocalizationError::param(
                "n_inliers",
                format!("n_inliers + n_outliers + 1 = {} exceeds n_samples = {n}", self.n_inliers + self.n_outliers + 1),
            ));
        }
        if self.n_random > 0 && n < 3 {
            return Err(LocalizationError::param("n_random", "random triplets need at least 3 samples"));
        }
        if !(self.weight_temp >= 0.0) || !self.weight_temp.is_finite() {
            return Err(LocalizationError::param("weight_temp", "must be finite and non-negative"));
        }
        Ok(())
    }
}

/// Σ (a − b)² accumulated in f64. Eight interleaved partial sums let long rows vectorise: as
/// a scalar loop, the sampling's distances in 784 dimensions took a quarter of a fit.
fn sq_dist<F: Real>(a: &[F], b: &[F]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { sq_dist_avx2(a, b) };
    }
    sq_dist_with(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sq_dist_avx2<F: Real>(a: &[F], b: &[F]) -> f64 {
    sq_dist_with(a, b)
}

#[inline(always)]
fn sq_dist_with<F: Real>(a: &[F], b: &[F]) -> f64 {
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f64 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| (x.f64() - y.f64()) * (x.f64() - y.f64())).sum();
    let mut acc = [0.0f64; 8];
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            let t = x[l].f64() - y[l].f64();
            acc[l] += t * t;
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// TriMap's triplets and weights from the data `x` and its nearest neighbours.
///
/// `nbrs`/`dists` are n × `listed`, row i listing i's nearest samples by increasing
/// distance with i itself first. For each i: its `n_inliers` nearest samples by the scaled
/// distance d²/(σ_i σ_j) (σ_i = mean distance to the 4th–6th neighbours), each with
/// `n_outliers` samples drawn uniformly outside the nearer ones; then `n_random` triplets of
/// two uniformly drawn samples ordered by their similarity to i. The weight of (i, j, k) is
/// log(s_ij / s_ik) (random ones scaled by `random_weight`), shifted to be ≥ 0 and passed
/// through the tempered log 1 + w ↦ ((1 + w)^{1−t} − 1)/(1 − t).
pub fn sample_trimap<F: Real>(x: ArrayView2<F>, nbrs: &[usize], dists: &[F], listed: usize, s: &Sampling) -> Result<(Vec<Triplet>, Vec<f64>)> {
    let n = x.nrows();
    if n > u32::MAX as usize {
        return Err(LocalizationError::param("X", "at most 2³² − 1 samples"));
    }
    if listed == 0 || nbrs.len() != n * listed || dists.len() != n * listed {
        return Err(LocalizationError::shape("neighbors", format!("{n} × {listed}"), nbrs.len()));
    }
    if nbrs.iter().any(|&j| j >= n) {
        return Err(LocalizationError::param("neighbors", format!("indices must be in [0, {n})")));
    }
    s.validate(n, listed)?;
    let d = x.ncols();
    let xs = row_major(x);
    let xr = |i: usize| &xs[i * d..(i + 1) * d];
    // Local scale σ_i: mean distance to the 4th-6th listed neighbours (self is the 1st).
    let (c0, c1) = (3.min(listed - 1), 6.min(listed));
    let sig: Vec<f64> = (0..n)
        .map(|i| {
            let r = &dists[i * listed..(i + 1) * listed];
            let m = if c1 > c0 { r[c0..c1].iter().map(|v| v.f64()).sum::<f64>() / (c1 - c0) as f64 } else { r[listed - 1].f64() };
            m.max(1e-10)
        })
        .collect();
    let per = s.n_inliers * s.n_outliers;
    let knn: Vec<(Vec<Triplet>, Vec<f64>)> = (0..n)
        .into_par_iter()
        .map(|i| -> Result<(Vec<Triplet>, Vec<f64>)> {
            let nb = &nbrs[i * listed..(i + 1) * listed];
            let dd = &dists[i * listed..(i + 1) * listed];
            // log s_ij for the listed neighbours, sorted by decreasing similarity.
            let mut p: Vec<(f64, usize)> = nb.iter().zip(dd).map(|(&j, &dj)| (-(dj.f64() * dj.f64()) / (sig[i] * sig[j]), j)).collect();
            p.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            // Each sample once, and i itself first whatever the ties (duplicates of x_i can
            // push it down or off the list): it is never an inlier, and the n_inliers + 1
            // excluded samples then leave ≥ n_outliers candidates (checked on entry).
            let mut seen = std::collections::HashSet::with_capacity(p.len());
            p.retain(|e| e.1 != i && seen.insert(e.1));
            p.insert(0, (0.0, i));
            if p.len() < s.n_inliers + 1 {
                return Err(LocalizationError::param("neighbors", format!("row {i} lists fewer than n_inliers = {} other samples", s.n_inliers)));
            }
            let mut rng = stream(s.seed, 0, i as u64);
            let mut tr = Vec::with_capacity(per);
            let mut w = Vec::with_capacity(per);
            let mut drawn: Vec<usize> = Vec::with_capacity(s.n_outliers);
            for jj in 0..s.n_inliers {
                let (p_sim, j) = p[jj + 1];
                let rejects = &p[..jj + 2];
                drawn.clear();
                while drawn.len() < s.n_outliers {
                    let k = rng.random_range(0..n);
                    if k != i && !drawn.contains(&k) && !rejects.iter().any(|e| e.1 == k) {
                        drawn.push(k);
                    }
                }
                for &k in &drawn {
                    let p_out = -sq_dist(xr(i), xr(k)) / (sig[i] * sig[k]);
                    tr.push([i as u32, j as u32, k as u32]);
                    w.push(p_sim - p_out);
                }
            }
            Ok((tr, w))
        })
        .collect::<Result<_>>()?;
    let random: Vec<(Vec<Triplet>, Vec<f64>)> = (0..n)
        .into_par_iter()
        .map(|i| {
            let mut rng = stream(s.seed, 1, i as u64);
            let mut tr = Vec::with_capacity(s.n_random);
            let mut w = Vec::with_capacity(s.n_random);
            for _ in 0..s.n_random {
                let mut sim = rng.random_range(0..n);
                while sim == i {
                    sim = rng.random_range(0..n);
                }
                let mut out = rng.random_range(0..n);
                while out == i || out == sim {
                    out = rng.random_range(0..n);
                }
                let mut p_sim = -sq_dist(xr(i), xr(sim)) / (sig[i] * sig[sim]);
                let mut p_out = -sq_dist(xr(i), xr(out)) / (sig[i] * sig[out]);
                if p_sim < p_out {
                    std::mem::swap(&mut sim, &mut out);
                    std::mem::swap(&mut p_sim, &mut p_out);
                }
                tr.push([i as u32, sim as u32, out as u32]);
                w.push(s.random_weight * (p_sim - p_out));
            }
            (tr, w)
        })
        .collect();
    // Each anchor's near triplets, then its random ones: one run per anchor, the gradient's
    // unit of work (two runs per anchor, half of them of n_random triplets, made the parallel
    // parts uneven and cost a quarter more emits).
    let mut triplets = Vec::with_capacity(n * (per + s.n_random));
    let mut weights = Vec::with_capacity(n * (per + s.n_random));
    for ((t, w), (rt, rw)) in knn.into_iter().zip(random) {
        triplets.extend(t.into_iter().chain(rt));
        weights.extend(w.into_iter().chain(rw));
    }
    for w in weights.iter_mut() {
        if w.is_nan() {
            *w = 0.0;
        }
    }
    let lo = weights.iter().copied().fold(f64::INFINITY, f64::min);
    let t = s.weight_temp;
    for w in weights.iter_mut() {
        let v = 1.0 + (*w - lo);
        *w = if (t - 1.0).abs() < 1e-5 { v.ln() } else { (v.powf(1.0 - t) - 1.0) / (1.0 - t) };
    }
    Ok((triplets, weights))
}

/// TriMap's optimiser: gradient at the look-ahead point y + γ·v (Nesterov momentum, γ from
/// 0.5 to 0.8 after 250 iterations) with per-coordinate delta-bar-delta gains.
#[derive(Clone, Debug)]
pub struct Optimizer {
    pub learning_rate: f64,
    pub n_iter: usize,
}

#[derive(Clone, Debug)]
pub struct Fitted {
    pub y: Array2<f64>,
    /// Mean loss per triplet at each iteration's look-ahead point.
    pub loss: Vec<f64>,
}

const SWITCH_MOMENTUM: usize = 250;
/// Coordinates below which the optimiser's update runs on the calling thread.
const SERIAL_UPDATE: usize = 1 << 16;

/// TriMap's optimiser from `y0`: the gradient at the look-ahead point y + γv, Nesterov
/// momentum and delta-bar-delta gains.
///
/// Call it inside the pool that should do the work; it reports each finished iteration to
/// `mon` and returns `Interrupted` between iterations once `mon` is stopped.
pub fn optimize(y0: ArrayView2<f64>, triplets: &[Triplet], weights: &[f64], loss: Loss, opt: &Optimizer, mon: &Monitor) -> Result<Fitted> {
    if !(opt.learning_rate > 0.0) || !opt.learning_rate.is_finite() {
        return Err(LocalizationError::param("learning_rate", "must be finite and > 0"));
    }
    check_embedding(y0, "init")?;
    check_triplets(triplets, weights, y0.nrows())?;
    let groups = anchor_groups(triplets);
    let wsum = abs_sum(weights);
    let mut y = y0.as_standard_layout().into_owned();
    let mut vel = Array2::<f64>::zeros(y.dim());
    let mut gain = Array2::<f64>::ones(y.dim());
    let mut history = Vec::with_capacity(opt.n_iter);
    let nt = triplets.len().max(1) as f64;
    mon.set_progress(0, opt.n_iter);
    for it in 0..opt.n_iter {
        mon.check()?;
        let gamma = if it > SWITCH_MOMENTUM { 0.8 } else { 0.5 };
        let l = {
            let mut look = y.clone();
            look.scaled_add(gamma, &vel);
            let (l, g) = loss_grad_grouped(look.view(), triplets, &groups, weights, wsum, loss, true);
            let step = |y: &mut f64, v: &mut f64, gn: &mut f64, &g: &f64| {
                *gn = if sign(*v) != sign(g) { *gn + 0.2 } else { (*gn * 0.8).max(0.01) };
                *v = gamma * *v - opt.learning_rate * *gn * g;
                *y += *v;
            };
            let zip = Zip::from(&mut y).and(&mut vel).and(&mut gain).and(&g);
            // Waking the pool for a small embedding cost more than the update itself.
            if g.len() < SERIAL_UPDATE {
                zip.for_each(step);
            } else {
                zip.par_for_each(step);
            }
            l
        };
        history.push(l / nt);
        mon.set_progress(it + 1, opt.n_iter);
        if check_embedding(y.view(), "embedding").is_err() {
            return Err(LocalizationError::param("learning_rate", format!("the embedding diverged at iteration {}; lower it", it + 1)));
        }
    }
    Ok(Fitted { y, loss: history })
}

/// NumPy's sign: −1, 0 or 1.
#[inline(always)]
fn sign(v: f64) -> i8 {
    if v > 0.0 {
        1
    } else if v < 0.0 {
        -1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    fn naive(y: &Array2<f64>, tr: &[Triplet], w: &[f64], loss: Loss) -> f64 {
        tr.iter()
            .zip(w)
            .map(|(t, &w)| {
                let d2 = |a: usize, b: usize| (0..y.ncols()).map(|c| (y[(a, c)] - y[(b, c)]).powi(2)).sum::<f64>();
                w * loss.eval(d2(t[0] as usize, t[1] as usize), d2(t[0] as usize, t[2] as usize)).0
            })
            .sum()
    }

    #[test]
    fn gradients_match_finite_differences() {
        let mut rng = StdRng::seed_from_u64(0);
        // q = 2 and 3 have their own copies of the loop; 5 takes the general one.
        for q in [2, 3, 5] {
            let y = Array2::from_shape_fn((12, q), |_| rng.random::<f64>() * 2.0 - 1.0);
            let mut tr: Vec<Triplet> = (0..60).map(|_| [rng.random_range(0..12), rng.random_range(0..12), rng.random_range(0..12)]).collect();
            // Runs sharing the anchor and the near point, as the sampled triplets come.
            tr.sort();
            let w: Vec<f64> = (0..60).map(|_| rng.random::<f64>()).collect();
            for loss in [Loss::TriMap, Loss::Linear, Loss::Ste, Loss::TSte { alpha: 1.5 }] {
                let (l, g) = loss_grad(y.view(), &tr, &w, loss).unwrap();
                assert!((l - naive(&y, &tr, &w, loss)).abs() < 1e-12);
                for idx in [(0, 0), (3, 1), (11, q - 1), (7, 0)] {
                    let h = 1e-6;
                    let (mut a, mut b) = (y.clone(), y.clone());
                    a[idx] += h;
                    b[idx] -= h;
                    let fd = (naive(&a, &tr, &w, loss) - naive(&b, &tr, &w, loss)) / (2.0 * h);
                    assert!((fd - g[idx]).abs() < 1e-6 * (1.0 + fd.abs()), "q={q} {loss:?} {idx:?} {fd} {}", g[idx]);
                }
            }
        }
    }

    #[test]
    fn the_packed_scatter_gives_the_same_bits() {
        if !packed_scatter() {
            return;
        }
        let mut rng = StdRng::seed_from_u64(3);
        for q in [2, 3, 5] {
            let n = 500;
            let y = Array2::from_shape_fn((n, q), |_| (rng.random::<f64>() - 0.5) * 10f64.powi(rng.random_range(-3..3)));
            let mut tr: Vec<Triplet> = (0..20_000).map(|_| [rng.random_range(0..n as u32), rng.random_range(0..n as u32), rng.random_range(0..n as u32)]).collect();
            tr.sort();
            let w: Vec<f64> = (0..tr.len()).map(|_| rng.random::<f64>() * 3.0 - 1.0).collect();
            let groups = anchor_groups(&tr);
            for loss in [Loss::TriMap, Loss::Linear, Loss::Ste, Loss::TSte { alpha: 1.5 }] {
                let run = |packed| loss_grad_grouped(y.view(), &tr, &groups, &w, abs_sum(&w), loss, packed);
                let ((l0, g0), (l1, g1)) = (run(false), run(true));
                assert_eq!(l0.to_bits(), l1.to_bits(), "q={q} {loss:?}");
                assert!(g0.iter().zip(&g1).all(|(a, b)| a.to_bits() == b.to_bits()), "q={q} {loss:?}");
            }
        }
    }

    #[test]
    fn sampling_and_fit_do_not_depend_on_threads() {
        let mut rng = StdRng::seed_from_u64(1);
        let n = 300;
        let x = Array2::from_shape_fn((n, 5), |_| rng.random::<f64>());
        let listed = 20;
        let mut nbrs = Vec::new();
        let mut dists = Vec::new();
        for i in 0..n {
            let mut d: Vec<(f64, usize)> = (0..n).map(|j| (sq_dist(x.row(i).as_slice().unwrap(), x.row(j).as_slice().unwrap()).sqrt(), j)).collect();
            d.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            for &(dj, j) in &d[..listed] {
                nbrs.push(j);
                dists.push(dj);
            }
        }
        let s = Sampling { n_inliers: 6, n_outliers: 3, n_random: 2, weight_temp: 0.5, random_weight: 0.1, seed: 7 };
        let run = |threads: usize| {
            rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(|| {
                let (tr, w) = sample_trimap(x.view(), &nbrs, &dists, listed, &s).unwrap();
                let y0 = Array2::from_shape_fn((n, 2), |(i, c)| 0.01 * x[(i, c)]);
                let f = optimize(y0.view(), &tr, &w, Loss::TriMap, &Optimizer { learning_rate: 0.05, n_iter: 30 }, &Monitor::default()).unwrap();
                (tr, w, f.y)
            })
        };
        let (t1, w1, y1) = run(1);
        let (t3, w3, y3) = run(3);
        assert_eq!(t1, t3);
        assert_eq!(w1, w3);
        assert_eq!(y1, y3);
        assert_eq!(t1.len(), n * (6 * 3 + 2));
        assert!(w1.iter().all(|&w| w >= 0.0));
        for (t, tr) in t1.iter().enumerate() {
            assert_eq!(tr[0] as usize, t / 20);
            assert!(tr[2] != tr[0] && tr[2] != tr[1]);
        }
    }
}

#[cfg(test)]
mod bench {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};
    use std::time::Instant;

    /// `cargo test --release bench_loss_grad -- --ignored --nocapture`: ns per triplet.
    #[test]
    #[ignore]
    fn bench_loss_grad() {
        let mut rng = StdRng::seed_from_u64(0);
        let n = 10_000;
        let y = Array2::from_shape_fn((n, 2), |_| rng.random::<f64>());
        let tr: Vec<Triplet> = (0..n * 51).map(|t| [(t / 51) as u32, rng.random_range(0..n as u32), rng.random_range(0..n as u32)]).collect();
        let w: Vec<f64> = (0..tr.len()).map(|_| rng.random::<f64>()).collect();
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let t0 = Instant::now();
            for _ in 0..20 {
                pool.install(|| loss_grad(y.view(), &tr, &w, Loss::TriMap).unwrap());
            }
            println!("threads {threads}: {:.1} ns per triplet", t0.elapsed().as_nanos() as f64 / 20.0 / tr.len() as f64);
        }
    }
}

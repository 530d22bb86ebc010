//! Gaussian sums through Chebyshev interpolation on a grid of panels: in two or three features,
//! at bandwidths that are a sizeable part of the data's extent, where every query meets most
//! samples and the two-sided series (`expansion`) has too many terms per pair of clusters.
//!
//! In bandwidth units the box holding queries and samples is cut into panels of side at most
//! s, each with p Chebyshev nodes per axis. The kernel factorises over the features,
//! K(q, x) = Π_k g(x_k − q_k) with g(t) = exp(−t²/2), so interpolating it in both arguments
//! on the nodes ξ gives
//!
//!   Σ_j w_j K(q, x_j) ≈ Σ_a ℓ_a(q) Σ_b K(ξ_a, ξ_b) W_b,   W_b = Σ_j w_j ℓ_b(x_j)
//!
//! (ℓ the tensor Lagrange basis of the panel a point lies in): the samples are spread onto
//! their panel's nodes (p^d per sample), the node values are convolved with g along each axis
//! in turn (a banded block-Toeplitz product per axis), and each query reads its panel's nodes
//! (p^d per query). Nothing scales with n·m.
//!
//! Error. g's derivatives are bounded by Cramér's inequality, |g⁽ᵖ⁾| ≤ κ √(p!) (κ < 1.0865),
//! so interpolating g(x − q) in x on p Chebyshev nodes over an interval of length s errs by at
//! most e₁ = 2κ (s/4)^p / √(p!). Over d features (Lebesgue constant Λ ≤ 1 + (2/π) ln(p + 1)
//! per axis) the kernel interpolated in x errs by e₁ (1 + Λ + … + Λ^(d−1)), and interpolating
//! that in q multiplies by 1 + Λ^d; node pairs farther apart than a reach R along an axis are
//! left out, at most d Λ^(2d) e^(−R²/2) more. Per query the sums err by at most that bound
//! times Σ_j |w_j| (times max |v| for sums of values). A query is answered here only when the
//! bound is within the tolerance of its own Σ |w| K (its computed value less the bound); the
//! others (far from most of the mass) are returned for the caller to sum exactly. The bound
//! leaves rounding out: the node values are sums of positive kernel values times Lagrange
//! weights of mixed sign, and their rounding was measured at a few 10⁻¹⁶ of the query's own
//! Σ |w| K, and up to about 3·10⁻¹³ where that sum comes from heavy mass a few bandwidths
//! away (the nodes between are nearer to it than the query, so larger terms cancel; docs/engine.md).
//!
//! Design moments Σ K (x − q)^γ take the same spread values through the kernels
//! t^γ e^{−t²/2} per axis (`moment_factors` bounds what t^m adds to the error).

use super::expansion::upto;
use super::types::{LocalSums, Options, Problem};
use crate::error::Result;
use crate::memory;
use crate::parallel::Monitor;
use crate::real::Real;
use ndarray::linalg::general_mat_mul;
use ndarray::{s, Array2, ArrayView2, ArrayViewMut2};
use rayon::prelude::*;

/// Features the grid takes: its nodes grow as p^d.
pub(super) const MAX_DIM: usize = 3;

/// Cramér's constant: |H_n(t)| e^{−t²/2} ≤ κ 2^{n/2} √(n!), so |g⁽ⁿ⁾| ≤ κ √(n!).
const CRAMER: f64 = 1.086_435;

/// The bound is chosen this far below the tolerance, so that every query whose Σ |w| K is
/// at least this share of Σ |w| is answered from the grid.
const MASS_SHARE: f64 = 1e-4;

/// Panel sides tried, in bandwidths: larger panels need fewer nodes per bandwidth (the
/// interpolation converges faster than geometrically) but cost p^d per point.
const SIDES: [f64; 7] = [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0];

/// Largest number of grid values held at once (1 GB): two buffers of nodes × columns, three
/// with design moments (the spread values stay while each moment is convolved).
const MAX_VALUES: usize = 1 << 27;

/// Points per block of the spreading and reading products (their Lagrange tables stay in cache).
const CHUNK: usize = 256;

/// Modelled cost of one pair of the direct loop, in multiply-adds of the grid's products
/// (a pair is an exponential and its sums; the products run near the FMA units' peak).
const DIRECT_PAIR: f64 = 24.0;

/// A plan: panels per axis, their sides, the nodes per panel and the bound it guarantees.
pub(super) struct Grid {
    d: usize,
    p: usize,
    panels: Vec<usize>,
    side: Vec<f64>,
    /// Panels reached along each axis (the band of the convolution).
    band: Vec<usize>,
    origin: Vec<f64>,
    h: f64,
    inv_h: f64,
    /// Local polynomial degree of the design moments to return.
    degree: Option<usize>,
    /// Error per query per unit of Σ |w| (and of Σ |w v| for sums of values; of h^|γ| Σ |w|
    /// for the moments Σ K (x − q)^γ).
    bound: f64,
    tolerance: f64,
    /// Modelled cost in multiply-adds, and that of the direct pair loop.
    pub cost: f64,
    pub direct: f64,
}

/// 1 + (2/π) ln(p + 1): the Lebesgue constant of p Chebyshev nodes is below it.
fn lebesgue(p: usize) -> f64 {
    1.0 + std::f64::consts::FRAC_2_PI * ((p + 1) as f64).ln()
}

/// For the factors t^m e^{−t²/2} of the moments' kernels, m ≤ `power`: the largest of their
/// suprema, (m/e)^{m/2}, and the largest factor by which their p-th derivative can exceed g's
/// bound κ √(p!). With t^m = Σ_k m!/(k! 2^k (m − 2k)!) He_{m−2k}(t) and He_j(t) e^{−t²/2} =
/// (−1)^j g⁽ʲ⁾(t), that factor is Σ_k m!/(k! 2^k (m − 2k)!) √((p + m − 2k)!/p!).
fn moment_factors(p: usize, power: u32) -> (f64, f64) {
    let fact = |n: u32| (1..=n).map(f64::from).product::<f64>();
    let (mut sup, mut growth) = (1.0f64, 1.0f64);
    for m in 1..=power {
        sup = sup.max((f64::from(m) / std::f64::consts::E).powf(0.5 * f64::from(m)));
        let g: f64 = (0..=m / 2)
            .map(|k| fact(m) / (fact(k) * 2f64.powi(k as i32) * fact(m - 2 * k)) * (1..=m - 2 * k).map(|i| (p as f64 + f64::from(i)).sqrt()).product::<f64>())
            .sum();
        growth = growth.max(g);
    }
    (sup, growth)
}

/// The interpolation part of the bound (both sides, d features), per unit of mass, for the
/// kernels of moments of degree up to `power` per feature.
fn interpolation_bound(p: usize, s: f64, d: usize, power: u32) -> f64 {
    let ln_fact: f64 = (2..=p).map(|k| (k as f64).ln()).sum();
    let e1 = (2.0 * CRAMER).ln() + p as f64 * (s / 4.0).ln() - 0.5 * ln_fact;
    let lam = lebesgue(p);
    let (sup, growth) = moment_factors(p, power);
    let sum: f64 = (0..d).map(|k| lam.powi(k as i32)).sum();
    e1.exp() * growth * sup.powi(d as i32 - 1) * sum * (1.0 + lam.powi(d as i32))
}

/// The bound of the node pairs left out beyond reach `r` along some axis.
fn band_bound(p: usize, d: usize, power: u32, r: f64) -> f64 {
    let (sup, _) = moment_factors(p, power);
    d as f64 * lebesgue(p).powi(2 * d as i32) * sup.powi(d as i32 - 1) * r.powi(power as i32) * (-0.5 * r * r).exp()
}

/// The reach beyond which node pairs are left out, for a share `eps` of the bound.
fn reach(p: usize, d: usize, power: u32, eps: f64) -> f64 {
    let mut r = 1.0;
    while band_bound(p, d, power, r) > eps {
        r += 0.125;
    }
    r
}

/// Exponents of the local polynomial basis of `degree` in d features: 1, then x_k, then
/// x_a x_c (a ≤ c), as the engine's moments order them.
fn basis_exponents(d: usize, degree: usize) -> Vec<Vec<u32>> {
    let unit = |k: usize| (0..d).map(|l| u32::from(l == k)).collect::<Vec<u32>>();
    let mut b = vec![vec![0; d]];
    if degree >= 1 {
        b.extend((0..d).map(unit));
    }
    if degree >= 2 {
        for a in 0..d {
            for c in a..d {
                b.push(unit(a).iter().zip(unit(c)).map(|(x, y)| x + y).collect());
            }
        }
    }
    b
}

/// Lower and upper corner of the rows' bounding box, per feature.
fn bounds<F: Real>(x: ArrayView2<F>) -> Vec<(f64, f64)> {
    x.columns()
        .into_iter()
        .map(|c| c.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| (l.min(v.f64()), h.max(v.f64()))))
        .collect()
}

impl Grid {
    /// The cheapest grid for these queries and samples whose bound is `tolerance · MASS_SHARE`,
    /// with its modelled cost and that of the direct pair loop; None when no grid fits in
    /// `MAX_VALUES`.
    pub fn plan<F: Real>(pb: &Problem<F>, h: f64, degree: Option<usize>, tolerance: f64) -> Option<Self> {
        let (n, d) = pb.x.dim();
        let m = pb.queries.nrows();
        if d == 0 || d > MAX_DIM || n == 0 || m == 0 {
            return None;
        }
        let inv_h = 1.0 / h;
        let (bx, bq) = (bounds(pb.x), bounds(pb.queries));
        let origin: Vec<f64> = (0..d).map(|k| bx[k].0.min(bq[k].0)).collect();
        let extent: Vec<f64> = (0..d).map(|k| (bx[k].1.max(bq[k].1) - origin[k]) * inv_h).collect();
        // Design moments of data narrower than a bandwidth are mostly below the bound's unit
        // h^|γ| (no query would pass `moments_covered`); the series or the direct loop serves them.
        if extent.iter().any(|e| !e.is_finite() || (degree.is_some() && *e < 1.0)) {
            return None;
        }
        let cols = Self::columns(pb);
        let nv = pb.values.as_ref().map_or(0, |v| v.ncols());
        let eps = tolerance * MASS_SHARE;
        // Per feature, the moments' kernels reach degree 2·degree; each moment is one more
        // convolution and reading of the weights (and of the values for the basis functions).
        let power = 2 * degree.unwrap_or(0) as u32;
        let basis = degree.map_or(0, |g| basis_exponents(d, g).len());
        let n_moments = degree.map_or(0, |g| upto(d, 2 * g) - 1) as f64;
        let passes = cols as f64 + n_moments + basis.saturating_sub(1) as f64 * nv as f64;
        let mut best: Option<Grid> = None;
        for s in SIDES {
            let Some(p) = (2..64).find(|&p| interpolation_bound(p, s, d, power) <= 0.5 * eps) else { continue };
            let panels: Vec<usize> = extent.iter().map(|&e| ((e / s).ceil() as usize).max(1)).collect();
            let side: Vec<f64> = extent.iter().zip(&panels).map(|(&e, &np)| if e > 0.0 { e / np as f64 } else { s }).collect();
            let nodes = panels.iter().try_fold(1usize, |a, &np| a.checked_mul(np * p));
            let buffers = if degree.is_some() { 3 } else { 2 };
            let Some(nodes) = nodes.filter(|&v| v.saturating_mul(cols * buffers) <= MAX_VALUES) else { continue };
            let r = reach(p, d, power, 0.5 * eps);
            let band: Vec<usize> = side.iter().zip(&panels).map(|(&sk, &np)| ((r / sk).ceil() as usize).min(np - 1)).collect();
            let pd = p.pow(d as u32) as f64;
            let convolution: f64 = band.iter().map(|&b| (2 * b + 1) as f64 * p as f64).sum::<f64>() * nodes as f64;
            let per_point = pd + p as f64 * d as f64;
            let cost = cols as f64 * n as f64 * per_point + passes * (m as f64 * per_point + convolution);
            if best.as_ref().is_none_or(|b| cost < b.cost) {
                let bound = interpolation_bound(p, s, d, power) + band_bound(p, d, power, r);
                best = Some(Grid { d, p, panels, side, band, origin: origin.clone(), h, inv_h, degree, bound, tolerance, cost, direct: 0.0 });
            }
        }
        let mut grid = best?;
        grid.direct = grid.direct_cost(pb);
        Some(grid)
    }

    /// Value columns carried through the grid: the weights, Σ |w| when weights have both
    /// signs (the bound's reference), and each value column times the weights.
    fn columns<F: Real>(pb: &Problem<F>) -> usize {
        1 + Self::signed(pb) as usize + pb.values.as_ref().map_or(0, |v| v.ncols())
    }

    fn signed<F: Real>(pb: &Problem<F>) -> bool {
        pb.weights.as_ref().is_some_and(|w| w.iter().any(|&v| v < F::zero()))
    }

    /// The direct loop's modelled cost: pairs of points in panels within a Gaussian tail's
    /// reach (e^{−R²/2} below 2⁻⁶⁰ of the largest term) along every axis, from the panels'
    /// counts and a summed-area table of the samples' counts.
    fn direct_cost<F: Real>(&self, pb: &Problem<F>) -> f64 {
        let d = self.d;
        let total: usize = self.panels.iter().product();
        let (mut cx, mut cq) = (vec![0f64; total], vec![0f64; total]);
        for row in pb.x.rows() {
            cx[self.panel_of(row.as_slice().unwrap_or(&row.to_vec())).0] += 1.0;
        }
        for row in pb.queries.rows() {
            cq[self.panel_of(row.as_slice().unwrap_or(&row.to_vec())).0] += 1.0;
        }
        // Summed-area table over the panel lattice (padded to three axes).
        let dims: Vec<usize> = (0..3).map(|k| if k < d { self.panels[k] } else { 1 }).collect();
        let idx = |a: usize, b: usize, c: usize| (a * (dims[1] + 1) + b) * (dims[2] + 1) + c;
        let mut sat = vec![0f64; (dims[0] + 1) * (dims[1] + 1) * (dims[2] + 1)];
        for a in 0..dims[0] {
            for b in 0..dims[1] {
                for c in 0..dims[2] {
                    let v = cx[(a * dims[1] + b) * dims[2] + c];
                    sat[idx(a + 1, b + 1, c + 1)] = v + sat[idx(a, b + 1, c + 1)] + sat[idx(a + 1, b, c + 1)] + sat[idx(a + 1, b + 1, c)]
                        - sat[idx(a, b, c + 1)]
                        - sat[idx(a, b + 1, c)]
                        - sat[idx(a + 1, b, c)]
                        + sat[idx(a, b, c)];
                }
            }
        }
        let reach = (2.0 * 60.0 * std::f64::consts::LN_2).sqrt();
        let band: Vec<usize> = (0..3).map(|k| if k < d { ((reach / self.side[k]).ceil() as usize).min(dims[k] - 1) } else { 0 }).collect();
        let mut pairs = 0.0;
        for a in 0..dims[0] {
            for b in 0..dims[1] {
                for c in 0..dims[2] {
                    let q = cq[(a * dims[1] + b) * dims[2] + c];
                    if q == 0.0 {
                        continue;
                    }
                    let lo = [a.saturating_sub(band[0]), b.saturating_sub(band[1]), c.saturating_sub(band[2])];
                    let hi = [(a + band[0] + 1).min(dims[0]), (b + band[1] + 1).min(dims[1]), (c + band[2] + 1).min(dims[2])];
                    let box_sum = sat[idx(hi[0], hi[1], hi[2])] - sat[idx(lo[0], hi[1], hi[2])] - sat[idx(hi[0], lo[1], hi[2])] - sat[idx(hi[0], hi[1], lo[2])]
                        + sat[idx(lo[0], lo[1], hi[2])]
                        + sat[idx(lo[0], hi[1], lo[2])]
                        + sat[idx(hi[0], lo[1], lo[2])]
                        - sat[idx(lo[0], lo[1], lo[2])];
                    pairs += q * box_sum;
                }
            }
        }
        // A box of panels holds more than the ball within reach (6/π in three features).
        let ball = [1.0, 1.0, std::f64::consts::PI / 4.0, std::f64::consts::PI / 6.0][d];
        let nb = self.degree.map_or(0, |g| basis_exponents(d, g).len()) as f64;
        let nv = pb.values.as_ref().map_or(0, |v| v.ncols()) as f64;
        pairs * ball * (DIRECT_PAIR + 2.0 * Self::columns(pb) as f64 + nb * (nb + 1.0) / 2.0 + nb * nv)
    }

    /// Linear panel index of a point (data units) and its offsets from the panel's corner, in
    /// bandwidths.
    fn panel_of<F: Real>(&self, row: &[F]) -> (usize, [f64; MAX_DIM]) {
        let mut at = 0;
        let mut t = [0.0; MAX_DIM];
        for k in 0..self.d {
            let y = (row[k].f64() - self.origin[k]) * self.inv_h;
            let pk = ((y / self.side[k]).floor().max(0.0) as usize).min(self.panels[k] - 1);
            t[k] = y - pk as f64 * self.side[k];
            at = at * self.panels[k] + pk;
        }
        (at, t)
    }

    /// Chebyshev nodes of a panel of side `s` (offsets from its corner).
    fn nodes(&self, s: f64) -> Vec<f64> {
        let p = self.p;
        (0..p).map(|i| 0.5 * s * (1.0 - ((2 * i + 1) as f64 * std::f64::consts::PI / (2 * p) as f64).cos())).collect()
    }

    /// Lagrange basis values of every node at offsets `t` (row i: node i), barycentric form.
    fn lagrange(&self, s: f64, t: &[f64], out: &mut [f64]) {
        let p = self.p;
        let xi = self.nodes(s);
        let lambda: Vec<f64> =
            (0..p).map(|i| if i % 2 == 0 { 1.0 } else { -1.0 } * ((2 * i + 1) as f64 * std::f64::consts::PI / (2 * p) as f64).sin()).collect();
        let len = t.len();
        for (j, &tj) in t.iter().enumerate() {
            match xi.iter().position(|&x| x == tj) {
                Some(hit) => (0..p).for_each(|i| out[i * len + j] = (i == hit) as u8 as f64),
                None => {
                    let total: f64 = (0..p).map(|i| lambda[i] / (tj - xi[i])).sum();
                    (0..p).for_each(|i| out[i * len + j] = lambda[i] / (tj - xi[i]) / total);
                }
            }
        }
    }

    /// Rows of `x` by panel: (order, start of each panel's rows), and each row's offsets.
    fn bin<F: Real>(&self, x: ArrayView2<F>) -> (Vec<usize>, Vec<usize>, Vec<[f64; MAX_DIM]>) {
        let total: usize = self.panels.iter().product();
        let located: Vec<(usize, [f64; MAX_DIM])> = x.rows().into_iter().map(|r| self.panel_of(r.as_slice().unwrap_or(&r.to_vec()))).collect();
        let mut starts = vec![0usize; total + 1];
        for &(at, _) in &located {
            starts[at + 1] += 1;
        }
        for i in 0..total {
            starts[i + 1] += starts[i];
        }
        let mut next = starts.clone();
        let mut order = vec![0; located.len()];
        for (i, &(at, _)) in located.iter().enumerate() {
            order[next[at]] = i;
            next[at] += 1;
        }
        let offsets = located.into_iter().map(|(_, t)| t).collect();
        (order, starts, offsets)
    }

    /// The panel's corner node along each axis, from its linear index.
    fn corner(&self, mut at: usize) -> [usize; MAX_DIM] {
        let mut c = [0; MAX_DIM];
        for k in (0..self.d).rev() {
            c[k] = (at % self.panels[k]) * self.p;
            at /= self.panels[k];
        }
        c
    }

    /// Nodes per axis of the whole grid (padded with 1 to three axes) and their product.
    fn shape(&self) -> ([usize; 3], usize) {
        let mut n = [1; 3];
        for k in 0..self.d {
            n[k] = self.panels[k] * self.p;
        }
        (n, n.iter().product())
    }

    /// For the rows `rows` of one panel (offsets `t`), the products of the Lagrange values of
    /// axes 1.. (row: multi-index of those axes, column: point) and those of axis 0.
    fn tables(&self, rows: &[usize], t: &[[f64; MAX_DIM]], first: &mut Vec<f64>, rest: &mut Vec<f64>) {
        let (p, d, len) = (self.p, self.d, rows.len());
        let mut per_axis = vec![0.0; p * len];
        first.resize(p * len, 0.0);
        let offsets: Vec<f64> = rows.iter().map(|&i| t[i][0]).collect();
        self.lagrange(self.side[0], &offsets, first);
        rest.clear();
        rest.resize(len, 1.0);
        for k in 1..d {
            let offsets: Vec<f64> = rows.iter().map(|&i| t[i][k]).collect();
            self.lagrange(self.side[k], &offsets, &mut per_axis);
            let mut next = vec![0.0; rest.len() * p];
            let r = rest.len() / len;
            for a in 0..r {
                for i in 0..p {
                    let (dst, src, li) = (&mut next[(a * p + i) * len..(a * p + i + 1) * len], &rest[a * len..(a + 1) * len], &per_axis[i * len..(i + 1) * len]);
                    for ((o, &s), &l) in dst.iter_mut().zip(src).zip(li) {
                        *o = s * l;
                    }
                }
            }
            *rest = next;
        }
    }

    /// The sums of every query, and the queries the bound does not cover (to be summed
    /// exactly by the caller; their entries here are meaningless). With design moments, each
    /// moment Σ K (x − q)^γ is one more convolution of the spread weights (and values, for the
    /// cross terms) with the separable kernel Π_k t_k^γ_k e^{−t_k²/2}, read like the sums.
    pub fn sums<F: Real>(&self, pb: &Problem<F>, opts: &Options) -> Result<(LocalSums<F>, Vec<usize>)> {
        let mon = &opts.monitor;
        let nv = pb.values.as_ref().map_or(0, |v| v.ncols());
        let signed = Self::signed(pb);
        let cols = Self::columns(pb);
        let (shape, nodes) = self.shape();
        // Values about the middle of their range: a column far from zero (a coordinate of
        // offset data) would otherwise carry its offset's rounding into the small differences
        // a local mean is made of; the middle times the weights' sums is added back at the end.
        let middle: Vec<f64> = pb.values.as_ref().map_or(Vec::new(), |v| bounds(*v).into_iter().map(|(lo, hi)| 0.5 * lo + 0.5 * hi).collect());
        let weight = |j: usize| pb.weights.as_ref().map_or(1.0, |w| w[j].f64());
        // Columns: the weights, each value column (centred) times them, then |w| if signed.
        let column = |j: usize, c: usize| -> f64 {
            match c {
                0 => weight(j),
                c if c <= nv => weight(j) * pb.values.as_ref().map_or(0.0, |v| v[(j, c - 1)].f64() - middle[c - 1]),
                _ => weight(j).abs(),
            }
        };
        let mut source = self.spread(pb.x, cols, &shape, nodes, &column, mon)?;

        // Jobs: the sums with every column, then each further moment γ of the weights, and of
        // the values too where γ is a basis function (the cross terms).
        let basis = self.degree.map_or(Vec::new(), |g| basis_exponents(self.d, g));
        let mut jobs: Vec<(Vec<u32>, usize)> = vec![(vec![0; self.d], cols)];
        for (a, ga) in basis.iter().enumerate() {
            for gb in &basis[a..] {
                let gamma: Vec<u32> = ga.iter().zip(gb).map(|(x, y)| x + y).collect();
                if !jobs.iter().any(|(g, _)| *g == gamma) {
                    jobs.push((gamma, 1));
                }
            }
        }
        for ga in &basis {
            if let Some(job) = jobs.iter_mut().find(|(g, _)| g == ga) {
                job.1 = job.1.max(1 + nv);
            }
        }
        let job_of = |gamma: &[u32]| jobs.iter().position(|(g, _)| g == gamma).expect("every moment has a job");

        let (order, starts, t) = self.bin(pb.queries);
        let panels: Vec<usize> = (0..starts.len() - 1).filter(|&a| starts[a + 1] > starts[a]).collect();
        let mut grid = memory::try_vec("grid values", &[cols, nodes], 0.0f64)?;
        // Without moments the spread values are read once, and their buffer becomes the second.
        let single = jobs.len() == 1;
        let mut other = if single { Vec::new() } else { memory::try_vec("grid values", &[cols, nodes], 0.0f64)? };
        let mut read = Vec::with_capacity(jobs.len());
        for (gamma, jc) in &jobs {
            let len = jc * nodes;
            self.convolve(0, gamma[0], &shape, &source[..len], &mut grid[..len], mon);
            if single {
                other = std::mem::take(&mut source);
            }
            for k in 1..self.d {
                mon.check()?;
                self.convolve(k, gamma[k], &shape, &grid[..len], &mut other[..len], mon);
                std::mem::swap(&mut grid, &mut other);
            }
            mon.check()?;
            read.push(self.read(&grid[..len], *jc, &shape, &order, &starts, &t, &panels, mon));
            mon.check()?;
        }

        let m = pb.queries.nrows();
        let nb = basis.len();
        let mut sums = LocalSums::try_zeros(m, nv, self.degree.map(|_| nb))?;
        let mass: f64 = (0..pb.x.nrows()).map(|j| weight(j).abs()).sum();
        let error = self.bound * mass;
        let unit = |gamma: &[u32]| self.h.powi(gamma.iter().sum::<u32>() as i32);
        // The jobs of the second moments Σ K (x_k − q_k)², which give each query's local scale.
        let second: Vec<usize> = if nb > 1 { (0..self.d).map(|k| job_of(&(0..self.d).map(|c| 2 * u32::from(c == k)).collect::<Vec<_>>())).collect() } else { Vec::new() };
        let mut missed = Vec::new();
        for (at, &a) in panels.iter().enumerate() {
            let rows = &order[starts[a]..starts[a + 1]];
            let len = rows.len();
            let value = |job: usize, c: usize, i: usize| read[job][at][c * len + i];
            for (i, &q) in rows.iter().enumerate() {
                let abs = value(0, if signed { cols - 1 } else { 0 }, i);
                // Values err by at most twice `error` times max |v| (their middle times the
                // weights' error, plus the centred column's own).
                if !(2.0 * error <= self.tolerance * (abs - error)) || !self.moments_covered(&second, |job| value(job, 0, i), abs, error) {
                    missed.push(q);
                    continue;
                }
                sums.den[q] = F::of(value(0, 0, i));
                for c in 0..nv {
                    sums.num[(q, c)] = F::of(value(0, 1 + c, i) + middle[c] * value(0, 0, i));
                }
                if let (Some(mo), Some(cr)) = (sums.moments.as_mut(), sums.cross.as_mut()) {
                    for a in 0..nb {
                        for b in a..nb {
                            let gamma: Vec<u32> = basis[a].iter().zip(&basis[b]).map(|(x, y)| x + y).collect();
                            let v = F::of(value(job_of(&gamma), 0, i) * unit(&gamma));
                            mo[(q, a, b)] = v;
                            mo[(q, b, a)] = v;
                        }
                        let job = job_of(&basis[a]);
                        for c in 0..nv {
                            cr[(q, a, c)] = F::of((value(job, 1 + c, i) + middle[c] * value(job, 0, i)) * unit(&basis[a]));
                        }
                    }
                }
            }
        }
        missed.sort_unstable();
        Ok((sums, missed))
    }

    /// Whether a query's design moments are within the tolerance of their own scale: each
    /// moment Σ K (x − q)^γ errs by at most `error` h^|γ|, while a local polynomial fit
    /// sees them in units of the query's local spread σ_k (its Jacobi scaling) — as the direct
    /// sums' own rounding does. With σ_k from a lower bound on the second moments, the
    /// scaled error of every moment (|γ| ≤ 2·degree) is at most `error` max(1, h/σ)^{2·degree}.
    fn moments_covered(&self, second: &[usize], moment: impl Fn(usize) -> f64, mass: f64, error: f64) -> bool {
        let Some(degree) = self.degree.filter(|_| !second.is_empty()) else { return true };
        let h2 = self.h * self.h;
        let spread = second.iter().map(|&job| (moment(job) * h2 - error * h2) / (mass + error)).fold(f64::INFINITY, f64::min);
        let ratio = (h2 / spread).max(1.0);
        spread > 0.0 && 2.0 * error * ratio.powi(degree as i32) <= self.tolerance * (mass - error)
    }

    /// The samples `x` spread onto their panels' nodes, `cols` columns of `column(j, c)`:
    /// per panel, blocks of `CHUNK` samples, each one matrix product of their Lagrange values.
    fn spread<F: Real>(&self, x: ArrayView2<F>, cols: usize, shape: &[usize; 3], nodes: usize, column: &(dyn Fn(usize, usize) -> f64 + Sync), mon: &Monitor) -> Result<Vec<f64>> {
        let (p, pd) = (self.p, self.p.pow(self.d as u32));
        let mut grid = memory::try_vec("grid values", &[cols, nodes], 0.0f64)?;
        let (order, starts, t) = self.bin(x);
        let panels: Vec<usize> = (0..starts.len() - 1).filter(|&a| starts[a + 1] > starts[a]).collect();
        let blocks: Vec<(usize, Vec<f64>)> = panels
            .par_iter()
            .map(|&a| {
                let mut block = Array2::<f64>::zeros((cols * p, pd / p));
                let (mut first, mut rest) = (Vec::new(), Vec::new());
                for rows in order[starts[a]..starts[a + 1]].chunks(CHUNK) {
                    if mon.stopped() {
                        break;
                    }
                    self.tables(rows, &t, &mut first, &mut rest);
                    let len = rows.len();
                    let mut b = Array2::<f64>::zeros((cols * p, len));
                    for c in 0..cols {
                        for i in 0..p {
                            for (jj, &j) in rows.iter().enumerate() {
                                b[(c * p + i, jj)] = column(j, c) * first[i * len + jj];
                            }
                        }
                    }
                    let a_mat = ArrayView2::from_shape((pd / p, len), &rest).expect("tables are pd/p × len");
                    general_mat_mul(1.0, &b, &a_mat.t(), 1.0, &mut block);
                }
                (a, block.into_raw_vec_and_offset().0)
            })
            .collect();
        mon.check()?;
        for (a, block) in blocks {
            for (g, b, len) in self.runs(a, cols, shape) {
                grid[g..g + len].iter_mut().zip(&block[b..b + len]).for_each(|(v, &add)| *v += add);
            }
        }
        Ok(grid)
    }

    /// Every query's value of each of the `cols` columns of `grid`, read from its panel's
    /// nodes: per panel (in `panels` order), column-major over its queries.
    #[allow(clippy::too_many_arguments)]
    fn read(&self, grid: &[f64], cols: usize, shape: &[usize; 3], order: &[usize], starts: &[usize], t: &[[f64; MAX_DIM]], panels: &[usize], mon: &Monitor) -> Vec<Vec<f64>> {
        let (p, pd) = (self.p, self.p.pow(self.d as u32));
        panels
            .par_iter()
            .map(|&a| {
                let mut block = vec![0.0; cols * pd];
                for (g, b, len) in self.runs(a, cols, shape) {
                    block[b..b + len].copy_from_slice(&grid[g..g + len]);
                }
                let mat = ArrayView2::from_shape((cols * p, pd / p), &block).expect("blocks are cols·p × pd/p");
                let rows = &order[starts[a]..starts[a + 1]];
                let mut out = vec![0.0; cols * rows.len()];
                let (mut first, mut rest) = (Vec::new(), Vec::new());
                for (ci, chunk) in rows.chunks(CHUNK).enumerate() {
                    if mon.stopped() {
                        break;
                    }
                    self.tables(chunk, t, &mut first, &mut rest);
                    let len = chunk.len();
                    let a_mat = ArrayView2::from_shape((pd / p, len), &rest).expect("tables are pd/p × len");
                    let mut r = Array2::<f64>::zeros((cols * p, len));
                    general_mat_mul(1.0, &mat, &a_mat, 0.0, &mut r);
                    for c in 0..cols {
                        for jj in 0..len {
                            out[c * rows.len() + ci * CHUNK + jj] = (0..p).map(|i| r[(c * p + i, jj)] * first[i * len + jj]).sum();
                        }
                    }
                }
                out
            })
            .collect()
    }

    /// Where a panel's block lies in the grid: (start in the grid, start in the block, length)
    /// per run of contiguous nodes. Block rows: column c and node i of axis 0; block columns:
    /// the nodes of the other axes.
    fn runs(&self, a: usize, cols: usize, shape: &[usize; 3]) -> impl Iterator<Item = (usize, usize, usize)> {
        let (p, d) = (self.p, self.d);
        let corner = self.corner(a);
        let nodes: usize = shape.iter().product();
        let (n1, n2) = (if d > 1 { p } else { 1 }, if d > 2 { p } else { 1 });
        let shape = *shape;
        (0..cols * p * n1).map(move |r| {
            let (c, i0, i1) = (r / (p * n1), r / n1 % p, r % n1);
            (c * nodes + ((corner[0] + i0) * shape[1] + corner[1] + i1) * shape[2] + corner[2], r * n2, n2)
        })
    }

    /// `out` = the grid convolved along axis `k` with t^power g(t): for target node a of panel
    /// P and source node b of panel P + δ, t = δ s + ξ_b − ξ_a (x − q), for |δ| within the band.
    fn convolve(&self, k: usize, power: u32, shape: &[usize; 3], grid: &[f64], out: &mut [f64], mon: &Monitor) {
        let p = self.p;
        let (np, band, s) = (self.panels[k], self.band[k] as isize, self.side[k]);
        let xi = self.nodes(s);
        let g: Vec<Array2<f64>> = (-band..=band)
            .map(|delta| {
                Array2::from_shape_fn((p, p), |(a, b)| {
                    let t = delta as f64 * s + xi[b] - xi[a];
                    t.powi(power as i32) * (-0.5 * t * t).exp()
                })
            })
            .collect();
        let n_k = shape[k];
        let inner: usize = shape[k + 1..].iter().product();
        let reached = |panel: usize| {
            (-band..=band).filter_map(move |delta| {
                let src = panel as isize + delta;
                (0..np as isize).contains(&src).then(|| ((delta + band) as usize, src as usize * p))
            })
        };
        out.fill(0.0);
        if inner > 1 {
            let outer_len = n_k * inner;
            out.par_chunks_mut(p * inner).enumerate().for_each(|(task, dst)| {
                if mon.stopped() {
                    return;
                }
                let (o, panel) = (task / np, task % np);
                let src = &grid[o * outer_len..(o + 1) * outer_len];
                let src = ArrayView2::from_shape((n_k, inner), src).expect("n_k × inner");
                let mut dst = ArrayViewMut2::from_shape((p, inner), dst).expect("p × inner");
                for (gi, row) in reached(panel) {
                    general_mat_mul(1.0, &g[gi], &src.slice(s![row..row + p, ..]), 1.0, &mut dst);
                }
            });
        } else {
            let rows = 64;
            out.par_chunks_mut(rows * n_k).zip(grid.par_chunks(rows * n_k)).for_each(|(dst, src)| {
                if mon.stopped() {
                    return;
                }
                let r = src.len() / n_k;
                let src = ArrayView2::from_shape((r, n_k), src).expect("rows × n_k");
                let mut dst = ArrayViewMut2::from_shape((r, n_k), dst).expect("rows × n_k");
                for panel in 0..np {
                    for (gi, col) in reached(panel) {
                        general_mat_mul(1.0, &src.slice(s![.., col..col + p]), &g[gi].t(), 1.0, &mut dst.slice_mut(s![.., panel * p..(panel + 1) * p]));
                    }
                }
            });
        }
    }
}


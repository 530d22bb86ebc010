//! Gaussian sums of a few queries against a prepared reference through far-field Hermite
//! expansions of its clusters (the fast Gauss transform's), kept by the reference per bandwidth.
//!
//! With a wide bandwidth every query meets nearly every sample (a term underflows only beyond
//! ~38.6 h), and the two-sided series of `expansion` pays O(n) per query cluster, which only
//! many queries amortise. Here the samples are cut once into clusters of radius at most
//! `RHO` bandwidths and each keeps the moments A_α = Σ_j w_j y_j^α / α! (and Σ_j w_j v_j y_j^α / α!)
//! of its offsets y = (x − b)/(√2 h) from its centre b, up to total degree `MAX_DEGREE`.
//! With t = (q − b)/(√2 h),
//!
//!   exp(−|q − x|²/2h²) = exp(−|t − y|²) = Σ_α (y^α/α!) h_α(t),   h_α(t) = Π_k H_{α_k}(t_k) e^{−t_k²}
//!
//! (H_n the physicists' Hermite polynomials), so a query costs O(terms) per cluster instead of
//! O(points). By Cramér's inequality |H_n(t)| e^{−t²/2} ≤ κ 2^{n/2} √(n!) (κ < 1.0865), and by
//! Cauchy–Schwarz over the N_k multi-indices of degree k, the series cut before degree g errs by
//! at most Σ|w| κ^d e^{−|t|²/2} Σ_{k≥g} √(N_k/k!) ρ^k for a cluster of radius ρ bandwidths.
//!
//! The error bound is the series expansion's (`expansion::TOLERANCE`), against a lower bound of
//! the query's Σ|w|K (every sample of a cluster lies within ρ of its centre): per query, a walk
//! of a tree over the clusters leaves out the nodes whose whole mass is too far to matter
//! (within half of it, by their bound e^{−gap²/2}), and each cluster kept takes the smallest
//! degree that keeps the truncation bounds of all kept within what is left. A query whose bound cannot be
//! met even at `MAX_DEGREE` (far from every sample) is left to the caller, which sums it exactly.
//! Sums of values err by at most max|v| times the same. Rounding is that of a sum of
//! `terms` products bounded by the same Cramér factor (measured ~1e-15 relative).

use super::expansion::{box_middle, upto, MultiIndex, Side, MAX_DIM, TOLERANCE};
use super::types::LocalSums;
use crate::error::Result;
use crate::parallel::Monitor;
use crate::real::Real;
use ndarray::ArrayView2;
use rayon::prelude::*;

/// Cluster radius in bandwidths: small enough that the lower bound of a query's sums (every
/// sample ρ farther than its cluster's centre) stays close, large enough for many samples
/// per cluster.
const RHO: f64 = 0.5;

/// Largest total degree kept: at ρ = 0.5 the tail bound from degree 24 is below 1e-18 of the
/// mass (and 325 terms per cluster keep the moments within `SIZE` on 10⁶ normal points).
const MAX_DEGREE: usize = 24;

/// Cramér's constant: |H_n(t)| e^{−t²/2} ≤ κ 2^{n/2} √(n!).
const CRAMER: f64 = 1.086_435;

/// The moments may take at most this many times the space of the samples' weights (per value
/// column): clusters must hold at least terms / `SIZE` samples each, or the far field costs
/// more memory than it is worth and is not built.
const SIZE: usize = 4;

/// The clusters of a reference and their Hermite moments for one bandwidth.
pub(super) struct FarField {
    d: usize,
    p: usize,
    inv_h: f64,
    origin: Vec<f64>,
    /// Per cluster: centre (h units, relative to `origin`), radius (h units), ln Σ|w|.
    centre: Vec<f64>,
    radius: Vec<f64>,
    ln_mass: Vec<f64>,
    /// Per cluster, the ln of its truncation bound's tail from each degree (`ln_tails`).
    ln_tails: Vec<f64>,
    tree: ClusterTree,
    /// Number of multi-indices of total degree ≤ g, for g = 0, 1, … (ordered as `products`
    /// forms them).
    upto: Vec<usize>,
    /// Per cluster, per multi-index α, the moments of the weights then of each value column:
    /// `moments[(c·terms + α)·(1 + p) + col]`.
    moments: Vec<f64>,
    /// Multi-indices per cluster (of total degree ≤ `MAX_DEGREE`).
    terms: usize,
}

impl FarField {
    /// The far field of the references `x` (weights, values) for bandwidth `h`, or None when its
    /// clusters would be too small to pay (`SIZE`) or `mon` stopped.
    pub fn new<F: Real>(x: ArrayView2<F>, weights: Option<ndarray::ArrayView1<F>>, values: Option<ArrayView2<F>>, h: F, mon: &Monitor) -> Option<Self> {
        let (n, d) = x.dim();
        let p = values.as_ref().map_or(0, |v| v.ncols());
        let inv_h = 1.0 / h.f64();
        let origin = box_middle(x);
        let side = Side::new(x, &origin, inv_h, RHO, mon)?;
        let nc = side.len();
        let mi = MultiIndex::new(d, MAX_DEGREE);
        let terms = mi.upto[MAX_DEGREE];
        if nc * terms > SIZE * n {
            return None;
        }
        let cols = 1 + p;
        let per_cluster: Vec<(Vec<f64>, f64)> = (0..nc)
            .into_par_iter()
            .map(|c| {
                let rows = &side.order[side.starts[c]..side.starts[c + 1]];
                let len = rows.len();
                // y = offset/√2, feature-major.
                let y: Vec<Vec<f64>> = side.offsets(c, d).iter().map(|o| o.iter().map(|v| v * std::f64::consts::FRAC_1_SQRT_2).collect()).collect();
                let yr: Vec<&[f64]> = y.iter().map(|v| v.as_slice()).collect();
                let mut mono = vec![0.0; terms * len];
                mi.monomials(terms, &yr, len, len, true, &mut mono);
                let w: Vec<f64> = rows.iter().map(|&i| weights.as_ref().map_or(1.0, |w| w[i].f64())).collect();
                let mut wv = vec![0.0; p * len];
                if let Some(v) = &values {
                    for col in 0..p {
                        for (j, &i) in rows.iter().enumerate() {
                            wv[col * len + j] = w[j] * v[(i, col)].f64();
                        }
                    }
                }
                let mut m = vec![0.0; terms * cols];
                for a in 0..terms {
                    let row = &mono[a * len..(a + 1) * len];
                    m[a * cols] = row.iter().zip(&w).map(|(x, y)| x * y).sum();
                    for col in 0..p {
                        m[a * cols + 1 + col] = row.iter().zip(&wv[col * len..(col + 1) * len]).map(|(x, y)| x * y).sum();
                    }
                }
                (m, w.iter().map(|w| w.abs()).sum::<f64>().ln())
            })
            .collect();
        if mon.stopped() {
            return None;
        }
        let mut moments = Vec::with_capacity(nc * terms * cols);
        let mut ln_mass = Vec::with_capacity(nc);
        for (m, l) in per_cluster {
            moments.extend(m);
            ln_mass.push(l);
        }
        let ln_tails = side.radius.iter().flat_map(|&r| ln_tails(r, d)).collect();
        let tree = ClusterTree::new(&side, &ln_mass, d);
        Some(FarField { d, p, inv_h, origin, ln_tails, tree, centre: side.centre, radius: side.radius, ln_mass, upto: mi.upto, moments, terms })
    }

    /// The sums of `queries` (in the units the far field was built in), and the queries whose
    /// error bound cannot be met (left zero: far from every sample, where the Hermite
    /// functions decay slower than the kernel). Per query: one walk of the cluster tree for
    /// the clusters that can matter, then their series.
    pub fn sums<F: Real>(&self, queries: ArrayView2<F>, mon: &Monitor) -> Result<(LocalSums<F>, Vec<usize>)> {
        let m = queries.nrows();
        let parts: Vec<Option<(f64, Vec<f64>)>> = (0..m)
            .into_par_iter()
            .map_init(
                || (Vec::new(), Vec::new()),
                |(kept, stack), i| {
                    mon.check()?;
                    let q: Vec<f64> = (0..self.d).map(|k| (queries[(i, k)].f64() - self.origin[k]) * self.inv_h).collect();
                    Ok(self.query(&q, kept, stack))
                },
            )
            .collect::<Result<_>>()?;
        mon.check()?;
        let mut out = LocalSums::try_zeros(m, self.p, None)?;
        let mut missed = Vec::new();
        for (i, part) in parts.into_iter().enumerate() {
            let Some((log_scale, s)) = part else {
                missed.push(i);
                continue;
            };
            out.log_scale[i] = F::of(log_scale);
            out.den[i] = F::of(s[0]);
            for c in 0..self.p {
                out.num[(i, c)] = F::of(s[1 + c]);
            }
        }
        Ok((out, missed))
    }

    /// (log-scale, sums scaled by e^{−log-scale}) of one query `q` (h units from the origin),
    /// or None when its bound cannot be met. `kept` and `stack`: scratch.
    ///
    /// One walk of the cluster tree, nearer child first, finds the clusters that can matter
    /// and a lower bound of Σ|w|K over them (each sample at most its cluster's radius farther
    /// than the centre). A node is left out when its whole mass at its nearest possible
    /// distance is at most its share, by mass, of half the tolerance of the lower bound so far:
    /// that bound only grows, so all nodes left out err by at most half the tolerance of the
    /// final one. What they actually left out is counted, and the rest of the tolerance is
    /// shared equally among the clusters kept (not all clusters), each at the smallest degree
    /// whose truncation bound fits its share.
    fn query(&self, q: &[f64], kept: &mut Vec<(usize, f64)>, stack: &mut Vec<usize>) -> Option<(f64, Vec<f64>)> {
        let (d, cols) = (self.d, 1 + self.p);
        let tree = &self.tree;
        let ln_total = tree.ln_mass[0];
        let ln_half_tol = (0.5 * TOLERANCE).ln();
        let (mut ln_low, mut ln_left) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
        kept.clear();
        stack.clear();
        stack.push(0);
        while let Some(id) = stack.pop() {
            let gap2 = tree.gap2(id, q);
            if tree.ln_mass[id] == f64::NEG_INFINITY || 0.5 * gap2 >= ln_total - ln_low - ln_half_tol {
                ln_left = ln_add(ln_left, tree.ln_mass[id] - 0.5 * gap2);
                continue;
            }
            match tree.kids[id] {
                (LEAF, c) => {
                    let dist = (0..d).map(|k| (q[k] - self.centre[c * d + k]).powi(2)).sum::<f64>().sqrt();
                    ln_low = ln_add(ln_low, self.ln_mass[c] - 0.5 * (dist + self.radius[c]).powi(2));
                    kept.push((c, dist));
                }
                (a, b) => {
                    let (near, far) = if tree.gap2(a, q) <= tree.gap2(b, q) { (a, b) } else { (b, a) };
                    stack.push(far);
                    stack.push(near);
                }
            }
        }
        if !ln_low.is_finite() {
            return None;
        }
        // At least half the tolerance is left for the series cut short.
        let budget = TOLERANCE - (ln_left - ln_low).exp();
        let ln_share = budget.ln() + ln_low - (kept.len() as f64).ln();
        let mut sums = vec![0.0; cols];
        let mut h = [[0.0; MAX_DEGREE + 1]; MAX_DIM];
        let mut acc = vec![0.0; cols];
        let mut ha = vec![0.0; self.terms];
        for &(c, dist) in kept.iter() {
            // Smallest degree whose truncation bound fits: ln Σ|w| + d ln κ − |t|²/2 + ln tail.
            let base = self.ln_mass[c] + d as f64 * CRAMER.ln() - 0.25 * dist * dist;
            let tails = &self.ln_tails[c * (MAX_DEGREE + 1)..(c + 1) * (MAX_DEGREE + 1)];
            let g = (1..=MAX_DEGREE).find(|&g| base + tails[g] < ln_share)?;
            // Hermite functions of t = (q − b)/√2 per feature, scaled by e^{−ln_low}.
            let mut scale = -ln_low;
            for (k, hk) in h[..d].iter_mut().enumerate() {
                let t = (q[k] - self.centre[c * d + k]) * std::f64::consts::FRAC_1_SQRT_2;
                scale -= t * t;
                hk[0] = 1.0;
                if g > 1 {
                    hk[1] = 2.0 * t;
                }
                for n in 1..g.saturating_sub(1) {
                    hk[n + 1] = 2.0 * t * hk[n] - 2.0 * n as f64 * hk[n - 1];
                }
            }
            let f = scale.exp();
            let count = products(d, g, &h, &mut ha);
            debug_assert_eq!(count, self.upto[g - 1]);
            let at = c * self.terms * cols;
            let mo = &self.moments[at..at + count * cols];
            let mut col = 0;
            while col < cols {
                let out = &mut acc[col..];
                col += if cols - col == 1 { series::<1>(&ha[..count], mo, cols, col, out) } else { series::<2>(&ha[..count], mo, cols, col, out) };
            }
            for (s, &a) in sums.iter_mut().zip(&acc) {
                *s += f * a;
            }
        }
        Some((ln_low, sums))
    }
}

/// The Hermite functions h_α(t) = Π_k h_k[α_k] of the multi-indices of total degree < g, in
/// `MultiIndex`'s order (by total degree; within degree t in 2-D, (t, 0), (t − 1, 1), …,
/// (0, t)), into `out`; returns their count. Formed by position rather than from a table of
/// exponents: the lookups cost more than the products.
fn products(d: usize, g: usize, h: &[[f64; MAX_DEGREE + 1]; MAX_DIM], out: &mut [f64]) -> usize {
    if d == 1 {
        out[..g].copy_from_slice(&h[0][..g]);
        return g;
    }
    let mut at = 0;
    for t in 0..g {
        for (j, o) in out[at..=at + t].iter_mut().enumerate() {
            *o = h[0][t - j] * h[1][j];
        }
        at += t + 1;
    }
    at
}

/// Σ_α h_α A_α for the `C` moment columns from `col` of `mo` (`stride` values per
/// multi-index), into `out`; returns `C`. Four interleaved partial sums per column: a single
/// running sum waits on each addition.
#[inline(always)]
fn series<const C: usize>(ha: &[f64], mo: &[f64], stride: usize, col: usize, out: &mut [f64]) -> usize {
    const LANES: usize = 4;
    let mut part = [[0.0; C]; LANES];
    for (ha, mo) in ha.chunks_exact(LANES).zip(mo.chunks_exact(LANES * stride)) {
        for (u, p) in part.iter_mut().enumerate() {
            for (s, &v) in p.iter_mut().zip(&mo[u * stride + col..u * stride + col + C]) {
                *s += ha[u] * v;
            }
        }
    }
    let full = ha.len() - ha.len() % LANES;
    for (&a, mo) in ha[full..].iter().zip(mo[full * stride..].chunks_exact(stride)) {
        for (s, &v) in part[0].iter_mut().zip(&mo[col..col + C]) {
            *s += a * v;
        }
    }
    for j in 0..C {
        out[j] = (part[0][j] + part[1][j]) + (part[2][j] + part[3][j]);
    }
    C
}

/// Marks a leaf of the `ClusterTree` (whose second entry is then its cluster).
const LEAF: usize = usize::MAX;

/// A binary tree over the clusters, which `Side` makes in the order of a kd split (so runs of
/// consecutive clusters are compact): per node the box of its samples (h units) and ln Σ|w|.
struct ClusterTree {
    d: usize,
    lo: Vec<f64>,
    hi: Vec<f64>,
    ln_mass: Vec<f64>,
    /// The children, or (`LEAF`, cluster).
    kids: Vec<(usize, usize)>,
}

impl ClusterTree {
    fn new(side: &Side, ln_mass: &[f64], d: usize) -> Self {
        let nodes = 2 * side.len() - 1;
        let mut tree = ClusterTree { d, lo: Vec::with_capacity(nodes * d), hi: Vec::with_capacity(nodes * d), ln_mass: Vec::with_capacity(nodes), kids: Vec::with_capacity(nodes) };
        tree.add(side, ln_mass, 0, side.len());
        tree
    }

    /// Adds the node of clusters `a..b` and those below it; returns its id.
    fn add(&mut self, side: &Side, ln_mass: &[f64], a: usize, b: usize) -> usize {
        let (d, id) = (self.d, self.ln_mass.len());
        self.lo.extend_from_slice(&side.lo[a * d..(a + 1) * d]);
        self.hi.extend_from_slice(&side.hi[a * d..(a + 1) * d]);
        self.ln_mass.push(ln_mass[a]);
        self.kids.push((LEAF, a));
        if b - a > 1 {
            let mid = a + (b - a) / 2;
            let (l, r) = (self.add(side, ln_mass, a, mid), self.add(side, ln_mass, mid, b));
            for k in 0..d {
                self.lo[id * d + k] = self.lo[l * d + k].min(self.lo[r * d + k]);
                self.hi[id * d + k] = self.hi[l * d + k].max(self.hi[r * d + k]);
            }
            self.ln_mass[id] = ln_add(self.ln_mass[l], self.ln_mass[r]);
            self.kids[id] = (l, r);
        }
        id
    }

    /// Squared distance from `q` to the box of node `id`.
    fn gap2(&self, id: usize, q: &[f64]) -> f64 {
        let d = self.d;
        (0..d)
            .map(|k| {
                let g = (self.lo[id * d + k] - q[k]).max(q[k] - self.hi[id * d + k]).max(0.0);
                g * g
            })
            .sum()
    }
}

/// ln(e^a + e^b).
fn ln_add(a: f64, b: f64) -> f64 {
    let top = a.max(b);
    if top == f64::NEG_INFINITY {
        return top;
    }
    top + (-(a - b).abs()).exp().ln_1p()
}

/// ln of Σ_{k≥g} √(N_k/k!) ρ^k, N_k = C(k + d − 1, d − 1) multi-indices of degree k, for
/// g = 0..=`MAX_DEGREE`: the first term over one minus a bound of the ratio of consecutive
/// terms.
fn ln_tails(rho: f64, d: usize) -> [f64; MAX_DEGREE + 1] {
    let mut out = [f64::NEG_INFINITY; MAX_DEGREE + 1];
    if rho == 0.0 {
        return out;
    }
    let mut ln_fact = 0.0;
    for (g, o) in out.iter_mut().enumerate() {
        if g > 0 {
            ln_fact += (g as f64).ln();
        }
        let n_g = upto(d, g) - if g > 0 { upto(d, g - 1) } else { 0 };
        let first = 0.5 * ((n_g as f64).ln() - ln_fact) + g as f64 * rho.ln();
        // Ratio √((N_{k+1}/N_k)/(k+1))·ρ, largest at k = g (N_{k+1}/N_k ≤ (k + d)/(k + 1)).
        let ratio = rho * (((g + d) as f64 / (g + 1) as f64) / (g + 1) as f64).sqrt();
        *o = if ratio >= 1.0 { f64::INFINITY } else { first - (1.0 - ratio).ln() };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `products` forms the Hermite functions in the order the moments were stored in.
    #[test]
    fn products_follow_the_multi_index_order() {
        let mut h = [[0.0; MAX_DEGREE + 1]; MAX_DIM];
        // 2^a 3^b: distinct for distinct (a, b), and exact.
        for (k, hk) in h.iter_mut().enumerate() {
            for (n, v) in hk.iter_mut().enumerate() {
                *v = ((2 + k) as f64).powi(n as i32);
            }
        }
        for d in 1..=MAX_DIM {
            let mi = MultiIndex::new(d, MAX_DEGREE);
            let mut out = vec![0.0; mi.upto[MAX_DEGREE]];
            for g in 1..=MAX_DEGREE + 1 {
                assert_eq!(products(d, g, &h, &mut out), mi.upto[g - 1]);
                for (e, &got) in mi.exps.iter().zip(&out[..mi.upto[g - 1]]) {
                    assert_eq!(got, e.iter().enumerate().map(|(k, &e)| h[k][e as usize]).product::<f64>(), "{e:?}");
                }
            }
        }
    }
}

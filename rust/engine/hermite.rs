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
//! The error bound is the series expansion's (`expansion::TOLERANCE`): per query, the
//! clusters whose whole mass is too far to matter are left out and each other one's degree is
//! the smallest that keeps these bounds within half of it, against a lower bound of the query's
//! Σ|w|K (every sample of a cluster lies within ρ of its centre). A query whose bound cannot be
//! met even at `MAX_DEGREE` (far from every sample) is left to the caller, which sums it exactly.
//! Sums of values err by at most max|v| times the same. Rounding is that of a sum of
//! `terms` products bounded by the same Cramér factor (measured ~1e-15 relative).

use super::expansion::{box_middle, upto, MultiIndex, Side, TOLERANCE};
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
    /// Exponents of the multi-indices by total degree, flat (`exps[α·d + k]`; `upto[g]` of
    /// degree ≤ g).
    exps: Vec<usize>,
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
        Some(FarField { d, p, inv_h, origin, centre: side.centre, radius: side.radius, ln_mass, exps: mi.exps[..terms].iter().flatten().map(|&e| e as usize).collect(), upto: mi.upto, moments, terms })
    }

    /// The sums of `queries` (in the units the far field was built in), and the queries whose
    /// error bound cannot be met (left zero: far from every sample, where the Hermite
    /// functions decay slower than the kernel). Per query: one pass over the clusters for the
    /// lower bound of its Σ|w|K, then the series of each cluster that can matter.
    pub fn sums<F: Real>(&self, queries: ArrayView2<F>, mon: &Monitor) -> Result<(LocalSums<F>, Vec<usize>)> {
        let m = queries.nrows();
        let parts: Vec<Option<(f64, Vec<f64>)>> = (0..m)
            .into_par_iter()
            .map(|i| {
                mon.check()?;
                let q: Vec<f64> = (0..self.d).map(|k| (queries[(i, k)].f64() - self.origin[k]) * self.inv_h).collect();
                Ok(self.query(&q))
            })
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

    /// (log-scale, sums scaled by e^{−log-scale}) of one query `q` (h units from the origin).
    fn query(&self, q: &[f64]) -> Option<(f64, Vec<f64>)> {
        let (d, cols) = (self.d, 1 + self.p);
        let nc = self.radius.len();
        let dist: Vec<f64> = (0..nc)
            .map(|c| (0..d).map(|k| (q[k] - self.centre[c * d + k]).powi(2)).sum::<f64>().sqrt())
            .collect();
        // ln of a lower bound of Σ|w|K: each sample at most ρ farther than its cluster's centre.
        let low = |c: usize| self.ln_mass[c] - 0.5 * (dist[c] + self.radius[c]).powi(2);
        let top = (0..nc).map(low).fold(f64::NEG_INFINITY, f64::max);
        if !top.is_finite() {
            return None;
        }
        let ln_low = top + (0..nc).map(|c| (low(c) - top).exp()).sum::<f64>().ln();
        // Half the tolerance for the clusters left out, half for the series cut short, shared
        // equally among the clusters.
        let ln_share = (0.5 * TOLERANCE).ln() + ln_low - (nc as f64).ln();
        let mut sums = vec![0.0; cols];
        let mut h: Vec<Vec<f64>> = vec![vec![0.0; MAX_DEGREE + 1]; d];
        let mut acc = vec![0.0; cols];
        for c in 0..nc {
            let rho = self.radius[c];
            // The cluster's whole mass at its nearest possible distance.
            let gap = (dist[c] - rho).max(0.0);
            if self.ln_mass[c] - 0.5 * gap * gap < ln_share {
                continue;
            }
            // Smallest degree whose truncation bound fits: ln Σ|w| + d ln κ − |t|²/2 + ln tail.
            let base = self.ln_mass[c] + d as f64 * CRAMER.ln() - 0.25 * dist[c] * dist[c];
            let g = (0..=MAX_DEGREE).find(|&g| g > 0 && base + ln_tail(g, rho, d) < ln_share)?;
            // Hermite functions of t = (q − b)/√2 per feature, scaled by e^{−ln_low}.
            let mut scale = -ln_low;
            for (k, hk) in h.iter_mut().enumerate() {
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
            let at = c * self.terms * cols;
            acc.fill(0.0);
            let count = self.upto[g - 1];
            let mo = &self.moments[at..at + count * cols];
            for (e, mo) in self.exps[..count * d].chunks_exact(d).zip(mo.chunks_exact(cols)) {
                let ha = e.iter().zip(&h).fold(1.0, |s, (&e, hk)| s * hk[e]);
                for (s, &v) in acc.iter_mut().zip(mo) {
                    *s += ha * v;
                }
            }
            for (s, &a) in sums.iter_mut().zip(&acc) {
                *s += f * a;
            }
        }
        Some((ln_low, sums))
    }
}

/// ln of Σ_{k≥g} √(N_k/k!) ρ^k, N_k = C(k + d − 1, d − 1) multi-indices of degree k: the
/// first term over one minus a bound of the ratio of consecutive terms.
fn ln_tail(g: usize, rho: f64, d: usize) -> f64 {
    if rho == 0.0 {
        return f64::NEG_INFINITY;
    }
    let ln_n = |k: usize| (upto(d, k) - if k > 0 { upto(d, k - 1) } else { 0 }) as f64;
    let ln_fact: f64 = (1..=g).map(|i| (i as f64).ln()).sum();
    let first = 0.5 * (ln_n(g).ln() - ln_fact) + g as f64 * rho.ln();
    // Ratio √((N_{k+1}/N_k)/(k+1))·ρ, largest at k = g (N_{k+1}/N_k ≤ (k + d)/(k + 1)).
    let ratio = rho * (((g + d) as f64 / (g + 1) as f64) / (g + 1) as f64).sqrt();
    if ratio >= 1.0 {
        return f64::INFINITY;
    }
    first - (1.0 - ratio).ln()
}

//! Gaussian sums through a two-sided Taylor expansion: within 1e-14 of Σ|w|K per query (exact
//! to rounding with design moments; docs/engine.md has the bound), and for moderate
//! and large bandwidths in low dimensions far cheaper than visiting every pair.
//!
//! Queries and references are cut into clusters of radius at most `RHO` bandwidths. For a
//! query q = a + u of cluster A (centre a) and a reference x = b + w of cluster B (centre b),
//! with Δ = a − b and lengths in bandwidths,
//!
//!   exp(−|q − x|²/2) = exp(−|Δ + u|²/2) · exp(Δ·w − |w|²/2) · exp(u·w),
//!
//! the first factor belongs to the query, the second to the reference, and
//! exp(u·w) = Σ_α u^α w^α / α! converges fast because |u·w| ≤ ρ_A ρ_B ≤ RHO². The series is
//! cut where its remainder is below 2⁻⁵⁴ of the term (the number of terms is chosen per pair of
//! clusters), so a pair costs O(T·(|A| + |B|)) instead of O(|A|·|B|). Nothing is lost to
//! cancellation: Δ stays inside the exact exponentials and only the small u·w is expanded, so
//! the rounding error of every term is within e^{2ρ_A ρ_B} of direct summation's.
//!
//! Per pair, the reference side reduces to power sums Σ_j b_j w_j^β (b_j the second factor
//! times the weight, and again times each value), moved to the query cluster's centre by the
//! binomial theorem on x − a = w − Δ; the query side is a small matrix product of u^α/α! with
//! those coefficients, register-blocked.
//!
//! Sums are stabilised as in the direct path: each query keeps a running maximum, raised to
//! the pair's leading log-term (exact up to ±ρ_A ρ_B), and a pair whose every term underflows
//! against it is skipped. Design moments Σ K (x − q)^γ are summed about the query cluster's
//! centre and moved to each query by the binomial theorem (a shift of at most `RHO`).

use super::accumulate::{n_basis, stack_into};
use super::lanes;
use super::types::{LocalSums, Options, Problem};
use crate::error::Result;
use crate::parallel::Monitor;
use crate::real::{madd, Real};
use crate::neighbors::radius_leaves;
use ndarray::Array2;
use rayon::prelude::*;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Largest cluster radius, in bandwidths. At 1 the series needs at most 19 terms per
/// dimension's degree and rounding can grow by e² at worst: the balance of cluster size,
/// terms and accuracy measured best in one and two dimensions.
const RHO: f64 = 1.0;

/// Beyond this many features the series has too many terms to pay off: in three, 1,540 per
/// pair of clusters, and clusters that large (see `TABLE_VALUES`) beat the direct sums only
/// when the bandwidth spans the data (measured 2× at n = 2·10⁴, h = the data's width).
pub(super) const MAX_DIM: usize = 2;

/// Error the sums without design moments allow themselves, relative to Σ_j |w_j| K(q, x_j)
/// per query (and to max |v| times that for sums of values): half for the reference clusters
/// left out beyond a Gaussian tail bound, half for the series cut short on far pairs. Far
/// below rounding's own 1e-12 at these sizes; the sums with moments stay exact to rounding.
pub const TOLERANCE: f64 = 1e-14;

/// Points per chunk of a monomial table (queries or references): the table (up to a few
/// hundred monomials per point) stays in the core's cache, and clusters can be as large as
/// their radius allows, so fewer pairs of clusters each pay the series' fixed cost.
const CHUNK: usize = 512;

/// Neighbouring query clusters whose series coefficients are formed together, so that each
/// reference cluster's monomials serve all of them.
const GROUP: usize = 8;

/// Multi-indices α of d variables ordered by total degree, each with a parent α − e_k.
pub(super) struct MultiIndex {
    pub exps: Vec<Vec<u32>>,
    parent: Vec<(usize, usize)>,
    /// Index of α + e_k at `child[α·d + k]` (`usize::MAX` past the largest degree).
    child: Vec<usize>,
    /// Number of multi-indices of total degree ≤ g, for g = 0, 1, …
    pub upto: Vec<usize>,
}

impl MultiIndex {
    pub fn new(d: usize, max_degree: usize) -> Self {
        let (mut exps, mut parent, mut upto) = (vec![vec![0u32; d]], vec![(0, 0)], vec![1]);
        let mut child = vec![usize::MAX; d];
        let mut start = 0;
        for _ in 0..max_degree {
            let end = exps.len();
            for i in start..end {
                // Raising only variables from the last non-zero one on makes each child unique.
                let last = exps[i].iter().rposition(|&e| e > 0).unwrap_or(0);
                for k in last..d {
                    let mut e = exps[i].clone();
                    e[k] += 1;
                    child[i * d + k] = exps.len();
                    exps.push(e);
                    parent.push((i, k));
                    child.resize(child.len() + d, usize::MAX);
                }
            }
            start = end;
            upto.push(exps.len());
        }
        // The other children: α = π + e_l with l its last variable, so for k < l
        // α + e_k = (π + e_k) + e_l, and π (of lower degree) is already complete.
        for i in 1..exps.len() {
            let (pi, l) = parent[i];
            for k in 0..l {
                let via = child[pi * d + k];
                child[i * d + k] = if via == usize::MAX { usize::MAX } else { child[via * d + l] };
            }
        }
        MultiIndex { exps, parent, child, upto }
    }

    /// Index of α + e for the multi-index at `a` and exponents `e`.
    fn add(&self, a: usize, e: &[u32]) -> usize {
        let d = e.len();
        e.iter().enumerate().fold(a, |at, (k, &ek)| (0..ek).fold(at, |at, _| self.child[at * d + k]))
    }

    /// Row α (stride `stride`) = z^α, or z^α/α! with `factorial`, for the first `count`
    /// multi-indices; `z[k]` holds variable k for `len` points.
    pub fn monomials(&self, count: usize, z: &[&[f64]], len: usize, stride: usize, factorial: bool, out: &mut [f64]) {
        out[..len].fill(1.0);
        for a in 1..count {
            let (p, k) = self.parent[a];
            let c = if factorial { 1.0 / self.exps[a][k] as f64 } else { 1.0 };
            let (lo, hi) = out.split_at_mut(a * stride);
            let (src, zk) = (&lo[p * stride..p * stride + len], &z[k][..len]);
            for (o, (&s, &v)) in hi[..len].iter_mut().zip(src.iter().zip(zk)) {
                *o = s * v * c;
            }
        }
    }
}

/// Terms the series of exp(z), |z| ≤ r, needs for a remainder below 2⁻⁵⁴ relative to e^z.
fn n_terms(r: f64) -> usize {
    let mut bound = (2.0 * r).exp();
    let mut p = 0;
    while bound > f64::EPSILON / 4.0 {
        p += 1;
        bound *= r / p as f64;
    }
    p.max(1)
}

/// Terms the series of exp(z), |z| ≤ r, needs for a remainder below e^{ln_tol} relative to
/// e^z (bound e^{2r} r^p/p!, in logarithms).
fn n_terms_within(r: f64, ln_tol: f64) -> usize {
    let mut bound = 2.0 * r;
    let mut p = 0;
    while bound > ln_tol && p < 200 {
        p += 1;
        bound += (r / p as f64).ln();
    }
    p.max(1)
}

/// Points cut into clusters, in scaled coordinates (bandwidth units).
#[derive(Clone)]
pub(super) struct Side {
    n: usize,
    pub order: Vec<usize>,
    pub starts: Vec<usize>,
    pub centre: Vec<f64>,
    pub lo: Vec<f64>,
    pub hi: Vec<f64>,
    pub radius: Vec<f64>,
    /// Offsets from the cluster centre, feature-major: `off[k * n + position]`.
    off: Vec<f64>,
}

impl Side {
    /// Clusters of radius at most `max_radius` (in bandwidths),
    /// in coordinates (x − origin)/h. Subtracting the origin first keeps offset data exact:
    /// (x − origin) is exact or nearly for points near it, where x/h alone would round at the
    /// scale of the offset. None if `mon` stopped meanwhile.
    pub fn new<F: Real>(x: ndarray::ArrayView2<F>, origin: &[f64], inv_h: f64, max_radius: f64, mon: &Monitor) -> Option<Self> {
        let (n, d) = x.dim();
        let z = Array2::from_shape_fn((n, d), |(i, k)| (x[(i, k)].f64() - origin[k]) * inv_h);
        let (order, starts) = radius_leaves(z.view(), max_radius, usize::MAX, mon).ok()?;
        let nc = starts.len() - 1;
        let (mut centre, mut lo, mut hi, mut radius) = (vec![0.0; nc * d], vec![0.0; nc * d], vec![0.0; nc * d], vec![0.0; nc]);
        let mut off = vec![0.0; n * d];
        for c in 0..nc {
            let rows = &order[starts[c]..starts[c + 1]];
            for k in 0..d {
                let (l, h) = rows.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &i| (l.min(z[(i, k)]), h.max(z[(i, k)])));
                lo[c * d + k] = l;
                hi[c * d + k] = h;
                centre[c * d + k] = 0.5 * (l + h);
            }
            for (j, &i) in rows.iter().enumerate() {
                let mut r2 = 0.0;
                for k in 0..d {
                    let o = z[(i, k)] - centre[c * d + k];
                    off[k * n + starts[c] + j] = o;
                    r2 += o * o;
                }
                radius[c] = f64::max(radius[c], r2.sqrt());
            }
        }
        Some(Side { n, order, starts, centre, lo, hi, radius, off })
    }

    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    fn size(&self, c: usize) -> usize {
        self.starts[c + 1] - self.starts[c]
    }

    pub fn offsets(&self, c: usize, d: usize) -> Vec<&[f64]> {
        (0..d).map(|k| &self.off[k * self.n + self.starts[c]..k * self.n + self.starts[c + 1]]).collect()
    }

    /// Squared distance between the boxes of cluster `a` here and cluster `b` of `other`.
    fn gap2(&self, a: usize, other: &Side, b: usize, d: usize) -> f64 {
        (0..d)
            .map(|k| {
                let g = (other.lo[b * d + k] - self.hi[a * d + k]).max(self.lo[a * d + k] - other.hi[b * d + k]).max(0.0);
                g * g
            })
            .sum()
    }
}

/// Everything the expansion needs, built once per call.
pub(super) struct Expansion {
    d: usize,
    p: usize,
    degree: Option<usize>,
    queries: Side,
    refs: Side,
    /// Reference weights, values (column-major) and |w|²/2, in cluster order.
    weights: Vec<f64>,
    values: Vec<f64>,
    half_norm2: Vec<f64>,
    /// Per reference cluster: holds a zero weight (which must not set the running maximum).
    zero_weight: Vec<bool>,
    /// Per reference cluster: ln Σ |w|, and ln of that over all of them.
    ln_mass: Vec<f64>,
    ln_total: f64,
    mi: MultiIndex,
    /// Per value column: the coordinate it repeats, if it does (a mean shift's local mean).
    /// Its power sums then follow from the kernel's at one degree more:
    /// Σ b w^β x_k = (o_k + h c_k) Σ b w^β + h Σ b w^{β+e_k}, x = o + h (c + w), so the
    /// reference side costs what a kernel sum costs.
    coordinate: Vec<Option<usize>>,
    /// The origin o of both sides' coordinates and the bandwidth h, in the data's units.
    origin: Vec<f64>,
    h: f64,
    /// Multi-indices γ of the moments Σ K y^γ (|γ| ≤ 2·degree) and of Σ K y^γ v (|γ| ≤ degree).
    n_mom: usize,
    n_cross: usize,
    /// Series terms for the largest clusters.
    t_max: usize,
    /// Per moment γ: (δ, γ − δ, C(γ, δ)) for every δ ≤ γ, the terms of the binomial theorem.
    binom: Vec<Vec<(usize, usize, f64)>>,
    /// (−1)^|e| e! per moment index e: turns the query side's u^e/e! into (−u)^e.
    sign_fact: Vec<f64>,
    /// Index of α + δ, at `plus[α * n_mom + δ]`, for series terms α and moments δ.
    plus: Vec<usize>,
    /// h^|γ| per moment: the sums run in bandwidth units, the moments are reported in the data's.
    unit: Vec<f64>,
    /// Moment index of γ_a + γ_b for basis functions a ≤ b, and of γ_a.
    mom_of: Vec<usize>,
    cross_of: Vec<usize>,
    /// Error allowed per query (`Options::series_tolerance`, at least `TOLERANCE`).
    tolerance: f64,
}

/// The series of one pair of clusters for the queries of the first: Δ (centre gap), the
/// largest reference exponent `top`, ρ_A ρ_B, the number of terms and their coefficients
/// (row α, one column per moment and value).
struct Coefficients {
    delta: Vec<f64>,
    top: f64,
    r: f64,
    t: usize,
    mom: Vec<f64>,
}

/// Per-thread buffers of the reference side, for one chunk of `CHUNK` references and up to
/// `GROUP` users.
struct Scratch {
    /// Per user u (a query cluster of the group), row u·(1 + p): the reference factors
    /// b = w·exp(Δ·w − |w|²/2 − top); row u·(1 + p) + 1 + c: b·v_c.
    cols: Vec<f64>,
    wpow: Vec<f64>,
    /// Power sums of up to `GROUP` users, each of every multi-index and column.
    power: Vec<f64>,
    dpow: Vec<f64>,
}

impl Scratch {
    fn new(e: &Expansion) -> Self {
        let s_max = e.mi.exps.len();
        Scratch {
            cols: vec![0.0; GROUP * (1 + e.p) * CHUNK],
            wpow: vec![0.0; s_max * CHUNK],
            power: vec![0.0; GROUP * s_max * (1 + e.p)],
            dpow: vec![0.0; e.n_mom],
        }
    }
}

/// Queries per block of the query side's register-blocked product (a multiple of the blocks
/// `add_series` uses, which the padding of a chunk's queries follows), and columns per block.
const QB: usize = 32;
const CB: usize = 4;

impl Expansion {
    /// Applies to the Gaussian with one scalar bandwidth `h` and no leave-one-out.
    /// None when the bandwidth is too extreme for the moments' units, and with `auto` when the
    /// cost model expects the direct sums to be cheaper (decided from the clusters alone,
    /// before the tables are built).
    pub fn new<F: Real>(pb: &Problem<F>, h: F, opts: &Options, auto: bool) -> Option<Self> {
        let (n, d) = pb.x.dim();
        let p = pb.values.as_ref().map_or(0, |v| v.ncols());
        let inv_h = 1.0 / h.f64();
        let degree = opts.degree;
        let g = degree.unwrap_or(0);
        // Moments run in bandwidth units and are reported times h^|γ|, |γ| ≤ 2·degree: both
        // factors must stay far from overflow and underflow (|log10 h| ≤ 62 for quadratics).
        if (2 * g) as f64 * h.f64().log10().abs() > 250.0 {
            return None;
        }
        // Monomials per point, for clusters of the largest radius.
        let rows = upto(d, n_terms(RHO * RHO) - 1 + 2 * g);
        if auto && too_sparse(pb.x, inv_h, rows) {
            return None;
        }
        // Both sides relative to the middle of the references' box.
        let origin = box_middle(pb.x);
        let refs = Side::new(pb.x, &origin, inv_h, RHO, &opts.monitor)?;
        // Moving a moment Σ K (x − a)^γ from the cluster centre a to a query q = a + u loses
        // about ((|u| + s)/s)^|γ| ulps, s the typical |x − q|. Query clusters no wider than
        // the reference clusters keep that small even when the bandwidth dwarfs the data
        // (then the clusters, not the bandwidth, set the scale).
        let query_radius = max_radius(&refs).min(RHO);
        // Fitted values (queries = the sample itself) need the clustering once.
        let same = pb.queries.as_ptr() == pb.x.as_ptr() && pb.queries.dim() == pb.x.dim();
        let queries = if same { refs.clone() } else { Side::new(pb.queries, &origin, inv_h, query_radius, &opts.monitor)? };
        if auto && relative_cost::<F>(&queries, &refs, d, p, degree) >= 1.0 {
            return None;
        }
        let weights: Vec<f64> = refs.order.iter().map(|&i| pb.weights.as_ref().map_or(1.0, |w| w[i].f64())).collect();
        let values: Vec<f64> = match &pb.values {
            Some(v) => (0..p).flat_map(|c| refs.order.iter().map(move |&i| v[(i, c)].f64())).collect(),
            None => Vec::new(),
        };
        let zero_weight = (0..refs.len()).map(|b| weights[refs.starts[b]..refs.starts[b + 1]].contains(&0.0)).collect();
        let mass: Vec<f64> = (0..refs.len()).map(|b| weights[refs.starts[b]..refs.starts[b + 1]].iter().map(|w| w.abs()).sum()).collect();
        let ln_total = mass.iter().sum::<f64>().ln();
        let ln_mass = mass.into_iter().map(f64::ln).collect();
        let half_norm2 = (0..n).map(|j| 0.5 * (0..d).map(|k| refs.off[k * n + j] * refs.off[k * n + j]).sum::<f64>()).collect();
        let coordinate: Vec<Option<usize>> = match &pb.values {
            Some(v) => (0..p).map(|c| (0..d).find(|&k| v.column(c).iter().zip(pb.x.column(k)).all(|(a, b)| a == b))).collect(),
            None => Vec::new(),
        };
        let deg_max = n_terms(max_radius(&queries) * max_radius(&refs)) - 1;
        let mi = MultiIndex::new(d, deg_max + 2 * g + coordinate.iter().any(Option::is_some) as usize);
        let (n_mom, n_cross, t_max) = (mi.upto[2 * g], mi.upto[g], mi.upto[deg_max]);
        let binom = (0..n_mom)
            .map(|c| {
                let gamma = &mi.exps[c];
                (0..=c)
                    .filter(|&e| mi.exps[e].iter().zip(gamma).all(|(a, b)| a <= b))
                    .map(|e| {
                        let diff: Vec<u32> = gamma.iter().zip(&mi.exps[e]).map(|(a, b)| a - b).collect();
                        (e, mi.add(0, &diff), gamma.iter().zip(&mi.exps[e]).fold(1.0, |s, (&a, &b)| s * binomial(a, b)))
                    })
                    .collect()
            })
            .collect();
        let sign_fact = mi.exps[..n_mom]
            .iter()
            .map(|e| e.iter().fold(1.0, |s, &k| s * factorial(k)) * if e.iter().sum::<u32>() % 2 == 1 { -1.0 } else { 1.0 })
            .collect();
        let plus = (0..t_max * n_mom)
            .map(|at| {
                let sum: Vec<u32> = mi.exps[at / n_mom].iter().zip(&mi.exps[at % n_mom]).map(|(a, b)| a + b).collect();
                mi.add(0, &sum)
            })
            .collect();
        let basis: Vec<Vec<u32>> = match degree {
            None => Vec::new(),
            Some(g) => {
                let mut b = vec![vec![0u32; d]];
                if g >= 1 {
                    b.extend((0..d).map(|k| (0..d).map(|l| (l == k) as u32).collect()));
                }
                if g >= 2 {
                    for a in 0..d {
                        for c in a..d {
                            b.push((0..d).map(|l| (l == a) as u32 + (l == c) as u32).collect());
                        }
                    }
                }
                b
            }
        };
        let nb = basis.len();
        let mut mom_of = vec![0; nb * nb];
        for a in 0..nb {
            for b in a..nb {
                let sum: Vec<u32> = basis[a].iter().zip(&basis[b]).map(|(x, y)| x + y).collect();
                mom_of[a * nb + b] = mi.add(0, &sum);
            }
        }
        let cross_of = basis.iter().map(|e| mi.add(0, e)).collect();
        let unit = mi.exps[..n_mom].iter().map(|e| h.f64().powi(e.iter().sum::<u32>() as i32)).collect();
        Some(Expansion {
            d,
            p,
            degree,
            queries,
            refs,
            weights,
            values,
            half_norm2,
            zero_weight,
            ln_mass,
            ln_total,
            mi,
            coordinate,
            origin,
            h: h.f64(),
            n_mom,
            n_cross,
            t_max,
            binom,
            sign_fact,
            plus,
            unit,
            mom_of,
            cross_of,
            tolerance: opts.series_tolerance.max(TOLERANCE),
        })
    }

    /// Sums per query: Σ K y^γ for the moments, then Σ K y^γ v_c for the cross terms.
    fn n_cols(&self) -> usize {
        self.n_mom + self.n_cross * self.p
    }

    /// The numbers of reference power sums a series of degree `deg` needs: Σ b·w^β up to that
    /// degree plus 2·degree (one more for columns that repeat a coordinate), and Σ b·v·w^β up
    /// to it plus the degree.
    fn power_counts(&self, deg: usize) -> (usize, usize) {
        let g = self.degree.unwrap_or(0);
        let shifted = if self.coordinate.iter().any(Option::is_some) { deg + g + 1 } else { 0 };
        (self.mi.upto[(deg + 2 * g).max(shifted)], self.mi.upto[deg + g])
    }

    /// Reference clusters by the gap between their boxes and that of query cluster `a`,
    /// nearest first: (gap², cluster). A heap, since `pairs` stops after the few clusters
    /// within reach: sorting all of them for every query cluster cost as much as the series
    /// at 10⁶ points. Gaps are squares, so their bits order as the values do.
    fn visits(&self, a: usize) -> impl Iterator<Item = (f64, usize)> {
        let gaps: Vec<Reverse<(u64, usize)>> =
            (0..self.refs.len()).map(|b| Reverse((self.queries.gap2(a, &self.refs, b, self.d).to_bits(), b))).collect();
        let mut heap = BinaryHeap::from(gaps);
        std::iter::from_fn(move || heap.pop().map(|Reverse((g2, b))| (f64::from_bits(g2), b)))
    }

    /// The sums of every query (output allocated first; stops between chunks once the
    /// monitor stops; the queries done are reported per chunk when `opts.progress`).
    ///
    /// Query clusters go in groups of `GROUP` neighbours (in the clusters' tree order), which
    /// reach nearly the same reference clusters: per group, first the series coefficients of
    /// every reference cluster within reach of one of its clusters (each O(|B|·T), the
    /// monomials of B once for the whole group; in parallel over the reference clusters),
    /// then the queries in chunks of `CHUNK` (in parallel), each adding every pair's series.
    /// A query's sums are added in the same order (reference clusters by gap) whatever the
    /// threads.
    pub fn sums<F: Real>(&self, opts: &Options) -> Result<LocalSums<F>> {
        let mon = &opts.monitor;
        let basis = self.degree.map(|g| n_basis(self.d, g));
        let mut out = LocalSums::try_zeros(self.queries.order.len(), self.p, basis)?;
        opts.start_progress(self.queries.order.len());
        let nq = self.queries.len();
        let parts: Vec<Vec<LocalSums<F>>> = (0..nq)
            .step_by(GROUP)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|a0| {
                mon.check()?;
                let coefs = self.group_coefficients(a0..(a0 + GROUP).min(nq));
                let chunks: Vec<(usize, usize)> =
                    coefs.iter().enumerate().flat_map(|(g, _)| (0..self.queries.size(a0 + g)).step_by(CHUNK).map(move |c0| (g, c0))).collect();
                chunks
                    .into_par_iter()
                    .map(|(g, c0)| {
                        mon.check()?;
                        let rows = c0..(c0 + CHUNK).min(self.queries.size(a0 + g));
                        let len = rows.len();
                        let part = self.run_chunk::<F>(a0 + g, rows, &coefs[g]);
                        opts.advance(len);
                        part
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<_>>()?;
        stack_into(&mut out, parts.into_iter().flatten().collect(), Some(&self.queries.order), 0);
        Ok(out)
    }

    /// The series coefficients of every pair of the query clusters `group`, per query
    /// cluster in the order of `pairs`. Computed per reference cluster for all the group's
    /// clusters that reach it, in parallel over the reference clusters.
    fn group_coefficients(&self, group: std::ops::Range<usize>) -> Vec<Vec<Coefficients>> {
        let a0 = group.start;
        let pairs: Vec<Vec<(usize, f64, usize)>> = group.map(|a| self.pairs(a)).collect();
        // (reference cluster, query cluster, slot in its pairs), by reference cluster.
        let mut uses: Vec<(usize, usize, usize)> =
            pairs.iter().enumerate().flat_map(|(g, ps)| ps.iter().enumerate().map(move |(slot, &(b, _, _))| (b, a0 + g, slot))).collect();
        uses.sort_unstable();
        let per_ref: Vec<&[(usize, usize, usize)]> = uses.chunk_by(|x, y| x.0 == y.0).collect();
        let mut done: Vec<((usize, usize), Coefficients)> = per_ref
            .par_iter()
            .map_init(
                || Scratch::new(self),
                |s, us| {
                    let users: Vec<(usize, f64, usize)> = us.iter().map(|&(_, a, slot)| (a, pairs[a - a0][slot].1, pairs[a - a0][slot].2)).collect();
                    let coefs = self.run_coefficients(us[0].0, &users, s);
                    us.iter().map(|&(_, a, slot)| (a, slot)).zip(coefs).collect::<Vec<_>>()
                },
            )
            .flatten()
            .collect();
        // Every (query cluster, slot) once: sorted, they fall back into each cluster's order.
        done.sort_unstable_by_key(|&(key, _)| key);
        let mut coefs: Vec<Vec<Coefficients>> = pairs.iter().map(|ps| Vec::with_capacity(ps.len())).collect();
        for ((a, _), c) in done {
            coefs[a - a0].push(c);
        }
        coefs
    }

    /// The reference clusters that can reach some query of cluster `a`, nearest first, with
    /// the largest exponent Δ·w − |w|²/2 of each (over non-zero weights). Visiting stops where
    /// every term underflows against a lower bound of every query's running maximum: a query
    /// u of cluster `a` has log-term top − |Δ + u|²/2 ≥ top − (|Δ| + ρ_A)²/2 with each visited
    /// cluster, and its running maximum is at least the largest of these.
    ///
    /// Without design moments two more cuts apply, both against a lower bound of every query's
    /// Σ |w| K: each visited cluster B contributes at least Σ_B |w| exp(−(|Δ| + ρ_A + ρ_B)²/2).
    /// (1) Every reference beyond the box gap g adds at most Σ |w| · exp(−g²/2): visiting stops
    /// once that is below `tolerance`/2 of the bound. (2) A pair's series, cut after degree p,
    /// errs by at most Σ_B |w| exp(−g²/2) e^{2ρ_Aρ_B} (ρ_Aρ_B)^{p+1}/(p+1)!: the degree is the
    /// smallest that keeps this below `tolerance`/2 of the bound over the number of clusters
    /// (never more than exactness to rounding needs). Returns (cluster, top, series degree).
    fn pairs(&self, a: usize) -> Vec<(usize, f64, usize)> {
        let (d, rs) = (self.d, &self.refs);
        let margin = f64::EXP_UNDERFLOW - 1.0;
        let cut = self.degree.is_none();
        let ln_tail = (0.5 * self.tolerance).ln();
        let ln_series = ln_tail - (rs.len() as f64).ln();
        let mut low = f64::NEG_INFINITY;
        let mut floor = f64::NEG_INFINITY;
        let mut kept = Vec::new();
        let mut delta = vec![0.0; d];
        let mut exps = Vec::new();
        for (g2, b) in self.visits(a) {
            // Sorted by gap: once every query is out of reach, so are the remaining clusters.
            if -0.5 * 0.9999 * g2 - floor < margin || (cut && self.ln_total - 0.5 * 0.9999 * g2 < ln_tail + low) {
                break;
            }
            self.centre_gap(a, b, &mut delta);
            let (b0, nb) = (rs.starts[b], rs.size(b));
            let w = rs.offsets(b, d);
            let weights = &self.weights[b0..b0 + nb];
            // The largest exponent over the references (a zero weight must not set it), in
            // lanes: this runs for every pair of clusters.
            exps.clear();
            exps.extend(self.half_norm2[b0..b0 + nb].iter().map(|e| -e));
            for (k, wk) in w.iter().enumerate() {
                for (e, &x) in exps.iter_mut().zip(*wk) {
                    *e = *e + delta[k] * x;
                }
            }
            if self.zero_weight[b] {
                for (e, &wt) in exps.iter_mut().zip(weights) {
                    if !(wt > 0.0) {
                        *e = f64::NEG_INFINITY;
                    }
                }
            }
            let top = lanes::max(&exps);
            if top == f64::NEG_INFINITY {
                continue;
            }
            let centres = delta.iter().map(|v| v * v).sum::<f64>().sqrt();
            let (ra, rb) = (self.queries.radius[a], rs.radius[b]);
            floor = floor.max(top - 0.5 * (centres + ra).powi(2));
            low = low.max(self.ln_mass[b] - 0.5 * (centres + ra + rb).powi(2) / 0.9999);
            let exact = n_terms(ra * rb);
            let terms = if cut { n_terms_within(ra * rb, ln_series + low + 0.5 * 0.9999 * g2 - self.ln_mass[b]).min(exact) } else { exact };
            kept.push((b, top, terms - 1));
        }
        kept
    }

    /// Δ = a − b, between the centres of query cluster `a` and reference cluster `b`.
    fn centre_gap(&self, a: usize, b: usize, delta: &mut [f64]) {
        let d = self.d;
        for (k, v) in delta.iter_mut().enumerate() {
            *v = self.queries.centre[a * d + k] - self.refs.centre[b * d + k];
        }
    }

    fn run_coefficients(&self, b: usize, users: &[(usize, f64, usize)], s: &mut Scratch) -> Vec<Coefficients> {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512dq") && has!("avx512vl") && has!("avx2") && has!("fma") {
                // SAFETY: the CPU supports the features the function is compiled for.
                return unsafe { self.coefficients_avx512(b, users, s) };
            }
            if has!("avx2") && has!("fma") {
                // SAFETY: as above.
                return unsafe { self.coefficients_avx2(b, users, s) };
            }
        }
        self.coefficients::<false, false>(b, users, s)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn coefficients_avx2(&self, b: usize, users: &[(usize, f64, usize)], s: &mut Scratch) -> Vec<Coefficients> {
        self.coefficients::<true, false>(b, users, s)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
    unsafe fn coefficients_avx512(&self, b: usize, users: &[(usize, f64, usize)], s: &mut Scratch) -> Vec<Coefficients> {
        self.coefficients::<true, true>(b, users, s)
    }

    /// The series coefficients of reference cluster `b` for each user (query cluster `a`,
    /// its largest exponent `top`, series degree): row α holds Σ_j w_j^α b_j (w_j − Δ)^γ (·v_j)
    /// for every moment γ (and value), b_j = weight × exp(Δ·w_j − |w_j|²/2 − top). The power
    /// sums run over the cluster in chunks of `CHUNK` references, so the monomial tables stay
    /// in cache whatever the cluster's size; the monomials of w depend on `b` alone and are
    /// formed once per chunk for all users.
    #[inline(always)]
    fn coefficients<const FMA: bool, const WIDE: bool>(&self, b: usize, users: &[(usize, f64, usize)], s: &mut Scratch) -> Vec<Coefficients> {
        let (d, p, n) = (self.d, self.p, self.refs.n);
        let rs = &self.refs;
        let (b0, nb) = (rs.starts[b], rs.size(b));
        let deltas: Vec<Vec<f64>> = users
            .iter()
            .map(|&(a, _, _)| {
                let mut delta = vec![0.0; d];
                self.centre_gap(a, b, &mut delta);
                delta
            })
            .collect();
        let s_most = users.iter().map(|&(_, _, deg)| self.power_counts(deg).0).max().unwrap_or(0);
        let stride = self.mi.exps.len() * (1 + p);
        s.power.fill(0.0);
        let w_all = rs.offsets(b, d);
        for j0 in (0..nb).step_by(CHUNK) {
            let len = (nb - j0).min(CHUNK);
            let padded = len.next_multiple_of(lanes::LANES);
            let w: Vec<&[f64]> = w_all.iter().map(|c| &c[j0..j0 + len]).collect();
            self.mi.monomials(s_most, &w, len, CHUNK, false, &mut s.wpow);
            let weights = &self.weights[b0 + j0..b0 + j0 + len];
            for (&(_, top, _), (delta, cols)) in users.iter().zip(deltas.iter().zip(s.cols.chunks_exact_mut((1 + p) * CHUNK))) {
                let bw = &mut cols[..len];
                bw.copy_from_slice(&self.half_norm2[b0 + j0..b0 + j0 + len]);
                bw.iter_mut().for_each(|e| *e = -*e);
                for k in 0..d {
                    for (e, &wk) in bw.iter_mut().zip(w[k]) {
                        *e = madd::<f64, FMA>(delta[k], wk, *e);
                    }
                }
                for (e, &wt) in bw.iter_mut().zip(weights) {
                    *e = (*e - top).exp_with::<FMA>() * wt;
                }
                cols[len..padded].fill(0.0);
                for c in (0..p).filter(|&c| self.coordinate[c].is_none()) {
                    let (lo, hi) = cols.split_at_mut((1 + c) * CHUNK);
                    for ((o, &e), &v) in hi[..len].iter_mut().zip(&lo[..len]).zip(&self.values[c * n + b0 + j0..]) {
                        *o = e * v;
                    }
                    hi[len..padded].fill(0.0);
                }
            }
            // Power sums Σ b·w^β and Σ b·v·w^β over the chunk, added to each user's.
            let counts: Vec<(usize, usize)> = users.iter().map(|&(_, _, deg)| self.power_counts(deg)).collect();
            let (wpow, cols) = (Block { data: &s.wpow, stride: CHUNK }, Block { data: &s.cols, stride: CHUNK });
            power_sums::<FMA, WIDE>(wpow, cols, padded, &counts, &self.coordinate, &mut s.power);
        }
        let centre = &rs.centre[b * d..(b + 1) * d];
        for (&(_, _, deg), power) in users.iter().zip(s.power.chunks_exact_mut(stride)) {
            for (c, k) in self.coordinate.iter().enumerate().filter_map(|(c, k)| k.map(|k| (c, k))) {
                let at = self.origin[k] + self.h * centre[k];
                for beta in 0..self.power_counts(deg).1 {
                    let up = self.mi.child[beta * d + k];
                    power[beta * (1 + p) + 1 + c] = at * power[beta * (1 + p)] + self.h * power[up * (1 + p)];
                }
            }
        }
        users
            .iter()
            .zip(deltas)
            .zip(s.power.chunks_exact(stride))
            .map(|((&(a, top, deg), delta), power)| self.series(a, b, top, deg, delta, power, &mut s.dpow))
            .collect()
    }

    /// Series coefficients Σ_j w^α b_j (w_j − Δ)^γ (·v) from the power sums, by the binomial
    /// theorem on w − Δ.
    fn series(&self, a: usize, b: usize, top: f64, deg: usize, delta: Vec<f64>, power: &[f64], dpow: &mut [f64]) -> Coefficients {
        let p = self.p;
        let t = self.mi.upto[deg];
        let centre_gap: Vec<&[f64]> = delta.iter().map(std::slice::from_ref).collect();
        self.mi.monomials(self.n_mom, &centre_gap, 1, 1, false, dpow);
        for (e, k) in dpow.iter_mut().zip(&self.mi.exps) {
            if k.iter().sum::<u32>() % 2 == 1 {
                *e = -*e;
            }
        }
        let (n_mom, n_cross, ncol) = (self.n_mom, self.n_cross, self.n_cols());
        let mut mom = vec![0.0; t * ncol];
        for al in 0..t {
            let (row, plus) = (&mut mom[al * ncol..(al + 1) * ncol], &self.plus[al * n_mom..(al + 1) * n_mom]);
            for gm in 0..n_mom {
                row[gm] = self.binom[gm].iter().map(|&(dl, e, c)| c * dpow[e] * power[plus[dl] * (1 + p)]).sum();
            }
            for gm in 0..n_cross {
                for c in 0..p {
                    row[n_mom + gm * p + c] = self.binom[gm].iter().map(|&(dl, e, cf)| cf * dpow[e] * power[plus[dl] * (1 + p) + 1 + c]).sum();
                }
            }
        }
        Coefficients { delta, top, r: self.queries.radius[a] * self.refs.radius[b], t, mom }
    }

    fn run_chunk<F: Real>(&self, a: usize, rows: std::ops::Range<usize>, coefs: &[Coefficients]) -> Result<LocalSums<F>> {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512dq") && has!("avx512vl") && has!("avx2") && has!("fma") {
                // SAFETY: the CPU supports the features the function is compiled for.
                return unsafe { self.chunk_avx512::<F>(a, rows, coefs) };
            }
            if has!("avx2") && has!("fma") {
                // SAFETY: as above.
                return unsafe { self.chunk_avx2::<F>(a, rows, coefs) };
            }
        }
        self.chunk::<F, false, false>(a, rows, coefs)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn chunk_avx2<F: Real>(&self, a: usize, rows: std::ops::Range<usize>, coefs: &[Coefficients]) -> Result<LocalSums<F>> {
        self.chunk::<F, true, false>(a, rows, coefs)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
    unsafe fn chunk_avx512<F: Real>(&self, a: usize, rows: std::ops::Range<usize>, coefs: &[Coefficients]) -> Result<LocalSums<F>> {
        self.chunk::<F, true, true>(a, rows, coefs)
    }

    /// All sums of the queries `rows` (positions within cluster `a`).
    #[inline(always)]
    fn chunk<F: Real, const FMA: bool, const WIDE: bool>(
        &self,
        a: usize,
        rows: std::ops::Range<usize>,
        coefs: &[Coefficients],
    ) -> Result<LocalSums<F>> {
        let d = self.d;
        let na = rows.len();
        let ncol = self.n_cols();
        // Padding (zero queries) lets the series run over whole blocks of QB.
        let na_pad = na.next_multiple_of(QB);
        let u: Vec<&[f64]> = self.queries.offsets(a, d).into_iter().map(|c| &c[rows.clone()]).collect();
        // u^α/α! for the series terms and for the final shift of the moments.
        let u_rows = self.t_max.max(self.n_mom);
        let mut upow = vec![0.0; u_rows * na_pad];
        self.mi.monomials(u_rows, &u, na, na_pad, true, &mut upow);
        // Column-major sums about the cluster centre, divided by exp(running max) per query.
        let mut sums = vec![0.0; ncol * na_pad];
        let mut run_max = vec![f64::NEG_INFINITY; na];
        let (mut lead, mut factor) = ([0.0; QB], [0.0; QB]);
        let margin = F::EXP_UNDERFLOW - 1.0;
        // Blocks of QB queries take every pair in turn: the block's monomials stay in the
        // core's nearest cache, where the whole chunk's (hundreds of kB) would stream from
        // the next one for every pair. Each query sees the same operations as pair by pair.
        for q0 in (0..na_pad).step_by(QB) {
            let real = (na - q0).min(QB);
            factor.fill(0.0);
            for cf in coefs {
                // Leading log-term of the pair per query: top − |Δ + u|²/2.
                lead[..real].fill(cf.top);
                for k in 0..d {
                    for (l, &uk) in lead[..real].iter_mut().zip(&u[k][q0..q0 + real]) {
                        let e = cf.delta[k] + uk;
                        *l -= 0.5 * e * e;
                    }
                }
                for (j, (&l, f)) in lead[..real].iter().zip(factor.iter_mut()).enumerate() {
                    let i = q0 + j;
                    if l + cf.r - run_max[i] < margin {
                        *f = f64::NEG_INFINITY;
                        continue;
                    }
                    if l > run_max[i] {
                        let scale = (run_max[i] - l).exp();
                        for c in 0..ncol {
                            sums[c * na_pad + i] *= scale;
                        }
                        run_max[i] = l;
                    }
                    *f = l - run_max[i];
                }
                for f in factor[..real].iter_mut() {
                    *f = if *f == f64::NEG_INFINITY { 0.0 } else { f.exp_with::<FMA>() };
                }
                let (up, mo) = (Block { data: &upow, stride: na_pad }, Block { data: &cf.mom, stride: ncol });
                add_series::<FMA, WIDE>(cf.t, up, mo, q0, &factor, &mut sums);
            }
        }
        self.finish(&sums, &run_max, &upow, na, na_pad)
    }

    /// Move each query's sums from its cluster centre to the query itself (binomial shift)
    /// and lay them out as the engine reports them.
    fn finish<F: Real>(&self, sums: &[f64], run_max: &[f64], upow: &[f64], na: usize, na_pad: usize) -> Result<LocalSums<F>> {
        let p = self.p;
        let basis = self.degree.map(|g| n_basis(self.d, g));
        let nb = basis.unwrap_or(0);
        let mut out = LocalSums::try_zeros(na, p, basis)?;
        // Σ K (y − u)^γ·(column) = Σ_δ C(γ, δ) (−u)^{γ−δ} Σ K y^δ·(column), the latter at `base + δ·step`.
        let shifted = |g: usize, base: usize, step: usize, i: usize| -> f64 {
            self.unit[g]
                * self.binom[g].iter().map(|&(dl, e, c)| c * self.sign_fact[e] * upow[e * na_pad + i] * sums[(base + dl * step) * na_pad + i]).sum::<f64>()
        };
        let mut moments = vec![0.0; self.n_mom];
        let mut cross = vec![0.0; self.n_cross * p];
        for i in 0..na {
            for (g, m) in moments.iter_mut().enumerate() {
                *m = shifted(g, 0, 1, i);
            }
            for g in 0..self.n_cross {
                for c in 0..p {
                    cross[g * p + c] = shifted(g, self.n_mom + c, p, i);
                }
            }
            out.log_scale[i] = F::of(if run_max[i].is_finite() { run_max[i] } else { 0.0 });
            out.den[i] = F::of(moments[0]);
            for c in 0..p {
                out.num[(i, c)] = F::of(cross[c]);
            }
            if let (Some(mo), Some(cr)) = (out.moments.as_mut(), out.cross.as_mut()) {
                for a in 0..nb {
                    for b in a..nb {
                        let v = F::of(moments[self.mom_of[a * nb + b]]);
                        mo[(i, a, b)] = v;
                        mo[(i, b, a)] = v;
                    }
                    for c in 0..p {
                        cr[(i, a, c)] = F::of(cross[self.cross_of[a] * p + c]);
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Estimated cost of the expansion over that of the direct pair loop (below 1: faster), from
/// the cluster pairs within reach of a sample of query clusters. A direct pair costs an
/// exponential and its sums; an expanded pair its power sums per reference and its series
/// per query.
fn relative_cost<F: Real>(queries: &Side, refs: &Side, d: usize, p: usize, degree: Option<usize>) -> f64 {
    let reach2 = -2.0 * F::EXP_UNDERFLOW;
    let na = queries.len();
    let sample = 64.min(na);
    let g = degree.unwrap_or(0);
    let pf = p as f64;
    let ncol = (upto(d, 2 * g) + upto(d, g) * p) as f64;
    let nb = degree.map_or(0, |g| n_basis(d, g)) as f64;
    let direct_per_pair = 12.0 + d as f64 + pf + nb * (nb + 1.0) / 2.0 + nb * pf;
    let (mut direct, mut expanded) = (0.0, 0.0);
    for s in 0..sample {
        let a = s * na / sample;
        let qa = queries.size(a) as f64;
        for b in 0..refs.len() {
            if queries.gap2(a, refs, b, d) > reach2 {
                continue;
            }
            let rb = refs.size(b) as f64;
            let deg = n_terms(queries.radius[a] * refs.radius[b]) - 1;
            let (t, s_all, s_val) = (upto(d, deg) as f64, upto(d, deg + 2 * g) as f64, upto(d, deg + g) as f64);
            direct += qa * rb * direct_per_pair;
            expanded += 200.0 + rb * (12.0 + d as f64 + pf + s_all * 2.0 + s_val * pf) + qa * (12.0 + d as f64 + 0.5 * t * ncol);
        }
    }
    expanded / direct.max(1.0)
}

/// Whether the points are too spread for the expansion to pay: it needs clusters of many
/// more points than it has series terms (`rows`), and the points' bounding box, cut into
/// cells the size of a cluster, shows the clusters' typical size without building them.
fn too_sparse<F: Real>(x: ndarray::ArrayView2<F>, inv_h: f64, rows: usize) -> bool {
    let cells: f64 = x
        .columns()
        .into_iter()
        .map(|c| {
            let (lo, hi) = c.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| (l.min(v.f64()), h.max(v.f64())));
            ((hi - lo) * inv_h / (2.0 * RHO)).max(1.0)
        })
        .product();
    (x.nrows() as f64 / cells) < rows as f64 / 8.0
}

fn max_radius(side: &Side) -> f64 {
    side.radius.iter().fold(0.0, |r: f64, &x| r.max(x))
}

/// Number of multi-indices of total degree at most g in d variables, C(g + d, d).
/// The middle of the rows' bounding box, per feature: the origin both sides of a series are
/// expanded about (coordinates relative to it keep their powers from cancelling).
pub(super) fn box_middle<F: Real>(x: ndarray::ArrayView2<F>) -> Vec<f64> {
    x.columns()
        .into_iter()
        .map(|c| {
            let (lo, hi) = c.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| (l.min(v.f64()), h.max(v.f64())));
            0.5 * lo + 0.5 * hi
        })
        .collect()
}

pub(super) fn upto(d: usize, g: usize) -> usize {
    (1..=d).fold(1usize, |c, j| c * (g + j) / j)
}

/// Rows of `stride` values each, in one slice.
#[derive(Clone, Copy)]
struct Block<'a> {
    data: &'a [f64],
    stride: usize,
}

impl Block<'_> {
    #[inline(always)]
    fn row(&self, r: usize, len: usize) -> &[f64] {
        &self.data[r * self.stride..r * self.stride + len]
    }
}

// The two kernels below run once per pair of clusters. Inlined into the large cluster loop
// they stay scalar with spilled accumulators (measured 2× slower), so with FMA each calls a
// copy compiled on its own for AVX2 + FMA, or AVX-512 (`WIDE`), where they are vectorised.
// Rust never contracts a·b + c on its own, so every copy computes the same bits.

/// For each user u: power_u[β·(1 + p) + c] += Σ_j wpow[β][j]·cols[u·(1 + p) + c][j] over
/// `len` values, for β below `counts[u].0` with column 0 and below `counts[u].1` with every
/// column (1 + p of them) but the value columns c that repeat a coordinate (`skip[c]`); the
/// users' power sums follow each other in `power`. β is the outer loop, so each row of
/// monomials is read from the core's nearest cache by every user.
#[inline(always)]
fn power_sums<const FMA: bool, const WIDE: bool>(wpow: Block, cols: Block, len: usize, counts: &[(usize, usize)], skip: &[Option<usize>], power: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if WIDE {
        #[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
        #[inline(never)]
        unsafe fn apart(wpow: Block, cols: Block, len: usize, counts: &[(usize, usize)], skip: &[Option<usize>], power: &mut [f64]) {
            power_sums_with::<true, true>(wpow, cols, len, counts, skip, power)
        }
        // SAFETY: `WIDE` is set only inside `coefficients_avx512`, after the features were detected.
        return unsafe { apart(wpow, cols, len, counts, skip, power) };
    }
    #[cfg(target_arch = "x86_64")]
    if FMA {
        #[target_feature(enable = "avx2,fma")]
        #[inline(never)]
        unsafe fn apart(wpow: Block, cols: Block, len: usize, counts: &[(usize, usize)], skip: &[Option<usize>], power: &mut [f64]) {
            power_sums_with::<true, false>(wpow, cols, len, counts, skip, power)
        }
        // SAFETY: `FMA` is set only inside `coefficients_avx2`, after the features were detected.
        return unsafe { apart(wpow, cols, len, counts, skip, power) };
    }
    power_sums_with::<FMA, false>(wpow, cols, len, counts, skip, power)
}

#[inline(always)]
fn power_sums_with<const FMA: bool, const WIDE: bool>(
    wpow: Block,
    cols: Block,
    len: usize,
    counts: &[(usize, usize)],
    skip: &[Option<usize>],
    power: &mut [f64],
) {
    let n_cols = cols.data.len() / cols.stride / GROUP;
    let stride = power.len() / GROUP;
    let s_most = counts.iter().map(|c| c.0).max().unwrap_or(0);
    // (user's column, place in `power`) of every sum of one row.
    let mut jobs: Vec<(usize, usize)> = Vec::with_capacity(counts.len() * n_cols);
    for beta in 0..s_most {
        let row = wpow.row(beta, len);
        jobs.clear();
        for (u, &(_, s_val)) in counts.iter().enumerate().filter(|(_, c)| beta < c.0) {
            let used = (0..if beta < s_val { n_cols } else { 1 }).filter(|&c| c == 0 || skip[c - 1].is_none());
            jobs.extend(used.map(|c| (u * n_cols + c, u * stride + beta * n_cols + c)));
        }
        #[cfg(target_arch = "x86_64")]
        if FMA {
            let col = |k: usize| cols.row(jobs[k].0, len);
            let add = |power: &mut [f64], k: usize, sums: &[f64]| {
                for (&(_, at), v) in jobs[k..].iter().zip(sums) {
                    power[at] += v;
                }
                sums.len()
            };
            let mut k = 0;
            while k < jobs.len() {
                // SAFETY: `FMA` is set only after AVX2 and FMA were detected, `WIDE` only after
                // the AVX-512 features were.
                k += unsafe {
                    match (jobs.len() - k, WIDE) {
                        (1, true) => add(power, k, &dots_avx512(row, [col(k)])),
                        (2, true) => add(power, k, &dots_avx512(row, [col(k), col(k + 1)])),
                        (_, true) => add(power, k, &dots_avx512(row, [col(k), col(k + 1), col(k + 2)])),
                        (1, false) => add(power, k, &dots_avx2(row, [col(k)])),
                        (2, false) => add(power, k, &dots_avx2(row, [col(k), col(k + 1)])),
                        (_, false) => add(power, k, &dots_avx2(row, [col(k), col(k + 1), col(k + 2)])),
                    }
                };
            }
            continue;
        }
        for &(c, at) in &jobs {
            power[at] += lanes::dot::<f64, FMA>(row, cols.row(c, len));
        }
    }
}

/// Σ_j x[j]·y[j] for W vectors y at once, reading x once: the bits of `lanes::dot` for each
/// (the same sixteen lanes, each its own chain, reduced by `lanes::combine`), which LLVM
/// compiled to 128-bit operations here (measured 2× slower than these 512-bit ones).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
unsafe fn dots_avx512<const W: usize>(x: &[f64], ys: [&[f64]; W]) -> [f64; W] {
    use std::arch::x86_64::*;
    const L: usize = lanes::LANES;
    let whole = x.len() / L * L;
    let (mut lo, mut hi) = ([_mm512_setzero_pd(); W], [_mm512_setzero_pd(); W]);
    for j0 in (0..whole).step_by(L) {
        let (a0, a1) = (_mm512_loadu_pd(x[j0..].as_ptr()), _mm512_loadu_pd(x[j0 + 8..].as_ptr()));
        for c in 0..W {
            let y = &ys[c][j0..j0 + L];
            lo[c] = _mm512_fmadd_pd(a0, _mm512_loadu_pd(y.as_ptr()), lo[c]);
            hi[c] = _mm512_fmadd_pd(a1, _mm512_loadu_pd(y[8..].as_ptr()), hi[c]);
        }
    }
    let mut out = [0.0; W];
    for c in 0..W {
        let mut acc = [0.0; L];
        _mm512_storeu_pd(acc.as_mut_ptr(), lo[c]);
        _mm512_storeu_pd(acc[8..].as_mut_ptr(), hi[c]);
        let tail = x[whole..].iter().zip(&ys[c][whole..]).fold(0.0, |t, (&u, &v)| u.mul_add(v, t));
        out[c] = lanes::combine(acc, tail);
    }
    out
}

/// `dots_avx512` in 256-bit registers (four per vector y), for AVX2 + FMA: LLVM compiled
/// `lanes::dot` to 128-bit operations reading x once per y here too (MedoidShift gaussian,
/// 10⁶ 2-D points on an AVX2-only Zen 3: 18.8 s with `lanes::dot`, 13.8–15.3 s with this).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_avx2<const W: usize>(x: &[f64], ys: [&[f64]; W]) -> [f64; W] {
    use std::arch::x86_64::*;
    const L: usize = lanes::LANES;
    let whole = x.len() / L * L;
    let mut acc = [[_mm256_setzero_pd(); 4]; W];
    for j0 in (0..whole).step_by(L) {
        let a = [0, 4, 8, 12].map(|o| _mm256_loadu_pd(x[j0 + o..].as_ptr()));
        for c in 0..W {
            let y = &ys[c][j0..j0 + L];
            for (v, o) in [0, 4, 8, 12].into_iter().enumerate() {
                acc[c][v] = _mm256_fmadd_pd(a[v], _mm256_loadu_pd(y[o..].as_ptr()), acc[c][v]);
            }
        }
    }
    let mut out = [0.0; W];
    for c in 0..W {
        let mut lanes_ = [0.0; L];
        for (v, o) in [0, 4, 8, 12].into_iter().enumerate() {
            _mm256_storeu_pd(lanes_[o..].as_mut_ptr(), acc[c][v]);
        }
        let tail = x[whole..].iter().zip(&ys[c][whole..]).fold(0.0, |t, (&u, &v)| u.mul_add(v, t));
        out[c] = lanes::combine(lanes_, tail);
    }
    out
}

/// sums[c][i] += factor[i − q0] · Σ_{α<t} upow[α][i] · mom[α][c] for the QB queries i from
/// q0 (the stride of `upow` counts them all) and every column c (the stride of `mom`): a
/// small matrix product per pair, in register blocks of 8 or 32 queries by up to CB columns.
#[inline(always)]
fn add_series<const FMA: bool, const WIDE: bool>(t: usize, upow: Block, mom: Block, q0: usize, factor: &[f64; QB], sums: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if WIDE {
        #[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
        #[inline(never)]
        unsafe fn apart(t: usize, upow: Block, mom: Block, q0: usize, factor: &[f64; QB], sums: &mut [f64]) {
            add_series_with::<true, true>(t, upow, mom, q0, factor, sums)
        }
        // SAFETY: as in `power_sums`.
        return unsafe { apart(t, upow, mom, q0, factor, sums) };
    }
    #[cfg(target_arch = "x86_64")]
    if FMA {
        #[target_feature(enable = "avx2,fma")]
        #[inline(never)]
        unsafe fn apart(t: usize, upow: Block, mom: Block, q0: usize, factor: &[f64; QB], sums: &mut [f64]) {
            add_series_with::<true, false>(t, upow, mom, q0, factor, sums)
        }
        // SAFETY: as in `power_sums`.
        return unsafe { apart(t, upow, mom, q0, factor, sums) };
    }
    add_series_with::<FMA, false>(t, upow, mom, q0, factor, sums)
}

#[inline(always)]
fn add_series_with<const FMA: bool, const WIDE: bool>(t: usize, upow: Block, mom: Block, q0: usize, factor: &[f64; QB], sums: &mut [f64]) {
    // Blocks of CB columns, the last one narrower: each block reads the queries' monomials
    // once (a local mean's three columns in one block, not three).
    for c0 in (0..mom.stride).step_by(CB) {
        // With AVX-512, 32 queries give one or two columns four independent accumulators
        // each (7 % faster than 8 for kernel sums), three columns take 16 (5 % faster than
        // 8; 32 spills and runs 1.9× slower), measured. AVX2's sixteen registers take 8.
        match ((mom.stride - c0).min(CB), WIDE) {
            (4, true) => column_block::<FMA, 4, 8>(t, upow, mom, c0, q0, factor, sums),
            (3, true) => column_block::<FMA, 3, 16>(t, upow, mom, c0, q0, factor, sums),
            (2, true) => column_block::<FMA, 2, 32>(t, upow, mom, c0, q0, factor, sums),
            (_, true) => column_block::<FMA, 1, 32>(t, upow, mom, c0, q0, factor, sums),
            (4, false) => column_block::<FMA, 4, 8>(t, upow, mom, c0, q0, factor, sums),
            (3, false) => column_block::<FMA, 3, 8>(t, upow, mom, c0, q0, factor, sums),
            (2, false) => column_block::<FMA, 2, 8>(t, upow, mom, c0, q0, factor, sums),
            (_, false) => column_block::<FMA, 1, 8>(t, upow, mom, c0, q0, factor, sums),
        }
    }
}

/// `add_series` for the W columns from `c0`. Fixed trip counts keep the accumulators in
/// registers.
#[inline(always)]
fn column_block<const FMA: bool, const W: usize, const Q: usize>(
    t: usize,
    upow: Block,
    mom: Block,
    c0: usize,
    q0: usize,
    factor: &[f64; QB],
    sums: &mut [f64],
) {
    let na = upow.stride;
    for i0 in (q0..q0 + QB).step_by(Q) {
        let f: &[f64; Q] = factor[i0 - q0..i0 - q0 + Q].try_into().expect("block of Q");
        if f.iter().all(|&v| v == 0.0) {
            continue;
        }
        let mut acc = [[0.0; Q]; W];
        for al in 0..t {
            let ua: &[f64; Q] = upow.row(al, na)[i0..i0 + Q].try_into().expect("block of Q");
            let mr: &[f64; W] = mom.row(al, mom.stride)[c0..c0 + W].try_into().expect("block of W");
            for c in 0..W {
                for q in 0..Q {
                    acc[c][q] = madd::<f64, FMA>(ua[q], mr[c], acc[c][q]);
                }
            }
        }
        for (c, accc) in acc.iter().enumerate() {
            let s: &mut [f64; Q] = (&mut sums[(c0 + c) * na + i0..(c0 + c) * na + i0 + Q]).try_into().expect("block of Q");
            for q in 0..Q {
                s[q] = madd::<f64, FMA>(f[q], accc[q], s[q]);
            }
        }
    }
}

fn factorial(k: u32) -> f64 {
    (1..=k).fold(1.0, |s, i| s * i as f64)
}

fn binomial(n: u32, k: u32) -> f64 {
    factorial(n) / (factorial(k) * factorial(n - k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_dots_have_the_bits_of_lanes_dot() {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if !(has!("avx2") && has!("fma")) {
                return;
            }
            let wide = has!("avx512f") && has!("avx512dq") && has!("avx512vl");
            let mut state = 0x2545_f491_4f6c_dd1du64;
            let mut next = move || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
            };
            for len in [0, 1, 15, 16, 17, 100, 512] {
                let x: Vec<f64> = (0..len).map(|_| next()).collect();
                let ys: Vec<Vec<f64>> = (0..3).map(|_| (0..len).map(|_| 1e3 * next()).collect()).collect();
                let ys = [&ys[0][..], &ys[1][..], &ys[2][..]];
                // SAFETY: the features were detected above.
                let mut got = vec![unsafe { dots_avx2(&x, ys) }];
                if wide {
                    // SAFETY: as above.
                    got.push(unsafe { dots_avx512(&x, ys) });
                }
                for g in got {
                    for (g, y) in g.iter().zip(ys) {
                        assert_eq!(g.to_bits(), lanes::dot::<f64, true>(&x, y).to_bits(), "len {len}");
                    }
                }
            }
        }
    }
}

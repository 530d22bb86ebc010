//! MeanShift and its relatives (SPEC §4): seeds climb the kernel density by the
//! self-local mean x ← x + α (m(x) − x), m(x) = Σ K(x, xᵢ) wᵢ xᵢ / Σ K(x, xᵢ) wᵢ.
//!
//! This module sums the windows m(x); the iteration itself (steps, stopping, trajectories,
//! progress and Ctrl-C) is `fixed_point`'s. Three ways to evaluate m(x), all deterministic
//! and independent of the thread count:
//! * compact kernels: each seed climbs on its own through a kd-tree (`visit_within`), so a
//!   converged seed costs nothing more. The flat kernel uses the *closed* ball ‖x − xᵢ‖ ≤ h
//!   (as scikit-learn's `radius_neighbors` does) so the centres coincide with scikit-learn's,
//!   and sums its window through a kd-tree with per-node aggregates (`neighbors::BallSums`): nodes
//!   wholly inside the ball add their (Σw, Σwx) at once, points are visited only near the rim;
//! * unbounded kernels (gaussian, exponential, cauchy) and high dimensions: one engine call
//!   per iteration over the seeds still moving, through a prepared `engine::Reference` of
//!   (x, values = x, w) built once for the whole climb;
//! * `Grid`: MeanShift++-style cell aggregation: points are binned into cells of side h / r
//!   and each cell is replaced by its weighted centroid carrying the cell's weight; seeds
//!   then climb on that reduced set (linear in n to build, then independent of n).
//!
//! Blurring mean shift (Cheng) and the fixed-kernel linear diffusion K̃ᵗX are whole-data
//! iterations through the engine.
//!
//! Coordinates far from 1 (with the bandwidth alike) and extreme sample weights are moved
//! into the floating range's middle by exact powers of two (`distance::Scale`) and the
//! results moved back: mean shift is invariant to both.

use super::fixed_point::{self, Diffused, Shifted, Stop, Sums};
use crate::distance::{sq_euclidean, Scale, GEMM_MIN_DIM};
use crate::engine::{local_sums, Bandwidth, Kernel, Options, Problem, Reference};
use crate::checked::{self, Positive, Weights};
use crate::error::{LocalizationError, Result};
use crate::kernel::{dispatch_profile, Profile, ProfileFn};
use crate::real::Real;
use crate::memory;
use crate::neighbors::{BallSums, KdTree, LEAF_SIZE};
use crate::parallel::Monitor;
use ndarray::{Array2, ArrayView1, ArrayView2};
use rayon::prelude::*;
use std::collections::HashMap;

#[derive(Clone, Debug)]
pub struct Params {
    pub profile: Profile,
    pub bandwidth: f64,
    /// Step size α of x ← x + α (m(x) − x).
    pub step: f64,
    /// Stop when ‖Δx‖ ≤ tol · h.
    pub tol: f64,
    pub max_iter: usize,
    pub trajectories: bool,
}

impl Params {
    pub fn validate(&self) -> Result<()> {
        Positive::new("bandwidth", self.bandwidth)?;
        Positive::new("step", self.step)?;
        if !(self.tol >= 0.0 && self.tol.is_finite()) {
            return Err(LocalizationError::param("tol", "must be finite and non-negative"));
        }
        Ok(())
    }

    /// The iteration's stopping rule (the tolerance relative to h).
    pub fn stop(&self) -> Stop {
        Stop { step: self.step, threshold: self.tol * self.bandwidth, max_iter: self.max_iter, trajectories: self.trajectories }
    }
}

fn check_data<F: Real>(x: ArrayView2<F>, w: Option<ArrayView1<F>>, seeds: ArrayView2<F>) -> Result<()> {
    let (n, d) = x.dim();
    if n == 0 {
        return Err(LocalizationError::EmptyInput { name: "X" });
    }
    if d == 0 {
        return Err(LocalizationError::param("X", "needs at least one feature"));
    }
    if seeds.ncols() != d {
        return Err(LocalizationError::shape("seeds", format!("{d} features"), format!("{} features", seeds.ncols())));
    }
    Weights::optional(w, n)?;
    Ok(())
}

/// Which evaluation an exact run uses: the per-seed kd-tree loop, or the engine.
pub fn uses_tree(profile: Profile, d: usize) -> bool {
    profile == Profile::Tophat || (profile.support().is_some() && d < GEMM_MIN_DIM)
}

/// A reference set (x, w) prepared for MeanShift windows of one kernel and bandwidth: the
/// one place where a seed's window is summed, whether all of x sits on this machine or x is
/// one shard of a larger set whose sums the caller merges.
pub struct Window<F: Real> {
    d: usize,
    kind: WindowKind<F>,
}

enum WindowKind<F: Real> {
    /// Compact kernels in low dimensions (and the flat kernel always): per seed, a tree.
    Tree(TreeWindow<F>),
    /// Unbounded kernels and high dimensions: the engine, over a prepared copy of (x, x, w)
    /// whose layouts every iteration reuses.
    Engine { profile: Profile, h: F, reference: Box<Reference<F>> },
}

pub enum TreeWindow<F> {
    /// The flat kernel: the closed ball ‖x − q‖ ≤ h from the aggregate tree.
    Ball { tree: BallSums<F>, h2: F },
    /// Other compact kernels: the points within h through a kd-tree, visited in tree order
    /// (tree-ordered copies of the points and weights).
    Points { tree: KdTree<F>, points: Vec<F>, weights: Vec<F>, profile: Profile, h2: F },
}

impl<F: Real> TreeWindow<F> {
    /// Σ K w (returned) and Σ K w x (added into `num`) of the window at q, in a fixed order.
    fn one(&self, q: &[F], num: &mut [f64]) -> f64 {
        match self {
            TreeWindow::Ball { tree, h2 } => tree.ball_sums(q, *h2, num),
            TreeWindow::Points { tree, points, weights, profile, h2 } => {
                let d = q.len();
                let inv_h2 = F::one() / *h2;
                let mut den = 0.0f64;
                dispatch_profile!(*profile, P, {
                    tree.visit_within(q, *h2, &mut |pos, d2| {
                        let kw = (P::k(d2 * inv_h2) * weights[pos]).f64();
                        if kw == 0.0 {
                            return;
                        }
                        den += kw;
                        for (a, &b) in num.iter_mut().zip(&points[pos * d..(pos + 1) * d]) {
                            *a += kw * b.f64();
                        }
                    })
                });
                den
            }
        }
    }
}

impl<F: Real> Window<F> {
    /// Prepare the windows (a tree is built on the current rayon pool, polling `mon`); the
    /// window keeps what it needs of x and w.
    pub fn build(x: ArrayView2<F>, w: Option<ArrayView1<F>>, profile: Profile, bandwidth: f64, mon: &Monitor) -> Result<Self> {
        check_data(x, w, x)?;
        Positive::new("bandwidth", bandwidth)?;
        let h = F::of(bandwidth);
        let d = x.ncols();
        let kind = if !uses_tree(profile, d) {
            let reference = Box::new(Reference::new(x.to_owned(), Some(x.to_owned()), w.map(|w| w.to_owned()), None)?);
            WindowKind::Engine { profile, h, reference }
        } else if profile == Profile::Tophat {
            WindowKind::Tree(TreeWindow::Ball { tree: BallSums::build(x, w, 16, mon)?, h2: h * h })
        } else {
            let tree = KdTree::build(x, LEAF_SIZE, mon)?;
            let order = tree.order();
            // Tree-ordered copies: the visit streams memory and sums in a fixed order.
            let points = order.iter().flat_map(|&i| x.row(i).to_vec()).collect();
            let weights = order.iter().map(|&i| w.map_or(F::one(), |w| w[i])).collect();
            WindowKind::Tree(TreeWindow::Points { tree, points, weights, profile, h2: h * h })
        };
        Ok(Window { d, kind })
    }

    /// The window sums at every row of `q`, on the current rayon pool, polling `mon`.
    pub fn sums(&self, q: ArrayView2<F>, mon: &Monitor) -> Result<Sums> {
        let (m, d) = q.dim();
        if d != self.d {
            return Err(LocalizationError::shape("positions", format!("{} features", self.d), format!("{d} features")));
        }
        match &self.kind {
            WindowKind::Engine { profile, h, reference } => {
                let opts = Options { monitor: mon.clone(), ..Options::default() };
                let s = reference.local_sums(q, None, &Kernel::Radial(*profile), &Bandwidth::Scalar(*h), &opts)?;
                Ok(Sums { num: s.num.mapv(|v| v.f64()), den: s.den.iter().map(|v| v.f64()).collect(), log_scale: s.log_scale.iter().map(|v| v.f64()).collect() })
            }
            WindowKind::Tree(t) => {
                let mut num = memory::try_array("sums", (m, d), 0.0f64)?;
                let den = num
                    .axis_iter_mut(ndarray::Axis(0))
                    .into_par_iter()
                    .enumerate()
                    .map(|(i, mut row)| {
                        mon.check()?;
                        let q = q.row(i).to_vec();
                        let mut acc = vec![0.0f64; d];
                        let den = t.one(&q, &mut acc);
                        row.assign(&ndarray::ArrayView1::from(&acc[..]));
                        Ok(den)
                    })
                    .collect::<Result<Vec<f64>>>()?;
                Ok(Sums { num, den, log_scale: vec![0.0; m] })
            }
        }
    }
}

/// Shift every seed to its mode (exact kernel sums). Progress: finished seeds (tree paths)
/// or iterations (engine path).
pub fn shift_seeds<F: Real>(x: ArrayView2<F>, w: Option<ArrayView1<F>>, seeds: ArrayView2<F>, p: &Params, mon: &Monitor) -> Result<Shifted<F>> {
    p.validate()?;
    check_data(x, w, seeds)?;
    let lengths = Scale::of_arrays(&[x, seeds]);
    let weights = w.map_or(Scale::ONE, |w| Scale::of_values(w.iter().copied()));
    if lengths.is_one() && weights.is_one() {
        return shift_in_range(x, w, seeds, p, mon);
    }
    let (xs, ss) = (lengths.down_array(x)?, lengths.down_array(seeds)?);
    let ws = w.map(|w| w.mapv(|v| weights.down(v)));
    let ps = Params { bandwidth: lengths.down(p.bandwidth), ..p.clone() };
    let mut out = shift_in_range(xs.view(), ws.as_ref().map(|w| w.view()), ss.view(), &ps, mon)?;
    out.modes.mapv_inplace(|v| lengths.up(v));
    out.trajectories.iter_mut().flatten().for_each(|v| *v = lengths.up(*v));
    Ok(out)
}

/// 1/h² must exist in F for the kernel to resolve the points (scaled coordinates are of order
/// one, so this bounds h against the data's extent).
fn check_reach<F: Real>(h: f64) -> Result<()> {
    if !checked::resolvable(F::of(h)) {
        return Err(LocalizationError::param("bandwidth", "is too small against the coordinates: 1/h² overflows the floating-point type"));
    }
    Ok(())
}

/// Compact kernels climb seed by seed (a converged seed costs nothing more); unbounded ones
/// advance the seeds still moving together, one engine call per iteration.
fn shift_in_range<F: Real>(x: ArrayView2<F>, w: Option<ArrayView1<F>>, seeds: ArrayView2<F>, p: &Params, mon: &Monitor) -> Result<Shifted<F>> {
    check_reach::<F>(p.bandwidth)?;
    let window = Window::build(x, w, p.profile, p.bandwidth, mon)?;
    match &window.kind {
        WindowKind::Tree(t) => fixed_point::climb_each(seeds, &p.stop(), mon, |q, num| t.one(q, num)),
        WindowKind::Engine { .. } => fixed_point::climb_together(seeds, &p.stop(), mon, |q| window.sums(q, mon)),
    }
}

/// The most features the grid takes (MeanShift's documented limit; the window of a cell meets
/// the 3^d cells around it).
pub const GRID_MAX_FEATURES: usize = 4;

/// The grid of MeanShift++-style cell aggregation: cells of side h / r anchored at the
/// lower corner `lo` of the data, `extent` cells per feature up to the upper corner.
#[derive(Clone, Debug)]
pub struct GridSpec {
    lo: Vec<f64>,
    side: f64,
    extent: Vec<u64>,
    n_cells: u64,
}

impl GridSpec {
    /// The grid over the box [lo, hi] (the data's bounds, however they were found).
    pub fn new(lo: &[f64], hi: &[f64], h: f64, cells_per_bandwidth: usize) -> Result<Self> {
        let d = lo.len();
        if d == 0 || d > GRID_MAX_FEATURES {
            return Err(LocalizationError::param(
                "algorithm",
                format!("'grid' is for 1 to {GRID_MAX_FEATURES} features (X has {d}); use 'exact'"),
            ));
        }
        if hi.len() != d {
            return Err(LocalizationError::shape("hi", format!("{d} values"), hi.len()));
        }
        if cells_per_bandwidth == 0 || cells_per_bandwidth > 64 {
            return Err(LocalizationError::param("grid_resolution", "must be an integer in [1, 64]"));
        }
        Positive::new("bandwidth", h)?;
        if lo.iter().chain(hi).any(|v| !v.is_finite()) || lo.iter().zip(hi).any(|(a, b)| a > b) {
            return Err(LocalizationError::param("X", "the grid needs finite bounds with lo <= hi"));
        }
        let side = h / cells_per_bandwidth as f64;
        // Saturating: a spread beyond u64 cells must fail the count check below, not wrap to 0.
        let extent: Vec<u64> = (0..d).map(|k| (((hi[k] - lo[k]) / side).floor() as u64).saturating_add(1)).collect();
        let n_cells = extent.iter().try_fold(1u64, |a, &e| a.checked_mul(e)).filter(|&t| t < (1u64 << 62)).ok_or_else(|| {
            LocalizationError::param("bandwidth", "too small for the spread of the data on a grid; use algorithm='exact'")
        })?;
        Ok(GridSpec { lo: lo.to_vec(), side, extent, n_cells })
    }

    /// The grid over the bounding box of x.
    pub fn of_data<F: Real>(x: ArrayView2<F>, h: f64, cells_per_bandwidth: usize) -> Result<Self> {
        let (n, d) = x.dim();
        if n == 0 {
            return Err(LocalizationError::EmptyInput { name: "X" });
        }
        let mut lo = vec![f64::INFINITY; d];
        let mut hi = vec![f64::NEG_INFINITY; d];
        for row in x.rows() {
            for k in 0..d {
                lo[k] = lo[k].min(row[k].f64());
                hi[k] = hi[k].max(row[k].f64());
            }
        }
        GridSpec::new(&lo, &hi, h, cells_per_bandwidth)
    }

    pub fn dim(&self) -> usize {
        self.lo.len()
    }

    /// The cell key of every row of x (points outside the box go to its border cells).
    pub fn keys<F: Real>(&self, x: ArrayView2<F>) -> Result<Vec<u64>> {
        let d = self.dim();
        if x.ncols() != d {
            return Err(LocalizationError::shape("X", format!("{d} features"), format!("{} features", x.ncols())));
        }
        Ok((0..x.nrows())
            .into_par_iter()
            .map(|i| {
                let mut key = 0u64;
                for k in (0..d).rev() {
                    let c = (((x[(i, k)].f64() - self.lo[k]) / self.side).floor() as i64).clamp(0, self.extent[k] as i64 - 1) as u64;
                    key = key * self.extent[k] + c;
                }
                key
            })
            .collect())
    }

    /// The occupied cells of x in order of first appearance, with their sums, and the cell
    /// of every point.
    pub fn cells<F: Real>(&self, x: ArrayView2<F>, w: Option<ArrayView1<F>>) -> Result<(Cells, Vec<u32>)> {
        let (n, d) = x.dim();
        if let Some(w) = w {
            if w.len() != n {
                return Err(LocalizationError::shape("sample_weight", format!("{n} entries"), w.len()));
            }
        }
        let keys = self.keys(x)?;
        let mut point_cell = Vec::with_capacity(n);
        let mut cell_keys = Vec::new();
        if self.n_cells <= (4 * n as u64).max(1 << 20) {
            let mut table = vec![u32::MAX; self.n_cells as usize];
            for &key in &keys {
                let t = &mut table[key as usize];
                if *t == u32::MAX {
                    *t = cell_keys.len() as u32;
                    cell_keys.push(key);
                }
                point_cell.push(*t);
            }
        } else {
            let mut map: HashMap<u64, u32> = HashMap::new();
            for &key in &keys {
                let s = *map.entry(key).or_insert(cell_keys.len() as u32);
                if s as usize == cell_keys.len() {
                    cell_keys.push(key);
                }
                point_cell.push(s);
            }
        }
        let m = cell_keys.len();
        let mut weight = vec![0.0f64; m];
        let mut sum = vec![0.0f64; m * d];
        for i in 0..n {
            let c = point_cell[i] as usize;
            let wi = w.map_or(1.0, |w| w[i].f64());
            weight[c] += wi;
            for k in 0..d {
                sum[c * d + k] += wi * x[(i, k)].f64();
            }
        }
        // A cell of zero total weight keeps its plain centroid: count and plain sums are
        // kept when some cell weighs nothing (a cell weighing nothing overall weighs nothing
        // in every part holding it, so merged parts keep what they need).
        let plain = weight.contains(&0.0).then(|| {
            let mut count = vec![0.0f64; m];
            let mut psum = vec![0.0f64; m * d];
            for i in 0..n {
                let c = point_cell[i] as usize;
                count[c] += 1.0;
                for k in 0..d {
                    psum[c * d + k] += x[(i, k)].f64();
                }
            }
            (count, psum)
        });
        Ok((Cells { d, keys: cell_keys, weight, sum, plain }, point_cell))
    }
}

/// Occupied cells of a grid with their sums: Σ w and Σ w x per cell (and the point count and
/// Σ x when some cell weighs nothing). Cells of disjoint parts of the data merge exactly.
#[derive(Clone, Debug)]
pub struct Cells {
    pub d: usize,
    pub keys: Vec<u64>,
    pub weight: Vec<f64>,
    /// m × d, row-major.
    pub sum: Vec<f64>,
    /// (count, Σ x) per cell.
    pub plain: Option<(Vec<f64>, Vec<f64>)>,
}

impl Cells {
    /// Cells from their parts (as a caller kept them), checked: m keys, m weights, m × d sums
    /// and, when present, m counts and m × d plain sums.
    pub fn new(d: usize, keys: Vec<u64>, weight: Vec<f64>, sum: Vec<f64>, plain: Option<(Vec<f64>, Vec<f64>)>) -> Result<Cells> {
        let cells = Cells { d, keys, weight, sum, plain };
        cells.check(d)?;
        Ok(cells)
    }

    fn check(&self, d: usize) -> Result<()> {
        let m = self.keys.len();
        if self.d != d || self.weight.len() != m || self.sum.len() != m * d || self.plain.as_ref().is_some_and(|(c, s)| c.len() != m || s.len() != m * d) {
            return Err(LocalizationError::shape("cells", format!("{d} features and consistent lengths"), format!("{} features, {m} keys", self.d)));
        }
        Ok(())
    }

    /// The cells of the concatenated parts, in order of first appearance, sums added in the
    /// order of the parts.
    pub fn merge(parts: &[&Cells]) -> Result<Cells> {
        let d = parts.first().map_or(0, |c| c.d);
        let mut out = Cells { d, keys: Vec::new(), weight: Vec::new(), sum: Vec::new(), plain: None };
        let keep_plain = parts.iter().any(|c| c.plain.is_some());
        let (mut count, mut psum) = (Vec::new(), Vec::new());
        let mut slot: HashMap<u64, usize> = HashMap::new();
        for part in parts {
            part.check(d)?;
            for (c, &key) in part.keys.iter().enumerate() {
                let s = *slot.entry(key).or_insert_with(|| {
                    out.keys.push(key);
                    out.weight.push(0.0);
                    out.sum.resize(out.sum.len() + d, 0.0);
                    if keep_plain {
                        count.push(0.0);
                        psum.resize(psum.len() + d, 0.0);
                    }
                    out.keys.len() - 1
                });
                out.weight[s] += part.weight[c];
                for k in 0..d {
                    out.sum[s * d + k] += part.sum[c * d + k];
                }
                if let Some((pc, ps)) = &part.plain {
                    count[s] += pc[c];
                    for k in 0..d {
                        psum[s * d + k] += ps[c * d + k];
                    }
                }
            }
        }
        if keep_plain {
            out.plain = Some((count, psum));
        }
        Ok(out)
    }

    /// Weighted centroid and total weight of every cell (the plain centroid for a cell of
    /// zero weight, which then weighs nothing).
    pub fn centroids<F: Real>(&self) -> Result<(Array2<F>, Vec<F>)> {
        let d = self.d;
        let m = self.keys.len();
        let mut out = Array2::zeros((m, d));
        for c in 0..m {
            for k in 0..d {
                out[(c, k)] = if self.weight[c] > 0.0 {
                    F::of(self.sum[c * d + k] / self.weight[c])
                } else {
                    match &self.plain {
                        Some((count, psum)) => F::of(psum[c * d + k] / count[c]),
                        None => return Err(LocalizationError::param("cells", "a cell of zero weight needs its plain sums")),
                    }
                };
            }
        }
        Ok((out, self.weight.iter().map(|&v| F::of(v)).collect()))
    }
}

/// Grid (MeanShift++-style) reduction: points binned into cells of side h / r, each cell
/// replaced by its weighted centroid carrying the cell's total weight.
pub struct Grid<F> {
    pub centroids: Array2<F>,
    /// Cell weights; sample weights far outside the floating range's middle are first scaled
    /// by a common power of two (mean shift only sees their ratios).
    pub weights: Vec<F>,
    /// Cell (row of `centroids`) of each data point.
    pub point_cell: Vec<u32>,
}

impl<F: Real> Grid<F> {
    pub fn build(x: ArrayView2<F>, w: Option<ArrayView1<F>>, h: f64, cells_per_bandwidth: usize) -> Result<Self> {
        let spec = GridSpec::of_data(x, h, cells_per_bandwidth)?;
        // Mean shift only sees the weights' ratios: a common power of two keeps their sums in range.
        let wscale = w.map_or(Scale::ONE, |w| Scale::of_values(w.iter().copied()));
        let ws = w.map(|w| w.mapv(|v| wscale.down(v)));
        let (cells, point_cell) = spec.cells(x, ws.as_ref().map(|w| w.view()))?;
        let (centroids, weights) = cells.centroids()?;
        Ok(Grid { centroids, weights, point_cell })
    }
}

/// Shift seeds on the grid's weighted cell centroids (flat kernel, closed ball).
pub fn grid_shift<F: Real>(grid: &Grid<F>, seeds: ArrayView2<F>, p: &Params, mon: &Monitor) -> Result<Shifted<F>> {
    let w = ndarray::ArrayView1::from(&grid.weights[..]);
    let mut flat = p.clone();
    flat.profile = Profile::Tophat;
    shift_seeds(grid.centroids.view(), Some(w), seeds, &flat, mon)
}

/// Blurring mean shift (`blurring = true`: Y ← Y + α(m_Y(Y) − Y), the data set itself moves)
/// or the fixed-kernel linear diffusion (`blurring = false`: Y ← Y + α(K̃Y − Y) with K̃ the
/// row-normalised kernel of the original X, so α = 1 gives Y_t = K̃ᵗ X).
pub fn diffuse<F: Real>(x: ArrayView2<F>, w: Option<ArrayView1<F>>, p: &Params, blurring: bool, mon: &Monitor) -> Result<Diffused<F>> {
    p.validate()?;
    check_data(x, w, x)?;
    let lengths = Scale::of_arrays(&[x]);
    let weights = w.map_or(Scale::ONE, |w| Scale::of_values(w.iter().copied()));
    if lengths.is_one() && weights.is_one() {
        return diffuse_in_range(x, w, p, blurring, mon);
    }
    let xs = lengths.down_array(x)?;
    let ws = w.map(|w| w.mapv(|v| weights.down(v)));
    let ps = Params { bandwidth: lengths.down(p.bandwidth), ..p.clone() };
    let mut out = diffuse_in_range(xs.view(), ws.as_ref().map(|w| w.view()), &ps, blurring, mon)?;
    out.positions.mapv_inplace(|v| lengths.up(v));
    out.history.iter_mut().for_each(|h| h.mapv_inplace(|v| lengths.up(v)));
    Ok(out)
}

fn diffuse_in_range<F: Real>(x: ArrayView2<F>, w: Option<ArrayView1<F>>, p: &Params, blurring: bool, mon: &Monitor) -> Result<Diffused<F>> {
    check_reach::<F>(p.bandwidth)?;
    let kernel = Kernel::Radial(p.profile);
    let bw = Bandwidth::Scalar(F::of(p.bandwidth));
    let opts = Options { monitor: mon.clone(), ..Options::default() };
    // Diffusion: the kernel stays X's, so X is prepared once (layout, kd-tree) and only the
    // moved positions, its values, change per step. Blurring: the moved set is its own
    // reference, so nothing carries over from one step to the next.
    let fixed = (!blurring).then(|| Reference::new(x.to_owned(), None, w.map(|w| w.to_owned()), None)).transpose()?;
    fixed_point::iterate_whole(x.to_owned(), &p.stop(), mon, |y| {
        let s = match &fixed {
            Some(r) => r.local_sums(x, Some(y), &kernel, &bw, &opts)?,
            None => local_sums(&Problem { queries: y, x: y, values: Some(y), weights: w }, &kernel, &bw, &opts)?,
        };
        Ok(Sums { num: s.num.mapv(|v| v.f64()), den: s.den.iter().map(|v| v.f64()).collect(), log_scale: s.log_scale.iter().map(|v| v.f64()).collect() })
    })
}

/// scikit-learn's post-processing: drop invalid seeds, collapse exactly equal centres
/// (keeping the last one's support), sort by (support, centre) descending, and keep a
/// centre only if no kept centre lies within `radius` (closed). Returns the kept indices.
pub fn merge_modes<F: Real>(centres: ArrayView2<F>, support: &[f64], valid: &[bool], radius: f64) -> Result<Vec<usize>> {
    let (m, d) = centres.dim();
    if support.len() != m || valid.len() != m {
        return Err(LocalizationError::shape("support", format!("{m} entries"), support.len()));
    }
    let lex = |a: usize, b: usize| {
        for k in 0..d {
            let o = centres[(a, k)].f64().total_cmp(&centres[(b, k)].f64());
            if o != std::cmp::Ordering::Equal {
                return o;
            }
        }
        std::cmp::Ordering::Equal
    };
    let mut idx: Vec<usize> = (0..m).filter(|&i| valid[i]).collect();
    idx.sort_by(|&a, &b| lex(a, b).then(a.cmp(&b)));
    // One representative per exact centre: the last seed, with its support.
    let mut reps: Vec<usize> = Vec::with_capacity(idx.len());
    for (j, &i) in idx.iter().enumerate() {
        if j + 1 < idx.len() && lex(i, idx[j + 1]) == std::cmp::Ordering::Equal {
            continue;
        }
        reps.push(i);
    }
    reps.sort_by(|&a, &b| support[b].total_cmp(&support[a]).then(lex(b, a)));
    // Squared distances in a scaled space, where they cannot overflow.
    let lengths = Scale::of_arrays(&[centres]);
    let r = lengths.down(radius);
    let r2 = r * r;
    let mut kept: Vec<usize> = Vec::new();
    let mut kept_rows: Vec<Vec<F>> = Vec::new();
    for &i in &reps {
        let row: Vec<F> = centres.row(i).iter().map(|&v| lengths.down(v)).collect();
        if kept_rows.iter().all(|c| sq_euclidean(c, &row).f64() > r2) {
            kept.push(i);
            kept_rows.push(row);
        }
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::fixed_point::SeedSet;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn blobs(n: usize) -> Array2<f64> {
        let mut rng = StdRng::seed_from_u64(1);
        Array2::from_shape_fn((n, 2), |(i, _)| (i % 3) as f64 * 10.0 + rng.random::<f64>())
    }

    fn params(profile: Profile) -> Params {
        Params { profile, bandwidth: 2.0, step: 1.0, tol: 1e-3, max_iter: 300, trajectories: false }
    }

    /// Shift the seeds x on a pool of `threads` workers.
    fn shift(x: &Array2<f64>, p: &Params, threads: usize) -> Shifted<f64> {
        crate::parallel::install(threads, || shift_seeds(x.view(), None, x.view(), p, &Monitor::default())).unwrap().unwrap()
    }

    #[test]
    fn flat_seeds_reach_blob_means_and_threads_do_not_matter() {
        let x = blobs(300);
        let a = shift(&x, &params(Profile::Tophat), 1);
        let b = shift(&x, &params(Profile::Tophat), 2);
        assert_eq!(a.modes, b.modes);
        let kept = merge_modes(a.modes.view(), &a.support, &a.valid, 2.0).unwrap();
        assert_eq!(kept.len(), 3);
        for &k in &kept {
            let c = a.modes.row(k);
            let blob = (c[0] / 10.0).round() as usize;
            let members: Vec<usize> = (0..300).filter(|i| i % 3 == blob).collect();
            let mean0 = members.iter().map(|&i| x[(i, 0)]).sum::<f64>() / members.len() as f64;
            assert!((c[0] - mean0).abs() < 1e-9);
        }
    }

    #[test]
    fn gaussian_engine_path_converges_and_grid_agrees() {
        let x = blobs(300);
        let g = shift(&x, &params(Profile::Gaussian), 2);
        assert!(g.converged.iter().all(|&c| c));
        let grid = Grid::build(x.view(), None, 2.0, 8).unwrap();
        let s = grid_shift(&grid, x.view(), &params(Profile::Tophat), &Monitor::default()).unwrap();
        let e = shift(&x, &params(Profile::Tophat), 2);
        for i in 0..300 {
            let d = ((s.modes[(i, 0)] - e.modes[(i, 0)]).powi(2) + (s.modes[(i, 1)] - e.modes[(i, 1)]).powi(2)).sqrt();
            assert!(d < 0.2, "seed {i}: {d}");
        }
    }

    #[test]
    fn aggregate_tree_ball_sums_match_brute_force() {
        let mut rng = StdRng::seed_from_u64(5);
        for &d in &[1usize, 2, 3, 5] {
            let x = Array2::from_shape_fn((900, d), |(i, _)| if i % 7 == 0 { 0.5 } else { rng.random::<f64>() });
            let w: Vec<f64> = (0..900).map(|i| (i % 4) as f64 * 0.5).collect();
            let wv = ndarray::ArrayView1::from(&w[..]);
            let tree = BallSums::build(x.view(), Some(wv), 16, &Monitor::default()).unwrap();
            for _ in 0..50 {
                let q: Vec<f64> = (0..d).map(|_| rng.random::<f64>()).collect();
                let r2 = rng.random::<f64>() * 0.3;
                let mut num = vec![0.0; d];
                let den = tree.ball_sums(&q, r2, &mut num);
                let (mut bden, mut bnum) = (0.0, vec![0.0; d]);
                for i in 0..900 {
                    let row = x.row(i).to_vec();
                    if sq_euclidean(&q, &row) <= r2 {
                        bden += w[i];
                        for k in 0..d {
                            bnum[k] += w[i] * row[k];
                        }
                    }
                }
                assert!((den - bden).abs() < 1e-9, "d={d}");
                for k in 0..d {
                    assert!((num[k] - bnum[k]).abs() < 1e-9);
                }
            }
        }
    }

    #[test]
    fn merge_keeps_the_strongest_and_drops_invalid() {
        let c = ndarray::array![[0.0, 0.0], [0.5, 0.0], [3.0, 0.0], [0.0, 0.0], [9.0, 9.0]];
        let kept = merge_modes(c.view(), &[5.0, 7.0, 1.0, 5.0, 100.0], &[true, true, true, true, false], 1.0).unwrap();
        assert_eq!(kept, vec![1, 2]);
    }

    /// Window sums of disjoint shards merged (the sharded driver) give the single-run result.
    fn sharded_run(x: &Array2<f64>, seeds: ArrayView2<f64>, p: &Params, cuts: &[usize]) -> Shifted<f64> {
        let mon = Monitor::default();
        let shards: Vec<Array2<f64>> = cuts.windows(2).filter(|c| c[0] < c[1]).map(|c| x.slice(ndarray::s![c[0]..c[1], ..]).to_owned()).collect();
        let windows: Vec<Window<f64>> = shards.iter().map(|s| Window::build(s.view(), None, p.profile, p.bandwidth, &mon).unwrap()).collect();
        let mut set = SeedSet::new(seeds, &p.stop()).unwrap();
        while set.n_active() > 0 {
            let q = set.positions();
            let parts: Vec<Sums> = windows.iter().map(|w| w.sums(q.view(), &mon).unwrap()).collect();
            // Stabilised merge: every part rescaled to the largest log-scale.
            let m = q.nrows();
            let mut merged = Sums { num: Array2::zeros((m, 2)), den: vec![0.0; m], log_scale: vec![0.0; m] };
            for i in 0..m {
                let top = parts.iter().filter(|s| s.den[i] > 0.0).map(|s| s.log_scale[i]).fold(f64::NEG_INFINITY, f64::max);
                let top = if top.is_finite() { top } else { 0.0 };
                merged.log_scale[i] = top;
                for s in parts.iter().filter(|s| s.den[i] > 0.0) {
                    let f = (s.log_scale[i] - top).exp();
                    merged.den[i] += s.den[i] * f;
                    for k in 0..2 {
                        merged.num[(i, k)] += s.num[(i, k)] * f;
                    }
                }
            }
            set.advance(&merged, &p.stop()).unwrap();
        }
        set.finish().unwrap()
    }

    #[test]
    fn merged_shard_windows_climb_like_one_machine() {
        let x = blobs(300);
        for profile in [Profile::Tophat, Profile::Gaussian, Profile::Epanechnikov] {
            let p = params(profile);
            let one = shift(&x, &p, 2);
            let sharded = sharded_run(&x, x.view(), &p, &[0, 1, 1, 120, 300]);
            assert_eq!(one.n_iter, sharded.n_iter, "{profile:?}");
            assert_eq!(one.converged, sharded.converged);
            assert_eq!(one.valid, sharded.valid);
            for (a, b) in one.modes.iter().zip(sharded.modes.iter()) {
                assert!((a - b).abs() <= 1e-12 * a.abs().max(1.0), "{profile:?}: {a} vs {b}");
            }
            for (a, b) in one.support.iter().zip(&sharded.support) {
                assert!((a - b).abs() <= 1e-12 * a.abs(), "{profile:?}: {a} vs {b}");
            }
        }
        // A shape mismatch between the set and the sums is an error, not a panic.
        let p = params(Profile::Tophat);
        let mut set = SeedSet::new(x.view(), &p.stop()).unwrap();
        let bad = Sums { num: Array2::zeros((2, 2)), den: vec![1.0; 2], log_scale: vec![0.0; 2] };
        assert!(set.advance(&bad, &p.stop()).is_err());
    }

    /// The engine windows sum through a reference prepared once: every round gives the raw
    /// engine call's sums bit for bit, and positions of the wrong width are an error.
    #[test]
    fn engine_windows_reuse_a_prepared_reference_bit_for_bit() {
        let x = blobs(300);
        let w: Vec<f64> = (0..300).map(|i| 0.5 + (i % 4) as f64).collect();
        let wv = ndarray::ArrayView1::from(&w[..]);
        let mon = Monitor::default();
        let q = x.slice(ndarray::s![..40, ..]).mapv(|v| v + 0.1);
        for profile in [Profile::Gaussian, Profile::Cauchy, Profile::Exponential] {
            let win = Window::build(x.view(), Some(wv), profile, 2.0, &mon).unwrap();
            let pb = Problem { queries: q.view(), x: x.view(), values: Some(x.view()), weights: Some(wv) };
            let raw = local_sums(&pb, &Kernel::Radial(profile), &Bandwidth::Scalar(2.0), &Options::default()).unwrap();
            let bits = |v: &mut dyn Iterator<Item = f64>| v.map(f64::to_bits).collect::<Vec<_>>();
            for _ in 0..2 {
                let s = win.sums(q.view(), &mon).unwrap();
                assert_eq!(bits(&mut s.num.iter().copied()), bits(&mut raw.num.iter().copied()), "{profile:?}");
                assert_eq!(bits(&mut s.den.iter().copied()), bits(&mut raw.den.iter().copied()), "{profile:?}");
                assert_eq!(bits(&mut s.log_scale.iter().copied()), bits(&mut raw.log_scale.iter().copied()), "{profile:?}");
            }
            assert!(win.sums(Array2::zeros((2, 3)).view(), &mon).is_err());
        }
    }

    #[test]
    fn grid_cells_of_parts_merge_into_the_cells_of_the_whole() {
        let x = blobs(500);
        let w: Vec<f64> = (0..500).map(|i| if i % 5 == 0 { 0.0 } else { 1.0 + (i % 3) as f64 }).collect();
        let wv = ndarray::ArrayView1::from(&w[..]);
        let spec = GridSpec::of_data(x.view(), 2.0, 4).unwrap();
        let (whole, point_cell) = spec.cells(x.view(), Some(wv)).unwrap();
        let parts: Vec<Cells> = [0usize, 0, 1, 200, 500]
            .windows(2)
            .map(|c| spec.cells(x.slice(ndarray::s![c[0]..c[1], ..]), Some(wv.slice(ndarray::s![c[0]..c[1]]))).unwrap().0)
            .collect();
        let merged = Cells::merge(&parts.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(whole.keys, merged.keys);
        let keys = spec.keys(x.view()).unwrap();
        for (i, &c) in point_cell.iter().enumerate() {
            assert_eq!(whole.keys[c as usize], keys[i]);
        }
        let (a, wa) = whole.centroids::<f64>().unwrap();
        let (b, wb) = merged.centroids::<f64>().unwrap();
        for (u, v) in a.iter().zip(b.iter()) {
            assert!((u - v).abs() <= 1e-12 * u.abs().max(1.0));
        }
        for (u, v) in wa.iter().zip(&wb) {
            assert!((u - v).abs() <= 1e-12 * u.abs());
        }
        // A lone zero-weight point makes a cell of zero weight: its centroid is the point.
        let z = ndarray::array![[0.0, 0.0], [100.0, 100.0]];
        let zw = [1.0, 0.0];
        let spec = GridSpec::of_data(z.view(), 1.0, 1).unwrap();
        let parts: Vec<Cells> = (0..2).map(|i| spec.cells(z.slice(ndarray::s![i..i + 1, ..]), Some(ndarray::ArrayView1::from(&zw[i..i + 1]))).unwrap().0).collect();
        let (c, cw) = Cells::merge(&parts.iter().collect::<Vec<_>>()).unwrap().centroids::<f64>().unwrap();
        assert_eq!(c, z);
        assert_eq!(cw, vec![1.0, 0.0]);
        assert!(GridSpec::new(&[0.0], &[1.0, 2.0], 1.0, 4).is_err());
        assert!(GridSpec::new(&[0.0], &[f64::NAN], 1.0, 4).is_err());
    }


    #[test]
    fn bad_parameters_are_errors() {
        let x = blobs(10);
        let mon = Monitor::default();
        let mut p = params(Profile::Tophat);
        p.bandwidth = 0.0;
        assert!(shift_seeds(x.view(), None, x.view(), &p, &mon).is_err());
        let p = params(Profile::Tophat);
        assert!(shift_seeds(x.view(), None, Array2::zeros((2, 3)).view(), &p, &mon).is_err());
    }

    #[test]
    fn a_stopped_monitor_interrupts_every_path() {
        let x = blobs(300);
        let mon = Monitor::default();
        mon.stop();
        for profile in [Profile::Tophat, Profile::Epanechnikov, Profile::Gaussian] {
            let r = shift_seeds(x.view(), None, x.view(), &params(profile), &mon);
            assert_eq!(r.unwrap_err(), LocalizationError::Interrupted, "{profile:?}");
        }
        assert!(matches!(diffuse(x.view(), None, &params(Profile::Gaussian), true, &mon), Err(LocalizationError::Interrupted)));
    }

    #[test]
    fn progress_counts_seeds_or_iterations() {
        let x = blobs(300);
        let mon = Monitor::default();
        shift_seeds(x.view(), None, x.view(), &params(Profile::Tophat), &mon).unwrap();
        assert_eq!(mon.progress(), (300, 300));
        let mon = Monitor::default();
        let g = shift_seeds(x.view(), None, x.view(), &params(Profile::Gaussian), &mon).unwrap();
        let iterations = g.n_iter.iter().max().unwrap() + 1;
        assert_eq!(mon.progress(), (iterations, 301));
    }

    #[test]
    fn a_grid_wider_than_u64_cells_is_an_error_not_a_panic() {
        // 2.3e18 / (1/8) cells is beyond u64: the extent once wrapped to 0 and a clamp panicked.
        assert!(GridSpec::new(&[0.0], &[2.305_843_01e18], 1.0, 8).is_err());
        assert!(GridSpec::new(&[0.0, 0.0], &[1e300, 1.0], 1.0, 4).is_err());
        assert!(GridSpec::new(&[0.0], &[1.0], 1.0, 8).is_ok());
    }
}

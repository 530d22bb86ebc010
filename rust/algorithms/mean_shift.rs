//! MeanShift and its relatives (SPEC §4): seeds climb the kernel density by the
//! self-local mean x ← x + α (m(x) − x), m(x) = Σ K(x, xᵢ) wᵢ xᵢ / Σ K(x, xᵢ) wᵢ.
//!
//! Three ways to evaluate m(x), all deterministic and independent of the thread count:
//! * compact kernels: each seed climbs on its own through a kd-tree (`visit_within`), so a
//!   converged seed costs nothing more. The flat kernel uses the *closed* ball ‖x − xᵢ‖ ≤ h
//!   (as scikit-learn's `radius_neighbors` does) so the centres coincide with scikit-learn's,
//!   and sums its window through a kd-tree with per-node aggregates (`neighbors::BallSums`): nodes
//!   wholly inside the ball add their (Σw, Σwx) at once, points are visited only near the rim;
//! * unbounded kernels (gaussian, exponential, cauchy) and high dimensions: one engine call
//!   (`engine::local_sums`, values = X) per iteration over the seeds still moving;
//! * `Grid`: MeanShift++-style cell aggregation: points are binned into cells of side h / r
//!   and each cell is replaced by its weighted centroid carrying the cell's weight; seeds
//!   then climb on that reduced set (linear in n to build, then independent of n).
//!
//! Blurring mean shift (Cheng) and the fixed-kernel linear diffusion K̃ᵗX are whole-data
//! iterations through the engine. Every loop polls the run's `Monitor` (Ctrl-C) and reports
//! its progress there (finished seeds, or iterations); trajectories and histories grow
//! fallibly (`OutOfMemory`, not an abort, when they do not fit).

use crate::distance::{sq_euclidean, GEMM_MIN_DIM};
use crate::engine::{local_sums, Bandwidth, Kernel, Options, Problem};
use crate::error::{LocalizationError, Result};
use crate::kernel::{dispatch_profile, Profile, ProfileFn, Real};
use crate::memory;
use crate::neighbors::{BallSums, KdTree};
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
        if !(self.bandwidth > 0.0 && self.bandwidth.is_finite()) {
            return Err(LocalizationError::param("bandwidth", "must be finite and strictly positive"));
        }
        if !(self.step > 0.0 && self.step.is_finite()) {
            return Err(LocalizationError::param("step", "must be finite and strictly positive"));
        }
        if !(self.tol >= 0.0 && self.tol.is_finite()) {
            return Err(LocalizationError::param("tol", "must be finite and non-negative"));
        }
        Ok(())
    }
    fn threshold(&self) -> f64 {
        self.tol * self.bandwidth
    }
}

/// Where every seed ended.
#[derive(Clone, Debug)]
pub struct Shifted<F> {
    pub modes: Array2<F>,
    /// Σ K w at the last position a mean was taken from (scikit-learn's "intensity").
    pub support: Vec<f64>,
    /// Completed iterations per seed (scikit-learn's count: the first mean is iteration 0).
    pub n_iter: Vec<usize>,
    pub converged: Vec<bool>,
    /// False when the seed saw no weight at all (it is dropped, as in scikit-learn).
    pub valid: Vec<bool>,
    /// Per seed, the visited positions flattened (start included), when asked.
    pub trajectories: Vec<Vec<F>>,
}

struct SeedRun<F> {
    pos: Vec<F>,
    support: f64,
    n_iter: usize,
    converged: bool,
    valid: bool,
    path: Vec<F>,
}

/// Room for one more position (d values) on a trajectory; the error reports the size of all
/// `seeds` trajectories were they as long as this one (seeds × positions × features).
fn grow_trajectory<F>(path: &mut Vec<F>, d: usize, seeds: usize) -> Result<()> {
    memory::try_grow(path, d, "trajectories").map_err(|_| memory::out_of_memory::<F>("trajectories", &[seeds, path.len() / d + 1, d]))
}

/// The per-seed loop shared by the tree and grid paths (one of `seeds`); `mean` returns
/// (Σ K w x, Σ K w).
fn climb<F: Real>(seed: &[F], seeds: usize, p: &Params, mon: &Monitor, mut mean: impl FnMut(&[F], &mut [f64]) -> f64) -> Result<SeedRun<F>> {
    let d = seed.len();
    let thr = p.threshold();
    let mut cur: Vec<F> = seed.to_vec();
    let mut num = vec![0.0f64; d];
    let mut path = Vec::new();
    if p.trajectories {
        grow_trajectory(&mut path, d, seeds)?;
        path.extend_from_slice(&cur);
    }
    let mut it = 0usize;
    let (mut support, mut converged, mut valid) = (0.0, false, true);
    loop {
        mon.check()?;
        num.iter_mut().for_each(|v| *v = 0.0);
        let den = mean(&cur, &mut num);
        if !(den > 0.0) {
            // scikit-learn drops a seed whose window became empty.
            valid = false;
            break;
        }
        support = den;
        let mut delta2 = 0.0;
        for k in 0..d {
            let c = cur[k].f64();
            let m = num[k] / den;
            let next = if p.step == 1.0 { m } else { c + p.step * (m - c) };
            let nf = F::of(next);
            let dk = nf.f64() - c;
            delta2 += dk * dk;
            cur[k] = nf;
        }
        if p.trajectories {
            grow_trajectory(&mut path, d, seeds)?;
            path.extend_from_slice(&cur);
        }
        if delta2.sqrt() <= thr {
            converged = true;
            break;
        }
        if it >= p.max_iter {
            break;
        }
        it += 1;
    }
    Ok(SeedRun { pos: cur, support, n_iter: it, converged, valid, path })
}

fn collect<F: Real>(runs: Vec<SeedRun<F>>, d: usize) -> Result<Shifted<F>> {
    let m = runs.len();
    let mut out = Shifted {
        modes: memory::try_array("modes", (m, d), F::zero())?,
        support: Vec::with_capacity(m),
        n_iter: Vec::with_capacity(m),
        converged: Vec::with_capacity(m),
        valid: Vec::with_capacity(m),
        trajectories: Vec::new(),
    };
    for (i, r) in runs.into_iter().enumerate() {
        for k in 0..d {
            out.modes[(i, k)] = r.pos[k];
        }
        out.support.push(r.support);
        out.n_iter.push(r.n_iter);
        out.converged.push(r.converged);
        out.valid.push(r.valid);
        if !r.path.is_empty() {
            out.trajectories.push(r.path);
        }
    }
    Ok(out)
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
    if let Some(w) = w {
        if w.len() != n {
            return Err(LocalizationError::shape("sample_weight", format!("{n} entries"), w.len()));
        }
        if w.iter().any(|v| !(*v >= F::zero()) || !v.is_finite()) {
            return Err(LocalizationError::param("sample_weight", "must be finite and non-negative"));
        }
    }
    Ok(())
}

/// Which evaluation an exact run uses: the per-seed kd-tree loop, or the engine.
pub fn uses_tree(profile: Profile, d: usize) -> bool {
    profile == Profile::Tophat || (profile.support().is_some() && d < GEMM_MIN_DIM)
}

/// Shift every seed to its mode (exact kernel sums). Progress: finished seeds (tree paths)
/// or iterations (engine path).
pub fn shift_seeds<F: Real>(x: ArrayView2<F>, w: Option<ArrayView1<F>>, seeds: ArrayView2<F>, p: &Params, mon: &Monitor) -> Result<Shifted<F>> {
    p.validate()?;
    check_data(x, w, seeds)?;
    if uses_tree(p.profile, x.ncols()) {
        tree_shift(x, w, seeds, p, mon)
    } else {
        engine_shift(x, w, seeds, p, mon)
    }
}

/// Every seed climbs on its own, in parallel; `mean` as in `climb`.
fn climb_all<F: Real>(seeds: ArrayView2<F>, p: &Params, mon: &Monitor, mean: impl Fn(&[F], &mut [f64]) -> f64 + Sync) -> Result<Shifted<F>> {
    let m = seeds.nrows();
    mon.set_progress(0, m);
    let runs: Vec<SeedRun<F>> = (0..m)
        .into_par_iter()
        .map(|i| {
            let r = climb(&seeds.row(i).to_vec(), m, p, mon, &mean);
            mon.advance(1);
            r
        })
        .collect::<Result<_>>()?;
    collect(runs, seeds.ncols())
}

fn tree_shift<F: Real>(x: ArrayView2<F>, w: Option<ArrayView1<F>>, seeds: ArrayView2<F>, p: &Params, mon: &Monitor) -> Result<Shifted<F>> {
    let (_, d) = x.dim();
    if p.profile == Profile::Tophat {
        return flat_shift(x, w, seeds, p, mon);
    }
    let tree = KdTree::build(x, 32, mon)?;
    let order = tree.order();
    // Tree-ordered copies: the visit streams memory and sums in a fixed order.
    let xt: Vec<F> = order.iter().flat_map(|&i| x.row(i).to_vec()).collect();
    let wt: Vec<F> = order.iter().map(|&i| w.map_or(F::one(), |w| w[i])).collect();
    let h = F::of(p.bandwidth);
    let h2 = h * h;
    let inv_h2 = F::one() / h2;
    dispatch_profile!(p.profile, P, {
        climb_all(seeds, p, mon, |q, num| {
            let mut den = 0.0f64;
            tree.visit_within(q, h2, &mut |pos, d2| {
                let kw = (P::k(d2 * inv_h2) * wt[pos]).f64();
                if kw == 0.0 {
                    return;
                }
                den += kw;
                for (a, &b) in num.iter_mut().zip(&xt[pos * d..(pos + 1) * d]) {
                    *a += kw * b.f64();
                }
            });
            den
        })
    })
}

/// The flat kernel: window sums from the aggregate tree.
fn flat_shift<F: Real>(x: ArrayView2<F>, w: Option<ArrayView1<F>>, seeds: ArrayView2<F>, p: &Params, mon: &Monitor) -> Result<Shifted<F>> {
    let tree = BallSums::build(x, w, 16, mon)?;
    let h = F::of(p.bandwidth);
    let h2 = h * h;
    climb_all(seeds, p, mon, |q, num| tree.ball_sums(q, h2, num))
}

/// Unbounded kernels: all moving seeds advance together, one engine call per iteration.
fn engine_shift<F: Real>(x: ArrayView2<F>, w: Option<ArrayView1<F>>, seeds: ArrayView2<F>, p: &Params, mon: &Monitor) -> Result<Shifted<F>> {
    let (m, d) = seeds.dim();
    let kernel = Kernel::Radial(p.profile);
    let bw = Bandwidth::Scalar(F::of(p.bandwidth));
    let opts = Options { monitor: mon.clone(), ..Options::default() };
    let thr = p.threshold();
    let mut pos = seeds.to_owned();
    let mut trajectories = Vec::new();
    if p.trajectories {
        memory::try_grow(&mut trajectories, m, "trajectories")?;
        for i in 0..m {
            let mut t = Vec::new();
            grow_trajectory(&mut t, d, m)?;
            t.extend(seeds.row(i).iter().copied());
            trajectories.push(t);
        }
    }
    let mut out = Shifted {
        modes: Array2::zeros((0, d)),
        support: vec![0.0; m],
        n_iter: vec![0; m],
        converged: vec![false; m],
        valid: vec![true; m],
        trajectories,
    };
    let mut active: Vec<usize> = (0..m).collect();
    let mut it = 0usize;
    mon.set_progress(0, p.max_iter.saturating_add(1));
    while !active.is_empty() {
        let q = Array2::from_shape_fn((active.len(), d), |(a, k)| pos[(active[a], k)]);
        let pb = Problem { queries: q.view(), x, values: Some(x), weights: w };
        let sums = local_sums(&pb, &kernel, &bw, &opts)?;
        let mut still = Vec::with_capacity(active.len());
        for (a, &i) in active.iter().enumerate() {
            let den = sums.den[a].f64();
            if !(den > 0.0) {
                out.valid[i] = false;
                continue;
            }
            out.support[i] = den * sums.log_scale[a].f64().exp();
            let delta2 = move_towards(pos.row_mut(i), sums.num.row(a), den, p.step);
            if p.trajectories {
                grow_trajectory(&mut out.trajectories[i], d, m)?;
                out.trajectories[i].extend(pos.row(i).iter().copied());
            }
            out.n_iter[i] = it;
            if delta2.sqrt() <= thr {
                out.converged[i] = true;
            } else if it < p.max_iter {
                still.push(i);
            }
        }
        active = still;
        it += 1;
        mon.set_progress(it.min(p.max_iter.saturating_add(1)), p.max_iter.saturating_add(1));
    }
    out.modes = pos;
    Ok(out)
}

/// x ← x + α (m − x) with m = num / den (α = 1 lands exactly on m); returns ‖Δx‖².
fn move_towards<F: Real>(mut x: ndarray::ArrayViewMut1<F>, num: ndarray::ArrayView1<F>, den: f64, step: f64) -> f64 {
    let mut delta2 = 0.0;
    for (xk, nk) in x.iter_mut().zip(num) {
        let c = xk.f64();
        let mk = nk.f64() / den;
        let nf = F::of(if step == 1.0 { mk } else { c + step * (mk - c) });
        let dk = nf.f64() - c;
        delta2 += dk * dk;
        *xk = nf;
    }
    delta2
}

/// Grid (MeanShift++-style) reduction: points binned into cells of side h / r, each cell
/// replaced by its weighted centroid carrying the cell's total weight.
pub struct Grid<F> {
    pub centroids: Array2<F>,
    pub weights: Vec<F>,
    /// Cell (row of `centroids`) of each data point.
    pub point_cell: Vec<u32>,
}

impl<F: Real> Grid<F> {
    pub fn build(x: ArrayView2<F>, w: Option<ArrayView1<F>>, h: f64, cells_per_bandwidth: usize) -> Result<Self> {
        let (n, d) = x.dim();
        if n == 0 {
            return Err(LocalizationError::EmptyInput { name: "X" });
        }
        if d == 0 || d > 6 {
            return Err(LocalizationError::param("algorithm", format!("'grid' is for 1 to 6 features (got {d}); use 'exact'")));
        }
        if cells_per_bandwidth == 0 || cells_per_bandwidth > 64 {
            return Err(LocalizationError::param("grid_resolution", "must be an integer in [1, 64]"));
        }
        if !(h > 0.0 && h.is_finite()) {
            return Err(LocalizationError::param("bandwidth", "must be finite and strictly positive"));
        }
        let side = h / cells_per_bandwidth as f64;
        let mut lo = vec![f64::INFINITY; d];
        let mut hi = vec![f64::NEG_INFINITY; d];
        for row in x.rows() {
            for k in 0..d {
                lo[k] = lo[k].min(row[k].f64());
                hi[k] = hi[k].max(row[k].f64());
            }
        }
        let extent: Vec<u64> = (0..d).map(|k| ((hi[k] - lo[k]) / side).floor() as u64 + 1).collect();
        let total = extent.iter().try_fold(1u64, |a, &e| a.checked_mul(e)).filter(|&t| t < (1u64 << 62)).ok_or_else(|| {
            LocalizationError::param("bandwidth", "too small for the spread of the data on a grid; use algorithm='exact'")
        })?;
        // Cell key of each point (parallel), then slots in order of first appearance.
        let keys: Vec<u64> = (0..n)
            .into_par_iter()
            .map(|i| {
                let mut key = 0u64;
                for k in (0..d).rev() {
                    let c = (((x[(i, k)].f64() - lo[k]) / side).floor() as i64).clamp(0, extent[k] as i64 - 1) as u64;
                    key = key * extent[k] + c;
                }
                key
            })
            .collect();
        let mut point_cell = Vec::with_capacity(n);
        let mut n_cells = 0u32;
        if total <= (4 * n as u64).max(1 << 20) {
            let mut table = vec![u32::MAX; total as usize];
            for &key in &keys {
                let t = &mut table[key as usize];
                if *t == u32::MAX {
                    *t = n_cells;
                    n_cells += 1;
                }
                point_cell.push(*t);
            }
        } else {
            let mut map: HashMap<u64, u32> = HashMap::new();
            for &key in &keys {
                let s = *map.entry(key).or_insert(n_cells);
                if s == n_cells {
                    n_cells += 1;
                }
                point_cell.push(s);
            }
        }
        let m = n_cells as usize;
        let mut wsum = vec![0.0f64; m];
        let mut xsum = vec![0.0f64; m * d];
        for i in 0..n {
            let c = point_cell[i] as usize;
            let wi = w.map_or(1.0, |w| w[i].f64());
            wsum[c] += wi;
            for k in 0..d {
                xsum[c * d + k] += wi * x[(i, k)].f64();
            }
        }
        // A cell of zero total weight keeps its plain centroid (it then weighs nothing).
        let mut plain = vec![0.0f64; m * d];
        let mut cnt = vec![0.0f64; m];
        if wsum.contains(&0.0) {
            for i in 0..n {
                let c = point_cell[i] as usize;
                cnt[c] += 1.0;
                for k in 0..d {
                    plain[c * d + k] += x[(i, k)].f64();
                }
            }
        }
        let centroids = Array2::from_shape_fn((m, d), |(c, k)| {
            if wsum[c] > 0.0 {
                F::of(xsum[c * d + k] / wsum[c])
            } else {
                F::of(plain[c * d + k] / cnt[c])
            }
        });
        Ok(Grid { centroids, weights: wsum.into_iter().map(F::of).collect(), point_cell })
    }
}

/// Shift seeds on the grid's weighted cell centroids (flat kernel, closed ball).
pub fn grid_shift<F: Real>(grid: &Grid<F>, seeds: ArrayView2<F>, p: &Params, mon: &Monitor) -> Result<Shifted<F>> {
    let w = ndarray::ArrayView1::from(&grid.weights[..]);
    let mut flat = p.clone();
    flat.profile = Profile::Tophat;
    shift_seeds(grid.centroids.view(), Some(w), seeds, &flat, mon)
}

/// Whole-data iterations: result positions, per-point Σ K w at the end, iterations, converged.
pub struct Diffused<F> {
    pub positions: Array2<F>,
    pub support: Vec<f64>,
    pub n_iter: usize,
    pub converged: bool,
    /// Positions after each iteration (n × d each), when asked.
    pub history: Vec<Array2<F>>,
}

/// Blurring mean shift (`blurring = true`: Y ← Y + α(m_Y(Y) − Y), the data set itself moves)
/// or the fixed-kernel linear diffusion (`blurring = false`: Y ← Y + α(K̃Y − Y) with K̃ the
/// row-normalised kernel of the original X, so α = 1 gives Y_t = K̃ᵗ X).
pub fn diffuse<F: Real>(x: ArrayView2<F>, w: Option<ArrayView1<F>>, p: &Params, blurring: bool, mon: &Monitor) -> Result<Diffused<F>> {
    p.validate()?;
    check_data(x, w, x)?;
    let n = x.nrows();
    let kernel = Kernel::Radial(p.profile);
    let bw = Bandwidth::Scalar(F::of(p.bandwidth));
    let opts = Options { monitor: mon.clone(), ..Options::default() };
    let thr = p.threshold();
    let mut y = x.to_owned();
    let mut support = vec![0.0; n];
    let mut history = Vec::new();
    let mut converged = false;
    let mut it = 0;
    mon.set_progress(0, p.max_iter);
    while it < p.max_iter {
        let sums = {
            let q = if blurring { y.view() } else { x };
            let pb = Problem { queries: q, x: q, values: Some(y.view()), weights: w };
            local_sums(&pb, &kernel, &bw, &opts)?
        };
        let mut max_delta2 = 0.0f64;
        for i in 0..n {
            let den = sums.den[i].f64();
            // A zero-weight point with no weighted neighbour stays where it is.
            if !(den > 0.0) {
                continue;
            }
            support[i] = den * sums.log_scale[i].f64().exp();
            let delta2 = move_towards(y.row_mut(i), sums.num.row(i), den, p.step);
            max_delta2 = max_delta2.max(delta2);
        }
        it += 1;
        if p.trajectories {
            memory::try_grow(&mut history, 1, "history")?;
            let mut snapshot = memory::try_array("history", y.dim(), F::zero())?;
            snapshot.assign(&y);
            history.push(snapshot);
        }
        mon.set_progress(it, p.max_iter);
        if max_delta2.sqrt() <= thr {
            converged = true;
            break;
        }
    }
    Ok(Diffused { positions: y, support, n_iter: it, converged, history })
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
    let r2 = radius * radius;
    let mut kept: Vec<usize> = Vec::new();
    let mut kept_rows: Vec<Vec<F>> = Vec::new();
    for &i in &reps {
        let row = centres.row(i).to_vec();
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
}

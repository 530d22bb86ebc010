//! The iterated local mean x ← x + α (m(x) − x): the one place where points move towards
//! their local means, stop (‖Δx‖ ≤ tol · h, or after `max_iter` steps), keep their
//! trajectories, poll the run's `Monitor` (Ctrl-C) and report their progress there.
//!
//! How m(x) is summed is the caller's: a closure returns the window sums at the current
//! positions (a kd-tree per point, one engine call per round, or sums merged over shards).
//! Three drivers share one step:
//! * [`climb_each`]: every point climbs on its own, in parallel (a converged point costs
//!   nothing more); progress counts finished points;
//! * [`SeedSet`] / [`climb_together`]: the points still moving advance together, one round
//!   of sums per iteration; progress counts iterations;
//! * [`iterate_whole`]: the whole set moves each round and stops together (blurring mean
//!   shift, fixed-kernel diffusion); progress counts iterations.
//!
//! No driver chooses a thread pool: the work runs on the caller's (the bindings install it).
//! Trajectories and histories grow fallibly (`OutOfMemory`, not an abort).

use crate::error::{LocalizationError, Result};
use crate::memory;
use crate::parallel::Monitor;
use crate::real::Real;
use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

/// How the points move and when they stop.
#[derive(Clone, Copy, Debug)]
pub struct Stop {
    /// Step size α of x ← x + α (m(x) − x).
    pub step: f64,
    /// A point (or the whole set) stops when ‖Δx‖ ≤ threshold (tol · h).
    pub threshold: f64,
    pub max_iter: usize,
    /// Keep every position visited.
    pub trajectories: bool,
}

/// Window sums at m positions: Σ K w x (m × d), Σ K w (m), both stored divided by
/// exp(log_scale) (m; 0 unless the kernel is exponential).
#[derive(Clone, Debug)]
pub struct Sums {
    pub num: Array2<f64>,
    pub den: Vec<f64>,
    pub log_scale: Vec<f64>,
}

/// Where every point ended.
#[derive(Clone, Debug)]
pub struct Shifted<F> {
    pub modes: Array2<F>,
    /// Σ K w at the last position a mean was taken from (scikit-learn's "intensity"), in the
    /// units of the weights the sums saw.
    pub support: Vec<f64>,
    /// Completed iterations per point (scikit-learn's count: the first mean is iteration 0).
    pub n_iter: Vec<usize>,
    pub converged: Vec<bool>,
    /// False when the point saw no weight at all (it is dropped, as in scikit-learn).
    pub valid: Vec<bool>,
    /// Per point, the visited positions flattened (start included), when asked.
    pub trajectories: Vec<Vec<F>>,
}

/// x ← x + α (m − x) with m = num / den (α = 1 lands exactly on m); returns ‖Δx‖².
fn move_towards<'a, F: Real + 'a>(x: impl Iterator<Item = &'a mut F>, num: impl Iterator<Item = f64>, den: f64, step: f64) -> f64 {
    let mut delta2 = 0.0;
    for (xk, nk) in x.zip(num) {
        let c = xk.f64();
        let mk = nk / den;
        let nf = F::of(if step == 1.0 { mk } else { c + step * (mk - c) });
        let dk = nf.f64() - c;
        delta2 += dk * dk;
        *xk = nf;
    }
    delta2
}

/// Room for one more position (d values) on a trajectory; the error reports the size of all
/// `points` trajectories were they as long as this one (points × positions × features).
fn grow_trajectory<F>(path: &mut Vec<F>, d: usize, points: usize) -> Result<()> {
    memory::try_grow(path, d, "trajectories").map_err(|_| memory::out_of_memory::<F>("trajectories", &[points, path.len() / d + 1, d]))
}

/// One point's climb: where it is, Σ K w at its last window, completed iterations, state.
/// Every driver moves a point through [`Run::step`] alone.
struct Run<F> {
    pos: Vec<F>,
    support: f64,
    n_iter: usize,
    converged: bool,
    valid: bool,
    path: Vec<F>,
}

impl<F: Real> Run<F> {
    /// A point about to climb, one of `points` (for the size in an out-of-memory error).
    fn new(start: &[F], points: usize, stop: &Stop) -> Result<Self> {
        let mut path = Vec::new();
        if stop.trajectories {
            grow_trajectory(&mut path, start.len(), points)?;
            path.extend_from_slice(start);
        }
        Ok(Run { pos: start.to_vec(), support: 0.0, n_iter: 0, converged: false, valid: true, path })
    }

    /// One step from the window sums at the current position (stored divided by
    /// exp(log_scale)). Returns whether the point keeps moving. The first mean is iteration 0
    /// (scikit-learn's count).
    fn step(&mut self, num: &[f64], den: f64, log_scale: f64, points: usize, stop: &Stop) -> Result<bool> {
        if !(den > 0.0) {
            // scikit-learn drops a seed whose window became empty.
            self.valid = false;
            return Ok(false);
        }
        self.support = den * log_scale.exp();
        let delta2 = move_towards(self.pos.iter_mut(), num.iter().copied(), den, stop.step);
        if stop.trajectories {
            grow_trajectory(&mut self.path, self.pos.len(), points)?;
            self.path.extend_from_slice(&self.pos);
        }
        if delta2.sqrt() <= stop.threshold {
            self.converged = true;
            return Ok(false);
        }
        if self.n_iter >= stop.max_iter {
            return Ok(false);
        }
        self.n_iter += 1;
        Ok(true)
    }
}

fn collect<F: Real>(runs: Vec<Run<F>>, d: usize) -> Result<Shifted<F>> {
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

/// Every row of `starts` climbs on its own, in parallel on the current pool. `mean(x, num)`
/// returns Σ K w at x and adds Σ K w x into `num` (zeroed before each call). Progress:
/// finished points.
pub fn climb_each<F: Real>(starts: ArrayView2<F>, stop: &Stop, mon: &Monitor, mean: impl Fn(&[F], &mut [f64]) -> f64 + Sync) -> Result<Shifted<F>> {
    let (m, d) = starts.dim();
    mon.set_progress(0, m);
    let runs: Vec<Run<F>> = (0..m)
        .into_par_iter()
        .map(|i| {
            let mut run = Run::new(&starts.row(i).to_vec(), m, stop)?;
            let mut num = vec![0.0f64; d];
            loop {
                mon.check()?;
                num.iter_mut().for_each(|v| *v = 0.0);
                let den = mean(&run.pos, &mut num);
                if !run.step(&num, den, 0.0, m, stop)? {
                    break;
                }
            }
            mon.advance(1);
            Ok(run)
        })
        .collect::<Result<_>>()?;
    collect(runs, d)
}

/// Points climbing together, one step per round of window sums: [`climb_together`] runs it
/// with one sums call per round, and a caller holding sharded data runs it with the merged
/// sums of its shards.
pub struct SeedSet<F> {
    runs: Vec<Run<F>>,
    active: Vec<usize>,
    iteration: usize,
    d: usize,
}

impl<F: Real> SeedSet<F> {
    pub fn new(starts: ArrayView2<F>, stop: &Stop) -> Result<Self> {
        let m = starts.nrows();
        let runs = starts.rows().into_iter().map(|s| Run::new(&s.to_vec(), m, stop)).collect::<Result<Vec<_>>>()?;
        Ok(SeedSet { runs, active: (0..m).collect(), iteration: 0, d: starts.ncols() })
    }

    /// Positions of the points still moving (the queries of the next round).
    pub fn positions(&self) -> Array2<F> {
        Array2::from_shape_fn((self.active.len(), self.d), |(a, k)| self.runs[self.active[a]].pos[k])
    }

    pub fn n_active(&self) -> usize {
        self.active.len()
    }

    /// Rounds done so far.
    pub fn iteration(&self) -> usize {
        self.iteration
    }

    /// Move every active point by its window sums (row a belongs to the a-th active point).
    pub fn advance(&mut self, sums: &Sums, stop: &Stop) -> Result<()> {
        let k = self.active.len();
        if sums.num.dim() != (k, self.d) || sums.den.len() != k || sums.log_scale.len() != k {
            return Err(LocalizationError::shape("sums", format!("{k} rows of {} values", self.d), format!("{} rows", sums.den.len())));
        }
        let m = self.runs.len();
        let mut still = Vec::with_capacity(k);
        for (a, &i) in self.active.iter().enumerate() {
            let row = sums.num.row(a);
            let num = row.as_slice().map_or_else(|| row.to_vec(), |s| s.to_vec());
            if self.runs[i].step(&num, sums.den[a], sums.log_scale[a], m, stop)? {
                still.push(i);
            }
        }
        self.active = still;
        self.iteration += 1;
        Ok(())
    }

    pub fn finish(self) -> Result<Shifted<F>> {
        let d = self.d;
        collect(self.runs, d)
    }
}

/// The rows of `starts` advance together while any moves, one `sums(positions)` call per
/// round over the points still moving. Progress: iterations (of at most max_iter + 1).
pub fn climb_together<F: Real>(starts: ArrayView2<F>, stop: &Stop, mon: &Monitor, mut sums: impl FnMut(ArrayView2<F>) -> Result<Sums>) -> Result<Shifted<F>> {
    let mut set = SeedSet::new(starts, stop)?;
    let total = stop.max_iter.saturating_add(1);
    mon.set_progress(0, total);
    while set.n_active() > 0 {
        let q = set.positions();
        let s = sums(q.view())?;
        set.advance(&s, stop)?;
        mon.set_progress(set.iteration().min(total), total);
    }
    set.finish()
}

/// A whole set iterated together: final positions, per-point Σ K w at the end (in the units
/// of the weights the sums saw), iterations, converged.
pub struct Diffused<F> {
    pub positions: Array2<F>,
    pub support: Vec<f64>,
    pub n_iter: usize,
    pub converged: bool,
    /// Positions after each iteration (n × d each), when asked.
    pub history: Vec<Array2<F>>,
}

/// Y ← Y + α (M(Y) − Y) for the whole set, `sums(Y)` giving the window sums of every row,
/// until no row moves by more than the threshold or after max_iter steps. A row whose
/// window holds no weight stays where it is. Progress: iterations.
pub fn iterate_whole<F: Real>(start: Array2<F>, stop: &Stop, mon: &Monitor, mut sums: impl FnMut(ArrayView2<F>) -> Result<Sums>) -> Result<Diffused<F>> {
    let n = start.nrows();
    let mut y = start;
    let mut support = vec![0.0; n];
    let mut history = Vec::new();
    let mut converged = false;
    let mut it = 0;
    mon.set_progress(0, stop.max_iter);
    while it < stop.max_iter {
        let s = sums(y.view())?;
        let mut max_delta2 = 0.0f64;
        for i in 0..n {
            let den = s.den[i];
            // A zero-weight point with no weighted neighbour stays where it is.
            if !(den > 0.0) {
                continue;
            }
            support[i] = den * s.log_scale[i].exp();
            let delta2 = move_towards(y.row_mut(i).into_iter(), s.num.row(i).iter().copied(), den, stop.step);
            max_delta2 = max_delta2.max(delta2);
        }
        it += 1;
        if stop.trajectories {
            memory::try_grow(&mut history, 1, "history")?;
            let mut snapshot = memory::try_array("history", y.dim(), F::zero())?;
            snapshot.assign(&y);
            history.push(snapshot);
        }
        mon.set_progress(it, stop.max_iter);
        if max_delta2.sqrt() <= stop.threshold {
            converged = true;
            break;
        }
    }
    Ok(Diffused { positions: y, support, n_iter: it, converged, history })
}

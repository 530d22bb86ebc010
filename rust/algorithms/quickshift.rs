//! QuickShift (SPEC §4; Vedaldi & Soatto 2008): link every point to its nearest sample of
//! higher density within `max_dist`. The densities come from the engine (kernel sums); this
//! file only searches the neighbourhood through the kd-tree, so nothing N×N is stored.
//!
//! Optionally both the density and the search are restricted to a box [`Window`] on some
//! features: scikit-image's `quickshift` sums its Gaussian and looks for parents only within
//! ±⌈3σ⌉ pixels in row and column, which is this window on the two position features.
//!
//! Coordinates far from 1 are searched in an exactly rescaled space (`distance::Scale`), with
//! the bandwidth, `max_dist` and the window's half-width alike.

use crate::distance::{sq_euclidean, Scale};
use crate::checked::Positive;
use crate::error::{LocalizationError, Result};
use crate::kernel::{dispatch_profile, Profile, ProfileFn};
use crate::real::Real;
use crate::neighbors::{KdTree, LEAF_SIZE};
use crate::parallel::Monitor;
use crate::rows::Rows;
use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

/// A box window: sample j is in the window of sample i when |x_jk − x_ik| ≤ `half_width`
/// for every k in `features`.
pub struct Window {
    pub features: Vec<usize>,
    pub half_width: f64,
}

impl Window {
    fn check(&self, d: usize) -> Result<()> {
        if self.features.is_empty() || self.features.iter().any(|&k| k >= d) {
            return Err(LocalizationError::param("window_features", format!("must be a non-empty list of feature indices below {d}")));
        }
        if !(self.half_width >= 0.0) {
            return Err(LocalizationError::param("window", "must be a non-negative number"));
        }
        Ok(())
    }

    /// The window in the working units of `lengths` (its half-width is a length).
    fn scaled(&self, lengths: Scale) -> Window {
        Window { features: self.features.clone(), half_width: lengths.down(self.half_width) }
    }
}

/// The samples laid out for window queries: a kd-tree over the window's features (queried
/// with boxes) and the full rows copied in the tree's order, so that the samples of a leaf
/// are contiguous in memory. Queries also run in tree order (neighbouring queries share
/// their windows); results go back to the caller's order.
struct WindowIndex<'a, F> {
    window: &'a Window,
    mon: &'a Monitor,
    tree: KdTree<F>,
    /// Rows of x in tree order, row-major: `d` values per sample.
    rows: Vec<F>,
    d: usize,
}

/// Leaf size of the window index over the window's features: its queries are boxes of a few
/// rows and columns, not k-NN searches, and take smaller leaves than `LEAF_SIZE`.
const WINDOW_LEAF_SIZE: usize = 16;

impl<'a, F: Real> WindowIndex<'a, F> {
    fn build(x: ArrayView2<F>, window: &'a Window, mon: &'a Monitor) -> Result<Self> {
        window.check(x.ncols())?;
        let p = Array2::from_shape_fn((x.nrows(), window.features.len()), |(i, k)| x[(i, window.features[k])]);
        let tree = KdTree::build(p.view(), WINDOW_LEAF_SIZE, mon)?;
        let order = tree.order();
        let d = x.ncols();
        let rows = order.iter().flat_map(|&i| x.row(i).into_iter().copied()).collect();
        Ok(WindowIndex { window, mon, tree, rows, d })
    }

    fn row(&self, pos: usize) -> &[F] {
        &self.rows[pos * self.d..(pos + 1) * self.d]
    }

    /// Call `f(tree position)` for every sample in the window of the sample at `pos`.
    fn visit(&self, pos: usize, lo: &mut Vec<F>, hi: &mut Vec<F>, f: &mut impl FnMut(usize)) {
        let w = F::of(self.window.half_width);
        let q = self.row(pos);
        lo.clear();
        hi.clear();
        lo.extend(self.window.features.iter().map(|&k| q[k] - w));
        hi.extend(self.window.features.iter().map(|&k| q[k] + w));
        self.tree.visit_box(lo, hi, f);
    }

    /// `per(pos)` for every sample, in tree order and in parallel, returned in the caller's order.
    /// Reports the samples done to the monitor.
    fn map<T: Send + Clone + Default>(&self, per: impl Fn(usize, &mut Vec<F>, &mut Vec<F>) -> T + Sync) -> Result<Vec<T>> {
        let n = self.tree.order().len();
        self.mon.set_progress(0, n);
        let by_pos: Vec<T> = (0..n)
            .into_par_iter()
            .map_init(
                || (Vec::new(), Vec::new()),
                |(lo, hi), pos| {
                    self.mon.check()?;
                    self.mon.advance(1);
                    Ok(per(pos, lo, hi))
                },
            )
            .collect::<Result<_>>()?;
        let mut out = vec![T::default(); by_pos.len()];
        for (pos, v) in by_pos.into_iter().enumerate() {
            out[self.tree.order()[pos]] = v;
        }
        Ok(out)
    }
}

/// The windowed density ρ_i = Σ_{j in the window of i} w_j k(‖x_i − x_j‖² / h²) of every
/// sample (f64 sums, in a fixed order: identical for any thread count).
pub fn windowed_density<F: Real>(
    x: ArrayView2<F>, window: &Window, profile: Profile, bandwidth: f64, weights: Option<&[f64]>, mon: &Monitor,
) -> Result<Vec<f64>> {
    let n = x.nrows();
    Positive::new("bandwidth", bandwidth)?;
    if weights.is_some_and(|w| w.len() != n) {
        return Err(LocalizationError::shape("sample_weight", format!("{n} values"), weights.map_or(0, |w| w.len())));
    }
    // Distances over the bandwidth are scale free: far-from-1 coordinates are rescaled exactly.
    let lengths = Scale::of_arrays(&[x]);
    let x = lengths.down_array(x)?;
    let window = window.scaled(lengths);
    let index = WindowIndex::build(x.view(), &window, mon)?;
    let w: Option<Vec<f64>> = weights.map(|w| index.tree.order().iter().map(|&j| w[j]).collect());
    let h = lengths.down(bandwidth);
    let inv_h2 = 1.0 / (h * h);
    dispatch_profile!(profile, P, window_sums::<F, P>(&index, inv_h2, w.as_deref()))
}

fn window_sums<F: Real, P: ProfileFn>(index: &WindowIndex<F>, inv_h2: f64, weights: Option<&[f64]>) -> Result<Vec<f64>> {
    index.map(|pos, lo, hi| {
        let q = index.row(pos);
        let mut sum = 0.0;
        match weights {
            None => index.visit(pos, lo, hi, &mut |j| sum += P::k(sq_euclidean(q, index.row(j)).f64() * inv_h2)),
            Some(w) => index.visit(pos, lo, hi, &mut |j| sum += w[j] * P::k(sq_euclidean(q, index.row(j)).f64() * inv_h2)),
        }
        sum
    })
}

/// Is sample j "above" sample i? Higher density, and on exact ties the smaller index:
/// a strict total order, so links can never form a cycle and duplicates still merge.
#[inline]
fn above(log_density: &[f64], j: usize, i: usize) -> bool {
    let (a, b) = (log_density[j], log_density[i]);
    a > b || (a == b && j < i)
}

/// For every row of `x`: (parent, distance to it). A point with no sample above it within
/// `max_dist` (and within its `window`, if any) is its own parent with distance +∞.
/// Distance ties go to the smaller index.
pub fn link<F: Real>(
    x: ArrayView2<F>, log_density: &[f64], max_dist: f64, window: Option<&Window>, mon: &Monitor,
) -> Result<(Vec<usize>, Vec<F>)> {
    let n = x.nrows();
    if log_density.len() != n {
        return Err(LocalizationError::shape("densities", format!("{n} values"), log_density.len()));
    }
    if log_density.iter().any(|v| v.is_nan()) {
        return Err(LocalizationError::NonFinite { name: "densities" });
    }
    if !(max_dist >= 0.0) {
        return Err(LocalizationError::param("max_dist", "must be non-negative"));
    }
    let lengths = Scale::of_arrays(&[x]);
    let x = lengths.down_array(x)?;
    let x = x.as_standard_layout();
    let rows = Rows::new("X", x.view())?;
    let window = window.map(|w| w.scaled(lengths));
    let r = F::of(lengths.down(max_dist));
    let r2 = if r.is_finite() { r * r } else { F::infinity() };
    let consider = |i: usize, j: usize, d2: F, best: &mut (usize, F)| {
        if above(log_density, j, i) && (d2 < best.1 || (d2 == best.1 && j < best.0)) {
            *best = (j, d2);
        }
    };
    let links: Vec<(usize, F)> = match &window {
        None => {
            // A branch-and-bound nearest-neighbour search that only enters nodes holding a
            // density at least the query's (`KdTree::nearest_admitted`): most samples find a
            // sample above them among their first neighbours and stop there, and a mode skips
            // every node below it instead of scanning its whole `max_dist` ball.
            let tree = KdTree::build(x.view(), LEAF_SIZE, mon)?;
            let order = tree.order();
            let in_tree: Vec<f64> = order.iter().map(|&j| log_density[j]).collect();
            let maxes = tree.node_max(&in_tree);
            mon.set_progress(0, n);
            // Queries in tree order: consecutive ones walk the same nodes.
            let by_pos: Vec<(usize, F)> = (0..n)
                .into_par_iter()
                .map(|pos| {
                    mon.check()?;
                    mon.advance(1);
                    let i = order[pos];
                    let admit = |p: usize| above(log_density, order[p], i);
                    let best = tree.nearest_admitted(rows.row(i), r2, &maxes, log_density[i], &admit);
                    let (parent, d2) = best.map_or((i, F::infinity()), |(p, d2)| (order[p], d2));
                    Ok((parent, lengths.up(d2.sqrt())))
                })
                .collect::<Result<_>>()?;
            let mut out = vec![(0, F::zero()); n];
            for (pos, v) in by_pos.into_iter().enumerate() {
                out[order[pos]] = v;
            }
            out
        }
        Some(w) => {
            let index = WindowIndex::build(x.view(), w, mon)?;
            let order = index.tree.order();
            index.map(|pos, lo, hi| {
                let (i, q) = (order[pos], index.row(pos));
                let mut best = (i, F::infinity());
                index.visit(pos, lo, hi, &mut |p| {
                    let d2 = sq_euclidean(q, index.row(p));
                    if d2 <= r2 {
                        consider(i, order[p], d2, &mut best);
                    }
                });
                (best.0, lengths.up(best.1.sqrt()))
            })?
        }
    };
    Ok(links.into_iter().unzip())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    #[test]
    fn matches_brute_force() {
        let mut rng = StdRng::seed_from_u64(7);
        let n = 400;
        let x = Array2::from_shape_fn((n, 2), |_| rng.random::<f64>());
        // Points on a coarse grid: duplicates and many equal distances.
        let grid = x.mapv(|v| (v * 8.0).round());
        let dens: Vec<f64> = (0..n).map(|_| (rng.random::<f64>() * 4.0).floor()).collect(); // many ties
        let mut smooth: Vec<f64> = (0..n).map(|i| -(x[(i, 0)] - 0.5).powi(2) - (x[(i, 1)] - 0.3).powi(2)).collect();
        smooth[3] = f64::NEG_INFINITY; // log of a zero density
        for (x, dens, md) in [(&x, &dens, 0.05), (&x, &dens, 0.2), (&x, &dens, f64::INFINITY), (&grid, &dens, 1.5), (&x, &smooth, 0.1), (&x, &smooth, f64::INFINITY)] {
            let mon = Monitor::default();
            let (par, dist) = link(x.view(), &dens, md, None, &mon).unwrap();
            assert_eq!(mon.progress(), (n, n), "every sample reported");
            for i in 0..n {
                let mut best = (i, f64::INFINITY);
                for j in 0..n {
                    let d2 = crate::distance::sq_euclidean(x.row(i).as_slice().unwrap(), x.row(j).as_slice().unwrap());
                    if d2 <= md * md && above(&dens, j, i) && (d2 < best.1 || (d2 == best.1 && j < best.0)) {
                        best = (j, d2);
                    }
                }
                assert_eq!(par[i], best.0);
                assert_eq!(dist[i], best.1.sqrt());
            }
        }
    }

    /// The windowed density and links against a direct double loop, on 3-D points whose last
    /// two features are a pixel grid (the image case) and with a window on one feature.
    #[test]
    fn window_matches_brute_force() {
        let mut rng = StdRng::seed_from_u64(11);
        let (hgt, wid) = (13usize, 17usize);
        let n = hgt * wid;
        let x = Array2::from_shape_fn((n, 3), |(i, k)| match k {
            0 => rng.random::<f64>() * 4.0,
            1 => (i / wid) as f64,
            _ => (i % wid) as f64,
        });
        let w: Vec<f64> = (0..n).map(|i| 0.5 + (i % 3) as f64).collect();
        for (features, half, md) in [(vec![1, 2], 3.0, 4.0), (vec![1, 2], 2.0, f64::INFINITY), (vec![0], 0.7, 2.5)] {
            let win = Window { features: features.clone(), half_width: half };
            for profile in [Profile::Gaussian, Profile::Epanechnikov] {
                let h = 1.7;
                let dens = windowed_density(x.view(), &win, profile, h, Some(&w), &Monitor::default()).unwrap();
                let inside = |i: usize, j: usize| features.iter().all(|&k| (x[(i, k)] - x[(j, k)]).abs() <= half);
                for i in 0..n {
                    let want: f64 = (0..n)
                        .filter(|&j| inside(i, j))
                        .map(|j| {
                            let d2 = crate::distance::sq_euclidean(x.row(i).as_slice().unwrap(), x.row(j).as_slice().unwrap());
                            w[j] * profile.eval((d2 / (h * h)).sqrt())
                        })
                        .sum();
                    assert!((dens[i] - want).abs() <= 1e-12 * want.max(1.0), "{i}: {} vs {want}", dens[i]);
                }
                let logd: Vec<f64> = dens.iter().map(|v| v.ln()).collect();
                let (par, dist) = link(x.view(), &logd, md, Some(&win), &Monitor::default()).unwrap();
                for i in 0..n {
                    let mut best = (i, f64::INFINITY);
                    for j in 0..n {
                        let d2 = crate::distance::sq_euclidean(x.row(i).as_slice().unwrap(), x.row(j).as_slice().unwrap());
                        if inside(i, j) && d2 <= md * md && above(&logd, j, i) && (d2 < best.1 || (d2 == best.1 && j < best.0)) {
                            best = (j, d2);
                        }
                    }
                    assert_eq!((par[i], dist[i]), (best.0, best.1.sqrt()));
                }
            }
        }
        let bad = Window { features: vec![3], half_width: 1.0 };
        assert!(windowed_density(x.view(), &bad, Profile::Gaussian, 1.0, None, &Monitor::default()).is_err());
        let bad = Window { features: vec![0], half_width: f64::NAN };
        assert!(link(x.view(), &vec![0.0; n], 1.0, Some(&bad), &Monitor::default()).is_err());
    }
}

//! QuickShift (SPEC §4; Vedaldi & Soatto 2008): link every point to its nearest sample of
//! higher density within `max_dist`. The densities come from the engine (kernel sums); this
//! file only searches the neighbourhood through the kd-tree, so nothing N×N is stored.
//! Coordinates far from 1 are searched in an exactly rescaled space (`distance::Scale`).

use crate::distance::Scale;
use crate::error::{LocalizationError, Result};
use crate::kernel::Real;
use crate::neighbors::KdTree;
use ndarray::ArrayView2;
use rayon::prelude::*;

/// Is sample j "above" sample i? Higher density, and on exact ties the smaller index:
/// a strict total order, so links can never form a cycle and duplicates still merge.
#[inline]
fn above(log_density: &[f64], j: usize, i: usize) -> bool {
    let (a, b) = (log_density[j], log_density[i]);
    a > b || (a == b && j < i)
}

/// For every row of `x`: (parent, distance to it). A point with no sample above it within
/// `max_dist` is its own parent with distance +∞. Distance ties go to the smaller index.
pub fn link<F: Real>(x: ArrayView2<F>, log_density: &[f64], max_dist: f64) -> Result<(Vec<usize>, Vec<F>)> {
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
    let x = lengths.down_array(x);
    let x = x.as_standard_layout();
    let tree = KdTree::build(x.view(), 32)?;
    let order = tree.order();
    let r = F::of(lengths.down(max_dist));
    let r2 = if r.is_finite() { r * r } else { F::infinity() };
    let links: Vec<(usize, F)> = (0..n)
        .into_par_iter()
        .map(|i| {
            let q = x.row(i);
            let q = q.as_slice().expect("standard layout");
            let mut best = (i, F::infinity());
            tree.visit_within(q, r2, &mut |pos, d2| {
                let j = order[pos];
                if above(log_density, j, i) && (d2 < best.1 || (d2 == best.1 && j < best.0)) {
                    best = (j, d2);
                }
            });
            (best.0, lengths.up(best.1.sqrt()))
        })
        .collect();
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
        let dens: Vec<f64> = (0..n).map(|_| (rng.random::<f64>() * 4.0).floor()).collect(); // many ties
        for &md in &[0.05, 0.2, f64::INFINITY] {
            let (par, dist) = link(x.view(), &dens, md).unwrap();
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
}

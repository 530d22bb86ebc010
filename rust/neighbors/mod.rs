//! Exact neighbour search: a kd-tree for low dimensions, tiled brute force for high ones,
//! and an `auto` rule between them. Results are sorted by (distance, index), which makes
//! them deterministic and independent of the thread count.

pub mod kdtree;

use crate::distance::{row_sq_norms, sq_dist_tile_gemm, sq_euclidean, GEMM_MIN_DIM};
use crate::error::{LocalizationError, Result};
use crate::kernel::Real;
use ndarray::{s, Array2, ArrayView2};
use rayon::prelude::*;
pub use kdtree::{chunked_order, radius_leaves, BallSums, KdTree};

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Algorithm {
    Auto,
    KdTree,
    Brute,
}

impl Algorithm {
    pub fn from_name(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Algorithm::Auto),
            "kd_tree" | "kdtree" => Ok(Algorithm::KdTree),
            "brute" => Ok(Algorithm::Brute),
            o => Err(LocalizationError::param("algorithm", format!("unknown algorithm {o:?}; use 'auto', 'kd_tree' or 'brute'"))),
        }
    }
}

/// Neighbour lists: `indices[i]`, `distances[i]` (Euclidean, not squared) for query i.
#[derive(Clone, Debug, Default)]
pub struct Neighbors<F> {
    pub indices: Vec<Vec<usize>>,
    pub distances: Vec<Vec<F>>,
}

/// A fitted search structure over the reference rows.
pub enum Index<F: Real> {
    Tree(KdTree<F>),
    Brute { x: Array2<F>, norms: Vec<F> },
}

impl<F: Real> Index<F> {
    pub fn build(x: ArrayView2<F>, algorithm: Algorithm, leaf_size: usize) -> Result<Self> {
        if x.nrows() == 0 {
            return Err(LocalizationError::EmptyInput { name: "X" });
        }
        let use_tree = match algorithm {
            Algorithm::KdTree => true,
            Algorithm::Brute => false,
            Algorithm::Auto => x.ncols() < GEMM_MIN_DIM && x.nrows() > 64,
        };
        Ok(if use_tree {
            Index::Tree(KdTree::build(x, leaf_size)?)
        } else {
            Index::Brute { x: x.as_standard_layout().into_owned(), norms: row_sq_norms(x) }
        })
    }

    pub fn n_samples(&self) -> usize {
        match self {
            Index::Tree(t) => t.n_samples(),
            Index::Brute { x, .. } => x.nrows(),
        }
    }

    pub fn dim(&self) -> usize {
        match self {
            Index::Tree(t) => t.dim(),
            Index::Brute { x, .. } => x.ncols(),
        }
    }

    fn check_query(&self, q: &ArrayView2<F>) -> Result<()> {
        if q.ncols() != self.dim() {
            return Err(LocalizationError::shape("X", format!("{} features", self.dim()), format!("{} features", q.ncols())));
        }
        if !q.is_standard_layout() {
            return Err(LocalizationError::param("X", "must be C-contiguous (row-major)"));
        }
        Ok(())
    }

    /// The k nearest references of every query row, ascending.
    pub fn knn(&self, q: ArrayView2<F>, k: usize) -> Result<Neighbors<F>> {
        self.check_query(&q)?;
        if k == 0 || k > self.n_samples() {
            return Err(LocalizationError::param(
                "n_neighbors",
                format!("must be in [1, n_samples_fit = {}], got {k}", self.n_samples()),
            ));
        }
        let rows: Vec<(Vec<usize>, Vec<F>)> = match self {
            Index::Tree(t) => (0..q.nrows()).into_par_iter().map(|i| t.knn(q.row(i).as_slice().expect("row-major (checked on entry)"), k)).collect(),
            Index::Brute { x, norms } => brute_knn(q, x.view(), norms, k),
        };
        Ok(unzip(rows))
    }

    /// All references within distance r (inclusive) of each query row, ascending. `radii`
    /// holds one r for every query or a single r for all; r = +∞ returns every reference.
    pub fn radius(&self, q: ArrayView2<F>, radii: &[F]) -> Result<Neighbors<F>> {
        self.check_query(&q)?;
        if radii.len() != 1 && radii.len() != q.nrows() {
            return Err(LocalizationError::shape("radius", format!("1 or {} values (one per query)", q.nrows()), radii.len()));
        }
        if radii.iter().any(|r| !(*r >= F::zero())) {
            return Err(LocalizationError::param("radius", "must be non-negative (+inf allowed), not NaN"));
        }
        let r2_of = |i: usize| {
            let r = radii[if radii.len() == 1 { 0 } else { i }];
            r * r
        };
        let rows: Vec<(Vec<usize>, Vec<F>)> = match self {
            Index::Tree(t) => (0..q.nrows())
                .into_par_iter()
                .map(|i| {
                    let mut hits = Vec::new();
                    t.within(q.row(i).as_slice().expect("row-major (checked on entry)"), r2_of(i), &mut hits);
                    sorted(hits)
                })
                .collect(),
            Index::Brute { x, .. } => (0..q.nrows())
                .into_par_iter()
                .map(|i| {
                    let r2 = r2_of(i);
                    let qi = q.row(i);
                    let qs = qi.as_slice().expect("row-major (checked on entry)");
                    let hits = x
                        .rows()
                        .into_iter()
                        .enumerate()
                        .filter_map(|(j, xr)| {
                            let d2 = sq_euclidean(qs, xr.as_slice().expect("row-major (checked on entry)"));
                            (d2 <= r2).then_some((d2, j))
                        })
                        .collect();
                    sorted(hits)
                })
                .collect(),
        };
        Ok(unzip(rows))
    }
}

fn unzip<F: Real>(rows: Vec<(Vec<usize>, Vec<F>)>) -> Neighbors<F> {
    let (indices, distances) = rows.into_iter().unzip();
    Neighbors { indices, distances }
}

/// Sort (squared distance, index) pairs and return (indices, distances).
pub(crate) fn sorted<F: Real>(mut hits: Vec<(F, usize)>) -> (Vec<usize>, Vec<F>) {
    hits.sort_unstable_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal).then(a.1.cmp(&b.1)));
    hits.into_iter().map(|(d2, j)| (j, d2.sqrt())).unzip()
}

const QUERY_BLOCK: usize = 64;
const REF_TILE: usize = 512;

/// Tiled brute-force kNN: squared distances of a query block against a reference tile come
/// from one matrix product; each query keeps a bounded candidate list. Final distances are
/// recomputed directly so they carry no cancellation error.
fn brute_knn<F: Real>(q: ArrayView2<F>, x: ArrayView2<F>, xn: &[F], k: usize) -> Vec<(Vec<usize>, Vec<F>)> {
    let n = x.nrows();
    let use_gemm = x.ncols() >= GEMM_MIN_DIM;
    let blocks: Vec<usize> = (0..q.nrows()).step_by(QUERY_BLOCK).collect();
    blocks
        .into_par_iter()
        .flat_map_iter(|b0| {
            let b1 = (b0 + QUERY_BLOCK).min(q.nrows());
            let qb = q.slice(s![b0..b1, ..]);
            let qn = row_sq_norms(qb);
            let mut best: Vec<Vec<(F, usize)>> = vec![Vec::with_capacity(2 * k + REF_TILE); b1 - b0];
            let mut tile = Array2::<F>::zeros((b1 - b0, REF_TILE));
            for t0 in (0..n).step_by(REF_TILE) {
                let t1 = (t0 + REF_TILE).min(n);
                let mut tv = tile.slice_mut(s![.., 0..t1 - t0]);
                if use_gemm {
                    sq_dist_tile_gemm(qb, &qn, x.slice(s![t0..t1, ..]), &xn[t0..t1], tv.view_mut());
                } else {
                    for (i, mut row) in tv.rows_mut().into_iter().enumerate() {
                        let qs = qb.row(i);
                        let qs = qs.as_slice().expect("row-major (checked on entry)");
                        for (j, v) in row.iter_mut().enumerate() {
                            *v = sq_euclidean(qs, x.row(t0 + j).as_slice().expect("row-major (checked on entry)"));
                        }
                    }
                }
                for (i, cand) in best.iter_mut().enumerate() {
                    let worst = if cand.len() >= k { cand[k - 1].0 } else { F::infinity() };
                    for (j, &d2) in tv.row(i).iter().enumerate() {
                        if d2 <= worst {
                            cand.push((d2, t0 + j));
                        }
                    }
                    if cand.len() > k + REF_TILE / 2 || t1 == n {
                        prune(cand, k, qb.row(i).as_slice().expect("row-major (checked on entry)"), x, use_gemm && t1 == n);
                    }
                }
            }
            best.into_iter().map(|c| sorted(c)).collect::<Vec<_>>()
        })
        .collect()
}

/// Keep the k best candidates (ties broken by index); optionally recompute exact distances.
fn prune<F: Real>(cand: &mut Vec<(F, usize)>, k: usize, q: &[F], x: ArrayView2<F>, exact: bool) {
    let key = |a: &(F, usize), b: &(F, usize)| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal).then(a.1.cmp(&b.1));
    if exact {
        // The product form can misorder near-ties by rounding; widen, recompute, re-select.
        for c in cand.iter_mut() {
            c.0 = sq_euclidean(q, x.row(c.1).as_slice().expect("row-major (checked on entry)"));
        }
    }
    if cand.len() > k {
        cand.select_nth_unstable_by(k - 1, key);
        cand.truncate(k);
    }
    cand.sort_unstable_by(key);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn naive(q: &Array2<f64>, x: &Array2<f64>, k: usize) -> Vec<Vec<usize>> {
        q.rows()
            .into_iter()
            .map(|qr| {
                let mut d: Vec<(f64, usize)> =
                    x.rows().into_iter().enumerate().map(|(j, xr)| (sq_euclidean(qr.as_slice().unwrap(), xr.as_slice().unwrap()), j)).collect();
                d.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
                d.into_iter().take(k).map(|t| t.1).collect()
            })
            .collect()
    }

    fn data(rng: &mut StdRng, n: usize, d: usize, dup: bool) -> Array2<f64> {
        let mut x = Array2::from_shape_fn((n, d), |_| rng.random::<f64>());
        if dup {
            for i in (0..n).step_by(7) {
                let src = x.row((i * 13) % n).to_owned();
                x.row_mut(i).assign(&src);
            }
        }
        x
    }

    #[test]
    fn every_index_matches_brute_force() {
        let mut rng = StdRng::seed_from_u64(3);
        for &d in &[1usize, 2, 3, 7, 20, 40] {
            for &dup in &[false, true] {
                let x = data(&mut rng, 700, d, dup);
                let q = data(&mut rng, 90, d, false);
                let want = naive(&q, &x, 9);
                for alg in [Algorithm::KdTree, Algorithm::Brute, Algorithm::Auto] {
                    let idx = Index::build(x.view(), alg, 16).unwrap();
                    let got = idx.knn(q.view(), 9).unwrap();
                    assert_eq!(got.indices, want, "d={d} dup={dup} {alg:?}");
                    // f32 too: same neighbours up to ties in rounding, so compare distances
                    let x32 = x.mapv(|v| v as f32);
                    let q32 = q.mapv(|v| v as f32);
                    let got32 = Index::build(x32.view(), alg, 16).unwrap().knn(q32.view(), 9).unwrap();
                    for (a, b) in got32.distances.iter().zip(&got.distances) {
                        for (u, v) in a.iter().zip(b) {
                            assert!((*u as f64 - v).abs() < 1e-5);
                        }
                    }
                    let rad = idx.radius(q.view(), &[0.3]).unwrap();
                    // Per-query radii, 0 and +∞ among them.
                    let radii: Vec<f64> = (0..q.nrows()).map(|i| [0.0, 0.1, 0.45, f64::INFINITY][i % 4]).collect();
                    let each = idx.radius(q.view(), &radii).unwrap();
                    for (i, qr) in q.rows().into_iter().enumerate() {
                        let within = |r: f64| -> Vec<usize> {
                            (0..x.nrows()).filter(|&j| sq_euclidean(qr.as_slice().unwrap(), x.row(j).as_slice().unwrap()) <= r * r).collect()
                        };
                        let mut g = rad.indices[i].clone();
                        g.sort();
                        assert_eq!(g, within(0.3));
                        let mut g = each.indices[i].clone();
                        g.sort();
                        assert_eq!(g, within(radii[i]));
                        assert!(each.distances[i].windows(2).all(|w| w[0] <= w[1]));
                    }
                }
            }
        }
    }

    #[test]
    fn bad_k_is_an_error() {
        let x = Array2::<f64>::zeros((5, 2));
        let idx = Index::build(x.view(), Algorithm::Auto, 16).unwrap();
        assert!(idx.knn(x.view(), 0).is_err());
        assert!(idx.knn(x.view(), 6).is_err());
        assert!(idx.knn(Array2::<f64>::zeros((2, 3)).view(), 1).is_err());
        assert!(Index::build(Array2::<f64>::zeros((0, 2)).view(), Algorithm::Auto, 16).is_err());
        assert!(idx.radius(x.view(), &[f64::NAN]).is_err());
        assert!(idx.radius(x.view(), &[-1.0]).is_err());
        assert!(idx.radius(x.view(), &[1.0, 2.0]).is_err());
        assert_eq!(idx.radius(x.view(), &[f64::INFINITY]).unwrap().indices[0].len(), 5);
    }

    #[test]
    fn radius_leaves_bound_radius_and_size() {
        let mut rng = StdRng::seed_from_u64(4);
        for (d, radius, max_size) in [(1, 0.05, 1000), (2, 0.2, 1000), (2, 10.0, 37), (3, 0.0, 5)] {
            let x = data(&mut rng, 900, d, true);
            let (order, starts) = radius_leaves(x.view(), radius, max_size);
            let mut seen = order.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..900).collect::<Vec<_>>());
            for w in starts.windows(2) {
                let rows = &order[w[0]..w[1]];
                let half_diag2: f64 = (0..d)
                    .map(|k| {
                        let (lo, hi) = rows.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &i| (l.min(x[(i, k)]), h.max(x[(i, k)])));
                        0.25 * (hi - lo) * (hi - lo)
                    })
                    .sum();
                // Only a run of coincident points may exceed the size.
                assert!(half_diag2 <= radius * radius && (rows.len() <= max_size || half_diag2 == 0.0), "{d} {radius} {max_size}");
            }
        }
    }
}

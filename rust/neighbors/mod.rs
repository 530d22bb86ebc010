//! Exact neighbour search: a kd-tree for low dimensions, tiled brute force for high ones,
//! and an `auto` rule between them. Results are sorted by (distance, index), which makes
//! them deterministic and independent of the thread count. Outputs are allocated fallibly
//! (`OutOfMemory` rather than an abort when m × k or the radius lists do not fit) and the
//! loops poll the run's `Monitor` per query or tile.

pub mod kdtree;

use crate::distance::{row_sq_norms, sq_dist_tile_gemm, sq_euclidean, GEMM_MIN_DIM};
use crate::error::{LocalizationError, Result};
use crate::kernel::Real;
use crate::memory;
use crate::parallel::Monitor;
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

/// Neighbour lists of m queries in one flat (CSR) layout: query i's neighbours are
/// `indices[offsets[i]..offsets[i + 1]]` at `distances[..]` (Euclidean, not squared).
#[derive(Clone, Debug, Default)]
pub struct Neighbors<F> {
    pub indices: Vec<usize>,
    pub distances: Vec<F>,
    pub offsets: Vec<usize>,
}

impl<F> Neighbors<F> {
    /// (indices, distances) of query i.
    pub fn row(&self, i: usize) -> (&[usize], &[F]) {
        let (a, b) = (self.offsets[i], self.offsets[i + 1]);
        (&self.indices[a..b], &self.distances[a..b])
    }
}

/// A fitted search structure over the reference rows.
pub enum Index<F: Real> {
    Tree(KdTree<F>),
    Brute { x: Array2<F>, norms: Vec<F> },
}

impl<F: Real> Index<F> {
    pub fn build(x: ArrayView2<F>, algorithm: Algorithm, leaf_size: usize, mon: &Monitor) -> Result<Self> {
        if x.nrows() == 0 {
            return Err(LocalizationError::EmptyInput { name: "X" });
        }
        let use_tree = match algorithm {
            Algorithm::KdTree => true,
            Algorithm::Brute => false,
            Algorithm::Auto => x.ncols() < GEMM_MIN_DIM && x.nrows() > 64,
        };
        Ok(if use_tree {
            Index::Tree(KdTree::build(x, leaf_size, mon)?)
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

    /// The k nearest references of every query row, ascending. The m × k output is
    /// allocated before the search.
    pub fn knn(&self, q: ArrayView2<F>, k: usize, mon: &Monitor) -> Result<Neighbors<F>> {
        self.check_query(&q)?;
        if k == 0 || k > self.n_samples() {
            return Err(LocalizationError::param(
                "n_neighbors",
                format!("must be in [1, n_samples_fit = {}], got {k}", self.n_samples()),
            ));
        }
        let m = q.nrows();
        let mut indices = memory::try_vec("neighbor indices", &[m, k], 0usize)?;
        let mut distances = memory::try_vec("neighbor distances", &[m, k], F::zero())?;
        match self {
            Index::Tree(t) => indices.par_chunks_mut(k).zip(distances.par_chunks_mut(k)).enumerate().for_each(|(i, (ind, dist))| {
                if mon.stopped() {
                    return;
                }
                let (a, b) = t.knn(q.row(i).as_slice().expect("row-major (checked on entry)"), k);
                ind.copy_from_slice(&a);
                dist.copy_from_slice(&b);
            }),
            Index::Brute { x, norms } => brute_knn(q, x.view(), norms, k, &mut indices, &mut distances, mon),
        }
        mon.check()?;
        Ok(Neighbors { indices, distances, offsets: (0..=m).map(|i| i * k).collect() })
    }

    /// All references within distance r (inclusive) of each query row, ascending. `radii`
    /// holds one r for every query or a single r for all; r = +∞ returns every reference.
    /// The lists grow fallibly, a block of queries at a time, so memory holds the output plus
    /// one block's lists.
    pub fn radius(&self, q: ArrayView2<F>, radii: &[F], mon: &Monitor) -> Result<Neighbors<F>> {
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
        let m = q.nrows();
        let mut out = Neighbors { indices: Vec::new(), distances: Vec::new(), offsets: Vec::with_capacity(m + 1) };
        out.offsets.push(0);
        let block = (64 * rayon::current_num_threads()).max(1024);
        for b0 in (0..m).step_by(block) {
            mon.check()?;
            let rows: Vec<Vec<(F, usize)>> = (b0..(b0 + block).min(m))
                .into_par_iter()
                .map(|i| {
                    let (qs, r2) = (q.row(i), r2_of(i));
                    let qs = qs.as_slice().expect("row-major (checked on entry)");
                    let mut hits = Hits::default();
                    match self {
                        Index::Tree(t) => {
                            let order = t.order();
                            t.visit_within(qs, r2, &mut |pos, d2| hits.push(d2, order[pos]));
                        }
                        Index::Brute { x, .. } => {
                            for (j, xr) in x.rows().into_iter().enumerate() {
                                let d2 = sq_euclidean(qs, xr.as_slice().expect("row-major (checked on entry)"));
                                if d2 <= r2 {
                                    hits.push(d2, j);
                                }
                            }
                        }
                    }
                    let mut hits = hits.finish()?;
                    hits.sort_unstable_by(by_distance_then_index);
                    Ok(hits)
                })
                .collect::<Result<_>>()?;
            let added: usize = rows.iter().map(Vec::len).sum();
            // The total is known only at the end: report what the queries so far found.
            let (pairs, done) = (out.indices.len() + added, (b0 + block).min(m));
            let so_far = |_| LocalizationError::OutOfMemory {
                name: "radius neighbors",
                what: format!("{pairs} (index, distance) pairs, found by the first {done} of {m} queries,"),
                bytes: pairs as u128 * (8 + std::mem::size_of::<F>()) as u128,
            };
            memory::try_grow(&mut out.indices, added, "radius neighbors").map_err(so_far)?;
            memory::try_grow(&mut out.distances, added, "radius neighbors").map_err(so_far)?;
            for hits in rows {
                out.indices.extend(hits.iter().map(|h| h.1));
                out.distances.extend(hits.iter().map(|h| h.0.sqrt()));
                out.offsets.push(out.indices.len());
            }
        }
        Ok(out)
    }
}

/// One query's (d², index) hits, grown fallibly: a query may see every reference.
#[derive(Default)]
struct Hits<F> {
    hits: Vec<(F, usize)>,
    failed: bool,
}

impl<F> Hits<F> {
    #[inline]
    fn push(&mut self, d2: F, j: usize) {
        if self.failed {
            return;
        }
        if self.hits.len() == self.hits.capacity() && self.hits.try_reserve(self.hits.len().max(16)).is_err() {
            self.failed = true;
            return;
        }
        self.hits.push((d2, j));
    }

    fn finish(self) -> Result<Vec<(F, usize)>> {
        if self.failed {
            return Err(memory::out_of_memory::<(F, usize)>("radius neighbors of one query", &[2 * self.hits.len()]));
        }
        Ok(self.hits)
    }
}

/// The order of (squared distance, index) pairs: nearest first, ties by index.
fn by_distance_then_index<F: Real>(a: &(F, usize), b: &(F, usize)) -> std::cmp::Ordering {
    a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal).then(a.1.cmp(&b.1))
}


const QUERY_BLOCK: usize = 64;
const REF_TILE: usize = 512;

/// Tiled brute-force kNN into the m × k outputs: squared distances of a query block against a
/// reference tile come from one matrix product; each query keeps a bounded candidate list.
/// Final distances are recomputed directly so they carry no cancellation error.
fn brute_knn<F: Real>(q: ArrayView2<F>, x: ArrayView2<F>, xn: &[F], k: usize, indices: &mut [usize], distances: &mut [F], mon: &Monitor) {
    let n = x.nrows();
    let use_gemm = x.ncols() >= GEMM_MIN_DIM;
    indices.par_chunks_mut(QUERY_BLOCK * k).zip(distances.par_chunks_mut(QUERY_BLOCK * k)).enumerate().for_each(|(blk, (ind, dist))| {
            let b0 = blk * QUERY_BLOCK;
            let b1 = (b0 + QUERY_BLOCK).min(q.nrows());
            let qb = q.slice(s![b0..b1, ..]);
            let qn = row_sq_norms(qb);
            let mut best: Vec<Vec<(F, usize)>> = vec![Vec::with_capacity(2 * k + REF_TILE); b1 - b0];
            let mut tile = Array2::<F>::zeros((b1 - b0, REF_TILE));
            for t0 in (0..n).step_by(REF_TILE) {
                if mon.stopped() {
                    return;
                }
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
            // After the last tile every list is pruned: the k best, sorted.
            for (i, c) in best.iter().enumerate() {
                for (j, &(d2, idx)) in c.iter().enumerate() {
                    ind[i * k + j] = idx;
                    dist[i * k + j] = d2.sqrt();
                }
            }
        });
}

/// Keep the k best candidates (ties broken by index); optionally recompute exact distances.
fn prune<F: Real>(cand: &mut Vec<(F, usize)>, k: usize, q: &[F], x: ArrayView2<F>, exact: bool) {
    let key = by_distance_then_index::<F>;
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
                    let idx = Index::build(x.view(), alg, 16, &Monitor::default()).unwrap();
                    let mon = Monitor::default();
                    let got = idx.knn(q.view(), 9, &mon).unwrap();
                    let got_rows: Vec<Vec<usize>> = (0..q.nrows()).map(|i| got.row(i).0.to_vec()).collect();
                    assert_eq!(got_rows, want, "d={d} dup={dup} {alg:?}");
                    // f32 too: same neighbours up to ties in rounding, so compare distances
                    let x32 = x.mapv(|v| v as f32);
                    let q32 = q.mapv(|v| v as f32);
                    let got32 = Index::build(x32.view(), alg, 16, &mon).unwrap().knn(q32.view(), 9, &mon).unwrap();
                    for (u, v) in got32.distances.iter().zip(&got.distances) {
                        assert!((*u as f64 - v).abs() < 1e-5);
                    }
                    let rad = idx.radius(q.view(), &[0.3], &mon).unwrap();
                    // Per-query radii, 0 and +∞ among them.
                    let radii: Vec<f64> = (0..q.nrows()).map(|i| [0.0, 0.1, 0.45, f64::INFINITY][i % 4]).collect();
                    let each = idx.radius(q.view(), &radii, &mon).unwrap();
                    for (i, qr) in q.rows().into_iter().enumerate() {
                        let within = |r: f64| -> Vec<usize> {
                            (0..x.nrows()).filter(|&j| sq_euclidean(qr.as_slice().unwrap(), x.row(j).as_slice().unwrap()) <= r * r).collect()
                        };
                        let mut g = rad.row(i).0.to_vec();
                        g.sort();
                        assert_eq!(g, within(0.3));
                        let mut g = each.row(i).0.to_vec();
                        g.sort();
                        assert_eq!(g, within(radii[i]));
                        assert!(each.row(i).1.windows(2).all(|w| w[0] <= w[1]));
                    }
                }
            }
        }
    }

    #[test]
    fn bad_k_is_an_error() {
        let x = Array2::<f64>::zeros((5, 2));
        let mon = Monitor::default();
        let idx = Index::build(x.view(), Algorithm::Auto, 16, &mon).unwrap();
        assert!(idx.knn(x.view(), 0, &mon).is_err());
        assert!(idx.knn(x.view(), 6, &mon).is_err());
        assert!(idx.knn(Array2::<f64>::zeros((2, 3)).view(), 1, &mon).is_err());
        assert!(Index::build(Array2::<f64>::zeros((0, 2)).view(), Algorithm::Auto, 16, &mon).is_err());
        assert!(idx.radius(x.view(), &[f64::NAN], &mon).is_err());
        assert!(idx.radius(x.view(), &[-1.0], &mon).is_err());
        assert!(idx.radius(x.view(), &[1.0, 2.0], &mon).is_err());
        assert_eq!(idx.radius(x.view(), &[f64::INFINITY], &mon).unwrap().row(0).0.len(), 5);
    }

    #[test]
    fn radius_leaves_bound_radius_and_size() {
        let mut rng = StdRng::seed_from_u64(4);
        for (d, radius, max_size) in [(1, 0.05, 1000), (2, 0.2, 1000), (2, 10.0, 37), (3, 0.0, 5)] {
            let x = data(&mut rng, 900, d, true);
            let (order, starts) = radius_leaves(x.view(), radius, max_size, &Monitor::default()).unwrap();
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

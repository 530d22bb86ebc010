//! Exact neighbour search: a kd-tree for low dimensions, tiled brute force for high ones,
//! and an `auto` rule between them. Results are sorted by (distance, index), which makes
//! them deterministic and independent of the thread count. Outputs are allocated fallibly
//! (`OutOfMemory` rather than an abort when m × k or the radius lists do not fit) and the
//! loops poll the run's `Monitor` per query or tile.
//!
//! Exact means: the neighbours and distances that direct differences Σ (q_k − x_k)² give.
//! The brute force in high dimensions screens candidates with the matrix-product form on
//! centred coordinates, widened by its rounding bound, and ranks them by direct differences;
//! coordinates far from 1 are searched in an exactly rescaled space (`distance::Scale`).

pub mod kdtree;
pub mod masked;
pub mod projected;

use crate::distance::packed::{minus_two_dots, Panels};
use crate::distance::{column_means, pow2, product_error, sq_euclidean, sq_euclidean_wide, Scale, GEMM_MIN_DIM};
use crate::error::{LocalizationError, Result};
use crate::real::Real;
use num_traits::Float;
use crate::rows::Rows;
use crate::memory;
use crate::parallel::Monitor;
use ndarray::{Array2, ArrayView2};
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

/// A fitted search structure over the reference rows, in working units `lengths`
/// (coordinates times an exact power of two; one for ordinary data).
pub struct Index<F: Real> {
    lengths: Scale,
    inner: Inner<F>,
}

enum Inner<F: Real> {
    Tree(KdTree<F>),
    Brute(Brute<F>),
}

/// The brute-force index: the rows, and for the product path (d ≥ `GEMM_MIN_DIM`) the screen
/// of [`Product`].
struct Brute<F: Real> {
    x: Array2<F>,
    product: Option<Product<F>>,
    /// The k-NN's lower bound from a few principal directions, when the data has the
    /// low-rank structure for it to pay (see [`projected`]).
    projection: Option<projected::Projection>,
}

/// The product screen: the rows centred on their mean, scaled by 2^−e (`screen`) and rounded
/// to the screen precision `F::Screen` (single precision: f64 data is screened at twice the
/// SIMD width, then ranked exactly in f64), packed for the product; per row its squared norm
/// ‖x̃‖² minus and plus its part c·‖x̃‖² + a of the rounding bound — the terms the screen adds
/// to a product entry for a lower and an upper bound of a squared distance (in screen units).
struct Product<F: Real> {
    centre: Vec<F>,
    screen: Scale,
    packed: Panels<F::Screen>,
    /// The bound's relative factor c and absolute term a (see [`Product::new`]).
    c: F::Screen,
    a: F::Screen,
    /// Largest scaled centred query coordinate for which the bound holds.
    query_max: f64,
    lower: Vec<F::Screen>,
    upper: Vec<F::Screen>,
    /// Packed position → reference row. Runs of `REF_TILE` positions (the tiles) are compact
    /// groups ([`coherent_order`] on the `columns`, the features of largest spread), and
    /// `tile_means` holds each tile's mean in those features (working units): a block of
    /// nearby queries visits the tiles nearest it first, so its k-th distances settle within
    /// a tile or two and the screen passes few candidates after.
    columns: Vec<usize>,
    order: Vec<usize>,
    tile_means: Vec<f64>,
}

impl<F: Real> Product<F> {
    /// The bound. In the data's own precision it is `product_error(d)` (no conversion, a = 0).
    /// Rounding the centred f64 rows to f32 moves each squared distance by at most
    /// 2ε₃₂(‖q̂‖² + ‖x̂‖²) (relative error u₃₂ per coordinate), and the f64 centring by a few
    /// units of f64 roundoff: `product_error::<f32>(d + 2)` adds 4ε₃₂ for both. Underflow in
    /// f32 (coordinates below 2^−126) adds absolute errors of at most 2^−150 per coordinate
    /// and product; with both sides scaled to at most 2^32 they total below d·2^−116, which
    /// a = d·2^−100 covers.
    fn new(x: ArrayView2<F>) -> Result<Self> {
        let (d, converts) = (x.ncols(), std::mem::size_of::<F::Screen>() != std::mem::size_of::<F>());
        let centre = column_means(x);
        let screen = if converts {
            let max = x.rows().into_iter().fold(0.0f64, |m, r| r.iter().zip(&centre).fold(m, |m, (&v, &c)| m.max((v - c).abs().f64())));
            Scale::for_max::<F::Screen>(max)
        } else {
            Scale::ONE
        };
        // The order from a few features, copied out once: on all d of them the recursive
        // halving read every row at random on every level (it doubled the build of 10⁵
        // Gaussian rows in 64 features, where it gains nothing).
        let columns = widest_columns(x, &centre);
        let w = columns.len();
        let z = memory::try_collect("X", &[x.nrows(), w], x.rows().into_iter().flat_map(|r| columns.iter().map(move |&c| r[c].f64())))?;
        let mut order = memory::try_collect("sample order", &[x.nrows()], 0..x.nrows())?;
        coherent_order(&|i, c| z[i * w + c], w, &mut order, REF_TILE);
        let tile_means = order
            .chunks(REF_TILE)
            .flat_map(|tile| {
                let mut mean = vec![0.0f64; w];
                for &i in tile {
                    mean.iter_mut().zip(&z[i * w..(i + 1) * w]).for_each(|(m, v)| *m += v);
                }
                mean.iter_mut().for_each(|m| *m /= tile.len() as f64);
                mean
            })
            .collect();
        let (packed, _) = Panels::references_from(x, Some(&order), &centre, screen.down(F::one()))?;
        let (c, a, query_max) = if converts {
            (product_error::<F::Screen>(d + 2), F::Screen::of(d as f64 * 2f64.powi(-100)), 2f64.powi(F::Screen::MAX_EXP / 4))
        } else {
            (product_error::<F::Screen>(d), F::Screen::of(0.0), f64::INFINITY)
        };
        let lower = memory::try_collect("X", &[x.nrows()], packed.norms().iter().map(|&v| v - c * v - a))?;
        let upper = memory::try_collect("X", &[x.nrows()], packed.norms().iter().map(|&v| v + c * v + a))?;
        Ok(Product { centre, screen, packed, c, a, query_max, lower, upper, columns, order, tile_means })
    }

    /// Packs a block of queries into `qp` with their norms' lower and upper terms, or `None`
    /// when converting and some scaled centred coordinate exceeds 2^32 (a query ~4·10⁹ times
    /// farther out than the samples' spread), where the bound would not hold: the caller then
    /// ranks that block by direct differences.
    fn queries(&self, qb: ArrayView2<F>, qp: &mut Panels<F::Screen>) -> Option<(Vec<F::Screen>, Vec<F::Screen>)> {
        let max = qp.repack_from(qb, &self.centre, self.screen.down(F::one()));
        if !(max <= self.query_max) {
            return None;
        }
        let (c, a) = (self.c, self.a);
        Some(qp.norms().iter().map(|&v| (v - c * v - a, v + c * v + a)).unzip())
    }

    /// A squared distance in working units as an upper bound in screen units (rounded up).
    fn to_screen(&self, w: F) -> F::Screen {
        let x = pow2(w.f64(), -2 * self.screen.exponent());
        let t = F::Screen::of(x);
        if t.f64() < x {
            t + t.abs() * F::Screen::epsilon() + F::Screen::min_positive_value()
        } else {
            t
        }
    }

    /// A squared distance in screen units back in working units (exact: f32 → f64 and 2^2e).
    fn from_screen(&self, v: F::Screen) -> F {
        F::of(pow2(v.f64(), 2 * self.screen.exponent()))
    }
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
        let lengths = Scale::of_arrays(&[x]);
        let x = lengths.down_array(x)?;
        let inner = if use_tree {
            Inner::Tree(KdTree::build(x.view(), leaf_size, mon)?)
        } else {
            let x = if x.is_view() || !x.is_standard_layout() { memory::try_copy("X", x.view())? } else { x.into_owned() };
            // The product screen serves only the plain search: with a projection it would
            // be a second copy of the samples (in the screen's precision) never read.
            let projection = if x.ncols() >= GEMM_MIN_DIM { projected::Projection::build(x.view(), &column_means(x.view()))? } else { None };
            let product = if x.ncols() >= GEMM_MIN_DIM && projection.is_none() { Some(Product::new(x.view())?) } else { None };
            Inner::Brute(Brute { x, product, projection })
        };
        Ok(Index { lengths, inner })
    }

    pub fn n_samples(&self) -> usize {
        match &self.inner {
            Inner::Tree(t) => t.n_samples(),
            Inner::Brute(b) => b.x.nrows(),
        }
    }

    pub fn dim(&self) -> usize {
        match &self.inner {
            Inner::Tree(t) => t.dim(),
            Inner::Brute(b) => b.x.ncols(),
        }
    }

    /// Distances of the working space back to the caller's units; an error if some cannot be
    /// represented (queries so far from the fitted rows that their distances overflow).
    fn to_caller_units(&self, mut nb: Neighbors<F>) -> Result<Neighbors<F>> {
        if self.lengths.is_one() {
            return Ok(nb);
        }
        for v in nb.distances.iter_mut() {
            *v = self.lengths.up(*v);
            if !v.is_finite() {
                return Err(LocalizationError::param("X", "distances between these queries and the fitted samples overflow the floating-point type"));
            }
        }
        Ok(nb)
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
        self.knn_reported(q, k, mon, false)
    }

    /// [`Index::knn`], also reporting the queries done to `mon` when `report` (off inside an
    /// algorithm that reports its own progress, as the engine's `Options::progress`).
    pub fn knn_reported(&self, q: ArrayView2<F>, k: usize, mon: &Monitor, report: bool) -> Result<Neighbors<F>> {
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
        let q = self.lengths.down_array(q)?;
        let q = q.view();
        let rows = Rows::new("X", q)?;
        if report {
            mon.set_progress(0, m);
        }
        match &self.inner {
            // Queries go in the order of the subtrees their searches enter first, so that
            // neighbouring queries find the same nodes and points in cache (10⁶ 2-D 1-NN
            // queries: 1.0 s in random order and 0.68 s already in order, against 2.0 s and
            // 0.57 s searched as given). A query's answer does not depend on when it is
            // searched. Blocks of queries, so that progress is counted once per block.
            Inner::Tree(t) => {
                let mut order: Vec<(usize, usize)> =
                    (0..m).into_par_iter().map(|i| (t.first_subtree(rows.row(i), SUBTREE_POINTS), i)).collect();
                order.par_sort_unstable();
                let block = tree_block(m);
                for segment in order.chunks(TREE_SEGMENT) {
                    let found: Vec<Vec<(usize, Vec<usize>, Vec<F>)>> = segment
                        .par_chunks(block)
                        .map(|queries| {
                            let found: Vec<_> =
                                queries.iter().take_while(|_| !mon.stopped()).map(|&(_, i)| (i, t.knn(rows.row(i), k))).map(|(i, (a, b))| (i, a, b)).collect();
                            if report {
                                mon.advance(found.len());
                            }
                            found
                        })
                        .collect();
                    for (i, a, b) in found.into_iter().flatten() {
                        indices[i * k..(i + 1) * k].copy_from_slice(&a);
                        distances[i * k..(i + 1) * k].copy_from_slice(&b);
                    }
                    if mon.stopped() {
                        break;
                    }
                }
            }
            Inner::Brute(b) => brute_knn(q, rows, Rows::new("X", b.x.view())?, b, k, &mut indices, &mut distances, mon, report)?,
        }
        mon.check()?;
        self.to_caller_units(Neighbors { indices, distances, offsets: (0..=m).map(|i| i * k).collect() })
    }

    /// All references within distance r (inclusive) of each query row, ascending. `radii`
    /// holds one r for every query or a single r for all; r = +∞ returns every reference.
    /// The lists grow fallibly, a block of queries at a time, so memory holds the output plus
    /// one block's lists.
    pub fn radius(&self, q: ArrayView2<F>, radii: &[F], mon: &Monitor) -> Result<Neighbors<F>> {
        self.radius_reported(q, radii, mon, false)
    }

    /// [`Index::radius`], also reporting the queries done to `mon` when `report`.
    pub fn radius_reported(&self, q: ArrayView2<F>, radii: &[F], mon: &Monitor, report: bool) -> Result<Neighbors<F>> {
        self.check_query(&q)?;
        if radii.len() != 1 && radii.len() != q.nrows() {
            return Err(LocalizationError::shape("radius", format!("1 or {} values (one per query)", q.nrows()), radii.len()));
        }
        if radii.iter().any(|r| !(*r >= F::zero())) {
            return Err(LocalizationError::param("radius", "must be non-negative (+inf allowed), not NaN"));
        }
        let q = self.lengths.down_array(q)?;
        let q = q.view();
        let r2_of = |i: usize| {
            let r = self.lengths.down(radii[if radii.len() == 1 { 0 } else { i }]);
            r * r
        };
        let m = q.nrows();
        let q = Rows::new("X", q)?;
        let mut out = Neighbors { indices: Vec::new(), distances: Vec::new(), offsets: Vec::with_capacity(m + 1) };
        out.offsets.push(0);
        let block = (64 * rayon::current_num_threads()).max(1024);
        if report {
            mon.set_progress(0, m);
        }
        for b0 in (0..m).step_by(block) {
            mon.check()?;
            let rows: Vec<Vec<(F, usize)>> = (b0..(b0 + block).min(m))
                .into_par_iter()
                .map(|i| {
                    let (qs, r2) = (q.row(i), r2_of(i));
                    let mut hits = Hits::default();
                    match &self.inner {
                        Inner::Tree(t) => {
                            let order = t.order();
                            t.visit_within(qs, r2, &mut |pos, d2| hits.push(d2, order[pos]));
                        }
                        Inner::Brute(Brute { x, .. }) => {
                            let x = Rows::new("X", x.view())?;
                            for j in 0..x.nrows() {
                                let d2 = sq_euclidean(qs, x.row(j));
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
            if report {
                mon.set_progress(done, m);
            }
        }
        self.to_caller_units(out)
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


/// The kd-tree leaf size of the library's own trees (the engine's compact kernels, MeanShift's
/// windows, QuickShift, the kNN kernel and MeanShift's seed lookups from Python).
pub const LEAF_SIZE: usize = 32;

/// Points of the subtrees that order the queries of a tree search: small enough to stay in
/// a core's cache while its queries are searched.
const SUBTREE_POINTS: usize = 8192;

/// Queries whose answers are held before they are written to their rows (memory: this
/// many lists of k neighbours).
const TREE_SEGMENT: usize = 1 << 14;

/// Queries per parallel task of the kd-tree search (one progress report each): at most 64, and
/// at least four tasks per thread when there are few queries.
fn tree_block(m: usize) -> usize {
    m.div_ceil(4 * rayon::current_num_threads()).clamp(1, 64)
}

/// Queries per block: large, so that each sample tile streamed into cache serves many
/// queries, yet at least four blocks per thread when there are few queries.
const QUERY_BLOCK: usize = 256;
const REF_TILE: usize = 512;
/// Product entries screened per step: a step without a candidate (the common case once the
/// k-th distance has settled) is one vectorised pass and one branch.
const SCREEN_CHUNK: usize = 16;

fn query_block(m: usize) -> usize {
    (m.div_ceil(4 * rayon::current_num_threads()).next_multiple_of(8)).clamp(8, QUERY_BLOCK)
}

/// Queries ordered and searched at a time by the brute force (memory: this many k-lists
/// besides the output).
const SEGMENT: usize = 1 << 14;
/// Rows whose spread chooses the coordinate of a split of [`coherent_order`].
const SPREAD_SAMPLE: usize = 256;

/// Orders `ids` so that every run of `block` consecutive ids is a compact group: recursive
/// halving, at a multiple of `block`, on the coordinate (of `m`, read by `coord(id, c)`) of
/// largest spread among up to `SPREAD_SAMPLE` of the ids. Nearby rows have mostly the same
/// neighbours: a block of such queries reads the same candidates, and a tile of such
/// references lies in one region.
fn coherent_order(coord: &(impl Fn(usize, usize) -> f64 + Sync), m: usize, ids: &mut [usize], block: usize) {
    if ids.len() <= block || m == 0 {
        return;
    }
    let step = ids.len().div_ceil(SPREAD_SAMPLE);
    let spread = |c: usize| {
        let (lo, hi) = ids.iter().step_by(step).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &i| (lo.min(coord(i, c)), hi.max(coord(i, c))));
        hi - lo
    };
    let c = (0..m).map(|c| (spread(c), c)).fold((f64::NEG_INFINITY, 0), |a, b| if b.0 > a.0 { b } else { a }).1;
    let half = (ids.len() / 2).next_multiple_of(block).min(ids.len() - 1);
    ids.select_nth_unstable_by(half, |&a, &b| coord(a, c).total_cmp(&coord(b, c)).then(a.cmp(&b)));
    let (left, right) = ids.split_at_mut(half);
    rayon::join(|| coherent_order(coord, m, left, block), || coherent_order(coord, m, right, block));
}

/// Features that order the brute force's samples and queries ([`Product::columns`]).
const ORDER_COLUMNS: usize = 8;
/// Rows per parallel task of [`widest_columns`].
const SPREAD_ROWS: usize = 4096;

/// The (at most) `ORDER_COLUMNS` features of largest spread about `centre`, by index.
fn widest_columns<F: Real>(x: ArrayView2<F>, centre: &[F]) -> Vec<usize> {
    // Per block of rows in parallel, then in block order (the same columns for any thread count).
    let parts: Vec<Vec<f64>> = (0..x.nrows()).step_by(SPREAD_ROWS).collect::<Vec<_>>().into_par_iter().map(|r0| {
        let mut spread = vec![0.0f64; x.ncols()];
        for r in x.rows().into_iter().skip(r0).take(SPREAD_ROWS) {
            spread.iter_mut().zip(r).zip(centre).for_each(|((s, &v), &c)| *s += (v - c).f64() * (v - c).f64());
        }
        spread
    }).collect();
    let spread = parts.into_iter().reduce(|a, b| a.iter().zip(&b).map(|(x, y)| x + y).collect()).unwrap_or_default();
    let mut columns: Vec<usize> = (0..x.ncols()).collect();
    columns.sort_by(|&a, &b| spread[b].total_cmp(&spread[a]).then(a.cmp(&b)));
    columns.truncate(ORDER_COLUMNS);
    columns.sort_unstable();
    columns
}

/// Tiled brute-force kNN into the m × k outputs. In high dimensions the products −2 q̂·x̂ of a
/// block of centred queries against a tile of centred references come from one matrix
/// product; adding the norms minus (plus) the rounding bound gives a lower (upper) bound of
/// each squared distance. An entry is a candidate when its lower bound is within the query's
/// current k-th distance, candidates whose lower bound lies above the k-th smallest upper
/// bound are dropped, and the rest are ranked by direct differences. So the result is the one
/// direct differences give, at the cost of the product plus about k direct differences per
/// query. The queries go in blocks of nearby ones ([`coherent_order`]), which visit the
/// reference tiles nearest them first (a query's answer does not depend on either order).
/// Polls `mon` per tile (the caller checks it afterwards) and, when `report`, counts the
/// queries of each finished block. `q_rows` and `x_rows` are the rows of `q` and `b.x`.
#[allow(clippy::too_many_arguments)]
fn brute_knn<F: Real>(
    q: ArrayView2<F>, q_rows: Rows<'_, F>, x_rows: Rows<'_, F>, b: &Brute<F>, k: usize, indices: &mut [usize], distances: &mut [F], mon: &Monitor,
    report: bool,
) -> Result<()> {
    if let Some(p) = &b.projection {
        return projected::knn(q, q_rows, x_rows, p, k, indices, distances, mon, report);
    }
    let m = q.nrows();
    let block = query_block(m);
    for s0 in (0..m).step_by(SEGMENT) {
        let s1 = (s0 + SEGMENT).min(m);
        let mut order: Vec<usize> = (s0..s1).collect();
        if let Some(p) = &b.product {
            coherent_order(&|i, c| q_rows.row(i)[p.columns[c]].f64(), p.columns.len(), &mut order, block);
        }
        if !search_in_blocks(&order, 0, block, (k, &mut *indices, &mut *distances), mon, report, |ids| search_block(ids, q_rows, x_rows, b, k, mon)) {
            break;
        }
    }
    Ok(())
}

/// Searches the queries `order` in blocks of `block` with `search` (one sorted list of
/// (squared distance, index) per query, in the block's order; empty once `mon` is stopped),
/// counting each finished block when `report`, and writes query i's k neighbours to output
/// row `base + i` of (k, indices, distances). False once `mon` is stopped.
#[allow(clippy::type_complexity)]
fn search_in_blocks<F: Real>(
    order: &[usize], base: usize, block: usize, (k, indices, distances): (usize, &mut [usize], &mut [F]), mon: &Monitor, report: bool,
    search: impl Fn(&[usize]) -> Vec<Vec<(F, usize)>> + Sync,
) -> bool {
    let found: Vec<Vec<(F, usize)>> = order
        .par_chunks(block)
        .flat_map_iter(|ids| {
            let found = if mon.stopped() { Vec::new() } else { search(ids) };
            if report && !mon.stopped() {
                mon.advance(ids.len());
            }
            found
        })
        .collect();
    if mon.stopped() {
        return false;
    }
    for (&i, best) in order.iter().zip(found) {
        for (c, (d2, idx)) in best.into_iter().enumerate() {
            indices[(base + i) * k + c] = idx;
            distances[(base + i) * k + c] = d2.sqrt();
        }
    }
    true
}

/// The k nearest references of the queries `ids` (rows of `q_rows`), each sorted by
/// (squared distance, index); empty once `mon` is stopped.
fn search_block<F: Real>(ids: &[usize], q_rows: Rows<'_, F>, x_rows: Rows<'_, F>, b: &Brute<F>, k: usize, mon: &Monitor) -> Vec<Vec<(F, usize)>> {
    let (n, d) = b.x.dim();
    let qb = Array2::from_shape_fn((ids.len(), d), |(r, c)| q_rows.row(ids[r])[c]);
    let mut qp = Panels::queries(d);
    // The screen with, per query, ‖q̃‖² minus and plus its part of the rounding bound.
    let screen = b.product.as_ref().and_then(|p| Some((p, p.queries(qb.view(), &mut qp)?)));
    let mut best: Vec<Best<F>> = (0..ids.len()).map(|_| Best::new(k)).collect();
    match &screen {
        Some((p, (q_lower, q_upper))) => {
            let mean: Vec<f64> = p.columns.iter().map(|&c| qb.column(c).iter().map(|v| v.f64()).sum::<f64>() / ids.len() as f64).collect();
            let mut tiles: Vec<(f64, usize)> =
                p.tile_means.chunks(mean.len()).map(|t| t.iter().zip(&mean).map(|(a, b)| (a - b) * (a - b)).sum()).zip(0..).collect();
            tiles.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            // Product entries (screen units), one tile at a time.
            let mut products = vec![F::Screen::of(0.0); qp.padded_rows() * REF_TILE];
            let mut pending: Vec<(F, F, usize)> = Vec::with_capacity(REF_TILE);
            let mut scratch: Vec<F> = Vec::with_capacity(REF_TILE + k);
            let w = p.packed.width();
            for (_, t) in tiles {
                if mon.stopped() {
                    return Vec::new();
                }
                let (t0, t1) = (t * REF_TILE, ((t + 1) * REF_TILE).min(n));
                minus_two_dots(&qp, &p.packed, t0 / w..t1.div_ceil(w), &mut products, REF_TILE);
                let (lower, upper, rows) = (&p.lower[t0..t1], &p.upper[t0..t1], &p.order[t0..t1]);
                for (i, best) in best.iter_mut().enumerate() {
                    // (lower bound, upper bound, reference row) of each candidate.
                    pending.clear();
                    let row = &products[i * REF_TILE..i * REF_TILE + (t1 - t0)];
                    let (ql, qu, worst) = (q_lower[i], q_upper[i], p.to_screen(best.worst()));
                    for (ci, (vs, ls)) in row.chunks(SCREEN_CHUNK).zip(lower.chunks(SCREEN_CHUNK)).enumerate() {
                        if vs.iter().zip(ls).fold(false, |hit, (&v, &l)| hit | ((v + l) + ql <= worst)) {
                            for (jj, (&v, &l)) in vs.iter().zip(ls).enumerate() {
                                let j = ci * SCREEN_CHUNK + jj;
                                if (v + l) + ql <= worst {
                                    pending.push((p.from_screen((v + l) + ql), p.from_screen((v + upper[j]) + qu), rows[j]));
                                }
                            }
                        }
                    }
                    best.cut(&mut pending, &mut scratch);
                    let qs = q_rows.row(ids[i]);
                    for &(_, _, j) in &pending {
                        best.offer(sq_euclidean_wide(qs, x_rows.row(j)), j);
                    }
                }
            }
        }
        None => {
            // Exact direct squared distances, a tile at a time; blocks beyond the screen's
            // range rank as the screen's survivors do.
            let dist = if b.product.is_some() { sq_euclidean_wide::<F> } else { sq_euclidean::<F> };
            for t0 in (0..n).step_by(REF_TILE) {
                if mon.stopped() {
                    return Vec::new();
                }
                for (&i, best) in ids.iter().zip(best.iter_mut()) {
                    let qs = q_rows.row(i);
                    for j in t0..(t0 + REF_TILE).min(n) {
                        best.offer(dist(qs, x_rows.row(j)), j);
                    }
                }
            }
        }
    }
    best.into_iter().map(Best::into_sorted).collect()
}

/// The k best (squared distance, index) pairs seen so far, ties broken by index.
struct Best<F> {
    k: usize,
    cand: Vec<(F, usize)>,
    /// The k-th smallest squared distance once there are k candidates.
    worst: F,
}

impl<F: Real> Best<F> {
    fn new(k: usize) -> Self {
        Best { k, cand: Vec::with_capacity(2 * k), worst: F::infinity() }
    }

    fn worst(&self) -> F {
        self.worst
    }

    /// Drop the candidates of `pending` — (lower bound, upper bound, index) of a squared
    /// distance — that cannot be among the k nearest: at least k candidates (kept or pending)
    /// lie at or below the k-th smallest upper bound, so whatever lies wholly above it cannot.
    /// `scratch` is the caller's reusable storage.
    fn cut(&self, pending: &mut Vec<(F, F, usize)>, scratch: &mut Vec<F>) {
        let k = self.k;
        if pending.len() <= k {
            return;
        }
        scratch.clear();
        scratch.extend(self.cand.iter().map(|c| c.0));
        scratch.extend(pending.iter().map(|c| c.1));
        scratch.select_nth_unstable_by(k - 1, |a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let cut = scratch[k - 1];
        pending.retain(|c| c.0 <= cut);
    }

    fn offer(&mut self, d2: F, j: usize) {
        if d2 > self.worst {
            return;
        }
        self.cand.push((d2, j));
        if self.cand.len() > 2 * self.k {
            self.prune();
        } else if self.cand.len() == self.k {
            self.worst = self.cand.iter().fold(F::neg_infinity(), |m, c| m.max(c.0));
        }
    }

    /// The k nearest (squared distance, index) pairs, ascending.
    fn into_sorted(mut self) -> Vec<(F, usize)> {
        if self.cand.len() > self.k {
            self.prune();
        }
        self.cand.sort_unstable_by(by_distance_then_index);
        self.cand
    }

    /// Keep the k smallest by (d², index) and tighten the bound.
    fn prune(&mut self) {
        self.cand.select_nth_unstable_by(self.k - 1, by_distance_then_index);
        self.cand.truncate(self.k);
        self.worst = self.cand.iter().fold(F::neg_infinity(), |m, c| m.max(c.0));
    }
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
    fn searches_count_their_queries_only_when_asked() {
        let mut rng = StdRng::seed_from_u64(8);
        for (d, alg) in [(2usize, Algorithm::KdTree), (2, Algorithm::Brute), (40, Algorithm::Brute)] {
            let x = data(&mut rng, 900, d, true);
            let q = data(&mut rng, 517, d, false);
            let idx = Index::build(x.view(), alg, 16, &Monitor::default()).unwrap();
            let (quiet, counted) = (Monitor::default(), Monitor::default());
            let a = idx.knn(q.view(), 6, &quiet).unwrap();
            let b = idx.knn_reported(q.view(), 6, &counted, true).unwrap();
            assert_eq!((quiet.progress(), counted.progress()), ((0, 0), (517, 517)), "knn d={d} {alg:?}");
            assert_eq!((a.indices, a.distances), (b.indices, b.distances));
            let (quiet, counted) = (Monitor::default(), Monitor::default());
            let a = idx.radius(q.view(), &[0.3], &quiet).unwrap();
            let b = idx.radius_reported(q.view(), &[0.3], &counted, true).unwrap();
            assert_eq!((quiet.progress(), counted.progress()), ((0, 0), (517, 517)), "radius d={d} {alg:?}");
            assert_eq!((a.indices, a.offsets), (b.indices, b.offsets));
        }
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
    fn brute_force_is_exact_on_offset_data_and_far_clusters() {
        // Distances tiny against the norms: the product screens, direct differences decide.
        let mut rng = StdRng::seed_from_u64(9);
        // 300: the product sums over several feature slices (`distance::packed`).
        for &d in &[16usize, 50, 300] {
            for case in 0..3 {
                let at = |i: usize, k: usize| match case {
                    0 => 1e5,
                    1 if k == 0 => if i % 2 == 0 { 1e7 } else { -1e7 },
                    _ => 0.0,
                };
                let x = Array2::from_shape_fn((1300, d), |(i, k)| at(i, k) + 0.01 * rng.random::<f64>());
                // case 2: queries far from every sample.
                let q = Array2::from_shape_fn((40, d), |(i, k)| at(i, k) + if case == 2 { 1e4 } else { 0.0 } + 0.01 * rng.random::<f64>());
                let want = naive(&q, &x, 7);
                let mon = Monitor::default();
                let idx = Index::build(x.view(), Algorithm::Brute, 16, &mon).unwrap();
                let got = idx.knn(q.view(), 7, &mon).unwrap();
                let rows = |nb: &Neighbors<f64>| (0..q.nrows()).map(|i| nb.row(i).0.to_vec()).collect::<Vec<_>>();
                assert_eq!(rows(&got), want, "d={d} case {case}");
                for i in 0..q.nrows() {
                    for (&dist, &j) in got.row(i).1.iter().zip(&want[i]) {
                        assert_eq!(dist, sq_euclidean_wide(q.row(i).as_slice().unwrap(), x.row(j).as_slice().unwrap()).sqrt());
                    }
                }
                // Same at 2^±600: the same neighbours, the distances scaled exactly.
                for e in [600, -600] {
                    let f = 2f64.powi(e);
                    let (xs, qs) = (x.mapv(|v| v * f), q.mapv(|v| v * f));
                    for alg in [Algorithm::Brute, Algorithm::KdTree] {
                        let s = Index::build(xs.view(), alg, 16, &mon).unwrap().knn(qs.view(), 7, &mon).unwrap();
                        assert_eq!(rows(&s), want, "d={d} case {case} 2^{e} {alg:?}");
                        if alg == Algorithm::Brute {
                            let scaled: Vec<f64> = got.distances.iter().map(|v| v * f).collect();
                            assert_eq!(s.distances, scaled);
                        }
                        // Radius queries at that scale: the same sets, distances scaled back.
                        // (A hair above the 7th distance: the radius search sums in another order.)
                        let r = got.row(0).1[6] * (1.0 + 1e-10);
                        let near = Index::build(xs.view(), alg, 16, &mon).unwrap().radius(qs.view(), &[r * f], &mon).unwrap();
                        let mut g = near.row(0).0.to_vec();
                        g.sort();
                        let mut w = want[0].clone();
                        w.sort();
                        assert_eq!(g, w, "radius d={d} case {case} 2^{e} {alg:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn single_precision_screen_of_double_data_is_exact() {
        // f64 data is screened in f32 (scaled by a power of two into f32's range) and ranked
        // in f64: the same neighbours and distances as direct differences at magnitudes f64
        // keeps unscaled but f32 cannot hold (2^±100), with near-ties finer than f32 resolves,
        // and for queries beyond the screen's range (ranked directly).
        let mut rng = StdRng::seed_from_u64(21);
        let (n, d, k) = (900, 64, 8);
        let base = Array2::from_shape_fn((n, d), |_| rng.random::<f64>());
        // Pairs of samples 1e-12 apart: ties for f32, not for f64.
        let x = Array2::from_shape_fn((n, d), |(i, c)| base[[i - i % 2, c]] + if i % 2 == 1 && c == 0 { 1e-12 } else { 0.0 });
        let mut q = Array2::from_shape_fn((60, d), |(i, c)| x[[i * 7, c]] + 1e-3 * rng.random::<f64>());
        for c in 0..d {
            q[[59, c]] += 2f64.powi(40); // out of the screen's range: its block is ranked directly
        }
        let mon = Monitor::default();
        for e in [0, 100, -100] {
            let f = 2f64.powi(e);
            let (xs, qs) = (x.mapv(|v| v * f), q.mapv(|v| v * f));
            // The exact ranking, by the direct differences the search ranks with.
            let want: Vec<Vec<usize>> = qs
                .rows()
                .into_iter()
                .map(|qr| {
                    let mut t: Vec<(f64, usize)> = (0..n).map(|j| (sq_euclidean_wide(qr.as_slice().unwrap(), xs.row(j).as_slice().unwrap()), j)).collect();
                    t.sort_by(by_distance_then_index);
                    t.into_iter().take(k).map(|t| t.1).collect()
                })
                .collect();
            let got = Index::build(xs.view(), Algorithm::Brute, 16, &mon).unwrap().knn(qs.view(), k, &mon).unwrap();
            for i in 0..q.nrows() {
                assert_eq!(got.row(i).0, &want[i][..], "2^{e} query {i}");
                for (&dist, &j) in got.row(i).1.iter().zip(&want[i]) {
                    assert_eq!(dist, sq_euclidean_wide(qs.row(i).as_slice().unwrap(), xs.row(j).as_slice().unwrap()).sqrt());
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

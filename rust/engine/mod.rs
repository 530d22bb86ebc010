//! THE local-mean primitive (DESIGN §4).
//!
//! For queries q (m×d), references x (n×d), values v (n×p) and sample weights w (n) it
//! returns, per query, S₀ = Σᵢ K(q, xᵢ) wᵢ and S₁ = Σᵢ K(q, xᵢ) wᵢ vᵢ, and on request the
//! design moments Σᵢ K wᵢ φ(xᵢ − q) φ(xᵢ − q)ᵀ and Σᵢ K wᵢ φ(xᵢ − q) vᵢᵀ of a local polynomial
//! basis φ (degree 0, 1 or 2). Every method of the library is a choice of K and v plus
//! what it does with S₁ / S₀.
//!
//! How it is fast and exact:
//! * nothing m×n is ever stored: query blocks × reference tiles, distance → kernel →
//!   accumulate fused per tile, references re-laid out feature-major so the inner loops
//!   vectorise (with AVX2 when the CPU has it, chosen at run time);
//! * high dimensions get their tile of distances from a matrix product, on coordinates
//!   centred on the reference mean; an entry whose rounding bound is not small against the
//!   bandwidth (or the distance itself) is recomputed by direct differences (see `distance`),
//!   so offset data and far-apart clusters lose nothing to cancellation;
//! * coordinates, bandwidths, weights and values far outside the floating range's middle are
//!   rescaled by exact powers of two on the way in and back on the way out (`local_sums`);
//! * low dimensions lay references and queries out in compact boxes (`tiles`), and a tile
//!   out of reach of a query block (kernel exactly zero, or every term underflowing against
//!   the running maximum) is skipped whole; compact kernels go through a kd-tree instead
//!   when a cost model says so; the kNN kernel goes through the neighbour index;
//! * the Gaussian with one bandwidth in one or two features can instead be summed through a
//!   two-sided Taylor series between clusters of queries and references (`expansion`),
//!   within 1e-14 of Σ|w|K per query (exact to rounding with design moments) and O(n)
//!   rather than O(n·m) per bandwidth-wide cluster, chosen by
//!   a cost model when the bandwidth is wide relative to the spacing of the points;
//! * the exponential's polynomial runs in fused multiply-adds where the CPU has FMA;
//! * exponential kernels accumulate with a running maximum (as online softmax), so a tiny
//!   bandwidth gives the nearest-neighbour limit rather than 0/0; sums are reported as
//!   `value · exp(log_scale)`;
//! * parallel over query blocks only: the reduction order for one query is fixed, so
//!   results are bit-identical for any thread count. Tile sums are added in f64;
//! * the output is allocated before any work (an impossible request fails at once with
//!   `OutOfMemory`), and the loops poll `Options::monitor` per tile or query (Ctrl-C).

mod accumulate;
pub mod binned;
mod chebyshev;
mod expansion;
mod hermite;
pub(crate) mod lanes;
mod reference;
pub mod temporal;
mod tiles;
mod types;
mod kernel_matrix;

use crate::memory;
use crate::distance::{centre_rows, pow2, row_sq_norms, sq_euclidean_wide, Scale, GEMM_MIN_DIM};
use crate::checked::{self, Weights};
use crate::error::{LocalizationError, Result};
use crate::kernel::{dispatch_profile, Profile, ProfileFn};
use crate::real::Real;
use crate::rows::{Rows, Scratch};
use crate::neighbors::{Algorithm, Index, KdTree, LEAF_SIZE};
use crate::parallel::Monitor;
use accumulate::{in_batches, n_basis, per_query, Acc};
use tiles::{BlockCost, Blocks, TileValues, Tiles, TILE, WIDE_VALUES};
pub use kernel_matrix::kernel_matrix;
pub(crate) use kernel_matrix::fill_kernel_matrix;
pub use reference::Reference;
/// The Gaussian series expansion's error per query, relative to Σ |w| K: its default and floor.
pub use expansion::TOLERANCE as SERIES_TOLERANCE;
use reference::{Prep, TreeOrdered, Working, WorkingValues};
pub use types::{Bandwidth, Kernel, LocalSums, Neighborhood, Options, Problem};
use ndarray::{linalg::general_mat_mul, s, Array2, ArrayView2};
use std::borrow::Cow;

/// Queries per block: larger for the matrix-product path, where each reference tile is
/// packed once per block.
const QUERY_BLOCK: usize = 32;
const QUERY_BLOCK_GEMM: usize = 128;

/// Compute the local sums. Runs on the current rayon pool (see `parallel::install`).
///
/// The sums are invariant to scaling coordinates and bandwidths alike, and weights and values
/// only scale them: inputs far from the middle of the floating range are brought into it by
/// exact powers of two (`Scale`) and the sums brought back, so that 1e±200 coordinates or
/// weights and values near the float maximum give the same answers as ordinary ones. Where a
/// sum itself leaves the range of F, a power of two moves from it into `log_scale`.
pub fn local_sums<F: Real>(pb: &Problem<F>, kernel: &Kernel, bw: &Bandwidth<F>, opts: &Options) -> Result<LocalSums<F>> {
    let (sums, lengths) = local_sums_scaled(pb, kernel, bw, opts)?;
    to_caller_units(sums, lengths, pb.x.ncols(), opts.degree)
}

/// Sums in working length units (see `local_sums_scaled`) back in the caller's.
fn to_caller_units<F: Real>(mut sums: LocalSums<F>, lengths: Scale, d: usize, degree: Option<usize>) -> Result<LocalSums<F>> {
    if !lengths.is_one() {
        moments_to_caller_units(&mut sums, lengths, d, degree)?;
    }
    Ok(sums)
}

/// `local_sums` with the design moments left in the working length units: a moment of
/// degree g (in x − q) is 2^(−g·e) times the true one, e = `Scale::exponent` of the result.
/// For callers that only need the moments up to a power of two per basis function (the local
/// polynomial solve), which can then be taken where the true ones would overflow.
pub(crate) fn local_sums_scaled<F: Real>(pb: &Problem<F>, kernel: &Kernel, bw: &Bandwidth<F>, opts: &Options) -> Result<(LocalSums<F>, Scale)> {
    let lengths = lengths_of(kernel, pb.queries, pb.x, bw);
    // Keep "the queries are the references" visible (the expansion clusters them once).
    let same = pb.queries.as_ptr() == pb.x.as_ptr() && pb.queries.dim() == pb.x.dim();
    let sums = Working::new(pb.x, pb.weights, lengths)?.sums(pb, &WorkingValues::new(pb.values), same, kernel, bw, opts, None)?;
    Ok((sums, lengths))
}

/// Undo the weight and value scaling: every sum is multiplied by the weights' 2^e, sums of
/// values also by their column's. Exact while the result stays in range; where it would not
/// (a true sum beyond the float maximum, or deep in the subnormals), the query's sums move by
/// a common power of two into its `log_scale` instead.
fn restore_magnitudes<F: Real>(s: &mut LocalSums<F>, w: Scale, v: &[Scale]) {
    let m = s.den.len();
    let p = s.num.ncols();
    let ew = w.exponent();
    let ev = |c: usize| ew + v.get(c).map_or(0, |s| s.exponent());
    let limit = (F::MAX_EXP - 4) as f64;
    let log2 = |x: F| x.f64().abs().log2();
    for i in 0..m {
        // Largest resulting binary exponent, and that of the denominator.
        let mut top = f64::NEG_INFINITY;
        let mut see = |x: F, e: i32| {
            if x != F::zero() {
                top = top.max(log2(x) + e as f64);
            }
        };
        see(s.den[i], ew);
        for c in 0..p {
            see(s.num[(i, c)], ev(c));
        }
        if let (Some(mo), Some(cr)) = (&s.moments, &s.cross) {
            mo.index_axis(ndarray::Axis(0), i).iter().for_each(|&x| see(x, ew));
            let nb = cr.dim().1;
            for a in 0..nb {
                for c in 0..p {
                    see(cr[(i, a, c)], ev(c));
                }
            }
        }
        let low = if s.den[i] > F::zero() { log2(s.den[i]) + ew as f64 } else { 0.0 };
        let j = if top > limit {
            (top - limit).ceil() as i32
        } else if low < -limit {
            (low + limit).floor() as i32
        } else {
            0
        };
        s.den[i] = pow2(s.den[i], ew - j);
        for c in 0..p {
            s.num[(i, c)] = pow2(s.num[(i, c)], ev(c) - j);
        }
        if let (Some(mo), Some(cr)) = (s.moments.as_mut(), s.cross.as_mut()) {
            mo.index_axis_mut(ndarray::Axis(0), i).mapv_inplace(|x| pow2(x, ew - j));
            let nb = cr.dim().1;
            for a in 0..nb {
                for c in 0..p {
                    cr[(i, a, c)] = pow2(cr[(i, a, c)], ev(c) - j);
                }
            }
        }
        if j != 0 {
            s.log_scale[i] = F::of(s.log_scale[i].f64() + j as f64 * std::f64::consts::LN_2);
        }
    }
}

/// Design moments from working length units back to the caller's: a moment of degree g in
/// x − q times 2^(g·e). An error if they leave the floating range (the caller's coordinates
/// are then too large or small for moments of this degree in F).
fn moments_to_caller_units<F: Real>(s: &mut LocalSums<F>, lengths: Scale, d: usize, degree: Option<usize>) -> Result<()> {
    let (Some(mo), Some(cr)) = (s.moments.as_mut(), s.cross.as_mut()) else { return Ok(()) };
    let deg = basis_degrees(d, degree.unwrap_or(0));
    let e = lengths.exponent();
    let mut lost = false;
    for ((_, a, b), v) in mo.indexed_iter_mut() {
        let t = pow2(*v, e * (deg[a] + deg[b]) as i32);
        lost |= *v != F::zero() && (t == F::zero() || !t.is_finite());
        *v = t;
    }
    for ((_, a, _), v) in cr.indexed_iter_mut() {
        let t = pow2(*v, e * deg[a] as i32);
        lost |= *v != F::zero() && (t == F::zero() || !t.is_finite());
        *v = t;
    }
    if lost {
        return Err(LocalizationError::param(
            "X",
            "the design moments of these coordinates leave the floating-point range (coordinates near 1e±150 in float64, \
             1e±19 in float32); rescale the data (the local fits themselves are scale invariant)",
        ));
    }
    Ok(())
}

/// Degree of each local polynomial basis function: 0 for the constant, 1 for δ_k, 2 for δ_a δ_b.
pub(crate) fn basis_degrees(d: usize, degree: usize) -> Vec<usize> {
    let mut g = vec![0];
    if degree >= 1 {
        g.resize(1 + d, 1);
    }
    if degree >= 2 {
        g.resize(1 + d + d * (d + 1) / 2, 2);
    }
    g
}

/// The sums for inputs inside the floating range's comfortable middle. `prep`: the layouts
/// of these references kept by a `Reference`, which has checked them already.
fn sums_in_range<F: Real>(pb: &Problem<F>, kernel: &Kernel, bw: &Bandwidth<F>, opts: &Options, prep: Option<Prep<'_, F>>) -> Result<LocalSums<F>> {
    validate_request(pb, kernel, bw, opts, prep.is_none())?;
    match kernel {
        Kernel::Knn { k, profile } => knn_sums(pb, *k, *profile, opts, prep),
        Kernel::Dot { temperature } => brute::<F, DotExp>(pb, bw, opts, F::of(1.0 / temperature), prep),
        Kernel::Radial(profile) => {
            if let Some(sums) = far_field_sums(pb, *profile, bw, opts, prep)? {
                return Ok(sums);
            }
            if let Some(sums) = grid_sums(pb, *profile, bw, opts, prep)? {
                return Ok(sums);
            }
            if let Some(e) = expansion(pb, *profile, bw, opts) {
                let sums = e.sums(opts)?;
                if !opts.exclude_self {
                    return Ok(sums);
                }
                if let Some(hollow) = without_own_terms(sums, pb) {
                    return Ok(hollow);
                }
            }
            let mut owned = None;
            let wanted = match opts.neighborhood {
                Neighborhood::Brute | Neighborhood::Expansion => false,
                Neighborhood::Tree => profile.support().is_some(),
                Neighborhood::Auto => cheaper_tree(pb, *profile, bw, &opts.monitor, prep, &mut owned)?.is_some(),
            };
            let tree = if wanted {
                Some(tree_of(pb, prep, &opts.monitor, &mut owned)?)
            } else {
                // The tree `auto` built to probe the density is not kept through a brute force
                // that does not read it (its reordered copy of the samples is ~27 bytes per
                // sample in 2-D float64: 0.27 GB at 10^7).
                drop(owned.take());
                None
            };
            dispatch_profile!(*profile, P, {
                match tree {
                    Some(tree) => tree_sums::<F, P>(pb, tree, bw, opts, prep),
                    None => brute::<F, Radial<P>>(pb, bw, opts, F::one(), prep),
                }
            })
        }
    }
}

/// The kd-tree over the references: the prepared one, or the one in `owned` (built there if
/// absent).
fn tree_of<'a, F: Real>(pb: &Problem<F>, prep: Option<Prep<'a, F>>, mon: &Monitor, owned: &'a mut Option<KdTree<F>>) -> Result<&'a KdTree<F>> {
    match prep {
        Some(p) => p.tree(pb.x, mon),
        None => {
            let tree = match owned.take() {
                Some(probed) => probed,
                None => KdTree::build(pb.x, LEAF_SIZE, mon)?,
            };
            Ok(owned.insert(tree))
        }
    }
}

pub(crate) fn validate<F: Real>(pb: &Problem<F>, kernel: &Kernel, bw: &Bandwidth<F>, opts: &Options) -> Result<()> {
    validate_request(pb, kernel, bw, opts, true)
}

/// `validate`; without `references` the O(n) checks of the weights and per-sample bandwidths
/// are left out (a `Reference` made them when it was built).
fn validate_request<F: Real>(pb: &Problem<F>, kernel: &Kernel, bw: &Bandwidth<F>, opts: &Options, references: bool) -> Result<()> {
    let (n, d) = pb.x.dim();
    if n == 0 {
        return Err(LocalizationError::EmptyInput { name: "X" });
    }
    if !pb.queries.is_standard_layout() || !pb.x.is_standard_layout() {
        // Rows are read as slices; the Python layer always passes C-contiguous arrays.
        return Err(LocalizationError::param("X", "queries and samples must be C-contiguous (row-major)"));
    }
    if pb.queries.ncols() != d {
        return Err(LocalizationError::shape("X_query", format!("{d} features"), format!("{} features", pb.queries.ncols())));
    }
    if let Some(v) = &pb.values {
        if v.nrows() != n {
            return Err(LocalizationError::shape("values", format!("{n} rows"), format!("{} rows", v.nrows())));
        }
    }
    if references {
        Weights::optional(pb.weights, n)?;
    }
    // Only radial kernels have a bandwidth.
    let positive = |h: &F| !matches!(kernel, Kernel::Radial(_)) || checked::resolvable(*h);
    let ok = match bw {
        Bandwidth::Scalar(h) => positive(h),
        Bandwidth::PerQuery(h) => {
            if h.len() != pb.queries.nrows() {
                return Err(LocalizationError::shape("bandwidth", format!("{} per-query values", pb.queries.nrows()), h.len()));
            }
            h.iter().all(positive)
        }
        Bandwidth::PerReference(h) => {
            if h.len() != n {
                return Err(LocalizationError::shape("bandwidth", format!("{n} per-sample values"), h.len()));
            }
            !references || h.iter().all(positive)
        }
    };
    if !ok {
        return Err(LocalizationError::param(
            "bandwidth",
            "must be finite, strictly positive and not too small against the coordinates: 1/h² must be finite once they are \
             scaled to order one (h above ~1e-150 times the largest coordinate in float64, ~1e-18 in float32)",
        ));
    }
    if opts.exclude_self && pb.queries.nrows() != n {
        return Err(LocalizationError::param("exclude_self", "leave-one-out needs the queries to be the references"));
    }
    if let Some(deg) = opts.degree {
        if deg > 2 {
            return Err(LocalizationError::param("degree", format!("must be 0, 1 or 2, got {deg}")));
        }
        if matches!(kernel, Kernel::Dot { .. }) {
            return Err(LocalizationError::param("degree", "design moments need a distance kernel"));
        }
    }
    match kernel {
        Kernel::Dot { temperature } if !(*temperature > 0.0 && temperature.is_finite()) => {
            Err(LocalizationError::param("temperature", "must be finite and strictly positive"))
        }
        Kernel::Knn { k, .. } if *k == 0 || *k + opts.exclude_self as usize > n => Err(LocalizationError::param(
            "n_neighbors",
            format!("must be in [1, {}], got {k}", n - opts.exclude_self as usize),
        )),
        _ => Ok(()),
    }
}

/// The inner step of the brute-force path: from a tile of distances (or dot products) to
/// log-kernel values (`EXP`) or kernel values.
trait TileKernel: Copy + Send + Sync {
    const EXP: bool;
    const DOT: bool;
    /// Exactly zero beyond a finite distance.
    const COMPACT: bool;
    /// `t` holds squared distances (times 1/h² already) or dot products; `c` is 1/τ.
    fn eval<F: Real>(t: F, c: F) -> F;
}

#[derive(Copy, Clone)]
struct Radial<P>(P);
impl<P: ProfileFn> TileKernel for Radial<P> {
    const EXP: bool = P::PROFILE.is_exponential();
    const DOT: bool = false;
    const COMPACT: bool = P::PROFILE.support().is_some();
    #[inline(always)]
    fn eval<F: Real>(u2: F, _c: F) -> F {
        if Self::EXP {
            P::log_k(u2)
        } else {
            P::k(u2)
        }
    }
}

#[derive(Copy, Clone)]
struct DotExp;
impl TileKernel for DotExp {
    const EXP: bool = true;
    const DOT: bool = true;
    const COMPACT: bool = false;
    #[inline(always)]
    fn eval<F: Real>(t: F, c: F) -> F {
        t * c
    }
}

fn brute<F: Real, K: TileKernel>(pb: &Problem<F>, bw: &Bandwidth<F>, opts: &Options, c: F, prep: Option<Prep<'_, F>>) -> Result<LocalSums<F>> {
    let d = pb.x.ncols();
    // Bounding boxes prune in low dimensions only (and mean nothing to the dot kernel).
    let spatial = !K::DOT && d < GEMM_MIN_DIM;
    let gemm = d >= GEMM_MIN_DIM;
    let basis = opts.degree.map(|g| n_basis(d, g));
    // The product path reads centred rows (distance kernels) or the references themselves
    // (dot kernel); the feature-major tiles serve the direct differences and design moments.
    let (coords, centre) = (!gemm || basis.is_some(), gemm && !K::DOT);
    let owned;
    let tiles = match prep {
        Some(p) => p.tiles(pb, bw, spatial, coords, centre, &opts.monitor)?,
        None => {
            owned = Tiles::new(pb, bw, spatial, coords, centre, &opts.monitor)?;
            &owned
        }
    };
    let values = match prep {
        Some(p) => p.tile_values(tiles, pb, spatial)?,
        None => Cow::Owned(tiles.lay_out(pb.values)?),
    };
    let values = &*values;
    let qblock = if gemm { QUERY_BLOCK_GEMM } else { QUERY_BLOCK };
    let pricing = TilePricing::<F, K> { tiles, bw, c, kernel: std::marker::PhantomData };
    let blocks = Blocks::new(pb.queries, qblock, spatial, &opts.monitor, &pricing)?;
    let rows = (Rows::new("X_query", pb.queries)?, Rows::new("X", pb.x)?, Rows::new("X_query", blocks.queries.view())?);
    let m = pb.queries.nrows();
    let mut out = LocalSums::try_zeros(m, values.p, basis)?;
    opts.start_progress(m);
    in_batches(&mut out, blocks.len(), blocks.order(), |b| {
        opts.monitor.check()?;
        let part = Acc::finish(run_block::<F, K>(&Ctx { pb, tiles, values, blocks: &blocks, queries: rows.0, x: rows.1, blocked: rows.2, bw, opts, basis, c }, b), values.p, basis);
        opts.advance(blocks.range(b).len());
        part
    })?;
    // A block cut short by a stop is not a result.
    opts.monitor.check()?;
    Ok(out)
}

/// Work of one query block of the brute force, in pairs: its queries times the references in
/// the tiles within reach of its box (with the most permissive running maximum, a kernel
/// value of one), plus the per-block pass over every tile's box.
struct TilePricing<'a, F, K> {
    tiles: &'a Tiles<F>,
    bw: &'a Bandwidth<F>,
    c: F,
    kernel: std::marker::PhantomData<K>,
}

/// Cost of one tile's box test in a query block (gap, reach, visit list), in pairs.
const BOX_TEST_COST: f64 = 8.0;

impl<F: Real, K: TileKernel> BlockCost<F> for TilePricing<'_, F, K> {
    fn wide(&self, qbox: &[F]) -> bool {
        // The block's own diagonal beyond the kernel's reach at the smallest bandwidth.
        let d = qbox.len() / 2;
        let diag2 = (0..d).fold(F::zero(), |s, k| s + (qbox[d + k] - qbox[k]) * (qbox[d + k] - qbox[k]));
        let scale = match self.bw {
            Bandwidth::Scalar(h) => F::one() / (*h * *h),
            Bandwidth::PerQuery(h) => h.iter().fold(F::zero(), |s, &h| s.max(F::one() / (h * h))),
            Bandwidth::PerReference(_) => self.tiles.largest_scale(),
        };
        beyond_reach::<F, K>(diag2 * scale, self.c, 0.0)
    }

    fn cost(&self, qbox: &[F], rows: &[usize]) -> f64 {
        let scale = match self.bw {
            Bandwidth::Scalar(h) => F::one() / (*h * *h),
            Bandwidth::PerQuery(h) => rows.iter().fold(F::infinity(), |s, &g| s.min(F::one() / (h[g] * h[g]))),
            Bandwidth::PerReference(_) => F::one(),
        };
        let t = self.tiles;
        let n_tiles = t.n.div_ceil(TILE);
        let mut pairs = 0usize;
        t.visit_near(qbox, |g2, ts| beyond_reach::<F, K>(g2 * ts.unwrap_or(scale), self.c, 0.0), |i| pairs += (t.n - i * TILE).min(TILE));
        rows.len() as f64 * pairs as f64 + BOX_TEST_COST * n_tiles as f64
    }
}

/// Everything a query block needs.
struct Ctx<'a, 'p, F> {
    pb: &'a Problem<'p, F>,
    tiles: &'a Tiles<F>,
    /// The request's values in the tiles' order.
    values: &'a TileValues<F>,
    blocks: &'a Blocks<'p, F>,
    /// The rows of the queries, the references and the queries in block order.
    queries: Rows<'p, F>,
    x: Rows<'p, F>,
    blocked: Rows<'a, F>,
    bw: &'a Bandwidth<F>,
    opts: &'a Options,
    basis: Option<usize>,
    /// 1/τ of the dot kernel.
    c: F,
}

/// One query block against all tiles, with the fastest instruction set available. AVX-512
/// halves the instructions of the pair loop against AVX2 (16 f32 or 8 f64 lanes per
/// instruction): on AMD Zen 4, whose 512-bit units are 256 bits wide, the loop is bound by
/// instruction issue, and it runs 1.8× faster (docs/engine.md). Rust never contracts a·b + c
/// on its own, so the arithmetic, and the bits, are the same on both.
fn run_block<F: Real, K: TileKernel>(cx: &Ctx<'_, '_, F>, b: usize) -> Vec<Acc> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("avx512dq") && has!("avx512vl") && has!("avx2") && has!("fma") {
            // SAFETY: the CPU supports the features the function is compiled for.
            return unsafe { block_avx512::<F, K>(cx, b) };
        }
        if has!("avx2") && has!("fma") {
            // SAFETY: as above.
            return unsafe { block_avx2::<F, K>(cx, b) };
        }
    }
    block::<F, K, false>(cx, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn block_avx2<F: Real, K: TileKernel>(cx: &Ctx<'_, '_, F>, b: usize) -> Vec<Acc> {
    block::<F, K, true>(cx, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
unsafe fn block_avx512<F: Real, K: TileKernel>(cx: &Ctx<'_, '_, F>, b: usize) -> Vec<Acc> {
    block::<F, K, true>(cx, b)
}

/// True when a tile cannot contribute to a query: the kernel at the lower bound `u2` of
/// their scaled squared distances is exactly zero, or (exponential kernels) underflows to
/// zero against the query's running maximum `log_scale` with a margin of e.
#[inline(always)]
fn beyond_reach<F: Real, K: TileKernel>(u2: F, c: F, log_scale: f64) -> bool {
    if K::EXP {
        K::eval(u2, c).f64() - log_scale < F::EXP_UNDERFLOW - 1.0
    } else {
        K::COMPACT && K::eval(u2, c) == F::zero()
    }
}

/// True when the terms of an exponential kernel at scaled squared distances of at least `u2`
/// cannot change a query's sums beyond rounding: even every sample's weight at the kernel's
/// value at `u2` would add less than `NEGLIGIBLE` of the query's Σ k·w so far. Then all the
/// tiles skipped this way together change Σ k·w by a relative 2⁻⁹ ulp at most, and each Σ k·w·v
/// by as much of Σ k·w times the largest |v|: in f64 the skip fires some 40 e-folds below the
/// running maximum instead of at the underflow 708 below it (in f32 at 87).
///
/// With design moments (`power` = 2·degree, the largest power of the scaled distance u = ‖x − q‖/h
/// in a moment) each term is also bounded by its factor u^power: the bound is k(u²)·u^power,
/// which decreases in u beyond u² = power² for both exponential profiles (e^(−u²/2), e^(−u)), so
/// its value at the tile's gap bounds every term of the tile. The skipped tiles then change each
/// moment Σ k·w·δ^γ·v by at most 2⁻⁹ ulp of Σ k·w·h^|γ|·max|v| — the moments' own scale (a
/// window holding a few points has Σ k·w·δδᵀ ≈ Σ k·w·h²) — and the local fit by rounding.
#[inline(always)]
fn negligible<F: Real, K: TileKernel>(u2: F, c: F, acc: &Acc, total_weight: f64, power: usize) -> bool {
    let negligible = F::epsilon().f64() / 512.0;
    let moment = if power > 0 {
        let u2 = u2.f64();
        if !(u2 >= (power * power) as f64) {
            return false;
        }
        0.5 * power as f64 * u2.ln()
    } else {
        0.0
    };
    K::eval(u2, c).f64() + moment - acc.log_scale < (negligible * acc.den / total_weight).ln()
}

#[inline(always)]
fn block<F: Real, K: TileKernel, const FMA: bool>(cx: &Ctx<'_, '_, F>, b: usize) -> Vec<Acc> {
    let Ctx { pb, tiles, values, blocks, queries, x, blocked, bw, opts, basis, c } = *cx;
    let (d, p, n) = (tiles.d, values.p, tiles.n);
    let (b0, b1) = (blocks.range(b).start, blocks.range(b).end);
    let nb = b1 - b0;
    let mut accs: Vec<Acc> = (0..nb).map(|_| Acc::new(p, basis, K::EXP)).collect();
    let qb = blocks.queries.slice(s![b0..b1, ..]);
    let query_scale: Vec<F> = (b0..b1)
        .map(|i| match bw {
            Bandwidth::Scalar(h) => F::one() / (*h * *h),
            Bandwidth::PerQuery(h) => {
                let g = blocks.original(i);
                F::one() / (h[g] * h[g])
            }
            Bandwidth::PerReference(_) => F::one(),
        })
        .collect();
    let n_tiles = n.div_ceil(TILE);
    let qbox = blocks.box_of(b);
    // The largest power of ‖x − q‖/h in a design moment (`negligible`).
    let power = basis.map_or(0, |_| 2 * opts.degree.unwrap_or(0));
    // Every query of the block out of reach of tile t, given the running maxima and, for the
    // sums of exponential kernels, the sums so far (`negligible`).
    let out_of_reach = |t: usize, accs: &[Acc]| {
        qbox.is_some_and(|qbox| {
            let g2 = tiles.gap2(qbox, t);
            query_scale.iter().zip(accs).all(|(&s, a)| {
                let u2 = g2 * tiles.tile_scale(t, s);
                beyond_reach::<F, K>(u2, c, a.log_scale) || (K::EXP && negligible::<F, K>(u2, c, a, tiles.total_weight, power))
            })
        })
    };
    let mut visit: Vec<(f64, usize)> = match qbox {
        // Exponential kernels: all tiles, nearest first, so the running maximum is set early
        // and far tiles underflow against it.
        Some(qbox) if K::EXP => (0..n_tiles).map(|t| (tiles.gap2(qbox, t).f64(), t)).collect(),
        // Compact kernels: only the tiles within reach (`out_of_reach` of each, found through
        // the groups of tiles: a linear scan would cost blocks × tiles, 10¹⁰ box tests at 10⁷).
        Some(qbox) => {
            let mut near = Vec::new();
            let far = |g2: F, ts: Option<F>| query_scale.iter().zip(&accs).all(|(&s, a)| beyond_reach::<F, K>(g2 * ts.unwrap_or(s), c, a.log_scale));
            tiles.visit_near(qbox, far, |t| near.push((tiles.gap2(qbox, t).f64(), t)));
            near
        }
        None => (0..n_tiles).map(|t| (0.0, t)).collect(),
    };
    if K::EXP && qbox.is_some() {
        visit.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    }
    // With one h for all references the bound grows along `visit`: past the first tile out of
    // reach, all are.
    let monotone = tiles.inv_h2.is_none();
    let mut scratch = Scratch::<F>::new(nb, TILE);
    // Kernel weights of the whole block for one tile; with many value columns they meet the
    // values in one matrix product instead of one dot product per query and column.
    let mut kwb = Scratch::<F>::new(nb, TILE);
    let wide = p > WIDE_VALUES;
    let mut wide_out = Array2::<F>::zeros((if wide { nb } else { 0 }, p));
    // Local polynomial basis φ(x − q) over a tile, basis-major, and a scratch row.
    let mut phi = vec![F::zero(); basis.unwrap_or(0) * TILE];
    let mut wa = vec![F::zero(); TILE];
    let use_gemm = d >= GEMM_MIN_DIM;
    // Matrix-product path of a distance kernel: the block centred like the references, and
    // each query's h² (sample-point bandwidths: per reference, in `tiles.h2`).
    let (qc, qn) = match &tiles.centred {
        Some(_) => {
            // A block of at most QUERY_BLOCK_GEMM queries: a small, bounded copy.
            let mut qc = qb.to_owned();
            centre_rows(qc.view_mut(), &tiles.centre);
            let qn = row_sq_norms(qc.view());
            (Some(qc), qn)
        }
        None => (None, Vec::new()),
    };
    let query_h2: Vec<F> = if qc.is_some() { query_scale.iter().map(|&s| F::one() / s).collect() } else { Vec::new() };
    // The one-pass form of the direct path (`fused_tile`): radial exponential kernels with one
    // bandwidth per query in 1 to 3 features, and no zero weight (which must not set the maximum).
    let fuse = !use_gemm && K::EXP && !K::DOT && tiles.inv_h2.is_none() && !tiles.has_zero_weight && (1..=3).contains(&d);
    for &(_, t) in &visit {
        if opts.monitor.stopped() {
            break;
        }
        if K::EXP && out_of_reach(t, &accs) {
            if monotone {
                break;
            }
            continue;
        }
        let t0 = t * TILE;
        let len = (n - t0).min(TILE);
        let coords = if tiles.coords.is_empty() { &[][..] } else { &tiles.coords[t * d * TILE..(t + 1) * d * TILE] };
        if use_gemm {
            match (&qc, &tiles.centred) {
                (Some(qc), Some(xc)) => {
                    let xn = &tiles.norms[t0..t0 + len];
                    crate::distance::sq_dist_tile_gemm(qc.view(), &qn, xc.slice(s![t0..t0 + len, ..]), xn, scratch.view_mut(len));
                    let h2 = match &tiles.h2 {
                        Some(h2) => KernelScale::PerColumn(&h2[t0..t0 + len]),
                        None => KernelScale::PerRow(&query_h2),
                    };
                    refine_product(&mut scratch, len, &qn, xn, h2, |i, j| {
                        sq_euclidean_wide(queries.row(blocks.original(b0 + i)), x.row(t0 + j))
                    });
                }
                _ => general_mat_mul(F::one(), &qb, &pb.x.slice(s![t0..t0 + len, ..]).t(), F::zero(), &mut scratch.view_mut(len)),
            }
        }
        let w = &tiles.weights[t0..t0 + len];
        let vals = &values.values[t * p * TILE..(t + 1) * p * TILE];
        for (i, acc) in accs.iter_mut().enumerate() {
            let gi = blocks.original(b0 + i);
            let kw = kwb.row_mut(i, len);
            let own = if opts.exclude_self { Some(tiles.position(gi)).filter(|&q| q >= t0 && q < t0 + len).map(|q| q - t0) } else { None };
            let first = if p > 0 && !wide { Some(&vals[..len]) } else { None };
            // Past the query's first tile (which sets its running maximum) and away from its own
            // term, distances, kernel and weights in one pass against the running maximum. A tile
            // that raises the maximum is redone below as before, so every tile gives the bits
            // of the separate passes.
            let fused = match (fuse && own.is_none() && acc.log_scale > f64::NEG_INFINITY, d) {
                (true, 1) => Some(fused_tile::<F, K, 1, FMA>(blocked.row(b0 + i), coords, query_scale[i], c, w, first, acc.log_scale, kw)),
                (true, 2) => Some(fused_tile::<F, K, 2, FMA>(blocked.row(b0 + i), coords, query_scale[i], c, w, first, acc.log_scale, kw)),
                (true, 3) => Some(fused_tile::<F, K, 3, FMA>(blocked.row(b0 + i), coords, query_scale[i], c, w, first, acc.log_scale, kw)),
                _ => None,
            }
            .filter(|&(_, _, tmax)| tmax <= acc.log_scale);
            let (s0, s1) = match fused {
                Some((_, _, tmax)) if tmax - acc.log_scale < F::EXP_UNDERFLOW && basis.is_none() => {
                    // The skip of the separate passes below.
                    kw.iter_mut().for_each(|v| *v = F::zero());
                    continue;
                }
                Some((s0, s1, _)) => (s0, s1),
                None => {
            if !use_gemm {
                fill_direct::<F, K>(blocked.row(b0 + i), coords, scratch.row_mut(i, len), len);
            }
            let row = scratch.row(i, len);
            match &tiles.inv_h2 {
                Some(ih) if !K::DOT => {
                    let ih = &ih[t0..t0 + len];
                    for j in 0..len {
                        kw[j] = K::eval(row[j] * ih[j], c);
                    }
                }
                _ => {
                    let s = if K::DOT { F::one() } else { query_scale[i] };
                    for j in 0..len {
                        kw[j] = K::eval(row[j] * s, c);
                    }
                }
            }
            if K::EXP {
                if let Some(o) = own {
                    kw[o] = F::neg_infinity();
                }
                if tiles.has_zero_weight {
                    // A zero-weight sample must not set the running max (it would underflow the rest).
                    for j in 0..len {
                        if w[j] == F::zero() {
                            kw[j] = F::neg_infinity();
                        }
                    }
                }
                let tmax = lanes::max(kw).f64();
                // Exact skip: every term of this tile underflows to zero relative to the running max.
                if tmax == f64::NEG_INFINITY || (tmax - acc.log_scale < F::EXP_UNDERFLOW && basis.is_none()) {
                    kw.iter_mut().for_each(|v| *v = F::zero());
                    continue;
                }
                acc.raise_scale(tmax);
                lanes::weigh::<F, true, FMA>(kw, w, first, F::of(acc.log_scale))
            } else {
                if let Some(o) = own {
                    kw[o] = F::zero();
                }
                lanes::weigh::<F, false, FMA>(kw, w, first, F::zero())
            }
                }
            };
            acc.den += s0.f64();
            if p > 0 && !wide {
                acc.num[0] += s1.f64();
                for cc in 1..p {
                    acc.num[cc] += lanes::dot::<F, FMA>(kw, &vals[cc * TILE..cc * TILE + len]).f64();
                }
            }
            if let Some(nbasis) = basis {
                let q = blocked.row(b0 + i);
                let v = (p == 1).then(|| &vals[..len]);
                // Degree 0 and 1 with at most one value column in one pass (`add_tile_moments_in_lanes`).
                match (opts.degree.unwrap_or(0), d, p <= 1) {
                    (0, _, true) => acc.add_tile_moments_in_lanes::<F, 0, 1, FMA>(q, coords, TILE, kw, v),
                    (1, 1, true) => acc.add_tile_moments_in_lanes::<F, 1, 2, FMA>(q, coords, TILE, kw, v),
                    (1, 2, true) => acc.add_tile_moments_in_lanes::<F, 2, 3, FMA>(q, coords, TILE, kw, v),
                    (1, 3, true) => acc.add_tile_moments_in_lanes::<F, 3, 4, FMA>(q, coords, TILE, kw, v),
                    _ => {
                        fill_basis(&mut phi, coords, q, len, opts.degree.unwrap_or(0));
                        acc.add_tile_moments::<F, FMA>(&phi, kw, vals, nbasis, len, TILE, &mut wa);
                    }
                }
            }
        }
        if let (true, Some(v)) = (wide, values.rows(pb.values, t0, len)) {
            general_mat_mul(F::one(), &kwb.view(len), &v, F::zero(), &mut wide_out);
            for (acc, row) in accs.iter_mut().zip(wide_out.rows()) {
                for (a, &b) in acc.num.iter_mut().zip(row) {
                    *a += b.f64();
                }
            }
        }
    }
    accs
}

/// `lanes::weigh_direct` of one query against one tile with the shift `log_scale` (a value of
/// F): (Σ k·w, Σ k·w·v, the tile's largest log k).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn fused_tile<F: Real, K: TileKernel, const D: usize, const FMA: bool>(
    q: &[F], coords: &[F], scale: F, c: F, w: &[F], v: Option<&[F]>, log_scale: f64, kw: &mut [F],
) -> (F, F, f64) {
    let shift = F::of(log_scale);
    // Inlined into `block`, the lane loop kept its accumulators in memory (a masked store of
    // the running maximum to the stack at every step: a quarter of the loop's time) and
    // reloaded its constants; compiled on its own for the CPU's features it keeps them in
    // registers, as `expansion::power_sums`' kernels do. Same operations, same bits.
    #[cfg(target_arch = "x86_64")]
    if FMA {
        #[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
        #[inline(never)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn wide<F: Real, K: TileKernel, const D: usize>(
            q: &[F], coords: &[F], scale: F, c: F, w: &[F], v: Option<&[F]>, shift: F, kw: &mut [F],
        ) -> (F, F, F) {
            lanes::weigh_direct::<F, D, true>(q, coords, TILE, scale, |u2| K::eval(u2, c), w, v, shift, kw)
        }
        #[target_feature(enable = "avx2,fma")]
        #[inline(never)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn narrow<F: Real, K: TileKernel, const D: usize>(
            q: &[F], coords: &[F], scale: F, c: F, w: &[F], v: Option<&[F]>, shift: F, kw: &mut [F],
        ) -> (F, F, F) {
            lanes::weigh_direct::<F, D, true>(q, coords, TILE, scale, |u2| K::eval(u2, c), w, v, shift, kw)
        }
        use std::arch::is_x86_feature_detected as has;
        // SAFETY: `FMA` is set only in `block_avx2`/`block_avx512`, after AVX2 and FMA were
        // detected; the AVX-512 copy runs only where its features are detected too.
        let (s0, s1, tmax) = unsafe {
            if has!("avx512f") && has!("avx512dq") && has!("avx512vl") {
                wide::<F, K, D>(q, coords, scale, c, w, v, shift, kw)
            } else {
                narrow::<F, K, D>(q, coords, scale, c, w, v, shift, kw)
            }
        };
        return (s0, s1, tmax.f64());
    }
    let (s0, s1, tmax) = lanes::weigh_direct::<F, D, FMA>(q, coords, TILE, scale, |u2| K::eval(u2, c), w, v, shift, kw);
    (s0, s1, tmax.f64())
}

/// φ(x_j − q) for every reference of a tile: rows 1, δ_k, then δ_a δ_b (a ≤ b), each TILE long.
#[inline(always)]
fn fill_basis<F: Real>(phi: &mut [F], coords: &[F], q: &[F], len: usize, degree: usize) {
    let d = q.len();
    phi[..len].iter_mut().for_each(|v| *v = F::one());
    if degree == 0 {
        return;
    }
    for k in 0..d {
        let (xs, out) = (&coords[k * TILE..k * TILE + len], &mut phi[(1 + k) * TILE..(1 + k) * TILE + len]);
        for j in 0..len {
            out[j] = xs[j] - q[k];
        }
    }
    if degree >= 2 {
        let mut at = 1 + d;
        for a in 0..d {
            for b in a..d {
                let (lo, hi) = phi.split_at_mut(at * TILE);
                let (da, db) = (&lo[(1 + a) * TILE..(1 + a) * TILE + len], &lo[(1 + b) * TILE..(1 + b) * TILE + len]);
                for j in 0..len {
                    hi[j] = da[j] * db[j];
                }
                at += 1;
            }
        }
    }
}

/// Squared distances (or dot products) of one query against one tile, feature-major.
#[inline(always)]
fn fill_direct<F: Real, K: TileKernel>(q: &[F], coords: &[F], out: &mut [F], len: usize) {
    let out = &mut out[..len];
    out.iter_mut().for_each(|v| *v = F::zero());
    for (k, &qk) in q.iter().enumerate() {
        let xs = &coords[k * TILE..k * TILE + len];
        if K::DOT {
            for j in 0..len {
                out[j] = out[j] + qk * xs[j];
            }
        } else {
            for j in 0..len {
                let t = qk - xs[j];
                out[j] = out[j] + t * t;
            }
        }
    }
}

/// Accept an entry of the product form when its rounding bound c·(‖q̂‖² + ‖x̂‖²) is within
/// `KERNEL_SLACK` times c·max(d², h²): then its error is at most that factor times the bound
/// of direct differences, at the scale the kernel resolves. Recompute the others exactly.
/// (On Fashion-MNIST images, 1 entry in 7,000 is recomputed; at 8, 1 in 750.)
const KERNEL_SLACK: f64 = 16.0;

/// Check every entry of a tile of product-form squared distances (the first `len` columns of
/// `tile`, one row per query; queries with centred squared norms `qn`, references `xn`)
/// against its rounding bound, relative to the kernel's scale h²: `h2` holds it per query row (`PerRow`) or per reference (`PerColumn`).
/// Entries that fail are replaced by `exact(i, j)` (direct differences).
#[inline(always)]
fn refine_product<F: Real>(tile: &mut Scratch<F>, len: usize, qn: &[F], xn: &[F], h2: KernelScale<'_, F>, exact: impl Fn(usize, usize) -> F) {
    let slack = F::of(KERNEL_SLACK);
    let xn_max = lanes::max(xn);
    let h2_min = match h2 {
        KernelScale::PerColumn(c) => c.iter().fold(F::infinity(), |m, &v| if v < m { v } else { m }),
        KernelScale::PerRow(_) => F::zero(),
    };
    // How far an entry's bound exceeds what is accepted (positive: recompute).
    let excess = |a: F, v: F, b: F, t: F| a + b - slack * if v > t { v } else { t };
    for (i, &a) in qn.iter().enumerate() {
        let row = tile.row_mut(i, len);
        let t_row = match h2 {
            KernelScale::PerRow(r) => r[i],
            KernelScale::PerColumn(_) => h2_min,
        };
        // Usually the whole row passes at once: the bound is small against h².
        if a + xn_max <= slack * t_row {
            continue;
        }
        // Else one read-only pass for the largest excess (vectorised), and a second one only
        // where some entry needs it.
        let worst = match h2 {
            KernelScale::PerRow(r) => lanes::max_map(row, xn, |v, b| excess(a, v, b, r[i])),
            // (An upper bound: the per-entry test below decides.)
            KernelScale::PerColumn(c) => lanes::max_map(row, c, |v, t| excess(a, v, xn_max, t)),
        };
        if !(worst > F::zero()) {
            continue;
        }
        for (j, v) in row.iter_mut().enumerate() {
            let t = match h2 {
                KernelScale::PerRow(r) => r[i],
                KernelScale::PerColumn(c) => c[j],
            };
            if excess(a, *v, xn[j], t) > F::zero() {
                *v = exact(i, j);
            }
        }
    }
}

/// The kernel's squared bandwidth for the entries of a tile.
#[derive(Copy, Clone)]
enum KernelScale<'a, F> {
    PerRow(&'a [F]),
    PerColumn(&'a [F]),
}

/// The kd-tree over the samples if it would be faster than the tiled brute force. The tree
/// visits the points within the support one by one; the brute force evaluates whole tiles
/// (vectorised, several times cheaper per pair) but every point of each tile within reach of a
/// query block.
///
/// Below `FEW_QUERIES` a tree built for the call never pays for its construction, but the one
/// kept by a prepared reference costs nothing more: there the brute force is priced exactly,
/// from the blocks it would run (scattered queries reach many more tiles together than each
/// alone), and the tree is taken when its visits cost less.
fn cheaper_tree<'a, F: Real>(
    pb: &Problem<F>, profile: Profile, bw: &Bandwidth<F>, mon: &Monitor, prep: Option<Prep<'a, F>>, owned: &'a mut Option<KdTree<F>>,
) -> Result<Option<&'a KdTree<F>>> {
    let (n, d) = pb.x.dim();
    let m = pb.queries.nrows();
    let few = m < FEW_QUERIES;
    if profile.support().is_none() || d >= GEMM_MIN_DIM || n < 512 || m == 0 || (few && prep.is_none()) {
        return Ok(None);
    }
    let tree = tree_of(pb, prep, mon, owned)?;
    let probes = 32.min(m);
    let queries = Rows::new("X_query", pb.queries)?;
    let mut visited = 0usize;
    for s in 0..probes {
        let i = s * m / probes;
        let r = support_radius(bw, i);
        tree.visit_within(queries.row(i), r * r, &mut |_, _| visited += 1);
    }
    let v = (visited as f64 / probes as f64).max(1.0);
    let brute = match prep {
        Some(p) if few => {
            // The layout `brute` reads in low dimensions.
            let tiles = p.tiles(pb, bw, true, true, false, mon)?;
            dispatch_profile!(profile, P, brute_work::<F, Radial<P>>(pb.queries, tiles, bw, mon)?) / m as f64
        }
        _ => {
            // Brute-force pairs per query, modelling the points as uniform at the density the
            // probes saw: a query block and a tile are cubes holding their points, and a tile
            // is visited when it comes within h of the block. Sides in units of h (the support
            // holds v points).
            let side = |points: usize| 2.0 * (points as f64 / v).powf(1.0 / d as f64);
            let (tile, blk) = (side(TILE), side(QUERY_BLOCK));
            (TILE as f64 * ((tile + blk + 2.0) / tile).powi(d as i32)).min(n as f64)
        }
    };
    Ok((brute > TREE_PAIR_COST * v).then_some(tree))
}

/// Below this many queries `auto` builds no kd-tree for a call (a prepared reference's is
/// used when it is cheaper).
const FEW_QUERIES: usize = 16;

/// The work of the low-dimensional brute force on `queries` (`TilePricing` of its blocks).
fn brute_work<F: Real, K: TileKernel>(queries: ArrayView2<F>, tiles: &Tiles<F>, bw: &Bandwidth<F>, mon: &Monitor) -> Result<f64> {
    let pricing = TilePricing::<F, K> { tiles, bw, c: F::one(), kernel: std::marker::PhantomData };
    let blocks = Blocks::new(queries, QUERY_BLOCK, true, mon, &pricing)?;
    Ok((0..blocks.len()).map(|b| pricing.cost(blocks.box_of(b).unwrap_or(&[]), blocks.rows(b))).sum())
}

/// The Gaussian's series expansion, when it applies (one scalar bandwidth, low dimension) and
/// is asked for or modelled cheaper than the direct pair loop. Leave-one-out sums are the full
/// ones minus each query's own term (`without_own_terms`).
fn expansion<F: Real>(pb: &Problem<F>, profile: Profile, bw: &Bandwidth<F>, opts: &Options) -> Option<expansion::Expansion> {
    let h = match bw {
        Bandwidth::Scalar(h) => *h,
        _ => return None,
    };
    let (n, d) = pb.x.dim();
    let m = pb.queries.nrows();
    if profile != Profile::Gaussian || d > expansion::MAX_DIM || m == 0 {
        return None;
    }
    match opts.neighborhood {
        Neighborhood::Expansion => expansion::Expansion::new(pb, h, opts, false),
        Neighborhood::Auto if n >= 64 && m >= FEW_SERIES_QUERIES => expansion::Expansion::new(pb, h, opts, true),
        _ => None,
    }
}

/// The Gaussian interpolated on a Chebyshev grid (`chebyshev`), when it applies (one scalar
/// bandwidth, 2–3 features) and is asked for or modelled cheaper than the
/// direct pair loop. The queries its bound does not cover are summed exactly; leave-one-out
/// sums are the full ones minus each query's own term (`without_own_terms`).
fn grid_sums<F: Real>(pb: &Problem<F>, profile: Profile, bw: &Bandwidth<F>, opts: &Options, prep: Option<Prep<'_, F>>) -> Result<Option<LocalSums<F>>> {
    let Bandwidth::Scalar(h) = bw else { return Ok(None) };
    let (n, m) = (pb.x.nrows(), pb.queries.nrows());
    let asked = match opts.neighborhood {
        Neighborhood::Expansion => true,
        Neighborhood::Auto if n >= 64 && m >= FEW_SERIES_QUERIES => false,
        _ => return Ok(None),
    };
    // One feature stays with the two-sided series, which is cheaper there (measured 2×).
    if profile != Profile::Gaussian || m == 0 || pb.x.ncols() < 2 {
        return Ok(None);
    }
    let Some(grid) = chebyshev::Grid::plan(pb, h.f64(), opts.degree, opts.series_tolerance.max(SERIES_TOLERANCE)) else { return Ok(None) };
    if !asked && grid.cost >= grid.direct {
        return Ok(None);
    }
    opts.start_progress(m);
    let (mut sums, missed) = grid.sums(pb, opts)?;
    if !missed.is_empty() {
        let q = pb.queries.select(ndarray::Axis(0), &missed);
        let exact_opts = Options { exclude_self: false, progress: false, ..opts.clone() };
        let exact = brute::<F, Radial<crate::kernel::Gaussian>>(&Problem { queries: q.view(), ..*pb }, bw, &exact_opts, F::one(), prep)?;
        for (r, &i) in missed.iter().enumerate() {
            sums.den[i] = exact.den[r];
            sums.log_scale[i] = exact.log_scale[r];
            sums.num.row_mut(i).assign(&exact.num.row(r));
            if let (Some(a), Some(b)) = (sums.moments.as_mut(), &exact.moments) {
                a.index_axis_mut(ndarray::Axis(0), i).assign(&b.index_axis(ndarray::Axis(0), r));
            }
            if let (Some(a), Some(b)) = (sums.cross.as_mut(), &exact.cross) {
                a.index_axis_mut(ndarray::Axis(0), i).assign(&b.index_axis(ndarray::Axis(0), r));
            }
        }
    }
    opts.advance(m);
    if !opts.exclude_self {
        return Ok(Some(sums));
    }
    Ok(without_own_terms(sums, pb))
}

/// Few queries of the Gaussian against a prepared reference whose tiles they would mostly
/// all reach: the sums from the reference's far-field Hermite moments (`hermite`, built once
/// per bandwidth), within the series expansion's error bound; queries for which that bound
/// cannot be met are summed exactly. None where it does not apply.
fn far_field_sums<F: Real>(pb: &Problem<F>, profile: Profile, bw: &Bandwidth<F>, opts: &Options, prep: Option<Prep<'_, F>>) -> Result<Option<LocalSums<F>>> {
    let (Some(prep), Bandwidth::Scalar(h)) = (prep, bw) else { return Ok(None) };
    let (n, d) = pb.x.dim();
    let m = pb.queries.nrows();
    let applies = profile == Profile::Gaussian && d <= expansion::MAX_DIM && m > 0 && m < FEW_SERIES_QUERIES && n >= FAR_FIELD_MIN_PAIRS;
    if !applies || opts.neighborhood != Neighborhood::Auto || opts.degree.is_some() || opts.exclude_self {
        return Ok(None);
    }
    // Worth it when the brute force's blocks reach most of a large reference.
    let tiles = prep.tiles(pb, bw, true, true, false, &opts.monitor)?;
    if brute_work::<F, Radial<crate::kernel::Gaussian>>(pb.queries, tiles, bw, &opts.monitor)? < (m * FAR_FIELD_MIN_PAIRS) as f64 {
        return Ok(None);
    }
    let Some(far) = prep.far_field(pb, *h, &opts.monitor)? else { return Ok(None) };
    let (mut sums, missed) = far.sums(pb.queries, &opts.monitor)?;
    if !missed.is_empty() {
        // Queries far from every sample: summed exactly.
        let q = pb.queries.select(ndarray::Axis(0), &missed);
        let exact = brute::<F, Radial<crate::kernel::Gaussian>>(&Problem { queries: q.view(), ..*pb }, bw, opts, F::one(), Some(prep))?;
        for (r, &i) in missed.iter().enumerate() {
            sums.den[i] = exact.den[r];
            sums.log_scale[i] = exact.log_scale[r];
            sums.num.row_mut(i).assign(&exact.num.row(r));
        }
    }
    Ok(Some(sums))
}

/// Below this many queries `auto` never takes the two-sided series (`expansion`), whose cost
/// per query cluster is O(n).
const FEW_SERIES_QUERIES: usize = 64;

/// Pairs per query the brute force must reach before a far field is used (and the smallest
/// reference that gets one).
const FAR_FIELD_MIN_PAIRS: usize = 1 << 17;

/// Largest share of a query's total weight its own term may carry for the leave-one-out sums
/// to be taken from the full Gaussian series minus that term: the subtraction then loses at
/// most log2(64) = 6 bits to cancellation (the series' error relative to Σ|w|K, 1e-14 without
/// design moments, grows at most 64-fold). Narrower bandwidths go to the direct path, which
/// skips nearly every tile there anyway.
const SERIES_SELF_SHARE: f64 = 63.0 / 64.0;

/// The hollow sums from the full ones: query i is reference i, its own term has kernel value
/// 1, weight w_i and zero offset (so only the constant moments hold it). None when some
/// query's own term is too large a share of its total (`SERIES_SELF_SHARE`).
fn without_own_terms<F: Real>(mut s: LocalSums<F>, pb: &Problem<F>) -> Option<LocalSums<F>> {
    for i in 0..s.den.len() {
        let own = pb.weights.map_or(F::one(), |w| w[i]) * F::of((-s.log_scale[i].f64()).exp());
        if !(own.f64() <= SERIES_SELF_SHARE * s.den[i].f64()) {
            return None;
        }
        s.den[i] = s.den[i] - own;
        if let Some(mo) = s.moments.as_mut() {
            mo[(i, 0, 0)] = mo[(i, 0, 0)] - own;
        }
        if let Some(v) = pb.values {
            for c in 0..v.ncols() {
                let ov = own * v[(i, c)];
                s.num[(i, c)] = s.num[(i, c)] - ov;
                if let Some(cr) = s.cross.as_mut() {
                    cr[(i, 0, c)] = cr[(i, 0, c)] - ov;
                }
            }
        }
    }
    Some(s)
}

/// Cost of one pair visited through the kd-tree in units of one pair of the tiled brute force.
/// Fitted on uniform data, n = 2·10³ to 10⁶, d = 1 to 8: the brute force won up to a modelled
/// ratio of 7.4, the tree from 11.9 on.
const TREE_PAIR_COST: f64 = 10.0;

fn support_radius<F: Real>(bw: &Bandwidth<F>, i: usize) -> F {
    match bw {
        Bandwidth::Scalar(h) => *h,
        Bandwidth::PerQuery(h) => h[i],
        Bandwidth::PerReference(h) => h.iter().fold(F::zero(), |a, &b| a.max(b)),
    }
}

/// Compact kernels: visit only the references inside each query's support.
fn tree_sums<F: Real, P: ProfileFn>(pb: &Problem<F>, tree: &KdTree<F>, bw: &Bandwidth<F>, opts: &Options, prep: Option<Prep<'_, F>>) -> Result<LocalSums<F>> {
    let order = tree.order();
    let p = pb.values.as_ref().map_or(0, |v| v.ncols());
    // Tree-ordered copies so the visit streams memory.
    let build = || TreeOrdered {
        weights: order.iter().map(|&i| pb.weights.as_ref().map_or(F::one(), |w| w[i])).collect(),
        inv_h2: match bw {
            Bandwidth::PerReference(h) => Some(order.iter().map(|&i| F::one() / (h[i] * h[i])).collect()),
            _ => None,
        },
    };
    let build_values = || match &pb.values {
        Some(v) => memory::try_collect("values", &[order.len(), v.ncols()], order.iter().flat_map(|&i| v.row(i).into_iter().copied())),
        None => Ok(Vec::new()),
    };
    let owned;
    let (TreeOrdered { weights: w, inv_h2 }, vals) = match prep {
        Some(p) => (p.tree_order(build), p.tree_values(build_values)?),
        None => {
            owned = build();
            (&owned, Cow::Owned(build_values()?))
        }
    };
    let basis = opts.degree.map(|g| n_basis(pb.x.ncols(), g));
    let degree = opts.degree.unwrap_or(0);
    let queries = Rows::new("X_query", pb.queries)?;
    per_query(pb.queries.nrows(), p, basis, opts, |i| {
        let q = queries.row(i);
        let mut acc = Acc::new(p, basis, false);
        let r = support_radius(bw, i);
        let scale = F::one() / (r * r);
        let mut delta = vec![F::zero(); q.len()];
        tree.visit_within(q, r * r, &mut |pos, d2| {
            let u2 = match &inv_h2 {
                Some(ih) => d2 * ih[pos],
                None => d2 * scale,
            };
            let kw = P::k(u2) * w[pos];
            if kw == F::zero() || (opts.exclude_self && order[pos] == i) {
                return;
            }
            let v = &vals[pos * p..(pos + 1) * p];
            acc.den += kw.f64();
            for (a, &b) in acc.num.iter_mut().zip(v) {
                *a += (kw * b).f64();
            }
            if basis.is_some() {
                let x = pb.x.row(order[pos]);
                for (k, dk) in delta.iter_mut().enumerate() {
                    *dk = x[k] - q[k];
                }
                acc.add_moments(kw.f64(), &delta, v, degree);
            }
        });
        acc
    })
}

/// The kNN kernel through the neighbour index.
fn knn_sums<F: Real>(pb: &Problem<F>, k: usize, profile: Option<Profile>, opts: &Options, prep: Option<Prep<'_, F>>) -> Result<LocalSums<F>> {
    let owned;
    let index = match prep {
        Some(p) => p.index(pb.x, &opts.monitor)?,
        None => {
            owned = Index::build(pb.x, Algorithm::Auto, LEAF_SIZE, &opts.monitor)?;
            &owned
        }
    };
    let extra = opts.exclude_self as usize;
    let nb = index.knn(pb.queries, k + extra, &opts.monitor)?;
    let p = pb.values.as_ref().map_or(0, |v| v.ncols());
    let basis = opts.degree.map(|g| n_basis(pb.x.ncols(), g));
    let degree = opts.degree.unwrap_or(0);
    per_query(pb.queries.nrows(), p, basis, opts, |i| {
        let q = pb.queries.row(i);
        let mut acc = Acc::new(p, basis, false);
        // Leave-one-out drops the query's own index (wherever ties put it); when more than k
        // duplicates pushed it out of the list, the first one, as scikit-learn's kneighbors(None).
        let (ind, dist) = nb.row(i);
        let mut pairs: Vec<(usize, F)> = ind.iter().copied().zip(dist.iter().copied()).collect();
        if extra == 1 {
            let at = pairs.iter().position(|&(j, _)| j == i).unwrap_or(0);
            pairs.remove(at);
        }
        let hk = pairs.last().map_or(F::zero(), |t| t.1);
        let mut delta = vec![F::zero(); q.len()];
        let mut vj = vec![F::zero(); p];
        for &(j, dist) in &pairs {
            let kern = match profile {
                None => F::one(),
                Some(_) if hk == F::zero() => F::one(),
                Some(pr) => dispatch_profile!(pr, P, P::k((dist / hk) * (dist / hk))),
            };
            let kw = kern * pb.weights.as_ref().map_or(F::one(), |w| w[j]);
            if kw == F::zero() {
                continue;
            }
            acc.den += kw.f64();
            if let Some(v) = &pb.values {
                for c in 0..p {
                    vj[c] = v[(j, c)];
                    acc.num[c] += (kw * vj[c]).f64();
                }
            }
            if basis.is_some() {
                for kk in 0..q.len() {
                    delta[kk] = pb.x[(j, kk)] - q[kk];
                }
                acc.add_moments(kw.f64(), &delta, &vj, degree);
            }
        }
        acc
    })
}

#[cfg(test)]
mod tests;

/// Exponentials per second on the calling thread through the engine's vectorised `exp` in its
/// cheapest loop (`lanes::exp_sum` over a buffer that stays in L1: one exp, one store and one add
/// each), with the instruction set the pair loop gets: the ceiling against which the pair loop of
/// an exponential kernel is measured (`benches/bench_engine.py`).
pub fn exp_throughput<F: Real>(count: usize) -> f64 {
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn pass_avx2<F: Real>(x: &mut [F]) -> F {
        lanes::exp_sum::<F, true>(x, F::one())
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
    unsafe fn pass_avx512<F: Real>(x: &mut [F]) -> F {
        lanes::exp_sum::<F, true>(x, F::one())
    }
    let pass = |x: &mut [F]| -> F {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512dq") && has!("avx512vl") && has!("avx2") && has!("fma") {
                // SAFETY: the CPU supports the features the function is compiled for.
                return unsafe { pass_avx512(x) };
            }
            if has!("avx2") && has!("fma") {
                // SAFETY: as above.
                return unsafe { pass_avx2(x) };
            }
        }
        lanes::exp_sum::<F, false>(x, F::one())
    };
    // exp(x − 1) maps [0, 1] into itself: the values stay ordinary over any number of passes.
    let mut x: Vec<F> = (0..2048).map(|i| F::of(i as f64 / 2048.0)).collect();
    let passes = count.div_ceil(x.len()).max(1);
    let start = std::time::Instant::now();
    let mut total = F::zero();
    for _ in 0..passes {
        total = total + pass(std::hint::black_box(&mut x));
    }
    std::hint::black_box(total);
    (passes * x.len()) as f64 / start.elapsed().as_secs_f64().max(1e-9)
}

/// The exact power-of-two rescaling under which a kernel is evaluated: distance kernels are
/// invariant to scaling coordinates and bandwidths alike, the dot kernel is not.
pub(super) fn lengths_of<F: Real>(kernel: &Kernel, q: ArrayView2<F>, x: ArrayView2<F>, bw: &Bandwidth<F>) -> Scale {
    lengths_for(kernel, Scale::array_max_abs(q).max(Scale::array_max_abs(x)), bw)
}

/// `lengths_of` from the largest |coordinate| (kept by a prepared reference). A radial
/// kernel's bandwidth is a length too: it bounds how far tiny coordinates are scaled up.
pub(super) fn lengths_for<F: Real>(kernel: &Kernel, max_abs: f64, bw: &Bandwidth<F>) -> Scale {
    match kernel {
        Kernel::Dot { .. } => Scale::ONE,
        Kernel::Radial(_) => Scale::for_lengths::<F>(max_abs, bw.largest()),
        _ => Scale::for_max::<F>(max_abs),
    }
}

/// `validate` on the problem as the computation sees it, in the working units of its exact
/// rescaling (a bandwidth is too small only against the coordinates, not in absolute terms):
/// for callers that check before they allocate.
pub(crate) fn validate_in_range<F: Real>(pb: &Problem<F>, kernel: &Kernel, bw: &Bandwidth<F>, opts: &Options) -> Result<()> {
    let lengths = lengths_of(kernel, pb.queries, pb.x, bw);
    if lengths.is_one() {
        return validate(pb, kernel, bw, opts);
    }
    let (q, x) = (lengths.down_array(pb.queries)?, lengths.down_array(pb.x)?);
    validate(&Problem { queries: q.view(), x: x.view(), ..*pb }, kernel, &bw.scaled(lengths), opts)
}

//! The two O(n) halves of the binned kernel sum (`algorithm="binned"`): linear binning of
//! weighted points onto a regular grid, and multilinear interpolation of grid values back to
//! arbitrary points. Between them the caller convolves the binned grid with the sampled kernel
//! by FFT; per sample, bin → convolve → interpolate is exactly the multilinear interpolation of
//! K(y − z) on the product grid, which is what the error bound rests on (see the Python module
//! `localization._binned` and the KDE guide).
//!
//! Binning is one sequential pass (every grid node is a sum in point order, so the grid does not
//! depend on the thread count); interpolation is a gather, parallel over blocks of queries.

use crate::error::{LocalizationError, Result};
use crate::real::Real;
use crate::memory;
use crate::parallel::Monitor;
use crate::rows::row_major;
use ndarray::{Array2, ArrayView1, ArrayView2, Axis};
use rayon::prelude::*;

/// At most this many features (2³ corners per point).
pub const MAX_DIM: usize = 3;
/// Points between two polls of the monitor.
const POLL: usize = 1 << 16;

/// A regular grid: node j of feature k sits at `lo[k] + j·delta[k]`, j < `sizes[k]`; nodes are
/// stored row-major (the last feature varies fastest). A feature with one node has delta 0.
#[derive(Clone, Debug)]
pub struct RegularGrid {
    lo: Vec<f64>,
    /// 1 / spacing per feature (0 for a one-node feature).
    inv: Vec<f64>,
    sizes: Vec<usize>,
    strides: Vec<usize>,
    nodes: usize,
}

impl RegularGrid {
    pub fn new(lo: &[f64], delta: &[f64], sizes: &[usize]) -> Result<Self> {
        let d = sizes.len();
        if d == 0 || d > MAX_DIM {
            return Err(LocalizationError::param("grid_size", format!("the binned path takes 1 to {MAX_DIM} features, got {d}")));
        }
        if lo.len() != d || delta.len() != d {
            return Err(LocalizationError::shape("grid", format!("{d} origins and spacings"), format!("{} and {}", lo.len(), delta.len())));
        }
        for k in 0..d {
            let ok = sizes[k] >= 1 && lo[k].is_finite() && delta[k].is_finite() && delta[k] >= 0.0 && ((sizes[k] == 1) == (delta[k] == 0.0));
            if !ok {
                return Err(LocalizationError::param("grid_size", format!("feature {k}: {} nodes with spacing {}", sizes[k], delta[k])));
            }
        }
        let mut strides = vec![1usize; d];
        for k in (0..d - 1).rev() {
            strides[k] = strides[k + 1]
                .checked_mul(sizes[k + 1])
                .ok_or_else(|| LocalizationError::param("grid_size", "too many grid nodes"))?;
        }
        let nodes = strides[0].checked_mul(sizes[0]).ok_or_else(|| LocalizationError::param("grid_size", "too many grid nodes"))?;
        let inv = delta.iter().map(|&dk| if dk > 0.0 { 1.0 / dk } else { 0.0 }).collect();
        Ok(RegularGrid { lo: lo.to_vec(), inv, sizes: sizes.to_vec(), strides, nodes })
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// The features with more than one node, as fixed-size arrays (a one-node feature adds no
    /// corner: its upper corner would have weight 0), so that the per-point loops below are
    /// unrolled for their count `A` with no per-feature branches.
    fn active<const A: usize>(&self) -> Active<A> {
        let mut out = Active { col: [0; A], lo: [0.0; A], inv: [0.0; A], top: [0.0; A], stride: [0; A] };
        let mut a = 0;
        for k in 0..self.sizes.len() {
            if self.sizes[k] > 1 {
                out.col[a] = k;
                out.lo[a] = self.lo[k];
                out.inv[a] = self.inv[k];
                out.top[a] = (self.sizes[k] - 2) as f64;
                out.stride[a] = self.strides[k];
                a += 1;
            }
        }
        debug_assert_eq!(a, A);
        out
    }

    fn active_count(&self) -> usize {
        self.sizes.iter().filter(|&&g| g > 1).count()
    }
}

/// Calls `$body` with the const `$a` bound to the grid's number of multi-node features.
macro_rules! with_active {
    ($grid:expr, $a:ident, $body:expr) => {
        match $grid.active_count() {
            0 => {
                const $a: usize = 0;
                $body
            }
            1 => {
                const $a: usize = 1;
                $body
            }
            2 => {
                const $a: usize = 2;
                $body
            }
            _ => {
                const $a: usize = 3;
                $body
            }
        }
    };
}

/// The multi-node features of a [`RegularGrid`] (see [`RegularGrid::active`]).
struct Active<const A: usize> {
    /// Column of the point holding each feature.
    col: [usize; A],
    lo: [f64; A],
    inv: [f64; A],
    /// Index of the last cell (nodes − 2).
    top: [f64; A],
    stride: [usize; A],
}

impl<const A: usize> Active<A> {
    /// The 2ᴬ (flat node index, weight) pairs of point `p` (its d coordinates), corners in
    /// lexicographic order of their bits (the interpolation sums them in that order). Points
    /// outside the grid are clamped onto its border. Every index is below the node count:
    /// the cell index is at most nodes − 2 per feature.
    #[inline(always)]
    fn corners<T: Real>(&self, p: &[T], out: &mut [(usize, f64); 1 << MAX_DIM]) {
        let mut base = 0usize;
        let mut frac = [0.0f64; MAX_DIM];
        for k in 0..A {
            let t = ((p[self.col[k]].f64() - self.lo[k]) * self.inv[k]).max(0.0);
            // SAFETY: `max` returns its non-NaN operand, so t.min(top) lies in [0, top] with
            // top < 2⁵³: the conversion is exact-floor and in range (no saturation code needed).
            let i0 = unsafe { t.min(self.top[k]).to_int_unchecked::<i64>() } as usize;
            frac[k] = (t - i0 as f64).min(1.0);
            base += i0 * self.stride[k];
        }
        for (c, slot) in out.iter_mut().take(1 << A).enumerate() {
            let (mut index, mut weight) = (base, 1.0f64);
            for k in 0..A {
                if (c >> (A - 1 - k)) & 1 == 1 {
                    index += self.stride[k];
                    weight *= frac[k];
                } else {
                    weight *= 1.0 - frac[k];
                }
            }
            *slot = (index, weight);
        }
    }
}

/// Points per binning chunk, and at most this many chunks (each has its own grid, so the
/// chunk count, never the thread count, fixes the order of every node's sum).
const CHUNK: usize = 1 << 16;
const MAX_CHUNKS: usize = 8;
/// The chunks' private grids stay under this many bytes (large grids bin in fewer chunks).
const CHUNK_BYTES: usize = 1 << 28;

/// Linear binning: row 0 of the result is Σ wᵢ·Lⱼ(xᵢ) per node j (wᵢ = 1 without weights), row
/// 1 + c is Σ wᵢ vᵢ_c Lⱼ(xᵢ); sums in f64. The points are split into a number of consecutive
/// chunks that depends on n and the grid only; each chunk is binned in point order into its own
/// grid (in parallel), and the grids are added in chunk order: bit-identical for any thread count.
pub fn bin_linear<T: Real>(
    grid: &RegularGrid, x: ArrayView2<T>, weights: Option<ArrayView1<T>>, values: Option<ArrayView2<T>>, mon: &Monitor,
) -> Result<Array2<f64>> {
    let (n, d) = x.dim();
    if d != grid.sizes.len() {
        return Err(LocalizationError::shape("X", format!("{} features", grid.sizes.len()), d));
    }
    if let Some(w) = weights {
        if w.len() != n {
            return Err(LocalizationError::shape("sample_weight", n, w.len()));
        }
    }
    let p = values.map_or(0, |v| v.ncols());
    if let Some(v) = values {
        if v.nrows() != n {
            return Err(LocalizationError::shape("values", format!("{n} rows"), v.nrows()));
        }
    }
    let cols = 1 + p;
    let per_grid = cols.saturating_mul(grid.nodes).saturating_mul(8).max(1);
    let chunks = n.div_ceil(CHUNK).clamp(1, MAX_CHUNKS).min((CHUNK_BYTES / per_grid).max(1));
    let step = n.div_ceil(chunks).max(1);
    let mut grids = Vec::with_capacity(chunks);
    for _ in 0..chunks {
        grids.push(memory::try_vec("binned grid", &[cols, grid.nodes], 0.0f64)?);
    }
    // Contiguous rows (borrowed for the C-contiguous arrays the Python layer passes).
    let (xs, ws, vs) = (row_major(x), weights.map(row_major), values.map(row_major));
    with_active!(grid, A, {
        let axes = grid.active::<A>();
        grids.par_iter_mut().enumerate().try_for_each(|(c, flat)| {
            let (a, b) = ((c * step).min(n), ((c + 1) * step).min(n));
            bin_range(&axes, d, &xs, ws.as_deref(), vs.as_deref(), p, a, b, flat, mon)
        })
    })?;
    // The chunks are added in chunk order, so every node's sum has the same bits whatever
    // the number of threads. `chunks` is at least 1; were there none, that is an error, never
    // an empty sum passed on as zeros.
    let total = grids
        .into_iter()
        .reduce(|mut out, g| {
            out.par_chunks_mut(1 << 14).zip(g.par_chunks(1 << 14)).for_each(|(part, src)| part.iter_mut().zip(src).for_each(|(o, s)| *o += s));
            out
        })
        .ok_or_else(|| LocalizationError::shape("binned grid", "at least one chunk", 0))?;
    Array2::from_shape_vec((cols, grid.nodes), total).map_err(|e| LocalizationError::shape("binned grid", format!("{cols} × {} sums", grid.nodes), e))
}

/// Bin points a..b (rows of `xs`, d per point; `vs` p per point) into `flat` (columns × nodes,
/// row-major), in point order.
#[allow(clippy::too_many_arguments)]
fn bin_range<T: Real, const A: usize>(
    axes: &Active<A>, d: usize, xs: &[T], ws: Option<&[T]>, vs: Option<&[T]>, p: usize, a: usize, b: usize, flat: &mut [f64],
    mon: &Monitor,
) -> Result<()> {
    let nodes = flat.len() / (1 + p);
    let (counts, rest) = flat.split_at_mut(nodes);
    let mut corners = [(0usize, 0.0f64); 1 << MAX_DIM];
    let mut start = a;
    while start < b {
        mon.check()?;
        let stop = (start + POLL).min(b);
        for (r, point) in xs[start * d..stop * d].chunks_exact(d.max(1)).enumerate() {
            let i = start + r;
            axes.corners(point, &mut corners);
            let corners = &corners[..1 << A];
            let Some(ws) = ws else {
                // the unweighted sample count (1·l is l: same bits as the weighted form)
                for &(j, l) in corners {
                    counts[j] += l;
                }
                if let Some(vs) = vs {
                    add_values(rest, nodes, corners, 1.0, &vs[i * p..(i + 1) * p]);
                }
                continue;
            };
            let w = ws[i].f64();
            for &(j, l) in corners {
                counts[j] += w * l;
            }
            if let Some(vs) = vs {
                add_values(rest, nodes, corners, w, &vs[i * p..(i + 1) * p]);
            }
        }
        start = stop;
    }
    Ok(())
}

/// Adds w·v_c times each corner's weight to value row c (rows of `nodes` in `rows`).
#[inline(always)]
fn add_values<T: Real>(rows: &mut [f64], nodes: usize, corners: &[(usize, f64)], w: f64, v: &[T]) {
    for (row, &vc) in rows.chunks_exact_mut(nodes).zip(v) {
        let wv = w * vc.f64();
        for &(j, l) in corners {
            row[j] += wv * l;
        }
    }
}

/// Multilinear interpolation of the grid rows `sums` (columns × nodes) at the queries: m × columns.
pub fn interpolate<T: Real>(grid: &RegularGrid, sums: ArrayView2<f64>, queries: ArrayView2<T>, mon: &Monitor) -> Result<Array2<f64>> {
    let (m, d) = queries.dim();
    if d != grid.sizes.len() {
        return Err(LocalizationError::shape("X_query", format!("{} features", grid.sizes.len()), d));
    }
    if sums.ncols() != grid.nodes {
        return Err(LocalizationError::shape("grid sums", format!("{} nodes", grid.nodes), sums.ncols()));
    }
    let cols = sums.nrows();
    let mut out = memory::try_array("interpolated sums", (m, cols), 0.0f64)?;
    const BLOCK: usize = 4096;
    let (qs, flat) = (row_major(queries), row_major(sums));
    let nodes = grid.nodes;
    with_active!(grid, A, {
        let axes = grid.active::<A>();
        out.axis_chunks_iter_mut(Axis(0), BLOCK).into_par_iter().enumerate().try_for_each(|(b, mut chunk)| {
            mon.check()?;
            let mut corners = [(0usize, 0.0f64); 1 << MAX_DIM];
            let block = &qs[b * BLOCK * d..((b * BLOCK + chunk.nrows()) * d)];
            for (mut row, point) in chunk.axis_iter_mut(Axis(0)).zip(block.chunks_exact(d.max(1))) {
                axes.corners(point, &mut corners);
                for c in 0..cols {
                    let s = &flat[c * nodes..(c + 1) * nodes];
                    row[c] = corners[..1 << A].iter().map(|&(j, l)| s[j] * l).sum();
                }
            }
            Ok(())
        })
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    fn mon() -> Monitor {
        Monitor::default()
    }

    #[test]
    fn binning_keeps_mass_and_first_moment() {
        let grid = RegularGrid::new(&[0.0, -1.0], &[0.5, 0.25], &[5, 9]).unwrap();
        let x = array![[0.3, -0.9], [1.7, 0.6], [2.0, 1.0], [0.0, -1.0]];
        let w = array![1.0, 2.0, 0.5, 3.0];
        let v = array![[1.0], [-2.0], [4.0], [0.5]];
        let g = bin_linear(&grid, x.view(), Some(w.view()), Some(v.view()), &mon()).unwrap();
        assert!((g.row(0).sum() - 6.5).abs() < 1e-12);
        assert!((g.row(1).sum() - (1.0 - 4.0 + 2.0 + 1.5)).abs() < 1e-12);
        // linear binning keeps the weighted mean position along each feature
        let mut first = 0.0;
        for j in 0..grid.nodes() {
            first += g[[0, j]] * (0.0 + 0.5 * (j / 9) as f64);
        }
        let exact: f64 = x.column(0).iter().zip(w.iter()).map(|(a, b)| a * b).sum();
        assert!((first - exact).abs() < 1e-12);
    }

    #[test]
    fn interpolation_is_exact_for_multilinear_functions() {
        let grid = RegularGrid::new(&[0.0, 0.0, 0.0], &[0.5, 1.0, 0.25], &[3, 4, 5]).unwrap();
        let f = |a: f64, b: f64, c: f64| 1.0 + 2.0 * a - b + 0.5 * c + a * b * c;
        let mut sums = Array2::zeros((1, grid.nodes()));
        for i in 0..3 {
            for j in 0..4 {
                for k in 0..5 {
                    sums[[0, (i * 4 + j) * 5 + k]] = f(i as f64 * 0.5, j as f64, k as f64 * 0.25);
                }
            }
        }
        let q = array![[0.3f32, 2.5, 0.9], [1.0, 3.0, 1.0], [0.0, 0.0, 0.0]];
        let out = interpolate(&grid, sums.view(), q.view(), &mon()).unwrap();
        for (r, row) in q.axis_iter(Axis(0)).enumerate() {
            let want = f(row[0] as f64, row[1] as f64, row[2] as f64);
            assert!((out[[r, 0]] - want).abs() < 1e-12, "{} vs {}", out[[r, 0]], want);
        }
    }

    #[test]
    fn binning_is_thread_count_invariant() {
        let n = 300_000;
        let x = Array2::from_shape_fn((n, 2), |(i, k)| ((i * 7919 + k * 104_729) % 10_007) as f64 / 10_007.0);
        let w = ndarray::Array1::from_shape_fn(n, |i| 1.0 + (i % 13) as f64 / 7.0);
        let grid = RegularGrid::new(&[0.0, 0.0], &[1.0 / 63.0, 1.0 / 31.0], &[64, 32]).unwrap();
        let run = |threads| crate::parallel::install(threads, || bin_linear(&grid, x.view(), Some(w.view()), None, &mon()).unwrap()).unwrap();
        let (one, two) = (run(1), run(2));
        assert_eq!(one, two);
        assert!((one.sum() - w.sum()).abs() < 1e-9 * w.sum());
    }

    /// Per point and corner, the definition: the product over features of the hat weights
    /// (a one-node feature contributes weight 1 at its only node).
    fn naive_bins(lo: &[f64], delta: &[f64], sizes: &[usize], x: &Array2<f64>, w: &[f64], v: &Array2<f64>) -> Array2<f64> {
        let d = sizes.len();
        let nodes: usize = sizes.iter().product();
        let mut out = Array2::zeros((1 + v.ncols(), nodes));
        for i in 0..x.nrows() {
            for c in 0..(1usize << d) {
                let (mut index, mut weight) = (0usize, 1.0);
                for k in 0..d {
                    let bit = (c >> (d - 1 - k)) & 1;
                    let (j, l) = if sizes[k] == 1 {
                        (0, if bit == 0 { 1.0 } else { 0.0 })
                    } else {
                        let t = ((x[[i, k]] - lo[k]) / delta[k]).clamp(0.0, (sizes[k] - 1) as f64);
                        let i0 = (t.floor() as usize).min(sizes[k] - 2);
                        let f = t - i0 as f64;
                        (i0 + bit, if bit == 1 { f } else { 1.0 - f })
                    };
                    index = index * sizes[k] + j;
                    weight *= l;
                }
                out[[0, index]] += w[i] * weight;
                for col in 0..v.ncols() {
                    out[[1 + col, index]] += w[i] * v[[i, col]] * weight;
                }
            }
        }
        out
    }

    #[test]
    fn binning_matches_the_definition_in_every_layout() {
        let (lo, delta, sizes) = ([-1.0, 3.0, 0.0], [0.25, 0.0, 0.125], [9usize, 1, 17]);
        let grid = RegularGrid::new(&lo, &delta, &sizes).unwrap();
        let n = 1000;
        // points inside, on nodes, on the border and outside (clamped)
        let x = Array2::from_shape_fn((n, 3), |(i, k)| match k {
            0 => -1.3 + 2.6 * ((i * 37) % 101) as f64 / 100.0,
            1 => 3.0,
            _ => if i % 7 == 0 { 0.125 * (i % 17) as f64 } else { -0.1 + 2.2 * ((i * 53) % 89) as f64 / 88.0 },
        });
        let w: Vec<f64> = (0..n).map(|i| 0.5 + (i % 5) as f64).collect();
        let v = Array2::from_shape_fn((n, 2), |(i, c)| (i as f64 * 0.37 + c as f64).sin());
        let want = naive_bins(&lo, &delta, &sizes, &x, &w, &v);
        let wa = ndarray::Array1::from(w.clone());
        let got = bin_linear(&grid, x.view(), Some(wa.view()), Some(v.view()), &mon()).unwrap();
        for (a, b) in got.iter().zip(want.iter()) {
            assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{a} vs {b}");
        }
        // Fortran-ordered and strided input give the same bits as C-ordered input.
        let xf = x.t().as_standard_layout().into_owned().reversed_axes();
        let wide = Array2::from_shape_fn((n, 4), |(i, c)| v[[i, c / 2]]);
        let vs = wide.slice(ndarray::s![.., ..;2]);
        assert_eq!(bin_linear(&grid, xf.view(), Some(wa.view()), Some(vs), &mon()).unwrap(), got);
        // interpolation of a grid at its own nodes gives the node values back
        let at_nodes = Array2::from_shape_fn((9 * 17, 3), |(r, k)| [lo[0] + 0.25 * (r / 17) as f64, 3.0, 0.125 * (r % 17) as f64][k]);
        let back = interpolate(&grid, got.view(), at_nodes.view(), &mon()).unwrap();
        for r in 0..9 * 17 {
            assert!((back[[r, 1]] - got[[1, r]]).abs() <= 1e-12 * (1.0 + got[[1, r]].abs()));
        }
    }

    #[test]
    fn one_node_features_and_bad_grids() {
        let grid = RegularGrid::new(&[2.0, 0.0], &[0.0, 1.0], &[1, 3]).unwrap();
        let g = bin_linear(&grid, array![[2.0, 0.5]].view(), None, None, &mon()).unwrap();
        assert_eq!(g.row(0).to_vec(), vec![0.5, 0.5, 0.0]);
        assert!(RegularGrid::new(&[0.0; 4], &[1.0; 4], &[2; 4]).is_err());
        assert!(RegularGrid::new(&[0.0], &[0.0], &[2]).is_err());
        assert!(RegularGrid::new(&[0.0], &[f64::NAN], &[2]).is_err());
        assert!(RegularGrid::new(&[0.0, 0.0], &[1.0, 1.0], &[usize::MAX, 3]).is_err());
    }
}

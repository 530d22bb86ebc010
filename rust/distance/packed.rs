//! Tiles of dot products for the product form of squared distances, on operands packed once.
//!
//! A general matrix product (`ndarray`'s, through `matrixmultiply`) re-packs both operands on
//! every call: for a neighbour search that calls it once per query block and reference tile,
//! that repacking of the references took a fifth of the time in d = 784. Here the references
//! are packed once, when an index is built, and each query block once; a register-blocked
//! micro-kernel (6 queries × two SIMD vectors of references, 12 accumulators, fused
//! multiply-adds where the CPU has them) streams the panels.
//!
//! Products are summed in another order than a plain dot product, which the rounding bound
//! of [`super::product_error`] allows for: it holds for any summation order, fused or not.

use crate::error::Result;
use crate::real::{madd, Real};
use crate::memory;
use ndarray::ArrayView2;
use rayon::prelude::*;
use std::ops::Range;

/// Panels packed per parallel task: a query block's (at most 32) stay on one.
const PANELS_PER_TASK: usize = 64;

/// Queries per panel (rows of the micro-kernel).
pub const MR: usize = 6;
/// Bytes of one panel slice along the features: the reference slice (16 KiB) and the query
/// slice stay in L1 while the micro-kernel runs over them.
const KC_BYTES: usize = 1024;

/// References per panel: two 256-bit vectors of `F` (16 in f32, 8 in f64).
const fn nr<F>() -> usize {
    64 / std::mem::size_of::<F>()
}

/// Rows minus a centre, in panels of `width` rows, feature-major inside a panel: element
/// (r, k) at `data[((r / width) · dim + k) · width + r % width]`, the last panel padded with
/// zero rows. With it, the squared norms of the centred rows.
pub struct Panels<F> {
    data: Vec<F>,
    rows: usize,
    dim: usize,
    width: usize,
    norms: Vec<F>,
}

impl<F: Real> Panels<F> {
    /// The reference side, packed once per index (allocated fallibly: it is as large as the data).
    pub fn references(x: ArrayView2<F>, centre: &[F]) -> Result<Self> {
        Ok(Panels::references_from(x, None, centre, F::one())?.0)
    }

    /// An empty query side, refilled block by block with [`Panels::repack`].
    pub fn queries(dim: usize) -> Self {
        Panels { data: Vec::new(), rows: 0, dim, width: MR, norms: Vec::new() }
    }

    /// The columns of `x` (n × m) as m uncentred rows of n features, packed for [`products`]
    /// (allocated fallibly; no norms). Read row by row, so `x` is traversed in memory order.
    pub fn transposed(x: ArrayView2<F>) -> Result<Self> {
        let (n, m) = x.dim();
        let w = nr::<F>();
        let mut data = memory::try_vec("packed samples", &[m.div_ceil(w) * w, n], F::zero())?;
        for (k, row) in x.rows().into_iter().enumerate() {
            for (r, &v) in row.iter().enumerate() {
                data[((r / w) * n + k) * w + r % w] = v;
            }
        }
        Ok(Panels { data, rows: m, dim: n, width: w, norms: Vec::new() })
    }

    /// Repack with the rows of `q` minus `centre` (as many features as `q` has columns).
    pub fn repack(&mut self, q: ArrayView2<F>, centre: &[F]) {
        self.repack_from(q, centre, F::one());
    }

    /// The references of another precision `T`, scaled by `scale` (an exact power of two)
    /// after centring and then rounded to `F`: the k-NN's single-precision screen of
    /// double-precision data. Packed position r holds row `order[r]` (row r without an
    /// order). Returns the panels and the largest |scaled centred entry|.
    pub fn references_from<T: Real>(x: ArrayView2<T>, order: Option<&[usize]>, centre: &[T], scale: T) -> Result<(Self, f64)> {
        let mut p = Panels { data: Vec::new(), rows: 0, dim: x.ncols(), width: nr::<F>(), norms: Vec::new() };
        p.data = memory::try_vec("packed samples", &[x.nrows().div_ceil(p.width) * p.width, x.ncols()], F::zero())?;
        let max = match order {
            Some(order) => p.fill(x, order.len(), |r| order[r], centre, scale),
            None => p.fill(x, x.nrows(), |r| r, centre, scale),
        };
        Ok((p, max))
    }

    /// [`Panels::repack`] from another precision, as [`Panels::references_from`]; returns the
    /// largest |scaled centred entry|.
    pub fn repack_from<T: Real>(&mut self, q: ArrayView2<T>, centre: &[T], scale: T) -> f64 {
        self.dim = q.ncols();
        self.data.clear();
        self.data.resize(q.nrows().div_ceil(self.width) * self.width * self.dim, F::zero());
        self.fill(q, q.nrows(), |r| r, centre, scale)
    }

    /// Packs (x_{row(r)} − centre)·scale rounded to `F` at positions r = 0..n, with the squared
    /// norms of the packed rows (summed in `F`), and returns the largest |(x − centre)·scale|.
    /// Panels in parallel (each owns its slice of `data`), a query block's few on one task.
    fn fill<T: Real>(&mut self, x: ArrayView2<T>, n: usize, row: impl Fn(usize) -> usize + Sync, centre: &[T], scale: T) -> f64 {
        let (w, d) = (self.width, self.dim);
        assert!(centre.len() == d && x.ncols() == d, "a centre per feature");
        self.rows = n;
        self.norms.clear();
        self.norms.resize(n, F::zero());
        self.data[..n.div_ceil(w) * w * d]
            .par_chunks_mut(w * d)
            .zip(self.norms.par_chunks_mut(w))
            .enumerate()
            .with_min_len(PANELS_PER_TASK)
            .map(|(p, (panel, norms))| {
                let mut max = 0.0f64;
                for (l, norm) in norms.iter_mut().enumerate() {
                    let mut s = F::zero();
                    for (k, (&v, &c)) in x.row(row(p * w + l)).iter().zip(centre).enumerate() {
                        let t = ((v - c) * scale).f64();
                        max = max.max(t.abs());
                        let t = F::of(t);
                        panel[k * w + l] = t;
                        s = s + t * t;
                    }
                    *norm = s;
                }
                max
            })
            .reduce(|| 0.0, f64::max)
    }

    /// Row `r` as packed (centred, scaled and rounded) into `out`.
    pub fn unpack_row(&self, r: usize, out: &mut [F]) {
        let (w, d) = (self.width, self.dim);
        let base = (r / w) * d * w + r % w;
        out[..d].iter_mut().enumerate().for_each(|(k, o)| *o = self.data[base + k * w]);
    }

    /// Squared norms of the centred rows.
    pub fn norms(&self) -> &[F] {
        &self.norms
    }

    /// Rows including the padding of the last panel.
    pub fn padded_rows(&self) -> usize {
        self.rows.div_ceil(self.width) * self.width
    }

    /// Features (the length of each packed row).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// References per panel.
    pub fn width(&self) -> usize {
        self.width
    }
}

/// out[i · ldc + j] = −2 q̂_i · x̂_(p0·w + j) for every (padded) query row i of `q` and every
/// reference of the panels `panels = p0..p1` of `x` (w = `x.width()`); `out` holds
/// `q.padded_rows()` rows of stride `ldc` ≥ (p1 − p0)·w.
pub fn minus_two_dots<F: Real>(q: &Panels<F>, x: &Panels<F>, panels: Range<usize>, out: &mut [F], ldc: usize) {
    // Scaling by −2 is exact: the partial sums add up as the plain products would.
    scaled_dots(q, x, panels, F::of(-2.0), out, ldc)
}

/// As [`minus_two_dots`] with the factor `alpha` in place of −2 (applied to the partial sum of
/// each slice of features: up to 256 features in f32 and 128 in f64, one slice).
pub fn scaled_dots<F: Real>(q: &Panels<F>, x: &Panels<F>, panels: Range<usize>, alpha: F, out: &mut [F], ldc: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports the features the function is compiled for.
            return unsafe { dots_avx2(q, x, panels, alpha, out, ldc) };
        }
    }
    dots::<F, false>(q, x, panels, alpha, out, ldc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_avx2<F: Real>(q: &Panels<F>, x: &Panels<F>, panels: Range<usize>, alpha: F, out: &mut [F], ldc: usize) {
    dots::<F, true>(q, x, panels, alpha, out, ldc)
}

#[inline(always)]
fn dots<F: Real, const FMA: bool>(q: &Panels<F>, x: &Panels<F>, panels: Range<usize>, alpha: F, out: &mut [F], ldc: usize) {
    if std::mem::size_of::<F>() == 4 {
        dots_with::<F, FMA, 16>(q, x, panels, alpha, out, ldc)
    } else {
        dots_with::<F, FMA, 8>(q, x, panels, alpha, out, ldc)
    }
}

#[inline(always)]
fn dots_with<F: Real, const FMA: bool, const NR: usize>(q: &Panels<F>, x: &Panels<F>, panels: Range<usize>, alpha: F, out: &mut [F], ldc: usize) {
    debug_assert!(x.width == NR && q.width == MR && q.dim == x.dim);
    let d = q.dim;
    let kc = (KC_BYTES / std::mem::size_of::<F>()).max(1);
    for k0 in (0..d).step_by(kc) {
        let k1 = (k0 + kc).min(d);
        for (jp, p) in panels.clone().enumerate() {
            let b = &x.data[(p * d + k0) * NR..(p * d + k1) * NR];
            for ip in 0..q.padded_rows() / MR {
                let a = &q.data[(ip * d + k0) * MR..(ip * d + k1) * MR];
                let acc = micro::<F, FMA, NR>(a.chunks_exact(MR).map(|ak| std::array::from_fn(|i| ak[i])), b);
                for (i, acc) in acc.iter().enumerate() {
                    let row = &mut out[(ip * MR + i) * ldc + jp * NR..][..NR];
                    if k0 == 0 {
                        row.iter_mut().zip(acc).for_each(|(o, &a)| *o = alpha * a);
                    } else {
                        row.iter_mut().zip(acc).for_each(|(o, &a)| *o = *o + alpha * a);
                    }
                }
            }
        }
    }
}

/// The register block of the micro-kernel: acc[i][j] = Σ_k a_k[i] · b[k · NR + j] over the
/// columns `a` yields (MR values each) and the matching slices of a panel `b`.
#[inline(always)]
fn micro<F: Real, const FMA: bool, const NR: usize>(a: impl Iterator<Item = [F; MR]>, b: &[F]) -> [[F; NR]; MR] {
    let mut acc = [[F::zero(); NR]; MR];
    for (ak, bk) in a.zip(b.chunks_exact(NR)) {
        for i in 0..MR {
            for j in 0..NR {
                acc[i][j] = madd::<F, FMA>(ak[i], bk[j], acc[i][j]);
            }
        }
    }
    acc
}

/// `micro` over two panels at once (`b0`, `b1`: the same features of two panels): twice the
/// accumulators per row of A for the same broadcasts, each output the same multiply-adds.
#[inline(always)]
fn micro2<F: Real, const FMA: bool, const NR: usize>(a: impl Iterator<Item = [F; MR]>, b0: &[F], b1: &[F]) -> [[[F; NR]; MR]; 2] {
    let mut acc = [[[F::zero(); NR]; MR]; 2];
    for ((ak, bk0), bk1) in a.zip(b0.chunks_exact(NR)).zip(b1.chunks_exact(NR)) {
        for i in 0..MR {
            for j in 0..NR {
                acc[0][i][j] = madd::<F, FMA>(ak[i], bk0[j], acc[0][i][j]);
                acc[1][i][j] = madd::<F, FMA>(ak[i], bk1[j], acc[1][i][j]);
            }
        }
    }
    acc
}

/// Where element (i, k) of the left operand of [`products`] sits in its slice.
#[derive(Copy, Clone, Debug)]
pub enum Layout {
    /// At `i · stride + k`: rows read in place (a row-major matrix, or a tile).
    Rows(usize),
    /// At `k · stride + i`: the transpose of a row-major matrix, read in place.
    Columns(usize),
}

/// out[i · ldc + (p − p0)·w + j] = alpha · Σ_(k ∈ ks) A(i, k − ks.start) · x_(p·w + j, k) for the
/// `rows` rows of A (laid out in `a` as `layout` says) and the panels `p ∈ panels = p0..p1` of
/// `x` (w = `x.width()`, packed with a zero centre). Only the `rows` rows of `out` are written.
///
/// The left operand is read in place, in either orientation, and the right one was packed once:
/// for products repeated over tiles of one matrix (attention's QKᵀ, P·V and the backward
/// pass's PᵀdO, dSᵀQ, dS·K), where a general matrix product would repack both operands on
/// every call, and a transposed tile would have to be copied first.
#[allow(clippy::too_many_arguments)]
pub fn products<F: Real>(a: &[F], layout: Layout, rows: usize, x: &Panels<F>, panels: Range<usize>, ks: Range<usize>, alpha: F, out: &mut [F], ldc: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("avx2") && has!("fma") {
            // SAFETY: the CPU supports the features the function is compiled for.
            return unsafe { products_avx512(a, layout, rows, x, panels, ks, alpha, out, ldc) };
        }
        if has!("avx2") && has!("fma") {
            // SAFETY: as above.
            return unsafe { products_avx2(a, layout, rows, x, panels, ks, alpha, out, ldc) };
        }
    }
    products_with::<F, false, false>(a, layout, rows, x, panels, ks, alpha, out, ldc)
}

/// With AVX-512 a panel row (64 bytes) is one register, its multiply-adds one instruction per
/// row of A with the row's element broadcast from memory: half the instructions of the AVX2
/// kernel (attention's products 1.3× faster on an AVX-512 Xeon). Two panels per pass keep
/// twelve accumulators in flight, as the AVX2 kernel's two registers per row do (attention's
/// forward 1.12× faster on a Sapphire Rapids core, which has two 512-bit FMA pipes). Each
/// output is the same sequence of multiply-adds over k, so the bits do not change. (Tried and
/// not kept: twelve rows of A instead — in generic code LLVM vectorised across the rows with
/// gathers and scatters of the accumulators, 30× slower; in intrinsics on a k-major copy of
/// the rows, 1.5× slower on an earlier AVX-512 Xeon.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn products_avx512<F: Real>(a: &[F], layout: Layout, rows: usize, x: &Panels<F>, panels: Range<usize>, ks: Range<usize>, alpha: F, out: &mut [F], ldc: usize) {
    products_with::<F, true, true>(a, layout, rows, x, panels, ks, alpha, out, ldc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn products_avx2<F: Real>(a: &[F], layout: Layout, rows: usize, x: &Panels<F>, panels: Range<usize>, ks: Range<usize>, alpha: F, out: &mut [F], ldc: usize) {
    products_with::<F, true, false>(a, layout, rows, x, panels, ks, alpha, out, ldc)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn products_with<F: Real, const FMA: bool, const PAIRS: bool>(
    a: &[F], layout: Layout, rows: usize, x: &Panels<F>, panels: Range<usize>, ks: Range<usize>, alpha: F, out: &mut [F], ldc: usize,
) {
    match (std::mem::size_of::<F>() == 4, layout) {
        (true, Layout::Rows(s)) => products_nr::<F, FMA, PAIRS, 16, false>(a, s, rows, x, panels, ks, alpha, out, ldc),
        (true, Layout::Columns(s)) => products_nr::<F, FMA, PAIRS, 16, true>(a, s, rows, x, panels, ks, alpha, out, ldc),
        (false, Layout::Rows(s)) => products_nr::<F, FMA, PAIRS, 8, false>(a, s, rows, x, panels, ks, alpha, out, ldc),
        (false, Layout::Columns(s)) => products_nr::<F, FMA, PAIRS, 8, true>(a, s, rows, x, panels, ks, alpha, out, ldc),
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn products_nr<F: Real, const FMA: bool, const PAIRS: bool, const NR: usize, const COLUMNS: bool>(
    a: &[F], stride: usize, rows: usize, x: &Panels<F>, panels: Range<usize>, ks: Range<usize>, alpha: F, out: &mut [F], ldc: usize,
) {
    let (d, kn) = (x.dim, ks.len());
    assert!(x.width == NR && ks.end <= d && panels.end * NR * d <= x.data.len(), "panels and features of x");
    if rows == 0 || panels.is_empty() {
        return;
    }
    assert!(out.len() >= (rows - 1) * ldc + panels.len() * NR, "out holds rows × panels");
    // Element (i, k) of A is at off(i) + k · step; the last one read must lie in `a`.
    let step = if COLUMNS { stride } else { 1 };
    let off = |i: usize| if COLUMNS { i } else { i * stride };
    assert!(kn == 0 || off(rows - 1) + (kn - 1) * step < a.len(), "a holds rows × ks in its layout");
    for g in (0..rows).step_by(MR) {
        // A partial last group repeats its last row (its results are not stored).
        let n = MR.min(rows - g);
        let at: [usize; MR] = std::array::from_fn(|i| off(g + i.min(n - 1)));
        // SAFETY: at[i] ≤ off(rows − 1) and k < kn, so every index is at most the one
        // asserted to lie in `a` above.
        let column = |k: usize| std::array::from_fn(|i| unsafe { *a.get_unchecked(at[i] + k * step) });
        let slice = |p: usize| &x.data[(p * d + ks.start) * NR..(p * d + ks.end) * NR];
        let mut p = panels.start;
        // With 32 vector registers (AVX-512), two panels at a time: twelve accumulators in
        // flight instead of six keep both FMA pipes of a core busy.
        while PAIRS && p + 2 <= panels.end {
            let [acc0, acc1] = micro2::<F, FMA, NR>((0..kn).map(column), slice(p), slice(p + 1));
            store(out, g * ldc + (p - panels.start) * NR, ldc, n, alpha, &acc0);
            store(out, g * ldc + (p + 1 - panels.start) * NR, ldc, n, alpha, &acc1);
            p += 2;
        }
        for p in p..panels.end {
            store(out, g * ldc + (p - panels.start) * NR, ldc, n, alpha, &micro::<F, FMA, NR>((0..kn).map(column), slice(p)));
        }
    }
}

/// out[at + i · ldc + j] = alpha · acc[i][j] for the first `n` rows (a function, not a closure,
/// so that it is inlined into the caller's target features and vectorised).
#[inline(always)]
fn store<F: Real, const NR: usize>(out: &mut [F], at: usize, ldc: usize, n: usize, alpha: F, acc: &[[F; NR]; MR]) {
    for (i, acc) in acc.iter().enumerate().take(n) {
        let row = &mut out[at + i * ldc..][..NR];
        row.iter_mut().zip(acc).for_each(|(o, &s)| *o = alpha * s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    fn check<F: Real>(n: usize, m: usize, d: usize) {
        let x = Array2::from_shape_fn((n, d), |(i, k)| F::of(((i * 7 + k * 3) % 11) as f64 - 5.0));
        let q = Array2::from_shape_fn((m, d), |(i, k)| F::of(((i * 5 + k) % 13) as f64 - 6.0));
        let centre: Vec<F> = (0..d).map(|k| F::of(k as f64 * 0.25)).collect();
        let xp = Panels::references(x.view(), &centre).unwrap();
        let mut qp = Panels::queries(d);
        qp.repack(q.view(), &centre);
        let w = xp.width();
        let panels = xp.padded_rows() / w;
        let ldc = panels * w;
        let mut out = vec![F::nan(); qp.padded_rows() * ldc];
        minus_two_dots(&qp, &xp, 0..panels, &mut out, ldc);
        for i in 0..m {
            for j in 0..n {
                // Small integers and quarters: every sum is exact in any order.
                let want: f64 = (0..d).map(|k| -2.0 * (q[(i, k)] - centre[k]).f64() * (x[(j, k)] - centre[k]).f64()).sum();
                assert_eq!(out[i * ldc + j].f64(), want, "{i} {j}");
            }
        }
        let want: Vec<F> = x.rows().into_iter().map(|r| r.iter().zip(&centre).fold(F::zero(), |s, (&v, &c)| s + (v - c) * (v - c))).collect();
        assert_eq!(xp.norms(), &want[..]);
    }

    fn check_products<F: Real>(n: usize, m: usize, d: usize, ks: std::ops::Range<usize>) {
        let x = Array2::from_shape_fn((n, d), |(i, k)| F::of(((i * 7 + k * 3) % 11) as f64 - 5.0));
        // Packing the columns of xᵀ is packing the rows of x.
        let xp = Panels::transposed(x.t()).unwrap();
        assert_eq!(xp.data, Panels::references(x.view(), &vec![F::zero(); d]).unwrap().data);
        // A (m × ks) inside a wider matrix, read as rows or as the columns of its transpose.
        let lda = 303;
        let at = |i: usize, k: usize| F::of((((i * lda + k) * 5) % 13) as f64 - 6.0);
        let rows_major: Vec<F> = (0..(m - 1) * lda + ks.len()).map(|j| at(j / lda, j % lda)).collect();
        let cols_major: Vec<F> = (0..ks.len().max(1) * lda).map(|j| if j % lda < m { at(j % lda, j / lda) } else { F::nan() }).collect();
        let (w, panels) = (xp.width(), xp.padded_rows() / xp.width());
        // Every panel but the first; unwritten entries must stay NaN.
        let ldc = (panels - 1) * w + 5;
        for (a, layout) in [(&rows_major, Layout::Rows(lda)), (&cols_major, Layout::Columns(lda))] {
            let mut out = vec![F::nan(); (m + 1) * ldc];
            products(a, layout, m, &xp, 1..panels, ks.clone(), F::of(-0.5), &mut out, ldc);
            for i in 0..m {
                for j in w..n {
                    // Small integers and halves: every sum is exact in any order.
                    let want: f64 = -0.5 * ks.clone().map(|k| at(i, k - ks.start).f64() * x[(j, k)].f64()).sum::<f64>();
                    assert_eq!(out[i * ldc + j - w].f64(), want, "{layout:?} {i} {j}");
                }
                // The padding rows of the last panel give zeros.
                for j in n..panels * w {
                    assert_eq!(out[i * ldc + j - w].f64(), 0.0);
                }
            }
            assert!(out[m * ldc..].iter().all(|v| v.is_nan()), "rows past `rows` are not written");
        }
    }

    #[test]
    fn products_equal_the_exact_products() {
        // Partial row groups and panels, every feature or a range of them, no feature at all.
        for (n, m, d, ks) in [(17, 1, 3, 0..3), (40, 13, 300, 0..300), (33, 6, 129, 7..100), (20, 12, 64, 64..64), (26, 8, 1, 0..1)] {
            check_products::<f32>(n, m, d, ks.clone());
            check_products::<f64>(n, m, d, ks);
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn avx512_products_have_the_bits_of_the_avx2_kernel() {
        use std::arch::is_x86_feature_detected as has;
        if !(has!("avx512f") && has!("avx2") && has!("fma")) {
            return;
        }
        fn bits<F: Real>() {
            // Rounded sums (not exact ones): the same multiply-adds in the same order, or not.
            let (n, m, d) = (45, 29, 70);
            let x = Array2::from_shape_fn((n, d), |(i, k)| F::of(((i * 31 + k * 17) % 97) as f64 / 7.0 - 6.3));
            let xp = Panels::transposed(x.t()).unwrap();
            let a: Vec<F> = (0..m * d).map(|j| F::of(((j * 13) % 89) as f64 / 3.0 - 14.1)).collect();
            let ldc = xp.padded_rows();
            for layout in [Layout::Rows(d), Layout::Columns(m)] {
                let (mut got, mut want) = (vec![F::nan(); m * ldc], vec![F::nan(); m * ldc]);
                let panels = 0..xp.padded_rows() / xp.width();
                // SAFETY: the CPU has the features (checked above).
                unsafe { products_avx512(&a, layout, m, &xp, panels.clone(), 3..d, F::of(0.7), &mut got, ldc) };
                unsafe { products_avx2(&a, layout, m, &xp, panels, 3..d, F::of(0.7), &mut want, ldc) };
                assert!(got.iter().zip(&want).all(|(g, w)| g.f64().to_bits() == w.f64().to_bits()), "{layout:?}");
            }
        }
        bits::<f32>();
        bits::<f64>();
    }

    #[test]
    fn tiles_of_dots_equal_the_exact_products() {
        // Partial panels on both sides, and d across several feature slices (256 f32, 128 f64).
        for (n, m, d) in [(1, 1, 1), (17, 7, 3), (40, 13, 300), (9, 6, 129)] {
            check::<f32>(n, m, d);
            check::<f64>(n, m, d);
        }
    }
}

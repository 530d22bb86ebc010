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
use std::ops::Range;

/// Queries per panel (rows of the micro-kernel).
const MR: usize = 6;
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
        let mut p = Panels { data: Vec::new(), rows: 0, dim: x.ncols(), width: nr::<F>(), norms: Vec::new() };
        p.data = memory::try_vec("packed samples", &[x.nrows().div_ceil(p.width) * p.width, x.ncols()], F::zero())?;
        p.fill(x, centre);
        Ok(p)
    }

    /// An empty query side, refilled block by block with [`Panels::repack`].
    pub fn queries(dim: usize) -> Self {
        Panels { data: Vec::new(), rows: 0, dim, width: MR, norms: Vec::new() }
    }

    /// An empty reference side, refilled block by block with [`Panels::repack`].
    pub fn reference_blocks() -> Self {
        Panels { data: Vec::new(), rows: 0, dim: 0, width: nr::<F>(), norms: Vec::new() }
    }

    /// Repack with the rows of `q` minus `centre` (as many features as `q` has columns).
    pub fn repack(&mut self, q: ArrayView2<F>, centre: &[F]) {
        self.dim = q.ncols();
        self.data.clear();
        self.data.resize(q.nrows().div_ceil(self.width) * self.width * self.dim, F::zero());
        self.fill(q, centre);
    }

    fn fill(&mut self, x: ArrayView2<F>, centre: &[F]) {
        let (w, d) = (self.width, self.dim);
        assert!(centre.len() == d && x.ncols() == d, "a centre per feature");
        self.rows = x.nrows();
        self.norms.clear();
        for (r, row) in x.rows().into_iter().enumerate() {
            let base = (r / w) * d * w + r % w;
            let mut s = F::zero();
            for (k, (&v, &c)) in row.iter().zip(centre).enumerate() {
                let t = v - c;
                self.data[base + k * w] = t;
                s = s + t * t;
            }
            self.norms.push(s);
        }
    }

    /// Squared norms of the centred rows.
    pub fn norms(&self) -> &[F] {
        &self.norms
    }

    /// Rows including the padding of the last panel.
    pub fn padded_rows(&self) -> usize {
        self.rows.div_ceil(self.width) * self.width
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

/// Rows of the query side for `n` queries: whole groups of the micro-kernel's height.
pub const fn query_rows(n: usize) -> usize {
    n.div_ceil(MR) * MR
}

/// out[i · ldc + (p − p0)·w + j] = Σ_(k ∈ ks) a[i · LDA + k − ks.start] · x_(p·w + j, k) for the
/// `rows` rows of the row-major `a` (see [`query_rows`])
/// and the panels `p ∈ panels` of `x` (w = `x.width()`), uncentred: `x` must be packed with a
/// zero centre. One operand packed once, the other read in place with a row stride known at
/// compile time (so the micro-kernel addresses its rows from one pointer) — for products
/// repeated over tiles of one matrix (attention's P·V), where a general matrix product would
/// repack both operands on every call.
pub fn row_products<F: Real, const LDA: usize>(a: &[F], rows: usize, x: &Panels<F>, panels: Range<usize>, ks: Range<usize>, out: &mut [F], ldc: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports the features the function is compiled for.
            return unsafe { row_products_avx2::<F, LDA>(a, rows, x, panels, ks, out, ldc) };
        }
    }
    row_products_with::<F, LDA, false>(a, rows, x, panels, ks, out, ldc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_products_avx2<F: Real, const LDA: usize>(a: &[F], rows: usize, x: &Panels<F>, panels: Range<usize>, ks: Range<usize>, out: &mut [F], ldc: usize) {
    row_products_with::<F, LDA, true>(a, rows, x, panels, ks, out, ldc)
}

#[inline(always)]
fn row_products_with<F: Real, const LDA: usize, const FMA: bool>(a: &[F], rows: usize, x: &Panels<F>, panels: Range<usize>, ks: Range<usize>, out: &mut [F], ldc: usize) {
    if std::mem::size_of::<F>() == 4 {
        row_products_nr::<F, LDA, FMA, 16>(a, rows, x, panels, ks, out, ldc)
    } else {
        row_products_nr::<F, LDA, FMA, 8>(a, rows, x, panels, ks, out, ldc)
    }
}

#[inline(always)]
fn row_products_nr<F: Real, const LDA: usize, const FMA: bool, const NR: usize>(
    a: &[F], rows: usize, x: &Panels<F>, panels: Range<usize>, ks: Range<usize>, out: &mut [F], ldc: usize,
) {
    assert!(x.width == NR && rows % MR == 0 && ks.end <= x.dim);
    let (d, kn) = (x.dim, ks.len());
    for (jp, p) in panels.enumerate() {
        let b = &x.data[(p * d + ks.start) * NR..(p * d + ks.end) * NR];
        for ip in 0..rows / MR {
            let r = &a[ip * MR * LDA..][..(MR - 1) * LDA + kn];
            let acc = micro::<F, FMA, NR>((0..kn).map(|k| std::array::from_fn(|i| r[i * LDA + k])), b);
            for (i, acc) in acc.iter().enumerate() {
                out[(ip * MR + i) * ldc + jp * NR..][..NR].copy_from_slice(acc);
            }
        }
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

    fn check_rows<F: Real>(n: usize, m: usize, d: usize, ks: std::ops::Range<usize>) {
        let x = Array2::from_shape_fn((n, d), |(i, k)| F::of(((i * 7 + k * 3) % 11) as f64 - 5.0));
        let xp = Panels::references(x.view(), &vec![F::zero(); d]).unwrap();
        // Rows of `a` hold the columns ks of a matrix, with a stride wider than ks.
        const LDA: usize = 303;
        let (rows, lda) = (query_rows(m), LDA);
        let a: Vec<F> = (0..rows * lda).map(|i| if i / lda < m { F::of(((i * 5) % 13) as f64 - 6.0) } else { F::zero() }).collect();
        let (w, panels) = (xp.width(), xp.padded_rows() / xp.width());
        // Every panel but the first.
        let ldc = (panels - 1) * w + 5;
        let mut out = vec![F::nan(); rows * ldc];
        row_products::<F, LDA>(&a, rows, &xp, 1..panels, ks.clone(), &mut out, ldc);
        for i in 0..m {
            for j in w..n {
                let want: f64 = ks.clone().map(|k| a[i * lda + k - ks.start].f64() * x[(j, k)].f64()).sum();
                assert_eq!(out[i * ldc + j - w].f64(), want, "{i} {j}");
            }
            // The padding keys of the last panel give zeros.
            for j in n..panels * w {
                assert_eq!(out[i * ldc + j - w].f64(), 0.0);
            }
        }
    }

    #[test]
    fn row_products_equal_the_exact_products() {
        // Partial row groups and panels, every feature or a range of them.
        for (n, m, d, ks) in [(17, 1, 3, 0..3), (40, 13, 300, 0..300), (33, 6, 129, 7..100), (20, 12, 64, 64..64)] {
            check_rows::<f32>(n, m, d, ks.clone());
            check_rows::<f64>(n, m, d, ks);
        }
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

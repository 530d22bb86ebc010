//! Self-local means on the pixel grid (SPEC §5): the bilateral filter and non-local means.
//!
//! On an image the neighbourhood of a pixel is a window of the grid, so these are windowed
//! pixel loops rather than all-pairs engine calls: the weight of pixel j in the mean at pixel i
//! is K_x(x_i, x_j)·K_y(f(x_i), f(x_j)) (bilateral) or exp(−‖P_i − P_j‖²) of two patches
//! (non-local means). Both run in parallel over output rows; every pixel is computed by one
//! thread in a fixed order, so results are bit-identical for any thread count.
//!
//! Border handling and the patch kernel are prepared by the caller (the Python layer pads with
//! NumPy, which defines the border modes once and for all); these loops read a padded image.

use crate::error::{LocalizationError, Result};
use crate::real::Real;
use crate::rows::row_major;
use crate::memory;
use crate::parallel::Monitor;
use ndarray::{Array3, ArrayView2, ArrayView3};
use rayon::prelude::*;

/// How the range (colour) weight K_y is evaluated from the colour difference of two pixels.
pub enum RangeWeight<F> {
    /// exp(−‖f_i − f_j‖² · `inv_two_var`): the exact Gaussian.
    Gaussian { inv_two_var: F },
    /// scikit-image's look-up table: weight = lut[min(⌊‖f_i − f_j‖ · scale⌋, len − 1)].
    /// Kept so that its output can be reproduced exactly (oracle tests).
    Table { lut: Vec<F>, scale: F },
}

/// Bilateral filter of an image padded by `radius` pixels on each side.
///
/// `padded` is channels × (rows + 2r) × (cols + 2r) (planar); `spatial` is the (2r+1)×(2r+1) table of
/// K_x over the window offsets. Returns rows × cols × channels: at every pixel
/// Σ_j K_x K_y f_j / Σ_j K_x K_y over the window.
pub fn bilateral<F: Real>(padded: ArrayView3<F>, spatial: ArrayView2<F>, range: &RangeWeight<F>, mon: &Monitor) -> Result<Array3<F>> {
    bilateral_with(Simd::detect(), padded, spatial, range, mon)
}

fn bilateral_with<F: Real>(
    simd: Simd, padded: ArrayView3<F>, spatial: ArrayView2<F>, range: &RangeWeight<F>, mon: &Monitor) -> Result<Array3<F>> {
    let (nc, hp, wp) = padded.dim();
    let k = spatial.nrows();
    if k == 0 || k % 2 == 0 || spatial.ncols() != k {
        return Err(LocalizationError::shape("spatial", "an odd square window", format!("{:?}", spatial.dim())));
    }
    if nc == 0 {
        return Err(LocalizationError::EmptyInput { name: "image" });
    }
    let r = k / 2;
    if hp <= 2 * r || wp <= 2 * r {
        return Err(LocalizationError::shape("image", format!("padding of {r} pixels on each side"), format!("{:?}", padded.dim())));
    }
    if let RangeWeight::Table { lut, .. } = range {
        if lut.is_empty() {
            return Err(LocalizationError::EmptyInput { name: "color_lut" });
        }
    }
    let (rows, cols) = (hp - 2 * r, wp - 2 * r);
    let (img, sp) = (row_major(padded.view()), row_major(spatial.view()));
    let (img, sp) = (&img[..], &sp[..]);
    let mut out = memory::try_vec("filtered image", &[rows, cols, nc], F::zero())?;
    mon.set_progress(0, rows);
    out.par_chunks_mut((cols * nc).max(1)).enumerate().try_for_each(|(row, orow)| {
        mon.check()?;
        simd.run(&BilateralRow { img, wp, plane: hp * wp, k, sp, range, row }, orow, nc);
        mon.advance(1);
        Ok(())
    })?;
    image_of(out, (rows, cols, nc))
}

/// Schraudolph's exponential as scikit-image computes it (`_shared/fast_exp.h`): the high
/// 32 bits of an IEEE double set to ⌊2²⁰/ln2 · y⌋ + (1023·2²⁰ − 60801), the low bits zero.
/// Relative error up to about 4 %; reproduced so that `nl_means` can match scikit-image.
#[inline(always)]
pub fn schraudolph_exp(y: f64) -> f64 {
    const EXP_A: f64 = 1_512_775.395_195_185_6;
    const EXP_BC: i32 = 1_072_632_447;
    // `as i32` truncates toward zero and saturates, like the C cast on x86-64 for in-range
    // values (and the hardware's INT_MIN for out-of-range ones).
    let hi = ((EXP_A * y) as i32).wrapping_add(EXP_BC);
    f64::from_bits(((hi as u32) as u64) << 32)
}

/// Patch distance running sum above which scikit-image drops a candidate patch.
const DISTANCE_CUTOFF: f64 = 5.0;

/// Non-local means of an image given in planar layout and padded by s/2 on each side.
///
/// `padded` is channels × (rows + s − 1) × (cols + s − 1); `patch_weights` is the s×s patch
/// kernel, already divided by (channels · Σw · h²). Each pixel is the mean of the pixels within
/// `patch_distance` (a square search window clipped to the image), weighted by
/// exp(−max(d² − 2σ², 0)) with d² = Σ_patch w·(P_i − P_j)² (`var2` = 2σ² enters inside the sum, as
/// in scikit-image). With `exact = false` the weights are those of scikit-image's
/// `denoise_nl_means(fast_mode=False)`: its fast exponential and its early cut-off (a patch
/// whose running distance exceeds 5 at the start of a patch row gets weight 0). With
/// `exact = true` the weight is the true exponential and no patch is cut. Returns
/// rows × cols × channels.
pub fn nl_means<F: Real>(
    padded: ArrayView3<F>, patch_weights: ArrayView2<F>, patch_distance: usize, var2: F, exact: bool, mon: &Monitor,
) -> Result<Array3<F>> {
    let (nc, hp, wp) = padded.dim();
    let s = patch_weights.nrows();
    if s == 0 || s % 2 == 0 || patch_weights.ncols() != s {
        return Err(LocalizationError::shape("patch_weights", "an odd square patch", format!("{:?}", patch_weights.dim())));
    }
    if nc == 0 {
        return Err(LocalizationError::EmptyInput { name: "image" });
    }
    if hp < s || wp < s {
        return Err(LocalizationError::shape("image", format!("padding of {} pixels on each side", s / 2), format!("{:?}", padded.dim())));
    }
    let (rows, cols) = (hp - (s - 1), wp - (s - 1));
    // The search window is clipped to the image: a larger distance searches the same pixels.
    let d = patch_distance.min(rows.max(cols));
    let (img, pw) = (row_major(padded.view()), row_major(patch_weights.view()));
    let (img, pw) = (&img[..], &pw[..]);
    let plane = hp * wp;
    let mut out = memory::try_vec("denoised image", &[rows, cols, nc], F::zero())?;
    let simd = Simd::detect();
    mon.set_progress(0, rows);
    out.par_chunks_mut((cols * nc).max(1)).enumerate().try_for_each(|(row, orow)| {
        mon.check()?;
        simd.run(&NlRow { img, wp, plane, nc, s, d, rows, cols, pw, var2, exact, row }, orow, nc);
        mon.advance(1);
        Ok(())
    })?;
    image_of(out, (rows, cols, nc))
}

/// A filter's output rows as an image.
fn image_of<F>(out: Vec<F>, shape: (usize, usize, usize)) -> Result<Array3<F>> {
    Array3::from_shape_vec(shape, out).map_err(|e| LocalizationError::shape("image", format!("{shape:?}"), e))
}

/// The instruction set the row loops are compiled for, chosen once per call at run time.
/// Rust never contracts a·b + c into an FMA on its own, so the arithmetic (and the
/// scikit-image-compatible results) is identical on every path, except that the exact
/// exponential runs its polynomial in fused multiply-adds where the CPU has them.
#[derive(Clone, Copy)]
enum Simd {
    Baseline,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Simd {
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512dq") && has!("avx512vl") && has!("avx2") && has!("fma") {
                return Simd::Avx512;
            }
            if has!("avx2") && has!("fma") {
                return Simd::Avx2;
            }
        }
        Simd::Baseline
    }

    /// Run one row kernel compiled for this instruction set, with the common channel counts
    /// as constants so the inner loops are specialised.
    #[inline(always)]
    fn run<F, K: RowKernel<F>>(self, k: &K, orow: &mut [F], nc: usize) {
        match self {
            Simd::Baseline => by_channels::<F, K, false>(k, orow, nc),
            // SAFETY: the features were detected at run time in `detect`.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { run_avx2(k, orow, nc) },
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => unsafe { run_avx512(k, orow, nc) },
        }
    }
}

/// One output row; `FMA` as in `Real::exp_with`.
trait RowKernel<F> {
    fn run<const FMA: bool>(&self, orow: &mut [F], nc: usize);
}

#[inline(always)]
fn by_channels<F, K: RowKernel<F>, const FMA: bool>(k: &K, orow: &mut [F], nc: usize) {
    match nc {
        1 => k.run::<FMA>(orow, 1),
        3 => k.run::<FMA>(orow, 3),
        _ => k.run::<FMA>(orow, nc),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2<F, K: RowKernel<F>>(k: &K, orow: &mut [F], nc: usize) {
    by_channels::<F, K, true>(k, orow, nc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
unsafe fn run_avx512<F, K: RowKernel<F>>(k: &K, orow: &mut [F], nc: usize) {
    by_channels::<F, K, true>(k, orow, nc)
}

struct BilateralRow<'a, F> {
    img: &'a [F],
    wp: usize,
    plane: usize,
    k: usize,
    sp: &'a [F],
    range: &'a RangeWeight<F>,
    row: usize,
}

impl<F: Real> RowKernel<F> for BilateralRow<'_, F> {
    #[inline(always)]
    fn run<const FMA: bool>(&self, orow: &mut [F], nc: usize) {
        match self.range {
            RangeWeight::Gaussian { inv_two_var } => self.gaussian::<FMA>(orow, nc, *inv_two_var),
            RangeWeight::Table { lut, scale } => self.table(orow, nc, lut, *scale),
        }
    }
}

impl<F: Real> BilateralRow<'_, F> {
    /// One window offset at a time across the whole output row: the inner loops run over
    /// contiguous pixels (long enough to vectorise, unlike a 13-wide window row), and every
    /// pixel still sums its window in the same fixed offset order.
    #[inline(always)]
    fn gaussian<const FMA: bool>(&self, orow: &mut [F], nc: usize, inv: F) {
        let (img, wp, plane, k, row) = (self.img, self.wp, self.plane, self.k, self.row);
        let r = k / 2;
        let cols = orow.len() / nc;
        let mut den = vec![F::zero(); cols];
        let mut num = vec![F::zero(); cols * nc];
        let mut d2 = vec![F::zero(); cols];
        let centre = |ch: usize| &img[ch * plane + (row + r) * wp + r..][..cols];
        for wr in 0..k {
            for wc in 0..k {
                let spw = self.sp[wr * k + wc];
                let line = |ch: usize| &img[ch * plane + (row + wr) * wp + wc..][..cols];
                if nc == 1 {
                    // Gray: four plain zipped slices, the simplest shape for the vectoriser.
                    for (((dn, nm), &c), &v) in den.iter_mut().zip(num.iter_mut()).zip(centre(0)).zip(line(0)) {
                        let t = c - v;
                        let w = spw * (-(t * t * inv)).exp_with::<FMA>();
                        *dn = *dn + w;
                        *nm = *nm + w * v;
                    }
                    continue;
                }
                d2.iter_mut().for_each(|v| *v = F::zero());
                for ch in 0..nc {
                    for ((dd, &c), &v) in d2.iter_mut().zip(centre(ch)).zip(line(ch)) {
                        let t = c - v;
                        *dd = *dd + t * t;
                    }
                }
                for (dd, dn) in d2.iter_mut().zip(den.iter_mut()) {
                    *dd = spw * (-(*dd * inv)).exp_with::<FMA>(); // now the weight
                    *dn = *dn + *dd;
                }
                for ch in 0..nc {
                    for ((nm, &w), &v) in num[ch * cols..][..cols].iter_mut().zip(&d2).zip(line(ch)) {
                        *nm = *nm + w * v;
                    }
                }
            }
        }
        for (col, o) in orow.chunks_exact_mut(nc).enumerate() {
            for ch in 0..nc {
                o[ch] = num[ch * cols + col] / den[col];
            }
        }
    }

    /// scikit-image's order of operations, for bit-identical oracle results.
    fn table(&self, orow: &mut [F], nc: usize, lut: &[F], scale: F) {
        let (img, wp, plane, k, row) = (self.img, self.wp, self.plane, self.k, self.row);
        let r = k / 2;
        let cols = orow.len() / nc;
        let last = lut.len() - 1;
        let mut acc = vec![F::zero(); nc];
        for col in 0..cols {
            let centre = (row + r) * wp + col + r;
            acc.iter_mut().for_each(|a| *a = F::zero());
            let mut total = F::zero();
            for wr in 0..k {
                for wc in 0..k {
                    let px = (row + wr) * wp + col + wc;
                    let mut d2 = F::zero();
                    for ch in 0..nc {
                        let t = img[ch * plane + centre] - img[ch * plane + px];
                        d2 = d2 + t * t;
                    }
                    let bin = (d2.sqrt() * scale).to_usize().unwrap_or(last).min(last);
                    let w = self.sp[wr * k + wc] * lut[bin];
                    for ch in 0..nc {
                        acc[ch] = acc[ch] + img[ch * plane + px] * w;
                    }
                    total = total + w;
                }
            }
            for ch in 0..nc {
                orow[col * nc + ch] = acc[ch] / total;
            }
        }
    }
}

struct NlRow<'a, F> {
    img: &'a [F],
    wp: usize,
    plane: usize,
    nc: usize,
    s: usize,
    d: usize,
    rows: usize,
    cols: usize,
    pw: &'a [F],
    var2: F,
    exact: bool,
    row: usize,
}

impl<F: Real> NlRow<'_, F> {
    #[inline(always)]
    fn weight_of<const FMA: bool>(&self, dist: F, cut: bool) -> F {
        let dist = if dist > F::zero() { dist } else { F::zero() };
        if self.exact {
            (-dist).exp_with::<FMA>()
        } else if cut {
            F::zero()
        } else {
            // In f32 scikit-image evaluates its exponential in double and rounds the result.
            F::of(schraudolph_exp(-dist.f64()))
        }
    }

}

impl<F: Real> RowKernel<F> for NlRow<'_, F> {
    /// One output row. The loops run candidate row i, then column shift δ = j − col, then the
    /// patch (row r, column c, channel), and innermost over all output columns at once: long,
    /// contiguous, vectorisable loops. Per pixel the candidates are still visited in
    /// scikit-image's order (i, then j ascending) and each patch distance is summed in its
    /// order (r, c, channel), with its cut-off test at the start of every patch row.
    #[inline(always)]
    fn run<const FMA: bool>(&self, orow: &mut [F], nc: usize) {
        let (img, wp, plane, s, row, cols) = (self.img, self.wp, self.plane, self.s, self.row, self.cols);
        let (pw, var2, exact) = (self.pw, self.var2, self.exact);
        debug_assert_eq!(nc, self.nc);
        let off = s / 2;
        let d = self.d as isize;
        let cutoff = F::of(DISTANCE_CUTOFF);
        let mut dist = vec![F::zero(); cols];
        let mut cut = vec![false; cols];
        let mut wsum = vec![F::zero(); cols];
        let mut acc = vec![F::zero(); cols * nc];
        let (i0, i1) = (row.saturating_sub(self.d), (row + self.d + 1).min(self.rows));
        for i in i0..i1 {
            for delta in -d..=d {
                // Output columns whose candidate col + δ lies inside the image.
                let c0 = (-delta).max(0) as usize;
                let c1 = (cols as isize - delta).min(cols as isize).max(0) as usize;
                if c0 >= c1 {
                    continue;
                }
                let n = c1 - c0;
                let j0 = (c0 as isize + delta) as usize;
                let (dist, cut) = (&mut dist[..n], &mut cut[..n]);
                dist.iter_mut().for_each(|v| *v = F::zero());
                cut.iter_mut().for_each(|v| *v = false);
                for r in 0..s {
                    if !exact {
                        let mut alive = false;
                        for (k, &v) in cut.iter_mut().zip(dist.iter()) {
                            *k |= v > cutoff;
                            alive |= !*k;
                        }
                        if !alive {
                            break;
                        }
                    }
                    for c in 0..s {
                        let wrc = pw[r * s + c];
                        for ch in 0..nc {
                            let base = ch * plane;
                            let a = &img[base + (row + r) * wp + c0 + c..][..n];
                            let b = &img[base + (i + r) * wp + j0 + c..][..n];
                            for ((dd, &x), &y) in dist.iter_mut().zip(a).zip(b) {
                                let t = x - y;
                                *dd = *dd + wrc * (t * t - var2);
                            }
                        }
                    }
                }
                let centre = (i + off) * wp + j0 + off;
                for (l, (&dv, &cv)) in dist.iter().zip(cut.iter()).enumerate() {
                    let w = self.weight_of::<FMA>(dv, cv);
                    let col = c0 + l;
                    wsum[col] = wsum[col] + w;
                    for ch in 0..nc {
                        acc[col * nc + ch] = acc[col * nc + ch] + w * img[ch * plane + centre + l];
                    }
                }
            }
        }
        for (col, o) in orow.chunks_exact_mut(nc).enumerate() {
            for ch in 0..nc {
                o[ch] = acc[col * nc + ch] / wsum[col];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array2, Array3};

    fn pad_edge(img: &Array3<f64>, r: usize) -> Array3<f64> {
        let (h, w, c) = img.dim();
        Array3::from_shape_fn((h + 2 * r, w + 2 * r, c), |(i, j, k)| {
            let ii = (i as isize - r as isize).clamp(0, h as isize - 1) as usize;
            let jj = (j as isize - r as isize).clamp(0, w as isize - 1) as usize;
            img[[ii, jj, k]]
        })
    }

    fn noisy(h: usize, w: usize, c: usize) -> Array3<f64> {
        Array3::from_shape_fn((h, w, c), |(i, j, k)| ((i * 7 + j * 13 + k * 5) % 11) as f64 / 10.0 + if i > h / 2 { 0.5 } else { 0.0 })
    }

    #[test]
    fn schraudolph_matches_reference_points() {
        // y = 0: high word 1072632447 = 1022·2²⁰ + 987775 → (1 + 987775/2²⁰)/2.
        assert_eq!(schraudolph_exp(0.0), 0.971_007_823_944_091_8);
        for y in [-0.3, -1.0, -2.5, -4.9] {
            let rel = (schraudolph_exp(y) - f64::exp(y)).abs() / f64::exp(y);
            assert!(rel < 0.07, "{y} {rel}");
        }
    }

    #[test]
    fn bilateral_matches_direct_formula() {
        let img = noisy(9, 7, 3);
        let r = 2;
        let (ss, sr) = (1.3, 0.4);
        let sp = Array2::from_shape_fn((2 * r + 1, 2 * r + 1), |(a, b)| {
            let (da, db) = (a as f64 - r as f64, b as f64 - r as f64);
            (-(da * da + db * db) / (2.0 * ss * ss)).exp()
        });
        let padded = pad_edge(&img, r);
        let planar = padded.view().permuted_axes([2, 0, 1]).as_standard_layout().to_owned();
        let range = RangeWeight::Gaussian { inv_two_var: 1.0 / (2.0 * sr * sr) };
        let got = bilateral(planar.view(), sp.view(), &range, &Monitor::default()).unwrap();
        // the portable path (no FMA) agrees with the one chosen for this CPU to rounding
        let portable = bilateral_with(Simd::Baseline, planar.view(), sp.view(), &range, &Monitor::default()).unwrap();
        assert!(got.iter().zip(&portable).all(|(a, b)| (a - b).abs() < 1e-14));
        let (h, w, nc) = img.dim();
        for i in 0..h {
            for j in 0..w {
                let (mut num, mut den) = (vec![0.0; nc], 0.0);
                for a in 0..2 * r + 1 {
                    for b in 0..2 * r + 1 {
                        let d2: f64 = (0..nc).map(|k| (padded[[i + r, j + r, k]] - padded[[i + a, j + b, k]]).powi(2)).sum();
                        let wgt = sp[[a, b]] * (-d2 / (2.0 * sr * sr)).exp();
                        den += wgt;
                        for k in 0..nc {
                            num[k] += wgt * padded[[i + a, j + b, k]];
                        }
                    }
                }
                for k in 0..nc {
                    assert!((got[[i, j, k]] - num[k] / den).abs() < 1e-12);
                }
            }
        }
    }

    #[test]
    fn nl_means_exact_matches_direct_formula_and_is_thread_invariant() {
        let (h, w, nc, s, d) = (12, 11, 2, 3, 4);
        let img = noisy(h, w, nc);
        let o = s / 2;
        let padded_hwc = pad_edge(&img, o);
        let padded = padded_hwc.view().permuted_axes([2, 0, 1]).as_standard_layout().to_owned();
        let pw = Array2::from_elem((s, s), 1.0 / (s * s * nc) as f64 / 0.25);
        let var2 = 0.01;
        let mon = Monitor::default();
        let got = nl_means(padded.view(), pw.view(), d, var2, true, &mon).unwrap();
        assert_eq!(mon.progress(), (h, h), "every row reported");
        for i in 0..h {
            for j in 0..w {
                let (mut num, mut den) = (vec![0.0; nc], 0.0);
                for a in i.saturating_sub(d)..(i + d + 1).min(h) {
                    for b in j.saturating_sub(d)..(j + d + 1).min(w) {
                        let mut dist = 0.0;
                        for r in 0..s {
                            for c in 0..s {
                                for k in 0..nc {
                                    let t = padded_hwc[[i + r, j + c, k]] - padded_hwc[[a + r, b + c, k]];
                                    dist += pw[[r, c]] * (t * t - var2);
                                }
                            }
                        }
                        let wgt = (-f64::max(dist, 0.0)).exp();
                        den += wgt;
                        for k in 0..nc {
                            num[k] += wgt * img[[a, b, k]];
                        }
                    }
                }
                for k in 0..nc {
                    assert!((got[[i, j, k]] - num[k] / den).abs() < 1e-12);
                }
            }
        }
        let one = crate::parallel::install(1, || nl_means(padded.view(), pw.view(), d, var2, false, &Monitor::default()).unwrap()).unwrap();
        let two = crate::parallel::install(3, || nl_means(padded.view(), pw.view(), d, var2, false, &Monitor::default()).unwrap()).unwrap();
        assert_eq!(one, two);
    }

    #[test]
    fn bad_shapes_are_errors() {
        let img = Array3::<f64>::zeros((3, 3, 1));
        assert!(nl_means(img.view(), Array2::zeros((2, 2)).view(), 1, 0.0, false, &Monitor::default()).is_err());
        assert!(nl_means(img.view(), Array2::zeros((5, 5)).view(), 1, 0.0, false, &Monitor::default()).is_err());
        assert!(bilateral(img.view(), Array2::zeros((3, 3)).view(), &RangeWeight::Table { lut: vec![], scale: 1.0 }, &Monitor::default()).is_err());
        assert!(bilateral(img.view(), Array2::zeros((5, 5)).view(), &RangeWeight::Gaussian { inv_two_var: 1.0 }, &Monitor::default()).is_err());
    }
}




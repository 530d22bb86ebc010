//! Distances between rows, and what keeps them right.
//!
//! Low dimensions use the direct difference Σ (q_k − x_k)², right to the rounding of the
//! distance itself. High dimensions use the blocked product ‖q‖² + ‖x‖² − 2 q·x (a matrix
//! multiply per tile), which cancels when distances are small against the norms (points near
//! a common offset, queries far from the references). So the product runs on coordinates
//! centred on the reference mean, and every entry carries the rounding bound
//! `product_error(d) · (‖q − μ‖² + ‖x − μ‖²)` (see [`product_error`]): callers re-rank or
//! recompute by direct differences where that bound is not small against the scale that
//! matters to them (the bandwidth of a kernel, the k-th distance of a neighbour search).
//!
//! Coordinates far from 1 (say 1e±200) overflow or underflow when squared. The methods are
//! scale invariant, so [`Scale`] maps coordinates, bandwidths and radii by an exact power of
//! two into the range where nothing does, and distances back the same way: only the
//! exponent changes.

pub mod packed;

use crate::error::Result;
use crate::memory;
use crate::real::Real;
use ndarray::{linalg::general_mat_mul, Array2, ArrayView2, ArrayViewMut2, CowArray, Ix2};

/// Dimension above which tiles of squared distances come from a matrix product.
pub const GEMM_MIN_DIM: usize = 16;

#[inline(always)]
pub fn sq_euclidean<F: Real>(a: &[F], b: &[F]) -> F {
    let mut s = F::zero();
    for (x, y) in a.iter().zip(b) {
        let t = *x - *y;
        s = s + t * t;
    }
    s
}

/// `sq_euclidean` with eight interleaved partial sums, so that long rows vectorise: the exact
/// recomputation of the product path in high dimensions.
#[inline]
pub fn sq_euclidean_wide<F: Real>(a: &[F], b: &[F]) -> F {
    #[cfg(target_arch = "x86_64")]
    {
        if a.len() >= 32 && std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports the feature the function is compiled for. Without
            // `fma` nothing is fused: each lane does the same operations in the same order as
            // the baseline build, so the result is the same bits, in wider registers.
            return unsafe { sq_euclidean_wide_avx2(a, b) };
        }
    }
    sq_euclidean_lanes(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sq_euclidean_wide_avx2<F: Real>(a: &[F], b: &[F]) -> F {
    sq_euclidean_lanes(a, b)
}

#[inline(always)]
fn sq_euclidean_lanes<F: Real>(a: &[F], b: &[F]) -> F {
    const W: usize = 8;
    let b = &b[..a.len()];
    let mut acc = [F::zero(); W];
    let (ca, cb) = (a.chunks_exact(W), b.chunks_exact(W));
    let tail = sq_euclidean(ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..W {
            let t = x[l] - y[l];
            acc[l] = acc[l] + t * t;
        }
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

#[inline(always)]
pub fn dot<F: Real>(a: &[F], b: &[F]) -> F {
    let mut s = F::zero();
    for (x, y) in a.iter().zip(b) {
        s = s + *x * *y;
    }
    s
}

pub fn row_sq_norms<F: Real>(x: ArrayView2<F>) -> Vec<F> {
    x.rows().into_iter().map(|r| r.iter().fold(F::zero(), |s, &v| s + v * v)).collect()
}

/// Column means, summed in f64 (row by row: the rows are contiguous).
pub fn column_means<F: Real>(x: ArrayView2<F>) -> Vec<F> {
    let mut sum = vec![0.0f64; x.ncols()];
    for row in x.rows() {
        sum.iter_mut().zip(row).for_each(|(s, &v)| *s += v.f64());
    }
    let n = x.nrows().max(1) as f64;
    sum.into_iter().map(|s| F::of(s / n)).collect()
}

/// Rows minus `centre`, in a new array (as large as `x`: a fallible allocation).
pub fn centred<F: Real>(x: ArrayView2<F>, centre: &[F]) -> Result<Array2<F>> {
    let mut out = memory::try_copy("X", x)?;
    centre_rows(out.view_mut(), centre);
    Ok(out)
}

/// Subtracts `centre` from every row of `x`.
pub fn centre_rows<F: Real>(mut x: ArrayViewMut2<F>, centre: &[F]) {
    for mut row in x.rows_mut() {
        row.iter_mut().zip(centre).for_each(|(v, &c)| *v = *v - c);
    }
}

/// The factor c of the product form's error bound in d dimensions: for q̂, x̂ the centred
/// rows, |product(q̂, x̂) − sq_euclidean(q, x)| ≤ c · (‖q̂‖² + ‖x̂‖²).
///
/// With u the unit roundoff (ε/2) and γ_k = k·u/(1 − k·u): the centring moves the distance
/// by at most 4u(‖q̂‖² + ‖x̂‖²), the product's dot product and norms round by at most
/// 2(γ_d + 2u)(‖q̂‖² + ‖x̂‖²) and the direct differences by γ_{d+1}‖q − x‖² ≤
/// 2γ_{d+1}(‖q̂‖² + ‖x̂‖²): about (2d + 5)ε in all, for any summation order of the matrix
/// product. The margin to (2d + 16)ε covers the second-order terms.
pub fn product_error<F: Real>(d: usize) -> F {
    F::epsilon() * F::of((2 * d + 16) as f64)
}

/// out[i, j] = ‖q_i − x_j‖² through the product form, clamped at zero. Pass centred rows
/// (and their norms) to keep the error bound of [`product_error`].
pub fn sq_dist_tile_gemm<F: Real>(q: ArrayView2<F>, qn: &[F], x: ArrayView2<F>, xn: &[F], mut out: ArrayViewMut2<F>) {
    general_mat_mul(F::of(-2.0), &q, &x.t(), F::zero(), &mut out);
    let clamp = |t: F| if t > F::zero() { t } else { F::zero() };
    for (i, mut row) in out.rows_mut().into_iter().enumerate() {
        let a = qn[i];
        // On slices, with a plain select for the clamp, the loop vectorises reliably.
        match row.as_slice_mut() {
            Some(r) => {
                let xn = &xn[..r.len()];
                r.iter_mut().zip(xn).for_each(|(v, &b)| *v = clamp(*v + a + b))
            }
            None => row.iter_mut().zip(xn).for_each(|(v, &b)| *v = clamp(*v + a + b)),
        }
    }
}

/// v · 2^e, exact whenever the result is a normal number (also for subnormal v).
pub fn pow2<F: Real>(v: F, e: i32) -> F {
    // 2^e itself may not be representable in F: apply it in steps that are.
    let step = F::MAX_EXP - 2;
    let (mut v, mut e) = (v, e);
    while e > step {
        v = v * F::of(2f64.powi(step));
        e -= step;
    }
    while e < -step {
        v = v * F::of(2f64.powi(-step));
        e += step;
    }
    v * F::of(2f64.powi(e))
}

/// An exact rescaling by a power of two: `down` maps a quantity into the working range
/// (v · 2^−e), `up` back (v · 2^e). One (e = 0) unless the magnitudes it was made for leave
/// the comfortable range 2^±(MAX_EXP/4) of F — about 1e±77 in f64 and 4e±9 in f32 — where
/// squares, products of two such numbers and sums of up to 2^(MAX_EXP/4) of them neither
/// overflow nor lose bits to underflow. Scaling is exact, so whether it happens changes no
/// result except that the extreme cases come out right instead of inf, 0 or NaN.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Scale {
    e: i32,
}

impl Scale {
    pub const ONE: Scale = Scale { e: 0 };

    /// For magnitudes whose largest is `max_abs` (non-finite values are ignored: inputs are
    /// validated elsewhere).
    pub fn for_max<F: Real>(max_abs: f64) -> Scale {
        if !(max_abs > 0.0) || !max_abs.is_finite() {
            return Scale::ONE;
        }
        let l = max_abs.log2();
        if l.abs() <= (F::MAX_EXP / 4) as f64 {
            Scale::ONE
        } else {
            Scale { e: l.round() as i32 }
        }
    }

    /// For coordinates whose largest is `max_abs`, measured with bandwidths up to `h_max`: as
    /// `for_max`, but never scaling up so far that the bandwidth leaves the comfortable range
    /// (subnormal coordinates under h = 1 must not scale h to infinity). Scaling down is left
    /// to the coordinates: a bandwidth far above them only makes every kernel value 1.
    pub fn for_lengths<F: Real>(max_abs: f64, h_max: f64) -> Scale {
        let s = Scale::for_max::<F>(max_abs);
        if s.e >= 0 || !(h_max > 0.0) || !h_max.is_finite() {
            return s;
        }
        let floor = (h_max.log2().ceil() as i32 - F::MAX_EXP / 4).min(0);
        Scale { e: s.e.max(floor) }
    }

    /// For the entries of some arrays (coordinates of several point sets, say).
    pub fn of_arrays<F: Real>(arrays: &[ArrayView2<F>]) -> Scale {
        Scale::for_max::<F>(arrays.iter().map(|a| Scale::array_max_abs(*a)).fold(0.0, f64::max))
    }

    /// The largest finite |entry| of an array: what `of_arrays` combines, for callers that
    /// keep it for one array and combine it with others later (a prepared reference).
    pub fn array_max_abs<F: Real>(a: ArrayView2<F>) -> f64 {
        match a.as_slice() {
            Some(s) => Scale::max_abs(s),
            None => a.rows().into_iter().map(|r| Scale::max_abs(&r.to_vec())).fold(0.0, f64::max),
        }
    }

    /// The largest finite |v| (16 running maxima so that it vectorises; NaN is skipped by the
    /// comparison, an infinity is returned as such and gives `Scale::ONE`).
    fn max_abs<F: Real>(v: &[F]) -> f64 {
        let mut acc = [F::zero(); 16];
        let chunks = v.chunks_exact(16);
        let tail = chunks.remainder().iter().fold(F::zero(), |m, &x| if x.abs() > m { x.abs() } else { m });
        for c in chunks {
            for l in 0..16 {
                let a = c[l].abs();
                acc[l] = if a > acc[l] { a } else { acc[l] };
            }
        }
        acc.iter().fold(tail.f64(), |m, &a| m.max(a.f64()))
    }

    /// For some values (weights, a column of values: O(n), not hot).
    pub fn of_values<F: Real>(values: impl IntoIterator<Item = F>) -> Scale {
        let m = values.into_iter().fold(F::zero(), |m, v| if v.abs() > m { v.abs() } else { m });
        Scale::for_max::<F>(m.f64())
    }

    pub fn is_one(self) -> bool {
        self.e == 0
    }

    pub fn exponent(self) -> i32 {
        self.e
    }

    #[inline]
    pub fn down<F: Real>(self, v: F) -> F {
        if self.e == 0 {
            v
        } else {
            pow2(v, -self.e)
        }
    }

    #[inline]
    pub fn up<F: Real>(self, v: F) -> F {
        if self.e == 0 {
            v
        } else {
            pow2(v, self.e)
        }
    }

    /// The array in working units (borrowed when the scale is one); `OutOfMemory` when the
    /// rescaled copy does not fit.
    pub fn down_array<'a, F: Real>(self, a: ArrayView2<'a, F>) -> Result<CowArray<'a, F, Ix2>> {
        if self.is_one() {
            return Ok(a.into());
        }
        let mut copy = memory::try_copy("X", a)?;
        copy.mapv_inplace(|v| self.down(v));
        Ok(copy.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_of_two_are_exact_across_the_range() {
        for &v in &[1.0f64, 0.3, 7.25e-300, 5e-324, 1.7e308] {
            for e in [-1100, -600, -3, 0, 5, 700, 1100] {
                let r = pow2(v, e);
                if r != 0.0 && r.is_finite() && r.abs() >= f64::MIN_POSITIVE {
                    assert_eq!(pow2(r, -e), v, "{v} {e}");
                }
            }
        }
        assert_eq!(pow2(3.0f32, -140), 3.0 * 2f32.powi(-70) * 2f32.powi(-70));
    }

    #[test]
    fn scale_is_one_in_the_comfortable_range_and_a_power_of_two_outside() {
        assert!(Scale::for_max::<f64>(1e50).is_one() && Scale::for_max::<f64>(1e-50).is_one());
        assert!(Scale::for_max::<f64>(0.0).is_one() && Scale::for_max::<f64>(f64::NAN).is_one());
        let s = Scale::for_max::<f64>(1e200);
        assert!((s.down(1e200f64) - 1.0).abs() < 1.0 && s.up(s.down(3e199f64)) == 3e199);
        let s = Scale::for_max::<f32>(1e20);
        assert!(!s.is_one() && (s.down(1e20f32) - 1.0).abs() < 1.0);
        let s = Scale::for_max::<f64>(1e-300);
        assert!(s.down(1e-300f64) > 0.5 && s.down(1e-300f64) < 2.0);
    }

    #[test]
    fn wide_sum_agrees_with_the_plain_one() {
        let a: Vec<f64> = (0..37).map(|i| (i as f64).sin()).collect();
        let b: Vec<f64> = (0..37).map(|i| (i as f64).cos()).collect();
        assert!((sq_euclidean_wide(&a, &b) - sq_euclidean(&a, &b)).abs() < 1e-13);
    }
}

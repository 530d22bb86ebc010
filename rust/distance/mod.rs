//! Distances between rows. Low dimensions use the direct difference (exact); high
//! dimensions use the blocked product ‖q‖² + ‖x‖² − 2 q·x (a matrix multiply per tile).

use crate::kernel::Real;
use ndarray::{linalg::general_mat_mul, ArrayView2, ArrayViewMut2};

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

/// out[i, j] = ‖q_i − x_j‖² through the product form, clamped at zero.
pub fn sq_dist_tile_gemm<F: Real>(q: ArrayView2<F>, qn: &[F], x: ArrayView2<F>, xn: &[F], mut out: ArrayViewMut2<F>) {
    general_mat_mul(F::of(-2.0), &q, &x.t(), F::zero(), &mut out);
    for (i, mut row) in out.rows_mut().into_iter().enumerate() {
        let a = qn[i];
        for (v, &b) in row.iter_mut().zip(xn) {
            *v = (*v + a + b).max(F::zero());
        }
    }
}

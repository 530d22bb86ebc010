//! Local polynomial regression from the engine's design moments (SPEC §3):
//! per query solve (ΦᵀWΦ + λI) β = ΦᵀWy and predict β₀; and the equivalent kernel ℓ(x*)
//! with ŷ(x*) = Σᵢ ℓᵢ(x*) yᵢ.
//!
//! The moments of degree g scale like length^g: with the data at 1e10, or a bandwidth of
//! 1e-3, the raw system mixes entries 1e40 apart and a pivot test relative to its largest
//! entry calls it singular. Each system is therefore equilibrated (rows and columns scaled by
//! powers of two to unit diagonal, exactly) before it is solved, and the moments are taken in
//! the engine's working units, where they cannot overflow however large the coordinates.

use crate::distance::{pow2, Scale};
use crate::engine::{basis_degrees, fill_kernel_matrix, local_sums_scaled, validate_in_range, Bandwidth, Kernel, LocalSums, Neighborhood, Options, Problem, Reference};
use crate::error::{LocalizationError, Result};
use crate::real::Real;
use crate::rows::row_major;
use crate::memory;
use crate::parallel::Monitor;
use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

/// Solve A x = b in place by Gaussian elimination with partial pivoting.
/// Returns false when A is numerically singular (pivot ≤ tol · max |Aᵢᵢ|).
pub fn solve_in_place(a: &mut [f64], b: &mut [f64], n: usize, nrhs: usize) -> bool {
    let scale = (0..n).map(|i| a[i * n + i].abs()).fold(0.0, f64::max);
    let tol = 1e-12 * scale.max(f64::MIN_POSITIVE);
    for col in 0..n {
        let piv = (col..n).max_by(|&r, &s| a[r * n + col].abs().total_cmp(&a[s * n + col].abs())).unwrap_or(col);
        if !(a[piv * n + col].abs() > tol) {
            return false;
        }
        if piv != col {
            for k in 0..n {
                a.swap(piv * n + k, col * n + k);
            }
            for k in 0..nrhs {
                b.swap(piv * nrhs + k, col * nrhs + k);
            }
        }
        for r in col + 1..n {
            let f = a[r * n + col] / a[col * n + col];
            if f == 0.0 {
                continue;
            }
            for k in col..n {
                a[r * n + k] -= f * a[col * n + k];
            }
            for k in 0..nrhs {
                b[r * nrhs + k] -= f * b[col * nrhs + k];
            }
        }
    }
    for col in (0..n).rev() {
        for k in 0..nrhs {
            let mut s = b[col * nrhs + k];
            for c in col + 1..n {
                s -= a[col * n + c] * b[c * nrhs + k];
            }
            b[col * nrhs + k] = s / a[col * n + col];
        }
    }
    true
}

/// Per-query local polynomial coefficients: row i holds β (D × nrhs, row-major) in the
/// working units of `lengths` (β_a for a basis function of degree g is 2^(g·e) times the
/// true one; β₀ is unit-free), and `singular[i]` whether the local design was singular (then
/// β is NaN). `degrees[a]` is the degree of basis function a.
fn coefficients<F: Real>(sums: &LocalSums<F>, lengths: Scale, degrees: &[usize], ridge: f64, rhs: Rhs) -> Result<(Array2<f64>, Vec<bool>)> {
    let (Some(mom), Some(cross)) = (&sums.moments, &sums.cross) else {
        return Err(LocalizationError::param("degree", "the local sums carry no design moments"));
    };
    let (m, nb, _) = mom.dim();
    let p = cross.dim().2;
    let nrhs = match rhs {
        Rhs::Values => p,
        Rhs::FirstUnit => 1,
    };
    // Row-major (a copy only if some path ever produced another layout).
    let (mom, cross) = (row_major(mom.view()), row_major(cross.view()));
    let mut beta = memory::try_vec("local coefficients", &[m, nb * nrhs], 0.0)?;
    let mut singular = memory::try_vec("singular mask", &[m], false)?;
    let rows = beta.par_chunks_mut((nb * nrhs).max(1));
    rows.zip(singular.par_iter_mut()).enumerate().for_each_init(
        || (vec![0.0; nb * nb], vec![0; nb]),
        |(a, eq), (i, (b, singular))| {
            for (x, v) in a.iter_mut().zip(&mom[i * nb * nb..]) {
                *x = v.f64();
            }
            if ridge > 0.0 {
                // The moments are scaled by exp(−log_scale), and a moment of degree g by
                // 2^(−g·e) per factor: so is the ridge on each diagonal entry.
                let r = ridge * (-sums.log_scale[i].f64()).exp();
                (0..nb).for_each(|k| a[k * nb + k] += pow2(r, -2 * lengths.exponent() * degrees[k] as i32));
            }
            match rhs {
                Rhs::Values => b.iter_mut().zip(&cross[i * nb * p..]).for_each(|(x, v)| *x = v.f64()),
                Rhs::FirstUnit => b.iter_mut().enumerate().for_each(|(k, x)| *x = if k == 0 { 1.0 } else { 0.0 }),
            }
            // Equilibrate: A ← DAD, b ← Db with D = diag(2^−e_k), 2^e_k ≈ √A_kk; then β = D·y.
            for (k, e) in eq.iter_mut().enumerate() {
                let akk = a[k * nb + k];
                *e = if akk > 0.0 && akk.is_finite() { (0.5 * akk.log2()).round() as i32 } else { 0 };
            }
            for r in 0..nb {
                for c in 0..nb {
                    a[r * nb + c] = pow2(a[r * nb + c], -eq[r] - eq[c]);
                }
                for c in 0..nrhs {
                    b[r * nrhs + c] = pow2(b[r * nrhs + c], -eq[r]);
                }
            }
            *singular = !(sums.den[i] > F::zero() && solve_in_place(a, b, nb, nrhs));
            if *singular {
                b.fill(f64::NAN);
            } else {
                for r in 0..nb {
                    for c in 0..nrhs {
                        b[r * nrhs + c] = pow2(b[r * nrhs + c], -eq[r]);
                    }
                }
            }
        },
    );
    let beta = Array2::from_shape_vec((m, nb * nrhs), beta).map_err(|e| LocalizationError::shape("local coefficients", m * nb * nrhs, e))?;
    Ok((beta, singular))
}

#[derive(Copy, Clone)]
enum Rhs {
    Values,
    FirstUnit,
}

/// Local polynomial predictions (m × p) and the singular-design mask. With `exclude_self`
/// (queries are the sample) each fit leaves its own point out: the exact leave-one-out
/// prediction, the same as refitting without it, from one pass of hollow moments.
#[allow(clippy::too_many_arguments)]
pub fn predict<F: Real>(
    pb: &Problem<F>, kernel: &Kernel, bw: &Bandwidth<F>, degree: usize, ridge: f64, neighborhood: Neighborhood, exclude_self: bool,
    mon: &Monitor,
) -> Result<(Array2<F>, Vec<bool>)> {
    let opts = Options { degree: Some(degree), neighborhood, exclude_self, monitor: mon.clone(), progress: true, ..Options::default() };
    let (sums, lengths) = local_sums_scaled(pb, kernel, bw, &opts)?;
    predictions(&sums, lengths, pb.x.ncols(), degree, ridge)
}

/// `predict` against a prepared reference (its values are the responses).
#[allow(clippy::too_many_arguments)]
pub fn predict_prepared<F: Real>(
    reference: &Reference<F>, queries: ArrayView2<F>, kernel: &Kernel, bw: &Bandwidth<F>, degree: usize, ridge: f64,
    neighborhood: Neighborhood, exclude_self: bool, mon: &Monitor,
) -> Result<(Array2<F>, Vec<bool>)> {
    if reference.values().is_none() {
        return Err(LocalizationError::param("y", "local polynomial regression needs a Reference built with values"));
    }
    let opts = Options { degree: Some(degree), neighborhood, exclude_self, monitor: mon.clone(), progress: true, ..Options::default() };
    let (sums, lengths) = reference.local_sums_scaled(queries, None, kernel, bw, &opts)?;
    predictions(&sums, lengths, queries.ncols(), degree, ridge)
}

/// The fitted values β₀ from the design moments.
fn predictions<F: Real>(sums: &LocalSums<F>, lengths: Scale, d: usize, degree: usize, ridge: f64) -> Result<(Array2<F>, Vec<bool>)> {
    let p = sums.num.ncols();
    let (beta, singular) = coefficients(sums, lengths, &basis_degrees(d, degree), ridge, Rhs::Values)?;
    let mut pred = memory::try_array("predictions", (beta.nrows(), p), F::zero())?;
    pred.indexed_iter_mut().for_each(|((i, c), v)| *v = F::of(beta[(i, c)]));
    Ok((pred, singular))
}

/// The equivalent kernel ℓ (m × n): ŷ(q) = Σᵢ ℓᵢ(q) yᵢ for any y. Dense by nature; the
/// m × n output is allocated before any work.
#[allow(clippy::too_many_arguments)]
pub fn equivalent_kernel<F: Real>(
    q: ArrayView2<F>, x: ArrayView2<F>, kernel: &Kernel, bw: &Bandwidth<F>, degree: usize, ridge: f64, neighborhood: Neighborhood,
    mon: &Monitor,
) -> Result<(Array2<F>, Vec<bool>)> {
    let pb = Problem { queries: q, x, values: None, weights: None };
    let opts = Options { degree: Some(degree), neighborhood, monitor: mon.clone(), ..Options::default() };
    validate_in_range(&pb, kernel, bw, &opts)?;
    let mut ell = memory::try_array("equivalent kernel", (q.nrows(), x.nrows()), F::zero())?;
    let (sums, lengths) = local_sums_scaled(&pb, kernel, bw, &opts)?;
    let (a, singular) = coefficients(&sums, lengths, &basis_degrees(x.ncols(), degree), ridge, Rhs::FirstUnit)?;
    let shift: Vec<F> = sums.log_scale.to_vec();
    fill_kernel_matrix(ell.view_mut(), q, x, kernel, bw, Some(&shift), mon)?;
    let d = x.ncols();
    // δ = x − q in the coefficients' working units.
    let delta = |j: usize, i: usize, k: usize| (lengths.down(x[(j, k)]) - lengths.down(q[(i, k)])).f64();
    ell.axis_iter_mut(ndarray::Axis(0)).into_par_iter().enumerate().for_each(|(i, mut row)| {
        if mon.stopped() {
            return;
        }
        let ai = a.row(i);
        for (j, v) in row.iter_mut().enumerate() {
            // aᵀφ(xⱼ − q) with φ = [1, δ, δδᵀ upper]
            let mut s = ai[0];
            if degree >= 1 {
                let mut at = 1 + d;
                for k in 0..d {
                    let dk = delta(j, i, k);
                    s += ai[1 + k] * dk;
                    if degree >= 2 {
                        for l in k..d {
                            s += ai[at] * dk * delta(j, i, l);
                            at += 1;
                        }
                    }
                }
            }
            *v = F::of(v.f64() * s);
        }
    });
    mon.check()?;
    Ok((ell, singular))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::Profile;
    use ndarray::{array, Array3, ShapeBuilder};

    fn sums() -> (LocalSums<f64>, Scale) {
        let x = array![[0.0], [0.5], [1.0], [1.7], [2.1]];
        let y = array![[1.0], [0.0], [2.0], [1.5], [3.0]];
        let pb = Problem { queries: x.view(), x: x.view(), values: Some(y.view()), weights: None };
        let opts = Options { degree: Some(1), ..Options::default() };
        local_sums_scaled(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(0.8), &opts).unwrap()
    }

    #[test]
    fn coefficients_do_not_depend_on_the_moments_layout() {
        let (s, lengths) = sums();
        let (want, _) = coefficients(&s, lengths, &[0, 1], 0.0, Rhs::Values).unwrap();
        let relayout = |a: &Array3<f64>| {
            let mut f = Array3::zeros(a.dim().f());
            f.assign(a);
            f
        };
        let f = LocalSums { moments: s.moments.as_ref().map(relayout), cross: s.cross.as_ref().map(relayout), ..s.clone() };
        assert!(!f.moments.as_ref().unwrap().is_standard_layout());
        assert_eq!(coefficients(&f, lengths, &[0, 1], 0.0, Rhs::Values).unwrap().0, want);
    }

    #[test]
    fn sums_without_moments_are_an_error_not_a_panic() {
        let (s, lengths) = sums();
        let bare = LocalSums { moments: None, cross: None, ..s };
        assert!(matches!(coefficients(&bare, lengths, &[0, 1], 0.0, Rhs::Values), Err(LocalizationError::InvalidParameter { name: "degree", .. })));
    }
}

//! The dense kernel matrix, for the few methods whose output is itself m×n.

use super::types::{Bandwidth, Kernel, Options, Problem};
use super::{lengths_of, validate_in_range};
use crate::error::{LocalizationError, Result};
use crate::kernel::{dispatch_profile, ProfileFn};
use crate::memory;
use crate::neighbors::{Algorithm, Index, LEAF_SIZE};
use crate::parallel::Monitor;
use crate::real::Real;
use crate::rows::Rows;
use ndarray::{Array2, ArrayView2, ArrayViewMut2};
use rayon::prelude::*;

/// The dense kernel matrix K(qᵢ, xⱼ) (m×n). Only for methods whose output is itself m×n
/// (explicit kernel matrices); the local sums never build it. Allocated before any work.
pub fn kernel_matrix<F: Real>(q: ArrayView2<F>, x: ArrayView2<F>, kernel: &Kernel, bw: &Bandwidth<F>, mon: &Monitor) -> Result<Array2<F>> {
    validate_in_range(&Problem { queries: q, x, values: None, weights: None }, kernel, bw, &Options::default())?;
    let mut out = memory::try_array("kernel matrix", (q.nrows(), x.nrows()), F::zero())?;
    fill_kernel_matrix(out.view_mut(), q, x, kernel, bw, None, mon)?;
    Ok(out)
}

/// Write K(qᵢ, xⱼ)·exp(−shiftᵢ) into `out` (m×n) for inputs that pass `validate_in_range`.
/// Distance kernels are evaluated in an exactly rescaled space (see `local_sums`).
pub(crate) fn fill_kernel_matrix<F: Real>(
    mut out: ArrayViewMut2<F>, q: ArrayView2<F>, x: ArrayView2<F>, kernel: &Kernel, bw: &Bandwidth<F>, shift: Option<&[F]>, mon: &Monitor,
) -> Result<()> {
    let n = x.nrows();
    if out.dim() != (q.nrows(), n) {
        return Err(LocalizationError::shape("kernel matrix", format!("{} × {n}", q.nrows()), format!("{:?}", out.dim())));
    }
    let lengths = lengths_of(kernel, q, x, bw);
    let (q, x) = (lengths.down_array(q)?, lengths.down_array(x)?);
    let (q, x, bw) = (q.view(), x.view(), &bw.scaled(lengths));
    let knn = match kernel {
        Kernel::Knn { k, .. } => Some(Index::build(x, Algorithm::Auto, LEAF_SIZE, mon)?.knn(q, *k, mon)?),
        _ => None,
    };
    let (q, x) = (Rows::new("X_query", q)?, Rows::new("X", x)?);
    out.axis_iter_mut(ndarray::Axis(0)).into_par_iter().enumerate().for_each(|(i, mut row)| {
        if mon.stopped() {
            return;
        }
        let qs = q.row(i);
        let sh = shift.map_or(0.0, |s| s[i].f64());
        match kernel {
            Kernel::Radial(pr) => {
                for j in 0..n {
                    let h = match bw {
                        Bandwidth::Scalar(h) => *h,
                        Bandwidth::PerQuery(h) => h[i],
                        Bandwidth::PerReference(h) => h[j],
                    };
                    let u2 = crate::distance::sq_euclidean(qs, x.row(j)) / (h * h);
                    let log_k = dispatch_profile!(*pr, P, if pr.is_exponential() { P::log_k(u2).f64() } else { P::k(u2).f64().ln() });
                    row[j] = F::of((log_k - sh).exp());
                }
            }
            Kernel::Dot { temperature } => {
                for j in 0..n {
                    let s = crate::distance::dot(qs, x.row(j)).f64() / temperature;
                    row[j] = F::of((s - sh).exp());
                }
            }
            Kernel::Knn { profile, .. } => {
                // `knn` is built above exactly when the kernel is kNN.
                let (ind, dists) = knn.as_ref().expect("built above").row(i);
                let hk = dists.last().copied().unwrap_or(F::zero());
                for (&j, &dist) in ind.iter().zip(dists) {
                    let kern = match profile {
                        Some(pr) if hk > F::zero() => dispatch_profile!(*pr, P, P::k((dist / hk) * (dist / hk))),
                        _ => F::one(),
                    };
                    row[j] = F::of(kern.f64() * (-sh).exp());
                }
            }
        }
    });
    mon.check()
}

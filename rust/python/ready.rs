//! The public `local_mean` / `kernel_sum` on *ready* input in one native call: for a library
//! that calls them thousands of times on small arrays, the fixed cost of a call is the
//! Python layer's checks and glue, so the checks that input of the right form needs (every
//! value finite, shapes matching, weights usable) run here, in one pass, and the result is
//! finished here (the division of the local mean, `LocalSums::mean`).
//!
//! Input that is not ready — anything the Python checks would convert, or refuse — gives
//! `None`, and the Python layer takes its checked path, which raises the errors and makes the
//! conversions it always did. Ready input gives the checked path's result bit for bit: the
//! same engine call, the same float division.

use super::runtime::{run, NJobs};
use crate::engine::{self, Bandwidth, Kernel, Neighborhood, Options, Problem};
use crate::kernel::Profile;
use crate::real::Real;
use numpy::npyffi::PyArray_CheckExact;
use numpy::{Element, IntoPyArray, PyReadonlyArray, PyReadonlyArray1, PyReadonlyArray2, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use ndarray::{ArrayView2, Axis, Dimension, Ix2};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::IntoPyObjectExt;

/// `obj` as a borrowed array of element type F when it is exactly a NumPy ndarray (a subclass
/// is converted by the checked path), C-contiguous, non-empty, with every entry finite.
fn finite<'py, F: Real + Element, D: Dimension>(obj: &Bound<'py, PyAny>) -> Option<PyReadonlyArray<'py, F, D>> {
    // SAFETY: a type check on a live object.
    if unsafe { PyArray_CheckExact(obj.py(), obj.as_ptr()) } == 0 {
        return None;
    }
    let a: PyReadonlyArray<'py, F, D> = obj.extract().ok()?;
    let s = if a.is_c_contiguous() { a.as_slice().ok()? } else { return None };
    (!s.is_empty() && s.iter().all(|v| v.is_finite())).then_some(a)
}

/// The arrays of a call, each checked as the Python layer's checks would pass it through.
struct Ready<'py, F: Element> {
    q: PyReadonlyArray2<'py, F>,
    x: PyReadonlyArray2<'py, F>,
    /// The values and whether they were 1-D.
    v: Option<(PyReadonlyArrayDyn<'py, F>, bool)>,
    w: Option<PyReadonlyArray1<'py, F>>,
}

impl<'py, F: Real + Element> Ready<'py, F> {
    fn new(q: &Bound<'py, PyAny>, x: &Bound<'py, PyAny>, v: Option<&Bound<'py, PyAny>>, w: Option<&Bound<'py, PyAny>>) -> Option<Self> {
        let x: PyReadonlyArray2<F> = finite(x)?;
        let q: PyReadonlyArray2<F> = finite(q)?;
        let (n, d) = x.as_array().dim();
        if q.as_array().ncols() != d {
            return None;
        }
        let v = match v {
            None => None,
            Some(v) => {
                let v: PyReadonlyArrayDyn<F> = finite(v)?;
                let shape = v.shape();
                if !(1..=2).contains(&shape.len()) || shape[0] != n {
                    return None;
                }
                let one_d = shape.len() == 1;
                Some((v, one_d))
            }
        };
        let w = match w {
            None => None,
            Some(w) => {
                let w: PyReadonlyArray1<F> = finite(w)?;
                let s = w.as_slice().ok()?;
                // Non-negative, some positive (the checked path refuses anything else).
                if s.len() != n || s.iter().any(|v| *v < F::zero()) || !s.iter().any(|v| *v > F::zero()) {
                    return None;
                }
                Some(w)
            }
        };
        Some(Ready { q, x, v, w })
    }

    fn values(&self) -> Option<ArrayView2<'_, F>> {
        self.v.as_ref().map(|(v, one_d)| {
            let a = v.as_array();
            let a = if *one_d { a.insert_axis(Axis(1)) } else { a };
            a.into_dimensionality::<Ix2>().expect("1-D or 2-D values")
        })
    }

    fn one_d(&self) -> bool {
        self.v.as_ref().is_some_and(|(_, one_d)| *one_d)
    }
}

/// A named radial profile with a scalar bandwidth, as the checked path binds a kernel name
/// and a float bandwidth; None for anything else (`knn`, `dot`, unknown names, bad h).
fn radial(kernel: &str, bandwidth: f64) -> Option<Kernel> {
    (bandwidth > 0.0 && bandwidth.is_finite()).then_some(())?;
    Profile::from_name(kernel).ok().map(Kernel::Radial)
}

/// The exact algorithms the public functions accept (the binned one is not among them).
fn exact(algorithm: &str) -> Option<Neighborhood> {
    match algorithm {
        "auto" => Some(Neighborhood::Auto),
        "brute" => Some(Neighborhood::Brute),
        "kd_tree" => Some(Neighborhood::Tree),
        "expansion" => Some(Neighborhood::Expansion),
        _ => None,
    }
}

/// The engine's sums for ready input; `own_values`: without values, average the samples
/// themselves (the local mean's default).
#[allow(clippy::too_many_arguments)]
fn sums<F: Real + Element>(py: Python<'_>, r: &Ready<'_, F>, own_values: bool, kernel: &Kernel, bandwidth: f64, exclude_self: bool, nbh: Neighborhood, n_jobs: Option<NJobs>) -> PyResult<engine::LocalSums<F>> {
    let x = r.x.as_array();
    let values = r.values().or(if own_values { Some(x) } else { None });
    let pb = Problem { queries: r.q.as_array(), x, values, weights: r.w.as_ref().map(|w| w.as_array()) };
    let bw = Bandwidth::Scalar(F::of(bandwidth));
    run(py, n_jobs, None, |mon| {
        let opts = Options { exclude_self, neighborhood: nbh, monitor: mon.clone(), ..Options::default() };
        engine::local_sums(&pb, kernel, &bw, &opts)
    })
}

/// Runs `$body` with `$r` the ready input (f64 or f32) and `$s` its sums (a radial
/// kernel, an exact algorithm); `None` to Python when the input or the request is not ready.
macro_rules! on_ready {
    ($py:expr, ($queries:expr, $x:expr, $values:expr, $weights:expr), ($kernel:expr, $bandwidth:expr, $own:expr, $exclude_self:expr, $algorithm:expr, $n_jobs:expr),
     $r:ident, $s:ident, $body:expr) => {{
        let (Some(k), Some(nbh)) = (radial($kernel, $bandwidth), exact($algorithm)) else {
            return Ok($py.None().into_bound($py));
        };
        if let Some($r) = Ready::<f64>::new($queries, $x, $values, $weights) {
            let $s = sums::<f64>($py, &$r, $own, &k, $bandwidth, $exclude_self, nbh, $n_jobs)?;
            $body
        } else if let Some($r) = Ready::<f32>::new($queries, $x, $values, $weights) {
            let $s = sums::<f32>($py, &$r, $own, &k, $bandwidth, $exclude_self, nbh, $n_jobs)?;
            $body
        } else {
            Ok($py.None().into_bound($py))
        }
    }};
}

/// `local_mean` on ready input: `(mean, zero)`, the mean shaped like `values` (m×d without
/// them) and the number of queries with zero total weight (NaN rows); None when the input is
/// not ready (the caller then takes its checked path).
#[pyfunction]
#[pyo3(signature = (queries, x, values=None, weights=None, kernel="gaussian", bandwidth=1.0, exclude_self=false,
    algorithm="auto", n_jobs=None))]
#[allow(clippy::too_many_arguments)]
pub(super) fn ready_local_mean<'py>(
    py: Python<'py>, queries: &Bound<'py, PyAny>, x: &Bound<'py, PyAny>, values: Option<&Bound<'py, PyAny>>,
    weights: Option<&Bound<'py, PyAny>>, kernel: &str, bandwidth: f64, exclude_self: bool, algorithm: &str, n_jobs: Option<NJobs>,
) -> PyResult<Bound<'py, PyAny>> {
    on_ready!(py, (queries, x, values, weights), (kernel, bandwidth, true, exclude_self, algorithm, n_jobs), r, s, {
        let (mean, zero) = s.mean();
        let mean = if r.one_d() { mean.column(0).to_owned().into_pyarray(py).into_any() } else { mean.into_pyarray(py).into_any() };
        PyTuple::new(py, [mean, zero.into_bound_py_any(py)?]).map(|t| t.into_any())
    })
}

/// `kernel_sum` on ready input: `(total, log_scale)` in float64, the true sums being
/// `total · exp(log_scale)` (per query), total shaped like `values` (m without them) and
/// `log_scale` None where it is 0 everywhere; None when the input is not ready.
#[pyfunction]
#[pyo3(signature = (queries, x, values=None, weights=None, kernel="gaussian", bandwidth=1.0, exclude_self=false,
    algorithm="auto", n_jobs=None))]
#[allow(clippy::too_many_arguments)]
pub(super) fn ready_kernel_sum<'py>(
    py: Python<'py>, queries: &Bound<'py, PyAny>, x: &Bound<'py, PyAny>, values: Option<&Bound<'py, PyAny>>,
    weights: Option<&Bound<'py, PyAny>>, kernel: &str, bandwidth: f64, exclude_self: bool, algorithm: &str, n_jobs: Option<NJobs>,
) -> PyResult<Bound<'py, PyAny>> {
    on_ready!(py, (queries, x, values, weights), (kernel, bandwidth, false, exclude_self, algorithm, n_jobs), r, s, {
        // The exponential is left to the caller: the checked path takes NumPy's, whose last
        // bit may differ from this platform's libm.
        let log_scale = s.log_scale.iter().any(|l| l.f64() != 0.0).then(|| s.log_scale.mapv(|l| l.f64()).into_pyarray(py).into_any());
        let total = match &r.v {
            None => s.den.mapv(|v| v.f64()).into_pyarray(py).into_any(),
            Some((_, true)) => s.num.column(0).mapv(|v| v.f64()).into_pyarray(py).into_any(),
            Some((_, false)) => s.num.mapv(|v| v.f64()).into_pyarray(py).into_any(),
        };
        PyTuple::new(py, [Some(total), log_scale]).map(|t| t.into_any())
    })
}

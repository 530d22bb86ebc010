//! Bindings of the engine (local sums, local polynomial fits, kernel matrices) and of the
//! kernels' profiles.

use super::convert::{is_f32, neighborhood, type_error, value_error, view1, view2};
use super::kernel::PyKernelSpec;
use super::reference;
use super::runtime::{run, NJobs};
use crate::algorithms::local_poly;
use crate::engine::{self, Options, Problem};
use crate::error::LocalizationError;
use crate::kernel::Profile;
use numpy::{Element, IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

/// Kernel-weighted sums (the engine), as a `Sums`.
/// `x` is the samples or a `Reference` built from them (then it holds weights and per-sample
/// bandwidths, and values unless they are given here to a Reference built without them; the
/// results are bit-identical).
#[pyfunction]
#[pyo3(signature = (queries, x, values=None, weights=None, *, kernel, degree=None, exclude_self=false, algorithm="auto",
    n_jobs=None, progress=None, series_tolerance=None))]
#[allow(clippy::too_many_arguments)]
fn local_sums<'py>(
    py: Python<'py>, queries: &Bound<'py, PyAny>, x: &Bound<'py, PyAny>, values: Option<&Bound<'py, PyAny>>,
    weights: Option<&Bound<'py, PyAny>>, kernel: &Bound<'py, PyKernelSpec>, degree: Option<usize>, exclude_self: bool,
    algorithm: &str, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>, series_tolerance: Option<f64>,
) -> PyResult<Bound<'py, PySums>> {
    let series_tolerance = match series_tolerance {
        None => engine::Options::default().series_tolerance,
        Some(t) if t > 0.0 && t < 1.0 => t,
        Some(t) => return Err(LocalizationError::param("series_tolerance", format!("must be in (0, 1), got {t}")).into()),
    };
    let spec = kernel.get();
    let nbh = neighborhood(algorithm)?;
    if let Ok(r) = x.cast::<reference::PyReference>() {
        for (given, name) in [(weights.is_some(), "sample_weight"), (spec.is_per_sample(), "sample_bandwidth")] {
            if given {
                return Err(reference::own_arrays(name));
            }
        }
        return reference::local_sums(py, r.get(), queries, values, spec, degree, exclude_self, nbh, n_jobs, progress.as_ref());
    }
    with_float!(x, F, {
        let bw = spec.bandwidth::<F>()?;
        let (q, xr) = (view2::<F>(queries, "X_query")?, view2::<F>(x, "X")?);
        let v = values.map(|v| view2::<F>(v, "values")).transpose()?;
        let w = weights.map(|w| view1::<F>(w, "sample_weight")).transpose()?;
        let pb = Problem { queries: q.as_array(), x: xr.as_array(), values: v.as_ref().map(|a| a.as_array()), weights: w.as_ref().map(|a| a.as_array()) };
        let s = run(py, n_jobs, progress.as_ref(), |mon| {
            let opts = Options { degree, exclude_self, neighborhood: nbh, monitor: mon.clone(), progress: progress.is_some(), series_tolerance };
            engine::local_sums(&pb, spec.kernel(), &bw, &opts)
        })?;
        PySums::new(py, s)
    })
}

/// Kernel-weighted sums at m queries, each stored divided by exp(log_scale) so that
/// exponential kernels with tiny bandwidths keep their leading terms: the true Σ K w is
/// den · exp(log_scale). The arrays are the core's own, handed to NumPy without a copy.
#[pyclass(module = "localization._core", name = "Sums", frozen)]
pub(crate) struct PySums {
    num: Py<PyAny>,
    den: Py<PyAny>,
    log_scale: Py<PyAny>,
    moments: Option<Py<PyAny>>,
    cross: Option<Py<PyAny>>,
}

impl PySums {
    /// The engine's sums.
    pub(crate) fn new<F: Element>(py: Python<'_>, s: engine::LocalSums<F>) -> PyResult<Bound<'_, PySums>> {
        let (moments, cross) = (s.moments.map(|m| m.into_pyarray(py).into_any().unbind()), s.cross.map(|c| c.into_pyarray(py).into_any().unbind()));
        Self::of(py, s.num.into_pyarray(py).into_any(), s.den.into_pyarray(py).into_any(), s.log_scale.into_pyarray(py).into_any(), moments, cross)
    }

    /// Sums given as arrays (`moments` and `cross` together or neither).
    pub(crate) fn of<'py>(
        py: Python<'py>, num: Bound<'py, PyAny>, den: Bound<'py, PyAny>, log_scale: Bound<'py, PyAny>, moments: Option<Py<PyAny>>,
        cross: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PySums>> {
        Bound::new(py, PySums { num: num.unbind(), den: den.unbind(), log_scale: log_scale.unbind(), moments, cross })
    }
}

#[pymethods]
impl PySums {
    /// Σ K w v per query (m × p), divided by exp(log_scale).
    #[getter]
    fn num<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.num.bind(py).clone()
    }

    /// Σ K w per query (m), divided by exp(log_scale); 0 where no sample is reached.
    #[getter]
    fn den<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.den.bind(py).clone()
    }

    /// The per-query scale (m): the sums are stored divided by exp(log_scale).
    #[getter]
    fn log_scale<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.log_scale.bind(py).clone()
    }

    /// The local polynomial design moments Σ K w φ φᵀ (m × D × D), when asked with `degree`.
    #[getter]
    fn moments<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.moments.as_ref().map(|a| a.bind(py).clone())
    }

    /// The cross moments Σ K w φ vᵀ (m × D × p), with `moments`.
    #[getter]
    fn cross<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.cross.as_ref().map(|a| a.bind(py).clone())
    }
}

/// Local polynomial predictions: returns (prediction m×p, singular mask).
#[pyfunction]
/// `x` is the samples or a `Reference` built from them with `values` (then it holds the values
/// and weights).
#[pyo3(signature = (queries, x, values=None, weights=None, *, kernel, degree=1, ridge=0.0, exclude_self=false, algorithm="auto",
    n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn local_polynomial<'py>(
    py: Python<'py>, queries: &Bound<'py, PyAny>, x: &Bound<'py, PyAny>, values: Option<&Bound<'py, PyAny>>,
    weights: Option<&Bound<'py, PyAny>>, kernel: &Bound<'py, PyKernelSpec>, degree: usize, ridge: f64, exclude_self: bool,
    algorithm: &str, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyArray1<bool>>)> {
    let spec = per_point_query(kernel)?;
    check_ridge(ridge)?;
    let nbh = neighborhood(algorithm)?;
    if let Ok(r) = x.cast::<reference::PyReference>() {
        for (given, name) in [(values.is_some(), "values"), (weights.is_some(), "sample_weight")] {
            if given {
                return Err(reference::own_arrays(name));
            }
        }
        return reference::local_polynomial(py, r.get(), queries, spec, degree, ridge, exclude_self, nbh, n_jobs, progress.as_ref());
    }
    let values = values.ok_or_else(|| type_error("values", "local_polynomial needs `values` (y) with raw samples".to_owned()))?;
    with_float!(x, F, {
        let bw = spec.bandwidth::<F>()?;
        let (q, xr, v) = (view2::<F>(queries, "X_query")?, view2::<F>(x, "X")?, view2::<F>(values, "y")?);
        let w = weights.map(|w| view1::<F>(w, "sample_weight")).transpose()?;
        let pb = Problem { queries: q.as_array(), x: xr.as_array(), values: Some(v.as_array()), weights: w.as_ref().map(|a| a.as_array()) };
        let (pred, singular) =
            run(py, n_jobs, progress.as_ref(), |mon| local_poly::predict(&pb, spec.kernel(), &bw, degree, ridge, nbh, exclude_self, mon))?;
        Ok((pred.into_pyarray(py).into_any(), singular.into_pyarray(py)))
    })
}

/// The kernel of a local polynomial fit, whose bandwidth is one value or one per query.
fn per_point_query<'a>(kernel: &'a Bound<'_, PyKernelSpec>) -> PyResult<&'a PyKernelSpec> {
    let spec = kernel.get();
    if spec.is_per_sample() {
        return Err(value_error("sample_bandwidth", "local polynomial fits take one bandwidth or one per query".into()));
    }
    Ok(spec)
}

fn check_ridge(ridge: f64) -> PyResult<()> {
    if !(ridge >= 0.0) || !ridge.is_finite() {
        return Err(value_error("ridge", "`ridge` must be a finite non-negative number".into()));
    }
    Ok(())
}

/// The equivalent kernel of local polynomial regression (m×n) and the singular mask.
#[pyfunction]
#[pyo3(signature = (queries, x, *, kernel, degree=1, ridge=0.0, algorithm="auto", n_jobs=None))]
fn equivalent_kernel<'py>(
    py: Python<'py>, queries: &Bound<'py, PyAny>, x: &Bound<'py, PyAny>, kernel: &Bound<'py, PyKernelSpec>, degree: usize,
    ridge: f64, algorithm: &str, n_jobs: Option<NJobs>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyArray1<bool>>)> {
    let spec = per_point_query(kernel)?;
    check_ridge(ridge)?;
    let nbh = neighborhood(algorithm)?;
    with_float!(x, F, {
        let bw = spec.bandwidth::<F>()?;
        let (q, xr) = (view2::<F>(queries, "X_query")?, view2::<F>(x, "X")?);
        let (qa, xa) = (q.as_array(), xr.as_array());
        let (ell, singular) = run(py, n_jobs, None, |mon| local_poly::equivalent_kernel(qa, xa, spec.kernel(), &bw, degree, ridge, nbh, mon))?;
        Ok((ell.into_pyarray(py).into_any(), singular.into_pyarray(py)))
    })
}

/// The dense kernel matrix K(q_i, x_j) (m×n).
#[pyfunction]
#[pyo3(signature = (queries, x, *, kernel, n_jobs=None))]
fn kernel_matrix<'py>(
    py: Python<'py>, queries: &Bound<'py, PyAny>, x: &Bound<'py, PyAny>, kernel: &Bound<'py, PyKernelSpec>, n_jobs: Option<NJobs>,
) -> PyResult<Bound<'py, PyAny>> {
    let spec = kernel.get();
    with_float!(x, F, {
        let bw = spec.bandwidth::<F>()?;
        let (q, xr) = (view2::<F>(queries, "X_query")?, view2::<F>(x, "X")?);
        let (qa, xa) = (q.as_array(), xr.as_array());
        let k = run(py, n_jobs, None, |mon| engine::kernel_matrix(qa, xa, spec.kernel(), &bw, mon))?;
        Ok(k.into_pyarray(py).into_any())
    })
}

/// k(u) of a named profile at each u ≥ 0.
#[pyfunction]
fn profile_values<'py>(py: Python<'py>, kernel: &str, u: PyReadonlyArray1<'py, f64>) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let p = Profile::from_name(kernel)?;
    Ok(u.as_array().mapv(|v| p.eval(v.abs())).into_pyarray(py))
}

/// log ∫_{ℝ^d} k(‖x‖) dx for a named profile.
#[pyfunction]
fn log_integral(kernel: &str, d: usize) -> PyResult<f64> {
    Ok(Profile::from_name(kernel)?.log_integral(d)?)
}

/// (canonical name, support radius or None) of a profile name or alias.
#[pyfunction]
fn profile_info(kernel: &str) -> PyResult<(&'static str, Option<f64>)> {
    let p = Profile::from_name(kernel)?;
    Ok((p.name(), p.support()))
}

/// Exponentials per second on one core through the engine's vectorised exp (`count` of them;
/// "float32" or "float64"): the ceiling of the exponential kernels' pair loop, for benchmarks.
#[pyfunction]
#[pyo3(signature = (dtype="float64", count=1 << 26))]
fn exp_throughput(py: Python<'_>, dtype: &str, count: usize) -> PyResult<f64> {
    match dtype {
        "float32" => Ok(py.detach(|| crate::engine::exp_throughput::<f32>(count))),
        "float64" => Ok(py.detach(|| crate::engine::exp_throughput::<f64>(count))),
        _ => Err(LocalizationError::param("dtype", format!("must be 'float32' or 'float64', got {dtype:?}")).into()),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(local_sums, m)?)?;
    m.add_function(wrap_pyfunction!(local_polynomial, m)?)?;
    m.add_function(wrap_pyfunction!(equivalent_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(kernel_matrix, m)?)?;
    m.add_function(wrap_pyfunction!(profile_values, m)?)?;
    m.add_function(wrap_pyfunction!(log_integral, m)?)?;
    m.add_function(wrap_pyfunction!(profile_info, m)?)?;
    m.add_function(wrap_pyfunction!(exp_throughput, m)?)?;
    m.add_class::<PySums>()?;
    m.add_class::<PyKernelSpec>()?;
    Ok(())
}

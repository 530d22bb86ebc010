//! PyO3 bindings: convert arrays, release the GIL, pick the pool, map errors. No math here.
//!
//! Every array entry point is generic over f32/f64; the Python layer guarantees all arrays
//! of one call share a dtype and are C-contiguous, and the bindings check it again. Native
//! work goes through `runtime::run` (threads, Ctrl-C, progress).

use crate::algorithms::local_poly;
use crate::engine::{self, Bandwidth, Kernel, Neighborhood, Options, Problem};
use crate::error::LocalizationError;
use crate::kernel::Profile;
use crate::real::Real;
use crate::memory;
use crate::neighbors::{masked, Algorithm, Index};
use numpy::{Element, IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyKeyboardInterrupt, PyMemoryError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use runtime::{run, NJobs};

/// The library's exceptions, defined in Python (`localization._validation`) so that the
/// native core and the Python checks raise the same classes: `(message, parameter)`.
mod exceptions {
    pyo3::import_exception!(localization._validation, LocalizationError);
    pyo3::import_exception!(localization._validation, LocalizationTypeError);
}

/// The one conversion of core errors into Python exceptions.
impl From<LocalizationError> for PyErr {
    fn from(e: LocalizationError) -> PyErr {
        match e {
            LocalizationError::Interrupted => PyKeyboardInterrupt::new_err("interrupted"),
            e @ LocalizationError::OutOfMemory { .. } => PyMemoryError::new_err(e.to_string()),
            e @ LocalizationError::ThreadPool { .. } => PyRuntimeError::new_err(e.to_string()),
            other => exceptions::LocalizationError::new_err((other.to_string(), other.parameter())),
        }
    }
}

/// A `LocalizationError` (a `ValueError`) about the argument `name`.
pub(crate) fn value_error(name: &str, message: String) -> PyErr {
    exceptions::LocalizationError::new_err((message, name.to_owned()))
}

/// A `LocalizationTypeError` (a `TypeError`) about the argument `name`.
pub(crate) fn type_error(name: &str, message: String) -> PyErr {
    exceptions::LocalizationTypeError::new_err((message, name.to_owned()))
}

/// A `LocalizationError` about no single argument (a run used after it ended).
pub(crate) fn state_error(message: &str) -> PyErr {
    exceptions::LocalizationError::new_err((message.to_owned(), None::<String>))
}

/// An array a binding built itself has an impossible shape: a bug here, never the caller's
/// input, hence not in the `LocalizationError` family.
pub(crate) fn internal(what: impl std::fmt::Display) -> PyErr {
    PyRuntimeError::new_err(format!("internal error in the localization core ({what}); please report it"))
}

/// A 2-D int64 array of indices as usize rows, with its number of columns.
pub(crate) fn indices2(a: &Bound<'_, PyAny>, name: &str) -> PyResult<(Vec<usize>, usize)> {
    let arr: PyReadonlyArray2<i64> = a.extract().map_err(|_| type_error(name, format!("`{name}` must be a 2-D int64 array")))?;
    let k = arr.shape()[1];
    let out: Option<Vec<usize>> = arr.as_array().iter().map(|&j| usize::try_from(j).ok()).collect();
    Ok((out.ok_or_else(|| value_error(name, format!("`{name}` has negative entries")))?, k))
}

/// Indices as NumPy's int64, converted into a fallibly allocated array.
fn indices_i64(name: &'static str, v: &[usize]) -> crate::error::Result<Vec<i64>> {
    let mut out = memory::try_vec(name, &[v.len()], 0i64)?;
    out.iter_mut().zip(v).for_each(|(o, &j)| *o = j as i64);
    Ok(out)
}

/// Borrow a 2-D array of a given float type, refusing non-contiguous memory.
fn view2<'py, F: Element>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<PyReadonlyArray2<'py, F>> {
    let a: PyReadonlyArray2<'py, F> = obj
        .extract()
        .map_err(|_| type_error(name, format!("`{name}` must be a 2-D float array with the same dtype as X")))?;
    if !a.is_c_contiguous() {
        return Err(value_error(name, format!("`{name}` must be C-contiguous")));
    }
    Ok(a)
}

fn view1<'py, F: Element>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<PyReadonlyArray1<'py, F>> {
    let a: PyReadonlyArray1<'py, F> = obj
        .extract()
        .map_err(|_| type_error(name, format!("`{name}` must be a 1-D float array with the same dtype as X")))?;
    if !a.is_c_contiguous() {
        return Err(value_error(name, format!("`{name}` must be C-contiguous")));
    }
    Ok(a)
}

fn is_f32(x: &Bound<'_, PyAny>) -> PyResult<bool> {
    if x.extract::<PyReadonlyArray2<f64>>().is_ok() {
        Ok(false)
    } else if x.extract::<PyReadonlyArray2<f32>>().is_ok() {
        Ok(true)
    } else {
        Err(type_error("X", "`X` must be a 2-D float32 or float64 array".into()))
    }
}

/// Run `$body` with `$F` = f32 or f64 according to the dtype of `$x`.
macro_rules! with_float {
    ($x:expr, $F:ident, $body:expr) => {
        if is_f32($x)? {
            type $F = f32;
            $body
        } else {
            type $F = f64;
            $body
        }
    };
}

struct KernelArgs<F> {
    kernel: Kernel,
    bandwidth: Bandwidth<F>,
}

#[allow(clippy::too_many_arguments)]
fn kernel_args<F: Real + Element>(
    kernel: &str, bandwidth: f64, query_bandwidth: Option<&Bound<'_, PyAny>>, sample_bandwidth: Option<&Bound<'_, PyAny>>,
    n_neighbors: Option<usize>, knn_profile: Option<&str>, temperature: Option<f64>,
) -> PyResult<KernelArgs<F>> {
    let kernel = match kernel {
        "knn" => Kernel::Knn {
            k: n_neighbors.ok_or_else(|| value_error("n_neighbors", "kernel='knn' needs `n_neighbors`".into()))?,
            profile: knn_profile.map(Profile::from_name).transpose()?,
        },
        "dot" => Kernel::Dot { temperature: temperature.unwrap_or(1.0) },
        name => Kernel::Radial(Profile::from_name(name)?),
    };
    let bandwidth = if let Some(h) = query_bandwidth {
        Bandwidth::PerQuery(view1::<F>(h, "bandwidth")?.as_array().to_vec())
    } else if let Some(h) = sample_bandwidth {
        Bandwidth::PerReference(view1::<F>(h, "bandwidth")?.as_array().to_vec())
    } else {
        Bandwidth::Scalar(F::of(bandwidth))
    };
    Ok(KernelArgs { kernel, bandwidth })
}

fn neighborhood(s: &str) -> PyResult<Neighborhood> {
    match s {
        "auto" => Ok(Neighborhood::Auto),
        "brute" => Ok(Neighborhood::Brute),
        "tree" | "kd_tree" => Ok(Neighborhood::Tree),
        "expansion" => Ok(Neighborhood::Expansion),
        o => Err(value_error("algorithm", format!("`algorithm` must be 'auto', 'brute', 'kd_tree' or 'expansion', got {o:?}"))),
    }
}

/// Kernel-weighted sums (the engine). Returns (num, den, log_scale, moments|None, cross|None).
/// `x` is the samples or a `Reference` built from them (then it holds weights and per-sample
/// bandwidths, and values unless they are given here to a Reference built without them; the
/// results are bit-identical).
#[pyfunction]
#[pyo3(signature = (queries, x, values=None, weights=None, kernel="gaussian", bandwidth=1.0, query_bandwidth=None,
    sample_bandwidth=None, n_neighbors=None, knn_profile=None, temperature=None, degree=None, exclude_self=false,
    algorithm="auto", n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn local_sums<'py>(
    py: Python<'py>, queries: &Bound<'py, PyAny>, x: &Bound<'py, PyAny>, values: Option<&Bound<'py, PyAny>>,
    weights: Option<&Bound<'py, PyAny>>, kernel: &str, bandwidth: f64, query_bandwidth: Option<&Bound<'py, PyAny>>,
    sample_bandwidth: Option<&Bound<'py, PyAny>>, n_neighbors: Option<usize>, knn_profile: Option<&str>,
    temperature: Option<f64>, degree: Option<usize>, exclude_self: bool, algorithm: &str, n_jobs: Option<NJobs>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let nbh = neighborhood(algorithm)?;
    if let Ok(r) = x.cast::<reference::PyReference>() {
        for (given, name) in [(weights.is_some(), "sample_weight"), (sample_bandwidth.is_some(), "sample_bandwidth")] {
            if given {
                return Err(reference::own_arrays(name));
            }
        }
        return reference::local_sums(py, r.get(), queries, values, kernel, bandwidth, query_bandwidth, n_neighbors, knn_profile, temperature, degree, exclude_self, nbh, n_jobs, progress.as_ref());
    }
    with_float!(x, F, {
        let ka = kernel_args::<F>(kernel, bandwidth, query_bandwidth, sample_bandwidth, n_neighbors, knn_profile, temperature)?;
        let (q, xr) = (view2::<F>(queries, "X_query")?, view2::<F>(x, "X")?);
        let v = values.map(|v| view2::<F>(v, "values")).transpose()?;
        let w = weights.map(|w| view1::<F>(w, "sample_weight")).transpose()?;
        let pb = Problem { queries: q.as_array(), x: xr.as_array(), values: v.as_ref().map(|a| a.as_array()), weights: w.as_ref().map(|a| a.as_array()) };
        let s = run(py, n_jobs, progress.as_ref(), |mon| {
            let opts = Options { degree, exclude_self, neighborhood: nbh, monitor: mon.clone(), progress: progress.is_some() };
            engine::local_sums(&pb, &ka.kernel, &ka.bandwidth, &opts)
        })?;
        sums_tuple(py, s)
    })
}

/// (num, den, log_scale, moments|None, cross|None) as NumPy arrays.
fn sums_tuple<F: Element>(py: Python<'_>, s: engine::LocalSums<F>) -> PyResult<Bound<'_, PyTuple>> {
    let moments = s.moments.map(|m| m.into_pyarray(py).into_any());
    let cross = s.cross.map(|m| m.into_pyarray(py).into_any());
    PyTuple::new(py, [
        Some(s.num.into_pyarray(py).into_any()),
        Some(s.den.into_pyarray(py).into_any()),
        Some(s.log_scale.into_pyarray(py).into_any()),
        moments,
        cross,
    ])
}

/// Local polynomial predictions: returns (prediction m×p, singular mask).
#[pyfunction]
/// `x` is the samples or a `Reference` built from them with `values` (then it holds the values
/// and weights).
#[pyo3(signature = (queries, x, values=None, weights=None, kernel="gaussian", bandwidth=1.0, query_bandwidth=None,
    n_neighbors=None, knn_profile=None, degree=1, ridge=0.0, exclude_self=false, algorithm="auto", n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn local_polynomial<'py>(
    py: Python<'py>, queries: &Bound<'py, PyAny>, x: &Bound<'py, PyAny>, values: Option<&Bound<'py, PyAny>>,
    weights: Option<&Bound<'py, PyAny>>, kernel: &str, bandwidth: f64, query_bandwidth: Option<&Bound<'py, PyAny>>,
    n_neighbors: Option<usize>, knn_profile: Option<&str>, degree: usize, ridge: f64, exclude_self: bool, algorithm: &str,
    n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyArray1<bool>>)> {
    check_ridge(ridge)?;
    let nbh = neighborhood(algorithm)?;
    if let Ok(r) = x.cast::<reference::PyReference>() {
        for (given, name) in [(values.is_some(), "values"), (weights.is_some(), "sample_weight")] {
            if given {
                return Err(reference::own_arrays(name));
            }
        }
        return reference::local_polynomial(py, r.get(), queries, kernel, bandwidth, query_bandwidth, n_neighbors, knn_profile, degree, ridge, exclude_self, nbh, n_jobs, progress.as_ref());
    }
    let values = values.ok_or_else(|| type_error("values", "local_polynomial needs `values` (y) with raw samples".to_owned()))?;
    with_float!(x, F, {
        let ka = kernel_args::<F>(kernel, bandwidth, query_bandwidth, None, n_neighbors, knn_profile, None)?;
        let (q, xr, v) = (view2::<F>(queries, "X_query")?, view2::<F>(x, "X")?, view2::<F>(values, "y")?);
        let w = weights.map(|w| view1::<F>(w, "sample_weight")).transpose()?;
        let pb = Problem { queries: q.as_array(), x: xr.as_array(), values: Some(v.as_array()), weights: w.as_ref().map(|a| a.as_array()) };
        let (pred, singular) =
            run(py, n_jobs, progress.as_ref(), |mon| local_poly::predict(&pb, &ka.kernel, &ka.bandwidth, degree, ridge, nbh, exclude_self, mon))?;
        Ok((pred.into_pyarray(py).into_any(), singular.into_pyarray(py)))
    })
}

fn check_ridge(ridge: f64) -> PyResult<()> {
    if !(ridge >= 0.0) || !ridge.is_finite() {
        return Err(value_error("ridge", "`ridge` must be a finite non-negative number".into()));
    }
    Ok(())
}

/// The equivalent kernel of local polynomial regression (m×n) and the singular mask.
#[pyfunction]
#[pyo3(signature = (queries, x, kernel="gaussian", bandwidth=1.0, query_bandwidth=None, n_neighbors=None,
    knn_profile=None, degree=1, ridge=0.0, algorithm="auto", n_jobs=None))]
#[allow(clippy::too_many_arguments)]
fn equivalent_kernel<'py>(
    py: Python<'py>, queries: &Bound<'py, PyAny>, x: &Bound<'py, PyAny>, kernel: &str, bandwidth: f64,
    query_bandwidth: Option<&Bound<'py, PyAny>>, n_neighbors: Option<usize>, knn_profile: Option<&str>, degree: usize,
    ridge: f64, algorithm: &str, n_jobs: Option<NJobs>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyArray1<bool>>)> {
    check_ridge(ridge)?;
    let nbh = neighborhood(algorithm)?;
    with_float!(x, F, {
        let ka = kernel_args::<F>(kernel, bandwidth, query_bandwidth, None, n_neighbors, knn_profile, None)?;
        let (q, xr) = (view2::<F>(queries, "X_query")?, view2::<F>(x, "X")?);
        let (qa, xa) = (q.as_array(), xr.as_array());
        let (ell, singular) = run(py, n_jobs, None, |mon| local_poly::equivalent_kernel(qa, xa, &ka.kernel, &ka.bandwidth, degree, ridge, nbh, mon))?;
        Ok((ell.into_pyarray(py).into_any(), singular.into_pyarray(py)))
    })
}

/// The dense kernel matrix K(q_i, x_j) (m×n).
#[pyfunction]
#[pyo3(signature = (queries, x, kernel="gaussian", bandwidth=1.0, query_bandwidth=None, sample_bandwidth=None,
    n_neighbors=None, knn_profile=None, temperature=None, n_jobs=None))]
#[allow(clippy::too_many_arguments)]
fn kernel_matrix<'py>(
    py: Python<'py>, queries: &Bound<'py, PyAny>, x: &Bound<'py, PyAny>, kernel: &str, bandwidth: f64,
    query_bandwidth: Option<&Bound<'py, PyAny>>, sample_bandwidth: Option<&Bound<'py, PyAny>>, n_neighbors: Option<usize>,
    knn_profile: Option<&str>, temperature: Option<f64>, n_jobs: Option<NJobs>,
) -> PyResult<Bound<'py, PyAny>> {
    with_float!(x, F, {
        let ka = kernel_args::<F>(kernel, bandwidth, query_bandwidth, sample_bandwidth, n_neighbors, knn_profile, temperature)?;
        let (q, xr) = (view2::<F>(queries, "X_query")?, view2::<F>(x, "X")?);
        let (qa, xa) = (q.as_array(), xr.as_array());
        let k = run(py, n_jobs, None, |mon| engine::kernel_matrix(qa, xa, &ka.kernel, &ka.bandwidth, mon))?;
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

enum AnyIndex {
    F32(Index<f32>),
    F64(Index<f64>),
}

/// A fitted neighbour index (kd-tree or brute force) over the rows of X.
#[pyclass(module = "localization._core", frozen)]
struct NeighborIndex {
    inner: AnyIndex,
}

#[pymethods]
impl NeighborIndex {
    #[new]
    #[pyo3(signature = (x, algorithm="auto", leaf_size=30))]
    fn new(py: Python<'_>, x: &Bound<'_, PyAny>, algorithm: &str, leaf_size: usize) -> PyResult<Self> {
        let alg = Algorithm::from_name(algorithm)?;
        let inner = with_float!(x, F, {
            let xr = view2::<F>(x, "X")?;
            let xa = xr.as_array();
            let idx = run(py, None, None, |mon| Index::<F>::build(xa, alg, leaf_size, mon))?;
            wrap_index(idx)
        });
        Ok(NeighborIndex { inner })
    }

    /// (distances m×k, indices m×k) of the k nearest rows; `progress(done, total)` is called
    /// with the queries done.
    #[pyo3(signature = (queries, k, n_jobs=None, progress=None))]
    fn knn<'py>(
        &self, py: Python<'py>, queries: &Bound<'py, PyAny>, k: usize, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyArray2<i64>>)> {
        macro_rules! go {
            ($idx:expr, $F:ty) => {{
                let q = view2::<$F>(queries, "X")?;
                let qa = q.as_array();
                let (dist, ind) = run(py, n_jobs, progress.as_ref(), |mon| {
                    let nb = $idx.knn_reported(qa, k, mon, progress.is_some())?;
                    Ok((nb.distances, indices_i64("neighbor indices", &nb.indices)?))
                })?;
                let m = qa.nrows();
                let dist = ndarray::Array2::from_shape_vec((m, k), dist).map_err(internal)?;
                let ind = ndarray::Array2::from_shape_vec((m, k), ind).map_err(internal)?;
                Ok((dist.into_pyarray(py).into_any(), ind.into_pyarray(py)))
            }};
        }
        match &self.inner {
            AnyIndex::F32(i) => go!(i, f32),
            AnyIndex::F64(i) => go!(i, f64),
        }
    }

    /// (distances, indices) as flat arrays plus row offsets (CSR layout) of all rows within r:
    /// a number, or a float64 array with one radius per query; `progress` as in `knn`.
    #[pyo3(signature = (queries, r, n_jobs=None, progress=None))]
    #[allow(clippy::type_complexity)]
    fn radius<'py>(
        &self, py: Python<'py>, queries: &Bound<'py, PyAny>, r: &Bound<'py, PyAny>, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i64>>)> {
        let radii: Vec<f64> = match r.extract::<f64>() {
            Ok(v) => vec![v],
            Err(_) => view1::<f64>(r, "radius")?.as_array().to_vec(),
        };
        macro_rules! go {
            ($idx:expr, $F:ty) => {{
                let q = view2::<$F>(queries, "X")?;
                let qa = q.as_array();
                let rf: Vec<$F> = radii.iter().map(|&v| <$F>::of(v)).collect();
                let (dist, ind, offsets) = run(py, n_jobs, progress.as_ref(), |mon| {
                    let nb = $idx.radius_reported(qa, &rf, mon, progress.is_some())?;
                    let ind = indices_i64("radius neighbor indices", &nb.indices)?;
                    Ok((nb.distances, ind, indices_i64("radius neighbor offsets", &nb.offsets)?))
                })?;
                Ok((dist.into_pyarray(py).into_any(), ind.into_pyarray(py), offsets.into_pyarray(py)))
            }};
        }
        match &self.inner {
            AnyIndex::F32(i) => go!(i, f32),
            AnyIndex::F64(i) => go!(i, f64),
        }
    }
}

trait WrapIndex: Real {
    fn wrap(i: Index<Self>) -> AnyIndex;
}
impl WrapIndex for f32 {
    fn wrap(i: Index<f32>) -> AnyIndex {
        AnyIndex::F32(i)
    }
}
impl WrapIndex for f64 {
    fn wrap(i: Index<f64>) -> AnyIndex {
        AnyIndex::F64(i)
    }
}
fn wrap_index<F: WrapIndex>(i: Index<F>) -> AnyIndex {
    F::wrap(i)
}

/// (distances m×k, indices m×k) of the k nearest rows of `x` to each row of `queries` on the
/// coordinates both observe (NaN = missing), squared distances scaled by p / their number.
#[pyfunction]
#[pyo3(signature = (queries, x, k, exclude=None, n_jobs=None, progress=None))]
fn masked_knn<'py>(
    py: Python<'py>, queries: &Bound<'py, PyAny>, x: &Bound<'py, PyAny>, k: usize, exclude: Option<PyReadonlyArray1<'py, i64>>,
    n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyArray2<i64>>)> {
    let exclude: Option<Vec<usize>> = exclude
        .map(|e| e.as_array().iter().map(|&j| usize::try_from(j)).collect::<Result<_, _>>())
        .transpose()
        .map_err(|_| value_error("exclude", "`exclude` must hold non-negative indices".into()))?;
    with_float!(x, F, {
        let (q, xr) = (view2::<F>(queries, "X_query")?, view2::<F>(x, "X")?);
        let (qa, xa) = (q.as_array(), xr.as_array());
        let (dist, ind) = run(py, n_jobs, progress.as_ref(), |mon| {
            let (d, i) = masked::masked_knn(qa, xa, k, exclude.as_deref(), mon)?;
            Ok((d, indices_i64("masked neighbor indices", &i)?))
        })?;
        let m = qa.nrows();
        let dist = ndarray::Array2::from_shape_vec((m, k), dist).map_err(internal)?;
        let ind = ndarray::Array2::from_shape_vec((m, k), ind).map_err(internal)?;
        Ok((dist.into_pyarray(py).into_any(), ind.into_pyarray(py)))
    })
}

/// The number of threads `n_jobs` resolves to.
#[pyfunction]
#[pyo3(signature = (n_jobs=None))]
fn effective_n_jobs(n_jobs: Option<NJobs>) -> PyResult<usize> {
    runtime::threads(n_jobs)
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

// Bindings of the method families: one file each, declared here (after the helpers and the
// `with_float!` macro above, which they use) and registered in `_core` below.

mod binned;
mod cluster;
mod modes;
mod denoise;
mod reference;
mod embedding;
mod ready;
mod runtime;
mod sequence;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(local_sums, m)?)?;
    m.add_function(wrap_pyfunction!(ready::ready_local_mean, m)?)?;
    m.add_function(wrap_pyfunction!(ready::ready_kernel_sum, m)?)?;
    m.add_function(wrap_pyfunction!(local_polynomial, m)?)?;
    m.add_function(wrap_pyfunction!(equivalent_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(kernel_matrix, m)?)?;
    m.add_function(wrap_pyfunction!(profile_values, m)?)?;
    m.add_function(wrap_pyfunction!(log_integral, m)?)?;
    m.add_function(wrap_pyfunction!(profile_info, m)?)?;
    m.add_function(wrap_pyfunction!(effective_n_jobs, m)?)?;
    m.add_function(wrap_pyfunction!(exp_throughput, m)?)?;
    m.add_function(wrap_pyfunction!(masked_knn, m)?)?;
    m.add_class::<NeighborIndex>()?;
    m.add_class::<reference::PyReference>()?;
    binned::register(m)?;
    cluster::register(m)?;
    modes::register(m)?;
    denoise::register(m)?;
    embedding::register(m)?;
    sequence::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // Tuning constants of the core that the Python layer's own choices follow.
    m.add("LEAF_SIZE", crate::neighbors::LEAF_SIZE)?;
    m.add("GEMM_MIN_DIM", crate::distance::GEMM_MIN_DIM)?;
    m.add("GRID_MAX_FEATURES", crate::algorithms::mean_shift::GRID_MAX_FEATURES)?;
    Ok(())
}

//! Bindings of the mode-seeking family: MedoidShift and QuickShift steps, forest resolution.

use super::runtime::{run, NJobs};
use super::{indices2, is_f32, to_vec1, value_error, view1, view2};
use crate::algorithms::{forest, medoid_shift, quickshift};
use crate::kernel::Profile;
use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// Optional per-sample weights, always float64 (they multiply the kernel in f64).
fn f64_weights(w: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<f64>>> {
    w.map(|w| to_vec1(&view1::<f64>(w, "sample_weight")?, "sample_weight")).transpose()
}

fn to_i64(v: Vec<usize>) -> Vec<i64> {
    v.into_iter().map(|j| j as i64).collect()
}

/// MedoidShift next(i) from a precomputed square distance matrix (dense, O(N³)).
#[pyfunction]
#[pyo3(signature = (d, kernel="gaussian", bandwidth=1.0, weights=None, n_jobs=None, progress=None))]
fn medoid_shift_dense<'py>(
    py: Python<'py>, d: &Bound<'py, PyAny>, kernel: &str, bandwidth: f64, weights: Option<&Bound<'py, PyAny>>, n_jobs: Option<NJobs>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let profile = Profile::from_name(kernel)?;
    let w = f64_weights(weights)?;
    let w = w.as_deref();
    let next = with_float!(d, F, {
        let dv = view2::<F>(d, "X")?;
        let da = dv.as_array();
        run(py, n_jobs, progress.as_ref(), |mon| medoid_shift::dense_step(da, profile, bandwidth, w, mon))?
    });
    Ok(to_i64(next).into_pyarray(py))
}

/// kNN-sparse MedoidShift next(i). With `x` data: Euclidean, `distances` give the weights;
/// with `precomputed=True`, `x` is the square distance matrix and `distances` is ignored.
#[pyfunction]
#[pyo3(signature = (x, indices, distances=None, precomputed=false, kernel="gaussian", bandwidth=1.0, weights=None, n_jobs=None,
    progress=None))]
#[allow(clippy::too_many_arguments)]
fn medoid_shift_knn<'py>(
    py: Python<'py>, x: &Bound<'py, PyAny>, indices: &Bound<'py, PyAny>, distances: Option<&Bound<'py, PyAny>>, precomputed: bool,
    kernel: &str, bandwidth: f64, weights: Option<&Bound<'py, PyAny>>, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let profile = Profile::from_name(kernel)?;
    let w = f64_weights(weights)?;
    let w = w.as_deref();
    let (idx, k) = indices2(indices, "indices")?;
    let next = with_float!(x, F, {
        let xv = view2::<F>(x, "X")?;
        let xa = xv.as_array();
        if precomputed {
            run(py, n_jobs, progress.as_ref(), |mon| medoid_shift::knn_step_precomputed(xa, &idx, k, profile, bandwidth, w, mon))?
        } else {
            let dist = distances.ok_or_else(|| value_error("distances", "`distances` is required for Euclidean data".into()))?;
            let dv = view2::<F>(dist, "distances")?;
            let dflat: Vec<F> = dv.as_array().iter().copied().collect();
            run(py, n_jobs, progress.as_ref(), |mon| medoid_shift::knn_step_euclidean(xa, &idx, &dflat, k, profile, bandwidth, w, mon))?
        }
    });
    Ok(to_i64(next).into_pyarray(py))
}

fn window(features: Option<Vec<usize>>, half_width: Option<f64>) -> PyResult<Option<quickshift::Window>> {
    match (features, half_width) {
        (Some(features), Some(half_width)) => Ok(Some(quickshift::Window { features, half_width })),
        (None, None) => Ok(None),
        _ => Err(value_error("window", "`window` and `window_features` go together".into())),
    }
}

/// QuickShift links: (parent, distance to parent; +inf for points with no sample above them),
/// optionally within a box window on some features.
#[pyfunction]
#[pyo3(signature = (x, log_density, max_dist, window_features=None, window=None, n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn quickshift_links<'py>(
    py: Python<'py>, x: &Bound<'py, PyAny>, log_density: &Bound<'py, PyAny>, max_dist: f64, window_features: Option<Vec<usize>>,
    window: Option<f64>, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<(Bound<'py, PyArray1<i64>>, Bound<'py, PyAny>)> {
    let ld = to_vec1(&view1::<f64>(log_density, "log_density")?, "log_density")?;
    let win = self::window(window_features, window)?;
    with_float!(x, F, {
        let xv = view2::<F>(x, "X")?;
        let xa = xv.as_array();
        let (parent, dist) = run(py, n_jobs, progress.as_ref(), |mon| quickshift::link(xa, &ld, max_dist, win.as_ref(), mon))?;
        Ok((to_i64(parent).into_pyarray(py), dist.into_pyarray(py).into_any()))
    })
}

/// QuickShift's windowed density Σ_{j in the box window of i} w_j k(‖x_i − x_j‖/h), float64.
#[pyfunction]
#[pyo3(signature = (x, window_features, window, kernel="gaussian", bandwidth=1.0, weights=None, n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn quickshift_density<'py>(
    py: Python<'py>, x: &Bound<'py, PyAny>, window_features: Vec<usize>, window: f64, kernel: &str, bandwidth: f64,
    weights: Option<&Bound<'py, PyAny>>, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let profile = Profile::from_name(kernel)?;
    let w = f64_weights(weights)?;
    let w = w.as_deref();
    let win = quickshift::Window { features: window_features, half_width: window };
    let dens = with_float!(x, F, {
        let xv = view2::<F>(x, "X")?;
        let xa = xv.as_array();
        run(py, n_jobs, progress.as_ref(), |mon| quickshift::windowed_density(xa, &win, profile, bandwidth, w, mon))?
    });
    Ok(dens.into_pyarray(py))
}

/// Break the cycles of a parent map; returns (forest parent map, root of every node).
#[pyfunction]
fn resolve_forest<'py>(py: Python<'py>, next: &Bound<'py, PyArray1<i64>>) -> PyResult<(Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i64>>)> {
    let n = next.len();
    let ro = next.readonly();
    let mut nx = Vec::with_capacity(n);
    for &j in ro.as_array().iter() {
        match usize::try_from(j) {
            Ok(u) if u < n => nx.push(u),
            _ => return Err(value_error("next", "`next` must hold indices in [0, N)".into())),
        }
    }
    let root = py.detach(|| forest::resolve(&mut nx));
    Ok((to_i64(nx).into_pyarray(py), to_i64(root).into_pyarray(py)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(medoid_shift_dense, m)?)?;
    m.add_function(wrap_pyfunction!(medoid_shift_knn, m)?)?;
    m.add_function(wrap_pyfunction!(quickshift_links, m)?)?;
    m.add_function(wrap_pyfunction!(quickshift_density, m)?)?;
    m.add_function(wrap_pyfunction!(resolve_forest, m)?)?;
    Ok(())
}

//! Bindings of the neighbour searches: the fitted index (k nearest, radius) and the
//! k nearest on co-observed coordinates.

use super::convert::{internal, is_f32, to_vec1, value_error, view1, view2};
use super::runtime::{run, NJobs};
use crate::memory;
use crate::neighbors::{masked, Algorithm, Index};
use crate::real::Real;
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1};
use pyo3::prelude::*;

/// Indices as NumPy's int64, converted into a fallibly allocated array.
fn indices_i64(name: &'static str, v: &[usize]) -> crate::error::Result<Vec<i64>> {
    let mut out = memory::try_vec(name, &[v.len()], 0i64)?;
    out.iter_mut().zip(v).for_each(|(o, &j)| *o = j as i64);
    Ok(out)
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
            Err(_) => to_vec1(&view1::<f64>(r, "radius")?, "radius")?,
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

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(masked_knn, m)?)?;
    m.add_class::<NeighborIndex>()?;
    Ok(())
}

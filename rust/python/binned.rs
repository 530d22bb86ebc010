//! Bindings of the binned kernel sum's O(n) halves (`engine::binned`): linear binning and
//! multilinear interpolation. No math here: the Python layer (`localization._binned`) chooses
//! the grid, runs the FFT convolution and computes the error bound.

use super::runtime::{run, NJobs};
use super::{is_f32, type_error, view1, view2};
use crate::engine::binned::{self, RegularGrid};
use numpy::{IntoPyArray, PyArray2, PyReadonlyArray2};
use pyo3::prelude::*;

/// Linear binning of the rows of x (with weights and values) onto a regular grid:
/// (1 + p) × nodes float64, row 0 the binned weights.
#[pyfunction]
#[pyo3(signature = (x, lo, delta, sizes, weights=None, values=None, n_jobs=None))]
fn bin_linear<'py>(
    py: Python<'py>, x: &Bound<'py, PyAny>, lo: Vec<f64>, delta: Vec<f64>, sizes: Vec<usize>, weights: Option<&Bound<'py, PyAny>>,
    values: Option<&Bound<'py, PyAny>>, n_jobs: Option<NJobs>,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let grid = RegularGrid::new(&lo, &delta, &sizes)?;
    with_float!(x, F, {
        let xr = view2::<F>(x, "X")?;
        let w = weights.map(|w| view1::<F>(w, "sample_weight")).transpose()?;
        let v = values.map(|v| view2::<F>(v, "values")).transpose()?;
        let (xa, wa, va) = (xr.as_array(), w.as_ref().map(|a| a.as_array()), v.as_ref().map(|a| a.as_array()));
        let out = run(py, n_jobs, None, |mon| binned::bin_linear(&grid, xa, wa, va, mon))?;
        Ok(out.into_pyarray(py))
    })
}

/// Multilinear interpolation of grid rows (columns × nodes, float64) at the queries: m × columns.
#[pyfunction]
#[pyo3(signature = (sums, queries, lo, delta, sizes, n_jobs=None))]
fn interpolate_grid<'py>(
    py: Python<'py>, sums: &Bound<'py, PyAny>, queries: &Bound<'py, PyAny>, lo: Vec<f64>, delta: Vec<f64>, sizes: Vec<usize>,
    n_jobs: Option<NJobs>,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let grid = RegularGrid::new(&lo, &delta, &sizes)?;
    let s: PyReadonlyArray2<f64> = sums.extract().map_err(|_| type_error("sums", "`sums` must be a 2-D float64 array".into()))?;
    let sa = s.as_array();
    with_float!(queries, F, {
        let q = view2::<F>(queries, "X_query")?;
        let qa = q.as_array();
        let out = run(py, n_jobs, None, |mon| binned::interpolate(&grid, sa, qa, mon))?;
        Ok(out.into_pyarray(py))
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(bin_linear, m)?)?;
    m.add_function(wrap_pyfunction!(interpolate_grid, m)?)?;
    Ok(())
}

//! Bindings of the mode-seeking family (MeanShift): arrays in, plain arrays out.
//!
//! The runs report their progress (seeds finished, or iterations) to the monitor; the
//! calling thread passes it to the caller's `progress(done, total)` while checking Ctrl-C
//! (`runtime::run`).

use super::runtime::{run, NJobs};
use super::{is_f32, view1, view2};
use crate::algorithms::mean_shift::{self, Params, Shifted};
use crate::kernel::{Profile, Real};
use numpy::{Element, IntoPyArray, PyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

fn params(kernel: &str, bandwidth: f64, step: f64, tol: f64, max_iter: usize, trajectories: bool) -> PyResult<Params> {
    let p = Params { profile: Profile::from_name(kernel)?, bandwidth, step, tol, max_iter, trajectories };
    p.validate()?;
    Ok(p)
}

fn shifted_to_py<'py, F: Real + Element>(py: Python<'py>, s: Shifted<F>, d: usize) -> PyResult<Bound<'py, PyTuple>> {
    let trajectories: Option<Bound<'py, PyAny>> = if s.trajectories.is_empty() {
        None
    } else {
        let list = PyList::empty(py);
        for t in s.trajectories {
            let k = t.len() / d;
            let a = ndarray::Array2::from_shape_vec((k, d), t).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
            list.append(a.into_pyarray(py))?;
        }
        Some(list.into_any())
    };
    let n_iter: Vec<i64> = s.n_iter.iter().map(|&v| v as i64).collect();
    PyTuple::new(py, [
        Some(s.modes.into_pyarray(py).into_any()),
        Some(s.support.into_pyarray(py).into_any()),
        Some(n_iter.into_pyarray(py).into_any()),
        Some(s.converged.into_pyarray(py).into_any()),
        Some(s.valid.into_pyarray(py).into_any()),
        trajectories,
    ])
}

/// Shift each seed to its mode with exact kernel sums.
/// Returns (modes, support, n_iter, converged, valid, trajectories|None).
#[pyfunction]
#[pyo3(signature = (x, seeds, weights=None, kernel="flat", bandwidth=1.0, step=1.0, tol=1e-3, max_iter=300,
    trajectories=false, n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn mean_shift_seeds<'py>(
    py: Python<'py>, x: &Bound<'py, PyAny>, seeds: &Bound<'py, PyAny>, weights: Option<&Bound<'py, PyAny>>, kernel: &str,
    bandwidth: f64, step: f64, tol: f64, max_iter: usize, trajectories: bool, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let p = params(kernel, bandwidth, step, tol, max_iter, trajectories)?;
    with_float!(x, F, {
        let (xr, sr) = (view2::<F>(x, "X")?, view2::<F>(seeds, "seeds")?);
        let w = weights.map(|w| view1::<F>(w, "sample_weight")).transpose()?;
        let (xa, sa, wa) = (xr.as_array(), sr.as_array(), w.as_ref().map(|a| a.as_array()));
        let s = run(py, n_jobs, progress.as_ref(), |mon| mean_shift::shift_seeds(xa, wa, sa, &p, mon))?;
        shifted_to_py(py, s, xa.ncols())
    })
}

/// Grid (cell-aggregate) mean shift. With `seeds=None` the seeds are the occupied cells'
/// centroids and the last item maps each data point to its seed.
/// Returns (modes, support, n_iter, converged, valid, trajectories|None, point_seed|None, seeds).
#[pyfunction]
#[pyo3(signature = (x, seeds=None, weights=None, bandwidth=1.0, grid_resolution=4, step=1.0, tol=1e-3, max_iter=300,
    trajectories=false, n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn mean_shift_grid<'py>(
    py: Python<'py>, x: &Bound<'py, PyAny>, seeds: Option<&Bound<'py, PyAny>>, weights: Option<&Bound<'py, PyAny>>,
    bandwidth: f64, grid_resolution: usize, step: f64, tol: f64, max_iter: usize, trajectories: bool, n_jobs: Option<NJobs>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let p = params("flat", bandwidth, step, tol, max_iter, trajectories)?;
    with_float!(x, F, {
        let xr = view2::<F>(x, "X")?;
        let sr = seeds.map(|s| view2::<F>(s, "seeds")).transpose()?;
        let w = weights.map(|w| view1::<F>(w, "sample_weight")).transpose()?;
        let (xa, wa) = (xr.as_array(), w.as_ref().map(|a| a.as_array()));
        let sa = sr.as_ref().map(|s| s.as_array());
        let (s, map, cells) = run(py, n_jobs, progress.as_ref(), |mon| {
            let grid = mean_shift::Grid::<F>::build(xa, wa, bandwidth, grid_resolution)?;
            match sa {
                Some(s) => mean_shift::grid_shift(&grid, s, &p, mon).map(|r| (r, None, None)),
                None => {
                    let cells = grid.centroids.clone();
                    let r = mean_shift::grid_shift(&grid, cells.view(), &p, mon)?;
                    let map: Vec<i64> = grid.point_cell.iter().map(|&s| s as i64).collect();
                    Ok((r, Some(map), Some(cells)))
                }
            }
        })?;
        let t = shifted_to_py(py, s, xa.ncols())?;
        let mut items: Vec<Option<Bound<'py, PyAny>>> = t.iter().map(|o| (!o.is_none()).then_some(o)).collect();
        items.push(map.map(|m| m.into_pyarray(py).into_any()));
        items.push(cells.map(|c| c.into_pyarray(py).into_any()));
        PyTuple::new(py, items)
    })
}

/// Blurring mean shift (`blurring=True`) or fixed-kernel diffusion (`blurring=False`).
/// Returns (positions, support, n_iter, converged, history|None).
#[pyfunction]
#[pyo3(signature = (x, weights=None, kernel="flat", bandwidth=1.0, step=1.0, tol=1e-3, max_iter=300, blurring=true,
    history=false, n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn mean_shift_diffuse<'py>(
    py: Python<'py>, x: &Bound<'py, PyAny>, weights: Option<&Bound<'py, PyAny>>, kernel: &str, bandwidth: f64, step: f64,
    tol: f64, max_iter: usize, blurring: bool, history: bool, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let p = params(kernel, bandwidth, step, tol, max_iter, history)?;
    with_float!(x, F, {
        let xr = view2::<F>(x, "X")?;
        let w = weights.map(|w| view1::<F>(w, "sample_weight")).transpose()?;
        let (xa, wa) = (xr.as_array(), w.as_ref().map(|a| a.as_array()));
        let out = run(py, n_jobs, progress.as_ref(), |mon| mean_shift::diffuse(xa, wa, &p, blurring, mon))?;
        let hist: Option<Bound<'py, PyAny>> = if history {
            let list = PyList::empty(py);
            for a in out.history {
                list.append(a.into_pyarray(py))?;
            }
            Some(list.into_any())
        } else {
            None
        };
        PyTuple::new(py, [
            Some(out.positions.into_pyarray(py).into_any()),
            Some(out.support.into_pyarray(py).into_any()),
            Some(out.n_iter.into_pyobject(py)?.into_any()),
            Some(pyo3::types::PyBool::new(py, out.converged).to_owned().into_any()),
            hist,
        ])
    })
}

/// scikit-learn's merge of converged seeds: indices of the kept centres, strongest first.
#[pyfunction]
fn merge_modes<'py>(
    py: Python<'py>, centres: &Bound<'py, PyAny>, support: &Bound<'py, PyAny>, valid: &Bound<'py, PyAny>, radius: f64,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let sup = view1::<f64>(support, "support")?;
    let val: numpy::PyReadonlyArray1<'py, bool> = valid.extract()?;
    if !(radius >= 0.0) || !radius.is_finite() {
        return Err(crate::error::LocalizationError::param("radius", "must be a finite non-negative number").into());
    }
    let kept = with_float!(centres, F, {
        let c = view2::<F>(centres, "centres")?;
        let (ca, sa, va) = (c.as_array(), sup.as_slice()?, val.as_slice()?);
        py.detach(|| mean_shift::merge_modes(ca, sa, va, radius))?
    });
    Ok(kept.into_iter().map(|i| i as i64).collect::<Vec<_>>().into_pyarray(py))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(mean_shift_seeds, m)?)?;
    m.add_function(wrap_pyfunction!(mean_shift_grid, m)?)?;
    m.add_function(wrap_pyfunction!(mean_shift_diffuse, m)?)?;
    m.add_function(wrap_pyfunction!(merge_modes, m)?)?;
    Ok(())
}

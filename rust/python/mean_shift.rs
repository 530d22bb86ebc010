//! Bindings of the mode-seeking family (MeanShift): arrays in, plain arrays out.
//!
//! The runs report their progress (seeds finished, or iterations) to the monitor; the
//! calling thread passes it to the caller's `progress(done, total)` while checking Ctrl-C
//! (`runtime::run`).

use super::runtime::{run, NJobs};
use super::{internal, is_f32, state_error, to_vec1, value_error, view1, view2, PySums};
use crate::algorithms::fixed_point::{SeedSet, Shifted, Stop, Sums};
use crate::algorithms::mean_shift::{self, Cells, GridSpec, Params, Window};
use crate::error::LocalizationError;
use crate::memory;
use crate::kernel::Profile;
use crate::real::Real;
use numpy::{Element, IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

fn params(kernel: &str, bandwidth: f64, step: f64, tol: f64, max_iter: usize, trajectories: bool) -> PyResult<Params> {
    let p = Params { profile: Profile::from_name(kernel)?, bandwidth, step, tol, max_iter, trajectories };
    p.validate()?;
    Ok(p)
}

/// Where each seed's climb ended. A grid run given no seeds also has its seeds (the occupied
/// cells' weighted centroids) and each data point's seed.
#[pyclass(module = "localization._core", name = "Shifted", frozen)]
struct PyShifted {
    modes: Py<PyAny>,
    support: Py<PyAny>,
    n_iter: Py<PyAny>,
    converged: Py<PyAny>,
    valid: Py<PyAny>,
    trajectories: Option<Py<PyAny>>,
    point_seed: Option<Py<PyAny>>,
    seeds: Option<Py<PyAny>>,
}

#[pymethods]
impl PyShifted {
    /// The end point of each seed (n_seeds × d).
    #[getter]
    fn modes<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.modes.bind(py).clone()
    }

    /// The total weight Σ K w in each end point's window (float64).
    #[getter]
    fn support<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.support.bind(py).clone()
    }

    /// The iterations each seed took (int64).
    #[getter]
    fn n_iter<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.n_iter.bind(py).clone()
    }

    /// Whether each seed stopped by the tolerance rather than `max_iter`.
    #[getter]
    fn converged<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.converged.bind(py).clone()
    }

    /// Whether each seed's window ever held data (a seed in an empty window stays and is invalid).
    #[getter]
    fn valid<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.valid.bind(py).clone()
    }

    /// Each seed's path (iterations + 1 positions), when asked with `trajectories=True`.
    #[getter]
    fn trajectories<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.trajectories.as_ref().map(|a| a.bind(py).clone())
    }

    /// The seed of each data point (int64), for a grid run given no seeds.
    #[getter]
    fn point_seed<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.point_seed.as_ref().map(|a| a.bind(py).clone())
    }

    /// The seeds a grid run given none made: the occupied cells' weighted centroids.
    #[getter]
    fn seeds<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.seeds.as_ref().map(|a| a.bind(py).clone())
    }
}

fn shifted_to_py<F: Real + Element>(py: Python<'_>, s: Shifted<F>, d: usize) -> PyResult<PyShifted> {
    let trajectories = if s.trajectories.is_empty() {
        None
    } else {
        let list = PyList::empty(py);
        for t in s.trajectories {
            let k = t.len() / d;
            let a = ndarray::Array2::from_shape_vec((k, d), t).map_err(internal)?;
            list.append(a.into_pyarray(py))?;
        }
        Some(list.into_any().unbind())
    };
    let n_iter: Vec<i64> = s.n_iter.iter().map(|&v| v as i64).collect();
    Ok(PyShifted {
        modes: s.modes.into_pyarray(py).into_any().unbind(),
        support: s.support.into_pyarray(py).into_any().unbind(),
        n_iter: n_iter.into_pyarray(py).into_any().unbind(),
        converged: s.converged.into_pyarray(py).into_any().unbind(),
        valid: s.valid.into_pyarray(py).into_any().unbind(),
        trajectories,
        point_seed: None,
        seeds: None,
    })
}

/// Shift each seed to its mode with exact kernel sums.
#[pyfunction]
#[pyo3(signature = (x, seeds, weights=None, kernel="flat", bandwidth=1.0, step=1.0, tol=1e-3, max_iter=300,
    trajectories=false, n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn mean_shift_seeds<'py>(
    py: Python<'py>, x: &Bound<'py, PyAny>, seeds: &Bound<'py, PyAny>, weights: Option<&Bound<'py, PyAny>>, kernel: &str,
    bandwidth: f64, step: f64, tol: f64, max_iter: usize, trajectories: bool, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<PyShifted> {
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
/// centroids, returned with each data point's seed.
#[pyfunction]
#[pyo3(signature = (x, seeds=None, weights=None, bandwidth=1.0, grid_resolution=4, step=1.0, tol=1e-3, max_iter=300,
    trajectories=false, n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn mean_shift_grid<'py>(
    py: Python<'py>, x: &Bound<'py, PyAny>, seeds: Option<&Bound<'py, PyAny>>, weights: Option<&Bound<'py, PyAny>>,
    bandwidth: f64, grid_resolution: usize, step: f64, tol: f64, max_iter: usize, trajectories: bool, n_jobs: Option<NJobs>,
    progress: Option<Py<PyAny>>,
) -> PyResult<PyShifted> {
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
        let mut out = shifted_to_py(py, s, xa.ncols())?;
        out.point_seed = map.map(|m| m.into_pyarray(py).into_any().unbind());
        out.seeds = cells.map(|c| c.into_pyarray(py).into_any().unbind());
        Ok(out)
    })
}

/// Where a blurring or fixed-kernel run moved the data set.
#[pyclass(module = "localization._core", name = "Diffused", frozen)]
struct PyDiffused {
    positions: Py<PyAny>,
    support: Py<PyAny>,
    n_iter: usize,
    converged: bool,
    history: Option<Py<PyAny>>,
}

#[pymethods]
impl PyDiffused {
    /// The final position of every data point (n × d).
    #[getter]
    fn positions<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.positions.bind(py).clone()
    }

    /// The total weight Σ K w in each final position's window (float64).
    #[getter]
    fn support<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.support.bind(py).clone()
    }

    /// The iterations the run took (all points move together).
    #[getter]
    fn n_iter(&self) -> usize {
        self.n_iter
    }

    /// Whether the run stopped by the tolerance rather than `max_iter`.
    #[getter]
    fn converged(&self) -> bool {
        self.converged
    }

    /// The positions after each iteration, when asked with `history=True`.
    #[getter]
    fn history<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.history.as_ref().map(|a| a.bind(py).clone())
    }
}

/// Blurring mean shift (`blurring=True`) or fixed-kernel diffusion (`blurring=False`).
#[pyfunction]
#[pyo3(signature = (x, weights=None, kernel="flat", bandwidth=1.0, step=1.0, tol=1e-3, max_iter=300, blurring=true,
    history=false, n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn mean_shift_diffuse<'py>(
    py: Python<'py>, x: &Bound<'py, PyAny>, weights: Option<&Bound<'py, PyAny>>, kernel: &str, bandwidth: f64, step: f64,
    tol: f64, max_iter: usize, blurring: bool, history: bool, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<PyDiffused> {
    let p = params(kernel, bandwidth, step, tol, max_iter, history)?;
    with_float!(x, F, {
        let xr = view2::<F>(x, "X")?;
        let w = weights.map(|w| view1::<F>(w, "sample_weight")).transpose()?;
        let (xa, wa) = (xr.as_array(), w.as_ref().map(|a| a.as_array()));
        let out = run(py, n_jobs, progress.as_ref(), |mon| mean_shift::diffuse(xa, wa, &p, blurring, mon))?;
        let history = if history {
            let list = PyList::empty(py);
            for a in out.history {
                list.append(a.into_pyarray(py))?;
            }
            Some(list.into_any().unbind())
        } else {
            None
        };
        Ok(PyDiffused {
            positions: out.positions.into_pyarray(py).into_any().unbind(),
            support: out.support.into_pyarray(py).into_any().unbind(),
            n_iter: out.n_iter,
            converged: out.converged,
            history,
        })
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
        return Err(LocalizationError::param("radius", "must be a finite non-negative number").into());
    }
    let kept = with_float!(centres, F, {
        let c = view2::<F>(centres, "centres")?;
        let (ca, sa, va) = (c.as_array(), sup.as_slice()?, val.as_slice()?);
        py.detach(|| mean_shift::merge_modes(ca, sa, va, radius))?
    });
    Ok(kept.into_iter().map(|i| i as i64).collect::<Vec<_>>().into_pyarray(py))
}

enum AnyWindow {
    F32(Window<f32>),
    F64(Window<f64>),
}

trait WrapWindow: Real + Element {
    fn wrap(w: Window<Self>) -> AnyWindow;
}
impl WrapWindow for f32 {
    fn wrap(w: Window<f32>) -> AnyWindow {
        AnyWindow::F32(w)
    }
}
impl WrapWindow for f64 {
    fn wrap(w: Window<f64>) -> AnyWindow {
        AnyWindow::F64(w)
    }
}

fn sums_to_py<'py>(py: Python<'py>, s: Sums) -> PyResult<Bound<'py, PySums>> {
    PySums::of(py, s.num.into_pyarray(py).into_any(), s.den.into_pyarray(py).into_any(), s.log_scale.into_pyarray(py).into_any(), None, None)
}

/// MeanShift windows over (X, weights) for one kernel and bandwidth, prepared once (a tree
/// for compact kernels) and summed at any positions. Pickles as its arguments (rebuilt on
/// arrival from X and weights, which it keeps by reference for that and which must not change).
#[pyclass(module = "localization._core", frozen)]
struct MeanShiftWindow {
    x: Py<PyAny>,
    weights: Option<Py<PyAny>>,
    kernel: String,
    bandwidth: f64,
    inner: AnyWindow,
}

#[pymethods]
impl MeanShiftWindow {
    #[new]
    #[pyo3(signature = (x, weights=None, kernel="flat", bandwidth=1.0, n_jobs=None))]
    fn new(py: Python<'_>, x: &Bound<'_, PyAny>, weights: Option<&Bound<'_, PyAny>>, kernel: &str, bandwidth: f64, n_jobs: Option<NJobs>) -> PyResult<Self> {
        let profile = Profile::from_name(kernel)?;
        let inner = with_float!(x, F, {
            let xr = view2::<F>(x, "X")?;
            let w = weights.map(|w| view1::<F>(w, "sample_weight")).transpose()?;
            let (xa, wa) = (xr.as_array(), w.as_ref().map(|a| a.as_array()));
            let win = run(py, n_jobs, None, |mon| Window::build(xa, wa, profile, bandwidth, mon))?;
            <F as WrapWindow>::wrap(win)
        });
        Ok(MeanShiftWindow { x: x.clone().unbind(), weights: weights.map(|w| w.clone().unbind()), kernel: kernel.to_string(), bandwidth, inner })
    }

    /// The sums (num = Σ K w x, m×d; den = Σ K w; log_scale), float64, of the windows at
    /// `positions`; the sums are stored divided by exp(log_scale).
    #[pyo3(signature = (positions, n_jobs=None))]
    fn sums<'py>(&self, py: Python<'py>, positions: &Bound<'py, PyAny>, n_jobs: Option<NJobs>) -> PyResult<Bound<'py, PySums>> {
        macro_rules! go {
            ($win:expr, $F:ty) => {{
                let q = view2::<$F>(positions, "positions")?;
                let qa = q.as_array();
                let s = run(py, n_jobs, None, |mon| $win.sums(qa, mon))?;
                sums_to_py(py, s)
            }};
        }
        match &self.inner {
            AnyWindow::F32(win) => go!(win, f32),
            AnyWindow::F64(win) => go!(win, f64),
        }
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let args = PyTuple::new(py, [
            self.x.clone_ref(py),
            self.weights.as_ref().map_or_else(|| py.None(), |w| w.clone_ref(py)),
            self.kernel.clone().into_pyobject(py)?.into_any().unbind(),
            self.bandwidth.into_pyobject(py)?.into_any().unbind(),
        ])?;
        PyTuple::new(py, [py.get_type::<MeanShiftWindow>().into_any(), args.into_any()])
    }
}

enum AnySeeds {
    F32(SeedSet<f32>),
    F64(SeedSet<f64>),
}

trait WrapSeeds: Real + Element {
    fn wrap(s: SeedSet<Self>) -> AnySeeds;
}
impl WrapSeeds for f32 {
    fn wrap(s: SeedSet<f32>) -> AnySeeds {
        AnySeeds::F32(s)
    }
}
impl WrapSeeds for f64 {
    fn wrap(s: SeedSet<f64>) -> AnySeeds {
        AnySeeds::F64(s)
    }
}

/// Seeds climbing in rounds: `positions()` gives the seeds still moving, `advance(num,
/// den, log_scale)` moves them by their window sums (merged over shards by the caller),
/// `result()` ends the run with the tuple of `mean_shift_seeds`.
#[pyclass(module = "localization._core")]
struct MeanShiftSeeds {
    stop: Stop,
    d: usize,
    inner: Option<AnySeeds>,
}

impl MeanShiftSeeds {
    fn set(&self) -> PyResult<&AnySeeds> {
        self.inner.as_ref().ok_or_else(|| state_error("the run has ended (result() was called)"))
    }
}

#[pymethods]
impl MeanShiftSeeds {
    #[new]
    #[pyo3(signature = (seeds, kernel="flat", bandwidth=1.0, step=1.0, tol=1e-3, max_iter=300, trajectories=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(seeds: &Bound<'_, PyAny>, kernel: &str, bandwidth: f64, step: f64, tol: f64, max_iter: usize, trajectories: bool) -> PyResult<Self> {
        let params = params(kernel, bandwidth, step, tol, max_iter, trajectories)?;
        let (inner, d) = with_float!(seeds, F, {
            let sr = view2::<F>(seeds, "seeds")?;
            let sa = sr.as_array();
            if sa.ncols() == 0 {
                return Err(LocalizationError::param("seeds", "needs at least one feature").into());
            }
            (<F as WrapSeeds>::wrap(SeedSet::new(sa, &params.stop())?), sa.ncols())
        });
        Ok(MeanShiftSeeds { stop: params.stop(), d, inner: Some(inner) })
    }

    /// Positions of the seeds still moving, in the seeds' dtype.
    fn positions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self.set()? {
            AnySeeds::F32(s) => s.positions().into_pyarray(py).into_any(),
            AnySeeds::F64(s) => s.positions().into_pyarray(py).into_any(),
        })
    }

    #[getter]
    fn n_active(&self) -> PyResult<usize> {
        Ok(match self.set()? {
            AnySeeds::F32(s) => s.n_active(),
            AnySeeds::F64(s) => s.n_active(),
        })
    }

    #[getter]
    fn iteration(&self) -> PyResult<usize> {
        Ok(match self.set()? {
            AnySeeds::F32(s) => s.iteration(),
            AnySeeds::F64(s) => s.iteration(),
        })
    }

    /// One step of every active seed from its window sums (float64, row a for the a-th
    /// active seed, stored divided by exp(log_scale)).
    fn advance(&mut self, num: PyReadonlyArray2<'_, f64>, den: PyReadonlyArray1<'_, f64>, log_scale: PyReadonlyArray1<'_, f64>) -> PyResult<()> {
        let sums = Sums { num: memory::try_copy("num", num.as_array())?, den: to_vec1(&den, "den")?, log_scale: to_vec1(&log_scale, "log_scale")? };
        let p = &self.stop;
        match self.inner.as_mut().ok_or_else(|| state_error("the run has ended (result() was called)"))? {
            AnySeeds::F32(s) => s.advance(&sums, p)?,
            AnySeeds::F64(s) => s.advance(&sums, p)?,
        }
        Ok(())
    }

    /// End the run: where each seed ended.
    fn result(&mut self, py: Python<'_>) -> PyResult<PyShifted> {
        let set = self.inner.take().ok_or_else(|| state_error("the run has ended (result() was called)"))?;
        match set {
            AnySeeds::F32(s) => shifted_to_py(py, s.finish()?, self.d),
            AnySeeds::F64(s) => shifted_to_py(py, s.finish()?, self.d),
        }
    }
}

/// Occupied cells of a grid over part of the data with their sums (Σ w, Σ w x and, when some
/// cell weighs nothing, the count and Σ x): what `grid_cells` returns and `grid_merge` merges;
/// pickled as its arrays (Dask moves it between workers).
#[pyclass(module = "localization._core", name = "GridCells", frozen)]
pub(super) struct PyCells(Cells);

#[pymethods]
impl PyCells {
    #[new]
    #[pyo3(signature = (keys, weight, sum, count=None, plain=None))]
    fn new(
        keys: PyReadonlyArray1<'_, u64>, weight: PyReadonlyArray1<'_, f64>, sum: PyReadonlyArray2<'_, f64>, count: Option<PyReadonlyArray1<'_, f64>>,
        plain: Option<PyReadonlyArray2<'_, f64>>,
    ) -> PyResult<Self> {
        let plain = match (count, plain) {
            (Some(c), Some(p)) => Some((to_vec1(&c, "count")?, memory::try_collect("plain", &[p.as_array().len()], p.as_array().iter().copied())?)),
            (None, None) => None,
            _ => return Err(value_error("plain", "`count` and `plain` are given together or not at all".into())),
        };
        let s = sum.as_array();
        let sum = memory::try_collect("sum", &[s.len()], s.iter().copied())?;
        Ok(PyCells(Cells::new(s.ncols(), to_vec1(&keys, "keys")?, to_vec1(&weight, "weight")?, sum, plain)?))
    }

    /// The number of occupied cells.
    #[getter]
    fn n_cells(&self) -> usize {
        self.0.keys.len()
    }

    /// The cells' keys (uint64), in order of first appearance.
    #[getter]
    fn keys<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        self.0.keys.clone().into_pyarray(py)
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let c = &self.0;
        let rows = |v: &[f64]| ndarray::Array2::from_shape_vec((c.keys.len(), c.d), v.to_vec()).map_err(internal);
        let (count, plain) = match &c.plain {
            Some((count, psum)) => (count.clone().into_pyarray(py).into_any(), rows(psum)?.into_pyarray(py).into_any()),
            None => (py.None().into_bound(py), py.None().into_bound(py)),
        };
        let args = PyTuple::new(py, [
            c.keys.clone().into_pyarray(py).into_any(),
            c.weight.clone().into_pyarray(py).into_any(),
            rows(&c.sum)?.into_pyarray(py).into_any(),
            count,
            plain,
        ])?;
        PyTuple::new(py, [py.get_type::<PyCells>().into_any(), args.into_any()])
    }
}

/// The occupied cells (side h / grid_resolution, anchored at `lo`, up to `hi`) of the rows
/// of X, in order of first appearance.
#[pyfunction]
#[pyo3(signature = (x, lo, hi, weights=None, bandwidth=1.0, grid_resolution=4, n_jobs=None))]
#[allow(clippy::too_many_arguments)]
fn grid_cells<'py>(
    py: Python<'py>, x: &Bound<'py, PyAny>, lo: Vec<f64>, hi: Vec<f64>, weights: Option<&Bound<'py, PyAny>>, bandwidth: f64,
    grid_resolution: usize, n_jobs: Option<NJobs>,
) -> PyResult<PyCells> {
    let spec = GridSpec::new(&lo, &hi, bandwidth, grid_resolution)?;
    let cells = with_float!(x, F, {
        let xr = view2::<F>(x, "X")?;
        let w = weights.map(|w| view1::<F>(w, "sample_weight")).transpose()?;
        let (xa, wa) = (xr.as_array(), w.as_ref().map(|a| a.as_array()));
        run(py, n_jobs, None, |_| spec.cells(xa, wa))?.0
    });
    Ok(PyCells(cells))
}

/// Cells of consecutive parts of the data merged (order of first appearance, sums added in
/// the order of the parts).
#[pyfunction]
fn grid_merge(py: Python<'_>, parts: Vec<PyRef<'_, PyCells>>) -> PyResult<PyCells> {
    let cells: Vec<&Cells> = parts.iter().map(|p| &p.0).collect();
    Ok(PyCells(py.detach(|| Cells::merge(&cells))?))
}

/// (centroids m×d, weights m) of grid cells, float64.
#[pyfunction]
fn grid_centroids<'py>(py: Python<'py>, cells: PyRef<'py, PyCells>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let (c, w) = cells.0.centroids::<f64>()?;
    Ok((c.into_pyarray(py).into_any(), w.into_pyarray(py).into_any()))
}

/// The grid cell key of every row of X.
#[pyfunction]
#[pyo3(signature = (x, lo, hi, bandwidth=1.0, grid_resolution=4, n_jobs=None))]
fn grid_keys<'py>(
    py: Python<'py>, x: &Bound<'py, PyAny>, lo: Vec<f64>, hi: Vec<f64>, bandwidth: f64, grid_resolution: usize, n_jobs: Option<NJobs>,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let spec = GridSpec::new(&lo, &hi, bandwidth, grid_resolution)?;
    let keys = with_float!(x, F, {
        let xr = view2::<F>(x, "X")?;
        let xa = xr.as_array();
        run(py, n_jobs, None, |_| spec.keys(xa))?
    });
    Ok(keys.into_pyarray(py))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(mean_shift_seeds, m)?)?;
    m.add_function(wrap_pyfunction!(mean_shift_grid, m)?)?;
    m.add_function(wrap_pyfunction!(mean_shift_diffuse, m)?)?;
    m.add_function(wrap_pyfunction!(merge_modes, m)?)?;
    m.add_function(wrap_pyfunction!(grid_cells, m)?)?;
    m.add_function(wrap_pyfunction!(grid_merge, m)?)?;
    m.add_function(wrap_pyfunction!(grid_centroids, m)?)?;
    m.add_function(wrap_pyfunction!(grid_keys, m)?)?;
    m.add_class::<MeanShiftWindow>()?;
    m.add_class::<MeanShiftSeeds>()?;
    m.add_class::<PyShifted>()?;
    m.add_class::<PyDiffused>()?;
    m.add_class::<PyCells>()?;
    Ok(())
}

//! `_core.Reference`: a prepared `engine::Reference` that `local_sums` accepts in place of X.

use super::kernel::PyKernelSpec;
use super::{is_f32, value_error, view1, view2, PySums};
use crate::algorithms::local_poly;
use crate::engine::{self, Neighborhood, Options};
use crate::memory;
use crate::real::Real;
use numpy::{Element, IntoPyArray, PyArray1};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use super::runtime::{run, NJobs};

enum AnyReference {
    F32(engine::Reference<f32>),
    F64(engine::Reference<f64>),
}

trait WrapReference: Real + Element {
    fn wrap(r: engine::Reference<Self>) -> AnyReference;
}
impl WrapReference for f32 {
    fn wrap(r: engine::Reference<f32>) -> AnyReference {
        AnyReference::F32(r)
    }
}
impl WrapReference for f64 {
    fn wrap(r: engine::Reference<f64>) -> AnyReference {
        AnyReference::F64(r)
    }
}

/// Samples X (with optional values, sample weights and per-sample bandwidths) checked once
/// (NaN and infinity refused) and copied; `local_sums(queries, reference, ...)` then reuses
/// what the engine builds from them (tile layout, kd-tree, neighbour index) across calls. Immutable; safe to share
/// between threads; pickles by rebuilding from its arrays.
#[pyclass(module = "localization._core", name = "Reference", frozen)]
pub(super) struct PyReference {
    inner: AnyReference,
}

#[pymethods]
impl PyReference {
    #[new]
    #[pyo3(signature = (x, values=None, weights=None, sample_bandwidth=None))]
    fn new(py: Python<'_>, x: &Bound<'_, PyAny>, values: Option<&Bound<'_, PyAny>>, weights: Option<&Bound<'_, PyAny>>, sample_bandwidth: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let inner = with_float!(x, F, {
            // The reference keeps its own copies: fallible allocations, as large as the input.
            let xa = memory::try_copy("X", view2::<F>(x, "X")?.as_array())?;
            let va = values.map(|v| view2::<F>(v, "values").and_then(|v| Ok(memory::try_copy("values", v.as_array())?))).transpose()?;
            let per_sample = |name: &'static str, a: numpy::PyReadonlyArray1<'_, F>| -> PyResult<Vec<F>> {
                let a = a.as_array();
                Ok(memory::try_collect(name, &[a.len()], a.iter().copied())?)
            };
            let wa = weights.map(|w| per_sample("sample_weight", view1::<F>(w, "sample_weight")?).map(ndarray::Array1::from)).transpose()?;
            let ha = sample_bandwidth.map(|h| per_sample("bandwidth", view1::<F>(h, "bandwidth")?)).transpose()?;
            F::wrap(py.detach(|| engine::Reference::new(xa, va, wa, ha))?)
        });
        Ok(PyReference { inner })
    }

    #[getter]
    fn n_samples(&self) -> usize {
        match &self.inner {
            AnyReference::F32(r) => r.x().nrows(),
            AnyReference::F64(r) => r.x().nrows(),
        }
    }

    #[getter]
    fn n_features(&self) -> usize {
        match &self.inner {
            AnyReference::F32(r) => r.x().ncols(),
            AnyReference::F64(r) => r.x().ncols(),
        }
    }

    /// Pickled as its arrays (the prepared layouts are rebuilt on use).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        macro_rules! arrays {
            ($r:expr) => {{
                let r = $r;
                (
                    r.x().to_owned().into_pyarray(py).into_any(),
                    r.values().map(|v| v.to_owned().into_pyarray(py).into_any()),
                    r.weights().map(|w| w.to_owned().into_pyarray(py).into_any()),
                    r.sample_bandwidth().map(|h| PyArray1::from_slice(py, h).into_any()),
                )
            }};
        }
        let args = match &slf.get().inner {
            AnyReference::F32(r) => arrays!(r),
            AnyReference::F64(r) => arrays!(r),
        };
        PyTuple::new(py, [slf.get_type().into_any(), args.into_pyobject(py)?.into_any()])
    }
}

/// `local_sums` against a Reference (weights and per-sample bandwidths are its own; values
/// too, or given per call to a Reference built without them).
#[allow(clippy::too_many_arguments)]
pub(super) fn local_sums<'py>(
    py: Python<'py>, reference: &PyReference, queries: &Bound<'py, PyAny>, values: Option<&Bound<'py, PyAny>>, spec: &PyKernelSpec,
    degree: Option<usize>, exclude_self: bool, nbh: Neighborhood, n_jobs: Option<NJobs>, progress: Option<&Py<PyAny>>,
) -> PyResult<Bound<'py, PySums>> {
    macro_rules! go {
        ($r:expr, $F:ty) => {{
            let bw = spec.bandwidth::<$F>()?;
            let q = view2::<$F>(queries, "X_query")?;
            let v = values.map(|v| view2::<$F>(v, "values")).transpose()?;
            let (qa, va) = (q.as_array(), v.as_ref().map(|v| v.as_array()));
            let s = run(py, n_jobs, progress, |mon| {
                let opts = Options { degree, exclude_self, neighborhood: nbh, monitor: mon.clone(), progress: progress.is_some(), ..Options::default() };
                $r.local_sums(qa, va, spec.kernel(), &bw, &opts)
            })?;
            PySums::new(py, s)
        }};
    }
    match &reference.inner {
        AnyReference::F32(r) => go!(r, f32),
        AnyReference::F64(r) => go!(r, f64),
    }
}

/// `local_polynomial` against a Reference built with the responses as values.
#[allow(clippy::too_many_arguments)]
pub(super) fn local_polynomial<'py>(
    py: Python<'py>, reference: &PyReference, queries: &Bound<'py, PyAny>, spec: &PyKernelSpec, degree: usize, ridge: f64,
    exclude_self: bool, nbh: Neighborhood, n_jobs: Option<NJobs>, progress: Option<&Py<PyAny>>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyArray1<bool>>)> {
    macro_rules! go {
        ($r:expr, $F:ty) => {{
            let bw = spec.bandwidth::<$F>()?;
            let q = view2::<$F>(queries, "X_query")?;
            let qa = q.as_array();
            let (pred, singular) =
                run(py, n_jobs, progress, |mon| local_poly::predict_prepared($r, qa, spec.kernel(), &bw, degree, ridge, nbh, exclude_self, mon))?;
            Ok((pred.into_pyarray(py).into_any(), singular.into_pyarray(py)))
        }};
    }
    match &reference.inner {
        AnyReference::F32(r) => go!(r, f32),
        AnyReference::F64(r) => go!(r, f64),
    }
}

/// The error for arrays given with a Reference, which holds its own.
pub(super) fn own_arrays(name: &str) -> PyErr {
    value_error(name, format!("`{name}` belongs to the Reference: pass it when the Reference is built"))
}

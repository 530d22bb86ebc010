//! Bindings of the temporal kernels (attention as a temporal self-local mean): arrays of shape
//! (B, T, d) in, plain arrays out. The Python layer flattens batch and head axes into B,
//! broadcasts per-head decays and masks; this converts, releases the GIL, runs the engine on
//! the chosen pool and maps errors. No math here.

use super::runtime::{run, NJobs};
use crate::engine::temporal::{self, Content, Mask, Position, Sequences};
use crate::kernel::Profile;
use crate::real::Real;
use numpy::{Element, IntoPyArray, PyReadonlyArray1, PyReadonlyArray2, PyReadonlyArray3};
use super::{is_f32_array, type_error, value_error, view3};
use ndarray::Ix3;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// The position kernel's parts as the Python layer passes them.
struct PositionArgs<'py> {
    causal: bool,
    window: Option<usize>,
    decay: Option<PyReadonlyArray1<'py, f64>>,
    exclude_self: bool,
    mask: Option<PyReadonlyArray3<'py, bool>>,
    slab: Vec<usize>,
}

impl<'py> PositionArgs<'py> {
    fn new(
        causal: bool, window: Option<usize>, decay: Option<PyReadonlyArray1<'py, f64>>, exclude_self: bool,
        mask: Option<PyReadonlyArray3<'py, bool>>, mask_slab: Option<PyReadonlyArray1<'py, i64>>,
    ) -> PyResult<Self> {
        let slab = match (&mask, mask_slab) {
            (Some(_), Some(s)) => s
                .as_array()
                .iter()
                .map(|&i| usize::try_from(i).map_err(|_| value_error("mask_slab", "`mask_slab` must be non-negative".into())))
                .collect::<PyResult<Vec<_>>>()?,
            (Some(_), None) => return Err(value_error("mask_slab", "`mask` needs `mask_slab` (the mask slab of each sequence)".into())),
            (None, _) => Vec::new(),
        };
        Ok(PositionArgs { causal, window, decay, exclude_self, mask, slab })
    }

    fn position(&self) -> PyResult<Position<'_>> {
        Ok(Position {
            causal: self.causal,
            window: self.window,
            decay: match &self.decay {
                Some(d) => Some(d.as_slice().map_err(|_| value_error("decay", "`decay` must be C-contiguous".into()))?),
                None => None,
            },
            exclude_self: self.exclude_self,
            mask: self.mask.as_ref().map(|m| Mask { allowed: m.as_array(), slab: &self.slab }),
        })
    }
}

fn content(kernel: &str, scale: f64, bandwidth: f64) -> PyResult<Content> {
    Ok(match kernel {
        "dot" => Content::Dot { scale },
        name => Content::Radial { profile: Profile::from_name(name)?, bandwidth },
    })
}

fn forward_typed<'py, F: Real + Element>(
    py: Python<'py>, q: &Bound<'py, PyAny>, k: &Bound<'py, PyAny>, v: &Bound<'py, PyAny>, content: Content, pos: &PositionArgs<'py>,
    n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let (qr, kr, vr) = (view3::<F>(q, "Q")?, view3::<F>(k, "K")?, view3::<F>(v, "V")?);
    let seq = Sequences { q: qr.as_array(), k: kr.as_array(), v: vr.as_array() };
    let position = pos.position()?;
    let r = run(py, n_jobs, progress.as_ref(), |mon| temporal::forward(&seq, &content, &position, mon))?;
    PyTuple::new(py, [r.out.into_pyarray(py).into_any(), r.lse.into_pyarray(py).into_any()])
}

/// Temporal local means of B sequences: returns (out B×T×p, lse B×T) with lse = log Σ_s K.
#[pyfunction]
#[pyo3(signature = (q, k, v, kernel="dot", scale=1.0, bandwidth=1.0, causal=false, window=None, decay=None,
    exclude_self=false, mask=None, mask_slab=None, n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn temporal_forward<'py>(
    py: Python<'py>, q: &Bound<'py, PyAny>, k: &Bound<'py, PyAny>, v: &Bound<'py, PyAny>, kernel: &str, scale: f64,
    bandwidth: f64, causal: bool, window: Option<usize>, decay: Option<PyReadonlyArray1<'py, f64>>, exclude_self: bool,
    mask: Option<PyReadonlyArray3<'py, bool>>, mask_slab: Option<PyReadonlyArray1<'py, i64>>, n_jobs: Option<NJobs>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let c = content(kernel, scale, bandwidth)?;
    let pos = PositionArgs::new(causal, window, decay, exclude_self, mask, mask_slab)?;
    if is_f32_array::<Ix3>(q, "Q")? {
        forward_typed::<f32>(py, q, k, v, c, &pos, n_jobs, progress)
    } else {
        forward_typed::<f64>(py, q, k, v, c, &pos, n_jobs, progress)
    }
}

#[allow(clippy::too_many_arguments)]
fn backward_typed<'py, F: Real + Element>(
    py: Python<'py>, q: &Bound<'py, PyAny>, k: &Bound<'py, PyAny>, v: &Bound<'py, PyAny>, out: &Bound<'py, PyAny>,
    lse: &Bound<'py, PyAny>, grad_output: &Bound<'py, PyAny>, scale: f64, pos: &PositionArgs<'py>, n_jobs: Option<NJobs>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let (qr, kr, vr) = (view3::<F>(q, "Q")?, view3::<F>(k, "K")?, view3::<F>(v, "V")?);
    let (or, gr) = (view3::<F>(out, "out")?, view3::<F>(grad_output, "grad_output")?);
    let lr: PyReadonlyArray2<'py, F> = lse.extract().map_err(|_| type_error("lse", "`lse` must be a 2-D array with the dtype of Q".into()))?;
    let seq = Sequences { q: qr.as_array(), k: kr.as_array(), v: vr.as_array() };
    let position = pos.position()?;
    let (oa, la, ga) = (or.as_array(), lr.as_array(), gr.as_array());
    let g = run(py, n_jobs, progress.as_ref(), |mon| temporal::backward(&seq, scale, &position, oa, la, ga, mon))?;
    PyTuple::new(py, [
        Some(g.dq.into_pyarray(py).into_any()),
        Some(g.dk.into_pyarray(py).into_any()),
        Some(g.dv.into_pyarray(py).into_any()),
        g.d_decay.map(|d| d.into_pyarray(py).into_any()),
    ])
}

/// Gradients of the dot-product forward pass from ∂ℓ/∂out and its saved (out, lse):
/// returns (dQ, dK, dV, d_decay per sequence | None).
#[pyfunction]
#[pyo3(signature = (q, k, v, out, lse, grad_output, scale=1.0, causal=false, window=None, decay=None, exclude_self=false,
    mask=None, mask_slab=None, n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn attention_backward<'py>(
    py: Python<'py>, q: &Bound<'py, PyAny>, k: &Bound<'py, PyAny>, v: &Bound<'py, PyAny>, out: &Bound<'py, PyAny>,
    lse: &Bound<'py, PyAny>, grad_output: &Bound<'py, PyAny>, scale: f64, causal: bool, window: Option<usize>,
    decay: Option<PyReadonlyArray1<'py, f64>>, exclude_self: bool, mask: Option<PyReadonlyArray3<'py, bool>>,
    mask_slab: Option<PyReadonlyArray1<'py, i64>>, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let pos = PositionArgs::new(causal, window, decay, exclude_self, mask, mask_slab)?;
    if is_f32_array::<Ix3>(q, "Q")? {
        backward_typed::<f32>(py, q, k, v, out, lse, grad_output, scale, &pos, n_jobs, progress)
    } else {
        backward_typed::<f64>(py, q, k, v, out, lse, grad_output, scale, &pos, n_jobs, progress)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(temporal_forward, m)?)?;
    m.add_function(wrap_pyfunction!(attention_backward, m)?)?;
    Ok(())
}

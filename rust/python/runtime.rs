//! How every binding runs native work, in one place: `n_jobs` converted and resolved, the GIL
//! released, the job run on the chosen pool while the calling thread checks Ctrl-C and reports
//! progress every `parallel::TICK`, and the outcome mapped to Python. Also the C entry points
//! through which threadpoolctl reads and limits the default thread count.
//!
//! A binding's whole job is `run(py, n_jobs, progress, |mon| algorithm(..., mon))`: the
//! algorithm polls `mon` in its loops (and may report progress through it).

use crate::error::{LocalizationError, Result};
use crate::parallel::{self, Monitor};
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::types::PyBool;
use std::os::raw::c_int;

/// `n_jobs` as given: any Python integer (bool refused). Values beyond 64 bits saturate,
/// which the resolution then clamps to the cores (or to 1 for large negative values).
pub(crate) struct NJobs(i64);

impl<'a, 'py> FromPyObject<'a, 'py> for NJobs {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let refuse = || {
            let kind = obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            let shown = obj.repr().map(|r| r.to_string()).unwrap_or_default();
            super::type_error("n_jobs", format!("`n_jobs` must be an integer or None, got {kind} {shown}"))
        };
        if obj.is_instance_of::<PyBool>() {
            return Err(refuse());
        }
        match obj.extract::<i64>() {
            Ok(v) => Ok(NJobs(v)),
            Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => Ok(NJobs(if obj.lt(0)? { i64::MIN } else { i64::MAX })),
            Err(_) => Err(refuse()),
        }
    }
}

/// The thread count `n_jobs` selects.
pub(crate) fn threads(n_jobs: Option<NJobs>) -> PyResult<usize> {
    Ok(parallel::resolve_n_jobs(n_jobs.map(|n| n.0))?)
}

/// The number of threads `n_jobs` resolves to.
#[pyfunction]
#[pyo3(signature = (n_jobs=None))]
pub(crate) fn effective_n_jobs(n_jobs: Option<NJobs>) -> PyResult<usize> {
    threads(n_jobs)
}

/// Run `job` off the GIL on the pool `n_jobs` selects. Every `parallel::TICK` the calling
/// thread re-attaches to Python, checks for Ctrl-C and calls `progress(done, total)` when
/// the job's progress changed; a `KeyboardInterrupt` or an exception from `progress` stops the
/// job (its loops return within milliseconds) and is raised. Nothing the job computed is kept.
pub(crate) fn run<T: Send>(py: Python<'_>, n_jobs: Option<NJobs>, progress: Option<&Py<PyAny>>, job: impl FnOnce(&Monitor) -> Result<T> + Send) -> PyResult<T> {
    let threads = threads(n_jobs)?;
    let mut raised: Option<PyErr> = None;
    let mut reported = None;
    let outcome = py.detach(|| {
        let mut watch = |mon: &Monitor| {
            Python::attach(|py| {
                py.check_signals()?;
                let now = mon.progress();
                if let (Some(f), true) = (progress, now.1 > 0 && reported != Some(now)) {
                    reported = Some(now);
                    f.call1(py, now)?;
                }
                Ok(())
            })
            .map_err(|e: PyErr| {
                raised = Some(e);
                LocalizationError::Interrupted
            })
        };
        parallel::run(threads, &mut watch, job)
    });
    outcome.map_err(|e| raised.take().unwrap_or_else(|| e.into()))
}

/// threadpoolctl's `get_num_threads`: the thread count `n_jobs=None` uses now.
#[no_mangle]
pub extern "C" fn localization_get_num_threads() -> c_int {
    let n = parallel::default_threads().unwrap_or_else(|_| parallel::cores());
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

/// threadpoolctl's `set_num_threads`: the thread count `n_jobs=None` uses from now on.
#[no_mangle]
pub extern "C" fn localization_set_num_threads(n: c_int) {
    parallel::set_default_threads(usize::try_from(n).unwrap_or(1));
}

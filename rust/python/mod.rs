//! PyO3 bindings: convert arrays, release the GIL, pick the pool, map errors. No math here.
//!
//! One file per part of the core: `convert` (errors, array views, the f32/f64 dispatch),
//! `kernel` (`KernelSpec`, the kernel argument of the engine's bindings), `engine`,
//! `reference`, `ready`, `binned`, `neighbors`, and one per file or folder of
//! `rust/algorithms/`: `mean_shift`, `modes` (MedoidShift, QuickShift and their forests),
//! `image`, `embedding`, `sequence` (the temporal kernels of `engine/temporal.rs`). Every array entry
//! point is generic over f32/f64; the Python layer guarantees all arrays of one call share a
//! dtype and are C-contiguous, and the bindings check it again. Native work goes through
//! `runtime::run` (threads, Ctrl-C, progress).

// First: its `with_float!` macro is used by the files declared after it.
#[macro_use]
mod convert;

mod binned;
mod embedding;
mod engine;
mod image;
mod kernel;
mod mean_shift;
mod modes;
mod neighbors;
mod ready;
mod reference;
mod runtime;
mod sequence;

// The helpers of `convert` under their short paths, for the family files.
pub(crate) use convert::{indices2, internal, is_f32, is_f32_array, state_error, to_indices, to_vec1, type_error, value_error, view1, view2, view3};
pub(crate) use engine::PySums;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    engine::register(m)?;
    m.add_function(wrap_pyfunction!(ready::ready_local_mean, m)?)?;
    m.add_function(wrap_pyfunction!(ready::ready_kernel_sum, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::effective_n_jobs, m)?)?;
    neighbors::register(m)?;
    m.add_class::<reference::PyReference>()?;
    binned::register(m)?;
    mean_shift::register(m)?;
    modes::register(m)?;
    image::register(m)?;
    embedding::register(m)?;
    sequence::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // Tuning constants of the core that the Python layer's own choices follow.
    m.add("LEAF_SIZE", crate::neighbors::LEAF_SIZE)?;
    m.add("GEMM_MIN_DIM", crate::distance::GEMM_MIN_DIM)?;
    m.add("GRID_MAX_FEATURES", crate::algorithms::mean_shift::GRID_MAX_FEATURES)?;
    m.add("SERIES_TOLERANCE", crate::engine::SERIES_TOLERANCE)?;
    Ok(())
}

//! From Python to the core and back: the error conversion, array views checked for dtype and
//! layout, the f32/f64 dispatch and the engine's `algorithm` argument.

use crate::engine::Neighborhood;
use crate::error::LocalizationError;
use crate::memory;
use ndarray::{Dimension, Ix2};
use numpy::{Element, PyReadonlyArray, PyReadonlyArray1, PyReadonlyArray2, PyReadonlyArray3, PyUntypedArrayMethods};
use pyo3::exceptions::{PyKeyboardInterrupt, PyMemoryError, PyRuntimeError};
use pyo3::prelude::*;

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
pub(crate) fn indices2(a: &Bound<'_, PyAny>, name: &'static str) -> PyResult<(Vec<usize>, usize)> {
    let arr: PyReadonlyArray2<i64> = a.extract().map_err(|_| type_error(name, format!("`{name}` must be a 2-D int64 array")))?;
    Ok((to_indices(arr.as_array().iter().copied(), arr.shape(), name)?, arr.shape()[1]))
}

/// The int64 indices of an array of shape `dims` as usize, a `ValueError` for a negative one;
/// the copy is fallible (a `MemoryError` naming `name`).
pub(crate) fn to_indices(values: impl Iterator<Item = i64> + Clone, dims: &[usize], name: &'static str) -> PyResult<Vec<usize>> {
    if values.clone().any(|j| j < 0) {
        return Err(value_error(name, format!("`{name}` has negative entries")));
    }
    Ok(memory::try_collect(name, dims, values.map(|j| j as usize))?)
}

/// A 1-D array's values as a vector: a fallible copy (a `MemoryError` naming `name` when it
/// does not fit, where `to_vec` would abort the interpreter).
pub(crate) fn to_vec1<F: Element + Copy>(a: &PyReadonlyArray1<'_, F>, name: &'static str) -> PyResult<Vec<F>> {
    let v = a.as_array();
    Ok(memory::try_collect(name, &[v.len()], v.iter().copied())?)
}

/// Borrow an array of D dimensions and float type F (`what` words the expected kind in the
/// error), refusing non-contiguous memory.
fn view<'py, F: Element, D: Dimension>(obj: &Bound<'py, PyAny>, name: &str, what: &str) -> PyResult<PyReadonlyArray<'py, F, D>> {
    let a: PyReadonlyArray<'py, F, D> = obj.extract().map_err(|_| type_error(name, format!("`{name}` must be {what}")))?;
    if !a.is_c_contiguous() {
        return Err(value_error(name, format!("`{name}` must be C-contiguous")));
    }
    Ok(a)
}

pub(crate) fn view1<'py, F: Element>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<PyReadonlyArray1<'py, F>> {
    view(obj, name, "a 1-D float array with the same dtype as X")
}

pub(crate) fn view2<'py, F: Element>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<PyReadonlyArray2<'py, F>> {
    view(obj, name, "a 2-D float array with the same dtype as X")
}

pub(crate) fn view3<'py, F: Element>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<PyReadonlyArray3<'py, F>> {
    view(obj, name, "a 3-D float32 or float64 array")
}

/// The f32/f64 dispatch of an array argument of D dimensions: true for float32, false for
/// float64, else a TypeError naming `name`.
pub(crate) fn is_f32_array<D: Dimension>(x: &Bound<'_, PyAny>, name: &str) -> PyResult<bool> {
    if x.extract::<PyReadonlyArray<f64, D>>().is_ok() {
        Ok(false)
    } else if x.extract::<PyReadonlyArray<f32, D>>().is_ok() {
        Ok(true)
    } else {
        let ndim = D::NDIM.map_or(String::new(), |n| format!("{n}-D "));
        Err(type_error(name, format!("`{name}` must be a {ndim}float32 or float64 array")))
    }
}

/// `is_f32_array` of the usual sample matrix `X` (2-D).
pub(crate) fn is_f32(x: &Bound<'_, PyAny>) -> PyResult<bool> {
    is_f32_array::<Ix2>(x, "X")
}

/// Run `$body` with `$F` = f32 or f64 according to the dtype of `$x` (the caller has
/// `is_f32` in scope).
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

/// The engine's `algorithm` argument.
pub(crate) fn neighborhood(s: &str) -> PyResult<Neighborhood> {
    match s {
        "auto" => Ok(Neighborhood::Auto),
        "brute" => Ok(Neighborhood::Brute),
        "tree" | "kd_tree" => Ok(Neighborhood::Tree),
        "expansion" => Ok(Neighborhood::Expansion),
        o => Err(value_error("algorithm", format!("`algorithm` must be 'auto', 'brute', 'kd_tree' or 'expansion', got {o:?}"))),
    }
}

//! Fallible allocation of the outputs whose size the caller chooses.
//!
//! Rust aborts the process when an allocation fails; inside a Python REPL or a Jupyter kernel
//! that loses the whole session. So every array whose size follows from the request (m×n
//! kernel matrices, m×k neighbour lists, ragged radius lists, trajectories, the engine's sums),
//! and every copy of the caller's samples (rescaled inputs, a neighbour index's rows),
//! is sized with checked arithmetic and reserved with `try_reserve`: a request the machine
//! cannot hold is an `OutOfMemory` error naming the array and its size, raised before any
//! work is spent on it.

use crate::error::{LocalizationError, Result};
use ndarray::{Array, Array2, ArrayView2, Dimension, IntoDimension};

/// The element type as Python users know it.
fn dtype_name<T>() -> &'static str {
    match std::any::type_name::<T>() {
        "f64" => "float64",
        "f32" => "float32",
        "usize" | "u64" | "i64" => "int64",
        "u32" => "uint32",
        "i32" => "int32",
        "bool" => "bool",
        // Structs of the index (tree nodes, per-row bounds): the count is what matters.
        _ => "records",
    }
}

/// The error for an array `name` of shape `dims` and element type `T`.
pub fn out_of_memory<T>(name: &'static str, dims: &[usize]) -> LocalizationError {
    let bytes = dims.iter().fold(std::mem::size_of::<T>() as u128, |a, &d| a.saturating_mul(d as u128));
    let shape = dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(" × ");
    LocalizationError::OutOfMemory { name, what: format!("{shape} {}", dtype_name::<T>()), bytes }
}

/// The number of elements of an array of shape `dims`, if such an array can exist at all
/// (its size in bytes fits in `isize`, as Rust and NumPy require).
pub fn elements<T>(name: &'static str, dims: &[usize]) -> Result<usize> {
    let n = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    match n {
        Some(n) if n.checked_mul(std::mem::size_of::<T>()).is_some_and(|b| b <= isize::MAX as usize) => Ok(n),
        _ => Err(out_of_memory::<T>(name, dims)),
    }
}

/// A vector holding the elements of an array of shape `dims`, all equal to `fill`.
pub fn try_vec<T: Clone>(name: &'static str, dims: &[usize], fill: T) -> Result<Vec<T>> {
    let n = elements::<T>(name, dims)?;
    try_collect(name, dims, std::iter::repeat_n(fill, n))
}

/// The values of `values` (as many as the shape `dims` holds) in a vector reserved first.
pub fn try_collect<T>(name: &'static str, dims: &[usize], values: impl IntoIterator<Item = T>) -> Result<Vec<T>> {
    let n = elements::<T>(name, dims)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| out_of_memory::<T>(name, dims))?;
    v.extend(values);
    Ok(v)
}

/// A copy of `x` in row-major order: the copies of the caller's samples that indexes and
/// algorithms keep (as large as the input, so as likely not to fit).
pub fn try_copy<T: Clone>(name: &'static str, x: ArrayView2<T>) -> Result<Array2<T>> {
    let dims = [x.nrows(), x.ncols()];
    let v = match x.as_slice() {
        Some(s) => try_collect(name, &dims, s.iter().cloned())?,
        None => try_collect(name, &dims, x.iter().cloned())?,
    };
    Array2::from_shape_vec(dims, v).map_err(|e| LocalizationError::param(name, e.to_string()))
}

/// An array of the given shape filled with `fill`.
pub fn try_array<T: Clone, D: Dimension>(name: &'static str, shape: impl IntoDimension<Dim = D>, fill: T) -> Result<Array<T, D>> {
    let dim = shape.into_dimension();
    let v = try_vec(name, dim.slice(), fill)?;
    Array::from_shape_vec(dim, v).map_err(|e| LocalizationError::param(name, e.to_string()))
}

/// Room for `additional` more elements in a growing output (ragged lists, trajectories).
pub fn try_grow<T>(v: &mut Vec<T>, additional: usize, name: &'static str) -> Result<()> {
    v.try_reserve(additional).map_err(|_| out_of_memory::<T>(name, &[v.len().saturating_add(additional)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_sizes_are_errors_not_aborts() {
        // Overflowing shapes, sizes beyond isize::MAX and sizes no allocator can provide.
        assert!(matches!(elements::<f64>("a", &[usize::MAX, 2]), Err(LocalizationError::OutOfMemory { .. })));
        assert!(elements::<f64>("a", &[1 << 61]).is_err());
        assert!(try_vec("kernel matrix", &[1 << 40, 1 << 20], 0.0f64).is_err());
        // Representable but beyond any address space: the allocator refuses, no abort.
        assert!(matches!(try_vec("big", &[1 << 62], 0u8), Err(LocalizationError::OutOfMemory { .. })));
        let e = try_array("kernel matrix", (1usize << 30, 1usize << 30), 0.0f32).unwrap_err();
        assert_eq!(e.to_string(), "not enough memory for `kernel matrix`: 1073741824 × 1073741824 float32 needs 4.6 EB");
        let mut v: Vec<u8> = vec![1];
        assert!(try_grow(&mut v, usize::MAX, "neighbours").is_err());
        assert_eq!(try_array("x", (2, 3), 1.5f64).unwrap().sum(), 9.0);
    }
}

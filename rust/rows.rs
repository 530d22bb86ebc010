//! Row-major matrices whose rows are slices.
//!
//! The distance loops read a point as `&[F]`. ndarray only hands out a row as a slice after a
//! run-time layout check, so the layout is checked once, where a `Rows` is made (at the
//! boundary of an entry point, with an error naming the argument), and the loops take
//! `row(i)` without re-checking.

use crate::error::{LocalizationError, Result};
use ndarray::{ArrayView, ArrayView2, ArrayViewMut2, Dimension, ShapeBuilder};
use std::borrow::Cow;
use std::ops::Range;

/// The elements of `a` in row-major order: borrowed when `a` is C-contiguous, else copied.
pub fn row_major<'a, F: Clone, D: Dimension>(a: ArrayView<'a, F, D>) -> Cow<'a, [F]> {
    match a.to_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(a.iter().cloned().collect()),
    }
}

/// A borrowed C-contiguous m×d matrix.
#[derive(Copy, Clone, Debug)]
pub struct Rows<'a, F> {
    data: &'a [F],
    nrows: usize,
    ncols: usize,
}

impl<'a, F> Rows<'a, F> {
    /// The rows of `a` (the last axis is the columns: a B × T × d array gives B·T rows), or an
    /// error naming `name` unless `a` is C-contiguous.
    pub fn new<D: Dimension>(name: &'static str, a: ArrayView<'a, F, D>) -> Result<Self> {
        let ncols = a.shape().last().copied().unwrap_or(1);
        let nrows = a.shape().split_last().map_or(1, |(_, lead)| lead.iter().product());
        match a.to_slice() {
            Some(data) => Ok(Rows { data, nrows, ncols }),
            None => Err(LocalizationError::param(name, "must be C-contiguous (row-major)")),
        }
    }

    #[inline(always)]
    pub fn row(&self, i: usize) -> &'a [F] {
        &self.data[i * self.ncols..(i + 1) * self.ncols]
    }

    /// The rows `r` of these.
    #[inline(always)]
    pub fn rows(&self, r: Range<usize>) -> Rows<'a, F> {
        Rows { data: &self.data[r.start * self.ncols..r.end * self.ncols], nrows: r.len(), ncols: self.ncols }
    }

    /// Every element, row after row.
    #[inline(always)]
    pub fn as_slice(&self) -> &'a [F] {
        self.data
    }

    /// The same rows as an ndarray view (for matrix products).
    pub fn view(&self) -> ArrayView2<'a, F> {
        // Cannot fail: `data` holds exactly nrows × ncols elements, row-major.
        ArrayView2::from_shape((self.nrows, self.ncols), self.data).expect("nrows × ncols elements")
    }

    pub fn nrows(&self) -> usize {
        self.nrows
    }

    pub fn ncols(&self) -> usize {
        self.ncols
    }
}

/// An owned row-major scratch table of `nrows` rows of capacity `stride`, used `len ≤ stride`
/// columns at a time: rows as slices for the pair loops, the same memory as an ndarray view
/// for matrix products.
pub struct Scratch<F> {
    data: Vec<F>,
    stride: usize,
}

impl<F: Copy + Default> Scratch<F> {
    pub fn new(nrows: usize, stride: usize) -> Self {
        Scratch { data: vec![F::default(); nrows * stride], stride }
    }

    #[inline(always)]
    pub fn row(&self, i: usize, len: usize) -> &[F] {
        &self.data[i * self.stride..i * self.stride + len]
    }

    #[inline(always)]
    pub fn row_mut(&mut self, i: usize, len: usize) -> &mut [F] {
        &mut self.data[i * self.stride..i * self.stride + len]
    }

    /// The first `len` columns of every row as an nrows × len view.
    pub fn view(&self, len: usize) -> ArrayView2<'_, F> {
        debug_assert!(len <= self.stride);
        let nrows = self.data.len() / self.stride.max(1);
        // Cannot fail, as in `view_mut`.
        ArrayView2::from_shape((nrows, len).strides((self.stride, 1)), &self.data).expect("shape within the buffer")
    }

    /// `view`, writable.
    pub fn view_mut(&mut self, len: usize) -> ArrayViewMut2<'_, F> {
        debug_assert!(len <= self.stride);
        let nrows = self.data.len() / self.stride.max(1);
        // Cannot fail: `data` holds nrows·stride elements and len ≤ stride, so every index of
        // the strided shape lies inside it.
        ArrayViewMut2::from_shape((nrows, len).strides((self.stride, 1)), &mut self.data).expect("shape within the buffer")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{array, s};

    #[test]
    fn rows_are_the_rows_and_strided_views_are_refused() {
        let a = array![[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]];
        let r = Rows::new("X", a.view()).unwrap();
        assert_eq!((r.nrows(), r.ncols(), r.row(1)), (2, 3, &[4.0, 5.0, 6.0][..]));
        let e = Rows::new("X_query", a.slice(s![.., ..2])).unwrap_err();
        assert_eq!(e, LocalizationError::param("X_query", "must be C-contiguous (row-major)"));
        let empty = ndarray::Array2::<f64>::zeros((3, 0));
        assert_eq!(Rows::new("X", empty.view()).unwrap().row(2), &[] as &[f64]);
    }

    #[test]
    fn row_major_borrows_contiguous_arrays_and_copies_others() {
        let a = array![[1.0, 2.0], [3.0, 4.0]];
        assert!(matches!(row_major(a.view()), Cow::Borrowed(&[1.0, 2.0, 3.0, 4.0])));
        assert!(matches!(row_major(a.t()), Cow::Owned(v) if v == [1.0, 3.0, 2.0, 4.0]));
    }

    #[test]
    fn scratch_rows_and_view_share_memory() {
        let mut s = Scratch::<f64>::new(2, 4);
        s.view_mut(3)[(1, 2)] = 7.0;
        assert_eq!(s.row(1, 3), &[0.0, 0.0, 7.0]);
        s.row_mut(0, 2)[1] = 5.0;
        assert_eq!(s.view_mut(2)[(0, 1)], 5.0);
    }
}

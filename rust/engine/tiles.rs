//! The layout of the brute-force path: references in tiles, queries in blocks.
//!
//! In low dimensions both are put in a spatial order (the leaves of a median kd split), so
//! every tile and every block fills a compact box. A tile whose box is out of reach of a
//! block's box (kernel exactly zero, or underflowing against the running maximum) is then
//! skipped as a whole: exact, and what makes small bandwidths cheap. Results are reported in
//! the input order.

use super::types::{Bandwidth, Problem};
use crate::distance::{centred, column_means, row_sq_norms};
use crate::error::Result;
use crate::real::Real;
use crate::neighbors::chunked_order;
use crate::parallel::Monitor;
use ndarray::{s, Array2, ArrayView2, CowArray, Ix2};

/// References per tile.
pub(super) const TILE: usize = 256;
/// Above this many value columns, tile sums of values go through a matrix product.
pub(super) const WIDE_VALUES: usize = 8;

/// References laid out tile by tile, feature-major inside a tile, so the pair loop
/// streams contiguous memory and vectorises over references.
pub(super) struct Tiles<F> {
    /// Empty when nothing reads them (the matrix-product path without design moments).
    pub coords: Vec<F>,
    pub weights: Vec<F>,
    pub values: Vec<F>,
    pub inv_h2: Option<Vec<F>>,
    /// Matrix-product path of a distance kernel: the reference mean μ, the references minus μ
    /// (row-major, input order) and their squared norms.
    pub centre: Vec<F>,
    pub centred: Option<Array2<F>>,
    pub norms: Vec<F>,
    /// h² per reference (sample-point bandwidths on the matrix-product path).
    pub h2: Option<Vec<F>>,
    pub has_zero_weight: bool,
    pub d: usize,
    pub p: usize,
    pub n: usize,
    /// Input row at each position (None: input order).
    order: Option<Vec<usize>>,
    /// Position of each input row (with `order`).
    position: Vec<usize>,
    /// Per tile: lower corner then upper corner (with `order`).
    boxes: Vec<F>,
    /// Per tile: the smallest 1/h² of its references (sample-point bandwidths).
    min_inv_h2: Vec<F>,
    /// Values in position order, row-major, for the wide-values matrix product (with `order`).
    wide_values: Option<Array2<F>>,
}

impl<F: Real> Tiles<F> {
    /// `coords`: build the feature-major coordinates (direct differences, design moments);
    /// `centre`: centre the references for the matrix product.
    pub fn new(pb: &Problem<F>, bw: &Bandwidth<F>, spatial: bool, coords: bool, centre: bool, mon: &Monitor) -> Result<Self> {
        let (n, d) = pb.x.dim();
        let p = pb.values.as_ref().map_or(0, |v| v.ncols());
        let order = spatial.then(|| chunked_order(pb.x, TILE, mon)).transpose()?;
        let row = |i: usize| order.as_ref().map_or(i, |o| o[i]);
        let n_tiles = n.div_ceil(TILE);
        let mut coords = vec![F::zero(); if coords { n_tiles * TILE * d } else { 0 }];
        let mut values = vec![F::zero(); n_tiles * TILE * p];
        for i in 0..n {
            let (t, j, src) = (i / TILE, i % TILE, row(i));
            if !coords.is_empty() {
                for k in 0..d {
                    coords[(t * d + k) * TILE + j] = pb.x[(src, k)];
                }
            }
            if let Some(v) = &pb.values {
                for c in 0..p {
                    values[(t * p + c) * TILE + j] = v[(src, c)];
                }
            }
        }
        let weights: Vec<F> = (0..n).map(|i| pb.weights.as_ref().map_or(F::one(), |w| w[row(i)])).collect();
        let inv_h2: Option<Vec<F>> = match bw {
            Bandwidth::PerReference(h) => Some((0..n).map(|i| F::one() / (h[row(i)] * h[row(i)])).collect()),
            _ => None,
        };
        let min_inv_h2 = match &inv_h2 {
            Some(ih) => ih.chunks(TILE).map(|c| c.iter().fold(F::infinity(), |a, &b| a.min(b))).collect(),
            None => Vec::new(),
        };
        let centre = if centre { column_means(pb.x) } else { Vec::new() };
        let centred = (!centre.is_empty()).then(|| centred(pb.x, &centre));
        let norms = centred.as_ref().map_or_else(Vec::new, |c| row_sq_norms(c.view()));
        let h2 = match (bw, &centred) {
            (Bandwidth::PerReference(h), Some(_)) => Some((0..n).map(|i| h[row(i)] * h[row(i)]).collect()),
            _ => None,
        };
        let has_zero_weight = weights.iter().any(|w| *w == F::zero());
        let mut boxes = Vec::new();
        let mut position = Vec::new();
        let mut wide_values = None;
        if let Some(o) = &order {
            for t in 0..n_tiles {
                let len = (n - t * TILE).min(TILE);
                let (lo, hi): (Vec<F>, Vec<F>) = (0..d)
                    .map(|k| {
                        let xs = &coords[(t * d + k) * TILE..][..len];
                        xs.iter().fold((F::infinity(), F::neg_infinity()), |(a, b), &v| (a.min(v), b.max(v)))
                    })
                    .unzip();
                boxes.extend(lo);
                boxes.extend(hi);
            }
            position = vec![0; n];
            for (pos, &i) in o.iter().enumerate() {
                position[i] = pos;
            }
            if let (Some(v), true) = (&pb.values, p > WIDE_VALUES) {
                wide_values = Some(v.select(ndarray::Axis(0), o));
            }
        }
        Ok(Tiles { coords, weights, values, inv_h2, centre, centred, norms, h2, has_zero_weight, d, p, n, order, position, boxes, min_inv_h2, wide_values })
    }

    /// Position of input row `i`.
    pub fn position(&self, i: usize) -> usize {
        if self.order.is_some() {
            self.position[i]
        } else {
            i
        }
    }

    /// Rows `t0..t0 + len` of the values in position order (row-major).
    pub fn value_rows<'a>(&'a self, pb: &'a Problem<F>, t0: usize, len: usize) -> Option<ArrayView2<'a, F>> {
        match (&self.wide_values, &pb.values) {
            (Some(v), _) => Some(v.slice(s![t0..t0 + len, ..])),
            (None, Some(v)) => Some(v.slice(s![t0..t0 + len, ..])),
            _ => None,
        }
    }

    /// Lower bound of the squared distances between a query box and tile `t`, shrunk by a
    /// relative 1e-4 so that rounding in the pair loop can never fall below it.
    pub fn gap2(&self, qbox: &[F], t: usize) -> F {
        let d = self.d;
        let (tlo, thi) = self.boxes[2 * d * t..2 * d * (t + 1)].split_at(d);
        let (qlo, qhi) = qbox.split_at(d);
        let mut s = F::zero();
        for k in 0..d {
            let g = (tlo[k] - qhi[k]).max(qlo[k] - thi[k]).max(F::zero());
            s = s + g * g;
        }
        s * F::of(0.9999)
    }

    /// 1/h² to scale `gap2` of tile `t` for a query whose own 1/h² is `query_scale`.
    pub fn tile_scale(&self, t: usize, query_scale: F) -> F {
        match &self.inv_h2 {
            Some(_) => self.min_inv_h2[t],
            None => query_scale,
        }
    }
}

/// Queries in blocks; in low dimensions in a spatial order, each block with its box.
pub(super) struct Blocks<'a, F> {
    pub queries: CowArray<'a, F, Ix2>,
    pub size: usize,
    order: Option<Vec<usize>>,
    boxes: Vec<F>,
}

impl<'a, F: Real> Blocks<'a, F> {
    pub fn new(q: ArrayView2<'a, F>, size: usize, spatial: bool, mon: &Monitor) -> Result<Self> {
        if !spatial {
            return Ok(Blocks { queries: q.into(), size, order: None, boxes: Vec::new() });
        }
        let order = chunked_order(q, size, mon)?;
        let queries = q.select(ndarray::Axis(0), &order);
        let mut boxes = Vec::new();
        for b in queries.axis_chunks_iter(ndarray::Axis(0), size) {
            let lo = b.fold_axis(ndarray::Axis(0), F::infinity(), |a, &v| a.min(v));
            let hi = b.fold_axis(ndarray::Axis(0), F::neg_infinity(), |a, &v| a.max(v));
            boxes.extend(lo);
            boxes.extend(hi);
        }
        Ok(Blocks { queries: queries.into(), size, order: Some(order), boxes })
    }

    /// Input row of the query at position `i`.
    pub fn original(&self, i: usize) -> usize {
        self.order.as_ref().map_or(i, |o| o[i])
    }

    pub fn order(&self) -> Option<&[usize]> {
        self.order.as_deref()
    }

    /// Box of the block starting at position `b0` (with a spatial order).
    pub fn box_of(&self, b0: usize) -> Option<&[F]> {
        let d = self.queries.ncols();
        let b = b0 / self.size;
        self.order.as_ref().map(|_| &self.boxes[2 * d * b..2 * d * (b + 1)])
    }
}

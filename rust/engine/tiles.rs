//! The layout of the brute-force path: references in tiles, queries in blocks.
//!
//! In low dimensions both are put in a spatial order (the leaves of a median kd split), so
//! every tile and every block fills a compact box. A tile whose box is out of reach of a
//! block's box (kernel exactly zero, or underflowing against the running maximum) is then
//! skipped as a whole: exact, and what makes small bandwidths cheap. Results are reported in
//! the input order.

use super::types::{Bandwidth, Problem};
use crate::distance::{centred, column_means, row_sq_norms};
use crate::memory;
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
    pub inv_h2: Option<Vec<F>>,
    /// Matrix-product path of a distance kernel: the reference mean μ, the references minus μ
    /// (row-major, input order) and their squared norms.
    pub centre: Vec<F>,
    pub centred: Option<Array2<F>>,
    pub norms: Vec<F>,
    /// h² per reference (sample-point bandwidths on the matrix-product path).
    pub h2: Option<Vec<F>>,
    pub has_zero_weight: bool,
    /// Σ w over all references.
    pub total_weight: f64,
    pub d: usize,
    pub n: usize,
    /// Input row at each position (None: input order).
    order: Option<Vec<usize>>,
    /// Position of each input row (with `order`).
    position: Vec<usize>,
    /// Per tile: lower corner then upper corner (with `order`).
    boxes: Vec<F>,
    /// Per tile: the smallest 1/h² of its references (sample-point bandwidths).
    min_inv_h2: Vec<F>,
    /// Groups of consecutive tiles (with `order`): level l holds the union boxes (and smallest
    /// 1/h²) of 2^(l+1) tiles, so that a query block finds the tiles within a compact kernel's
    /// reach in time logarithmic in the tiles rather than testing every tile's box.
    groups: Vec<(Vec<F>, Vec<F>)>,
}

/// The values of one request laid out as the pair loop reads them, for the order of one
/// `Tiles`: apart from the tiles because they change where the references do not (a prepared
/// reference keeps its layout and takes new values per call).
#[derive(Clone)]
pub(super) struct TileValues<F> {
    /// Tile by tile, column-major inside a tile.
    pub values: Vec<F>,
    pub p: usize,
    /// Values in position order, row-major, for the wide-values matrix product (with `order`).
    wide: Option<Array2<F>>,
}

impl<F: Real> TileValues<F> {
    /// Rows `t0..t0 + len` of the values in position order (row-major); `values`: the
    /// request's, in input order.
    pub fn rows<'a>(&'a self, values: Option<ArrayView2<'a, F>>, t0: usize, len: usize) -> Option<ArrayView2<'a, F>> {
        match (&self.wide, values) {
            (Some(v), _) => Some(v.slice(s![t0..t0 + len, ..])),
            (None, Some(v)) => Some(v.slice_move(s![t0..t0 + len, ..])),
            _ => None,
        }
    }
}

impl<F: Real> Tiles<F> {
    /// `coords`: build the feature-major coordinates (direct differences, design moments);
    /// `centre`: centre the references for the matrix product.
    pub fn new(pb: &Problem<F>, bw: &Bandwidth<F>, spatial: bool, coords: bool, centre: bool, mon: &Monitor) -> Result<Self> {
        let (n, d) = pb.x.dim();
        let order = spatial.then(|| chunked_order(pb.x, TILE, mon)).transpose()?;
        let row = |i: usize| order.as_ref().map_or(i, |o| o[i]);
        let n_tiles = n.div_ceil(TILE);
        let mut coords = memory::try_vec("X", &[if coords { n_tiles * TILE } else { 0 }, d], F::zero())?;
        if !coords.is_empty() {
            for i in 0..n {
                let (t, j, src) = (i / TILE, i % TILE, row(i));
                for k in 0..d {
                    coords[(t * d + k) * TILE + j] = pb.x[(src, k)];
                }
            }
        }
        let per_sample = |f: &dyn Fn(usize) -> F| memory::try_collect("X", &[n], (0..n).map(f));
        let weights = per_sample(&|i| pb.weights.as_ref().map_or(F::one(), |w| w[row(i)]))?;
        let inv_h2 = match bw {
            Bandwidth::PerReference(h) => Some(per_sample(&|i| F::one() / (h[row(i)] * h[row(i)]))?),
            _ => None,
        };
        let min_inv_h2 = match &inv_h2 {
            Some(ih) => ih.chunks(TILE).map(|c| c.iter().fold(F::infinity(), |a, &b| a.min(b))).collect(),
            None => Vec::new(),
        };
        let centre = if centre { column_means(pb.x) } else { Vec::new() };
        let centred = (!centre.is_empty()).then(|| centred(pb.x, &centre)).transpose()?;
        let norms = centred.as_ref().map_or_else(Vec::new, |c| row_sq_norms(c.view()));
        let h2 = match (bw, &centred) {
            (Bandwidth::PerReference(h), Some(_)) => Some(per_sample(&|i| h[row(i)] * h[row(i)])?),
            _ => None,
        };
        let has_zero_weight = weights.iter().any(|w| *w == F::zero());
        let total_weight = weights.iter().map(|w| w.f64()).sum();
        let mut boxes = Vec::new();
        let mut position = Vec::new();
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
            position = memory::try_vec("sample order", &[n], 0)?;
            for (pos, &i) in o.iter().enumerate() {
                position[i] = pos;
            }
        }
        let groups = if order.is_some() { group_boxes(&boxes, &min_inv_h2, d) } else { Vec::new() };
        Ok(Tiles { coords, weights, inv_h2, centre, centred, norms, h2, has_zero_weight, total_weight, d, n, order, position, boxes, min_inv_h2, groups })
    }

    /// `values` (n×p, input order) in this layout's order.
    pub fn lay_out(&self, values: Option<ArrayView2<F>>) -> Result<TileValues<F>> {
        let Some(v) = values else { return Ok(TileValues { values: Vec::new(), p: 0, wide: None }) };
        let p = v.ncols();
        let row = |i: usize| self.order.as_ref().map_or(i, |o| o[i]);
        let wide = match &self.order {
            Some(o) if p > WIDE_VALUES => Some(v.select(ndarray::Axis(0), o)),
            _ => None,
        };
        let mut values = memory::try_vec("values", &[self.n.div_ceil(TILE) * TILE, p], F::zero())?;
        for i in 0..self.n {
            let (t, j, src) = (i / TILE, i % TILE, row(i));
            for c in 0..p {
                values[(t * p + c) * TILE + j] = v[(src, c)];
            }
        }
        Ok(TileValues { values, p, wide })
    }

    /// Position of input row `i`.
    pub fn position(&self, i: usize) -> usize {
        if self.order.is_some() {
            self.position[i]
        } else {
            i
        }
    }

    /// Lower bound of the squared distances between a query box and tile `t`, shrunk by a
    /// relative 1e-4 so that rounding in the pair loop can never fall below it.
    pub fn gap2(&self, qbox: &[F], t: usize) -> F {
        box_gap2(qbox, &self.boxes[2 * self.d * t..2 * self.d * (t + 1)])
    }

    /// Calls `visit(t)`, in increasing t, for every tile t that `far` does not rule out, where
    /// `far(g2, scale)` says whether everything at squared gap g2 from the query box `qbox` is
    /// out of reach, `scale` being the tile's smallest 1/h² (sample-point bandwidths; None:
    /// the queries' own). Every tile is offered to `far` with its own `gap2` and
    /// `tile_scale`, exactly as a scan of all tiles would, so `far` must be monotone: true at
    /// (g2, s) implies true at any larger gap and any larger scale. A group of tiles that `far`
    /// rules out with its union box (whose gap is at most each member's, exactly, as min and
    /// max round exactly) and its smallest scale is skipped whole: only tiles the scan would
    /// also rule out are skipped.
    pub fn visit_near(&self, qbox: &[F], far: impl Fn(F, Option<F>) -> bool, mut visit: impl FnMut(usize)) {
        let d = self.d;
        let n_tiles = self.n.div_ceil(TILE);
        if n_tiles == 0 {
            return;
        }
        let scale = |mins: &[F], i: usize| self.inv_h2.as_ref().map(|_| mins[i]);
        // Depth-first from the top level, left to right (so tiles come in increasing order).
        let mut stack = vec![(self.groups.len(), 0usize)];
        while let Some((level, i)) = stack.pop() {
            if level == 0 {
                if !far(self.gap2(qbox, i), scale(&self.min_inv_h2, i)) {
                    visit(i);
                }
                continue;
            }
            let (boxes, mins) = &self.groups[level - 1];
            if far(box_gap2(qbox, &boxes[2 * d * i..2 * d * (i + 1)]), scale(mins, i)) {
                continue;
            }
            let below = if level == 1 { n_tiles } else { self.groups[level - 2].0.len() / (2 * d) };
            for child in [2 * i + 1, 2 * i].into_iter().filter(|&c| c < below) {
                stack.push((level - 1, child));
            }
        }
    }

    /// The largest 1/h² of `tile_scale` over the tiles (sample-point bandwidths).
    pub fn largest_scale(&self) -> F {
        self.min_inv_h2.iter().fold(F::zero(), |a, &b| a.max(b))
    }

    /// 1/h² to scale `gap2` of tile `t` for a query whose own 1/h² is `query_scale`.
    pub fn tile_scale(&self, t: usize, query_scale: F) -> F {
        match &self.inv_h2 {
            Some(_) => self.min_inv_h2[t],
            None => query_scale,
        }
    }
}

/// Lower bound of the squared distances between a query box and box `b` (lower corner then
/// upper corner), shrunk by a relative 1e-4 so that rounding in the pair loop can never fall
/// below it.
fn box_gap2<F: Real>(qbox: &[F], b: &[F]) -> F {
    let d = qbox.len() / 2;
    let (tlo, thi) = b.split_at(d);
    let (qlo, qhi) = qbox.split_at(d);
    let mut s = F::zero();
    for k in 0..d {
        let g = (tlo[k] - qhi[k]).max(qlo[k] - thi[k]).max(F::zero());
        s = s + g * g;
    }
    s * F::of(0.9999)
}

/// The levels of `Tiles::groups` above the tile boxes (2d numbers each) and their smallest
/// 1/h² (`mins`, empty without sample-point bandwidths), up to a single group.
fn group_boxes<F: Real>(boxes: &[F], mins: &[F], d: usize) -> Vec<(Vec<F>, Vec<F>)> {
    let merge = |below: &[F], below_mins: &[F]| -> (Vec<F>, Vec<F>) {
        let merged = below
            .chunks(4 * d)
            .flat_map(|pair| {
                let (a, b) = pair.split_at(2 * d);
                (0..2 * d).map(move |k| match (b.is_empty(), k < d) {
                    (true, _) => a[k],
                    (false, true) => a[k].min(b[k]),
                    (false, false) => a[k].max(b[k]),
                })
            })
            .collect();
        (merged, below_mins.chunks(2).map(|c| c.iter().fold(F::infinity(), |a, &b| a.min(b))).collect())
    };
    let mut levels: Vec<(Vec<F>, Vec<F>)> = Vec::new();
    while levels.last().map_or(boxes.len(), |l| l.0.len()) > 2 * d {
        let next = match levels.last() {
            Some((b, m)) => merge(b, m),
            None => merge(boxes, mins),
        };
        levels.push(next);
    }
    levels
}

/// Queries in blocks; in low dimensions in a spatial order, each block with its box.
pub(super) struct Blocks<'a, F> {
    pub queries: CowArray<'a, F, Ix2>,
    order: Option<Vec<usize>>,
    /// Block k holds positions `starts[k]..starts[k + 1]`.
    starts: Vec<usize>,
    boxes: Vec<F>,
}

impl<'a, F: Real> Blocks<'a, F> {
    /// Blocks of at most `size` queries. In a spatial order, a block whose queries lie far
    /// apart (a few scattered queries) is split further, down to single queries, while
    /// the cost of its halves is below its own (`BlockCost`): a block's box decides how many
    /// pairs it reaches, so scattered queries are not all charged every tile within
    /// reach of any of them. Deterministic: the same queries give the same blocks.
    pub fn new(q: ArrayView2<'a, F>, size: usize, spatial: bool, mon: &Monitor, pricing: &impl BlockCost<F>) -> Result<Self> {
        let m = q.nrows();
        if !spatial {
            let starts = (0..m).step_by(size).chain([m]).collect();
            return Ok(Blocks { queries: q.into(), order: None, starts, boxes: Vec::new() });
        }
        let mut order = chunked_order(q, size, mon)?;
        let mut starts = Vec::new();
        for b0 in (0..m).step_by(size) {
            let b1 = (b0 + size).min(m);
            split_block(q, &mut order, b0, b1, pricing, &mut starts, mon)?;
        }
        starts.push(m);
        let queries = q.select(ndarray::Axis(0), &order);
        let boxes = starts.windows(2).flat_map(|w| box_of_rows(q, &order[w[0]..w[1]])).collect();
        Ok(Blocks { queries: queries.into(), order: Some(order), starts, boxes })
    }

    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Positions of block `b`.
    pub fn range(&self, b: usize) -> std::ops::Range<usize> {
        self.starts[b]..self.starts[b + 1]
    }

    /// Input row of the query at position `i`.
    pub fn original(&self, i: usize) -> usize {
        self.order.as_ref().map_or(i, |o| o[i])
    }

    pub fn order(&self) -> Option<&[usize]> {
        self.order.as_deref()
    }

    /// Input rows of block `b` (with a spatial order).
    pub fn rows(&self, b: usize) -> &[usize] {
        self.order.as_ref().map_or(&[], |o| &o[self.range(b)])
    }

    /// Box of block `b` (with a spatial order): lower corner then upper corner.
    pub fn box_of(&self, b: usize) -> Option<&[F]> {
        let d = self.queries.ncols();
        self.order.as_ref().map(|_| &self.boxes[2 * d * b..2 * d * (b + 1)])
    }
}

/// Lower corner then upper corner of the box around rows `rows` of `q`.
pub(super) fn box_of_rows<F: Real>(q: ArrayView2<F>, rows: &[usize]) -> Vec<F> {
    let d = q.ncols();
    let mut b = vec![F::infinity(); d];
    b.resize(2 * d, F::neg_infinity());
    for &i in rows {
        for (k, &v) in q.row(i).iter().enumerate() {
            b[k] = b[k].min(v);
            b[d + k] = b[d + k].max(v);
        }
    }
    b
}

/// How a query block is priced for splitting (`Blocks::new`).
pub(super) trait BlockCost<F> {
    /// Whether a block with this box may be worth splitting (cheap; no when its queries are
    /// close together against the kernel's reach).
    fn wide(&self, qbox: &[F]) -> bool;
    /// The block's work (pairs plus its fixed cost) for these input rows and their box.
    fn cost(&self, qbox: &[F], rows: &[usize]) -> f64;
}

/// Cut positions `b0..b1` of `order` into blocks (their starts pushed to `starts`): halves of
/// a median split along the widest side (`chunked_order` of the block's rows, whose halves
/// are its first and second half) where they cost less than the whole.
fn split_block<F: Real>(q: ArrayView2<F>, order: &mut [usize], b0: usize, b1: usize, pricing: &impl BlockCost<F>, starts: &mut Vec<usize>, mon: &Monitor) -> Result<()> {
    fn rec<F: Real>(q: ArrayView2<F>, rows: &[usize], at: usize, qbox: Vec<F>, pricing: &impl BlockCost<F>, starts: &mut Vec<usize>) {
        let mid = rows.len() / 2;
        if mid > 0 && pricing.wide(&qbox) {
            let (a, b) = rows.split_at(mid);
            let (ba, bb) = (box_of_rows(q, a), box_of_rows(q, b));
            if pricing.cost(&ba, a) + pricing.cost(&bb, b) < pricing.cost(&qbox, rows) {
                rec(q, a, at, ba, pricing, starts);
                rec(q, b, at + mid, bb, pricing, starts);
                return;
            }
        }
        starts.push(at);
    }
    let rows = &mut order[b0..b1];
    let qbox = box_of_rows(q, rows);
    if rows.len() > 1 && pricing.wide(&qbox) {
        // The block's own spatial order, so that its halves (and theirs) are compact.
        let sub = q.select(ndarray::Axis(0), rows);
        let inner = chunked_order(sub.view(), 1, mon)?;
        let reordered: Vec<usize> = inner.iter().map(|&i| rows[i]).collect();
        rows.copy_from_slice(&reordered);
    }
    rec(q, rows, b0, qbox, pricing, starts);
    Ok(())
}

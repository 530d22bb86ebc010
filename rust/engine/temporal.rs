//! Temporal kernels: the local mean over a sequence, of which softmax attention is one case.
//!
//! ```text
//! m_t = Σ_s K(x_t, t, x_s, s) v_s / Σ_s K(x_t, t, x_s, s),     K = K_content · K_position
//! ```
//!
//! Content kernels: the scaled dot product exp(scale · q_t·k_s) (softmax attention) or any
//! radial profile k(‖q_t − k_s‖ / h). Position kernels, multiplied together: causal 1[s ≤ t],
//! window 1[|t − s| < w], relative decay exp(−λ|t − s|) (λ per sequence, i.e. per head, as in
//! ALiBi), hollow 1[s ≠ t] (leave-one-out), and a boolean mask given by the caller.
//!
//! How it runs (FlashAttention's schedule, on the engine's own pieces):
//! * queries × keys in blocks: a block of logits comes from one matrix product, the position
//!   kernel is applied in place, and an online softmax with the engine's running maximum
//!   (`Acc::raise_scale`) folds it into per-query f64 sums. Nothing T×T is ever stored:
//!   memory is O(T·d). The log-normaliser L_t = log Σ_s K is returned for the backward pass.
//! * the products QKᵀ and P·V of a block run on the register-blocked micro-kernel of
//!   `distance::packed`: K and Vᵀ packed into its panels once per sequence (a copy of K and V,
//!   O(T·d)), the other operand (Q, the tile P) read in place. A general matrix product per
//!   block pair repacked both operands on every call, a sixth of the forward pass.
//! * each group of six query rows runs over the keys of its own band only, so a block on the
//!   causal diagonal does about half the work of a full one (the position kernel then sets
//!   the entries left out, which it excludes anyway);
//! * key blocks outside the causal / window band, or entirely masked, are never visited;
//! * parallel over (sequence, query block) forward, over (sequence, key block) and (sequence,
//!   query block) backward. Every sum that makes one output element runs over the same blocks
//!   in the same order whatever the schedule, so results are bit-identical for any number of
//!   threads.
//! * the backward pass (dot-product content) recomputes each block P = exp(S − L) from the
//!   saved log-normalisers rather than storing P (FlashAttention-2's recomputation), once per
//!   block pair for dV, dP and dS. Its five products read Q, dO and the tiles P, dS in place —
//!   the tiles transposed for dV = PᵀdO and dK = dSᵀQ, so no tile is copied — against K, V,
//!   Qᵀ, dOᵀ and Kᵀ packed once per sequence (the last three per task, or per pass when the
//!   schedule is parallel within a sequence).
//!
//! A query whose kernel weights are all zero (possible only through a caller's mask or the
//! hollow kernel) gets output 0 and log-normaliser −∞; it contributes no gradient.

use super::accumulate::Acc;
use super::lanes;
use crate::checked;
use crate::distance::packed::{products, Layout, Panels, MR};
use crate::distance::{row_sq_norms, sq_dist_tile_gemm, sq_euclidean, GEMM_MIN_DIM};
use crate::error::{LocalizationError, Result};
use crate::kernel::{dispatch_profile, Profile, ProfileFn};
use crate::real::Real;
use crate::parallel::Monitor;
use crate::rows::Rows;
use ndarray::{s, Array1, Array2, Array3, ArrayView2, ArrayView3, ArrayViewMut, ArrayViewMut1, ArrayViewMut2, Axis, RemoveAxis};
use rayon::prelude::*;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Mutex;

/// Queries and keys per block: the logits of a block (128 × 128 in f32, 64 KB) stay in L2.
/// BK is a multiple of the packed panels' width (16 keys in f32, 8 in f64).
const BQ: usize = 128;
const BK: usize = 128;
const _: () = assert!(BK % 16 == 0);

/// B sequences of T steps (batch and heads flattened into B), C-contiguous.
pub struct Sequences<'a, F> {
    /// B × T × d
    pub q: ArrayView3<'a, F>,
    /// B × T × d
    pub k: ArrayView3<'a, F>,
    /// B × T × p
    pub v: ArrayView3<'a, F>,
}

impl<F> Sequences<'_, F> {
    fn view(&self) -> Sequences<'_, F> {
        Sequences { q: self.q.view(), k: self.k.view(), v: self.v.view() }
    }
}

/// The content part of a temporal kernel.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Content {
    /// exp(scale · q·k): softmax attention (scale = 1/√d by convention).
    Dot { scale: f64 },
    /// k(‖q − k‖ / h) for a radial profile.
    Radial { profile: Profile, bandwidth: f64 },
}

impl Content {
    fn exponential(&self) -> bool {
        match self {
            Content::Dot { .. } => true,
            Content::Radial { profile, .. } => profile.is_exponential(),
        }
    }
}

/// A caller's mask: `allowed[slab[b], t or 0, s]` says whether query t of sequence b may see key s.
pub struct Mask<'a> {
    /// slabs × (T or 1) × T; a single row is shared by every query (a key padding mask).
    pub allowed: ArrayView3<'a, bool>,
    /// The slab of each sequence (masks broadcast over heads or batch share slabs).
    pub slab: &'a [usize],
}

/// The position part of a temporal kernel: the product of every factor that is set.
#[derive(Default)]
pub struct Position<'a> {
    /// 1[s ≤ t].
    pub causal: bool,
    /// 1[|t − s| < w] (with `causal`: 0 ≤ t − s < w).
    pub window: Option<usize>,
    /// exp(−λ_b |t − s|), λ_b ≥ 0 per sequence.
    pub decay: Option<&'a [f64]>,
    /// 1[s ≠ t]: the hollow (leave-one-out) kernel.
    pub exclude_self: bool,
    pub mask: Option<Mask<'a>>,
}

impl Position<'_> {
    /// Keys [lo, hi) within the causal and window bands of some query in [t0, t1). Exact: every
    /// key block meeting it holds a pair the bands allow (the hollow kernel and masks aside).
    fn key_band(&self, t0: usize, t1: usize, t: usize) -> (usize, usize) {
        let (mut lo, mut hi) = (0, t);
        if self.causal {
            hi = hi.min(t1);
        }
        if let Some(w) = self.window {
            lo = t0.saturating_sub(w - 1);
            hi = hi.min(t1.saturating_add(w - 1));
        }
        (lo, hi.max(lo))
    }

    /// Queries [lo, hi) within the bands of some key in [s0, s1) (the transpose of `key_band`).
    fn query_band(&self, s0: usize, s1: usize, t: usize) -> (usize, usize) {
        let (mut lo, mut hi) = (0, t);
        if self.causal {
            lo = s0;
        }
        if let Some(w) = self.window {
            lo = lo.max(s0.saturating_sub(w - 1));
            hi = hi.min(s1.saturating_add(w - 1));
        }
        (lo, hi.max(lo))
    }

    /// True when the bands and the hollow kernel allow every pair of the block.
    fn interior(&self, t0: usize, t1: usize, s0: usize, s1: usize) -> bool {
        let (tl, sl) = (t1 - 1, s1 - 1);
        (!self.causal || sl <= t0)
            && self.window.map_or(true, |w| tl.saturating_sub(s0).max(sl.saturating_sub(t0)) < w)
            && !(self.exclude_self && s0 < t1 && t0 < s1)
    }

    fn mask_of(&self, b: usize) -> Option<ArrayView2<'_, bool>> {
        self.mask.as_ref().map(|m| m.allowed.index_axis(Axis(0), m.slab[b]))
    }

    fn decay_of(&self, b: usize) -> Option<f64> {
        self.decay.map(|d| d[b]).filter(|&l| l > 0.0)
    }

    /// Apply the position kernel in place to a block of log-kernel values (`LOG`: excluded
    /// pairs → −∞, decay subtracted) or kernel values (excluded pairs → 0; no decay then):
    /// the first `nk` columns of the first `nq` rows of `tile` (row stride `BK`).
    #[inline(always)]
    fn apply<F: Real, const LOG: bool>(&self, tile: &mut [F], nq: usize, nk: usize, b: usize, t0: usize, s0: usize) {
        let mask = self.mask_of(b);
        let lam = if LOG { self.decay_of(b) } else { None };
        if self.interior(t0, t0 + nq, s0, s0 + nk) && mask.is_none() && lam.is_none() {
            return;
        }
        let off = if LOG { F::neg_infinity() } else { F::zero() };
        let per_pair = mask.is_some() || lam.is_some() || self.exclude_self;
        for (r, row) in tile.chunks_exact_mut(BK).take(nq).enumerate() {
            let t = t0 + r;
            // The keys the bands allow this query, as a range of columns: everything outside
            // is set in two fills (a pair-by-pair test there cost a few % of the forward pass
            // on the causal diagonal blocks).
            let (lo, hi) = self.key_band(t, t + 1, s0 + nk);
            let (lo, hi) = (lo.clamp(s0, s0 + nk) - s0, hi.clamp(s0, s0 + nk) - s0);
            let row = &mut row[..nk];
            row[..lo].fill(off);
            row[hi..].fill(off);
            if !per_pair {
                continue;
            }
            let allowed = mask.map(|m| m.index_axis_move(Axis(0), if m.nrows() == 1 { 0 } else { t }));
            for (c, v) in row[lo..hi].iter_mut().enumerate() {
                let s = s0 + lo + c;
                if (self.exclude_self && s == t) || allowed.is_some_and(|a| !a[s]) {
                    *v = off;
                } else if let Some(l) = lam {
                    *v = *v - F::of(l * t.abs_diff(s) as f64);
                }
            }
        }
    }

    /// True when the caller's mask excludes every pair of the block.
    fn masked_out(&self, b: usize, t0: usize, t1: usize, s0: usize, s1: usize) -> bool {
        self.mask_of(b).is_some_and(|m| {
            let rows = if m.nrows() == 1 { 0..1 } else { t0..t1 };
            rows.into_iter().all(|t| m.row(t).slice(s![s0..s1]).iter().all(|&a| !a))
        })
    }
}

/// Outputs of the forward pass.
#[derive(Clone, Debug)]
pub struct Attended<F> {
    /// B × T × p: the local means (0 where every weight is zero).
    pub out: Array3<F>,
    /// B × T: log Σ_s K(t, s) (−∞ where every weight is zero).
    pub lse: Array2<F>,
}

/// Gradients of a scalar loss through the dot-product forward pass.
#[derive(Clone, Debug)]
pub struct Gradients<F> {
    pub dq: Array3<F>,
    pub dk: Array3<F>,
    pub dv: Array3<F>,
    /// ∂/∂λ_b per sequence (when a decay was given).
    pub d_decay: Option<Array1<f64>>,
}

fn validate<F: Real>(seq: &Sequences<F>, pos: &Position) -> Result<(usize, usize, usize)> {
    let (b, t, d) = seq.q.dim();
    if t == 0 {
        return Err(LocalizationError::param("Q", "has no time steps (T = 0): a sequence needs at least one"));
    }
    if d == 0 {
        return Err(LocalizationError::param("Q", "needs at least one feature"));
    }
    for (name, a, width) in [("Q", &seq.q, Some(d)), ("K", &seq.k, Some(d)), ("V", &seq.v, None)] {
        check_array(name, a, b, t, width)?;
    }
    if pos.window == Some(0) {
        return Err(LocalizationError::param("window", "must be at least 1 (the query's own step)"));
    }
    if let Some(l) = pos.decay {
        if l.len() != b {
            return Err(LocalizationError::shape("decay", format!("{b} values (one per sequence)"), l.len()));
        }
        if l.iter().any(|v| !(*v >= 0.0 && v.is_finite())) {
            return Err(LocalizationError::param("decay", "must be finite and non-negative"));
        }
    }
    if let Some(m) = &pos.mask {
        let (slabs, rows, cols) = m.allowed.dim();
        if cols != t || !(rows == t || rows == 1) {
            return Err(LocalizationError::shape("mask", format!("(…, {t} or 1, {t})"), format!("(…, {rows}, {cols})")));
        }
        if m.slab.len() != b || m.slab.iter().any(|&i| i >= slabs) {
            return Err(LocalizationError::param("mask", "does not broadcast against the sequences"));
        }
        if !m.allowed.is_standard_layout() {
            return Err(LocalizationError::param("mask", "must be C-contiguous"));
        }
    }
    Ok((b, t, d))
}

fn check_array<F>(name: &'static str, a: &ArrayView3<F>, b: usize, t: usize, width: Option<usize>) -> Result<()> {
    let (bb, tt, dd) = a.dim();
    if bb != b {
        return Err(LocalizationError::shape(name, format!("{b} sequences (leading axes as Q)"), bb));
    }
    if tt != t {
        return Err(LocalizationError::shape(name, format!("{t} time steps (as Q)"), tt));
    }
    if let Some(w) = width {
        if dd != w {
            return Err(LocalizationError::shape(name, format!("{w} features (as Q)"), dd));
        }
    }
    if !a.is_standard_layout() {
        return Err(LocalizationError::param(name, "must be C-contiguous"));
    }
    Ok(())
}

fn check_content(c: &Content) -> Result<()> {
    match *c {
        Content::Dot { scale } if !scale.is_finite() => Err(LocalizationError::param("scale", "must be finite")),
        Content::Radial { bandwidth: h, .. } if !checked::resolvable(h) => {
            Err(LocalizationError::param("bandwidth", "must be finite, strictly positive and large enough that 1/h² is finite"))
        }
        _ => Ok(()),
    }
}

/// The content kernel of a block of queries × keys, as log-kernel (`LOG`) or kernel values.
trait Fill<F: Real>: Sync {
    /// K(q_t, k_s) for the queries t0.. (`q`) of sequence `b` and its keys s0.. (`k`), into
    /// the first columns of `tile` (row stride `BK`). Entries outside the bands of `pos` may
    /// be left as they were (the position kernel overwrites them).
    #[allow(clippy::too_many_arguments)]
    fn fill<const LOG: bool>(&self, b: usize, pos: &Position, t: usize, t0: usize, q: Rows<'_, F>, s0: usize, k: Rows<'_, F>, tile: &mut [F]);
}

/// log K = scale · q·k (always in the log domain), from the keys packed once per sequence.
struct DotFill<'a, F> {
    scale: F,
    keys: &'a [Panels<F>],
}
impl<F: Real> Fill<F> for DotFill<'_, F> {
    #[inline(always)]
    fn fill<const LOG: bool>(&self, b: usize, pos: &Position, t: usize, t0: usize, q: Rows<'_, F>, s0: usize, k: Rows<'_, F>, tile: &mut [F]) {
        logits(q.as_slice(), &self.keys[b], self.scale, pos, t, t0..t0 + q.nrows(), s0..s0 + k.nrows(), tile);
    }
}

/// tile[r · BK + c] = scale · q_(t0+r) · k_(s0+c) for the queries `rows` (the rows of `q`,
/// read in place) and keys `cols` of a sequence (`keys` packed), group of rows by group, each
/// over the keys of its band only: outside it the entries are left as they were.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn logits<F: Real>(q: &[F], keys: &Panels<F>, scale: F, pos: &Position, t: usize, rows: Range<usize>, cols: Range<usize>, tile: &mut [F]) {
    let (d, w) = (keys.dim(), keys.width());
    for_groups(rows, cols.clone(), |a, b| pos.key_band(a, b, t), |g, n, band| {
        if band.is_empty() {
            return;
        }
        // Block starts are multiples of BK, itself a multiple of the panel width.
        let panels = band.start / w..band.end.div_ceil(w);
        products(&q[g * d..], Layout::Rows(d), n, keys, panels.clone(), 0..d, scale, &mut tile[g * BK + panels.start * w - cols.start..], BK);
    });
}

/// `f(g, n, band)` for the groups of `MR` rows [r0 + g, r0 + g + n) of `rows` = r0.., where
/// `band` is the columns of `cols` within `band_of(first, end)` of the group (an empty band
/// lies inside `cols`).
#[inline(always)]
fn for_groups(rows: Range<usize>, cols: Range<usize>, band_of: impl Fn(usize, usize) -> (usize, usize), mut f: impl FnMut(usize, usize, Range<usize>)) {
    for g in (0..rows.len()).step_by(MR) {
        let n = MR.min(rows.len() - g);
        let (lo, hi) = band_of(rows.start + g, rows.start + g + n);
        let lo = lo.clamp(cols.start, cols.end);
        f(g, n, lo..hi.clamp(lo, cols.end));
    }
}

#[derive(Copy, Clone)]
struct RadialFill<P> {
    inv_h2: f64,
    _p: PhantomData<P>,
}
impl<F: Real, P: ProfileFn> Fill<F> for RadialFill<P> {
    #[inline(always)]
    fn fill<const LOG: bool>(&self, _: usize, _: &Position, _: usize, _: usize, q: Rows<'_, F>, _: usize, k: Rows<'_, F>, tile: &mut [F]) {
        let mut out = tile_view(tile, q.nrows(), k.nrows());
        // Squared distances as the engine computes them: exact differences in low dimensions,
        // the product form through a matrix multiply in high ones.
        if q.ncols() >= GEMM_MIN_DIM {
            let (qv, kv) = (q.view(), k.view());
            sq_dist_tile_gemm(qv, &row_sq_norms(qv), kv, &row_sq_norms(kv), out.view_mut());
        } else {
            for (i, mut row) in out.rows_mut().into_iter().enumerate() {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = sq_euclidean(q.row(i), k.row(j));
                }
            }
        }
        let s = F::of(self.inv_h2);
        out.mapv_inplace(|u2| if LOG { P::log_k(u2 * s) } else { P::k(u2 * s) });
    }
}

/// The first `nk` columns of the first `nq` rows of a tile of row stride `BK`.
fn tile_view<F>(tile: &mut [F], nq: usize, nk: usize) -> ArrayViewMut2<'_, F> {
    ArrayViewMut2::from_shape((nq, BK), &mut tile[..nq * BK]).expect("a tile of BK columns").slice_move(s![.., ..nk])
}

/// The rows of each sequence of `a` (B × T × n; transposed: of each sequence's transpose),
/// packed once into the micro-kernel's panels for all the blocks that read them.
fn pack<F: Real>(a: ArrayView3<F>, transposed: bool) -> Result<Vec<Panels<F>>> {
    a.outer_iter().into_par_iter().map(|m| pack_one(m, transposed)).collect()
}

fn pack_one<F: Real>(m: ArrayView2<F>, transposed: bool) -> Result<Panels<F>> {
    if transposed {
        Panels::transposed(m)
    } else {
        Panels::references(m, &vec![F::zero(); m.ncols()])
    }
}

/// `f` of every item (weighted by its number of pairs) on the current pool, returned in the
/// items' order. The threads take the items one at a time from one queue, heaviest first
/// (longest processing time first), so no barrier splits the work and the last items to
/// finish are the lightest: a causal sequence's last query blocks, the heaviest, no longer
/// end the call with one thread working alone. `mon` is polled (Ctrl-C) before each item and
/// told of each item done. The order changes no result: each item writes outputs of its own.
fn run_items<T: Send, R: Send>(items: Vec<(usize, T)>, mon: &Monitor, f: impl Fn(T) -> R + Sync) -> Result<Vec<R>> {
    let n = items.len();
    let mut queue: Vec<(usize, (usize, T))> = items.into_iter().enumerate().collect();
    // Stable: equal weights keep their order.
    queue.sort_by_key(|(_, (w, _))| std::cmp::Reverse(*w));
    let queue = Mutex::new(queue.into_iter());
    let per_thread = (0..rayon::current_num_threads().clamp(1, n.max(1)))
        .into_par_iter()
        .with_max_len(1)
        .map(|_| {
            let mut out = Vec::new();
            loop {
                // Held only for `next`, which cannot panic: never poisoned.
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                let Some((i, (_, item))) = next else { return Ok(out) };
                mon.check()?;
                out.push((i, f(item)));
                mon.advance(1);
            }
        })
        .collect::<Result<Vec<Vec<(usize, R)>>>>()?;
    let mut slots: Vec<Option<R>> = std::iter::repeat_with(|| None).take(n).collect();
    for (i, r) in per_thread.into_iter().flatten() {
        slots[i] = Some(r);
    }
    Ok(slots.into_iter().flatten().collect())
}

/// Split `a` (B × T × …) into (sequence, first step, rows) blocks of at most `block` steps.
fn row_blocks<'a, F, D: RemoveAxis>(a: ArrayViewMut<'a, F, D>, block: usize) -> Vec<(usize, usize, ArrayViewMut<'a, F, D::Smaller>)> {
    let mut out = Vec::new();
    let mut rest = a;
    let mut b = 0;
    while rest.len_of(Axis(0)) > 0 {
        let (head, tail) = rest.split_at(Axis(0), 1);
        let mut seq = head.index_axis_move(Axis(0), 0);
        let mut t0 = 0;
        while seq.len_of(Axis(0)) > 0 {
            let n = block.min(seq.len_of(Axis(0)));
            let (h, tl) = seq.split_at(Axis(0), n);
            out.push((b, t0, h));
            seq = tl;
            t0 += n;
        }
        rest = tail;
        b += 1;
    }
    out
}

/// Aligned block starts covering [lo, hi).
fn block_starts(lo: usize, hi: usize, block: usize) -> impl Iterator<Item = usize> {
    (lo / block * block..hi).step_by(block)
}

/// The temporal local mean of every step of every sequence, and its log-normaliser. Runs on
/// the current rayon pool (see `parallel::run`), polling `mon`.
pub fn forward<F: Real>(seq: &Sequences<F>, content: &Content, pos: &Position, mon: &Monitor) -> Result<Attended<F>> {
    let (b, t, _) = validate(seq, pos)?;
    check_content(content)?;
    let p = seq.v.dim().2;
    let mut out = Attended { out: Array3::zeros((b, t, p)), lse: Array2::zeros((b, t)) };
    // Exponential content or a decay: log domain with a running maximum; else plain sums.
    let log = content.exponential() || pos.decay.is_some();
    let items: Vec<(usize, Block<F>)> = row_blocks(out.out.view_mut(), BQ)
        .into_iter()
        .zip(row_blocks(out.lse.view_mut(), BQ))
        .map(|((bi, t0, o), (_, _, l))| {
            let (lo, hi) = pos.key_band(t0, t0 + o.nrows(), t);
            (o.nrows() * (hi - lo), Block { b: bi, t0, out: o, lse: l })
        })
        .collect();
    let total = items.len();
    mon.set_progress(0, total);
    // Values (and, for the dot product, keys) packed once per sequence: O(T·d) more memory,
    // instead of a repacking of every block pair inside a general matrix product.
    let values = if p > 0 { pack(seq.v.view(), true)? } else { Vec::new() };
    let rows = (Rows::new("Q", seq.q.view())?, Rows::new("K", seq.k.view())?);
    macro_rules! go {
        ($fill:expr, $C:ty) => {{
            let cx = Fwd { seq: seq.view(), q: rows.0, k: rows.1, pos, fill: $fill, values: &values };
            if log {
                run_items(items, mon, |blk| forward_block::<F, $C, true>(&cx, blk))?;
            } else {
                run_items(items, mon, |blk| forward_block::<F, $C, false>(&cx, blk))?;
            }
        }};
    }
    match *content {
        Content::Dot { scale } => {
            let keys = pack(seq.k.view(), false)?;
            go!(DotFill { scale: F::of(scale), keys: &keys }, DotFill<F>)
        }
        Content::Radial { profile, bandwidth } => {
            let inv_h2 = 1.0 / (bandwidth * bandwidth);
            dispatch_profile!(profile, P, go!(RadialFill::<P> { inv_h2, _p: PhantomData }, RadialFill<P>))
        }
    }
    Ok(out)
}

struct Fwd<'a, 'p, F, C> {
    seq: Sequences<'a, F>,
    /// The queries and keys of every sequence, B·T rows each.
    q: Rows<'a, F>,
    k: Rows<'a, F>,
    pos: &'a Position<'p>,
    fill: C,
    /// Vᵀ of each sequence in panels (none when p = 0).
    values: &'a [Panels<F>],
}

/// One block of query rows of one sequence, with where its results go.
struct Block<'a, F> {
    b: usize,
    t0: usize,
    out: ArrayViewMut2<'a, F>,
    lse: ArrayViewMut1<'a, F>,
}

fn forward_block<F: Real, C: Fill<F>, const LOG: bool>(cx: &Fwd<'_, '_, F, C>, blk: Block<F>) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("avx512dq") && has!("avx512vl") && has!("avx2") && has!("fma") {
            // SAFETY: the CPU supports the features the function is compiled for.
            return unsafe { forward_block_avx512::<F, C, LOG>(cx, blk) };
        }
        if has!("avx2") && has!("fma") {
            // SAFETY: as above.
            return unsafe { forward_block_avx2::<F, C, LOG>(cx, blk) };
        }
    }
    forward_block_with::<F, C, LOG, false>(cx, blk)
}

/// The online softmax's exponentials and sums in 512-bit lanes (as the engine's `run_block`):
/// the same operations, so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
unsafe fn forward_block_avx512<F: Real, C: Fill<F>, const LOG: bool>(cx: &Fwd<'_, '_, F, C>, blk: Block<F>) {
    forward_block_with::<F, C, LOG, true>(cx, blk)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn forward_block_avx2<F: Real, C: Fill<F>, const LOG: bool>(cx: &Fwd<'_, '_, F, C>, blk: Block<F>) {
    forward_block_with::<F, C, LOG, true>(cx, blk)
}

#[inline(always)]
fn forward_block_with<F: Real, C: Fill<F>, const LOG: bool, const FMA: bool>(cx: &Fwd<'_, '_, F, C>, blk: Block<F>) {
    let Block { b, t0, mut out, mut lse } = blk;
    let (t, p) = (cx.seq.q.dim().1, out.ncols());
    let (nq, t1) = (out.nrows(), t0 + out.nrows());
    let q = cx.q.rows(b * t + t0..b * t + t1);
    let mut accs: Vec<Acc> = (0..nq).map(|_| Acc::new(p, None, LOG)).collect();
    let mut tile = vec![F::zero(); nq * BK];
    let ldv = cx.values.get(b).map_or(0, |v| v.padded_rows());
    let mut pv = vec![F::zero(); nq * ldv];
    let (lo, hi) = cx.pos.key_band(t0, t1, t);
    for s0 in block_starts(lo, hi, BK) {
        let s1 = (s0 + BK).min(t);
        if cx.pos.masked_out(b, t0, t1, s0, s1) {
            continue;
        }
        cx.fill.fill::<LOG>(b, cx.pos, t, t0, q, s0, cx.k.rows(b * t + s0..b * t + s1), &mut tile);
        cx.pos.apply::<F, LOG>(&mut tile, nq, s1 - s0, b, t0, s0);
        let mut any = false;
        for (acc, row) in accs.iter_mut().zip(tile.chunks_exact_mut(BK)) {
            let row = &mut row[..s1 - s0];
            let sum = if LOG {
                let mx = lanes::max(row).f64();
                // Every term of the row underflows against the running maximum (or is excluded).
                if mx == f64::NEG_INFINITY || mx - acc.log_scale < F::EXP_UNDERFLOW {
                    row.fill(F::zero());
                    continue;
                }
                acc.raise_scale(mx);
                lanes::exp_sum::<F, FMA>(row, F::of(acc.log_scale))
            } else {
                lanes::sum(row)
            };
            any |= sum > F::zero();
            acc.den += sum.f64();
        }
        if any && p > 0 {
            // P·V of the block in F (the block's partial sums), added to the f64 sums.
            queries_times(&tile, cx.pos, t, t0..t1, s0..s1, &cx.values[b], &mut pv, ldv);
            // Over slices, so the widening adds vectorise (as an ndarray row walk they did not,
            // and cost a tenth of the forward pass).
            for (acc, row) in accs.iter_mut().zip(pv.chunks_exact(ldv)) {
                for (a, &x) in acc.num.iter_mut().zip(&row[..p]) {
                    *a += x.f64();
                }
            }
        }
    }
    for (r, acc) in accs.iter().enumerate() {
        if acc.den > 0.0 {
            let inv = 1.0 / acc.den;
            for (o, &a) in out.row_mut(r).iter_mut().zip(&acc.num) {
                *o = F::of(a * inv);
            }
            lse[r] = F::of(acc.log_scale + acc.den.ln());
        } else {
            out.row_mut(r).fill(F::zero());
            lse[r] = F::neg_infinity();
        }
    }
}

/// How the backward pass shares out its work; both give the same bits.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Schedule {
    /// One task per sequence, key blocks outer: five matrix products per block pair, dQ
    /// accumulated in a per-sequence buffer. Used when there are sequences enough to keep
    /// every thread busy.
    PerSequence,
    /// Key blocks in parallel for dK, dV (and the decay), then query blocks in parallel for
    /// dQ: seven products per block pair (S and dP twice), but parallel within one long sequence.
    TwoPass,
}

/// Largest T·d whose per-sequence f64 dQ buffer (8 MB, and Qᵀ, dOᵀ, Kᵀ packed) the
/// per-sequence schedule may hold per thread.
const PER_SEQUENCE_MAX_TD: usize = 1 << 20;

/// Gradients of a loss ℓ(out) through the dot-product forward pass, from ∂ℓ/∂out and the
/// forward's outputs (`out`, `lse`). Runs on the current rayon pool, polling `mon`.
#[allow(clippy::too_many_arguments)]
pub fn backward<F: Real>(
    seq: &Sequences<F>, scale: f64, pos: &Position, out: ArrayView3<F>, lse: ArrayView2<F>, d_out: ArrayView3<F>, mon: &Monitor,
) -> Result<Gradients<F>> {
    let (b, t, d) = validate(seq, pos)?;
    let threads = rayon::current_num_threads();
    let schedule = if b >= 2 * threads && t * d <= PER_SEQUENCE_MAX_TD { Schedule::PerSequence } else { Schedule::TwoPass };
    backward_with(seq, scale, pos, out, lse, d_out, mon, schedule)
}

#[allow(clippy::too_many_arguments)]
fn backward_with<F: Real>(
    seq: &Sequences<F>, scale: f64, pos: &Position, out: ArrayView3<F>, lse: ArrayView2<F>, d_out: ArrayView3<F>,
    mon: &Monitor, schedule: Schedule,
) -> Result<Gradients<F>> {
    let (b, t, d) = validate(seq, pos)?;
    check_content(&Content::Dot { scale })?;
    let p = seq.v.dim().2;
    check_array("out", &out, b, t, Some(p))?;
    check_array("grad_output", &d_out, b, t, Some(p))?;
    if lse.dim() != (b, t) || !lse.is_standard_layout() {
        return Err(LocalizationError::shape("lse", format!("({b}, {t}), C-contiguous"), format!("{:?}", lse.dim())));
    }
    // D_t = Σ_c dO_tc O_tc: the row term of the softmax's Jacobian.
    let mut delta = Array2::<f64>::zeros((b, t));
    delta.axis_iter_mut(Axis(0)).into_par_iter().enumerate().for_each(|(bi, mut row)| {
        for (ti, v) in row.iter_mut().enumerate() {
            *v = out.slice(s![bi, ti, ..]).iter().zip(d_out.slice(s![bi, ti, ..])).map(|(a, g)| a.f64() * g.f64()).sum();
        }
    });
    let (keys, values) = (pack(seq.k.view(), false)?, if p > 0 { pack(seq.v.view(), false)? } else { Vec::new() });
    let rows = (Rows::new("Q", seq.q.view())?, Rows::new("grad_output", d_out.view())?);
    let cx = Bwd {
        seq: seq.view(), q: rows.0, pos, scale: F::of(scale), d_out: d_out.view(), d_out_rows: rows.1, lse: lse.view(), delta: &delta, keys: &keys,
        values: &values,
    };
    let mut g = Gradients { dq: Array3::zeros((b, t, d)), dk: Array3::zeros((b, t, d)), dv: Array3::zeros((b, t, p)), d_decay: None };
    // The decay's gradient of each key block of each sequence, summed in block order at the end.
    let mut partials = Array2::<f64>::zeros((b, t.div_ceil(BK)));
    let band_pairs = |s0: usize, ns: usize| {
        let (lo, hi) = pos.query_band(s0, s0 + ns, t);
        ns * (hi - lo)
    };
    match schedule {
        Schedule::PerSequence => {
            let items: Vec<_> = row_blocks(g.dq.view_mut(), t)
                .into_iter()
                .zip(row_blocks(g.dk.view_mut(), t))
                .zip(row_blocks(g.dv.view_mut(), t))
                .map(|(((bi, _, dq), (_, _, dk)), (_, _, dv))| (band_pairs(0, t), (bi, dq, dk, dv)))
                .collect();
            let total = items.len();
            mon.set_progress(0, total);
            let per_seq = run_items(items, mon, |(bi, mut dq, mut dk, mut dv)| {
                let tr = cx.transposed(bi, true)?;
                let mut dq_acc = Array2::<f64>::zeros((t, d));
                let gl: Vec<f64> = (0..t)
                    .step_by(BK)
                    .map(|s0| {
                        let s1 = (s0 + BK).min(t);
                        key_block(&cx, bi, s0, dk.slice_mut(s![s0..s1, ..]), dv.slice_mut(s![s0..s1, ..]), &tr, Some(&mut dq_acc))
                    })
                    .collect();
                write_scaled(&mut dq, &dq_acc, scale);
                Ok((bi, gl))
            })?;
            for r in per_seq {
                let (bi, gl) = r?;
                partials.row_mut(bi).assign(&Array1::from(gl));
            }
        }
        Schedule::TwoPass => {
            let keys: Vec<_> = row_blocks(g.dk.view_mut(), BK)
                .into_iter()
                .zip(row_blocks(g.dv.view_mut(), BK))
                .map(|((bi, s0, dk), (_, _, dv))| (band_pairs(s0, dk.nrows()), (bi, s0, dk, dv)))
                .collect();
            let queries: Vec<_> = row_blocks(g.dq.view_mut(), BQ)
                .into_iter()
                .map(|(bi, t0, dq)| {
                    let (lo, hi) = pos.key_band(t0, t0 + dq.nrows(), t);
                    (dq.nrows() * (hi - lo), (bi, t0, dq))
                })
                .collect();
            let total = keys.len() + queries.len();
            mon.set_progress(0, total);
            // Qᵀ and dOᵀ for the key pass, then Kᵀ for the query pass: at most two packed
            // copies of the inputs beyond K and V at a time.
            let tr = (0..b).into_par_iter().map(|bi| cx.transposed(bi, false)).collect::<Result<Vec<_>>>()?;
            let per_key = run_items(keys, mon, |(bi, s0, dk, dv)| (bi, s0 / BK, key_block(&cx, bi, s0, dk, dv, &tr[bi], None)))?;
            drop(tr);
            for (bi, j, gl) in per_key {
                partials[(bi, j)] = gl;
            }
            let kt = pack(seq.k.view(), true)?;
            run_items(queries, mon, |(bi, t0, dq)| query_block(&cx, bi, t0, dq, &kt[bi]))?;
        }
    }
    if pos.decay.is_some() {
        g.d_decay = Some(partials.rows().into_iter().map(|r| r.iter().sum()).collect());
    }
    Ok(g)
}

struct Bwd<'a, 'p, F> {
    seq: Sequences<'a, F>,
    /// The queries of every sequence, B·T rows.
    q: Rows<'a, F>,
    pos: &'a Position<'p>,
    scale: F,
    d_out: ArrayView3<'a, F>,
    /// `d_out`'s B·T rows.
    d_out_rows: Rows<'a, F>,
    lse: ArrayView2<'a, F>,
    delta: &'a Array2<f64>,
    /// K and V of each sequence in panels (for S = QKᵀ and dP = dO Vᵀ; V's empty when p = 0).
    keys: &'a [Panels<F>],
    values: &'a [Panels<F>],
}

impl<F: Real> Bwd<'_, '_, F> {
    /// Qᵀ, dOᵀ (and with `with_keys`, Kᵀ) of sequence `b`, packed once for all its block pairs.
    fn transposed(&self, b: usize, with_keys: bool) -> Result<Transposed<F>> {
        let k = if with_keys { Some(pack_one(self.seq.k.index_axis(Axis(0), b), true)?) } else { None };
        Ok(Transposed { q: pack_one(self.seq.q.index_axis(Axis(0), b), true)?, d_out: pack_one(self.d_out.index_axis(Axis(0), b), true)?, k })
    }
}

/// One sequence's Qᵀ and dOᵀ (for dK = dSᵀQ, dV = PᵀdO) and, when dQ = dS·K is summed in the
/// same pass, Kᵀ.
struct Transposed<F> {
    q: Panels<F>,
    d_out: Panels<F>,
    k: Option<Panels<F>>,
}

/// Scratch of one block pair: tiles of `BQ` rows of stride `BK`, as plain vectors so the
/// products read and write them as slices.
struct Scratch<F> {
    /// P = exp(S − L).
    p: Vec<F>,
    /// dP = dO Vᵀ, then dS = P ∘ (dP − D).
    ds: Vec<F>,
    /// Products before they are added to the f64 sums (rows of stride `ldp`).
    prod: Vec<F>,
    ldp: usize,
}

impl<F: Real> Scratch<F> {
    fn new(d: usize, p: usize) -> Self {
        // Product columns padded to whole panels (16 in f32, 8 in f64).
        let ldp = d.max(p).div_ceil(16) * 16;
        Scratch { p: vec![F::zero(); BQ * BK], ds: vec![F::zero(); BQ * BK], prod: vec![F::zero(); BQ.max(BK) * ldp], ldp }
    }
}

/// P and dS of the block pair (queries [t0, t1), keys [s0, s1)) into `sc`, and the decay's
/// gradient Σ dS·(−|t − s|) over it; `None` when the block holds no weight.
#[inline(always)]
fn grad_tile<F: Real, const FMA: bool>(cx: &Bwd<'_, '_, F>, b: usize, t0: usize, t1: usize, s0: usize, s1: usize, sc: &mut Scratch<F>) -> Option<f64> {
    let (nq, nk) = (t1 - t0, s1 - s0);
    if cx.pos.masked_out(b, t0, t1, s0, s1) {
        return None;
    }
    let (t, d, pw) = (cx.seq.q.dim().1, cx.seq.q.dim().2, cx.seq.v.dim().2);
    let q = cx.q.rows(b * t..(b + 1) * t).as_slice();
    logits(&q[t0 * d..], &cx.keys[b], cx.scale, cx.pos, t, t0..t1, s0..s1, &mut sc.p);
    cx.pos.apply::<F, true>(&mut sc.p, nq, nk, b, t0, s0);
    let mut any = false;
    for (r, row) in sc.p.chunks_exact_mut(BK).take(nq).enumerate() {
        let row = &mut row[..nk];
        let l = cx.lse[(b, t0 + r)];
        if l == F::neg_infinity() || lanes::max(row).f64() - l.f64() < F::EXP_UNDERFLOW {
            row.fill(F::zero());
            continue;
        }
        lanes::exp_sum::<F, FMA>(row, l);
        any = true;
    }
    if !any {
        return None;
    }
    if pw > 0 {
        let d_out = cx.d_out_rows.rows(b * t..(b + 1) * t).as_slice();
        logits(&d_out[t0 * pw..], &cx.values[b], F::one(), cx.pos, t, t0..t1, s0..s1, &mut sc.ds);
    }
    // dS within each row's band (dP was not computed outside it), zero elsewhere.
    let (p, ds) = (&sc.p, &mut sc.ds);
    // The decay's gradient is wanted at λ = 0 too (where the forward pass skips the factor).
    let lam = cx.pos.decay.is_some();
    let mut g = 0.0;
    for_groups(t0..t1, s0..s1, |a, e| cx.pos.key_band(a, e, t), |r0, n, band| {
        let (lo, hi) = (band.start - s0, band.end - s0);
        for r in r0..r0 + n {
            let dt = F::of(cx.delta[(b, t0 + r)]);
            let (dr, pr) = (&mut ds[r * BK..r * BK + nk], &p[r * BK..r * BK + nk]);
            dr[..lo].fill(F::zero());
            dr[hi..].fill(F::zero());
            for (x, &pp) in dr[lo..hi].iter_mut().zip(&pr[lo..hi]) {
                let dp = if pw > 0 { *x } else { F::zero() };
                *x = pp * (dp - dt);
            }
            if lam {
                let t = t0 + r;
                g -= dr[lo..hi].iter().enumerate().map(|(c, x)| x.f64() * t.abs_diff(band.start + c) as f64).sum::<f64>();
            }
        }
    });
    Some(g)
}

/// acc += the first rows × columns of `prod` (row stride `ldp`).
fn add_into<F: Real>(mut acc: ndarray::ArrayViewMut2<f64>, prod: &[F], ldp: usize) {
    for (mut a, x) in acc.rows_mut().into_iter().zip(prod.chunks_exact(ldp)) {
        a.iter_mut().zip(x).for_each(|(a, &x)| *a += x.f64());
    }
}

/// prod[r · ldp + j] = Σ_c T[r][c] · x_(j, c) (T·X) for the tile T (row stride `BK`) of the
/// queries `queries` × keys `keys`, query group by query group over the keys of its band: T
/// is zero outside it.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn queries_times<F: Real>(tile: &[F], pos: &Position, t: usize, queries: Range<usize>, keys: Range<usize>, x: &Panels<F>, prod: &mut [F], ldp: usize) {
    let panels = 0..x.padded_rows() / x.width();
    for_groups(queries, keys.clone(), |a, e| pos.key_band(a, e, t), |g, n, band| {
        // An empty band may start past the tile's last entry; nothing of `a` is read then
        // (`products` writes the group's zero rows).
        let a = tile.get(g * BK + band.start - keys.start..).unwrap_or(&[]);
        products(a, Layout::Rows(BK), n, x, panels.clone(), band, F::one(), &mut prod[g * ldp..], ldp);
    });
}

/// prod[c · ldp + j] = Σ_r T[r][c] · x_(j, r) (Tᵀ·X, the tile read transposed in place), key
/// group by key group over the queries of its band.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn keys_times<F: Real>(tile: &[F], pos: &Position, t: usize, queries: Range<usize>, keys: Range<usize>, x: &Panels<F>, prod: &mut [F], ldp: usize) {
    let panels = 0..x.padded_rows() / x.width();
    for_groups(keys, queries.clone(), |a, e| pos.query_band(a, e, t), |g, n, band| {
        let a = tile.get((band.start - queries.start) * BK + g..).unwrap_or(&[]);
        products(a, Layout::Columns(BK), n, x, panels.clone(), band, F::one(), &mut prod[g * ldp..], ldp);
    });
}

fn write_scaled<F: Real>(out: &mut ArrayViewMut2<F>, acc: &Array2<f64>, scale: f64) {
    out.zip_mut_with(acc, |o, &a| *o = F::of(a * scale));
}

/// dK, dV of one key block, over the query blocks of its band in order; with `dq_acc`, also
/// adds this block's share of dQ. Returns the block's share of the decay's gradient.
fn key_block<F: Real>(
    cx: &Bwd<'_, '_, F>, b: usize, s0: usize, dk: ArrayViewMut2<F>, dv: ArrayViewMut2<F>, tr: &Transposed<F>, dq_acc: Option<&mut Array2<f64>>,
) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports the features the function is compiled for.
            return unsafe { key_block_avx2(cx, b, s0, dk, dv, tr, dq_acc) };
        }
    }
    key_block_with::<F, false>(cx, b, s0, dk, dv, tr, dq_acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn key_block_avx2<F: Real>(
    cx: &Bwd<'_, '_, F>, b: usize, s0: usize, dk: ArrayViewMut2<F>, dv: ArrayViewMut2<F>, tr: &Transposed<F>, dq_acc: Option<&mut Array2<f64>>,
) -> f64 {
    key_block_with::<F, true>(cx, b, s0, dk, dv, tr, dq_acc)
}

#[inline(always)]
fn key_block_with<F: Real, const FMA: bool>(
    cx: &Bwd<'_, '_, F>, b: usize, s0: usize, mut dk: ArrayViewMut2<F>, mut dv: ArrayViewMut2<F>, tr: &Transposed<F>, mut dq_acc: Option<&mut Array2<f64>>,
) -> f64 {
    let t = cx.seq.q.dim().1;
    let (d, p) = (dk.ncols(), dv.ncols());
    let s1 = s0 + dk.nrows();
    let nk = s1 - s0;
    let mut sc = Scratch::new(d, p);
    let (mut dk_acc, mut dv_acc) = (Array2::<f64>::zeros((nk, d)), Array2::<f64>::zeros((nk, p)));
    let (lo, hi) = cx.pos.query_band(s0, s1, t);
    let mut g = 0.0;
    for t0 in block_starts(lo, hi, BQ) {
        let t1 = (t0 + BQ).min(t);
        let Some(gl) = grad_tile::<F, FMA>(cx, b, t0, t1, s0, s1, &mut sc) else { continue };
        g += gl;
        let (p_tile, ds_tile, ldp) = (&sc.p, &sc.ds, sc.ldp);
        if p > 0 {
            keys_times(p_tile, cx.pos, t, t0..t1, s0..s1, &tr.d_out, &mut sc.prod, ldp);
            add_into(dv_acc.view_mut(), &sc.prod, ldp);
        }
        keys_times(ds_tile, cx.pos, t, t0..t1, s0..s1, &tr.q, &mut sc.prod, ldp);
        add_into(dk_acc.view_mut(), &sc.prod, ldp);
        if let Some(dq) = dq_acc.as_deref_mut() {
            queries_times(ds_tile, cx.pos, t, t0..t1, s0..s1, tr.k.as_ref().expect("Kᵀ packed with dQ"), &mut sc.prod, ldp);
            add_into(dq.slice_mut(s![t0..t1, ..]), &sc.prod, ldp);
        }
    }
    write_scaled(&mut dk, &dk_acc, cx.scale.f64());
    write_scaled(&mut dv, &dv_acc, 1.0);
    g
}

/// dQ of one query block, over the key blocks of its band in order (`kt`: the sequence's Kᵀ).
fn query_block<F: Real>(cx: &Bwd<'_, '_, F>, b: usize, t0: usize, dq: ArrayViewMut2<F>, kt: &Panels<F>) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports the features the function is compiled for.
            return unsafe { query_block_avx2(cx, b, t0, dq, kt) };
        }
    }
    query_block_with::<F, false>(cx, b, t0, dq, kt)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn query_block_avx2<F: Real>(cx: &Bwd<'_, '_, F>, b: usize, t0: usize, dq: ArrayViewMut2<F>, kt: &Panels<F>) {
    query_block_with::<F, true>(cx, b, t0, dq, kt)
}

#[inline(always)]
fn query_block_with<F: Real, const FMA: bool>(cx: &Bwd<'_, '_, F>, b: usize, t0: usize, mut dq: ArrayViewMut2<F>, kt: &Panels<F>) {
    let t = cx.seq.q.dim().1;
    let d = dq.ncols();
    let t1 = t0 + dq.nrows();
    let nq = t1 - t0;
    let mut sc = Scratch::new(d, cx.seq.v.dim().2);
    let mut acc = Array2::<f64>::zeros((nq, d));
    let (lo, hi) = cx.pos.key_band(t0, t1, t);
    for s0 in block_starts(lo, hi, BK) {
        let s1 = (s0 + BK).min(t);
        if grad_tile::<F, FMA>(cx, b, t0, t1, s0, s1, &mut sc).is_none() {
            continue;
        }
        queries_times(&sc.ds, cx.pos, t, t0..t1, s0..s1, kt, &mut sc.prod, sc.ldp);
        add_into(acc.view_mut(), &sc.prod, sc.ldp);
    }
    write_scaled(&mut dq, &acc, cx.scale.f64());
}

#[cfg(test)]
#[path = "temporal_tests.rs"]
mod tests;

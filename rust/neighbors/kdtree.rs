//! A kd-tree for any runtime dimension: points are reordered into contiguous leaves,
//! every node keeps its bounding box, and queries prune with the exact box distance.

use crate::distance::sq_euclidean;
use crate::error::{LocalizationError, Result};
use crate::real::Real;
use crate::parallel::Monitor;
use crate::memory;
use ndarray::{ArrayView1, ArrayView2};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

#[derive(Clone, Debug)]
struct Node {
    start: usize,
    end: usize,
    /// Children (node ids); `usize::MAX` for a leaf.
    left: usize,
    right: usize,
}

#[derive(Clone, Debug)]
pub struct KdTree<F> {
    d: usize,
    /// Points in tree order, row-major.
    points: Vec<F>,
    /// Original index of each point in tree order.
    index: Vec<usize>,
    nodes: Vec<Node>,
    /// Per node: lower corner then upper corner (2·d values).
    boxes: Vec<F>,
}

impl<F: Real> KdTree<F> {
    /// The tree over the rows of `x`; `Interrupted` if `mon` stops during the build.
    pub fn build(x: ArrayView2<F>, leaf_size: usize, mon: &Monitor) -> Result<Self> {
        let (n, d) = x.dim();
        if n == 0 {
            return Err(LocalizationError::EmptyInput { name: "X" });
        }
        if leaf_size == 0 {
            return Err(LocalizationError::param("leaf_size", "must be at least 1"));
        }
        let mut index = memory::try_collect("sample order", &[n], 0..n)?;
        let mut tree = KdTree { d, points: Vec::new(), index: Vec::new(), nodes: Vec::new(), boxes: Vec::new() };
        // Halving stops below leaf_size + 1 points, so every leaf holds at least half of that
        // and there are at most 2n / (leaf_size + 1) leaves, twice as many nodes: reserved
        // up front, so that a tree too large for memory is an error, not an abort.
        let nodes = 2 * (n / (leaf_size.div_ceil(2)).max(1) + 1);
        memory::try_grow(&mut tree.nodes, nodes, "k-d tree nodes")?;
        memory::try_grow(&mut tree.boxes, nodes.saturating_mul(2 * d), "k-d tree boxes")?;
        tree.split(&x, &mut index, 0, n, leaf_size, mon);
        mon.check()?;
        tree.points = memory::try_collect("X", &[n, d], index.iter().flat_map(|&i| x.row(i).into_iter().copied()))?;
        tree.index = index;
        Ok(tree)
    }

    pub fn n_samples(&self) -> usize {
        self.index.len()
    }

    pub fn dim(&self) -> usize {
        self.d
    }

    /// Original indices of the points, in tree order (leaves are contiguous ranges of it).
    pub fn order(&self) -> &[usize] {
        &self.index
    }

    fn split(&mut self, x: &ArrayView2<F>, idx: &mut [usize], start: usize, end: usize, leaf: usize, mon: &Monitor) -> usize {
        let (lo, hi) = bounds(x, &idx[start..end]);
        let id = self.nodes.len();
        self.nodes.push(Node { start, end, left: usize::MAX, right: usize::MAX });
        self.boxes.extend_from_slice(&lo);
        self.boxes.extend_from_slice(&hi);
        // A stopped build is thrown away by `build`.
        if end - start <= leaf || mon.stopped() || !split_widest(x, &mut idx[start..end], &lo, &hi, (end - start) / 2) {
            return id;
        }
        let mid = start + (end - start) / 2;
        let left = self.split(x, idx, start, mid, leaf, mon);
        let right = self.split(x, idx, mid, end, leaf, mon);
        self.nodes[id].left = left;
        self.nodes[id].right = right;
        id
    }

    #[inline]
    fn box_dist2(&self, node: usize, q: &[F]) -> F {
        let b = &self.boxes[2 * self.d * node..2 * self.d * (node + 1)];
        let (lo, hi) = b.split_at(self.d);
        let mut s = F::zero();
        for k in 0..self.d {
            let t = (lo[k] - q[k]).max(q[k] - hi[k]).max(F::zero());
            s = s + t * t;
        }
        s
    }

    /// Squared distance from q to the farthest corner of a node's box.
    #[inline]
    fn box_far_dist2(&self, node: usize, q: &[F]) -> F {
        let b = &self.boxes[2 * self.d * node..2 * self.d * (node + 1)];
        let (lo, hi) = b.split_at(self.d);
        let mut s = F::zero();
        for k in 0..self.d {
            let t = (lo[k] - q[k]).abs().max((q[k] - hi[k]).abs());
            s = s + t * t;
        }
        s
    }

    #[inline]
    fn point(&self, pos: usize) -> &[F] {
        &self.points[pos * self.d..(pos + 1) * self.d]
    }

    /// The first node of at most `size` points that a search for `q` enters (the nearer
    /// child at every node). Node ids follow the tree order, so queries sorted by it reach
    /// the subtrees in that order; the nodes above such subtrees are few and stay in cache.
    pub fn first_subtree(&self, q: &[F], size: usize) -> usize {
        let mut node = 0;
        loop {
            let n = &self.nodes[node];
            if n.left == usize::MAX || n.end - n.start <= size {
                return node;
            }
            node = if self.box_dist2(n.left, q) <= self.box_dist2(n.right, q) { n.left } else { n.right };
        }
    }

    /// The k nearest points (original indices, Euclidean distances), ascending, ties by index.
    pub fn knn(&self, q: &[F], k: usize) -> (Vec<usize>, Vec<F>) {
        // Max-heap of the best k so far by (d², index): O(log k) per candidate, for any k.
        let mut best: BinaryHeap<Candidate<F>> = BinaryHeap::with_capacity(k + 1);
        if k > 0 {
            self.knn_rec(0, q, k, &mut best);
        }
        best.into_sorted_vec().into_iter().map(|c| (c.index, c.d2.sqrt())).unzip()
    }

    fn knn_rec(&self, node: usize, q: &[F], k: usize, best: &mut BinaryHeap<Candidate<F>>) {
        let n = &self.nodes[node];
        if n.left == usize::MAX {
            for pos in n.start..n.end {
                let c = Candidate { d2: sq_euclidean(q, self.point(pos)), index: self.index[pos] };
                if best.len() < k {
                    best.push(c);
                } else if best.peek().is_some_and(|worst| c < *worst) {
                    best.pop();
                    best.push(c);
                }
            }
            return;
        }
        let (dl, dr) = (self.box_dist2(n.left, q), self.box_dist2(n.right, q));
        let order = if dl <= dr { [(n.left, dl), (n.right, dr)] } else { [(n.right, dr), (n.left, dl)] };
        for (child, dist) in order {
            if best.len() < k || best.peek().is_some_and(|worst| dist <= worst.d2) {
                self.knn_rec(child, q, k, best);
            }
        }
    }

    /// Call `f(tree position, d²)` for every point with d² ≤ r2, in tree order
    /// (deterministic, so sums accumulated in this order do not depend on threads).
    #[inline]
    pub fn visit_within(&self, q: &[F], r2: F, f: &mut impl FnMut(usize, F)) {
        let mut stack = vec![0usize];
        while let Some(node) = stack.pop() {
            if self.box_dist2(node, q) > r2 {
                continue;
            }
            let n = &self.nodes[node];
            if n.left == usize::MAX {
                for pos in n.start..n.end {
                    let d2 = sq_euclidean(q, self.point(pos));
                    if d2 <= r2 {
                        f(pos, d2);
                    }
                }
            } else {
                stack.push(n.right);
                stack.push(n.left);
            }
        }
    }
}

impl<F: Real> KdTree<F> {
    /// Per node, the largest of `values` (one per point, in tree order) over its points: the
    /// bound with which `nearest_admitted` skips whole nodes.
    pub fn node_max(&self, values: &[f64]) -> Vec<f64> {
        let mut maxes = vec![f64::NEG_INFINITY; self.nodes.len()];
        // Children are created after their parent, so a reverse sweep is bottom-up.
        for id in (0..self.nodes.len()).rev() {
            let nd = &self.nodes[id];
            maxes[id] = if nd.left == usize::MAX {
                values[nd.start..nd.end].iter().copied().fold(f64::NEG_INFINITY, f64::max)
            } else {
                maxes[nd.left].max(maxes[nd.right])
            };
        }
        maxes
    }

    /// The nearest point with d² ≤ r2 that `admit(tree position)` accepts, as (tree position,
    /// d²); distance ties go to the smaller original index. The caller promises that `admit`
    /// rejects every point whose value (of `maxes = node_max(values)`) is below `floor`, so
    /// nodes whose maximum is below it are never entered: a branch-and-bound 1-NN search that
    /// skips, besides the far nodes, the nodes holding no admissible point. The answer is the
    /// minimum of a total order, so it does not depend on the visiting order.
    pub fn nearest_admitted(&self, q: &[F], r2: F, maxes: &[f64], floor: f64, admit: &impl Fn(usize) -> bool) -> Option<(usize, F)> {
        let mut best: Option<(usize, F)> = None;
        self.nearest_rec(0, q, r2, maxes, floor, admit, &mut best);
        best
    }

    #[allow(clippy::too_many_arguments)]
    fn nearest_rec(&self, node: usize, q: &[F], r2: F, maxes: &[f64], floor: f64, admit: &impl Fn(usize) -> bool, best: &mut Option<(usize, F)>) {
        let n = &self.nodes[node];
        if n.left == usize::MAX {
            for pos in n.start..n.end {
                let d2 = sq_euclidean(q, self.point(pos));
                let better = match *best {
                    None => d2 <= r2,
                    Some((b, bd2)) => d2 < bd2 || (d2 == bd2 && self.index[pos] < self.index[b]),
                };
                if better && admit(pos) {
                    *best = Some((pos, d2));
                }
            }
            return;
        }
        let (dl, dr) = (self.box_dist2(n.left, q), self.box_dist2(n.right, q));
        let order = if dl <= dr { [(n.left, dl), (n.right, dr)] } else { [(n.right, dr), (n.left, dl)] };
        for (child, dist) in order {
            // Equal distances are entered: a tie with a smaller index may sit there.
            let reach = best.map_or(r2, |(_, bd2)| bd2);
            if dist <= reach && maxes[child] >= floor {
                self.nearest_rec(child, q, r2, maxes, floor, admit, best);
            }
        }
    }

    /// Call `f(tree position)` for every point inside the closed box [lo, hi], in tree order
    /// (deterministic, as `visit_within`).
    pub fn visit_box(&self, lo: &[F], hi: &[F], f: &mut impl FnMut(usize)) {
        let d = self.d;
        let mut stack = vec![0usize];
        while let Some(node) = stack.pop() {
            let b = &self.boxes[2 * d * node..2 * d * (node + 1)];
            let (blo, bhi) = b.split_at(d);
            if (0..d).any(|k| bhi[k] < lo[k] || blo[k] > hi[k]) {
                continue;
            }
            let n = &self.nodes[node];
            if (0..d).all(|k| lo[k] <= blo[k] && bhi[k] <= hi[k]) {
                (n.start..n.end).for_each(&mut *f);
            } else if n.left == usize::MAX {
                for pos in n.start..n.end {
                    let p = self.point(pos);
                    if (0..d).all(|k| lo[k] <= p[k] && p[k] <= hi[k]) {
                        f(pos);
                    }
                }
            } else {
                stack.push(n.right);
                stack.push(n.left);
            }
        }
    }
}

/// A k-NN candidate, ordered by (d², index) so that ties go to the smaller index.
#[derive(Clone, Copy)]
struct Candidate<F> {
    d2: F,
    index: usize,
}

impl<F: Real> PartialEq for Candidate<F> {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl<F: Real> Eq for Candidate<F> {}
impl<F: Real> PartialOrd for Candidate<F> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<F: Real> Ord for Candidate<F> {
    fn cmp(&self, o: &Self) -> Ordering {
        // Distances are never NaN (inputs are validated); Equal keeps the order total anyway.
        self.d2.partial_cmp(&o.d2).unwrap_or(Ordering::Equal).then(self.index.cmp(&o.index))
    }
}

/// Lower and upper corners of the box around the rows `idx` of `x`.
fn bounds<F: Real>(x: &ArrayView2<F>, idx: &[usize]) -> (Vec<F>, Vec<F>) {
    let d = x.ncols();
    let mut lo = vec![F::infinity(); d];
    let mut hi = vec![F::neg_infinity(); d];
    for &i in idx {
        for k in 0..d {
            let v = x[(i, k)];
            lo[k] = lo[k].min(v);
            hi[k] = hi[k].max(v);
        }
    }
    (lo, hi)
}

/// Partition `idx` so that its first `mid` rows come first along the widest dimension of the
/// box (lo, hi), ties by index. False, and untouched, when the box is a single point.
fn split_widest<F: Real>(x: &ArrayView2<F>, idx: &mut [usize], lo: &[F], hi: &[F], mid: usize) -> bool {
    let (dim, spread) = (0..lo.len()).map(|k| (k, hi[k] - lo[k])).fold((0, F::zero()), |a, b| if b.1 > a.1 { b } else { a });
    if spread <= F::zero() || mid == 0 || mid >= idx.len() {
        return false;
    }
    idx.select_nth_unstable_by(mid, |&a, &b| x[(a, dim)].partial_cmp(&x[(b, dim)]).unwrap_or(Ordering::Equal).then(a.cmp(&b)));
    true
}

/// An order of the rows of `x` whose consecutive runs of `chunk` rows are the leaves of a
/// median kd split, so each run fills a compact box: the layout that lets the engine skip
/// whole tiles of references (and blocks of queries) by their bounding boxes.
/// `Interrupted` if `mon` stops meanwhile.
pub fn chunked_order<F: Real>(x: ArrayView2<F>, chunk: usize, mon: &Monitor) -> Result<Vec<usize>> {
    fn rec<F: Real>(x: &ArrayView2<F>, idx: &mut [usize], chunk: usize, mon: &Monitor) {
        if idx.len() <= chunk || mon.stopped() {
            return;
        }
        let (lo, hi) = bounds(x, idx);
        let mid = idx.len().div_ceil(chunk) / 2 * chunk;
        if split_widest(x, idx, &lo, &hi, mid) {
            let (a, b) = idx.split_at_mut(mid);
            rec(x, a, chunk, mon);
            rec(x, b, chunk, mon);
        }
    }
    let mut idx = memory::try_collect("sample order", &[x.nrows()], 0..x.nrows())?;
    rec(&x, &mut idx, chunk.max(1), mon);
    mon.check()?;
    Ok(idx)
}

/// An order of the rows of `x` whose consecutive runs (`starts[k]..starts[k + 1]`) are the
/// leaves of a median kd split that stops once a box's half-diagonal is at most `radius`
/// and it holds at most `max_size` rows (or all its rows coincide). `Interrupted` if `mon`
/// stops meanwhile.
pub fn radius_leaves<F: Real>(x: ArrayView2<F>, radius: F, max_size: usize, mon: &Monitor) -> Result<(Vec<usize>, Vec<usize>)> {
    fn rec<F: Real>(x: &ArrayView2<F>, idx: &mut [usize], at: usize, r2: F, max_size: usize, starts: &mut Vec<usize>, mon: &Monitor) {
        let (lo, hi) = bounds(x, idx);
        let half_diag2 = lo.iter().zip(&hi).fold(F::zero(), |s, (&a, &b)| s + (b - a) * (b - a)) * F::of(0.25);
        let mid = idx.len() / 2;
        if (half_diag2 > r2 || idx.len() > max_size) && !mon.stopped() && split_widest(x, idx, &lo, &hi, mid) {
            let (a, b) = idx.split_at_mut(mid);
            rec(x, a, at, r2, max_size, starts, mon);
            rec(x, b, at + mid, r2, max_size, starts, mon);
        } else {
            starts.push(at);
        }
    }
    let mut idx = memory::try_collect("sample order", &[x.nrows()], 0..x.nrows())?;
    let mut starts = Vec::new();
    if !idx.is_empty() {
        rec(&x, &mut idx, 0, radius * radius, max_size.max(1), &mut starts, mon);
    }
    mon.check()?;
    starts.push(idx.len());
    Ok((idx, starts))
}

/// A kd-tree whose nodes also carry their total weight and weighted coordinate sum, so a
/// flat (closed-ball) window adds every node lying wholly inside the ball at once and visits
/// points only near its boundary: Σ w and Σ w x over a ball in far less than O(n).
pub struct BallSums<F> {
    tree: KdTree<F>,
    weights: Vec<F>,
    /// Per node: Σ w, then Σ w x (1 + d values).
    sums: Vec<f64>,
}

impl<F: Real> BallSums<F> {
    pub fn build(x: ArrayView2<F>, w: Option<ArrayView1<F>>, leaf_size: usize, mon: &Monitor) -> Result<Self> {
        let tree = KdTree::build(x, leaf_size, mon)?;
        let d = tree.d;
        let weights: Vec<F> = tree.index.iter().map(|&i| w.map_or(F::one(), |w| w[i])).collect();
        // Children are created after their parent, so a reverse sweep is bottom-up.
        let mut sums = vec![0.0; tree.nodes.len() * (d + 1)];
        for id in (0..tree.nodes.len()).rev() {
            let nd = &tree.nodes[id];
            let mut acc = vec![0.0f64; d + 1];
            if nd.left == usize::MAX {
                for pos in nd.start..nd.end {
                    let wv = weights[pos].f64();
                    acc[0] += wv;
                    for (a, &v) in acc[1..].iter_mut().zip(tree.point(pos)) {
                        *a += wv * v.f64();
                    }
                }
            } else {
                for c in [nd.left, nd.right] {
                    for k in 0..=d {
                        acc[k] += sums[c * (d + 1) + k];
                    }
                }
            }
            sums[id * (d + 1)..(id + 1) * (d + 1)].copy_from_slice(&acc);
        }
        Ok(BallSums { tree, weights, sums })
    }

    /// Σ w (returned) and Σ w x (added into `num`) over the closed ball ‖x − q‖² ≤ r2,
    /// in a fixed order.
    pub fn ball_sums(&self, q: &[F], r2: F, num: &mut [f64]) -> f64 {
        let t = &self.tree;
        let d = t.d;
        let mut den = 0.0;
        let mut stack = vec![0usize];
        while let Some(id) = stack.pop() {
            if t.box_dist2(id, q) > r2 {
                continue;
            }
            let nd = &t.nodes[id];
            if t.box_far_dist2(id, q) <= r2 {
                let s = &self.sums[id * (d + 1)..(id + 1) * (d + 1)];
                den += s[0];
                for k in 0..d {
                    num[k] += s[1 + k];
                }
            } else if nd.left == usize::MAX {
                for pos in nd.start..nd.end {
                    let p = t.point(pos);
                    if sq_euclidean(q, p) <= r2 {
                        let wv = self.weights[pos].f64();
                        den += wv;
                        for k in 0..d {
                            num[k] += wv * p[k].f64();
                        }
                    }
                }
            } else {
                stack.push(nd.right);
                stack.push(nd.left);
            }
        }
        den
    }
}

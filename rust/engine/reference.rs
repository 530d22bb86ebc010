//! A prepared reference: the sample side of local-sum requests, checked and laid out once and
//! reused by every later request (a fitted estimator's predictions, the iterations of a method
//! whose references do not move).
//!
//! Besides its pairs, a request over n references pays O(n) to O(n log n) for work that
//! depends on the references alone: the exact rescaling into the floating range, the checks
//! of weights and per-sample bandwidths, the spatial order and boxes of the brute-force tiles,
//! the kd-tree of compact kernels and the neighbour index of the kNN kernel. A `Reference`
//! does the O(n) part when it is built and each path's layout the first time that path runs
//! (`Prepared`), so a request of m queries then costs what its pairs cost. Results are
//! bit-identical to the same request on the raw arrays: the same code runs on the same data.
//!
//! Immutable once built; the layouts are `OnceLock`s, so concurrent requests share them (two
//! requests racing to build one layout both build it, and one copy is kept).

use super::tiles::{TileValues, Tiles};
use super::types::{Bandwidth, Kernel, LocalSums, Options, Problem};
use super::{restore_magnitudes, sums_in_range, to_caller_units};
use crate::checked::{self, Weights};
use crate::distance::Scale;
use crate::error::{LocalizationError, Result};
use crate::memory;
use crate::neighbors::{Algorithm, Index, KdTree, LEAF_SIZE};
use crate::parallel::Monitor;
use crate::real::Real;
use ndarray::{Array1, Array2, ArrayView1, ArrayView2};
use super::hermite::FarField;
use std::borrow::Cow;
use std::sync::{Arc, Mutex, OnceLock};

/// The references and weights in the working units of one length scale: the exact powers of
/// two that bring the coordinates and the weights into the middle of the floating range, and
/// the scaled copies when one of them is not one.
pub(super) struct Working<F> {
    pub lengths: Scale,
    weight_scale: Scale,
    /// (x, weights) scaled; None when both scales are one (the caller's arrays serve).
    scaled: Option<(Array2<F>, Option<Array1<F>>)>,
}

/// Value columns in working units: the power of two per column that brings it into the
/// middle of the floating range, and the scaled copy when one of them is not one.
pub(super) struct WorkingValues<F> {
    scales: Vec<Scale>,
    scaled: Option<Array2<F>>,
}

impl<F: Real> WorkingValues<F> {
    pub fn new(values: Option<ArrayView2<F>>) -> Self {
        let scales: Vec<Scale> = values.map_or_else(Vec::new, |v| {
            // Column maxima row by row (the rows are contiguous).
            let mut top = vec![F::zero(); v.ncols()];
            for row in v.rows() {
                top.iter_mut().zip(row).for_each(|(t, &a)| *t = if a.abs() > *t { a.abs() } else { *t });
            }
            top.into_iter().map(|t| Scale::for_max::<F>(t.f64())).collect()
        });
        let scaled = values.filter(|_| !scales.iter().all(|s| s.is_one())).map(|v| {
            let mut v = v.to_owned();
            for (mut c, s) in v.columns_mut().into_iter().zip(&scales) {
                c.mapv_inplace(|a| s.down(a));
            }
            v
        });
        WorkingValues { scales, scaled }
    }
}

impl<F: Real> Working<F> {
    pub fn new(x: ArrayView2<F>, weights: Option<ArrayView1<F>>, lengths: Scale) -> Result<Self> {
        let weight_scale = weights.map_or(Scale::ONE, |w| Scale::of_values(w.iter().copied()));
        let scaled = if lengths.is_one() && weight_scale.is_one() {
            None
        } else {
            Some((lengths.down_array(x)?.into_owned(), weights.map(|w| w.mapv(|v| weight_scale.down(v)))))
        };
        Ok(Working { lengths, weight_scale, scaled })
    }

    /// The sums of `pb` (caller units; its references and weights those this was made for,
    /// its values those `values` was made for), in working length units. `same`: the queries
    /// are the references (the expansion then clusters them once). `prep`: layouts prepared
    /// for this working problem.
    pub fn sums(&self, pb: &Problem<F>, values: &WorkingValues<F>, same: bool, kernel: &Kernel, bw: &Bandwidth<F>, opts: &Options, prep: Option<Prep<'_, F>>) -> Result<LocalSums<F>> {
        if self.scaled.is_none() && values.scaled.is_none() {
            return sums_in_range(pb, kernel, bw, opts, prep);
        }
        let (x, w) = match &self.scaled {
            Some((x, w)) => (x.view(), w.as_ref().map(|w| w.view())),
            None => (pb.x, pb.weights),
        };
        let q = (!same && self.scaled.is_some()).then(|| self.lengths.down_array(pb.queries)).transpose()?;
        let queries = if same { x } else { q.as_ref().map_or(pb.queries, |q| q.view()) };
        let spb = Problem { queries, x, values: values.scaled.as_ref().map_or(pb.values, |v| Some(v.view())), weights: w };
        let mut sums = sums_in_range(&spb, kernel, &bw.scaled(self.lengths), opts, prep)?;
        restore_magnitudes(&mut sums, self.weight_scale, &values.scales);
        Ok(sums)
    }
}

/// The layouts of one working problem that the engine's paths build from the references
/// alone, each built the first time its path runs, and those of the reference's own values.
pub(super) struct Prepared<F: Real> {
    /// Brute-force tiles, one per layout (spatial order, feature-major coordinates, centred rows).
    tiles: [OnceLock<Tiles<F>>; 8],
    /// The reference's own values in the tiles' order, without and with the spatial order
    /// (the only one of the tiles' flags that moves the references).
    tile_values: [OnceLock<TileValues<F>>; 2],
    tree: OnceLock<KdTree<F>>,
    /// The tree-ordered weights and 1/h² that the kd-tree path streams.
    tree_order: OnceLock<TreeOrdered<F>>,
    /// The reference's own values in the order of the kd-tree.
    tree_values: OnceLock<Vec<F>>,
    index: OnceLock<Index<F>>,
    /// Far-field Hermite moments of the Gaussian by bandwidth (the bits of h in working units;
    /// None: clusters too small to pay), the `FAR_FIELDS` most recently built.
    far: Mutex<Vec<(u64, Option<Arc<FarField>>)>>,
}

/// Bandwidths whose far fields a reference keeps (each O(clusters · terms), at most a few
/// times the references' own size: see `FarField`).
const FAR_FIELDS: usize = 4;

/// What `tree_sums` reads in the order of the kd-tree, besides the values.
pub(super) struct TreeOrdered<F> {
    pub weights: Vec<F>,
    pub inv_h2: Option<Vec<F>>,
}

/// The value in `cell`, built by `build` if there is none yet (a failed build, e.g. an
/// interrupted one, leaves the cell empty).
fn cached<T>(cell: &OnceLock<T>, build: impl FnOnce() -> Result<T>) -> Result<&T> {
    if let Some(v) = cell.get() {
        return Ok(v);
    }
    let v = build()?;
    Ok(cell.get_or_init(|| v))
}

/// A value kept in `cell` when `keep`, else built for this request alone.
fn kept_or_built<T>(cell: &OnceLock<T>, keep: bool, build: impl FnOnce() -> Result<T>) -> Result<Cow<'_, T>>
where
    T: Clone,
{
    Ok(if keep { Cow::Borrowed(cached(cell, build)?) } else { Cow::Owned(build()?) })
}

impl<F: Real> Prepared<F> {
    fn new() -> Self {
        Prepared {
            tiles: Default::default(),
            tile_values: Default::default(),
            tree: OnceLock::new(),
            tree_order: OnceLock::new(),
            tree_values: OnceLock::new(),
            index: OnceLock::new(),
            far: Mutex::new(Vec::new()),
        }
    }
}

/// The prepared layouts as one request uses them: those of the references always, those of
/// the values only when the request's values are the reference's own (values given per call
/// are laid out for that call).
#[derive(Clone, Copy)]
pub(super) struct Prep<'a, F: Real> {
    layouts: &'a Prepared<F>,
    own_values: bool,
}

impl<'a, F: Real> Prep<'a, F> {
    pub fn tiles(self, pb: &Problem<F>, bw: &Bandwidth<F>, spatial: bool, coords: bool, centre: bool, mon: &Monitor) -> Result<&'a Tiles<F>> {
        let slot = spatial as usize | (coords as usize) << 1 | (centre as usize) << 2;
        cached(&self.layouts.tiles[slot], || Tiles::new(pb, bw, spatial, coords, centre, mon))
    }

    /// `pb`'s values in the order of `tiles` (one of this reference's, with `spatial`).
    pub fn tile_values(self, tiles: &Tiles<F>, pb: &Problem<F>, spatial: bool) -> Result<Cow<'a, TileValues<F>>> {
        kept_or_built(&self.layouts.tile_values[spatial as usize], self.own_values, || tiles.lay_out(pb.values))
    }

    pub fn tree(self, x: ArrayView2<F>, mon: &Monitor) -> Result<&'a KdTree<F>> {
        cached(&self.layouts.tree, || KdTree::build(x, LEAF_SIZE, mon))
    }

    pub fn tree_order(self, build: impl FnOnce() -> TreeOrdered<F>) -> &'a TreeOrdered<F> {
        self.layouts.tree_order.get_or_init(build)
    }

    /// `pb`'s values (row-major) in the order of the kd-tree, built by `build`.
    pub fn tree_values(self, build: impl FnOnce() -> Result<Vec<F>>) -> Result<Cow<'a, Vec<F>>> {
        kept_or_built(&self.layouts.tree_values, self.own_values, build)
    }

    pub fn index(self, x: ArrayView2<F>, mon: &Monitor) -> Result<&'a Index<F>> {
        cached(&self.layouts.index, || Index::build(x, Algorithm::Auto, LEAF_SIZE, mon))
    }

    /// The far field of the Gaussian at bandwidth `h` (built without holding the lock; two
    /// requests racing to build one both build it and one copy is kept), or None when it does
    /// not pay. The oldest is dropped beyond `FAR_FIELDS` bandwidths. It holds the values'
    /// moments: built for the call alone when they are not the reference's own.
    pub fn far_field(self, pb: &Problem<F>, h: F, mon: &Monitor) -> Result<Option<Arc<FarField>>> {
        let build = || -> Result<Option<Arc<FarField>>> {
            let built = FarField::new(pb.x, pb.weights, pb.values, h, mon).map(Arc::new);
            mon.check()?;
            Ok(built)
        };
        if !self.own_values {
            return build();
        }
        let key = h.f64().to_bits();
        let lock = || self.layouts.far.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, f)) = lock().iter().find(|(k, _)| *k == key) {
            return Ok(f.clone());
        }
        let built = build()?;
        let mut far = lock();
        if let Some((_, f)) = far.iter().find(|(k, _)| *k == key) {
            return Ok(f.clone());
        }
        if far.len() == FAR_FIELDS {
            far.remove(0);
        }
        far.push((key, built.clone()));
        Ok(built)
    }
}

/// Samples, their values, weights and per-sample bandwidths, checked once, with the layouts
/// the engine's paths build from them kept for every later request.
pub struct Reference<F: Real> {
    x: Array2<F>,
    values: Option<Array2<F>>,
    weights: Option<Array1<F>>,
    /// Per-sample bandwidths (sample-point estimators).
    bandwidth: Option<Bandwidth<F>>,
    /// The largest |coordinate|: with the queries' it gives a request's length scale.
    x_max_abs: f64,
    /// For the length scale of the samples alone (that of every request whose queries do not
    /// reach beyond them by orders of magnitude).
    working: Working<F>,
    own_values: WorkingValues<F>,
    prepared: Prepared<F>,
}

impl<F: Real> Reference<F> {
    /// Check and keep the reference side of later requests. `values` (n×p) are what the sums
    /// average (None: the sums of the kernel weights alone); `bandwidth`: one h per sample.
    pub fn new(x: Array2<F>, values: Option<Array2<F>>, weights: Option<Array1<F>>, bandwidth: Option<Vec<F>>) -> Result<Self> {
        let n = x.nrows();
        if n == 0 {
            return Err(LocalizationError::EmptyInput { name: "X" });
        }
        checked::finite("X", &x)?;
        if let Some(v) = &values {
            if v.nrows() != n {
                return Err(LocalizationError::shape("values", format!("{n} rows"), format!("{} rows", v.nrows())));
            }
            checked::finite("values", v)?;
        }
        Weights::optional(weights.as_ref().map(|w| w.view()), n)?;
        // Owned arrays in standard layout (rows are read as slices).
        let standard = |name, a: Array2<F>| if a.is_standard_layout() { Ok(a) } else { memory::try_copy(name, a.view()) };
        let x = standard("X", x)?;
        let values = values.map(|v| standard("values", v)).transpose()?;
        let x_max_abs = Scale::array_max_abs(x.view());
        let working = Working::new(x.view(), weights.as_ref().map(|w| w.view()), Scale::for_max::<F>(x_max_abs))?;
        let own_values = WorkingValues::new(values.as_ref().map(|v| v.view()));
        if let Some(h) = &bandwidth {
            if h.len() != n {
                return Err(LocalizationError::shape("bandwidth", format!("{n} per-sample values"), h.len()));
            }
            // As `validate` checks them in working units, once.
            let l = working.lengths;
            if !h.iter().all(|&h| h.is_finite() && checked::resolvable(l.down(h))) {
                return Err(LocalizationError::param("bandwidth", "per-sample bandwidths must be finite, strictly positive and not too small against the coordinates"));
            }
        }
        Ok(Reference { x, values, weights, bandwidth: bandwidth.map(Bandwidth::PerReference), x_max_abs, working, own_values, prepared: Prepared::new() })
    }

    pub fn x(&self) -> ArrayView2<'_, F> {
        self.x.view()
    }

    pub fn values(&self) -> Option<ArrayView2<'_, F>> {
        self.values.as_ref().map(|v| v.view())
    }

    pub fn weights(&self) -> Option<ArrayView1<'_, F>> {
        self.weights.as_ref().map(|w| w.view())
    }

    pub fn sample_bandwidth(&self) -> Option<&[F]> {
        match &self.bandwidth {
            Some(Bandwidth::PerReference(h)) => Some(h),
            _ => None,
        }
    }

    /// `engine::local_sums` of these references for `queries`, with a scalar or per-query
    /// bandwidth (per-sample ones are the reference's own). `values`: given for this call
    /// alone (n×p, in the samples' order; the reference must have none of its own), or None
    /// for the reference's own. Values given per call are laid out for the call (O(n·p)), the
    /// rest of what is prepared is reused: the iterations of a method whose samples stay and
    /// whose values move (label propagation, a fixed-kernel diffusion) pay for their pairs
    /// alone, with the sums of a reference built with those values, bit for bit.
    pub fn local_sums(&self, queries: ArrayView2<F>, values: Option<ArrayView2<F>>, kernel: &Kernel, bw: &Bandwidth<F>, opts: &Options) -> Result<LocalSums<F>> {
        let (sums, lengths) = self.local_sums_scaled(queries, values, kernel, bw, opts)?;
        to_caller_units(sums, lengths, self.x.ncols(), opts.degree)
    }

    /// `engine::local_sums_scaled` of these references.
    pub(crate) fn local_sums_scaled(
        &self, queries: ArrayView2<F>, values: Option<ArrayView2<F>>, kernel: &Kernel, bw: &Bandwidth<F>, opts: &Options,
    ) -> Result<(LocalSums<F>, Scale)> {
        let bw = match (bw, &self.bandwidth) {
            (Bandwidth::PerReference(_), _) => {
                return Err(LocalizationError::param("bandwidth", "per-sample bandwidths are given when the Reference is built"))
            }
            (Bandwidth::PerQuery(_), Some(_)) => {
                return Err(LocalizationError::param("bandwidth", "a Reference with per-sample bandwidths takes no per-query ones"))
            }
            (Bandwidth::Scalar(_), Some(own)) => own,
            (bw, None) => bw,
        };
        if let Some(v) = &values {
            if self.values.is_some() {
                return Err(LocalizationError::param("values", "this Reference holds its own values: build it without values to give them per call"));
            }
            if v.nrows() != self.x.nrows() {
                return Err(LocalizationError::shape("values", format!("{} rows", self.x.nrows()), format!("{} rows", v.nrows())));
            }
            checked::finite("values", v)?;
        }
        // Rows are read as slices.
        let call_values = values.as_ref().map(|v| v.as_standard_layout());
        // Queries equal to the samples are the samples (fitted values, leave-one-out): the
        // raw path sees them as one array too.
        let same = queries.dim() == self.x.dim() && queries == self.x;
        let values = call_values.as_ref().map_or(self.values(), |v| Some(v.view()));
        let pb = Problem { queries: if same { self.x.view() } else { queries }, x: self.x.view(), values, weights: self.weights() };
        if !pb.queries.is_standard_layout() {
            return Err(LocalizationError::param("X", "queries and samples must be C-contiguous (row-major)"));
        }
        let lengths = super::lengths_for(kernel, self.x_max_abs.max(Scale::array_max_abs(pb.queries)), bw);
        let fresh;
        let working_values = match &call_values {
            Some(v) => {
                fresh = WorkingValues::new(Some(v.view()));
                &fresh
            }
            None => &self.own_values,
        };
        let sums = if lengths == self.working.lengths {
            let prep = Prep { layouts: &self.prepared, own_values: call_values.is_none() };
            self.working.sums(&pb, working_values, same, kernel, bw, opts, Some(prep))?
        } else {
            // Queries of another order of magnitude (or the dot kernel on rescaled samples):
            // the working problem differs, so nothing prepared applies.
            Working::new(pb.x, pb.weights, lengths)?.sums(&pb, working_values, same, kernel, bw, opts, None)?
        };
        Ok((sums, lengths))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{local_sums, Neighborhood};
    use super::*;
    use crate::kernel::Profile;
    use crate::parallel::install;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// The layouts of `r` for requests of its own values.
    fn own<F: Real>(r: &Reference<F>) -> Prep<'_, F> {
        Prep { layouts: &r.prepared, own_values: true }
    }

    fn rand_mat<F: Real>(rng: &mut StdRng, n: usize, d: usize, scale: f64) -> Array2<F> {
        Array2::from_shape_fn((n, d), |_| F::of((rng.random::<f64>() * 2.0 - 1.0) * scale))
    }

    fn assert_identical<F: Real>(a: &LocalSums<F>, b: &LocalSums<F>, what: &str) {
        let bits = |v: &[F]| v.iter().map(|x| x.f64().to_bits()).collect::<Vec<_>>();
        let same = |x: Option<&[F]>, y: Option<&[F]>| x.map(bits) == y.map(bits);
        assert!(same(a.num.as_slice(), b.num.as_slice()), "{what}: num");
        assert!(same(a.den.as_slice(), b.den.as_slice()), "{what}: den");
        assert!(same(a.log_scale.as_slice(), b.log_scale.as_slice()), "{what}: log_scale");
        assert!(same(a.moments.as_ref().and_then(|m| m.as_slice()), b.moments.as_ref().and_then(|m| m.as_slice())), "{what}: moments");
        assert!(same(a.cross.as_ref().and_then(|m| m.as_slice()), b.cross.as_ref().and_then(|m| m.as_slice())), "{what}: cross");
    }

    /// Every path, kernel, bandwidth kind, with and without weights, values (the reference's
    /// own or given per call; 10 columns at d = 2, the wide-values product), moments and
    /// leave-one-out, at 1 and 3 threads, twice (the second call reuses the layouts): the
    /// prepared reference gives the raw call's sums bit for bit.
    fn prepared_equals_raw<F: Real>(coord_scale: f64, query_scale: f64) {
        let mut rng = StdRng::seed_from_u64(11);
        for &d in &[1usize, 2, 3, 20] {
            let (n, m) = (1500, 80);
            let x = rand_mat::<F>(&mut rng, n, d, coord_scale);
            let q = rand_mat::<F>(&mut rng, m, d, coord_scale * query_scale);
            let v = rand_mat::<F>(&mut rng, n, if d == 2 { 10 } else { 2 }, 1.0);
            let w: Array1<F> = (0..n).map(|i| F::of(if i % 7 == 0 { 0.0 } else { rng.random::<f64>() + 0.1 })).collect();
            let hq: Vec<F> = (0..m).map(|_| F::of((0.2 + rng.random::<f64>()) * coord_scale)).collect();
            let hr: Vec<F> = (0..n).map(|_| F::of((0.2 + rng.random::<f64>()) * coord_scale)).collect();
            let h = F::of(0.3 * coord_scale);
            let kernels = [
                Kernel::Radial(Profile::Gaussian),
                Kernel::Radial(Profile::Epanechnikov),
                Kernel::Knn { k: 5, profile: Some(Profile::Triweight) },
                Kernel::Dot { temperature: 2.0 },
            ];
            for (vals, wts) in [(None, None), (Some(v.clone()), Some(w.clone()))] {
                for per_sample in [false, true] {
                    let r = Reference::new(x.clone(), vals.clone(), wts.clone(), per_sample.then(|| hr.clone())).unwrap();
                    // The same samples without values, which are given per call.
                    let r_call = Reference::new(x.clone(), None, wts.clone(), per_sample.then(|| hr.clone())).unwrap();
                    for kernel in &kernels {
                        let bws = if per_sample { vec![Bandwidth::PerReference(hr.clone())] } else { vec![Bandwidth::Scalar(h), Bandwidth::PerQuery(hq.clone())] };
                        for bw in &bws {
                            for nbh in [Neighborhood::Auto, Neighborhood::Brute, Neighborhood::Tree, Neighborhood::Expansion] {
                                for (degree, self_too) in [(None, false), (Some(1), false), (None, true)] {
                                    if (degree.is_some() && matches!(kernel, Kernel::Dot { .. })) || (self_too && matches!(bw, Bandwidth::PerQuery(_))) {
                                        continue;
                                    }
                                    let qs = if self_too { x.view() } else { q.view() };
                                    let opts = Options { degree, exclude_self: self_too, neighborhood: nbh, ..Options::default() };
                                    let pb = Problem { queries: qs, x: x.view(), values: vals.as_ref().map(|v| v.view()), weights: wts.as_ref().map(|w| w.view()) };
                                    let raw = local_sums(&pb, kernel, bw, &opts);
                                    let rbw = if per_sample { Bandwidth::Scalar(F::one()) } else { bw.clone() };
                                    for threads in [1, 3, 1] {
                                        let own = install(threads, || r.local_sums(qs, None, kernel, &rbw, &opts)).unwrap();
                                        let per_call = install(threads, || r_call.local_sums(qs, vals.as_ref().map(|v| v.view()), kernel, &rbw, &opts)).unwrap();
                                        for (got, how) in [(own, "own values"), (per_call, "values per call")] {
                                            let what = format!("d={d} {kernel:?} {bw:?} {nbh:?} degree={degree:?} loo={self_too} threads={threads} {how}");
                                            match (&got, &raw) {
                                                (Ok(got), Ok(raw)) => assert_identical(got, raw, &what),
                                                // (Moments of 1e200 coordinates leave the range: the same error.)
                                                _ => assert_eq!(got.as_ref().err(), raw.as_ref().err(), "{what}"),
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn prepared_reference_is_bit_identical_to_raw_samples_f64() {
        prepared_equals_raw::<f64>(1.0, 1.0);
    }

    #[test]
    fn prepared_reference_is_bit_identical_to_raw_samples_f32() {
        prepared_equals_raw::<f32>(1.0, 1.0);
    }

    #[test]
    fn prepared_reference_is_bit_identical_on_rescaled_and_far_queries() {
        // Coordinates far outside the comfortable range (the working copies are scaled), and
        // queries orders of magnitude beyond the samples (another length scale: raw path).
        prepared_equals_raw::<f64>(1e200, 1.0);
        prepared_equals_raw::<f32>(1.0, 1e12);
    }

    /// Few scattered queries against a prepared reference: `auto` takes the kept kd-tree when
    /// it visits far fewer pairs than the brute force's blocks reach (the raw call builds no
    /// tree for so few queries), and gives the tree path's sums bit for bit, which equal the
    /// brute force's to rounding.
    #[test]
    fn prepared_tree_is_chosen_for_few_scattered_queries() {
        let mut rng = StdRng::seed_from_u64(3);
        let (n, m) = (200_000, 8);
        let x = rand_mat::<f64>(&mut rng, n, 2, 1.0);
        let v = rand_mat::<f64>(&mut rng, n, 1, 1.0);
        let q = rand_mat::<f64>(&mut rng, m, 2, 1.0);
        let r = Reference::new(x.clone(), Some(v.clone()), None, None).unwrap();
        let pb = Problem { queries: q.view(), x: x.view(), values: Some(v.view()), weights: None };
        let mon = Monitor::default();
        let (profile, bw) = (Profile::Epanechnikov, Bandwidth::Scalar(0.005));
        let chosen = |prep: Option<Prep<f64>>| super::super::cheaper_tree(&pb, profile, &bw, &mon, prep, &mut None).unwrap().is_some();
        assert!(chosen(Some(own(&r))), "prepared: the tree");
        assert!(!chosen(None), "raw: no tree built for {m} queries");
        // A wide bandwidth reaches most samples: the vectorised tiles stay cheaper.
        let wide = Bandwidth::Scalar(0.5);
        assert!(super::super::cheaper_tree(&pb, profile, &wide, &mon, Some(own(&r)), &mut None).unwrap().is_none());
        let kernel = Kernel::Radial(profile);
        let opts = |nbh| Options { neighborhood: nbh, ..Options::default() };
        for threads in [1, 2] {
            let auto = install(threads, || r.local_sums(q.view(), None, &kernel, &bw, &opts(Neighborhood::Auto))).unwrap().unwrap();
            let tree = local_sums(&pb, &kernel, &bw, &opts(Neighborhood::Tree)).unwrap();
            assert_identical(&auto, &tree, "auto = tree");
            let brute = local_sums(&pb, &kernel, &bw, &opts(Neighborhood::Brute)).unwrap();
            for i in 0..m {
                assert!((auto.den[i] - brute.den[i]).abs() <= 1e-13 * brute.den[i], "den[{i}]");
                assert!((auto.num[(i, 0)] - brute.num[(i, 0)]).abs() <= 1e-13 * brute.den[i], "num[{i}]");
            }
        }
    }

    /// A few queries of the wide Gaussian against a large prepared reference go through its
    /// far field: within the series' bound of the exact sums (1e-14 of Σ|w|K, plus rounding),
    /// with weights and values, f32 and f64, queries inside and far outside the samples, bit
    /// for bit the same at 1 and 2 threads; the raw call sums exactly.
    fn far_field_within_bound<F: Real>(tol: f64) {
        let mut rng = StdRng::seed_from_u64(9);
        let (n, m) = (150_000, 9);
        let x = rand_mat::<F>(&mut rng, n, 2, 1.0);
        let v = rand_mat::<F>(&mut rng, n, 2, 1.0);
        let w: Array1<F> = (0..n).map(|i| F::of(if i % 11 == 0 { 0.0 } else { rng.random::<f64>() + 0.1 })).collect();
        let mut q = rand_mat::<F>(&mut rng, m, 2, 1.2);
        q.row_mut(m - 1).fill(F::of(30.0));
        let (kernel, bw) = (Kernel::Radial(Profile::Gaussian), Bandwidth::Scalar(F::of(0.2)));
        let r = Reference::new(x.clone(), Some(v.clone()), Some(w.clone()), None).unwrap();
        let pb = Problem { queries: q.view(), x: x.view(), values: Some(v.view()), weights: Some(w.view()) };
        let opts = Options::default();
        assert!(super::super::far_field_sums(&pb, Profile::Gaussian, &bw, &opts, Some(own(&r))).unwrap().is_some(), "far field used");
        let exact = local_sums(&pb, &kernel, &bw, &opts).unwrap();
        // Σ|w|K per query, from a second exact pass with unit values.
        let got = install(1, || r.local_sums(q.view(), None, &kernel, &bw, &opts)).unwrap().unwrap();
        assert_identical(&install(2, || r.local_sums(q.view(), None, &kernel, &bw, &opts)).unwrap().unwrap(), &got, "threads");
        for i in 0..m {
            // Both in the exact sums' scale (the far query's sums underflow otherwise).
            let f = (got.log_scale[i].f64() - exact.log_scale[i].f64()).exp();
            let den = exact.den[i].f64();
            assert!(den > 0.0);
            assert!((got.den[i].f64() * f - den).abs() <= tol * den, "den[{i}]: {} vs {den}", got.den[i].f64() * f);
            for c in 0..2 {
                assert!((got.num[(i, c)].f64() * f - exact.num[(i, c)].f64()).abs() <= tol * den, "num[{i}, {c}]");
            }
        }
    }

    #[test]
    fn far_field_is_within_the_series_bound_f64() {
        far_field_within_bound::<f64>(1e-14);
    }

    #[test]
    fn far_field_is_within_the_series_bound_f32() {
        far_field_within_bound::<f32>(1e-5);
    }

    /// The far field leaves out a cluster only when its whole mass at its nearest distance is
    /// within its share of half the tolerance. Here that is exact: 1,024 samples on the query
    /// (one cluster of radius 0, so the lower bound is the exact near sum and the series is
    /// exact at degree 0) and the rest coinciding at distance D, placed so that their sum is
    /// `ratio` times the share. Those left out must err by at most half the tolerance; those
    /// kept not at all (to rounding). A left-out test twice as loose leaves out ratio 1.1 and
    /// fails.
    #[test]
    fn far_field_leaves_out_only_what_the_tolerance_allows() {
        let (n, near) = (super::super::FAR_FIELD_MIN_PAIRS, 1024);
        let tol = super::super::expansion::TOLERANCE;
        let q = Array2::<f64>::zeros((1, 2));
        let (kernel, bw, opts) = (Kernel::Radial(Profile::Gaussian), Bandwidth::Scalar(1.0), Options::default());
        for ratio in [0.5, 0.9, 1.1, 2.0, 5.0] {
            // Far sum (n − near) e^{−D²/2} = ratio · (tol/2) · near · (n − near)/n.
            let dist = (2.0 * (n as f64 / (0.5 * tol * near as f64 * ratio)).ln()).sqrt();
            let x = Array2::from_shape_fn((n, 2), |(i, k)| if i >= near && k == 0 { dist } else { 0.0 });
            let r = Reference::new(x.clone(), None, None, None).unwrap();
            let pb = Problem { queries: q.view(), x: x.view(), values: None, weights: None };
            assert!(super::super::far_field_sums(&pb, Profile::Gaussian, &bw, &opts, Some(own(&r))).unwrap().is_some(), "far field used");
            let got = r.local_sums(q.view(), None, &kernel, &bw, &opts).unwrap();
            let got = got.den[0] * got.log_scale[0].exp();
            // The exact sums in closed form: the tiled sums' rounding (the far terms are each
            // below half an ulp of the near ones) is of the order tested here.
            let far = (n - near) as f64 * (-0.5 * dist * dist).exp();
            let (den, err) = (near as f64 + far, (got - near as f64 - far).abs());
            if ratio < 1.0 {
                assert!(err <= 0.5 * tol * den && err >= 0.5 * far, "ratio {ratio}: left out, err {:e} of {:e}", err / den, far / den);
            } else {
                assert!(err <= 1e-15 * den, "ratio {ratio}: kept, err {:e}", err / den);
            }
        }
    }

    #[test]
    fn reference_refuses_bad_input_naming_it() {
        let x = Array2::<f64>::zeros((3, 2));
        let err = |r: Result<Reference<f64>>| r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err(Reference::new(Array2::zeros((0, 2)), None, None, None)).contains('X'));
        assert!(err(Reference::new(x.clone(), Some(Array2::zeros((2, 1))), None, None)).contains("values"));
        assert!(err(Reference::new(x.clone(), None, Some(Array1::from(vec![1.0, -1.0, 1.0])), None)).contains("sample_weight"));
        assert!(err(Reference::new(x.clone(), None, None, Some(vec![1.0, 0.0, 1.0]))).contains("bandwidth"));
        assert!(err(Reference::new(x.clone(), None, None, Some(vec![1.0]))).contains("bandwidth"));
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let mut xb = x.clone();
            xb[[1, 0]] = bad;
            assert_eq!(Reference::new(xb, None, None, None).err(), Some(LocalizationError::NonFinite { name: "X" }));
            let v = Array2::from_elem((3, 1), bad);
            assert_eq!(Reference::new(x.clone(), Some(v), None, None).err(), Some(LocalizationError::NonFinite { name: "values" }));
        }
        let r = Reference::new(x.clone(), None, None, Some(vec![1.0; 3])).unwrap();
        let opts = Options::default();
        let k = Kernel::Radial(Profile::Gaussian);
        assert!(r.local_sums(x.view(), None, &k, &Bandwidth::PerQuery(vec![1.0; 3]), &opts).unwrap_err().to_string().contains("bandwidth"));
        assert!(r.local_sums(Array2::zeros((2, 3)).view(), None, &k, &Bandwidth::Scalar(1.0), &opts).unwrap_err().to_string().contains("X_query"));
        let v = Array2::<f64>::zeros((3, 1));
        let with_values = Reference::new(x.clone(), Some(v.clone()), None, None).unwrap();
        let plain = Reference::new(x.clone(), None, None, None).unwrap();
        let refused = |r: &Reference<f64>, v: ArrayView2<f64>| r.local_sums(x.view(), Some(v), &k, &Bandwidth::Scalar(1.0), &opts).unwrap_err();
        assert!(refused(&with_values, v.view()).to_string().contains("values"));
        assert!(refused(&plain, Array2::zeros((2, 1)).view()).to_string().contains("values"));
        assert_eq!(refused(&plain, Array2::from_elem((3, 1), f64::NAN).view()), LocalizationError::NonFinite { name: "values" });
    }
}

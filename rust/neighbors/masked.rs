//! k nearest neighbours on co-observed coordinates: rows with missing entries (NaN) compared
//! on the coordinates both observe, the squared distance scaled by p / (their number), as
//! scikit-learn's `nan_euclidean_distances` (the sample-level layer of the imputer).
//!
//! Exact in the sense of the module above: the neighbours and distances that direct
//! differences over the co-observed coordinates give. Every pair is screened through one
//! matrix product of augmented rows on the packed micro-kernel — with q̃, x̃ the rows centred
//! by the column means and zero where missing, and m_q, m_x their 0/1 masks,
//!
//!   Σ_both (q − x)² = −2 [q̃, q̃², m_q] · [x̃, −m_x/2, −x̃²/2],
//!
//! (the centring cancels on co-observed coordinates) — and the number of co-observed
//! coordinates comes from popcounts of the packed masks. Candidates within the product's
//! rounding bound of the current k-th distance are ranked by direct differences. No m × n
//! matrix is formed: each query block keeps its k best while reference tiles stream by.

use super::Best;
use crate::distance::packed::{minus_two_dots, Panels};
use crate::distance::product_error;
use crate::error::{LocalizationError, Result};
use crate::memory;
use crate::parallel::Monitor;
use crate::real::Real;
use crate::rows::Rows;
use ndarray::{s, ArrayView2};
use rayon::prelude::*;
use std::sync::Mutex;

/// Queries per block (a multiple of the micro-kernel's 6 rows) and references per tile.
const QUERY_BLOCK: usize = 120;
const REF_TILE: usize = 512;

/// The k nearest references of each query under the co-observed distance, ascending, ties
/// by index: (distances, indices), m × k row-major. `exclude[i]` is a reference that query i
/// never gets (its own row when the queries are the references). A pair with no co-observed
/// coordinate is at infinite distance; it is returned only when fewer than k references are
/// at a finite one.
pub fn masked_knn<F: Real>(q: ArrayView2<F>, x: ArrayView2<F>, k: usize, exclude: Option<&[usize]>, mon: &Monitor) -> Result<(Vec<F>, Vec<usize>)> {
    check(q, x, k, exclude)?;
    search(q, x, k, exclude, is_self_query(q, x, exclude), mon)
}

/// The queries are the references themselves (same values, NaN where they are NaN), each
/// either excluding its own row or none: then every pair's product serves both rows.
fn is_self_query<F: Real>(q: ArrayView2<F>, x: ArrayView2<F>, exclude: Option<&[usize]>) -> bool {
    q.dim() == x.dim()
        && exclude.map_or(true, |e| e.iter().enumerate().all(|(i, &j)| i == j))
        && q.iter().zip(x.iter()).all(|(a, b)| a == b || (a.is_nan() && b.is_nan()))
}

fn search<F: Real>(q: ArrayView2<F>, x: ArrayView2<F>, k: usize, exclude: Option<&[usize]>, symmetric: bool, mon: &Monitor) -> Result<(Vec<F>, Vec<usize>)> {
    let (n, p) = x.dim();
    let m = q.nrows();
    // Cannot fail after `check`: the rows as slices for the direct differences.
    let (q_rows, x_rows) = (Rows::new("X_query", q)?, Rows::new("X", x)?);
    let mut distances = memory::try_vec("masked neighbor distances", &[m, k], F::zero())?;
    let mut indices = memory::try_vec("masked neighbor indices", &[m, k], 0usize)?;
    if m == 0 {
        return Ok((distances, indices));
    }
    let centre = observed_means(x);
    let refs = Side::new(x, &centre, Role::Reference)?;
    let screen = Screen {
        refs: &refs,
        x_rows: &x_rows,
        // Rounding bound of the product (any summation order) relative to ‖q̃‖² + ‖x̃‖², which
        // bound the sums of |terms| over the co-observed coordinates.
        c: product_error::<F>(3 * p),
        scale: F::of(p as f64),
        k,
    };
    mon.set_progress(0, m);
    if symmetric && SELF_BLOCK % refs.packed.width() == 0 {
        let best = self_search(x, &centre, &screen, exclude.is_some(), mon)?;
        for (i, best) in best.into_iter().enumerate() {
            let best = best.into_inner().unwrap_or_else(|e| e.into_inner());
            write_sorted(best, &mut distances[i * k..(i + 1) * k], &mut indices[i * k..(i + 1) * k]);
        }
        return Ok((distances, indices));
    }
    distances.par_chunks_mut(QUERY_BLOCK * k).zip(indices.par_chunks_mut(QUERY_BLOCK * k)).enumerate().try_for_each(
        |(blk, (dist, ind))| -> Result<()> {
            let b0 = blk * QUERY_BLOCK;
            let b1 = (b0 + QUERY_BLOCK).min(m);
            let queries = Side::new(q.slice(s![b0..b1, ..]), &centre, Role::Query)?;
            let mut best: Vec<Best<F>> = (0..b1 - b0).map(|_| Best::new(k)).collect();
            let mut tile = vec![F::zero(); queries.packed.padded_rows() * REF_TILE];
            let mut work = Work::new(k);
            for t0 in (0..n).step_by(REF_TILE) {
                mon.check()?;
                let t1 = (t0 + REF_TILE).min(n);
                let w = refs.packed.width();
                minus_two_dots(&queries.packed, &refs.packed, t0 / w..t1.div_ceil(w), &mut tile, REF_TILE);
                for (i, best) in best.iter_mut().enumerate() {
                    let row = &tile[i * REF_TILE..i * REF_TILE + (t1 - t0)];
                    let products = row.iter().enumerate().map(|(jj, &v)| (t0 + jj, v));
                    let own = exclude.map(|e| e[b0 + i]);
                    screen.offer(best, q_rows.row(b0 + i), queries.norms[i], queries.bits(i), own, products, &mut work);
                }
            }
            for (i, best) in best.into_iter().enumerate() {
                write_sorted(best, &mut dist[i * k..(i + 1) * k], &mut ind[i * k..(i + 1) * k]);
            }
            mon.advance(b1 - b0);
            Ok(())
        },
    )?;
    Ok((distances, indices))
}

/// Rows per block of the self-query: a multiple of every reference panel width.
const SELF_BLOCK: usize = 480;

/// The self-query: the product of blocks I and J ≥ I only, each tile offered to the rows of
/// block I and, transposed, to those of block J — half the products of the general search.
/// The k best of a row come from several tasks, so each row's list is behind a lock (held
/// for one tile's row, never two at once). The result does not depend on the order in which
/// the tasks offer (the k smallest by (distance, index) of the same exact distances; a
/// screened-out pair is beyond a k-th distance already reached).
fn self_search<F: Real>(x: ArrayView2<F>, centre: &[F], screen: &Screen<'_, F>, exclude_own: bool, mon: &Monitor) -> Result<Vec<Mutex<Best<F>>>> {
    let n = x.nrows();
    let best: Vec<Mutex<Best<F>>> = (0..n).map(|_| Mutex::new(Best::new(screen.k))).collect();
    let lock = |i: usize| best[i].lock().unwrap_or_else(|e| e.into_inner());
    let blocks = n.div_ceil(SELF_BLOCK);
    let w = screen.refs.packed.width();
    (0..blocks).into_par_iter().with_max_len(1).try_for_each(|bi| -> Result<()> {
        let b0 = bi * SELF_BLOCK;
        let b1 = (b0 + SELF_BLOCK).min(n);
        let rows = Side::new(x.slice(s![b0..b1, ..]), centre, Role::Query)?;
        let mut tile = vec![F::zero(); rows.packed.padded_rows() * SELF_BLOCK];
        let mut work = Work::new(screen.k);
        for t0 in (b0..n).step_by(SELF_BLOCK) {
            mon.check()?;
            let t1 = (t0 + SELF_BLOCK).min(n);
            minus_two_dots(&rows.packed, &screen.refs.packed, t0 / w..t1.div_ceil(w), &mut tile, SELF_BLOCK);
            for i in 0..b1 - b0 {
                let row = &tile[i * SELF_BLOCK..i * SELF_BLOCK + (t1 - t0)];
                let products = row.iter().enumerate().map(|(jj, &v)| (t0 + jj, v));
                let own = exclude_own.then_some(b0 + i);
                screen.offer(&mut lock(b0 + i), screen.x_rows.row(b0 + i), rows.norms[i], rows.bits(i), own, products, &mut work);
            }
            if t0 == b0 {
                continue; // the diagonal tile holds both orders of its pairs
            }
            for jj in 0..t1 - t0 {
                let j = t0 + jj;
                let products = (0..b1 - b0).map(|i| (b0 + i, tile[i * SELF_BLOCK + jj]));
                let refs = screen.refs;
                screen.offer(&mut lock(j), screen.x_rows.row(j), refs.norms[j], refs.bits(j), None, products, &mut work);
            }
        }
        mon.advance(b1 - b0);
        Ok(())
    })?;
    Ok(best)
}

/// What screening a row needs besides the row: the references' norms and masks, their rows
/// for the direct differences, and the product's rounding bound.
struct Screen<'a, F> {
    refs: &'a Side<F>,
    x_rows: &'a Rows<'a, F>,
    c: F,
    scale: F,
    k: usize,
}

/// Scratch space of one task.
struct Work<F> {
    pending: Vec<(F, F, usize)>,
    scratch: Vec<F>,
}

impl<F: Real> Work<F> {
    fn new(k: usize) -> Self {
        Work { pending: Vec::with_capacity(REF_TILE), scratch: Vec::with_capacity(REF_TILE + 2 * k) }
    }
}

impl<F: Real> Screen<'_, F> {
    /// Offers a row (values `row`, ‖q̃‖² `qn`, mask `qbits`) its products −2 [q̃, q̃², m]·[x̃, −m/2, −x̃²/2]
    /// with references j: those that may be among its k nearest given the rounding bound are
    /// ranked by direct differences. `own` is a reference the row never gets.
    #[allow(clippy::too_many_arguments)]
    fn offer(&self, best: &mut Best<F>, row: &[F], qn: F, qbits: &[u64], own: Option<usize>, products: impl Iterator<Item = (usize, F)>, work: &mut Work<F>) {
        let Work { pending, scratch } = work;
        let worst = best.worst();
        pending.clear();
        for (j, v) in products {
            if Some(j) == own {
                continue;
            }
            let both = co_observed(qbits, self.refs.bits(j));
            if both == 0 {
                if worst == F::infinity() {
                    pending.push((F::infinity(), F::infinity(), j));
                }
                continue;
            }
            let f = self.scale / F::of(both as f64);
            let err = self.c * (qn + self.refs.norms[j]);
            let lower = (v - err) * f;
            if lower <= worst {
                pending.push((lower, (v + err) * f, j));
            }
        }
        best.cut(pending, scratch);
        for &(lower, _, j) in pending.iter() {
            let d2 = if lower == F::infinity() { lower } else { direct(row, self.x_rows.row(j), self.scale) };
            best.offer(d2, j);
        }
    }
}

fn write_sorted<F: Real>(best: Best<F>, dist: &mut [F], ind: &mut [usize]) {
    for (r, (d2, j)) in best.into_sorted().into_iter().enumerate() {
        dist[r] = d2.sqrt();
        ind[r] = j;
    }
}

fn check<F: Real>(q: ArrayView2<F>, x: ArrayView2<F>, k: usize, exclude: Option<&[usize]>) -> Result<()> {
    let (n, p) = x.dim();
    if n == 0 || p == 0 {
        return Err(LocalizationError::EmptyInput { name: "X" });
    }
    if q.ncols() != p {
        return Err(LocalizationError::param("X_query", format!("has {} features, X has {p}", q.ncols())));
    }
    if !q.is_standard_layout() || !x.is_standard_layout() {
        return Err(LocalizationError::param("X", "queries and samples must be C-contiguous (row-major)"));
    }
    if q.iter().chain(x.iter()).any(|v| v.is_infinite()) {
        return Err(LocalizationError::param("X", "contains infinity; only NaN marks a missing value"));
    }
    let available = n - exclude.is_some() as usize;
    if k == 0 || k > available {
        return Err(LocalizationError::param("k", format!("must be in [1, {available}], got {k}")));
    }
    if let Some(e) = exclude {
        if e.len() != q.nrows() || e.iter().any(|&j| j >= n) {
            return Err(LocalizationError::param("exclude", format!("must hold one index in [0, {n}) per query")));
        }
    }
    Ok(())
}

/// Σ over the coordinates both rows observe of (q − x)², times p / (their number): direct
/// differences (a NaN difference marks a coordinate one of them misses), eight partial sums.
fn direct<F: Real>(q: &[F], x: &[F], p: F) -> F {
    const W: usize = 8;
    let (mut acc, mut cnt) = ([F::zero(); W], [0u32; W]);
    for (a, b) in q.chunks(W).zip(x.chunks(W)) {
        for l in 0..a.len() {
            let t = a[l] - b[l];
            let seen = !t.is_nan();
            acc[l] = acc[l] + if seen { t * t } else { F::zero() };
            cnt[l] += seen as u32;
        }
    }
    let s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    s * (p / F::of(cnt.iter().sum::<u32>() as f64))
}

/// Mean of each column's observed values (0 for a column with none).
fn observed_means<F: Real>(x: ArrayView2<F>) -> Vec<F> {
    let p = x.ncols();
    let (mut sum, mut cnt) = (vec![0.0f64; p], vec![0usize; p]);
    for row in x.rows() {
        for (k, &v) in row.iter().enumerate() {
            if !v.is_nan() {
                sum[k] += v.f64();
                cnt[k] += 1;
            }
        }
    }
    sum.iter().zip(&cnt).map(|(&s, &c)| F::of(if c > 0 { s / c as f64 } else { 0.0 })).collect()
}

#[derive(Copy, Clone, PartialEq)]
enum Role {
    Query,
    Reference,
}

/// One side of the product: the augmented rows packed, ‖q̃‖² per row and the masks as bits.
struct Side<F> {
    packed: Panels<F>,
    norms: Vec<F>,
    bits: Vec<u64>,
    words: usize,
}

impl<F: Real> Side<F> {
    fn new(a: ArrayView2<F>, centre: &[F], role: Role) -> Result<Self> {
        let (rows, p) = a.dim();
        let words = p.div_ceil(64);
        let mut aug = memory::try_array("augmented samples", (rows, 3 * p), F::zero())?;
        let mut bits = memory::try_vec("sample masks", &[rows, words], 0u64)?;
        let mut norms = Vec::with_capacity(rows);
        let half = F::of(0.5);
        // Each augmented row is three blocks of p: the centred values, then their squares
        // (queries) or −½ (references), then the mask (queries) or −½ the squares (references).
        for (r, (row, mut out)) in a.rows().into_iter().zip(aug.rows_mut()).enumerate() {
            let mut norm = F::zero();
            for (kk, &v) in row.iter().enumerate() {
                if v.is_nan() {
                    continue;
                }
                let c = v - centre[kk];
                norm = norm + c * c;
                bits[r * words + kk / 64] |= 1 << (kk % 64);
                match role {
                    Role::Query => (out[kk], out[p + kk], out[2 * p + kk]) = (c, c * c, F::one()),
                    Role::Reference => (out[kk], out[p + kk], out[2 * p + kk]) = (c, -half, -(c * c) * half),
                }
            }
            norms.push(norm);
        }
        let zero = vec![F::zero(); 3 * p];
        let packed = match role {
            Role::Reference => Panels::references(aug.view(), &zero)?,
            Role::Query => {
                let mut pq = Panels::queries(3 * p);
                pq.repack(aug.view(), &zero);
                pq
            }
        };
        Ok(Side { packed, norms, bits, words })
    }

    fn bits(&self, r: usize) -> &[u64] {
        &self.bits[r * self.words..(r + 1) * self.words]
    }
}

fn co_observed(a: &[u64], b: &[u64]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x & y).count_ones()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// Rows in [0, 1) plus an offset, a share of entries missing.
    fn data(rng: &mut StdRng, n: usize, p: usize, missing: f64, offset: f64) -> Array2<f64> {
        Array2::from_shape_fn((n, p), |_| if rng.random::<f64>() < missing { f64::NAN } else { offset + rng.random::<f64>() })
    }

    /// The definition: every pair by direct differences over the co-observed coordinates,
    /// sorted by (distance, index).
    fn naive(q: &Array2<f64>, x: &Array2<f64>, k: usize, exclude: Option<&[usize]>) -> Vec<Vec<(f64, usize)>> {
        let p = x.ncols() as f64;
        q.rows()
            .into_iter()
            .enumerate()
            .map(|(i, qr)| {
                let mut all: Vec<(f64, usize)> = x
                    .rows()
                    .into_iter()
                    .enumerate()
                    .filter(|(j, _)| exclude.map_or(true, |e| e[i] != *j))
                    .map(|(j, xr)| {
                        let (mut s, mut c) = (0.0, 0usize);
                        for (a, b) in qr.iter().zip(xr) {
                            if !a.is_nan() && !b.is_nan() {
                                s += (a - b) * (a - b);
                                c += 1;
                            }
                        }
                        (if c == 0 { f64::INFINITY } else { (s * p / c as f64).sqrt() }, j)
                    })
                    .collect();
                all.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
                all.truncate(k);
                all
            })
            .collect()
    }

    fn check_against_naive(q: &Array2<f64>, x: &Array2<f64>, k: usize, exclude: Option<&[usize]>) {
        let (d, ind) = masked_knn(q.view(), x.view(), k, exclude, &Monitor::default()).unwrap();
        for (i, want) in naive(q, x, k, exclude).iter().enumerate() {
            for (r, &(wd, wj)) in want.iter().enumerate() {
                let (gd, gj) = (d[i * k + r], ind[i * k + r]);
                assert_eq!(gj, wj, "query {i} rank {r}: {gd} vs {wd}");
                assert!(gd == wd || (gd - wd).abs() <= 1e-12 * wd, "query {i} rank {r}: {gd} vs {wd}");
            }
        }
    }

    #[test]
    fn equals_direct_differences_on_co_observed_coordinates() {
        let mut rng = StdRng::seed_from_u64(3);
        for &(n, p, missing, offset) in &[(700, 784, 0.3, 0.0), (300, 40, 0.5, 1e4), (200, 5, 0.6, 0.0), (90, 1, 0.2, 0.0)] {
            let x = data(&mut rng, n, p, missing, offset);
            let q = data(&mut rng, 130, p, missing, offset);
            check_against_naive(&q, &x, 7, None);
            let own: Vec<usize> = (0..n).collect();
            check_against_naive(&x, &x, 5, Some(&own));
        }
    }

    /// The self-query's half of the products gives what the general search gives, bit for
    /// bit: several blocks, duplicate rows (ties broken by index), its own row excluded or not,
    /// rows with nothing in common, f64 and f32, one and three threads.
    #[test]
    fn self_query_equals_the_general_search() {
        let mut rng = StdRng::seed_from_u64(11);
        let mut x = data(&mut rng, 1100, 30, 0.4, 0.0);
        for i in (0..1100).step_by(9) {
            let src = x.row((i * 7 + 3) % 1100).to_owned();
            x.row_mut(i).assign(&src);
        }
        x.row_mut(5).fill(f64::NAN);
        x[(5, 0)] = 0.3;
        let own: Vec<usize> = (0..1100).collect();
        let x32 = x.mapv(|v| v as f32);
        assert!(is_self_query(x.view(), x.view(), Some(&own)) && !is_self_query(x.view(), x.view(), Some(&[1; 1100])));
        let mon = Monitor::default();
        for exclude in [None, Some(own.as_slice())] {
            for threads in [1, 3] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                pool.install(|| {
                    assert_eq!(search(x.view(), x.view(), 8, exclude, true, &mon).unwrap(), search(x.view(), x.view(), 8, exclude, false, &mon).unwrap());
                    assert_eq!(search(x32.view(), x32.view(), 8, exclude, true, &mon).unwrap(), search(x32.view(), x32.view(), 8, exclude, false, &mon).unwrap());
                });
            }
        }
    }

    #[test]
    fn no_co_observed_coordinate_is_infinitely_far() {
        // Queries observe only the first half, references only the second (but one).
        let mut x = Array2::from_elem((20, 6), f64::NAN);
        x.slice_mut(s![.., 3..]).fill(1.0);
        x[(7, 0)] = 0.5;
        let q = Array2::from_shape_fn((3, 6), |(_, j)| if j < 3 { 0.0 } else { f64::NAN });
        let (d, ind) = masked_knn(q.view(), x.view(), 4, None, &Monitor::default()).unwrap();
        assert_eq!(&ind[..4], &[7, 0, 1, 2]);
        assert!((d[0] - (0.25f64 * 6.0).sqrt()).abs() < 1e-15 && d[1..4].iter().all(|v| v.is_infinite()));
    }

    #[test]
    fn identical_for_any_thread_count_and_in_f32() {
        let mut rng = StdRng::seed_from_u64(5);
        let x = data(&mut rng, 900, 50, 0.3, 0.0);
        let run = |t: usize| {
            rayon::ThreadPoolBuilder::new().num_threads(t).build().unwrap().install(|| masked_knn(x.view(), x.view(), 6, None, &Monitor::default()).unwrap())
        };
        assert_eq!(run(1), run(3));
        let x32 = x.mapv(|v| v as f32);
        let (d32, i32_) = masked_knn(x32.view(), x32.view(), 6, None, &Monitor::default()).unwrap();
        let (d64, _) = run(2);
        assert_eq!(i32_.len(), d64.len());
        assert!(d32.iter().zip(&d64).all(|(a, b)| (*a as f64 - b).abs() <= 1e-4 * b.max(1.0)));
    }

    #[test]
    fn bad_input_is_an_error() {
        let x = Array2::<f64>::zeros((4, 3));
        let mon = Monitor::default();
        assert!(masked_knn(x.view(), x.view(), 0, None, &mon).is_err());
        assert!(masked_knn(x.view(), x.view(), 4, Some(&[0, 1, 2, 3]), &mon).is_err());
        assert!(masked_knn(x.view(), x.view(), 2, Some(&[0, 9, 2, 3]), &mon).is_err());
        assert!(masked_knn(Array2::<f64>::zeros((2, 2)).view(), x.view(), 1, None, &mon).is_err());
        let mut bad = x.clone();
        bad[(1, 1)] = f64::INFINITY;
        assert!(masked_knn(bad.view(), x.view(), 1, None, &mon).is_err());
        let mon = Monitor::default();
        mon.stop();
        assert!(matches!(masked_knn(x.view(), x.view(), 1, None, &mon), Err(LocalizationError::Interrupted)));
    }
}

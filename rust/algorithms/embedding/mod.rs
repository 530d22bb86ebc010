//! Embeddings as localization (SPEC §6): a kernel (possibly asymmetric, possibly over
//! triplets) is fitted by points in a low-dimensional space.
//!
//! * `lle`: the hollow, row-sum-one local kernel W of locally linear embedding, from the
//!   regularised local Gram systems (one small solve per point, in parallel).
//! * `triplet`: the contrastive hyperkernel K(i,j,k) = s_ij / (s_ij + s_ik) over sampled
//!   triplets (TriMap) and over user triplets (STE / t-STE), losses, gradients, the
//!   optimiser.
//! * `softmax`: asymmetric MDS with K̃ ≈ softmax(Z₁Z₂ᵀ), the softmax normaliser estimated
//!   from sampled negatives (the exact normaliser is a local mean under the dot-product
//!   kernel and goes through the engine from the Python layer).
//! * `quality`: trustworthiness ranks without the n×n rank matrix.
//!
//! Reproducibility: every random draw comes from a ChaCha8 stream seeded by (seed, item),
//! so it does not depend on which thread draws it; every gradient that scatters into many
//! points is summed in fixed point ([`Scatter`]), whose integer additions are exact, so
//! the sum does not depend on how the work was split across threads. Results are
//! bit-identical for any thread count.

pub mod lle;
pub mod quality;
pub mod softmax;
pub mod triplet;

use ndarray::Array2;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use std::sync::{Mutex, PoisonError};

/// The random stream of item `item` (a point, a row) at stage `stage` (e.g. an epoch) of a
/// run seeded by `seed`: a function of these three numbers only.
pub fn stream(seed: u64, stage: u64, item: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stage);
    // 2³² words per item: the items' streams never overlap in practice.
    rng.set_word_pos((item as u128) << 32);
    rng
}

/// Deterministic scatter-add of row vectors into an n×q matrix, in parallel.
///
/// Contributions are truncated to a fixed-point grid (1/scale) and added as integers, which
/// is associative: the total does not depend on the order of the additions, so the work
/// can be split across any number of threads and still give the same bits. `bound` must
/// bound the sum of |contribution| that any one entry receives; the grid is then
/// 2⁶¹/bound, i.e. entries keep ~2⁻⁶¹ of `bound` in absolute precision (≈ 1e-12 relative
/// to the largest entry for a million contributions).
pub struct Scatter {
    pub n: usize,
    pub q: usize,
    scale: f64,
}

impl Scatter {
    pub fn new(n: usize, q: usize, bound: f64) -> Self {
        let bound = if bound.is_finite() && bound > 0.0 { bound } else { 1.0 };
        Scatter { n, q, scale: (1u64 << 61) as f64 / bound }
    }

    /// Run `body(index, item, emit)` for every item (in parallel, chunks of `chunk` items),
    /// where `emit.add(row, col, values)` adds `values` to `row` from column `col` on; also
    /// sums the f64 returned by `body` in a fixed order (per chunk, then over chunks).
    /// Returns (matrix, sum).
    pub fn run<T: Sync>(&self, items: &[T], chunk: usize, body: impl Fn(usize, &T, &mut Emitter) -> f64 + Sync) -> (Array2<f64>, f64) {
        let (n, q, scale) = (self.n, self.q, self.scale);
        let chunk = chunk.max(1);
        let n_chunks = items.len().div_ceil(chunk);
        // One integer buffer per worker thread, filled by whichever chunks that thread runs:
        // integer additions commute, so where a contribution lands does not change the
        // total, and the chunks can be handed out dynamically. A fixed split into two parts
        // per thread (one buffer each) left a core idle for a fifth of a triplet gradient
        // whenever the other started late, and allocated twice the buffers.
        let slots: Vec<Mutex<Vec<i64>>> = (0..rayon::current_num_threads().clamp(1, n_chunks.max(1))).map(|_| Mutex::new(Vec::new())).collect();
        let mut sums = vec![0.0f64; n_chunks];
        sums.par_iter_mut().enumerate().for_each(|(c, s)| {
            let slot = rayon::current_thread_index().unwrap_or(0) % slots.len();
            let mut buf = slots[slot].lock().unwrap_or_else(PoisonError::into_inner);
            if buf.is_empty() {
                buf.resize(n * q, 0);
            }
            let mut emit = Emitter { buf: &mut buf, q, scale };
            let lo = c * chunk;
            for (t, item) in (lo..).zip(&items[lo..(lo + chunk).min(items.len())]) {
                *s += body(t, item, &mut emit);
            }
        });
        let bufs: Vec<Vec<i64>> = slots.into_iter().map(|m| m.into_inner().unwrap_or_else(PoisonError::into_inner)).filter(|b| !b.is_empty()).collect();
        // The per-chunk sums in chunk order: the same additions for any split.
        let total = sums.iter().sum();
        let inv = 1.0 / scale;
        let mut out = Array2::<f64>::zeros((n, q));
        if let (Some(o), false) = (out.as_slice_mut(), bufs.is_empty()) {
            // Blocks large enough that a small embedding merges on the calling thread: a
            // parallel pass wakes the pool, which cost more than 10⁴ additions.
            const BLOCK: usize = 1 << 15;
            o.par_chunks_mut(BLOCK).enumerate().for_each(|(b, o)| {
                for (e, v) in (b * BLOCK..).zip(o.iter_mut()) {
                    *v = bufs.iter().fold(0i64, |a, buf| a.wrapping_add(buf[e])) as f64 * inv;
                }
            });
        }
        (out, total)
    }
}

/// Where a [`Scatter`] body adds its contributions (one integer buffer per worker thread).
pub struct Emitter<'a> {
    buf: &'a mut [i64],
    q: usize,
    scale: f64,
}

impl Emitter<'_> {
    /// Add `v` to row `row`, columns `col..col + v.len()`.
    #[inline(always)]
    pub fn add(&mut self, row: usize, col: usize, v: &[f64]) {
        let at = row * self.q + col;
        for (a, &x) in self.buf[at..at + v.len()].iter_mut().zip(v) {
            *a = a.wrapping_add(truncate(x * self.scale));
        }
    }
}

impl Emitter<'_> {
    /// [`Emitter::add`] two values per instruction, with the same bits: AVX-512DQ's packed
    /// truncation is the scalar one lane by lane (both give `i64::MIN` out of range). The
    /// scalar conversions, each a move from the vector to the integer unit, were a sixth of a
    /// triplet gradient.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, DQ and VL; call it from code compiled for them (it is
    /// inlined there).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub unsafe fn add_packed(&mut self, row: usize, col: usize, v: &[f64]) {
        use std::arch::x86_64::_mm_loadu_pd;
        let mut c = 0;
        while c + 2 <= v.len() {
            // SAFETY: c + 2 ≤ v.len(); the caller guarantees the features.
            unsafe { self.add_pair(row, col + c, _mm_loadu_pd(v.as_ptr().add(c))) };
            c += 2;
        }
        let at = row * self.q + col;
        for (a, &x) in self.buf[at + c..at + v.len()].iter_mut().zip(&v[c..]) {
            *a = a.wrapping_add(truncate(x * self.scale));
        }
    }

    /// [`Emitter::add`] of the two values of `v` to columns `col` and `col + 1` of `row`.
    ///
    /// # Safety
    /// As [`Emitter::add_packed`].
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub unsafe fn add_pair(&mut self, row: usize, col: usize, v: std::arch::x86_64::__m128d) {
        use std::arch::x86_64::*;
        let at = row * self.q + col;
        let dst = &mut self.buf[at..at + 2];
        // SAFETY: `dst` holds two i64; the caller guarantees the features.
        unsafe {
            let p = dst.as_mut_ptr() as *mut __m128i;
            let x = _mm_cvttpd_epi64(_mm_mul_pd(v, _mm_set1_pd(self.scale)));
            _mm_storeu_si128(p, _mm_add_epi64(_mm_loadu_si128(p), x));
        }
    }

    /// A hint to fetch row `row`'s entries into the cache before they are added to.
    #[inline(always)]
    pub fn prefetch(&self, row: usize) {
        triplet::prefetch(self.buf.as_ptr().wrapping_add(row * self.q));
    }
}

/// `x` truncated towards zero. Truncation (one instruction; `round` is a libm call) is as
/// deterministic: it depends on the contribution only. On x86-64 it is the bare conversion:
/// `as` adds a NaN test and saturation (two compares and a select per value, a fifth of a
/// triplet's gradient), and the bound given to [`Scatter::new`] keeps finite contributions
/// inside the range, where both agree.
#[inline(always)]
fn truncate(x: f64) -> i64 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_cvttsd_si64, _mm_set_sd};
        // SAFETY: SSE2 is part of every x86-64 CPU.
        unsafe { _mm_cvttsd_si64(_mm_set_sd(x)) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        x as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn scatter_is_exact_to_its_grid_and_thread_independent() {
        let mut rng = stream(1, 0, 0);
        let items: Vec<(usize, [f64; 2])> = (0..20_000).map(|_| (rng.random_range(0..37), [rng.random::<f64>() - 0.5, rng.random::<f64>()])).collect();
        let sc = Scatter::new(37, 2, 20_000.0);
        let run = |threads: usize| {
            rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(|| {
                sc.run(&items, 100, |t, it, emit| {
                    emit.add(it.0, 0, &it.1);
                    t as f64 * 1e-3
                })
            })
        };
        let (a, sa) = run(1);
        let (b, sb) = run(3);
        assert_eq!(a, b);
        assert_eq!(sa.to_bits(), sb.to_bits());
        let mut want = Array2::<f64>::zeros((37, 2));
        for it in &items {
            want[(it.0, 0)] += it.1[0];
            want[(it.0, 1)] += it.1[1];
        }
        for (x, y) in a.iter().zip(want.iter()) {
            assert!((x - y).abs() < 1e-9, "{x} {y}");
        }
    }

    #[test]
    fn streams_depend_on_seed_stage_and_item_only() {
        let draw = |s, st, it| stream(s, st, it).random::<u64>();
        assert_eq!(draw(3, 1, 7), draw(3, 1, 7));
        assert_ne!(draw(3, 1, 7), draw(3, 1, 8));
        assert_ne!(draw(3, 1, 7), draw(3, 2, 7));
        assert_ne!(draw(3, 1, 7), draw(4, 1, 7));
    }
}

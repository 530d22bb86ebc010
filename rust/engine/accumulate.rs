//! Per-query f64 accumulators shared by every path of the engine.

use super::lanes;
use super::types::{LocalSums, Options};
use crate::error::Result;
use crate::real::{madd, Real};
use ndarray::Axis;
use rayon::prelude::*;

/// Number of local polynomial basis functions in d dimensions.
pub fn n_basis(d: usize, degree: usize) -> usize {
    match degree {
        0 => 1,
        1 => 1 + d,
        _ => 1 + d + d * (d + 1) / 2,
    }
}

pub struct Acc {
    pub num: Vec<f64>,
    pub den: f64,
    /// Sums are stored divided by exp(log_scale) (running max of log K; 0 for other kernels).
    pub log_scale: f64,
    mom: Vec<f64>,
    cross: Vec<f64>,
    phi: Vec<f64>,
}

impl Acc {
    pub fn new(p: usize, basis: Option<usize>, exponential: bool) -> Self {
        let nb = basis.unwrap_or(0);
        Acc {
            num: vec![0.0; p],
            den: 0.0,
            log_scale: if exponential { f64::NEG_INFINITY } else { 0.0 },
            mom: vec![0.0; nb * nb],
            cross: vec![0.0; nb * p],
            phi: vec![0.0; nb],
        }
    }

    /// Move to a larger running maximum, rescaling what has been summed so far.
    #[inline]
    pub fn raise_scale(&mut self, new: f64) {
        if new > self.log_scale {
            let f = (self.log_scale - new).exp();
            self.den *= f;
            self.num.iter_mut().chain(self.mom.iter_mut()).chain(self.cross.iter_mut()).for_each(|v| *v *= f);
            self.log_scale = new;
        }
    }

    /// Add kw·φ(δ)φ(δ)ᵀ and kw·φ(δ)vᵀ (upper triangle; mirrored in `finish`).
    pub fn add_moments<F: Real>(&mut self, kw: f64, delta: &[F], v: &[F], degree: usize) {
        let phi = &mut self.phi;
        let d = delta.len();
        phi[0] = 1.0;
        if degree >= 1 {
            for k in 0..d {
                phi[1 + k] = delta[k].f64();
            }
        }
        if degree >= 2 {
            let mut at = 1 + d;
            for a in 0..d {
                for b in a..d {
                    phi[at] = delta[a].f64() * delta[b].f64();
                    at += 1;
                }
            }
        }
        let nb = phi.len();
        let p = v.len();
        for a in 0..nb {
            let wa = kw * phi[a];
            for b in a..nb {
                self.mom[a * nb + b] += wa * phi[b];
            }
            for c in 0..p {
                self.cross[a * p + c] += wa * v[c].f64();
            }
        }
    }

    /// The same sums for a whole tile at once (vectorised): `phi` and `vals` are
    /// basis-/column-major with row stride `stride`; `kw` the tile's weights.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn add_tile_moments<F: Real, const FMA: bool>(&mut self, phi: &[F], kw: &[F], vals: &[F], nb: usize, len: usize, stride: usize, wa: &mut [F]) {
        let p = self.num.len();
        for a in 0..nb {
            // φ₀ = 1: its row of weights is kw itself.
            let wa = if a == 0 {
                &kw[..len]
            } else {
                let pa = &phi[a * stride..a * stride + len];
                for j in 0..len {
                    wa[j] = kw[j] * pa[j];
                }
                &wa[..len]
            };
            for b in a..nb {
                self.mom[a * nb + b] += lanes::dot::<F, FMA>(wa, &phi[b * stride..b * stride + len]).f64();
            }
            for c in 0..p {
                self.cross[a * p + c] += lanes::dot::<F, FMA>(wa, &vals[c * stride..c * stride + len]).f64();
            }
        }
    }

    /// `add_tile_moments` for a basis of degree 0 (`NB` = 1) or 1 (`NB` = 1 + `D`) and at most
    /// one value column, with φ(x − q) formed in the lanes from the feature-major coordinates
    /// (`coords`, row stride `stride`) instead of stored: the same differences, products and
    /// multiply-adds in the same lane order as `fill_basis` followed by `add_tile_moments` (so
    /// the same bits), in one pass over the tile instead of 2·NB + NB(NB + 1)/2 + NB·p.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn add_tile_moments_in_lanes<F: Real, const D: usize, const NB: usize, const FMA: bool>(
        &mut self, q: &[F], coords: &[F], stride: usize, kw: &[F], v: Option<&[F]>,
    ) {
        const LANES: usize = lanes::LANES;
        let len = kw.len();
        let q: [F; D] = std::array::from_fn(|k| q[k]);
        let xs: [&[F]; D] = std::array::from_fn(|k| &coords[k * stride..k * stride + len]);
        let v = v.map(|v| &v[..len]);
        // One accumulator per (a ≤ b) moment and per cross moment, lanes as in `lanes::dot`.
        let mut mom = [[[F::zero(); LANES]; NB]; NB];
        let mut cross = [[F::zero(); LANES]; NB];
        let (mut mom_tail, mut cross_tail) = ([[F::zero(); NB]; NB], [F::zero(); NB]);
        let basis = |j: usize| -> [F; NB] { std::array::from_fn(|a| if a == 0 { F::one() } else { xs[a - 1][j] - q[a - 1] }) };
        let split = len - len % LANES;
        for j0 in (0..split).step_by(LANES) {
            // Fixed-length chunks keep bounds checks out of the lanes.
            let xc: [&[F; LANES]; D] = std::array::from_fn(|k| xs[k][j0..j0 + LANES].try_into().unwrap());
            let kc: &[F; LANES] = kw[j0..j0 + LANES].try_into().unwrap();
            let vc: Option<&[F; LANES]> = v.map(|v| v[j0..j0 + LANES].try_into().unwrap());
            for l in 0..LANES {
                let phi: [F; NB] = std::array::from_fn(|a| if a == 0 { F::one() } else { xc[a - 1][l] - q[a - 1] });
                for a in 0..NB {
                    let wa = if a == 0 { kc[l] } else { kc[l] * phi[a] };
                    for b in a..NB {
                        mom[a][b][l] = madd::<F, FMA>(wa, phi[b], mom[a][b][l]);
                    }
                    if let Some(vc) = vc {
                        cross[a][l] = madd::<F, FMA>(wa, vc[l], cross[a][l]);
                    }
                }
            }
        }
        for j in split..len {
            let phi = basis(j);
            for a in 0..NB {
                let wa = if a == 0 { kw[j] } else { kw[j] * phi[a] };
                for b in a..NB {
                    mom_tail[a][b] = madd::<F, FMA>(wa, phi[b], mom_tail[a][b]);
                }
                if let Some(v) = v {
                    cross_tail[a] = madd::<F, FMA>(wa, v[j], cross_tail[a]);
                }
            }
        }
        for a in 0..NB {
            for b in a..NB {
                self.mom[a * NB + b] += lanes::combine(mom[a][b], mom_tail[a][b]).f64();
            }
            if v.is_some() {
                self.cross[a] += lanes::combine(cross[a], cross_tail[a]).f64();
            }
        }
    }

    /// Gather per-query accumulators into arrays.
    pub fn finish<F: Real>(accs: Vec<Acc>, p: usize, basis: Option<usize>) -> Result<LocalSums<F>> {
        let nb = basis.unwrap_or(0);
        let LocalSums { mut num, mut den, mut log_scale, mut moments, mut cross } = LocalSums::try_zeros(accs.len(), p, basis)?;
        for (i, a) in accs.into_iter().enumerate() {
            let ls = if a.log_scale.is_finite() { a.log_scale } else { 0.0 };
            log_scale[i] = F::of(ls);
            den[i] = F::of(a.den);
            for c in 0..p {
                num[(i, c)] = F::of(a.num[c]);
            }
            if let (Some(mo), Some(cr)) = (moments.as_mut(), cross.as_mut()) {
                for r in 0..nb {
                    for c in r..nb {
                        let v = F::of(a.mom[r * nb + c]);
                        mo[(i, r, c)] = v;
                        mo[(i, c, r)] = v;
                    }
                    for c in 0..p {
                        cr[(i, r, c)] = F::of(a.cross[r * p + c]);
                    }
                }
            }
        }
        Ok(LocalSums { num, den, log_scale, moments, cross })
    }
}

/// `f(i)` for every query i in parallel, in chunks that are each gathered into arrays at once
/// (`in_batches`): no per-query accumulator outlives its chunk, and no chunk its batch, so
/// memory stays near the size of the output (which is allocated first). Stops between queries
/// once `mon` is stopped.
pub fn per_query<F: Real>(m: usize, p: usize, basis: Option<usize>, opts: &Options, f: impl Fn(usize) -> Acc + Sync) -> Result<LocalSums<F>> {
    let mut out = LocalSums::try_zeros(m, p, basis)?;
    // Enough chunks to balance the threads when per-query costs differ, at most 256 queries each.
    let chunk = (m / (16 * rayon::current_num_threads())).clamp(1, 256);
    opts.start_progress(m);
    in_batches(&mut out, m.div_ceil(chunk), None, |k| {
        let c0 = k * chunk;
        let accs: Vec<Acc> = (c0..(c0 + chunk).min(m))
            .map(|i| {
                opts.monitor.check()?;
                Ok(f(i))
            })
            .collect::<Result<_>>()?;
        opts.advance(accs.len());
        Acc::finish(accs, p, basis)
    })?;
    Ok(out)
}

/// `part(k)` for k in 0..count in parallel, stacked into `out` in k order (`stack_into` with
/// `order`) a batch of parts at a time: the parts waiting to be copied never hold more than a
/// batch of rows, where collecting them all would hold a second copy of the output (240 MB
/// for 10⁷ queries and one value column in f64). Each part is computed alone, so the batch
/// size (which follows the thread count) does not change any result.
pub fn in_batches<F: Real>(out: &mut LocalSums<F>, count: usize, order: Option<&[usize]>, part: impl Fn(usize) -> Result<LocalSums<F>> + Sync) -> Result<()> {
    let batch = 64 * rayon::current_num_threads();
    let mut next = 0;
    for b0 in (0..count).step_by(batch) {
        let parts: Vec<LocalSums<F>> = (b0..(b0 + batch).min(count)).into_par_iter().map(&part).collect::<Result<_>>()?;
        next = stack_into(out, parts, order, next);
    }
    Ok(())
}

/// Copy sums computed in parts into `out`: row k of the concatenation, counted from `first`,
/// goes to row `order[k]` (None: row k). Returns the count after the last row.
pub fn stack_into<F: Real>(out: &mut LocalSums<F>, parts: Vec<LocalSums<F>>, order: Option<&[usize]>, first: usize) -> usize {
    let mut k = first;
    for part in parts {
        for r in 0..part.den.len() {
            let i = order.map_or(k, |o| o[k]);
            out.num.row_mut(i).assign(&part.num.row(r));
            out.den[i] = part.den[r];
            out.log_scale[i] = part.log_scale[r];
            if let (Some(a), Some(b)) = (out.moments.as_mut(), &part.moments) {
                a.index_axis_mut(Axis(0), i).assign(&b.index_axis(Axis(0), r));
            }
            if let (Some(a), Some(b)) = (out.cross.as_mut(), &part.cross) {
                a.index_axis_mut(Axis(0), i).assign(&b.index_axis(Axis(0), r));
            }
            k += 1;
        }
    }
    k
}

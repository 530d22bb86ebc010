//! Reductions over a tile with independent lane accumulators.
//!
//! A plain `for` sum of floats is one serial dependency chain: the compiler may not
//! reorder it, so it neither vectorises nor pipelines. Sixteen interleaved partial sums
//! do both, and the order is still fixed, so results stay deterministic.

use crate::real::{madd, Real};

pub const LANES: usize = 16;

#[inline(always)]
pub(super) fn combine<F: Real>(acc: [F; LANES], tail: F) -> F {
    let mut a = acc;
    let mut w = LANES / 2;
    while w > 0 {
        for l in 0..w {
            a[l] = a[l] + a[l + w];
        }
        w /= 2;
    }
    a[0] + tail
}

/// Σ x·y, in fused multiply-adds when `FMA` (as in `Real::exp_with`).
#[inline(always)]
pub fn dot<F: Real, const FMA: bool>(x: &[F], y: &[F]) -> F {
    let y = &y[..x.len()];
    let mut acc = [F::zero(); LANES];
    let (cx, cy) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let tail = cx.remainder().iter().zip(cy.remainder()).fold(F::zero(), |a, (&u, &v)| madd::<F, FMA>(u, v, a));
    for (a, b) in cx.zip(cy) {
        for l in 0..LANES {
            acc[l] = madd::<F, FMA>(a[l], b[l], acc[l]);
        }
    }
    combine(acc, tail)
}

#[inline(always)]
pub fn max<F: Real>(x: &[F]) -> F {
    let mut acc = [F::neg_infinity(); LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder().iter().fold(F::neg_infinity(), |a, &b| if b > a { b } else { a });
    for c in chunks {
        for l in 0..LANES {
            acc[l] = if c[l] > acc[l] { c[l] } else { acc[l] };
        }
    }
    acc.iter().fold(tail, |a, &b| if b > a { b } else { a })
}

/// max_j f(x_j, y_j), with the same lanes as `max`.
#[inline(always)]
pub fn max_map<F: Real>(x: &[F], y: &[F], f: impl Fn(F, F) -> F) -> F {
    let y = &y[..x.len()];
    let mut acc = [F::neg_infinity(); LANES];
    let (cx, cy) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let tail = cx.remainder().iter().zip(cy.remainder()).fold(F::neg_infinity(), |a, (&u, &v)| {
        let b = f(u, v);
        if b > a {
            b
        } else {
            a
        }
    });
    for (a, b) in cx.zip(cy) {
        for l in 0..LANES {
            let v = f(a[l], b[l]);
            acc[l] = if v > acc[l] { v } else { acc[l] };
        }
    }
    acc.iter().fold(tail, |a, &b| if b > a { b } else { a })
}

/// Turn log-kernel (EXP) or kernel values into weights k·w in place, returning (Σ k·w, Σ k·w·v)
/// in one pass; `shift` is the running max subtracted before exponentiating. `FMA` as in
/// `Real::exp_with`.
#[inline(always)]
pub fn weigh<F: Real, const EXP: bool, const FMA: bool>(kw: &mut [F], w: &[F], v: Option<&[F]>, shift: F) -> (F, F) {
    let n = kw.len();
    let w = &w[..n];
    let v = v.map(|v| &v[..n]);
    let (mut a0, mut a1) = ([F::zero(); LANES], [F::zero(); LANES]);
    let (mut t0, mut t1) = (F::zero(), F::zero());
    let split = n - n % LANES;
    let weight = |k: F, wj: F| if EXP { (k - shift).exp_with::<FMA>() * wj } else { k * wj };
    // One copy of the lane loop per case, so that the one without values carries no test.
    // Fixed-length chunks keep bounds checks out of the lanes (with slices the loop stays
    // scalar, a scalar exp per pair).
    macro_rules! pass {
        ($v:expr) => {{
            for j0 in (0..split).step_by(LANES) {
                let wc: &[F; LANES] = w[j0..j0 + LANES].try_into().unwrap();
                let vc: Option<&[F; LANES]> = $v.map(|v: &[F]| v[j0..j0 + LANES].try_into().unwrap());
                let kc: &mut [F; LANES] = (&mut kw[j0..j0 + LANES]).try_into().unwrap();
                for l in 0..LANES {
                    let k = weight(kc[l], wc[l]);
                    kc[l] = k;
                    a0[l] = a0[l] + k;
                    if let Some(vc) = vc {
                        a1[l] = a1[l] + k * vc[l];
                    }
                }
            }
            for j in split..n {
                let k = weight(kw[j], w[j]);
                kw[j] = k;
                t0 = t0 + k;
                if let Some(v) = $v {
                    t1 = t1 + k * v[j];
                }
            }
        }};
    }
    match v {
        Some(v) => pass!(Some(v)),
        None => pass!(None::<&[F]>),
    }
    (combine(a0, t0), combine(a1, t1))
}

/// The direct path's steps for one query against one tile of `D`-dimensional references in
/// one pass: squared distances (feature-major `coords`, row stride `stride`) times `scale`,
/// their log-kernel values `log_k`, then `weigh::<EXP>` against `shift`. The operations and
/// their order are those of the separate passes (distance tile, kernel, `weigh`), so the bits
/// are the same, without the three round trips through memory between them. Returns
/// (Σ k·w, Σ k·w·v, max_j log k_j); `kw` receives the weights k·w.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn weigh_direct<F: Real, const D: usize, const FMA: bool>(
    q: &[F], coords: &[F], stride: usize, scale: F, log_k: impl Fn(F) -> F, w: &[F], v: Option<&[F]>, shift: F, kw: &mut [F],
) -> (F, F, F) {
    let n = kw.len();
    let w = &w[..n];
    let q: [F; D] = std::array::from_fn(|k| q[k]);
    let xs: [&[F]; D] = std::array::from_fn(|k| &coords[k * stride..k * stride + n]);
    let dist2 = |x: [F; D]| {
        let mut s = F::zero();
        for k in 0..D {
            let t = q[k] - x[k];
            s = s + t * t;
        }
        s
    };
    let (mut a0, mut a1, mut am) = ([F::zero(); LANES], [F::zero(); LANES], [F::neg_infinity(); LANES]);
    let (mut t0, mut t1, mut tm) = (F::zero(), F::zero(), F::neg_infinity());
    let split = n - n % LANES;
    // One copy of the lane loop per case, so that the one without values carries no test.
    // Fixed-length chunks keep bounds checks out of the lanes.
    macro_rules! pass {
        ($v:expr) => {{
            for j0 in (0..split).step_by(LANES) {
                let xc: [&[F; LANES]; D] = std::array::from_fn(|k| xs[k][j0..j0 + LANES].try_into().unwrap());
                let wc: &[F; LANES] = w[j0..j0 + LANES].try_into().unwrap();
                let vc: Option<&[F; LANES]> = $v.map(|v: &[F]| v[j0..j0 + LANES].try_into().unwrap());
                let kc: &mut [F; LANES] = (&mut kw[j0..j0 + LANES]).try_into().unwrap();
                for l in 0..LANES {
                    let lk = log_k(dist2(std::array::from_fn(|k| xc[k][l])) * scale);
                    am[l] = if lk > am[l] { lk } else { am[l] };
                    let k = (lk - shift).exp_with::<FMA>() * wc[l];
                    kc[l] = k;
                    a0[l] = a0[l] + k;
                    if let Some(vc) = vc {
                        a1[l] = a1[l] + k * vc[l];
                    }
                }
            }
            for j in split..n {
                let lk = log_k(dist2(std::array::from_fn(|k| xs[k][j])) * scale);
                tm = if lk > tm { lk } else { tm };
                let k = (lk - shift).exp_with::<FMA>() * w[j];
                kw[j] = k;
                t0 = t0 + k;
                if let Some(v) = $v {
                    t1 = t1 + k * v[j];
                }
            }
        }};
    }
    match v {
        Some(v) => {
            let v = &v[..n];
            pass!(Some(v))
        }
        None => pass!(None::<&[F]>),
    }
    let lmax = am.iter().fold(tm, |a, &b| if b > a { b } else { a });
    (combine(a0, t0), combine(a1, t1), lmax)
}

/// Σ x, with the lane order of the other reductions.
#[inline(always)]
pub fn sum<F: Real>(x: &[F]) -> F {
    let mut acc = [F::zero(); LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder().iter().fold(F::zero(), |a, &b| a + b);
    for c in chunks {
        for l in 0..LANES {
            acc[l] = acc[l] + c[l];
        }
    }
    combine(acc, tail)
}

/// x ← exp(x − shift) in place, returning Σ exp(x − shift): one step of an online softmax
/// (−∞ entries become 0). `FMA` as in `Real::exp_with`.
#[inline(always)]
pub fn exp_sum<F: Real, const FMA: bool>(x: &mut [F], shift: F) -> F {
    let mut acc = [F::zero(); LANES];
    let mut chunks = x.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            let e = (c[l] - shift).exp_with::<FMA>();
            c[l] = e;
            acc[l] = acc[l] + e;
        }
    }
    let mut tail = F::zero();
    for v in chunks.into_remainder() {
        let e = (*v - shift).exp_with::<FMA>();
        *v = e;
        tail = tail + e;
    }
    combine(acc, tail)
}

#[cfg(test)]
mod tests {
    #[test]
    fn lane_reductions_match_serial() {
        for n in [0usize, 1, 15, 16, 17, 100, 256] {
            let x: Vec<f64> = (0..n).map(|i| ((i * 37) % 11) as f64 - 4.5).collect();
            let y: Vec<f64> = (0..n).map(|i| ((i * 7) % 5) as f64 * 0.25).collect();
            let ones = vec![1.0; n];
            assert_eq!(super::weigh::<f64, false, false>(&mut x.clone(), &ones, None, 0.0).0, x.iter().sum::<f64>());
            assert_eq!(super::dot::<f64, false>(&x, &y), x.iter().zip(&y).map(|(a, b)| a * b).sum::<f64>());
            assert_eq!(super::max(&x), x.iter().cloned().fold(f64::NEG_INFINITY, f64::max));
            assert_eq!(super::sum(&x), x.iter().sum::<f64>());
            let mut e = x.clone();
            let s = super::exp_sum::<f64, false>(&mut e, 1.5);
            for (a, b) in e.iter().zip(&x) {
                assert!((a - (b - 1.5).exp()).abs() < 1e-15 * (b - 1.5).exp());
            }
            assert!((s - e.iter().sum::<f64>()).abs() < 1e-12 * (1.0 + s));
        }
    }
}

//! Asymmetric MDS with the exponential (softmax) link: the row-normalised kernel K̃ is fitted
//! by Q_i = softmax(Z₁[i] · Z₂ᵀ), minimising Σ_i w_i KL(K̃_i ‖ Q_i).
//!
//! The exact normaliser log Σ_j exp(z₁_i · z₂_j) is a kernel sum under the dot-product kernel
//! (the Python layer computes it with the engine). For large n this module estimates it from
//! the row's own support (its positives, always summed exactly) plus `n_negative` samples
//! k ~ π (a proposal over the columns) standing for the rest:
//!
//! ```text
//! Ẑ_i = Σ_{j ∈ P_i} e^{s_ij} + (1/S) Σ_s 1[k_s ∉ P_i] e^{s_{i k_s}} / π_{k_s},
//! ```
//!
//! an unbiased estimate of the normaliser that is exact when the support covers the row.
//! This is the word2vec idea (positive pairs from the data, negatives from a noise
//! distribution) applied to the softmax loss itself rather than to its logistic surrogate,
//! so the fit targets the same optimum as the exact loss.

use super::{stream, Scatter};
use crate::rows::row_major;
use crate::error::{LocalizationError, Result};
use crate::parallel::Monitor;
use ndarray::{s, Array2, ArrayView2, Zip};
use rand::Rng;

/// A row-normalised sparse target in CSR form (sorted column indices per row).
pub struct Target<'a> {
    pub indptr: &'a [usize],
    pub indices: &'a [usize],
    pub data: &'a [f64],
}

impl Target<'_> {
    fn validate(&self, n: usize) -> Result<()> {
        if self.indptr.len() != n + 1 || self.indptr[0] != 0 || self.indptr[n] != self.indices.len() || self.indices.len() != self.data.len() {
            return Err(LocalizationError::shape("affinity", format!("CSR of {n} rows"), format!("{} row pointers, {} entries", self.indptr.len(), self.indices.len())));
        }
        for i in 0..n {
            let (a, b) = (self.indptr[i], self.indptr[i + 1]);
            if a > b {
                return Err(LocalizationError::param("affinity", "row pointers must not decrease"));
            }
            let r = &self.indices[a..b];
            if r.iter().any(|&j| j >= n) || r.windows(2).any(|w| w[0] >= w[1]) {
                return Err(LocalizationError::param("affinity", "column indices must be sorted, unique and in range"));
            }
        }
        if self.data.iter().any(|v| !(*v >= 0.0) || !v.is_finite()) {
            return Err(LocalizationError::param("affinity", "entries must be finite and non-negative"));
        }
        Ok(())
    }
}

/// Settings of the sampled estimator.
#[derive(Clone, Debug)]
pub struct Sampler<'a> {
    /// Proposal π over the columns (sums to one).
    pub proposal: &'a [f64],
    pub n_negative: usize,
    pub seed: u64,
}

fn cdf(p: &[f64]) -> Vec<f64> {
    let mut acc = 0.0;
    p.iter().map(|v| {
        acc += v;
        acc
    }).collect()
}

fn check(z1: &ArrayView2<f64>, z2: &ArrayView2<f64>, t: &Target, w: &[f64], s: &Sampler) -> Result<()> {
    let n = z1.nrows();
    if z2.dim() != z1.dim() {
        return Err(LocalizationError::shape("key_embedding", format!("{:?}", z1.dim()), format!("{:?}", z2.dim())));
    }
    t.validate(n)?;
    if w.len() != n || w.iter().any(|v| !(*v >= 0.0) || !v.is_finite()) {
        return Err(LocalizationError::param("row_weight", format!("needs {n} finite non-negative values")));
    }
    if s.proposal.len() != n || s.proposal.iter().any(|v| !(*v >= 0.0) || !v.is_finite()) || !(s.proposal.iter().sum::<f64>() > 0.0) {
        return Err(LocalizationError::param("proposal", format!("needs {n} finite non-negative values with a positive sum")));
    }
    if s.n_negative == 0 {
        return Err(LocalizationError::param("n_negative", "must be at least 1"));
    }
    if z1.iter().chain(z2.iter()).any(|v| !v.is_finite() || v.abs() > 1e100) {
        return Err(LocalizationError::param("embedding", "coordinates must be finite and below 1e100 in magnitude"));
    }
    Ok(())
}

/// One evaluation of the sampled loss Σ_i w_i KL(P_i ‖ Q̂_i) and its gradient, returned as
/// an n × 2q matrix [∂/∂Z₁ | ∂/∂Z₂]. `stage` selects the random draws (e.g. the iteration).
pub fn sampled_loss_grad(z1: ArrayView2<f64>, z2: ArrayView2<f64>, t: &Target, w: &[f64], s: &Sampler, stage: u64) -> Result<(f64, Array2<f64>)> {
    check(&z1, &z2, t, w, s)?;
    let total: f64 = s.proposal.iter().sum();
    let pi: Vec<f64> = s.proposal.iter().map(|v| v / total).collect();
    Ok(eval(z1, z2, t, w, &pi, &cdf(&pi), s, stage))
}

#[allow(clippy::too_many_arguments)]
fn eval(z1: ArrayView2<f64>, z2: ArrayView2<f64>, t: &Target, w: &[f64], pi: &[f64], cdf: &[f64], s: &Sampler, stage: u64) -> (f64, Array2<f64>) {
    let (n, q) = z1.dim();
    let (a, b) = (row_major(z1), row_major(z2));
    let (a, b) = (&a[..], &b[..]);
    let zmax = a.iter().chain(b).fold(0.0f64, |m, v| m.max(v.abs()));
    let sc = Scatter::new(n, 2 * q, 2.0 * w.iter().sum::<f64>() * zmax);
    let rows: Vec<u32> = (0..n as u32).collect();
    let last = *cdf.last().unwrap_or(&1.0);
    let (g, loss) = sc.run(&rows, 64, |i, _, emit| {
        let (lo, hi) = (t.indptr[i], t.indptr[i + 1]);
        if w[i] == 0.0 || lo == hi {
            return 0.0;
        }
        let wi = w[i];
        let zi = &a[i * q..(i + 1) * q];
        let key = |j: usize| &b[j * q..(j + 1) * q];
        let dot = |j: usize| zi.iter().zip(key(j)).map(|(u, v)| u * v).sum::<f64>();
        let pos = &t.indices[lo..hi];
        let pdat = &t.data[lo..hi];
        let mut rng = stream(s.seed, stage.wrapping_add(2), i as u64);
        let samples: Vec<usize> = (0..s.n_negative)
            .map(|_| {
                let u = rng.random::<f64>() * last;
                cdf.partition_point(|&c| c <= u).min(n - 1)
            })
            .filter(|k| pos.binary_search(k).is_err())
            .collect();
        let sp: Vec<f64> = pos.iter().map(|&j| dot(j)).collect();
        let sn: Vec<f64> = samples.iter().map(|&k| dot(k)).collect();
        let mx = sp.iter().chain(&sn).fold(f64::NEG_INFINITY, |m, &v| m.max(v));
        let ep: Vec<f64> = sp.iter().map(|v| (v - mx).exp()).collect();
        let en: Vec<f64> = samples.iter().zip(&sn).map(|(&k, v)| (v - mx).exp() / (s.n_negative as f64 * pi[k])).collect();
        let zhat: f64 = ep.iter().sum::<f64>() + en.iter().sum::<f64>();
        let mut g1 = vec![0.0; q];
        let mut row = vec![0.0; q];
        let mut loss = mx + zhat.ln();
        for ((&j, &p), (&e, &sj)) in pos.iter().zip(pdat).zip(ep.iter().zip(&sp)) {
            if p > 0.0 {
                loss += p * (p.ln() - sj);
            }
            let c = wi * (e / zhat - p);
            for (gc, kv) in g1.iter_mut().zip(key(j)) {
                *gc += c * kv;
            }
            for (r, zv) in row.iter_mut().zip(zi) {
                *r = c * zv;
            }
            emit.add(j, q, &row);
        }
        for (&k, &e) in samples.iter().zip(&en) {
            let c = wi * e / zhat;
            for (gc, kv) in g1.iter_mut().zip(key(k)) {
                *gc += c * kv;
            }
            for (r, zv) in row.iter_mut().zip(zi) {
                *r = c * zv;
            }
            emit.add(k, q, &row);
        }
        emit.add(i, 0, &g1);
        wi * loss
    });
    (loss, g)
}

/// Adam with a learning rate decaying linearly to zero (stochastic gradients need it).
#[derive(Clone, Debug)]
pub struct Adam {
    pub learning_rate: f64,
    pub n_iter: usize,
}

pub struct Fitted {
    pub z1: Array2<f64>,
    pub z2: Array2<f64>,
    /// The sampled loss at every iteration.
    pub loss: Vec<f64>,
}

/// Adam on the sampled loss from (`z1`, `z2`), the learning rate decaying linearly to zero.
///
/// Call it inside the pool that should do the work; it reports each finished iteration to
/// `mon` and returns `Interrupted` between iterations once `mon` is stopped.
#[allow(clippy::too_many_arguments)]
pub fn fit_sampled(z1: ArrayView2<f64>, z2: ArrayView2<f64>, t: &Target, w: &[f64], s: &Sampler, opt: &Adam, mon: &Monitor) -> Result<Fitted> {
    check(&z1, &z2, t, w, s)?;
    if !(opt.learning_rate > 0.0) || !opt.learning_rate.is_finite() {
        return Err(LocalizationError::param("learning_rate", "must be finite and > 0"));
    }
    let (n, q) = z1.dim();
    let total: f64 = s.proposal.iter().sum();
    let pi: Vec<f64> = s.proposal.iter().map(|v| v / total).collect();
    let c = cdf(&pi);
    let mut theta = Array2::<f64>::zeros((n, 2 * q));
    theta.slice_mut(s![.., ..q]).assign(&z1);
    theta.slice_mut(s![.., q..]).assign(&z2);
    let mut m1 = Array2::<f64>::zeros(theta.dim());
    let mut m2 = Array2::<f64>::zeros(theta.dim());
    let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8);
    let mut history = Vec::with_capacity(opt.n_iter);
    mon.set_progress(0, opt.n_iter);
    for it in 0..opt.n_iter {
        mon.check()?;
        let lr = opt.learning_rate * (1.0 - it as f64 / opt.n_iter as f64);
        let (c1, c2) = (1.0 - b1.powi(it as i32 + 1), 1.0 - b2.powi(it as i32 + 1));
        let l = {
            let (l, g) = eval(theta.slice(s![.., ..q]), theta.slice(s![.., q..]), t, w, &pi, &c, s, it as u64);
            Zip::from(&mut theta).and(&mut m1).and(&mut m2).and(&g).par_for_each(|th, m, v, &g| {
                *m = b1 * *m + (1.0 - b1) * g;
                *v = b2 * *v + (1.0 - b2) * g * g;
                *th -= lr * (*m / c1) / ((*v / c2).sqrt() + eps);
            });
            l
        };
        history.push(l);
        if theta.iter().any(|v| !v.is_finite() || v.abs() > 1e100) {
            return Err(LocalizationError::param("learning_rate", format!("the embedding diverged at iteration {}; lower it", it + 1)));
        }
        mon.set_progress(it + 1, opt.n_iter);
    }
    Ok(Fitted { z1: theta.slice(s![.., ..q]).to_owned(), z2: theta.slice(s![.., q..]).to_owned(), loss: history })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    /// Exact Σ_i w_i KL(P_i ‖ softmax(z1_i · Z2ᵀ)) for a dense P.
    fn exact(z1: &Array2<f64>, z2: &Array2<f64>, p: &Array2<f64>, w: &[f64]) -> f64 {
        let s = z1.dot(&z2.t());
        (0..p.nrows())
            .map(|i| {
                let mx = s.row(i).iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
                let lse = mx + s.row(i).iter().map(|v| (v - mx).exp()).sum::<f64>().ln();
                w[i] * (0..p.ncols()).filter(|&j| p[(i, j)] > 0.0).map(|j| p[(i, j)] * (p[(i, j)].ln() - s[(i, j)] + lse)).sum::<f64>()
            })
            .sum()
    }

    #[test]
    fn full_support_rows_give_the_exact_loss_and_gradient() {
        let mut rng = StdRng::seed_from_u64(2);
        let (n, q) = (9, 3);
        let z1 = Array2::from_shape_fn((n, q), |_| rng.random::<f64>() - 0.5);
        let z2 = Array2::from_shape_fn((n, q), |_| rng.random::<f64>() - 0.5);
        let mut p = Array2::from_shape_fn((n, n), |_| rng.random::<f64>() + 0.1);
        for mut r in p.rows_mut() {
            let s = r.sum();
            r /= s;
        }
        let w: Vec<f64> = (0..n).map(|i| 1.0 + i as f64 / n as f64).collect();
        let indptr: Vec<usize> = (0..=n).map(|i| i * n).collect();
        let indices: Vec<usize> = (0..n * n).map(|t| t % n).collect();
        let data: Vec<f64> = p.iter().copied().collect();
        let t = Target { indptr: &indptr, indices: &indices, data: &data };
        let prop = vec![1.0; n];
        let s = Sampler { proposal: &prop, n_negative: 5, seed: 0 };
        let (l, g) = sampled_loss_grad(z1.view(), z2.view(), &t, &w, &s, 0).unwrap();
        assert!((l - exact(&z1, &z2, &p, &w)).abs() < 1e-12);
        let h = 1e-6;
        for (r, c) in [(0, 0), (4, 2), (8, 1)] {
            for side in 0..2 {
                let (mut a1, mut a2) = (z1.clone(), z2.clone());
                let (mut b1, mut b2) = (z1.clone(), z2.clone());
                if side == 0 {
                    a1[(r, c)] += h;
                    b1[(r, c)] -= h;
                } else {
                    a2[(r, c)] += h;
                    b2[(r, c)] -= h;
                }
                let fd = (exact(&a1, &a2, &p, &w) - exact(&b1, &b2, &p, &w)) / (2.0 * h);
                assert!((fd - g[(r, side * q + c)]).abs() < 1e-7, "{fd} {}", g[(r, side * q + c)]);
            }
        }
    }
}

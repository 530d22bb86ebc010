"""Kernel density estimation and the score function (SPEC §4)."""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._base import LocalEstimator, keeps_state_on_error
from ._validation import FLOAT_DTYPES, check_allocation, check_positive_int, validate_data
from .kernels import SPECIAL, Balloon, SamplePoint, canonical_name, log_normalization

# Shadow profiles: -k'(u)/u = c · shadow(u), so ∇ log p̂ = c Σ shadow·w·(xᵢ − x) / (h² Σ k·w).
_SHADOW = {"gaussian": ("gaussian", 1.0), "epanechnikov": ("tophat", 2.0), "biweight": ("epanechnikov", 4.0), "triweight": ("biweight", 6.0)}


def log_density(log_sum, total_weight, log_norm, log_volume):
    """log p̂ from log Σ K w: minus log Σ w, log ∫ k and log ∏ h (the fixed bandwidth)."""
    return log_sum - np.log(total_weight) - log_norm - log_volume


class KernelDensity(LocalEstimator):
    """Kernel density estimate p̂(x) = Σᵢ wᵢ K_h(x − xᵢ) / Σᵢ wᵢ with any profile of SPEC §1.

    Names and normalisations of gaussian, tophat, epanechnikov, exponential, linear and
    cosine agree with scikit-learn's ``KernelDensity``; the other profiles carry their own
    d-dimensional constants. ``score_samples`` works in the log domain, so it stays finite
    for densities far below the smallest float.

    Parameters
    ----------
    bandwidth : float, array, rule name, Balloon or SamplePoint, default=1.0
        ``"scott"`` and ``"silverman"`` are scikit-learn's rules (n^(−1/(d+4)) and
        (n(d+2)/4)^(−1/(d+4)), from n and d only), so the same spelling gives the same
        density; ``"scott_scaled"`` and ``"silverman_scaled"`` multiply them by each
        feature's standard deviation. Per-feature arrays and the scaled rules divide by
        ∏ⱼ hⱼ; adaptive rules by h(x)^d or hᵢ^d.
    kernel : str or Kernel, default="gaussian"
    algorithm : {"auto", "brute", "kd_tree", "expansion"}, default="auto"
    n_jobs : int, optional

    Attributes
    ----------
    bandwidth_ : float, ndarray of shape (n_features,), Balloon or SamplePoint
        The bandwidth used: the number a rule gave (an array for per-feature bandwidths),
        or the adaptive rule itself.

    Examples
    --------
    >>> import numpy as np
    >>> from localization import KernelDensity
    >>> kde = KernelDensity(bandwidth=1.0).fit(np.zeros((1, 1)))
    >>> round(float(np.exp(kde.score_samples([[0.0]]))[0]), 6)  # 1/sqrt(2 pi)
    0.398942
    """

    def __init__(self, bandwidth=1.0, kernel="gaussian", algorithm="auto", n_jobs=None):
        self.bandwidth = bandwidth
        self.kernel = kernel
        self.algorithm = algorithm
        self.n_jobs = n_jobs

    @keeps_state_on_error
    def fit(self, X, y=None, sample_weight=None):
        """Store the sample. Returns self."""
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", densify=True)
        self._store(X, sample_weight)
        name = getattr(self.kernel_, "name", None)
        if not isinstance(name, str) or name in SPECIAL:
            raise ValueError("KernelDensity needs a single radial profile kernel (not knn, dot, identity, a callable "
                             f"or a combination of kernels), got {self.kernel!r}")
        self._log_norm = log_normalization(name, X.shape[1])
        bk = self._bound()
        if isinstance(self.kernel_.bandwidth, (Balloon, SamplePoint)):
            self.bandwidth_ = self.kernel_.bandwidth
        else:
            self.bandwidth_ = bk.h if bk.feature_scale is None else bk.feature_scale.copy()
        return self

    def score_samples(self, X):
        """log p̂(x) for each row of X (−inf where the density is exactly zero)."""
        check_is_fitted(self)
        bk = self._bound()
        Q = self._query(X)
        w = self.sample_weight_
        d = Q.shape[1]
        weights = w
        if bk.sample_h is not None:
            hw = bk.sample_h.astype(np.float64) ** (-d)
            weights = (hw if w is None else w * hw).astype(Q.dtype)
        _, den, log_scale, _, _ = bk.sums(Q, None, weights, algorithm=self.algorithm, n_jobs=self.n_jobs)
        total = len(self.X_fit_) if w is None else float(np.sum(w, dtype=np.float64))
        with np.errstate(divide="ignore"):
            out = log_density(np.log(den.astype(np.float64)) + log_scale, total, self._log_norm, bk.log_bandwidth_volume)
        if isinstance(self.kernel_.bandwidth, Balloon):
            out -= d * np.log(bk.query_bandwidth(bk._scale(Q)).astype(np.float64))
        return out

    def score(self, X, y=None):
        """Total log-likelihood of X under the model."""
        return float(np.sum(self.score_samples(X)))

    def score_function(self, X):
        """The score ∇ₓ log p̂(x), shape (n_queries, n_features).

        Exact for the differentiable profiles whose derivative is again a profile: gaussian
        (then score = (m(x) − x)/h², SPEC §9 identity 4), epanechnikov, biweight and
        triweight, with a scalar or per-feature bandwidth.
        """
        check_is_fitted(self)
        name = self.kernel_.name
        if name not in _SHADOW:
            raise ValueError(f"score_function supports {sorted(_SHADOW)}, not {name!r}")
        bk = self._bound()
        if bk.sample_h is not None or isinstance(self.kernel_.bandwidth, Balloon):
            raise ValueError("score_function needs a fixed (scalar or per-feature) bandwidth")
        Q = self._query(X)
        Qs = bk._scale(Q)
        shadow, c = _SHADOW[name]
        kw = dict(bandwidth=bk.h, weights=self.sample_weight_, algorithm=self.algorithm, n_jobs=self.n_jobs)
        from . import _core

        num, sden, sls, _, _ = _core.local_sums(Qs, bk.Xs, bk.Xs, kernel=shadow, **kw)
        _, den, ls, _, _ = _core.local_sums(Qs, bk.Xs, None, kernel=name, **kw)
        num = num.astype(np.float64) - Qs.astype(np.float64) * sden.astype(np.float64)[:, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            g = c * num * np.exp(sls - ls)[:, None] / (bk.h**2 * den.astype(np.float64)[:, None])
        g[~(den > 0)] = np.nan
        if bk.feature_scale is not None:
            g /= bk.feature_scale
        return g

    def sample(self, n_samples=1, random_state=None):
        """Draw from p̂: pick a sample point by weight, add a draw from the kernel.

        For the gaussian and tophat kernels with a scalar bandwidth the draws are
        scikit-learn's: the same ``random_state`` gives the same points. A point is picked by
        one uniform draw against the cumulative weights, so integer weights give the same
        draws as repeated points and constant weights the same as none.

        Parameters
        ----------
        n_samples : int, default=1
        random_state : int, RandomState or None

        Returns
        -------
        ndarray of shape (n_samples, n_features)
        """
        check_is_fitted(self)
        n_samples = check_positive_int(n_samples, "n_samples")
        X = self.X_fit_
        n, d = X.shape
        # The picks, the kernel draws and the result, in float64.
        check_allocation(8 * n_samples * (2 * d + 2), "n_samples", f"{n_samples} draws of {d} features")
        rng = check_random_state(random_state)
        bk = self._bound()
        if isinstance(self.kernel_.bandwidth, Balloon):
            raise ValueError("sampling needs a fixed or SamplePoint bandwidth")
        u = rng.uniform(0, 1, size=n_samples)
        if self.sample_weight_ is None:
            idx = (u * n).astype(np.int64)
        else:
            cumulative = np.cumsum(self.sample_weight_, dtype=np.float64)
            idx = np.minimum(np.searchsorted(cumulative, u * cumulative[-1]), n - 1)
        draws = _radial_draws(canonical_name(self.kernel_.name), d, n_samples, rng)
        scale = bk.h if bk.sample_h is None else bk.sample_h[idx].astype(np.float64)[:, None]
        if bk.feature_scale is not None:
            scale = scale * bk.feature_scale
        return X[idx].astype(np.float64) + draws * scale


def _radial_draws(name, d, n, rng):
    """n draws from the density ∝ k(‖u‖) in ℝ^d (h = 1).

    Gaussian and tophat use scikit-learn's draws: a standard normal, radially mapped onto the
    uniform ball by the regularised incomplete gamma function for the tophat.
    """
    direction = rng.standard_normal((n, d))
    if name == "gaussian":
        return direction
    if name == "tophat":
        from scipy.special import gammainc

        r2 = np.einsum("ij,ij->i", direction, direction)
        return direction * (gammainc(0.5 * d, 0.5 * r2) ** (1.0 / d) / np.sqrt(r2))[:, None]
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    if name == "exponential":
        return direction * rng.gamma(d, 1.0, size=(n, 1))
    if name == "cauchy":  # integrable only for d = 1 (checked at fit)
        return rng.standard_cauchy((n, 1))
    # Compact profiles (k ≤ 1 on the unit ball): rejection from the uniform ball.
    from .kernels import profile

    out = np.empty((0, d))
    while len(out) < n:
        m = 2 * (n - len(out)) + 16
        r = rng.uniform(size=m) ** (1.0 / d)
        keep = rng.uniform(size=m) < profile(name, r)
        dirs = rng.standard_normal((m, d))
        dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
        out = np.vstack([out, dirs[keep] * r[keep, None]])
    return out[:n]

"""Kernel density estimation and the score function."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, overload

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from . import _binned
from ._base import LOO_KERNEL_CONSTRAINTS, LocalEstimator, keeps_state_on_error
from ._validation import FLOAT_DTYPES, LocalizationError, check_allocation, check_positive_int, fit_context, validate_data
from .adaptive import LOO_RULES, MultiKernel, base_kernel, fit_loo, fixed_gaussian, fit_multikernel_density, is_loo
from .engine import bind_kernel
from .kernels import SPECIAL, Balloon, Kernel, SamplePoint, bandwidth_constraint, canonical_name, log_normalization

if TYPE_CHECKING:
    from ._typing import ArrayLike, BandwidthLike, FloatArray, KernelLike, SeedLike, Self

LSCV_RULES = ("lscv", "lscv_per_feature")

# Shadow profiles: -k'(u)/u = c · shadow(u), so ∇ log p̂ = c Σ shadow·w·(xᵢ − x) / (h² Σ k·w).
_SHADOW = {"gaussian": ("gaussian", 1.0), "epanechnikov": ("tophat", 2.0), "biweight": ("epanechnikov", 4.0), "triweight": ("biweight", 6.0)}


def log_density(log_sum, log_total_weight, log_norm, log_volume):
    """log p̂ from log Σ K w: minus log Σ w, log ∫ k and log ∏ h (the fixed bandwidth)."""
    return log_sum - log_total_weight - log_norm - log_volume


class KernelDensity(LocalEstimator):
    """Kernel density estimate p̂(x) = Σᵢ wᵢ K_h(x − xᵢ) / Σᵢ wᵢ with any radial profile.

    Names and normalisations of gaussian, tophat, epanechnikov, exponential, linear and
    cosine agree with scikit-learn's ``KernelDensity``; the other profiles carry their own
    d-dimensional constants. ``score_samples`` works in the log domain, so it stays finite
    for densities far below the smallest float.

    Parameters
    ----------
    bandwidth : float, array, rule name, "loo", "lscv", Balloon or SamplePoint, default=1.0
        ``"scott"`` and ``"silverman"`` are scikit-learn's rules (n^(−1/(d+4)) and
        (n(d+2)/4)^(−1/(d+4)), from n and d only), so the same spelling gives the same
        density; ``"scott_scaled"`` and ``"silverman_scaled"`` multiply them by each
        feature's standard deviation. Per-feature arrays and the scaled rules divide by
        ∏ⱼ hⱼ; adaptive rules by h(x)^d or hᵢ^d.
        ``"loo"`` maximises the exact leave-one-out log-likelihood Σᵢ wᵢ log p̂₋ᵢ(xᵢ)
        (likelihood cross-validation, statsmodels' ``cv_ml``); ``"lscv"`` (gaussian
        kernel) minimises the least-squares cross-validation criterion
        ∫p̂² − 2 Σᵢ wᵢ p̂₋ᵢ(xᵢ)/Σw (statsmodels' ``cv_ls``). Both search a log grid refined
        by golden section; ``"loo_per_feature"`` and ``"lscv_per_feature"`` continue with
        one bandwidth per feature by gradient descent. A Kernel object's bandwidth is scaled.
    kernel : str, Kernel or MultiKernel, default="gaussian"
        A :class:`~localization.adaptive.MultiKernel` gives the mixture density
        Σ_l w_l p̂_l of its kernels (each with its own bandwidth), with simplex weights
        ``kernel_weights_`` that maximise the exact LOO log-likelihood (a concave problem,
        solved to its global maximum).
    bandwidth_grid : array-like, optional
        Candidate bandwidths (factors of a Kernel object's own) for the LOO rules.
    algorithm : {"auto", "brute", "kd_tree", "expansion", "binned"}, default="auto"
        As in :func:`~localization.local_mean`. ``"binned"`` is approximate (a regular grid
        and one FFT convolution, 1–3 features, fixed bandwidth), with an error bound that
        ``score_samples(X, return_error_bound=True)`` returns.
    n_jobs : int, optional
    grid_size : int or sequence of int, optional
        Grid nodes per feature of ``algorithm="binned"``.
    atol, rtol : float, optional
        Tolerances on the density p̂ that let ``algorithm="auto"`` use the binned path where
        its bound meets them at every query (see :func:`~localization.local_mean`).
    verbose : bool, default=False
        Progress bars on stderr for calls that last more than 0.2 s: the leave-one-out
        bandwidth search (one step per evaluation), the kernel weights of a MultiKernel and
        predictions on many queries.

    Attributes
    ----------
    bandwidth_ : float, ndarray of shape (n_features,), Balloon or SamplePoint
        The bandwidth used: the number a rule gave (an array for per-feature bandwidths),
        or the adaptive rule itself.
    cv_results_ : dict
        LOO rules only: every evaluated ``"bandwidth"``, its ``"objective"`` (the negative
        mean LOO log-likelihood, or the LSCV criterion) and the ``"stage"`` of the search.
        With a MultiKernel: ``"kernel_loo_log_likelihood"`` (each kernel alone) and
        ``"loo_log_likelihood"`` (the mixture).
    kernel_weights_ : ndarray of shape (n_kernels,)
        MultiKernel only: the mixture weights, on the simplex.

    Examples
    --------
    >>> import numpy as np
    >>> from localization import KernelDensity
    >>> kde = KernelDensity(bandwidth=1.0).fit(np.zeros((1, 1)))
    >>> round(float(np.exp(kde.score_samples([[0.0]]))[0]), 6)  # 1/sqrt(2 pi)
    0.398942
    """

    _parameter_constraints = {
        **{name: c for name, c in LOO_KERNEL_CONSTRAINTS.items() if name != "n_neighbors"},
        "bandwidth": bandwidth_constraint(LOO_RULES + LSCV_RULES),
        **_binned.CONSTRAINTS,
    }

    def __init__(self, bandwidth: BandwidthLike = 1.0, kernel: KernelLike = "gaussian", bandwidth_grid: ArrayLike | None = None,
                 algorithm: str = "auto", n_jobs: int | None = None, grid_size: int | Sequence[int] | None = None,
                 atol: float | None = None, rtol: float | None = None, verbose: int | bool = False) -> None:
        self.bandwidth = bandwidth
        self.kernel = kernel
        self.bandwidth_grid = bandwidth_grid
        self.algorithm = algorithm
        self.n_jobs = n_jobs
        self.grid_size = grid_size
        self.atol = atol
        self.rtol = rtol
        self.verbose = verbose

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None, sample_weight: ArrayLike | None = None) -> Self:
        """Store the sample. Returns self."""
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", densify=True)
        _binned.check_params(self, X.shape[1])
        self._store(X, sample_weight)
        multi = isinstance(self.kernel, MultiKernel)
        for k in self.kernel.kernels if multi else [self.kernel_]:
            name = getattr(k, "name", None)
            if not isinstance(name, str) or name in SPECIAL:
                raise LocalizationError("KernelDensity needs a single radial profile kernel (not knn, dot, identity, a callable "
                                        f"or a combination of kernels), got {k!r}", "kernel")
            self._bind(k)  # validates its bandwidth
        if multi:
            fit_multikernel_density(self, lambda k: self._log_density(self._bind(k), self.X_fit_, exclude_self=True))
            self.bandwidth_ = self.bandwidth
            return self
        if is_loo(self.bandwidth, LOO_RULES + LSCV_RULES):
            self._fit_loo()
        bk = self._bound()
        if isinstance(self.kernel_.bandwidth, (Balloon, SamplePoint)):
            self.bandwidth_ = self.kernel_.bandwidth
        else:
            self.bandwidth_ = bk.h if bk.feature_scale is None else bk.feature_scale.copy()
        return self

    def _fit_loo(self):
        if isinstance(self.kernel_.bandwidth, (Balloon, SamplePoint)):
            raise LocalizationError(f"bandwidth={self.bandwidth!r} needs a kernel with a fixed bandwidth, not {self.kernel_!r}", "bandwidth")
        lscv = self.bandwidth in LSCV_RULES
        if lscv and self.kernel_.name != "gaussian":
            raise LocalizationError(f"bandwidth={self.bandwidth!r} (least-squares cross-validation) is offered for the "
                                    f"gaussian kernel, not {self.kernel_.name!r}; use bandwidth='loo'", "bandwidth")
        if lscv:
            fit_loo(self, self._lscv, n_features=self.X_fit_.shape[1])
        else:
            fit_loo(self, self._negative_loo_likelihood, n_features=self.X_fit_.shape[1], gradient=self._analytic_loo_gradient())

    def _log_density(self, bk, Q, exclude_self=False, return_bound=False, progress=None):
        """log p̂ at the rows of Q under the bound kernel; ``exclude_self``: Q is the sample and
        each point's own term (and weight) is left out. ``return_bound``: also a bound on
        ``|log p̂ − log p̂_exact|`` (0 on the exact paths)."""
        w = self.sample_weight_
        d = Q.shape[1]
        log_norm = log_normalization(bk.name, d)
        weights, log_unit = w, 0.0
        if bk.sample_h is not None:
            weights, log_unit = bk.kept("sample_point_weights", lambda: _sample_point_weights(bk.sample_h, w, d, Q.dtype))
        log_total = self._log_total_weight()
        log_sum = None  # log Σ K w
        if bk.sample_h is None and _binned.select(bk, Q, algorithm=self.algorithm, grid_size=self.grid_size,
                                                  atol=self.atol, rtol=self.rtol):
            b = bk.binned(Q, None, weights, exclude_self=exclude_self, grid_size=self.grid_size, n_jobs=self.n_jobs,
                          local_bound=return_bound or self.atol is not None or self.rtol is not None, progress=progress)
            bound = b.den_bound + b.rounding(b.den, np.float64)
            # the tolerance is on the density: p̂ = Σ K w · exp(−log Σw − log ∫k − log ∏h)
            unit = np.exp(-log_total - log_norm - bk.log_bandwidth_volume)
            if self.algorithm == "binned" or _binned.tolerance_met(b.den * unit, bound * unit, self.atol, self.rtol):
                with np.errstate(divide="ignore"):
                    log_sum = np.log(b.den.astype(np.float64))
                log_err = _binned.log_bound(b.den, bound)
        if log_sum is None:
            log_sum = bk.sums(Q, None, weights, exclude_self=exclude_self, algorithm=self.algorithm,
                              n_jobs=self.n_jobs, prepared=True, progress=progress).log_total()
            log_err = np.zeros(len(Q))
        out = self._normalised(bk, log_sum + log_unit, d, exclude_self)
        if isinstance(bk.kernel.bandwidth, Balloon):
            out -= d * np.log(bk.query_bandwidth(bk._scale(Q)).astype(np.float64))
        return (out, log_err) if return_bound else out

    def _log_total_weight(self):
        return np.log(len(self.X_fit_)) if self.sample_weight_ is None else _log_sum(self.sample_weight_)

    def _normalised(self, bk, log_sum, d, exclude_self):
        """log p̂ from log Σ K w at d-feature queries (the sample itself with ``exclude_self``:
        each point's own weight leaves the total)."""
        w, log_total = self.sample_weight_, self._log_total_weight()
        with np.errstate(divide="ignore", invalid="ignore"):
            if exclude_self:
                # log(T − wᵢ) = log T + log1p(−wᵢ/T), with wᵢ/T taken in the log domain (T may overflow).
                own = np.ones(len(log_sum)) if w is None else w.astype(np.float64)
                log_total = log_total + np.log1p(-np.exp(np.log(own) - log_total))
            return log_density(log_sum, log_total, log_normalization(bk.name, d), bk.log_bandwidth_volume)

    def _bind(self, kernel):
        return bind_kernel(kernel, self.X_fit_, self.sample_weight_, False, type(self).__name__)

    def _negative_loo_likelihood(self, kernel):
        """−(1/Σw) Σᵢ wᵢ log p̂₋ᵢ(xᵢ); inf where a point has no neighbour."""
        return self._negative_mean(self._log_density(self._bind(kernel), self.X_fit_, exclude_self=True))

    def _negative_mean(self, logp):
        w = None if self.sample_weight_ is None else self.sample_weight_.astype(np.float64)
        return -float(np.average(logp, weights=w)) if np.all(np.isfinite(logp)) else np.inf

    def _analytic_loo_gradient(self):
        """(objective, ∂objective/∂log h) of the LOO likelihood from one engine pass, where it is
        analytic: a gaussian kernel with a fixed bandwidth, float64 data and exact sums; else
        None (forward differences, d + 1 passes per gradient).

        For the product kernel, ∂ log Σⱼ wⱼ Kᵢⱼ / ∂ log hₖ = Eᵢ[zₖ²], the mean of
        zₖ² = (xᵢₖ − xⱼₖ)²/hₖ² under the weights wⱼKᵢⱼ, and ∂ log ∏h / ∂ log hₖ = 1, so the gradient of
        −Σᵢ wᵢ log p̂₋ᵢ(xᵢ)/W is −Σᵢ wᵢ (Eᵢ[zₖ²] − 1)/W. Eᵢ[zₖ²] = uᵢₖ² − 2uᵢₖ Eᵢ[uₖ] + Eᵢ[uₖ²]
        in centred, scaled coordinates u (so the split loses no digits to an offset): the
        sums of [u, u²] in the pass that gives the objective."""
        if not (fixed_gaussian(base_kernel(self.kernel)) and self.X_fit_.dtype == np.float64
                and self.algorithm != "binned" and not (self.atol or self.rtol)):
            return None
        X, w = self.X_fit_, self.sample_weight_
        d = X.shape[1]
        Xc = X - X.mean(axis=0)

        def gradient(kernel):
            bk = self._bind(kernel)
            h = bk.h * (np.ones(d) if bk.feature_scale is None else bk.feature_scale)
            U = Xc / h
            sums = bk.sums(X, np.hstack([U, U * U]), w, exclude_self=True, algorithm=self.algorithm,
                           n_jobs=self.n_jobs, prepared=True, values_per_call=True)
            with np.errstate(divide="ignore", invalid="ignore"):
                moments = sums.num / sums.den[:, None]
            sq = U * U - 2.0 * U * moments[:, :d] + moments[:, d:]
            objective = self._negative_mean(self._normalised(bk, sums.log_total(), d, exclude_self=True))
            weights = None if w is None else w.astype(np.float64)
            return objective, -(np.average(sq, axis=0, weights=weights) - 1.0)

        return gradient

    def _lscv(self, kernel):
        """∫p̂² − 2 Σᵢ wᵢ p̂₋ᵢ(xᵢ)/W for the gaussian kernel: ∫p̂² is the density of the
        differences, a gaussian sum with bandwidth √2·h."""
        X = self.X_fit_
        w = np.ones(len(X)) if self.sample_weight_ is None else self.sample_weight_.astype(np.float64)
        W = w.sum()
        wide = Kernel("gaussian", np.sqrt(2.0) * np.asarray(kernel.bandwidth, dtype=np.float64))
        log_sq = self._log_density(self._bind(wide), X)  # log of Σⱼ wⱼ N(xᵢ − xⱼ; 0, 2h²) / W
        log_loo = self._log_density(self._bind(kernel), X, exclude_self=True)
        return float(np.sum(w * np.exp(log_sq)) / W - 2.0 * np.sum(w * np.exp(log_loo)) / W)

    @overload
    def score_samples(self, X: ArrayLike, return_error_bound: Literal[False] = False) -> FloatArray: ...
    @overload
    def score_samples(self, X: ArrayLike, return_error_bound: Literal[True]) -> tuple[FloatArray, FloatArray]: ...
    def score_samples(self, X: ArrayLike, return_error_bound: bool = False) -> FloatArray | tuple[FloatArray, FloatArray]:
        """log p̂(x) for each row of X (−inf where the density is exactly zero).

        ``return_error_bound=True`` also returns a bound on ``|log p̂ − log p̂_exact|`` per row: 0 on
        the exact paths; with ``algorithm="binned"`` it comes from the bound on the kernel sum,
        −log(1 − bound/sum), and is inf where the binned sum does not exceed its bound (the
        density there is below what the grid resolves).
        """
        check_is_fitted(self)
        Q = self._query(X)
        with self._progress("score_samples") as bar:
            parts = [(log_w, self._log_density(bk, Q, return_bound=return_error_bound, progress=bar.callback))
                     for log_w, bk in self._components()]
        if len(parts) == 1:
            return parts[0][1]
        from scipy.special import logsumexp

        logs = [log_w + (p[0] if return_error_bound else p) for log_w, p in parts]
        with np.errstate(divide="ignore"):
            out = logsumexp(logs, axis=0)
        if not return_error_bound:
            return out
        # Each term is within a factor exp(±bound_l) of its exact value: the mixture within the largest.
        return out, np.max([p[1] for _, p in parts], axis=0)

    def _components(self):
        """(log weight, bound kernel) of each term of the density: one term of weight 1, or the
        kernels of a MultiKernel with positive learned weight."""
        if not isinstance(self.kernel, MultiKernel):
            return [(0.0, self._bound())]
        return [(np.log(w), self._bind(k)) for w, k in zip(self.kernel_.coefficients, self.kernel_.kernels) if w > 0]

    def score(self, X: ArrayLike, y: object = None) -> float:
        """Total log-likelihood of X under the model."""
        return float(np.sum(self.score_samples(X)))

    def score_function(self, X: ArrayLike) -> FloatArray:
        """The score ∇ₓ log p̂(x), shape (n_queries, n_features).

        Exact for the differentiable profiles whose derivative is again a profile: gaussian
        (then score = (m(x) − x)/h², identity 4 of docs/identities.md), epanechnikov, biweight and
        triweight, with a scalar or per-feature bandwidth.
        """
        check_is_fitted(self)
        Q = self._query(X)
        parts = self._components()
        if len(parts) == 1:
            return self._score(parts[0][1], Q)
        # ∇ log Σ w_l p_l = Σ π_l ∇ log p_l with π_l ∝ w_l p_l(x) (terms with π_l = 0 drop out).
        log_pi = np.array([log_w + self._log_density(bk, Q) for log_w, bk in parts])
        with np.errstate(invalid="ignore"):
            pi = np.exp(log_pi - log_pi.max(axis=0))
            pi /= pi.sum(axis=0)
        g = np.zeros(Q.shape, dtype=np.float64)
        for p, (_, bk) in zip(pi, parts):
            g += np.where(p[:, None] > 0, p[:, None] * self._score(bk, Q), 0.0)
        g[~np.isfinite(log_pi.max(axis=0))] = np.nan
        return g

    def _score(self, bk, Q):
        """∇ log p̂ at the rows of Q under one bound kernel."""
        name = bk.name
        if name not in _SHADOW:
            raise LocalizationError(f"score_function supports {sorted(_SHADOW)}, not {name!r}", "kernel")
        if bk.sample_h is not None or isinstance(bk.kernel.bandwidth, Balloon):
            raise LocalizationError("score_function needs a fixed (scalar or per-feature) bandwidth", "bandwidth")
        Qs = bk._scale(Q)
        shadow, c = _SHADOW[name]
        kw = dict(weights=self.sample_weight_, algorithm=self.algorithm, n_jobs=self.n_jobs)
        from . import _core

        shadowed = _core.local_sums(Qs, bk.Xs, bk.Xs, kernel=_core.KernelSpec(shadow, bk.h), **kw)
        plain = _core.local_sums(Qs, bk.Xs, None, kernel=bk.spec, **kw)
        num, sden, sls = shadowed.num, shadowed.den, shadowed.log_scale
        den, ls = plain.den, plain.log_scale
        num = num.astype(np.float64) - Qs.astype(np.float64) * sden.astype(np.float64)[:, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            # Divided by h twice: h² alone overflows or underflows for extreme scales.
            g = c * num * np.exp(sls - ls)[:, None] / den.astype(np.float64)[:, None] / bk.h / bk.h
        g[~(den > 0)] = np.nan
        if bk.feature_scale is not None:
            g /= bk.feature_scale
        return g

    def sample(self, n_samples: int = 1, random_state: SeedLike = None) -> FloatArray:
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
        d = self.X_fit_.shape[1]
        # The picks, the kernel draws and the result, in float64.
        check_allocation(8 * n_samples * (2 * d + 2), "n_samples", f"{n_samples} draws of {d} features")
        rng = check_random_state(random_state)
        parts = self._components()
        for _, bk in parts:
            if isinstance(bk.kernel.bandwidth, Balloon):
                raise LocalizationError("sampling needs a fixed or SamplePoint bandwidth", "bandwidth")
        if len(parts) == 1:
            return self._draw(parts[0][1], n_samples, rng)
        # A mixture: each draw picks its kernel by weight, then draws from that kernel's density.
        which = rng.choice(len(parts), size=n_samples, p=np.exp([log_w for log_w, _ in parts]))
        out = np.empty((n_samples, d))
        for l, (_, bk) in enumerate(parts):
            at = which == l
            if at.any():
                out[at] = self._draw(bk, int(at.sum()), rng)
        return out

    def _draw(self, bk, n_samples, rng):
        """n_samples draws from the density of one bound kernel."""
        X = self.X_fit_
        n, d = X.shape
        u = rng.uniform(0, 1, size=n_samples)
        if self.sample_weight_ is None:
            idx = (u * n).astype(np.int64)
        else:
            # scikit-learn's draws; the weights scaled exactly so their running sum cannot overflow.
            cumulative = np.cumsum(_relative(self.sample_weight_))
            idx = np.minimum(np.searchsorted(cumulative, u * cumulative[-1]), n - 1)
        draws = _radial_draws(canonical_name(bk.name), d, n_samples, rng)
        scale = bk.h if bk.sample_h is None else bk.sample_h[idx].astype(np.float64)[:, None]
        if bk.feature_scale is not None:
            scale = scale * bk.feature_scale
        return X[idx].astype(np.float64) + draws * scale

def _relative(w):
    """w · 2^−e in float64 with the largest near 1: the same ratios exactly (weights only matter
    relatively), and a running sum that cannot overflow."""
    w = np.asarray(w, dtype=np.float64)
    return np.ldexp(w, -int(np.frexp(w.max())[1]))


def _log_sum(w):
    """log Σ wᵢ, right even where the sum overflows or the weights are subnormal."""
    w = np.asarray(w, dtype=np.float64)
    m = w.max()
    e = np.frexp(m)[1]
    return float(np.log(np.sum(np.ldexp(w, -e))) + e * np.log(2.0))


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


def _sample_point_weights(sample_h, w, d, dtype):
    """(wᵢ·hᵢ^(−d) / u, log u): the weights of a sample-point density relative to their largest
    value u (they overflow or underflow for extreme h), which goes back in the log domain."""
    log_hw = -d * np.log(sample_h.astype(np.float64))
    log_unit = float(log_hw.max())
    hw = np.exp(log_hw - log_unit)
    return (hw if w is None else w * hw).astype(dtype), log_unit

"""Fuzzy inference as a local mean over rule prototypes.

A zero-order Takagi–Sugeno system has rules "IF x is A_j THEN y = c_j" with membership
μ_j(x) = K(x, p_j) around a prototype p_j, and infers

    ŷ(x) = Σ_j μ_j(x) c_j / Σ_j μ_j(x),

which is exactly the local mean of the consequents c_j over the prototypes p_j.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._base import keeps_state_on_error
from ._validation import (COUNT, FLOAT_DTYPES, N_JOBS, NON_NEGATIVE, POSITIVE, LocalizationError, StrOptions, check_sample_weight,
                          fit_context, validate_data)
from .engine import BoundKernel, ratio
from .kernels import Kernel, canonical_name

if TYPE_CHECKING:
    from ._typing import ArrayLike, BandwidthLike, FloatArray, KernelLike, SeedLike, Self


_CONSEQUENTS = ("local_mean", "least_squares")


class FuzzyInferenceRegressor(MultiOutputMixin, RegressorMixin, BaseEstimator):
    """Zero-order Takagi–Sugeno fuzzy regression: a local mean over rule prototypes.

    ``fit`` places ``n_rules`` prototypes p_j by k-means, gives each rule a membership
    function μ_j(x) = K(‖x − p_j‖/h) and a constant consequent c_j, either

    * ``"local_mean"``: c_j = the local mean of y at p_j over the training sample,
      Σᵢ K(p_j, xᵢ) yᵢ / Σᵢ K(p_j, xᵢ) (the rule says what the data say near its prototype);
    * ``"least_squares"``: c minimising Σᵢ ‖yᵢ − Σ_j μ̃_j(xᵢ) c_j‖² with the normalised
      memberships μ̃ (the classical ANFIS-style consequent fit; ``ridge`` regularises it).

    ``predict`` returns Σ_j μ_j(x) c_j / Σ_j μ_j(x), one engine call over the prototypes.

    Parameters
    ----------
    n_rules : int, default=10
        Number of rules (capped, with a warning, at the number of distinct samples).
    kernel : str, default="gaussian"
        Membership profile (any radial profile of :mod:`localization.kernels`).
    bandwidth : float, array of shape (n_features,) or "auto", default="auto"
        Membership width h. "auto": the mean distance from a prototype to its nearest other
        prototype (memberships of neighbouring rules overlap; 1.0 with a single rule),
        times 2 for compact profiles so that every point is covered.
    consequents : {"local_mean", "least_squares"}, default="local_mean"
    ridge : float, default=1e-8
        Tikhonov term (relative to the trace of the normal matrix) of the least-squares fit.
    random_state : int, RandomState or None
        Seed of k-means.
    n_jobs : int, optional

    Attributes
    ----------
    prototypes_ : ndarray of shape (n_rules, n_features)
    consequents_ : ndarray of shape (n_rules,) or (n_rules, n_outputs)
    bandwidth_ : float or ndarray
    n_rules_ : int
    rules_ : list of str
        One readable rule per prototype, e.g. ``"IF x ≈ (0.5, 1.2) THEN y = 3.1"``.

    Examples
    --------
    >>> import numpy as np
    >>> from localization.fuzzy import FuzzyInferenceRegressor
    >>> X = np.linspace(0, 1, 200)[:, None]
    >>> y = np.sin(2 * np.pi * X[:, 0])
    >>> fis = FuzzyInferenceRegressor(n_rules=12, consequents="least_squares", random_state=0).fit(X, y)
    >>> bool(np.abs(fis.predict(X) - y).max() < 0.1)
    True
    >>> len(fis.rules_)
    12
    """

    _parameter_constraints = {
        "n_rules": [COUNT],
        "kernel": [str],
        "bandwidth": [POSITIVE, "array-like", StrOptions({"auto"})],
        "consequents": [StrOptions(set(_CONSEQUENTS))],
        "ridge": [NON_NEGATIVE],
        "random_state": ["random_state"],
        "n_jobs": N_JOBS,
    }

    def __init__(
        self, n_rules: int = 10, kernel: KernelLike = "gaussian", bandwidth: BandwidthLike = "auto",
        consequents: str = "local_mean", ridge: float = 1e-8, random_state: SeedLike = None,
        n_jobs: int | None = None,
    ) -> None:
        self.n_rules = n_rules
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.consequents = consequents
        self.ridge = ridge
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _resolve_bandwidth(self, P, name):
        bw = self.bandwidth
        if isinstance(bw, str):
            if len(P) < 2:
                return 1.0
            D = np.sqrt(np.maximum(np.sum((P[:, None, :] - P[None, :, :]) ** 2, axis=2), 0.0))
            np.fill_diagonal(D, np.inf)
            h = float(np.mean(D.min(axis=1)))
            if not h > 0:
                return 1.0
            from .kernels import support

            return 2.0 * h if np.isfinite(support(name)) else h
        return bw  # numbers and per-feature arrays are checked by BoundKernel

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Self:
        """Place the rules and fit their consequents. Returns self."""
        X, y = validate_data(self, X, y, dtype=FLOAT_DTYPES, order="C", multi_output=True, y_numeric=True)
        y = np.asarray(y, dtype=X.dtype)
        self._y_1d = y.ndim == 1
        Y = np.ascontiguousarray(y.reshape(len(y), -1))
        w = check_sample_weight(sample_weight, X.shape[0], X.dtype)
        if w is not None:
            # Zero-weight samples carry no information; dropping them also keeps the engine's
            # stabilised sums from being scaled by a point that contributes nothing.
            keep = w > 0
            X, Y, w = np.ascontiguousarray(X[keep]), np.ascontiguousarray(Y[keep]), np.ascontiguousarray(w[keep])
        n_rules = self.n_rules
        name = canonical_name(self.kernel)
        if name in ("knn", "dot"):
            raise LocalizationError("FuzzyInferenceRegressor needs a radial membership profile, not 'knn' or 'dot'", "kernel")
        n_distinct = len(np.unique(X, axis=0))
        if n_rules > n_distinct:
            warnings.warn(f"n_rules={n_rules} exceeds the {n_distinct} distinct samples; using {n_distinct} rules.", UserWarning, stacklevel=2)
            n_rules = n_distinct
        from sklearn.cluster import KMeans

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            km = KMeans(n_clusters=n_rules, n_init=3, random_state=check_random_state(self.random_state))
            km.fit(X, sample_weight=w)
        P = np.ascontiguousarray(km.cluster_centers_, dtype=X.dtype)
        self.bandwidth_ = self._resolve_bandwidth(P.astype(np.float64), name)
        kern = Kernel(name, self.bandwidth_)
        if self.consequents == "local_mean":
            sums = BoundKernel(kern, X, w).sums(P, Y, w, n_jobs=self.n_jobs)
            num, den = sums.num, sums.den
            C = ratio(num, den, warn=False)
            if np.any(~(den > 0)):
                raise LocalizationError("a rule prototype has no training sample within the kernel's support; increase `bandwidth`", "bandwidth")
        else:
            # Normalised memberships μ̃(xᵢ) as a local mean of the identity over the prototypes:
            # stable for tiny h (no underflowing raw memberships).
            sums = BoundKernel(kern, P).sums(X, np.eye(len(P), dtype=X.dtype), n_jobs=self.n_jobs)
            num, den = sums.num, sums.den
            if np.any(~(den > 0)):
                raise LocalizationError("a training sample lies outside every rule's support; increase `bandwidth`", "bandwidth")
            Phi = num.astype(np.float64) / den.astype(np.float64)[:, None]
            sw = np.ones(len(X)) if w is None else w.astype(np.float64)
            A = Phi.T @ (Phi * sw[:, None])
            lam = float(self.ridge) * max(np.trace(A), 1e-300) / len(P)
            C = np.linalg.solve(A + lam * np.eye(len(P)), Phi.T @ (Y.astype(np.float64) * sw[:, None]))
        self.prototypes_ = P
        C = np.ascontiguousarray(C, dtype=X.dtype)
        self.consequents_ = C[:, 0] if self._y_1d else C
        self.n_rules_ = len(P)
        self.rules_ = [self._rule_text(P[j], C[j]) for j in range(len(P))]
        return self

    @staticmethod
    def _rule_text(p, c):
        fmt = lambda a: ", ".join(f"{v:.4g}" for v in a)  # noqa: E731
        cons = f"{c[0]:.4g}" if len(c) == 1 else f"({fmt(c)})"
        return f"IF x ≈ ({fmt(p)}) THEN y = {cons}"

    def memberships(self, X: ArrayLike) -> FloatArray:
        """Normalised memberships μ̃_j(x) = μ_j(x) / Σ_k μ_k(x), shape (n, ``n_rules_``) (NaN rows where none fires)."""
        Q = self._query(X)
        sums = self._bound().sums(Q, np.eye(self.n_rules_, dtype=Q.dtype), n_jobs=self.n_jobs)
        num, den = sums.num, sums.den
        return ratio(num, den, what="membership")

    def _bound(self):
        return BoundKernel(Kernel(canonical_name(self.kernel), self.bandwidth_), self.prototypes_)

    def _query(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False)
        return np.ascontiguousarray(X, dtype=self.prototypes_.dtype)

    def predict(self, X: ArrayLike) -> FloatArray:
        """Σ_j μ_j(x) c_j / Σ_j μ_j(x) (NaN with a warning where no rule fires)."""
        Q = self._query(X)
        C = self.consequents_.reshape(self.n_rules_, -1)
        sums = self._bound().sums(Q, np.ascontiguousarray(C), n_jobs=self.n_jobs)
        num, den = sums.num, sums.den
        out = ratio(num, den, what="fuzzy inference")
        return out[:, 0] if self._y_1d else out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags

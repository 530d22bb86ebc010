"""Supervised local models (SPEC §2–§3): the local mean (Nadaraya–Watson, kNN regression),
local polynomial regression and its equivalent kernel, and the generic localization trick
``LocalModel`` for any scikit-learn estimator."""

from __future__ import annotations

import numpy as np
from sklearn.base import MultiOutputMixin, RegressorMixin, clone, is_classifier
from sklearn.utils.validation import check_is_fitted

from . import _core
from ._base import LocalEstimator, keeps_state_on_error
from ._validation import FLOAT_DTYPES, check_positive_int, validate_data, warn_zero_weight
from .engine import check_algorithm, ratio


SINGULAR = "a singular local design (too few samples in the window for the polynomial basis, or none)"


def _fit_xy(est, X, y):
    X, y = validate_data(est, X, y, dtype=FLOAT_DTYPES, order="C", multi_output=True, y_numeric=True, densify=True)
    y = np.asarray(y, dtype=X.dtype)
    est._y_1d = y.ndim == 1
    return X, np.ascontiguousarray(y.reshape(len(y), -1))


def _out(est, Y):
    return Y[:, 0] if est._y_1d else Y


class LocalMeanRegressor(MultiOutputMixin, RegressorMixin, LocalEstimator):
    """Nadaraya–Watson regression: the local mean ŷ(x*) = Σ K(x*, xᵢ) yᵢ / Σ K(x*, xᵢ).

    It is the localization of the constant model under squared loss. With
    ``kernel="knn"`` it is exactly k-nearest-neighbour regression. Signed kernels (e.g. a
    difference of Gaussians, a higher-order kernel that reduces the bias) are accepted:
    queries whose signed total weight is zero to rounding give NaN with a warning.

    Parameters
    ----------
    kernel : str, callable, Kernel or KernelCombination, default="gaussian"
        Any profile name (see :mod:`localization.kernels`), ``"knn"``, a callable, or a
        (possibly signed) combination of kernels.
    bandwidth : float, array, rule name, "loo", Balloon or SamplePoint, default=1.0
        ``"loo"`` picks h from ``bandwidth_grid`` by exact leave-one-out error, computed
        with the hollow kernel at the cost of one local mean per grid value.
    n_neighbors : int, optional
        k of the ``"knn"`` kernel (default 5).
    bandwidth_grid : array-like, optional
        Candidates for ``bandwidth="loo"``; default 30 values spaced geometrically between
        the median nearest-neighbour distance and the data diameter.
    algorithm : {"auto", "brute", "kd_tree", "expansion"}, default="auto"
    n_jobs : int, optional
        Threads; results do not depend on it.

    Attributes
    ----------
    bandwidth_ : float or object
        The bandwidth used (the LOO choice when ``bandwidth="loo"``).
    loo_errors_ : ndarray
        Mean squared LOO error per grid value (``bandwidth="loo"`` only).

    Examples
    --------
    >>> import numpy as np
    >>> from localization import LocalMeanRegressor
    >>> X = np.linspace(0, 1, 50)[:, None]
    >>> y = X[:, 0] ** 2
    >>> reg = LocalMeanRegressor(bandwidth=0.05).fit(X, y)
    >>> float(abs(reg.predict([[0.5]])[0] - 0.25)) < 0.01
    True
    """

    _signed_kernels = True

    def __init__(self, kernel="gaussian", bandwidth=1.0, n_neighbors=None, bandwidth_grid=None, algorithm="auto", n_jobs=None):
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.bandwidth_grid = bandwidth_grid
        self.algorithm = algorithm
        self.n_jobs = n_jobs

    def _bandwidth(self):
        return self.bandwidth_

    @keeps_state_on_error
    def fit(self, X, y, sample_weight=None):
        """Store the sample (and choose h by leave-one-out if asked). Returns self."""
        X, Y = _fit_xy(self, X, y)
        self.y_fit_ = Y
        loo = isinstance(self.bandwidth, str) and self.bandwidth == "loo"
        self.bandwidth_ = 1.0 if loo else self.bandwidth  # placeholder until the grid search
        self._store(X, sample_weight)
        if loo:
            self._select_loo_bandwidth()
        return self

    def _default_grid(self):
        X = self.X_fit_.astype(np.float64)
        dist, _ = _core.NeighborIndex(X).knn(X, min(2, len(X)))
        nn = np.median(dist[:, -1])
        diam = np.sqrt(np.sum((X.max(0) - X.min(0)) ** 2))
        lo = nn if nn > 0 else diam / len(X)
        if not diam > 0:
            raise ValueError("bandwidth='loo' needs at least two distinct samples")
        return np.geomspace(max(lo, diam * 1e-4), diam, 30)

    def _select_loo_bandwidth(self):
        if len(self.X_fit_) < 2:
            raise ValueError("bandwidth='loo' needs at least 2 samples")
        grid = self._default_grid() if self.bandwidth_grid is None else np.asarray(self.bandwidth_grid, dtype=float)
        if grid.ndim != 1 or len(grid) == 0 or not np.all(np.isfinite(grid)) or np.any(grid <= 0):
            raise ValueError("`bandwidth_grid` must be a non-empty 1-D array of positive numbers")
        errors = np.array([self._loo_error(h) for h in grid])
        if not np.any(np.isfinite(errors)):
            raise ValueError("every bandwidth in the grid leaves some sample with no neighbours; widen `bandwidth_grid`")
        self.bandwidth_grid_ = grid
        self.loo_errors_ = errors
        self.bandwidth_ = float(grid[np.nanargmin(errors)])
        self.kernel_ = self._kernel()

    def _loo_error(self, h):
        self.bandwidth_ = float(h)
        self.kernel_ = self._kernel()
        num, den, *_ = self._bound().sums(
            self.X_fit_, self.y_fit_, self.sample_weight_, exclude_self=True, algorithm=self.algorithm, n_jobs=self.n_jobs
        )
        if np.any(~(den != 0)):
            return np.inf
        resid = num / den[:, None] - self.y_fit_
        w = np.ones(len(resid)) if self.sample_weight_ is None else self.sample_weight_
        return float(np.average(np.sum(resid.astype(np.float64) ** 2, axis=1), weights=w))

    def loo_predict(self):
        """Exact leave-one-out predictions ŷ₋ᵢ(xᵢ) on the training sample (hollow kernel);
        the same as ``predict(None)``."""
        return self.predict(None)

    def predict(self, X):
        """Local means at X; NaN (with a warning) where no sample has positive weight.

        ``X=None``: exact leave-one-out predictions at the training points (each point's own
        term left out, the hollow kernel), as scikit-learn's ``KNeighborsRegressor.predict(None)``.
        """
        check_is_fitted(self)
        num, den, *_ = self._sums(X, self.y_fit_)
        return _out(self, ratio(num, den))


class LocalPolynomialRegressor(MultiOutputMixin, RegressorMixin, LocalEstimator):
    """Local polynomial regression of degree 0, 1 or 2 (SPEC §3).

    Per query solve (Φᵀ W Φ + λI) β = Φᵀ W y with W = diag(K(x*, xᵢ)) and the basis
    Φ = [1, x − x*, (x − x*)(x − x*)ᵀ]; predict ŷ(x*) = β₀. The design moments come from
    the engine in one fused pass, so the cost is that of a local mean times the basis size.

    Local regression is itself a local mean under a signed *equivalent kernel* ℓ(x*):
    ŷ(x*) = Σᵢ ℓᵢ(x*) yᵢ, with Σᵢ ℓᵢ = 1 and (degree ≥ 1) Σᵢ ℓᵢ xᵢ = x* exactly.

    Parameters
    ----------
    degree : {0, 1, 2}, default=1
    kernel, bandwidth, n_neighbors, algorithm, n_jobs
        As in :class:`LocalMeanRegressor` (``bandwidth="loo"`` is not offered here).
    ridge : float, default=0.0
        λ added to the diagonal of the local design matrix.

    Examples
    --------
    >>> import numpy as np
    >>> from localization import LocalPolynomialRegressor
    >>> X = np.linspace(0, 1, 40)[:, None]
    >>> y = 3 * X[:, 0] + 1
    >>> reg = LocalPolynomialRegressor(degree=1, bandwidth=0.2).fit(X, y)
    >>> np.allclose(reg.predict([[0.0], [1.0]]), [1.0, 4.0])
    True
    """

    def __init__(self, degree=1, kernel="gaussian", bandwidth=1.0, n_neighbors=None, ridge=0.0, algorithm="auto", n_jobs=None):
        self.degree = degree
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.ridge = ridge
        self.algorithm = algorithm
        self.n_jobs = n_jobs

    @keeps_state_on_error
    def fit(self, X, y, sample_weight=None):
        """Store the sample. Returns self."""
        if self.degree not in (0, 1, 2) or isinstance(self.degree, bool):
            raise ValueError(f"`degree` must be 0, 1 or 2, got {self.degree!r}")
        if not (np.isscalar(self.ridge) and np.isfinite(self.ridge) and self.ridge >= 0):
            raise ValueError(f"`ridge` must be a finite non-negative number, got {self.ridge!r}")
        check_algorithm(self.algorithm)
        X, Y = _fit_xy(self, X, y)
        self.y_fit_ = Y
        self._store(X, sample_weight)
        if getattr(self.kernel_, "name", None) in (None, "identity", "dot") or self._bound().callable:
            raise ValueError("LocalPolynomialRegressor needs a single radial profile or knn kernel (not a callable, "
                             f"dot, identity or a combination of kernels), got {self.kernel!r}")
        return self

    def _core_args(self, X):
        Q = self._query(X)
        bk = self._bound()
        Qs = bk._scale(Q)
        kw = bk.core_args(Qs)
        kw.pop("temperature", None)
        if bk.sample_h is not None:
            raise ValueError("SamplePoint bandwidths are not supported by LocalPolynomialRegressor")
        return bk, Qs, kw

    def predict(self, X):
        """Local polynomial fits at X; NaN (with a warning) where the local design is singular."""
        bk, Qs, kw = self._core_args(X)
        pred, singular = _core.local_polynomial(
            Qs, bk.Xs, self.y_fit_, self.sample_weight_, degree=self.degree, ridge=float(self.ridge),
            algorithm=self.algorithm, n_jobs=self.n_jobs, **kw,
        )
        warn_zero_weight(singular, "local polynomial fit", SINGULAR)
        return _out(self, pred)

    def equivalent_kernel(self, X):
        """The equivalent kernel ℓ(x*) for each row of X: an (m, n_samples) signed matrix.

        ``predict(X) == equivalent_kernel(X) @ y`` for any training targets y. This matrix is
        dense by nature: m × n_samples × itemsize bytes, allocated before any work (a request
        that does not fit raises ``MemoryError`` at once); use it on modest numbers of queries.
        Sample weights are not folded in (ℓ is defined for unit weights).
        """
        bk, Qs, kw = self._core_args(X)
        if self.sample_weight_ is not None:
            raise ValueError("equivalent_kernel is defined for unweighted fits; refit without sample_weight")
        ell, singular = _core.equivalent_kernel(
            Qs, bk.Xs, degree=self.degree, ridge=float(self.ridge), algorithm=self.algorithm, n_jobs=self.n_jobs, **kw
        )
        warn_zero_weight(singular, "equivalent kernel", SINGULAR)
        return ell


class LocalModel(MultiOutputMixin, LocalEstimator):
    """The localization trick for any scikit-learn estimator (SPEC §2).

    For every query x*, a clone of ``estimator`` is fitted with ``sample_weight`` equal to
    K(x*, xᵢ) (optionally on the ``n_neighbors`` heaviest samples only) and predicts at x*.
    Localizing a constant model gives the local mean, ``LinearRegression`` gives local
    linear regression, ``LogisticRegression`` a local classifier. This is the general,
    slow path: one fit per query (in parallel threads).

    Parameters
    ----------
    estimator : estimator
        Must accept ``sample_weight`` in ``fit``.
    kernel, bandwidth
        As in :class:`LocalMeanRegressor`.
    n_neighbors : int, optional
        Fit each local model on the query's ``n_neighbors`` heaviest samples only.
    n_jobs : int, optional
        Threads over queries.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LinearRegression
    >>> from localization import LocalModel
    >>> X = np.linspace(0, 1, 30)[:, None]
    >>> y = np.sin(3 * X[:, 0])
    >>> m = LocalModel(LinearRegression(), bandwidth=0.1).fit(X, y)
    >>> m.predict([[0.5]]).shape
    (1,)
    """

    def __init__(self, estimator=None, kernel="gaussian", bandwidth=1.0, n_neighbors=None, n_jobs=None):
        self.estimator = estimator
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.n_jobs = n_jobs

    @keeps_state_on_error
    def fit(self, X, y, sample_weight=None):
        """Store the sample. Returns self."""
        from sklearn.linear_model import LinearRegression

        self.estimator_ = clone(self.estimator if self.estimator is not None else LinearRegression())
        X, y = validate_data(self, X, y, dtype=FLOAT_DTYPES, order="C", multi_output=True, y_numeric=not is_classifier(self.estimator_), densify=True)
        if self.n_neighbors is not None:
            check_positive_int(self.n_neighbors, "n_neighbors")
        self.y_fit_ = np.asarray(y)
        if is_classifier(self.estimator_):
            self.classes_ = np.unique(self.y_fit_)
        self._store(X, sample_weight)
        return self

    def _predict_one(self, w, x):
        y = self.y_fit_
        idx = np.flatnonzero(w > 0)
        if self.n_neighbors is not None and len(idx) > self.n_neighbors:
            idx = idx[np.argsort(-w[idx], kind="stable")[: self.n_neighbors]]
        if len(idx) == 0:
            return None
        if is_classifier(self.estimator_) and len(np.unique(y[idx])) == 1:
            return y[idx[0]]
        est = clone(self.estimator_).fit(self.X_fit_[idx], y[idx], sample_weight=w[idx] / w[idx].max())
        return est.predict(x[None, :])[0]

    def predict(self, X):
        """One weighted fit per query; NaN (with a warning) where every weight is zero."""
        from joblib import Parallel, delayed

        Q = self._query(X)
        K = self._bound().matrix(Q, n_jobs=self.n_jobs).astype(np.float64)
        if self.sample_weight_ is not None:
            K *= self.sample_weight_
        n_jobs = _core.effective_n_jobs(self.n_jobs)
        preds = Parallel(n_jobs=n_jobs, prefer="threads")(delayed(self._predict_one)(K[i], Q[i]) for i in range(len(Q)))
        empty = np.array([p is None for p in preds])
        warn_zero_weight(empty)
        shape = np.shape(self.y_fit_[0])
        fill = np.full(shape, np.nan)
        if is_classifier(self.estimator_):
            if empty.any():
                raise ValueError("some queries have zero total kernel weight; a class cannot be predicted there")
            return np.array(preds)
        return np.array([fill if p is None else p for p in preds], dtype=np.float64)

    def score(self, X, y, sample_weight=None):
        from sklearn.metrics import accuracy_score, r2_score

        metric = accuracy_score if is_classifier(self.estimator_) else r2_score
        return metric(y, self.predict(X), sample_weight=sample_weight)


"""Supervised local models: the local mean (Nadaraya–Watson, kNN regression),
local polynomial regression and its equivalent kernel, and the generic localization trick
``LocalModel`` for any scikit-learn estimator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, overload

import numpy as np
from sklearn.base import MultiOutputMixin, RegressorMixin, clone, is_classifier
from sklearn.utils.validation import check_is_fitted

from . import _binned, _core
from ._base import KERNEL_CONSTRAINTS, LOO_KERNEL_CONSTRAINTS, LocalEstimator, keeps_state_on_error
from ._progress import Progress
from ._validation import (FLOAT_DTYPES, NON_NEGATIVE, HasMethods, Integral, Interval, LocalizationError, fit_context, validate_data,
                          warn_zero_weight)
from .adaptive import MultiKernel, base_kernel, fit_loo, fit_multikernel, fixed_gaussian, is_loo
from .engine import bind_kernel, ratio

if TYPE_CHECKING:
    from ._typing import ArrayLike, BandwidthLike, FloatArray, KernelLike, Self


SINGULAR = "a singular local design (too few samples in the window for the polynomial basis, or none)"

# LocalModel computes kernel weights for blocks of queries holding at most this many values.
_BLOCK_VALUES = 1 << 22


def _fit_xy(est, X, y):
    X, y = validate_data(est, X, y, dtype=FLOAT_DTYPES, order="C", multi_output=True, y_numeric=True, densify=True)
    y = np.asarray(y, dtype=X.dtype)
    est._y_1d = y.ndim == 1
    return X, np.ascontiguousarray(y.reshape(len(y), -1))


def _out(est, Y):
    return Y[:, 0] if est._y_1d else Y


def _residuals(pred, Y, sample_weight):
    """The LOO residuals scaled by √(wᵢ/Σw), flattened: their squared norm is the (weighted)
    mean over samples of the squared residual. None if some prediction is undefined."""
    if pred is None or not np.all(np.isfinite(pred)):
        return None
    # Relative weights: their sum may overflow (only ratios matter to the average).
    w = np.ones(len(Y)) if sample_weight is None else sample_weight.astype(np.float64) / sample_weight.max()
    return ((pred.astype(np.float64) - Y) * np.sqrt(w / w.sum())[:, None]).ravel()


def _mean_squared(pred, Y, sample_weight):
    """(Weighted) mean over samples of the squared LOO residual; inf if some prediction is undefined."""
    r = _residuals(pred, Y, sample_weight)
    return np.inf if r is None else float(r @ r)


class LocalMeanRegressor(MultiOutputMixin, RegressorMixin, LocalEstimator):
    """Nadaraya–Watson regression: the local mean ŷ(x*) = Σ K(x*, xᵢ) yᵢ / Σ K(x*, xᵢ).

    It is the localization of the constant model under squared loss. With
    ``kernel="knn"`` it is exactly k-nearest-neighbour regression. Signed kernels (e.g. a
    difference of Gaussians, a higher-order kernel that reduces the bias) are accepted:
    queries whose signed total weight is zero to rounding give NaN with a warning.

    Parameters
    ----------
    kernel : str, callable, Kernel, KernelCombination or MultiKernel, default="gaussian"
        Any profile name (see :mod:`localization.kernels`), ``"knn"``, a callable, a
        (possibly signed) combination of kernels, or a
        :class:`~localization.adaptive.MultiKernel` whose mixture weights are learned by
        leave-one-out (``kernel_weights_``).
    bandwidth : float, array, rule name, "loo", "loo_per_feature", Balloon or SamplePoint, default=1.0
        ``"loo"`` minimises the exact leave-one-out (LOO) squared error, computed with the
        hollow kernel at the cost of one local mean per candidate: a logarithmic grid, then
        golden-section refinement (from 4,096 samples on, the grid runs on a subsample and
        only a bracket of the predicted bandwidth on all of them). ``"loo_per_feature"`` continues with one bandwidth per
        feature by gradient descent (with the analytic gradient for a gaussian kernel without
        sample weights, see :class:`~localization.MetricLearningRegressor`). With a :class:`~localization.kernels.Kernel` or a
        combination, its bandwidths are scaled by the chosen factor (see
        :mod:`localization.adaptive`).
    n_neighbors : int, optional
        k of the ``"knn"`` kernel (default 5).
    bandwidth_grid : array-like, optional
        Candidate factors for the LOO search, all scanned on the full sample; default 24
        values spaced geometrically between the median nearest-neighbour distance and the
        data diameter.
    algorithm : {"auto", "brute", "kd_tree", "expansion", "binned"}, default="auto"
        As in :func:`~localization.local_mean`; ``"binned"`` is approximate, with an error
        bound that ``predict(X, return_error_bound=True)`` returns.
    n_jobs : int, optional
        Threads; results do not depend on it.
    grid_size : int or sequence of int, optional
        Grid nodes per feature of ``algorithm="binned"``.
    atol, rtol : float, optional
        Tolerances on the predictions that let ``algorithm="auto"`` use the binned path where
        its bound meets them (see :func:`~localization.local_mean`).
    verbose : bool, default=False
        Progress bars on stderr for calls that last more than 0.2 s: the leave-one-out
        bandwidth search (one step per evaluation), the kernel weights of a MultiKernel and
        predictions on many queries.

    Attributes
    ----------
    bandwidth_ : float, ndarray or object
        The bandwidth used (the LOO choice, a factor of the kernel's own bandwidths for a
        Kernel object, when ``bandwidth`` is a LOO rule).
    cv_results_ : dict
        LOO rules only: every evaluated ``"bandwidth"``, its ``"objective"`` (mean squared
        LOO error) and the ``"stage"`` of the search ("grid", "bracket", "golden", "check",
        "gradient"); from 4,096 samples on also ``"subsample"``, the evaluations of the
        coarse stage on a subsample (see :mod:`localization.adaptive`).

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
    _parameter_constraints = {**LOO_KERNEL_CONSTRAINTS, **_binned.CONSTRAINTS}

    def __init__(self, kernel: KernelLike = "gaussian", bandwidth: BandwidthLike = 1.0, n_neighbors: int | None = None,
                 bandwidth_grid: ArrayLike | None = None, algorithm: str = "auto", n_jobs: int | None = None,
                 grid_size: int | Sequence[int] | None = None, atol: float | None = None, rtol: float | None = None,
                 verbose: int | bool = False) -> None:
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.bandwidth_grid = bandwidth_grid
        self.algorithm = algorithm
        self.n_jobs = n_jobs
        self.grid_size = grid_size
        self.atol = atol
        self.rtol = rtol
        self.verbose = verbose

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Self:
        """Store the sample (and choose h by leave-one-out if asked). Returns self."""
        X, Y = _fit_xy(self, X, y)
        _binned.check_params(self, X.shape[1])
        self.y_fit_ = Y
        self._store(X, sample_weight)
        if isinstance(self.kernel, MultiKernel):
            fit_multikernel(self, lambda k: self._loo_predictions(k) - self.y_fit_)
            self.bandwidth_ = self.bandwidth
        elif is_loo(self.bandwidth):
            fit_loo(self, self._loo_objective, n_features=X.shape[1], gradient=self._analytic_loo_gradient(),
                    residuals=lambda k: _residuals(self._loo_predictions(k), self.y_fit_, self.sample_weight_))
        else:
            self.bandwidth_ = self.bandwidth
        return self

    def _analytic_loo_gradient(self):
        """The LOO error's gradient in log h where it is analytic — a gaussian kernel with a fixed
        bandwidth, no sample weights, an exact algorithm — else None (forward differences)."""
        if not (fixed_gaussian(base_kernel(self.kernel, self.n_neighbors)) and self.sample_weight_ is None
                and self.algorithm != "binned"):
            return None
        Xc = self.X_fit_.astype(np.float64)
        Xc -= Xc.mean(axis=0)

        def gradient(kernel):
            # The diagonal case A = diag(1/h) of the MLKR gradient: ∂L/∂log hₖ = −aₖ ∂L/∂aₖ.
            from .metric_learning import mlkr_loss

            bk = bind_kernel(kernel, self.X_fit_, None, self._signed_kernels, type(self).__name__)
            a = 1.0 / (bk.h * (np.ones(Xc.shape[1]) if bk.feature_scale is None else bk.feature_scale))
            loss, grad = mlkr_loss(a, Xc, self.y_fit_, algorithm=self.algorithm, n_jobs=self.n_jobs)
            return loss, -a * grad

        return gradient

    def _loo_predictions(self, kernel):
        """Exact leave-one-out local means under ``kernel`` (NaN where a sample has no neighbour)."""
        bk = bind_kernel(kernel, self.X_fit_, self.sample_weight_, self._signed_kernels, type(self).__name__)
        sums = bk.sums(self.X_fit_, self.y_fit_, self.sample_weight_, exclude_self=True,
                       algorithm=self.algorithm, n_jobs=self.n_jobs)
        num, den = sums.num, sums.den
        return ratio(num.astype(np.float64), den.astype(np.float64), warn=False)

    def _loo_objective(self, kernel):
        """Mean squared leave-one-out error under ``kernel`` (inf where a sample has no neighbour)."""
        return _mean_squared(self._loo_predictions(kernel), self.y_fit_, self.sample_weight_)

    def loo_predict(self) -> FloatArray:
        """Exact leave-one-out predictions ŷ₋ᵢ(xᵢ) on the training sample (hollow kernel);
        the same as ``predict(None)``."""
        return self.predict(None)

    @overload
    def predict(self, X: ArrayLike | None, return_error_bound: Literal[False] = False) -> FloatArray: ...
    @overload
    def predict(self, X: ArrayLike | None, return_error_bound: Literal[True]) -> tuple[FloatArray, FloatArray]: ...
    def predict(self, X: ArrayLike | None, return_error_bound: bool = False) -> FloatArray | tuple[FloatArray, FloatArray]:
        """Local means at X; NaN (with a warning) where no sample has positive weight.

        ``X=None``: exact leave-one-out predictions at the training points (each point's own
        term left out, the hollow kernel), as scikit-learn's ``KNeighborsRegressor.predict(None)``.
        ``return_error_bound=True`` also returns a bound on ``|prediction − exact local mean|``
        (0 for the exact algorithms, see ``algorithm="binned"``).
        """
        check_is_fitted(self)
        if not isinstance(self.kernel, MultiKernel):
            Q = self.X_fit_ if X is None else self._query(X)
            with self._progress("predict") as bar:
                binned = _binned.local_mean_or_none(
                    self._bound(), Q, self.y_fit_, self.sample_weight_, algorithm=self.algorithm, grid_size=self.grid_size,
                    atol=self.atol, rtol=self.rtol, exclude_self=X is None, n_jobs=self.n_jobs, local_bound=return_error_bound,
                    progress=bar.callback)
            if binned is not None:
                pred, _, bound = binned
                return (_out(self, pred), _out(self, bound)) if return_error_bound else _out(self, pred)
        sums = self._sums(X, self.y_fit_)
        num, den = sums.num, sums.den
        pred = _out(self, ratio(num, den))
        return (pred, np.zeros(pred.shape)) if return_error_bound else pred


class LocalPolynomialRegressor(MultiOutputMixin, RegressorMixin, LocalEstimator):
    """Local polynomial regression of degree 0, 1 or 2.

    Per query solve (Φᵀ W Φ + λI) β = Φᵀ W y with W = diag(K(x*, xᵢ)) and the basis
    Φ = [1, x − x*, (x − x*)(x − x*)ᵀ]; predict ŷ(x*) = β₀. The design moments come from
    the engine in one fused pass, so the cost is that of a local mean times the basis size.

    Local regression is itself a local mean under a signed *equivalent kernel* ℓ(x*):
    ŷ(x*) = Σᵢ ℓᵢ(x*) yᵢ, with Σᵢ ℓᵢ = 1 and (degree ≥ 1) Σᵢ ℓᵢ xᵢ = x* exactly.

    Parameters
    ----------
    degree : {0, 1, 2}, default=1
    kernel, bandwidth, n_neighbors, bandwidth_grid, algorithm, n_jobs
        As in :class:`LocalMeanRegressor`. A :class:`~localization.adaptive.MultiKernel`
        predicts with the average of the local polynomial fits under its kernels, weighted by
        simplex weights that minimise the exact LOO squared error (``kernel_weights_``).
        ``bandwidth="loo"`` (or ``"loo_per_feature"``)
        minimises the exact leave-one-out squared error: each training point's fit leaves
        the point out (hollow design moments, one engine pass per candidate), which equals
        the residual (yᵢ − ŷᵢ)/(1 − ℓᵢ(xᵢ)) of the equivalent kernel's diagonal.
    ridge : float, default=0.0
        λ added to the diagonal of the local design matrix.
    verbose : bool, default=False
        Progress bars on stderr for calls that last more than 0.2 s: the leave-one-out
        bandwidth search (one step per evaluation), the kernel weights of a MultiKernel and
        predictions on many queries.

    Attributes
    ----------
    bandwidth_, cv_results_
        As in :class:`LocalMeanRegressor`.
    kernel_weights_ : ndarray of shape (n_kernels,)
        MultiKernel only: the weights of the averaged fits, on the simplex
        (``cv_results_`` then holds each kernel's and the mixture's LOO error).

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

    _parameter_constraints = {
        **LOO_KERNEL_CONSTRAINTS,
        "degree": [Interval(Integral, 0, 2, closed="both")],
        "ridge": [NON_NEGATIVE],
    }

    def __init__(
        self, degree: int = 1, kernel: KernelLike = "gaussian", bandwidth: BandwidthLike = 1.0,
        n_neighbors: int | None = None, ridge: float = 0.0, bandwidth_grid: ArrayLike | None = None,
        algorithm: str = "auto", n_jobs: int | None = None, verbose: int | bool = False,
    ) -> None:
        self.degree = degree
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.ridge = ridge
        self.bandwidth_grid = bandwidth_grid
        self.algorithm = algorithm
        self.n_jobs = n_jobs
        self.verbose = verbose

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Self:
        """Store the sample. Returns self."""
        X, Y = _fit_xy(self, X, y)
        self.y_fit_ = Y
        self._store(X, sample_weight)
        multi = isinstance(self.kernel, MultiKernel)
        for k in self.kernel.kernels if multi else [self.kernel_]:
            if getattr(k, "name", None) in (None, "identity", "dot") or self._bind(k).callable:
                raise LocalizationError("LocalPolynomialRegressor needs a single radial profile or knn kernel (not a callable, "
                                        f"dot, identity or a combination of kernels), got {k!r}", "kernel")
        if multi:
            fit_multikernel(self, lambda k: self._loo_fit(k) - self.y_fit_)
            self.bandwidth_ = self.bandwidth
        elif is_loo(self.bandwidth):
            # Bias of order h^4 for degree 2 (interior), h^2 below it.
            fit_loo(self, self._loo_objective, n_features=X.shape[1],
                    residuals=lambda k: _residuals(self._loo_fit(k), self.y_fit_, self.sample_weight_),
                    rate=1.0 / (X.shape[1] + (8 if self.degree == 2 else 4)))
        else:
            self.bandwidth_ = self.bandwidth
        return self

    def _bind(self, kernel):
        return bind_kernel(kernel, self.X_fit_, self.sample_weight_, False, type(self).__name__)

    def _components(self):
        """(weight, bound kernel) of each term of the fitted model: one term of weight 1, or the
        kernels of a MultiKernel with positive learned weight (the fit is their weighted average)."""
        if not isinstance(self.kernel, MultiKernel):
            return [(1.0, self._bound())]
        return [(w, self._bind(k)) for w, k in zip(self.kernel_.coefficients, self.kernel_.kernels) if w > 0]

    def _mixture(self, evaluate):
        """Σ_l w_l evaluate(bk_l) over the terms, and the union of their singular masks."""
        parts = [(w, evaluate(bk)) for w, bk in self._components()]
        if len(parts) == 1:
            return parts[0][1]
        out = sum(w * p.astype(np.float64) for w, (p, _) in parts)
        return out.astype(self.X_fit_.dtype), np.logical_or.reduce([s for _, (_, s) in parts])

    def _core_args(self, Q, bk=None):
        bk = self._bound() if bk is None else bk
        Qs = bk._scale(Q)
        spec = bk.kernel_spec(Qs)
        if bk.sample_h is not None:
            raise LocalizationError("SamplePoint bandwidths are not supported by LocalPolynomialRegressor", "bandwidth")
        return bk, Qs, spec

    def _fit_at(self, Q, bk=None, exclude_self=False, progress=None):
        bk, Qs, spec = self._core_args(Q, bk)
        # The fitted bound kernel's prepared reference holds the samples, y and the weights.
        ref = bk.reference(self.y_fit_, self.sample_weight_)
        data = (bk.Xs, self.y_fit_, self.sample_weight_) if ref is None else (ref,)
        return _core.local_polynomial(
            Qs, *data, kernel=spec, degree=self.degree, ridge=float(self.ridge), exclude_self=exclude_self,
            algorithm=self.algorithm, n_jobs=self.n_jobs, progress=progress,
        )

    def _loo_fit(self, kernel):
        """Exact leave-one-out fits under ``kernel`` in float64 (NaN where a design is singular)."""
        pred, singular = self._fit_at(self.X_fit_, self._bind(kernel), exclude_self=True)
        pred = pred.astype(np.float64)
        pred[singular] = np.nan
        return pred

    def _loo_objective(self, kernel):
        """Mean squared leave-one-out error under ``kernel`` (inf where a design is singular)."""
        return _mean_squared(self._loo_fit(kernel), self.y_fit_, self.sample_weight_)

    def predict(self, X: ArrayLike) -> FloatArray:
        """Local polynomial fits at X; NaN (with a warning) where the local design is singular.

        ``X=None``: exact leave-one-out fits at the training points (each fit without its
        own point).
        """
        check_is_fitted(self)
        Q = self.X_fit_ if X is None else self._query(X)
        with self._progress("predict") as bar:
            pred, singular = self._mixture(lambda bk: self._fit_at(Q, bk, exclude_self=X is None, progress=bar.callback))
        warn_zero_weight(singular, "local polynomial fit", SINGULAR)
        return _out(self, pred)

    def equivalent_kernel(self, X: ArrayLike) -> FloatArray:
        """The equivalent kernel ℓ(x*) for each row of X: an (m, n_samples) signed matrix.

        ``predict(X) == equivalent_kernel(X) @ y`` for any training targets y. This matrix is
        dense by nature: m × n_samples × itemsize bytes, allocated before any work (a request
        that does not fit raises ``MemoryError`` at once); use it on modest numbers of queries.
        Sample weights are not folded in (ℓ is defined for unit weights).
        """
        Q = self._query(X)
        if self.sample_weight_ is not None:
            raise LocalizationError("equivalent_kernel is defined for unweighted fits; refit without sample_weight", "sample_weight")

        def equivalent(bk):
            bk, Qs, spec = self._core_args(Q, bk)
            return _core.equivalent_kernel(Qs, bk.Xs, kernel=spec, degree=self.degree, ridge=float(self.ridge),
                                           algorithm=self.algorithm, n_jobs=self.n_jobs)

        ell, singular = self._mixture(equivalent)
        warn_zero_weight(singular, "equivalent kernel", SINGULAR)
        return ell


class LocalModel(MultiOutputMixin, LocalEstimator):
    """The localization trick for any scikit-learn estimator.

    For every query x*, a clone of ``estimator`` is fitted with ``sample_weight`` equal to
    K(x*, xᵢ) (times the fit's own sample weights; optionally on the ``n_neighbors``
    heaviest samples only) and predicts at x*. The weights are the kernel values themselves,
    not rescaled: an estimator with a penalty (``Ridge``, ``LogisticRegression``) balances it
    against Σᵢ K(x*, xᵢ)·loss exactly as written. Localizing a constant model gives the local
    mean, ``LinearRegression`` gives local linear regression, ``LogisticRegression`` a local
    classifier. This is the general, slow path: one fit per query (in parallel threads).

    Memory: the kernel weights are computed for blocks of queries of at most 2²² values
    (32 MB) at a time — never the whole n_queries × n_samples matrix — plus what the
    estimator's fits allocate (one copy of the weighted samples per running thread).

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
    verbose : bool, default=False
        Show a progress bar (queries fitted) on stderr for :meth:`predict` calls that last
        more than 0.2 s. (``fit`` only stores the sample.)

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

    _parameter_constraints = {
        "estimator": [HasMethods(["fit", "predict"]), None],
        **{name: KERNEL_CONSTRAINTS[name] for name in ("kernel", "bandwidth", "n_neighbors", "n_jobs")},
        "verbose": ["verbose"],
    }

    def __init__(
        self, estimator: object | None = None, kernel: KernelLike = "gaussian", bandwidth: BandwidthLike = 1.0,
        n_neighbors: int | None = None, n_jobs: int | None = None, verbose: int | bool = False,
    ) -> None:
        self.estimator = estimator
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.n_jobs = n_jobs
        self.verbose = verbose

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Self:
        """Store the sample. Returns self."""
        from sklearn.linear_model import LinearRegression

        self.estimator_ = clone(self.estimator if self.estimator is not None else LinearRegression())
        X, y = validate_data(self, X, y, dtype=FLOAT_DTYPES, order="C", multi_output=True, y_numeric=not is_classifier(self.estimator_), densify=True)
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
        est = clone(self.estimator_).fit(self.X_fit_[idx], y[idx], sample_weight=w[idx])
        return est.predict(x[None, :])[0]

    def predict(self, X: ArrayLike) -> FloatArray:
        """One weighted fit per query; NaN (with a warning) where every weight is zero."""
        from joblib import Parallel, delayed

        Q = self._query(X)
        bk = self._bound()
        block = max(1, _BLOCK_VALUES // len(self.X_fit_))
        n_jobs = _core.effective_n_jobs(self.n_jobs)
        preds = []
        # The fits come back in query order as they finish, so the bar counts each one.
        with (Parallel(n_jobs=n_jobs, prefer="threads", return_as="generator") as parallel,
              Progress(self.verbose, "LocalModel.predict", unit="query", total=len(Q)) as bar):
            for a in range(0, len(Q), block):
                K = bk.matrix(Q[a : a + block], n_jobs=self.n_jobs).astype(np.float64)
                if self.sample_weight_ is not None:
                    K *= self.sample_weight_
                for p in parallel(delayed(self._predict_one)(K[i], Q[a + i]) for i in range(len(K))):
                    preds.append(p)
                    bar.update()
        empty = np.array([p is None for p in preds])
        warn_zero_weight(empty)
        shape = np.shape(self.y_fit_[0])
        fill = np.full(shape, np.nan)
        if is_classifier(self.estimator_):
            if empty.any():
                raise LocalizationError("some queries have zero total kernel weight; a class cannot be predicted there", "X")
            return np.array(preds)
        return np.array([fill if p is None else p for p in preds], dtype=np.float64)

    def score(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> float:
        from sklearn.metrics import accuracy_score, r2_score

        metric = accuracy_score if is_classifier(self.estimator_) else r2_score
        return metric(y, self.predict(X), sample_weight=sample_weight)


"""A learned metric for the local mean: metric learning for kernel regression (MLKR).

The Gaussian kernel K_A(x, x') = exp(−‖A(x − x')‖²/2) with a linear map A (r × d) is fitted by
minimising the exact leave-one-out (LOO) squared error of the Nadaraya–Watson fit — the MLKR
objective of Weinberger & Tesauro (2007) — with analytic gradients from the engine and L-BFGS.
"""

from __future__ import annotations

import warnings
from numbers import Integral
from typing import TYPE_CHECKING

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, MultiOutputMixin, RegressorMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from . import _core
from ._base import keeps_state_on_error
from ._progress import Progress
from ._sums import LocalSums
from ._validation import COUNT, FLOAT_DTYPES, N_JOBS, NON_NEGATIVE, check_n_components, fit_context, validate_data, LocalizationError
from .regression import LocalMeanRegressor

if TYPE_CHECKING:
    from ._typing import ArrayLike, FloatArray, SeedLike, Self

# A row whose nearest other point carries a kernel value below exp(−_ISOLATED) is not scaled into
# the second engine pass by the weight exp(−log_scale) (up to e^600 ≈ 1e260, leaving float64
# room for sums over many rows); its terms are added directly.
_ISOLATED = 600.0
_UNIT_GAUSSIAN = _core.KernelSpec("gaussian", 1.0)


def _gaussian_sums(Z, values, weights=None, algorithm="auto", n_jobs=None):
    """Hollow sums Σ_{j≠i} exp(−‖zᵢ − zⱼ‖²/2) w_j v_j at every training point, as LocalSums."""
    s = _core.local_sums(Z, Z, values, weights, kernel=_UNIT_GAUSSIAN, exclude_self=True, algorithm=algorithm, n_jobs=n_jobs)
    return LocalSums.from_engine(s)


def mlkr_loss(A, X, Y, *, gradient=True, algorithm="auto", n_jobs=None):
    """The MLKR objective and its gradient.

    L(A) = (1/n) Σᵢ ‖ŷ₋ᵢ − yᵢ‖², with ŷ₋ᵢ the hollow local mean under K_A, and

        ∂L/∂A = (2/n) A Σᵢⱼ wᵢⱼ (xᵢ − xⱼ)(xᵢ − xⱼ)ᵀ,   wᵢⱼ = k̃ᵢⱼ rᵢ·(ŷ₋ᵢ − yⱼ),

    with k̃ the row-normalised hollow kernel and rᵢ = ŷ₋ᵢ − yᵢ. Since Σⱼ wᵢⱼ = 0 for every i,
    the pair sum splits into first-order local sums, so no n × n matrix nor a d × d product per
    pair is formed: Σᵢⱼ wᵢⱼ eᵢⱼeᵢⱼᵀ = Σⱼ cⱼ xⱼxⱼᵀ − P − Pᵀ with

        uᵢ = Σⱼ wᵢⱼ xⱼ  (row sums: one engine pass with values [y, x, y⊗x]),
        cⱼ = Σᵢ wᵢⱼ     (column sums: a second pass, the kernel being symmetric),
        P  = Σᵢ xᵢ uᵢᵀ.

    Two engine passes of widths p + d + pd and 1 + p (p outputs) and O(n r d) products; the
    engine's tiling, threads and exactness apply unchanged.

    Parameters
    ----------
    A : array of shape (r, d), or of shape (d,) for a diagonal metric diag(A)
        (per-feature bandwidths 1/A; the gradient is then the diagonal's, in O(n d))
    X : array of shape (n, d), float64
        Centred (the objective is translation invariant; centring keeps the split sums free of
        cancellation from an offset).
    Y : array of shape (n, p), float64

    Returns
    -------
    loss : float
    grad : ndarray of the shape of A, only if ``gradient``
    """
    n, d = X.shape
    Y = np.ascontiguousarray(Y, dtype=np.float64)
    p = Y.shape[1]
    diagonal = A.ndim == 1
    Z = np.ascontiguousarray(X * A if diagonal else X @ A.T)
    if not gradient:
        s = _gaussian_sums(Z, Y, algorithm=algorithm, n_jobs=n_jobs)
        num, den = s.num, s.den
        R = num / den[:, None] - Y
        return float(np.sum(R * R) / n)
    V = np.hstack([Y, X, (Y[:, :, None] * X[:, None, :]).reshape(n, p * d)])
    s = _gaussian_sums(Z, V, algorithm=algorithm, n_jobs=n_jobs)
    num, den, log_scale = s.num, s.den, s.log_scale
    Yhat = num[:, :p] / den[:, None]
    R = Yhat - Y
    T = num[:, p:p + d] / den[:, None]                       # Σⱼ k̃ᵢⱼ xⱼ
    U = num[:, p + d:].reshape(n, p, d) / den[:, None, None]  # Σⱼ k̃ᵢⱼ yⱼ⊗xⱼ
    a = np.sum(R * Yhat, axis=1)                              # rᵢ·ŷᵢ
    u = a[:, None] * T - np.einsum("ik,ikd->id", R, U)
    # Column sums cⱼ = Σᵢ Kᵢⱼ [aᵢ − rᵢ·yⱼ] / S₀ᵢ, with S₀ᵢ = den·exp(log_scale): the weight
    # exp(−log_scale) of row i is finite unless the row is isolated (handled below).
    isolated = log_scale < -_ISOLATED
    weights = np.where(isolated, 0.0, np.exp(-np.maximum(log_scale, -_ISOLATED)))
    V2 = np.hstack([a[:, None], R]) / den[:, None]
    col = _gaussian_sums(Z, np.ascontiguousarray(V2), weights, algorithm=algorithm, n_jobs=n_jobs).total(values=True)
    for i in np.flatnonzero(isolated):
        log_k = -0.5 * np.sum((Z - Z[i]) ** 2, axis=1) - log_scale[i]
        log_k[i] = -np.inf
        k = np.exp(log_k)
        col += k[:, None] * V2[i]
    c = col[:, 0] - np.sum(Y * col[:, 1:], axis=1)
    if diagonal:  # a_k G_kk, with G_kk = Σⱼ cⱼ xⱼₖ² − 2 Σᵢ xᵢₖ uᵢₖ
        AG = A * (c @ (X * X) - 2.0 * np.sum(X * u, axis=0))
    else:
        AG = (Z * c[:, None]).T @ X - Z.T @ u - (u @ A.T).T @ X
    return float(np.sum(R * R) / n), 2.0 * AG / n


class MetricLearningRegressor(ClassNamePrefixFeaturesOutMixin, MultiOutputMixin, RegressorMixin, TransformerMixin, BaseEstimator):
    """Nadaraya–Watson regression in a learned linear metric (MLKR).

    The Gaussian kernel exp(−‖A(x − x')‖²/2) with A of shape (n_components, n_features) is
    fitted by minimising the exact leave-one-out squared error of the local mean (the hollow
    kernel: no refitting), with analytic gradients computed by the engine and L-BFGS
    (Weinberger & Tesauro, *Metric learning for kernel regression*, AISTATS 2007). A is a
    learned metric *and* bandwidth: its scale sets the kernel's width, its rows the directions
    that matter. ``transform`` maps into the learned space (Z = X Aᵀ), where any local
    estimator can be used; ``predict`` is the local mean there.

    Parameters
    ----------
    n_components : int, optional
        Rank r of A (the dimension of the learned space); default: all features.
    init : {"pca", "identity", "random"} or array of shape (n_components, n_features), default="pca"
        Directions of the starting A: the leading principal axes, the first coordinate axes or
        a Gaussian random matrix; each is scaled by 1/h, with h the isotropic LOO bandwidth of
        the local mean in the projected space (so the search starts from the best single
        bandwidth and only improves on it). An array is used as given.
    max_iter : int, default=100
        L-BFGS iterations.
    tol : float, default=1e-6
        L-BFGS stops when an iteration decreases the LOO error, relative to the variance of y,
        by less than this (scipy's ``ftol``).
    random_state : int, RandomState or None
        Seeds ``init="random"``.
    algorithm : {"auto", "brute", "kd_tree", "expansion"}, default="auto"
        Engine path of the local sums (see :func:`~localization.local_mean`).
    n_jobs : int, optional
        Threads; results do not depend on it.
    verbose : bool, default=False
        Progress bars on stderr when a stage lasts more than 0.2 s: the leave-one-out search
        of the starting bandwidth, then the L-BFGS iterations (with the LOO error).

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        The learned A.
    n_iter_ : int
        L-BFGS iterations run.
    loss_curve_ : ndarray
        The LOO mean squared error at the start and after each iteration.
    loo_error_ : float
        The final LOO mean squared error (``loss_curve_[-1]``).
    regressor_ : LocalMeanRegressor
        The Gaussian local mean (bandwidth 1) fitted in the learned space.

    See Also
    --------
    LocalMeanRegressor : ``bandwidth="loo_per_feature"`` learns a diagonal metric.

    Examples
    --------
    >>> import numpy as np
    >>> from localization import MetricLearningRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 5))
    >>> y = np.sin(X @ np.array([1.0, 1.0, 0.0, 0.0, 0.0]))
    >>> mlkr = MetricLearningRegressor(n_components=2, random_state=0).fit(X, y)
    >>> mlkr.transform(X).shape
    (200, 2)
    >>> bool(mlkr.loss_curve_[-1] < mlkr.loss_curve_[0])
    True
    """

    _parameter_constraints = {
        "n_components": [COUNT, None],
        "init": [StrOptions({"pca", "identity", "random"}), "array-like"],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "tol": [NON_NEGATIVE],
        "random_state": ["random_state"],
        "algorithm": [StrOptions({"auto", "brute", "kd_tree", "expansion"})],  # exact paths only
        "n_jobs": N_JOBS,
        "verbose": ["verbose"],
    }

    def __init__(self, n_components: int | None = None, init: str | ArrayLike = "pca", max_iter: int = 100,
                 tol: float = 1e-6, random_state: SeedLike = None, algorithm: str = "auto",
                 n_jobs: int | None = None, verbose: int | bool = False) -> None:
        self.n_components = n_components
        self.init = init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.algorithm = algorithm
        self.n_jobs = n_jobs
        self.verbose = verbose

    def _initial(self, X, Y):
        n, d = X.shape
        r = d if self.n_components is None else check_n_components(self.n_components, d, allow_zero=False)
        if not isinstance(self.init, str):
            A = np.array(self.init, dtype=np.float64)
            if A.ndim != 2 or A.shape[1] != d or (self.n_components is not None and A.shape[0] != r):
                raise LocalizationError(f"`init` must have shape ({r}, {d}), got {A.shape}", "init")
            if not np.all(np.isfinite(A)):
                raise LocalizationError("`init` must be finite", "init")
            return A
        if self.init == "pca":
            _, _, Vt = np.linalg.svd(X, full_matrices=False)
            A = np.zeros((r, d))
            A[: min(r, len(Vt))] = Vt[:r]
        elif self.init == "identity":
            A = np.eye(r, d)
        else:
            A = check_random_state(self.random_state).standard_normal((r, d)) / np.sqrt(d)
        Z = X @ A.T
        if not np.any(np.ptp(Z, axis=0) > 0):
            return A
        h = LocalMeanRegressor(bandwidth="loo", algorithm=self.algorithm, n_jobs=self.n_jobs,
                               verbose=self.verbose).fit(Z, Y).bandwidth_
        return A / h

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: ArrayLike) -> Self:
        """Learn A by L-BFGS on the LOO error, then fit the local mean in the learned space. Returns self."""
        from scipy.optimize import minimize

        X, y = validate_data(self, X, y, dtype=FLOAT_DTYPES, order="C", multi_output=True, y_numeric=True)
        if len(X) < 2:
            raise LocalizationError(f"MetricLearningRegressor learns by leave-one-out and needs at least 2 samples, got "
                                    f"n_samples = {len(X)}", "X")
        Xc = X.astype(np.float64)
        Xc = Xc - Xc.mean(axis=0)
        Y = np.ascontiguousarray(np.asarray(y, dtype=np.float64).reshape(len(y), -1))
        if not np.all(np.isfinite(Y)):
            raise LocalizationError("`y` must be finite", "y")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the edge-of-grid warning of the starting bandwidth
            A0 = self._initial(Xc, Y)
        shape = A0.shape
        # The LOO error relative to the variance of y: scipy's ftol is then relative to it.
        scale = float(np.mean(np.var(Y, axis=0)))
        scale = scale if scale > 0 else 1.0
        kw = dict(algorithm=self.algorithm, n_jobs=self.n_jobs)

        seen = {}  # the losses L-BFGS evaluated, by point: its iterates are among them

        def fun(a):
            loss, grad = mlkr_loss(a.reshape(shape), Xc, Y, **kw)
            seen[a.tobytes()] = loss
            return loss / scale, grad.ravel() / scale

        def loss_at(a):
            loss = seen.get(a.tobytes())
            return mlkr_loss(a.reshape(shape), Xc, Y, gradient=False, **kw) if loss is None else loss

        curve = [loss_at(A0.ravel())]

        def iterate(a):
            curve.append(loss_at(a))
            bar.update(1, loo_error=f"{curve[-1]:.4g}")

        if self.max_iter > 0:
            with Progress(self.verbose, "MetricLearningRegressor", unit="iteration", total=self.max_iter) as bar:
                res = minimize(fun, A0.ravel(), jac=True, method="L-BFGS-B", callback=iterate,
                               options={"maxiter": self.max_iter, "ftol": self.tol, "gtol": 0.0})
            A, self.n_iter_ = res.x.reshape(shape), int(res.nit)
            if res.status == 1:
                warnings.warn(f"MetricLearningRegressor: L-BFGS did not converge in max_iter={self.max_iter} iterations",
                              ConvergenceWarning, stacklevel=4)  # the caller of fit, past the two decorators
        else:
            A, self.n_iter_ = A0, 0
        self.components_ = A
        self._n_features_out = A.shape[0]
        self.loss_curve_ = np.array(curve)
        self.loo_error_ = float(curve[-1])
        self.regressor_ = LocalMeanRegressor(bandwidth=1.0, algorithm=self.algorithm, n_jobs=self.n_jobs).fit(
            self._project(X), y)
        return self

    def _project(self, X):
        return np.ascontiguousarray(X.astype(np.float64) @ self.components_.T)

    def transform(self, X: ArrayLike) -> FloatArray:
        """X mapped into the learned space: X Aᵀ, shape (n, n_components)."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False)
        return self._project(X)

    def predict(self, X: ArrayLike | None) -> FloatArray:
        """The local mean in the learned space; ``X=None``: exact LOO predictions on the training sample."""
        check_is_fitted(self)
        return self.regressor_.predict(None if X is None else self.transform(X))

    def loo_predict(self) -> FloatArray:
        """Exact leave-one-out predictions on the training sample (the same as ``predict(None)``)."""
        return self.predict(None)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64"]  # the learned space is float64
        return tags

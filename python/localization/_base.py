"""What every local estimator shares: validated training data and a bound kernel; and the helpers
several families use (the kNN kernel's default k, local covariance frames)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ._progress import Progress
from ._validation import COUNT, FLOAT_DTYPES, N_JOBS, check_sample_weight, validate_data
from .adaptive import LOO_RULES, MultiKernel, is_loo
from .engine import ALGORITHM, bind_kernel
from .kernels import BANDWIDTH, KERNEL, KernelCombination, as_kernel, bandwidth_constraint

if TYPE_CHECKING:
    from ._typing import F

DEFAULT_N_NEIGHBORS = 5

#: The `_parameter_constraints` of the parameters that estimators built on one bound kernel
#: share; each adds its own.
KERNEL_CONSTRAINTS = {
    "kernel": KERNEL,
    "bandwidth": BANDWIDTH,
    "n_neighbors": [COUNT, None],
    "algorithm": ALGORITHM,
    "n_jobs": N_JOBS,
}

#: ... and those of the estimators that can choose their bandwidth by leave-one-out: a LOO rule,
#: a MultiKernel of candidate kernels, the grid searched.
LOO_KERNEL_CONSTRAINTS = {
    **KERNEL_CONSTRAINTS,
    "kernel": [*KERNEL, MultiKernel],
    "bandwidth": bandwidth_constraint(LOO_RULES),
    "bandwidth_grid": ["array-like", None],
    # The LOO searches and predictions show a progress bar.
    "verbose": ["verbose"],
}


def keeps_state_on_error(method: F) -> F:
    """Decorate a ``fit``-like method so that, when it raises (bad input, ``MemoryError``, or
    ``KeyboardInterrupt`` from Ctrl-C during a long native call), the estimator gets back the
    attributes it had before the call: an interrupted re-fit leaves the previous fit usable.

    Fitted state is assigned, never mutated in place, so restoring the attribute dict suffices.
    """

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        before = dict(self.__dict__)
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(before)
            raise

    return wrapper  # type: ignore[return-value]


class LocalEstimator(BaseEstimator):
    """Base of the lazy local estimators: ``fit`` stores the sample, predictions are local sums."""

    # Whether the estimator is defined for signed kernels (its output is a local mean).
    _signed_kernels = False

    def _kernel(self):
        if isinstance(self.kernel, MultiKernel):
            # Equal weights until the LOO weights are learned (adaptive.fit_multikernel).
            return KernelCombination(self.kernel.kernels, [1.0 / len(self.kernel.kernels)] * len(self.kernel.kernels),
                                     normalized=True)
        return as_kernel(self.kernel, self._bandwidth(), knn_k(self.kernel, getattr(self, "n_neighbors", None)))

    def _bandwidth(self):
        # A leave-one-out rule starts from h = 1; the search then sets kernel_ (adaptive.fit_loo).
        return 1.0 if is_loo(self.bandwidth, LOO_RULES + ("lscv", "lscv_per_feature")) else self.bandwidth

    def _store(self, X, sample_weight):
        self.X_fit_ = X
        self.sample_weight_ = check_sample_weight(sample_weight, X.shape[0], X.dtype)
        self.kernel_ = self._kernel()
        # A fresh holder: a copy of the estimator made before this fit keeps its own.
        self._bound_cache = [None]
        # Resolving here validates the kernel and bandwidth at fit time.
        self._bound()
        return self

    def _bound(self):
        """The bound kernel of the fitted state, kept (and prepared) while the state holds.

        Kept in the one-slot holder ``_bound_cache`` (made at fit, filled in place so that a
        prediction leaves the estimator's attributes as they were) with the kernel, samples and
        weights it was bound to: a later assignment of ``kernel_`` (a bandwidth search) binds
        anew. Pickles hold an empty slot; the bound kernel is rebuilt on first use."""
        key = (self.kernel_, self.X_fit_, self.sample_weight_)
        slot = self.__dict__.setdefault("_bound_cache", [None])
        if slot[0] is not None and all(a is b for a, b in zip(slot[0][0], key)):
            return slot[0][1]
        bk = bind_kernel(*key, self._signed_kernels, type(self).__name__).prepare()
        slot[0] = (key, bk)
        return bk

    def __getstate__(self):
        state = super().__getstate__()
        if "_bound_cache" in state:
            state["_bound_cache"] = [None]
        return state

    def _query(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False, densify=True)
        return np.ascontiguousarray(X, dtype=self.X_fit_.dtype)

    def _sums(self, X, values=None, **kw):
        """Local sums at the rows of X; ``X=None``: at the training points, each leaving
        itself out (the hollow kernel: exact leave-one-out, scikit-learn's ``predict(None)``)."""
        if X is None:
            check_is_fitted(self)
            Q, kw = self.X_fit_, dict(kw, exclude_self=True)
        else:
            Q = self._query(X)
        with self._progress("predict") as bar:
            return self._bound().sums(Q, values, self.sample_weight_, algorithm=self.algorithm, n_jobs=self.n_jobs,
                                      prepared=True, progress=bar.callback, **kw)

    def _progress(self, method):
        """The progress bar (queries done) of ``method`` on many queries, when ``verbose``."""
        return Progress(getattr(self, "verbose", False), f"{type(self).__name__}.{method}", unit="query")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = True
        return tags


def knn_k(kernel, n_neighbors):
    """k for kernel="knn": the estimator's n_neighbors, else the library default."""
    if n_neighbors is None and isinstance(kernel, str) and kernel.lower() == "knn":
        return DEFAULT_N_NEIGHBORS
    return n_neighbors


def local_frames(bk, Q, sample_weight, n_components, algorithm="auto", n_jobs=None):
    """Local mean offset, covariance eigen-pairs and a validity mask at each query.

    One engine pass with degree-1 design moments gives S₀ = Σ K w, Σ K w δ and Σ K w δδᵀ with
    δ = xᵢ − x*; then m(x*) − x* = Σ K w δ / S₀ and the local covariance about the local mean
    is C = Σ K w δδᵀ / S₀ − (m − x*)(m − x*)ᵀ (centring at m makes it independent of x*).

    Returns (offset (m, d), eigenvalues (m, q) descending, eigenvectors (m, q, d) as rows,
    valid (m,)). Coordinates are the caller's (per-feature bandwidths are undone).
    """
    sums = bk.sums(Q, None, sample_weight, degree=1, algorithm=algorithm, n_jobs=n_jobs, prepared=True)
    mom = sums.moments
    mom = mom.astype(np.float64)
    s0 = mom[:, 0, 0]
    valid = s0 > 0
    d = Q.shape[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        mu = mom[:, 0, 1:] / s0[:, None]
        cov = mom[:, 1:, 1:] / s0[:, None, None] - mu[:, :, None] * mu[:, None, :]
    if bk.feature_scale is not None:
        s = bk.feature_scale.astype(np.float64)
        mu = mu * s
        cov = cov * s[None, :, None] * s[None, None, :]
    mu[~valid] = np.nan
    vals = np.full((len(Q), n_components), np.nan)
    vecs = np.full((len(Q), n_components, d), np.nan)
    if n_components and np.any(valid):
        cv = cov[valid]
        cv = 0.5 * (cv + np.transpose(cv, (0, 2, 1)))
        ev, V = np.linalg.eigh(cv)  # ascending
        ev = ev[:, ::-1][:, :n_components]
        V = np.transpose(V[:, :, ::-1][:, :, :n_components], (0, 2, 1))
        # Sign convention of scikit-learn's PCA: the largest-|.| entry of each axis is positive.
        big = np.take_along_axis(V, np.argmax(np.abs(V), axis=2)[:, :, None], axis=2)
        V = V * np.where(big < 0, -1.0, 1.0)
        vals[valid] = np.maximum(ev, 0.0)
        vecs[valid] = V
    return mu, vals, vecs, valid

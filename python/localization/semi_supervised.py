"""Relaxation labeling as an iterated self-local mean / mode.

Soft (label propagation): the label distributions P (n × classes) are replaced by their
local mean, P ← K̃P with K̃ = D⁻¹K the row-normalised kernel, and the known labels are
clamped back after every step. Every iteration is ONE call of the local-mean engine with
the current label distributions as the values: the n × n kernel matrix is never stored
(scikit-learn's ``LabelPropagation`` builds it densely). The hard, unsupervised twin (labels
replaced by their local mode) is :class:`localization.cluster.LocalModeClustering`, also
importable from here.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ._base import KERNEL_CONSTRAINTS, LocalEstimator, keeps_state_on_error
from ._fixed_point import iterate
from ._validation import COUNT, FLOAT_DTYPES, NON_NEGATIVE, fit_context, validate_data, LocalizationError
from .cluster import LocalModeClustering

if TYPE_CHECKING:
    from ._typing import ArrayLike, BandwidthLike, FloatArray, KernelLike, NDArray, Self


__all__ = ["LabelPropagation", "LocalModeClustering"]


def _normalise_rows(P):
    """Rows divided by their sums; all-zero rows stay zero (as in scikit-learn)."""
    s = P.sum(axis=1, keepdims=True)
    s[s == 0] = 1.0
    return P / s


class LabelPropagation(ClassifierMixin, LocalEstimator):
    """Semi-supervised label propagation (Zhu & Ghahramani 2002) as an iterated local mean.

    Unlabelled samples carry the label ``-1`` (scikit-learn's convention). Starting from the
    one-hot labels (zero rows for unlabelled samples), each iteration computes the local
    mean P ← K̃P over all samples, renormalises each row to a distribution and clamps the
    labelled rows to their one-hot labels; it stops when Σ|P − P_prev| < ``tol`` (checked
    before each step, as scikit-learn does) or after ``max_iter`` steps.

    With ``kernel="gaussian"`` and ``bandwidth = 1/sqrt(2γ)`` this reproduces scikit-learn's
    ``LabelPropagation(kernel="rbf", gamma=γ)`` (same labels and distributions); with
    ``kernel="knn"`` its ``kernel="knn"`` (each sample counts among its own neighbours).

    Parameters
    ----------
    kernel : str or Kernel, default="gaussian"
        Any profile, or ``"knn"``.
    bandwidth : float, array, "scott", "silverman", Balloon or SamplePoint, default=1.0
    n_neighbors : int, optional
        k of the ``"knn"`` kernel (default 7, as scikit-learn).
    max_iter : int, default=1000
    tol : float, default=1e-3
    algorithm : {"auto", "brute", "kd_tree", "expansion"}, default="auto"
    n_jobs : int, optional
        Threads; results do not depend on it.
    verbose : bool, default=False
        Show a progress bar (iterations) on stderr when the fit lasts more than 0.2 s.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    label_distributions_ : ndarray of shape (n_samples, n_classes)
    transduction_ : ndarray of shape (n_samples,)
        The label given to every training sample.
    n_iter_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from localization.semi_supervised import LabelPropagation
    >>> X = np.array([[0.0], [0.1], [0.2], [1.0], [1.1], [1.2]])
    >>> y = np.array([0, -1, -1, 1, -1, -1])
    >>> LabelPropagation(bandwidth=0.1).fit(X, y).transduction_.tolist()
    [0, 0, 0, 1, 1, 1]
    """

    def __init__(
        self, kernel: KernelLike = "gaussian", bandwidth: BandwidthLike = 1.0, n_neighbors: int | None = None,
        max_iter: int = 1000, tol: float = 1e-3, algorithm: str = "auto", n_jobs: int | None = None, verbose: bool = False,
    ) -> None:
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.max_iter = max_iter
        self.tol = tol
        self.algorithm = algorithm
        self.n_jobs = n_jobs
        self.verbose = verbose

    _parameter_constraints = {**KERNEL_CONSTRAINTS, "max_iter": [COUNT], "tol": [NON_NEGATIVE], "verbose": ["verbose"]}

    def _kernel(self):
        from .kernels import as_kernel

        k = self.n_neighbors
        if k is None and isinstance(self.kernel, str) and self.kernel.lower() == "knn":
            k = 7
        return as_kernel(self.kernel, self.bandwidth, k)

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: ArrayLike) -> Self:
        """Propagate the known labels (``-1`` = unlabelled) to every sample. Returns self."""
        X, y = validate_data(self, X, y, dtype=FLOAT_DTYPES, order="C", densify=True)
        check_classification_targets(y)
        max_iter, tol = self.max_iter, float(self.tol)
        self._store(X, None)
        unlabelled = y == -1 if y.dtype.kind in "iuf" else np.zeros(len(y), dtype=bool)
        classes = np.unique(y[~unlabelled])
        if len(classes) == 0:
            raise LocalizationError("`y` has no labelled sample (every entry is -1)", "y")
        self.classes_ = classes
        n, c = len(y), len(classes)
        static = np.zeros((n, c))
        static[~unlabelled, np.searchsorted(classes, y[~unlabelled])] = 1.0
        P = static.copy()
        bk = self._bound()
        labelled = ~unlabelled[:, None]

        def update(idx, P):
            # Each step is one engine call with the current P as the values, against the
            # samples prepared once for the whole fit (layout, kd-tree, neighbour index).
            sums = bk.sums(X, np.ascontiguousarray(P, dtype=X.dtype), algorithm=self.algorithm, n_jobs=self.n_jobs,
                           prepared=True, values_per_call=True)
            num, den = sums.num, sums.den
            # K̃P = num/den; the row renormalisation then cancels den, but dividing first keeps
            # the numbers in the same range as scikit-learn's D⁻¹K product.
            with np.errstate(invalid="ignore", divide="ignore"):
                new = num.astype(np.float64) / den.astype(np.float64)[:, None]
            new[~(den > 0)] = 0.0
            new = np.where(labelled, static, _normalise_rows(new))
            return new, np.abs(new - P).sum(), None

        # scikit-learn checks Σ|P − P_prev| before each step, from P_prev = 0 (so the one-hot
        # labels alone may already be within tol), and warns whenever max_iter steps were taken.
        steps = 0 if np.abs(static).sum() < tol else max_iter
        self.n_iter_, _ = iterate(update, P, steps, tol, whole=True, desc="LabelPropagation", verbose=self.verbose)
        if self.n_iter_ == max_iter:
            warnings.warn(f"max_iter={max_iter} was reached without convergence.", ConvergenceWarning, stacklevel=2)
        self.label_distributions_ = _normalise_rows(P)
        self.transduction_ = classes[np.argmax(self.label_distributions_, axis=1)]
        return self

    def predict_proba(self, X: ArrayLike) -> FloatArray:
        """Local mean of the fitted label distributions at new points (rows sum to one)."""
        check_is_fitted(self)
        sums = self._sums(X, np.ascontiguousarray(self.label_distributions_, dtype=self.X_fit_.dtype))
        num, den = sums.num, sums.den
        with np.errstate(invalid="ignore", divide="ignore"):
            P = num.astype(np.float64) / den.astype(np.float64)[:, None]
        P[~(den > 0)] = 0.0
        return _normalise_rows(P)

    def predict(self, X: ArrayLike) -> NDArray[Any]:
        """The most probable class at each new point."""
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

"""Relaxation labeling as an iterated self-local mean / mode.

Soft (label propagation): the label distributions P (n × classes) are replaced by their
local mean, P ← K̃P with K̃ = D⁻¹K the row-normalised kernel, and the known labels are
clamped back after every step. Hard (local mode clustering): labels are replaced by their
local mode, y ← argmax_c (K̃ onehot(y))_c. Every iteration is ONE call of the local-mean
engine with the current label distributions as the values: the n × n kernel matrix is never
stored (scikit-learn's ``LabelPropagation`` builds it densely).
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.base import ClassifierMixin, ClusterMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ._base import LocalEstimator, keeps_state_on_error
from ._validation import FLOAT_DTYPES, check_positive_int, validate_data


def _check_tol(tol):
    if isinstance(tol, (bool, np.bool_)) or not isinstance(tol, numbers.Real) or not tol >= 0 or not np.isfinite(tol):
        raise ValueError(f"`tol` must be a finite non-negative number, got {tol!r}")
    return float(tol)


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

    def __init__(self, kernel="gaussian", bandwidth=1.0, n_neighbors=None, max_iter=1000, tol=1e-3, algorithm="auto", n_jobs=None):
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.max_iter = max_iter
        self.tol = tol
        self.algorithm = algorithm
        self.n_jobs = n_jobs

    def _kernel(self):
        from .kernels import as_kernel

        k = self.n_neighbors
        if k is None and isinstance(self.kernel, str) and self.kernel.lower() == "knn":
            k = 7
        return as_kernel(self.kernel, self.bandwidth, k)

    @keeps_state_on_error
    def fit(self, X, y):
        """Propagate the known labels (``-1`` = unlabelled) to every sample. Returns self."""
        X, y = validate_data(self, X, y, dtype=FLOAT_DTYPES, order="C", densify=True)
        check_classification_targets(y)
        max_iter = check_positive_int(self.max_iter, "max_iter")
        tol = _check_tol(self.tol)
        self._store(X, None)
        unlabelled = y == -1 if y.dtype.kind in "iuf" else np.zeros(len(y), dtype=bool)
        classes = np.unique(y[~unlabelled])
        if len(classes) == 0:
            raise ValueError("`y` has no labelled sample (every entry is -1)")
        self.classes_ = classes
        n, c = len(y), len(classes)
        static = np.zeros((n, c))
        static[~unlabelled, np.searchsorted(classes, y[~unlabelled])] = 1.0
        P = static.copy()
        previous = np.zeros((n, c))
        bk = self._bound()
        labelled = ~unlabelled[:, None]
        for self.n_iter_ in range(max_iter):
            if np.abs(P - previous).sum() < tol:
                break
            previous = P
            num, den, *_ = bk.sums(X, np.ascontiguousarray(P, dtype=X.dtype), algorithm=self.algorithm, n_jobs=self.n_jobs)
            # K̃P = num/den; the row renormalisation then cancels den, but dividing first keeps
            # the numbers in the same range as scikit-learn's D⁻¹K product.
            with np.errstate(invalid="ignore", divide="ignore"):
                P = num.astype(np.float64) / den.astype(np.float64)[:, None]
            P[~(den > 0)] = 0.0
            P = np.where(labelled, static, _normalise_rows(P))
        else:
            warnings.warn(f"max_iter={max_iter} was reached without convergence.", ConvergenceWarning, stacklevel=2)
            self.n_iter_ += 1
        self.label_distributions_ = _normalise_rows(P)
        self.transduction_ = classes[np.argmax(self.label_distributions_, axis=1)]
        return self

    def predict_proba(self, X):
        """Local mean of the fitted label distributions at new points (rows sum to one)."""
        check_is_fitted(self)
        num, den, *_ = self._sums(X, np.ascontiguousarray(self.label_distributions_, dtype=self.X_fit_.dtype))
        with np.errstate(invalid="ignore", divide="ignore"):
            P = num.astype(np.float64) / den.astype(np.float64)[:, None]
        P[~(den > 0)] = 0.0
        return _normalise_rows(P)

    def predict(self, X):
        """The most probable class at each new point."""
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


class LocalModeClustering(ClusterMixin, LocalEstimator):
    """Unsupervised relaxation labeling: iterate the hard local mode y ← argmax K̃·onehot(y).

    Starts from an over-segmentation (k-means with ``n_init_clusters`` clusters, or given
    initial labels) and lets every sample take the label that carries most kernel weight
    around it, all samples at once, until no label changes. Labels can only disappear, so
    clusters merge; the number of clusters is found, not given. Each iteration is one engine
    call whose values are the one-hot labels of the clusters still alive. Synchronous updates
    can fall into a 2-cycle; that is detected and reported (``converged_ = False``).

    Parameters
    ----------
    kernel : str or Kernel, default="gaussian"
    bandwidth : float, array, "scott", "silverman", Balloon or SamplePoint, default=1.0
    n_neighbors : int, optional
        k of the ``"knn"`` kernel.
    n_init_clusters : int, default=30
        Clusters of the initial k-means over-segmentation (capped at the number of samples).
    init : "kmeans" or array-like of shape (n_samples,), default="kmeans"
        Initial labels (any hashable values) instead of k-means.
    exclude_self : bool, default=False
        Leave each sample's own vote out (hollow kernel).
    max_iter : int, default=100
    algorithm : {"auto", "brute", "kd_tree", "expansion"}, default="auto"
    random_state : int, RandomState or None
        Seed of the k-means initialisation.
    n_jobs : int, optional

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Cluster labels 0..n_clusters_-1 (numbered by first appearance).
    n_clusters_ : int
    n_iter_ : int
    converged_ : bool

    Examples
    --------
    >>> import numpy as np
    >>> from localization.semi_supervised import LocalModeClustering
    >>> X = np.r_[np.linspace(0, 1, 20), np.linspace(5, 6, 20)][:, None]
    >>> LocalModeClustering(bandwidth=0.5, n_init_clusters=8, random_state=0).fit(X).n_clusters_
    2
    """

    def __init__(
        self, kernel="gaussian", bandwidth=1.0, n_neighbors=None, n_init_clusters=30, init="kmeans", exclude_self=False,
        max_iter=100, algorithm="auto", random_state=None, n_jobs=None,
    ):
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.n_init_clusters = n_init_clusters
        self.init = init
        self.exclude_self = exclude_self
        self.max_iter = max_iter
        self.algorithm = algorithm
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _initial_labels(self, X):
        n = X.shape[0]
        if isinstance(self.init, str):
            if self.init != "kmeans":
                raise ValueError(f"`init` must be 'kmeans' or an array of initial labels, got {self.init!r}")
            k = min(check_positive_int(self.n_init_clusters, "n_init_clusters"), n)
            from sklearn.cluster import KMeans

            with warnings.catch_warnings():
                # Fewer distinct points than clusters is fine for an over-segmentation.
                warnings.simplefilter("ignore", ConvergenceWarning)
                return KMeans(n_clusters=k, n_init=1, random_state=check_random_state(self.random_state)).fit_predict(X)
        init = np.asarray(self.init)
        if init.shape != (n,):
            raise ValueError(f"`init` must have shape ({n},) to give one initial label per sample, got {init.shape}")
        return np.unique(init, return_inverse=True)[1]

    @keeps_state_on_error
    def fit(self, X, y=None):
        """Cluster X by iterating the local mode of the labels. Returns self."""
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", densify=True)
        max_iter = check_positive_int(self.max_iter, "max_iter")
        self._store(X, None)
        codes = self._initial_labels(X)
        bk = self._bound()
        history = [codes]
        self.converged_ = False
        self.n_iter_ = 0
        for it in range(max_iter):
            alive, compact = np.unique(codes, return_inverse=True)
            onehot = np.zeros((len(codes), len(alive)), dtype=X.dtype)
            onehot[np.arange(len(codes)), compact] = 1
            num, den, *_ = bk.sums(X, onehot, exclude_self=bool(self.exclude_self), algorithm=self.algorithm, n_jobs=self.n_jobs)
            # A sample no other sample reaches keeps its label (argmax of an all-zero row would
            # silently move it to the first cluster).
            new = np.where(den > 0, alive[np.argmax(num, axis=1)], codes)
            self.n_iter_ = it + 1
            if np.array_equal(new, codes):
                self.converged_ = True
                break
            if len(history) >= 2 and np.array_equal(new, history[-2]):
                warnings.warn("LocalModeClustering oscillates between two labelings (synchronous updates); stopping.",
                              ConvergenceWarning, stacklevel=2)
                break
            history = [codes, new]
            codes = new
        else:
            warnings.warn(f"max_iter={max_iter} was reached without convergence.", ConvergenceWarning, stacklevel=2)
        _, first = np.unique(codes, return_index=True)
        order = np.argsort(np.argsort(first))  # renumber clusters by first appearance
        self.labels_ = order[np.unique(codes, return_inverse=True)[1]]
        self.n_clusters_ = int(len(first))
        return self

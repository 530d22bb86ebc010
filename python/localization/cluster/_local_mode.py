"""Local mode clustering: relaxation labeling without labels, the iterated hard local mode.

Labels are replaced by their local mode, y ← argmax_c (K̃ onehot(y))_c with K̃ = D⁻¹K the
row-normalised kernel; every iteration is one call of the local-mean engine whose values are
the one-hot labels, so the n × n kernel matrix is never stored. Its soft, semi-supervised
twin is :class:`localization.semi_supervised.LabelPropagation`.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np
from sklearn.base import ClusterMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from .._base import KERNEL_CONSTRAINTS, LocalEstimator, keeps_state_on_error
from .._validation import COUNT, FLOAT_DTYPES, StrOptions, fit_context, validate_data, LocalizationError

if TYPE_CHECKING:
    from .._typing import ArrayLike, BandwidthLike, KernelLike, SeedLike, Self



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
    >>> from localization.cluster import LocalModeClustering
    >>> X = np.r_[np.linspace(0, 1, 20), np.linspace(5, 6, 20)][:, None]
    >>> LocalModeClustering(bandwidth=0.5, n_init_clusters=8, random_state=0).fit(X).n_clusters_
    2
    """

    def __init__(
        self, kernel: KernelLike = "gaussian", bandwidth: BandwidthLike = 1.0, n_neighbors: int | None = None,
        n_init_clusters: int = 30, init: str | ArrayLike = "kmeans", exclude_self: bool = False, max_iter: int = 100,
        algorithm: str = "auto", random_state: SeedLike = None, n_jobs: int | None = None,
    ) -> None:
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

    _parameter_constraints = {
        **KERNEL_CONSTRAINTS,
        "n_init_clusters": [COUNT],
        "init": [StrOptions({"kmeans"}), "array-like"],
        "exclude_self": ["boolean"],
        "max_iter": [COUNT],
        "random_state": ["random_state"],
    }

    def _initial_labels(self, X):
        n = X.shape[0]
        if isinstance(self.init, str):
            k = min(self.n_init_clusters, n)
            from sklearn.cluster import KMeans

            with warnings.catch_warnings():
                # Fewer distinct points than clusters is fine for an over-segmentation.
                warnings.simplefilter("ignore", ConvergenceWarning)
                return KMeans(n_clusters=k, n_init=1, random_state=check_random_state(self.random_state)).fit_predict(X)
        init = np.asarray(self.init)
        if init.shape != (n,):
            raise LocalizationError(f"`init` must have shape ({n},) to give one initial label per sample, got {init.shape}", "init")
        return np.unique(init, return_inverse=True)[1]

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None) -> Self:
        """Cluster X by iterating the local mode of the labels. Returns self."""
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", densify=True)
        max_iter = self.max_iter
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
            sums = bk.sums(X, onehot, exclude_self=bool(self.exclude_self), algorithm=self.algorithm, n_jobs=self.n_jobs)
            num, den = sums.num, sums.den
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

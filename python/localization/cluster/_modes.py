"""Mode seeking on the sample: MedoidShift, QuickShift and PC-Shift.

All three are thin layers over the local-mean engine:

* **MedoidShift** jumps every sample to the sample minimising its local weighted cost
  Σ_k K(x_i, x_k)·D(x_j, x_k)²; for Euclidean D that sample is the one nearest the local
  mean m(x_i) (identity 10 of docs/identities.md), so the engine's local mean plus one nearest-neighbour
  query give the whole forest.
* **QuickShift** links each sample to its nearest sample of higher density (the engine's
  kernel sum) within ``max_dist``; the neighbour search uses the kd-tree.
* **PC-Shift** (subspace-constrained mean shift) moves points by (I − P(x))(m(x) − x), P(x)
  the projector on the top principal axes of the kernel-weighted local covariance, which the
  engine returns as design moments in the same pass as the local mean.

Part of the mode-seeking family :mod:`localization.cluster` (also importable from
:mod:`localization.modes`).
"""

from __future__ import annotations

import operator
import warnings
from typing import TYPE_CHECKING

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, OneToOneFeatureMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .. import _core
from .._base import KERNEL_CONSTRAINTS, keeps_state_on_error, knn_k, local_frames
from .._fixed_point import iterate
from .._progress import Progress
from .._sums import LocalSums
from .._validation import (
    COUNT,
    COUNT_OR_ZERO,
    DISTANCE,
    FLOAT_DTYPES,
    N_JOBS,
    POSITIVE,
    LocalizationWarning,
    StrOptions,
    as_float_array,
    check_n_components,
    check_sample_weight,
    fit_context,
    validate_data,
    LocalizationError,
    LocalizationTypeError,
)
from ..engine import bind
from ..kernels import SPECIAL, canonical_name

if TYPE_CHECKING:
    from .._typing import ArrayLike, BandwidthLike, FloatArray, IntArray, KernelLike, Self


__all__ = ["MedoidShift", "QuickShift", "PCShift", "medoid_shift", "quick_shift", "pc_shift", "pc_shift_step"]


def _profile_name(kernel):
    """MedoidShift and QuickShift evaluate the profile themselves: it must be a named one."""
    if not isinstance(kernel, str):
        raise LocalizationTypeError(f"`kernel` must be a profile name such as 'gaussian', got {type(kernel).__name__}", "kernel")
    name = canonical_name(kernel)
    if name in SPECIAL:
        raise LocalizationError(f"`kernel` must be a radial profile, not {name!r}", "kernel")
    return name


def _forest(next_):
    """(forest parent map, root of every sample, labels numbered by increasing root index)."""
    nxt, root = _core.resolve_forest(np.ascontiguousarray(next_, dtype=np.int64))
    roots, labels = np.unique(root, return_inverse=True)
    return nxt, roots, labels.astype(np.intp)


def _precomputed_knn(D, k, block=256):
    """The k nearest of each row of a distance matrix, the sample itself first, ties by
    index; sorted a block of rows at a time so no second N×N array is allocated."""
    n = D.shape[0]
    ind = np.empty((n, k), dtype=np.int64)
    for a in range(0, n, block):
        key = D[a : a + block].copy()
        rows = np.arange(a, min(a + block, n))
        key[rows - a, rows] = -1.0
        ind[a : a + block] = np.argsort(key, axis=1, kind="stable")[:, :k]
    return ind


def _with_self_first(ind, dist):
    """Make sure every sample is in its own neighbour list (duplicates can push it out)."""
    n = ind.shape[0]
    own = ind == np.arange(n)[:, None]
    missing = ~own.any(axis=1)
    if np.any(missing):
        ind[missing, 1:] = ind[missing, :-1]
        dist[missing, 1:] = dist[missing, :-1]
        ind[missing, 0] = np.flatnonzero(missing)
        dist[missing, 0] = 0
    return ind, dist


#: Error of MedoidShift's Gaussian local means before the nearest samples are certified,
#: relative to the data's width. Coarser means are cheaper but leave more near-ties to sum
#: again (10⁶ blob points: 1e-7 leaves 7,024, 1e-8 704, 1e-9 69; 1e-8 was fastest overall).
_MEAN_TOLERANCE = 1e-8


def _medoid_pass(X, precomputed, k, name, h, weights, n_jobs, progress=None):
    """One MedoidShift pass: next(i) for every row (data) or every row of D (precomputed);
    ``progress(done, total)`` receives the samples done."""
    n = X.shape[0]
    wf = None if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
    if precomputed:
        if k is None:
            return _core.medoid_shift_dense(X, name, h, wf, n_jobs, progress)
        return _core.medoid_shift_knn(X, _precomputed_knn(X, k), None, True, name, h, wf, n_jobs, progress)
    if k is not None:
        dist, ind = _core.NeighborIndex(X).knn(X, k, n_jobs=n_jobs)
        ind, dist = _with_self_first(ind, dist)
        return _core.medoid_shift_knn(X, ind, np.ascontiguousarray(dist), False, name, h, wf, n_jobs, progress)
    w = None if wf is None else wf.astype(X.dtype)
    bk = bind(name, h, X)
    # Only which sample is nearest to each local mean matters: float64 Gaussian means may come
    # from a coarser series (about half the terms at 10⁶ points) and are certified below.
    tol = None
    if name == "gaussian" and X.dtype == np.float64 and n > 1:
        # The bound below grows with the coordinates' size, |x|; the tolerance shrinks with
        # the data's width over |x|, so offset data are certified as easily as centred data.
        size = float(np.sqrt(np.sum(np.max(np.abs(X), axis=0) ** 2)))
        if size > 0:
            tol = max(_MEAN_TOLERANCE * float(np.max(np.ptp(X, axis=0))) / size, _core.SERIES_TOLERANCE)
    sums = bk.sums(X, X, w, n_jobs=n_jobs, progress=progress, series_tolerance=tol)
    nxt = np.arange(n, dtype=np.int64)
    ok = np.flatnonzero(sums.den > 0)  # a sample alone in a compact support stays a root
    if not len(ok):
        return nxt
    M = np.ascontiguousarray(sums.num[ok] / sums.den[ok, None])
    index = _core.NeighborIndex(X)
    # The index answers distance ties with the smallest index, as the dense path.
    if tol is None:
        nxt[ok] = index.knn(M, 1, n_jobs=n_jobs)[1][:, 0]
        return nxt
    dist, ind = index.knn(M, 2, n_jobs=n_jobs)
    nxt[ok] = ind[:, 0]
    # The series errs by at most tol·Σ K in the weight and tol·max|x_k|·Σ K in coordinate k's
    # sum (positive weights: Σ K is the weight), so each coordinate of the mean by at most
    # tol·(max|x_k| + |m_k|)/(1 − tol) ≤ 2.000001·tol·max|x_k|; eps doubles that for rounding.
    # Every sample's distance to the mean is then within eps of the exact one: the nearest is
    # certain where the second is farther by more than 2·eps. The others are summed again
    # at the engine's full accuracy.
    eps = 4 * tol * size
    unsure = ok[~(dist[:, 1] - dist[:, 0] > 2 * eps + 1e-12 * dist[:, 1])]
    if len(unsure):
        again = bk.sums(np.ascontiguousarray(X[unsure]), X, w, n_jobs=n_jobs)
        M = np.ascontiguousarray(again.num / again.den[:, None])
        nxt[unsure] = index.knn(M, 1, n_jobs=n_jobs)[1][:, 0]
    return nxt


def _after(bar, done):
    """The native progress callback of a later pass: its samples count after the ``done`` of
    the earlier passes, so one bar (whose total grows by each pass's samples) covers them all."""
    if bar.callback is None:
        return None
    return lambda d, total: bar.report(done + d, done + total)


class MedoidShift(ClusterMixin, BaseEstimator):
    """MedoidShift clustering: each sample jumps to the medoid of its kernel neighbourhood.

    For every sample i,

        next(i) = argmin_j Σ_k K(x_i, x_k) · D(x_j, x_k)²,

    and the map i → next(i) is a forest whose roots are the modes (Sheikh, Khan & Kanade,
    2007). Unlike MeanShift there is no iteration: one pass gives the whole forest, and the
    modes are always sample points. Ties in the arg-min go to the smallest index (so
    duplicated samples merge); cycles, which the definition does not exclude, are broken at
    their smallest index.

    Parameters
    ----------
    bandwidth : float, default=1.0
        Bandwidth h of the kernel K(x_i, x_k) = k(D(x_i, x_k) / h).
    kernel : str, default="gaussian"
        A radial profile name (see :mod:`localization.kernels`).
    metric : {"euclidean", "precomputed"}, default="euclidean"
        ``"precomputed"``: ``X`` in ``fit`` is an N×N matrix of distances D[j, k] under any
        metric (D[j, k] is read as D(x_j, x_k); the diagonal should be zero).
    n_neighbors : int, optional
        ``None`` (default): the exact, dense definition. With an int k, the **kNN-sparse
        variant**: N(i) is the set of the k nearest samples of i, i itself included (ties by
        index), and both the sum over k and the candidates j are restricted to N(i):
        next(i) = argmin_{j ∈ N(i)} Σ_{k ∈ N(i)} K(x_i, x_k)·D(x_j, x_k)². With k = N it is
        the dense definition; k > N is an error.
    max_iter : int, default=1
        1: the forest of the definition. More: *iterated* MedoidShift — the roots, weighted
        by the total sample weight of their trees, form a new sample and MedoidShift runs on
        them again (a root that jumps joins the tree it jumps to), until no root moves or
        ``max_iter`` passes. This merges the spurious modes a single pass leaves in sparse
        regions (modes must be sample points). Each extra pass costs as much as the first
        one on the (much smaller) set of roots.
    n_jobs : int, optional
        Threads; results do not depend on it.
    verbose : bool, default=False
        Show a progress bar on stderr when the fit lasts more than 0.2 s: the samples done by
        every pass (the total grows by the roots of each further pass).

    Attributes
    ----------
    next_ : ndarray of shape (n_samples,)
        The forest: the sample each sample jumps to (roots point to themselves). With
        ``max_iter > 1`` the links added between roots by the later passes are included.
    n_iter_ : int
        Passes run.
    medoid_indices_ : ndarray of shape (n_clusters,)
        Indices of the roots (the modes), increasing.
    labels_ : ndarray of shape (n_samples,)
        Index into ``medoid_indices_`` of the root each sample's chain reaches.
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        ``X[medoid_indices_]`` (Euclidean metric only).

    Notes
    -----
    Cost and memory:

    * Euclidean, dense: the cost is S₀(x_i)·‖x_j − m(x_i)‖² + const (identity 10 of docs/identities.md), so
      next(i) is the sample nearest the local mean m(x_i): one engine local mean plus one
      kd-tree query. Same cost as one MeanShift step; nothing N×N is allocated.
    * Precomputed, dense: inherently dense — the input is N×N, one more N×N array (D∘D) is
      allocated and the time is O(N³) (a blocked matrix product). Practical up to N ≈ 10⁴.
    * kNN-sparse: O(N·k·d) from data (the identity restricted to N(i)), O(N·k²) from a
      precomputed matrix (which is then only read), after an O(N log N) kd-tree search
      (data) or an O(N² log N) row sort (precomputed).

    Examples
    --------
    >>> import numpy as np
    >>> from localization.cluster import MedoidShift
    >>> X = np.array([[0.0], [0.1], [0.2], [5.0], [5.1], [5.2]])
    >>> ms = MedoidShift(bandwidth=0.5).fit(X)
    >>> ms.labels_.tolist(), ms.medoid_indices_.tolist()
    ([0, 0, 0, 1, 1, 1], [1, 4])
    """

    def __init__(
        self, bandwidth: float = 1.0, kernel: str = "gaussian", metric: str = "euclidean",
        n_neighbors: int | None = None, max_iter: int = 1, n_jobs: int | None = None, verbose: int | bool = False,
    ) -> None:
        self.bandwidth = bandwidth
        self.kernel = kernel
        self.metric = metric
        self.n_neighbors = n_neighbors
        self.max_iter = max_iter
        self.n_jobs = n_jobs
        self.verbose = verbose

    _parameter_constraints = {
        "bandwidth": [POSITIVE],
        "kernel": [str],
        "metric": [StrOptions({"euclidean", "precomputed"})],
        "n_neighbors": [COUNT, None],
        "max_iter": [COUNT],
        "n_jobs": N_JOBS,
        "verbose": ["verbose"],
    }

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None, sample_weight: ArrayLike | None = None) -> Self:
        """Compute the forest. Returns self.

        ``sample_weight`` multiplies K(x_i, x_k) (an integer weight is a duplicated sample).
        """
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C")
        X = np.ascontiguousarray(X)
        h = float(self.bandwidth)
        name = _profile_name(self.kernel)
        n_jobs, max_iter, k = self.n_jobs, self.max_iter, self.n_neighbors
        n = X.shape[0]
        if k is not None:
            if k > n:
                raise LocalizationError(f"`n_neighbors`={k} exceeds the {n} samples (k = n_samples is the dense definition)", "n_neighbors")
        pre = self.metric == "precomputed"
        if pre:
            if X.shape[1] != n:
                raise LocalizationError(f"metric='precomputed' needs a square distance matrix X, got shape {X.shape}", "metric")
            if np.any(X < 0):
                raise LocalizationError("Negative values in data: the precomputed distance matrix X must be non-negative", "X")
        w = check_sample_weight(sample_weight, n, X.dtype)
        mass = np.ones(n) if w is None else w.astype(np.float64)
        with Progress(self.verbose, "MedoidShift", unit="sample") as bar:
            first = _medoid_pass(X, pre, k, name, h, None if w is None else mass, n_jobs, bar.callback)
            parent, root = _core.resolve_forest(first)
            n_iter, done = 1, n
            while n_iter < max_iter:
                # Iterated MedoidShift: the roots, weighted by the mass of their trees, are a
                # new sample; a root that jumps joins the tree of the root it jumps to.
                roots = np.unique(root)
                if len(roots) == 1:
                    break
                sub_w = np.bincount(root, weights=mass, minlength=n)[roots]
                A = np.ascontiguousarray(X[np.ix_(roots, roots)] if pre else X[roots])
                bar.update(0, passes=n_iter + 1)
                sub = _medoid_pass(A, pre, None if k is None else min(k, len(roots)), name, h, sub_w, n_jobs,
                                   _after(bar, done))
                n_iter, done = n_iter + 1, done + len(roots)
                moved = sub != np.arange(len(roots))
                if not moved.any():
                    break
                parent = parent.copy()
                parent[roots[moved]] = roots[sub[moved]]
                parent, root = _core.resolve_forest(parent)
        self.n_iter_ = n_iter
        self.next_ = parent
        roots, labels = np.unique(root, return_inverse=True)
        self.labels_ = labels.astype(np.intp)
        self.medoid_indices_ = roots.astype(np.intp)
        if not pre:
            self.cluster_centers_ = X[self.medoid_indices_]
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.metric == "precomputed"
        tags.input_tags.positive_only = self.metric == "precomputed"
        return tags


class QuickShift(ClusterMixin, BaseEstimator):
    """QuickShift clustering: link every sample to its nearest sample of higher density.

    The density of sample i is the kernel sum ρ_i = Σ_k K(x_i, x_k) w_k (the engine's
    ``kernel_sum``; any kernel of :mod:`localization.kernels`). Each sample is linked to the
    nearest sample j with ρ_j > ρ_i within ``max_dist`` (Euclidean), links longer than
    ``threshold`` are cut, and the trees of the resulting forest are the clusters
    (Vedaldi & Soatto, 2008).

    Ties are broken deterministically: a sample with *equal* density and a smaller index
    counts as higher (so duplicates merge), and among equally near candidates the smaller
    index wins. scikit-image's ``quickshift`` breaks density ties with random noise instead.

    scikit-image sums its Gaussian, and looks for parents, only within ±⌈3·kernel_size⌉
    pixels in row and column. ``window`` reproduces that: with the features
    (ratio·colour, row, column), ``bandwidth=kernel_size``, ``max_dist=max_dist``,
    ``window=ceil(3·kernel_size)`` and ``window_features=[-2, -1]`` the segments are
    scikit-image's (density ties aside). The default sums over every sample (the exact kernel
    sum), which differs from scikit-image's windowed sum by the Gaussian's tail beyond 3σ
    (see the user guide for figures).

    Parameters
    ----------
    bandwidth : float, array, "scott", "silverman", Balloon or SamplePoint, default=1.0
        Bandwidth of the density kernel.
    kernel : str or Kernel, default="gaussian"
    n_neighbors : int, optional
        k of ``kernel="knn"`` (default 5; then ρ_i is a k-NN count and ties are frequent).
    max_dist : float, optional
        Search radius for the parent. Default ``3 * bandwidth`` (scalar bandwidths only);
        ``np.inf`` searches every sample (O(N²) time, still O(N) memory).
    threshold : float, optional
        Links longer than this are cut (default: ``max_dist``, i.e. nothing more is cut).
        Lowering it explores the QuickShift hierarchy without a new search.
    window : float, optional
        Half-width of a box window: the density of sample i and the search for its parent
        only involve samples j with ``|x_jk − x_ik|`` ≤ ``window`` for every feature k in
        ``window_features``. ``None`` (default): every sample. Needs a radial profile with a
        scalar bandwidth.
    window_features : sequence of int, optional
        The features the window applies to (negative indices count from the end; default:
        all features).
    algorithm : {"auto", "brute", "kd_tree", "expansion"}, default="auto"
        How the engine computes the densities (without a window).
    n_jobs : int, optional
    verbose : bool, default=False
        Show progress bars (samples done by the density and the link stages) on stderr when a
        stage lasts more than 0.2 s.

    Attributes
    ----------
    densities_ : ndarray of shape (n_samples,)
        Kernel sums ρ_i (unnormalised; they underflow to 0 for tiny bandwidths, the
        ordering is computed from their logarithms and does not).
    parents_ : ndarray of shape (n_samples,)
        Parent of each sample after the cut (roots are their own parent).
    link_distances_ : ndarray of shape (n_samples,)
        Distance to the uncut parent (``inf`` where no sample above was within ``max_dist``).
    mode_indices_ : ndarray of shape (n_clusters,)
        Indices of the roots, increasing.
    labels_ : ndarray of shape (n_samples,)
        Cluster of each sample: the rank of its root in ``mode_indices_``.
    cluster_centers_ : ndarray of shape (n_clusters, n_features)

    Examples
    --------
    >>> import numpy as np
    >>> from localization.cluster import QuickShift
    >>> X = np.array([[0.0], [0.1], [0.2], [5.0], [5.1]])
    >>> QuickShift(bandwidth=0.5).fit(X).labels_.tolist()
    [0, 0, 0, 1, 1]
    """

    def __init__(
        self, bandwidth: BandwidthLike = 1.0, kernel: KernelLike = "gaussian", n_neighbors: int | None = None,
        max_dist: float | None = None, threshold: float | None = None, window: float | None = None,
        window_features: ArrayLike | None = None, algorithm: str = "auto", n_jobs: int | None = None,
        verbose: int | bool = False,
    ) -> None:
        self.bandwidth = bandwidth
        self.kernel = kernel
        self.n_neighbors = n_neighbors
        self.max_dist = max_dist
        self.threshold = threshold
        self.window = window
        self.window_features = window_features
        self.algorithm = algorithm
        self.n_jobs = n_jobs
        self.verbose = verbose

    _parameter_constraints = {
        **KERNEL_CONSTRAINTS,
        "max_dist": [DISTANCE, None],
        "threshold": [DISTANCE, None],
        "window": [DISTANCE, None],
        "window_features": ["array-like", None],
        "verbose": ["verbose"],
    }

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None, sample_weight: ArrayLike | None = None) -> Self:
        """Estimate the densities, link and cut. Returns self.

        ``sample_weight`` weights each sample's contribution to the densities.
        """
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C")
        X = np.ascontiguousarray(X)
        n_jobs = self.n_jobs
        w = check_sample_weight(sample_weight, X.shape[0], X.dtype)
        scalar_h = POSITIVE.is_satisfied_by(self.bandwidth)
        if self.max_dist is None:
            if not scalar_h:
                raise LocalizationError("`max_dist` must be given when `bandwidth` is not a number", "max_dist")
            max_dist = 3.0 * float(self.bandwidth)
        else:
            max_dist = float(self.max_dist)
        threshold = max_dist if self.threshold is None else float(self.threshold)
        window = self._window(X.shape[1])
        if window is None:
            bk = bind(self.kernel, self.bandwidth, X, knn_k(self.kernel, self.n_neighbors), w, consumer="QuickShift")
            with Progress(self.verbose, "QuickShift densities", unit="sample") as bar:
                sums = bk.sums(X, None, w, algorithm=self.algorithm, n_jobs=n_jobs, progress=bar.callback)
        else:
            if not scalar_h:
                raise LocalizationError("`window` needs a scalar `bandwidth`", "window")
            with Progress(self.verbose, "QuickShift densities", unit="sample") as bar:
                den = _core.quickshift_density(X, window[0], window[1], _profile_name(self.kernel), float(self.bandwidth),
                                               None if w is None else w.astype(np.float64), n_jobs=n_jobs,
                                               progress=bar.callback)
            sums = LocalSums(np.zeros((len(X), 0)), den, np.zeros(len(X)))
        log_density = sums.log_total()
        features, half = window if window is not None else (None, None)
        with Progress(self.verbose, "QuickShift links", unit="sample") as bar:
            parent, dist = _core.quickshift_links(X, np.ascontiguousarray(log_density), float(max_dist),
                                                  window_features=features, window=half, n_jobs=n_jobs, progress=bar.callback)
        parent = parent.copy()
        cut = ~(dist <= threshold)
        parent[cut] = np.flatnonzero(cut)
        self.densities_ = np.exp(log_density)
        self.link_distances_ = dist
        self.parents_, roots, self.labels_ = _forest(parent)
        self.mode_indices_ = roots.astype(np.intp)
        self.cluster_centers_ = X[self.mode_indices_]
        return self

    def _window(self, d):
        """(feature indices, half-width) of the box window, or None."""
        if self.window is None:
            if self.window_features is not None:
                raise LocalizationError("`window_features` needs `window`", "window_features")
            return None
        half = float(self.window)
        feats = range(d) if self.window_features is None else self.window_features
        try:
            idx = [int(operator.index(k)) for k in feats]
        except TypeError:
            raise LocalizationError(f"`window_features` must be feature indices, got {self.window_features!r}", "window_features") from None
        if not idx or any(not -d <= k < d for k in idx):
            raise LocalizationError(f"`window_features` must be indices of the {d} features, got {self.window_features!r}", "window_features")
        return sorted({k % d for k in idx}), half


# --------------------------------------------------------------------------------------
# PC-Shift: subspace-constrained mean shift with the local-covariance projector.


def _step(bk, Y, w, q, algorithm, n_jobs):
    """PC-Shift step (I − P)(m(y) − y) at each row of Y, and the validity mask."""
    if q == 0:
        sums = bk.sums(Y, bk.X, w, algorithm=algorithm, n_jobs=n_jobs, prepared=True)
        num, den = sums.num, sums.den
        valid = den > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            step = num.astype(np.float64) / den.astype(np.float64)[:, None] - Y
        return step, valid
    mu, _, V, valid = local_frames(bk, Y, w, q, algorithm, n_jobs)
    step = mu - np.einsum("mqd,mq->md", V, np.einsum("mqd,md->mq", V, mu))
    return step, valid


def pc_shift_step(X_query: ArrayLike, X: ArrayLike, n_components: int = 1, *, kernel: KernelLike = "gaussian",
                  bandwidth: BandwidthLike = 1.0, sample_weight: ArrayLike | None = None, algorithm: str = "auto",
                  n_jobs: int | None = None) -> FloatArray:
    """One PC-Shift step (I − P(x))(m(x) − x) at each query (identity 9 of docs/identities.md).

    P(x) projects onto the top ``n_components`` eigenvectors of the kernel-weighted local
    covariance at x; with ``n_components=0`` the step is the mean-shift vector m(x) − x.

    Examples
    --------
    >>> import numpy as np
    >>> from localization.cluster import pc_shift_step
    >>> X = np.array([[-1.0, 0.1], [-1.0, -0.1], [1.0, 0.1], [1.0, -0.1]])
    >>> step = pc_shift_step([[0.0, 0.5]], X, 1, bandwidth=10.0)  # moves across the line only
    >>> (step.round(3) + 0.0).tolist()
    [[0.0, -0.5]]
    """
    X = as_float_array(X, "X")
    Q = as_float_array(X_query, "X_query", dtype=X.dtype)
    if Q.shape[1] != X.shape[1]:
        raise LocalizationError(f"`X_query` has {Q.shape[1]} features, but X has {X.shape[1]}", "X_query")
    q = check_n_components(n_components, X.shape[1], allow_zero=True)
    w = check_sample_weight(sample_weight, X.shape[0], X.dtype)
    step, valid = _step(bind(kernel, bandwidth, X, knn_k(kernel, None), w, consumer="pc_shift_step"), Q, w, q, algorithm, n_jobs)
    step[~valid] = np.nan
    return step


def _iterate(bk, Y0, w, q, max_iter, tol, algorithm, n_jobs, verbose=False):
    """Move every row of Y0 until its step is below tol or max_iter steps were taken."""
    Y = np.array(Y0, dtype=np.float64)
    dtype = bk.X.dtype
    stalled = 0

    def update(idx, Y):
        nonlocal stalled
        step, valid = _step(bk, np.ascontiguousarray(Y[idx], dtype=dtype), w, q, algorithm, n_jobs)
        step[~valid] = 0.0
        stalled += int(np.count_nonzero(~valid))
        return Y[idx] + step, np.linalg.norm(step, axis=1), valid

    n_iter, converged = iterate(update, Y, max_iter, tol, desc="PC-Shift", verbose=verbose)
    if stalled:
        warnings.warn(
            f"{stalled} point(s) had zero total kernel weight and stopped where they were; "
            "increase the bandwidth or use a kernel with unbounded support.",
            LocalizationWarning,
            stacklevel=3,
        )
    return Y.astype(dtype), n_iter, converged


class PCShift(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """PC-Shift (subspace-constrained mean shift): move points onto density ridges.

    Each point moves by x ← x + (I − P(x))(m(x) − x), where m is the kernel local mean of the
    fitted sample and P(x) the orthogonal projector onto the top ``n_components`` (= q)
    eigenvectors of the kernel-weighted local covariance at x,

        C(x) = Σᵢ K(x, xᵢ) wᵢ (xᵢ − m(x))(xᵢ − m(x))ᵀ / Σᵢ K(x, xᵢ) wᵢ.

    q = 0 is MeanShift (points go to modes); q = 1 drives points onto 1-D ridges (principal
    curves); in general the limit set is q-dimensional.

    This is the projector the method specifies (local covariance). The classical SCMS of
    Ozertem & Erdogmus (2011) uses the eigenvectors of the Hessian of log p̂ instead; the two
    agree where the local covariance is elongated along the ridge (bandwidth small against
    the ridge's length, comparable to its width), which is the regime PC-Shift is for.

    Parameters
    ----------
    n_components : int, default=1
        q, the dimension of the ridge (0 ≤ q ≤ n_features).
    bandwidth : float, array, "scott", "silverman", Balloon or SamplePoint, default=1.0
    kernel : str or Kernel, default="gaussian"
        Any kernel with design moments (radial profiles and ``"knn"``; not ``"dot"``).
    n_neighbors : int, optional
        k of ``kernel="knn"`` (default 5).
    max_iter : int, default=300
    tol : float, default=1e-4
        A point stops when its step is shorter than ``tol`` (in data units) or after
        ``max_iter`` steps.
    algorithm : {"auto", "brute", "kd_tree", "expansion"}, default="auto"
    n_jobs : int, optional
        Threads; results do not depend on it.
    verbose : bool, default=False
        Show a progress bar (points that have stopped moving).

    Attributes
    ----------
    points_ : ndarray of shape (n_samples, n_features)
        Where the training points end (``fit_transform`` returns it).
    n_iter_ : int
        Steps taken by the slowest point.
    converged_ : ndarray of bool, shape (n_samples,)

    Examples
    --------
    >>> import numpy as np
    >>> from localization.cluster import PCShift
    >>> t = np.linspace(-2, 2, 41)
    >>> X = np.c_[t, 0.1 * np.sin(7 * t)]
    >>> Y = PCShift(n_components=1, bandwidth=0.5).fit_transform(X)
    >>> bool(np.abs(Y[5:-5, 1]).max() < np.abs(X[5:-5, 1]).max())  # pulled onto the ridge y≈0
    True
    """

    def __init__(
        self, n_components: int = 1, bandwidth: BandwidthLike = 1.0, kernel: KernelLike = "gaussian",
        n_neighbors: int | None = None, max_iter: int = 300, tol: float = 1e-4, algorithm: str = "auto",
        n_jobs: int | None = None, verbose: int | bool = False,
    ) -> None:
        self.n_components = n_components
        self.bandwidth = bandwidth
        self.kernel = kernel
        self.n_neighbors = n_neighbors
        self.max_iter = max_iter
        self.tol = tol
        self.algorithm = algorithm
        self.n_jobs = n_jobs
        self.verbose = verbose

    _parameter_constraints = {
        **KERNEL_CONSTRAINTS,
        "n_components": [COUNT_OR_ZERO],
        "max_iter": [COUNT],
        "tol": [POSITIVE],
        "verbose": ["verbose"],
    }

    def _check_params(self, d):
        return check_n_components(self.n_components, d, allow_zero=True), self.max_iter, float(self.tol)

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None, sample_weight: ArrayLike | None = None) -> Self:
        """Move the training points onto the ridges. Returns self."""
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C")
        self.X_fit_ = np.ascontiguousarray(X)
        q, max_iter, tol = self._check_params(X.shape[1])
        self.sample_weight_ = check_sample_weight(sample_weight, X.shape[0], X.dtype)
        self.points_, self.n_iter_, self.converged_ = _iterate(
            self._bound(), self.X_fit_, self.sample_weight_, q, max_iter, tol, self.algorithm, self.n_jobs, self.verbose
        )
        return self

    def _bound(self):
        # Prepared: the iterations of one fit or transform move the points against fixed samples.
        return bind(self.kernel, self.bandwidth, self.X_fit_, knn_k(self.kernel, self.n_neighbors), self.sample_weight_,
                    consumer="PCShift").prepare()

    def fit_transform(self, X: ArrayLike, y: object = None, sample_weight: ArrayLike | None = None) -> FloatArray:
        """Fit and return where the training points end."""
        return self.fit(X, y, sample_weight).points_

    def transform(self, X: ArrayLike) -> FloatArray:
        """Move new points by PC-Shift over the fitted sample; returns their end points."""
        check_is_fitted(self)
        Q = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False)
        q, max_iter, tol = self._check_params(Q.shape[1])
        Y, _, _ = _iterate(
            self._bound(), Q.astype(self.X_fit_.dtype), self.sample_weight_, q, max_iter, tol, self.algorithm, self.n_jobs, self.verbose
        )
        return Y.astype(Q.dtype)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


def pc_shift(X: ArrayLike, n_components: int = 1, *, kernel: KernelLike = "gaussian", bandwidth: BandwidthLike = 1.0,
             max_iter: int = 300, tol: float = 1e-4, sample_weight: ArrayLike | None = None, n_jobs: int | None = None) -> FloatArray:
    """Functional form of :class:`PCShift`: the end points of the sample's own points.

    Examples
    --------
    >>> import numpy as np
    >>> from localization.cluster import pc_shift
    >>> pc_shift(np.array([[0.0, 0.0], [0.2, 0.0]]), 0, bandwidth=1.0).round(3).tolist()
    [[0.1, 0.0], [0.1, 0.0]]
    """
    est = PCShift(n_components, bandwidth=bandwidth, kernel=kernel, max_iter=max_iter, tol=tol, n_jobs=n_jobs)
    return est.fit_transform(X, sample_weight=sample_weight)


def medoid_shift(X: ArrayLike, *, bandwidth: float = 1.0, kernel: str = "gaussian", metric: str = "euclidean",
                 n_neighbors: int | None = None, n_jobs: int | None = None) -> tuple[IntArray, IntArray, IntArray]:
    """Functional form of :class:`MedoidShift`: returns ``(labels, medoid_indices, next)``.

    Examples
    --------
    >>> from localization.cluster import medoid_shift
    >>> labels, medoids, _ = medoid_shift([[0.0], [0.1], [0.2], [4.0], [4.1], [4.2]], bandwidth=0.5)
    >>> labels.tolist(), medoids.tolist()
    ([0, 0, 0, 1, 1, 1], [1, 4])
    """
    est = MedoidShift(bandwidth=bandwidth, kernel=kernel, metric=metric, n_neighbors=n_neighbors, n_jobs=n_jobs).fit(X)
    return est.labels_, est.medoid_indices_, est.next_


def quick_shift(X: ArrayLike, *, bandwidth: BandwidthLike = 1.0, kernel: KernelLike = "gaussian", max_dist: float | None = None,
                threshold: float | None = None, sample_weight: ArrayLike | None = None,
                n_jobs: int | None = None) -> tuple[IntArray, IntArray, FloatArray]:
    """Functional form of :class:`QuickShift`: returns ``(labels, parents, densities)``.

    Examples
    --------
    >>> from localization.cluster import quick_shift
    >>> labels, parents, _ = quick_shift([[0.0], [0.1], [0.2], [4.0], [4.1]], bandwidth=0.5)
    >>> labels.tolist(), parents.tolist()
    ([0, 0, 0, 1, 1], [1, 1, 1, 3, 3])
    """
    est = QuickShift(bandwidth=bandwidth, kernel=kernel, max_dist=max_dist, threshold=threshold, n_jobs=n_jobs)
    est.fit(X, sample_weight=sample_weight)
    return est.labels_, est.parents_, est.densities_

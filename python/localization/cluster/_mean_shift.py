"""Mode seeking: MeanShift and its variants.

MeanShift iterates the self-local mean m(x) = Σᵢ K(x, xᵢ) wᵢ xᵢ / Σᵢ K(x, xᵢ) wᵢ: every seed
moves by x ← x + α (m(x) − x) until it stops, converged seeds closer than a merge radius
become one mode, and each point is labelled by the mode it reaches. For the gaussian
kernel m(x) − x = h² ∇ log p̂_h(x) exactly, so the modes are the modes of the KDE.

With ``kernel="flat"`` (the default) and the same seeds, the centres are those of
scikit-learn's ``MeanShift``: the flat window is the closed ball ‖x − xᵢ‖ ≤ h, seeds stop when
a step is at most ``tol·h`` (``tol=1e-3``), converged seeds are sorted by the number of points
in their last window and greedily merged within ``h``.
"""

from __future__ import annotations

import warnings
from numbers import Real
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .. import _core
from .._base import keeps_state_on_error
from .._progress import progress_bar
from .._validation import (
    COUNT,
    COUNT_OR_ZERO,
    FLOAT_DTYPES,
    N_JOBS,
    NON_NEGATIVE,
    POSITIVE,
    Interval,
    LocalizationError,
    StrOptions,
    as_float_array,
    check_sample_weight,
    fit_context,
    validate_data,
    validate_params,
    LocalizationTypeError,
)
from ..kernels import SPECIAL, canonical_name

if TYPE_CHECKING:
    from .._typing import ArrayLike, FloatArray, IntArray, SeedLike, Self

__all__ = ["MeanShift", "estimate_bandwidth", "get_bin_seeds", "mean_shift"]

# Above this many points an unspecified `n_samples` subsamples (scikit-learn uses all points,
# which is quadratic in n).
BANDWIDTH_SAMPLE = 2000
# algorithm="auto" switches to the grid for all-point seeding of this many low-d points.
_GRID_AUTO_MIN = 200_000
_GRID_MAX_DIM = _core.GRID_MAX_FEATURES
_GRID_RESOLUTION = {1: 8, 2: 4, 3: 2, 4: 1}


@validate_params(
    {
        "X": ["array-like"],
        "quantile": [Interval(Real, 0, 1, closed="both")],
        "n_samples": [COUNT, None],
        "random_state": ["random_state"],
        "n_jobs": N_JOBS,
    },
    prefer_skip_nested_validation=True,
)
def estimate_bandwidth(X: ArrayLike, *, quantile: float = 0.3, n_samples: int | None = None, random_state: SeedLike = 0,
                       n_jobs: int | None = None) -> float:
    """Estimate a MeanShift bandwidth: the mean distance from a point to its ⌊quantile·s⌋-th neighbour.

    The same statistic as scikit-learn's ``estimate_bandwidth`` (the same subsample for the
    same ``random_state``), computed through the native neighbour index. Its cost is
    O(s·k log s) for a subsample of s points, not quadratic in n: with ``n_samples=None`` at
    most 2,000 points are used (scikit-learn uses all of them).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    quantile : float in [0, 1], default=0.3
        0.5 uses the median of the pairwise distances of the subsample.
    n_samples : int, optional
        Size s of the subsample (default: all points up to 2,000).
    random_state : int, RandomState or None, default=0
    n_jobs : int, optional

    Returns
    -------
    bandwidth : numpy.float64
        0 when more than a ``quantile`` of the subsample coincides with each point (heavily
        duplicated data); :class:`MeanShift` then uses the radius-0 window.

    Examples
    --------
    >>> import numpy as np
    >>> from localization.cluster import estimate_bandwidth
    >>> X = np.array([[1, 1], [2, 1], [1, 0], [4, 7], [3, 5], [3, 6]])
    >>> estimate_bandwidth(X, quantile=0.5).round(4)
    np.float64(1.6191)
    """
    X = as_float_array(X, "X")
    n = X.shape[0]
    rng = check_random_state(random_state)
    if n_samples is None:
        n_samples = min(n, BANDWIDTH_SAMPLE)
    # The same draw as scikit-learn for the same seed, so both see the same subsample.
    idx = rng.permutation(n)[:n_samples]
    Xs = np.ascontiguousarray(X[idx])
    k = max(int(Xs.shape[0] * quantile), 1)
    index = _core.NeighborIndex(Xs, "auto", _core.LEAF_SIZE)
    dist, _ = index.knn(Xs, k, n_jobs)
    return np.float64(np.mean(dist[:, -1], dtype=np.float64))


@validate_params(
    {"X": ["array-like"], "bin_size": [Real], "min_bin_freq": [COUNT_OR_ZERO]},
    prefer_skip_nested_validation=True,
)
def get_bin_seeds(X: ArrayLike, bin_size: float, min_bin_freq: int = 1) -> FloatArray:
    """Seeds on a grid of side ``bin_size``: the rounded positions of bins holding ≥ ``min_bin_freq`` points.

    The same seeds as scikit-learn's ``get_bin_seeds`` (as a set; the order here is
    lexicographic), vectorised. If every point has its own bin, the points themselves are
    returned, with a warning, as scikit-learn does.

    Examples
    --------
    >>> import numpy as np
    >>> from localization.cluster import get_bin_seeds
    >>> get_bin_seeds(np.array([[0.1, 0.0], [0.2, 0.1], [2.0, 2.1]]), 1.0).tolist()
    [[0.0, 0.0], [2.0, 2.0]]
    """
    X = as_float_array(X, "X")
    try:
        # A Python int beyond int64 would make ``X / bin_size`` an object array.
        bin_size = float(bin_size)
    except OverflowError:
        raise LocalizationError("is too large for a float", "bin_size") from None
    if not bin_size > 0:
        return X
    binned = np.round(X / bin_size)
    _, cells, counts = bin_counts(binned, binned.min(axis=0), binned.max(axis=0))
    seeds = bin_seeds(cells, counts, bin_size, min_bin_freq, len(X))
    return X if seeds is None else seeds


def bin_counts(binned, lo, hi):
    """Occupied bins of rounded points ``binned`` whose whole data set spans the bins
    ``lo``..``hi``: (keys, bins, counts) in key order. Keys are integers, or None (and the
    order lexicographic) when the range has too many bins for them."""
    extent = hi - lo + 1
    if np.prod(extent.astype(np.float64)) < 2.0**62:
        # One integer key per bin: a 1-D unique is far faster than a row-wise one.
        strides = np.cumprod(np.concatenate([[1.0], extent[:-1]])).astype(np.int64)
        keys = (binned - lo).astype(np.int64) @ strides
        keys, first, counts = np.unique(keys, return_index=True, return_counts=True)
        return keys, binned[first], counts
    cells, counts = np.unique(binned, axis=0, return_counts=True)
    return None, cells, counts


def bin_seeds(bins, counts, bin_size, min_bin_freq, n):
    """Seeds from occupied bins (see :func:`get_bin_seeds`); None (with scikit-learn's
    warning) when every one of the n points has its own bin and the points are the seeds."""
    seeds = bins[counts >= min_bin_freq]
    if len(seeds) == n:
        warnings.warn(
            f"Binning data failed with provided bin_size={bin_size:f}, using data points as seeds.",
            UserWarning,
            stacklevel=3,
        )
        return None
    # scikit-learn scales the bin indices in float32 arithmetic; the same values here, unless
    # the bin size or the seeds leave float32's range (where scikit-learn's seeds are inf or 0).
    with np.errstate(over="ignore", invalid="ignore"):
        b32 = np.float32(bin_size)
        out = seeds.astype(np.float32) * b32
    if np.isfinite(b32) and b32 >= np.finfo(np.float32).tiny and np.all(np.isfinite(out)):
        return out
    return seeds * bin_size


def _reject_text(X):
    if isinstance(X, (list, tuple, np.ndarray)) and np.asarray(X).dtype.kind in "USV":
        raise LocalizationTypeError("`X` holds text; pass a numeric array (float32 or float64)", "X")


def _nearest(centres, P, n_jobs):
    """Index of and distance to the nearest centre of each row of P."""
    centres = np.ascontiguousarray(centres)
    P = np.ascontiguousarray(P)
    if len(centres) <= 64:
        # Few centres: blocked direct distances beat an index (ties go to the lower index).
        # Coordinates are taken relative to a power of two near their largest magnitude (exact),
        # so the squares neither overflow nor underflow at any scale.
        ind = np.empty(len(P), dtype=np.int64)
        dist = np.empty(len(P), dtype=np.float64)
        top = max(np.max(np.abs(centres), initial=0.0), np.max(np.abs(P), initial=0.0))
        e = int(np.frexp(top)[1]) if top > 0 else 0
        c64 = np.ldexp(centres.astype(np.float64), -e)
        for a in range(0, len(P), 65536):
            block = np.ldexp(P[a : a + 65536].astype(np.float64), -e)
            d2 = np.zeros((len(block), len(c64)))
            for k in range(P.shape[1]):
                d2 += (block[:, k, None] - c64[None, :, k]) ** 2
            j = np.argmin(d2, axis=1)
            ind[a : a + len(block)] = j
            dist[a : a + len(block)] = np.ldexp(np.sqrt(d2[np.arange(len(block)), j]), e)
        return ind, dist
    index = _core.NeighborIndex(centres, "auto", _core.LEAF_SIZE)
    dist, ind = index.knn(P, 1, n_jobs)
    return ind[:, 0], dist[:, 0]


class MeanShift(ClusterMixin, BaseEstimator):
    """Mean shift clustering with any localization kernel, at scale.

    Each seed climbs the kernel density by x ← x + α (m(x) − x), where
    m(x) = Σ K(x, xᵢ) wᵢ xᵢ / Σ K(x, xᵢ) wᵢ is the self-local mean, until a step is at most
    ``tol · bandwidth`` or ``max_iter`` steps. Converged seeds are sorted by their support
    Σ K w (for the flat kernel: the number of points in the window) and merged greedily:
    a seed is kept unless a stronger kept one lies within ``merge_radius``.

    Evaluation of m(x) (``algorithm``):

    * ``"exact"``: compact kernels climb seed by seed through a kd-tree; unbounded kernels
      (gaussian, exponential, cauchy) advance all moving seeds with one call of the native
      engine per iteration. The flat kernel uses the closed ball ‖x − xᵢ‖ ≤ h (scikit-learn's
      convention; the engine's ``tophat`` profile is open, 1[u < 1]), so with the same seeds
      the centres are scikit-learn's.
    * ``"grid"`` (flat kernel, d ≤ 4): MeanShift++-style cell aggregation. Points are binned
      into cells of side ``h / grid_resolution``; each cell is replaced by its weighted
      centroid carrying the cell's total weight, and seeds climb on that reduced set (flat
      window on the centroids). Binning is linear in n and a step no longer depends on n.
      Without explicit seeds the seeds are the cells' centroids and each point follows its
      cell's trajectory. Modes agree with the exact ones up to a fraction of the cell size.
    * ``"auto"``: ``"grid"`` for the flat kernel when every point of a large (≥ 200,000),
      low-dimensional (d ≤ 4) data set would be a seed, ``"exact"`` otherwise.

    Variants: ``blurring=True`` is Cheng's blurring mean shift (the data set itself is
    replaced by m(X) at every step); ``fixed_kernel=True`` is a different method, *linear
    diffusion*: the row-normalised kernel K̃ of the original data is kept fixed and iterated,
    Y ← Y + α (K̃Y − Y), so with α = 1 the positions after t steps are K̃ᵗX.

    Parameters
    ----------
    bandwidth : float, optional
        Kernel bandwidth h. ``None``: :func:`estimate_bandwidth` (``quantile=0.3``, at most 2,000
        points sampled). An estimate of 0 (heavily duplicated data: most points coincide with
        their neighbours) is used as scikit-learn uses it, as the radius-0 window: no seed
        moves, every distinct point is a mode and coinciding points merge.
    kernel : str, default="flat"
        Any radial profile (``"flat"``/``"tophat"``, ``"gaussian"``,
        ``"epanechnikov"``, ...).
    seeds : array-like of shape (n_seeds, n_features), optional
        Starting points. Default: all points, or bins when ``bin_seeding``.
    bin_seeding : bool, default=False
        Seed from the points rounded to a grid of side h (as scikit-learn).
    min_bin_freq : int, default=1
        Bins with fewer points give no seed.
    cluster_all : bool, default=True
        False: *orphans* get label −1 — points farther than ``bandwidth`` from every centre
        (scikit-learn's definition), and points whose own climb found no data in its window.
        The orphans are the same whichever ``label_assignment``; the other points keep their
        label.
    max_iter : int, default=300
    tol : float, default=1e-3
        A seed stops when its step is at most ``tol · bandwidth``.
    step : float, default=1.0
        Step size α (α < 1 damps, α > 1 over-relaxes).
    merge_radius : float, optional
        Converged seeds within this distance merge (default: the bandwidth, as scikit-learn).
    blurring : bool, default=False
    fixed_kernel : bool, default=False
    algorithm : {"auto", "exact", "grid"}, default="auto"
    grid_resolution : int, optional
        Cells per bandwidth for ``algorithm="grid"`` (default 8, 4, 2, 1 for d = 1..4).
    label_assignment : {"auto", "trajectory", "nearest"}, default="auto"
        ``"trajectory"``: a point's label is the mode its own trajectory reaches (for seeds
        that are not the points this shifts every point once more). ``"nearest"``: the
        nearest centre, which is fast and what scikit-learn does. ``"auto"``: trajectory when
        the points are the seeds (their trajectories exist anyway), nearest otherwise.
    return_trajectories : bool, default=False
        Keep every seed's path in ``trajectories_`` (for plots). Memory: seeds × (steps + 1)
        × n_features × itemsize; when it runs out the fit raises ``MemoryError`` and the
        estimator keeps its previous state.
    n_jobs : int, optional
        Threads (results do not depend on it).
    verbose : bool, default=False
        Show a progress bar.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Modes, strongest first.
    labels_ : ndarray of shape (n_samples,)
    n_iter_ : int
        Largest number of iterations of any seed (scikit-learn's convention).
    bandwidth_ : float
        The bandwidth used.
    seeds_ : ndarray of shape (n_seeds, n_features)
    seed_modes_ : ndarray of shape (n_seeds, n_features)
        Where each seed stopped.
    seed_n_iter_, seed_converged_, seed_support_ : ndarray of shape (n_seeds,)
        Per seed: iterations, whether it met ``tol``, and Σ K w at its last window (with sample
        weights far outside the floating range's middle — beyond ~1e±77 in float64, ~4e±9 in
        float32 — up to a common power of two, so that the order of the seeds, by which modes
        are merged, stays exact).
    trajectories_ : list of ndarray, only with ``return_trajectories``
        Per seed, the positions it visited (start first).
    algorithm_ : str
        The evaluation used (``"exact"``, ``"grid"``, ``"blurring"`` or ``"fixed_kernel"``).

    Examples
    --------
    >>> import numpy as np
    >>> from localization import MeanShift
    >>> X = np.array([[1, 1], [2, 1], [1, 0], [4, 7], [3, 5], [3, 6]])
    >>> ms = MeanShift(bandwidth=2).fit(X)
    >>> ms.labels_.tolist()
    [1, 1, 1, 0, 0, 0]
    >>> ms.cluster_centers_.round(2).tolist()
    [[3.33, 6.0], [1.33, 0.67]]
    >>> ms.predict([[0, 0], [5, 5]]).tolist()
    [1, 0]
    """

    def __init__(
        self,
        *,
        bandwidth: float | None = None,
        kernel: str = "flat",
        seeds: ArrayLike | None = None,
        bin_seeding: bool = False,
        min_bin_freq: int = 1,
        cluster_all: bool = True,
        max_iter: int = 300,
        tol: float = 1e-3,
        step: float = 1.0,
        merge_radius: float | None = None,
        blurring: bool = False,
        fixed_kernel: bool = False,
        algorithm: str = "auto",
        grid_resolution: int | None = None,
        label_assignment: str = "auto",
        return_trajectories: bool = False,
        n_jobs: int | None = None,
        verbose: bool = False,
    ) -> None:
        self.bandwidth = bandwidth
        self.kernel = kernel
        self.seeds = seeds
        self.bin_seeding = bin_seeding
        self.min_bin_freq = min_bin_freq
        self.cluster_all = cluster_all
        self.max_iter = max_iter
        self.tol = tol
        self.step = step
        self.merge_radius = merge_radius
        self.blurring = blurring
        self.fixed_kernel = fixed_kernel
        self.algorithm = algorithm
        self.grid_resolution = grid_resolution
        self.label_assignment = label_assignment
        self.return_trajectories = return_trajectories
        self.n_jobs = n_jobs
        self.verbose = verbose

    # -- validation ---------------------------------------------------------------------

    _parameter_constraints = {
        "bandwidth": [POSITIVE, None],
        "kernel": [str],
        "seeds": ["array-like", None],
        "bin_seeding": ["boolean"],
        "min_bin_freq": [COUNT],
        "cluster_all": ["boolean"],
        "max_iter": [COUNT],
        "tol": [NON_NEGATIVE],
        "step": [POSITIVE],
        "merge_radius": [NON_NEGATIVE, None],
        "blurring": ["boolean"],
        "fixed_kernel": ["boolean"],
        "algorithm": [StrOptions({"auto", "exact", "grid"})],
        "grid_resolution": [COUNT, None],
        "label_assignment": [StrOptions({"auto", "trajectory", "nearest"})],
        "return_trajectories": ["boolean"],
        "n_jobs": N_JOBS,
        "verbose": ["verbose"],
    }

    def _check_params(self, X):
        """What the declared constraints cannot say: choices that depend on each other and on X."""
        kernel = canonical_name(self.kernel)
        if kernel in SPECIAL:
            raise LocalizationError(f"`kernel` must be a radial profile for MeanShift, got {self.kernel!r}", "kernel")
        if self.blurring and self.fixed_kernel:
            raise LocalizationError("`blurring` and `fixed_kernel` are different methods; set at most one", "blurring")
        # An estimate may be 0 (most points coincide with their neighbours): the radius-0 window.
        h = float(estimate_bandwidth(X, n_jobs=self.n_jobs) if self.bandwidth is None else self.bandwidth)
        r = h if self.merge_radius is None else self.merge_radius
        d = X.shape[1]
        algorithm = self.algorithm
        if h == 0:
            if algorithm == "grid":
                raise LocalizationError("algorithm='grid' needs a positive bandwidth; the estimated bandwidth is 0 "
                                        "(most points coincide): use algorithm='exact' or pass `bandwidth`", "algorithm")
            algorithm = "exact"
        elif self.blurring or self.fixed_kernel:
            if algorithm == "grid":
                raise LocalizationError("algorithm='grid' is not available with blurring or fixed_kernel", "algorithm")
            algorithm = "blurring" if self.blurring else "fixed_kernel"
        elif algorithm == "grid":
            if kernel != "tophat":
                raise LocalizationError(f"algorithm='grid' aggregates a flat window; use kernel='flat' (got {self.kernel!r})", "algorithm")
            if d > _GRID_MAX_DIM:
                raise LocalizationError(f"algorithm='grid' is for at most {_GRID_MAX_DIM} features (X has {d}); use 'exact'", "algorithm")
        elif algorithm == "auto":
            everyone = self.seeds is None and not self.bin_seeding
            low_d = d <= _GRID_MAX_DIM and X.shape[0] >= _GRID_AUTO_MIN
            algorithm = "grid" if kernel == "tophat" and everyone and low_d else "exact"
        res = _GRID_RESOLUTION.get(d, 1) if self.grid_resolution is None else int(self.grid_resolution)
        return kernel, h, float(r), algorithm, res

    # -- fitting ------------------------------------------------------------------------

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None, sample_weight: ArrayLike | None = None) -> Self:
        """Find the modes and label the points.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : ignored
        sample_weight : array-like of shape (n_samples,), optional
            Non-negative weights wᵢ of the points in every local mean.

        Returns
        -------
        self
        """
        _reject_text(X)
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C")
        X = np.ascontiguousarray(X)
        w = check_sample_weight(sample_weight, X.shape[0], X.dtype)
        kernel, h, radius, algorithm, res = self._check_params(X)
        self.bandwidth_, self.algorithm_, self.kernel_ = h, algorithm, kernel
        self._grid_resolution = res
        self._X, self._w = X, w
        # Whole-data and engine runs report iterations; per-seed climbs report finished seeds.
        by_iteration = algorithm in ("blurring", "fixed_kernel") or (
            algorithm == "exact" and kernel != "tophat" and (_core.profile_info(kernel)[1] is None or X.shape[1] >= _core.GEMM_MIN_DIM)
        )
        progress, close = progress_bar(self.verbose, "MeanShift", "iteration" if by_iteration else "seed")
        try:
            seeds, point_seed = self._fit_seeds(X, w, kernel, h, algorithm, res, progress)
        finally:
            close()
        if not np.any(self.seed_valid_):
            raise LocalizationError(
                f"No point was within bandwidth={h:f} of any seed. Try a different seeding strategy or "
                "increase the bandwidth.",
                "bandwidth",
            )
        kept = _core.merge_modes(self.seed_modes_, self.seed_support_, self.seed_valid_, radius)
        self.cluster_centers_ = np.ascontiguousarray(self.seed_modes_[kept])
        self.n_iter_ = int(self.seed_n_iter_.max()) if len(self.seed_n_iter_) else 0
        self.labels_ = self._label(X, point_seed)
        return self

    def _fit_seeds(self, X, w, kernel, h, algorithm, res, progress):
        """Run the seeds; returns (seeds, point → seed map or None)."""
        common = dict(step=float(self.step), tol=float(self.tol), max_iter=int(self.max_iter), n_jobs=self.n_jobs, progress=progress)
        n, d = X.shape
        if h == 0:
            return self._fit_radius_zero(X, w)
        if algorithm in ("blurring", "fixed_kernel"):
            run = _core.mean_shift_diffuse(
                X, w, kernel, h, blurring=algorithm == "blurring", history=bool(self.return_trajectories), **common
            )
            self.seeds_ = X
            self.seed_modes_, self.seed_support_ = run.positions, run.support
            self.seed_n_iter_ = np.full(n, run.n_iter, dtype=np.int64)
            self.seed_converged_ = np.full(n, bool(run.converged))
            self.seed_valid_ = np.ones(n, dtype=bool)
            if self.return_trajectories:
                path = np.stack([X] + list(run.history), axis=1)
                self.trajectories_ = list(path)
            return X, np.arange(n)
        seeds, point_seed = self._initial_seeds(X, h)
        traj = bool(self.return_trajectories)
        if algorithm == "grid":
            out = _core.mean_shift_grid(X, seeds, w, h, res, trajectories=traj, **common)
            if seeds is None:
                seeds, point_seed = out.seeds, out.point_seed
        else:
            out = _core.mean_shift_seeds(X, seeds, w, kernel, h, trajectories=traj, **common)
        self.seeds_ = seeds
        self.seed_modes_, self.seed_support_, self.seed_n_iter_ = out.modes, out.support, out.n_iter
        self.seed_converged_, self.seed_valid_ = out.converged, out.valid
        if traj:
            self.trajectories_ = out.trajectories
        return seeds, point_seed

    def _fit_radius_zero(self, X, w):
        """The radius-0 window of an estimated bandwidth of 0 (scikit-learn's reading).

        A seed's window holds the points equal to it, whose mean is the seed itself: no seed
        moves, seeds on no point see no data, and the support is the weight of the points
        equal to the seed. Every variant (blurring, fixed kernel) reduces to this.
        """
        seeds, point_seed = self._initial_seeds(X, 0.0)
        _, ind, offsets = _core.NeighborIndex(X, "auto", _core.LEAF_SIZE).radius(seeds, 0.0, n_jobs=self.n_jobs)
        mass = np.ones(len(X)) if w is None else w.astype(np.float64)
        counts = np.diff(offsets)
        support = np.zeros(len(seeds))
        hit = counts > 0
        support[hit] = np.add.reduceat(mass[ind], offsets[:-1][hit])
        self.seeds_ = seeds
        self.seed_modes_ = np.array(seeds, copy=True)
        self.seed_support_ = support
        self.seed_n_iter_ = np.zeros(len(seeds), dtype=np.int64)
        self.seed_converged_ = hit.copy()
        self.seed_valid_ = support > 0
        if self.return_trajectories:
            self.trajectories_ = [s[None, :].copy() for s in seeds]
        return seeds, point_seed

    def _initial_seeds(self, X, h):
        if self.seeds is not None:
            seeds = as_float_array(self.seeds, "seeds", dtype=X.dtype)
            if seeds.shape[1] != X.shape[1]:
                raise LocalizationError(f"`seeds` has {seeds.shape[1]} features, but X has {X.shape[1]}", "seeds")
            return seeds, None
        if self.bin_seeding:
            seeds = get_bin_seeds(X, h, self.min_bin_freq)
            if seeds is X:
                return X, np.arange(X.shape[0])
            return np.ascontiguousarray(seeds, dtype=X.dtype), None
        if self.algorithm_ == "grid":
            return None, None
        return X, np.arange(X.shape[0])

    def _label(self, X, point_seed):
        how = self.label_assignment
        if how == "auto":
            how = "trajectory" if point_seed is not None else "nearest"
        centres = self.cluster_centers_
        labels, dist = _nearest(centres, X, self.n_jobs)
        valid = np.ones(len(X), dtype=bool)
        if how == "trajectory":
            if point_seed is None:
                # Seeds are not the points: shift every point once (documented cost).
                ends, valid = self._shift(X)
            else:
                ends, valid = self.seed_modes_[point_seed], self.seed_valid_[point_seed]
            labels, _ = _nearest(centres, ends, self.n_jobs)
        return self._orphans(labels, dist, valid)

    def _orphans(self, labels, dist, valid):
        """−1 (with cluster_all=False) where the point is farther than h from every centre
        (``dist``: to the nearest one) or its climb saw no data."""
        labels = labels.astype(np.int64)
        if not self.cluster_all:
            labels[(dist > self.bandwidth_) | ~valid] = -1
        return labels

    def _shift(self, Q):
        """Climb from the rows of Q on the fitted data; returns (end points, valid)."""
        common = dict(step=float(self.step), tol=float(self.tol), max_iter=int(self.max_iter), n_jobs=self.n_jobs)
        if self.bandwidth_ == 0:
            # The radius-0 window: a row on a fitted point stays, any other sees no data.
            _, _, offsets = _core.NeighborIndex(self._X, "auto", _core.LEAF_SIZE).radius(Q, 0.0, n_jobs=self.n_jobs)
            return Q, np.diff(offsets) > 0
        if self.algorithm_ == "grid":
            out = _core.mean_shift_grid(self._X, Q, self._w, self.bandwidth_, self._grid_resolution, **common)
        else:
            out = _core.mean_shift_seeds(self._X, Q, self._w, self.kernel_, self.bandwidth_, **common)
        return out.modes, out.valid

    def predict(self, X: ArrayLike) -> IntArray:
        """Label new points by the mode they climb to.

        Each row is shifted on the fitted data to its mode and labelled by the nearest centre
        to that mode. With ``label_assignment="nearest"``, or for the blurring and fixed-kernel
        variants (whose data set moved), it is the nearest centre to the row. With
        ``cluster_all=False`` orphans get −1 as in ``fit``, so ``predict`` on the training
        points returns ``labels_``.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features)

        Returns
        -------
        labels : ndarray of shape (n_queries,)
        """
        check_is_fitted(self)
        _reject_text(X)
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False)
        X = np.ascontiguousarray(X, dtype=self._X.dtype)
        labels, dist = _nearest(self.cluster_centers_, X, self.n_jobs)
        valid = np.ones(len(X), dtype=bool)
        if not (self.label_assignment == "nearest" or self.algorithm_ in ("blurring", "fixed_kernel")):
            ends, valid = self._shift(X)
            labels, _ = _nearest(self.cluster_centers_, ends, self.n_jobs)
        return self._orphans(labels, dist, valid)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags


def mean_shift(X: ArrayLike, *, bandwidth: float | None = None, kernel: str = "flat", seeds: ArrayLike | None = None,
               bin_seeding: bool = False, min_bin_freq: int = 1, cluster_all: bool = True, max_iter: int = 300,
               sample_weight: ArrayLike | None = None, n_jobs: int | None = None, **kwargs: Any) -> tuple[FloatArray, IntArray]:
    """Functional MeanShift: returns ``(cluster_centers, labels)``.

    Takes the parameters of :class:`MeanShift` (extra ones as keywords).

    Examples
    --------
    >>> import numpy as np
    >>> from localization import mean_shift
    >>> centers, labels = mean_shift(np.array([[1, 1], [2, 1], [1, 0], [4, 7], [3, 5], [3, 6]]), bandwidth=2)
    >>> labels.tolist()
    [1, 1, 1, 0, 0, 0]
    """
    model = MeanShift(
        bandwidth=bandwidth, kernel=kernel, seeds=seeds, bin_seeding=bin_seeding, min_bin_freq=min_bin_freq,
        cluster_all=cluster_all, max_iter=max_iter, n_jobs=n_jobs, **kwargs,
    ).fit(X, sample_weight=sample_weight)
    return model.cluster_centers_, model.labels_

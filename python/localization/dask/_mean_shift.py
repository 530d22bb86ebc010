"""MeanShift on a Dask array: seeds on the client, windows summed shard by shard."""

from __future__ import annotations

from typing import TYPE_CHECKING

import copy

import dask
import dask.array as da
import numpy as np
from dask import delayed
from sklearn.base import clone
from sklearn.utils import check_random_state

from .. import _core, cluster
from .._base import keeps_state_on_error
from .._sums import LocalSums, tree_reduce
from .._validation import as_float_array, check_positive_int, fit_context, LocalizationError
from .._progress import progress_bar
from ..cluster._mean_shift import BANDWIDTH_SAMPLE, bin_counts, bin_seeds
from ._common import Shards, as_dask, client, each, is_dask, put, task_threads
from ._estimators import fit_sample

if TYPE_CHECKING:
    from .._typing import ArrayLike, IntArray, SeedLike, Self


def estimate_bandwidth(X: ArrayLike | da.Array, *, quantile: float = 0.3, n_samples: int | None = None, random_state: SeedLike = 0,
                       n_jobs: int | None = None) -> float:
    """:func:`localization.estimate_bandwidth` of a Dask array: the same subsample (the same
    ``random_state`` draws the same rows), gathered to the client, then the same statistic.

    The draw is a permutation of all n row numbers, made on the client (8 bytes per row).

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from localization import estimate_bandwidth as in_memory
    >>> from localization.dask import estimate_bandwidth
    >>> X = np.random.default_rng(0).normal(size=(3000, 2))
    >>> bool(np.isclose(estimate_bandwidth(da.from_array(X, chunks=700)), in_memory(X), rtol=1e-12))
    True
    """
    X = as_dask(X, "X")
    n = X.shape[0]
    if n == 0:
        raise LocalizationError("`X` is empty: at least one sample is required", "X")
    s = check_positive_int(min(n, BANDWIDTH_SAMPLE) if n_samples is None else n_samples, "n_samples")
    idx = check_random_state(random_state).permutation(n)[:s]
    order = np.argsort(idx)
    rows = np.empty_like(order)
    rows[order] = np.arange(len(order))
    sample = X[idx[order]].compute()[rows]
    # Every row of the subsample is used, so the in-memory permutation changes only the order.
    return cluster.estimate_bandwidth(sample, quantile=quantile, n_samples=len(sample), random_state=0, n_jobs=n_jobs)


def _window(X, w, kernel, h, n_jobs):
    X = np.ascontiguousarray(X)
    w = None if w is None else np.ascontiguousarray(w, dtype=X.dtype)
    return _core.MeanShiftWindow(X, w, kernel, h, n_jobs=n_jobs)


def _window_sums(window, positions, n_jobs):
    return LocalSums.from_engine(window.sums(positions, n_jobs=n_jobs))


def _bins(X, bin_size, lo, hi):
    return bin_counts(np.round(X / bin_size), lo, hi)


def _merge_bins(a, b):
    """Occupied bins of two parts: counts added, in key (or row) order."""
    cells = np.concatenate([a[1], b[1]])
    counts = np.concatenate([a[2], b[2]])
    if a[0] is None:
        cells, inv = np.unique(cells, axis=0, return_inverse=True)
        return None, cells, np.bincount(inv.ravel(), weights=counts, minlength=len(cells)).astype(np.int64)
    keys, first, inv = np.unique(np.concatenate([a[0], b[0]]), return_index=True, return_inverse=True)
    return keys, cells[first], np.bincount(inv.ravel(), weights=counts, minlength=len(keys)).astype(np.int64)


def _grid_cells(X, w, lo, hi, h, res, n_jobs):
    X = np.ascontiguousarray(X)
    w = None if w is None else np.ascontiguousarray(w, dtype=X.dtype)
    return _core.grid_cells(X, lo, hi, w, h, res, n_jobs=n_jobs)


def _grid_merge(a, b):
    return _core.grid_merge([a, b])


def _labels(X, est, point_seed):
    X = np.ascontiguousarray(X)
    if X.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    return est._label(X, point_seed)


def _grid_labels(X, est, lo, hi, h, res, sorted_keys, cell_of_sorted):
    X = np.ascontiguousarray(X)
    if X.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    keys = _core.grid_keys(X, lo, hi, h, res, n_jobs=est._threads)
    return est._label(X, cell_of_sorted[np.searchsorted(sorted_keys, keys)])


def _predict(X, est):
    X = np.ascontiguousarray(X)
    if X.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    return est.predict(X)


def _chunk_by_chunk(X, labels):
    """``labels(chunk)`` for every row chunk of X in turn, computed from the client (each
    call runs its own distributed climb); a dask array chunked like X."""
    out = [labels(np.ascontiguousarray(b.compute())) if size else np.empty(0, dtype=np.int64) for b, size in zip(X.blocks, X.chunks[0])]
    return da.from_array(np.concatenate(out), chunks=X.chunks[0])


class MeanShift(cluster.MeanShift):
    """:class:`localization.MeanShift` on a Dask array, with the in-memory result.

    The sample stays sharded on the workers. The seeds (explicit, ``bin_seeding`` or the
    grid's cells, all counted shard by shard and merged) live on the client; every
    iteration sends the positions of the seeds still moving to every shard, each shard sums
    their windows (prepared once per shard: a tree for compact kernels), and the partial sums
    are merged in a fixed tree before the same step as in memory moves the seeds. Seeds,
    iteration counts, modes, the merge of modes and the labels are those of
    :class:`localization.MeanShift` on the whole array (modes to rounding). Tasks are pure,
    so a lost worker's shards and windows are recomputed and the result does not change.
    ``verbose=True`` shows a progress bar on the client.

    Parameters are those of :class:`localization.MeanShift`, with these differences:

    * seeding from every point (``seeds=None``, no ``bin_seeding``, ``algorithm="exact"``)
      gathers the sample to the client as seeds: use ``bin_seeding=True``, the grid
      (``algorithm="grid"``, the automatic choice for the flat kernel on at least 200,000
      points) or explicit ``seeds`` for large data;
    * ``blurring`` and ``fixed_kernel`` move the whole sample at every step and are not
      available;
    * ``n_jobs`` is the threads of each task (None: 1, Dask runs one task per worker thread);
    * ``labels_`` is a dask array chunked like X; ``predict`` returns a dask array for dask
      input.

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from localization import MeanShift as InMemory
    >>> from localization.dask import MeanShift
    >>> X = np.array([[1, 1], [2, 1], [1, 0], [4, 7], [3, 5], [3, 6]], dtype=float)
    >>> ms = MeanShift(bandwidth=2, bin_seeding=True).fit(da.from_array(X, chunks=4))
    >>> ms.cluster_centers_.round(2).tolist()
    [[3.33, 6.0], [1.33, 0.67]]
    >>> ms.labels_.compute().tolist() == InMemory(bandwidth=2, bin_seeding=True).fit(X).labels_.tolist()
    True
    """

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None, sample_weight: ArrayLike | None = None) -> Self:
        """Find the modes and label the points (``labels_`` is a dask array).

        Parameters
        ----------
        X : dask array of shape (n_samples, n_features)
        y : ignored
        sample_weight : dask array of shape (n_samples,), optional

        Returns
        -------
        self
        """
        if self.blurring or self.fixed_kernel:
            raise LocalizationError("blurring and fixed_kernel move the whole sample at every step: not available on a Dask array", "blurring")
        shards, _ = fit_sample(self, X, None, sample_weight)
        h = self.bandwidth
        if h is None:
            h = estimate_bandwidth(shards.X, n_jobs=self.n_jobs)
            if not h > 0:
                raise LocalizationError("the estimated bandwidth is 0 (most points coincide with their neighbours); pass `bandwidth`", "bandwidth")
        kernel, h, radius, algorithm, res = clone(self).set_params(bandwidth=float(h))._check_params(shards.X)
        self.bandwidth_, self.algorithm_, self.kernel_ = h, algorithm, kernel
        self._grid_resolution = res
        self._shards, self._X, self._w = shards, shards.X, shards.weights
        self._threads = task_threads(self.n_jobs)
        self._window_futures = None
        progress, close = progress_bar(self.verbose, "MeanShift", "iteration")
        try:
            seeds, point_seed = self._seed(shards, h, algorithm, res)
            run = self._climb(seeds, progress)
        finally:
            close()
        modes, support, valid = run.modes, run.support, run.valid
        self.seeds_ = seeds
        self.seed_modes_, self.seed_support_, self.seed_n_iter_ = modes, support, run.n_iter
        self.seed_converged_, self.seed_valid_ = run.converged, valid
        if self.return_trajectories:
            self.trajectories_ = run.trajectories
        if not np.any(valid):
            raise LocalizationError(
                f"No point was within bandwidth={h:f} of any seed. Try a different seeding strategy or "
                "increase the bandwidth.",
                "bandwidth",
            )
        kept = _core.merge_modes(modes, support, valid, radius)
        self.cluster_centers_ = np.ascontiguousarray(modes[kept])
        self.n_iter_ = int(run.n_iter.max()) if len(run.n_iter) else 0
        self.labels_ = self._fit_labels(point_seed)
        return self

    # -- seeds --------------------------------------------------------------------------

    def _seed(self, shards, h, algorithm, res):
        """(seeds, point → seed) where the seeds are not the cells of the grid; for the grid,
        also sets the reference cells. ``point_seed`` is "all" (seeds = the points), a grid
        lookup, or None."""
        dtype = shards.dtype
        self._cells = None
        if algorithm == "grid":
            self._cells = self._grid(shards, h, res)
        if self.seeds is not None:
            seeds = as_float_array(self.seeds, "seeds", dtype=dtype)
            if seeds.shape[1] != shards.d:
                raise LocalizationError(f"`seeds` has {seeds.shape[1]} features, but X has {shards.d}", "seeds")
            return seeds, None
        if self.bin_seeding:
            seeds = self._bin_seeds(shards, h)
            if seeds is not None:
                return np.ascontiguousarray(seeds, dtype=dtype), None
        elif algorithm == "grid":
            return self._cells["centroids"], "grid"
        # Every point is a seed (scikit-learn's default and its fallback when binning fails).
        return np.ascontiguousarray(shards.X.compute()), "all"

    def _bin_seeds(self, shards, h):
        lo, hi = np.round(shards.lo / h), np.round(shards.hi / h)
        parts = [delayed(_bins, pure=True)(xb, h, lo, hi) for _, xb, _, _ in shards.blocks]
        _, cells, counts = dask.compute(tree_reduce(parts, lambda a, b: delayed(_merge_bins, pure=True)(a, b)))[0]
        return bin_seeds(cells, counts, h, self.min_bin_freq, shards.n)

    def _grid(self, shards, h, res):
        """The grid's cells, counted per shard and merged; their centroids become the
        (sharded) references of the climb."""
        lo, hi = shards.lo.astype(np.float64).tolist(), shards.hi.astype(np.float64).tolist()
        _core.grid_keys(np.zeros((0, shards.d), dtype=shards.dtype), lo, hi, h, res)  # checks the grid now
        parts = [delayed(_grid_cells, pure=True)(xb, wb, lo, hi, h, res, self._threads) for _, xb, _, wb in shards.blocks]
        cells = dask.compute(tree_reduce(parts, lambda a, b: delayed(_grid_merge, pure=True)(a, b)))[0]
        centroids, weights = _core.grid_centroids(cells)
        centroids = np.ascontiguousarray(centroids, dtype=shards.dtype)
        weights = np.ascontiguousarray(weights, dtype=shards.dtype)
        keys = cells.keys
        order = np.argsort(keys, kind="stable")
        return dict(lo=lo, hi=hi, centroids=centroids, weights=weights, sorted_keys=keys[order], cell_of_sorted=order)

    # -- the climb ----------------------------------------------------------------------

    def _windows(self):
        """The climb's references, prepared once per shard and kept on the workers: the
        sample's shards, or the grid cells' centroids split over the workers."""
        if getattr(self, "_window_futures", None) is None:
            if self._cells is None:
                shards, kernel = self._shards, self.kernel_
            else:
                c = self._cells
                n_parts = max(1, min(len(c["centroids"]), sum(client().nthreads().values()) if client() else 1))
                rows = -(-len(c["centroids"]) // n_parts)
                shards = Shards(da.from_array(c["centroids"], chunks=(rows, -1)), None, da.from_array(c["weights"], chunks=rows))
                kernel = "tophat"
            tasks = [delayed(_window, pure=True)(xb, wb, kernel, self.bandwidth_, self._threads) for _, xb, _, wb in shards.blocks]
            self._window_futures = dask.persist(*tasks)
        return self._window_futures

    def _climb(self, seeds, progress=None):
        """Shift every seed to its mode over all shards (a ``_core.Shifted``)."""
        kernel = "tophat" if self._cells is not None else self.kernel_
        state = _core.MeanShiftSeeds(
            np.ascontiguousarray(seeds), kernel, self.bandwidth_, step=float(self.step), tol=float(self.tol),
            max_iter=int(self.max_iter), trajectories=bool(self.return_trajectories),
        )
        windows = self._windows()
        total = int(self.max_iter) + 1
        if progress is not None:
            progress(0, total)
        while state.n_active:
            # Each shard sums the windows of the moving seeds; the client merges the partial
            # sums in the fixed order of the shards.
            sums = LocalSums.reduce(each(_window_sums, windows, state.positions(), self._threads))
            state.advance(sums.num.astype(np.float64), sums.den.astype(np.float64), sums.log_scale.astype(np.float64))
            if progress is not None:
                progress(min(state.iteration, total), total)
        return state.result()

    def _shift(self, Q):
        """Climb from the rows of an in-memory Q on the sharded sample: (end points, valid)."""
        run = self._climb(np.ascontiguousarray(Q, dtype=self._shards.dtype))
        return run.modes, run.valid

    # -- labels -------------------------------------------------------------------------

    def _light(self):
        """A copy without the sample, for labelling chunks on the workers."""
        est = copy.copy(self)
        est._shards = est._w = est._window_futures = est._cells = None
        est._X = np.empty((0, self._shards.d), dtype=self._shards.dtype)
        for name in ("seeds_", "trajectories_", "seed_support_", "seed_n_iter_", "seed_converged_"):
            est.__dict__.pop(name, None)
        return est

    def _fit_labels(self, point_seed):
        X = self._shards.X
        how = self.label_assignment
        if how == "auto":
            how = "trajectory" if point_seed is not None else "nearest"
        if point_seed == "all" and how == "trajectory":
            labels = self._label(self.seeds_, np.arange(X.shape[0]))
            return da.from_array(labels, chunks=X.chunks[0])
        est = put(self._light())
        if how == "nearest":
            return X.map_blocks(_labels, est, None, drop_axis=1, dtype=np.int64, meta=np.empty(0, np.int64))
        if point_seed == "grid":
            c = self._cells
            args = (c["lo"], c["hi"], self.bandwidth_, self._grid_resolution, c["sorted_keys"], c["cell_of_sorted"])
            return X.map_blocks(_grid_labels, est, *args, drop_axis=1, dtype=np.int64, meta=np.empty(0, np.int64))
        # Trajectories of points that were not seeds: each chunk climbs from the client.
        return _chunk_by_chunk(X, lambda b: self._label(b, None))

    def predict(self, X: ArrayLike | da.Array) -> IntArray | da.Array:
        """Label new points (see :meth:`localization.MeanShift.predict`); a dask array for
        dask input, chunked like it."""
        if not is_dask(X):
            return super().predict(X)
        X = as_dask(X, "X")
        if self.label_assignment == "nearest":
            est = put(self._light())
            return X.map_blocks(_predict, est, drop_axis=1, dtype=np.int64, meta=np.empty(0, np.int64))
        # Trajectories: each chunk climbs from the client over the sharded sample.
        return _chunk_by_chunk(X, super().predict)

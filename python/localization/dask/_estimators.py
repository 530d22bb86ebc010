"""Estimators fitted on Dask arrays whose sample stays sharded on the workers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import functools
import operator

import dask
import dask.array as da
import numpy as np
from dask import delayed
from sklearn.utils.validation import check_is_fitted

from .. import density, neighbors, regression
from .._base import keeps_state_on_error
from .._sums import tree_reduce
from .._validation import LocalizationError, check_positive_int, check_weight_summary, fit_context
from ..adaptive import is_loo
from ..engine import BoundKernel
from ..kernels import SPECIAL, log_normalization
from ._common import (
    Shards, Spec, aligned, as_dask, assemble, check_algorithm, check_features, computed, float_dtype, is_dask, sharded_kernel,
)

if TYPE_CHECKING:
    from .._typing import ArrayLike, FloatArray, IntArray, SeedLike, Self


def fit_sample(est, X, y=None, sample_weight=None):
    """Validate a sample given as dask (or NumPy) arrays, keep it in the workers' memory and
    check it there in one pass. Returns (shards, total weight)."""
    X = as_dask(X, "X")
    if X.shape[0] == 0:
        raise LocalizationError("`X` is empty: at least one sample is required", "X")
    dtype = float_dtype(X, "X")
    X = X.astype(dtype)
    Y = None
    if y is not None:
        y = aligned(y, X, "y")
        float_dtype(y, "y")
        est._y_1d = y.ndim == 1
        Y = (y[:, None] if y.ndim == 1 else y).astype(dtype)
    w = None
    if sample_weight is not None:
        w = aligned(sample_weight, X, "sample_weight").astype(dtype)
        if w.ndim != 1:
            raise LocalizationError(f"`sample_weight` must be 1-D, got {w.ndim}-D", "sample_weight")
    shards = Shards(X, Y, w).persist()
    stats = dask.compute(*[delayed(_shard_stats, pure=True)(xb, vb, wb) for _, xb, vb, wb in shards.blocks])
    for name in ("X", "y", "sample_weight"):
        if not all(s[name] for s in stats):
            raise LocalizationError(f"`{name}` contains NaN or infinity", name)
    total = float(sum(s["total"] for s in stats)) if w is not None else float(X.shape[0])
    check_weight_summary(any(s["negative"] for s in stats), total)
    # The sample's bounding box (in its dtype), for bins and grids.
    shards.lo = np.min([s["lo"] for s in stats], axis=0)
    shards.hi = np.max([s["hi"] for s in stats], axis=0)
    est.n_features_in_ = X.shape[1]
    return shards, total


def _shard_stats(X, Y, w):
    """What a fit checks of one shard, in one pass: finite entries, weights, bounds."""
    finite = lambda A: A is None or bool(np.isfinite(A).all())  # noqa: E731
    return dict(
        X=finite(X), y=finite(Y), sample_weight=finite(w),
        negative=w is not None and bool((w < 0).any()),
        total=0.0 if w is None else float(np.sum(w, dtype=np.float64)),
        lo=X.min(axis=0), hi=X.max(axis=0),
    )


def _shard_kernel(est, what):
    """The estimator's kernel as every shard applies it (rules of thumb from n and d resolved)."""
    sh = est._shards
    k = sharded_kernel(est._kernel(), None, None, sh.n, sh.d, sh.dtype)
    if k is None:
        raise LocalizationError(
            f"{what} on a Dask array keeps its sample sharded, so its kernel must not look at the whole sample: "
            "not kernel='knn', Balloon, SamplePoint, a data-scaled rule of thumb or a kernel combination (pass the "
            "bandwidth as a number or per-feature array, or fit in memory and wrap with localization.dask.PostFit)",
            "kernel",
        )
    return k


def per_query(est, X, finish, tail, dtype, values=False):
    """``finish(merged LocalSums)`` for every row chunk of the queries: a dask array for dask
    input, a NumPy array (computed) for in-memory input."""
    check_is_fitted(est)
    Q = as_dask(X, "X")
    check_features(Q, est.n_features_in_, "X", "the fitted sample")
    Q = Q.astype(est._shards.dtype)
    spec = Spec(est.kernel_, None, None, est.algorithm, est.n_jobs)
    blocks = [
        delayed(finish, pure=True)(est._shards.sums(q, spec, values=values)) if size else None
        for q, size in zip(Q.to_delayed().ravel(), Q.chunks[0])
    ]
    out = assemble(blocks, Q.chunks[0], tail, dtype)
    return out if is_dask(X) else out.compute()


def _log_density(s, total, log_norm, log_volume):
    with np.errstate(divide="ignore"):
        return density.log_density(s.log_total(), np.log(total), log_norm, log_volume)


class KernelDensity(density.KernelDensity):
    """:class:`localization.KernelDensity` fitted on a Dask array: the sample stays sharded on
    the workers and every query chunk sums the kernel over every shard (partial sums merged
    in a fixed tree), so ``score_samples`` equals the in-memory one to rounding.

    Parameters are those of :class:`localization.KernelDensity`, except that the bandwidth
    must be a number, a per-feature array or scikit-learn's ``"scott"`` / ``"silverman"``
    (data-scaled rules and adaptive bandwidths look at the whole sample) and ``n_jobs`` is
    the threads of each task (None: 1, Dask runs one task per worker thread). The sums are
    exact: ``algorithm="binned"`` is refused and ``atol`` / ``rtol`` have no effect.

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from localization import KernelDensity as InMemory
    >>> from localization.dask import KernelDensity
    >>> X = np.random.default_rng(0).normal(size=(1000, 2))
    >>> kde = KernelDensity(bandwidth=0.5).fit(da.from_array(X, chunks=300))
    >>> np.allclose(kde.score_samples(X[:5]), InMemory(bandwidth=0.5).fit(X).score_samples(X[:5]), rtol=1e-12)
    True
    """

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None, sample_weight: ArrayLike | None = None) -> Self:
        """Keep the sample (a dask array) sharded in the workers' memory. Returns self."""
        check_algorithm(self.algorithm)
        self._shards, self._total = fit_sample(self, X, None, sample_weight)
        name = getattr(self._kernel(), "name", None)
        if not isinstance(name, str) or name in SPECIAL:
            raise LocalizationError("KernelDensity needs a single radial profile kernel (not knn, dot, identity, a callable "
                                    f"or a combination of kernels), got {self.kernel!r}", "kernel")
        self.kernel_ = _shard_kernel(self, "KernelDensity")
        d = self.n_features_in_
        self._log_norm = log_normalization(name, d)
        bk = BoundKernel(self.kernel_, np.zeros((1, d), dtype=self._shards.dtype))
        self._log_volume = bk.log_bandwidth_volume
        self.bandwidth_ = bk.h if bk.feature_scale is None else bk.feature_scale.copy()
        self.X_fit_, self.sample_weight_ = self._shards.X, self._shards.weights
        return self

    def score_samples(self, X: ArrayLike | da.Array) -> FloatArray | da.Array:
        """log p̂(x) for each row of X (a dask array for dask input)."""
        finish = functools.partial(_log_density, total=self._total, log_norm=self._log_norm, log_volume=self._log_volume)
        return per_query(self, X, finish, (), np.float64)

    def score(self, X: ArrayLike | da.Array, y: object = None) -> float:
        """Total log-likelihood of X under the model."""
        s = self.score_samples(X)
        return float(s.sum().compute() if is_dask(s) else np.sum(s))

    def score_function(self, X: ArrayLike | da.Array) -> FloatArray | da.Array:
        raise NotImplementedError("score_function is not available on a sharded sample; fit in memory")

    def sample(self, n_samples: int = 1, random_state: SeedLike = None) -> FloatArray:
        raise NotImplementedError("sample is not available on a sharded sample; fit in memory")


def _ratio_column(s, one_d):
    out = s.mean(warn=False)
    return out[:, 0] if one_d else out


class LocalMeanRegressor(regression.LocalMeanRegressor):
    """:class:`localization.LocalMeanRegressor` fitted on Dask arrays: X, y and the weights
    stay sharded on the workers; ``predict`` and ``loo_predict`` equal the in-memory ones to
    rounding (NaN where no sample has positive weight).

    Parameters are those of :class:`localization.LocalMeanRegressor`, except that the
    bandwidth must be a number, a per-feature array or ``"scott"`` / ``"silverman"`` (not
    ``"loo"``, a data-scaled rule or adaptive), the kernel a single non-negative kernel, and
    ``n_jobs`` is the threads of each task (None: 1). The sums are exact:
    ``algorithm="binned"`` is refused and ``atol`` / ``rtol`` have no effect.

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from localization.dask import LocalMeanRegressor
    >>> X = da.linspace(0, 1, 200, chunks=64)[:, None]
    >>> reg = LocalMeanRegressor(bandwidth=0.05).fit(X, X[:, 0] ** 2)
    >>> bool(abs(reg.predict([[0.5]])[0] - 0.25) < 0.01)
    True
    """

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Self:
        """Keep the sample (dask arrays) sharded in the workers' memory. Returns self."""
        check_algorithm(self.algorithm)
        if is_loo(self.bandwidth):  # either rule: 'loo' or 'loo_per_feature'
            raise LocalizationError("bandwidth='loo' is not available on a sharded sample; pass a number (loo_predict gives the errors)", "bandwidth")
        self._shards, _ = fit_sample(self, X, y, sample_weight)
        self.bandwidth_ = self.bandwidth
        self.kernel_ = _shard_kernel(self, "LocalMeanRegressor")
        self.X_fit_, self.y_fit_, self.sample_weight_ = self._shards.X, self._shards.values, self._shards.weights
        return self

    def _tail(self):
        return () if self._y_1d else (self.y_fit_.shape[1],)

    def predict(self, X: ArrayLike | da.Array | None) -> FloatArray | da.Array:
        """Local means at X (a dask array for dask input); NaN where no sample has weight."""
        finish = functools.partial(_ratio_column, one_d=self._y_1d)
        return per_query(self, X, finish, self._tail(), self._shards.dtype, values=True)

    def loo_predict(self) -> FloatArray | da.Array:
        """Exact leave-one-out predictions on the training sample, as a dask array."""
        check_is_fitted(self)
        spec = Spec(self.kernel_, None, None, self.algorithm, self.n_jobs)
        sh = self._shards
        finish = functools.partial(_ratio_column, one_d=self._y_1d)
        blocks = [
            delayed(finish, pure=True)(sh.sums(q, spec, diagonal=i)) if size else None
            for i, (q, size) in enumerate(zip(sh.X.to_delayed().ravel(), sh.sizes))
        ]
        return assemble(blocks, sh.sizes, self._tail(), sh.dtype)


def _shard_index(X, algorithm, leaf_size):
    return neighbors.NearestNeighbors(algorithm=algorithm, leaf_size=leaf_size).fit(X)


def _shard_knn(index, Q, k, offset):
    dist, ind = index.kneighbors(Q, n_neighbors=min(k, index.n_samples_fit_))
    return dist, ind + offset


def _merge_knn(a, b, k):
    """The k nearest of two candidate lists, by distance then index (as one index sorts)."""
    dist, ind = np.hstack([a[0], b[0]]), np.hstack([a[1], b[1]])
    order = np.lexsort((ind, dist))[:, :k]
    return np.take_along_axis(dist, order, axis=1), np.take_along_axis(ind, order, axis=1)


def _finish_knn(found, rows):
    if rows is None:
        return found
    return neighbors.drop_self(found[0], found[1], rows)


class NearestNeighbors(neighbors.NearestNeighbors):
    """Exact k-nearest neighbours over a sample sharded on the Dask workers.

    Each shard keeps its own neighbour index in the workers' memory; a query chunk asks
    every shard for its k nearest and the candidate lists are merged in a fixed tree by
    (distance, index), so the indices are those of :class:`localization.NearestNeighbors`
    on the whole sample (ties aside). ``kneighbors`` returns dask arrays for dask input and
    NumPy arrays otherwise. ``n_jobs`` is the threads of each task (None: 1). ``verbose=True``
    shows a bar on the client counting the partitions done by the tasks that ``fit`` and a
    ``kneighbors`` on in-memory queries run (a dask result is computed later, by its user).

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from localization.dask import NearestNeighbors
    >>> nn = NearestNeighbors(n_neighbors=2).fit(da.from_array(np.array([[0.0], [1.0], [3.0]]), chunks=2))
    >>> nn.kneighbors([[0.9]])[1].tolist()
    [[1, 0]]
    """

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None) -> Self:
        """Keep the sample sharded and build one index per shard on the workers. Returns self."""
        self._shards, _ = fit_sample(self, X)
        self._indexes = computed(*[delayed(_shard_index, pure=True)(xb, self.algorithm, self.leaf_size) for _, xb, _, _ in self._shards.blocks],
                                 verbose=self.verbose, desc="NearestNeighbors.fit", persist=True)
        self.n_samples_fit_ = self._shards.n
        return self

    def kneighbors(self, X: ArrayLike | da.Array | None = None, n_neighbors: int | None = None,
                   return_distance: bool = True) -> tuple[FloatArray | da.Array, IntArray | da.Array] | IntArray | da.Array:
        """Distances and indices of the k nearest fitted points, ascending.

        With ``X=None`` the fitted points are queried (as a dask array) and each is not its
        own neighbour.
        """
        check_is_fitted(self, "n_samples_fit_")
        k = check_positive_int(self.n_neighbors if n_neighbors is None else n_neighbors, "n_neighbors")
        self_query = X is None
        if k + self_query > self.n_samples_fit_:
            raise LocalizationError(f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {k + self_query}, n_samples_fit = {self.n_samples_fit_}", "n_neighbors")
        sh = self._shards
        Q = sh.X if self_query else as_dask(X, "X")
        check_features(Q, self.n_features_in_, "X", "the fitted sample")
        Q = Q.astype(sh.dtype)
        kk = k + self_query
        offsets = np.concatenate([[0], np.cumsum(Q.chunks[0])])
        found = []
        for i, (q, size) in enumerate(zip(Q.to_delayed().ravel(), Q.chunks[0])):
            if not size:
                found.append(None)
                continue
            parts = [delayed(_shard_knn, pure=True)(index, q, kk, sh.offsets[j]) for index, (j, _, _, _) in zip(self._indexes, sh.blocks)]
            best = tree_reduce(parts, lambda a, b: delayed(_merge_knn, pure=True)(a, b, kk))
            rows = np.arange(offsets[i], offsets[i + 1]) if self_query else None
            found.append(delayed(_finish_knn, pure=True)(best, rows))
        dist = assemble([None if f is None else delayed(operator.getitem)(f, 0) for f in found], Q.chunks[0], (k,), sh.dtype)
        ind = assemble([None if f is None else delayed(operator.getitem)(f, 1) for f in found], Q.chunks[0], (k,), np.int64)
        if not (self_query or is_dask(X)):
            dist, ind = computed(dist, ind, verbose=self.verbose, desc="NearestNeighbors.kneighbors")
        return (dist, ind) if return_distance else ind

    def radius_neighbors(self, X: ArrayLike | da.Array | None = None, radius: float | ArrayLike | None = None, return_distance: bool = True,
                         sort_results: bool = True) -> Any:
        raise NotImplementedError("radius_neighbors is not available on a sharded sample; use kneighbors or fit in memory")

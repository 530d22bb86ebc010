"""``local_mean`` and ``kernel_sum`` on Dask arrays."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

import numpy as np
from dask import delayed

if TYPE_CHECKING:
    import dask.array as da

    from .._typing import ArrayLike, KernelLike

from .. import engine
from ._common import (
    BROADCAST_BYTES,
    Shards,
    Spec,
    aligned,
    as_dask,
    assemble,
    check_algorithm,
    check_features,
    float_dtype,
    is_dask,
    sharded_kernel,
    task_threads,
    whole,
)
from .._validation import LocalizationError

_REFERENCES = ("auto", "broadcast", "sharded")


class _Plan:
    """Validated inputs and the choice between broadcast and sharded references."""

    def __init__(self, X_query, X, values, sample_weight, kernel, bandwidth, n_neighbors, exclude_self, references):
        if references not in _REFERENCES:
            raise LocalizationError(f"`references` must be one of {_REFERENCES}, got {references!r}", "references")
        same = X_query is X
        Xd = as_dask(X, "X")
        if Xd.shape[0] == 0:
            raise LocalizationError("`X` is empty: at least one sample is required", "X")
        self.Q = Xd if same else as_dask(X_query, "X_query")
        check_features(self.Q, Xd.shape[1])
        self.dtype = float_dtype(Xd, "X")
        self.one_d = values is not None and np.ndim(values) == 1
        V = None if values is None else aligned(values, Xd, "values")
        w = None if sample_weight is None else aligned(sample_weight, Xd, "sample_weight")
        if w is not None and w.ndim != 1:
            raise LocalizationError(f"`sample_weight` must be 1-D, got {w.ndim}-D", "sample_weight")
        self.kernel = sharded_kernel(kernel, bandwidth, n_neighbors, Xd.shape[0], Xd.shape[1], self.dtype)
        safe = self.kernel is not None
        if exclude_self and not same:
            raise LocalizationError("`exclude_self` needs X_query to be X itself (the same array)", "exclude_self")
        if references == "auto":
            small = sum(a.nbytes for a in (Xd, V, w) if a is not None) <= BROADCAST_BYTES
            references = "sharded" if safe and (exclude_self or not small) else "broadcast"
        if references == "sharded" and not safe:
            raise LocalizationError(
                "this kernel looks at the whole sample (kernel='knn', Balloon/SamplePoint, a data-scaled rule of "
                "thumb or a kernel combination), so sums over shards would differ from the whole: use "
                "references='broadcast', or pass the bandwidth as a number or per-feature array",
                "kernel",
            )
        if references == "broadcast" and exclude_self:
            raise LocalizationError("`exclude_self` on a Dask array needs references='sharded' (the queries are the shards)", "exclude_self")
        self.mode = references
        if references == "sharded":
            self.shards = Shards(Xd, Xd if values is None else V, w)
        else:
            # In-memory references are scattered as they are; dask ones gathered into one block.
            self.refs = [whole(A if is_dask(A) or A is None else np.asarray(A)) for A in (X, values, sample_weight)]

    @property
    def sizes(self):
        return self.Q.chunks[0]

    def blocks(self):
        """(index, delayed block) of every non-empty query block; None for empty ones."""
        qb = self.Q.to_delayed().ravel()
        return [(i, b if s else None) for i, (b, s) in enumerate(zip(qb, self.sizes))]


def _first(a):
    return a[:, 0]


def local_mean(
    X_query: ArrayLike | da.Array, X: ArrayLike | da.Array, values: ArrayLike | da.Array | None = None, *, kernel: KernelLike = "gaussian",
    bandwidth: float | ArrayLike = 1.0, n_neighbors: int | None = None, sample_weight: ArrayLike | da.Array | None = None,
    exclude_self: bool = False, return_weight: bool = False, algorithm: str = "auto", n_jobs: int | None = 1,
    references: str = "auto",
) -> da.Array | tuple[da.Array, da.Array]:
    """The local mean Σ K(x*, xᵢ) wᵢ vᵢ / Σ K(x*, xᵢ) wᵢ of every query row, on Dask arrays.

    The same numbers as :func:`localization.local_mean` (to rounding), computed by the
    workers: queries in their row chunks; references either sent whole to every worker
    (``"broadcast"``) or left in their row chunks (``"sharded"``), where every query chunk
    meets every shard, and the per-shard partial sums (:class:`localization.LocalSums`)
    are merged in a fixed balanced tree over the shards.

    Parameters
    ----------
    X_query : dask or NumPy array of shape (m, d)
    X : dask or NumPy array of shape (n, d)
        Chunk sizes must be known; chunks may be uneven or empty.
    values : array of shape (n,) or (n, p), optional
        Default: X itself (the self-local mean).
    kernel, bandwidth, n_neighbors, sample_weight, algorithm
        As in :func:`localization.local_mean`. Sharded references need a kernel whose sums
        over parts add up: not ``"knn"``, :class:`~localization.Balloon`,
        :class:`~localization.SamplePoint` or a rule-of-thumb bandwidth (those are
        broadcast). Only exact algorithms: ``"binned"`` is refused (its grid would differ
        per shard and per query chunk).
    exclude_self : bool, default=False
        Leave-one-out; needs ``X_query is X`` (sharded: each chunk leaves out itself).
    return_weight : bool, default=False
        Also return Σ K wᵢ per query (float64).
    n_jobs : int, default=1
        Threads of each task (Dask runs one task per worker thread).
    references : {"auto", "broadcast", "sharded"}, default="auto"
        ``"auto"`` broadcasts references of at most 64 MiB (X, values and weights
        together) and shards larger ones.

    Returns
    -------
    mean : dask array of shape (m,) or (m, p), chunked like the queries
        NaN where the total weight is zero.
    weight : dask array of shape (m,), only with ``return_weight=True``

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from localization.dask import local_mean
    >>> X = da.from_array(np.array([[0.0], [1.0], [2.0]]), chunks=2)
    >>> m = local_mean([[1.0]], X, np.array([0.0, 1.0, 5.0]), kernel="epanechnikov", bandwidth=1.5,
    ...                references="sharded")
    >>> m.compute().round(4).tolist()  # (1·1 + 5·5/9) / (1 + 2·5/9)
    [1.7895]
    """
    check_algorithm(algorithm)
    plan = _Plan(X_query, X, values, sample_weight, kernel, bandwidth, n_neighbors, exclude_self, references)
    if values is None:
        tail = (plan.Q.shape[1],)
    else:
        tail = () if plan.one_d else (np.shape(values)[1],)
    blocks, weights = [], []
    if plan.mode == "broadcast":
        kw = dict(kernel=kernel, bandwidth=bandwidth, n_neighbors=n_neighbors, return_weight=return_weight,
                  algorithm=algorithm, n_jobs=task_threads(n_jobs))
        Xr, Vr, wr = plan.refs
        for _, q in plan.blocks():
            out = None if q is None else delayed(_engine_mean, pure=True)(q, Xr, Vr, wr, kw)
            blocks.append(out if out is None or not return_weight else delayed(operator.getitem, pure=True)(out, 0))
            weights.append(None if out is None or not return_weight else delayed(operator.getitem, pure=True)(out, 1))
    else:
        spec = Spec(plan.kernel, None, None, algorithm, n_jobs)
        for i, q in plan.blocks():
            s = None if q is None else plan.shards.sums(q, spec, diagonal=i if exclude_self else None)
            m = None if s is None else delayed(_mean, pure=True)(s)
            blocks.append(m if m is None or not plan.one_d else delayed(_first, pure=True)(m))
            weights.append(None if s is None else delayed(_total, pure=True)(s))
    mean = assemble(blocks, plan.sizes, tail, plan.dtype)
    if return_weight:
        return mean, assemble(weights, plan.sizes, (), np.float64)
    return mean


def _engine_mean(Q, X, V, w, kw):
    return engine.local_mean(Q, X, V, sample_weight=w, **kw)


def _mean(s):
    return s.mean()


def _total(s):
    return s.total()


def kernel_sum(
    X_query: ArrayLike | da.Array, X: ArrayLike | da.Array, values: ArrayLike | da.Array | None = None, *, kernel: KernelLike = "gaussian",
    bandwidth: float | ArrayLike = 1.0, n_neighbors: int | None = None, sample_weight: ArrayLike | da.Array | None = None,
    log: bool = False, exclude_self: bool = False, algorithm: str = "auto", n_jobs: int | None = 1, references: str = "auto",
) -> da.Array:
    """The kernel sum Σᵢ K(x*, xᵢ) wᵢ of every query row, or with ``values`` the weighted sum
    Σᵢ K(x*, xᵢ) wᵢ vᵢ, on Dask arrays.

    The same numbers as :func:`localization.kernel_sum`, computed as in :func:`local_mean`
    (broadcast or sharded references, partial sums merged in a fixed tree). With
    ``log=True`` the logarithm of the kernel sum is returned, finite where the sum itself
    underflows.

    Returns
    -------
    sums : dask array of shape (m,), or (m,) / (m, p) like ``values``; float64

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from localization.dask import kernel_sum
    >>> X = da.from_array(np.array([[0.0], [3.0], [0.5]]), chunks=1)
    >>> kernel_sum([[0.0]], X, kernel="tophat", bandwidth=1.0, references="sharded").compute().tolist()
    [2.0]
    """
    if log and values is not None:
        raise LocalizationError("`log=True` is for the kernel sum itself; drop `values` (weighted sums can be negative)", "values")
    check_algorithm(algorithm)
    plan = _Plan(X_query, X, values, sample_weight, kernel, bandwidth, n_neighbors, exclude_self, references)
    tail = () if values is None or plan.one_d else (np.shape(values)[1],)
    blocks = []
    if plan.mode == "broadcast":
        kw = dict(kernel=kernel, bandwidth=bandwidth, n_neighbors=n_neighbors, log=log, algorithm=algorithm,
                  n_jobs=task_threads(n_jobs))
        Xr, Vr, wr = plan.refs
        for _, q in plan.blocks():
            blocks.append(None if q is None else delayed(_engine_sum, pure=True)(q, Xr, Vr, wr, kw))
    else:
        spec = Spec(plan.kernel, None, None, algorithm, n_jobs)
        with_values = values is not None
        finish = _log_total if log else _value_total if with_values else _total
        for i, q in plan.blocks():
            s = None if q is None else plan.shards.sums(q, spec, values=with_values, diagonal=i if exclude_self else None)
            out = None if s is None else delayed(finish, pure=True)(s)
            blocks.append(out if out is None or not plan.one_d else delayed(_first, pure=True)(out))
    return assemble(blocks, plan.sizes, tail, np.float64)


def _engine_sum(Q, X, V, w, kw):
    return engine.kernel_sum(Q, X, V, sample_weight=w, **kw)


def _log_total(s):
    return s.log_total()


def _value_total(s):
    return s.total(values=True)

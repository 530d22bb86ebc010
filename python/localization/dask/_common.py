"""Shared plumbing of the Dask layer: input checks, references as shards, and the graph of
per-shard local sums reduced in a fixed tree."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
from dask import delayed
from dask.callbacks import Callback
from dask.core import flatten
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from .._progress import Progress
from .._sums import LocalSums, tree_reduce
from ..engine import BoundKernel
from ..engine import check_algorithm as _check_any_algorithm
from ..kernels import Balloon, Kernel, KernelCombination, SamplePoint, as_kernel, rule_of_thumb
from .._validation import LocalizationError, LocalizationTypeError, check_n_jobs

# References at most this large (X, values and weights together) are sent whole to every
# worker by references="auto"; larger ones stay sharded where they are.
BROADCAST_BYTES = 64 * 2**20


def is_dask(A):
    return isinstance(A, da.Array)


def float_dtype(A, name):
    """The float dtype the engine computes ``A`` in (float32 stays, other numbers go float64)."""
    dt = np.dtype(A.dtype if hasattr(A, "dtype") else np.asarray(A).dtype)
    if dt in (np.float32, np.float64):
        return dt
    if dt.kind in "iub":
        return np.dtype(np.float64)
    raise LocalizationTypeError(f"`{name}` has dtype {dt}; pass a numeric array (float32 or float64)", name)


def as_dask(A, name, *, ndim=(2,), chunks=None):
    """``A`` as a dask array with known chunk sizes and one chunk across columns.

    NumPy input is wrapped (rows in chunks of ``chunks`` or Dask's automatic size).
    """
    if not is_dask(A):
        A = np.asarray(A)
        float_dtype(A, name)
        if A.ndim not in ndim:
            raise LocalizationError(f"`{name}` must be {' or '.join(f'{k}-D' for k in ndim)}, got {A.ndim}-D", name)
        rows = "auto" if chunks is None else chunks
        A = da.from_array(A, chunks=(rows,) + (-1,) * (A.ndim - 1))
    float_dtype(A, name)
    if A.ndim not in ndim:
        raise LocalizationError(f"`{name}` must be {' or '.join(f'{k}-D' for k in ndim)}, got {A.ndim}-D", name)
    if any(np.isnan(c) for c in A.chunks[0]) or any(np.isnan(s) for s in A.shape):
        raise LocalizationError(f"`{name}` has unknown chunk sizes; call `{name}.compute_chunk_sizes()` (or give the sizes) first", name)
    if A.ndim == 2 and A.numblocks[1] > 1:
        A = A.rechunk({1: -1})
    return A


def check_features(Q, d, name="X_query", ref="X"):
    if Q.shape[1] != d:
        raise LocalizationError(f"`{name}` has {Q.shape[1]} features, but {ref} has {d}", name)


def aligned(A, X, name):
    """Per-sample ``A`` (values, weights) as a dask array chunked along rows like X."""
    A = as_dask(A, name, ndim=(1, 2))
    if A.shape[0] != X.shape[0]:
        raise LocalizationError(f"`{name}` has {A.shape[0]} rows, but X has {X.shape[0]}", name)
    return A.rechunk({0: X.chunks[0]})


def task_threads(n_jobs):
    """Threads of each native call inside a task: Dask supplies the parallelism (one task per
    worker thread), so None means one."""
    n_jobs = check_n_jobs(n_jobs)
    return 1 if n_jobs is None else int(n_jobs)


def sharded_kernel(kernel, bandwidth, n_neighbors, n, d, dtype):
    """The kernel every shard applies, so that sums over the shards add up to the sums over
    the whole sample of n rows; None when the kernel looks at the whole sample.

    ``"knn"``, adaptive bandwidths, data-scaled rules of thumb and kernel combinations (row
    normalisation, the signed-zero rule) need the whole sample. scikit-learn's ``"scott"``
    and ``"silverman"`` depend on n and d only and are resolved to their number here.
    Bandwidths, temperatures and per-feature scales are checked now, on one dummy sample.
    """
    k = as_kernel(kernel, bandwidth, n_neighbors)
    if isinstance(k, KernelCombination) or k.name == "knn" or isinstance(k.bandwidth, (Balloon, SamplePoint)):
        return None
    if isinstance(k.bandwidth, str):
        if k.bandwidth.endswith("_scaled"):
            return None
        # A view of zeros carries n and d without memory; these rules read nothing else.
        h = rule_of_thumb(np.broadcast_to(np.zeros((), dtype=np.float64), (n, d)), k.bandwidth)
        k = Kernel(k.name, h, n_neighbors=k.n_neighbors, temperature=k.temperature, knn_profile=k.knn_profile)
    BoundKernel(k, np.zeros((1, d), dtype=dtype))
    return k


def client():
    """The active ``distributed`` client, or None (Dask's local schedulers)."""
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


def put(obj):
    """An in-memory object for every task that needs it: scattered to the workers once when
    a distributed client is active, else one key of the graph."""
    c = client()
    if c is not None:
        return c.scatter(obj, broadcast=True, hash=False)
    return delayed(obj, traverse=False)


def each(fn, held, *args):
    """``[fn(h, *args) for h in held]`` on the workers, where each persisted ``h`` lives: plain
    futures with a distributed client (one round trip, no graph), else Dask's scheduler."""
    c = client()
    if c is not None:
        from distributed import futures_of

        return c.gather([c.submit(fn, f, *args, pure=False) for h in held for f in futures_of(h)])
    return list(dask.compute(*[delayed(fn, pure=False)(h, *args) for h in held]))


def computed(*collections, verbose=False, desc="", persist=False):
    """``dask.compute(*collections)`` (``dask.persist`` with ``persist``), with a progress bar
    on the client when ``verbose``: it counts the collections' output chunks (one task per
    partition) as they complete, whichever scheduler runs them (the tasks themselves run on
    the workers, where no bar can be seen). Like every bar of the library it appears only
    after a delay and is closed when the call ends, interrupted or not."""
    run = dask.persist if persist else dask.compute
    if not verbose:
        return run(*collections)
    c = client()
    if c is None:
        # Optimised here and not again, so that the output chunks keep the keys counted
        # (newer Dask renames or elides aliased outputs when it optimises inside compute).
        collections = dask.optimize(*collections)
    keys = {k for col in collections for k in flatten(col.__dask_keys__())}
    with Progress(True, desc, unit="part", total=len(keys)) as bar:
        if c is None:
            # Dask's local schedulers call back in the calling thread as each task ends.
            def posttask(key, result, dsk, state, worker_id):
                if key in keys:
                    bar.update()

            with Callback(posttask=posttask):
                return run(*collections, optimize_graph=False)
        from distributed import as_completed, futures_of

        held = c.persist(list(collections))
        for _ in as_completed(futures_of(held)):
            bar.update()
        return tuple(held) if persist else dask.compute(*held)


def whole(A):
    """A reference argument for one task holding all of it: a dask array as one block, an
    in-memory array scattered."""
    if A is None:
        return None
    if is_dask(A):
        return A.rechunk({0: -1}).to_delayed().ravel()[0]
    return put(A)


def assemble(blocks, sizes, tail, dtype):
    """One dask array from per-block delayed results (rows ``sizes``, trailing shape ``tail``),
    chunked exactly so, empty blocks included (``None`` for an empty block)."""
    live = [b for b in blocks if b is not None]
    name = "localization-" + tokenize([b.key for b in live], sizes, tail, np.dtype(dtype).str)
    zeros = (0,) * len(tail)
    layer = {
        (name, i) + zeros: (np.empty, (0,) + tail, dtype) if b is None else b.key
        for i, b in enumerate(blocks)
    }
    graph = HighLevelGraph.from_collections(name, layer, dependencies=live)
    return da.Array(graph, name, chunks=(tuple(sizes),) + tuple((t,) for t in tail), dtype=dtype)


class Shards:
    """References split by rows: X with optional per-sample values and weights, each shard a
    block of a dask array (persisted on the workers when the caller asks)."""

    def __init__(self, X, values=None, weights=None):
        self.X, self.values, self.weights = X, values, weights
        self.n, self.d = X.shape
        self.dtype = float_dtype(X, "X")
        self.sizes = X.chunks[0]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        xb = X.to_delayed().ravel()
        vb = None if values is None else values.to_delayed().ravel()
        wb = None if weights is None else weights.to_delayed().ravel()
        # Empty shards add nothing to any sum: they get no task.
        self.blocks = [
            (j, xb[j], None if vb is None else vb[j], None if wb is None else wb[j])
            for j, size in enumerate(self.sizes)
            if size > 0
        ]
        if not self.blocks:
            raise LocalizationError("`X` is empty: at least one sample is required", "X")
        # The bounding box of X, once a fit has looked at the data.
        self.lo = self.hi = None

    def persist(self):
        """The same shards held in the workers' memory."""
        X, values, weights = dask.persist(self.X, self.values, self.weights)
        return Shards(X, values, weights)

    def sums(self, Q, spec, *, values=True, diagonal=None):
        """A delayed :class:`LocalSums` of the query block ``Q`` over every shard, merged in a
        balanced tree over the shards in order; ``diagonal`` is the shard whose rows are the
        queries themselves (leave-one-out)."""
        parts = [
            delayed(_partial, pure=True)(Q, xb, vb if values else None, wb, spec, j == diagonal)
            for j, xb, vb, wb in self.blocks
        ]
        return tree_reduce(parts, lambda a, b: delayed(LocalSums.merge, pure=True)(a, b))


def check_algorithm(algorithm):
    """Every Dask path sums exactly, so ``"binned"`` is refused: its grid spans each call's own
    sample and queries, so sums binned per shard or per query chunk would differ from the
    in-memory binned result and its error bound would be lost. (``atol``/``rtol`` of the
    estimators need no check: exact sums meet any tolerance.)"""
    _check_any_algorithm(algorithm)
    if algorithm == "binned":
        raise LocalizationError(
            "`algorithm='binned'` is not available on Dask arrays (each shard or query chunk would bin on its own "
            "grid, so the result would differ from the in-memory one and carry no error bound): use an exact "
            "algorithm ('auto', 'brute', 'kd_tree', 'expansion'), or fit in memory and wrap with "
            "localization.dask.PostFit",
            "algorithm",
        )


class Spec:
    """The kernel settings a task needs (picklable, hashable for Dask's keys)."""

    def __init__(self, kernel, bandwidth, n_neighbors=None, algorithm="auto", n_jobs=None):
        check_algorithm(algorithm)
        self.kernel, self.bandwidth, self.n_neighbors = kernel, bandwidth, n_neighbors
        self.algorithm, self.n_jobs = algorithm, task_threads(n_jobs)

    def __dask_tokenize__(self):
        return tokenize(self.kernel, self.bandwidth, self.n_neighbors, self.algorithm, self.n_jobs)

    def sums(self, Q, X, V=None, w=None, exclude_self=False):
        return LocalSums.compute(
            Q, X, V, kernel=self.kernel, bandwidth=self.bandwidth, n_neighbors=self.n_neighbors, sample_weight=w,
            exclude_self=exclude_self, algorithm=self.algorithm, n_jobs=self.n_jobs,
        )


def _partial(Q, X, V, w, spec, exclude_self):
    return spec.sums(Q, X, V, w, exclude_self)

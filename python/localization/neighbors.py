"""Exact nearest neighbours (kd-tree for low d, tiled blocked-product brute force for high d)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, overload

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from . import _core
from ._base import keeps_state_on_error
from ._progress import Progress
from ._validation import (COUNT, DISTANCE, FLOAT_DTYPES, N_JOBS, LocalizationError, StrOptions, check_number, check_positive_int,
                          fit_context, validate_data)

if TYPE_CHECKING:
    from ._typing import ArrayLike, FloatArray, IntArray, NDArray, Self


def drop_self(dist, ind, rows):
    """k+1 neighbours of fitted points → k: drop each point itself (row i is point
    ``rows[i]``); if duplicates pushed it out of the list, drop the first."""
    keep = ind != np.asarray(rows)[:, None]
    keep[keep.all(axis=1), 0] = False
    m, k = len(ind), ind.shape[1] - 1
    return dist[keep].reshape(m, k), ind[keep].reshape(m, k)


def _check_radius(radius, n_queries=None):
    """A radius >= 0 (+inf allowed: :data:`DISTANCE`, the estimator's constraint) or, at query
    time, one radius per query.

    Returns a float or a float64 array of shape (n_queries,).
    """
    if n_queries is not None and np.ndim(radius) == 1:
        r = np.asarray(radius)
        if r.dtype.kind not in "iuf" or r.shape != (n_queries,):
            raise LocalizationError(f"`radius` must be a number or an array of {n_queries} numbers (one per query), got {radius!r}", "radius")
        r = np.ascontiguousarray(r, dtype=np.float64)
        if np.isnan(r).any() or (r < 0).any():
            raise LocalizationError("every `radius` must be non-negative (np.inf allowed)", "radius")
        return r
    return check_number(radius, "radius", DISTANCE)


def _object_rows(flat, offsets):
    """Split a flat array at the row offsets into an object array of arrays (scikit-learn's layout)."""
    out = np.empty(len(offsets) - 1, dtype=object)
    out[:] = np.split(flat, offsets[1:-1]) if len(out) else []
    return out


class NearestNeighbors(BaseEstimator):
    """Unsupervised exact k-nearest and radius neighbours, API-compatible with scikit-learn.

    Results are sorted by distance (ties by index) and do not depend on ``n_jobs``. The
    distance is Euclidean (scikit-learn's default ``metric="minkowski", p=2``).

    Parameters
    ----------
    n_neighbors : int, default=5
    radius : float, default=1.0
        Default radius of :meth:`radius_neighbors` (inclusive); ``np.inf`` returns every point.
    algorithm : {"auto", "kd_tree", "brute"}, default="auto"
        ``"auto"``: a kd-tree below 16 features, blocked-product brute force above.
    leaf_size : int, default=30
    n_jobs : int, optional
    verbose : bool, default=False
        Show a progress bar (queries done) on stderr for :meth:`kneighbors` and
        :meth:`radius_neighbors` calls that last more than 0.2 s.

    Attributes
    ----------
    n_samples_fit_ : int
    n_features_in_ : int

    Notes
    -----
    SciPy sparse input (any format) is converted to a dense array, n × d floats. scikit-learn
    searches sparse data by brute force on the sparse matrix itself; for very wide sparse
    data (text features) that is the better tool.

    Examples
    --------
    >>> import numpy as np
    >>> from localization import NearestNeighbors
    >>> nn = NearestNeighbors(n_neighbors=2).fit([[0.0], [1.0], [3.0]])
    >>> dist, ind = nn.kneighbors([[0.9]])
    >>> ind.tolist()
    [[1, 0]]
    >>> nn.radius_neighbors([[0.9]], radius=[2.5], sort_results=True)[1][0].tolist()   # one radius per query
    [1, 0, 2]
    >>> nn.kneighbors_graph([[0.9]]).toarray().tolist()
    [[1.0, 1.0, 0.0]]
    """

    _parameter_constraints = {
        "n_neighbors": [COUNT],
        "radius": [DISTANCE],
        "algorithm": [StrOptions({"auto", "kd_tree", "brute"})],
        "leaf_size": [COUNT],
        "n_jobs": N_JOBS,
        "verbose": ["verbose"],
    }

    def __init__(self, n_neighbors: int = 5, radius: float = 1.0, algorithm: str = "auto", leaf_size: int = 30,
                 n_jobs: int | None = None, verbose: int | bool = False) -> None:
        self.n_neighbors = n_neighbors
        self.radius = radius
        self.algorithm = algorithm
        self.leaf_size = leaf_size
        self.n_jobs = n_jobs
        self.verbose = verbose

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None) -> Self:
        """Build the index. Returns self."""
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", densify=True)
        self._fit_X = np.ascontiguousarray(X)
        self._index = _core.NeighborIndex(self._fit_X, self.algorithm, self.leaf_size)
        self.n_samples_fit_ = X.shape[0]
        return self

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_index", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if "_fit_X" in state:
            self._index = _core.NeighborIndex(self._fit_X, self.algorithm, self.leaf_size)

    def _queries(self, X):
        check_is_fitted(self)
        if X is None:
            return self._fit_X, True
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False, densify=True)
        return np.ascontiguousarray(X, dtype=self._fit_X.dtype), False

    def _progress(self, method):
        return Progress(self.verbose, f"{type(self).__name__}.{method}", unit="query")

    @overload
    def kneighbors(self, X: ArrayLike | None = None, n_neighbors: int | None = None,
                   return_distance: Literal[True] = True) -> tuple[FloatArray, IntArray]: ...
    @overload
    def kneighbors(self, X: ArrayLike | None, n_neighbors: int | None, return_distance: Literal[False]) -> IntArray: ...
    @overload
    def kneighbors(self, X: ArrayLike | None = None, n_neighbors: int | None = None, *,
                   return_distance: Literal[False]) -> IntArray: ...
    def kneighbors(self, X: ArrayLike | None = None, n_neighbors: int | None = None,
                   return_distance: bool = True) -> tuple[FloatArray, IntArray] | IntArray:
        """Distances and indices of the k nearest fitted points, ascending.

        With ``X=None`` the fitted points are queried and each is not its own neighbour
        (if duplicates push a point out of its own list, its first neighbour is dropped).
        The two (n_queries, k) outputs (int64 and the data's float type) are allocated
        before the search; if they do not fit, ``MemoryError`` is raised at once.
        """
        Q, self_query = self._queries(X)
        k = check_positive_int(self.n_neighbors if n_neighbors is None else n_neighbors, "n_neighbors")
        if k + self_query > self.n_samples_fit_:
            raise LocalizationError(f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {k + self_query}, n_samples_fit = {self.n_samples_fit_}", "n_neighbors")
        with self._progress("kneighbors") as bar:
            dist, ind = self._index.knn(Q, k + self_query, n_jobs=self.n_jobs, progress=bar.callback)
        if self_query:
            dist, ind = drop_self(dist, ind, np.arange(len(Q)))
        return (dist, ind) if return_distance else ind

    def radius_neighbors(self, X: ArrayLike | None = None, radius: float | ArrayLike | None = None, return_distance: bool = True,
                         sort_results: bool = False) -> tuple[NDArray[np.object_], NDArray[np.object_]] | NDArray[np.object_]:
        """All fitted points within ``radius`` (inclusive), as object arrays of arrays.

        Memory: (8 + itemsize) bytes per (query, neighbour) pair, up to n_queries × n_samples
        when the radius covers everything. The lists grow a block of queries at a time and a
        ``MemoryError`` reports the pairs found so far.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features), optional
            ``None``: the fitted points, each not its own neighbour.
        radius : float or array of shape (n_queries,), optional
            One radius for all queries or one per query (default ``self.radius``);
            ``np.inf`` returns every point.
        return_distance : bool, default=True
        sort_results : bool, default=False
            True: each query's neighbours by increasing distance (ties by index; needs
            ``return_distance=True``, as in scikit-learn). False: in increasing index, the
            order of scikit-learn's brute force.

        Returns
        -------
        distances, indices : ndarray of shape (n_queries,) of arrays
        """
        if sort_results and not return_distance:
            raise LocalizationError("return_distance must be True if sort_results is True.", "return_distance")
        Q, self_query = self._queries(X)
        r = _check_radius(self.radius if radius is None else radius, len(Q))
        with self._progress("radius_neighbors") as bar:
            dist, ind, offsets = self._index.radius(Q, r, n_jobs=self.n_jobs, progress=bar.callback)
        row = np.repeat(np.arange(len(Q)), np.diff(offsets))
        if self_query:
            keep = ind != row
            dist, ind, row = dist[keep], ind[keep], row[keep]
            offsets = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=len(Q)))])
        if not sort_results:
            order = np.lexsort((ind, row))
            dist, ind = dist[order], ind[order]
        I = _object_rows(ind, offsets)
        return (_object_rows(dist, offsets), I) if return_distance else I

    def kneighbors_graph(self, X: ArrayLike | None = None, n_neighbors: int | None = None,
                         mode: str = "connectivity") -> sp.csr_matrix:
        """The k-neighbours graph as a CSR matrix of shape (n_queries, n_samples_fit).

        ``mode="connectivity"`` stores ones, ``"distance"`` the distances.
        """
        _check_mode(mode)
        dist, ind = self.kneighbors(X, n_neighbors)
        n_queries, k = ind.shape
        data = np.ones(ind.size) if mode == "connectivity" else dist.ravel()
        return sp.csr_matrix((data, ind.ravel(), np.arange(0, n_queries * k + 1, k)), shape=(n_queries, self.n_samples_fit_))

    def radius_neighbors_graph(self, X: ArrayLike | None = None, radius: float | ArrayLike | None = None,
                               mode: str = "connectivity", sort_results: bool = False) -> sp.csr_matrix:
        """The radius-neighbours graph as a CSR matrix of shape (n_queries, n_samples_fit).

        ``mode="connectivity"`` stores ones, ``"distance"`` the distances; each row's entries
        are in increasing distance with ``sort_results=True``, else in increasing index.
        """
        _check_mode(mode)
        dist, ind = self.radius_neighbors(X, radius, sort_results=sort_results)
        counts = np.array([len(i) for i in ind], dtype=np.int64)
        indptr = np.concatenate([[0], np.cumsum(counts)])
        flat_ind = np.concatenate(list(ind)) if len(ind) else np.zeros(0, dtype=np.int64)
        data = np.ones(len(flat_ind)) if mode == "connectivity" else (np.concatenate(list(dist)) if len(dist) else np.zeros(0))
        return sp.csr_matrix((data, flat_ind, indptr), shape=(len(ind), self.n_samples_fit_))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


def _check_mode(mode):
    if mode not in ("connectivity", "distance"):
        raise LocalizationError(f"`mode` must be 'connectivity' or 'distance', got {mode!r}", "mode")

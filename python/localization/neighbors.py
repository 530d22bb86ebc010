"""Exact nearest neighbours (kd-tree for low d, tiled blocked-product brute force for high d)."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from . import _core
from ._validation import FLOAT_DTYPES, check_positive_int, validate_data


def drop_self(dist, ind, rows):
    """k+1 neighbours of fitted points → k: drop each point itself (row i is point
    ``rows[i]``); if duplicates pushed it out of the list, drop the first."""
    keep = ind != np.asarray(rows)[:, None]
    keep[keep.all(axis=1), 0] = False
    m, k = len(ind), ind.shape[1] - 1
    return dist[keep].reshape(m, k), ind[keep].reshape(m, k)


class NearestNeighbors(BaseEstimator):
    """Unsupervised exact k-nearest and radius neighbours, API-compatible with scikit-learn.

    Results are sorted by distance (ties by index) and do not depend on ``n_jobs``.

    Parameters
    ----------
    n_neighbors : int, default=5
    radius : float, default=1.0
    algorithm : {"auto", "kd_tree", "brute"}, default="auto"
        ``"auto"``: a kd-tree below 16 features, blocked-product brute force above.
    leaf_size : int, default=30
    n_jobs : int, optional

    Examples
    --------
    >>> import numpy as np
    >>> from localization import NearestNeighbors
    >>> nn = NearestNeighbors(n_neighbors=2).fit([[0.0], [1.0], [3.0]])
    >>> dist, ind = nn.kneighbors([[0.9]])
    >>> ind.tolist()
    [[1, 0]]
    """

    def __init__(self, n_neighbors=5, radius=1.0, algorithm="auto", leaf_size=30, n_jobs=None):
        self.n_neighbors = n_neighbors
        self.radius = radius
        self.algorithm = algorithm
        self.leaf_size = leaf_size
        self.n_jobs = n_jobs

    def fit(self, X, y=None):
        """Build the index. Returns self."""
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C")
        check_positive_int(self.n_neighbors, "n_neighbors")
        check_positive_int(self.leaf_size, "leaf_size")
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
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False)
        return np.ascontiguousarray(X, dtype=self._fit_X.dtype), False

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """Distances and indices of the k nearest fitted points, ascending.

        With ``X=None`` the fitted points are queried and each is not its own neighbour.
        """
        Q, self_query = self._queries(X)
        k = check_positive_int(self.n_neighbors if n_neighbors is None else n_neighbors, "n_neighbors")
        if k + self_query > self.n_samples_fit_:
            raise ValueError(f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {k + self_query}, n_samples_fit = {self.n_samples_fit_}")
        dist, ind = self._index.knn(Q, k + self_query, n_jobs=self.n_jobs)
        if self_query:
            dist, ind = drop_self(dist, ind, np.arange(len(Q)))
        return (dist, ind) if return_distance else ind

    def radius_neighbors(self, X=None, radius=None, return_distance=True, sort_results=True):
        """All fitted points within ``radius`` (inclusive), as object arrays of arrays."""
        Q, self_query = self._queries(X)
        r = self.radius if radius is None else radius
        if not (np.isscalar(r) and np.isfinite(r) and r >= 0):
            raise ValueError(f"`radius` must be a finite non-negative number, got {r!r}")
        dist, ind, offsets = self._index.radius(Q, float(r), n_jobs=self.n_jobs)
        D = np.empty(len(Q), dtype=object)
        I = np.empty(len(Q), dtype=object)
        for i in range(len(Q)):
            a, b = offsets[i], offsets[i + 1]
            di, ii = dist[a:b], ind[a:b]
            if self_query:
                keep = ii != i
                di, ii = di[keep], ii[keep]
            D[i], I[i] = di, ii
        return (D, I) if return_distance else I

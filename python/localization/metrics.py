"""Quality of an embedding: trustworthiness and k-NN classification accuracy.

Both are computed from the library's exact neighbour index, in O(n) memory: neither builds
the n×n distance or rank matrix that scikit-learn's ``trustworthiness`` needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array

from . import _core
from ._validation import FLOAT_DTYPES, check_n_jobs, check_positive_int, LocalizationError

if TYPE_CHECKING:
    from ._typing import ArrayLike, SeedLike

__all__ = ["knn_accuracy", "trustworthiness"]


def _embedded_neighbors(Y, k, n_jobs):
    """The k nearest other rows of Y for every row (scikit-learn's ``kneighbors()`` rule)."""
    _, ind = _core.NeighborIndex(Y).knn(Y, k + 1, n_jobs=n_jobs)
    own = ind == np.arange(len(Y))[:, None]
    own[~own.any(axis=1), 0] = True  # duplicates pushed the row off its list: drop the first, as scikit-learn
    return np.ascontiguousarray(ind[~own].reshape(len(Y), k))


def _pair(X, X_embedded):
    X = check_array(X, dtype=FLOAT_DTYPES, order="C", input_name="X")
    Y = check_array(X_embedded, dtype=FLOAT_DTYPES, order="C", input_name="X_embedded")
    if len(X) != len(Y):
        raise LocalizationError(f"`X` has {len(X)} rows but `X_embedded` has {len(Y)}", "X")
    return np.ascontiguousarray(X), np.ascontiguousarray(Y)


def trustworthiness(X: ArrayLike, X_embedded: ArrayLike, *, n_neighbors: int = 5, sample_size: int | None = None,
                    random_state: SeedLike = None, n_jobs: int | None = None) -> float:
    """How far the embedding's neighbourhoods are trustworthy, in [0, 1] (Venna & Kaski).

    T(k) = 1 − 2 / (n k (2n − 3k − 1)) · Σ_i Σ_{j ∈ E_i} max(r(i, j) − k, 0),

    where E_i are the k nearest neighbours of i in the embedding and r(i, j) the rank of j
    among i's neighbours in the original space (Euclidean). Equal to scikit-learn's
    ``sklearn.manifold.trustworthiness`` (up to the order it gives to exactly tied
    distances), without its n×n matrices: each point's distances are streamed in tiles and
    compared with its k thresholds.

    Parameters
    ----------
    X : array of shape (n_samples, n_features)
    X_embedded : array of shape (n_samples, n_components)
    n_neighbors : int, default=5
        Must be below n_samples / 2.
    sample_size : int, optional
        Average over this many random points i instead of all (an unbiased estimate at
        sample_size / n of the cost, for very large n).
    random_state : int, RandomState or None
        Which points, with ``sample_size``.
    n_jobs : int, optional

    Examples
    --------
    >>> import numpy as np
    >>> from localization.metrics import trustworthiness
    >>> X = np.random.default_rng(0).random((50, 3)) * [1.0, 1.0, 0.1]   # nearly flat
    >>> bool(trustworthiness(X, X[:, :2], n_neighbors=5) > 0.99)     # drop the thin axis
    True
    >>> bool(trustworthiness(X, X[:, 1:], n_neighbors=5) < 0.9)      # drop a wide one
    True
    """
    X, Y = _pair(X, X_embedded)
    n = len(X)
    k = check_positive_int(n_neighbors, "n_neighbors")
    if k >= n / 2:
        raise LocalizationError(f"`n_neighbors` ({k}) should be less than n_samples / 2 ({n / 2})", "n_neighbors")
    check_n_jobs(n_jobs)
    if sample_size is None:
        anchors = np.arange(n, dtype=np.int64)
    else:
        m = check_positive_int(sample_size, "sample_size")
        anchors = np.sort(check_random_state(random_state).choice(n, size=min(m, n), replace=False)).astype(np.int64)
    E = _embedded_neighbors(Y, k, n_jobs)[anchors]
    penalty = _core.trustworthiness_penalty(X, anchors, np.ascontiguousarray(E, dtype=np.int64), n_jobs=n_jobs)
    m = len(anchors)
    return 1.0 - penalty * (2.0 / (m * k * (2.0 * n - 3.0 * k - 1.0)))


def knn_accuracy(X_embedded: ArrayLike, y: ArrayLike, *, n_neighbors: int = 10, n_jobs: int | None = None) -> float:
    """Leave-one-out k-NN classification accuracy of an embedding.

    Each point's label is predicted by the majority label among its ``n_neighbors`` nearest
    other points in the embedding (ties go to the smallest label, as scikit-learn's
    ``KNeighborsClassifier``); returns the fraction predicted right.

    Examples
    --------
    >>> import numpy as np
    >>> from localization.metrics import knn_accuracy
    >>> Y = np.r_[np.zeros((5, 2)), np.ones((5, 2))] + np.arange(10)[:, None] * 1e-3
    >>> knn_accuracy(Y, [0] * 5 + [1] * 5, n_neighbors=3)
    1.0
    """
    Y = np.ascontiguousarray(check_array(X_embedded, dtype=FLOAT_DTYPES, order="C", input_name="X_embedded"))
    labels = np.asarray(y)
    if labels.ndim != 1 or len(labels) != len(Y):
        raise LocalizationError(f"`y` must be 1-D with {len(Y)} labels, got shape {labels.shape}", "y")
    k = check_positive_int(n_neighbors, "n_neighbors")
    if k >= len(Y):
        raise LocalizationError(f"`n_neighbors`={k} must be below n_samples = {len(Y)}", "n_neighbors")
    check_n_jobs(n_jobs)
    classes, codes = np.unique(labels, return_inverse=True)
    E = _embedded_neighbors(Y, k, n_jobs)
    votes = np.zeros((len(Y), len(classes)), dtype=np.int64)
    np.add.at(votes, (np.repeat(np.arange(len(Y)), k), codes[E].ravel()), 1)
    return float(np.mean(votes.argmax(axis=1) == codes))

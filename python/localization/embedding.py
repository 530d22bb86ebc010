"""Embeddings by localization (SPEC §6, and local PCA of SPEC §4)."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ._base import keeps_state_on_error
from ._validation import FLOAT_DTYPES, as_float_array, validate_data, warn_zero_weight
from .engine import bind
from ._validation import check_sample_weight
from .modes import _check_components, _check_n_jobs, _knn_k, _local_frames

__all__ = ["LocalPCA"]


class LocalPCA(TransformerMixin, BaseEstimator):
    """PCA localized at each target: weighted PCA with weights K(x*, xᵢ) wᵢ.

    At a target x* the local mean is μ(x*) = Σ K(x*, xᵢ) wᵢ xᵢ / Σ K(x*, xᵢ) wᵢ and the local
    covariance C(x*) = Σ K wᵢ (xᵢ − μ)(xᵢ − μ)ᵀ / Σ K wᵢ; its top ``n_components`` (= q)
    eigenvectors V(x*) (rows) are the local principal axes. Both come from one engine pass
    (degree-1 design moments), with no pair loop and nothing N×N.

    * ``transform(X)``: local coordinates z = V(x)(x − μ(x)) of each row in its own frame.
    * ``reconstruct(X)``: the projection μ(x) + V(x)ᵀ V(x)(x − μ(x)) of each row onto its
      local q-dimensional affine subspace.
    * ``inverse_transform(Z, X)``: μ(x) + V(x)ᵀ z, the point with local coordinates z in the
      frame at x (``inverse_transform(transform(X), X) == reconstruct(X)``).

    With a very large bandwidth every weight is equal and this is ordinary PCA (same axes,
    same sign convention as scikit-learn's ``PCA``: the largest-|.| entry of each axis is
    positive). Sign and order of the axes are defined per target, so coordinates of different
    targets live in different frames.

    Parameters
    ----------
    n_components : int, default=1
    bandwidth : float, array, "scott", "silverman", Balloon or SamplePoint, default=1.0
    kernel : str or Kernel, default="gaussian"
        Any kernel with design moments (radial profiles and ``"knn"``).
    n_neighbors : int, optional
        k of ``kernel="knn"`` (default 5): PCA of the k nearest samples of each target.
    algorithm : {"auto", "brute", "kd_tree", "expansion"}, default="auto"
    n_jobs : int, optional
        Threads; results do not depend on it.

    Attributes
    ----------
    X_fit_ : ndarray of shape (n_samples, n_features)
    sample_weight_ : ndarray or None

    Examples
    --------
    >>> import numpy as np
    >>> from localization.embedding import LocalPCA
    >>> t = np.linspace(0, 1, 20)
    >>> X = np.c_[t, 2 * t + 1]  # points on a line
    >>> lp = LocalPCA(n_components=1, bandwidth=0.3).fit(X)
    >>> bool(np.allclose(lp.reconstruct([[0.5, 2.0], [0.2, 1.4]]), [[0.5, 2.0], [0.2, 1.4]]))
    True
    """

    def __init__(self, n_components=1, bandwidth=1.0, kernel="gaussian", n_neighbors=None, algorithm="auto", n_jobs=None):
        self.n_components = n_components
        self.bandwidth = bandwidth
        self.kernel = kernel
        self.n_neighbors = n_neighbors
        self.algorithm = algorithm
        self.n_jobs = n_jobs

    @keeps_state_on_error
    def fit(self, X, y=None, sample_weight=None):
        """Store the sample (lazy learning). Returns self."""
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C")
        _check_components(self.n_components, X.shape[1], allow_zero=False)
        _check_n_jobs(self.n_jobs)
        self.X_fit_ = np.ascontiguousarray(X)
        self.sample_weight_ = check_sample_weight(sample_weight, X.shape[0], X.dtype)
        self._bound()  # validates kernel and bandwidth now
        return self

    def _bound(self):
        return bind(self.kernel, self.bandwidth, self.X_fit_, _knn_k(self.kernel, self.n_neighbors), self.sample_weight_,
                    consumer="LocalPCA")

    def _query(self, X):
        check_is_fitted(self)
        Q = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False)
        return np.ascontiguousarray(Q, dtype=self.X_fit_.dtype), Q.dtype

    def local_components(self, X):
        """Local frames at each row of X.

        Returns
        -------
        mean : ndarray of shape (n, n_features)
            Local means μ(x).
        components : ndarray of shape (n, n_components, n_features)
            Local principal axes (orthonormal rows), by decreasing variance.
        explained_variance : ndarray of shape (n, n_components)
            Local variances along them (kernel-weighted, normalised by Σ K w).

        Rows with zero total kernel weight are NaN (with a :class:`LocalizationWarning`).
        """
        Q, _ = self._query(X)
        return self._frames(Q)

    def _frames(self, Q):
        q = _check_components(self.n_components, Q.shape[1], allow_zero=False)
        off, vals, vecs, valid = _local_frames(self._bound(), Q, self.sample_weight_, q, self.algorithm, self.n_jobs)
        warn_zero_weight(~valid, "local PCA")
        return Q.astype(np.float64) + off, vecs, vals

    def transform(self, X):
        """Local coordinates V(x)(x − μ(x)), shape (n, n_components)."""
        Q, dt = self._query(X)
        mu, V, _ = self._frames(Q)
        return np.einsum("nqd,nd->nq", V, Q - mu).astype(dt)

    def reconstruct(self, X):
        """Projection of each row onto its local affine subspace, shape (n, n_features)."""
        Q, dt = self._query(X)
        mu, V, _ = self._frames(Q)
        z = np.einsum("nqd,nd->nq", V, Q - mu)
        return (mu + np.einsum("nqd,nq->nd", V, z)).astype(dt)

    def inverse_transform(self, Z, X):
        """Points with local coordinates Z in the frames at the rows of X."""
        Q, dt = self._query(X)
        Z = as_float_array(Z, "Z")
        q = self.n_components
        if Z.shape != (Q.shape[0], q):
            raise ValueError(f"`Z` must have shape ({Q.shape[0]}, {q}), got {Z.shape}")
        mu, V, _ = self._frames(Q)
        return (mu + np.einsum("nqd,nq->nd", V, Z.astype(np.float64))).astype(dt)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

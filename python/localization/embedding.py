"""Embeddings by localization.

An embedding fits a localization kernel by points in a low-dimensional space:

* :class:`LocallyLinearEmbedding`: the hollow, row-sum-one local kernel W that rebuilds each
  point from its k nearest neighbours; the embedding keeps W's reconstructions
  (bottom eigenvectors of (I − W)ᵀ(I − W)).
* :class:`AsymmetricMDS`: an asymmetric kernel K ≈ Z₁ Z₂ᵀ with two points per item, a
  query point (``embedding_``) and a key point (``key_embedding_``); Frobenius loss (the
  truncated SVD) or the exponential link K̃ ≈ softmax(Z₁ Z₂ᵀ) fitted by KL divergence.
* :class:`TripletEmbedding`: a ternary (hyper)kernel over triplets, TriMap's contrastive
  kernel K(i,j,k) = s_ij / (s_ij + s_ik), fitted by a heavy-tailed kernel in the embedding.
* :class:`OrdinalEmbedding`: the same machinery fitted to given comparisons "i is closer to
  j than to k" (STE / t-STE).
* :class:`LocalPCA`: PCA localized at each target.

The per-pair and per-triplet work (local Gram solves, triplet sampling and gradients,
sampled softmax gradients) runs natively in parallel, with results that do not depend on
the number of threads; the exact softmax normaliser is a kernel sum of the engine under the
dot-product kernel.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, eigsh, svds
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted
from threadpoolctl import threadpool_limits

from . import _core
from ._base import keeps_state_on_error, knn_k, local_frames
from ._progress import progress_bar
from ._sums import LocalSums
from ._validation import (
    COUNT,
    COUNT_OR_ZERO,
    FLOAT_DTYPES,
    N_JOBS,
    NON_NEGATIVE,
    POSITIVE,
    LocalizationWarning,
    StrOptions,
    as_float_array,
    check_n_components,
    check_n_jobs,
    check_number,
    check_positive_int,
    check_sample_weight,
    fit_context,
    validate_data,
    warn_zero_weight,
    LocalizationError,
    LocalizationTypeError,
)
from .engine import ALGORITHM, BoundKernel, bind
from .kernels import BANDWIDTH, KERNEL, as_kernel, profile

if TYPE_CHECKING:
    from ._typing import ArrayLike, BandwidthLike, FloatArray, KernelLike, SeedLike, Self


__all__ = [
    "AsymmetricMDS",
    "LocalPCA",
    "LocallyLinearEmbedding",
    "OrdinalEmbedding",
    "TripletEmbedding",
    "triplet_loss",
]


class LocalPCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
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
    same sign convention as scikit-learn's ``PCA``: the entry of largest magnitude of each axis is
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

    _parameter_constraints = {
        "n_components": [COUNT],
        "bandwidth": BANDWIDTH,
        "kernel": KERNEL,
        "n_neighbors": [COUNT, None],
        "algorithm": ALGORITHM,
        "n_jobs": N_JOBS,
    }

    def __init__(
        self, n_components: int = 1, bandwidth: BandwidthLike = 1.0, kernel: KernelLike = "gaussian",
        n_neighbors: int | None = None, algorithm: str = "auto", n_jobs: int | None = None,
    ) -> None:
        self.n_components = n_components
        self.bandwidth = bandwidth
        self.kernel = kernel
        self.n_neighbors = n_neighbors
        self.algorithm = algorithm
        self.n_jobs = n_jobs

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None, sample_weight: ArrayLike | None = None) -> Self:
        """Store the sample (lazy learning). Returns self."""
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C")
        check_n_components(self.n_components, X.shape[1], allow_zero=False)
        self.X_fit_ = np.ascontiguousarray(X)
        self.sample_weight_ = check_sample_weight(sample_weight, X.shape[0], X.dtype)
        self._bound()  # validates kernel and bandwidth now
        return self

    @property
    def _n_features_out(self):
        """Width of ``transform``'s output, named localpca0, localpca1, … by get_feature_names_out."""
        return self.n_components

    def _bound(self):
        return bind(self.kernel, self.bandwidth, self.X_fit_, knn_k(self.kernel, self.n_neighbors), self.sample_weight_,
                    consumer="LocalPCA")

    def _query(self, X):
        check_is_fitted(self)
        Q = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False)
        return np.ascontiguousarray(Q, dtype=self.X_fit_.dtype), Q.dtype

    def local_components(self, X: ArrayLike) -> tuple[FloatArray, FloatArray]:
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
        q = check_n_components(self.n_components, Q.shape[1], allow_zero=False)
        off, vals, vecs, valid = local_frames(self._bound(), Q, self.sample_weight_, q, self.algorithm, self.n_jobs)
        warn_zero_weight(~valid, "local PCA")
        return Q.astype(np.float64) + off, vecs, vals

    def transform(self, X: ArrayLike) -> FloatArray:
        """Local coordinates V(x)(x − μ(x)), shape (n, n_components)."""
        Q, dt = self._query(X)
        mu, V, _ = self._frames(Q)
        return np.einsum("nqd,nd->nq", V, Q - mu).astype(dt)

    def reconstruct(self, X: ArrayLike) -> FloatArray:
        """Projection of each row onto its local affine subspace, shape (n, n_features)."""
        Q, dt = self._query(X)
        mu, V, _ = self._frames(Q)
        z = np.einsum("nqd,nd->nq", V, Q - mu)
        return (mu + np.einsum("nqd,nq->nd", V, z)).astype(dt)

    def inverse_transform(self, Z: ArrayLike, X: ArrayLike) -> FloatArray:
        """Points with local coordinates Z in the frames at the rows of X."""
        Q, dt = self._query(X)
        Z = as_float_array(Z, "Z")
        q = self.n_components
        if Z.shape != (Q.shape[0], q):
            raise LocalizationError(f"`Z` must have shape ({Q.shape[0]}, {q}), got {Z.shape}", "Z")
        mu, V, _ = self._frames(Q)
        return (mu + np.einsum("nqd,nq->nd", V, Z.astype(np.float64))).astype(dt)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


# ---------------------------------------------------------------------------------------
# shared helpers


def _seed(random_state):
    """A 63-bit seed for the native random streams from a scikit-learn ``random_state``."""
    rng = check_random_state(random_state)
    return int(rng.randint(0, 2**31 - 1)) << 32 | int(rng.randint(0, 2**31 - 1))


def _check_n_components(q, n_samples):
    q = check_positive_int(q, "n_components")
    if q >= n_samples:
        raise LocalizationError(f"`n_components`={q} must be below n_samples = {n_samples}", "n_components")
    return q


def _progress(verbose, desc):
    return progress_bar(verbose, desc, "iteration")


def _lbfgs(fun, x0, max_iter, tol, verbose, desc):
    """scipy's L-BFGS on a (loss, gradient) function, with a progress bar; (x, loss, n_iter)."""
    update, close = _progress(verbose, desc)
    count = [0]

    def callback(xk):
        count[0] += 1
        if update is not None:
            update(count[0], max_iter)

    try:
        res = scipy.optimize.minimize(
            fun, x0, jac=True, method="L-BFGS-B", callback=callback,
            options=dict(maxiter=max_iter, ftol=tol, gtol=tol * 1e-3, maxcor=20),
        )
    finally:
        close()
    return res.x, float(res.fun), int(res.nit)


# ---------------------------------------------------------------------------------------
# locally linear embedding


def _bottom_eigenvectors(W, q, eigen_solver, tol, max_iter, random_state):
    """Eigenvectors 2..q+1 of M = (I − W)ᵀ(I − W) (ascending) and the sum of their eigenvalues.

    ``"dense"`` is scikit-learn's dense path. ``"arpack"`` finds the top eigenvectors of the
    pseudo-inverse M⁺ (so the bottom ones of M, the constant null vector excluded) with
    ARPACK; M⁺ is applied by the core's ``GroundedInverse``: one sparse LU of the grounded
    I − W (k + 1 entries per row, where scikit-learn factors M, ~k² per row), with the two
    null vectors projected out. A Rayleigh–Ritz step with M itself then gives the
    eigenvalues of M to ~1e-10 relative.
    """
    n = W.shape[0]
    A = (sp.identity(n, format="csr") - W).tocsr()
    if eigen_solver == "auto":
        eigen_solver = "dense" if n <= 1500 else "arpack"
    if eigen_solver == "dense":
        M = (A.T @ A).toarray()
        with threadpool_limits(1 if n <= _EIGH_ONE_THREAD else None, user_api="blas"):
            vals, vecs = scipy.linalg.eigh(M, subset_by_index=(1, q))
        order = np.argsort(np.abs(vals))
        return vecs[:, order], float(np.sum(vals))
    v0 = check_random_state(random_state).uniform(-1, 1, n)
    v0 -= v0.mean()
    try:
        k = W.indptr[1]
        inverse = _core.GroundedInverse(W.indices.reshape(n, k).astype(np.int64), W.data.reshape(n, k))

        def apply(b):
            return inverse.apply(np.ascontiguousarray(b, dtype=np.float64))

        OP = LinearOperator((n, n), matvec=apply, matmat=apply, dtype=np.float64)
        # A short Lanczos basis: M⁺'s top eigenvalues are well separated (1/λ of M's
        # smallest), so ARPACK converges in about ncv applications; SciPy's default ncv = 20
        # took 21 on 10,000 Fashion-MNIST images where 8 takes 9, to the same subspace.
        ncv = min(n - 1, max(2 * q + 4, 8))
        _, vecs = eigsh(OP, q, which="LA", tol=tol, maxiter=max_iter, v0=v0, ncv=ncv)
    except RuntimeError as e:  # no convergence
        raise LocalizationError(
            f"the sparse eigensolver failed ({e}); the neighbour graph may be disconnected: "
            "increase n_neighbors or use eigen_solver='dense'",
            "eigen_solver",
        ) from None
    V, _ = np.linalg.qr(vecs - vecs.mean(axis=0))
    AV = A @ V  # VᵀMV = (AV)ᵀ(AV), without forming M
    vals, R = np.linalg.eigh(AV.T @ AV)
    return V @ R, float(np.sum(vals))


class LocallyLinearEmbedding(TransformerMixin, BaseEstimator):
    """Locally linear embedding (standard LLE) as a localization method.

    Each point is rebuilt from its k nearest neighbours by the hollow, row-sum-one local
    kernel W (a discrete kernel on the kNN support):

        w_i = argmin ‖x_i − Σ_j w_ij x_j‖²  subject to  Σ_j w_ij = 1,

    solved from the regularised local Gram system (G + R·I) w ∝ 1, G_jl = (x_j − x_i)·(x_l − x_i),
    R = ``reg`` · tr(G). The embedding Y keeps these reconstructions, minimising
    ‖Y − WY‖²_F with orthonormal columns: the eigenvectors 2..q+1 of (I − W)ᵀ(I − W).
    Same estimator as scikit-learn's ``LocallyLinearEmbedding(method="standard")``: the
    neighbours come from the library's exact index, the Gram systems are solved natively in
    parallel, and the sparse eigenproblem avoids factoring (I − W)ᵀ(I − W) (see
    ``eigen_solver``).

    Parameters
    ----------
    n_neighbors : int, default=5
        k, the support of each point's local kernel.
    n_components : int, default=2
    reg : float, default=1e-3
        Regularisation of the local Gram systems (relative to their trace).
    eigen_solver : {"auto", "arpack", "dense"}, default="auto"
        ``"dense"``: the full eigendecomposition of the n×n matrix (small n; this is
        scikit-learn's ``eigen_solver="dense"``). ``"arpack"``: ARPACK on the
        pseudo-inverse of (I − W)ᵀ(I − W), applied through one sparse LU of the grounded
        I − W, then a Rayleigh–Ritz refinement with (I − W)ᵀ(I − W) itself (memory
        O(n·k) plus the LU's fill-in). ``"auto"``: dense up to 1,500 samples, else arpack.
    tol : float, default=1e-6
        ARPACK tolerance (the refinement makes the eigenvalues much more accurate).
    max_iter : int, default=100
        ARPACK iterations.
    algorithm : {"auto", "kd_tree", "brute"}, default="auto"
        Neighbour search (exact either way).
    random_state : int, RandomState or None
        Start vector of ARPACK.
    n_jobs : int, optional
        Threads; results do not depend on it.

    Attributes
    ----------
    embedding_ : ndarray of shape (n_samples, n_components)
    weights_ : scipy.sparse.csr_matrix of shape (n_samples, n_samples)
        The local kernel W: row i holds i's k neighbours, w_ii = 0, rows sum to 1.
    reconstruction_error_ : float
        Σ of the q eigenvalues kept, = ‖Y − WY‖²_F (scikit-learn's definition).

    Examples
    --------
    >>> import numpy as np
    >>> from localization.embedding import LocallyLinearEmbedding
    >>> t = np.linspace(0, 3, 60)
    >>> X = np.c_[np.cos(t), np.sin(t), t]                  # a helix: a curve in 3-D
    >>> lle = LocallyLinearEmbedding(n_neighbors=6, n_components=1).fit(X)
    >>> np.allclose(lle.weights_.sum(axis=1), 1.0)
    True
    >>> y = lle.embedding_[:, 0]                             # monotone along the curve
    >>> bool(np.all(np.diff(y) > 0) or np.all(np.diff(y) < 0))
    True
    """

    _parameter_constraints = {
        "n_neighbors": [COUNT],
        "n_components": [COUNT],
        "reg": [NON_NEGATIVE],
        "eigen_solver": [StrOptions({"auto", "arpack", "dense"})],
        "tol": [NON_NEGATIVE],
        "max_iter": [COUNT],
        "algorithm": [StrOptions({"auto", "kd_tree", "brute"})],
        "random_state": ["random_state"],
        "n_jobs": N_JOBS,
    }

    def __init__(
        self, n_neighbors: int | None = 5, n_components: int = 2, reg: float = 1e-3, eigen_solver: str = "auto",
        tol: float = 1e-6, max_iter: int = 100, algorithm: str = "auto", random_state: SeedLike = None,
        n_jobs: int | None = None,
    ) -> None:
        self.n_neighbors = n_neighbors
        self.n_components = n_components
        self.reg = reg
        self.eigen_solver = eigen_solver
        self.tol = tol
        self.max_iter = max_iter
        self.algorithm = algorithm
        self.random_state = random_state
        self.n_jobs = n_jobs

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None) -> Self:
        """Compute the local kernel W and the embedding. Returns self."""
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", ensure_min_samples=2)
        n, d = X.shape
        k = self.n_neighbors
        if k >= n:
            raise LocalizationError(f"`n_neighbors`={k} must be below n_samples = {n}", "n_neighbors")
        q = check_n_components(_check_n_components(self.n_components, n), d, allow_zero=False)
        reg, tol, max_iter = float(self.reg), float(self.tol), self.max_iter
        ind, w = _core.lle_weights(X, k, reg, algorithm=self.algorithm, n_jobs=self.n_jobs)
        self.weights_ = sp.csr_matrix((w.ravel(), ind.ravel(), np.arange(0, n * k + 1, k)), shape=(n, n))
        self.weights_.sort_indices()
        vecs, err = _bottom_eigenvectors(self.weights_, q, self.eigen_solver, tol, max_iter, self.random_state)
        self.embedding_ = vecs
        self.reconstruction_error_ = err
        self.X_fit_ = X
        return self

    def fit_transform(self, X: ArrayLike, y: object = None) -> FloatArray:
        return self.fit(X).embedding_

    def transform(self, X: ArrayLike) -> FloatArray:
        """Embed new points: Σ_j w_j y_j over their k nearest fitted points, with the
        barycentric weights that rebuild them from those points (scikit-learn's rule)."""
        check_is_fitted(self)
        Q = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False)
        Q = np.ascontiguousarray(Q, dtype=self.X_fit_.dtype)
        ind, w = _core.lle_weights(self.X_fit_, self.n_neighbors, float(self.reg), queries=Q, algorithm=self.algorithm, n_jobs=self.n_jobs)
        return np.einsum("mk,mkq->mq", w, self.embedding_[ind])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags


# ---------------------------------------------------------------------------------------
# triplet (hyperkernel) and ordinal embedding

_TRIPLET_LOSSES = ("trimap", "linear", "ste", "tste")


def _check_triplets(triplets, n_samples=None, name="triplets", distinct=True):
    T = np.asarray(triplets)
    if T.dtype.kind not in "iu":
        if T.dtype.kind == "f" and T.size and np.all(np.isfinite(T)) and np.all(T == np.round(T)):
            T = T.astype(np.int64)
        else:
            raise LocalizationTypeError(f"`{name}` must be an integer array of shape (n_triplets, 3)", name)
    if T.ndim != 2 or T.shape[1] != 3:
        raise LocalizationError(f"`{name}` must have shape (n_triplets, 3), got {T.shape}", name)
    if T.shape[0] == 0:
        raise LocalizationError(f"`{name}` is empty: at least one triplet is required", name)
    if T.min() < 0:
        raise LocalizationError(f"`{name}` holds negative indices", name)
    if n_samples is not None and T.max() >= n_samples:
        raise LocalizationError(f"`{name}` refers to sample {int(T.max())}, but there are {n_samples}", name)
    if distinct and np.any((T[:, 0] == T[:, 1]) | (T[:, 0] == T[:, 2]) | (T[:, 1] == T[:, 2])):
        raise LocalizationError(f"every row of `{name}` must name three different samples (i, j, k)", name)
    return np.ascontiguousarray(T, dtype=np.int64)


def triplet_loss(Y: ArrayLike, triplets: ArrayLike, weights: ArrayLike | None = None, *, loss: str = "trimap", alpha: float = 1.0,
                 n_jobs: int | None = None) -> tuple[float, FloatArray]:
    """Σ_t w_t ℓ(d²_ij, d²_ik) over triplets t = (i, j, k) and its gradient in ``Y``.

    d² are squared distances between rows of the embedding ``Y`` (degenerate triplets such
    as (i, j, j) are allowed here: they make the sums over all index triples exact). The
    losses:

    * ``"trimap"``: ℓ = (1 + d²_ij) / (2 + d²_ij + d²_ik) = 1 − q_ij / (q_ij + q_ik), with the
      heavy-tailed similarity q = 1 / (1 + d²) (TriMap);
    * ``"linear"``: ℓ = d²_ij − d²_ik (ternary MDS);
    * ``"ste"``: ℓ = −log p, p = e^{−d²_ij} / (e^{−d²_ij} + e^{−d²_ik});
    * ``"tste"``: the same with the Student-t similarity (1 + d²/α)^{−(α+1)/2}.

    The gradient is summed exactly on a fixed-point grid, so it does not depend on ``n_jobs``.

    Returns
    -------
    loss : float
    grad : ndarray of shape Y.shape

    Examples
    --------
    >>> import numpy as np
    >>> from localization.embedding import triplet_loss
    >>> Y = np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]])
    >>> value, grad = triplet_loss(Y, [[0, 1, 2]], loss="linear")   # d²_01 − d²_02 = 1 − 9
    >>> value
    -8.0
    """
    Y = as_float_array(Y, "Y", dtype=np.float64)
    T = _check_triplets(triplets, Y.shape[0], distinct=False)
    w = np.ones(len(T)) if weights is None else as_float_array(weights, "weights", dtype=np.float64, ensure_2d=False)
    if w.shape != (len(T),):
        raise LocalizationError(f"`weights` must have shape ({len(T)},), got {w.shape}", "weights")
    if loss not in _TRIPLET_LOSSES:
        raise LocalizationError(f"`loss` must be one of {_TRIPLET_LOSSES}, got {loss!r}", "loss")
    check_n_jobs(n_jobs)
    return _core.triplet_loss_grad(Y, T, w, loss=loss, alpha=check_number(alpha, "alpha"), n_jobs=n_jobs)


# Principal coordinates up to this size (the smaller of n and d) run on one BLAS thread (see _pca).
_EIGH_ONE_THREAD = 2048


def _pca(X, q):
    """Centred coordinates on the top-q principal axes (exact to the data's precision: an
    eigendecomposition of the smaller of the covariance and the Gram matrix), signs as
    scikit-learn's PCA. The same bits whatever the BLAS thread count while the smaller of n
    and d is at most 2048 (see below)."""
    mu = X.mean(axis=0)
    n, d = X.shape
    q = min(q, n, d)
    small = min(n, d)
    syrk = scipy.linalg.get_blas_funcs("syrk", dtype=X.dtype)
    # One BLAS thread up to that size. OpenBLAS rounds differently on one thread and on
    # several (its single-threaded small-matrix products, and older versions' threaded rank
    # updates), so under threadpool_limits(1) the principal coordinates of 1,200 images
    # changed in their last bits, and with them the triplets and the embedding. It costs the
    # covariance of 10,000 images 0.03 s (0.073 against 0.045 s). The tridiagonalisation
    # gains nothing from threads at this size either: on a busy machine it ran 30× slower
    # (784×784: 6 s against 0.2 s).
    with threadpool_limits(1 if small <= _EIGH_ONE_THREAD else None, user_api="blas"):
        if n < d:
            Xc = X - mu
            G = syrk(1.0, Xc, lower=1)
        else:
            # The covariance from blocks of centred rows (a rank-update each, half a product's
            # work): a centred copy of the whole input cost its page faults, 0.14 s for 10,000
            # images, more than the product.
            G = np.zeros((d, d), dtype=X.dtype, order="F")
            for _, B in _centred_blocks(X, mu):
                # B is C-ordered, so B.T is a Fortran-ordered d × rows matrix: BLAS reads it as is.
                G = syrk(1.0, B.T, beta=1.0, c=G, trans=0, lower=1, overwrite_c=1)
        # Decomposed in the data's precision: float32 data has a float32 covariance already,
        # and LAPACK's float32 solver took half the time (0.03 against 0.055 s at d = 784).
        vals, V = scipy.linalg.eigh(G, subset_by_index=(small - q, small - 1), lower=True)
        if n < d:
            coords = V[:, ::-1] * np.sqrt(np.maximum(vals[::-1], 0.0))
            axes = Xc.T @ V[:, ::-1]
        else:
            axes = V[:, ::-1]
            coords = np.empty((n, q), dtype=X.dtype)
            A = np.ascontiguousarray(axes, dtype=X.dtype)
            for rows, B in _centred_blocks(X, mu):
                np.matmul(B, A, out=coords[rows])
    flip = np.where(axes[np.abs(axes).argmax(axis=0), np.arange(q)] < 0, -1.0, 1.0)
    coords *= flip.astype(coords.dtype)
    return np.ascontiguousarray(coords)


# Rows per centred block of _pca: 8 MB of 784-pixel float64 images.
_PCA_BLOCK = 1024


def _centred_blocks(X, mu):
    """(rows, X[rows] − mu) for consecutive blocks of rows, in one reused buffer."""
    buf = np.empty((min(_PCA_BLOCK, X.shape[0]), X.shape[1]), dtype=X.dtype)
    for start in range(0, X.shape[0], _PCA_BLOCK):
        rows = slice(start, min(start + _PCA_BLOCK, X.shape[0]))
        B = buf[: rows.stop - start]
        np.subtract(X[rows], mu, out=B)
        yield rows, B


class TripletEmbedding(TransformerMixin, BaseEstimator):
    """Triplet (hyperkernel) embedding, TriMap-style.

    A ternary localization kernel, the contrastive hyperkernel of the data

        K(i, j, k) = s_ij / (s_ij + s_ik),   s_ij = exp(−‖x_i − x_j‖² / (σ_i σ_j)),

    (σ_i the mean distance from x_i to its 4th–6th neighbours) is fitted by the same kernel of
    a heavy-tailed similarity q = 1/(1 + d²) in the embedding, over sampled triplets: for each
    point i its ``n_inliers`` nearest neighbours j (by s_ij), each with ``n_outliers``
    samples k drawn uniformly among the farther ones, plus ``n_random`` random triplets.
    Triplet t = (i, j, k) weighs w_t = the tempered log of 1 + log(s_ij / s_ik) (shifted to be
    ≥ 0); the loss is Σ_t w_t · (1 + d²_ij) / (2 + d²_ij + d²_ik) (= Σ w_t (1 − K_Y(i,j,k))),
    minimised by TriMap's optimiser (Nesterov momentum with delta-bar-delta gains) from the
    PCA initialisation. Data with more than ``pca_components`` features are first projected
    on their top principal axes (as TriMap does); neighbours are exact.

    With the same ``random_state`` the triplets and the embedding are the same for any
    ``n_jobs`` (each point draws from its own seeded stream and the gradient is summed on a
    fixed-point grid).

    Parameters
    ----------
    n_components : int, default=2
    n_inliers, n_outliers, n_random : int, default=12, 4, 3
        Triplets per point: n_inliers × n_outliers near ones and n_random random ones.
    weight_temp : float, default=0.5
        Temperature t of the tempered log (0: weights as they are, 1: logarithm).
    learning_rate : float, default=0.05
        Step on the exact gradient (TriMap's own gradient is half of it: this equals its
        ``lr=0.1``).
    max_iter : int, default=400
    init : {"pca", "random"} or ndarray of shape (n_samples, n_components), default="pca"
        ``"pca"``: 0.01 × the top principal coordinates.
    pca_components : int, default=100
    random_state : int, RandomState or None
    n_jobs : int, optional
    verbose : bool, default=False
        Progress bar.

    Attributes
    ----------
    embedding_ : ndarray of shape (n_samples, n_components)
    triplets_ : ndarray of shape (n_triplets, 3)
        Rows (i, j, k), anchor by anchor: i's near triplets (in runs sharing j), then its
        random ones.
    triplet_weights_ : ndarray of shape (n_triplets,)
    loss_ : float
        Mean loss per triplet at the last iteration.
    loss_curve_ : ndarray of shape (n_iter,)
    n_iter_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from localization.embedding import TripletEmbedding
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(0, 1, (60, 5)), rng.normal(8, 1, (60, 5))]   # two clusters
    >>> Y = TripletEmbedding(random_state=0).fit_transform(X)
    >>> gap = np.linalg.norm(Y[:60].mean(0) - Y[60:].mean(0))
    >>> bool(gap > 3 * Y[:60].std(0).max())
    True
    """

    _parameter_constraints = {
        "n_components": [COUNT],
        "n_inliers": [COUNT],
        "n_outliers": [COUNT],
        "n_random": [COUNT_OR_ZERO],
        "weight_temp": [NON_NEGATIVE],
        "learning_rate": [POSITIVE],
        "max_iter": [COUNT_OR_ZERO],
        "init": [StrOptions({"pca", "random"}), "array-like"],
        "pca_components": [COUNT],
        "random_state": ["random_state"],
        "n_jobs": N_JOBS,
        "verbose": ["verbose"],
    }

    def __init__(
        self, n_components: int = 2, n_inliers: int = 12, n_outliers: int = 4, n_random: int = 3,
        weight_temp: float = 0.5, learning_rate: float = 0.05, max_iter: int = 400, init: str | ArrayLike = "pca",
        pca_components: int = 100, random_state: SeedLike = None, n_jobs: int | None = None,
        verbose: bool | int = False,
    ) -> None:
        self.n_components = n_components
        self.n_inliers = n_inliers
        self.n_outliers = n_outliers
        self.n_random = n_random
        self.weight_temp = weight_temp
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.init = init
        self.pca_components = pca_components
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    def _sizes(self, n):
        n_in, n_out, n_rand = self.n_inliers, self.n_outliers, self.n_random
        if n < 4:
            raise LocalizationError(f"TripletEmbedding needs at least 4 samples, got n_samples = {n}", "X")
        if n_in + n_out + 1 > n:
            fit_in = max(1, min(n_in, n - 3))
            fit_out = max(1, min(n_out, n - 1 - fit_in))
            warnings.warn(
                f"n_inliers + n_outliers + 1 = {n_in + n_out + 1} exceeds the {n} samples; "
                f"using n_inliers={fit_in}, n_outliers={fit_out}",
                LocalizationWarning,
                stacklevel=3,
            )
            n_in, n_out = fit_in, fit_out
        return n_in, n_out, n_rand

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None) -> Self:
        """Sample the triplets and optimise the embedding. Returns self."""
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C")
        n, d = X.shape
        n_in, n_out, n_rand = self._sizes(n)
        q = _check_n_components(self.n_components, n)
        lr, temp, max_iter, p = float(self.learning_rate), float(self.weight_temp), self.max_iter, self.pca_components
        seed = _seed(self.random_state)
        # TriMap's preprocessing: principal coordinates of wide data, else a global rescaling.
        if d > p:
            Xp = _pca(X, p)
            pcs = Xp[:, :q] if q <= p else None
        else:
            span = float(X.max() - X.min())
            Xp = (X - X.min()) / (span if span > 0 else 1.0)
            Xp = np.ascontiguousarray(Xp - Xp.mean(axis=0))
            pcs = None
        Y0 = self._init(Xp, pcs, n, q)
        listed = min(n_in + 50, n)
        dist, ind = _core.NeighborIndex(Xp).knn(Xp, listed, n_jobs=self.n_jobs)
        T, w = _core.trimap_triplets(Xp, ind, dist, n_inliers=n_in, n_outliers=n_out, n_random=n_rand,
                                     weight_temp=temp, seed=seed, n_jobs=self.n_jobs)
        update, close = _progress(self.verbose, "TripletEmbedding")
        try:
            Y, curve = _core.triplet_optimize(Y0, T, w, loss="trimap", learning_rate=lr, n_iter=max_iter,
                                              n_jobs=self.n_jobs, progress=update)
        finally:
            close()
        self.embedding_ = Y
        self.triplets_, self.triplet_weights_ = T, w
        self.loss_curve_ = curve
        self.loss_ = float(curve[-1]) if len(curve) else float("nan")
        self.n_iter_ = max_iter
        return self

    def _init(self, Xp, pcs, n, q):
        if isinstance(self.init, str):
            if self.init == "pca":
                if pcs is None:
                    pcs = _pca(Xp, min(q, Xp.shape[1]))
                Y0 = np.zeros((n, q))
                Y0[:, : pcs.shape[1]] = 0.01 * pcs
                return Y0
            return 1e-4 * check_random_state(self.random_state).standard_normal((n, q))  # "random"
        Y0 = as_float_array(self.init, "init", dtype=np.float64)
        if Y0.shape != (n, q):
            raise LocalizationError(f"`init` must have shape ({n}, {q}), got {Y0.shape}", "init")
        return Y0

    def fit_transform(self, X: ArrayLike, y: object = None) -> FloatArray:
        return self.fit(X).embedding_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.non_deterministic = self.random_state is None
        return tags


class OrdinalEmbedding(BaseEstimator):
    """Ordinal embedding: points whose distances respect given comparisons (STE / t-STE).

    Each triplet (i, j, k) states "i is closer to j than to k". The probability the embedding
    gives to it is the contrastive hyperkernel of a similarity q in the embedding,
    p_ijk = q_ij / (q_ij + q_ik), with q = e^{−d²} (``loss="ste"``) or the Student-t
    (1 + d²/α)^{−(α+1)/2} (``loss="tste"``, heavy-tailed); the fit maximises Σ_t w_t log p_t
    − ``l2`` · ‖Y‖²_F with L-BFGS. The result is defined up to rotation, reflection and (for
    noiseless comparisons) scale.

    Parameters
    ----------
    n_components : int, default=2
    loss : {"tste", "ste"}, default="tste"
    alpha : float, optional
        Degrees of freedom of t-STE (default max(n_components − 1, 1)).
    l2 : float, default=0.0
        Ridge on the coordinates (it fixes the scale when every triplet can be satisfied).
    max_iter : int, default=1000
    tol : float, default=1e-9
        Relative decrease of the loss at which L-BFGS stops.
    random_state : int, RandomState or None
        Random start (scale 0.1).
    n_jobs : int, optional
    verbose : bool, default=False

    Attributes
    ----------
    embedding_ : ndarray of shape (n_samples, n_components)
    loss_ : float
        Final objective (negative log-likelihood plus the ridge).
    n_iter_ : int
    satisfied_ : float
        Fraction of the (weighted) triplets the embedding satisfies (d_ij < d_ik).

    Examples
    --------
    >>> import numpy as np
    >>> from localization.embedding import OrdinalEmbedding
    >>> P = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    >>> D = ((P[:, None] - P[None]) ** 2).sum(-1)
    >>> T = [(i, j, k) for i in range(4) for j in range(4) for k in range(4)
    ...      if len({i, j, k}) == 3 and D[i, j] < D[i, k]]
    >>> emb = OrdinalEmbedding(loss="ste", random_state=0).fit(T)
    >>> emb.satisfied_                                   # every comparison holds in 2-D
    1.0
    """

    _parameter_constraints = {
        "n_components": [COUNT],
        "loss": [StrOptions({"ste", "tste"})],
        "alpha": [POSITIVE, None],
        "l2": [NON_NEGATIVE],
        "max_iter": [COUNT],
        "tol": [NON_NEGATIVE],
        "random_state": ["random_state"],
        "n_jobs": N_JOBS,
        "verbose": ["verbose"],
    }

    def __init__(
        self, n_components: int = 2, loss: str = "tste", alpha: float | None = None, l2: float = 0.0,
        max_iter: int = 1000, tol: float = 1e-9, random_state: SeedLike = None, n_jobs: int | None = None,
        verbose: bool | int = False,
    ) -> None:
        self.n_components = n_components
        self.loss = loss
        self.alpha = alpha
        self.l2 = l2
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None, *, n_samples: int | None = None, sample_weight: ArrayLike | None = None) -> Self:
        """Fit to triplets ``X`` (integer array of shape (n_triplets, 3), rows (i, j, k)).

        ``n_samples`` defaults to the largest index + 1; ``sample_weight`` weighs the triplets.
        """
        T = _check_triplets(X, None)
        n = int(T.max()) + 1 if n_samples is None else check_positive_int(n_samples, "n_samples")
        if T.max() >= n:
            raise LocalizationError(f"`triplets` refers to sample {int(T.max())}, but n_samples = {n}", "triplets")
        q = _check_n_components(self.n_components, n)
        alpha = max(q - 1.0, 1.0) if self.alpha is None else float(self.alpha)
        l2, max_iter, tol = float(self.l2), self.max_iter, float(self.tol)
        w = np.ones(len(T)) if sample_weight is None else check_sample_weight(sample_weight, len(T), np.float64)
        # Triplets sharing (i, j) in runs: the native gradient reuses y_i − y_j within a run.
        order = np.lexsort((T[:, 1], T[:, 0]))
        T, w = np.ascontiguousarray(T[order]), np.ascontiguousarray(w[order])
        loss = self.loss

        def fun(theta):
            Y = theta.reshape(n, q)
            value, grad = _core.triplet_loss_grad(Y, T, w, loss=loss, alpha=alpha, n_jobs=self.n_jobs)
            return value + l2 * float(theta @ theta), (grad.ravel() + 2.0 * l2 * theta)

        Y0 = 0.1 * check_random_state(self.random_state).standard_normal((n, q))
        theta, self.loss_, self.n_iter_ = _lbfgs(fun, Y0.ravel(), max_iter, tol, self.verbose, "OrdinalEmbedding")
        self.embedding_ = theta.reshape(n, q)
        d2 = lambda a, b: ((self.embedding_[a] - self.embedding_[b]) ** 2).sum(1)  # noqa: E731
        self.satisfied_ = float(np.sum(w * (d2(T[:, 0], T[:, 1]) < d2(T[:, 0], T[:, 2]))) / np.sum(w))
        return self

    def fit_transform(self, X: ArrayLike, y: object = None, **fit_params: Any) -> FloatArray:
        return self.fit(X, **fit_params).embedding_


# ---------------------------------------------------------------------------------------
# asymmetric MDS


class _KernelAffinity:
    """The n×n affinity K(x_i, x_j) of a library kernel as products, never as a matrix.

    K·V is the engine's kernel-weighted sum of V. Kᵀ·V is one too: radial kernels with one
    bandwidth (or per-feature ones) and the dot kernel are symmetric, and the transpose of a
    per-query (Balloon) bandwidth is the same bandwidth per reference (and vice versa).
    """

    def __init__(self, bk: BoundKernel, n_jobs):
        self.bk, self.n_jobs = bk, n_jobs
        self.n = bk.n
        self.row_h = None if bk.callable else bk.query_bandwidth(bk.Xs)
        self.col_h = bk.sample_h

    def query(self, Q, V, weights=None):
        """(K(Q, X)·diag(weights)·V, K(Q, X)·weights) for rows Q."""
        bk = self.bk
        w = None if weights is None else np.ascontiguousarray(weights, dtype=bk.X.dtype)
        s = bk.sums(Q, np.ascontiguousarray(V, dtype=bk.X.dtype), w, n_jobs=self.n_jobs)
        return s.total(values=True), s.total()

    def matmat(self, V, weights=None):
        """K·diag(weights)·V."""
        return self.query(self.bk.X, V, weights)[0]

    def rmatmat(self, V, weights=None):
        """Kᵀ·diag(weights)·V."""
        if self.row_h is None and self.col_h is None:
            return self.matmat(V, weights)
        bk = self.bk
        # The transpose: each side's per-point bandwidths move to the other side.
        if self.col_h is not None:
            spec = bk.spec.with_query_bandwidth(self.col_h)
        else:
            spec = bk.spec.with_sample_bandwidth(self.row_h)
        w = None if weights is None else np.ascontiguousarray(weights, dtype=bk.X.dtype)
        s = _core.local_sums(bk.Xs, bk.Xs, np.ascontiguousarray(V, dtype=bk.X.dtype), w, kernel=spec, n_jobs=self.n_jobs)
        return LocalSums.from_engine(s).total(values=True)

    def row_sums(self):
        return self.query(self.bk.X, np.zeros((self.n, 1)))[1]

    def rows(self):
        """Blocks (a, K[a:b]) of at most ~4M entries: for the O(n²) scalar summaries only."""
        step = max(1, (1 << 22) // self.n)
        for a in range(0, self.n, step):
            yield a, self.bk.matrix(self.bk.X[a : a + step], n_jobs=self.n_jobs).astype(np.float64)

    def frobenius2(self):
        """Σ_ij K_ij²."""
        return sum(float(np.sum(K * K)) for _, K in self.rows())

    def linear_operator(self):
        n = self.n
        return LinearOperator((n, n), matvec=lambda v: self.matmat(v.reshape(-1, 1))[:, 0],
                              rmatvec=lambda v: self.rmatmat(v.reshape(-1, 1))[:, 0],
                              matmat=self.matmat, rmatmat=self.rmatmat, dtype=np.float64)


def _knn_affinity(X, kernel, n_jobs):
    """The kNN kernel as a sparse matrix: row i holds K(x_i, ·) on i's k nearest samples."""
    k = check_positive_int(kernel.n_neighbors, "n_neighbors")
    n = X.shape[0]
    if k > n:
        raise LocalizationError(f"`n_neighbors`={k} exceeds the {n} samples", "n_neighbors")
    dist, ind = _core.NeighborIndex(X).knn(X, k, n_jobs=n_jobs)
    if kernel.knn_profile is None:
        vals = np.ones(n * k)
    else:
        h = dist[:, -1:].astype(np.float64)
        u = np.divide(dist, h, out=np.zeros(dist.shape), where=h > 0)
        vals = profile(kernel.knn_profile, u).ravel()
    A = sp.csr_matrix((vals, ind.ravel(), np.arange(0, n * k + 1, k)), shape=(n, n))
    A.sum_duplicates()
    A.sort_indices()
    return A


def _check_affinity(A):
    """A square, finite, non-negative precomputed affinity: CSR float64 or a dense float64 array."""
    if isinstance(A, (list, tuple)) or (hasattr(A, "dtype") and not sp.issparse(A) and A.dtype.kind in "iub"):
        A = np.asarray(A, dtype=np.float64)
    A = check_array(A, accept_sparse="csr", dtype=np.float64, input_name="X", ensure_min_samples=2)
    if A.shape[0] != A.shape[1]:
        raise LocalizationError(f"a precomputed affinity `X` must be square, got shape {A.shape}", "X")
    if sp.issparse(A):
        A = sp.csr_matrix(A)
        if not A.has_canonical_format or np.any(A.data == 0):
            A = A.copy()  # canonical form without touching the caller's matrix
            A.sum_duplicates()
            A.eliminate_zeros()
        data = A.data
    else:
        A = np.ascontiguousarray(A)
        data = A
    if np.any(data < 0):
        raise LocalizationError("a precomputed affinity `X` must be non-negative (it is a kernel)", "X")
    return A


def _svd_flip(U, Vt):
    """Signs such that the largest-|.| entry of every key axis is positive (deterministic)."""
    signs = np.sign(Vt[np.arange(Vt.shape[0]), np.abs(Vt).argmax(axis=1)])
    signs[signs == 0] = 1.0
    return U * signs, Vt * signs[:, None]


def _truncated_svd(A, q, random_state):
    """Top-q singular triplets (descending): LAPACK for small dense A, else ARPACK (svds)."""
    n = A.shape[0]
    if isinstance(A, np.ndarray) and n <= 2000:
        U, s, Vt = scipy.linalg.svd(A, full_matrices=False)
        U, s, Vt = U[:, :q], s[:q], Vt[:q]
    else:
        v0 = check_random_state(random_state).uniform(-1, 1, n)
        U, s, Vt = svds(A, k=q, v0=v0, tol=0, solver="arpack")
        order = np.argsort(-s)
        U, s, Vt = U[:, order], s[order], Vt[order]
    U, Vt = _svd_flip(U, Vt)
    return U, s, Vt


class _Target:
    """The row-normalised target P = D⁻¹K of the softmax loss, as the products it needs."""

    def __init__(self, A, aff: _KernelAffinity | None):
        self.A, self.aff = A, aff
        if aff is not None:
            mass = aff.row_sums()
        else:
            mass = np.asarray(A.sum(axis=1)).ravel()
        self.mass = mass
        self.inv = np.divide(1.0, mass, out=np.zeros_like(mass), where=mass > 0)
        if aff is None:
            self.P = sp.csr_matrix(A) if sp.issparse(A) else A
            self.P = (sp.diags(self.inv) @ self.P).tocsr() if sp.issparse(A) else self.P * self.inv[:, None]
        else:
            self.P = None

    def dot(self, V):
        """P·V."""
        if self.P is not None:
            return np.asarray(self.P @ V)
        return self.aff.matmat(V) * self.inv[:, None]

    def tdot(self, V):
        """Pᵀ·V."""
        if self.P is not None:
            return np.asarray(self.P.T @ V)
        return self.aff.rmatmat(V, weights=self.inv)

    def entropy_terms(self):
        """Σ_j P_ij log P_ij per row (the constant part of the KL divergence)."""
        if self.P is not None:
            if sp.issparse(self.P):
                P = self.P.tocoo()
                h = np.zeros(self.P.shape[0])
                np.add.at(h, P.row, P.data * np.log(np.where(P.data > 0, P.data, 1.0)))
                return h
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.sum(np.where(self.P > 0, self.P * np.log(np.where(self.P > 0, self.P, 1.0)), 0.0), axis=1)
        h = np.zeros(self.aff.n)
        for a, K in self.aff.rows():
            P = K * self.inv[a : a + len(K), None]
            h[a : a + len(K)] = np.sum(np.where(P > 0, P * np.log(np.where(P > 0, P, 1.0)), 0.0), axis=1)
        return h


# The softmax kernel exp(q·k) of the exact SNE-style objectives.
_DOT = _core.KernelSpec("dot", temperature=1.0)


def _softmax_exact(Z1, Z2, target, H, w, n_jobs, keys=True):
    """Σ_i w_i KL(P_i ‖ softmax(Z₁[i]·Z₂ᵀ)) and its gradient, exactly, from two engine passes
    under the dot-product kernel (no n×n matrix): the normaliser and Q·Z₂ are a local mean of
    the keys at each query; Qᵀ·(w∘Z₁) is a local sum at each key over the queries, each
    query's dot product shifted by its own log-normaliser (an extra coordinate)."""
    s = LocalSums.from_engine(_core.local_sums(Z1, Z2, Z2, kernel=_DOT, n_jobs=n_jobs))
    num, den = s.num, s.den
    lse = s.log_total()
    PZ2 = target.dot(Z2)
    loss = float(np.sum(w * (H - np.einsum("ij,ij->i", Z1, PZ2) + lse)))
    g1 = w[:, None] * (num / den[:, None] - PZ2)
    if not keys:
        return loss, g1, None
    Qk = np.ascontiguousarray(np.c_[Z2, np.ones(len(Z2))])
    Rq = np.ascontiguousarray(np.c_[Z1, -lse])
    s = LocalSums.from_engine(_core.local_sums(Qk, Rq, Z1, w, kernel=_DOT, n_jobs=n_jobs))
    g2 = s.total(values=True) - target.tdot(w[:, None] * Z1)
    return loss, g1, g2


# Up to this many items a kernel's softmax target is kept as a dense matrix (≤ 32 MB).
_DENSE_TARGET = 2048


class AsymmetricMDS(TransformerMixin, BaseEstimator):
    """Asymmetric MDS: an asymmetric kernel fitted by two points per item, K ≈ Z₁ Z₂ᵀ.

    Each item i gets a query point z₁ᵢ (``embedding_``) and a key point z₂ᵢ
    (``key_embedding_``), and the affinity K(x_i, x_j) — asymmetric for Balloon and kNN
    kernels, or any precomputed square affinity such as a directed word co-occurrence matrix —
    is fitted by their inner products:

    * ``loss="frobenius"``: min ‖K − Z₁Z₂ᵀ‖²_F; the optimum is the truncated SVD
      K ≈ U S Vᵀ, Z₁ = U S^½, Z₂ = V S^½ (Eckart–Young). Sparse input stays sparse (ARPACK
      on the sparse matrix); a kernel affinity is never formed: ARPACK multiplies by K and Kᵀ
      through the engine.
    * ``loss="softmax"``: the row-normalised kernel K̃ = D⁻¹K is fitted by
      softmax(Z₁ Z₂ᵀ) (the exponential link: K̃_ij ≈ exp(z₁ᵢ·z₂ⱼ) / Σ_l exp(z₁ᵢ·z₂ₗ)),
      minimising Σ_i r_i KL(K̃_i ‖ softmax(z₁ᵢ · Z₂ᵀ)) with row weights r. With
      ``normalizer="exact"`` the softmax normaliser is a kernel sum of the engine under the
      dot-product kernel (cost O(n²q) per step, no n×n matrix) and L-BFGS fits it; with
      ``"sampled"`` each row's normaliser is estimated from its own support (summed exactly)
      and ``n_negative`` negatives drawn from the column masses to the power 3/4 (word2vec's
      noise distribution), and Adam fits it (cost O(nnz + n·n_negative) per step; needs a
      sparse affinity: a precomputed one or ``kernel="knn"``).

    Parameters
    ----------
    n_components : int, default=2
    affinity : {"kernel", "precomputed"}, default="kernel"
        ``"kernel"``: K(x_i, x_j) of ``kernel`` on the rows of X. ``"precomputed"``: X is the
        square affinity itself (dense or scipy.sparse, non-negative, any asymmetry).
    kernel : str or Kernel, default="gaussian"
        Any kernel of the library (``"knn"``: the kNN kernel, a sparse affinity).
    bandwidth : float, array, "scott", "silverman", Balloon or SamplePoint, default=1.0
    n_neighbors : int, optional
        k of ``kernel="knn"`` (default 5).
    loss : {"frobenius", "softmax"}, default="frobenius"
    normalizer : {"auto", "exact", "sampled"}, default="auto"
        Softmax loss only; ``"auto"``: exact up to 5,000 items, else sampled.
    n_negative : int, default=20
        Negatives per row and step of the sampled normaliser.
    row_weight : {"uniform", "mass"}, default="uniform"
        Softmax loss: r_i = 1/n, or ∝ the row's total affinity (then the loss is the
        cross-entropy of the affinity's mass, as word2vec weighs words by their counts).
    max_iter : int, default=500
        Softmax loss: L-BFGS iterations (exact) or Adam steps (sampled).
    tol : float, default=1e-9
        Softmax loss, exact: relative decrease at which L-BFGS stops.
    learning_rate : float, default=0.05
        Softmax loss, sampled: Adam's step, decaying linearly to 0.
    random_state : int, RandomState or None
        ARPACK's start vector, the softmax initialisation and the negatives.
    n_jobs : int, optional
    verbose : bool, default=False
        Progress bar (softmax loss).

    Attributes
    ----------
    embedding_ : ndarray of shape (n_samples, n_components)
        Query coordinates Z₁.
    key_embedding_ : ndarray of shape (n_samples, n_components)
        Key coordinates Z₂.
    singular_values_ : ndarray of shape (n_components,)
        Frobenius loss: the top singular values of K.
    stress_ : float
        Frobenius loss: ‖K − Z₁Z₂ᵀ‖_F.
    loss_ : float
        The final loss (‖K − Z₁Z₂ᵀ‖²_F, or the weighted mean KL divergence; sampled:
        the last sampled estimate).
    n_iter_ : int
        Softmax loss: iterations run (Frobenius: 1, the closed form).

    Examples
    --------
    >>> import numpy as np
    >>> from localization.embedding import AsymmetricMDS
    >>> K = np.array([[0.0, 3.0, 1.0], [0.0, 0.0, 3.0], [3.0, 0.0, 0.0]])  # a directed cycle
    >>> amds = AsymmetricMDS(n_components=2, affinity="precomputed").fit(K)
    >>> Z1, Z2 = amds.embedding_, amds.key_embedding_
    >>> bool(np.linalg.norm(K - Z1 @ Z2.T) < np.linalg.norm(K - Z1 @ Z1.T))
    True
    """

    _parameter_constraints = {
        "n_components": [COUNT],
        "affinity": [StrOptions({"kernel", "precomputed"})],
        "kernel": KERNEL,
        "bandwidth": BANDWIDTH,
        "n_neighbors": [COUNT, None],
        "loss": [StrOptions({"frobenius", "softmax"})],
        "normalizer": [StrOptions({"auto", "exact", "sampled"})],
        "n_negative": [COUNT],
        "row_weight": [StrOptions({"uniform", "mass"})],
        "max_iter": [COUNT],
        "tol": [NON_NEGATIVE],
        "learning_rate": [POSITIVE],
        "random_state": ["random_state"],
        "n_jobs": N_JOBS,
        "verbose": ["verbose"],
    }

    def __init__(
        self, n_components: int = 2, affinity: str = "kernel", kernel: KernelLike = "gaussian",
        bandwidth: BandwidthLike = 1.0, n_neighbors: int | None = None, loss: str = "frobenius",
        normalizer: str = "auto", n_negative: int = 20, row_weight: str = "uniform", max_iter: int = 500,
        tol: float = 1e-9, learning_rate: float = 0.05, random_state: SeedLike = None, n_jobs: int | None = None,
        verbose: bool | int = False,
    ) -> None:
        self.n_components = n_components
        self.affinity = affinity
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.loss = loss
        self.normalizer = normalizer
        self.n_negative = n_negative
        self.row_weight = row_weight
        self.max_iter = max_iter
        self.tol = tol
        self.learning_rate = learning_rate
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    def _affinity(self, X):
        """(explicit affinity or None, kernel operator or None)."""
        if self.affinity == "precomputed":
            return _check_affinity(X), None
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", ensure_min_samples=2)
        self.X_fit_ = X
        kernel = as_kernel(self.kernel, self.bandwidth, knn_k(self.kernel, self.n_neighbors))
        self.kernel_ = kernel
        if kernel.name == "knn":
            return _knn_affinity(X, kernel, self.n_jobs), None
        return None, _KernelAffinity(BoundKernel(kernel, X), self.n_jobs)

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None) -> Self:
        """Fit the query and key coordinates. Returns self."""
        A, aff = self._affinity(X)
        if self.affinity == "precomputed":
            self.n_features_in_ = A.shape[1]
        n = A.shape[0] if A is not None else aff.n
        q = _check_n_components(self.n_components, n)
        if self.loss == "frobenius":
            self._fit_frobenius(A, aff, q)
        else:
            self._fit_softmax(A, aff, n, q)
        return self

    def _fit_frobenius(self, A, aff, q):
        M = A if aff is None else aff.linear_operator()
        U, s, Vt = _truncated_svd(M, q, self.random_state)
        root = np.sqrt(s)
        self.embedding_ = U * root
        self.key_embedding_ = Vt.T * root
        self.singular_values_ = s
        if aff is not None:
            total = aff.frobenius2()
        else:
            data = A.data if sp.issparse(A) else A.ravel()
            total = float(data @ data)
        self.loss_ = max(total - float(np.sum(s * s)), 0.0)
        self.stress_ = float(np.sqrt(self.loss_))
        self.n_iter_ = 1

    def _row_weights(self, target):
        has = target.mass > 0
        if not np.any(has):
            raise LocalizationError("the affinity is zero everywhere: nothing to fit", "X")
        if self.row_weight == "uniform":
            w = has.astype(np.float64)
        else:  # "mass"
            w = target.mass.astype(np.float64)
        return w / w.sum()

    def _fit_softmax(self, A, aff, n, q):
        normalizer = self.normalizer
        if normalizer == "auto":
            normalizer = "exact" if n <= 5000 else "sampled"
        if normalizer == "sampled" and aff is not None:
            raise LocalizationError("normalizer='sampled' needs a sparse affinity: use kernel='knn' or a precomputed matrix", "normalizer")
        max_iter = self.max_iter
        rng = check_random_state(self.random_state)
        if aff is not None and n <= _DENSE_TARGET:
            # Every step multiplies by K̃ and K̃ᵀ: for small n its rows, computed once, are
            # cheaper than two engine passes over the data per step.
            A, aff = np.vstack([K for _, K in aff.rows()]), None
        target = _Target(A, aff)
        w = self._row_weights(target)
        Z1 = 0.1 * rng.standard_normal((n, q))
        Z2 = 0.1 * rng.standard_normal((n, q))
        if normalizer == "exact":
            H = target.entropy_terms()
            tol = float(self.tol)

            def fun(theta):
                Z = theta.reshape(2, n, q)
                loss, g1, g2 = _softmax_exact(np.ascontiguousarray(Z[0]), np.ascontiguousarray(Z[1]), target, H, w, self.n_jobs)
                return loss, np.concatenate([g1.ravel(), g2.ravel()])

            theta, self.loss_, self.n_iter_ = _lbfgs(fun, np.concatenate([Z1.ravel(), Z2.ravel()]), max_iter, tol, self.verbose, "AsymmetricMDS")
            Z = theta.reshape(2, n, q)
            self.embedding_, self.key_embedding_ = Z[0].copy(), Z[1].copy()
        else:
            P = sp.csr_matrix(target.P)
            P.sort_indices()
            n_neg = self.n_negative
            lr = float(self.learning_rate)
            col = np.asarray((sp.diags(w) @ P).sum(axis=0)).ravel()
            noise = col**0.75
            noise = 0.95 * noise / noise.sum() + 0.05 / n
            update, close = _progress(self.verbose, "AsymmetricMDS")
            try:
                Z1, Z2, curve = _core.softmax_fit_sampled(
                    Z1, Z2, P.indptr.astype(np.int64), P.indices.astype(np.int64), P.data.astype(np.float64), w, noise,
                    n_negative=n_neg, seed=_seed(rng), learning_rate=lr, n_iter=max_iter, n_jobs=self.n_jobs, progress=update)
            finally:
                close()
            self.embedding_, self.key_embedding_ = Z1, Z2
            self.loss_curve_ = curve
            self.loss_ = float(curve[-1])
            self.n_iter_ = max_iter
        self._target_normalizer = normalizer

    def fit_transform(self, X: ArrayLike, y: object = None) -> FloatArray:
        return self.fit(X).embedding_

    def transform(self, X: ArrayLike) -> FloatArray:
        """Query coordinates of new items against the fitted keys (``affinity="kernel"``).

        Frobenius loss: the least-squares z minimising ‖K(x, ·) − z Z₂ᵀ‖², i.e.
        z = K(x, ·) Z₂ (Z₂ᵀZ₂)⁻¹ (for a fitted item this is its own z₁). Softmax loss: the z
        minimising KL(K̃(x, ·) ‖ softmax(z Z₂ᵀ)) with the keys fixed (convex in z).
        """
        check_is_fitted(self)
        if self.affinity != "kernel":
            raise LocalizationError("transform needs affinity='kernel': a precomputed affinity has no rows for new items", "affinity")
        Q = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False)
        Q = np.ascontiguousarray(Q, dtype=self.X_fit_.dtype)
        Z2 = self.key_embedding_
        if self.kernel_.name == "knn":
            k = self.kernel_.n_neighbors
            dist, ind = _core.NeighborIndex(self.X_fit_).knn(Q, k, n_jobs=self.n_jobs)
            if self.kernel_.knn_profile is None:
                vals = np.ones(dist.shape)
            else:
                h = dist[:, -1:].astype(np.float64)
                vals = profile(self.kernel_.knn_profile, np.divide(dist, h, out=np.zeros(dist.shape), where=h > 0))
            KZ2 = np.einsum("mk,mkq->mq", vals, Z2[ind])
            mass = vals.sum(axis=1)
        else:
            aff = _KernelAffinity(BoundKernel(self.kernel_, self.X_fit_), self.n_jobs)
            KZ2, mass = aff.query(Q, Z2)
        if self.loss == "frobenius":
            return scipy.linalg.solve(Z2.T @ Z2, KZ2.T, assume_a="pos").T
        PZ2 = KZ2 * np.divide(1.0, mass, out=np.zeros_like(mass), where=mass > 0)[:, None]
        m, q = len(Q), Z2.shape[1]

        def fun(theta):
            Z = theta.reshape(m, q)
            s = LocalSums.from_engine(_core.local_sums(Z, Z2, Z2, kernel=_DOT, n_jobs=self.n_jobs))
            loss = float(np.sum(s.log_total() - np.einsum("ij,ij->i", Z, PZ2)))
            return loss, (s.num / s.den[:, None] - PZ2).ravel()

        # Convex and small: solved to rounding.
        theta, _, _ = _lbfgs(fun, np.zeros(m * q), max(self.max_iter, 1000), 1e-15, False, "")
        return theta.reshape(m, q)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.pairwise = self.affinity == "precomputed"
        tags.input_tags.sparse = self.affinity == "precomputed"
        return tags

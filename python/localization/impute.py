"""Imputation by a two-layer local mean (the paper's experiment 3).

Layer 1 is a *feature-level* local mean inside each sample: for images, a Gaussian kernel
over the neighbouring pixels of the same image; for tables, a kernel over feature similarity
(features whose standardised columns agree). Layer 2 is a *sample-level* local mean over the
other samples, with distances computed on the coordinates both samples observe. An entry
is filled by layer 2 applied to the output of layer 1; the pair is iterated. Both layers
are row-stochastic kernels, so their composition is again a local mean (a product of
row-stochastic matrices is row-stochastic) — a two-layer local-mean autoencoder.
"""

from __future__ import annotations

import numbers
import warnings
from typing import TYPE_CHECKING

import numpy as np
from scipy.sparse import csr_matrix
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from . import _core
from ._base import keeps_state_on_error
from ._progress import Progress, progress_bar
from ._validation import COUNT, POSITIVE, LocalizationError, LocalizationWarning, StrOptions, fit_context
from .adaptive import check_grid, search

if TYPE_CHECKING:
    from ._typing import ArrayLike, BandwidthLike, FloatArray, SeedLike, Self


_FLOATS = (np.float64, np.float32)


class LocalMeanImputer(TransformerMixin, BaseEstimator):
    """Fill missing values (NaN) with a two-layer local mean, iterated.

    Layer 1 (within a sample): for images (``image_shape`` given), each pixel is the
    Gaussian-weighted mean of the *other* pixels of the same image within a spatial
    bandwidth ``feature_bandwidth`` (in pixels); for tables, each entry is the local mean of
    the sample's other features under the kernel exp(−δ²ⱼₖ / (2h²)), with δ²ⱼₖ the mean
    squared difference of the standardised columns j and ±k on the rows that observe both
    (``δ² = 2(1 − |correlation|)``, in standard units; an anti-correlated column enters with
    its sign flipped).

    Layer 2 (across samples): each sample's entries are the local mean of its own layer-1
    values (weight w₀, ``self_weight_``) and of its ``n_neighbors`` nearest *other* fitted
    samples' values (observed where observed, layer 1 elsewhere), with Gaussian weights
    exp(−d²/(2(s·dₖ)²));
    d is the Euclidean distance on the coordinates both samples observe, scaled by
    p / (number of such coordinates) as scikit-learn's ``nan_euclidean_distances``, dₖ the
    distance to the k-th neighbour and s ``bandwidth``. Missing entries take layer 2's
    value; observed entries never change. The two layers are iterated ``n_iter`` times,
    each time from the current fill.

    ``"loo"`` bandwidths are chosen on the observed entries: the composed kernel gives an
    entry's own value zero weight (layer 1 is hollow over the features, and layer 2 sees the
    sample itself only through layer 1), so predicting observed entries is an exact
    leave-one-out criterion; the search (log grid then golden section) is that of
    :mod:`localization.adaptive`, on at most ``max_loo_samples`` rows drawn with
    ``random_state``.

    Parameters
    ----------
    image_shape : tuple of int, optional
        (height, width) of each sample seen as an image (n_features = height × width).
        Without it the data are a table.
    n_neighbors : int, default=20
        Samples in the sample-level local mean.
    bandwidth : float or "loo", default="loo"
        Scale s of the sample-level Gaussian relative to each sample's k-th neighbour distance.
    feature_bandwidth : float or "loo", default="loo"
        Spatial σ in pixels (images) or the feature-kernel h in standard units (tables).
    n_iter : int, default=2
        Rounds of layer 1 then layer 2.
    max_loo_samples : int, default=1000
        Rows used to evaluate the leave-one-out criteria.
    random_state : int, RandomState or None
        Draws the rows of the leave-one-out criteria.
    progress : bool, default=False
        Show a progress bar.

    Attributes
    ----------
    bandwidth_, feature_bandwidth_ : float
        The bandwidths used (the LOO choices for ``"loo"``).
    self_weight_ : float
        w₀, the weight of a sample's own layer-1 estimate in layer 2, always chosen by the
        leave-one-out criterion (1 with a single fitted sample).
    cv_results_ : dict
        The search records (see :mod:`localization.adaptive`) keyed by "bandwidth",
        "feature_bandwidth" (for ``"loo"``) and "self_weight".
    statistics_ : ndarray of shape (n_features,)
        Column means of the observed values (the starting fill; 0 for a column with none).

    Notes
    -----
    A column with no observed value in the fitted data starts at 0 and is then filled by
    the layers (for images from the neighbouring pixels; for tables it stays at 0, there is
    nothing to learn it from), with a warning. The sample-level neighbours cost
    O(n_queries · n_fitted · n_features) in one tiled, multithreaded pass of the core (a
    matrix product screens the pairs, direct differences rank the candidates; no
    n_queries × n_fitted matrix; the packed fitted rows take 3 · n · n_features floats) and
    O(n · n_neighbors) output; they are found once per
    ``fit`` (for the leave-one-out rows) and once per ``transform`` and reused by every
    iteration.

    Examples
    --------
    >>> import numpy as np
    >>> from localization import LocalMeanImputer
    >>> X = np.array([[1.0, 2.0, 3.0], [1.1, np.nan, 3.1], [0.9, 1.9, 2.9], [5.0, 6.0, np.nan]])
    >>> filled = LocalMeanImputer(n_neighbors=2, bandwidth=1.0, feature_bandwidth=1.0).fit_transform(X)
    >>> bool(np.all(np.isfinite(filled))), filled[0].tolist()
    (True, [1.0, 2.0, 3.0])
    """

    _parameter_constraints = {
        "image_shape": ["array-like", None],
        "n_neighbors": [COUNT],
        "bandwidth": [POSITIVE, StrOptions({"loo"})],
        "feature_bandwidth": [POSITIVE, StrOptions({"loo"})],
        "n_iter": [COUNT],
        "max_loo_samples": [COUNT],
        "random_state": ["random_state"],
        "progress": ["boolean"],
    }

    def __init__(
        self, image_shape: tuple[int, ...] | None = None, n_neighbors: int | None = 20,
        bandwidth: BandwidthLike = "loo", feature_bandwidth: float | str = "loo", n_iter: int = 2,
        max_loo_samples: int = 1000, random_state: SeedLike = None, progress: bool = False,
    ) -> None:
        self.image_shape = image_shape
        self.n_neighbors = n_neighbors
        self.bandwidth = bandwidth
        self.feature_bandwidth = feature_bandwidth
        self.n_iter = n_iter
        self.max_loo_samples = max_loo_samples
        self.random_state = random_state
        self.progress = progress

    # -- validation ---------------------------------------------------------------------

    def _validate(self, X, reset):
        X = validate_data(self, X, dtype=_FLOATS, ensure_all_finite="allow-nan", reset=reset, copy=False)
        if np.isinf(X).any():
            raise LocalizationError("X contains infinity; only NaN marks a missing value", "X")
        return np.ascontiguousarray(X)

    def _check_params(self, n_features):
        """What the declared constraints cannot say: the image shape against the width of X."""
        if self.image_shape is not None:
            shape = tuple(self.image_shape)
            if len(shape) != 2 or not all(isinstance(s, numbers.Integral) and s > 0 for s in shape):
                raise LocalizationError(f"`image_shape` must be (height, width), positive integers, got {self.image_shape!r}", "image_shape")
            if shape[0] * shape[1] != n_features:
                raise LocalizationError(f"`image_shape`={shape} has {shape[0] * shape[1]} pixels but X has {n_features} features", "image_shape")

    # -- fit / transform ------------------------------------------------------------------

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None) -> Self:
        """Learn the column statistics, the layer kernels and (for "loo") their bandwidths."""
        X = self._validate(X, reset=True)
        self._check_params(X.shape[1])
        observed = ~np.isnan(X)
        if not observed.any():
            raise LocalizationError("X has no observed value (every entry is NaN); there is nothing to impute from", "X")
        counts = observed.sum(0)
        with np.errstate(invalid="ignore"):
            stats = np.where(counts > 0, np.nansum(X, 0, dtype=np.float64) / np.maximum(counts, 1), 0.0)
        if (counts == 0).any():
            warnings.warn(f"{int((counts == 0).sum())} column(s) have no observed value; they start at 0 and are filled "
                          "by the layers (from neighbouring pixels for images, not at all for tables)",
                          LocalizationWarning, stacklevel=2)
        self.statistics_ = stats
        self.X_fit_ = X
        self._mask_fit = observed
        if self.image_shape is None:
            self._fit_feature_kernel(X, observed)
        rng = check_random_state(self.random_state)
        self.cv_results_ = {}
        n = len(X)
        rows = np.sort(rng.choice(n, size=min(n, self.max_loo_samples), replace=False))
        Z = np.where(observed, X, stats)
        self.feature_bandwidth_ = self._choose("feature_bandwidth", self.feature_bandwidth, self._layer1_grid(),
                                               lambda h: self._layer1_error(Z[rows], observed[rows], h))
        if self.bandwidth == "loo" and n < 2:
            raise LocalizationError("bandwidth='loo' needs at least 2 samples, got 1 sample", "bandwidth")
        L = self._layer1(Z, self.feature_bandwidth_)
        S = np.where(observed, X, L)
        if n > 1:
            nbr_d, nbr_i = self._neighbours(X[rows], rows)
            self.self_weight_ = 1.0
            self.bandwidth_ = self._choose(
                "bandwidth", self.bandwidth, np.geomspace(0.1, 10, 12),
                lambda s: self._layer2_error(nbr_d, nbr_i, S, L[rows], X[rows], observed[rows], s))
            # The weight of the sample's own layer-1 estimate against its neighbours' (kernel
            # value 1 at the k-th neighbour's distance scale), by the same criterion.
            self.self_weight_ = self._choose(
                "self_weight", "loo", np.geomspace(0.01, 100, 9),
                lambda w0: self._layer2_error(nbr_d, nbr_i, S, L[rows], X[rows], observed[rows], self.bandwidth_, w0))
        else:
            self.bandwidth_ = 1.0 if self.bandwidth == "loo" else self.bandwidth
            self.self_weight_ = 1.0
        return self

    def _choose(self, name, value, grid, objective):
        if value != "loo":
            return float(value)
        # Bandwidths to 1 % are plenty for imputation; each evaluation is a full layer pass.
        best, results = search(objective, check_grid(grid), tol=0.01, warn_edge=False)
        self.cv_results_[name] = results
        return float(best)

    def transform(self, X: ArrayLike) -> FloatArray:
        """Fill the NaN of X; observed entries are returned unchanged (bit for bit).

        Rows of the fitted data itself (the same array) are imputed without themselves as
        neighbours, so ``fit_transform`` is leave-one-out at the sample level.
        """
        check_is_fitted(self)
        X = self._validate(X, reset=False)
        observed = ~np.isnan(X)
        out = X.copy()
        if observed.all():
            return out
        same = X.shape == self.X_fit_.shape and np.array_equal(X, self.X_fit_, equal_nan=True)
        nbr_d, nbr_i = self._neighbours(X, np.arange(len(X)) if same else None)
        if not same:
            fit_obs = self._mask_fit
            donors = np.where(fit_obs, self.X_fit_, self._layer1(np.where(fit_obs, self.X_fit_, self.statistics_),
                                                                  self.feature_bandwidth_))
        current = np.where(observed, X, self.statistics_)
        with Progress(self.progress, "LocalMeanImputer", total=self.n_iter) as bar:
            for _ in range(self.n_iter):
                L = self._layer1(current, self.feature_bandwidth_)
                if same:
                    donors = np.where(observed, X, L)
                current = np.where(observed, X, self._layer2(nbr_d, nbr_i, donors, L, self.bandwidth_))
                bar.update(1)
        out[~observed] = current[~observed].astype(X.dtype)
        return out

    # -- layer 1: within a sample ----------------------------------------------------------

    def _fit_feature_kernel(self, X, observed):
        """Squared distances δ²ⱼₖ = 2(1 − |ρⱼₖ|) between standardised columns on co-observed
        rows, and the signs of the correlations ρⱼₖ: an anti-correlated column votes with
        its sign flipped (the local mean is over the values sign(ρⱼₖ)·zₖ)."""
        mean = self.statistics_
        Xc = np.where(observed, X - mean, 0.0)
        counts = observed.sum(0)
        std = np.sqrt(np.sum(Xc**2, 0) / np.maximum(counts, 1))
        std[std == 0] = 1.0
        Zs = Xc / std
        M = observed.astype(np.float64)
        both = M.T @ M
        sq = (Zs**2).T @ M
        with np.errstate(invalid="ignore", divide="ignore"):
            # mean of (zⱼ − zₖ)² and of (zⱼ + zₖ)² over the rows observing both
            minus = (sq + sq.T - 2 * Zs.T @ Zs) / both
            plus = (sq + sq.T + 2 * Zs.T @ Zs) / both
        D2 = np.minimum(minus, plus)
        D2[~(both > 0)] = np.inf
        np.fill_diagonal(D2, np.inf)  # hollow: an entry is never its own estimate
        self._feature_d2 = np.maximum(D2, 0.0)
        self._feature_sign = np.where(plus < minus, -1.0, 1.0)
        self._feature_std = std

    def _layer1_grid(self):
        if self.image_shape is not None:
            return np.geomspace(0.2, max(self.image_shape) / 2, 12)
        return np.geomspace(0.05, 3.0, 12)

    def _layer1(self, Z, h):
        """Feature-level hollow local mean of every row of the complete array Z."""
        if self.image_shape is not None:
            return _spatial_hollow_mean(Z, self.image_shape, h)
        K = np.exp(-self._feature_d2 / (2 * h * h))
        den = K.sum(1)
        K = K * self._feature_sign
        Zs = (Z - self.statistics_) / self._feature_std
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (Zs @ K.T) / den
        # A feature with no similar feature keeps its current value.
        out[:, ~(den > 0)] = Zs[:, ~(den > 0)]
        return out * self._feature_std + self.statistics_

    def _layer1_error(self, Z, observed, h):
        return float(np.mean((self._layer1(Z, h)[observed] - Z[observed]) ** 2))

    # -- layer 2: across samples -----------------------------------------------------------

    def _neighbours(self, Q, self_rows):
        """The n_neighbors nearest fitted samples of each query row on co-observed coordinates
        (sorted distances, indices); ``self_rows[i]`` is query i's own fitted row (excluded).
        One tiled pass of the core (no n_queries × n_fitted matrix), exact to direct
        differences, the GIL released."""
        X = self.X_fit_
        k = min(self.n_neighbors, len(X) - (self_rows is not None))
        if k == 0:
            return np.empty((len(Q), 0)), np.empty((len(Q), 0), dtype=np.int64)
        exclude = None if self_rows is None else np.ascontiguousarray(self_rows, dtype=np.int64)
        progress, close = progress_bar(self.progress, "neighbours", unit="row")
        try:
            dist, idx = _core.masked_knn(np.ascontiguousarray(Q, dtype=X.dtype), X, k, exclude, progress=progress)
        finally:
            close()
        return dist.astype(np.float64), idx

    def _layer2(self, dist, idx, donors, own, s, w0=None):
        """The sample-level local mean: each query's own layer-1 values ``own`` with weight
        w0 (``self_weight_``) and its neighbours' ``donors[idx]``, Gaussian weights with
        h = s × (k-th distance)."""
        w0 = self.self_weight_ if w0 is None else w0
        if dist.shape[1] == 0:
            return own.astype(np.float64)
        h = s * dist[:, -1:]
        ok = np.isfinite(h[:, 0]) & (h[:, 0] > 0)
        W = np.empty_like(dist)
        W[ok] = np.exp(-0.5 * (dist[ok] / h[ok]) ** 2)
        # A k-th distance of 0 (duplicates) or inf (nothing co-observed): equal weights on the
        # neighbours at a finite distance.
        W[~ok] = np.isfinite(dist[~ok])
        den = w0 + W.sum(1, keepdims=True)
        m, k = W.shape
        # Σₖ Wᵢₖ donors[idxᵢₖ] as a sparse product: no m × k × p gather.
        sparse = csr_matrix((W.ravel(), idx.ravel(), np.arange(0, m * k + 1, k)), shape=(m, len(donors)))
        return (w0 * own + sparse @ donors) / den

    def _layer2_error(self, dist, idx, donors, own, Xq, q_observed, s, w0=None):
        pred = self._layer2(dist, idx, donors, own, s, w0)
        return float(np.mean((pred[q_observed] - Xq[q_observed]) ** 2))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


def _spatial_hollow_mean(Z, shape, sigma):
    """Gaussian-weighted mean of the other pixels of each image (zero padding, normalised)."""
    from scipy.ndimage import gaussian_filter

    imgs = Z.reshape(len(Z), *shape).astype(np.float64)
    sig = (0, sigma, sigma)
    num = gaussian_filter(imgs, sig, mode="constant")
    ones = gaussian_filter(np.ones((1, *shape)), sig, mode="constant")
    delta = np.zeros((1, *shape))
    delta[0, shape[0] // 2, shape[1] // 2] = 1.0
    centre = gaussian_filter(delta, sig, mode="constant")[0, shape[0] // 2, shape[1] // 2]
    out = (num - centre * imgs) / (ones - centre)
    return out.reshape(len(Z), -1)


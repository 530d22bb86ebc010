"""Imputation by a two-layer local mean (the paper's experiment 3).

Layer 1 is a *feature-level* kernel inside each sample: for images, a Gaussian kernel over
the neighbouring pixels of the same image; for tables, a kernel over feature similarity
(features whose standardised columns agree). Layer 2 is a *sample-level* kernel over the
other samples, with distances computed on the coordinates both samples observe. An entry is
the local mean of the observed entries under the sum of the two kernels — numerators and
denominators added, so the sample's own estimate counts by how much of its neighbourhood it
observes — and rounds after the first add the sample's own filled entries. Every weight is
non-negative and normalised: the whole fill is one local mean over the table.
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
# The candidates of n_neighbors="loo".
_LOO_NEIGHBORS = (1, 2, 3, 5, 8, 13, 20)


class LocalMeanImputer(TransformerMixin, BaseEstimator):
    """Fill missing values (NaN) with a two-layer local mean over the observed entries.

    Entry p of sample i is estimated from the *other* observed entries of the table, with
    two kernels whose sums are added (one local mean):

    * the sample's own other entries q (layer 1, weight w₀ = ``self_weight_``): for images
      (``image_shape`` given), a Gaussian over the pixel distance with σ =
      ``feature_bandwidth`` (in pixels); for tables, exp(−δ²ₚq / (2h²)) with δ²ₚq the mean
      squared difference of the standardised columns p and ±q on the rows that observe
      both (``δ² = 2(1 − |correlation|)``; an anti-correlated column votes with its sign
      flipped). The kernel is normalised so that a fully observed neighbourhood weighs 1: a
      pixel deep inside a missing block gets almost nothing from its own image;
    * the same entry p of the k = ``n_neighbors_`` nearest *other* fitted samples j that
      observe it (layer 2), with weights exp(−d²ᵢⱼ/(2(s·dₖ)²)): d is the Euclidean distance on
      the coordinates both samples observe, scaled by p / (number of such coordinates) as
      scikit-learn's ``nan_euclidean_distances``, dₖ the distance to the k-th neighbour and
      s ``bandwidth``.

    So x̂ᵢₚ = (Σⱼ Kᵢⱼ mⱼₚ xⱼₚ + w₀ Σ_q gₚq mᵢq xᵢq) / (Σⱼ Kᵢⱼ mⱼₚ + w₀ Σ_q gₚq mᵢq) with m the
    observed mask (q ≠ p: the kernel is hollow). Each of the ``n_iter − 1`` further rounds
    adds the sample's own *filled* entries under layer 1 with weight w₀·β
    (β = ``imputed_weight_``). Missing entries take the estimate; observed entries never
    change. An entry that no kernel weight reaches takes its column mean.

    ``"loo"`` chooses k, s and σ / h, and w₀ and β are always chosen, on a **hold-out that
    mimics the missing pattern**: at most ``max_loo_samples`` rows (drawn with
    ``random_state``) each hide the observed entries that another of those rows misses (a
    block pattern hides blocks, scattered NaN hide scattered entries), their neighbours
    are found without the hidden entries, and the mean squared error of the fill on the
    hidden entries is minimised one parameter at a time (log grid then golden section, as
    :mod:`localization.adaptive`). Data with no NaN hide nothing: the fill is hollow, so
    predicting every observed entry is then a leave-one-out criterion (the neighbours
    themselves are found with the entry present).

    Parameters
    ----------
    image_shape : tuple of int, optional
        (height, width) of each sample seen as an image (n_features = height × width).
        Without it the data are a table.
    n_neighbors : int or "loo", default="loo"
        Samples in the sample-level local mean; ``"loo"`` chooses k among 1, 2, 3, 5, 8, 13
        and 20 on the hold-out (the neighbours are found once, for the largest): with
        distances this concentrated a Gaussian in d/dₖ cannot weight the few nearest samples
        evenly, a smaller k can.
    bandwidth : float or "loo", default="loo"
        Scale s of the sample-level Gaussian relative to each sample's k-th neighbour distance.
    feature_bandwidth : float or "loo", default="loo"
        Spatial σ in pixels (images) or the feature-kernel h in standard units (tables).
    n_iter : int, default=2
        Rounds of the fill; rounds after the first add the sample's own filled entries.
    max_loo_samples : int, default=1000
        Rows of the hold-out that chooses the bandwidths and weights.
    random_state : int, RandomState or None
        Draws the hold-out rows and whose missing pattern each of them takes.
    progress : bool, default=False
        Show a progress bar.

    Attributes
    ----------
    n_neighbors_ : int
        k, the samples in the sample-level local mean (the hold-out choice for ``"loo"``).
    bandwidth_, feature_bandwidth_ : float
        The bandwidths used (the hold-out choices for ``"loo"``).
    self_weight_ : float
        w₀, the weight of the sample's own entries (layer 1) against its neighbours' (1 with
        a single fitted sample).
    imputed_weight_ : float
        β, the relative weight of the sample's own filled entries in rounds after the first
        (0 with ``n_iter=1``).
    cv_results_ : dict
        The search records (see :mod:`localization.adaptive`) keyed by "n_neighbors",
        "bandwidth", "feature_bandwidth" (for ``"loo"``), "self_weight" and "imputed_weight" (for
        ``n_iter > 1``).
    statistics_ : ndarray of shape (n_features,)
        Column means of the observed values (the fill where no kernel weight reaches an
        entry; 0 for a column with none).

    Notes
    -----
    A column with no observed value in the fitted data is filled, with a warning, from the
    neighbouring pixels for images; for tables it is 0 (there is nothing to learn it from).
    The sample-level neighbours cost
    O(n_queries · n_fitted · n_features) in one tiled, multithreaded pass of the core (a
    matrix product screens the pairs, direct differences rank the candidates; no
    n_queries × n_fitted matrix; the packed fitted rows take 3 · n · n_features floats) and
    O(n · k) output; they are found once per
    ``fit`` (for the hold-out rows) and once per ``transform`` and reused by every round
    and every value tried; the rest is O(n · (k + window) · p) per round.

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
        "n_neighbors": [COUNT, StrOptions({"loo"})],
        "bandwidth": [POSITIVE, StrOptions({"loo"})],
        "feature_bandwidth": [POSITIVE, StrOptions({"loo"})],
        "n_iter": [COUNT],
        "max_loo_samples": [COUNT],
        "random_state": ["random_state"],
        "progress": ["boolean"],
    }

    def __init__(
        self, image_shape: tuple[int, ...] | None = None, n_neighbors: int | str = "loo",
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
        """Learn the column statistics, the feature kernel and the weights and bandwidths."""
        X = self._validate(X, reset=True)
        self._check_params(X.shape[1])
        observed = ~np.isnan(X)
        if not observed.any():
            raise LocalizationError("X has no observed value (every entry is NaN); there is nothing to impute from", "X")
        counts = observed.sum(0)
        with np.errstate(invalid="ignore"):
            stats = np.where(counts > 0, np.nansum(X, 0, dtype=np.float64) / np.maximum(counts, 1), 0.0)
        if (counts == 0).any():
            warnings.warn(f"{int((counts == 0).sum())} column(s) have no observed value; they are filled from "
                          "neighbouring pixels for images and with 0 for tables", LocalizationWarning, stacklevel=2)
        self.statistics_ = stats
        self.X_fit_ = X
        self._mask_fit = observed
        if self.image_shape is None:
            self._fit_feature_kernel(X, observed)
        n = len(X)
        if self.bandwidth == "loo" and n < 2:
            raise LocalizationError("bandwidth='loo' needs at least 2 samples, got 1 sample", "bandwidth")
        self.cv_results_ = {}
        self.n_neighbors_ = _LOO_NEIGHBORS[-1] if self.n_neighbors == "loo" else self.n_neighbors
        self.bandwidth_ = 1.0 if self.bandwidth == "loo" else float(self.bandwidth)
        # Starting values while the others are searched: one pixel; half a standard unit.
        start_h = 1.0 if self.image_shape is not None else 0.5
        self.feature_bandwidth_ = start_h if self.feature_bandwidth == "loo" else float(self.feature_bandwidth)
        self.self_weight_, self.imputed_weight_ = 1.0, 0.0
        hold = self._holdout(X, observed, check_random_state(self.random_state))
        if hold is None:  # nothing observed in the sampled rows: keep the starting values
            return self
        if n > 1 and self.n_neighbors == "loo":
            # Before s: the scale h = s·dₖ follows k. The hold-out holds the largest k's neighbours.
            grid = [k for k in _LOO_NEIGHBORS if k <= hold.idx.shape[1]]
            self.n_neighbors_ = int(self._choose("n_neighbors", "loo", grid, lambda k: hold.error(self, n_neighbors=int(k)),
                                                 refine=False))
        if n > 1:
            self.bandwidth_ = self._choose("bandwidth", self.bandwidth, np.geomspace(0.1, 10, 12),
                                           lambda s: hold.error(self, bandwidth=s))
        self.feature_bandwidth_ = self._choose("feature_bandwidth", self.feature_bandwidth, self._feature_grid(),
                                               lambda h: hold.error(self, feature_bandwidth=h))
        if n > 1:
            # The own sample's kernel against the other samples' (a neighbour at the k-th
            # distance scale has kernel value exp(−1/(2s²))); always chosen by the hold-out.
            self.self_weight_ = self._choose("self_weight", "loo", np.geomspace(0.01, 100, 9),
                                             lambda w: hold.error(self, self_weight=w))
        if self.n_iter > 1:
            self.imputed_weight_ = self._choose("imputed_weight", "loo", np.geomspace(0.01, 10, 7),
                                                lambda b: hold.error(self, imputed_weight=b))
        return self

    def _holdout(self, X, observed, rng):
        """Hide observed entries of at most ``max_loo_samples`` rows in the pattern of the
        missing ones: row i loses the entries that another sampled row misses (so a block
        pattern hides blocks, scattered NaN hide scattered entries). Data with no missing
        value hide nothing: the fill is hollow (an entry never sees its own value), so
        predicting every observed entry is then leave-one-out (but for the neighbour search,
        which sees the entry)."""
        n = len(X)
        rows = np.sort(rng.choice(n, size=min(n, self.max_loo_samples), replace=False))
        seen = observed[rows]
        hidden = seen & ~observed[rng.permutation(rows)]
        if hidden.any():
            seen = seen & ~hidden
        else:
            hidden = seen
        if not hidden.any():
            return None
        Q = np.where(seen, X[rows], np.nan).astype(X.dtype)
        return _Holdout(X[rows], seen, hidden, *self._neighbours(Q, rows))

    def _choose(self, name, value, grid, objective, refine=True):
        if value != "loo":
            return float(value)
        # To 1 % is plenty for imputation; each evaluation is a fill of the hold-out rows.
        best, results = search(objective, check_grid(grid), tol=0.01, warn_edge=False, refine=refine)
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
        dist, idx = self._neighbours(X, np.arange(len(X)) if same else None)
        with Progress(self.progress, "LocalMeanImputer", total=self.n_iter) as bar:
            sample = self._sample_sums(dist, idx, self.bandwidth_, self._donors())
            own = self._feature_sums(np.where(observed, X, 0.0), observed, self.feature_bandwidth_)
            filled = self._fill(observed, sample, own, on_round=bar.update)
        out[~observed] = filled[~observed].astype(X.dtype)
        return out

    # -- the fill: one local mean over the observed entries ------------------------------------

    def _fill(self, seen, sample, own, feature_bandwidth=None, self_weight=None, imputed_weight=None,
              on_round=None):
        """The estimate of every entry of some rows (observed where ``seen``) from the other
        observed entries: its neighbours' at the same coordinate (``sample``, the sums of
        :meth:`_sample_sums`) and the row's own other entries (``own``, of
        :meth:`_feature_sums`) with weight w₀ — one local mean, numerators and denominators
        added. Each round after the first adds the row's own filled entries with weight w₀·β.
        Keyword arguments override the fitted values (the hold-out search)."""
        h = self.feature_bandwidth_ if feature_bandwidth is None else feature_bandwidth
        w0 = self.self_weight_ if self_weight is None else self_weight
        beta = self.imputed_weight_ if imputed_weight is None else imputed_weight
        num, den = sample[0] + w0 * own[0], sample[1] + w0 * own[1]
        est = self._ratio(num, den)
        # With β = 0 (the search of the other weights) later rounds would repeat the first.
        for _ in range(1, self.n_iter if beta > 0 else 1):
            if on_round is not None:
                on_round(1)
            filled_num, filled_den = self._feature_sums(np.where(seen, 0.0, est), ~seen, h)
            est = self._ratio(num + w0 * beta * filled_num, den + w0 * beta * filled_den)
        if on_round is not None:
            on_round(self.n_iter if beta == 0 else 1)
        return est

    def _ratio(self, num, den):
        """num / den, and the column mean where no kernel weight reaches an entry."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 0, num / den, self.statistics_.astype(num.dtype))

    def _donors(self):
        """The fitted values (0 where missing) and mask: what neighbours give. The fill runs
        in the data's float type (float32 halves the memory traffic of 10⁴ images)."""
        fit_obs = self._mask_fit
        return np.where(fit_obs, self.X_fit_, 0), fit_obs.astype(self.X_fit_.dtype)

    def _sample_sums(self, dist, idx, s, donors):
        """Σⱼ Kᵢⱼ mⱼₚ xⱼₚ and Σⱼ Kᵢⱼ mⱼₚ over each row's neighbours j (m the fitted mask): the
        sample kernel, Gaussian with h = s × (k-th distance), as two sparse products (no
        n_rows × k × p gather)."""
        m, k = dist.shape
        if k == 0:
            return np.zeros_like(donors[0], shape=(m, donors[0].shape[1])), np.zeros_like(donors[1], shape=(m, donors[1].shape[1]))
        h = s * dist[:, -1:]
        ok = np.isfinite(h[:, 0]) & (h[:, 0] > 0)
        W = np.empty_like(dist)
        W[ok] = np.exp(-0.5 * (dist[ok] / h[ok]) ** 2)
        # A k-th distance of 0 (duplicates) or inf (nothing co-observed): equal weights on the
        # neighbours at a finite distance.
        W[~ok] = np.isfinite(dist[~ok])
        K = csr_matrix((W.ravel().astype(donors[0].dtype), idx.ravel(), np.arange(0, m * k + 1, k)),
                       shape=(m, len(donors[0])))
        return K @ donors[0], K @ donors[1]

    # -- the feature kernel: within a sample -------------------------------------------------

    def _fit_feature_kernel(self, X, observed):
        """Squared distances δ²ⱼₖ = 2(1 − |ρⱼₖ|) between standardised columns on co-observed
        rows, and the signs of the correlations ρⱼₖ: an anti-correlated column votes with
        its sign flipped (column k's value estimates column j as meanⱼ + stdⱼ·sign(ρⱼₖ)·zₖ)."""
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

    def _feature_grid(self):
        if self.image_shape is not None:
            return np.geomspace(0.2, max(self.image_shape) / 2, 12)
        return np.geomspace(0.05, 3.0, 12)

    def _feature_sums(self, V, mask, h):
        """Σₖ gⱼₖ mᵢₖ vᵢₖ→ⱼ and Σₖ gⱼₖ mᵢₖ over each row's *other* entries k (hollow) under the
        feature kernel g (spatial for images), normalised so that a row observing every
        entry has weight 1: a row's own estimate of its entries, weighted by how much of its
        neighbourhood it observes. V holds the values (0 where ``mask`` is False)."""
        mask = mask.astype(V.dtype)
        if self.image_shape is not None:
            full = _spatial_hollow_sum(np.ones((1, mask.shape[1]), dtype=V.dtype), self.image_shape, h)
            return (_spatial_hollow_sum(V, self.image_shape, h) / full,
                    _spatial_hollow_sum(mask, self.image_shape, h) / full)
        g = np.exp(-self._feature_d2 / (2 * h * h))
        full = g.sum(1)
        full[full == 0] = 1.0  # a feature like no other gets nothing from the others
        mean, std = self.statistics_, self._feature_std
        den = mask @ g.T
        Z = mask * (V - mean) / std
        num = mean * den + std * (Z @ (g * self._feature_sign).T)
        return num / full, den / full

    def _neighbours(self, Q, self_rows):
        """The ``n_neighbors_`` nearest fitted samples of each query row on co-observed coordinates
        (sorted distances, indices); ``self_rows[i]`` is query i's own fitted row (excluded).
        One tiled pass of the core (no n_queries × n_fitted matrix), exact to direct
        differences, the GIL released."""
        X = self.X_fit_
        k = min(self.n_neighbors_, len(X) - (self_rows is not None))
        if k == 0:
            return np.empty((len(Q), 0)), np.empty((len(Q), 0), dtype=np.int64)
        exclude = None if self_rows is None else np.ascontiguousarray(self_rows, dtype=np.int64)
        progress, close = progress_bar(self.progress, "neighbours", unit="row")
        try:
            dist, idx = _core.masked_knn(np.ascontiguousarray(Q, dtype=X.dtype), X, k, exclude, progress=progress)
        finally:
            close()
        return dist.astype(np.float64), idx

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


class _Holdout:
    """Rows with some observed entries hidden, their neighbours found without them, and the
    error of the fill on the hidden entries; the sums of the last sample and feature
    bandwidths are kept (a search varies one at a time)."""

    def __init__(self, X, seen, hidden, dist, idx):
        self.X, self.seen, self.hidden, self.dist, self.idx = X, seen, hidden, dist, idx
        self._sample = self._own = (None, None)
        self._donors = None

    def error(self, imp, bandwidth=None, feature_bandwidth=None, self_weight=None, imputed_weight=None, n_neighbors=None):
        s = imp.bandwidth_ if bandwidth is None else bandwidth
        h = imp.feature_bandwidth_ if feature_bandwidth is None else feature_bandwidth
        # The first k of the neighbours found (sorted by distance, as a k-NN search for k gives).
        k = imp.n_neighbors_ if n_neighbors is None else n_neighbors
        if self._sample[0] != (s, k):
            if self._donors is None:
                self._donors = imp._donors()
            self._sample = ((s, k), imp._sample_sums(self.dist[:, :k], self.idx[:, :k], s, self._donors))
        if self._own[0] != h:
            self._own = (h, imp._feature_sums(np.where(self.seen, self.X, 0.0), self.seen, h))
        est = imp._fill(self.seen, self._sample[1], self._own[1], h, self_weight, imputed_weight)
        return float(np.mean((est[self.hidden] - self.X[self.hidden]) ** 2, dtype=np.float64))


def _spatial_hollow_sum(Z, shape, sigma):
    """Σ over the *other* pixels q of each image of G_σ(p − q)·Z_q (Gaussian, zero padding)."""
    from scipy.ndimage import gaussian_filter

    imgs = Z.reshape(len(Z), *shape)
    num = gaussian_filter(imgs, (0, sigma, sigma), mode="constant")
    delta = np.zeros(shape)
    delta[shape[0] // 2, shape[1] // 2] = 1.0
    centre = float(gaussian_filter(delta, sigma, mode="constant")[shape[0] // 2, shape[1] // 2])
    return (num - centre * imgs).reshape(len(Z), -1)

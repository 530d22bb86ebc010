"""The local-mean engine from Python: ``local_mean``, ``kernel_sum``, ``kernel_matrix``.

Every method of the library reduces to

    m(x*) = Σᵢ K(x*, xᵢ) wᵢ vᵢ / Σᵢ K(x*, xᵢ) wᵢ,

computed by one fused, tiled, multithreaded native primitive that never materialises the
m×n kernel matrix, keeps exponential kernels stable for tiny bandwidths (the limit is the
nearest neighbour, not 0/0) and gives bit-identical results for any ``n_jobs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, overload

import numpy as np
from scipy.spatial.distance import cdist

from . import _binned, _core
from ._progress import Progress
from ._sums import LocalSums, rescale
from ._validation import (
    LocalizationError,
    StrOptions,
    as_float_array,
    check_bandwidths,
    check_bool,
    check_number,
    check_positive_int,
    check_query,
    check_sample_weight,
    check_values,
    warn_zero_weight,
)
from .kernels import (
    SIGNED_ZERO,
    Balloon,
    Kernel,
    KernelCombination,
    SamplePoint,
    as_kernel,
    check_adaptive,
    rule_of_thumb,
)

if TYPE_CHECKING:
    from ._typing import ArrayLike, BandwidthLike, FloatArray, KernelLike

_ALGORITHMS = ("auto", "brute", "kd_tree", "expansion", "binned")
#: The `_parameter_constraints` entry of an estimator's engine `algorithm`.
ALGORITHM = [StrOptions(set(_ALGORITHMS))]


def check_algorithm(algorithm: str) -> None:
    if algorithm not in _ALGORITHMS:
        raise LocalizationError(f"`algorithm` must be one of {_ALGORITHMS}, got {algorithm!r}", "algorithm")


#: Prepared references a kept BoundKernel holds at most (one per (values, weights) pair).
_MAX_REFERENCES = 4


class BoundKernel:
    """A kernel resolved against reference data X (bandwidth rules applied).

    This is the one place where bandwidth rules, per-feature scaling, adaptive bandwidths
    and the Python-callable slow path are turned into calls of the native engine.

    A bound kernel that is kept (a fitted estimator's, or one reused across the iterations of
    a method) calls :meth:`prepare`: then every ``sums(..., prepared=True)`` call reuses one
    native ``_core.Reference`` per (values, sample_weight) pair, which holds what the engine
    builds from the samples alone (tile layout, kd-tree, neighbour index) — the results are
    bit-identical, and a call costs what its query-sample pairs cost. The arrays passed with
    ``prepared=True`` must not be modified afterwards (fitted state never is).
    """

    def __init__(self, kernel: Kernel, X, sample_weight=None, allow_signed=False, consumer="this estimator"):
        self.kernel = kernel
        self.allow_signed = allow_signed
        self.consumer = consumer
        self.X = X
        self.n, self.d = X.shape
        self.callable = callable(kernel.name) and not isinstance(kernel.name, str)
        self.name = None if self.callable else kernel.name
        self.feature_scale = None  # per-feature h (divide coordinates by it)
        self.h = 1.0
        self.balloon = None
        self.sample_h = None
        bw = kernel.bandwidth
        if self.name == "knn":
            self.k = check_positive_int(kernel.n_neighbors, "n_neighbors")
            if self.k > self.n:
                raise LocalizationError(f"`n_neighbors`={self.k} exceeds the {self.n} samples", "n_neighbors")
        elif self.name == "identity":
            pass
        elif self.name == "dot":
            check_number(kernel.temperature, "temperature")
        elif isinstance(bw, str):
            h = rule_of_thumb(X, bw, sample_weight)
            if np.ndim(h):
                self.feature_scale = h
            else:
                self.h = h
        elif isinstance(bw, (Balloon, SamplePoint)):
            self.adaptive_k = check_adaptive(bw, self.n - isinstance(bw, SamplePoint))
        elif np.ndim(bw) == 1:
            self.feature_scale = check_bandwidths(bw, "bandwidth", self.d)
        else:
            self.h = check_number(bw, "bandwidth")
        self.Xs = self._scale(X)
        # The native kernel argument, checked once here (callable and identity kernels are
        # computed in Python and have none).
        self.spec = None
        if not (self.callable or self.name == "identity"):
            extra = {}
            if self.name == "knn":
                extra = dict(n_neighbors=self.k, knn_profile=kernel.knn_profile)
            elif self.name == "dot":
                extra = dict(temperature=float(kernel.temperature))
            self.spec = _core.KernelSpec(self.name, self.h, **extra)
        self._references = None
        self._index = None
        self._kept = {}
        if isinstance(bw, SamplePoint) and self.name not in ("knn", "dot", "identity"):
            dist, _ = _core.NeighborIndex(self.Xs).knn(self.Xs, self.adaptive_k + 1)
            h = bw.scale * dist[:, -1].astype(np.float64)
            if np.any(h <= 0):
                raise LocalizationError("SamplePoint bandwidth is zero at duplicated points; increase n_neighbors", "bandwidth")
            self.sample_h = h.astype(X.dtype)

    def prepare(self):
        """Keep native references and the neighbour index across calls (see the class doc)."""
        if self._references is None:
            self._references = []
        return self

    def __getstate__(self):
        # The native references rebuild on use: a pickle holds the arrays only.
        return dict(self.__dict__, _references=None if self._references is None else [], _index=None, _kept={})

    def kept(self, name, build):
        """``build()``, kept under ``name`` once prepared: arrays derived from the samples alone
        that later calls pass back (so that they meet the same prepared reference)."""
        if self._references is None:
            return build()
        if name not in self._kept:
            self._kept = dict(self._kept, **{name: build()})
        return self._kept[name]

    def neighbor_index(self):
        """The kd-tree / brute neighbour index over the scaled samples (kept once prepared)."""
        if self._index is not None:
            return self._index
        index = _core.NeighborIndex(self.Xs)
        if self._references is not None:
            self._index = index
        return index

    def reference(self, values=None, sample_weight=None):
        """The prepared ``_core.Reference`` of (values, sample_weight), built on first use;
        None unless :meth:`prepare` was called."""
        if self._references is None:
            return None
        for v, w, ref in self._references:
            if v is values and w is sample_weight:
                return ref
        ref = _core.Reference(self.Xs, values, sample_weight, self.sample_h)
        # A list replaced whole (never mutated) keeps concurrent callers consistent.
        self._references = self._references[-(_MAX_REFERENCES - 1):] + [(values, sample_weight, ref)]
        return ref

    def _scale(self, A):
        if self.feature_scale is None:
            return A
        return np.ascontiguousarray(A / self.feature_scale.astype(A.dtype))

    @property
    def log_bandwidth_volume(self):
        """Σ_j log h_j for the fixed part of the bandwidth (density normalisation)."""
        if self.feature_scale is not None:
            return float(np.sum(np.log(self.feature_scale)))
        return self.d * np.log(self.h)

    def query_bandwidth(self, Qs):
        """Per-query h of a Balloon rule (None otherwise)."""
        bw = self.kernel.bandwidth
        if not isinstance(bw, Balloon) or self.name in ("knn", "dot", "identity"):
            return None
        dist, _ = self.neighbor_index().knn(Qs, self.adaptive_k)
        h = bw.scale * dist[:, -1].astype(np.float64)
        if np.any(h <= 0):
            raise LocalizationError("Balloon bandwidth is zero at a query that coincides with its k nearest samples; increase n_neighbors", "bandwidth")
        return h.astype(Qs.dtype)

    def kernel_spec(self, Qs, sample_bandwidth=True):
        """The native kernel argument (``_core.KernelSpec``) for the scaled queries Qs: with the
        per-query bandwidths of a Balloon rule, or the per-sample ones of a SamplePoint rule
        (``sample_bandwidth=False`` when a prepared reference holds them)."""
        qh = self.query_bandwidth(Qs)
        if qh is not None:
            return self.spec.with_query_bandwidth(qh)
        if sample_bandwidth and self.sample_h is not None:
            return self.spec.with_sample_bandwidth(self.sample_h)
        return self.spec

    def sums(self, Q, values=None, sample_weight=None, *, degree=None, exclude_self=False, algorithm="auto", n_jobs=None,
             grid_size=None, progress=None, prepared=False, values_per_call=False, series_tolerance=None):
        """Native local sums for validated queries, as :class:`~localization.LocalSums`.

        ``progress(done, total)`` is called with the queries done (the binned path: its steps).
        ``series_tolerance``: the error the Gaussian expansions (series or grid) may leave per query,
        relative to Σ|w|K (and to max|v| times that for values), for callers that certify
        their answer against it (None: the default, 1e-14); the other paths ignore it.
        ``prepared=True``: through the kept reference of (values, sample_weight) if
        :meth:`prepare` was called (same results, no per-call work on the samples). With
        ``values_per_call`` the values are new at every call (the iterations of a method): the
        kept reference of ``sample_weight`` alone serves, and only the values are laid out
        for the call."""
        check_algorithm(algorithm)
        Qs = self._scale(Q)
        if algorithm == "binned":
            b = self.binned(Q, values, sample_weight, degree=degree, exclude_self=exclude_self, grid_size=grid_size,
                            n_jobs=n_jobs, local_bound=False, progress=progress)
            num = np.zeros((len(Q), 0), dtype=Q.dtype) if b.num is None else b.num.astype(Q.dtype)
            return LocalSums(num, b.den.astype(Q.dtype), np.zeros(len(Q), dtype=Q.dtype))
        if self.callable or self.name == "identity":
            if degree is not None:
                raise LocalizationError("local polynomial moments need a built-in radial or knn kernel", "kernel")
            sums = _callable_sums if self.callable else _identity_sums
            return LocalSums(*sums(self, Qs, values, sample_weight, exclude_self))
        ref = self.reference(None if values_per_call else values, sample_weight) if prepared else None
        if ref is not None:
            return LocalSums.from_engine(_core.local_sums(Qs, ref, values if values_per_call else None,
                                                          kernel=self.kernel_spec(Qs, sample_bandwidth=False), degree=degree,
                                                          exclude_self=exclude_self, algorithm=algorithm,
                                                          n_jobs=n_jobs, progress=progress))
        return LocalSums.from_engine(_core.local_sums(
            Qs, self.Xs, values, sample_weight, kernel=self.kernel_spec(Qs), degree=degree, exclude_self=exclude_self,
            algorithm=algorithm, n_jobs=n_jobs, progress=progress, series_tolerance=series_tolerance,
        ))

    def binned(self, Q, values=None, sample_weight=None, *, degree=None, exclude_self=False, grid_size=None, n_jobs=None,
               local_bound=True, progress=None):
        """Binned sums with their error bounds (:class:`~localization._binned.BinnedSums`)."""
        Qs = self._scale(Q)
        _binned.select(self, Q, algorithm="binned", grid_size=grid_size, atol=None, rtol=None, degree=degree)
        return _binned.binned_sums(self, Qs, values, sample_weight, exclude_self=exclude_self, grid_size=grid_size,
                                   local_bound=local_bound, n_jobs=n_jobs, progress=progress)

    def matrix(self, Q, n_jobs=None):
        Qs = self._scale(Q)
        if self.callable:
            return _callable_matrix(self, Qs, self.Xs)
        if self.name == "identity":
            I = np.zeros((len(Qs), self.n), dtype=Qs.dtype)
            _, ind, offsets = self.neighbor_index().radius(Qs, 0.0, n_jobs=n_jobs)
            I[np.repeat(np.arange(len(Qs)), np.diff(offsets)), ind] = 1
            return I
        return _core.kernel_matrix(Qs, self.Xs, kernel=self.kernel_spec(Qs), n_jobs=n_jobs)


def _callable_matrix(bk, Qs, Xs):
    K = np.asarray(bk.kernel.name(cdist(Qs, Xs) / bk.h), dtype=np.float64)
    if K.shape != (Qs.shape[0], Xs.shape[0]) or not np.all(np.isfinite(K)):
        raise LocalizationError("a callable kernel profile must map an array of u >= 0 to finite values of the same shape", "kernel")
    if not bk.allow_signed and np.any(K < 0):
        raise LocalizationError(f"{bk.consumer} needs a non-negative kernel, but the callable profile returned negative values "
                                "(signed kernels are accepted by local_mean, kernel_sum, kernel_matrix and LocalMeanRegressor)", "kernel")
    return K.astype(Qs.dtype)


def _identity_sums(bk, Qs, values, sample_weight, exclude_self):
    """The identity kernel 1[x* = xᵢ]: sums over the samples equal to each query (a radius-0
    search), O(m + matches)."""
    m = len(Qs)
    _, ind, offsets = bk.neighbor_index().radius(Qs, 0.0)
    row = np.repeat(np.arange(m), np.diff(offsets))
    if exclude_self:
        keep = ind != row
        ind, row = ind[keep], row[keep]
    w = np.ones(len(ind)) if sample_weight is None else sample_weight[ind].astype(np.float64)
    den = np.bincount(row, weights=w, minlength=m)
    p = 0 if values is None else values.shape[1]
    num = np.zeros((m, p))
    for c in range(p):
        num[:, c] = np.bincount(row, weights=w * values[ind, c], minlength=m)
    dt = Qs.dtype
    return num.astype(dt), den.astype(dt), np.zeros(m, dtype=dt)


def _callable_sums(bk, Qs, values, sample_weight, exclude_self):
    """The slow path for a Python profile: NumPy in chunks of at most ~4M pairs."""
    n = bk.n
    w = np.ones(n) if sample_weight is None else sample_weight.astype(np.float64)
    V = None if values is None else values.astype(np.float64)
    m = Qs.shape[0]
    num = np.zeros((m, 0 if V is None else V.shape[1]))
    den = np.zeros(m)
    den_abs = np.zeros(m)
    step = max(1, (1 << 22) // n)
    for a in range(0, m, step):
        K = _callable_matrix(bk, Qs[a : a + step], bk.Xs).astype(np.float64) * w
        if exclude_self:
            rows = np.arange(a, min(a + step, m))
            K[rows - a, rows] = 0.0
        den[a : a + step] = K.sum(axis=1)
        den_abs[a : a + step] = np.abs(K).sum(axis=1)
        if V is not None:
            num[a : a + step] = K @ V
    dt = Qs.dtype
    # A signed profile's total weight that cancels to rounding is zero (see BoundCombination).
    den[np.abs(den) <= SIGNED_ZERO * np.finfo(dt).eps * den_abs] = 0.0
    return num.astype(dt), den.astype(dt), np.zeros(m, dtype=dt)


class BoundCombination:
    """A :class:`KernelCombination` resolved against X: one BoundKernel per term.

    ``sums`` has the contract of :meth:`BoundKernel.sums` (true sums = num·exp(log_scale)):
    every term is one engine pass, and the terms are added after rescaling to the common
    log-scale L = max_l log_scale_l, so nothing overflows or underflows that the terms alone
    would not. A signed total weight indistinguishable from zero — ``|Σ K w| ≤ 64·ε·Σ |K| w`` — is
    returned as exactly 0, so callers treat it as "no weight" (NaN and a warning).
    """

    def __init__(self, combo: KernelCombination, X, sample_weight=None, allow_signed=False, consumer="this estimator"):
        self.kernel = combo
        self.X = X
        self.n, self.d = X.shape
        self.terms = [BoundKernel(k, X, sample_weight, allow_signed, consumer) for k in combo.kernels]
        self.coefficients = np.asarray(combo.coefficients)
        self.callable = False
        self.name = None

    def prepare(self):
        for t in self.terms:
            t.prepare()
        return self

    def sums(self, Q, values=None, sample_weight=None, *, degree=None, exclude_self=False, algorithm="auto", n_jobs=None,
             progress=None, prepared=False):
        if degree is not None:
            raise LocalizationError("local polynomial moments need a single kernel, not a KernelCombination", "kernel")
        # (A progress bar follows each term's pass in turn.)
        parts = [t.sums(Q, values, sample_weight, exclude_self=exclude_self, algorithm=algorithm, n_jobs=n_jobs,
                        progress=progress, prepared=prepared)
                 for t in self.terms]
        dt = Q.dtype
        m = len(Q)
        p = 0 if values is None else values.shape[1]
        num, den, den_abs = np.zeros((m, p)), np.zeros(m), np.zeros(m)
        if self.kernel.normalized:
            # Σ c_l K̃_l: each term contributes c_l·(its local mean) and c_l to the weight.
            log_scale = np.zeros(m)
            defined = np.ones(m, dtype=bool)
            for c, part in zip(self.coefficients, parts):
                n_l, d_l = part.num, part.den.astype(np.float64)
                defined &= d_l > 0
                with np.errstate(invalid="ignore", divide="ignore"):
                    num += c * n_l.astype(np.float64) / d_l[:, None]
                den += c
                den_abs += abs(c)
            num[~defined] = 0.0
            den[~defined] = 0.0
        else:
            log_scale = np.max([part.log_scale.astype(np.float64) for part in parts], axis=0)
            for c, part in zip(self.coefficients, parts):
                n_l, d_l = part.num, part.den
                f = c * np.exp(part.log_scale.astype(np.float64) - log_scale)
                num += f[:, None] * n_l.astype(np.float64)
                den += f * d_l.astype(np.float64)
                den_abs += np.abs(f) * d_l.astype(np.float64)
        den[np.abs(den) <= SIGNED_ZERO * np.finfo(dt).eps * den_abs] = 0.0
        return LocalSums(num.astype(dt), den.astype(dt), log_scale.astype(dt))

    def matrix(self, Q, n_jobs=None):
        out = np.zeros((len(Q), self.n))
        for c, t in zip(self.coefficients, self.terms):
            K = t.matrix(Q, n_jobs=n_jobs).astype(np.float64)
            if self.kernel.normalized:
                with np.errstate(invalid="ignore", divide="ignore"):
                    K = K / K.sum(axis=1, keepdims=True)
            out += c * K
        return out.astype(Q.dtype)


def bind_kernel(kernel, X, sample_weight=None, allow_signed=False, consumer="this estimator"):
    """Resolve a Kernel or KernelCombination against X; signed kernels only if allowed."""
    if isinstance(kernel, KernelCombination):
        if kernel.signed and not allow_signed:
            raise LocalizationError(f"{consumer} needs a non-negative kernel; {kernel!r} is signed (signed kernels are "
                                    "accepted by local_mean, kernel_sum, kernel_matrix and LocalMeanRegressor)", "kernel")
        return BoundCombination(kernel, X, sample_weight, allow_signed, consumer)
    return BoundKernel(kernel, X, sample_weight, allow_signed, consumer)


def bind(kernel, bandwidth, X, n_neighbors=None, sample_weight=None, allow_signed=False, consumer="this estimator"):
    return bind_kernel(as_kernel(kernel, bandwidth, n_neighbors), X, sample_weight, allow_signed, consumer)


def _ready_args(kernel, bandwidth, n_neighbors, exclude_self, algorithm, n_jobs, grid_size, atol, rtol):
    """Whether the arguments ``local_mean`` and ``kernel_sum`` share are of the kinds their native
    ready path takes (a profile name, one float bandwidth, a bool, an algorithm name, None or
    an int of threads) with none of the options only the checked path has."""
    return (kernel.__class__ is str and isinstance(bandwidth, float) and algorithm.__class__ is str and grid_size is None
            and atol is None and rtol is None and n_neighbors is None and exclude_self.__class__ is bool
            and (n_jobs is None or n_jobs.__class__ is int))


def ratio(num, den, warn=True, what="local mean"):
    """num / den row-wise, NaN (plus a warning) where the total weight is zero.

    Weights may be negative under a signed kernel; zero (or NaN) is what is undefined.
    """
    zero = ~(den != 0)
    if not zero.any():
        return num / den[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        out = num / den[:, None]
    out[zero] = np.nan
    if warn:
        warn_zero_weight(zero, what)
    return out


@overload
def local_mean(
    X_query: ArrayLike, X: ArrayLike, values: ArrayLike | None = None, *, kernel: KernelLike = "gaussian",
    bandwidth: BandwidthLike = 1.0, n_neighbors: int | None = None, sample_weight: ArrayLike | None = None,
    exclude_self: bool = False, return_weight: Literal[False] = False, algorithm: str = "auto", n_jobs: int | None = None,
    grid_size: int | Sequence[int] | None = None, atol: float | None = None, rtol: float | None = None,
    return_error_bound: Literal[False] = False,
    progress: bool = False,
) -> FloatArray: ...
@overload
def local_mean(
    X_query: ArrayLike, X: ArrayLike, values: ArrayLike | None = None, *, kernel: KernelLike = "gaussian",
    bandwidth: BandwidthLike = 1.0, n_neighbors: int | None = None, sample_weight: ArrayLike | None = None,
    exclude_self: bool = False, return_weight: bool = False, algorithm: str = "auto", n_jobs: int | None = None,
    grid_size: int | Sequence[int] | None = None, atol: float | None = None, rtol: float | None = None,
    return_error_bound: bool = False,
    progress: bool = False,
) -> FloatArray | tuple[FloatArray, ...]: ...
def local_mean(
    X_query: ArrayLike, X: ArrayLike, values: ArrayLike | None = None, *, kernel: KernelLike = "gaussian",
    bandwidth: BandwidthLike = 1.0, n_neighbors: int | None = None, sample_weight: ArrayLike | None = None,
    exclude_self: bool = False, return_weight: bool = False, algorithm: str = "auto", n_jobs: int | None = None,
    grid_size: int | Sequence[int] | None = None, atol: float | None = None, rtol: float | None = None,
    return_error_bound: bool = False,
    progress: bool = False,
) -> FloatArray | tuple[FloatArray, ...]:
    """The local mean m(x*) = Σ K(x*, xᵢ) wᵢ vᵢ / Σ K(x*, xᵢ) wᵢ for every query row.

    Parameters
    ----------
    X_query : array of shape (m, d)
        Query points x*.
    X : array of shape (n, d)
        Reference (sample) points.
    values : array of shape (n,) or (n, p), optional
        The values vᵢ to average; default ``X`` itself (the self-local mean, i.e. one
        MeanShift step).
    kernel : str, callable, Kernel or KernelCombination, default="gaussian"
        Any profile of :mod:`localization.kernels`, ``"knn"``, ``"dot"``, ``"identity"``, a
        callable, or a (possibly signed) combination such as a difference of Gaussians.
        Under a signed kernel the mean is NaN (with a warning) where the signed total weight
        is zero to rounding, ``|Σ K w| ≤ 64·ε·Σ |K| w``.
    bandwidth : float, array, rule name, Balloon or SamplePoint, default=1.0
    n_neighbors : int, optional
        k for ``kernel="knn"``.
    sample_weight : array of shape (n,), optional
    exclude_self : bool, default=False
        Leave-one-out ("hollow" kernel): query i ignores sample i (needs X_query is X).
    return_weight : bool, default=False
        Also return the total weight Σ K wᵢ per query.
    algorithm : {"auto", "brute", "kd_tree", "expansion", "binned"}, default="auto"
        How the sums are computed; the exact ones agree to rounding. ``"brute"`` visits every
        pair in tiles; ``"kd_tree"`` finds the samples inside a compact kernel's support
        through a kd-tree; ``"expansion"`` sums the Gaussian with one scalar bandwidth in 1–3
        features without the pairs: a two-sided Taylor series between clusters of queries and
        samples (one feature), or Chebyshev interpolation on a grid of panels (two or three
        features, design moments included), within 1e-14 of Σ|w|K per query; far cheaper than
        the pairs when the bandwidth is wide relative to the spacing of the points, and used
        when asked for even where it is not (a 3-D fit at a tenth of the data's width from a
        few thousand points is faster by pairs). ``"auto"`` picks by a cost model. A choice that does not
        apply (e.g. ``"expansion"`` with a compact kernel) falls back to ``"brute"``.
        ``"binned"`` is **approximate**: linear binning onto a regular grid and one FFT
        convolution (1–3 features, a radial profile with a fixed bandwidth), with a
        guaranteed error bound (``return_error_bound``; see the guide, "Binned sums").
        ``"auto"`` picks it only when ``atol`` or ``rtol`` is given, the cost model favours
        it and its bound meets the tolerance at every query.
    n_jobs : int, optional
        Threads (None: ``LOCALIZATION_NUM_THREADS`` or all cores). Results do not depend on it.
    grid_size : int or sequence of int, optional
        Grid nodes per feature for ``"binned"`` (at least 2). Default: 32 per bandwidth over
        the range of samples and queries, at most 65536, 1024 and 64 per feature in 1, 2
        and 3 features.
    atol, rtol : float, optional
        Tolerances that let ``algorithm="auto"`` use the binned path: it is used only where
        its bound guarantees ``|mean − exact| ≤ atol + rtol·|exact|`` at every query (0 or None:
        exact sums).
    return_error_bound : bool, default=False
        Also return a bound on ``|mean − exact mean|`` per query and column (0 for the exact
        algorithms, whose error is rounding only; inf where the binned total weight does
        not exceed its own bound). It is returned last.
    progress : bool, default=False
        Show a progress bar on stderr when the call lasts more than 0.2 s: queries done, or
        the steps of ``"binned"`` (not for callable or identity kernels; see the "Progress
        bars" section of the guide).

    Returns
    -------
    mean : ndarray of shape (m,) or (m, p)
        NaN (with a :class:`LocalizationWarning`) where the total weight is zero.
    weight : ndarray of shape (m,)
        Only with ``return_weight=True``.
    error_bound : ndarray like ``mean``
        Only with ``return_error_bound=True``.

    Examples
    --------
    >>> import numpy as np
    >>> from localization import local_mean
    >>> X = np.array([[0.0], [1.0], [2.0]])
    >>> local_mean([[1.0]], X, [0.0, 1.0, 5.0], kernel="epanechnikov", bandwidth=1.5).round(4).tolist()
    [1.7895]
    """
    if (not return_weight and not return_error_bound and not progress
            and _ready_args(kernel, bandwidth, n_neighbors, exclude_self, algorithm, n_jobs, grid_size, atol, rtol)):
        # Ready input (exact ndarrays, finite, C-contiguous, one float dtype) in one native call;
        # None means "not ready": the checked path below converts it or names the problem.
        ready = _core.ready_local_mean(X_query, X, values, sample_weight, kernel, bandwidth, exclude_self, algorithm, n_jobs)
        if ready is not None:
            if ready[1]:
                warn_zero_weight(ready[1])
            return ready[0]
    X = as_float_array(X, "X")
    Q = check_query(X_query, X)
    exclude_self = check_bool(exclude_self, "exclude_self")
    if values is None:
        V, one_d = X, False
    else:
        V, one_d = check_values(values, X.shape[0], X.dtype)
    w = check_sample_weight(sample_weight, X.shape[0], X.dtype)
    bk = bind(kernel, bandwidth, X, n_neighbors, w, allow_signed=True, consumer="local_mean")
    with Progress(progress, "local_mean", unit="query") as bar:
        binned = _binned.local_mean_or_none(bk, Q, V, w, algorithm=algorithm, grid_size=grid_size, atol=atol, rtol=rtol,
                                            exclude_self=exclude_self, n_jobs=n_jobs, local_bound=return_error_bound,
                                            progress=bar.callback)
        if binned is None:
            sums = bk.sums(Q, V, w, exclude_self=exclude_self, algorithm=algorithm, n_jobs=n_jobs, progress=bar.callback)
    if binned is not None:
        mean, weight, bound = binned
    else:
        mean = sums.mean()
        # (Only what is returned is computed: this path is the whole cost of small calls.)
        bound = np.zeros(sums.num.shape) if return_error_bound else None
        weight = sums.total() if return_weight else None
    if one_d:
        mean = mean[:, 0]
        bound = None if bound is None else bound[:, 0]
    out = (mean,) + ((weight,) if return_weight else ()) + ((bound,) if return_error_bound else ())
    return out if len(out) > 1 else mean


@overload
def kernel_sum(
    X_query: ArrayLike, X: ArrayLike, values: ArrayLike | None = None, *, kernel: KernelLike = "gaussian",
    bandwidth: BandwidthLike = 1.0, n_neighbors: int | None = None, sample_weight: ArrayLike | None = None,
    log: bool = False, exclude_self: bool = False, algorithm: str = "auto", n_jobs: int | None = None,
    grid_size: int | Sequence[int] | None = None, atol: float | None = None, rtol: float | None = None,
    return_error_bound: Literal[False] = False,
    progress: bool = False,
) -> FloatArray: ...
@overload
def kernel_sum(
    X_query: ArrayLike, X: ArrayLike, values: ArrayLike | None = None, *, kernel: KernelLike = "gaussian",
    bandwidth: BandwidthLike = 1.0, n_neighbors: int | None = None, sample_weight: ArrayLike | None = None,
    log: bool = False, exclude_self: bool = False, algorithm: str = "auto", n_jobs: int | None = None,
    grid_size: int | Sequence[int] | None = None, atol: float | None = None, rtol: float | None = None,
    return_error_bound: Literal[True] = False,
    progress: bool = False,
) -> tuple[FloatArray, FloatArray]: ...
def kernel_sum(
    X_query: ArrayLike, X: ArrayLike, values: ArrayLike | None = None, *, kernel: KernelLike = "gaussian",
    bandwidth: BandwidthLike = 1.0, n_neighbors: int | None = None, sample_weight: ArrayLike | None = None,
    log: bool = False, exclude_self: bool = False, algorithm: str = "auto", n_jobs: int | None = None,
    grid_size: int | Sequence[int] | None = None, atol: float | None = None, rtol: float | None = None,
    return_error_bound: bool = False,
    progress: bool = False,
) -> FloatArray | tuple[FloatArray, FloatArray]:
    """The kernel sum Σᵢ K(x*, xᵢ) wᵢ for every query (unnormalised kernel density), or with
    ``values`` the weighted sum Σᵢ K(x*, xᵢ) wᵢ vᵢ (the numerator of the local mean).

    With ``log=True`` the logarithm is returned, computed stably: it stays finite where
    the sum itself underflows (tiny bandwidths), and is ``-inf`` where it is truly zero
    (non-negative kernels without ``values`` only). Signed kernels (a
    :class:`~localization.kernels.KernelCombination` with a negative coefficient, e.g.
    :func:`~localization.kernels.laplacian`) give signed sums.

    ``algorithm``, ``grid_size``, ``atol``, ``rtol`` are those of :func:`local_mean`; the
    tolerance applies to the returned sums (or, with ``log=True``, to their logarithm).
    With ``return_error_bound=True`` a bound on ``|returned − exact|`` is returned too (0 for the
    exact algorithms; for ``"binned"`` uniform over the queries plus the final rounding).
    ``progress=True`` shows a progress bar as :func:`local_mean` does.

    Returns
    -------
    ndarray of shape (m,), or (m,) / (m, p) like ``values``
    error_bound : ndarray of the same shape, only with ``return_error_bound=True``

    Examples
    --------
    >>> import numpy as np
    >>> from localization import kernel_sum
    >>> X = np.linspace(0.0, 1.0, 1001)[:, None]
    >>> s, err = kernel_sum([[0.5]], X, bandwidth=0.1, algorithm="binned", return_error_bound=True)
    >>> exact = kernel_sum([[0.5]], X, bandwidth=0.1)
    >>> bool(abs(s[0] - exact[0]) <= err[0] < 1e-3 * exact[0])
    True
    >>> kernel_sum([[0.0]], [[0.0], [3.0]], kernel="tophat", bandwidth=1.0).tolist()
    [1.0]
    >>> kernel_sum([[0.0]], [[0.0], [0.5]], [2.0, 4.0], kernel="tophat", bandwidth=1.0).tolist()
    [6.0]
    """
    if (not log and not return_error_bound and not progress
            and _ready_args(kernel, bandwidth, n_neighbors, exclude_self, algorithm, n_jobs, grid_size, atol, rtol)):
        # As in local_mean: ready input in one native call, None when it is not ready.
        ready = _core.ready_kernel_sum(X_query, X, values, sample_weight, kernel, bandwidth, exclude_self, algorithm, n_jobs)
        if ready is not None:
            total, log_scale = ready
            if log_scale is None:
                return total
            return rescale(total, log_scale)
    X = as_float_array(X, "X")
    Q = check_query(X_query, X)
    exclude_self = check_bool(exclude_self, "exclude_self")
    V, one_d = (None, True) if values is None else check_values(values, X.shape[0], X.dtype)
    w = check_sample_weight(sample_weight, X.shape[0], X.dtype)
    bk = bind(kernel, bandwidth, X, n_neighbors, w, allow_signed=not log, consumer="kernel_sum(log=True)")
    if log and V is not None:
        raise LocalizationError("`log=True` is for the kernel sum itself; drop `values` (weighted sums can be negative)", "values")
    if _binned.select(bk, Q, algorithm=algorithm, grid_size=grid_size, atol=atol, rtol=rtol):
        with Progress(progress, "kernel_sum", unit="step") as bar:
            b = bk.binned(Q, V, w, exclude_self=exclude_self, grid_size=grid_size, n_jobs=n_jobs,
                          local_bound=return_error_bound or atol is not None or rtol is not None, progress=bar.callback)
        total, bound = (b.den, b.den_bound) if V is None else (b.num, b.num_bound)
        bound = bound + b.rounding(total, np.float64)
        if log:
            with np.errstate(divide="ignore"):
                total, bound = np.log(total), _binned.log_bound(total, bound)
        if algorithm == "binned" or _binned.tolerance_met(total, bound, atol, rtol):
            if V is not None and one_d:
                total, bound = total[:, 0], bound[:, 0]
            return (total, bound) if return_error_bound else total
    with Progress(progress, "kernel_sum", unit="query") as bar:
        sums = bk.sums(Q, V, w, exclude_self=exclude_self, algorithm=algorithm, n_jobs=n_jobs, progress=bar.callback)
    out = sums.log_total() if log else sums.total(values=V is not None)
    if V is not None and one_d:
        out = out[:, 0]
    return (out, np.zeros(out.shape)) if return_error_bound else out


def kernel_matrix(
    X_query: ArrayLike, X: ArrayLike, *, kernel: KernelLike = "gaussian", bandwidth: BandwidthLike = 1.0,
    n_neighbors: int | None = None, n_jobs: int | None = None,
) -> FloatArray:
    """The dense kernel matrix K(x*_i, x_j), shape (m, n). For small problems and inspection.

    Dense by nature: m × n × itemsize bytes (8 in float64), allocated before any work — a
    request that does not fit raises ``MemoryError`` at once. ``local_mean`` and
    ``kernel_sum`` compute the same sums without it.

    Examples
    --------
    >>> from localization.engine import kernel_matrix
    >>> kernel_matrix([[0.0]], [[0.0], [1.0]], kernel="linear", bandwidth=2.0).tolist()
    [[1.0, 0.5]]
    """
    X = as_float_array(X, "X")
    Q = check_query(X_query, X)
    return bind(kernel, bandwidth, X, n_neighbors, allow_signed=True, consumer="kernel_matrix").matrix(Q, n_jobs=n_jobs)

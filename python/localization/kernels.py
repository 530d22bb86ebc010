"""Localization kernels: radial profiles, bandwidth rules and kernel objects.

A localization kernel is a profile ``k(u)`` of the scaled distance ``u = ‖x − x'‖ / h``
plus a bandwidth rule. Everywhere in the library a kernel can be given as a string
(``kernel="epanechnikov", bandwidth=0.5``) or as a :class:`Kernel` object, which carries
its own bandwidth.

Bandwidths
----------
``float``
    One h for every feature.
``array of shape (n_features,)``
    A diagonal metric: feature j is divided by ``h[j]``.
``"scott"``, ``"silverman"``
    scikit-learn's rules of thumb, the same number for the same spelling:
    h = n^(−1/(d+4)) (Scott) or (n (d+2) / 4)^(−1/(d+4)) (Silverman), with n the number of
    samples and d of features. They use n and d only: the data are assumed standardised.
``"scott_scaled"``, ``"silverman_scaled"``
    The same factors times each feature's own (weighted) standard deviation, with the
    effective sample size (Σw)²/Σw² for n: a per-feature bandwidth that follows the
    scale of the data.
:class:`Balloon` ``(n_neighbors)``
    Adaptive, per query: h(x*) = distance from x* to its k-th nearest sample.
:class:`SamplePoint` ``(n_neighbors)``
    Adaptive, per sample: h_i = distance from x_i to its k-th nearest other sample.

Special kernels: ``"knn"`` (K = 1 on the ``n_neighbors`` nearest samples), ``"dot"``
(K = exp(q·x / temperature), the query–key kernel of attention) and ``"identity"``
(K(x, x') = 1 if x = x', else 0). Any Python callable ``k(u)`` (vectorised over a NumPy array
of u ≥ 0) is accepted on a documented slow path: it is evaluated in NumPy in bounded chunks,
never with an m×n matrix at once.

Signed kernels
--------------
Kernels combine linearly, ``Kernel(...) - 0.5 * Kernel(...)``, into a
:class:`KernelCombination` Σ_l c_l K_l; :func:`normalized` gives the row-normalised K̃ = D⁻¹K
and :func:`laplacian` the normalised Laplacian L̃ = I − K̃. Each term costs one pass of the
engine; the terms are combined exactly through the engine's log-scales. A combination with
a negative coefficient is *signed*: its local mean Σ K w v / Σ K w is defined where the signed
total weight is not zero, and NaN (with a warning) where ``|Σ K w| ≤ 64·ε·Σ |K| w`` (ε the float
type's epsilon), which covers the rows of a Laplacian (they sum to exactly 0). Signed kernels
are accepted by ``local_mean``, ``kernel_sum`` (without ``log``), ``kernel_matrix`` and
``LocalMeanRegressor``; every other estimator needs a non-negative kernel and says so.
"""

from __future__ import annotations

import numbers
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _core
from ._validation import POSITIVE, LocalizationError, StrOptions, check_number, check_positive_int, LocalizationTypeError

if TYPE_CHECKING:
    from ._typing import ArrayLike, BandwidthLike, FloatArray, KernelLike, NDArray


PROFILES = (
    "gaussian",
    "exponential",
    "cauchy",
    "tophat",
    "epanechnikov",
    "biweight",
    "triweight",
    "linear",
    "tricube",
    "cosine",
)
ALIASES = {
    "rbf": "gaussian",
    "normal": "gaussian",
    "laplace": "exponential",
    "laplacian": "exponential",
    "flat": "tophat",
    "uniform": "tophat",
    "quartic": "biweight",
    "triangular": "linear",
}
SPECIAL = ("knn", "dot", "identity")
# The normalising constants are sums over the dimension; no data set has more features.
_MAX_DIM = 2**31 - 1


def canonical_name(name: str) -> str:
    """The canonical profile name of a kernel name or alias (``"flat"`` → ``"tophat"``)."""
    if not isinstance(name, str):
        raise LocalizationTypeError(f"`kernel` must be a string, a Kernel or a callable, got {type(name).__name__}", "kernel")
    low = name.lower()
    if low in SPECIAL:
        return low
    return _core.profile_info(low)[0]


def profile(name: str, u: ArrayLike) -> NDArray[np.float64]:
    """Evaluate the profile ``k(u)`` of a named kernel at distances ``u`` (in units of h).

    Examples
    --------
    >>> from localization.kernels import profile
    >>> profile("epanechnikov", [0.0, 0.5, 1.0]).tolist()
    [1.0, 0.75, 0.0]
    """
    u = np.abs(np.asarray(u, dtype=np.float64))
    if np.isnan(u).any():
        raise LocalizationError("`u` contains NaN; a profile is evaluated at distances u >= 0", "u")
    return _core.profile_values(canonical_name(name), u.ravel()).reshape(u.shape)


def support(name: str) -> float:
    """Support radius of a profile in units of h (``inf`` for unbounded kernels)."""
    s = _core.profile_info(canonical_name(name))[1]
    return np.inf if s is None else s


def log_normalization(name: str, d: int) -> float:
    """log of ∫_{ℝ^d} k(‖x‖) dx: a KDE divides by ``h^d`` times this integral.

    Examples
    --------
    >>> import numpy as np
    >>> from localization.kernels import log_normalization
    >>> bool(np.isclose(log_normalization("gaussian", 1), 0.5 * np.log(2 * np.pi)))
    True
    """
    d = check_positive_int(d, "d")
    if d > _MAX_DIM:
        raise LocalizationError(f"`d` must be a number of features up to {_MAX_DIM}, got {d}", "d")
    return _core.log_integral(canonical_name(name), d)


@dataclass(frozen=True)
class Balloon:
    """Per-query adaptive bandwidth: h(x*) = ``scale`` × distance to the k-th nearest sample."""

    n_neighbors: int = 10
    scale: float = 1.0


@dataclass(frozen=True)
class SamplePoint:
    """Per-sample adaptive bandwidth: h_i = ``scale`` × distance from x_i to its k-th nearest other sample."""

    n_neighbors: int = 10
    scale: float = 1.0


RULES = ("scott", "silverman", "scott_scaled", "silverman_scaled")

def bandwidth_constraint(rules: Collection[str] = ()) -> list[Any]:
    """The `_parameter_constraints` entry of a bandwidth that may also be per-feature, a rule of
    thumb, an adaptive rule or one of the estimator's own named ``rules`` (a leave-one-out
    search); values inside an array are checked when the kernel is bound."""
    return [POSITIVE, "array-like", StrOptions(set(RULES) | set(rules)), Balloon, SamplePoint]


BANDWIDTH = bandwidth_constraint()


def rule_of_thumb(X: ArrayLike, rule: str = "scott", sample_weight: ArrayLike | None = None) -> float | FloatArray:
    """The bandwidth a named rule of thumb gives for the data X.

    ``"scott"``: h = n^{-1/(d+4)}; ``"silverman"``: h = (n (d+2) / 4)^{-1/(d+4)}: scalars
    that depend on n (rows of X) and d only, exactly as scikit-learn's ``KernelDensity``.
    ``"scott_scaled"`` and ``"silverman_scaled"``: the same factors with n the effective
    sample size (Σw)²/Σw², times σ_j, the (weighted) standard deviation of feature j — one
    bandwidth per feature.

    Examples
    --------
    >>> import numpy as np
    >>> from localization.kernels import rule_of_thumb
    >>> round(rule_of_thumb(np.zeros((64, 2)), "scott"), 6)   # 64^(-1/6)
    0.5
    >>> rule_of_thumb(np.array([[0.0, 0.0], [2.0, 20.0]]), "scott_scaled").round(3).tolist()
    [0.891, 8.909]
    """
    if rule not in RULES:
        raise LocalizationError(f"unknown bandwidth rule {rule!r}; use one of {', '.join(map(repr, RULES))}", "bandwidth")
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    scaled = rule.endswith("_scaled")
    if scaled:
        w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        n = w.sum() ** 2 / np.sum(w**2)
    if rule.startswith("scott"):
        factor = n ** (-1.0 / (d + 4))
    else:
        factor = (n * (d + 2) / 4.0) ** (-1.0 / (d + 4))
    if not scaled:
        return float(factor)
    mu = np.average(X, axis=0, weights=w)
    sigma = np.sqrt(np.average((X - mu) ** 2, axis=0, weights=w))
    if np.any(sigma <= 0):
        j = int(np.flatnonzero(sigma <= 0)[0])
        raise LocalizationError(f"bandwidth={rule!r} is zero because feature {j} is constant; pass a number instead", "bandwidth")
    return sigma * factor


class Kernel:
    """A localization kernel: a profile plus a bandwidth rule.

    Parameters
    ----------
    name : str or callable, default="gaussian"
        A profile name or alias (see ``localization.kernels.PROFILES``), ``"knn"``, ``"dot"``, or a
        vectorised callable ``k(u)`` (slow path).
    bandwidth : float, array of shape (n_features,), rule name, Balloon or SamplePoint
        The bandwidth h (ignored by ``"knn"`` and ``"dot"``); rule names: ``"scott"``,
        ``"silverman"`` (scikit-learn's), ``"scott_scaled"``, ``"silverman_scaled"``.
    n_neighbors : int, optional
        k of the ``"knn"`` kernel.
    temperature : float, default=1.0
        τ of the ``"dot"`` kernel exp(q·x/τ).
    knn_profile : str, optional
        For ``"knn"``: weight the k neighbours by this profile with h = k-th distance.

    Examples
    --------
    >>> import numpy as np
    >>> from localization.kernels import Kernel
    >>> K = Kernel("epanechnikov", bandwidth=2.0)
    >>> K(np.array([[0.0]]), np.array([[0.0], [1.0], [3.0]])).round(3).tolist()
    [[1.0, 0.75, 0.0]]
    """

    def __init__(
        self, name: str = "gaussian", bandwidth: BandwidthLike = 1.0, *, n_neighbors: int | None = None,
        temperature: float = 1.0, knn_profile: str | None = None,
    ) -> None:
        self.name = name
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.temperature = temperature
        self.knn_profile = knn_profile

    def __repr__(self):
        nm = self.name if isinstance(self.name, str) else getattr(self.name, "__name__", "callable")
        return f"Kernel({nm!r}, bandwidth={self.bandwidth!r})"

    def __eq__(self, other):
        return isinstance(other, Kernel) and vars(self) == vars(other)

    def __hash__(self):
        return hash((str(self.name), str(self.bandwidth)))

    def __call__(self, X, Y=None):
        """The dense kernel matrix K(X_i, Y_j) (for small inputs; the engine never builds it)."""
        from .engine import kernel_matrix

        return kernel_matrix(X, X if Y is None else Y, kernel=self)

    # Arithmetic builds a KernelCombination (a linear combination, possibly signed).
    def __add__(self, other):
        return KernelCombination([self], [1.0]) + other

    __radd__ = __add__

    def __sub__(self, other):
        return KernelCombination([self], [1.0]) - other

    def __rsub__(self, other):
        return other - KernelCombination([self], [1.0])

    def __mul__(self, c):
        return KernelCombination([self], [1.0]) * c

    __rmul__ = __mul__

    def __neg__(self):
        return KernelCombination([self], [-1.0])


# The relative size below which a signed total weight counts as zero (see the module doc).
SIGNED_ZERO = 64


class KernelCombination:
    """A linear combination Σ_l c_l K_l of kernels with real coefficients (signed kernels).

    Usually built by arithmetic on :class:`Kernel` objects. With ``normalized=True`` every term
    is row-normalised first, Σ_l c_l K̃_l with K̃_l = D_l⁻¹K_l (each row of K̃_l sums to one):
    the form of :func:`laplacian` and of simplex-weighted multi-kernels.

    Each term is one pass of the engine; the combined sums are exact (the terms are rescaled
    to a common log-scale before they are added). A negative coefficient makes the kernel
    *signed* (see the module documentation for where signed kernels are accepted and the
    zero-denominator rule).

    Parameters
    ----------
    kernels : list of Kernel
        The terms; each keeps its own bandwidth.
    coefficients : list of float
        c_l, finite.
    normalized : bool, default=False

    Examples
    --------
    >>> import numpy as np
    >>> from localization import Kernel, local_mean
    >>> dog = 2 * Kernel("gaussian", 1.0) - Kernel("gaussian", 2.0)   # a difference of Gaussians
    >>> dog.signed
    True
    >>> X = np.array([[0.0], [1.0], [2.0]])
    >>> local_mean([[1.0]], X, [0.0, 1.0, 5.0], kernel=dog).round(4).tolist()
    [1.597]
    """

    def __init__(self, kernels: Sequence[Kernel], coefficients: Sequence[float], normalized: bool = False) -> None:
        kernels, coefficients = list(kernels), [float(c) for c in coefficients]
        if not kernels or len(kernels) != len(coefficients):
            raise LocalizationError("a KernelCombination needs one coefficient per kernel, and at least one kernel", "coefficients")
        for k in kernels:
            if not isinstance(k, Kernel):
                raise LocalizationTypeError(f"the terms of a KernelCombination are Kernel objects, got {type(k).__name__}", "kernels")
        if not all(np.isfinite(coefficients)):
            raise LocalizationError(f"the coefficients of a KernelCombination must be finite, got {coefficients}", "coefficients")
        self.kernels = kernels
        self.coefficients = coefficients
        self.normalized = bool(normalized)

    @property
    def signed(self) -> bool:
        """Whether a coefficient is negative (the kernel can take negative values)."""
        return any(c < 0 for c in self.coefficients)

    def __repr__(self):
        terms = " + ".join(f"{c:g}·{k!r}" for c, k in zip(self.coefficients, self.kernels))
        return f"KernelCombination({terms}{', normalized' if self.normalized else ''})"

    def __eq__(self, other):
        return isinstance(other, KernelCombination) and vars(self) == vars(other)

    def __hash__(self):
        return hash((tuple(self.coefficients), self.normalized, len(self.kernels)))

    def __call__(self, X, Y=None):
        """The dense matrix Σ_l c_l K_l(X_i, Y_j) (for small inputs)."""
        from .engine import kernel_matrix

        return kernel_matrix(X, X if Y is None else Y, kernel=self)

    def _terms(self, other):
        if isinstance(other, Kernel):
            other = KernelCombination([other], [1.0], self.normalized)
        if not isinstance(other, KernelCombination):
            return None
        if other.normalized != self.normalized:
            raise LocalizationTypeError("cannot add a row-normalised combination to an unnormalised one", "other")
        return other

    def __add__(self, other):
        other = self._terms(other)
        if other is None:
            return NotImplemented
        return KernelCombination(self.kernels + other.kernels, self.coefficients + other.coefficients, self.normalized)

    __radd__ = __add__

    def __sub__(self, other):
        other = self._terms(other)
        if other is None:
            return NotImplemented
        return self + (-other)

    def __rsub__(self, other):
        other = self._terms(other)
        if other is None:
            return NotImplemented
        return other - self

    def __mul__(self, c):
        if isinstance(c, (bool, np.bool_)) or not isinstance(c, numbers.Real):
            return NotImplemented
        return KernelCombination(self.kernels, [c * v for v in self.coefficients], self.normalized)

    __rmul__ = __mul__

    def __neg__(self):
        return self * -1.0


def normalized(kernel: KernelLike) -> KernelCombination:
    """The row-normalised kernel K̃(x*, xᵢ) = K(x*, xᵢ) / Σⱼ K(x*, xⱼ): rows sum to one.

    Examples
    --------
    >>> import numpy as np
    >>> from localization.kernels import Kernel, normalized
    >>> normalized(Kernel("tophat", 1.5))([[0.0]], [[0.0], [1.0], [3.0]]).tolist()
    [[0.5, 0.5, 0.0]]
    """
    if isinstance(kernel, KernelCombination):
        if kernel.normalized:
            return kernel
        raise LocalizationTypeError("normalize the terms one by one: normalized(K1) - normalized(K2)", "kernel")
    return KernelCombination([as_kernel(kernel)], [1.0], normalized=True)


def laplacian(kernel: KernelLike) -> KernelCombination:
    """The normalised graph Laplacian L̃ = I − K̃ (rows sum to zero, L̃·1 = 0: identity 13 of docs/identities.md).

    ``I`` is the ``"identity"`` kernel (1 where the query equals a sample). Applied to values
    on the sample it gives vᵢ − m(xᵢ), the negated mean-shift of v: ``kernel_sum(X, X,
    values=v, kernel=laplacian(K))``. Its local mean is undefined everywhere (the rows sum to
    zero), so ``local_mean`` returns NaN with a warning.

    Examples
    --------
    >>> import numpy as np
    >>> from localization import kernel_sum
    >>> from localization.kernels import Kernel, laplacian
    >>> X = np.array([[0.0], [1.0], [5.0]])
    >>> kernel_sum(X, X, values=[1.0, 3.0, 0.0], kernel=laplacian(Kernel("tophat", 2.0))).tolist()
    [-1.0, 1.0, 0.0]
    """
    K = normalized(kernel)
    return KernelCombination([Kernel("identity")], [1.0], normalized=True) - K


#: The `_parameter_constraints` entry of a `kernel` that :func:`as_kernel` turns into a Kernel.
KERNEL = [str, Kernel, KernelCombination, callable]


def as_kernel(kernel: KernelLike, bandwidth: BandwidthLike = 1.0, n_neighbors: int | None = None) -> Kernel | KernelCombination:
    """Turn an estimator's ``kernel``/``bandwidth``/``n_neighbors`` into a :class:`Kernel`.

    A :class:`Kernel` or :class:`KernelCombination` keeps its own bandwidths; strings and
    callables take the estimator's ``bandwidth`` and ``n_neighbors``.
    """
    if isinstance(kernel, (Kernel, KernelCombination)):
        return kernel
    if callable(kernel):
        return Kernel(kernel, bandwidth)
    return Kernel(canonical_name(kernel), bandwidth, n_neighbors=n_neighbors)


def check_adaptive(rule: Balloon | SamplePoint, n_fit: int) -> int:
    k = check_positive_int(rule.n_neighbors, "bandwidth.n_neighbors")
    check_number(rule.scale, "bandwidth.scale")
    if k > n_fit:
        raise LocalizationError(f"`bandwidth.n_neighbors`={k} exceeds the {n_fit} fitted samples", "bandwidth.n_neighbors")
    return k

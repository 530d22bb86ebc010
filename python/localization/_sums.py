"""Mergeable partial sums of the local mean: the object behind sharded and streamed sums.

The engine returns, per query x*, the kernel-weighted sums

    num = Σᵢ K(x*, xᵢ) wᵢ vᵢ,    den = Σᵢ K(x*, xᵢ) wᵢ

stored as ``value · exp(log_scale)`` so that exponential kernels with tiny bandwidths keep
their leading terms instead of underflowing to 0/0. Sums over disjoint parts of the
references combine exactly: rescale both to the larger log-scale and add. That merge is
commutative (bit for bit) and associative up to rounding, so a local mean over references
split into shards is a reduction of per-shard sums; :meth:`LocalSums.reduce` fixes the order
(a balanced tree over the parts in their given order) so the result never depends on the
order in which the parts arrive.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._validation import LocalizationError, LocalizationTypeError

if TYPE_CHECKING:
    from ._typing import ArrayLike, FloatArray


__all__ = ["LocalSums", "tree_reduce"]


def rescale(stored, log_scale):
    """The true sums ``stored · exp(log_scale)`` (one log-scale per query, the first axis), in
    float64: the one place where the engine's scaled sums are turned back into sums."""
    scale = np.exp(np.asarray(log_scale).astype(np.float64, copy=False))
    return stored.astype(np.float64, copy=False) * scale.reshape((-1,) + (1,) * (stored.ndim - 1))


def tree_reduce(items, combine):
    """Combine ``items`` pairwise in a balanced tree, neighbours first, in the given order.

    ``[a, b, c, d, e]`` becomes ``combine(combine(combine(a, b), combine(c, d)), e)``: the
    same pairing for the same number of items, wherever and whenever they are computed.
    """
    items = list(items)
    if not items:
        raise LocalizationError("nothing to reduce: at least one part is needed", "items")
    while len(items) > 1:
        paired = [combine(items[k], items[k + 1]) for k in range(0, len(items) - 1, 2)]
        if len(items) % 2:
            paired.append(items[-1])
        items = paired
    return items[0]


class LocalSums:
    """Kernel-weighted sums at m queries, mergeable across disjoint parts of the references.

    Per query: ``num`` = Σ K w v (shape (m, p)), ``den`` = Σ K w (shape (m,)), both stored
    divided by ``exp(log_scale)``; optionally the local polynomial design moments
    ``moments`` (m, D, D) and ``cross`` (m, D, p) on the same scale. The true sums are
    ``den · exp(log_scale)`` and so on; a query that no reference reaches has ``den == 0``.

    Parameters
    ----------
    num : array of shape (m, p)
    den : array of shape (m,)
    log_scale : array of shape (m,)
    moments : array of shape (m, D, D), optional
    cross : array of shape (m, D, p), optional

    Examples
    --------
    >>> import numpy as np
    >>> from localization import LocalSums
    >>> X, y = np.array([[0.0], [1.0], [2.0], [3.0]]), np.array([0.0, 1.0, 2.0, 3.0])
    >>> q = np.array([[1.5]])
    >>> a = LocalSums.compute(q, X[:2], y[:2], kernel="gaussian", bandwidth=1e-3)
    >>> b = LocalSums.compute(q, X[2:], y[2:], kernel="gaussian", bandwidth=1e-3)
    >>> a.merge(b).mean().tolist()  # exp(-u²/2) underflows, the log-scale keeps it exact
    [[1.5]]
    >>> round(float(a.merge(b).log_total()[0]), 4)  # log 2 − 0.5²/(2·10⁻⁶)
    -124999.3069
    """

    __slots__ = ("num", "den", "log_scale", "moments", "cross")

    def __init__(
        self, num: ArrayLike, den: ArrayLike, log_scale: ArrayLike, moments: ArrayLike | None = None,
        cross: ArrayLike | None = None,
    ) -> None:
        num, den, log_scale = np.asarray(num), np.asarray(den), np.asarray(log_scale)
        if num.ndim != 2 or den.ndim != 1 or log_scale.shape != den.shape or num.shape[0] != den.shape[0]:
            raise LocalizationError(
                "LocalSums needs num of shape (m, p), den and log_scale of shape (m,); got "
                f"{num.shape}, {den.shape}, {log_scale.shape}",
                "num",
            )
        if (moments is None) != (cross is None):
            raise LocalizationError("`moments` and `cross` come together (both or neither)", "moments")
        if moments is not None:
            moments, cross = np.asarray(moments), np.asarray(cross)
            m, p = num.shape
            if moments.ndim != 3 or moments.shape[0] != m or moments.shape[1] != moments.shape[2] or cross.shape != (m, moments.shape[1], p):
                raise LocalizationError(f"moments must be (m, D, D) and cross (m, D, p); got {moments.shape} and {cross.shape}", "moments")
        self.num, self.den, self.log_scale, self.moments, self.cross = num, den, log_scale, moments, cross

    @classmethod
    def from_engine(cls, sums):
        """From the native core's sums (``num``, ``den``, ``log_scale``, ``moments``, ``cross``)."""
        return cls(sums.num, sums.den, sums.log_scale, sums.moments, sums.cross)

    @classmethod
    def compute(cls, X_query, X, values=None, *, kernel="gaussian", bandwidth=1.0, n_neighbors=None, sample_weight=None,
                degree=None, exclude_self=False, algorithm="auto", n_jobs=None):
        """The sums of the queries over the references X (one part of them, when sharded).

        Parameters are those of :func:`localization.local_mean`; ``values=None`` sums the
        kernel weights only (p = 0), ``degree`` adds the local polynomial design moments.
        To merge with other parts the kernel must not depend on the whole sample
        (``"knn"``, adaptive bandwidths or rules of thumb computed on one part differ from
        the whole), and a part's weights may all be zero.
        """
        from ._validation import as_float_array, check_query, check_sample_weight, check_values
        from .engine import bind

        X = as_float_array(X, "X")
        Q = check_query(X_query, X)
        V = None if values is None else check_values(values, X.shape[0], X.dtype)[0]
        w = check_sample_weight(sample_weight, X.shape[0], X.dtype, require_positive=False)
        bk = bind(kernel, bandwidth, X, n_neighbors, w)
        return bk.sums(Q, V, w, degree=degree, exclude_self=exclude_self, algorithm=algorithm, n_jobs=n_jobs)

    @classmethod
    def zeros(cls, m, p=0, dtype=np.float64, basis=None):
        """The sums over no reference at all (the identity of :meth:`merge`)."""
        z = np.zeros(m, dtype=dtype)
        moments = None if basis is None else np.zeros((m, basis, basis), dtype=dtype)
        cross = None if basis is None else np.zeros((m, basis, p), dtype=dtype)
        return cls(np.zeros((m, p), dtype=dtype), z, z.copy(), moments, cross)

    @property
    def n_queries(self) -> int:
        return self.den.shape[0]

    def __repr__(self):
        return f"LocalSums(n_queries={self.n_queries}, n_values={self.num.shape[1]}, dtype={self.num.dtype})"

    def _scale(self):
        """log-scale as float64, −inf where nothing was summed (so it never sets the scale)."""
        return np.where(self.den > 0, self.log_scale.astype(np.float64), -np.inf)

    def merge(self, other: LocalSums) -> LocalSums:
        """The sums over the references of both (disjoint) parts.

        Both sides are rescaled to the larger log-scale per query and added, in float64;
        the result keeps the common dtype. ``a.merge(b)`` equals ``b.merge(a)`` bit for
        bit; grouping changes only rounding.
        """
        if not isinstance(other, LocalSums):
            raise LocalizationTypeError(f"can only merge LocalSums with LocalSums, not {type(other).__name__}", "other")
        if self.num.shape != other.num.shape or (self.moments is None) != (other.moments is None):
            raise LocalizationError(
                f"cannot merge sums of different shapes: {self.num.shape} and {other.num.shape}"
                + ("" if (self.moments is None) == (other.moments is None) else " (one has design moments)"),
                "other",
            )
        if self.moments is not None and self.moments.shape != other.moments.shape:
            raise LocalizationError(f"cannot merge design moments of shapes {self.moments.shape} and {other.moments.shape}", "other")
        la, lb = self._scale(), other._scale()
        top = np.maximum(la, lb)
        top[~np.isfinite(top)] = 0.0
        fa, fb = np.exp(la - top), np.exp(lb - top)
        dtype = np.result_type(self.num.dtype, other.num.dtype)

        def add(a, b):
            shape = (-1,) + (1,) * (a.ndim - 1)
            out = a.astype(np.float64) * fa.reshape(shape) + b.astype(np.float64) * fb.reshape(shape)
            return out.astype(dtype, copy=False)

        moments = cross = None
        if self.moments is not None:
            moments, cross = add(self.moments, other.moments), add(self.cross, other.cross)
        return LocalSums(add(self.num, other.num), add(self.den, other.den), top.astype(dtype), moments, cross)

    @classmethod
    def reduce(cls, parts):
        """Merge the sums of consecutive parts in a fixed balanced tree (see ``tree_reduce``)."""
        return tree_reduce(parts, lambda a, b: a.merge(b))

    def mean(self, warn: bool = True) -> FloatArray:
        """The local means num / den, shape (m, p); NaN (with a warning) where den is 0."""
        from .engine import ratio  # (engine builds LocalSums: imported when first needed)

        return ratio(self.num, self.den, warn=warn)

    def total(self, values: bool = False) -> FloatArray:
        """The true sums, float64 (they may underflow to 0 where the log-scale is very
        negative): Σ K w = den · exp(log_scale), shape (m,); with ``values=True`` Σ K w v =
        num · exp(log_scale), shape (m, p)."""
        return rescale(self.num if values else self.den, self.log_scale)

    def log_total(self) -> FloatArray:
        """log Σ K w, finite where the total itself underflows; −inf where it is zero."""
        with np.errstate(divide="ignore"):
            return np.log(self.den.astype(np.float64)) + self.log_scale.astype(np.float64)

"""Attention as a temporal self-local mean (the paper's §7): functions and estimators.

Self-attention is the local mean of a sequence under a temporal kernel,

    m_t = Σ_s K(x_t, t, x_s, s) v_s / Σ_s K(x_t, t, x_s, s),   K = K_content(x_t, x_s) · K_position(t, s),

with the scaled dot-product content kernel exp(q_t·k_s/√d): then m = softmax(QKᵀ/√d + log K_position) V.
Any radial profile can be the content kernel instead (a Gaussian with a causal window is a causal
kernel smoother). Position kernels multiply: causal 1[s ≤ t], window ``1[|t − s| < w]``, relative
decay ``exp(−λ|t − s|)`` (λ per head, as in ALiBi), hollow 1[s ≠ t], or a boolean mask.

The native engine computes it block by block with an online softmax: memory O(T·d), no T×T matrix,
batch and heads in parallel, bit-identical results for any number of threads. The backward pass
of the dot-product kernel (dQ, dK, dV and the decays' gradients) recomputes the blocks from the
saved log-normalisers.

* :func:`attention`, :func:`attention_backward` — softmax attention over arrays (…, T, d).
* :func:`temporal_local_mean` — any content kernel over one array of sequences.
* :class:`TemporalLocalMean` — multi-head temporal local mean with projections (a transformer
  in scikit-learn's sense).
* :class:`HierarchicalLocalModel` — layers of temporal local means interleaved with
  position-wise maps (residual, layer normalisation, MLP): a Transformer encoder.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, overload

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted

from . import _core
from ._base import keeps_state_on_error
from ._optim import Adam
from ._validation import (COUNT, FINITE, MAX_COUNT, N_JOBS, NON_NEGATIVE, POSITIVE, Integral, Interval, LocalizationError,
                          LocalizationTypeError, StrOptions, check_number, fit_context, warn_zero_weight)
from .engine import bind
from .kernels import Balloon, Kernel, SamplePoint

if TYPE_CHECKING:
    from ._typing import ArrayLike, BandwidthLike, DTypeLike, FloatArray, KernelLike, SeedLike, Self

_FLOATS = (np.float32, np.float64)
#: A window of the functions: an integer >= 1, however large.
_WINDOW = Interval(Integral, 1, None, closed="left")


# --------------------------------------------------------------------------------------------
# input checking


def _sequence_array(A, name, dtype=None, min_ndim=2):
    """A finite, C-contiguous float32/float64 array of shape (…, T, d)."""
    A = A if isinstance(A, np.ndarray) else np.asarray(A)
    if A.dtype == object or A.dtype.kind in "USV":
        raise LocalizationTypeError(f"`{name}` has dtype {A.dtype}; pass a numeric array (float32 or float64)", name)
    if A.dtype.kind == "c":
        raise LocalizationTypeError(f"`{name}` is complex; pass a real array (float32 or float64)", name)
    if A.ndim < min_ndim:
        raise LocalizationError(f"`{name}` must have shape (…, T, d) (at least {min_ndim} axes), got shape {A.shape}", name)
    want = dtype if dtype is not None else (A.dtype if A.dtype in _FLOATS else np.float64)
    A = np.ascontiguousarray(A, dtype=want)
    if A.size and not np.isfinite(A.sum(dtype=np.float64)):
        raise LocalizationError(f"`{name}` contains NaN or infinity", name)
    return A


def _qkv(Q, K, V):
    """Q, K, V checked against each other: same leading axes, same T, Q and K the same width."""
    Q = _sequence_array(Q, "Q")
    K = _sequence_array(K, "K")
    V = _sequence_array(V, "V")
    dtype = np.result_type(Q.dtype, K.dtype, V.dtype)
    Q, K, V = (np.ascontiguousarray(A, dtype=dtype) for A in (Q, K, V))
    lead, (T, d) = Q.shape[:-2], Q.shape[-2:]
    if T == 0:
        raise LocalizationError(f"`Q` has no time steps (T = 0), shape {Q.shape}: a sequence needs at least one step", "Q")
    if d == 0:
        raise LocalizationError(f"`Q` has no features, shape {Q.shape}", "Q")
    for name, A in (("K", K), ("V", V)):
        if A.shape[:-2] != lead:
            raise LocalizationError(f"`{name}` has leading (batch, head) axes {A.shape[:-2]}, but Q has {lead}", name)
        if A.shape[-2] != T:
            raise LocalizationError(f"`{name}` has {A.shape[-2]} time steps, but Q has {T}", name)
    if K.shape[-1] != d:
        raise LocalizationError(f"`K` has {K.shape[-1]} features, but Q has {d}: queries and keys must have the same width", "K")
    return Q, K, V


def _decays(decay):
    """``decay`` as a float64 array (a number: 0-d) of finite values λ ≥ 0, the domain of
    :data:`NON_NEGATIVE` entry by entry; the one check of decays, per sequence or per head."""
    try:
        lam = np.asarray(decay, dtype=np.float64) if not isinstance(decay, np.ndarray) or decay.dtype.kind in "iuf" else None
    except (TypeError, ValueError):
        lam = None
    if lam is None:
        raise LocalizationTypeError(f"`decay` must be a number or an array of numbers, got {decay!r}", "decay")
    if not np.all(np.isfinite(lam)) or np.any(lam < 0):
        raise LocalizationError("`decay` must be finite and non-negative (the position kernel is exp(-decay·|t - s|))", "decay")
    return lam


def _decay(decay, lead):
    """Per-sequence decays λ ≥ 0 broadcast from `decay` over the leading axes (None: no decay)."""
    if decay is None:
        return None, None
    lam = _decays(decay)
    try:
        per_seq = np.broadcast_to(lam, lead)
    except ValueError:
        raise LocalizationError(f"`decay` of shape {lam.shape} does not broadcast against the leading (batch, head) axes {lead}", "decay") from None
    return np.ascontiguousarray(per_seq.reshape(-1)), lam.shape


def _unbroadcast(g, shape):
    """Sum a gradient over the axes along which an array of `shape` was broadcast."""
    g = np.asarray(g, dtype=np.float64)
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for axis, n in enumerate(shape):
        if n == 1 and g.shape[axis] != 1:
            g = g.sum(axis=axis, keepdims=True)
    return g.reshape(shape)


def _mask(mask, lead, T):
    """(allowed slabs × rows × T, slab of each sequence) for a boolean mask broadcast over `lead`."""
    M = np.asarray(mask)
    if M.dtype != np.bool_:
        raise LocalizationTypeError(f"`mask` must be 'causal', None or a boolean array (True where a step may be seen), got dtype {M.dtype}", "mask")
    if M.ndim < 2 or M.shape[-1] != T or M.shape[-2] not in (1, T):
        raise LocalizationError(f"a boolean `mask` must have shape (…, {T}, {T}) or (…, 1, {T}), got {M.shape}", "mask")
    mlead = M.shape[:-2]
    try:
        ok = np.broadcast_shapes(mlead, lead) == tuple(lead)
    except ValueError:
        ok = False
    if not ok:
        raise LocalizationError(f"`mask` with leading axes {mlead} does not broadcast against the leading axes {lead} of Q", "mask")
    n = int(np.prod(mlead, dtype=np.int64))
    slab = np.broadcast_to(np.arange(n, dtype=np.int64).reshape(mlead), lead).reshape(-1)
    return np.ascontiguousarray(M.reshape(n, M.shape[-2], T)), np.ascontiguousarray(slab)


def _window(window):
    if window is None:
        return None
    # A window longer than any sequence is no limit (COUNT without its 64-bit cap, which the
    # native core's counts need: the window is clamped to it instead).
    return min(check_number(window, "window", _WINDOW), MAX_COUNT)


def _position(mask, window, decay, lead, T, exclude_self=False):
    """Keyword arguments of the native calls for the position kernel, and the decay's shape."""
    kw = dict(causal=False, window=_window(window), exclude_self=bool(exclude_self))
    if isinstance(mask, str):
        if mask != "causal":
            raise LocalizationError(f"`mask` must be None, 'causal' or a boolean array, got {mask!r}", "mask")
        kw["causal"] = True
    elif mask is not None:
        kw["mask"], kw["mask_slab"] = _mask(mask, lead, T)
    kw["decay"], decay_shape = _decay(decay, lead)
    return kw, decay_shape


def _scale(scale, d):
    if scale is None:
        return 1.0 / np.sqrt(d)
    return check_number(scale, "scale", FINITE)


def _check_scores(Q, K, scale):
    """Refuse dot-product scores scale·q·k that could overflow the float type: the engine would
    see ±inf and return a wrong answer. A bound by |q·k| ≤ d·max|q|·max|k| (two reductions per
    array, no copy); it refuses only inputs of order 1e18 in float32 (1e153 in float64)."""
    if Q.size and K.size:
        peak = lambda A: max(float(A.max()), -float(A.min()))  # noqa: E731
        if not Q.shape[-1] * peak(Q) * peak(K) * abs(scale) < float(np.finfo(Q.dtype).max):
            raise LocalizationError(
                f"the scores scale·q·k can overflow {Q.dtype} (|Q| up to {peak(Q):.3g}, |K| up to {peak(K):.3g}, "
                f"d = {Q.shape[-1]}, scale = {scale:.3g}): rescale Q or K, or pass float64 arrays", "Q")


def _forward(Q, K, V, content, kw, n_jobs):
    """The native forward pass on (B, T, ·) arrays: (out, lse)."""
    if content["kernel"] == "dot":
        _check_scores(Q, K, content["scale"])
    return _core.temporal_forward(Q, K, V, n_jobs=n_jobs, **content, **kw)


def _nan_where_empty(out, lse, what):
    """Steps of zero total weight (lse = −inf) become NaN, with a warning: a radial kernel's
    local mean is undefined there."""
    empty = np.isneginf(lse.reshape(-1))
    if empty.any():
        out.reshape(-1, out.shape[-1])[empty] = np.nan
        warn_zero_weight(empty, what)
    return out


def _flat(A):
    """(…, T, d) → (B, T, d) without copying."""
    return A.reshape((-1,) + A.shape[-2:])


# --------------------------------------------------------------------------------------------
# functional API


@overload
def attention(Q: ArrayLike, K: ArrayLike, V: ArrayLike, *, mask: str | ArrayLike | None = None, window: int | None = None,
              decay: float | ArrayLike | None = None, scale: float | None = None, return_lse: Literal[False] = False,
              n_jobs: int | None = None) -> FloatArray: ...
@overload
def attention(Q: ArrayLike, K: ArrayLike, V: ArrayLike, *, mask: str | ArrayLike | None = None, window: int | None = None,
              decay: float | ArrayLike | None = None, scale: float | None = None, return_lse: Literal[True],
              n_jobs: int | None = None) -> tuple[FloatArray, FloatArray]: ...
def attention(Q: ArrayLike, K: ArrayLike, V: ArrayLike, *, mask: str | ArrayLike | None = None, window: int | None = None,
              decay: float | ArrayLike | None = None, scale: float | None = None, return_lse: bool = False,
              n_jobs: int | None = None) -> FloatArray | tuple[FloatArray, FloatArray]:
    """Scaled dot-product attention, computed as a temporal local mean: softmax(QKᵀ·scale + log K_pos)V.

    The weights are K(t, s) = exp(scale · q_t·k_s) · K_position(t, s), normalised over s. The
    native engine computes them block by block with an online softmax: memory O(T·d), no
    T×T matrix, batch and heads in parallel, bit-identical results for any ``n_jobs``.

    Parameters
    ----------
    Q, K : array of shape (…, T, d)
        Queries and keys. Leading axes (batch, heads, …) are independent sequences.
    V : array of shape (…, T, p)
        Values.
    mask : None, "causal" or boolean array of shape (…, T, T) or (…, 1, T), default=None
        ``"causal"``: step t sees s ≤ t. A boolean array (True = may be seen) broadcasts
        over the leading axes; a (…, 1, T) mask hides keys (padding). To combine causality
        with padding pass one boolean array, e.g. ``np.tril(np.ones((T, T), bool)) & keep[..., None, :]``.
    window : int, optional
        Only ``|t − s| < window`` is seen (with ``mask="causal"``: 0 ≤ t − s < window).
    decay : float or array, optional
        Relative position kernel ``exp(−decay·|t − s|)`` (ALiBi's linear bias), decay ≥ 0; an
        array broadcasts over the leading axes, e.g. shape (n_heads,) for one slope per head.
    scale : float, optional
        Default 1/√d. Inputs whose scores scale·q·k could overflow the float type (entries of
        Q and K of order 1e18 in float32) raise a ``LocalizationError`` naming ``Q``.
    return_lse : bool, default=False
        Also return the log-normalisers L_t = log Σ_s K(t, s), which
        :func:`attention_backward` takes to skip recomputing the forward pass.
    n_jobs : int, optional
        Threads (None: ``LOCALIZATION_NUM_THREADS`` or all cores). Results do not depend on it.

    Returns
    -------
    out : ndarray of shape (…, T, p)
        A step that sees nothing (possible only through a boolean ``mask``) gets 0 there, not
        NaN (the convention of fused attention kernels: padded rows do not poison gradients),
        and its log-normaliser is −inf.
    lse : ndarray of shape (…, T)
        Only with ``return_lse=True``.

    Examples
    --------
    >>> import numpy as np
    >>> from localization import attention
    >>> rng = np.random.default_rng(0)
    >>> Q, K, V = rng.normal(size=(3, 2, 4, 5, 8))      # batch 2, 4 heads, T = 5, d = 8
    >>> out = attention(Q, K, V, mask="causal", decay=[0.0, 0.1, 0.2, 0.4])
    >>> out.shape
    (2, 4, 5, 8)
    >>> S = Q @ np.swapaxes(K, -1, -2) / np.sqrt(8) + np.where(np.tri(5, dtype=bool), 0, -np.inf)
    >>> W = np.exp(S - S.max(-1, keepdims=True)) * np.exp(-np.array([0.0, 0.1, 0.2, 0.4])[:, None, None]
    ...                                                  * np.abs(np.subtract.outer(range(5), range(5))))
    >>> bool(np.allclose(out, W / W.sum(-1, keepdims=True) @ V))
    True
    """
    Q, K, V = _qkv(Q, K, V)
    lead, T = Q.shape[:-2], Q.shape[-2]
    kw, _ = _position(mask, window, decay, lead, T)
    out, lse = _forward(_flat(Q), _flat(K), _flat(V), dict(kernel="dot", scale=_scale(scale, Q.shape[-1])), kw, n_jobs)
    out = out.reshape(lead + out.shape[-2:])
    return (out, lse.reshape(lead + (T,))) if return_lse else out


class AttentionGradients(NamedTuple):
    """Gradients of a loss through :func:`attention`."""

    dQ: np.ndarray
    dK: np.ndarray
    dV: np.ndarray
    #: ∂loss/∂decay in the shape of the ``decay`` given (None without a decay).
    d_decay: np.ndarray | float | None


def attention_backward(grad_output: ArrayLike, Q: ArrayLike, K: ArrayLike, V: ArrayLike, out: ArrayLike | None = None,
                       lse: ArrayLike | None = None, *, mask: str | ArrayLike | None = None, window: int | None = None,
                       decay: float | ArrayLike | None = None, scale: float | None = None,
                       n_jobs: int | None = None) -> AttentionGradients:
    """The backward pass of :func:`attention`: gradients of a loss with respect to Q, K, V and the decay.

    Given G = ∂loss/∂out, with P the attention weights and D_t = Σ_c G_tc out_tc:
    dV = PᵀG, dS = P ∘ (GVᵀ − D), dQ = scale·dS K, dK = scale·dSᵀ Q and
    ``∂loss/∂λ = −Σ_{t,s} dS_ts |t − s|``. Computed block by block from the saved log-normalisers
    (``lse``): no T×T matrix, memory O(T·d), bit-identical for any ``n_jobs``.

    Parameters
    ----------
    grad_output : array of shape (…, T, p)
        ∂loss/∂out.
    Q, K, V, mask, window, decay, scale, n_jobs
        As given to :func:`attention`.
    out, lse : arrays, optional
        The outputs of ``attention(..., return_lse=True)``; recomputed when omitted.

    Returns
    -------
    AttentionGradients
        ``(dQ, dK, dV, d_decay)``; ``d_decay`` has the shape of ``decay`` (None without one).

    Examples
    --------
    >>> import numpy as np
    >>> from localization import attention, attention_backward
    >>> rng = np.random.default_rng(0)
    >>> Q, K, V = rng.normal(size=(3, 6, 4))
    >>> out, lse = attention(Q, K, V, mask="causal", decay=0.3, return_lse=True)
    >>> g = attention_backward(np.ones_like(out), Q, K, V, out, lse, mask="causal", decay=0.3)
    >>> eps = 1e-6
    >>> fd = (attention(Q, K, V, mask="causal", decay=0.3 + eps).sum()
    ...       - attention(Q, K, V, mask="causal", decay=0.3 - eps).sum()) / (2 * eps)
    >>> bool(np.isclose(g.d_decay, fd))
    True
    """
    Q, K, V = _qkv(Q, K, V)
    lead, T = Q.shape[:-2], Q.shape[-2]
    kw, decay_shape = _position(mask, window, decay, lead, T)
    sc = _scale(scale, Q.shape[-1])
    G = _sequence_array(grad_output, "grad_output", dtype=Q.dtype)
    if G.shape != V.shape:
        raise LocalizationError(f"`grad_output` has shape {G.shape}, but the output of attention has shape {V.shape}", "grad_output")
    if out is None or lse is None:
        o, ls = _forward(_flat(Q), _flat(K), _flat(V), dict(kernel="dot", scale=sc), kw, n_jobs)
    else:
        o = _sequence_array(out, "out", dtype=Q.dtype)
        if o.shape != V.shape:
            raise LocalizationError(f"`out` has shape {o.shape}, but the output of attention has shape {V.shape}", "out")
        ls = np.ascontiguousarray(lse, dtype=Q.dtype)
        if ls.shape != lead + (T,):
            raise LocalizationError(f"`lse` has shape {ls.shape}, expected {lead + (T,)}", "lse")
        if np.any(np.isnan(ls)) or np.any(ls == np.inf):
            raise LocalizationError("`lse` contains NaN or +inf: pass the log-normalisers returned by attention(..., return_lse=True)", "lse")
        o, ls = _flat(o), ls.reshape(-1, T)
    _check_scores(Q, K, sc)
    dq, dk, dv, dl = _core.attention_backward(_flat(Q), _flat(K), _flat(V), o, ls, _flat(G), scale=sc, n_jobs=n_jobs, **kw)
    d_decay = None
    if decay_shape is not None:
        d_decay = _unbroadcast(dl.reshape(lead), decay_shape)
        d_decay = float(d_decay) if d_decay.ndim == 0 else d_decay
    return AttentionGradients(dq.reshape(Q.shape), dk.reshape(K.shape), dv.reshape(V.shape), d_decay)


def _content(kernel, bandwidth, X):
    """(native kernel arguments, X scaled for the content kernel) of a temporal local mean."""
    k = kernel if isinstance(kernel, Kernel) else None
    name = k.name if k is not None else kernel
    if callable(name) and not isinstance(name, str):
        raise LocalizationError("temporal_local_mean needs a built-in profile or 'dot', not a Python callable", "kernel")
    if isinstance(name, str) and name.lower() == "knn":
        raise LocalizationError("the kNN kernel is not a temporal content kernel; use a profile with a `window`", "kernel")
    if isinstance(name, str) and name.lower() == "dot":
        tau = check_number(k.temperature if k is not None else 1.0, "temperature")  # as the engine checks it
        return dict(kernel="dot", scale=1.0 / tau), X
    bw = k.bandwidth if k is not None else bandwidth
    if isinstance(bw, (Balloon, SamplePoint)):
        raise LocalizationError("adaptive bandwidths (Balloon, SamplePoint) are not available for temporal kernels; pass a number", "bandwidth")
    flat = X.reshape(-1, X.shape[-1])
    bk = bind(name, bw, flat)
    Xs = bk._scale(flat).reshape(X.shape)
    return dict(kernel=bk.name, bandwidth=float(bk.h)), np.ascontiguousarray(Xs)


def temporal_local_mean(
    X: ArrayLike, values: ArrayLike | None = None, *, kernel: KernelLike = "gaussian", bandwidth: BandwidthLike = 1.0,
    position: str | ArrayLike | None = None, window: int | None = None, decay: float | ArrayLike | None = None,
    mask: str | ArrayLike | None = None, exclude_self: bool = False, n_jobs: int | None = None,
) -> FloatArray:
    """The temporal self-local mean m_t = Σ_s K(x_t, t, x_s, s) v_s / Σ_s K(x_t, t, x_s, s).

    K = K_content(x_t, x_s) · K_position(t, s): any radial profile of ‖x_t − x_s‖/h (or the
    dot-product kernel exp(x_t·x_s/τ)) times the position kernel. With ``kernel="gaussian"``
    and ``position="causal"``, ``window=w`` this is a causal Gaussian smoother over the last w
    steps; with the dot kernel it is (unprojected) softmax self-attention.

    Parameters
    ----------
    X : array of shape (…, T, d)
        Sequences (leading axes are independent sequences).
    values : array of shape (…, T, p), optional
        The values averaged; default ``X`` (the self-local mean).
    kernel : str or Kernel, default="gaussian"
        A profile name of :mod:`localization.kernels` or ``"dot"``; a :class:`Kernel` carries its
        own bandwidth (or temperature).
    bandwidth : float, array of shape (d,), "scott" or "silverman", default=1.0
        h of the content kernel (rules of thumb use every step of every sequence).
    position : None or "causal", default=None
        ``"causal"``: step t averages over s ≤ t.
    window : int, optional
        Only ``|t − s| < window`` (with ``position="causal"``: 0 ≤ t − s < window).
    decay : float or array, optional
        Times ``exp(−decay·|t − s|)``; an array broadcasts over the leading axes.
    mask : boolean array of shape (…, T, T) or (…, 1, T), optional
        True where step s may be seen from step t.
    exclude_self : bool, default=False
        The hollow kernel (s ≠ t): each step is predicted from the others (leave-one-out).
    n_jobs : int, optional
        Threads; results do not depend on it.

    Returns
    -------
    ndarray of shape (…, T, p)
        NaN (with a :class:`LocalizationWarning`) at steps whose total weight is zero.

    Examples
    --------
    >>> import numpy as np
    >>> from localization import temporal_local_mean
    >>> x = np.array([[0.0], [0.1], [5.0], [0.2]])
    >>> temporal_local_mean(x, kernel="tophat", bandwidth=1.0, position="causal").ravel().round(3).tolist()
    [0.0, 0.05, 5.0, 0.1]
    """
    X = _sequence_array(X, "X")
    if X.shape[-2] == 0:
        raise LocalizationError(f"`X` has no time steps (T = 0), shape {X.shape}", "X")
    if values is None:
        V = X
    else:
        V = _sequence_array(values, "values", dtype=X.dtype)
        if V.shape[:-1] != X.shape[:-1]:
            raise LocalizationError(f"`values` has shape {V.shape}; it needs the leading axes and time steps of X {X.shape[:-1]}", "values")
    if position not in (None, "causal"):
        raise LocalizationError(f"`position` must be None or 'causal', got {position!r}", "position")
    if isinstance(mask, str):
        raise LocalizationError("`mask` must be a boolean array here; use position='causal' for a causal kernel", "mask")
    lead, T = X.shape[:-2], X.shape[-2]
    kw, _ = _position(mask, window, decay, lead, T, exclude_self)
    kw["causal"] = position == "causal"
    content, Xs = _content(kernel, bandwidth, X)
    out, lse = _forward(_flat(Xs), _flat(Xs), _flat(V), content, kw, n_jobs)
    return _nan_where_empty(out, lse, "temporal local mean").reshape(lead + (T, V.shape[-1]))


# --------------------------------------------------------------------------------------------
# multi-head attention with projections (shared by the estimators and the language models)


def rowwise(x: FloatArray, W: FloatArray) -> FloatArray:
    """x @ W for x of shape (…, m): one 2-D matrix product (NumPy's stacked matmul can be
    orders of magnitude slower than a single BLAS call)."""
    return (x.reshape(-1, x.shape[-1]) @ W).reshape(x.shape[:-1] + (W.shape[-1],))


def split_heads(A: FloatArray, n_heads: int) -> FloatArray:
    """(…, T, n_heads·k) → (…, n_heads, T, k), contiguous."""
    *lead, T, width = A.shape
    return np.ascontiguousarray(np.moveaxis(A.reshape(*lead, T, n_heads, width // n_heads), -2, -3))


def merge_heads(A: FloatArray) -> FloatArray:
    """(…, n_heads, T, k) → (…, T, n_heads·k)."""
    *lead, H, T, k = A.shape
    return np.moveaxis(A, -3, -2).reshape(*lead, T, H * k)


def _attend(q, k, v, n_heads, kernel, bandwidth, pos, n_jobs):
    """Per-head temporal local means of projected q, k, v (…, T, H·k) → (…, T, H·k_v), and the lse."""
    Q, K, V = split_heads(q, n_heads), split_heads(k, n_heads), split_heads(v, n_heads)
    lead, T = Q.shape[:-2], Q.shape[-2]
    kw, _ = _position(pos.get("mask"), pos.get("window"), pos.get("decay"), lead, T, pos.get("exclude_self", False))
    kw["causal"] = pos.get("causal", False)
    if kernel == "dot":
        content = dict(kernel="dot", scale=1.0 / math.sqrt(Q.shape[-1]))
    else:
        content = dict(kernel=kernel, bandwidth=float(bandwidth))
    out, lse = _forward(_flat(Q), _flat(K), _flat(V), content, kw, n_jobs)
    if kernel != "dot":
        # The dot product's empty steps (only `exclude_self` at t = 0 makes them) stay 0, the
        # fused-attention convention the training relies on.
        out = _nan_where_empty(out, lse, "temporal local mean")
    return merge_heads(out.reshape(lead + out.shape[-2:])), lse.reshape(lead + (T,))


def _attend_backward(g, q, k, v, out_heads, lse, n_heads, pos, n_jobs):
    """Gradients (dq, dk, dv, d_decay per head) of `_attend` with the dot kernel."""
    Q, K, V = split_heads(q, n_heads), split_heads(k, n_heads), split_heads(v, n_heads)
    G, O = split_heads(g, n_heads), split_heads(out_heads, n_heads)
    lead, T = Q.shape[:-2], Q.shape[-2]
    kw, decay_shape = _position(pos.get("mask"), pos.get("window"), pos.get("decay"), lead, T, pos.get("exclude_self", False))
    kw["causal"] = pos.get("causal", False)
    dq, dk, dv, dl = _core.attention_backward(
        _flat(Q), _flat(K), _flat(V), _flat(O), np.ascontiguousarray(lse.reshape(-1, T)), _flat(G),
        scale=1.0 / math.sqrt(Q.shape[-1]), n_jobs=n_jobs, **kw,
    )
    d_decay = None if decay_shape is None else _unbroadcast(dl.reshape(lead), decay_shape)
    return (merge_heads(dq.reshape(Q.shape)), merge_heads(dk.reshape(K.shape)), merge_heads(dv.reshape(V.shape)), d_decay)


def _check_decay_heads(decay, n_heads):
    if decay is None:
        return None
    lam = _decays(decay)
    if lam.ndim > 1 or (lam.ndim == 1 and lam.shape[0] not in (1, n_heads)):
        raise LocalizationError(f"`decay` must be a number or one value per head ({n_heads}), got shape {lam.shape}", "decay")
    return np.broadcast_to(lam, (n_heads,)).astype(np.float64)


def _positional_params(est, n_heads):
    if est.position not in (None, "causal"):
        raise LocalizationError(f"`position` must be None or 'causal', got {est.position!r}", "position")
    return dict(causal=est.position == "causal", window=_window(est.window), decay=_check_decay_heads(est.decay, n_heads))


def _sequences_input(est, X, reset):
    """X as (n_sequences, T, d) float array, plus whether it came as one 2-D sequence.

    scikit-learn's ``check_array`` does the checking (its messages for 1-D, empty, sparse,
    complex, object and non-finite input), with 3-D arrays allowed.
    """
    A = check_array(X, dtype=_FLOATS, order="C", allow_nd=True, input_name="X")
    if A.ndim > 3:
        raise LocalizationError(f"`X` must be one sequence (T, d) or a batch of sequences (n, T, d), got shape {A.shape}", "X")
    single = A.ndim == 2
    A = A[None] if single else A
    if A.shape[1] == 0 or A.shape[2] == 0:
        raise LocalizationError(f"`X` needs at least one time step and one feature, got shape {A.shape}", "X")
    if reset:
        est.n_features_in_ = A.shape[2]
    elif A.shape[2] != est.n_features_in_:
        raise LocalizationError(f"X has {A.shape[2]} features, but {type(est).__name__} is expecting {est.n_features_in_} features as input", "X")
    return A, single


class TemporalLocalMean(TransformerMixin, BaseEstimator):
    """Multi-head temporal self-local mean with projections: one attention layer.

    For a sequence X (T × d) and heads h = 1…H:

        Y = [m¹ | … | mᴴ] W_o,   mʰ_t = Σ_s K_h(t, s) (X W_vʰ)_s / Σ_s K_h(t, s)

    with K_h = exp((X W_qʰ)_t·(X W_kʰ)_s / √k) · K_position(t, s) for ``kernel="dot"``
    (softmax attention), or k(‖(X W_qʰ)_t − (X W_kʰ)_s‖ / h) for a radial profile. Projections
    multiply on the right (``X @ W_q``); head h uses columns h·k … (h+1)·k − 1.

    Projections that are given are used as they are. Missing ones:
    ``W_v`` = [I | … | I] (every head averages X itself), ``W_o`` = [I; …; I]/H (the heads'
    mean); ``W_q``, ``W_k`` are the identity for radial kernels, and for the dot kernel are
    **fitted** by Adam on the leave-one-out self-consistency loss ‖X − m_hollow(X)‖²/N, where
    the hollow kernel excludes each step from its own mean (without that, the trivial answer
    "attend to yourself" would reconstruct X exactly).

    Parameters
    ----------
    n_heads : int, default=1
    head_dim : int, optional
        Width k of each head's queries and keys when W_q, W_k are fitted (default: n_features).
    kernel : str, default="dot"
        ``"dot"`` or a radial profile name.
    bandwidth : float, default=1.0
        h of a radial content kernel (ignored by ``"dot"``).
    position : None or "causal", default=None
    window : int, optional
        Only ``|t − s| < window`` is averaged.
    decay : float or array of shape (n_heads,), optional
        Relative position kernel ``exp(−decay_h·|t − s|)`` per head.
    W_q, W_k : arrays of shape (n_features, n_heads·k), optional
    W_v : array of shape (n_features, n_heads·k_v), optional
    W_o : array of shape (n_heads·k_v, n_out), optional
    max_iter : int, default=100
        Adam steps when W_q, W_k are fitted.
    learning_rate : float, default=0.01
    tol : float, default=1e-7
        Stop when the loss improves by less than ``tol`` (relative) over 10 steps.
    random_state : int, RandomState or None
        Initial W_q, W_k.
    n_jobs : int, optional
        Threads; results do not depend on it.

    Attributes
    ----------
    W_q_, W_k_, W_v_, W_o_ : ndarrays
        The projections used.
    loss_curve_ : list of float
        The leave-one-out loss per Adam step (empty when nothing was fitted).
    n_iter_ : int
        Adam steps taken (0 when nothing was fitted).

    Notes
    -----
    X of shape (T, d) is one sequence whose rows are time steps; (n, T, d) is a batch of n
    sequences. Rows are not exchangeable samples: transforming a subset of the rows of a
    sequence gives a different answer than the same rows of the whole sequence.

    Examples
    --------
    >>> import numpy as np
    >>> from localization.sequence import TemporalLocalMean
    >>> X = np.random.default_rng(0).normal(size=(50, 4))
    >>> tlm = TemporalLocalMean(n_heads=2, position="causal", decay=[0.0, 0.5], random_state=0).fit(X)
    >>> tlm.transform(X).shape, tlm.W_q_.shape
    ((50, 4), (4, 8))
    """

    _parameter_constraints = {
        "n_heads": [COUNT],
        "head_dim": [COUNT, None],
        "kernel": [str],
        "bandwidth": [POSITIVE],
        "position": [StrOptions({"causal"}), None],
        "window": [COUNT, None],
        "decay": [NON_NEGATIVE, "array-like", None],
        **{W: ["array-like", None] for W in ("W_q", "W_k", "W_v", "W_o")},
        "max_iter": [COUNT],
        "learning_rate": [POSITIVE],
        "tol": [NON_NEGATIVE],
        "random_state": ["random_state"],
        "n_jobs": N_JOBS,
    }

    def __init__(
        self, n_heads: int = 1, head_dim: int | None = None, kernel: KernelLike = "dot",
        bandwidth: BandwidthLike = 1.0, position: str | ArrayLike | None = None, window: int | None = None,
        decay: float | ArrayLike | None = None, W_q: ArrayLike | None = None, W_k: ArrayLike | None = None,
        W_v: ArrayLike | None = None, W_o: ArrayLike | None = None, max_iter: int = 100, learning_rate: float = 0.01,
        tol: float = 1e-7, random_state: SeedLike = None, n_jobs: int | None = None,
    ) -> None:
        self.n_heads = n_heads
        self.head_dim = head_dim
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.position = position
        self.window = window
        self.decay = decay
        self.W_q = W_q
        self.W_k = W_k
        self.W_v = W_v
        self.W_o = W_o
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.tol = tol
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _kernel_name(self):
        if self.kernel.lower() == "dot":
            return "dot"
        return _core.profile_info(self.kernel.lower())[0]

    def _projection(self, W, name, rows, dtype, cols_multiple=None):
        W = _sequence_array(W, name, dtype=dtype)
        if W.ndim != 2 or W.shape[0] != rows:
            raise LocalizationError(f"`{name}` must have shape ({rows}, …), got {W.shape}", name)
        if cols_multiple is not None and W.shape[1] % cols_multiple:
            raise LocalizationError(f"`{name}` has {W.shape[1]} columns, not a multiple of n_heads={cols_multiple}", name)
        return W

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None) -> Self:
        """Set (or fit) the projections on sequences X of shape (T, d) or (n, T, d). Returns self."""
        H = self.n_heads
        kernel = self._kernel_name()
        self._pos = _positional_params(self, H)
        A, _ = _sequences_input(self, X, reset=True)
        d, dt = A.shape[2], A.dtype
        k = d if self.head_dim is None else self.head_dim
        eye = np.eye(d, dtype=dt)
        self.W_v_ = np.tile(eye, (1, H)) if self.W_v is None else self._projection(self.W_v, "W_v", d, dt, H)
        kv = self.W_v_.shape[1]
        self.W_o_ = np.tile(eye, (H, 1)) / H if self.W_o is None and kv == H * d else None
        if self.W_o is not None:
            self.W_o_ = self._projection(self.W_o, "W_o", kv, dt)
        elif self.W_o_ is None:
            raise LocalizationError("`W_o` is required when the given `W_v` does not have n_heads·n_features columns", "W_o")
        given = [W is not None for W in (self.W_q, self.W_k)]
        self.loss_curve_, self.n_iter_ = [], 0
        if all(given):
            self.W_q_ = self._projection(self.W_q, "W_q", d, dt, H)
            self.W_k_ = self._projection(self.W_k, "W_k", d, dt, H)
            if self.W_q_.shape != self.W_k_.shape:
                raise LocalizationError(f"`W_q` {self.W_q_.shape} and `W_k` {self.W_k_.shape} must have the same shape", "W_q")
        elif any(given):
            raise LocalizationError("give both `W_q` and `W_k` or neither", "W_q")
        elif kernel != "dot":
            self.W_q_ = self.W_k_ = np.tile(eye, (1, H))
        else:
            self._fit_query_key(A, H, k)
        return self

    def _fit_query_key(self, A, H, k):
        """Adam on ‖X − hollow local mean‖² / N over W_q, W_k (the values and W_o held fixed)."""
        rng = check_random_state(self.random_state)
        d, dt = A.shape[2], A.dtype
        params = {n: rng.normal(scale=1.0 / np.sqrt(d), size=(d, H * k)).astype(dt) for n in ("W_q", "W_k")}
        pos = dict(self._pos, exclude_self=True)
        v = rowwise(A, self.W_v_)
        opt = Adam(params, self.learning_rate)
        N = A.shape[0] * A.shape[1]
        for it in range(self.max_iter):
            q, kk = rowwise(A, params["W_q"]), rowwise(A, params["W_k"])
            m, lse = _attend(q, kk, v, H, "dot", 1.0, pos, self.n_jobs)
            R = rowwise(m, self.W_o_) - A
            self.loss_curve_.append(float(np.sum(R.astype(np.float64) ** 2) / N))
            gm = (2.0 / N) * rowwise(R, self.W_o_.T)
            dq, dk, _, _ = _attend_backward(gm.astype(dt), q, kk, v, m, lse, H, pos, self.n_jobs)
            flat = A.reshape(-1, d).T
            grads = {"W_q": flat @ dq.reshape(-1, dq.shape[-1]), "W_k": flat @ dk.reshape(-1, dk.shape[-1])}
            opt.step(params, grads)
            self.n_iter_ = it + 1
            c = self.loss_curve_
            if len(c) > 10 and c[-11] - c[-1] <= self.tol * abs(c[-11]):
                break
        self.W_q_, self.W_k_ = params["W_q"], params["W_k"]

    def transform(self, X: ArrayLike) -> FloatArray:
        """The multi-head temporal local mean of each sequence: shape (T, n_out) or (n, T, n_out)."""
        check_is_fitted(self, "W_o_")
        A, single = _sequences_input(self, X, reset=False)
        A = A.astype(self.W_q_.dtype, copy=False)
        H = self.n_heads
        q, k, v = rowwise(A, self.W_q_), rowwise(A, self.W_k_), rowwise(A, self.W_v_)
        m, _ = _attend(q, k, v, H, self._kernel_name(), self.bandwidth, self._pos, self.n_jobs)
        Y = rowwise(m, self.W_o_)
        return Y[0] if single else Y

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags


# --------------------------------------------------------------------------------------------
# the hierarchical local model (a Transformer encoder)

_LAYER_KEYS = {
    "self_attn.in_proj_weight": lambda D, F: (3 * D, D),
    "self_attn.in_proj_bias": lambda D, F: (3 * D,),
    "self_attn.out_proj.weight": lambda D, F: (D, D),
    "self_attn.out_proj.bias": lambda D, F: (D,),
    "linear1.weight": lambda D, F: (F, D),
    "linear1.bias": lambda D, F: (F,),
    "linear2.weight": lambda D, F: (D, F),
    "linear2.bias": lambda D, F: (D,),
    "norm1.weight": lambda D, F: (D,),
    "norm1.bias": lambda D, F: (D,),
    "norm2.weight": lambda D, F: (D,),
    "norm2.bias": lambda D, F: (D,),
}
_ACTIVATIONS = ("relu", "gelu")


def _erf(x):
    from scipy.special import erf

    return erf(x)


def _act(x, name):
    if name == "relu":
        return np.maximum(x, 0)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))  # exact GELU, as torch's default


def _act_grad(x, name):
    if name == "relu":
        return (x > 0).astype(x.dtype)
    cdf = 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))
    return cdf + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def layer_norm(x: FloatArray, weight: FloatArray, bias: FloatArray, eps: float) -> tuple[FloatArray, tuple[FloatArray, FloatArray]]:
    """Layer normalisation over the last axis; returns (y, cache)."""
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(-1, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    xhat = xc * inv
    return xhat * weight + bias, (xhat, inv)


def layer_norm_backward(dy: FloatArray, weight: FloatArray, cache: tuple[FloatArray, FloatArray]) -> tuple[FloatArray, FloatArray, FloatArray]:
    xhat, inv = cache
    axes = tuple(range(dy.ndim - 1))
    dw, db = (dy * xhat).sum(axes), dy.sum(axes)
    g = dy * weight
    dx = inv * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    return dx, dw, db


def block_forward(x: FloatArray, w: Mapping[str, FloatArray], cfg: Mapping[str, Any], cache: bool = False) -> FloatArray | tuple[FloatArray, dict[str, Any]]:
    """One block of the hierarchical local model: temporal local mean + position-wise map.

    ``w`` holds the block's weights under torch's ``TransformerEncoderLayer`` names; ``cfg`` the
    number of heads, norm placement, activation, epsilon and position kernel. Returns y (and the
    intermediate values the backward pass needs when ``cache``).
    """
    H, eps, act, pos = cfg["n_heads"], cfg["eps"], cfg["activation"], cfg["pos"]
    D = x.shape[-1]
    c = {"x": x}

    def attn(z):
        qkv = rowwise(z, w["self_attn.in_proj_weight"].T) + w["self_attn.in_proj_bias"]
        q, k, v = qkv[..., :D], qkv[..., D : 2 * D], qkv[..., 2 * D :]
        m, lse = _attend(q, k, v, H, "dot", 1.0, pos, cfg.get("n_jobs"))
        c.update(attn_in=z, q=q, k=k, v=v, m=m, lse=lse)
        return rowwise(m, w["self_attn.out_proj.weight"].T) + w["self_attn.out_proj.bias"]

    def ff(z):
        h = rowwise(z, w["linear1.weight"].T) + w["linear1.bias"]
        a = _act(h, act)
        c.update(ff_in=z, h=h, a=a)
        return rowwise(a, w["linear2.weight"].T) + w["linear2.bias"]

    if cfg["norm_first"]:
        z1, c["n1"] = layer_norm(x, w["norm1.weight"], w["norm1.bias"], eps)
        x1 = x + attn(z1)
        z2, c["n2"] = layer_norm(x1, w["norm2.weight"], w["norm2.bias"], eps)
        y = x1 + ff(z2)
    else:
        x1, c["n1"] = layer_norm(x + attn(x), w["norm1.weight"], w["norm1.bias"], eps)
        y, c["n2"] = layer_norm(x1 + ff(x1), w["norm2.weight"], w["norm2.bias"], eps)
    return (y, c) if cache else y


def block_backward(dy: FloatArray, w: Mapping[str, FloatArray], cfg: Mapping[str, Any], c: Mapping[str, Any]) -> tuple[FloatArray, dict[str, FloatArray], FloatArray | None]:
    """Gradients of one block: (dx, {weight name: gradient}, d_decay per head or None)."""
    H, act, pos = cfg["n_heads"], cfg["activation"], cfg["pos"]
    g = {}

    def outer(dout, inp):
        return dout.reshape(-1, dout.shape[-1]).T @ inp.reshape(-1, inp.shape[-1])

    def lin(dout, inp, name):
        g[name + ".weight"] = outer(dout, inp)
        g[name + ".bias"] = dout.reshape(-1, dout.shape[-1]).sum(0)
        return rowwise(dout, w[name + ".weight"])

    def ff_back(dout):
        da = lin(dout, c["a"], "linear2")
        return lin(da * _act_grad(c["h"], act), c["ff_in"], "linear1")

    def attn_back(dout):
        dm = rowwise(dout, w["self_attn.out_proj.weight"])
        g["self_attn.out_proj.weight"] = outer(dout, c["m"])
        g["self_attn.out_proj.bias"] = dout.reshape(-1, dout.shape[-1]).sum(0)
        dq, dk, dv, dl = _attend_backward(dm, c["q"], c["k"], c["v"], c["m"], c["lse"], H, pos, cfg.get("n_jobs"))
        dqkv = np.concatenate([dq, dk, dv], axis=-1)
        g["self_attn.in_proj_weight"] = outer(dqkv, c["attn_in"])
        g["self_attn.in_proj_bias"] = dqkv.reshape(-1, dqkv.shape[-1]).sum(0)
        return rowwise(dqkv, w["self_attn.in_proj_weight"]), dl

    def norm_back(dout, which, cached):
        dx, g[which + ".weight"], g[which + ".bias"] = layer_norm_backward(dout, w[which + ".weight"], c[cached])
        return dx

    if cfg["norm_first"]:
        dx1 = dy + norm_back(ff_back(dy), "norm2", "n2")
        dz1, dl = attn_back(dx1)
        dx = dx1 + norm_back(dz1, "norm1", "n1")
    else:
        d2 = norm_back(dy, "norm2", "n2")
        dx1 = d2 + ff_back(d2)
        d1 = norm_back(dx1, "norm1", "n1")
        da, dl = attn_back(d1)
        dx = d1 + da
    return dx, g, dl


def init_block(D: int, n_heads: int, d_ff: int, rng: np.random.RandomState, dtype: DTypeLike = np.float64) -> dict[str, FloatArray]:
    """Random weights of one block under torch's names (Xavier-uniform projections, zero biases, unit norms)."""
    if D % n_heads:
        raise LocalizationError(f"d_model={D} is not a multiple of n_heads={n_heads}", "n_heads")

    def xavier(shape):
        a = np.sqrt(6.0 / (shape[0] + shape[1]))
        return rng.uniform(-a, a, size=shape).astype(dtype)

    w = {
        "self_attn.in_proj_weight": np.concatenate([xavier((D, D)) for _ in range(3)]),
        "self_attn.out_proj.weight": xavier((D, D)),
        "linear1.weight": xavier((d_ff, D)),
        "linear2.weight": xavier((D, d_ff)),
    }
    for name, shape in _LAYER_KEYS.items():
        if name not in w:
            w[name] = (np.ones if name.startswith("norm") and name.endswith("weight") else np.zeros)(shape(D, d_ff), dtype=dtype)
    return w


class HierarchicalLocalModel(TransformerMixin, BaseEstimator):
    """A stack of temporal local means interleaved with position-wise maps: a Transformer encoder.

    Each block is a multi-head temporal local mean (softmax attention computed by the native
    engine, O(T·d) memory) followed by a position-wise MLP, each with a residual connection and
    layer normalisation — after the residual (``norm_first=False``, the original Transformer
    and torch's default) or before the sublayer (``norm_first=True``)::

        post-norm:  x ← LN₁(x + A(x));    x ← LN₂(x + F(x))
        pre-norm:   x ← x + A(LN₁(x));    x ← x + F(LN₂(x))

    with A the multi-head local mean with projections and F(x) = W₂ act(W₁x + b₁) + b₂. Dropout
    is not modelled (evaluation mode).

    Weights are a dict of NumPy arrays under the names of ``torch.nn.TransformerEncoder``:
    ``layers.{i}.self_attn.in_proj_weight`` (3D × D, rows q, k, v), ``…in_proj_bias``,
    ``…self_attn.out_proj.weight`` / ``.bias``, ``…linear1.weight`` (d_ff × D) / ``.bias``,
    ``…linear2.weight`` / ``.bias``, ``…norm1.weight`` / ``.bias``, ``…norm2.weight`` / ``.bias``,
    and optionally ``norm.weight`` / ``norm.bias`` (a final layer normalisation). So
    ``{k: v.numpy() for k, v in encoder.state_dict().items()}`` of a batch-first torch encoder
    loads as it is; a single layer's state dict (no ``layers.0.`` prefix) does too.

    Parameters
    ----------
    weights : dict of str → array, optional
        The weights; without them :meth:`fit` draws random ones (Xavier-uniform projections).
    n_layers : int, default=1
        Used when ``weights`` is None (otherwise read from the weights).
    n_heads : int, default=1
    d_ff : int, optional
        Width of the MLP when ``weights`` is None (default 4·d_model).
    norm_first : bool, default=False
    activation : {"relu", "gelu"}, default="relu"
    layer_norm_eps : float, default=1e-5
    position : None or "causal", default=None
    window : int, optional
    decay : float or array of shape (n_heads,), optional
        Per-head relative position kernel ``exp(−decay_h·|t − s|)`` (ALiBi).
    random_state : int, RandomState or None
    n_jobs : int, optional

    Attributes
    ----------
    weights_ : dict of str → ndarray
    n_layers_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from localization.sequence import HierarchicalLocalModel
    >>> X = np.random.default_rng(0).normal(size=(2, 10, 8))     # 2 sequences, T = 10, d = 8
    >>> hlm = HierarchicalLocalModel(n_layers=2, n_heads=2, position="causal", random_state=0).fit(X)
    >>> Y = hlm.transform(X)
    >>> Y.shape, sorted(hlm.weights_)[0]
    ((2, 10, 8), 'layers.0.linear1.bias')
    """

    _parameter_constraints = {
        "weights": [dict, None],
        "n_layers": [COUNT],
        "n_heads": [COUNT],
        "d_ff": [COUNT, None],
        "norm_first": ["boolean"],
        "activation": [StrOptions(set(_ACTIVATIONS))],
        "layer_norm_eps": [POSITIVE],
        "position": [StrOptions({"causal"}), None],
        "window": [COUNT, None],
        "decay": [NON_NEGATIVE, "array-like", None],
        "random_state": ["random_state"],
        "n_jobs": N_JOBS,
    }

    def __init__(
        self, weights: Mapping[str, ArrayLike] | None = None, n_layers: int = 1, n_heads: int = 1,
        d_ff: int | None = None, norm_first: bool = False, activation: str = "relu", layer_norm_eps: float = 1e-5,
        position: str | ArrayLike | None = None, window: int | None = None, decay: float | ArrayLike | None = None,
        random_state: SeedLike = None, n_jobs: int | None = None,
    ) -> None:
        self.weights = weights
        self.n_layers = n_layers
        self.n_heads = n_heads
        self.d_ff = d_ff
        self.norm_first = norm_first
        self.activation = activation
        self.layer_norm_eps = layer_norm_eps
        self.position = position
        self.window = window
        self.decay = decay
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _config(self):
        H = self.n_heads
        return dict(n_heads=H, eps=float(self.layer_norm_eps), activation=self.activation, norm_first=bool(self.norm_first),
                    pos=_positional_params(self, H), n_jobs=self.n_jobs)

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike | None = None, y: object = None) -> Self:
        """Load (and check) the weights, or draw random ones for sequences of X's width. Returns self."""
        cfg = self._config()
        if self.weights is None:
            if X is None:
                raise LocalizationError("without `weights`, fit needs X to know the model width", "X")
            A, _ = _sequences_input(self, X, reset=True)
            D = A.shape[2]
            L = self.n_layers
            F = 4 * D if self.d_ff is None else self.d_ff
            rng = check_random_state(self.random_state)
            self.weights_ = {f"layers.{i}.{k}": v for i in range(L) for k, v in init_block(D, cfg["n_heads"], F, rng, A.dtype).items()}
            self.n_layers_ = L
        else:
            self.weights_, self.n_layers_ = self._load(self.weights, cfg["n_heads"])
            D = self.weights_["layers.0.norm1.weight"].shape[0]
            if X is not None:
                A, _ = _sequences_input(self, X, reset=True)
                if A.shape[2] != D:
                    raise LocalizationError(f"X has {A.shape[2]} features, but the weights are for d_model={D}", "X")
            else:
                self.n_features_in_ = D
        return self

    @staticmethod
    def _load(weights, n_heads):
        if not isinstance(weights, dict):
            raise LocalizationTypeError(f"`weights` must be a dict of name → array, got {type(weights).__name__}", "weights")
        # torch tensors convert too (detached, on the CPU).
        W = {str(k): v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v) for k, v in weights.items()}
        if not any(k.startswith("layers.") for k in W):
            W = {(k if k.startswith("norm.") else "layers.0." + k): v for k, v in W.items()}
        layers = sorted({int(m.group(1)) for k in W if (m := re.match(r"layers\.(\d+)\.", k))})
        if not layers or layers != list(range(len(layers))):
            raise LocalizationError("`weights` must hold layers.0 … layers.{n-1} under torch.nn.TransformerEncoder names", "weights")
        first = W.get("layers.0.norm1.weight")
        if first is None or first.ndim != 1:
            raise LocalizationError("`weights` lacks layers.0.norm1.weight (shape (d_model,))", "weights")
        D = first.shape[0]
        l1 = W.get("layers.0.linear1.weight")
        if l1 is None or l1.ndim != 2:
            raise LocalizationError("`weights` lacks layers.0.linear1.weight (shape (d_ff, d_model))", "weights")
        F = l1.shape[0]
        if D % n_heads:
            raise LocalizationError(f"d_model={D} of the weights is not a multiple of n_heads={n_heads}", "n_heads")
        dtype = np.result_type(*[v.dtype for v in W.values()])
        dtype = dtype if dtype in _FLOATS else np.float64
        out = {}
        for i in layers:
            for name, shape in _LAYER_KEYS.items():
                key = f"layers.{i}.{name}"
                if key not in W:
                    raise LocalizationError(f"`weights` lacks {key}", "weights")
                A = _sequence_array(W[key], key, dtype=dtype, min_ndim=1)
                if A.shape != shape(D, F):
                    raise LocalizationError(f"`weights[{key!r}]` has shape {A.shape}, expected {shape(D, F)}", "weights")
                out[key] = A
        for name in ("norm.weight", "norm.bias"):
            if name in W:
                A = _sequence_array(W[name], name, dtype=dtype, min_ndim=1)
                if A.shape != (D,):
                    raise LocalizationError(f"`weights[{name!r}]` has shape {A.shape}, expected ({D},)", "weights")
                out[name] = A
        if ("norm.weight" in out) != ("norm.bias" in out):
            raise LocalizationError("`weights` must hold both norm.weight and norm.bias, or neither", "weights")
        extra = sorted(set(W) - set(out))
        if extra:
            raise LocalizationError(f"`weights` has names the model does not use: {extra[:5]}", "weights")
        return out, len(layers)

    def layer_weights(self, i: int) -> dict[str, FloatArray]:
        """The weights of block i under the names of one ``TransformerEncoderLayer``."""
        check_is_fitted(self, "weights_")
        p = f"layers.{i}."
        return {k[len(p):]: v for k, v in self.weights_.items() if k.startswith(p)}

    def transform(self, X: ArrayLike) -> FloatArray:
        """The model's output for sequences X of shape (T, d_model) or (n, T, d_model)."""
        check_is_fitted(self, "weights_")
        cfg = self._config()
        A, single = _sequences_input(self, X, reset=False)
        x = A.astype(self.weights_["layers.0.norm1.weight"].dtype, copy=False)
        for i in range(self.n_layers_):
            x = block_forward(x, self.layer_weights(i), cfg)
        if "norm.weight" in self.weights_:
            x, _ = layer_norm(x, self.weights_["norm.weight"], self.weights_["norm.bias"], cfg["eps"])
        return x[0] if single else x

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags

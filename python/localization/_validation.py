"""Input checking shared by every public entry point (DESIGN §6).

All arrays reaching the native core are C-contiguous float32/float64 of one dtype and free
of NaN/inf; everything else is turned into a clear ``TypeError``/``ValueError`` here.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.utils.validation import check_array

FLOAT_DTYPES = (np.float64, np.float32)


class LocalizationWarning(UserWarning):
    """Warning about a numerically degenerate result (e.g. a query with zero total weight)."""


def as_float_array(X, name, *, dtype=None, ensure_2d=True, allow_empty=False):
    """Validate an array argument: numeric, finite, C-contiguous float32/float64.

    Integer and boolean input is converted to float64; object arrays are rejected.
    """
    arr = np.asarray(X) if not hasattr(X, "__array__") else X
    if getattr(arr, "dtype", None) is not None and arr.dtype == object:
        raise TypeError(f"`{name}` has dtype object; pass a numeric array (float32 or float64)")
    if getattr(arr, "dtype", None) is not None and arr.dtype.kind in "USV":
        raise TypeError(f"`{name}` has dtype {arr.dtype}; pass a numeric array (float32 or float64)")
    want = FLOAT_DTYPES if dtype is None else dtype
    try:
        out = check_array(
            X,
            dtype=want,
            order="C",
            ensure_2d=ensure_2d,
            ensure_min_samples=0 if allow_empty else 1,
            input_name=name,
        )
    except ValueError as e:
        msg = str(e)
        if name not in msg:
            msg = f"`{name}`: {msg}"
        raise ValueError(msg) from None
    if dtype is not None and out.dtype != dtype:
        out = out.astype(dtype)
    return np.ascontiguousarray(out)


def check_query(X_query, X, name="X_query"):
    """Validate query rows against fitted/reference rows: same width, same dtype."""
    Q = as_float_array(X_query, name, dtype=X.dtype)
    if Q.shape[1] != X.shape[1]:
        raise ValueError(f"`{name}` has {Q.shape[1]} features, but X has {X.shape[1]}")
    return Q


def check_values(values, n, dtype, name="values"):
    """Validate per-sample values (1-D or 2-D); returns (2-D array, was_1d)."""
    v = np.asarray(values)
    if v.ndim not in (1, 2):
        raise ValueError(f"`{name}` must be 1-D or 2-D, got {v.ndim}-D")
    was_1d = v.ndim == 1
    v2 = as_float_array(v.reshape(-1, 1) if was_1d else v, name, dtype=dtype)
    if v2.shape[0] != n:
        raise ValueError(f"`{name}` has {v2.shape[0]} rows, but X has {n}")
    return v2, was_1d


def check_sample_weight(sample_weight, n, dtype):
    if sample_weight is None:
        return None
    w = np.asarray(sample_weight)
    if w.ndim == 0:
        w = np.full(n, float(w))
    w = as_float_array(w, "sample_weight", dtype=dtype, ensure_2d=False)
    if w.ndim != 1 or w.shape[0] != n:
        raise ValueError(f"`sample_weight` must have shape ({n},), got {w.shape}")
    if np.any(w < 0):
        raise ValueError("`sample_weight` must be non-negative")
    if not np.any(w > 0):
        raise ValueError("`sample_weight` is zero everywhere: the total weight must be positive")
    return w


def check_positive_int(value, name, minimum=1):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value!r}")
    return int(value)


def warn_zero_weight(mask, what="local mean", reason="zero total kernel weight"):
    """Warn (once per call) about queries where the result is undefined and was set to NaN."""
    count = int(np.count_nonzero(mask))
    if count:
        warnings.warn(
            f"{count} quer{'y has' if count == 1 else 'ies have'} {reason}; the {what} "
            "is undefined there (NaN). Increase the bandwidth or use a kernel with unbounded support.",
            LocalizationWarning,
            stacklevel=3,
        )

"""Sample-weight validation for the self-local estimators."""

from __future__ import annotations

import numpy as np

from ._validation import check_sample_weight


def sample_weight_or_none(sample_weight, n, dtype):
    """Validated weights; an all-zero vector gets an error that says so."""
    if sample_weight is not None:
        w = np.asarray(sample_weight)
        if w.ndim == 1 and w.size == n and w.dtype.kind in "biuf" and np.all(w == 0):
            raise ValueError("`sample_weight` is all zero: the total weight must be positive")
        sample_weight = w
    return check_sample_weight(sample_weight, n, dtype)

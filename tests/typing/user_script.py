"""A user's script against the public API, checked by ``mypy --strict`` (tests/test_typing.py
and CI). Each ``assert_type`` fails the check if the library's annotation of that entry point
is missing, wrong, or leaks ``Any``; the script also runs, so the annotations are checked
against what the calls really return."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray
from typing_extensions import assert_type

import localization
from localization import (
    KernelDensity,
    LocalizationError,
    LocalMeanRegressor,
    MeanShift,
    NearestNeighbors,
    attention,
    kernel_sum,
    local_mean,
)

Floats = NDArray[np.floating[Any]]

rng = np.random.default_rng(0)
X = rng.normal(size=(200, 2))
y = X[:, 0] - X[:, 1]
Q = X[:5]

m = local_mean(Q, X, y, bandwidth=0.5)
assert_type(m, Floats)
s = kernel_sum(Q, X, bandwidth=0.5)
assert_type(s, Floats)
s2, bound = kernel_sum(Q, X, bandwidth=0.5, return_error_bound=True)
assert_type(bound, Floats)

kde = KernelDensity(bandwidth=0.5).fit(X)
assert_type(kde, KernelDensity)
assert_type(kde.score_samples(Q), Floats)

reg = LocalMeanRegressor(bandwidth=0.5).fit(X, y)
assert_type(reg, LocalMeanRegressor)
assert_type(reg.predict(Q), Floats)

ms = MeanShift(bandwidth=1.0).fit(X)
assert_type(ms, MeanShift)
assert_type(ms.predict(Q), NDArray[np.int64])

nn = NearestNeighbors(n_neighbors=3).fit(X)
dist, ind = nn.kneighbors(Q)
assert_type(dist, Floats)
assert_type(ind, NDArray[np.int64])

T = rng.normal(size=(2, 8, 4))
out = attention(T, T, T, mask="causal")
assert_type(out, Floats)

try:
    local_mean(Q, X, y, bandwidth=-1.0)
    raise AssertionError("a negative bandwidth was accepted")
except LocalizationError as e:
    assert_type(e.parameter, str | None)
    assert e.parameter == "bandwidth", e.parameter

assert_type(localization.__version__, str)
print("ok")

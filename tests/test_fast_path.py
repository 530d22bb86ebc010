"""The validation fast path of the functional API: input that is already a finite, C-contiguous
float ndarray skips scikit-learn's check_array, with results identical to the checked path."""

import numpy as np
import pytest

import localization._validation as validation
from localization import kernel_sum, local_mean


def _forbid_check_array(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("check_array called for input that was already valid")

    monkeypatch.setattr(validation, "check_array", refuse)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_valid_arrays_skip_check_array(dtype, rng, monkeypatch):
    Q, X = rng.normal(size=(8, 2)).astype(dtype), rng.normal(size=(100, 2)).astype(dtype)
    v, w = rng.normal(size=100).astype(dtype), rng.random(100).astype(dtype)
    _forbid_check_array(monkeypatch)
    local_mean(Q, X, v, sample_weight=w, bandwidth=0.5)
    kernel_sum(Q, X, bandwidth=0.5)


@pytest.mark.parametrize("kw", [{}, dict(kernel="epanechnikov", algorithm="kd_tree"), dict(kernel="knn", n_neighbors=7)])
def test_fast_and_checked_paths_agree_bit_for_bit(kw, rng):
    Q, X = rng.normal(size=(8, 3)), rng.normal(size=(100, 3))
    v, w = rng.normal(size=(100, 2)), rng.random(100)
    fast = local_mean(Q, X, v, sample_weight=w, return_weight=True, **kw)
    # Lists, Fortran order and integers-as-floats views take scikit-learn's path.
    slow = local_mean(Q.tolist(), np.asfortranarray(X), v.tolist(), sample_weight=list(w), return_weight=True, **kw)
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(kernel_sum(Q, X, **kw), kernel_sum(Q.tolist(), X[::1].T.copy().T, **kw))


def test_other_input_is_still_checked(rng, monkeypatch):
    X = rng.normal(size=(20, 2))
    bad = X.copy()
    bad[3, 1] = np.nan
    for args, name in [((bad, X), "X_query"), ((X, bad), "X"), ((X, X, bad[:, 1]), "values")]:
        with pytest.raises(ValueError, match=name):
            local_mean(*args)
    with pytest.raises(ValueError, match="sample_weight"):
        local_mean(X, X, sample_weight=np.full(20, np.inf))
    with pytest.raises(ValueError, match="features"):
        local_mean(X[:, :1].copy(), X)
    with pytest.raises(ValueError, match="bandwidth"):
        local_mean(X, X, bandwidth=float("inf"))
    with pytest.raises(ValueError, match="bandwidth"):
        local_mean(X, X, bandwidth=-1.0)
    # Empty and 3-D arrays keep scikit-learn's messages.
    with pytest.raises(ValueError, match="X"):
        local_mean(X, X[:0])
    with pytest.raises(ValueError, match="X_query"):
        local_mean(X[None], X)

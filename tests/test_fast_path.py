"""The validation fast path of the functional API: input that is already a finite, C-contiguous
float ndarray skips scikit-learn's check_array, with results identical to the checked path."""

import numpy as np
import pytest

import localization._validation as validation
from localization import LocalizationWarning, _core, kernel_sum, local_mean


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


# -- the ready-input native path: one native call for ready input, None for anything else -----

def _strided(a):
    """The same values and dtype in a non-contiguous view (never ready: the checked path copies it)."""
    return None if a is None else np.repeat(a, 2, axis=0)[::2]


def _checked(fn, Q, X, values=None, sample_weight=None, **kw):
    """The same call through the Python path the ready path replaces (asking for the total
    weight or the error bound, which the ready path does not return, takes it)."""
    if fn is local_mean:
        return local_mean(Q, X, values, sample_weight=sample_weight, return_weight=True, **kw)[0]
    return kernel_sum(Q, X, values, sample_weight=sample_weight, return_error_bound=True, **kw)[0]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kw", [
    dict(bandwidth=0.5), dict(bandwidth=0.05), dict(kernel="Flat", bandwidth=0.7),
    dict(kernel="epanechnikov", bandwidth=0.8, algorithm="kd_tree"), dict(kernel="gaussian", bandwidth=2.0, algorithm="expansion"),
    dict(kernel="cauchy", bandwidth=0.3, algorithm="brute", n_jobs=1),
])
@pytest.mark.parametrize("values", [None, "1d", "2d"])
def test_ready_path_is_the_checked_path_bit_for_bit(dtype, kw, values, rng):
    Q, X = rng.normal(size=(9, 2)).astype(dtype), rng.normal(size=(120, 2)).astype(dtype)
    v = {None: None, "1d": rng.normal(size=120), "2d": rng.normal(size=(120, 3))}[values]
    v = None if v is None else v.astype(dtype)
    w = rng.random(120).astype(dtype)
    assert _core.ready_local_mean(Q, X, v, w, kw.get("kernel", "gaussian"), kw["bandwidth"]) is not None
    for weights in (None, w):
        fast, slow = local_mean(Q, X, v, sample_weight=weights, **kw), _checked(local_mean, Q, X, v, weights, **kw)
        assert fast.dtype == slow.dtype == dtype and fast.shape == slow.shape
        np.testing.assert_array_equal(fast, slow)
        fast, slow = kernel_sum(Q, X, v, sample_weight=weights, **kw), _checked(kernel_sum, Q, X, v, weights, **kw)
        assert fast.dtype == slow.dtype == np.float64 and fast.shape == slow.shape
        np.testing.assert_array_equal(fast, slow)
        # Converted input (a strided copy of each array) comes to the same result.
        np.testing.assert_array_equal(fast, kernel_sum(_strided(Q), _strided(X), _strided(v),
                                                       sample_weight=_strided(weights), **kw))
    # Leave-one-out sums on the samples themselves.
    np.testing.assert_array_equal(local_mean(X, X, v, exclude_self=True, **kw),
                                  _checked(local_mean, X, X, v, exclude_self=True, **kw))


def test_ready_path_flags_zero_weight_like_the_checked_path(rng):
    X = rng.normal(size=(50, 2))
    Q = np.vstack([X[:3], [[40.0, 40.0]]])
    kw = dict(kernel="tophat", bandwidth=0.5)
    with pytest.warns(LocalizationWarning, match="1 query has zero total kernel weight") as record:
        fast = local_mean(Q, X, X[:, 0].copy(), **kw)
    assert record[0].filename == __file__  # the warning points at the caller
    with pytest.warns(LocalizationWarning, match="1 query"):
        slow = _checked(local_mean, Q, X, X[:, 0].copy(), **kw)
    np.testing.assert_array_equal(fast, slow)
    assert np.isnan(fast[3]) and np.isfinite(fast[:3]).all()
    np.testing.assert_array_equal(kernel_sum(Q, X, **kw), _checked(kernel_sum, Q, X, **kw))


def _not_ready_cases(rng):
    Q, X = rng.normal(size=(5, 2)), rng.normal(size=(30, 2))
    v, w = rng.normal(size=30), rng.random(30)
    nan = X.copy()
    nan[2, 1] = np.nan
    inf_v = v.copy()
    inf_v[0] = np.inf
    return {
        "NaN in X": (Q, nan, v, w), "NaN in X_query": (nan[:5], X, v, w), "inf in values": (Q, X, inf_v, w),
        "inf in weights": (Q, X, v, np.where(np.arange(30) == 4, np.inf, w)),
        "negative weight": (Q, X, v, w - 0.5), "zero weights": (Q, X, v, np.zeros(30)),
        "mixed dtypes": (Q.astype(np.float32), X, v, w), "integer X": (Q, X.astype(np.int64), v, w),
        "Fortran X": (Q, np.asfortranarray(X), v, w), "strided values": (Q, X, np.repeat(v, 2)[::2], w),
        "ndarray subclass": (Q, X.view(np.matrix), v, w), "list": (Q.tolist(), X, v, w),
        "width mismatch": (Q[:, :1].copy(), X, v, w), "values length": (Q, X, v[:20].copy(), w),
        "weights length": (Q, X, v, w[:20].copy()), "empty X": (Q, X[:0], v[:0], w[:0]),
        "3-D values": (Q, X, v[:, None, None].copy(), w), "no value columns": (Q, X, np.zeros((30, 0)), w),
    }


def test_input_that_is_not_ready_takes_the_checked_path(rng):
    for case, (Q, X, v, w) in _not_ready_cases(rng).items():
        assert _core.ready_local_mean(Q, X, v, w, "gaussian", 0.5) is None, case
        assert _core.ready_kernel_sum(Q, X, v, w, "gaussian", 0.5) is None, case
    Q, X = rng.normal(size=(5, 2)), rng.normal(size=(30, 2))
    for kernel, h, algorithm in [("knn", 0.5, "auto"), ("nope", 0.5, "auto"), ("gaussian", 0.0, "auto"),
                                 ("gaussian", float("nan"), "auto"), ("gaussian", 0.5, "binned"), ("gaussian", 0.5, "tree")]:
        assert _core.ready_local_mean(Q, X, None, None, kernel, h, False, algorithm) is None
        assert _core.ready_kernel_sum(Q, X, None, None, kernel, h, False, algorithm) is None


def test_not_ready_input_keeps_the_checked_paths_errors_and_results(rng):
    """Every not-ready case gives what the checked path gives (the same error naming the
    argument, or the same converted result)."""
    for case, (Q, X, v, w) in _not_ready_cases(rng).items():
        outcomes = []
        for fn in (local_mean, lambda *a, **k: _checked(local_mean, *a, **k)):
            try:
                outcomes.append(fn(Q, X, v, sample_weight=np.asarray(w), bandwidth=0.5))
            except (ValueError, TypeError) as e:
                outcomes.append((type(e), str(e)))
        if isinstance(outcomes[0], tuple) and isinstance(outcomes[1], tuple):
            assert outcomes[0][0] is outcomes[1][0], case
        elif not isinstance(outcomes[0], tuple) and not isinstance(outcomes[1], tuple):
            np.testing.assert_allclose(outcomes[0], outcomes[1], rtol=1e-6, err_msg=case)
        else:
            raise AssertionError(f"{case}: {outcomes}")

"""The prepared reference (``_core.Reference``): what a fitted estimator keeps so that later calls
skip every per-call step that depends on the samples alone. Its results must be those of the raw
samples bit for bit on every path (for very few queries `auto` may take a path the raw call would
not build: then exact, or within the series' bound), and it must pickle, refuse bad input and
serve threads."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from sklearn.base import clone

from localization import _core
from localization.classification import LocalModeClassifier
from localization.density import KernelDensity
from localization.regression import LocalMeanRegressor, LocalPolynomialRegressor

KERNELS = [
    _core.KernelSpec("gaussian", 0.3),
    _core.KernelSpec("epanechnikov", 0.4),
    _core.KernelSpec("knn", n_neighbors=7, knn_profile="triweight"),
    _core.KernelSpec("dot", temperature=2.0),
]
GAUSSIAN = _core.KernelSpec()


def _data(dtype, n=1500, m=70, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(dtype)
    Q = rng.normal(size=(m, d)).astype(dtype)
    V = rng.normal(size=(n, 2)).astype(dtype)
    w = rng.uniform(0.1, 2.0, size=n).astype(dtype)
    w[::9] = 0
    return X, Q, V, w


def _fields(s):
    """The arrays of the core's sums, in order."""
    return s.num, s.den, s.log_scale, s.moments, s.cross


def _identical(a, b):
    if not isinstance(a, tuple):
        a, b = _fields(a), _fields(b)
    for x, y in zip(a, b):
        if x is None or y is None:
            assert x is None and y is None
        else:
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(x, y)


def _every_call(X, Q):
    """(queries, keyword arguments) of every kernel × algorithm × moments/hollow combination."""
    for kernel in KERNELS:
        for algorithm in ["auto", "brute", "kd_tree", "expansion"]:
            for degree, exclude_self in [(None, False), (1, False), (None, True)]:
                if degree is not None and repr(kernel).startswith("KernelSpec('dot'"):
                    continue
                yield (X if exclude_self else Q), dict(kernel=kernel, degree=degree, exclude_self=exclude_self, algorithm=algorithm)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d", [2, 20])
def test_reference_equals_raw_samples_bit_for_bit(dtype, d):
    X, Q, V, w = _data(dtype, d=d)
    for values, weights in [(None, None), (V, w)]:
        ref = _core.Reference(X, values, weights)
        for q, args in _every_call(X, Q):
            raw = _core.local_sums(q, X, values, weights, **args)
            for n_jobs in [1, 2, 1]:  # the last call reuses what the first ones built
                _identical(_core.local_sums(q, ref, n_jobs=n_jobs, **args), raw)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_reference_with_per_sample_and_per_query_bandwidths(dtype):
    X, Q, V, w = _data(dtype)
    rng = np.random.default_rng(1)
    hs = rng.uniform(0.2, 0.6, size=len(X)).astype(dtype)
    hq = rng.uniform(0.2, 0.6, size=len(Q)).astype(dtype)
    for kernel in ["gaussian", "biweight"]:
        raw = _core.local_sums(Q, X, V, w, kernel=_core.KernelSpec(kernel, sample_bandwidth=hs))
        _identical(_core.local_sums(Q, _core.Reference(X, V, w, hs), kernel=_core.KernelSpec(kernel)), raw)
        per_query = _core.KernelSpec(kernel, query_bandwidth=hq)
        raw = _core.local_sums(Q, X, V, w, kernel=per_query)
        _identical(_core.local_sums(Q, _core.Reference(X, V, w), kernel=per_query), raw)


def test_reference_local_polynomial_bit_for_bit():
    X, Q, V, w = _data(np.float64)
    ref = _core.Reference(X, V, w)
    for kernel in ["gaussian", "tricube"]:
        for degree in [0, 1, 2]:
            spec = _core.KernelSpec(kernel, 0.5)
            raw = _core.local_polynomial(Q, X, V, w, kernel=spec, degree=degree)
            _identical(_core.local_polynomial(Q, ref, kernel=spec, degree=degree), raw)


def test_reference_far_from_the_floating_range_middle():
    # Rescaled working copies (1e200 coordinates), and queries of another magnitude (raw path).
    X, Q, V, w = _data(np.float64)
    ref = _core.Reference(X * 1e200, V, w * 1e300)
    h = _core.KernelSpec("gaussian", 3e199)
    _identical(_core.local_sums(Q * 1e200, ref, kernel=h), _core.local_sums(Q * 1e200, X * 1e200, V, w * 1e300, kernel=h))
    X32, Q32 = X.astype(np.float32), (Q * 1e15).astype(np.float32)
    ref = _core.Reference(X32)
    h = _core.KernelSpec("gaussian", 1e14)
    _identical(_core.local_sums(Q32, ref, kernel=h), _core.local_sums(Q32, X32, kernel=h))


def test_reference_pickles_by_rebuilding():
    X, Q, V, w = _data(np.float64)
    hs = np.full(len(X), 0.4)
    ref = _core.Reference(X, V, w, hs)
    kernel = _core.KernelSpec("epanechnikov")
    before = _core.local_sums(Q, ref, kernel=kernel)
    again = pickle.loads(pickle.dumps(ref))
    assert (again.n_samples, again.n_features) == (len(X), 2)
    _identical(_core.local_sums(Q, again, kernel=pickle.loads(pickle.dumps(kernel))), before)


def test_reference_refuses_bad_input_naming_it():
    X, Q, V, w = _data(np.float64)
    with pytest.raises(ValueError, match="X"):
        _core.Reference(np.zeros((0, 2)))
    with pytest.raises(ValueError, match="values"):
        _core.Reference(X, V[:10])
    with pytest.raises(ValueError, match="sample_weight"):
        _core.Reference(X, None, -w)
    with pytest.raises(ValueError, match="bandwidth"):
        _core.Reference(X, None, None, np.zeros(len(X)))
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.Reference(np.asfortranarray(X))
    with pytest.raises(TypeError, match="values"):
        _core.Reference(X, V.astype(np.float32))
    ref = _core.Reference(X, V, w)
    for name, extra in [("values", dict(values=V)), ("sample_weight", dict(weights=w)),
                        ("sample_bandwidth", dict(kernel=_core.KernelSpec(sample_bandwidth=np.ones(len(X)))))]:
        with pytest.raises(ValueError, match=name):
            _core.local_sums(Q, ref, **dict(dict(kernel=GAUSSIAN), **extra))
    with pytest.raises(ValueError, match="X_query"):
        _core.local_sums(Q[:, :1].copy(), ref, kernel=GAUSSIAN)
    with pytest.raises(TypeError, match="X_query"):
        _core.local_sums(Q.astype(np.float32), ref, kernel=GAUSSIAN)
    with pytest.raises(ValueError, match="exclude_self"):
        _core.local_sums(Q, ref, kernel=GAUSSIAN, exclude_self=True)
    with pytest.raises(ValueError, match="bandwidth"):
        _core.local_sums(Q, _core.Reference(X, None, None, np.ones(len(X))), kernel=_core.KernelSpec(query_bandwidth=np.ones(len(Q))))
    # Still usable after the refusals.
    _identical(_core.local_sums(Q, ref, kernel=GAUSSIAN), _core.local_sums(Q, X, V, w, kernel=GAUSSIAN))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d", [2, 20])
def test_reference_takes_values_per_call_bit_for_bit(dtype, d):
    """A Reference built without values takes new ones at every call (the steps of an
    iteration): each call gives the raw samples' sums bit for bit, with few and many (the
    wide-values product) columns, and the layouts kept from earlier calls serve later ones."""
    X, Q, V, w = _data(dtype, d=d)
    rng = np.random.default_rng(2)
    steps = [V, rng.normal(size=(len(X), 10)).astype(dtype), 1e250 * V if dtype == np.float64 else 1e30 * V, V[:, :1].copy()]
    for weights in [None, w]:
        ref = _core.Reference(X, None, weights)
        for q, args in _every_call(X, Q):
            for values in steps:
                _identical(_core.local_sums(q, ref, values, **args), _core.local_sums(q, X, values, weights, **args))
    # Without values, the sums of the kernel weights alone, as before.
    _identical(_core.local_sums(Q, ref, kernel=GAUSSIAN), _core.local_sums(Q, X, None, w, kernel=GAUSSIAN))


def test_values_per_call_are_checked():
    X, Q, V, w = _data(np.float64)
    ref = _core.Reference(X, None, w)
    with pytest.raises(ValueError, match="values"):
        _core.local_sums(Q, ref, V[:10], kernel=GAUSSIAN)
    bad = V.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="values"):
        _core.local_sums(Q, ref, bad, kernel=GAUSSIAN)
    with pytest.raises(TypeError, match="values"):
        _core.local_sums(Q, ref, V.astype(np.float32), kernel=GAUSSIAN)
    with pytest.raises(ValueError, match="values"):
        _core.local_sums(Q, ref, np.asfortranarray(V), kernel=GAUSSIAN)
    with pytest.raises(ValueError, match="values"):
        _core.local_sums(Q, _core.Reference(X, V, w), V, kernel=GAUSSIAN)


@pytest.mark.parametrize("kernel", [dict(kernel="gaussian", bandwidth=0.3), dict(kernel="epanechnikov", bandwidth=0.5),
                                    dict(kernel="knn", n_neighbors=9)], ids=lambda k: k["kernel"])
def test_label_propagation_reuses_one_reference_across_iterations(kernel):
    from localization.engine import BoundKernel
    from localization.semi_supervised import LabelPropagation

    X, _, _, _ = _data(np.float64, n=2000)
    y = np.full(len(X), -1)
    y[:40] = (X[:40, 0] > 0).astype(int)
    built = []
    real = _core.Reference

    def counting(*args):
        built.append(args[1])
        return real(*args)

    lp = LabelPropagation(**kernel, max_iter=20)
    try:
        _core.Reference = counting
        lp.fit(X, y)
    finally:
        _core.Reference = real
    assert lp.n_iter_ > 2 and len(built) == 1 and built[0] is None, "one reference without values for the whole fit"
    # The same distributions as the raw samples at every step.
    prepare = BoundKernel.prepare
    try:
        BoundKernel.prepare = lambda self: self
        raw = LabelPropagation(**kernel, max_iter=20).fit(X, y)
    finally:
        BoundKernel.prepare = prepare
    assert raw.n_iter_ == lp.n_iter_
    np.testing.assert_array_equal(raw.label_distributions_, lp.label_distributions_)


def _estimators():
    return [
        (LocalMeanRegressor(kernel="gaussian", bandwidth=0.3), "predict"),
        (LocalMeanRegressor(kernel="epanechnikov", bandwidth=0.8), "predict"),
        (LocalMeanRegressor(kernel="knn", n_neighbors=5), "predict"),
        (LocalPolynomialRegressor(kernel="gaussian", bandwidth=0.5, degree=1), "predict"),
        (KernelDensity(kernel="gaussian", bandwidth=0.3), "score_samples"),
        (KernelDensity(kernel="biweight", bandwidth="scott"), "score_samples"),
        (LocalModeClassifier(kernel="gaussian", bandwidth=0.5), "predict_proba"),
    ]


@pytest.mark.parametrize("est, method", _estimators(), ids=lambda e: repr(e) if not isinstance(e, str) else e)
def test_fitted_estimators_reuse_their_reference(est, method):
    X, Q, V, w = _data(np.float64, n=3000)
    y = (X[:, 0] > 0).astype(int) if isinstance(est, LocalModeClassifier) else V[:, 0]
    est.fit(X, y, sample_weight=w + 0.1)
    first = getattr(est, method)(Q)
    bk = est._bound()
    assert bk._references, "the fitted bound kernel keeps a prepared reference"
    kept = list(bk._references)
    np.testing.assert_array_equal(getattr(est, method)(Q), first)
    assert bk._references == kept, "a second call builds nothing new"
    # The same predictions as an estimator whose bound kernel is not prepared (raw samples).
    raw = clone(est).fit(X, y, sample_weight=w + 0.1)
    raw._bound()._references = None
    np.testing.assert_array_equal(getattr(raw, method)(Q), first)
    # Pickled (the reference is left out and rebuilt), and from several threads at once.
    again = pickle.loads(pickle.dumps(est))
    assert again._bound_cache == [None]
    np.testing.assert_array_equal(getattr(again, method)(Q), first)
    with ThreadPoolExecutor(4) as pool:
        for out in pool.map(lambda _: getattr(again, method)(Q), range(8)):
            np.testing.assert_array_equal(out, first)


def test_refit_and_new_bandwidth_bind_anew():
    X, Q, V, w = _data(np.float64)
    est = LocalMeanRegressor(bandwidth=0.3).fit(X, V[:, 0])
    a = est.predict(Q)
    est.set_params(bandwidth=0.6).fit(X, V[:, 0])
    b = est.predict(Q)
    np.testing.assert_array_equal(b, LocalMeanRegressor(bandwidth=0.6).fit(X, V[:, 0]).predict(Q))
    assert not np.array_equal(a, b)
    est.fit(X[:500], V[:500, 0])
    np.testing.assert_array_equal(est.predict(Q), LocalMeanRegressor(bandwidth=0.6).fit(X[:500], V[:500, 0]).predict(Q))


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-13), (np.float32, 1e-5)])
def test_few_queries_on_a_large_model_take_the_kept_tree_and_far_field(dtype, rtol):
    # Below 16 / 64 queries a prepared reference uses what the raw call would not build for so
    # few: the kd-tree of a compact kernel (exact) and the Gaussian's far-field moments (within
    # 1e-14 of the sum of kernel weights; queries far from every sample are summed exactly:
    # the last one here, whose local mean is undefined in float64 on either path).
    rng = np.random.default_rng(1)
    X = rng.normal(size=(150_000, 2)).astype(dtype)
    y = np.sin(X[:, 0]).astype(dtype)
    Q = np.vstack([rng.normal(size=(7, 2)), [[40.0, -40.0]]]).astype(dtype)
    for est, method in [
        (LocalMeanRegressor(kernel="gaussian", bandwidth=0.3), "predict"),
        (KernelDensity(kernel="gaussian", bandwidth=0.3), "score_samples"),
        (LocalMeanRegressor(kernel="epanechnikov", bandwidth=0.02), "predict"),
    ]:
        est.fit(X, y) if method == "predict" else est.fit(X)
        q = Q if est.kernel == "gaussian" else Q[:7]  # (no sample within the support of the far one)
        got = getattr(est, method)(q)
        raw = clone(est).fit(X, y) if method == "predict" else clone(est).fit(X)
        raw._bound()._references = None
        want = getattr(raw, method)(q)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol if method == "predict" else 0)
        with ThreadPoolExecutor(2) as pool:
            for out in pool.map(lambda _: getattr(est, method)(q), range(4)):
                np.testing.assert_array_equal(out, got)

"""Bad input gets a clear ValueError/TypeError naming the argument, or the right answer; never a panic."""

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from localization import (
    KernelDensity,
    LocalMeanDenoiser,
    LocalMeanRegressor,
    LocalModeClassifier,
    LocalPolynomialRegressor,
    MeanShift,
    MedoidShift,
    NearestNeighbors,
    NonLocalMeans,
    QuickShift,
    SelfLocalMean,
    _core,
    kernel_sum,
    local_mean,
)
from localization.denoise import bilateral, nl_means

X = np.random.default_rng(0).random((20, 2))
y = np.arange(20.0)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_rejected_by_name(bad):
    Xb = X.copy()
    Xb[3, 1] = bad
    with pytest.raises(ValueError, match="X"):
        local_mean(X, Xb, y)
    with pytest.raises(ValueError, match="X_query"):
        local_mean(Xb, X, y)
    yb = y.copy()
    yb[0] = bad
    with pytest.raises(ValueError, match="values"):
        local_mean(X, X, yb)
    with pytest.raises(ValueError, match="sample_weight"):
        local_mean(X, X, y, sample_weight=np.where(np.arange(20) == 2, bad, 1.0))
    with pytest.raises(ValueError):
        LocalMeanRegressor().fit(Xb, y)


@pytest.mark.parametrize("h", [0.0, -1.0, np.nan, np.inf, "nope", [1.0, 2.0, 3.0], [0.0, 1.0]])
def test_bad_bandwidths(h):
    with pytest.raises((ValueError, TypeError), match="bandwidth|rule"):
        local_mean(X, X, y, bandwidth=h)
    with pytest.raises((ValueError, TypeError), match="bandwidth|rule"):
        KernelDensity(bandwidth=h).fit(X)


def test_shapes_and_emptiness():
    with pytest.raises(ValueError, match="features"):
        local_mean(np.zeros((3, 3)), X, y)
    with pytest.raises(ValueError, match="rows"):
        local_mean(X, X, y[:5])
    with pytest.raises(ValueError, match="sample"):
        local_mean(X, np.zeros((0, 2)), np.zeros(0))
    with pytest.raises(ValueError):
        local_mean(np.zeros((0, 2)), X, y)
    with pytest.raises(ValueError, match="sample_weight"):
        local_mean(X, X, y, sample_weight=np.ones(3))
    with pytest.raises(ValueError, match="sample_weight"):
        local_mean(X, X, y, sample_weight=-np.ones(20))
    with pytest.raises(ValueError, match="zero everywhere"):
        local_mean(X, X, y, sample_weight=np.zeros(20))
    with pytest.raises(ValueError, match="n_neighbors"):
        local_mean(X, X, y, kernel="knn", n_neighbors=21)
    with pytest.raises(ValueError, match="n_neighbors"):
        local_mean(X, X, y, kernel="knn", n_neighbors=0)
    with pytest.raises(ValueError, match="algorithm"):
        local_mean(X, X, y, algorithm="magic")


def test_dtypes():
    Xi = (X * 100).astype(np.int64)
    assert local_mean(Xi, Xi, y, bandwidth=5.0).dtype == np.float64
    with pytest.raises(TypeError, match="object"):
        local_mean(X, X.astype(object), y)
    with pytest.raises(TypeError):
        local_mean(X, np.array([["a", "b"]] * 20), y)
    with pytest.raises(TypeError, match="values"):
        local_mean(X, X, np.array(["a"] * 20))


def test_layouts_give_the_same_answer():
    want = local_mean(X, X, y, bandwidth=0.3)
    F = np.asfortranarray(X)
    big = np.zeros((40, 4))
    big[::2, ::2] = X
    strided = big[::2, ::2]
    assert not strided.flags.c_contiguous
    np.testing.assert_array_equal(local_mean(F, F, y, bandwidth=0.3), want)
    np.testing.assert_array_equal(local_mean(strided, strided, y, bandwidth=0.3), want)
    np.testing.assert_array_equal(local_mean(X, X, np.ascontiguousarray(np.stack([y, y], 1))[:, 0], bandwidth=0.3), want)


def test_native_layer_refuses_bad_memory_without_panicking():
    gaussian = _core.KernelSpec()
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.local_sums(np.asfortranarray(np.zeros((3, 2))), np.zeros((3, 2)), kernel=gaussian)
    with pytest.raises(TypeError):
        _core.local_sums(np.zeros((3, 2), np.float32), np.zeros((3, 2)), kernel=gaussian)
    with pytest.raises(TypeError):
        _core.local_sums(np.zeros(3), np.zeros((3, 2)), kernel=gaussian)
    with pytest.raises(ValueError):
        _core.local_sums(np.zeros((3, 2)), np.zeros((3, 2)), kernel=gaussian, n_jobs=0)
    with pytest.raises(ValueError):
        _core.local_sums(np.zeros((3, 2)), np.zeros((3, 2)), kernel=gaussian, degree=5)
    with pytest.raises(ValueError):
        _core.local_sums(np.zeros((3, 2)), np.zeros((3, 2)), exclude_self=True, kernel=_core.KernelSpec("knn", n_neighbors=3))
    with pytest.raises(TypeError):
        _core.local_sums(np.zeros((3, 2)), np.zeros((3, 2)), kernel=_core.KernelSpec(query_bandwidth=np.zeros((3, 1))))
    with pytest.raises(TypeError):
        _core.local_sums(np.zeros((3, 2)), np.zeros((3, 2)), kernel=_core.KernelSpec(query_bandwidth=np.ones(3, np.float32)))


def test_one_sample_duplicates_and_tiny_bandwidths():
    assert local_mean([[5.0]], [[0.0]], [7.0], bandwidth=1e-12)[0] == 7.0
    D = np.zeros((10, 2))
    np.testing.assert_allclose(local_mean(D, D, np.arange(10.0)), 4.5)
    assert LocalMeanRegressor().fit([[1.0]], [2.0]).predict([[3.0]])[0] == 2.0
    with pytest.warns(UserWarning):
        assert np.isnan(local_mean([[5.0]], [[0.0]], [7.0], kernel="epanechnikov", bandwidth=1e-12)[0])
    assert np.isfinite(KernelDensity(bandwidth=1e-6).fit(X).score_samples(X + 1)).all()


finite = st.floats(-1e6, 1e6, allow_nan=False, width=64)
anyfloat = st.floats(allow_nan=True, allow_infinity=True, width=64)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(0, 6),
    m=st.integers(0, 4),
    d=st.integers(0, 3),
    data=st.data(),
    kernel=st.sampled_from(["gaussian", "tophat", "cosine", "knn", "exponential", "linear"]),
    h=st.one_of(anyfloat, st.floats(1e-300, 1e300)),
    k=st.integers(-1, 8),
    jobs=st.sampled_from([None, 1, 2, -1]),
    algorithm=st.sampled_from(["auto", "brute", "expansion"]),
)
def test_fuzz_public_api_never_panics(n, m, d, data, kernel, h, k, jobs, algorithm):
    elem = st.one_of(finite, anyfloat)
    Xf = data.draw(arrays(np.float64, (n, d), elements=elem))
    Qf = data.draw(arrays(np.float64, (m, d), elements=elem))
    yf = data.draw(arrays(np.float64, (n,), elements=elem))
    calls = [
        lambda: local_mean(Qf, Xf, yf, kernel=kernel, bandwidth=h, n_neighbors=k, algorithm=algorithm, n_jobs=jobs),
        lambda: kernel_sum(Qf, Xf, kernel=kernel, bandwidth=h, n_neighbors=k, log=True),
        lambda: LocalPolynomialRegressor(kernel=kernel, bandwidth=h, n_neighbors=k, algorithm=algorithm).fit(Xf, yf).predict(Qf),
        lambda: LocalModeClassifier(kernel=kernel, bandwidth=h, n_neighbors=k).fit(Xf, yf > 0).predict(Qf),
        lambda: KernelDensity(kernel=kernel, bandwidth=h).fit(Xf).score_samples(Qf),
        lambda: NearestNeighbors(n_neighbors=k).fit(Xf).kneighbors(Qf),
        lambda: LocalMeanRegressor(bandwidth="loo").fit(Xf, yf),
        # The mode seekers and the denoisers
        lambda: MeanShift(kernel=kernel, bandwidth=h, n_jobs=jobs, max_iter=20).fit(Xf).predict(Qf),
        lambda: MeanShift(kernel=kernel, bandwidth=h, blurring=True, max_iter=5).fit(Xf),
        lambda: MeanShift(bandwidth=h, algorithm="grid", max_iter=20).fit(Xf),
        lambda: MedoidShift(kernel=kernel, bandwidth=h, n_neighbors=k, n_jobs=jobs).fit(Xf),
        lambda: QuickShift(kernel=kernel, bandwidth=h, n_neighbors=k, algorithm=algorithm, n_jobs=jobs).fit(Xf),
        lambda: QuickShift(kernel=kernel, bandwidth=h, window=h, max_dist=abs(h)).fit(Xf),
        lambda: SelfLocalMean(spatial_bandwidth=h, range_bandwidth=h, max_iter=5, n_jobs=jobs).fit(Xf, yf).predict(Qf),
        lambda: LocalMeanDenoiser(sigma=h).fit(Xf).transform(Qf),
        lambda: bilateral(Xf, spatial_bandwidth=h, range_bandwidth=h, n_jobs=jobs),
        lambda: nl_means(Xf, patch_size=3, patch_distance=k, h=h, n_jobs=jobs),
        lambda: NonLocalMeans(patch_size=3, patch_distance=k, h=h, image_shape=(n, d)).fit(Xf.reshape(1, -1)),
    ]
    for call in calls:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                call()
        except (ValueError, TypeError):
            pass
        except BaseException as e:  # a PanicException derives from BaseException
            raise AssertionError(f"unexpected {type(e).__name__}: {e}") from e


# The mode seekers and the denoisers, one bad argument at a time: a clear error naming it.
_FIT = {
    "MeanShift": lambda A, **kw: MeanShift(**kw).fit(A),
    "MedoidShift": lambda A, **kw: MedoidShift(**kw).fit(A),
    "QuickShift": lambda A, **kw: QuickShift(**kw).fit(A),
    "SelfLocalMean": lambda A, **kw: SelfLocalMean(**kw).fit(A, np.arange(len(A), dtype=float)),
    "NonLocalMeans": lambda A, **kw: NonLocalMeans(patch_size=3, patch_distance=2, image_shape=(4, 5), **kw).fit(
        A.reshape(-1, 20) if getattr(A, "ndim", 0) == 2 and A.size and A.size % 20 == 0 else A
    ),
    "LocalMeanDenoiser": lambda A, **kw: LocalMeanDenoiser(**kw).fit(A),
    "bilateral": lambda A, **kw: bilateral(A, **kw),
    "nl_means": lambda A, **kw: nl_means(A, patch_size=3, patch_distance=2, **kw),
}
_BANDWIDTH = {"MeanShift": "bandwidth", "MedoidShift": "bandwidth", "QuickShift": "bandwidth",
              "SelfLocalMean": "spatial_bandwidth", "NonLocalMeans": "h", "LocalMeanDenoiser": "sigma",
              "bilateral": "spatial_bandwidth", "nl_means": "h"}
_GOOD = np.random.default_rng(3).random((8, 5))


def _bad(kind):
    A = _GOOD.copy()
    if kind in ("nan", "inf"):
        A[2, 3] = np.nan if kind == "nan" else np.inf
        return A, "NaN|infinity"
    if kind == "empty":
        return np.zeros((0, 5)), "empty|0 sample|minimum"
    if kind == "text":
        return np.full(A.shape, "a"), "dtype|string|convert|text"
    if kind == "object":
        return A.astype(object).tolist() + [["x"] * 5], "dtype|string|convert|could not|text"
    return A.astype(np.complex128), "omplex"


@pytest.mark.parametrize("what", list(_FIT))
@pytest.mark.parametrize("kind", ["nan", "inf", "empty", "text", "object", "complex"])
def test_mode_seekers_and_denoisers_refuse_bad_data_by_name(what, kind):
    A, match = _bad(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises((ValueError, TypeError), match=match):
            _FIT[what](A)


@pytest.mark.parametrize("what", list(_FIT))
@pytest.mark.parametrize("h", [0.0, -1.0, np.nan, np.inf, "wide", True])
def test_mode_seekers_and_denoisers_refuse_a_bad_bandwidth_by_name(what, h):
    name = _BANDWIDTH[what]
    with pytest.raises((ValueError, TypeError), match=name):
        _FIT[what](_GOOD, **{name: h})


@pytest.mark.parametrize("what", list(_FIT))
def test_mode_seekers_and_denoisers_take_non_contiguous_input(what):
    """Fortran-ordered and strided views give the result of the contiguous copy."""
    big = np.random.default_rng(4).random((8, 10))
    views = [np.asfortranarray(_GOOD), big[:, ::2]]
    kw = {_BANDWIDTH[what]: 0.5}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = _FIT[what](np.ascontiguousarray(_GOOD if what != "bilateral" else _GOOD), **kw)
        for V in views:
            got = _FIT[what](V, **kw)
            ref = want if V is views[0] else _FIT[what](np.ascontiguousarray(V), **kw)
            for attr in ("labels_", "y_denoised_", "X_fit_"):
                if hasattr(ref, attr):
                    np.testing.assert_array_equal(getattr(got, attr), getattr(ref, attr))
            if isinstance(ref, np.ndarray):
                np.testing.assert_array_equal(got, ref)


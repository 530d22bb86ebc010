"""No silent wrong answers: cancellation on offset data, extreme scales, overflowing sums.

References are float64 direct differences Σ (q_k − x_k)² on the same (possibly float32) data.
"""

import warnings

import numpy as np
import pytest

from localization import KernelDensity, LocalPolynomialRegressor, MeanShift, NearestNeighbors, kernel_matrix, kernel_sum, local_mean
from localization.cluster import MedoidShift, QuickShift


def direct_d2(Q, X):
    Q, X = Q.astype(np.float64), X.astype(np.float64)
    return ((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1)


def offset_data(kind, d, dtype, rng, n=400, m=40):
    """Points whose distances are small against their norms."""
    if kind == "offset":  # every coordinate near a common offset
        off, noise = {np.float32: (100.0, 1.0), np.float64: (1e5, 0.01)}[dtype]
        X, Q = off + noise * rng.random((n, d)), off + noise * rng.random((m, d))
    elif kind == "offset10":  # ≈ 10, the float32 case of the issue in d = 32
        X, Q = 10 + 0.1 * rng.random((n, d)), 10 + 0.1 * rng.random((m, d))
    elif kind == "clusters":  # two far-apart clusters: centring alone does not help
        c = np.zeros(d)
        c[0] = {np.float32: 1e3, np.float64: 1e7}[dtype]
        s = {np.float32: 1.0, np.float64: 0.01}[dtype]
        X = np.vstack([c + s * rng.standard_normal((n // 2, d)), -c + s * rng.standard_normal((n // 2, d))])
        Q = np.vstack([c + s * rng.standard_normal((m // 2, d)), -c + s * rng.standard_normal((m // 2, d))])
    else:  # queries far from the references
        s = {np.float32: 1.0, np.float64: 0.01}[dtype]
        X, Q = s * rng.standard_normal((n, d)), s * rng.standard_normal((m, d)) + {np.float32: 3e2, np.float64: 3e6}[dtype] * s
    return np.ascontiguousarray(X, dtype=dtype), np.ascontiguousarray(Q, dtype=dtype)


KINDS = ["offset", "offset10", "clusters", "far"]
DIMS = [2, 8, 16, 32, 64, 784]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("kind", KINDS)
def test_nearest_neighbours_on_offset_data(kind, d, dtype):
    rng = np.random.default_rng(d)
    # More samples than one reference tile of the brute force (512), so candidates are screened.
    X, Q = offset_data(kind, d, dtype, rng, n=1200)
    D2 = direct_d2(Q, X)
    k = 5
    want = np.sort(D2, axis=1)[:, :k]
    for algorithm in ["brute", "auto"]:
        dist, ind = NearestNeighbors(n_neighbors=k, algorithm=algorithm).fit(X).kneighbors(Q)
        rtol = 1e-5 if dtype == np.float32 else 1e-12
        # The returned rows are k nearest ones (up to ties at the rounding of the distances)...
        np.testing.assert_allclose(np.take_along_axis(D2, ind, 1), want, rtol=2 * rtol)
        # ... and their distances are the direct ones.
        np.testing.assert_allclose(dist, np.sqrt(want), rtol=rtol)
        if dtype == np.float64:
            np.testing.assert_array_equal(ind, np.argsort(D2, axis=1, kind="stable")[:, :k])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("kind", KINDS)
def test_local_means_and_kde_on_offset_data(kind, d, dtype):
    rng = np.random.default_rng(100 + d)
    X, Q = offset_data(kind, d, dtype, rng)
    D2 = direct_d2(Q, X)
    y = rng.standard_normal(len(X))
    # A bandwidth near the nearest-neighbour distances: every term matters.
    h = float(np.sqrt(np.median(np.sort(D2, 1)[:, 0])))
    K = np.exp(-D2 / (2 * h * h))
    tol = 2e-5 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(local_mean(Q, X, y.astype(dtype), bandwidth=h), K @ y / K.sum(1), rtol=0, atol=tol)
    np.testing.assert_allclose(kernel_sum(Q, X, bandwidth=h, log=True), np.log(K.sum(1)), rtol=tol, atol=tol)
    want = np.log(K.sum(1) / len(X)) - d * np.log(h) - 0.5 * d * np.log(2 * np.pi)
    got = KernelDensity(bandwidth=h).fit(X).score_samples(Q)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    # A compact kernel (its support decides which pairs count at all).
    E = np.clip(1 - D2 / (4 * h * h), 0, None)
    ok = E.sum(1) > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = local_mean(Q, X, y.astype(dtype), kernel="epanechnikov", bandwidth=2 * h)
    np.testing.assert_allclose(got[ok], (E @ y)[ok] / E.sum(1)[ok], rtol=0, atol=20 * tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_per_sample_and_per_query_bandwidths_on_offset_data(dtype):
    """The engine's sample-point and balloon bandwidths (one h per sample, per query)."""
    from localization import _core

    rng = np.random.default_rng(5)
    X, Q = offset_data("clusters", 32, dtype, rng)
    D2 = direct_d2(Q, X)
    y = rng.standard_normal(len(X))
    h0 = np.sqrt(np.median(np.sort(D2, 1)[:, 0]))
    hx, hq = h0 * (0.5 + rng.random(len(X))), h0 * (0.5 + rng.random(len(Q)))
    atol = 2e-5 if dtype == np.float32 else 1e-11
    s = _core.local_sums(Q, X, y[:, None].astype(dtype), kernel=_core.KernelSpec(sample_bandwidth=hx.astype(dtype)))
    num, den = s.num, s.den
    K = np.exp(-D2 / (2 * hx[None, :] ** 2))
    np.testing.assert_allclose(num[:, 0] / den, K @ y / K.sum(1), atol=atol)
    s = _core.local_sums(Q, X, y[:, None].astype(dtype), kernel=_core.KernelSpec(query_bandwidth=hq.astype(dtype)))
    num, den = s.num, s.den
    K = np.exp(-D2 / (2 * hq[:, None] ** 2))
    np.testing.assert_allclose(num[:, 0] / den, K @ y / K.sum(1), atol=atol)


# ------------------------------------------------------------------ extreme scales

def blobs(n=240, d=2, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0] * d, [6.0] + [0.0] * (d - 1), [0.0, 6.0] + [0.0] * (d - 2)])
    return centres[np.arange(n) % 3] + 0.6 * rng.standard_normal((n, d))


def run_all(s, dtype):
    """Every scale-invariant answer at coordinates and bandwidths times s."""
    X = (blobs() * s).astype(dtype)
    X20 = (np.random.default_rng(1).standard_normal((300, 20)) * s).astype(dtype)
    y = np.sin(blobs()[:, 0]).astype(dtype)
    out = {}
    for name, Z in [("knn2", X), ("knn20", X20)]:
        dist, ind = NearestNeighbors(n_neighbors=4).fit(Z).kneighbors(Z[:30])
        out[name + "_ind"], out[name + "_dist"] = ind, dist / s
    out["flat"] = MeanShift(bandwidth=1.5 * s).fit(X).labels_
    out["gauss"] = MeanShift(bandwidth=1.0 * s, kernel="gaussian").fit(X).labels_
    ms = MeanShift(bandwidth=1.5 * s, bin_seeding=True, algorithm="grid").fit(X)
    out["grid"], out["grid_centres"] = ms.labels_, ms.cluster_centers_ / s
    out["medoid"] = MedoidShift(bandwidth=1.0 * s).fit(X).labels_
    out["medoid_knn"] = MedoidShift(bandwidth=1.0 * s, n_neighbors=20).fit(X).labels_
    out["quick"] = QuickShift(bandwidth=0.7 * s, max_dist=2.0 * s).fit(X).labels_
    out["mean"] = local_mean(X, X, y, bandwidth=0.7 * s)
    out["mean20"] = local_mean(X20, X20, X20[:, :2] / s, bandwidth=3.0 * s)
    out["mean_knn20"] = local_mean(X20, X20, X20[:, :2] / s, kernel="knn", n_neighbors=7)
    out["kde"] = KernelDensity(bandwidth=0.7 * s).fit(X).score_samples(X) + 2 * np.log(s)
    out["kde_epa"] = KernelDensity(kernel="epanechnikov", bandwidth=2.0 * s).fit(X).score_samples(X) + 2 * np.log(s)
    out["kmat"] = kernel_matrix(X[:20], X, bandwidth=0.7 * s)
    for degree in (1, 2):
        out[f"poly{degree}"] = LocalPolynomialRegressor(degree=degree, bandwidth=1.0 * s).fit(X, y).predict(X[:50])
    return out


@pytest.mark.parametrize("dtype,scales", [(np.float64, [2.0**600, 2.0**-600, 1e200, 1e-200, 1e30]),
                                          (np.float32, [2.0**80, 2.0**-80, 1e30, 1e-25])])
def test_extreme_scales_change_nothing(dtype, scales):
    base = run_all(1.0, dtype)
    for s in scales:
        got = run_all(s, dtype)
        exact = np.log2(s) == round(np.log2(s))  # a power of two: the same bits
        for key, want in base.items():
            have = got[key]
            if key.startswith("kde"):  # the log-normaliser takes log(h) as given
                tol = 1e-5 if dtype == np.float32 else 1e-12 if exact else 1e-9
                np.testing.assert_allclose(have, want, rtol=tol, err_msg=f"{key} at scale {s}")
            elif want.dtype.kind in "iu" or exact:
                np.testing.assert_array_equal(have, want, err_msg=f"{key} at scale {s}")
            else:
                tol = 1e-4 if dtype == np.float32 else 1e-9
                np.testing.assert_allclose(have, want, rtol=tol, atol=tol, err_msg=f"{key} at scale {s}")


def test_kernel_density_score_function_at_extreme_scales():
    X = blobs()
    want = KernelDensity(bandwidth=0.7).fit(X).score_function(X[:10])
    for s in [2.0**600, 2.0**-600]:
        got = KernelDensity(bandwidth=0.7 * s).fit(X * s).score_function(X[:10] * s)
        np.testing.assert_array_equal(got * s, want)


def test_a_bandwidth_too_small_for_the_data_is_a_clear_error():
    X = blobs()
    with pytest.raises(ValueError, match="bandwidth"):
        local_mean(X, X, bandwidth=1e-200)
    with pytest.raises(ValueError, match="bandwidth"):
        MeanShift(bandwidth=1e-200, kernel="epanechnikov").fit(X)


@pytest.mark.parametrize("dtype,tiny", [(np.float64, 5e-324), (np.float64, 1e-300), (np.float32, 1e-45), (np.float32, 1e-30)])
def test_coordinates_far_below_the_bandwidth(dtype, tiny):
    """Data of magnitude 1e-300 (or subnormal) under h = 1: every kernel value is 1, so local
    means are plain means. The bandwidth takes part in choosing the exact rescaling; scaled by
    the coordinates alone it overflowed and the call was refused (found by hypothesis with
    LabelPropagation)."""
    X = (np.arange(8, dtype=np.float64)[:, None] * tiny).astype(dtype)
    y = np.arange(8, dtype=dtype)
    for kernel in ("gaussian", "epanechnikov", "cauchy"):
        np.testing.assert_allclose(local_mean(X, X, y, kernel=kernel, bandwidth=1.0), np.full(8, y.mean()), rtol=1e-6)
        np.testing.assert_allclose(kernel_sum(X[:2], X, kernel=kernel, bandwidth=1.0), [8.0, 8.0], rtol=1e-6)
        np.testing.assert_allclose(kernel_matrix(X[:2], X, kernel=kernel, bandwidth=1.0), np.ones((2, 8)), rtol=1e-6)


# ------------------------------------------------------------------ overflowing sums

@pytest.mark.parametrize("dtype,factors", [(np.float64, [2.0**1000, 1e300, 2.0**-1060, 1e-310]), (np.float32, [2.0**120, 1e36, 2.0**-140, 1e-42])])
def test_extreme_sample_weights_are_scale_free(dtype, factors):
    """Weights near the float maximum or subnormal give the answers of the same weights
    brought into the ordinary range by an exact power of two."""
    rng = np.random.default_rng(3)
    X = blobs().astype(dtype)
    X20 = rng.standard_normal((200, 20)).astype(dtype)
    y = rng.standard_normal(len(X)).astype(dtype)
    w = (0.5 + rng.random(len(X))).astype(dtype)

    def answers(ww, log_unit):
        assert np.all(ww > 0)
        return {
            "mean": local_mean(X, X, y, bandwidth=0.7, sample_weight=ww),
            "mean20": local_mean(X20, X20, X20[:, :3], bandwidth=3.0, sample_weight=ww[:200]),
            "mean_epa": local_mean(X, X, y, kernel="epanechnikov", bandwidth=1.5, sample_weight=ww),
            "kde": KernelDensity(bandwidth=0.7).fit(X, sample_weight=ww).score_samples(X),
            "kde_epa": KernelDensity(kernel="epanechnikov", bandwidth=1.5).fit(X, sample_weight=ww).score_samples(X),
            "log_sum": kernel_sum(X, X, bandwidth=0.7, sample_weight=ww, log=True) - log_unit,
            "flat": MeanShift(bandwidth=1.5).fit(X, sample_weight=ww).cluster_centers_,
            "gauss": MeanShift(bandwidth=1.0, kernel="gaussian").fit(X, sample_weight=ww).cluster_centers_,
            "medoid": MedoidShift(bandwidth=1.0).fit(X, sample_weight=ww).labels_,
            "quick": QuickShift(bandwidth=0.7).fit(X, sample_weight=ww).labels_,
            "quick_window": QuickShift(bandwidth=0.7, window=2.1).fit(X, sample_weight=ww).labels_,
        }

    for f in factors:
        ww = (w * f).astype(dtype)  # as stored: rounded, subnormal ones to a few bits
        e = int(np.frexp(ww.max())[1])
        ordinary = np.ldexp(ww, -e).astype(dtype)  # the same ratios exactly, around 1
        assert np.array_equal(np.ldexp(ordinary, e).astype(dtype), ww)
        got, want = answers(ww, e * np.log(2.0)), answers(ordinary, 0.0)
        for key in want:
            assert np.all(np.isfinite(got[key])), f"{key} with weights × {f}"
            tol = 1e-5 if dtype == np.float32 else 1e-12
            np.testing.assert_allclose(got[key], want[key], rtol=tol, atol=tol, err_msg=f"{key} with weights × {f}")


@pytest.mark.parametrize("dtype,big", [(np.float64, 1.5e308), (np.float32, 3e38), (np.float64, 1e-320)])
def test_values_near_the_float_limits(dtype, big):
    rng = np.random.default_rng(4)
    X = blobs().astype(dtype)
    v = rng.random((len(X), 2))
    V = (v * big).astype(dtype)
    for kernel, h in [("gaussian", 0.7), ("epanechnikov", 1.5), ("knn", None)]:
        kw = dict(kernel=kernel, bandwidth=h) if h else dict(kernel=kernel, n_neighbors=9)
        got = local_mean(X, X, V, **kw).astype(np.float64)
        want = local_mean(X.astype(np.float64), X.astype(np.float64), V.astype(np.float64) / big, **kw) * big
        assert np.all(np.isfinite(got))
        # (Subnormal results carry only the bits they have.)
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=4 * np.finfo(dtype).smallest_subnormal)
    # The unnormalised sum exceeds the float range: it comes back with its excess in log_scale.
    from localization import _core

    s = _core.local_sums(X, X, V, kernel=_core.KernelSpec("epanechnikov", 1.5))
    num, den, log_scale = s.num, s.den, s.log_scale
    assert np.all(np.isfinite(num)) and np.all(np.isfinite(den))
    ratio = num.astype(np.float64) / den.astype(np.float64)[:, None]
    np.testing.assert_allclose(ratio, local_mean(X, X, V, kernel="epanechnikov", bandwidth=1.5), rtol=1e-5)


@pytest.mark.parametrize("dtype,offset", [(np.float64, 1e7), (np.float32, 1e3)])
def test_mode_seeking_on_offset_data(dtype, offset):
    """MeanShift, MedoidShift and QuickShift in 20 features (the matrix-product path) find the
    same clusters whether or not the data sit at a large common offset."""
    X = blobs(d=20, seed=2)
    Xo = (X + offset).astype(dtype)
    X = X.astype(dtype)
    ms, mo = MeanShift(bandwidth=2.0, kernel="gaussian").fit(X), MeanShift(bandwidth=2.0, kernel="gaussian").fit(Xo)
    np.testing.assert_array_equal(mo.labels_, ms.labels_)
    np.testing.assert_allclose(mo.cluster_centers_ - offset, ms.cluster_centers_, atol=1e-2 if dtype == np.float32 else 1e-6)
    for est in [MedoidShift(bandwidth=2.0), QuickShift(bandwidth=1.0, max_dist=4.0)]:
        np.testing.assert_array_equal(est.fit(Xo).labels_, est.fit(X).labels_, err_msg=type(est).__name__)


def test_series_expansion_on_offset_data():
    """The one-and-two-feature series path works relative to the samples' box: a large offset
    changes nothing."""
    rng = np.random.default_rng(6)
    for d in (1, 2):
        X = rng.random((800, d))
        y = np.sin(6 * X.sum(1))
        Q = rng.random((200, d))
        for offset in (1e8, -3e9):
            for degree in (0, 1):
                fits = [LocalPolynomialRegressor(degree=degree, bandwidth=0.05, algorithm=a).fit(X + offset, y).predict(Q + offset)
                        for a in ("brute", "expansion")]
                np.testing.assert_allclose(fits[1], fits[0], rtol=1e-10, atol=1e-10, err_msg=f"d={d} offset={offset} degree={degree}")


def test_quickshift_window_weights_near_the_float_maximum():
    """The windowed density sums weights of 1e308 (it would overflow to inf and tie every
    sample); the labels are those of unit weights and the density is only scaled."""
    X = blobs()
    one = QuickShift(bandwidth=0.7, window=2.1).fit(X)
    big = QuickShift(bandwidth=0.7, window=2.1).fit(X, sample_weight=np.full(len(X), 1e308))
    np.testing.assert_array_equal(big.labels_, one.labels_)
    assert len(np.unique(one.labels_)) > 1

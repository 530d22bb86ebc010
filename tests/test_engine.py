import pickle
import threading
import warnings

import numpy as np
import pytest
from conftest import naive_local_sums

from localization import Balloon, Kernel, LocalizationWarning, SamplePoint, kernel_sum, local_mean
from localization.kernels import PROFILES, profile


@pytest.mark.parametrize("name", PROFILES)
@pytest.mark.parametrize("d", [1, 3, 24])
def test_local_mean_equals_the_definition(rng, name, d):
    X = rng.standard_normal((700, d))
    Q = rng.standard_normal((60, d))
    V = rng.standard_normal((700, 2))
    w = rng.random(700) + 0.1
    h = 1.5 if d < 10 else 6.0
    num, den = naive_local_sums(Q, X, V, lambda D: profile(name, D / h), w)
    got, tot = local_mean(Q, X, V, kernel=name, bandwidth=h, sample_weight=w, return_weight=True)
    ok = den > 0
    np.testing.assert_allclose(got[ok], num[ok] / den[ok, None], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tot, den, rtol=1e-10, atol=1e-300)


def test_float32_is_kept_and_close(rng):
    X = rng.random((2000, 2)).astype(np.float32)
    y = np.sin(X[:, 0])
    m32 = local_mean(X[:100], X, y, bandwidth=0.1)
    m64 = local_mean(X[:100].astype(float), X.astype(float), y.astype(float), bandwidth=0.1)
    assert m32.dtype == np.float32
    np.testing.assert_allclose(m32, m64, atol=2e-5)


def test_per_feature_balloon_and_sample_point_bandwidths(rng):
    X = rng.random((300, 2))
    Q = rng.random((30, 2))
    y = rng.random(300)
    h = np.array([0.2, 0.5])
    num, den = naive_local_sums(Q / h, X / h, y[:, None], lambda D: np.exp(-D**2 / 2))
    np.testing.assert_allclose(local_mean(Q, X, y, bandwidth=h), num[:, 0] / den, rtol=1e-12)
    # balloon: h(q) = distance to the 7th nearest sample
    dq = np.sort(np.sqrt(((Q[:, None] - X[None]) ** 2).sum(-1)), axis=1)[:, 6]
    D = np.sqrt(((Q[:, None] - X[None]) ** 2).sum(-1))
    K = np.clip(1 - (D / dq[:, None]) ** 2, 0, None)
    np.testing.assert_allclose(local_mean(Q, X, y, kernel="epanechnikov", bandwidth=Balloon(7)), K @ y / K.sum(1), rtol=1e-12)
    # sample point: h_i = distance from x_i to its 5th nearest other sample
    DX = np.sort(np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1)), axis=1)[:, 5]
    K = np.exp(-((D / DX[None, :]) ** 2) / 2)
    np.testing.assert_allclose(local_mean(Q, X, y, bandwidth=SamplePoint(5)), K @ y / K.sum(1), rtol=1e-12)


def test_identity_11_hollow_kernel_gives_leave_one_out(rng):
    X = rng.random((80, 2))
    y = rng.standard_normal(80)
    loo = local_mean(X, X, y, bandwidth=0.3, exclude_self=True)
    for i in [0, 17, 79]:
        keep = np.arange(80) != i
        direct = local_mean(X[i : i + 1], X[keep], y[keep], bandwidth=0.3)[0]
        assert abs(loo[i] - direct) < 1e-12
    # K̃_hollow · y − y is the LOO residual
    K = np.exp(-(((X[:, None] - X[None]) ** 2).sum(-1)) / (2 * 0.09))
    np.fill_diagonal(K, 0)
    np.testing.assert_allclose((K / K.sum(1, keepdims=True)) @ y - y, loo - y, atol=1e-12)


def test_tiny_bandwidth_is_the_nearest_neighbour_not_nan():
    X = np.array([[0.0], [1.0], [3.0]])
    y = np.array([10.0, 20.0, 30.0])
    np.testing.assert_array_equal(local_mean([[0.9], [2.2]], X, y, bandwidth=1e-9), [20.0, 30.0])
    lk = kernel_sum([[0.5]], X, bandwidth=1e-3, log=True)
    assert np.isfinite(lk[0]) and abs(lk[0] - (np.log(2) - 0.5 * (0.5 / 1e-3) ** 2)) < 1e-9 * abs(lk[0])  # two samples at 0.5


def test_zero_weight_queries_are_nan_with_a_warning():
    X = np.array([[0.0], [1.0]])
    with pytest.warns(LocalizationWarning, match="zero total kernel weight"):
        m = local_mean([[0.0], [5.0]], X, [1.0, 2.0], kernel="tophat", bandwidth=0.5)
    assert m[0] == 1.0 and np.isnan(m[1])
    assert kernel_sum([[5.0]], X, kernel="tophat", bandwidth=0.5, log=True)[0] == -np.inf


def test_dot_kernel_is_softmax_attention(rng):
    Qm = rng.standard_normal((7, 4))
    Km = rng.standard_normal((30, 4))
    Vm = rng.standard_normal((30, 3))
    S = Qm @ Km.T / 2.0
    P = np.exp(S - S.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    np.testing.assert_allclose(local_mean(Qm, Km, Vm, kernel=Kernel("dot", temperature=2.0)), P @ Vm, atol=1e-12)


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "knn"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_results_do_not_depend_on_thread_count(rng, kernel, dtype):
    X = rng.random((3000, 3)).astype(dtype)
    Q = rng.random((500, 3)).astype(dtype)
    y = rng.random(3000).astype(dtype)
    kw = dict(kernel=kernel, bandwidth=0.2, n_neighbors=9)
    a = local_mean(Q, X, y, n_jobs=1, **kw)
    b = local_mean(Q, X, y, n_jobs=2, **kw)
    c = local_mean(Q, X, y, n_jobs=7, **kw)
    assert np.array_equal(a, b) and np.array_equal(a, c)


def test_concurrent_calls_from_python_threads(rng):
    X = rng.random((4000, 2))
    Q = rng.random((800, 2))
    y = rng.random(4000)
    want = local_mean(Q, X, y, bandwidth=0.05)
    out = [None] * 4

    def work(i):
        out[i] = local_mean(Q, X, y, bandwidth=0.05)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(o, want) for o in out)


def test_no_warning_when_everything_is_fine(rng):
    X = rng.random((50, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        local_mean(X, X, bandwidth=0.5)


def test_kernel_objects_pickle():
    from localization import Kernel

    k = Kernel("cosine", bandwidth=0.3)
    assert pickle.loads(pickle.dumps(k)) == k


@pytest.mark.parametrize("kernel", ["gaussian", "tricube", "knn"])
def test_identity_13_normalised_laplacian_kills_constants(rng, kernel):
    """L̃ = I − K̃ with K̃ = D⁻¹K row-stochastic: L̃·1 = 0, with K̃ and K as the library computes them."""
    from sklearn.neighbors import NearestNeighbors as SkNearestNeighbors

    from localization import kernel_matrix

    X = rng.random((120, 3))
    kw = dict(kernel=kernel, bandwidth=0.6, n_neighbors=7)
    ones = np.ones(120)
    np.testing.assert_allclose(ones - local_mean(X, X, ones, **kw), 0.0, atol=1e-14)
    # K̃ from the engine: its rows are the local means of the unit vectors.
    Kt = local_mean(X, X, np.eye(120), **kw)
    np.testing.assert_allclose((np.eye(120) - Kt) @ ones, 0.0, atol=1e-14)
    # The dense kernel matrix is the definition, and K̃ is it with rows normalised.
    D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
    if kernel == "knn":
        ind = SkNearestNeighbors(n_neighbors=7).fit(X).kneighbors(X, return_distance=False)
        want = np.zeros((120, 120))
        np.put_along_axis(want, ind, 1.0, axis=1)
    else:
        want = profile(kernel, D / 0.6)
    K = kernel_matrix(X, X, **kw)
    np.testing.assert_allclose(K, want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(Kt, want / want.sum(1, keepdims=True), rtol=1e-12, atol=1e-15)

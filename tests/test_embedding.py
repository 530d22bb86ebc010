"""LocalPCA: exact on flats, the global-PCA limit, a brute-force oracle, bad input."""

import pickle

import numpy as np
import pytest
from sklearn.decomposition import PCA

from localization import Kernel, LocalizationWarning
from localization.embedding import LocalPCA


def plane(n=300, seed=0):
    rng = np.random.default_rng(seed)
    uv = rng.uniform(-2, 2, (n, 2))
    A = np.array([[1.0, 0.5, -0.3], [0.2, -1.0, 0.7]])
    return uv @ A + np.array([0.5, -1.0, 2.0])


def test_reconstruction_exact_on_a_plane():
    X = plane()
    lp = LocalPCA(n_components=2, bandwidth=0.5).fit(X)
    np.testing.assert_allclose(lp.reconstruct(X), X, atol=1e-10)
    Q = plane(40, seed=1)  # new points on the same plane
    np.testing.assert_allclose(lp.reconstruct(Q), Q, atol=1e-10)
    # off-plane points land on the plane: the residual is along the normal
    normal = np.cross([1.0, 0.5, -0.3], [0.2, -1.0, 0.7])
    normal /= np.linalg.norm(normal)
    off = Q + 0.3 * normal
    np.testing.assert_allclose(lp.reconstruct(off), Q, atol=1e-10)


def test_reconstruction_exact_on_a_line():
    t = np.linspace(-3, 3, 200)[:, None]
    X = t * np.array([[0.6, -0.8, 0.0]]) + np.array([1.0, 2.0, 3.0])
    for kernel, h in [("gaussian", 0.4), ("epanechnikov", 1.0), ("knn", 1.0)]:
        lp = LocalPCA(n_components=1, kernel=kernel, bandwidth=h).fit(X)
        np.testing.assert_allclose(lp.reconstruct(X), X, atol=1e-10)
        _, V, var = lp.local_components(X[:10])
        np.testing.assert_allclose(np.abs(V[:, 0]), np.tile([0.6, 0.8, 0.0], (10, 1)), atol=1e-10)
        assert np.all(var > 0)


@pytest.mark.parametrize("kernel,h", [("gaussian", 1e6), ("tophat", 1e6)])
def test_global_pca_limit(kernel, h):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((250, 4)) @ rng.standard_normal((4, 4))
    pca = PCA(n_components=2).fit(X)
    lp = LocalPCA(n_components=2, kernel=kernel, bandwidth=h).fit(X)
    mu, V, var = lp.local_components(X[:30])
    np.testing.assert_allclose(mu, np.tile(pca.mean_, (30, 1)), atol=1e-8)
    np.testing.assert_allclose(V, np.tile(pca.components_, (30, 1, 1)), atol=1e-8)
    # sklearn's variances divide by n − 1, the local (weighted) ones by Σw = n
    np.testing.assert_allclose(var, np.tile(pca.explained_variance_ * (len(X) - 1) / len(X), (30, 1)), rtol=1e-8)
    np.testing.assert_allclose(lp.transform(X), pca.transform(X), atol=1e-8)
    np.testing.assert_allclose(lp.reconstruct(X), pca.inverse_transform(pca.transform(X)), atol=1e-8)


def test_against_weighted_pca_oracle():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((200, 3)) * [2.0, 1.0, 0.3]
    w = rng.uniform(0.5, 2.0, 200)
    Q = rng.standard_normal((15, 3))
    h = 1.1
    lp = LocalPCA(n_components=2, bandwidth=h).fit(X, sample_weight=w)
    mu, V, var = lp.local_components(Q)
    for i, x in enumerate(Q):
        k = w * np.exp(-0.5 * np.sum((X - x) ** 2, axis=1) / h**2)
        m = k @ X / k.sum()
        C = (X - m).T @ ((X - m) * k[:, None]) / k.sum()
        ev, E = np.linalg.eigh(C)
        np.testing.assert_allclose(mu[i], m, atol=1e-12)
        np.testing.assert_allclose(var[i], ev[::-1][:2], rtol=1e-10)
        for c in range(2):
            e = E[:, -1 - c]
            e = e * np.sign(e[np.argmax(np.abs(e))])
            np.testing.assert_allclose(V[i, c], e, atol=1e-10)
    z = lp.transform(Q)
    np.testing.assert_allclose(lp.inverse_transform(z, Q), lp.reconstruct(Q), atol=1e-12)


def test_per_feature_bandwidth_matches_scaled_data():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((150, 2)) * [3.0, 0.5]
    s = np.array([3.0, 0.5])
    a = LocalPCA(1, bandwidth=s).fit(X)
    b = LocalPCA(1, bandwidth=1.0).fit(X / s)
    np.testing.assert_allclose(a.local_components(X[:10])[0], b.local_components(X[:10] / s)[0] * s, atol=1e-12)


def test_thread_invariance_pickle_dtype():
    X = plane(800, seed=5) + 0.05 * np.random.default_rng(5).standard_normal((800, 3))
    a = LocalPCA(2, bandwidth=0.7, n_jobs=1).fit(X)
    b = LocalPCA(2, bandwidth=0.7, n_jobs=2).fit(X)
    np.testing.assert_array_equal(a.transform(X), b.transform(X))
    c = pickle.loads(pickle.dumps(b))
    np.testing.assert_array_equal(c.reconstruct(X), b.reconstruct(X))
    f = LocalPCA(2, bandwidth=0.7).fit(X.astype(np.float32))
    out = f.reconstruct(X.astype(np.float32))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, a.reconstruct(X), atol=1e-3)


def test_zero_weight_is_nan_with_warning():
    lp = LocalPCA(1, kernel="epanechnikov", bandwidth=0.5).fit([[0.0, 0.0], [0.1, 0.1], [0.2, 0.0]])
    with pytest.warns(LocalizationWarning):
        out = lp.transform([[5.0, 5.0], [0.1, 0.05]])
    assert np.isnan(out[0]).all() and np.isfinite(out[1]).all()


@pytest.mark.parametrize("est,X,match", [
    (LocalPCA(n_components=3), np.zeros((5, 2)), "n_components"),
    (LocalPCA(n_components=0), np.zeros((5, 2)), "n_components"),
    (LocalPCA(bandwidth=-1.0), np.zeros((5, 2)), "bandwidth"),
    (LocalPCA(kernel="dot"), np.zeros((5, 2)), "degree|moments"),
    (LocalPCA(n_jobs=0), np.zeros((5, 2)), "n_jobs"),
    (LocalPCA(), np.array([[0.0, np.nan]]), "NaN"),
])
def test_bad_input(est, X, match):
    with pytest.raises(ValueError, match=match):
        est.fit(X).transform(X)


def test_bad_inverse_transform():
    lp = LocalPCA(1).fit(plane(30))
    with pytest.raises(ValueError, match="Z"):
        lp.inverse_transform(np.zeros((3, 2)), plane(3))
    with pytest.raises(ValueError, match="features"):
        lp.transform(np.zeros((3, 2)))


def test_kernel_object():
    X = plane(100)
    a = LocalPCA(2, kernel=Kernel("biweight", bandwidth=2.0)).fit(X)
    np.testing.assert_allclose(a.reconstruct(X), X, atol=1e-10)

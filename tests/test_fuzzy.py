"""FuzzyInferenceRegressor: Takagi–Sugeno inference as a local mean over prototypes."""

import pickle

import numpy as np
import pytest
from sklearn.cluster import KMeans

from localization.fuzzy import FuzzyInferenceRegressor


def data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    y = np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.05 * rng.normal(size=n)
    return X, y


def gauss(A, B, h):
    return np.exp(-((A[:, None, :] - B[None]) ** 2).sum(-1) / (2 * h**2))


def test_prototypes_are_kmeans_centres():
    X, y = data()
    fis = FuzzyInferenceRegressor(n_rules=8, random_state=0).fit(X, y)
    km = KMeans(n_clusters=8, n_init=3, random_state=0).fit(X)
    np.testing.assert_allclose(fis.prototypes_, km.cluster_centers_)


@pytest.mark.parametrize("h", [0.3, 1.0])
def test_local_mean_consequents_and_inference_oracle(h):
    X, y = data()
    fis = FuzzyInferenceRegressor(n_rules=10, bandwidth=h, random_state=0).fit(X, y)
    P = fis.prototypes_
    Kp = gauss(P, X, h)
    c = Kp @ y / Kp.sum(1)  # Nadaraya–Watson at each prototype
    np.testing.assert_allclose(fis.consequents_, c, rtol=0, atol=1e-10)
    Q = np.random.default_rng(1).uniform(-2, 2, size=(25, 2))
    mu = gauss(Q, P, h)
    np.testing.assert_allclose(fis.predict(Q), mu @ c / mu.sum(1), rtol=0, atol=1e-10)
    np.testing.assert_allclose(fis.memberships(Q), mu / mu.sum(1, keepdims=True), rtol=0, atol=1e-12)


def test_least_squares_consequents_oracle():
    X, y = data()
    fis = FuzzyInferenceRegressor(n_rules=12, bandwidth=0.6, consequents="least_squares", ridge=0.0, random_state=0).fit(X, y)
    mu = gauss(X, fis.prototypes_, 0.6)
    Phi = mu / mu.sum(1, keepdims=True)
    c, *_ = np.linalg.lstsq(Phi, y, rcond=None)
    np.testing.assert_allclose(fis.consequents_, c, rtol=1e-7, atol=1e-8)
    # Least squares fits the training data better than prototype local means.
    lm = FuzzyInferenceRegressor(n_rules=12, bandwidth=0.6, random_state=0).fit(X, y)
    assert fis.score(X, y) > lm.score(X, y)
    assert fis.score(X, y) > 0.9


def test_rules_are_readable_and_multi_output():
    X, y = data(100)
    Y = np.c_[y, 2 * y]
    fis = FuzzyInferenceRegressor(n_rules=4, random_state=0).fit(X, Y)
    assert fis.consequents_.shape == (4, 2)
    assert fis.predict(X[:3]).shape == (3, 2)
    assert len(fis.rules_) == 4 and all(r.startswith("IF x ≈ (") and "THEN y = (" in r for r in fis.rules_)
    one = FuzzyInferenceRegressor(n_rules=3, random_state=0).fit(X, y)
    assert "THEN y = " in one.rules_[0] and "(" not in one.rules_[0].split("THEN")[1]


def test_auto_bandwidth_and_compact_kernel():
    X, y = data()
    fis = FuzzyInferenceRegressor(n_rules=10, random_state=0).fit(X, y)
    P = fis.prototypes_
    D = np.sqrt(((P[:, None] - P[None]) ** 2).sum(-1))
    np.fill_diagonal(D, np.inf)
    assert fis.bandwidth_ == pytest.approx(D.min(1).mean())
    epa = FuzzyInferenceRegressor(n_rules=10, kernel="epanechnikov", random_state=0).fit(X, y)
    assert epa.bandwidth_ == pytest.approx(2 * D.min(1).mean())
    assert np.all(np.isfinite(epa.predict(X)))


def test_sample_weight_zero_equals_removed():
    X, y = data(120)
    w = np.ones(120)
    w[::3] = 0
    a = FuzzyInferenceRegressor(n_rules=5, random_state=0).fit(X, y, sample_weight=w)
    b = FuzzyInferenceRegressor(n_rules=5, random_state=0).fit(X[w > 0], y[w > 0])
    np.testing.assert_allclose(a.predict(X), b.predict(X), atol=1e-12)


def test_too_many_rules_warns_and_caps():
    X = np.array([[0.0], [1.0], [1.0], [2.0]])
    with pytest.warns(UserWarning, match="distinct"):
        fis = FuzzyInferenceRegressor(n_rules=10).fit(X, [0.0, 1.0, 1.0, 2.0])
    assert fis.n_rules_ == 3


def test_thread_invariance_and_pickle():
    X, y = data(2000)
    a = FuzzyInferenceRegressor(n_rules=40, random_state=0, n_jobs=1).fit(X, y)
    b = FuzzyInferenceRegressor(n_rules=40, random_state=0, n_jobs=2).fit(X, y)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(a)).predict(X), a.predict(X))


def test_bad_input():
    X, y = data(20)
    with pytest.raises(ValueError, match="n_rules"):
        FuzzyInferenceRegressor(n_rules=0).fit(X, y)
    with pytest.raises(ValueError, match="consequents"):
        FuzzyInferenceRegressor(consequents="mean").fit(X, y)
    with pytest.raises(ValueError, match="bandwidth"):
        FuzzyInferenceRegressor(bandwidth="scott").fit(X, y)
    with pytest.raises(ValueError, match="bandwidth"):
        FuzzyInferenceRegressor(bandwidth=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="ridge"):
        FuzzyInferenceRegressor(ridge=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="radial"):
        FuzzyInferenceRegressor(kernel="dot").fit(X, y)
    with pytest.raises(TypeError, match="kernel"):
        FuzzyInferenceRegressor(kernel=3).fit(X, y)
    with pytest.raises(ValueError, match="NaN"):
        FuzzyInferenceRegressor().fit(np.full((3, 2), np.nan), [1, 2, 3])
    with pytest.raises(ValueError, match="support"):
        # A compact membership narrower than the gap between a prototype and the data.
        FuzzyInferenceRegressor(n_rules=2, kernel="tophat", bandwidth=1e-3, consequents="least_squares").fit(
            np.array([[0.0], [0.5], [1.0]]), [0.0, 1.0, 2.0]
        )

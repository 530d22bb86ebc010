import pickle

import numpy as np
import pytest
from sklearn.neighbors import KernelDensity as SKKernelDensity

from localization import KernelDensity, local_mean

SHARED = ["gaussian", "tophat", "epanechnikov", "exponential", "linear", "cosine"]


@pytest.mark.parametrize("kernel", SHARED)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("d", [1, 3])
def test_score_samples_matches_scikit_learn(rng, kernel, weighted, d):
    X = rng.standard_normal((300, d))
    Q = rng.standard_normal((50, d)) * 0.5
    w = rng.random(300) + 0.2 if weighted else None
    sk = SKKernelDensity(kernel=kernel, bandwidth=0.8, rtol=0, atol=0).fit(X, sample_weight=w)
    ours = KernelDensity(kernel=kernel, bandwidth=0.8).fit(X, sample_weight=w)
    want, got = sk.score_samples(Q), ours.score_samples(Q)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(finite, np.isfinite(got))
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-9)


def test_log_density_is_stable_far_out():
    kde = KernelDensity(bandwidth=0.01).fit([[0.0], [1.0]])
    lp = kde.score_samples([[50.0]])[0]
    want = -0.5 * (49.0 / 0.01) ** 2 - np.log(2) - 0.5 * np.log(2 * np.pi) - np.log(0.01)
    assert np.isfinite(lp) and abs(lp - want) < 1e-9 * abs(want)


def test_identity_4_gaussian_score_is_the_mean_shift_over_h2(rng):
    X = rng.standard_normal((400, 2))
    Q = rng.standard_normal((30, 2))
    kde = KernelDensity(bandwidth=0.6).fit(X)
    np.testing.assert_allclose(kde.score_function(Q), (local_mean(Q, X, bandwidth=0.6) - Q) / 0.36, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "biweight", "triweight"])
def test_score_function_matches_finite_differences(rng, kernel):
    X = rng.standard_normal((300, 2))
    Q = rng.standard_normal((10, 2)) * 0.3
    kde = KernelDensity(kernel=kernel, bandwidth=np.array([1.5, 2.0])).fit(X)
    eps = 1e-6
    fd = np.stack([(kde.score_samples(Q + eps * e) - kde.score_samples(Q - eps * e)) / (2 * eps) for e in np.eye(2)], 1)
    np.testing.assert_allclose(kde.score_function(Q), fd, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="score_function"):
        KernelDensity(kernel="tophat").fit(X).score_function(Q)


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "exponential", "cosine"])
def test_sample_follows_the_density(rng, kernel):
    X = np.array([[0.0, 0.0], [100.0, 100.0]])
    kde = KernelDensity(kernel=kernel, bandwidth=1.0).fit(X, sample_weight=[3, 1])
    s = kde.sample(20000, random_state=0)
    near0 = np.linalg.norm(s, axis=1) < 50
    assert abs(near0.mean() - 0.75) < 0.02
    # second moment of the kernel matches numerical integration of k(r) r^{d+1}
    r = np.linspace(0, 30, 300001)
    from localization.kernels import profile

    k = profile(kernel, r)
    want = np.trapezoid(k * r**3, r) / np.trapezoid(k * r, r)
    got = np.mean(np.sum(s[near0] ** 2, axis=1))
    assert abs(got / want - 1) < 0.05
    assert pickle.loads(pickle.dumps(kde)).score(X) == kde.score(X)


@pytest.mark.parametrize("rule", ["scott", "silverman"])
@pytest.mark.parametrize("weighted", [False, True])
def test_rule_names_give_scikit_learns_density_and_bandwidth(rng, rule, weighted):
    """The same spelling gives the same bandwidth_ and the same log density as scikit-learn."""
    X = rng.standard_normal((200, 3)) * [1.0, 4.0, 0.3]
    w = rng.random(200) + 0.1 if weighted else None
    Q = rng.standard_normal((40, 3))
    sk = SKKernelDensity(bandwidth=rule, rtol=0, atol=0).fit(X, sample_weight=w)
    ours = KernelDensity(bandwidth=rule).fit(X, sample_weight=w)
    assert isinstance(ours.bandwidth_, float) and ours.bandwidth_ == pytest.approx(sk.bandwidth_, rel=1e-15)
    np.testing.assert_allclose(ours.score_samples(Q), sk.score_samples(Q), rtol=1e-12)


def test_bandwidth_attribute():
    X = np.array([[0.0, 0.0], [2.0, 20.0], [1.0, 3.0]])
    assert KernelDensity(bandwidth=0.5).fit(X).bandwidth_ == 0.5
    np.testing.assert_array_equal(KernelDensity(bandwidth=[1.0, 2.0]).fit(X).bandwidth_, [1.0, 2.0])
    scaled = KernelDensity(bandwidth="silverman_scaled").fit(X).bandwidth_
    np.testing.assert_allclose(scaled, X.std(axis=0) * (3 * 4 / 4) ** (-1 / 6))
    from localization import Balloon

    assert KernelDensity(bandwidth=Balloon(2)).fit(X).bandwidth_ == Balloon(2)


def test_rule_of_thumb_bandwidth_normalises_by_the_product(rng):
    X = rng.standard_normal((500, 2)) * [1, 5]
    kde = KernelDensity(bandwidth="scott_scaled").fit(X)
    # integrates to ~1 over a grid
    g = np.linspace(-5, 5, 121), np.linspace(-25, 25, 121)
    G = np.stack(np.meshgrid(*g, indexing="ij"), -1).reshape(-1, 2)
    mass = np.exp(kde.score_samples(G)).sum() * (g[0][1] - g[0][0]) * (g[1][1] - g[1][0])
    assert abs(mass - 1) < 0.01


@pytest.mark.parametrize("kernel", ["gaussian", "tophat"])
def test_sample_draws_are_scikit_learns_and_weights_are_repetitions(rng, kernel):
    X = rng.standard_normal((60, 3))
    w = rng.integers(1, 4, 60).astype(float)
    for weights in (None, w):
        ours = KernelDensity(kernel=kernel, bandwidth=0.3).fit(X, sample_weight=weights).sample(40, random_state=7)
        sk = SKKernelDensity(kernel=kernel, bandwidth=0.3).fit(X, sample_weight=weights).sample(40, random_state=7)
        np.testing.assert_allclose(ours, sk, rtol=1e-12, atol=1e-15)
    for kern in (kernel, "epanechnikov"):  # every kernel: integer weights draw as repeated points
        a = KernelDensity(kernel=kern, bandwidth=0.3).fit(X, sample_weight=w).sample(30, random_state=3)
        b = KernelDensity(kernel=kern, bandwidth=0.3).fit(np.repeat(X, w.astype(int), axis=0)).sample(30, random_state=3)
        np.testing.assert_allclose(a, b, rtol=1e-12)
        c = KernelDensity(kernel=kern, bandwidth=0.3).fit(X, sample_weight=np.full(60, 2.5)).sample(30, random_state=3)
        np.testing.assert_allclose(c, KernelDensity(kernel=kern, bandwidth=0.3).fit(X).sample(30, random_state=3), rtol=1e-12)

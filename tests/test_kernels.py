import numpy as np
import pytest

from localization import Kernel, kernels, local_mean
from localization.kernels import PROFILES, log_normalization, profile, rule_of_thumb, support

FORMULAS = {
    "gaussian": lambda u: np.exp(-u * u / 2),
    "exponential": lambda u: np.exp(-u),
    "cauchy": lambda u: 1 / (1 + u * u),
    "tophat": lambda u: (u < 1).astype(float),
    "epanechnikov": lambda u: np.clip(1 - u * u, 0, None),
    "biweight": lambda u: np.clip(1 - u * u, 0, None) ** 2,
    "triweight": lambda u: np.clip(1 - u * u, 0, None) ** 3,
    "linear": lambda u: np.clip(1 - u, 0, None),
    "tricube": lambda u: np.clip(1 - u**3, 0, None) ** 3,
    "cosine": lambda u: np.where(u < 1, np.cos(np.pi * u / 2), 0.0),
}


@pytest.mark.parametrize("name", PROFILES)
def test_profiles_match_the_spec_table(name):
    u = np.linspace(0, 3, 301)
    np.testing.assert_allclose(profile(name, u), FORMULAS[name](u), atol=1e-15)
    if np.isfinite(support(name)):
        assert profile(name, [1.0])[0] == 0.0 and profile(name, [0.999])[0] > 0


def test_aliases_resolve():
    assert kernels.canonical_name("flat") == "tophat"
    assert kernels.canonical_name("quartic") == "biweight"
    assert kernels.canonical_name("Triangular") == "linear"
    with pytest.raises(ValueError, match="unknown kernel"):
        kernels.canonical_name("banana")
    with pytest.raises(TypeError):
        kernels.canonical_name(3)


@pytest.mark.parametrize("name", [p for p in PROFILES if p != "cauchy"])
@pytest.mark.parametrize("d", [1, 2, 3])
def test_normalisation_integrates_to_one_by_monte_carlo_free_quadrature(name, d):
    # radial quadrature of k(r) r^{d-1} |S^{d-1}| against the closed form
    r = np.linspace(0, 1 if np.isfinite(support(name)) else 40, 400001)
    sphere = {1: 2.0, 2: 2 * np.pi, 3: 4 * np.pi}[d]
    integral = sphere * np.trapezoid(FORMULAS[name](r) * r ** (d - 1), r)
    tol = 1e-5 if name == "tophat" else 1e-6  # the jump at u = 1 costs the trapezoid rule O(step)
    assert abs(integral / np.exp(log_normalization(name, d)) - 1) < tol


def test_cauchy_is_not_a_density_beyond_1d():
    assert np.isclose(np.exp(log_normalization("cauchy", 1)), np.pi)
    with pytest.raises(ValueError, match="not integrable"):
        log_normalization("cauchy", 2)


def test_scaled_rules_of_thumb_use_the_data_scale(rng):
    X = rng.standard_normal((500, 2)) * [1.0, 10.0]
    h = rule_of_thumb(X, "scott_scaled")
    assert h.shape == (2,) and 8 < h[1] / h[0] < 12
    np.testing.assert_allclose(h, X.std(axis=0) * rule_of_thumb(X, "scott"), rtol=1e-12)
    np.testing.assert_allclose(rule_of_thumb(X * 3, "silverman_scaled"), 3 * rule_of_thumb(X, "silverman_scaled"))
    with pytest.raises(ValueError, match="constant"):
        rule_of_thumb(np.ones((5, 1)), "scott_scaled")
    with pytest.raises(ValueError, match="scott_scaled"):
        rule_of_thumb(X, "scot")


def test_plain_rules_of_thumb_are_scikit_learns(rng):
    """Same spelling, same number: n^(-1/(d+4)) and (n(d+2)/4)^(-1/(d+4)), whatever the scale."""
    X = rng.standard_normal((321, 3)) * [1.0, 10.0, 0.1]
    assert rule_of_thumb(X, "scott") == 321 ** (-1 / 7)
    assert rule_of_thumb(X, "silverman") == (321 * 5 / 4) ** (-1 / 7)
    assert rule_of_thumb(X * 1e3, "scott") == rule_of_thumb(X, "scott")


def test_kernel_object_and_strings_agree(rng):
    X = rng.random((50, 2))
    K = Kernel("biweight", bandwidth=0.4)
    a = local_mean(X, X, X[:, 0], kernel=K)
    b = local_mean(X, X, X[:, 0], kernel="quartic", bandwidth=0.4)
    np.testing.assert_array_equal(a, b)
    M = K(X)
    assert M.shape == (50, 50) and np.allclose(np.diag(M), 1.0)


def test_python_callable_profile_is_the_slow_path_with_the_same_answer(rng):
    X = rng.random((300, 2))
    Q = rng.random((40, 2))
    y = rng.random(300)
    slow = local_mean(Q, X, y, kernel=lambda u: np.clip(1 - u * u, 0, None), bandwidth=0.3)
    fast = local_mean(Q, X, y, kernel="epanechnikov", bandwidth=0.3)
    np.testing.assert_allclose(slow, fast, rtol=1e-12)
    # A signed profile is a signed kernel: fine for a local mean, refused where weights must be >= 0.
    lin = lambda u: 1 - u  # noqa: E731 (negative beyond u = 1)
    K = 1 - np.sqrt(((Q[:, None] - X[None]) ** 2).sum(-1)) / 0.3
    np.testing.assert_allclose(local_mean(Q, X, y, kernel=lin, bandwidth=0.3), K @ y / K.sum(1), rtol=1e-10)
    from localization import LocalModeClassifier

    with pytest.raises(ValueError, match="LocalModeClassifier needs a non-negative kernel"):
        LocalModeClassifier(kernel=lin, bandwidth=0.3).fit(X, y > 0.5).predict(Q)
    with pytest.raises(ValueError, match="callable"):
        local_mean(Q, X, y, kernel=lambda u: u * np.nan, bandwidth=0.3)

"""Leave-one-out everywhere (SPEC §8): exact LOO values against explicit refits, the search,
and the statsmodels bandwidth selectors as oracles."""

import pickle

import numpy as np
import pytest

from localization import KernelDensity, LocalMeanRegressor, LocalModeClassifier, LocalPolynomialRegressor
from localization import adaptive
from localization.adaptive import bracketed_minimum, golden_section
from localization.kernels import Kernel


def _data(n=40, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, d))
    y = np.sin(4 * X[:, 0]) + X[:, -1] ** 2 + 0.1 * rng.standard_normal(n)
    return X, y


def _refit_loop(make, X, y, predict):
    """The definition of leave-one-out: refit without point i, predict at x_i."""
    out = []
    for i in range(len(X)):
        keep = np.arange(len(X)) != i
        est = make().fit(X[keep], None if y is None else y[keep])
        out.append(predict(est, X[i : i + 1]))
    return np.array(out)


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov"])
def test_local_mean_loo_objective_equals_refits(kernel):
    X, y = _data()
    h = 0.6
    reg = LocalMeanRegressor(kernel=kernel, bandwidth=h).fit(X, y)
    loo = _refit_loop(lambda: LocalMeanRegressor(kernel=kernel, bandwidth=h), X, y, lambda e, q: e.predict(q)[0])
    np.testing.assert_allclose(reg.predict(None), loo, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(reg._loo_objective(Kernel(kernel, h)), np.mean((loo - y) ** 2), rtol=1e-10)


@pytest.mark.parametrize("degree", [0, 1, 2])
def test_local_polynomial_loo_equals_refits(degree):
    X, y = _data(n=60)
    h = 0.5
    reg = LocalPolynomialRegressor(degree=degree, bandwidth=h).fit(X, y)
    loo = _refit_loop(lambda: LocalPolynomialRegressor(degree=degree, bandwidth=h), X, y, lambda e, q: e.predict(q)[0])
    np.testing.assert_allclose(reg.predict(None), loo, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(reg._loo_objective(Kernel("gaussian", h)), np.mean((loo - y) ** 2), rtol=1e-9)


def test_local_polynomial_loo_is_the_equivalent_kernel_diagonal_identity():
    # Identities 2 + 11: the LOO residual of a linear smoother is (yᵢ − ŷᵢ)/(1 − ℓᵢ(xᵢ)).
    X, y = _data(n=50)
    reg = LocalPolynomialRegressor(degree=1, bandwidth=0.4).fit(X, y)
    ell = reg.equivalent_kernel(X)
    fit = ell @ y
    want = y - (y - fit) / (1 - np.diag(ell))
    np.testing.assert_allclose(reg.predict(None), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("scoring", ["log_loss", "accuracy"])
def test_local_mode_loo_objective_equals_refits(scoring):
    X, y = _data(n=50)
    labels = np.where(y > np.median(y), "hi", "lo")
    labels[:5] = "mid"
    h = 0.3
    clf = LocalModeClassifier(bandwidth=h, scoring=scoring).fit(X, labels)
    proba = _refit_loop(lambda: LocalModeClassifier(bandwidth=h), X, labels,
                        lambda e, q: dict(zip(e.classes_, e.predict_proba(q)[0])))
    truth = np.array([p.get(c, 0.0) for p, c in zip(proba, labels)])
    if scoring == "log_loss":
        want = -np.mean(np.log(np.clip(truth, np.finfo(float).eps, 1)))
    else:
        pred = _refit_loop(lambda: LocalModeClassifier(bandwidth=h), X, labels, lambda e, q: e.predict(q)[0])
        want = np.mean(pred != labels)
    np.testing.assert_allclose(clf._loo_objective(Kernel("gaussian", h)), want, rtol=1e-10)


def test_kde_loo_likelihood_and_lscv_equal_their_definitions():
    X, _ = _data(n=40)
    h = 0.3
    kde = KernelDensity(bandwidth=h).fit(X)
    logp = _refit_loop(lambda: KernelDensity(bandwidth=h), X, None, lambda e, q: e.score_samples(q)[0])
    np.testing.assert_allclose(kde._negative_loo_likelihood(Kernel("gaussian", h)), -np.mean(logp), rtol=1e-10)
    # LSCV = ∫p̂² − 2/n Σ p̂₋ᵢ(xᵢ), with ∫p̂² by numerical quadrature on a fine grid
    from scipy.stats import multivariate_normal

    D = X[:, None, :] - X[None, :, :]
    int_sq = multivariate_normal(np.zeros(2), 2 * h * h * np.eye(2)).pdf(D).mean()
    want = int_sq - 2 * np.mean(np.exp(logp))
    np.testing.assert_allclose(kde._lscv(Kernel("gaussian", h)), want, rtol=1e-10)


def test_weighted_kde_loo_leaves_out_the_weight():
    X, _ = _data(n=30)
    w = np.random.default_rng(1).uniform(0.5, 2, len(X))
    kde = KernelDensity(bandwidth=0.3).fit(X, sample_weight=w)
    logp = []
    for i in range(len(X)):
        keep = np.arange(len(X)) != i
        logp.append(KernelDensity(bandwidth=0.3).fit(X[keep], sample_weight=w[keep]).score_samples(X[i : i + 1])[0])
    np.testing.assert_allclose(kde._negative_loo_likelihood(Kernel("gaussian", 0.3)), -np.average(logp, weights=w),
                               rtol=1e-10)


def test_golden_section_finds_a_smooth_minimum():
    t, v = golden_section(lambda t: (t - 0.3) ** 2 + 1, -2.0, 2.0, tol=1e-9)
    assert abs(t - 0.3) < 1e-7 and abs(v - 1) < 1e-14  # f resolves t only to ~sqrt(eps)


@pytest.mark.parametrize("make", [
    lambda: LocalMeanRegressor(bandwidth="loo"),
    lambda: LocalPolynomialRegressor(bandwidth="loo"),
])
def test_search_result_is_the_best_evaluation_and_refines_the_grid(make, monkeypatch):
    X, y = _data(n=120)
    reg = make().fit(X, y)
    res = reg.cv_results_
    assert set(res) == {"bandwidth", "objective", "stage"}
    assert reg.bandwidth_ == res["bandwidth"][np.argmin(res["objective"])]
    grid = res["objective"][res["stage"] == "grid"]
    assert np.min(res["objective"]) <= grid.min()
    assert (res["stage"] == "golden").sum() >= 3
    # refined to the search's tolerance: a search to 1e-8 finds the same minimiser
    monkeypatch.setitem(adaptive.search.__kwdefaults__, "tol", 1e-8)
    tight = make().fit(X, y)
    assert abs(np.log(reg.bandwidth_ / tight.bandwidth_)) < adaptive._LOG_TOL
    # the reported optimum is the exact LOO error at that bandwidth
    loo = type(reg)(bandwidth=reg.bandwidth_).fit(X, y).predict(None)
    np.testing.assert_allclose(np.mean((loo - y) ** 2), np.min(res["objective"]), rtol=1e-12)


def test_loo_scales_a_kernel_object_and_honours_the_grid():
    X, y = _data(n=80)
    base = Kernel("gaussian", np.array([1.0, 2.0]))
    reg = LocalMeanRegressor(kernel=base, bandwidth="loo", bandwidth_grid=[0.05, 0.1, 0.2, 0.4]).fit(X, y)
    s = reg.bandwidth_
    np.testing.assert_allclose(reg.kernel_.bandwidth, s * np.array([1.0, 2.0]))
    assert reg.cv_results_["bandwidth"][:4].tolist() == [0.05, 0.1, 0.2, 0.4]
    direct = LocalMeanRegressor(bandwidth=s * np.array([1.0, 2.0])).fit(X, y)
    np.testing.assert_allclose(reg.predict(X[:5]), direct.predict(X[:5]), rtol=1e-12)
    combo = 0.5 * Kernel("gaussian", 1.0) + 0.5 * Kernel("epanechnikov", 3.0)
    reg = LocalMeanRegressor(kernel=combo, bandwidth="loo").fit(X, y)
    assert [k.bandwidth for k in reg.kernel_.kernels] == pytest.approx([reg.bandwidth_, 3 * reg.bandwidth_])



@pytest.mark.parametrize("weighted", [False, True])
def test_kde_analytic_loo_gradient_matches_finite_differences(weighted):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 3)) * [1.0, 3.0, 0.2] + 1e4  # offset: the centred split loses nothing to it
    w = rng.uniform(0.5, 2.0, len(X)) if weighted else None
    kde = KernelDensity(bandwidth=1.0).fit(X, sample_weight=w)
    h = np.array([0.4, 1.1, 0.1])
    value, grad = kde._analytic_loo_gradient()(Kernel("gaussian", h))
    f = kde._negative_loo_likelihood
    assert value == f(Kernel("gaussian", h))
    eps = 1e-5
    fd = [(f(Kernel("gaussian", h * np.exp(eps * e))) - f(Kernel("gaussian", h * np.exp(-eps * e)))) / (2 * eps)
          for e in np.eye(3)]
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-9)


def test_kde_analytic_gradient_only_where_it_is_exact():
    X, _ = _data(n=30)
    assert KernelDensity(bandwidth=0.3).fit(X)._analytic_loo_gradient() is not None
    for kde in (KernelDensity(bandwidth=0.3, kernel="epanechnikov"), KernelDensity(bandwidth=0.3, algorithm="binned"),
                KernelDensity(bandwidth=0.3, rtol=1e-3)):
        assert kde.fit(X)._analytic_loo_gradient() is None
    assert KernelDensity(bandwidth=0.3).fit(X.astype(np.float32))._analytic_loo_gradient() is None


def test_per_feature_search_with_the_analytic_gradient_agrees_with_finite_differences(monkeypatch):
    rng = np.random.default_rng(6)
    X = rng.normal(size=(400, 2)) * [1.0, 0.3]
    analytic = KernelDensity(bandwidth="loo_per_feature").fit(X)
    monkeypatch.setattr(KernelDensity, "_analytic_loo_gradient", lambda self: None)
    differences = KernelDensity(bandwidth="loo_per_feature").fit(X)
    np.testing.assert_allclose(analytic.bandwidth_, differences.bandwidth_, rtol=1e-4)
    # one pass per point instead of d + 1
    stages = analytic.cv_results_["stage"]
    assert np.sum(stages == "gradient") < np.sum(differences.cv_results_["stage"] == "gradient")

def _rosenbrock(undefined_above=np.inf):
    """Rosenbrock's valley as residuals in t = log s (minimum 0 at t = (1, 1)); None (an
    undefined objective) where t₀ exceeds ``undefined_above``. Records the points asked for."""
    asked = []

    def residuals(s):
        t = np.broadcast_to(np.log(s), (2,))
        asked.append(t.copy())
        return None if t[0] > undefined_above else np.array([10 * (t[1] - t[0] ** 2), 1 - t[0]])

    return residuals, asked


def test_least_squares_descent_follows_a_curved_valley():
    residuals, asked = _rosenbrock()
    best, res = adaptive.search(None, [np.exp(-1.0)], per_feature=True, n_features=2, residuals=residuals,
                                warn_edge=False)
    np.testing.assert_allclose(np.log(best), [1.0, 1.0], atol=1e-3)
    # every residual evaluation is recorded once, as one pass
    assert len(asked) == len(res["objective"]) and res["objective"].min() < 1e-6
    assert set(res["stage"]) == {"grid", "gradient"}
    # It stops on the model's predicted step: the last passes are the Jacobian of the last
    # point it moved to, not a confirming evaluation beyond it; the answer is the best pass.
    last = res["bandwidth"][-3]
    np.testing.assert_allclose(np.log(res["bandwidth"][-2:]) - np.log(last), np.eye(2) * 1e-6, atol=1e-12)
    assert np.any(np.all(res["bandwidth"] == best, axis=1))
    assert res["objective"].min() == res["objective"][np.all(res["bandwidth"] == best, axis=1)][0]


def test_least_squares_descent_backs_off_where_the_objective_is_undefined():
    residuals, _ = _rosenbrock(undefined_above=0.5)
    best, res = adaptive.search(None, [np.exp(-1.0)], per_feature=True, n_features=2, residuals=residuals,
                                warn_edge=False)
    assert np.log(best)[0] <= 0.5
    assert np.isinf(res["objective"]).any() and np.isfinite(res["objective"]).any()
    r = residuals(best)
    assert res["objective"].min() == r @ r


@pytest.mark.parametrize("degree", [0, 1])
def test_least_squares_descent_reaches_the_polished_minimum(degree):
    """The per-feature answer of local constant (sample weights: no analytic gradient) and
    local linear regression against the objective minimised to 1e-9 by Nelder–Mead from it."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(11)
    X = rng.uniform(size=(300, 2)) * [1.0, 3.0] + 1e3
    y = np.sin(5 * X[:, 0]) + (X[:, 1] - 1e3) ** 2 / 4 + 0.2 * rng.standard_normal(300)
    w = rng.uniform(0.5, 2.0, 300)
    reg = LocalPolynomialRegressor(degree=1, bandwidth="loo_per_feature") if degree else \
        LocalMeanRegressor(bandwidth="loo_per_feature")
    reg.fit(X, y, sample_weight=w)
    f = lambda t: reg._loo_objective(Kernel("gaussian", np.exp(t)))  # noqa: E731
    polished = minimize(f, np.log(reg.bandwidth_), method="Nelder-Mead",
                        options={"xatol": 1e-9, "fatol": 1e-16, "maxiter": 4000})
    np.testing.assert_allclose(np.log(reg.bandwidth_), polished.x, atol=3e-4)
    assert reg.cv_results_["objective"].min() <= polished.fun * (1 + 1e-8)
    assert reg.cv_results_["objective"].min() == reg._loo_objective(Kernel("gaussian", reg.bandwidth_))


@pytest.mark.parametrize("make", [lambda: LocalMeanRegressor(bandwidth="loo_per_feature"),
                                  lambda: LocalPolynomialRegressor(bandwidth="loo_per_feature"),
                                  lambda: KernelDensity(bandwidth="loo_per_feature")])
def test_per_feature_search_with_one_feature(make):
    # (cv_results_ once failed to stack the grid's scalars with the descent's 1-vectors)
    X, y = _data(n=120)
    X = X[:, :1]
    est = make().fit(X, y)
    res = est.cv_results_
    assert est.bandwidth_.shape == (1,) and res["bandwidth"].shape == (len(res["objective"]), 1)
    scalar = type(est)(bandwidth="loo").fit(X, y)
    assert res["objective"].min() <= scalar.cv_results_["objective"].min() * (1 + 1e-6)


@pytest.mark.parametrize("make", [lambda: LocalPolynomialRegressor(bandwidth="loo_per_feature"),
                                  lambda: LocalMeanRegressor(bandwidth="loo_per_feature"),
                                  lambda: KernelDensity(bandwidth="loo_per_feature")])
def test_per_feature_search_on_float32_reaches_the_float64_minimum(make):
    """Forward differences at the float32 objective's resolution: with the float64 step the
    descent stalled near its start (LOO errors 0.5–4 % above the minimum here)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(200, 2))
    y = np.sin(4 * X[:, 0]) + 0.1 * rng.standard_normal(200)
    e32, e64 = make().fit(X.astype(np.float32), y.astype(np.float32)), make().fit(X, y)
    objective = e64._negative_loo_likelihood if isinstance(e64, KernelDensity) else e64._loo_objective
    at_32 = objective(Kernel("gaussian", e32.bandwidth_.astype(np.float64)))
    assert at_32 <= e64.cv_results_["objective"].min() * (1 + 1e-5)


def test_per_feature_search_survives_a_feature_constant_in_float32():
    # Spread 1e-3 at 1e6: constant in float32. The descent shrinks that bandwidth until the
    # engine refuses it; such trial points are undefined, not a failure of the fit.
    rng = np.random.default_rng(0)
    X = np.c_[rng.normal(size=300), 1e6 + 1e-3 * rng.normal(size=300)].astype(np.float32)
    kde = KernelDensity(bandwidth="loo_per_feature").fit(X)
    assert np.all(np.isfinite(kde.bandwidth_)) and np.all(kde.bandwidth_ > 0)
    assert np.isfinite(kde.cv_results_["objective"].min())
    assert np.all(np.isfinite(kde.score_samples(X[:5])))


def test_loo_per_feature_ignores_an_irrelevant_feature():
    rng = np.random.default_rng(3)
    X = rng.uniform(size=(300, 2))
    y = np.sin(6 * X[:, 0]) + 0.05 * rng.standard_normal(300)  # feature 1 is noise
    reg = LocalMeanRegressor(bandwidth="loo_per_feature").fit(X, y)
    assert reg.bandwidth_.shape == (2,)
    assert reg.bandwidth_[1] > 5 * reg.bandwidth_[0]
    scalar = LocalMeanRegressor(bandwidth="loo").fit(X, y)
    assert np.min(reg.cv_results_["objective"]) < np.min(scalar.cv_results_["objective"])


def test_loo_classifier_and_kde_pick_sensible_bandwidths():
    X, y = _data(n=150)
    labels = (y > np.median(y)).astype(int)
    for scoring in ("log_loss", "accuracy"):
        clf = LocalModeClassifier(bandwidth="loo", scoring=scoring).fit(X, labels)
        assert np.min(clf.cv_results_["objective"]) < 0.5
    assert "golden" not in LocalModeClassifier(bandwidth="loo", scoring="accuracy").fit(X, labels).cv_results_["stage"]
    kde = KernelDensity(bandwidth="loo").fit(X)
    assert 0.02 < kde.bandwidth_ < 1
    assert kde.score_samples(X[:3]).shape == (3,)


def test_bracketed_minimum_reaches_the_tolerance_in_fewer_evaluations_than_brent():
    from scipy.optimize import minimize_scalar

    smooth = lambda t: (t - 0.3) ** 2 + 0.1 * (t - 0.3) ** 3 + 1  # noqa: E731
    rough = lambda t: abs(t - 0.3) ** 1.5 + 1  # noqa: E731  (not twice differentiable at the minimum)
    kinked = lambda t: abs(t - 0.3) + 0.01 * np.sin(40 * t)  # noqa: E731  (several local minima)
    for shape in (smooth, rough, kinked):
        calls = []

        def f(t):
            calls.append(t)
            return shape(t)

        t, v = bracketed_minimum(f, 0.0, 0.25, 1.0, tol=1e-4)
        assert calls[:3] == [0.0, 0.25, 1.0]  # starts from the bracket it is given
        assert v == f(t) == min(map(shape, calls[:-1]))  # the best point evaluated
        brent = minimize_scalar(shape, bracket=(0.0, 0.25, 1.0), method="brent", options={"xtol": 1e-4 / 3})
        assert len(calls) - 1 <= brent.nfev
        if shape is kinked:  # a local minimum near the global one
            assert abs(t - 0.3) < 0.05 and v <= min(shape(t - 1e-4), shape(t + 1e-4))
        else:
            assert abs(t - 0.3) < 1e-4
    calls = []
    bracketed_minimum(lambda t: calls.append(t) or (t - 0.3) ** 2 + 0.1 * (t - 0.3) ** 3, 0.0, 0.25, 1.0, tol=1e-4)
    assert len(calls) <= 8  # 3 for the bracket, then parabolas that converge superlinearly
    with pytest.raises(ValueError):
        bracketed_minimum(lambda t: (t - 0.3) ** 2, 0.0, 0.9, 1.0)  # not a bracket: f(0.9) is above f(0)


# --- coarse to fine: a subsample's choice, then a few exact full-sample passes ---------------


def _coarse_datasets():
    rng = np.random.default_rng(1)
    n = 1000
    X = rng.uniform(size=(n, 2))
    yield "sine", X, np.sin(5 * X[:, 0]) + 2 * X[:, 1] ** 2 + 0.2 * rng.standard_normal(n)
    X = rng.normal(size=(n, 1))
    yield "cubic", X, X[:, 0] ** 3 + 0.5 * rng.standard_normal(n)
    X = np.vstack([rng.normal(0, 1, (n // 2, 2)), rng.normal(4, 0.3, (n - n // 2, 2))])
    yield "clusters", X, (X[:, 0] > 2) + 0.3 * rng.standard_normal(n)
    X = rng.normal(size=(n, 3)) * [1, 2, 0.5]
    yield "3-D", X, np.tanh(X[:, 0]) + 0.1 * X[:, 1] + 0.3 * rng.standard_normal(n)


_COARSE_ESTIMATORS = {
    "local linear": lambda: LocalPolynomialRegressor(bandwidth="loo"),
    "local linear, epanechnikov": lambda: LocalPolynomialRegressor(kernel="epanechnikov", bandwidth="loo"),
    "local quadratic": lambda: LocalPolynomialRegressor(degree=2, bandwidth="loo"),
    "local mean": lambda: LocalMeanRegressor(bandwidth="loo"),
    "kde": lambda: KernelDensity(bandwidth="loo"),
    "classifier": lambda: LocalModeClassifier(bandwidth="loo"),
}


def _fit(make, X, y):
    est = make()
    if isinstance(est, KernelDensity):
        return est.fit(X)
    return est.fit(X, (y > np.median(y)).astype(int) if isinstance(est, LocalModeClassifier) else y)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "local quadratic" else n
                                  for n in _COARSE_ESTIMATORS])
def test_coarse_to_fine_search_finds_the_exhaustive_searchs_bandwidth(name, monkeypatch):
    make = _COARSE_ESTIMATORS[name]
    fallbacks = []
    for data, X, y in _coarse_datasets():
        monkeypatch.setattr(adaptive, "_COARSE_MIN", 10**9)
        full = _fit(make, X, y)
        monkeypatch.setattr(adaptive, "_COARSE_MIN", 800)
        monkeypatch.setattr(adaptive, "_COARSE_SIZE", 250)
        fast = _fit(make, X, y)
        res = fast.cv_results_
        best = np.min(full.cv_results_["objective"])
        if name == "local linear, epanechnikov":
            # A compact kernel's LOO error has a kink wherever a point enters a window: near a
            # flat minimum either search may stop in a different kink's local minimum, ~1e-3
            # apart in log h, with the same error to ~1e-5 (see docs/adaptive.md).
            assert abs(np.log(fast.bandwidth_ / full.bandwidth_)) < 0.03, data
            assert abs(np.min(res["objective"]) - best) <= 1e-4 * abs(best), data
        else:
            # the same minimiser to the search's tolerance (each final bracket is ~4/3 tol wide) ...
            assert abs(np.log(fast.bandwidth_ / full.bandwidth_)) < 3 * adaptive._LOG_TOL, data
            assert abs(np.min(res["objective"]) - best) <= 1e-9 * abs(best), data
        # ... the reported optimum is an exact full-sample evaluation ...
        assert fast.bandwidth_ == res["bandwidth"][np.argmin(res["objective"])]
        if "grid" in res["stage"]:
            # (a check point was lower: the full grid was scanned)
            fallbacks.append(data)
            continue
        # ... from fewer of them
        assert "subsample" in res and set(res["stage"]) == {"bracket", "golden", "check"}, data
        assert len(res["subsample"]["objective"]) > 5
        assert len(res["objective"]) < len(full.cv_results_["objective"]), data
    assert "sine" not in fallbacks and len(fallbacks) <= 2, fallbacks


def test_coarse_to_fine_falls_back_to_the_grid_when_the_subsample_optimum_is_at_its_edge(monkeypatch):
    rng = np.random.default_rng(4)
    X = rng.uniform(size=(1500, 2))
    y = rng.standard_normal(1500)  # pure noise: on 300 points the LOO error falls to the widest bandwidth
    monkeypatch.setattr(adaptive, "_COARSE_MIN", 1000)
    monkeypatch.setattr(adaptive, "_COARSE_SIZE", 300)
    fast = LocalPolynomialRegressor(degree=0, bandwidth="loo").fit(X, y)
    assert "subsample" not in fast.cv_results_ and "grid" in fast.cv_results_["stage"]
    monkeypatch.setattr(adaptive, "_COARSE_MIN", 10**9)
    full = LocalPolynomialRegressor(degree=0, bandwidth="loo").fit(X, y)
    assert fast.bandwidth_ == full.bandwidth_


@pytest.mark.parametrize("make", [lambda: LocalMeanRegressor(bandwidth="loo_per_feature"),
                                  lambda: LocalPolynomialRegressor(bandwidth="loo_per_feature")])
def test_coarse_to_fine_start_of_the_per_feature_search(make, monkeypatch):
    _, X, y = next(_coarse_datasets())
    monkeypatch.setattr(adaptive, "_COARSE_MIN", 10**9)
    full = make().fit(X, y)
    monkeypatch.setattr(adaptive, "_COARSE_MIN", 800)
    monkeypatch.setattr(adaptive, "_COARSE_SIZE", 250)
    fast = make().fit(X, y)
    assert "subsample" in fast.cv_results_ and "grid" not in fast.cv_results_["stage"]
    # L-BFGS from two starts: the same minimum to its tolerances (it stops at steps of 1e-4 in
    # log h, where the objective is within ~1e-9 relative of its minimum)
    np.testing.assert_allclose(fast.bandwidth_, full.bandwidth_, rtol=1e-4)
    best = np.min(full.cv_results_["objective"])
    assert np.min(fast.cv_results_["objective"]) <= best * (1 + 1e-8)


def test_coarse_to_fine_is_skipped_for_a_given_grid_and_adaptive_bandwidths(monkeypatch):
    from localization.kernels import Balloon

    X, y = _data(n=200)
    monkeypatch.setattr(adaptive, "_COARSE_MIN", 100)
    monkeypatch.setattr(adaptive, "_COARSE_SIZE", 50)
    reg = LocalMeanRegressor(bandwidth="loo", bandwidth_grid=np.geomspace(0.02, 2, 12)).fit(X, y)
    assert "subsample" not in reg.cv_results_
    reg = LocalMeanRegressor(kernel=Kernel("gaussian", Balloon(5)), bandwidth="loo").fit(X, y)
    assert "subsample" not in reg.cv_results_


def test_loo_bad_input():
    X, y = _data(n=20)
    with pytest.raises(ValueError, match="scoring"):
        LocalModeClassifier(bandwidth="loo", scoring="f1").fit(X, y > 0)
    with pytest.raises(ValueError, match="knn"):
        LocalMeanRegressor(kernel="knn", bandwidth="loo").fit(X, y)
    with pytest.raises(ValueError, match="gaussian"):
        KernelDensity(kernel="epanechnikov", bandwidth="lscv").fit(X)
    with pytest.raises(ValueError, match="bandwidth_grid"):
        LocalMeanRegressor(bandwidth="loo", bandwidth_grid=[-1.0]).fit(X, y)
    with pytest.raises(ValueError, match="undefined"):
        LocalMeanRegressor(kernel="tophat", bandwidth="loo", bandwidth_grid=[1e-6]).fit(X, y)
    with pytest.raises(ValueError, match="2 samples"):
        LocalMeanRegressor(bandwidth="loo").fit(X[:1], y[:1])


def test_loo_fitted_estimators_pickle():
    X, y = _data(n=60)
    reg = LocalPolynomialRegressor(bandwidth="loo").fit(X, y)
    back = pickle.loads(pickle.dumps(reg))
    np.testing.assert_array_equal(back.predict(X[:4]), reg.predict(X[:4]))


# --- statsmodels' bandwidth selectors as oracles -------------------------------------------


def _sm_data(n, seed=5):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    y = np.sin(5 * X[:, 0]) + 2 * X[:, 1] ** 2 + 0.2 * rng.standard_normal(n)
    return X, y


@pytest.mark.parametrize("reg_type, degree", [("lc", 0), ("ll", 1)])
def test_loo_per_feature_matches_statsmodels_kernelreg_cv_ls(reg_type, degree):
    from statsmodels.nonparametric.kernel_regression import KernelReg

    X, y = _sm_data(80)
    sm = KernelReg(y, X, var_type="cc", reg_type=reg_type, bw="cv_ls")
    cls = LocalMeanRegressor if degree == 0 else LocalPolynomialRegressor
    reg = cls(bandwidth="loo_per_feature").fit(X, y)
    ours = np.min(reg.cv_results_["objective"])
    theirs = sm.cv_loo(sm.bw, sm._est_loc_constant if degree == 0 else sm._est_loc_linear)
    # the objectives coincide (checked at statsmodels' bandwidth) ...
    at_theirs = reg._loo_objective(Kernel("gaussian", np.abs(sm.bw)))
    np.testing.assert_allclose(at_theirs, theirs, rtol=1e-10)
    # ... and the minimisers agree; ours is at least as low
    np.testing.assert_allclose(reg.bandwidth_, np.abs(sm.bw), rtol=1e-3)
    assert ours <= theirs * (1 + 1e-9)


@pytest.mark.parametrize("rule, sm_bw", [("loo_per_feature", "cv_ml"), ("lscv_per_feature", "cv_ls")])
def test_kde_per_feature_matches_statsmodels_kdemultivariate(rule, sm_bw):
    from statsmodels.nonparametric.kernel_density import KDEMultivariate

    rng = np.random.default_rng(2)
    X = np.vstack([rng.normal(0, 1, (60, 2)), rng.normal(3, 0.5, (40, 2))]) * [1.0, 2.0]
    sm = KDEMultivariate(X, var_type="cc", bw=sm_bw)
    kde = KernelDensity(bandwidth=rule).fit(X)
    if sm_bw == "cv_ml":
        # statsmodels sums log Σ_{j≠i} K_h without the 1/(n−1): the same minimiser, offset by log(n−1)
        theirs = sm.loo_likelihood(sm.bw, np.log) / len(X) + np.log(len(X) - 1)
        at_theirs = kde._negative_loo_likelihood(Kernel("gaussian", np.abs(sm.bw)))
    else:
        theirs = sm.imse(sm.bw)
        at_theirs = kde._lscv(Kernel("gaussian", np.abs(sm.bw)))
    np.testing.assert_allclose(at_theirs, theirs, rtol=1e-10)
    np.testing.assert_allclose(kde.bandwidth_, np.abs(sm.bw), rtol=1e-3)
    assert np.min(kde.cv_results_["objective"]) <= theirs + 1e-12 * abs(theirs)


# --- MultiKernel ---------------------------------------------------------------------------


def test_simplex_qp_matches_a_generic_solver():
    from scipy.optimize import minimize

    from localization.adaptive import simplex_qp

    rng = np.random.default_rng(0)
    for L in (1, 2, 3, 5):
        R = rng.normal(size=(40, L)) + rng.normal(size=(40, 1))
        A = R.T @ R
        w = simplex_qp(A)
        assert np.all(w >= 0) and abs(w.sum() - 1) < 1e-12
        cons = ({"type": "eq", "fun": lambda v: v.sum() - 1},)
        ref = minimize(lambda v: v @ A @ v, np.full(L, 1 / L), bounds=[(0, 1)] * L, constraints=cons,
                       method="SLSQP", options={"ftol": 1e-15, "maxiter": 500})
        assert w @ A @ w <= ref.fun + 1e-9 * abs(ref.fun)


def test_multikernel_regressor_loo_error_is_the_quadratic_form_and_never_worse():
    from localization import MultiKernel

    X, y = _data(n=150)
    kernels = [Kernel("gaussian", 0.03), Kernel("gaussian", 0.15), Kernel("epanechnikov", 0.4), Kernel("gaussian", 2.0)]
    reg = LocalMeanRegressor(kernel=MultiKernel(kernels)).fit(X, y)
    w = reg.kernel_weights_
    assert np.all(w >= 0) and abs(w.sum() - 1) < 1e-12
    singles = [np.mean((LocalMeanRegressor(kernel=k).fit(X, y).predict(None) - y) ** 2) for k in kernels]
    np.testing.assert_allclose(reg.cv_results_["kernel_loo_error"], singles, rtol=1e-10)
    mixed = np.mean((reg.predict(None) - y) ** 2)  # the mixture's own exact LOO error
    np.testing.assert_allclose(mixed, reg.cv_results_["loo_error"], rtol=1e-9)
    assert mixed <= min(singles) * (1 + 1e-12)
    # the mixture predicts the w-average of the single local means
    Q = X[:7] + 0.01
    want = sum(wi * LocalMeanRegressor(kernel=k).fit(X, y).predict(Q) for wi, k in zip(w, kernels))
    np.testing.assert_allclose(reg.predict(Q), want, rtol=1e-10)


def test_multikernel_classifier_uses_the_brier_score():
    from localization import MultiKernel

    X, y = _data(n=120)
    labels = (y > np.median(y)).astype(int)
    kernels = [Kernel("gaussian", 0.05), Kernel("gaussian", 0.3)]
    clf = LocalModeClassifier(kernel=MultiKernel(kernels)).fit(X, labels)
    onehot = np.eye(2)[labels]
    brier = [np.sum((LocalModeClassifier(kernel=k).fit(X, labels).predict_proba(None) - onehot) ** 2, 1).mean()
             for k in kernels]
    np.testing.assert_allclose(clf.cv_results_["kernel_loo_error"], brier, rtol=1e-10)
    got = np.sum((clf.predict_proba(None) - onehot) ** 2, 1).mean()
    assert got <= min(brier) * (1 + 1e-12)
    assert pickle.loads(pickle.dumps(clf)).predict(X[:3]).tolist() == clf.predict(X[:3]).tolist()


def test_multikernel_bad_input():
    from localization import MultiKernel

    X, y = _data(n=20)
    with pytest.raises(TypeError, match="Kernel objects"):
        MultiKernel(["gaussian"])
    with pytest.raises(ValueError, match="1 to 16"):
        MultiKernel([])
    with pytest.raises(ValueError, match="LOO bandwidth"):
        LocalMeanRegressor(kernel=MultiKernel([Kernel()]), bandwidth="loo").fit(X, y)
    with pytest.raises(ValueError, match="undefined"):
        LocalMeanRegressor(kernel=MultiKernel([Kernel("tophat", 1e-6)])).fit(X, y)


# --- self-consistent kernel -------------------------------------------------------------------


def test_self_consistent_kernel_equals_scikit_learn_barycenter_weights():
    from sklearn.neighbors import kneighbors_graph
    from sklearn.manifold._locally_linear import barycenter_kneighbors_graph

    from localization.adaptive import self_consistent_kernel

    X = np.random.default_rng(0).normal(size=(80, 3))
    K = self_consistent_kernel(X, n_neighbors=6, reg=1e-3)
    want = barycenter_kneighbors_graph(X, 6, reg=1e-3)
    np.testing.assert_allclose(K.toarray(), want.toarray(), rtol=1e-9, atol=1e-12)
    assert np.all(K.diagonal() == 0)
    np.testing.assert_allclose(np.asarray(K.sum(1)).ravel(), 1.0, rtol=1e-12)
    assert (K.toarray() != 0).sum(1).max() == 6
    # the support is the k nearest other points
    assert np.array_equal(K.toarray() != 0, kneighbors_graph(X, 6).toarray() != 0)


def test_self_consistent_kernel_bad_input():
    from localization.adaptive import self_consistent_kernel

    X = np.random.default_rng(0).normal(size=(5, 2))
    with pytest.raises(ValueError, match="n_neighbors"):
        self_consistent_kernel(X, n_neighbors=5)
    with pytest.raises(ValueError, match="reg"):
        self_consistent_kernel(X, n_neighbors=2, reg=-1)
    with pytest.raises(ValueError):
        self_consistent_kernel(np.full((5, 2), np.nan), n_neighbors=2)
    dup = np.vstack([X, X])  # duplicates: a point's twin is a neighbour, never the point itself
    K = self_consistent_kernel(dup, n_neighbors=3)
    assert np.all(K.diagonal() == 0)

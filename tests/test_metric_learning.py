"""MetricLearningRegressor (MLKR): the objective against an explicit leave-one-out loop, the
engine's analytic gradient against finite differences, a planted direction, metric-learn's MLKR."""

import numpy as np
import pytest

from localization import Kernel, LocalMeanRegressor, MetricLearningRegressor
from localization.metric_learning import mlkr_loss

# Short runs (max_iter of a few iterations) stop before L-BFGS converges, on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def _explicit_loo(A, X, Y):
    """(1/n) Σᵢ ‖ŷ₋ᵢ − yᵢ‖² by refitting without each point, in float64."""
    Z = X @ A.T
    err = 0.0
    for i in range(len(X)):
        keep = np.arange(len(X)) != i
        log_k = -0.5 * np.sum((Z[keep] - Z[i]) ** 2, axis=1)
        k = np.exp(log_k - log_k.max())
        err += np.sum((k @ Y[keep] / k.sum() - Y[i]) ** 2)
    return err / len(X)


def _data(n=80, d=4, p=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.linspace(0.5, 2.0, d)
    X -= X.mean(0)
    Y = np.column_stack([np.sin(X[:, 0]) + 0.1 * X[:, 1], X[:, 1] ** 2 / 4][:p])
    return X, Y, rng


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("r", [2, 4])
def test_objective_equals_explicit_loo(p, r):
    X, Y, rng = _data(p=p)
    A = rng.normal(size=(r, X.shape[1]))
    loss, _ = mlkr_loss(A, X, Y)
    assert loss == pytest.approx(_explicit_loo(A, X, Y), rel=1e-10)
    assert mlkr_loss(A, X, Y, gradient=False) == pytest.approx(loss, rel=1e-12)


def _finite_difference(A, X, Y, step=1e-6):
    G = np.zeros_like(A)
    for idx in np.ndindex(A.shape):
        E = np.zeros_like(A)
        E[idx] = step
        G[idx] = (mlkr_loss(A + E, X, Y, gradient=False) - mlkr_loss(A - E, X, Y, gradient=False)) / (2 * step)
    return G


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("r", [1, 3, 4])
def test_gradient_equals_finite_differences(p, r):
    X, Y, rng = _data(p=p, seed=r)
    A = rng.normal(size=(r, X.shape[1]))
    _, G = mlkr_loss(A, X, Y)
    assert np.max(np.abs(G - _finite_difference(A, X, Y))) <= 1e-6 * np.max(np.abs(G))


def test_gradient_with_isolated_points():
    # Two points so far from every other that exp(−‖Δz‖²/2) underflows a float64 weight: their
    # column terms take the direct path.
    X, Y, rng = _data(n=40, p=1)
    X = np.vstack([X, [[60.0, 0, 0, 0], [0, -60.0, 0, 0]]])
    X -= X.mean(0)
    Y = np.vstack([Y, [[3.0], [-1.0]]])
    A = np.eye(4) + 0.1 * rng.normal(size=(4, 4))
    loss, G = mlkr_loss(A, X, Y)
    assert loss == pytest.approx(_explicit_loo(A, X, Y), rel=1e-10)
    assert np.max(np.abs(G - _finite_difference(A, X, Y))) <= 1e-6 * np.max(np.abs(G))


@pytest.mark.filterwarnings("ignore:the leave-one-out optimum is at the edge")
def test_planted_direction():
    # y depends on one direction u of 5 features: the learned A concentrates on u, and its LOO
    # error beats the best isotropic bandwidth.
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 5))
    u = np.array([1.0, -2.0, 0.5, 0.0, 1.0])
    u /= np.linalg.norm(u)
    y = np.sin(2.0 * X @ u) + 0.05 * rng.normal(size=300)
    m = MetricLearningRegressor(random_state=0).fit(X, y)
    _, s, Vt = np.linalg.svd(m.components_)
    assert abs(Vt[0] @ u) > 0.98
    assert s[1] < 0.3 * s[0]
    iso = LocalMeanRegressor(bandwidth="loo").fit(X, y)
    assert m.loo_error_ < 0.5 * iso.cv_results_["objective"].min()
    assert np.all(np.diff(m.loss_curve_) <= 1e-12 * m.loss_curve_[0])
    assert m.loo_error_ == pytest.approx(np.mean((m.predict(None) - y) ** 2), rel=1e-10)


def test_predict_is_local_mean_in_learned_space():
    X, Y, rng = _data(p=2)
    m = MetricLearningRegressor(n_components=2, max_iter=10).fit(X, Y)
    Q = rng.normal(size=(7, X.shape[1]))
    Z = X @ m.components_.T
    ref = LocalMeanRegressor(bandwidth=1.0).fit(Z, Y)
    np.testing.assert_allclose(m.predict(Q), ref.predict(Q @ m.components_.T), rtol=1e-12)
    np.testing.assert_allclose(m.transform(Q), Q @ m.components_.T, rtol=1e-14)
    assert m.predict(Q).shape == (7, 2)
    np.testing.assert_array_equal(m.loo_predict(), ref.predict(None))
    import pickle

    np.testing.assert_array_equal(pickle.loads(pickle.dumps(m)).predict(Q), m.predict(Q))
    assert m.get_feature_names_out().tolist() == ["metriclearningregressor0", "metriclearningregressor1"]


def test_init_options_and_thread_invariance():
    X, Y, rng = _data(p=1)
    y = Y[:, 0]
    A0 = rng.normal(size=(2, 4))
    m = MetricLearningRegressor(init=A0, max_iter=0).fit(X, y)
    np.testing.assert_array_equal(m.components_, A0)
    assert m.n_iter_ == 0 and len(m.loss_curve_) == 1
    for init in ("pca", "identity", "random"):
        a = MetricLearningRegressor(n_components=2, init=init, max_iter=5, random_state=0, n_jobs=1).fit(X, y)
        b = MetricLearningRegressor(n_components=2, init=init, max_iter=5, random_state=0, n_jobs=2).fit(X, y)
        np.testing.assert_array_equal(a.components_, b.components_)
        assert a.components_.shape == (2, 4)


def test_bad_input():
    X, Y, _ = _data(p=1)
    y = Y[:, 0]
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        MetricLearningRegressor().fit(Xn, y)
    with pytest.raises(ValueError, match="n_components"):
        MetricLearningRegressor(n_components=9).fit(X, y)
    with pytest.raises(ValueError, match="init"):
        MetricLearningRegressor(init=np.ones((2, 3))).fit(X, y)
    with pytest.raises(ValueError, match="init"):
        MetricLearningRegressor(init="lda").fit(X, y)
    with pytest.raises(ValueError, match="at least 2 samples"):
        MetricLearningRegressor().fit(X[:1], y[:1])
    with pytest.raises(ValueError, match="max_iter"):
        MetricLearningRegressor(max_iter=-1).fit(X, y)
    with pytest.raises(ValueError, match="NaN|infinity"):
        MetricLearningRegressor().fit(X, np.where(np.arange(len(y)) == 3, np.inf, y))
    with pytest.raises(ValueError, match="tol"):
        MetricLearningRegressor(tol=-1.0).fit(X, y)
    m = MetricLearningRegressor(max_iter=3).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        m.transform(X[:, :2])
    with pytest.raises(ValueError, match="NaN"):
        m.predict(Xn)
    # float32 and non-contiguous input: the same model as float64 C-ordered input.
    m32 = MetricLearningRegressor(max_iter=3).fit(np.asfortranarray(X.astype(np.float32)), y)
    assert m32.components_.dtype == np.float64 and m32.predict(X[::2, :]).shape == (len(X[::2]),)


def test_against_metric_learn():
    metric_learn = pytest.importorskip("metric_learn")
    X, Y, rng = _data(n=100, p=1)
    y = Y[:, 0]
    A = rng.normal(size=(2, 4))
    # metric-learn's kernel is exp(−‖A'(x − x')‖²), ours exp(−‖A(x − x')‖²/2): A = √2·A'.
    ml = metric_learn.MLKR(n_components=2)
    ml.n_iter_ = 0  # (its _loss reads the iteration counter)
    cost, grad = ml._loss(A.ravel(), X, y)  # Σᵢ (ŷᵢ − yᵢ)² and its gradient in A'
    loss, G = mlkr_loss(np.sqrt(2.0) * A, X, Y)
    assert cost / len(X) == pytest.approx(loss, rel=1e-10)
    np.testing.assert_allclose(grad.reshape(A.shape), len(X) * np.sqrt(2.0) * G, rtol=1e-8, atol=1e-10 * np.abs(grad).max())


# --- the diagonal case: LocalMeanRegressor(bandwidth="loo_per_feature") -----------------------


def test_per_feature_gradient_is_the_derivative_of_the_loo_objective():
    X, Y, rng = _data(n=70, d=3, p=2)
    reg = LocalMeanRegressor(bandwidth=1.0).fit(X, Y)
    gradient = reg._analytic_loo_gradient()
    h = np.array([0.4, 0.9, 2.0])

    def objective(log_h):
        return reg._loo_objective(Kernel("gaussian", np.exp(log_h)))

    value, g = gradient(Kernel("gaussian", h))
    assert value == pytest.approx(objective(np.log(h)), rel=1e-12)
    step = 1e-6
    fd = [(objective(np.log(h) + e) - objective(np.log(h) - e)) / (2 * step) for e in np.eye(3) * step]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9 * np.abs(g).max())
    # Only where the gradient is analytic: weighted fits and other kernels take differences.
    assert LocalMeanRegressor(kernel="epanechnikov").fit(X, Y)._analytic_loo_gradient() is None
    assert LocalMeanRegressor().fit(X, Y, sample_weight=np.ones(len(X)))._analytic_loo_gradient() is None


@pytest.mark.filterwarnings("ignore:the leave-one-out optimum is at the edge")
def test_per_feature_search_with_the_analytic_gradient_matches_differences():
    rng = np.random.default_rng(3)
    X = rng.uniform(size=(200, 2))
    y = np.sin(5 * X[:, 0]) + 2 * X[:, 1] ** 2 + 0.1 * rng.normal(size=200)
    analytic = LocalMeanRegressor(bandwidth="loo_per_feature").fit(X, y)
    # Unit sample weights: the same objective, by the least-squares descent on forward-difference
    # Jacobians (each stops within 1e-4 of the minimiser in log h: the minima agree to ~h²·1e-8).
    differences = LocalMeanRegressor(bandwidth="loo_per_feature").fit(X, y, sample_weight=np.ones(200))
    np.testing.assert_allclose(analytic.bandwidth_, differences.bandwidth_, rtol=1e-4)
    np.testing.assert_allclose(analytic.cv_results_["objective"].min(), differences.cv_results_["objective"].min(), rtol=1e-8)
    n_gradient = [np.sum(r.cv_results_["stage"] == "gradient") for r in (analytic, differences)]
    assert n_gradient[0] < n_gradient[1] / 2


def test_docstring_examples_run():
    import doctest

    import localization.metric_learning as module

    assert doctest.testmod(module, raise_on_error=False).failed == 0

"""MultiKernel for LocalPolynomialRegressor (LOO squared error of the averaged fits) and
KernelDensity (LOO log-likelihood of the mixture density): weights on the simplex, never worse
than the best single kernel, equal to a brute-force search over a grid on the simplex."""

import itertools
import pickle

import numpy as np
import pytest

from localization import KernelDensity, LocalPolynomialRegressor, MultiKernel
from localization.kernels import Kernel


def _data(n=60, d=2, seed=0, noise=0.4):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, d))
    y = np.sin(4 * X[:, 0]) + X[:, -1] ** 2 + noise * rng.standard_normal(n)
    return X, y


def _simplex_grid(L, steps):
    """Every point of the simplex whose coordinates are multiples of 1/steps."""
    for c in itertools.product(range(steps + 1), repeat=L - 1):
        if sum(c) <= steps:
            yield np.array(list(c) + [steps - sum(c)]) / steps


def _refit_loo(make, X, y, predict):
    out = []
    for i in range(len(X)):
        keep = np.arange(len(X)) != i
        est = make().fit(X[keep], None if y is None else y[keep])
        out.append(predict(est, X[i : i + 1])[0])
    return np.array(out)


POLY_KERNELS = [Kernel("gaussian", 0.08), Kernel("gaussian", 0.2), Kernel("epanechnikov", 0.5)]


@pytest.mark.parametrize("degree", [0, 1])
def test_local_polynomial_multikernel(degree):
    X, y = _data()
    reg = LocalPolynomialRegressor(degree=degree, kernel=MultiKernel(POLY_KERNELS)).fit(X, y)
    w = reg.kernel_weights_
    assert np.all(w >= 0) and w.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.sum(w > 0.1) >= 2  # a genuine mixture on this noisy sample
    # Each kernel's LOO residuals against explicit refits without the point.
    R = []
    for k in POLY_KERNELS:
        loo = _refit_loo(lambda: LocalPolynomialRegressor(degree=degree, kernel=k), X, y, lambda e, q: e.predict(q))
        R.append(loo - y)
    R = np.array(R)
    np.testing.assert_allclose(reg.cv_results_["kernel_loo_error"], np.mean(R**2, axis=1), rtol=1e-10)
    mixed = np.mean((reg.predict(None) - y) ** 2)  # the mixture's own exact LOO error
    assert mixed == pytest.approx(reg.cv_results_["loo_error"], rel=1e-10)
    assert mixed <= np.min(np.mean(R**2, axis=1)) * (1 + 1e-12)
    # Brute force over the simplex: nothing on a fine grid beats the weights found.
    A = R @ R.T / len(y)
    grid = list(_simplex_grid(3, 50))
    values = [g @ A @ g for g in grid]
    assert w @ A @ w <= min(values) + 1e-12
    assert np.max(np.abs(grid[int(np.argmin(values))] - w)) <= 0.05
    # Predictions are the w-average of the single fits, and so is the equivalent kernel.
    Q = X[:5] + 0.01
    singles = [LocalPolynomialRegressor(degree=degree, kernel=k).fit(X, y) for k in POLY_KERNELS]
    np.testing.assert_allclose(reg.predict(Q), sum(wi * s.predict(Q) for wi, s in zip(w, singles)), rtol=1e-10)
    np.testing.assert_allclose(reg.equivalent_kernel(Q) @ y, reg.predict(Q), rtol=1e-9)
    assert pickle.loads(pickle.dumps(reg)).predict(Q).tolist() == reg.predict(Q).tolist()


def test_local_polynomial_multikernel_bad_input():
    X, y = _data(n=20)
    with pytest.raises(ValueError, match="undefined"):
        LocalPolynomialRegressor(kernel=MultiKernel([Kernel("tophat", 1e-6), Kernel("gaussian", 1.0)])).fit(X, y)
    with pytest.raises(ValueError, match="LOO bandwidth"):
        LocalPolynomialRegressor(kernel=MultiKernel([Kernel()]), bandwidth="loo").fit(X, y)
    with pytest.raises(ValueError, match="radial profile or knn"):
        LocalPolynomialRegressor(kernel=MultiKernel([Kernel("dot")])).fit(X, y)


DENSITY_KERNELS = [Kernel("gaussian", 0.03), Kernel("epanechnikov", 0.3), Kernel("gaussian", 0.6)]


def _bimodal(n=80, seed=1):
    # A sharp cluster and a broad one: no single bandwidth fits both, a mixture does better.
    rng = np.random.default_rng(seed)
    return np.vstack([0.02 * rng.standard_normal((n // 2, 2)), 1.0 + 0.5 * rng.standard_normal((n - n // 2, 2))])


def test_kernel_density_multikernel():
    X = _bimodal()
    kde = KernelDensity(kernel=MultiKernel(DENSITY_KERNELS)).fit(X)
    w = kde.kernel_weights_
    assert np.all(w >= 0) and w.sum() == pytest.approx(1.0, abs=1e-12)
    # LOO log-densities by explicit refits without the point, kernel by kernel.
    logp = np.array([_refit_loo(lambda: KernelDensity(kernel=k), X, None, lambda e, q: e.score_samples(q))
                     for k in DENSITY_KERNELS])
    np.testing.assert_allclose(kde.cv_results_["kernel_loo_log_likelihood"], logp.mean(axis=1), rtol=1e-10)

    def objective(v):
        with np.errstate(divide="ignore"):
            return np.mean(np.log(v @ np.exp(logp)))

    assert objective(w) == pytest.approx(kde.cv_results_["loo_log_likelihood"], rel=1e-10)
    assert objective(w) >= logp.mean(axis=1).max() - 1e-12
    assert 0.05 < w.max() < 0.95  # a genuine mixture on this sample
    grid = list(_simplex_grid(3, 50))
    values = [objective(g) for g in grid]
    assert objective(w) >= max(values) - 1e-12
    assert np.max(np.abs(grid[int(np.argmax(values))] - w)) <= 0.05
    # The density is the mixture of the single-kernel densities.
    Q = np.array([[0.0, 0.0], [1.0, 1.2], [0.3, -0.2]])
    singles = [KernelDensity(kernel=k).fit(X) for k in DENSITY_KERNELS]
    want = np.log(sum(wi * np.exp(s.score_samples(Q)) for wi, s in zip(w, singles)))
    np.testing.assert_allclose(kde.score_samples(Q), want, rtol=1e-12)
    logs, bound = kde.score_samples(Q, return_error_bound=True)
    np.testing.assert_array_equal(logs, kde.score_samples(Q))
    assert np.all(bound == 0)
    # The score function is the gradient of the mixture's log-density.
    eps = 1e-6
    fd = np.column_stack([(kde.score_samples(Q + e) - kde.score_samples(Q - e)) / (2 * eps) for e in np.eye(2) * eps])
    np.testing.assert_allclose(kde.score_function(Q), fd, rtol=1e-5, atol=1e-6)
    # Sampling: reproducible, and the mixture's mean (every kernel is centred on the data).
    draws = kde.sample(4000, random_state=0)
    np.testing.assert_array_equal(draws, kde.sample(4000, random_state=0))
    assert draws.shape == (4000, 2)
    np.testing.assert_allclose(draws.mean(axis=0), X.mean(axis=0), atol=0.05)
    assert pickle.loads(pickle.dumps(kde)).score_samples(Q).tolist() == kde.score_samples(Q).tolist()


def test_simplex_log_likelihood_kkt():
    from localization.adaptive import simplex_log_likelihood

    rng = np.random.default_rng(0)
    for L in (1, 2, 4, 6):
        log_p = rng.normal(size=(50, L)) * 3
        log_p[rng.uniform(size=log_p.shape) < 0.1] = -np.inf
        log_p[:, 0] = np.maximum(log_p[:, 0], -5.0)  # every row has a finite entry
        w = simplex_log_likelihood(log_p)
        assert np.all(w >= 0) and w.sum() == pytest.approx(1.0, abs=1e-12)
        P = np.exp(log_p - log_p.max(1, keepdims=True))
        g = np.mean(P / (P @ w)[:, None], axis=0)  # KKT: g ≤ 1, equality on the support
        assert np.all(g <= 1 + 1e-8)
        np.testing.assert_allclose(g[w > 1e-6], 1.0, atol=1e-8)


def test_kernel_density_multikernel_bad_input():
    X = _bimodal(n=20)
    with pytest.raises(ValueError, match="radial profile"):
        KernelDensity(kernel=MultiKernel([Kernel("knn", n_neighbors=3)])).fit(X)
    with pytest.raises(ValueError, match="LOO bandwidth"):
        KernelDensity(kernel=MultiKernel([Kernel()]), bandwidth="loo").fit(X)
    with pytest.raises(ValueError, match="every kernel"):
        KernelDensity(kernel=MultiKernel([Kernel("tophat", 1e-6), Kernel("epanechnikov", 1e-6)])).fit(X)

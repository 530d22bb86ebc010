import pickle

import numpy as np
import pytest
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.neighbors import KNeighborsRegressor

from localization import LocalMeanRegressor, LocalModel, LocalPolynomialRegressor, local_mean
from localization.datasets import make_curve


ALGORITHMS = ["auto", "brute", "expansion"]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_local_mean_regressor_matches_statsmodels_local_constant(algorithm):
    from statsmodels.nonparametric.kernel_regression import KernelReg

    X, y = make_curve(150, random_state=1)
    Q = np.linspace(0, 1, 37)[:, None]
    want = KernelReg(y, X, var_type="c", reg_type="lc", bw=[0.07]).fit(Q)[0]
    got = LocalMeanRegressor(bandwidth=0.07, algorithm=algorithm).fit(X, y).predict(Q)
    np.testing.assert_allclose(got, want, rtol=1e-10)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_local_linear_matches_statsmodels_local_linear(algorithm):
    from statsmodels.nonparametric.kernel_regression import KernelReg

    X, y = make_curve(150, random_state=2)
    Q = np.linspace(0, 1, 37)[:, None]
    want = KernelReg(y, X, var_type="c", reg_type="ll", bw=[0.07]).fit(Q)[0]
    got = LocalPolynomialRegressor(degree=1, bandwidth=0.07, algorithm=algorithm).fit(X, y).predict(Q)
    np.testing.assert_allclose(got, want, rtol=1e-9)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_local_linear_matches_statsmodels_in_two_dimensions(rng, algorithm):
    from statsmodels.nonparametric.kernel_regression import KernelReg

    X = rng.random((120, 2))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2
    Q = rng.random((15, 2))
    want = KernelReg(y, X, var_type="cc", reg_type="ll", bw=[0.2, 0.2]).fit(Q)[0]
    got = LocalPolynomialRegressor(degree=1, bandwidth=0.2, algorithm=algorithm).fit(X, y).predict(Q)
    np.testing.assert_allclose(got, want, rtol=1e-9)


@pytest.mark.parametrize("d", [1, 2])
@pytest.mark.parametrize("h", [0.01, 0.1, 2.0, 1e3])
def test_series_expansion_agrees_with_direct_sums(rng, d, h):
    # Fitted values at the samples and fits at fresh points, degree 0-2; local means also
    # far outside the data. (Linear or quadratic fits extrapolated 30 units out are
    # ill-conditioned: both paths are then only ~1e-7 from a long-double solution; so are
    # local designs with a handful of samples per window, as at h = 0.01 in two dimensions.)
    X = rng.random((700, d))
    y = np.sin(5 * X.sum(1)) + 0.1 * rng.standard_normal(700)
    Q = rng.random((300, d))
    far = np.vstack([Q, rng.random((5, d)) + 30.0])
    cases = [(0, far)] + ([(1, Q), (2, Q), (1, X), (2, X)] if d == 1 or h > 0.01 else [])
    for degree, queries in cases:
        fits = [LocalPolynomialRegressor(degree=degree, bandwidth=h, algorithm=a).fit(X, y).predict(queries) for a in ("brute", "expansion")]
        np.testing.assert_allclose(fits[1], fits[0], rtol=1e-9, atol=1e-11)
    means = [local_mean(far, X, y, bandwidth=h, algorithm=a) for a in ("brute", "expansion")]
    np.testing.assert_allclose(means[1], means[0], rtol=1e-11, atol=1e-13)


def test_series_expansion_at_extreme_bandwidths():
    X = np.array([[1e6], [-1e6], [0.5], [3.0]])
    y = np.array([1.0, 2.0, 3.0, 5.0])
    for h, degree in [(1e300, 1), (1e100, 2), (1e-100, 0)]:
        fits = [LocalPolynomialRegressor(degree=degree, bandwidth=h, algorithm=a).fit(X, y).predict(X) for a in ("brute", "expansion")]
        np.testing.assert_allclose(fits[1], fits[0], rtol=1e-12)
    with pytest.raises(ValueError, match="bandwidth"):
        local_mean(X, X, y, bandwidth=1e-200, algorithm="expansion")


def test_series_expansion_is_chosen_and_thread_count_invariant(rng):
    X = rng.random((5000, 1))
    y = np.cos(4 * X[:, 0])
    runs = [LocalPolynomialRegressor(bandwidth=0.05, n_jobs=t).fit(X, y).predict(X) for t in (1, 2, 5)]
    assert np.array_equal(runs[0], runs[1]) and np.array_equal(runs[0], runs[2])
    brute = LocalPolynomialRegressor(bandwidth=0.05, algorithm="brute").fit(X, y).predict(X)
    np.testing.assert_allclose(runs[0], brute, rtol=1e-12, atol=1e-13)
    with pytest.raises(ValueError, match="algorithm"):
        LocalPolynomialRegressor(algorithm="fast").fit(X, y)


@pytest.mark.parametrize("k", [1, 5, 12])
def test_knn_regression_equals_scikit_learn(rng, k):
    X = rng.random((400, 3))
    y = rng.standard_normal((400, 2))
    Q = rng.random((90, 3))
    want = KNeighborsRegressor(n_neighbors=k).fit(X, y).predict(Q)
    got = LocalMeanRegressor(kernel="knn", n_neighbors=k).fit(X, y).predict(Q)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_identity_1_local_constant_fit_is_the_local_mean(rng):
    X = rng.random((200, 2))
    y = rng.standard_normal(200)
    Q = rng.random((30, 2))
    for kernel in ["gaussian", "tricube"]:
        a = LocalPolynomialRegressor(degree=0, kernel=kernel, bandwidth=0.5).fit(X, y).predict(Q)
        b = local_mean(Q, X, y, kernel=kernel, bandwidth=0.5)
        np.testing.assert_allclose(a, b, rtol=1e-10)


@pytest.mark.parametrize("degree", [1, 2])
def test_identity_2_equivalent_kernel(rng, degree):
    X = rng.random((150, 2))
    y = rng.standard_normal(150)
    Q = rng.random((20, 2))
    reg = LocalPolynomialRegressor(degree=degree, kernel="epanechnikov", bandwidth=0.6).fit(X, y)
    ell = reg.equivalent_kernel(Q)
    np.testing.assert_allclose(ell @ y, reg.predict(Q), atol=1e-10)
    np.testing.assert_allclose(ell.sum(1), 1.0, atol=1e-10)
    np.testing.assert_allclose(ell @ X, Q, atol=1e-10)  # Σ ℓᵢ xᵢ = x*
    assert (ell < 0).any()


def test_degree_2_reproduces_quadratics_exactly(rng):
    X = rng.random((100, 2))
    y = 1 + X[:, 0] - 2 * X[:, 1] + 3 * X[:, 0] * X[:, 1] - X[:, 1] ** 2
    Q = rng.random((10, 2))
    pred = LocalPolynomialRegressor(degree=2, bandwidth=0.5).fit(X, y).predict(Q)
    want = 1 + Q[:, 0] - 2 * Q[:, 1] + 3 * Q[:, 0] * Q[:, 1] - Q[:, 1] ** 2
    np.testing.assert_allclose(pred, want, atol=1e-9)


def test_ridge_and_singular_designs(rng):
    X = np.array([[0.0], [1.0], [2.0]])
    y = np.array([0.0, 1.0, 4.0])
    reg = LocalPolynomialRegressor(degree=1, kernel="tophat", bandwidth=0.5).fit(X, y)
    with pytest.warns(UserWarning, match="singular"):
        p = reg.predict([[1.0]])  # one point in the window: slope undefined
    assert np.isnan(p[0])
    p = LocalPolynomialRegressor(degree=1, kernel="tophat", bandwidth=0.5, ridge=1e-3).fit(X, y).predict([[1.0]])
    assert np.isfinite(p[0])


def test_loo_bandwidth_selection(rng):
    X, y = make_curve(200, random_state=3)
    reg = LocalMeanRegressor(bandwidth="loo").fit(X, y)
    grid, err = reg.bandwidth_grid_, reg.loo_errors_
    assert reg.bandwidth_ == grid[np.argmin(err)]
    # the chosen error is the exact LOO error at that h
    loo = LocalMeanRegressor(bandwidth=reg.bandwidth_).fit(X, y).loo_predict()
    assert abs(np.mean((loo - y) ** 2) - err.min()) < 1e-12
    assert 0.01 < reg.bandwidth_ < 0.2
    reg2 = LocalMeanRegressor(bandwidth="loo", bandwidth_grid=[0.05, 0.1]).fit(X, y)
    assert reg2.bandwidth_ in (0.05, 0.1)


def test_local_model_with_linear_regression_is_local_linear(rng):
    X = rng.random((80, 2))
    y = np.sin(4 * X[:, 0]) + X[:, 1]
    Q = rng.random((12, 2))
    a = LocalModel(LinearRegression(), bandwidth=0.3).fit(X, y).predict(Q)
    b = LocalPolynomialRegressor(degree=1, bandwidth=0.3).fit(X, y).predict(Q)
    np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


def test_local_model_classifier_and_neighbours(rng):
    X = rng.random((120, 2))
    y = (X[:, 0] + 0.3 * np.sin(8 * X[:, 1]) > 0.5).astype(int)
    m = LocalModel(LogisticRegression(), bandwidth=0.2, n_neighbors=40).fit(X, y)
    assert m.score(X, y) > 0.85
    assert set(np.unique(m.predict(X[:10]))) <= {0, 1}


@pytest.mark.parametrize("est", [LocalMeanRegressor(bandwidth=0.3), LocalPolynomialRegressor(degree=2, bandwidth=0.5),
                                 LocalModel(LinearRegression(), bandwidth=0.4)])
def test_fitted_estimators_pickle(rng, est):
    X = rng.random((60, 2))
    y = rng.random(60)
    est.fit(X, y)
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict(X[:5]), est.predict(X[:5]))


def test_multi_output(rng):
    X = rng.random((100, 2))
    Y = rng.random((100, 3))
    for est in [LocalMeanRegressor(bandwidth=0.3), LocalPolynomialRegressor(bandwidth=0.3)]:
        assert est.fit(X, Y).predict(X[:4]).shape == (4, 3)


@pytest.mark.parametrize("k", [1, 4, 10])
def test_knn_predict_none_is_scikit_learns_leave_one_out(rng, k):
    from sklearn.model_selection import LeaveOneOut, cross_val_predict

    X = rng.random((30, 2))
    Y = np.c_[rng.random(30), rng.random(30)]
    sk = KNeighborsRegressor(n_neighbors=k).fit(X, Y)
    ours = LocalMeanRegressor(kernel="knn", n_neighbors=k).fit(X, Y)
    np.testing.assert_allclose(ours.predict(None), sk.predict(None), rtol=1e-12)
    np.testing.assert_array_equal(ours.loo_predict(), ours.predict(None))
    loo = cross_val_predict(LocalMeanRegressor(kernel="knn", n_neighbors=k), X, Y, cv=LeaveOneOut())
    np.testing.assert_allclose(ours.predict(None), loo, rtol=1e-12)
    # Copies: a point with more copies than neighbour slots drops the first copy, as scikit-learn.
    D = np.array([[0.0], [0.0], [0.0], [2.0], [2.0]])
    yd = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    want = KNeighborsRegressor(n_neighbors=1, algorithm="brute").fit(D, yd).predict(None)
    np.testing.assert_array_equal(LocalMeanRegressor(kernel="knn", n_neighbors=1).fit(D, yd).predict(None), want)


def test_sparse_input_regression(rng):
    import scipy.sparse as sp

    X = rng.random((50, 4)) * (rng.random((50, 4)) > 0.4)
    y = rng.random(50)
    sk = KNeighborsRegressor(n_neighbors=3).fit(sp.csr_matrix(X), y)
    ours = LocalMeanRegressor(kernel="knn", n_neighbors=3).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(ours.predict(sp.csr_matrix(X[:10])), sk.predict(X[:10]), rtol=1e-12)

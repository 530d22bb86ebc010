"""Signed kernels: linear combinations of kernels (difference of Gaussians), the row-normalised
kernel and the normalised Laplacian L̃ = I − K̃; accepted by the local means, refused by name
by the estimators that need a non-negative kernel."""

import pickle
import warnings

import numpy as np
import pytest

from localization import (
    Kernel,
    KernelCombination,
    KernelDensity,
    LabelPropagation,
    LocalizationWarning,
    LocalMeanRegressor,
    LocalModeClassifier,
    LocalModel,
    LocalPolynomialRegressor,
    MeanShift,
    QuickShift,
    kernel_matrix,
    kernel_sum,
    local_mean,
)
from localization.kernels import laplacian, normalized


def gauss(Q, X, h):
    return np.exp(-0.5 * ((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1) / h**2)


DOG = 2 * Kernel("gaussian", 0.3) - Kernel("gaussian", 0.6)


def test_difference_of_gaussians_local_mean_and_sums_are_exact(rng):
    X = rng.random((200, 2))
    Q = rng.random((30, 2))
    y = np.sin(4 * X[:, 0]) + X[:, 1]
    w = rng.random(200) + 0.5
    K = 2 * gauss(Q, X, 0.3) - gauss(Q, X, 0.6)
    assert DOG.signed and (K < 0).any()
    np.testing.assert_allclose(kernel_matrix(Q, X, kernel=DOG), K, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(kernel_sum(Q, X, kernel=DOG, sample_weight=w), K @ w, rtol=1e-12)
    np.testing.assert_allclose(kernel_sum(Q, X, y, kernel=DOG, sample_weight=w), K @ (w * y), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(local_mean(Q, X, y, kernel=DOG, sample_weight=w), (K @ (w * y)) / (K @ w), rtol=1e-11)
    # Leave-one-out with the hollow combination.
    Kx = 2 * gauss(X, X, 0.3) - gauss(X, X, 0.6)
    np.fill_diagonal(Kx, 0.0)
    np.testing.assert_allclose(local_mean(X, X, y, kernel=DOG, exclude_self=True), (Kx @ y) / Kx.sum(1), rtol=1e-10)


def test_terms_are_combined_exactly_through_their_log_scales():
    """Tiny bandwidths: every term underflows on its own, the combination stays exact."""
    X = np.array([[0.0], [1.0], [3.0]])
    Q = np.array([[40.0], [0.4]])
    K = Kernel("gaussian", 0.01) - 0.5 * Kernel("gaussian", 0.02)
    # At 40 only the sample at 3 matters: its two terms exp(-u²/2) with u = 37/h.
    m = local_mean(Q, X, [1.0, 2.0, 5.0], kernel=K)
    assert m[0] == pytest.approx(5.0, rel=1e-12)
    assert np.isfinite(m[1])


def test_zero_denominator_rule():
    X = np.array([[0.0], [1.0]])
    K = Kernel("gaussian", 1.0) - Kernel("gaussian", 1.0)  # exactly zero everywhere
    with pytest.warns(LocalizationWarning, match="undefined"):
        out = local_mean([[0.3], [5.0]], X, [1.0, 2.0], kernel=K)
    assert np.isnan(out).all()
    # Cancellation to rounding also counts as zero: K_h − K_h·(1 + 1e-15).
    K2 = Kernel("gaussian", 1.0) - (1 + 1e-15) * Kernel("gaussian", 1.0)
    with pytest.warns(LocalizationWarning):
        assert np.isnan(local_mean([[0.3]], X, [1.0, 2.0], kernel=K2)).all()
    np.testing.assert_array_equal(kernel_sum([[0.3]], X, kernel=K), [0.0])
    # A negative total weight is a weight like any other.
    neg = -1.0 * Kernel("gaussian", 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(local_mean([[0.3]], X, [1.0, 2.0], kernel=neg), local_mean([[0.3]], X, [1.0, 2.0]))


@pytest.mark.parametrize("kernel", [Kernel("gaussian", 0.4), Kernel("tricube", 0.5), Kernel("knn", n_neighbors=6)])
def test_identity_13_laplacian_rows_sum_to_zero(rng, kernel):
    X = rng.random((80, 3))
    X[40:45] = X[0]  # duplicates: the identity kernel averages over equal points
    v = rng.normal(size=(80, 2))
    L = laplacian(kernel)
    Lm = kernel_matrix(X, X, kernel=L)
    np.testing.assert_allclose(Lm.sum(1), 0.0, atol=1e-14)
    K = kernel_matrix(X, X, kernel=kernel)
    I = (np.abs(X[:, None, :] - X[None, :, :]).sum(-1) == 0).astype(float)
    want = I / I.sum(1, keepdims=True) - K / K.sum(1, keepdims=True)
    np.testing.assert_allclose(Lm, want, atol=1e-14)
    np.testing.assert_allclose(kernel_sum(X, X, v, kernel=L), want @ v, atol=1e-13)
    np.testing.assert_allclose(kernel_sum(X, X, kernel=L), 0.0, atol=0)
    with pytest.warns(LocalizationWarning):
        assert np.isnan(local_mean(X, X, v, kernel=L)).all()  # rows sum to zero: no local mean


def test_normalized_combination_is_a_mixture_of_local_means(rng):
    X = rng.random((100, 2))
    Q = rng.random((10, 2))
    y = rng.random(100)
    mix = 0.3 * normalized(Kernel("gaussian", 0.2)) + 0.7 * normalized(Kernel("epanechnikov", 0.5))
    want = 0.3 * local_mean(Q, X, y, bandwidth=0.2) + 0.7 * local_mean(Q, X, y, kernel="epanechnikov", bandwidth=0.5)
    np.testing.assert_allclose(local_mean(Q, X, y, kernel=mix), want, rtol=1e-12)
    assert not mix.signed
    with pytest.raises(TypeError, match="normalised"):
        mix + Kernel("gaussian", 1.0) * 1.0 - normalized(Kernel("tophat")) + Kernel("gaussian")


def test_signed_callable_profile_is_accepted_by_local_means():
    mexican_hat = lambda u: (1 - u**2) * np.exp(-(u**2) / 2)  # noqa: E731
    X = np.linspace(0, 1, 30)[:, None]
    y = X[:, 0] ** 2
    Q = np.array([[0.5]])
    K = (1 - (np.abs(Q - X.T) / 0.3) ** 2) * np.exp(-((np.abs(Q - X.T) / 0.3) ** 2) / 2)
    np.testing.assert_allclose(local_mean(Q, X, y, kernel=mexican_hat, bandwidth=0.3), (K @ y) / K.sum(1), rtol=1e-12)
    with pytest.raises(ValueError, match="KernelDensity needs|non-negative"):
        LocalModeClassifier(kernel=mexican_hat, bandwidth=0.3).fit(X, y > 0.3).predict(Q)


def test_local_mean_regressor_accepts_signed_kernels(rng):
    X = rng.random((150, 1))
    y = np.sin(6 * X[:, 0])
    reg = LocalMeanRegressor(kernel=DOG).fit(X, y)
    Q = rng.random((20, 1))
    np.testing.assert_allclose(reg.predict(Q), local_mean(Q, X, y, kernel=DOG), rtol=1e-12)
    np.testing.assert_allclose(reg.predict(None), local_mean(X, X, y, kernel=DOG, exclude_self=True), rtol=1e-12)
    again = pickle.loads(pickle.dumps(reg))
    np.testing.assert_array_equal(again.predict(Q), reg.predict(Q))
    assert pickle.loads(pickle.dumps(DOG)) == DOG


@pytest.mark.parametrize(
    "make",
    [
        lambda: KernelDensity(kernel=DOG).fit([[0.0], [1.0]]),
        lambda: LocalModeClassifier(kernel=DOG).fit([[0.0], [1.0]], [0, 1]),
        lambda: LabelPropagation(kernel=DOG).fit([[0.0], [1.0]], [0, -1]),
        lambda: LocalModel(kernel=DOG).fit([[0.0], [1.0]], [0.0, 1.0]).predict([[0.5]]),
        lambda: QuickShift(kernel=DOG, max_dist=1.0).fit([[0.0], [1.0]]),
        lambda: kernel_sum([[0.0]], [[0.0], [1.0]], kernel=DOG, log=True),
    ],
)
def test_estimators_needing_non_negative_weights_refuse_signed_kernels_by_name(make):
    with pytest.raises(ValueError, match="needs a non-negative kernel|single radial profile"):
        make()


def test_estimators_needing_a_single_kernel_say_so():
    with pytest.raises(ValueError, match="LocalPolynomialRegressor needs a"):
        LocalPolynomialRegressor(kernel=DOG).fit([[0.0], [1.0], [2.0]], [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="LocalPolynomialRegressor needs a single"):
        LocalPolynomialRegressor(kernel=Kernel() + Kernel()).fit([[0.0], [1.0], [2.0]], [0.0, 1.0, 2.0])
    with pytest.raises(TypeError, match="MeanShift"):
        MeanShift(kernel=DOG).fit([[0.0], [1.0]])
    with pytest.raises(ValueError, match="KernelDensity needs a single"):
        KernelDensity(kernel=Kernel("gaussian") + Kernel("tophat")).fit([[0.0], [1.0]])


def test_non_negative_combinations_work_in_local_sum_estimators(rng):
    X = rng.random((60, 2))
    y = (X[:, 0] > 0.5).astype(int)
    mix = Kernel("gaussian", 0.2) + 0.5 * Kernel("epanechnikov", 0.4)
    clf = LocalModeClassifier(kernel=mix).fit(X, y)
    onehot = np.eye(2)[y]
    np.testing.assert_allclose(clf.predict_proba(X[:5]), local_mean(X[:5], X, onehot, kernel=mix), rtol=1e-12)


def test_combination_arguments():
    with pytest.raises(ValueError, match="finite"):
        Kernel("gaussian") * np.nan
    with pytest.raises(TypeError, match="Kernel objects"):
        KernelCombination(["gaussian"], [1.0])
    with pytest.raises(ValueError, match="one coefficient"):
        KernelCombination([Kernel()], [1.0, 2.0])
    assert (Kernel() - Kernel()).coefficients == [1.0, -1.0]
    assert (-Kernel()).signed and not (Kernel() + Kernel()).signed

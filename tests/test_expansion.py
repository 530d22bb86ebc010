"""The Gaussian expansions (algorithm="expansion": the two-sided series, and the Chebyshev grid
in two and three features) against the direct sums, at the mid-range bandwidths where the
series cuts far clusters by a Gaussian tail bound and shortens far pairs' series and the grid
leaves queries outside its bound to the direct sums: the stated bound is 1e-14 of Σ w K per
query plus rounding (the tests allow 1e-12 to 1e-13)."""

import numpy as np
import pytest

from localization import LocalSums
from localization.engine import kernel_sum, local_mean


def three_blobs(n, seed):
    rng = np.random.default_rng(seed)
    c = np.array([[0.0, 0.0], [6.0, 0.0], [3.0, 5.0]])
    return c[rng.integers(0, 3, n)] + rng.standard_normal((n, 2)), rng


@pytest.mark.parametrize("fraction", [3, 11, 28, 100])
def test_expansion_matches_direct_sums_at_mid_range_bandwidths(fraction):
    X, rng = three_blobs(6000, fraction)
    h = np.ptp(X, axis=0).max() / fraction
    for w in (None, rng.uniform(0, 1, len(X)), np.exp(8 * rng.standard_normal(len(X)))):
        a = kernel_sum(X, X, kernel="gaussian", bandwidth=h, sample_weight=w, algorithm="expansion")
        b = kernel_sum(X, X, kernel="gaussian", bandwidth=h, sample_weight=w, algorithm="brute")
        np.testing.assert_array_less(np.abs(a - b), 1e-12 * b)
        y = np.c_[np.sin(X[:, 0]), X[:, 1] ** 2]
        ma = local_mean(X, X, y, bandwidth=h, sample_weight=w, algorithm="expansion")
        mb = local_mean(X, X, y, bandwidth=h, sample_weight=w, algorithm="brute")
        assert np.all(np.abs(ma - mb) < 1e-12 * np.abs(y).max(axis=0))


def test_expansion_far_queries_and_thread_count():
    X, rng = three_blobs(5000, 7)
    far = np.r_[X[:200], rng.uniform(-40, 40, (300, 2))]
    h = 1.3
    a = kernel_sum(far, X, kernel="gaussian", bandwidth=h, algorithm="expansion", n_jobs=1)
    b = kernel_sum(far, X, kernel="gaussian", bandwidth=h, algorithm="brute")
    np.testing.assert_array_less(np.abs(a - b), 1e-12 * b + 1e-300)
    for threads in (2, 3):
        assert np.array_equal(a, kernel_sum(far, X, kernel="gaussian", bandwidth=h, algorithm="expansion", n_jobs=threads))
    q32, x32 = far.astype(np.float32), X.astype(np.float32)
    f32 = kernel_sum(q32, x32, kernel="gaussian", bandwidth=h, algorithm="expansion")
    # Against the f64 sums of the same (rounded) points: f32 to its rounding, which for far
    # queries is that of the exponent (|q − x|²/2h² ≈ 700 there), as in the direct f32 sums.
    want = kernel_sum(q32.astype(np.float64), x32.astype(np.float64), kernel="gaussian", bandwidth=h, algorithm="brute")
    direct32 = kernel_sum(q32, x32, kernel="gaussian", bandwidth=h, algorithm="brute")
    np.testing.assert_allclose(f32[:200], want[:200], rtol=1e-5)
    np.testing.assert_allclose(f32, want, rtol=2e-4)  # the direct f32 sums err by up to 7e-5 here
    np.testing.assert_allclose(direct32, want, rtol=2e-4)


@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_expansion_values_that_repeat_a_coordinate(offset):
    """A value column equal to a coordinate (a mean shift's local mean) takes its power sums
    from the kernel's at one degree more; the sums must match the direct ones as any value's,
    alone, mixed with other columns and with the design moments' cross terms."""
    X, rng = three_blobs(5000, 3)
    X = X + offset
    w = rng.uniform(0.5, 2.0, len(X))
    h = np.ptp(X, axis=0).max() / 20
    for V in (X, np.c_[X[:, 1], np.sin(X[:, 0]), X[:, 0]]):
        for degree in (None, 1):
            a = LocalSums.compute(X, X, V, bandwidth=h, sample_weight=w, degree=degree, algorithm="expansion")
            b = LocalSums.compute(X, X, V, bandwidth=h, sample_weight=w, degree=degree, algorithm="brute")
            scale = b.total() * np.abs(V).max(axis=0)[None, :].max()
            assert np.all(np.abs(a.total(values=True) - b.total(values=True)) <= 1e-12 * scale[:, None])
            if degree is not None:
                ca, cb = (s.cross * np.exp(s.log_scale)[:, None, None] for s in (a, b))
                assert np.all(np.abs(ca - cb) <= 1e-12 * np.abs(cb).max(axis=(1, 2), keepdims=True))


def blobs(n, d, seed):
    """Five Gaussian blobs of different widths in d features."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-3, 3, (5, d))
    which = rng.integers(0, 5, n)
    return centres[which] + rng.standard_normal((n, d)) * rng.uniform(0.3, 1.0, 5)[which, None], rng


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("fraction", [3, 10, 20])
def test_grid_matches_direct_sums_in_two_and_three_features(d, fraction):
    """Kernel sums and local means through the Chebyshev grid (2–3 features) against the direct
    sums: weights none, uniform and spanning e^±30 (most of the mass on a few samples, so many
    queries fall outside the grid's bound and are summed exactly), offset data."""
    X, rng = blobs(4000, d, fraction)
    for offset in (0.0, 1e4):
        Xo = X + offset
        h = np.ptp(Xo, axis=0).max() / fraction
        y = np.c_[np.sin(X[:, 0]), Xo[:, 1]]
        # Sums dominated by heavy samples a few bandwidths away lose more to the grid's
        # rounding (docs/engine.md, "Rounding"): 1e-12 there, the engine's promise.
        for w, tol in ((None, 1e-13), (rng.uniform(0, 1, len(X)), 1e-13), (np.exp(8 * rng.standard_normal(len(X))), 1e-12)):
            a = kernel_sum(Xo, Xo, bandwidth=h, sample_weight=w, algorithm="expansion")
            b = kernel_sum(Xo, Xo, bandwidth=h, sample_weight=w, algorithm="brute")
            np.testing.assert_array_less(np.abs(a - b), tol * b)
            ma = local_mean(Xo, Xo, y, bandwidth=h, sample_weight=w, algorithm="expansion")
            mb = local_mean(Xo, Xo, y, bandwidth=h, sample_weight=w, algorithm="brute")
            assert np.all(np.abs(ma - mb) < tol * np.abs(y).max(axis=0))


@pytest.mark.parametrize("d", [2, 3])
def test_grid_rounding_with_a_heavy_sample_a_few_bandwidths_away(d):
    """The grid's worst case for rounding: a query whose sum comes from one sample of huge weight
    about four bandwidths away (the farthest the bound still covers), so the interpolation's
    terms are e^(2·side·distance) larger than the result. Within 1e-12 of the direct sums."""
    rng = np.random.default_rng(d)
    for heavy in (1e6, 1e15):
        X, w = rng.random((3000, d)), np.ones(3000)
        X[0], w[0] = 0.5 + 0.013 * rng.random(d), heavy
        dirs = rng.standard_normal((400, d))
        for h in (0.1, 0.05):
            Q = X[0] + dirs / np.linalg.norm(dirs, axis=1)[:, None] * rng.uniform(0, 6 * h, (400, 1))
            a = kernel_sum(Q, X, bandwidth=h, sample_weight=w, algorithm="expansion")
            b = kernel_sum(Q, X, bandwidth=h, sample_weight=w, algorithm="brute")
            np.testing.assert_array_less(np.abs(a - b), 1e-12 * b)


def test_grid_is_auto_in_three_features_and_thread_count_invariant():
    X, rng = blobs(20_000, 3, 5)
    h = np.ptp(X, axis=0).max() / 10
    a = kernel_sum(X, X, bandwidth=h, n_jobs=1)
    # `auto` took the grid: the same bits as asking for it, and not those of the pair loop.
    assert np.array_equal(a, kernel_sum(X, X, bandwidth=h, algorithm="expansion", n_jobs=2))
    b = kernel_sum(X, X, bandwidth=h, algorithm="brute")
    assert not np.array_equal(a, b)
    np.testing.assert_array_less(np.abs(a - b), 1e-13 * b)
    # float32 points (and bandwidth): summed in float64 and rounded once.
    x32, h32 = X.astype(np.float32), float(np.float32(h))
    want = kernel_sum(x32.astype(np.float64), x32.astype(np.float64), bandwidth=h32, algorithm="brute")
    np.testing.assert_allclose(kernel_sum(x32, x32, bandwidth=h32), want, rtol=6e-8)
    # Leave-one-out: the full sums less each sample's own term.
    loo = kernel_sum(X, X, bandwidth=h, exclude_self=True, algorithm="expansion")
    np.testing.assert_array_less(np.abs(loo - (b - 1.0)), 1e-12 * b)


@pytest.mark.parametrize("d", [2, 3])
def test_grid_local_polynomial_fits_match_the_direct_sums(d):
    """Local linear and quadratic fits from the grid's design moments, at the origin and offset
    by 10³, in full and leave-one-out, against the pair loop's."""
    from localization.regression import LocalPolynomialRegressor

    X, rng = blobs(3000, d, 10)
    y = np.sin(3 * X).sum(axis=1) + 0.1 * rng.standard_normal(len(X))
    for offset in (0.0, 1e3):
        Xo = X + offset
        h = np.ptp(X, axis=0).max() / 10
        for degree in (1, 2):
            def fit(algorithm, exclude_self):
                m = LocalPolynomialRegressor(degree=degree, bandwidth=h, algorithm=algorithm).fit(Xo, y)
                pred, singular = m._fit_at(Xo, exclude_self=exclude_self)
                assert not singular.any()
                return pred
            for exclude_self in (False, True):
                a, b = fit("expansion", exclude_self), fit("brute", exclude_self)
                assert not np.array_equal(a, b)
                np.testing.assert_allclose(a, b, rtol=0, atol=1e-10 * np.abs(y).max())

"""algorithm="binned": the reported bound holds against the exact sums, on random and adversarial
data, for every profile, 1–3 features, float32 and float64; agreement with KDEpy's FFTKDE; the
tolerance rule of "auto"; bad input."""

import math
import pickle

import numpy as np
import pytest

from localization import KernelDensity, LocalMeanRegressor, kernel_sum, local_mean
from localization import _binned, _core
from localization.kernels import PROFILES, Balloon


def exact_sum(Q, X, values=None, w=None, **kw):
    """The exact sums in float64 from the same (possibly float32-rounded) inputs."""
    f = lambda a: None if a is None else np.asarray(a, dtype=np.float64)  # noqa: E731
    return kernel_sum(f(Q), f(X), f(values), sample_weight=f(w), algorithm="brute", **kw)


def check_bound(Q, X, values=None, w=None, **kw):
    est, bound = kernel_sum(Q, X, values, sample_weight=w, algorithm="binned", return_error_bound=True, **kw)
    exact = exact_sum(Q, X, values, w, **kw)
    err = np.abs(est - exact)
    assert np.all(np.isfinite(bound))
    assert np.all(err <= bound), f"error {err.max():.3e} exceeds the bound at {np.argmax(err - bound)}"
    return err, bound, exact


def data(rng, n, d, kind):
    if kind == "normal":
        return rng.normal(size=(n, d))
    if kind == "heavy":  # Cauchy tails: a few points far out stretch the grid
        return rng.standard_cauchy(size=(n, d))
    if kind == "spikes":  # many exact duplicates at a few spots plus a thin background
        X = rng.normal(size=(n, d))
        X[: n // 2] = rng.normal(size=(3, d))[rng.integers(0, 3, n // 2)]
        return X
    raise ValueError(kind)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("kernel", PROFILES)
def test_bound_holds_for_every_profile(kernel, d, dtype):
    rng = np.random.default_rng(d * 31 + len(kernel))
    X = data(rng, 400, d, "normal").astype(dtype)
    Q = (rng.normal(size=(150, d)) * 1.5).astype(dtype)  # some queries outside the samples
    w = rng.uniform(0.1, 3.0, 400).astype(dtype)
    y = rng.normal(size=(400, 2)).astype(dtype)
    for h in (0.3, 1.0):  # coarse grids: cells of 0.2–1.2 bandwidths, large errors
        check_bound(Q, X, w=w, kernel=kernel, bandwidth=h, grid_size={1: 64, 2: 24, 3: 10}[d])
        check_bound(Q, X, y, w=w, kernel=kernel, bandwidth=h, grid_size={1: 64, 2: 24, 3: 10}[d])
    # a fine grid: the bound is informative (far below the trivial Σ w) but for the tophat and,
    # in 3-D (cells of h/4 here), the kernels with a kink, whose bound is first order in the cell
    err, bound, exact = check_bound(Q, X, w=w, kernel=kernel, bandwidth=1.0, grid_size={1: 1024, 2: 128, 3: 40}[d])
    if kernel != "tophat" and (d < 3 or _binned._SMOOTHNESS[kernel][1] is not None):
        assert bound.max() < 0.3 * w.astype(np.float64).sum()


@pytest.mark.parametrize("kind", ["heavy", "spikes"])
@pytest.mark.parametrize("d", [1, 2])
@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "tophat", "cauchy"])
def test_bound_holds_on_adversarial_data(kernel, d, kind):
    rng = np.random.default_rng(7)
    X = data(rng, 600, d, kind)
    Q = np.vstack([X[:50], rng.normal(size=(50, d))])
    w = 10.0 ** rng.uniform(-3, 3, 600)  # weights over six orders of magnitude
    check_bound(Q, X, w=w, kernel=kernel, bandwidth=0.2, grid_size=32)
    check_bound(Q, X, rng.standard_cauchy(600), w=w, kernel=kernel, bandwidth=0.2, grid_size=32)


@pytest.mark.parametrize("kernel", ["gaussian", "linear", "tophat", "biweight"])
def test_points_on_and_between_grid_nodes(kernel):
    # samples and queries exactly on the nodes (lattice 0, 0.1, ..., 3.1), halfway between them
    # and at the last node (the edge case of the binning's clamp)
    nodes = np.arange(32) / 10.0
    X = np.concatenate([nodes, nodes[:-1] + 0.05, [nodes[-1]] * 5])[:, None]
    Q = np.concatenate([nodes, nodes[:-1] + 0.05])[:, None]
    err, bound, exact = check_bound(Q, X, kernel=kernel, bandwidth=0.35, grid_size=32)
    # on-node queries and samples: only the half-node samples carry binning error
    grid_err, _ = kernel_sum(nodes[::3, None], nodes[:, None], kernel=kernel, bandwidth=0.35, algorithm="binned",
                             grid_size=32, return_error_bound=True), None
    # (exact up to rounding for compact kernels; the Gaussian adds its truncation, 10⁻³ of the binning bound)
    tol = 1e-6 if kernel == "gaussian" else 1e-12
    np.testing.assert_allclose(grid_err[0], exact_sum(nodes[::3, None], nodes[:, None], kernel=kernel, bandwidth=0.35),
                               rtol=tol, atol=tol)


def test_local_mean_bound_and_exclude_self():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2000, 2))
    y = np.sin(3 * X[:, 0]) + X[:, 1]
    Q = rng.normal(size=(300, 2)) * 0.8
    m, bound = local_mean(Q, X, y, bandwidth=0.25, algorithm="binned", grid_size=384, return_error_bound=True)
    exact = local_mean(Q, X, y, bandwidth=0.25, algorithm="brute")
    assert np.all(np.abs(m - exact) <= bound)
    assert np.median(bound) < 2e-2  # a worst case over pairs: the actual errors are far smaller
    # leave-one-out: each point's own exact term is taken out of the binned sum
    with pytest.warns(Warning, match="zero total"):
        loo, loo_bound = local_mean(X, X, y, bandwidth=0.25, algorithm="binned", grid_size=128, exclude_self=True,
                                    return_error_bound=True)
    loo_exact = local_mean(X, X, y, bandwidth=0.25, algorithm="brute", exclude_self=True)
    within_loo(loo, loo_bound, loo_exact)


def within_loo(est, bound, exact):
    """Isolated points: their leave-one-out weight can be below what the grid resolves; the bound
    is then inf (and the binned mean NaN when the weight rounds to 0) — everywhere else it holds."""
    known = np.isfinite(bound)
    assert known.mean() > 0.98
    assert np.all(np.abs(est - exact)[known] <= bound[known])


def test_accuracy_improves_with_the_grid_and_bound_follows():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5000, 1))
    Q = np.linspace(-3, 3, 101)[:, None]
    errs, bounds = [], []
    for g in (64, 256, 1024):
        err, bound, _ = check_bound(Q, X, bandwidth=0.2, grid_size=g)
        errs.append(err.max())
        bounds.append(bound.max())
    # second order: 4× the nodes, about 16× less error and bound
    assert errs[2] < errs[1] / 8 < errs[0] / 64
    assert bounds[2] < bounds[1] / 8 < bounds[0] / 64


def test_thread_count_invariance():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(20000, 2))
    Q = rng.normal(size=(5000, 2))
    y = rng.normal(size=20000)
    a = local_mean(Q, X, y, bandwidth=0.2, algorithm="binned", n_jobs=1, return_error_bound=True)
    b = local_mean(Q, X, y, bandwidth=0.2, algorithm="binned", n_jobs=2, return_error_bound=True)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)


def test_per_feature_bandwidth_and_flat_feature():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(800, 3)) * [1.0, 5.0, 0.0]  # third feature constant: a one-node axis
    Q = X[:100] + rng.normal(size=(100, 3)) * [0.1, 0.5, 0.0]
    check_bound(Q, X, bandwidth=np.array([0.3, 1.5, 0.7]), grid_size=(48, 48, 4))


def test_smoothness_constants_bound_the_derivatives():
    """M₁ ≥ sup|k′| and M₂ ≥ sup max(|k″|, |k′|/u) (checked by finite differences, off the kinks)."""
    u = np.linspace(1e-4, 12.0, 240001)
    step = 1e-6
    for name in PROFILES:
        m1, m2 = _binned._SMOOTHNESS[name]
        if not math.isfinite(m1):
            continue
        k = lambda t: _core.profile_values(name, np.ascontiguousarray(t))  # noqa: E731
        d1 = (k(u + step) - k(u - step)) / (2 * step)
        smooth = np.abs(u - 1.0) > 1e-3
        assert np.abs(d1[smooth]).max() <= m1 * (1 + 1e-6), name
        if m2 is not None:
            d2 = (k(u + step) - 2 * k(u) + k(u - step)) / step**2
            assert np.abs(d2[smooth & (u > 1e-2)]).max() <= m2 * (1 + 1e-4), name
            assert (np.abs(d1) / u)[smooth & (u > 1e-2)].max() <= m2 * (1 + 1e-4), name


def test_agrees_with_kdepy_fftkde():
    """Same grid, same linear binning: FFTKDE with the (compact) Epanechnikov kernel is the same
    computation up to the kernel's parametrisation (KDEpy's bw is the kernel's standard deviation,
    support √5·bw) and its normalisation, so the densities at its grid nodes agree to rounding; the
    Gaussian differs by KDEpy's truncation of the kernel, within our bound plus their error."""
    KDEpy = pytest.importorskip("KDEpy")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20000, 1))
    bw = 0.1
    grid, peer = KDEpy.FFTKDE(kernel="epa", bw=bw).fit(X[:, 0]).evaluate(512)
    h = math.sqrt(5.0) * bw
    ours = kernel_sum(grid[:, None], X, kernel="epanechnikov", bandwidth=h, algorithm="binned", grid_size=512)
    ours = ours * 0.75 / (h * len(X))  # ∫(1 − u²)₊ = 4/3 in 1-D
    np.testing.assert_allclose(ours, peer, rtol=1e-9, atol=1e-12 * peer.max())


def test_auto_uses_binned_only_under_a_tolerance_it_meets():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40000, 1))
    Q = rng.normal(size=(4000, 1))
    exact = kernel_sum(Q, X, bandwidth=0.2)
    _, zero = kernel_sum(Q, X, bandwidth=0.2, return_error_bound=True)
    assert not zero.any()  # no tolerance: exact path
    loose, bound = kernel_sum(Q, X, bandwidth=0.2, rtol=1e-2, return_error_bound=True)
    assert bound.max() > 0 and np.all(bound <= 1e-2 * (np.abs(loose) - bound))  # binned, and it meets rtol
    assert np.all(np.abs(loose - exact) <= 1e-2 * exact)
    tight, bound = kernel_sum(Q, X, bandwidth=0.2, rtol=1e-14, return_error_bound=True)
    assert not bound.any()  # the bound cannot meet 1e-14: exact path
    np.testing.assert_array_equal(tight, exact)


def test_estimators():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(3000, 2))
    y = X[:, 0] ** 2
    Q = rng.normal(size=(200, 2))
    kde = KernelDensity(bandwidth=0.3, algorithm="binned", grid_size=256).fit(X)
    logp, err = kde.score_samples(Q, return_error_bound=True)
    exact = KernelDensity(bandwidth=0.3).fit(X).score_samples(Q)
    assert np.all(np.abs(logp - exact) <= err) and np.median(err) < 5e-2
    reg = LocalMeanRegressor(bandwidth=0.3, algorithm="binned", grid_size=96).fit(X, y)
    pred, err = reg.predict(Q, return_error_bound=True)
    assert np.all(np.abs(pred - LocalMeanRegressor(bandwidth=0.3).fit(X, y).predict(Q)) <= err)
    loo, err = reg.predict(None, return_error_bound=True)
    within_loo(loo, err, LocalMeanRegressor(bandwidth=0.3).fit(X, y).predict(None))
    again = pickle.loads(pickle.dumps(reg))
    np.testing.assert_array_equal(again.predict(Q), pred)
    # a tolerance lets auto pick it; without one the estimator stays exact
    X1 = rng.normal(size=(50000, 1))
    _, err = KernelDensity(bandwidth=0.2, rtol=0.05).fit(X1).score_samples(X1[:5000], return_error_bound=True)
    assert err.max() > 0  # binned
    _, err = KernelDensity(bandwidth=0.2).fit(X1).score_samples(X1[:5000], return_error_bound=True)
    assert not err.any()  # exact


@pytest.mark.parametrize("bad, match", [
    (dict(grid_size=0), "grid_size"), (dict(grid_size=-4), "grid_size"), (dict(grid_size=1), "grid_size"),
    (dict(grid_size=2.5), "grid_size"), (dict(grid_size=(8, 8, 8)), "grid_size"), (dict(grid_size=True), "grid_size"),
    (dict(atol=-1.0), "atol"), (dict(rtol=float("nan")), "rtol"),
    (dict(kernel="knn", n_neighbors=3), "radial profile"), (dict(bandwidth=Balloon(3)), "fixed bandwidth"),
])
def test_bad_input_names_the_argument(bad, match):
    X = np.random.default_rng(0).normal(size=(50, 2))
    kw = dict(kernel="gaussian", bandwidth=0.5, algorithm="binned")
    kw.update(bad)
    with pytest.raises(ValueError, match=match):
        kernel_sum(X, X, **kw)


def test_bad_input_features_and_nan():
    X = np.random.default_rng(0).normal(size=(50, 4))
    with pytest.raises(ValueError, match="at most 3 features"):
        kernel_sum(X, X, algorithm="binned")
    with pytest.raises(ValueError, match="at most 3 features"):
        KernelDensity(algorithm="binned").fit(X).score_samples(X)
    Y = X[:, :2].copy()
    Y[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        kernel_sum(Y, X[:, :2], algorithm="binned")
    with pytest.raises(ValueError, match="grid_size"):
        LocalMeanRegressor(algorithm="binned", grid_size=0).fit(X[:, :2], X[:, 0])
    with pytest.raises(ValueError, match="algorithm"):
        local_mean(X, X, algorithm="fft")

"""MeanShift: scikit-learn parity (flat kernel), the KDE-gradient identity (gaussian),
grid vs exact, blurring and fixed-kernel diffusion against direct matrix iterations."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from sklearn.cluster import MeanShift as SkMeanShift
from sklearn.cluster import estimate_bandwidth as sk_estimate_bandwidth
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from localization import MeanShift, estimate_bandwidth, local_mean, mean_shift
from localization import _core
from localization.cluster import get_bin_seeds


def blobs(n=240, centers=4, std=0.8, seed=0):
    X, y = make_blobs(n, centers=centers, cluster_std=std, random_state=seed)
    return X, y


def separated(n=20000, seed=0):
    """Ten well-separated 2-D blobs on a lattice of spacing 10."""
    rng = np.random.default_rng(seed)
    centres = np.array([[10.0 * (i % 5), 10.0 * (i // 5)] for i in range(10)])
    y = rng.integers(0, 10, n)
    return centres[y] + 0.6 * rng.normal(size=(n, 2)), y, centres


# --- scikit-learn parity (flat kernel) -------------------------------------------------


def assert_same_as_sklearn(ours, sk):
    assert ours.cluster_centers_.shape == sk.cluster_centers_.shape
    np.testing.assert_allclose(ours.cluster_centers_, sk.cluster_centers_, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(ours.labels_, sk.labels_)
    assert ours.n_iter_ == sk.n_iter_


@pytest.mark.parametrize(
    "params",
    [
        dict(bandwidth=1.2),
        dict(bandwidth=0.7, cluster_all=False),
        dict(bandwidth=2.5, max_iter=3),
    ],
)
def test_flat_all_seeds_equals_sklearn(params):
    X, _ = blobs()
    sk = SkMeanShift(**params).fit(X)
    ours = MeanShift(label_assignment="nearest", **params).fit(X)
    assert_same_as_sklearn(ours, sk)


@pytest.mark.parametrize("min_bin_freq", [1, 3])
@pytest.mark.parametrize("cluster_all", [True, False])
def test_flat_bin_seeding_equals_sklearn(min_bin_freq, cluster_all):
    X, _ = blobs(1500, centers=6, std=1.0, seed=3)
    params = dict(bandwidth=1.0, bin_seeding=True, min_bin_freq=min_bin_freq, cluster_all=cluster_all)
    sk = SkMeanShift(**params).fit(X)
    ours = MeanShift(**params).fit(X)  # auto labelling = nearest centre for bin seeds
    assert_same_as_sklearn(ours, sk)


def test_given_seeds_and_estimated_bandwidth_equal_sklearn():
    X, _ = blobs(200, seed=5)
    seeds = X[::7]
    sk = SkMeanShift(seeds=seeds).fit(X)
    ours = MeanShift(seeds=seeds).fit(X)
    assert ours.bandwidth_ == pytest.approx(sk_estimate_bandwidth(X), rel=1e-12)
    assert_same_as_sklearn(ours, sk)
    c, lab = mean_shift(X, seeds=seeds)
    np.testing.assert_allclose(c, sk.cluster_centers_, atol=1e-6)


def test_get_bin_seeds_same_set_as_sklearn():
    from sklearn.cluster import get_bin_seeds as sk_bins

    X = np.random.default_rng(1).normal(size=(5000, 3)) * 2
    for freq in (1, 4):
        a, b = get_bin_seeds(X, 0.8, freq), sk_bins(X, 0.8, freq)
        assert {tuple(r) for r in a} == {tuple(r) for r in b}


@pytest.mark.parametrize("quantile,n_samples", [(0.3, None), (0.5, 150), (0.01, 400)])
def test_estimate_bandwidth_equals_sklearn(quantile, n_samples):
    X, _ = blobs(600, seed=2)
    ours = estimate_bandwidth(X, quantile=quantile, n_samples=n_samples, random_state=4)
    sk = sk_estimate_bandwidth(X, quantile=quantile, n_samples=n_samples, random_state=4)
    assert ours == pytest.approx(sk, rel=1e-12)


def test_trajectory_labels_follow_each_points_climb():
    X, _ = blobs(300, seed=1)
    ms = MeanShift(bandwidth=1.0, return_trajectories=True).fit(X)
    # Every point is a seed: its trajectory starts at it and ends at its recorded mode.
    assert len(ms.trajectories_) == len(X)
    for i in (0, 17, 299):
        np.testing.assert_array_equal(ms.trajectories_[i][0], X[i])
        np.testing.assert_array_equal(ms.trajectories_[i][-1], ms.seed_modes_[i])
    ends = ms.cluster_centers_[ms.labels_]
    assert np.all(np.linalg.norm(ms.seed_modes_ - ends, axis=1) <= ms.bandwidth_ + 1e-12)
    # predict shifts new points the same way, so the training points get their own labels.
    np.testing.assert_array_equal(ms.predict(X), ms.labels_)


# --- the gaussian kernel: modes of the KDE (SPEC §9 identity 4) -----------------------


def kde_grad_log(Q, X, h):
    """∇ log p̂_h(q) of the gaussian KDE, directly (small n)."""
    diff = X[None, :, :] - Q[:, None, :]
    w = np.exp(-0.5 * np.sum(diff**2, axis=2) / h**2)
    return np.einsum("qn,qnd->qd", w, diff) / (h**2 * w.sum(1)[:, None])


def log_kde(Q, X, h):
    d2 = np.sum((X[None] - Q[:, None]) ** 2, axis=2)
    return np.log(np.exp(-0.5 * d2 / h**2).sum(1))


def test_gaussian_shift_is_scaled_kde_gradient():
    X, _ = blobs(150, seed=7)
    Q = np.random.default_rng(0).normal(size=(40, 2)) * 4
    h = 0.9
    m = local_mean(Q, X, X, kernel="gaussian", bandwidth=h)
    np.testing.assert_allclose(m - Q, h**2 * kde_grad_log(Q, X, h), rtol=0, atol=1e-10)


def test_gaussian_modes_are_kde_maxima():
    X, _ = blobs(200, seed=7)
    h = 0.8
    ms = MeanShift(kernel="gaussian", bandwidth=h, tol=1e-9, max_iter=5000).fit(X)
    assert ms.seed_converged_.all()
    C = ms.cluster_centers_
    # Stationary: the shift, and so h²∇log p̂, vanishes at every mode.
    assert np.max(np.abs(h**2 * kde_grad_log(C, X, h))) < 1e-6
    # A local maximum: every small displacement lowers the density.
    rng = np.random.default_rng(1)
    for c in C:
        probes = c + 1e-2 * rng.normal(size=(64, 2))
        assert np.all(log_kde(probes, X, h) < log_kde(c[None], X, h)[0])


def test_step_size_reaches_the_same_modes():
    X, _ = blobs(150, seed=8)
    a = MeanShift(kernel="gaussian", bandwidth=1.0, tol=1e-8, max_iter=3000).fit(X)
    b = MeanShift(kernel="gaussian", bandwidth=1.0, tol=1e-8, max_iter=3000, step=0.5).fit(X)
    np.testing.assert_allclose(np.sort(a.cluster_centers_, axis=0), np.sort(b.cluster_centers_, axis=0), atol=1e-5)
    assert b.n_iter_ > a.n_iter_


@pytest.mark.parametrize("kernel", ["epanechnikov", "biweight", "gaussian", "cauchy"])
def test_one_step_is_the_engines_local_mean(kernel):
    X, _ = blobs(300, seed=9)
    seeds = X[::5] + 0.1
    out = _core.mean_shift_seeds(X, np.ascontiguousarray(seeds), None, kernel, 1.3, max_iter=0)
    np.testing.assert_allclose(out.modes, local_mean(seeds, X, X, kernel=kernel, bandwidth=1.3), rtol=0, atol=1e-10)
    assert np.all(out.n_iter == 0)


def test_sample_weight_equals_repeating_points():
    X, _ = blobs(120, seed=4)
    w = np.random.default_rng(2).integers(1, 4, len(X))
    Xr = np.repeat(X, w, axis=0)
    for kernel, h in (("flat", 1.0), ("gaussian", 0.7)):
        a = MeanShift(kernel=kernel, bandwidth=h, seeds=X).fit(X, sample_weight=w)
        b = MeanShift(kernel=kernel, bandwidth=h, seeds=X).fit(Xr)
        np.testing.assert_allclose(a.seed_modes_, b.seed_modes_, atol=1e-9)
        np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, atol=1e-9)


# --- grid (MeanShift++-style) ------------------------------------------------------------


def test_grid_finds_the_exact_modes_and_partition():
    X, y, centres = separated()
    h = 1.0
    exact = MeanShift(bandwidth=h, algorithm="exact").fit(X)
    grid = MeanShift(bandwidth=h, algorithm="grid").fit(X)
    assert grid.algorithm_ == "grid" and len(grid.seeds_) < len(X)
    assert len(grid.cluster_centers_) == len(exact.cluster_centers_) == 10
    for c in exact.cluster_centers_:
        assert np.min(np.linalg.norm(grid.cluster_centers_ - c, axis=1)) < h / 10
    assert adjusted_rand_score(exact.labels_, grid.labels_) >= 0.99
    assert adjusted_rand_score(y, grid.labels_) >= 0.99
    # predict climbs on the grid too
    np.testing.assert_array_equal(grid.predict(centres), grid.predict(centres + 0.05))


def test_grid_with_bin_seeds_and_weights():
    X, _, _ = separated(5000, seed=2)
    w = np.random.default_rng(0).uniform(0.5, 2, len(X))
    g = MeanShift(bandwidth=1.0, algorithm="grid", bin_seeding=True).fit(X, sample_weight=w)
    e = MeanShift(bandwidth=1.0, bin_seeding=True).fit(X, sample_weight=w)
    assert len(g.cluster_centers_) == len(e.cluster_centers_) == 10
    for c in e.cluster_centers_:
        assert np.min(np.linalg.norm(g.cluster_centers_ - c, axis=1)) < 0.1


# --- blurring and the fixed kernel -------------------------------------------------------


def row_normalised_gaussian(X, h):
    K = np.exp(-0.5 * np.sum((X[:, None] - X[None]) ** 2, axis=2) / h**2)
    return K / K.sum(1, keepdims=True)


def test_blurring_converges_and_finds_the_blobs():
    X, y, _ = separated(2000, seed=3)
    ms = MeanShift(kernel="gaussian", bandwidth=1.0, blurring=True, max_iter=200).fit(X)
    assert ms.algorithm_ == "blurring" and ms.seed_converged_.all()
    assert len(ms.cluster_centers_) == 10
    assert adjusted_rand_score(y, ms.labels_) == 1.0


def test_blurring_steps_equal_direct_iteration():
    X, _ = blobs(60, seed=6)
    h, T = 1.5, 4
    ms = MeanShift(kernel="gaussian", bandwidth=h, blurring=True, max_iter=T, tol=0, return_trajectories=True).fit(X)
    Y = X.copy()
    for t in range(T):
        Y = row_normalised_gaussian(Y, h) @ Y
        np.testing.assert_allclose(np.stack([p[t + 1] for p in ms.trajectories_]), Y, atol=1e-10)
    np.testing.assert_allclose(ms.seed_modes_, Y, atol=1e-10)


@pytest.mark.parametrize("step", [1.0, 0.5])
def test_fixed_kernel_is_linear_diffusion(step):
    X, _ = blobs(50, seed=11)
    h, T = 1.2, 6
    ms = MeanShift(kernel="gaussian", bandwidth=h, fixed_kernel=True, max_iter=T, tol=0, step=step).fit(X)
    K = row_normalised_gaussian(X, h)
    A = np.eye(len(X)) + step * (K - np.eye(len(X)))  # Y ← Y + α(K̃Y − Y)
    np.testing.assert_allclose(ms.seed_modes_, np.linalg.matrix_power(A, T) @ X, atol=1e-10)
    assert ms.n_iter_ == T


# --- robustness --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,X,match",
    [
        ({}, [[np.nan, 1.0], [1.0, 2.0]], "NaN"),
        ({}, [[np.inf, 1.0], [1.0, 2.0]], "infinity"),
        ({}, np.zeros((0, 2)), "sample"),
        ({"bandwidth": 0.0}, [[0.0], [1.0]], "bandwidth"),
        ({"bandwidth": -1.0}, [[0.0], [1.0]], "bandwidth"),
        ({"bandwidth": np.inf}, [[0.0], [1.0]], "bandwidth"),
        ({"kernel": "nope"}, [[0.0], [1.0]], "kernel"),
        ({"kernel": "knn"}, [[0.0], [1.0]], "kernel"),
        ({"algorithm": "fast"}, [[0.0], [1.0]], "algorithm"),
        ({"algorithm": "grid", "kernel": "gaussian"}, [[0.0], [1.0]], "grid"),
        ({"algorithm": "grid"}, np.zeros((3, 5)), "grid"),
        ({"blurring": True, "fixed_kernel": True}, [[0.0], [1.0]], "blurring"),
        ({"step": 0.0}, [[0.0], [1.0]], "step"),
        ({"tol": -1.0}, [[0.0], [1.0]], "tol"),
        ({"max_iter": -1}, [[0.0], [1.0]], "max_iter"),
        ({"min_bin_freq": 0}, [[0.0], [1.0]], "min_bin_freq"),
        ({"label_assignment": "x"}, [[0.0], [1.0]], "label_assignment"),
        ({"merge_radius": -1.0}, [[0.0], [1.0]], "merge_radius"),
        ({"seeds": [[0.0, 1.0]]}, [[0.0], [1.0]], "seeds"),
        ({"seeds": [[100.0]], "bandwidth": 1.0}, [[0.0], [1.0]], "No point"),
    ],
)
def test_bad_input(kwargs, X, match):
    with pytest.raises(ValueError, match=match):
        MeanShift(**kwargs).fit(np.asarray(X, dtype=float))


def test_bad_sample_weight_and_query():
    X, _ = blobs(50)
    with pytest.raises(ValueError, match="sample_weight"):
        MeanShift(bandwidth=1.0).fit(X, sample_weight=-np.ones(len(X)))
    with pytest.raises(ValueError, match="sample_weight"):
        MeanShift(bandwidth=1.0).fit(X, sample_weight=np.ones(3))
    ms = MeanShift(bandwidth=1.0).fit(X)
    with pytest.raises(ValueError, match="features"):
        ms.predict(np.zeros((2, 3)))
    with pytest.raises(TypeError):
        MeanShift(bandwidth=1.0).fit(np.array([["a", "b"]]))


def test_degenerate_inputs():
    # duplicates only, one sample, float32, non-contiguous
    ms = MeanShift().fit(np.ones((5, 2)))
    assert ms.cluster_centers_.tolist() == [[1.0, 1.0]] and ms.labels_.tolist() == [0] * 5
    assert MeanShift(bandwidth=1.0).fit([[3.0, 4.0]]).cluster_centers_.tolist() == [[3.0, 4.0]]
    X, _ = blobs(200)
    a = MeanShift(bandwidth=1.0).fit(X.astype(np.float32))
    b = MeanShift(bandwidth=1.0).fit(X)
    assert a.cluster_centers_.dtype == np.float32
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, atol=1e-4)
    Xf = np.asfortranarray(X)
    np.testing.assert_array_equal(MeanShift(bandwidth=1.0).fit(Xf).labels_, b.labels_)


@pytest.mark.parametrize(
    "params",
    [
        dict(kernel="flat", bandwidth=1.0),
        dict(kernel="epanechnikov", bandwidth=1.5),
        dict(kernel="gaussian", bandwidth=0.8),
        dict(algorithm="grid", bandwidth=1.0),
        dict(kernel="gaussian", bandwidth=1.0, blurring=True),
    ],
)
def test_thread_count_invariance(params):
    X, _ = blobs(400, seed=12)
    a = MeanShift(n_jobs=1, **params).fit(X)
    b = MeanShift(n_jobs=2, **params).fit(X)
    np.testing.assert_array_equal(a.seed_modes_, b.seed_modes_)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(a.labels_, b.labels_)


def test_pickle_roundtrip():
    X, _ = blobs(200)
    ms = MeanShift(bandwidth=1.0, kernel="gaussian").fit(X)
    back = pickle.loads(pickle.dumps(ms))
    np.testing.assert_array_equal(back.cluster_centers_, ms.cluster_centers_)
    np.testing.assert_array_equal(back.predict(X[:20]), ms.predict(X[:20]))


def test_progress_callback_errors_propagate():
    X, _ = blobs(100)
    calls = []

    def record(done, total):
        calls.append((done, total))

    _core.mean_shift_seeds(X, X, None, "flat", 1.0, progress=record)
    assert calls[-1] == (len(X), len(X))

    def stop(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _core.mean_shift_seeds(X, X, None, "flat", 1.0, progress=stop)
    with pytest.raises(KeyboardInterrupt):
        _core.mean_shift_seeds(X, X, None, "gaussian", 1.0, progress=stop)
    MeanShift(bandwidth=1.0, verbose=True).fit(X)


# algorithm="grid" is excluded: it refuses more than 4 features, and the checks use 10.


# --- command line ------------------------------------------------------------------------


def test_cli_cluster_on_files(tmp_path, capsys):
    from localization.cli import main

    X, _, _ = separated(3000, seed=4)
    csv = tmp_path / "points.csv"
    np.savetxt(csv, X, delimiter=",", header="x,y", comments="")
    out, png = tmp_path / "labels.csv", tmp_path / "plot.png"
    assert main(["cluster", str(csv), "--bandwidth", "1.0", "--output", str(out), "--plot", str(png), "--quiet"]) == 0
    labels = np.loadtxt(out, dtype=int)
    expected = MeanShift(bandwidth=1.0).fit(X).labels_
    np.testing.assert_array_equal(labels, expected)
    assert png.stat().st_size > 0
    assert f"{len(np.unique(expected))} clusters" in capsys.readouterr().out
    npy = tmp_path / "points.npy"
    np.save(npy, X)
    assert main(["cluster", str(npy), "--kernel", "gaussian", "--bandwidth", "0.8", "--quiet"]) == 0
    assert main(["cluster", str(npy), "--bandwidth", "wide"]) == 2
    qs_out = tmp_path / "quickshift.csv"
    assert main(["cluster", str(npy), "--method", "quickshift", "--bandwidth", "1.0", "--output", str(qs_out), "--quiet"]) == 0
    from localization.cluster import QuickShift

    np.testing.assert_array_equal(np.loadtxt(qs_out, dtype=int), QuickShift(bandwidth=1.0).fit(X).labels_)


def test_cli_demos_run(capsys):
    import argparse

    from localization.cli import demo_meanshift_segmentation, demo_meanshift_trajectories

    args = argparse.Namespace(no_plot=True, output="unused.png")
    assert demo_meanshift_trajectories(args) == 4
    assert demo_meanshift_segmentation(args) > 1
    assert "stationary points" in capsys.readouterr().out


def test_trajectory_labels_with_bin_seeds_and_cluster_all_false():
    X, _, _ = separated(4000, seed=6)
    X = np.vstack([X, [[100.0, 100.0]]])  # an orphan far from every blob
    ms = MeanShift(bandwidth=1.0, bin_seeding=True, label_assignment="trajectory", cluster_all=False).fit(X)
    # Each point climbed on its own: labels equal predict on the training points.
    np.testing.assert_array_equal(ms.labels_, ms.predict(X))
    big = np.bincount(ms.labels_[ms.labels_ >= 0])
    assert np.sum(big > 100) == 10
    # The orphan's bin seeds a one-point cluster at the orphan itself.
    orphan = ms.labels_[-1]
    assert orphan >= 0 and np.allclose(ms.cluster_centers_[orphan], [100.0, 100.0])
    # The orphans are scikit-learn's (farther than h from every centre) under either labelling,
    # and where both label a point they agree.
    nearest = MeanShift(bandwidth=1.0, bin_seeding=True, cluster_all=False).fit(X)
    np.testing.assert_array_equal(nearest.labels_ < 0, ms.labels_ < 0)
    assert 0 < np.mean(ms.labels_ < 0) < 0.5
    np.testing.assert_array_equal(nearest.labels_, ms.labels_)


@pytest.mark.parametrize("seeding", [dict(), dict(bin_seeding=True)])
def test_zero_estimated_bandwidth_is_the_radius_zero_window(seeding):
    """Heavily duplicated data: the estimate is 0 and, as in scikit-learn, every distinct value
    is a mode (not one cluster over the data's range)."""
    X = np.array([1, 1, 1, 2, 2, 2, 3, 3], dtype=float).reshape(-1, 1)
    assert estimate_bandwidth(X) == 0
    ms = MeanShift(**seeding).fit(X)
    sk = SkMeanShift(**seeding).fit(X)
    assert ms.bandwidth_ == 0 and ms.n_iter_ == sk.n_iter_ == 0
    np.testing.assert_array_equal(ms.cluster_centers_, sk.cluster_centers_)
    np.testing.assert_array_equal(ms.labels_, sk.labels_)
    np.testing.assert_array_equal(ms.labels_, [1, 1, 1, 0, 0, 0, 2, 2])
    np.testing.assert_array_equal(ms.predict([[3.0], [2.0]]), [2, 0])
    w = np.array([1, 1, 1, 1, 1, 1, 5, 5.0])  # weights move the strongest mode first
    assert MeanShift().fit(X, sample_weight=w).cluster_centers_[0, 0] == 3.0
    # A seed on no point sees no data; off-sample rows are orphans with cluster_all=False.
    strict = MeanShift(cluster_all=False).fit(X)
    np.testing.assert_array_equal(strict.labels_, ms.labels_)
    np.testing.assert_array_equal(strict.predict([[2.0], [2.5]]), [0, -1])
    with pytest.raises(ValueError, match="No point"):
        MeanShift(seeds=[[1.5]]).fit(X)
    with pytest.raises(ValueError, match="grid"):
        MeanShift(algorithm="grid").fit(X)
    for variant in (dict(blurring=True), dict(fixed_kernel=True), dict(kernel="gaussian")):
        np.testing.assert_array_equal(MeanShift(**variant).fit(X).labels_, ms.labels_)


def test_cluster_all_false_gives_scikit_learns_orphans_under_trajectory_labels():
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(300, centers=np.array([[1, 1], [-1, -1], [1, -1]]) + 10, cluster_std=0.4, random_state=11)
    sk = SkMeanShift(bandwidth=1.2, cluster_all=False).fit(X)
    for how in ("auto", "trajectory", "nearest"):
        ours = MeanShift(bandwidth=1.2, cluster_all=False, label_assignment=how).fit(X)
        np.testing.assert_array_equal(ours.labels_ < 0, sk.labels_ < 0)
        assert (ours.labels_ < 0).sum() > 0
        np.testing.assert_array_equal(ours.predict(X), ours.labels_)


def test_estimate_bandwidth_returns_a_numpy_float64_as_scikit_learn():
    X, _ = blobs(100)
    for A in (X, X.astype(np.float32), X.astype(int)):
        assert type(estimate_bandwidth(A)) is type(sk_estimate_bandwidth(A)) is np.float64


def test_grid_cells_pickle_as_their_arrays_and_refuse_inconsistent_parts():
    X = blobs()[0]
    w = np.where(np.arange(len(X)) % 7 == 0, 0.0, 1.0)
    cells = _core.grid_cells(X, list(X.min(axis=0)), list(X.max(axis=0)), w, 1.0, 2)
    back = pickle.loads(pickle.dumps(cells))
    assert isinstance(back, _core.GridCells) and back.n_cells == cells.n_cells > 0
    for a, b in zip(_core.grid_centroids(cells), _core.grid_centroids(back)):
        np.testing.assert_array_equal(a, b)
    keys, weight, total, count, plain = cells.__reduce__()[1]
    with pytest.raises(ValueError, match="cells"):
        _core.GridCells(keys, weight[:-1], total, count, plain)
    with pytest.raises(ValueError, match="plain"):
        _core.GridCells(keys, weight, total, count, None)

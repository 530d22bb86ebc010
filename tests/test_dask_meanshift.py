"""localization.dask.MeanShift on a 2-process LocalCluster: the in-memory result (same seeds,
iterations, modes and labels) on unevenly sharded data, and after losing a worker."""

import os
import pickle
import signal

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import localization as L  # noqa: E402
import localization.dask as LD  # noqa: E402
from localization import _core  # noqa: E402
from localization.dask import _mean_shift  # noqa: E402

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("dask_client")]

CHUNKS = (150, 0, 1, 248, 1, 200)


@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(3)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [3.0, 5.0]])
    X = np.vstack([c + rng.normal(scale=0.8, size=(200, 2)) for c in centres])
    return X[rng.permutation(len(X))]


def dx(A, chunks=CHUNKS):
    return da.from_array(A, chunks=(chunks,) + (-1,) * (A.ndim - 1))


def assert_same_fit(got, ref, exact_seeds=True):
    if exact_seeds:
        assert np.array_equal(got.seeds_, ref.seeds_)
    else:
        assert np.allclose(got.seeds_, ref.seeds_, rtol=1e-12, atol=1e-12)
    assert np.array_equal(got.seed_n_iter_, ref.seed_n_iter_)
    assert np.array_equal(got.seed_converged_, ref.seed_converged_)
    assert np.array_equal(got.seed_valid_, ref.seed_valid_)
    assert np.allclose(got.seed_modes_, ref.seed_modes_, rtol=1e-12, atol=1e-12)
    assert np.allclose(got.seed_support_, ref.seed_support_, rtol=1e-12, atol=0)
    assert got.cluster_centers_.shape == ref.cluster_centers_.shape
    assert np.allclose(got.cluster_centers_, ref.cluster_centers_, rtol=1e-12, atol=1e-12)
    assert got.n_iter_ == ref.n_iter_ and got.algorithm_ == ref.algorithm_
    labels = got.labels_
    assert isinstance(labels, da.Array) and labels.chunks[0] == CHUNKS
    assert np.array_equal(labels.compute(), ref.labels_)


# (parameters, also with sample weights)
CASES = [
    (dict(bandwidth=1.5, bin_seeding=True), True),
    (dict(bandwidth=1.2, bin_seeding=True, kernel="gaussian"), True),
    (dict(bandwidth=1.5, bin_seeding=True, kernel="epanechnikov", cluster_all=False, min_bin_freq=3), False),
    (dict(bandwidth=1.5, algorithm="grid"), True),
    (dict(bandwidth=1.5, algorithm="grid", bin_seeding=True), False),
    (dict(bandwidth=1.5, kernel="biweight", seeds="every 10th point"), True),
    (dict(bandwidth=2.0, bin_seeding=True, label_assignment="trajectory", return_trajectories=True), False),
]


@pytest.mark.parametrize("params, weighted", CASES, ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()) if isinstance(p, dict) else str(p))
def test_mean_shift_equals_in_memory(blobs, params, weighted):
    if params.get("seeds") == "every 10th point":
        params = dict(params, seeds=blobs[::10])
    w = np.linspace(0.5, 2.0, len(blobs))
    w[200:260] = 0.0  # some points weigh nothing
    for weights in (None, w) if weighted else (None,):
        got = LD.MeanShift(**params).fit(dx(blobs), sample_weight=None if weights is None else dx(weights))
        ref = L.MeanShift(**params).fit(blobs, sample_weight=weights)
        assert_same_fit(got, ref, exact_seeds=params.get("algorithm") != "grid" or params.get("bin_seeding", False))
        if params.get("return_trajectories"):
            for a, b in zip(got.trajectories_, ref.trajectories_):
                assert np.allclose(a, b, rtol=1e-12, atol=1e-12)
    Q = blobs[::37] + 0.3
    assert np.array_equal(got.predict(Q), ref.predict(Q))
    pred = got.predict(dx(Q, (5, 0, 12)))
    assert isinstance(pred, da.Array) and np.array_equal(pred.compute(), ref.predict(Q))


def test_explicit_seeds_float32_and_the_estimated_bandwidth(blobs):
    X32 = blobs.astype(np.float32)
    seeds = X32[::25]
    got = LD.MeanShift(bandwidth=1.5, kernel="gaussian", seeds=seeds).fit(dx(X32))
    ref = L.MeanShift(bandwidth=1.5, kernel="gaussian", seeds=seeds).fit(X32)
    assert got.cluster_centers_.dtype == np.float32
    # Rounding of float32 sums moves where a seed stops within the tolerance tol·h.
    assert np.allclose(got.cluster_centers_, ref.cluster_centers_, rtol=0, atol=1e-3 * 1.5)
    assert np.array_equal(got.labels_.compute(), ref.labels_)
    got = LD.MeanShift(bin_seeding=True).fit(dx(blobs))
    ref = L.MeanShift(bin_seeding=True).fit(blobs)
    assert np.isclose(got.bandwidth_, ref.bandwidth_, rtol=1e-12)
    assert np.isclose(LD.estimate_bandwidth(dx(blobs), quantile=0.2, n_samples=300, random_state=5),
                      L.estimate_bandwidth(blobs, quantile=0.2, n_samples=300, random_state=5), rtol=1e-12)
    assert np.array_equal(got.labels_.compute(), ref.labels_)


def test_every_point_a_seed_when_asked(blobs):
    X = blobs[:200]
    got = LD.MeanShift(bandwidth=1.0).fit(dx(X, (80, 0, 1, 119)))
    ref = L.MeanShift(bandwidth=1.0).fit(X)
    assert np.array_equal(got.seeds_, ref.seeds_)
    assert np.array_equal(got.seed_n_iter_, ref.seed_n_iter_)
    assert np.allclose(got.cluster_centers_, ref.cluster_centers_, rtol=1e-12, atol=1e-12)
    assert np.array_equal(got.labels_.compute(), ref.labels_)


def test_progress_is_reported_on_the_client(blobs, monkeypatch):
    reports = []

    def bar(enabled, desc, unit="it"):
        assert enabled and unit == "iteration"
        return (lambda done, total: reports.append((done, total))), (lambda: reports.append("closed"))

    monkeypatch.setattr(_mean_shift, "progress_bar", bar)
    ms = LD.MeanShift(bandwidth=1.2, kernel="gaussian", bin_seeding=True, verbose=True).fit(dx(blobs))
    assert reports[0] == (0, 301) and reports[-1] == "closed"
    done = [r[0] for r in reports[:-1]]
    assert done == sorted(done) and done[-1] == ms.n_iter_ + 1


def test_bad_input(blobs):
    Xd = dx(blobs)
    with pytest.raises(ValueError, match="blurring"):
        LD.MeanShift(bandwidth=1.0, blurring=True).fit(Xd)
    with pytest.raises(ValueError, match="`seeds` has 3 features"):
        LD.MeanShift(bandwidth=1.0, seeds=np.zeros((2, 3))).fit(Xd)
    bad = blobs.copy()
    bad[400, 0] = np.nan
    with pytest.raises(ValueError, match="`X` contains NaN"):
        LD.MeanShift(bandwidth=1.0, bin_seeding=True).fit(dx(bad))
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        LD.MeanShift(bandwidth=1.0).fit(Xd[Xd[:, 0] > 0])
    with pytest.raises(ValueError, match="too small for the spread"):
        LD.MeanShift(bandwidth=1e-15, algorithm="grid").fit(Xd)
    with pytest.raises(ValueError, match="No point was within"):
        LD.MeanShift(bandwidth=0.1, seeds=[[100.0, 100.0]]).fit(Xd)
    # A re-fit that fails mid-way leaves the previous fit.
    ms = LD.MeanShift(bandwidth=1.5, bin_seeding=True).fit(Xd)
    centres = ms.cluster_centers_
    with pytest.raises(ValueError, match="No point was within"):
        ms.set_params(bandwidth=0.1, seeds=[[100.0, 100.0]]).fit(Xd)
    assert ms.bandwidth_ == 1.5 and ms.cluster_centers_ is centres


def test_native_round_objects_reject_bad_input(blobs):
    win = _core.MeanShiftWindow(blobs, None, "tophat", 1.0)
    s = win.sums(blobs[:3])
    num, den, ls = s.num, s.den, s.log_scale
    assert num.shape == (3, 2) and den.shape == (3,) and np.all(ls == 0)
    back = pickle.loads(pickle.dumps(win))
    assert np.array_equal(back.sums(blobs[:3]).num, num)
    with pytest.raises(ValueError, match="features"):
        win.sums(np.zeros((2, 3)))
    with pytest.raises(TypeError, match="positions"):
        win.sums(blobs[:3].astype(np.float32))
    with pytest.raises(ValueError, match="bandwidth"):
        _core.MeanShiftWindow(blobs, None, "gaussian", 0.0)
    seeds = _core.MeanShiftSeeds(blobs[:4], "gaussian", 1.0)
    with pytest.raises(ValueError, match="sums"):
        seeds.advance(np.zeros((3, 2)), np.ones(3), np.zeros(3))
    seeds.result()
    with pytest.raises(ValueError, match="ended"):
        seeds.positions()
    with pytest.raises(ValueError, match="features"):
        _core.grid_merge([_core.grid_cells(blobs, [0.0, 0.0], [1.0, 1.0], None, 1.0, 2),
                          _core.grid_cells(np.ascontiguousarray(blobs[:, :1]), [0.0], [1.0], None, 1.0, 2)])


def test_a_worker_killed_mid_fit_changes_nothing(blobs, dask_client, monkeypatch):
    """Tasks are pure: the windows and shards a killed worker held are recomputed from their
    lineage and the fit ends with the in-memory result."""
    X = np.vstack([blobs, blobs + 0.05])
    Xd = dx(X, (300, 300, 300, 300))
    params = dict(bandwidth=1.0, kernel="gaussian", bin_seeding=True, tol=1e-5)
    ref = L.MeanShift(**params).fit(X)
    est = LD.MeanShift(**params, verbose=True)
    killed = []

    def bar(enabled, desc, unit="it"):
        def update(done, total):
            if done == 2 and not killed:
                held = dask_client.who_has(distributed.futures_of(est._window_futures))
                victim = sorted({w for holders in held.values() for w in holders})[0]
                pid = dask_client.run(os.getpid, workers=[victim])[victim]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

        return update, lambda: None

    monkeypatch.setattr(_mean_shift, "progress_bar", bar)
    est.fit(Xd)
    assert killed, "the fit ended before a worker could be killed"
    assert est.n_iter_ > 2
    assert np.array_equal(est.seed_n_iter_, ref.seed_n_iter_)
    assert np.allclose(est.seed_modes_, ref.seed_modes_, rtol=1e-12, atol=1e-12)
    assert np.allclose(est.cluster_centers_, ref.cluster_centers_, rtol=1e-12, atol=1e-12)
    assert np.array_equal(est.labels_.compute(), ref.labels_)
    # The nanny restarted the killed worker; the cluster is whole again.
    dask_client.wait_for_workers(2, timeout=120)
    assert killed[0] not in dask_client.run(os.getpid).values()

"""localization.dask on a 2-process LocalCluster: every function and estimator equals the
in-memory result on unevenly sharded data (empty and one-row chunks included)."""

import pickle
import subprocess
import sys

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
pytest.importorskip("distributed")

import localization as L  # noqa: E402
import localization.dask as LD  # noqa: E402
from localization import LocalSums  # noqa: E402

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("dask_client")]

# Uneven row chunks with an empty one and one-row ones, for 400 references and 53 queries.
X_CHUNKS = (120, 0, 1, 179, 1, 99)
Q_CHUNKS = (20, 0, 1, 32)


def rel(a, b):
    """Largest relative difference; NaN and infinities must sit at the same places."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape
    assert np.array_equal(np.isnan(a), np.isnan(b))
    same = (a == b) | np.isnan(a)
    d = np.where(same, 0.0, np.abs(a - b) / np.maximum(np.abs(b), 1e-300))
    return float(np.max(d)) if d.size else 0.0


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    X = np.vstack([rng.normal(size=(200, 2)), rng.normal(size=(200, 2)) + 5])
    Q = rng.normal(size=(53, 2)) * 3 + 2.5
    y = np.column_stack([np.sin(X[:, 0]), X[:, 1] ** 2])
    w = rng.random(400) + 0.1
    w[120:300] = 0.0  # whole shards weigh nothing
    return X, Q, y, w


def dx(A, chunks):
    return da.from_array(A, chunks=(chunks,) + (-1,) * (A.ndim - 1))


# -- local_mean / kernel_sum ----------------------------------------------------------


@pytest.mark.parametrize("references", ["broadcast", "sharded"])
@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "tophat", "cauchy"])
def test_local_mean_equals_in_memory(data, references, kernel):
    X, Q, y, w = data
    Xd, Qd = dx(X, X_CHUNKS), dx(Q, Q_CHUNKS)
    m, tot = LD.local_mean(Qd, Xd, dx(y, X_CHUNKS), kernel=kernel, bandwidth=1.5, sample_weight=dx(w, X_CHUNKS),
                           return_weight=True, references=references)
    assert m.chunks[0] == Q_CHUNKS
    mm, tt = L.local_mean(Q, X, y, kernel=kernel, bandwidth=1.5, sample_weight=w, return_weight=True)
    assert rel(m.compute(), mm) < 1e-12
    assert rel(tot.compute(), tt) < 1e-12
    # 1-D values, the default values (X itself), in-memory references.
    assert rel(LD.local_mean(Qd, X, y[:, 0], kernel=kernel, bandwidth=2.0, references=references).compute(),
               L.local_mean(Q, X, y[:, 0], kernel=kernel, bandwidth=2.0)) < 1e-12
    assert rel(LD.local_mean(Q, Xd, kernel=kernel, bandwidth=2.0, references=references).compute(),
               L.local_mean(Q, X, kernel=kernel, bandwidth=2.0)) < 1e-12


@pytest.mark.parametrize("references", ["broadcast", "sharded"])
def test_kernel_sum_equals_in_memory_and_keeps_float32(data, references):
    X, Q, _, w = data
    Xd, Qd = dx(X, X_CHUNKS), dx(Q, Q_CHUNKS)
    for log in (False, True):
        got = LD.kernel_sum(Qd, Xd, bandwidth=0.3, sample_weight=w, log=log, references=references).compute()
        assert rel(got, L.kernel_sum(Q, X, bandwidth=0.3, sample_weight=w, log=log)) < 1e-12
    # Weighted sums of values (the numerator of the local mean), 1-D and 2-D.
    y = np.column_stack([np.sin(X[:, 0]), X[:, 1]])
    for v in (y, y[:, 1]):
        got = LD.kernel_sum(Qd, Xd, v, bandwidth=0.8, sample_weight=w, references=references).compute()
        assert rel(got, L.kernel_sum(Q, X, v, bandwidth=0.8, sample_weight=w)) < 1e-12
    # Tiny bandwidth: every kernel value underflows, the log stays finite and exact.
    got = LD.kernel_sum(Qd, Xd, bandwidth=1e-4, log=True, references=references).compute()
    assert np.all(np.isfinite(got))
    assert rel(got, L.kernel_sum(Q, X, bandwidth=1e-4, log=True)) < 1e-12
    X32, Q32 = X.astype(np.float32), Q.astype(np.float32)
    m = LD.local_mean(dx(Q32, Q_CHUNKS), dx(X32, X_CHUNKS), bandwidth=1.0, references=references)
    assert m.dtype == np.float32 and m.compute().dtype == np.float32
    assert rel(m.compute(), L.local_mean(Q32, X32, bandwidth=1.0)) < 1e-5


def test_sharded_sums_are_the_fixed_tree_of_shard_sums(data, dask_client):
    """The distributed reduction is LocalSums.reduce over the shards in order, bit for bit,
    whichever worker finishes first, and on 1 or 2 workers."""
    X, Q, y, _ = data
    Xd = dx(X, X_CHUNKS)
    got = [LD.local_mean(Q, Xd, y, bandwidth=0.7, references="sharded").compute() for _ in range(3)]
    cuts = np.cumsum((0,) + X_CHUNKS)
    parts = [LocalSums.compute(Q, X[a:b], y[a:b], bandwidth=0.7, n_jobs=1) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
    expected = LocalSums.reduce(parts).mean()
    for g in got:
        assert np.array_equal(g, expected)
    one = dask_client.submit(lambda: 0).result()  # the cluster is alive
    assert one == 0


def test_leave_one_out_on_shards(data):
    X, _, y, _ = data
    Xd = dx(X, X_CHUNKS)
    got = LD.local_mean(Xd, Xd, y, bandwidth=0.5, exclude_self=True).compute()
    assert rel(got, L.local_mean(X, X, y, bandwidth=0.5, exclude_self=True)) < 1e-12


def test_kernels_that_need_the_whole_sample_are_broadcast(data):
    X, Q, y, _ = data
    Xd = dx(X, X_CHUNKS)
    knn = LD.local_mean(Q, Xd, y, kernel="knn", n_neighbors=7)
    assert rel(knn.compute(), L.local_mean(Q, X, y, kernel="knn", n_neighbors=7)) < 1e-12
    balloon = LD.kernel_sum(Q, Xd, bandwidth=L.Balloon(5))
    assert rel(balloon.compute(), L.kernel_sum(Q, X, bandwidth=L.Balloon(5))) < 1e-12
    with pytest.raises(ValueError, match="references='broadcast'"):
        LD.local_mean(Q, Xd, y, kernel="knn", n_neighbors=7, references="sharded")
    with pytest.raises(ValueError, match="references='broadcast'"):
        LD.kernel_sum(Q, Xd, bandwidth="scott_scaled", references="sharded")
    dog = 2 * L.Kernel("gaussian", 1.0) - L.Kernel("gaussian", 2.0)  # signed: broadcast only
    assert rel(LD.local_mean(Q, Xd, y, kernel=dog).compute(), L.local_mean(Q, X, y, kernel=dog)) < 1e-12
    with pytest.raises(ValueError, match="references='broadcast'"):
        LD.local_mean(Q, Xd, y, kernel=dog, references="sharded")
    # scikit-learn's rules of thumb depend on n and d only: they shard.
    for rule in ("scott", "silverman"):
        got = LD.kernel_sum(Q, Xd, bandwidth=rule, references="sharded").compute()
        assert rel(got, L.kernel_sum(Q, X, bandwidth=rule)) < 1e-12


# -- bad input -------------------------------------------------------------------------


def test_bad_input_is_a_clear_error_and_the_cluster_survives(data, dask_client):
    X, Q, y, _ = data
    Xd = dx(X, X_CHUNKS)
    unknown = Xd[Xd[:, 0] > 0]
    with pytest.raises(ValueError, match="`X` has unknown chunk sizes"):
        LD.local_mean(Q, unknown)
    with pytest.raises(ValueError, match="`X_query` has unknown chunk sizes"):
        LD.kernel_sum(unknown, Xd)
    with pytest.raises(ValueError, match="`X` has unknown chunk sizes"):
        LD.KernelDensity().fit(unknown)
    with pytest.raises(ValueError, match="`X_query` has 3 features, but X has 2"):
        LD.local_mean(np.zeros((2, 3)), Xd)
    with pytest.raises(ValueError, match="`values` has 399 rows"):
        LD.local_mean(Q, Xd, y[:-1])
    with pytest.raises(ValueError, match="`references`"):
        LD.local_mean(Q, Xd, references="everywhere")
    with pytest.raises(ValueError, match="bandwidth"):
        LD.local_mean(Q, Xd, bandwidth=-1.0)
    with pytest.raises(ValueError, match="X_query to be X"):
        LD.local_mean(Q, Xd, exclude_self=True)
    with pytest.raises(TypeError, match="`X` has dtype"):
        LD.local_mean(Q, da.from_array(np.array([["a", "b"]])))
    for n_jobs, error in ((0, ValueError), (2.0, TypeError)):  # as in the in-memory functions
        with pytest.raises(error, match="`n_jobs`") as e:
            LD.local_mean(Q, Xd, n_jobs=n_jobs)
        assert e.value.parameter == "n_jobs"
    bad = X.copy()
    bad[250, 1] = np.nan  # in one chunk only
    for refs in ("broadcast", "sharded"):
        with pytest.raises(ValueError, match="Input X contains NaN"):
            LD.local_mean(Q, dx(bad, X_CHUNKS), references=refs).compute()
    badq = Q.copy()
    badq[40, 0] = np.inf
    with pytest.raises(ValueError, match="X_query contains infinity"):
        LD.kernel_sum(dx(badq, Q_CHUNKS), Xd, references="sharded").compute()
    with pytest.raises(ValueError, match="`X` contains NaN or infinity"):
        LD.KernelDensity().fit(dx(bad, X_CHUNKS))
    # A re-fit that fails (here after the new sample was stored) leaves the previous fit.
    kde = LD.KernelDensity(bandwidth=0.5).fit(Xd)
    before = kde.score_samples(Q[:3])
    with pytest.raises(ValueError, match="must not look at the whole sample"):
        kde.set_params(bandwidth="scott_scaled").fit(dx(X[:200], 64))
    assert kde.X_fit_.shape == X.shape and rel(kde.score_samples(Q[:3]), before) == 0
    with pytest.raises(ValueError, match="`sample_weight` must be non-negative"):
        LD.LocalMeanRegressor().fit(Xd, y, sample_weight=-np.ones(400))
    with pytest.raises(ValueError, match="`y` has 399 rows"):
        LD.LocalMeanRegressor().fit(Xd, y[:-1])
    with pytest.raises(ValueError, match="`X` has 3 features, but the fitted sample has 2"):
        LD.KernelDensity().fit(Xd).score_samples(np.zeros((1, 3)))
    # The cluster is still healthy after the failed tasks.
    assert rel(LD.kernel_sum(Q, Xd, references="sharded").compute(), L.kernel_sum(Q, X)) < 1e-12
    assert sum(dask_client.nthreads().values()) == 2


def test_binned_is_refused_and_tolerances_keep_the_exact_sums(data):
    """Every Dask path is exact: the approximate binned path is refused by name (binned per
    shard or query chunk, its grid would differ from the in-memory one), and atol/rtol, which
    only allow "auto" to bin, leave the sharded sums exact."""
    X, Q, y, w = data
    Xd = dx(X, X_CHUNKS)
    for call in (
        lambda: LD.local_mean(Q, Xd, references="sharded", algorithm="binned"),
        lambda: LD.local_mean(Q, X, references="broadcast", algorithm="binned"),
        lambda: LD.kernel_sum(Q, Xd, algorithm="binned"),
        lambda: LD.KernelDensity(algorithm="binned").fit(Xd),
        lambda: LD.LocalMeanRegressor(algorithm="binned").fit(Xd, y[:, 0]),
    ):
        with pytest.raises(ValueError, match="algorithm='binned'.*not available on Dask"):
            call()
    exact = L.KernelDensity(bandwidth=0.7).fit(X).score_samples(Q)
    loose = LD.KernelDensity(bandwidth=0.7, atol=1e-2, rtol=1e-2).fit(Xd).score_samples(Q)
    assert rel(loose, exact) < 1e-12
    reg = LD.LocalMeanRegressor(bandwidth=0.7, rtol=1e-2).fit(Xd, dx(y[:, 0], X_CHUNKS))
    assert rel(reg.predict(Q), L.LocalMeanRegressor(bandwidth=0.7).fit(X, y[:, 0]).predict(Q)) < 1e-12


# -- estimators on sharded samples -----------------------------------------------------


def test_kernel_density_on_a_sharded_sample(data, dask_client):
    X, Q, _, w = data
    Xd = dx(X, X_CHUNKS)
    for kernel, bw in [("gaussian", 0.4), ("epanechnikov", np.array([0.5, 1.0])), ("exponential", 0.3)]:
        kde = LD.KernelDensity(kernel=kernel, bandwidth=bw).fit(Xd, sample_weight=dx(w, X_CHUNKS))
        ref = L.KernelDensity(kernel=kernel, bandwidth=bw).fit(X, sample_weight=w)
        assert rel(kde.score_samples(Q), ref.score_samples(Q)) < 1e-12
        got = kde.score_samples(dx(Q, Q_CHUNKS))
        assert isinstance(got, da.Array) and got.chunks[0] == Q_CHUNKS
        assert rel(got.compute(), ref.score_samples(Q)) < 1e-12
        assert np.isclose(kde.score(Q), ref.score(Q), rtol=1e-12)
    # The sample stays on the workers: its blocks are there, never on the client.
    kde = LD.KernelDensity(bandwidth=0.4).fit(Xd)
    held = dask_client.who_has(kde.X_fit_)
    assert len(held) == len(X_CHUNKS) and all(held.values())
    with pytest.raises(NotImplementedError):
        kde.sample()
    with pytest.raises(ValueError, match="must not look at the whole sample"):
        LD.KernelDensity(bandwidth="scott_scaled").fit(Xd)
    scott = LD.KernelDensity(bandwidth="scott").fit(Xd)
    ref = L.KernelDensity(bandwidth="scott").fit(X)
    assert scott.bandwidth_ == ref.bandwidth_
    assert rel(scott.score_samples(Q), ref.score_samples(Q)) < 1e-12
    back = pickle.loads(pickle.dumps(kde))
    assert rel(back.score_samples(Q[:5]), kde.score_samples(Q[:5])) == 0


def test_sample_is_never_gathered_to_the_client(data, monkeypatch):
    X, Q, y, _ = data
    Xd = dx(X, X_CHUNKS)

    def refuse(self, *a, **k):
        raise AssertionError("the sharded sample was gathered to the client")

    monkeypatch.setattr(da.Array, "__array__", refuse)
    reg = LD.LocalMeanRegressor(bandwidth=0.5).fit(Xd, dx(y, X_CHUNKS))
    assert rel(reg.predict(Q), L.LocalMeanRegressor(bandwidth=0.5).fit(X, y).predict(Q)) < 1e-12


def test_local_mean_regressor_on_a_sharded_sample(data):
    X, Q, y, w = data
    Xd = dx(X, X_CHUNKS)
    for target in (y, y[:, 0]):
        reg = LD.LocalMeanRegressor(kernel="biweight", bandwidth=1.2).fit(Xd, dx(target, X_CHUNKS), sample_weight=w)
        ref = L.LocalMeanRegressor(kernel="biweight", bandwidth=1.2).fit(X, target, sample_weight=w)
        assert rel(reg.predict(Q), ref.predict(Q)) < 1e-12
        assert rel(reg.predict(dx(Q, Q_CHUNKS)).compute(), ref.predict(Q)) < 1e-12
        loo = reg.loo_predict().compute()
        exp = ref.loo_predict()
        assert np.array_equal(np.isnan(loo), np.isnan(exp))
        assert rel(np.nan_to_num(loo), np.nan_to_num(exp)) < 1e-12
    with pytest.raises(ValueError, match="'loo'"):
        LD.LocalMeanRegressor(bandwidth="loo").fit(Xd, y)


def test_nearest_neighbors_on_a_sharded_sample(data):
    X, Q, _, _ = data
    Xd = dx(X, X_CHUNKS)
    # Duplicated points make ties: the order by (distance, index) is the in-memory one.
    Xt = np.vstack([X, X[:30]])
    Xtd = dx(Xt, X_CHUNKS + (30,))
    for sample, sd, algorithm in [(X, Xd, "kd_tree"), (X, Xd, "brute"), (Xt, Xtd, "kd_tree")]:
        nn = LD.NearestNeighbors(n_neighbors=6, algorithm=algorithm).fit(sd)
        ref = L.NearestNeighbors(n_neighbors=6, algorithm=algorithm).fit(sample)
        d1, i1 = nn.kneighbors(Q)
        d2, i2 = ref.kneighbors(Q)
        assert np.array_equal(i1, i2) and rel(d1, d2) < 1e-12
        d1, i1 = nn.kneighbors(dx(Q, Q_CHUNKS), n_neighbors=3)
        assert np.array_equal(i1.compute(), i2[:, :3])
        d1, i1 = nn.kneighbors()
        d2, i2 = ref.kneighbors()
        assert np.array_equal(i1.compute(), i2) and rel(d1.compute(), d2) < 1e-12
    with pytest.raises(ValueError, match="n_neighbors <= n_samples_fit"):
        LD.NearestNeighbors(n_neighbors=400).fit(Xd).kneighbors()


@pytest.mark.parametrize("scheduler", ["distributed", "threads"])
def test_nearest_neighbors_verbose_counts_partitions_on_the_client(scheduler, data, capsys, monkeypatch):
    """The bar advances as the per-partition tasks end, on the client, with the cluster's
    futures or the local scheduler's callbacks; silent below the delay, closed on Ctrl-C,
    and the results are those of a quiet run."""
    import dask

    from localization import _progress
    from localization.dask import _common

    X, Q, _, _ = data
    Xd = dx(X, X_CHUNKS)
    if scheduler == "threads":
        monkeypatch.setattr(_common, "client", lambda: None)
        monkeypatch.setitem(dask.config.config, "scheduler", "threads")
    parts = len([c for c in X_CHUNKS if c])
    quiet = LD.NearestNeighbors(n_neighbors=4).fit(Xd).kneighbors(Q)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(_progress, "DELAY", 5.0)
    LD.NearestNeighbors(n_neighbors=4, verbose=True).fit(Xd).kneighbors(Q)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(_progress, "DELAY", 0.0)
    nn = LD.NearestNeighbors(n_neighbors=4, verbose=True).fit(Xd)
    err = capsys.readouterr().err
    assert "NearestNeighbors.fit: 100%" in err and f"{parts}/{parts}" in err, err
    shown = nn.kneighbors(Q)
    err = capsys.readouterr().err
    # One query partition: its distances and its indices.
    assert "NearestNeighbors.kneighbors: 100%" in err and "2/2" in err and err.endswith("\n"), err
    assert np.array_equal(shown[1], quiet[1]) and np.array_equal(shown[0], quiet[0])

    def interrupt(self, k=1, **postfix):
        raise KeyboardInterrupt

    monkeypatch.setattr(_progress.Progress, "update", interrupt)
    with pytest.raises(KeyboardInterrupt):
        nn.kneighbors(Q)
    assert capsys.readouterr().err.endswith("\n")


# -- any fitted estimator, blockwise ---------------------------------------------------


@pytest.fixture(scope="module")
def fitted(data):
    X, _, y, _ = data
    labels = (X[:, 0] > 2.5).astype(int)
    return {
        "predict": L.LocalMeanRegressor(bandwidth=0.6).fit(X, y),
        "predict_proba": L.LocalModeClassifier(kernel="epanechnikov", bandwidth=2.0).fit(X, labels),
        "score_samples": L.KernelDensity(bandwidth=0.5).fit(X),
        "transform": L.LocalPCA(n_components=1, bandwidth=1.5).fit(X),
        "labels": L.MeanShift(bandwidth=1.5, bin_seeding=True).fit(X),
    }


@pytest.mark.parametrize("method", ["predict", "predict_proba", "score_samples", "transform", "labels"])
def test_postfit_runs_any_fitted_estimator_blockwise(data, fitted, method):
    _, Q, _, _ = data
    est = fitted[method]
    name = "predict" if method == "labels" else method
    wrapped = LD.PostFit(est)
    got = getattr(wrapped, name)(dx(Q, Q_CHUNKS))
    assert isinstance(got, da.Array) and got.chunks[0] == Q_CHUNKS
    expected = getattr(est, name)(Q)
    got = got.compute()
    if method == "labels" or method == "predict" and got.dtype.kind == "i":
        assert np.array_equal(got, expected)
    else:
        assert rel(got, expected) < 1e-12
    assert np.array_equal(np.asarray(getattr(wrapped, name)(Q)), np.asarray(expected))
    with pytest.raises(ValueError, match="3 features"):
        getattr(wrapped, name)(da.zeros((4, 3), chunks=2))


def test_postfit_methods_follow_the_estimator(fitted):
    wrapped = LD.PostFit(fitted["score_samples"])
    assert hasattr(wrapped, "score_samples") and not hasattr(wrapped, "predict_proba")
    assert LD.PostFit(fitted["predict_proba"]).classes_.tolist() == [0, 1]
    with pytest.raises(Exception, match="not fitted"):
        LD.PostFit(L.KernelDensity()).score_samples(da.zeros((2, 2), chunks=1))


def test_dask_ml_parallel_post_fit_runs_our_estimators(data, fitted):
    wrappers = pytest.importorskip("dask_ml.wrappers")
    X, Q, y, _ = data
    Qd = dx(Q, (20, 1, 32))  # dask-ml needs non-empty chunks
    # dask-ml's predict drops the second axis: a single-output model.
    single = L.LocalMeanRegressor(bandwidth=0.6).fit(X, y[:, 0])
    for method, est in [("predict", single), ("predict_proba", fitted["predict_proba"]), ("transform", fitted["transform"])]:
        theirs = getattr(wrappers.ParallelPostFit(est), method)(Qd).compute()
        ours = getattr(LD.PostFit(est), method)(Qd).compute()
        assert rel(theirs, ours) < 1e-12


# -- the extra is optional -------------------------------------------------------------


def test_the_package_imports_without_dask():
    code = (
        "import sys; sys.modules['dask'] = None; sys.modules['distributed'] = None\n"
        "import localization, numpy as np\n"
        "assert 'localization.dask' not in sys.modules\n"
        "print(localization.local_mean([[0.0]], [[0.0], [1.0]], [1.0, 3.0], kernel='tophat', bandwidth=0.5)[0])\n"
        "try:\n    import localization.dask\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["1.0", "localization.dask needs Dask: pip install 'localization-methods[dask]'"]


def test_docstring_examples_run():
    import doctest

    from localization.dask import _estimators, _local, _mean_shift, _wrap

    for mod in (_local, _wrap, _estimators, _mean_shift):
        assert doctest.testmod(mod, raise_on_error=False).failed == 0, mod.__name__

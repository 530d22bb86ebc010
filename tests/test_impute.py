"""LocalMeanImputer: the two-layer local-mean imputer (experiment 3)."""

import pickle

import numpy as np
import pytest

from localization import LocalMeanImputer
from localization.datasets import load_fashion_mnist


def _table(n=120, seed=0, frac=0.2):
    rng = np.random.default_rng(seed)
    t = rng.normal(size=(n, 1))
    X = np.hstack([t, 2 * t + 0.1 * rng.normal(size=(n, 1)), -t, rng.normal(size=(n, 1)), np.sin(t)])
    Xm = X.copy()
    Xm[rng.random(X.shape) < frac] = np.nan
    return X, Xm


def _images(n=300, frac=0.3, seed=0):
    X, _ = load_fashion_mnist(n=n)
    X = X.astype(np.float64)
    rng = np.random.default_rng(seed)
    Xm = X.copy()
    Xm[rng.random(X.shape) < frac] = np.nan
    return X, Xm


def test_observed_entries_unchanged_bit_for_bit_and_nan_filled():
    X, Xm = _table()
    out = LocalMeanImputer(random_state=0).fit_transform(Xm)
    obs = ~np.isnan(Xm)
    assert np.array_equal(out[obs], Xm[obs])
    assert np.all(np.isfinite(out))
    assert out.dtype == Xm.dtype
    out32 = LocalMeanImputer(random_state=0).fit_transform(Xm.astype(np.float32))
    assert out32.dtype == np.float32 and np.array_equal(out32[obs], Xm.astype(np.float32)[obs])


def test_complete_rows_and_complete_data_are_returned_unchanged():
    X, Xm = _table()
    imp = LocalMeanImputer(random_state=0).fit(Xm)
    full = np.flatnonzero(~np.isnan(Xm).any(1))
    out = imp.transform(Xm)
    assert np.array_equal(out[full], Xm[full])
    assert np.array_equal(imp.transform(X), X)
    assert np.array_equal(LocalMeanImputer().fit_transform(X), X)


def test_beats_column_means_on_correlated_table():
    X, Xm = _table(n=300)
    miss = np.isnan(Xm)
    out = LocalMeanImputer(random_state=0).fit_transform(Xm)
    mean_fill = np.where(miss, np.nanmean(Xm, 0), Xm)
    rmse = np.sqrt(np.mean((out[miss] - X[miss]) ** 2))
    assert rmse < 0.6 * np.sqrt(np.mean((mean_fill[miss] - X[miss]) ** 2))


def test_images_beat_knn_imputer():
    from sklearn.impute import KNNImputer

    X, Xm = _images(400)
    miss = np.isnan(Xm)
    ours = LocalMeanImputer(image_shape=(28, 28), random_state=0).fit_transform(Xm)
    knn = KNNImputer(n_neighbors=10).fit_transform(Xm)
    r_ours = np.sqrt(np.mean((ours[miss] - X[miss]) ** 2))
    r_knn = np.sqrt(np.mean((knn[miss] - X[miss]) ** 2))
    assert r_ours < 0.9 * r_knn


def test_layer2_is_the_hollow_local_mean_over_coobserved_neighbours():
    # One layer-2 pass by hand: co-observed distances scaled as nan_euclidean, k nearest
    # other rows, Gaussian weights with h = s·d_k.
    from sklearn.metrics.pairwise import nan_euclidean_distances

    _, Xm = _table(n=40)
    imp = LocalMeanImputer(n_neighbors=6, bandwidth=0.7, feature_bandwidth=0.5).fit(Xm)
    dist, idx = imp._neighbours(Xm, np.arange(len(Xm)))
    D = nan_euclidean_distances(Xm)
    np.fill_diagonal(D, np.inf)
    want_idx = np.argsort(D, axis=1, kind="stable")[:, :6]
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_allclose(dist, np.take_along_axis(D, want_idx, 1), rtol=1e-10)
    V, own = np.random.default_rng(0).normal(size=(2, *Xm.shape))
    W = np.exp(-0.5 * (dist / (0.7 * dist[:, -1:])) ** 2)
    want = (own + np.einsum("ik,ikp->ip", W, V[idx])) / (1 + W.sum(1, keepdims=True))
    np.testing.assert_allclose(imp._layer2(dist, idx, V, own, 0.7, 1.0), want, rtol=1e-12)
    # rows are row-stochastic: a constant is reproduced exactly (identity 12's building block)
    np.testing.assert_allclose(imp._layer2(dist, idx, np.ones_like(V), np.ones_like(V), 0.7), 1.0, rtol=1e-14)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_masked_knn_matches_nan_euclidean_distances_on_images(dtype):
    # The core's co-observed k-NN (784-D, 30 % missing) against scikit-learn's
    # nan_euclidean_distances in float64: same neighbours (ties by index), same distances;
    # for new queries and for the sample itself (each row left out of its own neighbours).
    from sklearn.metrics.pairwise import nan_euclidean_distances

    from localization import _core

    _, Xm = _images(n=400)
    X, Q = Xm[:300].astype(dtype), Xm[300:].astype(dtype)
    for queries, exclude in ((Q, None), (X, np.arange(300))):
        D = nan_euclidean_distances(queries.astype(np.float64), X.astype(np.float64))
        if exclude is not None:
            D[np.arange(300), exclude] = np.inf
        want = np.argsort(D, axis=1, kind="stable")[:, :8]
        dist, idx = _core.masked_knn(queries, X, 8, exclude)
        assert dist.dtype == dtype
        rtol = 1e-12 if dtype == np.float64 else 1e-5
        if dtype == np.float64:
            np.testing.assert_array_equal(idx, want)
        np.testing.assert_allclose(dist, np.take_along_axis(D, idx, 1), rtol=rtol)
        np.testing.assert_allclose(dist, np.take_along_axis(D, want, 1), rtol=rtol)
        for n_jobs in (1, 2):  # bit-identical for any thread count
            d2, i2 = _core.masked_knn(queries, X, 8, exclude, n_jobs=n_jobs)
            np.testing.assert_array_equal(d2, dist)
            np.testing.assert_array_equal(i2, idx)


def test_masked_knn_bad_input_is_a_clear_error():
    from localization import _core

    X = np.random.default_rng(0).random((10, 4))
    with pytest.raises(ValueError, match="k"):
        _core.masked_knn(X, X, 11)
    with pytest.raises(ValueError, match="k"):
        _core.masked_knn(X, X, 10, np.arange(10))
    with pytest.raises(ValueError, match="exclude"):
        _core.masked_knn(X, X, 2, np.arange(3))
    with pytest.raises(ValueError, match="exclude"):
        _core.masked_knn(X, X, 2, -np.ones(10, dtype=np.int64))
    with pytest.raises(ValueError, match="X_query"):
        _core.masked_knn(X[:, :3].copy(), X, 2)
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.masked_knn(np.asfortranarray(X), X, 2)
    bad = X.copy()
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        _core.masked_knn(bad, X, 2)
    with pytest.raises(TypeError):
        _core.masked_knn(X.astype(np.float32), X, 2)


def test_spatial_layer_is_hollow_and_row_stochastic():
    from localization.impute import _spatial_hollow_mean

    Z = np.zeros((1, 49))
    Z[0, 24] = 1.0  # the centre pixel of a 7×7 image
    out = _spatial_hollow_mean(Z, (7, 7), 1.0)
    assert out[0, 24] == 0.0  # its own value is left out
    np.testing.assert_allclose(_spatial_hollow_mean(np.full((2, 49), 3.0), (7, 7), 1.3), 3.0, rtol=1e-14)


def test_loo_bandwidths_are_chosen_on_observed_entries():
    _, Xm = _images(200)
    imp = LocalMeanImputer(image_shape=(28, 28), random_state=0).fit(Xm)
    for name in ("bandwidth", "feature_bandwidth", "self_weight"):
        res = imp.cv_results_[name]
        assert getattr(imp, name + "_") == res["bandwidth"][np.argmin(res["objective"])]
    fixed = LocalMeanImputer(image_shape=(28, 28), bandwidth=1.0, feature_bandwidth=1.0).fit(Xm)
    assert set(fixed.cv_results_) == {"self_weight"} and fixed.bandwidth_ == 1.0


def test_random_state_makes_results_reproducible():
    _, Xm = _images(150)
    kw = dict(image_shape=(28, 28), max_loo_samples=50)
    a = LocalMeanImputer(random_state=3, **kw).fit_transform(Xm)
    b = LocalMeanImputer(random_state=3, **kw).fit_transform(Xm)
    assert np.array_equal(a, b)


def test_entirely_missing_column_and_row():
    X, Xm = _table()
    Xm[:, 2] = np.nan
    Xm[5] = np.nan
    with pytest.warns(UserWarning, match="no observed value"):
        out = LocalMeanImputer(random_state=0).fit_transform(Xm)
    assert np.all(np.isfinite(out))
    assert np.all(out[:, 2] == 0.0)  # a table column with no value anywhere: documented 0
    # images: an entirely missing pixel is filled from its neighbouring pixels
    _, Im = _images(100)
    Im[:, 300] = np.nan
    with pytest.warns(UserWarning, match="no observed value"):
        out = LocalMeanImputer(image_shape=(28, 28), random_state=0).fit_transform(Im)
    assert np.all(out[:, 300] > 0) or np.all(np.isfinite(out[:, 300]))


def test_bad_input():
    X, Xm = _table(n=20)
    with pytest.raises(ValueError, match="no observed value"):
        LocalMeanImputer().fit(np.full((5, 3), np.nan))
    with pytest.raises(ValueError, match="infinity"):
        LocalMeanImputer().fit(np.where(np.isnan(Xm), np.inf, Xm))
    with pytest.raises(ValueError, match="image_shape"):
        LocalMeanImputer(image_shape=(3, 3)).fit(Xm)
    with pytest.raises(ValueError, match="bandwidth"):
        LocalMeanImputer(bandwidth=0).fit(Xm)
    with pytest.raises(ValueError, match="n_iter"):
        LocalMeanImputer(n_iter=0).fit(Xm)
    imp = LocalMeanImputer().fit(Xm)
    with pytest.raises(ValueError, match="features"):
        imp.transform(Xm[:, :3])


def test_pickle_round_trip():
    _, Xm = _table()
    imp = LocalMeanImputer(random_state=0).fit(Xm)
    back = pickle.loads(pickle.dumps(imp))
    assert np.array_equal(back.transform(Xm), imp.transform(Xm))


def test_progress_bar_runs(capsys):
    _, Xm = _table(n=30)
    LocalMeanImputer(progress=True, random_state=0).fit_transform(Xm)

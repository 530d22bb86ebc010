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


def _fill_by_definition(imp, Xm):
    """The one-round fill of a table entry by entry, from its definition: the co-observed
    k nearest other rows (nan_euclidean_distances) with Gaussian weights h = s·d_k at the
    same column, plus w0 × the row's other observed columns under the feature kernel
    exp(−δ²/(2h²)) (their values mapped to the column by the correlation's sign),
    normalised by the kernel's full mass; numerators and denominators added."""
    from sklearn.metrics.pairwise import nan_euclidean_distances

    n, p = Xm.shape
    k, s, h, w0 = imp.n_neighbors_, imp.bandwidth_, imp.feature_bandwidth_, imp.self_weight_
    D = nan_euclidean_distances(Xm)
    np.fill_diagonal(D, np.inf)
    mean = np.nanmean(Xm, 0)
    std = np.sqrt(np.nanmean((Xm - mean) ** 2, 0))
    out = np.full(Xm.shape, np.nan)
    for i in range(n):
        nbrs = np.argsort(D[i], kind="stable")[:k]
        w = np.exp(-0.5 * (D[i, nbrs] / (s * D[i, nbrs[-1]])) ** 2)
        for c in range(p):
            num = den = 0.0
            for j, wj in zip(nbrs, w):
                if not np.isnan(Xm[j, c]):
                    num, den = num + wj * Xm[j, c], den + wj
            g_full = 0.0
            own_num = own_den = 0.0
            for c2 in range(p):
                if c2 == c:
                    continue
                both = ~np.isnan(Xm[:, c]) & ~np.isnan(Xm[:, c2])
                za, zb = (Xm[both, c] - mean[c]) / std[c], (Xm[both, c2] - mean[c2]) / std[c2]
                minus, plus = np.mean((za - zb) ** 2), np.mean((za + zb) ** 2)
                g = np.exp(-min(minus, plus) / (2 * h * h))
                g_full += g
                if not np.isnan(Xm[i, c2]):
                    sign = -1.0 if plus < minus else 1.0
                    own_num += g * (mean[c] + std[c] * sign * (Xm[i, c2] - mean[c2]) / std[c2])
                    own_den += g
            out[i, c] = (num + w0 * own_num / g_full) / (den + w0 * own_den / g_full)
    return out


def test_fill_is_one_local_mean_over_the_observed_entries():
    # The whole fill (one round) against its definition computed entry by entry.
    _, Xm = _table(n=40)
    imp = LocalMeanImputer(n_neighbors=6, bandwidth=0.7, feature_bandwidth=0.5, n_iter=1, random_state=0)
    out = imp.fit_transform(Xm)
    dist, idx = imp._neighbours(Xm, np.arange(len(Xm)))
    from sklearn.metrics.pairwise import nan_euclidean_distances

    D = nan_euclidean_distances(Xm)
    np.fill_diagonal(D, np.inf)
    np.testing.assert_array_equal(idx, np.argsort(D, axis=1, kind="stable")[:, :6])
    miss = np.isnan(Xm)
    np.testing.assert_allclose(out[miss], _fill_by_definition(imp, Xm)[miss], rtol=1e-10)
    # A constant is reproduced exactly: the fill is a local mean (non-negative weights, sum 1).
    const = np.where(miss, np.nan, 3.0)
    np.testing.assert_allclose(LocalMeanImputer(n_neighbors=6, random_state=0).fit_transform(const)[miss], 3.0,
                               rtol=1e-13)


def test_holdout_hides_entries_in_the_pattern_of_the_missing_ones():
    # Blocks missing → each hold-out row loses (part of) another row's block; scattered NaN →
    # scattered entries; no NaN → every observed entry (exact leave-one-out: the fill is hollow).
    X, _ = _images(60)
    n = len(X)
    rng = np.random.default_rng(0)
    blocks = np.zeros((n, 28, 28), dtype=bool)
    corners = rng.integers(0, 18, size=(n, 2))
    for i, (r, c) in enumerate(corners):
        blocks[i, r:r + 10, c:c + 10] = True
    blocks = blocks.reshape(n, -1)
    Xm = np.where(blocks, np.nan, X)
    imp = LocalMeanImputer(image_shape=(28, 28), max_loo_samples=30, random_state=0).fit(Xm)
    hold = imp._holdout(Xm, ~blocks, np.random.RandomState(0))
    rng = np.random.RandomState(0)  # the same draws: the rows, then whose pattern each row takes
    rows = np.sort(rng.choice(n, 30, replace=False))
    partner = rng.permutation(rows)
    assert (partner != rows).sum() > 20
    np.testing.assert_array_equal(hold.hidden, blocks[partner] & ~blocks[rows])
    np.testing.assert_array_equal(hold.seen, ~blocks[rows] & ~hold.hidden)
    # the hold-out rows' neighbours are found without the hidden entries
    Q = np.where(hold.seen, X[rows], np.nan)
    np.testing.assert_array_equal(hold.idx, imp._neighbours(Q, rows)[1])
    full = imp._holdout(X, np.ones_like(blocks), np.random.RandomState(0))
    assert full.hidden.all() and full.seen.all()


def test_block_pattern_beats_knn_imputer():
    # The case the old leave-one-out weights lost: a missing 10×10 block per image. The own
    # image's weight follows how much of a pixel's neighbourhood is observed (none deep in a
    # block), and the hold-out hides blocks.
    from sklearn.impute import KNNImputer

    X, _ = _images(400)
    rng = np.random.default_rng(1)
    miss = np.zeros((len(X), 28, 28), dtype=bool)
    for i, (r, c) in enumerate(rng.integers(4, 14, size=(len(X), 2))):
        miss[i, r:r + 10, c:c + 10] = True
    miss = miss.reshape(len(X), -1)
    Xm = np.where(miss, np.nan, X)
    with pytest.warns(UserWarning, match="no observed value"):  # every block covers pixel (13, 13)
        ours = LocalMeanImputer(image_shape=(28, 28), random_state=0).fit_transform(Xm)
    knn = KNNImputer(n_neighbors=10, keep_empty_features=True).fit_transform(Xm)
    r_ours = np.sqrt(np.mean((ours[miss] - X[miss]) ** 2))
    r_knn = np.sqrt(np.mean((knn[miss] - X[miss]) ** 2))
    assert r_ours < 0.95 * r_knn


def _planted(n=300, seed=0):
    """Four Gaussian-blob templates on 12×12 images, brightness 0.5–1.5, noise 0.01, one 4×4
    block missing per image: distances so concentrated that a Gaussian in d/dₖ over 20
    neighbours cannot weight the nearest few evenly."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:12, :12]
    templates = np.array([np.exp(-((yy - a) ** 2 + (xx - b) ** 2) / 8.0).ravel() for a, b in ((3, 3), (3, 8), (8, 3), (8, 8))])
    X = templates[rng.integers(0, 4, n)] * rng.uniform(0.5, 1.5, (n, 1)) + 0.01 * rng.normal(size=(n, 144))
    miss = np.zeros((n, 12, 12), dtype=bool)
    for i, (r, c) in enumerate(rng.integers(0, 9, size=(n, 2))):
        miss[i, r:r + 4, c:c + 4] = True
    miss = miss.reshape(n, -1)
    return X, miss, np.where(miss, np.nan, X)


def test_neighbour_count_chosen_on_the_holdout_wins_the_planted_case():
    # With k fixed at 20 this case loses to KNNImputer(10); k chosen on the hold-out wins.
    from sklearn.impute import KNNImputer

    X, miss, Xm = _planted()

    def rmse(out):
        return np.sqrt(np.mean((out[miss] - X[miss]) ** 2))

    imp = LocalMeanImputer(image_shape=(12, 12), random_state=0)
    chosen = rmse(imp.fit_transform(Xm))
    fixed = rmse(LocalMeanImputer(image_shape=(12, 12), n_neighbors=20, random_state=0).fit_transform(Xm))
    knn = rmse(KNNImputer(n_neighbors=10).fit_transform(Xm))
    assert imp.n_neighbors_ < 20 and "n_neighbors" in imp.cv_results_
    assert fixed > knn
    assert chosen <= knn and chosen < fixed


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


def test_spatial_kernel_is_hollow_and_normalised():
    from scipy.ndimage import gaussian_filter

    from localization.impute import _spatial_hollow_sum

    Z = np.zeros((1, 49))
    Z[0, 24] = 1.0  # the centre pixel of a 7×7 image
    out = _spatial_hollow_sum(Z, (7, 7), 1.0)
    assert out[0, 24] == 0.0  # its own value is left out
    np.testing.assert_allclose(out[0, 25], gaussian_filter(Z.reshape(7, 7), 1.0, mode="constant")[3, 4], rtol=1e-14)
    imp = LocalMeanImputer(image_shape=(7, 7))
    num, den = imp._feature_sums(np.full((2, 49), 3.0), np.ones((2, 49), dtype=bool), 1.3)
    np.testing.assert_allclose(den, 1.0, rtol=1e-14)  # a fully observed neighbourhood weighs 1
    np.testing.assert_allclose(num, 3.0, rtol=1e-14)


def test_bandwidths_and_weights_minimise_the_holdout_error():
    _, Xm = _images(200)
    imp = LocalMeanImputer(image_shape=(28, 28), random_state=0).fit(Xm)
    for name in ("n_neighbors", "bandwidth", "feature_bandwidth", "self_weight", "imputed_weight"):
        res = imp.cv_results_[name]
        assert getattr(imp, name + "_") == res["bandwidth"][np.argmin(res["objective"])]
    ks = imp.cv_results_["n_neighbors"]["bandwidth"]  # the candidates from 1 (the scan stops once the error rises)
    np.testing.assert_array_equal(ks, [1, 2, 3, 5, 8, 13, 20][: len(ks)])
    fixed = LocalMeanImputer(image_shape=(28, 28), n_neighbors=20, bandwidth=1.0, feature_bandwidth=1.0).fit(Xm)
    assert set(fixed.cv_results_) == {"self_weight", "imputed_weight"} and fixed.bandwidth_ == 1.0 and fixed.n_neighbors_ == 20
    assert "imputed_weight" not in LocalMeanImputer(image_shape=(28, 28), n_iter=1).fit(Xm).cv_results_


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

"""MedoidShift, QuickShift and PC-Shift: oracles, SPEC §9 identities 9 and 10, bad input."""

import pickle

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from localization import LocalizationWarning, local_mean
from localization.kernels import profile
from localization.cluster import MedoidShift, PCShift, QuickShift, pc_shift, pc_shift_step


def blobs(n=150, seed=0, d=2):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0] * d, [3.0] + [0.0] * (d - 1), [0.0, 3.0] + [0.0] * (d - 2)])
    return centers[rng.integers(0, 3, n)] + 0.5 * rng.standard_normal((n, d))


def medoid_reference(D, K, candidates=None):
    """next(i) = argmin_j Σ_k K[i, k] D[j, k]² (ties: smallest index)."""
    n = len(D)
    cost = K @ (D**2).T
    out = np.empty(n, dtype=int)
    for i in range(n):
        js = np.arange(n) if candidates is None else np.sort(candidates[i])
        c = cost[i, js]
        m = c.min()
        out[i] = js[np.flatnonzero(c == m)[0]]
    return out


def roots_of(nxt):
    r = np.array(nxt)
    for _ in range(len(r)):
        r = r[r]
    return r


# ---------------------------------------------------------------- MedoidShift


@pytest.mark.parametrize("kernel,h", [("gaussian", 0.7), ("epanechnikov", 1.2), ("exponential", 0.5)])
def test_medoid_shift_identity_10(kernel, h):
    """Euclidean data (local mean + nearest sample) = the dense definition with squared D."""
    X = blobs(160, seed=1)
    D = cdist(X, X)
    K = profile(kernel, D / h)
    want = medoid_reference(D, K)
    got = MedoidShift(bandwidth=h, kernel=kernel).fit(X)
    np.testing.assert_array_equal(got.next_, want)
    pre = MedoidShift(bandwidth=h, kernel=kernel, metric="precomputed").fit(D)
    np.testing.assert_array_equal(pre.next_, want)
    np.testing.assert_array_equal(pre.labels_, got.labels_)


@pytest.mark.parametrize("offset,weighted", [(0.0, False), (1e4, False), (0.0, True)])
@pytest.mark.parametrize("tolerance", [1e-7, 1e-3])
def test_medoid_shift_certified_means_equal_the_exact_path(monkeypatch, offset, weighted, tolerance):
    """Float64 Gaussian means come from a coarser series and each nearest sample is certified
    (or summed again exactly): the forest of the exact means. At 1e-3 many are re-summed."""
    from localization.cluster import _modes

    rng = np.random.default_rng(3)
    X = blobs(20_000, seed=3) + offset
    w = rng.uniform(0.5, 2.0, len(X)) if weighted else None
    monkeypatch.setattr(_modes, "_MEAN_TOLERANCE", 0.0)  # floored to the series' own 1e-14
    exact = MedoidShift(bandwidth=0.1).fit(X, sample_weight=w)
    resummed = []
    real_bind = _modes.bind

    def spy(*args, **kwargs):
        bk = real_bind(*args, **kwargs)
        real_sums = bk.sums
        bk.sums = lambda Q, *a, **k: resummed.append(len(Q)) or real_sums(Q, *a, **k)
        return bk

    monkeypatch.setattr(_modes, "bind", spy)
    monkeypatch.setattr(_modes, "_MEAN_TOLERANCE", tolerance)
    got = MedoidShift(bandwidth=0.1).fit(X, sample_weight=w)
    np.testing.assert_array_equal(got.next_, exact.next_)
    np.testing.assert_array_equal(got.labels_, exact.labels_)
    if tolerance == 1e-3:
        assert len(resummed) >= 2 and resummed[1] < len(X)  # the uncertain ones only


def test_medoid_shift_identity_10_jump_target():
    """Identity 10 written out: next(i) is the sample nearest the local mean m(x_i)."""
    X = blobs(120, seed=5)
    ms = MedoidShift(bandwidth=0.8).fit(X)
    M = local_mean(X, X, kernel="gaussian", bandwidth=0.8)
    np.testing.assert_array_equal(ms.next_, np.argmin(cdist(M, X), axis=1))
    # and the weighted cost really is S0·‖x_j − m_i‖² + const, to 1e-10
    D = cdist(X, X)
    K = profile("gaussian", D / 0.8)
    cost = K @ (D**2).T
    shifted = K.sum(1)[:, None] * cdist(M, X) ** 2
    np.testing.assert_allclose(cost - cost[:, :1], shifted - shifted[:, :1], atol=1e-10 * np.abs(cost).max())


def test_medoid_shift_precomputed_cityblock():
    X = blobs(140, seed=2)
    D = cdist(X, X, "cityblock")
    for kernel, h in [("gaussian", 1.0), ("biweight", 1.5)]:
        K = profile(kernel, D / h)
        want = medoid_reference(D, K)
        ms = MedoidShift(bandwidth=h, kernel=kernel, metric="precomputed").fit(D)
        np.testing.assert_array_equal(ms.next_, want)
        np.testing.assert_array_equal(ms.next_[ms.medoid_indices_], ms.medoid_indices_)
        np.testing.assert_array_equal(ms.medoid_indices_[ms.labels_], roots_of(ms.next_))
        assert not hasattr(ms, "cluster_centers_")


@pytest.mark.parametrize("metric", ["euclidean", "precomputed"])
def test_medoid_shift_knn_with_k_equal_n_is_dense(metric):
    X = blobs(130, seed=3)
    A = X if metric == "euclidean" else cdist(X, X, "cityblock")
    dense = MedoidShift(bandwidth=0.9, metric=metric).fit(A)
    sparse = MedoidShift(bandwidth=0.9, metric=metric, n_neighbors=len(X)).fit(A)
    np.testing.assert_array_equal(sparse.next_, dense.next_)
    np.testing.assert_array_equal(sparse.labels_, dense.labels_)


@pytest.mark.parametrize("metric", ["euclidean", "precomputed"])
def test_medoid_shift_knn_definition(metric):
    """k < N: sum and candidates restricted to N(i) (the k nearest, i included)."""
    X = blobs(150, seed=4)
    k = 12
    D = cdist(X, X) if metric == "euclidean" else cdist(X, X, "chebyshev")
    nbr = np.argsort(D + np.diag(np.full(len(X), -1.0)), axis=1, kind="stable")[:, :k]
    K = np.zeros_like(D)
    rows = np.arange(len(X))[:, None]
    K[rows, nbr] = profile("gaussian", D[rows, nbr] / 0.6)
    want = medoid_reference(D, K, candidates=nbr)
    ms = MedoidShift(bandwidth=0.6, metric=metric, n_neighbors=k).fit(X if metric == "euclidean" else D)
    np.testing.assert_array_equal(ms.next_, want)


def test_medoid_shift_duplicates_and_clusters():
    X = np.repeat(blobs(60, seed=6), 2, axis=0)  # every point twice
    ms = MedoidShift(bandwidth=1.0).fit(X)
    assert np.all(ms.next_[ms.medoid_indices_] == ms.medoid_indices_)
    np.testing.assert_array_equal(ms.labels_[::2], ms.labels_[1::2])
    knn = MedoidShift(bandwidth=1.0, n_neighbors=5).fit(X)
    assert np.all(knn.next_ >= 0)
    # a single sample, and two far-apart groups
    assert MedoidShift().fit([[1.0, 2.0]]).labels_.tolist() == [0]
    Y = np.r_[np.zeros((5, 1)) + np.arange(5)[:, None] * 0.01, 10 + np.arange(5)[:, None] * 0.01]
    assert len(set(MedoidShift(bandwidth=0.5).fit(Y).labels_)) == 2


def test_medoid_shift_float32():
    X = blobs(100, seed=7)
    a = MedoidShift(bandwidth=0.8).fit(X)
    b = MedoidShift(bandwidth=0.8).fit(X.astype(np.float32))
    assert b.cluster_centers_.dtype == np.float32
    assert np.mean(a.next_ == b.next_) > 0.95


# ---------------------------------------------------------------- QuickShift


def quickshift_reference(X, h, max_dist, threshold, kernel="gaussian"):
    D = cdist(X, X)
    rho = profile(kernel, D / h).sum(axis=1)
    n = len(X)
    parent = np.arange(n)
    link = np.full(n, np.inf)
    for i in range(n):
        above = (rho > rho[i]) | ((rho == rho[i]) & (np.arange(n) < i))
        ok = above & (D[i] <= max_dist)
        if ok.any():
            js = np.flatnonzero(ok)
            j = js[np.argmin(D[i, js])]  # argmin returns the smallest index on ties
            link[i] = D[i, j]
            if D[i, j] <= threshold:
                parent[i] = j
    return rho, parent, link


@pytest.mark.parametrize("kernel,h,max_dist,threshold", [
    ("gaussian", 0.5, 1.5, None), ("epanechnikov", 0.8, 2.0, 0.6), ("gaussian", 0.4, np.inf, 1.0),
])
def test_quickshift_brute_force(kernel, h, max_dist, threshold):
    X = blobs(200, seed=8)
    rho, parent, link = quickshift_reference(X, h, max_dist, max_dist if threshold is None else threshold, kernel)
    qs = QuickShift(bandwidth=h, kernel=kernel, max_dist=max_dist, threshold=threshold).fit(X)
    np.testing.assert_allclose(qs.densities_, rho, rtol=1e-10)
    np.testing.assert_array_equal(qs.parents_, parent)
    np.testing.assert_allclose(qs.link_distances_, link, rtol=1e-12)
    roots = roots_of(parent)
    np.testing.assert_array_equal(qs.mode_indices_[qs.labels_], roots)
    np.testing.assert_array_equal(qs.labels_, np.unique(roots, return_inverse=True)[1])


def test_quickshift_threshold_hierarchy_and_ties():
    X = blobs(150, seed=9)
    full = QuickShift(bandwidth=0.5, max_dist=np.inf).fit(X)
    assert len(full.mode_indices_) == 1  # every sample links up to the global maximum
    assert QuickShift(bandwidth=0.5, max_dist=1.0, threshold=0.0).fit(X).labels_.max() == len(X) - 1
    coarse = QuickShift(bandwidth=0.5, max_dist=1.0, threshold=0.8).fit(X).labels_
    fine = QuickShift(bandwidth=0.5, max_dist=1.0, threshold=0.3).fit(X).labels_
    # cutting more only splits trees: each fine cluster lies inside one coarse cluster
    for c in np.unique(fine):
        assert len(np.unique(coarse[fine == c])) == 1
    # exact duplicates have equal densities and still merge
    Y = np.repeat([[0.0, 0.0], [5.0, 5.0]], 3, axis=0)
    qs = QuickShift(bandwidth=1.0).fit(Y)
    assert qs.labels_.tolist() == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_quickshift_matches_skimage(seed):
    """Same features (ratio·Lab colour, row, column), same parameters → same segments.

    scikit-image searches a square window of half-width ceil(3·kernel_size) pixels; on an
    image no larger than that window both search every pixel and use the same Gaussian
    kernel sum, so the forests coincide (scikit-image's 1e-5 tie-breaking noise aside).
    """
    from skimage.color import rgb2lab
    from skimage.segmentation import quickshift

    rng = np.random.default_rng(seed)
    H, W = 12, 13
    img = np.zeros((H, W, 3))
    img[:, :7] = [0.8, 0.2, 0.2]
    img[:, 7:] = [0.2, 0.3, 0.9]
    img[6:, 3:10] = [0.3, 0.9, 0.3]
    img = np.clip(img + 0.05 * rng.standard_normal(img.shape), 0, 1)
    ks, md, ratio = 4.0, 6.0, 0.5
    seg, parent, dist = quickshift(img, ratio=ratio, kernel_size=ks, max_dist=md, return_tree=True)
    rr, cc = np.mgrid[:H, :W]
    F = np.c_[ratio * rgb2lab(img).reshape(-1, 3), rr.ravel(), cc.ravel()]
    qs = QuickShift(bandwidth=ks, max_dist=md).fit(F)
    np.testing.assert_array_equal(qs.labels_, seg.ravel())
    sk_parent = np.where(np.asarray(dist).ravel() > md, np.arange(H * W), np.asarray(parent).ravel())
    np.testing.assert_array_equal(qs.parents_, sk_parent)
    assert seg.max() >= 2


def _image_features(img, ratio):
    from skimage.color import rgb2lab

    H, W = img.shape[:2]
    rr, cc = np.mgrid[:H, :W]
    return np.c_[ratio * rgb2lab(img).reshape(H * W, 3), rr.ravel(), cc.ravel()]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_quickshift_window_reproduces_skimage_on_images_larger_than_the_window(seed):
    """window=ceil(3·kernel_size) on the (row, column) features is scikit-image's windowed
    density and parent search: the same segments and the same tree, where the exact default
    (the Gaussian summed over every pixel) can differ."""
    from skimage.segmentation import quickshift

    rng = np.random.default_rng(seed)
    H, W = 40, 47
    img = np.zeros((H, W, 3))
    img[:, :20] = [0.8, 0.2, 0.2]
    img[:, 20:] = [0.2, 0.3, 0.9]
    img[20:, 10:35] = [0.3, 0.9, 0.3]
    img = np.clip(img + 0.05 * rng.standard_normal(img.shape), 0, 1)
    ks, md, ratio = 3.0, 8.0, 0.5
    seg, parent, dist = quickshift(img, ratio=ratio, kernel_size=ks, max_dist=md, return_tree=True, rng=0)
    F = _image_features(img, ratio)
    qs = QuickShift(bandwidth=ks, max_dist=md, window=np.ceil(3 * ks), window_features=[-2, -1]).fit(F)
    np.testing.assert_array_equal(qs.labels_, seg.ravel())
    sk_parent = np.where(np.asarray(dist).ravel() > md, np.arange(H * W), np.asarray(parent).ravel())
    np.testing.assert_array_equal(qs.parents_, sk_parent)
    assert seg.max() >= 4
    again = QuickShift(bandwidth=ks, max_dist=md, window=np.ceil(3 * ks), window_features=[3, 4], n_jobs=1).fit(F)
    np.testing.assert_array_equal(again.labels_, qs.labels_)
    np.testing.assert_array_equal(again.densities_, qs.densities_)
    # The default sums over every pixel: the figure quoted in docs/parity.md for this image.
    from sklearn.metrics import adjusted_rand_score

    exact = adjusted_rand_score(seg.ravel(), QuickShift(bandwidth=ks, max_dist=md).fit(F).labels_)
    assert exact == pytest.approx({0: 1.0, 1: 0.8746, 2: 1.0}[seed], abs=1e-4)


def test_quickshift_window_density_against_brute_force(rng):
    X = rng.random((300, 3)) * [1.0, 4.0, 4.0]
    w = rng.random(300) + 0.5
    for feats, half in [([1, 2], 0.8), ([0], 0.2), (None, 0.5)]:
        qs = QuickShift(kernel="epanechnikov", bandwidth=0.6, max_dist=1.0, window=half, window_features=feats).fit(X, sample_weight=w)
        cols = [0, 1, 2] if feats is None else feats
        inside = np.all(np.abs(X[:, None, cols] - X[None, :, cols]) <= half, axis=2)
        u2 = ((X[:, None] - X[None]) ** 2).sum(-1) / 0.36
        want = (inside * np.clip(1 - u2, 0, None) * w).sum(1)
        np.testing.assert_allclose(qs.densities_, want, rtol=1e-12)
        dist = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
        for i in range(0, 300, 37):
            higher = inside[i] & (dist[i] <= 1.0) & ((want > want[i]) | ((want == want[i]) & (np.arange(300) < i)))
            j = np.flatnonzero(higher)
            expect = i if len(j) == 0 else j[np.lexsort((j, dist[i, j]))[0]]
            assert qs.link_distances_[i] == (np.inf if len(j) == 0 else dist[i, expect])
            assert QuickShift(kernel="epanechnikov", bandwidth=0.6, max_dist=1.0, window=half, window_features=feats).fit(
                X, sample_weight=w).parents_[i] == expect or qs.parents_[i] == expect


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(window=-1.0), "window"),
        (dict(window=np.nan), "window"),
        (dict(window=1.0, window_features=[5]), "window_features"),
        (dict(window=1.0, window_features=[]), "window_features"),
        (dict(window=1.0, window_features=["a"]), "window_features"),
        (dict(window_features=[0]), "needs `window`"),
        (dict(window=1.0, kernel="knn"), "radial profile"),
        (dict(window=1.0, bandwidth=[1.0, 1.0], max_dist=1.0), "scalar `bandwidth`"),
    ],
)
def test_quickshift_window_arguments(params, match):
    with pytest.raises((ValueError, TypeError), match=match):
        QuickShift(**{"max_dist": 1.0, **params}).fit(np.random.default_rng(0).random((10, 2)))


# ---------------------------------------------------------------- PC-Shift


def circle(n=1000, seed=0, noise=0.1):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 2 * np.pi, n)
    return np.c_[np.cos(t), np.sin(t)] + noise * rng.standard_normal((n, 2))


def step_reference(Q, X, q, h):
    """(I − P)(m − x) with explicit Gaussian weights and a weighted covariance about m."""
    out = []
    for x in Q:
        w = np.exp(-0.5 * np.sum((X - x) ** 2, axis=1) / h**2)
        m = w @ X / w.sum()
        C = (X - m).T @ ((X - m) * w[:, None]) / w.sum()
        V = np.linalg.eigh(C)[1][:, ::-1][:, :q]
        out.append((np.eye(len(x)) - V @ V.T) @ (m - x))
    return np.array(out)


@pytest.mark.parametrize("q", [0, 1, 2, 3])
def test_pc_shift_identity_9(q):
    X = np.random.default_rng(3).standard_normal((200, 3)) * [1.0, 0.5, 0.2]
    Q = np.random.default_rng(4).standard_normal((25, 3))
    got = pc_shift_step(Q, X, q, bandwidth=0.8)
    np.testing.assert_allclose(got, step_reference(Q, X, q, 0.8), atol=1e-10)
    if q == 0:
        np.testing.assert_allclose(got, local_mean(Q, X, bandwidth=0.8) - Q, atol=1e-12)
    if q == 3:  # P = I: every direction is projected out
        np.testing.assert_allclose(got, 0.0, atol=1e-12)


def test_pc_shift_q0_is_mean_shift():
    X = blobs(150, seed=10)
    est = PCShift(n_components=0, bandwidth=0.6, tol=1e-6, max_iter=500).fit(X)
    Y = X.copy()
    active = np.ones(len(X), bool)
    for _ in range(500):
        idx = np.flatnonzero(active)
        if not len(idx):
            break
        step = local_mean(Y[idx], X, bandwidth=0.6) - Y[idx]
        Y[idx] += step
        active[idx[np.linalg.norm(step, axis=1) < 1e-6]] = False
    np.testing.assert_allclose(est.points_, Y, atol=1e-10)
    assert est.converged_.all()


def test_pc_shift_circle_ridge():
    X = circle(1000, seed=0)
    Y = PCShift(n_components=1, bandwidth=0.2, tol=1e-6, max_iter=500).fit_transform(X)
    r = np.linalg.norm(Y, axis=1)
    assert np.abs(r - 1).max() < 0.05
    # the points moved onto a curve: the normal spread collapsed, the angles did not
    assert np.std(r) < 0.2 * np.std(np.linalg.norm(X, axis=1))
    ang = np.angle(Y[:, 0] + 1j * Y[:, 1]) - np.angle(X[:, 0] + 1j * X[:, 1])
    assert np.abs(np.angle(np.exp(1j * ang))).max() < 0.2


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_pc_shift_circle_ridge_many_seeds(seed):
    """With 3000 points the sampling wiggle of the KDE ridge is small for every seed.

    (With 1000 points the ridge of the *empirical* density can wander a little more: one
    seed in eight puts a ridge point 0.06 from the circle.)
    """
    Y = PCShift(n_components=1, bandwidth=0.15, tol=1e-6, max_iter=500).fit_transform(circle(3000, seed=seed))
    assert np.abs(np.linalg.norm(Y, axis=1) - 1).max() < 0.05


def test_pc_shift_transform_and_functional():
    X = circle(300, seed=1)
    est = PCShift(1, bandwidth=0.25).fit(X)
    np.testing.assert_array_equal(est.transform(X), est.points_)
    np.testing.assert_array_equal(pc_shift(X, 1, bandwidth=0.25), est.points_)
    Z = est.transform([[1.3, 0.0], [0.0, -0.8]])
    assert np.all(np.abs(np.linalg.norm(Z, axis=1) - 1) < 0.06)
    assert est.transform(X[:5].astype(np.float32)).dtype == np.float32


def test_pc_shift_zero_weight_warns():
    X = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.1]])
    est = PCShift(0, bandwidth=0.5, kernel="epanechnikov").fit(X)
    with pytest.warns(LocalizationWarning):
        out = est.transform([[10.0, 10.0]])
    np.testing.assert_array_equal(out, [[10.0, 10.0]])


# ---------------------------------------------------------------- shared properties


ESTIMATORS = [
    lambda: MedoidShift(bandwidth=0.7),
    lambda: MedoidShift(bandwidth=0.7, n_neighbors=10),
    lambda: QuickShift(bandwidth=0.5, max_dist=1.5),
    lambda: PCShift(1, bandwidth=0.6, max_iter=30),
]


def _result(est):
    return est.points_ if isinstance(est, PCShift) else est.labels_


@pytest.mark.parametrize("make", ESTIMATORS)
def test_thread_invariance_and_pickle(make):
    X = blobs(700, seed=11)
    a = make().set_params(n_jobs=1).fit(X)
    b = make().set_params(n_jobs=2).fit(X)
    np.testing.assert_array_equal(_result(a), _result(b))
    c = pickle.loads(pickle.dumps(b))
    np.testing.assert_array_equal(_result(c), _result(b))
    if isinstance(c, PCShift):
        np.testing.assert_array_equal(c.transform(X[:20]), b.transform(X[:20]))


def test_medoid_precomputed_thread_invariance():
    X = blobs(300, seed=12)
    D = cdist(X, X, "cityblock")
    for k in (None, 20):
        a = MedoidShift(bandwidth=1.0, metric="precomputed", n_neighbors=k, n_jobs=1).fit(D)
        b = MedoidShift(bandwidth=1.0, metric="precomputed", n_neighbors=k, n_jobs=2).fit(D)
        np.testing.assert_array_equal(a.next_, b.next_)


@pytest.mark.parametrize("est,X,err,match", [
    (MedoidShift(metric="cosine"), [[0.0], [1.0]], ValueError, "metric"),
    (MedoidShift(metric="precomputed"), [[0.0, 1.0, 2.0], [1.0, 0.0, 1.0]], ValueError, "square"),
    (MedoidShift(metric="precomputed"), [[0.0, -1.0], [-1.0, 0.0]], ValueError, "non-negative"),
    (MedoidShift(bandwidth=0.0), [[0.0], [1.0]], ValueError, "bandwidth"),
    (MedoidShift(bandwidth=-1.0), [[0.0], [1.0]], ValueError, "bandwidth"),
    (MedoidShift(bandwidth="scott"), [[0.0], [1.0]], TypeError, "bandwidth"),
    (MedoidShift(kernel="dot"), [[0.0], [1.0]], ValueError, "kernel"),
    (MedoidShift(kernel="nope"), [[0.0], [1.0]], ValueError, "nope"),
    (MedoidShift(n_neighbors=0), [[0.0], [1.0]], ValueError, "n_neighbors"),
    (MedoidShift(n_jobs=0), [[0.0], [1.0]], ValueError, "n_jobs"),
    (MedoidShift(), [[0.0], [np.nan]], ValueError, "NaN"),
    (MedoidShift(), [[0.0], [np.inf]], ValueError, "infinity"),
    (MedoidShift(), np.zeros((0, 2)), ValueError, "sample"),
    (QuickShift(max_dist=-1.0), [[0.0], [1.0]], ValueError, "max_dist"),
    (QuickShift(threshold=np.nan), [[0.0], [1.0]], ValueError, "threshold"),
    (QuickShift(bandwidth="scott"), [[0.0], [1.0]], ValueError, "max_dist"),
    (QuickShift(bandwidth=0.0), [[0.0], [1.0]], ValueError, "bandwidth"),
    (QuickShift(), [["a"], ["b"]], (TypeError, ValueError), "dtype|convert|string"),
    (PCShift(n_components=3), [[0.0, 1.0], [1.0, 0.0]], ValueError, "n_components"),
    (PCShift(n_components=-1), [[0.0, 1.0], [1.0, 0.0]], ValueError, "n_components"),
    (PCShift(tol=0.0), [[0.0, 1.0], [1.0, 0.0]], ValueError, "tol"),
    (PCShift(max_iter=0), [[0.0, 1.0], [1.0, 0.0]], ValueError, "max_iter"),
    (PCShift(kernel="dot"), [[0.0, 1.0], [1.0, 0.0]], ValueError, "degree|moments|kernel"),
    (PCShift(), np.ones((2, 2, 2)), ValueError, "dim"),
])
def test_bad_input(est, X, err, match):
    with pytest.raises(err, match=match):
        est.fit(np.asarray(X) if not isinstance(X, list) else X)


def test_bad_transform_input():
    est = PCShift(1).fit(np.random.default_rng(0).standard_normal((20, 2)))
    with pytest.raises(ValueError, match="features"):
        est.transform(np.zeros((3, 3)))
    with pytest.raises(ValueError):
        est.transform([[np.nan, 0.0]])
    with pytest.raises(ValueError, match="features"):
        pc_shift_step([[0.0, 1.0, 2.0]], [[0.0, 1.0]])


def test_non_contiguous_input():
    X = np.asfortranarray(blobs(80, seed=13))
    a = MedoidShift(bandwidth=0.7).fit(X).labels_
    b = MedoidShift(bandwidth=0.7).fit(np.ascontiguousarray(X)).labels_
    np.testing.assert_array_equal(a, b)
    Xs = blobs(160, seed=13)[::2]
    np.testing.assert_array_equal(QuickShift(bandwidth=0.5).fit(Xs).labels_, QuickShift(bandwidth=0.5).fit(Xs.copy()).labels_)


@pytest.mark.slow
def test_medoid_shift_larger_agreement():
    """Dense precomputed vs Euclidean fast path on a few thousand points."""
    X = blobs(3000, seed=14)
    a = MedoidShift(bandwidth=0.5).fit(X)
    b = MedoidShift(bandwidth=0.5, metric="precomputed").fit(cdist(X, X))
    assert np.mean(a.next_ == b.next_) > 0.999


def test_functional_twins():
    from localization.cluster import medoid_shift, quick_shift

    X = blobs(90, seed=15)
    labels, medoids, nxt = medoid_shift(X, bandwidth=0.7)
    est = MedoidShift(bandwidth=0.7).fit(X)
    np.testing.assert_array_equal(labels, est.labels_)
    np.testing.assert_array_equal(medoids, est.medoid_indices_)
    np.testing.assert_array_equal(nxt, est.next_)
    labels, parents, dens = quick_shift(X, bandwidth=0.5)
    qs = QuickShift(bandwidth=0.5).fit(X)
    np.testing.assert_array_equal(labels, qs.labels_)
    np.testing.assert_array_equal(parents, qs.parents_)


def test_concurrent_python_threads():
    from concurrent.futures import ThreadPoolExecutor

    X = blobs(400, seed=16)
    want = MedoidShift(bandwidth=0.6).fit(X).labels_
    want_q = QuickShift(bandwidth=0.5).fit(X).labels_
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda i: (MedoidShift(bandwidth=0.6).fit(X).labels_ if i % 2 else QuickShift(bandwidth=0.5).fit(X).labels_), range(8)))
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, want if i % 2 else want_q)


def test_pc_shift_verbose_progress(capsys, instant_progress):
    X = circle(100, seed=2)
    a = PCShift(1, bandwidth=0.3, verbose=True).fit(X)
    b = PCShift(1, bandwidth=0.3).fit(X)
    np.testing.assert_array_equal(a.points_, b.points_)
    assert "PC-Shift" in capsys.readouterr().err


def test_float32_quickshift_and_pc_shift():
    X = blobs(200, seed=17)
    a = QuickShift(bandwidth=0.5).fit(X)
    b = QuickShift(bandwidth=0.5).fit(X.astype(np.float32))
    assert b.cluster_centers_.dtype == np.float32
    assert np.mean(a.labels_ == b.labels_) > 0.95
    p = PCShift(1, bandwidth=0.6).fit(X.astype(np.float32))
    assert p.points_.dtype == np.float32
    np.testing.assert_allclose(p.points_, PCShift(1, bandwidth=0.6).fit(X).points_, atol=2e-3)


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra.numpy import arrays  # noqa: E402

_points = arrays(np.float64, st.tuples(st.integers(1, 40), st.integers(1, 3)), elements=st.floats(-5, 5).map(lambda v: round(v, 1)))


@settings(max_examples=40, deadline=None)
@given(X=_points, h=st.sampled_from([0.2, 1.0, 5.0]), kernel=st.sampled_from(["gaussian", "epanechnikov", "tophat"]))
def test_forest_properties(X, h, kernel):
    """Rounded coordinates give many duplicates and exact ties: the forests must stay valid."""
    ms = MedoidShift(bandwidth=h, kernel=kernel).fit(X)
    np.testing.assert_array_equal(ms.next_[ms.medoid_indices_], ms.medoid_indices_)
    np.testing.assert_array_equal(ms.medoid_indices_[ms.labels_], roots_of(ms.next_))
    # exact ties between duplicates go to the smaller index, so equal rows share a label
    _, first = np.unique(X, axis=0, return_index=True)
    for i in range(len(X)):
        twin = np.flatnonzero(np.all(X == X[i], axis=1))
        assert len(set(ms.labels_[twin])) == 1
    assert len(ms.medoid_indices_) <= len(first)  # at most one root per distinct point
    qs = QuickShift(bandwidth=h, kernel=kernel).fit(X)
    moved = qs.parents_ != np.arange(len(X))
    d = np.log(qs.densities_)
    up = (d[qs.parents_] > d) | ((d[qs.parents_] == d) & (qs.parents_ < np.arange(len(X))))
    assert np.all(up[moved])
    np.testing.assert_array_equal(qs.mode_indices_[qs.labels_], roots_of(qs.parents_))


@pytest.mark.parametrize("metric,k", [("euclidean", None), ("precomputed", None), ("euclidean", 150)])
def test_medoid_shift_sample_weight_is_duplication(metric, k):
    X = blobs(120, seed=18)
    w = np.random.default_rng(0).integers(1, 4, len(X))
    Xd = np.repeat(X, w, axis=0)
    first = np.r_[0, np.cumsum(w)[:-1]]  # position of each original in Xd
    A, Ad = (X, Xd) if metric == "euclidean" else (cdist(X, X), cdist(Xd, Xd))
    kd = None if k is None else len(Xd)
    a = MedoidShift(bandwidth=0.7, metric=metric, n_neighbors=None if k is None else len(X)).fit(A, sample_weight=w.astype(float))
    b = MedoidShift(bandwidth=0.7, metric=metric, n_neighbors=kd).fit(Ad)
    # next(i) on the weighted sample = (first copy of) next on the duplicated sample
    np.testing.assert_array_equal(first[a.next_], b.next_[first])


def test_iterated_medoid_shift_merges_spurious_modes():
    rng = np.random.default_rng(0)
    centers = np.array([[0.0, 0.0], [3.0, 0.5], [1.0, 3.0]])
    truth = rng.integers(0, 3, 300)
    X = centers[truth] + 0.55 * rng.standard_normal((300, 2))
    one = MedoidShift(bandwidth=0.8).fit(X)
    it = MedoidShift(bandwidth=0.8, max_iter=20).fit(X)
    assert len(one.medoid_indices_) == 10 and one.n_iter_ == 1
    # Passes stop when no root moves. A root between clusters whose weighted mean is still
    # nearest to itself survives (modes must be sample points), so 5 remain, not 3; the
    # three big trees are the three blobs.
    assert len(it.medoid_indices_) == 5 and 1 < it.n_iter_ < 20
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(truth, one.labels_) < 0.8
    assert adjusted_rand_score(truth, it.labels_) > 0.95
    assert np.sort(np.bincount(it.labels_))[-3:].sum() >= 290
    # later passes only add links between roots of the first forest
    changed = it.next_ != one.next_
    assert np.all(np.isin(np.flatnonzero(changed), one.medoid_indices_))
    pre = MedoidShift(bandwidth=0.8, max_iter=20, metric="precomputed").fit(cdist(X, X))
    np.testing.assert_array_equal(pre.labels_, it.labels_)
    knn = MedoidShift(bandwidth=0.8, max_iter=20, n_neighbors=300).fit(X)
    np.testing.assert_array_equal(knn.labels_, it.labels_)


def test_old_import_paths_name_the_cluster_family():
    """MedoidShift & co. moved into localization.cluster; the old modules re-export them."""
    import localization.cluster as cluster
    import localization.modes as modes
    import localization.semi_supervised as semi_supervised

    for name in modes.__all__:
        assert getattr(modes, name) is getattr(cluster, name)
    assert semi_supervised.LocalModeClustering is cluster.LocalModeClustering
    assert set(modes.__all__) < set(cluster.__all__)

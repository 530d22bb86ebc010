"""Embeddings as localization: LLE, asymmetric MDS, triplet and ordinal embedding.

Oracles: scikit-learn's LLE and barycenter graph, numpy's SVD (Eckart–Young), finite
differences, SPEC identity 8, a planted configuration; plus bad input, thread-count
invariance, pickling and scikit-learn's estimator checks.
"""

import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.spatial import procrustes
from threadpoolctl import threadpool_limits

from localization import AsymmetricMDS, Balloon, LocallyLinearEmbedding, OrdinalEmbedding, SamplePoint, TripletEmbedding, _core, kernel_matrix
from localization.datasets import load_fashion_mnist
from localization.embedding import _softmax_exact, _Target, _KernelAffinity, triplet_loss
from localization.engine import bind
from localization.metrics import knn_accuracy, trustworthiness


def swiss(n=400, seed=0):
    rng = np.random.default_rng(seed)
    t = 1.5 * np.pi * (1 + 2 * rng.random(n))
    return np.c_[t * np.cos(t), 10 * rng.random(n), t * np.sin(t)] + 0.05 * rng.standard_normal((n, 3))


def best_rank(K, q):
    U, s, Vt = np.linalg.svd(K)
    return (U[:, :q] * s[:q]) @ Vt[:q]


def same_up_to_sign(a, b, atol):
    signs = np.sign(np.sum(a * b, axis=0))
    np.testing.assert_allclose(a * signs, b, atol=atol)


# ----------------------------------------------------------------------------- LLE


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_lle_matches_scikit_learn_dense(dtype):
    from sklearn.manifold import LocallyLinearEmbedding as SkLLE
    from sklearn.manifold._locally_linear import barycenter_kneighbors_graph

    X = swiss(400).astype(dtype)
    ours = LocallyLinearEmbedding(n_neighbors=10, n_components=2, eigen_solver="dense").fit(X)
    sk = SkLLE(n_neighbors=10, n_components=2, eigen_solver="dense", method="standard").fit(X.astype(np.float64))
    tol = 1e-6 if dtype == np.float64 else 1e-4
    same_up_to_sign(ours.embedding_, sk.embedding_, tol)
    np.testing.assert_allclose(ours.reconstruction_error_, sk.reconstruction_error_, rtol=1e-6 if dtype == np.float64 else 1e-3)
    # the local kernel: hollow, rows sum to one, the same as scikit-learn's barycenter graph
    W = ours.weights_
    assert sp.issparse(W) and W.shape == (400, 400)
    np.testing.assert_allclose(np.asarray(W.sum(axis=1)).ravel(), 1.0, atol=1e-12)
    assert np.all(W.diagonal() == 0) and np.all(np.diff(W.indptr) == 10)
    Wsk = barycenter_kneighbors_graph(X.astype(np.float64), 10, reg=1e-3)
    np.testing.assert_allclose(W.toarray(), Wsk.toarray(), atol=1e-9 if dtype == np.float64 else 1e-3)
    # reconstruction of X by its neighbours, as scikit-learn's weights do
    Xd = X.astype(np.float64)
    np.testing.assert_allclose(W @ Xd, Wsk @ Xd, atol=1e-8 if dtype == np.float64 else 1e-3)
    Xn = swiss(30, seed=1).astype(dtype)
    signs = np.sign(np.sum(ours.embedding_ * sk.embedding_, axis=0))
    np.testing.assert_allclose(ours.transform(Xn) * signs, sk.transform(Xn.astype(np.float64)), atol=10 * tol)


def test_lle_sparse_solver_equals_dense():
    X = swiss(900, seed=3)
    dense = LocallyLinearEmbedding(n_neighbors=12, n_components=3, eigen_solver="dense").fit(X)
    arp = LocallyLinearEmbedding(n_neighbors=12, n_components=3, eigen_solver="arpack", random_state=0).fit(X)
    same_up_to_sign(arp.embedding_, dense.embedding_, 1e-6)
    np.testing.assert_allclose(arp.reconstruction_error_, dense.reconstruction_error_, rtol=1e-8)
    one = LocallyLinearEmbedding(n_neighbors=12, n_components=3, eigen_solver="arpack", random_state=0, n_jobs=1).fit(X)
    np.testing.assert_array_equal(one.weights_.toarray(), arp.weights_.toarray())


def test_lle_sparse_solver_refuses_a_disconnected_graph():
    # Two far clusters: the grounded I − W is only nearly singular in floating point, so
    # without a check the sparse path would return a wrong subspace instead of an error.
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(40, 3)), rng.normal(size=(40, 3)) + 100.0])
    lle = LocallyLinearEmbedding(n_neighbors=5, eigen_solver="arpack", random_state=0)
    with pytest.raises(ValueError, match="disconnected") as info:
        lle.fit(X)
    assert info.value.parameter == "n_neighbors"
    assert not hasattr(lle, "embedding_")
    LocallyLinearEmbedding(n_neighbors=5, eigen_solver="dense").fit(X)  # the dense path still answers


def test_lle_bad_input():
    X = swiss(50)
    with pytest.raises(ValueError, match="n_neighbors"):
        LocallyLinearEmbedding(n_neighbors=50).fit(X)
    with pytest.raises(ValueError, match="n_components"):
        LocallyLinearEmbedding(n_components=50).fit(X)
    with pytest.raises(ValueError, match="n_components"):
        LocallyLinearEmbedding(n_components=4).fit(X)  # more than the 3 features
    with pytest.raises(ValueError, match="reg"):
        LocallyLinearEmbedding(reg=-1.0).fit(X)
    with pytest.raises(ValueError, match="eigen_solver"):
        LocallyLinearEmbedding(eigen_solver="lobpcg").fit(X)
    for bad in (np.nan, np.inf):
        Xb = X.copy()
        Xb[3, 1] = bad
        with pytest.raises(ValueError, match="NaN|infinity"):
            LocallyLinearEmbedding().fit(Xb)
    # all neighbours coincide with the point and no regularisation: a clear error, no panic
    with pytest.raises(ValueError, match="reg"):
        LocallyLinearEmbedding(n_neighbors=2, n_components=1, reg=0.0).fit(np.zeros((6, 2)))


# ----------------------------------------------------------------------------- asymmetric MDS, Frobenius


def test_frobenius_amds_is_the_best_rank_q_approximation():
    rng = np.random.default_rng(0)
    K = rng.random((60, 60)) * (rng.random((60, 60)) < 0.3)  # sparse-ish, asymmetric
    for q in (1, 3, 7):
        m = AsymmetricMDS(n_components=q, affinity="precomputed").fit(K)
        want = best_rank(K, q)
        got = m.embedding_ @ m.key_embedding_.T
        assert np.linalg.norm(got - want) <= 1e-8 * np.linalg.norm(want)
        np.testing.assert_allclose(m.singular_values_, np.linalg.svd(K, compute_uv=False)[:q], rtol=1e-12)
        np.testing.assert_allclose(m.stress_, np.linalg.norm(K - want), rtol=1e-8)
        # query and key coordinates share the scale S^½
        np.testing.assert_allclose(np.linalg.norm(m.embedding_, axis=0), np.linalg.norm(m.key_embedding_, axis=0), rtol=1e-10)
        s = AsymmetricMDS(n_components=q, affinity="precomputed", random_state=0).fit(sp.csr_matrix(K))
        np.testing.assert_allclose(s.embedding_ @ s.key_embedding_.T, got, atol=1e-10 * np.abs(want).max())
        np.testing.assert_allclose(s.stress_, m.stress_, rtol=1e-8)


@pytest.mark.parametrize("kernel,bandwidth,n_neighbors", [
    ("gaussian", 0.3, None), ("epanechnikov", 0.5, None), ("gaussian", Balloon(8), None),
    ("exponential", SamplePoint(6), None), ("knn", 1.0, 7),
])
def test_frobenius_amds_of_a_kernel_never_forms_the_matrix(kernel, bandwidth, n_neighbors):
    X = np.random.default_rng(1).random((150, 3))
    m = AsymmetricMDS(n_components=3, kernel=kernel, bandwidth=bandwidth, n_neighbors=n_neighbors, random_state=0).fit(X)
    K = kernel_matrix(X, X, kernel=kernel, bandwidth=bandwidth, n_neighbors=n_neighbors)
    want = best_rank(K, 3)
    assert np.linalg.norm(m.embedding_ @ m.key_embedding_.T - want) <= 1e-8 * np.linalg.norm(want)
    np.testing.assert_allclose(m.stress_, np.linalg.norm(K - want), rtol=1e-6)
    # least-squares query coordinates of the fitted items are their own
    np.testing.assert_allclose(m.transform(X), m.embedding_, atol=1e-8 * np.abs(m.embedding_).max())
    if isinstance(bandwidth, (Balloon, SamplePoint)) or kernel == "knn":
        assert np.abs(K - K.T).max() > 0.1  # the asymmetric case is exercised


def test_kernel_affinity_products_and_transpose():
    X = np.random.default_rng(2).random((80, 2))
    V = np.random.default_rng(3).standard_normal((80, 4))
    w = np.random.default_rng(4).random(80)
    for bw in (0.4, Balloon(5), SamplePoint(5)):
        aff = _KernelAffinity(bind("gaussian", bw, X), None)
        K = kernel_matrix(X, X, kernel="gaussian", bandwidth=bw)
        np.testing.assert_allclose(aff.matmat(V, w), K @ (w[:, None] * V), atol=1e-12)
        np.testing.assert_allclose(aff.rmatmat(V, w), K.T @ (w[:, None] * V), atol=1e-12)
        np.testing.assert_allclose(aff.frobenius2(), np.sum(K * K), rtol=1e-12)


# ----------------------------------------------------------------------------- asymmetric MDS, softmax


def softmax_rows(S):
    E = np.exp(S - S.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


def mean_kl(P, Q):
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.mean(np.sum(np.where(P > 0, P * np.log(P / Q), 0.0), axis=1)))


@pytest.mark.parametrize("kind", ["dense", "sparse", "kernel"])
def test_softmax_gradient_equals_finite_differences(kind):
    rng = np.random.default_rng(5)
    n, q = 25, 3
    X = rng.random((n, 2))
    if kind == "kernel":
        target = _Target(None, _KernelAffinity(bind("gaussian", Balloon(5), X), None))
    else:
        A = rng.random((n, n)) * (rng.random((n, n)) < 0.4)
        A[0] = 0.0  # an empty row: weight 0
        target = _Target(sp.csr_matrix(A) if kind == "sparse" else A, None)
    H = target.entropy_terms()
    w = np.where(target.mass > 0, 1.0 + rng.random(n), 0.0)
    Z1, Z2 = rng.standard_normal((n, q)), rng.standard_normal((n, q))
    loss, g1, g2 = _softmax_exact(Z1, Z2, target, H, w, None)
    if kind != "kernel":
        P = target.P.toarray() if sp.issparse(target.P) else target.P
        np.testing.assert_allclose(loss, np.sum(w * np.sum(np.where(P > 0, P * np.log(np.where(P > 0, P, 1) / softmax_rows(Z1 @ Z2.T)), 0), 1)), rtol=1e-12)
    h = 1e-6
    for Z, G in ((Z1, g1), (Z2, g2)):
        for idx in [(1, 0), (7, 2), (n - 1, 1)]:
            Z[idx] += h
            up = _softmax_exact(Z1, Z2, target, H, w, None)[0]
            Z[idx] -= 2 * h
            down = _softmax_exact(Z1, Z2, target, H, w, None)[0]
            Z[idx] += h
            assert abs((up - down) / (2 * h) - G[idx]) < 1e-6 * max(1.0, abs(G[idx]))


def test_softmax_amds_recovers_planted_row_distributions():
    rng = np.random.default_rng(6)
    n, q = 80, 3
    P = softmax_rows(rng.standard_normal((n, q)) @ rng.standard_normal((n, q)).T * 1.5)
    m = AsymmetricMDS(n_components=q, affinity="precomputed", loss="softmax", random_state=0).fit(P)
    Q = softmax_rows(m.embedding_ @ m.key_embedding_.T)
    assert mean_kl(P, Q) < 1e-3
    np.testing.assert_allclose(m.loss_, mean_kl(P, Q), rtol=1e-6, atol=1e-12)
    assert m.n_iter_ > 0


def test_sampled_normalizer_is_exact_on_full_rows_and_thread_independent():
    rng = np.random.default_rng(7)
    n, q = 40, 2
    P = softmax_rows(rng.standard_normal((n, q)) @ rng.standard_normal((n, q)).T)
    Z1, Z2 = rng.standard_normal((n, q)), rng.standard_normal((n, q))
    w = np.full(n, 1.0 / n)
    Ps = sp.csr_matrix(P)
    target = _Target(Ps, None)
    loss, g1, g2 = _softmax_exact(Z1, Z2, target, target.entropy_terms(), w, None)
    # every column is in every row's support: the sampled estimate is the exact loss
    ls, g = _core.softmax_sampled_loss_grad(Z1, Z2, Ps.indptr.astype(np.int64), Ps.indices.astype(np.int64), Ps.data, w, np.ones(n), n_negative=5)
    np.testing.assert_allclose(ls, loss, rtol=1e-12)
    np.testing.assert_allclose(g, np.c_[g1, g2], atol=1e-12)
    A = sp.random(200, 200, density=0.05, random_state=1, format="csr")
    kw = dict(n_components=3, affinity="precomputed", loss="softmax", normalizer="sampled", max_iter=40, random_state=1)
    a = AsymmetricMDS(**kw).fit(A)
    b = AsymmetricMDS(n_jobs=1, **kw).fit(A)
    np.testing.assert_array_equal(a.embedding_, b.embedding_)
    np.testing.assert_array_equal(a.key_embedding_, b.key_embedding_)
    assert a.loss_curve_[-1] < a.loss_curve_[0]


@pytest.mark.slow
def test_sampled_normalizer_approaches_the_exact_optimum():
    rng = np.random.default_rng(7)
    A = rng.random((300, 300)) * (rng.random((300, 300)) < 0.05)
    kw = dict(n_components=4, affinity="precomputed", loss="softmax", random_state=1)
    exact = AsymmetricMDS(normalizer="exact", **kw).fit(sp.csr_matrix(A))
    samp = AsymmetricMDS(normalizer="sampled", max_iter=1000, learning_rate=0.1, **kw).fit(sp.csr_matrix(A))
    P = A / A.sum(axis=1, keepdims=True)
    kl_exact = mean_kl(P, softmax_rows(exact.embedding_ @ exact.key_embedding_.T))
    kl_samp = mean_kl(P, softmax_rows(samp.embedding_ @ samp.key_embedding_.T))
    kl_uniform = mean_kl(P, np.full_like(P, 1.0 / 300))
    assert kl_exact < kl_samp < kl_exact + 0.1 * (kl_uniform - kl_exact)


def test_softmax_transform_gives_the_best_queries_for_the_fitted_keys():
    X = np.random.default_rng(8).random((80, 2))
    m = AsymmetricMDS(n_components=2, kernel="gaussian", bandwidth=Balloon(8), loss="softmax", max_iter=300, random_state=0).fit(X)
    Z = m.transform(X[:20])
    P = kernel_matrix(X[:20], X, kernel="gaussian", bandwidth=Balloon(8))
    P /= P.sum(axis=1, keepdims=True)
    kl = lambda Q: np.sum(P * np.log(P / softmax_rows(Q @ m.key_embedding_.T)), axis=1)  # noqa: E731
    # convex in the query for fixed keys: at least as good as the jointly fitted queries
    assert np.all(kl(Z) <= kl(m.embedding_[:20]) + 1e-10)
    np.testing.assert_allclose(Z, m.embedding_[:20], rtol=0.05, atol=0.05)
    # and stationary: the gradient Σ_j (Q_ij − P_ij) z₂_j vanishes
    grad = (softmax_rows(Z @ m.key_embedding_.T) - P) @ m.key_embedding_
    assert np.abs(grad).max() < 1e-5


def test_amds_bad_input():
    rng = np.random.default_rng(9)
    with pytest.raises(ValueError, match="square"):
        AsymmetricMDS(affinity="precomputed").fit(rng.random((5, 4)))
    with pytest.raises(ValueError, match="non-negative"):
        AsymmetricMDS(affinity="precomputed").fit(rng.random((5, 5)) - 0.5)
    for bad in (np.nan, np.inf):
        K = rng.random((5, 5))
        K[1, 2] = bad
        with pytest.raises(ValueError, match="NaN|infinity"):
            AsymmetricMDS(affinity="precomputed").fit(K)
        with pytest.raises(ValueError, match="NaN|infinity"):
            AsymmetricMDS(affinity="precomputed").fit(sp.csr_matrix(K))
    with pytest.raises(ValueError, match="n_components"):
        AsymmetricMDS(n_components=5, affinity="precomputed").fit(rng.random((5, 5)))
    with pytest.raises(ValueError, match="n_neighbors"):
        AsymmetricMDS(kernel="knn", n_neighbors=30).fit(rng.random((10, 2)))
    with pytest.raises(ValueError, match="bandwidth"):
        AsymmetricMDS(bandwidth=0.0).fit(rng.random((10, 2)))
    with pytest.raises(ValueError, match="loss"):
        AsymmetricMDS(loss="stress").fit(rng.random((10, 2)))
    with pytest.raises(ValueError, match="sampled"):
        AsymmetricMDS(loss="softmax", normalizer="sampled").fit(rng.random((10, 2)))
    with pytest.raises(ValueError, match="zero everywhere"):
        AsymmetricMDS(loss="softmax", affinity="precomputed").fit(np.zeros((5, 5)))
    with pytest.raises(ValueError, match="transform"):
        AsymmetricMDS(affinity="precomputed").fit(rng.random((5, 5))).transform(rng.random((2, 5)))


# ----------------------------------------------------------------------------- triplets


@pytest.mark.parametrize("loss", ["trimap", "linear", "ste", "tste"])
def test_triplet_gradient_equals_finite_differences(loss):
    rng = np.random.default_rng(10)
    Y = rng.standard_normal((15, 2))
    T = np.array([rng.permutation(15)[:3] for _ in range(80)])
    w = rng.random(80)
    value, grad = triplet_loss(Y, T, w, loss=loss, alpha=1.5)
    one = triplet_loss(Y, T, w, loss=loss, alpha=1.5, n_jobs=1)
    assert one[0] == value and np.array_equal(one[1], grad)
    h = 1e-6
    for idx in [(0, 0), (5, 1), (14, 0)]:
        Y[idx] += h
        up = triplet_loss(Y, T, w, loss=loss, alpha=1.5)[0]
        Y[idx] -= 2 * h
        down = triplet_loss(Y, T, w, loss=loss, alpha=1.5)[0]
        Y[idx] += h
        assert abs((up - down) / (2 * h) - grad[idx]) < 1e-6 * max(1.0, abs(grad[idx]))


def test_identity_8_ternary_mds_with_linear_h():
    """SPEC §9.8: Σ_ijk K(i,j,k)(d²_ij − d²_ik) = Σ_ij (2 S_ij − N) d²_ij, S_ij = Σ_k K(i,j,k),
    for the contrastive kernel K = s_ij / (s_ij + s_ik), over all index triples."""
    rng = np.random.default_rng(11)
    N = 9
    X, Y = rng.random((N, 4)), rng.standard_normal((N, 2))
    s = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / 0.3)
    i, j, k = np.meshgrid(np.arange(N), np.arange(N), np.arange(N), indexing="ij")
    T = np.c_[i.ravel(), j.ravel(), k.ravel()]
    K = s[T[:, 0], T[:, 1]] / (s[T[:, 0], T[:, 1]] + s[T[:, 0], T[:, 2]])
    lhs, _ = triplet_loss(Y, T, K, loss="linear")
    S = K.reshape(N, N, N).sum(axis=2)
    D2 = ((Y[:, None] - Y[None]) ** 2).sum(-1)
    rhs = np.sum((2 * S - N) * D2)
    assert abs(lhs - rhs) <= 1e-10 * np.sum(np.abs(2 * S - N) * D2)


@pytest.mark.parametrize("n", [300, 1200])  # principal coordinates from the Gram matrix, then from the covariance
def test_triplet_embedding_does_not_depend_on_the_blas_thread_count(n):
    # OpenBLAS's single-threaded products round differently from its threaded ones: a
    # projection left threaded changed the triplets and the embedding under threadpool_limits.
    X, _ = load_fashion_mnist(n=n)
    a = TripletEmbedding(random_state=3, max_iter=30).fit(X)
    with threadpool_limits(1):
        b = TripletEmbedding(random_state=3, max_iter=30).fit(X)
    np.testing.assert_array_equal(a.triplets_, b.triplets_)
    np.testing.assert_array_equal(a.embedding_, b.embedding_)


def test_triplet_embedding_is_reproducible_for_any_thread_count():
    X, _ = load_fashion_mnist(n=300)
    a = TripletEmbedding(random_state=3, max_iter=60).fit(X)
    b = TripletEmbedding(random_state=3, max_iter=60, n_jobs=1).fit(X)
    np.testing.assert_array_equal(a.triplets_, b.triplets_)
    np.testing.assert_array_equal(a.triplet_weights_, b.triplet_weights_)
    np.testing.assert_array_equal(a.embedding_, b.embedding_)
    assert a.triplets_.shape == (300 * (12 * 4 + 3), 3)
    # anchor by anchor, each anchor's 48 near triplets (runs of 4 sharing j), then its 3 random ones
    np.testing.assert_array_equal(a.triplets_[:, 0], np.repeat(np.arange(300), 51))
    near = a.triplets_.reshape(300, 51, 3)[:, :48, 1].reshape(300, 12, 4)
    assert np.all(near == near[:, :, :1])
    assert np.all(a.triplet_weights_ >= 0)
    c = TripletEmbedding(random_state=4, max_iter=60).fit(X)
    assert not np.array_equal(a.triplets_, c.triplets_)
    assert a.loss_curve_[-1] < a.loss_curve_[0]


def test_triplet_embedding_separates_fashion_classes():
    X, y = load_fashion_mnist(n=1000)
    emb = TripletEmbedding(random_state=0).fit(X)
    assert trustworthiness(X, emb.embedding_, n_neighbors=10) > 0.95
    assert knn_accuracy(emb.embedding_, y, n_neighbors=10) > 0.65


def test_ordinal_embedding_recovers_a_planted_configuration():
    rng = np.random.default_rng(12)
    P = rng.random((30, 2))
    D = ((P[:, None] - P[None]) ** 2).sum(-1)
    T = np.array([rng.permutation(30)[:3] for _ in range(4000)])
    T = np.where((D[T[:, 0], T[:, 1]] < D[T[:, 0], T[:, 2]])[:, None], T, T[:, [0, 2, 1]])  # noiseless answers
    for loss in ("tste", "ste"):
        emb = OrdinalEmbedding(loss=loss, random_state=0).fit(T)
        assert emb.embedding_.shape == (30, 2)
        _, _, disparity = procrustes(P, emb.embedding_)
        assert disparity < 0.05, (loss, disparity)
        assert emb.satisfied_ > 0.95


def test_triplet_bad_input():
    X = np.random.default_rng(13).random((40, 3))
    with pytest.raises(ValueError, match="n_components"):
        TripletEmbedding(n_components=40).fit(X)
    with pytest.raises(ValueError, match="n_inliers"):
        TripletEmbedding(n_inliers=0).fit(X)
    with pytest.raises(ValueError, match="learning_rate"):
        TripletEmbedding(learning_rate=-1).fit(X)
    with pytest.raises(ValueError, match="init"):
        TripletEmbedding(init=np.zeros((3, 2))).fit(X)
    Xb = X.copy()
    Xb[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        TripletEmbedding().fit(Xb)
    with pytest.raises(ValueError, match="different"):
        OrdinalEmbedding().fit([[0, 1, 1], [1, 2, 0]])
    with pytest.raises(ValueError, match="shape"):
        OrdinalEmbedding().fit([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="negative"):
        OrdinalEmbedding().fit([[0, 1, -2]])
    with pytest.raises(ValueError, match="n_samples"):
        OrdinalEmbedding().fit([[0, 1, 5]], n_samples=3)
    with pytest.raises(ValueError, match="n_components"):
        OrdinalEmbedding(n_components=3).fit([[0, 1, 2]])
    with pytest.raises(ValueError, match="triplets"):
        triplet_loss(np.zeros((3, 2)), [[0, 1, 3]])
    with pytest.warns(UserWarning, match="n_inliers"):
        TripletEmbedding(max_iter=5).fit(X[:10])


def test_progress_callback_errors_stop_the_fit():
    rng = np.random.default_rng(14)
    Y0 = rng.standard_normal((20, 2))
    T = np.array([rng.permutation(20)[:3] for _ in range(50)])
    seen = []

    def stop(done, total):
        seen.append((done, total))
        raise KeyboardInterrupt

    # The watcher reports progress while the fit runs; its error stops the fit between two
    # iterations, long before the million asked for, and is the one raised.
    with pytest.raises(KeyboardInterrupt):
        _core.triplet_optimize(Y0, T, np.ones(50), n_iter=10**6, progress=stop)
    assert len(seen) == 1 and seen[0][1] == 10**6 and seen[0][0] < 10**6
    seen.clear()
    with pytest.raises(KeyboardInterrupt):  # a fit shorter than one watch period: raised at the end
        _core.triplet_optimize(Y0, T, np.ones(50), n_iter=3, progress=stop)
    assert len(seen) == 1 and seen[0][1] == 3
    TripletEmbedding(max_iter=20, verbose=True, random_state=0).fit(rng.random((40, 3)))


def test_fitted_estimators_pickle():
    X = swiss(120)
    for est in (LocallyLinearEmbedding(), AsymmetricMDS(kernel="knn", n_neighbors=5), TripletEmbedding(max_iter=10, random_state=0)):
        est.fit(X)
        clone = pickle.loads(pickle.dumps(est))
        np.testing.assert_array_equal(clone.embedding_, est.embedding_)
        if hasattr(est, "transform") and not isinstance(est, TripletEmbedding):
            np.testing.assert_allclose(clone.transform(X[:5]), est.transform(X[:5]))


# ----------------------------------------------------------------------------- docstring examples


def test_docstring_examples_run():
    import doctest

    from localization import embedding, metrics, text

    for module in (embedding, metrics, text):
        failed, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert failed == 0, module.__name__


# ----------------------------------------------------------------------------- native layer fuzz

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 12), q=st.integers(1, 3), m=st.integers(0, 20), lo=st.integers(-3, 0), hi=st.integers(1, 15),
       k=st.integers(0, 14), seed=st.integers(0, 2**32), bad=st.sampled_from([None, np.nan, np.inf, -1.0]))
def test_native_embedding_entry_points_never_panic(n, q, m, lo, hi, k, seed, bad):
    """Arbitrary sizes, out-of-range indices, malformed CSR and bad numbers: a result or a
    ValueError/TypeError, never a panic (PanicException is not an Exception)."""
    rng = np.random.default_rng(seed)
    Y = rng.standard_normal((n, q))
    X = rng.standard_normal((n, 3))
    T = rng.integers(lo, hi, (m, 3))
    w = rng.random(m)
    if bad is not None and m:
        w[0] = bad
    calls = [
        lambda: _core.triplet_loss_grad(Y, T, w, loss="tste", alpha=1.0),
        lambda: _core.triplet_optimize(Y, T, w, n_iter=3),
        lambda: _core.lle_weights(X, k, 1e-3),
        lambda: _core.lle_weights(X, k, 1e-3, queries=Y),
        lambda: _core.trustworthiness_penalty(X, np.arange(n, dtype=np.int64), rng.integers(lo, hi, (n, max(k, 1)))),
        lambda: _core.trimap_triplets(X, rng.integers(lo, hi, (n, max(k, 1))), np.abs(rng.standard_normal((n, max(k, 1)))), n_inliers=2, n_outliers=2),
        lambda: _core.softmax_sampled_loss_grad(Y, Y, np.sort(rng.integers(lo, hi, n + 1)), rng.integers(lo, hi, m), w, np.ones(n), np.ones(n)),
        lambda: _core.softmax_fit_sampled(Y, Y, np.arange(n + 1, dtype=np.int64), np.arange(n, dtype=np.int64), np.ones(n), np.ones(n), w[:n] if len(w) >= n else np.ones(n), n_iter=2),
    ]
    for call in calls:
        try:
            call()
        except (ValueError, TypeError):
            pass


def test_failed_refit_keeps_the_previous_fit():
    """A re-fit that fails late (after the input checks reset n_features_in_) leaves the
    previous fit whole."""
    X = swiss(80)
    rng = np.random.default_rng(3)
    wide = rng.standard_normal((60, 5))
    cases = [
        (LocallyLinearEmbedding(n_neighbors=6), {}, wide[:6]),  # n_neighbors ≥ n_samples
        (TripletEmbedding(max_iter=30, random_state=0), {"learning_rate": 1e250}, wide),
    ]
    for est, params, bad in cases:
        Y = est.fit(X).embedding_.copy()
        est.set_params(**params)
        with pytest.raises(ValueError):
            est.fit(bad)
        np.testing.assert_array_equal(est.embedding_, Y)
        assert est.n_features_in_ == 3

import pickle

import numpy as np
import pytest
from sklearn.neighbors import NearestNeighbors as SKNN

from localization import NearestNeighbors


@pytest.mark.parametrize("d", [2, 8, 40])
@pytest.mark.parametrize("algorithm", ["auto", "kd_tree", "brute"])
def test_kneighbors_equal_scikit_learn(rng, d, algorithm):
    X = rng.random((1500, d))
    Q = rng.random((200, d))
    sk = SKNN(n_neighbors=7).fit(X)
    ours = NearestNeighbors(n_neighbors=7, algorithm=algorithm).fit(X)
    ds, is_ = sk.kneighbors(Q)
    do, io = ours.kneighbors(Q)
    np.testing.assert_array_equal(io, is_)
    np.testing.assert_allclose(do, ds, rtol=1e-12)
    # X=None: points are not their own neighbours
    np.testing.assert_array_equal(ours.kneighbors(n_neighbors=3)[1], sk.kneighbors(n_neighbors=3)[1])


def test_tree_search_answers_do_not_depend_on_the_order_of_the_queries(rng):
    # The tree searches its queries in the order of the subtrees they reach, in segments:
    # more queries than a segment, shuffled or sorted, all with the answers of brute force.
    X = rng.standard_normal((30_000, 2))
    Q = X[rng.permutation(20_000)] + 1e-3 * rng.standard_normal((20_000, 2))
    tree = NearestNeighbors(n_neighbors=3, algorithm="kd_tree").fit(X)
    d, i = tree.kneighbors(Q)
    db, ib = NearestNeighbors(n_neighbors=3, algorithm="brute").fit(X).kneighbors(Q)
    np.testing.assert_array_equal(i, ib)
    np.testing.assert_allclose(d, db, rtol=1e-12)
    order = np.lexsort(Q.T)
    ds, is_ = tree.kneighbors(Q[order])
    np.testing.assert_array_equal(is_, i[order])
    np.testing.assert_array_equal(ds, d[order])


def test_radius_neighbors_equal_scikit_learn(rng):
    X = rng.random((800, 3))
    Q = rng.random((50, 3))
    sd, si = SKNN(radius=0.2).fit(X).radius_neighbors(Q, sort_results=True)
    od, oi = NearestNeighbors(radius=0.2).fit(X).radius_neighbors(Q, sort_results=True)
    for a, b, c, e in zip(oi, si, od, sd):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(c, e, rtol=1e-12)


def test_duplicates_and_pickle():
    X = np.zeros((10, 2))
    nn = NearestNeighbors(n_neighbors=3).fit(X)
    d, i = nn.kneighbors([[0.0, 0.0]])
    assert i.tolist() == [[0, 1, 2]] and np.all(d == 0)
    again = pickle.loads(pickle.dumps(nn))
    assert again.kneighbors([[1.0, 1.0]])[1].tolist() == [[0, 1, 2]]
    with pytest.raises(ValueError, match="n_neighbors"):
        nn.kneighbors([[0.0, 0.0]], n_neighbors=11)


# --- drop-in parity: radius forms, graphs, sparse input ---------------------------------


@pytest.mark.parametrize("algorithm", ["kd_tree", "brute"])
def test_per_query_radius_infinite_radius_and_x_none_equal_scikit_learn(rng, algorithm):
    X = rng.random((300, 3))
    Q = rng.random((40, 3))
    radius = rng.random(40) * 0.4
    radius[[3, 7]] = [np.inf, 0.0]
    sk = SKNN(algorithm="kd_tree").fit(X)  # scikit-learn's brute force takes no per-query radii
    ours = NearestNeighbors(algorithm=algorithm).fit(X)
    for kwargs in (dict(X=Q, radius=radius), dict(X=Q, radius=np.inf), dict(radius=0.2), dict(radius=np.full(300, 0.25))):
        sd, si = sk.radius_neighbors(sort_results=True, **kwargs)
        od, oi = ours.radius_neighbors(sort_results=True, **kwargs)
        assert len(oi) == len(si) and oi.dtype == object
        for a, b, c, e in zip(oi, si, od, sd):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(c, e, rtol=1e-12)
    assert len(NearestNeighbors(radius=np.inf).fit(X).radius_neighbors(Q[:1])[1][0]) == 300
    # Unsorted results come in increasing index, as scikit-learn's brute force.
    bd, bi = SKNN(algorithm="brute").fit(X).radius_neighbors(Q, radius=0.3)
    od, oi = ours.radius_neighbors(Q, radius=0.3)
    for a, b, c, e in zip(oi, bi, od, bd):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(c, e, rtol=1e-12)


def test_radius_arguments_are_checked():
    nn = NearestNeighbors().fit(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="return_distance must be True"):
        nn.radius_neighbors([[0.0, 0.0]], sort_results=True, return_distance=False)
    for bad in (-1.0, np.nan, [0.5, 0.5], np.array([[1.0]]), [1.0, -1.0]):
        with pytest.raises(ValueError, match="radius"):
            nn.radius_neighbors([[0.0, 0.0]] * (2 if np.ndim(bad) == 1 and len(bad) == 2 and bad[1] < 0 else 1), radius=bad)
    with pytest.raises(ValueError, match="mode"):
        nn.kneighbors_graph(mode="weights")


@pytest.mark.parametrize("mode", ["connectivity", "distance"])
def test_graphs_equal_scikit_learn(rng, mode):
    X = rng.random((200, 2))
    Q = rng.random((30, 2))
    sk = SKNN(n_neighbors=4, radius=0.15).fit(X)
    ours = NearestNeighbors(n_neighbors=4, radius=0.15).fit(X)
    for A, B in [
        (ours.kneighbors_graph(Q, mode=mode), sk.kneighbors_graph(Q, mode=mode)),
        (ours.kneighbors_graph(None, 3, mode=mode), sk.kneighbors_graph(None, 3, mode=mode)),
        (ours.radius_neighbors_graph(Q, mode=mode), sk.radius_neighbors_graph(Q, mode=mode)),
        (ours.radius_neighbors_graph(Q, mode=mode, sort_results=True), sk.radius_neighbors_graph(Q, mode=mode, sort_results=True)),
        (ours.radius_neighbors_graph(None, 0.1, mode=mode), sk.radius_neighbors_graph(None, 0.1, mode=mode)),
    ]:
        assert A.format == "csr" and A.shape == B.shape
        np.testing.assert_allclose(A.toarray(), B.toarray(), rtol=1e-12)


def test_sparse_input_is_densified_and_matches_scikit_learn(rng):
    import scipy.sparse as sp

    X = rng.random((150, 6)) * (rng.random((150, 6)) > 0.3)  # no two rows alike (no distance ties)
    Q = X[:20] + 0.01 * (X[:20] > 0)
    sk = SKNN(n_neighbors=5).fit(sp.csr_matrix(X))
    for fmt in ("csr", "csc", "coo"):
        ours = NearestNeighbors(n_neighbors=5).fit(sp.csr_matrix(X).asformat(fmt))
        np.testing.assert_array_equal(ours.kneighbors(sp.csr_matrix(Q).asformat(fmt))[1], sk.kneighbors(sp.csr_matrix(Q))[1])
        np.testing.assert_array_equal(ours.kneighbors(Q)[1], sk.kneighbors(Q)[1])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_low_rank_high_dimensional_data_equals_direct_differences(rng, dtype, offset):
    # n >= 2048 and d >= 64 with low-rank structure: the brute force skips most exact
    # distances by a projected lower bound; the neighbours must still be those that
    # direct differences (in float64) give, with duplicates (ties at distance 0) included.
    n, d = 2600, 96
    X = rng.standard_normal((n, 5)) @ rng.standard_normal((5, d)) + 0.05 * rng.standard_normal((n, d)) + offset
    X[::13] = X[5::13][: len(X[::13])]
    X = X.astype(dtype)
    Q = X[:150]
    dist, ind = NearestNeighbors(n_neighbors=8, algorithm="brute").fit(X).kneighbors(Q)
    X64, Q64 = X.astype(np.float64), Q.astype(np.float64)
    exact = ((Q64[:, None, :] - X64[None, :, :]) ** 2).sum(-1)
    order = np.lexsort((np.broadcast_to(np.arange(n), exact.shape), exact), axis=1)[:, :8]
    got = np.take_along_axis(exact, ind, 1)
    want = np.take_along_axis(exact, order, 1)
    # Same distances up to the rounding of the data type (ties may swap equal-distance indices).
    tol = 1e-12 if dtype == np.float64 else 2e-4
    atol = tol * np.abs(X64 - X64.mean(0)).max() ** 2
    np.testing.assert_allclose(got, want, rtol=tol, atol=atol)
    np.testing.assert_allclose(dist.astype(np.float64) ** 2, want, rtol=tol, atol=atol)

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


def test_radius_neighbors_equal_scikit_learn(rng):
    X = rng.random((800, 3))
    Q = rng.random((50, 3))
    sd, si = SKNN(radius=0.2).fit(X).radius_neighbors(Q, sort_results=True)
    od, oi = NearestNeighbors(radius=0.2).fit(X).radius_neighbors(Q)
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

import pickle

import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier

from localization import LocalizationWarning, LocalModeClassifier, local_mean


@pytest.mark.parametrize("k", [1, 4, 15])
def test_knn_classification_equals_scikit_learn(rng, k):
    X = rng.random((500, 4))
    y = rng.integers(0, 3, 500)
    Q = rng.random((100, 4))
    sk = KNeighborsClassifier(n_neighbors=k).fit(X, y)
    ours = LocalModeClassifier(kernel="knn", n_neighbors=k).fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(Q), sk.predict_proba(Q), atol=1e-12)
    np.testing.assert_array_equal(ours.predict(Q), sk.predict(Q))


def test_proba_is_the_local_mean_of_one_hot_labels(rng):
    X = rng.random((200, 2))
    y = np.array(["a", "b", "c"])[rng.integers(0, 3, 200)]
    Q = rng.random((20, 2))
    clf = LocalModeClassifier(kernel="cosine", bandwidth=0.4).fit(X, y)
    onehot = (y[:, None] == clf.classes_[None]).astype(float)
    np.testing.assert_allclose(clf.predict_proba(Q), local_mean(Q, X, onehot, kernel="cosine", bandwidth=0.4), rtol=1e-12)
    np.testing.assert_allclose(clf.predict_proba(Q).sum(1), 1.0)
    assert pickle.loads(pickle.dumps(clf)).predict(Q).tolist() == clf.predict(Q).tolist()


def test_unreached_queries_fall_back_to_the_prior_with_a_warning():
    clf = LocalModeClassifier(kernel="tophat", bandwidth=0.1).fit([[0.0], [0.05], [1.0]], [0, 0, 1])
    with pytest.warns(LocalizationWarning):
        p = clf.predict_proba([[5.0]])
    np.testing.assert_allclose(p, [[2 / 3, 1 / 3]])

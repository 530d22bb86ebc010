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


# --- drop-in parity with KNeighborsClassifier: leave-one-out, multi-output, sparse -------


@pytest.mark.parametrize("k", [1, 3, 10])
def test_predict_none_is_scikit_learns_leave_one_out(rng, k):
    from sklearn.model_selection import LeaveOneOut, cross_val_score

    X = rng.random((40, 2))
    y = rng.integers(0, 3, 40)
    sk = KNeighborsClassifier(n_neighbors=k).fit(X, y)
    ours = LocalModeClassifier(kernel="knn", n_neighbors=k).fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(None), sk.predict_proba(None), atol=1e-12)
    np.testing.assert_array_equal(ours.predict(None), sk.predict(None))
    assert ours.score(None, y) == pytest.approx(sk.score(None, y))
    # predict(None) is leave-one-out cross-validation without refitting.
    loo = cross_val_score(LocalModeClassifier(kernel="knn", n_neighbors=k), X, y, cv=LeaveOneOut())
    np.testing.assert_array_equal(loo, ours.predict(None) == y)


def test_predict_none_with_more_copies_than_neighbours():
    """A point whose k+1 nearest are all copies of it, itself not among them (ties go by
    index): as scikit-learn, the first copy is dropped, not the last."""
    X = np.array([[0.0], [0.0], [0.0], [5.0], [5.0], [9.0]])
    y = np.array([0, 1, 2, 0, 1, 2])
    sk = KNeighborsClassifier(n_neighbors=1, algorithm="brute").fit(X, y)
    ours = LocalModeClassifier(kernel="knn", n_neighbors=1).fit(X, y)
    np.testing.assert_array_equal(ours.predict(None), sk.predict(None))
    np.testing.assert_array_equal(ours.predict(None), [1, 0, 1, 1, 0, 0])


def test_predict_none_is_the_hollow_kernel_for_any_kernel(rng):
    X = rng.random((60, 2))
    y = rng.integers(0, 2, 60)
    clf = LocalModeClassifier(kernel="gaussian", bandwidth=0.3).fit(X, y)
    onehot = np.eye(2)[y]
    np.testing.assert_allclose(clf.predict_proba(None), local_mean(X, X, onehot, bandwidth=0.3, exclude_self=True), rtol=1e-12)


def test_multi_output_classification_equals_scikit_learn(rng):
    X = rng.random((80, 4))
    Y = np.c_[rng.integers(0, 3, 80), rng.integers(5, 7, 80), np.array(list("xyzw"))[rng.integers(0, 4, 80)]]
    Q = rng.random((25, 4))
    sk = KNeighborsClassifier(n_neighbors=6).fit(X, Y)
    ours = LocalModeClassifier(kernel="knn", n_neighbors=6).fit(X, Y)
    assert ours.outputs_2d_ and len(ours.classes_) == 3
    for a, b in zip(ours.classes_, sk.classes_):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ours.predict(Q), sk.predict(Q))
    np.testing.assert_array_equal(ours.predict(None), sk.predict(None))
    for a, b in zip(ours.predict_proba(Q), sk.predict_proba(Q)):
        np.testing.assert_allclose(a, b, atol=1e-12)
    # Each output alone gives the same answer.
    for o in range(3):
        one = LocalModeClassifier(kernel="knn", n_neighbors=6).fit(X, Y[:, o])
        np.testing.assert_array_equal(one.predict(Q), ours.predict(Q)[:, o])


def test_sparse_input(rng):
    import scipy.sparse as sp

    X = rng.random((60, 5)) * (rng.random((60, 5)) > 0.5)
    y = rng.integers(0, 2, 60)
    sk = KNeighborsClassifier(n_neighbors=4).fit(sp.csr_matrix(X), y)
    ours = LocalModeClassifier(kernel="knn", n_neighbors=4).fit(sp.csr_matrix(X), y)
    np.testing.assert_array_equal(ours.predict(sp.csc_matrix(X[:15])), sk.predict(sp.csr_matrix(X[:15])))
    np.testing.assert_array_equal(ours.predict(X[:15]), sk.predict(X[:15]))

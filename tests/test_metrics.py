"""Embedding quality: trustworthiness equals scikit-learn's, k-NN accuracy equals a
leave-one-out KNeighborsClassifier; bad input."""

import numpy as np
import pytest
from sklearn.manifold import trustworthiness as sk_trustworthiness
from sklearn.neighbors import KNeighborsClassifier

from localization.datasets import load_fashion_mnist
from localization.metrics import knn_accuracy, trustworthiness


@pytest.mark.parametrize("n,d,k", [(200, 3, 5), (300, 40, 10), (150, 20, 1), (201, 2, 50)])
def test_trustworthiness_equals_scikit_learn(n, d, k):
    rng = np.random.default_rng(n + d)
    X = rng.standard_normal((n, d))
    for Y in (X[:, :2] + 0.3 * rng.standard_normal((n, 2)), rng.standard_normal((n, 2))):
        ours = trustworthiness(X, Y, n_neighbors=k)
        assert abs(ours - sk_trustworthiness(X, Y, n_neighbors=k)) < 1e-12
        assert trustworthiness(X, Y, n_neighbors=k, n_jobs=1) == ours


def test_trustworthiness_on_fashion_mnist_float32():
    X, _ = load_fashion_mnist(n=500)
    Y = X @ np.random.default_rng(0).standard_normal((784, 2)).astype(np.float32)
    assert abs(trustworthiness(X, Y, n_neighbors=10) - sk_trustworthiness(X.astype(np.float64), Y.astype(np.float64), n_neighbors=10)) < 1e-12
    # the sampled estimate averages the same terms over a subset of points
    est = trustworthiness(X, Y, n_neighbors=10, sample_size=250, random_state=0)
    assert abs(est - trustworthiness(X, Y, n_neighbors=10)) < 0.02
    assert trustworthiness(X, Y, n_neighbors=10, sample_size=10_000) == trustworthiness(X, Y, n_neighbors=10)


def test_knn_accuracy_equals_leave_one_out_classifier():
    rng = np.random.default_rng(1)
    Y = rng.standard_normal((400, 2))
    y = (Y[:, 0] + 0.5 * rng.standard_normal(400) > 0).astype(int) + 2 * (rng.random(400) < 0.2)
    for k in (1, 4, 10):
        clf = KNeighborsClassifier(n_neighbors=k).fit(Y, y)
        ind = clf.kneighbors(return_distance=False)
        votes = np.zeros((400, 4), int)
        np.add.at(votes, (np.repeat(np.arange(400), k), y[ind].ravel()), 1)
        want = np.mean(clf.classes_[votes.argmax(1)] == y)
        assert knn_accuracy(Y, y, n_neighbors=k) == want
    assert knn_accuracy(Y, np.array(["a", "b"])[y % 2], n_neighbors=5) == knn_accuracy(Y, y % 2, n_neighbors=5)


def test_metrics_bad_input():
    X = np.random.default_rng(2).random((20, 3))
    with pytest.raises(ValueError, match="n_neighbors"):
        trustworthiness(X, X[:, :2], n_neighbors=10)
    with pytest.raises(ValueError, match="rows"):
        trustworthiness(X, X[:10, :2])
    Xb = X.copy()
    Xb[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        trustworthiness(Xb, X[:, :2])
    with pytest.raises(ValueError, match="n_neighbors"):
        knn_accuracy(X, np.zeros(20), n_neighbors=20)
    with pytest.raises(ValueError, match="y"):
        knn_accuracy(X, np.zeros(19))

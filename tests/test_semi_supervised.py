"""LabelPropagation (oracle: scikit-learn) and LocalModeClustering; identity 12."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.datasets import make_blobs, make_moons
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score
from sklearn.semi_supervised import LabelPropagation as SkLabelPropagation

from localization import LocalModeClassifier, kernel_matrix, local_mean
from localization.cluster import LocalModeClustering
from localization.semi_supervised import LabelPropagation


def moons_semi(n=300, labelled=0.08, seed=0):
    X, y = make_moons(n, noise=0.08, random_state=seed)
    rng = np.random.default_rng(seed)
    y_semi = y.copy()
    y_semi[rng.random(n) > labelled] = -1
    # at least one label per moon
    y_semi[np.flatnonzero(y == 0)[0]] = 0
    y_semi[np.flatnonzero(y == 1)[0]] = 1
    return X, y, y_semi


@pytest.mark.parametrize("gamma", [20.0, 5.0])
@pytest.mark.parametrize("tol", [1e-3, 1e-6])
def test_matches_sklearn_rbf(gamma, tol):
    X, y, y_semi = moons_semi()
    sk = SkLabelPropagation(kernel="rbf", gamma=gamma, max_iter=1000, tol=tol).fit(X, y_semi)
    ours = LabelPropagation(kernel="gaussian", bandwidth=1 / np.sqrt(2 * gamma), max_iter=1000, tol=tol).fit(X, y_semi)
    assert ours.n_iter_ == sk.n_iter_
    np.testing.assert_array_equal(ours.transduction_, sk.transduction_)
    np.testing.assert_allclose(ours.label_distributions_, sk.label_distributions_, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(ours.classes_, sk.classes_)
    Q = np.random.default_rng(1).uniform(-1.5, 2.5, size=(40, 2))
    np.testing.assert_allclose(ours.predict_proba(Q), sk.predict_proba(Q), rtol=0, atol=1e-10)
    np.testing.assert_array_equal(ours.predict(Q), sk.predict(Q))
    assert np.mean(ours.transduction_ == y) > 0.95


def test_matches_sklearn_knn():
    X, _, y_semi = moons_semi(seed=2)
    sk = SkLabelPropagation(kernel="knn", n_neighbors=7).fit(X, y_semi)
    ours = LabelPropagation(kernel="knn", n_neighbors=7).fit(X, y_semi)
    assert ours.n_iter_ == sk.n_iter_
    np.testing.assert_allclose(ours.label_distributions_, sk.label_distributions_, rtol=0, atol=1e-12)


def test_max_iter_warning_matches_sklearn():
    X, _, y_semi = moons_semi()
    with pytest.warns(ConvergenceWarning):
        sk = SkLabelPropagation(gamma=20, max_iter=5).fit(X, y_semi)
    with pytest.warns(ConvergenceWarning):
        ours = LabelPropagation(bandwidth=1 / np.sqrt(40), max_iter=5).fit(X, y_semi)
    assert ours.n_iter_ == sk.n_iter_ == 5
    np.testing.assert_allclose(ours.label_distributions_, sk.label_distributions_, atol=1e-12)


def test_string_labels_and_clamping():
    X = np.array([[0.0], [0.1], [0.2], [1.0], [1.1], [1.2]])
    y = np.array(["a", "a", "b", "b", "b", "a"])
    lp = LabelPropagation(bandwidth=0.1).fit(X, y)
    np.testing.assert_array_equal(lp.transduction_, y)  # everything labelled: clamped
    y_int = np.array([3, -1, -1, 7, -1, -1])
    lp = LabelPropagation(bandwidth=0.1).fit(X, y_int)
    np.testing.assert_array_equal(lp.transduction_, [3, 3, 3, 7, 7, 7])
    np.testing.assert_allclose(lp.label_distributions_.sum(1), 1.0)


def test_identity12_products_of_row_stochastic_kernels():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    Q = rng.normal(size=(7, 3))
    V = rng.normal(size=(40, 2))
    # K̃ as the engine computes it (the local means of the unit vectors), checked against the
    # kernels' definitions; then the identity on those matrices.
    T1 = local_mean(Q, X, np.eye(40), bandwidth=0.8)
    T2 = local_mean(X, X, np.eye(40), kernel="epanechnikov", bandwidth=2.5)
    D1, D2 = np.linalg.norm(Q[:, None] - X[None], axis=2), np.linalg.norm(X[:, None] - X[None], axis=2)
    K1, K2 = np.exp(-0.5 * (D1 / 0.8) ** 2), np.clip(1 - (D2 / 2.5) ** 2, 0, None)
    np.testing.assert_allclose(kernel_matrix(Q, X, bandwidth=0.8), K1, rtol=1e-12)
    np.testing.assert_allclose(T1, K1 / K1.sum(1, keepdims=True), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(T2, K2 / K2.sum(1, keepdims=True), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose((T1 @ T2).sum(1), 1.0, rtol=0, atol=1e-12)
    assert np.all(T1 @ T2 >= 0)
    # Two layers of local means = one local mean with the composed kernel T1·T2.
    inner = local_mean(X, X, V, kernel="epanechnikov", bandwidth=2.5)
    two_layer = local_mean(Q, X, inner, bandwidth=0.8)
    np.testing.assert_allclose(two_layer, T1 @ T2 @ V, rtol=0, atol=1e-10)
    # Label propagation keeps distributions: K̃P has rows summing to one when P does.
    P = rng.dirichlet(np.ones(4), size=40)
    np.testing.assert_allclose(local_mean(X, X, P, bandwidth=0.8).sum(1), 1.0, atol=1e-12)


def test_thread_invariance_and_pickle():
    X, _, y_semi = moons_semi(500)
    a = LabelPropagation(bandwidth=0.2, n_jobs=1).fit(X, y_semi)
    b = LabelPropagation(bandwidth=0.2, n_jobs=2).fit(X, y_semi)
    np.testing.assert_array_equal(a.label_distributions_, b.label_distributions_)
    c = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(c.predict_proba(X[:20]), a.predict_proba(X[:20]))
    m1 = LocalModeClustering(bandwidth=0.3, random_state=0, n_jobs=1).fit(X)
    m2 = LocalModeClustering(bandwidth=0.3, random_state=0, n_jobs=2).fit(X)
    np.testing.assert_array_equal(m1.labels_, m2.labels_)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(m1)).labels_, m1.labels_)


def test_label_propagation_bad_input():
    X = np.zeros((4, 2))
    with pytest.raises(ValueError, match="labelled"):
        LabelPropagation().fit(X, [-1, -1, -1, -1])
    with pytest.raises(ValueError, match="max_iter"):
        LabelPropagation(max_iter=0).fit(X, [0, 1, -1, -1])
    with pytest.raises(ValueError, match="tol"):
        LabelPropagation(tol=-1.0).fit(X, [0, 1, -1, -1])
    with pytest.raises(ValueError, match="bandwidth"):
        LabelPropagation(bandwidth=0.0).fit(X, [0, 1, -1, -1])
    with pytest.raises(ValueError, match="NaN"):
        LabelPropagation().fit([[np.nan, 0.0]] * 2, [0, 1])
    with pytest.raises(ValueError):
        LabelPropagation().fit(X, [0, 1, -1])
    with pytest.raises(ValueError, match="Unknown label type"):
        LabelPropagation().fit(X, [0.5, 1.5, -1, -1])


def test_local_mode_step_is_local_mode_classifier():
    """One hard relaxation step = LocalModeClassifier refit on the current labels."""
    X, _ = make_blobs(120, centers=3, cluster_std=1.5, random_state=0)
    init = np.random.default_rng(0).integers(0, 5, size=120)
    one = LocalModeClustering(bandwidth=1.0, init=init, max_iter=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        one.fit(X)
    clf = LocalModeClassifier(bandwidth=1.0).fit(X, init)
    expected = clf.predict(X)
    # Same partition (labels are renumbered by first appearance).
    assert adjusted_rand_score(one.labels_, expected) == 1.0
    K = kernel_matrix(X, X, bandwidth=1.0)
    onehot = np.eye(5)[init]
    np.testing.assert_array_equal(np.argmax(K @ onehot, axis=1), expected)


def test_local_mode_clustering_finds_blobs():
    X, y = make_blobs(300, centers=[[-6, 0], [0, 6], [6, 0]], cluster_std=0.7, random_state=1)
    m = LocalModeClustering(bandwidth=1.5, n_init_clusters=20, random_state=0).fit(X)
    assert m.converged_
    assert m.n_clusters_ == 3
    assert adjusted_rand_score(y, m.labels_) == 1.0
    assert set(m.labels_) == {0, 1, 2} and m.labels_[0] == 0


def test_local_mode_clustering_two_cycle_is_reported():
    # Two points that each see only the other (hollow kernel): they swap labels forever.
    X = np.array([[0.0], [1.0]])
    with pytest.warns(ConvergenceWarning, match="oscillates"):
        m = LocalModeClustering(init=np.array([0, 1]), exclude_self=True).fit(X)
    assert not m.converged_


def test_local_mode_clustering_bad_input():
    X = np.zeros((5, 2))
    with pytest.raises(ValueError, match="init"):
        LocalModeClustering(init="random").fit(X)
    with pytest.raises(ValueError, match="init"):
        LocalModeClustering(init=np.zeros(4)).fit(X)
    with pytest.raises(ValueError, match="n_init_clusters"):
        LocalModeClustering(n_init_clusters=0).fit(X)
    with pytest.raises(ValueError, match="max_iter"):
        LocalModeClustering(max_iter=0).fit(X)


hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra.numpy import arrays  # noqa: E402


@settings(max_examples=30, deadline=None)
@given(
    X=arrays(np.float64, st.tuples(st.integers(2, 25), st.integers(1, 3)), elements=st.floats(-5, 5)),
    h=st.floats(0.05, 5.0),
    seed=st.integers(0, 2**16),
)
def test_property_propagation_keeps_distributions_and_clamps(X, h, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(-1, 3, size=len(X))
    y[0] = 0  # at least one labelled sample
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        lp = LabelPropagation(bandwidth=h, max_iter=50).fit(X, y)
    P = lp.label_distributions_
    assert np.all(P >= 0) and np.all(np.isfinite(P))
    labelled = y != -1
    sums = P.sum(1)
    # A sample no labelled mass reaches (all kernel weights underflow) keeps a zero row,
    # as in scikit-learn; every other row is a distribution.
    reached = sums > 0
    assert np.all(reached[labelled])
    np.testing.assert_allclose(sums[reached], 1.0, atol=1e-12)
    np.testing.assert_array_equal(lp.transduction_[labelled], y[labelled])


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("kernel", ["rbf", "knn"])
def test_sparse_input_gives_the_dense_answer_and_scikit_learns(fmt, kernel):
    import scipy.sparse as sp

    X, _, y_semi = moons_semi(120, seed=3)
    X = X - X.min(axis=0)  # non-negative, with exact zeros stored sparsely
    X[X < 0.3] = 0.0
    S = sp.csr_matrix(X).asformat(fmt)
    if kernel == "rbf":
        sk = SkLabelPropagation(kernel="rbf", gamma=5.0).fit(S, y_semi)
        ours = LabelPropagation(kernel="gaussian", bandwidth=1 / np.sqrt(10.0)).fit(S, y_semi)
    else:
        sk = SkLabelPropagation(kernel="knn", n_neighbors=7).fit(S, y_semi)
        ours = LabelPropagation(kernel="knn", n_neighbors=7).fit(S, y_semi)
    dense = LabelPropagation(**ours.get_params()).fit(X, y_semi)
    np.testing.assert_array_equal(ours.label_distributions_, dense.label_distributions_)
    np.testing.assert_allclose(ours.label_distributions_, sk.label_distributions_, atol=1e-10)
    np.testing.assert_array_equal(ours.predict(S.tocsr()[:10]), sk.predict(X[:10]))


def test_verbose_draws_a_bar_per_iteration_and_changes_nothing(capsys, instant_progress):
    X, _, y_semi = moons_semi()
    quiet = LabelPropagation(bandwidth=0.2).fit(X, y_semi)
    capsys.readouterr()
    loud = LabelPropagation(bandwidth=0.2, verbose=True).fit(X, y_semi)
    err = capsys.readouterr().err
    assert "LabelPropagation" in err and f"{loud.n_iter_}/1000" in err
    assert loud.n_iter_ == quiet.n_iter_
    np.testing.assert_array_equal(loud.label_distributions_, quiet.label_distributions_)


@pytest.mark.parametrize("max_iter", [1, 2, 50])
def test_iteration_count_and_warning_follow_sklearn(max_iter):
    # scikit-learn checks before each step and warns whenever max_iter steps were taken, even
    # when the last one converged.
    X, _, y_semi = moons_semi()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sk = SkLabelPropagation(kernel="rbf", gamma=20.0, max_iter=max_iter).fit(X, y_semi)
        sk_warned = any(issubclass(w.category, ConvergenceWarning) for w in caught)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = LabelPropagation(bandwidth=1 / np.sqrt(40.0), max_iter=max_iter).fit(X, y_semi)
        warned = any(issubclass(w.category, ConvergenceWarning) for w in caught)
    assert ours.n_iter_ == sk.n_iter_ and warned == sk_warned
    # Labels alone already within tol: no step at all.
    assert LabelPropagation(bandwidth=0.2, tol=1e9).fit(X, y_semi).n_iter_ == SkLabelPropagation(tol=1e9).fit(X, y_semi).n_iter_ == 0

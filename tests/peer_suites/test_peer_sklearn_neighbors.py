"""scikit-learn's own neighbours tests (sklearn/neighbors/tests/test_neighbors.py) on our
NearestNeighbors and k-NN estimators: KNeighborsClassifier is LocalModeClassifier(kernel="knn"),
KNeighborsRegressor is LocalMeanRegressor(kernel="knn") (scikit-learn's spelling through
peer_adapters). The radius estimators, the tree classes and the graph functions are not offered."""

import pytest
import sklearn.neighbors as sk_neighbors
from .peer_adapters import EUCLIDEAN_ONLY, PRECOMPUTED, KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors

peer = pytest.importorskip("sklearn.neighbors.tests.test_neighbors")
globals().update({k: v for k, v in vars(peer).items() if k.startswith("test_")})

SUBSTITUTE = [
    (sk_neighbors, "NearestNeighbors", NearestNeighbors),
    (sk_neighbors, "KNeighborsClassifier", KNeighborsClassifier),
    (sk_neighbors, "KNeighborsRegressor", KNeighborsRegressor),
    (peer, "KNeighborsRegressor", KNeighborsRegressor),
]
NOT_OFFERED = [sk_neighbors.RadiusNeighborsClassifier, sk_neighbors.RadiusNeighborsRegressor]

NO_KNEIGHBORS = ("the k-NN estimators (LocalModeClassifier, LocalMeanRegressor) do not expose kneighbors or "
                 "kneighbors_graph: NearestNeighbors does")
XFAIL = {
    "test_unsupervised_inputs": "fit takes data, not a fitted index (NearestNeighbors, BallTree, KDTree)",
    "test_same_knn_parallel": NO_KNEIGHBORS,
    "test_knn_forcing_backend": NO_KNEIGHBORS,
    "test_KNeighborsRegressor_multioutput_uniform_weight": NO_KNEIGHBORS,
    "test_predict_sparse_ball_kd_tree": ("sparse input is densified for every algorithm (scikit-learn refuses it "
                                         "with its trees)"),
    "test_precomputed_cross_validation": PRECOMPUTED,
    "test_neighbors_minkowski_semimetric_algo_warn": EUCLIDEAN_ONLY,
    r"test_neigh_predictions_algorithm_agnosticity\[.*-(50-500|100-1000)-[^-]+-100-100-10\]": (
        "the test passes the radius as n_neighbors to estimators that are not scikit-learn's KNeighborsMixin "
        "subclasses"),
    "test_nearest_neighbors_validate_params": ("parameters are validated by our own checks, not scikit-learn's "
                                               "InvalidParameterError messages"),
    "test_metric_params_interface": "metric_params are not accepted (only the Euclidean distance)",
    "test_auto_algorithm": "the private _fit_method attribute does not exist (algorithm='auto' picks inside the index)",
}

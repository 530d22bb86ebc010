"""Every estimator passes scikit-learn's own estimator checks."""

from sklearn.linear_model import LinearRegression
from sklearn.utils.estimator_checks import parametrize_with_checks

from localization import (
    KernelDensity,
    LocalMeanRegressor,
    LocalModeClassifier,
    LocalModel,
    LocalPolynomialRegressor,
    NearestNeighbors,
)

ESTIMATORS = [
    LocalMeanRegressor(),
    LocalMeanRegressor(kernel="knn", n_neighbors=3),
    LocalPolynomialRegressor(degree=1),
    LocalModeClassifier(),
    LocalModeClassifier(kernel="knn"),
    KernelDensity(),
    LocalModel(LinearRegression()),
    NearestNeighbors(),
]



def expected_failures(estimator):
    if getattr(estimator, "kernel", None) == "knn":
        # A weight is not a repeated sample under the kNN kernel: duplicates take neighbour slots.
        reason = "kNN kernel: weights are not repetitions"
        return {"check_sample_weight_equivalence_on_dense_data": reason, "check_sample_weight_equivalence_on_sparse_data": reason}
    return {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failures)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_validation_short_cut_behaves_like_scikit_learn():
    import warnings

    import numpy as np
    import pytest

    from localization import LocalMeanRegressor

    rng = np.random.default_rng(0)
    X = rng.random((50, 3)).astype(np.float32)
    y = rng.random(50)
    reg = LocalMeanRegressor(bandwidth=0.5).fit(X, y)
    assert reg.n_features_in_ == 3 and reg.X_fit_ is X  # ready input is not copied
    F = np.asfortranarray(X)
    np.testing.assert_array_equal(reg.predict(F), reg.predict(X))  # converted by scikit-learn
    with pytest.raises(ValueError, match="3 features"):
        reg.predict(X[:, :2])
    with pytest.raises(ValueError, match="NaN"):
        reg.predict(np.where(X > 0.9, np.nan, X))
    pd = pytest.importorskip("pandas")
    named = LocalMeanRegressor(bandwidth=0.5).fit(pd.DataFrame(X, columns=list("abc")), y)
    with pytest.warns(UserWarning, match="feature names"):
        named.predict(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        named.fit(X, y)  # refitting on an array forgets the names, as scikit-learn does
    assert not hasattr(named, "feature_names_in_")

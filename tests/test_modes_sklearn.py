from sklearn.utils.estimator_checks import parametrize_with_checks

from localization.embedding import LocalPCA
from localization.modes import MedoidShift, PCShift, QuickShift


@parametrize_with_checks(
    [
        MedoidShift(bandwidth=0.5),
        MedoidShift(bandwidth=0.5, n_neighbors=15),
        QuickShift(bandwidth=0.3, max_dist=1.0),
        PCShift(n_components=1, bandwidth=1.0, max_iter=50),
        LocalPCA(n_components=1, bandwidth=1.0),
    ]
)
def test_sklearn_compatible(estimator, check):
    check(estimator)

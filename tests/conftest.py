from pathlib import Path

import numpy as np
import pytest


def pytest_report_header(config):
    """Which copy of the package the run tests: the source tree's or an installed wheel's."""
    import localization

    return f"localization {localization.__version__} from {Path(localization.__file__).parent}"


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def naive_local_sums(Q, X, V, k, w=None):
    """The definition as dense NumPy: (Σ K w v, Σ K w) with K = k(‖q − x‖)."""
    D = np.sqrt(((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    K = k(D)
    if w is not None:
        K = K * w
    return K @ V, K.sum(1)

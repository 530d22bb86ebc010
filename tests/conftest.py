import numpy as np
import pytest


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

from pathlib import Path

import numpy as np
import pytest


def pytest_report_header(config):
    """Which copy of the package the run tests: the source tree's or an installed wheel's."""
    import localization

    return f"localization {localization.__version__} from {Path(localization.__file__).parent}"


@pytest.fixture
def instant_progress(monkeypatch):
    """Progress bars appear at once (they normally wait 0.2 s), so that a quick call draws one."""
    from localization import _progress

    monkeypatch.setattr(_progress, "DELAY", 0.0)


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


@pytest.fixture(scope="session")
def dask_client():
    """One Dask cluster for every test that needs one: 2 worker processes, 1 thread each."""
    pytest.importorskip("dask")
    distributed = pytest.importorskip("distributed")
    import logging

    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
    )
    client = distributed.Client(cluster)
    # Workers import the package (and its native extension) once, up front.
    client.run(lambda: __import__("localization.dask"))
    yield client
    client.close()
    cluster.close()

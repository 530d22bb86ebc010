"""scikit-learn's own KernelDensity tests (sklearn/neighbors/tests/test_kde.py) on our
KernelDensity (scikit-learn's constructor spelling through peer_adapters.KernelDensity)."""

import pytest
from .peer_adapters import KernelDensity

peer = pytest.importorskip("sklearn.neighbors.tests.test_kde")
globals().update({k: v for k, v in vars(peer).items() if k.startswith("test_")})

SUBSTITUTE = [(peer, "KernelDensity", KernelDensity)]
XFAIL = {
    "test_kernel_density_sampling": "KernelDensity.sample draws from every kernel (scikit-learn: gaussian and tophat "
    "only, NotImplementedError for the others)",
}

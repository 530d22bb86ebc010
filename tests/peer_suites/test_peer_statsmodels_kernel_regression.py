"""statsmodels' own kernel-regression tests (statsmodels/nonparametric/tests/
test_kernel_regression.py) on our LocalMeanRegressor (reg_type='lc') and
LocalPolynomialRegressor (reg_type='ll') through statsmodels' KernelReg spelling
(peer_adapters.KernelReg). KernelCensoredReg is not offered."""

import inspect

import pytest
from .peer_adapters import KernelReg

peer = pytest.importorskip("statsmodels.nonparametric.tests.test_kernel_regression")
globals().update({k: v for k, v in vars(peer).items() if k.startswith("test_") or k.startswith("Test")})

SUBSTITUTE = [(peer.nparam, "KernelReg", KernelReg)]
NOT_OFFERED = [peer.nparam.KernelCensoredReg]
RANDOM_STATE_WARNING = "expects statsmodels' FutureWarning about its legacy random state, which has no counterpart here"


def _expects_random_state_warning(name):
    """Whether this statsmodels' version of the test expects the warning (0.14 has none)."""
    test = getattr(peer, name, None) or getattr(peer.TestKernelReg, name, None)
    return test is not None and "After 0.17" in inspect.getsource(test)


XFAIL = {
    name: RANDOM_STATE_WARNING
    for name in (
        "test_efficient_user_specificed_bw",
        "test_invalid_bw",
        "test_continuous_mfx_ll_cvls",
        "test_significance_seed_legacy",
    )
    if _expects_random_state_warning(name)
}

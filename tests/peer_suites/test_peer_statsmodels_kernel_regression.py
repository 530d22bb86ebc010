"""statsmodels' own kernel-regression tests (statsmodels/nonparametric/tests/
test_kernel_regression.py) on our LocalMeanRegressor (reg_type='lc') and
LocalPolynomialRegressor (reg_type='ll') through statsmodels' KernelReg spelling
(peer_adapters.KernelReg). KernelCensoredReg is not offered."""

import pytest
from .peer_adapters import KernelReg

peer = pytest.importorskip("statsmodels.nonparametric.tests.test_kernel_regression")
globals().update({k: v for k, v in vars(peer).items() if k.startswith("test_") or k.startswith("Test")})

SUBSTITUTE = [(peer.nparam, "KernelReg", KernelReg)]
NOT_OFFERED = [peer.nparam.KernelCensoredReg]
RANDOM_STATE_WARNING = "expects statsmodels' FutureWarning about its legacy random state, which has no counterpart here"
XFAIL = {
    "test_efficient_user_specificed_bw": RANDOM_STATE_WARNING,
    "test_invalid_bw": RANDOM_STATE_WARNING,
    "test_continuous_mfx_ll_cvls": RANDOM_STATE_WARNING,
    "test_significance_seed_legacy": RANDOM_STATE_WARNING,
}

"""scikit-learn's own MeanShift tests (sklearn/cluster/tests/test_mean_shift.py) on our
MeanShift, mean_shift, estimate_bandwidth and get_bin_seeds."""

import pytest

import localization.cluster as ours

peer = pytest.importorskip("sklearn.cluster.tests.test_mean_shift")
globals().update({k: v for k, v in vars(peer).items() if k.startswith("test_")})

SUBSTITUTE = [(peer, name, getattr(ours, name)) for name in ("MeanShift", "mean_shift", "estimate_bandwidth", "get_bin_seeds")]
XFAIL = {}

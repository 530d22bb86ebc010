"""scikit-learn's own label propagation tests (sklearn/semi_supervised/tests/
test_label_propagation.py) on our LabelPropagation (scikit-learn's spelling, kernel='rbf' with
gamma, through peer_adapters.LabelPropagation). LabelSpreading is not offered."""

import pytest
from .peer_adapters import LabelPropagation

peer = pytest.importorskip("sklearn.semi_supervised.tests.test_label_propagation")
globals().update({k: v for k, v in vars(peer).items() if k.startswith("test_")})

SUBSTITUTE = [(peer.label_propagation, "LabelPropagation", LabelPropagation)]
NOT_OFFERED = [peer.label_propagation.LabelSpreading]
NO_GRAPH = ("no _build_graph: the n × n affinity matrix is never built (each iteration is one engine pass), "
            "so scikit-learn's private graph cannot be inspected")
XFAIL = {
    "test_label_propagation_closed_form": NO_GRAPH,
    "test_label_propagation_build_graph_normalized": NO_GRAPH,
}

"""The harness that runs the peers' suites: the substitution really happens."""

import types

import pytest
import sklearn.cluster

import localization

NS = types.SimpleNamespace(MeanShift=sklearn.cluster.MeanShift)
SUBSTITUTE = [(NS, "MeanShift", localization.MeanShift)]


def test_the_peer_names_resolve_to_ours_while_a_test_runs():
    assert NS.MeanShift is localization.MeanShift


@pytest.mark.parametrize("Estimator", [sklearn.cluster.MeanShift])
def test_parametrisations_captured_at_import_get_ours(Estimator):
    assert Estimator is localization.MeanShift

"""scikit-learn's output API: every transformer names its output features, so
``set_output(transform="pandas")`` and ``Pipeline.set_output`` work."""

import numpy as np
import pytest
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from localization import (
    Hopfield,
    LocalMeanDenoiser,
    LocalMeanDiffusion,
    LocalPCA,
    ModernHopfield,
    NonLocalMeans,
    PCShift,
)

pd = pytest.importorskip("pandas")

ONE_TO_ONE = [
    Hopfield(random_state=0),  # seeded: the asynchronous update order is random
    ModernHopfield(),
    LocalMeanDenoiser(),
    LocalMeanDiffusion(n_steps=3),
    NonLocalMeans(image_shape=(2, 2)),
    PCShift(bandwidth=1.0),
]


def frame(rng, n=30, d=4):
    X = rng.standard_normal((n, d))
    return pd.DataFrame(X, columns=[f"f{j}" for j in range(d)])


@pytest.mark.parametrize("est", ONE_TO_ONE + [LocalPCA(n_components=2)], ids=lambda e: type(e).__name__)
def test_pandas_output_with_feature_names(est, rng):
    X = frame(rng)
    plain = est.fit(X).transform(X)
    names = est.get_feature_names_out()
    assert list(names) == (list(X.columns) if est in ONE_TO_ONE else ["localpca0", "localpca1"])
    assert list(est.get_feature_names_out(X.columns)) == list(names)
    out = est.set_output(transform="pandas").transform(X)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == list(names) and out.index.equals(X.index)
    np.testing.assert_array_equal(out.to_numpy(), plain)
    est.set_output(transform="default")


@pytest.mark.parametrize("est", ONE_TO_ONE[:1] + [LocalPCA(n_components=2)], ids=lambda e: type(e).__name__)
def test_pipeline_set_output(est, rng):
    X = frame(rng)
    pipe = make_pipeline(StandardScaler(), est).set_output(transform="pandas")
    out = pipe.fit(X).transform(X)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == list(pipe.get_feature_names_out())


def test_names_without_feature_names(rng):
    X = rng.standard_normal((30, 3))
    assert list(Hopfield().fit(X).get_feature_names_out()) == ["x0", "x1", "x2"]
    assert list(LocalPCA(n_components=1).fit(X).get_feature_names_out()) == ["localpca0"]

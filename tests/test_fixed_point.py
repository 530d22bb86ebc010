"""The iterated local mean's one Python loop (``localization._fixed_point.iterate``) and the
prepared reference the iterations over fixed samples reuse."""

import numpy as np
import pytest

from localization import _core, engine
from localization._fixed_point import iterate
from localization.denoise import SelfLocalMean


def _halve(idx, Y):
    """Each row moves halfway to 0; the step is as long as the move."""
    new = Y[idx] / 2
    return new, np.abs(new - Y[idx]).max(axis=1), None


def test_rows_stop_on_their_own():
    Y = np.array([[8.0], [1.0], [0.0], [np.nan]])
    n_iter, converged = iterate(_halve, Y, 100, 0.6)
    # 8 → 4 → 2 → 1 → 0.5 (moved 0.5 < 0.6); 1 → 0.5; 0 never moves more than 0.
    np.testing.assert_array_equal(Y[:3, 0], [0.5, 0.5, 0.0])
    assert n_iter == 4
    np.testing.assert_array_equal(converged, [True, True, True, False])  # a NaN row never moves
    assert np.isnan(Y[3, 0])


def test_max_iter_and_invalid_steps():
    Y = np.array([[8.0], [8.0]])

    def update(idx, Y):
        new, moved, _ = _halve(idx, Y)
        return new, moved, idx != 1  # row 1 cannot take its step: it stops, not converged

    n_iter, converged = iterate(update, Y, 2, 1e-9)
    assert n_iter == 2
    np.testing.assert_array_equal(Y[:, 0], [2.0, 4.0])
    np.testing.assert_array_equal(converged, [False, False])


def test_whole_set_stops_together():
    Y = np.array([[8.0], [1.0]])
    seen = []

    def update(idx, Y):
        seen.append(len(idx))
        new = Y[idx] / 2
        return new, np.abs(new - Y[idx]).max(), None

    n_iter, converged = iterate(update, Y, 100, 0.6, whole=True)
    assert n_iter == 4 and set(seen) == {2}  # every row moves until the largest move is small
    np.testing.assert_array_equal(Y[:, 0], [0.5, 1 / 16])
    assert converged.all()
    assert iterate(update, Y, 0, 0.6, whole=True)[0] == 0


def test_progress_bar_counts_rows_or_iterations(capsys, instant_progress):
    iterate(_halve, np.array([[8.0], [1.0]]), 100, 0.6, desc="rows", verbose=True)
    assert "rows" in capsys.readouterr().err
    iterate(lambda idx, Y: (Y[idx] / 2, 0.0, None), np.ones((3, 1)), 10, 0.6, whole=True, desc="sweeps", verbose=True)
    err = capsys.readouterr().err
    assert "sweeps" in err and "1/10" in err


@pytest.mark.parametrize("blurring", [False, True])
def test_self_local_mean_prepares_its_fixed_reference_once(blurring, monkeypatch, rng):
    built = []
    native = _core.Reference

    class Counting:
        def __new__(cls, *args):
            built.append(args)
            return native(*args)

    monkeypatch.setattr(engine._core, "Reference", Counting)
    x = rng.normal(size=(200, 1))
    y = np.sign(x[:, 0]) + 0.2 * rng.normal(size=200)
    est = SelfLocalMean(spatial_bandwidth=0.5, range_bandwidth=0.3, max_iter=20, blurring=blurring).fit(x, y)
    assert est.n_iter_ > 2
    # Without blurring the samples (x, y) stay the references of every step: one prepared
    # reference; with blurring they move, and each step sums against the current values.
    assert len(built) == (0 if blurring else 1)
    est.predict(x[:10] + 0.01)
    assert len(built) == (1 if blurring else 2)

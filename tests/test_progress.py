"""Progress bars, drawn in one place (``localization._progress``): nothing for a quick call,
and a bar that is closed on a line of its own (on a terminal it is erased) for a slow one.

"Slow" is simulated by dropping the delay before a bar appears to zero, not by long runs."""

import sys

import numpy as np
import pytest

from localization import _progress, kernel_sum, local_mean
from localization.cluster import MeanShift, PCShift
from localization.generative import LocalMeanDiffusion
from localization.impute import LocalMeanImputer


def _runs(rng):
    X = rng.normal(size=(300, 2))
    holes = rng.normal(size=(40, 3))
    holes[rng.random(holes.shape) < 0.2] = np.nan
    return {
        "MeanShift": lambda: MeanShift(bandwidth=1.0, verbose=True).fit(X),
        "PC-Shift": lambda: PCShift(1, bandwidth=0.5, verbose=True).fit(X[:60]),
        "LocalMeanImputer": lambda: LocalMeanImputer(progress=True, random_state=0).fit_transform(holes),
        "heun sampling": lambda: LocalMeanDiffusion(n_steps=5, sampler="heun", random_state=0).fit(X).sample(10, progress=True),
        "local_mean": lambda: local_mean(X, X, bandwidth=0.5, algorithm="brute", progress=True),
        "kernel_sum": lambda: kernel_sum(X, X, bandwidth=0.5, algorithm="kd_tree", kernel="epanechnikov", progress=True),
    }


@pytest.mark.parametrize("desc", ["MeanShift", "PC-Shift", "LocalMeanImputer", "heun sampling", "local_mean", "kernel_sum"])
def test_quick_calls_print_nothing_and_slow_ones_end_their_line(desc, rng, capsys, monkeypatch):
    run = _runs(rng)[desc]
    assert _progress.DELAY == 0.2
    # A call shorter than the delay prints nothing (a long delay keeps a loaded machine from
    # turning these millisecond calls into slow ones).
    monkeypatch.setattr(_progress, "DELAY", 5.0)
    run()
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(_progress, "DELAY", 0.0)
    run()
    print("next line", file=sys.stderr)
    err = capsys.readouterr().err
    assert desc in err and "100%" in err
    # The bar's last state, then a newline: what is printed next starts a line of its own.
    assert err.endswith("|\nnext line\n") or err.endswith("]\nnext line\n"), err[-200:]


def test_native_reports_advance_the_bar_by_increments(capsys, instant_progress):
    with _progress.Progress(True, "job", unit="seed") as bar:
        for done in (0, 3, 3, 7, 10):
            bar.report(done, 10)
        assert bar._bar.n == 10 and bar._bar.total == 10
    assert "10/10" in capsys.readouterr().err


def test_disabled_progress_is_free():
    bar = _progress.Progress(False, "job")
    assert bar.callback is None
    bar.report(1, 2)
    bar.update(3, loss=1.0)
    bar.close()


def test_a_bar_is_closed_when_the_call_fails(capsys, instant_progress):
    with pytest.raises(RuntimeError):
        with _progress.Progress(True, "job", total=4) as bar:
            bar.update(1)
            raise RuntimeError
    assert capsys.readouterr().err.endswith("\n")


def test_progress_leaves_results_unchanged(rng):
    X = rng.normal(size=(200, 3))
    v = rng.normal(size=200)
    for kw in (dict(algorithm="brute"), dict(algorithm="kd_tree", kernel="tophat"), dict(kernel="knn", n_neighbors=5)):
        np.testing.assert_array_equal(local_mean(X, X, v, progress=True, **kw), local_mean(X, X, v, **kw))

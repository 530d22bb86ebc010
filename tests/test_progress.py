"""Progress bars, drawn in one place (``localization._progress``): nothing for a quick call,
and a bar that is closed on a line of its own (on a terminal it is erased) for a slow one.

"Slow" is simulated by dropping the delay before a bar appears to zero, not by long runs."""

import re
import sys

import numpy as np
import pytest

from localization import _progress, kernel_sum, local_mean
from localization.cluster import MeanShift, PCShift
from localization.generative import LocalMeanDiffusion
from localization.impute import LocalMeanImputer


def _ends_its_line(err):
    """The bar's last state (a bar ``|`` or its stats ``]``, padded with spaces where the last
    postfix was shorter than the one before), then a newline, then what was printed next."""
    return re.search(r"[|\]] *\nnext line\n\Z", err) is not None


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
    assert _ends_its_line(err), err[-200:]


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


def _more_runs(rng):
    """Every other call that can run long, at a size that takes milliseconds."""
    from localization import KernelDensity, LocalMeanRegressor, LocalModeClassifier, LocalPolynomialRegressor
    from localization import MetricLearningRegressor
    from localization.adaptive import MultiKernel
    from localization.cluster import MedoidShift, QuickShift
    from localization.denoise import bilateral, nl_means
    from localization.kernels import Kernel

    X = rng.normal(size=(120, 2))
    y = X[:, 0] + 0.1 * rng.normal(size=120)
    labels = (X[:, 0] > 0).astype(int)
    D = np.sqrt(((X[:60, None] - X[None, :60]) ** 2).sum(-1))
    image = rng.random((24, 20))
    multi = MultiKernel([Kernel("gaussian", 0.3), Kernel("gaussian", 1.0)])
    fitted = LocalMeanRegressor(bandwidth=0.5, verbose=True).fit(X, y)
    density = KernelDensity(bandwidth=0.5, verbose=True).fit(X)
    poly = LocalPolynomialRegressor(bandwidth=0.5, verbose=True).fit(X, y)
    return {
        "LocalMeanRegressor bandwidth search": lambda: LocalMeanRegressor(bandwidth="loo", verbose=True).fit(X, y),
        "LocalPolynomialRegressor bandwidth search":
            lambda: LocalPolynomialRegressor(bandwidth="loo_per_feature", verbose=True).fit(X[:50], y[:50]),
        "LocalModeClassifier bandwidth search": lambda: LocalModeClassifier(bandwidth="loo", verbose=True).fit(X, labels),
        "KernelDensity bandwidth search": lambda: KernelDensity(bandwidth="lscv", verbose=True).fit(X),
        "LocalMeanRegressor kernel weights": lambda: LocalMeanRegressor(kernel=multi, verbose=True).fit(X, y),
        "KernelDensity kernel weights": lambda: KernelDensity(kernel=multi, verbose=True).fit(X),
        "MetricLearningRegressor": lambda: MetricLearningRegressor(max_iter=3, verbose=True).fit(X, y),
        "LocalMeanRegressor.predict": lambda: fitted.predict(X),
        "KernelDensity.score_samples": lambda: density.score_samples(X),
        "LocalPolynomialRegressor.predict": lambda: poly.predict(X),
        "MedoidShift": lambda: MedoidShift(bandwidth=0.5, verbose=True).fit(X),
        "MedoidShift precomputed": lambda: MedoidShift(bandwidth=0.5, metric="precomputed", verbose=True).fit(D),
        "MedoidShift kNN": lambda: MedoidShift(bandwidth=0.5, n_neighbors=10, verbose=True).fit(X),
        "QuickShift links": lambda: QuickShift(bandwidth=0.5, verbose=True).fit(X),
        "QuickShift densities": lambda: QuickShift(bandwidth=0.5, window=1.0, verbose=True).fit(X),
        "bilateral": lambda: bilateral(image, 1.0, 0.2, progress=True),
        "nl_means": lambda: nl_means(image, 3, 4, progress=True),
    }


_MORE = ["LocalMeanRegressor bandwidth search", "LocalPolynomialRegressor bandwidth search",
         "LocalModeClassifier bandwidth search", "KernelDensity bandwidth search", "LocalMeanRegressor kernel weights",
         "KernelDensity kernel weights", "MetricLearningRegressor", "LocalMeanRegressor.predict",
         "KernelDensity.score_samples", "LocalPolynomialRegressor.predict", "MedoidShift", "MedoidShift precomputed",
         "MedoidShift kNN", "QuickShift links", "QuickShift densities", "bilateral", "nl_means"]


@pytest.mark.filterwarnings("ignore::UserWarning")  # edge-of-grid and convergence warnings of tiny searches
@pytest.mark.parametrize("case", _MORE)
def test_every_long_call_has_a_bar(case, rng, capsys, monkeypatch):
    desc = case.replace(" precomputed", "").replace(" kNN", "")
    run = _more_runs(rng)[case]
    monkeypatch.setattr(_progress, "DELAY", 5.0)
    quiet = run()
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(_progress, "DELAY", 0.0)
    shown = run()
    print("next line", file=sys.stderr)
    err = capsys.readouterr().err
    assert desc in err, err
    # A search has no total known in advance: its bar counts the evaluations.
    assert "100%" in err or "pass [" in err, err[-300:]
    assert _ends_its_line(err), err[-200:]
    # The same results with and without a bar.
    for a, b in [(quiet, shown)] if isinstance(quiet, np.ndarray) else []:
        np.testing.assert_array_equal(a, b)


def test_bars_of_native_loops_are_closed_when_interrupted(rng, capsys, monkeypatch):
    """Ctrl-C arriving through the progress callback (as a signal checked on the same tick)
    stops the native loop, raises, and leaves the bar closed on a line of its own."""
    from localization.cluster import MedoidShift
    from localization.denoise import nl_means

    def interrupt(self, done, total):
        raise KeyboardInterrupt

    monkeypatch.setattr(_progress, "DELAY", 0.0)
    monkeypatch.setattr(_progress.Progress, "report", interrupt)
    X = rng.normal(size=(80, 2))
    for run in (lambda: nl_means(rng.random((16, 16)), 3, 3, progress=True),
                lambda: MedoidShift(verbose=True).fit(X)):
        with pytest.raises(KeyboardInterrupt):
            run()
        assert capsys.readouterr().err.endswith("\n")


@pytest.mark.parametrize("name", ["MedoidShift", "QuickShift", "LocalMeanRegressor", "KernelDensity"])
def test_verbose_leaves_fitted_results_unchanged(name, rng):
    import localization
    from localization.cluster import MedoidShift, QuickShift

    X = rng.normal(size=(100, 2))
    y = X[:, 0]
    cls = {"MedoidShift": MedoidShift, "QuickShift": QuickShift}.get(name) or getattr(localization, name)
    kw = dict(bandwidth="loo") if name in ("LocalMeanRegressor", "KernelDensity") else dict(bandwidth=0.5)
    args = (X, y) if name == "LocalMeanRegressor" else (X,)
    a, b = cls(**kw).fit(*args), cls(verbose=True, **kw).fit(*args)
    for attr in ("labels_", "bandwidth_"):
        if hasattr(a, attr):
            np.testing.assert_array_equal(getattr(a, attr), getattr(b, attr))


def _searches_and_local_fits(rng):
    """The calls that got a bar last: neighbour searches, LocalModel, NonLocalMeans, the
    Gaussian series and the binned path (a small size; the bar is forced by a zero delay)."""
    from sklearn.linear_model import LinearRegression

    from localization import KernelDensity, LocalMeanRegressor, LocalModel, NearestNeighbors, kernel_sum
    from localization.denoise import NonLocalMeans

    X = rng.normal(size=(400, 2))
    wide = rng.normal(size=(300, 40))
    y = X[:, 0] + 0.1 * rng.normal(size=400)
    images = rng.random((3, 12 * 10))
    nn = NearestNeighbors(n_neighbors=4, verbose=True).fit(X)
    nn_wide = NearestNeighbors(n_neighbors=4, verbose=True).fit(wide)
    local = LocalModel(LinearRegression(), bandwidth=0.5, verbose=True).fit(X[:60], y[:60])
    binned_kde = KernelDensity(bandwidth=0.3, algorithm="binned", verbose=True).fit(X)
    binned_reg = LocalMeanRegressor(bandwidth=0.3, algorithm="binned", verbose=True).fit(X, y)
    return {
        "NearestNeighbors.kneighbors": lambda: nn.kneighbors(X),
        "NearestNeighbors.kneighbors fitted": lambda: nn.kneighbors()[1],
        "NearestNeighbors.kneighbors brute": lambda: nn_wide.kneighbors(wide[:100])[1],
        "NearestNeighbors.radius_neighbors": lambda: np.concatenate(nn.radius_neighbors(X, radius=0.3)[1]),
        "NearestNeighbors.radius_neighbors brute": lambda: np.concatenate(nn_wide.radius_neighbors(wide[:50], radius=8.0)[1]),
        "LocalModel.predict": lambda: local.predict(X[:40]),
        "NonLocalMeans.transform": lambda: NonLocalMeans(3, 2, image_shape=(12, 10), verbose=True).fit_transform(images),
        "nl_means": lambda: NonLocalMeans(3, 2, image_shape=(12, 10), verbose=True).fit_transform(images[:1]),
        "local_mean expansion": lambda: local_mean(X, X, y, bandwidth=0.5, algorithm="expansion", progress=True),
        "kernel_sum expansion": lambda: kernel_sum(X, X, bandwidth=0.5, algorithm="expansion", progress=True),
        "local_mean binned": lambda: local_mean(X, X, y, bandwidth=0.3, algorithm="binned", progress=True),
        "kernel_sum binned": lambda: kernel_sum(X, X, bandwidth=0.3, algorithm="binned", progress=True),
        "KernelDensity.score_samples binned": lambda: binned_kde.score_samples(X),
        "LocalMeanRegressor.predict binned": lambda: binned_reg.predict(X),
    }


_NEW = list(_searches_and_local_fits(np.random.default_rng(0)))


@pytest.mark.parametrize("case", _NEW)
def test_searches_series_binned_and_local_fits_have_a_bar(case, rng, capsys, monkeypatch):
    desc = case.split(" ")[0]
    run = _searches_and_local_fits(rng)[case]
    monkeypatch.setattr(_progress, "DELAY", 5.0)
    quiet = run()
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(_progress, "DELAY", 0.0)
    shown = run()
    print("next line", file=sys.stderr)
    err = capsys.readouterr().err
    assert desc in err and "100%" in err, err[-300:]
    assert _ends_its_line(err), err[-200:]
    # The same results with and without a bar.
    np.testing.assert_array_equal(quiet, shown)


def test_native_search_and_series_reports_count_every_query(rng, monkeypatch):
    """The k-NN / radius searches and the Gaussian series report through the same callback
    as the engine's sums: (done, total) in queries, ending at (m, m)."""
    from localization import NearestNeighbors

    X = rng.normal(size=(500, 2))
    seen = []
    monkeypatch.setattr(_progress, "DELAY", 5.0)
    monkeypatch.setattr(_progress.Progress, "report", lambda self, done, total: seen.append((done, total)))
    NearestNeighbors(n_neighbors=3, verbose=True).fit(X).kneighbors(X[:321])
    assert seen[-1] == (321, 321) and all(t == 321 and 0 <= d <= t for d, t in seen)
    seen.clear()
    NearestNeighbors(verbose=True).fit(X).radius_neighbors(X[:123], radius=0.2)
    assert seen[-1] == (123, 123)
    seen.clear()
    local_mean(X[:77], X, bandwidth=0.4, algorithm="expansion", progress=True)
    assert seen[-1] == (77, 77)
    seen.clear()
    local_mean(X[:77], X, bandwidth=0.4, algorithm="binned", progress=True)
    assert seen[0] == (0, 3) and seen[-1] == (3, 3)


def test_bars_of_searches_series_and_binned_sums_are_closed_when_interrupted(rng, capsys, monkeypatch):
    from localization import NearestNeighbors
    from localization.denoise import NonLocalMeans

    def interrupt(self, *args, **kwargs):
        raise KeyboardInterrupt

    X = rng.normal(size=(200, 2))
    nn = NearestNeighbors(verbose=True).fit(X)
    monkeypatch.setattr(_progress, "DELAY", 0.0)
    monkeypatch.setattr(_progress.Progress, "report", interrupt)
    monkeypatch.setattr(_progress.Progress, "update", interrupt)
    for run in (lambda: nn.kneighbors(X), lambda: nn.radius_neighbors(X),
                lambda: local_mean(X, X, bandwidth=0.5, algorithm="expansion", progress=True),
                lambda: local_mean(X, X, bandwidth=0.5, algorithm="binned", progress=True),
                lambda: NonLocalMeans(3, 2, image_shape=(12, 10), verbose=True).fit_transform(rng.random((2, 120)))):
        with pytest.raises(KeyboardInterrupt):
            run()
        assert capsys.readouterr().err.endswith("\n")

@pytest.mark.parametrize("metric", ["euclidean", "precomputed"])
def test_iterated_medoid_shift_bar_covers_every_pass(metric, rng, capsys, monkeypatch):
    """With ``max_iter > 1`` the one bar counts the samples of every pass: it ends full at the
    N samples of the first pass plus the roots each later pass ran on (not at N)."""
    import re

    from localization.cluster import MedoidShift

    X = np.concatenate([rng.normal(size=(60, 2)), rng.normal(size=(60, 2)) + 6])
    D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
    monkeypatch.setattr(_progress, "DELAY", 0.0)
    est = MedoidShift(bandwidth=0.3, max_iter=10, metric=metric, verbose=True).fit(D if metric == "precomputed" else X)
    err = capsys.readouterr().err
    assert est.n_iter_ >= 2, "the data must need several passes"
    done, total = map(int, re.findall(r"(\d+)/(\d+)", err)[-1])
    assert done == total > len(X), err[-300:]
    assert f"passes={est.n_iter_}" in err, err[-300:]
    quiet = MedoidShift(bandwidth=0.3, max_iter=10, metric=metric).fit(D if metric == "precomputed" else X)
    np.testing.assert_array_equal(quiet.next_, est.next_)

import subprocess
import sys

import numpy as np
import pytest

from localization import cli
from localization.cli import main


@pytest.fixture
def figure_labels(monkeypatch):
    """Record the axis labels of every figure the command line saves (the files are still written)."""
    Figure = pytest.importorskip("matplotlib.figure").Figure
    saved = []
    savefig = Figure.savefig

    def recording(fig, *args, **kwargs):
        saved.append([(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes])
        return savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording)
    return saved


def assert_labelled_with_units(figures):
    assert figures
    for axes in figures:
        for xlabel, ylabel in axes:
            assert "(" in xlabel and "(" in ylabel, f"axis label without units: {xlabel!r}, {ylabel!r}"


def test_demo_reproduces_experiment_1(tmp_path, capsys, figure_labels):
    out = tmp_path / "demo.png"
    assert main(["demo", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "local linear" in text and "tour" in text
    diff = float(text.split("equivalent kernel| = ")[1].split()[0])
    assert diff < 1e-10
    assert out.exists() and out.stat().st_size > 10_000
    assert len(figure_labels) == 3  # regression, mode seeking, segmentation
    assert_labelled_with_units(figure_labels)


def test_cluster_plot_has_labelled_axes(tmp_path, capsys, figure_labels):
    pts = tmp_path / "pts.csv"
    X = np.concatenate([np.random.default_rng(0).normal(c, 0.3, size=(100, 2)) for c in (0.0, 4.0)])
    np.savetxt(pts, X, delimiter=",")
    assert main(["cluster", str(pts), "--bandwidth", "1", "--plot", str(tmp_path / "c.png"), "--quiet"]) == 0
    assert "2 clusters" in capsys.readouterr().out
    assert (tmp_path / "c.png").stat().st_size > 5_000
    assert_labelled_with_units(figure_labels)


def test_without_matplotlib_figures_are_skipped_with_a_hint(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    monkeypatch.setattr(cli, "DEMOS", [cli.demo_local_regression])
    out = tmp_path / "demo.png"
    assert main(["demo", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "localization-methods[plot]" in text and "equivalent kernel" in text
    assert not out.exists()
    # Asked for explicitly, a plot that cannot be drawn is an error before any work.
    assert main(["cluster", "--plot", str(tmp_path / "c.png"), "--n-samples", "10"]) == 2
    assert "localization-methods[plot]" in capsys.readouterr().err


def test_help_for_every_subcommand():
    from localization.cli import COMMANDS

    for name in [None, *COMMANDS]:
        args = [sys.executable, "-m", "localization.cli"] + ([name] if name else []) + ["--help"]
        res = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and "usage" in res.stdout


def test_cluster_reports_bad_input_without_a_traceback(tmp_path, capsys):
    assert main(["cluster", str(tmp_path / "missing.csv")]) == 2
    assert "error" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2\n3,nan\n")
    assert main(["cluster", str(bad)]) == 2


def test_embed_writes_coordinates_and_a_figure(tmp_path, capsys):
    out, fig = tmp_path / "emb.csv", tmp_path / "emb.png"
    assert main(["embed", "--method", "lle", "--n-samples", "400", "--output", str(out), "--plot", str(fig), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "trustworthiness@10" in text and "10-NN accuracy" in text
    import numpy as np

    rows = np.loadtxt(out, delimiter=",", skiprows=1)
    assert rows.shape == (400, 3) and fig.stat().st_size > 10_000
    pts = tmp_path / "pts.npy"
    np.save(pts, np.random.default_rng(0).random((60, 4)))
    assert main(["embed", str(pts), "--method", "amds", "--n-neighbors", "5", "--output", str(out), "--no-plot"]) == 0
    assert np.loadtxt(out, delimiter=",", skiprows=1).shape == (60, 2)
    assert main(["embed", str(pts), "--labels", str(tmp_path / "missing.txt"), "--no-plot"]) == 2


def test_cluster_refuses_complex_empty_and_zero_sizes(tmp_path, capsys):
    import numpy as np
    import pytest

    z = tmp_path / "complex.npy"
    np.save(z, np.array([[1 + 2j, 0], [3, 4j]]))
    assert main(["cluster", str(z)]) == 2
    assert "complex" in capsys.readouterr().err
    s = tmp_path / "text.npy"
    np.save(s, np.array([["a", "b"]]))
    assert main(["cluster", str(s)]) == 2
    e = tmp_path / "empty.npy"
    np.save(e, np.zeros((0, 2)))
    assert main(["cluster", str(e)]) == 2
    dup = tmp_path / "dup.csv"
    dup.write_text("1\n1\n1\n2\n2\n2\n3\n3\n")  # most points coincide: the estimate is 0
    assert main(["cluster", str(dup), "--method", "quickshift", "--quiet"]) == 2
    assert "estimated bandwidth is 0" in capsys.readouterr().err
    for n in ("0", "-5", "many"):
        with pytest.raises(SystemExit) as exc:
            main(["cluster", "--n-samples", n])
        assert exc.value.code == 2
        assert "--n-samples" in capsys.readouterr().err


def test_impute_command_fills_csv_and_npy(tmp_path):
    rng = np.random.default_rng(0)
    t = rng.normal(size=(60, 1))
    X = np.hstack([t, 2 * t, t + 0.1 * rng.normal(size=(60, 1))])
    Xm = X.copy()
    Xm[rng.random(X.shape) < 0.2] = np.nan
    src = tmp_path / "in.csv"
    with open(src, "w") as f:
        f.write("a,b,c\n")
        for row in Xm:
            f.write(",".join("" if np.isnan(v) else repr(float(v)) for v in row) + "\n")
    out = tmp_path / "out.csv"
    assert main(["impute", str(src), str(out), "--quiet"]) == 0
    got = np.loadtxt(out, delimiter=",")
    obs = ~np.isnan(Xm)
    assert np.array_equal(got[obs], Xm[obs]) and np.all(np.isfinite(got))
    np.save(tmp_path / "in.npy", Xm)
    assert main(["impute", str(tmp_path / "in.npy"), str(tmp_path / "out.npy"), "--quiet", "--bandwidth", "1"]) == 0
    assert np.all(np.isfinite(np.load(tmp_path / "out.npy")))
    assert main(["impute", str(tmp_path / "in.npy"), str(tmp_path / "x.npy"), "--image-shape", "2", "2"]) == 2
    assert main(["impute", str(tmp_path / "in.npy"), str(tmp_path / "x.npy"), "--bandwidth", "wide"]) == 2


@pytest.mark.parametrize("method", ["medoidshift", "quickshift"])
@pytest.mark.parametrize("seed", [1, 2, 42])
def test_cluster_auto_bandwidth_finds_three_blobs(tmp_path, capsys, method, seed):
    # The quantile rule estimates a window radius; a Gaussian of that standard deviation
    # smoothed these blobs into one or two modes (the Gaussian's reach is 3 h).
    from sklearn.datasets import make_blobs
    from sklearn.metrics import adjusted_rand_score

    X, truth = make_blobs(n_samples=3000, centers=3, random_state=seed)
    pts, out = tmp_path / "blobs.npy", tmp_path / "labels.csv"
    np.save(pts, X)
    assert main(["cluster", str(pts), "--method", method, "--output", str(out), "--quiet"]) == 0
    labels = np.loadtxt(out, dtype=int)
    sizes = np.bincount(labels)
    assert np.sum(sizes >= 0.05 * len(X)) == 3, sizes
    assert adjusted_rand_score(truth, labels) > 0.85

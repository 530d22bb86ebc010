import subprocess
import sys

from localization.cli import main


def test_demo_reproduces_experiment_1(tmp_path, capsys):
    out = tmp_path / "demo.png"
    assert main(["demo", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "local linear" in text and "tour" in text
    diff = float(text.split("equivalent kernel| = ")[1].split()[0])
    assert diff < 1e-10
    assert out.exists() and out.stat().st_size > 10_000


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

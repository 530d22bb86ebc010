"""The typed public API: every public function and estimator method is annotated, the
native module's stub matches the extension (mypy's stubtest), and a user's script calling
the main entry points passes ``mypy --strict`` with the exact result types (no ``Any``)."""

import importlib
import inspect
import subprocess
import sys
import types
from pathlib import Path

import pytest

import localization

HERE = Path(__file__).parent
SCRIPT = HERE / "typing" / "user_script.py"
SUBPACKAGES = ["cluster", "embedding", "denoise", "kernels", "adaptive", "sequence", "memory", "generative", "fuzzy",
               "semi_supervised", "metrics", "text", "datasets"]


def _public_functions():
    modules = [localization] + [importlib.import_module(f"localization.{s}") for s in SUBPACKAGES]
    try:
        modules.append(importlib.import_module("localization.dask"))
    except ImportError:
        pass
    seen = set()
    for mod in modules:
        names = getattr(mod, "__all__", None) or [
            k for k, v in vars(mod).items() if not k.startswith("_") and getattr(v, "__module__", None) == mod.__name__]
        for name in names:
            obj = getattr(mod, name)
            if isinstance(obj, types.ModuleType) or id(obj) in seen:
                continue
            seen.add(id(obj))
            if inspect.isclass(obj):
                for k, v in vars(obj).items():
                    f = v.fget if isinstance(v, property) else v
                    if inspect.isfunction(f) and (not k.startswith("_") or k == "__init__"):
                        yield f"{mod.__name__}.{name}.{k}", f
            elif inspect.isfunction(obj):
                yield f"{mod.__name__}.{name}", obj


def test_every_public_function_and_method_is_annotated():
    missing = [name for name, f in _public_functions()
               if f.__module__.startswith("localization") and "return" not in f.__annotations__]
    assert not missing, missing


def test_py_typed_marker_is_in_the_package():
    assert (Path(localization.__file__).parent / "py.typed").is_file()


def _mypy(*args):
    pytest.importorskip("mypy")
    return subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", *args], capture_output=True, text=True,
                          cwd=HERE.parent)


@pytest.mark.slow
def test_stub_matches_the_extension():
    pytest.importorskip("mypy")
    out = subprocess.run([sys.executable, "-m", "mypy.stubtest", "localization._core"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_user_script_passes_mypy_strict_and_runs(tmp_path):
    out = _mypy("--strict", str(SCRIPT))
    assert out.returncode == 0, out.stdout + out.stderr
    ran = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.strip() == "ok", ran.stdout + ran.stderr
    # The check can fail: a wrong expected type is reported.
    broken = tmp_path / "broken.py"
    broken.write_text(SCRIPT.read_text().replace("assert_type(m, Floats)", "assert_type(m, int)"))
    out = _mypy("--strict", str(broken))
    assert out.returncode == 1 and "assert-type" in out.stdout, out.stdout

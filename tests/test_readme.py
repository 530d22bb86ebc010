"""The README's quick start runs as written."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.skipif(not README.is_file(), reason="README.md is not next to tests/ (tests copied without it)")
def test_readme_quick_start_runs():
    code = re.search(r"## Quick start\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    exec(compile(code, "README.md", "exec"), {})


def test_every_public_name_resolves():
    import localization

    missing = [name for name in localization.__all__ if not hasattr(localization, name)]
    assert not missing
    assert sorted(localization.__all__) == sorted(set(localization.__all__))

"""The installed distribution: licence, metadata and dependency floors as users receive them."""

import importlib.metadata as md
import re

import localization

DIST = "localization-methods"
REQUIREMENT = re.compile(r"^([A-Za-z0-9._-]+)\s*(?:\[[^\]]*\])?\s*([^;]*)(?:;\s*(.*))?$")


def requirements():
    """(name, specifiers, marker) for every Requires-Dist of the installed distribution."""
    out = []
    for req in md.requires(DIST):
        name, spec, marker = REQUIREMENT.match(req).groups()
        out.append((name.lower(), spec.strip(), marker or ""))
    return out


def test_version_matches_the_metadata():
    assert localization.__version__ == md.version(DIST)


def test_licence_ships_with_the_distribution():
    dist = md.distribution(DIST)
    assert dist.metadata["License-Expression"] == "MIT"
    assert dist.metadata.get_all("License-File") == ["LICENSE"]
    text = dist.read_text("licenses/LICENSE")
    assert text is not None and text.startswith("MIT License") and "WITHOUT WARRANTY" in text


def test_every_dependency_declares_a_floor():
    reqs = requirements()
    assert reqs
    for name, spec, _ in reqs:
        assert re.search(r">=\s*\d", spec), f"{name} declares no minimum version ({spec!r})"


def test_plotting_is_an_extra_and_scikit_learn_floor_is_honest():
    core = {name: spec for name, spec, marker in requirements() if "extra" not in marker}
    assert "matplotlib" not in core  # only the command line's figures use it: the `plot` extra
    assert any(name == "matplotlib" and "plot" in marker for name, _, marker in requirements())
    # `sklearn.utils.validation.validate_data` and the estimator tags arrived in scikit-learn 1.6.
    floor = tuple(int(p) for p in re.search(r">=\s*([\d.]+)", core["scikit-learn"]).group(1).split("."))
    assert floor >= (1, 6)

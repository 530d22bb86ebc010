"""Every difference the peer suites report is listed, with its reason, in docs/parity.md."""

import importlib
import pathlib
import re

import pytest

from . import peer_adapters


def _module(name):
    try:
        return vars(importlib.import_module(f"{__package__}.{name}"))
    except pytest.skip.Exception:  # the peer's tests are not installed
        return {}


def _flat(text):
    return re.sub(r"\s+", " ", text)


def test_every_reason_is_listed_in_the_docs():
    docs = _flat((pathlib.Path(__file__).parents[2] / "docs" / "parity.md").read_text())
    reasons = set(peer_adapters.REASONS)
    for path in pathlib.Path(__file__).parent.glob("test_peer_*.py"):
        reasons |= set(_module(path.stem).get("XFAIL", {}).values())
    missing = [r for r in reasons if _flat(r) not in docs]
    assert not missing, f"reasons missing from docs/parity.md: {missing}"

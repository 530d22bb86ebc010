"""Every difference the peer suites report is listed, with its reason, in docs/parity.md."""

import pathlib
import re
import types

import pytest

import peer_adapters


def _flat(text):
    return re.sub(r"\s+", " ", text)


def test_every_reason_is_listed_in_the_docs():
    docs = _flat((pathlib.Path(__file__).parents[2] / "docs" / "parity.md").read_text())
    reasons = set(peer_adapters.REASONS)
    for path in pathlib.Path(__file__).parent.glob("test_peer_*.py"):
        if path.name == pathlib.Path(__file__).name:
            continue
        source = path.read_text()
        module = types.ModuleType(path.stem)
        try:
            exec(compile(source, str(path), "exec"), module.__dict__)
        except pytest.skip.Exception:
            continue
        reasons |= set(getattr(module, "XFAIL", {}).values())
    missing = [r for r in reasons if _flat(r) not in docs]
    assert not missing, f"reasons missing from docs/parity.md: {missing}"

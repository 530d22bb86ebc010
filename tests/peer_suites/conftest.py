"""The peers' own test suites, run against this library (see peer_adapters).

Each test module here imports a peer's installed test module, adopts its test functions and
declares, in module-level names read below:

``SUBSTITUTE``  (namespace, name, ours) triples: while a test runs, ``namespace.name`` is ours;
                parametrisations that captured the peer's object at import get ours too.
``XFAIL``       test name, or a regular expression matching the name with its parameters
                → reason: a documented difference (strict: the test must fail; the reasons are
                listed in docs/parity.md).
``NOT_OFFERED`` peer estimators this library does not offer: parametrisations over them, and
                tests that only exercise the peer's own code, are skipped as not applicable.
"""

import dis
import re

import numpy as np
import pytest
from .peer_adapters import Unsupported


@pytest.fixture(params=[np.float32, np.float64])
def global_dtype(request):
    """scikit-learn's fixture (its suite runs float32 on request; ours supports both)."""
    return request.param


@pytest.fixture
def global_random_seed():
    """scikit-learn's fixture at its default seed."""
    return 42


def pytest_configure(config):
    for mark in ("thread_unsafe", "joblib", "singleton_randomstate"):
        config.addinivalue_line("markers", f"{mark}: a marker of the peer test suites")


def _names(code, namespace, seen=None):
    """Global and attribute names a function's code refers to, through its nested code and the
    helper functions of its own module that it calls."""
    seen = set() if seen is None else seen
    if code in seen:
        return set()
    seen.add(code)
    out = set(code.co_names)
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            out |= _names(c, namespace, seen)
    for name in code.co_names:
        helper = namespace.get(name)
        if callable(helper) and getattr(helper, "__globals__", None) is namespace:
            out |= _names(helper.__code__, namespace, seen)
    return out


def _loads(code, name):
    return any(i.argval == name for i in dis.get_instructions(code) if i.opname.startswith("LOAD_FAST"))


def _swap(value, ours):
    """The peer's class or estimator instance → ours (instances keep their parameters)."""
    if isinstance(value, type):
        return ours.get(value, value)
    if type(value) in ours:
        return ours[type(value)](**value.get_params())
    return value


@pytest.fixture(autouse=True)
def _ours(request, monkeypatch):
    for namespace, name, value in getattr(request.module, "SUBSTITUTE", ()):
        monkeypatch.setattr(namespace, name, value)


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module
        subs = getattr(module, "SUBSTITUTE", None)
        if subs is None:
            continue
        theirs = {getattr(ns, name): value for ns, name, value in subs if isinstance(getattr(ns, name), type)}
        offered = {name for _, name, _ in subs}
        not_offered = tuple(getattr(module, "NOT_OFFERED", ()))
        func = getattr(item, "function", None)
        code = func.__code__
        params = getattr(getattr(item, "callspec", None), "params", {})
        for key, value in list(params.items()):
            if (isinstance(value, type) and issubclass(value, not_offered)) or isinstance(value, not_offered):
                item.add_marker(pytest.mark.skip(reason=f"not applicable: {getattr(value, '__name__', type(value).__name__)} "
                                                        "is not offered by this library"))
            params[key] = _swap(value, theirs)
        uses_ours = bool(_names(code, func.__globals__) & offered) or any(
            (v in theirs.values() or type(v) in theirs.values()) and _loads(code, k) for k, v in params.items()
        )
        if not uses_ours:
            item.add_marker(pytest.mark.skip(reason="not applicable: exercises only the peer's own code"))
        base = item.name.split("[")[0]
        reason = next((r for key, r in getattr(module, "XFAIL", {}).items() if key == base or re.fullmatch(key, item.name)), None)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))


def _unsupported(exc):
    """The Unsupported exception behind a failure, if any (pytest.warns or pytest.raises
    blocks replace it with their own failure, keeping it as the context)."""
    while exc is not None:
        if isinstance(exc, Unsupported):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    cause = _unsupported(call.excinfo.value) if call.excinfo is not None else None
    if cause is not None and report.failed:
        report.outcome = "skipped"
        report.wasxfail = f"not offered: {cause}"

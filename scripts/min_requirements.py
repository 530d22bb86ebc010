"""Print pip constraints pinning every declared dependency to its declared floor.

    python scripts/min_requirements.py            # the runtime dependencies and the `test` extra
    python scripts/min_requirements.py plot dask  # the runtime dependencies and these extras

CI installs the package under these constraints (`pip install -c FILE 'WHEEL[test]'`) and runs
the test suite, so a floor in pyproject.toml is a version the tests have passed with, not a
guess. Every dependency must declare a floor (``>=``); one without is an error. A package
declared twice (e.g. in two extras) is pinned to the higher floor.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# name, [extras], version specifiers, ; marker
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([^;]*?)\s*(;.*)?$")


def floors(requirements):
    """{normalised name: (floor version, marker)} from PEP 508 strings; floors are ``>=`` bounds."""
    out = {}
    for req in requirements:
        m = REQUIREMENT.match(req)
        if not m:
            raise SystemExit(f"min_requirements: cannot parse requirement {req!r}")
        name, spec, marker = m.group(1), m.group(2), (m.group(3) or "").strip()
        lower = [s.strip()[2:].strip() for s in spec.split(",") if s.strip().startswith(">=")]
        if len(lower) != 1:
            raise SystemExit(f"min_requirements: {req!r} declares no single `>=` floor; every dependency needs one")
        key = re.sub(r"[-_.]+", "-", name).lower()
        version = lower[0]
        if key in out and _as_tuple(out[key][0]) >= _as_tuple(version):
            continue
        out[key] = (version, marker)
    return out


def _as_tuple(version):
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))


def main(argv):
    extras = argv or ["test"]
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"min_requirements: no extra named {', '.join(unknown)} (have: {', '.join(optional)})")
    reqs = list(project.get("dependencies", []))
    for extra in extras:
        reqs += optional[extra]
    for name, (version, marker) in sorted(floors(reqs).items()):
        print(f"{name}=={version}{' ' + marker if marker else ''}")


if __name__ == "__main__":
    main(sys.argv[1:])

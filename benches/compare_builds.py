"""Two builds of the package timed against each other (e.g. two release profiles).

    pip install --no-deps --target /tmp/a dist_a/*.whl
    pip install --no-deps --target /tmp/b dist_b/*.whl
    python benches/compare_builds.py /tmp/a /tmp/b            # 6 rounds, one thread
    python benches/compare_builds.py /tmp/a /tmp/b --rounds 3 --threads 2

Each round runs every case once in a fresh process per build, the builds alternating, so slow
phases of a shared machine hit both alike; the table keeps each case's best time over rounds.
"""

import argparse
import json
import os
import subprocess
import sys

CASES = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
import localization
from localization import _core
assert localization.__file__.startswith(sys.argv[1]), localization.__file__
rng = np.random.default_rng(0)
X = rng.random((20_000, 2), dtype=np.float32); V = rng.random((20_000, 1), dtype=np.float32)
X64 = rng.random((6_000, 64), dtype=np.float32); V64 = rng.random((6_000, 1), dtype=np.float32)
Xk = rng.random((200_000, 3))
cases = {
    "gaussian pair loop, d=2, n=m=2e4": lambda: _core.local_sums(X, X, V, kernel=_core.KernelSpec("gaussian", 0.5), algorithm="brute"),
    "gaussian series (auto), d=2": lambda: _core.local_sums(X, X, V, kernel=_core.KernelSpec("gaussian", 0.5)),
    "gaussian h=0.01 (box skipping), d=2": lambda: _core.local_sums(X, X, V, kernel=_core.KernelSpec("gaussian", 0.01)),
    "gaussian pair loop, d=64, n=m=6e3": lambda: _core.local_sums(X64, X64, V64, kernel=_core.KernelSpec("gaussian", 4.0)),
    "epanechnikov local_mean (kd-tree), d=3, n=2e5": lambda: localization.local_mean(Xk[:50_000], Xk, Xk[:, 0], kernel="epanechnikov", bandwidth=0.03),
}
out = {}
for name, f in cases.items():
    f()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter(); f(); best = min(best, time.perf_counter() - t)
    out[name] = best
print(json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="directory holding build A's `localization` package")
    ap.add_argument("b", help="directory holding build B's `localization` package")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    env = dict(os.environ, LOCALIZATION_NUM_THREADS=str(args.threads))
    best = {"a": {}, "b": {}}
    for r in range(args.rounds):
        for which in ("a", "b"):
            res = subprocess.run([sys.executable, "-c", CASES, getattr(args, which)], env=env,
                                 capture_output=True, text=True, check=True)
            for name, t in json.loads(res.stdout).items():
                best[which][name] = min(t, best[which].get(name, float("inf")))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"best of {args.rounds} rounds × 3 runs, {args.threads} thread(s); A = {args.a}, B = {args.b}")
    print(f"{'case':<48} {'A (s)':>9} {'B (s)':>9} {'B/A':>6}")
    for name, ta in best["a"].items():
        tb = best["b"][name]
        print(f"{name:<48} {ta:9.4f} {tb:9.4f} {tb / ta:6.2f}")


if __name__ == "__main__":
    main()

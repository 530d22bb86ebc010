"""The iterated local means, timed in whichever build of the package is imported.

Run it once per build (e.g. with ``PYTHONPATH`` pointing at an older tree and its extension)
to compare: MeanShift's engine path (Gaussian kernel, binned seeds climbing against every
point), the non-blurring ``SelfLocalMean`` (fit and predict), and the iterations whose values
change every step against samples that stay, ``LabelPropagation`` and the fixed-kernel
diffusion (``MeanShift(fixed_kernel=True)``), Gaussian and Epanechnikov, on all n points.
Best of ``--repeat`` in wall and CPU time, with the load. ``--only`` runs the cases whose
name contains it.

Usage: python benches/bench_iterations.py [--n 100000] [--repeat 3] [--only LabelPropagation]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np

import localization
from localization.cluster import MeanShift
from localization.denoise import SelfLocalMean
from localization.semi_supervised import LabelPropagation


def timed(f, repeat):
    best, cpu = np.inf, np.inf
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        f()
        best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return best, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.n
    centres = rng.uniform(-6, 6, (8, 2))
    X = centres[rng.integers(0, 8, n)] + 0.7 * rng.standard_normal((n, 2))
    m = n // 10
    x1 = np.sort(rng.uniform(0, 10, m))[:, None]
    y1 = np.sign(np.sin(x1[:, 0])) + 0.3 * rng.standard_normal(m)
    labels = np.full(n, -1)
    labels[rng.choice(n, 200, replace=False)] = 0
    labels[np.abs(X[:, 0] - centres[0, 0]) < 0.1] = 1
    slm = SelfLocalMean(spatial_bandwidth=0.05, range_bandwidth=0.3, max_iter=30)
    fitted = SelfLocalMean(spatial_bandwidth=0.05, range_bandwidth=0.3, max_iter=30).fit(x1, y1)
    cases = {
        "MeanShift gaussian, binned seeds": lambda: MeanShift(bandwidth=1.0, kernel="gaussian", bin_seeding=True).fit(X),
        f"SelfLocalMean.fit (n = {m:,}, 1-D, 30 it)": lambda: slm.fit(x1, y1),
        f"SelfLocalMean.predict ({m // 100:,} queries)": lambda: fitted.predict(x1[::100] + 1e-3),
        f"LabelPropagation gaussian (n = {n // 20:,}, 10 it)":
            lambda: LabelPropagation(bandwidth=0.3, max_iter=10).fit(X[: n // 20], labels[: n // 20]),
    }
    # All n points, 5 steps each (tol=0: no early stop); bandwidths for which the steps are not
    # dominated by pairs far beyond the clusters' scale.
    for kernel, h in [("gaussian", 0.05), ("epanechnikov", 0.2)]:
        cases[f"LabelPropagation {kernel} h={h} (n = {n:,}, 5 it)"] = (
            lambda k=kernel, h=h: LabelPropagation(kernel=k, bandwidth=h, max_iter=5, tol=0.0).fit(X, labels))
        cases[f"MeanShift fixed_kernel {kernel} h={h} (n = {n:,}, 5 it)"] = (
            lambda k=kernel, h=h: MeanShift(kernel=k, bandwidth=h, fixed_kernel=True, max_iter=5, tol=0.0).fit(X))
    cases = {name: f for name, f in cases.items() if args.only in name}
    print(f"localization from {os.path.dirname(localization.__file__)}; n = {n:,}; load {os.getloadavg()[0]:.2f}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, f in cases.items():
            wall, cpu = timed(f, args.repeat)
            print(f"  {name:45s} wall {wall * 1e3:9.1f} ms   cpu {cpu * 1e3:9.1f} ms")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

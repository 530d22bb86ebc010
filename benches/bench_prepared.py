"""Repeated small predictions on a large fitted model: raw samples per call against the prepared
reference kept at fit (same process, same data, same estimator).

    python benches/bench_prepared.py            # n = 10⁶ 2-D points, 8 queries
    python benches/bench_prepared.py --n 200000 --m 64

"Raw" is the fitted estimator with its prepared references switched off: every call hands the
engine the samples, which lays them out again (spatial order, tiles, boxes; the kd-tree for a
compact kernel). Before this change a call also re-bound the kernel (bandwidth rules, per-sample
bandwidths), so the raw figures understate the old cost. Times are the best of several calls
after a first one (the first prepared call builds its path's layout, printed separately).
"""

import argparse
import os
import time

import numpy as np
from _common import best_time

from localization.density import KernelDensity
from localization.regression import LocalMeanRegressor


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--m", type=int, default=8)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=args.n)
    Q = rng.normal(size=(args.m, 2))
    print(f"n = {args.n:,} 2-D normal points, {args.m} queries, float64; load average {os.getloadavg()[0]:.1f}")
    print(f"{'estimator':<44} {'raw':>10} {'prepared':>10} {'ratio':>7} {'first':>9}")
    cases = [
        (LocalMeanRegressor, "predict", "gaussian", 0.1),
        (LocalMeanRegressor, "predict", "gaussian", 0.01),
        (LocalMeanRegressor, "predict", "epanechnikov", 0.1),
        (KernelDensity, "score_samples", "gaussian", 0.1),
        (KernelDensity, "score_samples", "gaussian", 0.01),
        (KernelDensity, "score_samples", "epanechnikov", 0.1),
    ]
    for cls, method, kernel, h in cases:
        est = cls(kernel=kernel, bandwidth=h)
        est.fit(X, y) if cls is LocalMeanRegressor else est.fit(X)
        call = getattr(est, method)
        t = time.perf_counter()
        first = call(Q)
        t_first = time.perf_counter() - t
        t_prep, out = best_time(lambda: call(Q), 7)
        bk = est._bound()
        kept, bk._references = bk._references, None
        t_raw, raw = best_time(lambda: call(Q), 3)
        bk._references = kept
        assert np.array_equal(out, first)
        # auto may take the prepared kd-tree where the raw call would not build one: exact either way
        np.testing.assert_allclose(out, raw, rtol=1e-12, atol=0)
        name = f"{cls.__name__}({kernel}, h={h}).{method}"
        print(f"{name:<44} {t_raw * 1e3:8.1f} ms {t_prep * 1e3:7.2f} ms {t_raw / t_prep:6.0f}x {t_first * 1e3:7.0f} ms")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

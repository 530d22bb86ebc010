"""The Epanechnikov local mean at n = m = 10⁷ in 2-D with a fixed h = 0.01 (issue 17, item 4).

Uniform samples on the unit square with one value column, queries a second uniform set of the
same size. Prints the wall and CPU time of `local_mean` (``algorithm="auto"``), the peak RSS of
the process before and after the call (the inputs are counted in the first), and checks 50
queries against the definition evaluated directly over the samples within reach.

    python benches/bench_compact_large.py              # n = m = 10⁷
    python benches/bench_compact_large.py --n 1000000  # a smaller size
"""

import argparse
import resource
import time

import numpy as np

from localization import local_mean


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--h", type=float, default=0.01)
    parser.add_argument("--n-jobs", type=int, default=None)
    args = parser.parse_args()
    n, h = args.n, args.h
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(n, 2))
    V = rng.normal(size=(n, 1))
    Q = rng.uniform(size=(n, 2))
    before = peak_rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    mean = local_mean(Q, X, V, kernel="epanechnikov", bandwidth=h, n_jobs=args.n_jobs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    after = peak_rss_mb()
    inputs = (X.nbytes + V.nbytes + Q.nbytes + mean.nbytes) / 2**20
    print(f"n = m = {n}, d = 2, epanechnikov h = {h}: {wall:.1f} s wall, {cpu:.1f} s CPU; peak RSS {before:.0f} MB "
          f"before the call (inputs {inputs:.0f} MB with the output), {after:.0f} MB after "
          f"(+{after - before:.0f} MB)", flush=True)
    worst = 0.0
    for i in rng.choice(n, 50, replace=False):
        d2 = ((X - Q[i]) ** 2).sum(axis=1)
        k = np.maximum(1.0 - d2 / h**2, 0.0)
        want = (k @ V[:, 0]) / k.sum() if k.sum() > 0 else np.nan
        worst = max(worst, abs(mean[i, 0] - want) / max(1.0, abs(want)))
    print(f"  50 queries against the definition: max error {worst:.1e}")


if __name__ == "__main__":
    main()

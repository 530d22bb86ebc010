"""localization.dask on a LocalCluster against the in-memory call in the same process run.

    python benches/bench_dask.py            # small sizes, about a minute
    python benches/bench_dask.py --full     # the sizes of the targets (minutes, ~6 GB of RAM)

1. Gaussian KDE, d = 2, points uniform on [0, 100]², h = 0.1: references sharded on the
   workers (full: 10⁷ references in 10 shards, 10⁵ queries in one chunk) against
   KernelDensity in memory on the same data; the overhead ratio (target ≤ 1.5×) and the
   largest difference.
2. MeanShift, grid seeding, d = 2, on points held as a chunked dask array on the workers
   (full: 10⁸ points); time, peak memory of each worker process, and the in-memory
   MeanShift on 10⁷ points for comparison.
3. Scaling: each distributed figure on 1 and on 2 worker processes (1 thread each).

The in-memory calls use every core (n_jobs=None); the cluster's workers one thread each, so
both sides have the machine's 2 cores.
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np

import dask
import dask.array as da
from distributed import Client, LocalCluster, wait

from localization import KernelDensity, MeanShift
from localization import dask as ldask

H_KDE = 0.1
CENTRES = np.array([[8.0 * (i % 5), 8.0 * (i // 5)] for i in range(10)])


def blobs(n, chunk, seed=0):
    """10 Gaussian blobs in 2-D, generated on the workers chunk by chunk."""
    rng = da.random.default_rng(seed)
    which = rng.integers(0, 10, size=n, chunks=chunk)
    return da.from_array(CENTRES, chunks=-1)[which] + rng.normal(size=(n, 2), chunks=(chunk, 2))


def uniform(n, chunk, seed):
    """Points uniform on [0, 100]², generated on the workers chunk by chunk."""
    return da.random.default_rng(seed).uniform(0.0, 100.0, size=(n, 2), chunks=(chunk, 2))


def _vm_hwm_mb():
    # The process's own peak RSS. (getrusage's ru_maxrss is no good here: Linux carries it
    # over from the parent that spawned the worker.)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM"))


def peak_rss_mb(client):
    """Peak resident memory of every worker process so far (MB)."""
    return sorted(client.run(_vm_hwm_mb).values())


def timed(f):
    t = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t


def kde_case(client, n, m, chunk, repeat):
    X = uniform(n, chunk, seed=1).persist()
    Q = uniform(m, m, seed=2).persist()
    wait([X, Q])
    kde, t_fit = timed(lambda: ldask.KernelDensity(bandwidth=H_KDE).fit(X))
    best = float("inf")
    for _ in range(repeat):
        out, t = timed(lambda: kde.score_samples(Q).compute())
        best = min(best, t)
    return out, t_fit, best


def mean_shift_case(client, n, chunk):
    X = blobs(n, chunk, seed=3).persist()
    wait(X)

    def fit():
        ms = ldask.MeanShift(bandwidth=1.0, algorithm="grid").fit(X)
        # Every point's label, counted on the workers (never gathered).
        da.bincount(ms.labels_, minlength=len(ms.cluster_centers_)).compute()
        return ms

    return timed(fit)


def cluster(workers):
    c = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                     silence_logs=logging.ERROR, memory_limit="10GB")
    client = Client(c)
    client.run(lambda: __import__("localization.dask"))
    return c, client


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--skip-kde", action="store_true")
    ap.add_argument("--skip-meanshift", action="store_true")
    ap.add_argument("--kde-queries", type=int, default=None, help="queries of the KDE (default: 10⁵ with --full, else 10⁴)")
    ap.add_argument("--repeat", type=int, default=None, help="best of this many timings (default: 3, 1 with --full)")
    args = ap.parse_args()
    repeat = args.repeat or (1 if args.full else 3)
    n_kde, m_kde = (10_000_000, 100_000) if args.full else (1_000_000, 10_000)
    m_kde = args.kde_queries or m_kde
    n_ms, n_ms_local = (100_000_000, 10_000_000) if args.full else (4_000_000, 1_000_000)
    chunk = 1_000_000 if args.full else 250_000

    if not args.skip_kde:
        # In memory: the same points, one process, every core.
        Xl, Ql = dask.compute(uniform(n_kde, chunk, seed=1), uniform(m_kde, m_kde, seed=2))
        ref, t_local = timed(lambda: KernelDensity(bandwidth=H_KDE).fit(Xl).score_samples(Ql))
        for _ in range(repeat - 1):
            t_local = min(t_local, timed(lambda: KernelDensity(bandwidth=H_KDE).fit(Xl).score_samples(Ql))[1])
        del Xl
        print(f"[1] Gaussian KDE, {n_kde:,} references ({n_kde // chunk} shards), {m_kde:,} queries, d = 2, "
              f"uniform on [0, 100]², h = {H_KDE}")
        print(f"    in memory (2 threads): {t_local:.2f} s (fit + score, best of {repeat})")
        for w in args.workers:
            c, client = cluster(w)
            try:
                out, t_fit, t = kde_case(client, n_kde, m_kde, chunk, repeat)
                rss = peak_rss_mb(client)
            finally:
                client.close()
                c.close()
            diff = np.max(np.abs(out - ref) / np.abs(ref))
            print(f"    {w} worker(s): fit {t_fit:.2f} s, score {t:.2f} s (best of {repeat}), overhead "
                  f"{(t_fit + t) / t_local:.2f}x (score alone {t / t_local:.2f}x), max rel diff {diff:.1e}, "
                  f"peak RSS per worker {', '.join(f'{r:.0f}' for r in rss)} MB")

    if not args.skip_meanshift:
        print(f"[2] MeanShift, grid seeding, flat kernel, h = 1, 10 blobs in 2-D")
        Xl = blobs(n_ms_local, chunk, seed=3).compute()
        local, t_local = timed(lambda: MeanShift(bandwidth=1.0, algorithm="grid").fit(Xl))
        print(f"    in memory on {n_ms_local:,} points (2 threads): {t_local:.2f} s, "
              f"{len(local.cluster_centers_)} clusters")
        del Xl, local
        for w in args.workers:
            c, client = cluster(w)
            try:
                ms, t = mean_shift_case(client, n_ms, chunk)
                rss = peak_rss_mb(client)
            finally:
                client.close()
                c.close()
            print(f"    {w} worker(s), {n_ms:,} points in {n_ms // chunk} chunks: fit + labels {t:.1f} s "
                  f"({t / t_local:.1f}x the in-memory call on {n_ms_local:,}), {len(ms.cluster_centers_)} clusters, "
                  f"{len(ms.seeds_):,} cells, {ms.n_iter_} iterations, peak RSS per worker "
                  f"{', '.join(f'{r:.0f}' for r in rss)} MB")


if __name__ == "__main__":
    main()

"""MeanShift against scikit-learn (same data, same process).

    python benches/bench_meanshift.py          # default sizes, under a minute
    python benches/bench_meanshift.py --full   # scikit-learn on the full sizes too (slow)

1. 10 blobs in 2-D, flat kernel, bin seeding: ours on 10⁶ points; scikit-learn
   (n_jobs=2) on 3·10⁴ by default (10⁶ with --full), both on the same points, same result.
2. algorithm="grid" on the 10⁶ points: time and agreement with the exact run.
3. Every point a seed, 2·10⁴ points (scikit-learn: 1,000 by default, 2·10⁴ with --full).
4. Gaussian MeanShift, 10⁵ points in d = 8: kernel pairs per second, against a blocked
   numpy implementation of the same iteration (scikit-learn has no gaussian MeanShift).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.cluster import MeanShift as SkMeanShift
from sklearn.metrics import adjusted_rand_score

from localization import MeanShift


def blobs(n, d=2, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[8.0 * (i % 5), 8.0 * (i // 5)] + [0.0] * (d - 2) for i in range(10)])
    return centres[rng.integers(0, 10, n)] + rng.normal(size=(n, d))


def timed(f):
    t = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t


def same(a_centres, a_labels, b_centres, b_labels):
    return a_centres.shape == b_centres.shape and np.allclose(a_centres, b_centres, atol=1e-6) and np.array_equal(a_labels, b_labels)


def bench_bin_seeding(full):
    X = blobs(1_000_000)
    ours, t_ours = timed(lambda: MeanShift(bandwidth=1.0, bin_seeding=True).fit(X))
    print(f"[1] bin seeding, flat, 10 blobs: ours on 10⁶ points {t_ours:.2f} s, {len(ours.cluster_centers_)} clusters, "
          f"{len(ours.seeds_)} seeds")
    n_sk = 1_000_000 if full else 30_000
    Xs = X[:n_sk]
    mine, t_mine = timed(lambda: MeanShift(bandwidth=1.0, bin_seeding=True).fit(Xs))
    sk, t_sk = timed(lambda: SkMeanShift(bandwidth=1.0, bin_seeding=True, n_jobs=2).fit(Xs))
    print(f"    on {n_sk:,} points: ours {t_mine:.2f} s, scikit-learn {t_sk:.2f} s, ratio {t_sk / t_mine:.1f}×, "
          f"same centres and labels: {same(mine.cluster_centers_, mine.labels_, sk.cluster_centers_, sk.labels_)}")
    return X, ours


def bench_grid(X, exact):
    g, t = timed(lambda: MeanShift(bandwidth=1.0, algorithm="grid").fit(X))
    def top10(m):
        return m.cluster_centers_[np.argsort(-np.bincount(m.labels_))[:10]]

    big, ref = top10(g), top10(exact)
    err = max(np.min(np.linalg.norm(big - c, axis=1)) for c in ref)
    print(f"[2] grid, every point's cell a seed, 10⁶ points: {t:.2f} s ({len(g.seeds_):,} cells, "
          f"{len(g.cluster_centers_)} clusters); largest offset between the 10 main modes and the exact run's {err:.3f} (h = 1); "
          f"ARI vs exact {adjusted_rand_score(exact.labels_, g.labels_):.4f}")


def bench_all_seeds(full):
    X = blobs(20_000, seed=1)
    ours, t_ours = timed(lambda: MeanShift(bandwidth=1.0, label_assignment="nearest").fit(X))
    print(f"[3] every point a seed, flat: ours on 20,000 points {t_ours:.2f} s, {len(ours.cluster_centers_)} clusters")
    n_sk = 20_000 if full else 1_000
    Xs = X[:n_sk]
    mine, t_mine = timed(lambda: MeanShift(bandwidth=1.0, label_assignment="nearest").fit(Xs))
    sk, t_sk = timed(lambda: SkMeanShift(bandwidth=1.0, n_jobs=2).fit(Xs))
    print(f"    on {n_sk:,} points: ours {t_mine:.3f} s, scikit-learn {t_sk:.2f} s, ratio {t_sk / t_mine:.0f}×, "
          f"identical centres and labels: {same(mine.cluster_centers_, mine.labels_, sk.cluster_centers_, sk.labels_)}")


def numpy_gaussian_step(S, X, h, block=256):
    out = np.empty_like(S)
    xn = np.sum(X**2, axis=1)
    for a in range(0, len(S), block):
        q = S[a : a + block]
        d2 = np.sum(q**2, axis=1)[:, None] + xn[None] - 2 * q @ X.T
        logk = -0.5 * d2 / h**2
        k = np.exp(logk - logk.max(axis=1, keepdims=True))
        out[a : a + block] = (k @ X) / k.sum(axis=1, keepdims=True)
    return out


def bench_gaussian():
    X = blobs(100_000, d=8, seed=2)
    seeds = X[:: 500].copy()
    iters = 5
    ms, t = timed(lambda: MeanShift(kernel="gaussian", bandwidth=1.0, seeds=seeds, max_iter=iters - 1, tol=0).fit(X))
    pairs = len(seeds) * len(X) * (int(ms.seed_n_iter_.max()) + 1)
    S = seeds.copy()
    _, t_np = timed(lambda: [S.__setitem__(slice(None), numpy_gaussian_step(S, X, 1.0)) for _ in range(iters)])
    pairs_np = len(seeds) * len(X) * iters
    print(f"[4] gaussian, 10⁵ points, d = 8, {len(seeds):,} seeds × {iters} iterations: ours {pairs / t / 1e9:.2f}·10⁹ pairs/s "
          f"({t:.2f} s), numpy blocked {pairs_np / t_np / 1e9:.2f}·10⁹ pairs/s ({t_np:.2f} s), ratio {(pairs / t) / (pairs_np / t_np):.1f}×; "
          f"max |ours − numpy| = {np.max(np.abs(ms.seed_modes_ - S)):.1e}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--full", action="store_true", help="run scikit-learn on the full sizes (minutes)")
    args = p.parse_args()
    X, exact = bench_bin_seeding(args.full)
    bench_grid(X, exact)
    bench_all_seeds(args.full)
    bench_gaussian()


if __name__ == "__main__":
    main()

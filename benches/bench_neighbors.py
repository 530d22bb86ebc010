"""Exact kNN (k=10, queries = the fitted points): ours vs scipy cKDTree(workers=2) and scikit-learn KDTree.

    python benches/bench_neighbors.py          # n = 100,000, d = 2, 4, 8 (--full adds 16)
"""

import argparse

import numpy as np
from _common import best_time, report
from scipy.spatial import cKDTree
from sklearn.neighbors import KDTree

from localization import NearestNeighbors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--full", action="store_true", help="also d = 16 (slow for every tree)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n, k = args.n, 10
    for d in (2, 4, 8, 16) if args.full else (2, 4, 8):
        X = rng.random((n, d))
        t_ours, (do, io) = best_time(lambda: NearestNeighbors(n_neighbors=k).fit(X).kneighbors(X), 2)
        t_sp, (ds, is_) = best_time(lambda: cKDTree(X).query(X, k=k, workers=2), 2)
        t_sk, _ = best_time(lambda: KDTree(X).query(X, k=k), 1)
        same = np.mean(io == is_)
        report(f"kNN k={k} n={n} d={d} (build + query)", t_ours, t_sp, "scipy cKDTree(workers=2)")
        report("", t_ours, t_sk, "sklearn KDTree")
        print(f"  identical indices: {same:.4%}, max distance diff {np.max(np.abs(do - ds)):.1e}")


if __name__ == "__main__":
    main()

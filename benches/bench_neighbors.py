"""Exact kNN (k=10): ours vs scipy cKDTree(workers=2) and scikit-learn KDTree in low dimensions
(queries = the fitted points), and the blocked brute force against scikit-learn's brute force
(and faiss when installed) in high dimensions: Gaussian data in d = 64 and Fashion-MNIST (d = 784).

    python benches/bench_neighbors.py          # n = 100,000, d = 2, 4, 8 (--full adds 16); high d: n = 20,000
    python benches/bench_neighbors.py --high   # only the high-dimensional cases

Fashion-MNIST: the full training images when LOCALIZATION_DATA points at them, else the shipped 2,000.
"""

import argparse

import numpy as np
from _common import best_time, fashion_mnist, report
from scipy.spatial import cKDTree
from sklearn.neighbors import KDTree

from localization import NearestNeighbors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--full", action="store_true", help="also d = 16 (slow for every tree)")
    ap.add_argument("--high", action="store_true", help="only the high-dimensional cases")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n, k = args.n, 10
    for d in () if args.high else (2, 4, 8, 16) if args.full else (2, 4, 8):
        X = rng.random((n, d))
        t_ours, (do, io) = best_time(lambda: NearestNeighbors(n_neighbors=k).fit(X).kneighbors(X), 2)
        t_sp, (ds, is_) = best_time(lambda: cKDTree(X).query(X, k=k, workers=2), 2)
        t_sk, _ = best_time(lambda: KDTree(X).query(X, k=k), 1)
        same = np.mean(io == is_)
        report(f"kNN k={k} n={n} d={d} (build + query)", t_ours, t_sp, "scipy cKDTree(workers=2)")
        report("", t_ours, t_sk, "sklearn KDTree")
        print(f"  identical indices: {same:.4%}, max distance diff {np.max(np.abs(do - ds)):.1e}")
    high_dimensions(rng, k)


def high_dimensions(rng, k):
    from sklearn.neighbors import NearestNeighbors as SkNearestNeighbors

    fm, source = fashion_mnist(20_000)
    cases = [("d=64 Gaussian f32", rng.standard_normal((20_000, 64)).astype(np.float32)), ("d=784 Fashion-MNIST f32", fm)]
    print(f"Fashion-MNIST: {source}")
    for name, X in cases:
        Q = X[:2000]
        ours = NearestNeighbors(n_neighbors=k, algorithm="brute").fit(X)
        t_ours, (do, io) = best_time(lambda: ours.kneighbors(Q), 3)
        sk = SkNearestNeighbors(n_neighbors=k, algorithm="brute", n_jobs=2).fit(X)
        t_sk, (ds, is_) = best_time(lambda: sk.kneighbors(Q), 3)
        report(f"kNN k={k} n={len(X)} m={len(Q)} {name}", t_ours, t_sk, "sklearn brute(n_jobs=2)")
        print(f"  identical indices: {np.mean(io == is_):.4%}")
        try:
            import faiss
        except ImportError:
            continue
        index = faiss.IndexFlatL2(X.shape[1])
        index.add(X)
        t_f, _ = best_time(lambda: index.search(Q, k), 3)
        report("", t_ours, t_f, "faiss IndexFlatL2")


if __name__ == "__main__":
    main()

"""Exact kNN (k=10): ours vs scipy cKDTree(workers=2) and scikit-learn KDTree in low dimensions
(queries = the fitted points), and the blocked brute force against scikit-learn's brute force
and faiss ``IndexFlatL2`` (when installed) in high dimensions: Gaussian data in d = 64
(n = 100,000 references, 5,000 queries) and 10,000 Fashion-MNIST images against themselves
(d = 784), in float32 and float64 (faiss computes in float32 only: it gets the float32 data).
Same threads for everyone: ``n_jobs`` = faiss's OpenMP threads = scikit-learn's ``n_jobs``
(faiss's BLAS keeps its default, one thread per core). Wall times (best of 3) and, since the
machine may be shared, CPU times of the same runs.

    python benches/bench_neighbors.py          # n = 100,000, d = 2, 4, 8 (--full adds 16), then high d
    python benches/bench_neighbors.py --high   # only the high-dimensional cases

Fashion-MNIST: the full training images when --data or LOCALIZATION_DATA points at them, else the
shipped 2,000.
"""

import argparse
import time

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
    ap.add_argument("--threads", type=int, nargs="+", default=[2], help="thread counts for the high-d cases")
    ap.add_argument("--data", help="folder with the Fashion-MNIST IDX files (else LOCALIZATION_DATA)")
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
    for threads in args.threads:
        high_dimensions(np.random.default_rng(1), k, threads, args.data)


def timed(fn, repeat=3):
    """Best wall time and best CPU time (all threads of the process) of `repeat` runs."""
    wall, cpu, out = float("inf"), float("inf"), None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.process_time() - c)
    return wall, cpu, out


def high_dimensions(rng, k, threads=2, data=None):
    from sklearn.neighbors import NearestNeighbors as SkNearestNeighbors

    try:
        import faiss

        faiss.omp_set_num_threads(threads)
    except ImportError:
        faiss = None
    fm, source = fashion_mnist(10_000, data)
    g = rng.standard_normal((100_000, 64))
    print(f"Fashion-MNIST: {source}; threads: {threads}")
    for name, X, Q in [("d=64 Gaussian", g, g[:5000]), ("d=784 Fashion-MNIST", fm, fm)]:
        for dtype in (np.float32, np.float64):
            X, Q = X.astype(dtype), Q.astype(dtype)
            case = f"kNN k={k} n={len(X)} m={len(Q)} {name} {np.dtype(dtype).name}"
            ours = NearestNeighbors(n_neighbors=k, algorithm="brute", n_jobs=threads).fit(X)
            t_ours, c_ours, (do, io) = timed(lambda: ours.kneighbors(Q))
            peers = []
            if faiss is not None:
                index = faiss.IndexFlatL2(X.shape[1])
                index.add(np.ascontiguousarray(X, dtype=np.float32))
                Q32 = np.ascontiguousarray(Q, dtype=np.float32)
                t, c, (_, i_f) = timed(lambda: index.search(Q32, k))
                peers.append(("faiss IndexFlatL2 (f32)", t, c, i_f))
            if len(X) * len(Q) <= 10**8:
                sk = SkNearestNeighbors(n_neighbors=k, algorithm="brute", n_jobs=threads).fit(X)
                t, c, (_, i_s) = timed(lambda: sk.kneighbors(Q), 1)
                peers.append((f"sklearn brute(n_jobs={threads})", t, c, i_s))
            for i, (peer, t, c, idx) in enumerate(peers):
                report(case if i == 0 else "", t_ours, t, peer)
                print(f"  CPU: ours {c_ours:.2f} s, {peer} {c:.2f} s (ratio {c / c_ours:.2f}x); same indices {np.mean(io == idx):.4%}")


if __name__ == "__main__":
    main()

"""Embeddings against their peers, in one process on the same data (ratios printed).

* TripletEmbedding vs the ``trimap`` package (TRIMAP, numba + annoy): Fashion-MNIST test
  images, the same triplets per point (12 inliers × 4 outliers + 3 random) and 400
  iterations, run alternately; trustworthiness@10 (in the original 784-D space) and 10-NN
  accuracy of both. trimap's numba functions are compiled before timing (its import), so
  only the fit is timed. UMAP and openTSNE (where installed) on the same images, once each
  after a warm-up fit on 500 images.
* LocallyLinearEmbedding (k = 10) vs scikit-learn's (``eigen_solver="arpack"``), float64,
  with the reconstruction error of both.
* AsymmetricMDS (Frobenius) of a 20,000-word sparse co-occurrence matrix: time and peak
  memory (tracemalloc), against scikit-learn's TruncatedSVD(algorithm="arpack") of the same
  matrix; and of Oliver Twist's whole vocabulary.

Fashion-MNIST needs the IDX files (LOCALIZATION_DATA or --data); without them those parts
run on the 2,000 shipped images.

Usage: python benches/bench_embedding.py [--full] [--sizes N ...] [--peers trimap umap opentsne] [--only triplet lle amds] [--data DIR]
    --full: TripletEmbedding on all 70,000 images as well; --sizes: the TripletEmbedding sizes.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
import scipy.sparse as sp

from _common import report


def best_time(fn, repeat=3):
    """Best wall time of `repeat` runs, with the process CPU time (all threads) of that run.

    Wall time is what a user waits; on a machine shared by other work CPU seconds are the
    steadier measure of the work done (a thread spinning in a barrier counts too)."""
    best, out = (float("inf"), float("inf")), None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        best = min(best, (time.perf_counter() - t, time.process_time() - c))
    CPU.append(best[1])
    return best[0], out


CPU = []  # CPU seconds of the latest best_time calls


def report_cpu(name, peer_name):
    """The CPU-time line matching the last two best_time calls (ours, then the peer's)."""
    ours, peer = CPU[-2], CPU[-1]
    print(f"{'  ' + name + ' (CPU s)':<46} ours {ours:9.4f} s   {peer_name} {peer:9.4f} s   ratio {peer / ours:7.1f}x")


def fashion(n, data):
    from localization.datasets import load_fashion_mnist

    try:
        return load_fashion_mnist("all" if n > 10_000 else "test", n, data) + (True,)
    except FileNotFoundError:
        X, y = load_fashion_mnist("test", min(n, 2000))
        return X, y, False


def quality(X, Y, y):
    from localization.metrics import knn_accuracy, trustworthiness

    sample = 10_000 if len(X) > 20_000 else None
    return trustworthiness(X, Y, n_neighbors=10, sample_size=sample, random_state=0), knn_accuracy(Y, y, n_neighbors=10)


def timed(fn):
    """Wall and CPU seconds (all threads of the process) of one call, and its result."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t, time.process_time() - c, out


def other_peers(peers):
    """(name, X -> 2-D) of UMAP and openTSNE where installed and asked for in `peers`; the
    caller warms each up on 500 images first (UMAP compiles its numba functions at the first fit)."""
    out = []
    try:
        if "umap" not in peers:
            raise ImportError
        import umap

        # random_state fixes the result and makes UMAP run on one thread (its documented trade-off).
        out.append((f"UMAP {umap.__version__} (random_state=0)", lambda X: umap.UMAP(random_state=0).fit_transform(X)))
    except ImportError:
        print("  UMAP (umap-learn) not installed or not asked for: no row")
    try:
        if "opentsne" not in peers:
            raise ImportError
        import openTSNE

        out.append((f"openTSNE {openTSNE.__version__} (n_jobs=-1)",
                     lambda X: np.asarray(openTSNE.TSNE(random_state=0, n_jobs=-1).fit(X))))
    except ImportError:
        print("  openTSNE not installed or not asked for: no row")
    return out


def bench_triplet(n, data, repeat, peers):
    """TripletEmbedding and trimap alternately `repeat` times each (best of each kept), then
    UMAP and openTSNE once; trustworthiness@10 in the original 784-D space."""
    from localization import TripletEmbedding

    X, y, full = fashion(n, data)
    print(f"\nTripletEmbedding vs trimap: Fashion-MNIST, {len(X):,} images × 784{'' if full else ' (shipped subset)'}")
    rows = []
    try:
        if "trimap" not in peers:
            raise ImportError
        t0 = time.perf_counter()
        from trimap import TRIMAP  # compiles its numba functions

        print(f"  (trimap import and numba compilation: {time.perf_counter() - t0:.1f} s, not counted)")
    except ImportError:
        TRIMAP = None
        print("  trimap not installed or not asked for: no ratio")
    runs = [("TripletEmbedding (ours)", lambda X: TripletEmbedding(random_state=0).fit_transform(X))]
    if TRIMAP is not None:
        runs.append(("trimap (same triplets, 400 iterations)",
                     lambda X: TRIMAP(n_inliers=12, n_outliers=4, n_random=3, n_iters=400).fit_transform(X.copy())))
    best = {}
    for _ in range(repeat):
        for name, fn in runs:
            wall, cpu, Y = timed(lambda: fn(X))
            print(f"  run: {name:<40} {wall:8.2f} s wall  {cpu:8.2f} s CPU", flush=True)
            old = best.get(name)
            best[name] = (min(wall, old[0]), min(cpu, old[1]), Y) if old else (wall, cpu, Y)
    for name, (wall, cpu, Y) in best.items():
        rows.append((name, wall, cpu) + quality(X, Y, y))
    print(f"  {'method':<40} {'wall s':>8} {'CPU s':>8} {'trust@10':>9} {'10-NN acc':>9}")
    for row in rows:
        print("  {:<40} {:8.2f} {:8.2f} {:9.4f} {:9.4f}".format(*row), flush=True)
    if TRIMAP is not None:
        (_, w0, c0, t0, a0), (_, w1, c1, t1, a1) = rows[0], rows[1]
        report(f"TripletEmbedding, n={len(X):,}", w0, w1, "trimap")
        print(f"  CPU ratio trimap/ours {c1 / c0:.1f}x; trustworthiness@10 ours − trimap {t0 - t1:+.4f}, "
              f"10-NN accuracy ours − trimap {a0 - a1:+.4f}", flush=True)
    for name, fn in other_peers(peers):  # each row printed when done: these are the long ones
        fn(X[:500])
        wall, cpu, Y = timed(lambda: fn(X))
        print("  {:<40} {:8.2f} {:8.2f} {:9.4f} {:9.4f}".format(name, wall, cpu, *quality(X, Y, y)), flush=True)


def bench_lle(n, data):
    from sklearn.manifold import LocallyLinearEmbedding as SkLLE

    from localization import LocallyLinearEmbedding, _core

    X, _, full = fashion(n, data)
    X = X.astype(np.float64)
    print(f"\nLocallyLinearEmbedding (k = 10) vs scikit-learn (arpack): Fashion-MNIST, {len(X):,} images × 784, float64")
    t_knn, _ = best_time(lambda: _core.lle_weights(X, 10), repeat=1)
    ours, m = best_time(lambda: LocallyLinearEmbedding(n_neighbors=10, eigen_solver="arpack", random_state=0).fit(X), repeat=2)
    print(f"  ours: neighbours + local Gram solves {t_knn:.2f} s of {ours:.2f} s")
    peer, sk = best_time(lambda: SkLLE(n_neighbors=10, eigen_solver="arpack", random_state=0).fit(X), repeat=2)
    report(f"LLE k=10, n={len(X):,}", ours, peer, "scikit-learn")
    report_cpu("LLE", "scikit-learn")
    rel = abs(m.reconstruction_error_ - sk.reconstruction_error_) / sk.reconstruction_error_
    print(f"  reconstruction error: ours {m.reconstruction_error_:.10e}  scikit-learn {sk.reconstruction_error_:.10e}  relative difference {rel:.1e}")


def zipf_cooccurrence(n_words=20_000, n_tokens=3_000_000, seed=0):
    """Directed window-2 co-occurrence of a synthetic corpus: Zipf(1.1) word frequencies and
    topic-dependent word choice, so the matrix is sparse, heavy-tailed and structured."""
    from localization.text import cooccurrence

    rng = np.random.default_rng(seed)
    ranks = np.arange(1, n_words + 1)
    p = ranks**-1.1
    p /= p.sum()
    topics = 50
    perm = [rng.permutation(n_words) for _ in range(topics)]
    shares = rng.random(n_tokens) < 0.3  # 30 % of the words come from the current topic
    base = rng.choice(n_words, size=n_tokens, p=p)
    topic = np.repeat(rng.integers(0, topics, n_tokens // 200 + 1), 200)[:n_tokens]
    tok = base.copy()
    topical = rng.choice(n_words, size=int(shares.sum()), p=p)
    tok[shares] = np.array([perm[t][w] for t, w in zip(topic[shares], topical)])
    names = [f"w{i}" for i in range(n_words)]
    return cooccurrence([names[t] for t in tok], window=2, vocabulary=names)[0]


def bench_amds():
    from sklearn.decomposition import TruncatedSVD

    from localization import AsymmetricMDS
    from localization.datasets import load_oliver_twist
    from localization.text import cooccurrence, tokenize

    t0 = time.perf_counter()
    C = zipf_cooccurrence()
    print(f"\nAsymmetricMDS (Frobenius), sparse co-occurrence {C.shape[0]:,} × {C.shape[1]:,} words, "
          f"{C.nnz:,} non-zeros (synthetic Zipf corpus of 3M tokens, built in {time.perf_counter() - t0:.1f} s)")
    for q in (2, 50):
        tracemalloc.start()
        ours, m = best_time(lambda: AsymmetricMDS(n_components=q, affinity="precomputed", random_state=0).fit(C), repeat=2)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        peer, _ = best_time(lambda: TruncatedSVD(n_components=q, algorithm="arpack", random_state=0).fit(C), repeat=2)
        report(f"AsymmetricMDS q={q}, 20k words", ours, peer, "TruncatedSVD(arpack)")
        report_cpu("AsymmetricMDS", "TruncatedSVD")
        bound = C.nnz * 12 + C.shape[0] * q * 8
        print(f"  peak memory of the fit {peak / 1e6:.0f} MB (input CSR {(C.data.nbytes + C.indices.nbytes + C.indptr.nbytes) / 1e6:.0f} MB; "
              f"nnz·12 B + N·q·8 B = {bound / 1e6:.0f} MB; a dense N×N would be {C.shape[0] ** 2 * 8 / 1e9:.1f} GB)")
    tokens = tokenize(load_oliver_twist())
    O, vocab = cooccurrence(tokens, window=5)
    ours, _ = best_time(lambda: AsymmetricMDS(n_components=50, affinity="precomputed", random_state=0).fit(O), repeat=2)
    print(f"  Oliver Twist, whole vocabulary ({len(vocab):,} words, window 5, {O.nnz:,} non-zeros), q=50: {ours:.2f} s")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--full", action="store_true")
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000],
                   help="TripletEmbedding sizes (default 10000; --full adds 70000)")
    p.add_argument("--peers", nargs="*", choices=("trimap", "umap", "opentsne"), default=("trimap", "umap", "opentsne"),
                   help="peers of TripletEmbedding (default all installed)")
    p.add_argument("--only", nargs="+", choices=("triplet", "lle", "amds"), default=("triplet", "lle", "amds"))
    p.add_argument("--data", help="folder with the Fashion-MNIST IDX files")
    args = p.parse_args()
    if "triplet" in args.only:
        for n in args.sizes + ([70_000] if args.full and 70_000 not in args.sizes else []):
            bench_triplet(n, args.data, 2 if n <= 10_000 else 1, args.peers)
    if "lle" in args.only:
        bench_lle(10_000, args.data)
    if "amds" in args.only:
        bench_amds()

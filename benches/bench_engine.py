"""Exact Gaussian local mean: pairs per second against NumPy brute force and scikit-learn.

    python benches/bench_engine.py          # n = m = 20,000 (d=2), 10,000 (d=64); Fashion-MNIST n = 20,000, m = 2,000 (d=784)
    python benches/bench_engine.py --full   # n = m = 100,000 (d=2), 20,000 (d=64); Fashion-MNIST n = 60,000, m = 5,000
    python benches/bench_engine.py --pair-loop   # only the pair loop's rates against the exp ceiling

The pair loop first: Gaussian pairs per core-second (CPU time, one thread, best of 5, n = m =
10,000 uniform on [0, 1]², leave-one-out, algorithm="brute") in f32 and f64, against the
exponentials per core-second of the engine's own vectorised exp (`_core.exp_throughput`).

Fashion-MNIST: the full training images when LOCALIZATION_DATA points at them, else the shipped 2,000.
"""

import argparse
import os
import time

import numpy as np
from _common import best_time, fashion_mnist, report

from localization import _core


def numpy_local_mean(Q, X, V, h, chunk=2048):
    """The usual NumPy implementation: chunked ‖q‖²+‖x‖²−2q·x (BLAS), exp, matmul."""
    xn = (X * X).sum(1)
    out = np.empty((len(Q), V.shape[1]), dtype=Q.dtype)
    for a in range(0, len(Q), chunk):
        q = Q[a : a + chunk]
        D2 = (q * q).sum(1)[:, None] + xn[None, :] - 2 * q @ X.T
        K = np.exp(D2 * (-0.5 / h**2))
        out[a : a + chunk] = (K @ V) / K.sum(1, keepdims=True)
    return out


def cpu_time(fn, repeat=5):
    """Best CPU time of `repeat` runs after a warm-up (on a shared machine CPU time is less
    disturbed than wall time; the callers run on one thread)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def pair_loop(n=10_000):
    """Gaussian pairs per core-second of the direct pair loop against the exp ceiling."""
    rng = np.random.default_rng(0)
    X = rng.random((n, 2))
    V = rng.random((n, 1))
    print(f"pair loop, d=2, n=m={n}, leave-one-out, one thread (CPU time; load {os.getloadavg()[0]:.1f}):")
    small = {}
    for dtype in (np.float32, np.float64):
        name = np.dtype(dtype).name
        x, v = X.astype(dtype), V.astype(dtype)
        ceiling = max(_core.exp_throughput(name, 1 << 24) for _ in range(3))
        pairs = n * (n - 1)
        for h, degree in ((0.5, None), (0.5, 1), (0.04, None), (0.01, None)):
            def run():
                return _core.local_sums(x, x, v, kernel=_core.KernelSpec("gaussian", h), algorithm="brute", exclude_self=True, degree=degree, n_jobs=1)
            t = cpu_time(run)
            rate = pairs / t
            if h == 0.01:
                small[name] = t
            what = f"h={h}" + (" degree=1 (design moments)" if degree else "")
            print(f"  {name} {what:32s} {t:7.3f} CPU s  {rate / 1e9:5.2f}e9 pairs/core-s  "
                  f"({rate / ceiling:4.2f} of the exp ceiling {ceiling / 1e9:.2f}e9/core-s)")
    print(f"  h=0.01 (tiles skipped): float64 / float32 time {small['float64'] / small['float32']:.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--pair-loop", action="store_true", help="only the pair loop's rates")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    threads = _core.effective_n_jobs(None)
    print(f"threads: {threads}, OPENBLAS/OMP threads: {os.environ.get('OMP_NUM_THREADS', 'default')}")
    pair_loop()
    if args.pair_loop:
        return

    n = 100_000 if args.full else 20_000
    X = rng.random((n, 2), dtype=np.float32)
    V = rng.random((n, 1), dtype=np.float32)
    h = 0.5  # wide: no tile can be skipped, every pair is evaluated
    # The pair loop itself (algorithm="brute"); "auto" takes the series expansion here.
    t_ours, s = best_time(lambda: _core.local_sums(X, X, V, kernel=_core.KernelSpec("gaussian", h), algorithm="brute"), 2)
    num, den = s.num, s.den
    m_np = min(n, 20_000)
    t_np, ref = best_time(lambda: numpy_local_mean(X[:m_np], X, V, h), 1)
    err = np.max(np.abs(num[:m_np] / den[:m_np, None] - ref))
    print(f"d=2 f32 n=m={n}: ours {n * n / t_ours / 1e9:.2f} Gpairs/s ({t_ours:.2f} s); "
          f"numpy {m_np * n / t_np / 1e9:.3f} Gpairs/s; ratio {(n * n / t_ours) / (m_np * n / t_np):.1f}x; max diff {err:.1e}")
    t_exp, s = best_time(lambda: _core.local_sums(X, X, V, kernel=_core.KernelSpec("gaussian", h)), 2)
    num_e, den_e = s.num, s.den
    err_e = np.max(np.abs(num_e / den_e[:, None] - num / den[:, None]))
    print(f"  same with algorithm='auto' (series expansion): {t_exp:.3f} s, {t_ours / t_exp:.0f}x the pair loop; "
          f"max diff to it {err_e:.1e}")
    from sklearn.neighbors import KernelDensity

    m_sk = 2000
    kde = KernelDensity(bandwidth=h, rtol=0).fit(X.astype(np.float64))
    t_sk, _ = best_time(lambda: kde.score_samples(X[:m_sk].astype(np.float64)), 1)
    print(f"  scikit-learn KernelDensity(rtol=0) m={m_sk}: {m_sk * n / t_sk / 1e9:.4f} Gpairs/s; "
          f"ratio {(n * n / t_ours) / (m_sk * n / t_sk):.0f}x")
    h_small = 0.01
    t_small, _ = best_time(lambda: _core.local_sums(X, X, V, kernel=_core.KernelSpec("gaussian", h_small)), 2)
    print(f"  same, h={h_small}: {t_small:.2f} s (tiles whose every term underflows are skipped exactly, by their boxes)")

    n64 = 20_000 if args.full else 10_000
    X = rng.standard_normal((n64, 64)).astype(np.float32)
    V = rng.random((n64, 1), dtype=np.float32)
    h = 8.0
    t_ours, s = best_time(lambda: _core.local_sums(X, X, V, kernel=_core.KernelSpec("gaussian", h)), 2)
    num, den = s.num, s.den
    t_np, ref = best_time(lambda: numpy_local_mean(X, X, V, h), 2)
    err = np.max(np.abs(num / den[:, None] - ref))
    report(f"d=64 f32 n=m={n64} Gaussian local mean", t_ours, t_np, "numpy")
    print(f"  ours {n64 * n64 / t_ours / 1e9:.2f} Gpairs/s, max diff {err:.1e}")

    # Real high-dimensional data: Fashion-MNIST images (d = 784), KDE-style sums at a bandwidth
    # of half the median nearest-neighbour distance (the full files when they are available).
    X, source = fashion_mnist(60_000 if args.full else 20_000)
    m784 = min(len(X), 5_000 if args.full else 2_000)
    Q, V = X[:m784], rng.random((len(X), 1), dtype=np.float32)
    nn = np.sqrt(np.maximum(((Q[:200, None] - X[None, :5000]) ** 2).sum(-1), 0))
    h = float(0.5 * np.median(np.sort(nn, 1)[:, 1]))
    t_ours, s = best_time(lambda: _core.local_sums(Q, X, V, kernel=_core.KernelSpec("gaussian", h)), 2)
    num, den = s.num, s.den
    t_np, ref = best_time(lambda: numpy_local_mean(Q, X, V, h), 2)
    ok = den > 0
    err = np.max(np.abs(num[ok] / den[ok, None] - ref[ok]))
    report(f"d=784 f32 m={m784} n={len(X)} Fashion-MNIST", t_ours, t_np, "numpy")
    print(f"  ours {m784 * len(X) / t_ours / 1e9:.2f} Gpairs/s, h={h:.2f}, max diff {err:.1e} ({source})")


if __name__ == "__main__":
    main()

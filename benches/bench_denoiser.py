"""LocalMeanDenoiser vs NumPy (BLAS, chunked) on Fashion-MNIST, in one run.

Both compute the same Gaussian local mean m_σ(q) = Σ exp(−‖q − xᵢ‖²/2σ²) xᵢ / Σ exp(...)
for noisy queries q against n training images (d = 784), stabilised by the row maximum.
The NumPy version is the usual fast way: distances from ‖q‖² + ‖x‖² − 2 QXᵀ (one BLAS
product per chunk), exp, and a second BLAS product with X.

Default: n = 10,000 training images (the training set if the full files are found, else
all available test images), 1,000 queries, f32 and f64. ``--full``: 10,000 queries.

    python benches/bench_denoiser.py [--full] [--n-jobs N]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from localization.datasets import load_fashion_mnist
from localization.generative import LocalMeanDenoiser


def numpy_local_mean(Q, X, sigma, chunk=512):
    xn = np.einsum("ij,ij->i", X, X)
    out = np.empty((len(Q), X.shape[1]), dtype=np.float64)
    for a in range(0, len(Q), chunk):
        q = Q[a : a + chunk]
        d2 = np.einsum("ij,ij->i", q, q)[:, None] + xn[None, :] - 2.0 * (q @ X.T)
        logits = -np.maximum(d2, 0) / (2 * sigma * sigma)
        logits -= logits.max(axis=1, keepdims=True)
        W = np.exp(logits)
        out[a : a + chunk] = (W @ X) / W.sum(axis=1, keepdims=True)
    return out


def best_of(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        res = fn()
        times.append(time.perf_counter() - t)
    return min(times), res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="10,000 queries instead of 1,000")
    ap.add_argument("--n-train", type=int, default=10_000)
    ap.add_argument("--n-jobs", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    try:
        X, _, source = load_fashion_mnist("train", n=args.n_train, return_source=True)
    except FileNotFoundError:
        X, _, source = load_fashion_mnist("test", return_source=True)
        X = X[: args.n_train]
    m = 10_000 if args.full else 1_000
    sigma = 0.5  # noise level of the queries; ~1/8 of the typical distance between two images
    rng = np.random.default_rng(0)
    Q = X[rng.integers(0, len(X), m)] + sigma * rng.standard_normal((m, X.shape[1])).astype(np.float32)
    try:
        from threadpoolctl import threadpool_info

        blas = ", ".join(f"{i['internal_api']} {i.get('version')} ({i['num_threads']} threads)" for i in threadpool_info() if i["user_api"] == "blas")
    except ImportError:
        blas = "unknown"
    print(f"data: {source}; n = {len(X)} references, m = {m} queries, d = {X.shape[1]}, sigma = {sigma}")
    print(f"threads: ours n_jobs={args.n_jobs} (cores: {os.cpu_count()}); NumPy BLAS: {blas}")
    pairs = len(X) * m
    print("| dtype | ours (s) | NumPy (s) | ours pairs/s | NumPy pairs/s | speed-up | max abs diff |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for dt in (np.float32, np.float64):
        Xd, Qd = X.astype(dt), Q.astype(dt)
        den = LocalMeanDenoiser(sigma=sigma, n_jobs=args.n_jobs).fit(Xd)
        t_ours, ours = best_of(lambda: den.denoise(Qd), args.repeat)
        t_np, ref = best_of(lambda: numpy_local_mean(Qd, Xd, sigma), args.repeat)
        diff = float(np.max(np.abs(ours.astype(np.float64) - ref)))
        print(f"| {np.dtype(dt).name} | {t_ours:.3f} | {t_np:.3f} | {pairs / t_ours:.3g} | {pairs / t_np:.3g} | {t_np / t_ours:.2f}x | {diff:.1e} |")


if __name__ == "__main__":
    main()

"""Shared helpers for the benchmark scripts: best-of-k timing and a results line."""

import time

import numpy as np


def best_time(fn, repeat=3):
    """Best wall time of `repeat` runs (the machines are shared: the minimum is the least noisy)."""
    best = float("inf")
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def report(name, ours, peer, peer_name):
    print(f"{name:<46} ours {ours:9.4f} s   {peer_name} {peer:9.4f} s   ratio {peer / ours:7.1f}x")


def fashion_mnist(n, data=None):
    """Up to n Fashion-MNIST training images (float32 rows in [0, 1], d = 784) when the full
    files are found (in ``data`` or ``LOCALIZATION_DATA``), else the 2,000 shipped test images;
    and the source."""
    from localization.datasets import load_fashion_mnist

    try:
        X, _, source = load_fashion_mnist("train", n, data, return_source=True)
    except FileNotFoundError:
        X, _, source = load_fashion_mnist("test", return_source=True)
        X = X[:n]
    return np.ascontiguousarray(X), source

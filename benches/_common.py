"""Shared helpers for the benchmark scripts: best-of-k timing and a results line."""

import time


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

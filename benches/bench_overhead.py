"""The fixed cost of the functional API on tiny inputs: public call vs the native calls under it
vs a direct NumPy implementation, interleaved in one run (best of many calls each).

Inputs are already valid (2-D, C-contiguous float64, finite, no weights), so the public call
takes its ready-input path: one native call (`_core.ready_local_mean` / `_core.ready_kernel_sum`,
which check the input and finish the result natively). Ratios are given against that call ("the
call it makes") and against `_core.local_sums` on the same arrays (the lowest-level native
equivalent: the engine's sums alone, no checks, no division). "checked path" is the Python
path every call took before the ready-input path existed (forced here by asking for the total
weight / the error bound, which adds an O(m) product).

    python benches/bench_overhead.py [--queries 8] [--samples 100] [--calls 500] [--rounds 15]
"""

import argparse
import os
import time

import numpy as np

from localization import _core, kernel_sum, local_mean


def numpy_local_mean(Q, X, v, h):
    K = np.exp(-0.5 * ((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1) / (h * h))
    return K @ v / K.sum(1)


def numpy_kernel_sum(Q, X, h):
    return np.exp(-0.5 * ((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1) / (h * h)).sum(1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queries", type=int, default=8)
    p.add_argument("--samples", type=int, default=100)
    p.add_argument("--features", type=int, default=2)
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    Q = rng.normal(size=(args.queries, args.features))
    X = rng.normal(size=(args.samples, args.features))
    v = rng.normal(size=args.samples)
    V = v[:, None].copy()
    h = 0.5
    # Same results first: the comparison is between equal computations.
    np.testing.assert_allclose(local_mean(Q, X, v, bandwidth=h), numpy_local_mean(Q, X, v, h), rtol=1e-12)
    np.testing.assert_allclose(kernel_sum(Q, X, bandwidth=h), numpy_kernel_sum(Q, X, h), rtol=1e-12)
    calls = {
        "local_mean (public)": lambda: local_mean(Q, X, v, bandwidth=h),
        "local_mean (checked path)": lambda: local_mean(Q, X, v, bandwidth=h, return_weight=True)[0],
        "local_mean (native ready_local_mean)": lambda: _core.ready_local_mean(Q, X, v, None, "gaussian", h),
        "local_mean (native local_sums)": lambda: _core.local_sums(Q, X, V, None, kernel=_core.KernelSpec("gaussian", h)),
        "local_mean (NumPy)": lambda: numpy_local_mean(Q, X, v, h),
        "kernel_sum (public)": lambda: kernel_sum(Q, X, bandwidth=h),
        "kernel_sum (checked path)": lambda: kernel_sum(Q, X, bandwidth=h, return_error_bound=True)[0],
        "kernel_sum (native ready_kernel_sum)": lambda: _core.ready_kernel_sum(Q, X, None, None, "gaussian", h),
        "kernel_sum (native local_sums)": lambda: _core.local_sums(Q, X, None, None, kernel=_core.KernelSpec("gaussian", h)),
        "kernel_sum (NumPy)": lambda: numpy_kernel_sum(Q, X, h),
    }
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(args.rounds):  # interleaved: load changes hit every contender alike
        for name, fn in calls.items():
            t = time.perf_counter()
            for _ in range(args.calls):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t) / args.calls)
    print(f"{args.queries} queries x {args.samples} samples x {args.features} features, gaussian, float64; "
          f"load average {os.getloadavg()[0]:.1f}")
    for name, t in best.items():
        what = name.split(" ")[0]
        makes = best[f"{what} (native ready_{what})"]
        sums = best[f"{what} (native local_sums)"]
        print(f"{name:<40} {t * 1e6:8.1f} µs   {t / makes:5.2f}x the call it makes   {t / sums:5.2f}x local_sums")

if __name__ == "__main__":
    main()

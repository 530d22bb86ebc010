"""Binned Gaussian KDE (``algorithm="binned"``) against KDEpy's ``FFTKDE`` at equal grid size.

Both evaluate the density of n samples from a Gaussian mixture at the nodes of the same regular
grid (KDEpy's own grid, which we pass to ours as the queries and as the grid size): the time of
each (ours without and with the per-query bound), their maximum error relative to the peak density
against the exact KDE at a random subset of the nodes (exact sums by our exact path), our reported
bound there, and the exact path's time per query. First, the exact KDE at every sample (2-D and 3-D, h = 0.1 ×
the extent) against the direct pair loop. A second part gives error against time for several grid sizes (the
"accuracy at equal time" comparison). Ratios are KDEpy time / ours.

    python benches/bench_kde.py            # 1-D n = 10⁶; 2-D n = 2·10⁵ on 256² and 512² grids; 3-D n = 2·10⁵ on 32³ and 64³
    python benches/bench_kde.py --full     # 2-D n = 10⁶ on a 1024² grid (the issue's case), 3-D n = 10⁶ on 128³ too
"""

import argparse
import math
import sys

import numpy as np

from _common import best_time

from localization import kernel_sum


def mixture(n, d, rng):
    centres = rng.uniform(-3, 3, size=(5, d))
    X = centres[rng.integers(0, 5, n)] + rng.normal(size=(n, d)) * rng.uniform(0.3, 1.0, size=(5, d))[rng.integers(0, 5, n)]
    return np.ascontiguousarray(X)


def ours(X, grid_points, h, sizes, bound=False):
    d = X.shape[1]
    norm = len(X) * (2 * math.pi) ** (d / 2) * h**d
    if not bound:
        return kernel_sum(grid_points, X, bandwidth=h, algorithm="binned", grid_size=sizes) / norm
    s, err = kernel_sum(grid_points, X, bandwidth=h, algorithm="binned", grid_size=sizes, return_error_bound=True)
    return s / norm, err / norm


def kdepy(X, h, n_grid):
    from KDEpy import FFTKDE

    return FFTKDE(kernel="gaussian", bw=h).fit(X).evaluate(n_grid)


def case(X, h, n_grid, rng, n_check=400, repeat=3):
    d = X.shape[1]
    t_peer, (grid, peer) = best_time(lambda: kdepy(X, h, n_grid), repeat)
    grid = np.ascontiguousarray(grid.reshape(len(grid), d))
    # KDEpy's grid is regular with n_grid nodes per feature: ours on the same nodes.
    t_ours, _ = best_time(lambda: ours(X, grid, h, n_grid), repeat)
    t_bound, (dens, bound) = best_time(lambda: ours(X, grid, h, n_grid, bound=True), repeat)
    pick = rng.choice(len(grid), size=min(n_check, len(grid)), replace=False)
    norm = len(X) * (2 * math.pi) ** (d / 2) * h**d
    exact = kernel_sum(grid[pick], X, bandwidth=h) / norm
    peak = exact.max()
    e_ours = np.abs(dens[pick] - exact).max() / peak
    e_peer = np.abs(peer[pick] - exact).max() / peak
    within = bool(np.all(np.abs(dens[pick] - exact) <= bound[pick]))
    print(f"  d={d} n={len(X):>8} grid {n_grid}^{d}: ours {t_ours:7.3f} s (with bound {t_bound:7.3f} s) err {e_ours:8.1e} "
          f"(bound {bound[pick].max() / peak:8.1e}, holds {within})   KDEpy {t_peer:7.3f} s err {e_peer:8.1e}   "
          f"ratio {t_peer / t_ours:5.1f}x", flush=True)
    return t_ours, e_ours, t_peer, e_peer


def exact_rate(X, h, rng, m=2000):
    Q = X[rng.choice(len(X), m, replace=False)]
    t, _ = best_time(lambda: kernel_sum(Q, X, bandwidth=h), 1)
    return t / m


def exact_at_every_sample(d, n, rng, m=500):
    """The exact KDE at all n samples, h = 0.1 × the data's extent: `auto` (the Chebyshev grid
    in 2–3 features) against the direct pair loop (timed on m of the queries, scaled to n), and
    the largest error of the former relative to the exact sums at those m queries."""
    X = mixture(n, d, rng)
    h = 0.1 * float(np.ptp(X, axis=0).max())
    t_auto, dens = best_time(lambda: kernel_sum(X, X, bandwidth=h), 2)
    pick = rng.choice(n, m, replace=False)
    t_pairs, exact = best_time(lambda: kernel_sum(X[pick], X, bandwidth=h, algorithm="brute"), 1)
    err = (np.abs(dens[pick] - exact) / exact).max()
    print(f"  d={d} n={n}: auto {t_auto:7.3f} s   pair loop {t_pairs * n / m:8.1f} s (from {m} queries)   "
          f"ratio {t_pairs * n / m / t_auto:6.0f}x   max relative error {err:.1e}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args()
    try:
        import KDEpy  # noqa: F401
    except ImportError:
        sys.exit("KDEpy is not installed: pip install KDEpy")
    rng = np.random.default_rng(0)

    n = 1_000_000 if args.full else 200_000
    print(f"Exact Gaussian KDE at every sample, {n} x {n}, h = 0.1 x extent (no KDEpy: its sums are binned):")
    for d in (2, 3):
        exact_at_every_sample(d, n, rng)

    print("Equal grid (KDEpy's nodes are the queries), Gaussian, h = 0.1 x std-ish scale:")
    X1 = mixture(1_000_000, 1, rng)
    for g in (1024, 4096, 16384):
        case(X1, 0.1, g, rng)
    per_query = exact_rate(X1, 0.1, rng)
    print(f"  exact path, d=1 n=10^6: {per_query * 1e3:.2f} ms per query ({per_query * 4096:.1f} s for 4096 nodes)")
    grids = {2: (256, 512, 1024) if args.full else (128, 256, 512), 3: (32, 64, 128) if args.full else (32, 64)}
    for d, sizes in grids.items():
        X = mixture(n, d, rng)
        results = [case(X, 0.1, g, rng, repeat=2) for g in sizes]
        per_query = exact_rate(X, 0.1, rng, m=500 if d == 2 else 200)
        print(f"  exact path, d={d} n={n}: {per_query * 1e3:.2f} ms per query")
        print(f"Error against time (d={d}; errors relative to the peak density, max over the checked nodes):")
        for (t_o, e_o, t_p, e_p), g in zip(results, sizes):
            print(f"  grid {g}^{d}:  KDEpy {t_p:.3f} s err {e_p:.1e}  |  ours {t_o:.3f} s err {e_o:.1e}")


if __name__ == "__main__":
    main()

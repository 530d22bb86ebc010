"""The cost of a progress bar on the calls that got one last (issue 15, item 7).

    python benches/bench_progress.py            # best of 5, the bar on vs off, same process

Each call runs with the bar off and on (the bar itself kept silent by a long delay, so that only
the reporting is timed: the native loops' counters and the 50 ms callback), alternating, and the
best CPU time of each is kept; the results must be identical. scikit-learn's kd-tree k-NN on
the same data is timed (CPU) for scale.
"""

import os
import time

import numpy as np
from sklearn.neighbors import NearestNeighbors as SkNearestNeighbors

from localization import NearestNeighbors, _progress, kernel_sum, local_mean


def best_pair(off, on, repeat=5):
    """Best CPU time (all threads of the process) of ``off`` and of ``on`` over ``repeat``
    alternating rounds, and their results: on a shared machine CPU time is what waiting for a
    core does not inflate."""
    t_off = t_on = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        a = off()
        t_off = min(t_off, time.process_time() - t)
        t = time.process_time()
        b = on()
        t_on = min(t_on, time.process_time() - t)
    return t_off, t_on, a, b


def main():
    _progress.DELAY = 3600.0  # reports flow, nothing is drawn
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200_000, 2))
    Q = rng.normal(size=(200_000, 2))
    W = rng.normal(size=(20_000, 40))
    y = np.sin(X[:, 0])
    print(f"load average {os.getloadavg()[0]:.1f}")
    nn = NearestNeighbors(n_neighbors=10).fit(X)
    nn_on = NearestNeighbors(n_neighbors=10, verbose=True).fit(X)
    wide = NearestNeighbors(n_neighbors=10).fit(W)
    wide_on = NearestNeighbors(n_neighbors=10, verbose=True).fit(W)
    cases = [
        ("kneighbors 2e5 x 2e5, d=2, k=10 (kd-tree)", lambda: nn.kneighbors(Q)[1], lambda: nn_on.kneighbors(Q)[1]),
        ("kneighbors 2e4 x 2e4, d=40, k=10 (brute)", lambda: wide.kneighbors(W)[1], lambda: wide_on.kneighbors(W)[1]),
        ("radius_neighbors 2e5 x 2e5, d=2, r=0.02", lambda: np.concatenate(nn.radius_neighbors(Q, radius=0.02)[1]),
         lambda: np.concatenate(nn_on.radius_neighbors(Q, radius=0.02)[1])),
        ("local_mean expansion 2e5 x 2e5, d=2, h=0.5", lambda: local_mean(Q, X, y, bandwidth=0.5, algorithm="expansion"),
         lambda: local_mean(Q, X, y, bandwidth=0.5, algorithm="expansion", progress=True)),
        ("kernel_sum binned 2e5 x 2e5, d=2, h=0.1", lambda: kernel_sum(Q, X, bandwidth=0.1, algorithm="binned"),
         lambda: kernel_sum(Q, X, bandwidth=0.1, algorithm="binned", progress=True)),
    ]
    for name, off, on in cases:
        t_off, t_on, a, b = best_pair(off, on)
        np.testing.assert_array_equal(a, b)
        print(f"{name:<48} off {t_off:8.3f} s   on {t_on:8.3f} s   on/off {t_on / t_off:5.2f}   (CPU)")
    sk = SkNearestNeighbors(n_neighbors=10, algorithm="kd_tree").fit(X)
    t_sk = min(_timed(lambda: sk.kneighbors(Q)) for _ in range(3))
    t_ours = min(_timed(lambda: nn.kneighbors(Q)) for _ in range(3))
    print(f"{'kneighbors 2e5 x 2e5, d=2, k=10: scikit-learn kd_tree':<48} {t_sk:8.3f} s   ours {t_ours:8.3f} s   ratio {t_sk / t_ours:5.1f}x   (CPU)")
    print(f"load average {os.getloadavg()[0]:.1f}")


def _timed(fn):
    t = time.process_time()
    fn()
    return time.process_time() - t


if __name__ == "__main__":
    main()

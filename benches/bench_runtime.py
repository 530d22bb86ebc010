"""The runtime around every native call: its fixed cost, Ctrl-C latency, threads kept alive.

* Fixed cost of one call (hand-off to the pool, the 50 ms watcher, the final progress report):
  a tiny `local_mean` and a tiny `NearestNeighbors.kneighbors`, against scikit-learn's
  `KNeighborsRegressor.predict` / `NearestNeighbors.kneighbors` on the same tiny data (the peer's
  own fixed cost), best of many calls.
* Ctrl-C: seconds from SIGINT to KeyboardInterrupt for long calls (a subprocess per call).
* Threads alive after calls with n_jobs = 1..64.

    python benches/bench_runtime.py [--full]
"""

import argparse
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np

from _common import report


def per_call(fn, calls):
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls)
    return best


def fixed_cost(calls):
    from sklearn.neighbors import KNeighborsRegressor
    from sklearn.neighbors import NearestNeighbors as SkNN

    from localization import NearestNeighbors, local_mean

    rng = np.random.default_rng(0)
    X, q = rng.random((100, 2)), rng.random((4, 2))
    y = X[:, 0]
    sk = KNeighborsRegressor(n_neighbors=5).fit(X, y)
    ours = per_call(lambda: local_mean(q, X, y, kernel="knn", n_neighbors=5), calls)
    peer = per_call(lambda: sk.predict(q), calls)
    report("tiny local_mean (4 x 100, knn) per call", ours, peer, "sklearn KNeighborsRegressor.predict")
    nn, sknn = NearestNeighbors(n_neighbors=5).fit(X), SkNN(n_neighbors=5).fit(X)
    ours = per_call(lambda: nn.kneighbors(q), calls)
    peer = per_call(lambda: sknn.kneighbors(q), calls)
    report("tiny kneighbors (4 x 100) per call", ours, peer, "sklearn NearestNeighbors.kneighbors")


LONG = {
    "local_mean 10^6 x 10^6 gaussian": "L.local_mean(X, X, X[:, 0], kernel='gaussian', bandwidth=0.3, algorithm='brute')",
    "kneighbors 3*10^5 x 64 (brute)": "L.NearestNeighbors().fit(H).kneighbors(H)",
    "MeanShift exact gaussian, 2*10^5": "L.MeanShift(kernel='gaussian', bandwidth=0.05, algorithm='exact').fit(X[:200000])",
    "bilateral 3000^2, window 91": "bilateral(img, spatial_bandwidth=15.0, range_bandwidth=0.1)",
}


def ctrl_c(name, call):
    code = textwrap.dedent(f"""
        import numpy as np
        import localization as L
        from localization.denoise import bilateral
        rng = np.random.default_rng(0)
        X = rng.random((1_000_000, 2))
        H = rng.random((300_000, 64), dtype=np.float32)
        img = rng.random((3000, 3000))
        print("ready", flush=True)
        try:
            {call}
            print("finished", flush=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    t = time.perf_counter()
    p.send_signal(signal.SIGINT)
    out = p.stdout.readline().strip()
    dt = time.perf_counter() - t
    p.kill()
    p.wait()
    print(f"Ctrl-C  {name:<40} {out} after {dt:.3f} s")


def threads_alive():
    from localization import local_mean

    X = np.random.default_rng(0).random((2000, 2))
    alive = lambda: len(os.listdir("/proc/self/task"))  # noqa: E731
    before = alive()
    for n_jobs in range(1, 65):
        local_mean(X[:100], X, X[:, 0], bandwidth=0.1, n_jobs=n_jobs)
    time.sleep(0.5)
    print(f"threads alive: {before} before, {alive()} after calls with n_jobs = 1..64 ({os.cpu_count()} cores)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="more calls per timing")
    args = ap.parse_args()
    fixed_cost(2000 if args.full else 300)
    for name, call in LONG.items():
        ctrl_c(name, call)
    if os.path.isdir("/proc/self/task"):
        threads_alive()

"""LocalMeanImputer against scikit-learn's KNNImputer(n_neighbors=10) on Fashion-MNIST, 30 % missing.

Both imputers on the same images and mask in one run: RMSE on the missing pixels, wall time
and the ratios. ``--n`` sets the number of test images (the full test set is read from
``LOCALIZATION_DATA`` or ``--data``; the shipped subset has 2,000).

KNNImputer's cost is linear in the rows it imputes, each compared with all n fitted rows, and
quadratic in n overall (about 35 minutes at n = 10,000 on an idle 2-core machine). With
``--knn-rows R`` it is fitted on all n rows and imputes only the first R of them: those rows
are exactly the first R rows of its full ``fit_transform`` (KNNImputer imputes each row
independently against the fitted rows), its RMSE is measured on them, and its time for all n
rows is the measured time × n / R (printed as such). Ours always imputes all n rows.

    python benches/bench_impute.py [--n 2000] [--knn-rows R] [--data DIR]
"""

import argparse
import os
import time

import numpy as np


def masked(n, path, seed=0):
    from localization.datasets import load_fashion_mnist

    X, _ = load_fashion_mnist(n=n, path=path)
    X = X.astype(np.float32)
    miss = np.random.default_rng(seed).random(X.shape) < 0.3
    Xm = X.copy()
    Xm[miss] = np.nan
    return X, Xm, miss


def rmse(out, X, miss):
    return float(np.sqrt(np.mean((out[miss] - X[miss]) ** 2)))


def main():
    from sklearn.impute import KNNImputer

    from localization import LocalMeanImputer

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--knn-rows", type=int, default=None, help="rows KNNImputer imputes (default: all n)")
    ap.add_argument("--data", default=None)
    args = ap.parse_args()
    X, Xm, miss = masked(args.n, args.data)
    n = len(X)
    print(f"n = {n}, 30 % missing at random, load average {os.getloadavg()[0]:.1f} at start", flush=True)

    t = time.perf_counter()
    ours = LocalMeanImputer(image_shape=(28, 28), random_state=0).fit_transform(Xm)
    t_ours = time.perf_counter() - t
    r_ours = rmse(ours, X, miss)
    print(f"  LocalMeanImputer   RMSE {r_ours:.4f}   {t_ours:8.2f} s", flush=True)

    rows = n if args.knn_rows is None else min(args.knn_rows, n)
    t = time.perf_counter()
    knn = KNNImputer(n_neighbors=10).fit(Xm).transform(Xm[:rows])
    t_knn = (time.perf_counter() - t) * n / rows
    r_knn = rmse(knn, X[:rows], miss[:rows])
    how = "" if rows == n else f" (measured on {rows} rows × {n / rows:g})"
    print(f"  KNNImputer(10)     RMSE {r_knn:.4f}   {t_knn:8.2f} s{how}")
    print(f"  LocalMeanImputer on the same {rows} rows: RMSE {rmse(ours[:rows], X[:rows], miss[:rows]):.4f}")
    print(f"  RMSE {100 * (1 - rmse(ours[:rows], X[:rows], miss[:rows]) / r_knn):.1f} % lower, "
          f"{t_knn / t_ours:.1f}x faster; load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()

"""MLKR: our MetricLearningRegressor against metric-learn's MLKR, same data, one run.

Times one objective-and-gradient evaluation at the same A (the part each L-BFGS / CG step
repeats) and a whole fit with the same iteration cap, with the LOO error each reaches; the
per-feature LOO bandwidth search with the analytic gradient against central differences; then our
evaluation alone at larger n (metric-learn forms several n × n float64 matrices per evaluation).

    python benches/bench_metric_learning.py [--n 1000] [--d 5] [--max-iter 30]
"""

import argparse
import os
import time
import warnings

import numpy as np

from _common import best_time


def planted(n, d, seed=0):
    """y depends on one direction of d features."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    u = np.ones(d) / np.sqrt(d)
    return X, np.sin(2.0 * X @ u) + 0.05 * rng.normal(size=n)


def _adaptive_data(n, seed=5):
    """The data of bench_adaptive.py."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    return X, np.sin(5 * X[:, 0]) + 2 * X[:, 1] ** 2 + 0.2 * rng.standard_normal(n)


def main():
    from localization import MetricLearningRegressor
    from localization.metric_learning import mlkr_loss

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--d", type=int, default=5)
    ap.add_argument("--max-iter", type=int, default=30)
    args = ap.parse_args()
    n, d = args.n, args.d
    X, y = planted(n, d)
    Xc = X - X.mean(0)
    A = np.eye(d)
    print(f"n = {n}, d = {d}, load average {os.getloadavg()[0]:.1f}")
    t_ours, (loss, _) = best_time(lambda: mlkr_loss(A, Xc, y[:, None]))
    print(f"  one objective + gradient, ours: {t_ours * 1e3:9.1f} ms   (LOO MSE {loss:.6f})")
    try:
        from metric_learn import MLKR
    except ImportError:
        MLKR = None
        print("  metric-learn is not installed: peer rows skipped")
    if MLKR is not None:
        peer = MLKR(n_components=d)
        peer.n_iter_ = 0  # (its _loss reads the iteration counter)
        # metric-learn's kernel is exp(−‖A'Δ‖²): the same kernel as ours at A' = A/√2.
        t_peer, (cost, _) = best_time(lambda: peer._loss((A / np.sqrt(2)).ravel(), X, y))
        print(f"  one objective + gradient, metric-learn: {t_peer * 1e3:9.1f} ms   (LOO MSE {cost / n:.6f})  "
              f"ratio {t_peer / t_ours:.1f}x")
    # Whole fits from the same start, same optimiser (L-BFGS-B, no early stop): metric-learn
    # 0.7's own MLKR.fit fails on scikit-learn >= 1.8 (check_X_y(force_all_finite=...)), so its
    # fit loop is replayed on its objective.
    A0 = MetricLearningRegressor(max_iter=0).fit(X, y).components_
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = MetricLearningRegressor(init=A0, max_iter=args.max_iter, tol=0.0).fit(X, y)
    t_fit = time.perf_counter() - t
    print(f"  fit (max_iter={args.max_iter}), ours: {t_fit:8.2f} s, {ours.n_iter_} iterations, "
          f"LOO MSE {ours.loo_error_:.6f}")
    if MLKR is not None:
        from scipy.optimize import minimize

        peer.n_iter_ = 0
        t = time.perf_counter()
        res = minimize(peer._loss, (A0 / np.sqrt(2)).ravel(), (X, y), method="L-BFGS-B", jac=True,
                       options=dict(maxiter=args.max_iter, ftol=0.0, gtol=0.0))
        t_pfit = time.perf_counter() - t
        peer_loo = mlkr_loss(np.sqrt(2) * res.x.reshape(A0.shape), Xc, y[:, None], gradient=False)
        print(f"  fit (max_iter={args.max_iter}), metric-learn: {t_pfit:8.2f} s, {res.nit} iterations, "
              f"LOO MSE {peer_loo:.6f}  ratio {t_pfit / t_fit:.1f}x")
    # The diagonal case: bandwidth="loo_per_feature" of the gaussian local mean with the
    # analytic gradient, against central differences (unit sample weights: the same objective).
    from localization import LocalMeanRegressor

    for name, (Xs, ys) in (("planted", (X, y)), ("bench_adaptive data", _adaptive_data(300))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t_a, ra = best_time(lambda: LocalMeanRegressor(bandwidth="loo_per_feature").fit(Xs, ys), repeat=2)
            t_d, rd = best_time(lambda: LocalMeanRegressor(bandwidth="loo_per_feature").fit(
                Xs, ys, sample_weight=np.ones(len(ys))), repeat=2)
        evals = [int(np.sum(r.cv_results_["stage"] == "gradient")) for r in (ra, rd)]
        print(f"  loo_per_feature, {name} (n = {len(ys)}, d = {Xs.shape[1]}): analytic {t_a:.2f} s "
              f"({evals[0]} gradient-stage evaluations), differences {t_d:.2f} s ({evals[1]}), ratio {t_d / t_a:.1f}x; "
              f"objectives {ra.cv_results_['objective'].min():.8f} / {rd.cv_results_['objective'].min():.8f}")
    for big in (10_000, 30_000):
        Xb, yb = planted(big, d)
        t_big, _ = best_time(lambda: mlkr_loss(np.eye(d), Xb - Xb.mean(0), yb[:, None]), repeat=2)
        print(f"  one objective + gradient, ours, n = {big}: {t_big:7.2f} s")


if __name__ == "__main__":
    main()

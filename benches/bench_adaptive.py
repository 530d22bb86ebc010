"""Leave-one-out bandwidth search against statsmodels' cross-validated bandwidths.

Per-feature bandwidths of local constant / local linear regression (statsmodels
``KernelReg(bw="cv_ls")``) and of the Gaussian KDE (``KDEMultivariate(bw="cv_ml")``), same
data, same objective, timed in one run; and the scalar ``bandwidth="loo"`` search of local
linear regression at n = 10⁴, d = 2, exhaustive (the full-sample grid) against coarse to fine.

    python benches/bench_adaptive.py [--n 300] [--full] [--only-10k]   (--full: n = 1,000 for the peers)
"""

import argparse
import os
import time

import numpy as np

from _common import best_time, report


def data(n, seed=5):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    y = np.sin(5 * X[:, 0]) + 2 * X[:, 1] ** 2 + 0.2 * rng.standard_normal(n)
    return X, y


def polish(objective, bw):
    """Minimise a peer's objective from its own answer to 1e-7 in log h: where its optimiser
    stopped early (statsmodels' Nelder-Mead stops at xtol = 1e-3 for KDEMultivariate, 1e-4 for
    KernelReg, absolute in h), this is its true minimiser."""
    from scipy.optimize import minimize

    res = minimize(lambda t: objective(np.exp(t)), np.log(bw), method="Nelder-Mead",
                   options={"xatol": 1e-7, "fatol": 1e-15, "maxiter": 2000})
    return np.exp(res.x)


def main():
    from statsmodels.nonparametric.kernel_density import KDEMultivariate
    from statsmodels.nonparametric.kernel_regression import KernelReg

    from localization import KernelDensity, LocalMeanRegressor, LocalPolynomialRegressor
    from localization.kernels import Kernel

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--only-10k", action="store_true", help="only the scalar search at n = 10^4")
    args = ap.parse_args()
    if args.only_10k:
        return loo_10k()
    n = 1000 if args.full else args.n
    X, y = data(n)
    print(f"n = {n}, d = 2 (statsmodels timed once; ours best of 3; load {os.getloadavg()[0]:.1f}). "
          "CPU: process time, all threads (less sensitive to the load than wall time)")

    def timed(fn, repeat):
        cpu = time.process_time()
        t, out = best_time(fn, repeat=repeat)
        return t, (time.process_time() - cpu) / repeat, out

    # (name, statsmodels, ours, statsmodels' objective of (fitted model, bandwidths), ours of (estimator, kernel))
    peers = (("KernelReg cv_ls lc", lambda: KernelReg(y, X, var_type="cc", reg_type="lc", bw="cv_ls"),
              lambda: LocalMeanRegressor(bandwidth="loo_per_feature").fit(X, y),
              lambda sm, bw: sm.cv_loo(bw, sm._est_loc_constant), lambda est, k: est._loo_objective(k)),
             ("KernelReg cv_ls ll", lambda: KernelReg(y, X, var_type="cc", reg_type="ll", bw="cv_ls"),
              lambda: LocalPolynomialRegressor(bandwidth="loo_per_feature").fit(X, y),
              lambda sm, bw: sm.cv_loo(bw, sm._est_loc_linear), lambda est, k: est._loo_objective(k)),
             ("KDEMultivariate cv_ml", lambda: KDEMultivariate(X, var_type="cc", bw="cv_ml"),
              lambda: KernelDensity(bandwidth="loo_per_feature").fit(X),
              lambda sm, bw: sm.loo_likelihood(bw, np.log), lambda est, k: est._negative_loo_likelihood(k)))
    for name, theirs, ours, sm_objective, our_objective in peers:
        t_sm, cpu_sm, sm = timed(theirs, 1)
        t_ours, cpu_ours, est = timed(ours, 3)
        print(f"  {name}: bandwidths ours {np.round(est.bandwidth_, 5)}  statsmodels {np.round(np.abs(sm.bw), 5)} "
              f"(largest relative difference {np.max(np.abs(est.bandwidth_ / np.abs(sm.bw) - 1)):.1e}); "
              f"{len(est.cv_results_['objective'])} passes; CPU ours {cpu_ours:.3f} s, statsmodels {cpu_sm:.1f} s "
              f"(ratio {cpu_sm / cpu_ours:.0f}x)")
        polished = polish(lambda bw: sm_objective(sm, bw), np.abs(sm.bw))
        ours_at = [our_objective(est, Kernel("gaussian", bw)) for bw in (est.bandwidth_, np.abs(sm.bw), polished)]
        print(f"    our objective at ours {ours_at[0]:.12g}, at statsmodels' {ours_at[1]:.12g}; statsmodels' own objective "
              f"minimised from its answer to 1e-7 (not timed): {np.round(polished, 5)}, relative difference from ours "
              f"{np.max(np.abs(est.bandwidth_ / polished - 1)):.1e}, our objective there {ours_at[2]:.12g}")
        report(f"{name} per-feature", t_ours, t_sm, "statsmodels")
    print(f"  load {os.getloadavg()[0]:.1f}")
    loo_10k()


def loo_10k(repeat=2):
    """The scalar search at n = 10⁴, d = 2: exhaustive (the full-sample grid) against coarse to
    fine (the grid on a subsample), same run; wall and CPU seconds, full-sample passes."""
    from localization import LocalPolynomialRegressor, adaptive

    X, y = data(10_000)
    print(f"local linear bandwidth='loo', n = 10^4, d = 2 (best of {repeat}; load {os.getloadavg()[0]:.1f})")
    coarse_min = adaptive._COARSE_MIN
    for kernel in ("gaussian", "epanechnikov"):
        found = {}
        for search, threshold in (("exhaustive", float("inf")), ("coarse to fine", coarse_min)):
            adaptive._COARSE_MIN = threshold
            cpu = time.process_time()
            t, reg = best_time(lambda: LocalPolynomialRegressor(kernel=kernel, bandwidth="loo").fit(X, y), repeat=repeat)
            cpu = (time.process_time() - cpu) / repeat
            res = reg.cv_results_
            sub = len(res["subsample"]["objective"]) if "subsample" in res else 0
            found[search] = reg.bandwidth_
            print(f"  {kernel:<12} {search:<15} {t:7.3f} s wall, {cpu:7.3f} s CPU  {len(res['objective']):2d} full passes "
                  f"+ {sub:2d} on the subsample, h = {reg.bandwidth_:.6f}")
        print(f"  {kernel:<12} |log h ratio| = {abs(np.log(found['coarse to fine'] / found['exhaustive'])):.1e}")
    adaptive._COARSE_MIN = coarse_min
    print(f"  load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

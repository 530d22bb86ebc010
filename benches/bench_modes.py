"""MedoidShift and QuickShift against peers, in one process on the same data.

* MedoidShift vs the direct NumPy/SciPy evaluation of its definition
  (cdist → kernel → K @ (D∘D)ᵀ → argmin, BLAS-threaded): our Euclidean path (local mean +
  nearest sample, SPEC §9 identity 10), our dense precomputed path, and the kNN-sparse
  variant at sizes where the dense definition no longer fits.
* QuickShift vs scikit-image's ``quickshift`` on an RGB image, same features
  (ratio·Lab colour, row, column) and parameters. scikit-image truncates the Gaussian to a
  square window of half-width ceil(3·kernel_size) pixels; ours sums the exact Gaussian over
  every pixel (brute force, the engine's fused pass), so the segmentations agree closely but
  not exactly on a large image (the ARI is printed).

* ``--scale``: MedoidShift and QuickShift on 10⁵ and 10⁶ 2-D points (the blobs below), no
  peer (the dense definition does not fit at these sizes); wall and CPU seconds.

Usage: python benches/bench_modes.py [--full] [--scale] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.spatial.distance import cdist

from localization.cluster import MedoidShift, QuickShift


def timed(f, repeat=3):
    best, out = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t0)
    return best, out


def blobs(n, seed=0):
    rng = np.random.default_rng(seed)
    c = rng.uniform(-6, 6, (8, 2))
    return c[rng.integers(0, 8, n)] + 0.7 * rng.standard_normal((n, 2))


def numpy_medoid_shift(X, h):
    D = cdist(X, X)
    K = np.exp(-0.5 * (D / h) ** 2)
    return np.argmin(K @ (D * D).T, axis=1)


def bench_medoid(sizes, threads, big):
    print("MedoidShift (gaussian, d=2): ours vs NumPy/SciPy dense definition")
    print(f"{'N':>7} {'numpy s':>9} {'ours-euclid s':>14} {'ratio':>7} {'ours-precomp s':>15} {'ratio':>7} {'same next':>10}")
    h = 0.5
    for n in sizes:
        X = blobs(n)
        t_np, ref = timed(lambda: numpy_medoid_shift(X, h), repeat=1 if n > 3000 else 3)
        t_e, ms = timed(lambda: MedoidShift(bandwidth=h, n_jobs=threads).fit(X))
        D = cdist(X, X)
        t_p, mp = timed(lambda: MedoidShift(bandwidth=h, metric="precomputed", n_jobs=threads).fit(D), repeat=1 if n > 3000 else 3)
        same = min(np.mean(ms.next_ == ref), np.mean(mp.next_ == ref))
        print(f"{n:>7} {t_np:>9.3f} {t_e:>14.4f} {t_np / t_e:>7.1f} {t_p:>15.3f} {t_np / t_p:>7.2f} {same:>10.4f}")
    print("Large N, no dense peer (N×N would not fit): Euclidean dense path vs kNN-sparse variant")
    print(f"{'N':>7} {'k':>5} {'dense s':>8} {'modes':>6} {'kNN s':>7} {'modes':>6} {'same next':>10}")
    for n, k in big:
        X = blobs(n, seed=1)
        hb = 0.3
        t_d, md = timed(lambda: MedoidShift(bandwidth=hb, n_jobs=threads).fit(X), repeat=1)
        t_k, mk = timed(lambda: MedoidShift(bandwidth=hb, n_neighbors=k, n_jobs=threads).fit(X), repeat=1)
        same = np.mean(mk.next_ == md.next_)
        print(f"{n:>7} {k:>5} {t_d:>8.3f} {len(md.medoid_indices_):>6} {t_k:>7.3f} {len(mk.medoid_indices_):>6} {same:>10.4f}")


def image_features(img, ratio):
    from skimage.color import rgb2lab

    H, W = img.shape[:2]
    rr, cc = np.mgrid[:H, :W]
    return np.c_[ratio * rgb2lab(img).reshape(-1, 3), rr.ravel(), cc.ravel()]


def bench_quickshift(sides, threads):
    from skimage import data
    from skimage.segmentation import quickshift
    from skimage.transform import resize
    from sklearn.metrics import adjusted_rand_score

    print("QuickShift on astronaut (ratio=0.5, kernel_size=3, max_dist=6): ours vs scikit-image")
    print("  ours-gauss: exact Gaussian density over all pixels; ours-biweight: compact kernel")
    print("  with the same variance (h = sqrt(7)·kernel_size), kd-tree density; ARI against skimage")
    print(f"{'pixels':>8} {'skimage s':>10} {'gauss s':>8} {'ratio':>7} {'ARI':>6} {'biweight s':>11} {'ratio':>7} {'ARI':>6} {'segments sk/gauss/biw':>22}")
    base = data.astronaut()
    for side in sides:
        img = resize(base, (side, side), anti_aliasing=True)
        ks, md, ratio = 3.0, 6.0, 0.5
        t_sk, seg = timed(lambda: quickshift(img, ratio=ratio, kernel_size=ks, max_dist=md), repeat=3)
        F = image_features(img, ratio)
        t_g, qg = timed(lambda: QuickShift(bandwidth=ks, max_dist=md, n_jobs=threads).fit(F), repeat=1)
        t_b, qb = timed(lambda: QuickShift(bandwidth=np.sqrt(7) * ks, kernel="biweight", max_dist=md, n_jobs=threads).fit(F), repeat=3)
        a_g = adjusted_rand_score(seg.ravel(), qg.labels_)
        a_b = adjusted_rand_score(seg.ravel(), qb.labels_)
        segs = f"{seg.max() + 1}/{qg.labels_.max() + 1}/{qb.labels_.max() + 1}"
        print(f"{side * side:>8} {t_sk:>10.3f} {t_g:>8.3f} {t_sk / t_g:>7.2f} {a_g:>6.3f} {t_b:>11.3f} {t_sk / t_b:>7.2f} {a_b:>6.3f} {segs:>22}")


def bench_quickshift_window(sides, threads):
    """QuickShift(window=ceil(3·kernel_size), window_features=[row, col]) is scikit-image's
    windowed density and parent search: same segments (density ties aside)."""
    from skimage import data
    from skimage.segmentation import quickshift
    from skimage.transform import resize
    from sklearn.metrics import adjusted_rand_score

    print("QuickShift with scikit-image's window (window=ceil(3·kernel_size) on row and column)")
    print("  'same': fraction of pixels with scikit-image's label (and parent); exact ARI: the default")
    print("  (Gaussian summed over every pixel) against scikit-image")
    print(f"{'pixels':>8} {'ks':>4} {'skimage s':>10} {'window s':>9} {'ratio':>7} {'same lab':>9} {'same par':>9} {'exact ARI':>10} {'segments':>9}")
    base = data.astronaut()
    for side in sides:
        img = resize(base, (side, side), anti_aliasing=True)
        F = image_features(img, 0.5)
        for ks, md in ((3.0, 6.0), (5.0, 10.0)):
            t_sk, (seg, par, dist) = timed(lambda: quickshift(img, ratio=0.5, kernel_size=ks, max_dist=md, return_tree=True), repeat=3)
            t_w, qw = timed(lambda: QuickShift(bandwidth=ks, max_dist=md, window=np.ceil(3 * ks), window_features=[-2, -1],
                                               n_jobs=threads).fit(F), repeat=3)
            qe = QuickShift(bandwidth=ks, max_dist=md, n_jobs=threads).fit(F)
            sk_par = np.where(np.asarray(dist).ravel() > md, np.arange(side * side), np.asarray(par).ravel())
            same = np.mean(qw.labels_ == seg.ravel())
            same_p = np.mean(qw.parents_ == sk_par)
            ari = adjusted_rand_score(seg.ravel(), qe.labels_)
            print(f"{side * side:>8} {ks:>4.0f} {t_sk:>10.3f} {t_w:>9.3f} {t_sk / t_w:>7.2f} {same:>9.4f} {same_p:>9.4f} {ari:>10.4f} "
                  f"{seg.max() + 1:>4}/{qe.labels_.max() + 1}")


def bench_scale(sizes, threads, h):
    import os

    print(f"MedoidShift / QuickShift on 2-D blobs, h = {h} (blob sd 0.7): wall and CPU seconds, one run each")
    print(f"{'N':>8} {'method':>12} {'kernel':>13} {'wall s':>7} {'cpu s':>7} {'clusters':>9} {'load':>5}")
    for n in sizes:
        X = blobs(n)
        for kernel in ("epanechnikov", "gaussian"):
            for cls in (MedoidShift, QuickShift):
                load = os.getloadavg()[0]
                t0, c0 = time.perf_counter(), time.process_time()
                est = cls(bandwidth=h, kernel=kernel, n_jobs=threads).fit(X)
                t, c = time.perf_counter() - t0, time.process_time() - c0
                print(f"{n:>8} {cls.__name__:>12} {kernel:>13} {t:>7.2f} {c:>7.2f} {est.labels_.max() + 1:>9} {load:>5.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="larger sizes")
    ap.add_argument("--threads", type=int, default=None, help="n_jobs for ours (default: all cores)")
    ap.add_argument("--scale", action="store_true", help="only the 10^5 / 10^6-point table")
    a = ap.parse_args()
    if a.scale:
        bench_scale([100_000, 1_000_000], a.threads, 0.1)
    elif a.full:
        bench_medoid([1000, 3000, 6000], a.threads, [(50_000, 100), (50_000, 1000)])
        bench_quickshift([64, 128, 256], a.threads)
        bench_quickshift_window([64, 128, 256], a.threads)
    else:
        bench_medoid([1000, 2500], a.threads, [(10_000, 100), (10_000, 1000)])
        bench_quickshift([64, 128], a.threads)
        bench_quickshift_window([64, 128], a.threads)


if __name__ == "__main__":
    main()

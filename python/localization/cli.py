"""The ``localization`` command line: ``localization demo`` and friends.

Each subcommand is a module-level function ``cmd_<name>(args)`` plus a parser builder
registered in ``COMMANDS``; ``localization <name> --help`` documents each.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


PLOT_HINT = "figures need matplotlib: pip install 'localization-methods[plot]'"


def _pyplot():
    """matplotlib's pyplot drawing to files (Agg backend), or None when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path, dpi=110):
    """Lay out, write and close a figure; returns the path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _build_demo(p):
    p.add_argument("--output", default="localization_demo.png",
                   help="where to write the figures (PNG; needs matplotlib, the [plot] extra)")
    p.add_argument("--no-plot", action="store_true", help="skip the figures")


TOUR = """\
A one-screen tour of localization (every line is a local mean under some kernel K):

  from localization import local_mean, kernel_sum, Kernel
  local_mean(Xq, X, y, kernel="epanechnikov", bandwidth=0.5)   # Σ K y / Σ K, no m×n matrix
  kernel_sum(Xq, X, kernel="gaussian", bandwidth=0.2, log=True) # stable log Σ K

  LocalMeanRegressor(bandwidth="loo")        Nadaraya–Watson, h by exact leave-one-out
  LocalMeanRegressor(kernel="knn", n_neighbors=5)   kNN regression
  LocalPolynomialRegressor(degree=1)         local linear; .equivalent_kernel(X) gives ℓ(x*)
  LocalModeClassifier(kernel="knn")          kNN / kernel classification (local mode)
  KernelDensity(kernel="epanechnikov")       log density, sample(), score_function()
  LocalModel(LogisticRegression())           localize any scikit-learn estimator
  NearestNeighbors()                         exact kNN / radius search (kd-tree or blocked brute force)
  MeanShift(kernel="flat", bin_seeding=True)  mode seeking; scikit-learn's centres, much faster
  LocalMeanImputer(image_shape=(28, 28))     two-layer local mean fills NaN (own pixels + similar images)

Threads: n_jobs=... or LOCALIZATION_NUM_THREADS; results are identical for any thread count.
Ctrl-C stops any long call within about 0.1 s (KeyboardInterrupt).
"""


def demo_local_regression(args):
    """Experiment 1: local linear regression is a local mean under its equivalent kernel."""
    from .datasets import make_curve
    from .regression import LocalMeanRegressor, LocalPolynomialRegressor

    X, y = make_curve(200, random_state=0)
    grid = np.linspace(0, 1, 201)[:, None]
    h = 0.06
    t0 = time.perf_counter()
    llr = LocalPolynomialRegressor(degree=1, bandwidth=h).fit(X, y)
    fit_ll = llr.predict(grid)
    ell = llr.equivalent_kernel(grid)
    as_local_mean = ell @ y  # Σ ℓᵢ yᵢ with Σ ℓᵢ = 1: a local mean under ℓ
    nw = LocalMeanRegressor(bandwidth=h).fit(X, y).predict(grid)
    dt = time.perf_counter() - t0
    diff = float(np.max(np.abs(fit_ll - as_local_mean)))
    print("Experiment 1 — local linear regression vs the local mean (200 noisy samples of a curve)")
    print(f"  max |local linear − local mean under its equivalent kernel| = {diff:.3e}")
    print(f"  rows of ℓ sum to 1 (max deviation {np.max(np.abs(ell.sum(1) - 1)):.1e}); "
          f"negative weights present: {bool((ell < 0).any())}")
    print(f"  local mean (Nadaraya–Watson) differs at the boundary by {abs(nw[0] - fit_ll[0]):.3f} (boundary bias)")
    print(f"  computed in {dt * 1e3:.1f} ms")
    if not args.no_plot:
        plt = _pyplot()
        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        ax[0].scatter(X[:, 0], y, s=8, c="0.6", label="data")
        ax[0].plot(grid[:, 0], fit_ll, lw=2, label="local linear")
        ax[0].plot(grid[:, 0], as_local_mean, "--", lw=2, label="local mean under ℓ")
        ax[0].plot(grid[:, 0], nw, ":", lw=2, label="local mean (gaussian K)")
        ax[0].set_title("Local regression is a local mean")
        ax[0].set_xlabel("x (synthetic, unitless)")
        ax[0].set_ylabel("y (synthetic, unitless)")
        ax[0].legend()
        for at in (0, 100, 200):
            ax[1].plot(X[:, 0], ell[at], label=f"ℓ(x*={grid[at, 0]:.2f})")
        ax[1].axhline(0, c="k", lw=0.5)
        ax[1].set_title("Equivalent kernels (signed)")
        ax[1].set_xlabel("sample position xᵢ (unitless)")
        ax[1].set_ylabel("weight ℓᵢ(x*) (unitless, Σᵢ ℓᵢ = 1)")
        ax[1].legend()
        print(f"  figure written to {_save(fig, args.output)}")
    return diff


def _figure_path(args, suffix):
    import os

    base, ext = os.path.splitext(args.output)
    return f"{base}_{suffix}{ext or '.png'}"


def demo_meanshift_trajectories(args):
    """Experiment 2: MeanShift trajectories climb the KDE to its modes."""
    from .cluster import MeanShift
    from .engine import local_mean

    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [4.0, 1.0], [1.5, 4.5], [5.5, 5.0]])
    X = np.concatenate([c + rng.normal(scale=s, size=(200, 2)) for c, s in zip(centres, (0.6, 0.8, 0.7, 0.5))])
    h = 0.7
    t0 = time.perf_counter()
    ms = MeanShift(kernel="gaussian", bandwidth=h, tol=1e-6, return_trajectories=True).fit(X)
    dt = time.perf_counter() - t0
    C = ms.cluster_centers_
    shift = local_mean(C, X, X, kernel="gaussian", bandwidth=h) - C  # = h² ∇log p̂ (identity 4 of docs/identities.md)
    print("Experiment 2 — MeanShift on generated 2-D data (gaussian kernel, every point a seed)")
    print(f"  {len(X)} points, h = {h}: {len(C)} modes in {dt * 1e3:.1f} ms, at most {ms.n_iter_} iterations")
    print(f"  at the modes |m(x) − x| = h²|∇log p̂| ≤ {np.max(np.abs(shift)):.1e} (stationary points of the KDE)")
    print("  modes:", "  ".join(f"({a:.2f}, {b:.2f})" for a, b in C))
    from .cluster import MedoidShift

    t0 = time.perf_counter()
    med = MedoidShift(kernel="gaussian", bandwidth=h, max_iter=5).fit(X)
    dt = time.perf_counter() - t0
    print(f"  MedoidShift (each sample jumps to the sample nearest its local mean): "
          f"{len(med.medoid_indices_)} sample-point modes in {dt * 1e3:.1f} ms")
    if not args.no_plot:
        plt = _pyplot()
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 5.5))
        ax.scatter(X[:, 0], X[:, 1], s=5, c=ms.labels_, cmap="tab10", alpha=0.5)
        for i in range(0, len(X), 9):
            path = ms.trajectories_[i]
            ax.plot(path[:, 0], path[:, 1], "-", lw=0.7, c="0.25", alpha=0.7)
        ax.scatter(C[:, 0], C[:, 1], marker="*", s=250, c="red", edgecolor="k", zorder=3, label="modes")
        ax.set_title(f"MeanShift trajectories to the modes (gaussian, h = {h})")
        ax.legend(loc="lower right")
        bx.scatter(X[:, 0], X[:, 1], s=5, c=med.labels_, cmap="tab10", alpha=0.5)
        for i in range(0, len(X), 9):  # follow the jumps i → next(i) → … to a root
            chain = [i]
            while med.next_[chain[-1]] != chain[-1] and len(chain) < 50:
                chain.append(med.next_[chain[-1]])
            bx.plot(X[chain, 0], X[chain, 1], "-", lw=0.7, c="0.25", alpha=0.7)
        M = X[med.medoid_indices_]
        bx.scatter(M[:, 0], M[:, 1], marker="*", s=250, c="red", edgecolor="k", zorder=3, label="medoid modes")
        bx.set_title(f"MedoidShift jumps to sample-point modes (gaussian, h = {h})")
        bx.legend(loc="lower right")
        for a in (ax, bx):
            a.set_xlabel("feature 1 (synthetic, unitless)")
            a.set_ylabel("feature 2 (synthetic, unitless)")
        print(f"  figure written to {_save(fig, _figure_path(args, 'meanshift'))}")
    return len(C)


def _sample_image():
    """A small RGB image in [0, 1]: scikit-image's coffee, matplotlib's sample, or a synthetic one."""
    try:
        from skimage import data

        img = data.coffee()[::3, ::3] / 255.0
        return img, "scikit-image 'coffee'"
    except Exception:
        pass
    try:
        import matplotlib.cbook as cbook
        import matplotlib.image as mpimg

        with cbook.get_sample_data("grace_hopper.jpg") as f:
            img = mpimg.imread(f, format="jpg")
        return img[::4, ::4, :3] / 255.0, "matplotlib 'grace_hopper'"
    except Exception:
        pass
    yy, xx = np.mgrid[0:120, 0:160] / 40.0
    img = np.stack([np.sin(xx) ** 2, np.cos(yy) ** 2, ((xx + yy) % 2 > 1) * 0.8], axis=-1)
    img += np.random.default_rng(0).normal(scale=0.05, size=img.shape)
    return np.clip(img, 0, 1), "synthetic"


def demo_meanshift_segmentation(args):
    """Experiment 2: MeanShift image segmentation in the joint position–colour space."""
    from .cluster import MeanShift

    img, source = _sample_image()
    hgt, wid, _ = img.shape
    yy, xx = np.mgrid[0:hgt, 0:wid]
    hs, hr = 12.0, 0.12  # spatial and colour bandwidths: features scaled so h = 1
    F = np.column_stack([yy.ravel() / hs, xx.ravel() / hs, img.reshape(-1, 3) / hr])
    t0 = time.perf_counter()
    ms = MeanShift(bandwidth=1.0, bin_seeding=True).fit(F)
    dt = time.perf_counter() - t0
    seg = (ms.cluster_centers_[ms.labels_, 2:] * hr).reshape(img.shape).clip(0, 1)
    print("MeanShift image segmentation (flat kernel on (row, col, r, g, b), bin seeding)")
    print(f"  {source} image {hgt}×{wid}: {len(ms.cluster_centers_)} segments in {dt:.2f} s")
    if not args.no_plot:
        plt = _pyplot()
        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        ax[0].imshow(img)
        ax[0].set_title("image")
        ax[1].imshow(seg)
        ax[1].set_title(f"MeanShift segments ({len(ms.cluster_centers_)})")
        for a in ax:
            a.set_xlabel("column (pixels)")
            a.set_ylabel("row (pixels)")
        print(f"  figure written to {_save(fig, _figure_path(args, 'segmentation'), dpi=100)}")
    return len(ms.cluster_centers_)


DEMOS = [demo_local_regression, demo_meanshift_trajectories, demo_meanshift_segmentation]


def cmd_demo(args):
    """Run the paper's experiments on built-in data and print a tour of the API."""
    if not args.no_plot and _pyplot() is None:
        print(f"note: no figures ({PLOT_HINT})\n")
        args.no_plot = True
    for demo in DEMOS:
        demo(args)
        print()
    print(TOUR)
    return 0


def _build_cluster(p):
    p.add_argument("input", nargs="?", help="CSV (numeric columns, optional header) or .npy file; "
                   "default: a built-in 1,000,000-point 2-D set of 10 Gaussian blobs")
    p.add_argument("--method", choices=("meanshift", "medoidshift", "quickshift"), default="meanshift")
    p.add_argument("--bandwidth", default="auto", help="a number, or 'auto' (estimate_bandwidth, see --quantile: a window radius, "
                   "divided by 3 for kernels without compact support such as the Gaussian)")
    p.add_argument("--quantile", type=float, default=0.3, help="quantile for --bandwidth auto (default 0.3)")
    p.add_argument("--kernel", default=None, help="kernel profile (default: flat for meanshift, gaussian otherwise)")
    p.add_argument("--algorithm", choices=("auto", "exact", "grid"), default="auto", help="MeanShift evaluation")
    p.add_argument("--bin-seeding", action="store_true", help="MeanShift: seed from a grid of side h")
    p.add_argument("--n-samples", type=_positive_int, default=None,
                   help="size of the built-in data set (default 1,000,000; 20,000 for medoidshift/quickshift)")
    p.add_argument("--n-jobs", type=int, default=None,
                   help="threads (default: LOCALIZATION_NUM_THREADS, else OMP_NUM_THREADS, else all cores; "
                   "at most the cores)")
    p.add_argument("--output", help="write one label per line to this CSV file")
    p.add_argument("--plot", help="write a scatter plot of the first two features coloured by cluster "
                   "(PNG; needs matplotlib, the [plot] extra)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def builtin_blobs(n=1_000_000, seed=0):
    """10 Gaussian blobs in 2-D, generated deterministically (centres on a 5 × 2 lattice of spacing 8)."""
    rng = np.random.default_rng(seed)
    centres = np.array([[8.0 * (i % 5), 8.0 * (i // 5)] for i in range(10)])
    y = rng.integers(0, 10, n)
    return centres[y] + rng.normal(scale=1.0, size=(n, 2)), y


def _radius_per_bandwidth(kernel):
    """How many bandwidths of `kernel` span the window radius that `estimate_bandwidth` returns.

    The quantile rule measures a radius (a flat window holding a ``quantile`` of the data
    around each point). A kernel with a compact support reaches exactly its bandwidth, so its
    bandwidth is that radius. A kernel without one reaches much further: a Gaussian of that
    standard deviation smooths several blobs into one mode (with QuickShift's default
    ``max_dist = 3·h`` it also links across them), so its bandwidth is the radius over 3, the
    reach where the Gaussian has fallen to 1 % of its peak (scikit-image's quickshift window).
    """
    from .kernels import support

    s = support(kernel)
    return s if np.isfinite(s) else 3.0


def _read_table(path, purpose, *, missing=False):
    """A non-empty 2-D float64 table (one row a point) from a .npy file or a CSV whose optional
    first line is a header; ``missing=True`` reads empty CSV fields as NaN. ``purpose`` says,
    in errors, what needs real numbers."""
    if path.endswith(".npy"):
        X = np.load(path)
        if X.dtype.kind not in "biuf":
            what = "complex numbers" if X.dtype.kind == "c" else f"dtype {X.dtype}"
            raise ValueError(f"{path}: holds {what}; {purpose} needs real numbers (integer or float)")
    else:
        with open(path) as f:
            first = f.readline()
        try:
            [float(v) for v in first.replace(";", ",").split(",") if v.strip()]
            skip = 0
        except ValueError:
            skip = 1  # a header line
        if missing:
            X = np.genfromtxt(path, delimiter=",", skip_header=skip, ndmin=2, filling_values=np.nan)
        else:
            X = np.loadtxt(path, delimiter=",", skiprows=skip, ndmin=2)
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2 or X.size == 0:
        raise ValueError(f"{path}: expected a non-empty 2-D table of points, got shape {X.shape}")
    return X


def _positive_int(text):
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_int_or_loo(text):
    """argparse type: an integer >= 1 or 'loo'."""
    return text if text == "loo" else _positive_int(text)


def cmd_cluster(args):
    """Cluster points by mode seeking and report what was found."""
    if args.plot and _pyplot() is None:
        print(f"localization cluster: error: --plot: {PLOT_HINT}", file=sys.stderr)
        return 2
    if args.kernel is None:
        args.kernel = "flat" if args.method == "meanshift" else "gaussian"
    from .cluster import MeanShift, estimate_bandwidth

    if args.input is None:
        n = args.n_samples or (1_000_000 if args.method == "meanshift" else 20_000)
        X, _ = builtin_blobs(n)
        source = f"built-in data: {n:,} points, 10 Gaussian blobs in 2-D"
    else:
        X = _read_table(args.input, "clustering")
        source = f"{args.input}: {X.shape[0]:,} points × {X.shape[1]} features"
    print(source)
    if args.bandwidth == "auto":
        if args.input is None:
            h = 1.0  # the blobs' own scale (their standard deviation)
        else:
            h = estimate_bandwidth(X, quantile=args.quantile, n_jobs=args.n_jobs)
            if not h > 0:
                raise ValueError(f"the estimated bandwidth is 0 (most points coincide with their neighbours at "
                                 f"quantile {args.quantile}); pass --bandwidth or a larger --quantile")
            h = h / _radius_per_bandwidth(args.kernel)
        print(f"bandwidth: {h:.4g} ({'blob scale' if args.input is None else f'estimated, quantile {args.quantile}'})")
    else:
        try:
            h = float(args.bandwidth)
        except ValueError:
            print(f"error: --bandwidth must be a number or 'auto', got {args.bandwidth!r}", file=sys.stderr)
            return 2
    t0 = time.perf_counter()
    if args.method == "meanshift" and args.kernel.lower() not in ("flat", "tophat", "uniform") and len(X) > 100_000:
        print("note: a non-flat kernel on this many points climbs with O(n) work per seed and step; "
              "expect a long run (--bin-seeding reduces the seeds, --kernel flat allows the grid)")
    if args.method == "meanshift":
        model = MeanShift(bandwidth=h, kernel=args.kernel, algorithm=args.algorithm, bin_seeding=args.bin_seeding,
                          n_jobs=args.n_jobs, verbose=not args.quiet)
    else:
        from .cluster import MedoidShift, QuickShift

        if args.method == "medoidshift":
            # Iterated MedoidShift merges the spurious sample-point modes one pass leaves.
            model = MedoidShift(bandwidth=h, kernel=args.kernel, max_iter=10, n_jobs=args.n_jobs)
        else:
            model = QuickShift(bandwidth=h, kernel=args.kernel, n_jobs=args.n_jobs)
    labels = np.asarray(model.fit(X).labels_)
    dt = time.perf_counter() - t0
    found = np.unique(labels[labels >= 0])
    sizes_all = np.bincount(labels[labels >= 0]) if len(found) else np.zeros(0, dtype=int)
    major = int(np.sum(sizes_all >= 0.001 * len(X)))
    print(f"{args.method}: {len(found)} clusters ({major} holding at least 0.1% of the points) in {dt:.2f} s "
          f"({X.shape[0] / dt:,.0f} points/s)")
    if args.method == "meanshift":
        print(f"  evaluation: {model.algorithm_}, {len(model.seeds_):,} seeds, at most {model.n_iter_} iterations")
        sizes = np.bincount(labels[labels >= 0])
        for k in np.argsort(-sizes)[:10]:
            c = ", ".join(f"{v:.3g}" for v in model.cluster_centers_[k][:4])
            print(f"  cluster {k}: {sizes[k]:,} points, centre ({c}{', …' if X.shape[1] > 4 else ''})")
    if args.output:
        np.savetxt(args.output, labels, fmt="%d")
        print(f"labels written to {args.output}")
    if args.plot:
        plt = _pyplot()
        idx = np.random.default_rng(0).permutation(len(X))[:50_000]
        P = X if X.shape[1] >= 2 else np.column_stack([X[:, 0], np.zeros(len(X))])
        fig, ax = plt.subplots(figsize=(6, 5.5))
        ax.scatter(P[idx, 0], P[idx, 1], s=2, c=labels[idx], cmap="tab20")
        if args.method == "meanshift":
            C = model.cluster_centers_
            ax.scatter(C[:, 0], C[:, 1] if C.shape[1] > 1 else np.zeros(len(C)), marker="*", s=200, c="red", edgecolor="k")
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_title(f"{args.method}: {len(found)} clusters")
        units = "unitless" if args.input is None else "units of the input"
        ax.set_xlabel(f"feature 1 ({units})")
        ax.set_ylabel(f"feature 2 ({units})" if X.shape[1] > 1 else "(one feature)")
        print(f"plot written to {_save(fig, args.plot)}")
    return 0


def _build_embed(p):
    p.add_argument("input", nargs="?", help="CSV (numeric columns, optional header) or .npy file of points; default: "
                   "Fashion-MNIST (all 70,000 images when the IDX files are found through --data or LOCALIZATION_DATA, "
                   "else the 2,000 shipped ones)")
    p.add_argument("--labels", help="labels for INPUT (one per line, or a .npy file), used for colours and k-NN accuracy")
    p.add_argument("--method", choices=("triplet", "lle", "amds"), default="triplet",
                   help="TripletEmbedding (TriMap-style, default), LocallyLinearEmbedding, or AsymmetricMDS of the "
                   "kNN kernel (query coordinates)")
    p.add_argument("--n-neighbors", type=int, default=10, help="k of LLE and of the kNN kernel (default 10)")
    p.add_argument("--n-samples", type=int, default=None, help="use only the first N points")
    p.add_argument("--data", help="folder with the Fashion-MNIST IDX files")
    p.add_argument("--random-state", type=int, default=0)
    p.add_argument("--n-jobs", type=int, default=None, help="threads (default: all cores)")
    p.add_argument("--output", default="embedding.csv", help="2-D coordinates (and labels) as CSV (default embedding.csv)")
    p.add_argument("--plot", default="embedding.png", help="scatter plot coloured by label, PNG (default embedding.png)")
    p.add_argument("--no-plot", action="store_true", help="skip the figure")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _read_labels(path, n):
    y = np.load(path) if path.endswith(".npy") else np.loadtxt(path, dtype=str, ndmin=1)
    y = np.asarray(y).ravel()
    if len(y) != n:
        raise ValueError(f"{path}: {len(y)} labels for {n} points")
    return y


def cmd_embed(args):
    """Embed points in 2-D (experiment 4) and report trustworthiness and k-NN accuracy."""
    from .datasets import FASHION_MNIST_CLASSES, load_fashion_mnist
    from .embedding import AsymmetricMDS, LocallyLinearEmbedding, TripletEmbedding
    from .metrics import knn_accuracy, trustworthiness

    names = None
    if args.input is None:
        try:
            X, y, src = load_fashion_mnist("all", args.n_samples, args.data, return_source=True)
            source = f"Fashion-MNIST, {len(X):,} images (training + test files)"
        except FileNotFoundError:
            if args.data is not None:
                raise
            X, y = load_fashion_mnist("test", args.n_samples)
            source = f"Fashion-MNIST, the {len(X):,} shipped test images (point --data or LOCALIZATION_DATA at the IDX files for all 70,000)"
        names = FASHION_MNIST_CLASSES
    else:
        X = _read_table(args.input, "embedding")
        y = _read_labels(args.labels, len(X)) if args.labels else None
        if args.n_samples is not None:
            X = X[: args.n_samples]
            y = None if y is None else y[: args.n_samples]
        source = f"{args.input}: {X.shape[0]:,} points × {X.shape[1]} features"
    print(source)
    k = args.n_neighbors
    if args.method == "triplet":
        model = TripletEmbedding(random_state=args.random_state, n_jobs=args.n_jobs, verbose=not args.quiet)
    elif args.method == "lle":
        model = LocallyLinearEmbedding(n_neighbors=k, random_state=args.random_state, n_jobs=args.n_jobs)
    else:
        model = AsymmetricMDS(kernel="knn", n_neighbors=k, random_state=args.random_state, n_jobs=args.n_jobs)
    t0 = time.perf_counter()
    Y = model.fit_transform(X)
    dt = time.perf_counter() - t0
    print(f"{type(model).__name__}: {len(X):,} points → 2-D in {dt:.2f} s")
    big = len(X) > 20_000
    t = trustworthiness(X, Y, n_neighbors=10, sample_size=5_000 if big else None, random_state=0, n_jobs=args.n_jobs)
    print(f"  trustworthiness@10 = {t:.4f}" + (" (over 5,000 random points)" if big else ""))
    if y is not None:
        print(f"  10-NN accuracy     = {knn_accuracy(Y, y, n_neighbors=10, n_jobs=args.n_jobs):.4f}")
    if args.output:
        with open(args.output, "w") as f:
            f.write("x,y" + (",label" if y is not None else "") + "\n")
            for i in range(len(Y)):
                f.write(f"{Y[i, 0]:.7g},{Y[i, 1]:.7g}" + (f",{y[i]}" if y is not None else "") + "\n")
        print(f"coordinates written to {args.output}")
    if args.plot and not args.no_plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 6))
        if y is None:
            ax.scatter(Y[:, 0], Y[:, 1], s=2, label="points")
        else:
            classes = np.unique(y)
            cmap = plt.get_cmap("tab10" if len(classes) <= 10 else "tab20")
            for c_i, c in enumerate(classes):
                m = y == c
                label = names[int(c)] if names is not None else str(c)
                ax.scatter(Y[m, 0], Y[m, 1], s=2 if len(X) > 5000 else 6, color=cmap(c_i % cmap.N), label=label)
            ax.legend(markerscale=4, fontsize=8, loc="best")
        ax.set_xlabel("embedding coordinate 1 (arbitrary units)")
        ax.set_ylabel("embedding coordinate 2 (arbitrary units)")
        ax.set_title(f"{type(model).__name__} of {len(X):,} points")
        print(f"plot written to {_save(fig, args.plot)}")
    return 0


def _build_impute(p):
    p.add_argument("input", help="CSV (numeric, NaN or empty fields for missing values, optional header) or .npy file")
    p.add_argument("output", help="where to write the filled table (.npy or CSV, by extension)")
    p.add_argument("--image-shape", type=_positive_int, nargs=2, metavar=("H", "W"), default=None,
                   help="rows are H×W images: the first layer averages neighbouring pixels")
    p.add_argument("--n-neighbors", type=_positive_int_or_loo, default="loo",
                   help="samples in the sample-level mean, or 'loo' (default: chosen on a hold-out, at most 20)")
    p.add_argument("--n-iter", type=_positive_int, default=2, help="rounds of the fill (default 2)")
    p.add_argument("--bandwidth", default="loo", help="sample-level bandwidth scale, or 'loo' (default)")
    p.add_argument("--feature-bandwidth", default="loo", help="pixel/feature bandwidth, or 'loo' (default)")
    p.add_argument("--random-state", type=int, default=0, help="seed of the leave-one-out subsample")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def cmd_impute(args):
    """Fill the missing values (NaN) of a table or a stack of images with LocalMeanImputer."""
    from .impute import LocalMeanImputer

    X = _read_table(args.input, "imputation", missing=True)
    missing = int(np.isnan(X).sum())
    print(f"{args.input}: {X.shape[0]:,} rows × {X.shape[1]} columns, {missing:,} missing ({missing / X.size:.1%})")

    def number_or_loo(text, name):
        if text == "loo":
            return text
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"--{name} must be a number or 'loo', got {text!r}") from None

    imp = LocalMeanImputer(
        image_shape=args.image_shape, n_neighbors=args.n_neighbors, n_iter=args.n_iter,
        bandwidth=number_or_loo(args.bandwidth, "bandwidth"),
        feature_bandwidth=number_or_loo(args.feature_bandwidth, "feature-bandwidth"),
        random_state=args.random_state, progress=not args.quiet,
    )
    t0 = time.perf_counter()
    out = imp.fit_transform(X)
    print(f"filled in {time.perf_counter() - t0:.2f} s ({imp.n_neighbors_} neighbours, bandwidth {imp.bandwidth_:.3g}, "
          f"feature bandwidth {imp.feature_bandwidth_:.3g})")
    if args.output.endswith(".npy"):
        np.save(args.output, out)
    else:
        np.savetxt(args.output, out, delimiter=",", fmt="%.17g")
    print(f"written to {args.output}")
    return 0


def _build_attention(p):
    p.add_argument("--data", default=None, help="oliver_twist.txt or its folder (default: LOCALIZATION_DATA or the copy shipped with the package)")
    p.add_argument("--max-words", type=int, default=None, help="use only the first N words of the novel (quick runs)")
    p.add_argument("--epochs", type=int, default=6, help="Adam epochs of both trained models (default 6)")
    p.add_argument("--vocab-size", type=int, default=2000, help="most frequent words kept (default 2000)")
    p.add_argument("--context", type=int, default=128, help="words per training window (default 128)")
    p.add_argument("--heads", type=int, default=4, help="heads of the local-mode model (default 4)")
    p.add_argument("--rank", type=int, default=16, help="rank of the learned query/key tables (default 16)")
    p.add_argument("--seed", type=int, default=0, help="random_state (default 0)")
    p.add_argument("--n-jobs", type=int, default=None, help="threads (default: all cores)")
    p.add_argument("--output", default="attention.png", help="figure name stem: <stem>_query_key.png, <stem>_graph.png, <stem>_training.png")
    p.add_argument("--no-plot", action="store_true", help="skip the figures")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def cmd_attention(args):
    """The paper's experiment 5: learn query/key/value kernels and a position kernel from Oliver Twist."""
    from . import language

    t0 = time.perf_counter()
    result = language.oliver_twist_experiment(
        args.data, vocab_size=args.vocab_size, context=args.context, n_heads=args.heads, rank=args.rank,
        epochs=args.epochs, max_words=args.max_words, random_state=args.seed, progress=not args.quiet, n_jobs=args.n_jobs,
    )
    print("Experiment 5 — attention as a temporal local mean, kernels learned from Oliver Twist")
    print(result.summary())
    qkv = result.models["qkv"]
    print("  learned decays λ per head (position kernel exp(−λ|t − s|)):", " ".join(f"{v:.3g}" for v in qkv.decay()))
    print(f"  total {time.perf_counter() - t0:.0f} s")
    if not args.no_plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        vocab = result.vocabulary
        fig, ax = plt.subplots(figsize=(8, 7.5))
        language.plot_query_key(qkv, vocab, n_words=40, head=int(np.argmax(qkv.decay())), ax=ax)
        out = _save(fig, _figure_path(args, "query_key"), dpi=120)
        test_words = vocab.decode(result.splits["test"])
        sentence = language.sentence_from(test_words, min_len=10, max_len=16)
        fig, ax = plt.subplots(figsize=(max(9, 0.75 * len(sentence)), 5))
        language.plot_attention_graph(qkv, vocab, sentence, ax=ax)
        out2 = _save(fig, _figure_path(args, "graph"), dpi=120)
        fig, ax = plt.subplots(figsize=(7, 4.5))
        language.plot_training(result, ax=ax)
        out3 = _save(fig, _figure_path(args, "training"), dpi=120)
        print(f"  figures written to {out}, {out2}, {out3}")
    return 0


COMMANDS = {
    "demo": (cmd_demo, _build_demo, "run the paper's experiments on built-in data (no network) and tour the API"),
    "cluster": (cmd_cluster, _build_cluster, "cluster points by mode seeking (MeanShift, MedoidShift, QuickShift)"),
    "embed": (cmd_embed, _build_embed, "embed points in 2-D (TripletEmbedding, LLE, asymmetric MDS) with quality figures"),
    "impute": (cmd_impute, _build_impute, "fill missing values (NaN) of a CSV/.npy table or image stack (LocalMeanImputer)"),
    "attention": (cmd_attention, _build_attention, "learn attention kernels from Oliver Twist (experiment 5) and report perplexities"),
}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="localization", description="The localization method: local means, fast.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command")
    for name, (_, build, help_) in COMMANDS.items():
        build(sub.add_parser(name, help=help_, description=help_))
    args = parser.parse_args(argv)
    if args.version:
        from . import __version__

        print(__version__)
        return 0
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return COMMANDS[args.command][0](args)
    except (OSError, ValueError, TypeError, MemoryError) as e:
        print(f"localization {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"localization {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

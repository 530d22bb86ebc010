"""Running a peer library's own tests against this library.

The peer's test module is imported as it is installed; its test functions are collected by
our test modules, and while each runs, the peer's estimator names in that module resolve to
*ours*. Where the peer's constructor spells a parameter differently, a thin adapter below
translates it (e.g. scikit-learn's ``LabelPropagation(gamma=γ)`` is our Gaussian with
h = 1/√(2γ)); it adds no behaviour. A feature we do not offer raises :class:`Unsupported`
with one of the reasons below, which the conftest turns into an expected failure; every
reason is listed in ``docs/parity.md`` (a test checks it).
"""

from __future__ import annotations

import contextlib

import numpy as np

import localization as loc

# --- reasons (each one is listed in docs/parity.md) ----------------------------------------

EUCLIDEAN_ONLY = "only the Euclidean distance is offered (metric='euclidean', or 'minkowski' with p=2)"
PRECOMPUTED = "metric='precomputed' (a distance matrix or graph as input) is not offered"
WEIGHTS = ("weights='distance' or a callable: the kNN kernel weighs its k neighbours equally or by a "
           "profile of d/d_k (Kernel('knn', knn_profile=...)), not by 1/d")
AFFINITY_CALLABLE = ("a callable kernel is a profile k(u) of the scaled distance, not a function returning an "
                     "affinity matrix")
KERNEL_REG_BW = ("statsmodels' data-driven bandwidths (bw='cv_ls', 'aic') are not mapped by the adapter: 'aic' is "
                 "not offered, and 'cv_ls' is bandwidth='loo_per_feature' of LocalMeanRegressor and "
                 "LocalPolynomialRegressor (the same objective and minimiser, tested in tests/test_adaptive.py)")
KERNEL_REG_VAR_TYPE = "ordered and unordered regressors (var_type 'o', 'u') need discrete kernels, which are not offered"
KERNEL_REG_KERNEL = ("statsmodels' tricube sets u to 0 beyond the support instead of the kernel, so the farthest "
                     "points get the largest weight; ours is (1 − u³)³ on u < 1")
KERNEL_REG_EXTRAS = ("KernelReg's marginal effects, r_squared, sig_test and aic_hurvich are not offered (the local "
                     "slopes are LocalPolynomialRegressor's design, not returned)")
KDE_METRIC = EUCLIDEAN_ONLY


class Unsupported(NotImplementedError):
    """A feature of the peer that this library does not offer (an expected failure)."""


def unsupported(reason):
    raise Unsupported(reason)


# --- scikit-learn's neighbours -----------------------------------------------------------


def _check_metric(metric, p=2, metric_params=None):
    if isinstance(metric, str) and metric == "precomputed":
        unsupported(PRECOMPUTED)
    name = getattr(metric, "__class__", type(None)).__name__ if not isinstance(metric, str) else metric
    euclidean = name in ("euclidean", "l2", "EuclideanDistance", "EuclideanDistance64", "EuclideanDistance32") or (
        name == "minkowski" and p == 2
    )
    if not euclidean or metric_params:
        unsupported(EUCLIDEAN_ONLY)


@contextlib.contextmanager
def _native_algorithm(est):
    """scikit-learn's algorithm names on our estimators: the ball tree is our kd-tree (both
    searches are exact, so only the speed differs)."""
    given = est.algorithm
    est.algorithm = "kd_tree" if given == "ball_tree" else given
    try:
        yield
    finally:
        est.algorithm = given


class NearestNeighbors(loc.NearestNeighbors):
    def __init__(self, *, n_neighbors=5, radius=1.0, algorithm="auto", leaf_size=30, metric="minkowski", p=2,
                 metric_params=None, n_jobs=None):
        super().__init__(n_neighbors=n_neighbors, radius=radius, algorithm=algorithm, leaf_size=leaf_size, n_jobs=n_jobs)
        self.metric = metric
        self.p = p
        self.metric_params = metric_params

    def fit(self, X, y=None):
        _check_metric(self.metric, self.p, self.metric_params)
        with _native_algorithm(self):
            return super().fit(X, y)

    def __setstate__(self, state):
        given = state["algorithm"]
        super().__setstate__(dict(state, algorithm="kd_tree" if given == "ball_tree" else given))
        self.algorithm = given


def _knn(est):
    if est.weights not in (None, "uniform"):
        unsupported(WEIGHTS)
    _check_metric(est.metric, est.p, est.metric_params)


class KNeighborsClassifier(loc.LocalModeClassifier):
    kernel = "knn"
    bandwidth = 1.0
    scoring = "log_loss"
    bandwidth_grid = None

    def __init__(self, n_neighbors=5, *, weights="uniform", algorithm="auto", leaf_size=30, p=2, metric="minkowski",
                 metric_params=None, n_jobs=None):
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.algorithm = algorithm
        self.leaf_size = leaf_size
        self.p = p
        self.metric = metric
        self.metric_params = metric_params
        self.n_jobs = n_jobs

    def fit(self, X, y, sample_weight=None):
        _knn(self)
        with _native_algorithm(self):
            return super().fit(X, y, sample_weight)

    def predict_proba(self, X):
        _knn(self)
        with _native_algorithm(self):
            return super().predict_proba(X)


class KNeighborsRegressor(loc.LocalMeanRegressor):
    kernel = "knn"
    bandwidth = 1.0
    bandwidth_grid = None
    grid_size = atol = rtol = None

    def __init__(self, n_neighbors=5, *, weights="uniform", algorithm="auto", leaf_size=30, p=2, metric="minkowski",
                 metric_params=None, n_jobs=None):
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.algorithm = algorithm
        self.leaf_size = leaf_size
        self.p = p
        self.metric = metric
        self.metric_params = metric_params
        self.n_jobs = n_jobs

    def fit(self, X, y, sample_weight=None):
        _knn(self)
        with _native_algorithm(self):
            return super().fit(X, y, sample_weight)

    def predict(self, X):
        _knn(self)
        with _native_algorithm(self):
            return super().predict(X)


# --- scikit-learn's KernelDensity and LabelPropagation -------------------------------------


class KernelDensity(loc.KernelDensity):
    """scikit-learn's spelling: the tolerances and the tree options only trade accuracy or
    speed in scikit-learn's tree sums; our sums are exact, so any tolerance is met."""

    def __init__(self, *, bandwidth=1.0, algorithm="auto", kernel="gaussian", metric="euclidean", atol=0, rtol=0,
                 breadth_first=True, leaf_size=40, metric_params=None):
        super().__init__(bandwidth=bandwidth, kernel=kernel, algorithm=algorithm)
        self.metric = metric
        self.atol = atol
        self.rtol = rtol
        self.breadth_first = breadth_first
        self.leaf_size = leaf_size
        self.metric_params = metric_params

    def fit(self, X, y=None, sample_weight=None):
        _check_metric(self.metric, 2, self.metric_params)
        with _native_algorithm(self):
            return super().fit(X, y, sample_weight)

    def score_samples(self, X):
        with _native_algorithm(self):
            return super().score_samples(X)


class LabelPropagation(loc.LabelPropagation):
    """scikit-learn's spelling: kernel='rbf' with gamma is our Gaussian with h = 1/√(2γ)."""

    algorithm = "auto"
    verbose = False

    def __init__(self, kernel="rbf", *, gamma=20, n_neighbors=7, max_iter=1000, tol=1e-3, n_jobs=None):
        self.kernel = kernel
        self.gamma = gamma
        self.n_neighbors = n_neighbors
        self.max_iter = max_iter
        self.tol = tol
        self.n_jobs = n_jobs

    @property
    def bandwidth(self):
        return 1.0 / np.sqrt(2.0 * self.gamma)

    def _kernel(self):
        if callable(self.kernel):
            unsupported(AFFINITY_CALLABLE)
        if self.kernel == "rbf":
            return loc.Kernel("gaussian", self.bandwidth)
        return loc.Kernel("knn", n_neighbors=self.n_neighbors)


# --- statsmodels' KernelReg ---------------------------------------------------------------


class KernelReg:
    """statsmodels' ``KernelReg`` spelling over LocalMeanRegressor ('lc') and
    LocalPolynomialRegressor(degree=1) ('ll'), for continuous regressors and given bandwidths.
    statsmodels' Gaussian product kernel with per-feature bandwidths is our Gaussian with a
    per-feature bandwidth; other kernel names go to our estimators as they are."""

    def __init__(self, endog, exog, var_type, reg_type="ll", bw="cv_ls", ckertype="gaussian", okertype="wangryzin",
                 ukertype="aitchisonaitken", defaults=None, rng=None):
        if ckertype == "tricube":
            unsupported(KERNEL_REG_KERNEL)
        self.endog = np.asarray(endog, dtype=float).reshape(-1)
        self.exog = np.column_stack([np.asarray(e, dtype=float).reshape(-1) for e in (exog if np.ndim(exog) > 1 else [exog])])
        if self.exog.shape[0] != self.endog.shape[0]:
            self.exog = np.asarray(exog, dtype=float).reshape(len(self.endog), -1)
        if any(c != "c" for c in var_type):
            unsupported(KERNEL_REG_VAR_TYPE)
        if isinstance(bw, str):
            unsupported(KERNEL_REG_BW)
        self.bw = np.asarray(bw, dtype=float)
        if reg_type == "lc":
            self._est = loc.LocalMeanRegressor(kernel=ckertype, bandwidth=self.bw)
        else:
            self._est = loc.LocalPolynomialRegressor(degree=1, kernel=ckertype, bandwidth=self.bw)
        self._est.fit(self.exog, self.endog)

    def fit(self, data_predict=None):
        unsupported(KERNEL_REG_EXTRAS)  # fit returns (mean, marginal effects)

    def r_squared(self):
        unsupported(KERNEL_REG_EXTRAS)

    def sig_test(self, *args, **kwargs):
        unsupported(KERNEL_REG_EXTRAS)

    def aic_hurvich(self, *args, **kwargs):
        unsupported(KERNEL_REG_EXTRAS)


REASONS = [EUCLIDEAN_ONLY, PRECOMPUTED, WEIGHTS, AFFINITY_CALLABLE, KERNEL_REG_BW, KERNEL_REG_VAR_TYPE,
           KERNEL_REG_KERNEL, KERNEL_REG_EXTRAS]

"""Local mode classification: P̂(y = c | x*) = Σᵢ K̃(x*, xᵢ) 1[yᵢ = c]."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ._base import LOO_KERNEL_CONSTRAINTS, LocalEstimator, keeps_state_on_error
from .adaptive import MultiKernel, fit_loo, fit_multikernel, is_loo
from .engine import bind_kernel
from ._validation import FLOAT_DTYPES, LocalizationError, LocalizationWarning, StrOptions, fit_context, validate_data

if TYPE_CHECKING:
    from ._typing import ArrayLike, BandwidthLike, FloatArray, KernelLike, NDArray, Self



class LocalModeClassifier(ClassifierMixin, LocalEstimator):
    """Classify by the local mode: the class with the largest kernel-weighted share.

    ``predict_proba`` is the local mean of one-hot labels; with ``kernel="knn"`` this is
    exactly k-nearest-neighbour classification. Multi-output targets (y of shape
    (n_samples, n_outputs)) are classified output by output, in one engine pass.

    Parameters
    ----------
    kernel : str, callable, Kernel or MultiKernel, default="gaussian"
        A :class:`~localization.adaptive.MultiKernel` learns simplex mixture weights of
        its kernels by the leave-one-out Brier score (``kernel_weights_``).
    bandwidth : float, array, rule name, "loo", "loo_per_feature", Balloon or SamplePoint, default=1.0
        ``"loo"`` chooses h by the exact leave-one-out ``scoring`` (each training point
        classified without its own vote: the hollow kernel), on a logarithmic grid refined
        by golden section (log-loss) or on the grid alone (accuracy, piecewise constant);
        ``"loo_per_feature"`` continues with one bandwidth per feature (log-loss only).
    n_neighbors : int, optional
        k of the ``"knn"`` kernel (default 5).
    scoring : {"log_loss", "accuracy"}, default="log_loss"
        The leave-one-out criterion of ``bandwidth="loo"``: the mean negative log-probability
        of the true class (probabilities clipped at the float epsilon, as scikit-learn's
        ``log_loss``), or the error rate 1 − accuracy.
    bandwidth_grid : array-like, optional
        Candidate bandwidths (factors of a Kernel object's own) for the LOO search.
    algorithm : {"auto", "brute", "kd_tree", "expansion"}, default="auto"
    n_jobs : int, optional
    verbose : bool, default=False
        Progress bars on stderr for calls that last more than 0.2 s: the leave-one-out
        bandwidth search (one step per evaluation), the kernel weights of a MultiKernel and
        predictions on many queries.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,), or a list of them (one per output)
    class_prior_ : ndarray of shape (n_classes,), or a list of them
        Weighted class frequencies; used (with a warning) for queries that no sample reaches.
    outputs_2d_ : bool
        Whether y was 2-D (multi-output).
    bandwidth_ : float, ndarray or object
        The bandwidth used (the LOO choice for a LOO rule).
    cv_results_ : dict
        LOO rules only: every evaluated ``"bandwidth"``, its ``"objective"`` (the LOO
        log-loss or error rate) and the ``"stage"`` of the search.

    Examples
    --------
    >>> import numpy as np
    >>> from localization import LocalModeClassifier
    >>> X = np.array([[0.0], [0.1], [0.2], [1.0], [1.1], [1.2]])
    >>> clf = LocalModeClassifier(kernel="knn", n_neighbors=2).fit(X, list("aaabbb"))
    >>> clf.predict([[0.05], [0.95]]).tolist()
    ['a', 'b']
    >>> clf.predict(None).tolist()    # leave-one-out: each point without its own vote
    ['a', 'a', 'a', 'b', 'b', 'b']
    """

    _parameter_constraints = {**LOO_KERNEL_CONSTRAINTS, "scoring": [StrOptions({"log_loss", "accuracy"})]}

    def __init__(
        self, kernel: KernelLike = "gaussian", bandwidth: BandwidthLike = 1.0, n_neighbors: int | None = None,
        scoring: str = "log_loss", bandwidth_grid: ArrayLike | None = None, algorithm: str = "auto",
        n_jobs: int | None = None, verbose: int | bool = False,
    ) -> None:
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.scoring = scoring
        self.bandwidth_grid = bandwidth_grid
        self.algorithm = algorithm
        self.n_jobs = n_jobs
        self.verbose = verbose

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Self:
        """Store the sample and its classes. Returns self."""
        X, y = validate_data(self, X, y, dtype=FLOAT_DTYPES, order="C", multi_output=True, densify=True)
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            warnings.warn("A column-vector y was passed when a 1d array was expected. Please change the shape of y "
                          "to (n_samples,), for example using ravel().", DataConversionWarning, stacklevel=2)
        self.outputs_2d_ = y.ndim == 2 and y.shape[1] > 1
        Y = y.reshape(len(y), -1)
        check_classification_targets(Y if self.outputs_2d_ else Y[:, 0])
        self._store(X, sample_weight)
        w = np.ones(len(Y)) if self.sample_weight_ is None else self.sample_weight_.astype(np.float64)
        classes, blocks, priors = [], [], []
        for col in Y.T:
            c, codes = np.unique(col, return_inverse=True)
            block = np.zeros((len(col), len(c)), dtype=X.dtype)
            block[np.arange(len(col)), codes] = 1
            classes.append(c)
            blocks.append(block)
            priors.append(np.bincount(codes, weights=w, minlength=len(c)) / w.sum())
        # One engine pass for every output: the one-hot blocks side by side.
        self.onehot_ = np.ascontiguousarray(np.hstack(blocks))
        self._splits = np.cumsum([len(c) for c in classes])[:-1]
        self.classes_ = classes if self.outputs_2d_ else classes[0]
        self.class_prior_ = priors if self.outputs_2d_ else priors[0]
        if isinstance(self.kernel, MultiKernel):
            fit_multikernel(self, lambda k: self._loo_proba(k) - self.onehot_)
            self.bandwidth_ = self.bandwidth
        elif is_loo(self.bandwidth):
            if self.scoring == "accuracy" and self.bandwidth == "loo_per_feature":
                raise LocalizationError("bandwidth='loo_per_feature' needs scoring='log_loss' (the error rate is piecewise "
                                        "constant, it has no gradient)", "bandwidth")
            fit_loo(self, self._loo_objective, n_features=X.shape[1], refine=self.scoring == "log_loss")
        else:
            self.bandwidth_ = self.bandwidth
        return self

    def _loo_proba(self, kernel):
        """Leave-one-out class shares (all outputs side by side); NaN where no sample is near."""
        bk = bind_kernel(kernel, self.X_fit_, self.sample_weight_, False, type(self).__name__)
        sums = bk.sums(self.X_fit_, self.onehot_, self.sample_weight_, exclude_self=True,
                       algorithm=self.algorithm, n_jobs=self.n_jobs)
        num, den = sums.num, sums.den
        with np.errstate(invalid="ignore", divide="ignore"):
            proba = num.astype(np.float64) / den.astype(np.float64)[:, None]
        proba[~(den > 0)] = np.nan
        return proba

    def _loo_objective(self, kernel):
        """The LOO log-loss or error rate under ``kernel``; inf where a sample has no neighbour."""
        proba = self._loo_proba(kernel)
        if not np.all(np.isfinite(proba)):
            return np.inf
        w = None if self.sample_weight_ is None else self.sample_weight_.astype(np.float64)
        total = 0.0
        for P, T in zip(np.split(proba, self._splits, axis=1), np.split(self.onehot_, self._splits, axis=1)):
            truth = T.astype(bool)
            if self.scoring == "log_loss":
                p = np.clip(P[truth], np.finfo(self.X_fit_.dtype).eps, 1.0)
                total -= np.average(np.log(p), weights=w)
            else:  # the first class among ties wins, as in predict
                total += 1.0 - np.average(truth[np.arange(len(P)), np.argmax(P, axis=1)], weights=w)
        return total / (len(self._splits) + 1)

    def predict_proba(self, X: ArrayLike | None) -> FloatArray | list[FloatArray]:
        """Local class shares, shape (n_queries, n_classes) (a list of them for multi-output);
        rows sum to one. ``X=None``: leave-one-out at the training points (each point's own
        label left out), as scikit-learn's ``predict_proba(None)``."""
        check_is_fitted(self)
        sums = self._sums(X, self.onehot_)
        num, den = sums.num, sums.den
        proba = np.empty(num.shape, dtype=np.float64)
        ok = den > 0
        proba[ok] = num[ok] / den[ok, None]
        priors = self.class_prior_ if self.outputs_2d_ else [self.class_prior_]
        if not ok.all():
            warnings.warn(
                f"{int((~ok).sum())} queries have zero total kernel weight; their probabilities are the "
                "class prior. Increase the bandwidth or use a kernel with unbounded support.",
                LocalizationWarning,
                stacklevel=2,
            )
            proba[~ok] = np.concatenate(priors)
        parts = np.split(proba, self._splits, axis=1)
        return parts if self.outputs_2d_ else parts[0]

    def predict(self, X: ArrayLike | None) -> NDArray[Any]:
        """The local mode (ties go to the first class, as in scikit-learn); shape (n_queries,)
        or (n_queries, n_outputs). ``X=None``: leave-one-out at the training points."""
        check_is_fitted(self)
        proba = self.predict_proba(X)
        if not self.outputs_2d_:
            return self.classes_[np.argmax(proba, axis=1)]
        return np.stack([c[np.argmax(p, axis=1)] for c, p in zip(self.classes_, proba)], axis=1)

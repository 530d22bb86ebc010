"""Local mode classification (SPEC §3): P̂(y = c | x*) = Σᵢ K̃(x*, xᵢ) 1[yᵢ = c]."""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ._base import LocalEstimator, keeps_state_on_error
from ._validation import FLOAT_DTYPES, LocalizationWarning, validate_data


class LocalModeClassifier(ClassifierMixin, LocalEstimator):
    """Classify by the local mode: the class with the largest kernel-weighted share.

    ``predict_proba`` is the local mean of one-hot labels; with ``kernel="knn"`` this is
    exactly k-nearest-neighbour classification. Multi-output targets (y of shape
    (n_samples, n_outputs)) are classified output by output, in one engine pass.

    Parameters
    ----------
    kernel : str, callable or Kernel, default="gaussian"
    bandwidth : float, array, rule name, Balloon or SamplePoint, default=1.0
    n_neighbors : int, optional
        k of the ``"knn"`` kernel (default 5).
    algorithm : {"auto", "brute", "kd_tree", "expansion"}, default="auto"
    n_jobs : int, optional

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,), or a list of them (one per output)
    class_prior_ : ndarray of shape (n_classes,), or a list of them
        Weighted class frequencies; used (with a warning) for queries that no sample reaches.
    outputs_2d_ : bool
        Whether y was 2-D (multi-output).

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

    def __init__(self, kernel="gaussian", bandwidth=1.0, n_neighbors=None, algorithm="auto", n_jobs=None):
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.algorithm = algorithm
        self.n_jobs = n_jobs

    @keeps_state_on_error
    def fit(self, X, y, sample_weight=None):
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
        return self

    def predict_proba(self, X):
        """Local class shares, shape (n_queries, n_classes) (a list of them for multi-output);
        rows sum to one. ``X=None``: leave-one-out at the training points (each point's own
        label left out), as scikit-learn's ``predict_proba(None)``."""
        check_is_fitted(self)
        num, den, *_ = self._sums(X, self.onehot_)
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

    def predict(self, X):
        """The local mode (ties go to the first class, as in scikit-learn); shape (n_queries,)
        or (n_queries, n_outputs). ``X=None``: leave-one-out at the training points."""
        check_is_fitted(self)
        proba = self.predict_proba(X)
        if not self.outputs_2d_:
            return self.classes_[np.argmax(proba, axis=1)]
        return np.stack([c[np.argmax(p, axis=1)] for c, p in zip(self.classes_, proba)], axis=1)

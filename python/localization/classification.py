"""Local mode classification (SPEC §3): P̂(y = c | x*) = Σᵢ K̃(x*, xᵢ) 1[yᵢ = c]."""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ._base import LocalEstimator, keeps_state_on_error
from ._validation import FLOAT_DTYPES, LocalizationWarning, validate_data


class LocalModeClassifier(ClassifierMixin, LocalEstimator):
    """Classify by the local mode: the class with the largest kernel-weighted share.

    ``predict_proba`` is the local mean of one-hot labels; with ``kernel="knn"`` this is
    exactly k-nearest-neighbour classification.

    Parameters
    ----------
    kernel : str, callable or Kernel, default="gaussian"
    bandwidth : float, array, "scott", "silverman", Balloon or SamplePoint, default=1.0
    n_neighbors : int, optional
        k of the ``"knn"`` kernel (default 5).
    algorithm : {"auto", "brute", "kd_tree", "expansion"}, default="auto"
    n_jobs : int, optional

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    class_prior_ : ndarray of shape (n_classes,)
        Weighted class frequencies; used (with a warning) for queries that no sample reaches.

    Examples
    --------
    >>> import numpy as np
    >>> from localization import LocalModeClassifier
    >>> X = np.array([[0.0], [0.1], [1.0], [1.1]])
    >>> clf = LocalModeClassifier(kernel="knn", n_neighbors=2).fit(X, ["a", "a", "b", "b"])
    >>> clf.predict([[0.05], [0.95]]).tolist()
    ['a', 'b']
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
        X, y = validate_data(self, X, y, dtype=FLOAT_DTYPES, order="C")
        check_classification_targets(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        self._store(X, sample_weight)
        onehot = np.zeros((len(y), len(self.classes_)), dtype=X.dtype)
        onehot[np.arange(len(y)), codes] = 1
        self.onehot_ = onehot
        w = np.ones(len(y)) if self.sample_weight_ is None else self.sample_weight_.astype(np.float64)
        self.class_prior_ = np.bincount(codes, weights=w, minlength=len(self.classes_)) / w.sum()
        return self

    def predict_proba(self, X):
        """Local class shares, shape (n_queries, n_classes); rows sum to one."""
        check_is_fitted(self)
        num, den, *_ = self._sums(X, self.onehot_)
        proba = np.empty(num.shape, dtype=np.float64)
        ok = den > 0
        proba[ok] = num[ok] / den[ok, None]
        if not ok.all():
            warnings.warn(
                f"{int((~ok).sum())} queries have zero total kernel weight; their probabilities are the "
                "class prior. Increase the bandwidth or use a kernel with unbounded support.",
                LocalizationWarning,
                stacklevel=2,
            )
            proba[~ok] = self.class_prior_
        return proba

    def predict(self, X):
        """The local mode (ties go to the first class, as in scikit-learn)."""
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

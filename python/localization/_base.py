"""What every local estimator shares: validated training data and a bound kernel."""

from __future__ import annotations

import functools

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ._validation import FLOAT_DTYPES, check_sample_weight, validate_data
from .engine import bind_kernel
from .kernels import as_kernel

DEFAULT_N_NEIGHBORS = 5


def keeps_state_on_error(method):
    """Decorate a ``fit``-like method so that, when it raises (bad input, ``MemoryError``, or
    ``KeyboardInterrupt`` from Ctrl-C during a long native call), the estimator gets back the
    attributes it had before the call: an interrupted re-fit leaves the previous fit usable.

    Fitted state is assigned, never mutated in place, so restoring the attribute dict suffices.
    """

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        before = dict(self.__dict__)
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(before)
            raise

    return wrapper


class LocalEstimator(BaseEstimator):
    """Base of the lazy local estimators: ``fit`` stores the sample, predictions are local sums."""

    # Whether the estimator is defined for signed kernels (its output is a local mean).
    _signed_kernels = False

    def _kernel(self):
        k = getattr(self, "n_neighbors", None)
        if k is None and isinstance(self.kernel, str) and self.kernel.lower() == "knn":
            k = DEFAULT_N_NEIGHBORS
        return as_kernel(self.kernel, self._bandwidth(), k)

    def _bandwidth(self):
        return self.bandwidth

    def _store(self, X, sample_weight):
        self.X_fit_ = X
        self.sample_weight_ = check_sample_weight(sample_weight, X.shape[0], X.dtype)
        self.kernel_ = self._kernel()
        # Resolving here validates the kernel and bandwidth at fit time.
        self._bound()
        return self

    def _bound(self):
        return bind_kernel(self.kernel_, self.X_fit_, self.sample_weight_, self._signed_kernels, type(self).__name__)

    def _query(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False, densify=True)
        return np.ascontiguousarray(X, dtype=self.X_fit_.dtype)

    def _sums(self, X, values=None, **kw):
        """Local sums at the rows of X; ``X=None``: at the training points, each leaving
        itself out (the hollow kernel: exact leave-one-out, scikit-learn's ``predict(None)``)."""
        if X is None:
            check_is_fitted(self)
            Q, kw = self.X_fit_, dict(kw, exclude_self=True)
        else:
            Q = self._query(X)
        return self._bound().sums(Q, values, self.sample_weight_, algorithm=self.algorithm, n_jobs=self.n_jobs, **kw)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = True
        return tags

"""Any fitted estimator's predictions on Dask arrays, block by block."""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from ._common import as_dask, check_features, is_dask, put


def _has(name):
    return lambda self: hasattr(self.estimator, name)


def _call(block, est, method, tail, dtype):
    if block.shape[0] == 0:
        return np.empty((0,) + tail, dtype=dtype)
    return np.asarray(getattr(est, method)(block))


class PostFit:
    """Run a fitted estimator's ``predict``, ``predict_proba``, ``predict_log_proba``,
    ``decision_function``, ``score_samples`` and ``transform`` on Dask arrays.

    The estimator (fitted in memory, with its sample) is sent once to every worker; each
    row chunk of the queries becomes one task calling the method, so the result equals the
    in-memory call on the whole array (every method here is row by row). Empty chunks give
    empty results; NumPy input is passed straight to the estimator. The estimator's other
    attributes (``classes_``, ``cluster_centers_``, ...) read through. One exception: an
    estimator that uses the approximate ``algorithm="binned"`` lays its grid over the sample
    and *the queries of each call*, so each chunk's values stay within that call's error
    bound but are not bit-identical to one call on the whole array.

    The same as ``dask_ml.wrappers.ParallelPostFit`` around the estimator, plus empty
    chunks, checks of the feature count at call time and the estimator sent once.

    Parameters
    ----------
    estimator : fitted estimator

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from localization import LocalMeanRegressor
    >>> from localization.dask import PostFit
    >>> X = np.linspace(0, 1, 50)[:, None]
    >>> reg = PostFit(LocalMeanRegressor(bandwidth=0.1).fit(X, X[:, 0] ** 2))
    >>> Q = da.from_array(np.array([[0.2], [0.5], [0.8]]), chunks=2)
    >>> np.allclose(reg.predict(Q).compute(), reg.estimator.predict(Q.compute()))
    True
    """

    def __init__(self, estimator: object) -> None:
        self.estimator = estimator

    def __getattr__(self, name):
        if name == "estimator":
            raise AttributeError(name)
        return getattr(self.estimator, name)

    def __repr__(self):
        return f"PostFit({self.estimator!r})"

    def _apply(self, method, X):
        check_is_fitted(self.estimator)
        if not is_dask(X):
            return getattr(self.estimator, method)(X)
        X = as_dask(X, "X")
        n_features = getattr(self.estimator, "n_features_in_", None)
        if n_features is not None:
            check_features(X, n_features, "X", "the fitted estimator")
        tail, dtype = self._output(method, X)
        est = put(self.estimator)
        kw = dict(dtype=dtype, meta=np.empty((0,) + tail, dtype=dtype))
        if tail == ():
            return X.map_blocks(_call, est, method, tail, dtype, drop_axis=1, **kw)
        if len(tail) == 1:
            return X.map_blocks(_call, est, method, tail, dtype, chunks=(X.chunks[0], tail), **kw)
        return X.map_blocks(_call, est, method, tail, dtype, chunks=(X.chunks[0],) + tuple((t,) for t in tail),
                            new_axis=list(range(2, 1 + len(tail))), **kw)

    def _output(self, method, X):
        """Trailing shape and dtype of the method's output, from one row (zeros, else the
        first row of X)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                out = np.asarray(getattr(self.estimator, method)(np.zeros((1, X.shape[1]), dtype=X.dtype)))
            except (ValueError, ArithmeticError):
                out = np.asarray(getattr(self.estimator, method)(X[:1].compute()))
        return out.shape[1:], out.dtype

    @available_if(_has("predict"))
    def predict(self, X):
        """``estimator.predict`` chunk by chunk (a dask array for dask input)."""
        return self._apply("predict", X)

    @available_if(_has("predict_proba"))
    def predict_proba(self, X):
        """``estimator.predict_proba`` chunk by chunk."""
        return self._apply("predict_proba", X)

    @available_if(_has("predict_log_proba"))
    def predict_log_proba(self, X):
        """``estimator.predict_log_proba`` chunk by chunk."""
        return self._apply("predict_log_proba", X)

    @available_if(_has("decision_function"))
    def decision_function(self, X):
        """``estimator.decision_function`` chunk by chunk."""
        return self._apply("decision_function", X)

    @available_if(_has("score_samples"))
    def score_samples(self, X):
        """``estimator.score_samples`` chunk by chunk."""
        return self._apply("score_samples", X)

    @available_if(_has("transform"))
    def transform(self, X):
        """``estimator.transform`` chunk by chunk."""
        return self._apply("transform", X)

"""One exception family: ``LocalizationError`` (a ValueError) and ``LocalizationTypeError``
(a TypeError), raised by the native core and by the Python checks, each naming the argument
at fault in ``.parameter``."""

import pickle

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

import localization
from localization import LocalizationError, LocalizationTypeError, _core

rng = np.random.default_rng(0)
X = rng.random((30, 2))
y = X[:, 0]


def raised(call, kind=LocalizationError):
    with pytest.raises(kind) as info:
        call()
    return info.value


def test_the_family_is_exported_and_subclasses_the_builtins():
    assert issubclass(LocalizationError, ValueError)
    assert issubclass(LocalizationTypeError, TypeError)
    assert {"LocalizationError", "LocalizationTypeError"} <= set(localization.__all__)


# -- from the native core (rust/error.rs through the one conversion in the bindings) ----------

@pytest.mark.parametrize(
    "call, parameter",
    [
        (lambda: _core.local_sums(X, X, bandwidth=-1.0), "bandwidth"),
        (lambda: _core.local_sums(X, X, bandwidth=0.0), "bandwidth"),
        (lambda: _core.local_sums(X, X, kernel="no-such-kernel"), "kernel"),
        (lambda: _core.local_sums(X, X, algorithm="fastest"), "algorithm"),
        (lambda: _core.local_sums(X, X[:, :1].copy()), "X_query"),
        (lambda: _core.local_sums(X, X, weights=np.ones(3)), "sample_weight"),
        (lambda: _core.local_sums(X, np.asfortranarray(X)), "X"),
        (lambda: _core.local_sums(X, X, kernel="knn"), "n_neighbors"),
    ],
)
def test_core_errors_name_the_argument(call, parameter):
    e = raised(call)
    assert e.parameter == parameter, (e.parameter, str(e))
    assert f"`{parameter}`" in str(e) or parameter in str(e)


def test_core_type_errors_name_the_argument():
    e = raised(lambda: _core.local_sums(X, X, values=np.ones((30, 1), np.float32)), LocalizationTypeError)
    assert e.parameter == "values"


def test_a_core_error_about_no_argument_has_no_parameter(monkeypatch):
    monkeypatch.setenv("LOCALIZATION_NUM_THREADS", "abc")
    e = raised(lambda: localization.local_mean(X, X, y))
    assert e.parameter is None and "LOCALIZATION_NUM_THREADS" in str(e)


# -- from the Python checks (_validation.py) ----------------------------------------------------

@pytest.mark.parametrize(
    "call, parameter",
    [
        (lambda: localization.local_mean(X, np.vstack([X[:-1], [np.nan, 0.0]]), y), "X"),
        (lambda: localization.local_mean(X[:, :1], X, y), "X_query"),
        (lambda: localization.local_mean(X, X, y[:-1]), "values"),
        (lambda: localization.local_mean(X, X, y, sample_weight=-np.ones(30)), "sample_weight"),
        (lambda: localization.local_mean(X, X, y, sample_weight=np.ones(3)), "sample_weight"),
        (lambda: localization.local_mean(X, X, y, bandwidth=-1.0), "bandwidth"),
        (lambda: localization.kernel_sum(X, X, bandwidth="not-a-rule"), "bandwidth"),
        (lambda: localization.NearestNeighbors(n_neighbors=0).fit(X).kneighbors(X), "n_neighbors"),
        (lambda: localization.LocalMeanRegressor(algorithm="fastest").fit(X, y).predict(X), "algorithm"),
    ],
)
def test_python_errors_name_the_argument(call, parameter):
    e = raised(call)
    assert e.parameter == parameter, (e.parameter, str(e))


def test_python_type_errors_name_the_argument():
    e = raised(lambda: localization.local_mean(X, np.array([["a", "b"]] * 30), y), LocalizationTypeError)
    assert e.parameter == "X"


@pytest.mark.parametrize(
    "estimator, parameter",
    [
        (localization.QuickShift(n_jobs=0), "n_jobs"),
        (localization.LabelPropagation(max_iter=0), "max_iter"),
    ],
)
def test_estimator_parameter_errors_name_the_parameter(estimator, parameter):
    # Still scikit-learn's InvalidParameterError (what its estimator checks expect).
    labels = np.where(np.arange(30) < 10, 0, -1)
    e = raised(lambda: estimator.fit(X, labels), InvalidParameterError)
    assert isinstance(e, LocalizationError) and isinstance(e, TypeError)
    assert e.parameter == parameter
    assert f"'{parameter}' parameter" in str(e)


def test_errors_pickle_with_their_parameter():
    e = raised(lambda: localization.local_mean(X, X, y, bandwidth=-1.0))
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is type(e) and back.parameter == "bandwidth" and str(back) == str(e)
    core = raised(lambda: _core.local_sums(X, X, bandwidth=-1.0))
    back = pickle.loads(pickle.dumps(core))
    assert back.parameter == "bandwidth" and str(back) == str(core)

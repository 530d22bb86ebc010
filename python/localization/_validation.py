"""Input checking shared by every public entry point.

All arrays reaching the native core are C-contiguous float32/float64 of one dtype and free
of NaN/inf; everything else is turned into a clear error here, naming the argument: the
library's exception family, :class:`LocalizationError` (a ``ValueError``) and
:class:`LocalizationTypeError` (a ``TypeError``), which the native core raises too.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
import warnings
from numbers import Integral, Real
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from sklearn.base import _fit_context
from sklearn.utils._param_validation import Interval as _Interval
from sklearn.utils._param_validation import HasMethods, InvalidParameterError, StrOptions, validate_parameter_constraints
from sklearn.utils._param_validation import validate_params as _sklearn_validate_params
from sklearn.utils.validation import check_array
from sklearn.utils.validation import validate_data as _sklearn_validate_data

if TYPE_CHECKING:
    from ._typing import F

FLOAT_DTYPES = (np.float64, np.float32)


# -- Declarative parameter constraints ------------------------------------------------------
# Every estimator states its hyper-parameters' domains in scikit-learn's `_parameter_constraints`
# and checks them once, at the start of `fit` (`sklearn.base._fit_context`): a bad value raises
# scikit-learn's InvalidParameterError (a ValueError and a TypeError) naming the parameter, the
# estimator, the domain and the value. scikit-learn >= 1.6 (the floor) has this machinery; it is
# private there but stable since 1.3 and used by the peers the estimators are checked against.
# This module is the only one importing it: the estimators take these names from here.

def fit_context(fit: F) -> F:
    """Decorator of ``fit``: validates ``_parameter_constraints`` once, before any work.

    A parameter outside its domain raises a :class:`LocalizationError` (still scikit-learn's
    ``InvalidParameterError``, with its message) whose ``parameter`` names it."""
    checked = _fit_context(prefer_skip_nested_validation=True)(fit)

    @functools.wraps(fit)
    def wrapper(est, *args, **kwargs):
        try:
            return checked(est, *args, **kwargs)
        except InvalidParameterError as e:
            name = None if isinstance(e, LocalizationError) else _failing_parameter(est)
            if name is None:  # raised by a nested call, not by this estimator's constraints
                raise
            raise _InvalidParameter(str(e), name).with_traceback(e.__traceback__) from None

    return wrapper  # type: ignore[return-value]


def validate_params(constraints, *, prefer_skip_nested_validation):
    """scikit-learn's ``validate_params`` for a public function: a parameter outside its
    declared domain raises its ``InvalidParameterError`` as a :class:`LocalizationError`
    whose ``parameter`` names it (as :func:`fit_context` does for estimators)."""

    def decorate(func):
        checked = _sklearn_validate_params(constraints, prefer_skip_nested_validation=prefer_skip_nested_validation)(func)
        signature = inspect.signature(func)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            try:
                return checked(*args, **kwargs)
            except InvalidParameterError as e:
                if isinstance(e, LocalizationError):  # from a nested estimator, already named
                    raise
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                for name, domain in constraints.items():
                    try:
                        validate_parameter_constraints({name: domain}, {name: bound.arguments.get(name)}, func.__qualname__)
                    except InvalidParameterError:
                        raise _InvalidParameter(str(e), name).with_traceback(e.__traceback__) from None
                raise

        return wrapper

    return decorate


def _failing_parameter(est):
    """The first of ``est``'s parameters outside its declared domain, or None."""
    params = est.get_params(deep=False)
    for name, constraints in est._parameter_constraints.items():
        try:
            validate_parameter_constraints({name: constraints}, {name: params.get(name)}, type(est).__name__)
        except InvalidParameterError:
            return name
    return None


class Interval(_Interval):
    """scikit-learn's ``Interval``, refusing booleans: Python counts ``True`` as the integer 1,
    but a flag passed as a bandwidth, a count or a tolerance is a mistake, not the number 1.
    An unbounded side excludes infinity (``Interval(Real, 0, None, closed="neither")`` is a
    finite positive number)."""

    def is_satisfied_by(self, val):
        return not isinstance(val, (bool, np.bool_)) and super().is_satisfied_by(val)


#: A finite number.
FINITE = Interval(Real, None, None, closed="neither")
#: A finite number > 0: a scalar bandwidth, a step.
POSITIVE = Interval(Real, 0, None, closed="neither")
#: A finite number >= 0: a tolerance, a merge radius.
NON_NEGATIVE = Interval(Real, 0, None, closed="left")
#: A distance >= 0 where ``np.inf`` means "no limit".
DISTANCE = Interval(Real, 0, np.inf, closed="both")
#: The largest count the native core takes (its integers are 64-bit); a larger one is refused
#: by the declared constraints, not overflowed in the conversion to the core.
MAX_COUNT = int(np.iinfo(np.int64).max)
#: An integer >= 1.
COUNT = Interval(Integral, 1, MAX_COUNT, closed="both")
#: An integer >= 0.
COUNT_OR_ZERO = Interval(Integral, 0, MAX_COUNT, closed="both")
#: Threads: None (the library default), -1 (all cores) or any non-zero integer (however large:
#: the native layer clamps counts above the cores).
N_JOBS = [Interval(Integral, None, -1, closed="right"), Interval(Integral, 1, None, closed="left"), None]


def check_number(value, name, within=POSITIVE):
    """The one check of a scalar parameter outside ``_parameter_constraints`` (functions, kernel
    objects, values computed at fit), by the constraints the estimators declare: by default
    "a finite positive number" (:data:`POSITIVE`: a bandwidth, a noise level, a step).
    Returns ``float(value)`` (``int(value)`` in an integer domain such as :data:`COUNT`);
    raises scikit-learn's ``InvalidParameterError`` (a ``ValueError`` and a ``TypeError``) that
    is also a :class:`LocalizationError` naming ``name``."""
    if within is POSITIVE and type(value) is float and 0.0 < value < np.inf:
        return value  # the common case, without scikit-learn's generic check (~5 µs)
    if not within.is_satisfied_by(value):
        raise _InvalidParameter(f"`{name}` must be {within}, got {value!r}", name)
    return int(value) if within.type is Integral else float(value)


def check_bandwidths(bandwidth, name, p):
    """The one check of per-feature bandwidths: ``p`` finite numbers > 0, one per feature (a
    scalar or 0-d array stands for ``p`` equal ones). Returns them as float64 of shape (p,);
    raises a :class:`LocalizationTypeError` for non-numbers and a :class:`LocalizationError`
    for a wrong length or a value that is not finite and positive, naming ``name``."""
    try:
        bw = np.asarray(bandwidth, dtype=np.float64)
    except (TypeError, ValueError):
        raise LocalizationTypeError(f"a per-feature `{name}` must hold numbers, got {bandwidth!r}", name) from None
    if bw.ndim == 0:
        if not (np.isfinite(bw) and bw > 0):
            raise LocalizationError(f"`{name}` must be finite and strictly positive, got {bandwidth!r}", name)
        return np.full(p, float(bw))
    if bw.shape != (p,):
        got = bw.shape[0] if bw.ndim == 1 else f"shape {bw.shape}"
        raise LocalizationError(f"a per-feature `{name}` needs {p} values, got {got}", name)
    if not np.all(np.isfinite(bw)) or np.any(bw <= 0):
        raise LocalizationError(f"every per-feature `{name}` must be finite and strictly positive", name)
    return bw


def _ready(A, dtype):
    """A finite C-contiguous ndarray that scikit-learn would return unchanged."""
    if type(A) is not np.ndarray or not A.flags.c_contiguous or A.size == 0:
        return False
    if dtype is not None and A.dtype not in (dtype if isinstance(dtype, tuple) else (dtype,)):
        return False
    if A.dtype.kind in "iub":
        return True
    # A finite sum proves every entry finite; otherwise let scikit-learn name the problem.
    return A.dtype.kind == "f" and bool(np.isfinite(A.sum()))


def validate_data(est, X="no_validation", y="no_validation", *, reset=True, densify=False, **kwargs):
    """scikit-learn's ``validate_data``, short-cut when it would change nothing.

    Checking input that is already right (a finite, C-contiguous float array with the
    fitted width and no feature names) costs scikit-learn ~0.1 ms per call, as much as a
    whole small prediction. Any other input takes scikit-learn's path, so conversions,
    warnings and error messages stay exactly its own.

    ``densify=True`` accepts SciPy sparse X (any format) and returns it as a dense C-ordered
    array: the native core works on dense rows. It costs n × d floats of memory; sizes
    beyond the machine's memory are refused with a ValueError naming ``X``.
    """
    if densify:
        out = _sklearn_validate_data(est, X, y, reset=reset, accept_sparse=("csr", "csc", "coo"), **kwargs) \
            if sp.issparse(X) else None
        if out is not None:
            Xs = out if isinstance(y, str) else out[0]
            check_allocation(Xs.shape[0] * Xs.shape[1] * Xs.dtype.itemsize, "X", f"densifying a sparse {Xs.shape} matrix")
            dense = Xs.toarray(order="C")
            return dense if isinstance(y, str) else (dense, out[1])
    dtype = kwargs.get("dtype")
    fast = isinstance(X, np.ndarray) and X.ndim == 2 and _ready(X, dtype) and getattr(est, "feature_names_in_", None) is None
    if fast and not reset:
        fast = getattr(est, "n_features_in_", None) == X.shape[1]
    if fast and not (isinstance(y, str) and y == "no_validation"):
        max_ndim = 2 if kwargs.get("multi_output") else 1
        fast = isinstance(y, np.ndarray) and 1 <= y.ndim <= max_ndim and len(y) == len(X) and _ready(y, None)
    if not fast:
        return _sklearn_validate_data(est, X, y, reset=reset, **kwargs)
    if reset:
        est.n_features_in_ = X.shape[1]
    return X if isinstance(y, str) else (X, y)


class LocalizationWarning(UserWarning):
    """Warning about a numerically degenerate result (e.g. a query with zero total weight)."""


class LocalizationError(ValueError):
    """A parameter or an input the library cannot use.

    Raised by the native core and by the Python checks alike, so one ``except`` catches
    every refusal; a ``ValueError``, so code written against ``ValueError`` keeps working.
    Every estimator checks its hyper-parameters against their declared domains at the start
    of ``fit``, before any work: a value outside its domain raises this error (then also
    scikit-learn's ``InvalidParameterError``, a ``TypeError`` too) naming the parameter.

    Parameters
    ----------
    message : str
        What is wrong, naming the argument.
    parameter : str, optional
        The offending argument.

    Attributes
    ----------
    parameter : str or None
        Name of the offending argument (``"X"``, ``"bandwidth"``, ``"sample_weight"``, ...),
        or None when no single argument is at fault (e.g. an environment variable).

    Examples
    --------
    >>> import numpy as np
    >>> from localization import LocalizationError, local_mean
    >>> try:
    ...     local_mean([[0.0]], [[0.0], [np.nan]], [1.0, 2.0])
    ... except LocalizationError as e:
    ...     print(e.parameter)
    X
    >>> from localization import KernelDensity
    >>> try:
    ...     KernelDensity(algorithm="fastest").fit([[0.0], [1.0]])
    ... except LocalizationError as e:
    ...     print(e.parameter)
    algorithm
    """

    __module__ = "localization"  # its public name, in tracebacks and pickles

    def __init__(self, message: str, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


class LocalizationTypeError(TypeError):
    """An argument of the wrong type (a string where an array is expected, a float count).

    The ``TypeError`` counterpart of :class:`LocalizationError`, with the same ``parameter``
    attribute.
    """

    __module__ = "localization"

    def __init__(self, message: str, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


class _InvalidParameter(LocalizationError, InvalidParameterError):
    """A parameter outside its declared domain: scikit-learn's ``InvalidParameterError`` (a
    ``ValueError`` and a ``TypeError``, as scikit-learn's checks expect) that is also a
    :class:`LocalizationError`."""


def as_float_array(X, name, *, dtype=None, ensure_2d=True, allow_empty=False):
    """Validate an array argument: numeric, finite, C-contiguous float32/float64.

    Integer and boolean input is converted to float64; object arrays are rejected.
    """
    want = FLOAT_DTYPES if dtype is None else dtype
    if type(X) is np.ndarray and (X.ndim == 2 if ensure_2d else X.ndim in (1, 2)) and _ready(X, want):
        # Already what scikit-learn's check_array would return (it costs ~40 µs a call).
        return X
    arr = np.asarray(X) if not hasattr(X, "__array__") else X
    if getattr(arr, "dtype", None) is not None and arr.dtype == object:
        raise LocalizationTypeError(f"`{name}` has dtype object; pass a numeric array (float32 or float64)", name)
    if getattr(arr, "dtype", None) is not None and arr.dtype.kind in "USV":
        raise LocalizationTypeError(f"`{name}` has dtype {arr.dtype}; pass a numeric array (float32 or float64)", name)
    try:
        out = check_array(
            X,
            dtype=want,
            order="C",
            ensure_2d=ensure_2d,
            ensure_min_samples=0 if allow_empty else 1,
            input_name=name,
        )
    except (ValueError, TypeError) as e:
        msg = str(e)
        if name not in msg:
            msg = f"`{name}`: {msg}"
        raise (LocalizationError if isinstance(e, ValueError) else LocalizationTypeError)(msg, name) from None
    if dtype is not None and out.dtype != dtype:
        out = out.astype(dtype)
    return np.ascontiguousarray(out)


def check_query(X_query, X, name="X_query"):
    """Validate query rows against fitted/reference rows: same width, same dtype."""
    Q = as_float_array(X_query, name, dtype=X.dtype)
    if Q.shape[1] != X.shape[1]:
        raise LocalizationError(f"`{name}` has {Q.shape[1]} features, but X has {X.shape[1]}", name)
    return Q


def check_values(values, n, dtype, name="values"):
    """Validate per-sample values (1-D or 2-D); returns (2-D array, was_1d)."""
    v = np.asarray(values)
    if v.ndim not in (1, 2):
        raise LocalizationError(f"`{name}` must be 1-D or 2-D, got {v.ndim}-D", name)
    was_1d = v.ndim == 1
    v2 = as_float_array(v.reshape(-1, 1) if was_1d else v, name, dtype=dtype)
    if v2.shape[0] != n:
        raise LocalizationError(f"`{name}` has {v2.shape[0]} rows, but X has {n}", name)
    return v2, was_1d


def check_sample_weight(sample_weight, n, dtype, *, require_positive=True):
    """Validate per-sample weights: finite, non-negative, shape (n,); some positive unless
    ``require_positive=False`` (one part of a sharded sample may weigh nothing)."""
    if sample_weight is None:
        return None
    w = np.asarray(sample_weight)
    if w.ndim == 0:
        w = np.full(n, w)  # as_float_array checks the scalar's type
    w = as_float_array(w, "sample_weight", dtype=dtype, ensure_2d=False)
    if w.ndim != 1 or w.shape[0] != n:
        raise LocalizationError(f"`sample_weight` must have shape ({n},), got {w.shape}", "sample_weight")
    check_weight_summary(bool(np.any(w < 0)), float(np.sum(w, dtype=np.float64)), require_positive=require_positive)
    return w


def check_weight_summary(negative, total, *, require_positive=True):
    """The rules on finite sample weights of the right shape, from a summary (any negative
    weight? the total weight) that a sharded sample computes shard by shard."""
    if negative:
        raise LocalizationError("`sample_weight` must be non-negative", "sample_weight")
    if require_positive and not total > 0:
        raise LocalizationError("`sample_weight` is zero everywhere: the total weight must be positive", "sample_weight")


def check_bool(value, name):
    """A flag: ``bool`` or NumPy's bool (the native core takes nothing else)."""
    if not isinstance(value, (bool, np.bool_)):
        raise LocalizationTypeError(f"`{name}` must be True or False, got {type(value).__name__} {value!r}", name)
    return bool(value)


def check_positive_int(value, name, minimum=1):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < minimum:
        raise LocalizationError(f"`{name}` must be an integer >= {minimum}, got {value!r}", name)
    return int(value)


def check_n_jobs(n_jobs):
    """The native layer's rule, checked at ``fit`` before any work (counts above the cores are
    clamped there)."""
    if n_jobs is None:
        return None
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral):
        raise LocalizationTypeError(f"`n_jobs` must be an integer or None, got {type(n_jobs).__name__} {n_jobs!r}", "n_jobs")
    if n_jobs == 0:
        raise LocalizationError("`n_jobs` must be None or a non-zero integer, got 0", "n_jobs")
    return n_jobs


def check_n_components(q, d, allow_zero):
    q = check_positive_int(q, "n_components", minimum=0 if allow_zero else 1)
    if q > d:
        raise LocalizationError(f"`n_components`={q} exceeds the {d} features", "n_components")
    return q


def _physical_memory():
    """Bytes of physical memory, or None where the platform does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


# Where the platform does not report its memory: 1 TiB, beyond any machine this runs on.
_FALLBACK_MEMORY = 1 << 40


def check_allocation(nbytes, name, what):
    """Refuse, before allocating, an array the machine could never hold.

    ``nbytes`` is what the call would allocate because of the argument ``name``; beyond the
    machine's physical memory the call could only fail with a MemoryError (or swap for hours),
    so a clear ValueError naming the argument is raised instead.
    """
    limit = _physical_memory() or _FALLBACK_MEMORY
    if nbytes > limit:
        need = f"{nbytes / 2**30:.3g} GiB" if nbytes < 2**100 else f"about 10^{len(str(int(nbytes))) - 1} bytes"
        raise LocalizationError(f"`{name}` is too large: {what} would need {need}, more than this machine's memory "
                                f"({limit / 2**30:.3g} GiB)", name)


def warn_zero_weight(mask, what="local mean", reason="zero total kernel weight"):
    """Warn (once per call) about queries where the result is undefined and was set to NaN;
    ``mask`` marks them, or counts them (an int)."""
    count = mask if isinstance(mask, int) else int(np.count_nonzero(mask))
    if count:
        warnings.warn(
            f"{count} quer{'y has' if count == 1 else 'ies have'} {reason}; the {what} "
            "is undefined there (NaN). Increase the bandwidth or use a kernel with unbounded support.",
            LocalizationWarning,
            stacklevel=3,
        )

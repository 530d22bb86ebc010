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
        (lambda: _core.local_sums(X, X, kernel=_core.KernelSpec("gaussian", -1.0)), "bandwidth"),
        (lambda: _core.local_sums(X, X, kernel=_core.KernelSpec("gaussian", 0.0)), "bandwidth"),
        (lambda: _core.KernelSpec("no-such-kernel"), "kernel"),
        (lambda: _core.local_sums(X, X, kernel=_core.KernelSpec(), algorithm="fastest"), "algorithm"),
        (lambda: _core.local_sums(X, X[:, :1].copy(), kernel=_core.KernelSpec()), "X_query"),
        (lambda: _core.local_sums(X, X, weights=np.ones(3), kernel=_core.KernelSpec()), "sample_weight"),
        (lambda: _core.local_sums(X, np.asfortranarray(X), kernel=_core.KernelSpec()), "X"),
        (lambda: _core.KernelSpec("knn"), "n_neighbors"),
        (lambda: _core.KernelSpec(query_bandwidth=np.ones(30), sample_bandwidth=np.ones(30)), "sample_bandwidth"),
        (lambda: _core.local_sums(X, X, kernel=_core.KernelSpec(query_bandwidth=np.ones(29))), "bandwidth"),
    ],
)
def test_core_errors_name_the_argument(call, parameter):
    e = raised(call)
    assert e.parameter == parameter, (e.parameter, str(e))
    assert f"`{parameter}`" in str(e) or parameter in str(e)


def test_core_type_errors_name_the_argument():
    e = raised(lambda: _core.local_sums(X, X, values=np.ones((30, 1), np.float32), kernel=_core.KernelSpec()), LocalizationTypeError)
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
    core = raised(lambda: _core.local_sums(X, X, kernel=_core.KernelSpec("gaussian", -1.0)))
    back = pickle.loads(pickle.dumps(core))
    assert back.parameter == "bandwidth" and str(back) == str(core)


# -- every public estimator: declared constraints, checked at fit --------------------------------

def _public_estimators():
    from sklearn.base import BaseEstimator
    from test_sklearn_compat import ESTIMATORS

    exported = {obj for name in localization.__all__ if isinstance(obj := getattr(localization, name), type)
                and issubclass(obj, BaseEstimator)}
    one_each = {type(e): e for e in reversed(ESTIMATORS)}  # the first instance of each class
    one_each.setdefault(localization.OrdinalEmbedding, localization.OrdinalEmbedding())
    assert set(one_each) == exported
    return sorted(one_each.values(), key=lambda e: type(e).__name__)


def _fit(estimator):
    """Fit on small valid data: the parameters are checked before the data is looked at."""
    labels = np.where(np.arange(30) < 10, 0, -1)
    return estimator.fit(X, labels) if "y" in estimator.fit.__code__.co_varnames else estimator.fit(X)


@pytest.mark.parametrize("estimator", _public_estimators(), ids=lambda e: type(e).__name__)
def test_every_public_estimator_declares_each_parameter(estimator):
    import inspect

    params = set(inspect.signature(type(estimator).__init__).parameters) - {"self"}
    assert params == set(type(estimator)._parameter_constraints), type(estimator).__name__


class _Nonsense:
    """A value no declared domain admits (not a number, string, array, callable, estimator)."""

    def __repr__(self):
        return "<nonsense>"


@pytest.mark.parametrize("estimator", _public_estimators(), ids=lambda e: type(e).__name__)
def test_every_parameter_of_every_estimator_is_checked_at_fit(estimator):
    from sklearn.base import clone

    for name, constraints in type(estimator)._parameter_constraints.items():
        if constraints == "no_validation":
            continue
        bad = clone(estimator).set_params(**{name: _Nonsense()})
        e = raised(lambda: _fit(bad), InvalidParameterError)
        assert isinstance(e, LocalizationError) and e.parameter == name, (type(estimator).__name__, name, e.parameter)


@pytest.mark.parametrize(
    "estimator, parameter",
    [
        # accepted at fit before, failing only at predict (or not at all)
        (localization.KernelDensity(algorithm="fastest"), "algorithm"),
        (localization.LocalMeanRegressor(n_jobs=0), "n_jobs"),
        (localization.MeanShift(max_iter=0), "max_iter"),
        # values of the right type outside their domain
        (localization.LocalMeanRegressor(bandwidth=-1.0), "bandwidth"),
        (localization.LocalMeanRegressor(bandwidth="no-such-rule"), "bandwidth"),
        (localization.LocalMeanRegressor(rtol=-1.0), "rtol"),
        (localization.LocalPolynomialRegressor(degree=3), "degree"),
        (localization.LocalPolynomialRegressor(ridge=-1.0), "ridge"),
        (localization.LocalModeClassifier(scoring="f1"), "scoring"),
        (localization.LocalModel(n_neighbors=0), "n_neighbors"),
        (localization.NearestNeighbors(n_neighbors=0), "n_neighbors"),
        (localization.NearestNeighbors(leaf_size=0), "leaf_size"),
        (localization.KernelDensity(grid_size=0), "grid_size"),
        (localization.FuzzyInferenceRegressor(n_rules=0), "n_rules"),
        (localization.FuzzyInferenceRegressor(consequents="cubic"), "consequents"),
        (localization.LocalMeanImputer(n_iter=0), "n_iter"),
        (localization.LocalMeanDenoiser(sigma=-1.0), "sigma"),
        (localization.LocalMeanDiffusion(n_steps=0), "n_steps"),
        (localization.LocalMeanDiffusion(sampler="rk4"), "sampler"),
        (localization.Hopfield(update="random"), "update"),
        (localization.ModernHopfield(beta=0.0), "beta"),
        (localization.LocalPCA(n_components=-1), "n_components"),
        (localization.LocallyLinearEmbedding(reg=-1.0), "reg"),
        (localization.AsymmetricMDS(loss="hinge"), "loss"),
        (localization.TripletEmbedding(learning_rate=0.0), "learning_rate"),
        (localization.OrdinalEmbedding(max_iter=0), "max_iter"),
        (localization.TemporalLocalMean(n_heads=0), "n_heads"),
        (localization.HierarchicalLocalModel(n_layers=0), "n_layers"),
        (localization.MetricLearningRegressor(tol=-1.0), "tol"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_bad_hyper_parameters_fail_at_fit_naming_the_parameter(estimator, parameter):
    e = raised(lambda: _fit(estimator))
    assert e.parameter == parameter, (e.parameter, str(e))


# -- the native core: every binding error is in the family; a Reference refuses NaN/inf ---------

@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_reference_refuses_non_finite_samples_and_values(bad):
    Xb = X.copy()
    Xb[3, 1] = bad
    assert raised(lambda: _core.Reference(Xb)).parameter == "X"
    vb = np.ones((30, 1))
    vb[7, 0] = bad
    assert raised(lambda: _core.Reference(X, values=vb)).parameter == "values"
    assert raised(lambda: _core.Reference(X, weights=vb[:, 0].copy())).parameter == "sample_weight"
    _core.Reference(X, values=np.ones((30, 1)))  # finite: accepted


def test_core_binding_errors_are_in_the_family():
    ref = _core.Reference(X)
    # Values per call go to a reference built without them, not to one that holds its own.
    own = _core.Reference(X, values=np.ones((30, 1)))
    assert raised(lambda: _core.local_sums(X, own, values=np.ones((30, 1)), kernel=_core.KernelSpec())).parameter == "values"
    assert raised(lambda: _core.local_sums(X, X, kernel=_core.KernelSpec(), n_jobs=1.5), LocalizationTypeError).parameter == "n_jobs"
    img = np.zeros((4, 4, 1))
    assert raised(lambda: _core.bilateral_filter(img, np.ones((1, 1)), -1.0)).parameter == "range_bandwidth"


# -- no bare ValueError/TypeError about a caller's argument ----------------------------------------

# Raises of the builtin classes that stay, with the reason: (file, function) -> why.
BUILTIN_RAISES_ALLOWED = {
    # The command line: main() prints these as "error: ..." naming the file or the --option;
    # there is no Python argument to name.
    ("cli.py", "_read_table"): "a data file the command line was given cannot be used",
    ("cli.py", "_read_labels"): "a label file the command line was given cannot be used",
    ("cli.py", "cmd_cluster"): "the estimated bandwidth is 0: the message names --bandwidth and --quantile",
    ("cli.py", "number_or_loo"): "a --option value that is not a number",
    # A cached data file that is not what it should be: not the caller's argument.
    ("datasets/_real.py", "_read_idx"): "a corrupt or truncated IDX file in the data cache",
}


def _builtin_raises():
    import ast
    from pathlib import Path

    root = Path(localization.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(exc, ast.Name) and exc.id in ("ValueError", "TypeError"):
                    found.append((path.relative_to(root).as_posix(), _scope(tree, node), node.lineno))
    return found


def _scope(tree, target):
    """The name of the innermost function around ``target``, or "<module>"."""
    import ast

    around = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
              and node.lineno <= target.lineno <= node.end_lineno]
    return max(around, key=lambda node: node.lineno).name if around else "<module>"


def test_no_bare_builtin_raise_about_an_argument():
    """Every refusal of a caller's argument is a LocalizationError/LocalizationTypeError with
    ``.parameter``; plain ValueError/TypeError only where listed above, with the reason."""
    found = _builtin_raises()
    bare = [f"{f}:{line} in {fn}()" for f, fn, line in found if (f, fn) not in BUILTIN_RAISES_ALLOWED]
    assert not bare, "raise LocalizationError(msg, parameter) instead of:\n" + "\n".join(bare)
    stale = set(BUILTIN_RAISES_ALLOWED) - {(f, fn) for f, fn, _ in found}
    assert not stale, f"allowlist entries with no raise left: {stale}"


def test_dask_estimators_check_their_parameters_at_fit():
    pytest.importorskip("dask")
    import dask.array as da

    from localization import dask as ldask

    Xd, yd = da.from_array(X, chunks=10), da.from_array(y, chunks=10)
    for estimator, args, parameter in [
        (ldask.LocalMeanRegressor(n_jobs=0), (Xd, yd), "n_jobs"),
        (ldask.LocalMeanRegressor(bandwidth="loo_per_feature"), (Xd, yd), "bandwidth"),
        (ldask.KernelDensity(algorithm="fastest"), (Xd,), "algorithm"),
        (ldask.NearestNeighbors(leaf_size=0), (Xd,), "leaf_size"),
        (ldask.MeanShift(max_iter=0), (Xd,), "max_iter"),
    ]:
        assert raised(lambda: estimator.fit(*args)).parameter == parameter


# -- adversarial: every public function and estimator method × a wrong type for each argument ---
# Private `_core` functions may still raise PyO3's own conversion errors (no `.parameter`):
# `_core` is not public API, and every public path validates or converts before calling it.

_WRONG = ["abc", _Nonsense(), 2**70, -2**70, 1e300, np.nan, [1.0, 2.0, 3.0], 1j, True, None, np.array(["a"]), b"x"]


def _unnamed(call):
    """What ``call`` raises if it is neither in the family with a ``.parameter`` nor scikit-learn's
    own check of a data array (``sklearn.utils.validation``: the estimators' ``X`` and ``y``, whose
    messages scikit-learn's estimator checks expect); None otherwise."""
    try:
        call()
    except (LocalizationError, LocalizationTypeError) as e:
        return None if e.parameter is not None else e
    except Exception as e:  # noqa: BLE001 - the point is to see every kind
        import traceback

        frames = [f.filename.replace("\\", "/") for f in traceback.extract_tb(e.__traceback__)]
        return None if any(f.endswith("sklearn/utils/validation.py") for f in frames) else e
    return None


def _public_calls():
    """(label, function, valid positional arguments, valid keyword arguments) of every public
    function that computes something, plus the estimator methods that take more than data."""
    from localization import cluster, denoise, embedding, metrics, text

    T = rng.random((12, 4))
    image = rng.random((10, 9))
    triplets = np.array([[0, 1, 2], [3, 4, 5]], dtype=np.int64)
    nn = localization.NearestNeighbors(n_neighbors=3).fit(X)
    kde = localization.KernelDensity().fit(X)
    reg = localization.LocalMeanRegressor().fit(X, y)
    diffusion = localization.LocalMeanDiffusion(n_steps=3).fit(X)
    return [
        ("local_mean", localization.local_mean, (X, X, y), {}),
        ("kernel_sum", localization.kernel_sum, (X, X), {}),
        ("kernel_matrix", localization.kernel_matrix, (X, X), {}),
        ("estimate_bandwidth", localization.estimate_bandwidth, (X,), {}),
        ("mean_shift", localization.mean_shift, (X,), {"bandwidth": 0.5}),
        ("temporal_local_mean", localization.temporal_local_mean, (T, T), {}),
        ("attention", localization.attention, (T, T, T), {}),
        ("attention_backward", localization.attention_backward, (T, T, T, T), {}),
        ("get_bin_seeds", cluster.get_bin_seeds, (X, 0.5), {}),
        ("medoid_shift", cluster.medoid_shift, (X,), {}),
        ("pc_shift", cluster.pc_shift, (X,), {"max_iter": 3}),
        ("pc_shift_step", cluster.pc_shift_step, (X, X), {}),
        ("quick_shift", cluster.quick_shift, (X,), {}),
        ("bilateral", denoise.bilateral, (image, 1.0, 0.2), {}),
        ("nl_means", denoise.nl_means, (image, 3, 2), {}),
        ("self_local_mean", denoise.self_local_mean, (X, y), {}),
        ("triplet_loss", embedding.triplet_loss, (X, triplets), {}),
        ("knn_accuracy", metrics.knn_accuracy, (X, (y > 0.5).astype(int)), {}),
        ("trustworthiness", metrics.trustworthiness, (X, X), {}),
        ("cooccurrence", text.cooccurrence, ("a b c a b",), {}),
        ("NearestNeighbors.kneighbors", nn.kneighbors, (X,), {}),
        ("NearestNeighbors.radius_neighbors", nn.radius_neighbors, (X,), {}),
        ("NearestNeighbors.kneighbors_graph", nn.kneighbors_graph, (X,), {}),
        ("KernelDensity.score_samples", kde.score_samples, (X,), {}),
        ("KernelDensity.sample", kde.sample, (), {}),
        ("LocalMeanRegressor.predict", reg.predict, (X,), {}),
        ("LocalMeanDiffusion.sample", diffusion.sample, (4,), {}),
    ]


def _arguments(label, f, args, kwargs):
    import inspect

    params = [p for p in inspect.signature(f).parameters.values() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    for i, p in enumerate(params):
        for bad in _WRONG:
            if i < len(args):
                yield f"{label}({p.name}={bad!r})", (lambda a=args[:i] + (bad,) + args[i + 1:]: f(*a, **kwargs))
            else:
                yield f"{label}({p.name}={bad!r})", (lambda kw=dict(kwargs, **{p.name: bad}): f(*args, **kw))


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("label, f, args, kwargs", _public_calls(), ids=lambda v: v if isinstance(v, str) else "")
def test_wrong_types_for_every_argument_of_the_public_api_name_it(label, f, args, kwargs):
    unnamed = [f"{what}: {type(e).__name__}: {str(e)[:120]}" for what, call in _arguments(label, f, args, kwargs)
               if (e := _unnamed(call)) is not None]
    assert not unnamed, "\n".join(unnamed)


@pytest.mark.parametrize("estimator", _public_estimators(), ids=lambda e: type(e).__name__)
def test_counts_beyond_the_native_range_are_refused_by_name(estimator):
    """A count the 64-bit core cannot hold (PyO3 would raise OverflowError without a parameter)
    fails the declared constraint instead."""
    from sklearn.base import clone

    import inspect

    labels = np.where(np.arange(30) < 10, 0, -1)
    for name in estimator.get_params(deep=False):
        bad = clone(estimator).set_params(**{name: 2**64})
        args = (X, labels) if "y" in inspect.signature(bad.fit).parameters else (X,)
        e = _unnamed(lambda: bad.fit(*args))
        assert e is None, (type(estimator).__name__, name, type(e).__name__, str(e)[:200])

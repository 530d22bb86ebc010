"""Adaptive kernels learned from data: leave-one-out bandwidth search.

The hollow kernel (each point's own term left out) gives the exact leave-one-out (LOO)
prediction of a local estimator in one pass of the engine, with no refitting. This module is
the one home of the search that every local estimator uses for ``bandwidth="loo"``:

* one bandwidth: the LOO objective on a logarithmic grid, then golden-section refinement of
  log h inside the bracket around the best grid value (Brent's method: golden sections with
  parabolic steps). From 4,096 samples on, the grid runs on a random subsample of 1,024
  instead; its best h, carried to the full sample by the rate n^(-1/(d+4)) at which the LOO
  bandwidth shrinks, starts a bracket of exact full-sample evaluations that Brent's method
  then refines to the same tolerance (coarse to fine: a handful of full passes instead of
  the whole grid);
* ``bandwidth="loo_per_feature"``: one bandwidth per feature (a diagonal metric), by
  quasi-Newton gradient descent (L-BFGS) on log h, started from the best single bandwidth;
  the gradient is analytic where the estimator provides it (the Gaussian local mean: the
  diagonal case of the MLKR gradient, two engine passes; the Gaussian KDE: one pass). A
  mean squared error otherwise (local constant and polynomial regression) is minimised as
  the least-squares problem it is: Newton steps on a Hessian model that starts as the
  Gauss–Newton JᵀJ of forward-difference Jacobians (one engine pass per feature) and learns
  the rest by BFGS updates; other objectives by L-BFGS on forward differences. Either starts
  from the best value of a grid half as dense (or the coarse stage's choice to 1e-2 in log h).

A :class:`~localization.kernels.Kernel` or :class:`~localization.kernels.KernelCombination`
keeps its shape: the search scales all of its bandwidths by one factor (or one factor per
feature), and ``bandwidth_`` is that factor. For a kernel given by name the factor *is* h.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import warnings
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _core
from ._progress import Progress
from ._validation import LocalizationWarning, check_positive_int, LocalizationError, LocalizationTypeError
from .kernels import Balloon, Kernel, KernelCombination, SamplePoint, as_kernel, canonical_name, rule_of_thumb

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

    from ._typing import ArrayLike, E, FloatArray, KernelLike

LOO_RULES = ("loo", "loo_per_feature")
_GRID_SIZE = 24
# Refine log h until the bracket is this narrow: h is then known to ~1e-4 relative.
_LOG_TOL = 1e-4
# The grid is scanned from small to large h and stops once the objective has risen this many
# times in a row past its best value: wide bandwidths cost the most (every pair is in the
# window) and a LOO curve that has turned up rarely comes back down.
_PATIENCE = 3
# The per-feature stage only needs a start: its single bandwidth is refined to this in log h.
_START_TOL = 1e-2
# Unit of log h in the per-feature descent.
_STEP_SCALE = 0.3
# The per-feature descent stops at a step this small in log h (the scalar search's tolerance).
_STEP_TOL = 1e-4
# Coarse to fine: from _COARSE_MIN samples on, the grid runs on a subsample of _COARSE_SIZE.
_COARSE_MIN = 4096
_COARSE_SIZE = 1024
# The first full-sample bracket: the predicted h times exp(±_BRACKET_STEP), widened by the
# golden ratio at most _BRACKET_STEPS times (the subsample's choice varies by ~10-30 %: the
# LOO bandwidth converges slowly, at the rate n^(-1/10)).
_BRACKET_STEP = 0.15
_BRACKET_STEPS = 8
# The coarse stage's answer is checked against the full-sample objective at these offsets
# in log h: only below it. Above, the subsample's grid has already been scanned past its
# optimum until its objective rose three times in a row, and a wide window averages many
# points, so the subsample's curve stands for the full sample's there; a valley it cannot show
# is one of fine structure, at small h. (A check above would also be the search's costliest
# pass: a wider window holds more pairs.)
_CHECKS = (-1.0,)


def is_loo(bandwidth: object, rules: Collection[str] = LOO_RULES) -> bool:
    return isinstance(bandwidth, str) and bandwidth in rules


def _rescale_bandwidth(bw, s, X):
    """A kernel's bandwidth times s (a number or a per-feature vector)."""
    if isinstance(bw, (Balloon, SamplePoint)):
        if np.ndim(s):
            raise LocalizationError("per-feature LOO bandwidths need a fixed (scalar or per-feature) base bandwidth, "
                                    f"not {bw!r}", "bandwidth")
        return dataclasses.replace(bw, scale=bw.scale * float(s))
    if isinstance(bw, str):
        bw = rule_of_thumb(X, bw)
    out = np.asarray(bw, dtype=np.float64) * s
    return float(out) if out.ndim == 0 else out


def scaled_kernel(kernel: Kernel | KernelCombination, s: float | ArrayLike, X: FloatArray) -> Kernel | KernelCombination:
    """``kernel`` with every bandwidth multiplied by ``s`` (a number or a per-feature vector)."""
    if isinstance(kernel, KernelCombination):
        return KernelCombination([scaled_kernel(k, s, X) for k in kernel.kernels], kernel.coefficients, kernel.normalized)
    if kernel.name in ("knn", "identity", "dot"):
        raise LocalizationError(f"bandwidth='loo' searches a bandwidth; the {kernel.name!r} kernel has none", "bandwidth")
    return Kernel(kernel.name, _rescale_bandwidth(kernel.bandwidth, s, X), n_neighbors=kernel.n_neighbors,
                  temperature=kernel.temperature, knn_profile=kernel.knn_profile)


def base_kernel(kernel: KernelLike, n_neighbors: int | None = None) -> Kernel | KernelCombination:
    """The kernel whose bandwidths the search scales (a name gets h = 1)."""
    return as_kernel(kernel, 1.0, n_neighbors)


def fixed_gaussian(kernel: object) -> bool:
    """Whether ``kernel`` is one gaussian Kernel with a fixed bandwidth: the kernels whose LOO
    objectives have an analytic gradient in log h (∂K/∂log hₖ = K·zₖ²)."""
    return (isinstance(kernel, Kernel) and isinstance(kernel.name, str) and canonical_name(kernel.name) == "gaussian"
            and not isinstance(kernel.bandwidth, (Balloon, SamplePoint)))


def _fixed_scale(kernel, X):
    """Per-feature scale of a kernel's fixed bandwidths (its first term for a combination),
    or None for adaptive rules."""
    k = kernel.kernels[0] if isinstance(kernel, KernelCombination) else kernel
    if isinstance(k.bandwidth, (Balloon, SamplePoint)):
        return None
    h = _rescale_bandwidth(k.bandwidth, 1.0, X)
    return np.broadcast_to(np.asarray(h, dtype=np.float64), (X.shape[1],))


def default_grid(kernel: Kernel | KernelCombination, X: FloatArray, size: int = _GRID_SIZE) -> FloatArray:
    """Factors from the median nearest-neighbour distance to the data diameter, measured in
    the base kernel's units (an adaptive rule's scale: 1/4 to 8)."""
    scale = _fixed_scale(kernel, X)
    if scale is None:
        return np.geomspace(0.25, 8.0, size)
    Xs = np.ascontiguousarray(X / scale, dtype=np.float64)
    dist, _ = _core.NeighborIndex(Xs).knn(Xs, min(2, len(Xs)))
    nn = float(np.median(dist[:, -1]))
    diam = float(np.sqrt(np.sum((Xs.max(0) - Xs.min(0)) ** 2)))
    if not diam > 0:
        raise LocalizationError("bandwidth='loo' needs at least two distinct samples", "bandwidth")
    lo = max(nn if nn > 0 else diam / len(Xs), diam * 1e-4)
    return np.geomspace(lo, diam, size)


def check_grid(grid: ArrayLike) -> FloatArray:
    grid = np.asarray(grid, dtype=np.float64)
    if grid.ndim != 1 or len(grid) == 0 or not np.all(np.isfinite(grid)) or np.any(grid <= 0):
        raise LocalizationError("`bandwidth_grid` must be a non-empty 1-D array of positive numbers", "bandwidth_grid")
    return np.unique(grid)


def _where_defined(fn, s, undefined):
    """fn(s), or ``undefined`` where the engine refuses the trial bandwidth of a per-feature
    descent (which starts from a bandwidth it accepted): following a feature constant in the
    samples' precision (a float32 feature of spread 1e-3 at 1e6, say), the descent drives that
    bandwidth below what the coordinates resolve. Like a singular local design, that is a
    point where the objective is undefined, not a failure of the fit. (The grid's evaluations
    let every refusal through: there it is the user's kernel or data that is refused.)"""
    try:
        return fn(s)
    except LocalizationError as e:
        if e.parameter != "bandwidth":
            raise
        return undefined


class _Recorder:
    """Evaluates the objective and remembers every evaluation (for ``cv_results_``); each one
    advances the progress bar ``bar`` (a :class:`~localization._progress.Progress`, or None)."""

    def __init__(self, objective, bar=None):
        self.objective = objective
        self.bar = bar
        self.h, self.value, self.stage = [], [], []
        self.seen = {}

    def __call__(self, s, stage, refusable=False):
        # Each evaluation is a full engine pass: a factor seen before is not evaluated again
        # (Brent's method re-reads the three points of the bracket it is given).
        key = np.asarray(s, dtype=np.float64).tobytes()
        if key not in self.seen:
            v = _where_defined(self.objective, s, np.inf) if refusable else self.objective(s)
            self.seen[key] = self.add(s, v, stage)
        return self.seen[key]

    def add(self, s, v, stage):
        """Record a value computed elsewhere (with its gradient)."""
        v = float(v)
        if not np.isfinite(v):
            v = np.inf
        self.h.append(np.array(s, dtype=np.float64))
        self.value.append(v)
        self.stage.append(stage)
        if self.bar is not None:
            self.bar.update(1, stage=stage, objective=f"{v:.4g}")
        return v

    def results(self):
        # A per-feature search records vectors (of one element with one feature): scalar
        # evaluations are broadcast to them.
        if any(np.ndim(h) for h in self.h):
            width = max(np.size(h) for h in self.h)
            h = np.array([np.broadcast_to(v, (width,)) for v in self.h])
        else:
            h = np.array(self.h)
        return {"bandwidth": h, "objective": np.array(self.value), "stage": np.array(self.stage)}


def golden_section(f: Callable[[float], float], a: float, b: float, tol: float = _LOG_TOL) -> tuple[float, float]:
    """Minimise a function of one variable on [a, b] (f is called on the variable itself);
    returns (argmin, min).

    Brent's bounded method (SciPy's ``minimize_scalar(method="bounded")``): golden-section
    steps that keep the bracket, with parabolic steps through the last three points where they
    are safe. On a smooth minimum the parabolas converge superlinearly, so ~10 evaluations
    reach ``tol`` where plain golden section needs ~20: each evaluation is a full engine pass.
    """
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(f, bounds=(a, b), method="bounded", options={"xatol": tol})
    return float(res.x), float(res.fun)


def bracketed_minimum(f: Callable[[float], float], a: float, b: float, c: float,
                      tol: float = _LOG_TOL) -> tuple[float, float]:
    """Minimise f from a bracket a < b < c with f(b) below f(a) and f(c); returns (argmin, min).

    Successive parabolic interpolation through the bracket and its best point, with Brent's
    safeguard: a golden-section step into the larger part whenever the parabola's vertex leaves
    the bracket or its step is not below half the step before last (the parabola runs through
    the three best points, as in Brent's method). It stops when the bracket
    is 2·tol wide, or when, right after a parabolic step shorter than 10·tol, the next parabola
    moves less than tol/2: near a smooth minimum the parabolic steps shrink superlinearly, so the
    best point is then within tol of the minimiser (the first condition keeps a parabola through
    distant points, whose vertex may land near the best point by chance, from stopping it). (Brent's own rule would spend two more evaluations, at
    ±tol around the answer, only to confirm that; each evaluation here is a full engine pass.)
    The bracket's three values are the first evaluations (a recorder answers repeats).
    """
    fa, fb, fc = f(a), f(b), f(c)
    if not (a < b < c and fb < fa and fb < fc):
        raise LocalizationError(f"not a bracket: f({a}) = {fa}, f({b}) = {fb}, f({c}) = {fc}", "b")
    golden = (3 - math.sqrt(5)) / 2
    # x: the best point; w, v: the next best (the parabola's other two nodes, as in Brent's
    # method: through the bracket's ends the steps would shrink only linearly).
    x, fx = b, fb
    (w, fw), (v, fv) = sorted([(a, fa), (c, fc)], key=lambda p: p[1])
    step = last = c - a
    parabolic = False
    while c - a > 2 * tol:
        num = (x - w) ** 2 * (fx - fv) - (x - v) ** 2 * (fx - fw)
        den = (x - w) * (fx - fv) - (x - v) * (fx - fw)
        u = x - 0.5 * num / den if den != 0 else math.nan
        if a < u < c and abs(u - x) < 0.5 * abs(last):
            if abs(u - x) < tol / 2:
                if parabolic and abs(step) < 10 * tol:
                    break
                u = x + math.copysign(tol / 2, u - x)  # at least tol/2 from the best point
            parabolic = True
        else:
            u = x + golden * (c - x) if c - x > x - a else x - golden * (x - a)
            parabolic = False
        last, step = step, u - x
        fu = f(u)
        if fu < fx:
            if u > x:
                a = x
            else:
                c = x
            (v, fv), (w, fw), (x, fx) = (w, fw), (x, fx), (u, fu)
        else:
            if u > x:
                c = u
            else:
                a = u
            if fu < fw:
                (v, fv), (w, fw) = (w, fw), (u, fu)
            elif fu < fv:
                v, fv = u, fu
    return x, fx


def _grid_stage(rec, grid, refine, tol, warn_edge):
    """Scan the grid (stopping early once the objective has risen), then Brent's bounded method
    in the bracket around the best grid value; returns (best, value, index of the best in the grid)."""
    values = []
    for s in grid:
        values.append(rec(s, "grid"))
        best_at = int(np.argmin(values))
        if np.isfinite(values[best_at]) and len(values) - 1 - best_at >= _PATIENCE \
                and all(a < b for a, b in zip(values[best_at:-1], values[best_at + 1:])):
            break
    values = np.array(values)
    if not np.any(np.isfinite(values)):
        raise LocalizationError("the leave-one-out objective is undefined at every bandwidth in the grid (some sample has "
                                "no neighbour, or too few for its local design); widen `bandwidth_grid` or add samples", "bandwidth_grid")
    i = int(np.argmin(values))
    best, best_value = float(grid[i]), float(values[i])
    if warn_edge and i in (0, len(grid) - 1) and len(grid) > 1:  # (an early stop is never at the top edge)
        warnings.warn(f"the leave-one-out optimum is at the edge of the bandwidth grid (h = {best:.4g}); the best "
                      "bandwidth may lie outside it: widen `bandwidth_grid`", LocalizationWarning, stacklevel=4)
    if refine and len(grid) > 1:
        lo, hi = math.log(grid[max(i - 1, 0)]), math.log(grid[min(i + 1, len(grid) - 1)])
        # The grid's own values at the bracket's ends: exp(log h) need not be h to the last bit,
        # and the recorder answers only what it has seen.
        exact = {lo: float(grid[max(i - 1, 0)]), math.log(best): best, hi: float(grid[min(i + 1, len(grid) - 1)])}

        def g(t):
            return rec(exact.get(t, math.exp(t)), "golden")

        if 0 < i < len(grid) - 1 and values[i] < min(values[i - 1], values[i + 1]):
            # The best grid value and its neighbours are a bracket (the recorder has their values).
            t, v = bracketed_minimum(g, lo, math.log(best), hi, tol)
        else:
            t, v = golden_section(g, lo, hi, tol)
        if v < best_value:
            best, best_value = exact.get(t, math.exp(t)), v
    return best, best_value, i


def _bracket(f, t0, step=_BRACKET_STEP, max_steps=_BRACKET_STEPS):
    """(a, b, c) with f(b) < f(a) and f(b) < f(c), searched downhill from t0 with steps that
    grow by the golden ratio; None when no bracket is found within ``max_steps`` steps or the
    objective is undefined at t0.

    Where the parabola through the last three points is convex with its vertex between the
    last two, the vertex is tried first: a LOO curve is smooth in log h, so the vertex is
    mostly next to the minimum, which the bracket then holds as its middle point and its
    refinement starts from (each evaluation is a full pass). If it is not lower than the last
    point, the golden step follows as without it."""
    grow = (1 + math.sqrt(5)) / 2
    f0 = f(t0)
    if not np.isfinite(f0):
        return None
    prev = None
    a, fa, b, fb = t0, f0, t0 + step, f(t0 + step)
    if not fb < f0:
        fc = f(t0 - step)
        if fc > f0:
            return t0 - step, t0, t0 + step
        prev, (a, fa), (b, fb) = (b, fb), (t0, f0), (t0 - step, fc)
    for _ in range(max_steps):
        if prev is not None:
            p, fp = prev
            if ((fb - fa) / (b - a) - (fa - fp) / (a - p)) / (b - p) > 0:  # convex
                num = (b - a) ** 2 * (fb - fp) - (b - p) ** 2 * (fb - fa)
                den = (b - a) * (fb - fp) - (b - p) * (fb - fa)
                r = (b - 0.5 * num / den - a) / (b - a)
                if 0.1 <= r <= 0.9:  # (a new point between a and b)
                    u = a + r * (b - a)
                    if f(u) < fb:
                        return (a, u, b) if a < b else (b, u, a)
        c = b + grow * (b - a)
        fc = f(c)
        if fc > fb:
            return (a, b, c) if a < c else (c, b, a)
        prev, (a, fa), (b, fb) = (a, fa), (b, fb), (c, fc)
    return None


def _coarse_stage(rec, coarse, tol):
    """The coarse-to-fine search: the grid and refinement on a subsample, its best h carried to
    the full sample, then a bracket of exact full-sample evaluations refined by Brent's method.
    Returns (best, value), or None when the subsample's optimum is at an end of its grid, no
    full-sample bracket is found, or the full-sample objective is lower at a check point (the
    caller then scans the full-sample grid)."""
    sub_objective, sub_grid, factor = coarse
    sub = _Recorder(sub_objective, rec.bar)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LocalizationWarning)
            h_sub, _, i = _grid_stage(sub, sub_grid, True, _START_TOL, warn_edge=False)
    except ValueError:  # undefined everywhere on the subsample (too few neighbours): use the full sample
        return None
    if i in (0, len(sub_grid) - 1):
        return None

    def f(t):
        return rec(math.exp(t), "bracket")

    bracket = _bracket(f, math.log(h_sub * factor))
    if bracket is None:
        return None
    try:
        t, v = bracketed_minimum(lambda t: rec(math.exp(t), "golden"), *bracket, tol)
    except ValueError:  # a tie at an end of the bracket (a flat objective): not a bracket
        return None
    rec.subsample = sub.results()
    # A LOO curve may have a second, lower valley that the subsample did not show: look a
    # factor e below (one pass, a cheap one: a narrow window holds few pairs) and scan the
    # full grid if it is lower.
    if any(rec(math.exp(t + side), "check") < v for side in _CHECKS):
        return None
    return math.exp(t), v


def search(objective: Callable[[Any], float], grid: ArrayLike, *, per_feature: bool = False, n_features: int = 1,
           refine: bool = True, tol: float = _LOG_TOL, warn_edge: bool = True,
           gradient: Callable[..., Any] | None = None,
           residuals: Callable[..., Any] | None = None,
           coarse: tuple[Callable[[Any], float], ArrayLike, float] | None = None,
           progress: Progress | None = None, fd_step: float = 1e-6) -> tuple[float | FloatArray, dict[str, Any]]:
    """Minimise a LOO objective over bandwidth factors.

    Parameters
    ----------
    objective : callable
        Maps a factor (a number, or with ``per_feature`` a vector of ``n_features``) to the
        LOO objective (lower is better; ``inf`` where it is undefined).
    grid : array of factors
        Scanned in increasing order; the scan stops once the objective has risen three times
        in a row past its best value.
    per_feature : bool
        Continue from the best single factor with one factor per feature.
    refine : bool
        Golden-section refinement after the grid (off for piecewise-constant objectives).
    tol : float
        Width of the final golden-section bracket in log h.
    warn_edge : bool
        Warn when the best grid value is at an end of the grid.
    gradient : callable, optional
        Maps a factor vector s to (objective, ∂objective/∂log s) for the per-feature stage;
        default: forward differences of ``objective``, with steps of ``fd_step`` in log s.
    residuals : callable, optional
        For a least-squares objective (a mean squared LOO error): maps a factor vector s to
        the residual vector r whose squared norm is the objective (None where it is
        undefined). The per-feature stage then takes Newton steps on a model of the Hessian
        that starts as the Gauss–Newton JᵀJ of forward-difference Jacobians J (the same d
        passes per step as forward differences of the objective) and is corrected by BFGS
        updates; it stops when the predicted step falls below ``_STEP_TOL``, without a pass to
        confirm it. ``objective`` is then not called in the per-feature stage.
    coarse : (objective, grid, factor), optional
        The same objective on a random subsample, a grid for it, and the factor that carries
        the subsample's best bandwidth to the full sample. The grid then runs on the subsample
        only; the full sample is evaluated from the predicted bandwidth outward until the
        objective rises on both sides, and that bracket is refined by Brent's method to ``tol``;
        the result is checked against the full-sample objective at h/e
        (``refine`` only; if the subsample's best is at an end of its grid, no bracket is found
        or the check point is lower, the full-sample grid is scanned as without ``coarse``).
    progress : Progress, optional
        A bar that advances by one per evaluation of the objective (one engine pass or two),
        on the subsample and the full sample alike.
    fd_step : float
        The forward-difference step in log s of the per-feature stage (``fit_loo``: 1e-6 for
        float64 samples, 1e-3 for float32).

    Returns
    -------
    best : float or ndarray
    cv_results : dict with "bandwidth" (one row per evaluation on the full sample, of
        n_features columns for a per-feature search), "objective" and "stage" ("grid",
        "bracket", "check", "golden", "gradient"); after a coarse stage also "subsample", the
        same record of the evaluations on the subsample
    """
    least_squares = per_feature and residuals is not None and gradient is None
    if least_squares:
        # The objective from the residuals, keeping those of the best factor so far: the
        # descent starts from them (their pass is done).
        best_residuals = {"value": np.inf}

        def objective(s):
            r = residuals(s)
            v = np.inf if r is None else float(r @ r)
            if v < best_residuals["value"]:
                best_residuals.update(value=v, factor=s, r=r)
            return v

    rec = _Recorder(objective, progress)
    rec.subsample = None
    found = _coarse_stage(rec, coarse, _START_TOL if per_feature else tol) if coarse is not None and refine else None
    if found is None:
        # (The per-feature descent starts from the best grid value: refining it first costs
        # more passes than the descent saves.)
        best, best_value, _ = _grid_stage(rec, grid, refine and not per_feature, tol, warn_edge)
    else:
        best, best_value = found
    if least_squares:
        r0 = best_residuals["r"] if best_residuals.get("factor") == best else None
        best = _per_feature_least_squares(rec, residuals, np.full(n_features, best), r0, fd_step)
    elif per_feature:
        best = _per_feature(rec, np.full(n_features, best), best_value, gradient, fd_step)
    results = rec.results()
    if rec.subsample is not None:
        results["subsample"] = rec.subsample
    return best, results


def _per_feature(rec, s0, v0, gradient=None, step=1e-6):
    """L-BFGS on log s from s0 (objective v0) with the analytic ``gradient`` or forward
    differences of the exact objective (d passes per gradient beyond the objective's; the
    step biases the minimiser by ~step/2 in log h)."""
    from scipy.optimize import minimize

    t0 = np.log(s0)

    def f(t):
        # The start is the grid's best, already evaluated (exp(log s) need not be s to the last bit).
        return v0 if np.array_equal(t, t0) else rec(np.exp(t), "gradient", refusable=True)

    def fg(t):
        if gradient is not None:
            v, g = _where_defined(gradient, np.exp(t), (np.inf, np.zeros_like(t)))
            v = rec.add(np.exp(t), v, "gradient")
            g = np.asarray(g, dtype=np.float64)
            return v, (g if np.all(np.isfinite(g)) else np.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0))
        v = f(t)
        g = np.empty_like(t)
        for j in range(len(t)):
            e = np.zeros_like(t)
            e[j] = step
            g[j] = (f(t + e) - v) / step
        if not np.all(np.isfinite(g)):
            g = np.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0)
        return v, g

    # In units of _STEP_SCALE in log h: L-BFGS's first trial step has unit length, and a step
    # of e in a bandwidth mostly overshoots and backtracks (wasted passes).
    scale = _STEP_SCALE

    best = [t0, v0]

    def fg_scaled(z):
        t = t0 + scale * z
        # Near the minimum the line search's last steps are at the level of the objective's
        # rounding: a point this close to the best one is not worth a pass.
        if best[0] is not t0 and np.max(np.abs(t - best[0])) < _STEP_TOL:
            raise _Converged
        v, g = fg(t)
        if v < best[1] or best[0] is t0:
            best[:] = t, v
        return v, scale * g

    try:
        minimize(fg_scaled, np.zeros_like(t0), jac=True, method="L-BFGS-B",
                 options={"maxiter": 200, "gtol": 1e-9 * scale, "ftol": 1e-13})
    except _Converged:
        pass
    return np.exp(best[0]) if best[1] <= v0 else s0


def _per_feature_least_squares(rec, residuals, s0, r0=None, step=1e-6):
    """Minimise ‖r(log s)‖² from s0 (residuals r0 there; evaluated if None) by Newton steps on
    a Hessian model: the Gauss–Newton JᵀJ at the start (J by forward differences, d passes),
    then BFGS updates. Returns the best factor evaluated.

    A LOO residual rᵢ leaves yᵢ out, so its noise is independent of rᵢ's curvature and the
    neglected term Σ rᵢ∇²rᵢ is small against JᵀJ: the first step lands near the minimum where
    L-BFGS, starting from a unit matrix, spends passes on line searches. The term is not zero
    (Gauss–Newton alone zigzags in to the minimum), and BFGS learns it from the steps taken.
    The model also predicts the next step: below _STEP_TOL the descent stops without the
    pass that L-BFGS would spend to find it so small.
    """
    t0 = np.log(s0)
    best = [t0, np.inf]

    def at(t, stage):
        r = _where_defined(residuals, np.exp(t), None)
        r = None if r is None else np.asarray(r, dtype=np.float64)
        v = rec.add(np.exp(t), np.inf if r is None else r @ r, stage)
        if v < best[1]:
            best[:] = t, v
        return r, v

    def jacobian(t, r):
        J = np.empty((len(r), len(t)))
        for j in range(len(t)):
            e = np.zeros_like(t)
            e[j] = step
            rj, vj = at(t + e, "gradient")
            J[:, j] = (rj - r) / step if np.isfinite(vj) else 0.0
        return J

    t = t0
    r, v = at(t, "gradient") if r0 is None else (r0, float(r0 @ r0))
    if not np.isfinite(v):
        return s0
    best[1] = v
    J = jacobian(t, r)
    g, H = J.T @ r, J.T @ J
    for _ in range(_MAX_STEPS):
        try:
            d = -np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            d = -g
        if not np.all(np.isfinite(d)):
            break
        # A step of more than a factor e in a bandwidth leaves the model's trust.
        d /= max(1.0, np.max(np.abs(d)))
        # Stop where the model's next step is short, or gains next to nothing: along a flat
        # direction (a feature without signal, whose bandwidth grows without end) the steps stay
        # long while the objective barely moves.
        if np.max(np.abs(d)) < _STEP_TOL or -(g @ d) < _GAIN_TOL * v:
            break
        # Backtrack to a decrease (the model may overshoot where the objective is not quadratic).
        while True:
            r_new, v_new = at(t + d, "gradient")
            if v_new < v or np.max(np.abs(d)) < _STEP_TOL:
                break
            d /= 2
        if not v_new < v:
            break
        J_new = jacobian(t + d, r_new)
        g_new = J_new.T @ r_new
        y = g_new - g
        if d @ y > 0:
            Hd = H @ d
            H = H - np.outer(Hd, Hd) / (d @ Hd) + np.outer(y, y) / (d @ y)
        t, r, v, g = t + d, r_new, v_new, g_new
    # The best evaluation (a Jacobian's point may be lower than the step's, by rounding-level
    # amounts): the answer is one of the recorded passes, bit for bit.
    return s0 if best[0] is t0 else np.exp(best[0])


# Forward-difference steps in log h for float64 and float32 samples: a step well above the
# objective's rounding (~1e-16 and ~1e-7 relative), well below the search's tolerance; with 1e-6
# on float32 data the differences are rounding noise and the descent stalls at its start
# (LOO errors 0.5-4 % above the minimum on unit-scale data).
_FD_STEP = (1e-6, 1e-3)

# The per-feature least-squares descent's Newton steps at most, and the relative decrease of
# the objective its model must predict to take one more.
_MAX_STEPS = 100
_GAIN_TOL = 1e-10


class _Converged(Exception):
    """The per-feature descent's steps fell below _STEP_TOL."""


# Fitted attributes that hold one row per sample (what a subsample keeps).
_SAMPLE_ATTRIBUTES = ("X_fit_", "y_fit_", "onehot_", "sample_weight_")


def _on_subsample(est, idx):
    """A shallow copy of a fitted estimator that holds only the samples ``idx``."""
    sub = copy.copy(est)
    for name in _SAMPLE_ATTRIBUTES:
        value = getattr(est, name, None)
        if value is not None:
            setattr(sub, name, np.ascontiguousarray(value[idx]))
    sub._bound_cache = [None]
    return sub


def _coarse(est, objective, base, X, rate):
    """The subsample stage of the search (see ``search``'s ``coarse``), or None where it does
    not apply: small samples, a grid given by the user, adaptive bandwidths (their scale is a
    neighbour count, not a length that shrinks with n)."""
    n = len(X)
    if n < _COARSE_MIN or getattr(est, "bandwidth_grid", None) is not None or _fixed_scale(base, X) is None:
        return None
    idx = np.sort(np.random.default_rng(0).choice(n, _COARSE_SIZE, replace=False))
    sub_objective = types.MethodType(objective.__func__, _on_subsample(est, idx))
    return (lambda s: sub_objective(scaled_kernel(base, s, X)), default_grid(base, X[idx]), (_COARSE_SIZE / n) ** rate)


def fit_loo(est: E, objective: Callable[..., float], *, n_features: int, refine: bool = True,
            gradient: Callable[..., Any] | None = None, residuals: Callable[..., Any] | None = None,
            rate: float | None = None) -> E:
    """Run the search for an estimator whose ``bandwidth`` is a LOO rule.

    ``objective(kernel)`` (a method of ``est``) evaluates the LOO objective of the estimator
    under a candidate kernel; ``gradient(kernel)``, where the estimator has one, returns
    (objective, its gradient in the log of the kernel's per-feature bandwidths) for the
    per-feature stage; ``residuals(kernel)``, where the objective is a mean squared error,
    the residual vector whose squared norm it is (``search``'s least-squares descent).
    ``rate``: the LOO bandwidth shrinks like n^(-rate), default
    1/(d + 4) (second-order bias: local constant and linear fits, densities); it carries the
    coarse stage's choice from its subsample to the full sample.
    Sets ``bandwidth_``, ``kernel_`` and ``cv_results_`` on ``est``; ``est.verbose`` (if it has
    one) shows a progress bar over the evaluations.
    """
    base = base_kernel(est.kernel, getattr(est, "n_neighbors", None))
    X = est.X_fit_
    if len(X) < 2:
        raise LocalizationError(f"bandwidth={est.bandwidth!r} needs at least 2 samples, got 1 sample", "bandwidth")
    per_feature = est.bandwidth.endswith("_per_feature")
    grid = getattr(est, "bandwidth_grid", None)
    # The per-feature descent refines its start: half the grid's points find it as well.
    grid = default_grid(base, X, _GRID_SIZE // 2 if per_feature else _GRID_SIZE) if grid is None else check_grid(grid)
    coarse = _coarse(est, objective, base, X, 1.0 / (X.shape[1] + 4) if rate is None else rate)
    with Progress(getattr(est, "verbose", False), f"{type(est).__name__} bandwidth search", unit="pass") as bar:
        best, results = search(lambda s: objective(scaled_kernel(base, s, X)), grid,
                               per_feature=per_feature, n_features=n_features, refine=refine,
                               gradient=None if gradient is None else lambda s: gradient(scaled_kernel(base, s, X)),
                               residuals=None if residuals is None else lambda s: residuals(scaled_kernel(base, s, X)),
                               coarse=coarse, progress=bar, fd_step=_FD_STEP[X.dtype == np.float32])
    est.bandwidth_ = best
    est.kernel_ = scaled_kernel(base, best, X)
    est.cv_results_ = results
    return est


# -- multi-kernel: simplex weights from the LOO residual Gram ----------------------------------


class MultiKernel:
    """A kernel whose mixture weights are learned by leave-one-out.

    Given kernels K_1..K_L, a local estimator fitted with ``kernel=MultiKernel([...])``
    predicts with the row-normalised mixture Σ_l w_l K̃_l (a
    :class:`~localization.kernels.KernelCombination` with ``normalized=True``), i.e. the
    w-weighted average of the L local means. The weights minimise the exact LOO squared error
    wᵀAw over the simplex (w ≥ 0, Σ w = 1), with A_lm = ⟨r_l, r_m⟩ the inner products of the
    kernels' LOO residual vectors (hollow kernels): the LOO residual of the mixture is exactly
    Σ_l w_l r_l. The small quadratic programme is solved exactly (every active set is tried),
    so the mixture is never worse, in LOO error, than the best single kernel.

    Accepted by :class:`~localization.LocalMeanRegressor` (residuals ŷ₋ᵢ − yᵢ),
    :class:`~localization.LocalModeClassifier` (residuals P̂₋ᵢ − onehot(yᵢ), the Brier score)
    and :class:`~localization.LocalPolynomialRegressor` (the w-weighted average of the L local
    polynomial fits, whose LOO residual is again Σ_l w_l r_l). For
    :class:`~localization.KernelDensity` the mixture is the density Σ_l w_l p̂_l and the
    weights maximise the LOO log-likelihood Σᵢ log Σ_l w_l p̂_l,₋ᵢ(xᵢ) — concave in w, solved
    to its global maximum on the simplex. The fitted estimator exposes ``kernel_weights_`` and
    the mixture as ``kernel_``.

    Parameters
    ----------
    kernels : list of Kernel
        Each keeps its own bandwidth; at most 16 kernels.

    Examples
    --------
    >>> import numpy as np
    >>> from localization import Kernel, LocalMeanRegressor
    >>> from localization.adaptive import MultiKernel
    >>> X = np.linspace(0, 1, 60)[:, None]
    >>> y = np.sin(6 * X[:, 0])
    >>> mk = MultiKernel([Kernel("gaussian", 0.02), Kernel("gaussian", 0.05), Kernel("gaussian", 0.5)])
    >>> reg = LocalMeanRegressor(kernel=mk).fit(X, y)
    >>> bool(np.isclose(reg.kernel_weights_.sum(), 1.0)), bool(reg.kernel_weights_[2] < 0.01)
    (True, True)
    """

    def __init__(self, kernels: Sequence[Kernel]) -> None:
        kernels = list(kernels)
        if not 1 <= len(kernels) <= 16:
            raise LocalizationError(f"a MultiKernel takes 1 to 16 kernels, got {len(kernels)}", "kernels")
        for k in kernels:
            if not isinstance(k, Kernel):
                raise LocalizationTypeError(f"the kernels of a MultiKernel are Kernel objects, got {type(k).__name__}", "kernels")
        self.kernels = kernels

    def __repr__(self):
        return f"MultiKernel({self.kernels!r})"

    def __eq__(self, other):
        return isinstance(other, MultiKernel) and self.kernels == other.kernels

    def __hash__(self):
        return hash(tuple(self.kernels))


def simplex_qp(A: ArrayLike) -> FloatArray:
    """argmin wᵀAw over the probability simplex, exactly, for a small symmetric PSD A.

    On an active set S (the support of w) the minimiser solves A_S w_S = λ1, 1ᵀw_S = 1; it is
    the optimum if w_S ≥ 0 and no excluded coordinate has a negative reduced cost
    ((Aw)_j ≥ λ for j ∉ S, the KKT conditions). Every support is tried (2^L − 1, L ≤ 16) and
    the feasible KKT point of least objective is returned.
    """
    A = np.asarray(A, dtype=np.float64)
    L = len(A)
    best, best_val = None, np.inf
    for mask in range(1, 1 << L):
        S = [j for j in range(L) if mask >> j & 1]
        M = np.zeros((len(S) + 1, len(S) + 1))
        M[: len(S), : len(S)] = A[np.ix_(S, S)]
        M[: len(S), -1] = -1.0
        M[-1, : len(S)] = 1.0
        rhs = np.zeros(len(S) + 1)
        rhs[-1] = 1.0
        try:
            sol = np.linalg.lstsq(M, rhs, rcond=None)[0]
        except np.linalg.LinAlgError:
            continue
        wS, lam = sol[:-1], sol[-1]
        if np.any(wS < -1e-12) or not np.isclose(wS.sum(), 1.0):
            continue
        w = np.zeros(L)
        w[S] = np.maximum(wS, 0.0)
        w /= w.sum()
        val = float(w @ A @ w)
        scale = max(np.abs(A).max(), 1e-300)
        if np.any((A @ w)[[j for j in range(L) if j not in S]] < lam - 1e-9 * scale):
            continue
        if val < best_val:
            best, best_val = w, val
    if best is None:  # cannot happen for PSD A (the KKT point exists); be safe
        best = np.eye(L)[int(np.argmin(np.diag(A)))]
    return best


def fit_multikernel(est: E, residuals: Callable[..., FloatArray]) -> E:
    """Learn the simplex weights of ``est.kernel`` (a MultiKernel) from LOO residuals.

    ``residuals(kernel)`` returns the (n, p) LOO residuals under one kernel. Sets
    ``kernel_`` (the normalised mixture), ``kernel_weights_`` and ``cv_results_``.
    """
    kernels = _check_multikernel(est)
    w = None if est.sample_weight_ is None else est.sample_weight_.astype(np.float64)
    R = _per_kernel(est, kernels, residuals)
    for k, r in zip(kernels, R):
        if not np.all(np.isfinite(r)):
            raise LocalizationError(f"the leave-one-out prediction under {k!r} is undefined for some sample (no neighbour, or a singular local design); "
                                    "widen its bandwidth", "kernel")
    sw = np.ones(len(R[0])) if w is None else w
    A = np.array([[np.sum(sw[:, None] * a * b) for b in R] for a in R]) / sw.sum()
    weights = simplex_qp(A)
    est.kernel_weights_ = weights
    est.kernel_ = KernelCombination(kernels, weights, normalized=True)
    est.cv_results_ = {"kernel_loo_error": np.diag(A).copy(), "loo_error": float(weights @ A @ weights), "gram": A}
    return est


def _per_kernel(est, kernels, f):
    """``f(k)`` as float64 for every kernel, with a progress bar over them if ``est.verbose``."""
    out = []
    with Progress(getattr(est, "verbose", False), f"{type(est).__name__} kernel weights", unit="kernel",
                  total=len(kernels)) as bar:
        for k in kernels:
            out.append(np.asarray(f(k), dtype=np.float64))
            bar.update()
    return out


def _check_multikernel(est):
    if len(est.X_fit_) < 2:
        raise LocalizationError("a MultiKernel learns its weights by leave-one-out and needs at least 2 samples, got "
                                "n_samples = 1", "X")
    if is_loo(est.bandwidth, LOO_RULES + ("lscv", "lscv_per_feature")):
        raise LocalizationError("a MultiKernel carries its kernels' own bandwidths; do not combine it with a LOO bandwidth rule", "bandwidth")
    return est.kernel.kernels


def simplex_log_likelihood(log_p: ArrayLike, sample_weight: ArrayLike | None = None) -> FloatArray:
    """argmax Σᵢ vᵢ log Σ_l w_l P_il over the probability simplex (v the normalised sample weights).

    The objective is concave in w, so the KKT point is the global maximum: g_l = Σᵢ vᵢ P_il/(Pw)ᵢ
    equals 1 on the support of w and is at most 1 off it. SLSQP finds it; multiplicative EM steps
    w_l ← w_l g_l (which keep w on the simplex and never decrease the objective) polish it.
    ``log_p`` (n, L) holds log P (−inf allowed, not a whole row); rows are rescaled by their maximum.
    """
    from scipy.optimize import minimize

    log_p = np.asarray(log_p, dtype=np.float64)
    n, L = log_p.shape
    P = np.exp(log_p - log_p.max(axis=1, keepdims=True))
    v = np.full(n, 1.0 / n) if sample_weight is None else sample_weight / sample_weight.sum()

    def negative(w):
        m = np.maximum(P @ w, 1e-300)
        return -float(v @ np.log(m)), -(P.T @ (v / m))

    if L == 1:
        return np.ones(1)
    res = minimize(negative, np.full(L, 1.0 / L), jac=True, method="SLSQP", bounds=[(0.0, 1.0)] * L,
                   constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0, "jac": lambda w: np.ones(L)}],
                   options={"maxiter": 500, "ftol": 1e-15})
    w = np.clip(res.x, 0.0, None)
    w = w / w.sum() if w.sum() > 0 else np.full(L, 1.0 / L)
    for _ in range(100):
        g = -negative(w)[1]
        w_next = w * g
        w_next /= w_next.sum()
        if np.max(np.abs(w_next - w)) < 1e-13:
            w = w_next
            break
        w = w_next
    return w


def fit_multikernel_density(est: E, log_density: Callable[[Any], FloatArray]) -> E:
    """Learn the simplex weights of a density mixture Σ_l w_l p̂_l from LOO log-densities.

    ``log_density(kernel)`` returns log p̂₋ᵢ(xᵢ) for every sample under one kernel. The weights
    maximise the LOO log-likelihood Σᵢ vᵢ log Σ_l w_l p̂_l,₋ᵢ(xᵢ) (concave: solved to its global
    maximum). Sets ``kernel_`` (the mixture), ``kernel_weights_`` and ``cv_results_``.
    """
    kernels = _check_multikernel(est)
    log_p = np.column_stack(_per_kernel(est, kernels, log_density))
    if not np.all(np.any(np.isfinite(log_p), axis=1)):
        raise LocalizationError("the leave-one-out density is zero for some sample under every kernel of the MultiKernel "
                                "(no neighbour in any window); widen a bandwidth", "kernel")
    v = None if est.sample_weight_ is None else est.sample_weight_.astype(np.float64)
    weights = simplex_log_likelihood(log_p, v)
    v = np.full(len(log_p), 1.0 / len(log_p)) if v is None else v / v.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        mixture = np.log(np.exp(log_p - log_p.max(1, keepdims=True)) @ weights) + log_p.max(1)
        single = np.array([v @ col if np.all(np.isfinite(col)) else -np.inf for col in log_p.T])
    est.kernel_weights_ = weights
    est.kernel_ = KernelCombination(kernels, weights, normalized=True)
    est.cv_results_ = {"kernel_loo_log_likelihood": single, "loo_log_likelihood": float(v @ mixture)}
    return est


# -- the self-consistent kernel ------------------------------------------------------------------


def self_consistent_kernel(X: ArrayLike, n_neighbors: int = 10, *, reg: float = 1e-3, n_jobs: int | None = None) -> csr_matrix:
    """Fit a hollow kernel to the data itself: min ‖X − K̃X‖_F over K̃ supported on each
    point's k nearest other points, with rows summing to one.

    The objective separates by rows: K̃ᵢ minimises ‖xᵢ − Σⱼ K̃ᵢⱼ xⱼ‖² over the neighbours j of i
    with Σⱼ K̃ᵢⱼ = 1, solved through the regularised local Gram matrix
    Gᵢ = (N − xᵢ)(N − xᵢ)ᵀ + reg·tr(Gᵢ)·I (the weights of locally linear embedding, the
    self-consistency behind LLE and attention). The kernel is *signed*: an affine
    reconstruction may use negative weights; a point is never its own neighbour (hollow).

    Parameters
    ----------
    X : array of shape (n, d)
    n_neighbors : int, default=10
    reg : float, default=1e-3
        Tikhonov regularisation relative to the trace of each local Gram matrix (needed when
        k > d, where the affine reconstruction is not unique).
    n_jobs : int, optional
        Threads of the neighbour search.

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n, n)
        K̃, with n_neighbors entries per row summing to 1 and a zero diagonal.

    Examples
    --------
    >>> import numpy as np
    >>> from localization.adaptive import self_consistent_kernel
    >>> X = np.random.default_rng(0).normal(size=(50, 3))
    >>> K = self_consistent_kernel(X, n_neighbors=5)
    >>> K.shape, bool(np.allclose(K.sum(axis=1), 1)), float(abs(K.diagonal()).max())
    ((50, 50), True, 0.0)
    """
    from scipy.sparse import csr_matrix

    from ._validation import as_float_array

    X = as_float_array(X, "X")
    n = len(X)
    k = check_positive_int(n_neighbors, "n_neighbors")
    if k >= n:
        raise LocalizationError(f"`n_neighbors`={k} must be smaller than the {n} samples (a point is not its own neighbour)", "n_neighbors")
    if not (np.isscalar(reg) and np.isfinite(reg) and reg >= 0):
        raise LocalizationError(f"`reg` must be a finite non-negative number, got {reg!r}", "reg")
    _, ind = _core.NeighborIndex(X).knn(X, k + 1, n_jobs=n_jobs)
    # Drop each point itself (it may not come first among duplicates); else the farthest.
    own = ind == np.arange(n)[:, None]
    drop = np.where(own.any(1), np.argmax(own, 1), k)
    keep = np.ones_like(own)
    keep[np.arange(n), drop] = False
    ind = ind[keep].reshape(n, k)
    Xf = X.astype(np.float64)
    D = Xf[ind] - Xf[:, None, :]  # (n, k, d)
    G = D @ D.transpose(0, 2, 1)
    tr = np.trace(G, axis1=1, axis2=2)
    G[:, np.arange(k), np.arange(k)] += np.where(tr > 0, reg * tr, reg)[:, None]
    w = np.linalg.solve(G, np.ones((n, k, 1)))[:, :, 0]
    w /= w.sum(1, keepdims=True)
    return csr_matrix((w.ravel(), ind.ravel(), np.arange(0, n * k + 1, k)), shape=(n, n))

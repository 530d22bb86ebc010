"""Binned kernel sums with a rigorous error bound (``algorithm="binned"``).

The approximate fast path for kernel sums and local means in 1 to 3 features:

1. **Linear binning.** Each weighted sample (and each of its values) is split over the 2ᵈ
   corners of its cell of a regular grid with the multilinear (hat-function) weights.
2. **One FFT convolution** of the binned grids with the kernel sampled at the grid offsets
   (``scipy.fft``, zero-padded so the convolution is linear, not circular), giving the kernel
   sums at every grid node.
3. **Multilinear interpolation** of the grid sums back to the queries.

Per sample this is exactly the multilinear interpolation of F(y, z) = k(‖y − z‖/h) on the
product grid at (x*, xᵢ), which gives the bound (per output column, absolute, uniform over
the queries; A = Σᵢ |wᵢ vᵢ|, r_j = Δ_j / h the cell size per feature in bandwidths):

    |Ŝ(x*) − S(x*)| ≤ A · (min(1, M₁ Σ_j r_j, M₂/4 · Σ_j r_j²) + k(R) + δ_fp) + ε_FFT

- M₁ = sup |k′| (Lipschitz constant of the profile) and, for profiles whose derivative is
  Lipschitz, M₂ = sup max(|k″(u)|, |k′(u)|/u) (bounds every second partial of k(‖u‖)); the
  first-order term covers kernels with a kink (exponential, epanechnikov, linear, cosine),
  the tophat (discontinuous) only gets the trivial bound A;
- k(R) is the kernel truncation (infinite-support profiles are sampled up to R·h, chosen so
  that k(R) is far below the binning term; 0 when the whole grid is covered or the support
  is compact);
- δ_fp covers rounding of the binning sums (sequential, n terms), positions, kernel samples
  and interpolation, and ε_FFT the FFT convolution (standard FFT error analysis, Higham,
  *Accuracy and Stability of Numerical Algorithms*, §24.1, with a conservative constant):
  (2α + 3ε)‖c‖₂‖k‖₁ + α‖c‖₁‖k‖₂ with α = 10 ε log₂ N.

Everything is computed in float64 whatever the input dtype; float32 callers also get the
rounding of the result to float32 added to the bound.

Why scipy.fft from Python rather than a Rust FFT crate: the FFT is one library call on a
dense grid (pocketfft, multithreaded over independent lines, so bit-identical for every
worker count); binning and interpolation are O(n·2ᵈ) gathers and scatters that
``np.bincount`` and fancy indexing do at memory speed. No m×n matrix is ever formed.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import scipy.fft as sfft

from . import _core
from .kernels import PROFILES, Balloon, SamplePoint
from ._validation import NON_NEGATIVE, Integral, Interval, LocalizationError, check_number

__all__ = ["BinnedSums", "binned_sums", "MAX_FEATURES"]

MAX_FEATURES = 3

# (M₁, M₂) of each profile k(u), u ≥ 0 (derivations in docs/local_models.md; a test checks
# them against a dense numerical scan). M₂ is None where k′ jumps (a kink: only the
# first-order bound holds); the tophat jumps itself (M₁ = inf).
_SMOOTHNESS = {
    "gaussian": (math.exp(-0.5), 1.0),
    "exponential": (1.0, None),
    "cauchy": (3.0 * math.sqrt(3.0) / 8.0, 2.0),
    "tophat": (math.inf, None),
    "epanechnikov": (2.0, None),
    "biweight": (8.0 / (3.0 * math.sqrt(3.0)), 8.0),
    "triweight": (6.0 / math.sqrt(5.0) * 0.64, 6.0),
    "linear": (1.0, None),
    "tricube": (2.00906, 8.7387),
    "cosine": (math.pi / 2.0, None),
}
# Radius R where an infinite-support profile falls to the level t: k(R) = t.
_TAIL_RADIUS = {
    "gaussian": lambda t: math.sqrt(-2.0 * math.log(t)),
    "exponential": lambda t: -math.log(t),
    "cauchy": lambda t: math.sqrt(1.0 / t - 1.0),
}
# Default grid: this many cells per bandwidth, capped per number of features (the kernel table
# and the padded grid take up to (2G)ᵈ float64 each: 2·10⁶ in 3-D).
_CELLS_PER_BANDWIDTH = 32
_MAX_DEFAULT_GRID = {1: 1 << 16, 2: 1024, 3: 64}
_EPS = float(np.finfo(np.float64).eps)


class BinnedSums:
    """Result of :func:`binned_sums`: float64 sums and their uniform absolute bounds.

    ``num`` (m, p) or None, ``den`` (m,), ``num_bound`` (m, p) or None, ``den_bound`` (m,): for
    every query, |num − exact| ≤ num_bound and |den − exact| ≤ den_bound (before rounding to the
    caller's dtype, which :meth:`rounding` adds).
    """

    __slots__ = ("num", "den", "num_bound", "den_bound", "grid_shape")

    def __init__(self, num, den, num_bound, den_bound, grid_shape):
        self.num, self.den, self.num_bound, self.den_bound, self.grid_shape = num, den, num_bound, den_bound, grid_shape

    @staticmethod
    def rounding(value, dtype):
        """The rounding of ``value`` to ``dtype`` (added to the bound of what is returned)."""
        return np.finfo(dtype).eps * np.abs(value)

    def mean_bound(self, mean):
        """Bound on |num/den − exact mean| (per query and column); inf where den ≤ den_bound.

        N̂/D̂ − N/D = (N̂ − N)/D + m̂ (D − D̂)/D and D ≥ D̂ − b_D > 0.
        """
        with np.errstate(divide="ignore", invalid="ignore"):
            margin = self.den - self.den_bound
            out = (self.num_bound + np.abs(mean) * self.den_bound[:, None]) / margin[:, None]
        out[~(margin > 0)] = np.inf
        return out


def check_grid_size(grid_size, d):
    """Validated grid size per feature (tuple of ints ≥ 2) or None for the default."""
    if grid_size is None:
        return None
    if isinstance(grid_size, numbers.Integral):
        sizes = (grid_size,) * d
    else:
        sizes = tuple(np.ravel(grid_size).tolist()) if np.ndim(grid_size) == 1 else None
    integral = sizes is not None and all(isinstance(g, numbers.Integral) and not isinstance(g, bool) for g in sizes)
    if not integral or len(sizes) != d:
        raise LocalizationError(f"`grid_size` must be an integer or one integer per feature ({d}), got {grid_size!r}", "grid_size")
    if any(g < 2 for g in sizes):
        raise LocalizationError(f"`grid_size` must be at least 2 nodes per feature, got {grid_size!r}", "grid_size")
    return tuple(int(g) for g in sizes)


def check_tolerance(value, name):
    """``atol`` / ``rtol``: None, or a float by the estimators' constraint (:data:`NON_NEGATIVE`)."""
    return None if value is None else check_number(value, name, NON_NEGATIVE)


def unsupported_reason(bk, Q, degree=None):
    """Why the binned path cannot compute these sums (None when it can)."""
    if getattr(bk, "callable", True) or getattr(bk, "name", None) not in PROFILES:
        return f"one radial profile kernel ({', '.join(PROFILES)}), not {getattr(bk, 'kernel', bk)!r}"
    if isinstance(bk.kernel.bandwidth, (Balloon, SamplePoint)) or bk.sample_h is not None:
        return "a fixed bandwidth (not Balloon / SamplePoint)"
    if bk.d > MAX_FEATURES:
        return f"at most {MAX_FEATURES} features (X has {bk.d})"
    if degree is not None:
        return "plain sums (no local polynomial moments)"
    return None


def _grid(Xs, Qs, h, grid_size):
    d = Xs.shape[1]
    lo = np.minimum(Xs.min(axis=0), Qs.min(axis=0)).astype(np.float64)
    hi = np.maximum(Xs.max(axis=0), Qs.max(axis=0)).astype(np.float64)
    extent = hi - lo
    if grid_size is None:
        cap = _MAX_DEFAULT_GRID[d]
        sizes = [min(cap, max(16, math.ceil(_CELLS_PER_BANDWIDTH * e / h) + 1)) for e in extent]
    else:
        sizes = list(grid_size)
    sizes = np.array([g if e > 0 else 1 for g, e in zip(sizes, extent)], dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        delta = np.where(sizes > 1, extent / np.maximum(sizes - 1, 1), 0.0)
    return lo, hi, sizes, delta


def _gaussian_curvature_sup(a, b):
    """sup over u in [a, b] of max(|k″(u)|, |k′(u)|/u) for k = exp(−u²/2), which is
    exp(−u²/2)·max(1, |u² − 1|): decreasing on [0, √2], increasing on [√2, √3], decreasing after."""
    D = lambda u: np.exp(-0.5 * u * u) * np.maximum(1.0, np.abs(u * u - 1.0))  # noqa: E731
    top = np.maximum(D(a), D(b))
    peak = (a <= math.sqrt(3.0)) & (b >= math.sqrt(3.0))
    return np.where(peak, np.maximum(top, 2.0 * math.exp(-1.5)), top)


def binned_sums(bk, Qs, values=None, sample_weight=None, *, exclude_self=False, grid_size=None, local_bound=True,
                 n_jobs=None, progress=None):
    """Binned Σ K w v and Σ K w at the (scaled) queries ``Qs`` with their error bounds.

    ``bk`` is a :class:`~localization.engine.BoundKernel` with a radial profile and a fixed
    bandwidth; ``Qs`` is already divided by a per-feature bandwidth. ``local_bound=False``
    skips the per-query bound (one FFT convolution less) and reports the uniform one.
    ``progress(done, total)``, the native core's callback, is told the steps done (binning,
    convolution, interpolation; twice each with ``local_bound``): each is one pass over the
    samples, the grid or the queries, not divisible further from here.
    Returns :class:`BinnedSums` in float64.
    """
    reason = unsupported_reason(bk, Qs)
    if reason is not None:
        raise LocalizationError(f"algorithm='binned' needs {reason}", "algorithm")
    Xs, name, h = bk.Xs, bk.name, float(bk.h)
    n, d = Xs.shape
    grid_size = check_grid_size(grid_size, d)
    workers = _core.effective_n_jobs(n_jobs)
    lo, hi, sizes, delta = _grid(Xs, Qs, h, grid_size)
    geometry = (lo.tolist(), delta.tolist(), sizes.tolist())
    n_nodes = int(np.prod(sizes))
    total, done = (6 if local_bound else 3), -1

    def step():
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    step()

    # 1. linear binning (native, one sequential pass: the grid does not depend on n_jobs)
    grids = _core.bin_linear(Xs, *geometry, weights=sample_weight, values=values, n_jobs=n_jobs)
    cols = grids.shape[0]
    signed = values is not None or (sample_weight is not None and np.any(sample_weight < 0))
    abs_grids = _core.bin_linear(Xs, *geometry, weights=None if sample_weight is None else np.abs(sample_weight),
                                 values=None if values is None else np.abs(values), n_jobs=n_jobs) if signed else grids
    step()

    # 2. the kernel at the grid offsets up to the truncation radius R·h (plus 4 cells, so that a
    #    pair with any dropped corner is at least R·h apart at every corner and at its points)
    m1, m2 = _SMOOTHNESS[name]
    r = delta / h
    binning = min(1.0, m1 * float(r.sum())) if math.isfinite(m1) else 1.0
    if m2 is not None:
        binning = min(binning, m2 / 4.0 * float((r * r).sum()))
    support = _core.profile_info(name)[1]
    radius = _TAIL_RADIUS[name](max(1e-3 * binning, 1e-18)) if support is None else float(support)
    with np.errstate(divide="ignore", invalid="ignore"):
        reach = np.where(delta > 0, np.ceil(radius * h / np.where(delta > 0, delta, 1.0)) + 4, 0)
    half = np.minimum(sizes - 1, reach.astype(np.int64))
    truncated = support is None and bool(np.any(half < sizes - 1))
    truncation = float(_core.profile_values(name, np.array([radius]))[0]) if truncated else 0.0
    shape = tuple(int(sfft.next_fast_len(int(g + L), real=True)) for g, L in zip(sizes, half))
    offsets = [np.arange(-L, L + 1) for L in half]
    mesh = np.meshgrid(*[a * dk for a, dk in zip(offsets, delta)], indexing="ij")
    dist = np.sqrt(sum(c * c for c in mesh))
    kern = _core.profile_values(name, np.ascontiguousarray(dist.ravel() / h)).reshape(dist.shape)
    place = np.ix_(*[a % s for a, s in zip(offsets, shape)])
    fft_axes = tuple(range(1, d + 1))
    crop = (slice(None),) + tuple(slice(0, int(g)) for g in sizes)

    def convolve(spectrum, small):
        full = np.zeros(shape)
        full[place] = small
        out = sfft.irfftn(spectrum * sfft.rfftn(full, workers=workers)[None], s=shape, axes=fft_axes, workers=workers)
        return np.ascontiguousarray(out[crop].reshape(spectrum.shape[0], n_nodes))

    spectrum = sfft.rfftn(grids.reshape((cols,) + tuple(sizes)), s=shape, axes=fft_axes, workers=workers)
    conv = convolve(spectrum, kern)
    del spectrum
    step()

    # 3. multilinear interpolation at the queries (native, parallel over queries)
    out = _core.interpolate_grid(conv, Qs, *geometry, n_jobs=n_jobs).T
    step()
    if exclude_self:
        # The hollow kernel: take each point's own (exact) term out of the binned full sum.
        own = float(_core.profile_values(name, np.zeros(1))[0])
        w = np.ones(n) if sample_weight is None else sample_weight.astype(np.float64)
        out[0] -= own * w
        if values is not None:
            out[1:] -= own * (w[:, None] * values.astype(np.float64)).T

    # 4. the bounds. Uniform: every pair errs by at most `binning` (times |w v|).
    absolute = abs_grids.sum(axis=1)
    scale = float(np.max(np.maximum(np.abs(lo), np.abs(hi)))) / h
    slope = m1 * (radius + scale) if math.isfinite(m1) else 0.0
    rounding = _EPS * ((n + d + 2) + (2 * d + 2) * (1 + binning) + 8 * (1 + slope))
    alpha = 10 * _EPS * math.log2(max(int(np.prod(shape)), 2))

    def fft_error(small):
        k1, k2 = float(np.abs(small).sum()), float(np.sqrt((small * small).sum()))
        c1, c2 = np.abs(abs_grids).sum(axis=1), np.sqrt(np.einsum("ij,ij->i", abs_grids, abs_grids))
        return (2 * alpha + 3 * _EPS) * c2 * k1 + alpha * c1 * k2

    extra = absolute * (truncation + rounding) + fft_error(kern)
    bound = absolute * binning + extra
    local = None
    if local_bound:
        # Per query: Σ |wᵢvᵢ| E(offset), E = min(binning, oscillation of k over every offset
        # within 4 cells per feature of the grid offset) ≥ the error of each pair whose corners
        # include that offset; binned and interpolated like the sums themselves.
        spread = 4.0 * float(np.sqrt((delta * delta).sum()))
        near = _core.profile_values(name, np.ascontiguousarray(np.maximum(dist.ravel() - spread, 0.0) * (1 - 1e-12) / h))
        far = _core.profile_values(name, np.ascontiguousarray((dist.ravel() + spread) * (1 + 1e-12) / h))
        envelope = np.minimum(binning, near - far)
        if name == "gaussian":
            # the second-order bound with the sup of |second derivatives| over the shell itself
            lo_r = np.maximum(dist.ravel() - spread, 0.0) * (1 - 1e-12) / h
            hi_r = lo_r + 2 * spread / h * (1 + 1e-12) + 2e-12 * dist.ravel() / h
            envelope = np.minimum(envelope, float((r * r).sum()) / 4.0 * _gaussian_curvature_sup(lo_r, hi_r))
        envelope = envelope.reshape(dist.shape)
        abs_spectrum = sfft.rfftn(abs_grids.reshape((cols,) + tuple(sizes)), s=shape, axes=fft_axes, workers=workers)
        env = convolve(abs_spectrum, envelope)
        del abs_spectrum
        step()
        local = _core.interpolate_grid(env, Qs, *geometry, n_jobs=n_jobs).T + (extra + fft_error(envelope))[:, None]
        local = np.minimum(local, bound[:, None])
        step()
    den = out[0]
    np.maximum(den, 0.0, out=den)  # every profile is ≥ 0, so is the exact sum: clipping only moves toward it
    num = out[1:].T if values is not None else None
    den_bound = bound[0] if local is None else local[0]
    num_bound = None if values is None else (np.broadcast_to(bound[1:], num.shape) if local is None else local[1:].T)
    return BinnedSums(num, den, num_bound, np.broadcast_to(den_bound, den.shape), tuple(int(g) for g in sizes))


def worthwhile(bk, Qs, grid_size=None):
    """The cost model of ``algorithm="auto"``: binning wins when the pairs outnumber the grid
    work (FFT of the padded grid plus 2ᵈ gathers per point) by a wide margin."""
    lo, hi, sizes, delta = _grid(bk.Xs, Qs, float(bk.h), check_grid_size(grid_size, bk.d))
    nodes = float(np.prod(2 * sizes))
    work = nodes * math.log2(max(nodes, 2.0)) + (bk.n + len(Qs)) * 2**bk.d
    return float(bk.n) * len(Qs) >= 10.0 * work


def tolerance_met(estimate, bound, atol, rtol):
    """|estimate − exact| ≤ atol + rtol·|exact| for every entry, given |estimate − exact| ≤ bound
    (|exact| ≥ |estimate| − bound)."""
    allowed = (atol or 0.0) + (rtol or 0.0) * np.maximum(np.abs(estimate) - bound, 0.0)
    return bool(np.all(bound <= allowed))


def select(bk, Q, *, algorithm, grid_size, atol, rtol, degree=None):
    """Whether these sums go through the binned path: always for ``algorithm="binned"`` (an
    error if it cannot apply), for ``"auto"`` only with a positive tolerance (0, as in
    scikit-learn's ``KernelDensity``, asks for exact sums), where it applies and the
    cost model favours it (the caller still checks the bound against the tolerance)."""
    atol, rtol = check_tolerance(atol, "atol"), check_tolerance(rtol, "rtol")
    Qs = bk._scale(Q) if hasattr(bk, "_scale") else Q
    if algorithm == "binned":
        reason = unsupported_reason(bk, Qs, degree)
        if reason is not None:
            raise LocalizationError(f"algorithm='binned' needs {reason}", "algorithm")
        check_grid_size(grid_size, bk.d)
        return True
    check_grid_size(grid_size, bk.d)
    return (algorithm == "auto" and bool(atol or rtol)
            and unsupported_reason(bk, Qs, degree) is None and worthwhile(bk, Qs, grid_size))


def log_bound(value, bound):
    """Bound on |log v̂ − log v| from |v̂ − v| ≤ bound (inf unless v̂ > bound)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = -np.log1p(-bound / value)
    out[~(value > bound)] = np.inf
    return out


def local_mean_or_none(bk, Q, V, w, *, algorithm, grid_size, atol, rtol, exclude_self=False, n_jobs=None, local_bound=True,
                       progress=None):
    """The binned local mean (mean in Q's dtype, total weight, bound) when the binned path is
    chosen and, under ``"auto"``, its bound meets the tolerance; else None (use an exact path).
    ``progress`` as in :func:`binned_sums`."""
    from .engine import ratio

    if not select(bk, Q, algorithm=algorithm, grid_size=grid_size, atol=atol, rtol=rtol):
        return None
    b = bk.binned(Q, V, w, exclude_self=exclude_self, grid_size=grid_size, n_jobs=n_jobs,
                  local_bound=local_bound or atol is not None or rtol is not None, progress=progress)
    mean64 = ratio(b.num, b.den, warn=False)
    bound = b.mean_bound(mean64) + b.rounding(mean64, Q.dtype)
    if algorithm != "binned" and not tolerance_met(mean64, bound, atol, rtol):
        return None
    return ratio(b.num, b.den).astype(Q.dtype), b.den, bound


#: The `_parameter_constraints` of the binned algorithm's settings (a per-feature `grid_size`
#: is checked against the width of X by :func:`check_params`).
CONSTRAINTS = {
    "grid_size": [Interval(Integral, 2, None, closed="left"), "array-like", None],
    "atol": [NON_NEGATIVE, None],
    "rtol": [NON_NEGATIVE, None],
}


def check_params(est, d):
    """Validate an estimator's ``grid_size``, ``atol`` and ``rtol`` at fit."""
    check_grid_size(est.grid_size, d)
    check_tolerance(est.atol, "atol")
    check_tolerance(est.rtol, "rtol")

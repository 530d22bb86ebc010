"""Self-local means for denoising: the bilateral filter and non-local means.

A *self-localization kernel* K(x, f(x), x', f(x')) weighs the sample j in the mean at i by how
close it is in position *and* in value. The self-local mean

    ŷᵢ = Σⱼ K_x(xᵢ, xⱼ) K_y(yᵢ, yⱼ) yⱼ / Σⱼ K_x(xᵢ, xⱼ) K_y(yᵢ, yⱼ)

is the bilateral filter when x is the pixel position and y the colour (:func:`bilateral`), and
non-local means when K_y compares whole patches around the two pixels (:func:`nl_means`).
:class:`SelfLocalMean` runs the same idea on arbitrary (X, y) samples through the local-mean
engine and iterates it to a fixed point.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

import numpy as np
from sklearn.base import BaseEstimator, MultiOutputMixin, OneToOneFeatureMixin, RegressorMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from . import _core
from ._base import keeps_state_on_error
from ._fixed_point import iterate
from ._progress import Progress
from ._validation import (
    COUNT,
    COUNT_OR_ZERO,
    FINITE,
    FLOAT_DTYPES,
    N_JOBS,
    NON_NEGATIVE,
    POSITIVE,
    LocalizationWarning,
    check_allocation,
    check_bandwidths,
    check_number,
    check_positive_int,
    fit_context,
    validate_data,
    LocalizationError,
    LocalizationTypeError,
)
from .engine import bind, ratio
from .kernels import SPECIAL

if TYPE_CHECKING:
    from ._typing import ArrayLike, FloatArray, Self


__all__ = ["NonLocalMeans", "SelfLocalMean", "bilateral", "nl_means", "self_local_mean"]

_MODES = ("constant", "edge", "symmetric", "reflect", "wrap")


# --------------------------------------------------------------------------- images


def _as_image(image, name="image"):
    """Validate an image: returns (float array H×W×C, was_2d).

    float32 and float64 are kept. Unsigned integer and boolean images are converted to
    float64 in [0, 1] by dividing by the dtype's maximum, as scikit-image's ``img_as_float``
    does; float16 becomes float32. Signed integers are refused (their scaling convention is
    ambiguous): convert them to float yourself.
    """
    arr = np.asarray(image)
    kind = arr.dtype.kind
    if kind == "b":
        arr = arr.astype(np.float64)
    elif kind == "u":
        arr = arr.astype(np.float64) / np.iinfo(arr.dtype).max
    elif kind == "i":
        raise LocalizationTypeError(
            f"`{name}` has signed integer dtype {arr.dtype}; pass a float image "
            "(or an unsigned integer image, which is scaled to [0, 1])",
            name,
        )
    elif kind == "f":
        if arr.dtype == np.float16:
            arr = arr.astype(np.float32)
        elif arr.dtype not in (np.float32, np.float64):
            arr = arr.astype(np.float64)
    else:
        raise LocalizationTypeError(f"`{name}` has dtype {arr.dtype}; pass a float32 or float64 image", name)
    if arr.ndim not in (2, 3):
        raise LocalizationError(
            f"`{name}` must be 2-D (rows, cols) for gray or 3-D (rows, cols, channels) for colour, got shape {arr.shape}",
            name,
        )
    if arr.size == 0:
        raise LocalizationError(f"`{name}` is empty (shape {arr.shape})", name)
    if not np.all(np.isfinite(arr)):
        raise LocalizationError(f"`{name}` contains NaN or infinity", name)
    was_2d = arr.ndim == 2
    return np.ascontiguousarray(arr if not was_2d else arr[:, :, None]), was_2d


def _gaussian_window(radius, sigma, dtype):
    g = np.arange(-radius, radius + 1, dtype=np.float64)
    d2 = g[:, None] ** 2 + g[None, :] ** 2
    return np.ascontiguousarray(np.exp(-0.5 * d2 / sigma**2).astype(dtype))


def _pad(img, radius, mode, cval):
    width = ((radius, radius), (radius, radius), (0, 0))
    if mode == "constant":
        return np.pad(img, width, mode="constant", constant_values=cval)
    return np.pad(img, width, mode=mode)


def bilateral(image: ArrayLike, spatial_bandwidth: float = 1.0, range_bandwidth: float | None = None, *,
              window_size: int | None = None, mode: str = "constant", cval: float = 0.0, n_jobs: int | None = None,
              progress: bool = False) -> FloatArray:
    """Bilateral filter: the self-local mean of an image over a pixel window.

    Every pixel becomes Σⱼ K_x(xᵢ, xⱼ) K_y(fᵢ, fⱼ) fⱼ / Σⱼ K_x K_y over the square window around
    it, with Gaussian K_x(x, x') = exp(−‖x − x'‖²/2h_x²) on positions and
    K_y(f, f') = exp(−‖f − f'‖²/2h_y²) on values (Euclidean over the colour channels).

    Parameters
    ----------
    image : array of shape (rows, cols) or (rows, cols, channels)
        float32/float64 (kept) or unsigned integers/bool (scaled to [0, 1]).
    spatial_bandwidth : float, default=1.0
        h_x in pixels (scikit-image's ``sigma_spatial``).
    range_bandwidth : float, optional
        h_y in intensity units; default: the standard deviation of the image (as scikit-image's
        ``sigma_color=None``).
    window_size : int, optional
        Odd side of the square window; default ``max(5, 2·ceil(3·h_x) + 1)`` (scikit-image's
        default). An even value is rounded down to the odd size scikit-image actually uses.
    mode : {"constant", "edge", "symmetric", "reflect", "wrap"}, default="constant"
        How pixels beyond the border are filled (:func:`numpy.pad` semantics). With
        ``"constant"`` the filled pixels (value ``cval``) take part in the mean like real ones,
        as in scikit-image.
    cval : float, default=0.0
    n_jobs : int, optional
        Threads over image rows; the result does not depend on it.
    progress : bool, default=False
        Show a progress bar (image rows) on stderr when the call lasts more than 0.2 s.

    Returns
    -------
    ndarray of the image's shape and float dtype

    Notes
    -----
    scikit-image's ``denoise_bilateral`` (0.26) differs in two ways: its colour weights come from
    a table of ``bins`` values with the colour distance divided by the number of channels (so
    ``range_bandwidth = channels · sigma_color`` corresponds to its ``sigma_color``), and its
    spatial table is indexed with the wrong row length, so its spatial weights are not the
    Gaussian it documents. See ``docs/denoising.md``.

    Examples
    --------
    >>> import numpy as np
    >>> from localization.denoise import bilateral
    >>> step = np.repeat([[0.0] * 5 + [1.0] * 5], 6, axis=0)
    >>> out = bilateral(step, spatial_bandwidth=2.0, range_bandwidth=0.1, mode="edge")
    >>> bool(np.abs(out - step).max() < 1e-6)   # the edge survives
    True
    """
    img, was_2d = _as_image(image)
    hx = check_number(spatial_bandwidth, "spatial_bandwidth")
    hy = float(img.std()) if range_bandwidth is None else check_number(range_bandwidth, "range_bandwidth")
    if mode not in _MODES:
        raise LocalizationError(f"`mode` must be one of {_MODES}, got {mode!r}", "mode")
    cval = check_number(cval, "cval", FINITE)
    size_name = "window_size"
    if window_size is None:
        if not math.isfinite(3 * hx):
            raise LocalizationError(f"spatial_bandwidth={hx!r} is too large for its default window of "
                                    f"2·ceil(3·spatial_bandwidth) + 1 pixels; pass window_size", "spatial_bandwidth")
        window_size = max(5, 2 * int(math.ceil(3 * hx)) + 1)
        size_name = "spatial_bandwidth"  # the default window grows with it
    window_size = check_positive_int(window_size, size_name)
    radius = (window_size - 1) // 2
    rows, cols, channels = img.shape
    check_allocation(
        ((rows + 2 * radius) * (cols + 2 * radius) * channels + window_size**2) * img.itemsize,
        size_name, f"a {window_size}×{window_size} window (the padded image and the window's weights)",
    )
    with np.errstate(divide="ignore", over="ignore"):
        # 1/(2h²) in the filter's own arithmetic (float64, then the image's dtype).
        inv_two_var = img.dtype.type(1.0 / (2.0 * np.float64(hy) * hy))
    if not hy > 0 or not np.isfinite(inv_two_var):
        # A constant image (std 0) is its own mean. A range bandwidth so small that 1/(2h²)
        # overflows gives weight 0 to every pixel of another value: only equal values are
        # averaged, which leaves every pixel as it is (the h → 0 limit).
        out = img.copy()
    else:
        # Planar layout: every loop of the native filter runs over contiguous pixels.
        padded = np.ascontiguousarray(np.moveaxis(_pad(img, radius, mode, cval), 2, 0))
        spatial = _gaussian_window(radius, hx, img.dtype)
        with Progress(progress, "bilateral", unit="row") as bar:
            out = _core.bilateral_filter(padded, spatial, range_bandwidth=hy, n_jobs=n_jobs, progress=bar.callback)
    return out[:, :, 0] if was_2d else out


def _patch_weights(s, n_channels, h, dtype):
    """scikit-image's patch kernel: a Gaussian of std (s − 1)/4 over the s×s patch, divided by
    (channels · its sum · h²), computed with the same NumPy operations in the image's dtype so
    that the weights are bit-identical."""
    offset = s // 2
    if s == 1:
        # scikit-image divides 0/0 here (std 0); the limit is the single centre weight.
        w = np.ones((1, 1), dtype=dtype)
    else:
        a = dtype.type((s - 1.0) / 4.0)
        rng = np.arange(-offset, offset + 1, dtype=dtype)
        rr, cc = np.meshgrid(rng, rng, indexing="ij")
        w = np.ascontiguousarray(np.exp(-(rr * rr + cc * cc) / float(dtype.type(2 * a * a))))
    w *= 1.0 / (n_channels * np.sum(w) * h * h)
    return np.ascontiguousarray(w, dtype=dtype)


def _patch_side(patch_size, shape, itemsize):
    """The odd patch side nl_means uses, refused up front if its padding could never fit."""
    s = check_positive_int(patch_size, "patch_size")
    s += 1 - s % 2  # an even size is increased by one, as scikit-image does
    rows, cols, channels = shape
    check_allocation(((rows + s - 1) * (cols + s - 1) * channels + s * s) * itemsize, "patch_size",
                     f"{s}×{s} patches (the reflect-padded image and the patch kernel)")
    return s


def nl_means(image: ArrayLike, patch_size: int = 7, patch_distance: int = 11, h: float = 0.1, sigma: float = 0.0, *,
             exact: bool = False, n_jobs: int | None = None, progress: bool = False) -> FloatArray:
    """Non-local means: every pixel is the mean of the pixels around it, weighted by patch similarity.

    uᵢ = Σⱼ w(i, j) fⱼ / Σⱼ w(i, j) over the pixels j within ``patch_distance`` of i (a square
    search window clipped to the image), with
    w(i, j) = exp(−max(Σₚ gₚ ((Pᵢ − Pⱼ)ₚ² − 2σ²), 0)) where Pᵢ is the ``patch_size`` × ``patch_size``
    patch around i (reflect-padded at the borders) and g a Gaussian patch kernel of std
    (patch_size − 1)/4 normalised to sum 1/(channels · h²). It is the self-local mean with a
    kernel on patches: K(i, j) = exp(−‖Pᵢ − Pⱼ‖²_g / h²).

    The defaults reproduce scikit-image's ``denoise_nl_means(..., fast_mode=False)`` with the
    same ``patch_size``, ``patch_distance``, ``h`` and ``sigma`` (to ~1e-15 in float64; see
    ``exact``), about ten times faster on two cores.

    Parameters
    ----------
    image : array of shape (rows, cols) or (rows, cols, channels)
        float32/float64 (kept) or unsigned integers/bool (scaled to [0, 1]).
    patch_size : int, default=7
        Side of the patches; an even value is increased by one (as scikit-image does).
    patch_distance : int, default=11
        Radius of the search window in pixels.
    h : float, default=0.1
        Cut-off distance in intensity units: larger h averages more dissimilar patches.
    sigma : float, default=0.0
        Known noise standard deviation, subtracted from patch distances (2σ² per pixel).
    exact : bool, default=False
        False: scikit-image's weights, which use Schraudolph's fast exponential (relative error
        up to ~4 %) and give weight 0 to a patch whose running distance exceeds 5 at the start
        of a patch row. True: the formula above with the true exponential and no cut-off.
    n_jobs : int, optional
        Threads over image rows; the result does not depend on it.
    progress : bool, default=False
        Show a progress bar (image rows) on stderr when the call lasts more than 0.2 s.

    Returns
    -------
    ndarray of the image's shape and float dtype

    Examples
    --------
    >>> import numpy as np
    >>> from localization.denoise import nl_means
    >>> rng = np.random.default_rng(0)
    >>> clean = np.kron([[0.2, 0.8], [0.8, 0.2]], np.ones((16, 16)))
    >>> noisy = clean + 0.1 * rng.standard_normal(clean.shape)
    >>> den = nl_means(noisy, patch_size=5, patch_distance=6, h=0.08, sigma=0.1)
    >>> bool(np.abs(den - clean).mean() < 0.5 * np.abs(noisy - clean).mean())
    True
    """
    img, was_2d = _as_image(image)
    s = _patch_side(patch_size, img.shape, img.itemsize)
    # The search window is clipped to the image: a larger distance searches the same pixels.
    d = min(check_positive_int(patch_distance, "patch_distance", minimum=0), max(img.shape[:2]))
    h = check_number(h, "h")
    sigma = check_number(sigma, "sigma", NON_NEGATIVE)
    offset = s // 2
    # Reflect padding as scikit-image's slow mode; planar layout so that neighbouring candidate
    # patches are contiguous in memory for every channel.
    padded = np.pad(img, ((offset, offset), (offset, offset), (0, 0)), mode="reflect")
    planar = np.ascontiguousarray(np.moveaxis(padded, 2, 0))
    w = _patch_weights(s, img.shape[2], h, img.dtype)
    with Progress(progress, "nl_means", unit="row") as bar:
        out = _core.nl_means(planar, w, d, var2=2.0 * sigma * sigma, exact=bool(exact), n_jobs=n_jobs, progress=bar.callback)
    return out[:, :, 0] if was_2d else out


class NonLocalMeans(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Non-local means as a scikit-learn transformer: each row of X is one flattened image.

    Parameters
    ----------
    patch_size, patch_distance, h, sigma, exact, n_jobs
        As in :func:`nl_means`.
    image_shape : tuple of int, optional
        Shape of one image, ``(rows, cols)`` or ``(rows, cols, channels)``; its product must be
        the number of features. Default: each row is a 1-pixel-high image ``(1, n_features)``.
    verbose : bool, default=False
        Show a progress bar on stderr for :meth:`transform` calls that last more than 0.2 s:
        over the images, or over the rows of a single image.

    Attributes
    ----------
    n_features_in_ : int
    image_shape_ : tuple of int

    Examples
    --------
    >>> import numpy as np
    >>> from localization.denoise import NonLocalMeans
    >>> X = np.random.default_rng(0).random((3, 64))
    >>> NonLocalMeans(patch_size=3, patch_distance=2, h=0.3, image_shape=(8, 8)).fit_transform(X).shape
    (3, 64)
    """

    def __init__(
        self, patch_size: int = 7, patch_distance: int = 11, h: float = 0.1, sigma: float = 0.0,
        image_shape: ArrayLike | None = None, exact: bool = False, n_jobs: int | None = None, verbose: int | bool = False,
    ) -> None:
        self.patch_size = patch_size
        self.patch_distance = patch_distance
        self.h = h
        self.sigma = sigma
        self.image_shape = image_shape
        self.exact = exact
        self.n_jobs = n_jobs
        self.verbose = verbose

    _parameter_constraints = {
        "patch_size": [COUNT],
        "patch_distance": [COUNT_OR_ZERO],
        "h": [POSITIVE],
        "sigma": [NON_NEGATIVE],
        "image_shape": ["array-like", None],
        "exact": ["boolean"],
        "n_jobs": N_JOBS,
        "verbose": ["verbose"],
    }

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: object = None) -> Self:
        """Check X and the parameters; non-local means learns nothing. Returns self."""
        X = validate_data(self, X, dtype=FLOAT_DTYPES)
        if self.image_shape is None:
            shape = (1, X.shape[1])
        else:
            try:
                shape = tuple(check_positive_int(v, "image_shape") for v in self.image_shape)
            except TypeError:
                raise LocalizationError(f"`image_shape` must be a tuple of positive integers, got {self.image_shape!r}", "image_shape") from None
        if len(shape) not in (2, 3) or int(np.prod(shape)) != X.shape[1]:
            raise LocalizationError(f"`image_shape` {self.image_shape!r} does not hold the {X.shape[1]} features of a row", "image_shape")
        _patch_side(self.patch_size, shape if len(shape) == 3 else shape + (1,), X.itemsize)
        self.image_shape_ = shape
        return self

    def transform(self, X: ArrayLike) -> FloatArray:
        """Denoise every row (as an image of ``image_shape_``); returns an array like X."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False)
        out = np.empty_like(X)
        # One bar over the images; a single image gets nl_means' own bar over its rows.
        single = len(X) == 1
        with Progress(self.verbose and not single, "NonLocalMeans.transform", unit="image", total=len(X)) as bar:
            for i, row in enumerate(X):
                out[i] = nl_means(
                    row.reshape(self.image_shape_), self.patch_size, self.patch_distance, self.h, self.sigma,
                    exact=self.exact, n_jobs=self.n_jobs, progress=bool(self.verbose) and single,
                ).ravel()
                bar.update()
        return out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.requires_fit = True
        return tags


# --------------------------------------------------------------------------- (X, y) samples


def _fixed_point(Xf, Yf, Xq, start, hx, hy, kernel, max_iter, tol, blurring, n_jobs):
    """Iterate ŷᵢ ← Σⱼ K((xᵢ, ŷᵢ), (xⱼ, yⱼ)) yⱼ / Σⱼ K from Ŷ = start at the positions Xq
    (references: the samples (Xf, Yf)), one engine call per step.

    The product of Gaussians is one Gaussian on the scaled, concatenated features
    [x/h_x, y/h_y], so every step is a plain local mean over those features with values y.
    Without blurring the references stay put (their prepared reference is built once and
    every step reuses it), every sample follows its own trajectory and stops on its own (so
    the result for one sample does not depend on the others' convergence); with blurring
    (Xq is Xf) the references' values are the current ŷ, the whole sample moves together and
    stops when no value moves by more than tol·h_y.
    """
    dt = Xf.dtype
    inv_hy = (1.0 / hy).astype(dt)
    Xs = Xf / hx.astype(dt)
    Xqs = Xs if Xq is Xf else Xq / hx.astype(dt)
    fixed = None if blurring else bind(kernel, 1.0, np.ascontiguousarray(np.hstack([Xs, Yf * inv_hy]))).prepare()
    cur = start.copy()

    def update(idx, cur):
        if blurring:
            bk, values = bind(kernel, 1.0, np.ascontiguousarray(np.hstack([Xs, cur * inv_hy]))), cur.copy()
        else:
            bk, values = fixed, Yf
        q = np.ascontiguousarray(np.hstack([Xqs[idx], cur[idx] * inv_hy]), dtype=dt)
        sums = bk.sums(q, values, None, n_jobs=n_jobs, prepared=not blurring)
        num, den = sums.num, sums.den
        new = ratio(num, den, warn=False)
        empty = ~(den > 0)
        new[empty] = cur[idx][empty]  # no sample in reach: keep the current value
        moved = np.max(np.abs(new - cur[idx]) * inv_hy, axis=1)
        return new, (np.max(moved, initial=0.0) if blurring else moved), None

    n_iter, converged = iterate(update, cur, max_iter, tol, whole=blurring)
    return cur, n_iter, bool(converged.all())


def self_local_mean(X: ArrayLike, y: ArrayLike, *, spatial_bandwidth: float | ArrayLike = 1.0,
                    range_bandwidth: float | ArrayLike = 1.0, kernel: str = "gaussian", max_iter: int = 100, tol: float = 1e-4,
                    blurring: bool = False, n_jobs: int | None = None) -> tuple[FloatArray, int]:
    """Functional twin of :class:`SelfLocalMean`: the denoised values at the samples.

    Returns
    -------
    y_denoised : ndarray of the shape of y
    n_iter : int

    Examples
    --------
    >>> import numpy as np
    >>> from localization.denoise import self_local_mean
    >>> x = np.arange(8.0)[:, None]
    >>> y = np.r_[np.zeros(4), np.ones(4)]
    >>> yd, n_iter = self_local_mean(x, y, spatial_bandwidth=2.0, range_bandwidth=0.2)
    >>> np.round(yd, 3).tolist()   # the step survives: each side keeps its own level
    [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    """
    est = SelfLocalMean(spatial_bandwidth=spatial_bandwidth, range_bandwidth=range_bandwidth, kernel=kernel,
                        max_iter=max_iter, tol=tol, blurring=blurring, n_jobs=n_jobs).fit(X, y)
    return est.y_denoised_, est.n_iter_


class SelfLocalMean(MultiOutputMixin, RegressorMixin, BaseEstimator):
    """Self-local mean (generalised bilateral filter) on (X, y) samples, iterated to a fixed point.

    With the self-localization kernel K = K_x(x, x') · K_y(y, y') the map

        ŷᵢ ← Σⱼ K_x(xᵢ, xⱼ) K_y(ŷᵢ, yⱼ) yⱼ / Σⱼ K_x(xᵢ, xⱼ) K_y(ŷᵢ, yⱼ)

    starting from ŷ = y is one bilateral-filter pass; iterating it moves every ŷᵢ uphill on the
    joint density of (x, y) at fixed xᵢ (a mean shift in the value only) until a fixed point:
    the local *mode* of y near xᵢ, so steps and edges are kept while noise is averaged out.
    With ``blurring=True`` the samples themselves are replaced by ŷ after each step (the
    iterated bilateral filter, which flattens the data further at every step).

    ``fit(X, y)`` denoises the training sample (``y_denoised_``). ``predict(X)`` applies the same
    fixed-point iteration at new positions, starting from the position-only local mean
    Σ K_x yⱼ / Σ K_x there (modal regression).

    Parameters
    ----------
    spatial_bandwidth : float or array of shape (n_features,), default=1.0
        h_x, per feature if an array.
    range_bandwidth : float or array of shape (n_outputs,), default=1.0
        h_y, per output if an array.
    kernel : str, default="gaussian"
        ``"gaussian"``: K_x K_y is exactly the product of the two Gaussians (it equals one
        Gaussian on [x/h_x, y/h_y]). Any other profile name of :mod:`localization.kernels` is
        applied to the joint scaled distance √(‖Δx/h_x‖² + ‖Δy/h_y‖²): a joint radial kernel,
        not a product of two profiles (only the Gaussian factorises).
    max_iter : int, default=100
        ``max_iter=1`` is a single bilateral pass.
    tol : float, default=1e-4
        Stop when no ŷᵢ moves by more than ``tol · h_y``.
    blurring : bool, default=False
    n_jobs : int, optional
        Threads; results do not depend on it.

    Attributes
    ----------
    y_denoised_ : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        The fixed point on the training sample.
    n_iter_ : int
        Iterations run by ``fit``.
    converged_ : bool

    Examples
    --------
    >>> import numpy as np
    >>> from localization.denoise import SelfLocalMean
    >>> rng = np.random.default_rng(0)
    >>> x = np.linspace(0, 1, 200)[:, None]
    >>> y = (x[:, 0] > 0.5) + 0.05 * rng.standard_normal(200)
    >>> est = SelfLocalMean(spatial_bandwidth=0.05, range_bandwidth=0.2).fit(x, y)
    >>> bool(np.abs(est.y_denoised_ - (x[:, 0] > 0.5)).max() < 0.05)
    True
    """

    def __init__(
        self, spatial_bandwidth: float | ArrayLike = 1.0, range_bandwidth: float | ArrayLike = 1.0,
        kernel: str = "gaussian", max_iter: int = 100, tol: float = 1e-4, blurring: bool = False,
        n_jobs: int | None = None,
    ) -> None:
        self.spatial_bandwidth = spatial_bandwidth
        self.range_bandwidth = range_bandwidth
        self.kernel = kernel
        self.max_iter = max_iter
        self.tol = tol
        self.blurring = blurring
        self.n_jobs = n_jobs

    _parameter_constraints = {
        "spatial_bandwidth": [POSITIVE, "array-like"],
        "range_bandwidth": [POSITIVE, "array-like"],
        "kernel": [str],
        "max_iter": [COUNT],
        "tol": [NON_NEGATIVE],
        "blurring": ["boolean"],
        "n_jobs": N_JOBS,
    }

    def _params(self, d, p):
        """The bandwidths per feature (a scalar is repeated), checked against the data's widths."""
        if self.kernel.lower() in SPECIAL:
            raise LocalizationError(f"`kernel` must be the name of a radial profile, got {self.kernel!r}", "kernel")
        hx = check_bandwidths(self.spatial_bandwidth, "spatial_bandwidth", d)
        hy = check_bandwidths(self.range_bandwidth, "range_bandwidth", p)
        return hx, hy, self.max_iter, float(self.tol)

    @keeps_state_on_error
    @fit_context
    def fit(self, X: ArrayLike, y: ArrayLike) -> Self:
        """Run the fixed-point iteration on the training sample. Returns self."""
        X, y = validate_data(self, X, y, dtype=FLOAT_DTYPES, order="C", multi_output=True, y_numeric=True)
        y = np.asarray(y, dtype=X.dtype)
        self._y_1d = y.ndim == 1
        Y = np.ascontiguousarray(y.reshape(len(y), -1))
        hx, hy, max_iter, tol = self._params(X.shape[1], Y.shape[1])
        self.X_fit_, self.y_fit_ = X, Y
        out, self.n_iter_, self.converged_ = _fixed_point(X, Y, X, Y, hx, hy, self.kernel, max_iter, tol, bool(self.blurring), self.n_jobs)
        if not self.converged_ and max_iter > 1:
            warnings.warn(f"SelfLocalMean did not converge in {max_iter} iterations; increase `max_iter`", LocalizationWarning, stacklevel=2)
        self.y_denoised_ = out[:, 0] if self._y_1d else out
        return self

    def predict(self, X: ArrayLike) -> FloatArray:
        """Fixed point at new positions, started from the position-only local mean."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=FLOAT_DTYPES, order="C", reset=False)
        X = np.ascontiguousarray(X, dtype=self.X_fit_.dtype)
        hx, hy, max_iter, tol = self._params(X.shape[1], self.y_fit_.shape[1])
        dt = X.dtype
        bx = bind(self.kernel, 1.0, np.ascontiguousarray(self.X_fit_ / hx.astype(dt)))
        sums = bx.sums(np.ascontiguousarray(X / hx.astype(dt)), self.y_fit_, n_jobs=self.n_jobs)
        num, den = sums.num, sums.den
        start = ratio(num, den, what="position-only local mean")
        # References stay the training sample: a mean shift in y at every query position.
        out, _, _ = _fixed_point(self.X_fit_, self.y_fit_, X, start, hx, hy, self.kernel, max_iter, tol, False, self.n_jobs)
        return out[:, 0] if self._y_1d else out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags

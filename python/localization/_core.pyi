# Type stubs of the native module localization._core. Each family keeps its own section.
from typing import Callable, Optional, Sequence, final

import numpy as np
import numpy.typing as npt
from numpy.typing import NDArray
from typing_extensions import Self

# Every name the extension module registers (stubtest checks this list against it).
__all__ = [
    "local_sums", "ready_local_mean", "ready_kernel_sum", "local_polynomial", "equivalent_kernel", "kernel_matrix", "profile_values",
    "log_integral", "profile_info", "effective_n_jobs", "exp_throughput", "masked_knn", "Sums", "KernelSpec", "Reference", "NeighborIndex", "bin_linear",
    "interpolate_grid", "mean_shift_seeds", "mean_shift_grid", "mean_shift_diffuse", "merge_modes",
    "GridCells", "grid_cells", "grid_merge", "grid_centroids", "grid_keys", "MeanShiftWindow", "MeanShiftSeeds", "Shifted", "Diffused",
    "medoid_shift_dense", "medoid_shift_knn", "quickshift_links", "quickshift_density",
    "resolve_forest", "bilateral_filter", "nl_means", "lle_weights", "GroundedInverse", "trimap_triplets",
    "triplet_loss_grad", "triplet_optimize", "softmax_sampled_loss_grad", "softmax_fit_sampled",
    "trustworthiness_penalty", "temporal_forward", "attention_backward", "__version__", "LEAF_SIZE",
    "GEMM_MIN_DIM", "GRID_MAX_FEATURES", "SERIES_TOLERANCE",
]

__version__: str
LEAF_SIZE: int  # kd-tree leaf size of the core's own trees
GEMM_MIN_DIM: int  # from this many features, distance tiles come from a matrix product
GRID_MAX_FEATURES: int  # most features MeanShift's algorithm="grid" takes
SERIES_TOLERANCE: float  # the Gaussian series expansion's error relative to Σ|w|K: default and floor

# --- engine, kernels, neighbours: rust/python/engine.rs, neighbors.rs, reference.rs, ready.rs --

_Array = NDArray[np.floating]
_Progress = Optional[Callable[[int, int], object]]

@final
class KernelSpec:
    """A kernel with its bandwidth, checked once when built: a profile name (or alias), ``"knn"`` (with
    ``n_neighbors`` and an optional ``knn_profile``) or ``"dot"`` (``temperature``, 1 by default); the
    bandwidth ``bandwidth``, or one per query (``query_bandwidth``) or per sample (``sample_bandwidth``,
    which a ``Reference`` holds itself) in the dtype of the call's arrays. Pickles as its arguments."""

    def __new__(
        cls, kernel: str = "gaussian", bandwidth: float = 1.0, *, n_neighbors: Optional[int] = None,
        knn_profile: Optional[str] = None, temperature: Optional[float] = None, query_bandwidth: Optional[_Array] = None,
        sample_bandwidth: Optional[_Array] = None,
    ) -> Self: ...
    def with_query_bandwidth(self, query_bandwidth: _Array) -> KernelSpec:
        """The same kernel with one bandwidth per query (a balloon estimator's)."""
    def with_sample_bandwidth(self, sample_bandwidth: _Array) -> KernelSpec:
        """The same kernel with one bandwidth per sample (a sample-point estimator's)."""
    def __reduce__(self) -> tuple[object, tuple[type[KernelSpec], tuple[str, float], dict[str, object]]]: ...

def local_sums(
    queries: _Array,
    x: _Array | Reference,
    values: Optional[_Array] = None,
    weights: Optional[_Array] = None,
    *,
    kernel: KernelSpec,
    degree: Optional[int] = None,
    exclude_self: bool = False,
    algorithm: str = "auto",
    n_jobs: Optional[int] = None,
    progress: _Progress = None,
    series_tolerance: Optional[float] = None,
) -> Sums:
    """The kernel-weighted sums at the queries; ``progress(done, total)`` receives the queries done.
    ``series_tolerance``: the error the Gaussian expansions (series or grid) may leave (relative to Σ|w|K;
    None: ``SERIES_TOLERANCE``), for callers that certify their answers against it."""

@final
class Sums:
    """Kernel-weighted sums at m queries, each stored divided by exp(log_scale): the true Σ K w is
    ``den · exp(log_scale)``."""

    @property
    def num(self) -> _Array:
        """Σ K w v per query (m × p), divided by exp(log_scale)."""
    @property
    def den(self) -> _Array:
        """Σ K w per query (m), divided by exp(log_scale); 0 where no sample is reached."""
    @property
    def log_scale(self) -> _Array:
        """The per-query scale (m)."""
    @property
    def moments(self) -> Optional[_Array]:
        """The local polynomial design moments (m × D × D), when asked with ``degree``."""
    @property
    def cross(self) -> Optional[_Array]:
        """The cross moments (m × D × p), with ``moments``."""

def ready_local_mean(
    queries: object, x: object, values: object = None, weights: object = None, kernel: str = "gaussian",
    bandwidth: float = 1.0, exclude_self: bool = False, algorithm: str = "auto", n_jobs: Optional[int] = None,
) -> Optional[tuple[_Array, int]]:
    """``local_mean`` on ready input (exact ndarrays of one float dtype, C-contiguous, non-empty, finite;
    usable weights; a named profile with a finite h > 0; an exact algorithm): (mean like ``values``, number
    of queries with zero weight, NaN there). None for any other input (the caller takes its checked path)."""

def ready_kernel_sum(
    queries: object, x: object, values: object = None, weights: object = None, kernel: str = "gaussian",
    bandwidth: float = 1.0, exclude_self: bool = False, algorithm: str = "auto", n_jobs: Optional[int] = None,
) -> Optional[tuple[NDArray[np.float64], Optional[NDArray[np.float64]]]]:
    """``kernel_sum`` on ready input: (total like ``values`` or (m,), log_scale or None where 0 everywhere) in
    float64, the sums being total · exp(log_scale); None for any other input."""

def local_polynomial(
    queries: _Array, x: _Array | Reference, values: Optional[_Array] = None, weights: Optional[_Array] = None, *,
    kernel: KernelSpec, degree: int = 1, ridge: float = 0.0, exclude_self: bool = False, algorithm: str = "auto",
    n_jobs: Optional[int] = None, progress: _Progress = None,
) -> tuple[_Array, NDArray[np.bool_]]:
    """Local polynomial predictions and the singular mask (the kernel's bandwidth: one, or one per query)."""
def equivalent_kernel(
    queries: _Array, x: _Array, *, kernel: KernelSpec, degree: int = 1, ridge: float = 0.0, algorithm: str = "auto",
    n_jobs: Optional[int] = None,
) -> tuple[_Array, NDArray[np.bool_]]: ...
def kernel_matrix(queries: _Array, x: _Array, *, kernel: KernelSpec, n_jobs: Optional[int] = None) -> _Array: ...
def profile_values(kernel: str, u: NDArray[np.float64]) -> NDArray[np.float64]: ...
def bin_linear(
    x: _Array, lo: Sequence[float], delta: Sequence[float], sizes: Sequence[int], weights: Optional[_Array] = None,
    values: Optional[_Array] = None, n_jobs: Optional[int] = None,
) -> NDArray[np.float64]: ...
def interpolate_grid(
    sums: NDArray[np.float64], queries: _Array, lo: Sequence[float], delta: Sequence[float], sizes: Sequence[int],
    n_jobs: Optional[int] = None,
) -> NDArray[np.float64]: ...
def log_integral(kernel: str, d: int) -> float: ...
def profile_info(kernel: str) -> tuple[str, Optional[float]]: ...
def effective_n_jobs(n_jobs: Optional[int] = None) -> int: ...
def exp_throughput(dtype: str = "float64", count: int = ...) -> float:
    """Exponentials per second on one core through the engine's vectorised exp (the pair loop's ceiling)."""
def masked_knn(
    queries: _Array, x: _Array, k: int, exclude: Optional[NDArray[np.int64]] = None, n_jobs: Optional[int] = None,
    progress: _Progress = None,
) -> tuple[_Array, NDArray[np.int64]]: ...

@final
class Reference:
    """Samples (with values, weights, per-sample bandwidths) checked once (NaN and infinity are
    refused) and copied; ``local_sums`` and ``local_polynomial`` accept it as ``x`` and reuse the
    layouts the engine builds from it. Built without values, it takes them per ``local_sums``
    call (the same sums as a Reference built with them)."""

    def __new__(
        cls, x: _Array, values: Optional[_Array] = None, weights: Optional[_Array] = None,
        sample_bandwidth: Optional[_Array] = None,
    ) -> Self: ...
    @property
    def n_samples(self) -> int: ...
    @property
    def n_features(self) -> int: ...
    def __reduce__(self) -> tuple[type[Reference], tuple[_Array, Optional[_Array], Optional[_Array], Optional[_Array]]]: ...

@final
class NeighborIndex:
    def __new__(
        cls, x: _Array, algorithm: str = "auto", leaf_size: int = 30) -> Self: ...
    def knn(
        self, queries: _Array, k: int, n_jobs: Optional[int] = None, progress: _Progress = None
    ) -> tuple[_Array, NDArray[np.int64]]: ...
    def radius(
        self, queries: _Array, r: float | NDArray[np.float64], n_jobs: Optional[int] = None,
        progress: _Progress = None,
    ) -> tuple[_Array, NDArray[np.int64], NDArray[np.int64]]:
        """(distances, indices, row offsets) of the rows within r (a number, or one per query; +inf allowed)."""

# --- mode seeking (MeanShift): rust/python/cluster.rs ---------------------------------


def mean_shift_seeds(
    x: NDArray[np.floating],
    seeds: NDArray[np.floating],
    weights: Optional[NDArray[np.floating]] = None,
    kernel: str = "flat",
    bandwidth: float = 1.0,
    step: float = 1.0,
    tol: float = 1e-3,
    max_iter: int = 300,
    trajectories: bool = False,
    n_jobs: Optional[int] = None,
    progress: _Progress = None,
) -> Shifted:
    """Shift each seed to its mode with exact kernel sums."""

def mean_shift_grid(
    x: NDArray[np.floating],
    seeds: Optional[NDArray[np.floating]] = None,
    weights: Optional[NDArray[np.floating]] = None,
    bandwidth: float = 1.0,
    grid_resolution: int = 4,
    step: float = 1.0,
    tol: float = 1e-3,
    max_iter: int = 300,
    trajectories: bool = False,
    n_jobs: Optional[int] = None,
    progress: _Progress = None,
) -> Shifted:
    """As mean_shift_seeds on the grid's weighted cell centroids; given no seeds, the cells' centroids are the seeds
    (with each point's seed)."""

@final
class Shifted:
    """Where each seed's climb ended."""

    @property
    def modes(self) -> NDArray[np.floating]:
        """The end point of each seed (n_seeds × d)."""
    @property
    def support(self) -> NDArray[np.float64]:
        """The total weight Σ K w in each end point's window (float64)."""
    @property
    def n_iter(self) -> NDArray[np.int64]:
        """The iterations each seed took (int64)."""
    @property
    def converged(self) -> NDArray[np.bool_]:
        """Whether each seed stopped by the tolerance rather than `max_iter`."""
    @property
    def valid(self) -> NDArray[np.bool_]:
        """Whether each seed's window ever held data (a seed in an empty window stays and is invalid)."""
    @property
    def trajectories(self) -> Optional[list[NDArray[np.floating]]]:
        """Each seed's path (iterations + 1 positions), when asked with `trajectories=True`."""
    @property
    def point_seed(self) -> Optional[NDArray[np.int64]]:
        """The seed of each data point (int64), for a grid run given no seeds."""
    @property
    def seeds(self) -> Optional[NDArray[np.floating]]:
        """The seeds a grid run given none made: the occupied cells' weighted centroids."""

@final
class GridCells:
    """Occupied cells of a grid over part of the data with their sums (Σw, Σwx and, when some
    cell weighs nothing, the count and Σx), checked for consistent lengths when built;
    ``grid_merge`` merges them and they pickle as their arrays."""

    def __new__(
        cls, keys: NDArray[np.uint64], weight: NDArray[np.float64], sum: NDArray[np.float64],
        count: Optional[NDArray[np.float64]] = None, plain: Optional[NDArray[np.float64]] = None,
    ) -> Self: ...
    @property
    def n_cells(self) -> int: ...
    @property
    def keys(self) -> NDArray[np.uint64]: ...
    def __reduce__(
        self,
    ) -> tuple[type[GridCells], tuple[NDArray[np.uint64], NDArray[np.float64], NDArray[np.float64], Optional[NDArray[np.float64]], Optional[NDArray[np.float64]]]]: ...

def grid_cells(
    x: NDArray[np.floating],
    lo: list[float],
    hi: list[float],
    weights: Optional[NDArray[np.floating]] = None,
    bandwidth: float = 1.0,
    grid_resolution: int = 4,
    n_jobs: Optional[int] = None,
) -> GridCells:
    """Occupied grid cells of x in order of first appearance."""

def grid_merge(parts: list[GridCells]) -> GridCells:
    """GridCells of consecutive parts of the data merged (first appearance, sums in part order)."""

def grid_centroids(cells: GridCells) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(weighted centroids, weights) of grid cells."""

def grid_keys(
    x: NDArray[np.floating],
    lo: list[float],
    hi: list[float],
    bandwidth: float = 1.0,
    grid_resolution: int = 4,
    n_jobs: Optional[int] = None,
) -> NDArray[np.uint64]: ...

@final
class MeanShiftWindow:
    """MeanShift windows over (x, weights), prepared once; pickles as its arguments."""

    def __new__(
        cls,
        x: NDArray[np.floating],
        weights: Optional[NDArray[np.floating]] = None,
        kernel: str = "flat",
        bandwidth: float = 1.0,
        n_jobs: Optional[int] = None,
    ) -> Self: ...
    def sums(
        self, positions: NDArray[np.floating], n_jobs: Optional[int] = None
    ) -> Sums:
        """The sums (num = Σ K w x, den = Σ K w, log_scale), float64, of the windows at the positions."""

@final
class MeanShiftSeeds:
    """Seeds climbing in rounds driven by the caller's (merged) window sums."""

    n_active: int
    iteration: int
    def __new__(
        cls,
        seeds: NDArray[np.floating],
        kernel: str = "flat",
        bandwidth: float = 1.0,
        step: float = 1.0,
        tol: float = 1e-3,
        max_iter: int = 300,
        trajectories: bool = False,
    ) -> Self: ...
    def positions(self) -> NDArray[np.floating]: ...
    def advance(self, num: NDArray[np.float64], den: NDArray[np.float64], log_scale: NDArray[np.float64]) -> None: ...
    def result(self) -> Shifted:
        """End the run: where each seed ended."""

def mean_shift_diffuse(
    x: NDArray[np.floating],
    weights: Optional[NDArray[np.floating]] = None,
    kernel: str = "flat",
    bandwidth: float = 1.0,
    step: float = 1.0,
    tol: float = 1e-3,
    max_iter: int = 300,
    blurring: bool = True,
    history: bool = False,
    n_jobs: Optional[int] = None,
    progress: _Progress = None,
) -> Diffused:
    """Blurring mean shift (blurring=True) or fixed-kernel diffusion (blurring=False)."""

@final
class Diffused:
    """Where a blurring or fixed-kernel run moved the data set."""

    @property
    def positions(self) -> NDArray[np.floating]:
        """The final position of every data point (n × d)."""
    @property
    def support(self) -> NDArray[np.float64]:
        """The total weight Σ K w in each final position's window (float64)."""
    @property
    def n_iter(self) -> int:
        """The iterations the run took (all points move together)."""
    @property
    def converged(self) -> bool:
        """Whether the run stopped by the tolerance rather than `max_iter`."""
    @property
    def history(self) -> Optional[list[NDArray[np.floating]]]:
        """The positions after each iteration, when asked with `history=True`."""

def merge_modes(
    centres: NDArray[np.floating], support: NDArray[np.float64], valid: NDArray[np.bool_], radius: float
) -> NDArray[np.int64]:
    """Indices of the kept centres after scikit-learn's greedy merge, strongest first."""

# ---- modes: MedoidShift, QuickShift (rust/python/modes.rs) ----

def medoid_shift_dense(
    d: npt.NDArray[np.floating],
    kernel: str = "gaussian",
    bandwidth: float = 1.0,
    weights: Optional[npt.NDArray[np.float64]] = None,
    n_jobs: Optional[int] = None, progress: _Progress = None,
) -> npt.NDArray[np.int64]:
    """next(i) = argmin_j Σ_k K(D[i,k]/h)·D[j,k]² for a square distance matrix (O(N³), one extra N×N)."""

def medoid_shift_knn(
    x: npt.NDArray[np.floating],
    indices: npt.NDArray[np.int64],
    distances: Optional[npt.NDArray[np.floating]] = None,
    precomputed: bool = False,
    kernel: str = "gaussian",
    bandwidth: float = 1.0,
    weights: Optional[npt.NDArray[np.float64]] = None,
    n_jobs: Optional[int] = None, progress: _Progress = None,
) -> npt.NDArray[np.int64]:
    """kNN-sparse MedoidShift step: sum and candidates restricted to each row of `indices`."""

def quickshift_links(
    x: npt.NDArray[np.floating],
    log_density: npt.NDArray[np.float64],
    max_dist: float,
    window_features: Optional[list[int]] = None,
    window: Optional[float] = None,
    n_jobs: Optional[int] = None, progress: _Progress = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.floating]]:
    """(parent, distance) of the nearest sample of higher density within max_dist (+inf: none),
    optionally within the box |x_jk − x_ik| ≤ window on the window features."""

def quickshift_density(
    x: npt.NDArray[np.floating],
    window_features: list[int],
    window: float,
    kernel: str = "gaussian",
    bandwidth: float = 1.0,
    weights: Optional[npt.NDArray[np.float64]] = None,
    n_jobs: Optional[int] = None, progress: _Progress = None,
) -> npt.NDArray[np.float64]:
    """Σ over the box window of i of w_j k(‖x_i − x_j‖/h) (QuickShift's windowed density)."""

def resolve_forest(next: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Break cycles at their smallest index; returns (forest parent map, root of every node)."""

# ---- denoise (rust/python/denoise.rs) --------------------------------------------------------

def bilateral_filter(
    padded: NDArray[np.floating],
    spatial: NDArray[np.floating],
    range_bandwidth: float = 1.0,
    color_lut: NDArray[np.floating] | None = None,
    lut_scale: float = 1.0,
    n_jobs: int | None = None, progress: _Progress = None,
) -> NDArray[np.floating]:
    """Bilateral filter of a planar (channels, rows+2r, cols+2r) padded image; returns (rows, cols, channels)."""

def nl_means(
    padded: NDArray[np.floating],
    patch_weights: NDArray[np.floating],
    patch_distance: int,
    var2: float = 0.0,
    exact: bool = False,
    n_jobs: int | None = None, progress: _Progress = None,
) -> NDArray[np.floating]:
    """Non-local means of a planar (channels, rows+s-1, cols+s-1) padded image; returns (rows, cols, channels)."""

# ---- embedding (rust/python/embedding.rs) ----------------------------------------------------

def lle_weights(
    x: npt.NDArray[np.floating],
    n_neighbors: int,
    reg: float = 1e-3,
    queries: Optional[npt.NDArray[np.floating]] = None,
    algorithm: str = "auto",
    n_jobs: Optional[int] = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """(neighbour indices m×k, barycentric weights m×k, rows summing to 1); queries=None: the
    samples, each leaving itself out."""

@final
class GroundedInverse:
    """M⁺ for LLE's M = (I − W)ᵀ(I − W), from one sparse LU of the grounded I − W; raises
    LocalizationError (n_neighbors) when the neighbour graph is disconnected."""

    def __new__(cls, neighbors: npt.NDArray[np.int64], weights: npt.NDArray[np.float64]) -> Self: ...
    def apply(self, b: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """M⁺b for a vector (n) or each column of a matrix (n × c); b must be C-contiguous."""

def trimap_triplets(
    x: npt.NDArray[np.floating],
    neighbors: npt.NDArray[np.int64],
    distances: npt.NDArray[np.floating],
    n_inliers: int = 12,
    n_outliers: int = 4,
    n_random: int = 3,
    weight_temp: float = 0.5,
    random_weight: float = 0.1,
    seed: int = 0,
    n_jobs: Optional[int] = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """TriMap's triplets (T×3: anchor, near, far) and weights from neighbour lists (self first)."""

def triplet_loss_grad(
    y: npt.NDArray[np.float64],
    triplets: npt.NDArray[np.int64],
    weights: npt.NDArray[np.float64],
    loss: str = "trimap",
    alpha: float = 1.0,
    n_jobs: Optional[int] = None,
) -> tuple[float, npt.NDArray[np.float64]]:
    """Σ w ℓ(d²_ij, d²_ik) ('trimap', 'linear', 'ste', 'tste') and its gradient in y."""

def triplet_optimize(
    y0: npt.NDArray[np.float64],
    triplets: npt.NDArray[np.int64],
    weights: npt.NDArray[np.float64],
    loss: str = "trimap",
    alpha: float = 1.0,
    learning_rate: float = 0.05,
    n_iter: int = 400,
    n_jobs: Optional[int] = None,
    progress: Optional[Callable[[int, int], object]] = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """TriMap's optimiser from y0: (embedding, mean loss per triplet at every iteration)."""

def softmax_sampled_loss_grad(
    z1: npt.NDArray[np.float64],
    z2: npt.NDArray[np.float64],
    indptr: npt.NDArray[np.int64],
    indices: npt.NDArray[np.int64],
    data: npt.NDArray[np.float64],
    row_weight: npt.NDArray[np.float64],
    proposal: npt.NDArray[np.float64],
    n_negative: int = 20,
    seed: int = 0,
    stage: int = 0,
    n_jobs: Optional[int] = None,
) -> tuple[float, npt.NDArray[np.float64]]:
    """Sampled Σ_i w_i KL(P_i ‖ softmax(z1_i·Z2ᵀ)) and its gradient [∂Z1 | ∂Z2] (n × 2q)."""

def softmax_fit_sampled(
    z1: npt.NDArray[np.float64],
    z2: npt.NDArray[np.float64],
    indptr: npt.NDArray[np.int64],
    indices: npt.NDArray[np.int64],
    data: npt.NDArray[np.float64],
    row_weight: npt.NDArray[np.float64],
    proposal: npt.NDArray[np.float64],
    n_negative: int = 20,
    seed: int = 0,
    learning_rate: float = 0.05,
    n_iter: int = 200,
    n_jobs: Optional[int] = None,
    progress: Optional[Callable[[int, int], object]] = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Adam on the sampled softmax loss: (Z1, Z2, loss at every iteration)."""

def trustworthiness_penalty(
    x: npt.NDArray[np.floating],
    anchors: npt.NDArray[np.int64],
    embedded_neighbors: npt.NDArray[np.int64],
    n_jobs: Optional[int] = None,
) -> int:
    """Σ over anchors i and their embedded neighbours j of max(rank_ij − k, 0), ranks in x."""
# ---- sequence: temporal kernels, attention (rust/python/sequence.rs) -------------------------

def temporal_forward(
    q: NDArray[np.floating],
    k: NDArray[np.floating],
    v: NDArray[np.floating],
    kernel: str = "dot",
    scale: float = 1.0,
    bandwidth: float = 1.0,
    causal: bool = False,
    window: int | None = None,
    decay: NDArray[np.float64] | None = None,
    exclude_self: bool = False,
    mask: NDArray[np.bool_] | None = None,
    mask_slab: NDArray[np.int64] | None = None,
    n_jobs: int | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> tuple[NDArray[np.floating], NDArray[np.floating]]:
    """Temporal local means of B sequences (B, T, d) / (B, T, p): (out B×T×p, lse B×T = log Σ_s K)."""

def attention_backward(
    q: NDArray[np.floating],
    k: NDArray[np.floating],
    v: NDArray[np.floating],
    out: NDArray[np.floating],
    lse: NDArray[np.floating],
    grad_output: NDArray[np.floating],
    scale: float = 1.0,
    causal: bool = False,
    window: int | None = None,
    decay: NDArray[np.float64] | None = None,
    exclude_self: bool = False,
    mask: NDArray[np.bool_] | None = None,
    mask_slab: NDArray[np.int64] | None = None,
    n_jobs: int | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> tuple[NDArray[np.floating], NDArray[np.floating], NDArray[np.floating], Optional[NDArray[np.float64]]]:
    """(dQ, dK, dV, d_decay per sequence | None) of the dot-product forward pass from ∂loss/∂out."""

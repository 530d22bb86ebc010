# Type stubs of the native module localization._core. Each family keeps its own section.
from typing import Callable, Optional

import numpy as np
import numpy.typing as npt
from numpy.typing import NDArray

__version__: str

# --- engine, kernels, neighbours: rust/python/mod.rs -----------------------------------

Array = NDArray[np.floating]

def local_sums(
    queries: Array,
    x: Array,
    values: Optional[Array] = None,
    weights: Optional[Array] = None,
    kernel: str = "gaussian",
    bandwidth: float = 1.0,
    query_bandwidth: Optional[Array] = None,
    sample_bandwidth: Optional[Array] = None,
    n_neighbors: Optional[int] = None,
    knn_profile: Optional[str] = None,
    temperature: Optional[float] = None,
    degree: Optional[int] = None,
    exclude_self: bool = False,
    algorithm: str = "auto",
    n_jobs: Optional[int] = None,
) -> tuple[Array, Array, Array, Optional[Array], Optional[Array]]:
    """(num m×p, den m, log_scale m, moments m×D×D | None, cross m×D×p | None); true sums are × exp(log_scale)."""

def local_polynomial(
    queries: Array, x: Array, values: Array, weights: Optional[Array] = None, kernel: str = "gaussian",
    bandwidth: float = 1.0, query_bandwidth: Optional[Array] = None, n_neighbors: Optional[int] = None,
    knn_profile: Optional[str] = None, degree: int = 1, ridge: float = 0.0, algorithm: str = "auto",
    n_jobs: Optional[int] = None,
) -> tuple[Array, NDArray[np.bool_]]: ...
def equivalent_kernel(
    queries: Array, x: Array, kernel: str = "gaussian", bandwidth: float = 1.0, query_bandwidth: Optional[Array] = None,
    n_neighbors: Optional[int] = None, knn_profile: Optional[str] = None, degree: int = 1, ridge: float = 0.0,
    algorithm: str = "auto", n_jobs: Optional[int] = None,
) -> tuple[Array, NDArray[np.bool_]]: ...
def kernel_matrix(
    queries: Array, x: Array, kernel: str = "gaussian", bandwidth: float = 1.0, query_bandwidth: Optional[Array] = None,
    sample_bandwidth: Optional[Array] = None, n_neighbors: Optional[int] = None, knn_profile: Optional[str] = None,
    temperature: Optional[float] = None, n_jobs: Optional[int] = None,
) -> Array: ...
def profile_values(kernel: str, u: NDArray[np.float64]) -> NDArray[np.float64]: ...
def log_integral(kernel: str, d: int) -> float: ...
def profile_info(kernel: str) -> tuple[str, Optional[float]]: ...
def effective_n_jobs(n_jobs: Optional[int] = None) -> int: ...

class NeighborIndex:
    def __init__(self, x: Array, algorithm: str = "auto", leaf_size: int = 30) -> None: ...
    def knn(self, queries: Array, k: int, n_jobs: Optional[int] = None) -> tuple[Array, NDArray[np.int64]]: ...
    def radius(
        self, queries: Array, r: float | NDArray[np.float64], n_jobs: Optional[int] = None
    ) -> tuple[Array, NDArray[np.int64], NDArray[np.int64]]:
        """(distances, indices, row offsets) of the rows within r (a number, or one per query; +inf allowed)."""

# --- mode seeking (MeanShift): rust/python/cluster.rs ---------------------------------

Progress = Optional[Callable[[int, int], object]]

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
    progress: Progress = None,
) -> tuple[
    NDArray[np.floating], NDArray[np.float64], NDArray[np.int64], NDArray[np.bool_], NDArray[np.bool_],
    Optional[list[NDArray[np.floating]]],
]:
    """(modes, support, n_iter, converged, valid, trajectories|None) of each seed."""

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
    progress: Progress = None,
) -> tuple[
    NDArray[np.floating], NDArray[np.float64], NDArray[np.int64], NDArray[np.bool_], NDArray[np.bool_],
    Optional[list[NDArray[np.floating]]], Optional[NDArray[np.int64]], Optional[NDArray[np.floating]],
]:
    """As mean_shift_seeds on the grid's weighted cell centroids, plus (point → cell, cell seeds) when seeds is None."""

Cells = tuple[
    NDArray[np.uint64], NDArray[np.float64], NDArray[np.float64], Optional[NDArray[np.float64]], Optional[NDArray[np.float64]]
]

def grid_cells(
    x: NDArray[np.floating],
    lo: list[float],
    hi: list[float],
    weights: Optional[NDArray[np.floating]] = None,
    bandwidth: float = 1.0,
    grid_resolution: int = 4,
    n_jobs: Optional[int] = None,
) -> Cells:
    """Occupied grid cells of x in order of first appearance: (keys, Σw, Σwx, count|None, Σx|None)."""

def grid_merge(parts: list[Cells]) -> Cells:
    """Cells of consecutive parts of the data merged (first appearance, sums in part order)."""

def grid_centroids(cells: Cells) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(weighted centroids, weights) of grid cells."""

def grid_keys(
    x: NDArray[np.floating],
    lo: list[float],
    hi: list[float],
    bandwidth: float = 1.0,
    grid_resolution: int = 4,
    n_jobs: Optional[int] = None,
) -> NDArray[np.uint64]: ...

class MeanShiftWindow:
    """MeanShift windows over (x, weights), prepared once; pickles as its arguments."""

    def __init__(
        self,
        x: NDArray[np.floating],
        weights: Optional[NDArray[np.floating]] = None,
        kernel: str = "flat",
        bandwidth: float = 1.0,
        n_jobs: Optional[int] = None,
    ) -> None: ...
    def sums(
        self, positions: NDArray[np.floating], n_jobs: Optional[int] = None
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """(Σ K w x, Σ K w, log_scale) of the windows at the positions, stored divided by exp(log_scale)."""

class MeanShiftSeeds:
    """Seeds climbing in rounds driven by the caller's (merged) window sums."""

    n_active: int
    iteration: int
    def __init__(
        self,
        seeds: NDArray[np.floating],
        kernel: str = "flat",
        bandwidth: float = 1.0,
        step: float = 1.0,
        tol: float = 1e-3,
        max_iter: int = 300,
        trajectories: bool = False,
    ) -> None: ...
    def positions(self) -> NDArray[np.floating]: ...
    def advance(self, num: NDArray[np.float64], den: NDArray[np.float64], log_scale: NDArray[np.float64]) -> None: ...
    def result(
        self,
    ) -> tuple[
        NDArray[np.floating], NDArray[np.float64], NDArray[np.int64], NDArray[np.bool_], NDArray[np.bool_],
        Optional[list[NDArray[np.floating]]],
    ]: ...

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
    progress: Progress = None,
) -> tuple[NDArray[np.floating], NDArray[np.float64], int, bool, Optional[list[NDArray[np.floating]]]]:
    """Blurring mean shift (blurring=True) or fixed-kernel diffusion: (positions, support, n_iter, converged, history|None)."""

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
    n_jobs: Optional[int] = None,
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
    n_jobs: Optional[int] = None,
) -> npt.NDArray[np.int64]:
    """kNN-sparse MedoidShift step: sum and candidates restricted to each row of `indices`."""

def quickshift_links(
    x: npt.NDArray[np.floating],
    log_density: npt.NDArray[np.float64],
    max_dist: float,
    window_features: Optional[list[int]] = None,
    window: Optional[float] = None,
    n_jobs: Optional[int] = None,
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
    n_jobs: Optional[int] = None,
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
    n_jobs: int | None = None,
) -> NDArray[np.floating]:
    """Bilateral filter of a planar (channels, rows+2r, cols+2r) padded image; returns (rows, cols, channels)."""

def nl_means(
    padded: NDArray[np.floating],
    patch_weights: NDArray[np.floating],
    patch_distance: int,
    var2: float = 0.0,
    exact: bool = False,
    n_jobs: int | None = None,
) -> NDArray[np.floating]:
    """Non-local means of a planar (channels, rows+s-1, cols+s-1) padded image; returns (rows, cols, channels)."""

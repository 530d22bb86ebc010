# Type stubs of the native module. Each family keeps its own section.
from typing import Callable, Optional

import numpy as np
from numpy.typing import NDArray

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

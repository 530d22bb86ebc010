# Type stubs of the native module localization._core.
# (Each method family keeps its own section; the lead merges them.)

from typing import Optional

import numpy as np
import numpy.typing as npt

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
    x: npt.NDArray[np.floating], log_density: npt.NDArray[np.float64], max_dist: float, n_jobs: Optional[int] = None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.floating]]:
    """(parent, distance) of the nearest sample of higher density within max_dist (+inf: none)."""

def resolve_forest(next: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Break cycles at their smallest index; returns (forest parent map, root of every node)."""

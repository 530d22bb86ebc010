# Type stubs of the native module. One section per family; the lead merges the sections.

import numpy as np
from numpy.typing import NDArray

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

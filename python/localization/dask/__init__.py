"""Local means, density, neighbours and MeanShift on Dask arrays, equal to the single-machine results.

An optional extra: ``pip install 'localization-methods[dask]'``. Every worker needs the
package installed (its native extension does the work inside each task).
"""

try:
    import dask  # noqa: F401
    import dask.array  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("localization.dask needs Dask: pip install 'localization-methods[dask]'") from e

from ._estimators import KernelDensity, LocalMeanRegressor, NearestNeighbors
from ._local import kernel_sum, local_mean
from ._mean_shift import MeanShift, estimate_bandwidth
from ._wrap import PostFit

__all__ = [
    "KernelDensity",
    "LocalMeanRegressor",
    "MeanShift",
    "NearestNeighbors",
    "PostFit",
    "estimate_bandwidth",
    "kernel_sum",
    "local_mean",
]

"""Mode seeking and clustering by local means: one family, one import path.

* :class:`MeanShift` (and :func:`mean_shift`, :func:`estimate_bandwidth`,
  :func:`get_bin_seeds`): seeds climb the kernel density by the iterated self-local mean.
* :class:`MedoidShift`, :class:`QuickShift`: forests on the sample, one pass of the engine.
* :class:`PCShift` (:func:`pc_shift`, :func:`pc_shift_step`): subspace-constrained mean
  shift onto density ridges.
* :class:`LocalModeClustering`: the iterated hard local mode of the labels.

``localization.modes`` and ``localization.semi_supervised`` re-export the estimators that
used to live there.
"""

from ._local_mode import LocalModeClustering
from ._mean_shift import MeanShift, estimate_bandwidth, get_bin_seeds, mean_shift
from ._modes import MedoidShift, PCShift, QuickShift, medoid_shift, pc_shift, pc_shift_step, quick_shift

__all__ = [
    "LocalModeClustering",
    "MeanShift",
    "MedoidShift",
    "PCShift",
    "QuickShift",
    "estimate_bandwidth",
    "get_bin_seeds",
    "mean_shift",
    "medoid_shift",
    "pc_shift",
    "pc_shift_step",
    "quick_shift",
]

"""Type aliases of the public API's annotations: one home, imported under ``TYPE_CHECKING``.

Arrays come in as anything NumPy converts (:data:`numpy.typing.ArrayLike`) and go out as
float32/float64 ndarrays (float32 input stays float32, anything else becomes float64).
Nothing here runs at import time beyond the aliases: ``typing_extensions`` is needed only
by type checkers (which ship it), not by the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, TypeVar, Union

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

if TYPE_CHECKING:
    from typing_extensions import Self, TypeAlias

    from .kernels import Balloon, Kernel, KernelCombination, SamplePoint

#: A float32 or float64 ndarray.
FloatArray: TypeAlias = NDArray[np.floating[Any]]
#: Indices or labels: an int64 ndarray.
IntArray: TypeAlias = NDArray[np.int64]
#: A kernel: a profile name, a :class:`~localization.Kernel`, a combination, or a callable.
KernelLike: TypeAlias = Union[str, "Kernel", "KernelCombination", Callable[..., Any]]
#: A bandwidth: a number, one per feature or per sample, a rule name, or an adaptive rule.
BandwidthLike: TypeAlias = Union[float, ArrayLike, str, "Balloon", "SamplePoint"]
#: A random state as scikit-learn takes it.
SeedLike: TypeAlias = Union[int, np.random.RandomState, np.random.Generator, None]
#: Any callable, for decorators that keep the signature of what they decorate.
F = TypeVar("F", bound=Callable[..., Any])
#: An estimator a helper returns after updating it.
E = TypeVar("E")

__all__ = [
    "ArrayLike", "BandwidthLike", "DTypeLike", "E", "F", "FloatArray", "IntArray", "KernelLike", "NDArray", "SeedLike", "Self",
]

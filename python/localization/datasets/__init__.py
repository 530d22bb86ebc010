"""Built-in data: synthetic generators and small real subsets shipped with the package."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from sklearn.utils import check_random_state

if TYPE_CHECKING:
    from .._typing import FloatArray, SeedLike


def make_curve(n_samples: int = 200, noise: float = 0.25, random_state: SeedLike = 0) -> tuple[FloatArray, FloatArray]:
    """The 1-D regression curve of experiment 1.

    x ~ Uniform(0, 1), y = sin(2πx) + 0.5x + Gaussian noise. Returns (X of shape (n, 1), y).

    Examples
    --------
    >>> from localization.datasets import make_curve
    >>> X, y = make_curve(10)
    >>> X.shape, y.shape
    ((10, 1), (10,))
    """
    rng = check_random_state(random_state)
    x = np.sort(rng.uniform(0.0, 1.0, n_samples))
    y = np.sin(2 * np.pi * x) + 0.5 * x + noise * rng.standard_normal(n_samples)
    return x[:, None], y


from ._real import FASHION_MNIST_CLASSES, data_home, load_fashion_mnist, load_oliver_twist  # noqa: E402

__all__ = ["FASHION_MNIST_CLASSES", "data_home", "load_fashion_mnist", "load_oliver_twist", "make_curve"]

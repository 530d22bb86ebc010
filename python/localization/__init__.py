"""localization: the localization method as one fast engine.

Most learning methods are one operation, the local mean

    m(x*) = Σᵢ K(x*, xᵢ) vᵢ / Σᵢ K(x*, xᵢ)

under a localization kernel K (C. Song, "The General Theory of Localization Methods").
This package computes it with a multithreaded native engine and builds the methods on it.
"""

from . import _threads  # noqa: F401  (registers the thread pool with threadpoolctl)
from . import cluster, datasets, denoise, embedding, fuzzy, generative, kernels, memory, semi_supervised
from ._core import __version__
from ._sums import LocalSums
from ._validation import LocalizationWarning
from .classification import LocalModeClassifier
from .cluster import LocalModeClustering, MeanShift, MedoidShift, PCShift, QuickShift, estimate_bandwidth, mean_shift
from .denoise import NonLocalMeans, SelfLocalMean
from .density import KernelDensity
from .embedding import LocalPCA
from .fuzzy import FuzzyInferenceRegressor
from .generative import LocalMeanDenoiser, LocalMeanDiffusion
from .memory import Hopfield, ModernHopfield
from .engine import kernel_matrix, kernel_sum, local_mean
from .kernels import Balloon, Kernel, KernelCombination, SamplePoint
from .neighbors import NearestNeighbors
from .regression import LocalMeanRegressor, LocalModel, LocalPolynomialRegressor
from .semi_supervised import LabelPropagation

__all__ = [
    "Balloon",
    "FuzzyInferenceRegressor",
    "Hopfield",
    "Kernel",
    "KernelCombination",
    "KernelDensity",
    "LabelPropagation",
    "LocalMeanDenoiser",
    "LocalMeanDiffusion",
    "LocalMeanRegressor",
    "LocalModeClassifier",
    "LocalModeClustering",
    "LocalModel",
    "LocalPCA",
    "LocalPolynomialRegressor",
    "LocalSums",
    "LocalizationWarning",
    "MeanShift",
    "MedoidShift",
    "ModernHopfield",
    "NearestNeighbors",
    "NonLocalMeans",
    "PCShift",
    "QuickShift",
    "SamplePoint",
    "SelfLocalMean",
    "cluster",
    "datasets",
    "denoise",
    "embedding",
    "estimate_bandwidth",
    "fuzzy",
    "generative",
    "kernel_matrix",
    "kernel_sum",
    "kernels",
    "local_mean",
    "mean_shift",
    "memory",
    "semi_supervised",
    "__version__",
]

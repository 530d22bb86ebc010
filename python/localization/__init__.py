"""localization: the localization method as one fast engine.

Most learning methods are one operation, the local mean

    m(x*) = Σᵢ K(x*, xᵢ) vᵢ / Σᵢ K(x*, xᵢ)

under a localization kernel K (C. Song, "The General Theory of Localization Methods").
This package computes it with a multithreaded native engine and builds the methods on it.
"""

from . import kernels
from ._core import __version__
from ._validation import LocalizationWarning
from .classification import LocalModeClassifier
from .cluster import MeanShift, estimate_bandwidth, mean_shift
from .denoise import NonLocalMeans, SelfLocalMean
from .density import KernelDensity
from .engine import kernel_matrix, kernel_sum, local_mean
from .kernels import Balloon, Kernel, SamplePoint
from .neighbors import NearestNeighbors
from .regression import LocalMeanRegressor, LocalModel, LocalPolynomialRegressor
from .semi_supervised import LabelPropagation

__all__ = [
    "Balloon",
    "FuzzyInferenceRegressor",
    "Hopfield",
    "LabelPropagation",
    "LocalMeanDenoiser",
    "LocalMeanDiffusion",
    "LocalModeClustering",
    "LocalPCA",
    "MeanShift",
    "MedoidShift",
    "ModernHopfield",
    "NonLocalMeans",
    "SelfLocalMean",
    "denoise",
    "PCShift",
    "QuickShift",
    "cluster",
    "datasets",
    "embedding",
    "estimate_bandwidth",
    "fuzzy",
    "generative",
    "mean_shift",
    "memory",
    "semi_supervised",
    "Kernel",
    "KernelDensity",
    "LocalMeanRegressor",
    "LocalModeClassifier",
    "LocalModel",
    "LocalPolynomialRegressor",
    "LocalizationWarning",
    "MeanShift",
    "NearestNeighbors",
    "SamplePoint",
    "__version__",
    "estimate_bandwidth",
    "kernel_matrix",
    "kernel_sum",
    "kernels",
    "local_mean",
    "mean_shift",
]

"""localization: the localization method as one fast engine.

Most learning methods are one operation, the local mean

    m(x*) = Σᵢ K(x*, xᵢ) vᵢ / Σᵢ K(x*, xᵢ)

under a localization kernel K (C. Song, "The General Theory of Localization Methods").
This package computes it with a multithreaded native engine and builds the methods on it.
"""

from . import _threads  # noqa: F401  (registers the thread pool with threadpoolctl)
from . import adaptive, cluster, datasets, denoise, embedding, fuzzy, generative, kernels, memory, metrics, semi_supervised, sequence, text
from ._core import __version__
from ._sums import LocalSums
from ._validation import LocalizationError, LocalizationTypeError, LocalizationWarning
from .adaptive import MultiKernel
from .classification import LocalModeClassifier
from .cluster import LocalModeClustering, MeanShift, MedoidShift, PCShift, QuickShift, estimate_bandwidth, mean_shift
from .denoise import NonLocalMeans, SelfLocalMean
from .density import KernelDensity
from .embedding import AsymmetricMDS, LocalPCA, LocallyLinearEmbedding, OrdinalEmbedding, TripletEmbedding
from .fuzzy import FuzzyInferenceRegressor
from .generative import LocalMeanDenoiser, LocalMeanDiffusion
from .impute import LocalMeanImputer
from .memory import Hopfield, ModernHopfield
from .metric_learning import MetricLearningRegressor
from .engine import kernel_matrix, kernel_sum, local_mean
from .kernels import Balloon, Kernel, KernelCombination, SamplePoint
from .neighbors import NearestNeighbors
from .regression import LocalMeanRegressor, LocalModel, LocalPolynomialRegressor
from .semi_supervised import LabelPropagation
from .sequence import HierarchicalLocalModel, TemporalLocalMean, attention, attention_backward, temporal_local_mean

__all__ = [
    "AsymmetricMDS",
    "attention",
    "attention_backward",
    "Balloon",
    "FuzzyInferenceRegressor",
    "HierarchicalLocalModel",
    "Hopfield",
    "Kernel",
    "KernelCombination",
    "KernelDensity",
    "LabelPropagation",
    "LocalMeanDenoiser",
    "LocalMeanDiffusion",
    "LocalMeanImputer",
    "LocalMeanRegressor",
    "LocalModeClassifier",
    "LocalModeClustering",
    "LocalModel",
    "LocalPCA",
    "LocallyLinearEmbedding",
    "LocalPolynomialRegressor",
    "LocalSums",
    "LocalizationError",
    "LocalizationTypeError",
    "LocalizationWarning",
    "MeanShift",
    "MedoidShift",
    "ModernHopfield",
    "MetricLearningRegressor",
    "MultiKernel",
    "NearestNeighbors",
    "NonLocalMeans",
    "OrdinalEmbedding",
    "PCShift",
    "QuickShift",
    "SamplePoint",
    "SelfLocalMean",
    "TripletEmbedding",
    "adaptive",
    "TemporalLocalMean",
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
    "metrics",
    "semi_supervised",
    "text",
    "sequence",
    "temporal_local_mean",
    "__version__",
]

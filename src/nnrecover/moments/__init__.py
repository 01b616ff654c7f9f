"""Streaming moment statistics (update / merge / finalize) and their exact population forms.

See :mod:`nnrecover.moments.base` for the monoid design, :mod:`nnrecover.data` for the data sources
(arrays, memory-mapped files, chunk iterables, dask arrays) and the pass driver ``accumulate``, and
:mod:`nnrecover.moments.hermite` for the Hermite-coefficient statistics of Awasthi et al.
"""

from .base import Statistic
from .statistics import (
    Covariance,
    CovarianceStatistic,
    InputDeviation,
    MeanStatistic,
    Means,
    SecondMoment,
    SecondMoments,
    ThirdMomentContraction,
    WeightedSecondMoment,
    excess_kurtosis_deviation,
    input_deviation_from_standard,
)
from .symmetry import SymmetryStatistic, SymmetryTest, symmetry_test
from .hermite import (
    HermiteContractionStatistic,
    HermiteMatrixSliceStatistic,
    HermiteMoments,
    HermitePartialContractionStatistic,
    HermiteRankOneStatistic,
    HermiteTensorStatistic,
    HermiteVectorSliceStatistic,
    PopulationHermiteMoments,
    SampleHermiteMoments,
)

__all__ = [
    "Statistic", "SymmetryTest", "SymmetryStatistic", "symmetry_test",
    "MeanStatistic", "SecondMoment", "CovarianceStatistic", "WeightedSecondMoment", "ThirdMomentContraction",
    "Means", "SecondMoments", "Covariance", "InputDeviation", "input_deviation_from_standard",
    "excess_kurtosis_deviation",
    "HermiteTensorStatistic", "HermiteRankOneStatistic", "HermiteContractionStatistic",
    "HermiteVectorSliceStatistic", "HermiteMatrixSliceStatistic", "HermitePartialContractionStatistic",
    "HermiteMoments", "SampleHermiteMoments", "PopulationHermiteMoments",
]

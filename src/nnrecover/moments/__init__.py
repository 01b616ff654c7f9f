"""Streaming moment statistics (update / merge / finalize) and their exact population forms.

See :mod:`nnrecover.moments.base` for the monoid design, :mod:`nnrecover.moments.symmetry` for the test
of a symmetric input law, :mod:`nnrecover.data` for the data sources (arrays, memory-mapped files, chunk
iterables, dask arrays) and the pass driver ``accumulate``, and :mod:`nnrecover.hermite.statistics` for
the Hermite-coefficient statistics of Awasthi et al.
"""

from .base import Statistic
from .statistics import (
    Covariance,
    CovarianceStatistic,
    InputDeviation,
    Means,
    MeanStatistic,
    SecondMoment,
    SecondMoments,
    ThirdMomentContraction,
    WeightedSecondMoment,
    excess_kurtosis_deviation,
    input_deviation_from_standard,
)
from .symmetry import SymmetryStatistic, SymmetryTest, symmetry_test

__all__ = [
    "Statistic", "SymmetryTest", "SymmetryStatistic", "symmetry_test",
    "MeanStatistic", "SecondMoment", "CovarianceStatistic", "WeightedSecondMoment", "ThirdMomentContraction",
    "Means", "SecondMoments", "Covariance", "InputDeviation", "input_deviation_from_standard",
    "excess_kurtosis_deviation",
]

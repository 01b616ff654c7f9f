"""Streaming moment statistics (update / merge / finalize) and their exact population forms.

See :mod:`nnrecover.moments.base` for the monoid design, :mod:`nnrecover.moments.engine` for data
sources (arrays, memory-mapped files, chunk iterables, dask arrays), and
:mod:`nnrecover.moments.hermite` for the Hermite-coefficient statistics of Awasthi et al.
"""

from .base import Statistic, accumulate
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
    "Statistic", "accumulate",
    "HermiteTensorStatistic", "HermiteRankOneStatistic", "HermiteContractionStatistic",
    "HermiteVectorSliceStatistic", "HermiteMatrixSliceStatistic", "HermitePartialContractionStatistic",
    "HermiteMoments", "SampleHermiteMoments", "PopulationHermiteMoments",
]

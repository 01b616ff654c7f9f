"""Tensor decompositions used by the learners: Jennrich, joint diagonalisation, whitening, power
iteration, CP-ALS, plus Khatri-Rao / flatten utilities.

Every method is a plain function that returns a result object carrying diagnostics (spectral gaps,
conditioning, residual certificates); every method is exact to round-off on exact low-rank input.
"""

from .jennrich import JennrichResult, jennrich
from .utils import cp_reconstruct, flatten, khatri_rao, match_columns, normalize_columns

__all__ = ["jennrich", "JennrichResult", "khatri_rao", "flatten", "match_columns", "normalize_columns",
           "cp_reconstruct"]

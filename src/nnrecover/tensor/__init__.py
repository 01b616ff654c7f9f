"""Tensor decompositions used by the learners.

=========================  ==========================================================================
function                   use
=========================  ==========================================================================
:func:`jennrich`           order-3 tensor, best of several random slice pairs (spec 001 §3.1; SimDiag
                           of spec 003 §2.4; Option A of spec 004 §2.4.2); dense or implicit slices
:func:`joint_diagonalize`  many noisy slices ``A diag(d_k) B^T``: pencil start + ALS over all slices
:func:`whiten`             whitening matrix of a (PSD) second moment, the JSA15 first step
:func:`power_iteration`    orthogonally decomposable symmetric tensors, restarts + deflation (AGHKT14)
:func:`cp_als`             general CP by ALS (TensorLy ``parafac``), best of restarts (spec 003 §2.9)
:func:`khatri_rao`,        column-wise Kronecker product and spec 001 §1.2 reshaping
:func:`flatten`
:func:`match_columns`      match factors up to permutation and sign (tests, metrics)
=========================  ==========================================================================

Every method is a plain function returning a result object with diagnostics (gaps, conditioning,
residual certificates) and is exact to round-off on exact low-rank input. Factor matrices have unit
columns whose largest-magnitude entry is positive; signed weights carry the scale.
"""

from .cp import CPResult, cp_als
from .jennrich import JennrichResult, jennrich
from .joint_diag import JointDiagResult, joint_diagonalize
from .power import PowerIterationResult, power_iteration
from .utils import cp_reconstruct, flatten, khatri_rao, match_columns, normalize_columns
from .whitening import WhiteningResult, whiten

__all__ = ["jennrich", "JennrichResult", "joint_diagonalize", "JointDiagResult", "whiten", "WhiteningResult",
           "power_iteration", "PowerIterationResult", "cp_als", "CPResult", "khatri_rao", "flatten",
           "match_columns", "normalize_columns", "cp_reconstruct"]

"""Tensor decompositions used by the learners.

=========================  ==========================================================================
function                   use
=========================  ==========================================================================
:func:`jennrich`           order-3 tensor, best of several random slice pairs (Awasthi et al. Claim 4.4 /
                           Theorem A.5; SimDiag of Ge et al.; Option A of Bakshi et al. Algorithm 4); dense
                           or implicit slices
:func:`joint_diagonalize`  many noisy slices ``A diag(d_k) B^T``: pencil start + ALS over all slices
:func:`whiten`             whitening matrix of a (PSD) second moment, the JSA15 first step
:func:`power_iteration`    orthogonally decomposable symmetric tensors, restarts + deflation (AGHKT14)
:func:`cp_als`             general CP by ALS (TensorLy ``parafac``), best of restarts (Ge et al. Section 4)
:func:`khatri_rao`,        column-wise Kronecker product and the flattenings of Awasthi et al. Section 2
:func:`flatten`
:func:`match_columns`      match factors up to permutation and sign (tests, metrics)
=========================  ==========================================================================

Every decomposition is a plain function returning one result type, :class:`DecompositionResult`
(``factors``, ``weights``, ``converged``, ``n_iter``, ``message``, ``diagnostics``: gaps, conditioning,
residual certificates), and is exact to round-off on exact low-rank input. Factor matrices have unit
columns whose largest-magnitude entry is positive; signed weights carry the scale.
"""

from .cp import CPResult, cp_als
from .jennrich import JennrichResult, jennrich
from .joint_diag import JointDiagResult, joint_diagonalize
from .power import PowerIterationResult, power_iteration
from .result import DecompositionResult
from .utils import cp_reconstruct, flatten, khatri_rao, match_columns, normalize_columns
from .whitening import WhiteningResult, whiten

__all__ = ["DecompositionResult", "jennrich", "JennrichResult", "joint_diagonalize", "JointDiagResult", "whiten", "WhiteningResult",
           "power_iteration", "PowerIterationResult", "cp_als", "CPResult", "khatri_rao", "flatten",
           "match_columns", "normalize_columns", "cp_reconstruct"]

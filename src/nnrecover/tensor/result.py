"""One result type for every tensor decomposition (like SciPy's ``OptimizeResult`` for its solvers).

:class:`DecompositionResult` has the same fields whatever produced it:

==============  ====================================================================================
field           meaning
==============  ====================================================================================
``factors``     list of factor matrices, one per mode, each ``(n_mode, rank)`` with unit columns whose
                largest-magnitude entry is positive (a symmetric decomposition lists the one matrix it
                found once per distinct mode it estimated)
``weights``     signed scale of each component, shape ``(rank,)``; for a joint diagonalisation the
                diagonals ``D`` of the slices, shape ``(K, rank)`` (slice ``k`` is ``A diag(D[k]) B^T``);
                None when a method does not estimate them (Jennrich without the third mode)
``converged``   bool: the method's own stopping test held (direct methods: True)
``n_iter``      iterations of the kept run (direct methods: 0)
``message``     one line saying how the result was obtained and, if not converged, why
``diagnostics`` dict of method-specific evidence: gaps, conditioning, residual certificates
==============  ====================================================================================

The method-specific classes (:class:`~nnrecover.tensor.CPResult`, :class:`~nnrecover.tensor.JennrichResult`,
:class:`~nnrecover.tensor.JointDiagResult`, :class:`~nnrecover.tensor.PowerIterationResult`) are this type
with the accessors their callers know (``relative_error``, ``factors_mode2``, ``diagonals``,
``eigenvalues``), so ``isinstance(r, DecompositionResult)`` holds for all of them. Whitening is a change
of basis, not a decomposition, and keeps its own :class:`~nnrecover.tensor.WhiteningResult`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from .utils import cp_reconstruct

__all__ = ["DecompositionResult"]


@dataclass(eq=False)
class DecompositionResult:
    """Result of a tensor decomposition: the fields of the module table."""

    factors: list
    weights: np.ndarray | None
    converged: bool = True
    n_iter: int = 0
    message: str = ""
    diagnostics: dict = field(default_factory=dict)

    @property
    def rank(self) -> int:
        """Number of components."""
        return int(np.shape(self.factors[0])[1])

    @property
    def n_modes(self) -> int:
        """Number of factor matrices returned."""
        return len(self.factors)

    def to_tensor(self) -> np.ndarray:
        """Dense reconstruction ``sum_i w_i a^{(1)}_i ⊗ a^{(2)}_i ⊗ ...`` from ``factors`` and ``weights``.

        Raises
        ------
        InputError
            The result has no per-component weights (Jennrich without the third mode; a joint
            diagonalisation, whose model is :meth:`JointDiagResult.reconstruct`).
        """

        if self.weights is None or np.ndim(self.weights) != 1:
            raise InputError(f"this {type(self).__name__} has no per-component weights to rebuild a tensor from"
                             + (" (rerun jennrich with mode3=True or mode3_fn)" if self.weights is None else "")
                             + ".")
        return cp_reconstruct(list(self._mode_factors()), self.weights)

    def _mode_factors(self) -> list:
        return self.factors

    def __repr__(self) -> str:
        shapes = ", ".join(str(np.shape(F)) for F in self.factors)
        return (f"{type(self).__name__}(rank={self.rank}, factors=[{shapes}], converged={self.converged}, "
                f"n_iter={self.n_iter}, message={self.message!r})")

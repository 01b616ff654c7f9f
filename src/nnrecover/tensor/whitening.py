"""Whitening of a (low-rank) symmetric second moment, the first step of the tensor power method.

For ``M = sum_i w_i μ_i μ_i^T`` with ``w_i > 0`` and linearly independent ``μ_i`` (rank ``r``), a
whitening matrix ``W`` (``r x n``, the transpose of the ``W`` of Anandkumar-Ge-Hsu-Kakade-Telgarsky
2014, section 4.3.1, cited as "JSA15" by Bakshi et al.) satisfies ``W M W^T = I_r``. Then
``v_i = sqrt(w_i) W μ_i`` are orthonormal, and a symmetric tensor ``T = sum_i λ_i μ_i^{⊗3}``
becomes ``T(W^T, W^T, W^T) = sum_i λ_i w_i^{-3/2} v_i^{⊗3}``, orthogonally decomposable
(:func:`~nnrecover.tensor.power_iteration`). Un-whitening: ``μ_i = unwhitener @ v_i / sqrt(w_i)``.

Symbols and names:

======================================  =====================================================
paper (JSA15 / Bakshi et al. Algorithm 4)         here
======================================  =====================================================
``M_2`` (or ``M̃(θ)``)                  ``M`` (``n x n``, symmetric)
``W`` with ``W^T M_2 W = I``            ``whitener.T``; ``whitener`` is ``(rank, n)``
``B = (W^T)^+``                         ``unwhitener`` ``(n, rank)`` = ``U diag(|λ|^{1/2})``
``M̃(θ)^{-1/2}`` (BJW Option A step 5)  ``whitener`` restricted to the span
======================================  =====================================================

Definiteness. Bakshi-Jayaram-Woodruff's second moment ``M_2(θ)`` is generally indefinite (the
erratum of their Algorithm 4 on the errata page): PSD whitening is then invalid. By default an indefinite matrix (on its top-``rank``
eigenspace) raises :class:`~nnrecover.errors.AssumptionError`; with ``allow_indefinite=True`` the
whitener uses ``|λ|`` and ``whitener @ M @ whitener.T = diag(signs)`` (the signature).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._validation import check_positive_int
from ..errors import AssumptionError, InputError
from .utils import _as_real_array

__all__ = ["whiten", "WhiteningResult"]


@dataclass
class WhiteningResult:
    """Result of :func:`whiten`.

    Attributes
    ----------
    whitener : ndarray, shape ``(rank, n)``
        ``diag(|λ|^{-1/2}) U^T``; ``whitener @ M @ whitener.T = diag(signs)`` (``= I`` for PSD ``M``).
    unwhitener : ndarray, shape ``(n, rank)``
        ``U diag(|λ|^{1/2})``, the pseudo-inverse of ``whitener``: ``whitener @ unwhitener = I`` and
        ``unwhitener @ diag(signs) @ unwhitener.T`` is the best rank-``rank`` approximation of ``M``.
    eigenvalues : ndarray, shape ``(rank,)``
        The kept eigenvalues ``λ`` (largest ``|λ|`` first).
    eigenvectors : ndarray, shape ``(n, rank)``
        The kept orthonormal eigenvectors ``U``.
    signs : ndarray, shape ``(rank,)``
        ``sign(λ)``.
    diagnostics : dict
        ``condition`` (``|λ_1| / |λ_rank|``), ``gap_ratio`` (``|λ_{rank+1}| / |λ_rank|``, 0 if
        ``rank == n``), ``n_negative`` (negative kept eigenvalues), ``discarded_energy``
        (``sum_{j>rank} λ_j^2 / sum_j λ_j^2``), ``asymmetry`` (relative, before symmetrising).
    """

    whitener: np.ndarray
    unwhitener: np.ndarray
    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    signs: np.ndarray
    diagnostics: dict = field(default_factory=dict)

    @property
    def rank(self) -> int:
        return int(self.whitener.shape[0])

    def transform(self, T: Any) -> np.ndarray:
        """Whiten every mode of a dense tensor: ``T(W^T, ..., W^T)``, shape ``(rank,) * T.ndim``."""
        arr = _as_real_array(T, "T")
        n = self.whitener.shape[1]
        if any(dim != n for dim in arr.shape):
            raise InputError(f"T must have every dimension equal to n={n}, got shape {arr.shape}.")
        for _ in range(arr.ndim):  # contract the leading mode, move the result to the end
            arr = np.tensordot(arr, self.whitener, axes=(0, 1))
        return arr


def whiten(M: Any, rank: int, *, allow_indefinite: bool = False, rtol: float = 1e-12,
           symmetry_tol: float = 1e-8) -> WhiteningResult:
    """Whitening matrix of a symmetric matrix on its top-``rank`` eigenspace.

    Parameters
    ----------
    M : array_like, shape ``(n, n)``
        Symmetric, PSD on its top-``rank`` eigenspace (e.g. a second moment ``sum_i w_i μ_i μ_i^T``,
        possibly estimated with noise). Symmetrised as ``(M + M^T) / 2``.
    rank : int
        ``1 <= rank <= n``; the ``rank`` eigenvalues of largest magnitude are kept.
    allow_indefinite : bool, default False
        Accept negative kept eigenvalues (whiten with ``|λ|``; see ``signs``). A negative definite
        ``M`` can also be handled by passing ``-M``.
    rtol : float, default 1e-12
        ``|λ_rank| <= rtol * |λ_1|`` means ``rank`` exceeds the numerical rank: AssumptionError.
    symmetry_tol : float, default 1e-8
        Maximum relative asymmetry ``||M - M^T||_F / ||M||_F`` accepted.

    Returns
    -------
    WhiteningResult

    Raises
    ------
    InputError
        Not a finite square matrix, asymmetric beyond ``symmetry_tol``, ``rank > n``.
    AssumptionError
        ``rank`` above the numerical rank, or negative kept eigenvalues without ``allow_indefinite``.

    Examples
    --------
    >>> import numpy as np
    >>> mu = np.random.default_rng(0).standard_normal((5, 3))
    >>> res = whiten(mu @ mu.T, 3)
    >>> bool(np.allclose(res.whitener @ (mu @ mu.T) @ res.whitener.T, np.eye(3)))
    True
    """
    A = _as_real_array(M, "M", ndim=2)
    n = A.shape[0]
    if A.shape != (n, n):
        raise InputError(f"M must be square, got shape {A.shape}.")
    rank = check_positive_int(rank, "rank")
    if rank > n:
        raise InputError(f"rank={rank} exceeds the dimension n={n} of M.")
    for name, val in (("rtol", rtol), ("symmetry_tol", symmetry_tol)):
        if not (np.isfinite(val) and val >= 0):
            raise InputError(f"{name} must be a finite number >= 0, got {val!r}.")
    norm = float(np.linalg.norm(A))
    if norm == 0:
        raise AssumptionError("M is zero; there is no subspace to whiten.")
    asym = float(np.linalg.norm(A - A.T) / norm)
    if asym > symmetry_tol:
        raise InputError(f"M is not symmetric (relative asymmetry {asym:.3g} > symmetry_tol={symmetry_tol:g}); "
                         "pass (M + M.T) / 2 if the asymmetry is noise.")
    A = 0.5 * (A + A.T)
    lam, U = np.linalg.eigh(A)
    order = np.argsort(-np.abs(lam), kind="stable")
    lam, U = lam[order], U[:, order]
    kept, Uk = lam[:rank], U[:, :rank]
    if abs(kept[-1]) <= rtol * abs(kept[0]):
        raise AssumptionError(f"rank={rank} exceeds the numerical rank of M: |λ_{rank}|/|λ_1| = "
                              f"{abs(kept[-1]) / abs(kept[0]):.3g} <= rtol={rtol:g}.")
    signs = np.sign(kept)
    n_neg = int(np.sum(signs < 0))
    if n_neg and not allow_indefinite:
        raise AssumptionError(
            f"M is not positive definite on its top-{rank} eigenspace ({n_neg} of the {rank} largest-|λ| "
            "eigenvalues are negative). PSD whitening (Anandkumar et al. 2014 §4.3.1) needs a definite "
            "second moment; for Bakshi et al. 2019's indefinite M_2(θ) search θ with a definite "
            "projection (Bakshi et al. Algorithm 4), pass -M if M is negative definite, or set "
            "allow_indefinite=True.")
    root = np.sqrt(np.abs(kept))
    whitener = (Uk / root).T
    unwhitener = Uk * root
    total = float(np.sum(lam ** 2))
    diagnostics = {
        "condition": float(abs(kept[0]) / abs(kept[-1])),
        "gap_ratio": float(abs(lam[rank]) / abs(kept[-1])) if rank < n else 0.0,
        "n_negative": n_neg,
        "discarded_energy": float(np.sum(lam[rank:] ** 2) / total) if total > 0 else 0.0,
        "asymmetry": asym,
    }
    return WhiteningResult(whitener=whitener, unwhitener=unwhitener, eigenvalues=kept.copy(),
                           eigenvectors=Uk.copy(), signs=signs, diagnostics=diagnostics)

"""Non-orthogonal joint (simultaneous) diagonalisation of many matrices.

Problem. Given ``K`` matrices ``S_k ≈ A diag(d_k) B^T`` (``A``: ``n x r``, ``B``: ``n2 x r``, full column
rank, ``r <= min(n, n2)``), find ``A``, ``B`` and the diagonals ``D = [d_k]`` (``K x r``). Using many
slices instead of the single pair of Jennrich's algorithm averages the noise of the individual slices.

Method ("pencil + least-squares refinement"). Joint diagonalisation of the slices is exactly the CP
decomposition of the stacked tensor ``T[:, :, k] = S_k = sum_i a_i ⊗ b_i ⊗ D[:, i]``
(De Lathauwer 2006, "A link between the canonical decomposition in multilinear algebra and
simultaneous matrix diagonalization", SIAM J. Matrix Anal. Appl. 28(3), 642-666). We use the
classical direct-then-iterative scheme:

1. Compression (Tucker/CANDELINC; Carroll, Pruzansky and Kruskal 1980; Bro and Andersson 1998):
   ``P``, ``Q`` = top-``r`` left singular vectors of ``[S_1 ... S_K]`` and ``[S_1^T ... S_K^T]``;
   core slices ``G_k = P^T S_k Q`` (``r x r``). The SVD of all slices is the least-squares subspace.
2. Initialisation by the generalised eigenvalue (pencil) method on random combinations of *all*
   slices, i.e. :func:`~nnrecover.tensor.jennrich` on the core, best of ``n_draws`` (this is DTLD,
   Sanchez and Kowalski 1990, "Tensorial resolution: a direct trilinear decomposition",
   J. Chemometrics 4, 29-45).
3. Refinement by alternating least squares on all core slices jointly (Harshman 1970; the
   practical variant of Ge-Kuditipudi-Li-Wang 2019 Section 4): each step solves
   ``min ||G - [[A, B, D]]||_F`` exactly in one factor, so the objective never increases.

With exact input the initialisation is already exact and the refinement stops at once
(residual at round-off). Under i.i.d. noise, the least-squares fit over all ``K`` slices is the
maximum-likelihood estimate, which is why it beats a single pencil.

Symmetric slices (``S_k = S_k^T``, ``A = B``): the ALS iterates ``A`` and ``B`` separately and the
result is symmetrised at the end (``a_i ← a_i + sign(<a_i, b_i>) b_i``, normalised), followed by one
exact least-squares update of ``D``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import check_positive_int, check_random_state
from ..errors import AssumptionError, InputError
from .jennrich import _top_left, jennrich
from .result import DecompositionResult
from .utils import _as_real_array, normalize_columns

__all__ = ["joint_diagonalize", "JointDiagResult"]

_EPS = np.finfo(np.float64).eps


class JointDiagResult(DecompositionResult):
    """Result of :func:`joint_diagonalize`: a :class:`~nnrecover.tensor.DecompositionResult`.

    Attributes
    ----------
    factors : list of ndarray
        ``[A, B]``, each ``(n, rank)``: unit columns, largest-magnitude entry positive (``B`` equals ``A``
        for symmetric slices).
    weights : ndarray, shape ``(K, rank)``
        The diagonals ``D[k] = d_k`` with ``S_k ≈ A diag(d_k) B^T`` (also ``diagonals``). Components
        are sorted by decreasing ``||D[:, i]||``.
    converged, n_iter, message
        Of the alternating least squares over all slices.
    diagnostics : dict
        ``residual`` (``sqrt(sum_k ||S_k - A diag(d_k) B^T||_F^2 / sum_k ||S_k||_F^2)``),
        ``initial_residual`` (same for the pencil initialisation, on the compressed slices),
        ``core_residual`` (final, compressed slices), ``n_iter``, ``converged``, ``condition``
        (largest condition number of ``A``, ``B``), ``subspace_singular_values``, ``rank_ratio``,
        ``tail_ratio``, ``symmetric``, ``jennrich`` (diagnostics of the initialisation, without
        ``per_draw``).
    """

    @property
    def factors_mode2(self) -> np.ndarray:
        """``B``."""
        return self.factors[1]

    @property
    def diagonals(self) -> np.ndarray:
        """``D``, shape ``(K, rank)`` (the ``weights`` field)."""
        return self.weights

    def reconstruct(self) -> np.ndarray:
        """The model slices ``A diag(d_k) B^T``, shape ``(K, n, n2)``."""
        return np.einsum("ai,ki,bi->kab", self.factors[0], self.weights, self.factors[1], optimize=True)


def _lsq(gram: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Solve ``X @ gram = rhs`` for X (gram symmetric r x r) by least squares (robust to rank loss)."""
    return np.linalg.lstsq(gram, rhs.T, rcond=None)[0].T


def _core_residual(G: np.ndarray, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> float:
    model = np.einsum("ai,ki,bi->kab", A, C, B, optimize=True)
    return float(np.linalg.norm(G - model))


def joint_diagonalize(
    matrices: Any,
    rank: int,
    *,
    rng: Any = None,
    max_iter: int = 500,
    tol: float = 1e-10,
    n_draws: int = 5,
    symmetric: bool | None = None,
    rank_tol: float = 1e-10,
    strict: bool = False,
) -> JointDiagResult:
    """Jointly diagonalise ``K`` matrices ``S_k ≈ A diag(d_k) B^T`` (non-orthogonal ``A``, ``B``).

    Pencil initialisation on random combinations of all slices, then alternating least squares
    over all slices (see the module notes for the method and references).

    Parameters
    ----------
    matrices : array_like, shape ``(K, n, n2)``
        The slices ``S_k`` (first axis indexes the slices).
    rank : int
        Number of components ``r``, ``1 <= r <= min(n, n2)``.
    rng : None, int or numpy.random.Generator
        Randomness of the pencil initialisation.
    max_iter : int, default 500
        Maximum number of ALS sweeps.
    tol : float, default 1e-10
        Stop when the relative residual decreases by less than ``tol`` times its value in one sweep
        (or is at round-off level).
    n_draws : int, default 5
        Random slice combinations tried by the pencil initialisation (:func:`jennrich`).
    symmetric : bool, optional
        Slices symmetric and ``A = B``; default detected (``n == n2`` and relative asymmetry
        ``<= 1e-10``).
    rank_tol : float, default 1e-10
        ``rank`` above the numerical rank of the stacked slices (``s_rank / s_1 <= rank_tol``) raises
        :class:`~nnrecover.errors.AssumptionError`.
    strict : bool, default False
        Passed to the :func:`jennrich` initialisation (degenerate eigenvalue gaps raise).

    Returns
    -------
    JointDiagResult

    Raises
    ------
    InputError
        Bad shapes, NaN/inf, ``rank > min(n, n2)``.
    AssumptionError
        ``rank`` above the numerical rank, a single slice with ``rank > 1`` (not identifiable), or the
        pencil initialisation fails (see :func:`jennrich`).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> A = rng.standard_normal((6, 3)); D = rng.standard_normal((20, 3))
    >>> S = np.einsum("ai,ki,bi->kab", A, D, A)
    >>> res = joint_diagonalize(S, 3, rng=0)
    >>> bool(res.diagnostics["residual"] < 1e-12)
    True
    """
    S = _as_real_array(matrices, "matrices", ndim=3)
    K, n, n2 = S.shape
    rank = check_positive_int(rank, "rank")
    max_iter = check_positive_int(max_iter, "max_iter", minimum=0)
    n_draws = check_positive_int(n_draws, "n_draws")
    if not (np.isfinite(tol) and tol >= 0):
        raise InputError(f"tol must be a finite number >= 0, got {tol!r}.")
    if rank > min(n, n2):
        raise InputError(f"rank={rank} exceeds min(n, n2) = {min(n, n2)} for matrices of shape {(n, n2)}.")
    if K < 2 and rank > 1:
        raise AssumptionError(f"a single matrix cannot be jointly diagonalised into {rank} identifiable "
                              "components; pass at least two slices with distinct diagonals.")
    rng = check_random_state(rng)
    tiny = np.finfo(float).tiny
    total = float(np.linalg.norm(S))
    if total == 0:
        raise AssumptionError("all matrices are zero; nothing to diagonalise.")
    if symmetric is None:
        symmetric = n == n2 and np.linalg.norm(S - S.transpose(0, 2, 1)) <= 1e-10 * total
    elif symmetric and n != n2:
        raise InputError(f"symmetric=True needs square matrices, got shape {(n, n2)}.")
    symmetric = bool(symmetric)
    if symmetric:
        S = 0.5 * (S + S.transpose(0, 2, 1))

    # 1. compression onto the rank-r column spans of all slices
    P, s = _top_left(S.transpose(1, 0, 2).reshape(n, K * n2), rank)
    if symmetric:
        Q = P
    else:
        Q, s2 = _top_left(S.transpose(2, 0, 1).reshape(n2, K * n), rank)
        s = s if (s[rank - 1] / s[0]) <= (s2[rank - 1] / s2[0]) else s2
    rank_ratio = float(s[rank - 1] / s[0])
    tail_ratio = float(s[rank] / s[rank - 1]) if s.size > rank and s[rank - 1] > 0 else float("nan")
    if rank_ratio <= rank_tol:
        raise AssumptionError(
            f"rank={rank} exceeds the numerical rank of the stacked matrices: s_{rank}/s_1 = "
            f"{rank_ratio:.3g} <= rank_tol={rank_tol:g}. Choose rank from the singular values.")
    G = np.matmul(np.matmul(P.T[None], S), Q[None])  # (K, r, r)
    gnorm = max(float(np.linalg.norm(G)), tiny)

    # 2. pencil initialisation on random combinations of all slices
    init = jennrich(np.ascontiguousarray(G.transpose(1, 2, 0)), rank, n_draws=n_draws, rng=rng,
                    symmetric=symmetric, strict=strict)
    A, B = init.factors[0].copy(), init.factors[1].copy()
    C = init.factors_mode3 * init.weights
    err = _core_residual(G, A, B, C) / gnorm
    initial = err

    # 3. ALS over all slices
    converged = err <= 100 * _EPS
    n_iter = 0
    while not converged and n_iter < max_iter:
        n_iter += 1
        A = _lsq((B.T @ B) * (C.T @ C), np.einsum("kab,bi,ki->ai", G, B, C, optimize=True))
        B = _lsq((A.T @ A) * (C.T @ C), np.einsum("kab,ai,ki->bi", G, A, C, optimize=True))
        na, nb = np.linalg.norm(A, axis=0), np.linalg.norm(B, axis=0)
        A, B = A / np.where(na > 0, na, 1.0), B / np.where(nb > 0, nb, 1.0)
        C = _lsq((A.T @ A) * (B.T @ B), np.einsum("kab,ai,bi->ki", G, A, B, optimize=True))
        new = _core_residual(G, A, B, C) / gnorm
        converged = new <= 100 * _EPS or (err - new) <= tol * err
        err = new

    if symmetric:
        sgn = np.sign(np.sum(A * B, axis=0))
        sgn[sgn == 0] = 1.0
        A = A + sgn * B
        A = A / np.linalg.norm(A, axis=0)
        B = A
        C = _lsq((A.T @ A) ** 2, np.einsum("kab,ai,bi->ki", G, A, B, optimize=True))
        err = _core_residual(G, A, B, C) / gnorm

    # back to the full space, with the sign/scale convention
    Af, na, sa = normalize_columns(P @ A)
    if symmetric:
        Bf, nb, sb = Af, na, sa
    else:
        Bf, nb, sb = normalize_columns(Q @ B)
    D = C * (na * sa * nb * sb)
    order = np.argsort(-np.linalg.norm(D, axis=0), kind="stable")
    Af, Bf, D = Af[:, order], (Af[:, order] if symmetric else Bf[:, order]), D[:, order]

    model = np.einsum("ai,ki,bi->kab", Af, D, Bf, optimize=True)
    residual = float(np.linalg.norm(S - model) / total)
    cond = max(float(np.linalg.cond(Af)), float(np.linalg.cond(Bf)))
    jd = {k: v for k, v in init.diagnostics.items() if k != "per_draw"}
    diagnostics = {
        "residual": residual,
        "initial_residual": float(initial),
        "core_residual": float(err),
        "n_iter": n_iter,
        "converged": bool(converged),
        "condition": cond,
        "subspace_singular_values": s[: rank + 1].copy(),
        "rank_ratio": rank_ratio,
        "tail_ratio": tail_ratio,
        "symmetric": symmetric,
        "n_matrices": K,
        "jennrich": jd,
    }
    return JointDiagResult(factors=[Af, Bf], weights=D, converged=bool(converged), n_iter=int(n_iter),
                           message=f"joint diagonalisation of {K} slices: Jennrich start, ALS to relative residual "
                                   f"{residual:.3g}" + ("" if converged else " (stopped at max_iter)"),
                           diagnostics=diagnostics)

"""LLL lattice reduction and the 0/1 solve of the orientation equations by a short lattice vector.

The orientation problem of :func:`nnrecover.extraction.critical_points.resolve_signs` is ``M t = u``
for ``t`` in ``{0, 1}^k`` with ``M`` real ``(m, k)``, ``k > m``: a multidimensional subset sum. With
real coefficients known to ``tol`` it has low density (``k`` unknown bits against ``m log2(1/tol)``
bits of equations), the regime where the lattice attack of Lagarias-Odlyzko, in the form of Coster,
Joux, LaMacchia, Odlyzko, Schnorr and Stern (1992), finds ``t`` as the shortest vector of

    b_i     = [2 e_i, M[:, i] / tol, 0]     (i = 1..k)
    b_{k+1} = [1, ..., 1, u / tol, 1]

where ``sum_i t_i b_i - b_{k+1} = [2 t - 1, (M t - u) / tol, -1]`` has entries of size 1. LLL
(Lenstra, Lenstra, Lovasz 1982) in floating point, with Gram-Schmidt data updated per swap and
recomputed (by QR) after a large size reduction, usually reaches it for the sizes met here.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["lll_reduce", "binary_solution"]


def _gram_schmidt(B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``mu`` (n, n) with ``mu[i, j] = <b_i, b*_j> / |b*_j|^2`` and the squared norms ``|b*_j|^2``."""
    R = np.linalg.qr(B.T, mode="r")
    diag = np.diag(R).copy()
    return (R / diag[:, None]).T, diag * diag


def lll_reduce(B: np.ndarray, *, delta: float = 0.99, time_limit: float = 60.0) -> tuple[np.ndarray, bool]:
    """LLL-reduce the rows of ``B`` (linearly independent, real).

    Returns
    -------
    (reduced basis, finished)
        ``finished`` is False when ``time_limit`` seconds ran out first (the basis is then partly reduced).
    """
    B = np.array(B, dtype=float)
    n = B.shape[0]
    mu, Bn = _gram_schmidt(B)
    k, it = 1, 0
    t0 = time.perf_counter()
    while k < n:
        it += 1
        if it % 2048 == 0 and time.perf_counter() - t0 > time_limit:
            return B, False
        refresh = False
        for j in range(k - 1, -1, -1):       # size reduction of b_k
            q = np.rint(mu[k, j])
            if q:
                B[k] -= q * B[j]
                mu[k, :j] -= q * mu[j, :j]
                mu[k, j] -= q
                refresh |= abs(q) > 2.0 ** 20   # the updated mu lost digits: recompute them
        if refresh:
            mu, Bn = _gram_schmidt(B)
            continue
        m1 = mu[k, k - 1]
        if Bn[k] < (delta - m1 * m1) * Bn[k - 1]:   # Lovasz condition fails: swap b_{k-1}, b_k
            Bnew = Bn[k] + m1 * m1 * Bn[k - 1]
            mu[k, k - 1] = m1 * Bn[k - 1] / Bnew
            Bn[k] = Bn[k - 1] * Bn[k] / Bnew
            Bn[k - 1] = Bnew
            B[[k - 1, k]] = B[[k, k - 1]]
            mu[[k - 1, k], :k - 1] = mu[[k, k - 1], :k - 1]
            t = mu[k + 1:, k].copy()
            mu[k + 1:, k] = mu[k + 1:, k - 1] - m1 * t
            mu[k + 1:, k - 1] = t + mu[k, k - 1] * mu[k + 1:, k]
            k = max(k - 1, 1)
        else:
            k += 1
    return B, True


def binary_solution(M: np.ndarray, rhs: np.ndarray, tol: np.ndarray, *,
                    time_limit: float = 60.0) -> np.ndarray | None:
    """A ``t`` in ``{0, 1}^k`` with ``|M t - rhs| <= tol`` (per equation) read from an LLL-reduced
    basis (see the module docstring), or None when no reduced vector has that form."""
    m, k = M.shape
    B = np.zeros((k + 1, k + m + 1))
    B[:k, :k] = 2 * np.eye(k)
    B[:k, k:k + m] = (M / tol[:, None]).T
    B[k, :k] = 1.0
    B[k, k:k + m] = rhs / tol
    B[k, -1] = 1.0
    R, _ = lll_reduce(B, time_limit=time_limit)
    for v in R:
        if abs(abs(v[-1]) - 1) > 1e-6:
            continue
        x = -np.sign(v[-1]) * v[:k]
        if np.all(np.abs(np.abs(x) - 1) < 1e-6):
            t = np.rint((x + 1) / 2).astype(int)
            if np.all(np.abs(M @ t - rhs) <= tol):
                return t
    return None

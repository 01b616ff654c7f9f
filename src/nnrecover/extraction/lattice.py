"""LLL/BKZ lattice reduction and the 0/1 solve of the orientation equations by a short lattice vector.

The orientation problem of :func:`nnrecover.extraction.signs.resolve_signs` is ``M t = u``
for ``t`` in ``{0, 1}^k`` with ``M`` real ``(m, k)``, ``k > m``: a multidimensional subset sum. With
real coefficients known to a relative precision ``eps`` it has density ``k / (m log2(1/eps))`` (``k``
unknown bits against the bits of the equations); below about 0.94 the solution is, with high
probability, the shortest vector of the lattice of Coster, Joux, LaMacchia, Odlyzko, Schnorr and Stern
(1992, the improved Lagarias-Odlyzko embedding):

    b_i     = [2 e_i, M[:, i] / tol, 0]     (i = 1..k)
    b_{k+1} = [1, ..., 1, u / tol, 1]

where ``sum_i t_i b_i - b_{k+1} = [2 t - 1, (M t - u) / tol, -1]`` has entries of size 1 when ``tol``
is a small multiple of the precision of ``M`` and ``u``. Reduction finds that vector only when it is
much shorter than the lattice's other short vectors, i.e. at low density; this is why the weight
``tol`` matters: a loose one throws bits of the equations away.

Two backends:

* ``fpylll`` (the Python interface of fplll, optional, ``pip install nnrecover[extract]``): the lattice
  in exact integers (``M / tol`` rounded), LLL and then BKZ with growing block sizes (Schnorr-Euchner
  1994) until the vector appears or the time runs out.
* otherwise the LLL of Lenstra, Lenstra and Lovasz (1982) below, in floating point, with Gram-Schmidt
  data updated per swap and recomputed (by QR) after a large size reduction.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import InputError

__all__ = ["lll_reduce", "binary_solution", "have_fpylll"]

#: BKZ block sizes tried after LLL (each stops early when a tour changes nothing)
_BKZ_BLOCKS = (10, 16, 20, 24, 30)


def have_fpylll() -> bool:
    """True when the ``fpylll`` backend can be imported."""
    try:
        import fpylll  # noqa: F401  (deferred: optional dependency, the extract extra)
    except ImportError:
        return False
    return True


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


def _embedding(M: np.ndarray, rhs: np.ndarray, tol: np.ndarray) -> np.ndarray:
    m, k = M.shape
    B = np.zeros((k + 1, k + m + 1))
    B[:k, :k] = 2 * np.eye(k)
    B[:k, k:k + m] = (M / tol[:, None]).T
    B[k, :k] = 1.0
    B[k, k:k + m] = rhs / tol
    B[k, -1] = 1.0
    return B


def _read_solution(rows, M: np.ndarray, rhs: np.ndarray, accept: np.ndarray) -> np.ndarray | None:
    """The 0/1 vector of a reduced row ``[+-(2 t - 1), ., +-1]`` that meets the equations to ``accept``."""
    k = M.shape[1]
    for v in rows:
        v = np.asarray(v, dtype=float)
        if abs(abs(v[-1]) - 1) > 1e-6:
            continue
        x = -np.sign(v[-1]) * v[:k]
        if np.all(np.abs(np.abs(x) - 1) < 1e-6):
            t = np.rint((x + 1) / 2).astype(int)
            if np.all(np.abs(M @ t - rhs) <= accept):
                return t
    return None


def _solve_fpylll(B: np.ndarray, M, rhs, accept, time_limit: float, info: dict) -> np.ndarray | None:
    # deferred: fpylll is optional (the extract extra)
    from fpylll import BKZ, LLL, IntegerMatrix

    t0 = time.perf_counter()
    A = IntegerMatrix.from_matrix([[int(v) for v in row] for row in np.rint(B)])
    LLL.reduction(A)
    info["reduction"] = "LLL (fplll)"
    t = _read_solution(A, M, rhs, accept)
    for block in _BKZ_BLOCKS:
        left = time_limit - (time.perf_counter() - t0)
        if t is not None or left <= 0 or block > A.nrows:
            break
        # MAX_TIME makes fplll stop a tour that would overrun the budget
        BKZ.reduction(A, BKZ.Param(block_size=block, max_loops=8, max_time=left,
                                   flags=BKZ.AUTO_ABORT | BKZ.MAX_LOOPS | BKZ.MAX_TIME))
        info["reduction"] = f"BKZ-{block} (fplll)"
        t = _read_solution(A, M, rhs, accept)
    return t


def binary_solution(M: np.ndarray, rhs: np.ndarray, tol: np.ndarray, *, accept: np.ndarray | None = None,
                    time_limit: float = 60.0, backend: str = "auto",
                    info: dict | None = None) -> np.ndarray | None:
    """A ``t`` in ``{0, 1}^k`` with ``|M t - rhs| <= accept`` (per equation) read from a reduced basis of
    the embedding weighted by ``tol`` (see the module docstring), or None when none was found.

    Parameters
    ----------
    M, rhs : (m, k) and (m,) arrays
    tol : (m,) array
        Weight of each equation: a small multiple of the precision of its coefficients.
    accept : (m,) array, optional
        Residual a solution may leave (default ``tol``).
    time_limit : float
    backend : {"auto", "fpylll", "numpy"}
        ``"auto"`` uses fpylll (LLL, then BKZ) when it is installed, else the floating-point LLL here.
    info : dict, optional
        Receives ``reduction`` (the last reduction run).
    """
    if backend not in ("auto", "fpylll", "numpy"):
        raise InputError(f"backend must be 'auto', 'fpylll' or 'numpy', got {backend!r}.")
    info = {} if info is None else info
    accept = tol if accept is None else accept
    B = _embedding(M, rhs, tol)
    use_fpylll = backend == "fpylll" or (backend == "auto" and have_fpylll())
    t0 = time.perf_counter()
    if use_fpylll:
        try:
            return _solve_fpylll(B, M, rhs, accept, time_limit, info)
        except RuntimeError as exc:
            # fplll aborts (cysignals turns its C++ abort into RuntimeError) when its floating-point
            # Gram-Schmidt cannot follow entries of this size ("infinite loop in babai"); the
            # floating-point LLL below recomputes its Gram-Schmidt data by QR instead
            info["fplll_error"] = str(exc) or type(exc).__name__
            if backend == "fpylll":
                raise
    R, _ = lll_reduce(B, time_limit=max(time_limit - (time.perf_counter() - t0), 0.0))
    info["reduction"] = "LLL (numpy)"
    return _read_solution(R, M, rhs, accept)

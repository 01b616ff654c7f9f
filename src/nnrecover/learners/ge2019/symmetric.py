"""Vectorisations of symmetric matrices used by Ge et al. 2019 (Section 2.2 notation).

Paper symbol -> name here:

- ``vec(A)`` (column-major stacking) -> :func:`vec`, ``mat`` -> :func:`mat`. For a symmetric matrix
  column- and row-major stacking agree, and ``x (x) x = vec(x x^T)``.
- ``vec*(U)`` (upper-triangular entries, diagonal included, each off-diagonal entry once) ->
  :func:`vec_star`, ``mat*`` -> :func:`mat_star`. The paper leaves the order open (spec section 7); we
  use ``numpy.triu_indices(k)`` order everywhere (BuildT, NullSpan, ``mat*``, ``C``, ``F``).
- The duplication matrix ``F`` (``F vec*(U) = vec(U)``, Appendix B.1.1) -> :func:`duplication_matrix`.
- Pairs ``i < j`` (the columns of the distinguishing matrix ``N``, Definition 1) are ordered as
  ``numpy.triu_indices(k, 1)``: (1,2), (1,3), ..., (1,k), (2,3), ... as in the paper's matrix ``B``.

The ``d^2`` rows of the detector matrix ``T`` repeat every off-diagonal entry of a symmetric
``d x d`` matrix twice. :func:`pack_rows` keeps the ``d(d+1)/2`` distinct rows and multiplies the
off-diagonal ones by ``sqrt(2)``: this is an isometry on symmetric matrices (``||pack(vec U)|| =
||U||_F``), so ``T`` and its packed form have the same Gram matrix ``T^T T``, hence the same singular
values and right singular vectors (the paper's remark that ``binom(d+1, 2)`` rows suffice, made exact).
"""

from __future__ import annotations

import numpy as np

from ...errors import InputError

__all__ = ["vec", "mat", "vec_star", "mat_star", "duplication_matrix", "pair_indices", "n_sym",
           "pack_rows", "unpack_rows", "pack_weights"]


def n_sym(k: int) -> int:
    """``k_2 + k = k (k + 1) / 2``, the dimension of symmetric ``k x k`` matrices."""
    return k * (k + 1) // 2


def pair_indices(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Index arrays ``(i, j)`` of the ``k_2 = binom(k, 2)`` pairs ``i < j`` in the library's order."""
    return np.triu_indices(k, 1)


def vec(U: np.ndarray) -> np.ndarray:
    """Column-major stacking of a matrix (the paper's ``vec``); works on a stack ``(..., m, n)``."""
    U = np.asarray(U, dtype=np.float64)
    return np.swapaxes(U, -1, -2).reshape(*U.shape[:-2], -1)


def mat(v: np.ndarray, rows: int | None = None) -> np.ndarray:
    """Inverse of :func:`vec`; ``rows`` defaults to the square root of the length."""
    v = np.asarray(v, dtype=np.float64)
    size = v.shape[-1]
    if rows is None:
        rows = int(round(np.sqrt(size)))
    if rows <= 0 or size % rows:
        raise InputError(f"mat: a vector of length {size} cannot be reshaped to {rows} rows.")
    return np.swapaxes(v.reshape(*v.shape[:-1], size // rows, rows), -1, -2)


def vec_star(U: np.ndarray) -> np.ndarray:
    """``vec*(U)``: the upper-triangular entries (diagonal included) in ``triu_indices`` order.

    Works on a stack of matrices ``(..., k, k)``. ``U`` is assumed symmetric (only its upper triangle
    is read).
    """
    U = np.asarray(U, dtype=np.float64)
    if U.ndim < 2 or U.shape[-1] != U.shape[-2]:
        raise InputError(f"vec_star needs square matrices, got shape {U.shape}.")
    iu = np.triu_indices(U.shape[-1])
    return U[..., iu[0], iu[1]]


def _k_from_sym_length(m: int) -> int:
    k = int(round((np.sqrt(8 * m + 1) - 1) / 2))
    if n_sym(k) != m:
        raise InputError(f"a vec* vector has length k(k+1)/2; {m} is not of that form.")
    return k


def mat_star(v: np.ndarray) -> np.ndarray:
    """``mat*``: the symmetric matrix whose ``vec*`` is ``v`` (works on a stack ``(..., k(k+1)/2)``)."""
    v = np.asarray(v, dtype=np.float64)
    k = _k_from_sym_length(v.shape[-1])
    out = np.zeros((*v.shape[:-1], k, k))
    iu = np.triu_indices(k)
    out[..., iu[0], iu[1]] = v
    out[..., iu[1], iu[0]] = v
    return out


def duplication_matrix(k: int) -> np.ndarray:
    """The paper's ``F`` in ``R^{k^2 x (k_2 + k)}``: ``F vec*(U) = vec(U)`` for symmetric ``U``."""
    iu = np.triu_indices(k)
    F = np.zeros((k * k, n_sym(k)))
    cols = np.arange(n_sym(k))
    F[iu[0] + k * iu[1], cols] = 1.0  # column-major position of (r, s) is r + k s
    F[iu[1] + k * iu[0], cols] = 1.0
    return F


def pack_weights(d: int) -> np.ndarray:
    """Row weights of :func:`pack_rows`: 1 on the diagonal entries, ``sqrt(2)`` off the diagonal."""
    iu = np.triu_indices(d)
    return np.where(iu[0] == iu[1], 1.0, np.sqrt(2.0))


def pack_rows(full: np.ndarray, d: int) -> np.ndarray:
    """Map rows indexed by ``vec`` of a symmetric ``d x d`` matrix (``d^2`` rows) to the packed form.

    Parameters
    ----------
    full : array of shape (d*d, ...) whose rows are ``vec`` of symmetric matrices (column by column).
    d : int

    Returns
    -------
    array of shape (d(d+1)/2, ...): the ``(r, s)``, ``r <= s`` rows, off-diagonal ones times ``sqrt(2)``.
    """
    full = np.asarray(full, dtype=np.float64)
    if full.shape[0] != d * d:
        raise InputError(f"pack_rows expects {d * d} rows, got {full.shape[0]}.")
    iu = np.triu_indices(d)
    w = pack_weights(d).reshape(-1, *([1] * (full.ndim - 1)))
    return full[iu[0] + d * iu[1]] * w


def unpack_rows(packed: np.ndarray, d: int) -> np.ndarray:
    """Inverse of :func:`pack_rows` on symmetric row data: ``d(d+1)/2`` rows -> ``d^2`` rows."""
    packed = np.asarray(packed, dtype=np.float64)
    if packed.shape[0] != n_sym(d):
        raise InputError(f"unpack_rows expects {n_sym(d)} rows, got {packed.shape[0]}.")
    iu = np.triu_indices(d)
    w = pack_weights(d).reshape(-1, *([1] * (packed.ndim - 1)))
    vals = packed / w
    out = np.empty((d * d, *packed.shape[1:]))
    out[iu[0] + d * iu[1]] = vals
    out[iu[1] + d * iu[0]] = vals
    return out

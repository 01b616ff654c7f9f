"""Small tensor utilities: Khatri-Rao product, flattening, factor matching, sign conventions.

Paper symbols (Awasthi-Tang-Vijayaraghavan 2021, Section 2) and our names:

================================  ==========================================================
paper                             here
================================  ==========================================================
``U ⊙ V`` (Khatri-Rao)            :func:`khatri_rao` ``(U, V)``: column ``i`` is ``kron(u_i, v_i)``
``W^{⊙ℓ}``                        ``khatri_rao(W, W, ...)`` (ℓ copies)
``flatten(T, t1, t2, t3)``        :func:`flatten`: merge the first ``t1`` modes, the next ``t2``,
                                  then the last ``t3`` (C order, so ``vec(w⊗w) = kron(w, w)``)
================================  ==========================================================

All vectorisations in :mod:`nnrecover.tensor` use the row-major (C) order, so that
``flatten(w⊗w⊗w, 1, 1, 1)`` has the same entries as the tensor and ``khatri_rao(A, B)[:, i]``
equals ``np.kron(A[:, i], B[:, i])``, which is the column of ``flatten(sum_i a_i⊗b_i⊗c_i, 2, 1, 0)``.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from .._validation import check_finite, numeric_array
from ..errors import InputError

__all__ = ["khatri_rao", "flatten", "match_columns", "normalize_columns", "cp_reconstruct"]


def _as_real_array(a: Any, name: str, *, ndim: int | tuple[int, ...] | None = None) -> np.ndarray:
    """Validate a real, finite, numeric array and return it as float64."""
    arr = numeric_array(a, name, what="a numeric array")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if arr.ndim not in allowed:
            want = " or ".join(str(k) for k in allowed)
            raise InputError(f"{name} must be {want}-dimensional, got shape {arr.shape}.")
    if arr.size == 0:
        raise InputError(f"{name} is empty (shape {arr.shape}); pass a non-empty array.")
    arr = np.asarray(arr, dtype=np.float64)
    check_finite(arr, name)
    return arr


def khatri_rao(A: Any, B: Any, *more: Any) -> np.ndarray:
    """Column-wise Kronecker (Khatri-Rao) product ``A ⊙ B (⊙ C ...)``.

    Parameters
    ----------
    A, B, *more : array_like, shapes ``(n_1, r), (n_2, r), ...``
        Matrices with the same number of columns ``r``.

    Returns
    -------
    ndarray, shape ``(n_1 * n_2 * ..., r)``
        Column ``i`` is ``np.kron(A[:, i], np.kron(B[:, i], ...))``; row ``(a, b)`` is at ``a * n_2 + b``
        (C order, consistent with :func:`flatten`).

    Raises
    ------
    InputError
        If an argument is not a finite real matrix or the column counts differ.

    Examples
    --------
    >>> import numpy as np
    >>> khatri_rao(np.eye(2), np.ones((3, 2))).shape
    (6, 2)
    """
    mats = [_as_real_array(M, name, ndim=2) for M, name in
            zip((A, B, *more), ["A", "B"] + [f"more[{i}]" for i in range(len(more))])]
    r = mats[0].shape[1]
    for M, name in zip(mats[1:], ["B"] + [f"more[{i}]" for i in range(len(more))]):
        if M.shape[1] != r:
            raise InputError(f"khatri_rao: {name} has {M.shape[1]} columns but A has {r}; the "
                             "Khatri-Rao product needs the same number of columns in every factor.")
    return _khatri_rao(mats)


def _khatri_rao(mats: list[np.ndarray]) -> np.ndarray:
    """:func:`khatri_rao` of validated float64 matrices with equal column counts (no checks)."""
    out = mats[0]
    for M in mats[1:]:
        out = (out[:, None, :] * M[None, :, :]).reshape(-1, out.shape[1])
    return out


def flatten(T: Any, t1: int, t2: int, t3: int = 0) -> np.ndarray:
    """Reshape an order-``t`` tensor into an order-3 tensor (or a matrix), the flattening of Awasthi et al. Section 2.

    The first ``t1`` modes are merged into mode 1, the next ``t2`` into mode 2 and the last ``t3``
    into mode 3 (row-major order). With ``t3 = 0`` the result is the matrix
    ``(prod of the first t1 dims) x (prod of the next t2 dims)``.

    Parameters
    ----------
    T : array_like
        Tensor with ``T.ndim == t1 + t2 + t3`` (the modes may have different sizes).
    t1, t2 : int
        Number of modes merged into the first and second mode; each ``>= 1``.
    t3 : int, default 0
        Number of modes merged into the third mode (``0`` gives a matrix).

    Returns
    -------
    ndarray
        A view of ``T`` (when ``T`` is contiguous) of shape ``(n1, n2, n3)`` or ``(n1, n2)``.

    Raises
    ------
    InputError
        If the orders do not add up to ``T.ndim`` or are negative, or ``T`` is not finite.

    Examples
    --------
    >>> import numpy as np
    >>> flatten(np.zeros((3, 3, 3, 3, 3)), 2, 2, 1).shape
    (9, 9, 3)
    """
    arr = _as_real_array(T, "T")
    ts = []
    for value, name, minimum in ((t1, "t1", 1), (t2, "t2", 1), (t3, "t3", 0)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < minimum:
            raise InputError(f"flatten: {name} must be an integer >= {minimum}, got {value!r}.")
        ts.append(int(value))
    if sum(ts) != arr.ndim:
        raise InputError(f"flatten: t1 + t2 + t3 = {sum(ts)} must equal the order of T ({arr.ndim}, "
                         f"shape {arr.shape}).")
    dims = arr.shape
    n1 = int(np.prod(dims[:ts[0]]))
    n2 = int(np.prod(dims[ts[0]:ts[0] + ts[1]]))
    if ts[2] == 0:
        return arr.reshape(n1, n2)
    return arr.reshape(n1, n2, int(np.prod(dims[ts[0] + ts[1]:])))


def normalize_columns(F: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scale every column to unit norm and flip it so that its largest-magnitude entry is positive.

    This is the sign/scale convention of every factor matrix returned by :mod:`nnrecover.tensor`
    (ties in the largest magnitude are broken by the first index, so the result is deterministic).

    Parameters
    ----------
    F : ndarray, shape ``(n, r)``

    Returns
    -------
    unit : ndarray, shape ``(n, r)``
        Normalised columns (a zero column stays zero).
    norms : ndarray, shape ``(r,)``
        Column norms of ``F``.
    signs : ndarray, shape ``(r,)``
        The ``±1`` applied, so that ``F = unit * (norms * signs)``.
    """
    F = np.asarray(F, dtype=np.float64)
    norms = np.linalg.norm(F, axis=0)
    idx = np.argmax(np.abs(F), axis=0)
    signs = np.sign(F[idx, np.arange(F.shape[1])])
    signs[signs == 0] = 1.0
    safe = np.where(norms > 0, norms, 1.0)
    return F * (signs / safe), norms, signs


def match_columns(estimated: Any, reference: Any, *, allow_sign: bool = True, normalize: bool = True
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Match the columns of ``estimated`` to those of ``reference`` up to permutation (and sign).

    The assignment maximises the total ``|cos|`` (or ``cos`` with ``allow_sign=False``) between
    matched columns with the Hungarian algorithm (:func:`scipy.optimize.linear_sum_assignment`).

    Parameters
    ----------
    estimated : array_like, shape ``(n, r_est)``
    reference : array_like, shape ``(n, r)``
        ``r <= r_est``; every reference column gets one distinct estimated column.
    allow_sign : bool, default True
        Match up to a sign per column.
    normalize : bool, default True
        Compare unit-normalised columns (scale-invariant); otherwise compare the columns as given.

    Returns
    -------
    perm : ndarray of int, shape ``(r,)``
        ``estimated[:, perm[i]]`` is matched to ``reference[:, i]``.
    signs : ndarray, shape ``(r,)``
        ``±1`` per reference column (all ones with ``allow_sign=False``).
    errors : ndarray, shape ``(r,)``
        ``||reference[:, i] - signs[i] * estimated[:, perm[i]]||`` (after normalisation if requested).
    """
    E = _as_real_array(estimated, "estimated", ndim=2)
    R = _as_real_array(reference, "reference", ndim=2)
    if E.shape[0] != R.shape[0]:
        raise InputError(f"match_columns: estimated has {E.shape[0]} rows, reference {R.shape[0]}.")
    if E.shape[1] < R.shape[1]:
        raise InputError(f"match_columns: estimated has {E.shape[1]} columns, fewer than the "
                         f"{R.shape[1]} reference columns.")
    if normalize:
        E = E / np.where(np.linalg.norm(E, axis=0) > 0, np.linalg.norm(E, axis=0), 1.0)
        R = R / np.where(np.linalg.norm(R, axis=0) > 0, np.linalg.norm(R, axis=0), 1.0)
    C = R.T @ E
    score = np.abs(C) if allow_sign else C
    rows, cols = linear_sum_assignment(-score)
    perm = cols[np.argsort(rows)]
    signs = np.sign(C[np.arange(R.shape[1]), perm]) if allow_sign else np.ones(R.shape[1])
    signs[signs == 0] = 1.0
    errors = np.linalg.norm(R - E[:, perm] * signs, axis=0)
    return perm, signs, errors


def cp_reconstruct(factors: list[np.ndarray] | tuple[np.ndarray, ...],
                   weights: np.ndarray | None = None) -> np.ndarray:
    """Dense tensor ``sum_i weights_i * f1_i ⊗ f2_i ⊗ ...`` from CP factors (for checks and tests).

    Parameters
    ----------
    factors : sequence of ndarray, shapes ``(n_j, r)``
    weights : ndarray, shape ``(r,)``, optional (ones by default)

    Returns
    -------
    ndarray, shape ``(n_1, n_2, ...)``

    Raises
    ------
    InputError
        No factors, a factor that is not a 2-D real finite array, factors with different numbers of
        columns, or ``weights`` not of shape ``(r,)``.
    """
    if isinstance(factors, np.ndarray) or not isinstance(factors, (list, tuple)) or not factors:
        raise InputError("factors must be a non-empty list of (n_j, r) matrices.")
    mats = [_as_real_array(F, f"factors[{j}]", ndim=2) for j, F in enumerate(factors)]
    r = mats[0].shape[1]
    if any(F.shape[1] != r for F in mats):
        raise InputError(f"every factor must have the same number of columns r; got shapes "
                         f"{[F.shape for F in mats]}.")
    w = np.ones(r) if weights is None else _as_real_array(weights, "weights", ndim=1)
    if w.shape != (r,):
        raise InputError(f"weights must have shape ({r},) to match the factors, got {w.shape}.")
    return _cp_dense(mats, w)


def _cp_dense(mats: list[np.ndarray], w: np.ndarray) -> np.ndarray:
    """:func:`cp_reconstruct` without validation (float64 factors with ``r`` columns, ``w`` of shape (r,))."""
    if len(mats) == 1:
        return mats[0] @ w
    first = mats[0] * w
    rest = _khatri_rao(mats[1:]) if len(mats) > 2 else mats[1]
    return (first @ rest.T).reshape(tuple(F.shape[0] for F in mats))

"""Probabilists' Hermite polynomials ``He_k`` in one variable: the one implementation nnrecover uses.

``He_{k+1} = t He_k - k He_{k-1}`` (Awasthi et al. 2021, Fact A.3), its normalised form ``h_k = He_k /
sqrt(k!)``, and the scaled form ``|u|^k He_k(t / |u|)`` of a rank-one contraction (Definition A.2).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from .._validation import as_real_array
from ..errors import InputError

__all__ = ["hermite_1d", "hermite_1d_all", "hermite_table", "scaled_hermite_all"]


def _check_order(k: Any, name: str = "order", *, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise InputError(f"{name} must be an integer, got {k!r}.")
    k = int(k)
    if k < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {k}.")
    if maximum is not None and k > maximum:
        raise InputError(f"{name} must be <= {maximum}, got {k}.")
    return k


def _check_orders(orders: Any, name: str = "orders") -> tuple[np.ndarray, bool]:
    """Orders as a 1-D int array and whether a scalar was given."""
    if isinstance(orders, numbers.Integral) and not isinstance(orders, bool):
        return np.array([_check_order(orders, name)]), True
    try:
        arr = np.asarray(orders)
    except Exception as exc:  # pragma: no cover - defensive
        raise InputError(f"{name} must be an integer or a sequence of integers: {exc}") from exc
    if arr.ndim != 1 or arr.size == 0:
        raise InputError(f"{name} must be an integer or a non-empty 1-D sequence of integers, "
                         f"got {orders!r}.")
    return np.array([_check_order(o, name) for o in arr.tolist()]), False


def hermite_1d_all(k_max: int, t: Any, *, normalized: bool = False) -> np.ndarray:
    """All probabilists' Hermite polynomials ``He_0..He_{k_max}`` (or ``h_k = He_k/sqrt(k!)``) at ``t``.

    Parameters
    ----------
    k_max : int
        Highest order (>= 0).
    t : array_like
        Evaluation points (any shape, finite).
    normalized : bool, default False
        Return ``h_k = He_k / sqrt(k!)`` computed by the normalised recurrence
        ``h_{k+1} = (t h_k - sqrt(k) h_{k-1}) / sqrt(k+1)`` (no overflow for large k).

    Returns
    -------
    ndarray of shape ``np.shape(t) + (k_max + 1,)``

    Notes
    -----
    Three-term recurrence ``He_{k+1} = t He_k - k He_{k-1}`` (ATV21 Fact A.3), stable where
    the monomial form cancels catastrophically.
    """
    k_max = _check_order(k_max, "k_max")
    t = as_real_array(t, "t")
    if not normalized:
        return hermite_table(k_max, t)
    out = np.empty(t.shape + (k_max + 1,))
    out[..., 0] = 1.0
    if k_max >= 1:
        out[..., 1] = t
    for k in range(1, k_max):
        out[..., k + 1] = (t * out[..., k] - math.sqrt(k) * out[..., k - 1]) / math.sqrt(k + 1)
    return out


def hermite_table(k_max: int, t: Any) -> np.ndarray:
    """``He_0..He_{k_max}`` at ``t`` (read as float64), unchecked: the recurrence every caller shares.

    ``He_{k+1} = t He_k - k He_{k-1}`` (Fact A.3), shape ``t.shape + (k_max + 1,)``. The callers check
    ``k_max`` (an int ``>= 0``); ``t`` may hold infinities (``He_k(+-inf) = +-inf``), which
    :func:`hermite_1d_all` refuses for user input.
    """
    t = np.asarray(t, dtype=np.float64)
    out = np.empty(t.shape + (k_max + 1,))
    out[..., 0] = 1.0
    if k_max >= 1:
        out[..., 1] = t
    for k in range(1, k_max):
        out[..., k + 1] = t * out[..., k] - k * out[..., k - 1]
    return out


def hermite_1d(k: Any, t: Any, *, normalized: bool = False) -> np.ndarray:
    """Probabilists' Hermite polynomial ``He_k(t)`` (or ``h_k(t) = He_k(t)/sqrt(k!)``).

    Parameters
    ----------
    k : int or sequence of int
        Order(s).
    t : array_like
        Evaluation points.
    normalized : bool, default False
        See :func:`hermite_1d_all`.

    Returns
    -------
    ndarray
        Shape ``np.shape(t)`` for an integer ``k``, ``np.shape(t) + (len(k),)`` for a sequence.
    """
    ks, scalar = _check_orders(k, "k")
    table = hermite_1d_all(int(ks.max()), t, normalized=normalized)
    return table[..., ks[0]] if scalar else table[..., ks]


def scaled_hermite_all(k_max: int, t: np.ndarray, sq_norm: np.ndarray) -> np.ndarray:
    """``|u|^k He_k(t / |u|)`` for k = 0..k_max, from ``t = u.x`` and ``sq_norm = |u|^2``.

    This is the rank-one contraction ``He_k(x)[u, ..., u]`` (ATV21 Definition A.2), computed by the
    recurrence ``H_{k+1} = t H_k - k |u|^2 H_{k-1}``, valid for any norm including 0.

    Parameters
    ----------
    k_max : int
    t : ndarray
        Projections ``u.x``, any shape broadcastable with ``sq_norm``.
    sq_norm : ndarray
        ``|u|^2``.

    Returns
    -------
    ndarray of shape ``broadcast(t, sq_norm).shape + (k_max + 1,)``
    """
    k_max = _check_order(k_max, "k_max")
    t, s2 = np.broadcast_arrays(np.asarray(t, dtype=np.float64), np.asarray(sq_norm, dtype=np.float64))
    out = np.empty(t.shape + (k_max + 1,))
    out[..., 0] = 1.0
    if k_max >= 1:
        out[..., 1] = t
    for k in range(1, k_max):
        out[..., k + 1] = t * out[..., k] - k * s2 * out[..., k - 1]
    return out

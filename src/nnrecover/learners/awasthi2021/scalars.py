"""Scalar read-out of Awasthi-Tang-Vijayaraghavan 2021: Gram least squares, Algorithm 2
(RECOVERSCALARS, corrected for l > 1) and Algorithm 3 (FIXSIGNS).

Paper symbol -> code (units are rows, the convention of :class:`nnrecover.network.TwoLayerNetwork`):

==========================================  ==========================================
paper                                       here
==========================================  ==========================================
``w~_i = xi_i w_i`` (columns)               ``U[i]`` (rows, unit norm)
``zeta_j(i)``, solution of                  :func:`gram_lstsq` ``(U, T_j)``, normal equations
``sum_i zeta_j(i) w~_i^{(x)j} = T_j``       ``(G o ... o G) zeta = [T_j(u_i, ..., u_i)]_i``, ``G = U U^T``
``q_i = argmax_{j in {l+1, l+2}} |zeta_j|`` ``RecoveredScalars.q``
``b~_i``, ``a~_i``                          ``RecoveredScalars.b``, ``RecoveredScalars.a``
``z_i`` in FIXSIGNS                         ``SignFix.z``, ``z*_i = xi_i Phi(b_i)``
==========================================  ==========================================

Erratum to Algorithm 2 (docs errata page): the printed Algorithm 2 for ``l > 1`` uses the multiplier ``q`` and
``He_q``; Lemma 4.5 applied to ``gamma_t = zeta_{t+2}`` gives ``q - 2`` and ``He_{q-2}``:

    b~ = -(zeta_{q+1} + (q - 2) zeta_{q-1}) / zeta_q,
    a~ = sqrt(2 pi) (-1)^q zeta_q exp(b~^2 / 2) / He_{q-2}(b~).

For ``l = 1`` (``q = 2``) this is the printed ``l = 1`` branch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
from scipy import linalg

from ...activations import get_activation, norm_cdf
from ...errors import InputError
from ...hermite.polynomials import hermite_table
from .symtensor import contract_rank_one

__all__ = ["gram_lstsq", "recover_scalars", "fix_signs", "RecoveredScalars", "SignFix", "rank_one_values"]

_SQRT2PI = math.sqrt(2.0 * math.pi)


def rank_one_values(tensors: Any, j: int, U: np.ndarray) -> np.ndarray:
    """``T_j(u_i, ..., u_i)`` for the rows of ``U``.

    ``tensors`` is a mapping ``j -> dense symmetric order-j array`` or an object with a
    ``rank_one(j, U)`` method (e.g. :class:`~nnrecover.learners.awasthi2021.coefficients.HermiteCoefficients`).
    """
    if hasattr(tensors, "rank_one"):
        return np.asarray(tensors.rank_one(j, U), dtype=np.float64)
    if isinstance(tensors, Mapping):
        if j not in tensors:
            raise InputError(f"tensors has no order-{j} entry; orders given: {sorted(tensors)}.")
        T = np.asarray(tensors[j], dtype=np.float64)
        if T.ndim != j or (j and T.shape != (U.shape[1],) * j):
            raise InputError(f"tensors[{j}] must have shape {(U.shape[1],) * j}, got {T.shape}.")
        return contract_rank_one(T, U)
    raise InputError("tensors must be a mapping order -> array or an object with rank_one(j, U).")


def _check_units(U: Any, name: str = "U") -> np.ndarray:
    U = np.atleast_2d(np.asarray(U, dtype=np.float64))
    if U.ndim != 2 or U.shape[0] < 1:
        raise InputError(f"{name} must have shape (n_units, n), got {np.shape(U)}.")
    if not np.all(np.isfinite(U)):
        raise InputError(f"{name} contains NaN or infinite values.")
    norms = np.linalg.norm(U, axis=1)
    if np.any(np.abs(norms - 1.0) > 1e-8):
        raise InputError(f"the rows of {name} must have unit norm (largest deviation "
                         f"{np.abs(norms - 1).max():.2e}); normalise them first.")
    return U


def gram_lstsq(U: Any, values: Any, j: int, *, rcond: float = 1e-13) -> tuple[np.ndarray, float]:
    """Solve ``min_zeta || T_j - sum_i zeta_i u_i^{(x) j} ||_F`` through its normal equations.

    With ``G = U U^T`` the normal equations are ``(G^{o j}) zeta = r``, ``r_i = T_j(u_i, ..., u_i)``
    (``G^{o j}`` the entrywise power), exactly equivalent to the paper's ``vec`` system
    (the Gram least squares of Algorithms 2 and 5) and needing only rank-one contractions.

    Parameters
    ----------
    U : array of shape (k, n)
        Unit rows ``u_i``.
    values : array of shape (k,)
        ``r_i = T_j(u_i, ..., u_i)``.
    j : int
        Tensor order.
    rcond : float
        Eigenvalues of ``G^{o j}`` below ``rcond * max`` are cut (pseudo-inverse).

    Returns
    -------
    zeta : array of shape (k,)
    condition : float
        Condition number of ``G^{o j}`` (``cond(U^{(.) j})**2``); ``inf`` when singular.
    """
    U = _check_units(U)
    r = np.asarray(values, dtype=np.float64).reshape(-1)
    if r.shape[0] != U.shape[0]:
        raise InputError(f"values has {r.shape[0]} entries for {U.shape[0]} units.")
    Gj = (U @ U.T) ** j
    lam, V = linalg.eigh(Gj)
    top = lam[-1]
    keep = lam > rcond * top
    cond = float(top / lam[0]) if lam[0] > 0 else float("inf")
    zeta = V[:, keep] @ ((V[:, keep].T @ r) / lam[keep])
    return zeta, cond


@dataclass
class RecoveredScalars:
    """Output of :func:`recover_scalars`.

    Attributes
    ----------
    a : (k,) output weights ``a~_i`` (exact sign).
    b : (k,) biases ``b~_i = xi_i b_i`` (sign matched to ``U[i] = xi_i w_i``).
    zeta : dict j -> (k,) Gram least-squares solutions ``zeta_j``.
    q : (k,) the index ``q_i`` used (always 2 for ``l = 1``).
    condition : dict j -> condition number of ``G^{o j}``.
    """

    a: np.ndarray
    b: np.ndarray
    zeta: dict
    q: np.ndarray
    condition: dict = field(default_factory=dict)


def recover_scalars(U: Any, tensors: Any, order: int, *, rcond: float = 1e-13) -> RecoveredScalars:
    """Algorithm 2 (RECOVERSCALARS), with the corrected ``l > 1`` formula (erratum E1).

    Parameters
    ----------
    U : array of shape (k, n)
        Unit directions ``w~_i = xi_i w_i`` (rows), e.g. from Jennrich's algorithm.
    tensors : mapping or object
        ``T_j`` for ``j in {2, 3}`` (``order = 1``) or ``j in {l, ..., l+3}`` (``order = l > 1``): a
        mapping order -> dense symmetric array, or an object with ``rank_one(j, U)``.
    order : int
        ``l >= 1``.
    rcond : float
        Cut-off of the Gram solves (:func:`gram_lstsq`).

    Returns
    -------
    RecoveredScalars
        ``a~_i = a_i`` and ``b~_i = xi_i b_i`` in exact arithmetic (Claim 4.6 with Lemma 4.5). Units
        whose formula divides by zero get NaN entries; callers drop them.

    Notes
    -----
    By Claim 4.6, ``zeta_j(i) = (-1)^j a_i phi(b_i) He_{j-2}(xi_i b_i)`` (Hermite index ``j - 2``).
    With ``gamma_t = zeta_{t+2}`` the three-term recurrence ``He_{t+1} = z He_t - t He_{t-1}`` gives
    ``xi z = -(gamma_{t+1} + t gamma_{t-1}) / gamma_t``, which for ``t = q - 2`` is the formula above.
    ``q`` maximises ``|zeta_q|`` over ``{l+1, l+2}``: by Lemma 4.3 (corrected constant, erratum E2)
    ``He_{l-1}`` and ``He_l`` are never both small.
    """
    U = _check_units(U)
    order = int(order)
    if order < 1:
        raise InputError(f"order must be >= 1, got {order}.")
    js = (2, 3) if order == 1 else tuple(range(order, order + 4))
    zeta, cond = {}, {}
    for j in js:
        zeta[j], cond[j] = gram_lstsq(U, rank_one_values(tensors, j, U), j, rcond=rcond)
    k = U.shape[0]
    if order == 1:
        q = np.full(k, 2)
    else:
        q = np.where(np.abs(zeta[order + 1]) >= np.abs(zeta[order + 2]), order + 1, order + 2)
    z_q = np.array([zeta[qi][i] for i, qi in enumerate(q)])
    z_next = np.array([zeta[qi + 1][i] for i, qi in enumerate(q)])
    z_prev = np.array([zeta[qi - 1][i] if qi - 2 > 0 else 0.0 for i, qi in enumerate(q)])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        b = -(z_next + (q - 2) * z_prev) / z_q
        he = np.array([hermite_table(int(qi) - 2, bi)[..., -1] if np.isfinite(bi) else np.nan
                       for qi, bi in zip(q, b)])
        a = _SQRT2PI * (-1.0) ** q * z_q * np.exp(0.5 * b * b) / he
    return RecoveredScalars(a=a, b=b, zeta=zeta, q=q, condition=cond)


@dataclass
class SignFix:
    """Output of :func:`fix_signs` (Algorithm 3).

    Attributes
    ----------
    a, b, U : sign-corrected parameters ``(a~_i, xi~_i b~_i, xi~_i w~_i)``.
    z : (k,) least-squares solution; exactly ``xi_i Phi(b_i)`` on exact input.
    xi : (k,) the signs ``sign(z_i)`` applied.
    z_std : (k,) or None, standard deviation of ``z`` implied by the noise of ``T_1``.
    reliable : (k,) bool, ``|z_i| > 3 z_std_i`` (all True without a noise level).
    consistent : (k,) bool, ``|z_i| < 1 + 3 z_std_i`` (``|z*| = Phi(b) < 1``).
    """

    a: np.ndarray
    b: np.ndarray
    U: np.ndarray
    z: np.ndarray
    xi: np.ndarray
    z_std: np.ndarray | None
    reliable: np.ndarray
    consistent: np.ndarray


def fix_signs(a: Any, b: Any, U: Any, t1: Any, *, t1_noise: float | None = None,
              direction_std: Any = None) -> SignFix:
    """Algorithm 3 (FIXSIGNS, full-rank setting).

    Solves ``sum_i z_i a~_i w~_i = T_1`` by least squares and flips unit ``i`` when ``z_i < 0``. By
    Lemma 3.5, ``f^_1 = sum_i a_i Phi(b_i) w_i``, so on exact input ``z*_i = xi_i Phi(b_i)`` with
    ``Phi(b_i) in (0, 1)``: the signs are recovered exactly when the ``w_i`` are linearly independent
    (Theorem 4.1), and under noise when ``||z - z*||_inf < min_i Phi(b_i)`` (proof of Theorem 3.1).

    Parameters
    ----------
    a, b : arrays of shape (k,)
        ``a~_i`` and ``b~_i = xi_i b_i`` from :func:`recover_scalars`.
    U : array of shape (k, n)
        ``w~_i = xi_i w_i`` (rows), in the same coordinates as ``t1``.
    t1 : array of shape (n,)
        ``T_1`` (estimate of ``f^_1``).
    t1_noise : float, optional
        Standard deviation of each coordinate of ``T_1``; gives ``z_std`` and the reliability flags.
    direction_std : array of shape (k,), optional
        Error norms of the directions ``w~_j`` (e.g. ``1 / snr_j``, the first-order Jennrich bound
        ``||E|| / |alpha_j|``). A direction error ``dw_j`` moves ``z`` by ``-M^+ sum_j z_j a~_j dw_j``
        (``M`` the matrix of columns ``a~_j w~_j``; an error in ``a~_j`` only rescales ``z_j``), i.e.
        it acts like extra ``T_1`` noise of variance ``sum_j (z_j a~_j sigma_j)^2 / n`` per coordinate
        for isotropic errors; it is added to ``t1_noise**2``. Without it a unit with a small
        ``Phi(b)`` (strongly negative bias) can be called reliable while the other units' direction
        errors flip its ``z``.

    Returns
    -------
    SignFix
    """
    U = _check_units(U)
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    t1 = np.asarray(t1, dtype=np.float64).reshape(-1)
    k, n = U.shape
    if a.shape != (k,) or b.shape != (k,):
        raise InputError(f"a and b must have shape ({k},), got {a.shape} and {b.shape}.")
    if t1.shape != (n,):
        raise InputError(f"t1 must have shape ({n},), got {t1.shape}.")
    if k > n:
        raise InputError(f"FIXSIGNS needs at most n = {n} units (full-rank setting), got {k}.")
    M = (a[:, None] * U).T  # (n, k): columns a~_i w~_i
    z, *_ = linalg.lstsq(M, t1)
    xi = np.where(z < 0, -1.0, 1.0)
    if t1_noise is not None and np.isfinite(t1_noise):
        s = linalg.svdvals(M)
        gram_inv = linalg.pinv(M.T @ M) if s[-1] > 0 else np.full((k, k), np.inf)
        var = float(t1_noise) ** 2
        if direction_std is not None:
            sig = np.asarray(direction_std, dtype=np.float64).reshape(-1)
            if sig.shape != (k,):
                raise InputError(f"direction_std must have shape ({k},), got {sig.shape}.")
            var += float(np.sum((z * a * sig) ** 2)) / n
        z_std = math.sqrt(var) * np.sqrt(np.abs(np.diag(gram_inv)))
        reliable = np.abs(z) > 3.0 * z_std
        consistent = np.abs(z) < 1.0 + 3.0 * z_std
    else:
        z_std = None
        reliable = np.ones(k, dtype=bool)
        consistent = np.abs(z) < 1.0 + 1e-8
    return SignFix(a=a.copy(), b=xi * b, U=xi[:, None] * U, z=z, xi=xi, z_std=z_std,
                   reliable=reliable, consistent=consistent)


def relu_coefficient(k: int, b: Any) -> np.ndarray:
    """``c_k(b)`` of Lemma 3.5 (unnormalised Hermite coefficient of ``z -> relu(z + b)``)."""

    return get_activation("relu").hermite_coefficients(k, b)[..., k]


def phi_cdf(b: Any) -> np.ndarray:
    """``Phi(b)``, the coefficient of ``w_i`` in ``f^_1`` (Lemma 3.5)."""
    return norm_cdf(np.asarray(b, dtype=np.float64))

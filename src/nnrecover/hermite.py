r"""Hermite polynomials, multivariate Hermite tensors and their implicit contractions.

Conventions (Awasthi-Tang-Vijayaraghavan 2021, "ATV21"; their Appendix A, Definition A.2)
-----------------------------------------------------------------------------------------
Paper symbol -> name here:

* ``He_k`` (probabilists', leading coefficient 1) -> :func:`hermite_1d`, :func:`hermite_1d_all`;
  ``h_k = He_k / sqrt(k!)`` -> the same with ``normalized=True``.
* ``He_k(x)`` in ``(R^d)^{(x)k}`` (Def. A.2) -> :func:`hermite_tensor` (dense, small d).
* ``He_k(x)[u_1, ..., u_k]`` -> :func:`hermite_contract` (matching sum, no d^k array);
  ``He_k(x)[u, ..., u] = |u|^k He_k(u.x/|u|)`` -> :func:`hermite_rank_one`.
* ``He_3(x)[., ., g]``, ``He_4(x)[., ., G]`` and their higher-order analogues ->
  :func:`hermite_vector_slice`, :func:`hermite_matrix_slice`.
* ``c_k(b)`` of Lemma 3.5 -> :func:`activation_hermite_coefficients` (any activation, any row norm).
* ``f_hat_k = E[f(x) He_k(x)] = sum_i a_i c_k(b_i) w_i^{(x)k}`` (Lemma 3.5) -> :class:`HermiteExpansion`,
  :func:`network_hermite_expansion`.
* ``T_k = (1/N) sum_n y_n He_k(x_n)`` (eq. (6)) -> the statistics of :mod:`nnrecover.moments.hermite`
  (raw moments assembled by :func:`assemble_hermite_tensor`).

Everything is unnormalised (``E[He_j(z) He_k(z)] = k! delta_jk``), exactly as in the paper; the
expansion is ``f(x) = sum_k <f_hat_k, He_k(x)> / k!`` (ATV21 Appendix A). Do not mix with the
orthonormal ``h_k`` convention, whose coefficients are ``f_hat_k / sqrt(k!)``.

Formulas used (ATV21 Definition A.2 and eq. (12); every one is cross-checked in tests/test_hermite.py)
------------------------------------------------------------------------------------------------------
* 1-D recurrences ``He_{k+1} = t He_k - k He_{k-1}`` and
  ``h_{k+1} = (t h_k - sqrt(k) h_{k-1}) / sqrt(k+1)``; never the monomial form.
* Scaled recurrence for non-unit contraction vectors: with ``t = u.x`` and ``s2 = |u|^2``,
  ``H_k := |u|^k He_k(t/|u|)`` obeys ``H_{k+1} = t H_k - k s2 H_{k-1}`` (no division by ``|u|``,
  so ``u = 0`` is fine: ``H_0 = 1`` and ``H_k = 0`` for k >= 1).
* Tensor recursion ``He_{k+1}(x)_{i_0..i_k} = x_{i_0} He_k(x)_{i_1..i_k}
  - sum_r delta_{i_0 i_r} He_{k-1}(x)_{i_1..^i_r..i_k}`` (used by :func:`hermite_tensor`).
* Gaussian (Wick) form ``He_k(x) = E_g[(x + i g)^{(x)k}]``, g ~ N(0, I): expanding,
  ``He_k(x) = sum_j (-1)^j sum_{|P| = 2j} E[g^{(x)2j}]_P (x) x^{(x)(k-2j)}_{P^c}``, the inner sum over
  the C(k, 2j) position sets P and ``E[g^{(x)2j}]`` the Isserlis tensor (sum over perfect matchings of
  identity factors). Averaging over samples replaces ``x^{(x)r}`` by the raw moments
  ``S_r = mean(y x^{(x)r})``: :func:`assemble_hermite_tensor`. Projections: contracting every slot with
  the columns of a ``d x m`` matrix P replaces x by ``P^T x`` and I by ``P^T P``; for an orthonormal
  basis this is the identity ``He_k(x)[P, ..., P] = He_k(P^T x)`` (Hermite tensor in m dimensions).
* Full contraction: ``He_k(x)[u_1..u_k] = sum_{partial matchings M} (-1)^|M|
  prod_{(a,b) in M} <u_a, u_b> prod_{c not in M} <x, u_c>``, evaluated by the subset recursion
  ``F(S) = <x, u_s> F(S - s) - sum_{t in S - s} <u_s, u_t> F(S - s - t)`` (s = min S), memoised.
* Slices with f free slots (from the recursion contracted with the last slots):
  ``He_{f+1}(x)[.^f, g] = (g.x) He_f(x) - sum_r g@r (x) He_{f-1}(x)``,
  ``He_{f+2}(x)[.^f, G] = (x'Gx - tr G) He_f(x) - 2 sum_r (Gx)@r (x) He_{f-1}(x)
  + sum_{r != s} G@(r,s) (x) He_{f-2}(x)`` (G symmetrised), where ``v@r (x) T`` puts v in slot r and
  T in the other slots. For f = 2 these are the contractions of ATV21 eq. (12). The sample
  statistics use ``E[y (Gx)@r (x) He_{f-1}] = (G x_r T_f) + sum_{t != r} G@(r,t) (x) T_{f-2}``
  (``x_r``: product with G in mode r), which needs only raw moments, because
  ``x (x) He_{f-1}(x) = He_f(x) + sum_t I@(0,t) (x) He_{f-2}(x)``.
* General partial contraction with f free slots and c vectors: summing the matching form by the
  role of each contracted slot (paired with a free slot: set A, injection pi; paired with another
  contracted slot: perfect matching M of B; single: set R),
  ``He_{f+c}(x)[.^f, v_1..v_c] = sum (-1)^{|A|+|M|} prod_M <v_a, v_b>
  sum_pi (v_a @ pi(a))_{a in A} (x) [prod_{r in R} (v_r.x)] He_{f-|A|}(x)``; the bracket times y is
  averaged from raw moments weighted by ``y prod_R (v_r.x)``.
* Lemma 3.5 for a unit ``act(w.x + b)`` with ``w = s u``, ``|u| = 1``:
  ``E[act(w.x + b) He_k(x)] = c_k(b; s) u^{(x)k}``, ``c_k(b; s) = E_z[act(s z + b) He_k(z)]``.
  Positively homogeneous activations of degree q (relu, leaky_relu, step, relu_power, identity):
  ``c_k(b; s) = s^q c_k(b/s; 1)`` (the canonical form of ``TwoLayerNetwork.canonical``). Other
  activations: ``exp`` has the closed form ``s^k exp(b + s^2/2)``; the rest are integrated
  numerically for the scaled activation ``t -> act(s t)`` at bias ``b/s`` (kinks rescaled by 1/s).
  ``s = 0`` gives the constant ``act(b)``: ``c_0 = act(b)``, ``c_k = 0`` for k >= 1.

Design (moments interface)
--------------------------
This module is pure math on arrays: per-sample tensors and contractions, the raw-moment assembly, and
the population expansion :class:`HermiteExpansion` (``f_hat_k = sum_i beta_{k,i} u_i^{(x)k}``, a
symmetric CP form, so every contraction is a few small matrix products). The streaming layer lives in
:mod:`nnrecover.moments.hermite`:

* one :class:`~nnrecover.moments.Statistic` per estimate (dense/projected tensor, rank-one
  contractions, full contractions, vector slices, matrix slices). Each accumulates **weighted raw
  moments** (``sum_n w_n x_n^{(x)r}``, one GEMM per order over the distinct monomials of the rows)
  or per-sample contractions, so ``update``/``merge`` are plain additions; ``finalize`` assembles the
  Hermite quantity. Each statistic also has ``exact(network)``, the same quantity from Lemma 3.5 with the
  same shape, so one object describes "what to compute" in both modes.
* ``HermiteMoments`` (abstract) with ``SampleHermiteMoments(data)`` (one pass over the data per call,
  via :func:`~nnrecover.moments.accumulate`; ``compute`` runs several statistics in one pass) and
  ``PopulationHermiteMoments(network)`` (exact). Same methods, same shapes.

Shapes: statistics always return a leading output axis of length p; ``HermiteMoments`` drops it when
there is a single output (like ``TwoLayerNetwork.predict``) or an ``output`` was selected.
"""

from __future__ import annotations

import itertools
import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._validation import as_real_array
from .activations import Activation, get_activation
from .errors import InputError

__all__ = [
    "MAX_DENSE_ELEMENTS",
    "MAX_CONTRACTION_ORDER",
    "hermite_1d",
    "hermite_1d_all",
    "scaled_hermite_all",
    "hermite_tensor",
    "gaussian_moment_tensor",
    "assemble_hermite_tensor",
    "hermite_contract",
    "hermite_rank_one",
    "hermite_vector_slice",
    "hermite_matrix_slice",
    "khatri_rao_power",
    "placement_sum",
    "n_matchings",
    "activation_hermite_coefficients",
    "HermiteExpansion",
    "network_hermite_expansion",
]

#: Largest number of float64 entries a dense result may have (512 MiB); larger requests raise
#: :class:`~nnrecover.errors.InputError` pointing to the contraction methods.
MAX_DENSE_ELEMENTS = 1 << 26

#: Largest order of :func:`hermite_contract` (the matching recursion visits up to 2^(k-1) subsets).
MAX_CONTRACTION_ORDER = 16

# Bound on the number of entries of temporaries built per row block (32 MiB).
_TEMP_ELEMENTS = 1 << 22


# ============================================================================ validation helpers

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


def _samples(X: Any, name: str = "X") -> tuple[np.ndarray, bool]:
    """Samples as (n, d) float64 and whether a single point (d,) was given."""
    arr = as_real_array(X, name)
    if arr.ndim == 1:
        return arr[None, :], True
    if arr.ndim != 2:
        raise InputError(f"{name} must have shape (n_samples, n_features) or (n_features,), got {arr.shape}.")
    return arr, False


def _check_dense(n_elements: int, what: str) -> None:
    if n_elements > MAX_DENSE_ELEMENTS:
        raise InputError(
            f"{what} would have {n_elements} entries (> {MAX_DENSE_ELEMENTS}); use a contraction "
            "(rank-one, full, slice or projected) instead of the dense tensor, or reduce the dimension.")


def _vectors(V: Any, name: str, d: int | None, *, batch_ndim: int) -> tuple[np.ndarray, bool]:
    """Contraction vectors/matrices: returns a batched array and whether the batch axis was added.

    ``batch_ndim`` is the number of trailing axes of one item (1 for a vector, 2 for a matrix or a
    tuple of vectors).
    """
    arr = as_real_array(V, name)
    single = arr.ndim == batch_ndim
    if single:
        arr = arr[None]
    if arr.ndim != batch_ndim + 1:
        raise InputError(f"{name} has shape {np.shape(V)}; expected {batch_ndim} or {batch_ndim + 1} axes.")
    if d is not None and arr.shape[-1] != d:
        raise InputError(f"{name} has last dimension {arr.shape[-1]} but the data have {d} features.")
    return arr, single


# ============================================================================ 1-D polynomials

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
    out = np.empty(t.shape + (k_max + 1,))
    out[..., 0] = 1.0
    if k_max >= 1:
        out[..., 1] = t
    if normalized:
        for k in range(1, k_max):
            out[..., k + 1] = (t * out[..., k] - math.sqrt(k) * out[..., k - 1]) / math.sqrt(k + 1)
    else:
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


def n_matchings(k: int) -> int:
    """Number of partial matchings of ``k`` points (telephone numbers 1, 1, 2, 4, 10, 26, 76, 232, 764...).

    This is the number of terms of the matching (Wick) form of ``He_k(x)``.
    """
    k = _check_order(k, "k")
    a, b = 1, 1
    for j in range(1, k):
        a, b = b, b + j * a
    return b if k >= 1 else 1


# ============================================================================ tensor helpers

def khatri_rao_power(V: np.ndarray, k: int) -> np.ndarray:
    """Row-wise Khatri-Rao power: row i of the result is ``vec(v_i^{(x)k})`` (C order), shape (m, d^k).

    ``k = 0`` gives a column of ones. (ATV21 writes ``W^{(.)k}`` for the transpose, columns
    ``w_i^{(x)k}``.)
    """
    V = np.asarray(V, dtype=np.float64)
    out = np.ones((V.shape[0], 1))
    for _ in range(k):
        out = (out[:, :, None] * V[:, None, :]).reshape(V.shape[0], -1)
    return out


def placement_sum(A: np.ndarray, a: int, f: int) -> np.ndarray:
    """Sum over the C(f, a) ways of placing a group of ``a`` slots among ``f`` slots.

    ``A`` has shape ``lead + (group X: a axes) + (group Y: f - a axes)``. For every position set P
    (``|P| = a``, increasing), the X axes are moved to the positions P (in order) and the Y axes to the
    complement (in order); the results are summed. When both groups are symmetric tensors this is the
    symmetric "sum over distinct placements" ``{X (x) Y}`` of ATV21 Definition A.2.
    """
    lead = A.ndim - f
    if a == 0 or a == f:
        return A.copy()
    out = np.zeros(A.shape[:lead] + (A.shape[-1],) * f) if f else A.copy()
    base = list(range(lead))
    for P in itertools.combinations(range(f), a):
        comp = [i for i in range(f) if i not in P]
        perm = [0] * f
        for t, pos in enumerate(P):
            perm[pos] = t
        for t, pos in enumerate(comp):
            perm[pos] = a + t
        out += A.transpose(base + [lead + q for q in perm])
    return out


def _outer_groups(X: np.ndarray, nx: int, Y: np.ndarray, ny: int) -> np.ndarray:
    """``lead_X + lead_Y`` broadcast outer product with the X tensor axes before the Y tensor axes.

    ``X`` has shape ``lead + (d,)*nx`` and ``Y`` shape ``lead' + (d,)*ny``; the lead shapes are
    broadcast against each other.
    """
    lx, ly = X.ndim - nx, Y.ndim - ny
    lead = np.broadcast_shapes(X.shape[:lx], Y.shape[:ly])
    Xb = X.reshape((1,) * (len(lead) - lx) + X.shape[:lx] + X.shape[lx:] + (1,) * ny)
    Yb = Y.reshape((1,) * (len(lead) - ly) + Y.shape[:ly] + (1,) * nx + Y.shape[ly:])
    return Xb * Yb


def _mode_product_sum(G: np.ndarray, T: np.ndarray, f: int) -> np.ndarray:
    """``sum_r G x_r T``: multiply mode r of the order-f tensor T by the matrix G, summed over r.

    ``G`` has shape ``(s, d, d)``, ``T`` shape ``(p,) + (d,)*f``; result ``(p, s) + (d,)*f``.
    """
    idx = "abcdefghijklmnopqr"[:f]  # avoids the letters P, s, z used below
    out = None
    for r in range(f):
        src = idx[:r] + "z" + idx[r + 1:]
        term = np.einsum(f"s{idx[r]}z,P{src}->Ps{idx}", G, T)
        out = term if out is None else out + term
    return out


# ============================================================================ dense tensors

def hermite_tensor(order: int, x: Any) -> np.ndarray:
    """Dense multivariate Hermite tensor ``He_k(x)`` (ATV21 Def. A.2), for small ``d``.

    Parameters
    ----------
    order : int
        ``k >= 0``.
    x : array_like of shape (d,) or (n, d)
        One point or a batch of points.

    Returns
    -------
    ndarray of shape ``(d,)*k`` or ``(n,) + (d,)*k``

    Notes
    -----
    Built by the recursion ``He_{k+1}(x)_{i_0..i_k} = x_{i_0} He_k(x)_{i_1..i_k} -
    sum_r delta_{i_0 i_r} He_{k-1}(x)_{i_1..^i_r..i_k}`` (ATV21 Definition A.2, recursive form). Entry
    ``alpha`` equals ``prod_t He_{n_t(alpha)}(x_t)`` (product form).
    """
    k = _check_order(order)
    X, single = _samples(x, "x")
    n, d = X.shape
    _check_dense(n * d ** k, f"He_{k}(x) for {n} point(s) in {d} dimensions")
    prev = np.ones((n,))
    cur = X.copy() if k >= 1 else prev
    eye = np.eye(d)
    for j in range(1, k):  # cur = He_j (n, d^j), prev = He_{j-1}; build He_{j+1}
        nxt = X.reshape((n, d) + (1,) * j) * cur[:, None]
        A = eye.reshape((1, d, d) + (1,) * (j - 1)) * prev.reshape((n, 1, 1) + prev.shape[1:])
        for r in range(1, j + 1):
            nxt -= np.moveaxis(A, 2, 1 + r)
        prev, cur = cur, nxt
    return np.asarray(cur[0]) if single else cur


def gaussian_moment_tensor(order: int, cov: Any) -> np.ndarray:
    """Isserlis tensor ``E[g^{(x)order}]`` for ``g ~ N(0, cov)``: sum over perfect matchings of cov factors.

    Zero for odd orders; ``order = 0`` gives ``1.0`` (a 0-d array).
    """
    k = _check_order(order)
    C = as_real_array(cov, "cov")
    if C.ndim != 2 or C.shape[0] != C.shape[1]:
        raise InputError(f"cov must be a square matrix, got shape {C.shape}.")
    m = C.shape[0]
    _check_dense(m ** k, f"E[g^(x){k}] in {m} dimensions")
    if k % 2:
        return np.zeros((m,) * k)
    E = np.array(1.0)
    for j in range(1, k // 2 + 1):  # E_{2j}[i_0, ...] = sum_t C[i_0, i_t] E_{2j-2}[others]
        A = C.reshape((m, m) + (1,) * (2 * j - 2)) * E.reshape((1, 1) + E.shape)
        E = sum(np.moveaxis(A, 1, t) for t in range(1, 2 * j))
    return E


def assemble_hermite_tensor(raw_moments: dict, order: int, cov: Any = None) -> np.ndarray:
    """Hermite tensor from raw moments: ``T_k = sum_j (-1)^j {E[g^{(x)2j}] (x) S_{k-2j}}``.

    Parameters
    ----------
    raw_moments : dict
        ``r -> S_r`` for r = order, order-2, ..., each of shape ``lead + (m,)*r`` (the same lead for
        all), e.g. ``S_r = mean(y x^{(x)r})``.
    order : int
    cov : array of shape (m, m), optional
        Covariance replacing the identity in the matchings; ``P^T P`` for data projected on the columns
        of P (identity by default).

    Returns
    -------
    ndarray of shape ``lead + (m,)*order``

    Notes
    -----
    Gaussian form ``He_k(x) = E_g[(x + i g)^{(x)k}]`` (module docstring), linear in the raw moments;
    ``{A (x) B}`` is the sum over the C(k, 2j) placements (:func:`placement_sum`). With S_r the raw
    moments of ``(x_n, y_n)`` this is the estimator T_k of ATV21 eq. (6).
    """
    k = _check_order(order)
    missing = [r for r in range(k, -1, -2) if r not in raw_moments]
    if missing:
        raise InputError(f"raw_moments lacks the order(s) {missing} needed for order {k}.")
    top = np.asarray(raw_moments[k], dtype=np.float64)
    lead = top.shape[:top.ndim - k]
    m = top.shape[-1] if k else (np.asarray(cov).shape[0] if cov is not None else None)
    if cov is None:
        C = np.eye(m) if m is not None else None
    else:
        C = as_real_array(cov, "cov")
    out = top.copy()
    for j in range(1, k // 2 + 1):
        E = gaussian_moment_tensor(2 * j, C)
        S = np.asarray(raw_moments[k - 2 * j], dtype=np.float64)
        if S.shape != lead + (m,) * (k - 2 * j):
            raise InputError(f"raw moment of order {k - 2 * j} has shape {S.shape}, expected "
                             f"{lead + (m,) * (k - 2 * j)}.")
        A = _outer_groups(E, 2 * j, S, k - 2 * j)
        out += (-1.0) ** j * placement_sum(A, 2 * j, k)
    return out


# ============================================================================ contractions per sample

def hermite_contract(X: Any, U: Any) -> np.ndarray:
    """Full contractions ``He_k(x_n)[u_1, ..., u_k]`` per sample, without any d^k array.

    Parameters
    ----------
    X : array_like of shape (n, d) or (d,)
    U : array_like of shape (k, d) or (s, k, d)
        One tuple of k vectors, or s tuples.

    Returns
    -------
    ndarray of shape (n,), (n, s), (), or (s,) (batch axes dropped where the input had none)

    Notes
    -----
    Matching (Wick) form of ATV21 Definition A.2, by the memoised subset recursion in the
    module docstring: cost O(n s (k d + 2^(k-1) k)).
    """
    Xs, single_x = _samples(X)
    Us, single_u = _vectors(U, "U", Xs.shape[1], batch_ndim=2)
    k = _check_order(Us.shape[1], "order (number of vectors in U)", maximum=MAX_CONTRACTION_ORDER)
    out = _contract_core(Xs, Us, k)
    if single_u:
        out = out[:, 0]
    return out[0] if single_x else out


def _contract_core(X: np.ndarray, U: np.ndarray, k: int) -> np.ndarray:
    n, s = X.shape[0], U.shape[0]
    if k == 0:
        return np.ones((n, s))
    # P[a] = <x_n, u_{s,a}> as contiguous (n, s) blocks, one per slot a
    P = np.ascontiguousarray((X @ U.reshape(s * k, -1).T).reshape(n, s, k).transpose(2, 0, 1))
    Gm = np.ascontiguousarray(np.einsum("sad,sbd->abs", U, U))  # Gm[a, b] = <u_{s,a}, u_{s,b}> (s,)
    memo: dict[int, np.ndarray] = {0: np.ones((n, s))}

    def F(mask: int) -> np.ndarray:
        val = memo.get(mask)
        if val is not None:
            return val
        s0 = (mask & -mask).bit_length() - 1
        rest = mask & ~(1 << s0)
        val = P[s0] * F(rest)
        t_bits = rest
        while t_bits:
            t = (t_bits & -t_bits).bit_length() - 1
            t_bits &= t_bits - 1
            val -= Gm[s0, t] * F(rest & ~(1 << t))
        memo[mask] = val
        return val

    return F((1 << k) - 1)


def hermite_rank_one(X: Any, U: Any, orders: Any) -> np.ndarray:
    """Rank-one contractions ``He_k(x_n)[u, ..., u] = |u|^k He_k(u.x_n / |u|)`` per sample.

    Parameters
    ----------
    X : array_like of shape (n, d) or (d,)
    U : array_like of shape (r, d) or (d,)
        Contraction vectors (any norms, including zero).
    orders : int or sequence of int

    Returns
    -------
    ndarray of shape ``(n, [n_orders,] r)``; the orders axis is present when ``orders`` is a sequence,
    the ``n`` / ``r`` axes when ``X`` / ``U`` were 2-D.
    """
    Xs, single_x = _samples(X)
    Us, single_u = _vectors(U, "U", Xs.shape[1], batch_ndim=1)
    ks, scalar = _check_orders(orders)
    H = scaled_hermite_all(int(ks.max()), Xs @ Us.T, np.sum(Us * Us, axis=1))  # (n, r, K+1)
    out = np.moveaxis(H[..., ks], -1, 1)  # (n, n_orders, r)
    if scalar:
        out = out[:, 0]
    if single_u:
        out = out[..., 0]
    return out[0] if single_x else out


def hermite_vector_slice(X: Any, order: int, g: Any) -> np.ndarray:
    """Per-sample slices ``He_k(x_n)[., ..., ., g]`` with ``f = k - 1`` free slots (dense in them).

    ``He_{f+1}(x)[.^f, g] = (g.x) He_f(x) - sum_r g@r (x) He_{f-1}(x)``; for k = 3 this is
    ``(x'g)(xx' - I) - x g' - g x'`` (ATV21 Definition A.2).

    Parameters
    ----------
    X : array_like of shape (n, d) or (d,)
    order : int
        ``k >= 1``.
    g : array_like of shape (d,) or (s, d)

    Returns
    -------
    ndarray of shape ``([n,] [s,]) + (d,)*(k-1)``
    """
    Xs, single_x = _samples(X)
    k = _check_order(order, minimum=1)
    gs, single_g = _vectors(g, "g", Xs.shape[1], batch_ndim=1)
    n, d = Xs.shape
    f = k - 1
    _check_dense(n * gs.shape[0] * d ** f, f"He_{k}(x)[., g] slices")
    He_f = hermite_tensor(f, Xs)  # (n,) + (d,)*f
    out = _outer_groups(Xs @ gs.T, 0, He_f[:, None], f)  # (n, s) + (d,)*f
    if f >= 1:
        He_f1 = hermite_tensor(f - 1, Xs)[:, None]  # (n, 1) + (d,)*(f-1)
        out -= placement_sum(_outer_groups(gs[None], 1, He_f1, f - 1), 1, f)
    if single_g:
        out = out[:, 0]
    return out[0] if single_x else out


def hermite_matrix_slice(X: Any, order: int, G: Any) -> np.ndarray:
    """Per-sample slices ``He_k(x_n)[., ..., ., G]`` with ``f = k - 2`` free slots (G symmetrised).

    ``He_{f+2}(x)[.^f, G] = (x'Gx - tr G) He_f(x) - 2 sum_r (Gx)@r (x) He_{f-1}(x)
    + sum_{r != s} G@(r,s) (x) He_{f-2}(x)``; for k = 4 this is
    ``(x'Gx - tr G)(xx' - I) - 2(G x x' + x x' G) + 2G`` (ATV21 Definition A.2).

    Parameters
    ----------
    X : array_like of shape (n, d) or (d,)
    order : int
        ``k >= 2``.
    G : array_like of shape (d, d) or (s, d, d)

    Returns
    -------
    ndarray of shape ``([n,] [s,]) + (d,)*(k-2)``
    """
    Xs, single_x = _samples(X)
    k = _check_order(order, minimum=2)
    Gs, single_G = _vectors(G, "G", Xs.shape[1], batch_ndim=2)
    if Gs.shape[-2] != Gs.shape[-1]:
        raise InputError(f"G must be square (d, d), got shape {np.shape(G)}.")
    Gs = 0.5 * (Gs + np.swapaxes(Gs, 1, 2))
    n, d = Xs.shape
    f = k - 2
    _check_dense(n * Gs.shape[0] * d ** f, f"He_{k}(x)[., G] slices")
    quad = np.einsum("ni,sij,nj->ns", Xs, Gs, Xs) - np.trace(Gs, axis1=1, axis2=2)
    out = _outer_groups(quad, 0, hermite_tensor(f, Xs)[:, None], f)
    if f >= 1:
        Gx = np.einsum("sij,nj->nsi", Gs, Xs)  # (n, s, d)
        out -= 2.0 * placement_sum(_outer_groups(Gx, 1, hermite_tensor(f - 1, Xs)[:, None], f - 1), 1, f)
    if f >= 2:
        A = _outer_groups(Gs[None], 2, hermite_tensor(f - 2, Xs)[:, None], f - 2)
        out += 2.0 * placement_sum(A, 2, f)  # ordered pairs r != s = 2 x unordered placements
    if single_G:
        out = out[:, 0]
    return out[0] if single_x else out


# ============================================================================ population (Lemma 3.5)

def activation_hermite_coefficients(activation: "str | Activation", k_max: int, bias: Any = 0.0,
                                    scale: Any = 1.0) -> np.ndarray:
    """``c_k(b; s) = E_{z ~ N(0,1)}[act(s z + b) He_k(z)]`` for k = 0..k_max.

    For a hidden unit ``act(w.x + b)`` with ``|w| = s`` and ``x ~ N(0, I)``,
    ``E[act(w.x + b) He_k(x)] = c_k(b; s) (w/s)^{(x)k}`` (ATV21 Lemma 3.5, generalised to any
    activation and row norm).

    Parameters
    ----------
    activation : str or Activation
    k_max : int
    bias, scale : array_like
        Biases ``b`` and row norms ``s >= 0`` (broadcast together).

    Returns
    -------
    ndarray of shape ``broadcast(bias, scale).shape + (k_max + 1,)``

    Notes
    -----
    * ``s = 0``: the unit is the constant ``act(b)``.
    * Positively homogeneous activations of degree q: ``c_k(b; s) = s^q c_k(b/s; 1)`` (the scale moves
      into the output weight as in ``TwoLayerNetwork.canonical``); relu uses the closed form of
      Lemma 3.5.
    * ``exp``: ``c_k(b; s) = s^k exp(b + s^2/2)``.
    * Otherwise the activation ``t -> act(s t)`` (kinks divided by s) is integrated numerically at bias
      ``b/s`` by :meth:`Activation.hermite_coefficients` (Gauss-Hermite or split adaptive quadrature,
      about 1e-13 relative; very large ``s`` makes smooth activations steep and the 256-node rule
      less accurate).
    """
    act = get_activation(activation)
    k_max = _check_order(k_max, "k_max")
    b = as_real_array(bias, "bias")
    s = as_real_array(scale, "scale")
    if np.any(s < 0):
        raise InputError("scale (the row norm |w|) must be >= 0.")
    b, s = np.broadcast_arrays(b, s)
    out = np.zeros(b.shape + (k_max + 1,))
    zero = s == 0
    if np.any(zero):
        out[zero, 0] = act(b[zero])
    pos = ~zero
    if not np.any(pos):
        return out
    bp, sp = b[pos], s[pos]
    if act.degree is not None:
        out[pos] = (sp ** act.degree)[:, None] * act.hermite_coefficients(k_max, bp / sp)
    elif act.name == "exp":
        out[pos] = np.exp(bp + 0.5 * sp ** 2)[:, None] * sp[:, None] ** np.arange(k_max + 1)
    else:
        res = np.empty((bp.size, k_max + 1))
        for sv in np.unique(sp):
            sel = sp == sv
            if sv == 1.0:
                res[sel] = act.hermite_coefficients(k_max, bp[sel])
            else:
                res[sel] = _scaled_activation(act, float(sv)).hermite_coefficients(
                    k_max, bp[sel] / sv, method="quadrature")
        out[pos] = res
    return out


def _scaled_activation(act: Activation, s: float) -> Activation:
    """The activation ``t -> act(s t)`` (s > 0), for quadrature only."""
    f, df = act.func, act.deriv
    return Activation(
        name=act.name, func=lambda t: f(s * np.asarray(t, dtype=np.float64)),
        deriv=lambda t: s * df(s * np.asarray(t, dtype=np.float64)), param=act.param, degree=None,
        inverse_positive=None, rectified=act.rectified, kinks=tuple(k0 / s for k0 in act.kinks),
        closed_form=None)


@dataclass(frozen=True, eq=False)
class HermiteExpansion:
    """Exact Hermite coefficient tensors of a two-layer network in symmetric CP form (ATV21 Lemma 3.5).

    ``f_hat_k[p] = sum_i coefficients[p, i, k] u_i^{(x)k}  (+ offset[p] when k = 0)``, where
    ``f_hat_k = E[f(x) He_k(x)]`` for ``x ~ N(0, I_d)``.

    Attributes
    ----------
    directions : ndarray of shape (m, d)
        Unit directions ``u_i = w_i/|w_i|`` (zero rows for zero hidden weights).
    coefficients : ndarray of shape (p, m, K + 1)
        ``A[p, i] c_k(b_i; |w_i|)`` for k = 0..K (``K = max_order``).
    offset : ndarray of shape (p,)
        Output bias, part of ``f_hat_0`` only.

    Notes
    -----
    All methods take batched contraction arguments and return a leading output axis of length p;
    the :class:`nnrecover.moments.hermite.HermiteMoments` classes handle single arguments and squeezing.
    """

    directions: np.ndarray
    coefficients: np.ndarray
    offset: np.ndarray

    @property
    def max_order(self) -> int:
        return self.coefficients.shape[2] - 1

    @property
    def n_inputs(self) -> int:
        return self.directions.shape[1]

    @property
    def n_outputs(self) -> int:
        return self.coefficients.shape[0]

    def weights(self, order: int) -> np.ndarray:
        """``beta[p, i] = A[p, i] c_order(b_i; |w_i|)``, shape (p, m)."""
        k = _check_order(order, maximum=self.max_order)
        return self.coefficients[:, :, k]

    def _offset(self, k: int) -> np.ndarray:
        return self.offset if k == 0 else np.zeros_like(self.offset)

    def tensor(self, order: int, basis: np.ndarray | None = None) -> np.ndarray:
        """Dense ``f_hat_k``, or ``f_hat_k[P, ..., P]`` for ``basis`` P (d, m); shape ``(p,) + (m,)*k``."""
        k = _check_order(order, maximum=self.max_order)
        V = self.directions if basis is None else self.directions @ basis
        m = V.shape[1]
        _check_dense(self.n_outputs * m ** k, f"f_hat_{k} in {m} dimensions")
        out = self.weights(k) @ khatri_rao_power(V, k)
        if k == 0:
            out[:, 0] += self.offset
        return out.reshape((self.n_outputs,) + (m,) * k)

    def rank_one(self, U: np.ndarray, orders: np.ndarray) -> np.ndarray:
        """``f_hat_k(u, ..., u)`` for rows u of ``U`` (r, d) and every k in ``orders``: (p, n_orders, r)."""
        proj = self.directions @ U.T  # (m, r)
        out = np.empty((self.n_outputs, len(orders), U.shape[0]))
        for j, k in enumerate(orders):
            out[:, j] = self.weights(int(k)) @ proj ** int(k) + self._offset(int(k))[:, None]
        return out

    def contract(self, U: np.ndarray) -> np.ndarray:
        """``f_hat_k(u_1, ..., u_k)`` for ``U`` of shape (s, k, d): (p, s)."""
        k = U.shape[1]
        prod = np.prod(np.einsum("md,skd->msk", self.directions, U), axis=2)  # (m, s)
        return self.weights(k) @ prod + self._offset(k)[:, None]

    def vector_slice(self, order: int, g: np.ndarray) -> np.ndarray:
        """``f_hat_k(., ..., ., g)`` for ``g`` of shape (s, d): ``(p, s) + (d,)*(k-1)``."""
        k = _check_order(order, minimum=1, maximum=self.max_order)
        f, d = k - 1, self.n_inputs
        _check_dense(self.n_outputs * g.shape[0] * d ** f, f"f_hat_{k}(., g) slices")
        coef = self.weights(k)[:, :, None] * (self.directions @ g.T)[None]  # (p, m, s)
        out = np.einsum("pms,mD->psD", coef, khatri_rao_power(self.directions, f))
        return out.reshape((self.n_outputs, g.shape[0]) + (d,) * f)

    def partial_contract(self, order: int, V: np.ndarray) -> np.ndarray:
        """``f_hat_k(., ..., ., v_1, ..., v_c)`` for ``V`` of shape (s, c, d): ``(p, s) + (d,)*(k-c)``."""
        k = _check_order(order, maximum=self.max_order)
        c, d = V.shape[1], self.n_inputs
        f = k - c
        if f < 0:
            raise InputError(f"cannot contract {c} vectors into an order-{k} tensor.")
        _check_dense(self.n_outputs * V.shape[0] * d ** f, f"f_hat_{k} partial contractions")
        proj = np.prod(np.einsum("md,scd->msc", self.directions, V), axis=2)  # (m, s)
        out = np.einsum("pms,mD->psD", self.weights(k)[:, :, None] * proj[None],
                        khatri_rao_power(self.directions, f))
        if k == 0:
            out += self.offset[:, None, None]
        return out.reshape((self.n_outputs, V.shape[0]) + (d,) * f)

    def matrix_slice(self, order: int, G: np.ndarray) -> np.ndarray:
        """``f_hat_k(., ..., ., G)`` for ``G`` of shape (s, d, d): ``(p, s) + (d,)*(k-2)``."""
        k = _check_order(order, minimum=2, maximum=self.max_order)
        f, d = k - 2, self.n_inputs
        _check_dense(self.n_outputs * G.shape[0] * d ** f, f"f_hat_{k}(., G) slices")
        quad = np.einsum("md,sde,me->ms", self.directions, G, self.directions)
        coef = self.weights(k)[:, :, None] * quad[None]
        out = np.einsum("pms,mD->psD", coef, khatri_rao_power(self.directions, f))
        return out.reshape((self.n_outputs, G.shape[0]) + (d,) * f)


def network_hermite_expansion(network: Any, max_order: int) -> HermiteExpansion:
    """Exact :class:`HermiteExpansion` of a :class:`~nnrecover.network.TwoLayerNetwork` up to ``max_order``.

    Valid for inputs ``x ~ N(0, I_d)`` (the setting of ATV21). Rows of any norm and any activation
    are handled by :func:`activation_hermite_coefficients`.
    """
    from .network import TwoLayerNetwork

    if not isinstance(network, TwoLayerNetwork):
        raise InputError(f"network must be a TwoLayerNetwork, got {type(network).__name__}.")
    K = _check_order(max_order, "max_order")
    W = network.hidden_weights
    s = np.linalg.norm(W, axis=1)
    U = np.zeros_like(W)
    nz = s > 0
    U[nz] = W[nz] / s[nz, None]
    c = activation_hermite_coefficients(network.activation, K, network.hidden_bias, s)  # (m, K+1)
    coeffs = network.output_weights[:, :, None] * c[None]
    return HermiteExpansion(U, coeffs, network.output_bias.copy())

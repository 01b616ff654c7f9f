r"""Multivariate Hermite tensors ``He_k(x)`` and their contractions, without a ``d^k`` array where a contraction does.

Awasthi et al. 2021, Appendix A, Definition A.2; the formulas are those of :mod:`nnrecover.hermite`.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from .._validation import as_real_array
from ..errors import InputError
from .polynomials import _check_order, _check_orders, scaled_hermite_all

__all__ = ["MAX_DENSE_ELEMENTS", "MAX_CONTRACTION_ORDER", "hermite_tensor", "gaussian_moment_tensor", "assemble_hermite_tensor",
           "hermite_contract", "hermite_rank_one", "hermite_vector_slice", "hermite_matrix_slice", "khatri_rao_power",
           "placement_sum", "n_matchings"]

#: Largest number of float64 entries a dense result may have (512 MiB); larger requests raise
#: :class:`~nnrecover.errors.InputError` pointing to the contraction methods.
MAX_DENSE_ELEMENTS = 1 << 26


#: Largest order of :func:`hermite_contract` (the matching recursion visits up to 2^(k-1) subsets).
MAX_CONTRACTION_ORDER = 16


# Bound on the number of entries of temporaries built per row block (32 MiB).
_TEMP_ELEMENTS = 1 << 22


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


def n_matchings(k: int) -> int:
    """Number of partial matchings of ``k`` points (telephone numbers 1, 1, 2, 4, 10, 26, 76, 232, 764...).

    This is the number of terms of the matching (Wick) form of ``He_k(x)``.
    """
    k = _check_order(k, "k")
    a, b = 1, 1
    for j in range(1, k):
        a, b = b, b + j * a
    return b if k >= 1 else 1


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

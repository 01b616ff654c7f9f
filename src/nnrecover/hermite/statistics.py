r"""Streaming Hermite-moment statistics and the sample / population ``HermiteMoments`` interface.

The estimator of ATV21 eq. (6) is ``T_k = (1/N) sum_n y_n He_k(x_n)``, unbiased for the Hermite
coefficient tensor ``f_hat_k = E[f(x) He_k(x)]`` (Awasthi et al. Definition A.2, Lemma 3.5, eq. (6)). Each class below is one
quantity derived from it, computed in one pass over any data source (arrays, chunk streams, dask arrays
through :func:`~nnrecover.moments.accumulate`) and never as an order-k tensor in d dimensions unless
that is what was asked for:

===========================================  =============================  =============================
statistic                                    quantity                       cost per sample
===========================================  =============================  =============================
:class:`HermiteTensorStatistic`              dense T_k, or T_k[P, .., P]    O(m^k), m = d or cols of P
:class:`HermiteRankOneStatistic`             T_k(u, .., u), many u and k    O(d r + r k_max)
:class:`HermiteContractionStatistic`         T_k(u_1, .., u_k)              O(s (k d + 2^(k-1) k))
:class:`HermiteVectorSliceStatistic`         T_k(., .., g), k-1 free slots  O(s d^(k-1)): T_3, T_5 slices
:class:`HermiteMatrixSliceStatistic`         T_k(., .., G), k-2 free slots  O(s d^(k-2)): T_4, T_6 slices
:class:`HermitePartialContractionStatistic`  T_k(., .., v_1, .., v_c)       O(s 2^c d^(k-c))
===========================================  =============================  =============================

Dense quantities accumulate *weighted raw moments* ``sum_n w_n x_n^{(x)r}`` as one GEMM per order of
the matrices of distinct monomials of the rows (``(M_a * w)^T M_b``, a + b = r: the symmetric
Khatri-Rao product without repeated columns), so update and merge are sums;
``finalize`` assembles the Hermite quantity with the formulas of :mod:`nnrecover.hermite`. Contractions
accumulate per-sample values (and their squares, for :meth:`std_error`).

Every statistic has ``exact(network)``: the population value ``f_hat`` from ATV21 Lemma 3.5 for
``x ~ N(0, I_d)``, with exactly the shape of ``finalize()``. Statistics always keep a leading output axis
(length p, or 1 with ``output=j``). The :class:`HermiteMoments` front ends drop it when p = 1.
"""

from __future__ import annotations

import abc
import functools
import itertools
import math
import numbers
from typing import Any, Sequence

import numpy as np

from .._validation import as_real_array
from ..data import accumulate
from ..errors import AssumptionError, InputError
from ..moments.base import Statistic
from .expansions import HermiteExpansion, network_hermite_expansion
from .polynomials import _check_order, _check_orders
from .tensors import (
    _TEMP_ELEMENTS,
    MAX_CONTRACTION_ORDER,
    _check_dense,
    _contract_core,
    _mode_product_sum,
    _outer_groups,
    _vectors,
    assemble_hermite_tensor,
    placement_sum,
)

__all__ = [
    "HermiteTensorStatistic",
    "HermiteRankOneStatistic",
    "HermiteContractionStatistic",
    "HermiteVectorSliceStatistic",
    "HermiteMatrixSliceStatistic",
    "HermitePartialContractionStatistic",
    "HermiteMoments",
    "SampleHermiteMoments",
    "PopulationHermiteMoments",
]


def _check_output(output: Any) -> int | None:
    if output is None:
        return None
    if isinstance(output, bool) or not isinstance(output, numbers.Integral) or output < 0:
        raise InputError(f"output must be None or a non-negative integer (an output column), got {output!r}.")
    return int(output)


@functools.lru_cache(maxsize=64)
def _monomials(m: int, a: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Degree-a monomials in m variables, i_1 <= ... <= i_a, in lexicographic order.

    Returns ``(parent, last, full_map)``: monomial j is monomial ``parent[j]`` of degree a-1 times
    ``x[last[j]]``, and ``full_map[c]`` is the monomial of the c-th multi-index (C order over
    ``range(m)^a``), i.e. of its sorted version.
    """
    monos = list(itertools.combinations_with_replacement(range(m), a))
    index = {mono: j for j, mono in enumerate(monos)}
    if a == 0:
        return np.zeros(1, dtype=np.intp), np.zeros(1, dtype=np.intp), np.zeros(1, dtype=np.intp)
    lower = {mono: j for j, mono in enumerate(itertools.combinations_with_replacement(range(m), a - 1))}
    parent = np.array([lower[mono[:-1]] for mono in monos], dtype=np.intp)
    last = np.array([mono[-1] for mono in monos], dtype=np.intp)
    full_map = np.array([index[tuple(sorted(alpha))] for alpha in itertools.product(range(m), repeat=a)],
                        dtype=np.intp)
    return parent, last, full_map


def _split(r: int) -> tuple[int, int]:
    """The degrees ``(a, b)``, ``a + b = r``, of the two monomial matrices whose product holds the order-r sums.

    Up to order 2 the sums are one product of the weights with the degree-r monomials (``b = 0``): for
    r = 2 that is ``n q m (m + 1)`` flops against the ``2 n q m^2`` of a weighted Gram, and no
    ``(n, q m)`` temporary. Above, the balanced split ``(ceil(r/2), floor(r/2))`` keeps the monomial
    matrices small."""
    return (r, 0) if r <= 2 else ((r + 1) // 2, r // 2)


#: entries of the temporaries of one row block of :func:`_raw_sums` (8 MiB): blocks of a few MiB reuse the
#: heap memory freed by the block before, where 32 MiB blocks were given fresh pages by the system each time
#: (measured at m = q = 10, order 2, one thread: 0.093 s against 0.267 s per 1e6 rows; 2.3x at order 4)
_RAW_BLOCK_ELEMENTS = 1 << 20


def _monomial_rows(ZT: np.ndarray, amax: int) -> list[np.ndarray]:
    """``[M_0^T, .., M_amax^T]``: the distinct degree-a monomials of the samples in the columns of ``ZT``
    (m, n), one row per monomial in the order of :func:`_monomials`.

    In that (lexicographic) order the monomials with first index i are ``z_i`` times the degree-(a-1)
    monomials of indices >= i, which are the last rows of ``M_{a-1}^T``: one product of contiguous rows per
    first index, with no gathered copies (gathering the factors by index cost 20 times more at m = 10)."""
    m, n = ZT.shape
    powers = [np.ones((1, n)), ZT][:amax + 1]
    for a in range(2, amax + 1):
        prev = powers[-1]
        out = np.empty((len(_monomials(m, a)[0]), n))
        row = 0
        for i in range(m):
            # degree-(a-1) monomials whose indices are all >= i: C(m - i + a - 2, a - 1) of them, at the end
            tail = prev[prev.shape[0] - math.comb(m - i + a - 2, a - 1):]
            np.multiply(ZT[i], tail, out=out[row:row + tail.shape[0]])
            row += tail.shape[0]
        powers.append(out)
    return powers


def _unit_stride_rows(A: np.ndarray) -> np.ndarray:
    """``A`` itself when each row is contiguous (an F-ordered block transposed: BLAS and the monomial
    products read it in place), else a C-ordered copy."""
    return A if A.strides[-1] == A.itemsize else np.ascontiguousarray(A)


def _raw_sums(Z: np.ndarray, Wt: np.ndarray, orders: Sequence[int], acc: dict, prefix: str) -> None:
    """``acc[(prefix, r)] += sum_n Wt[n, :] (x) z_n^{(x)r}`` for r in ``orders``, over unique monomials.

    Split r = a + b (:func:`_split`); with ``M_a`` the (n, C(m+a-1, a)) matrix of the distinct degree-a
    monomials of the rows, the accumulator is the GEMM ``(M_a * w)^T M_b`` of shape (q, C_a, C_b)
    (3.6x fewer flops than Khatri-Rao powers for r = 4 and large m, 27x for r = 6), or ``w^T M_r`` when
    b = 0. :func:`_expand_raw` turns it into the dense ``(q,) + (m,)*r`` moment. The monomials are
    built with samples in columns (:func:`_monomial_rows`). Row blocks keep the temporaries below
    ``_RAW_BLOCK_ELEMENTS`` entries.
    """
    if not len(orders):
        return
    n, m = Z.shape
    q = Wt.shape[1]
    amax = max(_split(r)[0] for r in orders)
    widths = [len(_monomials(m, a)[0]) for a in range(amax + 1)]
    # entries per row of a block: the rows and weights, the monomials, and the weighted ones (q C_a) of a
    # split with b > 0
    per_row = m + q + sum(widths[2:]) + max([q * widths[_split(r)[0]] for r in orders if _split(r)[1]], default=0)
    step = max(1, _RAW_BLOCK_ELEMENTS // per_row)
    for start in range(0, n, step):
        ZT = _unit_stride_rows(Z[start:start + step].T)         # (m, nc)
        WT = _unit_stride_rows(Wt[start:start + step].T)        # (q, nc)
        nc = ZT.shape[1]
        powers = _monomial_rows(ZT, amax)
        for r in orders:
            a, b = _split(r)
            if b == 0:
                term = (WT @ powers[a].T)[:, :, None]
            else:
                left = (WT[:, None, :] * powers[a][None, :, :]).reshape(-1, nc)
                term = (left @ powers[b].T).reshape(q, powers[a].shape[0], powers[b].shape[0])
            key = (prefix, r)
            if key in acc:
                acc[key] += term
            else:
                acc[key] = term


def _expand_raw(acc: dict, prefix: str, r: int, m: int, lead: tuple, n: int) -> np.ndarray:
    """Dense raw moment ``acc[(prefix, r)] / n`` of shape ``lead + (m,)*r`` (see :func:`_raw_sums`)."""
    a, b = _split(r)
    sums = acc[(prefix, r)]
    full = sums[:, _monomials(m, a)[2]][:, :, _monomials(m, b)[2]]
    return (full / n).reshape(lead + (m,) * r)


def _parity_orders(top: int) -> list[int]:
    return list(range(top, -1, -2)) if top >= 0 else []


class _HermiteStatistic(Statistic):
    """Shared plumbing: output selection, dimension checks, additive accumulators, ``exact``.

    Subclasses set ``max_order`` and their parameters before calling ``super().__init__``, fill
    ``self._acc`` (a dict of arrays that are summed on merge) in ``_update`` and implement
    ``_finalize()`` (the estimate from the sums) and ``_exact(expansion)`` (the population value).
    """

    max_order: int = 0
    _fixed_dim: int | None = None

    def __init__(self, *, output: int | None = None) -> None:
        self.output = _check_output(output)
        super().__init__()

    def _reset(self) -> None:
        self._acc: dict = {}
        self._p: int | None = None
        self._d: int | None = self._fixed_dim

    # -- helpers for _update
    def _prepare(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        if Y.shape[1] == 0:
            raise InputError(f"{type(self).__name__} needs targets Y (the labels y_n of "
                             "T_k = mean y He_k(x)).")
        if self.output is not None:
            if self.output >= Y.shape[1]:
                raise InputError(f"output={self.output} but Y has only {Y.shape[1]} column(s).")
            Y = Y[:, self.output:self.output + 1]
        first = self._p is None
        if first:
            self._p = Y.shape[1]
        elif self._p != Y.shape[1]:
            raise InputError(f"Y has {Y.shape[1]} columns but earlier chunks had {self._p}.")
        if self._d is None:
            self._d = X.shape[1]
        elif X.shape[1] != self._d:
            raise InputError(f"X has {X.shape[1]} columns but {self._d} were expected (n_inputs).")
        if first:
            self._check_size()
        return Y

    def _check_size(self) -> None:
        """Refuse requests whose dense accumulators or results are too large (after d is known)."""

    def _acc_add(self, key, value: np.ndarray) -> None:
        if key in self._acc:
            self._acc[key] += value
        else:
            self._acc[key] = value

    def _merge(self, other: "_HermiteStatistic") -> None:  # type equality checked by Statistic.merge
        if self.n == 0:
            self._p, self._d = other._p, other._d
        elif (self._p, self._d) != (other._p, other._d):
            raise InputError(f"cannot merge statistics of data with (p, d) = {(other._p, other._d)} into "
                             f"{(self._p, self._d)}.")
        for key, val in other._acc.items():
            self._acc_add(key, val.copy())

    def finalize(self) -> np.ndarray:
        """The sample estimate (leading output axis); see the class docstring for the shape."""
        self.require(1, type(self).__name__)
        return self._finalize()

    def exact(self, network: Any) -> np.ndarray:
        """Population value for ``x ~ N(0, I_d)`` (ATV21 Lemma 3.5), same shape as :meth:`finalize`.

        Parameters
        ----------
        network : TwoLayerNetwork or HermiteExpansion
            The teacher, or its precomputed :class:`~nnrecover.hermite.expansions.HermiteExpansion` (of order at
            least ``max_order``).
        """
        exp = network if isinstance(network, HermiteExpansion) else \
            network_hermite_expansion(network, self.max_order)
        if exp.max_order < self.max_order:
            raise InputError(f"the expansion has order {exp.max_order}, {self.max_order} is needed.")
        if self._fixed_dim is not None and exp.n_inputs != self._fixed_dim:
            raise InputError(f"the network has {exp.n_inputs} inputs but the statistic's vectors have "
                             f"dimension {self._fixed_dim}.")
        out = self._exact(exp)
        if self.output is not None:
            if self.output >= exp.n_outputs:
                raise InputError(f"output={self.output} but the network has {exp.n_outputs} output(s).")
            out = out[self.output:self.output + 1]
        return out


# ============================================================================ dense / projected

class HermiteTensorStatistic(_HermiteStatistic):
    """Dense ``T_k = mean_n y_n He_k(x_n)``, or its projection ``T_k[P, ..., P]`` (ATV21 eq. (6)).

    Parameters
    ----------
    order : int
        ``k >= 0``. ``order=0`` gives ``E[y]``, ``order=1`` gives ``E[y x]``.
    basis : array of shape (d, m), optional
        Project the data on the columns of ``P = basis``: the result is
        ``mean_n y_n He_k(x_n)[P, ..., P]``, of shape ``(p,) + (m,)*k``. For orthonormal columns this is
        the ordinary Hermite tensor of the projected data ``P^T x`` in m dimensions
        (``He_k(x)[P, ..., P] = He_k(P^T x)``); in general the identity factors become ``P^T P``.
    output : int, optional
        Use only this column of Y.

    Notes
    -----
    Accumulates ``S_r = sum y (P^T x)^{(x)r}`` for r = k, k-2, ... (one GEMM per order, O(n m^k)) and
    assembles ``T_k = sum_j (-1)^j {E[g^{(x)2j}] (x) S_{k-2j}}`` with g ~ N(0, P^T P)
    (:func:`nnrecover.hermite.assemble_hermite_tensor`).

    ``finalize()`` returns shape ``(p,) + (m,)*k``.
    """

    def __init__(self, order: int, *, basis: Any = None, output: int | None = None) -> None:
        self.order = _check_order(order)
        self.max_order = self.order
        if basis is not None:
            P = as_real_array(basis, "basis")
            if P.ndim != 2 or P.shape[1] < 1:
                raise InputError(f"basis must have shape (n_inputs, m) with m >= 1, got {P.shape}.")
            self.basis: np.ndarray | None = P
            self._fixed_dim = P.shape[0]
            _check_dense(P.shape[1] ** self.order, f"T_{self.order} in {P.shape[1]} dimensions")
        else:
            self.basis = None
        super().__init__(output=output)

    def _check_size(self) -> None:
        m = self._d if self.basis is None else self.basis.shape[1]
        _check_dense((self._p or 1) * m ** self.order, f"T_{self.order} in {m} dimensions")

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        Y = self._prepare(X, Y)
        Z = X if self.basis is None else X @ self.basis
        _raw_sums(Z, Y, _parity_orders(self.order), self._acc, "S")

    def _finalize(self) -> np.ndarray:
        m = self._d if self.basis is None else self.basis.shape[1]
        raw = {r: _expand_raw(self._acc, "S", r, m, (self._p,), self.n) for r in _parity_orders(self.order)}
        cov = None if self.basis is None else self.basis.T @ self.basis
        if self.order == 0:
            return raw[0]
        return assemble_hermite_tensor(raw, self.order, np.eye(m) if cov is None else cov)

    def _exact(self, expansion: HermiteExpansion) -> np.ndarray:
        return expansion.tensor(self.order, self.basis)


# ============================================================================ scalar contractions

class _ScalarContraction(_HermiteStatistic):
    """Accumulates sums of per-sample values v (p, ...) and of v^2 for standard errors."""

    def _finalize(self) -> np.ndarray:
        return self._shape(self._acc["sum"] / self.n)

    def std_error(self) -> np.ndarray:
        """Standard error of each estimate, ``sqrt(var(y v) / n)`` with the unbiased sample variance.

        Computed from running sums of ``y v`` and ``(y v)^2``; the variance of these statistics is of
        the order of or larger than their squared mean (the variance of eq. (6) of Awasthi et al.), so the cancellation in
        ``E[v^2] - E[v]^2`` is harmless. Same shape as :meth:`finalize`.
        """
        self.require(2, f"{type(self).__name__}.std_error")
        mean = self._acc["sum"] / self.n
        var = np.maximum(self._acc["sumsq"] / self.n - mean * mean, 0.0) * self.n / (self.n - 1)
        return self._shape(np.sqrt(var / self.n))


class HermiteRankOneStatistic(_ScalarContraction):
    """Rank-one contractions ``T_k(u, ..., u) = mean_n y_n |u|^k He_k(u.x_n/|u|)`` for many u and k.

    Parameters
    ----------
    U : array of shape (r, d) or (d,)
        Contraction vectors, any norm (zero allowed: ``T_0 = E[y]``, ``T_k = 0`` for k >= 1).
    orders : int or sequence of int
        All orders up to ``max(orders)`` cost the same as the highest one (three-term recurrence).
    output : int, optional

    Notes
    -----
    Specs/001 section 2.2 rank-one identity with the scaled recurrence
    ``H_{k+1} = (u.x) H_k - k |u|^2 H_{k-1}``; cost O(n d r) for the projections plus O(n r k_max).
    These are all that RECOVERSCALARS (ATV21 Algorithm 2) and the Gram least-squares
    systems of Algorithms 2 and 5 need.

    ``finalize()`` returns shape ``(p, [n_orders,] [r])``: the orders axis when ``orders`` is a
    sequence, the ``r`` axis when ``U`` is 2-D.
    """

    def __init__(self, U: Any, orders: Any, *, output: int | None = None) -> None:
        self.U, self._single_u = _vectors(U, "U", None, batch_ndim=1)
        self.orders, self._scalar_order = _check_orders(orders)
        self.max_order = int(self.orders.max())
        self._fixed_dim = self.U.shape[1]
        self._sq_norm = np.sum(self.U * self.U, axis=1)
        super().__init__(output=output)

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        Y = self._prepare(X, Y)
        p, r, K = Y.shape[1], self.U.shape[0], self.max_order
        wanted = {int(k): j for j, k in enumerate(self.orders)}
        total = np.zeros((p, len(self.orders), r))
        total_sq = np.zeros_like(total)
        step = max(1, _TEMP_ELEMENTS // max(1, 4 * r))
        for start in range(0, X.shape[0], step):
            Xc, Yc = X[start:start + step], Y[start:start + step]
            Yt, Y2t = Yc.T, (Yc * Yc).T
            t = Xc @ self.U.T  # (nc, r); scaled recurrence H_{k+1} = t H_k - k |u|^2 H_{k-1}
            prev, cur = np.ones_like(t), t
            for k in range(K + 1):
                Hk = prev if k == 0 else cur
                if k in wanted:
                    total[:, wanted[k]] += Yt @ Hk
                    total_sq[:, wanted[k]] += Y2t @ (Hk * Hk)
                if k >= 1 and k < K:
                    prev, cur = cur, t * cur - (k * self._sq_norm) * prev
        self._acc_add("sum", total)
        self._acc_add("sumsq", total_sq)

    def _shape(self, arr: np.ndarray) -> np.ndarray:
        if self._scalar_order:
            arr = arr[:, 0]
        if self._single_u:
            arr = arr[..., 0]
        return arr

    def _exact(self, expansion: HermiteExpansion) -> np.ndarray:
        return self._shape(expansion.rank_one(self.U, self.orders))


class HermiteContractionStatistic(_ScalarContraction):
    """Full contractions ``T_k(u_1, ..., u_k) = mean_n y_n He_k(x_n)[u_1, ..., u_k]``.

    Parameters
    ----------
    U : array of shape (k, d) or (s, k, d)
        One tuple of k vectors or s tuples (k <= ``nnrecover.hermite.MAX_CONTRACTION_ORDER``).
    output : int, optional

    Notes
    -----
    Matching (Wick) sum of Awasthi et al. Definition A.2 (:func:`nnrecover.hermite.hermite_contract`);
    never forms a d^k array. ``finalize()`` returns shape ``(p, [s])``.
    """

    def __init__(self, U: Any, *, output: int | None = None) -> None:
        self.U, self._single_u = _vectors(U, "U", None, batch_ndim=2)
        self.max_order = _check_order(self.U.shape[1], "order (number of vectors in U)",
                                         maximum=MAX_CONTRACTION_ORDER)
        self._fixed_dim = self.U.shape[2]
        super().__init__(output=output)

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        Y = self._prepare(X, Y)
        s = self.U.shape[0]
        step = max(1, _TEMP_ELEMENTS // max(1, s * (2 ** self.max_order + self.max_order)))
        for start in range(0, X.shape[0], step):
            V = _contract_core(X[start:start + step], self.U, self.max_order)  # (nc, s)
            Yc = Y[start:start + step]
            self._acc_add("sum", Yc.T @ V)
            self._acc_add("sumsq", (Yc * Yc).T @ (V * V))

    def _shape(self, arr: np.ndarray) -> np.ndarray:
        return arr[:, 0] if self._single_u else arr

    def _exact(self, expansion: HermiteExpansion) -> np.ndarray:
        return self._shape(expansion.contract(self.U))


# ============================================================================ slices

class HermiteVectorSliceStatistic(_HermiteStatistic):
    """Slices ``T_k(., ..., ., g) = mean_n y_n He_k(x_n)[., ..., ., g]`` with ``f = k - 1`` free slots.

    ``order=3`` gives the d x d Jennrich slices of ATV21 (l = 1); ``order=5`` the d^2 x d^2 slices of
    ``flatten(T_5, 2, 2, 1)`` for l = 2 (Jennrich as used in Claim 4.4 of Awasthi et al.).

    Parameters
    ----------
    order : int
        ``k >= 1``.
    g : array of shape (d,) or (s, d)
        One or several contraction vectors (several cost one pass).
    output : int, optional

    Notes
    -----
    ``E[y He_{f+1}(x)[.^f, g]] = E[y (g.x) He_f(x)] - sum_r g@r (x) T_{f-1}``. The first term is
    assembled from the raw moments ``sum y (g.x) x^{(x)r}`` (r = f, f-2, ...: one weighted monomial
    Gram ``(X^{(.)2} * w)^T X^{(.)2}`` per slice for f = 4, O(n d^4)), the second from
    ``sum y x^{(x)r}`` (r = f-1, f-3, ...). ``finalize()`` returns ``(p, [s]) + (d,)*f``.
    """

    def __init__(self, order: int, g: Any, *, output: int | None = None) -> None:
        self.order = _check_order(order, minimum=1)
        self.max_order = self.order
        self.g, self._single = _vectors(g, "g", None, batch_ndim=1)
        self._fixed_dim = self.g.shape[1]
        super().__init__(output=output)
        self._check_size()

    def _check_size(self) -> None:
        d, f, s = self.g.shape[1], self.order - 1, self.g.shape[0]
        _check_dense((self._p or 1) * s * d ** f, f"T_{self.order}(., g) slices")

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        Y = self._prepare(X, Y)
        f = self.order - 1
        W = (Y[:, :, None] * (X @ self.g.T)[:, None, :]).reshape(X.shape[0], -1)  # (n, p*s)
        _raw_sums(X, W, _parity_orders(f), self._acc, "R")
        _raw_sums(X, Y, _parity_orders(f - 1), self._acc, "S")

    def _finalize(self) -> np.ndarray:
        d, f, s, p, n = self.g.shape[1], self.order - 1, self.g.shape[0], self._p, self.n
        R = {r: _expand_raw(self._acc, "R", r, d, (p, s), n) for r in _parity_orders(f)}
        out = assemble_hermite_tensor(R, f, np.eye(d)) if f else R[0].copy()
        if f >= 1:
            S = {r: _expand_raw(self._acc, "S", r, d, (p,), n) for r in _parity_orders(f - 1)}
            T = assemble_hermite_tensor(S, f - 1, np.eye(d))
            out -= placement_sum(_outer_groups(self.g[None], 1, T[:, None], f - 1), 1, f)
        return out[:, 0] if self._single else out

    def _exact(self, expansion: HermiteExpansion) -> np.ndarray:
        out = expansion.vector_slice(self.order, self.g)
        return out[:, 0] if self._single else out


class HermiteMatrixSliceStatistic(_HermiteStatistic):
    """Slices ``T_k(., ..., ., G) = sum_ab G_ab T_k(., ..., ., e_a, e_b)`` with ``f = k - 2`` free slots.

    ``order=4`` gives the d x d Jennrich slices of ATV21 (l = 1, third mode of dimension d^2 contracted
    with vec(G)); ``order=6`` the d^2 x d^2 slices of ``flatten(T_6, 2, 2, 2)`` for l = 2.

    Parameters
    ----------
    order : int
        ``k >= 2``.
    G : array of shape (d, d) or (s, d, d)
        Contraction matrices; only their symmetric parts matter (T_k is symmetric) and they are
        symmetrised.
    output : int, optional

    Notes
    -----
    ``E[y He_{f+2}(x)[.^f, G]] = E[y (x'Gx - tr G) He_f(x)] - 2 sum_r G x_r T_f
    - 2 sum_{r<s} G@(r,s) (x) T_{f-2}`` (module docstring of :mod:`nnrecover.hermite`), from the raw
    moments ``sum y (x'Gx) x^{(x)r}`` and ``sum y x^{(x)r}``, r = f, f-2, ...; O(n d^f) per slice.
    ``finalize()`` returns ``(p, [s]) + (d,)*f``.
    """

    def __init__(self, order: int, G: Any, *, output: int | None = None) -> None:
        self.order = _check_order(order, minimum=2)
        self.max_order = self.order
        Gs, self._single = _vectors(G, "G", None, batch_ndim=2)
        if Gs.shape[1] != Gs.shape[2]:
            raise InputError(f"G must be square (d, d) or (s, d, d), got shape {np.shape(G)}.")
        self.G = 0.5 * (Gs + np.swapaxes(Gs, 1, 2))
        self._fixed_dim = self.G.shape[1]
        super().__init__(output=output)
        self._check_size()

    def _check_size(self) -> None:
        d, f, s = self.G.shape[1], self.order - 2, self.G.shape[0]
        _check_dense((self._p or 1) * s * d ** f, f"T_{self.order}(., G) slices")

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        Y = self._prepare(X, Y)
        f = self.order - 2
        quad = np.sum(np.matmul(X, self.G) * X, axis=2).T  # x'G_s x, (n, s), via BLAS
        W = (Y[:, :, None] * quad[:, None, :]).reshape(X.shape[0], -1)  # (n, p*s)
        _raw_sums(X, W, _parity_orders(f), self._acc, "R")
        _raw_sums(X, Y, _parity_orders(f), self._acc, "S")

    def _finalize(self) -> np.ndarray:
        d, f, s, p, n = self.G.shape[1], self.order - 2, self.G.shape[0], self._p, self.n
        eye = np.eye(d)
        R = {r: _expand_raw(self._acc, "R", r, d, (p, s), n) for r in _parity_orders(f)}
        S = {r: _expand_raw(self._acc, "S", r, d, (p,), n) for r in _parity_orders(f)}
        Tf = assemble_hermite_tensor(S, f, eye) if f else S[0]
        weighted = assemble_hermite_tensor(R, f, eye) if f else R[0].copy()
        trace = np.trace(self.G, axis1=1, axis2=2)
        out = weighted - trace.reshape((1, s) + (1,) * f) * Tf[:, None]
        if f >= 1:
            out -= 2.0 * _mode_product_sum(self.G, Tf, f)
        if f >= 2:
            Tf2 = assemble_hermite_tensor(S, f - 2, eye) if f > 2 else S[0]
            out -= 2.0 * placement_sum(_outer_groups(self.G[None], 2, Tf2[:, None], f - 2), 2, f)
        return out[:, 0] if self._single else out

    def _exact(self, expansion: HermiteExpansion) -> np.ndarray:
        out = expansion.matrix_slice(self.order, self.G)
        return out[:, 0] if self._single else out


class HermitePartialContractionStatistic(_HermiteStatistic):
    """Partial contractions ``T_k(., ..., ., v_1, ..., v_c)`` with ``f = k - c`` free slots (dense).

    The general form of the vector slices (c = 1) and full contractions (f = 0): e.g.
    ``T_3(u, v, .)`` (the mode-3 vectors of Jennrich for l = 1, Awasthi et al. Claim 4.4, Theorem A.5) or
    ``T_5(., ., a, b, c)`` (Kronecker-structured products for a randomised range finder of
    ``flatten(T_5, 2, 3)``).

    Parameters
    ----------
    order : int
        ``k >= c``.
    V : array of shape (c, d) or (s, c, d)
        One or several tuples of c contraction vectors (c <= 8).
    output : int, optional

    Notes
    -----
    Matching form grouped by the role of each contracted slot (module docstring of
    :mod:`nnrecover.hermite`): ``E[y He_{f+c}(x)[.^f, v]] = sum (-1)^{|A|+|M|} haf_M(<v_a, v_b>)
    sum_pi v_A@pi (x) E[y prod_R (v_r.x) He_{f-|A|}(x)]``. One weighted raw-moment accumulator per
    subset R of the vectors: cost O(n s 2^c d^f) per sample block. ``finalize()`` returns
    ``(p, [s]) + (d,)*f``.
    """

    _MAX_VECTORS = 8

    def __init__(self, order: int, V: Any, *, output: int | None = None) -> None:
        self.order = _check_order(order)
        self.max_order = self.order
        self.V, self._single = _vectors(V, "V", None, batch_ndim=2)
        c = self.V.shape[1]
        if c > min(self.order, self._MAX_VECTORS):
            raise InputError(f"V holds {c} vectors per tuple; at most min(order, {self._MAX_VECTORS}) = "
                             f"{min(self.order, self._MAX_VECTORS)} can be contracted.")
        self.free = self.order - c
        self._fixed_dim = self.V.shape[2]
        self._terms = _partial_terms(c, self.free)
        needed: dict = {}
        for _, R, A, _ in self._terms:
            needed.setdefault(R, set()).add(self.free - len(A))
        self._needed = {R: sorted(ms) for R, ms in needed.items()}
        super().__init__(output=output)
        self._check_size()

    def _check_size(self) -> None:
        d, s = self.V.shape[2], self.V.shape[0]
        _check_dense((self._p or 1) * s * d ** self.free, f"T_{self.order} partial contractions")

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        Y = self._prepare(X, Y)
        n, (s, c, d) = X.shape[0], self.V.shape
        proj = (X @ self.V.reshape(s * c, d).T).reshape(n, s, c)
        for R, ms in self._needed.items():
            w = np.prod(proj[:, :, list(R)], axis=2) if R else np.ones((n, s))
            W = (Y[:, :, None] * w[:, None, :]).reshape(n, -1)  # (n, p*s)
            orders = sorted({r for m in ms for r in _parity_orders(m)})
            _raw_sums(X, W, orders, self._acc, ("R",) + R)

    def _finalize(self) -> np.ndarray:
        (s, _, d), p, n, f = self.V.shape, self._p, self.n, self.free
        D = {}
        for R, ms in self._needed.items():
            for m in ms:
                raw = {r: _expand_raw(self._acc, ("R",) + R, r, d, (p, s), n) for r in _parity_orders(m)}
                D[R, m] = assemble_hermite_tensor(raw, m, np.eye(d)) if m else raw[0]
        gram = np.einsum("sad,sbd->sab", self.V, self.V)
        out = np.zeros((p, s) + (d,) * f)
        for sign, R, A, B in self._terms:
            coef = _hafnian(gram, B).reshape((1, s) + (1,) * f)
            Dm = D[R, f - len(A)]
            if A:
                vecs = self.V[:, list(A)]  # (s, |A|, d): sum over injections A -> free slots
                X = sum(_outer_vectors(vecs[:, list(perm)])
                        for perm in itertools.permutations(range(len(A))))
                Dm = placement_sum(_outer_groups(X[None], len(A), Dm, f - len(A)), len(A), f)
            out += sign * coef * Dm
        return out[:, 0] if self._single else out

    def _exact(self, expansion: HermiteExpansion) -> np.ndarray:
        out = expansion.partial_contract(self.order, self.V)
        return out[:, 0] if self._single else out


def _partial_terms(c: int, f: int) -> list:
    """Terms ``(sign, R, A, B)`` of the grouped matching form: R singles, A paired with free slots
    (|A| <= f), B perfectly matched among themselves (|B| even), sign ``(-1)^(|A| + |B|/2)``."""
    terms = []
    slots = range(c)
    for nr in range(c + 1):
        for R in itertools.combinations(slots, nr):
            rest = [i for i in slots if i not in R]
            for na in range(min(f, len(rest)) + 1):
                for A in itertools.combinations(rest, na):
                    B = tuple(i for i in rest if i not in A)
                    if len(B) % 2 == 0:
                        terms.append(((-1) ** (na + len(B) // 2), R, A, B))
    return terms


def _hafnian(gram: np.ndarray, B: tuple) -> np.ndarray:
    """``sum over perfect matchings M of B of prod_{(a,b) in M} gram[:, a, b]``, shape (s,)."""
    if not B:
        return np.ones(gram.shape[0])
    first, rest = B[0], B[1:]
    return sum(gram[:, first, t] * _hafnian(gram, tuple(u for u in rest if u != t)) for t in rest)


def _outer_vectors(vecs: np.ndarray) -> np.ndarray:
    """``v_1 (x) ... (x) v_a`` for ``vecs`` of shape (s, a, d): shape ``(s,) + (d,)*a``."""
    out = vecs[:, 0]
    for j in range(1, vecs.shape[1]):
        out = out[..., None] * vecs[:, j].reshape((vecs.shape[0],) + (1,) * j + (vecs.shape[2],))
    return out


# ============================================================================ front ends

def _flatten_free(arr: np.ndarray, f: int, d: int, flatten: bool) -> np.ndarray:
    if not flatten or f < 2:
        return arr
    a, b = (f + 1) // 2, f // 2
    return arr.reshape(arr.shape[:arr.ndim - f] + (d ** a, d ** b))


class HermiteMoments(abc.ABC):
    """Hermite coefficient tensors ``f_hat_k = E[y He_k(x)]`` from samples or exactly: one interface.

    Implementations: :class:`SampleHermiteMoments` (estimates ``T_k`` of ATV21 eq. (6) by passes over
    data) and :class:`PopulationHermiteMoments` (exact, ATV21 Lemma 3.5). Both return the same shapes:
    a leading output axis when there are several outputs (and no ``output`` was selected), then the
    shape documented per method.

    Parameters
    ----------
    output : int, optional
        Restrict to one output column (then there is never an output axis).
    """

    def __init__(self, *, output: int | None = None) -> None:
        self.output = _check_output(output)

    # -- the one thing implementations provide
    @abc.abstractmethod
    def evaluate(self, statistic: _HermiteStatistic) -> np.ndarray:
        """Value of a Hermite statistic (with its leading output axis): sample estimate or exact."""

    @classmethod
    def from_samples(cls, data: Any, **options) -> "SampleHermiteMoments":
        """:class:`SampleHermiteMoments` on ``data`` (``(X, Y)`` arrays, dask arrays or a chunk stream)."""
        return SampleHermiteMoments(data, **options)

    @classmethod
    def exact(cls, network: Any, **options) -> "PopulationHermiteMoments":
        """:class:`PopulationHermiteMoments` of a :class:`~nnrecover.network.TwoLayerNetwork`."""
        return PopulationHermiteMoments(network, **options)

    def _finish(self, arr: np.ndarray) -> np.ndarray:
        return arr[0] if arr.shape[0] == 1 else arr

    # -- methods (same shapes in both modes)
    def mean(self) -> np.ndarray:
        """``E[y] = f_hat_0``: scalar (0-d array), or (p,)."""
        return self.tensor(0)

    def linear(self) -> np.ndarray:
        """``E[y x] = f_hat_1``: (d,) or (p, d)."""
        return self.tensor(1)

    def tensor(self, order: int, basis: Any = None) -> np.ndarray:
        """Dense ``f_hat_k`` (``(d,)*k``), or ``f_hat_k[P, ..., P]`` (``(m,)*k``) for ``basis`` P (d, m).

        For orthonormal columns of P the latter is the Hermite tensor of the projected data ``P^T x``.
        """
        return self._finish(self.evaluate(HermiteTensorStatistic(order, basis=basis, output=self.output)))

    def rank_one(self, U: Any, orders: Any) -> np.ndarray:
        """``f_hat_k(u, ..., u)`` for the rows u of ``U`` ((r, d) or (d,)), every k in ``orders``.

        Shape ``([n_orders,] [r])`` (axes present when ``orders`` is a sequence / ``U`` is 2-D).
        """
        return self._finish(self.evaluate(HermiteRankOneStatistic(U, orders, output=self.output)))

    def contract(self, U: Any) -> np.ndarray:
        """Full contractions ``f_hat_k(u_1, ..., u_k)``: ``U`` (k, d) gives a scalar, (s, k, d) gives (s,)."""
        return self._finish(self.evaluate(HermiteContractionStatistic(U, output=self.output)))

    def vector_slice(self, order: int, g: Any, *, flatten: bool = True) -> np.ndarray:
        """``f_hat_k(., ..., ., g)`` for ``g`` of shape (d,) or (s, d).

        With ``flatten`` (default) the ``f = k - 1 >= 2`` free slots are returned as a
        ``d^ceil(f/2) x d^floor(f/2)`` matrix (order 3: d x d; order 5: d^2 x d^2), else as ``(d,)*f``;
        a leading (s,) axis for several g.
        """
        stat = HermiteVectorSliceStatistic(order, g, output=self.output)
        return self._finish(_flatten_free(self.evaluate(stat), stat.order - 1, stat.g.shape[1], flatten))

    def partial_contract(self, order: int, V: Any, *, flatten: bool = False) -> np.ndarray:
        """``f_hat_k(., ..., ., v_1, ..., v_c)`` for ``V`` of shape (c, d) or (s, c, d).

        ``f = k - c`` free slots, dense ``(d,)*f`` (or flattened as in :meth:`vector_slice` with
        ``flatten=True``); a leading (s,) axis for several tuples.
        """
        stat = HermitePartialContractionStatistic(order, V, output=self.output)
        return self._finish(_flatten_free(self.evaluate(stat), stat.free, stat.V.shape[2], flatten))

    def matrix_slice(self, order: int, G: Any, *, flatten: bool = True) -> np.ndarray:
        """``f_hat_k(., ..., ., G)`` for ``G`` of shape (d, d) or (s, d, d) (symmetrised).

        ``f = k - 2`` free slots, flattened as in :meth:`vector_slice` (order 4: d x d; order 6:
        d^2 x d^2).
        """
        stat = HermiteMatrixSliceStatistic(order, G, output=self.output)
        return self._finish(_flatten_free(self.evaluate(stat), stat.order - 2, stat.G.shape[1], flatten))


class SampleHermiteMoments(HermiteMoments):
    """Sample estimates ``T_k = mean_n y_n He_k(x_n)`` (ATV21 eq. (6)) by passes over ``data``.

    Each method call makes one pass over the data with the corresponding statistic (see
    :meth:`compute` to get several quantities in a single pass). ``data`` must therefore be re-iterable
    for several calls: arrays, dask arrays, or a :class:`~nnrecover.sampling.SampleStream` (a one-shot
    generator is exhausted after the first call and the next call raises).

    Parameters
    ----------
    data : tuple (X, Y) or iterable of (X, Y) chunks
        Anything :func:`nnrecover.moments.accumulate` accepts.
    chunk_size : int, optional
        Rows per chunk for array data.
    progress : bool, optional
        Passed to :func:`~nnrecover.moments.accumulate`.
    output : int, optional
        Restrict to one output column.

    Attributes
    ----------
    n_samples : int or None
        Number of samples seen by the last pass.
    """

    def __init__(self, data: Any, *, chunk_size: int | None = None, progress: bool | None = None,
                 output: int | None = None) -> None:
        super().__init__(output=output)
        if isinstance(data, tuple) and len(data) == 2 and data[1] is None:
            raise InputError("SampleHermiteMoments needs targets: pass data=(X, Y) with Y not None.")
        if not isinstance(data, tuple) and not hasattr(data, "__iter__"):
            raise InputError("data must be a tuple (X, Y) of arrays or an iterable of (X, Y) chunks, "
                             f"got {type(data).__name__}.")
        self.data = data
        self.chunk_size = chunk_size
        self.progress = progress
        self.n_samples: int | None = None

    def compute(self, statistics: Sequence[Statistic]) -> list:
        """Feed every statistic in one pass over the data; returns their ``finalize()`` values."""
        stats = list(statistics)
        if not stats:
            return []
        accumulate(stats, self.data, chunk_size=self.chunk_size, progress=self.progress)
        n = stats[0].n
        if n == 0:
            raise InputError("the data yielded no samples (an exhausted one-shot iterator? pass arrays or a "
                             "re-iterable SampleStream to use SampleHermiteMoments more than once).")
        self.n_samples = n
        return [s.finalize() for s in stats]

    def evaluate(self, statistic: _HermiteStatistic) -> np.ndarray:
        return self.compute([statistic])[0]


class PopulationHermiteMoments(HermiteMoments):
    """Exact Hermite coefficient tensors ``f_hat_k`` of a network for ``x ~ N(0, I_d)`` (ATV21 Lemma 3.5).

    ``f_hat_k = sum_i A[:, i] c_k(b_i; |w_i|) (w_i/|w_i|)^{(x)k}`` (+ output bias at k = 0), any
    activation and any row norms (:func:`nnrecover.hermite.expansions.activation_hermite_coefficients`). Every
    method is a few small matrix products in the unit directions.

    Parameters
    ----------
    network : TwoLayerNetwork
    output : int, optional
    max_order : int, default 8
        Orders of the Hermite coefficients computed up front (grown on demand).
    distribution : Distribution, optional
        The input law, if you want it checked: Lemma 3.5 (and the meaning of ``f_hat_k`` as Hermite
        coefficients) needs ``x ~ N(0, I_d)``; any other law raises
        :class:`~nnrecover.errors.AssumptionError`.

    Raises
    ------
    AssumptionError
        ``distribution`` is not the standard Gaussian of dimension ``network.n_inputs``.
    """

    def __init__(self, network: Any, *, output: int | None = None, max_order: int = 8,
                 distribution: Any = None) -> None:
        super().__init__(output=output)
        self.network = network
        self._expansion = network_hermite_expansion(network, max_order)
        if self.output is not None and self.output >= network.n_outputs:
            raise InputError(f"output={self.output} but the network has {network.n_outputs} output(s).")
        if distribution is not None:
            dim = getattr(distribution, "dim", None)
            if dim != network.n_inputs:
                raise InputError(f"distribution has dimension {dim} but the network has "
                                 f"{network.n_inputs} inputs.")
            if not getattr(distribution, "is_standard_gaussian", False):
                raise AssumptionError(
                    "exact Hermite moments (Awasthi-Tang-Vijayaraghavan 2021, Lemma 3.5) assume inputs "
                    f"x ~ N(0, I_d), but the distribution is {type(distribution).__name__} with another "
                    "law; whiten the data to N(0, I) or use SampleHermiteMoments on samples.")

    @property
    def expansion(self) -> HermiteExpansion:
        """The :class:`~nnrecover.hermite.expansions.HermiteExpansion` used (unit directions and coefficients)."""
        return self._expansion

    def evaluate(self, statistic: _HermiteStatistic) -> np.ndarray:
        if statistic.max_order > self._expansion.max_order:
            self._expansion = network_hermite_expansion(self.network, statistic.max_order)
        return statistic.exact(self._expansion)

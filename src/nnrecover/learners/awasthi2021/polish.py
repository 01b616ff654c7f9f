"""Hermite-loss polish of recovered units (internal; an extension beyond the paper, run only with ``refine=True``).

Appendix B of Awasthi et al. (Prop. B.1): the population squared loss of a model network ``g`` is

    E[(g(x) - f(x))^2] = sum_{k >= 0} (1/k!) || g^_k - f^_k ||_F^2,

a sum of tensor-decomposition objectives. Truncated at the orders the algorithm has estimated,
``k <= K = 2l + 2``, and with ``f^_k`` replaced by the estimates ``T_k``, this is a smooth least-squares
problem in the unit parameters that uses every estimated tensor jointly (Algorithms 2 and 4 use each
tensor separately: ``T_{2l+1}``/``T_{2l+2}`` for directions, ``T_l..T_{l+3}`` through Gram solves for
the scalars, so an error in one unit's direction leaks into the others' scalars). Minimising it from the
provable estimate is a method-of-moments refinement: no pass over the data, a few milliseconds in the
``m``-dimensional working space. The model's tensors are Lemma 3.5's
``g^_k = sum_i a_i c_k(b_i) u_i^{(x)k}``.

Orders ``k = 0, 1`` depend on the signs ``xi_i``; they are used only when the signs are fixed
(order 1 after FIXSIGNS), together with a free linear part ``(v, c)`` when fewer than ``m`` units were
recovered (the undetected, nearly linear units live in ``T_0``, ``T_1``). Orders ``k >= 2`` are invariant
under ``(b_i, w_i) -> (-b_i, -w_i)``. With every unit recovered, the signs are first re-chosen by an
exhaustive search on the order-0/1 terms (:func:`_best_signs`), a discrete step the smooth solver
cannot take.

The solver (:func:`_trust_region_fit`) is SciPy's trust-region iteration (``least_squares``,
``method="trf"``) run on the normal equations: ``J^T J`` has closed forms in the Gram matrix
``S = U U^T`` of the unit directions (inner products of the derivative tensors ``u_i^{(x)k}``,
``k Sym(e_p (x) u_i^{(x)k-1})``), and ``J^T r`` is one small product per order with the packed residual
(:meth:`_PackedHermiteProblem.normal_equations`), so a step costs ``O(units^2 n^2 K)`` plus an
eigendecomposition of the ``units (n + 2)``-square ``J^T J``, never the ``C(n + K, K)``-row Jacobian
(:meth:`_PackedHermiteProblem.jacobian`, the dense reference the tests check both against).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import replace

import numpy as np
from scipy import linalg

from ...activations import get_activation
from .coefficients import HermiteCoefficients
from .symtensor import rank_one_sum

__all__ = ["hermite_loss_polish", "truncated_hermite_loss"]


def _model_tensors(a, b, U, orders):
    coef = get_activation("relu").hermite_coefficients(max(orders), b)  # (k, K+1), c_k(b) of Lemma 3.5
    return {k: rank_one_sum(a * coef[:, k], U, k) for k in orders}


@functools.lru_cache(maxsize=32)
def _multisets(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The multisets ``i_1 <= ... <= i_k`` of ``range(n)`` (rows of an int array) and the weights
    ``sqrt(orbit size / k!) = 1 / sqrt(prod_j c_j!)`` (``c_j``: multiplicities) of their entries."""
    if k == 0:
        return np.zeros((1, 0), dtype=np.intp), np.ones(1)
    monos = np.array(list(itertools.combinations_with_replacement(range(n), k)), dtype=np.intp)
    weights = np.array([1.0 / math.sqrt(math.prod(math.factorial(c) for c in np.unique(mu, return_counts=True)[1]))
                        for mu in monos])
    return monos, weights


@functools.lru_cache(maxsize=32)
def _parents(n: int, k: int) -> np.ndarray:
    """Index, among the multisets of order ``k - 1``, of each order-``k`` multiset without its last entry."""
    lower = {tuple(mu): j for j, mu in enumerate(_multisets(n, k - 1)[0])}
    return np.array([lower[tuple(mu[:-1])] for mu in _multisets(n, k)[0]], dtype=np.intp)


@functools.lru_cache(maxsize=32)
def _removals(n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The pairs (multiset ``mu`` of order ``k``, distinct entry ``p`` of ``mu``) as arrays ``(rows, p,
    count, sub)``: ``rows`` indexes ``mu`` among the order-``k`` multisets, ``count`` is the multiplicity of
    ``p`` in ``mu`` and ``sub`` indexes ``mu`` with one ``p`` removed among the order-``k - 1`` multisets, so
    that ``d/du_p prod_j u_{mu_j} = count * prod_j u_{(mu - p)_j}``."""
    lower = {tuple(mu): j for j, mu in enumerate(_multisets(n, k - 1)[0])}
    rows, ps, counts, subs = [], [], [], []
    for j, mu in enumerate(_multisets(n, k)[0].tolist()):
        for p in sorted(set(mu)):
            rest = list(mu)
            rest.remove(p)
            rows.append(j)
            ps.append(p)
            counts.append(mu.count(p))
            subs.append(lower[tuple(rest)])
    return (np.array(rows, dtype=np.intp), np.array(ps, dtype=np.intp), np.array(counts, dtype=np.float64),
            np.array(subs, dtype=np.intp))


def _packed_products(U, k_max):
    """``prod_j u_{i, mu_j}`` for every unit ``i`` and every multiset ``mu`` of order ``0..k_max`` (a list of
    ``(units, C(n + k - 1, k))`` arrays), built as in :func:`_packed_model`."""
    n = U.shape[1]
    prods = [np.ones((U.shape[0], 1))]
    for k in range(1, k_max + 1):
        prods.append(prods[-1][:, _parents(n, k)] * U[:, _multisets(n, k)[0][:, -1]])
    return prods


def _packed_model(a, b, U, orders, monos):
    """``g^_k`` of :func:`_model_tensors` at the multisets ``monos[k]`` only (one entry per orbit).

    The products ``prod_j u_{mu_j}`` of order ``k`` extend those of order ``k - 1`` by the last factor
    (left to right, as a product of the factors in order)."""
    coef = get_activation("relu").hermite_coefficients(max(orders), b)
    n = U.shape[1]
    prod = np.ones((U.shape[0], 1))
    out = {}
    for k in range(max(orders) + 1):
        if k:
            prod = prod[:, _parents(n, k)] * U[:, _multisets(n, k)[0][:, -1]]
        if k in orders:
            out[k] = (a * coef[:, k]) @ prod
    return out


def _best_signs(coeffs: HermiteCoefficients, rec):
    """Signs ``xi`` minimising the order-0 and order-1 terms of the Hermite loss,
    ``(T_0 - sum a c_0(xi b))^2 + ||T_1 - sum a Phi(xi b) xi u||^2``, over all ``2^k`` patterns (the
    terms of order >= 2 do not depend on the signs). Unlike FIXSIGNS' linear solve, this uses the exact
    nonlinearity ``Phi(xi b)``, so a unit whose ``a~`` is inflated by a bias error
    (``exp(b^2/2)``) does not flip the decision."""
    a, b, U = rec.a, rec.b, rec.U
    t0, t1 = float(coeffs.t0), coeffs.t1_projected
    # all 2^k patterns at once, in the order of itertools.product((1, -1), repeat=k) (unit 0 slowest),
    # so that argmin's first minimum is the first pattern of that order
    xis = np.array(list(itertools.product((1.0, -1.0), repeat=a.shape[0])))
    relu = get_activation("relu")
    c_plus, c_minus = relu.hermite_coefficients(1, b), relu.hermite_coefficients(1, -b)
    neg = xis < 0
    r0 = t0 - np.where(neg, c_minus[:, 0], c_plus[:, 0]) @ a
    r1 = t1 - (np.where(neg, -c_minus[:, 1], c_plus[:, 1]) * a) @ U
    vals = r0 * r0 + np.einsum("pn,pn->p", r1, r1)
    best_xi = xis[int(np.argmin(vals))]
    flips = np.flatnonzero(best_xi < 0).tolist()
    if flips:
        rec = replace(rec, b=best_xi * b, U=best_xi[:, None] * U, W=coeffs.lift(best_xi[:, None] * U))
    return rec, {"sign_search_flips": flips}


def truncated_hermite_loss(coeffs: HermiteCoefficients, rec, order: int, *, linear_part: bool = True) -> float:
    """``sum_{k <= 2l+2} ||T_k - g^_k||_F^2 / k!`` for the units of ``rec`` (Prop. B.1 truncated), the
    quantity :func:`hermite_loss_polish` minimises. With ``linear_part`` the orders 0 and 1 are matched
    exactly by a free linear part (its best value), so only the orders ``>= 2`` count."""
    K = 2 * order + 2
    orders = list(range(2 if linear_part else 0, K + 1))
    model = _model_tensors(np.asarray(rec.a, float), np.asarray(rec.b, float), np.asarray(rec.U, float), orders)
    return float(sum(np.sum((np.asarray(coeffs.tensor(k), float) - model[k]) ** 2) / math.factorial(k)
                     for k in orders))


class _PackedHermiteProblem:
    """The truncated Hermite loss as a least-squares problem in ``theta = (a, b, vec V, v, c)``.

    ``U = V`` with unit rows, ``(v, c)`` the free linear part (only with ``linear``); one residual per
    multiset ``mu`` of each order in ``orders``, weighted by ``1 / sqrt(prod_j c_j!)``, so that the sum of
    squares is ``sum_k ||T_k - g^_k||_F^2 / k!`` (see :func:`_least_squares_fit`). ``targets[k]`` holds
    ``T_k`` at the multisets of :func:`_multisets` (a length-1 array for ``k = 0``)."""

    def __init__(self, targets: dict, orders, n: int, k_units: int, linear: bool):
        self.orders, self.n, self.k_units, self.linear = list(orders), int(n), int(k_units), bool(linear)
        self.monos, self.wts = {}, {}
        for k in self.orders:
            self.monos[k], self.wts[k] = _multisets(self.n, k)
        self.targets = targets
        self.size = k_units * (n + 2) + (n + 1 if linear else 0)
        # for J^T r: mu = sub + p for every multiset sub of order k - 1 and every p (a bijection with the
        # pairs (mu, distinct p in mu) of _removals), with the multiplicity of p in mu
        self.grow = {}
        for k in self.orders:
            if k:
                rows, ps, counts, subs = _removals(self.n, k)
                mu_of = np.empty((_multisets(self.n, k - 1)[0].shape[0], self.n), dtype=np.intp)
                count = np.empty(mu_of.shape)
                mu_of[subs, ps] = rows
                count[subs, ps] = counts
                self.grow[k] = (mu_of, count)

    def unpack(self, theta):
        k_units, n = self.k_units, self.n
        V = theta[2 * k_units:2 * k_units + k_units * n].reshape(k_units, n)
        return (theta[:k_units], theta[k_units:2 * k_units], V / np.linalg.norm(V, axis=1, keepdims=True),
                theta[2 * k_units + k_units * n:])

    def residual(self, theta):
        a_, b_, U_, rest = self.unpack(theta)
        model = _packed_model(a_, b_, U_, self.orders, self.monos)
        if self.linear:
            model[0] = model[0] + rest[-1]
            model[1] = model[1] + rest[:self.n]
        return np.concatenate([self.wts[k] * (self.targets[k] - model[k]) for k in self.orders])

    def jacobian(self, theta):
        """The analytic Jacobian of :meth:`residual` (dense; the solver uses :meth:`normal_equations`).

        With ``P_i[mu] = prod_j u_{i, mu_j}`` and ``c_k' = c_{k+1}`` (Gaussian integration by parts,
        ``d/db E[relu(z + b) He_k(z)] = E[relu(z + b) He_{k+1}(z)]``):
        ``d r_k[mu] / d a_i = -w c_k(b_i) P_i[mu]``, ``d r_k[mu] / d b_i = -w a_i c_{k+1}(b_i) P_i[mu]``,
        ``d r_k[mu] / d u_{i,p} = -w a_i c_k(b_i) count_p(mu) P_i[mu - p]``, and ``u_i = v_i / |v_i|``
        maps the last to ``d / d v_i = (d / d u_i)(I - u_i u_i^T) / |v_i|``; the linear part enters
        orders 0 and 1 with derivative ``-1``."""
        k_units, n = self.k_units, self.n
        a_, b_ = theta[:k_units], theta[k_units:2 * k_units]
        V = theta[2 * k_units:2 * k_units + k_units * n].reshape(k_units, n)
        norms = np.linalg.norm(V, axis=1, keepdims=True)
        U_ = V / norms
        coef = get_activation("relu").hermite_coefficients(max(self.orders) + 1, b_)
        prods = _packed_products(U_, max(self.orders))
        v0 = 2 * k_units + k_units * n  # first column of the linear part
        blocks = []
        for k in self.orders:
            w = self.wts[k]
            J = np.zeros((w.size, self.size))
            J[:, :k_units] = -w[:, None] * (prods[k].T * coef[:, k])
            J[:, k_units:2 * k_units] = -w[:, None] * (prods[k].T * (a_ * coef[:, k + 1]))
            if k:
                rows, ps, counts, subs = _removals(n, k)
                JU = np.zeros((w.size, k_units, n))
                JU[rows, :, ps] = -(w[rows] * counts)[:, None] * (prods[k - 1][:, subs].T * (a_ * coef[:, k]))
                JU -= np.einsum("mip,ip->mi", JU, U_)[:, :, None] * U_
                J[:, 2 * k_units:v0] = (JU / norms[None]).reshape(w.size, -1)
            if self.linear and k == 0:
                J[0, -1] = -1.0
            elif self.linear and k == 1:
                J[:, v0:v0 + n] = -np.eye(n)
            blocks.append(J)
        return np.concatenate(blocks)

    def normal_equations(self, theta):
        """``(J^T J, J^T r, r)`` at ``theta`` without forming ``J`` (:meth:`jacobian`).

        The packed inner product with weights ``w^2 = orbit size / k!`` is ``<X, Y>_F / k!`` for symmetric
        tensors, so ``J^T J`` is a sum over orders of the inner products of the derivative tensors,
        closed forms in ``S = U U^T``: ``<u_i^{(x)k}, u_j^{(x)k}> = S_ij^k``, and with
        ``D_{i,p} = d u_i^{(x)k} / d u_{i,p} = k Sym(e_p (x) u_i^{(x)k-1})``,
        ``<u_i^{(x)k}, D_{j,q}> = k u_{i,q} S_ij^{k-1}`` and
        ``<D_{i,p}, D_{j,q}> = k delta_pq S_ij^{k-1} + k (k-1) u_{j,p} u_{i,q} S_ij^{k-2}``:
        ``O(units^2 n^2)`` per order instead of ``O(C(n + k - 1, k) (units n)^2)``. ``J^T r`` is contracted
        from the packed residual (one ``(units, C(n + k - 2, k - 1)) x (C(n + k - 2, k - 1), n)`` product
        per order for the directions)."""
        k_units, n = self.k_units, self.n
        a_, b_ = theta[:k_units], theta[k_units:2 * k_units]
        V = theta[2 * k_units:2 * k_units + k_units * n].reshape(k_units, n)
        norms = np.linalg.norm(V, axis=1)
        U_ = V / norms[:, None]
        rest = theta[2 * k_units + k_units * n:]
        coef = get_activation("relu").hermite_coefficients(max(self.orders) + 1, b_)
        prods = _packed_products(U_, max(self.orders))
        S = U_ @ U_.T
        eye = np.eye(n)
        AA, AB, BB = (np.zeros((k_units, k_units)) for _ in range(3))
        CA, CB = np.zeros((k_units, k_units, n)), np.zeros((k_units, k_units, n))  # [i, j, q]: a_i / b_i with u_{j,q}
        H = np.zeros((k_units, n, k_units, n))  # [i, p, j, q]: u_{i,p} with u_{j,q}
        ga, gb, gU = np.zeros(k_units), np.zeros(k_units), np.zeros((k_units, n))
        res = []
        for k in self.orders:
            f = 1.0 / math.factorial(k)
            al, be, si = coef[:, k], a_ * coef[:, k + 1], a_ * coef[:, k]  # d/da, d/db, d/du scale
            model = si @ prods[k]
            if self.linear and k == 0:
                model = model + rest[-1]
            elif self.linear and k == 1:
                model = model + rest[:n]
            r = self.wts[k] * (self.targets[k] - model)
            res.append(r)
            wr = self.wts[k] * r
            Pwr = prods[k] @ wr
            ga -= al * Pwr
            gb -= be * Pwr
            Ek = S ** k
            AA += f * np.outer(al, al) * Ek
            AB += f * np.outer(al, be) * Ek
            BB += f * np.outer(be, be) * Ek
            if k:
                mu_of, count = self.grow[k]
                gU -= si[:, None] * (prods[k - 1] @ (count * wr[mu_of]))
                E1 = f * k * S ** (k - 1)
                CA += (np.outer(al, si) * E1)[:, :, None] * U_[:, None, :]
                CB += (np.outer(be, si) * E1)[:, :, None] * U_[:, None, :]
                H += (np.outer(si, si) * E1)[:, None, :, None] * eye[None, :, None, :]
                if k >= 2:
                    E2 = f * k * (k - 1) * S ** (k - 2) * np.outer(si, si)
                    H += np.einsum("ij,jp,iq->ipjq", E2, U_, U_)
        r = np.concatenate(res)

        # tangent projection P_i = (I - u_i u_i^T) / |v_i| of every direction block
        def tangent_right(X):  # X[..., j, q] -> X[..., j, :] P_j
            return (X - np.einsum("...jq,jq->...j", X, U_)[..., None] * U_) / norms[:, None]

        CA, CB, gU = tangent_right(CA), tangent_right(CB), tangent_right(gU)
        H = tangent_right(H)  # [i, p, j, q] P_j
        H = np.moveaxis(tangent_right(np.moveaxis(H, (0, 1), (2, 3))), (2, 3), (0, 1))  # P_i [i, p, j, q]
        size = self.size
        v0 = 2 * k_units + k_units * n
        A = np.zeros((size, size))
        g = np.zeros(size)
        A[:k_units, :k_units] = AA
        A[:k_units, k_units:2 * k_units] = AB
        A[k_units:2 * k_units, k_units:2 * k_units] = BB
        A[:k_units, 2 * k_units:v0] = CA.reshape(k_units, -1)
        A[k_units:2 * k_units, 2 * k_units:v0] = CB.reshape(k_units, -1)
        A[2 * k_units:v0, 2 * k_units:v0] = H.reshape(k_units * n, -1)
        g[:k_units], g[k_units:2 * k_units], g[2 * k_units:v0] = ga, gb, gU.ravel()
        if self.linear:
            # c enters order 0, v order 1, each with derivative -1 (weights 1)
            A[-1, -1] = 1.0
            A[:k_units, -1] = coef[:, 0]
            A[k_units:2 * k_units, -1] = a_ * coef[:, 1]
            A[v0:v0 + n, v0:v0 + n] = eye
            A[:k_units, v0:v0 + n] = coef[:, 1][:, None] * U_
            A[k_units:2 * k_units, v0:v0 + n] = (a_ * coef[:, 2])[:, None] * U_
            # d u_{i,q} with v_p: s_i delta_pq, projected: s_i P_i
            Pm = (eye - U_[:, :, None] * U_[:, None, :]) / norms[:, None, None]
            A[2 * k_units:v0, v0:v0 + n] = ((a_ * coef[:, 1])[:, None, None] * Pm).reshape(k_units * n, n)
            g[-1] = -res[self.orders.index(0)][0]
            g[v0:v0 + n] = -res[self.orders.index(1)]
        A = np.triu(A) + np.triu(A, 1).T
        return A, g, r


def _trust_region_step(lam: np.ndarray, V: np.ndarray, gv: np.ndarray, Delta: float, alpha: float,
                       full_rank: bool) -> tuple[np.ndarray, float]:
    """The step ``p = -(J^T J + alpha I)^{-1} J^T r`` with ``|p| = Delta`` (or the Gauss-Newton step when
    it is shorter), from ``J^T J = V diag(lam) V^T`` and ``gv = V^T J^T r``: More's safeguarded Newton
    iteration on ``|p(alpha)| - Delta`` (More 1978, "The Levenberg-Marquardt algorithm: implementation
    and theory"), as SciPy's ``least_squares(method="trf")`` runs it on an SVD of ``J`` (there
    ``s^2 = lam`` and ``s U^T r = gv``), with its tolerance (1 %) and iteration cap (10)."""
    if full_rank:
        p = -V @ (gv / lam)
        if np.linalg.norm(p) <= Delta:
            return p, 0.0

    def phi_and_derivative(a):
        denom = lam + a
        p_norm = np.linalg.norm(gv / denom)
        return p_norm - Delta, -np.sum(gv ** 2 / denom ** 3) / p_norm

    upper = np.linalg.norm(gv) / Delta
    lower = 0.0
    if full_rank:
        phi, dphi = phi_and_derivative(0.0)
        lower = -phi / dphi
    if not full_rank and alpha == 0:
        alpha = max(0.001 * upper, math.sqrt(lower * upper))
    for _ in range(10):
        if alpha < lower or alpha > upper:
            alpha = max(0.001 * upper, math.sqrt(lower * upper))
        phi, dphi = phi_and_derivative(alpha)
        if phi < 0:
            upper = alpha
        ratio = phi / dphi
        lower = max(lower, alpha - ratio)
        alpha -= (phi + Delta) * ratio / Delta
        if abs(phi) < 0.01 * Delta:
            break
    p = -V @ (gv / (lam + alpha))
    return p * (Delta / np.linalg.norm(p)), alpha


def _trust_region_fit(problem: _PackedHermiteProblem, theta: np.ndarray, r: np.ndarray, max_nfev: int,
                      xtol: float = 1e-12, ftol: float = 1e-12, gtol: float = 1e-12):
    """Minimise ``||problem.residual(theta)||^2`` from ``theta`` (residual ``r`` there) by a trust-region
    method on the normal equations.

    The iteration is that of SciPy's ``least_squares(method="trf")`` without bounds (``x_scale = 1``,
    first radius ``|theta|``, its radius update and stopping rules; statuses 0 (``max_nfev`` residual
    evaluations), 1 (``max |J^T r| < gtol``), 2 (``ftol``), 3 (``xtol``), 4 (both)), with each step's
    subproblem solved on an eigendecomposition of the ``units (n + 2)``-square ``J^T J`` of
    :meth:`_PackedHermiteProblem.normal_equations` instead of an SVD of the Jacobian (orders 2..4 at
    ``n = 20``, 20 units: 10605 x 440; measured on one thread, 0.37 s for its SVD and 0.03 s to form it,
    against 0.006 s for the normal equations and 0.017 s for their eigendecomposition). ``J^T J`` is singular along each ``v_i`` (the residual does not depend
    on ``|v_i|``) and ``J^T r`` vanishes there, so every step solves the damped problem (``alpha > 0``),
    as the SVD path does. A trust region, not Levenberg-Marquardt's damping rule: from the far-off starts
    of large ``n`` (provable estimates from few samples per unit) the two take different paths and
    Levenberg-Marquardt stalled in poorer local minima of this non-convex loss.

    Returns
    -------
    (theta, r, nfev, status)
    """
    cost = 0.5 * float(r @ r)
    A, g, _ = problem.normal_equations(theta)
    nfev, status = 1, None
    Delta = float(np.linalg.norm(theta)) or 1.0
    alpha = 0.0
    while True:
        if np.max(np.abs(g)) < gtol:
            status = 1
        if status is not None or nfev >= max_nfev:
            break
        lam, V = linalg.eigh(A)
        lam = np.maximum(lam, 0.0)
        # eigh resolves the eigenvalues of J^T J to about eps lam_max (the squares of J's singular values
        # to sqrt(eps) relative), so a smaller one is a null direction
        full_rank = bool(lam[0] > math.sqrt(np.finfo(float).eps) * lam[-1])
        gv = V.T @ g
        reduction = -1.0
        while reduction <= 0 and nfev < max_nfev:
            step, alpha = _trust_region_step(lam, V, gv, Delta, alpha, full_rank)
            predicted = -(g @ step + 0.5 * step @ (A @ step))
            trial = theta + step
            r_trial = problem.residual(trial)
            nfev += 1
            step_norm = float(np.linalg.norm(step))
            if not np.all(np.isfinite(r_trial)):
                Delta = 0.25 * step_norm
                continue
            cost_trial = 0.5 * float(r_trial @ r_trial)
            reduction = cost - cost_trial
            if predicted > 0:
                ratio = reduction / predicted
            else:
                ratio = 1.0 if predicted == reduction == 0 else 0.0
            if ratio < 0.25:
                Delta_new = 0.25 * step_norm
            elif ratio > 0.75 and step_norm > 0.95 * Delta:
                Delta_new = 2.0 * Delta
            else:
                Delta_new = Delta
            f_ok = reduction < ftol * cost and ratio > 0.25
            x_ok = step_norm < xtol * (xtol + float(np.linalg.norm(theta)))
            status = 4 if f_ok and x_ok else 2 if f_ok else 3 if x_ok else None
            if status is not None:
                break
            alpha *= Delta / Delta_new
            Delta = Delta_new
        if reduction > 0:
            theta, r, cost = trial, r_trial, cost_trial
            if status is None:
                A, g, _ = problem.normal_equations(theta)
    return theta, r, nfev, 0 if status is None else status


def _least_squares_fit(coeffs: HermiteCoefficients, a, b, U, orders, linear: bool, max_nfev: int):
    """Least squares (trust region, :func:`_trust_region_fit`) on the truncated Hermite loss over ``orders``; returns
    (a, b, U, v, c, info)."""
    k_units, n = U.shape
    # the tensors are symmetric, so the loss sum_k ||T_k - g^_k||_F^2 / k! counts each entry of an orbit
    # (the index tuples that are permutations of one multiset mu) equally: it is the sum over multisets of
    # (orbit size / k!) (T_k[mu] - g^_k[mu])^2, orbit size / k! = 1 / prod_j c_j!, with C(n+k-1, k)
    # residuals instead of n^k (715 instead of 10^4 for k = 4, n = 10) and the same J^T J and J^T r,
    # hence the same steps
    targets = {k: np.asarray(coeffs.tensor(k), float)[tuple(_multisets(n, k)[0].T)] if k else
               np.asarray(coeffs.tensor(k), float).reshape(1) for k in orders}
    problem = _PackedHermiteProblem(targets, orders, n, k_units, linear)
    residual, unpack = problem.residual, problem.unpack
    theta0 = np.concatenate([a, b, U.ravel()] + ([np.zeros(n + 1)] if linear else []))
    if linear:  # start the linear part at the best fit of the residual of T_0, T_1
        model = _model_tensors(a, b, U, [0, 1])
        theta0[-(n + 1):-1] = np.asarray(coeffs.tensor(1), float) - model[1]
        theta0[-1] = float(np.asarray(coeffs.tensor(0), float) - model[0])
    r0 = residual(theta0)
    loss0 = float(r0 @ r0)
    if not np.isfinite(loss0) or theta0.size > sum(n ** k for k in orders):  # fewer entries than unknowns
        return a, b, U, None, None, {"loss_start": loss0, "loss_end": loss0, "nfev": 0, "kept": "start"}
    theta, r1, nfev, status = _trust_region_fit(problem, theta0, r0, max_nfev)
    loss1 = float(r1 @ r1)
    info = {"loss_start": loss0, "loss_end": loss1, "nfev": nfev, "status": status}
    if not (np.isfinite(loss1) and loss1 <= loss0):
        info["kept"] = "start"
        return a, b, U, None, None, info
    a1, b1, U1, rest = unpack(theta)
    info["kept"] = "polished"
    return a1, b1, U1, (rest[:n] if linear else None), (float(rest[-1]) if linear else None), info


def hermite_loss_polish(coeffs: HermiteCoefficients, rec, order: int, n_hidden: int, *, max_nfev: int = 100):
    """Minimise the truncated Hermite loss over ``(a, b, U)`` starting from ``rec``.

    Steps: (1) fit the sign-invariant orders ``2 .. 2l+2``; (2) when the signs are known (order 1 after
    FIXSIGNS) and every unit was recovered, re-choose the signs by :func:`_best_signs` with the improved
    scalars; (3) fit all orders ``0 .. 2l+2`` (a free linear part joins when units are missing).

    Parameters
    ----------
    coeffs : HermiteCoefficients
        The estimated tensors (working coordinates).
    rec : HermiteRecovery
        The provable estimate (``U`` in working coordinates).
    order : int
        ``l``.
    n_hidden : int
        ``m``; with signs fixed and fewer units than ``m``, a free linear part joins the model.
    max_nfev : int
        Budget of each least-squares solve, in residual evaluations (each accepted step also forms
        the normal equations once).

    Returns
    -------
    (HermiteRecovery, dict)
        The polished units (signs as in ``rec`` unless the search changed them) and a report.
    """
    K = 2 * order + 2
    signed = bool(rec.signs_fixed)
    linear = signed and rec.n_units < int(n_hidden)
    report: dict = {"ran": True, "linear_part": linear}
    a, b, U, _, _, info = _least_squares_fit(coeffs, rec.a, rec.b, rec.U, list(range(2, K + 1)), False, max_nfev)
    report["sign_invariant_fit"] = info
    if signed:
        # orders >= 2 cannot tell (u, b) from (-u, -b) (relu(t) - relu(-t) = t has only orders 0 and 1), so
        # the fit may end on either; the signs are FIXSIGNS's: a unit that came out flipped is flipped back
        # (d = 200, k = 20: two flipped units started the fit of all orders at loss 0.57 instead of 0.004,
        # and it stopped in a local minimum, max unit error 2.2 after the refinement)
        flip = np.einsum("ij,ij->i", U, rec.U) < 0
        U, b = np.where(flip[:, None], -U, U), np.where(flip, -b, b)
        info["units_flipped_back"] = int(flip.sum())
    cur = replace(rec, a=a, b=b, U=U, W=coeffs.lift(U))
    if signed and not linear and rec.n_units <= 14:
        cur, sign_report = _best_signs(coeffs, cur)
        report.update(sign_report)
    if signed:
        a, b, U, v, c, info = _least_squares_fit(coeffs, cur.a, cur.b, cur.U, list(range(0, K + 1)), linear, max_nfev)
        report["full_fit"] = info
        cur = replace(cur, a=a, b=b, U=U, W=coeffs.lift(U))
    report["kept"] = "polished"
    cur = replace(cur, diagnostics={**rec.diagnostics, "hermite_polish": report})
    return cur, report

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
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import replace

import numpy as np
from scipy import optimize

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
    best, best_xi = np.inf, np.ones(a.shape[0])
    for xi in itertools.product((1.0, -1.0), repeat=a.shape[0]):
        xi = np.array(xi)
        c = get_activation("relu").hermite_coefficients(1, xi * b)
        r0 = t0 - a @ c[:, 0]
        r1 = t1 - (a * c[:, 1] * xi) @ U
        val = r0 * r0 + r1 @ r1
        if val < best:
            best, best_xi = val, xi
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
        """The analytic Jacobian of :meth:`residual`.

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


def _least_squares_fit(coeffs: HermiteCoefficients, a, b, U, orders, linear: bool, max_nfev: int):
    """Least squares (trust-region reflective) on the truncated Hermite loss over ``orders``; returns
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
    # Trust-region reflective (numpy/LAPACK SVD steps), not MINPACK's "lm": this Jacobian is rank
    # deficient by construction (the residual is invariant under rescaling a row of V, k null
    # directions), which sends MINPACK's pivoted QR (qrfac) into its column-norm recomputation; SciPy's
    # C translation of it (seen in SciPy 1.17.1) reads one double past the end of the Jacobian there, so the
    # iterates depended on leftover heap contents and the fit differed between processes
    # (docs/design.md, "Reproducibility").
    sol = optimize.least_squares(residual, theta0, jac=problem.jacobian, method="trf", max_nfev=max_nfev,
                                 xtol=1e-12, ftol=1e-12, gtol=1e-12)
    loss1 = float(sol.fun @ sol.fun)
    info = {"loss_start": loss0, "loss_end": loss1, "nfev": int(sol.nfev), "status": int(sol.status)}
    if not (np.isfinite(loss1) and loss1 <= loss0):
        info["kept"] = "start"
        return a, b, U, None, None, info
    a1, b1, U1, rest = unpack(sol.x)
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
        Budget of each least-squares solve, in residual evaluations (each iteration also takes one
        analytic Jacobian).

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

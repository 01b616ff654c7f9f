"""Sphere maximisation of a Hermite correlation for orthonormal weights (Appendix B.1, Theorem 10).

Goel & Panigrahy (2019) use two sphere-maximisation results with orthonormal lowest-layer weights
``W*`` (rows ``w_i``):

Appendix B.1 (warm-up; ``f = f_lin = c_0 + sum_i c_i u_t(w_i.x)``, ``c_i > 0``, even ``l >= 4``)
    ``sgn(u_hat_l) E[f(x) h_l(z.x)] = |u_hat_l| sum_i c_i (w_i.z)^l`` on the unit sphere, whose only
    local maxima are ``z = +-w_i`` (first- and second-order KKT conditions).
Theorem 10 (even activation ``u``, no threshold, multilinear ``P``; Appendix D.3)
    ``F(z) = E[f(x) h_4(z.x)] = sum_i alpha_i z_i^4 + sum_{i<j} gamma_ij z_i^2 z_j^2`` on the sphere
    (``z_i = w_i.z``) with the corrected constants
    ``alpha_i = u_hat_4 sum_{S ni i} c_S u_hat_0^{|S|-1}`` and
    ``gamma_ij = sqrt(6) u_hat_2^2 sum_{S >= {i,j}} c_S u_hat_0^{|S|-2}`` (the paper prints ``6 u_hat_2^2``
    and an extra ``beta_i z_i^2`` term that vanishes on the sphere). If ``alpha_i + alpha_j > gamma_ij`` for
    every pair, a point with two non-zero coordinates is not a local maximum (the move
    ``z_i^2 -> z_i^2 + s eps, z_j^2 -> z_j^2 - s eps`` gains ``(alpha_i + alpha_j - gamma_ij) eps^2`` on
    average), so the local maxima are ``+-e_i``; when ``gamma_ij > 2 max(alpha_i, alpha_j)`` the maxima
    in the ``(i, j)`` plane are the mixed points ``(e_i +- e_j)/sqrt(2)`` instead (for equal alphas).

Both are solved by the same routine, :func:`sphere_maximization`: Riemannian gradient ascent on the
sphere with an Armijo line search, random restarts, a second-order certificate (largest eigenvalue of
the Riemannian Hessian, by central differences of the tangential gradient) and deflation
(orthonormal ``W*``: after ``w_1`` is found the search continues in ``w_1^perp``).

Correlation sources (the objective ``F`` and its action ``v(z) = grad F(z) / l`` at unit ``z``):

:class:`SampleHermiteCorrelation`  ``F(z) = E^[y~ h_l(z.x)]``, ``v(z) = E^[y~ (He_{l-1}(a) x -
                                   (l - 1) He_{l-2}(a) z)] / sqrt(l!)``, ``a = z.x`` (the gradient of the
                                   homogeneous ``H_l(z.x) = |z|^l h_l(z.x / |z|)``, from
                                   ``d He_l/da = l He_{l-1}`` and the heat equation in ``|z|^2``).
:class:`PowerSumForm`              exact ``sum_i a_i (w_i.z)^l`` (Appendix B.1 in population).
:class:`QuarticForm`               exact Theorem 10 quartic ``sum alpha_i z_i^4 + sum gamma_ij z_i^2 z_j^2``.

Paper symbols -> names
----------------------
==============================  ==============================================================
``l``                           ``order``
``u_hat_k``                     :func:`even_hermite_coefficients` (Theorem 10), or
                                :func:`~.model.threshold_hermite_coefficients` (B.1)
``C(S, mu)``                    :func:`theorem10_coefficients` (internal sums)
``alpha_i``, ``gamma_ij``       ``QuarticForm.alpha``, ``QuarticForm.gamma``
``alpha_i + alpha_j > gamma``   :func:`theorem10_condition`
==============================  ==============================================================
"""

from __future__ import annotations

import itertools
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from scipy import integrate, linalg

from ..._validation import (
    as_2d_float,
    as_targets,
    check_positive_int,
    check_random_state,
)
from ...errors import AssumptionError, ConvergenceError, InputError
from ..registry import register
from .model import HighThresholdNetwork, UpperPolynomial, threshold_hermite_coefficients

__all__ = ["SampleHermiteCorrelation", "PowerSumForm", "QuarticForm", "SphereResult", "sphere_maximization",
           "orthonormal_sphere_route", "even_hermite_coefficients", "theorem10_coefficients",
           "theorem10_condition", "EvenActivationNetwork", "even_activation_recovery"]


def _he(k: int, a: np.ndarray) -> np.ndarray:
    """Probabilists' Hermite polynomial ``He_k(a)`` by the three-term recurrence (``He_{-1} = 0``)."""
    if k < 0:
        return np.zeros_like(a)
    prev, cur = np.zeros_like(a), np.ones_like(a)
    for j in range(k):
        prev, cur = cur, a * cur - j * prev
    return cur


def _check_order(order: Any) -> int:
    order = check_positive_int(order, "order", minimum=2)
    if order % 2:
        raise InputError(f"order (the paper's l) must be even, got {order}: an odd l gives an odd objective "
                         "whose sphere maxima are not the +-w_i of Appendix B.1.")
    return order


# ============================================================================ correlation sources

class SampleHermiteCorrelation:
    """``F(z) = E^[y~ h_l(z.x)]`` and its action from samples (any unit ``z``).

    Parameters
    ----------
    X : array (m, n)
        Rows (only the rows with ``y~ != 0`` matter; they may be the active rows of a larger sample).
    y_tilde : array (m,)
        Centred labels ``y - c_0``.
    order : int
        Even ``l >= 2``.
    n_total : int, optional
        Number of samples the rows come from (default ``m``): the averages divide by it.
    """

    def __init__(self, X, y_tilde, order: int = 4, n_total: int | None = None):
        self.X = as_2d_float(X, "X", min_rows=1)
        self.y = as_targets(y_tilde, "y_tilde", n_rows=self.X.shape[0]).reshape(-1)
        self.order = _check_order(order)
        self.n_total = self.X.shape[0] if n_total is None else check_positive_int(n_total, "n_total")
        if self.n_total < self.X.shape[0]:
            raise InputError(f"n_total ({self.n_total}) is smaller than the number of rows ({self.X.shape[0]}).")
        self.n_inputs = self.X.shape[1]
        self._norm = math.sqrt(math.factorial(self.order)) * self.n_total

    def value(self, Z: np.ndarray) -> np.ndarray:
        """``F`` at the unit columns of ``Z`` (n, k)."""
        A = self.X @ Z
        return self.y @ _he(self.order, A) / self._norm

    def action(self, Z: np.ndarray) -> np.ndarray:
        """``v(z) = grad F(z) / l`` at the unit columns of ``Z`` (homogeneous extension)."""
        A = self.X @ Z
        l = self.order
        return (self.X.T @ (self.y[:, None] * _he(l - 1, A))
                - (l - 1) * Z * (self.y @ _he(l - 2, A))) / self._norm


class PowerSumForm:
    """Exact ``F(z) = sum_i a_i (w_i.z)^l`` (Appendix B.1 in population: ``a_i = u_hat_l c_i``).

    Parameters
    ----------
    weights : array (d, n)
        Rows ``w_i``.
    coefficients : array (d,)
        ``a_i``.
    order : int
        Even ``l``.
    """

    def __init__(self, weights, coefficients, order: int = 4):
        self.W = as_2d_float(weights, "weights")
        self.a = as_targets(coefficients, "coefficients", n_rows=self.W.shape[0]).reshape(-1)
        self.order = _check_order(order)
        self.n_inputs = self.W.shape[1]

    @classmethod
    def from_network(cls, network: HighThresholdNetwork, order: int = 4) -> "PowerSumForm":
        """``a_i = u_hat_l c_i`` of a network with a linear ``P`` (Lemma 9: ``E[u_t(w.x) h_l(z.x)] = u_hat_l (w.z)^l``)."""
        if not isinstance(network, HighThresholdNetwork):
            raise InputError(f"network must be a HighThresholdNetwork, got {type(network).__name__}.")
        if not network.effective_upper.is_linear():
            raise AssumptionError("Appendix B.1 in population needs f = f_lin (a linear P); this P has products.")
        order = _check_order(order)
        u = threshold_hermite_coefficients(network.activation, network.threshold, order)
        return cls(network.hidden_weights, u[order] * network.linear_coefficients, order)

    def value(self, Z):
        return self.a @ (self.W @ Z) ** self.order

    def action(self, Z):
        return self.W.T @ (self.a[:, None] * (self.W @ Z) ** (self.order - 1))


class QuarticForm:
    """Exact Theorem 10 objective ``sum_i alpha_i z_i^4 + sum_{i<j} gamma_ij z_i^2 z_j^2``, ``z_i = w_i.z``.

    Parameters
    ----------
    weights : array (d, n), orthonormal rows
    alpha : array (d,)
    gamma : array (d, d), symmetric; the diagonal is ignored
    """

    order = 4

    def __init__(self, weights, alpha, gamma):
        self.W = as_2d_float(weights, "weights")
        d = self.W.shape[0]
        self.alpha = as_targets(alpha, "alpha", n_rows=d).reshape(-1)
        G = as_2d_float(gamma, "gamma", n_features=d)
        if G.shape != (d, d) or not np.allclose(G, G.T, rtol=0, atol=1e-12 * max(1.0, np.abs(G).max())):
            raise InputError(f"gamma must be a symmetric ({d}, {d}) matrix.")
        self.gamma = G - np.diag(np.diag(G))
        self.n_inputs = self.W.shape[1]

    def value(self, Z):
        C2 = (self.W @ Z) ** 2
        return self.alpha @ (C2 * C2) + 0.5 * np.einsum("ik,ij,jk->k", C2, self.gamma, C2)

    def action(self, Z):
        C = self.W @ Z
        C2 = C * C
        # grad/4 of sum alpha_i c_i^4 + 1/2 sum_{i != j} gamma_ij c_i^2 c_j^2
        return self.W.T @ (self.alpha[:, None] * C2 * C + 0.5 * C * (self.gamma @ C2))


# ============================================================================ the sphere search

@dataclass
class SphereResult:
    """Output of :func:`sphere_maximization`.

    Attributes
    ----------
    directions : ndarray (k, n)
        Unit rows, one per local extremum found (in the order found; each in the orthogonal complement
        of the previous ones).
    values : ndarray (k,)
        ``F`` at each direction.
    gradient_norms : ndarray (k,)
        Norm of the Riemannian gradient of ``s F`` (``s = +1`` maximise, ``-1`` minimise) there.
    hessian_max : ndarray (k,)
        Largest eigenvalue of the Riemannian Hessian of ``s F`` on the searched subspace: ``<= 0``
        (up to round-off) certifies a local maximum of ``s F`` (second-order KKT condition).
    info : dict
    """

    directions: np.ndarray
    values: np.ndarray
    gradient_norms: np.ndarray
    hessian_max: np.ndarray
    info: dict = field(default_factory=dict)


def _riemannian_grad(source, B, v, sign):
    z = B @ v
    g = sign * source.action(z[:, None])[:, 0] * source.order
    gv = B.T @ g
    return gv - (gv @ v) * v


def _riemannian_hessian(source, B, v, sign, h=1e-5) -> tuple[np.ndarray, np.ndarray]:
    """Riemannian Hessian of ``sign F`` in a tangent basis ``T`` at ``v`` (central differences), and ``T``."""
    k = v.size
    T = linalg.null_space(v[None, :])                      # tangent basis (k, k-1)
    H = np.empty((k - 1, k - 1))
    for j in range(k - 1):
        vp = np.cos(h) * v + np.sin(h) * T[:, j]
        vm = np.cos(h) * v - np.sin(h) * T[:, j]
        gp = T.T @ _transport(_riemannian_grad(source, B, vp, sign), vp, v)
        gm = T.T @ _transport(_riemannian_grad(source, B, vm, sign), vm, v)
        H[:, j] = (gp - gm) / (2 * h)
    return 0.5 * (H + H.T), T


def _riemannian_hessian_max(source, B, v, sign) -> float:
    """Largest eigenvalue of the Riemannian Hessian on the tangent space of the searched sphere."""
    if v.size == 1:
        return 0.0
    return float(np.linalg.eigvalsh(_riemannian_hessian(source, B, v, sign)[0])[-1])


def _newton_polish(source, B, v, sign, scale, tol, max_steps=20):
    """Riemannian Newton steps on the gradient (no function values: exact below their round-off)."""
    if v.size == 1:
        return v
    g = _riemannian_grad(source, B, v, sign)
    for _ in range(max_steps):
        if np.linalg.norm(g) <= tol * scale:
            break
        H, T = _riemannian_hessian(source, B, v, sign)
        evals = np.linalg.eigvalsh(H)
        if evals[-1] >= 0:                                  # not inside a maximum's basin: leave v
            break
        step = T @ np.linalg.solve(H, -(T.T @ g))
        theta = float(np.linalg.norm(step))
        v_new = math.cos(theta) * v + math.sin(theta) * step / theta if theta > 0 else v
        v_new /= np.linalg.norm(v_new)
        g_new = _riemannian_grad(source, B, v_new, sign)
        if np.linalg.norm(g_new) >= np.linalg.norm(g):
            break
        v, g = v_new, g_new
    return v


def _transport(g, frm, to):
    """Project a tangent vector at ``frm`` onto the tangent space at ``to`` (first-order transport)."""
    return g - (g @ to) * to


def _ascend(source, B, v, sign, scale, max_iter, tol):
    """Riemannian gradient ascent of ``sign F`` from ``v`` along geodesics, Armijo backtracking."""
    f = sign * float(source.value((B @ v)[:, None])[0])
    step = 1.0 / scale
    for it in range(max_iter):
        g = _riemannian_grad(source, B, v, sign)
        gn = float(np.linalg.norm(g))
        if gn <= tol * scale:
            return v, f, it, True
        step = min(step * 2.0, 1e6 / scale)
        while True:
            theta = math.atan(step * gn)                        # geodesic angle of the move
            v_new = math.cos(theta) * v + math.sin(theta) * (g / gn)
            f_new = sign * float(source.value((B @ v_new)[:, None])[0])
            if f_new >= f + 1e-4 * theta * gn:
                break
            step *= 0.5
            if theta < 1e-15:                                   # no ascent above round-off
                return v, f, it, gn <= 1e-6 * scale
        v, f = v_new / np.linalg.norm(v_new), f_new
    g = _riemannian_grad(source, B, v, sign)
    return v, f, max_iter, float(np.linalg.norm(g)) <= 1e-6 * scale


def sphere_maximization(source, n_components: int, *, maximize: bool = True, n_restarts: int = 8,
                        max_iter: int = 2000, tol: float = 1e-12, rng=None) -> SphereResult:
    """Local maxima of ``s F`` on the unit sphere with deflation (Appendix B.1 / Theorem 10 algorithm).

    Riemannian gradient ascent with an Armijo line search from ``n_restarts`` random starts per
    component; the start reaching the largest ``s F`` is kept, certified (gradient norm, Riemannian
    Hessian) and removed from the search space (the next search runs in its orthogonal complement,
    which is exact for orthonormal ``W*``).

    Parameters
    ----------
    source : SampleHermiteCorrelation, PowerSumForm or QuarticForm
        Anything with ``value(Z)``, ``action(Z)``, ``order`` and ``n_inputs``.
    n_components : int
        Number of directions ``k <= n``.
    maximize : bool, default True
        ``False`` minimises ``F`` (Theorem 10 with ``alpha_i < 0``, e.g. ``u = |a|``).
    n_restarts : int, default 8
    max_iter : int, default 2000
        Ascent steps per start.
    tol : float, default 1e-12
        Stop when the Riemannian gradient norm is below ``tol`` times the scale of ``F``.
    rng : None, int or Generator

    Returns
    -------
    SphereResult

    Raises
    ------
    ConvergenceError
        No start reached a stationary point within ``max_iter`` steps.
    """
    # deferred: threadpoolctl inspects the BLAS libraries when imported
    from threadpoolctl import threadpool_limits

    # products are (rows x n) by (n x 1): one BLAS thread is fastest, more only spin (cf. step1.step1)
    with threadpool_limits(limits=1, user_api="blas"):
        return _sphere_maximization(source, n_components, maximize=maximize, n_restarts=n_restarts,
                                    max_iter=max_iter, tol=tol, rng=rng)


def _sphere_maximization(source, n_components, *, maximize, n_restarts, max_iter, tol, rng) -> SphereResult:
    if not all(hasattr(source, a) for a in ("value", "action", "order", "n_inputs")):
        raise InputError(f"source must provide value(Z), action(Z), order and n_inputs (a SampleHermiteCorrelation, "
                         f"PowerSumForm or QuarticForm), got {type(source).__name__}.")
    if not (isinstance(tol, numbers.Real) and math.isfinite(tol) and tol > 0):
        raise InputError(f"tol must be a finite number > 0, got {tol!r}.")
    n = int(source.n_inputs)
    k = check_positive_int(n_components, "n_components")
    if k > n:
        raise InputError(f"n_components ({k}) exceeds the input dimension ({n}).")
    n_restarts = check_positive_int(n_restarts, "n_restarts")
    max_iter = check_positive_int(max_iter, "max_iter")
    gen = check_random_state(rng)
    sign = 1.0 if maximize else -1.0
    found = np.zeros((n, 0))
    vals, gnorms, hmax, iters = [], [], [], []
    probe = gen.standard_normal((n, 16))
    probe /= np.linalg.norm(probe, axis=0)
    scale = max(float(np.max(np.abs(source.value(probe)))), np.finfo(float).tiny)
    for _ in range(k):
        B = linalg.null_space(found.T) if found.shape[1] else np.eye(n)
        starts = []
        for _r in range(n_restarts):                           # short runs, keep the best start
            v = gen.standard_normal(B.shape[1])
            v /= np.linalg.norm(v)
            starts.append(_ascend(source, B, v, sign, scale, min(30, max_iter), tol))
        v, f, _, _ = max(starts, key=lambda r: r[1])
        v, f, it, converged = _ascend(source, B, v, sign, scale, max_iter, tol)
        v = _newton_polish(source, B, v, sign, scale, tol)
        f = sign * float(source.value((B @ v)[:, None])[0])
        gn = float(np.linalg.norm(_riemannian_grad(source, B, v, sign)))
        if not (converged or gn <= 1e-6 * scale):
            raise ConvergenceError(f"sphere maximisation did not reach a stationary point in max_iter={max_iter} "
                                   f"steps (component {found.shape[1] + 1}); raise max_iter.")
        z = B @ v
        vals.append(sign * f)
        gnorms.append(gn)
        hmax.append(_riemannian_hessian_max(source, B, v, sign))
        iters.append(it)
        found = np.column_stack([found, z])
    return SphereResult(directions=found.T.copy(), values=np.asarray(vals), gradient_norms=np.asarray(gnorms),
                        hessian_max=np.asarray(hmax), info={"iterations": iters, "maximize": maximize,
                                                            "scale": scale})


def _centre(y: np.ndarray, baseline) -> tuple[np.ndarray, float]:
    if baseline is None:
        c0 = float(np.median(y))
    elif baseline == "mean":
        c0 = float(np.mean(y))
    else:
        if not (isinstance(baseline, numbers.Real) and np.isfinite(baseline)):
            raise InputError(f"baseline must be None (median), 'mean' or a finite number, got {baseline!r}.")
        c0 = float(baseline)
    return y - c0, c0


def orthonormal_sphere_route(X, y, n_hidden: int, *, activation: str, threshold: float, order: int = 4,
                             baseline=None, n_restarts: int = 8, max_iter: int = 2000, rng=None) -> SphereResult:
    """Appendix B.1: recover orthonormal ``w_i`` from ``max sgn(u_hat_l) E^[y~ h_l(z.x)]`` on the sphere.

    Only the rows with ``y~ = y - c_0 != 0`` are used (for step/relu units and noiseless labels they are
    the rows where some unit fires); ``c_0`` is the median label (footnote 5). The objective is even, so
    each direction's sign is then fixed by the first-order test ``sign(E^[y~ x].z)`` (``u_hat_1 > 0``).

    Parameters
    ----------
    X : array (N, n); y : array (N,)
    n_hidden : int
        ``d``.
    activation : {"step", "relu", "sigmoid"}; threshold : float
        The known ``u`` and ``t`` (only the sign of ``u_hat_l`` is used).
    order : int, default 4
        Even ``l >= 4`` (Appendix B.1 needs ``u_hat_l != 0``).
    baseline : None, "mean" or float
        ``c_0`` (default: the median of ``y``).
    n_restarts, max_iter, rng
        See :func:`sphere_maximization`.

    Returns
    -------
    SphereResult
        ``directions`` are the signed unit estimates of the ``w_i`` (in the order found).

    Raises
    ------
    AssumptionError
        ``u_hat_l = 0`` (the objective carries no signal; Appendix B.1 needs ``u_hat_l != 0``).
    """
    X = as_2d_float(X, "X")
    y = as_targets(y, "y", n_rows=X.shape[0]).reshape(-1)
    order = _check_order(order)
    if order < 4:
        raise InputError(f"Appendix B.1 needs an even order l >= 4 (l = 2 gives a quadratic with no isolated "
                         f"maxima), got {order}.")
    u = threshold_hermite_coefficients(activation, threshold, order)
    if abs(u[order]) <= 1e-12 * max(abs(u[0]), 1e-300):
        raise AssumptionError(f"u_hat_{order} of {activation} at t = {threshold} is 0: Appendix B.1 needs "
                              f"u_hat_l != 0 (change l or t).")
    yt, c0 = _centre(y, baseline)
    keep = yt != 0
    if not np.any(keep):
        raise InputError("every label equals the baseline c_0: no unit fired, so there is nothing to learn; "
                         "pass more samples or lower the threshold.")
    src = SampleHermiteCorrelation(X[keep], yt[keep], order, n_total=X.shape[0])
    res = sphere_maximization(src, n_hidden, maximize=bool(u[order] > 0), n_restarts=n_restarts,
                              max_iter=max_iter, rng=rng)
    first = X[keep].T @ yt[keep]
    signs = np.where(res.directions @ first >= 0, 1.0, -1.0)
    res.directions = res.directions * signs[:, None]
    res.info.update(baseline=c0, n_active=int(keep.sum()), u_hat_order=float(u[order]))
    return res


# ============================================================================ Theorem 10

def even_hermite_coefficients(activation: Callable, k_max: int = 4) -> np.ndarray:
    """``u_hat_k = E[u(g) h_k(g)]``, k = 0..k_max, of an even activation (adaptive quadrature on [0, inf)).

    Raises
    ------
    AssumptionError
        ``u`` is not even (Theorem 10's hypothesis), checked at 41 points of [-4, 4].
    """
    if not callable(activation):
        raise InputError(f"activation must be a callable even function u(a), got {type(activation).__name__}.")
    k_max = check_positive_int(k_max, "k_max", minimum=0)
    grid = np.linspace(-4, 4, 41)
    up, um = np.asarray(activation(grid), float), np.asarray(activation(-grid), float)
    if up.shape != grid.shape or not np.all(np.isfinite(up)):
        raise InputError("activation must map an array to a finite array of the same shape.")
    if not np.allclose(up, um, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(up).max())):
        raise AssumptionError("Theorem 10 needs an even activation u(a) = u(-a); this one is not even.")
    out = np.zeros(k_max + 1)
    for k in range(0, k_max + 1, 2):
        def integrand(a, k=k):
            return float(activation(np.asarray([a]))[0]) * _he(k, np.asarray(a)) * math.exp(-0.5 * a * a)
        # [0, 60] holds all but e^{-1800} of the Gaussian mass, and stops e.g. cosh from overflowing
        with np.errstate(over="ignore", invalid="ignore"):
            val = sum(integrate.quad(integrand, lo, hi, epsabs=1e-15, epsrel=1e-12, limit=400)[0]
                      for lo, hi in ((0.0, 8.0), (8.0, 60.0)))
        out[k] = 2.0 * val / math.sqrt(2 * math.pi) / math.sqrt(math.factorial(k))
    return out


def theorem10_coefficients(u_hat: np.ndarray, upper: UpperPolynomial) -> tuple[np.ndarray, np.ndarray]:
    """Corrected ``alpha_i`` and ``gamma_ij`` of Theorem 10 for a multilinear ``P`` (product-Hermite formula).

    ``alpha_i = u_hat_4 sum_{S ni i} c_S u_hat_0^{|S|-1}``,
    ``gamma_ij = sqrt(6) u_hat_2^2 sum_{S >= {i,j}} c_S u_hat_0^{|S|-2}``.
    """
    if not isinstance(upper, UpperPolynomial):
        raise InputError(f"upper must be an UpperPolynomial, got {type(upper).__name__}.")
    u = np.asarray(u_hat, dtype=np.float64)
    if u.shape[0] < 5:
        raise InputError("u_hat must hold u_hat_0 .. u_hat_4.")
    if upper.degree > 0 and int(upper._keys.max()) > 1:
        raise AssumptionError("Theorem 10 is stated for a multilinear P (degree <= 1 in each X_i).")
    d = upper.n_vars
    alpha = np.zeros(d)
    gamma = np.zeros((d, d))
    for key, c in upper.coefficients.items():
        S = [i for i, e in enumerate(key) if e]
        if not S:
            continue
        for i in S:
            alpha[i] += c * u[4] * u[0] ** (len(S) - 1)
        for i, j in itertools.combinations(S, 2):
            g = c * math.sqrt(6.0) * u[2] ** 2 * u[0] ** (len(S) - 2)
            gamma[i, j] += g
            gamma[j, i] += g
    return alpha, gamma


def theorem10_condition(alpha, gamma) -> dict:
    """Check Theorem 10's condition ``alpha_i + alpha_j > gamma_ij`` (signs: ``s alpha``, ``s = sign of alpha``).

    Returns
    -------
    dict
        ``met`` (bool), ``margins`` (d, d) ``s (alpha_i + alpha_j - gamma_ij)`` off the diagonal,
        ``worst_pair``, ``sign`` (+1 maximise, -1 minimise) and ``vertices_are_maxima``
        (``s gamma_ij < 2 s alpha_i`` for all ``i != j``: ``+-e_i`` are then local maxima of ``s F``).
    """
    a = np.asarray(alpha, float)
    G = np.asarray(gamma, float)
    s = 1.0 if np.sum(a) >= 0 else -1.0
    d = a.size
    M = s * (a[:, None] + a[None, :] - G)
    np.fill_diagonal(M, np.inf)
    worst = np.unravel_index(int(np.argmin(M)), M.shape) if d > 1 else (0, 0)
    V = s * (2 * a[:, None] - G)
    np.fill_diagonal(V, np.inf)
    return {"met": bool(d < 2 or np.min(M) > 0 and np.all(s * a > 0)), "margins": np.where(np.isinf(M), np.nan, M),
            "worst_pair": tuple(int(i) for i in worst), "sign": s,
            "vertices_are_maxima": bool(d < 2 or np.min(V) > 0)}


class EvenActivationNetwork:
    """``f(x) = P(u(w_1.x), ..., u(w_d.x))``: even ``u``, orthonormal rows, no threshold (Theorem 10).

    Parameters
    ----------
    hidden_weights : array (d, n), orthonormal rows
    activation : callable, even
    upper : dict or UpperPolynomial, multilinear
    """

    def __init__(self, hidden_weights, activation: Callable, upper):
        W = as_2d_float(hidden_weights, "hidden_weights")
        if np.max(np.abs(W @ W.T - np.eye(W.shape[0]))) > 1e-8:
            raise AssumptionError("Theorem 10 needs orthonormal rows of W*.")
        self.hidden_weights = W
        self.activation = activation
        self.u_hat = even_hermite_coefficients(activation, 4)
        self.upper = upper if isinstance(upper, UpperPolynomial) else UpperPolynomial(upper, n_vars=W.shape[0])
        if self.upper.n_vars != W.shape[0]:
            raise InputError(f"upper has {self.upper.n_vars} variables but W* has {W.shape[0]} rows.")

    def predict(self, X) -> np.ndarray:
        X = as_2d_float(X, "X", n_features=self.hidden_weights.shape[1], min_rows=0)
        return self.upper(np.asarray(self.activation(X @ self.hidden_weights.T), float))

    def quartic_form(self) -> QuarticForm:
        """The exact population objective (corrected Theorem 10 constants)."""
        alpha, gamma = theorem10_coefficients(self.u_hat, self.upper)
        return QuarticForm(self.hidden_weights, alpha, gamma)


def even_activation_recovery(X, y, n_hidden: int, *, activation: Callable | None = None, maximize=None,
                             n_restarts: int = 8, max_iter: int = 2000, rng=None) -> SphereResult:
    """Theorem 10: orthonormal ``w_i`` (up to sign) from the sphere extrema of ``E^[y~ h_4(z.x)]``.

    Parameters
    ----------
    X : array (N, n); y : array (N,)
    n_hidden : int
    activation : callable, optional
        The even ``u``; used only to choose between maximising and minimising (``sign(u_hat_4/u_hat_0)``,
        the sign of ``alpha_i`` when the ``C({i}, u_hat_0)`` are positive).
    maximize : bool, optional
        Overrides the choice (default: from ``activation``, else maximise).
    n_restarts, max_iter, rng
        See :func:`sphere_maximization`.

    Returns
    -------
    SphereResult
        ``directions`` with the first non-zero entry of each row made positive (``u`` even: the sign is
        not identifiable); ``hessian_max < 0`` certifies each as a local extremum. Whether the extrema
        are the ``+-w_i`` is Theorem 10's condition, which needs ``P`` and ``u``: check it with
        :func:`theorem10_condition` (when it fails, the first extremum is a mixed direction).
    """
    X = as_2d_float(X, "X")
    y = as_targets(y, "y", n_rows=X.shape[0]).reshape(-1)
    if maximize is None:
        if activation is not None:
            u = even_hermite_coefficients(activation, 4)
            maximize = bool(u[4] * u[0] >= 0)
        else:
            maximize = True
    yt = y - y.mean()                                            # E[c H_4] = 0: centring only cuts variance
    src = SampleHermiteCorrelation(X, yt, 4)
    res = sphere_maximization(src, n_hidden, maximize=bool(maximize), n_restarts=n_restarts, max_iter=max_iter,
                              rng=rng)
    D = res.directions
    lead = D[np.arange(D.shape[0]), np.argmax(np.abs(D) > 1e-12, axis=1)]
    res.directions = D * np.where(lead >= 0, 1.0, -1.0)[:, None]
    return res


_PAPER = "goel2019"
register("goel2019-appendixB1", paper=_PAPER, algorithm="Appendix B.1", target=orthonormal_sphere_route,
         assumptions=("x ~ N(0, I)", "W* orthonormal", "f = f_lin, c_i > 0", "even l >= 4, u_hat_l != 0"),
         description="max sgn(u_hat_l) E[f h_l(z.x)] on the sphere: Riemannian ascent + deflation")
register("goel2019-theorem10", paper=_PAPER, algorithm="Theorem 10", target=even_activation_recovery,
         assumptions=("x ~ N(0, I)", "u even, no threshold", "W* orthonormal", "P multilinear",
                      "alpha_i + alpha_j > gamma_ij (corrected constant sqrt(6) u_hat_2^2)"),
         description="sphere extrema of E[f h_4(z.x)]; theorem10_condition reports the pairwise margins")

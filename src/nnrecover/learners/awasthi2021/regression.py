"""Low-L2-error networks for Awasthi-Tang-Vijayaraghavan 2021: Algorithm 5 (regression on recovered
units plus a linear part), Claim D.14 (consolidation into ``<= |S| + 2`` ReLU units), the exact
statistical-query version (proof of Theorem 4.2) and the closed-form linear correction (internal).

Paper symbol -> code:

===============================================  ===========================================
paper                                            here
===============================================  ===========================================
``S = {(w~_j, a~_j, b~_j)}``                     ``units`` = ``(a, b, U)`` with ``U`` rows
``Psi(x) = (Z(x), Z'(x))``, ``Z'(x) = (x, 1)``   :func:`relu_features` (``map=...``)
``tau``, ``R``, ``L^_tau``                       :func:`truncation_radius`, :func:`ball_radius`
``beta^``                                        ``RegressionResult.beta``
``g(x) = beta^T Psi(x)``; Claim D.14 form         :func:`consolidate` -> ``TwoLayerNetwork``
``kappa(b, c, rho) = E[relu(z1) relu(z2)]``      :func:`nnrecover.metrics.relu_kernel`
===============================================  ===========================================

Feature maps (Algorithm 5): ``"general"`` (Lemma D.12: 8 features per unit,
``xi_3 a~_j relu(xi_1 w~_j^T x + xi_2 b~_j)``), ``"coordinated"`` (footnote 4: 2 per unit,
``a~_j relu(+-(w~_j^T x + b~_j))``) and ``"reduced"`` (default, 1 per unit): since
``relu(-z) = relu(z) - z`` and ``(x, 1)`` are features, ``{relu(z_j), x, 1}`` spans the same space as
the coordinated map without its exact collinearity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import linalg

from ...activations import norm_cdf, norm_pdf
from ...data import accumulate
from ...errors import InputError
from ...metrics import relu_kernel
from ...moments.base import Statistic
from ...network import TwoLayerNetwork

__all__ = ["relu_features", "consolidate", "algorithm5_regression",
           "population_regression", "linear_correction", "RegressionResult", "truncation_radius",
           "ball_radius", "FEATURE_MAPS"]

FEATURE_MAPS = ("reduced", "coordinated", "general")


# ============================================================== features and consolidation

def _unit_arrays(units) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a, b, U = (np.asarray(v, dtype=np.float64) for v in units)
    U = np.atleast_2d(U)
    if U.shape[0] != a.shape[0] or b.shape != a.shape:
        raise InputError(f"units must be (a, b, U) with a, b of shape (k,) and U of shape (k, d); got "
                         f"{a.shape}, {b.shape}, {U.shape}.")
    return a.reshape(-1), b.reshape(-1), U


def _unit_signs(feature_map: str) -> list[tuple[float, float, float]]:
    if feature_map == "reduced":
        return [(1.0, 1.0, 1.0)]
    if feature_map == "coordinated":
        return [(1.0, 1.0, 1.0), (-1.0, -1.0, 1.0)]
    if feature_map == "general":
        return [(s1, s2, s3) for s1 in (1.0, -1.0) for s2 in (1.0, -1.0) for s3 in (1.0, -1.0)]
    raise InputError(f"feature_map must be one of {FEATURE_MAPS}, got {feature_map!r}.")


def relu_features(X: np.ndarray, units, feature_map: str = "reduced") -> np.ndarray:
    """``Psi(x) = (Z(x), x, 1)`` of Algorithm 5 / Lemma D.12 for the rows of ``X``.

    Columns: for each sign pattern ``(xi1, xi2, xi3)`` of the map, the block
    ``xi3 a~_j relu(xi1 w~_j^T x + xi2 b~_j)`` over units ``j``; then ``x``; then ``1``.
    """
    a, b, U = _unit_arrays(units)
    Z = X @ U.T
    blocks = [s3 * a * np.maximum(s1 * Z + s2 * b, 0.0) for s1, s2, s3 in _unit_signs(feature_map)]
    return np.hstack(blocks + [X, np.ones((X.shape[0], 1))])


def consolidate(alpha_pos: Any, alpha_neg: Any, U: Any, b: Any, v: Any, c: float, *,
                linear: str = "output_bias"):
    """Claim D.14: ``g(x) = v^T x + c + sum_j alpha_j relu(w_j^T x + b_j) + alpha'_j relu(-w_j^T x - b_j)``
    as a ReLU network with at most ``|S| + 2`` units.

    With ``relu(-z) = relu(z) - z``: ``gamma_j = alpha_j + alpha'_j``,
    ``v_lin = v - sum_j alpha'_j w_j``, ``c_lin = c - sum_j alpha'_j b_j``, and the linear part
    ``v_lin^T x + c_lin = lambda_0 relu(w_0^T x + b_0) - lambda_0 relu(-w_0^T x - b_0)`` with
    ``lambda_0 = ||v_lin||``, ``w_0 = v_lin / lambda_0``.

    Parameters
    ----------
    alpha_pos, alpha_neg : (k,) output weights of ``relu(+z_j)`` and ``relu(-z_j)``.
    U : (k, d) rows ``w_j``; b : (k,) biases ``b_j``.
    v : (d,), c : float, the linear part.
    linear : {"output_bias", "paper"}
        ``"paper"``: ``lambda_0 b_0 = c_lin`` exactly as Claim D.14 (erratum E10 fixed: the sum runs
        over ``i = 1..m'``); ``"output_bias"`` (default): ``b_0 = 0`` and ``c_lin`` goes to the
        network's output bias, which avoids ``b_0 = c_lin / lambda_0`` blowing up when ``v_lin`` is
        tiny. When ``v_lin = 0`` (the edge case the claim omits) no linear units are added and
        ``c_lin`` is the output bias in both modes.

    Returns
    -------
    TwoLayerNetwork
    """

    ap = np.asarray(alpha_pos, float).reshape(-1)
    an = np.asarray(alpha_neg, float).reshape(-1)
    U = np.atleast_2d(np.asarray(U, float))
    b = np.asarray(b, float).reshape(-1)
    v = np.asarray(v, float).reshape(-1)
    k = ap.shape[0]
    if an.shape != (k,) or b.shape != (k,) or (k and U.shape[0] != k):
        raise InputError(f"consolidate needs alpha_pos, alpha_neg, b of shape (k,) and U of shape (k, d); got "
                         f"{ap.shape}, {an.shape}, {b.shape}, {U.shape}.")
    if k and U.shape[1] != v.shape[0]:
        raise InputError(f"U has {U.shape[1]} columns but v has {v.shape[0]} entries.")
    gamma = ap + an
    v_lin = v - an @ U if U.size else v.copy()
    c_lin = float(c - an @ b) if b.size else float(c)
    lam0 = float(np.linalg.norm(v_lin))
    rows, biases, outs = [U], [b], [gamma]
    out_bias = c_lin
    if lam0 > 0:
        w0 = v_lin / lam0
        b0 = c_lin / lam0 if linear == "paper" else 0.0
        if linear == "paper":
            out_bias = 0.0
        elif linear != "output_bias":
            raise InputError(f"linear must be 'output_bias' or 'paper', got {linear!r}.")
        rows.append(np.vstack([w0, -w0]))
        biases.append(np.array([b0, -b0]))
        outs.append(np.array([lam0, -lam0]))
    W = np.vstack(rows)
    if W.shape[0] == 0:  # nothing at all: a zero unit carries the constant
        W = np.zeros((1, v.shape[0]))
        biases, outs = [np.zeros(1)], [np.zeros(1)]
    return TwoLayerNetwork(W, np.concatenate(biases), np.concatenate(outs)[None, :], np.array([out_bias]))


# ============================================================== Algorithm 5

def truncation_radius(m: int, n_units: int, d: int, B: float, epsilon: float) -> float:
    """``tau = 20 m (8|S| + d) B sqrt(log(m d B |S| / eps))`` (Algorithm 5, step 4)."""
    arg = max(m * d * B * max(n_units, 1) / epsilon, math.e)
    return 20.0 * m * (8 * n_units + d) * B * math.sqrt(math.log(arg))


def ball_radius(m: int, n_units: int, B: float) -> float:
    """``R = sqrt(8 |S|) + m (1 + B)`` (Algorithm 5, step 4)."""
    return math.sqrt(8 * n_units) + m * (1 + B)


class _RegressionStatistic(Statistic):
    """``H = sum Psi Psi^T 1(||Psi|| < tau)``, ``sum y Psi 1(...)``, ``sum y^2 1(...)`` over the rows
    selected by ``rows`` ("all", "first_half", "second_half" of every chunk)."""

    def __init__(self, units, feature_map: str, tau: float, rows: str = "all"):
        self.units = units
        self.feature_map = feature_map
        self.tau = float(tau)
        self.rows = rows
        super().__init__()

    def _reset(self) -> None:
        self.H = None
        self.g = None
        self.yy = 0.0
        self.kept = 0
        self.dropped = 0

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        if self.rows == "second_half":
            X, Y = X[1::2], Y[1::2]
        elif self.rows == "first_half":
            X, Y = X[0::2], Y[0::2]
        y = Y[:, 0]
        F = relu_features(X, self.units, self.feature_map)
        keep = np.einsum("ij,ij->i", F, F) < self.tau ** 2
        if not np.all(keep):
            F, y = F[keep], y[keep]
        if self.H is None:
            p = F.shape[1]
            self.H, self.g = np.zeros((p, p)), np.zeros(p)
        self.H += F.T @ F
        self.g += F.T @ y
        self.yy += float(y @ y)
        self.kept += int(keep.sum())
        self.dropped += int((~keep).sum())

    def _merge(self, other) -> None:
        if other.H is None:
            return
        if self.H is None:
            self.H, self.g = other.H.copy(), other.g.copy()
        else:
            self.H += other.H
            self.g += other.g
        self.yy += other.yy
        self.kept += other.kept
        self.dropped += other.dropped

    def finalize(self):
        return self.H, self.g, self.yy, self.kept


@dataclass
class RegressionResult:
    """Output of :func:`algorithm5_regression` / :func:`population_regression`.

    Attributes
    ----------
    network : TwoLayerNetwork with at most ``|S| + 2`` units (Claim D.14).
    beta : (p,) regression coefficients on ``Psi``.
    linear : (d,) the linear part ``v``; ``constant``: ``c``.
    loss : training loss ``L^_tau(beta)`` (mean squared residual on the kept rows; population: exact).
    info : dict (solver, radius hit, rows kept / dropped by the truncation).
    """

    network: Any
    beta: np.ndarray
    linear: np.ndarray
    constant: float
    loss: float
    info: dict = field(default_factory=dict)


def _solve_ball(H: np.ndarray, g: np.ndarray, R: float, solver: str, ridge: float,
                max_iter: int = 5000, tol: float = 1e-12) -> tuple[np.ndarray, dict]:
    """``min_beta beta^T H beta - 2 g^T beta`` subject to ``||beta|| <= R`` (convex quadratic)."""
    p = H.shape[0]
    Hs = 0.5 * (H + H.T)
    lam, V = linalg.eigh(Hs)
    lam = np.maximum(lam, 0.0)
    gv = V.T @ g
    scale = max(lam[-1], 1e-300)

    def beta_of(mu):
        return V @ (gv / (lam + mu + ridge * scale))

    if solver == "exact":
        beta = beta_of(0.0)
        if np.linalg.norm(beta) <= R:
            return beta, {"solver": "exact", "ball_active": False}
        lo, hi = 0.0, max(scale, 1.0)
        while np.linalg.norm(beta_of(hi)) > R:
            hi *= 2.0
        for _ in range(200):  # bisection on the trust-region multiplier
            mid = 0.5 * (lo + hi)
            if np.linalg.norm(beta_of(mid)) > R:
                lo = mid
            else:
                hi = mid
            if hi - lo <= 1e-15 * hi:
                break
        return beta_of(hi), {"solver": "exact", "ball_active": True, "multiplier": hi}
    if solver == "pgd":  # the paper's projected gradient descent, step 1 / lambda_max
        beta = np.zeros(p)
        step = 1.0 / scale
        it = 0
        for it in range(max_iter):
            new = beta - step * (Hs @ beta - g)
            nrm = np.linalg.norm(new)
            if nrm > R:
                new *= R / nrm
            if np.linalg.norm(new - beta) <= tol * max(1.0, np.linalg.norm(beta)):
                beta = new
                break
            beta = new
        active = bool(np.linalg.norm(beta) >= R * (1 - 1e-12))
        return beta, {"solver": "pgd", "iterations": it + 1, "ball_active": active}
    raise InputError(f"solver must be 'exact' or 'pgd', got {solver!r}.")


def _network_from_beta(beta: np.ndarray, units, feature_map: str, d: int, linear: str):
    """Turn ``g = beta^T Psi`` into a ReLU network (Claim D.14).

    A feature ``xi3 a_j relu(xi1 (w_j^T x + xi1 xi2 b_j))`` lies on the line ``(w_j, e b_j)`` with
    ``e = xi1 xi2`` and orientation ``xi1``; per line the two orientations merge through
    ``relu(-z) = relu(z) - z``, the linear remainders join ``(x, 1)``. Reduced and coordinated maps
    use only ``e = +1`` (``|S| + 2`` units); the general map gives at most ``2 |S| + 2``.
    """
    a, b, U = _unit_arrays(units)
    k = a.shape[0]
    signs = _unit_signs(feature_map)
    nsig = len(signs) * k
    v = beta[nsig:nsig + d].copy()
    c = float(beta[-1])
    rows, biases, gammas = [], [], []
    for e in (1.0, -1.0):
        pos, neg, present = np.zeros(k), np.zeros(k), False
        for t, (s1, s2, s3) in enumerate(signs):
            if s1 * s2 != e:
                continue
            present = True
            coef = beta[t * k:(t + 1) * k] * s3 * a
            if s1 > 0:
                pos += coef
            else:
                neg += coef
        if not present:
            continue
        v -= neg @ U
        c -= float(neg @ (e * b))
        rows.append(U)
        biases.append(e * b)
        gammas.append(pos + neg)
    return consolidate(np.concatenate(gammas), np.zeros(sum(g.size for g in gammas)), np.vstack(rows),
                       np.concatenate(biases), v, c, linear=linear)


def algorithm5_regression(data: Any, units, *, feature_map: str = "reduced", rows: str = "second_half",
                          epsilon: float = 1e-2, bound: float | None = None, n_hidden: int | None = None,
                          solver: str = "exact", ridge: float = 1e-12, linear: str = "output_bias",
                          chunk_size: int | None = None) -> RegressionResult:
    """Steps 3-5 of Algorithm 5 plus Claim D.14: regress ``y`` on ``Psi(x)`` and consolidate.

    Parameters
    ----------
    data : (X, Y) arrays or a re-iterable of (X, Y) chunks.
    units : tuple (a, b, U)
        The recovered ``S = {(a~_j, b~_j, w~_j)}`` (``U`` rows in the input space).
    feature_map : {"reduced", "coordinated", "general"}
    rows : {"second_half", "all", "first_half"}
        Which rows to regress on; the paper uses the half not used for the tensors
        (``"second_half"``: the odd rows of every chunk).
    epsilon : float
        Target L2 accuracy in ``tau`` (only the truncation radius depends on it).
    bound : float, optional
        ``B`` (default: the largest ``|a~|``, ``|b~|`` and 1).
    n_hidden : int, optional
        ``m`` in ``tau`` and ``R`` (default ``|S|``).
    solver : {"exact", "pgd"}
        Exact minimiser over the ball ``||beta|| <= R`` (trust-region multiplier by bisection), or the
        paper's projected gradient descent.
    ridge : float
        Relative Tikhonov term (``ridge * lambda_max(H)``) for rank-deficient designs.
    linear : see :func:`consolidate`.

    Returns
    -------
    RegressionResult
    """
    a, b, U = _unit_arrays(units)
    d = U.shape[1]
    k = a.shape[0]
    B = float(bound) if bound is not None else float(max(1.0, np.abs(a).max(initial=0), np.abs(b).max(initial=0)))
    m = int(n_hidden) if n_hidden is not None else max(k, 1)
    tau = truncation_radius(m, k, d, B, epsilon)
    R = ball_radius(m, k, B)
    stat = accumulate(_RegressionStatistic((a, b, U), feature_map, tau, rows), data, chunk_size=chunk_size)
    H, g, yy, kept = stat.finalize()
    if H is None or kept == 0:
        raise InputError("Algorithm 5 received no rows to regress on.")
    # scale to the paper's normalisation: L(beta) = (1/n) sum (y - beta Psi)^2
    H, g, yy = H / kept, g / kept, yy / kept
    beta, info = _solve_ball(H, g, R, solver, ridge)
    loss = float(yy - 2 * g @ beta + beta @ H @ beta)
    info.update({"tau": tau, "R": R, "rows_kept": kept, "rows_truncated": stat.dropped, "feature_map": feature_map})
    net = _network_from_beta(beta, (a, b, U), feature_map, d, linear)
    nsig = len(_unit_signs(feature_map)) * k
    return RegressionResult(network=net, beta=beta, linear=beta[nsig:nsig + d], constant=float(beta[-1]),
                            loss=loss, info=info)


def population_regression(units, truth, *, linear: str = "output_bias", rcond: float = 1e-12) -> RegressionResult:
    """Exact statistical-query version of Algorithm 5 (proof of Theorem 4.2): ``beta = E[Psi Psi^T]^+ E[Psi y]``
    with the reduced feature map, every entry in closed form (:func:`nnrecover.metrics.relu_kernel`, ``c_0``,
    ``E[relu(w^T x + b) x] = Phi(b) w``). The fit is exact (zero L2 error) whenever the target is in the
    span, e.g. when ``S`` holds every unit up to sign."""
    a, b, U = _unit_arrays(units)
    net = truth.canonical()
    Wt, bt, at, ct = net.hidden_weights, net.hidden_bias, net.output_weights[0], float(net.output_bias[0])
    k, d = U.shape
    c0 = lambda bb: bb * norm_cdf(bb) + norm_pdf(bb)  # noqa: E731
    # second moments of (relu features of S, x, 1)
    Kss = relu_kernel(b[:, None], b[None, :], np.clip(U @ U.T, -1, 1)) * np.outer(a, a)
    Ksx = (a * norm_cdf(b))[:, None] * U  # E[a relu(u x + b) x]
    Ks1 = a * c0(b)
    p = k + d + 1
    H = np.zeros((p, p))
    H[:k, :k] = Kss
    H[:k, k:k + d] = Ksx
    H[k:k + d, :k] = Ksx.T
    H[:k, -1] = H[-1, :k] = Ks1
    H[k:k + d, k:k + d] = np.eye(d)
    H[-1, -1] = 1.0
    # E[Psi y]
    Kst = relu_kernel(b[:, None], bt[None, :], np.clip(U @ Wt.T, -1, 1)) @ at * a + ct * Ks1
    g = np.concatenate([Kst, (at * norm_cdf(bt)) @ Wt, [at @ c0(bt) + ct]])
    beta = linalg.pinvh(0.5 * (H + H.T), rtol=rcond) @ g
    ey2 = float(at @ relu_kernel(bt[:, None], bt[None, :], np.clip(Wt @ Wt.T, -1, 1)) @ at
                + 2 * ct * (at @ c0(bt)) + ct * ct)
    loss = float(ey2 - 2 * g @ beta + beta @ H @ beta)
    net_out = _network_from_beta(beta, (a, b, U), "reduced", d, linear)
    return RegressionResult(network=net_out, beta=beta, linear=beta[k:k + d], constant=float(beta[-1]),
                            loss=loss, info={"solver": "population"})


def linear_correction(units, t0: float, t1: Any, *, linear: str = "output_bias"):
    """Closed-form low-L2 network when the signs are known (Algorithm 5, linear part in closed form):
    ``g = sum_S a~ relu(w~ x + b~) + (T_1 - sum_S a~ Phi(b~) w~)^T x + (T_0 - sum_S a~ c_0(b~))``.

    The bracket terms are the best linear approximation ``h^_0 + h^_1^T x`` of the residual ``h``
    (first two Hermite coefficients), so the result is exact whenever the residual is linear -- e.g.
    units with wrong sign (``a relu(-z) = a relu(z) - a z``) or units with huge positive bias.
    """
    a, b, U = _unit_arrays(units)
    t1 = np.asarray(t1, float).reshape(-1)
    c0 = b * norm_cdf(b) + norm_pdf(b)
    v = t1 - (a * norm_cdf(b)) @ U
    c = float(t0 - a @ c0)
    return consolidate(a, np.zeros_like(a), U, b, v, c, linear=linear)

"""Matrix-free Gauss-Newton polish of a one-output ReLU network for large ``d`` (internal).

The shared refinement (:func:`nnrecover.refine.refine_network`) finishes in the full space with the
normal matrix ``J^T J`` of all ``P = k (d + 2) + 1`` parameters: ``8 P^2`` bytes and ``O(n P^2)`` flops
per step, 3.2 GB at ``d = 1000``, ``k = 20``. Here the normal equations are solved by preconditioned
conjugate gradients, each product with ``J^T J`` costing two ``O(n d k)`` products with the rows, and
the preconditioner is the *population* normal matrix, which is block diagonal and small:

With ``Q`` (d x k) an orthonormal basis of the current hidden rows, write ``x = Q u + x_perp``. The
activations ``relu(w_i^T x + b_i)`` depend on ``u`` only, and for ``x ~ N(0, I_d)`` (the model of
Awasthi et al. 2021, Section 1) ``x_perp`` is independent of ``u`` with covariance ``I - Q Q^T``. So in
the coordinates ``(dW Q, b, a, c)`` (the span, ``k^2 + 2k + 1`` parameters) and ``dW (I - Q Q^T)``
(the complement) the expected normal matrix has no cross block, and its complement block is
``A (x) (I - Q Q^T)`` with ``A_il = a_i a_l sum_n 1[z_ni > 0] 1[z_nl > 0]``. The preconditioner uses
that ``k x k`` matrix for the complement and the exact sample normal matrix of the span coordinates;
the sample normal matrix differs from it by ``O(sqrt(d / n))``, so conjugate gradients converge at a
rate set by the ratio of rows to parameters, not by ``d``.

Levenberg-Marquardt damping uses the preconditioner itself as the scaling matrix
(``(J^T J + mu M) delta = -J^T r``, Marquardt's scaling with a block ``M`` instead of a diagonal).
The loss is piecewise smooth (ReLU kinks), and on noiseless data the residual vanishes at the teacher,
where Gauss-Newton converges to round-off, with order 3/2 rather than 2 (the kinks move; measured
``log e_{j+1} / log e_j`` = 1.47-1.53 at d = 500, k = 20). The conjugate-gradient tolerance follows
an inexact-Newton forcing term that keeps that order (``forcing``), and the products with ``J^T J`` run in
float32, half the cost of the O(n d k) products that dominate a step, while the residual and the
gradient, which fix the solution, stay float64 (``matrix_free_polish``'s Notes).
"""

from __future__ import annotations

import time

import numpy as np
from scipy import linalg

from ..._validation import check_positive_int
from ...errors import InputError
from ...network import TwoLayerNetwork
from ...refine.matrix_free import SpanPreconditioner, forcing, pcg

__all__ = ["matrix_free_polish"]

_STATIONARY_GAIN = 1e-6
"""Relative loss gain below which two accepted steps in a row end the polish (label noise: the loss
tends to a positive minimum; see ``matrix_free_polish``'s Notes)."""

_ROW_BLOCK = 8192
"""Rows per block when the span block's normal matrix is accumulated (its Jacobian has ``k^2 + 2k + 1``
columns)."""


def _unpack(net: TwoLayerNetwork) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    return (np.array(net.hidden_weights, dtype=np.float64), np.array(net.hidden_bias, dtype=np.float64),
            np.array(net.output_weights[0], dtype=np.float64), float(net.output_bias[0]))


def _forward(W, b, a, c, X, y):
    Z = X @ W.T
    Z += b
    mask = Z > 0
    H = np.where(mask, Z, 0.0)
    r = H @ a + c - y
    return mask, H, r


class _NormalSystem(SpanPreconditioner):
    """``J^T J`` products and the block preconditioner at one iterate (see the module docstring)."""

    _complement_ridge = False

    def __init__(self, W, b, a, X, mask, H, X_op):
        self.X, self.H = X, H
        n, k = mask.shape
        # relu(t z) = t relu(z) (t > 0): the directions (dw_i, db_i, da_i) = (w_i, b_i, -a_i) leave f unchanged,
        # so they span the null space of J^T J (and of M), mutually orthogonal (one unit each)
        self._gauge = (W, b, -a)
        self._gauge_norm2 = np.einsum("ij,ij->i", W, W) + b * b + a * a
        self.G = mask * a  # d f / d z_i = a_i 1[z_i > 0]
        # the operator's copies (X_op's precision, see matrix_free_polish's Notes); the gradient uses X, G, H
        self.X_op, self.G_op, self.H_op = X_op, self.G.astype(X_op.dtype), H.astype(X_op.dtype)
        Q = linalg.qr(W.T, mode="economic")[0]
        self.Q = Q
        U = X[:min(n, 20 * (k * k + 2 * k + 1))] @ Q
        # span block: columns (dW Q)_il -> G_i u_l, then b_i -> G_i, a_i -> H_i, c -> 1
        p = k * k + 2 * k + 1
        S = np.zeros((p, p))
        # a preconditioner needs only to be near J^T J: the span block from the first 20 p rows (its sampling
        # error ~ sqrt(p / 20 p) = 0.22 of the block, against the complement's sqrt(d / n))
        n_s = min(n, 20 * p)
        for s in range(0, n_s, _ROW_BLOCK):
            e = min(s + _ROW_BLOCK, n_s)
            G, Uc, Hc = self.G[s:e], U[s:e], H[s:e]
            Js = np.empty((G.shape[0], p))
            Js[:, :k * k] = (G[:, :, None] * Uc[:, None, :]).reshape(G.shape[0], k * k)
            Js[:, k * k:k * k + k] = G
            Js[:, k * k + k:k * k + 2 * k] = Hc
            Js[:, -1] = 1.0
            S += Js.T @ Js
        self.S = S * (n / n_s)
        self.C = self.G.T @ self.G  # complement block: A (x) (I - Q Q^T)
        self.k = k

    def jtj(self, dW, db, da, dc):
        """``J^T J`` applied to a direction, in the precision of ``X_op``."""
        t = self.X_op.dtype
        Jv = np.einsum("nk,nk->n", self.X_op @ dW.T.astype(t) + db.astype(t), self.G_op) + self.H_op @ da.astype(t)
        Jv += t.type(dc)
        out = self._jt(Jv, self.X_op, self.G_op, self.H_op)
        return tuple(np.asarray(o, dtype=np.float64) for o in out[:3]) + (out[3],)

    def project(self, dW, db, da, dc):
        """Remove the null-space (rescaling) components of a direction. ``J^T J v`` has none in exact
        arithmetic; its rounding errors there, which the preconditioner's ridge would amplify by about
        ``1e8``, are removed (a float32 operator's ``1e-7`` would become a step of order one)."""
        gW, gb, ga = self._gauge
        coef = (np.einsum("ij,ij->i", dW, gW) + db * gb + da * ga) / self._gauge_norm2
        return dW - coef[:, None] * gW, db - coef * gb, da - coef * ga, dc

    def jt(self, u):
        """``J^T u`` (float64)."""
        return self._jt(u, self.X, self.G, self.H)

    @staticmethod
    def _jt(u, X, G, H):
        Gu = G * u[:, None]
        return Gu.T @ X, Gu.sum(axis=0), H.T @ u, float(u.sum(dtype=np.float64))

    def _rest(self, sol):
        k = self.k
        return sol[k * k:k * k + k], sol[k * k + k:k * k + 2 * k], float(sol[-1])


def matrix_free_polish(network: TwoLayerNetwork, X: np.ndarray, y: np.ndarray, *, max_iter: int = 60,
                       max_cg: int = 60, cg_rtol: float = 1e-1, time_limit: float | None = None,
                       operator_dtype: str = "float32") -> tuple[TwoLayerNetwork, dict]:
    """Levenberg-Marquardt on the squared loss of a one-output ReLU network, matrix free.

    Parameters
    ----------
    network : TwoLayerNetwork
        The start: one output, ReLU hidden units, fewer hidden units than inputs.
    X : (n, d) array
        Training rows, ``x ~ N(0, I_d)`` (the preconditioner is the population normal matrix).
    y : (n,) array
        Targets.
    max_iter : int
        Outer (Gauss-Newton) steps, accepted or not.
    max_cg, cg_rtol : int, float
        Conjugate-gradient budget of each step and its loosest relative tolerance (in the
        preconditioner's norm); the tolerance tightens as the residual falls (see Notes).
    time_limit : float, optional
        Seconds after which no new step starts.
    operator_dtype : {"float32", "float64"}
        Precision of the ``J^T J`` products inside the conjugate gradients (see Notes). The residual, the
        gradient ``J^T r`` and the iterates are always float64.

    Returns
    -------
    network : TwoLayerNetwork
        The best iterate (smallest training loss).
    info : dict
        ``n_iter``, ``cg_iterations`` and ``cg_rtol`` (per solve), ``losses`` (per accepted step),
        ``train_loss_start``, ``train_loss_refined``, ``stop``, ``time``.

    Notes
    -----
    Each step solves its normal equations to the relative tolerance
    ``eta = min(cg_rtol, sqrt(||r|| / ||y||))`` (an inexact-Newton forcing term, Eisenstat and Walker
    1996): at a zero-residual solution ``||r||`` is proportional to the parameter error ``e``, and a step
    leaves ``e_+ <= C e^{3/2} + kappa eta e`` (the ReLU kinks move: a fraction ``O(e)`` of the rows
    changes its active set by an ``O(e)`` pre-activation, hence ``3/2``, not Newton's 2), so
    ``eta ~ e^{1/2}`` keeps that order while the first steps, far from the solution, stay cheap.

    The fixed point is set by the float64 residual and gradient alone; the ``J^T J`` products only
    choose the step. In float32 (``operator_dtype``, the default) they cost half as much (a copy of ``X``
    in float32, ``4 n d`` bytes) and are within a relative ``~ 1e-6`` of the float64 ones, which acts as
    one more inexact solve: the tolerance is kept at or above ``1e-5``, which such an operator still
    reaches, and the steps still converge to round-off.

    Stops when the mean squared residual is at round-off, ``<= (64 eps)^2 mean(y^2)`` (the rule of
    :func:`nnrecover.refine.fit_least_squares`'s ``"gn"``), when two accepted steps in a row each gain
    less than ``1e-6`` of the loss (a positive minimum, label noise: the statistical error of ``n`` rows moves
    the loss by about ``loss P / n``, a third of it at ``n = 3 P``, so what further steps could gain is far
    below it), when a step gains less than ``1e-12`` of
    the loss after the damping has been raised ten times in a row, or at ``max_iter``.
    """
    t0 = time.perf_counter()
    max_iter = check_positive_int(max_iter, "max_iter")
    max_cg = check_positive_int(max_cg, "max_cg")
    if not 0.0 < float(cg_rtol) < 1.0:
        raise InputError(f"cg_rtol must be in (0, 1), got {cg_rtol!r}.")
    if not isinstance(network, TwoLayerNetwork):
        raise InputError(f"network must be a TwoLayerNetwork, got {type(network).__name__}.")
    if network.n_outputs != 1 or network.activation.name != "relu":
        raise InputError("matrix_free_polish needs a one-output ReLU network.")
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if X.ndim != 2 or X.shape[1] != network.n_inputs or y.shape[0] != X.shape[0]:
        raise InputError(f"X must be (n, {network.n_inputs}) and y (n,), got {X.shape} and {y.shape}.")
    if operator_dtype not in ("float32", "float64"):
        raise InputError(f"operator_dtype must be 'float32' or 'float64', got {operator_dtype!r}.")
    X_op = X.astype(np.float32) if operator_dtype == "float32" else X
    min_rtol = 1e-5 if operator_dtype == "float32" else 1e-10
    W, b, a, c = _unpack(network)
    n = X.shape[0]
    y_mean_square = float(y @ y) / n
    floor = (64 * np.finfo(float).eps) ** 2 * y_mean_square
    mask, H, r = _forward(W, b, a, c, X, y)
    loss = float(r @ r) / n
    info = {"train_loss_start": loss, "cg_iterations": [], "cg_rtol": [], "losses": [], "n_iter": 0,
            "stop": "max_iter"}
    mu, nu, rejected, small = 1e-3, 2.0, 0, 0
    for it in range(max_iter):
        if loss <= floor:
            info["stop"] = "round-off"
            break
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            info["stop"] = "time_limit"
            break
        info["n_iter"] = it + 1
        system = _NormalSystem(W, b, a, X, mask, H, X_op)
        g = system.jt(r)
        gain = 0.0
        while True:
            try:
                eta = forcing(loss, y_mean_square, floor, float(cg_rtol), min_rtol)
                (dW, db, da, dc), its = pcg(system, g, mu, eta, max_cg)
            except linalg.LinAlgError:  # a unit that is never active: its blocks are singular
                mu, nu = mu * nu, 2 * nu
                rejected += 1
                if rejected > 10:
                    break
                continue
            info["cg_iterations"].append(its)
            info["cg_rtol"].append(eta)
            Wn, bn, an, cn = W + dW, b + db, a + da, c + dc
            mask_n, H_n, r_n = _forward(Wn, bn, an, cn, X, y)
            loss_n = float(r_n @ r_n) / n
            if loss_n < loss:
                gain = (loss - loss_n) / loss
                W, b, a, c, mask, H, r = Wn, bn, an, cn, mask_n, H_n, r_n
                loss = loss_n
                info["losses"].append(loss)
                mu, nu, rejected = max(mu / 3.0, 1e-12), 2.0, 0
                small = small + 1 if gain < _STATIONARY_GAIN else 0
                break
            mu, nu = mu * nu, 2 * nu
            rejected += 1
            gain = 0.0
            if rejected > 10:
                break
        if rejected > 10 and gain < 1e-12:
            info["stop"] = "no progress"
            break
        if small >= 2:
            info["stop"] = "stationary"
            break
    info["train_loss_refined"] = loss
    info["time"] = time.perf_counter() - t0
    out = TwoLayerNetwork(W, b, a[None, :], np.array([c]), activation=network.activation)
    return out, info

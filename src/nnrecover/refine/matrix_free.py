"""Matrix-free Gauss-Newton (Levenberg-Marquardt) for ReLU networks with ``p`` outputs (internal).

The shared refinement's full-space stages (:mod:`nnrecover.refine`, method ``"gn"``) form the normal
matrix ``J^T J`` of all ``P = k d + k + p k + p`` parameters of ``f(x) = A relu(W x + b) + c``: ``8 P^2``
bytes, ``O(m (k d)^2)`` flops per pass over ``m`` rows and an ``O(P^3)`` Cholesky factorisation. Here the
normal equations are solved by preconditioned conjugate gradients (:func:`pcg`); a product with ``J^T J``
is two ``O(m d k)`` products with the rows, and nothing ``P x P`` is formed.

Notation (the refinement's): ``Z = X W^T + b`` (m x k), ``G = relu'(Z) = 1[Z > 0]``, ``H = relu(Z)``,
``R = H A^T + c - Y`` (m x p). A direction ``v = (dW, db, dA, dc)`` moves the outputs by

    J v = ((X dW^T + db) * G) A^T + H dA^T + dc            (m x p),

and ``J^T U`` is ``(D^T X, sum_n D_n, U^T H, sum_n U_n)`` with ``D = (U A) * G``. The loss is
``L = (1/m) sum_n ||R_n||^2``, and the solver works with ``J^T J / m`` and ``g = J^T R / m``.

Preconditioner (the population normal matrix, the multi-output form of
:mod:`nnrecover.learners.awasthi2021.scale`): with ``Q`` (d x k) an orthonormal basis of the hidden rows,
``x = Q u + x_perp``; the activations depend on ``u`` only, and for ``x ~ N(0, I_d)`` ``x_perp`` is
independent of ``u`` with covariance ``I - Q Q^T``. In the span coordinates ``(dW Q, db, dA, dc)``
(``k^2 + k + p k + p`` of them) and the complement ``dW (I - Q Q^T)`` the expected normal matrix has no
cross block, and its complement block is ``C (x) (I - Q Q^T)`` with

    C_il = (A^T A)_il (1/m) sum_n G_ni G_nl                (k x k; for p = 1, a_i a_l times the co-activity).

``M`` = the exact sample normal matrix of the span coordinates (:func:`nnrecover.refine.model._normal_equations`
on the rows projected to ``u``, from at most ``20`` rows per span coordinate) and ``C`` on the complement.
The sample complement block differs from its expectation by ``O(sqrt(d / m))``, so the number of
conjugate-gradient steps is set by the ratio of rows to parameters, not by ``d``. For inputs that are not
standard Gaussian ``M`` is only an approximation of ``J^T J``: the conjugate gradients need more steps
(they are capped) and a step is only accepted when it lowers the loss.

The rescaling symmetry ``relu(t z) = t relu(z)`` (``t > 0``) makes ``(w_i, b_i, -A[:, i])`` a null direction
of ``J^T J`` for every unit ``i``; the solver projects these ``k`` directions out of every product
(``Operator.project``), and a relative ridge makes ``M`` invertible. Levenberg-Marquardt damps with ``M``
itself as the scaling matrix, ``(J^T J + mu M) h = -g`` (Marquardt's scaling with a block matrix instead
of a diagonal), the conjugate-gradient tolerance follows an inexact-Newton forcing term (:func:`forcing`),
and the products with ``J^T J`` run in float32 while the residual and the gradient, which fix the
solution, stay float64 (see :mod:`nnrecover.learners.awasthi2021.scale` for the measurements behind both).

Memory: ``G``, ``H`` and the residuals (``O(m (k + p))`` doubles, with float32 copies of ``G`` and ``H``), the
rows in float32 when ``4 m d`` bytes fit the caller's budget (else the float64 rows themselves), and the span
block in parts: its hidden block and their Schur complement, ``2 (k^2 + k)^2`` doubles, and the outputs'
coupling, ``p (k + 1) (k^2 + k)`` (3.9 MB at ``k = p = 20``, 156 MB at ``k = p = 50``); never ``P x P``.

:func:`gauss_newton` is the method ``"gn-matrix-free"`` of :func:`nnrecover.refine.fit_least_squares`,
:func:`subsample_solver` the solves of its fixed-Hessian steps; the one-output polish of
:mod:`nnrecover.learners.awasthi2021.scale` shares :func:`pcg`, :func:`forcing` and
:class:`SpanPreconditioner`.

In the pipeline: Matrix free (:mod:`nnrecover.refine.matrix_free`). The same Levenberg-Marquardt iteration with the normal equations
solved by preconditioned conjugate gradients: a product with ``J^T J`` is two ``O(m d k)`` products with the
rows, nothing ``P x P`` is formed, and the preconditioner is the population normal matrix of Gaussian inputs
(the exact sample normal matrix of the ``k^2 + k + p k + p`` span coordinates ``(dW Q, b, A, c)`` and ``C (x)
(I - Q Q^T)``, ``C = (A^T A) * (G^T G / m)``, on the complement of the span of the hidden rows), so the
conjugate gradients need a number of steps set by the ratio of rows to parameters, not by ``d``. It replaces L-BFGS where ``J^T J`` does not fit ``jacobian_memory`` (L-BFGS stops near 1e-8 relative
error; this reaches round-off on noiseless data), and runs by default from ``_MATRIX_FREE_MIN_PARAMS = 1000``
parameters, where it is faster than the dense solver (benchmarks/README.md, "Refinement").
"""

from __future__ import annotations

import time

import numpy as np
from scipy import linalg
from scipy.linalg import blas, lapack

from .._threads import blas_threads
from ..network import TwoLayerNetwork
from .model import Model, normal_sums

__all__: list[str] = []

#: rows of the span block's normal matrix per span coordinate: its sampling error is then about
#: sqrt(1 / 20) = 0.22 of the block, against the complement block's sqrt(d / m)
_SPAN_ROWS_PER_COORDINATE = 20
#: starting Levenberg-Marquardt parameter (relative to the preconditioner M) and its floor; the rescaling
#: null directions are projected out, so the floor only keeps mu positive
_MU0 = 1e-3
_MU_MIN = 1e-12
#: loosest relative tolerance of a step's conjugate gradients (the forcing term's ceiling), and the
#: tightest one per operator precision (a float32 operator is within ~1e-6 of the float64 one)
_CG_MAX_RTOL = 0.1
_CG_MIN_RTOL = {np.float32: 1e-5, np.float64: 1e-10}
#: rejected trial steps in a row (mu raised each time) after which the solver stops
_MAX_REJECTED = 10


# =========================================================================== conjugate gradients

def dot(u, v) -> float:
    """Inner product of two directions given as tuples ``(dW, db, da, dc)`` of arrays or numbers."""
    return float(sum(np.vdot(x, y) for x, y in zip(u[:3], v[:3])) + np.vdot(u[3], v[3]))


def axpy(alpha, x, y):
    return tuple(alpha * xi + yi for xi, yi in zip(x, y))


def pcg(system, g, mu: float, rtol: float, max_cg: int):
    """Solve ``(J^T J + mu M) delta = -g`` by preconditioned conjugate gradients; returns ``(delta, its)``.

    ``system`` provides ``factor(mu)`` (factorise ``(1 + mu) M``), ``m_apply(*v, inverse)`` (``M v`` or
    ``((1 + mu) M)^{-1} v``), ``jtj(*v)`` and ``project(*v)`` (remove the null-space components); directions
    are tuples ``(dW, db, da, dc)``. Stops when the residual's norm in the preconditioner's metric has
    fallen by ``rtol``, or after ``max_cg`` iterations.
    """
    system.factor(mu)

    def op(v):
        jv = system.jtj(*v)
        if mu:
            jv = axpy(mu, system.m_apply(*v, inverse=False), jv)
        return system.project(*jv)

    x = (np.zeros_like(g[0]), np.zeros_like(g[1]), np.zeros_like(g[2]), 0.0)
    r = system.project(*(tuple(-gi for gi in g[:3]) + (-g[3],)))
    z = system.m_apply(*r, inverse=True)
    p = z
    rz = dot(r, z)
    rz0 = rz
    its = 0
    while its < max_cg and rz > (rtol ** 2) * rz0:
        Ap = op(p)
        alpha = rz / dot(p, Ap)
        x = axpy(alpha, p, x)
        r = axpy(-alpha, Ap, r)
        z = system.m_apply(*r, inverse=True)
        rz_new = dot(r, z)
        p = axpy(rz_new / rz, p, z)
        rz = rz_new
        its += 1
    return x, its


def forcing(loss: float, y_mean_square: float, floor: float, cg_max_rtol: float, cg_min_rtol: float) -> float:
    """Relative tolerance ``eta`` of one step's conjugate gradients (an inexact-Newton forcing term).

    ``eta = min(cg_max_rtol, sqrt(||r|| / ||y||))``, at least ``cg_min_rtol``, and never tighter than what
    takes the residual to the round-off stop ``floor``. At a zero-residual solution ``||r||`` is
    proportional to the parameter error ``e`` (``r = J e + O(e^{3/2})``, ``J`` of full column rank), and a
    step with a relative solve error ``eta`` leaves ``e_+ <= C e^{3/2} + kappa eta e``: the ``3/2`` rather
    than Newton's 2 because the ReLU kinks move, a fraction ``O(e)`` of the rows changes its active set
    by an ``O(e)`` pre-activation. ``eta ~ e^{1/2}`` therefore keeps the order ``3/2`` while far from the
    solution a loose solve costs few products with the rows.
    """
    eta = min(cg_max_rtol, (loss / y_mean_square) ** 0.25) if y_mean_square > 0 else cg_max_rtol
    if loss > floor:
        eta = max(eta, 0.5 * np.sqrt(floor / loss))
    return float(min(max(eta, cg_min_rtol), cg_max_rtol))


# =========================================================================== the operator

def span_block_size(n_hidden: int, n_outputs: int) -> int:
    """Number of span coordinates ``(dW Q, db, dA, dc)``: ``k^2 + k + p k + p`` (the preconditioner's dense
    block is the square of it)."""
    return n_hidden * n_hidden + n_hidden + n_outputs * n_hidden + n_outputs


class SpanPreconditioner:
    """The block preconditioner ``M`` (module docstring): ``S`` on the span coordinates ``(dW Q, rest)`` and
    ``C (x) (I - Q Q^T)`` on the complement. A subclass sets ``S``, ``C``, ``Q`` (d x k), ``k`` and
    :meth:`_rest` (the blocks after ``dW``, from the tail of a span vector)."""

    #: a relative ridge on ``C`` too (a unit that is never active makes it singular)
    _complement_ridge = True

    _factors = None

    def factor(self, mu: float):
        """Prepare solves with ``(1 + mu) M`` (the preconditioner of ``J^T J + mu M``): the factors of ``M``
        once per point, whatever ``mu`` (each rejected trial step raises it), the scale at each solve."""
        self._scale = 1.0 + mu
        if self._factors is None:
            # relu(t z) = t relu(z) (t > 0): scaling (w_i, b_i) by t and the unit's output weights by 1 / t
            # leaves f unchanged, so S is singular along k directions, which J^T r never has; the relative
            # ridge makes M invertible
            C = self.C.copy()
            if self._complement_ridge:
                C[np.diag_indices_from(C)] += 1e-8 * np.diag(self.C) + 1e-300
            self._factors = (self._span_factors(), linalg.cho_factor(C, check_finite=False))

    def _span_factors(self) -> tuple:
        """:func:`_span_block_factors` of ``S`` with the relative ridge ``1e-8 diag(S)``."""
        S = self.S.copy()
        S[np.diag_indices_from(S)] += 1e-8 * np.diag(self.S) + 1e-300
        return _span_block_factors(S, self.k)

    def _span_apply(self, vec: np.ndarray) -> np.ndarray:
        """``S vec``."""
        return self.S @ vec

    def m_apply(self, gW, gb, gA, gc, inverse: bool):
        """``M v`` or ``((1 + mu) M)^{-1} v`` (after :meth:`factor`)."""
        k, Q = self.k, self.Q
        gV = gW @ Q
        gperp = gW - gV @ Q.T
        vec = np.concatenate([gV.ravel(), gb, np.ravel(gA), np.ravel(gc)])
        if inverse:
            span, cc = self._factors
            sol = _span_block_solve(span, vec)
            sol /= self._scale
            perp = linalg.cho_solve(cc, gperp, check_finite=False)
            perp /= self._scale
        else:
            sol = self._span_apply(vec)
            perp = self.C @ gperp
        dW = sol[:k * k].reshape(k, k) @ Q.T + perp
        return (dW,) + self._rest(sol)


def _output_groups(size: int, k: int) -> np.ndarray:
    """Indices ``(p, k + 1)`` of each output's coordinates ``(A[o, :], c[o])`` in a span vector
    ``(dW Q, db, dA, dc)`` of ``size = k^2 + k + p k + p`` entries."""
    kb = k * k + k
    p = (size - kb) // (k + 1)
    groups = np.empty((p, k + 1), dtype=np.intp)
    groups[:, :k] = kb + np.arange(p * k).reshape(p, k)
    groups[:, k] = kb + p * k + np.arange(p)
    return groups


def _span_block_factors(S: np.ndarray, k: int) -> tuple:
    """Factors of the span block ``S`` (positive definite, ``k^2 + k`` hidden coordinates ``(dW Q, db)``
    followed by ``p (k + 1)`` output ones) for :func:`_span_block_solve`, by its Schur complement on the
    hidden coordinates.

    An output's coordinates ``(A[o, :], c[o])`` act on that output alone, so the output block is block
    diagonal, ``p`` blocks ``K_o`` of size ``k + 1`` (all equal to ``[h, 1]^T [h, 1] / m``). With
    ``K_o = L_o L_o^T`` and ``Y_o = L_o^{-1} S_{o, hidden}``, the hidden coordinates solve with the Schur
    complement ``S_hh - sum_o Y_o^T Y_o``. Its Cholesky factorisation costs ``(k^2 + k)^3 / 3`` flops and
    forming it ``(k^2 + k)^2 p (k + 1)``, against ``(k^2 + k + p (k + 1))^3 / 3`` for all of ``S``: at
    ``k = p = 50`` (5100 coordinates) 0.46 s against 0.93 s with one thread.
    """
    groups = _output_groups(S.shape[0], k)
    nh = k * k + k
    blocks = S[groups[:, :, None], groups[:, None, :]]              # (p, k + 1, k + 1)
    Linv = np.empty_like(blocks)
    eye = np.eye(k + 1)
    for o, K in enumerate(blocks):
        L = linalg.cholesky(K, lower=True, check_finite=False)
        Linv[o] = linalg.solve_triangular(L, eye, lower=True, check_finite=False)
    Y = Linv @ S[groups.ravel(), :nh].reshape(len(groups), k + 1, nh)  # (p, k + 1, k^2 + k)
    # S_hh - Y^T Y in the upper triangle only (a symmetric rank update: half the flops of the product), the
    # triangle the Cholesky factorisation reads
    schur = blas.dsyrk(-1.0, Y.reshape(-1, nh), beta=1.0, c=np.asfortranarray(S[:nh, :nh]), trans=1, lower=0,
                       overwrite_c=1)
    return groups, Linv, Y, linalg.cho_factor(schur, lower=False, overwrite_a=True, check_finite=False)


def _span_block_solve(factors: tuple, vec: np.ndarray) -> np.ndarray:
    """``S^{-1} vec`` from :func:`_span_block_factors` (block elimination of the output coordinates); ``vec``
    is one vector or a matrix of columns."""
    groups, Linv, Y, schur = factors
    nh = Y.shape[2]
    V = vec.reshape(vec.shape[0], -1)
    w = Linv @ V[groups]                                            # L_o^{-1} v_o: (p, k + 1, columns)
    out = np.empty_like(V)
    out[:nh] = linalg.cho_solve(schur, V[:nh] - Y.reshape(-1, nh).T @ w.reshape(-1, V.shape[1]), check_finite=False)
    # x_o = L_o^{-T} (w_o - Y_o x_h)
    out[groups] = Linv.transpose(0, 2, 1) @ (w - Y @ out[:nh])
    return out.reshape(vec.shape)


def span_block_unit_inverses(factors: tuple, k: int) -> np.ndarray:
    """The diagonal blocks of ``S^{-1}`` on each unit's span coordinates ``(v_i, b_i, A[:, i])`` (``k + 1 + p``
    of them; ``v_i`` = row ``i`` of ``dW Q``), from :func:`_span_block_factors`: ``(k, k + 1 + p, k + 1 + p)``.

    With the hidden coordinates first, ``S = [[H, B], [B^T, D]]``, ``D`` block diagonal (``K_o`` per
    output) and ``Z = D^{-1} B^T``: ``S^{-1} = [[T^{-1}, -T^{-1} Z^T], [-Z T^{-1}, D^{-1} + Z T^{-1} Z^T]]``
    with the Schur complement ``T``. Unit ``i`` needs ``T^{-1}`` on its ``k + 1`` hidden coordinates and,
    for ``A[:, i]``, row ``i`` of every ``Z_o`` and ``(K_o^{-1})_ii``: ``O((k^2)^3 + k p (k^2)^2)`` flops in
    all, against ``O(P_span^3)`` for the whole inverse."""
    groups, Linv, Y, schur = factors
    nh = Y.shape[2]
    p = groups.shape[0]
    # T^{-1} from its Cholesky factor (LAPACK potri: a third of the flops of solving with the identity)
    c, lower = schur
    Tinv, info = lapack.dpotri(c, lower=lower)
    if info != 0:  # pragma: no cover - the factor came from a successful potrf
        raise np.linalg.LinAlgError(f"dpotri failed ({info})")
    Tinv = np.triu(Tinv) + np.triu(Tinv, 1).T if not lower else np.tril(Tinv) + np.tril(Tinv, -1).T
    Z = Linv.transpose(0, 2, 1) @ Y                                 # K_o^{-1} S_{o, hidden}: (p, k + 1, nh)
    Kinv_diag = np.einsum("oai,oai->oi", Linv, Linv)               # (K_o^{-1})_ii = ||L_o^{-1} e_i||^2
    out = np.empty((k, k + 1 + p, k + 1 + p))
    # Z_o T^{-1} Z_o'^T = W^T W with W = R^{-T} Z^T (T = R^T R, or R R^T for a lower factor R): one
    # triangular solve for every unit's rows of every Z_o, half the flops of the product with T^{-1}
    Zall = Z[:, :k, :].transpose(2, 1, 0).reshape(nh, k * p)        # column i p + o: row i of Z_o
    W = linalg.solve_triangular(c, Zall, trans=0 if lower else 1, lower=lower, check_finite=False)
    W = W.reshape(nh, k, p)
    for i in range(k):
        hidden = np.r_[i * k:(i + 1) * k, k * k + i]
        Zi = Z[:, i, :]                                             # (p, nh)
        TZ = -(Tinv[hidden] @ Zi.T)                                 # the (hidden, output) block: (k + 1, p)
        out[i, :k + 1, :k + 1] = Tinv[np.ix_(hidden, hidden)]
        out[i, :k + 1, k + 1:] = TZ
        out[i, k + 1:, :k + 1] = TZ.T
        out[i, k + 1:, k + 1:] = W[:, i, :].T @ W[:, i, :]
        out[i, k + 1:, k + 1:][np.diag_indices(p)] += Kinv_diag[:, i]
    return out


class Operator(SpanPreconditioner):
    """``J^T J / m`` products, ``J^T U / m`` and the block preconditioner ``M`` at one point (module
    docstring). Directions are tuples ``(dW, db, dA, dc)`` of shapes ``(k, d), (k,), (p, k), (p,)``."""

    def __init__(self, W: np.ndarray, b: np.ndarray, A: np.ndarray, X: np.ndarray, Z: np.ndarray,
                 X_op: np.ndarray, chunk_rows: int):
        m, k = Z.shape
        p = A.shape[0]
        self.m, self.k, self.p = m, k, p
        self.X, self.A = X, A
        self.G = (Z > 0).astype(np.float64)
        self.H = np.maximum(Z, 0.0)
        t = X_op.dtype
        self.X_op, self.G_op, self.H_op, self.A_op = X_op, self.G.astype(t), self.H.astype(t), A.astype(t)
        # the k rescaling directions (w_i, b_i, -A[:, i]): disjoint supports, so mutually orthogonal
        self._gauge = (W, b, -A)
        self._gauge_norm2 = np.einsum("ij,ij->i", W, W) + b * b + np.einsum("ri,ri->i", A, A)
        self.Q = linalg.qr(W.T, mode="economic")[0]
        # span block: the normal matrix of the same network on the projected inputs u = Q^T x
        n_s = min(m, _SPAN_ROWS_PER_COORDINATE * span_block_size(k, p))
        U = X[:n_s] @ self.Q
        small = Model(TwoLayerNetwork(W @ self.Q, b, A, np.zeros(p), "relu"),
                       ("hidden_weights", "hidden_bias", "output_weights", "output_bias"))
        theta = small.pack(small.net)
        # the span block in its three parts (refine._normal_equations' structure), never as one matrix of
        # (k^2 + k + p (k + 1))^2 entries: the hidden block, the output block I_p (x) K, and the coupling of
        # output o, diag(A[o, u]) F (the hidden coordinate c belongs to unit u(c))
        sums = normal_sums(small, theta, U, np.zeros((n_s, p)), chunk_rows)
        self._hidden = sums["hid"] / n_s
        self._coupling = np.column_stack([sums["EH"], sums["Es"]]) / n_s
        self._output = np.block([[sums["HH"], sums["Hs"][:, None]], [sums["Hs"][None, :], np.array([[n_s]])]]) / n_s
        self._Au = A[:, sums["u"]]
        # complement block C (x) (I - Q Q^T), C = (A^T A) * (G^T G / m)
        self.C = (A.T @ A) * (self.G.T @ self.G) / m

    @property
    def S(self) -> np.ndarray:
        """The span block as one matrix (for inspection; the solver uses its parts)."""
        k, p = self.k, self.p
        nh = k * k + k
        groups = _output_groups(nh + p * (k + 1), k)
        S = np.zeros((nh + p * (k + 1),) * 2)
        S[:nh, :nh] = self._hidden
        for o in range(p):
            S[np.ix_(groups[o], groups[o])] = self._output
            S[np.ix_(np.arange(nh), groups[o])] = self._Au[o][:, None] * self._coupling
            S[np.ix_(groups[o], np.arange(nh))] = (self._Au[o][:, None] * self._coupling).T
        return S

    def _span_factors(self) -> tuple:
        """:func:`_span_block_factors` from the parts, with the same relative ridge ``1e-8 diag(S)``: the
        Schur complement ``T = H - (F K^{-1} F^T) * (A^T A)[u, u]`` (every output couples through the same
        ``F`` scaled by ``A[o, u]``, and ``K`` is the same for every output), ``O(nh^2 k)`` flops where the
        general form takes ``O(nh^2 p k)``, and ``Y_o = L^{-1} F^T diag(A[o, u])``."""
        k, p = self.k, self.p
        nh = k * k + k
        T = self._hidden.copy()
        T[np.diag_indices(nh)] += 1e-8 * np.diag(self._hidden) + 1e-300
        K = self._output.copy()
        K[np.diag_indices(k + 1)] += 1e-8 * np.diag(self._output) + 1e-300
        L = linalg.cholesky(K, lower=True, check_finite=False)
        Linv = linalg.solve_triangular(L, np.eye(k + 1), lower=True, check_finite=False)
        LF = Linv @ self._coupling.T                                  # (k + 1, nh)
        T -= (LF.T @ LF) * (self._Au.T @ self._Au)
        # C order: the solves read it as one (p (k + 1), nh) matrix (a product of F-ordered operands would not be)
        Y = np.multiply(LF[None, :, :], self._Au[:, None, :], order="C")  # (p, k + 1, nh)
        groups = _output_groups(nh + p * (k + 1), k)
        return (groups, np.repeat(Linv[None], p, axis=0), Y,
                linalg.cho_factor(T, lower=False, overwrite_a=True, check_finite=False))

    def _span_apply(self, vec: np.ndarray) -> np.ndarray:
        """``S vec`` from the parts."""
        k, p = self.k, self.p
        nh = k * k + k
        groups = _output_groups(nh + p * (k + 1), k)
        vh, vo = vec[:nh], vec[groups]                                # (nh,), (p, k + 1)
        out = np.empty_like(vec)
        out[:nh] = self._hidden @ vh + np.einsum("oc,co->c", self._Au, self._coupling @ vo.T)
        out[groups] = (self._Au * vh) @ self._coupling + vo @ self._output
        return out

    def jtj(self, dW, db, dA, dc):
        """``J^T J v / m`` in the precision of ``X_op`` (returned as float64)."""
        t = self.X_op.dtype
        T = self.X_op @ dW.T.astype(t)
        T += db.astype(t)
        T *= self.G_op
        Jv = T @ self.A_op.T
        Jv += self.H_op @ dA.T.astype(t)
        Jv += np.asarray(dc, dtype=t)
        out = self._jt(Jv, self.X_op, self.G_op, self.H_op, self.A_op)
        return tuple(np.asarray(o, dtype=np.float64) for o in out)

    def jt(self, U: np.ndarray):
        """``J^T U / m`` (float64); ``U`` is (m, p), e.g. the residuals."""
        return self._jt(U, self.X, self.G, self.H, self.A)

    def _jt(self, U, X, G, H, A):
        D = (U @ A) * G
        return D.T @ X / self.m, D.sum(axis=0) / self.m, U.T @ H / self.m, U.sum(axis=0) / self.m

    def project(self, dW, db, dA, dc):
        """Remove the rescaling components of a direction. ``J^T J v`` has none in exact arithmetic; its
        rounding errors there, which the preconditioner's ridge would amplify by about ``1e8``, are removed."""
        gW, gb, gA = self._gauge
        coef = (np.einsum("ij,ij->i", dW, gW) + db * gb + np.einsum("ri,ri->i", dA, gA)) / self._gauge_norm2
        return dW - coef[:, None] * gW, db - coef * gb, dA - coef[None, :] * gA, dc

    def _rest(self, sol):
        k, p = self.k, self.p
        kb = k * k + k
        return sol[k * k:kb], sol[kb:kb + p * k].reshape(p, k), sol[kb + p * k:]


def _forward(W, b, A, c, X, Y):
    Z = X @ W.T
    Z += b
    R = np.maximum(Z, 0.0) @ A.T
    R += c - Y
    return Z, R


def _operator_rows(X: np.ndarray, operator_bytes: int) -> np.ndarray:
    """The rows in the operator's precision: a float32 copy when it fits ``operator_bytes`` (half the cost of
    the ``O(m d k)`` products, within a relative ~1e-6 of them), else ``X`` itself."""
    return X.astype(np.float32) if 4 * X.size <= operator_bytes else X


def _flat(h, p: int) -> np.ndarray:
    """A direction ``(dW, db, dA, dc)`` as a flat vector (``dc`` may be the scalar 0 of a solve that took no
    conjugate-gradient step)."""
    return np.concatenate([h[0].ravel(), h[1], h[2].ravel(), np.broadcast_to(h[3], (p,))])


def _unpack(theta: np.ndarray, k: int, d: int, p: int):
    kd = k * d
    return (theta[:kd].reshape(k, d), theta[kd:kd + k], theta[kd + k:kd + k + p * k].reshape(p, k),
            theta[kd + k + p * k:])


@blas_threads(1)  # many small products: threads only add contention, and the bits must not depend on them
def gauss_newton(theta0: np.ndarray, X: np.ndarray, Y: np.ndarray, shape: tuple[int, int, int], *, max_iter: int,
                 tol: float, ftol: float, roundoff: float, chunk_rows: int, operator_bytes: int,
                 max_cg: int = 100, deadline: float | None = None) -> dict:
    """Matrix-free Levenberg-Marquardt on ``L = (1/m) sum_n ||R_n||^2`` (``"gn"``'s loss, twice its ``F``).

    ``theta0`` stacks ``(W, b, A, c)`` as :class:`nnrecover.refine.Model` does with every block trained;
    ``shape = (k, d, p)``. Each trial step solves ``(J^T J + mu M) h = -g`` (module docstring) to the
    forcing term's tolerance with at most ``max_cg`` conjugate-gradient iterations, and is accepted when it
    lowers the loss (gain ratio ``rho`` against the undamped model's decrease ``-g.h/2 + mu h.M h/2`` is
    positive); ``mu`` then follows Nielsen's rule as in :func:`nnrecover.refine.dense._gauss_newton`, and grows by a
    doubling factor after a rejection. The actual decrease is evaluated from the stored residuals of both
    points (``sum (R - R')(R + R')``), good down to steps far below ``eps L``.

    Stops with ``"gn"``'s status codes: ``1`` the mean squared residual at or below ``roundoff``, ``2`` a
    trial whose actual and predicted decreases are both at most ``ftol`` of the loss, ``3`` the step test
    ``||h|| <= tol (||theta|| + tol)`` or ``_MAX_REJECTED`` rejections in a row (no step lowers the loss),
    ``0`` ``max_iter`` trial steps, ``-1`` a non-finite loss at the start, ``-2`` the ``deadline``.

    Returns a dict: ``theta``, ``n_iter`` (trial steps), ``n_operator`` (points at which the operator was
    built), ``cg_iterations`` (per trial), ``losses`` (the start's and each accepted point's), ``status``,
    ``success``, ``message``.
    """
    k, d, p = shape
    m = X.shape[0]
    theta = np.array(theta0, dtype=np.float64)
    W, b, A, c = _unpack(theta, k, d, p)
    Z, R = _forward(W, b, A, c, X, Y)
    L = float(np.sum(R * R)) / m
    y_mean_square = float(np.sum(Y * Y)) / m
    X_op = _operator_rows(X, operator_bytes)
    min_rtol = _CG_MIN_RTOL[X_op.dtype.type]
    mu, nu, rejected = _MU0, 2.0, 0
    n_iter = n_op = 0
    cg_its: list[int] = []
    losses = [L]
    status, message = 0, "The maximum number of trial steps is exceeded."
    if not np.isfinite(L):
        return {"theta": theta, "n_iter": 0, "n_operator": 0, "cg_iterations": [], "losses": [L], "status": -1,
                "success": False, "message": "The loss is not finite at the start."}
    system = None
    while True:
        if deadline is not None and time.perf_counter() >= deadline:
            status, message = -2, "The deadline passed (time budget spent)."
            break
        if L <= roundoff:
            status, message = 1, "The residuals are at round-off."
            break
        if L == 0.0:
            status, message = 1, "The residuals are exactly zero."
            break
        if n_iter >= max_iter:
            break
        if system is None:
            system = Operator(W, b, A, X, Z, X_op, chunk_rows)
            g = system.jt(R)
            n_op += 1
        n_iter += 1
        eta = forcing(L, y_mean_square, roundoff, _CG_MAX_RTOL, min_rtol)
        try:
            h, its = pcg(system, g, mu, eta, max_cg)
        except linalg.LinAlgError:
            h, its = None, 0
        cg_its.append(its)
        if h is None or not all(np.all(np.isfinite(x)) for x in h):
            mu, nu, rejected = mu * nu, 2 * nu, rejected + 1
            if rejected >= _MAX_REJECTED:
                status, message = 3, "No step lowers the loss (the damping was raised in vain)."
                break
            continue
        step = _flat(h, p)
        h = _unpack(step, k, d, p)
        if np.linalg.norm(step) <= tol * (np.linalg.norm(theta) + tol):
            status, message = 3, "`xtol` termination condition is satisfied."
            break
        theta_new = theta + step
        Wn, bn, An, cn = _unpack(theta_new, k, d, p)
        Z_new, R_new = _forward(Wn, bn, An, cn, X, Y)
        actual = float(np.sum((R - R_new) * (R + R_new))) / m
        predicted = -dot(g, h) + mu * dot(h, system.m_apply(*h, inverse=False))
        small = abs(actual) <= ftol * L and predicted <= ftol * L
        rho = actual / predicted if predicted > 0 and np.isfinite(actual) else -np.inf
        if rho > 0:
            theta, W, b, A, c, Z, R = theta_new, Wn, bn, An, cn, Z_new, R_new
            L = float(np.sum(R * R)) / m
            losses.append(L)
            mu = max(mu * max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3), _MU_MIN)
            nu, rejected, system = 2.0, 0, None
        else:
            mu, nu, rejected = mu * nu, 2 * nu, rejected + 1
            if rejected >= _MAX_REJECTED and not small:
                status, message = 3, "No step lowers the loss (the damping was raised in vain)."
                break
        if small:
            status, message = 2, "`ftol` termination condition is satisfied."
            break
    return {"theta": theta, "n_iter": n_iter, "n_operator": n_op, "cg_iterations": cg_its, "losses": losses,
            "status": status, "success": status > 0, "message": message}


def subsample_solver(theta: np.ndarray, Xs: np.ndarray, shape: tuple[int, int, int], *, damping: float,
                     rtol: float, chunk_rows: int, operator_bytes: int, max_cg: int = 100):
    """A solver ``g -> h = -(J_m^T J_m / m + damping M)^{-1} g`` with the normal matrix of the rows ``Xs`` at
    ``theta``, by the conjugate gradients of :func:`gauss_newton` to the relative tolerance ``rtol``: the
    matrix-free form of the factorised subsample normal matrix of
    :func:`nnrecover.refine.staged._fixed_hessian_steps`. ``g`` and ``h`` are flat parameter vectors (``theta``'s
    layout); the solver's ``g`` is the gradient of ``F = L / 2`` in ``"gn"``'s normalisation, which is
    ``J^T r`` with the same ``1 / m`` scaling as the operator."""
    k, d, p = shape
    W, b, A, c = _unpack(np.asarray(theta, dtype=np.float64), k, d, p)
    with blas_threads(1):
        Z = Xs @ W.T + b
        system = Operator(W, b, A, Xs, Z, _operator_rows(Xs, operator_bytes), chunk_rows)

    def solve(g: np.ndarray) -> np.ndarray:
        gW, gb, gA, gc = _unpack(g, k, d, p)
        with blas_threads(1):
            h, _ = pcg(system, (gW, gb, gA, gc), damping, rtol, max_cg)
        return _flat(h, p)

    return solve

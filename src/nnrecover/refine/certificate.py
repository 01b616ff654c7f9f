"""A stated-meaning certificate for a fitted network: a bound on its max unit error.

Used by :class:`~nnrecover.learners.ExactReLULearner`, :class:`~nnrecover.learners.NoisyReLULearner` and
:class:`~nnrecover.learners.PureNeuronLearner` on their FINAL estimate (after any refinement). What it
bounds is the error of :func:`nnrecover.metrics.parameter_error`,

    max_i ( ||w_i - w*_i|| + |b_i - b*_i| + ||a_i - a*_i|| )   (canonical form: unit rows w_i, matched units),

for a teacher ``y = A* f(W* x + b*) + c* + xi`` (``f`` positively homogeneous, ``xi`` i.i.d. with mean
zero and independent of ``x``; the papers' teachers have ``b* = 0``, ``c* = 0``), to first order in the
error, with probability at least ``1 - failure_probability`` over the label noise.

Derivation (a Gauss-Newton confidence region). Let ``theta`` be the canonical parameters (hidden rows
``(w_i, b_i)``, output weights ``a_i``, output bias ``c``; the refinement step moves the biases too), ``J``
the Jacobian of the outputs on ``n`` rows with each ``w_i`` moving in the tangent space of the unit
sphere (which removes the positive-scale symmetry ``(w_i, b_i, a_i) -> (s w_i, s b_i, a_i / s)``), ``P``
its number of columns and ``R = Y - net(X)``. To first order ``R = J (theta* - theta^) + xi``, so with
``delta^ = (J^T J)^{-1} J^T R`` (the Gauss-Newton step: the distance to the least-squares fit on these rows)

    theta* - theta^ = delta^ - (J^T J)^{-1} J^T xi,     (J^T J)^{-1} J^T xi ~ N(0, sigma^2 (J^T J)^{-1}).

For unit ``i`` with parameter block ``I_i`` and ``C_i = sigma^2 [(J^T J)^{-1}]_{I_i I_i}``, the
Laurent-Massart inequality gives ``||g||^2 <= tr C + 2 sqrt(tr(C^2) x) + 2 ||C|| x`` with probability
``1 - e^{-x}`` for ``g ~ N(0, C)``; ``x = log(k / delta)`` makes it hold for all ``k`` units at once.
``sigma^2`` is estimated by the residual mean square ``(||R||^2 - ||J delta^||^2) / (n p - P)``, which
also absorbs any misfit (conservative). With ``||dw|| + |db| + ||da|| <= sqrt(3) ||(dw, db, da)||``:

    bound_i = 2 (||dw^_i|| + |db^_i| + ||da^_i||) + sqrt(3) sqrt(tr C_i + 2 sqrt(tr(C_i^2) x) + 2 ||C_i|| x)
              + 64 eps (1 + |b_i| + ||a_i||),

with ``(dw^_i, db^_i, da^_i)`` the unit's block of ``delta^`` and the last term the round-off of the
canonical form and of the metric. The factor 2 on the step covers the neglected second-order terms: the
Gauss-Newton step estimates the error up to a relative term of the order of the error itself, so the
factor is ample in the first-order regime ``bound <= 0.5``; beyond it no bound is claimed (``inf``).

The noise term assumes that the residual left after the step is label noise, independent of ``x``. A
network at a spurious least-squares fit (step ~ 0, large residual) would pass its misfit off as noise,
so the residual is tested (:func:`_lack_of_fit`: its second-order Hermite projection, chi-square at
level ``delta``), and no bound is claimed when the test rejects and the residual energy left after the
step exceeds the step's own first-order change ``||J delta^||^2`` (a smaller structured remainder is the
step's second-order term, as on noiseless data near the answer). No bound is claimed either when ``J``
is rank deficient on the rows (a dead unit, ``n p <= P``). On noiseless data at the exact answer every
term is round-off; the noise term shrinks as ``n^{-1/2}``.

Beyond ``MAX_CERTIFICATE_FLOPS`` the ``P x P`` matrix ``J^T J`` is not formed: ReLU networks get the
matrix-free form of the same bound (:func:`_matrix_free_bound`: the step by conjugate gradients, the
noise term through the refinement's preconditioner ``M`` and the smallest eigenvalue of ``M^{-1} J^T J``),
up to ``MAX_MATRIX_FREE_FLOPS``; beyond that, or for other activations, nothing is claimed.
"""

from __future__ import annotations

import math
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import scipy.linalg
import scipy.linalg.lapack

from .._threads import blas_threads
from .._validation import check_positive_int
from ..errors import AssumptionWarning, InputError
from ..network import TwoLayerNetwork
from .matrix_free import Operator, axpy, dot, pcg, span_block_unit_inverses
from .model import UNIT_PAIR_MIN_INPUTS, unit_pair_sums
from .rows import gather_samples

__all__ = ["unit_error_bound", "certify_max_unit_error", "certificate_rows", "check_certificate_params", "MEANING",
           "SECOND_ORDER_FACTOR", "LINEAR_REGIME", "held_assumption_warnings"]

#: what the certificate ``max_unit_error`` states (shared by the three learners that issue it)
MEANING = ("max over matched units of ||w_i - w*_i|| + |b_i - b*_i| + ||a_i - a*_i|| (canonical form, nr.metrics."
           "parameter_error) <= bound, to first order, with probability >= 1 - failure_probability over "
           "i.i.d. mean-zero label noise; passes when bound <= certificate_tol. It assumes the data come from "
           "a network of this width: a missing unit fails it through the lack-of-fit test only when the unit's "
           "part of the output stands out from the label noise on the rows used (a unit with output weights "
           "of norm 0.01 under noise 0.1 does not)")

_EPS = np.finfo(float).eps
#: the certificate's Gauss-Newton matrix has P^2 entries (P parameters) and costs n (k (d + 1))^2 + P^3 flops;
#: above this many flops it is not evaluated (a fit must stay near a few passes over the data): the record
#: says so and claims nothing
MAX_CERTIFICATE_FLOPS = 2e10
#: above this the matrix-free form of the bound (ReLU networks, :func:`_matrix_free_bound`) is not evaluated
#: either (:func:`_matrix_free_flops`: 3.3e12 for the 20000 rows at d = 1000, k = p = 50, where the first
#: look on 4204 rows took 3.5 s and the learners' fits 28-90 s)
MAX_MATRIX_FREE_FLOPS = 4e12
#: products with J^T J that the matrix-free form takes, about: the Lanczos steps until their plateau (118
#: at 4 rows per parameter, d = 1000, k = p = 50; 32 at 20) and the step's conjugate gradients (39)
_MATRIX_FREE_PRODUCTS = 160
#: largest number of preconditioned Lanczos steps that estimate the smallest eigenvalue of ``M^{-1} J^T J``
#: (matrix-free form); they stop earlier once the smallest Ritz value has settled (LANCZOS_PLATEAU)
LANCZOS_STEPS = 300
#: the Lanczos steps stop when the smallest Ritz value fell by less than this fraction over the last 10
#: steps. It falls monotonically and ever more slowly to the smallest eigenvalue: at d = 1000, k = p = 50 on
#: 4 rows per parameter (condition number 55) it was 33 / 11 / 4.9 % above its limit after 20 / 40 / 60
#: steps and settled after 118; the rule stopped 0.9 % above it there (1.4 % at d = 100, k = 10, p = 1),
#: well inside LANCZOS_SAFETY
LANCZOS_PLATEAU = 5e-3
#: relative tolerance of the matrix-free Gauss-Newton step (in the preconditioner's norm), the tightest
#: that products in float32 (within ~1e-7 of the float64 ones) reach reliably: the step enters the bound
#: times SECOND_ORDER_FACTOR = 2, so a relative error of 1e-5 in it changes the bound by as much
STEP_RTOL = 1e-5
#: the matrix-free noise term divides by this fraction of the smallest Ritz value, which converges to the
#: smallest eigenvalue from above (tests/refine/test_certificate.py compares it with the dense generalized
#: eigenvalue)
LANCZOS_SAFETY = 0.9
#: dense first looks above this many flops are taken in the matrix-free form (ReLU networks): at d = 100,
#: k = p = 10 on 2000 rows the dense form took 0.15 s and the matrix-free one 0.03 s (one thread)
DENSE_FIRST_LOOK_FLOPS = 1e8
#: rows the certificate uses at most per parameter and output (its noise term shrinks like 1/sqrt(rows);
#: more rows than this add cost, not information, at the sizes where the cost matters)
ROWS_PER_PARAMETER = 20
#: ... except that the dense form takes every given row while that costs at most this many flops: its
#: lack-of-fit test gains power with the rows (a unit with output weights of norm 0.04 missing from a fit
#: of 3 units for 4, d = 10, label noise 0.1, passed on the 2000 rows of the rule above, lack-of-fit
#: p-value 0.08, and is seen on 20000, p-value 5e-46), at a cost of milliseconds where it applies
CHEAP_CERTIFICATE_FLOPS = 2e8
#: a residual after the Gauss-Newton step that depends on x is taken for the step's own second-order
#: remainder (not a lack of fit) while its squared norm is at most this times ``||J delta||^2`` times the
#: largest unit step: near a ReLU network the remainder comes from the rows whose unit changes sign, a
#: fraction of about the step ``s`` of them, so its squared norm is about ``0.43 s`` times ``||J delta||^2``
#: per unit (measured: at most 0.49 s over 36 unrefined noiseless fits of the right width; a fit missing a
#: unit left 0.8-6.3 s)
REMAINDER_RATIO = 1.0
#: the Gauss-Newton step estimates the error up to a relative term of the order of the error itself
#: (the network is smooth in its parameters away from the kinks, which a Gaussian x meets with
#: probability zero); doubling it covers that term while the bound is below ``LINEAR_REGIME``
SECOND_ORDER_FACTOR = 2.0
#: above this the first-order analysis is not trusted and the certificate does not pass at any tolerance
LINEAR_REGIME = 0.5
#: round-off allowance of the canonical form and of the metric, in units of eps times the unit's scale
ROUNDOFF_UNITS = 64.0
#: a residual below this fraction of ||Y - mean Y|| is round-off: the lack-of-fit test is not run on it
ROUNDOFF_RESIDUAL = 1e-9


def _tangent_bases(W: np.ndarray) -> list[np.ndarray]:
    """Orthonormal bases ``(d, d - 1)`` of the orthogonal complements of the unit rows of ``W``."""
    out = []
    for w in W:
        # the last d - 1 left singular vectors of the column w span its orthogonal complement
        U = np.linalg.svd(w[:, None], full_matrices=True)[0]
        out.append(U[:, 1:])
    return out


def _largest_eigenvalue(S: np.ndarray) -> float:
    """Largest eigenvalue of the symmetric positive semi-definite ``S`` (Lanczos, deterministic start).

    A few dozen products with ``S`` (O(P^2) each) instead of the O(P^3) of a full ``eigvalsh``, to a
    relative accuracy of 1e-8, ample for a condition number and a rank test at ``P eps``.
    """
    from scipy.sparse.linalg import (  # deferred: SciPy's submodules are slow to import
        ArpackNoConvergence,
        eigsh,
    )

    n = S.shape[0]
    if n <= 64:
        return float(np.linalg.eigvalsh(S)[-1])
    try:
        return float(eigsh(S, k=1, which="LA", v0=np.ones(n), tol=1e-8, return_eigenvectors=False)[0])
    except ArpackNoConvergence:
        return float(np.linalg.eigvalsh(S)[-1])


def unit_error_bound(network: TwoLayerNetwork, X: np.ndarray, Y: np.ndarray, *,
                     failure_probability: float = 1e-3, chunk_rows: int | None = None,
                     method: str = "auto") -> dict[str, Any]:
    """First-order high-probability bound on the max unit error of ``network`` (module docstring).

    Parameters
    ----------
    network : TwoLayerNetwork
        The estimate (positively homogeneous activation; put in canonical form here).
    X, Y : arrays (n, d), (n, p)
        Labelled rows of the training distribution (the more, the tighter the noise term).
    failure_probability : float, default 1e-3
        ``delta`` of the Laurent-Massart tail, shared by the ``k`` units.
    chunk_rows : int, optional
        Rows per chunk of the Jacobian products (default: about 8 MB of ``f'(w_i x) x``).
    method : {"auto", "dense", "matrix-free"}
        ``"dense"`` forms the ``P x P`` Gauss-Newton matrix (``n (k (d + 1))^2 + P^3`` flops);
        ``"matrix-free"`` (ReLU networks) solves with it by conjugate gradients and bounds the noise term
        through the refinement's preconditioner (:func:`_matrix_free_bound`: the same step part, a noise
        part between the dense one and ``sqrt(theta_max / lambda)`` times it, ``O(n d k)`` flops per
        product). ``"auto"``: dense up to
        ``MAX_CERTIFICATE_FLOPS``, else matrix free for ReLU.

    Returns
    -------
    dict
        ``bound`` (max over units; ``inf`` when not available, when the first-order value
        ``first_order`` exceeds ``LINEAR_REGIME``, or when the lack-of-fit test rejects at level
        ``failure_probability``: ``lack_of_fit``, ``lack_of_fit_p_value``), ``per_unit`` (k,, first
        order), ``step`` (the
        Gauss-Newton part per unit), ``noise`` (the noise part per unit), ``sigma`` (estimated label
        noise RMS), ``relative_residual`` (``||R||_F / ||Y - mean Y||_F``), ``n_rows``, ``n_params``,
        ``jacobian_condition``.
    """
    net = network.canonical()
    act = net.activation
    W, b, A = net.hidden_weights, net.hidden_bias, net.output_weights
    k, d = W.shape
    p = A.shape[0]
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64).reshape(X.shape[0], -1)
    n = X.shape[0]
    e = d + 1                                  # a hidden unit's row (w_i, b_i) acts on (x, 1)
    P = k * d + k * p + p                      # k (d - 1) + k hidden, k p output weights, p output biases
    out: dict[str, Any] = {"bound": math.inf, "first_order": math.inf, "per_unit": np.full(k, np.inf),
                           "step": np.full(k, np.inf), "noise": np.full(k, np.inf), "sigma": math.nan,
                           "n_rows": int(n), "n_params": int(P), "jacobian_condition": math.inf,
                           "relative_residual": math.nan}
    R = Y - net.predict(X).reshape(n, -1)
    ydev = float(np.linalg.norm(Y - Y.mean(axis=0)))
    out["relative_residual"] = float(np.linalg.norm(R) / ydev) if ydev > 0 else math.nan
    if method not in ("auto", "dense", "matrix-free"):
        raise InputError(f"method must be 'auto', 'dense' or 'matrix-free', got {method!r}.")
    if method == "auto":
        method = _bound_method(k, d, p, n, act.name) or "dense"
    if method == "matrix-free" and act.name != "relu":
        raise InputError(f"the matrix-free bound is for ReLU networks; this one has {act.name!r} units "
                         "(use method='dense').")
    out["method"] = method
    if act.degree is None or n * p <= P or not np.all(np.isfinite(R)):
        return out
    chunk = chunk_rows or max(256, int((1 << 20) // max(k * e, 1)))
    if method == "matrix-free":
        return _matrix_free_bound(net, X, R, out, failure_probability, chunk, ydev)
    # the hidden block sum_n z_n z_n^T, z_n = f'(W x_n + b) (x) (x_n, 1): by unit pairs from
    # UNIT_PAIR_MIN_INPUTS inputs (block (i, j) over the rows where both derivatives are nonzero, a sixth
    # of the flops for ReLU, and z never formed), else as one product of the rows z_n
    unit_pairs = d >= UNIT_PAIR_MIN_INPUTS
    M = np.zeros((k, k, e, e)) if unit_pairs else None
    Gzz = None if unit_pairs else np.zeros((k * e, k * e))
    XGH = np.zeros((e, k * k))                # sum_n x~_n (g_n (x) h_n)^T: the (hidden, output weight) coupling
    XG = np.zeros((e, k))                     # sum_n x~_n g_n^T: the (hidden, output bias) coupling
    XGQ = np.zeros((e, k))                    # sum_n x~_n (g_n * (A^T r_n))^T: the hidden gradient
    Ghh = np.zeros((k, k))
    Ghr = np.zeros((k, p))
    h1 = np.zeros(k)
    r1 = np.zeros(p)
    for s in range(0, n, chunk):
        Xc, Rc = X[s:s + chunk], R[s:s + chunk]
        T = Xc @ W.T + b
        H, D = act(T), act.derivative(T)
        Xe = np.hstack([Xc, np.ones((Xc.shape[0], 1))])
        if unit_pairs:
            unit_pair_sums(M, Xe, D)
        else:
            Z = (D[:, :, None] * Xe[:, None, :]).reshape(Xc.shape[0], k * e)
            Gzz += Z.T @ Z
        XGH += Xe.T @ (D[:, :, None] * H[:, None, :]).reshape(Xc.shape[0], k * k)
        XG += Xe.T @ D
        XGQ += Xe.T @ (D * (Rc @ A))
        Ghh += H.T @ H
        Ghr += H.T @ Rc
        h1 += H.sum(axis=0)
        r1 += Rc.sum(axis=0)
    AtA = A.T @ A
    # J^T J in the order ((w_1, b_1)..(w_k, b_k), a_1..a_k, c), a_i = column i of A (p entries):
    # dy_o/d(w_i, b_i) = A_oi f'(w_i x + b_i) (x, 1), dy_o/dA_oi = f(w_i x + b_i), dy_o/dc_o = 1
    if unit_pairs:
        iu = np.triu_indices(k, 1)
        M[iu[1], iu[0]] = M[iu]               # block (j, i) = block (i, j), each one symmetric
        G_ww = M.transpose(0, 2, 1, 3) * AtA[:, None, :, None]
        del M
    else:
        G_ww = Gzz.reshape(k, e, k, e) * AtA[:, None, :, None]
        del Gzz
    G_wa = np.einsum("aij,oi->iajo", XGH.reshape(e, k, k), A).reshape(k, e, k * p)
    G_aa = np.kron(Ghh, np.eye(p))
    G_wc = np.einsum("ai,oi->iao", XG, A)
    G_ac = np.kron(h1[:, None], np.eye(p))
    G_cc = n * np.eye(p)
    g_w = XGQ.T
    g_a = Ghr.reshape(k * p)
    # restrict each hidden row to its tangent space (canonical form: ||w_i|| = 1, b_i free): the map is
    # block diagonal with the (e, d) blocks Tb_i, applied block by block (about k^2 e d^2 flops instead of
    # the 2 (k e)^2 k d of dense products)
    Tb = np.zeros((k, e, d))
    for i, B in enumerate(_tangent_bases(W)):
        Tb[i, :d, :d - 1] = B
        Tb[i, d, d - 1] = 1.0
    G_tt = np.einsum("ica,icjf,jfb->iajb", Tb, G_ww, Tb, optimize=True).reshape(k * d, k * d)
    G_ta = np.einsum("ica,icq->iaq", Tb, G_wa).reshape(k * d, k * p)
    G_tc = np.einsum("ica,ico->iao", Tb, G_wc).reshape(k * d, p)
    G = np.block([[G_tt, G_ta, G_tc],
                  [G_ta.T, G_aa, G_ac],
                  [G_tc.T, G_ac.T, G_cc]])
    g = np.concatenate([np.einsum("ica,ic->ia", Tb, g_w).reshape(k * d), g_a, r1])
    del G_ww, G_tt, G_ta, G_tc
    G += G.T
    G *= 0.5
    # the Cholesky inverse of G, and its extreme eigenvalues from it: lam_min(G) = 1 / lam_max(G^-1). A
    # rank-deficient G either fails the factorisation or leaves an inverse of norm >= 1 / (P eps lam_max)
    try:
        chol = scipy.linalg.cholesky(G, lower=True, check_finite=False)
    except np.linalg.LinAlgError:              # not positive definite in floating point
        return out
    Ginv, info = scipy.linalg.lapack.dpotri(chol, lower=True)
    if info != 0:
        return out
    Ginv += np.tril(Ginv, -1).T                # dpotri fills the lower triangle; the upper one is zero
    lam_max, inv_max = _largest_eigenvalue(G), _largest_eigenvalue(Ginv)
    if not (lam_max > 0 and 0 < inv_max < math.inf) or 1.0 / inv_max <= P * _EPS * lam_max:
        return out
    out["jacobian_condition"] = float(math.sqrt(lam_max * inv_max))
    step = Ginv @ g
    explained = float(step @ g)                # ||J delta^||^2
    rss = max(float(np.sum(R * R)) - explained, 0.0)
    sigma2 = rss / (n * p - P)
    # back to ((w, b), a, c) coordinates
    dtheta = np.concatenate([np.einsum("ica,ia->ic", Tb, step[:k * d].reshape(k, d)).reshape(k * e),
                             step[k * d:]])
    delta = float(failure_probability)
    x = math.log(k / delta)
    step_u, noise_u = np.empty(k), np.empty(k)
    for i in range(k):
        wi, ai = np.arange(i * e, (i + 1) * e), np.arange(k * e + i * p, k * e + (i + 1) * p)
        # the metric's own value on the step: ||dw_i|| + |db_i| + ||da_i||
        step_u[i] = float(np.linalg.norm(dtheta[wi[:d]]) + abs(dtheta[wi[d]]) + np.linalg.norm(dtheta[ai]))
        # the unit's block of the covariance sigma^2 T Ginv T^T: T maps its d tangent and p output
        # coordinates (rows J of Ginv) to its e + p parameters
        J = np.r_[i * d:(i + 1) * d, k * d + i * p:k * d + (i + 1) * p]
        Ti = np.zeros((e + p, d + p))
        Ti[:e, :d] = Tb[i]
        Ti[e:, d:] = np.eye(p)
        Ci = sigma2 * (Ti @ Ginv[np.ix_(J, J)] @ Ti.T)
        ev = np.clip(np.linalg.eigvalsh(0.5 * (Ci + Ci.T)), 0.0, None)
        noise_u[i] = math.sqrt(float(ev.sum() + 2.0 * math.sqrt(float(np.sum(ev ** 2)) * x) + 2.0 * ev.max() * x))
    # ||dw|| + |db| + ||da|| <= sqrt(3) ||(dw, db, da)||; the canonical form and the metric are computed in
    # floating point, each with a relative error of a few eps of the unit's scale
    scale = 1.0 + np.abs(b) + np.linalg.norm(A, axis=0)
    per_unit = SECOND_ORDER_FACTOR * step_u + math.sqrt(3.0) * noise_u + ROUNDOFF_UNITS * _EPS * scale
    first = float(per_unit.max())
    out.update(bound=first if first <= LINEAR_REGIME else math.inf, first_order=first, per_unit=per_unit,
               step=step_u, noise=noise_u, sigma=float(math.sqrt(sigma2)), residual_after_step=rss,
               explained_by_step=explained)
    # the noise term is only valid if what is left of R after the step is label noise: test it
    if sigma2 > (ROUNDOFF_RESIDUAL * ydev) ** 2 / (n * p):
        dWb = dtheta[:k * e].reshape(k, e)
        dA = dtheta[k * e:k * e + k * p].reshape(k, p).T
        p_value = _lack_of_fit(net, X, R, dWb, dA, dtheta[k * e + k * p:], sigma2, chunk)
        out["lack_of_fit_p_value"] = p_value
        # a structured residual within the step's own second-order remainder (REMAINDER_RATIO) is that
        # remainder (noiseless data near the answer); a larger one is not explained by the linearisation
        # around this estimate
        if p_value < delta and rss > _remainder_allowance(explained, step_u):
            out["bound"] = math.inf
            out["lack_of_fit"] = True
    return out


def _remainder_allowance(explained: float, unit_steps: np.ndarray) -> float:
    """The largest ``||R - J delta||^2`` taken for the Gauss-Newton step's second-order remainder
    (:data:`REMAINDER_RATIO`)."""
    return explained * min(1.0, REMAINDER_RATIO * float(np.max(unit_steps, initial=0.0)))


def _lack_of_fit(net: TwoLayerNetwork, X: np.ndarray, R: np.ndarray, dWb: np.ndarray, dA: np.ndarray,
                 dc: np.ndarray, sigma2: float, chunk: int, basis: np.ndarray | None = None) -> float:
    """p-value of "the residual after the Gauss-Newton step is independent of x" (label noise only).

    Statistic: ``M_o = mean(r_o (x x^T - I))`` per output ``o``; if ``r`` is noise independent of ``x``
    each entry ``(i <= j)`` has mean 0 and variance ``sigma^2 V_ij / n``, ``V_ij = mean((x_i x_j - d_ij)^2)``,
    so ``S = n / sigma^2 sum_o sum_{i<=j} M_o[i, j]^2 / V_ij`` is about chi-square with ``p d (d + 1) / 2``
    degrees of freedom (exactly uncorrelated entries for independent coordinates). A network at a
    spurious fit (or outside the model) leaves a residual that is a function of ``x``; the second-order
    Hermite projection of a difference of ReLU networks is generically non-zero.

    ``basis`` (d x q, orthonormal columns): the same test on the coordinates ``u = basis^T x`` only
    (``p q (q + 1) / 2`` degrees of freedom; the matrix-free bound passes the span of the hidden rows, where
    a difference of two nearby ReLU networks has most of its second-order projection), which costs
    ``O(n d q + n p q^2)`` instead of ``O(n p d^2)`` flops and ``p d^2`` memory.
    """
    from scipy.stats import chi2  # deferred: SciPy's submodules are slow to import

    act = net.activation
    W, b, A = net.hidden_weights, net.hidden_bias, net.output_weights
    n, d = X.shape
    q = d if basis is None else basis.shape[1]
    p = R.shape[1]
    M = np.zeros((p, q, q))
    V = np.zeros((q, q))
    tot = np.zeros(p)
    second = np.zeros(q)
    for s in range(0, n, chunk):
        Xc = X[s:s + chunk]
        T = Xc @ W.T + b
        lin = Xc @ dWb[:, :d].T + dWb[:, d]
        Rc = R[s:s + chunk] - act(T) @ dA.T - (act.derivative(T) * lin) @ A.T - dc
        Uc = Xc if basis is None else Xc @ basis
        for o in range(p):
            M[o] += (Uc * Rc[:, o:o + 1]).T @ Uc
        tot += Rc.sum(axis=0)
        U2 = Uc * Uc
        V += U2.T @ U2
        second += U2.sum(axis=0)
    M = (M - tot[:, None, None] * np.eye(q)) / n
    V /= n
    second /= n
    diag = np.diag(V).copy()
    # E[(x_i^2 - 1)^2] = E[x_i^4] - 2 E[x_i^2] + 1
    V[np.diag_indices(q)] = diag - 2.0 * second + 1.0
    iu = np.triu_indices(q)
    Vu = np.maximum(V[iu], np.finfo(float).tiny)
    S = n / sigma2 * float(np.sum(M[:, iu[0], iu[1]] ** 2 / Vu))
    return float(chi2.sf(S, p * iu[0].size))


def _matrix_free_flops(k: int, d: int, p: int, n: int) -> float:
    """Flops of :func:`_matrix_free_bound` on ``n`` rows, about: the conjugate-gradient solve and the Lanczos
    steps (``_MATRIX_FREE_PRODUCTS`` products with ``J^T J``, ``~8 n d k`` flops each), and the span block's
    factorisation and unit blocks of its inverse."""
    span = k * k + k + p * k + p
    return 8.0 * n * d * k * _MATRIX_FREE_PRODUCTS + 2.0 * float(span) ** 3


def _bound_method(k: int, d: int, p: int, n: int, activation: str) -> str | None:
    """``"dense"`` while the Gauss-Newton matrix costs at most ``MAX_CERTIFICATE_FLOPS``, else
    ``"matrix-free"`` for ReLU networks within ``MAX_MATRIX_FREE_FLOPS``, else ``None`` (not evaluated)."""
    P = k * d + k * p + p
    if n * float(k * (d + 1)) ** 2 + float(P) ** 3 <= MAX_CERTIFICATE_FLOPS:
        return "dense"
    if activation == "relu" and _matrix_free_flops(k, d, p, n) <= MAX_MATRIX_FREE_FLOPS:
        return "matrix-free"
    return None


def _preconditioned_lanczos(op, steps: int, rng: np.random.Generator, plateau: float = 0.0) -> np.ndarray:
    """Ritz values of ``M^{-1} J^T J`` (the pencil of the normal matrix and the preconditioner ``M`` of
    :mod:`nnrecover.refine.matrix_free`, off the rescaling directions) after at most ``steps`` preconditioned
    conjugate-gradient steps from a random right-hand side: the Lanczos matrix from the steps' coefficients
    (``T_jj = 1 / alpha_j + beta_{j-1} / alpha_{j-1}``, ``T_{j,j+1} = sqrt(beta_j) / alpha_j``; Saad,
    *Iterative methods for sparse linear systems*, 2003, Section 6.7.3). With ``plateau > 0`` the steps
    stop once the smallest Ritz value fell by less than that fraction over the last 10 steps."""
    k, d, p = op.k, op.X.shape[1], op.p
    start = (rng.standard_normal((k, d)), rng.standard_normal(k), rng.standard_normal((p, k)), rng.standard_normal(p))
    # the preconditioner P M^{-1} P, P the projection off the rescaling directions: M is nearly singular
    # along them (its ridge is relative 1e-8), so M^{-1} turns the rounding errors of a projected vector
    # there into components of order one, which the pencil would see as eigenvalues near 0 and far above
    # the spectrum; with P the Ritz values are those of V^T J^T J V / n against (V^T M^{-1} V)^{-1}, V a
    # basis of the complement of the rescaling directions, the matrix the noise term's bound uses
    r = op.project(*start)
    z = op.project(*op.m_apply(*r, inverse=True))
    direction, rz = z, dot(r, z)
    rz0 = rz
    alphas, betas = [], []
    smallest = []

    def ritz(m=None):
        a, bt = np.asarray(alphas[:m]), np.asarray(betas[:m])
        diag = 1.0 / a
        diag[1:] += bt[:-1] / a[:-1]
        off = np.sqrt(bt[:-1]) / a[:-1]
        return diag, off

    for step in range(steps):
        Ap = op.project(*op.jtj(*direction))
        curvature = dot(direction, Ap)
        if not curvature > 0:
            break
        alpha = rz / curvature
        r = axpy(-alpha, Ap, r)
        z = op.project(*op.m_apply(*r, inverse=True))
        rz_new = dot(r, z)
        alphas.append(alpha)
        betas.append(rz_new / rz)
        if not rz_new > 1e-28 * rz0:  # the Krylov space is exhausted
            break
        if plateau and (step + 1) % 10 == 0:
            smallest.append(float(scipy.linalg.eigvalsh_tridiagonal(*ritz(), select="i", select_range=(0, 0))[0]))
            if len(smallest) > 1 and smallest[-2] - smallest[-1] <= plateau * smallest[-1]:
                break
        direction = axpy(rz_new / rz, direction, z)
        rz = rz_new
    if not alphas:
        return np.zeros(0)
    return scipy.linalg.eigvalsh_tridiagonal(*ritz())


@blas_threads(1)  # many small solves and products (threads only add contention there), bits independent of them
def _matrix_free_bound(net: TwoLayerNetwork, X: np.ndarray, R: np.ndarray, out: dict, failure_probability: float,
                       chunk: int, ydev: float) -> dict:
    """:func:`unit_error_bound` for ReLU networks without the ``P x P`` Gauss-Newton matrix.

    The Gauss-Newton step ``delta^ = (J^T J)^{-1} J^T R`` is solved by conjugate gradients (relative
    tolerance ``STEP_RTOL``) with the operator and the block preconditioner ``M`` of the matrix-free refinement
    (:mod:`nnrecover.refine.matrix_free`: products with ``J^T J`` cost ``O(n d k)``, ``M`` is the exact normal matrix of
    the span coordinates plus ``C (x) (I - Q Q^T)`` on the complement). The noise term needs the diagonal
    blocks of ``(J^T J)^{-1}``; with ``lambda`` the smallest eigenvalue of ``M^{-1} J^T J / n`` off the
    rescaling directions, ``(J^T J / n)^{-1} <= M^{-1} / lambda`` there (and so for every diagonal block,
    and for their traces, squared traces and norms), and ``M^{-1}`` is block diagonal: unit ``i``'s block
    has the span part ``S^{-1}`` on its ``k + 1 + p`` span coordinates and ``(C^{-1})_ii`` on the ``d - k``
    complement directions. A Gaussian vector with a smaller covariance has the smaller norm tail (Anderson's
    theorem), so Laurent-Massart with the larger covariance still bounds it. ``lambda`` is
    ``LANCZOS_SAFETY`` times the smallest Ritz value of ``LANCZOS_STEPS`` preconditioned Lanczos steps
    (it converges from above). The lack-of-fit test runs on the coordinates in the span of the hidden rows
    (:func:`_lack_of_fit` with ``basis``). The step part is that of the dense form to the solver's
    tolerance; the noise part is an upper bound of the dense one, at most ``sqrt(theta_max / lambda)`` times
    it (``theta_max`` the largest eigenvalue of ``M^{-1} J^T J / n``).
    """
    W, b, A = net.hidden_weights, net.hidden_bias, net.output_weights
    k, d = W.shape
    p, n = A.shape[0], X.shape[0]
    P = k * d + k * p + p
    out["method"] = "matrix-free"
    Z = X @ W.T + b
    if not np.all(np.any(Z > 0, axis=0)):
        return out                                                 # a dead unit: J is rank deficient
    # the products with J^T J in float32 (half the cost; each within ~1e-7 of the float64 one, which bounds
    # the step's accuracy by STEP_RTOL and moves the Ritz values by ~1e-6, far inside LANCZOS_SAFETY); the
    # gradient J^T R, which fixes the step, from the float64 rows
    op = Operator(W, b, A, X, Z, X.astype(np.float32), chunk)
    try:
        op.factor(0.0)
    except np.linalg.LinAlgError:                                  # not positive definite in floating point
        return out
    gW, gb, gA, gc = op.jt(R)                                     # J^T R / n
    # the Lanczos steps in a second thread, beside the step's conjugate gradients and the preconditioner's
    # unit blocks: two independent sequences of one-thread products (the same bits as one after the other),
    # which release the GIL in BLAS
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nnrecover-lanczos")
    lanczos = pool.submit(_preconditioned_lanczos, op, LANCZOS_STEPS, np.random.default_rng(0), LANCZOS_PLATEAU)
    pool.shutdown(wait=False)
    delta, cg_steps = pcg(op, (-gW, -gb, -gA, -gc), 0.0, STEP_RTOL, 240)
    dW, db, dA = delta[:3]
    dc = np.broadcast_to(np.asarray(delta[3], dtype=np.float64), (p,))
    explained = max(n * dot((dW, db, dA, dc), (gW, gb, gA, gc)), 0.0)  # ||J delta^||^2
    # unit i's span coordinates (v_i, b_i, A[:, i]), v_i = row i of dW Q: its block of the span block's inverse
    span_factors, comp_factor = op._factors
    Sinv_blocks = span_block_unit_inverses(span_factors, k)       # (k, k + 1 + p, k + 1 + p)
    ritz = lanczos.result()
    out.update(cg_steps=int(cg_steps), lanczos_ritz_range=(float(ritz.min()), float(ritz.max())) if ritz.size
               else (math.nan, math.nan))
    if not ritz.size or not ritz.min() > P * _EPS * ritz.max():
        return out                                                 # rank deficient on these rows
    lam = LANCZOS_SAFETY * float(ritz.min())
    out["jacobian_condition"] = float(math.sqrt(ritz.max() / ritz.min()))  # of J M^{-1/2}
    rss = max(float(np.sum(R * R)) - explained, 0.0)
    sigma2 = rss / (n * p - P)
    # the canonical form's first-order change: unit rows stay unit, t_i = w_i . dw_i moves into the scale
    t = np.einsum("ij,ij->i", W, dW)
    dWc, dbc, dAc = dW - t[:, None] * W, db - t * b, dA + t[None, :] * A
    step_u = np.linalg.norm(dWc, axis=1) + np.abs(dbc) + np.linalg.norm(dAc, axis=0)
    Cinv_diag = np.diag(scipy.linalg.cho_solve(comp_factor, np.eye(k), check_finite=False))
    delta_p = float(failure_probability)
    x = math.log(k / delta_p)
    scale = sigma2 / (n * lam)
    noise_u = np.empty(k)
    omega = W @ op.Q                                               # unit rows in the span basis
    for i in range(k):
        block = Sinv_blocks[i]
        # canonical map on (v, b, a): t = omega_i . v; v - t omega_i, b - t b_i, a + t A[:, i]
        T = np.eye(k + 1 + p)
        T[:, :k] -= np.outer(np.concatenate([omega[i], [b[i]], -A[:, i]]), omega[i])
        ev = np.clip(np.linalg.eigvalsh(T @ (0.5 * (block + block.T)) @ T.T), 0.0, None)
        c = max(float(Cinv_diag[i]), 0.0)
        m = d - k
        tr = scale * (ev.sum() + m * c)
        tr2 = scale ** 2 * (float(np.sum(ev ** 2)) + m * c * c)
        top = scale * max(float(ev.max()), c if m else 0.0)
        noise_u[i] = math.sqrt(tr + 2.0 * math.sqrt(tr2 * x) + 2.0 * top * x)
    unit_scale = 1.0 + np.abs(b) + np.linalg.norm(A, axis=0)
    per_unit = SECOND_ORDER_FACTOR * step_u + math.sqrt(3.0) * noise_u + ROUNDOFF_UNITS * _EPS * unit_scale
    first = float(per_unit.max())
    out.update(bound=first if first <= LINEAR_REGIME else math.inf, first_order=first, per_unit=per_unit,
               step=step_u, noise=noise_u, sigma=float(math.sqrt(sigma2)), lanczos_lambda=lam,
               residual_after_step=rss, explained_by_step=explained)
    if sigma2 > (ROUNDOFF_RESIDUAL * ydev) ** 2 / (n * p):
        dWb = np.hstack([dW, db[:, None]])
        p_value = _lack_of_fit(net, X, R, dWb, dA, dc, sigma2, chunk, basis=op.Q)
        out["lack_of_fit_p_value"] = p_value
        if p_value < delta_p and rss > _remainder_allowance(explained, step_u):
            out["bound"] = math.inf
            out["lack_of_fit"] = True
    return out


def check_certificate_params(learner: Any) -> None:
    """A learner's ``certificate_tol`` (a positive number) and ``certificate_rows`` (a positive integer)."""
    tol = learner.certificate_tol
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.integer, np.floating)) or not (
            np.isfinite(tol) and tol > 0):
        raise InputError(f"certificate_tol must be a positive number (the accepted max unit error), got {tol!r}.")
    check_positive_int(learner.certificate_rows, "certificate_rows")


def certificate_rows(source, rng: np.random.Generator, max_rows: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Up to ``max_rows`` labelled rows drawn uniformly from ``source`` (``None``: a consumed one-pass
    iterator, which cannot be read again)."""
    if source is None or not source.info.reiterable:
        return None
    X, Y, _ = gather_samples(source, max_rows, rng=rng)
    return X, Y


def certify_max_unit_error(learner: Any, network: TwoLayerNetwork, rows, diagnostics: dict, *, tol: float,
                           failure_probability: float = 1e-3, stage: str = "final estimate") -> bool | None:
    """Issue the certificate ``max_unit_error`` of ``network`` through ``learner._certify``.

    Passes when :func:`unit_error_bound` is at most ``tol`` (and inside the first-order regime); its
    record in ``diagnostics["certificates"]`` carries ``meaning``, ``bound``, ``tolerance`` and
    ``stage``. With ``rows=None`` (no re-readable samples) nothing is claimed: the record says
    ``passed=None`` and no warning is issued. ``rows`` may be a callable returning the rows (or None):
    it is called only when the certificate's cost allows it to be evaluated. The bound (dense, or matrix
    free beyond ``MAX_CERTIFICATE_FLOPS``: :func:`unit_error_bound`'s ``method``) is first evaluated on
    ``max(2000, 4 P / p)`` of the rows (matrix free for ReLU once the dense form would cost more than
    ``DENSE_FIRST_LOOK_FLOPS``) and, unless it passes there with a residual at round-off, on
    ``max(2000, 20 P / p)`` (on all of them in the matrix-free form, or in the dense form while that costs
    at most ``CHEAP_CERTIFICATE_FLOPS``); each evaluation has probability ``failure_probability / 2`` of failing, so
    the verdict holds with ``1 - failure_probability``. Returns the verdict.
    """
    k, d = network.hidden_weights.shape
    p = network.n_outputs
    P = k * d + k * p + p
    act = network.activation.name
    if callable(rows):
        # read the rows (for a stream, a pass) only when the certificate can be afforded at all
        rows = rows() if _bound_method(k, d, p, max(2000, -(-(ROWS_PER_PARAMETER // 5) * P // p)), act) else ()
    if rows is None:
        diagnostics.setdefault("certificates", {})["max_unit_error"] = {
            "passed": None, "detail": "not evaluated: the samples cannot be read again (one-pass iterator)",
            "meaning": MEANING, "bound": math.inf, "tolerance": float(tol), "stage": stage}
        return None
    n_rows = min(rows[0].shape[0], max(2000, -(-ROWS_PER_PARAMETER * P // p),
                                       int((CHEAP_CERTIFICATE_FLOPS - float(P) ** 3) // float(k * (d + 1)) ** 2))
                 ) if rows else 0
    if rows and _bound_method(k, d, p, n_rows, act) == "matrix-free" and \
            _bound_method(k, d, p, rows[0].shape[0], act) == "matrix-free":
        # its cost is linear in the rows (the dense form's cap of 20 per parameter is about P^2 per row):
        # all the rows given, whose noise term is the smaller (at d = 200, k = p = 20 with label noise 0.1
        # the 4420 rows of the cap gave 0.135 against a true error of 0.0045)
        n_rows = rows[0].shape[0]
    if not rows or _bound_method(k, d, p, n_rows, act) is None:
        flops = n_rows * float(k * (d + 1)) ** 2 + float(P) ** 3
        why = (f"its matrix-free form needs {_matrix_free_flops(k, d, p, n_rows):.1e}" if act == "relu" else
               f"the matrix-free form is for ReLU units, these are {act!r}")
        diagnostics.setdefault("certificates", {})["max_unit_error"] = {
            "passed": None, "meaning": MEANING, "bound": math.inf, "tolerance": float(tol), "stage": stage,
            "detail": (f"not evaluated: {P} parameters; its Gauss-Newton matrix needs {flops:.1e} flops and "
                       f"{8 * P * P / 2**30:.2g} GiB and {why}, more than the fit itself (the learner's own "
                       "certificates still apply)")}
        return None
    method = _bound_method(k, d, p, n_rows, act)
    # a first look on a fifth of the rows (a fifth of the cost) decides when its bound already passes on a
    # residual at round-off (noiseless data, where every term is round-off at any row count); otherwise
    # all n_rows decide. Each
    # look gets half the failure probability (a union bound over the two). Fewer rows would not do: a ReLU
    # unit is active on about half of them, so at 2 P / p rows (d = 1000, k = p = 50) each unit's d + 1
    # weights saw about d + 1 active rows, lambda_min of M^{-1} J^T J / n fell to 1.5e-3 and the step's
    # conjugate gradients did not converge in 240 steps
    first_rows = max(2000, -(-(ROWS_PER_PARAMETER // 5) * P // p))
    # the first look of a ReLU network in the matrix-free form once the dense one costs more than
    # DENSE_FIRST_LOOK_FLOPS: it settles noiseless fits at a fraction of the cost, and a first look that
    # fails (label noise, where the dense form's exact noise term is the tighter) is redone densely
    first_method = method
    if method == "dense" and act == "relu" and \
            first_rows * float(k * (d + 1)) ** 2 + float(P) ** 3 > DENSE_FIRST_LOOK_FLOPS:
        first_method = "matrix-free"
    looks = ([(first_rows, first_method), (n_rows, method)] if first_rows < n_rows or first_method != method
             else [(n_rows, method)])
    delta = failure_probability / len(looks)
    for rows_used, look_method in looks:
        info = unit_error_bound(network, rows[0][:rows_used], rows[1][:rows_used], failure_probability=delta,
                                method=look_method)
        bound = info["bound"]
        passed = bool(np.isfinite(bound) and bound <= tol)
        # a first look decides only a residual at round-off (no lack-of-fit test was needed): with label
        # noise its fewer rows would give the lack-of-fit test less power than all n_rows have
        if passed and "lack_of_fit_p_value" not in info:
            break
    if np.isfinite(bound):
        detail = (f"max unit error <= {bound:.3g} (first order, probability >= 1 - {failure_probability:g}; "
                  f"estimated label noise RMS {info['sigma']:.3g}, {info['n_rows']} rows) vs certificate_tol "
                  f"= {tol:g}")
        if not passed:
            noise_dominates = info["noise"].max() * math.sqrt(3.0) > 0.5 * bound
            detail += ("; the label-noise part dominates and shrinks as 1/sqrt(n): pass more samples, or raise "
                       "certificate_tol if this accuracy is enough" if noise_dominates
                       else "; the estimate is off the least-squares fit of the data: more samples or refine=True")
    elif info.get("lack_of_fit"):
        detail = (f"no bound: the residual depends on x (lack-of-fit p-value {info['lack_of_fit_p_value']:.3g}), so "
                  "it is not label noise: a spurious fit, or data outside the model (input law, activation); "
                  "more samples, refine=True, or another learner")
    elif np.isfinite(info["first_order"]):
        detail = (f"no bound: the first-order estimate {info['first_order']:.3g} of the max unit error is beyond "
                  f"the linear regime ({LINEAR_REGIME:g}); the estimate is far from the network that generated "
                  "the data: more samples, refine=True, or another learner")
    else:
        detail = ("no bound: the Jacobian of the network on the rows is rank deficient (a dead unit, or "
                  "fewer rows than parameters)")
    learner._certify("max_unit_error", passed, detail, diagnostics)
    diagnostics["certificates"]["max_unit_error"].update(
        meaning=MEANING, bound=float(bound), tolerance=float(tol), stage=stage,
        first_order=info["first_order"], lack_of_fit_p_value=info.get("lack_of_fit_p_value", math.nan),
        sigma=info["sigma"], per_unit_first_order=info["per_unit"].tolist(), method=info["method"],
        n_rows=int(info["n_rows"]))
    return passed


@contextmanager
def held_assumption_warnings(learner: Any, network_fn, rows_fn, diagnostics: dict, *, tol: float,
                             stage: str | Callable[[], str] = "final estimate") -> Iterator[list]:
    """Run a fit with its :class:`~nnrecover.errors.AssumptionWarning` (input law) held back, then certify.

    Inside the ``with`` block every other warning passes through at once; the assumption warnings are
    collected. On exit the final network ``network_fn()`` is certified on ``rows_fn()``
    (:func:`certify_max_unit_error`). If the certificate passes, the data themselves show that the
    estimate is within ``tol`` whatever their law, so the held warnings are only recorded
    (``diagnostics["input_law_notes"]``); otherwise (or if the fit or the certificate raised) they are
    issued, since they explain the failure.
    """
    held: list = []
    caught: list = []
    passed = None
    try:
        try:
            with warnings.catch_warnings(record=True) as recorder:
                warnings.simplefilter("always")
                try:
                    yield held
                finally:
                    caught = list(recorder)
        finally:  # outside the recorder: pass the other warnings on now
            for w in caught:
                if issubclass(w.category, AssumptionWarning):
                    held.append(w)
                else:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        passed = certify_max_unit_error(learner, network_fn(), rows_fn, diagnostics, tol=tol,
                                        stage=stage() if callable(stage) else stage)
    finally:
        diagnostics["input_law_notes"] = [str(w.message) for w in held]
        if passed is not True:
            for w in held:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

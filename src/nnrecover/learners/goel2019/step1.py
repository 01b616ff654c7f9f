"""Step 1 of Goel & Panigrahy (2019): approximate lowest-layer directions from H_2/H_4 correlations.

Three routes, all on the normalised moments of :mod:`.statistics` (``M``, ``T4``; see there):

``power`` (default, deterministic given the seed)
    Whitening + tensor power iteration with deflation: the change of variables in the proof of
    Claim 1 (Appendix B.3). With ``M = U D U^T`` (top ``d`` eigenpairs) and ``W_ = U D^{-1/2}``, the
    whitened quartic ``T4(W_ y, W_ y, W_ y, W_ y) = sum_i (1/c_i) <y_i, y>^4`` has the orthonormal
    ``y_i = sqrt(c_i) W_^T w_i*`` as its only local maxima on the sphere; ``Z = W_ [y_1 .. y_d]`` are
    the columns of ``(T W*)^{-1}`` (``T = diag(sqrt(c_i))``) and the rows of ``Z^{-1}`` are
    ``+-sqrt(c_i) w_i*``.
``landscape`` (the paper's route, Section 2.1, Claims 1-2)
    Local minima of ``G(z) = -m_4(z) + lambda' (m_2(z) - 1)^2`` (the paper's ``G`` divided by
    ``|u_hat_4|``, ``lambda' = lambda u_hat_2^2/|u_hat_4|``), one at a time: perturbed gradient descent
    with an Armijo line search, escape along negative curvature at approximate saddles (Definition 1:
    an ``(eps, tau)``-local minimum has ``|grad| <= eps`` and ``lambda_min(Hessian) >= -tau``), a Newton
    polish, then deflation in the ``M``-geometry (the next search is restricted to
    ``{z : z^T M z_j = 0}``, where the whitened targets are orthonormal). Each minimiser sits at
    ``|y_i| = s_i = sqrt(lambda'/(lambda' - 1/c_i))``, so ``c_i = |row_i|^2 + 1/lambda'``.
``simultaneous`` (Appendix B.4, Theorems 11-12)
    One minimisation over all ``d`` rows of ``G(W) = sum_{j != k} T4(w_j, w_j, w_k, w_k)
    - gamma sum_j m_4(w_j) + lambda' sum_j (m_2(w_j) - 1)^2``, where ``T4(a, a, b, b)`` is the
    correlation with the corrected cross kernel ``psi`` (its printed form is not mean-zero). L-BFGS,
    a saddle check on the Hessian (Theorem 11: every saddle is strict), a Newton polish;
    the rows of ``W^{-T}`` are ``+-sqrt(c_i - gamma/lambda') w_i*``.

All routes work in the top-``d`` eigenspace of ``M`` (for ``n > d`` the objectives are exactly flat in
the other directions, so the search is restricted there) and refuse, with
:class:`~nnrecover.errors.AssumptionError`, when ``M`` is not positive definite on ``d`` directions
(too low a threshold, too few samples, or a vanishing linear coefficient ``c_i``).

Sign (not in the paper; the objectives are even): the dual vector ``z_i`` (column of ``Z``) satisfies
``E[y~ x] . z_i / u_hat_1 = sum_j c_j w_j* . z_i = +-sqrt(c_i)`` for linear ``P``, with the sign of the
unit; this first-order (odd Hermite) test never degenerates because ``u_hat_1 > 0`` for step, relu and
sigmoid.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import linalg, optimize

from ..._validation import check_positive_int, check_random_state
from ...errors import (
    AssumptionError,
    AssumptionWarning,
    ConvergenceError,
    InputError,
    NNRecoverError,
)
from ...metrics import weight_error
from .statistics import SampleMoments

__all__ = ["Step1Result", "STEP1_METHODS", "whitening_basis", "tensor_power_route", "landscape_route",
           "simultaneous_route", "step1", "landscape_objective", "simultaneous_objective", "resolve_signs",
           "split_half_angles", "extra_directions"]

STEP1_METHODS = ("power", "landscape", "simultaneous")

#: a power iteration whose last step is still above this is reported as not converged; between ``tol`` and
#: this it is slow linear convergence on a noisy tensor, whose remaining drift is far below the sampling
#: error of the moments it iterates on
_POWER_FAIL = 1e-4


@dataclass
class Step1Result:
    """Output of a Step 1 route.

    Attributes
    ----------
    weights : ndarray (d, n)
        Unit rows ``w_i`` (signs resolved).
    coefficients : ndarray (d,)
        Estimated linear coefficients ``c_i`` of ``P``.
    duals : ndarray (n, d)
        The columns of ``(T W)^{-1}`` found (signed like ``weights``): the landscape minima.
    eigenvalues : ndarray (d,)
        Top-``d`` eigenvalues of ``M`` (all > 0).
    certificates : list of dict
        Per minimum: ``eps`` (gradient norm) and ``tau`` (``max(0, -lambda_min(Hessian))``) of the
        (eps, tau)-local-minimum certificate (Definition 1), for the landscape routes.
    info : dict
        Route-specific details (iterations, restarts, lambda', timings).
    """

    weights: np.ndarray
    coefficients: np.ndarray
    duals: np.ndarray
    eigenvalues: np.ndarray
    certificates: list = field(default_factory=list)
    info: dict = field(default_factory=dict)


# ============================================================================ shared pieces

def whitening_basis(moments, n_hidden: int, *, min_eigenvalue: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """Top-``d`` eigenpairs ``(U, D)`` of ``M``; refuse unless all ``d`` are clearly positive.

    ``M = sum_i c_i w_i w_i^T`` in population for linear ``P``; it is positive definite on ``d``
    directions exactly when every ``c_i > 0`` and ``W*`` has rank ``d`` (Assumption 1). From samples it
    also fails when the threshold is so low that products dominate, or when too few units fired.

    Raises
    ------
    AssumptionError
        ``lambda_d(M) <= min_eigenvalue * lambda_1(M)``.
    """
    d = check_positive_int(n_hidden, "n_hidden")
    M = moments.second()
    n = M.shape[0]
    if d > n:
        raise InputError(f"n_hidden ({d}) must not exceed the input dimension ({n}).")
    evals, evecs = np.linalg.eigh(0.5 * (M + M.T))
    order = np.argsort(evals)[::-1]
    evals, evecs = evals[order], evecs[:, order]
    top = evals[:d]
    scale = max(abs(evals[0]), abs(evals[-1]), np.finfo(float).tiny)
    if top[-1] <= min_eigenvalue * scale:
        raise AssumptionError(
            f"M-hat = E[y~ (x x^T - I)]/(sqrt(2) u_hat_2) is not positive definite on {d} directions (its "
            f"{d}-th eigenvalue is {top[-1]:.3g}, the largest |eigenvalue| {scale:.3g}); Goel-Panigrahy Step 1 "
            "(Claim 1, Assumption 1) needs a positive linear coefficient c_i for every unit and a threshold "
            "high enough that the linear part dominates (Lemma 2). Raise t, pass more samples, or check P.")
    return evecs[:, :d], top


def extra_directions(moments, n_hidden: int) -> dict:
    """Does ``M`` have more than ``n_hidden`` eigenvalues above its sampling error (more units in the data)?

    In population ``M = sum_i c_i w_i w_i^T`` plus terms from the products of ``P``, all inside the span of
    the units (Lemma 2), so its rank is the number of units. From samples an eigenvalue that is zero in
    population shows as at most the error's spectral norm (Weyl), estimated as ``tau``, the median
    spread ``||M_g - M||`` of the :data:`~.statistics.M_GROUPS` row groups' estimates divided by
    ``sqrt(G - 1)`` (the rule of :mod:`nnrecover.learners.width`); an eigenvalue counts when it exceeds
    ``2 tau`` (room for the error of ``tau`` itself). Exact moments: ``tau = 1e-9 |lambda_1|``.

    Returns
    -------
    dict
        ``count`` (eigenvalues above ``2 tau``), ``extra`` (``count > n_hidden``), ``noise_level`` (``tau``),
        ``eigenvalues`` (the largest ``n_hidden + 3``, descending).
    """
    d = check_positive_int(n_hidden, "n_hidden")
    M = moments.second()
    evals = np.sort(np.linalg.eigvalsh(0.5 * (M + M.T)))[::-1]
    if isinstance(moments, SampleMoments):
        spreads = moments.second_group_spread()
        tau = float(np.median(spreads) / math.sqrt(max(len(spreads) - 1, 1)))
    else:
        tau = 1e-9 * float(np.max(np.abs(evals), initial=0.0))
    count = int(np.sum(evals > 2.0 * tau))
    return {"count": count, "extra": count > d, "noise_level": tau, "eigenvalues": evals[:d + 3].tolist()}


def check_extra_directions(moments, n_hidden: int) -> dict:
    """:func:`extra_directions`, warning (:class:`~nnrecover.errors.AssumptionWarning`) when ``M`` has
    more eigenvalues above its sampling error than ``n_hidden``: the data then come from more units
    (its rank is the number of units, Claim 1 and Lemma 2), and the ones not returned are missing
    without any certificate failing (``unit_angles`` judges the returned units only)."""
    k = int(n_hidden)
    info = extra_directions(moments, k)
    if info["extra"]:
        ev = info["eigenvalues"]
        warnings.warn(
            f"HighThresholdLearner: M-hat = E[y~ (x x^T - I)]/(sqrt(2) u_hat_2) has {info['count']} eigenvalues "
            f"above twice its sampling error ({2 * info['noise_level']:.3g}), more than n_hidden = {k}: its "
            f"({k + 1})-th is {ev[k]:.3g} against a largest of {ev[0]:.3g}. Its rank is the number of units "
            f"(Claim 1, Lemma 2), so the data look like they come from more units, and the units beyond the "
            f"{k} returned are missing. Pass n_hidden={info['count']} or n_hidden='auto'.",
            AssumptionWarning, stacklevel=5)
    return info


def _start_duals(start, U: np.ndarray) -> np.ndarray:
    """``start`` (the ``duals`` of a nearby :class:`Step1Result`, input coordinates) in the coordinates of
    the top eigenspace ``U`` of ``M``: a ``(d, d)`` array whose columns are the routes' starting duals."""
    d = U.shape[1]
    start = np.asarray(start, dtype=np.float64)
    if start.shape != (U.shape[0], d):
        raise InputError(f"start must hold {d} dual vectors of length {U.shape[0]} as columns, got shape "
                         f"{start.shape}.")
    return U.T @ start


def resolve_signs(moments, duals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Signs of the dual vectors from the first-order Hermite moment, and the test margins.

    ``s_i = sign(E[y~ x] . z_i / u_hat_1)``.

    Returns
    -------
    signs : ndarray (d,) of +-1
    margins : ndarray (d,)
        ``|v1 . z_i|`` relative to ``|v1| |z_i|`` (small means the sign is doubtful).
    """
    v1 = moments.first()
    proj = v1 @ duals
    signs = np.where(proj >= 0, 1.0, -1.0)
    denom = np.linalg.norm(v1) * np.linalg.norm(duals, axis=0)
    return signs, np.abs(proj) / np.where(denom > 0, denom, 1.0)


def _finish(moments_q, U, Zq, evals, bias: float, certificates, info) -> Step1Result:
    """Rows of ``Zq^{-1}`` -> unit signed weights in input coordinates, coefficients, duals."""
    Wraw = np.linalg.solve(Zq, np.eye(Zq.shape[0]))           # rows ~ +-sqrt(c_i - bias) w_i (q-coords)
    norms = np.linalg.norm(Wraw, axis=1)
    signs, margins = resolve_signs(moments_q, Zq)
    Wq = (Wraw / norms[:, None]) * signs[:, None]
    info = dict(info, sign_margins=margins)
    return Step1Result(weights=Wq @ U.T, coefficients=norms ** 2 + bias, duals=U @ (Zq * signs),
                       eigenvalues=evals, certificates=certificates, info=info)


# ============================================================================ route 1: whitening + power iteration

def tensor_power_route(moments, n_hidden: int, *, max_iter: int = 300, tol: float = 1e-13,
                       rng=None, start: np.ndarray | None = None) -> Step1Result:
    """Whitening + tensor power iteration with deflation (proof of Claim 1, Appendix B.3).

    The starting vectors are the eigenvectors of one random contraction ``T_w(I, I, g, g)`` of the
    whitened tensor (``g ~ N(0, I)``): for ``T_w = sum_i (1/c_i) y_i^{(x)4}`` that matrix is
    ``sum_i (1/c_i) (y_i . g)^2 y_i y_i^T``, whose eigenvectors are the ``y_i`` themselves. All ``d``
    vectors are then iterated together, ``Y <- polar([T_w(I, y_j, y_j, y_j)]_j)``: the symmetric
    orthonormalisation keeps them orthonormal (the deflation of the one-at-a-time version), and each
    iteration is one pass over the stored rows with a ``d``-column product.

    Parameters
    ----------
    moments : SampleMoments or PopulationMoments
    n_hidden : int
        ``d``.
    max_iter : int, default 300
    tol : float, default 1e-13
        Stop when successive unit iterates differ by less than ``tol``.
    rng : None, int or Generator
    start : ndarray (n, d), optional
        Dual vectors to start from (the ``duals`` of a :class:`Step1Result` on similar moments, e.g. of
        the same data), instead of the eigenvectors of a random contraction.

    Returns
    -------
    Step1Result
    """
    t0 = time.perf_counter()
    d = check_positive_int(n_hidden, "n_hidden")
    max_iter = check_positive_int(max_iter, "max_iter")
    gen = check_random_state(rng)
    U, D = whitening_basis(moments, d)
    mq = moments.project(U)
    scale = 1.0 / np.sqrt(D)                                   # W_ = diag(D^{-1/2}) in q-coordinates

    def action(Y):                                             # whitened T4(I, y_j, y_j, y_j), every column
        return scale[:, None] * mq.t4_batch(scale[:, None] * Y)

    if start is None:
        g = gen.standard_normal(d)
        C = scale[:, None] * mq.t4_matrix(scale * g) * scale[None, :]
        Y = np.linalg.eigh(0.5 * (C + C.T))[1]
    else:
        # Z = W_ Y with W_ = U diag(D^-1/2): the whitened iterates are diag(D^1/2) U^T Z, made orthonormal
        Uv, _, Vt = np.linalg.svd(_start_duals(start, U) / scale[:, None], full_matrices=False)
        Y = Uv @ Vt
    # all d components at once: Y <- polar(T_w(I, y_j, y_j, y_j)_j), the symmetric (Loewdin)
    # orthonormalisation playing the role of deflation; one pass over the stored rows per iteration
    step = np.inf
    for it in range(max_iter):
        V = action(Y)
        Uv, _, Vt = np.linalg.svd(V, full_matrices=False)
        Y_new = Uv @ Vt
        Y_new *= np.where(np.einsum("ij,ij->j", Y_new, Y) < 0, -1.0, 1.0)
        step = float(np.max(np.linalg.norm(Y_new - Y, axis=0)))
        Y = Y_new
        if step < tol:
            break
    iterations = it + 1
    if step > _POWER_FAIL:
        # the joint iteration can cycle when the sample tensor is far from orthogonally decomposable
        # (few firing samples); one component at a time with deflation is slower but converges there
        Y, iters = _sequential_power(action, Y, max_iter, tol)
        iterations = [iterations, iters]
    found = Y
    Zq = scale[:, None] * found
    return _finish(mq, U, Zq, D, 0.0, [], {"method": "power", "iterations": iterations,
                                           "time": time.perf_counter() - t0})


def _sequential_power(action, starts: np.ndarray, max_iter: int, tol: float) -> tuple[np.ndarray, list]:
    """Power iteration one component at a time, deflated against the components already found."""
    d = starts.shape[0]
    found = np.zeros((d, 0))
    iterations = []
    for k in range(d):
        P = np.eye(d) - found @ found.T
        cand = P @ starts
        y = cand[:, int(np.argmax(np.linalg.norm(cand, axis=0)))]
        y /= np.linalg.norm(y)
        step = np.inf
        for it in range(max_iter):
            y_new = P @ action(y[:, None])[:, 0]
            y_new /= np.linalg.norm(y_new)
            if y_new @ y < 0:
                y_new = -y_new
            step = np.linalg.norm(y_new - y)
            y = y_new
            if step < tol:
                break
        iterations.append(it + 1)
        if step > _POWER_FAIL:
            raise ConvergenceError(f"tensor power iteration did not converge in max_iter={max_iter} iterations "
                                   f"(component {k + 1}, last step {step:.2g}). With too few firing samples for "
                                   "this many units the sample tensor is far from orthogonally decomposable and the "
                                   "iteration wanders: pass more samples (or raise max_iter).")
        found = np.column_stack([found, y])
    return found, iterations


# ============================================================================ route 2: one-by-one landscape

def landscape_objective(moments, z: np.ndarray, lam: float, *, order: int = 2):
    """``G(z) = -m_4(z) + lam (m_2(z) - 1)^2`` with gradient and (``order=2``) Hessian (Section 2.1).

    ``grad = -4 T4(I,z,z,z) + 4 lam (m_2 - 1) M z``;
    ``Hess = -12 T4(I,I,z,z) + 8 lam (M z)(M z)^T + 4 lam (m_2 - 1) M``.
    """
    M = moments.second()
    Mz = M @ z
    m2 = float(z @ Mz)
    t3 = moments.t4(z, z, z)
    m4 = float(z @ t3)
    value = -m4 + lam * (m2 - 1.0) ** 2
    grad = -4.0 * t3 + 4.0 * lam * (m2 - 1.0) * Mz
    if order < 2:
        return value, grad
    hess = -12.0 * moments.t4_matrix(z) + 8.0 * lam * np.outer(Mz, Mz) + 4.0 * lam * (m2 - 1.0) * M
    return value, grad, 0.5 * (hess + hess.T)


def _local_min(fun, v0, *, eps: float, tau: float, max_iter: int, gen, newton_tol: float, norm_cap: float):
    """Perturbed gradient descent + negative-curvature escape + Newton polish on ``fun(v) -> (f, g, H)``."""
    v = v0.copy()
    escapes = 0
    it = 0
    step = 1.0
    stalled = False                                             # line search below round-off of f
    while it < max_iter:
        it += 1
        f, g, H = fun(v)
        gn = np.linalg.norm(g)
        if np.linalg.norm(v) > norm_cap:
            return v, {"diverged": True, "iterations": it}
        if gn <= eps or stalled:
            lam_min, vec = linalg.eigh(H, subset_by_index=[0, 0])
            if lam_min[0] < -tau:                               # approximate saddle: escape
                escapes += 1
                stalled = False
                direction = vec[:, 0] * (1.0 if gen.random() < 0.5 else -1.0)
                v = v + max(0.5 * abs(lam_min[0]) / max(np.abs(H).max(), 1e-300), 1e-3) * direction
                continue
            # Newton polish inside the basin of a local minimum (H positive definite here up to tau)
            for _ in range(50):
                f, g, H = fun(v)
                if np.linalg.norm(g) <= newton_tol:
                    break
                try:
                    dv = np.linalg.solve(H, -g)
                except np.linalg.LinAlgError:
                    break
                f_new, g_new = fun(v + dv)[:2]
                if np.linalg.norm(g_new) >= np.linalg.norm(g) and f_new > f:
                    break                                       # left the quadratic basin: keep v
                v = v + dv
            f, g, H = fun(v)
            lam_min = float(linalg.eigh(H, eigvals_only=True, subset_by_index=[0, 0])[0])
            if lam_min < -tau:
                escapes += 1
                stalled = False
                continue
            return v, {"diverged": False, "iterations": it, "escapes": escapes, "eps": float(np.linalg.norm(g)),
                       "tau": max(0.0, -lam_min), "lambda_min": lam_min, "value": float(f)}
        # Armijo backtracking along -g, with a small random perturbation (perturbed GD)
        step = min(step * 2.0, 1e3)
        while True:
            v_new = v - step * g
            f_new = fun(v_new)[0]
            if f_new <= f - 1e-4 * step * gn * gn:
                v = v_new
                stalled = f - f_new <= 1e-14 * max(1.0, abs(f))   # no progress above round-off
                break
            step *= 0.5
            if step < 1e-12:
                stalled = True
                step = 1.0
                break
    raise ConvergenceError(f"the landscape search found no (eps, tau)-local minimum in max_iter={max_iter} "
                           "iterations; raise max_iter or loosen eps.")


def landscape_route(moments, n_hidden: int, *, lam: float = 4.0, eps: float = 1e-6, tau: float = 1e-6,
                    max_iter: int = 5000, rng=None, start: np.ndarray | None = None) -> Step1Result:
    """The paper's Step 1: one local minimum of ``G`` at a time, deflated in the ``M``-geometry (Section 2.1).

    Parameters
    ----------
    moments : SampleMoments or PopulationMoments
    n_hidden : int
    lam : float, default 4
        ``lambda'``; coercivity needs ``lambda' > 1/c_min`` (Lemma 15). When an iterate runs off to
        infinity the search is restarted with ``lambda'`` doubled (recorded in ``info["lam"]``).
    eps, tau : float
        The ``(eps, tau)`` of Definition 1 at which the descent hands over to the Newton polish
        (relative to the scale of ``G``).
    max_iter : int, default 5000
    rng : None, int or Generator
    start : ndarray (n, d), optional
        Dual vectors to start from (the ``duals`` of a :class:`Step1Result` on similar moments): the
        ``j``-th search starts from the ``j``-th, projected on the deflated subspace, instead of at random.
    """
    t0 = time.perf_counter()
    d = check_positive_int(n_hidden, "n_hidden")
    if not (isinstance(lam, (int, float)) and np.isfinite(lam) and lam > 0):
        raise InputError(f"lam (lambda') must be a finite number > 0, got {lam!r}.")
    gen = check_random_state(rng)
    U, D = whitening_basis(moments, d)
    starts = None if start is None else _start_duals(start, U)
    mq = moments.project(U)
    M = mq.second()
    lam = float(lam)
    for _attempt in range(6):
        Z, certs = [], []
        diverged = False
        for j in range(d):
            B = linalg.null_space((M @ np.column_stack(Z)).T) if Z else np.eye(d)
            v0 = None if starts is None else B.T @ starts[:, j]
            if v0 is None or np.linalg.norm(v0) <= 1e-3 * np.linalg.norm(starts[:, j]):
                # no start, or one the deflation removed (an earlier search reached its unit): at random
                v0 = gen.standard_normal(B.shape[1])
            v0 /= math.sqrt(v0 @ B.T @ M @ B @ v0)            # start on m_2 = 1

            def fun(v, B=B):
                f, g, H = landscape_objective(mq, B @ v, lam)
                return f, B.T @ g, B.T @ H @ B

            v, rec = _local_min(fun, v0, eps=eps, tau=tau, max_iter=max_iter, gen=gen, newton_tol=1e-14,
                                norm_cap=1e3 / math.sqrt(D.min()))
            if rec["diverged"]:
                diverged = True
                break
            Z.append(B @ v)
            certs.append({k: rec[k] for k in ("eps", "tau", "lambda_min", "value", "iterations", "escapes")})
        if not diverged:
            break
        lam *= 2.0
    else:
        raise ConvergenceError("the landscape objective stayed unbounded below after doubling lambda' 6 times; "
                               "a linear coefficient c_i is too small or negative (Assumption 1).")
    Zq = np.column_stack(Z)
    return _finish(mq, U, Zq, D, 1.0 / lam, certs, {"method": "landscape", "lam": lam,
                                                     "time": time.perf_counter() - t0})


# ============================================================================ route 3: simultaneous landscape

def simultaneous_objective(moments, W: np.ndarray, gamma: float, lam: float):
    """Value and gradient of the simultaneous objective (Appendix B.4) at the rows of ``W`` (d, n).

    ``G = sum_{j != k} T4(w_j,w_j,w_k,w_k) - gamma sum_j m_4(w_j) + lam sum_j (m_2(w_j) - 1)^2``;
    ``dG/dw_j = 4 sum_{k != j} T4(I,w_j,w_k,w_k) - 4 gamma T4(I,w_j,w_j,w_j) + 4 lam (m_2(w_j) - 1) M w_j``.
    """
    Z = W.T
    M = moments.second()
    MZ = M @ Z
    m2 = np.einsum("ij,ij->j", Z, MZ)
    own = moments.t4_batch(Z)                                  # T4(I, w_j, w_j, w_j)
    cross = moments.t4_sum(Z) - own                            # sum_{k != j} T4(I, w_j, w_k, w_k)
    m4 = np.einsum("ij,ij->j", Z, own)
    pair_total = float(np.einsum("ij,ij->", Z, cross))         # sum_{j != k} T4(w_j, w_j, w_k, w_k)
    value = pair_total - gamma * m4.sum() + lam * np.sum((m2 - 1.0) ** 2)
    grad = 4.0 * cross - 4.0 * gamma * own + 4.0 * lam * (m2 - 1.0) * MZ
    return value, grad.T


def _fd_hessian(grad_fn, x: np.ndarray, h: float) -> np.ndarray:
    n = x.size
    H = np.empty((n, n))
    for i in range(n):
        e = np.zeros(n)
        e[i] = h
        H[:, i] = (grad_fn(x + e) - grad_fn(x - e)) / (2 * h)
    return 0.5 * (H + H.T)


def simultaneous_route(moments, n_hidden: int, *, gamma: float = 0.01, lam: float = 4.0, tau: float = 1e-6,
                       max_rounds: int = 10, rng=None, start: np.ndarray | None = None) -> Step1Result:
    """All ``d`` units at once: the simultaneous landscape with the corrected ``psi`` (Appendix B.4).

    Parameters
    ----------
    moments : SampleMoments or PopulationMoments
    n_hidden : int
    gamma : float, default 0.01
        Weight of the ``H_4`` term (Theorem 11: ``gamma <= c``, ``c = 0.01``).
    lam : float, default 4
        ``lambda'`` of the normalised constraint term.
    tau : float, default 1e-6
        Saddle test: a stationary point with ``lambda_min(Hessian) < -tau`` is escaped along its
        negative-curvature direction (Theorem 11: saddles are strict).
    max_rounds : int, default 10
        Escapes allowed.
    rng : None, int or Generator
    start : ndarray (n, d), optional
        Dual vectors to start from (the ``duals`` of a :class:`Step1Result` on similar moments) instead
        of random rows.
    """
    t0 = time.perf_counter()
    d = check_positive_int(n_hidden, "n_hidden")
    for name, val in (("gamma", gamma), ("lam", lam)):
        if not (isinstance(val, (int, float)) and np.isfinite(val) and val > 0):
            raise InputError(f"{name} must be a finite number > 0, got {val!r}.")
    gen = check_random_state(rng)
    U, D = whitening_basis(moments, d)
    mq = moments.project(U)
    M = mq.second()

    def fg(x):
        f, g = simultaneous_objective(mq, x.reshape(d, d), gamma, lam)
        return f, g.ravel()

    def grad(x):
        return fg(x)[1]

    # the rows of W are the duals (the columns of Z = W^T), each even in G: a start's signs do not matter
    W0 = gen.standard_normal((d, d)) if start is None else _start_duals(start, U).T
    W0 /= np.sqrt(np.einsum("ij,jk,ik->i", W0, M, W0))[:, None]
    x = W0.ravel()
    escapes = 0
    for _ in range(max_rounds + 1):
        res = optimize.minimize(fg, x, jac=True, method="L-BFGS-B",
                                options={"maxiter": 20000, "gtol": 1e-12, "ftol": 1e-16, "maxcor": 30})
        x = res.x
        if np.max(np.abs(x)) > 1e3 / math.sqrt(D.min()):
            raise ConvergenceError(
                "the simultaneous landscape ran off to infinity (its sample version is not coercive here): the "
                "product terms of P dominate the H_4 cross term at this threshold (Theorem 12 needs t large), or "
                "lambda' is too small for the smallest c_i (Lemma 15); raise t or lam, or use method='power'.")
        H = _fd_hessian(grad, x, 1e-6)
        evals, evecs = np.linalg.eigh(H)
        if evals[0] >= -tau:
            break
        escapes += 1
        x = x + 0.1 * evecs[:, 0] * (1.0 if gen.random() < 0.5 else -1.0)
    else:
        raise ConvergenceError(f"the simultaneous landscape still sat at a saddle after {max_rounds} escapes.")
    for _ in range(20):                                        # Newton polish (Hessian by differences)
        g = grad(x)
        if np.linalg.norm(g) < 1e-14:
            break
        x = x + np.linalg.lstsq(H, -g, rcond=None)[0]
        H = _fd_hessian(grad, x, 1e-6)
    evals = np.linalg.eigvalsh(H)
    g = grad(x)
    cert = {"eps": float(np.linalg.norm(g)), "tau": max(0.0, -float(evals[0])), "lambda_min": float(evals[0]),
            "value": float(fg(x)[0]), "escapes": escapes}
    Wq = x.reshape(d, d)
    return _finish(mq, U, Wq.T, D, gamma / lam, [cert], {"method": "simultaneous", "gamma": gamma, "lam": lam,
                                                          "time": time.perf_counter() - t0})


# ============================================================================ dispatcher

def step1(moments, n_hidden: int, *, method: str = "power", rng=None, **options) -> Step1Result:
    """Run one Step 1 route, chosen by ``method``.

    ``method`` is ``"power"``, ``"landscape"`` or ``"simultaneous"``.

    The route runs with one BLAS thread: its products are (rows x d) by (d x few columns), for which
    one thread is fastest and several threads only spin (``benchmarks/bench_threads.py``). The second
    moment ``M`` (rows x n by n x rows, the largest product of Step 1) is formed before, with the
    default threads.
    """
    # deferred: threadpoolctl inspects the BLAS libraries when imported
    from threadpoolctl import threadpool_limits

    routes = {"power": tensor_power_route, "landscape": landscape_route, "simultaneous": simultaneous_route}
    if method not in routes:
        raise InputError(f"method must be one of {', '.join(STEP1_METHODS)}, got {method!r}.")
    moments.second()
    with threadpool_limits(limits=1, user_api="blas"):
        return routes[method](moments, n_hidden, rng=rng, **options)


# ============================================================================ sampling error of the estimate

def split_half_angles(moments, estimate: Step1Result, *, method: str = "power", n_splits: int = 2, rng=None,
                      **options) -> dict:
    """The sampling error of Step 1's unit directions, from Step 1 on disjoint halves of the samples.

    Every sample goes to one half or the other with probability 1/2 (the active rows by a coin each, the
    rows where no unit fires as a binomial count: they enter the moments only through ``n_total``), and
    Step 1 runs on each half. A half's estimate has twice the sampling variance of the whole sample's, so
    two independent halves differ by about twice the whole sample's error: for unit ``i``, matched to the
    halves' units up to sign (Hungarian, :func:`nnrecover.metrics.weight_error`), ``angle(w_i^A, w_i^B) / 2``
    estimates its angle to the population direction that Step 1 converges to with more samples. The
    estimate is the root mean square over ``n_splits`` random splits (one split's angle in ``n`` dimensions
    varies like a chi variable with ``n - 1`` degrees of freedom: by about 35 % at ``n = 5``). It does not
    see the bias of the population direction itself (the products of ``P``, Lemma 2); the learner's
    certificate takes Step 2's held-out estimates for that.

    Parameters
    ----------
    moments : SampleMoments
        The stored active rows (``X``, ``y``) and ``n_total``.
    estimate : Step1Result
        Step 1 on all the samples.
    method : str
        The Step 1 route, run on each half with ``options``, started from ``estimate``'s duals: the half's
        fixed point or minimum near them is the one to compare (a random start may reach another one,
        and on half the rows the landscape routes do find spurious minima), and it is reached in a few
        iterations.
    n_splits : int, default 2
    rng : None, int or Generator

    Returns
    -------
    dict
        ``unit_angles`` (d,) the estimates in radians, ``max_angle``, ``n_splits``, ``half_rows`` (active
        rows of each half), ``time``; when Step 1 fails on a half (too few firing rows for its
        assumptions), ``unit_angles`` is all ``pi / 2`` and ``failed`` holds the reason.
    """

    t0 = time.perf_counter()
    gen = check_random_state(rng)
    n_splits = check_positive_int(n_splits, "n_splits")
    W = estimate.weights
    d = W.shape[0]
    options = dict(options, start=estimate.duals)
    X, y, n_total = moments.X, moments.y, int(moments.n_total)
    squares, half_rows = np.zeros(d), []
    for split_rng in gen.spawn(n_splits):
        in_first = split_rng.random(X.shape[0]) < 0.5
        quiet_first = int(split_rng.binomial(max(n_total - X.shape[0], 0), 0.5))
        matched = []
        for member, quiet, route_rng in ((in_first, quiet_first, split_rng.spawn(1)[0]),
                                         (~in_first, n_total - X.shape[0] - quiet_first, split_rng.spawn(1)[0])):
            half = SampleMoments(X[member], y[member], int(member.sum()) + quiet, moments.activation,
                                 moments.threshold)
            half_rows.append(int(member.sum()))
            try:
                Wh = step1(half, d, method=method, rng=route_rng, **options).weights
                del half                                 # its rows, before the other half's are copied
            except NNRecoverError as exc:
                return {"unit_angles": np.full(d, 0.5 * math.pi), "max_angle": 0.5 * math.pi, "n_splits": n_splits,
                        "half_rows": half_rows, "failed": f"Step 1 on half of the samples: {exc}",
                        "time": time.perf_counter() - t0}
            matching = weight_error(Wh, W, allow_sign_flip=True)["matching"]
            matched.append(Wh[matching] / np.linalg.norm(Wh[matching], axis=1, keepdims=True))
        A, B = matched
        # half the angle between the halves' units, atan2(|a - b|, |a + b|), accurate near 0; signed: a half
        # that flips a unit's sign disagrees with the other by about pi
        squares += np.arctan2(np.linalg.norm(A - B, axis=1), np.linalg.norm(A + B, axis=1)) ** 2
    angles = np.sqrt(squares / n_splits)
    return {"unit_angles": angles, "max_angle": float(angles.max()), "n_splits": n_splits, "half_rows": half_rows,
            "time": time.perf_counter() - t0}


def unit_angle_certificate(split: dict, refinement: dict, max_angle_error: float, n_total: int) -> dict:
    """The certificate ``unit_angles`` of the learner: every unit's estimated angle at most ``max_angle_error``.

    Parameters
    ----------
    split : dict
        :func:`split_half_angles` of the Step 1 estimate.
    refinement : dict
        The report of Step 2 (:func:`~nnrecover.learners.goel2019.step2.refine_units`), or ``{}``.
    max_angle_error : float
        The limit, in radians.
    n_total : int
        The number of samples (the ``samples_needed`` of a failure scales it).

    Returns
    -------
    dict
        ``unit_angles``, their ``source`` and ``max_angle_error``; ``reason`` (and ``samples_needed``)
        when the certificate fails.
    """
    angles = np.array(split["unit_angles"], dtype=float)
    source = ["split_half"] * angles.size
    # Step 2's held-out tan(alpha) estimates see the whole angle, the bias of Step 1's population
    # direction (Lemma 2) included, which split halves cannot: for a unit Step 2 replaced it is the
    # only estimate of the returned direction; for a Step 1 unit the larger of the two counts
    for unit in refinement.get("units", []):
        i = unit["unit"]
        if unit.get("kept") == "step2":
            angles[i], source[i] = unit["angle_estimate_end"], "step2_held_out"
        elif unit.get("angle_estimate_start", -np.inf) > angles[i]:
            angles[i], source[i] = unit["angle_estimate_start"], "step2_held_out"
    limit = float(max_angle_error)
    worst = int(np.argmax(angles))
    detail = {"unit_angles": angles, "source": source, "max_angle_error": limit}
    if "failed" in split:
        detail["reason"] = (f"{split['failed']}; the estimate cannot be checked, and is near the limit of what "
                            f"{n_total} samples support. Pass more samples")
    elif angles[worst] > limit:
        needed = n_total * (angles[worst] / limit) ** 2
        detail["samples_needed"] = int(math.ceil(needed))
        if source[worst] == "split_half":
            remedy = (f"the sampling error falls like N^-1/2, so about {needed:.2g} samples (now {n_total}) "
                      "would meet it")
        else:
            remedy = (f"that estimate also carries the bias of Step 1's population direction (Lemma 2, the "
                      f"products of P), which more samples do not remove: about {needed:.2g} samples (now "
                      f"{n_total}) would meet it if it is sampling error; else a higher threshold, or Step 2 "
                      "with more steps (refine_options max_iter)")
        detail["reason"] = (f"unit {worst}'s estimated angle is {angles[worst]:.3g} rad ({source[worst]}), "
                            f"above max_angle_error = {limit:g}; {remedy}")
    return detail


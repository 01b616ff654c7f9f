"""Chosen-query extraction of a one-hidden-layer ReLU network from critical points.

Method of Carlini, Jagielski and Mironov, "Cryptanalytic Extraction of Neural Network Models"
(CRYPTO 2020), specialised to one hidden layer, ``f(x) = A relu(W x + b) + c``.

Symbols (paper -> code):

* critical point ``x*`` of neuron ``j`` (``w_j . x* + b_j = 0``)  -> ``kink`` / ``x_star``
* the line ``x(s) = x0 + s v`` searched for critical points (their Section 4.2, "Finding critical
  points" by binary search) -> :func:`search_line`; on one hidden layer ``s -> f(x(s))`` is piecewise
  linear with one kink per hyperplane the line crosses, so a kink bracketed by two linear pieces is
  located *exactly* by intersecting them (their "piecewise linear interpolation" refinement);
* the weight recovery from the second differences at a critical point (their Section 4.3, "Recovering
  the weights up to sign"): the gradient of ``f`` jumps by ``A[:, j] w_j^T`` across the hyperplane,
  a rank-one ``(p, d)`` matrix -> :func:`gradient_jumps`;
* the sign of each row (their Section 4.4, "Recovering signs"; made polynomial by Canales-Martinez
  et al., EUROCRYPT 2024): on one hidden layer ``a relu(-z) = a relu(z) - a z``, so a unit with the
  wrong orientation is the right one plus a linear function. Fitting ``f = sum_j alpha_j relu(z_j) +
  U x + c`` and imposing that the true network has no linear part gives ``U = -sum_j t_j alpha_j
  w_j^T`` with binary ``t`` (1 = flip) -> :func:`resolve_signs`. Generic networks have exactly one
  solution; with ``k <= p d`` it is a least-squares solve, otherwise a low-density multidimensional
  subset sum, solved by lattice reduction (:mod:`._lattice`: LLL and BKZ, the equations weighted by
  their precision) or a HiGHS MILP (``scipy.optimize.milp``).

Precision. The gradient jump gives each hyperplane to about ``noise / h`` (finite differences);
:func:`refine_hyperplanes` then finds ``m > d`` further critical points of each hyperplane by short
searches along its normal and fits the hyperplane through them (total least squares). Those points are
exact intersections of linear pieces, so the rows come out to round-off of the black box. Output
weights come from one linear least-squares fit; the result is certified on fresh queries.

What cannot be recovered: a unit whose output column is zero has no kink; a unit whose hyperplane
lies beyond the searched radius is linear (or zero) on everything searched and is reported through
the search radius; two units with the same hyperplane are one kink (their output weights add up).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .._threads import blas_threads
from ..errors import AssumptionError, CertificateWarning
from .queries import NoiseModel, QueryOracle

__all__ = ["search_line", "gradient_jumps", "refine_hyperplanes", "fit_output_layer", "resolve_signs",
           "CriticalPointExtractor"]

#: multiple of the measured noise below which two values count as equal
_KAPPA = 64.0
#: finite-difference step for the gradient jump, as a fraction of the distance to the next kink
_H_FRACTION = 0.005
#: rows per model call (bounds the memory of a batch)
_MAX_BATCH = 1 << 15
#: the certificate accepts a relative error of at most this times ``sqrt(P)`` (``P`` parameters) times the
#: measured relative noise of the box (and at most 1000 times it): a network extracted from noisy
#: critical points carries their noise amplified by about ``sqrt(P)``. Measured on 1054 extractions
#: (d = 3-100, k = 2-20, float32 boxes and additive noise 1e-8 to 3e-5): complete ones reached at most
#: 3.2 sqrt(P) times the noise, while those that missed a unit with small output weights (0.01-0.3 of
#: the others) left 2.8-40 sqrt(P) and passed the former fixed 1000 times the noise (55 of 1000 fits)
CERTIFICATE_NOISE_FACTOR = 10.0


def _query(oracle: QueryOracle, X: np.ndarray) -> np.ndarray:
    """Query in batches of at most ``_MAX_BATCH`` rows (the budget check is per batch)."""
    if X.shape[0] <= _MAX_BATCH:
        return oracle(X)
    return np.concatenate([oracle(X[i:i + _MAX_BATCH]) for i in range(0, X.shape[0], _MAX_BATCH)])


# ---------------------------------------------------------------------------------------------- lines
@dataclass
class LineKinks:
    """Kinks found on one line ``x0 + s v``, ``s`` in ``[lo, hi]``.

    ``s`` (m,) kink positions; ``slope_left``/``slope_right`` (m, p) derivatives of ``f(x(s))`` on both
    sides; ``room_left``/``room_right`` (m,) length of the kink-free piece on each side; ``unresolved``
    number of intervals abandoned at the minimum width (several kinks closer than that).
    """

    x0: np.ndarray
    v: np.ndarray
    s: np.ndarray
    slope_left: np.ndarray
    slope_right: np.ndarray
    room_left: np.ndarray
    room_right: np.ndarray
    unresolved: int
    queries: int


def _covered(a: np.ndarray, b: np.ndarray, mids: np.ndarray) -> np.ndarray:
    """Whether each of ``mids`` lies in one of the disjoint intervals ``[a_i, b_i]`` (sorted by ``a``)."""
    if a.size == 0:
        return np.zeros(mids.shape, bool)
    i = np.searchsorted(a, mids, side="right") - 1
    ok = i >= 0
    out = np.zeros(mids.shape, bool)
    out[ok] = mids[ok] <= b[i[ok]]
    return out


def search_line(oracle: QueryOracle, x0: np.ndarray, v: np.ndarray, lo: float, hi: float,
                noise: NoiseModel, *, n_grid: int = 65, min_width: float | None = None,
                max_rounds: int = 200, output_range: tuple[float, float] | None = None) -> LineKinks:
    """Every kink of ``s -> f(x0 + s v)`` on ``[lo, hi]`` (Carlini et al. 2020, Section 4.2).

    A grid of ``n_grid`` points is queried; an interval is *linear* when it belongs to a collinear
    triple of consecutive points (up to the measured noise). An unresolved interval between two linear
    neighbours is tested for a single kink: the neighbours' lines are intersected at ``s*`` and
    ``f(s*)`` queried; if it lies on both lines the kink is ``s*`` (two or more kinks would put the
    middle piece off that intersection, a measure-zero coincidence otherwise). Any other unresolved
    interval is split at ``s*`` or its midpoint. All new points of a round go to the model in one call.

    With ``output_range`` (a box exact only while its outputs stay within it, such as a classifier's
    logits) the line is cut to the run of grid points around ``s = 0`` whose outputs stay within it,
    and searched on a new grid there: beyond, the box's round-off grows faster than the noise model
    allows and every interval would look like a kink.

    Returns
    -------
    LineKinks
    """
    v = np.asarray(v, float)
    x0 = np.asarray(x0, float)
    if min_width is None:
        min_width = 1e-11 * (hi - lo)
    start = oracle.n_queries
    S = np.linspace(lo, hi, n_grid)
    if output_range is None:
        F = _query(oracle, x0 + S[:, None] * v)
    else:
        F = oracle(x0 + S[:, None] * v, allow_nonfinite=True)
        good = np.all((F >= output_range[0]) & (F <= output_range[1]), axis=1)   # False for NaN and inf
        if not good.all():
            i0 = int(np.argmin(np.abs(S)))
            if not good[i0]:
                p = F.shape[1]
                return LineKinks(x0, v, np.empty(0), np.empty((0, p)), np.empty((0, p)), np.empty(0),
                                 np.empty(0), 0, oracle.n_queries - start)
            bad = np.flatnonzero(~good)
            left, right = bad[bad < i0], bad[bad > i0]
            lo = S[left[-1] + 1] if left.size else lo
            hi = S[right[0] - 1] if right.size else hi
            if not hi > lo:
                p = F.shape[1]
                return LineKinks(x0, v, np.empty(0), np.empty((0, p)), np.empty((0, p)), np.empty(0),
                                 np.empty(0), 0, oracle.n_queries - start)
            S = np.linspace(lo, hi, n_grid)
            F = _query(oracle, x0 + S[:, None] * v)
    kink = np.zeros(S.size, bool)
    lin_a = np.empty(0)
    lin_b = np.empty(0)
    dead_a = np.empty(0)
    dead_b = np.empty(0)
    x0v, x0n2 = float(x0 @ v), float(x0 @ x0)

    def tol_at(Sx, Fx):
        xn = np.sqrt(np.maximum(x0n2 + 2 * Sx * x0v + Sx * Sx, 0.0))
        return _KAPPA * noise.abs(xn, np.linalg.norm(Fx, axis=1))

    for _ in range(max_rounds):
        n = S.size
        mids = 0.5 * (S[:-1] + S[1:])
        lin = _covered(lin_a, lin_b, mids)
        dead = _covered(dead_a, dead_b, mids)
        tol = tol_at(S, F)
        if n >= 3:
            l, m, r = S[:-2], S[1:-1], S[2:]
            wgt = ((m - l) / (r - l))[:, None]
            dev = np.max(np.abs(F[1:-1] - (F[:-2] + wgt * (F[2:] - F[:-2]))), axis=1)
            col = (dev <= np.maximum(np.maximum(tol[:-2], tol[1:-1]), tol[2:])) & ~kink[1:-1]
            newly = col & ~(lin[:-1] & lin[1:])
            if np.any(newly):
                idx = np.flatnonzero(newly)
                # a collinear triple makes [l, r] linear; merge overlapping spans before storing
                spans = _merge_spans(S[idx], S[idx + 2])
                lin_a, lin_b = _merge_spans(np.concatenate([lin_a, spans[:, 0]]),
                                            np.concatenate([lin_b, spans[:, 1]])).T
                lin = _covered(lin_a, lin_b, mids)
        todo = ~lin & ~dead
        if not np.any(todo):
            break
        idx = np.flatnonzero(todo)
        width = S[idx + 1] - S[idx]
        too_small = width < min_width
        if np.any(too_small):
            dead_a = np.concatenate([dead_a, S[idx[too_small]]])
            dead_b = np.concatenate([dead_b, S[idx[too_small] + 1]])
            o = np.argsort(dead_a)
            dead_a, dead_b = dead_a[o], dead_b[o]
            idx = idx[~too_small]
            if idx.size == 0:
                continue
        # single-kink test where both neighbours are linear and not themselves ending at a kink
        i = idx
        cand = (i >= 1) & (i <= n - 3)
        ic = np.where(cand, i, 1)
        cand &= lin[np.clip(ic - 1, 0, n - 2)] & lin[np.clip(ic + 1, 0, n - 2)] & ~kink[ic] & ~kink[np.clip(ic + 1, 0, n - 1)]
        new_s = 0.5 * (S[i] + S[i + 1])
        is_test = np.zeros(i.size, bool)
        if np.any(cand):
            j = i[cand]
            mL = (F[j] - F[j - 1]) / (S[j] - S[j - 1])[:, None]
            mR = (F[j + 2] - F[j + 1]) / (S[j + 2] - S[j + 1])[:, None]
            alpha = F[j] - F[j + 1] - mL * S[j][:, None] + mR * S[j + 1][:, None]
            beta = mL - mR
            bb = np.sum(beta * beta, axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                s_star = -np.sum(alpha * beta, axis=1) / bb
            inside = (bb > 0) & np.isfinite(s_star) & (s_star > S[j]) & (s_star < S[j + 1])
            pos = np.flatnonzero(cand)
            new_s[pos[inside]] = s_star[inside]
            is_test[pos[inside]] = True
        Fn = _query(oracle, x0 + new_s[:, None] * v)
        new_kink = np.zeros(new_s.size, bool)
        if np.any(is_test):
            t = np.flatnonzero(is_test)
            j = i[t]
            mL = (F[j] - F[j - 1]) / (S[j] - S[j - 1])[:, None]
            pred = F[j] + mL * (new_s[t] - S[j])[:, None]
            ok = np.max(np.abs(Fn[t] - pred), axis=1) <= np.maximum(tol_at(new_s[t], Fn[t]),
                                                                    np.maximum(tol[j], tol[j + 1]))
            new_kink[t[ok]] = True
            if np.any(ok):
                jj = j[ok]
                spans = np.concatenate([np.stack([S[jj - 1], new_s[t[ok]]], 1),
                                        np.stack([new_s[t[ok]], S[jj + 2]], 1)])
                lin_a, lin_b = _merge_spans(np.concatenate([lin_a, spans[:, 0]]),
                                            np.concatenate([lin_b, spans[:, 1]]), touch=False).T
        S = np.concatenate([S, new_s])
        F = np.concatenate([F, Fn])
        kink = np.concatenate([kink, new_kink])
        order = np.argsort(S, kind="stable")
        S, F, kink = S[order], F[order], kink[order]
    else:
        mids = 0.5 * (S[:-1] + S[1:])
        unres = ~_covered(lin_a, lin_b, mids) & ~_covered(dead_a, dead_b, mids)
        dead_a = np.concatenate([dead_a, S[:-1][unres]])
        dead_b = np.concatenate([dead_b, S[1:][unres]])

    ks = np.flatnonzero(kink)
    # kink-free room on each side: up to the previous/next kink or abandoned interval or line end
    barriers = np.sort(np.concatenate([S[ks], dead_a, dead_b, [lo, hi]]))
    pos = S[ks]
    prev = barriers[np.searchsorted(barriers, pos, side="left") - 1]
    nxt = barriers[np.minimum(np.searchsorted(barriers, pos, side="right"), barriers.size - 1)]
    slope_l = (F[ks] - F[ks - 1]) / (S[ks] - S[ks - 1])[:, None]
    slope_r = (F[ks + 1] - F[ks]) / (S[ks + 1] - S[ks])[:, None]
    return LineKinks(x0, v, pos, slope_l, slope_r, pos - prev, nxt - pos, int(dead_a.size),
                     oracle.n_queries - start)


def _merge_spans(a: np.ndarray, b: np.ndarray, touch: bool = False) -> np.ndarray:
    """Union of intervals ``[a_i, b_i]`` as a sorted ``(m, 2)`` array of disjoint intervals.

    Overlapping intervals merge; intervals that only share an endpoint stay apart (a kink may sit
    there), unless ``touch``.
    """
    if a.size == 0:
        return np.empty((0, 2))
    o = np.argsort(a, kind="stable")
    a, b = a[o], b[o]
    out = []
    ca, cb = a[0], b[0]
    for x, y in zip(a[1:], b[1:]):
        if x < cb or (touch and x == cb):
            cb = max(cb, y)
        else:
            out.append((ca, cb))
            ca, cb = x, y
    out.append((ca, cb))
    return np.asarray(out)


# ------------------------------------------------------------------------------------ gradient jumps
def gradient_jumps(oracle: QueryOracle, x_star: np.ndarray, v: np.ndarray, room_left: np.ndarray,
                   room_right: np.ndarray, noise: NoiseModel, *, h_fraction: float = _H_FRACTION
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradient jump ``A[:, j] w_j^T`` at each critical point (Carlini et al. 2020, Section 4.3).

    On each side of ``x*`` (at half the kink-free room along the line) the gradient is read from
    forward differences along the ``d`` axes with step ``h = h_fraction * room``; a second step ``2 h``
    checks that the
    difference stayed on one linear piece (otherwise the point's jump is discarded). All rows of all
    points go to the model in one batch: ``2 (2 d + 1)`` rows per critical point.

    Parameters
    ----------
    x_star : (m, d)
    v : (m, d)
        Unit direction of the line through each point (the side "+" is along ``v``).
    room_left, room_right : (m,)

    Returns
    -------
    jumps : (m, p, d)
    error : (m,)
        Estimated error of each jump (Frobenius norm), from the measured noise.
    ok : (m,) bool
    """
    m, d = x_star.shape
    if m == 0:
        p = oracle.n_outputs or 1
        return np.empty((0, p, d)), np.empty(0), np.empty(0, bool)
    eps_l, eps_r = 0.5 * room_left, 0.5 * room_right
    h = h_fraction * np.minimum(eps_l, eps_r)
    eye = np.eye(d)
    blocks = []
    for sign, eps in ((-1.0, eps_l), (1.0, eps_r)):
        base = x_star + sign * eps[:, None] * v                        # (m, d)
        step1 = base[:, None, :] + h[:, None, None] * eye[None]        # (m, d, d)
        step2 = base[:, None, :] + 2 * h[:, None, None] * eye[None]
        blocks.append((base, step1, step2))
    rows = np.concatenate([np.concatenate([b[:, None, :], s1, s2], axis=1) for b, s1, s2 in blocks], axis=1)
    F = _query(oracle, rows.reshape(-1, d)).reshape(m, 2, 2 * d + 1, -1)
    ok = np.ones(m, bool)
    grads = []
    for side in range(2):
        f0 = F[:, side, 0, :]                      # (m, p)
        f1 = F[:, side, 1:d + 1, :]                # (m, d, p)
        f2 = F[:, side, d + 1:, :]
        scale = np.linalg.norm(f0, axis=1)
        xn = np.linalg.norm(blocks[side][0], axis=1)
        tol = _KAPPA * noise.abs(xn, scale)
        second = np.max(np.abs(f2 - 2 * f1 + f0[:, None, :]), axis=(1, 2))
        ok &= second <= 2 * tol
        grads.append(np.transpose((f1 - f0[:, None, :]) / h[:, None, None], (0, 2, 1)))  # (m, p, d)
    jumps = grads[1] - grads[0]
    xn = np.linalg.norm(x_star, axis=1)
    err = 2 * np.sqrt(d) * noise.abs(xn, 0.0) / h
    return jumps, err, ok


def _normal_from_jump(J: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rank-one factor ``J = alpha w^T`` with ``|w| = 1`` and ``w . v > 0``: returns ``(w, alpha)``."""
    U, s, Vt = np.linalg.svd(J, full_matrices=False)
    w = Vt[0]
    alpha = U[:, 0] * s[0]
    if w @ v < 0:
        w, alpha = -w, -alpha
    return w, alpha


# --------------------------------------------------------------------------- hyperplane refinement
@dataclass
class RefinedPlanes:
    """Result of :func:`refine_hyperplanes` for a batch of candidate units."""

    W: np.ndarray            # (u, d) unit normals
    b: np.ndarray            # (u,)
    alpha: np.ndarray        # (u, p) slope change along the normal (the output column, up to sign)
    accepted: np.ndarray     # (u,) bool
    n_points: np.ndarray     # (u,) critical points used in each fit
    residual: np.ndarray     # (u,) max distance of those points to the fitted hyperplane
    tilt: np.ndarray | None = None   # (u,) first-order error of the normal: residual / in-plane singular values


def _locate_along(oracle: QueryOracle, P: np.ndarray, N: np.ndarray, delta: np.ndarray,
                  noise: NoiseModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kink of ``s -> f(P_i + s N_i)`` in ``(-delta_i, delta_i)``, if exactly one is there.

    Queries ``s = +-delta, +-2 delta, +-3 delta`` (each side's three points must be collinear: one
    linear piece), intersects the two lines, and queries the intersection to confirm it lies on both:
    7 rows per point.

    Returns
    -------
    s : (m,) kink offsets; beta : (m, p) slope right minus left; ok : (m,) bool
    """
    m, d = P.shape
    offs = np.array([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0])
    X = P[:, None, :] + (offs[None, :, None] * delta[:, None, None]) * N[:, None, :]
    F = _query(oracle, X.reshape(-1, d)).reshape(m, 6, -1)
    xn = np.linalg.norm(P, axis=1) + 3 * delta
    tol = _KAPPA * noise.abs(xn, np.max(np.linalg.norm(F, axis=2), axis=1))
    colL = np.max(np.abs(F[:, 0] - 2 * F[:, 1] + F[:, 2]), axis=1) <= 2 * tol
    colR = np.max(np.abs(F[:, 3] - 2 * F[:, 4] + F[:, 5]), axis=1) <= 2 * tol
    mL = (F[:, 2] - F[:, 1]) / delta[:, None]
    mR = (F[:, 4] - F[:, 3]) / delta[:, None]
    # L(s) = F(-delta) + mL (s + delta), R(s) = F(delta) + mR (s - delta)
    alpha = F[:, 2] + mL * delta[:, None] - F[:, 3] + mR * delta[:, None]
    beta = mR - mL
    bb = np.sum(beta * beta, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.sum(alpha * beta, axis=1) / bb
    ok = colL & colR & (bb > 0) & np.isfinite(s) & (np.abs(s) < delta)
    s = np.where(ok, s, 0.0)
    Fs = _query(oracle, P + s[:, None] * N)
    pred = F[:, 2] + mL * (s + delta)[:, None]
    ok &= np.max(np.abs(Fs - pred), axis=1) <= 2 * tol
    return s, beta, ok


def _anchors_and_kinks(oracle, W, b, err, noise, rng, scale, m, centers, rho):
    """``m`` anchors per unit on its estimated hyperplane and the kink located along the normal at each."""
    u, d = W.shape
    if centers is None:
        G = scale * rng.standard_normal((u, m, d))
    else:
        G = centers[:, None, :] + (rho / math.sqrt(d)) * rng.standard_normal((u, m, d))
    z = np.einsum("umd,ud->um", G, W) + b[:, None]
    P = G - z[:, :, None] * W[:, None, :]
    pn = np.linalg.norm(P, axis=2)
    # a row error e tilts the plane by e: at distance r from a point located on it (x*, or the origin's
    # projection up to the bias error) the kink moves by about e r / sqrt(d) for a random direction of
    # the error (e r at worst); 4x the typical offset keeps most kinks inside the stencil, an anchor
    # whose kink falls outside is simply not used
    dist = pn if centers is None else np.linalg.norm(P - centers[:, None, :], axis=2)
    delta = np.clip(4 * err[:, None] * (1 + dist / math.sqrt(d)), 1e-4 * scale, 0.05 * scale)
    N = np.broadcast_to(W[:, None, :], P.shape)
    s, beta, ok = _locate_along(oracle, P.reshape(-1, d), N.reshape(-1, d), delta.ravel(), noise)
    s, beta, ok = s.reshape(u, m), beta.reshape(u, m, -1), ok.reshape(u, m)
    return P + s[:, :, None] * W[:, None, :], beta, ok, pn


def _refine_once(oracle: QueryOracle, W: np.ndarray, b: np.ndarray, err: np.ndarray, noise: NoiseModel,
                 rng: np.random.Generator, scale: float, m: int, centers: np.ndarray | None = None,
                 rho: float | None = None) -> RefinedPlanes:
    """One round of :func:`refine_hyperplanes`: anchors around ``centers`` (radius ``rho``) or global.

    Units with fewer than ``d + 8`` located points get up to two more batches of ``m`` anchors.
    """
    u, d = W.shape
    Q, beta, ok, pn = _anchors_and_kinks(oracle, W, b, err, noise, rng, scale, m, centers, rho)
    for _ in range(2):
        short = np.flatnonzero(ok.sum(axis=1) < d + 8)
        if short.size == 0:
            break
        c = None if centers is None else centers[short]
        Q2, beta2, ok2, pn2 = _anchors_and_kinks(oracle, W[short], b[short], err[short], noise, rng, scale,
                                                 m, c, rho)
        pad = lambda a, fill: np.concatenate([a, np.full((u, m) + a.shape[2:], fill, a.dtype)], axis=1)  # noqa: E731
        Q, beta, ok, pn = pad(Q, 0.0), pad(beta, 0.0), pad(ok, False), pad(pn, 0.0)
        Q[short, -m:], beta[short, -m:], ok[short, -m:], pn[short, -m:] = Q2, beta2, ok2, pn2
    W_new, b_new = W.copy(), b.copy()
    alpha = np.zeros((u, beta.shape[2]))
    accepted = np.zeros(u, bool)
    used = np.zeros(u, int)
    resid = np.full(u, np.inf)
    tilt = np.full(u, np.inf)
    with blas_threads(1):  # many small SVDs: threads only add contention
        _fit_planes(Q, W, beta, ok, pn, noise, d, W_new, b_new, alpha, accepted, used, resid, tilt)
    return RefinedPlanes(W_new, b_new, alpha, accepted, used, resid, tilt)


def refine_hyperplanes(oracle: QueryOracle, W: np.ndarray, b: np.ndarray, err: np.ndarray,
                       noise: NoiseModel, rng: np.random.Generator, *, scale: float,
                       centers: np.ndarray | None = None, n_points: int | None = None,
                       _retry: bool = True) -> RefinedPlanes:
    """Refit each candidate hyperplane through ``n_points`` of its own critical points.

    For candidate ``(w, b)``: anchors ``p = g - (w . g + b) w`` (``g`` Gaussian with std ``scale``) lie
    on the estimated hyperplane; the true critical point on the line ``p + s w`` is within the
    estimate's error, and :func:`_locate_along` finds it exactly (intersection of two linear pieces).
    Points whose slope change disagrees with the median (another unit's kink) are dropped; the
    hyperplane is the total-least-squares fit through the rest (smallest right singular vector of the
    centred points). A candidate is accepted when at least ``d + 2`` points survive and they are
    coplanar to the located precision; otherwise it was not a hyperplane of the model.

    When the candidate is coarse (``err`` large, e.g. read from a noisy float32 model) the global
    anchors would need wide stencils that other hyperplanes cross; a first round then uses anchors
    within about ``scale`` of ``centers`` (critical points located on the hyperplane), where the
    prediction error is small, and the global round starts from its fit when that is better.

    A coarse candidate (``err > 1e-3``) whose fit keeps too few points is fitted once more with ten
    times narrower stencils: its error estimate (a gradient jump's, or a first-order tilt) can be
    pessimistic, and stencils that wide are crossed by other kinks everywhere among many hyperplanes
    (d = 100, k = 200 float32: units lost with ``err = 0.02``, actual error 0.014), while narrow ones
    still catch the anchors where the actual error projects small.
    """
    u, d = W.shape
    p = oracle.n_outputs
    m = n_points or (d + max(8, d // 4))
    if u == 0:
        return RefinedPlanes(np.empty((0, d)), np.empty(0), np.empty((0, p)), np.empty(0, bool),
                             np.empty(0, int), np.empty(0))
    err = np.asarray(err, float).copy()
    W, b = W.copy(), b.copy()
    alive = np.ones(u, bool)
    if centers is not None:
        local = 4 * err * (1 + scale) > 1e-3 * scale
        if np.any(local):
            rho = scale
            idx = np.flatnonzero(local)
            first = _refine_once(oracle, W[idx], b[idx], err[idx], noise, rng, scale, m, centers[idx], rho)
            better = first.accepted & (first.tilt < err[idx])
            W[idx[better]], b[idx[better]] = first.W[better], first.b[better]
            # the fitted normal is off by about (residual singular value) / (smallest in-plane one)
            err[idx[better]] = 3 * first.tilt[better] + 1e3 * noise.rel
    out = RefinedPlanes(W.copy(), b.copy(), np.zeros((u, p)), np.zeros(u, bool), np.zeros(u, int), np.full(u, np.inf))
    idx = np.flatnonzero(alive)
    if idx.size:
        second = _refine_once(oracle, W[idx], b[idx], err[idx], noise, rng, scale, m)
        out.W[idx], out.b[idx], out.alpha[idx] = second.W, second.b, second.alpha
        out.accepted[idx], out.n_points[idx], out.residual[idx] = second.accepted, second.n_points, second.residual
        out.tilt = np.full(u, np.inf)
        out.tilt[idx] = second.tilt
    lost = np.flatnonzero(~out.accepted & (err > 1e-3)) if _retry else np.empty(0, int)
    if lost.size:
        again = refine_hyperplanes(oracle, W[lost], b[lost], err[lost] / 10, noise, rng, scale=scale,
                                   centers=None if centers is None else centers[lost], n_points=m,
                                   _retry=False)
        for name in ("W", "b", "alpha", "accepted", "n_points", "residual", "tilt"):
            getattr(out, name)[lost] = getattr(again, name)
    return out


def _fit_planes(Q, W, beta, ok, pn, noise, d, W_new, b_new, alpha, accepted, used, resid, tilt) -> None:
    """Robust total-least-squares plane through each unit's located critical points (in place)."""
    for j in range(W.shape[0]):
        keep = ok[j].copy()
        if keep.sum() < d + 2:
            continue
        med = np.median(beta[j][keep], axis=0)
        keep &= np.linalg.norm(beta[j] - med, axis=1) <= 0.05 * np.linalg.norm(med) + 1e-300
        loc = _KAPPA * noise.abs(pn[j], 0.0) / max(float(np.linalg.norm(med)), 1e-300) + 1e-14 * (1 + pn[j])
        for _ in range(8):
            # drop points off the plane (another unit's kink): beyond 5x the median residual and the
            # location precision; refit until no point is dropped
            if keep.sum() < d + 2:
                break
            pts = Q[j][keep]
            mu = pts.mean(axis=0)
            _, sv, Vt = np.linalg.svd(pts - mu, full_matrices=False)
            r = np.abs((Q[j] - mu) @ Vt[-1])
            new_keep = keep & (r <= np.maximum(5 * np.median(r[keep]), loc))
            if new_keep.sum() == keep.sum():
                break
            keep = new_keep
        if keep.sum() < d + 2:
            continue
        pts = Q[j][keep]
        mu = pts.mean(axis=0)
        if d == 1:
            # on a line the "hyperplane" is one point and its normal is +-1: the located kinks must
            # coincide to the location precision
            wj = np.sign(W[j]) if W[j, 0] != 0 else np.ones(1)
            bj = -float(wj @ mu)
            r = np.abs(pts @ wj + bj)
            coplanar = True
        else:
            _, sv, Vt = np.linalg.svd(pts - mu, full_matrices=False)
            wj = Vt[-1] if Vt[-1] @ W[j] >= 0 else -Vt[-1]
            bj = -float(wj @ mu)
            r = np.abs(pts @ wj + bj)
            # coplanar: the smallest singular value (the residual) is at the located precision and the
            # points span d - 1 directions well above it
            coplanar = bool(sv.size >= d and sv[d - 2] > 10 * sv[d - 1]
                            and sv[d - 1] <= 10 * math.sqrt(keep.sum()) * float(np.median(loc[keep])))
        if coplanar and np.all(r <= 1e3 * loc[keep]):
            W_new[j], b_new[j] = wj, bj
            alpha[j] = np.median(beta[j][keep], axis=0)
            accepted[j] = True
            used[j] = int(keep.sum())
            resid[j] = float(r.max())
            tilt[j] = 0.0 if d == 1 else float(sv[d - 1] / sv[d - 2])


# ----------------------------------------------------------------------------------- output layer
def _ls_rows(W: np.ndarray, b: np.ndarray, rng: np.random.Generator, scale: float, n_gauss: int) -> np.ndarray:
    """Gaussian rows plus, for every unit, one row on each side of its hyperplane near the data.

    The side rows make every unit active on some rows and inactive on others, so its ReLU column is
    never a linear combination of the linear columns (which would hide a rarely active unit).
    """
    k, d = W.shape
    G = scale * rng.standard_normal((n_gauss, d))
    if k == 0:
        return G
    A = scale * rng.standard_normal((k, d))
    A -= ((A @ W.T).diagonal() + b)[:, None] * W
    off = scale * rng.uniform(0.1, 1.0, (k, 1))
    return np.concatenate([G, A + off * W, A - off * W])


def fit_output_layer(oracle: QueryOracle, W: np.ndarray, b: np.ndarray, rng: np.random.Generator, *,
                     scale: float, linear: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Least-squares output weights ``f = alpha relu(W x + b) (+ U x) + c`` on fresh queries.

    Returns
    -------
    alpha : (p, k); U : (p, d) (zeros when ``linear`` is False); c : (p,); relative residual (float)
    """
    k, d = W.shape
    n_cols = k + (d if linear else 0) + 1
    X = _ls_rows(W, b, rng, scale, 2 * n_cols + 32)
    Y = _query(oracle, X)
    H = np.maximum(X @ W.T + b, 0.0)
    cols = [H] + ([X] if linear else []) + [np.ones((X.shape[0], 1))]
    D = np.concatenate(cols, axis=1)
    norms = np.linalg.norm(D, axis=0)
    norms[norms == 0] = 1.0
    with blas_threads(1):
        coef, *_ = np.linalg.lstsq(D / norms, Y, rcond=None)
    coef = coef / norms[:, None]
    resid = float(np.linalg.norm(D @ coef - Y) / max(np.linalg.norm(Y), 1e-300))
    alpha = coef[:k].T
    U = coef[k:k + d].T if linear else np.zeros((Y.shape[1], d))
    c = coef[-1]
    return alpha, U, c, resid


def _equation_scale(M: np.ndarray, rhs: np.ndarray, p: int) -> np.ndarray:
    """Size against which the residual of each orientation equation is measured.

    Equation ``(i, l)`` (output ``i``, input ``l``) reads ``U[i, l]``, fitted from output ``i`` on
    isotropic queries, so its absolute error has a part that is the same for every input ``l``: the
    round-off of output ``i``'s coefficients, not of this equation's own. Measured against its own
    coefficients alone, an equation of an input that no unit uses (a zero column of ``W``, or 1e-30 as
    an L2 penalty leaves it) compares round-off with round-off and fails for every ``t``; the scale is
    therefore the larger of its own coefficient sum and the mean one among the equations of the same
    output (equations at or above the mean keep their own, as the lattice weights them by it).
    """
    own = (np.abs(M).sum(axis=1) + np.abs(rhs)).reshape(p, -1)
    return (np.maximum(own, own.mean(axis=1, keepdims=True)) + 1e-300).ravel()


def resolve_signs(W: np.ndarray, alpha: np.ndarray, U: np.ndarray, *, rel_tol: float,
                  precision: float | None = None, time_limit: float = 120.0,
                  max_solves: int = 8) -> tuple[np.ndarray | None, dict]:
    """Orientation of every unit from the linear part (Carlini et al. 2020, Section 4.4).

    Solves ``U = -sum_j t_j alpha_j w_j^T`` (``p d`` equations) for ``t`` in ``{0, 1}^k``. When the
    ``k`` columns are linearly independent the least-squares solution is rounded (and must be within
    0.25 of 0/1); otherwise the 0/1 problem with equations met to ``rel_tol`` (relative to the
    equation's scale, :func:`_equation_scale`) is solved by lattice reduction (:mod:`._lattice`,
    low-density subset sum) and by HiGHS (``scipy.optimize.milp``; a solution whose residual exceeds ``rel_tol``
    is excluded by a no-good cut and the problem solved again, at most ``max_solves`` times), the
    lattice first when ``k > 2 p d``, all within ``time_limit`` seconds.

    The lattice weights the equations by their precision, not by the acceptance tolerance: every bit
    of precision given away raises the density of the subset sum (``k`` unknown bits against ``p d``
    equations of ``log2(1 / precision)`` bits each), and with it the chance that reduction misses the
    solution. ``precision`` (relative, like ``rel_tol``) is where the ladder of weights starts; each
    failed attempt loosens the weight tenfold up to ``rel_tol``.

    Returns
    -------
    t : (k,) int array or None when no solution was found; evidence dict
    """
    k, d = W.shape
    rhs = U.ravel()
    info: dict[str, Any] = {"equations": int(rhs.size), "unknowns": int(k)}
    if k == 0:
        return np.zeros(0, int), {**info, "method": "none"}
    M = -(alpha[:, :, None] * W[:, None, :]).reshape(k, -1).T        # (p d, k), alpha is (k, p)
    with blas_threads(1):
        sv = np.linalg.svd(M, compute_uv=False)
    full_rank = M.shape[0] >= k and sv[-1] > 1e-8 * sv[0]
    scale = _equation_scale(M, rhs, alpha.shape[1])
    if full_rank:
        t_real, *_ = np.linalg.lstsq(M, rhs, rcond=None)
        t = np.rint(t_real).astype(int)
        # a 0/1 vector must also satisfy the equations to the measured precision: a rounding that
        # is merely closest (e.g. t = -0.11 from a leaky-ReLU model, whose linear part is not made of
        # flipped units) would silently drop the linear part
        resid_t = float(np.max(np.abs(M @ t - rhs) / scale))
        ok = bool(np.all((t == 0) | (t == 1)) and np.max(np.abs(t_real - t)) < 0.25 and resid_t <= rel_tol)
        info.update(method="least squares", max_rounding=float(np.max(np.abs(t_real - t))),
                    max_relative_residual=resid_t)
        return (t if ok else None), info
    from ._lattice import binary_solution

    t0 = time.perf_counter()
    info.update(rel_tol=rel_tol, method="none found")
    weights = [rel_tol]
    if precision is not None and 0 < precision < rel_tol:
        n_steps = int(np.ceil(np.log10(rel_tol / precision)))
        weights = [min(precision * 10.0 ** i, rel_tol) for i in range(n_steps + 1)]
    # few unknowns per equation: HiGHS is fast; many (k > 2 m): the lattice is, and HiGHS may never end
    lattice_first = k > 2 * M.shape[0]
    order = ("lattice", "milp") if lattice_first else ("milp", "lattice")
    t = None
    for how in order:
        if how == "lattice":
            info["lattice_weights_tried"] = []
            for i, weight in enumerate(weights):
                left = time_limit - (time.perf_counter() - t0)
                if left <= 0:
                    break
                lattice_info: dict[str, Any] = {}
                # the last weights share what is left of the time; a tight weight fails fast or succeeds
                t = binary_solution(M, rhs, weight * scale, accept=rel_tol * scale,
                                    time_limit=left / (len(weights) - i), info=lattice_info)
                info["lattice_weights_tried"].append(float(weight))
                if "fplll_error" in lattice_info:
                    info["fplll_error"] = lattice_info["fplll_error"]
                if t is not None:
                    info.update(method=f"0/1 solve by lattice reduction ({lattice_info['reduction']})",
                                lattice_weight=float(weight))
                    break
            info["lattice_seconds"] = time.perf_counter() - t0
        else:
            left = time_limit - (time.perf_counter() - t0)
            if left > 0:
                t = _milp_binary(M, rhs, scale, rel_tol, left, max_solves, info)
                if t is not None:
                    info["method"] = "0/1 feasibility (HiGHS MILP)"
        if t is not None:
            info["max_relative_residual"] = float(np.max(np.abs(M @ t - rhs) / scale))
            break
    info["sign_seconds"] = time.perf_counter() - t0
    return t, info


def _milp_binary(M, rhs, scale, rel_tol, time_limit, max_solves, info) -> np.ndarray | None:
    """0/1 feasibility by HiGHS; a solution off by more than ``rel_tol`` gets a no-good cut and another solve."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    k = M.shape[1]
    t0 = time.perf_counter()
    A_rows, lo, hi = [M], [rhs - max(rel_tol, 1e-8) * scale], [rhs + max(rel_tol, 1e-8) * scale]
    info["milp_solves"] = 0
    t = None
    for _ in range(max_solves):
        left = time_limit - (time.perf_counter() - t0)
        if left <= 0:
            break
        res = milp(c=np.zeros(k), integrality=np.ones(k), bounds=Bounds(0, 1),
                   constraints=LinearConstraint(np.vstack(A_rows), np.concatenate(lo), np.concatenate(hi)),
                   options={"time_limit": left})
        info["milp_solves"] += 1
        info.update(milp_status=int(res.status), milp_message=str(res.message))
        if res.x is None:
            break
        cand = np.rint(res.x).astype(int)
        if float(np.max(np.abs(M @ cand - rhs) / scale)) <= rel_tol:
            t = cand
            break
        # HiGHS accepts constraint violations up to its own feasibility tolerance (1e-7); exclude this
        # near-solution and solve again
        A_rows.append(np.where(cand == 1, 1.0, -1.0)[None, :])
        lo.append(np.array([-np.inf]))
        hi.append(np.array([cand.sum() - 1.0]))
    info["milp_seconds"] = time.perf_counter() - t0
    return t


# ------------------------------------------------------------------------------------------ driver
@dataclass
class _Units:
    W: np.ndarray
    b: np.ndarray
    alpha: np.ndarray
    err: np.ndarray
    n_points: list = field(default_factory=list)
    residual: list = field(default_factory=list)
    seen: list = field(default_factory=list)


class CriticalPointExtractor:
    """State of one chosen-query extraction (the units found so far survive a budget error).

    Parameters are those of :func:`nnrecover.extraction.extract` that concern this method.
    """

    def __init__(self, oracle: QueryOracle, n_inputs: int, rng: np.random.Generator, *,
                 n_hidden: int | None, input_scale: float = 1.0, radius: float | None = None,
                 patience: int | None = None, max_lines: int = 200, n_certify: int = 2000,
                 milp_time_limit: float = 120.0, output_range: tuple[float, float] | None = None,
                 log: Callable[[str], None] | None = None):
        self.oracle = oracle
        self.d = int(n_inputs)
        self.rng = rng
        self.n_hidden = n_hidden
        self.scale = float(input_scale)
        self.radius = float(radius) if radius is not None else 4.0 * math.sqrt(self.d) * self.scale
        self.patience = None if patience is None else int(patience)
        self.max_lines = int(max_lines)
        self.n_certify = int(n_certify)
        self.milp_time_limit = float(milp_time_limit)
        self.output_range = output_range
        self.log = log or (lambda msg: None)
        self.noise: NoiseModel | None = None
        self.units: _Units | None = None
        self.diag: dict[str, Any] = {"method": "critical-points", "complete": False}
        self.lines: list[dict] = []
        self.stage = "calibration"

    # -------------------------------------------------------------- partial / final assembly
    def partial_network(self):
        """The units found so far, with the output weights read at their critical points (orientation
        not resolved); None before the first unit."""
        from ..network import TwoLayerNetwork

        if self.units is None or self.units.W.shape[0] == 0:
            return None
        p = self.oracle.n_outputs or 1
        return TwoLayerNetwork(self.units.W, self.units.b, self.units.alpha.T.reshape(p, -1), np.zeros(p))

    # -------------------------------------------------------------- stages
    def _calibrate(self):
        self.noise, evidence = self.oracle.calibrate(self.rng, self.scale)
        self.diag["noise"] = evidence
        if self.patience is None:
            self.patience = 4 if self.noise.rel <= 1e-12 else 10
        self.diag["patience"] = self.patience
        self.log(f"noise level {self.noise.rel:.2e} (relative)")

    def _add_units(self, W, b, alpha, err, n_points, residual):
        if self.units is None:
            p = alpha.shape[1]
            self.units = _Units(np.empty((0, self.d)), np.empty(0), np.empty((0, p)), np.empty(0))
        self.units.W = np.concatenate([self.units.W, W])
        self.units.b = np.concatenate([self.units.b, b])
        self.units.alpha = np.concatenate([self.units.alpha, alpha])
        self.units.err = np.concatenate([self.units.err, err])
        self.units.n_points += list(map(int, n_points))
        self.units.residual += list(map(float, residual))
        self.units.seen += [1] * len(b)

    def _position_tol(self, R: float) -> float:
        return R * max(1e-7, 1e4 * self.noise.rel)

    def _one_line(self, R: float) -> int:
        """Search one random line; returns the number of new units accepted."""
        d = self.d
        x0 = self.scale * self.rng.standard_normal(d)
        v = self.rng.standard_normal(d)
        v /= np.linalg.norm(v)
        n_known = 0 if self.units is None else self.units.W.shape[0]
        n_grid = max(65, 4 * n_known + 1)
        lk = search_line(self.oracle, x0, v, -R, R, self.noise, n_grid=n_grid,
                         output_range=self.output_range)
        m = lk.s.size
        matched = np.zeros(m, bool)
        if n_known and m:
            Wk, bk = self.units.W, self.units.b
            wv = Wk @ v
            with np.errstate(divide="ignore", invalid="ignore"):
                s_pred = -(Wk @ x0 + bk) / wv
            tol = self._position_tol(R)
            dist = np.abs(lk.s[:, None] - s_pred[None, :])
            nearest = np.argmin(dist, axis=1)
            matched = dist[np.arange(m), nearest] <= tol
            for j in nearest[matched]:
                self.units.seen[j] += 1
        rec = {"radius": R, "kinks": int(m), "matched": int(matched.sum()), "unresolved": lk.unresolved,
               "queries": lk.queries}
        new = 0
        idx = np.flatnonzero(~matched)
        if idx.size:
            x_star = x0 + lk.s[idx, None] * v
            vv = np.broadcast_to(v, x_star.shape)
            # a long step averages the noise of a float32 model; a step that crossed a hyperplane
            # (failed linearity check) is retried 20 times shorter
            big = 20 * _H_FRACTION if self.noise.rel > 1e-12 else _H_FRACTION
            J, err, ok = gradient_jumps(self.oracle, x_star, vv, lk.room_left[idx], lk.room_right[idx],
                                        self.noise, h_fraction=big)
            if big > _H_FRACTION and not np.all(ok):
                r = np.flatnonzero(~ok)
                J[r], err[r], ok[r] = gradient_jumps(self.oracle, x_star[r], vv[r], lk.room_left[idx][r],
                                                     lk.room_right[idx][r], self.noise)
            cand_W, cand_b, cand_a, cand_e, cand_x = [], [], [], [], []
            with blas_threads(1):
                normals = {int(q): _normal_from_jump(J[q], v) for q in np.flatnonzero(ok)}
            for q in np.flatnonzero(ok):
                w, alpha = normals[int(q)]
                na = float(np.linalg.norm(alpha))
                if not na > 0:
                    continue
                e = float(err[q] / na)
                if e > self._max_jump_error:
                    continue  # too close to other kinks to read the jump; another line will see it
                bq = -float(w @ x_star[q])
                # merge duplicates (up to sign) within this line's candidates
                dup = False
                for i2 in range(len(cand_W)):
                    dist = min(np.linalg.norm(w - cand_W[i2]) + abs(bq - cand_b[i2]),
                               np.linalg.norm(w + cand_W[i2]) + abs(bq + cand_b[i2]))
                    if dist <= 10 * (e + cand_e[i2]) + 1e-9:
                        dup = True
                        break
                if not dup:
                    cand_W.append(w), cand_b.append(bq), cand_a.append(alpha), cand_e.append(e)
                    cand_x.append(x_star[q])
            rec["jumps"] = int(idx.size)
            rec["jump_ok"] = int(ok.sum())
            if cand_W:
                ref = refine_hyperplanes(self.oracle, np.array(cand_W), np.array(cand_b),
                                         np.array(cand_e), self.noise, self.rng, scale=self.scale,
                                         centers=np.array(cand_x), n_points=self._plane_points())
                acc = ref.accepted.copy()
                # error of each refitted row (first order) and of the known ones: two rows within 10x
                # their combined errors are one unit seen twice (a kink the position matching missed)
                errs_all = 3 * np.where(np.isfinite(ref.tilt), ref.tilt, 0.0) + 1e3 * self.noise.rel + 1e-12
                if n_known:
                    for j in np.flatnonzero(acc):
                        dd = np.minimum(np.linalg.norm(self.units.W - ref.W[j], axis=1)
                                        + np.abs(self.units.b - ref.b[j]),
                                        np.linalg.norm(self.units.W + ref.W[j], axis=1)
                                        + np.abs(self.units.b + ref.b[j]))
                        if np.any(dd <= 10 * (self.units.err + errs_all[j])):
                            acc[j] = False
                # and two accepted candidates may coincide with each other
                keep = []
                for j in np.flatnonzero(acc):
                    same = [i for i in keep if min(np.linalg.norm(ref.W[i] - ref.W[j]) + abs(ref.b[i] - ref.b[j]),
                                                   np.linalg.norm(ref.W[i] + ref.W[j]) + abs(ref.b[i] + ref.b[j]))
                            <= 10 * (errs_all[i] + errs_all[j])]
                    if not same:
                        keep.append(j)
                keep = np.asarray(keep, int)
                rec["candidates"] = len(cand_W)
                rec["rejected"] = int((~ref.accepted).sum())
                if keep.size:
                    self._add_units(ref.W[keep], ref.b[keep], ref.alpha[keep], errs_all[keep], ref.n_points[keep],
                                    ref.residual[keep])
                    new = int(keep.size)
        rec["new_units"] = new
        self.lines.append(rec)
        return new

    def _search(self):
        quiet = 0
        i = 0
        while i < self.max_lines:
            R = self.radius * (4.0 if i % 3 == 2 else 1.0)
            new = self._one_line(R)
            i += 1
            k_now = 0 if self.units is None else self.units.W.shape[0]
            self.log(f"line {i}: {self.lines[-1]['kinks']} kinks, {new} new units, {k_now} in all")
            if self.n_hidden is not None:
                if k_now >= self.n_hidden:
                    break
            quiet = 0 if new else quiet + 1
            if quiet >= self.patience:
                break
        self.diag["lines"] = self.lines

    @property
    def _max_jump_error(self) -> float:
        """Largest relative error of a gradient-jump normal that is still refined.

        A float64 box reads most jumps far below 0.05, and a worse one is a kink too close to others,
        better seen on another line. A noisy box reads the jump of a weak unit (small output weight)
        among dense kinks only coarsely on every line (d = 100, k = 200 float32, |a| = 0.5: two
        readable jumps in 30 lines, both off by 0.06-0.1): skipping them lost the unit, while the
        local refit and its narrower retry (:func:`refine_hyperplanes`) turn them into exact rows.
        """
        return 0.25 if self.noise.rel > 1e-12 else 0.05

    def _plane_points(self) -> int:
        """Critical points located per hyperplane refit.

        The total-least-squares normal through ``m`` points spread over ``d - 1`` in-plane directions
        is off by about ``delta sqrt(d) / (sqrt(m) - sqrt(d))`` for a location error ``delta`` (the
        smallest singular value of an ``m x d`` Gaussian matrix is ``sqrt(m) - sqrt(d)``): ``m = 1.25 d``
        costs a factor of about 9, ``m = 4 d`` a factor of 1. A float64 box locates points to round-off,
        so its rows are at ~1e-14 either way and the fewer queries win; a noisier box (float32) needs
        the factor (at d = 100, k = 50: rows within 1e-4 rad with 1.25 d points, 5e-6 with 4 d).
        """
        d = self.d
        return d + max(8, d // 4) if self.noise.rel <= 1e-12 else 4 * d

    def _polish(self, rounds: int = 2) -> None:
        """Refit every known hyperplane again, from its current estimate (noisy boxes only).

        A unit enters with the error of its first refit, whose stencils were placed from a coarse
        gradient jump; among many hyperplanes (d = 100, k = 200 float32: 10% of the rows off by more
        than 1.7e-4 rad) other kinks crossed them and few points survived. Placed from the refitted
        row the stencils are narrower, so fewer points are lost. A refit replaces a row only when its
        first-order error (``tilt``) is smaller than the row's own.
        """
        if self.units is None or self.noise.rel <= 1e-12:
            return
        info = {"rounds": 0, "replaced": 0}
        for _ in range(rounds):
            u = self.units
            ref = refine_hyperplanes(self.oracle, u.W, u.b, u.err, self.noise, self.rng, scale=self.scale,
                                     n_points=self._plane_points())
            err_new = 3 * np.where(np.isfinite(ref.tilt), ref.tilt, np.inf) + 1e3 * self.noise.rel + 1e-12
            # the refit may return a row of either orientation: keep the known one
            sgn = np.where(np.sum(ref.W * u.W, axis=1) < 0, -1.0, 1.0)
            better = ref.accepted & (err_new < u.err)
            u.W[better] = sgn[better, None] * ref.W[better]
            u.b[better] = sgn[better] * ref.b[better]
            u.err[better] = err_new[better]
            info["rounds"] += 1
            info["replaced"] += int(better.sum())
            if not better.any():
                break
        self.diag["polish"] = info

    def run(self):
        """Run every stage; returns ``(network, diagnostics)``."""
        from ..network import TwoLayerNetwork

        t0 = time.perf_counter()
        self._calibrate()
        self.stage = "search"
        self._search()
        self.stage = "polish"
        self._polish()
        d = self.d
        k = 0 if self.units is None else self.units.W.shape[0]
        if k == 0:
            seen = sum(rec["kinks"] for rec in self.lines)
            raise AssumptionError(
                f"no hidden unit found: {len(self.lines)} searched lines showed {seen} kink(s) and none lay "
                "on a hyperplane; the model is affine (or constant) on the searched region, or it is not a "
                "one-hidden-layer ReLU network (smooth or other activations); enlarge input_scale/radius "
                "or use method='moments'.")
        W = self.units.W if k else np.empty((0, d))
        b = self.units.b if k else np.empty(0)
        self.stage = "output layer"
        alpha, U, c, resid_lin = fit_output_layer(self.oracle, W, b, self.rng, scale=self.scale, linear=True)
        self.stage = "signs"
        rel_tol = 1e-11 + 1e4 * self.noise.rel
        # measured on float64 and float32 boxes, the true orientation leaves a residual of 4-40 times
        # the box's noise: weights from 100x the noise keep most of the equations' bits
        t, sign_info = resolve_signs(W, alpha.T, U, rel_tol=rel_tol, precision=100 * self.noise.rel,
                                     time_limit=self.milp_time_limit)
        linear_units = 0
        stopped_at_width = self.n_hidden is not None and k >= self.n_hidden
        if t is None:
            if stopped_at_width:
                why = (f"n_hidden={self.n_hidden} stopped the search at {k} units, and the linear part is not a "
                       "sum of flipped units among them: the model most likely has more hidden units (give a "
                       "larger n_hidden or 'auto')")
            elif sign_info.get("method") == "least squares":
                why = (f"the least-squares solution is not 0/1 (relative residual "
                       f"{sign_info.get('max_relative_residual', float('nan')):.3g}): the model's linear part "
                       "is not a sum of flipped units (units missed, or not a ReLU network)")
            else:
                why = "no 0/1 solution of the linear-part equations was found in time"
            warnings.warn(f"the orientation of the hidden units could not be resolved ({why}); the linear part "
                          "is represented by extra unit pairs relu(e.x) - relu(-e.x), flagged in "
                          "diagnostics['linear_units'].", CertificateWarning, stacklevel=3)
            Ul, sl, Vl = np.linalg.svd(U, full_matrices=False)
            r = int(np.sum(sl > 1e-12 * max(sl.max(initial=0), 1e-300)))
            W = np.concatenate([W, Vl[:r], -Vl[:r]])
            b = np.concatenate([b, np.zeros(2 * r)])
            linear_units = 2 * r
        else:
            flip = t.astype(bool)
            W = np.where(flip[:, None], -W, W)
            b = np.where(flip, -b, b)
        # final output layer without a linear part: the canonical network
        alpha2, _, c2, resid = fit_output_layer(self.oracle, W, b, self.rng, scale=self.scale, linear=False)
        net = TwoLayerNetwork(W, b, alpha2, c2).canonical()
        self.stage = "certificate"
        cert = self.certify(net)
        if not cert["passed"]:
            if stopped_at_width:
                cause = (f"n_hidden={self.n_hidden} stopped the search at {k} units, so the model most likely "
                         "has more hidden units: give a larger n_hidden (--hidden) or 'auto'")
            else:
                cause = ("the model is probably not a one-hidden-layer ReLU network (e.g. leaky-ReLU or another "
                         "activation), or units were missed")
            warnings.warn(f"extraction certificate failed: relative error {cert['relative_error']:.3g} on "
                          f"{cert['queries']} fresh queries exceeds the tolerance {cert['tolerance']:.3g}; "
                          f"{cause} (see diagnostics['certificate']).", CertificateWarning, stacklevel=3)
        seconds = time.perf_counter() - t0
        widths = {"n_hidden": int(net.n_hidden) - linear_units, "method": "distinct hyperplanes",
                  "lines_searched": len(self.lines),
                  "lines_since_last_new_unit": _quiet_tail(self.lines),
                  "critical_points_per_unit": [] if self.units is None else list(self.units.seen),
                  "search_radius": self.radius, "long_line_radius": 4 * self.radius}
        self.diag.update({
            "complete": True, "n_hidden": widths["n_hidden"], "width": widths,
            "hyperplane_fit": {"points_per_unit": [] if self.units is None else self.units.n_points,
                               "max_residual": float(max(self.units.residual)) if k else 0.0},
            "output_fit_relative_residual": resid, "linear_fit_relative_residual": resid_lin,
            "signs": sign_info, "linear_units": linear_units, "certificate": cert,
            "seconds": seconds,
            "unidentifiable": ("units with a zero output column, and units whose hyperplane does not "
                               f"cross the searched lines (|x| up to about {4 * self.radius:.3g}; a random "
                               "line through the origin of that length crosses a hyperplane at distance r "
                               f"only when aimed within arccos(r / {4 * self.radius:.3g}) of its normal, so "
                               "units far outside the input scale are found by chance if at all), leave "
                               "no critical point and cannot be recovered; the certificate checks the "
                               "function on Gaussian queries of the input scale, where such units are "
                               "inactive; two units sharing a hyperplane appear as one"),
        })
        if self.n_hidden is not None and widths["n_hidden"] < self.n_hidden:
            self.diag["unidentifiable_units"] = int(self.n_hidden - widths["n_hidden"])
            warnings.warn(f"n_hidden={self.n_hidden} was given but only {widths['n_hidden']} hidden units "
                          "left critical points on the searched lines; the missing units are unidentifiable "
                          "from the queried region (see diagnostics['unidentifiable']).", CertificateWarning,
                          stacklevel=3)
        return net, self.diag

    def certify(self, net) -> dict:
        """Compare ``net`` with the black box on fresh Gaussian queries (std ``input_scale``)."""
        X = self.scale * self.rng.standard_normal((self.n_certify, self.d))
        Y = _query(self.oracle, X)
        G = net.predict(X).reshape(Y.shape)
        diff = np.linalg.norm(G - Y, axis=1)
        rel = float(np.linalg.norm(diff) / max(np.linalg.norm(Y), 1e-300))
        size = self.noise.abs(np.linalg.norm(X, axis=1), np.linalg.norm(Y, axis=1))
        ratio = float(np.max(diff / size))
        n_params = net.n_hidden * (self.d + 1) + net.n_outputs * (net.n_hidden + 1)
        tol = max(min(CERTIFICATE_NOISE_FACTOR * math.sqrt(n_params), 1e3) * self.noise.rel, 1e-10)
        return {"queries": int(self.n_certify), "relative_error": rel, "max_abs_error": float(diff.max()),
                "max_error_over_noise": ratio, "tolerance": tol, "passed": bool(rel <= tol)}


def _quiet_tail(lines: list[dict]) -> int:
    n = 0
    for rec in reversed(lines):
        if rec.get("new_units", 0):
            break
        n += 1
    return n

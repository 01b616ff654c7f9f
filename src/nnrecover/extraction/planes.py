"""Hyperplanes of the hidden units refitted through their own critical points.

Carlini, Jagielski and Mironov (CRYPTO 2020) read each row ``w_j`` from the gradient jump at one
critical point (Section 4.3; :func:`nnrecover.extraction.lines.gradient_jumps`), which gives it only
to about ``noise / h``. Here a candidate ``(w, b)`` is refined instead from ``m > d`` further critical
points ``x*`` of the same hyperplane ``w . x* + b = 0`` (paper -> code: ``x*`` -> ``Q``, the slope
change across the hyperplane along its normal ``A[:, j]`` (up to sign) -> ``beta`` / ``alpha``):
:func:`refine_hyperplanes` places anchors on the estimated hyperplane, locates the kink along its
normal near each (an exact intersection of two linear pieces), clusters the located points by their
slope change (points of another unit's kink are dropped) and fits the hyperplane through the rest by
total least squares. Candidates that are not coplanar to the located precision were not hyperplanes
of the model and are rejected, so noise never creates units.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

from .._threads import blas_threads
from .queries import KAPPA, NoiseModel, QueryOracle, query_generated

__all__ = ["RefinedPlanes", "refine_hyperplanes"]


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


#: anchors (points on an estimated hyperplane) generated at a time: a refit of ``u`` units through ``m``
#: points each keeps ``O(MAX_BATCH d)`` numbers in memory, not the ``u m d`` of all its anchors and the
#: ``6 u m d`` of their stencils (2.2 GB measured for 24 units at ``d = 784``, 270 MB now; the first line
#: of a 784-128-1 network brings about a hundred)
CHUNK_POINTS = 2048


class _Anchors:
    """The anchors ``p = g - (w . g + b) w`` of one round, ``m`` per unit, never all in memory.

    ``g`` is ``scale * N(0, I)`` (or ``centers + rho / sqrt(d) * N(0, I)``), drawn from ``rng``
    exactly as ``rng.standard_normal((u, m, d))`` would draw it (the same numbers, and ``rng`` left in
    the same state), in chunks of units whose generator states are kept, so that any chunk is drawn
    again, to the bit, when its anchors are needed. Kept whole: the offsets ``z = w . g + b``, the
    norms ``|p|`` and the distances to the centres, ``(u, m)`` each.
    """

    def __init__(self, rng: np.random.Generator, W: np.ndarray, b: np.ndarray, m: int, scale: float,
                 centers: np.ndarray | None, rho: float | None):
        u, d = W.shape
        self.W, self.m, self.d, self.scale, self.centers, self.rho = W, m, d, scale, centers, rho
        self.step = max(1, CHUNK_POINTS // m)                     # units per chunk
        self.states = []
        z, pn, dist = [], [], []
        for a in range(0, u, self.step):
            e = min(a + self.step, u)
            self.states.append(copy.deepcopy(rng))
            G = self._draw(rng, a, e)
            z.append(np.einsum("umd,ud->um", G, W[a:e]) + b[a:e, None])
            P = G - z[-1][:, :, None] * W[a:e, None, :]
            pn.append(np.linalg.norm(P, axis=2))
            dist.append(pn[-1] if centers is None else np.linalg.norm(P - centers[a:e, None, :], axis=2))
        self.z = np.concatenate(z) if z else np.empty((0, m))
        self.pn = np.concatenate(pn) if pn else np.empty((0, m))
        self.dist = np.concatenate(dist) if dist else np.empty((0, m))
        self._cached: tuple[int, np.ndarray] | None = None

    def _draw(self, gen: np.random.Generator, a: int, e: int) -> np.ndarray:
        # in place, the same bits as scale * normals and centers + (rho / sqrt(d)) * normals
        G = gen.standard_normal((e - a, self.m, self.d))
        if self.centers is None:
            return np.multiply(G, self.scale, out=G)
        np.multiply(G, self.rho / math.sqrt(self.d), out=G)
        return np.add(G, self.centers[a:e, None, :], out=G)

    def _chunk(self, c: int) -> np.ndarray:
        """The anchors of chunk ``c``, ``(units, m, d)`` (the last chunk is kept for the next call)."""
        if self._cached is not None and self._cached[0] == c:
            return self._cached[1]
        a = c * self.step
        e = min(a + self.step, self.W.shape[0])
        self._cached = None
        P = self._draw(copy.deepcopy(self.states[c]), a, e)
        np.subtract(P, self.z[a:e, :, None] * self.W[a:e, None, :], out=P)      # g - z w
        self._cached = (c, P)
        return P

    def units(self, a: int, e: int) -> np.ndarray:
        """The anchors of units ``a, ..., e - 1``, ``(e - a, m, d)``."""
        c0, c1 = a // self.step, (e - 1) // self.step
        parts = [self._chunk(c) for c in range(c0, c1 + 1)]
        P = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return P[a - c0 * self.step:e - c0 * self.step]

    def pieces(self, i: int, j: int):
        """Anchors ``i, ..., j - 1`` (unit-major) one chunk at a time: ``(offset from i, anchors (n, d),
        their unit's normal (n, d))``."""
        per = self.step * self.m
        k = i
        while k < j:
            c = k // per
            e = min(j, (c + 1) * per)
            yield k - i, self._chunk(c).reshape(-1, self.d)[k - c * per:e - c * per], self.W[np.arange(k, e) // self.m]
            k = e


def _locate_along(oracle: QueryOracle, anchors: _Anchors, delta: np.ndarray,
                  noise: NoiseModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kink of ``s -> f(P_i + s N_i)`` in ``(-delta_i, delta_i)``, if exactly one is there.

    ``P_i`` are the anchors (unit-major), ``N_i`` their unit's normal, ``delta`` flat. Queries ``s =
    +-delta, +-2 delta, +-3 delta`` (each side's three points must be collinear: one linear piece),
    intersects the two lines, and queries the intersection to confirm it lies on both: 7 rows per
    point, generated batch by batch (:func:`~nnrecover.extraction.queries.query_generated`).

    Returns
    -------
    s : (m,) kink offsets; beta : (m, p) slope right minus left; ok : (m,) bool
    """
    m = delta.size
    offs = np.array([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0])
    od = offs[None, :] * delta[:, None]

    def stencil(i, j):
        X = np.empty((j - i, 6, anchors.d))
        for k, P, N in anchors.pieces(i, j):
            part = X[k:k + P.shape[0]]
            np.multiply(od[i + k:i + k + P.shape[0], :, None], N[:, None, :], out=part)
            np.add(part, P[:, None, :], out=part)                 # P + od N, to the bit
        return X

    def crossing(i, j):
        X = np.empty((j - i, anchors.d))
        for k, P, N in anchors.pieces(i, j):
            part = X[k:k + P.shape[0]]
            np.multiply(s[i + k:i + k + P.shape[0], None], N, out=part)
            np.add(part, P, out=part)                             # P + s N, to the bit
        return X

    F = query_generated(oracle, m, 6, stencil).reshape(m, 6, -1)
    xn = anchors.pn.ravel() + 3 * delta
    tol = KAPPA * noise.abs(xn, np.max(np.linalg.norm(F, axis=2), axis=1))
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
    Fs = query_generated(oracle, m, 1, crossing)
    pred = F[:, 2] + mL * (s + delta)[:, None]
    ok &= np.max(np.abs(Fs - pred), axis=1) <= 2 * tol
    return s, beta, ok


def _anchors_and_kinks(oracle, W, b, err, noise, rng, scale, m, centers, rho):
    """``m`` anchors per unit on its estimated hyperplane and the kink located along the normal at each.

    Returns the anchors (:class:`_Anchors`), the kink offsets ``s`` along the normal, the slope
    changes, which were located, and the anchors' norms: the located point is ``P + s w``.
    """
    u, d = W.shape
    anchors = _Anchors(rng, W, b, m, scale, centers, rho)
    # a row error e tilts the plane by e: at distance r from a point located on it (x*, or the origin's
    # projection up to the bias error) the kink moves by about e r / sqrt(d) for a random direction of
    # the error (e r at worst); 4x the typical offset keeps most kinks inside the stencil, an anchor
    # whose kink falls outside is simply not used
    delta = np.clip(4 * err[:, None] * (1 + anchors.dist / math.sqrt(d)), 1e-4 * scale, 0.05 * scale)
    s, beta, ok = _locate_along(oracle, anchors, delta.ravel(), noise)
    return anchors, s.reshape(u, m), beta.reshape(u, m, -1), ok.reshape(u, m), anchors.pn


def _located(rounds: list, W: np.ndarray, m: int, a: int, e: int, width: int) -> np.ndarray:
    """The located critical points of units ``a, ..., e - 1``, ``(e - a, width, d)``: round ``r``'s
    ``m`` points in columns ``r m`` to ``(r + 1) m``, zeros for a unit that round did not cover."""
    Q = np.zeros((e - a, width, W.shape[1]))
    for r, (units, anchors, s) in enumerate(rounds):
        lo, hi = np.searchsorted(units, [a, e])
        if lo < hi:
            Q[units[lo:hi] - a, r * m:(r + 1) * m] = (anchors.units(lo, hi)
                                                      + s[lo:hi, :, None] * W[units[lo:hi], None, :])
    return Q


def _refine_once(oracle: QueryOracle, W: np.ndarray, b: np.ndarray, err: np.ndarray, noise: NoiseModel,
                 rng: np.random.Generator, scale: float, m: int, centers: np.ndarray | None = None,
                 rho: float | None = None) -> RefinedPlanes:
    """One round of :func:`refine_hyperplanes`: anchors around ``centers`` (radius ``rho``) or global.

    Units with fewer than ``d + 8`` located points get up to two more batches of ``m`` anchors. The
    located points are formed, and the planes fitted, ``CHUNK_POINTS`` points at a time.
    """
    u, d = W.shape
    anchors, s, beta, ok, pn = _anchors_and_kinks(oracle, W, b, err, noise, rng, scale, m, centers, rho)
    rounds = [(np.arange(u), anchors, s)]
    for _ in range(2):
        short = np.flatnonzero(ok.sum(axis=1) < d + 8)
        if short.size == 0:
            break
        c = None if centers is None else centers[short]
        anchors2, s2, beta2, ok2, pn2 = _anchors_and_kinks(oracle, W[short], b[short], err[short], noise, rng,
                                                           scale, m, c, rho)
        pad = lambda a, fill: np.concatenate([a, np.full((u, m) + a.shape[2:], fill, a.dtype)], axis=1)  # noqa: E731
        beta, ok, pn = pad(beta, 0.0), pad(ok, False), pad(pn, 0.0)
        beta[short, -m:], ok[short, -m:], pn[short, -m:] = beta2, ok2, pn2
        rounds.append((short, anchors2, s2))
    W_new, b_new = W.copy(), b.copy()
    alpha = np.zeros((u, beta.shape[2]))
    accepted = np.zeros(u, bool)
    used = np.zeros(u, int)
    resid = np.full(u, np.inf)
    tilt = np.full(u, np.inf)
    width = beta.shape[1]
    step = max(1, CHUNK_POINTS // width)
    with blas_threads(1):  # many small SVDs: threads only add contention
        for a in range(0, u, step):
            e = min(a + step, u)
            Q = _located(rounds, W, m, a, e, width)
            _fit_planes(Q, W[a:e], beta[a:e], ok[a:e], pn[a:e], noise, d, W_new[a:e], b_new[a:e], alpha[a:e],
                        accepted[a:e], used[a:e], resid[a:e], tilt[a:e])
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
        loc = KAPPA * noise.abs(pn[j], 0.0) / max(float(np.linalg.norm(med)), 1e-300) + 1e-14 * (1 + pn[j])
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

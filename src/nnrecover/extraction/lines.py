"""Critical points on lines and the gradient jump at each (Carlini et al. 2020, Sections 4.2-4.3).

Carlini, Jagielski and Mironov, "Cryptanalytic Extraction of Neural Network Models" (CRYPTO 2020),
for one hidden layer ``f(x) = A relu(W x + b) + c``. Symbols (paper -> code):

* critical point ``x*`` of neuron ``j`` (``w_j . x* + b_j = 0``) -> ``kink`` / ``x_star``;
* the line ``x(s) = x0 + s v`` searched for critical points (Section 4.2, "Finding critical points"
  by binary search) -> :func:`search_line`. On one hidden layer ``s -> f(x(s))`` is piecewise linear
  with one kink per hyperplane the line crosses, so a kink bracketed by two linear pieces is located
  *exactly* by intersecting them (the paper's "piecewise linear interpolation" refinement);
* the weight recovery from the second differences at a critical point (Section 4.3, "Recovering the
  weights up to sign"): the gradient of ``f`` jumps by ``A[:, j] w_j^T`` across the hyperplane, a
  rank-one ``(p, d)`` matrix -> :func:`gradient_jumps`, factored by :func:`normal_from_jump` into the
  row ``w_j`` (unit norm) and the output column ``A[:, j]`` (up to sign).

The gradient jump gives each hyperplane only to about ``noise / h`` (finite differences); the rows are
made exact from further critical points by :mod:`nnrecover.extraction.planes`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .queries import KAPPA, NoiseModel, QueryOracle, query_batched, query_generated

__all__ = ["LineKinks", "search_line", "gradient_jumps", "normal_from_jump", "H_FRACTION"]

#: finite-difference step for the gradient jump, as a fraction of the distance to the next kink
H_FRACTION = 0.005


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
        F = query_batched(oracle, x0 + S[:, None] * v)
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
            F = query_batched(oracle, x0 + S[:, None] * v)
    kink = np.zeros(S.size, bool)
    lin_a = np.empty(0)
    lin_b = np.empty(0)
    dead_a = np.empty(0)
    dead_b = np.empty(0)
    x0v, x0n2 = float(x0 @ v), float(x0 @ x0)

    def tol_at(Sx, Fx):
        xn = np.sqrt(np.maximum(x0n2 + 2 * Sx * x0v + Sx * Sx, 0.0))
        return KAPPA * noise.abs(xn, np.linalg.norm(Fx, axis=1))

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
        Fn = query_batched(oracle, x0 + new_s[:, None] * v)
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


def gradient_jumps(oracle: QueryOracle, x_star: np.ndarray, v: np.ndarray, room_left: np.ndarray,
                   room_right: np.ndarray, noise: NoiseModel, *, h_fraction: float = H_FRACTION
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradient jump ``A[:, j] w_j^T`` at each critical point (Carlini et al. 2020, Section 4.3).

    On each side of ``x*`` (at half the kink-free room along the line) the gradient is read from
    forward differences along the ``d`` axes with step ``h = h_fraction * room``; a second step ``2 h``
    checks that the difference stayed on one linear piece (otherwise the point's jump is discarded):
    ``2 (2 d + 1)`` rows per critical point. The rows are generated batch by batch
    (:func:`~nnrecover.extraction.queries.query_generated`: the batches of ``MAX_BATCH`` rows that
    one call of :func:`~nnrecover.extraction.queries.query_batched` on all of them would send), so the
    memory is ``O(MAX_BATCH d + m p d)``, not the ``4 m d^2`` numbers of all the rows and as many in each
    of their temporaries (9-10 GB for ``d = 784`` and the first line's hundred critical points).

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
    bases = [x_star + sign * eps[:, None] * v for sign, eps in ((-1.0, eps_l), (1.0, eps_r))]   # (m, d) each
    steps = (h, 2 * h)
    eye = np.eye(d)

    def rows(i, j):
        # point q, side s: base, base + h e_1, ..., base + h e_d, base + 2h e_1, ..., base + 2h e_d;
        # written in place (h e_l + base is base + h e_l to the bit: addition commutes)
        out = np.empty((j - i, 2, 2 * d + 1, d))
        for side, base in enumerate(bases):
            out[:, side, 0] = base[i:j]
            for n, step in enumerate(steps):
                block = out[:, side, 1 + n * d:1 + (n + 1) * d]
                np.multiply(step[i:j, None, None], eye, out=block)
                np.add(block, base[i:j, None, :], out=block)
        return out

    F = query_generated(oracle, m, 2 * (2 * d + 1), rows).reshape(m, 2, 2 * d + 1, -1)
    ok = np.ones(m, bool)
    grads = []
    for side in range(2):
        f0 = F[:, side, 0, :]                      # (m, p)
        f1 = F[:, side, 1:d + 1, :]                # (m, d, p)
        f2 = F[:, side, d + 1:, :]
        scale = np.linalg.norm(f0, axis=1)
        xn = np.linalg.norm(bases[side], axis=1)
        tol = KAPPA * noise.abs(xn, scale)
        second = np.max(np.abs(f2 - 2 * f1 + f0[:, None, :]), axis=(1, 2))
        ok &= second <= 2 * tol
        grads.append(np.transpose((f1 - f0[:, None, :]) / h[:, None, None], (0, 2, 1)))  # (m, p, d)
    jumps = grads[1] - grads[0]
    xn = np.linalg.norm(x_star, axis=1)
    err = 2 * np.sqrt(d) * noise.abs(xn, 0.0) / h
    return jumps, err, ok


def normal_from_jump(J: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rank-one factor ``J = alpha w^T`` with ``|w| = 1`` and ``w . v > 0``: returns ``(w, alpha)``."""
    U, s, Vt = np.linalg.svd(J, full_matrices=False)
    w = Vt[0]
    alpha = U[:, 0] * s[0]
    if w @ v < 0:
        w, alpha = -w, -alpha
    return w, alpha

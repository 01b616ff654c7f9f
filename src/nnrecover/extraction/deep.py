"""Extraction of a ReLU network of any depth from chosen queries, layer by layer.

``f(x) = A relu(W_L ... relu(W_1 x + b_1) ... + b_L) + c`` is recovered from a black box in the
manner of Carlini, Jagielski and Mironov, "Cryptanalytic Extraction of Neural Network Models"
(CRYPTO 2020, Sections 4-6): critical points on lines, the weights of one layer at a time from
critical points of its neurons, signs, then the next layer. The steps and their names in the papers:

1. **Critical points** (CJM Section 4.2): kinks of ``s -> f(x0 + s v)`` on random lines, located
   exactly (:func:`~nnrecover.extraction.lines.search_line`); the local normal of the boundary at each
   from the gradient jump (Section 4.3, :func:`~nnrecover.extraction.lines.gradient_jumps`).
2. **Signatures** of layer ``l`` (CJM Section 5, "recovering the weights of deeper layers"): a neuron of
   layer ``l`` is a hyperplane in the features ``phi = [relu(zeta_{l-1}), h_{l-2}]`` of the known
   layers (:mod:`~nnrecover.extraction.stack`). Its boundary in input space is bent at the boundaries
   of the known neurons; :meth:`DeepExtractor._trace` walks along it from one critical point, crossing
   one known boundary at a time. At a crossing of known neuron ``m`` the local affine form of the
   target changes by ``c zeta_m`` (one scalar), read from one critical point just beyond: the
   coefficients of layer ``l - 1`` are these ``c``. This replaces CJM's clustering of partial
   signatures, and it works in expansive layers too (wider than the input), where a single critical
   point gives only a partial signature.
3. **Precision improvement** (CJM Section 6): critical points located exactly at the zeros that the
   estimate predicts on random lines (:meth:`DeepExtractor._anchor_fit`); the neuron is the null
   vector of their features (total least squares). A candidate whose points are not coplanar in
   feature space to the located precision was a neuron of a deeper layer and is set aside.
4. **Signs** (CJM Section 4.4; polynomial in Canales-Martinez et al., EUROCRYPT 2024): the skip
   coefficients ``u_s`` of the next layer (or of the output layer) are ``-sum_j t_j u_j w_j`` over the
   flipped neurons ``t``: linear equations in ``t`` in {0, 1}, solved by
   :func:`~nnrecover.extraction.signs.resolve_signs`. When they fail and the layer is at most ``d``
   wide, the signs are read from the support of the box's gradient
   (:meth:`DeepExtractor._orient_by_gradients`). At the output, a linear part that no sign vector
   explains (neurons active on all of the region, common in trained networks) is carried by
   always-active neurons (:meth:`~nnrecover.extraction.last_layer.LastLayerFinishing._linear_neurons`),
   exact on the region.
5. **Depth**: after each layer the output layer is fitted by least squares on the features; when it
   explains the box to its noise the network is complete, otherwise the kinks not yet explained
   belong to a deeper layer.

The output-layer fit and the finishing of the last hidden layer (its signs, the joint refinement of
the last two layers, the simplification and the certificate) are in
:mod:`~nnrecover.extraction.last_layer`, a base class of :class:`DeepExtractor`; this module finds the
layers.

Paper -> code: the critical point ``x*`` -> ``kink["x"]``; the signature of a neuron (its weights up to
a scalar) -> a row ``u`` of the layer's ``U``; the sign vector -> ``t``.

What cannot be recovered: a neuron whose effect on the output is zero wherever its boundary is crossed
(dead downstream, or never crossed by the searched lines) leaves no critical point; it does not change
the function on the searched region and is reported per layer as unidentifiable.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, Callable

import numpy as np

from .._threads import blas_threads
from ..errors import AssumptionError, CertificateWarning
from .lines import gradient_jumps, normal_from_jump, search_line
from .last_layer import LastLayerFinishing, hyperplane_through
from .queries import KAPPA, MAX_BATCH, NoiseModel, QueryOracle, query_batched
from .signs import resolve_signs
from .stack import KnownLayers

__all__ = ["DeepExtractor", "MAX_DEPTH"]

#: hidden layers searched with ``depth="auto"`` before giving up
MAX_DEPTH = 8
#: lines of the extension round started where the output fit is worst (see DeepExtractor._search_line)
_RESIDUAL_STARTS = 6
#: fraction of its predicted zeros at which a candidate found by a walk that left neurons uncrossed must
#: show a critical point (DeepExtractor._anchor_fit)
_MIN_CONFIRMED = 0.3
#: fraction of its predicted zeros at which a neuron merged from partial fits that share few critical
#: points must show one (DeepExtractor._confirmed)
_MERGE_CONFIRMED = 0.7
#: fraction of one neuron's critical points on another's boundary from which the two are tested as one
#: (the union of their points on one hyperplane, DeepExtractor._union_fit), and the fraction of the union
#: that must lie on the union's fit
_NEAR_SHARE, _UNION_SHARE = 0.05, 0.9
#: anchors of the first, cheap batch that must show a critical point for a candidate to be pursued
_FIRST_BATCH = 8


def _locate_kinks(oracle: QueryOracle, P: np.ndarray, N: np.ndarray, delta: np.ndarray,
                  noise: NoiseModel) -> tuple[np.ndarray, np.ndarray]:
    """Offsets ``s`` of the kink of ``s -> f(P_i + s N_i)`` in ``(-delta_i, delta_i)`` and whether one is there.

    The kink is the intersection of the two lines through ``f`` at ``s = -3, -2, -1`` and ``1, 2, 3``
    times ``delta`` (each triple collinear: one linear piece), confirmed by a query there (7 rows per
    point, as :mod:`~nnrecover.extraction.planes` locates kinks). Two lines that coincide (a segment
    linear throughout) intersect anywhere: a kink is kept only when the slope changes by far more than
    the slopes' own round-off, ``noise / delta`` (``100 KAPPA`` times; a lower floor helps float32 boxes
    and breaks a float64 one: docs/design.md, "Deep extraction"). Points go to the box in chunks
    (bounded memory).
    """
    m, d = P.shape
    s_all = np.zeros(m)
    ok_all = np.zeros(m, bool)
    offs = np.array([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0])
    step = max(1, MAX_BATCH // 7)
    for a in range(0, m, step):
        Pc, Nc, dc = P[a:a + step], N[a:a + step], delta[a:a + step]
        X = Pc[:, None, :] + (offs[None, :, None] * dc[:, None, None]) * Nc[:, None, :]
        F = query_batched(oracle, X.reshape(-1, d)).reshape(Pc.shape[0], 6, -1)
        xn = np.linalg.norm(Pc, axis=1) + 3 * dc
        tol = KAPPA * noise.abs(xn, np.max(np.linalg.norm(F, axis=2), axis=1))
        col_l = np.max(np.abs(F[:, 0] - 2 * F[:, 1] + F[:, 2]), axis=1) <= 2 * tol
        col_r = np.max(np.abs(F[:, 3] - 2 * F[:, 4] + F[:, 5]), axis=1) <= 2 * tol
        mL = (F[:, 2] - F[:, 1]) / dc[:, None]
        mR = (F[:, 4] - F[:, 3]) / dc[:, None]
        alpha = F[:, 2] + mL * dc[:, None] - F[:, 3] + mR * dc[:, None]
        beta = mR - mL
        bb = np.sum(beta * beta, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.sum(alpha * beta, axis=1) / bb
        floor = 100 * KAPPA * noise.abs(np.linalg.norm(Pc, axis=1), 0.0) / dc
        ok = col_l & col_r & (bb > 0) & np.isfinite(s) & (np.abs(s) < dc) & (np.sqrt(bb) > floor)
        s = np.where(ok, s, 0.0)
        Fs = query_batched(oracle, Pc + s[:, None] * Nc)
        pred = F[:, 2] + mL * (s + dc)[:, None]
        ok &= np.max(np.abs(Fs - pred), axis=1) <= 2 * tol
        s_all[a:a + step], ok_all[a:a + step] = s, ok
    return s_all, ok_all


class DeepExtractor(LastLayerFinishing):
    """State of one layer-by-layer extraction (the layers found so far survive a budget error).

    Parameters
    ----------
    oracle : QueryOracle
    n_inputs : int
    rng : numpy.random.Generator
    depth : int or None
        Number of hidden layers, or None to find it.
    widths : sequence of int or None
        Hidden widths, when known: each layer's search stops once that many neurons are found.
    input_scale, radius, patience, n_certify, sign_time_limit, output_range, log
        As in :func:`nnrecover.extraction.extract`.
    noise : NoiseModel, optional
        The box's measured noise (measured here when not given).
    """

    def __init__(self, oracle: QueryOracle, n_inputs: int, rng: np.random.Generator, *, depth: int | None = None,
                 widths=None, input_scale: float = 1.0, radius: float | None = None, patience: int | None = None,
                 n_certify: int = 2000, sign_time_limit: float = 120.0,
                 output_range: tuple[float, float] | None = None, noise: NoiseModel | None = None,
                 log: Callable[[str], None] | None = None, on_layer: Callable[[int], None] | None = None):
        self.oracle = oracle
        self.d = int(n_inputs)
        self.rng = rng
        self.depth = depth
        self.widths = None if widths is None else [int(w) for w in widths]
        self.scale = float(input_scale)
        self.radius = float(radius) if radius is not None else 4.0 * math.sqrt(self.d) * self.scale
        self.patience = patience
        self.n_certify = int(n_certify)
        self.sign_time_limit = float(sign_time_limit)
        self.output_range = output_range
        self.noise = noise
        self.log = log or (lambda msg: None)
        self.on_layer = on_layer or (lambda layer: None)
        self.known = KnownLayers(self.d)
        self.kinks: list[dict] = []
        self.lines = 0
        self.stage = "calibration"
        self.layer_info: list[dict] = []
        self.diag: dict[str, Any] = {"method": "critical-points", "route": "layer by layer", "complete": False}
        # per layer: the located critical points of each neuron (for the refits after the signs)
        self._points: list[list[np.ndarray]] = []
        self._current = None
        self.max_uncrossed = 0
        self._line_starts: list[np.ndarray] = []

    # ------------------------------------------------------------------ critical points on lines
    def _search_line(self) -> list[dict]:
        """One random line: its kinks, with the local normal of the boundary at each readable one.

        The line runs through a Gaussian point, or through one of the points where the output fit of
        :meth:`_explains_box` left the largest residual (``self._line_starts``): a neuron active on a
        small part of the region (0.1% in measured boxes) is rarely crossed by random lines, and it is
        active exactly where the neurons found so far do not explain the box.
        """
        d = self.d
        x0 = self.scale * self.rng.standard_normal(d)
        if self._line_starts:
            x0 = self._line_starts.pop()
        v = self.rng.standard_normal(d)
        v /= np.linalg.norm(v)
        R = self.radius * (2.0 if self.lines % 3 == 2 else 1.0)
        n_known = sum(self.known.widths) + len(self._layer_found)
        lk = search_line(self.oracle, x0, v, -R, R, self.noise, n_grid=max(65, 4 * n_known + 1),
                         output_range=self.output_range)
        self.lines += 1
        new = []
        for i, s in enumerate(lk.s):
            new.append({"x": x0 + s * v, "v": v, "line": self.lines, "R": R, "room": (lk.room_left[i], lk.room_right[i]),
                        "normal": None, "status": "open"})
        self.kinks += new
        return new

    def _read_normals(self, kinks: list[dict]) -> None:
        """Local normal of the boundary at each kink from its gradient jump (CJM Section 4.3)."""
        waiting = [k for k in kinks if k["normal"] is None and k["status"] == "open"]
        if not waiting:
            return
        X = np.array([k["x"] for k in waiting])
        V = np.array([k["v"] for k in waiting])
        rl = np.array([k["room"][0] for k in waiting])
        rr = np.array([k["room"][1] for k in waiting])
        h = 20 * 0.005 if not self._float64 else 0.005
        J, err, ok = gradient_jumps(self.oracle, X, V, rl, rr, self.noise, h_fraction=h)
        for q, k in enumerate(waiting):
            if not ok[q]:
                k["status"] = "unreadable"
                continue
            with blas_threads(1):
                w, alpha = normal_from_jump(J[q], k["v"])
            if not np.linalg.norm(alpha) > 0:
                k["status"] = "unreadable"
                continue
            k["normal"] = w

    def _explained(self, kink: dict) -> bool:
        """Whether a known neuron (or one found in the current layer) has its boundary at this kink.

        The pre-activation of each known neuron is evaluated just before and after the kink along its
        line (no query): a sign change within the position tolerance explains it.
        """
        ds = kink["R"] * max(1e-7, 1e4 * self.noise.rel)
        X = np.stack([kink["x"] - ds * kink["v"], kink["x"] + ds * kink["v"]])
        Z = self.known.preactivations(X)
        for z in Z:
            if np.any(np.sign(z[0]) != np.sign(z[1])):
                return True
        U, beta = self._current_rows()
        if U is not None:
            zc = self.known.target_values(X, U, beta)
            if np.any(np.sign(zc[0]) != np.sign(zc[1])):
                return True
        return False

    # ------------------------------------------------------------------ one neuron of the next layer
    def _max_uncrossed(self, width: int) -> int:
        """Neurons of the last known layer a walk may leave uncrossed and still give a signature."""
        return self.max_uncrossed

    def _local_plane(self, x0: np.ndarray, n0: np.ndarray) -> tuple[np.ndarray, float] | None:
        """The boundary through ``x0`` fitted exactly inside the linear region of the known layers at ``x0``.

        The gradient jump gives the normal only to about ``noise / h``; a walk from it would carry that
        error into every crossing. Critical points located along ``n0`` at in-plane offsets smaller than
        the distance to every known boundary lie on one hyperplane; their total-least-squares fit is
        exact to the location precision.
        """
        d = self.d
        G, e, zeta, _, _, _ = self.known.local(x0)
        Gp = G - np.outer(G @ n0, n0)
        with np.errstate(divide="ignore", invalid="ignore"):
            room = np.abs(zeta) / np.linalg.norm(Gp, axis=1)
        room = np.where(np.isfinite(room), room, np.inf)
        rho = min(0.5 * float(room.min()), self.scale)
        m = d + max(8, d // 4)
        R = self.rng.standard_normal((m, d))
        R -= np.outer(R @ n0, n0)
        R *= (rho * self.rng.uniform(0.2, 1.0, m) / np.linalg.norm(R, axis=1))[:, None]
        P = x0 + R
        # the kinks are off the gradient jump's plane by its error times the offset: about 1e-8 of it
        # from a float64 box, 1e-3 to 1e-2 from a float32 one
        delta = np.full(m, max((1e-3 if self._float64 else 0.05) * rho, 1e-9 * self.scale))
        s, ok = _locate_kinks(self.oracle, P, np.broadcast_to(n0, P.shape), delta, self.noise)
        pts = P[ok] + s[ok, None] * n0
        if pts.shape[0] < d + 2:
            return None
        mu = pts.mean(axis=0)
        with blas_threads(1):
            _, sv, Vt = np.linalg.svd(pts - mu, full_matrices=False)
        n = Vt[-1] if Vt[-1] @ n0 >= 0 else -Vt[-1]
        if not sv[-1] <= self._tls_tol() * sv[0]:
            return None
        return n, -float(n @ mu)

    def _trace(self, x0: np.ndarray, n0: np.ndarray) -> tuple[np.ndarray, float, dict] | None:
        """Signature of the neuron whose boundary passes through ``x0`` with normal ``n0``.

        Walks along the boundary, crossing the boundaries of the known neurons; returns ``(u, beta,
        info)`` with ``z = phi . u + beta`` in the scale of ``n0``, or None when the walk cannot cross
        every neuron of the last known layer (the target is not visible beyond).
        """
        K = self.known
        n = n0.copy()
        beta = -float(n0 @ x0)
        info = {"crossings": 0, "failed": 0, "queries": self.oracle.n_queries}
        if K.depth == 0:
            info["points"] = x0[None, :]
            return n, beta, info
        plane = self._local_plane(x0, n0)
        if plane is None:
            self._trace_info = {**info, "reasons": {"local plane": 1}}
            return None
        n, beta = plane
        last = K.depth - 1
        width = K.widths[-1]
        x = x0.copy()
        coef = np.full(width, np.nan)
        regions = []
        # the starting kink is not among them: the line found it, and it may sit where another neuron's
        # boundary is as close as the line's resolution; the walk's points are each confirmed twice
        located = []
        tries = np.zeros(width, int)
        # every crossing of any known neuron is a step, and deeper layers have more of them in the way
        max_steps = 8 * sum(K.widths) + 40
        offset = sum(K.widths[:-1])
        reasons: dict[str, int] = {}
        fails = [0]
        resyncs = 0

        def why(r):
            reasons[r] = reasons.get(r, 0) + 1
            fails[0] += 1
        new_region = True
        for _ in range(max_steps):
            failed = sum(reasons.values())
            if failed >= 8 and failed > 2 * info["crossings"]:
                # the boundary bends where no known neuron does: a neuron of a deeper layer
                why("abandoned")
                break
            if fails[0] >= 2 and resyncs < 2 * width:
                # failures in a row: the local form may have drifted (each crossing's error is carried
                # into the next region); refit it exactly here, keeping the trace's scale
                plane = self._local_plane(x, n / np.linalg.norm(n))
                resyncs += 1
                fails[0] = 0
                if plane is not None:
                    size = float(np.linalg.norm(n))
                    n, beta = plane[0] * size, plane[1] * size
                    new_region = True
            G, e, zeta, layer_of, P, q = K.local(x)
            if new_region:
                # a point of the region, not its (features x d) map: a walk visits hundreds of regions
                regions.append((x.copy(), n.copy(), beta))
                new_region = False
            waiting = np.flatnonzero(np.isnan(coef) & (tries < 6))
            if waiting.size == 0:
                break
            nn = n / np.linalg.norm(n)
            Gp = G - np.outer(G @ nn, nn)
            gpn = np.linalg.norm(Gp, axis=1)
            idx = offset + waiting
            with np.errstate(divide="ignore", invalid="ignore"):
                dist = np.abs(zeta[idx]) / gpn[idx]
            dist = np.where(np.isfinite(dist), dist, np.inf)
            pick = int(np.argmin(dist + 1e9 * tries[waiting]))
            j = int(waiting[pick])
            if not np.isfinite(dist[pick]) or dist[pick] > 50 * self.radius:
                # the local form of a bent boundary extrapolates badly: from another region it may be near
                why("far")
                tries[j] += 1
                continue
            t = -np.sign(zeta[offset + j]) * Gp[offset + j] / gpn[offset + j]
            if tries[j]:
                # a retry leaves from another point of the boundary: a random in-plane direction first
                r = self.rng.standard_normal(self.d)
                r -= (r @ nn) * nn
                t = t + 0.5 * r / np.linalg.norm(r)
                t -= (t @ nn) * nn
                t /= np.linalg.norm(t)
            rate = G @ t
            with np.errstate(divide="ignore", invalid="ignore"):
                tau = -zeta / rate
            tau = np.where((tau > 0) & np.isfinite(tau), tau, np.inf)
            order = np.argsort(tau)
            m = int(order[0])
            tau1 = float(tau[m])
            if not np.isfinite(tau1):
                why("no crossing")
                tries[j] += 1
                continue
            tau2 = float(tau[order[1]]) if tau.size > 1 else np.inf
            # search beyond the crossing along the old normal made orthogonal to the crossed neuron's
            # gradient: the crossed neuron stays constant on that line (it is not crossed back), and the
            # target's kink is at s = -c zeta_m(y) / (n . nd), finite for any c
            gm = G[m]
            gh = gm / max(float(np.linalg.norm(gm)), 1e-300)
            nd = nn - (nn @ gh) * gh
            if not np.linalg.norm(nd) > 1e-6:
                why("parallel")
                tries[j] += 1
                continue
            nd /= np.linalg.norm(nd)
            beyond = self._beyond(x + tau1 * t, t, tau2 - tau1, m, nd)
            if isinstance(beyond, str):
                why(beyond)
                info["failed"] += beyond == "no kink"
                tries[j] += 1
                continue
            xp, z2m = beyond
            zm = float(gm @ xp + e[m])
            if zm == 0 or np.sign(zm) != np.sign(z2m):
                why("wrong side")
                tries[j] += 1
                continue
            c = -(float(n @ xp) + beta) / zm
            n = n + c * gm
            beta = beta + c * float(e[m])
            x = xp
            located.append(xp)
            new_region = True
            fails[0] = 0
            info["crossings"] += 1
            if layer_of[m] == last:
                jj = m - offset
                # z changes by u_j zeta_j when the feature relu(zeta_j) switches on, by -u_j zeta_j off
                coef[jj] = c if zm > 0 else -c
        info["queries"] = self.oracle.n_queries - info["queries"]
        info["uncrossed"] = int(np.isnan(coef).sum())
        info["resyncs"] = resyncs
        info["reasons"] = reasons
        self._trace_info = info
        if np.isnan(coef).sum() > self._max_uncrossed(width):
            return None
        if K.depth >= 2 and np.isnan(coef).any():
            # the features that kept one state along the walk (the neurons left uncrossed, and those of the
            # layer before that stayed on or off): their coefficients are not seen, so the signature is
            # exact only where they are in that state, and the anchors are placed there (_locate)
            on = K.features(np.concatenate([x0[None], np.array(located).reshape(-1, self.d)])) > 0
            fixed = np.flatnonzero(on.all(axis=0) | ~on.any(axis=0))
            info["pattern"] = (fixed, on[0, fixed], np.array(located).reshape(-1, self.d))
        # a neuron whose boundary the walk never took across the target's is given coefficient 0: when
        # the two boundaries do not meet, the target's zero set cannot tell relu(zeta_j) from its linear
        # part, and the refit after the signs (without skip features) determines it
        coef = np.nan_to_num(coef)
        # skip coefficients and bias from the regions visited: n_r = P_r^T u, beta_r = q_r . u + b
        n_prev = K.n_features - width
        pick = regions[:: max(1, len(regions) // 12)][:12]
        rows, rhs = [], []
        for xr, nr, br in pick:
            *_, P, q = K.local(xr)
            A = np.concatenate([P.T, np.zeros((self.d, 1))], axis=1)
            a = np.concatenate([q, [1.0]])
            rows.append(np.concatenate([A, a[None]]))
            rhs.append(np.concatenate([nr, [br]]))
        M = np.concatenate(rows)
        y_ = np.concatenate(rhs)
        y_ = y_ - M[:, :width] @ coef
        Ms = M[:, width:]
        norms = np.linalg.norm(Ms, axis=0)
        norms[norms == 0] = 1.0
        with blas_threads(1):
            sol, *_ = np.linalg.lstsq(Ms / norms, y_, rcond=None)
        sol = sol / norms
        u = np.concatenate([coef, sol[:n_prev]])
        info["points"] = np.array(located).reshape(-1, self.d)
        return u, float(sol[-1]), info

    def _room(self, y: np.ndarray, nd: np.ndarray, m: int) -> tuple[float, float]:
        """``zeta_m(y)`` and the distance from ``y`` along ``+-nd`` to the nearest boundary of a known neuron
        other than ``m`` (from the local forms at ``y``, no query)."""
        G2, _, z2, _, _, _ = self.known.local(y)
        with np.errstate(divide="ignore", invalid="ignore"):
            room = np.abs(z2 / (G2 @ nd))
        room[m] = np.inf
        room = np.where(np.isfinite(room), room, np.inf)
        return float(z2[m]), float(room.min())

    def _beyond(self, q_pt: np.ndarray, t: np.ndarray, gap: float, m: int, nd: np.ndarray
                ) -> "tuple[np.ndarray, float] | str":
        """The target's critical point beyond the crossing ``q_pt`` of known neuron ``m``, or why not.

        The target's boundary beyond is a hyperplane through the crossing's ``(d - 2)``-flat: on the line
        ``q_pt + rho t + s nd`` its kink is at ``s`` proportional to ``rho``. It is searched at a distance
        ``rho`` past the crossing and confirmed at ``rho / 2`` (which tells it from another neuron's kink
        on the same segment). The kink lies beyond the window when the region beyond is thin along
        ``nd`` or the target's new boundary is nearly parallel to ``m``'s; a smaller distance brings it
        closer, so a second search is made 16 times closer in (a third and a fourth cost more queries on
        the walks that fail than they save: docs/design.md, "Deep extraction"). Returns
        ``(x, zeta_m(x))`` with ``x`` on the target's boundary, or the reason.
        """
        tight = self._float64
        rho_far = min(0.5 * gap, self.scale)
        if not rho_far > 1e-9 * self.scale:
            return "rho"
        rho = rho_far
        reason = "no kink"
        found = None
        for _ in range(2):
            y = q_pt + rho * t
            zm, room = self._room(y, nd, m)
            half = min(0.9 * room, 0.5 * self.scale, 50 * rho)
            if not half > 0:
                reason = "room"
            else:
                lk = search_line(self.oracle, y, nd, -half, half, self.noise, n_grid=9)
                if lk.s.size:
                    cand = lk.s[np.argsort(np.abs(lk.s))][:3]
                    P2 = q_pt + 0.5 * rho * t + 0.5 * cand[:, None] * nd
                    dl = np.maximum((1e-3 if tight else 3e-2) * (np.abs(cand) + rho), 1e-9 * self.scale)
                    s2, ok2 = _locate_kinks(self.oracle, P2, np.broadcast_to(nd, P2.shape), dl, self.noise)
                    off = np.where(ok2, np.abs(s2) / (np.abs(cand) + rho), np.inf)
                    best = int(np.argmin(off))
                    # the target's kink is where predicted to the round-off (its boundary is a hyperplane
                    # there); another neuron's kink in the window is off by a fraction of the window
                    if off[best] <= (1e-5 if tight else 1e-2):
                        found = (rho, float(cand[best]), zm)
                        break
                    reason = "unconfirmed"
                else:
                    reason = "no kink"
            rho /= 16
            if not rho > 1e-9 * self.scale:
                break
        if found is None:
            return reason
        rho, s, zm = found
        if rho < rho_far:
            # located again at the far distance when its window holds the predicted kink: c is read to the
            # round-off of the point divided by zeta_m, which is 16 times larger there
            y = q_pt + rho_far * t
            zm_f, room_f = self._room(y, nd, m)
            pred = s * rho_far / rho
            if abs(pred) < 0.9 * room_f:
                dl = max((1e-3 if tight else 3e-2) * (abs(pred) + rho_far), 1e-9 * self.scale)
                s2, ok2 = _locate_kinks(self.oracle, (y + pred * nd)[None], nd[None], np.array([dl]), self.noise)
                if ok2[0]:
                    return y + (pred + float(s2[0])) * nd, zm_f
        return q_pt + rho * t + s * nd, zm

    def _roots(self, u: np.ndarray, beta: float, X0: np.ndarray, V: np.ndarray, R: float) -> np.ndarray:
        """Zero of the neuron ``(u, beta)`` on each line ``X0 + s V``, ``|s| <= R``, nearest ``s = 0`` (NaN: none).

        No query: the known layers give ``z`` along the line, which is bracketed on a grid and bisected.
        """
        m, d = X0.shape
        grid = np.linspace(-R, R, 257)
        mid = np.abs(0.5 * (grid[:-1] + grid[1:]))
        i = np.zeros(m, int)
        found = np.zeros(m, bool)
        # lines in chunks: the grid points of one chunk take at most about 32 MB
        step = max(1, (1 << 22) // (grid.size * d))
        for a in range(0, m, step):
            pts = X0[a:a + step, None, :] + grid[None, :, None] * V[a:a + step, None, :]
            Z = self.known.target_values(pts.reshape(-1, d), u[None, :], np.array([beta])).reshape(-1, grid.size)
            sign = np.sign(Z)
            change = sign[:, :-1] * sign[:, 1:] <= 0
            cost = np.where(change, mid[None, :], np.inf)
            i[a:a + step] = np.argmin(cost, axis=1)
            found[a:a + step] = np.isfinite(cost[np.arange(cost.shape[0]), i[a:a + step]])
        lo, hi = grid[i].copy(), grid[i + 1].copy()
        flo = self.known.target_values(X0 + lo[:, None] * V, u[None, :], np.array([beta]))[:, 0]
        for _ in range(60):
            s = 0.5 * (lo + hi)
            zs = self.known.target_values(X0 + s[:, None] * V, u[None, :], np.array([beta]))[:, 0]
            left = np.sign(zs) == np.sign(flo)
            lo = np.where(left, s, lo)
            flo = np.where(left, zs, flo)
            hi = np.where(left, hi, s)
        out = 0.5 * (lo + hi)
        out[~found] = np.nan
        return out

    def _locate(self, u: np.ndarray, beta: float, n_points: int, delta: float, pattern: tuple | None = None
                ) -> np.ndarray:
        """Critical points of the neuron ``(u, beta)`` at the zeros it predicts on lines along its normal.

        Each line runs through a Gaussian point along the neuron's local normal there (from the known
        layers, no query): the slope of ``f`` changes most along the normal, and the location error of a
        kink is the box's round-off divided by that change (on a random line it is about ``sqrt(d)``
        times smaller, and so the critical points ``sqrt(d)`` times less precise).

        ``pattern = (features, states, walk points)``: the lines run near the walk's points, and only the
        predicted zeros where those features are on (True) or off as given are kept (the zeros are found
        without queries; up to 16 times ``n_points`` lines are drawn for them).
        """
        d = self.d
        kept_P, kept_V = [], []
        got = 0
        for _ in range(16 if pattern is not None else 1):
            X0 = self.scale * self.rng.standard_normal((n_points, d))
            if pattern is not None and pattern[2].shape[0]:
                # lines near the walk's points, in its region of the fixed features
                near = pattern[2][self.rng.integers(pattern[2].shape[0], size=n_points)]
                X0 = near + 0.1 * X0
            V = self.known.target_gradients(X0, u)
            norm = np.linalg.norm(V, axis=1)
            bad = ~(norm > 0)
            V[bad] = self.rng.standard_normal((int(bad.sum()), d))
            V /= np.linalg.norm(V, axis=1, keepdims=True)
            s = self._roots(u, beta, X0, V, self.radius)
            ok = np.isfinite(s)
            P = X0[ok] + s[ok, None] * V[ok]
            V = V[ok]
            if pattern is not None and P.shape[0]:
                match = np.all((self.known.features(P)[:, pattern[0]] > 0) == pattern[1], axis=1)
                P, V = P[match], V[match]
            kept_P.append(P[:n_points - got])
            kept_V.append(V[:n_points - got])
            got += kept_P[-1].shape[0]
            if got >= n_points:
                break
        P, V = np.concatenate(kept_P), np.concatenate(kept_V)
        self._predicted += int(P.shape[0])
        if not P.shape[0]:
            return np.empty((0, d))
        sl, found = _locate_kinks(self.oracle, P, V, np.full(P.shape[0], delta), self.noise)
        return P[found] + sl[found, None] * V[found]

    def _null_vector(self, pts: np.ndarray, held_out: bool = True
                     ) -> tuple[np.ndarray, float, float, np.ndarray] | None:
        """Total-least-squares neuron through critical points: ``[phi(x), 1] . (u, beta) = 0``.

        Columns are scaled to unit norm first (the features differ in size); a column that is zero at
        every point (a feature never active there) is left out and its coefficient set to zero.
        Returns ``(u, beta, relative residual, the points kept)``.
        """
        Phi = self.known.features(pts)
        self._partial = False
        if self.known.depth:
            # a feature on (or off) at all but a few points is pinned by those few alone: one stray point
            # there (a critical point of another neuron) would be fitted exactly, leaving the other
            # coefficients free; such points are left out, and the feature is then on (or off) at all.
            # The features of the layer before are ReLUs too when it is hidden (measured on 12-10-8-6-1:
            # the one point of another neuron with one of them on was fitted to 4e-12)
            width = self.known.widths[-1]
            on = Phi[:, :(Phi.shape[1] if self.known.depth >= 2 else width)] > 0
            few = max(2, pts.shape[0] // 50)
            count = on.sum(axis=0)
            minority = np.zeros(pts.shape[0], bool)
            for j in np.flatnonzero((count > 0) & (count <= few)):
                minority |= on[:, j]
            for j in np.flatnonzero((count < pts.shape[0]) & (count >= pts.shape[0] - few)):
                minority |= ~on[:, j]
            if minority.any() and (~minority).sum() > Phi.shape[1] + 2:
                pts, Phi = pts[~minority], Phi[~minority]
        D = np.concatenate([Phi, np.ones((pts.shape[0], 1))], axis=1)
        norms = np.linalg.norm(D, axis=0)
        live = norms > 1e-12 * max(norms.max(), 1e-300)
        if self.known.depth:
            # a feature relu(zeta_j) positive at every point equals zeta_j there, a linear function of
            # the skip features: left out here (its coefficient goes into the skip part) and found by the
            # refit after the signs; a feature off at every point has a coefficient the boundary does not
            # show (set to zero). Either makes the neuron's skip part unfit for the sign equations.
            always = np.all(Phi[:, :width] > 0, axis=0)
            never = np.all(Phi[:, :width] <= 0, axis=0)
            live[:width] &= ~always
            self._partial = bool(always.any() or never.any())
        if not live.any():
            # no column varies at these points beside the others' round-off (seen on a bogus layer of 69
            # neurons from a float32 box): there is no hyperplane to fit
            return None
        if held_out and self.known.depth:
            # a critical point of another neuron that alone pins a direction of the fit (a feature that
            # varies at few points) is fitted exactly by a hyperplane fitted with it, and missed by one
            # fitted without it: each quarter of the points is checked against the fit on the others
            # (measured on 12-10-8-6-1: 2 of 182 points of another neuron fitted to 4e-12 with them).
            # With no known layer the features are x itself, every one varying at every point: a stray
            # point is off the hyperplane through the others, and the trimming below removes it
            rows = D[:, live] / norms[live]
            r = np.zeros(pts.shape[0])
            fold = np.arange(pts.shape[0]) % 4
            for f in range(4):
                train = rows[fold != f]
                if train.shape[0] < rows.shape[1] + 1:
                    break
                with blas_threads(1):
                    vec = np.linalg.svd(train, full_matrices=False)[2][-1]
                test = rows[fold == f]
                r[fold == f] = np.abs(test @ vec) / np.maximum(np.linalg.norm(test, axis=1), 1e-300)
            else:
                bad = r > self._tls_tol()
                if 0 < bad.sum() <= max(1, pts.shape[0] // 10):
                    return self._null_vector(pts[~bad], held_out=False)
        keep = np.ones(pts.shape[0], bool)
        for _ in range(5):
            Ds = D[keep][:, live] / norms[live]
            if Ds.shape[0] < Ds.shape[1] + 1:
                return None
            with blas_threads(1):
                _, sv, Vt = np.linalg.svd(Ds, full_matrices=False)
            vec = Vt[-1]
            rows = D[:, live] / norms[live]
            r = np.abs(rows @ vec) / np.maximum(np.linalg.norm(rows, axis=1), 1e-300)
            cut = max(10 * float(np.median(r[keep])), 1e-15)
            new_keep = keep & (r <= cut)
            if new_keep.sum() == keep.sum() or new_keep.sum() < Ds.shape[1] + 1:
                break
            keep = new_keep
        if not keep.all() and self.known.depth:
            # the points left may have a feature on (or off) at all of them that was live among all
            # points: relu(-zeta_j) (= relu(zeta_j) - zeta_j) then vanishes at every one and is the null
            # vector (measured on 12-10-8-6-1); the fit is made again on those points alone
            on = Phi[keep][:, :width] > 0
            if np.any(live[:width] & (on.all(axis=0) | ~on.any(axis=0))):
                return self._null_vector(pts[keep], held_out=False)
        coef = np.zeros(D.shape[1])
        coef[live] = vec / norms[live]
        rel = float(sv[-1] / sv[0])
        gap = float(sv[-1] / sv[-2]) if sv.size > 1 else 0.0
        return coef[:-1], float(coef[-1]), max(rel, gap), pts[keep]

    def _anchor_fit(self, u: np.ndarray, beta: float, walked: np.ndarray | None = None, pattern: tuple | None = None
                    ) -> tuple[np.ndarray, float, np.ndarray, dict] | None:
        """Precision improvement and test of a candidate neuron (CJM Section 6).

        Critical points are located at the zeros the candidate predicts on random lines; a first batch of
        ``_FIRST_BATCH`` lines must show one on three of them (a neuron of this layer shows one on most, a
        deeper neuron's prediction misses: measured 90% against under 10%),
        then enough for the total least squares over the features, which must leave a residual at the
        located precision. ``pattern``: where the anchors go (:meth:`_locate`).
        """
        F = self.known.n_features
        self._fit_info = info = {}
        self._predicted = 0
        scale_u = float(np.linalg.norm(u))
        if not scale_u > 0:
            # a walk that saw no feature change (every coefficient zero): no hyperplane to test
            info["rejected"] = "zero signature"
            return None
        u, beta = u / scale_u, beta / scale_u
        delta = 1e-3 * self.scale if self._float64 else 1e-2 * self.scale
        first = self._locate(u, beta, _FIRST_BATCH, delta, pattern)
        info["first_batch"] = int(first.shape[0])
        if first.shape[0] < 3:
            info["rejected"] = "predicted critical points not found (a deeper neuron)"
            return None
        need = F + 1 + max(16, F // 2)
        pts = [first]
        got = first.shape[0]
        rate = max(got / _FIRST_BATCH, 0.05)
        for _ in range(4):
            if got >= need:
                break
            more = self._locate(u, beta, int(math.ceil(1.2 * (need - got) / rate)) + 4, delta, pattern)
            pts.append(more)
            got += more.shape[0]
        if walked is not None:
            # the walk's critical points lie on both sides of every boundary it crossed: features that
            # the anchors may all leave off (or all on) vary among them
            pts.append(walked)
        info["predicted"] = self._predicted
        info["confirmed"] = got
        pts = np.concatenate(pts)
        info["points"] = int(pts.shape[0])
        if self.max_uncrossed and got < _MIN_CONFIRMED * self._predicted:
            # a walk that may leave neurons uncrossed no longer shows that the boundary bends only where
            # the known neurons do: a deeper neuron's boundary, linear in these features on the part it
            # walked, passes it. Its hyperplane then predicts zeros where the boundary has bent away
            # (measured on 12-10-8-6-1: such a candidate confirmed 15% of its predicted zeros, this
            # layer's neurons 85-100%, and rarely active ones fitted partially 54-67% on 10-20-20-1)
            info["rejected"] = (f"{got} of {self._predicted} predicted critical points found (a deeper "
                                "neuron's boundary, linear only where the walk went)")
            return None
        fit = self._null_vector(pts)
        if fit is None:
            info["rejected"] = f"too few critical points ({pts.shape[0]} for {F + 1} unknowns)"
            return None
        u2, b2, resid, kept = fit
        info["residual"] = resid
        if not resid <= self._tls_tol():
            info["rejected"] = f"critical points not on one hyperplane in feature space (residual {resid:.2e})"
            return None
        if float(u2 @ u) < 0:
            u2, b2 = -u2, -b2
        info["partial"] = self._partial
        return u2, b2, kept, info

    # ------------------------------------------------------------------ one layer
    @property
    def _layer_found(self) -> list[np.ndarray]:
        return self._current[0] if self._current is not None else []

    def _current_rows(self):
        if self._current is None or not self._current[0]:
            return None, None
        return np.array(self._current[0]), np.array(self._current[1])

    def _share(self, points: np.ndarray, U: np.ndarray, beta: np.ndarray) -> np.ndarray:
        """Fraction of ``points`` on the boundary of each neuron ``(U[i], beta[i])`` (to 1e-6 of its size)."""
        Z = np.abs(self.known.target_values(points, U, beta))
        size = np.abs(self.known.features(points)) @ np.abs(U).T + np.abs(beta)
        return (Z <= 1e-6 * np.maximum(size, 1e-300)).mean(axis=0)

    def _union_fit(self, a: np.ndarray, b: np.ndarray):
        """The neuron through the critical points ``a`` and ``b`` together when they lie on one boundary, or None.

        Two fits of one neuron may differ as coefficient vectors (each walk leaves other features
        undetermined: :meth:`_null_vector`), but their points lie on one hyperplane in feature space;
        the points of two different neurons do not.
        """
        union = np.concatenate([a, b])
        fit = self._null_vector(union)
        if fit is None or not fit[2] <= self._tls_tol():
            return None
        partial = self._partial
        if self._share(union, fit[0][None, :], np.array([fit[1]]))[0] < _UNION_SHARE:
            return None
        return fit[0], fit[1], fit[3], partial

    def _duplicate_of(self, pts: np.ndarray) -> tuple[int, tuple | None] | None:
        """The neuron found before that the critical points ``pts`` of a new one belong to, or None.

        Returns ``(i, union)`` with the fit on both neurons' points (None when they are not on one
        hyperplane although half of one set lies on the other's boundary).
        """
        U, beta = self._current_rows()
        if U is None:
            return None
        shared = self._share(pts, U, beta)
        fit = self._null_vector(pts)
        back = (np.array([self._share(p, fit[0][None, :], np.array([fit[1]]))[0] for p in self._current[2]])
                if fit is not None else np.zeros(U.shape[0]))
        for i in np.argsort(-np.maximum(shared, back)):
            if max(shared[i], back[i]) < _NEAR_SHARE:
                break
            union = self._union_fit(self._current[2][i], pts)
            if union is not None or max(shared[i], back[i]) >= 0.5:
                return int(i), union
        return None

    def _merge(self, i: int, union: tuple) -> None:
        """Neuron ``i`` of the current layer refitted on its critical points and those of a duplicate.

        A neuron fitted partially (a feature on, or off, at all of its critical points) is determined
        only where its boundary was seen; another walk along the same boundary may see that feature
        switch, and the union determines its coefficient (and is more precise in any case).
        """
        u, b, kept, partial = union
        if float(u @ self._current[0][i]) < 0:
            u, b = -u, -b
        self._current[0][i], self._current[1][i], self._current[2][i] = u, b, kept
        self._current[3][i] = partial

    def _merge_duplicates(self) -> int:
        """Merge the neurons of the current layer that lie on one boundary (a merge changes a neuron, which
        may then be a duplicate of one found before); returns how many were merged away."""
        merged = 0
        i = 0
        while i < len(self._current[0]):
            j = i + 1
            while j < len(self._current[0]):
                U, beta = self._current_rows()
                near = max(self._share(self._current[2][j], U[i:i + 1], beta[i:i + 1])[0],
                           self._share(self._current[2][i], U[j:j + 1], beta[j:j + 1])[0])
                # two partial fits of one neuron from different parts of its boundary share no points (each
                # is exact only where its walks went), but their points lie on its one hyperplane in feature
                # space, which the union fit finds (measured on 40-20-10-10-1 under Haswell kernels: four
                # partial fits of a third-layer neuron active on 14% of the region, 0-8% of shared points,
                # whose union is that neuron to 4e-11, not partial). The points of two partial fits of
                # different neurons can lie on one hyperplane too (their null spaces are large; measured
                # under Sandybridge kernels: 82 points of one neuron and 252 of another, 1e-13), which is no
                # boundary of the box: such a union must show critical points where it predicts them
                partial = self._current[3][i] or self._current[3][j]
                union = (self._union_fit(self._current[2][i], self._current[2][j])
                         if near >= _NEAR_SHARE or partial else None)
                if union is not None and near < _NEAR_SHARE and not self._confirmed(*union):
                    union = None
                if union is None:
                    j += 1
                    continue
                self._merge(i, union)
                for part in self._current:
                    del part[j]
                merged += 1
            i += 1
        return merged

    def _confirmed(self, u: np.ndarray, beta: float, pts: np.ndarray, partial: bool) -> bool:
        """Whether the box has critical points where the neuron ``(u, beta)``, fitted on the critical points
        ``pts``, predicts them on ``4 _FIRST_BATCH`` lines through Gaussian points (:meth:`_locate`): on at
        least 3 and ``_MERGE_CONFIRMED`` of the predicted. A ``partial`` fit predicts only where the
        features it leaves undetermined are as at ``pts``: only its zeros there count.

        Measured under Sandybridge kernels on 40-20-10-10-1 (64 lines each): unions of partial fits of one
        third-layer neuron 87-100% of the predicted zeros, single neurons 96-98%, and the hyperplane through
        the points of two neurons (not partial) 30%: it is near their boundaries wherever the features those
        points leave fixed are as there, so lines placed there, or near the points, confirmed it."""
        scale_u = float(np.linalg.norm(u))
        if not scale_u > 0:
            return False
        pattern = None
        fixed = self._undetermined_features(pts) if partial else np.zeros(0, int)
        if fixed.size:
            pattern = (fixed, self.known.features(pts[:1])[0, fixed] > 0, np.zeros((0, self.d)))
        self._predicted = 0
        delta = 1e-3 * self.scale if self._float64 else 1e-2 * self.scale
        got = self._locate(u / scale_u, beta / scale_u, 4 * _FIRST_BATCH, delta, pattern).shape[0]
        return got >= 3 and got >= _MERGE_CONFIRMED * self._predicted

    def _undetermined_features(self, pts: np.ndarray) -> np.ndarray:
        """Features of the last known layer on at all, or off at all, of the points ``pts``: a neuron fitted
        on them cannot tell ``relu(zeta_j)`` from ``zeta_j`` (or from 0), so its coefficient there is unknown."""
        if not self.known.depth:
            return np.zeros(0, int)
        on = self.known.features(pts)[:, :self.known.widths[-1]] > 0
        return np.flatnonzero(on.all(axis=0) | ~on.any(axis=0))

    def _find_layer(self, layer: int) -> dict:
        """Every neuron of hidden layer ``layer`` (0-based) that leaves a critical point."""
        self._current = ([], [], [], [])
        info = {"layer": layer + 1, "candidates": 0, "rejected": 0, "lines": 0, "queries": self.oracle.n_queries,
                "seconds": time.perf_counter()}
        target = None if self.widths is None or layer >= len(self.widths) else self.widths[layer]
        # a neuron of a deeper layer is visible only where the layers after it pass its change on, so its
        # kinks are rarer on the lines than those of the first layer: more quiet lines before stopping
        # (measured on 10-20-20-1 boxes: 3 quiet lines missed a second-layer neuron in 3 of 5 seeds)
        first, later = (3, 6) if self._float64 else (6, 10)
        patience = self.patience if self.patience is not None else (first if layer == 0 else later)
        quiet = 0
        extended = False
        # neurons found when the last extension round began (None: no round yet)
        at_extension = None
        self.max_uncrossed = self.known.widths[-1] if self.known.depth >= 2 else 0
        pending = [k for k in self.kinks if k["status"] in ("open", "deeper")]
        for k in pending:
            k["status"] = "open"
            k.pop("retried", None)
        while True:
            if not pending:
                if quiet >= patience or (target is not None and len(self._current[0]) >= target):
                    # a second walk for the kinks set aside (each walk takes random turns): a neuron of
                    # this layer whose first walk failed is not left to the next layer
                    retry = [k for k in self.kinks if k["status"] == "deeper" and not k.get("retried")]
                    if retry and (target is None or len(self._current[0]) < target):
                        for k in retry:
                            k["status"], k["retried"] = "open", True
                        pending = retry
                        continue
                    # from the third layer on, a round that found neurons is followed by another while the box is
                    # not explained: its lines start where the fit was worst with the neurons found before it,
                    # where a neuron active on almost all of the region (inactive on 0.3% of Gaussian inputs in a
                    # 40-20-10-10-1 box) is hidden by the others' residual, and 5 of 60 random lines cross it
                    again = (extended and self.known.depth >= 2 and at_extension is not None
                             and len(self._current[0]) > at_extension and info.get("extensions", 0) < 4)
                    if target is None and (not extended or again) and self._current[0] and not self._explains_box():
                        # the box is not yet explained: either a deeper layer exists or neurons of this
                        # layer are still missing; one more round of lines looks for the latter
                        extended = True
                        at_extension = len(self._current[0])
                        info["extensions"] = info.get("extensions", 0) + 1
                        quiet = 0
                        info["extended"] = True
                        # and the kinks set aside get one more walk that may leave any neuron uncrossed (a
                        # boundary that never meets theirs: a neuron active on a small part of the region
                        # meets few); the anchor fit still decides, and such a neuron is flagged partial
                        self.max_uncrossed = self.known.widths[-1] if self.known.depth else 0
                        for k in self.kinks:
                            if k["status"] == "deeper":
                                k["status"] = "open"
                        pending = [k for k in self.kinks if k["status"] == "open"]
                        continue
                    break
                pending = self._search_line()
                info["lines"] += 1
                new_on_line = 0
            else:
                new_on_line = None
            waiting = []
            for k in pending:
                if k["status"] == "open":
                    if self._explained(k):
                        k["status"] = "explained"
                    else:
                        waiting.append(k)
            added = 0
            for k in waiting:
                if k["status"] != "open":
                    continue
                if self._explained(k):
                    k["status"] = "explained"
                    continue
                # the gradient jump (4 d + 2 queries) only for a kink no neuron found so far explains
                self._read_normals([k])
                if k["status"] != "open":
                    continue
                if target is not None and len(self._current[0]) >= target:
                    break
                info["candidates"] += 1
                traced = self._trace(k["x"], k["normal"])
                fit = None if traced is None else self._anchor_fit(traced[0], traced[1], traced[2]["points"],
                                                                  traced[2].get("pattern"))
                if fit is None:
                    k["status"] = "deeper"
                    info["rejected"] += 1
                    continue
                u, b, pts, fit_info = fit
                k["status"] = "explained"
                dup = self._duplicate_of(pts)
                if dup is not None:
                    if dup[1] is not None:
                        self._merge(*dup)
                        info["merged"] = info.get("merged", 0) + 1
                    continue
                self._current[0].append(u)
                self._current[1].append(b)
                self._current[2].append(pts)
                self._current[3].append(bool(fit_info["partial"]) or bool(traced[2].get("uncrossed")))
                added += 1
                self.log(f"layer {layer + 1}: neuron {len(self._current[0])} ({self.oracle.n_queries} queries)")
            if new_on_line is not None:
                quiet = 0 if added else quiet + 1
            pending = []
        merged = self._merge_duplicates()
        if merged:
            info["merged"] = info.get("merged", 0) + merged
        info["neurons"] = len(self._current[0])
        info["queries"] = self.oracle.n_queries - info["queries"]
        info["seconds"] = time.perf_counter() - info["seconds"]
        return info

    def _explains_box(self) -> bool:
        """Whether an output layer on the neurons found so far (orientation unresolved) explains the box.

        ``f = A relu(z) + S phi + c`` with ``z`` the pre-activations found in this layer and ``phi`` the
        features they are linear in (which absorb any flipped orientation): a least-squares fit on fresh
        Gaussian queries whose residual is at the box's noise means this layer is complete and last.
        """
        U, beta = self._current_rows()
        n_cols = U.shape[0] + self.known.n_features + 1
        X = self.scale * self.rng.standard_normal((max(2 * n_cols + 64, self.n_certify), self.d))
        Y = query_batched(self.oracle, X)
        Phi = self.known.features(X)
        D = np.concatenate([np.maximum(Phi @ U.T + beta, 0.0), Phi, np.ones((X.shape[0], 1))], axis=1)
        norms = np.linalg.norm(D, axis=0)
        norms[norms == 0] = 1.0
        with blas_threads(1):
            coef, *_ = np.linalg.lstsq(D / norms, Y, rcond=None)
        R = (D / norms) @ coef - Y
        resid = float(np.linalg.norm(R) / max(np.linalg.norm(Y), 1e-300))
        n_params = sum(W.size + b.size for W, b in zip(self.known.weights, self.known.biases)) + U.size + D.shape[1]
        explained = resid <= self._output_tolerance(n_params)
        if not explained:
            # where the fit is worst, the neurons not yet found are active: the next lines start there
            r = np.linalg.norm(R.reshape(X.shape[0], -1), axis=1)
            worst = np.argsort(-r)[:_RESIDUAL_STARTS]
            worst = worst[r[worst] > 10 * np.median(r)]
            self._line_starts = [X[i] for i in worst[::-1]]
        return explained

    # ------------------------------------------------------------------ signs, output layer
    def _orient_by_gradients(self, n_points: int = 24, rounds: int = 1) -> dict:
        """Signs of the last known layer from the gradient of the box, when that layer is at most ``d`` wide.

        ``grad f(x) = (W_l J(x))^T y`` with ``J`` the Jacobian of the layer before (known, oriented) and
        ``y_j`` nonzero only for neurons active at ``x``: with ``n_l <= rank(W_l J)`` the least-squares
        ``y`` is unique, and a neuron with ``|y_j|`` well above the round-off is active, which fixes its
        orientation (its stored pre-activation must be positive there). This reads the signs from the box
        itself, so it needs no neuron of the next layer to cross every boundary (in trained networks most
        next-layer neurons are active on all of the region); ``d + 1`` queries per point. With ``rounds > 1``,
        rounds of twice the points before follow while a neuron has no vote (inactive, or its effect blocked
        downstream, at every point so far).
        """
        K = self.known
        W = K.weights[-1]
        width = W.shape[0]
        votes = np.zeros(width)
        seen = np.zeros(width, int)
        h = 1e-6 * self.scale
        total = 0
        for r in range(rounds):
            if r and np.all(seen > 0):
                break
            n_r = n_points << r
            total += n_r
            X = self.scale * self.rng.standard_normal((n_r, self.d))
            rows = np.concatenate([X[:, None, :], X[:, None, :] + h * np.eye(self.d)[None]], axis=1)
            F = query_batched(self.oracle, rows.reshape(-1, self.d)).reshape(n_r, self.d + 1, -1)
            for q in range(n_r):
                G, _, zeta, layer_of, _, _ = K.local(X[q])
                last = np.array(layer_of) == K.depth - 1
                Gl, zl = G[last], zeta[last]
                grads = (F[q, 1:] - F[q, :1]) / h                  # (d, p)
                with blas_threads(1):
                    sv = np.linalg.svd(Gl, compute_uv=False)
                    if sv.size < width or not sv[-1] > 1e-6 * sv[0]:
                        continue
                    y, *_ = np.linalg.lstsq(Gl.T, grads, rcond=None)   # (width, p)
                mag = np.linalg.norm(y, axis=1)
                big = mag > 1e-4 * max(float(mag.max()), 1e-300)
                votes[big] += np.sign(zl[big])
                seen[big] += 1
        consistent = bool(np.all(np.abs(votes[seen > 0]) == seen[seen > 0]))
        # with no neuron oriented the span holds every other neuron's gradient, which a layer wider than the
        # rank of its local map (the third layer of 40-20-10-10-1: 13 neurons, rank at most the 10 of the
        # layer before) leaves nowhere outside it
        if consistent and seen.any() and not np.all(seen > 0):
            total += self._orient_unseen(votes, seen, n_points, h)
            consistent = bool(np.all(np.abs(votes[seen > 0]) == seen[seen > 0]))
        t = (votes < 0).astype(int)
        resolved = seen > 0
        return {"method": "gradient support", "points": int(total), "t": t, "resolved_neurons": resolved,
                "consistent": consistent}

    @blas_threads(1)
    def _orient_unseen(self, votes: np.ndarray, seen: np.ndarray, n_points: int, h: float) -> int:
        """Votes, in place, for the neurons of the last known layer that :meth:`_orient_by_gradients` saw at
        no point; returns the number of points queried.

        The full-rank test needs every neuron of the layer independent at a point, which a neuron active on
        a small part of the region rarely is there (measured on the second layer of a 12-10-8-6-1 box: the
        layer's local map has full rank at 6.5% of Gaussian inputs, and none of 3,000 of them had its neuron
        active on 2.2% of the region active too). A weaker test needs only neuron ``j``: ``grad f(x)`` is a
        combination of the gradients of the neurons active at ``x``, so where it is not in the span of the
        gradients of the others that can be active (the oriented neurons active at ``x`` and the other
        unseen ones), ``j`` is active at ``x`` and its orientation is the sign of its stored pre-activation
        there. The points are chosen from a Gaussian pool without queries: on both sides of ``j``'s
        boundary, where its gradient is outside that span.
        """
        K = self.known
        width = K.widths[-1]
        total = 0
        for j in np.flatnonzero(seen == 0):
            # the orientations as voted so far, including those of the unseen neurons handled before j
            # (with their old, unvoted orientation a neuron active at x could be left out of the span, and
            # its gradient read as j's: measured on 12-10-8-6-1 under Prescott kernels, 2 wrong votes of 13)
            flip = votes < 0
            others_unseen = (seen == 0) & (np.arange(width) != j)
            for r in range(3):
                want = n_points << r
                chosen = {True: [], False: []}
                for _ in range(4):  # pool chunks until both sides have their points
                    pool = self.scale * self.rng.standard_normal((1024, self.d))
                    zj = K.preactivations(pool)[-1][:, j]
                    for x, pos in zip(pool, zj > 0):
                        if len(chosen[bool(pos)]) >= want // 2:
                            continue
                        G, _, zeta, layer_of, _, _ = K.local(x)
                        last = np.array(layer_of) == K.depth - 1
                        Gl, zl = G[last], zeta[last]
                        span = (((zl > 0) != flip) & (seen > 0)) | others_unseen
                        span[j] = False
                        gj = Gl[j]
                        if span.any():
                            # j's own gradient well outside the span (1e-3 of its norm), so that a vote
                            # below needs it to carry only 1e-4 of grad f, far above the finite
                            # difference's error (about eps / h, 1e-10, in a linear region)
                            coef, *_ = np.linalg.lstsq(Gl[span].T, gj, rcond=None)
                            if np.linalg.norm(gj - Gl[span].T @ coef) <= 1e-3 * np.linalg.norm(gj):
                                continue
                        chosen[bool(pos)].append((x, Gl[span]))
                    if min(len(chosen[True]), len(chosen[False])) >= want // 2:
                        break
                points = chosen[True] + chosen[False]
                if not points:
                    break
                X = np.array([x for x, _ in points])
                rows = np.concatenate([X[:, None, :], X[:, None, :] + h * np.eye(self.d)[None]], axis=1)
                F = query_batched(self.oracle, rows.reshape(-1, self.d)).reshape(len(points), self.d + 1, -1)
                total += len(points)
                for q, (x, Gs) in enumerate(points):
                    grads = (F[q, 1:] - F[q, :1]) / h                  # (d, p)
                    rest = grads
                    if Gs.shape[0]:
                        coef, *_ = np.linalg.lstsq(Gs.T, grads, rcond=None)
                        rest = grads - Gs.T @ coef
                    # the threshold of the full-rank test's support (_orient_by_gradients)
                    if np.linalg.norm(rest) > 1e-4 * max(float(np.linalg.norm(grads)), 1e-300):
                        votes[j] += 1.0 if q < len(chosen[True]) else -1.0
                        seen[j] += 1
                if seen[j]:
                    break
        return total

    def _orient_previous(self, U: np.ndarray, beta: np.ndarray, points: list[np.ndarray]) -> dict:
        """Signs of the last known layer from the skip coefficients of the layer just found."""
        K = self.known
        width = K.widths[-1]
        W_prev = K.weights[-1]
        rel_tol = 1e-11 + 1e4 * self.noise.rel
        free = [self._undetermined_features(p) for p in points]
        t, info = resolve_signs(W_prev, U[:, :width].T, U[:, width:], rel_tol=rel_tol,
                                precision=100 * self.noise.rel, time_limit=self.sign_time_limit, free=free)
        if t is None:
            return {**info, "resolved": False}
        flip = t.astype(bool)
        K.weights[-1] = np.where(flip[:, None], -W_prev, W_prev)
        K.biases[-1] = np.where(flip, -K.biases[-1], K.biases[-1])
        return {**info, "resolved": True, "flipped": int(flip.sum())}

    def _refit_without_skip(self, points: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, list[float]]:
        """The layer just found, refitted on the oriented features ``relu(zeta_l)`` only."""
        rows, biases, resid = [], [], []
        for pts in points:
            coef, sv, _ = hyperplane_through(np.maximum(self.known.preactivations(pts)[-1], 0.0))
            rows.append(coef[:-1])
            biases.append(coef[-1])
            resid.append(float(sv[-1] / sv[0]))
        return np.array(rows), np.array(biases), resid

    def _merge_on_one_boundary(self, W: np.ndarray, b: np.ndarray, points: list[np.ndarray]):
        """Neurons of the layer just refitted whose critical points lie on another's boundary, merged into it.

        During the search a neuron's skip coefficients make up for the features its walks left in one
        state, so a partial fit of a neuron and its full fit can share under 5% of their points there and
        both be kept (measured on 40-20-10-10-1 under Prescott kernels: 276 critical points of one
        third-layer neuron, all on the boundary of another found neuron with 640, fitted with 4 features
        of the layer before off at all of them: preactivation correlation 0.50 with that neuron, and a
        finish that stalled on it). Refitted on the oriented features ``relu(zeta_l)``, the full fit is
        exact, and the partial fit's points lie on its hyperplane. A neuron is merged when
        ``_UNION_SHARE`` of its points lie on another's boundary and the union fits one hyperplane to the
        box's round-off. Returns ``(W, b, points, merged)``.
        """
        W, b, points = W.copy(), b.copy(), list(points)
        width = self.known.widths[-1]
        merged = 0
        changed = True
        while changed and W.shape[0] > 1:
            changed = False
            U = np.zeros((W.shape[0], self.known.n_features))
            U[:, :width] = W
            undetermined = [self._undetermined_features(p).size for p in points]
            # the least determined first: a partial fit goes into the neuron it is part of, not the reverse
            for j in np.argsort(undetermined, kind="stable")[::-1]:
                share = self._share(points[j], U, b)
                share[j] = 0.0
                i = int(np.argmax(share))
                if share[i] < _UNION_SHARE:
                    continue
                union = np.concatenate([points[i], points[j]])
                coef, sv, _ = hyperplane_through(np.maximum(self.known.preactivations(union)[-1], 0.0))
                if not sv[-1] <= self._tls_tol() * sv[0]:
                    continue
                norm = np.linalg.norm(coef[:-1])
                sign = 1.0 if coef[:-1] @ W[i] >= 0 else -1.0
                W[i], b[i], points[i] = sign * coef[:-1] / norm, sign * coef[-1] / norm, union
                W, b = np.delete(W, j, axis=0), np.delete(b, j)
                del points[j]
                merged += 1
                changed = True
                break
        return W, b, points, merged

    # ------------------------------------------------------------------ the whole run
    def partial_layers(self) -> list[dict]:
        """The hidden layers found so far (orientation of the last one not yet resolved); a layer still
        being searched is given by its neurons' coefficients over the features of the layers before."""
        out = [{"weights": W.copy(), "biases": b.copy()} for W, b in zip(self.known.weights, self.known.biases)]
        U, beta = self._current_rows()
        if U is not None:
            out.append({"feature_coefficients": U.copy(), "biases": beta.copy(), "in_progress": True})
        return out

    def found_widths(self) -> list[int]:
        """Neurons found per hidden layer so far, the layer being searched included."""
        U, _ = self._current_rows()
        return self.known.widths + ([] if U is None else [int(U.shape[0])])

    def _finish_with_one_layer_less(self, deeper_result: tuple, shallower: dict, orient_info: list
                                    ) -> tuple[tuple, list]:
        """The finishing steps once more on the known layers of ``shallower`` (a snapshot of a depth below
        the deepest: its layers and their output fit), after ``deeper_result`` (the :meth:`_finish` of all
        known layers) failed its certificate; the result with the lower certificate error is kept, with its
        layers, points and orientations, and the other is recorded in ``diagnostics["deeper_attempt"]`` or
        ``["shallower_attempt"]``. Returns ``(result, orient_info)`` of the kept one (docs/design.md,
        "Finishing with one layer less")."""
        weights, biases, cert, sign_info, resid = deeper_result
        # the deepest layer may be a stand-in: the layer below it, found with partial neurons, leaves an
        # output fit that is not exact, and a few bogus neurons of one more layer explain part of the
        # rest (measured on 12-10-8-6-1: one neuron of a fourth layer, certificate error 0.40, where the
        # three layers found, their last two fitted jointly, reach 2e-14). So the finishing steps run
        # once more on the layers below it, and the better certificate is kept
        keys = ("linear_neurons", "pruned_neurons", "last_layer_refinement", "certificate_before_refinement",
                "last_layer_simplification")
        deeper = {"known": (self.known.weights, self.known.biases), "points": self._points,
                  "layers": self.layer_info, "orient": orient_info,
                  "diag": {k: self.diag.pop(k) for k in keys if k in self.diag}}
        # copies: the finish changes the last layer's rows in place, and the deeper result shares them
        self.known.weights = [W.copy() for W in shallower["weights"]]
        self.known.biases = [b.copy() for b in shallower["biases"]]
        self._points = self._points[:shallower["depth"]]
        self.layer_info = self.layer_info[:shallower["depth"]]
        orient_info = orient_info[:shallower["depth"] - 1]
        self.stage = "finishing with one layer less"
        result = self._finish(shallower["out"])
        summary = {"widths": [int(W.shape[0]) for W in weights[:-1]], "certificate": cert,
                   "layers": deeper["layers"][shallower["depth"]:]}
        if result[2]["relative_error"] < cert["relative_error"]:
            weights, biases, cert, sign_info, resid = result
            self.diag["deeper_attempt"] = summary
        else:
            self.diag["shallower_attempt"] = {"widths": [int(W.shape[0]) for W in result[0][:-1]],
                                              "certificate": result[2]}
            for k in keys:
                self.diag.pop(k, None)
            self.diag.update(deeper["diag"])
            self.known.weights, self.known.biases = deeper["known"]
            self._points, self.layer_info, orient_info = deeper["points"], deeper["layers"], deeper["orient"]
        return (weights, biases, cert, sign_info, resid), orient_info

    def run(self):
        """Run every stage; returns ``(weights, biases, diagnostics)`` of the canonical network."""
        t0 = time.perf_counter()
        self._current = None
        if self.noise is None:
            self.noise, evidence = self.oracle.calibrate(self.rng, self.scale)
            self.diag["noise"] = evidence
        max_depth = self.depth if self.depth is not None else MAX_DEPTH
        out = out_last = None
        orient_info = []
        early = None
        # the known layers at each depth whose output fit was tried, for finishing with one layer less
        snapshots = []
        for layer in range(max_depth):
            self.stage = f"layer {layer + 1}"
            self.on_layer(layer + 1)
            info = self._find_layer(layer)
            U, beta = self._current_rows()
            points = list(self._current[2])
            self._current = None
            if U is None:
                if layer == 0:
                    seen = len(self.kinks)
                    raise AssumptionError(
                        f"no hidden unit found: {self.lines} searched lines showed {seen} kink(s) and none lay "
                        "on a hyperplane in input space; the model is affine (or constant) on the searched region, "
                        "or not a ReLU network (smooth or other activations); enlarge input_scale/radius.")
                info["stopped"] = "no neuron of this layer found"
                self.layer_info.append(info)
                if out_last is not None:
                    # the layers found are all there is to find: the output layer on them, and the
                    # certificate says how well they explain the box
                    out = out_last
                break
            if layer > 0:
                # the orientation of the layer before is read off this layer's skip coefficients (unless
                # it was read before this layer was searched); a neuron fitted partially gives the
                # equations its undetermined features leave
                o = early if early is not None else self._orient_previous(U, beta, points)
                early = None
                o["neurons_used"] = int(U.shape[0])
                if not o["resolved"] and self.known.widths[-1] <= self.d:
                    g = self._orient_by_gradients()
                    if g["resolved_neurons"].all() and g["consistent"]:
                        flip = g["t"].astype(bool)
                        Kw = self.known
                        Kw.weights[-1] = np.where(flip[:, None], -Kw.weights[-1], Kw.weights[-1])
                        Kw.biases[-1] = np.where(flip, -Kw.biases[-1], Kw.biases[-1])
                        o = {"method": "gradient support", "resolved": True, "flipped": int(flip.sum()),
                             "skip_solve": {k: v for k, v in o.items() if k != "resolved"}}
                orient_info.append(o)
                info["orientation_of_previous_layer"] = o
                if o["resolved"]:
                    W_new, b_new, _ = self._refit_without_skip(points)
                    W_new, b_new, points, merged = self._merge_on_one_boundary(W_new, b_new, points)
                    if merged:
                        info["merged_after_refit"] = merged
                else:
                    W_new, b_new = U[:, :self.known.widths[-1]], beta
            else:
                W_new, b_new = U, beta
            norms = np.linalg.norm(W_new, axis=1)
            norms[norms == 0] = 1.0
            self.known.append(W_new / norms[:, None], b_new / norms)
            self._points.append(points)
            self.layer_info.append(info)
            self.log(f"layer {layer + 1}: {W_new.shape[0]} neurons")
            # depth: does an output layer on these features explain the box?
            self.stage = "output layer"
            X = self._output_rows()
            Y = query_batched(self.oracle, X)
            A, S, c, resid = self._fit_output(X, Y, skip=True)
            n_params = sum(W.size + b.size for W, b in zip(self.known.weights, self.known.biases)) + A.size + c.size
            info["output_fit_relative_residual"] = resid
            out_last = (X, Y, A, S, c, resid)
            if self.known.depth >= 2:
                snapshots.append({"depth": self.known.depth, "out": out_last, "weights": list(self.known.weights),
                                  "biases": list(self.known.biases)})
            if resid <= self._output_tolerance(n_params) or (self.depth is not None and layer + 1 == self.depth):
                out = out_last
                break
            if self.known.depth >= 2 and self.known.widths[-1] <= self.d:
                # a deeper layer follows. Its features are relu(zeta_l) and, as skip features, relu(zeta_{l-1}):
                # ReLUs, unlike the inputs that serve as skip features for layer 2. A walk determines a skip
                # coefficient only where its feature is active, and leaves the others at zero, which is right
                # only in the true orientation (no skip part); measured on 40-20-10-10-1 with the true layers
                # 1-2 given: 9 of 10 third-layer neurons found, none with 4 of the 10 second-layer neurons
                # flipped. So this layer is oriented now, from the box's gradients
                self.stage = f"signs of layer {layer + 1}"
                g = self._orient_by_gradients(rounds=3)
                if g["resolved_neurons"].all() and g["consistent"]:
                    flip = g["t"].astype(bool)
                    Kw = self.known
                    Kw.weights[-1] = np.where(flip[:, None], -Kw.weights[-1], Kw.weights[-1])
                    Kw.biases[-1] = np.where(flip, -Kw.biases[-1], Kw.biases[-1])
                    early = {"method": "gradient support, before the next layer", "resolved": True,
                             "flipped": int(flip.sum()), "points": g["points"]}
                info["orientation_before_next_layer"] = early or {
                    "resolved": False, "points": g["points"],
                    "unresolved_neurons": np.flatnonzero(~g["resolved_neurons"]).tolist(),
                    "consistent": g["consistent"]}
        if out is None:
            raise AssumptionError(f"the output is not explained after {len(self.known.weights)} hidden layer(s) "
                                  f"(widths {self.known.widths}); the model may not be a ReLU network, or its "
                                  "deeper neurons left no critical point on the searched lines.")
        result = self._finish(out)
        shallower = next((snap for snap in reversed(snapshots) if snap["depth"] < self.known.depth), None)
        if not result[2]["passed"] and shallower is not None and self.depth is None:  # a given depth stays
            result, orient_info = self._finish_with_one_layer_less(result, shallower, orient_info)
        weights, biases, cert, sign_info, resid = result
        K = self.known
        widths = [int(W.shape[0]) for W in weights[:-1]]
        unresolved = [i + 1 for i, o in enumerate(orient_info) if not o["resolved"]]
        if unresolved:
            warnings.warn(f"the orientation of hidden layer(s) {unresolved} could not be resolved (the skip "
                          "coefficients are not a sum of flipped neurons: neurons were missed, or the model is not "
                          "a ReLU network); see diagnostics['layers'].", CertificateWarning, stacklevel=3)
        if not cert["passed"]:
            warnings.warn(f"extraction certificate failed: relative error {cert['relative_error']:.3g} on "
                          f"{cert['queries']} fresh queries exceeds the tolerance {cert['tolerance']:.3g}; neurons "
                          f"were missed (widths found {widths}) or the model is not a ReLU network "
                          "(see diagnostics['certificate']).", CertificateWarning, stacklevel=3)
        self.diag.update({
            "complete": True, "depth": K.depth, "widths": widths, "n_hidden": widths,
            "linear_neurons_note": ("the last hidden layer's last linear_neurons neurons are active on all of the "
                                    "searched region: they carry the linear part that the model's neurons whose "
                                    "boundary lies beyond the region add there"),
            "layers": self.layer_info, "signs": sign_info, "certificate": cert, "lines_searched": self.lines,
            "output_fit_relative_residual": resid, "seconds": time.perf_counter() - t0,
            "unidentifiable": ("neurons whose effect on the output is zero wherever their boundary is crossed "
                               "(dead downstream), or whose boundary the searched lines do not cross, leave no "
                               "critical point and cannot be recovered; they do not change the function on the "
                               "searched region"),
        })
        return weights, biases, self.diag

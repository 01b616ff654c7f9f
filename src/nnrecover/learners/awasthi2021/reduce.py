"""Write a fitted ReLU network with at most ``m`` hidden units when the function allows it (internal).

The learner's networks can carry more units than the teacher: the paper's output has up to ``m + 2``
(the units plus a linear part, Claim D.14), and a refined network may contain units that are constant,
never active, always active (linear), or pairs on one line. :func:`reduce_network` rewrites such a
network, changing the function by at most a stated L2 amount, in four steps:

1. **Linearisable units** (the set ``P`` of Lemma D.13): a unit ``a relu(w^T x + b)`` with
   ``beta = b / ||w||``, ``alpha = a ||w||`` differs from its best linear approximation
   ``a Phi(beta) w^T x + a ||w|| c_0(beta)`` by exactly ``|alpha| nl(beta)`` in ``L2(N(0, I))``, with
   ``nl(beta)^2 = E relu(z)^2 - (E relu(z))^2 - Phi(beta)^2``, ``z ~ N(beta, 1)``. Units whose ``nl`` is
   negligible (zero output weight, ``||w|| ~ 0``, never or always active) are folded into the linear part.
2. **Units on one line**: ``alpha relu(z) + alpha' relu(-z) = (alpha + alpha') relu(z) - alpha' z`` and
   ``alpha relu(z) + alpha' relu(z) = (alpha + alpha') relu(z)``; merging two units whose canonical
   lines ``(u, beta)`` differ by ``delta`` costs at most ``|alpha'| delta`` (relu is 1-Lipschitz).
3. **Sign flips** (Theorem 3.4, corrected eq. (2), erratum E3): ``relu(z) = z + relu(-z)``, so flipping
   ``(b_i, w_i) -> (-b_i, -w_i)`` for ``i`` in ``F`` moves ``sum_{i in F} a_i (w_i^T x + b_i)`` into the
   linear part. A linear part ``v^T x + c`` is explained by the flip set ``F`` (indicator ``s``) when
   ``M s = -v`` with ``M = [a_i w_i]``; the constant goes to the output bias. With ``M`` of full column
   rank (full-rank ``W``, the setting of Theorem 3.1) the real solution is unique and is rounded to
   ``{0, 1}``; with a null space of dimension ``q`` (``m > d``, Theorem 3.2's setting) every assignment of
   ``q`` free coordinates is tried (``2^q`` candidates, ``q <= max_free``): several flip sets that
   explain ``v`` are the genuine ambiguity of Theorem 3.4 -- their networks differ only by flips ``F``
   with ``sum_F a_i w_i = 0``, i.e. by a constant. Among them the one with the smallest output bias is
   returned (the paper's model has none, so its second equation ``sum_F a_i b_i = 0`` picks the teacher
   when it can), and all are reported.
4. A linear part left over (``||r|| > budget``) is written as two units (Claim D.14) when they fit in ``m``,
   as one unit with a large bias ``B`` when only one is free and its nonlinear part ``||r|| nl(B) / Phi(B)``
   fits in the budget (Lemma D.13: such a unit is linear on all but ``Phi(-B)`` of the inputs); otherwise
   the network keeps more than ``m`` units and the result says why.

The budget ``atol`` bounds the total L2 change: each step adds its exact cost (step 1, the dropped
residual ``||r||`` of step 3) or an upper bound (step 2), and a step runs only while the sum stays
within ``atol``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import linalg, special

from ...activations import norm_cdf, norm_pdf
from ...errors import InputError
from ...network import TwoLayerNetwork

__all__ = ["UnitReduction", "reduce_network", "nonlinear_part"]

_SQRT_HALF_PI = math.sqrt(math.pi / 2.0)
_LINEAR_BIAS = 3.0  # canonical bias of a unit standing for a linear part: nl(3) = 0.014, Phi(-3) = 1.3e-3


def nonlinear_part(beta) -> np.ndarray:
    """``nl(beta) = ||relu(z) - Phi(beta) (z - beta) - E relu(z)||_2`` for ``z ~ N(beta, 1)``: the L2 distance
    of ``relu(u^T x + beta)`` (unit ``u``, ``x ~ N(0, I)``) from its best affine approximation.

    Even in ``beta`` (``relu(z) = z + relu(-z)``), so it is evaluated at ``t = -|beta|`` with the Mills
    ratio ``R = Phi(t) / phi(t) = sqrt(pi / 2) erfcx(-t / sqrt 2)``, which keeps the relative accuracy for
    large ``|beta|`` (``nl ~ sqrt(2 phi(t) / |t|^3)``).
    """
    t = -np.abs(np.asarray(beta, dtype=np.float64))
    R = _SQRT_HALF_PI * special.erfcx(-t / math.sqrt(2.0))
    phi = norm_pdf(t)
    cdf = phi * R
    m2 = phi * ((1.0 + t * t) * R + t)  # E relu(z)^2
    m1 = phi * (t * R + 1.0)  # E relu(z)
    return np.sqrt(np.maximum(m2 - m1 * m1 - cdf * cdf, 0.0))


@dataclass
class UnitReduction:
    """Result of :func:`reduce_network`.

    Attributes
    ----------
    network : TwoLayerNetwork
        The rewritten network.
    n_units : int
        Its number of hidden units.
    within_limit : bool
        ``n_units <= n_hidden``.
    l2_change : float
        Upper bound on ``||g_in - g_out||_{L2(N(0, I))}`` (exact for steps 1 and 3).
    budget : float
        ``atol``.
    folded : list of dict
        Units of the input moved into the linear part: index, reason, ``nl`` cost.
    merged : list of dict
        Pairs of units merged onto one line: indices, ``"parallel"``/``"antiparallel"``, cost bound.
    flip : dict
        ``linear_norm`` (``||v||`` before flips), ``flipped`` (input indices), ``residual`` (``||r||``),
        ``alternatives`` (other flip sets within the budget), ``unique`` (True, False, or None when the
        null space was too large to enumerate), ``null_dimension``, ``margin`` (full rank: smallest
        ``|s*_i - 1/2|`` of the real solution, 1/2 = undecided).
    linear_units : int
        Units added for a leftover linear part: 0, 1 (a unit with a large bias, when only one is free and
        its nonlinear part fits in the budget, Lemma D.13) or 2 (Claim D.14).
    reason : str
        Why the network has more than ``n_hidden`` units (empty when it does not).
    forced : list of dict
        What ``force=True`` did beyond the budget, with the L2 cost of each action.
    """

    network: TwoLayerNetwork
    n_units: int
    within_limit: bool
    l2_change: float
    budget: float
    folded: list = field(default_factory=list)
    merged: list = field(default_factory=list)
    flip: dict = field(default_factory=dict)
    linear_units: int = 0
    reason: str = ""
    forced: list = field(default_factory=list)

    def as_dict(self) -> dict:
        """JSON-friendly summary (everything but the network)."""
        return {"n_units": self.n_units, "within_limit": self.within_limit, "l2_change": self.l2_change,
                "budget": self.budget, "folded": self.folded, "merged": self.merged, "flip": self.flip,
                "linear_units": self.linear_units, "reason": self.reason, "forced": self.forced}


def _fold_reason(alpha: float, alpha_max: float, r: float, beta: float, r_max: float) -> str:
    if r <= 1e-12 * r_max:
        return f"constant (||w|| = {r:.1e})"
    if abs(alpha) <= 1e-12 * alpha_max:
        return f"zero output weight (|a| ||w|| = {abs(alpha):.1e})"
    p = float(norm_cdf(beta))
    if p < 1e-9:
        return f"never active (P(w.x + b > 0) = {p:.1e})"
    if p > 1.0 - 1e-9:
        return f"always active, i.e. linear (P(w.x + b < 0) = {float(norm_cdf(-beta)):.1e})"
    return "negligible nonlinear part"


def reduce_network(network: TwoLayerNetwork, n_hidden: int, *, atol: float, line_tol: float = 1e-6,
                   max_free: int = 16, force: bool = False) -> UnitReduction:
    """Rewrite a one-output ReLU network with at most ``n_hidden`` units, changing its function by at
    most ``atol`` in ``L2(N(0, I_d))`` (see the module docstring for the four steps and citations).

    Parameters
    ----------
    network : TwoLayerNetwork
        ReLU activation, one output.
    n_hidden : int
        ``m``, the number of units asked for.
    atol : float
        Budget of the total L2 change (>= 0).
    line_tol : float, default 1e-6
        Two units are candidates for a merge when their canonical lines ``(u, beta)`` are within this
        distance (the merge still has to fit in the budget).
    max_free : int, default 16
        Largest null-space dimension ``q`` whose ``2^q`` flip candidates are enumerated.
    force : bool, default False
        Reach at most ``n_hidden`` units whatever the cost: fold the units with the smallest nonlinear part,
        take the flip set with the smallest residual, and give a leftover linear part to one unit with a
        large bias (Lemma D.13) when a unit is free, else drop it. ``l2_change`` then states the cost,
        which may exceed ``atol`` (a start for a refit, not a rewrite of the same function).

    Returns
    -------
    UnitReduction

    Notes
    -----
    A rewrite of a network that already has at most ``n_hidden`` units is kept only when it has fewer
    units than the input: otherwise step 1 may fold units whose nonlinear part fits in the budget only
    to spend the two units of Claim D.14 on the linear part they leave, changing the function for no
    gain (measured at d = 1000, m = 20, N = 10^6, budget 0.36: the two weakest of 20 correctly recovered
    units were folded at L2 cost 0.31 and replaced by a linear pair, max unit error 0.09 -> 0.92). Such
    a network is then rewritten with budget 0 (only exactly free folds and flips).
    """
    if not isinstance(network, TwoLayerNetwork):
        raise InputError(f"network must be a TwoLayerNetwork, got {type(network).__name__}.")
    if network.n_outputs != 1 or network.activation.name != "relu":
        raise InputError("reduce_network needs a ReLU network with one output.")
    if not (np.isfinite(atol) and atol >= 0):
        raise InputError(f"atol must be a finite number >= 0, got {atol!r}.")
    out = _reduce(network, int(n_hidden), float(atol), line_tol, max_free, force)
    if not force and atol > 0 and network.n_hidden <= int(n_hidden) and out.n_units >= network.n_hidden:
        out = _reduce(network, int(n_hidden), 0.0, line_tol, max_free, False)
        out.budget = float(atol)
    return out


def _reduce(network: TwoLayerNetwork, m: int, atol: float, line_tol: float, max_free: int,
            force: bool) -> UnitReduction:
    """The four steps of :func:`reduce_network` (inputs validated there)."""
    W = network.hidden_weights.copy()
    b = network.hidden_bias.copy()
    a = network.output_weights[0].copy()
    c = float(network.output_bias[0])
    d = W.shape[1]
    v = np.zeros(d)
    spent = 0.0
    r = np.linalg.norm(W, axis=1)
    r_max = float(r.max()) if r.size else 0.0
    keep = np.ones(a.shape[0], bool)

    # step 1: linearisable units (Lemma D.13), cheapest first
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = np.where(r > 0, b / np.where(r > 0, r, 1.0), np.sign(b) * np.inf)
    beta = np.where(np.isnan(beta), 0.0, beta)
    finite = np.isfinite(beta)

    def fold_cost(i: int) -> float:
        """``|alpha_i| nl(beta_i)``; 0 for a constant unit (``w = 0``)."""
        return float(abs(a[i]) * r[i] * nonlinear_part(beta[i])) if finite[i] else 0.0

    def fold(i: int) -> None:
        """Move unit ``i``'s best affine approximation ``a Phi(beta) w^T x + a ||w|| c_0(beta)`` into
        ``(v, c)``."""
        nonlocal c
        if finite[i]:
            p = float(norm_cdf(beta[i]))
            v[:] += a[i] * p * W[i]
            c += float(a[i] * (b[i] * p + r[i] * norm_pdf(beta[i])))
        else:  # w = 0: the constant a relu(b)
            c += float(a[i] * max(b[i], 0.0))

    def line_delta(p_: int, q_: int) -> tuple[float, float]:
        """Distance of unit ``q``'s canonical line from unit ``p``'s, and the orientation ``+-1``."""
        up, uq = W[p_] / r[p_], W[q_] / r[q_]
        sg = 1.0 if up @ uq >= 0 else -1.0
        return float(np.linalg.norm(uq - sg * up) + abs(beta[q_] - sg * beta[p_])), sg

    def merge(p_: int, q_: int, sg: float) -> None:
        """``alpha_q relu(+-z_p) -> alpha_q relu(z_p)`` (minus ``alpha_q z_p`` for ``-``) onto unit ``p``."""
        nonlocal c
        alpha_q = a[q_] * r[q_]
        if sg < 0:  # alpha_q relu(-z) = alpha_q relu(z) - alpha_q z, z = u_p x + beta_p
            v[:] -= alpha_q * W[p_] / r[p_]
            c -= float(alpha_q * beta[p_])
        a[p_] += alpha_q / r[p_]

    folded = []
    alpha_max = float(np.max(np.abs(a * r))) if a.size else 0.0
    costs = np.array([fold_cost(i) for i in range(a.shape[0])])
    for i in np.argsort(costs, kind="stable"):
        if spent + costs[i] > atol:
            break
        spent += float(costs[i])
        fold(i)
        keep[i] = False
        folded.append({"index": int(i), "reason": _fold_reason(float(a[i] * r[i]), alpha_max, float(r[i]),
                                                               float(beta[i]), r_max),
                       "l2_cost": float(costs[i])})

    # step 2: units on one line; candidates screened with |u_p . u_q| >= 1 - line_tol (implied by
    # ||u_q -+ u_p|| <= line_tol), then merged cheapest first
    merged = []
    idx = list(np.flatnonzero(keep))
    targets: set = set()
    U = W / np.where(r > 0, r, 1.0)[:, None]
    if len(idx) > 1:
        close = np.argwhere(np.triu(np.abs(U[idx] @ U[idx].T) >= 1.0 - line_tol, 1))
        pairs = []
        for pi, qi in close:
            p_, q_ = idx[pi], idx[qi]
            delta, sg = line_delta(p_, q_)
            if delta <= line_tol:
                pairs.append((abs(a[q_]) * r[q_] * delta, p_, q_, delta, sg))
        removed: set = set()
        for _, p_, q_, delta, sg in sorted(pairs):
            bound = abs(a[q_]) * r[q_] * delta  # a[q_] may have taken merges itself
            if p_ in removed or q_ in removed or spent + bound > atol:
                continue
            spent += bound
            merge(p_, q_, sg)
            removed.add(q_)
            targets.add(p_)
            merged.append({"indices": [int(p_), int(q_)], "kind": "parallel" if sg > 0 else "antiparallel",
                           "l2_bound": float(bound)})
        idx = [i for i in idx if i not in removed]
    # a merge can leave a unit with (nearly) zero output weight: fold it as in step 1
    for i in sorted(targets):
        ci = fold_cost(i)
        if spent + ci <= atol:
            spent += ci
            fold(i)
            idx.remove(i)
            folded.append({"index": int(i), "reason": "zero output weight after a merge", "l2_cost": ci})

    forced = []
    if force:
        # more units than m: take the cheapest of folding a unit (cost |alpha| nl(beta), its affine
        # approximation stays in the linear part) and merging two units onto one line (cost bound
        # |alpha_q| delta), until m units remain
        while len(idx) > m:
            options = [(fold_cost(i), i, -1) for i in idx]
            # merge costs |alpha_q| (||u_q -+ u_p|| + |beta_q -+ beta_p|) for all ordered pairs at once; the
            # chosen one is recomputed exactly below
            Ui, bi = U[idx], beta[idx]
            G = Ui @ Ui.T
            sg = np.where(G >= 0, 1.0, -1.0)
            delta = np.sqrt(np.maximum(2.0 - 2.0 * np.abs(G), 0.0)) + np.abs(bi[None, :] - sg * bi[:, None])
            M = np.abs(a[idx] * r[idx])[None, :] * delta  # M[p, q]: merging q onto p
            np.fill_diagonal(M, np.inf)
            pq = np.unravel_index(int(np.argmin(M)), M.shape)
            options.append((float(M[pq]), idx[pq[0]], idx[pq[1]]))
            _, i, j = min(options)
            cost = fold_cost(i) if j < 0 else abs(a[j]) * r[j] * line_delta(i, j)[0]
            spent += float(cost)
            if j < 0:
                fold(i)
                idx.remove(i)
                forced.append({"index": int(i), "action": "folded into the linear part", "l2_cost": float(cost)})
            else:
                merge(i, j, line_delta(i, j)[1])
                idx.remove(j)
                targets.add(i)
                forced.append({"indices": [int(i), int(j)], "action": "merged onto one line",
                               "l2_cost": float(cost)})
        # a merged unit whose nonlinear part is smaller than the linear part frees its slot for the linear
        # part (e.g. the two units of Claim D.14 merge into a unit with output weight ~ 0)
        for i in sorted(targets & set(idx)):
            ci = fold_cost(i)
            if ci < np.linalg.norm(v):
                spent += ci
                fold(i)
                idx.remove(i)
                forced.append({"index": int(i), "action": "merged unit folded into the linear part",
                               "l2_cost": ci})

    # step 3: sign flips explaining the linear part (Theorem 3.4, corrected eq. (2))
    idx = np.array(idx, dtype=int)
    flip = _resolve_flips(a[idx], b[idx], W[idx], v, c, atol - spent, max_free)
    s = np.zeros(idx.size)
    chosen = flip["flipped_local"] if flip["flipped_local"] is not None else (flip["best_local"] if force else None)
    if chosen is not None:
        s[chosen] = 1.0
    flip_info = {k: val for k, val in flip.items() if k not in ("flipped_local", "best_local")}
    flip_info["flipped"] = [int(idx[j]) for j in np.flatnonzero(s)]
    flip_info["alternatives"] = [[int(idx[j]) for j in alt] for alt in flip["alternatives"]]
    sign = 1.0 - 2.0 * s
    v_res = v + (a[idx] * s) @ W[idx] if idx.size else v.copy()
    c_res = c + float((a[idx] * s) @ b[idx]) if idx.size else c
    W_out, b_out, a_out = W[idx] * sign[:, None], b[idx] * sign, a[idx].copy()
    res = float(np.linalg.norm(v_res))
    linear_units = 0
    one_unit = _linear_unit_bias(res, atol - spent) if idx.size + 2 > m and idx.size < m else None
    if res <= atol - spent:
        spent += res
    elif one_unit is not None or (force and idx.size < m):
        # step 4, one unit free: a unit with a large bias B is linear up to lambda nl(B) (Lemma D.13), with
        # slope lambda Phi(B) = ||r|| and the constant lambda c_0(B) taken off the output bias
        B = one_unit if one_unit is not None else _LINEAR_BIAS
        lam = res / float(norm_cdf(B))
        W_out = np.vstack([W_out, v_res / res])
        b_out = np.concatenate([b_out, [B]])
        a_out = np.concatenate([a_out, [lam]])
        c_res -= lam * float(B * norm_cdf(B) + norm_pdf(B))
        cost = lam * float(nonlinear_part(B))
        spent += cost
        linear_units = 1
        if one_unit is None:
            forced.append({"action": f"linear part as one unit with bias {B:g}", "l2_cost": cost})
    elif force and idx.size + 2 > m:
        spent += res
        forced.append({"action": "linear part dropped", "l2_cost": res})
    else:  # step 4: Claim D.14, lambda_0 relu(w_0 x) - lambda_0 relu(-w_0 x) = v_res^T x
        w0 = v_res / res
        W_out = np.vstack([W_out, w0, -w0])
        b_out = np.concatenate([b_out, [0.0, 0.0]])
        a_out = np.concatenate([a_out, [res, -res]])
        linear_units = 2
    if W_out.shape[0] == 0:  # a constant function: one zero unit carries nothing
        W_out, b_out, a_out = np.zeros((1, d)), np.zeros(1), np.zeros(1)
    net = TwoLayerNetwork(W_out, b_out, a_out[None, :], np.array([c_res]))
    n_units = int(W_out.shape[0])
    reason = ""
    if n_units > m:
        if linear_units:
            reason = (f"{idx.size} units and a linear part of norm {res:.3g} that no sign-flip set explains "
                      f"(smallest residual {flip_info.get('residual', res):.3g} > budget "
                      f"{max(atol - spent, 0.0):.3g}); the linear part takes two units (Claim D.14)")
        else:
            reason = (f"{idx.size} units remain, none of them linearisable or on a common line within the "
                      f"L2 budget {atol:.3g}")
    return UnitReduction(net, n_units, n_units <= m, float(spent), float(atol), folded, merged, flip_info,
                         linear_units, reason, forced)


def _linear_unit_bias(res: float, budget: float) -> float | None:
    """Smallest bias ``B`` in ``[3, 12]`` for which one unit ``(res / Phi(B)) relu(u^T x + B)`` is within
    ``budget`` of the linear function ``res u^T x`` (plus a constant): cost ``res nl(B) / Phi(B)``."""
    grid = np.linspace(_LINEAR_BIAS, 12.0, 91)
    ok = np.flatnonzero(res * nonlinear_part(grid) / norm_cdf(grid) <= budget)
    return float(grid[ok[0]]) if ok.size else None


def _resolve_flips(a: np.ndarray, b: np.ndarray, W: np.ndarray, v: np.ndarray, c: float, budget: float,
                   max_free: int) -> dict:
    """Flip sets ``s in {0, 1}^k`` with ``||M s + v|| <= budget``, ``M = [a_i w_i]`` (columns)."""
    k = a.shape[0]
    out = {"linear_norm": float(np.linalg.norm(v)), "flipped_local": None, "best_local": [],
           "residual": float(np.linalg.norm(v)),
           "alternatives": [], "unique": True, "null_dimension": 0, "margin": None}
    if k == 0:
        return out
    # run also when v ~ 0: the empty set explains it, but another flip set F with sum_F a_i w_i = 0
    # (the ambiguity of Theorem 3.4) would explain it as well
    M = (a[:, None] * W).T  # (d, k)
    Q, R, piv = linalg.qr(M, mode="economic", pivoting=True)
    diag = np.abs(np.diag(R))
    rank = int(np.sum(diag > max(M.shape) * np.finfo(float).eps * (diag[0] if diag.size else 0.0)))
    q = k - rank
    out["null_dimension"] = q
    basic, free = piv[:rank], piv[rank:]
    if q == 0:
        s_real = linalg.lstsq(M, -v)[0]
        s = np.clip(np.rint(s_real), 0.0, 1.0)
        out["margin"] = float(np.min(np.abs(s_real - 0.5)))
        cands = [s]
        # the next-best flip set: the least decided coordinate rounded the other way
        j = int(np.argmin(np.abs(s_real - 0.5)))
        s2 = s.copy()
        s2[j] = 1.0 - s2[j]
        cands.append(s2)
    elif q <= max_free:
        # s_B = -R_BB^{-1} Q^T (v + M_F s_F) for every s_F in {0, 1}^q, rounded
        SF = np.array(list(itertools.product((0.0, 1.0), repeat=q)))
        rhs = -(Q.T @ v)[:rank, None] - Q.T[:rank] @ M[:, free] @ SF.T
        SB = linalg.solve_triangular(R[:rank, :rank], rhs)
        cands = []
        for col in range(SF.shape[0]):
            s = np.zeros(k)
            s[free] = SF[col]
            s[basic] = np.clip(np.rint(SB[:, col]), 0.0, 1.0)
            cands.append(s)
    else:
        # too many free coordinates to enumerate: the rounded minimum-norm solution only
        s_real = linalg.lstsq(M, -v)[0]
        cands = [np.clip(np.rint(s_real), 0.0, 1.0)]
        out["unique"] = None
    C = np.array(cands)
    res = np.linalg.norm(C @ M.T + v, axis=1)
    ok = np.flatnonzero(res <= budget)
    if ok.size == 0:
        best = int(np.argmin(res))
        out["residual"] = float(res[best])
        out["best_local"] = np.flatnonzero(C[best]).tolist()
        return out
    # unique flip sets within the budget; the smallest output bias first (no output bias in the paper's
    # model: the second equation of Theorem 3.4)
    sets = {tuple(np.flatnonzero(C[i]).tolist()): i for i in ok}
    bias = {key: abs(c + float(a[list(key)] @ b[list(key)])) if key else abs(c) for key in sets}
    order = sorted(sets, key=lambda key: (bias[key], res[sets[key]]))
    best = order[0]
    out["flipped_local"] = out["best_local"] = list(best)
    out["residual"] = float(res[sets[best]])
    out["alternatives"] = [list(key) for key in order[1:]]
    if out["unique"] is not None:
        out["unique"] = len(order) == 1
    return out

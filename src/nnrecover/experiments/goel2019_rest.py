"""Experiments for the rest of Goel & Panigrahy (2019): Section 3 and the structured results.

The paper reports no experiments; these check its claims numerically.

``goel2019-delta``       Section 3 (Theorem 7, Corollary 1): step units, orthogonal ``W*``, ``P`` = sum of
                     pairwise products (no linear terms). Panel 1: the measured ``C_2`` at the true
                     directions (with standard errors) against Corollary 1's ``phi(t) Q_i(mu, .., mu)`` and
                     the exact finite-``eps`` expectation, and ``|C_2|`` at directions at least 30 degrees
                     from every unit, for several thresholds. Panel 2: ``C_2`` around the circle for
                     ``n = 2`` with the units and the test level. Panel 3: the net search's recovery angle
                     for ``n = 2`` and ``n = 3`` against the net resolution.
``goel2019-structures``  One panel per structured result, assumption met vs violated: Appendix B.1 (``l = 4``;
                     ``u_hat_4 != 0`` vs ``t = sqrt(3)`` where ``u_hat_4 = 0``), Theorem 10 (``F`` on the
                     circle through two units: maxima at the units vs the mixed point), Theorem 8 (sorted
                     correlations and the edge threshold: gap vs merged units), Theorem 9 (the maximiser's
                     coordinates: one group vs two merged groups; experimental), Appendix B.6 (error
                     against the number of f-biased samples) and Appendix B.7 (the whitened quartic at each
                     recovered direction: positive vs a negative one, refused).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from .._validation import check_random_state
from .registry import experiment

__all__ = ["delta_experiment", "structures_experiment"]


def _figure(n_panels: int, width: float = 4.2):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * n_panels, 3.9), layout="constrained")
    return fig, np.atleast_1d(fig.subplots(1, n_panels))


def _pairs_network(n: int, d: int, t: float, gen, pairs=None):
    from scipy.stats import ortho_group

    from ..learners.goel2019.model import HighThresholdNetwork

    W = ortho_group.rvs(n, random_state=gen)[:d] if n > 1 else np.ones((1, 1))
    pairs = list(itertools.combinations(range(d), 2)) if pairs is None else pairs
    P = {tuple(int(k in S) for k in range(d)): 1.0 for S in pairs}
    P[(0,) * d] = 0.0
    return HighThresholdNetwork(W, t, "step", P), W


@experiment("goel2019-delta", paper="goel2019",
            description="Goel-Panigrahy Section 3: delta' correlation C_2 at the units vs Corollary 1, far "
                        "directions, net search for n = 2, 3")
def delta_experiment(*, rng: Any = None, quick: bool = False, thresholds=None, n_samples: int | None = None):
    """Theorem 7 / Corollary 1: the delta' test and the brute-force net search.

    Parameters
    ----------
    rng : seed
    quick : bool
        ``2 x 10^5`` samples, one threshold, coarse nets (a smoke run).
    thresholds : sequence of float, default ``(0.5, 1.0, 1.5)`` (quick: ``(1.0,)``)
    n_samples : int, default ``10^6`` (quick: ``2 x 10^5``)

    Returns
    -------
    (pandas.DataFrame, matplotlib.figure.Figure)
        Rows ``kind`` in {"unit", "far", "circle", "search", "relu"} with the measured value, its standard
        error and (units, relu) the Corollary 1 / slope-jump prediction and the exact finite-eps expectation.
    """
    import pandas as pd

    from ..learners.goel2019.correlation import (corollary1_prediction, delta_double_prime_correlation,
                                                 delta_prime_correlation, delta_prime_search,
                                                 expected_band_statistic)

    gen = check_random_state(rng)
    ts = tuple(thresholds) if thresholds is not None else ((1.0,) if quick else (0.5, 1.0, 1.5))
    N = int(n_samples) if n_samples is not None else (200_000 if quick else 1_000_000)
    eps, band = 0.02, 0.01
    rows = []
    for t in ts:
        net, W = _pairs_network(3, 3, t, gen)
        X = gen.standard_normal((N, 3))
        y = net.predict(X)
        st = delta_prime_correlation(X, y, W, t, eps=eps, band=band)
        pred = corollary1_prediction(net)
        for i in range(3):
            exact = expected_band_statistic(net, i, [t + eps, t - eps], [1, -1], band=band)
            rows.append(dict(kind="unit", threshold=t, unit=i, value=st.values[i], se=st.standard_errors[i],
                             prediction=pred[i], exact=exact))
        far = gen.standard_normal((400, 3))
        far /= np.linalg.norm(far, axis=1, keepdims=True)
        far = far[np.max(far @ W.T, axis=1) < math.cos(math.radians(30))]
        sf = delta_prime_correlation(X, y, far, t, eps=eps, band=band)
        rows.append(dict(kind="far", threshold=t, value=float(np.mean(np.abs(sf.values))),
                         se=float(np.mean(sf.standard_errors)), prediction=0.0))
    # n = 2: C_2 around the circle, and the net search for n = 2, 3
    t = 1.0
    for n, res in ((2, 0.05), (3, 0.1 if not quick else 0.15)):
        net, W = _pairs_network(n, n, t, gen)
        X = gen.standard_normal((N, n))
        y = net.predict(X)
        eps3 = 0.8 * corollary1_prediction(net).min() / (math.exp(-0.5 * t * t) / math.sqrt(2 * math.pi))
        out = delta_prime_search(X, y, t, resolution=res, eps3=eps3)
        if n == 2:
            th = np.arctan2(out.net[:, 1], out.net[:, 0])
            for a, v, s in zip(th, out.net_values, out.net_standard_errors):
                rows.append(dict(kind="circle", threshold=t, angle=a, value=v, se=s, level=out.level,
                                 unit_angles=tuple(np.arctan2(W[:, 1], W[:, 0]))))
        ang = np.arccos(np.clip((out.directions @ W.T).max(axis=0), -1, 1)) if out.directions.size else \
            np.full(n, np.nan)
        for i, a in enumerate(ang):
            rows.append(dict(kind="search", n=n, unit=i, angle=a, resolution=res, found=out.directions.shape[0]))
    # Appendix C.1 (relu): C_3 at the units against the corrected slope-jump prediction, as eps shrinks
    from ..learners.goel2019.model import HighThresholdNetwork

    net, W = _pairs_network(3, 3, t, gen)
    net = HighThresholdNetwork(W, t, "relu", net.upper)
    X = gen.standard_normal((N, 3))
    y = net.predict(X)
    jump = corollary1_prediction(net)
    for eps_r in ((0.2,) if quick else (0.1, 0.2, 0.3)):
        e2, b = eps_r / 4, eps_r / 8
        st = delta_double_prime_correlation(X, y, W, t, eps=eps_r, eps2=e2, band=b)
        pos = [t + eps_r + e2, t + eps_r - e2, t - eps_r + e2, t - eps_r - e2]
        wts = np.array([1.0, -1.0, -1.0, 1.0]) / (2 * e2)
        for i in range(3):
            exact = expected_band_statistic(net, i, pos, wts, band=b)
            rows.append(dict(kind="relu", eps=eps_r, unit=i, value=st.values[i], se=st.standard_errors[i],
                             prediction=jump[i], exact=exact))
    for eps_r in np.linspace(0.01, 0.3, 30):                  # the exact expectation alone, down to eps -> 0
        e2, b = eps_r / 4, eps_r / 8
        pos = [t + eps_r + e2, t + eps_r - e2, t - eps_r + e2, t - eps_r - e2]
        rows.append(dict(kind="relu_exact", eps=eps_r, prediction=jump[0],
                         exact=expected_band_statistic(net, 0, pos, np.array([1.0, -1.0, -1.0, 1.0]) / (2 * e2),
                                                       band=b)))
    df = pd.DataFrame(rows)

    fig, ax = _figure(4)
    u = df[df.kind == "unit"]
    f = df[df.kind == "far"]
    x = np.arange(len(u))
    ax[0].errorbar(x, u.value, yerr=2 * u.se, fmt="o", label="measured C_2 at w_i (2 se)")
    ax[0].plot(x, u.prediction, "k_", ms=14, label="Corollary 1: phi(t) Q_i(mu)")
    ax[0].plot(x, u.exact, "r.", label="exact, finite eps")
    for j, (_, r) in enumerate(f.iterrows()):
        ax[0].plot([3 * j - 0.3, 3 * j + 2.3], [r.value, r.value], "g--", label="mean |C_2|, far" if j == 0 else None)
    ax[0].set_xticks(x, [f"t={r.threshold:g}\nunit {r.unit}" for _, r in u.iterrows()], fontsize=7)
    ax[0].set_title("delta' correlation at the units")
    ax[0].legend(fontsize=7)
    c = df[df.kind == "circle"].sort_values("angle")
    if len(c):
        ax[1].plot(c.angle, c.value, "-", lw=1)
        ax[1].fill_between(c.angle, c.value - 2 * c.se, c.value + 2 * c.se, alpha=0.3)
        ax[1].axhline(c.level.iloc[0], color="k", ls=":", label="test level phi(t) eps_3/2")
        for a in c.unit_angles.iloc[0]:
            ax[1].axvline(a, color="r", ls="--", lw=0.8)
        ax[1].set_xlabel("direction angle (rad); red: units")
        ax[1].set_title("C_2 around the circle, n = 2")
        ax[1].legend(fontsize=7)
    s = df[df.kind == "search"]
    for n in sorted(s.n.dropna().unique()):
        sn = s[s.n == n]
        ax[2].plot(sn.unit, sn.angle, "o", label=f"n = {int(n)} (resolution {sn.resolution.iloc[0]:g})")
        ax[2].axhline(sn.resolution.iloc[0], ls=":", color=ax[2].lines[-1].get_color())
    ax[2].set_xlabel("unit")
    ax[2].set_ylabel("angle to the recovered direction (rad)")
    ax[2].set_title("net search (Theorem 7)")
    ax[2].legend(fontsize=7)
    r = df[df.kind == "relu"]
    g = r.groupby("eps")
    ax[3].errorbar(g.value.mean().index, g.value.mean(), yerr=2 * g.se.mean() / math.sqrt(3), fmt="o",
                   label="measured C_3 (mean of units, 2 se)")
    ex = df[df.kind == "relu_exact"]
    ax[3].plot(ex.eps, ex.exact, "r-", label="exact expectation of C_3^")
    ax[3].axhline(r.prediction.iloc[0], color="k", ls=":", label="slope jump phi(t) E[dP/dX_i] (eps -> 0)")
    ax[3].set_xlabel("eps")
    ax[3].set_title("relu delta'' (Appendix C.1, corrected Lemma 19)", fontsize=9)
    ax[3].legend(fontsize=7)
    return df, fig


@experiment("goel2019-structures", paper="goel2019",
            description="Goel-Panigrahy structured results (B.1, Theorems 8-10, B.6, B.7): assumption met vs "
                        "violated, one panel each")
def structures_experiment(*, rng: Any = None, quick: bool = False):
    """One panel per structured result of the paper, with its stated condition met and violated.

    Parameters
    ----------
    rng : seed
    quick : bool
        Smaller samples (a smoke run).

    Returns
    -------
    (pandas.DataFrame, matplotlib.figure.Figure)
        Rows with ``result``, ``condition`` ("met" / "violated"), ``x`` and ``value`` (the plotted data).
    """
    import pandas as pd
    from scipy.stats import ortho_group

    from ..learners.goel2019.higher_degree import assumption4_check
    from ..learners.goel2019.model import HighThresholdNetwork
    from ..learners.goel2019.orthonormal import EvenActivationNetwork, PowerSumForm, theorem10_condition
    from ..learners.goel2019.sigmoid import RejectionOracle, sigmoid_biased_step1
    from ..learners.goel2019.structured import (ExponentialBinaryNetwork, correlation_graph,
                                                group_sum_maximization, theorem8_condition)

    gen = check_random_state(rng)
    rows = []
    theta = np.linspace(0, math.pi, 181)

    # Appendix B.1: F(z) = u_hat_4 sum c_i (w_i . z)^4 on the circle through w_1, w_2
    for cond, t in (("met", 2.0), ("violated", math.sqrt(3.0))):
        W = ortho_group.rvs(3, random_state=gen)
        net = HighThresholdNetwork(W, t, "step", {(1, 0, 0): 1.0, (0, 1, 0): 0.7, (0, 0, 1): 1.3})
        src = PowerSumForm.from_network(net, 4)
        Z = np.cos(theta)[None, :] * W[0][:, None] + np.sin(theta)[None, :] * W[1][:, None]
        for a, v in zip(theta, src.value(Z)):
            rows.append(dict(result="B.1", condition=cond, x=a, value=v))

    # Theorem 10: cosh units, c_ij = 0.1 (alpha_i + alpha_j > gamma_ij) vs 1.0 (violated)
    for cond, cij in (("met", 0.1), ("violated", 1.0)):
        W = ortho_group.rvs(3, random_state=gen)
        P = {(1, 0, 0): 1.0, (0, 1, 0): 1.0, (0, 0, 1): 1.0, (1, 1, 0): cij, (0, 1, 1): cij, (1, 0, 1): cij}
        q = EvenActivationNetwork(W, np.cosh, P).quartic_form()
        margin = float(np.nanmin(theorem10_condition(q.alpha, q.gamma)["margins"]))
        Z = np.cos(theta)[None, :] * W[0][:, None] + np.sin(theta)[None, :] * W[1][:, None]
        for a, v in zip(theta, q.value(Z)):
            rows.append(dict(result="Theorem 10", condition=cond, x=a, value=v, margin=margin))

    # Theorem 8: sorted alpha_ij (population) and tau_edge
    n, d, k = 12, 3, 3
    perm = gen.permutation(n)
    Wb = np.zeros((d, n))
    for i in range(d):
        Wb[i, perm[k * i:k * (i + 1)]] = 1.0
    for cond, big in (("met", 0.2), ("violated", 3.0)):
        P = {tuple(int(j == i) for j in range(d)): 1.0 for i in range(d)}
        for i, j in itertools.combinations(range(d), 2):
            P[tuple(int(m in (i, j)) for m in range(d))] = 0.2
        P[(1, 1, 0)] = big
        net8 = ExponentialBinaryNetwork(Wb, 0.5, 1.0, P)
        A = net8.population_correlations()
        g = correlation_graph(A)
        vals = np.sort(A[np.triu_indices(n, 1)])
        ok = {tuple(r) for r in g.weights} == {tuple(r) for r in Wb}
        for j, v in enumerate(vals):
            rows.append(dict(result="Theorem 8", condition=cond, x=j, value=v, tau=g.tau_edge, recovered=ok,
                             ratio=theorem8_condition(net8)["ratio"]))

    # Theorem 9 (experimental): maximiser coordinates, singleton-dominated vs a coupling product term
    W9 = np.zeros((3, 6))
    for i in range(3):
        W9[i, [i, i + 3]] = 1.0
    for cond, pair in (("met", 1e-4), ("violated", 0.05)):
        net9 = ExponentialBinaryNetwork(W9, 1.0, 0.0, {(1, 0, 0): 1.0, (0, 1, 0): 1.0, (0, 0, 1): 1.0,
                                                       (1, 1, 0): pair})
        res = group_sum_maximization(net9, 3, rng=gen)
        for r, S in enumerate(res.supports):
            rows.append(dict(result="Theorem 9", condition=cond, x=r, value=len(S)))

    # Appendix B.6: error vs number of biased samples (sigmoid, t = 4)
    W6 = ortho_group.rvs(3, random_state=gen)
    net6 = HighThresholdNetwork(W6, 4.0, "sigmoid", {(1, 0, 0): 1.0, (0, 1, 0): 0.7, (0, 0, 1): 1.3})
    oracle = RejectionOracle(net6)
    for m in ((40_000, 80_000) if quick else (40_000, 160_000, 640_000)):
        X, info = oracle.sample(m, rng=gen)
        r6 = sigmoid_biased_step1(X, 3, 4.0, scale=info["mean_f"], rng=gen)
        err = float(np.arccos(np.clip(np.abs(r6.weights @ W6.T).max(axis=0), -1, 1)).max())
        rows.append(dict(result="B.6", condition="met", x=m, value=err))

    # Appendix B.7: scaled a_i^(4)/u_hat_4 per unit, Assumption 4 met vs violated
    W7 = ortho_group.rvs(3, random_state=gen)
    for cond, b in (("met", 0.5), ("violated", -0.9)):
        P = {(1, 0, 0): 1.0, (0, 1, 0): 1.0, (0, 0, 1): 1.3, (2, 0, 0): 0.5, (0, 2, 0): b, (0, 0, 3): 0.2}
        chk = assumption4_check(HighThresholdNetwork(W7, 2.0, "relu", P))
        for i, v in enumerate(chk["scaled4"] / chk["scaled2"] ** 2):
            rows.append(dict(result="B.7", condition=cond, x=i, value=v))
    df = pd.DataFrame(rows)

    fig, ax = _figure(6, width=3.4)
    style = {"met": "-", "violated": "--"}
    for j, name in enumerate(("B.1", "Theorem 10")):
        for cond in ("met", "violated"):
            s = df[(df.result == name) & (df.condition == cond)]
            ax[j].plot(s.x, s.value, style[cond], label=cond)
        ax[j].set_xlabel("angle from w_1 towards w_2 (rad)")
        ax[j].set_title(f"{name}: F on the circle" + (" (t = sqrt 3: u_hat_4 = 0)" if name == "B.1" else ""),
                        fontsize=8)
        ax[j].legend(fontsize=7)
    for cond in ("met", "violated"):
        s = df[(df.result == "Theorem 8") & (df.condition == cond)]
        line = ax[2].plot(s.x, s.value, "o" + style[cond], ms=3, label=f"{cond} (recovered: {bool(s.recovered.iloc[0])})")
        ax[2].axhline(s.tau.iloc[0], color=line[0].get_color(), ls=":")
    ax[2].set_title("Theorem 8: sorted alpha_ij, tau_edge", fontsize=8)
    ax[2].legend(fontsize=7)
    for off, cond in ((-0.2, "met"), (0.2, "violated")):
        s = df[(df.result == "Theorem 9") & (df.condition == cond)]
        ax[3].bar(s.x + off, s.value, width=0.4, label=cond)
    ax[3].set_xlabel("search")
    ax[3].set_ylabel("support size found (true: 2)")
    ax[3].set_title("Theorem 9 (experimental, box B = 2)", fontsize=8)
    ax[3].legend(fontsize=7)
    s = df[df.result == "B.6"]
    ax[4].loglog(s.x, s.value, "o-")
    ax[4].set_xlabel("f-biased samples")
    ax[4].set_ylabel("max angle (rad)")
    ax[4].set_title("B.6 / Theorem 13: sigmoid, t = 4", fontsize=8)
    for off, cond in ((-0.2, "met"), (0.2, "violated")):
        s = df[(df.result == "B.7") & (df.condition == cond)]
        ax[5].bar(s.x + off, s.value, width=0.4, label=cond)
    ax[5].axhline(0, color="k", lw=0.8)
    ax[5].set_xlabel("unit")
    ax[5].set_title("B.7: whitened quartic (Assumption 4)", fontsize=8)
    ax[5].legend(fontsize=7)
    return df, fig

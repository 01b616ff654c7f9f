"""Experiments for Goel & Panigrahy (2019): the main line (Step 1, Step 2), Section 3 and the structured
results. The paper reports no experiments; these check its claims numerically.

``goel2019-threshold``  Lemma 2 in action: ``d = 10`` step units, ``W*`` with orthonormal rows (option
                        ``condition_number``),
                        ``P`` = positive linear part (``c_i ~ U[0.5, 1.5]``) + ``d`` random pairwise and ``d``
                        random triple products with ``|c_S| <= 1``; Step 1 (default route, ``refine=False``) from
                        ``N`` Gaussian samples for ``t in {2, 2.5, 3, 3.5}``. The largest unit angle falls with
                        ``N`` and levels off at a bias floor that shrinks as ``t`` grows. Points where Step 1
                        refuses (too few units fired for ``M`` to be positive definite) are reported as refused.
                        The exact floor (Step 1 on the population moments, product-Hermite formula) is
                        reported with each point and drawn dashed. Each point also reports the learner's
                        own estimate of its largest angle (``estimated_max_angle``, certificate
                        ``unit_angles``: split halves, blind to that floor) and the certificate's verdict.
``goel2019-routes``     The three Step 1 routes (whitening + tensor power iteration, the one-by-one landscape
                        of Section 2.1, the simultaneous landscape of Appendix B.4) on the same samples: error,
                        time, samples used (all and active).

The samples are generated chunk by chunk and streamed into the learner, so ``N = 10^7`` needs only the
active rows in memory.

``goel2019-refine`` (Step 2 below the Step 1 floor) and ``goel2019-halfspaces`` (Theorem 6) are described
in their section below; ``goel2019-certificate`` calibrates the learner's certificate ``unit_angles``.
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
import time
import warnings
from typing import Any, Sequence

import numpy as np

from .._validation import check_positive_int, check_random_state
from ..errors import CertificateWarning, NNRecoverError
from ..learners.goel2019 import (
    HighThresholdLearner,
    HighThresholdNetwork,
    PopulationMoments,
    SampleMoments,
    UpperPolynomial,
    random_unit_weights,
    random_upper_polynomial,
    step1,
    threshold_activation,
)
from ..learners.goel2019.correlation import (
    corollary1_prediction,
    delta_double_prime_correlation,
    delta_prime_correlation,
    delta_prime_search,
    expected_band_statistic,
)
from ..learners.goel2019.halfspaces import (
    HalfspaceIntersectionClassifier,
    halfspace_labels,
)
from ..learners.goel2019.higher_degree import assumption4_check
from ..learners.goel2019.orthonormal import (
    EvenActivationNetwork,
    PowerSumForm,
    theorem10_condition,
)
from ..learners.goel2019.sigmoid import RejectionOracle, sigmoid_biased_step1
from ..learners.goel2019.step2 import (
    ConditionalSlabSampler,
    SampleSlabs,
    refine_estimate,
)
from ..learners.goel2019.structured import (
    ExponentialBinaryNetwork,
    correlation_graph,
    group_sum_maximization,
    theorem8_condition,
)
from ..metrics import weight_error
from .registry import experiment

__all__ = ["delta_experiment", "structures_experiment", "threshold_experiment", "routes_experiment", "gp19_teacher", "refine_experiment", "halfspaces_experiment",
           "certificate_experiment"]


def gp19_teacher(d: int, t: float, *, activation: str = "step", condition_number: float = 1.5, seed: int = 0):
    """The teacher of both experiments: unit rows with the given condition number, ``P`` = linear + products."""

    gen = np.random.default_rng(seed)
    W = random_unit_weights(d, condition_number=condition_number, rng=gen)
    P = random_upper_polynomial(d, coefficient_bound=1.0, rng=gen)
    return HighThresholdNetwork(W, t, activation, P)


def _chunks(net, n: int, seed: int, chunk: int = 200_000):
    """Re-iterable stream of ``(X, f(X))`` chunks with a fixed seed (the same samples on every pass)."""

    class _Stream:
        def __iter__(self):
            gen = np.random.default_rng(seed)
            left = n
            while left > 0:
                m = min(chunk, left)
                X = gen.standard_normal((m, net.n_inputs))
                yield X, net.predict(X)
                left -= m

    return _Stream()


def _fit(net, n: int, seed: int, method: str) -> dict:

    t0 = time.perf_counter()
    est = HighThresholdLearner(net.n_hidden, activation=net.activation, threshold=net.threshold, method=method,
                               refine=False, random_state=seed)
    try:
        with warnings.catch_warnings():
            # the certificate's verdict is a column of the results (the sweep goes below its bound on purpose)
            warnings.simplefilter("ignore", CertificateWarning)
            est.fit(_chunks(net, n, seed))
    except NNRecoverError as exc:
        return {"max_angle": np.nan, "refused": type(exc).__name__ + ": " + str(exc)[:120],
                "time": time.perf_counter() - t0, "n_active": np.nan}
    err = weight_error(est.hidden_weights_, net.hidden_weights)
    cert = est.diagnostics_["certificates"]["unit_angles"]
    return {"max_angle": float(err["max_angle"]), "refused": "", "time": time.perf_counter() - t0,
            "n_active": est.diagnostics_["n_active"],
            "mean_abs_residual": est.diagnostics_["lemmas"]["lemma2"]["mean_abs_residual"],
            "estimated_max_angle": float(np.max(cert["detail"]["unit_angles"])),
            "certificate_passed": bool(cert["passed"])}


@experiment("goel2019-threshold", paper="goel2019",
            description="Goel-Panigrahy Step 1: max unit angle vs N for t in {2, 2.5, 3, 3.5} (falls, then a "
                        "bias floor that shrinks with t; Lemma 2)")
def threshold_experiment(*, rng: Any = None, quick: bool = False, n_hidden: int | None = None,
                         thresholds: Sequence[float] | None = None, n_values: Sequence[int] | None = None,
                         trials: int | None = None, method: str = "power", condition_number: float = 1.0):
    """Error against ``N`` per threshold (see the module docstring).

    Options: ``n_hidden`` (default 10; quick 4), ``thresholds`` (default (2, 2.5, 3, 3.5); quick (2, 3)),
    ``n_values`` (default 10^4 .. 10^7; quick (2*10^4, 8*10^4)), ``trials`` (teachers per point, default 2;
    quick 1), ``method`` (the Step 1 route), ``condition_number`` of ``W*`` (default 1: orthonormal rows, for
    which the exact population error, the bias floor of Lemma 2, is computed by the product-Hermite formula
    and reported as ``population_floor``; NaN otherwise).
    """
    import pandas as pd  # deferred: pandas is slow to import

    gen = check_random_state(rng)
    d = check_positive_int(n_hidden or (4 if quick else 10), "n_hidden")
    thresholds = thresholds or ((2.0, 3.0) if quick else (2.0, 2.5, 3.0, 3.5))
    n_values = n_values or ((20_000, 80_000) if quick else (10_000, 30_000, 100_000, 300_000, 1_000_000,
                                                           3_000_000, 10_000_000))
    trials = check_positive_int(trials or (1 if quick else 2), "trials")
    teachers = [int(gen.integers(2**31)) for _ in range(trials)]
    rows = []
    for t in thresholds:
        for trial, seed in enumerate(teachers):
            net = gp19_teacher(d, float(t), seed=seed, condition_number=condition_number)
            floor = _population_floor(net, method) if condition_number == 1.0 else np.nan
            for n in n_values:
                rows.append(dict(t=float(t), n=int(n), trial=trial, d=d, population_floor=floor,
                                 **_fit(net, int(n), int(gen.integers(2**31)), method)))
    df = pd.DataFrame(rows)
    return df, _threshold_figure(df)


def _population_floor(net, method: str) -> float:
    """Max unit angle of Step 1 on the exact population moments (orthonormal ``W*``): the bias floor."""

    try:
        res = step1(PopulationMoments(net), net.n_hidden, method=method, rng=0)
    except NNRecoverError:
        return np.nan
    return float(weight_error(res.weights, net.hidden_weights)["max_angle"])


def _threshold_figure(df):
    from matplotlib.figure import Figure  # deferred: matplotlib is slow to import

    fig = Figure(figsize=(6.0, 4.2), layout="constrained")
    ax = fig.subplots()
    for t, grp in df.groupby("t"):
        med = grp.groupby("n")["max_angle"].median()
        line, = ax.loglog(med.index, med.values, "o-", label=f"t = {t:g}")
        floor = grp["population_floor"].median()
        if np.isfinite(floor):
            ax.axhline(floor, color=line.get_color(), ls="--", lw=1)
    ax.set_xlabel("samples N")
    ax.set_ylabel("max unit angle (rad), median over teachers")
    ax.set_title("Goel-Panigrahy Step 1: error vs N (dashed: exact population floor)")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    return fig


@experiment("goel2019-routes", paper="goel2019",
            description="Goel-Panigrahy Step 1 routes side by side (power / landscape / simultaneous): error, "
                        "time, samples")
def routes_experiment(*, rng: Any = None, quick: bool = False, n_hidden: int | None = None,
                      threshold: float | None = None, n_samples: int | None = None, trials: int | None = None,
                      methods: Sequence[str] = ("power", "landscape", "simultaneous")):
    """The three Step 1 routes on the same samples (see the module docstring).

    Options: ``n_hidden`` (default 10; quick 4), ``threshold`` (default 3), ``n_samples`` (default 10^6;
    quick 5*10^4), ``trials`` (default 3; quick 1), ``methods``.
    """
    import pandas as pd  # deferred: pandas is slow to import

    gen = check_random_state(rng)
    d = check_positive_int(n_hidden or (4 if quick else 10), "n_hidden")
    t = float(3.0 if threshold is None else threshold)
    n = check_positive_int(n_samples or (50_000 if quick else 1_000_000), "n_samples")
    trials = check_positive_int(trials or (1 if quick else 3), "trials")
    rows = []
    for trial in range(trials):
        net = gp19_teacher(d, t, seed=int(gen.integers(2**31)))
        seed = int(gen.integers(2**31))
        for method in methods:
            rows.append(dict(method=method, trial=trial, d=d, t=t, n=n, **_fit(net, n, seed, method)))
    df = pd.DataFrame(rows)
    return df, _routes_figure(df)


def _routes_figure(df):
    from matplotlib.figure import Figure  # deferred: matplotlib is slow to import

    fig = Figure(figsize=(9.0, 3.8), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    methods = list(dict.fromkeys(df["method"]))
    for i, m in enumerate(methods):
        grp = df[df["method"] == m]
        ax1.scatter(np.full(len(grp), i), grp["max_angle"])
        ax2.scatter(np.full(len(grp), i), grp["time"])
    for ax, label in ((ax1, "max unit angle (rad)"), (ax2, "time (s)")):
        ax.set_xticks(range(len(methods)), methods)
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"Goel-Panigrahy Step 1 routes (d = {df['d'].iloc[0]}, t = {df['t'].iloc[0]:g}, "
                 f"N = {df['n'].iloc[0]:,})")
    return fig


# ================================================================================================ Step 2, Theorem 6
# ``goel2019-refine``      Step 2 (Algorithm 1, RefineEstimate) against the Step 1 floor: ``d = 10`` orthonormal
#                          step units at threshold ``t``, ``P`` = positive linear part + non-negative pairwise and
#                          triple products (monotone, so Lemma 5 applies). Step 1 on *exact population* moments
#                          has an error floor set by the products (Lemma 2); RefineEstimate started there, with
#                          an exact conditional-slab sampler and with a fixed sample of ``n_samples`` rows, must
#                          go below it (Theorem 5). Angle against iteration, per unit.
# ``goel2019-halfspaces``  Theorem 6: intersections of ``d in {3, 5, 10}`` halfspaces at distance
#                          ``t in {2, 2.5, 3}`` (orthonormal normals: pairwise angles of 90 degrees), learned from
#                          ``n_samples = 10^6`` labelled Gaussian samples: the largest normal angle and the 0-1
#                          disagreement on fresh samples, after Step 1 alone and after Step 2.

def _panels(n_panels: int, width: float = 4.4):
    from matplotlib.figure import Figure  # deferred: matplotlib is slow to import

    fig = Figure(figsize=(width * n_panels, 3.9), layout="constrained")
    axes = fig.subplots(1, n_panels)
    return fig, np.atleast_1d(axes)


# ------------------------------------------------------------------------------------------ goel2019-refine
@experiment("goel2019-refine", paper="goel2019",
            description="Goel-Panigrahy Step 2: RefineEstimate angle vs iteration against the Step 1 floor "
                        "(d = 10, monotone P with products, step units)")
def refine_experiment(*, rng: Any = None, quick: bool = False, n_hidden: int | None = None,
                      thresholds: Sequence[float] | None = None, units: Sequence[int] | None = None,
                      max_iter: int | None = None, n_per_slab: int | None = None, n_samples: int | None = None,
                      mode: str = "practical"):
    """Step 2 below the Step 1 floor (Algorithm 1, Theorem 5; Lemma 2 for the floor).

    Parameters
    ----------
    rng : seed
    quick : bool
        ``d = 4``, one unit, 15 iterations, small slabs (a smoke run for tests).
    n_hidden : int, default 10 (quick: 4)
    thresholds : sequence of float, default ``(2.0, 2.5)`` (quick: ``(2.0,)``)
    units : sequence of int, default ``(0, 1, 2)`` (quick: ``(0,)``)
        Units refined (each costs ``max_iter`` iterations per data source).
    max_iter : int, default 300 (quick: 15)
    n_per_slab : int, default 20_000 (quick: 2_000)
        Points per slab of the conditional sampler.
    n_samples : int, default 10^6 (quick: 5 x 10^4); 0 skips the fixed-sample run
        Rows of the fixed sample (Step 1 from samples and RefineEstimate on the same rows).
    mode : {"practical", "faithful"}, default "practical"

    Returns
    -------
    (pandas.DataFrame, matplotlib.figure.Figure)
        One row per (threshold, unit, source, iteration) with ``true_angle`` (the angle to the unit before
        that iteration; the last iteration row is the final direction), ``angle_estimate`` (Step 2's
        estimate), ``step1_floor`` (population Step 1 angle of that unit) and ``step1_samples`` (Step 1
        angle from the fixed sample).
    """
    import pandas as pd  # deferred: pandas is slow to import


    gen = check_random_state(rng)
    d = check_positive_int(n_hidden if n_hidden is not None else (4 if quick else 10), "n_hidden")
    thresholds = [float(t) for t in (thresholds if thresholds is not None else ((2.0,) if quick else (2.0, 2.5)))]
    units = [int(u) for u in (units if units is not None else ((0,) if quick else (0, 1, 2)))]
    if any(not 0 <= u < d for u in units):
        raise ValueError(f"units must lie in [0, {d}), got {units}.")
    max_iter = check_positive_int(max_iter if max_iter is not None else (15 if quick else 300), "max_iter")
    n_per_slab = check_positive_int(n_per_slab if n_per_slab is not None else (2_000 if quick else 20_000),
                                    "n_per_slab")
    n_samples = int(n_samples if n_samples is not None else (50_000 if quick else 1_000_000))
    rows = []
    for t in thresholds:
        W = random_unit_weights(d, rng=gen)
        P = random_upper_polynomial(d, monotone=True, rng=gen)
        net = HighThresholdNetwork(W, t, "step", P)
        c0 = P.constant
        act = threshold_activation("step", t)

        def fires(H, net=net, act=act, c0=c0):
            return net.upper(act(H)) != c0                    # f(x) != c_0 (Lemma 5), from P itself

        s1 = step1(PopulationMoments(net), d, rng=gen)
        floor_angles, floor_rows = _matched(s1.weights, W, weight_error)
        starts = {"oracle": (floor_rows, floor_angles)}
        if n_samples > 0:
            X = gen.standard_normal((n_samples, d))
            y = net.predict(X)
            active = y != np.median(y)
            sm = SampleMoments(X[active], (y - np.median(y))[active], n_samples, "step", t)
            s1s = step1(sm, d, rng=gen)
            samp_angles, samp_rows = _matched(s1s.weights, W, weight_error)
            starts["samples"] = (samp_rows, samp_angles)
            sample_source = SampleSlabs(X, active)
        oracle = ConditionalSlabSampler(fires, d, n_per_slab=n_per_slab, hidden_weights=W)
        for u in units:
            for source_name, (start_rows, start_angles) in starts.items():
                if source_name == "oracle":
                    src = oracle
                    opts = dict(slab_width=1e-2, relative_slab_width=0.2, min_slab_width=1e-5,
                                search_interval=(t - 1.0, t + 3.0))
                else:
                    src = sample_source
                    min_w = 200.0 / (n_samples * np.exp(-0.5 * t * t) / np.sqrt(2 * np.pi))
                    opts = dict(slab_width=0.1, relative_slab_width=0.5, min_slab_width=max(2e-3, min_w),
                                levels=(0.4, 0.5, 0.6, 0.7, 0.8), search_interval=(t - 1.0, t + 3.0))
                t0 = time.perf_counter()
                res = refine_estimate(start_rows[u], src, threshold=t, max_iter=max_iter, mode=mode, rng=gen,
                                      **opts)
                seconds = time.perf_counter() - t0
                true = res.true_angles(W[u])
                est = np.append(res.angle_estimates, res.estimate.angle)
                for it in range(true.size):
                    rows.append(dict(threshold=t, unit=u, source=source_name, iteration=it, true_angle=true[it],
                                     angle_estimate=est[it] if it < est.size else np.nan,
                                     accepted=bool(res.accepted[it]) if it < res.n_iter else False,
                                     step1_floor=floor_angles[u],
                                     step1_samples=starts.get("samples", (None, np.full(d, np.nan)))[1][u],
                                     step1_floor_max=float(floor_angles.max()), time_s=seconds, d=d,
                                     n_samples=n_samples, n_per_slab=n_per_slab, mode=mode))
    df = pd.DataFrame(rows)

    fig, axes = _panels(len(thresholds))
    colors = {u: f"C{k}" for k, u in enumerate(units)}
    for ax, t in zip(axes, thresholds):
        sub = df[df["threshold"] == t]
        for (u, src), g in sub.groupby(["unit", "source"]):
            ls = "-" if src == "oracle" else "--"
            ax.plot(g["iteration"], g["true_angle"], ls, color=colors[u], label=f"unit {u}, {src}")
            ax.axhline(g["step1_floor"].iloc[0], color=colors[u], lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.set_xlabel("iteration of RefineEstimate")
        ax.set_ylabel("angle to the unit (rad)")
        ax.set_title(f"t = {t:g}, d = {d}: dotted = Step 1 floor (population)", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle("Goel-Panigrahy Algorithm 1: Step 2 below the Step 1 floor (monotone P with products; "
                 "solid: conditional sampler, dashed: fixed sample)", fontsize=9)
    return df, fig


def _matched(estimated: np.ndarray, truth: np.ndarray, weight_error) -> tuple[np.ndarray, np.ndarray]:
    """Per true unit: the angle of its matched estimate and that estimate (rows reordered like ``truth``)."""
    e = weight_error(estimated, truth)
    return np.asarray(e["angles"], dtype=np.float64), estimated[np.asarray(e["matching"])]


# ------------------------------------------------------------------------------------------ goel2019-halfspaces
@experiment("goel2019-halfspaces", paper="goel2019",
            description="Goel-Panigrahy Theorem 6: intersections of 3, 5, 10 halfspaces at distance 2, 2.5, 3 "
                        "from 10^6 samples; normal angles and 0-1 disagreement after Step 1 and Step 2")
def halfspaces_experiment(*, rng: Any = None, quick: bool = False, dims: Sequence[int] | None = None,
                          thresholds: Sequence[float] | None = None, n_samples: int | None = None,
                          n_test: int | None = None, trials: int = 1, union: bool = False,
                          step2_options: dict | None = None):
    """Theorem 6 on a grid (see the module docstring).

    Parameters
    ----------
    rng : seed
    quick : bool
        ``d = 3``, ``t = 2.5``, ``10^5`` samples.
    dims : sequence of int, default ``(3, 5, 10)``
    thresholds : sequence of float, default ``(2.0, 2.5, 3.0)``
    n_samples : int, default 10^6 (quick: 10^5)
    n_test : int, default 10^6 (quick: 10^5)
        Fresh samples for the 0-1 disagreement.
    trials : int, default 1
    union : bool, default False
        Learn unions ``OR_i [w_i.x >= t]`` instead of intersections.
    step2_options : dict, optional
        Passed to the classifier.

    Returns
    -------
    (pandas.DataFrame, matplotlib.figure.Figure)
        One row per (d, t, trial, stage) with ``max_angle``, ``mean_angle`` (radians, matched normals) and
        ``disagreement`` (fraction of fresh samples labelled differently from the truth).
    """
    import pandas as pd  # deferred: pandas is slow to import


    gen = check_random_state(rng)
    dims = [check_positive_int(d, "dims") for d in (dims if dims is not None else ((3,) if quick else (3, 5, 10)))]
    thresholds = [float(t) for t in (thresholds if thresholds is not None else ((2.5,) if quick else (2.0, 2.5, 3.0)))]
    n = check_positive_int(n_samples if n_samples is not None else (100_000 if quick else 1_000_000), "n_samples")
    n_test = check_positive_int(n_test if n_test is not None else (100_000 if quick else 1_000_000), "n_test")
    trials = check_positive_int(trials, "trials")
    rows = []
    for d in dims:
        for t in thresholds:
            for trial in range(trials):
                W = random_unit_weights(d, rng=gen)
                X = gen.standard_normal((n, d))
                g = halfspace_labels(X, W, t, union=union)
                Xt = gen.standard_normal((n_test, d))
                gt = halfspace_labels(Xt, W, t, union=union)
                t0 = time.perf_counter()
                clf = HalfspaceIntersectionClassifier(d, t, union=union, step2_options=step2_options,
                                                      random_state=int(gen.integers(0, 2**63 - 1)))
                clf.fit(X, g)
                seconds = time.perf_counter() - t0
                for stage, normals in (("step1", clf.step1_normals_), ("step2", clf.normals_)):
                    e = weight_error(normals, W)
                    pred = halfspace_labels(Xt, normals, t, union=union)
                    rows.append(dict(d=d, threshold=t, trial=trial, stage=stage, max_angle=e["max_angle"],
                                     mean_angle=e["mean_angle"], disagreement=float(np.mean(pred != gt)),
                                     fire_rate=clf.diagnostics_["fire_rate"], n_samples=n, n_test=n_test,
                                     time_s=seconds, step1_time_s=clf.diagnostics_["timings"]["step1"],
                                     step2_time_s=clf.diagnostics_["timings"]["step2"], union=union))
    df = pd.DataFrame(rows)

    fig, axes = _panels(2)
    for k, d in enumerate(dims):
        for stage, ls in (("step1", ":"), ("step2", "-")):
            sub = df[(df["d"] == d) & (df["stage"] == stage)].groupby("threshold")
            axes[0].plot(sub["max_angle"].max().index, sub["max_angle"].max().values, "o" + ls, color=f"C{k}",
                         label=f"d = {d}, {stage}")
            axes[1].plot(sub["disagreement"].max().index, sub["disagreement"].max().values, "o" + ls,
                         color=f"C{k}", label=f"d = {d}, {stage}")
    axes[0].axhline(0.05, color="k", lw=0.8)
    axes[1].axhline(0.01, color="k", lw=0.8)
    for ax, lab in zip(axes, ("largest normal angle (rad)", "0-1 disagreement on fresh samples")):
        ax.set_yscale("log")
        ax.set_xlabel("distance t of the halfspaces")
        ax.set_ylabel(lab)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(f"Goel-Panigrahy Theorem 6: {'unions' if union else 'intersections'} of halfspaces, "
                 f"{n} samples (dotted: Step 1 alone; lines: 0.05 rad and 1%)", fontsize=9)
    return df, fig


# ------------------------------------------------------------------------------------ goel2019-certificate
@experiment("goel2019-certificate", paper="goel2019",
            description="HighThresholdLearner's certificate unit_angles on random teachers: estimated against "
                        "true largest unit angle, false passes and false alarms, with and without Step 2")
def certificate_experiment(*, rng: Any = None, quick: bool = False, fits: int | None = None,
                           max_angle_error: float = 0.1):
    """Calibration of the certificate ``unit_angles`` of :class:`HighThresholdLearner`.

    Each fit draws a teacher: ``n`` in {5, 10, 20, 50} inputs, ``k`` in 2..min(n, 10) step units with rows
    of condition number U[1, 2], ``t`` in {2, 2.5, 3}, ``P`` linear (``c_i ~ U[0.5, 1.5]``) or monotone with
    products (half each), and ``N`` in {10^5, 3 x 10^5, 10^6} samples; the learner runs with its defaults and
    with ``refine=False`` on the same samples. ``verdict``: ``pass`` / ``fail`` of the certificate against the
    true largest angle: ``false pass`` (passed, true angle above ``max_angle_error``) and ``false alarm``
    (failed, true angle within it).

    Options: ``fits`` (teachers, default 40; quick 3, with ``n <= 10`` and ``N = 10^5``), ``max_angle_error``.
    """
    import pandas as pd  # deferred: pandas is slow to import


    gen = check_random_state(rng)
    fits = check_positive_int(fits or (3 if quick else 40), "fits")
    rows = []
    for trial in range(fits):
        n = int(gen.choice([5, 10] if quick else [5, 10, 20, 50]))
        k = int(gen.integers(2, min(n, 10) + 1))
        t = float(gen.choice([2.0, 2.5, 3.0]))
        N = 100_000 if quick else int(gen.choice([100_000, 300_000, 1_000_000]))
        monotone = bool(gen.random() < 0.5)
        seed = int(gen.integers(2**31))
        W = random_unit_weights(k, n, condition_number=float(gen.uniform(1.0, 2.0)), rng=seed)
        P = (random_upper_polynomial(k, monotone=True, rng=seed) if monotone
             else UpperPolynomial.linear(gen.uniform(0.5, 1.5, k), 0.3))
        net = HighThresholdNetwork(W, t, "step", P)
        X = np.random.default_rng(seed + 1).standard_normal((N, n))
        y = net.predict(X)
        for refine in (True, False):
            row = dict(trial=trial, n_inputs=n, units=k, threshold=t, n_samples=N,
                       upper="monotone with products" if monotone else "linear", refine=refine, refused="")
            t0 = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est = HighThresholdLearner(k, threshold=t, refine=refine, max_angle_error=max_angle_error,
                                               random_state=seed).fit(X, y)
            except NNRecoverError as exc:
                rows.append(dict(row, refused=f"{type(exc).__name__}: {exc}"[:200]))
                continue
            cert = est.diagnostics_["certificates"]["unit_angles"]
            true = float(weight_error(est.hidden_weights_, net.hidden_weights)["max_angle"])
            passed = bool(cert["passed"])
            verdict = ("false pass" if passed and true > max_angle_error else
                       "false alarm" if not passed and true <= max_angle_error else
                       "pass" if passed else "fail")
            rows.append(dict(row, true_max_angle=true,
                             estimated_max_angle=float(np.max(cert["detail"]["unit_angles"])),
                             passed=passed, verdict=verdict, half_failed="failed" in est.diagnostics_["split_half"],
                             time_s=time.perf_counter() - t0))
    df = pd.DataFrame(rows)
    return df, _certificate_figure(df, max_angle_error)


def _certificate_figure(df, limit: float):
    fig, axes = _panels(1, width=5.6)
    ax = axes[0]
    done = df[df["refused"] == ""]
    for refine, marker in ((True, "o"), (False, "x")):
        sub = done[done["refine"] == refine]
        ax.scatter(sub["true_max_angle"], np.minimum(sub["estimated_max_angle"], np.pi / 2), marker=marker,
                   label=f"refine={refine}")
    lo = max(1e-3, 0.5 * float(np.nanmin(done["true_max_angle"]))) if len(done) else 1e-3
    ax.plot([lo, np.pi / 2], [lo, np.pi / 2], color="k", lw=0.6)
    ax.axvline(limit, color="r", lw=0.8)
    ax.axhline(limit, color="r", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("true largest unit angle (rad)")
    ax.set_ylabel("certificate's largest unit angle (rad)")
    ax.set_title("HighThresholdLearner unit_angles: lower right = false pass, upper left = false alarm", fontsize=8)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    return fig


def _figure(n_panels: int, width: float = 4.2):
    from matplotlib.figure import Figure  # deferred: matplotlib is slow to import

    fig = Figure(figsize=(width * n_panels, 3.9), layout="constrained")
    return fig, np.atleast_1d(fig.subplots(1, n_panels))


def _pairs_network(n: int, d: int, t: float, gen, pairs=None):
    # deferred: SciPy's submodules are slow to import
    from scipy.stats import ortho_group


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
    import pandas as pd  # deferred: pandas is slow to import


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
    import pandas as pd  # deferred: pandas is slow to import
    # deferred: SciPy's submodules are slow to import
    from scipy.stats import ortho_group


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

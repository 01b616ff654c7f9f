"""Experiments for the Goel & Panigrahy (2019) main line (Step 1). The paper reports no experiments.

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
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Sequence

import numpy as np

from .._validation import check_positive_int, check_random_state
from ..errors import CertificateWarning, NNRecoverError
from .registry import experiment

__all__ = ["threshold_experiment", "routes_experiment", "gp19_teacher", "refine_experiment", "halfspaces_experiment",
           "certificate_experiment"]


def gp19_teacher(d: int, t: float, *, activation: str = "step", condition_number: float = 1.5, seed: int = 0):
    """The teacher of both experiments: unit rows with the given condition number, ``P`` = linear + products."""
    from ..learners.goel2019 import HighThresholdNetwork, random_unit_weights, random_upper_polynomial

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
    from ..learners.goel2019 import HighThresholdLearner
    from ..metrics import weight_error

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
    import pandas as pd

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
    from ..learners.goel2019 import PopulationMoments, step1
    from ..metrics import weight_error

    try:
        res = step1(PopulationMoments(net), net.n_hidden, method=method, rng=0)
    except NNRecoverError:
        return np.nan
    return float(weight_error(res.weights, net.hidden_weights)["max_angle"])


def _threshold_figure(df):
    from matplotlib.figure import Figure

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
    import pandas as pd

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
    from matplotlib.figure import Figure

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
    from matplotlib.figure import Figure

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
    import pandas as pd

    from ..learners.goel2019.model import (HighThresholdNetwork, random_unit_weights, random_upper_polynomial,
                                           threshold_activation)
    from ..learners.goel2019.statistics import PopulationMoments, SampleMoments
    from ..learners.goel2019.step1 import step1
    from ..learners.goel2019.step2 import ConditionalSlabSampler, SampleSlabs, refine_estimate
    from ..metrics import weight_error

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
    import pandas as pd

    from ..learners.goel2019.halfspaces import HalfspaceIntersectionClassifier, halfspace_labels
    from ..learners.goel2019.model import random_unit_weights
    from ..metrics import weight_error

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
    import pandas as pd

    from ..learners.goel2019 import (HighThresholdLearner, HighThresholdNetwork, UpperPolynomial,
                                     random_unit_weights, random_upper_polynomial)
    from ..metrics import weight_error

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

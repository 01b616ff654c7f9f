"""Experiments for the Goel & Panigrahy (2019) main line (Step 1). The paper reports no experiments.

``goel2019-threshold``  Lemma 2 in action: ``d = 10`` step units, ``W*`` with unit rows and condition number 1.5,
                        ``P`` = positive linear part (``c_i ~ U[0.5, 1.5]``) + ``d`` random pairwise and ``d``
                        random triple products with ``|c_S| <= 1``; Step 1 (default route, ``refine=False``) from
                        ``N`` Gaussian samples for ``t in {2, 2.5, 3, 3.5}``. The largest unit angle falls with
                        ``N`` and levels off at a bias floor that shrinks as ``t`` grows. Points where Step 1
                        refuses (too few units fired for ``M`` to be positive definite) are reported as refused.
``goel2019-routes``     The three Step 1 routes (whitening + tensor power iteration, the one-by-one landscape
                        of Section 2.1, the simultaneous landscape of Appendix B.4) on the same samples: error,
                        time, samples used (all and active).

The samples are generated chunk by chunk and streamed into the learner, so ``N = 10^7`` needs only the
active rows in memory.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from .._validation import check_positive_int, check_random_state
from ..errors import NNRecoverError
from .registry import experiment

__all__ = ["threshold_experiment", "routes_experiment", "gp19_teacher"]


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
        est.fit(_chunks(net, n, seed))
    except NNRecoverError as exc:
        return {"max_angle": np.nan, "refused": type(exc).__name__ + ": " + str(exc)[:120],
                "time": time.perf_counter() - t0, "n_active": np.nan}
    err = weight_error(est.hidden_weights_, net.hidden_weights)
    return {"max_angle": float(err["max_angle"]), "refused": "", "time": time.perf_counter() - t0,
            "n_active": est.diagnostics_["n_active"],
            "mean_abs_residual": est.diagnostics_["lemmas"]["lemma2"]["mean_abs_residual"]}


@experiment("goel2019-threshold", paper="goel2019",
            description="Goel-Panigrahy Step 1: max unit angle vs N for t in {2, 2.5, 3, 3.5} (falls, then a "
                        "bias floor that shrinks with t; Lemma 2)")
def threshold_experiment(*, rng: Any = None, quick: bool = False, n_hidden: int | None = None,
                         thresholds: Sequence[float] | None = None, n_values: Sequence[int] | None = None,
                         trials: int | None = None, method: str = "power"):
    """Error against ``N`` per threshold (see the module docstring).

    Options: ``n_hidden`` (default 10; quick 4), ``thresholds`` (default (2, 2.5, 3, 3.5); quick (2, 3)),
    ``n_values`` (default 10^4 .. 10^7; quick (2*10^4, 8*10^4)), ``trials`` (teachers per point, default 2;
    quick 1), ``method`` (the Step 1 route).
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
            net = gp19_teacher(d, float(t), seed=seed)
            for n in n_values:
                rows.append(dict(t=float(t), n=int(n), trial=trial, d=d,
                                 **_fit(net, int(n), int(gen.integers(2**31)), method)))
    df = pd.DataFrame(rows)
    return df, _threshold_figure(df)


def _threshold_figure(df):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 4.2), layout="constrained")
    ax = fig.subplots()
    for t, grp in df.groupby("t"):
        med = grp.groupby("n")["max_angle"].median()
        ax.loglog(med.index, med.values, "o-", label=f"t = {t:g}")
    ax.set_xlabel("samples N")
    ax.set_ylabel("max unit angle (rad), median over teachers")
    ax.set_title("Goel-Panigrahy Step 1: error floor shrinks with t")
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

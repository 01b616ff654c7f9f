"""Experiments of the baseline learner (no paper): ``baseline-gd``.

``baseline-gd``
    Error of the gradient-descent baseline (:class:`nnrecover.learners.GradientDescentLearner`,
    random initialisation + local optimisation, no paper) against the number of samples on a random
    ReLU teacher: ``max_unit_error`` (parameter error after matching units, :func:`nnrecover.metrics.parameter_error`)
    and the relative L2 function error, median and range over independent trials.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .. import metrics
from .._validation import check_positive_int, check_random_state
from ..learners import make_learner
from ..sampling import sample
from .compare import demo_teacher
from .registry import experiment

if TYPE_CHECKING:
    import matplotlib.figure
    import pandas



@experiment("baseline-gd", paper="baseline",
            description="gradient-descent baseline: parameter and function error vs number of samples")
def baseline_gd(*, rng, quick: bool = False, n_inputs: int | None = None, n_hidden: int | None = None,
                n_outputs: int = 1, bias: float = 0.1, noise: float = 0.05,
                sample_sizes: Sequence[int] | None = None, trials: int | None = None,
                learner_options: Mapping[str, Any] | None = None
                ) -> tuple[pandas.DataFrame, matplotlib.figure.Figure]:
    """Gradient-descent baseline error against the number of samples.

    Each trial draws a fresh teacher (:func:`demo_teacher`) and ``n`` noisy samples, fits
    ``GradientDescentLearner`` from its random initialisation and records ``max_unit_error``, the
    relative L2 function error (20,000 fresh Gaussian inputs) and the fit time. With label noise of
    standard deviation ``noise`` the statistical part of the error decays like ``noise * sqrt(P / n)``
    (P parameters); a failed local optimisation shows as an outlier that no ``n`` removes, which is
    the gap the provable learners close.

    Defaults: d = 10, k = 4, n in (1e3, 4e3, 1.6e4, 6.4e4), 3 trials; ``quick``: d = 5, k = 2,
    n in (500, 2000), 1 trial.
    """
    import pandas as pd  # deferred: pandas is slow to import
    from matplotlib.figure import Figure  # deferred: matplotlib is slow to import


    gen = check_random_state(rng)
    d = check_positive_int(n_inputs if n_inputs is not None else (5 if quick else 10), "n_inputs")
    k = check_positive_int(n_hidden if n_hidden is not None else (2 if quick else 4), "n_hidden")
    sizes = list(sample_sizes) if sample_sizes is not None else ([500, 2000] if quick else
                                                                  [1000, 4000, 16000, 64000])
    sizes = [check_positive_int(n, "sample_sizes") for n in sizes]
    n_trials = check_positive_int(trials if trials is not None else (1 if quick else 3), "trials")
    rows = []
    for trial in range(n_trials):
        teacher, dist = demo_teacher(gen, n_inputs=d, n_hidden=k, n_outputs=n_outputs, bias=bias)
        for n in sizes:
            X, Y = sample(teacher, dist, n, noise=noise, rng=gen)
            est = make_learner("gradient-descent", k, learner_options,
                               random_state=int(gen.integers(0, 2**63 - 1)))
            t0 = time.perf_counter()
            est.fit(X, Y)
            fit_time = time.perf_counter() - t0
            rows.append({
                "trial": trial, "n_samples": n, "n_inputs": d, "n_hidden": k, "noise": noise,
                "max_unit_error": float(metrics.parameter_error(est.network_, teacher)["max_unit_error"]),
                "function_error": float(metrics.function_error(est.network_, teacher, dist, n=20_000,
                                                               rng=int(gen.integers(0, 2**63 - 1)))),
                "fit_time_s": fit_time,
            })
    df = pd.DataFrame(rows)
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    for col, label in (("max_unit_error", "max unit error"), ("function_error", "relative L2 function error")):
        g = df.groupby("n_samples")[col]
        med, lo, hi = g.median(), g.min(), g.max()
        ax.plot(med.index, med.values, marker="o", label=label)
        ax.fill_between(med.index, lo.values, hi.values, alpha=0.2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of samples n")
    ax.set_ylabel("error (median, min-max over trials)")
    ax.set_title(f"gradient-descent baseline, d={d}, k={k}, noise={noise}", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return df, fig

"""The ``compare`` study: provable learners against training from random starts, over a grid of teachers.

For every cell of the grid (input dimension ``d``, width ``k``, hidden biases or none, scalar or vector
output, Gaussian or symmetric non-Gaussian input, label noise) and every seed, one random ReLU teacher
is drawn and every method is fitted on the **same** samples:

* every registered nnrecover learner (Awasthi et al.'s scalar learner on the first output), with ``refine=False`` (the paper's algorithm alone) and
  ``refine=True`` (plus the shared local refinement); a learner whose assumptions the cell violates
  refuses with :class:`~nnrecover.errors.AssumptionError` and is reported as "not applicable";
* the baselines people use: :class:`~nnrecover.learners.GradientDescentLearner` (random starts + the
  same second-order least-squares optimiser that refines the provable estimates) and scikit-learn's
  ``MLPRegressor`` with L-BFGS (best training loss of ``restarts`` random starts) and with Adam.

How the scikit-learn baselines are configured, and why: one hidden layer of ``k`` ReLU units,
``alpha=0`` (no weight penalty: the teacher is exactly representable), float64. L-BFGS: ``max_iter=5000``,
``max_fun=10**6`` and ``tol=0`` (scikit-learn passes ``tol`` to SciPy's gradient test only; the run then
ends on SciPy's own relative-reduction test ``ftol = 2.2e-9``, which scikit-learn does not expose, so
a noiseless teacher can stop short of round-off). Adam: ``learning_rate_init=1e-3``, ``batch_size=256``,
``max_iter`` epochs (default 200), ``n_iter_no_change=max_iter`` (no early stop on a plateau).

Per method and cell: success rate (max unit error < ``success_tol`` = 1e-6 after matching units),
median max unit error, median relative L2 function error, median wall time, samples used. The
figure shows success against ``k``, function error and time against ``d``, and (when several sample
sizes are given) function error against ``N``. A fit that returned a network is counted in every
panel whatever its error (its ``status`` says "failed" above the demo's thresholds,
:data:`~nnrecover.experiments.baseline.FAILED_FUNCTION_ERROR` and ``FAILED_UNIT_ERROR``); a learner
that refused the cell is left out of the panels and its refusal kept in the table.
"""

from __future__ import annotations

import itertools
import time
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from .._validation import check_positive_int, check_random_state
from ..errors import InputError
from .registry import experiment

__all__ = ["compare_experiment", "sklearn_baseline", "SKLEARN_BASELINES"]

SKLEARN_BASELINES = ("sklearn-lbfgs", "sklearn-adam")
_INPUTS = ("gaussian", "mixture")
_OUTPUTS = ("scalar", "vector")


def sklearn_baseline(method: str, X: np.ndarray, Y: np.ndarray, n_hidden: int, *, random_state: int,
                     restarts: int = 3, max_iter: int | None = None):
    """Fit scikit-learn's ``MLPRegressor`` as configured in the module docstring.

    Parameters
    ----------
    method : {"sklearn-lbfgs", "sklearn-adam"}
    X, Y : arrays
    n_hidden : int
    random_state : int
        Seed of the first start; start ``r`` uses ``random_state + r``.
    restarts : int
        L-BFGS starts (the one with the smallest training loss is kept); Adam uses one.
    max_iter : int, optional
        L-BFGS iterations (default 5000) or Adam epochs (default 200).

    Returns
    -------
    (TwoLayerNetwork, dict)
        The fitted network and ``{"n_iter": ..., "loss": ...}`` of the kept start.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPRegressor

    from ..network import TwoLayerNetwork

    if method not in SKLEARN_BASELINES:
        raise InputError(f"unknown scikit-learn baseline {method!r}; use one of {SKLEARN_BASELINES}.")
    y = Y if Y.ndim == 1 or Y.shape[1] > 1 else Y[:, 0]
    best = None
    starts = restarts if method == "sklearn-lbfgs" else 1
    for r in range(starts):
        if method == "sklearn-lbfgs":
            model = MLPRegressor(hidden_layer_sizes=(n_hidden,), activation="relu", solver="lbfgs", alpha=0.0,
                                 max_iter=max_iter or 5000, max_fun=10**6, tol=0.0, random_state=random_state + r)
        else:
            epochs = max_iter or 200
            model = MLPRegressor(hidden_layer_sizes=(n_hidden,), activation="relu", solver="adam", alpha=0.0, batch_size=256,
                                 learning_rate_init=1e-3, max_iter=epochs, n_iter_no_change=epochs, tol=0.0,
                                 random_state=random_state + r)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X, y)
        if best is None or model.loss_ < best.loss_:
            best = model
    return TwoLayerNetwork.from_sklearn(best), {"n_iter": int(best.n_iter_), "loss": float(best.loss_)}


def _teacher(d: int, k: int, bias: bool, output: str, inputs: str, gen: np.random.Generator):
    from ..distributions import StandardGaussian, SymmetricMixture
    from ..network import random_network

    p = 1 if output == "scalar" else k
    net = random_network(d, k, p, rng=gen, bias_range=(-1.0, 1.0) if bias else 0.0)
    if inputs == "gaussian":
        dist = StandardGaussian(d)
    else:
        # a symmetric two-component-pair mixture with unit-norm means: symmetric, clearly non-Gaussian
        means = gen.standard_normal((2, d))
        means /= np.linalg.norm(means, axis=1, keepdims=True)
        dist = SymmetricMixture(1.5 * means)
    return net, dist


def _score(net, truth, dist, eval_seed: int, eval_samples: int) -> tuple[float, float]:
    from .. import metrics

    if net.n_hidden != truth.n_hidden:
        max_err = np.inf
    else:
        max_err = float(metrics.parameter_error(net, truth)["max_unit_error"])
    fe = float(metrics.function_error(net, truth, dist, n=eval_samples, rng=eval_seed))
    return max_err, fe


@experiment("compare", paper="baseline",
            description="provable learners (refine on/off) against random-start training (nnrecover, "
                        "scikit-learn L-BFGS and Adam) over a grid of teachers")
def compare_experiment(*, rng: Any = None, quick: bool = False, dims: Sequence[int] | None = None,
                       widths: Sequence[int] | None = None, biases: Sequence[bool] = (False, True),
                       outputs: Sequence[str] = _OUTPUTS, inputs: Sequence[str] = _INPUTS,
                       noises: Sequence[float] = (0.0, 0.1), n_samples: Sequence[int] | None = None,
                       seeds: int | None = None, learners: Sequence[str] | None = None,
                       baselines: Sequence[str] = ("gradient-descent", *SKLEARN_BASELINES),
                       restarts: int = 3, adam_epochs: int = 200, success_tol: float = 1e-6,
                       eval_samples: int = 50_000, log: Callable[[str], None] | None = None):
    """Provable learners against random-start training over a grid of teachers (see the module docstring).

    Parameters
    ----------
    rng : int, Generator or None
    quick : bool
        One small cell (d = 10, k = 3, biases, vector output, Gaussian, noiseless, N = 20000), one
        seed, one L-BFGS start and 30 Adam epochs: a smoke test of seconds.
    dims, widths : sequences of int
        Default ``(10, 50, 100)`` and ``(5, 10, 20)``; cells with ``k > d`` are skipped.
    biases, outputs, inputs, noises : sequences
        Hidden biases (uniform in [-1, 1]) or none; ``"scalar"`` or ``"vector"`` (``p = k``) outputs;
        ``"gaussian"`` (N(0, I)) or ``"mixture"`` (symmetric Gaussian mixture) inputs; label-noise stds.
    n_samples : sequence of int
        Default ``(100000,)``.
    seeds : int
        Teachers per cell (default 3).
    learners : sequence of str, optional
        nnrecover learners to run (default: every registered learner except the baseline).
    baselines : sequence of str
        Among ``"gradient-descent"``, ``"sklearn-lbfgs"``, ``"sklearn-adam"``.
    restarts, adam_epochs : int
        L-BFGS starts and Adam epochs of the scikit-learn baselines.
    success_tol : float
        A fit succeeds when its max unit error is below this.
    eval_samples : int
        Monte-Carlo samples of the function error.
    log : callable, optional
        Receives progress lines.

    Returns
    -------
    (pandas.DataFrame, matplotlib.figure.Figure)
        One row per (cell, seed, method) and the figure.
    """
    import pandas as pd

    from ..learners import available
    from ..sampling import sample
    from .baseline import DEMO_MAX_OUTPUTS, FAILED_FUNCTION_ERROR, FAILED_UNIT_ERROR, compare_learners

    gen = check_random_state(rng)
    if quick:
        dims, widths, biases, outputs, inputs, noises = (10,), (3,), (True,), ("vector",), ("gaussian",), (0.0,)
        n_samples, seeds, restarts, adam_epochs, eval_samples = (20_000,), 1, 1, 30, 20_000
    dims = tuple(check_positive_int(d, "dims") for d in (dims or (10, 50, 100)))
    widths = tuple(check_positive_int(k, "widths") for k in (widths or (5, 10, 20)))
    n_samples = tuple(check_positive_int(n, "n_samples") for n in (n_samples or (100_000,)))
    seeds = check_positive_int(seeds if seeds is not None else 3, "seeds")
    for name, values, allowed in (("outputs", outputs, _OUTPUTS), ("inputs", inputs, _INPUTS)):
        bad = [v for v in values if v not in allowed]
        if bad:
            raise InputError(f"{name} must be among {allowed}, got {bad}.")
    unknown = [b for b in baselines if b not in ("gradient-descent", *SKLEARN_BASELINES)]
    if unknown:
        raise InputError(f"unknown baseline(s) {unknown}; use gradient-descent, sklearn-lbfgs, sklearn-adam.")
    if learners is None:
        # Goel-Panigrahy's learner recovers threshold units under an unknown upper network: another model
        learners = [r.name for r in available(learners_only=True) if r.paper not in ("baseline", "goel2019")]
    nn_methods = list(learners) + (["gradient-descent"] if "gradient-descent" in baselines else [])
    rows = []
    cells = [c for c in itertools.product(dims, widths, biases, outputs, inputs, noises, n_samples) if c[1] <= c[0]]
    for ci, (d, k, bias, output, inp, noise, N) in enumerate(cells, 1):
        for s in range(seeds):
            teacher, dist = _teacher(d, k, bias, output, inp, gen)
            cell = {"d": d, "k": k, "bias": bias, "outputs": output, "inputs": inp, "noise": noise,
                    "n_samples": N, "seed": s}
            data_seed = int(gen.integers(0, 2**63 - 1))
            eval_seed = int(gen.integers(0, 2**63 - 1))
            if log:
                log(f"[cell {ci}/{len(cells)}, seed {s}] d={d} k={k} bias={bias} {output} {inp} noise={noise} N={N}")
            df = compare_learners(teacher, dist, N, rng=data_seed, learners=nn_methods, noise=noise,
                                  eval_samples=eval_samples, with_unrefined=True, max_outputs=DEMO_MAX_OUTPUTS)
            for r in df.to_dict("records"):
                rows.append({**cell, "method": r["learner"], "refine": r["refine"], "status": r["status"],
                             "max_unit_error": r["max_unit_error"], "function_error": r["function_error"],
                             "time_s": r["fit_time_s"], "samples_used": r["n_samples"]})
            sk = [b for b in baselines if b in SKLEARN_BASELINES]
            if sk:
                # the same rows compare_learners streamed: its generator draws one seed, then the samples
                g = np.random.default_rng(data_seed)
                g.integers(0, 2**63 - 1)
                X, Y = sample(teacher, dist, N, noise=noise, rng=g)
            for method in sk:
                t0 = time.perf_counter()
                net, info = sklearn_baseline(method, X, Y, k, random_state=s, restarts=restarts,
                                             max_iter=adam_epochs if method == "sklearn-adam" else None)
                elapsed = time.perf_counter() - t0
                max_err, fe = _score(net, teacher, dist, eval_seed, eval_samples)
                status = ("failed" if not (fe <= FAILED_FUNCTION_ERROR and max_err <= FAILED_UNIT_ERROR) else "ok")
                rows.append({**cell, "method": method, "refine": "-", "status": f"{status} ({info['n_iter']} iterations)",
                             "max_unit_error": max_err, "function_error": fe, "time_s": elapsed, "samples_used": N})
    df = pd.DataFrame(rows)
    df["success"] = df["max_unit_error"] < float(success_tol)
    return df, _figure(df, success_tol)


def _label(row) -> str:
    return row["method"] + ("" if row["refine"] in ("-", None) else f" (refine={row['refine']})")


def _figure(df, success_tol: float):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    # every fit that returned a network counts (a "failed" status for a large error included); rows of
    # learners that refused or raised have no errors and are left out
    ran = df[np.isfinite(df["function_error"].astype(float))].copy()
    ran["label"] = ran.apply(_label, axis=1)
    several_n = df["n_samples"].nunique() > 1
    fig, axes = plt.subplots(1, 4 if several_n else 3, figsize=(18 if several_n else 14, 4.2))
    panels = [("k", "success", f"success rate (max unit error < {success_tol:g})", "mean", False),
              ("d", "function_error", "median relative L2 function error", "median", True),
              ("d", "time_s", "median wall time (s)", "median", True)]
    if several_n:
        panels.append(("n_samples", "function_error", "median function error", "median", True))
    for ax, (x, y, title, how, logy) in zip(axes, panels):
        for label, g in ran.groupby("label"):
            agg = g.groupby(x)[y].agg(how)
            ax.plot(agg.index, agg.values, marker="o", label=label)
        ax.set_xlabel(x)
        ax.set_title(title, fontsize=10)
        if logy:
            ax.set_yscale("log")
        if x in ("d", "n_samples"):
            ax.set_xscale("log")
    axes[0].legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig

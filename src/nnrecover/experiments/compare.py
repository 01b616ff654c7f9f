"""The ``compare`` study: provable learners against training from random starts, over a grid of teachers.

For every cell of the grid (input dimension ``d``, width ``k``, hidden biases or none, scalar or vector
output, Gaussian or symmetric non-Gaussian input, label noise) and every seed, one random ReLU teacher
is drawn and every method is fitted on the **same** samples:

* every registered nnrecover learner (Awasthi et al.'s scalar learner on the first output), with ``refine=False`` (the paper's algorithm alone) and
  ``refine=True`` (plus the shared local refinement); a learner whose assumptions the cell violates
  refuses with :class:`~nnrecover.errors.AssumptionError` and is reported as "not applicable";
* the baselines people use: :class:`~nnrecover.learners.GradientDescentLearner` (random starts + the
  same second-order least-squares optimiser that refines the provable estimates), scikit-learn's
  ``MLPRegressor`` with L-BFGS (best training loss of ``restarts`` random starts) and with Adam, and
  PyTorch's L-BFGS and Adam (optional ``torch`` extra). How each is configured, and why, is in
  :mod:`nnrecover.experiments.training`.

:func:`compare_budget_experiment` (experiment ``compare-budget``) asks the other question: given the wall
time the provable learner took, how often does training from random starts recover the teacher?

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
from .training import SKLEARN_BASELINES, TORCH_BASELINES, TRAINING_BASELINES, sklearn_baseline, torch_baseline, \
    train_baseline

__all__ = ["compare_experiment", "compare_budget_experiment", "sklearn_baseline", "torch_baseline",
           "SKLEARN_BASELINES", "TORCH_BASELINES"]
_INPUTS = ("gaussian", "mixture")
_OUTPUTS = ("scalar", "vector")


def _have_torch(log) -> bool:
    import importlib.util

    found = importlib.util.find_spec("torch") is not None
    if log and not found:
        log("PyTorch is not installed: the torch baselines are left out (pip install 'nnrecover[torch]').")
    return found


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
                       baselines: Sequence[str] | None = None,
                       restarts: int = 3, adam_epochs: int = 200, success_tol: float = 1e-6,
                       eval_samples: int = 50_000, torch_threads: int | None = 1,
                       log: Callable[[str], None] | None = None):
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
        Among ``"gradient-descent"``, ``"sklearn-lbfgs"``, ``"sklearn-adam"``, ``"torch-lbfgs"``,
        ``"torch-adam"`` (:mod:`nnrecover.experiments.training`). Default: all of them, the PyTorch ones
        only when PyTorch is installed.
    restarts, adam_epochs : int
        Starts of scikit-learn's L-BFGS and epochs of both Adam baselines.
    success_tol : float
        A fit succeeds when its max unit error is below this.
    eval_samples : int
        Monte-Carlo samples of the function error.
    torch_threads : int or None, default 1
        PyTorch threads (see :func:`compare_budget_experiment`).
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
    if baselines is None:
        baselines = ("gradient-descent", *SKLEARN_BASELINES, *(TORCH_BASELINES if _have_torch(log) else ()))
    unknown = [b for b in baselines if b not in ("gradient-descent", *TRAINING_BASELINES)]
    if unknown:
        raise InputError(f"unknown baseline(s) {unknown}; use gradient-descent or one of {TRAINING_BASELINES}.")
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
                                  eval_samples=eval_samples, with_unrefined=True,
                                  max_outputs=DEMO_MAX_OUTPUTS) if nn_methods else None
            for r in ([] if df is None else df.to_dict("records")):
                rows.append({**cell, "method": r["learner"], "refine": r["refine"], "status": r["status"],
                             "max_unit_error": r["max_unit_error"], "function_error": r["function_error"],
                             "time_s": r["fit_time_s"], "samples_used": r["n_samples"]})
            sk = [b for b in baselines if b in TRAINING_BASELINES]
            if sk:
                # the same rows compare_learners streamed: its generator draws one seed, then the samples
                g = np.random.default_rng(data_seed)
                g.integers(0, 2**63 - 1)
                X, Y = sample(teacher, dist, N, noise=noise, rng=g)
            for method in sk:
                t0 = time.perf_counter()
                net, info = train_baseline(method, X, Y, k, random_state=s,
                                           restarts=restarts if method == "sklearn-lbfgs" else 1,
                                           max_iter=adam_epochs if method.endswith("-adam") else None,
                                           torch_threads=torch_threads)
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


def _budget_teacher(d: int, k: int, output: str, bias: bool, gen: np.random.Generator):
    from ..network import random_network

    return random_network(d, k, 1 if output == "scalar" else k, rng=gen, bias_range=(-1.0, 1.0) if bias else 0.0)


@experiment("compare-budget", paper="baseline",
            description="success rate against k: a provable learner + refinement against training from random "
                        "starts (nnrecover, scikit-learn, PyTorch) given the same wall time")
def compare_budget_experiment(*, rng: Any = None, quick: bool = False, d: int = 20,
                              widths: Sequence[int] = (2, 5, 10, 15, 20), output: str = "vector", bias: bool = True,
                              n_samples: int = 100_000, seeds: int = 4, budget_factors: Sequence[float] = (1.0, 10.0),
                              learner: str | None = None, methods: Sequence[str] | None = None,
                              success_tol: float = 1e-6, eval_samples: int = 50_000, torch_threads: int | None = 1,
                              log: Callable[[str], None] | None = None):
    """Success against width at equal wall-time budgets: provable learner + refinement vs random starts.

    For every width ``k`` and seed one ReLU teacher (``d`` inputs, ``k`` units, hidden biases uniform in
    [-1, 1] when ``bias``, ``x ~ N(0, I)``, noiseless) gives ``n_samples`` rows. The provable learner
    (Awasthi et al.'s ``hermite-tensor`` for a scalar output, Bakshi et al.'s ``exact-relu`` for ``k``
    outputs) runs with ``refine=True``; its wall time ``t`` sets the budget. Every random-start method
    then gets ``factor * t`` seconds for each ``factor`` in ``budget_factors`` (``1``: the same time) and
    runs as many random starts as fit into it, keeping the one with the smallest training loss:
    ``GradientDescentLearner`` (its ``time_budget``) and the scikit-learn and PyTorch baselines of
    :mod:`nnrecover.experiments.training` (their ``deadline``). Success: max unit error below
    ``success_tol`` after matching units.

    Parameters
    ----------
    rng : int, Generator or None
    quick : bool
        d = 6, k in (2, 3), 20000 rows, one seed, budget factor 1, GD and torch-lbfgs: seconds.
    d : int
    widths : sequence of int
        Widths ``k <= d``.
    output : {"vector", "scalar"}
        ``"vector"`` (``k`` outputs, the default: every width up to ``d`` is recovered by the provable
        learner) or ``"scalar"`` (Awasthi et al.'s learner; at this ``n_samples`` it is reliable for
        ``k`` well below ``d``: measured at d = 20, k = 15, 1e5 rows, one teacher took 299 s and failed).
    bias : bool
    n_samples : int
    seeds : int
        Teachers per width.
    budget_factors : sequence of float
        Multiples of the provable learner's time given to each random-start method.
    learner : str, optional
        Registry name of the provable learner (default by ``output``, see above).
    methods : sequence of str, optional
        Random-start methods among ``"gradient-descent"`` and
        :data:`~nnrecover.experiments.training.TRAINING_BASELINES` (default: all; the PyTorch ones only
        when PyTorch is installed).
    success_tol : float
    eval_samples : int
        Monte-Carlo samples of the function error.
    torch_threads : int or None, default 1
        PyTorch threads (``None``: PyTorch's default, one per core). One by default because the study
        shares its cores with other work, where PyTorch's default spins (see
        :func:`~nnrecover.experiments.training.torch_baseline`); numpy's BLAS keeps its own default.
    log : callable, optional
        Receives progress lines.

    Returns
    -------
    (pandas.DataFrame, matplotlib.figure.Figure)
        One row per (k, seed, method, budget factor): ``budget_s``, ``time_s`` (used), ``starts``,
        ``max_unit_error``, ``function_error``, ``success``; and the figure (success rate against ``k``,
        one panel per budget factor).
    """
    import pandas as pd

    from ..distributions import StandardGaussian
    from ..errors import NNRecoverError, TimeBudgetWarning
    from ..learners import GradientDescentLearner, get_learner
    from ..sampling import sample

    gen = check_random_state(rng)
    if quick:
        d, widths, n_samples, seeds, budget_factors, eval_samples = 6, (2, 3), 20_000, 1, (1.0,), 20_000
        methods = methods or ("gradient-descent", "torch-lbfgs")
    d = check_positive_int(d, "d")
    widths = tuple(check_positive_int(k, "widths") for k in widths)
    if any(k > d for k in widths):
        raise InputError(f"widths must be <= d = {d} (the provable learners need k <= d); got {list(widths)}.")
    if output not in _OUTPUTS:
        raise InputError(f"output must be one of {_OUTPUTS}, got {output!r}.")
    n_samples = check_positive_int(n_samples, "n_samples")
    seeds = check_positive_int(seeds, "seeds")
    factors = tuple(float(f) for f in budget_factors)
    if not factors or any(not (f > 0 and np.isfinite(f)) for f in factors):
        raise InputError(f"budget_factors must be positive numbers, got {list(budget_factors)}.")
    if methods is None:
        methods = ("gradient-descent", *SKLEARN_BASELINES, *(TORCH_BASELINES if _have_torch(log) else ()))
    unknown = [m for m in methods if m not in ("gradient-descent", *TRAINING_BASELINES)]
    if unknown:
        raise InputError(f"unknown method(s) {unknown}; use gradient-descent or one of {TRAINING_BASELINES}.")
    for m in methods:
        if m in TORCH_BASELINES:
            # one untimed call first: PyTorch's import and one-off initialisation of autograd and the
            # optimisers take seconds that no budget should be charged with
            warm = np.random.default_rng(0).standard_normal((64, 2))
            torch_baseline(m, warm, warm[:, 0], 1, random_state=0, max_iter=2, threads=torch_threads)
    learner = learner or ("hermite-tensor" if output == "scalar" else "exact-relu")
    provable = get_learner(learner)
    dist = StandardGaussian(d)
    rows = []
    for k in widths:
        for s in range(seeds):
            teacher = _budget_teacher(d, k, output, bias, gen)
            X, Y = sample(teacher, dist, n_samples, rng=int(gen.integers(0, 2**63 - 1)))
            eval_seed = int(gen.integers(0, 2**63 - 1))
            fit_seed = int(gen.integers(0, 2**31 - 1))
            base = {"d": d, "k": k, "outputs": output, "bias": bias, "n_samples": n_samples, "seed": s}
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    net = provable(k, refine=True, random_state=fit_seed).fit(X, Y).network_
                except NNRecoverError as exc:  # a refusal or failure is a result of the study (other errors are bugs)
                    net = None
                    status = f"{type(exc).__name__}: {exc}"
            t_provable = time.perf_counter() - t0
            max_err, fe = _score(net, teacher, dist, eval_seed, eval_samples) if net is not None else (np.inf, np.inf)
            for f in factors:
                rows.append({**base, "method": f"{learner} (refine=True)", "budget_factor": f, "budget_s": t_provable,
                             "time_s": t_provable, "starts": 1, "max_unit_error": max_err, "function_error": fe,
                             "status": "ok" if net is not None else status})
            if log:
                log(f"[k={k}, seed {s}] {learner}: {t_provable:.2f} s, max unit error {max_err:.2g}")
            for f in factors:
                budget = f * t_provable
                for method in methods:
                    t0 = time.perf_counter()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", TimeBudgetWarning)
                        if method == "gradient-descent":
                            est = GradientDescentLearner(k, n_restarts=1 << 20, time_budget=budget,
                                                         random_state=fit_seed).fit(X, Y)
                            net, starts = est.network_, est.diagnostics_["time_budget"]["restarts_run"]
                        else:
                            net, info = train_baseline(method, X, Y, k, random_state=fit_seed, restarts=None,
                                                       deadline=t0 + budget, torch_threads=torch_threads)
                            starts = info["starts"]
                    used = time.perf_counter() - t0
                    max_err, fe = _score(net, teacher, dist, eval_seed, eval_samples)
                    rows.append({**base, "method": method, "budget_factor": f, "budget_s": budget, "time_s": used,
                                 "starts": int(starts), "max_unit_error": max_err, "function_error": fe, "status": "ok"})
                    if log:
                        log(f"[k={k}, seed {s}] {method} at {f:g}x ({budget:.2f} s): {used:.2f} s, {starts} start(s), "
                            f"max unit error {max_err:.2g}")
    df = pd.DataFrame(rows)
    df["success"] = df["max_unit_error"] < float(success_tol)
    return df, _budget_figure(df, success_tol)


def _budget_figure(df, success_tol: float):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    factors = sorted(df["budget_factor"].unique())
    fig, axes = plt.subplots(1, len(factors), figsize=(5.2 * len(factors), 4.0), squeeze=False, sharey=True)
    per_k = df.groupby("k")["seed"].nunique()
    n_teachers = f"{per_k.min()}" if per_k.min() == per_k.max() else f"{per_k.min()}-{per_k.max()}"
    for ax, f in zip(axes[0], factors):
        part = df[df["budget_factor"] == f]
        for method, g in part.groupby("method", sort=False):
            rate = g.groupby("k")["success"].mean()
            provable = "refine=True" in method
            ax.plot(rate.index, rate.values, marker="s" if provable else "o", lw=2.5 if provable else 1.2,
                    label=method)
        ax.set_xlabel("hidden units k")
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(f"budget = {f:g} x the provable learner's time", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"success rate (max unit error < {success_tol:g}), {n_teachers} teachers per k")
    axes[0][0].legend(fontsize=7, loc="best")
    d = int(df["d"].iloc[0])
    fig.suptitle(f"d = {d}, {df['outputs'].iloc[0]} output, N = {int(df['n_samples'].iloc[0])}, noiseless", fontsize=10)
    fig.tight_layout()
    return fig

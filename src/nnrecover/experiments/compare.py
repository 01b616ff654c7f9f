"""Comparisons of learners: every registered learner on one teacher, and the provable learners against
training from random starts over a grid of teachers.

``compare-learners``
    Every registered learner that applies to one teacher, fitted on the same stream of samples:
    parameter error, function error, fit time. ``nnrecover demo`` runs it with the defaults below.

Optional learner attributes read by the comparison (all looked up defensively):

``applies_to(network, distribution)``
    On the record or the class; returns a bool or ``(bool, reason)``. A learner without it is tried,
    and one that refuses the teacher by raising :class:`nnrecover.errors.AssumptionError` is reported
    as "not applicable" with its message. Another nnrecover error (e.g. ``ConvergenceError``) is
    reported as "failed"; any other exception is a bug and propagates.
``max_outputs``
    On the class: the number of outputs the algorithm learns (e.g. 1 for Awasthi et al.'s scalar
    model). With a teacher of more outputs the learner is fitted on the first ``max_outputs`` target
    columns and compared with the teacher restricted to those outputs (same hidden layer); the
    ``outputs`` column of the table says how many outputs each learner saw.

Self-checks: the ``certificates`` column is "failed" when a fit recorded a failed certificate in
``diagnostics_["certificates"]`` or emitted a :class:`~nnrecover.errors.CertificateWarning` (the
estimate may be wrong even though the fit returned), "passed" when it recorded certificates and all
passed, and "-" when the learner checks nothing (or did not run).

Status: "ok" only when the fit returned, no certificate failed and the error is not large;
"failed: ..." (with the reason) when the learner raised an nnrecover error, a certificate failed, the
relative L2 function error exceeds :data:`FAILED_FUNCTION_ERROR` = 0.5 (less than 3/4 of the output
energy explained; predicting 0 has error 1), or ``max_unit_error`` exceeds :data:`FAILED_UNIT_ERROR` =
1.0 (with unit-norm canonical rows, an error of 1 means some unit's direction is off by 60 degrees or
its output weight by 1: the unit was not recovered); "not applicable: ..." when an assumption of the
learner does not hold.

Time budget: ``time_budget`` is passed to the learners that take it (those that run random restarts:
:class:`~nnrecover.learners.GradientDescentLearner`); when one stops at its budget, the progress log
says so (and the learner warns).

``compare`` and ``compare-budget``
    The ``compare`` study: provable learners against training from random starts, over a grid of teachers.

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
  :mod:`nnrecover.experiments.training`;
* on request (``baselines=("expand-and-cluster", ...)``), Expand-and-Cluster, which is not told the
  teacher's width (:func:`~nnrecover.experiments.training.expand_and_cluster`, students of
  ``eac_expansion * k`` units); ``learner_width="auto"`` then asks the nnrecover learners for
  ``n_hidden="auto"`` too, so that both find the width.

:func:`compare_budget_experiment` (experiment ``compare-budget``) asks the other question: given the wall
time the provable learner took, how often does training from random starts recover the teacher?

Per method and cell: success rate (the teacher's width and max unit error < ``success_tol`` = 1e-6
after matching units; the ``width`` column is the width of the returned network),
median max unit error, median relative L2 function error, median wall time, samples used. The
figure shows success against ``k``, function error and time against ``d``, and (when several sample
sizes are given) function error against ``N``. A fit that returned a network is counted in every
panel whatever its error (its ``status`` says "failed" above the demo's thresholds,
:data:`FAILED_FUNCTION_ERROR` and ``FAILED_UNIT_ERROR``); a learner
that refused the cell is left out of the panels and its refusal kept in the table.
"""

from __future__ import annotations

import importlib.util
import itertools
import time
import warnings
import zlib
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from .. import metrics
from .._validation import check_positive_int, check_random_state
from ..data.views import FirstOutputs
from ..distributions import StandardGaussian, SymmetricMixture
from ..errors import (
    AssumptionError,
    AssumptionWarning,
    CertificateWarning,
    InputError,
    NNRecoverError,
    TimeBudgetWarning,
)
from ..learners import (
    GradientDescentLearner,
    available,
    get_learner,
    learner_parameters,
    make_learner,
)
from ..metrics import parameter_error
from ..network import TwoLayerNetwork, random_network
from ..sampling import sample, sample_stream
from .registry import experiment
from .training import (
    EAC_BASELINE,
    SKLEARN_BASELINES,
    TORCH_BASELINES,
    TRAINING_BASELINES,
    expand_and_cluster,
    torch_baseline,
    train_baseline,
)

if TYPE_CHECKING:  # annotations only: pandas and matplotlib are imported where a table or figure is made
    import matplotlib.figure
    import pandas

__all__ = ["compare_experiment", "compare_budget_experiment", "demo_teacher", "compare_learners", "select_learners",
           "comparison_figure", "recovery_figure", "run_compare_learners", "demo_options", "DEMO_DEFAULTS",
           "DEMO_MAX_OUTPUTS", "FAILED_FUNCTION_ERROR", "FAILED_UNIT_ERROR"]
_INPUTS = ("gaussian", "mixture")
_OUTPUTS = ("scalar", "vector")


#: relative L2 function error above which a fit's status is "failed" (module docstring, "Status")
FAILED_FUNCTION_ERROR = 0.5


#: max_unit_error above which a fit's status is "failed" (module docstring, "Status")
FAILED_UNIT_ERROR = 1.0


#: outputs a learner can learn, for learner classes that do not declare ``max_outputs`` themselves:
#: Awasthi et al. 2021 learn a scalar network f(x) = a^T relu(W^T x + b) (their Section 1)
DEMO_MAX_OUTPUTS = {"hermite-tensor": 1}


def demo_options(quick: bool = False) -> tuple[dict, dict]:
    """Learner options of the demo: ``(per_learner, common)``, applied to learners that take them.

    Least-squares fits dominate the demo's time, so they use at most ``rows`` = 20,000 rows (5,000 with
    ``quick``): the baseline (2 random starts instead of 5; on all 100,000 rows with 5 starts it takes
    minutes) and every learner's shared local refinement (``refine_options``; its default is 80% of
    the samples). On noiseless data this many rows still pin the parameters down to round-off.
    """
    rows = 5_000 if quick else 20_000
    return ({"gradient-descent": {"max_samples": rows, "n_restarts": 2}},
            {"refine_options": {"max_samples": rows}})


#: the demo problem: d = 10 inputs, k = 4 ReLU units, p = 4 outputs (Ge et al. and Bakshi et al. need
#: p >= k), small biases (Awasthi et al. handle biases; the bias-free papers see a small misfit)
DEMO_DEFAULTS = {"n_inputs": 10, "n_hidden": 4, "n_outputs": 4, "bias": 0.1, "n_samples": 100_000,
                 "quick_n_samples": 20_000, "eval_samples": 50_000, "chunk_size": 1 << 15}


def demo_teacher(rng: Any = None, *, n_inputs: int = 10, n_hidden: int = 4, n_outputs: int = 4,
                 bias: float = 0.1, activation: str = "relu") -> tuple[TwoLayerNetwork, StandardGaussian]:
    """The demo's teacher: unit-norm random rows, biases uniform in ``[-bias, bias]``, output weights
    with magnitudes in [0.5, 1.5] and random signs, zero output bias.

    Returns
    -------
    (TwoLayerNetwork, StandardGaussian)
    """

    bias = float(bias)
    if not (np.isfinite(bias) and bias >= 0):
        raise InputError(f"bias is the half-width of the hidden-bias range and must be >= 0, got {bias}.")
    net = random_network(n_inputs, n_hidden, n_outputs, activation=activation, rng=rng,
                         bias_range=(-bias, bias))
    return net, StandardGaussian(n_inputs)


def _applies(record, network, distribution) -> tuple[bool, str]:
    for owner in (record, getattr(record, "target", None)):
        hook = getattr(owner, "applies_to", None)
        if callable(hook):
            result = hook(network, distribution)
            if isinstance(result, tuple):
                return bool(result[0]), str(result[1]) if len(result) > 1 else ""
            return bool(result), ""
    return True, ""


def _max_outputs(target) -> int | None:
    value = getattr(target, "max_outputs", None)
    return int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1 else None


def _learner_seed(base: int, name: str) -> int:
    """A per-learner seed that does not depend on which other learners are registered."""
    ss = np.random.SeedSequence(base, spawn_key=(zlib.crc32(name.encode()),))
    return int(ss.generate_state(1, np.uint32)[0])


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 160 else text[:157] + "..."


def compare_learners(teacher, distribution, n_samples: int, *, rng: Any = None,
                     learners: Sequence[str] | None = None,
                     learner_options: Mapping[str, Mapping[str, Any]] | None = None,
                     learner_defaults: Mapping[str, Mapping[str, Any]] | None = None,
                     common_defaults: Mapping[str, Any] | None = None,
                     max_outputs: Mapping[str, int] | None = None,
                     noise: float = 0.0, chunk_size: int = 1 << 15, eval_samples: int = 50_000,
                     time_budget: float | None = None, with_unrefined: bool = False,
                     log: Callable[[str], None] | None = None,
                     networks: dict | None = None, n_hidden: int | str | None = None) -> pandas.DataFrame:
    """Fit every applicable registered learner on one stream of samples from ``teacher``.

    Parameters
    ----------
    teacher : TwoLayerNetwork
    distribution : Distribution
        Input law of the samples and of the function-error estimate.
    n_samples : int
        Samples drawn (as a re-iterable :class:`nnrecover.SampleStream`: bounded memory).
    rng : None, int or Generator
        One seed determines the samples, the evaluation samples and every learner's
        ``random_state`` (derived from the learner's name, so adding a learner changes nothing else).
    learners : sequence of str, optional
        Registry names to run (default: every learner in ``nnrecover.learners.available(learners_only=True)``).
    learner_options : mapping name -> options, optional
        Extra constructor options per learner (unknown options raise :class:`InputError`).
    learner_defaults : mapping name -> options, optional
        Per-learner options applied only if the learner is run, takes them, and ``learner_options``
        does not set them (the demo's :func:`demo_options`).
    common_defaults : mapping, optional
        The same for every learner (the demo's :func:`demo_options`).
    max_outputs : mapping name -> int, optional
        Outputs a learner can learn, used when its class does not declare ``max_outputs`` (the
        demo's :data:`DEMO_MAX_OUTPUTS`).
    noise : float
        Label-noise standard deviation.
    chunk_size : int
        Rows per chunk of the stream.
    eval_samples : int
        Monte-Carlo samples of :func:`nnrecover.metrics.function_error`; its relative standard error
        is about ``sqrt(Var[(f - g)^2] / eval_samples) / E[f^2]``.
    time_budget : float, optional
        Seconds per learner, passed as ``time_budget`` to learners that take one (see the module
        docstring); the progress log reports a learner that stopped at it.
    with_unrefined : bool, default False
        Also fit every learner that takes ``refine`` with ``refine=False`` (the paper's algorithm
        alone, without the shared local refinement), one extra row each.
    log : callable, optional
        Called with progress lines.
    networks : dict, optional
        If given, filled with ``label -> (fitted network, teacher restricted to the outputs it learned)``
        for every fit that returned a network, failed ones included (``label``: the learner's name, with
        ``(no refine)`` for ``refine=False``); :func:`recovery_figure` draws them.
    n_hidden : int or "auto", optional
        The width every learner is asked for: default the teacher's; ``"auto"`` lets each learner read
        it from the data (:mod:`nnrecover.learners.width`). The ``width`` column holds what it returned.

    Returns
    -------
    pandas.DataFrame
        One row per learner (and refine setting): ``learner, paper, algorithm, refine, status,
        max_unit_error, max_angle, function_error, fit_time_s, n_samples, outputs, certificates``
        (see the module docstring for ``certificates``). ``refine`` is
        "yes"/"no" for learners with a ``refine`` option, else "-". Errors are NaN when the learner
        was not run; ``n_samples`` is what the fit reports it used (``diagnostics_["n_samples_used"]``)
        or else the number drawn; ``outputs`` is the number of teacher outputs the learner was given
        (see ``max_outputs``); ``width`` is the number of hidden units of the returned network.
    """
    import pandas as pd  # deferred: pandas is slow to import


    n_samples = check_positive_int(n_samples, "n_samples")
    if n_hidden is None:
        width = teacher.n_hidden
    elif isinstance(n_hidden, str):
        if n_hidden != "auto":
            raise InputError(f"n_hidden must be an int, 'auto' or None (the teacher's width), got {n_hidden!r}.")
        width = n_hidden
    else:
        width = check_positive_int(n_hidden, "n_hidden")
    gen = check_random_state(rng)
    base = int(gen.integers(0, 2**63 - 1))
    stream = sample_stream(teacher, distribution, n_samples, chunk_size=chunk_size, noise=noise, rng=gen)
    eval_seed = int(gen.integers(0, 2**63 - 1))
    records = select_learners(learners)
    options = dict(learner_options or {})
    unknown = sorted(set(options) - {r.name for r in records})
    if unknown:
        raise InputError(f"learner_options names learner(s) {', '.join(unknown)} that are not being run.")
    defaults: dict[str, Any] = {"activation": teacher.activation.spec, **dict(common_defaults or {})}
    if time_budget is not None:
        defaults.update(time_budget=float(time_budget))
    rows = []
    for i, rec in enumerate(records, 1):
        m = _max_outputs(rec.target)
        if m is None and rec.name in (max_outputs or {}):
            m = check_positive_int(max_outputs[rec.name], f"max_outputs[{rec.name!r}]")
        m = teacher.n_outputs if m is None else min(m, teacher.n_outputs)
        truth = teacher if m == teacher.n_outputs else teacher.first_outputs(m)
        data = stream if m == teacher.n_outputs else FirstOutputs(stream, m)
        base_row = {"learner": rec.name, "paper": rec.paper, "algorithm": rec.algorithm, "refine": "-",
                    "status": "ok", "max_unit_error": np.nan, "max_angle": np.nan, "function_error": np.nan,
                    "fit_time_s": np.nan, "n_samples": n_samples, "outputs": m, "certificates": "-", "width": np.nan}
        tag = f"[{i}/{len(records)}] {rec.name}"
        ok, reason = _applies(rec, teacher, distribution)
        if not ok:
            rows.append({**base_row, "status": "not applicable" + (f": {reason}" if reason else "")})
            if log:
                log(f"{tag}: {rows[-1]['status']}")
            continue
        opts = dict(options.get(rec.name) or {})
        variants: list[bool | None] = [None]
        if "refine" in learner_parameters(rec.target) and "refine" not in opts:
            variants = [False, True] if with_unrefined else [True]
        for refine in variants:
            kw = opts if refine is None else {**opts, "refine": refine}
            est = make_learner(rec.target, width, kw,
                               defaults={**defaults, **dict((learner_defaults or {}).get(rec.name, {}))},
                               random_state=_learner_seed(base, rec.name))
            row = dict(base_row)
            if refine is not None or "refine" in opts:
                row["refine"] = "yes" if getattr(est, "refine", refine) else "no"
            label = tag + ("" if refine is None else f" (refine={refine})")
            if log:
                log(f"{label}: fitting ({rec.paper}, {rec.algorithm}) ...")
            _fit_and_score(est, data, truth, distribution, row, eval_samples, eval_seed)
            if networks is not None and getattr(est, "network_", None) is not None and \
                    not row["status"].startswith("not applicable"):
                networks[rec.name + (" (no refine)" if row["refine"] == "no" else "")] = (est.network_, truth)
            if log:
                budget = (getattr(est, "diagnostics_", None) or {}).get("time_budget") or {}
                stopped = (f" (stopped at the time budget of {budget['seconds']:g} s after {budget['restarts_run']} "
                           f"of {budget['restarts_requested']} restarts)") if budget.get("exhausted") else ""
                log(f"{label}: {row['status']} in {row['fit_time_s']:.1f} s{stopped}")
            rows.append(row)
    return pd.DataFrame(rows)


def select_learners(learners: Sequence[str] | None = None) -> list:
    """The registry records of the named learners (every registered learner when ``learners`` is None).

    Raises
    ------
    InputError
        An unknown name (the message lists the available ones), or no learner registered at all.
    """

    records = available(learners_only=True)
    if learners is not None:
        known = {r.name: r for r in records}
        missing = [n for n in learners if n not in known]
        if missing:
            raise InputError(f"unknown learner(s) {', '.join(missing)}; available: {', '.join(known) or '(none)'}.")
        records = [known[n] for n in learners]
    if not records:
        raise InputError("no learner is registered; nothing to compare.")
    return records


def _fit_and_score(est, data, truth, distribution, row: dict, eval_samples: int, eval_seed: int) -> None:
    """Fit ``est`` on ``data`` and fill ``row`` with status, time, samples used and errors."""

    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CertificateWarning)
        try:
            est.fit(data)
        except AssumptionError as exc:
            row["status"] = f"not applicable: {_one_line(exc)}"
        except NNRecoverError as exc:
            row["status"] = f"failed ({type(exc).__name__}): {_one_line(exc)}"
    row["fit_time_s"] = time.perf_counter() - t0
    for w in caught:  # recorded only to be seen here: pass every warning on to the caller
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    if row["status"] != "ok":
        return
    diag = getattr(est, "diagnostics_", None) or {}
    warned = any(issubclass(w.category, CertificateWarning) for w in caught)
    row["certificates"] = _certificate_status(diag, warned)
    for key in ("n_samples_used", "n_samples_seen", "n_samples"):  # what the fit actually used
        if isinstance(diag.get(key), (int, np.integer)):
            row["n_samples"] = int(diag[key])
            break
    W = getattr(est, "hidden_weights_", None)
    if W is not None and np.shape(W) == truth.hidden_weights.shape:
        row["max_angle"] = float(metrics.weight_error(W, truth.hidden_weights)["max_angle"])
    net = getattr(est, "network_", None)
    if net is not None:
        row["width"] = int(net.n_hidden)
        row["max_unit_error"] = float(metrics.parameter_error(net, truth)["max_unit_error"])
        row["function_error"] = float(metrics.function_error(net, truth, distribution, n=eval_samples,
                                                             rng=eval_seed))
    row["status"] = _judge(row, has_network=net is not None)


def _judge(row: Mapping, *, has_network: bool) -> str:
    """"ok", or "failed: <reasons>" for a fit that returned (thresholds in the module docstring)."""
    reasons = []
    if row["certificates"] == "failed":
        reasons.append("a certificate failed")
    fe, ue = row["function_error"], row["max_unit_error"]
    if has_network and not np.isfinite(fe):
        reasons.append(f"function_error is {fe}")
    elif fe > FAILED_FUNCTION_ERROR:
        reasons.append(f"function_error {fe:.3g} > {FAILED_FUNCTION_ERROR:g}")
    if ue > FAILED_UNIT_ERROR:  # NaN (not computed) compares False
        reasons.append(f"max_unit_error {ue:.3g} > {FAILED_UNIT_ERROR:g}")
    return "ok" if not reasons else "failed: " + "; ".join(reasons)


def _certificate_status(diagnostics: Mapping, warned: bool) -> str:
    """The ``certificates`` column: "failed", "passed" or "-" (nothing checked); see the module docstring."""
    certs = diagnostics.get("certificates") if isinstance(diagnostics, Mapping) else None
    certs = certs if isinstance(certs, Mapping) else {}
    failed = [name for name, c in certs.items() if isinstance(c, Mapping) and not c.get("passed", True)]
    if warned or failed:
        return "failed"
    return "passed" if certs else "-"


def comparison_figure(df: pandas.DataFrame, *, title: str = "") -> matplotlib.figure.Figure:
    """Horizontal bar chart of the comparison table: errors (log scale) and fit time per learner."""
    from matplotlib.figure import Figure  # deferred: matplotlib is slow to import

    labels = [f"{n} ({'refined' if r == 'yes' else 'no refine'})" if r in ("yes", "no") else n
              for n, r in zip(df["learner"], df["refine"])]
    y = np.arange(len(labels))[::-1]  # first row on top
    fig = Figure(figsize=(10, 1.2 + 0.42 * len(labels)), layout="constrained")
    ax_err, ax_time = fig.subplots(1, 2, sharey=True, width_ratios=(2.2, 1))
    height = 0.38
    floor = 1e-17  # exact zeros drawn at the left edge of the log axis
    for off, col, label in ((height / 2, "max_unit_error", "max unit error"),
                            (-height / 2, "function_error", "relative L2 function error")):
        vals = np.asarray(df[col], dtype=float)
        ax_err.barh(y + off, np.where(np.isfinite(vals), np.maximum(vals, floor), np.nan), height, label=label)
    ax_err.set_xscale("log")
    ax_err.set_xlim(left=floor)
    ax_err.set_yticks(y, labels)
    ax_err.set_xlabel("error (log scale)")
    ax_err.grid(axis="x", alpha=0.3)
    ax_err.legend(fontsize=8, loc="lower right")
    ax_time.barh(y, np.asarray(df["fit_time_s"], dtype=float), color="tab:gray")
    ax_time.set_xlabel("fit time [s]")
    ax_time.grid(axis="x", alpha=0.3)
    # rows without bars (not applicable, failed) would fall outside the autoscaled limits, their label
    # and note under the x tick labels: every row gets its slot
    ax_err.set_ylim(-0.5 - height, len(labels) - 0.5 + height)
    for j, status in zip(y, df["status"]):
        if status != "ok":
            ax_err.annotate("not applicable" if status.startswith("not applicable") else "failed",
                            (0.02, j), xycoords=("axes fraction", "data"), va="center", fontsize=8,
                            bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.8))
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def recovery_figure(networks: Mapping[str, tuple], *, title: str = "") -> matplotlib.figure.Figure:
    """Recovered against true parameters, one panel per fitted network.

    Both networks are put in canonical form (for homogeneous activations) and their units matched as in
    :func:`nnrecover.metrics.parameter_error`; every hidden weight, hidden bias and output weight of a
    matched unit is one point (true value on x, recovered on y). A perfect recovery lies on the diagonal.

    Parameters
    ----------
    networks : mapping label -> (estimated TwoLayerNetwork, true TwoLayerNetwork)
        As filled by :func:`compare_learners` (``networks=``).
    title : str
    """
    from matplotlib.figure import Figure  # deferred: matplotlib is slow to import


    items = list(networks.items())
    if not items:
        raise InputError("recovery_figure needs at least one fitted network.")
    cols = min(len(items), 3)
    rows = -(-len(items) // cols)
    fig = Figure(figsize=(3.6 * cols, 3.4 * rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    for ax, (label, (est, truth)) in zip(axes, items):
        err = parameter_error(est, truth)
        if err["canonical"]:
            est, truth = est.canonical(), truth.canonical()
        match = np.asarray(err["matching"])
        ok = match >= 0
        lo, hi = np.inf, -np.inf
        for name, t, e, marker in (
                ("hidden weights", truth.hidden_weights[ok], est.hidden_weights[match[ok]], "o"),
                ("hidden biases", truth.hidden_bias[ok], est.hidden_bias[match[ok]], "s"),
                ("output weights", truth.output_weights[:, ok], est.output_weights[:, match[ok]], "^")):
            t, e = np.ravel(t), np.ravel(e)
            if t.size:
                ax.scatter(t, e, s=10, marker=marker, alpha=0.7, label=name)
                lo, hi = min(lo, t.min(), e.min()), max(hi, t.max(), e.max())
        ax.plot([lo, hi], [lo, hi], color="0.5", lw=0.8, zorder=0)
        ax.set_title(f"{label}\nmax unit error {err['max_unit_error']:.1e}", fontsize=9)
        ax.set_xlabel("true")
        ax.set_ylabel("recovered")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper left")
    for ax in axes[len(items):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


@experiment("compare-learners", paper="baseline",
            description="every applicable learner on one ReLU teacher: parameter/function error and fit time")
def run_compare_learners(*, rng, quick: bool = False, n_inputs: int = 10, n_hidden: int = 4,
                         n_outputs: int = 4, bias: float = 0.1, n_samples: int | None = None,
                         noise: float = 0.0, learners: Sequence[str] | None = None,
                         time_budget: float | None = None, with_unrefined: bool = True
                         ) -> tuple[pandas.DataFrame, matplotlib.figure.Figure]:
    """The ``nnrecover demo`` comparison as a registered experiment (``quick``: 20,000 samples)."""
    gen = check_random_state(rng)
    teacher, dist = demo_teacher(gen, n_inputs=n_inputs, n_hidden=n_hidden, n_outputs=n_outputs, bias=bias)
    if n_samples is None:
        n_samples = DEMO_DEFAULTS["quick_n_samples" if quick else "n_samples"]
    per_learner, common = demo_options(quick)
    df = compare_learners(teacher, dist, n_samples, rng=gen, learners=learners, noise=noise,
                          learner_defaults=per_learner, common_defaults=common,
                          max_outputs=DEMO_MAX_OUTPUTS, with_unrefined=with_unrefined,
                          chunk_size=DEMO_DEFAULTS["chunk_size"],
                          eval_samples=10_000 if quick else DEMO_DEFAULTS["eval_samples"],
                          time_budget=time_budget)
    fig = comparison_figure(df, title=f"d={n_inputs}, k={n_hidden}, p={n_outputs}, |b|<={bias}, "
                                      f"n={n_samples}, noise={noise}")
    return df, fig



def _have_torch(log) -> bool:

    found = importlib.util.find_spec("torch") is not None
    if log and not found:
        log("PyTorch is not installed: the torch baselines are left out (pip install 'nnrecover[torch]').")
    return found


def _teacher(d: int, k: int, bias: bool, output: str, inputs: str, gen: np.random.Generator):

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
                       learner_width: int | str | None = None, with_unrefined: bool = True,
                       wide_cells: bool = False, eac_expansion: int = 4,
                       eac_options: Mapping[str, Any] | None = None, csv_path: str | None = None,
                       log: Callable[[str], None] | None = None):
    """Provable learners against random-start training over a grid of teachers (see the module docstring).

    Parameters
    ----------
    rng : int, Generator or None
    quick : bool
        One small cell (d = 10, k = 3, biases, vector output, Gaussian, noiseless, N = 20000), one
        seed, one L-BFGS start and 30 Adam epochs: a smoke test of seconds.
    dims, widths : sequences of int
        Default ``(10, 50, 100)`` and ``(5, 10, 20)``; cells with ``k > d`` are skipped unless ``wide_cells``.
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
        ``"torch-adam"`` and ``"expand-and-cluster"`` (:mod:`nnrecover.experiments.training`). Default: all
        of them but Expand-and-Cluster, the PyTorch ones only when PyTorch is installed.
    restarts, adam_epochs : int
        Starts of scikit-learn's L-BFGS and epochs of both Adam baselines.
    success_tol : float
        A fit succeeds when its max unit error is below this.
    eval_samples : int
        Monte-Carlo samples of the function error.
    torch_threads : int or None, default 1
        PyTorch threads (see :func:`compare_budget_experiment`).
    learner_width : int, "auto" or None
        The width the nnrecover learners are asked for (``n_hidden``): default the teacher's; ``"auto"``:
        read from the data by each learner. The training baselines are always given the teacher's width,
        Expand-and-Cluster only its students' width.
    with_unrefined : bool, default True
        Also run every provable learner with ``refine=False``.
    wide_cells : bool, default False
        Keep the cells with ``k > d`` (which the provable learners do not cover: they say so, or, with
        ``learner_width="auto"``, return the width they read).
    eac_expansion : int, default 4
        Expand-and-Cluster's students have ``eac_expansion * k`` units (the paper's factor).
    eac_options : mapping, optional
        Further keyword arguments of :func:`~nnrecover.experiments.training.expand_and_cluster`.
    csv_path : str, optional
        Rows are written to this CSV after every teacher (a partial run leaves its finished teachers).
    log : callable, optional
        Receives progress lines.

    Returns
    -------
    (pandas.DataFrame, matplotlib.figure.Figure)
        One row per (cell, seed, method) and the figure. ``width`` is the width of the returned network
        (NaN when none); ``success`` needs ``width == k`` and a max unit error below ``success_tol``.
    """
    import pandas as pd  # deferred: pandas is slow to import


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
    unknown = [b for b in baselines if b not in ("gradient-descent", *TRAINING_BASELINES, EAC_BASELINE)]
    if unknown:
        raise InputError(f"unknown baseline(s) {unknown}; use gradient-descent, {EAC_BASELINE} or one of "
                         f"{TRAINING_BASELINES}.")
    eac_expansion = check_positive_int(eac_expansion, "eac_expansion")
    eac_options = dict(eac_options or {})
    bad = sorted(set(eac_options) & {"student_width", "random_state", "threads"})
    if bad:
        raise InputError(f"eac_options must not set {bad}: the study sets them.")
    if learners is None:
        # Goel-Panigrahy's learner recovers threshold units under an unknown upper network: another model
        learners = [r.name for r in available(learners_only=True) if r.paper not in ("baseline", "goel2019")]
    nn_methods = list(learners) + (["gradient-descent"] if "gradient-descent" in baselines else [])
    rows = []
    cells = [c for c in itertools.product(dims, widths, biases, outputs, inputs, noises, n_samples)
             if c[1] <= c[0] or wide_cells]
    for ci, (d, k, bias, output, inp, noise, N) in enumerate(cells, 1):
        for s in range(seeds):
            teacher, dist = _teacher(d, k, bias, output, inp, gen)
            cell = {"d": d, "k": k, "bias": bias, "outputs": output, "inputs": inp, "noise": noise,
                    "n_samples": N, "seed": s}
            data_seed = int(gen.integers(0, 2**63 - 1))
            eval_seed = int(gen.integers(0, 2**63 - 1))
            if log:
                log(f"[cell {ci}/{len(cells)}, seed {s}] d={d} k={k} bias={bias} {output} {inp} noise={noise} N={N}")
            first_row = len(rows)
            with warnings.catch_warnings():
                if learner_width is not None:
                    # an unsure width is a result of the study (the width column), not a message per fit
                    warnings.simplefilter("ignore", AssumptionWarning)
                df = compare_learners(teacher, dist, N, rng=data_seed, learners=nn_methods, noise=noise,
                                      eval_samples=eval_samples, with_unrefined=with_unrefined,
                                      max_outputs=DEMO_MAX_OUTPUTS, n_hidden=learner_width) if nn_methods else None
            for r in ([] if df is None else df.to_dict("records")):
                rows.append({**cell, "method": r["learner"], "refine": r["refine"], "status": r["status"],
                             "max_unit_error": r["max_unit_error"], "function_error": r["function_error"],
                             "time_s": r["fit_time_s"], "samples_used": r["n_samples"], "width": r["width"]})
            sk = [b for b in baselines if b in TRAINING_BASELINES or b == EAC_BASELINE]
            if sk:
                # the same rows compare_learners streamed: its generator draws one seed, then the samples
                g = np.random.default_rng(data_seed)
                g.integers(0, 2**63 - 1)
                X, Y = sample(teacher, dist, N, noise=noise, rng=g)
            for method in sk:
                if method == EAC_BASELINE:
                    rows.append({**cell, **_eac_row(X, Y, teacher, dist, k, s, eac_expansion, eac_options,
                                                    torch_threads, eval_seed, eval_samples, N)})
                    if log:
                        log(f"  {method}: {rows[-1]['status']}, width {rows[-1]['width']}, "
                            f"max unit error {rows[-1]['max_unit_error']:.2g}, {rows[-1]['time_s']:.1f} s")
                    continue
                t0 = time.perf_counter()
                net, info = train_baseline(method, X, Y, k, random_state=s,
                                           restarts=restarts if method == "sklearn-lbfgs" else 1,
                                           max_iter=adam_epochs if method.endswith("-adam") else None,
                                           torch_threads=torch_threads)
                elapsed = time.perf_counter() - t0
                max_err, fe = _score(net, teacher, dist, eval_seed, eval_samples)
                status = ("failed" if not (fe <= FAILED_FUNCTION_ERROR and max_err <= FAILED_UNIT_ERROR) else "ok")
                rows.append({**cell, "method": method, "refine": "-", "status": f"{status} ({info['n_iter']} iterations)",
                             "max_unit_error": max_err, "function_error": fe, "time_s": elapsed, "samples_used": N,
                             "width": int(net.n_hidden)})
            if log and learner_width is not None:
                for r in rows[first_row:]:
                    if r["method"] != EAC_BASELINE:
                        log(f"  {_label(r)}: width {r['width']}, max unit error {r['max_unit_error']:.2g}, "
                            f"{r['time_s']:.1f} s")
            if csv_path is not None:
                _success_column(pd.DataFrame(rows), success_tol).to_csv(csv_path, index=False)
    df = _success_column(pd.DataFrame(rows), success_tol)
    return df, _figure(df, success_tol)


def _success_column(df, success_tol: float):
    """``success``: the teacher's width and every unit within ``success_tol`` (a network of another width
    has unmatched units, whatever the error of the matched ones)."""
    right_width = df["width"].astype(float) == df["k"].astype(float)
    df["success"] = right_width & (df["max_unit_error"].astype(float) < float(success_tol))
    return df


def _eac_row(X, Y, teacher, dist, k: int, seed: int, expansion: int, options: Mapping[str, Any],
             torch_threads, eval_seed: int, eval_samples: int, n_rows: int) -> dict:
    """One Expand-and-Cluster fit of the compare study, scored like the provable learners: the max unit
    error counts a missing unit against the zero unit and leaves extra units out (the width says so)."""
    t0 = time.perf_counter()
    try:
        net, info = expand_and_cluster(X, Y, student_width=expansion * k, random_state=seed, threads=torch_threads,
                                       **options)
    except NNRecoverError as exc:  # no shared cluster: a result of the study
        return {"method": EAC_BASELINE, "refine": "-", "status": f"failed ({type(exc).__name__}): {_one_line(exc)}",
                "max_unit_error": np.inf, "function_error": np.nan, "time_s": time.perf_counter() - t0,
                "samples_used": n_rows, "width": 0}
    elapsed = time.perf_counter() - t0
    max_err = float(metrics.parameter_error(net, teacher)["max_unit_error"])
    fe = float(metrics.function_error(net, teacher, dist, n=eval_samples, rng=eval_seed))
    status = "ok" if (fe <= FAILED_FUNCTION_ERROR and max_err <= FAILED_UNIT_ERROR) else "failed"
    losses = np.round(info["student_losses"], 10).tolist()
    return {"method": EAC_BASELINE, "refine": "-",
            "status": f"{status} (students {expansion * k} units, losses {losses}; {info['big_clusters']} shared "
                      f"clusters, {info['unaligned_removed']} unaligned; {info['n_iter']} fine-tune iterations)",
            "max_unit_error": max_err, "function_error": fe, "time_s": elapsed, "samples_used": n_rows,
            "width": int(info["width"])}


def _label(row) -> str:
    return row["method"] + ("" if row["refine"] in ("-", None) else f" (refine={row['refine']})")


def _figure(df, success_tol: float):
    import matplotlib  # deferred: matplotlib is slow to import

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt  # deferred: matplotlib is slow to import

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
    import pandas as pd  # deferred: pandas is slow to import


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
    import matplotlib  # deferred: matplotlib is slow to import

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt  # deferred: matplotlib is slow to import

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

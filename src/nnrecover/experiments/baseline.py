"""Baseline experiments and the learner comparison behind ``nnrecover demo``.

Experiments (registered in :mod:`nnrecover.experiments.registry`):

``baseline-gd``
    Error of the gradient-descent baseline (:class:`nnrecover.learners.GradientDescentLearner`,
    random initialisation + local optimisation, no paper) against the number of samples on a random
    ReLU teacher: ``max_unit_error`` (parameter error after matching units, :func:`nnrecover.metrics.parameter_error`)
    and the relative L2 function error, median and range over independent trials.
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
"""

from __future__ import annotations

import time
import warnings
import zlib
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from .._validation import check_positive_int, check_random_state
from ..data.views import FirstOutputs
from ..errors import AssumptionError, CertificateWarning, InputError, NNRecoverError
from .registry import experiment
from ..learners import learner_parameters, make_learner

if TYPE_CHECKING:
    import matplotlib.figure
    import pandas

    from ..distributions import StandardGaussian
    from ..network import TwoLayerNetwork

__all__ = ["demo_teacher", "compare_learners", "select_learners", "comparison_figure", "recovery_figure", "baseline_gd",
           "run_compare_learners", "demo_options", "DEMO_DEFAULTS", "DEMO_MAX_OUTPUTS", "FAILED_FUNCTION_ERROR",
           "FAILED_UNIT_ERROR"]

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
    from ..distributions import StandardGaussian
    from ..network import random_network

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
                     networks: dict | None = None) -> pandas.DataFrame:
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

    Returns
    -------
    pandas.DataFrame
        One row per learner (and refine setting): ``learner, paper, algorithm, refine, status,
        max_unit_error, max_angle, function_error, fit_time_s, n_samples, outputs, certificates``
        (see the module docstring for ``certificates``). ``refine`` is
        "yes"/"no" for learners with a ``refine`` option, else "-". Errors are NaN when the learner
        was not run; ``n_samples`` is what the fit reports it used (``diagnostics_["n_samples_used"]``)
        or else the number drawn; ``outputs`` is the number of teacher outputs the learner was given
        (see ``max_outputs``).
    """
    import pandas as pd

    from ..sampling import sample_stream

    n_samples = check_positive_int(n_samples, "n_samples")
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
                    "fit_time_s": np.nan, "n_samples": n_samples, "outputs": m, "certificates": "-"}
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
            est = make_learner(rec.target, teacher.n_hidden, kw,
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
    from ..learners import available

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
    from .. import metrics

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
    from matplotlib.figure import Figure

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
    from matplotlib.figure import Figure

    from ..metrics import parameter_error

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
    import pandas as pd
    from matplotlib.figure import Figure

    from .. import metrics
    from ..sampling import sample

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

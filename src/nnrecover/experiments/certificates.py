"""Calibration of every learner's certificate on a grid of teachers (``nnrecover experiment certificates``).

A certificate states what it bounds; a learner's verdict on one fit is *pass* (every certificate in
``diagnostics_["certificates"]`` passed and neither a :class:`~nnrecover.errors.CertificateWarning` nor
an :class:`~nnrecover.errors.AssumptionWarning` (input law) was issued: the user saw no warning) or
*fail*. Each learner claims an accuracy ``tolerance`` on the max unit error of its returned
network (:func:`nnrecover.metrics.parameter_error`, canonical forms, matched units):

* a certificate record carrying ``tolerance`` (``max_unit_error`` of PureNeuronLearner, ExactReLULearner,
  NoisyReLULearner; ``bound`` is its own first-order bound) states it itself;
* a learner without such a record (HermiteTensorLearner as measured here) is read as claiming
  :data:`IMPLIED_TOLERANCE` whenever it stays silent.

On each fit the true error is measured against the teacher and counted as

``false pass``   pass and error > tolerance (the certificate lied);
``false alarm``  fail and error <= tolerance (a warning about a good estimate);
``bound violation``  error > the reported bound (when a finite bound is reported).

The grid (per learner, :func:`certificate_grid`): in-assumption teachers at two sizes ``(d, k) = (8, 3),
(16, 6)``, two sample sizes ``n = 10^4, 4 x 10^4``, noise 0 and 0.1, five teachers each (40 fits), plus
out-of-assumption ones, five teachers each: far too few samples (``n = 600`` at ``d = 16``, ``k = 6``) and
Student-t(1.5) inputs (heavy tails, no variance; symmetric, so inside PureNeuronLearner's assumption):
50 fits per learner. Teachers: :func:`nnrecover.random_network` in canonical form (no biases,
``l = k`` outputs, or one output for HermiteTensorLearner, which learns one). A fit that refuses
(AssumptionError/InputError) is counted as ``refused`` (a refusal never returns a wrong answer). The
learners run with their defaults, and PureNeuronLearner, ExactReLULearner and NoisyReLULearner also
with ``refine=False`` (the certificate then judges the paper's algorithm's own output).
GradientDescentLearner issues no certificate and is left out.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Sequence

import numpy as np

from .._validation import check_random_state
from ..errors import AssumptionWarning, CertificateWarning, InputError, NNRecoverError
from ..learners import get_learner
from ..metrics import parameter_error
from ..network import random_network
from .registry import experiment

__all__ = ["certificates_experiment", "certificate_grid", "certificate_table", "IMPLIED_TOLERANCE", "LEARNERS"]

#: the accuracy a learner without a stated tolerance is taken to claim when it issues no warning
IMPLIED_TOLERANCE = 0.1

#: label -> (registry name, constructor options): each learner with its defaults, and the provable
#: learners also without refinement (their certificate then judges the paper's algorithm's own output)
LEARNERS = {
    "hermite-tensor": ("hermite-tensor", {}),
    "pure-neuron": ("pure-neuron", {}),
    "exact-relu": ("exact-relu", {}),
    "bakshi2019-noisy": ("bakshi2019-noisy", {}),
    "pure-neuron refine=False": ("pure-neuron", {"refine": False}),
    "exact-relu refine=False": ("exact-relu", {"refine": False}),
    "bakshi2019-noisy refine=False": ("bakshi2019-noisy", {"refine": False}),
}
#: outputs of the teachers: HermiteTensorLearner learns one output, the others need at least k
_OUTPUTS = {"hermite-tensor": lambda k: 1}


def certificate_grid(quick: bool = False) -> list[dict]:
    """The teacher configurations (one dict per fit, without the seed), see the module docstring."""
    if quick:
        sizes, ns, noises, reps = ((6, 3),), (20_000,), (0.0, 0.1), 1
        extra = [dict(d=6, k=3, n=600, noise=0.0, inputs="gaussian", case="too few samples"),
                 dict(d=6, k=3, n=20_000, noise=0.0, inputs="student-t(1.5)", case="non-Gaussian input")]
    else:
        sizes, ns, noises, reps = ((8, 3), (16, 6)), (10_000, 40_000), (0.0, 0.1), 5
        extra = ([dict(d=16, k=6, n=600, noise=0.0, inputs="gaussian", case="too few samples")] * 5
                 + [dict(d=8, k=3, n=20_000, noise=0.0, inputs="student-t(1.5)", case="non-Gaussian input")] * 5)
    grid = [dict(d=d, k=k, n=n, noise=s, inputs="gaussian", case="in assumption")
            for (d, k) in sizes for n in ns for s in noises for _ in range(reps)]
    return grid + [dict(e) for e in extra]


def _inputs(kind: str, n: int, d: int, gen: np.random.Generator) -> np.ndarray:
    if kind == "gaussian":
        return gen.standard_normal((n, d))
    return gen.standard_t(1.5, size=(n, d))


def _verdict(learner, caught) -> dict:
    """Pass/fail, the claimed tolerance and the reported bound of one fitted learner."""
    certs = getattr(learner, "diagnostics_", {}).get("certificates", {}) or {}
    cert_warned = any(issubclass(w.category, CertificateWarning) for w in caught)
    recorded = [c for c in certs.values() if c.get("passed") is not None]
    input_warned = any(issubclass(w.category, AssumptionWarning) for w in caught)
    passed = (not cert_warned) and (not input_warned) and all(bool(c["passed"]) for c in recorded)
    tols = [float(c["tolerance"]) for c in recorded if "tolerance" in c]
    bounds = [float(c["bound"]) for c in recorded if "bound" in c]
    return {"passed": bool(passed), "certificate_warning": cert_warned,
            "certificates": ",".join(sorted(certs)) or "-",
            "tolerance": min(tols) if tols else IMPLIED_TOLERANCE,
            "stated_tolerance": bool(tols),
            "bound": max(bounds) if bounds else float("nan")}


def _fit_one(label: str, cfg: dict, seed: int) -> dict:

    name, options = LEARNERS[label]
    gen = np.random.default_rng(seed)
    d, k, n = cfg["d"], cfg["k"], cfg["n"]
    p = _OUTPUTS.get(name, lambda k: k)(k)
    teacher = random_network(d, k, p, rng=gen).canonical()
    X = _inputs(cfg["inputs"], n, d, gen)
    Y = teacher.predict(X).reshape(n, p) + cfg["noise"] * gen.standard_normal((n, p))
    Y = Y[:, 0] if p == 1 else Y
    row = dict(learner=label, **cfg, n_outputs=p, seed=seed)
    cls = get_learner(name)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            learner = cls(k, random_state=seed, **options).fit(X, Y)
        except NNRecoverError as exc:  # a refusal: no estimate, hence no wrong answer
            row.update(status="refused", reason=f"{type(exc).__name__}: {str(exc)[:120]}",
                       fit_time=time.perf_counter() - t0, passed=False, error=float("nan"),
                       false_pass=False, false_alarm=False, bound_violation=False,
                       input_warning=any(issubclass(w.category, AssumptionWarning) for w in caught))
            return row
    row["fit_time"] = time.perf_counter() - t0
    row.update(_verdict(learner, caught))
    row["status"] = "fitted"
    row["input_warning"] = any(issubclass(w.category, AssumptionWarning) for w in caught)
    err = float(parameter_error(learner.network_, teacher)["max_unit_error"])
    row["error"] = err
    row["false_pass"] = bool(row["passed"] and err > row["tolerance"])
    row["false_alarm"] = bool((not row["passed"]) and err <= row["tolerance"])
    row["bound_violation"] = bool(np.isfinite(row["bound"]) and err > row["bound"])
    return row


@experiment("certificates", paper="baseline",
            description="false-pass and false-alarm rates of every learner's certificate on a grid of teachers")
def certificates_experiment(*, rng: Any = None, quick: bool = False, learners: Sequence[str] | None = None):
    """Fit every learner on the grid of :func:`certificate_grid` and score its certificate (module docstring).

    Options: ``learners``, a subset of the labels of :data:`LEARNERS` (default all). Returns the per-fit table and a
    figure (true error against the claimed tolerance / reported bound, passes and fails marked).
    """
    import pandas as pd  # deferred: pandas is slow to import


    gen = check_random_state(rng)
    names = list(LEARNERS) if learners is None else ([learners] if isinstance(learners, str) else list(learners))
    bad = [x for x in names if x not in LEARNERS]
    if bad or not names:
        raise InputError(f"learners must be a non-empty subset of {list(LEARNERS)}, got {learners!r}.")
    grid = certificate_grid(quick)
    seeds = [int(s) for s in gen.integers(0, 2**31, size=len(grid))]
    rows = [_fit_one(name, cfg, seed) for name in names for cfg, seed in zip(grid, seeds)]
    df = pd.DataFrame(rows)
    return df, _figure(df)


def certificate_table(df) -> str:
    """Markdown summary per learner: fits, passes, false passes, false alarms (counts and rates)."""
    lines = ["| learner | claimed max unit error | fits | refused | pass | fail | false pass | false alarm "
             "| bound violations | input-law warnings |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, g in df.groupby("learner", sort=False):
        fit = g[g["status"] == "fitted"]
        n_pass = int(fit["passed"].sum())
        n_fail = len(fit) - n_pass
        fp, fa = int(fit["false_pass"].sum()), int(fit["false_alarm"].sum())
        tol = fit["tolerance"].min() if len(fit) else float("nan")
        stated = bool(fit["stated_tolerance"].all()) if len(fit) else False
        nb = int(np.isfinite(fit["bound"]).sum()) if len(fit) else 0
        lines.append(
            f"| {name} | {tol:g}{'' if stated else ' (implied)'} | {len(g)} | {int((g['status'] == 'refused').sum())} "
            f"| {n_pass} | {n_fail} | {fp} ({fp / max(n_pass, 1):.0%} of passes) "
            f"| {fa} ({fa / max(n_fail, 1):.0%} of fails) "
            f"| {int(fit['bound_violation'].sum())} of {nb} | {int(g['input_warning'].sum())} |")
    return "\n".join(lines)


def _figure(df):
    import matplotlib  # deferred: matplotlib is slow to import

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt  # deferred: matplotlib is slow to import

    names = list(dict.fromkeys(df["learner"]))
    ncols = min(4, max(len(names), 1))
    nrows = -(-len(names) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.8 * nrows), squeeze=False)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax, name in zip(axes.flat, names):
        g = df[(df["learner"] == name) & (df["status"] == "fitted")]
        ref = np.where(np.isfinite(g["bound"]), g["bound"], g["tolerance"]).astype(float)
        ref = np.clip(np.nan_to_num(ref, posinf=10.0), 1e-17, 10.0)
        err = np.clip(g["error"].to_numpy(float), 1e-17, None)
        for ok, mk, lab in ((True, "o", "pass"), (False, "x", "fail")):
            sel = g["passed"].to_numpy(bool) == ok
            ax.scatter(ref[sel], err[sel], marker=mk, label=lab, alpha=0.7)
        lo = min(ref.min(initial=1e-16), err.min(initial=1e-16))
        ax.plot([lo, 10], [lo, 10], "k:", lw=0.8, label="error = bound")
        if len(g):
            ax.axhline(float(g["tolerance"].min()), color="r", lw=0.8, ls="--", label="claimed tolerance")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("reported bound (tolerance if none; 10 = no bound)")
        ax.set_ylabel("true max unit error")
        ax.set_title(name)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig

"""Which learners' assumptions does a data set meet? ``nr.check(X, Y)`` and ``nnrecover check``.

(The module is called ``assumptions`` so that ``nnrecover.check`` stays the function: a submodule of the
same name would replace the package attribute once imported.)

Every provable learner rests on an assumption about the input law (Gaussian, or symmetric), on the
width (at least as many inputs as hidden units for the order-1 algorithms, and at least as many
outputs for Bakshi et al. and Ge et al.: ``k <= min(m, d)``) and on moments that exist. :func:`check` measures each of these on the data and gives a verdict per learner with the
evidence, so that a user knows before fitting which algorithm's guarantee applies.

The measurements are those of :mod:`nnrecover.evidence` (the input law, heavy tails, constant inputs,
symmetry, width and label noise); this module turns them into verdicts:

* **the learners' own refusals**: each verdict is "no" where the learner's fit would refuse the data,
  decided by the functions the fit itself calls (numbers of inputs, outputs, hidden units and rows; Ge et
  al.'s symmetry and second-moment tests), so "yes" is never followed by a refusal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._validation import check_positive_int, check_random_state
from .errors import InputError
from .evidence import (
    ALPHA,
    MAX_ROWS,
    TAIL_INDEX_MIN,
    TAIL_MIN_ROWS,
    input_law_flags,
    measure_data,
    read_rows,
    width_and_noise,
)
from .learners import available
from .learners.awasthi2021 import order_limit
from .learners.awasthi2021.coefficients import SPLIT_BLOCK
from .learners.bakshi2019._common import width_refusal as bakshi_width
from .learners.bakshi2019.pipeline import rows_refusal as bakshi_rows
from .learners.ge2019.conditions import second_moment_refusal, symmetry_refusal
from .learners.ge2019.conditions import width_refusal as ge_width
from .learners.goel2019 import data_refusal as goel_refusal


@dataclass
class Verdict:
    """One learner's verdict: ``applies`` is ``"yes"``, ``"no"`` or ``"unsure"``, with the reasons."""

    learner: str
    paper: str
    applies: str
    reasons: list[str]
    command: str | None = None


@dataclass
class CheckReport:
    """Result of :func:`check`; ``str(report)`` is the human-readable report.

    Attributes
    ----------
    n_samples, n_inputs, n_outputs : int
        Rows read, ``d`` and ``p``.
    input_law : str
        ``"standard Gaussian"``, ``"Gaussian, not standard"`` or ``"not Gaussian"``.
    symmetric : bool
    heavy_tailed : bool
    width : dict
        ``estimate`` (int or None), ``range`` (low, high; high None: no upper bound from the data), ``sure``
        (bool), ``method`` and the spectrum.
    label_noise : dict
        ``std`` (an estimate or an upper bound) and ``kind`` (``"estimate"``, ``"upper bound"`` or ``None``).
    evidence : dict
        Every measured statistic with its tolerance.
    verdicts : list of Verdict
    recommended : str or None
        The command of the first learner that applies.
    """

    n_samples: int
    n_inputs: int
    n_outputs: int
    input_law: str
    symmetric: bool
    heavy_tailed: bool
    width: dict
    label_noise: dict
    evidence: dict = field(repr=False)
    verdicts: list = field(default_factory=list)
    recommended: str | None = None

    def verdict(self, learner: str) -> Verdict:
        """The verdict of the learner registered as ``learner``."""
        for v in self.verdicts:
            if v.learner == learner:
                return v
        raise InputError(f"no verdict for {learner!r}; learners checked: {[v.learner for v in self.verdicts]}.")

    def __str__(self) -> str:
        ev = self.evidence
        w = self.width
        lines = [f"data: {self.n_samples} rows read, d = {self.n_inputs} inputs, p = {self.n_outputs} output(s)",
                 "",
                 f"input law       {self.input_law}: max |mean| {ev['max_abs_mean']:.3g} (tolerance "
                 f"{ev['mean_tolerance']:.3g}), ||Cov - I||_2 {ev['cov_deviation']:.3g} (tolerance "
                 f"{ev['cov_tolerance']:.3g}); whitened: max |skewness| z {ev['max_skew_z']:.1f}, max |excess "
                 f"kurtosis| z {ev['max_kurtosis_z']:.1f}, normality p-value {ev['normality_p']:.2g} "
                 f"(Bonferroni over {ev['n_directions']} directions; reject below {ALPHA:g})",
                 ("tails           not measured (fewer than %d rows)" % TAIL_MIN_ROWS
                  if np.isnan(ev["tail_index_min"]) else
                  f"tails           tail index (Hill, top 1%) min {ev['tail_index_min']:.2f} "
                  f"({'heavy: fourth moments may not exist' if self.heavy_tailed else 'light'}; "
                  f"threshold {TAIL_INDEX_MIN})"),
                 "constant inputs " + (f"{_constant_text(ev)} (zero variance, columns counted from 0): not "
                                       "Gaussian; not symmetric unless 0" if ev.get("constant_columns") else "none"),
                 f"symmetry        {'symmetric' if self.symmetric else 'not symmetric'}: x vs -x test p-value "
                 f"{ev['symmetry_p']:.2g}" + ("" if not self.heavy_tailed else " (unreliable with heavy tails)"),
                 "width           " + (f"k = {w['estimate']}" if w["estimate"] is not None else "not estimated")
                 + ("" if w["sure"] or w["estimate"] is None else
                    f" (unsure: {w['range'][0]}-{w['range'][1] if w['range'][1] is not None else 'more'})")
                 + f" [{w['method']}]",
                 "label noise     " + (f"std {self.label_noise['std']:.3g} ({self.label_noise['kind']})"
                                       if self.label_noise["std"] is not None else "not estimated"),
                 ""]
        rows = [("learner", "paper", "applies", "why")]
        rows += [(v.learner, v.paper, v.applies, "; ".join(v.reasons)) for v in self.verdicts]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        for r in rows:
            lines.append("  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3])
        lines.append("")
        lines.append("recommended: " + (self.recommended if self.recommended else
                                        "no provable learner applies; see the reasons above. "
                                        "gradient-descent (nnrecover fit DATA --learner gradient-descent -k K) "
                                        "fits any data without a guarantee."))
        if not self.recommended:
            lines.append("what would be needed: inputs x ~ N(0, I) with no constant column, and one output "
                         "(Awasthi et al.) or at least as many outputs as hidden units (Bakshi et al.); or a "
                         "symmetric input law with at least as many outputs as hidden units (Ge et al.); finite "
                         "fourth moments; if you can query the model at inputs of your choice, "
                         "query it at Gaussian inputs (nnrecover extract).")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------ verdicts
def _constant_text(ev: dict) -> str:
    return ", ".join(f"x_{j} = {v:.4g}" for j, v in zip(ev.get("constant_columns", []), ev.get("constant_values", [])))


def _verdicts(report: CheckReport) -> list[Verdict]:
    """One verdict per registered learner. A learner's refusals are decided by the function its own fit
    calls (``width_refusal`` of Bakshi et al. and of Ge et al., Goel-Panigrahy's ``data_refusal``, Awasthi et
    al.'s ``order_limit``, Ge et al.'s symmetry and second-moment tests, Bakshi et al.'s row counts), so a
    verdict is never "yes" on data the learner then refuses."""
    ev = report.evidence
    d, p = report.n_inputs, report.n_outputs
    w = report.width
    k = w["estimate"]
    if k == 0:
        # no singular value above the noise: the data show no hidden unit, so no width to judge by (and
        # "-k 0" is no command); n_hidden="auto" refuses these data for the same reason
        k = None
    low, high = (w.get("range") or (k, k)) if k is not None else (None, None)
    if k is not None and "k >= d" in w.get("method", ""):
        high = None  # a full-rank T_2 bounds the width from below only
    gauss_std = report.input_law == "standard Gaussian"
    gauss = report.input_law != "not Gaussian"
    tails = report.heavy_tailed
    constant = _constant_text(ev)
    k_arg = f" -k {k}" if k is not None else " -k K"
    out = []

    def width_check(refusal, reasons: list) -> str:
        """'no' when the learner refuses every width the data allow (its own message), 'unsure' when it
        refuses some of them or the width is unsure, 'yes' when it accepts the (sure) width."""
        if k is None:
            why = refusal(1)  # refused whatever the width (e.g. for its number of outputs)
            if why:
                reasons.append(why.rstrip("."))
                return "no"
            reasons.append("width not estimated: pass -k K" if w["estimate"] is None else
                           "no hidden unit stands out of the noise in the width statistic: pass -k K if you "
                           "know the width")
            return "unsure"
        why = refusal(low)
        if why:
            reasons.append(why.rstrip("."))
            return "no"
        if high is None:
            if refusal(10 ** 9):
                reasons.append(f"at least {low} hidden units, no upper bound from the data: the learner refuses "
                               "too many units for these inputs and outputs")
                return "unsure"
        elif refusal(high):
            reasons.append(f"{low} to {high} hidden units; with {high}: {refusal(high).rstrip('.')}")
            return "unsure"
        reasons.append(f"{k} hidden units" + ("" if w["sure"] else " (width unsure)") + " accepted")
        return "yes" if w["sure"] else "unsure"

    def law(reasons: list) -> str:
        """The Gaussian input law of Awasthi et al., Bakshi et al. and Goel-Panigrahy."""
        if constant:
            reasons.append(f"constant input(s) {constant} (zero variance): the inputs are not N(0, I)")
            return "no"
        if tails:
            reasons.append("heavy tails: fourth moments may not exist")
            return "no"
        if gauss_std:
            reasons.append("inputs look N(0, I)")
            return "yes"
        if gauss:
            reasons.append("Gaussian but not N(0, I): whiten X first (mean and covariance off)")
            return "unsure"
        reasons.append("inputs are not Gaussian")
        return "no"

    def combine(*parts: str) -> str:
        return "no" if "no" in parts else ("unsure" if "unsure" in parts else "yes")

    def hermite_width(kk: int) -> str | None:
        order = 1 if kk <= d else 2
        limit = order_limit(d, order)
        if kk <= limit:
            return None
        return (f"hermite-tensor takes at most {order_limit(d, 2)} hidden units with {d} inputs (order 2: "
                f"0.9 d(d+1)/2, Theorem 3.2); got {kk}")

    for rec in available(learners_only=True):
        reasons: list[str] = []
        cmd = f"nnrecover fit DATA --learner {rec.name}{k_arg}"
        if rec.name == "hermite-tensor":
            parts = [law(reasons)]
            if constant:
                reasons.append("a constant input only shifts the hidden biases, which this learner fits: drop "
                               "the constant column(s) and check again")
            if p != 1:
                reasons.append(f"learns one output (Awasthi et al.), the data have {p}: fit one output at a time "
                               "(save that column as its own --targets file)")
                parts.append("no")
            parts.append(width_check(hermite_width, reasons))
            if k is not None and k >= d:
                reasons.append(f"with {d} or more hidden units (k >= d) the data cannot tell the width: pass -k "
                               "yourself (order 2)")
                parts.append("unsure")
            rows = ev.get("rows_available")
            if rows is not None and rows <= SPLIT_BLOCK:
                reasons.append(f"needs more than {SPLIT_BLOCK} samples (the split halves of Algorithm 4's "
                               f"thresholds), got {rows}")
                parts.append("no")
            verdict = combine(*parts)
        elif rec.name in ("exact-relu", "bakshi2019-noisy"):
            a = law(reasons)
            noisy = rec.name == "bakshi2019-noisy"
            rows = ev.get("rows_available")
            b = width_check(lambda kk: bakshi_width(kk, d, p) or bakshi_rows(rows, d, kk, noisy=noisy), reasons)
            reasons.append("no hidden biases in Bakshi et al.'s model; refine=True fits biases afterwards")
            noise = report.label_noise
            if rec.name == "exact-relu" and noise["kind"] == "estimate" and noise["std"] > 1e-6 * ev["y_std"]:
                reasons.append(f"label noise std {noise['std']:.2g}: the exact algorithm needs noiseless labels, "
                               "use bakshi2019-noisy")
                b = combine(b, "no")
            elif rec.name == "exact-relu" and noise["kind"] == "upper bound" and noise["std"] > 1e-6 * ev["y_std"]:
                reasons.append(f"label noise std at most {noise['std']:.2g} (an upper bound: the data cannot tell "
                               "noise from signal here): the exact algorithm needs noiseless labels; its "
                               "certificate says whether they were, else use bakshi2019-noisy")
                b = combine(b, "unsure")
            verdict = combine(a, b)
        elif rec.name == "pure-neuron":
            parts = []
            if tails:
                reasons.append("heavy tails: the detector uses fourth moments")
                parts.append("no")
            elif ev.get("symmetry_refusal"):
                reasons.append(ev["symmetry_refusal"].rstrip("."))
                parts.append("no")
            else:
                reasons.append("inputs symmetric (x and -x equal in law)")
            if ev.get("second_moment_refusal"):
                reasons.append(ev["second_moment_refusal"].rstrip("."))
                parts.append("no")
            parts.append(width_check(lambda kk: ge_width(kk, d, p), reasons))
            reasons.append("no hidden biases in Ge et al.'s model")
            verdict = combine(*parts)
        elif rec.name == "goel2019":
            a = law(reasons)
            b = width_check(lambda kk: goel_refusal(kk, d, p), reasons)
            reasons.append("the threshold t of the units must be known (--option threshold=T) and high enough "
                           "(Assumption 3); the data cannot tell it")
            verdict = combine(a, b, "unsure")
            cmd = f"nnrecover fit DATA --learner {rec.name}{k_arg} --option threshold=T"
        elif rec.paper == "baseline":
            reasons.append("any data; no guarantee (random starts + local optimisation)")
            verdict = "yes"
        else:
            reasons.append(f"{rec.algorithm}: assumptions {', '.join(rec.assumptions) or '(none listed)'} "
                           "cannot all be judged from (X, Y); read them before fitting")
            verdict = "no" if law([]) == "no" else "unsure"
            cmd = None
        out.append(Verdict(rec.name, rec.paper, verdict, reasons, cmd))
    return out


def check(X, Y=None, *, max_rows: int = MAX_ROWS, random_state=None) -> CheckReport:
    """Measure which learners' assumptions the data ``(X, Y)`` meets.

    Parameters
    ----------
    X : array of shape (n, d), or a data source
        Inputs (or any data source of :func:`nnrecover.data.as_data_source` with ``Y=None``).
    Y : array of shape (n,) or (n, p), optional
        Targets.
    max_rows : int, default 200000
        Rows read at most (the first ones; also at most 2e7 values of ``X``).
    random_state : int, Generator or None
        Seeds the random projections of the normality test.

    Returns
    -------
    CheckReport
        ``str(report)`` is the report: the measured evidence, one verdict per registered learner
        (``yes``, ``no`` or ``unsure`` with the reasons) and a recommended command.

    Examples
    --------
    >>> import nnrecover as nr
    >>> teacher = nr.random_network(8, 3, n_outputs=5, rng=0)
    >>> X, Y = nr.sample(teacher, nr.distributions.StandardGaussian(8), 20_000, rng=1)
    >>> report = nr.check(X, Y, random_state=0)
    >>> report.input_law, report.width["estimate"]
    ('standard Gaussian', 3)
    """
    check_positive_int(max_rows, "max_rows")
    rng = check_random_state(random_state)
    Xa, Ya, available = read_rows(X, Y, int(max_rows))
    n, d = Xa.shape
    if n < 50:
        raise InputError(f"check needs at least 50 rows to measure anything, got {n}.")
    if np.all(Xa == Xa[:1]):
        raise InputError("every row of X is the same (each input column is constant): there is nothing to "
                         "learn from; check that the right columns were read.")
    ev, sym = measure_data(Xa, Ya, rng)
    # Ge et al.'s learner refuses with these two tests (its own functions); the check's symmetry level ALPHA
    # is stricter than the learner's default, so it says no wherever the learner would refuse
    ev["symmetry_refusal"] = symmetry_refusal(sym, ALPHA)
    ev["second_moment_refusal"] = second_moment_refusal(Xa.T @ Xa / n)
    ev["rows_available"] = available
    normal, standard, heavy = input_law_flags(ev, d)
    law = ("standard Gaussian" if normal and standard else "Gaussian, not standard" if normal else "not Gaussian")
    symmetric = ev["symmetry_p"] >= ALPHA
    width, noise = width_and_noise(Xa, Ya, normal, standard)
    report = CheckReport(n_samples=n, n_inputs=d, n_outputs=Ya.shape[1], input_law=law, symmetric=symmetric,
                         heavy_tailed=heavy, width=width, label_noise=noise, evidence=ev)
    report.verdicts = _verdicts(report)
    # the exact learner when it applies, learners that use every output before the scalar one
    order = (["hermite-tensor", "exact-relu", "bakshi2019-noisy", "pure-neuron"] if report.n_outputs == 1 else
             ["exact-relu", "bakshi2019-noisy", "pure-neuron", "hermite-tensor"])
    ranked = sorted(report.verdicts, key=lambda v: order.index(v.learner) if v.learner in order else len(order))
    first = next((v for v in ranked if v.applies == "yes" and v.paper != "baseline" and v.command), None)
    report.recommended = first.command if first else None
    return report

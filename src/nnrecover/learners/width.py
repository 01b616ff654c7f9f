"""``n_hidden="auto"``: the width read from the data, then checked on held-out rows or by the learner's
certificates.

The rule (the same as :func:`nnrecover.check`, which reports it with its evidence):

1. **Spectrum.** With ``p`` outputs the rank of ``Cov(y)``, which is ``min(p, k)`` for a generic
   network whatever the input law: sampling moves ``Cov(y)`` only inside the span of the units'
   outputs, so an eigenvalue counts when it stands above the smallest one (the label-noise floor) by
   the spread of white-noise eigenvalues plus 4 of its standard errors (when all but the smallest stand
   out, the smallest may be signal too, ``k >= p``, and the estimate ``p - 1`` is unsure unless that
   eigenvalue is at round-off). When that cannot decide
   (``k >= p``) and the inputs are Gaussian, the rank of the stacked Hermite matrices
   ``T_2^(j) = E[(y_j - E y_j)(x x^T - I)] = sum_i a_ij c_2(b_i) w_i w_i^T`` (Lemma 3.5 of Awasthi et
   al.; the statistic Awasthi et al.'s range finder and Bakshi et al.'s order-2 tensor step compute),
   whose rank is ``k`` when ``k <= d`` because ``c_2(b) = phi(b) > 0`` for ReLU: a singular value counts
   when it exceeds twice the noise level ``tau`` (the spread of 10 row-group estimates; by Weyl's
   inequality a zero singular value shows as at most the error's norm); a full rank (``k >= d``) overrules
   a smaller rank of ``Cov(y)``. Values between the two bounds
   make the estimate unsure. The spectrum is read from at most 200,000 rows (the first ones, at most
   2e7 values of ``X``); when that leaves the T_2 rule unsure and the data have more rows, T_2 and its
   noise level are accumulated again over every row in one streamed pass (``tau`` falls like
   ``1/sqrt(rows)``). :mod:`nnrecover.assumptions` documents both rules in full.
2. **Held-out check.** The learner is fitted with ``k - 1``, ``k`` and ``k + 1`` units on the first
   90% of those rows and scored on the last 10% (mean squared error with its standard error from the
   paired per-row differences). While ``k + 1`` units fit significantly better (up to one above the
   rule's upper bound, and ``d``), the width is raised to ``k + 1`` and ``k + 2`` is scored in turn
   (``diagnostics_["width"]["raised_by_holdout"]``): with ``p = k`` outputs the spectrum's lower bound
   is ``p - 1`` when the smallest eigenvalue of ``Cov(y)`` is signal (measured on a noiseless d = 10,
   k = p = 5 teacher: held-out MSE 0.27 with 4 units, 1e-30 with 5). If ``k - 1`` units fit as well
   as the final ``k``, the width is reported as unsure and an
   :class:`~nnrecover.errors.AssumptionWarning` says so.
3. The learner is then fitted on all the data with ``k`` units; ``diagnostics_["width"]`` holds the
   spectrum, the noise level, the rule's range and the held-out scores, and ``n_hidden_`` the width.

**Width by certificates.** A learner whose certificates fail when a unit is missing (class attribute
``_width_by_certificates = True``: :class:`~nnrecover.learners.HermiteTensorLearner`, whose
``hermite_fit`` compares the fitted network's exact Hermite coefficients, Lemma 3.5 of Awasthi et al.,
with the data's ``T_1, T_3, T_4`` and whose ``residual_fit`` tests the residual's Hermite orders 0-2)
replaces steps 2 and 3 by a search (:func:`search_width`): it is fitted on all the data with ``lo``,
``lo + 1``, ... units and the first width whose every certificate passes is returned, without a
warning. The candidates run from the rule's lower bound ``lo`` (singular values above ``2 tau``, which
no missing unit produces) to one above its upper bound ``hi`` (a unit whose singular value is below
``tau`` is invisible to the spectrum, so even a sure range can be one short), or to ``lo + 2`` when the
range is open above; a sure ``k`` whose fit passes costs one fit. The held-out comparison of step 2
cannot decide these cases: a fit asked for too few units returns more (the learner keeps the units the
data need), so it is no evidence about a network of that width. Only when no candidate passes is an
:class:`~nnrecover.errors.AssumptionWarning` raised, and the fit with the rule's estimate ``lo`` is
returned with its own warnings (a learner with ``strict=True`` raises
:class:`~nnrecover.errors.ConvergenceError`). ``diagnostics_["width"]["candidates"]`` lists every width
tried with ``units`` (the units its fit returned), ``certificates`` (name -> passed), ``passed`` and
``time``; ``rule_sure`` is the spectrum's verdict and ``sure`` whether a width passed. Each candidate is
a complete fit (moments, decomposition, refinement, certificates), so the fit returned is
bit-identical to a fit with its width given explicitly (an integer ``random_state``). The candidates do
not share their moment passes, which are a small part of a candidate's time (measured at d = 30,
k = 11, 4e5 rows: 0.1-0.2 s; a too narrow candidate spends 6 s in its refinement and 15 s in the refit
to the width asked that decides its ``unit_count``). A search of more than half a second shows a
progress bar on a terminal's stderr.

The random choices of the rule use fixed seeds and the candidate fits their own ``random_state``, so
the final fit is bit-identical to a fit with ``n_hidden = k`` given explicitly.
"""

from __future__ import annotations

import sys
import time
import warnings
from typing import Any

import numpy as np
from sklearn.base import clone

from .._validation import check_random_state
from ..data import PROGRESS_DELAY, progress_enabled
from ..errors import (
    AssumptionError,
    AssumptionWarning,
    ConvergenceError,
    InputError,
    NNRecoverError,
)
from ..evidence import MAX_ROWS, estimate_width, read_rows, streamed_t2_rank

__all__ = ["AUTO", "is_auto", "choose_width", "search_width", "width_candidates"]

AUTO = "auto"
#: fraction of the rows read for the spectrum that scores the k - 1, k, k + 1 fits
HOLDOUT_FRACTION = 0.1
#: candidates above the rule's lower bound when its range is open above (the held-out check's k + 1, and one more)
OPEN_RANGE_EXTRA = 2


def is_auto(value: Any) -> bool:
    return isinstance(value, str) and value == AUTO


def _holdout_scores(learner, X: np.ndarray, Y: np.ndarray, candidates: list[int]) -> dict:
    cut = int(round((1 - HOLDOUT_FRACTION) * X.shape[0]))
    Xf, Yf, Xh, Yh = X[:cut], Y[:cut], X[cut:], Y[cut:]
    out: dict[int, Any] = {}
    for k in candidates:
        est = clone(learner).set_params(n_hidden=k)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(Xf, Yf if Yf.shape[1] > 1 else Yf[:, 0])
        except (NNRecoverError, np.linalg.LinAlgError) as exc:
            # a candidate width the algorithm cannot fit (e.g. k + 1 units on a k-unit teacher make its
            # output-weight system singular) is evidence too: it is recorded, not fatal
            out[k] = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"}
            continue
        units = int(est.network_.n_hidden)
        if units != k:
            # a learner may keep more units than asked when fewer fit worse (and says so): that fit is
            # not evidence about a network of k units
            out[k] = {"error": f"asked for {k} units, the learner returned {units}"}
            continue
        pred = np.asarray(est.predict(Xh), dtype=np.float64).reshape(len(Xh), -1)
        r2 = np.sum((Yh - pred) ** 2, axis=1)
        out[k] = {"mse": float(np.mean(r2)), "sq_residuals": r2}
    return out


def _compare(a: dict, b: dict, scale: float) -> tuple[float, float, float]:
    """Mean of ``r_a^2 - r_b^2`` over the held-out rows, its standard error, and the margin below
    which a difference is not counted (2 standard errors, 1% of the better MSE, or round-off)."""
    diff = a["sq_residuals"] - b["sq_residuals"]
    se = float(np.std(diff, ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0
    margin = max(2 * se, 0.01 * min(a["mse"], b["mse"]), 1e-12 * scale)
    return float(np.mean(diff)), se, margin


def choose_width(learner, source, *, max_rows: int | None = None) -> tuple[int, dict]:
    """The width for ``learner`` (with ``n_hidden="auto"``) from the data ``source`` (module docstring).

    Returns
    -------
    (int, dict)
        The width and the evidence recorded in ``diagnostics_["width"]``.

    Raises
    ------
    InputError
        No rule applies (one output and non-Gaussian inputs), or the Hermite matrices have full rank
        (``k >= d``: their rank cannot tell ``k``): pass ``n_hidden`` explicitly.
    """
    X, Y, _ = read_rows(source, None, int(max_rows or MAX_ROWS))
    width = estimate_width(X, Y, random_state=0)
    d = X.shape[1]
    evidence: dict[str, Any] = {"rule": "Cov(y) rank above its noise floor, else T_2 rank above 2 tau (nnrecover.learners.width)",
                                **{key: width[key] for key in ("method", "range", "sure", "noise_level",
                                                               "input_law") if key in width},
                                "spectrum": width.get("spectrum")}
    if (not width["sure"] and "T_2" in width.get("method", "") and width.get("input_law") == "standard Gaussian"
            and source.info.reiterable and (source.info.n_samples is None or source.info.n_samples > X.shape[0])):
        # the spectrum of the first rows left the width unsure: T_2's noise level falls like
        # 1/sqrt(rows), so read it again from every row of the data (one more pass)
        full = streamed_t2_rank(source)
        if full is not None:
            sure = full["low"] == full["high"] and full["low"] < d
            width.update(estimate=full["low"], range=(full["low"], full["high"]), sure=sure,
                         spectrum=full["singular_values"], noise_level=full["noise_level"])
            evidence.update(range=width["range"], sure=sure, spectrum=width["spectrum"],
                            noise_level=width["noise_level"], rows_for_spectrum=full["rows"])
    k = width["estimate"]
    if k is None:
        raise InputError("n_hidden='auto' found no rule for these data: with one output the width is read "
                         "from the Hermite matrices T_2, which needs Gaussian inputs, and the inputs are "
                         f"{width['input_law']}"
                         + (f" (constant input column(s) {', '.join(f'x_{j}' for j in width['constant_columns'])}, "
                            "counted from 0: drop them)" if width.get("constant_columns") else "")
                         + "; pass n_hidden explicitly.")
    if k == 0:
        raise AssumptionError("n_hidden='auto': no singular value of the width statistic is above twice its "
                              "noise level, so the data show no hidden unit (a constant or noise-only target); "
                              "pass n_hidden explicitly if you know better.")
    if "T_2" in width["method"] and k >= d:
        raise InputError(f"n_hidden='auto': the Hermite matrices T_2 have full rank {d}, so k >= d = {d} and "
                         "their rank cannot tell k; pass n_hidden explicitly.")
    if getattr(learner, "_width_by_certificates", False):
        # the learner's certificates decide between the widths from the range's lower bound up (search_width),
        # fitted on all rows: the held-out comparison below cannot judge a width whose fit returns more units
        evidence["candidates"] = width_candidates(width["range"])
        evidence["n_hidden"] = int(k)
        return int(k), evidence
    candidates = [c for c in (k - 1, k, k + 1) if c >= 1]
    scores = _holdout_scores(learner, X, Y, candidates)
    scale = float(np.mean(np.var(Y, axis=0))) or 1.0
    notes = []
    # k + 1 units that fit the held-out rows significantly better are the width the data show: the
    # spectrum's lower bound is one short when the smallest eigenvalue of Cov(y) is signal (k = p), or
    # a unit's singular value sits below the noise level. Up to the rule's upper bound plus one, and d.
    k_rule = k
    limit = min(d, width["range"][1] + 1) if width["range"][1] is not None else d
    while k + 1 <= limit and "mse" in scores.get(k, {}) and "mse" in scores.get(k + 1, {}):
        mean, se, margin = _compare(scores[k], scores[k + 1], scale)
        if not mean > margin:
            break
        k += 1
        if k + 1 <= limit:
            scores.update(_holdout_scores(learner, X, Y, [k + 1]))
    if k != k_rule:
        evidence["raised_by_holdout"] = {"from": int(k_rule), "to": int(k)}
    if "mse" in scores.get(k, {}):
        if "mse" in scores.get(k + 1, {}):
            mean, se, margin = _compare(scores[k], scores[k + 1], scale)
            if mean > margin:
                notes.append(f"{k + 1} units fit the held-out rows better than {k} (MSE {scores[k + 1]['mse']:.3g} "
                             f"against {scores[k]['mse']:.3g}, difference {mean:.2g} +- {se:.2g})")
        if "mse" in scores.get(k - 1, {}):
            mean, se, margin = _compare(scores[k - 1], scores[k], scale)
            if mean <= margin:
                notes.append(f"{k - 1} units fit the held-out rows as well as {k} (MSE {scores[k - 1]['mse']:.3g} "
                             f"against {scores[k]['mse']:.3g})")
    else:
        notes.append(f"the held-out fit with {k} units failed: {scores.get(k, {}).get('error')}")
    evidence["holdout"] = {c: ({"mse": s["mse"]} if "mse" in s else s) for c, s in scores.items()}
    evidence["n_hidden"] = int(k)
    # a width raised by the held-out rows is sure when k - 1 units fit worse and k + 1 do not fit better
    evidence["sure"] = bool((width["sure"] or k != k_rule) and not notes)
    evidence["notes"] = notes
    if not evidence["sure"]:
        lo, hi = width["range"]
        why = "; ".join(notes) if notes else (f"the spectrum leaves the width between {lo} and {hi}" if hi is not None
                                              else f"the spectrum says at least {lo} units")
        warnings.warn(f"{type(learner).__name__}(n_hidden='auto') chose {k} units but is unsure: {why}. "
                      "See diagnostics_['width']; pass n_hidden explicitly if you know the width.",
                      AssumptionWarning, stacklevel=4)
    return int(k), evidence


def width_candidates(width_range) -> list[int]:
    """The widths :func:`search_width` tries for the rule's range ``(lo, hi)``: ``lo .. hi + 1``, or ``lo ..
    lo + OPEN_RANGE_EXTRA`` when the range is open above (``hi`` None).

    The lower bound counts singular values above twice the noise level, which a missing unit cannot
    produce; the upper bound counts those above the noise level, and a unit whose singular value is below
    it is invisible to the spectrum (a sure range can be one short), hence the one width above it."""
    lo, hi = width_range
    lo = max(int(lo), 1)
    hi = lo + OPEN_RANGE_EXTRA if hi is None else max(int(hi), lo) + 1
    return list(range(lo, hi + 1))


def _progress(total: int):
    """A tqdm bar counting candidate widths on stderr (terminals only, after the data passes' delay), or None."""
    if not progress_enabled(None):
        return None
    from tqdm.auto import tqdm  # deferred: tqdm is needed only to draw a progress bar

    return tqdm(total=total, unit="width", desc="n_hidden='auto'", file=sys.stderr, leave=False,
                delay=PROGRESS_DELAY, dynamic_ncols=True)


def search_width(learner, source, evidence: dict, *, stacklevel: int = 4):
    """Fit ``learner`` with each width of ``evidence["candidates"]`` (ascending) on all of ``source``; return
    the first fit whose certificates all pass (module docstring, "Width by certificates").

    Returns
    -------
    (runner, network, diagnostics, width)
        The fitted copy of the learner, its network, its diagnostics (``["width"]`` is ``evidence``,
        completed with ``candidates``: per width tried ``n_hidden``, ``units``, ``passed``,
        ``certificates`` (name -> passed) or ``error``, and ``time``) and the width chosen. When no
        candidate passes: the fit with the first candidate (the rule's estimate), after an
        :class:`~nnrecover.errors.AssumptionWarning`; a :class:`~nnrecover.errors.ConvergenceError`
        when the learner is ``strict``.
    """
    widths = list(evidence["candidates"])
    tried: list[dict] = []
    first = chosen = None
    bar = _progress(len(widths))
    try:
        for c in widths:
            if bar is not None:
                bar.set_postfix_str(f"fitting {c} units")
            runner = learner._with_width(c)
            if "strict" in runner.get_params(deep=False):
                runner.set_params(strict=False)  # a failed certificate is the search's evidence, not an error
            diagnostics: dict = {}
            entry: dict[str, Any] = {"n_hidden": int(c)}
            t0 = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    # a fresh generator from random_state per candidate: the same draws as a fit with c given
                    network = runner._fit(source, check_random_state(learner.random_state), diagnostics)
                except (NNRecoverError, np.linalg.LinAlgError) as exc:
                    network = None
                    entry["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            entry["time"] = time.perf_counter() - t0
            if bar is not None:
                bar.update(1)
            if network is not None:
                certs = diagnostics.get("certificates", {})
                entry.update(units=int(network.n_hidden),
                             certificates={name: bool(v.get("passed")) for name, v in certs.items()},
                             passed=bool(certs) and all(bool(v.get("passed")) for v in certs.values()))
            else:
                entry["passed"] = False
            tried.append(entry)
            if network is not None and first is None:
                first = (runner, network, diagnostics, caught, c)
            if entry["passed"]:
                chosen = (runner, network, diagnostics, caught, c)
                break
    finally:
        if bar is not None:
            bar.close()
    evidence["candidates"] = tried
    summary = ", ".join(f"{e['n_hidden']}: " + ("passed" if e["passed"] else e.get("error") or "failed "
                                                + "/".join(n for n, ok in e["certificates"].items() if not ok))
                        for e in tried)
    lo, hi = evidence["range"]
    said = (f"says {lo} units" if evidence["sure"] else f"leaves the width between {lo} and {hi}" if hi is not None
            else f"says at least {lo} units")
    evidence["rule_sure"] = bool(evidence["sure"])
    if chosen is not None:
        evidence.update(n_hidden=int(chosen[4]), sure=True, settled_by="certificates")
    else:
        evidence.update(sure=False, settled_by=None,
                        notes=[f"no width of {widths[0]}..{widths[-1]} passed its certificates ({summary})"])
        msg = (f"{type(learner).__name__}(n_hidden='auto'): the spectrum {said}, and no width of {widths[0]}.."
               f"{widths[-1]} passed the learner's certificates ({summary})")
        if getattr(learner, "strict", False) or first is None:
            raise ConvergenceError(msg + "; pass n_hidden explicitly.")
        chosen = first
        evidence["n_hidden"] = int(chosen[4])
    runner, network, diagnostics, caught, c = chosen
    for w in caught:  # the returned fit's own warnings (a failed certificate among them when none passed)
        warnings.warn(w.message, w.category, stacklevel=stacklevel)
    if evidence["settled_by"] is None:
        warnings.warn(f"{msg}; returned the fit with {c} units (the rule's estimate). See "
                      "diagnostics_['width']['candidates']; pass n_hidden explicitly if you know the width.",
                      AssumptionWarning, stacklevel=stacklevel)
    diagnostics["width"] = evidence
    return runner, network, diagnostics, int(c)

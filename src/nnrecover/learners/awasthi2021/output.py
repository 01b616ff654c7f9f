"""The output stage of the Awasthi-Tang-Vijayaraghavan learner: from recovered units to the network.

In algorithm order, after :func:`~nnrecover.learners.awasthi2021.algorithm4` / ``algorithm6``:

1. :func:`output_network`: the paper's output, the units' parameters (Algorithms 4, 6), the units with
   the closed-form linear part (Claim D.14) or the Algorithm 5 regression;
2. :func:`polish_units` (``refine=True`` only, beyond the paper): the truncated Hermite loss of
   Proposition B.1 minimised in moment space from the recovered units, with a completion of the units
   Algorithm 4 did not detect; the polished units go through :func:`output_network` again;
3. (the shared refinement on the samples, :func:`nnrecover.refine.refine_network`);
4. :func:`reduce_to_width`: at most ``n_hidden`` units whenever the function allows it (Lemma D.13,
   Theorem 3.4 with the corrected eq. (2)).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import replace
from typing import Any

import numpy as np

from ..._validation import check_random_state
from ...errors import AssumptionError, AssumptionWarning
from ...metrics import relu_second_moment
from ...network import TwoLayerNetwork
from ...refine import gather_samples, refine_network
from .coefficients import HermiteCoefficients
from .decompose import HermiteRecovery, complete_units
from .polish import hermite_loss_polish, truncated_hermite_loss
from .reduce import reduce_network
from .regression import algorithm5_regression, linear_correction, population_regression

__all__ = ["output_network", "polish_units", "reduce_to_width"]


def output_network(rec: HermiteRecovery, coeffs: HermiteCoefficients, order: int, n_hidden: int, *,
                   source: Any = None, truth: TwoLayerNetwork | None = None, output: str = "auto",
                   linear_part: str = "auto", feature_map: str = "reduced", regression_rows: str = "all",
                   epsilon: float | None = None, bound: float | None = None,
                   chunk_size: int | None = None) -> tuple[TwoLayerNetwork, dict]:
    """The paper's output network for the recovered units: the units' own parameters (Algorithms 4 and 6),
    the units plus the closed-form linear part (Claim D.14), or the Algorithm 5 regression.

    Parameters
    ----------
    rec : HermiteRecovery
        The units of :func:`algorithm4` / :func:`algorithm6`.
    coeffs : HermiteCoefficients
        The Hermite coefficients they came from (``T_0``, ``T_1`` for the linear part).
    order : int
        ``l`` (1 or 2).
    n_hidden : int
        ``m``, the width asked for.
    source : data source, optional
        Samples for the Algorithm 5 regression (needed when it runs on samples).
    truth : TwoLayerNetwork, optional
        Population mode: the regression is solved in closed form against ``truth`` (Theorem 4.2).
    output : {"auto", "parameters", "regression"}
        ``"auto"``: the units' parameters when order 1 found all ``m`` units with reliable signs, else
        the regression.
    linear_part : {"auto", "closed_form", "regression"}
        How the regression output gets its linear part (``"auto"``: closed form for order 1).
    feature_map, regression_rows, epsilon, bound, chunk_size
        Options of :func:`algorithm5_regression`.

    Returns
    -------
    (TwoLayerNetwork, dict)
        The network and ``{"output": what was returned, ...}``.

    Raises
    ------
    AssumptionError
        No unit was recovered and the parameters were asked for, or a closed-form linear part at order 2.
    """
    m = int(n_hidden)
    out: dict = {}
    fs = rec.diagnostics.get("fixsigns") or {}
    unreliable = [i for i, ok in enumerate(fs.get("reliable", [])) if not ok]
    if unreliable:
        out["unreliable_signs"] = unreliable
    # with a sign that T_1 cannot decide, the units alone may be off by a linear function; the
    # linear part absorbs a wrong sign exactly (relu(t) - relu(-t) = t)
    use_params = (output == "parameters" or
                  (output == "auto" and order == 1 and rec.n_units == m and not rec.dropped
                   and not unreliable))
    if use_params:
        if rec.n_units == 0:
            raise AssumptionError("no unit was recovered above the noise level (Algorithm 4); supply more "
                                  "samples or use output='regression'.")
        out["output"] = "Algorithm 6 parameters" if order == 1 else "Algorithm 4 parameters"
        return rec.network(), out
    units = (rec.a, rec.b, rec.W)
    how = linear_part
    if how == "auto":
        how = "closed_form" if order == 1 else "regression"
    if how == "closed_form" and order != 1:
        raise AssumptionError("the closed-form linear part needs known signs, i.e. order 1 (FIXSIGNS); "
                              "use linear_part='regression' (Algorithm 5) for order 2.")
    if how == "closed_form":
        out["output"] = "recovered units + closed-form linear part (T_0, T_1; Claim D.14)"
        return linear_correction(units, coeffs.t0, coeffs.t1), out
    if truth is not None:
        reg = population_regression(units, truth)
    else:
        reg = algorithm5_regression(source, units, feature_map=feature_map, rows=regression_rows,
                                    epsilon=epsilon or 1e-2, bound=bound, n_hidden=m, chunk_size=chunk_size)
    out["output"] = "Algorithm 5 regression (Claim D.14 consolidation)"
    out["regression"] = {"loss": reg.loss, "n_units": reg.network.n_hidden, **reg.info}
    return reg.network, out


def polish_units(coeffs: HermiteCoefficients, rec: HermiteRecovery, order: int, n_hidden: int, *, rng: Any = None,
                 n_draws: int = 5, max_bias: float = 4.0) -> tuple[HermiteRecovery | None, dict]:
    """Hermite-loss polish of the recovered units (beyond the paper; the learner runs it with ``refine=True``).

    Minimises the truncated Hermite loss of Proposition B.1 (orders up to ``2l + 2``) in moment space (no
    data pass) from every detected unit, also those whose scalars were too inaccurate for the paper's
    output: the joint fit repairs scalars, which the refinement needs for all ``m`` units. At order 1 with
    units missing it also tries ``m`` units (the missing ones from forced-rank decompositions,
    :func:`complete_units`) against the units plus a linear part, and keeps the smaller loss.

    Returns
    -------
    (HermiteRecovery or None, dict)
        The polished units, or None when the recovered ones should be kept (a polished unit became
        undetectable, ``|b| > max_bias`` or not finite, or the polish did not lower the loss); and the
        report (``diagnostics_["hermite_polish"]``).
    """

    rng = check_random_state(rng)
    m = int(n_hidden)
    t2 = time.perf_counter()
    base = _with_inaccurate_units(rec, coeffs, m)
    polished, report = hermite_loss_polish(coeffs, base, order, m)
    max_bias = float(max_bias)
    if not _detectable(polished, max_bias):
        # the moment fit drove a unit to |b| > max_bias (or a non-finite value): such a unit is
        # nearly never active (b < -max_bias) or nearly linear (b > max_bias), i.e. its orders >= 2
        # are below the noise, and fitting noise with it degenerates (|a| -> inf, |b| -> inf);
        # keep the provable units
        report["kept"] = "start"
        report["rejected"] = f"a polished unit has |b| > max_bias = {max_bias:g} or is not finite"
    if order == 1 and base.n_units < m:
        # undetected units: try m units (the missing ones from forced-rank decompositions) against
        # the units + linear part, and keep the smaller truncated Hermite loss -- unless a completed
        # unit ends up undetectable itself (|b| > max_bias: a rarely active unit fitted to noise,
        # which the samples cannot correct either)
        alt = complete_units(coeffs, base, order, m, rng=rng, n_draws=n_draws, max_bias=max_bias)
        if alt is not None:
            alt_pol, alt_rep = hermite_loss_polish(coeffs, alt, order, m)
            loss_lin = report.get("full_fit", {}).get("loss_end", np.inf)
            if report.get("kept") != "polished":  # compare with what is kept: the provable units
                loss_lin = truncated_hermite_loss(coeffs, base, order, linear_part=True)
            loss_alt = alt_rep.get("full_fit", {}).get("loss_end", np.inf)
            plausible = _detectable(alt_pol, max_bias)
            chosen = bool(plausible and loss_alt < loss_lin)
            report["completion"] = {"units_added": alt.n_units - base.n_units, "loss_linear_part": loss_lin,
                                    "loss_completed": loss_alt, "completed_units_detectable": plausible,
                                    "chosen": chosen}
            if chosen:
                polished = alt_pol
                report["kept"] = "polished"
    report["time"] = time.perf_counter() - t2
    return (polished if report.get("kept") == "polished" else None), report


def reduce_to_width(fitted: TwoLayerNetwork, coeffs: HermiteCoefficients, n_hidden: int, *, source: Any = None,
                    rng: Any = None, refinement: dict | None = None, refine_options: dict | None = None,
                    diagnostics: dict | None = None) -> TwoLayerNetwork:
    """At most ``n_hidden`` units whenever the function allows it (:func:`reduce_network`): fold
    linearisable units (Lemma D.13), merge units on one line, resolve sign flips against the linear
    part (Theorem 3.4, corrected eq. (2)); warn when more units remain or the flip set is not unique.

    A rewrite that changed the function by more than round-off (noisy data: within the estimation
    error) is refined again on the samples when the refinement ran, so that the returned ``n_hidden``
    units are themselves a least-squares fit.

    Parameters
    ----------
    fitted : TwoLayerNetwork
        The (refined) network, possibly with more than ``n_hidden`` units (Claim D.14 adds two).
    coeffs : HermiteCoefficients
        Its Hermite coefficients (set the L2 budget of a rewrite).
    n_hidden : int
        ``m``.
    source : data source, optional
        Samples for the refit of a rewritten network (re-iterable sources only).
    rng : Generator, optional
    refinement : dict, optional
        ``diagnostics_["refinement"]`` of the refinement that produced ``fitted`` (whether it ran, its
        held-out loss): with it a rewrite is refitted, and its loss sets the budget.
    refine_options : dict, optional
        Options of :func:`nnrecover.refine.refine_network` for the refit.
    diagnostics : dict, optional
        Receives ``unit_reduction`` (and ``sign_flip_sets`` when the flips are not unique).

    Returns
    -------
    TwoLayerNetwork
    """

    m = int(n_hidden)
    rng = check_random_state(rng)
    diagnostics = {} if diagnostics is None else diagnostics
    refinement = dict(refinement or {})
    atol, basis = _reduction_budget(fitted, coeffs, refinement)
    red = reduce_network(fitted, m, atol=atol)
    info = red.as_dict()
    info["budget_basis"] = basis
    info["units_before"] = fitted.n_hidden
    diagnostics["unit_reduction"] = info
    out = red.network

    can_refit = bool(refinement.get("ran") and source is not None and source.info.reiterable)
    if can_refit and red.within_limit and red.l2_change > 1e-8 * math.sqrt(relu_second_moment(fitted)):
        again = refine_network(out, source, rng=rng, **dict(refine_options or {}))
        info["refit"] = again.as_dict()
        out = again.network
    elif can_refit and not red.within_limit:
        forced = reduce_network(fitted, m, atol=atol, force=True)
        test = _refit_paired(forced.network, fitted, source, rng, dict(refine_options or {}))
        test["forced"] = forced.forced
        test["flipped"] = forced.flip.get("flipped")
        info["forced_refit"] = test
        if test["accepted"]:
            red = forced
            info.update(forced.as_dict())
            out = test.pop("network")
        else:
            test.pop("network")
            red.reason += (f"; refitted with {m} units it is worse on held-out rows (mean squared "
                           f"error {test['holdout_mse_candidate']:.3g} vs {test['holdout_mse_fitted']:.3g}, "
                           f"paired z = {test['z']:.1f})")
    flip = red.flip
    if red.within_limit and flip.get("unique") is False:
        sets = [flip["flipped"]] + flip["alternatives"]
        diagnostics["sign_flip_sets"] = sets
        warnings.warn(
            f"HermiteTensorLearner: {len(sets)} sign-flip sets {sets[:6]} give {m}-unit networks with the "
            f"same function up to a constant (Theorem 3.4: the flips differ on sets F with sum_F a_i w_i = 0, "
            f"possible when the w_i are linearly dependent); returned the one with the smallest output bias.",
            AssumptionWarning, stacklevel=4)
    elif red.within_limit and flip.get("unique") is None and flip.get("flipped"):
        # flips were needed and found by rounding; with no linear part to explain, the empty flip set is
        # kept without a word (a generic network has no subset F with sum_F a_i w_i = 0)
        diagnostics["sign_flip_sets"] = [flip["flipped"]]
        warnings.warn(
            f"HermiteTensorLearner: the sign flips were resolved by rounding the minimum-norm solution; the "
            f"null space of [a_i w_i] has dimension {flip['null_dimension']}, too large to check that no other "
            f"flip set explains the linear part (Theorem 3.4).", AssumptionWarning, stacklevel=4)
    n_free = out.n_hidden - red.linear_units
    if red.within_limit and red.linear_units and n_free > 0:
        # the linear part sits in units of its own (Claim D.14's pair lambda relu(u x) - lambda relu(-u x), or
        # one unit with a large bias): flipping any other unit, relu(z) = z + relu(-z), only moves those
        # units, so every subset of the others gives a network with the same function
        carriers = list(range(n_free, out.n_hidden))
        diagnostics["non_identifiable"] = {
            "reason": "linear part carried by units of its own (Claim D.14)", "linear_units": carriers,
            "free_flip_units": list(range(n_free)), "equivalent_networks": 2 ** n_free}
        warnings.warn(
            f"HermiteTensorLearner: the fitted function has a linear part, carried by unit(s) {carriers} "
            f"({'the pair lambda relu(u.x) - lambda relu(-u.x) of Claim D.14' if red.linear_units == 2 else 'a unit with a large bias'}"
            f"). Then the other {n_free} unit(s) are determined only up to sign flips: flipping unit i, "
            "relu(w.x + b) = (w.x + b) + relu(-w.x - b), and moving a_i w_i into the linear units gives the "
            f"same function, so {2 ** n_free} networks of {out.n_hidden} units fit the data equally. A teacher "
            "with two units on one line (w and -w) is such a network; Awasthi et al.'s identifiability "
            "(Theorem 3.4) assumes none. diagnostics_['non_identifiable'] names the units.",
            AssumptionWarning, stacklevel=4)
    info["reason"] = red.reason if not red.within_limit else ""
    return out


def _refit_paired(candidate: TwoLayerNetwork, fitted: TwoLayerNetwork, source, rng, refine_options: dict) -> dict:
    """Refine ``candidate`` and ``fitted`` on the training share of the samples and compare them on the
    held-out share (:func:`_paired_holdout`)."""

    kwargs = dict(refine_options)
    frac = float(kwargs.pop("holdout_fraction", 0.2)) or 0.2
    X, Y, _ = gather_samples(source, int(kwargs.pop("max_samples", 200_000)), rng=rng)
    n_hold = max(int(round(frac * X.shape[0])), 1)
    perm = rng.permutation(X.shape[0])
    hold, train = perm[:n_hold], perm[n_hold:]
    # both networks are refined on the same training rows and compared as refined (the start of
    # ``fitted`` was trained on rows that are held out here)
    res = refine_network(candidate, (X[train], Y[train]), validation_data=(X[hold], Y[hold]), rng=rng,
                         **kwargs)
    ref = refine_network(fitted, (X[train], Y[train]), validation_data=(X[hold], Y[hold]), rng=rng, **kwargs)
    test = _paired_holdout(res.refined, ref.refined, X[hold], Y[hold])
    test["refinement"] = res.as_dict()
    test["refinement_fitted"] = ref.as_dict()
    test["network"] = res.refined
    return test


def _paired_holdout(candidate: TwoLayerNetwork, fitted: TwoLayerNetwork, X: np.ndarray, Y: np.ndarray) -> dict:
    """Paired comparison of the squared errors of two networks on the same held-out rows: the candidate
    is accepted unless its mean squared error is larger by more than three standard errors of the
    mean of the per-row differences (a one-sided paired z-test at about 0.1%)."""
    y = Y.reshape(-1)
    diff = (candidate.predict(X).reshape(-1) - y) ** 2 - (fitted.predict(X).reshape(-1) - y) ** 2
    n = diff.shape[0]
    mean = float(diff.mean())
    se = float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else float("inf")
    z = mean / se if se > 0 else (0.0 if mean <= 0 else float("inf"))
    return {"holdout_mse_candidate": float(np.mean((candidate.predict(X).reshape(-1) - y) ** 2)),
            "holdout_mse_fitted": float(np.mean((fitted.predict(X).reshape(-1) - y) ** 2)),
            "n_holdout": int(n), "z": float(z), "accepted": bool(z <= 3.0)}


def _reduction_budget(net: TwoLayerNetwork, coeffs: HermiteCoefficients, refinement: dict) -> tuple[float, str]:
    """L2 budget of :func:`reduce_network`: the accuracy the fitted network has anyway.

    Exact coefficients: ``1e-8 sqrt(E g^2)`` (round-off of the population solve). Refined on samples: three
    times ``sqrt(mse P / n)``, the L2 estimation error of a least-squares fit of ``P`` parameters to ``n`` rows
    with held-out mean squared error ``mse`` (noiseless data: ``mse`` ~ 1e-30, so only round-off-sized
    changes pass). Not refined: three times ``sqrt(d E[y^2] / N)``, the L2 error of ``T_1`` that sets the
    linear part.
    """

    floor = 1e-8 * math.sqrt(relu_second_moment(net))
    if coeffs.exact:
        return floor, "round-off: 1e-8 sqrt(E g^2)"
    if refinement.get("ran"):
        kept = refinement.get("kept", "refined")
        mse = refinement.get(f"holdout_loss_{kept}", float("nan"))
        if not np.isfinite(mse):
            mse = refinement.get(f"train_loss_{kept}", float("nan"))
        n = max(int(refinement.get("n_samples_used", 0)), 1)
        P = net.hidden_weights.size + 2 * net.n_hidden + 1
        if np.isfinite(mse):
            return max(floor, 3.0 * math.sqrt(max(mse, 0.0) * P / n)), "3 sqrt(mse P / n) of the refinement"
    N = max(int(coeffs.n_samples or 1), 1)
    return (max(floor, 3.0 * math.sqrt(coeffs.n_inputs * max(coeffs.y_second_moment, 0.0) / N)),
            "3 sqrt(d E[y^2] / N), the L2 error of T_1")


def _detectable(rec: HermiteRecovery, max_bias: float) -> bool:
    """Every unit has finite parameters and ``|b| <= max_bias`` (the detectability limit)."""
    return bool(np.all(np.isfinite(rec.a)) and np.all(np.isfinite(rec.b)) and np.all(np.isfinite(rec.U))
                and np.all(np.abs(rec.b) <= max_bias))


def _with_inaccurate_units(rec: HermiteRecovery, coeffs: HermiteCoefficients, m: int) -> HermiteRecovery:
    """``rec`` plus the units dropped only for inaccurate scalars (finite, |b| <= max_bias), up to m."""

    extra = [d for d in rec.dropped if d.get("scalars_inaccurate")][: max(0, m - rec.n_units)]
    if not extra:
        return rec
    U = np.vstack([rec.U] + [np.asarray(d["u"])[None, :] for d in extra])
    return replace(rec, a=np.concatenate([rec.a, [d["a"] for d in extra]]),
                   b=np.concatenate([rec.b, [d["b"] for d in extra]]), U=U, W=coeffs.lift(U),
                   source=rec.source + [d["source"] for d in extra], also_in=rec.also_in + [[] for _ in extra],
                   snr=np.concatenate([rec.snr, [d["snr"] for d in extra]]))

"""Exact recovery by sparsity-pattern linear systems (Bakshi et al. 2019, Sections 4.1-4.3).

Given approximate hidden weights (Algorithm 5) or approximate output weights (Algorithm 3 steps 4-8,
Corollary 5), the exact weights are read off linear systems whose unknowns are determined by the sign
patterns of ``f(V* X̄)`` on ℓ refinement samples ``X̄``:

* (F1) ``rowspan(Ā) = rowspan(f(V* X̄))`` because ``U*`` has full column rank;
* (F2, Lemma 10) the only vectors of that row span vanishing off the support of row ``i`` are the
  multiples of row ``i``;
* (F4) on the support ``S`` of row ``i``, ``(W_i)_S = V_i X̄_S`` (``φ^{-1}`` applied for other rectified
  activations, Appendix 9.1) has a unique solution once ``|S| >= d``.

Primitive R0 (Algorithm 5 step 3, Lemma 10): :func:`row_from_zero_set` finds the row-span vector vanishing on a zero
set, by the SVD of the basis restricted to that set, with the null-space certificate
``σ_k(B_Z)/σ_1(B_Z)`` (solvable) and ``σ_{k-1}(B_Z)/σ_1(B_Z)`` (unique up to scale).

Two forms of Algorithm 5 (:func:`algorithm5`):

``form="threshold"`` (the paper)
    ``S_i^± = {j : f(±v_i x_j) > τ}``, zero set = its complement, the k systems ``(w Ā)_{S^c} = 0,
    w_r = 1`` solved in order, FAIL if both or neither sign is solvable, then ``z_i X̄_S = (w Ā)_S``.
    Correct when no true positive entry of ``f(V*_i X̄)`` lies below ``τ + |(v_i - V*_i) x_j|``. In
    floating point with ``ε = ||v_i - V*_i||`` around 1e-2 this fails for any ℓ large enough to
    determine the systems (see the errata page): a true positive in ``(0, τ]``
    is put in the zero set and the true system becomes infeasible.

``form="margin"`` (a robust variant of Algorithm 5, recommended)
    ``Pos_i = {v_i x_j > τ}``, ``Neg_i = {v_i x_j < -τ}``, the ambiguous band ``|v_i x_j| <= τ`` is
    dropped; sign ``+`` uses zero set ``Neg_i`` and positive set ``Pos_i``, sign ``-`` swaps them. The
    right sign has null ratio at round-off, the wrong one Θ(1). ``τ`` climbs a ladder of quantiles of
    ``|v_i X̄|`` until the certificates hold. With sample splitting (``X̄`` independent of ``v_i``),
    ``(v_i - ξ_i V*_i) x_j ~ N(0, ε^2)``, so any ``τ > 6 ε`` misclassifies an entry with probability
    below 2e-9.

Certificates (every form): per unit (a) null ratio <= ``tol_null`` and gap >= ``tol_gap``; (b) the
recovered row is positive on its positive set and equals ``c f(v X̄)`` on *all* ℓ columns
(``consistency <= tol_consistency``: sign-pattern consistency); then (c) distinct units and the final
residual ``||Ā - U f(V X̄)||_F / ||Ā||_F <= tol_residual``. ``certified`` is True only if all hold.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np
import scipy.linalg

from ..._threads import blas_threads, effective_n_jobs
from ..._validation import check_positive_int
from ...errors import ConvergenceError, InputError
from ._common import (
    EPS,
    ExactResult,
    check_hidden_estimate,
    check_rectified,
    check_samples,
    check_tol,
    fit_unit,
    row_space_basis,
    solve_output_weights,
    unit_consistency,
)

__all__ = ["row_from_zero_set", "algorithm5", "refine_from_unmixing", "refine_from_output_weights",
           "MARGIN_QUANTILES", "certify_or_raise"]

#: ℓ d from which Algorithm 5's units run in worker threads (below it a unit costs less than a thread hand-off)
_PARALLEL_UNITS_MIN = 2_000_000

#: τ ladder of the margin form: quantiles of |v_i X̄| (Algorithm 5 suggests 5% to 50%; the upper
#: rungs serve approximate weights with errors up to ~0.4)
MARGIN_QUANTILES = (0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


def row_from_zero_set(B: np.ndarray, zero: np.ndarray, positive: np.ndarray | None = None, *,
                      tol_null: float = 1e-10, tol_gap: float = 1e-6) -> dict:
    """Primitive R0: the vector of rowspan(Ā) that vanishes on a zero set, with its certificate.

    Solves ``(w B)_j = 0`` for ``j`` in ``zero`` (``w ∈ R^k``, ``B`` a (k, ℓ) orthonormal basis of the
    row span) through the SVD of ``B_Z``: ``w`` is the left singular vector of the smallest singular
    value. The paper normalises ``w_r = 1`` and tries r = 1..k; the SVD gives the same solution with a
    scale-free certificate (Algorithm 5 step 3, Lemma 10).

    Parameters
    ----------
    B : ndarray (k, ℓ)
        Orthonormal rows spanning rowspan(Ā).
    zero : bool or int index array
        Columns where the row must vanish.
    positive : bool or int index array, optional
        Columns where the row must be positive; the sign of ``w`` is chosen so that its sum there is
        positive, and ``min_positive`` reports the smallest entry there relative to ``max |y|``.
    tol_null, tol_gap : float
        Acceptance thresholds for ``null_ratio`` and ``gap_ratio``.

    Returns
    -------
    dict with ``w`` (k,), ``y = w B`` (ℓ,), ``null_ratio`` (``σ_k(B_Z)/σ_1(B_Z)``; for k = 1,
    ``||B_Z||``), ``gap_ratio`` (``σ_{k-1}(B_Z)/σ_1(B_Z)``; 1 for k = 1), ``min_positive``, ``n_zero``,
    ``ok`` (null ratio <= tol_null, gap >= tol_gap, and ``min_positive > 0`` when ``positive`` is given).
    """
    k = B.shape[0]
    Bz = B[:, zero]
    nz = int(Bz.shape[1])
    if nz == 0:
        return {"w": None, "y": None, "null_ratio": 1.0, "gap_ratio": 0.0, "min_positive": -np.inf,
                "n_zero": 0, "ok": False}
    if nz > k:
        # B_Z^T = Q R, so B_Z = R^T Q^T has the left singular vectors and singular values of the k x k
        # R^T: a QR of the tall B_Z^T instead of an SVD that also forms the (k x |Z|) right vectors
        Bz = scipy.linalg.qr(Bz.T, mode="r", check_finite=False)[0][:k].T
    Uz, s, _ = scipy.linalg.svd(Bz, full_matrices=nz < k, check_finite=False)
    sv = np.zeros(k)
    sv[: s.size] = s
    if k == 1:
        null_ratio, gap_ratio = float(sv[0]), 1.0
    else:
        top = sv[0] if sv[0] > 0 else 1.0
        null_ratio, gap_ratio = float(sv[-1] / top), float(sv[-2] / top)
    w = Uz[:, -1]
    y = w @ B
    min_pos = np.inf
    if positive is not None:
        yp = y[positive]
        if yp.size and float(np.sum(yp)) < 0:
            w, y, yp = -w, -y, -yp
        ymax = float(np.max(np.abs(y)))
        min_pos = float(np.min(yp) / ymax) if (yp.size and ymax > 0) else -np.inf
    ok = null_ratio <= tol_null and gap_ratio >= tol_gap and (positive is None or min_pos > 0)
    return {"w": w, "y": y, "null_ratio": null_ratio, "gap_ratio": gap_ratio, "min_positive": min_pos,
            "n_zero": nz, "ok": bool(ok)}


def _paper_system(B: np.ndarray, zero: np.ndarray, tol_null: float) -> dict:
    """Algorithm 5 step 3 / Algorithm 3 step 5 literally: the first r with a solution of
    ``(w B)_Z = 0, w_r = 1`` (least squares; "solvable" = relative residual <= tol_null)."""
    k = B.shape[0]
    Bz = B[:, zero]
    scale = float(np.linalg.norm(Bz, 2)) if Bz.size else 0.0
    tried = []
    for r in range(k):
        others = [i for i in range(k) if i != r]
        if others:
            sol, *_ = scipy.linalg.lstsq(Bz[others].T, -Bz[r], check_finite=False)
            w = np.zeros(k)
            w[others] = sol
        else:
            w = np.zeros(1)
        w[r] = 1.0
        res = float(np.linalg.norm(w @ Bz)) / (float(np.linalg.norm(w)) * scale) if scale > 0 else 0.0
        tried.append(res)
        if res <= tol_null:
            return {"w": w, "r": r, "residual": res, "solvable": True, "residuals": tried}
    return {"w": None, "r": None, "residual": min(tried) if tried else np.inf, "solvable": False,
            "residuals": tried}


def _finish(V: np.ndarray, X_bar: np.ndarray, Y_bar: np.ndarray, act, units: list, failed: list,
            diagnostics: dict, tol_residual: float, t0: float, strict: bool, what: str) -> ExactResult:
    """Final linear system A = U f(V X̄) and the global certificates (distinct units, residual)."""
    k, m = V.shape[0], Y_bar.shape[1]
    diagnostics["units"] = units
    diagnostics["failed_units"] = failed
    reasons = [f"unit {i}: {units[i].get('reason', 'failed')}" for i in failed]
    if failed:
        U = np.full((m, k), np.nan)
        diagnostics.update(residual=float("nan"), output_rank_ratio=float("nan"), max_abs_cosine=float("nan"))
    else:
        G = V / np.linalg.norm(V, axis=1, keepdims=True)
        C = np.abs(G @ G.T) - np.eye(k)
        max_cos = float(np.max(C)) if k > 1 else 0.0
        U, info = solve_output_weights(X_bar, Y_bar, V, act)
        diagnostics.update(residual=info["residual"], output_rank_ratio=info["rank_ratio"],
                           max_abs_cosine=max_cos)
        if max_cos > 1 - 1e-9:
            reasons.append(f"two recovered units are parallel (|cos| = {max_cos:.12f})")
        if not info["residual"] <= tol_residual:
            reasons.append(f"final residual ||A - U f(VX)||_F/||A||_F = {info['residual']:.3g} > "
                           f"tol_residual={tol_residual:g}")
        if not info["rank_ratio"] > 1e3 * EPS:
            reasons.append(f"f(V X̄) is rank deficient (σ_k/σ_1 = {info['rank_ratio']:.3g})")
    certified = not reasons
    diagnostics["certified"] = certified
    diagnostics["failure_reasons"] = reasons
    diagnostics["time"] = time.perf_counter() - t0
    result = ExactResult(V, U, act, certified, diagnostics)
    if strict:
        certify_or_raise(result, what)
    return result


def certify_or_raise(result: ExactResult, what: str) -> None:
    """Raise :class:`~nnrecover.errors.ConvergenceError` if ``result`` is not certified."""
    if not result.certified:
        reasons = "; ".join(result.diagnostics.get("failure_reasons", [])) or "certificate failed"
        raise ConvergenceError(
            f"{what}: the exact-recovery certificates failed ({reasons}). The approximate weights are too "
            "far off or the refinement sample is too small: pass more samples (n, n_refine) or a better "
            "approximate estimate. strict=False returns the uncertified result with diagnostics.")


def algorithm5(V_approx: Any, X_bar: Any, Y_bar: Any, *, activation: Any = "relu", form: str = "margin",
               tau: "float | Sequence[float] | None" = None, tol_null: float = 1e-10, tol_gap: float = 1e-6,
               tol_consistency: float = 1e-8, tol_residual: float = 1e-10, min_set_size: int | None = None,
               strict: bool = False) -> ExactResult:
    """Algorithm 5 (Theorem 6): exact hidden weights and their signs from approximate ``±V*`` rows.

    Parameters
    ----------
    V_approx : array (k, d)
        Rows ``v_i`` with ``||v_i - ξ_i V*_i|| <= ε`` for unknown signs ``ξ_i ∈ {±1}`` (normalised here).
    X_bar : array (ℓ, d)
        Refinement inputs (the paper's first ℓ columns of X). For the margin form they should be
        independent of ``V_approx`` (sample splitting, Algorithm 5).
    Y_bar : array (ℓ,) or (ℓ, m)
        Noiseless outputs ``Ā^T = f(X̄ V*^T) U*^T``; ``U*`` of full column rank ``k <= m``.
    activation : str or Activation, default "relu"
        Rectified activation (relu, relu_power(p), exp_minus_one; Appendix 9.1).
    form : {"margin", "threshold"}, default "margin"
        The robust margin variant or the paper's threshold form (module docstring).
    tau : float or sequence of float, optional
        Threshold(s). Threshold form: default ``0.1 / ℓ`` (the paper's ``τ = Θ(1/poly(ℓ))``). Margin form:
        the ladder of values tried in order; default the quantiles :data:`MARGIN_QUANTILES` of
        ``|v_i X̄|`` per unit.
    tol_null, tol_gap : float, default 1e-10, 1e-6
        Null-space certificate thresholds (R0).
    tol_consistency : float, default 1e-8
        Maximum relative deviation of a recovered row from ``c f(v X̄)`` over all ℓ columns, and of the
        linear system of step 5.
    tol_residual : float, default 1e-10
        Maximum final relative residual ``||Ā - U f(V X̄)||_F / ||Ā||_F``.
    min_set_size : int, optional
        Smallest zero/positive set used (default ``d + 2k``; at least ``d + 1``, since the systems must be
        overdetermined for their residuals to certify anything).
    strict : bool, default False
        Raise :class:`~nnrecover.errors.ConvergenceError` when a certificate fails instead of returning
        an uncertified result.

    Returns
    -------
    ExactResult
        ``hidden_weights`` ``V`` with unit rows (homogeneous activations) in the order of
        ``V_approx``, signs resolved; ``output_weights`` ``U`` from ``Ā = U f(V X̄)``; ``diagnostics``
        with ``units`` (per unit: ``sign``, ``tau``, ``null_ratio``, ``wrong_sign_null_ratio``,
        ``gap_ratio``, ``consistency``, ``system_residual``, ``attempts``), ``residual``,
        ``failed_units``, ``failure_reasons``, ``rank_ratio_A``, ``tail_ratio_A``, ``form``.

    Raises
    ------
    InputError
        Bad shapes, NaN, unknown form, bad tolerances.
    AssumptionError
        Non-rectified activation; fewer outputs or samples than units.
    ConvergenceError
        ``strict=True`` and a certificate failed.
    """
    t0 = time.perf_counter()
    act = check_rectified(activation, what="Algorithm 5")
    X_bar, Y_bar = check_samples(X_bar, Y_bar, name_x="X_bar", name_y="Y_bar")
    ell, d = X_bar.shape
    V0 = check_hidden_estimate(V_approx, None, d)
    k = V0.shape[0]
    if form not in ("margin", "threshold"):
        raise InputError(f"form must be 'margin' or 'threshold', got {form!r}.")
    tol_null, tol_gap = check_tol(tol_null, "tol_null"), check_tol(tol_gap, "tol_gap")
    tol_consistency = check_tol(tol_consistency, "tol_consistency")
    tol_residual = check_tol(tol_residual, "tol_residual")
    min_set = d + 2 * k if min_set_size is None else check_positive_int(min_set_size, "min_set_size", minimum=d + 1)
    if ell < 2 * min_set:
        raise InputError(f"Algorithm 5 needs at least 2 (d + 2k) = {2 * min_set} refinement samples "
                         f"(X_bar has {ell}); pass more samples.")
    B, sA = row_space_basis(Y_bar, k)
    diagnostics: dict = {
        "form": form, "n_refine": ell,
        "rank_ratio_A": float(sA[k - 1] / sA[0]) if sA[0] > 0 else 0.0,
        "tail_ratio_A": float(sA[k] / sA[k - 1]) if (sA.size > k and sA[k - 1] > 0) else 0.0,
    }
    V = np.full((k, d), np.nan)
    units, failed = [], []

    def unit(i: int) -> dict:
        t = X_bar @ V0[i]
        if form == "threshold":
            return _unit_threshold(i, t, B, X_bar, act, tau, tol_null, tol_consistency, ell)
        return _unit_margin(t, B, X_bar, act, tau, tol_null, tol_gap, tol_consistency, min_set)

    # the units are independent (each reads X̄ and B only), so they run side by side on the caller's
    # cores, one BLAS thread each; results are taken in unit order, the same whatever the worker count
    workers = min(effective_n_jobs(None), k)
    if workers > 1 and ell * d >= _PARALLEL_UNITS_MIN:
        with blas_threads(1), ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nnrecover-units") as pool:
            infos = list(pool.map(unit, range(k)))
    else:
        infos = [unit(i) for i in range(k)]
    for i, info in enumerate(infos):
        if info.pop("v", None) is not None and info["ok"]:
            V[i] = info["v_final"]
        else:
            failed.append(i)
        info.pop("v_final", None)
        units.append(info)
    return _finish(V, X_bar, Y_bar, act, units, failed, diagnostics, tol_residual, t0, strict, "Algorithm 5")


def _unit_margin(t, B, X_bar, act, tau, tol_null, tol_gap, tol_consistency, min_set) -> dict:
    a = np.abs(t)
    if tau is None:
        taus = np.quantile(a, MARGIN_QUANTILES)
    else:
        taus = np.atleast_1d(np.asarray(tau, dtype=np.float64))
        if not np.all(np.isfinite(taus)) or np.any(taus < 0):
            raise InputError(f"tau must be non-negative finite number(s), got {tau!r}.")
    attempts = []
    for tv in taus:
        tv = float(tv)
        pos, neg = t > tv, t < -tv
        if min(int(pos.sum()), int(neg.sum())) < min_set:
            attempts.append({"tau": tv, "reason": "margin sets smaller than d + 2k"})
            break
        plus = row_from_zero_set(B, neg, pos, tol_null=tol_null, tol_gap=tol_gap)
        minus = row_from_zero_set(B, pos, neg, tol_null=tol_null, tol_gap=tol_gap)
        att = {"tau": tv, "null_ratio_plus": plus["null_ratio"], "null_ratio_minus": minus["null_ratio"],
               "gap_plus": plus["gap_ratio"], "gap_minus": minus["gap_ratio"]}
        attempts.append(att)
        if plus["ok"] == minus["ok"]:
            att["reason"] = "both signs solvable (FAIL)" if plus["ok"] else "no sign solvable"
            continue
        right, wrong, P = (plus, minus, pos) if plus["ok"] else (minus, plus, neg)
        y = right["y"]
        # step 5 on 2d of the rows (consistent system: exact; the residual is checked on all of them)
        v, sys_res, _ = fit_unit(y[P], X_bar[P], act, solve_rows=2 * X_bar.shape[1])
        cons = unit_consistency(y, X_bar, v, act)
        att.update(system_residual=sys_res, consistency=cons["consistency"])
        if sys_res <= tol_consistency and cons["consistency"] <= tol_consistency:
            return {"ok": True, "v": v, "v_final": v, "sign": 1 if plus["ok"] else -1, "tau": tv,
                    "null_ratio": right["null_ratio"], "wrong_sign_null_ratio": wrong["null_ratio"],
                    "gap_ratio": right["gap_ratio"], "system_residual": sys_res,
                    "consistency": cons["consistency"], "pattern_mismatches": cons["pattern_mismatches"],
                    "n_zero": right["n_zero"], "n_positive": int(P.sum()), "attempts": attempts}
        att["reason"] = "recovered row inconsistent with f(v X̄)"
    return {"ok": False, "v": None, "reason": "no margin τ passed the certificates "
            f"({attempts[-1].get('reason', '') if attempts else 'no attempt'})", "attempts": attempts}


def _unit_threshold(i, t, B, X_bar, act, tau, tol_null, tol_consistency, ell) -> dict:
    if tau is None:
        tv = 0.1 / ell
    else:
        tv = float(np.atleast_1d(np.asarray(tau, dtype=np.float64))[0])
        if not (np.isfinite(tv) and tv >= 0):
            raise InputError(f"tau must be a non-negative finite number, got {tau!r}.")
    sols = {}
    for q, arr in (("+", t), ("-", -t)):
        S = act(arr) > tv                      # step 2: sign pattern of v_i^q
        sols[q] = (S, _paper_system(B, ~S, tol_null))
    solv = [q for q in "+-" if sols[q][1]["solvable"]]
    info = {"tau": tv, "residual_plus": sols["+"][1]["residual"], "residual_minus": sols["-"][1]["residual"]}
    if len(solv) != 1:                         # step 4: FAIL if both (or, our addition, neither) are solvable
        info.update(ok=False, v=None, reason="both signs solvable (FAIL)" if solv else
                    "no sign solvable (a true positive entry fell below τ; see the errata of Algorithm 5)")
        return info
    q = solv[0]
    S, sol = sols[q]
    y = sol["w"] @ B
    if float(np.sum(y[S])) < 0:               # step 5: flip so that w Ā has no negative entries
        y = -y
    v, sys_res, _ = fit_unit(y[S], X_bar[S], act)
    cons = unit_consistency(y, X_bar, v, act)
    ok = sys_res <= tol_consistency and cons["consistency"] <= tol_consistency
    info.update(ok=ok, v=v if ok else None, v_final=v, sign=1 if q == "+" else -1, r=sol["r"],
                system_residual=sys_res, consistency=cons["consistency"],
                pattern_mismatches=cons["pattern_mismatches"], n_support=int(S.sum()))
    if not ok:
        info["reason"] = "recovered row inconsistent with f(v X̄)"
    return info


def refine_from_unmixing(M: Any, X_bar: Any, Y_bar: Any, *, activation: Any = "relu", form: str = "margin",
                         tau: float | None = None, tol_null: float = 1e-10, tol_gap: float = 1e-6,
                         tol_consistency: float = 1e-8, tol_residual: float = 1e-10,
                         strict: bool = False) -> ExactResult:
    """Algorithm 3 steps 4-8: exact ``V*``, ``U*`` from an approximate unmixing ``M ≈ D Π U*^†``.

    ``M`` (k, m) maps outputs to approximately positive multiples of the hidden activations:
    ``Z = M Ā ≈ D f(V* X̄)`` with ``D`` positive diagonal (ICA: ``M = (T̂U)^{-1} T``; Corollary 5:
    ``M = Û^†``).

    ``form="threshold"`` is the paper: entries of ``Z`` at most ``τ`` are rounded to 0 (step 4, default
    ``τ = 0.1 / ℓ``), each row's support gives the system of step 5 solved for the first solvable
    ``r``, rows flipped non-negative (step 7) and ``V`` from ``(W_i)_{S_i} = V_i X̄_{S_i}`` (step 8).
    ``form="margin"`` is the bridge of Algorithm 3: ``v_i`` by least squares on the confidently
    positive entries of ``Z_i`` (top quarter), then :func:`algorithm5` in margin form; it avoids the
    requirement that no true positive entry falls below ``τ``.

    Parameters and return value as :func:`algorithm5` (``tau`` is the rounding threshold of the
    threshold form; the margin form uses its ladder).
    """
    t0 = time.perf_counter()
    act = check_rectified(activation, what="Algorithm 3 (steps 4-8)")
    X_bar, Y_bar = check_samples(X_bar, Y_bar, name_x="X_bar", name_y="Y_bar")
    ell, d = X_bar.shape
    M = np.asarray(M, dtype=np.float64)
    if M.ndim != 2 or M.shape[1] != Y_bar.shape[1]:
        raise InputError(f"the unmixing matrix must have shape (k, m) = (k, {Y_bar.shape[1]}), got {M.shape}.")
    if not np.all(np.isfinite(M)):
        raise InputError("the unmixing matrix contains NaN or infinite values.")
    if form not in ("margin", "threshold"):
        raise InputError(f"form must be 'margin' or 'threshold', got {form!r}.")
    k = M.shape[0]
    Z = Y_bar @ M.T                            # (ℓ, k): rows of M Ā
    if form == "margin":
        V0 = np.empty((k, d))
        for i in range(k):
            zi = Z[:, i]
            P = zi > np.quantile(zi, 0.75)
            if int(P.sum()) < d:
                raise InputError(f"Algorithm 3 refinement needs ℓ >= 4 d samples (got ℓ = {ell}).")
            z, _, _ = fit_unit(np.maximum(zi[P], np.finfo(float).tiny), X_bar[P], act)
            V0[i] = z
        res = algorithm5(V0, X_bar, Y_bar, activation=act, form="margin", tol_null=tol_null, tol_gap=tol_gap,
                         tol_consistency=tol_consistency, tol_residual=tol_residual, strict=False)
        res.diagnostics["route"] = "unmixing -> Algorithm 5 (margin)"
        res.diagnostics["time"] = time.perf_counter() - t0
        if strict:
            certify_or_raise(res, "Algorithm 3 (steps 4-8)")
        return res
    tv = 0.1 / ell if tau is None else check_tol(tau, "tau")
    tol_null, tol_consistency = check_tol(tol_null, "tol_null"), check_tol(tol_consistency, "tol_consistency")
    tol_residual = check_tol(tol_residual, "tol_residual")
    B, sA = row_space_basis(Y_bar, k)
    diagnostics = {"form": "threshold", "n_refine": ell, "tau": tv,
                   "rank_ratio_A": float(sA[k - 1] / sA[0]) if sA[0] > 0 else 0.0}
    V = np.full((k, d), np.nan)
    units, failed = [], []
    for i in range(k):
        S = Z[:, i] > tv                       # step 4: round entries <= τ to zero
        sol = _paper_system(B, ~S, tol_null)   # steps 5-6
        if not sol["solvable"] or int(S.sum()) < d:
            units.append({"ok": False, "residual": sol["residual"],
                          "reason": "no solvable system (a true positive entry fell below τ)"})
            failed.append(i)
            continue
        y = sol["w"] @ B
        if float(np.sum(y[S])) < 0:            # step 7
            y = -y
        v, sys_res, _ = fit_unit(y[S], X_bar[S], act)     # step 8
        cons = unit_consistency(y, X_bar, v, act)
        ok = sys_res <= tol_consistency and cons["consistency"] <= tol_consistency
        units.append({"ok": ok, "r": sol["r"], "residual": sol["residual"], "system_residual": sys_res,
                      "consistency": cons["consistency"], "n_support": int(S.sum()),
                      **({} if ok else {"reason": "recovered row inconsistent with f(v X̄)"})})
        if ok:
            V[i] = v
        else:
            failed.append(i)
    return _finish(V, X_bar, Y_bar, act, units, failed, diagnostics, tol_residual, t0, strict,
                   "Algorithm 3 (steps 4-8)")


def refine_from_output_weights(U_approx: Any, X_bar: Any, Y_bar: Any, **options) -> ExactResult:
    """Exact recovery from approximate output weights ``Û ≈ U* Π D`` (Corollary 5, Remark 6).

    The paper multiplies ``Ā`` by ``Û^{-1}`` (``Û^†`` when m > k, Corollary 5) and runs Algorithm 3
    steps 4-8 without the sketch ``T``; this is :func:`refine_from_unmixing` with ``M = Û^†``.
    ``D`` must be positive (column signs of ``Û`` right), as in Theorem 8.
    """
    U = np.asarray(U_approx, dtype=np.float64)
    if U.ndim != 2:
        raise InputError(f"U_approx must have shape (m, k), got {U.shape}.")
    if not np.all(np.isfinite(U)):
        raise InputError("U_approx contains NaN or infinite values.")
    return refine_from_unmixing(np.linalg.pinv(U), X_bar, Y_bar, **options)

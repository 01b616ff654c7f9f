"""Orientation (sign) of every hidden unit from the linear part of the fitted network.

Carlini, Jagielski and Mironov (CRYPTO 2020), Section 4.4, "Recovering signs" (made polynomial by
Canales-Martinez et al., EUROCRYPT 2024). On one hidden layer ``a relu(-z) = a relu(z) - a z``, so a
unit with the wrong orientation is the right one plus a linear function. Fitting ``f = sum_j alpha_j
relu(z_j) + U x + c`` (:func:`nnrecover.extraction.output.fit_output_layer`) and imposing that the
true network has no linear part gives ``U = -sum_j t_j alpha_j w_j^T`` with binary ``t`` (1 = flip;
paper -> code: the sign vector -> ``t``) -> :func:`resolve_signs`. Generic networks have exactly one
solution; with ``k <= p d`` it is a least-squares solve, otherwise a low-density multidimensional
subset sum, solved by lattice reduction (:mod:`nnrecover.extraction.lattice`: LLL and BKZ, the
equations weighted by their precision) or a HiGHS MILP (``scipy.optimize.milp``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .._threads import blas_threads
from .lattice import binary_solution

__all__ = ["resolve_signs", "sign_failure_reason"]


def _equation_scale(M: np.ndarray, rhs: np.ndarray, p: int) -> np.ndarray:
    """Size against which the residual of each orientation equation is measured.

    Equation ``(i, l)`` (output ``i``, input ``l``) reads ``U[i, l]``, fitted from output ``i`` on
    isotropic queries, so its absolute error has a part that is the same for every input ``l``: the
    round-off of output ``i``'s coefficients, not of this equation's own. Measured against its own
    coefficients alone, an equation of an input that no unit uses (a zero column of ``W``, or 1e-30 as
    an L2 penalty leaves it) compares round-off with round-off and fails for every ``t``; the scale is
    therefore the larger of its own coefficient sum and the mean one among the equations of the same
    output (equations at or above the mean keep their own, as the lattice weights them by it).
    """
    own = (np.abs(M).sum(axis=1) + np.abs(rhs)).reshape(p, -1)
    return (np.maximum(own, own.mean(axis=1, keepdims=True)) + 1e-300).ravel()


def resolve_signs(W: np.ndarray, alpha: np.ndarray, U: np.ndarray, *, rel_tol: float,
                  precision: float | None = None, time_limit: float = 120.0,
                  max_solves: int = 8, free: list[np.ndarray] | None = None) -> tuple[np.ndarray | None, dict]:
    """Orientation of every unit from the linear part (Carlini et al. 2020, Section 4.4).

    Solves ``U = -sum_j t_j alpha_j w_j^T`` (``p d`` equations) for ``t`` in ``{0, 1}^k``. When the
    ``k`` columns are linearly independent the least-squares solution is rounded (and must be within
    0.25 of 0/1); otherwise the 0/1 problem with equations met to ``rel_tol`` (relative to the
    equation's scale, :func:`_equation_scale`) is solved by lattice reduction (:mod:`~nnrecover.extraction.lattice`,
    low-density subset sum) and by HiGHS (``scipy.optimize.milp``; a solution whose residual exceeds ``rel_tol``
    is excluded by a no-good cut and the problem solved again, at most ``max_solves`` times), the
    lattice first when ``k > 2 p d``, all within ``time_limit`` seconds.

    ``free[i]`` (optional) lists units ``j`` whose coefficient in output ``i``'s linear part is unknown
    (``alpha[j, i]`` is not the unit's weight there): a deeper neuron whose critical points all lie on
    one side of unit ``j``'s boundary cannot tell ``relu(z_j)`` from ``z_j`` or from 0. Output ``i``'s
    equations are then projected onto the complement of those units' rows ``w_j``, which removes the
    unknown terms.

    The lattice weights the equations by their precision, not by the acceptance tolerance: every bit
    of precision given away raises the density of the subset sum (``k`` unknown bits against ``p d``
    equations of ``log2(1 / precision)`` bits each), and with it the chance that reduction misses the
    solution. ``precision`` (relative, like ``rel_tol``) is where the ladder of weights starts; each
    failed attempt loosens the weight tenfold up to ``rel_tol``.

    Returns
    -------
    t : (k,) int array or None when no solution was found; evidence dict
    """
    k, d = W.shape
    rhs = U.ravel()
    info: dict[str, Any] = {"equations": int(rhs.size), "unknowns": int(k), "rel_tol": float(rel_tol),
                            "time_limit": float(time_limit)}
    if k == 0:
        return np.zeros(0, int), {**info, "method": "none"}
    M = -(alpha[:, :, None] * W[:, None, :]).reshape(k, -1).T        # (p d, k), alpha is (k, p)
    if free is not None:
        M, rhs = M.copy(), rhs.copy()
        for i, units in enumerate(free):
            if len(units):
                Q, _ = np.linalg.qr(W[np.asarray(units)].T)
                block = slice(i * d, (i + 1) * d)
                M[block] -= Q @ (Q.T @ M[block])
                rhs[block] -= Q @ (Q.T @ rhs[block])
        info["free_units"] = int(sum(len(u) for u in free))
    with blas_threads(1):
        sv = np.linalg.svd(M, compute_uv=False)
    full_rank = M.shape[0] >= k and sv[-1] > 1e-8 * sv[0]
    scale = _equation_scale(M, rhs, alpha.shape[1])
    if full_rank:
        t_real, *_ = np.linalg.lstsq(M, rhs, rcond=None)
        t = np.rint(t_real).astype(int)
        # a 0/1 vector must also satisfy the equations to the measured precision: a rounding that
        # is merely closest (e.g. t = -0.11 from a leaky-ReLU model, whose linear part is not made of
        # flipped units) would silently drop the linear part
        resid_t = float(np.max(np.abs(M @ t - rhs) / scale))
        binary = bool(np.all((t == 0) | (t == 1)))
        ok = bool(binary and np.max(np.abs(t_real - t)) < 0.25 and resid_t <= rel_tol)
        info.update(method="least squares", max_rounding=float(np.max(np.abs(t_real - t))),
                    max_relative_residual=resid_t, rounds_to_binary=binary)
        return (t if ok else None), info
    t0 = time.perf_counter()
    info["method"] = "none found"
    weights = [rel_tol]
    if precision is not None and 0 < precision < rel_tol:
        n_steps = int(np.ceil(np.log10(rel_tol / precision)))
        weights = [min(precision * 10.0 ** i, rel_tol) for i in range(n_steps + 1)]
    # few unknowns per equation: HiGHS is fast; many (k > 2 m): the lattice is, and HiGHS may never end
    lattice_first = k > 2 * M.shape[0]
    order = ("lattice", "milp") if lattice_first else ("milp", "lattice")
    t = None
    for how in order:
        if how == "lattice":
            info["lattice_weights_tried"] = []
            for i, weight in enumerate(weights):
                left = time_limit - (time.perf_counter() - t0)
                if left <= 0:
                    break
                lattice_info: dict[str, Any] = {}
                # the last weights share what is left of the time; a tight weight fails fast or succeeds
                t = binary_solution(M, rhs, weight * scale, accept=rel_tol * scale,
                                    time_limit=left / (len(weights) - i), info=lattice_info)
                info["lattice_weights_tried"].append(float(weight))
                if "fplll_error" in lattice_info:
                    info["fplll_error"] = lattice_info["fplll_error"]
                if t is not None:
                    info.update(method=f"0/1 solve by lattice reduction ({lattice_info['reduction']})",
                                lattice_weight=float(weight))
                    break
            info["lattice_seconds"] = time.perf_counter() - t0
        else:
            left = time_limit - (time.perf_counter() - t0)
            if left > 0:
                t = _milp_binary(M, rhs, scale, rel_tol, left, max_solves, info)
                if t is not None:
                    info["method"] = "0/1 feasibility (HiGHS MILP)"
        if t is not None:
            info["max_relative_residual"] = float(np.max(np.abs(M @ t - rhs) / scale))
            break
    info["sign_seconds"] = time.perf_counter() - t0
    return t, info


def sign_failure_reason(info: dict) -> str:
    """Why :func:`resolve_signs` found no orientation, from its evidence dict: which solve ran and how it
    failed (a residual above the tolerance, infeasibility, or the time limit), and what that says.

    Least squares (the ``k`` columns independent): the rounded 0/1 vector is the only candidate, so a
    residual above the tolerance means the linear part is not made of flipped units. Lattice
    reduction and HiGHS (``k`` above the rank): HiGHS proving the equations infeasible, or both ending
    before the time limit without a solution, says the same; a solve cut short by the time limit says
    nothing about the model.
    """
    tol = info.get("rel_tol", float("nan"))
    nature = ("so the linear part is not made of flipped units: the box is probably not a one-hidden-layer "
              "ReLU network (or units were missed)")
    if info.get("method") == "least squares":
        resid, rounding = info.get("max_relative_residual", float("nan")), info.get("max_rounding", float("nan"))
        what = []
        if not resid <= tol:
            what.append(f"the rounded 0/1 vector leaves relative residual {resid:.3g}, above the tolerance {tol:.3g}")
        if not info.get("rounds_to_binary", True):
            what.append("the solution rounds to integers other than 0 and 1")
        if not rounding < 0.25:
            what.append(f"the solution is {rounding:.2g} away from the nearest integers (at most 0.25 accepted)")
        return (f"least-squares sign solve ({info.get('unknowns')} unknowns, {info.get('equations')} equations): "
                f"{'; '.join(what) or 'no 0/1 solution'}, {nature}")
    limit = info.get("time_limit", float("nan"))
    status = info.get("milp_status")
    parts = []
    if "milp_solves" not in info:
        parts.append("HiGHS MILP not run (no time left)")
    elif status == 2:
        parts.append(f"HiGHS MILP proved that none exists ({info['milp_solves']} solve(s))")
    elif status == 1:
        parts.append("HiGHS MILP stopped at the time limit")
    elif "milp_best_relative_residual" in info:
        parts.append(f"HiGHS MILP's candidates left relative residual {info['milp_best_relative_residual']:.3g} "
                     f"or more ({info['milp_solves']} solve(s))")
    else:
        parts.append(f"HiGHS MILP found none ({info.get('milp_message', 'no message')})")
    if "lattice_weights_tried" in info:
        tried = info["lattice_weights_tried"]
        parts.append(f"lattice reduction found none (weights {min(tried):.2g} to {max(tried):.2g})" if tried
                     else "lattice reduction not run (no time left)")
    timed_out = status == 1 or info.get("sign_seconds", 0.0) >= limit
    head = (f"0/1 sign solve ({info.get('unknowns')} unknowns, {info.get('equations')} equations, relative "
            f"tolerance {tol:.3g}): no 0/1 vector meets the equations to the tolerance; {', '.join(parts)}")
    if timed_out:
        return (f"{head}: not found within the time limit of {limit:g} s (sign_time_limit), which says nothing "
                "about the model")
    if status == 2 or "milp_best_relative_residual" in info:
        return f"{head}, {nature}"
    return f"{head}, after {info.get('sign_seconds', 0.0):.3g} s of the time limit of {limit:g} s"


def _milp_binary(M, rhs, scale, rel_tol, time_limit, max_solves, info) -> np.ndarray | None:
    """0/1 feasibility by HiGHS; a solution off by more than ``rel_tol`` gets a no-good cut and another solve."""
    # deferred: scipy.optimize takes about 0.5 s to import and only a wide scalar-output network needs it
    from scipy.optimize import (
        Bounds,
        LinearConstraint,
        milp,
    )

    k = M.shape[1]
    t0 = time.perf_counter()
    A_rows, lo, hi = [M], [rhs - max(rel_tol, 1e-8) * scale], [rhs + max(rel_tol, 1e-8) * scale]
    info["milp_solves"] = 0
    t = None
    for _ in range(max_solves):
        left = time_limit - (time.perf_counter() - t0)
        if left <= 0:
            break
        res = milp(c=np.zeros(k), integrality=np.ones(k), bounds=Bounds(0, 1),
                   constraints=LinearConstraint(np.vstack(A_rows), np.concatenate(lo), np.concatenate(hi)),
                   options={"time_limit": left})
        info["milp_solves"] += 1
        info.update(milp_status=int(res.status), milp_message=str(res.message))
        if res.x is None:
            break
        cand = np.rint(res.x).astype(int)
        resid = float(np.max(np.abs(M @ cand - rhs) / scale))
        if resid <= rel_tol:
            t = cand
            break
        info["milp_best_relative_residual"] = min(resid, info.get("milp_best_relative_residual", np.inf))
        # HiGHS accepts constraint violations up to its own feasibility tolerance (1e-7); exclude this
        # near-solution and solve again
        A_rows.append(np.where(cand == 1, 1.0, -1.0)[None, :])
        lo.append(np.array([-np.inf]))
        hi.append(np.array([cand.sum() - 1.0]))
    info["milp_seconds"] = time.perf_counter() - t0
    return t

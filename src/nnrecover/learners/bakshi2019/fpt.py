"""Algorithm 7 (Section 6, Theorem 11): exact recovery when ``U*`` need not have full column rank.

A column of ``f(V* X)`` that is 1-sparse (only unit i active) makes the sample's output a positive
multiple of ``U*_{:,i}``. Algorithm 7 groups the non-zero output columns into classes of mutually
positive-parallel columns (one class per unit), reads ``U_{:,i}`` off a representative, solves
``w_i x_j = c_{i,j}`` on the class (``c_{i,j} > 0`` with ``A_{:,j} = c_{i,j} U_{:,i}``), normalises, and
solves ``U f(V X) = A`` (unique since ``f(V* X)`` has rank k, Lemma 4, even when m < k).

Corrected condition (erratum to Algorithm 7): the paper allows columns ``[u, -u]`` ("no two
columns are non-negative multiples"), but then every sample with only units 0 and 1 active has output
``(f_0 - f_1) u``, parallel to ``±u``, and those 2-sparse columns fall into the classes of units 0 and
1. The correct requirement is that **no two columns of U* are collinear (multiples of either sign)**,
and the grouping uses ``c > 0`` only (the paper's step 2 says ``c != 0``). :func:`algorithm7` detects
antipodal classes and raises :class:`~nnrecover.errors.AssumptionError` naming this condition.

Grouping: unit directions ``A_{:,j}/||A_{:,j}||`` are sorted by their projection on a random
direction and consecutive directions within ``tol`` (relative) are merged, then checked coordinate-wise:
``O(n m + n log n)``, not the ``O(n^2 m)`` pairwise comparison. Classes with fewer than ``d`` members
cannot determine ``w_i`` ("insufficient samples"; Lemma 21 needs ``n = Ω(d log(k/δ) (kκ)^{2k})``; in
practice a column is 1-sparse with probability about ``k 2^{-k}`` for near-orthonormal ``V*``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..._validation import check_positive_int, check_random_state
from ...errors import AssumptionError, InputError
from ._common import (
    EPS,
    ExactResult,
    check_rectified,
    check_samples,
    check_tol,
    fit_unit,
    solve_output_weights,
)
from .exact import certify_or_raise

__all__ = ["algorithm7", "parallel_classes"]


def parallel_classes(Y: np.ndarray, *, tol: float = 1e-10, zero_tol: float = 1e-12, rng: Any = None
                     ) -> tuple[list[np.ndarray], dict]:
    """Steps 1-2 of Algorithm 7: classes (size >= 2) of mutually positive-parallel non-zero rows of ``Y``.

    Returns the classes (arrays of row indices, largest first) and ``{"n_nonzero", "n_singletons"}``.
    """
    gen = check_random_state(rng)
    tol, zero_tol = check_tol(tol, "tol"), check_tol(zero_tol, "zero_tol")
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim != 2 or not np.all(np.isfinite(Y)):
        raise InputError(f"Y must be a finite (n, m) array, got shape {Y.shape}.")
    norms = np.linalg.norm(Y, axis=1)
    nz = np.flatnonzero(norms > zero_tol * max(float(norms.max(initial=0.0)), np.finfo(float).tiny))
    D = Y[nz] / norms[nz, None]
    g = gen.standard_normal(Y.shape[1])
    g /= np.linalg.norm(g)
    key = D @ g
    order = np.argsort(key, kind="stable")
    classes, singletons = [], 0
    start = 0
    for pos in range(1, order.size + 1):
        if pos < order.size and key[order[pos]] - key[order[pos - 1]] <= tol:
            continue
        block = order[start:pos]
        start = pos
        # split the block by full-direction equality (projections may coincide by accident)
        while block.size:
            ref = D[block[0]]
            same = np.max(np.abs(D[block] - ref), axis=1) <= 10 * tol
            same[0] = True                     # the reference itself (always progresses)
            members = block[same]
            block = block[~same]
            if members.size >= 2:
                classes.append(nz[members])
            else:
                singletons += 1
    classes.sort(key=lambda c: -c.size)
    return classes, {"n_nonzero": int(nz.size), "n_singletons": int(singletons)}


def _refuse_antipodal(Y: np.ndarray, classes: list) -> None:
    """Corrected condition of Algorithm 7: refuse when two classes of at least d columns are antipodal."""
    if len(classes) < 2:
        return
    dirs = np.array([Y[c[0]] / np.linalg.norm(Y[c[0]]) for c in classes])
    C = dirs @ dirs.T
    i, j = np.unravel_index(int(np.argmin(C)), C.shape)
    if C[i, j] < -1 + 1e-8:
        raise AssumptionError(
            f"two classes of parallel output columns (sizes {classes[i].size} and {classes[j].size}) point in "
            "opposite directions, so U* has columns [u, -c u] (c > 0): Algorithm 7 needs no two columns of "
            "U* to be collinear (scalar multiples of either sign). The paper's condition (no two columns are "
            "non-negative multiples) is insufficient: samples where only these two units are active give "
            "outputs (f_i - f_j) u, parallel to ±u, which corrupt both classes (erratum to Algorithm 7; Bakshi "
            "et al. Theorem 11).")


def algorithm7(X: Any, Y: Any, n_hidden: int | None = None, *, activation: Any = "relu", tol: float = 1e-10,
               tol_residual: float = 1e-10, strict: bool = False, rng: Any = None) -> ExactResult:
    """Algorithm 7, FPTExactNeuralNet: exact ``U*``, ``V*`` from 1-sparse columns of ``f(V* X)``.

    Parameters
    ----------
    X : array (n, d)
        Gaussian inputs (any continuous law with the orthant property works).
    Y : array (n,) or (n, m)
        Noiseless outputs ``f(X V*^T) U*^T``; ``U*`` may have ``m < k`` (any m >= 1) but no two columns
        collinear (corrected condition, module docstring); ``V*`` of rank k.
    n_hidden : int, optional
        ``k``; by default the number of classes with at least ``d`` members (k is read off, Algorithm 7).
    activation : str or Activation, default "relu"
        Rectified activation; ``c_{i,j} = U-scale * φ(V_i x_j)`` is inverted with ``φ^{-1}``.
    tol : float, default 1e-10
        Relative tolerance for "parallel" (direction equality).
    tol_residual : float, default 1e-10
        Certificate thresholds: per-class linear system and final ``||A - U f(VX)||_F / ||A||_F``.
    strict : bool, default False
        Raise :class:`~nnrecover.errors.ConvergenceError` when a certificate fails.
    rng : int, Generator or None
        Random projection used to sort directions.

    Returns
    -------
    ExactResult
        ``diagnostics``: ``class_sizes``, ``n_classes``, ``class_residuals``, ``residual``,
        ``min_class_size`` (d), ``k_inferred``.

    Raises
    ------
    AssumptionError
        Two classes are antipodal (``U*`` has columns ``u`` and ``-c u``: the paper's condition allows
        it, but Algorithm 7 then mixes 2-sparse columns into those classes; the corrected condition
        requires no two collinear columns), or ``m = 1`` with ``k > 1``.
    InputError
        Bad shapes; fewer than ``n_hidden`` classes with at least ``d`` members (insufficient samples).
    """
    t0 = time.perf_counter()
    act = check_rectified(activation, what="Algorithm 7")
    X, Y = check_samples(X, Y)
    n, d = X.shape
    m = Y.shape[1]
    k = None if n_hidden is None else check_positive_int(n_hidden, "n_hidden")
    tol, tol_residual = check_tol(tol, "tol"), check_tol(tol_residual, "tol_residual")
    if m == 1 and k is not None and k > 1:
        raise AssumptionError("Algorithm 7 with one output (m = 1) can only work for k = 1: every output is a "
                              "non-negative multiple of the same direction, so the units cannot be told apart "
                              "(the corrected condition needs non-collinear columns of U*, Algorithm 7).")
    classes, cinfo = parallel_classes(Y, tol=tol, rng=rng)
    big = [c for c in classes if c.size >= d]
    k_used = len(big) if k is None else k
    diagnostics: dict = {"class_sizes": [int(c.size) for c in classes[: max(k_used, 1) + 3]],
                         "n_classes": len(classes), "n_classes_ge_d": len(big), "min_class_size": d,
                         "k_inferred": len(big), **cinfo}
    _refuse_antipodal(Y, big)
    if k_used == 0 or len(big) < k_used:
        raise InputError(f"Algorithm 7 found {len(big)} classes of at least d = {d} positive-parallel output "
                         f"columns but needs {k_used or 'at least one'}: insufficient samples (Lemma 21 needs "
                         f"n = Ω(d log(k/δ) (kκ)^(2k)); about k 2^-k of the samples are 1-sparse). Pass more "
                         "samples. (If two columns of U* are positive multiples of each other, their units share one "
                         "class and cannot be separated: the corrected condition of Algorithm 7 excludes it.)")
    chosen = big[:k_used]
    dirs = np.array([Y[c[0]] / np.linalg.norm(Y[c[0]]) for c in chosen])
    V = np.empty((k_used, d))
    class_res = []
    for i, c in enumerate(chosen):
        cij = Y[c] @ dirs[i]                   # A_{:,j} = c_{ij} u_i with ||u_i|| = 1, c_ij > 0
        v, res, _ = fit_unit(cij, X[c], act)   # step 4 (φ^{-1} for other rectified activations)
        V[i] = v
        class_res.append(res)
    U, info = solve_output_weights(X, Y, V, act)    # step 5
    reasons = []
    bad = [i for i, r in enumerate(class_res) if not r <= tol_residual]
    if bad:
        reasons.append(f"classes {bad} are not consistent (w x_j = c_ij has residual up to "
                       f"{max(class_res):.3g}): U* may have positively collinear columns or the data are noisy")
    if not info["residual"] <= tol_residual:
        reasons.append(f"final residual {info['residual']:.3g} > tol_residual={tol_residual:g}")
    if not info["rank_ratio"] > 1e3 * EPS:
        reasons.append("f(V X) is rank deficient")
    diagnostics.update(class_residuals=class_res, residual=info["residual"], output_rank_ratio=info["rank_ratio"],
                       certified=not reasons, failure_reasons=reasons, time=time.perf_counter() - t0)
    res = ExactResult(V, U, act, not reasons, diagnostics)
    if strict:
        certify_or_raise(res, "Algorithm 7")
    return res

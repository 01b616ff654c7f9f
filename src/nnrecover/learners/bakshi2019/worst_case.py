"""Worst-case inputs (Section 2): Lemma 1, Algorithm 1 (IterativeLP), Algorithm 2 (ExactNeuralNet), Theorem 1.

For *any* ``X`` and ReLU, if ``rank(A) = k`` then ``rowspan(A) = rowspan(f(V* X))`` and some ``(U, V)``
with ``A = U f(V X)`` is found by enumerating candidate sign patterns of the rows of ``V X`` and
solving linear programs (``scipy.optimize.linprog``, HiGHS). Time ``poly(nmd) min{n^{O(k)}, 2^n}``:
this is for small ``n`` only (tests use ``n <= 12``).

* Lemma 1 (:func:`enumerate_sign_patterns`): for every k distinct columns ``i_1..i_k`` and every
  right-hand side ``b ∈ {0, 1}^k`` (the "tight constraints" ``(w V')_i = 1`` or ``0``), solve the k x k
  system and keep the positive set of ``w V'``. Every realisable pattern is a vertex of
  ``{(wV')_i >= 1, i ∈ S; (wV')_i <= 0, i ∉ S}``, so it is produced; ``|𝒮| <= C(2n, k)``.
* Algorithm 1 (:func:`iterative_lp`): variables ``w ∈ R^d`` and ``z ∈ R^k`` (the paper writes
  "y, z, w ∈ R^n", erratum 4); constraints (C1) ``(wX)_j >= 1`` on S, (C2) ``(wX)_j <= 0`` off S,
  (C3) ``f_S(wX) = z V'``, and (C4) ``f_S(wX)(I - P) != 0``, linearised as in Remark 1 by 2n LPs with
  ``[w X_S (I - P)]_t <= -1`` or ``>= 1``. ``P = Q^T (Q Q^T)^{-1} Q`` (the paper writes
  ``Q^T (Q^T Q)^{-1} Q``, erratum 4) projects on the span of the previous ``f(y)``; here an orthonormal
  basis is used and no n x n matrix is formed beyond the n x d constraint block.
* Algorithm 2 (:func:`algorithm2`): k rounds of Algorithm 1 over 𝒮, then ``A = U f(Y)``, ``Y = V X``.

 After each LP the solution is polished: the equalities (C3) and the tight (C2) constraints are
imposed exactly by projecting ``(w, z)`` on their null space, so the returned factorisation holds to
round-off rather than to the LP tolerance. The result satisfies ``A = U f(V X)`` but need **not** equal
``(U*, V*)``: Theorem 1 does not claim identifiability. When ``rank(A) < k`` the
problem is NP-hard (Theorem 2) and :func:`algorithm2` refuses with
:class:`~nnrecover.errors.AssumptionError`.
"""

from __future__ import annotations

import itertools
import time
import warnings
from math import comb
from typing import Any

import numpy as np
import scipy.linalg
from scipy.optimize import linprog

from ..._validation import as_2d_float, check_positive_int
from ...activations import get_activation
from ...errors import AssumptionError, InputError
from ._common import ExactResult, check_samples, relative_residual, row_space_basis
from .exact import certify_or_raise

__all__ = ["enumerate_sign_patterns", "iterative_lp", "algorithm2", "numerical_rank"]

_HIGHS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


def numerical_rank(Y: np.ndarray, rtol: float | None = None) -> tuple[int, np.ndarray]:
    """Rank of ``Y`` with numpy's rule ``σ_i > max(n, m) eps σ_1`` (or ``rtol σ_1``), and its singular values."""
    s = scipy.linalg.svdvals(Y)
    if s.size == 0 or s[0] == 0:
        return 0, s
    tol = (max(Y.shape) * np.finfo(float).eps if rtol is None else rtol) * s[0]
    return int(np.sum(s > tol)), s


def enumerate_sign_patterns(basis: Any, *, method: str = "auto", tol: float = 1e-9,
                            max_patterns: int = 2_000_000) -> list[np.ndarray]:
    """Lemma 1: candidate sign patterns 𝒮 for the rows of ``f(V X)`` from a basis ``V'`` of rowspan(A).

    Parameters
    ----------
    basis : array (k, n)
        ``V'``: rows spanning rowspan(A) (e.g. :func:`._common.row_space_basis`).
    method : {"auto", "lemma1", "all"}
        ``"lemma1"``: the ``C(n, k) (2^k - 1)`` tight-constraint systems; ``"all"``: every non-empty subset
        of ``[n]`` (``2^n - 1``); ``"auto"``: whichever is smaller.
    tol : float
        An entry of ``w V'`` counts as positive when it exceeds ``tol`` (the systems put 1 and 0 on their
        tight columns, so entries are O(1)).
    max_patterns : int
        Refuse (InputError) when the enumeration would exceed this many systems.

    Returns
    -------
    list of bool arrays (n,), deduplicated, in order of discovery.
    """
    Vp = np.asarray(basis, dtype=np.float64)
    if Vp.ndim != 2 or not np.all(np.isfinite(Vp)):
        raise InputError(f"basis must be a finite (k, n) array, got shape {Vp.shape}.")
    k, n = Vp.shape
    if method not in ("auto", "lemma1", "all"):
        raise InputError(f"method must be 'auto', 'lemma1' or 'all', got {method!r}.")

    n_lemma = comb(n, k) * (2 ** k - 1)
    n_all = 2 ** n - 1
    if method == "auto":
        method = "all" if n_all <= n_lemma else "lemma1"
    cost = n_all if method == "all" else n_lemma
    if cost > max_patterns:
        raise InputError(f"enumerating sign patterns needs {cost} systems (> max_patterns={max_patterns}); "
                         "Theorem 1's algorithm takes time min(n^O(k), 2^n) and is meant for small n.")
    if method == "all":
        return [np.array([(s >> j) & 1 for j in range(n)], dtype=bool) for s in range(1, 2 ** n)]
    seen: dict[bytes, np.ndarray] = {}
    rhs = np.array(list(itertools.product((0.0, 1.0), repeat=k))[1:])     # (2^k - 1, k), b != 0
    for idx in itertools.combinations(range(n), k):
        M = Vp[:, idx].T
        try:
            with warnings.catch_warnings():      # singular systems are skipped just below
                warnings.simplefilter("ignore", scipy.linalg.LinAlgWarning)
                lu = scipy.linalg.lu_factor(M, check_finite=False)
        except (np.linalg.LinAlgError, ValueError):
            continue
        if not np.all(np.isfinite(lu[0])) or np.min(np.abs(np.diag(lu[0]))) <= 1e-12 * np.max(np.abs(M)):
            continue
        W = scipy.linalg.lu_solve(lu, rhs.T, check_finite=False).T        # (2^k - 1, k)
        vals = W @ Vp
        for row in vals > tol:
            if row.any():
                seen.setdefault(row.tobytes(), row)
    return list(seen.values())


def _polish(sol: np.ndarray, Aeq: np.ndarray, Xw: np.ndarray, S: np.ndarray) -> np.ndarray:
    """Project (w, z) on the null space of the equalities and the tight (C2) rows."""
    tight = (~S) & (np.abs(Xw @ sol) <= 1e-7)
    E = np.vstack([Aeq, Xw[tight]]) if np.any(tight) else Aeq
    if E.shape[0] == 0:
        return sol
    corr, *_ = scipy.linalg.lstsq(E, E @ sol, check_finite=False)
    return sol - corr


def iterative_lp(X: Any, basis: Any, pattern: Any, previous: Any = None) -> dict | None:
    """Algorithm 1, IterativeLP(X, S, y^1..y^{i-1}): a row ``y = w X`` with sign pattern S, ``f(y)`` in
    rowspan(A) and independent of the previous ``f(y^j)``.

    Parameters
    ----------
    X : array (n, d)
        Inputs (rows are samples).
    basis : array (k, n)
        ``V'``, a basis of rowspan(A).
    pattern : bool array (n,)
        The sign pattern S.
    previous : array (i-1, n), optional
        The previous ``f(y^j)`` (rows).

    Returns
    -------
    dict with ``w`` (d,), ``z`` (k,), ``y`` (n,) ``= X w``, ``n_lps`` (LPs solved), or None if infeasible.
    """
    X = as_2d_float(X, "X")
    Vp = as_2d_float(basis, "basis")
    S = np.asarray(pattern, dtype=bool)
    n, d = X.shape
    k = Vp.shape[0]
    if Vp.shape[1] != n or S.shape != (n,):
        raise InputError(f"basis must be (k, n) and pattern (n,) with n = {n}.")
    prev = None if previous is None else np.atleast_2d(np.asarray(previous, dtype=np.float64))
    if prev is not None and (prev.ndim != 2 or prev.shape[1] != n or not np.all(np.isfinite(prev))):
        raise InputError(f"previous must be a finite (i - 1, n) = (i - 1, {n}) array, got shape {prev.shape}.")
    # variables u = [w (d), z (k)]
    Xw = np.hstack([X, np.zeros((n, k))])                     # row j: (x_j . w)
    Aeq = np.vstack([np.hstack([X[S], -Vp[:, S].T]),           # (C3) on S: x_j w - (z V')_j = 0
                     np.hstack([np.zeros((int((~S).sum()), d)), Vp[:, ~S].T])])   # off S: (z V')_j = 0
    beq = np.zeros(Aeq.shape[0])
    Aub = np.vstack([-Xw[S], Xw[~S]])                          # (C1) -(x_j w) <= -1, (C2) x_j w <= 0
    bub = np.concatenate([-np.ones(int(S.sum())), np.zeros(int((~S).sum()))])
    bounds = [(None, None)] * (d + k)
    c = np.zeros(d + k)

    def solve(extra_row=None):
        A_ub, b_ub = (Aub, bub) if extra_row is None else (np.vstack([Aub, extra_row]), np.append(bub, -1.0))
        res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=Aeq if Aeq.size else None, b_eq=beq if Aeq.size else None,
                      bounds=bounds, method="highs", options=_HIGHS)
        return res.x if res.status == 0 else None

    sol = solve()                                             # prefilter: C1-C3 alone
    n_lps = 1
    if sol is None:
        return None
    if prev is not None and prev.size:
        Q, _ = np.linalg.qr(prev.T)                            # orthonormal basis of span{f(y^j)}
        XS = np.where(S[:, None], X, 0.0)                       # X_S (columns off S zeroed)
        G = XS - Q @ (Q.T @ XS)                                 # row t: g_t with [w X_S (I - P)]_t = g_t . w
        found = None
        for t in range(n):                                      # Remark 1: 2n LPs
            g = np.concatenate([G[t], np.zeros(k)])
            if np.linalg.norm(G[t]) <= 1e-12:
                continue
            for sgn in (1.0, -1.0):                             # (2t-1): g.w <= -1 ; (2t): g.w >= 1
                n_lps += 1
                cand = solve(sgn * g)
                if cand is not None:
                    found = cand
                    break
            if found is not None:
                break
        if found is None:
            return None
        sol = found
    sol = _polish(sol, Aeq, Xw, S)
    w, z = sol[:d], sol[d:]
    return {"w": w, "z": z, "y": X @ w, "n_lps": n_lps}


def algorithm2(X: Any, Y: Any, n_hidden: int, *, patterns: Any = "auto", activation: Any = "relu",
               rank_tol: float = 1e-9, tol_residual: float = 1e-9, strict: bool = False) -> ExactResult:
    """Algorithm 2, ExactNeuralNet(A, X, 𝒮) (Theorem 1): some ``(U, V)`` with ``A = U f(V X)``, any ``X``.

    Parameters
    ----------
    X : array (n, d)
        Arbitrary inputs (integer, adversarial...). ``n`` must be small: time ``min(n^O(k), 2^n)``.
    Y : array (n,) or (n, m)
        Noiseless outputs ``A^T`` with ``rank(A) = k``.
    n_hidden : int
        ``k``.
    patterns : {"auto", "lemma1", "all"} or list of bool arrays
        The candidate set 𝒮 (:func:`enumerate_sign_patterns`), or an explicit list.
    activation : {"relu"}
        Theorem 1 uses the linearity of ReLU on its positive part; other activations are refused.
    rank_tol : float, default 1e-9
        ``rank(A)`` is the number of singular values above ``rank_tol σ_1``.
    tol_residual : float, default 1e-9
        Certificate: ``||A - U f(V X)||_F / ||A||_F``.
    strict : bool, default False

    Returns
    -------
    ExactResult
        ``hidden_weights`` with unit rows (ReLU's positive scaling moved into ``U``), ``output_weights``,
        ``diagnostics`` with ``n_patterns``, ``n_lps``, ``patterns_used``, ``residual``, ``rank``.
        The factorisation is not unique (no identifiability claim): compare residuals, not parameters.

    Raises
    ------
    AssumptionError
        ``rank(A) < k`` (NP-hard even for k = 2, Theorem 2), ``rank(A) > k``, or a non-ReLU activation.
    """
    t0 = time.perf_counter()
    act = get_activation(activation)
    if act.name != "relu":
        raise AssumptionError(f"Algorithm 2 (Theorem 1) works only for ReLU (it uses linearity on the positive "
                              f"part), got {act.spec!r}.")
    X, Y = check_samples(X, Y)
    n, d = X.shape
    k = check_positive_int(n_hidden, "n_hidden")
    r, s = numerical_rank(Y, rank_tol)
    if r < k:
        raise AssumptionError(
            f"rank(A) = {r} < k = {k}: Theorem 1 needs rank(A) = k. With rank(A) < k, deciding whether some V "
            "gives A = U f(V X) is NP-hard even for k = 2 (Bakshi et al. Theorem 2, by reduction from reversible "
            "6-SAT), so no exact worst-case algorithm is offered; use Gaussian inputs (Algorithm 7 handles "
            "rank-deficient U* there).")
    if r > k:
        raise AssumptionError(f"rank(A) = {r} > k = {k}: the data are not A = U f(V X) with k units (noise, or "
                              "n_hidden too small).")
    B, _ = row_space_basis(Y, k)
    pats = enumerate_sign_patterns(B, method=patterns) if isinstance(patterns, str) else \
        [np.asarray(p, dtype=bool) for p in patterns]
    rows, ws, used, n_lps = [], [], [], 0
    for i in range(k):
        prev = np.array([np.maximum(y, 0.0) for y in rows]) if rows else None
        for t, S in enumerate(pats):                       # scan 𝒮 from the start for each i
            out = iterative_lp(X, B, S, prev)
            if out is None:
                continue
            n_lps += out["n_lps"]
            rows.append(out["y"])
            ws.append(out["w"])
            used.append(t)
            break
        else:
            break
    diagnostics = {"n_patterns": len(pats), "rank": r, "singular_values": s, "patterns_used": used,
                   "n_lps": n_lps}
    reasons = []
    if len(rows) < k:
        reasons.append(f"only {len(rows)} of {k} rows found (no feasible pattern left)")
        V = np.full((k, d), np.nan)
        U = np.full((Y.shape[1], k), np.nan)
        diagnostics["residual"] = float("nan")
    else:
        W = np.array(ws)
        H = np.maximum(X @ W.T, 0.0)                      # f(Y) with Y = V X
        Ut, *_ = scipy.linalg.lstsq(H, Y, check_finite=False)   # A = U f(Y)
        norms = np.linalg.norm(W, axis=1)
        V = W / norms[:, None]
        U = Ut.T * norms[None, :]
        res = relative_residual(Y, np.maximum(X @ V.T, 0.0) @ U.T)
        diagnostics["residual"] = res
        if not res <= tol_residual:
            reasons.append(f"residual ||A - U f(VX)||_F/||A||_F = {res:.3g} > tol_residual={tol_residual:g}")
    diagnostics.update(certified=not reasons, failure_reasons=reasons, time=time.perf_counter() - t0)
    result = ExactResult(V, U, act, not reasons, diagnostics)
    if strict:
        certify_or_raise(result, "Algorithm 2")
    return result

"""Algorithm 8 (Section 7, Theorems 12-13): arbitrary noise independent of X, by noisy halfspace learning.

Model: ``A = U* f(V* X) + E`` with any ``E`` independent of ``X`` (heavy tails, bias, structure). Goal:
``||A - U f(V X)||_F <= ||E||_F + O([σ ε √(nm) ||E||_2]^{1/2})`` (Theorem 13).

Algorithm 8, as implemented:

1. Sketch ``S`` (r x m) with i.i.d. ``N(0, 1/k)`` entries (a subspace embedding for col(U*), Prop. 4);
   ``S = I_m`` when ``m <= 100 k``.
2. Candidates ``M`` (k x r) for ``(S U*)^{-1}``. The paper enumerates every matrix with entries
   ``(1/σ_min)(1 + ε^4/(c k^4))^{-i}``, ``0 <= i <= c' k^8 ε^{-8} κ^8`` — ``ν = 2^{O(k^2 log(kκ/ε))}``
   matrices, astronomically many even for k = 1: **the exhaustive grid is infeasible beyond toy sizes**.
   The grid as written is also positive only, while ``(S U*)^{-1}`` has entries of both signs; the
   grid here includes ``±`` and 0 (erratum 7). Candidate generators: :func:`grid_candidates` (toy sizes,
   refuses beyond ``max_candidates``), ``"noisy"`` (``(S Û)^†`` from the noisy pipeline plus random
   perturbations), or any explicit list (e.g. an oracle ``(S U*)^† + Λ`` in tests).
3. For each candidate and each guess of ``||M S E||_F`` (powers of 2 around ``||M S A||_F``, O(log n)
   guesses): add ``G ~ N(0, η^2)`` with ``η = (guess)/√n`` times a constant (smoothing; the box's
   ``ε^{-2κ^2 k}`` is a typo for ``ε^{-2} κ^2 k``, erratum 7), take labels ``y_{p,q} = sign((M S A + G)_{p,q})``
   and solve ``max_w sum_q y_{p,q} <w, x_q>`` s.t. ``||w|| <= 1`` in closed form,
   ``w_p = X y_p^T / ||X y_p^T||`` (:func:`pv_halfspace`, Plan-Vershynin 2013).
4. ``U = A f(V X)^†`` for each candidate ``V``; return the pair with the smallest ``||A - U f(VX)||_F``
   (the box's output ``W^{i*}`` means ``V^{i*}``).

The recovered ``V`` has ``O(n^{-1/4})``-type accuracy (Theorem 12), not exact. The paper's guarantee
(Eq. (3) / Theorem 13) is stated with ``σ_max(U*)`` in the introduction and ``σ_min(U*)`` in Section 7; the
proof rescales ``ε`` by ``1/(κ^2 k)`` and ends with ``σ_min`` (Algorithm 8, erratum 7).
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Iterable

import numpy as np
import scipy.linalg

from ..._validation import as_2d_float, check_positive_int, check_random_state
from ...errors import InputError
from ._common import ExactResult, check_flag, check_rectified, check_samples, check_tol
from .noisy import noisy_pipeline

__all__ = ["pv_halfspace", "gaussian_sketch", "grid_candidates", "algorithm8"]


def pv_halfspace(X: Any, labels: Any) -> np.ndarray:
    """Plan-Vershynin estimator: ``argmax_{||w||<=1} sum_q y_q <w, x_q> = X^T y / ||X^T y||``.

    Parameters
    ----------
    X : array (n, d)
    labels : array (n,) or (n, p)
        ±1 labels (any real weights work); one column per halfspace.

    Returns
    -------
    ndarray (d,) or (p, d): unit vector(s).
    """
    X = as_2d_float(X, "X")
    y = np.asarray(labels, dtype=np.float64)
    if y.ndim not in (1, 2) or y.shape[0] != X.shape[0]:
        raise InputError(f"X must be (n, d) and labels (n,) or (n, p); got {X.shape} and {y.shape}.")
    if not np.all(np.isfinite(y)):
        raise InputError("labels contain NaN or infinite values.")
    W = X.T @ (y if y.ndim == 2 else y[:, None])
    nrm = np.linalg.norm(W, axis=0)
    W = W / np.where(nrm > 0, nrm, 1.0)
    return W.T if y.ndim == 2 else W[:, 0]


def gaussian_sketch(m: int, k: int, *, rows: int | None = None, delta: float = 0.1, c1: float = 1.0,
                    rng: Any = None) -> np.ndarray:
    """Step 1: ``S`` of shape ``(rows, m)`` with i.i.d. ``N(0, 1/k)`` entries, ``rows = ceil(c1 k / δ^2)``;
    ``S = I_m`` when ``rows >= m`` (a subspace embedding trivially)."""
    m, k = check_positive_int(m, "m"), check_positive_int(k, "k")
    r = int(np.ceil(c1 * k / delta ** 2)) if rows is None else check_positive_int(rows, "rows")
    if r >= m:
        return np.eye(m)
    return check_random_state(rng).standard_normal((r, m)) / np.sqrt(k)


def grid_candidates(k: int, r: int, *, sigma_min: float, levels: int, ratio: float = 2.0,
                    max_candidates: int = 100_000) -> Iterable[np.ndarray]:
    """Step 2's exhaustive grid, with signs: every k x r matrix with entries in
    ``{0} ∪ {±(1/σ_min) ratio^{-i} : 0 <= i < levels}``. Toy sizes only (``(2 levels + 1)^{k r}`` matrices).

    The paper's ratio is ``1 + ε^4/(c k^4)`` and ``levels`` about ``c' k^8 ε^{-8} κ^8``: far beyond any
    computer for every k >= 1; this generator refuses more than ``max_candidates`` matrices.
    """
    if not (np.isfinite(sigma_min) and sigma_min > 0 and np.isfinite(ratio) and ratio > 1):
        raise InputError(f"sigma_min must be > 0 and ratio > 1, got {sigma_min!r}, {ratio!r}.")
    k, r, levels = check_positive_int(k, "k"), check_positive_int(r, "r"), check_positive_int(levels, "levels")
    count = (2 * levels + 1) ** (k * r)
    if count > max_candidates:
        raise InputError(f"the exhaustive grid has (2 levels + 1)^(k r) = {count} candidates (> max_candidates="
                         f"{max_candidates}); the paper's grid is infeasible beyond toy sizes (Algorithm 8). Use "
                         "candidates='noisy' or pass explicit candidates.")
    mags = (1.0 / sigma_min) * ratio ** (-np.arange(levels, dtype=float))
    values = np.concatenate([[0.0], mags, -mags])
    for entries in itertools.product(values, repeat=k * r):
        yield np.array(entries).reshape(k, r)


def _fit_candidate(M, SA, X, Y, act, eta, gen):
    Z = SA @ M.T                               # (n, k): (M S A)^T
    if eta > 0:
        Z = Z + eta * gen.standard_normal(Z.shape)
    labels = np.where(Z > 0, 1.0, -1.0)
    V = pv_halfspace(X, labels)                # (k, d)
    H = act(X @ V.T)
    Ut, *_ = scipy.linalg.lstsq(H, Y, check_finite=False)
    return V, Ut.T, float(np.linalg.norm(Y - H @ Ut))


def algorithm8(X: Any, Y: Any, n_hidden: int, *, candidates: "str | Iterable" = "noisy", sketch: Any = "auto",
               n_perturb: int = 20, perturb_scale: float = 0.1, smoothing: bool = True, n_guesses: int = 5,
               activation: Any = "relu", grid_options: dict | None = None, rng: Any = None) -> ExactResult:
    """Algorithm 8, Neural Net LRA with Gaussian input and arbitrary noise independent of X.

    Parameters
    ----------
    X : array (n, d)
        Gaussian inputs.
    Y : array (n,) or (n, m)
        ``f(X V*^T) U*^T + E`` with ``E`` independent of ``X``.
    n_hidden : int
        ``k``.
    candidates : {"noisy", "grid"} or iterable of (k, r) arrays
        Candidate generator for ``M ≈ (S U*)^{-1}`` (module docstring). "noisy": ``(S Û)^†`` from
        :func:`.noisy.noisy_pipeline` and ``n_perturb`` multiplicative perturbations of relative size
        ``perturb_scale``; "grid": :func:`grid_candidates` with ``grid_options``.
    sketch : "auto", "identity", "gaussian" or array (r, m)
        ``S``; "auto" is the identity when ``m <= 100 k`` (a sketch only pays when there are many more outputs than units), else Gaussian.
    smoothing : bool, default True
        Add the Gaussian ``G`` (step 3a) with ``η = 2^j ||M S A||_F / √n`` for ``n_guesses`` values of j
        (plus the unsmoothed labels); without it only unsmoothed labels are used.
    activation : str or Activation, default "relu"
    rng : int, Generator or None

    Returns
    -------
    ExactResult
        Not certified (approximate). ``diagnostics``: ``residual`` ``||A - U f(VX)||_F / ||A||_F``,
        ``n_candidates``, ``best_candidate``, ``best_eta``, ``residuals`` (per candidate, best eta).

    Notes
    -----
    **The paper's exhaustive grid of step 2 is infeasible beyond toy sizes.** It has
    ``ν = (c' k^8 ε^{-8} κ^8)^{k r}`` matrices with ``r = c_1 k / δ^2`` sketch rows, i.e.
    ``2^{O(k^2 log(kκ/ε))}`` (already astronomical for k = 1), times ``O(log^2(nκ))`` guesses of
    ``(κ, σ_min)``, ``O(log(nκ))`` guesses of ``||M S E||_F`` and ``O(n)`` repetitions of ``S``. Here
    ``candidates="grid"`` enumerates a coarse signed grid and refuses more than ``max_candidates``
    matrices (toy sizes: k r of 1 or 2); the default ``candidates="noisy"`` replaces the enumeration by
    ``(S Û)^†`` from the noisy pipeline and its perturbations, and explicit candidates (e.g. an oracle
    ``(S U*)^† + Λ``) can be passed. Selection by residual (step 4) is the paper's.
    """
    t0 = time.perf_counter()
    gen = check_random_state(rng)
    act = check_rectified(activation, what="Algorithm 8")
    X, Y = check_samples(X, Y)
    n, d = X.shape
    m = Y.shape[1]
    k = check_positive_int(n_hidden, "n_hidden")
    n_perturb = check_positive_int(n_perturb, "n_perturb", minimum=0)
    perturb_scale = check_tol(perturb_scale, "perturb_scale", allow_zero=True)
    n_guesses = check_positive_int(n_guesses, "n_guesses", minimum=0)
    smoothing = check_flag(smoothing, "smoothing")
    if isinstance(sketch, str):
        if sketch not in ("auto", "identity", "gaussian"):
            raise InputError(f"sketch must be 'auto', 'identity', 'gaussian' or an array, got {sketch!r}.")
        S = np.eye(m) if (sketch == "identity" or (sketch == "auto" and m <= 100 * k)) else \
            gaussian_sketch(m, k, rows=10 * k, rng=gen)
    else:
        S = np.asarray(sketch, dtype=np.float64)
        if S.ndim != 2 or S.shape[1] != m or not np.all(np.isfinite(S)):
            raise InputError(f"sketch must be a finite array of shape (r, m) = (r, {m}), got {S.shape}.")
    SA = Y @ S.T                               # (n, r)
    r = S.shape[0]
    if isinstance(candidates, str):
        if candidates == "noisy":
            est = noisy_pipeline(X, Y, k, activation=act, rng=gen)
            M0 = np.linalg.pinv(S @ est.output_weights)
            cand_list = [M0] + [M0 * (1 + perturb_scale * gen.standard_normal(M0.shape)) for _ in range(n_perturb)]
        elif candidates == "grid":
            cand_list = grid_candidates(k, r, **(grid_options or {}))
        else:
            raise InputError(f"candidates must be 'noisy', 'grid' or an iterable of matrices, got {candidates!r}.")
    else:
        cand_list = candidates
    best = None
    residuals = []
    count = 0
    for idx, M in enumerate(cand_list):
        M = np.asarray(M, dtype=np.float64)
        if M.shape != (k, r) or not np.all(np.isfinite(M)):
            raise InputError(f"candidate {idx} must be a finite (k, r) = {(k, r)} matrix, got shape {M.shape}.")
        count += 1
        base = float(np.linalg.norm(SA @ M.T)) / np.sqrt(n)
        etas = [0.0] + ([base * 2.0 ** (-j) for j in range(n_guesses)] if smoothing else [])
        cand_best = None
        for eta in etas:
            V, U, rss = _fit_candidate(M, SA, X, Y, act, eta, gen)
            if cand_best is None or rss < cand_best[2]:
                cand_best = (V, U, rss, eta)
        residuals.append(cand_best[2])
        if best is None or cand_best[2] < best[2]:
            best = (*cand_best, idx)
    if best is None:
        raise InputError("no candidate matrix was given.")
    V, U, rss, eta, idx = best
    normY = float(np.linalg.norm(Y))
    diagnostics = {"residual": rss / normY if normY > 0 else 0.0, "n_candidates": count, "best_candidate": idx,
                   "best_eta": eta, "residuals": np.array(residuals) / max(normY, np.finfo(float).tiny),
                   "sketch_rows": r, "certified": False, "failure_reasons": [], "time": time.perf_counter() - t0}
    return ExactResult(V, U, act, False, diagnostics)

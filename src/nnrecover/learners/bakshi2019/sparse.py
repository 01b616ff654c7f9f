"""Sparse noise (Section 8, Theorem 14, Corollary 8): robust PCA, then the exact Gaussian pipeline.

Model: ``A = U* f(V* X) + E`` with ``E`` supported on a random fraction of the entries (arbitrary
values). ``M = U* f(V* X)`` has rank k and, for ``U*`` with orthonormal μ-incoherent columns, is
μ̄-incoherent (Lemma 24), so Principal Component Pursuit

    min ||M||_* + λ ||E||_1   subject to   M + E = A

recovers ``M`` and ``E`` exactly (Candès-Li-Ma-Wright 2011, Theorem 14). The paper's display omits the
weight; PCP needs ``λ = 1/√max(m, n)`` (see the errata page). Corollary 8 then runs the noiseless algorithm on
``M``.

Solver (not specified by the paper): the inexact augmented Lagrangian method (ADMM; Lin, Chen, Ma 2010):
``M ← SVT_{1/μ}(A - E + Λ/μ)``, ``E ← shrink_{λ/μ}(A - M + Λ/μ)``, ``Λ ← Λ + μ (A - M - E)``,
``μ ← ρ μ``,
stopped at ``||A - M - E||_F / ||A||_F < tol``. Its precision is that of the solver (about 1e-9), not
exact; the exact pipeline's certificates (null ratios at 1e-10) need better. Polish (beyond the paper):
entries with ``|Ê|`` at the solver's noise level are clean, so ``A`` equals ``M`` there
exactly; the rank-k ``M`` is re-fitted on the clean entries by alternating least squares (batched
normal equations), the clean set is re-estimated from the refit's residuals, and this repeats until
the residual on the clean entries is at round-off. The exact pipeline then certifies the result.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

import numpy as np
import scipy.linalg

from ..._validation import as_2d_float, check_positive_int
from ...errors import AssumptionError, ConvergenceError, InputError
from ._common import (
    ExactResult,
    check_flag,
    check_samples,
    check_tol,
    relative_residual,
    width_refusal,
)
from .pipeline import _TOLERANCES, gaussian_pipeline

__all__ = ["principal_component_pursuit", "polish_low_rank", "incoherence", "sparse_noise_pipeline"]


def _svt(Z: np.ndarray, tau: float) -> tuple[np.ndarray, int]:
    U, s, Vt = scipy.linalg.svd(Z, full_matrices=False, check_finite=False)
    keep = s > tau
    r = int(keep.sum())
    return (U[:, :r] * (s[:r] - tau)) @ Vt[:r], r


def principal_component_pursuit(A: Any, *, lam: float | None = None, tol: float = 1e-9, max_iter: int = 1000,
                                rho: float = 1.5) -> tuple[np.ndarray, np.ndarray, dict]:
    """Principal Component Pursuit ``min ||M||_* + λ ||E||_1`` subject to ``M + E = A`` by inexact ALM / ADMM.

    Parameters
    ----------
    A : array (n, m)
    lam : float, optional
        ``λ``; default ``1 / sqrt(max(n, m))`` (Candès et al. 2011).
    tol : float, default 1e-9
        Stop when ``||A - M - E||_F / ||A||_F < tol``.
    max_iter : int, default 1000
    rho : float, default 1.5
        Growth factor of the penalty ``μ``.

    Returns
    -------
    M, E : ndarrays (n, m)
    info : dict
        ``n_iter``, ``rank`` (of the last SVT), ``residual``, ``converged``, ``lam``.
    """
    A = as_2d_float(A, "A")
    n, m = A.shape
    lam = 1.0 / np.sqrt(max(n, m)) if lam is None else check_tol(lam, "lam")
    tol = check_tol(tol, "tol")
    rho = check_tol(rho, "rho")
    if rho <= 1:
        raise InputError(f"rho (growth factor of the penalty μ) must be > 1, got {rho!r}.")
    check_positive_int(max_iter, "max_iter")
    normA = float(np.linalg.norm(A))
    if normA == 0:
        return np.zeros_like(A), np.zeros_like(A), {"n_iter": 0, "rank": 0, "residual": 0.0, "converged": True,
                                                    "lam": lam}
    two = float(scipy.linalg.norm(A, 2))
    Lam = A / max(two, np.max(np.abs(A)) / lam)
    mu, mu_max = 1.25 / two, 1.25 / two * 1e10
    E = np.zeros_like(A)
    M = np.zeros_like(A)
    res, it, r = np.inf, 0, 0
    for it in range(1, max_iter + 1):
        M, r = _svt(A - E + Lam / mu, 1.0 / mu)
        T = A - M + Lam / mu
        E = np.sign(T) * np.maximum(np.abs(T) - lam / mu, 0.0)
        Z = A - M - E
        Lam += mu * Z
        mu = min(mu * rho, mu_max)
        res = float(np.linalg.norm(Z)) / normA
        if res < tol:
            break
    return M, E, {"n_iter": it, "rank": r, "residual": res, "converged": bool(res < tol), "lam": lam}


def polish_low_rank(A: Any, M0: Any, rank: int, *, clean_tol: float = 1e-7, tol: float = 1e-13,
                    max_iter: int = 500) -> tuple[np.ndarray, np.ndarray, dict]:
    """Re-fit a rank-``rank`` ``M`` on the entries where ``A`` is clean (``|A - M|`` small), by masked ALS.

    Starts from the factors of ``M0``'s truncated SVD; each sweep solves, for every row and every column,
    the least-squares problem on its clean entries (batched k x k normal equations); every 10 sweeps the
    clean set is re-estimated as ``|A - M| <= clean_tol * rms(M)``.

    Returns
    -------
    M : ndarray (n, m)
    clean : bool ndarray (n, m)
    info : dict
        ``n_iter``, ``clean_residual`` (relative, on the clean entries), ``n_corrupted``.
    """
    A = as_2d_float(A, "A")
    M0 = as_2d_float(M0, "M0", n_features=A.shape[1])
    if M0.shape != A.shape:
        raise InputError(f"M0 must have the shape of A {A.shape}, got {M0.shape}.")
    k = check_positive_int(rank, "rank")
    if k > min(A.shape):
        raise InputError(f"rank={k} exceeds min(A.shape) = {min(A.shape)}.")
    clean_tol, tol = check_tol(clean_tol, "clean_tol"), check_tol(tol, "tol")
    max_iter = check_positive_int(max_iter, "max_iter")
    U, s, Vt = scipy.linalg.svd(M0, full_matrices=False, check_finite=False)
    H = U[:, :k] * s[:k]
    W = Vt[:k].T
    M = H @ W.T
    scale = float(np.sqrt(np.mean(M * M))) or 1.0
    clean = np.abs(A - M) <= clean_tol * scale
    res, it = np.inf, 0
    for it in range(1, max_iter + 1):
        short = min(int(clean.sum(axis=1).min()), int(clean.sum(axis=0).min()))
        if short < k:
            raise ConvergenceError(
                f"the clean set left by robust PCA has a row or column with only {short} < rank = {k} clean "
                "entries, so the low-rank refit is undetermined: the principal component pursuit did not "
                "separate a rank-k part (check lam = 1/sqrt(max(n, m)), Theorem 14 / Candès et al. 2011, and that "
                "the corruptions are sparse and U* incoherent).")
        Cf = clean.astype(float)
        G = np.einsum("ij,jk,jl->ikl", Cf, W, W)                 # per row i: W^T diag(c_i) W
        H = np.linalg.solve(G, np.einsum("ij,jk->ik", Cf * A, W)[..., None])[..., 0]
        G = np.einsum("ij,ik,il->jkl", Cf, H, H)
        W = np.linalg.solve(G, np.einsum("ij,ik->jk", Cf * A, H)[..., None])[..., 0]
        M = H @ W.T
        R = np.where(clean, A - M, 0.0)
        res = float(np.linalg.norm(R) / max(np.linalg.norm(np.where(clean, A, 0.0)), np.finfo(float).tiny))
        if it % 10 == 0:
            scale = float(np.sqrt(np.mean(M * M))) or 1.0
            new = np.abs(A - M) <= max(clean_tol * min(1.0, 1e3 * res), 1e-12) * scale
            if np.array_equal(new, clean) and res < tol:
                break
            clean = new
    return M, clean, {"n_iter": it, "clean_residual": res, "n_corrupted": int((~clean).sum())}


def incoherence(M: Any, rank: int) -> dict:
    """Incoherence parameters of a rank-``rank`` matrix ``M = P Σ Q`` (Definition 13; Remark 8).

    Returns ``mu_left = (m/k) max_i ||P^T e_i||^2``, ``mu_right = (n/k) max_j ||Q e_j||^2`` and
    ``mu_joint = (n m / k) ||P Q||_∞^2`` (for ``M`` of shape (m, n) in the paper's layout; here rows of
    ``M`` index the first factor). ``M`` is μ-incoherent for ``μ >= max`` of the three.
    """
    M = as_2d_float(M, "M")
    k = check_positive_int(rank, "rank")
    a, b = M.shape
    if k > min(a, b):
        raise InputError(f"rank={k} exceeds min(M.shape) = {min(a, b)}.")
    P, _, Qt = scipy.linalg.svd(M, full_matrices=False, check_finite=False)
    P, Qt = P[:, :k], Qt[:k]
    left = float(np.max(np.sum(P * P, axis=1)) * a / k)
    right = float(np.max(np.sum(Qt * Qt, axis=0)) * b / k)
    joint = float(np.max(np.abs(P @ Qt)) ** 2 * a * b / k)
    return {"mu_left": left, "mu_right": right, "mu_joint": joint, "mu": max(left, right, joint)}


def _pipeline_options() -> set:


    params = inspect.signature(gaussian_pipeline).parameters
    return ({p for p, v in params.items() if v.kind is inspect.Parameter.KEYWORD_ONLY} - {"strict", "rng"}) \
        | set(_TOLERANCES)


def sparse_noise_pipeline(X: Any, Y: Any, n_hidden: int, *, lam: float | None = None, pcp_tol: float = 1e-9,
                          polish: bool = True, strict: bool = False, rng: Any = None, **options) -> ExactResult:
    """Corollary 8: exact ``U*``, ``V*`` from Gaussian samples with sparse gross corruptions.

    Parameters
    ----------
    X : array (n, d)
        Gaussian inputs.
    Y : array (n, m)
        ``f(X V*^T) U*^T + E``, ``E`` sparse (a constant fraction of entries, arbitrary values); ``U*``
        with (near) orthonormal incoherent columns, ``k << m``.
    n_hidden : int
    lam, pcp_tol : see :func:`principal_component_pursuit`
    polish : bool, default True
        Masked ALS refit on the clean entries (module docstring); without it the pipeline usually cannot
        certify, because PCP is accurate only to its tolerance.
    strict : bool
    rng : int, Generator or None
    **options
        Passed to :func:`.pipeline.gaussian_pipeline` (``activation``, ``n_refine``, ...).

    Returns
    -------
    ExactResult
        With ``diagnostics['pcp']`` (solver info), ``['polish']``, ``n_corrupted_detected``,
        ``corrupted_fraction``.

    Raises
    ------
    AssumptionError
        ``k > min(m, d)``, or a failed assumption of the exact pipeline.
    ConvergenceError
        The polish finds too few clean entries (PCP did not separate a rank-k part, e.g. with an unweighted
        ℓ1 term), or ``strict=True`` and the certificates fail.
    """
    t0 = time.perf_counter()
    X, Y = check_samples(X, Y)
    k = check_positive_int(n_hidden, "n_hidden")
    why = width_refusal(k, X.shape[1], Y.shape[1], what="Corollary 8 (sparse noise)")
    if why:
        raise AssumptionError(why)
    check_flag(polish, "polish")
    allowed = _pipeline_options()
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise InputError(f"sparse_noise_pipeline got unknown option(s) {', '.join(unknown)}; options are passed to "
                         f"gaussian_pipeline: {', '.join(sorted(allowed))}.")
    M, E, pinfo = principal_component_pursuit(Y, lam=lam, tol=pcp_tol)
    diag: dict = {"pcp": pinfo}
    if polish:
        M, clean, linfo = polish_low_rank(Y, M, k)
        diag["polish"] = linfo
        corrupted = ~clean
    else:
        corrupted = np.abs(E) > 1e-7 * float(np.sqrt(np.mean(M * M)))
    res = gaussian_pipeline(X, M, k, strict=False, rng=rng, **options)
    res.diagnostics.update(diag)
    res.diagnostics["n_corrupted_detected"] = int(corrupted.sum())
    res.diagnostics["corrupted_fraction"] = float(corrupted.mean())
    if res.certified:
        fit = res.network.predict(X).reshape(Y.shape)
        res.diagnostics["clean_residual_on_A"] = relative_residual(Y[~corrupted], fit[~corrupted])
    res.diagnostics["time_total"] = time.perf_counter() - t0
    res.diagnostics["route"] = "PCP -> " + res.diagnostics.get("route", "Gaussian pipeline")
    if strict and not res.certified:
        raise ConvergenceError("the sparse-noise pipeline (PCP + exact pipeline) could not certify its answer: "
                               + "; ".join(res.diagnostics.get("failure_reasons", [])))
    return res

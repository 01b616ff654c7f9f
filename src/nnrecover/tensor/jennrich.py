"""Jennrich's simultaneous-diagonalisation algorithm for order-3 tensors, with diagnostics.

Model. ``T = sum_{i<r} w_i a_i ⊗ b_i ⊗ c_i`` in ``R^{n x n2 x p}`` with ``A = [a_i]`` and ``B = [b_i]``
of full column rank ``r`` and no two ``c_i`` parallel. Every mode-3 slice is then
``T(., ., g) = A diag(w_i <c_i, g>) B^T`` (Harshman 1970, credited to R. Jennrich; Leurgans, Ross and
Abel 1993; Bhaskara, Charikar, Moitra and Vijayaraghavan 2014, Thm 2.3 = Awasthi et al. 2021 Thm A.5).

Symbols of Jennrich's algorithm as Awasthi-Tang-Vijayaraghavan 2021 use it (Claim 4.4, Theorem A.5) and our names:

==========================  =======================================================================
paper / spec                here
==========================  =======================================================================
``T`` (n x n x p)           ``tensor`` (dense) or ``slice_fn(g) = T(., ., g)`` (implicit)
``k``                       ``rank``
``P`` (step 1, subspace)    ``P`` (mode 1) and ``Q`` (mode 2): top-``rank`` singular vectors of the
                            mode-1/2 unfolding (dense) or of the stacked random slices (implicit)
``g, g'`` (step 2)          one *draw*: two random unit vectors; ``n_draws`` draws
``A = P^T T(.,.,g) P``      ``Ta`` / ``Tb`` (projected, Frobenius-normalised)
``A B^{-1} = R Λ R^{-1}``   step 3: ``eig(solve(Tb^T, Ta^T)^T)``
``x_i = P r_i / ||P r_i||`` ``factors[:, i]`` (step 4)
``β_i z_i``                 ``weights[i] * factors_mode3[:, i]``, by least squares on ``T(x_i, y_i, .)``
                            (more robust than the pinv contraction of step 5(b), see below)
==========================  =======================================================================

Implementation notes (choices beyond the paper):

* Draw selection (the random slice pair of Theorem A.5, drawn several times). For each draw we compute the
  first-order error amplification of the pencil: if the normalised slices carry a perturbation of
  relative size ``ε``, the eigenvector error is about
  ``amplification * ε = κ(R) ||Tb^{-1}|| (1 + ||Ta Tb^{-1}||) / min_{i≠j}|λ_i - λ_j| * ε``
  (Bauer-Fike-type bound for a diagonalisable matrix ``M = R Λ R^{-1}`` perturbed by
  ``δM = (δTa - M δTb) Tb^{-1}``). Draws with imaginary eigenvalue parts above ``imag_tol`` are
  discarded unless every draw has them; among the rest the smallest amplification is kept.
* Mode 3 is recovered by the least-squares solution ``C = T_(3) (B ⊙ A) [(A^T A) * (B^T B)]^{-1}``
  given the recovered ``A``, ``B``. With exact input it equals the contraction ``T(x_i^*, x_i^*, .)`` of
  Theorem A.5 (``x_i^*`` the rows of ``pinv(X)``); with noise it is the least-squares-optimal estimate.
* Certificate: a held-out random slice ``S`` must be diagonalised by the recovered factors. We report
  ``holdout_residual = ||S - A diag(d) B^T||_F / ||S||_F`` with ``d`` the diagonal of
  ``A^+ S B^{+T}``; it is round-off small for exact input and measures the misfit under noise.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Literal

import numpy as np
import scipy.linalg

from .._validation import check_positive_int, check_random_state
from ..errors import AssumptionError, CertificateWarning, InputError
from ._slices import Mode3Fn, SliceOperator
from .result import DecompositionResult
from .utils import normalize_columns

__all__ = ["jennrich", "JennrichResult"]

_EPS = np.finfo(np.float64).eps
# dense tensors whose mode-1/2 SVD costs fewer flops than this use the exact unfolding for the subspace
_UNFOLDING_FLOPS = 1e9


class JennrichResult(DecompositionResult):
    """Result of :func:`jennrich`: a :class:`~nnrecover.tensor.DecompositionResult`.

    Attributes
    ----------
    factors : list of ndarray
        ``[A, B]`` or ``[A, B, C]``: the mode-1 factors ``a_i`` (``(n, rank)``), mode-2 factors ``b_i``
        (equal to ``A`` in the symmetric case) and, when the third mode was contracted, the mode-3
        factors ``c_i`` (``(p, rank)``); unit columns, each flipped so that its largest-magnitude entry
        is positive.
    weights : ndarray, shape ``(rank,)`` or None
        Signed weights ``w_i`` so that ``T = sum_i w_i a_i ⊗ b_i ⊗ c_i``; None without the third mode.
        With weights, components are sorted by decreasing ``|w_i|``.
    converged, n_iter, message
        A direct method: ``converged`` is True, ``n_iter`` 0; ``message`` names the kept draw.
    diagnostics : dict
        ``eigenvalues`` (real parts of ``<c_i, g> / <c_i, g'>`` of the kept draw, in component order),
        ``eigenvalue_gap`` (min relative gap ``min_{i≠j}|λ_i-λ_j| / max|λ|``), ``max_imag``
        (largest ``|Im λ| / max|λ|``), ``condition`` (of the unit-column eigenvector matrix),
        ``slice_condition`` (of the inverted projected slice), ``error_amplification`` (selection score,
        see module notes), ``draw`` (index kept), ``n_draws``, ``per_draw`` (list of the same per draw),
        ``subspace_singular_values`` (top ``rank + 1``), ``rank_ratio`` (``s_rank / s_1``),
        ``tail_ratio`` (``s_{rank+1} / s_rank``, nan if not available), ``subspace_method``,
        ``symmetric``, ``holdout_residual`` (certificate), ``residual`` (dense tensor with mode 3:
        ``||T - T_hat||_F / ||T||_F``), ``n_slice_calls`` (implicit tensor).
    """

    @property
    def factors_mode2(self) -> np.ndarray:
        """``B``, the mode-2 factors."""
        return self.factors[1]

    @property
    def factors_mode3(self) -> np.ndarray | None:
        """``C``, the mode-3 factors, or None when mode 3 was not contracted."""
        return self.factors[2] if len(self.factors) > 2 else None

    @property
    def eigenvalues(self) -> np.ndarray:
        """Real parts of the eigenvalues of the kept draw's slice pencil."""
        return self.diagnostics["eigenvalues"]


def _refuse_or_warn(msg: str, strict: bool, warn: bool) -> None:
    """An assumption Jennrich's algorithm needs looks violated: raise with ``strict``, else warn if asked."""
    if strict:
        raise AssumptionError(msg)
    if warn:
        warnings.warn(msg, CertificateWarning, stacklevel=3)


def _top_left(M: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``r`` left singular vectors and all singular values of ``M`` (LAPACK gesdd)."""
    try:
        U, s, _ = scipy.linalg.svd(M, full_matrices=False, check_finite=False)
    except np.linalg.LinAlgError:  # pragma: no cover - gesdd rarely fails; gesvd is the robust fallback
        U, s, _ = scipy.linalg.svd(M, full_matrices=False, check_finite=False, lapack_driver="gesvd")
    return U[:, :r], s


def _pairwise_min_gap(x: np.ndarray) -> float:
    if x.size < 2:
        return np.inf
    xs = np.sort(x)
    return float(np.min(np.diff(xs)))


def _analyse_pencil(Ta: np.ndarray, Tb: np.ndarray) -> dict[str, Any] | None:
    """Eigen-decompose ``Ta Tb^{-1}`` for one draw; None when ``Tb`` is numerically singular."""
    r = Ta.shape[0]
    sb = np.linalg.svd(Tb, compute_uv=False)
    if sb[-1] <= 10 * r * _EPS * sb[0]:
        return None
    M = np.linalg.solve(Tb.T, Ta.T).T  # Ta Tb^{-1} = R Λ R^{-1}   (Theorem A.5: eigenvectors of the slice pencil)
    lam, R = scipy.linalg.eig(M)
    # LAPACK (geev) returns real eigenvectors for real eigenvalues and complex-conjugate pairs
    # consecutively (positive imaginary part first). A pair (v, conj v) is replaced by (Re v, Im v),
    # which spans the same real invariant subspace, so the real eigenvector matrix stays invertible.
    Rr = R.real.copy()
    i = 0
    while i < r:
        if lam[i].imag > 0 and i + 1 < r:
            Rr[:, i + 1] = R[:, i].imag
            i += 2
        else:
            i += 1
    Rr = Rr / np.linalg.norm(Rr, axis=0)
    scale = float(np.max(np.abs(lam)))
    scale = scale if scale > 0 else 1.0
    lam_r = lam.real
    gap_abs = _pairwise_min_gap(lam_r)
    cond_R = float(np.linalg.cond(Rr))
    norm_M = float(np.linalg.norm(M, 2))
    amplification = (cond_R * (1.0 + norm_M) / (sb[-1] * gap_abs)) if gap_abs > 0 else np.inf
    return {
        "R": Rr,
        "eigenvalues": lam_r,
        "eigenvalue_gap": float(gap_abs / scale) if np.isfinite(gap_abs) else np.inf,
        "max_imag": float(np.max(np.abs(lam.imag)) / scale),
        "condition": cond_R,
        "slice_condition": float(sb[0] / sb[-1]),
        "error_amplification": float(amplification),
    }


def jennrich(
    tensor: np.ndarray | Callable[[np.ndarray], np.ndarray],
    rank: int,
    *,
    third_dim: int | None = None,
    n_draws: int = 5,
    rng: Any = None,
    symmetric: bool | None = None,
    subspace: Literal["auto", "unfolding", "slices"] = "auto",
    mode3: bool | None = None,
    mode3_fn: Mode3Fn | None = None,
    imag_tol: float = 1e-8,
    gap_tol: float = 1e-8,
    rank_tol: float = 1e-10,
    strict: bool = False,
    warn: bool = True,
) -> JennrichResult:
    """Decompose a rank-``rank`` order-3 tensor by Jennrich's algorithm (best of several random draws).

    Jennrich's algorithm as in Awasthi-Tang-Vijayaraghavan 2021 (Claim 4.4 / Theorem A.5); also the
    SimDiag step of Ge-Kuditipudi-Li-Wang 2019 (Algorithm 2) and Option A of the tensor step of
    Bakshi-Jayaram-Woodruff 2019 (Algorithm 4).

    Parameters
    ----------
    tensor : ndarray of shape ``(n, n2, p)`` or callable
        Dense tensor, or an implicit one given by ``slice_fn(g) -> T(., ., g)`` (an ``(n, n2)``
        matrix for a ``(p,)`` vector ``g``), e.g. contracted from samples. The main use is the
        symmetric-in-modes-1,2 case (``n == n2``, symmetric slices); the general case also works.
    rank : int
        Number of components ``r``; ``1 <= r <= min(n, n2)``.
    third_dim : int, optional
        ``p``; required when ``tensor`` is callable.
    n_draws : int, default 5
        Number of random slice pairs ``(g, g')``; the draw with the smallest error amplification
        (see module notes) is kept. A callable is evaluated ``2 * n_draws + 1`` times (plus ``p``
        times for ``mode3=True`` without ``mode3_fn``).
    rng : None, int or numpy.random.Generator
        Randomness for the slice directions.
    symmetric : bool, optional
        Treat modes 1 and 2 as symmetric (slices symmetrised, ``factors[1] = factors[0]``).
        Default: detected (``n == n2`` and relative asymmetry ``<= 1e-10``).
    subspace : {"auto", "unfolding", "slices"}, default "auto"
        How the rank-``r`` column spans are found: SVD of the mode-1/2 unfoldings (dense only; best
        under noise) or of the ``2 * n_draws`` stacked random slices (a randomised range finder;
        the only option for a callable). "auto" uses the unfolding for dense tensors when its SVD
        costs fewer than 1e9 flops.
    mode3 : bool, optional
        Recover ``factors_mode3`` and ``weights``. Default: True for a dense tensor or when
        ``mode3_fn`` is given, False for a bare callable (it would cost ``p`` slice calls).
    mode3_fn : callable, optional
        ``mode3_fn(U, V) -> (p, r)`` array whose column ``i`` is ``T(U[:, i], V[:, i], .)``; lets an
        implicit tensor provide mode 3 cheaply.
    imag_tol : float, default 1e-8
        Draws whose eigenvalues have ``max |Im λ| / max |λ|`` above this are treated as complex.
    gap_tol : float, default 1e-8
        A kept draw with relative eigenvalue gap below this is reported as degenerate
        (:class:`~nnrecover.errors.CertificateWarning`, or AssumptionError with ``strict``).
    rank_tol : float, default 1e-10
        If ``s_rank / s_1`` of the subspace SVD is below this, ``rank`` exceeds the numerical rank of
        the tensor and :class:`~nnrecover.errors.AssumptionError` is raised.
    strict : bool, default False
        Raise :class:`~nnrecover.errors.AssumptionError` instead of warning on degenerate gaps or
        complex eigenvalues.
    warn : bool, default True
        Warn (:class:`~nnrecover.errors.CertificateWarning`) on degenerate gaps or complex eigenvalues.
        Both are always recorded in ``diagnostics`` (``complex_eigenvalues``, ``degenerate_gap``); a
        caller that certifies its own final output (an initialisation followed by ALS, an exact step
        with its own certificates) passes False, since these are diagnostics of this stage, not
        failures of the caller's answer.

    Returns
    -------
    JennrichResult

    Raises
    ------
    InputError
        Bad shapes, NaN/inf, ``rank > min(n, n2)``, missing ``third_dim``.
    AssumptionError
        ``rank`` exceeds the numerical rank, every draw gives a singular projected slice, or
        (``strict``) the eigenvalues are complex or not separated.

    Notes
    -----
    Exactness: on an exact rank-``r`` tensor satisfying the assumptions, the factors are recovered
    to round-off (error ``O(eps * error_amplification)``). A ``rank`` larger than the true rank is
    detected by ``rank_tol`` (exact input); with noisy input it shows as ``rank_ratio`` near the
    noise level, ``tail_ratio`` near 1 and a large ``holdout_residual``.

    Examples
    --------
    >>> import numpy as np
    >>> from nnrecover.tensor import jennrich
    >>> A = np.linalg.qr(np.random.default_rng(0).standard_normal((6, 3)))[0]
    >>> T = np.einsum("ai,bi,ci->abc", A, A, A)
    >>> res = jennrich(T, 3, rng=0)
    >>> bool(np.allclose(np.sort(np.abs(res.factors[0].T @ A).max(0)), 1.0))
    True
    """
    op = SliceOperator(tensor, third_dim, mode3_fn)
    rank = check_positive_int(rank, "rank")
    n_draws = check_positive_int(n_draws, "n_draws")
    if subspace not in ("auto", "unfolding", "slices"):
        raise InputError(f"subspace must be 'auto', 'unfolding' or 'slices', got {subspace!r}.")
    if subspace == "unfolding" and not op.is_dense:
        raise InputError("subspace='unfolding' needs a dense tensor; use 'slices' for a callable.")
    for name, val in (("imag_tol", imag_tol), ("gap_tol", gap_tol), ("rank_tol", rank_tol)):
        if not (np.isfinite(val) and val >= 0):
            raise InputError(f"{name} must be a finite number >= 0, got {val!r}.")
    for name, val in (("strict", strict), ("warn", warn)):
        if not isinstance(val, (bool, np.bool_)):
            raise InputError(f"{name} must be True or False, got {val!r}.")
    if op.is_dense and op.n is not None and rank > min(op.n, op.n2):
        raise InputError(f"rank={rank} exceeds min(n, n2) = {min(op.n, op.n2)} for a tensor of shape "
                         f"{(op.n, op.n2, op.p)}; Jennrich needs full-column-rank mode-1/2 factors.")
    if rank > 1 and op.p < 2:
        raise AssumptionError("with p = 1 every slice is the same matrix, so Jennrich cannot separate "
                              f"{rank} components (needs non-parallel mode-3 factors, Theorem A.5 of Awasthi et al.).")
    rng = check_random_state(rng)

    # step 2 directions: 2 per draw + 1 held-out slice for the certificate
    G = rng.standard_normal((2 * n_draws + 1, op.p))
    G /= np.linalg.norm(G, axis=1, keepdims=True)
    slices = op.slices(G)
    n, n2, p = op.n, op.n2, op.p
    assert n is not None and n2 is not None
    if rank > min(n, n2):
        raise InputError(f"rank={rank} exceeds min(n, n2) = {min(n, n2)} for slices of shape {(n, n2)}; "
                         "Jennrich needs full-column-rank mode-1/2 factors.")
    holdout = slices[-1]
    slices = slices[:-1]

    # symmetry of modes 1 and 2
    if symmetric is None:
        if n != n2:
            symmetric = False
        else:
            if op.is_dense:
                T = op.dense
                asym = np.linalg.norm(T - T.transpose(1, 0, 2)) / max(np.linalg.norm(T), np.finfo(float).tiny)
            else:
                asym = max(np.linalg.norm(S - S.T) / max(np.linalg.norm(S), np.finfo(float).tiny)
                           for S in slices)
            symmetric = bool(asym <= 1e-10)
    elif symmetric and n != n2:
        raise InputError(f"symmetric=True needs n == n2, got slices of shape {(n, n2)}.")
    symmetric = bool(symmetric)
    if symmetric:
        slices = 0.5 * (slices + slices.transpose(0, 2, 1))
        holdout = 0.5 * (holdout + holdout.T)

    # step 1: rank-r column spans P (mode 1) and Q (mode 2)
    if subspace == "auto":
        use_unfolding = op.is_dense and n * n2 * p * min(max(n, n2), n2 * p) <= _UNFOLDING_FLOPS
        method = "unfolding" if use_unfolding else "slices"
    else:
        method = subspace
    if method == "unfolding":
        T = op.dense
        P, s = _top_left(T.reshape(n, n2 * p), rank)
        if symmetric:
            Q = P
        else:
            Q, s2 = _top_left(T.transpose(1, 0, 2).reshape(n2, n * p), rank)
    else:
        P, s = _top_left(np.concatenate(list(slices), axis=1), rank)
        if symmetric:
            Q = P
        else:
            Q, s2 = _top_left(np.concatenate([S.T for S in slices], axis=1), rank)
    if not symmetric:
        # the weaker of the two modes decides the rank diagnostics
        s = s if (s[rank - 1] / s[0]) <= (s2[rank - 1] / s2[0]) else s2
    if s[0] == 0:
        raise AssumptionError("the tensor is zero (all sampled slices vanish); nothing to decompose.")
    rank_ratio = float(s[rank - 1] / s[0])
    tail_ratio = float(s[rank] / s[rank - 1]) if s.size > rank and s[rank - 1] > 0 else float("nan")
    if rank_ratio <= rank_tol:
        raise AssumptionError(
            f"rank={rank} exceeds the numerical rank of the tensor: singular value s_{rank}/s_1 = "
            f"{rank_ratio:.3g} <= rank_tol={rank_tol:g} (Jennrich's algorithm needs full-column-rank factors). "
            "Choose rank from the singular values, e.g. the number above a noise threshold.")

    proj = np.matmul(np.matmul(P.T[None], slices), Q[None])  # (2 n_draws, r, r)
    hold_norm = np.linalg.norm(holdout)

    # steps 2-3 for every draw
    per_draw: list[dict[str, Any]] = []
    results: list[dict[str, Any] | None] = []
    for d in range(n_draws):
        Ta, Tb = proj[2 * d], proj[2 * d + 1]
        na, nb = np.linalg.norm(Ta), np.linalg.norm(Tb)
        res = None if (na == 0 or nb == 0) else _analyse_pencil(Ta / na, Tb / nb)
        if res is not None:
            res["Ta"], res["Tb"] = Ta / na, Tb / nb
        results.append(res)
        per_draw.append({k: res[k] for k in ("eigenvalue_gap", "max_imag", "condition", "slice_condition",
                                             "error_amplification")} if res is not None
                        else {"eigenvalue_gap": 0.0, "max_imag": float("nan"), "condition": float("inf"),
                              "slice_condition": float("inf"), "error_amplification": float("inf")})
    valid = [d for d, r_ in enumerate(results) if r_ is not None]
    if not valid:
        raise AssumptionError(
            f"all {n_draws} random slice pairs gave a singular projected slice: the tensor rank is below "
            f"rank={rank}, or the mode-1/2 factors are not linearly independent (Jennrich's algorithm needs them to be).")
    real = [d for d in valid if results[d]["max_imag"] <= imag_tol]
    pool = real if real else valid
    best = min(pool, key=lambda d: (results[d]["error_amplification"], d))
    chosen = results[best]
    assert chosen is not None
    if not real:
        msg = (f"every draw has complex eigenvalues (best max |Im λ|/|λ| = {chosen['max_imag']:.3g} > "
               f"imag_tol={imag_tol:g}); the input is far from a real rank-{rank} tensor or two "
               "components are nearly inseparable. Real parts are used.")
        _refuse_or_warn(msg, strict, warn)
    degenerate_gap = bool(real and chosen["eigenvalue_gap"] < gap_tol)
    if degenerate_gap:  # (with complex pairs the real-part gap is meaningless)
        msg = (f"relative eigenvalue gap {chosen['eigenvalue_gap']:.3g} < gap_tol={gap_tol:g} on the best of "
               f"{n_draws} draws: two components have (nearly) parallel mode-3 factors, so they are not "
               "identifiable by Jennrich's algorithm (Theorem A.5 of Awasthi et al.).")
        _refuse_or_warn(msg, strict, warn)

    # step 4: factors
    R = chosen["R"]
    X, _, _ = normalize_columns(P @ R)
    if symmetric:
        Y = X
    else:
        # rows of R^{-1} Ta and R^{-1} Tb are d_i * (Q^T b_i)^T; combine both with aligned signs
        rows = np.linalg.lstsq(R, np.concatenate([chosen["Ta"], chosen["Tb"]], axis=1), rcond=None)[0]
        rho, sig = rows[:, :rank], rows[:, rank:]
        align = np.sign(np.sum(rho * sig, axis=1))
        align[align == 0] = 1.0
        Y, _, _ = normalize_columns(Q @ (rho + align[:, None] * sig).T)
    eigenvalues = chosen["eigenvalues"]

    # mode 3 by least squares given A, B
    want_mode3 = mode3 if mode3 is not None else (op.is_dense or mode3_fn is not None)
    C = weights = None
    if want_mode3:
        mttkrp = op.contract12(X, Y)  # (p, r): T(a_i, b_i, .)
        gram = (X.T @ X) * (Y.T @ Y)
        Craw = np.linalg.lstsq(gram, mttkrp.T, rcond=None)[0].T
        C, norms, signs = normalize_columns(Craw)
        weights = norms * signs
        order = np.argsort(-np.abs(weights), kind="stable")
        X, Y, C, weights, eigenvalues = X[:, order], Y[:, order], C[:, order], weights[order], eigenvalues[order]

    # certificate on the held-out slice
    Xp, Yp = np.linalg.pinv(X), np.linalg.pinv(Y)
    dvec = np.einsum("ia,ab,ib->i", Xp, holdout, Yp)
    holdout_residual = (float(np.linalg.norm(holdout - (X * dvec) @ Y.T) / hold_norm) if hold_norm > 0
                        else 0.0)

    diagnostics: dict[str, Any] = {
        "eigenvalue_gap": chosen["eigenvalue_gap"],
        "max_imag": chosen["max_imag"],
        "complex_eigenvalues": not real,
        "degenerate_gap": degenerate_gap,
        "condition": chosen["condition"],
        "slice_condition": chosen["slice_condition"],
        "error_amplification": chosen["error_amplification"],
        "draw": int(best),
        "n_draws": n_draws,
        "n_valid_draws": len(valid),
        "per_draw": per_draw,
        "subspace_singular_values": s[: rank + 1].copy(),
        "rank_ratio": rank_ratio,
        "tail_ratio": tail_ratio,
        "subspace_method": method,
        "symmetric": symmetric,
        "holdout_residual": holdout_residual,
    }
    if op.is_dense and C is not None:
        T = op.dense
        recon = np.einsum("ai,bi,ci,i->abc", X, Y, C, weights)
        diagnostics["residual"] = float(np.linalg.norm(T - recon) / np.linalg.norm(T))
    if not op.is_dense:
        diagnostics["n_slice_calls"] = op.n_calls
    diagnostics["eigenvalues"] = eigenvalues
    return JennrichResult(factors=[X, Y] if C is None else [X, Y, C], weights=weights, converged=True, n_iter=0,
                          message=f"Jennrich: eigenvectors of a random slice pencil, draw {int(best)} of {n_draws} "
                                  "kept (smallest error amplification)",
                          diagnostics=diagnostics)

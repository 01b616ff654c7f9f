"""Algorithm pieces of Ge, Kuditipudi, Li, Wang 2019 (Sections 3 and 4, Appendix A).

Paper step -> function here:

=============================================================  ===========================================
Algorithm 1 (one ReLU unit: ``w = 2 E[xx^T]^{-1} E[y x]``)     :func:`algorithm1`, :func:`readout`
Eq. 11 detector ``f(u)`` evaluated directly on samples          :func:`detector_value`
Lemma 2 scalar purity score                                    :func:`purity_score`
BuildT (Alg. 2/3 steps 2-4; Eq. 10 linearisation of f)         :func:`build_detector_matrix`
NullSpan (Alg. 2/3 step 5)                                     :func:`null_span`
SimDiag (Alg. 2/3 steps 7-8: eigenvectors of ``X Y^{-1}``)     :func:`sim_diag`
SignFix (Alg. 2/3 step 9: ``E[z_i^T y] > 0``)                 :func:`sign_fix`
Algorithm 4 step 2 (top-k left singular vectors of E[yx^T])    :func:`output_projection`
Section 4 (a): CP-ALS on ``10 k`` random null-space slices     :func:`cp_slices`
Section 4 (b): gradient fit of ``W`` with ``A`` fixed          :func:`fit_hidden_given_output`
=============================================================  ===========================================
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._validation import (
    as_2d_float,
    as_targets,
    check_positive_int,
    check_random_state,
)
from ...errors import AssumptionError, InputError
from ...network import TwoLayerNetwork
from ...refine import fit_least_squares
from ...tensor import cp_als
from .moments import DetectorMoments, PartMoments
from .symmetric import mat_star, n_sym, pack_weights, unpack_rows

__all__ = ["algorithm1", "detector_value", "purity_score", "build_detector_matrix", "NullSpan", "null_span",
           "SimDiagResult", "sim_diag", "diagonalization_residual", "sign_fix", "readout", "output_projection",
           "CPSlicesResult", "cp_slices", "fit_hidden_given_output", "check_second_moment"]


# ------------------------------------------------------------------------------------------ helpers
def check_second_moment(Sigma: np.ndarray, what: str = "E[x x^T]") -> None:
    """Raise :class:`InputError` when the (empirical) second moment is singular or numerically so.

    Algorithm 1 and BuildT solve with ``E[x x^T]``; the paper assumes it is full rank (Theorems 4-7).
    """
    vals = np.linalg.eigvalsh((Sigma + Sigma.T) / 2)
    top = float(vals.max()) if vals.size else 0.0
    if top <= 0 or vals.min() <= 1e3 * np.finfo(float).eps * Sigma.shape[0] * top:
        raise InputError(
            f"{what} is singular (eigenvalues {vals.min():.3g} .. {top:.3g}): the inputs lie in a proper "
            "subspace or too few samples were given. Remove redundant input coordinates (e.g. project X on "
            "its principal subspace) or pass more samples.")


# ------------------------------------------------------------------------------------------ Algorithm 1
def algorithm1(X, y) -> np.ndarray:
    """Algorithm 1: learn one ReLU unit ``y = relu(w.x) + noise`` from a symmetric input, ``2 C^{-1} v``.

    Parameters
    ----------
    X : (n, d) array
        Inputs from a symmetric distribution.
    y : (n,) array
        Scalar targets.

    Returns
    -------
    w : (d,) array
        ``2 Sigma^{-1} E[y x]`` with ``Sigma = E[x x^T]`` (Lemma 1: ``E[y x] = Sigma w / 2``); exact when
        the empirical law of ``X`` is symmetric and ``y`` noiseless.
    """
    X = as_2d_float(X, "X", min_rows=2)
    y = as_targets(y, "y", n_rows=X.shape[0])
    if y.ndim != 1:
        raise InputError(f"algorithm1 learns one unit: y must have shape (n,), got {y.shape}.")
    Sigma = X.T @ X / X.shape[0]
    check_second_moment(Sigma)
    return 2.0 * np.linalg.solve(Sigma, X.T @ y / X.shape[0])


def readout(Z: np.ndarray, part: PartMoments, projection: np.ndarray | None = None) -> np.ndarray:
    """Alg. 2/3 step 11: Algorithm 1 on ``(x, z_i^T y)`` for every row ``z_i`` of ``Z``, from moments.

    Returns ``V`` with rows ``v_i = 2 Sigma^{-1} E[(z_i^T y) x]`` (``= lambda_i w_i`` in the population).
    """
    cross = part.cross if projection is None else projection.T @ part.cross
    check_second_moment(part.second)
    return 2.0 * np.linalg.solve(part.second, (Z @ cross).T).T


# ------------------------------------------------------------------------------------------ detector
def detector_value(X, Y, u, *, noise_correction: bool = True) -> np.ndarray:
    """The pure-neuron detector ``f(u)`` of Corollary 1 / Eq. 11, evaluated directly on samples.

    ``f(u) = 2 E[(u.y)(E[(u.y) x^T] Sigma^{-1} x)(x (x) x)] - E[(u.y)^2 (x (x) x)]``, plus with
    ``noise_correction`` the term ``(E[(u.y)^2] - 2 E[(u.y) x^T] Sigma^{-1} E[(u.y) x]) E[x (x) x]``.

    Returns
    -------
    (d*d,) array, in ``vec`` order. Used to test the linearisation ``T vec*(u u^T) = f(u)`` (Eq. 10).
    """
    X = as_2d_float(X, "X", min_rows=2)
    Y = as_targets(Y, "Y", n_rows=X.shape[0])
    Y = Y[:, None] if Y.ndim == 1 else Y
    u = np.asarray(u, dtype=np.float64).reshape(-1)
    if u.shape != (Y.shape[1],):
        raise InputError(f"u must have length n_outputs = {Y.shape[1]}, got {u.shape}.")
    n, d = X.shape
    yh = Y @ u
    Sigma = X.T @ X / n
    check_second_moment(Sigma)
    q = X.T @ yh / n
    beta = np.linalg.solve(Sigma, q)
    weight = 2 * yh * (X @ beta) - yh ** 2
    f = (X * weight[:, None]).T @ X / n
    if noise_correction:
        f += (np.mean(yh ** 2) - 2 * q @ beta) * Sigma
    return f.reshape(-1)


def purity_score(X, Y, u) -> float:
    """Lemma 2's scalar test ``2 E[(u.y) x^T] Sigma^{-1} E[(u.y) x] - E[(u.y)^2]``.

    Zero for a pure neuron (noiseless); in the population it equals ``sum_{i<j} c_i c_j m_ij`` with
    ``c = A^T u``. It can vanish by cancellation, which is why the paper uses the matrix test ``f(u)``.
    """
    X = as_2d_float(X, "X", min_rows=2)
    Y = as_targets(Y, "Y", n_rows=X.shape[0])
    Y = Y[:, None] if Y.ndim == 1 else Y
    u = np.asarray(u, dtype=np.float64).reshape(-1)
    yh = Y @ u
    n = X.shape[0]
    Sigma = X.T @ X / n
    check_second_moment(Sigma)
    q = X.T @ yh / n
    return float(2 * q @ np.linalg.solve(Sigma, q) - np.mean(yh ** 2))


def build_detector_matrix(detector: DetectorMoments, part: PartMoments, *, projection: np.ndarray | None = None,
                          noise_correction: bool = True, rows: str = "packed") -> np.ndarray:
    """BuildT: the matrix ``T`` with ``T vec*(u u^T) = f(u)`` (Eq. 10; Alg. 2 step 4 / Alg. 3 step 4).

    Parameters
    ----------
    detector : DetectorMoments
        ``E[y_a x_p x_r x_s]`` and ``E[y_a y_b x_r x_s]`` of the detector part of the sample, or the
        contracted ``K`` accumulated with a known ``B`` (then ``projection`` must be the ``P`` it used).
    part : PartMoments
        Low-order moments of the **same** part (``Sigma``, ``E[y x^T]``, ``E[y y^T]``).
    projection : (l, k) array, optional
        Algorithm 4's ``P``: the detector is built for ``P^T y``. All moments are polynomials of degree
        <= 2 in ``y``, so projecting after accumulation is exact.
    noise_correction : bool
        True: Eq. 11 (Algorithm 3), whose null space is unaffected by label noise. False: Corollary 1's
        detector (Algorithm 2).
    rows : {"packed", "full"}
        "full": the paper's ``d^2`` rows (``vec`` order). "packed": the ``d(d+1)/2`` distinct rows with
        off-diagonal ones times ``sqrt(2)``, an isometry, so same singular values and right singular
        vectors (see :mod:`.symmetric`).

    Returns
    -------
    T : array (d*d or d(d+1)/2, k(k+1)/2)

    Notes
    -----
    With ``B = E[y x^T] Sigma^{-1}`` (``= A W / 2``) and ``K[a, b] = H[a, b] + H[b, a] - G4[a, b]``,
    ``H[a, b, r, s] = sum_p B[b, p] E[y_a x_p x_r x_s]``, ``G4[a, b, r, s] = E[y_a y_b x_r x_s]``, plus
    ``(E[y y^T] - 2 B Sigma B^T)_{ab} Sigma`` for Eq. 11: ``f(u) = sum_{a,b} u_a u_b vec(K[a, b])``. Since
    ``vec*`` lists each off-diagonal monomial once, column ``(a, b)``, ``a < b``, of ``T`` is
    ``2 vec(K[a, b])`` (the factor 2 of spec section 2.2 step 7).
    """
    if rows not in ("packed", "full"):
        raise InputError(f"rows must be 'packed' or 'full', got {rows!r}.")
    Sigma = part.second
    d = Sigma.shape[0]
    check_second_moment(Sigma)
    cross, yy = part.cross, part.yy
    if detector.K is not None:  # contracted during the pass with a known B (and P)
        if projection is not None and (detector.projection is None
                                       or not np.array_equal(projection, detector.projection)):
            raise InputError("the detector moments were accumulated with another projection P.")
        Pj = detector.projection
    else:
        Pj = None if projection is None else np.asarray(projection, dtype=np.float64)
    if Pj is not None:
        cross = Pj.T @ cross
        yy = Pj.T @ yy @ Pj
    k = cross.shape[0]
    if detector.K is not None:
        B, K = detector.B, detector.K
    else:
        h3, g4 = detector.h3, detector.g4
        if Pj is not None:
            h3 = np.einsum("la,lpq->apq", Pj, h3)
            g4 = np.einsum("la,lmq,mb->abq", Pj, g4, Pj)
        B = np.linalg.solve(Sigma, cross.T).T  # (k, d)
        H = np.einsum("bp,apq->abq", B, h3)
        K = H + H.transpose(1, 0, 2) - g4
    if noise_correction:
        iu_d = np.triu_indices(d)
        coef = yy - 2 * B @ Sigma @ B.T
        K = K + coef[:, :, None] * Sigma[iu_d[0], iu_d[1]][None, None, :]
    iu = np.triu_indices(k)
    factor = np.where(iu[0] == iu[1], 1.0, 2.0)
    T = (K[iu[0], iu[1], :] * factor[:, None]).T  # (d(d+1)/2, k(k+1)/2), plain upper-triangle rows
    if rows == "full":
        return unpack_rows(T * pack_weights(d)[:, None], d)
    return T * pack_weights(d)[:, None]


# ------------------------------------------------------------------------------------------ NullSpan
@dataclass
class NullSpan:
    """Result of :func:`null_span`.

    Attributes
    ----------
    basis : (k(k+1)/2, k) array ``S``, the right singular vectors of the ``k`` smallest singular values.
    singular_values : all singular values of ``T``, descending.
    gap_ratio : ``s_{k_2} / s_{k_2 + 1}``: smallest "signal" over largest "null" singular value
        (``inf`` for ``k = 1``). Lemma 14: ``s_{k_2} >= sigma_min(M) sigma_min(A)^2`` in the population.
    """

    basis: np.ndarray
    singular_values: np.ndarray
    gap_ratio: float


def null_span(T: np.ndarray, k: int) -> NullSpan:
    """NullSpan (Alg. 2/3 step 5): the ``k`` least right singular vectors of ``T``.

    Lemma 4 / Lemma 10: when ``N`` (resp. ``M``) has full column rank their span is
    ``span{vec*(z_i z_i^T)}``, and ``rank T = k_2``.

    Parameters
    ----------
    T : (r, k(k+1)/2) array
        Detector matrix from :func:`build_detector_matrix` (``r = d^2`` or ``d(d+1)/2`` rows).
    k : int
        Number of hidden units.

    Returns
    -------
    NullSpan
        Basis ``S``, the singular values of ``T`` and the gap ratio ``s_{k_2} / s_{k_2+1}`` (Lemma 14).
    """
    k = check_positive_int(k, "n_hidden")
    T = np.asarray(T, dtype=np.float64)
    if T.ndim != 2 or T.shape[1] != n_sym(k):
        raise InputError(f"T must have k(k+1)/2 = {n_sym(k)} columns, got shape {T.shape}.")
    if not np.all(np.isfinite(T)):
        raise InputError("T contains NaN or inf; check the samples it was built from.")
    if k == 1:
        return NullSpan(np.ones((1, 1)), np.linalg.svd(T, compute_uv=False), float("inf"))
    _, s, Vt = np.linalg.svd(T, full_matrices=False)
    if Vt.shape[0] < n_sym(k):
        raise AssumptionError(f"T has only {T.shape[0]} rows; it needs k(k+1)/2 = {n_sym(k)} (k <= d).")
    k2 = n_sym(k) - k
    gap = float(s[k2 - 1] / s[k2]) if s[k2] > 0 else float("inf")
    return NullSpan(Vt[-k:].T.copy(), s, gap)


# ------------------------------------------------------------------------------------------ SimDiag
@dataclass
class SimDiagResult:
    """Result of :func:`sim_diag`.

    Attributes
    ----------
    Z : (k, k) array, rows the unit vectors ``z_i`` (up to order and sign).
    eigenvalues : the eigenvalues of ``X Y^{-1}`` for the kept draw (``D_X D_Y^{-1}``).
    residual : off-diagonal fraction ``sum_t ||offdiag(Z^{-T} U_t Z^{-1})||_F^2 / ||Z^{-T} U_t Z^{-1}||_F^2``
        over the null-space basis ``U_t = mat*(S e_t)`` (0 in exact arithmetic: every element of the
        span is ``Z^T D Z``).
    separation : ``sep(D) / max |D_ii|`` of the kept draw (Definition 3, relative).
    imaginary : ``max |Im mu| / max |mu|`` of the kept draw (0 in exact arithmetic).
    condition : ``kappa(Z)`` of the kept draw.
    n_tries : draws made.
    """

    Z: np.ndarray
    eigenvalues: np.ndarray
    residual: float
    separation: float
    imaginary: float
    condition: float
    n_tries: int


def diagonalization_residual(Z: np.ndarray, S: np.ndarray) -> float:
    """How far ``Z`` is from diagonalising the span of ``S``: the off-diagonal energy fraction of
    ``Z^{-T} mat*(S e_t) Z^{-1}``, ``t = 1..k`` (0 for the exact ``Z``; ``inf`` for a singular ``Z``)."""
    try:
        Zi = np.linalg.inv(Z)
    except np.linalg.LinAlgError:
        return float("inf")
    D = np.einsum("ji,tjk,kl->til", Zi, mat_star(S.T), Zi)
    total = float(np.sum(D * D))
    # the off-diagonal energy summed on its own: ``total - diagonal`` would cancel to ~1e-16 of ``total``
    # whatever Z is, and its last bits would depend on the BLAS kernel's summation order
    off = D.copy()
    off[:, np.arange(off.shape[1]), np.arange(off.shape[2])] = 0.0
    return float(np.sum(off * off)) / total if total > 0 and np.isfinite(total) else float("inf")


def _real_eigenbasis(mu: np.ndarray, vecs: np.ndarray) -> np.ndarray:
    """Real basis of the eigenvectors of a real matrix: ``Re v`` for real eigenvalues, and for a complex
    conjugate pair ``(v, conj v)`` (LAPACK returns them adjacent) the pair ``(Re v, Im v)``, which spans
    the same real invariant plane. Taking ``Re`` of both members would give the same vector twice and a
    singular ``Z`` (SimDiag, Algorithm 2 steps 7-8)."""
    R = np.real(vecs).copy()
    i = 0
    while i < len(mu) - 1:
        if mu[i].imag != 0 and np.isclose(mu[i + 1], np.conj(mu[i])):
            R[:, i + 1] = vecs[:, i].imag
            i += 2
        else:
            i += 1
    return R


def sim_diag(S: np.ndarray, *, rng=None, n_tries: int = 20) -> SimDiagResult:
    """SimDiag (Alg. 2/3 steps 7-8): the ``z_i`` as eigenvectors of ``X Y^{-1}``.

    ``X = mat*(S zeta_1)``, ``Y = mat*(S zeta_2)``, ``zeta ~ N(0, I_k)``. In exact arithmetic
    ``X Y^{-1} = Z^T D_X D_Y^{-1} Z^{-T}`` so its right eigenvectors are the ``z_i`` (Lemma 5, Lemma 8).

    Parameters
    ----------
    S : (k(k+1)/2, k) array
        Null-space basis from :func:`null_span`.
    rng : int, Generator or None
    n_tries : int, default 20
        Independent draws ``(zeta_1, zeta_2)`` (not in the paper, whose single draw is ``n_tries=1``;
        spec section 5.2 pitfall 5). Each draw's ``Z`` is scored by :func:`diagonalization_residual`, the
        exact-case certificate that ``Z`` diagonalises **every** element of the span, and the draw with
        the smallest residual is kept. With noisy ``S`` a single draw is often spoiled by a near
        collision of two eigenvalue ratios (Lemma 17's ``sep``); the retries remove that failure mode.
        A complex conjugate pair of eigenvectors (noisy ``S`` only) contributes its real and imaginary
        parts, so ``Z`` stays invertible; such a draw has a larger residual and loses to real ones.
    """
    S = np.asarray(S, dtype=np.float64)
    if S.ndim != 2 or S.shape[1] == 0 or S.shape[0] != n_sym(S.shape[1]):
        raise InputError(f"S must have shape (k(k+1)/2, k), got {S.shape}.")
    if not np.all(np.isfinite(S)):
        raise InputError("S contains NaN or inf.")
    k = S.shape[1]
    n_tries = check_positive_int(n_tries, "n_tries")
    gen = check_random_state(rng)
    if k == 1:
        return SimDiagResult(np.ones((1, 1)), np.ones(1), 0.0, float("inf"), 0.0, 1.0, 0)
    best: SimDiagResult | None = None
    for _ in range(n_tries):
        zeta = gen.standard_normal((2, k))
        Xm, Ym = mat_star(S @ zeta[0]), mat_star(S @ zeta[1])
        try:
            Mx = np.linalg.solve(Ym, Xm).T  # (Y^{-1} X)^T = X Y^{-1} for symmetric X, Y
            mu, vecs = np.linalg.eig(Mx)
        except np.linalg.LinAlgError:
            continue
        if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(vecs))):
            continue
        Z = _real_eigenbasis(mu, vecs).T
        norms = np.linalg.norm(Z, axis=1)
        if np.any(norms == 0):
            continue
        Z = Z / norms[:, None]
        res = diagonalization_residual(Z, S)
        if best is not None and not res < best.residual:
            continue
        scale = float(np.max(np.abs(mu)))
        diff = np.abs(mu[:, None] - mu[None, :]) + np.diag(np.full(k, np.inf))
        best = SimDiagResult(Z, mu, res, float(diff.min() / scale) if scale > 0 else 0.0,
                             float(np.max(np.abs(mu.imag)) / scale) if scale > 0 else float("inf"),
                             float(np.linalg.cond(Z)), n_tries)
    if best is None or not np.isfinite(best.residual):
        raise AssumptionError("SimDiag failed on every draw (singular Y or Z): the null space of T is not "
                              "spanned by rank-one matrices. Check that N/M has full column rank (Ge et al. "
                              "2019, Theorems 4-5) or pass more samples.")
    return best


def sign_fix(Z: np.ndarray, mean_y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SignFix (Alg. 2/3 step 9): flip ``z_i`` when ``E[z_i^T y] < 0``.

    ``E[z_i^T y] = lambda_i E[relu(w_i.x)]`` and the expectation is positive (Lemma 18), so after the
    flip every ``lambda_i > 0``.

    Parameters
    ----------
    Z : (k, m) array
        Rows the pure-neuron directions ``z_i`` (``m`` = output dimension, or ``k`` after Algorithm 4's
        projection).
    mean_y : (m,) array
        ``E[y]`` (Algorithm 3: from the second half of the sample; ``P^T E[y]`` under Algorithm 4).

    Returns
    -------
    Z : (k, m) array
        The sign-fixed directions.
    margins : (k,) array
        ``E[z_i^T y]`` after the flip (all ``>= 0``; a margin near 0 means the sign is unreliable).
    """
    Z = np.asarray(Z, dtype=np.float64)
    mean_y = np.asarray(mean_y, dtype=np.float64)
    if Z.ndim != 2 or mean_y.ndim != 1 or Z.shape[1] != mean_y.shape[0]:
        raise InputError(f"sign_fix needs Z of shape (k, m) and mean_y of shape (m,), got {Z.shape} and "
                         f"{mean_y.shape}.")
    if not (np.all(np.isfinite(Z)) and np.all(np.isfinite(mean_y))):
        raise InputError("sign_fix: Z and mean_y must be finite.")
    margins = Z @ mean_y
    s = np.where(margins < 0, -1.0, 1.0)
    return Z * s[:, None], margins * s


def output_projection(part: PartMoments, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 4 step 2: ``P`` = top-``k`` left singular vectors of ``E[y x^T]`` (``= A W Sigma / 2``).

    Returns ``P`` (l, k) and the singular values of ``E[y x^T]`` (the ``k``-th must be non-zero: rank A = k).
    """
    U, s, _ = np.linalg.svd(part.cross, full_matrices=False)
    return U[:, :k].copy(), s


# ------------------------------------------------------------------------------------------ Section 4
@dataclass
class CPSlicesResult:
    """Result of :func:`cp_slices`: ``Z`` (rows ``z_i``), relative fit error, restarts, slices and the
    diagnostics of :func:`nnrecover.tensor.cp_als`."""

    Z: np.ndarray
    fit_error: float
    n_restarts: int
    n_slices: int
    cp_diagnostics: dict


def cp_slices(S: np.ndarray, *, rng=None, n_slices: int | None = None, n_restarts: int = 10,
              n_iter_max: int = 1000, tol: float = 1e-10) -> CPSlicesResult:
    """Section 4 (a): CP-ALS on ``10 k`` random slices ``mat*(S g_t)`` of the null space, best of restarts.

    In exact arithmetic the stacked tensor ``(k, k, n_slices)`` is ``sum_i z_i o z_i o c_i`` (rank ``k``),
    so the first two factors are the ``z_i``. ``z_i`` is the unit-normalised average of the first two
    factor columns (after sign alignment); "best" is the lowest relative reconstruction error.

    Besides the paper's ``n_restarts`` random starts, one ALS run starts from the algebraic solution
    (:func:`sim_diag` on the same null space, its third factor by least squares). ALS from random starts
    alone can stop in a swamp (relative error 1e-3 after ``n_iter_max`` sweeps when two ``z_i`` are
    close, ``cond(Z) ~ 25``) or at degenerate, nearly equal components, whichever BLAS kernel rounds
    the last bits; from the algebraic start it is exact to round-off on exact moments, and on noisy
    moments it is one more candidate that the lowest error decides (the random starts are skipped when it
    fits to round-off: the decomposition is then unique). A run whose ``z_i`` are not ``k`` distinct
    directions (``cond(Z) > 1e12``, or a component of weight ``< 1e-8`` times the largest one) is never
    kept while another one is, and raises when no run has them.

    Parameters
    ----------
    S : (k(k+1)/2, k) null-space basis
    rng : int, Generator or None
    n_slices : int, default ``10 k`` (the paper)
    n_restarts : int, default 10 (the paper's random restarts; the algebraic start comes on top)
    n_iter_max, tol : ALS iterations and stopping tolerance (not given in the paper)
    """
    S = np.asarray(S, dtype=np.float64)
    k = S.shape[1]
    gen = check_random_state(rng)
    n_slices = 10 * k if n_slices is None else check_positive_int(n_slices, "n_slices")
    n_restarts = check_positive_int(n_restarts, "n_restarts")
    if k == 1:
        return CPSlicesResult(np.ones((1, 1)), 0.0, 0, n_slices, {})
    G = gen.standard_normal((n_slices, k))
    tensor = np.ascontiguousarray(mat_star(G @ S.T).transpose(1, 2, 0))  # (k, k, n_slices)
    scored = []

    def score(cp, kind):
        Z = _directions(cp.factors[0], cp.factors[1])
        cond = float(np.linalg.cond(Z))
        w = np.abs(cp.weights)
        distinct = np.isfinite(cond) and cond <= _DISTINCT_COND and w.min() > _NULL_WEIGHT * w.max()
        scored.append((not distinct, cp.relative_error, Z, cp, cond, kind))

    start = _algebraic_start(S, tensor, gen)
    if start is not None:
        score(cp_als(tensor, k, init=start, n_iter_max=n_iter_max, tol=tol), "algebraic start")
    # a fit at round-off with k distinct directions is the decomposition (it is unique: Kruskal's
    # condition holds for k independent z_i and n_slices >= k generic slices); no random start can beat it
    if not (scored and not scored[0][0] and scored[0][1] <= _EXACT_FIT):
        score(cp_als(tensor, k, n_restarts=n_restarts, rng=gen, n_iter_max=n_iter_max, tol=tol), "random starts")
    degenerate, err, Z, cp, cond, kind = min(scored, key=lambda t: (t[0], t[1]))
    diagnostics = dict(cp.diagnostics, algebraic_start=start is not None, kept=kind,
                       candidate_errors={t[5]: t[1] for t in scored}, Z_condition=cond)
    if degenerate:
        raise AssumptionError(
            f"CP-ALS found no {k} distinct pure-neuron directions (cond(Z) = {cond:.3g}, smallest component "
            f"weight {np.abs(cp.weights).min() / np.abs(cp.weights).max():.3g} of the largest, for the best of "
            f"{n_restarts} random starts and the algebraic start): the null space of the detector matrix is "
            "not spanned by k rank-one matrices. Pass more samples, or check that the hidden weights have "
            "full rank (Ge et al. 2019, Theorems 4-5).")
    return CPSlicesResult(Z, cp.relative_error, n_restarts, n_slices, diagnostics)


_DISTINCT_COND = 1e12  # the same threshold as Algorithm 2's Z^{-1}: beyond it the directions are not k
# a component that carries no part of the tensor is no direction: the span holds fewer than k rank-one
# matrices (the real components' weights are ~ sqrt(n_slices) |<z_i-coefficient, g>|, far above this)
_NULL_WEIGHT = 1e-8
_EXACT_FIT = 1e-12  # relative CP error of exact moments: round-off of the k x k x 10k slice tensor


def _directions(f1: np.ndarray, f2: np.ndarray) -> np.ndarray:
    """The ``z_i``: unit-normalised averages of the first two (sign-aligned) factor columns."""
    align = np.sign(np.sum(f1 * f2, axis=0))
    align[align == 0] = 1.0
    Z = (f1 + align[None, :] * f2).T
    norms = np.linalg.norm(Z, axis=1, keepdims=True)
    return Z / np.where(norms > 0, norms, 1.0)


def _algebraic_start(S: np.ndarray, tensor: np.ndarray, gen) -> list[np.ndarray] | None:
    """Start factors ``[Z^T, Z^T, C]`` from SimDiag's ``Z`` and the least-squares third factor, or None
    when SimDiag finds no invertible ``Z`` (ALS then runs from its random starts alone)."""
    try:
        Z = sim_diag(S, rng=gen).Z
    except AssumptionError:
        return None
    # tensor[:, :, t] = Z^T diag(C[t]) Z: C[t, i] = (Z^{-T} T_t Z^{-1})_{ii}
    Zinv = np.linalg.pinv(Z)
    C = np.einsum("ai,abt,bi->ti", Zinv, tensor, Zinv)
    if not np.all(np.isfinite(C)):
        return None
    return [Z.T.copy(), Z.T.copy(), C]


def fit_hidden_given_output(X, Y, output_weights, V0, *, max_iter: int = 500, tol: float = 1e-12):
    """Section 4 (b): learn ``W`` by gradient-based minimisation with ``A`` fixed.

    Minimises ``L(V) = mean_j ||y_j - A relu(V x_j)||^2`` over ``V`` only, from ``V0`` (Algorithm 1's
    output), with L-BFGS and the analytic gradient ``-2/n sum_j [(A^T r_j) * 1{V x_j > 0}] x_j^T``
    (:func:`nnrecover.refine.fit_least_squares` with ``train=("hidden_weights",)``). The paper says
    "gradient descent" and gives neither the optimiser nor its settings.

    Returns
    -------
    V : (k, d) array (``V0`` when the fit did not lower the loss)
    info : dict with the initial and final loss, iterations and the optimiser message.
    """

    X = as_2d_float(X, "X")
    Y = as_targets(Y, "Y", n_rows=X.shape[0])
    start = TwoLayerNetwork(np.asarray(V0, dtype=np.float64), None, np.asarray(output_weights, dtype=np.float64))
    fitted, info = fit_least_squares(start, X, Y, method="lbfgs", max_iter=max_iter, tol=tol,
                                     train=("hidden_weights",))
    better = info["train_loss_refined"] <= info["train_loss_start"]
    V = fitted.hidden_weights if better else start.hidden_weights.copy()
    return V, dict(initial_loss=info["train_loss_start"],
                   final_loss=min(info["train_loss_refined"], info["train_loss_start"]),
                   n_iter=info["n_iter"], message=info["message"])

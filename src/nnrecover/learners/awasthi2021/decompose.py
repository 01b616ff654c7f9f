"""Tensor stage of Awasthi-Tang-Vijayaraghavan 2021: Algorithm 1 (exact coefficients), Algorithm 4
(robust, order ``l``) and Algorithm 6 (robust full rank) (internal).

Paper symbol -> code (units are rows; ``n`` is the working dimension: ``m`` after projecting onto
``span{w_i}`` for ``l = 1``, ``d`` for ``l = 2``):

=========================================================  ==========================================
paper                                                      here
=========================================================  ==========================================
``T' = flatten(T_{2l+1}, l, l, 1)``                        ``_tensor_candidates(K = 2l + 1)``
``T'' = flatten(T_{2l+2}, l, l, 2)``                       ``_tensor_candidates(K = 2l + 2)``
``k' = max{r <= m : s_r(flatten(T_{2l+1}, l, l+1)) > eta_1}``  ``ranks[K]``
``k''``: same with ``flatten(T_{2l+2}, l, l+2)`` (E4 fixed)
Jennrich's algorithm                                       :func:`nnrecover.tensor.jennrich`
``alpha'_i``, ``alpha''_i``                                Gram least squares on ``T_K`` at ``u_i``
``eta_1, eta_2, eta_3``                                    :class:`Thresholds`
``w~_1 .. w~_{m'}``                                        ``HermiteRecovery.U`` (working coords),
                                                           ``HermiteRecovery.W`` (input space)
=========================================================  ==========================================

Noise-adaptive thresholds (default; the eta_1, eta_2 of Algorithm 4 set from the measured noise): ``eta_1 = eta_2 = snr * sigma^_K`` with the
split-sample spectral noise ``sigma^_K`` of the flattening, ``eta_3 = 0.25``; candidates are
deduplicated up to sign in decreasing SNR order, so a unit seen by both tensors keeps the better
estimate. The paper's thresholds (Theorem D.1 chain) are :func:`paper_thresholds`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy import linalg

from ..._validation import check_positive_int, check_random_state
from ...errors import AssumptionError, CertificateWarning, InputError
from ...hermite.polynomials import hermite_table
from ...network import TwoLayerNetwork
from ...tensor import flatten, jennrich, joint_diagonalize
from .coefficients import HermiteCoefficients, estimate_coefficients, exact_coefficients
from .scalars import fix_signs, gram_lstsq, recover_scalars
from .symtensor import contract_rank_one

__all__ = ["Thresholds", "adaptive_thresholds", "paper_thresholds", "HermiteRecovery", "algorithm1",
           "algorithm4", "algorithm6", "read_units"]


@dataclass(frozen=True)
class Thresholds:
    """Thresholds of Algorithm 4.

    Attributes
    ----------
    eta1 : dict K -> float
        Rank threshold on the singular values of ``flatten(T_K, l, K - l)``, ``K in {2l+1, 2l+2}``.
    eta2 : dict K -> float
        Minimum ``|alpha|`` (Frobenius norm of a rank-one term) for a term of ``T_K`` to be kept.
    eta3 : float
        Two directions closer than this up to sign (l2 distance) are duplicates.
    noise : dict K -> float
        The noise level each threshold was derived from (``nan`` for the paper's thresholds).
    mode : str
        ``"adaptive"``, ``"exact"`` or ``"paper"``.
    dedup_factor : float or None
        If set, two candidates ``i, j`` are duplicates when their distance is below
        ``min(eta3, dedup_factor * (1/snr_i + 1/snr_j))``: a direction read from a term with
        signal-to-noise ratio ``snr`` is accurate to about ``1/snr``, so genuinely distinct but close
        units (``|<w_i, w_j>|`` near 1, frequent when ``m > d``) are not merged. ``None``: the paper's
        fixed ``eta3``.
    """

    eta1: dict
    eta2: dict
    eta3: float
    noise: dict = field(default_factory=dict)
    mode: str = "adaptive"
    dedup_factor: float | None = 3.0


def adaptive_thresholds(coeffs: HermiteCoefficients, order: int, *, snr: float = 1.5, dedup: float = 0.25,
                        dedup_factor: float | None = 3.0, floor: float = 1e-11) -> Thresholds:
    """Noise-adaptive thresholds: ``eta_1 = eta_2 = snr * max(sigma^_K, floor * s_1)``, ``eta_3 = dedup``
    (capping the SNR-dependent duplicate radius, see :class:`Thresholds`).

    ``sigma^_K`` is the split-sample spectral noise of ``flatten(T_K, l, K - l)``
    (:attr:`HermiteCoefficients.noise`); ``floor * s_1`` (``s_1`` the top singular value of the same
    flattening) stands for round-off when the coefficients are exact, so that terms whose coefficient
    vanishes (bias at a root of ``He_{2l-1}`` or ``He_{2l}``) are not counted in the rank.
    """
    if not snr > 0 or not dedup > 0 or not floor >= 0:
        raise InputError(f"snr, dedup and floor must be positive, got {snr}, {dedup}, {floor}.")
    eta1, eta2, noise = {}, {}, {}
    for K in (2 * order + 1, 2 * order + 2):
        s1 = float(linalg.svdvals(flatten(coeffs.tensor(K), order, K - order).T)[0])
        sig = max(float(coeffs.noise.get(K, 0.0)), floor * s1)
        noise[K] = sig
        eta1[K] = eta2[K] = snr * sig
    return Thresholds(eta1, eta2, float(dedup), noise, "exact" if coeffs.exact else "adaptive", dedup_factor)


def paper_thresholds(epsilon: float, bound: float, m: int, order: int, s_min: float) -> Thresholds:
    """The parameter chain of the proof of Theorem D.1 (all 'poly' factors taken as written).

    ``eps' = eps / (4 m B)``; ``eps_3 = eps'^4 s_m(W^{(.)l}) / (16 m^{3/2} (1 + B)^2)`` (Lemma D.9);
    ``eps_2 = eps_3``; ``eps_1 = sqrt(eps_2)``; ``eta_3 = 2 eps_2``; ``eta_2 = 4 eps_1`` (Theorem D.1;
    the proof of Lemma D.7 also says ``eps_1 / 2``, erratum E7). The paper leaves ``eta_1`` as
    ``poly(eps_2, s_m)/poly(m, d, B)``; we take the value for which Lemma D.4 guarantees every term
    with ``|beta_i| >= eps_1`` is selected: ``eta_1 = eps_1 s_m^2 / (2m)^K`` for ``T_K``.
    These thresholds are far smaller than sampling noise at any practical N; they are provided to
    reproduce the paper, the adaptive ones are the default.
    """
    for name, val in (("epsilon", epsilon), ("bound", bound), ("s_min", s_min)):
        if not (np.isfinite(val) and val > 0):
            raise InputError(f"{name} must be a positive number, got {val!r}.")
    eps_p = epsilon / (4 * m * bound)
    eps3 = eps_p ** 4 * s_min / (16 * m ** 1.5 * (1 + bound) ** 2)
    eps2 = eps3
    eps1 = math.sqrt(eps2)
    eta1 = {K: eps1 * s_min ** 2 / (2 * m) ** K for K in (2 * order + 1, 2 * order + 2)}
    eta2 = {K: 4 * eps1 for K in eta1}
    return Thresholds(eta1, eta2, 2 * eps2, {K: float("nan") for K in eta1}, "paper", None)


def read_units(X: np.ndarray, order: int, n: int) -> np.ndarray:
    """The read-off after Jennrich's algorithm (Claim 4.4): ``u_i`` from ``x_i ~ +-u_i^{(x) l}``.

    ``l = 1``: ``u_i = x_i``. ``l >= 2``: top left singular vector of ``reshape(x_i, n, n^{l-1})``
    (Claim D.6 makes this stable). ``X`` has the factors as columns; returns unit rows.
    """
    if order == 1:
        U = X.T.copy()
    else:
        U = np.empty((X.shape[1], n))
        for i in range(X.shape[1]):
            M = X[:, i].reshape(n, n ** (order - 1))
            if order == 2:
                lam, V = linalg.eigh(0.5 * (M + M.T))
                U[i] = V[:, np.argmax(np.abs(lam))]
            else:
                u, _, _ = linalg.svd(M, full_matrices=False)
                U[i] = u[:, 0]
    return U / np.linalg.norm(U, axis=1, keepdims=True)


JOINT_RESTARTS = 8
"""Largest number of runs of the joint decomposition (new pencil draws each) while its ALS has not
converged (:func:`_tensor_candidates`)."""

JOINT_PROBE_SWEEPS = 100
"""ALS sweeps of each run before it counts as not converged. A run from a pencil start near a
decomposition converges linearly, to a relative decrease of ``1e-10`` per sweep in ``~ 10 / log10(1 / rho)``
sweeps (7-10 at d = 1000, m = 20, N = 10^6; 100 allows a contraction rate ``rho`` up to 0.8); the failed
runs there were still far above the converged residual (0.24-0.32 against 0.145) at the 500-sweep limit."""

JOINT_MAX_SWEEPS = 500
"""ALS sweeps of the replay of the best run when no run converged within :data:`JOINT_PROBE_SWEEPS`."""


def _joint_runs(slices: np.ndarray, k: int, rng: np.random.Generator, n_draws: int):
    """Runs of :func:`joint_diagonalize` from new pencil draws until one converges (at most
    :data:`JOINT_RESTARTS`, :data:`JOINT_PROBE_SWEEPS` sweeps each); the smallest residual is kept. When none
    converged, the best run is replayed from its own draws (the generator's state before it) with
    :data:`JOINT_MAX_SWEEPS` sweeps, so a slowly converging run is not lost, and a run that does not
    converge costs the probe's sweeps, not the limit's. Returns ``(result, attempts)``."""
    res, best_state, attempts = None, None, 0
    while attempts < JOINT_RESTARTS:
        attempts += 1
        state = rng.bit_generator.state
        trial = joint_diagonalize(slices, k, rng=rng, n_draws=n_draws, symmetric=True, rank_tol=0.0,
                                  max_iter=JOINT_PROBE_SWEEPS)
        if res is None or trial.diagnostics["residual"] < res.diagnostics["residual"]:
            res, best_state = trial, state
        if trial.diagnostics.get("converged"):
            return res, attempts
    replay_rng = np.random.Generator(type(rng.bit_generator)())
    replay_rng.bit_generator.state = best_state
    trial = joint_diagonalize(slices, k, rng=replay_rng, n_draws=n_draws, symmetric=True, rank_tol=0.0,
                              max_iter=JOINT_MAX_SWEEPS)
    if trial.diagnostics["residual"] <= res.diagnostics["residual"]:
        res = trial
    return res, attempts


def _tensor_candidates(coeffs: HermiteCoefficients, K: int, order: int, m: int, th: Thresholds,
                       rng: np.random.Generator, n_draws: int, decomposer: str = "joint"
                       ) -> tuple[list[dict], dict]:
    """Steps 2/3 of Algorithm 4 on ``T_K``: rank selection, Jennrich, read-off, ``alpha`` by Gram LS."""
    n = coeffs.dim
    T = coeffs.tensor(K)
    third = K - 2 * order
    sv = linalg.svdvals(flatten(T, order, K - order).T)  # tall: QR first, faster
    k = int(min(m, n ** order, np.count_nonzero(sv > th.eta1[K])))
    diag: dict[str, Any] = {"singular_values": sv[: m + 2].tolist(), "rank": k, "eta1": th.eta1[K],
                            "noise": th.noise.get(K)}
    if k == 0:
        return [], diag
    T3 = flatten(T, order, order, third)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CertificateWarning)
        if decomposer == "joint":
            # Jennrich's pencil on random combinations of all slices, then ALS over all n^{K-2l}
            # slices T(., ., e_c) jointly (not in the paper: averaging the slice noise beats one random pair)
            # restarts from new pencil draws while the ALS has not converged, the best residual kept: at
            # d = 1000, m = 20, N = 10^6 (T_4 spectral noise 0.066, weakest |alpha| 0.2) 3 of 6 seeds stopped
            # at the 500-sweep limit with residual 0.24-0.32 and wrong units (smallest cosine to the
            # truth 0.68-0.91), the other 3 converged in 7-10 sweeps to 0.145 (cosines >= 0.999)
            res, attempts = _joint_runs(np.moveaxis(T3, 2, 0), k, rng, n_draws)
            jd = dict(res.diagnostics)
            jd["attempts"] = attempts
            jd.update({f"pencil_{key}": val for key, val in (jd.pop("jennrich", None) or {}).items()
                       if key in ("eigenvalue_gap", "max_imag", "condition", "error_amplification")})
            keys = ("residual", "initial_residual", "n_iter", "converged", "attempts", "condition",
                    "pencil_eigenvalue_gap",
                    "pencil_max_imag", "pencil_condition", "pencil_error_amplification", "rank_ratio", "tail_ratio")
        elif decomposer == "jennrich":
            res = jennrich(T3, k, n_draws=n_draws, rng=rng, symmetric=True, rank_tol=0.0)
            jd = res.diagnostics
            keys = ("eigenvalue_gap", "max_imag", "condition", "error_amplification", "holdout_residual",
                    "rank_ratio", "tail_ratio")
        else:
            raise InputError(f"decomposer must be 'joint' or 'jennrich', got {decomposer!r}.")
    diag["decomposer"] = decomposer
    diag["jennrich"] = {key: jd.get(key) for key in keys}
    diag["jennrich_warnings"] = [str(w.message) for w in caught]
    U = read_units(res.factors[0], order, n)
    alpha, cond = gram_lstsq(U, coeffs.rank_one(K, U), K)
    if K % 2:  # (alpha', u) ~ (-alpha', -u): convention alpha' >= 0 (the sign is fixed later by FIXSIGNS, Algorithm 3)
        flip = np.where(alpha < 0, -1.0, 1.0)
        U, alpha = U * flip[:, None], alpha * flip
    diag["gram_condition"] = cond
    noise = th.noise.get(K, float("nan"))
    cands = []
    for i in range(k):
        snr = abs(alpha[i]) / noise if noise and np.isfinite(noise) and noise > 0 else float("inf")
        cands.append({"u": U[i], "alpha": float(alpha[i]), "snr": float(snr), "source": f"T{K}",
                      "kept": abs(alpha[i]) >= th.eta2[K]})
    return cands, diag


def _deduplicate(cands: list[dict], th: Thresholds, m: int) -> tuple[list[dict], list[dict]]:
    """Step 4: keep candidates in decreasing SNR; drop one within the duplicate radius of a kept one
    up to sign (``eta3``, or the SNR-dependent radius of :class:`Thresholds`)."""
    kept: list[dict] = []
    dups: list[dict] = []
    for c in sorted(cands, key=lambda c: (-c["snr"], -abs(c["alpha"]))):
        dist = np.array([min(np.linalg.norm(c["u"] - k["u"]), np.linalg.norm(c["u"] + k["u"])) for k in kept])
        if th.dedup_factor is None:
            radius = np.full(dist.shape, th.eta3)
        else:
            radius = np.array([min(th.eta3, th.dedup_factor * (1 / c["snr"] + 1 / k["snr"])) for k in kept])
        if dist.size and np.any(dist < radius):
            j = int(np.argmin(dist / radius))
            kept[j].setdefault("also", []).append(c["source"])
            dups.append(c)
        else:
            kept.append(dict(c))
    # at most m units exist: while there are more candidates, the closest pair (up to sign) is one
    # unit seen twice -- keep its higher-SNR member (kept is sorted by decreasing SNR)
    while len(kept) > m:
        U = np.array([k["u"] for k in kept])
        C = np.abs(U @ U.T) - 2.0 * np.eye(len(kept))
        i, j = sorted(np.unravel_index(int(np.argmax(C)), C.shape))
        kept[i].setdefault("also", []).append(kept[j]["source"])
        dups.append(kept.pop(j))
    return kept, dups


@dataclass
class HermiteRecovery:
    """Units recovered by Algorithms 1 / 4 / 6.

    Attributes
    ----------
    a : (k,) output weights; b : (k,) biases; W : (k, d) unit rows in the input space.
    U : (k, n) the same rows in the working coordinates.
    order : int, ``l``.
    signs_fixed : bool
        True after FIXSIGNS (``l = 1``): then ``(a, b, W)`` are the parameters; otherwise
        ``(a_i, xi_i b_i, xi_i w_i)`` with unknown signs ``xi_i``.
    source : list of str, the tensor (``"T3"``...) whose decomposition supplied each unit.
    also_in : list of list of str, other tensors in which the unit was found (and deduplicated).
    snr : (k,) ``|alpha| / sigma^`` of the supplying tensor.
    dropped : list of dict, candidate units removed after RECOVERSCALARS (reason, bias, ...).
    diagnostics : dict, per-tensor ranks, singular values, Jennrich diagnostics, thresholds, Gram
        conditions, FIXSIGNS z-values.
    """

    a: np.ndarray
    b: np.ndarray
    W: np.ndarray
    U: np.ndarray
    order: int
    signs_fixed: bool
    source: list
    also_in: list
    snr: np.ndarray
    dropped: list = field(default_factory=list)
    diagnostics: dict = field(default_factory=dict)

    @property
    def n_units(self) -> int:
        return int(self.a.shape[0])

    def network(self, output_bias: float = 0.0):
        """The recovered units as a :class:`~nnrecover.network.TwoLayerNetwork` (``n_units >= 1``)."""

        if self.n_units == 0:
            raise InputError("no unit was recovered; use the Algorithm 5 network instead.")
        return TwoLayerNetwork(self.W, self.b, self.a[None, :], np.array([output_bias]))


def _check_inputs(coeffs: Any, order: Any, n_hidden: Any) -> None:

    if not isinstance(coeffs, HermiteCoefficients):
        raise InputError(f"coeffs must be HermiteCoefficients (see hermite_coefficients), got {type(coeffs).__name__}.")
    order = check_positive_int(order, "order")
    check_positive_int(n_hidden, "n_hidden")
    missing = [k for k in range(2, 2 * order + 3) if k not in coeffs.tensors]
    if missing:
        raise InputError(f"order l = {order} needs T_2 .. T_{2 * order + 2}; coeffs lacks the orders {missing}.")


def _zeta_std(coeffs: HermiteCoefficients, U: np.ndarray, j: int) -> np.ndarray:
    """Standard deviations of the Gram solutions ``zeta_j = (G^{o j})^{-1} T_j(u_i, ..., u_i)``.

    From samples with row groups (order 1 and 2, :meth:`HermiteCoefficients.group_std`): the spread of
    ``zeta_j`` over the groups, which sees the actual variance of the contractions (with the control
    variate the residual ``r`` is concentrated along the ``w_i`` themselves, so the independence
    formula below was measured 1.2-5.5x too small). Otherwise (``j = 2``, whose full estimate is not
    grouped): :meth:`HermiteCoefficients.rank_one_std` (``sqrt(E[y^2] j! / N)`` for ``j = 2``) per
    rank-one contraction (eq. (6)), propagated through ``(G^{o j})^{-1}`` (diagonal)."""
    if j <= 1:
        return np.zeros(U.shape[0])
    G_inv = linalg.pinvh((U @ U.T) ** j)
    spread = coeffs.group_std(j, lambda T: G_inv @ contract_rank_one(T, U))
    if spread is not None:
        return spread
    return coeffs.rank_one_std(j) * np.sqrt(np.maximum(np.diag(G_inv), 0.0))


def _scalar_filter(coeffs: HermiteCoefficients, U: np.ndarray, order: int, sc, max_bias: float,
                   scalar_snr: float) -> tuple[np.ndarray, np.ndarray]:
    """Units whose scalars are trustworthy, and the predicted relative error of their ``a~``.

    Kept: finite, ``|b~| <= max_bias`` and, from samples, a predicted relative error of ``a~`` of at
    most ``1 / scalar_snr``. First-order propagation through RECOVERSCALARS:
    ``sigma_b = sqrt(s_{q+1}^2 + (q-2)^2 s_{q-1}^2 + b~^2 s_q^2) / |zeta_q|`` (``s_j`` the standard
    deviation of ``zeta_j``), and ``a~ ~ zeta_q exp(b~^2 / 2) / He_{q-2}(b~)`` gives
    ``rel(a~) ~ s_q / |zeta_q| + |b~ - He'_{q-2}/He_{q-2}| sigma_b``. This is what blows up for large
    ``|b|`` (``exp(b^2/2)`` in RECOVERSCALARS): such units go to the linear part instead.
    """
    ok = np.isfinite(sc.a) & np.isfinite(sc.b) & (np.abs(sc.b) <= max_bias)
    rel = np.zeros(U.shape[0])
    if not coeffs.exact and scalar_snr > 0:
        std = {j: _zeta_std(coeffs, U, j) for j in sc.zeta}
        for i, qi in enumerate(sc.q):
            q = int(qi)
            zq = abs(sc.zeta[q][i])
            if not (zq > 0 and np.isfinite(sc.b[i])):
                rel[i] = np.inf
                continue
            s_prev = std[q - 1][i] if (q - 1) in std else 0.0
            s_b = math.sqrt(std[q + 1][i] ** 2 + ((q - 2) * s_prev) ** 2 + (sc.b[i] * std[q][i]) ** 2) / zq
            he = hermite_table(max(q - 2, 0), sc.b[i])
            dlog_he = (q - 2) * he[q - 3] / he[q - 2] if q > 2 and he[q - 2] != 0 else 0.0
            rel[i] = std[q][i] / zq + abs(sc.b[i] - dlog_he) * s_b
        ok &= rel <= 1.0 / scalar_snr
    return ok, rel


def algorithm4(coeffs: HermiteCoefficients, order: int, n_hidden: int, *, thresholds: Thresholds | None = None,
               rng=None, n_draws: int = 5, max_bias: float = np.inf, scalar_snr: float = 3.0,
               max_gram_condition: float = 1e8, single_tensor: str | None = None,
               decomposer: str = "joint") -> HermiteRecovery:
    """Algorithm 4: recover ``{(a_i, xi_i b_i, xi_i w_i)}`` for the detectable units from ``T_0, ..., T_{2l+2}``.

    Parameters
    ----------
    coeffs : HermiteCoefficients
        Estimated (or exact) coefficient tensors in the working coordinates.
    order : int
        ``l`` (1 or 2 in the learner; any ``l`` whose tensors fit in memory here).
    n_hidden : int
        ``m``, an upper bound on the number of units.
    thresholds : Thresholds, optional
        Default :func:`adaptive_thresholds`.
    rng : seed for Jennrich's random slices.
    n_draws : int
        Random slice pairs per Jennrich call (best kept).
    max_bias : float
        Units with ``|b~| > max_bias`` are dropped (left to the linear part of Algorithm 5):
        guards the ``exp(b^2/2)`` amplification of RECOVERSCALARS.
    scalar_snr : float
        From samples, drop units whose ``a~`` has a predicted relative error above ``1 / scalar_snr``
        (first-order propagation of the contraction noise through RECOVERSCALARS).
    max_gram_condition : float
        If a Gram matrix of RECOVERSCALARS is worse conditioned, the lower-SNR unit of the closest
        pair is removed and the read-out repeated (Algorithm 4, step 4).
    single_tensor : {None, "odd", "even"}
        Ablation: decompose only ``T_{2l+1}`` ("odd") or ``T_{2l+2}`` ("even") instead of both.
    decomposer : {"joint", "jennrich"}
        ``"jennrich"``: the paper's Jennrich algorithm (one random pair of slices, best of ``n_draws``);
        ``"joint"`` (default): Jennrich as initialisation, then least squares over all mode-3 slices
        (:func:`nnrecover.tensor.joint_diagonalize`). Identical on exact input; under noise the
        joint fit is far more accurate (it uses the whole tensor, not two random slices).

    Returns
    -------
    HermiteRecovery
    """
    _check_inputs(coeffs, order, n_hidden)
    gen = check_random_state(rng)
    th = thresholds if thresholds is not None else adaptive_thresholds(coeffs, order)
    m = int(n_hidden)
    Ks = [2 * order + 1, 2 * order + 2]
    if single_tensor == "odd":
        Ks = Ks[:1]
    elif single_tensor == "even":
        Ks = Ks[1:]
    elif single_tensor is not None:
        raise InputError(f"single_tensor must be None, 'odd' or 'even', got {single_tensor!r}.")
    cands: list[dict] = []
    diag: dict[str, Any] = {"thresholds": {"mode": th.mode, "eta1": th.eta1, "eta2": th.eta2, "eta3": th.eta3,
                                           "noise": th.noise}, "tensors": {}}
    for K in Ks:
        c, dK = _tensor_candidates(coeffs, K, order, m, th, gen, n_draws, decomposer)
        diag["tensors"][f"T{K}"] = dK
        dK["n_below_eta2"] = int(sum(not x["kept"] for x in c))
        cands.extend(x for x in c if x["kept"])
    kept, removed = _deduplicate(cands, th, m)
    diag["n_candidates"] = len(cands)
    diag["n_duplicates_or_excess"] = len(removed)
    dropped: list[dict] = []
    while True:
        if not kept:
            n = coeffs.dim
            return HermiteRecovery(np.zeros(0), np.zeros(0), np.zeros((0, coeffs.n_inputs)), np.zeros((0, n)),
                                   order, False, [], [], np.zeros(0), dropped, diag)
        U = np.array([k["u"] for k in kept])
        Gcond = np.linalg.cond((U @ U.T) ** (2 if order == 1 else order))
        if len(kept) > 1 and Gcond > max_gram_condition:
            # merge the closest pair (up to sign): drop its lower-SNR member
            C = np.abs(U @ U.T) - 2 * np.eye(len(kept))
            i, j = np.unravel_index(np.argmax(C), C.shape)
            worse = i if kept[i]["snr"] < kept[j]["snr"] else j
            dropped.append({"reason": f"Gram condition {Gcond:.3g} > {max_gram_condition:g}",
                            "source": kept[worse]["source"], "snr": kept[worse]["snr"]})
            kept.pop(worse)
            continue
        sc = recover_scalars(U, coeffs, order)
        ok, rel_a = _scalar_filter(coeffs, U, order, sc, max_bias, scalar_snr)
        if ok.all():
            break
        for i in np.flatnonzero(~ok):
            reason = ("non-finite scalars" if not (np.isfinite(sc.a[i]) and np.isfinite(sc.b[i])) else
                      f"|b| = {abs(sc.b[i]):.3g} > max_bias = {max_bias:g}" if abs(sc.b[i]) > max_bias else
                      f"predicted relative error of a {rel_a[i]:.3g} > 1/scalar_snr = {1 / scalar_snr:.3g}")
            dropped.append({"reason": reason, "source": kept[i]["source"], "snr": kept[i]["snr"],
                            "a": float(sc.a[i]), "b": float(sc.b[i]), "w": coeffs.lift(U[i:i + 1])[0].tolist(),
                            "u": U[i].tolist(), "scalars_inaccurate": bool(np.isfinite(sc.a[i]) and np.isfinite(sc.b[i])
                                                                          and abs(sc.b[i]) <= max_bias)})
        kept = [k for k, o in zip(kept, ok) if o]
    diag["gram_condition"] = sc.condition
    diag["q"] = sc.q.tolist()
    diag["predicted_relative_error_a"] = rel_a.tolist()
    return HermiteRecovery(a=sc.a, b=sc.b, W=coeffs.lift(U), U=U, order=order, signs_fixed=False,
                           source=[k["source"] for k in kept], also_in=[k.get("also", []) for k in kept],
                           snr=np.array([k["snr"] for k in kept]), dropped=dropped, diagnostics=diag)


DIRECTION_STD_FACTOR = 2.0
"""Safety factor on the first-order direction errors of :func:`_direction_std` (measured at d = 1000,
m = 20, N = 3 10^5, 17 units: actual projected direction error / first-order estimate 0.7-2.3, median
1.1; the resulting FIXSIGNS ``z`` errors 0.06-3.1 first-order standard deviations, root mean square 1.3)."""


def _direction_std(coeffs: HermiteCoefficients, rec: HermiteRecovery) -> np.ndarray:
    """Error norms of the recovered directions ``u_i`` (working coordinates), for FIXSIGNS' leak term.

    A unit found in ``T_K`` (``T_K = sum_j alpha_j u_j^{(x) K} + E``) is a fixed point of
    ``u -> T_K(u, ..., u, .)`` up to normalisation, so to first order its error is the tangential part of
    the noise contraction, ``du_i = (I - u_i u_i^T) E(u_i, ..., u_i, .) / alpha_i`` (coupling through the
    other units enters with ``<u_i, u_j>^{K-2}``, small for well-separated units). Its size is measured
    by the spread of that linear map over the row groups (:meth:`HermiteCoefficients.group_std`) and
    multiplied by :data:`DIRECTION_STD_FACTOR`. The worst-case first-order Jennrich bound ``1 / snr_i
    = ||flatten E|| / |alpha_i|`` (the fallback without groups) uses the spectral norm of the whole
    ``n x n^(K-1)`` flattening instead of one contraction, and was measured 5-10x too large at d = 1000,
    m = 20, N = 3 10^5 (0.25-0.62 against actual errors 0.02-0.12): it called 9 of 17 correct signs
    unreliable and sent the output to the linear-part path."""
    fallback = 1.0 / np.maximum(rec.snr, 1e-300)
    if coeffs.exact or not coeffs.groups:
        return fallback
    out = fallback.copy()
    for i, (u, src) in enumerate(zip(rec.U, rec.source)):
        K = int(str(src).lstrip("T")) if str(src).lstrip("T").isdigit() else None
        if K is None or K not in coeffs.groups[0][0]:
            continue
        alpha = float(coeffs.rank_one(K, u[None, :])[0])
        if alpha == 0.0:
            continue

        def tangent(T, u=u, K=K, alpha=alpha):
            v = T
            for _ in range(K - 1):
                v = v @ u
            return (v - u * (u @ v)) / alpha

        spread = coeffs.group_std(K, tangent)
        if spread is not None:
            out[i] = DIRECTION_STD_FACTOR * float(np.linalg.norm(spread))
    return out


def _apply_fixsigns(coeffs: HermiteCoefficients, rec: HermiteRecovery, *, consistency: bool = False,
                    n_hidden: int | None = None) -> HermiteRecovery:
    """Algorithm 3 on the recovered units (working coordinates), recorded in the diagnostics.

    With ``consistency`` (samples only): ``z*_i = xi_i Phi(b_i)`` lies in (-1, 1), so when every one of
    the ``n_hidden`` units was recovered, a unit with ``|z_i| > 1 + 3 std`` is not explained by ``T_1``
    -- its direction or scalars are wrong (it also spoils the other units' ``z`` through the
    least-squares coupling). The most inconsistent such unit is left to the linear part, the scalars of
    the others are recomputed, and FIXSIGNS (Algorithm 3) stops. With units missing, the
    undetected (nearly linear, large ``|b|``) units add their own ``a_j Phi(b_j) w_j`` to ``T_1``, so
    ``|z_i| > 1`` says nothing against unit ``i``: it is kept (flagged ``consistent = False``). Its sign
    matters little then: the output carries a linear part (closed form or Algorithm 5), which absorbs
    a flip exactly because ``relu(t) - relu(-t) = t``.
    """
    t1_std = None if coeffs.exact else coeffs.rank_one_std(1)
    m = rec.n_units if n_hidden is None else int(n_hidden)
    while rec.n_units:
        # direction errors of the other units leak into z
        dir_std = None if coeffs.exact else _direction_std(coeffs, rec)
        sf = fix_signs(rec.a, rec.b, rec.U, coeffs.t1_projected, t1_noise=t1_std, direction_std=dir_std)
        bad = ~sf.consistent
        if not (consistency and bad.any() and 1 < rec.n_units and rec.n_units >= m):
            break
        excess = np.abs(sf.z) - 1.0 - 3.0 * (sf.z_std if sf.z_std is not None else 0.0)
        i = int(np.argmax(np.where(bad, excess, -np.inf)))
        rec.dropped.append({"reason": f"inconsistent FIXSIGNS z = {sf.z[i]:.3g} (|z| must be < 1)",
                            "source": rec.source[i], "snr": float(rec.snr[i]), "a": float(rec.a[i]),
                            "b": float(rec.b[i]), "w": rec.W[i].tolist(), "u": rec.U[i].tolist(),
                            "scalars_inaccurate": True})
        keep = np.arange(rec.n_units) != i
        U = rec.U[keep]
        sc = recover_scalars(U, coeffs, rec.order)
        ok = np.isfinite(sc.a) & np.isfinite(sc.b)
        rec.a, rec.b = np.where(ok, sc.a, rec.a[keep]), np.where(ok, sc.b, rec.b[keep])
        rec.U, rec.W = U, coeffs.lift(U)
        rec.source = [x for x, k in zip(rec.source, keep) if k]
        rec.also_in = [x for x, k in zip(rec.also_in, keep) if k]
        rec.snr = rec.snr[keep]
    else:
        rec.signs_fixed = True
        return rec
    rec.b, rec.U = sf.b, sf.U
    rec.W = coeffs.lift(sf.U)
    rec.signs_fixed = True
    rec.diagnostics["fixsigns"] = {"z": sf.z.tolist(), "z_std": None if sf.z_std is None else sf.z_std.tolist(),
                                   "reliable": sf.reliable.tolist(), "consistent": sf.consistent.tolist()}
    return rec


def algorithm6(coeffs: HermiteCoefficients, n_hidden: int, **options) -> HermiteRecovery:
    """Algorithm 6 (robust full rank): Algorithm 4 with ``l = 1``, then FIXSIGNS (Algorithm 3).

    ``options`` are those of :func:`algorithm4`. The result has ``signs_fixed = True``; units whose sign
    is unreliable (``|z_i| < 3 std``, typically strongly negative biases) are flagged in
    ``diagnostics["fixsigns"]["reliable"]``; from samples, units inconsistent with ``T_1``
    (``|z_i| > 1 + 3 std``) when every unit was recovered: the most inconsistent one is removed (see
    ``_apply_fixsigns``).
    """
    _check_inputs(coeffs, 1, n_hidden)
    if n_hidden > coeffs.n_inputs:
        raise AssumptionError(f"Algorithm 6 is the full-rank setting of Awasthi et al. 2021 (Theorem 3.1): "
                              f"it needs m <= d, got m = {n_hidden} > d = {coeffs.n_inputs}; use order 2.")
    rec = algorithm4(coeffs, 1, n_hidden, **options)
    return _apply_fixsigns(coeffs, rec, consistency=not coeffs.exact, n_hidden=n_hidden)


def algorithm1(coeffs: HermiteCoefficients, order: int, n_hidden: int, *, rng=None, n_draws: int = 5,
               decomposer: str = "jennrich") -> HermiteRecovery:
    """Algorithm 1 (exact Hermite coefficients): both tensors, RECOVERSCALARS, and FIXSIGNS when ``l = 1``.

    On exact coefficients (:func:`~.coefficients.exact_coefficients`) the ranks ``k'``, ``k''`` are the
    numerical ranks (round-off floor of :func:`adaptive_thresholds`) and the output is
    ``(a_i, b_i, w_i)`` for ``l = 1`` (Theorem 4.1) or ``(a_i, xi_i b_i, xi_i w_i)`` for ``l > 1``
    (Theorem 4.2), to round-off (erratum E11: for ``l = 1`` the result is the FIXSIGNS output).
    """
    _check_inputs(coeffs, order, n_hidden)
    th = adaptive_thresholds(coeffs, order)
    rec = algorithm4(coeffs, order, n_hidden, thresholds=th, rng=rng, n_draws=n_draws, scalar_snr=0.0,
                     decomposer=decomposer)
    if order == 1:
        rec = _apply_fixsigns(coeffs, rec)
    return rec


def complete_units(coeffs: HermiteCoefficients, rec: HermiteRecovery, order: int, n_hidden: int, *, rng=None,
                   n_draws: int = 5, dedup: float = 0.25, max_bias: float = 4.0) -> HermiteRecovery | None:
    """Candidate units for the ones Algorithm 4 did not detect (beyond the paper, used only by ``refine=True``).

    Each of ``T_{2l+1}``, ``T_{2l+2}`` is decomposed with the largest rank ``min(m, n^l)`` regardless of
    the noise threshold; components farther than ``dedup`` (up to sign) from every known unit are
    ranked by ``|alpha| / sigma^_K`` and the best ``m - m'`` join the known units, with scalars from
    RECOVERSCALARS on the enlarged set (non-finite ones or ``|b| > max_bias`` replaced by
    ``a = 0.1, b = 0``). The result is
    only a starting point for the Hermite-loss polish, which decides whether it beats the linear part.
    Returns None when no new direction is found.
    """
    gen = check_random_state(rng)
    m = int(n_hidden)
    need = m - rec.n_units
    if need <= 0:
        return None
    n = coeffs.dim
    known = [u for u in rec.U]
    cands = []
    for K in (2 * order + 1, 2 * order + 2):
        k = min(m, n ** order)
        T3 = flatten(coeffs.tensor(K), order, order, K - 2 * order)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CertificateWarning)
                res = joint_diagonalize(np.moveaxis(T3, 2, 0), k, rng=gen, n_draws=n_draws, symmetric=True,
                                        rank_tol=0.0)
        except (AssumptionError, InputError, np.linalg.LinAlgError):
            continue
        U = read_units(res.factors[0], order, n)
        alpha, _ = gram_lstsq(U, coeffs.rank_one(K, U), K)
        noise = max(float(coeffs.noise.get(K, 0.0)), 1e-300)
        cands.extend((abs(al) / noise, u) for al, u in zip(alpha, U))
    new = []
    for snr, u in sorted(cands, key=lambda c: -c[0]):
        if len(new) == need:
            break
        if all(min(np.linalg.norm(u - v), np.linalg.norm(u + v)) >= dedup for v in known + new):
            new.append(u)
    if not new:
        return None
    U = np.vstack([rec.U, np.array(new)])
    sc = recover_scalars(U, coeffs, order)
    a, b = sc.a.copy(), sc.b.copy()
    a[: rec.n_units], b[: rec.n_units] = rec.a, rec.b
    bad = ~(np.isfinite(a) & np.isfinite(b)) | (np.abs(b) > max_bias)
    a[bad], b[bad] = 0.1, 0.0

    return replace(rec, a=a, b=b, U=U, W=coeffs.lift(U), source=rec.source + ["completion"] * len(new),
                   also_in=rec.also_in + [[] for _ in new], snr=np.concatenate([rec.snr, np.zeros(len(new))]))


def hermite_coefficients(source: Any, order: int, n_hidden: int, **options) -> HermiteCoefficients:
    """Hermite coefficient tensors ``T_0, ..., T_{2l+2}`` in the learner's working coordinates.

    ``source`` is a :class:`~nnrecover.TwoLayerNetwork` (exact, Lemma 3.5) or data
    (``(X, Y)``, dask arrays, a SampleStream...; eq. (6) estimates). For ``l = 1`` the tensors of order
    ``>= 2`` are projected onto the ``m``-dimensional range of ``T_2``. ``options`` go to
    :func:`~nnrecover.learners.awasthi2021.coefficients.estimate_coefficients` (samples) or
    :func:`~nnrecover.learners.awasthi2021.coefficients.exact_coefficients` (``basis``).
    """
    if isinstance(source, TwoLayerNetwork):
        return exact_coefficients(source, order, n_hidden, basis=options.pop("basis", "range" if order == 1
                                                                              else "identity"), **options)
    return estimate_coefficients(source, order, n_hidden, **options)


def _make_thresholds(spec: Any, coeffs: HermiteCoefficients, order: int, m: int, epsilon: float | None,
                     bound: float | None, snr: float = 3.0, dedup: float = 0.25) -> Thresholds:
    """The thresholds ``eta_1, eta_2, eta_3`` of Algorithm 4 from the learner's ``thresholds`` argument:
    "adaptive" (:func:`adaptive_thresholds`), "paper" (:func:`paper_thresholds`, Theorem D.1, with
    ``s_m(W^{(.)l})`` estimated from ``T_{2l}``), a dict of the three values, or a :class:`Thresholds`."""
    if isinstance(spec, Thresholds):
        return spec
    if spec == "adaptive":
        return adaptive_thresholds(coeffs, order, snr=snr, dedup=dedup)
    if spec == "paper":
        if epsilon is None or bound is None:
            raise InputError("thresholds='paper' needs epsilon (target accuracy) and bound (B of the "
                             "B-boundedness assumption).")
        # s_m(W^{(.)l}) is not observable; flatten(f^_{2l}, l, l) = W^{(.)l} D W^{(.)l T} with
        # |D_ii| <= B sqrt((2l-2)!) / sqrt(2 pi) (Cramer's bound, Claim D.8) gives the estimate below
        sv = linalg.svdvals(flatten(coeffs.tensor(2 * order), order, order))
        s_m = sv[min(m, sv.size) - 1]
        cramer = bound * math.sqrt(math.factorial(2 * order - 2)) / math.sqrt(2 * math.pi)
        s_min = math.sqrt(max(s_m, 1e-300) / cramer)
        return paper_thresholds(epsilon, bound, m, order, min(s_min, 1.0))
    if isinstance(spec, dict):
        missing = {"eta1", "eta2", "eta3"} - set(spec)
        if missing:
            raise InputError(f"a thresholds dict needs the keys eta1, eta2, eta3; missing {sorted(missing)}.")
        Ks = (2 * order + 1, 2 * order + 2)
        as_dict = lambda v: dict(v) if isinstance(v, dict) else {K: float(v) for K in Ks}  # noqa: E731
        return Thresholds(as_dict(spec["eta1"]), as_dict(spec["eta2"]), float(spec["eta3"]),
                          {K: float("nan") for K in Ks}, "user", None)
    raise InputError(f"thresholds must be 'adaptive', 'paper', a dict of eta1/eta2/eta3 or a Thresholds, "
                     f"got {spec!r}.")

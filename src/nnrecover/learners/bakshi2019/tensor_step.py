"""Approximate hidden weights from Gaussian moments (Bakshi et al. 2019, Section 4.2; Algorithm 4 steps 1-4, Theorem 5).

Stein's identity for ``x ~ N(0, I_d)`` and unit rows ``V*_j`` (Bakshi et al. Section 4.2):

    E[y He_r(x)] = sum_j c_r(f) U*_{:,j} ⊗ V*_j^{⊗r},     c_r(f) = E_z[f(z) He_r(z)],

so every order ``r`` with ``c_r(f) != 0`` gives a tensor whose CP factors are the hidden directions.
The paper's Algorithm 4 uses ``r = 3`` (the score tensor ``S_3``). For ReLU ``c_3 = 0`` (``relu(z) =
z/2 + |z|/2`` and ``|z|`` is even), so that tensor vanishes in expectation and Algorithm 4 cannot work
as written (erratum to Algorithm 4): :func:`choose_order` raises
:class:`~nnrecover.errors.AssumptionError` for ``order=3`` with ReLU and picks the order from the first
non-zero Hermite coefficient otherwise.

Estimators (all return unit vectors ``v_j ≈ ±V*_j`` in unknown order and sign):

``order=2`` (Option A, needs ``m >= 2`` outputs so that there are at least two slices)
    ``T_2 = E[y ⊗ He_2(x)] = c_2 sum_j U*_j ⊗ V*_j ⊗ V*_j`` (m x d x d), decomposed by joint
    diagonalisation of its projected slices (Jennrich pencil + ALS over all slices,
    :func:`nnrecover.tensor.joint_diagonalize`). Plain single-pair Jennrich varies widely between
    draws; the indefinite whitening of JSA15 is invalid (erratum to Algorithm 4).
``order=4`` (Option B, any m including m = 1)
    ``T_4 = E[y ⊗ He_4(x̃)]`` in the k-dimensional span ``x̃ = P^T x``; its k² mode-(3, 4) slices
    ``c_4 sum_j <θ, U*_j> w_ja w_jc w_j w_j^T`` are jointly diagonalised.
``order=3`` (Algorithm 4 / Option C, activations with ``c_3 != 0`` such as ``relu_power(2)``)
    the projected ``T_3`` with its k·K slices, same decomposition.

Span ``P`` (d x k) of the hidden rows: ``"linear"`` uses ``E[y x^T] = c_1 U* V*`` (top-k right
singular vectors; needs ``c_1 != 0`` and ``m >= k``; one cheap pass), ``"second"`` uses the top-k
eigenvectors of ``sum_r M_r^2`` with ``M_r = E[y_r He_2(x)]`` (Algorithm 4, Option A step 2; costs
``O(n m d^2)``). With the linear span the outputs are also compressed to the k-dimensional column span
of ``E[y x^T]``. Only ``O(n k^r)`` work is then done per order-``r`` statistic, and no tensor in d
dimensions is ever formed.

Control variates: ``He_r`` (r >= 2) is orthogonal to every polynomial of degree <= 1, so
replacing ``y`` by ``y - E[y] - E[y x^T] x`` leaves ``E[y He_r(x)]`` unchanged and removes the variance
of the constant and linear parts of the network (about half of the variance for ReLU).

Non-identity covariance (Remark 3): with ``whiten=True`` the inputs are whitened with
the estimated ``Σ^{-1/2}`` (``x' = Σ^{-1/2} x``, ``V' = V* Σ^{1/2}``) and the directions mapped back as
``V ∝ V' Σ^{-1/2}``.

Streaming: every statistic is a :class:`~nnrecover.moments.Statistic` fed chunk by chunk (arrays,
memory maps, re-iterable chunk streams, dask arrays); the first ``skip`` rows (the refinement sample
of the exact step, sample splitting) are left out.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import scipy.linalg

from ..._validation import check_positive_int, check_random_state
from ...activations import get_activation
from ...data import accumulate, as_data_source
from ...data.views import tail
from ...distributions import StandardGaussian
from ...errors import AssumptionError, AssumptionWarning, CertificateWarning, InputError
from ...hermite.statistics import HermiteTensorStatistic
from ...moments.base import Statistic
from ...moments.statistics import (
    Covariance,
    InputDeviation,
    SecondMoment,
    excess_kurtosis_deviation,
    input_deviation_from_standard,
)
from ...network import TwoLayerNetwork
from ...tensor import jennrich, joint_diagonalize, whiten
from ._common import check_flag

__all__ = ["ApproximateResult", "choose_order", "approximate_hidden_weights",
           "approximate_hidden_weights_population", "decompose_projected", "HERMITE_TOL"]

#: |c_r(f)| below this counts as zero (ReLU's c_3 is 0 to round-off)
HERMITE_TOL = 1e-8


@dataclass
class ApproximateResult:
    """Approximate hidden directions from moments.

    Attributes
    ----------
    hidden_weights : ndarray (k, d)
        Unit rows ``v_j ≈ ξ_j V*_j`` (unknown signs ``ξ_j`` and order).
    diagnostics : dict
        ``order``, ``span``, ``coefficients`` (``c_0..c_4`` of the activation), ``span_singular_values``,
        ``span_gap`` (``s_{k+1}/s_k``), ``decomposition`` (joint-diagonalisation diagnostics),
        ``n_moment_samples``, ``whitened``, ``time``.
    """

    hidden_weights: np.ndarray
    diagnostics: dict = field(default_factory=dict)


def choose_order(activation: Any, n_outputs: int, order: "int | str" = "auto") -> tuple[int, np.ndarray]:
    """The moment order used by the tensor step, from the activation's Hermite coefficients.

    ``"auto"``: the smallest ``r >= 2`` with ``|c_r(f)| > HERMITE_TOL`` that is usable with ``n_outputs``
    (order 2 needs at least two outputs: one matrix slice per output). ReLU: 2 (``m >= 2``) or 4
    (``m = 1``, since ``c_3 = 0``); ``relu_power(2)``: 2 or 3; ``exp_minus_one``: 2 or 3.

    Raises
    ------
    AssumptionError
        The requested order has ``c_r(f) = 0`` (order 3 with ReLU: Algorithm 4 as written cannot work),
        or order 2 with one output, or no usable order up to 4.
    """
    act = get_activation(activation)
    coeffs = np.asarray(act.hermite_coefficients(4), dtype=float)
    scale = max(float(np.max(np.abs(coeffs))), 1e-300)
    nonzero = np.abs(coeffs) > HERMITE_TOL * scale
    if order == "auto":
        for r in (2, 3, 4):
            if nonzero[r] and (r > 2 or n_outputs >= 2):
                return r, coeffs
        raise AssumptionError(f"activation {act.spec!r} has c_2 = c_3 = c_4 = 0 (or c_2 only, with one output): "
                              "no moment tensor of order <= 4 identifies the hidden units (Algorithm 4, Theorem 5).")
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order not in (2, 3, 4):
        raise InputError(f"order must be 'auto', 2, 3 or 4, got {order!r}.")
    r = int(order)
    shown = 0.0 if abs(coeffs[r]) < 1e-300 else float(coeffs[r])     # no "-0" in the message
    if not nonzero[r]:
        extra = (" For ReLU, c_3 = E[relu(z) He_3(z)] = E[z^4; z > 0] - 3 E[z^2; z > 0] = 3/2 - 3/2 = 0, so the "
                 "third-order score tensor of Algorithm 4 vanishes in expectation for every U*, V* and the "
                 "algorithm cannot work as written (erratum to Algorithm 4); use order=2 "
                 "(Option A) or order=4 (Option B).") if act.name == "relu" and r == 3 else ""
        raise AssumptionError(f"order={r} needs the Hermite coefficient c_{r}(f) = E[f(z) He_{r}(z)] to be "
                              f"non-zero, but c_{r}({act.spec}) = {shown:.3g}.{extra}")
    if r == 2 and n_outputs < 2:
        raise AssumptionError("order=2 (Option A) needs at least two outputs: with m = 1 the order-2 moment is a "
                              "single matrix, whose eigenvectors do not identify non-orthogonal units; use order=4 "
                              "(Option B) or 3.")
    return r, coeffs


# --------------------------------------------------------------------------------------- data plumbing

class _Transformed(Statistic):
    """``inner`` fed with ``transform(X, Y)`` of every chunk, the transform computed where the chunk is
    added: in a pass's worker threads, so that the projection of a chunk overlaps with the reading (or
    generation) of the next ones instead of running in the reading thread. Chunk-parallel: each chunk's
    partial is merged in chunk order, so the result does not depend on the number of workers."""

    parallel_chunks = True

    def __init__(self, inner: Statistic, transform: Callable) -> None:
        self._template, self.transform = inner.empty_like(), transform
        super().__init__()

    def _reset(self) -> None:
        self.inner = self._template.empty_like()

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        self.inner._add(*self.transform(X, Y))

    def _merge(self, other: "_Transformed") -> None:
        self.inner.merge(other.inner)

    def finalize(self) -> Any:
        return self.inner.finalize()


def _transformed_pass(stat: Statistic, source, skip: int, transform: Callable, chunk_size: int | None):
    """``(statistic, data)`` for ``accumulate``: the rows after ``skip`` through ``transform`` into ``stat``.
    Dask sources transform their blocks on the cluster (:func:`nnrecover.data.views.tail`); the others in the pass's workers
    (:class:`_Transformed`)."""
    if getattr(source, "is_dask", False):
        return stat, tail(source, skip, transform, chunk_size)
    return _Transformed(stat, transform), tail(source, skip, None, chunk_size)


def _top_right(B: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    U, s, Vt = scipy.linalg.svd(B, full_matrices=False, check_finite=False)
    return U[:, :k], s, Vt[:k].T


def _span_second(M2: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k eigenvectors of ``sum_r M_r^2`` (PSD, range = span of the hidden rows)."""
    S = np.einsum("rab,rbc->ac", M2, M2)
    lam, vec = np.linalg.eigh(0.5 * (S + S.T))
    order = np.argsort(-lam)
    return vec[:, order[:k]], np.sqrt(np.maximum(lam[order], 0.0))


def decompose_projected(T: np.ndarray, k: int, *, method: str = "joint", rng: Any = None, n_draws: int = 8
                        ) -> tuple[np.ndarray, dict]:
    """CP factors of a projected symmetric moment tensor ``T`` of shape ``(K,) + (k,)*r``.

    The modes after the first two hidden modes are folded into the slice index, giving
    ``K k^{r-2}`` symmetric k x k slices ``N_s = sum_j λ_{s,j} w_j w_j^T``.

    Methods:

    ``"joint"`` (default)
        joint diagonalisation of all slices (:func:`nnrecover.tensor.joint_diagonalize`: Jennrich
        pencil start, ALS over every slice);
    ``"jennrich"``
        plain Jennrich, the best of ``n_draws`` random pencils (Algorithm 4, Option A step 4);
    ``"whiten"``
        Algorithm 4, Option A step 5: find ``θ`` with ``N(θ) = sum_s θ_s N_s`` definite (``λ(θ)`` of one
        sign: random trials, then, if none is definite, ``θ`` solving ``λ(θ) = 1`` for the Jennrich
        estimate of the ``λ_{s,j}``), whiten with ``N(θ)^{-1/2}`` (:func:`nnrecover.tensor.whiten`), and
        take the orthogonal eigenvectors ``R`` of the whitened ``N(θ')`` with the best eigen-gap over
        ``n_draws`` random ``θ'``; ``w_j ∝ N(θ)^{1/2} r_j``. JSA15's PSD whitening of an arbitrary
        ``M_2(θ)`` is invalid because ``M_2(θ)`` is indefinite (§2.4.2 item 2): the definiteness of
        ``N(θ)`` is checked, never assumed.

    Returns the unit factors (k, k) (columns ``w_j``) and diagnostics.
    """
    K, r = T.shape[0], T.ndim - 1
    slices = np.moveaxis(T.reshape((K,) + (k,) * r), (1, 2), (-2, -1)).reshape(-1, k, k)
    slices = 0.5 * (slices + slices.transpose(0, 2, 1))
    if method == "joint":
        # Jennrich's pencil only initialises the ALS here: its findings (complex eigenvalue pairs of a
        # noisy pencil, small gaps) are diagnostics of the start, and the learners certify the answer
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CertificateWarning)
            res = joint_diagonalize(slices, k, rng=rng, n_draws=n_draws, symmetric=True)
        for w in caught:
            if not issubclass(w.category, CertificateWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        diag = {key: val for key, val in res.diagnostics.items() if key != "jennrich"}
        diag["jennrich_eigenvalue_gap"] = res.diagnostics["jennrich"].get("eigenvalue_gap")
        diag["jennrich_complex_eigenvalues"] = res.diagnostics["jennrich"].get("complex_eigenvalues")
        diag["initialisation_notes"] = [str(w.message) for w in caught
                                        if issubclass(w.category, CertificateWarning)]
        diag["method"] = "joint"
        return res.factors[0], diag
    if method == "jennrich":
        res = jennrich(np.ascontiguousarray(slices.transpose(1, 2, 0)), k, rng=rng, n_draws=n_draws,
                       symmetric=True, warn=False)
        diag = {key: val for key, val in res.diagnostics.items() if key != "per_draw"}
        diag["method"] = "jennrich"
        return res.factors[0], diag
    if method == "whiten":
        return _whiten_decompose(slices, k, check_random_state(rng), n_draws)
    raise InputError(f"method must be 'joint', 'jennrich' or 'whiten', got {method!r}.")


def _whiten_decompose(slices: np.ndarray, k: int, gen: np.random.Generator, n_draws: int) -> tuple[np.ndarray, dict]:
    S = slices.shape[0]
    scale = max(float(np.linalg.norm(slices)), np.finfo(float).tiny)

    def definiteness(theta):
        lam = np.linalg.eigvalsh(np.tensordot(theta, slices, axes=(0, 0)))
        if lam[-1] < 0:
            lam = -lam[::-1]
        return float(lam[0] / lam[-1]) if lam[-1] > 0 else -np.inf

    best_theta, best = None, -np.inf
    for _ in range(64):                                     # random trials for a definite combination
        th = gen.standard_normal(S)
        val = definiteness(th)
        if val > best:
            best_theta, best = th, val
    source = "random"
    if best <= 1e-3:                                        # none definite enough: θ with λ(θ) = 1
        init = jennrich(np.ascontiguousarray(slices.transpose(1, 2, 0)), k, rng=gen, n_draws=n_draws,
                        symmetric=True, warn=False)
        W0 = init.factors[0]
        G = np.linalg.pinv(W0)
        Lam = np.einsum("ia,sab,jb->sij", G, slices, G)[:, np.arange(k), np.arange(k)]   # (S, k)
        th = np.linalg.lstsq(Lam.T, np.ones(k), rcond=None)[0]
        val = definiteness(th)
        if val > best:
            best_theta, best, source = th, val, "jennrich"
    N = np.tensordot(best_theta, slices, axes=(0, 0))
    if np.linalg.eigvalsh(N)[-1] <= 0:
        N = -N
    wres = whiten(N, k)                                     # AssumptionError if N is not definite
    Wh = wres.whitener
    best_gap, best_R = -np.inf, None
    for _ in range(max(n_draws, 1)):
        th2 = gen.standard_normal(S)
        Mw = Wh @ np.tensordot(th2, slices, axes=(0, 0)) @ Wh.T
        lam, R = np.linalg.eigh(0.5 * (Mw + Mw.T))
        gap = float(np.min(np.diff(lam)) / max(np.max(np.abs(lam)), np.finfo(float).tiny)) if k > 1 else 1.0
        if gap > best_gap:
            best_gap, best_R = gap, R
    Wf = wres.unwhitener @ best_R
    Wf /= np.linalg.norm(Wf, axis=0, keepdims=True)
    return Wf, {"method": "whiten", "definiteness": best, "theta_source": source, "eigenvalue_gap": best_gap,
                "whitening": dict(wres.diagnostics), "slice_scale": scale}


def _finish_directions(W: np.ndarray, P: np.ndarray, L: np.ndarray | None) -> np.ndarray:
    V = (P @ W).T                              # rows in (whitened) input coordinates
    if L is not None:
        V = V @ L                              # V x = V' x' with x' = L x
    return V / np.linalg.norm(V, axis=1, keepdims=True)


def approximate_hidden_weights(X: Any, Y: Any = None, n_hidden: int | None = None, *, activation: Any = "relu",
                               order: "int | str" = "auto", span: str = "auto", control_variates: bool = True,
                               whiten: bool = False, skip: int = 0, n_draws: int = 8,
                               paper_noise: bool = False, decomposition: str = "joint",
                               chunk_size: int | None = None, rng: Any = None) -> ApproximateResult:
    """Approximate hidden directions ``v_j ≈ ±V*_j`` from Gaussian moments (Algorithm 4 steps 1-4, Options A-C).

    Parameters
    ----------
    X, Y : data
        ``(n, d)`` inputs and ``(n,)``/``(n, m)`` outputs as arrays, memory maps or dask arrays, or ``X``
        an iterable of ``(X, Y)`` chunks (re-iterable: two or three passes are made) with ``Y=None``.
    n_hidden : int
        ``k``.
    activation : str or Activation, default "relu"
    order : {"auto", 2, 3, 4}
        Moment order (:func:`choose_order`).
    span : {"auto", "linear", "second"}
        How the k-dimensional span of the hidden rows is estimated (module docstring). "auto": "linear"
        when ``c_1 != 0`` and ``m >= k``, else "second".
    control_variates : bool, default True
        Subtract the fitted constant and linear parts of ``y`` (unbiased for r >= 2, lower variance).
    whiten : bool, default False
        Whiten the inputs with the estimated second moment (inputs ``N(0, Σ)``, Remark 3).
    skip : int, default 0
        Leave out the first ``skip`` rows (reserved for the exact refinement: sample splitting).
    n_draws : int, default 8
        Random pencils tried by the joint-diagonalisation initialisation.
    paper_noise : bool, default False
        Add the ``N(0, 1)`` matrix ``G`` to the outputs (Algorithm 4 step 2; an analysis device of
        Lemma 13 that only adds variance, off by default).
    decomposition : {"joint", "jennrich", "whiten"}, default "joint"
        How the projected tensor is decomposed (:func:`decompose_projected`).
    chunk_size : int, optional
        Rows per chunk when reading arrays.
    rng : int, Generator or None
        Randomness of the pencils and of ``paper_noise``.

    Returns
    -------
    ApproximateResult

    Raises
    ------
    InputError
        Bad data or arguments, fewer than ``max(4 d, 100)`` moment samples.
    AssumptionError
        Unusable order (ReLU and order 3), ``span="linear"`` without ``c_1`` or with ``m < k``.
    """
    t0 = time.perf_counter()
    gen = check_random_state(rng)
    source = as_data_source(X, Y)
    source.require_targets("the tensor step of Bakshi et al.")
    info = source.info
    k = check_positive_int(n_hidden, "n_hidden")
    skip = check_positive_int(skip, "skip", minimum=0)
    act = get_activation(activation)
    if span not in ("auto", "linear", "second"):
        raise InputError(f"span must be 'auto', 'linear' or 'second', got {span!r}.")
    if decomposition not in ("joint", "jennrich", "whiten"):
        raise InputError(f"decomposition must be 'joint', 'jennrich' or 'whiten', got {decomposition!r}.")
    whiten = check_flag(whiten, "whiten")
    control_variates = check_flag(control_variates, "control_variates")
    paper_noise = check_flag(paper_noise, "paper_noise")
    n_draws = check_positive_int(n_draws, "n_draws")
    m_hint = info.n_outputs
    if m_hint is None:
        m_hint = source.peek()[1].shape[1]
    r, coeffs = choose_order(act, m_hint, order)
    noise_seed = int(gen.integers(0, 2**63)) if paper_noise else None

    # pass 1: E[x], E[y], E[y x^T] on the moment rows; E[x x^T] on a strided subset of them unless it
    # whitens (_InputMoments)
    d_hint = info.n_inputs if info.n_inputs is not None else source.peek()[0].shape[1]
    stride = 1 if whiten else gram_stride(d_hint, k, m_hint)
    base = tail(source, skip, _noise_fn(noise_seed), chunk_size)
    second = accumulate(_InputMoments(stride), base, chunk_size=chunk_size)
    n_mom = int(second.n or 0)
    if n_mom == 0:
        raise InputError(f"the tensor step has no moment samples left (n_samples = {skip}, all reserved for the "
                         "exact / sign step); pass more samples or reserve fewer rows.")
    d, m = second.n_inputs, second.n_outputs
    if k > d:
        raise AssumptionError(f"V* must have full row rank k <= d (Bakshi et al. Section 1); got k={k} > d={d}.")
    if n_mom < max(4 * d, 100):
        raise InputError(f"the tensor step needs at least max(4 d, 100) = {max(4 * d, 100)} moment samples "
                         f"after the {skip} refinement rows; got {n_mom}.")
    sec = second.finalize()
    deviation, kurtosis = _check_input_law(sec, whiten)
    L = None
    if whiten:
        S = 0.5 * (sec.xx + sec.xx.T)
        lam, Q = np.linalg.eigh(S)
        if lam[0] <= 1e-12 * lam[-1]:
            raise AssumptionError("the input second moment is singular; whitening (Remark 3) needs a "
                                  "non-degenerate Gaussian N(0, Σ).")
        L = (Q / np.sqrt(lam)) @ Q.T           # Σ^{-1/2}
    Lx = np.eye(d) if L is None else L
    ybar = sec.y
    Byx = sec.yx @ Lx                          # E[y x'^T]
    use = span
    if use == "auto":
        use = "linear" if (abs(coeffs[1]) > HERMITE_TOL and m >= k) else "second"
    if use == "linear" and (abs(coeffs[1]) <= HERMITE_TOL or m < k):
        raise AssumptionError(f"span='linear' needs c_1(f) != 0 and m >= k (E[y x^T] = c_1 U* V* has rank k); "
                              f"got c_1 = {coeffs[1]:.3g}, m = {m}, k = {k}. Use span='second'.")
    cv_mean = ybar if control_variates else np.zeros(m)
    cv_lin = Byx if control_variates else np.zeros((m, d))
    diag: dict = {"order": r, "span": use, "coefficients": coeffs, "n_moment_samples": int(n_mom),
                  "input_deviation": {"mean": deviation.mean, "covariance": deviation.covariance,
                                      "mean_tolerance": deviation.mean_tolerance,
                                      "covariance_tolerance": deviation.covariance_tolerance,
                                      "kurtosis": kurtosis[0], "kurtosis_tolerance": kurtosis[1],
                                      "plausible": deviation.plausible and kurtosis[0] <= kurtosis[1]},
                  "whitened": bool(whiten), "control_variates": bool(control_variates)}

    def resid_fn(Qout, P=None, span_scale=None):
        # with a basis P (d, k) the chunk comes back projected, z = P^T x', with the control variate's
        # linear part from the same product x' [P, B^T]: the statistic then works in k dimensions on
        # (z, r), one O(n d (k + m)) product per chunk, and the pass carries n x (k + m) values, not n x d.
        # When P and Qout are the top-k singular vectors of B = E[y x'^T] itself (span "linear"),
        # B^T Qout = P diag(s_k) exactly, so r Qout = y Qout - ybar Qout - z diag(s_k): the product is
        # x' P alone, O(n d k)
        Mp = None if (P is None or span_scale is not None) else np.hstack([P, cv_lin.T])
        cv_q = None if span_scale is None else cv_mean @ Qout
        PT = None if P is None else np.ascontiguousarray(P.T)
        QoutT = None if Qout is None else np.ascontiguousarray(Qout.T)
        z_scale = None if span_scale is None else (span_scale if control_variates else np.zeros_like(span_scale))

        def fn(Xc, Yc):
            if noise_seed is not None:
                Xc, Yc = _noise_fn(noise_seed)(Xc, Yc)
            Xw = Xc if L is None else Xc @ L
            if z_scale is not None:
                # computed as P^T X'^T, Q^T Y^T: the rows come back with samples in columns (F-ordered
                # views), the layout of the moment sums (hermite.statistics._raw_sums), and the thin product
                # is cheaper in this orientation (0.126 against 0.144 s per 1e6 rows at d = 100, k = 10)
                ZT = PT @ Xw.T
                RT = QoutT @ Yc.T
                RT -= cv_q[:, None]
                RT -= ZT * z_scale[:, None]
                return ZT.T, RT.T
            if Mp is None:
                R = Yc - cv_mean - Xw @ cv_lin.T
                return Xw, (R if Qout is None else R @ Qout)
            ZB = Xw @ Mp
            R = Yc - cv_mean - ZB[:, P.shape[1]:]
            return np.ascontiguousarray(ZB[:, :P.shape[1]]), (R if Qout is None else R @ Qout)
        return fn

    if use == "linear":
        Qout, s, P = _top_right(Byx, k)
        diag["span_singular_values"] = s[: k + 1].copy()
        diag["span_gap"] = float(s[k] / s[k - 1]) if s.size > k else 0.0
    else:
        Qout = None
        full = accumulate(*_transformed_pass(HermiteTensorStatistic(2), source, skip, resid_fn(None), chunk_size),
                          chunk_size=chunk_size)
        M2 = full.finalize()                   # (m, d, d)
        P, s = _span_second(M2, k)
        diag["span_singular_values"] = s[: k + 1].copy()
        diag["span_gap"] = float(s[k] / s[k - 1]) if s.size > k and s[k - 1] > 0 else 0.0
        if r == 2:
            T = np.einsum("da,rde,eb->rab", P, M2, P)
    if use == "linear" or r != 2:
        # P has orthonormal columns, so T_r[P, ..., P] is the Hermite tensor of z = P^T x in k dimensions
        # (HermiteTensorStatistic with a basis: He_r(x)[P, ..., P] = He_r(P^T x))
        span_scale = s[:k].copy() if use == "linear" else None
        stat = accumulate(*_transformed_pass(HermiteTensorStatistic(r), source, skip,
                                             resid_fn(Qout, P, span_scale), chunk_size), chunk_size=chunk_size)
        T = stat.finalize()
    W, jd = decompose_projected(T, k, method=decomposition, rng=gen, n_draws=n_draws)
    diag["decomposition"] = jd
    V = _finish_directions(W, P, L)
    diag["time"] = time.perf_counter() - t0
    return ApproximateResult(V, diag)


def gram_stride(d: int, k: int, m: int) -> int:
    """Every how many moment rows the tensor step adds to E[x x^T] when it does not whiten.

    Without whitening E[x x^T] only serves the input-law check (:func:`_check_input_law`); over all rows
    it costs ``n d^2`` flops, ``d / (k + m)`` times the pass's other products (``Y^T X`` and the
    projection ``X P``, plus ``X B^T`` for the span from ``E[y He_2(x)]``), which dominates at large d (1e12 flops at d = 1000, n = 1e6). Every
    ``max(1, d // (k + m))``-th row keeps it at the cost of those products; the check's tolerance is
    then that of ``n / stride`` rows (about ``2 sqrt(d stride / n)`` in spectral norm).
    """
    return max(1, int(d) // max(int(k) + int(m), 1))


@dataclass(frozen=True, eq=False)
class _InputMomentValues:
    x: np.ndarray          # E[x], every row
    y: np.ndarray          # E[y], every row
    n: int                 # rows
    yx: np.ndarray         # E[y x^T], every row
    xx: np.ndarray         # E[x x^T], every stride-th row
    n_xx: int              # rows in xx
    m2: np.ndarray         # E[x_j^2], every row
    m4: np.ndarray         # E[x_j^4], every row


#: bytes of X per row block of :class:`_InputMoments`: the block and its square stay in a core's L2 cache
#: while the block's five products read them, so the chunk comes from memory once
_L2_BLOCK_BYTES = 1 << 19


class _InputMoments(Statistic):
    """Pass 1 of the tensor step: ``E[x]``, ``E[y]``, ``E[y x^T]`` and the per-coordinate ``E[x_j^2]``,
    ``E[x_j^4]`` on every row, ``E[x x^T]`` on every ``stride``-th row of each chunk
    (:func:`gram_stride`). Chunk-parallel: the pass's workers share its chunks (the result does not
    depend on their number)."""

    parallel_chunks = True
    _names = ("_sx", "_sy", "_yx", "_xx", "_s2", "_s4")

    def __init__(self, stride: int = 1) -> None:
        self.stride = int(stride)
        super().__init__()

    def _reset(self) -> None:
        for name in self._names:
            setattr(self, name, None)
        self._n_xx = 0

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        n, d = X.shape
        m = Y.shape[1]
        rows = min(n, max(64, _L2_BLOCK_BYTES // (8 * max(d, 1))))
        ones, sq = np.ones(rows), np.empty((rows, d))
        s2, s4 = np.zeros(d), np.zeros(d)
        # [Y, 1]^T X holds E[y x^T] and E[x] in one product (no read of the block of its own for E[x])
        Y1 = np.empty((n, m + 1))
        Y1[:, :m] = Y
        Y1[:, m] = 1.0
        y1x = np.zeros((m + 1, d))
        for start in range(0, n, rows):
            Xb = X[start:start + rows]
            nb = Xb.shape[0]
            y1x += Y1[start:start + rows].T @ Xb
            x2 = np.multiply(Xb, Xb, out=sq[:nb])
            s2 += ones[:nb] @ x2
            x2 *= x2
            s4 += ones[:nb] @ x2
        Xs = X if self.stride == 1 else np.ascontiguousarray(X[::self.stride])
        parts = (y1x[m], np.einsum("ij->j", Y), y1x[:m], Xs.T @ Xs, s2, s4)
        if self._sx is None:
            for name, part in zip(self._names, parts):
                setattr(self, name, part)
        else:
            for name, part in zip(self._names, parts):
                getattr(self, name).__iadd__(part)
        self._n_xx += Xs.shape[0]

    def _merge(self, other: "_InputMoments") -> None:
        if other._sx is None:
            return
        for name in self._names:
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(self, name, theirs.copy() if mine is None else mine + theirs)
        self._n_xx += other._n_xx

    def finalize(self) -> _InputMomentValues:
        self.require(1, "_InputMoments")
        n = self.n
        return _InputMomentValues(self._sx / n, self._sy / n, n, self._yx / n, self._xx / self._n_xx, self._n_xx,
                                  self._s2 / n, self._s4 / n)


def _check_input_law(sec: _InputMomentValues, whiten: bool):
    """Measure how far the moment rows are from a Gaussian and warn (:class:`AssumptionWarning`) if
    sampling alone does not explain it (failure probability 1e-3).

    Stein's identity ``E[y He_r(x)] = sum_j c_r(f) U*_j V*_j^{(x) r}`` behind the tensor step holds only for
    Gaussian x. Mean and covariance: :func:`nnrecover.moments.input_deviation_from_standard` (with
    ``whiten=True``, Remark 3's x ~ N(0, Sigma), only the mean). Tails: the excess kurtosis
    ``max_j |E[x_j^4] / E[x_j^2]^2 - 3|`` of the coordinates (each Gaussian marginal has 3, also under
    ``Sigma``), which catches standardised heavy tails (e.g. Student-t scaled to unit variance) that the
    covariance does not see, with the tolerance of :func:`nnrecover.moments.excess_kurtosis_deviation`.
    Returns the :class:`~nnrecover.moments.InputDeviation` and ``(kurtosis deviation, tolerance)``.
    """
    xx = sec.xx - np.outer(sec.x, sec.x)
    cov = Covariance(sec.x, sec.y, xx, sec.yx - np.outer(sec.y, sec.x), None, int(sec.n_xx), 0)
    dev = input_deviation_from_standard(cov)
    d, n = sec.x.shape[0], int(sec.n)
    if sec.n_xx < n:
        # the mean is measured on every row: its tolerance is that of all n rows
        # (the tolerance of input_deviation_from_standard for n rows, failure probability 1e-3)
        mean_tol = math.sqrt(2.0 * math.log(4.0 * d / 1e-3) / n)
        dev = InputDeviation(dev.mean, dev.covariance, mean_tol, dev.covariance_tolerance, n)
    kurt, kurt_tol = excess_kurtosis_deviation(sec.m2, sec.m4, n)
    bad_mean = dev.mean > dev.mean_tolerance
    bad_cov = (not whiten) and dev.covariance > dev.covariance_tolerance
    bad_tail = not kurt <= kurt_tol
    if bad_mean or bad_cov or bad_tail:
        law = "N(0, Sigma)" if whiten else "N(0, I)"
        tail = (f"; excess kurtosis of the coordinates {kurt:.3g} (tolerance {kurt_tol:.3g}; heavy tails)"
                if bad_tail else "")
        advice = ("Centre the inputs." if bad_mean and not (bad_cov or bad_tail) else
                  "If the inputs are Gaussian with another covariance use whiten=True; heavy-tailed inputs are "
                  "outside the model." if bad_cov and not bad_tail else "Heavy-tailed inputs are outside the model.")
        head = dev.message if (bad_mean or bad_cov) else dev.message.replace("inputs look like", "inputs are not")
        warnings.warn(f"{head[:-1]}{tail}. Bakshi et al. 2019 assume x ~ {law} (Stein's identity of the "
                      f"tensor step, Section 4.2{'; Remark 3' if whiten else ''}); with another input law the "
                      f"moment tensor is biased and the recovered directions can be far off. {advice}",
                      AssumptionWarning, stacklevel=4)
    return dev, (kurt, kurt_tol)


def _noise_fn(seed: int | None):
    if seed is None:
        return None

    def add(Xc, Yc):
        # noise keyed by the chunk content so that every pass sees the same G (Algorithm 4 step 2)
        key = np.frombuffer(np.ascontiguousarray(Xc[:1]).tobytes(), dtype=np.uint32)
        g = np.random.default_rng([seed, *key.tolist()])
        return Xc, Yc + g.standard_normal(Yc.shape)
    return add


def approximate_hidden_weights_population(network: Any, *, order: "int | str" = "auto", span: str = "auto",
                                          decomposition: str = "joint", n_draws: int = 8, rng: Any = None
                                          ) -> ApproximateResult:
    """The tensor step on exact population moments of ``network`` with ``x ~ N(0, I)``.

    Runs the same span estimate and decomposition as :func:`approximate_hidden_weights`, with
    ``E[y x^T]`` and ``E[y He_r(x)]`` in closed form (Hermite expansion of the activation); the
    directions are then exact to round-off (the population test of the tensor step).
    """

    if not isinstance(network, TwoLayerNetwork):
        raise InputError(f"network must be a TwoLayerNetwork, got {type(network).__name__}.")
    gen = check_random_state(rng)
    k, d, m = network.n_hidden, network.n_inputs, network.n_outputs
    r, coeffs = choose_order(network.activation, m, order)

    Byx = SecondMoment.exact(network, StandardGaussian(d)).yx
    use = span
    if use == "auto":
        use = "linear" if (abs(coeffs[1]) > HERMITE_TOL and m >= k) else "second"
    diag: dict = {"order": r, "span": use, "coefficients": coeffs, "population": True}
    if use == "linear":
        Qout, s, P = _top_right(Byx, k)
        T = HermiteTensorStatistic(r, basis=P).exact(network)
        T = np.tensordot(Qout.T, T, axes=(1, 0))
    else:
        M2 = HermiteTensorStatistic(2).exact(network)
        P, s = _span_second(M2, k)
        T = HermiteTensorStatistic(r, basis=P).exact(network)
    diag["span_singular_values"] = s[: k + 1].copy()
    W, jd = decompose_projected(T, k, method=decomposition, rng=gen, n_draws=n_draws)
    diag["decomposition"] = jd
    return ApproximateResult(_finish_directions(W, P, None), diag)

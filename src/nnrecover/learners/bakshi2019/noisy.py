"""Sub-Gaussian label noise: Algorithm 6 (signs by projections) and Lemma 20 (regression for U).

Model (Section 5): ``A = U* f(V* X) + E`` with i.i.d. mean-zero sub-Gaussian ``E`` of variance σ².
Pipeline (Algorithm 6, Theorem 10):

1. (Remark 5) scale ``A`` by ``1 / max_j ||A_{:,j}||`` (kept in ``diagnostics['scale']``, undone at the end);
2. the tensor step gives ``v_i ≈ ξ_i V*_i`` (:mod:`.tensor_step`; it tolerates mean-zero noise);
3. Algorithm 6 fixes every ``ξ_i``: with ``S_{i,±} = {f(±v_j X̄)}_{j≠i} ∪ {f(±v_i X̄)}`` (both signs of
   the other units, so their unknown signs do not matter),
   ``a_i^± = sum_j ||Ā_{j,*} (I - P_{S_{i,±}})||^2`` and ``V_i = v_i`` iff ``a_i^+ < a_i^-``.
   The paper writes ``A`` instead of ``Ā`` in ``a^+`` (erratum 5); both use ``Ā``.
   Efficient form (equivalent, cheaper): ``a^± = ||Ā (I - Q_± Q_±^T)||_F^2`` with ``Q_±`` an orthonormal basis of
   the 2k-1 rows, from one QR of all 2k rows ``f(±V X̄)``: ``O(ℓ k^2 + m ℓ k)`` in all, never an ℓ x ℓ
   projection;
4. (Lemma 20) ``U = argmin ||U f(V X̄) - Ā||_F = Ā f(VX̄)^T [f(VX̄) f(VX̄)^T]^{-1}``; here over all n
   samples (streamed normal equations), which lowers the variance. Lemma 20's error term is
   ``O(1) √ℓ ε``, not ``√(ℓ ε)`` (erratum 11).

No step refines ``V`` beyond the tensor estimate (as in Theorem 10): the ε accuracy is that of the
approximate step, ``O(n^{-1/2})``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.linalg

from ..._validation import check_positive_int, check_random_state
from ...data import accumulate, as_data_source
from ...data.views import tail
from ...errors import InputError
from ...network import TwoLayerNetwork
from ...moments.base import Statistic
from ._common import ExactResult, check_hidden_estimate, check_rectified, check_samples
from .pipeline import _prepare, default_n_sign, split_refinement
from .tensor_step import approximate_hidden_weights

__all__ = ["algorithm6", "regression_output_weights", "noisy_pipeline", "OutputRegressionStatistic", "uncertified_network"]


def algorithm6(V_approx: Any, X_bar: Any, Y_bar: Any, *, activation: Any = "relu") -> tuple[np.ndarray, dict]:
    """Algorithm 6, RecoveringSigns: the signs ``ξ_i`` of approximate hidden rows from projections.

    Parameters
    ----------
    V_approx : array (k, d)
        ``v_i ≈ ξ_i V*_i`` (normalised here).
    X_bar, Y_bar : arrays (ℓ, d), (ℓ,) or (ℓ, m)
        Samples, noisy or not (the paper's first ℓ columns).
    activation : str or Activation

    Returns
    -------
    V : ndarray (k, d)
        ``ξ_i v_i`` (unit rows).
    diagnostics : dict
        ``a_plus``, ``a_minus`` (k,) residual energies, ``signs`` (k,), ``margins``
        ``|a^- - a^+| / (a^- + a^+)`` (how clear each decision was).
    """
    act = check_rectified(activation, what="Algorithm 6")
    X_bar, Y_bar = check_samples(X_bar, Y_bar, name_x="X_bar", name_y="Y_bar")
    V = check_hidden_estimate(V_approx, None, X_bar.shape[1])
    return _algorithm6_projected(V, X_bar @ V.T, Y_bar, act)


def _algorithm6_projected(V: np.ndarray, T: np.ndarray, Y_bar: np.ndarray, act) -> tuple[np.ndarray, dict]:
    """:func:`algorithm6` from the projections ``T = X̄ V^T`` (ℓ, k) of the samples on the unit rows ``V``:
    the signs depend on the samples through ``T`` alone."""
    k = V.shape[0]
    # every S_{i,±} is a set of 2k - 1 of the 2k columns F = [f(V X̄), f(-V X̄)]: with one thin QR F = Q R,
    # span(S) = Q span(R_S). With W = Q^T Ā^T and Q_S an orthonormal basis of the columns R_S of R, the
    # residual energy splits (Pythagoras) into the part outside span(F) and the part inside it,
    #     a = ||Ā^T - Q W||^2 + ||W - Q_S Q_S^T W||^2,
    # each a sum of squares of residuals (no cancellation, so an exact fit gives a ≈ 0 to round-off
    # squared): one O(ℓ k^2) QR, one O(ℓ k m) residual, then 2k QRs of 2k x (2k - 1) matrices
    # LAPACK's blocked QR through SciPy (about 2.4 times faster than numpy.linalg.qr at l = 1e5, 2k = 20);
    # F is finite (checked samples, a finite V)
    Q, R = scipy.linalg.qr(np.hstack([act(T), act(-T)]), mode="economic", overwrite_a=True, check_finite=False)
    W = Q.T @ Y_bar
    outside = float(np.sum((Y_bar - Q @ W) ** 2))
    a_plus, a_minus = np.empty(k), np.empty(k)
    for i in range(k):
        others = [j for j in range(k) if j != i] + [k + j for j in range(k) if j != i]
        for own, store in ((i, a_plus), (k + i, a_minus)):
            Qs, _ = np.linalg.qr(R[:, others + [own]])
            store[i] = outside + float(np.sum((W - Qs @ (Qs.T @ W)) ** 2))
    signs = np.where(a_plus < a_minus, 1.0, -1.0)
    margins = np.abs(a_minus - a_plus) / np.maximum(a_minus + a_plus, np.finfo(float).tiny)
    return V * signs[:, None], {"a_plus": a_plus, "a_minus": a_minus, "signs": signs, "margins": margins}


class OutputRegressionStatistic(Statistic):
    """Streaming normal equations of ``A = U f(V X)``: sums of ``H^T H`` and ``H^T Y``, ``H = f(X V^T)``.

    Parameters
    ----------
    V : array (k, d)
    activation : Activation

    Notes
    -----
    The sums of a chunk depend on that chunk alone (``parallel_chunks``): a pass with several workers
    computes the chunks' ``O(m d k)`` products side by side, with the same bits for every number of
    workers (:mod:`nnrecover.moments.base`, "Threads").
    """

    parallel_chunks = True

    def __init__(self, V: np.ndarray, activation) -> None:
        self.V = np.asarray(V, dtype=np.float64)
        self.activation = activation
        super().__init__()

    def _reset(self) -> None:
        self._hh = None
        self._hy = None
        self._yy = 0.0

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        H = self.activation(X @ self.V.T)
        hh, hy = H.T @ H, H.T @ Y
        if self._hh is None:
            self._hh, self._hy = hh, hy
        else:
            self._hh += hh
            self._hy += hy
        self._yy += float(np.einsum("ij,ij->", Y, Y))

    def _merge(self, other: "OutputRegressionStatistic") -> None:
        if self._hh is None:
            self._hh, self._hy = other._hh.copy(), other._hy.copy()
        else:
            self._hh += other._hh
            self._hy += other._hy
        self._yy += other._yy

    def finalize(self) -> tuple[np.ndarray, dict]:
        """``U`` (m, k) and ``{"residual": ||Y - H U^T||_F/||Y||_F, "condition": κ(H^T H), "rank": rank of H}``.

        The residual is evaluated from the accumulated sums (``||Y||^2 - 2 tr(U H^T Y) + tr(U H^T H U^T)``),
        so it is accurate only to about ``sqrt(eps) = 1e-8`` relative; ``U`` itself is accurate to
        ``κ(H^T H) eps`` (normal equations). When the columns of ``H = f(X V^T)`` are linearly dependent
        (two parallel rows of ``V``, or a unit inactive on every row: Lemma 20 needs ``f(V X)`` of full
        rank ``k``), ``H^T H`` is singular and ``U`` is the minimum-norm least-squares solution (the
        pseudo-inverse of ``H^T H``, eigenvalues below ``k eps`` times the largest dropped), with
        ``rank < k`` recorded.
        """
        self.require(1, "OutputRegressionStatistic")
        k = self._hh.shape[0]
        rank = int(np.linalg.matrix_rank(self._hh, hermitian=True))
        U = None
        if rank == k:
            try:
                U = scipy.linalg.solve(self._hh, self._hy, assume_a="pos").T
            except np.linalg.LinAlgError:
                U = None
        if U is None:
            U = (scipy.linalg.pinvh(self._hh, atol=0.0, rtol=k * np.finfo(float).eps) @ self._hy).T
        # ||Y - H U^T||^2 = ||Y||^2 - 2 tr(U H^T Y) + tr(U H^T H U^T)
        rss = self._yy - 2 * float(np.sum(U.T * self._hy)) + float(np.sum((U @ self._hh) * U))
        return U, {"residual": float(np.sqrt(max(rss, 0.0) / self._yy)) if self._yy > 0 else 0.0,
                   "condition": float(np.linalg.cond(self._hh)), "rank": rank}


def _projected_rows(source, ell: int, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``X̄ V^T`` and ``Ȳ`` of the first ``ell`` rows of ``source``, from a pass over those rows only."""
    T, Yb, have = np.empty((ell, V.shape[0])), None, 0
    for X, Y in source.chunks(progress=False):
        take = min(ell - have, X.shape[0])
        if Yb is None:
            Yb = np.empty((ell, Y.shape[1]))
        T[have:have + take] = X[:take] @ V.T
        Yb[have:have + take] = Y[:take]
        have += take
        if have >= ell:
            break
    if have < ell:
        raise InputError(f"the data have {have} rows but n_sign={ell} are reserved for Algorithm 6; pass more "
                         "samples or a smaller n_sign.")
    return T, Yb


def regression_output_weights(V: Any, X: Any, Y: Any = None, *, activation: Any = "relu",
                              chunk_size: int | None = None) -> tuple[np.ndarray, dict]:
    """Lemma 20: ``U = argmin_U ||U f(V X) - A||_F`` from any data source (streamed normal equations)."""
    act = check_rectified(activation, what="Lemma 20 regression")
    V = np.asarray(V, dtype=np.float64)
    if V.ndim != 2 or not np.all(np.isfinite(V)):
        raise InputError(f"V must be a finite (k, d) array, got shape {V.shape}.")

    stat = accumulate(OutputRegressionStatistic(V, act), as_data_source(X, Y), chunk_size=chunk_size)
    return stat.finalize()


def noisy_pipeline(X: Any, Y: Any = None, n_hidden: int | None = None, *, activation: Any = "relu",
                   order: "int | str" = "auto", span: str = "auto", n_sign: int | None = None,
                   whiten: bool = False, control_variates: bool = True, n_draws: int = 8,
                   decomposition: str = "joint", regression: str = "all", chunk_size: int | None = None,
                   rng: Any = None) -> ExactResult:
    """Theorem 10: approximate ``U*``, ``V*`` from noisy Gaussian samples (tensor step, Algorithm 6, Lemma 20).

    Parameters
    ----------
    X, Y : data
        ``Y = f(X V*^T) U*^T + E`` (arrays or re-iterable chunks).
    n_hidden : int
    n_sign : int, optional
        Rows reserved for Algorithm 6 (the paper's ℓ; default ``min(n // 4, 100000)``); the tensor step
        uses the rest (sample splitting).
    regression : {"all", "sign"}, default "all"
        Solve Lemma 20 on all n samples (our default) or only on the Algorithm 6 rows (the paper's ``X̄``).
    order, span, whiten, control_variates, n_draws, decomposition, chunk_size, rng
        As in :func:`.pipeline.gaussian_pipeline`.

    Returns
    -------
    ExactResult
        ``certified`` is always False (nothing here is exact); ``diagnostics`` has ``signs``
        (Algorithm 6), ``scale`` (Remark 5), ``residual``, ``approximate``.
    """
    t0 = time.perf_counter()
    gen = check_random_state(rng)
    if regression not in ("all", "sign"):
        raise InputError(f"regression must be 'all' or 'sign', got {regression!r}.")
    source, k, act, d, m, _ = _prepare(X, Y, n_hidden, activation, 1, "the noisy pipeline")
    n = source.info.n_samples
    ell = default_n_sign(n) if n_sign is None else check_positive_int(n_sign, "n_sign")
    if ell < 1:
        raise InputError(f"the noisy pipeline needs rows for Algorithm 6's sign step and for the tensor step; "
                         f"got n_samples = {n} (at least max(4 d, 100) + 1 are needed); pass more samples.")
    # Algorithm 6 and the "sign" regression see the ℓ rows X̄ only through T = X̄ V^T: rows in memory are
    # viewed (arrays) or gathered (dask) before the tensor step; the rows of a stream or of chunks are read
    # again after it and projected chunk by chunk (ℓ (k + m) values held, not ℓ (d + m): 0.8 GB at d = 1000)
    held = source.kind == "arrays" or getattr(source, "is_dask", False)
    if held:
        Xb, Yb = split_refinement(source, ell, name="n_sign", purpose="Algorithm 6")
    elif n is not None and n < ell:
        raise InputError(f"the data have {n} rows but n_sign={ell} are reserved for Algorithm 6; pass more "
                         "samples or a smaller n_sign.")
    approx = approximate_hidden_weights(source, None, k, activation=act, order=order, span=span,
                                        control_variates=control_variates, whiten=whiten, skip=ell,
                                        n_draws=n_draws, decomposition=decomposition, chunk_size=chunk_size,
                                        rng=gen)
    V0 = check_hidden_estimate(approx.hidden_weights, None, d)
    T, Yb = (Xb @ V0.T, Yb) if held else _projected_rows(source, ell, V0)
    scale = float(np.max(np.linalg.norm(Yb, axis=1)))   # Remark 5: 1 / max column norm of A
    scale = 1.0 / scale if scale > 0 else 1.0
    V, sdiag = _algorithm6_projected(V0, T, Yb * scale, act)
    if regression == "all":
        stat = accumulate(OutputRegressionStatistic(V, act), tail(source, 0, None, chunk_size),
                          chunk_size=chunk_size)
    else:
        # f(V X̄) with V = diag(signs) V0 is f(T diag(signs))
        stat = OutputRegressionStatistic(np.diag(sdiag["signs"]), act).update(T, Yb)
    U, rdiag = stat.finalize()
    diagnostics = {"approximate": approx.diagnostics, "signs": sdiag, "scale": scale, "n_sign": ell,
                   "residual": rdiag["residual"], "regression_condition": rdiag["condition"],
                   "regression": regression, "certified": False, "failure_reasons": [],
                   "time": time.perf_counter() - t0, "route": "tensor -> Algorithm 6 -> Lemma 20"}
    return ExactResult(V, U, act, False, diagnostics)


def uncertified_network(res: ExactResult, source, *, approximate: str, activation: Any) -> TwoLayerNetwork:
    """The network :class:`~nnrecover.learners.ExactReLULearner` returns when the exact step's certificate
    fails: the recovered units where they passed, else the approximate direction (the tensor step's, or by
    least squares from the unmixed sources of Algorithm 3) with its sign from Algorithm 6; the output
    weights by least squares on the refinement rows (Lemma 20)."""
    n_ref = res.diagnostics["n_refine"]
    Xb, Yb = split_refinement(source, n_ref)
    V = np.array(res.hidden_weights, dtype=float)
    bad = ~np.all(np.isfinite(V), axis=1)
    if np.any(bad):
        if approximate == "tensor":
            approx = res.diagnostics["approximate_hidden_weights"]
        else:   # ICA: directions from the unmixed sources by least squares
            Z = Yb @ res.diagnostics["unmixing"].T
            approx = np.linalg.lstsq(Xb, np.maximum(Z, 0.0), rcond=None)[0].T
        signed, _ = algorithm6(approx, Xb, Yb, activation=activation)
        V[bad] = signed[bad]
    U, _ = regression_output_weights(V, Xb, Yb, activation=activation)
    return TwoLayerNetwork(V, None, U, None, activation)

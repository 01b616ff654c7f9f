"""Certificates of a returned network (not in the paper): does it agree with what the data measure?

* :func:`hermite_fit`: the exact Hermite coefficients ``g^_k`` of the network (Lemma 3.5) against the
  estimates ``T_k`` of eq. (6), order by order, within three times their noise.
* :func:`residual_lack_of_fit`: a chi-square test that the residual ``y - g(x)`` has no component along
  the Hermite polynomials of orders 0, 1, 2 (what a missing or wrong unit leaves).

Each has a ``*_MEANING`` string stored beside its result in ``diagnostics_["certificates"]``.
"""

from __future__ import annotations

import math

import numpy as np

from ..._threads import blas_threads
from ...data import accumulate, as_data_source
from ...data.views import Head
from ...errors import InputError
from ...hermite.expansions import network_hermite_expansion
from ...moments.base import Statistic
from ...network import TwoLayerNetwork
from ...tensor import flatten
from .coefficients import HermiteCoefficients, _add_signed_gram, _flat_shape

__all__ = ["hermite_fit", "residual_lack_of_fit", "first_look_rows", "ResidualMomentStatistic",
           "ResidualEnergyStatistic", "HERMITE_FIT_MEANING", "RESIDUAL_FIT_MEANING"]


HERMITE_FIT_MEANING = (
    "bounds the Hermite orders of the error that the data measures: for each order k = 1, 3 .. 2l+2 the "
    "spectral norm of flatten(g^_k - T_k) (g^_k: exact Hermite coefficients of the returned network by "
    "Lemma 3.5, T_k: the estimate of eq. (6), in the learner's working coordinates; the Euclidean norm for "
    "k = 1) is at most 3 sigma^_k + 1e-8 ||T_k||, sigma^_k the size of the sampling error of T_k (split "
    "halves for k >= 2, sqrt((d + 2) E[y^2] / N) for k = 1; 0 with exact coefficients). k = 1 checks the "
    "signs and the linear part (a wrong flip moves T_1 by a_i w_i), k >= 2 the units (a missing or wrong "
    "unit whose |a_i c_k(b_i)| is above the noise of some order fails). Not seen: orders above 2l+2 and "
    "units whose coefficients are below the noise (|b_i| large: nearly linear or never active, Lemma "
    "D.13). A network equal to the truth has residual ~ sigma^_k, a third of the threshold; with "
    "refine=False the paper's output carries its own estimation error, which can exceed T_1's noise, "
    "and the check then says the data disagree with it. T_2 is not checked: for l = 1 its top eigenvectors "
    "are the working coordinates, which bias it towards its own noise")


RESIDUAL_FIT_MEANING = (
    "tests that the residual r = y - g(x) of the returned network on the samples is label noise "
    "independent of x, as far as the Hermite polynomials of orders 0, 1, 2 see: with the orthonormal "
    "features 1, x_i, x_i x_j (i < j), (x_i^2 - 1)/sqrt(2) (J of them) and s^2 = mean(r^2), "
    "Q = n sum_j mean(r phi_j)^2 / s^2 is chi-square with J degrees of freedom when it is, plus at most "
    "about 2 P from the network's own least-squares error (P parameters, trained on 80% of the rows); it "
    "fails when z = (Q - J - 2 P)/sqrt(2 J) > 4, i.e. when the "
    "network misses a part of the target whose order <= 2 Hermite component exceeds about "
    "s (2 J)^{1/4} / sqrt(n) in L2 (a local minimum, a missing or wrong unit; a ReLU unit keeps "
    "a large share of its energy in orders 1 and 2). On a large source it fails already when the first "
    "max(20000, 4 J) rows give z > 8 (first_look: the misfit is then clear without the other rows). "
    "A residual below 1e-10 times the RMS of y passes "
    "(exact to round-off). Misfits orthogonal to all polynomials of degree <= 2 are not seen")


def _first_output_residual(network: TwoLayerNetwork, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``y - g(x)`` on the first output for the rows of a pass (finite float64, checked by the data
    source), without ``predict``'s validation, a read of every value of the chunk."""
    if X.shape[1] != network.n_inputs:
        raise InputError(f"the rows have {X.shape[1]} columns but the network has {network.n_inputs} inputs.")
    # samples in columns: the faster orientation of the product with few units (TwoLayerNetwork._forward)
    pre = network.hidden_weights @ X.T
    pre += network.hidden_bias[:, None]
    return y - (network.output_weights[0] @ network.activation(pre) + network.output_bias[0])


def _residual_energy(network: TwoLayerNetwork, X: np.ndarray, Y: np.ndarray) -> tuple[float, float]:
    """``sum r^2`` and ``sum y^2`` of the residual ``r = y - g(x)`` on the first output."""
    y = Y[:, 0]
    r = _first_output_residual(network, X, y)
    return float(r @ r), float(y @ y)


class ResidualEnergyStatistic(Statistic):
    """Sums of ``r^2`` and ``y^2`` for the residual ``r = y - g(x)`` of a fixed network on the first output
    (the part of :class:`ResidualMomentStatistic` that decides whether the residual is at round-off)."""

    def __init__(self, network: TwoLayerNetwork) -> None:
        self.network = network
        super().__init__()

    def _reset(self) -> None:
        self.rr, self.yy = 0.0, 0.0

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        rr, yy = _residual_energy(self.network, X, Y)
        self.rr += rr
        self.yy += yy

    def _merge(self, other: "ResidualEnergyStatistic") -> None:
        self.rr += other.rr
        self.yy += other.yy

    def finalize(self) -> dict:
        return {"rr": self.rr, "yy": self.yy, "n": self.n}


def _signed_gram(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``X^T diag(w) X`` (symmetric), by the symmetric rank-k updates of :func:`.coefficients._add_signed_gram`."""
    upper = np.zeros((X.shape[1], X.shape[1]), order="F")
    _add_signed_gram(upper, X, w)
    return np.triu(upper) + np.triu(upper, 1).T


class ResidualMomentStatistic(Statistic):
    """Sums of ``r``, ``r x``, ``r x x^T``, ``r^2`` and ``y^2`` for the residual ``r = y - g(x)`` of a fixed
    network on the first output (a monoid, so the pass streams, runs in worker threads and on Dask)."""

    def __init__(self, network: TwoLayerNetwork) -> None:
        self.network = network
        super().__init__()

    def _reset(self) -> None:
        d = self.network.n_inputs
        self.s0, self.s1, self.S2 = 0.0, np.zeros(d), np.zeros((d, d))
        self.rr, self.yy = 0.0, 0.0

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        y = Y[:, 0]
        r = _first_output_residual(self.network, X, y)
        self.s0 += float(r.sum())
        self.s1 += X.T @ r
        self.S2 += _signed_gram(X, r)
        self.rr += float(r @ r)
        self.yy += float(y @ y)

    def _merge(self, other: "ResidualMomentStatistic") -> None:
        self.s0 += other.s0
        self.s1 += other.s1
        self.S2 += other.S2
        self.rr += other.rr
        self.yy += other.yy

    def finalize(self) -> dict:
        return {"s0": self.s0, "s1": self.s1, "S2": self.S2, "rr": self.rr, "yy": self.yy, "n": self.n}


def residual_lack_of_fit(network: TwoLayerNetwork, source, *, chunk_size: int | None = None,
                         z_max: float = 4.0) -> dict:
    """Lack-of-fit test of ``network`` on the samples of ``source`` (see ``RESIDUAL_FIT_MEANING``).

    One pass accumulating ``sum r``, ``sum r x`` and ``sum r x x^T``, from which the projections on the
    orthonormal Hermite features of orders 0-2 (``J = 1 + d + d (d + 1) / 2``) follow; memory ``O(d^2)``.
    A residual at round-off (an exact fit) is recognised by a cheaper pass of ``sum r^2`` alone when the
    first chunk's residual is at round-off (re-iterable sources). A clear misfit is recognised on the first
    ``max(20000, 4 J)`` rows (:func:`first_look_rows`), when the source has at least four times as many:
    the test fails there when that look's ``z`` exceeds ``2 z_max``, and otherwise the pass over all rows
    decides with ``z <= z_max`` (a group-sequential test; the stricter first threshold keeps the chance of
    failing a correct network at that of the single pass, and a misfit's ``z`` grows like ``n``).

    Returns
    -------
    dict
        ``passed``, ``z``, ``Q``, ``J``, ``P``, ``n`` (the rows the decision used), ``residual_rms``,
        ``y_rms``, ``exact``, ``first_look`` (the decision came from the first rows alone).
    """

    d = network.n_inputs
    iu = np.triu_indices(d, 1)
    J = 1 + d + d + iu[0].size
    source = as_data_source(source)

    def exact(rr, yy, n):
        out = {"n": int(n), "J": int(J), "residual_rms": math.sqrt(rr / max(n, 1)), "y_rms": math.sqrt(yy / max(n, 1))}
        return out, out["residual_rms"] <= 1e-10 * max(out["y_rms"], 1e-300)

    if source.info.reiterable:
        # a residual at round-off passes without its O(n d^2) moments: when the first chunk's residual is
        # at round-off, one O(n d k) pass of the residual energy alone decides (the same sums, chunk by chunk,
        # as the full statistic's); only a residual that is not at round-off needs the full pass
        X0, Y0 = source.peek()
        if exact(*_residual_energy(network, X0, Y0), X0.shape[0])[1]:
            energy = accumulate(ResidualEnergyStatistic(network), source, chunk_size=chunk_size)
            out, ok = exact(energy.rr, energy.yy, energy.n)
            if ok:
                out.update(Q=0.0, z=-math.sqrt(J / 2.0), passed=True, exact=True, first_look=False)
                return out
    n_look = first_look_rows(d)
    n_all = source.info.n_samples
    if source.info.reiterable and n_all is not None and n_all >= 4 * n_look:
        # a clear misfit (refine=False: the paper's output carries its estimation error) is decided on the
        # first rows, without the O(n d^2) pass over all of them; the rows are exchangeable, so the first
        # look's Q is the same chi-square on fewer rows
        look = _decide(_accumulate_head(ResidualMomentStatistic(network), source, n_look, chunk_size),
                       network, iu, J, exact)
        if not look["exact"] and look["z"] > FIRST_LOOK_Z_FACTOR * z_max:
            look.update(passed=False, first_look=True)
            return look
    stat = accumulate(ResidualMomentStatistic(network), source, chunk_size=chunk_size)
    out = _decide(stat, network, iu, J, exact)
    out.update(passed=bool(out["exact"] or out["z"] <= z_max), first_look=False)
    return out


#: rows of the first look of :func:`residual_lack_of_fit` per orthonormal feature (at least
#: ``FIRST_LOOK_MIN_ROWS``): enough rows per feature for the features' sample Gram to be near the identity,
#: so that Q is near its chi-square law on the first look too
FIRST_LOOK_ROWS_PER_FEATURE = 4
FIRST_LOOK_MIN_ROWS = 20_000
#: the first look fails the test only beyond this multiple of ``z_max``: a false failure then needs a
#: chi-square excess of ``2 z_max`` standard deviations, at ``z_max = 4`` a probability of at most 2e-9 for
#: d >= 10 (J >= 66; 1e-14 at d = 100) against 4e-4 (5e-5) for the single pass's ``z > 4``, even without
#: the 2P allowance: the two looks together fail a correct network hardly more often than one pass
FIRST_LOOK_Z_FACTOR = 2.0


def first_look_rows(d: int) -> int:
    """Rows of the first look of :func:`residual_lack_of_fit` in dimension ``d``: ``max(20000, 4 J)``,
    ``J = 1 + 2 d + d (d - 1) / 2`` the number of Hermite features of orders 0-2."""
    J = 1 + 2 * d + d * (d - 1) // 2
    return max(FIRST_LOOK_MIN_ROWS, FIRST_LOOK_ROWS_PER_FEATURE * J)


def _accumulate_head(stat: Statistic, source, n_rows: int, chunk_size: int | None) -> Statistic:
    """``stat`` updated with the first ``n_rows`` rows of ``source`` (a stream is read only that far), with
    one BLAS thread per product as in :func:`~nnrecover.data.accumulate` (``nnrecover._threads``)."""

    with blas_threads(1):
        for X, Y in Head(source, n_rows, chunk_size):
            stat.update(X, Y)
    return stat


def _decide(stat: "ResidualMomentStatistic", network: TwoLayerNetwork, iu, J: int, exact) -> dict:
    """Q and z of the lack-of-fit test from the sums of ``stat`` (``exact``: the residual at round-off)."""
    n, s0, s1, S2, rr, yy = stat.n, stat.s0, stat.s1, stat.S2, stat.rr, stat.yy
    out, ok = exact(rr, yy, n)
    if ok:
        out.update(Q=0.0, z=-math.sqrt(J / 2.0), exact=True)
        return out
    proj = np.concatenate([[s0], s1, (np.diag(S2) - s0) / math.sqrt(2.0), S2[iu]])
    Q = float(np.sum((proj / n) ** 2) * n / (rr / max(n, 1)))
    # the network's own estimation error delta (least squares, P parameters) adds n ||proj delta||^2 / s^2,
    # about P n / n_train <= 2 P (the refinement trains on 80% of the rows), to the chi-square's mean
    P = network.hidden_weights.size + 2 * network.n_hidden + 1
    z = (Q - J - 2 * P) / math.sqrt(2.0 * J)
    out.update(Q=Q, P=int(P), z=float(z), exact=False)
    return out


def hermite_fit(network: TwoLayerNetwork, coeffs: HermiteCoefficients, order: int) -> dict:
    """Compare the exact Hermite coefficients of ``network`` (Lemma 3.5) with the estimated ``T_1`` and
    ``T_3, ..., T_{2l+2}`` in the coordinates of ``coeffs`` (see ``HERMITE_FIT_MEANING``).

    Returns
    -------
    dict
        ``passed``; per order ``"T<k>"``: ``residual`` (spectral norm of the flattened difference; the
        Euclidean norm for ``k = 1``), ``noise`` (``sigma^_k``), ``threshold`` and ``ratio``
        (``residual / threshold``).
    """

    K = 2 * order + 2
    expansion = network_hermite_expansion(network, K)
    out: dict = {}
    passed = True
    d = coeffs.n_inputs
    for k in [1] + list(range(3, K + 1)):
        if k == 1:
            diff = np.asarray(expansion.tensor(1)[0]) - coeffs.t1
            residual = float(np.linalg.norm(diff))
            size = float(np.linalg.norm(coeffs.t1))
            noise = 0.0 if coeffs.exact else math.sqrt((d + 2) * max(coeffs.y_second_moment, 0.0)
                                                       / max(int(coeffs.n_samples or 1), 1))
        else:
            t1, t2 = _flat_shape(k, order)
            est = coeffs.tensor(k)
            diff = flatten(expansion.tensor(k, coeffs.basis)[0] - est, t1, t2)
            residual = float(np.linalg.norm(diff, 2))
            size = float(np.linalg.norm(flatten(est, t1, t2), 2))
            noise = 0.0 if coeffs.exact else float(coeffs.noise.get(k, 0.0))
        threshold = 3.0 * noise + 1e-8 * max(size, 1e-300)
        ok = residual <= threshold
        passed &= ok
        out[f"T{k}"] = {"residual": residual, "noise": noise, "threshold": threshold,
                        "ratio": residual / threshold, "passed": bool(ok)}
    out["passed"] = bool(passed)
    return out

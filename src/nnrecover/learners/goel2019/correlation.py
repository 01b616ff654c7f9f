"""Recovery from sample complexity alone: correlations with delta, delta' and delta'' (Section 3, Appendix C).

Goel & Panigrahy (2019), Section 3 (Theorem 7, Corollary 1, Lemma 8, Claims 3-5) and Appendix C.1
(Lemmas 19-20). ``P`` is arbitrary (not monotone, possibly without linear terms); the price is a search
over directions (exponential time), while the number of samples stays polynomial.

Statistics (operational definitions; the paper's sign convention for ``delta'`` is avoided by working
with ``C_1`` and its finite differences):

* ``C_1(z, s) = E[f(x) delta(z.x - s)] = phi(s) E[f | z.x = s]`` (Claim 3), estimated with the band
  ``(1/eps') 1[s - eps' <= z.x < s]`` (the paper's ``(1/eps')(sgn(z.x - s + eps') - sgn(z.x - s))``):
  ``C_1^(z, s) = (1/(N eps')) sum_k y~_k 1[z.x_k in [s - eps', s)]``, ``y~ = y - c_0``.
* ``C_2(z, s) = C_1(z, s + eps) - C_1(z, s - eps)`` (Section 3; a difference, not divided by ``2 eps``).
  Lemma 8: at ``z = w_i``, ``C_2(w_i, t) = phi(t) E[Q_i | w_i.x = t] + eps d^{O(1)}`` with
  ``Q_i = dP/dX_i`` (the jump of ``X_i = 1[w_i.x >= t]``); if every angle to the ``w_j`` is at least
  ``eps_2``, ``|C_2| <= eps d^{O(1)} / eps_2`` (Claim 5).
* Corollary 1 (orthogonal ``W*``, step units): the ``X_j`` are independent Bernoulli(``mu``),
  ``mu = Phi^c(t)``, so ``E[Q_i | w_i.x = t] = Q_i(mu, ..., mu)`` (the coefficient of ``X_i`` in
  ``P(mu (X + 1))`` divided by ``mu``). :func:`corollary1_prediction`.
* Appendix C.1 (ReLU): ``D(s) = dC_1/ds`` and ``C_3(z, s) = D(s + eps) - D(s - eps)``, estimated with
  ``D^(s) = (C_1^(s + eps'') - C_1^(s - eps''))/(2 eps'')``. The kink of ``X_i = (w_i.x - t)_+`` makes
  ``C_1`` jump in slope at ``s = t``: **[corrected Lemma 19]** ``C_3(w_i, t) = phi(t) E[dP/dX_i |_{X_i = 0}
  | w_i.x = t] + O(eps d^{O(1)})`` (the printed right-hand side is the one-sided derivative
  ``D(t + eps)``; every other term is continuous in ``s`` and cancels in the difference).

Algorithms:

* :func:`delta_prime_test` (the test in the proof of Theorem 7): accept ``z`` iff
  ``|C_2^(z, t)| >= phi(t) eps_3 / 2`` (absolute value: also covers a negative ``E[Q_i]``).
* :func:`delta_prime_search`: an ``eps_2``-net of the sphere (grid for ``n = 2``, Fibonacci lattice for
  ``n = 3``), the test at every net point on one shared sample, single-linkage clusters of the accepted
  points at radius ``2 eps_2``, one representative per cluster (largest ``|C_2^|``).
* :func:`delta_prime_local_search` [IMPL]: for ``n > 3`` the net is exponential in ``n``; the same
  statistic drives a random local search on the sphere from given starts (e.g. Step 1 estimates).

Every estimate comes with its standard error (the per-sample terms of a stencil of bands are summed
row by row, so overlapping bands are handled exactly). :func:`expected_band_statistic` gives the exact
expectation of any stencil at ``z = w_i`` for orthonormal ``W*`` (population form, by quadrature of
``C_1(s) = phi(s) (P(m, .., u_t(s), .., m) - c_0)``, ``m = E[u_t(g)]``, multilinear ``P``).

Paper symbols -> names
----------------------
======================  ================================================
``eps'``                ``band``
``eps``                 ``eps``
``eps''``               ``eps2`` (C.1 slope difference)
``eps_2``               ``resolution`` (net spacing, in radians)
``eps_3``               ``eps3`` (lower bound on ``|E[Q_i | w_i.x = t]|``)
``mu = E[X_j]``         ``Phi^c(t)`` (step), ``u_hat_0`` (relu)
======================  ================================================
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import integrate, special
from scipy.cluster.hierarchy import fcluster, linkage

from ..._validation import (
    as_2d_float,
    as_targets,
    check_positive_int,
    check_random_state,
)
from ...errors import AssumptionError, InputError
from ..registry import register
from .model import HighThresholdNetwork, UpperPolynomial, threshold_activation

__all__ = ["BandStatistic", "band_stencil", "delta_correlation", "delta_prime_correlation",
           "delta_double_prime_correlation", "delta_prime_test", "sphere_net", "NetSearchResult",
           "delta_prime_search", "delta_prime_local_search", "corollary1_prediction", "expected_band_statistic"]

_SQRT2PI = math.sqrt(2.0 * math.pi)


def _phi(s: float) -> float:
    return math.exp(-0.5 * s * s) / _SQRT2PI


def _pos(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise InputError(f"{name} must be a finite number > 0, got {value!r}.")
    return float(value)


def _real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise InputError(f"{name} must be a finite real number, got {value!r}.")
    return float(value)


@dataclass
class BandStatistic:
    """A linear combination of band estimates of ``C_1`` at every direction given.

    Attributes
    ----------
    values : ndarray (k,)
        ``sum_j weights_j C_1^(z, s_j)`` per direction ``z``.
    standard_errors : ndarray (k,)
        Standard error of each value (from the per-sample terms).
    positions, weights : ndarray
        The stencil ``s_j``, ``weights_j``.
    band : float
        ``eps'``.
    n_total : int
    """

    values: np.ndarray
    standard_errors: np.ndarray
    positions: np.ndarray
    weights: np.ndarray
    band: float
    n_total: int


def _prepare(X, y, baseline):
    X = as_2d_float(X, "X")
    y = as_targets(y, "y", n_rows=X.shape[0]).reshape(-1)
    c0 = float(np.median(y)) if baseline is None else _real(baseline, "baseline")
    yt = y - c0
    keep = yt != 0                                          # y~ = 0 rows add nothing to any band sum
    return X[keep], yt[keep], X.shape[0], c0


def _directions(Z, n) -> np.ndarray:
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim == 1:
        Z = Z[None, :]
    if Z.ndim != 2 or Z.shape[1] != n:
        raise InputError(f"directions must have shape (k, {n}) (one unit vector per row), got {Z.shape}.")
    norms = np.linalg.norm(Z, axis=1)
    if not np.all(np.isfinite(Z)) or np.any(norms == 0):
        raise InputError("directions must be finite and nonzero.")
    return Z / norms[:, None]


def band_stencil(X, y, directions, positions, weights, *, band: float, baseline=None, n_total: int | None = None,
                 chunk: int = 256) -> BandStatistic:
    """``sum_j weights_j C_1^(z, s_j)`` for every direction (rows of ``directions``), with standard errors.

    Parameters
    ----------
    X : array (N, n); y : array (N,)
        Samples ``x ~ N(0, I)`` and labels.
    directions : array (k, n)
        Directions ``z`` (normalised here).
    positions, weights : sequences of float
        The stencil: band right ends ``s_j`` and their weights.
    band : float
        ``eps'`` (band ``[s - eps', s)``).
    baseline : float, optional
        ``c_0`` (default: the median of ``y``, footnote 5).
    n_total : int, optional
        Number of samples ``X`` was drawn from, if ``X, y`` hold only some of them (e.g. the rows with
        ``y != c_0``). Default: the number of rows.
    chunk : int, default 256
        Directions per block (memory ``rows x chunk``).
    """
    band = _pos(band, "band")
    Xa, ya, N, _ = _prepare(X, y, baseline)
    if n_total is not None:
        N = check_positive_int(n_total, "n_total", minimum=N)
    Z = _directions(directions, Xa.shape[1])
    s = np.asarray(positions, dtype=np.float64).reshape(-1)
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if s.size != w.size or s.size == 0 or not np.all(np.isfinite(s)) or not np.all(np.isfinite(w)):
        raise InputError("positions and weights must be finite sequences of the same non-zero length.")
    chunk = check_positive_int(chunk, "chunk")
    vals = np.zeros(Z.shape[0])
    sq = np.zeros(Z.shape[0])
    y2 = ya * ya
    for start in range(0, Z.shape[0], chunk):
        A = Xa @ Z[start:start + chunk].T
        Q = np.zeros_like(A)
        for sj, wj in zip(s, w):
            Q += wj * ((A >= sj - band) & (A < sj))
        vals[start:start + chunk] = ya @ Q
        sq[start:start + chunk] = y2 @ (Q * Q)
    mean = vals / (N * band)
    second = sq / (N * band * band)
    se = np.sqrt(np.maximum(second - mean * mean, 0.0) / N)
    return BandStatistic(values=mean, standard_errors=se, positions=s, weights=w, band=band, n_total=N)


def delta_correlation(X, y, directions, s: float, *, band: float, baseline=None) -> BandStatistic:
    """``C_1^(z, s) = E^[y~ delta(z.x - s)]`` by the band ``[s - eps', s)`` (Claim 3)."""
    return band_stencil(X, y, directions, [_real(s, "s")], [1.0], band=band, baseline=baseline)


def _stencil(statistic: str, t: float, eps: float, eps2, band) -> tuple[list, np.ndarray, float]:
    """Band positions, weights and width of ``C_2`` (``"c2"``) or ``C_3`` (``"c3"``) at ``t``.

    Defaults: ``C_2`` band ``eps' = eps / 4``; ``C_3`` ``eps'' = eps / 4`` and ``eps' = eps'' / 2``.
    """
    if statistic == "c2":
        b = eps / 4.0 if band is None else _pos(band, "band")
        return [t + eps, t - eps], np.array([1.0, -1.0]), b
    if statistic == "c3":
        e2 = eps / 4.0 if eps2 is None else _pos(eps2, "eps2")
        if e2 >= eps:
            raise InputError(f"eps2 (the paper's eps'') must be smaller than eps, got eps2={e2}, eps={eps}.")
        b = e2 / 2.0 if band is None else _pos(band, "band")
        return ([t + eps + e2, t + eps - e2, t - eps + e2, t - eps - e2],
                np.array([1.0, -1.0, -1.0, 1.0]) / (2.0 * e2), b)
    raise InputError(f"statistic must be 'c2' (step units, Theorem 7) or 'c3' (relu, Appendix C.1), "
                     f"got {statistic!r}.")


def delta_prime_correlation(X, y, directions, threshold: float, *, eps: float, band: float | None = None,
                            baseline=None) -> BandStatistic:
    """``C_2^(z, t) = C_1^(z, t + eps) - C_1^(z, t - eps)`` (Section 3, Lemma 8).

    Parameters
    ----------
    X, y, directions : see :func:`band_stencil`
    threshold : float
        ``t`` (known).
    eps : float
        Half-distance of the difference.
    band : float, optional
        ``eps'`` (default ``eps / 4``; the paper wants ``eps' << eps``).
    """
    pos, wts, b = _stencil("c2", _real(threshold, "threshold"), _pos(eps, "eps"), None, band)
    return band_stencil(X, y, directions, pos, wts, band=b, baseline=baseline)


def delta_double_prime_correlation(X, y, directions, threshold: float, *, eps: float, eps2: float | None = None,
                                   band: float | None = None, baseline=None) -> BandStatistic:
    """``C_3^(z, t) = D^(t + eps) - D^(t - eps)``, ``D^(s) = (C_1^(s + eps'') - C_1^(s - eps''))/(2 eps'')``.

    Appendix C.1 (ReLU units; Lemmas 19-20 with the corrected slope-jump reading). Defaults
    ``eps'' = eps / 4`` and ``eps' = eps'' / 2``.
    """
    pos, wts, b = _stencil("c3", _real(threshold, "threshold"), _pos(eps, "eps"), eps2, band)
    return band_stencil(X, y, directions, pos, wts, band=b, baseline=baseline)


def delta_prime_test(X, y, directions, threshold: float, *, eps3: float, eps: float, band: float | None = None,
                     baseline=None) -> tuple[np.ndarray, BandStatistic]:
    """The direction test of Theorem 7: ``|C_2^(z, t)| >= phi(t) eps_3 / 2``.

    Returns
    -------
    accepted : ndarray of bool (k,)
    statistic : BandStatistic
    """
    eps3 = _pos(eps3, "eps3")
    stat = delta_prime_correlation(X, y, directions, threshold, eps=eps, band=band, baseline=baseline)
    return np.abs(stat.values) >= 0.5 * _phi(float(threshold)) * eps3, stat


# ============================================================================ nets and search

def sphere_net(n_inputs: int, resolution: float) -> np.ndarray:
    """Points of ``S^{n-1}`` at angular spacing about ``resolution`` (``n <= 3``): grid or Fibonacci lattice.

    ``n = 1``: ``{-1, +1}``; ``n = 2``: ``ceil(2 pi / resolution)`` equally spaced angles; ``n = 3``: the
    Fibonacci lattice with ``ceil(4 pi / resolution^2)`` points (each point's cell has area
    ``resolution^2``, so every point of the sphere is within about ``0.6 resolution`` of the net).
    """
    n = check_positive_int(n_inputs, "n_inputs")
    res = _pos(resolution, "resolution")
    if n == 1:
        return np.array([[1.0], [-1.0]])
    if n == 2:
        m = int(math.ceil(2 * math.pi / res))
        th = 2 * math.pi * np.arange(m) / m
        return np.column_stack([np.cos(th), np.sin(th)])
    if n == 3:
        m = int(math.ceil(4 * math.pi / res ** 2))
        k = np.arange(m) + 0.5
        zc = 1 - 2 * k / m
        th = math.pi * (1 + math.sqrt(5.0)) * k
        r = np.sqrt(1 - zc * zc)
        return np.column_stack([r * np.cos(th), r * np.sin(th), zc])
    raise InputError(f"an explicit net of S^{n - 1} has about (3/eps_2)^{n} points; use n_inputs <= 3 here and "
                     "delta_prime_local_search (started from Step 1 estimates) beyond.")


@dataclass
class NetSearchResult:
    """Output of :func:`delta_prime_search`.

    Attributes
    ----------
    directions : ndarray (r, n)
        One representative per cluster of accepted net points (largest ``|C_2^|``), sorted by it.
    values, standard_errors : ndarray (r,)
        ``C_2^`` (or ``C_3^``) at the representatives.
    net : ndarray (m, n)
    net_values, net_standard_errors : ndarray (m,)
    accepted : ndarray of bool (m,)
    labels : ndarray of int (m,)
        Cluster label of each accepted net point (0 for rejected ones).
    level : float
        The acceptance level ``phi(t) eps_3 / 2``.
    info : dict
    """

    directions: np.ndarray
    values: np.ndarray
    standard_errors: np.ndarray
    net: np.ndarray
    net_values: np.ndarray
    net_standard_errors: np.ndarray
    accepted: np.ndarray
    labels: np.ndarray
    level: float
    info: dict = field(default_factory=dict)


def _statistic(X, y, Z, t, statistic, eps, band, eps2, baseline, n_total=None):
    pos, wts, b = _stencil(statistic, t, eps, eps2, band)
    return band_stencil(X, y, Z, pos, wts, band=b, baseline=baseline, n_total=n_total)


def delta_prime_search(X, y, threshold: float, *, resolution: float, eps3: float, eps: float | None = None,
                       band: float | None = None, eps2: float | None = None, statistic: str = "c2",
                       baseline=None) -> NetSearchResult:
    """Brute-force net search of Theorem 7 / Corollary 1 for input dimension ``n <= 3``.

    Parameters
    ----------
    X : array (N, n); y : array (N,)
    threshold : float
        ``t``.
    resolution : float
        Net spacing ``eps_2`` (radians).
    eps3 : float
        Lower bound on ``|E[Q_i | w_i.x = t]|`` (Theorem 7); the test level is ``phi(t) eps_3 / 2``.
    eps : float, optional
        Difference half-width (default ``resolution``: a net point within the net spacing of ``w_i``
        still sees most of the jump, whose position along ``z`` spreads by about ``angle * |x_perp|``).
    band, eps2 : float, optional
        ``eps'`` and (``statistic="c3"``) ``eps''``.
    statistic : {"c2", "c3"}
        ``C_2`` (step, Section 3) or ``C_3`` (relu, Appendix C.1).
    baseline : float, optional
        ``c_0`` (default: median label).

    Returns
    -------
    NetSearchResult
    """
    X = as_2d_float(X, "X")
    t = _real(threshold, "threshold")
    res = _pos(resolution, "resolution")
    eps3 = _pos(eps3, "eps3")
    eps = res if eps is None else _pos(eps, "eps")
    net = sphere_net(X.shape[1], res)
    stat = _statistic(X, y, net, t, statistic, eps, band, eps2, baseline)
    level = 0.5 * _phi(t) * eps3
    acc = np.abs(stat.values) >= level
    labels = np.zeros(net.shape[0], dtype=np.int64)
    idx = np.flatnonzero(acc)
    reps = []
    if idx.size == 1:
        labels[idx] = 1
        reps = [int(idx[0])]
    elif idx.size > 1:
        chord = 2 * math.sin(res)                          # chord length of the angle 2 eps_2
        lab = fcluster(linkage(net[idx], method="single"), t=chord, criterion="distance")
        labels[idx] = lab
        for c in np.unique(lab):
            members = idx[lab == c]
            reps.append(int(members[np.argmax(np.abs(stat.values[members]))]))
    reps = sorted(reps, key=lambda j: -abs(stat.values[j]))
    return NetSearchResult(directions=net[reps], values=stat.values[reps], standard_errors=stat.standard_errors[reps],
                           net=net, net_values=stat.values, net_standard_errors=stat.standard_errors, accepted=acc,
                           labels=labels, level=level,
                           info={"eps": eps, "band": stat.band, "statistic": statistic, "n_net": net.shape[0],
                                 "n_total": stat.n_total})


def delta_prime_local_search(X, y, start, threshold: float, *, eps: float, band: float | None = None,
                             eps2: float | None = None, statistic: str = "c2", step: float = 0.2,
                             min_step: float | None = None, n_proposals: int = 16, max_iter: int = 200,
                             sign: float = 1.0, baseline=None, rng=None) -> tuple[np.ndarray, np.ndarray]:
    """Random local search on the sphere maximising ``sign * C_2^(z, t)`` (or ``C_3^``) from given starts [IMPL].

    The net of :func:`delta_prime_search` has ``(3/eps_2)^n`` points; for ``n > 3`` the same statistic
    is maximised locally instead. Each iteration draws ``n_proposals`` Gaussian moves of angular scale
    ``step`` in the tangent space, evaluates them on the same samples (common random numbers) and moves
    to the best one if it beats the current value; otherwise ``step`` is halved, down to ``min_step``
    (default ``eps / 4``: below the difference width the statistic is flat to within its noise). The
    difference width follows the step (``max(eps, 2 step)``): far from ``w_i`` the jump is smeared over
    ``angle * |x_perp|`` along ``z``, so a width ``eps`` much below the angle sees only noise.
    The signed statistic is maximised (``sign = +1``: ``E[Q_i | w_i.x = t] > 0`` as in Theorem 7): away
    from every ``w_i``, ``C_2 ~ 2 eps phi'(t) E[f | z.x = t] / phi(t)`` is negative for ``t > 0``, so
    ``|C_2|`` would grow away from the units.

    Returns
    -------
    directions : ndarray (k, n)
        The final direction of each start.
    values : ndarray (k,)
        The statistic there.
    """
    X = as_2d_float(X, "X")
    y = as_targets(y, "y", n_rows=X.shape[0]).reshape(-1)
    t = _real(threshold, "threshold")
    eps = _pos(eps, "eps")
    step = _pos(step, "step")
    min_step = eps / 4.0 if min_step is None else _pos(min_step, "min_step")
    n_proposals = check_positive_int(n_proposals, "n_proposals")
    max_iter = check_positive_int(max_iter, "max_iter")
    gen = check_random_state(rng)
    if sign not in (1, -1, 1.0, -1.0):
        raise InputError(f"sign must be +1 or -1 (the sign of E[Q_i | w_i.x = t]), got {sign!r}.")
    sgn = float(sign)
    Z0 = _directions(start, X.shape[1])
    c0 = float(np.median(y)) if baseline is None else _real(baseline, "baseline")
    keep = y != c0                                          # rows with y~ = 0 add nothing to any band sum
    Xa, ya, N = X[keep], y[keep], X.shape[0]

    _stencil(statistic, t, eps, eps2, band)                  # validate before the search

    def stat(Z, e):
        return _statistic(Xa, ya, Z, t, statistic, e, band, eps2, c0, n_total=N).values

    out, vals = [], []
    for z in Z0:
        s = step
        e = max(eps, 2 * s)                                 # coarse to fine: the width follows the step
        cur = sgn * stat(z[None, :], e)[0]
        for _ in range(max_iter):
            if s < min_step:
                break
            G = gen.standard_normal((n_proposals, z.size))
            G -= np.outer(G @ z, z)
            G /= np.linalg.norm(G, axis=1, keepdims=True)
            ang = s * np.abs(gen.standard_normal(n_proposals))
            P = np.cos(ang)[:, None] * z + np.sin(ang)[:, None] * G
            v = sgn * stat(P, e)
            j = int(np.argmax(v))
            if v[j] > cur:
                z, cur = P[j] / np.linalg.norm(P[j]), float(v[j])
            else:
                s *= 0.5
                if max(eps, 2 * s) < e:
                    e = max(eps, 2 * s)
                    cur = sgn * stat(z[None, :], e)[0]
        out.append(z)
        vals.append(sgn * cur)
    return np.asarray(out), np.asarray(vals)


# ============================================================================ population forms

def _orthonormal_multilinear(network: HighThresholdNetwork) -> UpperPolynomial:
    if not isinstance(network, HighThresholdNetwork):
        raise InputError(f"network must be a HighThresholdNetwork, got {type(network).__name__}.")
    if network.activation not in ("step", "relu"):
        raise AssumptionError("the delta'/delta'' predictions are for step (Section 3) and relu (Appendix C.1) "
                              f"units, got {network.activation!r}.")
    if not network.has_orthonormal_rows(1e-9):
        raise AssumptionError("Corollary 1 needs orthogonal w_i* (then the X_j are independent); this W* is not.")
    P = network.effective_upper
    if not isinstance(P, UpperPolynomial):
        raise AssumptionError("the prediction needs P as a polynomial (a callable upper part has no coefficients).")
    if P._keys.size and int(P._keys.max()) > 1:
        raise AssumptionError("the relu prediction is stated for a multilinear P (degree <= 1 in each X_i).")
    return P


def _unit_mean(network: HighThresholdNetwork) -> float:
    t = network.threshold
    if network.activation == "step":
        return float(special.ndtr(-t))
    return _phi(t) - t * float(special.ndtr(-t))


def corollary1_prediction(network: HighThresholdNetwork) -> np.ndarray:
    """``phi(t) E[dP/dX_i | w_i.x = t]`` per unit for orthogonal ``W*`` (Corollary 1; Lemma 19 corrected).

    Step units: ``phi(t) Q_i(mu, ..., mu)``, ``mu = Phi^c(t)``: the limit ``eps, eps' -> 0`` of
    ``C_2(w_i, t)``. Relu units: ``phi(t) (dP/dX_i)(m, .., 0, .., m)``, ``m = E[(g - t)_+]``: the slope
    jump measured by ``C_3(w_i, t)``. ``Q_i = P(.., 1, ..) - P(.., 0, ..)`` for multilinear ``P``.
    """
    P = _orthonormal_multilinear(network)
    d = network.n_hidden
    m = _unit_mean(network)
    base = np.full((d, d), m)
    hi, lo = base.copy(), base.copy()
    np.fill_diagonal(hi, 1.0)
    np.fill_diagonal(lo, 0.0)
    return _phi(network.threshold) * (P(hi) - P(lo))


def expected_band_statistic(network: HighThresholdNetwork, unit: int, positions, weights, *, band: float,
                            baseline: float | None = None) -> float:
    """Exact expectation of :func:`band_stencil` at ``z = w_unit`` for orthonormal ``W*`` (population form).

    ``E[C_1^(w_i, s)] = (1/eps') int_{s-eps'}^{s} phi(a) (P(m, .., u_t(a), .., m) - c_0) da`` with
    ``m = E[u_t(g)]`` (the other units are independent of ``w_i.x``; ``P`` multilinear).
    """
    P = _orthonormal_multilinear(network)
    d = network.n_hidden
    i = check_positive_int(unit, "unit", minimum=0)
    if i >= d:
        raise InputError(f"unit must be < {d}, got {i}.")
    band = _pos(band, "band")
    c0 = P.constant if baseline is None else _real(baseline, "baseline")
    m = _unit_mean(network)
    u = threshold_activation(network.activation, network.threshold)
    t = network.threshold
    row = np.full((1, d), m)

    def c1(a):
        r = row.copy()
        r[0, i] = float(u(np.asarray([a]))[0])
        return _phi(a) * (float(P(r)[0]) - c0)

    total = 0.0
    for s, w in zip(np.asarray(positions, float).reshape(-1), np.asarray(weights, float).reshape(-1)):
        lo, hi = s - band, s
        pts = [t] if lo < t < hi else None
        total += w * integrate.quad(c1, lo, hi, points=pts, epsabs=1e-15, epsrel=1e-13, limit=200)[0] / band
    return float(total)


_PAPER = "goel2019"
_GAUSS = "x ~ N(0, I)"
register("goel2019-theorem7", paper=_PAPER, algorithm="Theorem 7 (Lemma 8, Claims 3-5)", target=delta_prime_test,
         assumptions=(_GAUSS, "u = step", "abs(P(X)) <= norm(X)^c1", "abs(E[Q_i given w_i.x = t]) >= eps_3", "known t"),
         description="delta' correlation C_2(z, t) = C_1(t + eps) - C_1(t - eps) and the direction test")
register("goel2019-corollary1", paper=_PAPER, algorithm="Corollary 1", target=delta_prime_search,
         assumptions=(_GAUSS, "u = step (relu: statistic='c3')", "W* orthogonal for the prediction",
                      "linear coefficients of P(mu(X + 1)) >= eps_3 mu", "n <= 3 (net search)"),
         description="brute-force eps_2-net search with the delta' test, single-linkage clusters")
register("goel2019-theorem3", paper=_PAPER, algorithm="Theorem 3 (introduction form of Corollary 1)",
         target=delta_prime_search,
         assumptions=(_GAUSS, "u = step", "W* orthogonal", "linear coefficients of P(mu(X + 1)) >= 1/poly(d)"),
         description="poly sample complexity, exponential time: the delta' net search of Corollary 1")
register("goel2019-theorem7-local", paper=_PAPER, algorithm="Theorem 7 (local search beyond n = 3)",
         target=delta_prime_local_search, assumptions=(_GAUSS, "u = step or relu", "starts near the w_i"),
         description="random local search on the sphere maximising C_2 (or C_3) on common samples")
register("goel2019-lemma19", paper=_PAPER, algorithm="Appendix C.1, Lemmas 19-20",
         target=delta_double_prime_correlation,
         assumptions=(_GAUSS, "u = relu", "P of constant degree, sum of abs(c_S) <= poly(d)",
                      "E[dP/dX_i given w_i.x = t] >= eps_3 (corrected slope jump)"),
         description="delta'' correlation C_3 = D(t + eps) - D(t - eps): jump of the slope of C_1 at t")
register("goel2019-corollary1-prediction", paper=_PAPER, algorithm="Corollary 1 (prediction)",
         target=corollary1_prediction, assumptions=("W* orthogonal", "P multilinear", "u = step or relu"),
         description="phi(t) Q_i(mu, ..., mu): the value of C_2 (step) or C_3 (relu) at w_i")

"""Binary lowest-layer weights under exponential activations (Theorems 8 and 9; Appendices D.1, D.2).

Goel & Panigrahy (2019), Section 4. The weights ``w_i`` are 0/1 vectors with pairwise disjoint supports
``T_i`` (they "select coordinates of x"), ``k_i = |T_i|``, and ``P`` is multilinear:
``f(x) = sum_S c_S prod_{p in S} exp(rho (w_p.x - t))`` (:class:`ExponentialBinaryNetwork`).

Theorem 8 (``u_t(a) = e^{rho (a - t)}``; Algorithm 3, ConstructCorrelationGraph)
    ``alpha_ij = E[f(x) x_i x_j]`` equals, with ``U_S = union of T_p (p in S)`` and
    ``E[x e^{rho x}] = rho e^{rho^2/2}``:
    ``sum_S c_S e^{-rho t |S|} 1[i, j in U_S] rho^2 e^{rho^2 |U_S| / 2}``. So for ``i, j`` in the same
    ``T_r`` it is the coefficient of ``X_r`` in ``Q(X) = rho^2 P(mu_1 (X_1 + 1), ..., mu_d (X_d + 1))``,
    for ``i in T_r, j in T_s`` (``r != s``) the coefficient of ``X_r X_s``, and 0 when ``i`` or ``j`` is in
    no support. **[Corrected]** ``mu_p = exp(-rho (t - rho k_p / 2))`` (the paper prints
    ``mu = e^{-rho t}`` in the statement and ``e^{-rho (t - rho d)/2}`` in the proof). If every linear
    coefficient of ``Q`` exceeds every pairwise one, thresholding ``alpha`` between the two levels leaves a
    disjoint union of cliques, one per unit (:func:`correlation_graph`; the threshold the paper calls
    ``rho`` is ``tau_edge`` here).
Theorem 9 (``u(a) = e^a``, no threshold; **experimental**)
    ``g(z) = e^{-|z|^2/2} E[f(x) e^{z.x}] = E_{x ~ N(z, I)}[f(x)] = sum_S c_S exp(|U_S|/2 + sum_{p in U_S} z_p)``
    depends on ``z`` only through the group sums. The paper maximises
    ``h(z) = g(z) - lambda |z|_1 - gamma |z|_2^2`` and shows (Lemmas 21-23) that at a local maximum one
    group is large and the rest small. As printed, ``h`` is unbounded above (``g`` grows like
    ``e^{k s}`` along ``s 1_{T_i}``, the penalties only polynomially), so true local maxima exist only on
    a bounded domain the paper does not give (errata: also ``S_i cap S_j = emptyset``, ``k notin S_i``).
    :func:`group_sum_maximization` uses the box ``[0, B]^n`` and reads off ``{p : z_p >= B/2}``; the
    large group then sits at the box boundary, an artefact of the box. At a box corner Lemma 21's
    exchange move (mass from one group to another) is infeasible, so a product term ``c_S`` coupling the
    found group to group ``j`` makes group ``j`` grow as well once
    ``c_S e^{|U_S|/2 + k B} > lambda - c_j e^{k_j/2}``: the two groups are returned merged. Models with
    dominant singleton terms (as the paper's ``s`` parameter implicitly assumes) avoid this.

Paper symbols -> names
----------------------
=========================  ==========================================================
``rho`` (rate)             ``rate``
``t``                      ``threshold``
``T_i`` / ``S_i``          ``supports`` (rows of the binary ``hidden_weights``)
``alpha_ij``               :func:`correlation_matrix` (samples), ``population_correlations``
``rho`` (Algorithm 3)      ``tau_edge``
``mu``                     ``ExponentialBinaryNetwork.mu`` (corrected)
``g(z)``, ``h(z)``         :class:`SampleShiftedMean`, ``shifted_mean``; ``lam``, ``gamma``, ``box``
=========================  ==========================================================
"""

from __future__ import annotations

import itertools
import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize
from scipy.sparse.csgraph import connected_components

from ..._validation import (
    as_2d_float,
    as_targets,
    check_positive_int,
    check_random_state,
)
from ...errors import AssumptionError, ConvergenceError, InputError
from ..registry import register
from .model import UpperPolynomial

__all__ = ["ExponentialBinaryNetwork", "correlation_matrix", "correlation_graph", "CorrelationGraphResult",
           "learn_sparse_binary_weights", "theorem8_condition", "SampleShiftedMean", "GroupSearchResult",
           "group_sum_maximization"]


def _finite(value: Any, name: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or (positive and value <= 0):
        raise InputError(f"{name} must be a finite {'positive ' if positive else ''}number, got {value!r}.")
    return float(value)


class ExponentialBinaryNetwork:
    """``f(x) = P(exp(rho (w_1.x - t)), ..., exp(rho (w_d.x - t)))`` with disjoint 0/1 rows ``w_i``.

    Parameters
    ----------
    hidden_weights : array (d, n) of 0/1
        Row ``i`` is the indicator of the support ``T_i``; supports pairwise disjoint and non-empty.
    rate : float, default 1
        ``rho > 0`` (Theorem 9: ``rho = 1``, ``t = 0``).
    threshold : float, default 0
    upper : dict or UpperPolynomial, optional
        Multilinear ``P`` (default ``sum_i X_i``).
    """

    def __init__(self, hidden_weights, rate: float = 1.0, threshold: float = 0.0, upper=None):
        W = as_2d_float(hidden_weights, "hidden_weights")
        if not np.all((W == 0) | (W == 1)):
            raise AssumptionError("Theorems 8-9 need binary weights w_i in {0, 1}^n.")
        if np.any(W.sum(axis=1) == 0) or np.any(W.sum(axis=0) > 1):
            raise AssumptionError("Theorems 8-9 need non-empty, pairwise disjoint supports (every input "
                                  "coordinate in at most one w_i).")
        self.hidden_weights = W
        self.rate = _finite(rate, "rate", positive=True)
        self.threshold = _finite(threshold, "threshold")
        d = W.shape[0]
        if upper is None:
            upper = UpperPolynomial.linear(np.ones(d))
        self.upper = upper if isinstance(upper, UpperPolynomial) else UpperPolynomial(upper, n_vars=d)
        if self.upper.n_vars != d:
            raise InputError(f"upper has {self.upper.n_vars} variables but W has {d} rows.")
        if self.upper._keys.size and int(self.upper._keys.max()) > 1:
            raise AssumptionError("Theorems 8-9 need a multilinear P (degree <= 1 in each X_i).")

    @property
    def sizes(self) -> np.ndarray:
        """Support sizes ``k_i``."""
        return self.hidden_weights.sum(axis=1)

    @property
    def mu(self) -> np.ndarray:
        """``mu_i = E[u_t(w_i.x)] = exp(-rho (t - rho k_i / 2))`` (corrected Theorem 8 constant)."""
        return np.exp(-self.rate * (self.threshold - self.rate * self.sizes / 2.0))

    def hidden_outputs(self, X) -> np.ndarray:
        X = as_2d_float(X, "X", n_features=self.hidden_weights.shape[1], min_rows=0)
        return np.exp(self.rate * (X @ self.hidden_weights.T - self.threshold))

    def predict(self, X) -> np.ndarray:
        return self.upper(self.hidden_outputs(X))

    def _terms(self):
        for key, c in self.upper.coefficients.items():
            S = [i for i, e in enumerate(key) if e]
            if S:
                yield S, c

    def population_correlations(self) -> np.ndarray:
        """Exact ``alpha_ij = E[f(x) x_i x_j]`` (off-diagonal; the diagonal is set to 0)."""
        W = self.hidden_weights
        n = W.shape[1]
        A = np.zeros((n, n))
        r, t = self.rate, self.threshold
        for S, c in self._terms():
            U = W[S].sum(axis=0)
            A += c * math.exp(-r * t * len(S)) * r * r * math.exp(r * r * U.sum() / 2.0) * np.outer(U, U)
        np.fill_diagonal(A, 0.0)
        return A

    def q_coefficients(self) -> tuple[np.ndarray, np.ndarray]:
        """Linear and pairwise coefficients of ``Q(X) = rho^2 P(mu (X + 1))`` (Theorem 8's condition)."""
        d = self.hidden_weights.shape[0]
        mu = self.mu
        lin = np.zeros(d)
        pair = np.zeros((d, d))
        for S, c in self._terms():
            m = c * self.rate ** 2 * float(np.prod(mu[S]))
            lin[S] += m
            for i, j in itertools.combinations(S, 2):
                pair[i, j] += m
                pair[j, i] += m
        return lin, pair

    def shifted_mean(self, Z) -> np.ndarray:
        """Exact ``g(z) = E_{x ~ N(z, I)}[f(x)]`` at the rows of ``Z`` (Theorem 9's statistic)."""
        Z = np.atleast_2d(np.asarray(Z, dtype=np.float64))
        W, r, t = self.hidden_weights, self.rate, self.threshold
        out = np.zeros(Z.shape[0])
        for S, c in self._terms():
            U = W[S].sum(axis=0)
            out += c * np.exp(-r * t * len(S) + r * r * U.sum() / 2.0 + r * (Z @ U))
        return out

    def shifted_mean_gradient(self, Z) -> np.ndarray:
        Z = np.atleast_2d(np.asarray(Z, dtype=np.float64))
        W, r, t = self.hidden_weights, self.rate, self.threshold
        out = np.zeros_like(Z)
        for S, c in self._terms():
            U = W[S].sum(axis=0)
            out += (c * r * np.exp(-r * t * len(S) + r * r * U.sum() / 2.0 + r * (Z @ U)))[:, None] * U
        return out


# ============================================================================ Theorem 8

def correlation_matrix(X, y) -> tuple[np.ndarray, np.ndarray]:
    """``alpha^_ij = E^[y~ x_i x_j]`` (``y~ = y - mean y``: ``E[c x_i x_j] = 0`` for ``i != j``) and standard errors.

    Returns
    -------
    alpha : ndarray (n, n), zero diagonal
    standard_errors : ndarray (n, n), zero diagonal
    """
    X = as_2d_float(X, "X", min_rows=2)
    y = as_targets(y, "y", n_rows=X.shape[0]).reshape(-1)
    N = X.shape[0]
    yt = y - y.mean()
    A = (X * yt[:, None]).T @ X / N
    S2 = (X * X * (yt * yt)[:, None]).T @ (X * X) / N
    se = np.sqrt(np.maximum(S2 - A * A, 0.0) / N)
    np.fill_diagonal(A, 0.0)
    np.fill_diagonal(se, 0.0)
    return A, se


@dataclass
class CorrelationGraphResult:
    """Output of :func:`correlation_graph` (Algorithm 3).

    Attributes
    ----------
    weights : ndarray (r, n) of 0/1
        One row per component of size >= 2 (the recovered supports), largest first.
    adjacency : ndarray (n, n) of bool
    tau_edge : float
        Edge threshold used.
    components : list of ndarray
    clique_density : ndarray (r,)
        Edges present / edges of a clique, per component: 1 when the graph is a disjoint union of
        cliques, as Theorem 8 predicts; lower values mean the condition failed or the noise is too large.
    gap : float
        Ratio of the smallest value above ``tau_edge`` to the largest below (auto threshold).
    """

    weights: np.ndarray
    adjacency: np.ndarray
    tau_edge: float
    components: list
    clique_density: np.ndarray
    gap: float = float("nan")
    info: dict = field(default_factory=dict)


def correlation_graph(alpha, tau_edge: float | None = None) -> CorrelationGraphResult:
    """Algorithm 3 (ConstructCorrelationGraph): threshold ``alpha``, components -> binary ``W``.

    Parameters
    ----------
    alpha : array (n, n), symmetric
        ``alpha_ij = E[f x_i x_j]`` (exact or estimated).
    tau_edge : float, optional
        Edge threshold (the paper's ``rho`` of Algorithm 3). Default [IMPL]: the midpoint of the largest
        gap of the sorted off-diagonal values (a 1-D two-cluster split between the pairwise and the
        linear coefficient levels of ``Q``).
    """
    A = as_2d_float(alpha, "alpha")
    n = A.shape[0]
    if A.shape != (n, n) or n < 2:
        raise InputError(f"alpha must be a square (n, n) matrix with n >= 2, got {A.shape}.")
    A = 0.5 * (A + A.T)
    vals = np.sort(A[np.triu_indices(n, 1)])
    gap = float("nan")
    if tau_edge is None:
        if vals.size < 2:
            raise InputError("cannot choose tau_edge from a single pair; pass tau_edge.")
        j = int(np.argmax(np.diff(vals)))
        tau = 0.5 * (vals[j] + vals[j + 1])
        gap = float(vals[j + 1] / vals[j]) if vals[j] > 0 else float("inf")
    else:
        tau = _finite(tau_edge, "tau_edge")
    adj = A >= tau
    np.fill_diagonal(adj, False)
    n_comp, lab = connected_components(adj, directed=False)
    comps = [np.flatnonzero(lab == c) for c in range(n_comp)]
    comps = sorted([c for c in comps if c.size >= 2], key=lambda c: (-c.size, c[0]))
    W = np.zeros((len(comps), n))
    dens = np.zeros(len(comps))
    for r, c in enumerate(comps):
        W[r, c] = 1.0
        sub = adj[np.ix_(c, c)]
        dens[r] = sub.sum() / (c.size * (c.size - 1))
    return CorrelationGraphResult(weights=W, adjacency=adj, tau_edge=float(tau), components=comps,
                                  clique_density=dens, gap=gap)


def learn_sparse_binary_weights(X, y, *, tau_edge: float | None = None) -> CorrelationGraphResult:
    """Theorem 8 from samples: :func:`correlation_matrix` then :func:`correlation_graph`.

    ``result.info["standard_errors"]`` holds the standard errors of ``alpha^``; ``clique_density < 1``
    flags a graph that is not a union of cliques (Theorem 8's gap condition failed, or too few samples).
    Size-1 supports are not recoverable by pairwise correlations (they look like unused coordinates).
    """
    A, se = correlation_matrix(X, y)
    res = correlation_graph(A, tau_edge)
    res.info.update(alpha=A, standard_errors=se)
    return res


def theorem8_condition(network: ExponentialBinaryNetwork) -> dict:
    """Theorem 8's condition: every linear coefficient of ``Q`` above every pairwise one (with the ratio).

    Returns
    -------
    dict
        ``linear`` (d,), ``pairwise`` (d, d), ``ratio`` = min linear / max pairwise (``inf`` without
        products), ``met`` (ratio > 1), ``mu`` (corrected).
    """
    if not isinstance(network, ExponentialBinaryNetwork):
        raise InputError(f"network must be an ExponentialBinaryNetwork, got {type(network).__name__}.")
    lin, pair = network.q_coefficients()
    off = pair[~np.eye(pair.shape[0], dtype=bool)]
    top = float(off.max()) if off.size else 0.0
    ratio = float(lin.min() / top) if top > 0 else float("inf")
    return {"linear": lin, "pairwise": pair, "ratio": ratio, "met": bool(ratio > 1 and lin.min() > 0),
            "mu": network.mu}


# ============================================================================ Theorem 9 (experimental)

class SampleShiftedMean:
    """``g^(z) = e^{-|z|^2/2} E^[f(x) e^{z.x}]`` and its gradient from samples ``x ~ N(0, I)``.

    The estimator reweights the samples to ``N(z, I)``; its relative variance grows like
    ``e^{|z|^2}``, so keep the box small.
    """

    def __init__(self, X, y):
        self.X = as_2d_float(X, "X")
        self.y = as_targets(y, "y", n_rows=self.X.shape[0]).reshape(-1)

    def shifted_mean(self, Z) -> np.ndarray:
        Z = np.atleast_2d(np.asarray(Z, dtype=np.float64))
        E = np.exp(self.X @ Z.T - 0.5 * np.einsum("ij,ij->i", Z, Z))
        return self.y @ E / self.X.shape[0]

    def shifted_mean_gradient(self, Z) -> np.ndarray:
        Z = np.atleast_2d(np.asarray(Z, dtype=np.float64))
        E = np.exp(self.X @ Z.T - 0.5 * np.einsum("ij,ij->i", Z, Z)) * self.y[:, None]
        N = self.X.shape[0]
        return (E.T @ self.X) / N - Z * E.sum(axis=0)[:, None] / N


@dataclass
class GroupSearchResult:
    """Output of :func:`group_sum_maximization`.

    Attributes
    ----------
    supports : list of ndarray
        The groups found, in order.
    weights : ndarray (r, n) of 0/1
    maximizers : ndarray (r, n)
        The box-constrained local maximiser of each search.
    at_box : ndarray of bool (r,)
        Whether the group's coordinates sit at the box bound ``B`` (the printed objective is unbounded:
        then the maximum is a box artefact, see the module docstring).
    """

    supports: list
    weights: np.ndarray
    maximizers: np.ndarray
    at_box: np.ndarray
    info: dict = field(default_factory=dict)


def group_sum_maximization(source, n_groups: int, *, lam: float | None = None, gamma: float = 0.1,
                           box: float = 2.0, level: float | None = None, rng=None) -> GroupSearchResult:
    """Theorem 9 (experimental): maximise ``h = g - lam |z|_1 - gamma |z|^2`` on ``[0, box]^n``, group by group.

    Each search starts at ``e_p`` for a random free coordinate ``p`` (``z >= 0``, so ``|z|_1 = sum z``),
    runs L-BFGS-B on ``-h`` and reads off ``{p : z_p >= level}``; the coordinates found are then clamped to
    0 and the next search begins (Appendix D.2's "restart with the found coordinates removed").

    Parameters
    ----------
    source : ExponentialBinaryNetwork (exact ``g``) or SampleShiftedMean
    n_groups : int
        Groups to look for (the search stops early when a maximiser has no coordinate above ``level``).
    lam : float, optional
        ``lambda``. Default: 1.05 times the largest ``dg/dz_p`` at ``z = 0`` (so ``z = 0`` is a local
        maximum of ``h`` and a group grows only from a start that already favours it, as in Lemma 21).
    gamma : float, default 0.1
    box : float, default 2
        ``B``; required because ``h`` is unbounded above (erratum to Theorem 9).
    level : float, optional
        Read-off level (default ``box / 2``).
    rng : None, int or Generator

    Returns
    -------
    GroupSearchResult
    """
    n_groups = check_positive_int(n_groups, "n_groups")
    gamma = _finite(gamma, "gamma")
    if gamma < 0:
        raise InputError(f"gamma must be >= 0, got {gamma}.")
    box = _finite(box, "box", positive=True)
    level = box / 2.0 if level is None else _finite(level, "level", positive=True)
    gen = check_random_state(rng)
    if isinstance(source, ExponentialBinaryNetwork):
        if any(c < 0 for c in source.upper.coefficients.values()):
            raise AssumptionError("Theorem 9 needs every coefficient of P to be >= 0.")
        n = source.hidden_weights.shape[1]
    elif isinstance(source, SampleShiftedMean):
        n = source.X.shape[1]
    else:
        raise InputError("source must be an ExponentialBinaryNetwork (exact g) or a SampleShiftedMean.")
    g0 = source.shifted_mean_gradient(np.zeros((1, n)))[0]
    lam = 1.05 * float(g0.max()) if lam is None else _finite(lam, "lam", positive=True)
    free = np.ones(n, dtype=bool)
    supports, maxima, at_box = [], [], []

    def negh(z):
        g = float(source.shifted_mean(z[None, :])[0])
        dg = source.shifted_mean_gradient(z[None, :])[0]
        return -(g - lam * z.sum() - gamma * z @ z), -(dg - lam - 2 * gamma * z)

    for _ in range(n_groups):
        if not free.any():
            break
        p = int(gen.choice(np.flatnonzero(free)))
        z0 = np.zeros(n)
        z0[p] = 1.0 if box >= 1.0 else box
        bounds = [(0.0, box) if f else (0.0, 0.0) for f in free]
        res = optimize.minimize(negh, z0, jac=True, method="L-BFGS-B", bounds=bounds,
                                options={"maxiter": 2000, "ftol": 1e-15, "gtol": 1e-12})
        if not np.all(np.isfinite(res.x)):
            raise ConvergenceError("the Theorem 9 ascent produced non-finite values; lower box.")
        S = np.flatnonzero(res.x >= level)
        if S.size == 0:
            break
        supports.append(S)
        maxima.append(res.x)
        at_box.append(bool(np.all(res.x[S] >= box * (1 - 1e-9))))
        free[S] = False
    W = np.zeros((len(supports), n))
    for r, S in enumerate(supports):
        W[r, S] = 1.0
    return GroupSearchResult(supports=supports, weights=W, maximizers=np.asarray(maxima).reshape(-1, n),
                             at_box=np.asarray(at_box, dtype=bool), info={"lam": lam, "gamma": gamma, "box": box,
                                                                         "level": level})


_PAPER = "goel2019"
register("goel2019-theorem8", paper=_PAPER, algorithm="Theorem 8, Algorithm 3", target=learn_sparse_binary_weights,
         assumptions=("x ~ N(0, I)", "u_t(a) = exp(rho (a - t))", "w_i in {0,1}^n, disjoint supports of size >= 2",
                      "P multilinear", "linear coefs of rho^2 P(mu(X + 1)) > pairwise ones, "
                      "mu = exp(-rho (t - rho k / 2)) (corrected)"),
         description="correlation graph alpha_ij = E[f x_i x_j], threshold at the largest gap, cliques -> W")
register("goel2019-theorem9", paper=_PAPER, algorithm="Theorem 9 (Lemmas 21-23; experimental)",
         target=group_sum_maximization,
         assumptions=("x ~ N(0, I)", "u(a) = e^a, no threshold", "w_i in {0,1}^n disjoint", "all c_S >= 0",
                      "P multilinear", "bounded box (the printed objective is unbounded)"),
         description="maximise g(z) - lambda norm1(z) - gamma norm(z)^2 on the box [0, B]^n, g = E_{N(z, I)}[f]; groups one by one")

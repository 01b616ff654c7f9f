"""Identifiability tools of Awasthi-Tang-Vijayaraghavan 2021 (internal): the sign-flip sets of
Theorem 3.4 (corrected second equation), the construction of Claim 4.8, the smoothed instances of
Appendix E with ``s_m(W^{(.)l})``, and the root-separation constant of Lemma 4.3 (corrected).

Erratum to eq. (2) of Theorem 3.4 (docs errata page): a sign vector ``xi`` (flip set ``F = {i : xi_i = -1}``) gives the same
function iff

    sum_{i in F} a_i w_i = 0   and   sum_{i in F} a_i b_i = 0,

because ``relu(z) - relu(-z) = z`` makes ``f - g = sum_{i in F} a_i (w_i^T x + b_i)``. The paper's
eq. (2) prints the second condition without the factor ``xi_i``.

Erratum E2: Lemma 4.3's ``max(|He_k(x)|, |He_{k+1}(x)|) >= sqrt(k!)/2`` fails for ``k >= 8``; the proof
gives ``sqrt((k-1)!)/2``.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
from numpy.polynomial import hermite_e as H
from scipy import linalg, optimize

from ..._validation import check_positive_int, check_random_state
from ...errors import AssumptionError, InputError
from ...hermite import khatri_rao_power
from ...hermite.polynomials import hermite_table
from ...network import TwoLayerNetwork

__all__ = ["sign_flip_sets", "flip_units", "claim48_instance", "smoothed_instance", "khatri_rao_smin",
           "adversarial_weights", "hermite_separation"]


def _net_arrays(network) -> tuple[np.ndarray, np.ndarray, np.ndarray]:

    if not isinstance(network, TwoLayerNetwork):
        raise InputError(f"network must be a TwoLayerNetwork, got {type(network).__name__}.")
    if network.n_outputs != 1:
        raise InputError(f"expected one output, got {network.n_outputs}.")
    net = network.canonical()
    return net.output_weights[0], net.hidden_bias, net.hidden_weights


def sign_flip_sets(network, *, tol: float = 1e-10, max_units: int = 20) -> list[tuple[int, ...]]:
    """All non-empty flip sets ``F`` with ``sum_F a_i w_i = 0`` and ``sum_F a_i b_i = 0`` (corrected
    Theorem 3.4, erratum E3): flipping ``(b_i, w_i) -> (-b_i, -w_i)`` for ``i in F`` leaves the network
    function unchanged, and these are the only such sign vectors.

    Parameters
    ----------
    network : TwoLayerNetwork
        ReLU network with one output (compared in canonical form).
    tol : float
        A set qualifies when ``||sum_F a_i (w_i, b_i)|| <= tol * max_i ||a_i (w_i, b_i)||``.
    max_units : int
        Brute force over the ``2^m - 1`` subsets is refused above this many units.

    Returns
    -------
    list of tuple of int
    """
    a, b, W = _net_arrays(network)
    m = a.shape[0]
    if m > max_units:
        raise InputError(f"sign_flip_sets enumerates 2^m subsets; m = {m} > max_units = {max_units}.")
    V = np.hstack([a[:, None] * W, (a * b)[:, None]])  # rows a_i (w_i, b_i)
    scale = max(float(np.linalg.norm(V, axis=1).max()), np.finfo(float).tiny)
    out = []
    masks = np.array(list(itertools.product((0, 1), repeat=m)), dtype=float)[1:]  # skip the empty set
    sums = masks @ V
    ok = np.linalg.norm(sums, axis=1) <= tol * scale
    for row in masks[ok]:
        out.append(tuple(int(i) for i in np.flatnonzero(row)))
    return out


def flip_units(network, flip: Any):
    """The network with ``(b_i, w_i) -> (-b_i, -w_i)`` for every ``i`` in ``flip`` (output weights kept)."""

    a, b, W = _net_arrays(network)
    s = np.ones(a.shape[0])
    idx = np.asarray(list(flip), dtype=int)
    if idx.size and (idx.min() < 0 or idx.max() >= a.shape[0]):
        raise InputError(f"flip indices must be in range({a.shape[0]}), got {list(flip)}.")
    s[idx] = -1.0
    return TwoLayerNetwork(W * s[:, None], b * s, a[None, :], network.output_bias)


def claim48_instance(W: Any):
    """Claim 4.8: for linearly dependent unit rows ``W`` (``m x d``), two different sign patterns of the
    same function even with zero biases.

    Take ``lambda != 0`` with ``sum_i lambda_i w_i = 0`` (the last right singular vector of ``W^T``), set
    ``a_i = lambda_i``, ``b = 0``, and flip the units with ``lambda_i != 0``. Then
    ``sum_i a_i relu(w_i^T x) = sum_i a_i relu(-w_i^T x)`` for every ``x``.

    Returns
    -------
    f, g : TwoLayerNetwork
        The two networks (``g`` is ``f`` with the flips).
    flip : tuple of int
        The flipped units.
    """

    W = np.atleast_2d(np.asarray(W, dtype=np.float64))
    if W.ndim != 2:
        raise InputError(f"W must have shape (m, d), got {W.shape}.")
    W = W / np.linalg.norm(W, axis=1, keepdims=True)
    _, s, Vt = linalg.svd(W.T, full_matrices=True)
    m = W.shape[0]
    rank = int(np.count_nonzero(s > 1e-10 * s[0]))
    if rank == m:
        raise AssumptionError(f"Claim 4.8 needs linearly dependent rows; these {m} rows have full rank "
                              "(then the signs are identifiable, Theorem 4.1).")
    lam = Vt[-1]
    lam = lam / np.abs(lam).max()
    flip = tuple(int(i) for i in np.flatnonzero(np.abs(lam) > 1e-12))
    f = TwoLayerNetwork(W, np.zeros(m), lam[None, :])
    return f, flip_units(f, flip), flip


def khatri_rao_smin(W: Any, order: int) -> float:
    """``s_m(W^{(.)l})``: smallest singular value of the rows ``w_i^{(x)l}`` (unit rows; the
    non-degeneracy quantity of Theorems 3.2 and 4.2). Zero when ``m > C(d + l - 1, l)``."""

    W = np.atleast_2d(np.asarray(W, dtype=np.float64))
    W = W / np.linalg.norm(W, axis=1, keepdims=True)
    K = khatri_rao_power(W, check_positive_int(order, "order"))
    s = linalg.svdvals(K)
    return float(s[-1]) if W.shape[0] <= K.shape[1] else 0.0


def adversarial_weights(kind: str, d: int, m: int, rng=None, *, spread: float = 0.05) -> np.ndarray:
    """Degenerate weight matrices for the smoothed analysis (Appendix E), unit rows.

    ``"subspace"``: every row in one random 2-D subspace (``W^{(.)2}`` has rank <= 3);
    ``"clustered"``: rows in ``ceil(m / 3)`` tight clusters of angular width ``spread``;
    ``"repeated"``: rows ``e_{i mod d}`` tilted by ``spread``.
    """
    gen = check_random_state(rng)
    d, m = check_positive_int(d, "d"), check_positive_int(m, "m")
    if kind == "subspace":
        Q, _ = linalg.qr(gen.standard_normal((d, 2)), mode="economic")
        ang = gen.uniform(0, np.pi, m)
        W = np.cos(ang)[:, None] * Q[:, 0] + np.sin(ang)[:, None] * Q[:, 1]
    elif kind == "clustered":
        n_c = -(-m // 3)
        centers = gen.standard_normal((n_c, d))
        W = centers[np.arange(m) % n_c] + spread * gen.standard_normal((m, d)) / math.sqrt(d)
    elif kind == "repeated":
        W = np.eye(d)[np.arange(m) % d] + spread * gen.standard_normal((m, d)) / math.sqrt(d)
    else:
        raise InputError(f"kind must be 'subspace', 'clustered' or 'repeated', got {kind!r}.")
    return W / np.linalg.norm(W, axis=1, keepdims=True)


def smoothed_instance(W_adv: Any, a: Any, b: Any, tau: float, order: int = 2, rng=None):
    """Appendix E: perturb an adversarial instance, ``W^ = W_adv + (tau / sqrt(d)) G`` with i.i.d.
    ``G_ij ~ N(0, 1)``, renormalise the rows (moving the scale into ``a`` and ``b``).

    Returns
    -------
    network : TwoLayerNetwork
        ``sum_i a_i relu(w^_i^T x + b_i)`` in canonical form.
    s_min : float
        ``s_m(W^{(.)order})`` of the perturbed rows; [BCPV19, Thm 2.1] gives
        ``>= (c_l / sqrt(m)) (tau / d)^l`` w.h.p. when ``m <= (1 - delta) C(d + l - 1, l)``.
    """

    gen = check_random_state(rng)
    W = np.atleast_2d(np.asarray(W_adv, dtype=np.float64))
    m, d = W.shape
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if a.shape != (m,) or b.shape != (m,):
        raise InputError(f"a and b must have shape ({m},), got {a.shape} and {b.shape}.")
    if not (np.isfinite(tau) and tau >= 0):
        raise InputError(f"tau must be a finite number >= 0, got {tau!r}.")
    What = W + (tau / math.sqrt(d)) * gen.standard_normal((m, d))
    net = TwoLayerNetwork(What, b, a[None, :]).canonical()
    return net, khatri_rao_smin(net.hidden_weights, order)


def hermite_separation(k: int) -> float:
    """``min_x max(|He_k(x)|, |He_{k+1}(x)|)`` (Lemma 4.3), computed numerically.

    Lemma 4.3 as printed claims ``>= sqrt(k!)/2``, false for ``k >= 8`` (erratum E2); the proof gives
    ``>= sqrt((k-1)!)/2``. The minimum is attained where ``|He_k| = |He_{k+1}|`` near a root of one of
    them: every root of ``He_k He_{k+1}`` is bracketed and refined.
    """
    k = check_positive_int(k, "k")

    roots = np.concatenate([H.hermeroots([0] * k + [1]), H.hermeroots([0] * (k + 1) + [1])])
    span = max(np.abs(roots).max(), 1.0) + 1.0

    def f(x):
        he = hermite_table(k + 1, x)
        return max(abs(he[k]), abs(he[k + 1]))

    grid = np.linspace(-span, span, 20001)
    he = hermite_table(k + 1, grid)
    vals = np.maximum(np.abs(he[:, k]), np.abs(he[:, k + 1]))
    best = np.inf
    step = grid[1] - grid[0]
    for i in np.flatnonzero((vals[1:-1] <= vals[:-2]) & (vals[1:-1] <= vals[2:])) + 1:
        res = optimize.minimize_scalar(f, bounds=(grid[i] - step, grid[i] + step), method="bounded",
                                       options={"xatol": 1e-13})
        best = min(best, float(res.fun), float(vals[i]))
    return best

"""Diagnostics of the combinatorial facts behind the exact algorithms (Lemmas 7, 8, 19, 21).

* Lemma 8: for a Gaussian column x, ``Pr[(V x)_i < 0 < (V x)_j] = θ_ij / (2π)`` (θ_ij the angle between
  rows i and j), so every ordered pair of units "disagrees" on a constant fraction of columns;
* Lemma 7: ``κ(V) > c / θ_min`` (small angles mean ill-conditioning);
* Lemma 19: ``σ_min(f(V X̄)) = Ω(√ℓ / κ(V)^2)``, so ``A = U f(V X)`` has a unique solution;
* Lemma 21: the number of 1-sparse columns of ``f(V X)`` per unit (what Algorithm 7 needs, ``>= d``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._validation import as_2d_float
from ...errors import InputError

__all__ = ["sign_pattern_statistics"]


def sign_pattern_statistics(V: Any, X: Any) -> dict:
    """Empirical sign-pattern statistics of ``V X`` (rows of ``X`` are samples) next to their theory.

    Returns
    -------
    dict with ``split_frequency`` (k, k): fraction of samples with ``v_i x < 0 < v_j x``;
    ``split_theory`` (k, k): ``θ_ij / (2π)``; ``min_angle`` (smallest angle between the lines of two rows,
    Lemma 7), ``condition`` (``κ(V)``); ``one_sparse_counts`` (k,): samples where only unit i is active
    (Lemma 21); ``sigma_min_over_sqrt_n``: ``σ_min(relu(X V^T)) / √n`` (Lemma 19).
    """
    V = np.asarray(V, dtype=np.float64)
    if V.ndim != 2 or not np.all(np.isfinite(V)):
        raise InputError(f"V must be a finite (k, d) array, got shape {V.shape}.")
    X = as_2d_float(X, "X", n_features=V.shape[1])
    n = X.shape[0]
    T = X @ V.T
    pos, neg = (T > 0).astype(float), (T < 0).astype(float)
    split = (neg.T @ pos) / n
    G = V / np.linalg.norm(V, axis=1, keepdims=True)
    C = np.clip(G @ G.T, -1.0, 1.0)
    theta = np.arccos(C)
    k = V.shape[0]
    off = ~np.eye(k, dtype=bool)
    lines = np.minimum(theta, np.pi - theta)[off]
    active = T > 0
    one = active.sum(axis=1) == 1
    counts = np.array([int(np.sum(one & active[:, i])) for i in range(k)])
    H = np.maximum(T, 0.0)
    smin = float(np.linalg.svd(H, compute_uv=False)[-1]) if n >= k else 0.0
    return {"split_frequency": split, "split_theory": theta / (2 * np.pi) * off,
            "min_angle": float(lines.min()) if lines.size else float(np.pi / 2),
            "condition": float(np.linalg.cond(V)), "one_sparse_counts": counts,
            "sigma_min_over_sqrt_n": smin / np.sqrt(n)}

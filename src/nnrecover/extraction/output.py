"""The output layer by least squares on fresh queries, given the hidden rows.

With the hidden layer ``relu(W x + b)`` known, ``f(x) = A relu(W x + b) + c`` is linear in ``(A, c)``
(paper -> code: ``A`` -> ``alpha``, ``c`` -> ``c``). Before the orientations are resolved the fit also
carries a linear part ``U x``, the input of the sign solve (:mod:`nnrecover.extraction.signs`;
Carlini et al. 2020, Section 4.4, specialised to one hidden layer).
"""

from __future__ import annotations

import numpy as np

from .._threads import blas_threads
from .queries import QueryOracle, query_batched

__all__ = ["fit_output_layer", "scaled_least_squares"]


def _ls_rows(W: np.ndarray, b: np.ndarray, rng: np.random.Generator, scale: float, n_gauss: int) -> np.ndarray:
    """Gaussian rows plus, for every unit, one row on each side of its hyperplane near the data.

    The side rows make every unit active on some rows and inactive on others, so its ReLU column is
    never a linear combination of the linear columns (which would hide a rarely active unit).
    """
    k, d = W.shape
    G = scale * rng.standard_normal((n_gauss, d))
    if k == 0:
        return G
    A = scale * rng.standard_normal((k, d))
    A -= ((A @ W.T).diagonal() + b)[:, None] * W
    off = scale * rng.uniform(0.1, 1.0, (k, 1))
    return np.concatenate([G, A + off * W, A - off * W])


def scaled_least_squares(D: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, float]:
    """Least-squares ``coef`` of ``D coef = Y`` with the columns of ``D`` scaled to unit norm first (features
    of very different sizes, a zero column allowed), and the relative residual ``||D coef - Y|| / ||Y||``."""
    norms = np.linalg.norm(D, axis=0)
    norms[norms == 0] = 1.0
    with blas_threads(1):
        coef, *_ = np.linalg.lstsq(D / norms, Y, rcond=None)
    coef = coef / norms[:, None]
    return coef, float(np.linalg.norm(D @ coef - Y) / max(np.linalg.norm(Y), 1e-300))


def fit_output_layer(oracle: QueryOracle, W: np.ndarray, b: np.ndarray, rng: np.random.Generator, *,
                     scale: float, linear: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Least-squares output weights ``f = alpha relu(W x + b) (+ U x) + c`` on fresh queries.

    Returns
    -------
    alpha : (p, k); U : (p, d) (zeros when ``linear`` is False); c : (p,); relative residual (float)
    """
    k, d = W.shape
    n_cols = k + (d if linear else 0) + 1
    X = _ls_rows(W, b, rng, scale, 2 * n_cols + 32)
    Y = query_batched(oracle, X)
    H = np.maximum(X @ W.T + b, 0.0)
    cols = [H] + ([X] if linear else []) + [np.ones((X.shape[0], 1))]
    coef, resid = scaled_least_squares(np.concatenate(cols, axis=1), Y)
    alpha = coef[:k].T
    U = coef[k:k + d].T if linear else np.zeros((Y.shape[1], d))
    c = coef[-1]
    return alpha, U, c, resid

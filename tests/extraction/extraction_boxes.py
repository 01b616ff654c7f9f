"""Black boxes and comparisons shared by the extraction tests."""

from __future__ import annotations

import numpy as np

import nnrecover as nr


def angles(est: nr.TwoLayerNetwork, truth: nr.TwoLayerNetwork) -> np.ndarray:
    """For every true row, the angle to the closest recovered row (sign counts), computed as
    2 arcsin(|w - w'| / 2) so that it is accurate near 0 (arccos of a cosine is not)."""
    E, T = est.canonical().hidden_weights, truth.canonical().hidden_weights
    dist = np.linalg.norm(E[:, None, :] - T[None, :, :], axis=2)
    return 2 * np.arcsin(np.minimum(dist.min(axis=0), 2.0) / 2)


def rel_error(est, truth, d, rng=123, n=4000):
    X = np.random.default_rng(rng).standard_normal((n, d))
    y, g = truth.predict(X), est.predict(X)
    return float(np.linalg.norm(g - y) / np.linalg.norm(y))


class CountingModel:
    """A black box that counts the rows it is asked for, independently of the library."""

    def __init__(self, net, dtype=np.float64):
        self.net, self.rows, self.dtype = net, 0, dtype
        self.arrays = [np.asarray(a, dtype) for a in (net.hidden_weights, net.hidden_bias,
                                                       net.output_weights, net.output_bias)]

    def __call__(self, X):
        self.rows += X.shape[0]
        W, b, A, c = self.arrays
        X = np.asarray(X, self.dtype)
        Y = np.maximum(X @ W.T + b, 0) @ A.T + c
        return Y[:, 0] if Y.shape[1] == 1 else Y

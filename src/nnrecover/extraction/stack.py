"""The hidden layers recovered so far, evaluated without queries.

Layer by layer extraction (:mod:`nnrecover.extraction.deep`) knows the first ``l`` hidden layers of
``f(x) = A relu(W_L ... relu(W_1 x + b_1) ... + b_L) + c`` and looks for layer ``l + 1``. Every
neuron of layer ``l + 1`` has the pre-activation

    z(x) = u_h . relu(zeta_l(x)) + u_s . h_{l-1}(x) + beta

where ``zeta_l`` are the pre-activations of layer ``l`` in the orientation found so far (each row is
known up to its sign until the layer after it is known) and ``h_{l-1}`` the output of layer ``l - 1``
(``x`` itself for ``l = 1``). With the true orientation ``u_s = 0``; a flipped neuron ``j`` turns
``relu(zeta_j)`` into ``relu(-zeta_j) = relu(zeta_j) - zeta_j``, which the skip term ``u_s`` absorbs
exactly. So ``z`` is *linear* in the features ``phi(x) = [relu(zeta_l(x)), h_{l-1}(x)]``, whatever the
orientation, and the orientation is read off the skip coefficients afterwards (the linear-part
equations of Carlini, Jagielski and Mironov, CRYPTO 2020, Section 4.4, one layer deeper).

Inside one linear region of the known layers every pre-activation and every feature is an affine
function of ``x``; :meth:`KnownLayers.local` returns those affine maps at a point.
"""

from __future__ import annotations

import numpy as np

__all__ = ["KnownLayers"]


class KnownLayers:
    """The hidden layers found so far: ``weights[l]`` (n_{l+1}, n_l) acting on ``h_l`` (``h_0 = x``).

    Parameters
    ----------
    n_inputs : int
        ``d``.
    """

    def __init__(self, n_inputs: int):
        self.d = int(n_inputs)
        self.weights: list[np.ndarray] = []
        self.biases: list[np.ndarray] = []

    @property
    def depth(self) -> int:
        """Number of known hidden layers."""
        return len(self.weights)

    @property
    def widths(self) -> list[int]:
        return [int(W.shape[0]) for W in self.weights]

    @property
    def n_features(self) -> int:
        """Length of ``phi``: ``n_l + n_{l-1}`` (``d`` with no known layer)."""
        if not self.weights:
            return self.d
        prev = self.d if self.depth == 1 else self.widths[-2]
        return self.widths[-1] + prev

    def append(self, W: np.ndarray, b: np.ndarray) -> None:
        self.weights.append(np.array(W, float))
        self.biases.append(np.array(b, float))

    def preactivations(self, X: np.ndarray) -> list[np.ndarray]:
        """Pre-activations of every known layer at the rows of ``X``."""
        out = []
        H = X
        for W, b in zip(self.weights, self.biases):
            Z = H @ W.T + b
            out.append(Z)
            H = np.maximum(Z, 0.0)
        return out

    def features(self, X: np.ndarray) -> np.ndarray:
        """``phi(X) = [relu(zeta_l), h_{l-1}]`` (``X`` itself with no known layer), shape (n, n_features)."""
        X = np.atleast_2d(X)
        if not self.weights:
            return X
        Z = self.preactivations(X)
        prev = X if len(Z) == 1 else np.maximum(Z[-2], 0.0)
        return np.concatenate([np.maximum(Z[-1], 0.0), prev], axis=1)

    def local(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int], np.ndarray, np.ndarray]:
        """Affine maps valid in the linear region of ``x``.

        Returns
        -------
        G : (K, d)
            Gradients of the ``K`` known pre-activations (all layers, in order).
        e : (K,)
            Their offsets: ``zeta(x') = G x' + e`` in the region of ``x``.
        zeta : (K,)
            Their values at ``x``.
        layer_of : list of int
            Layer (0-based) of each of the ``K`` neurons.
        P, q : (n_features, d), (n_features,)
            ``phi(x') = P x' + q`` in the region.
        """
        d = self.d
        A = np.eye(d)
        a = np.zeros(d)
        Gs, es, zs, layer_of = [], [], [], []
        acts = [(A, a)]
        for i, (W, b) in enumerate(zip(self.weights, self.biases)):
            G = W @ A
            e = W @ a + b
            z = G @ x + e
            on = z > 0
            A = G * on[:, None]
            a = e * on
            acts.append((A, a))
            Gs.append(G), es.append(e), zs.append(z)
            layer_of += [i] * W.shape[0]
        if not self.weights:
            return (np.empty((0, d)), np.empty(0), np.empty(0), [], np.eye(d), np.zeros(d))
        (A_last, a_last), (A_prev, a_prev) = acts[-1], acts[-2]
        P = np.concatenate([A_last, A_prev])
        q = np.concatenate([a_last, a_prev])
        return np.concatenate(Gs), np.concatenate(es), np.concatenate(zs), layer_of, P, q

    def target_gradients(self, X: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Gradients ``d(phi(x) . u) / dx`` at the rows of ``X`` (back-propagated, shape (n, d))."""
        X = np.atleast_2d(X)
        if not self.weights:
            return np.broadcast_to(u, X.shape).copy()
        Z = self.preactivations(X)
        width = self.widths[-1]
        g = (Z[-1] > 0) * u[:width]                     # d/d zeta_l
        g = g @ self.weights[-1] + u[width:]            # d/d h_{l-1}: through W_l, plus the skip part
        for i in range(self.depth - 2, -1, -1):
            g = (g * (Z[i] > 0)) @ self.weights[i]      # through relu and W_i down to h_{i-1}
        return g

    def target_values(self, X: np.ndarray, U: np.ndarray, beta: np.ndarray) -> np.ndarray:
        """Pre-activations ``phi(X) U^T + beta`` of candidate neurons of the next layer, shape (n, m)."""
        return self.features(X) @ U.T + beta

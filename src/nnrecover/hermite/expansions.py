"""Hermite expansions of activations and networks: ``c_k(b)`` and ``f_hat_k = sum_i a_i c_k(b_i) w_i^{(x)k}``.

Awasthi et al. 2021, Lemma 3.5 (exact population tensors of a two-layer network).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import as_real_array
from ..activations import Activation, get_activation
from ..errors import InputError
from ..network import TwoLayerNetwork
from .polynomials import _check_order
from .tensors import _check_dense, khatri_rao_power

__all__ = ["activation_hermite_coefficients", "HermiteExpansion", "network_hermite_expansion"]


def activation_hermite_coefficients(activation: "str | Activation", k_max: int, bias: Any = 0.0,
                                    scale: Any = 1.0) -> np.ndarray:
    """``c_k(b; s) = E_{z ~ N(0,1)}[act(s z + b) He_k(z)]`` for k = 0..k_max.

    For a hidden unit ``act(w.x + b)`` with ``|w| = s`` and ``x ~ N(0, I)``,
    ``E[act(w.x + b) He_k(x)] = c_k(b; s) (w/s)^{(x)k}`` (ATV21 Lemma 3.5, generalised to any
    activation and row norm).

    Parameters
    ----------
    activation : str or Activation
    k_max : int
    bias, scale : array_like
        Biases ``b`` and row norms ``s >= 0`` (broadcast together).

    Returns
    -------
    ndarray of shape ``broadcast(bias, scale).shape + (k_max + 1,)``

    Notes
    -----
    * ``s = 0``: the unit is the constant ``act(b)``.
    * Positively homogeneous activations of degree q: ``c_k(b; s) = s^q c_k(b/s; 1)`` (the scale moves
      into the output weight as in ``TwoLayerNetwork.canonical``); relu uses the closed form of
      Lemma 3.5.
    * ``exp``: ``c_k(b; s) = s^k exp(b + s^2/2)``.
    * Otherwise the activation ``t -> act(s t)`` (kinks divided by s) is integrated numerically at bias
      ``b/s`` by :meth:`Activation.hermite_coefficients` (Gauss-Hermite or split adaptive quadrature,
      about 1e-13 relative; very large ``s`` makes smooth activations steep and the 256-node rule
      less accurate).
    """
    act = get_activation(activation)
    k_max = _check_order(k_max, "k_max")
    b = as_real_array(bias, "bias")
    s = as_real_array(scale, "scale")
    if np.any(s < 0):
        raise InputError("scale (the row norm |w|) must be >= 0.")
    b, s = np.broadcast_arrays(b, s)
    out = np.zeros(b.shape + (k_max + 1,))
    zero = s == 0
    if np.any(zero):
        out[zero, 0] = act(b[zero])
    pos = ~zero
    if not np.any(pos):
        return out
    bp, sp = b[pos], s[pos]
    if act.degree is not None:
        out[pos] = (sp ** act.degree)[:, None] * act.hermite_coefficients(k_max, bp / sp)
    elif act.name == "exp":
        out[pos] = np.exp(bp + 0.5 * sp ** 2)[:, None] * sp[:, None] ** np.arange(k_max + 1)
    else:
        res = np.empty((bp.size, k_max + 1))
        for sv in np.unique(sp):
            sel = sp == sv
            if sv == 1.0:
                res[sel] = act.hermite_coefficients(k_max, bp[sel])
            else:
                res[sel] = _scaled_activation(act, float(sv)).hermite_coefficients(
                    k_max, bp[sel] / sv, method="quadrature")
        out[pos] = res
    return out


def _scaled_activation(act: Activation, s: float) -> Activation:
    """The activation ``t -> act(s t)`` (s > 0), for quadrature only."""
    f, df = act.func, act.deriv
    return Activation(
        name=act.name, func=lambda t: f(s * np.asarray(t, dtype=np.float64)),
        deriv=lambda t: s * df(s * np.asarray(t, dtype=np.float64)), param=act.param, degree=None,
        inverse_positive=None, rectified=act.rectified, kinks=tuple(k0 / s for k0 in act.kinks),
        closed_form=None)


@dataclass(frozen=True, eq=False)
class HermiteExpansion:
    """Exact Hermite coefficient tensors of a two-layer network in symmetric CP form (ATV21 Lemma 3.5).

    ``f_hat_k[p] = sum_i coefficients[p, i, k] u_i^{(x)k}  (+ offset[p] when k = 0)``, where
    ``f_hat_k = E[f(x) He_k(x)]`` for ``x ~ N(0, I_d)``.

    Attributes
    ----------
    directions : ndarray of shape (m, d)
        Unit directions ``u_i = w_i/|w_i|`` (zero rows for zero hidden weights).
    coefficients : ndarray of shape (p, m, K + 1)
        ``A[p, i] c_k(b_i; |w_i|)`` for k = 0..K (``K = max_order``).
    offset : ndarray of shape (p,)
        Output bias, part of ``f_hat_0`` only.

    Notes
    -----
    All methods take batched contraction arguments and return a leading output axis of length p;
    the :class:`nnrecover.hermite.statistics.HermiteMoments` classes handle single arguments and squeezing.
    """

    directions: np.ndarray
    coefficients: np.ndarray
    offset: np.ndarray

    @property
    def max_order(self) -> int:
        return self.coefficients.shape[2] - 1

    @property
    def n_inputs(self) -> int:
        return self.directions.shape[1]

    @property
    def n_outputs(self) -> int:
        return self.coefficients.shape[0]

    def weights(self, order: int) -> np.ndarray:
        """``beta[p, i] = A[p, i] c_order(b_i; |w_i|)``, shape (p, m)."""
        k = _check_order(order, maximum=self.max_order)
        return self.coefficients[:, :, k]

    def _offset(self, k: int) -> np.ndarray:
        return self.offset if k == 0 else np.zeros_like(self.offset)

    def tensor(self, order: int, basis: np.ndarray | None = None) -> np.ndarray:
        """Dense ``f_hat_k``, or ``f_hat_k[P, ..., P]`` for ``basis`` P (d, m); shape ``(p,) + (m,)*k``."""
        k = _check_order(order, maximum=self.max_order)
        V = self.directions if basis is None else self.directions @ basis
        m = V.shape[1]
        _check_dense(self.n_outputs * m ** k, f"f_hat_{k} in {m} dimensions")
        out = self.weights(k) @ khatri_rao_power(V, k)
        if k == 0:
            out[:, 0] += self.offset
        return out.reshape((self.n_outputs,) + (m,) * k)

    def rank_one(self, U: np.ndarray, orders: np.ndarray) -> np.ndarray:
        """``f_hat_k(u, ..., u)`` for rows u of ``U`` (r, d) and every k in ``orders``: (p, n_orders, r)."""
        proj = self.directions @ U.T  # (m, r)
        out = np.empty((self.n_outputs, len(orders), U.shape[0]))
        for j, k in enumerate(orders):
            out[:, j] = self.weights(int(k)) @ proj ** int(k) + self._offset(int(k))[:, None]
        return out

    def contract(self, U: np.ndarray) -> np.ndarray:
        """``f_hat_k(u_1, ..., u_k)`` for ``U`` of shape (s, k, d): (p, s)."""
        k = U.shape[1]
        prod = np.prod(np.einsum("md,skd->msk", self.directions, U), axis=2)  # (m, s)
        return self.weights(k) @ prod + self._offset(k)[:, None]

    def vector_slice(self, order: int, g: np.ndarray) -> np.ndarray:
        """``f_hat_k(., ..., ., g)`` for ``g`` of shape (s, d): ``(p, s) + (d,)*(k-1)``."""
        k = _check_order(order, minimum=1, maximum=self.max_order)
        f, d = k - 1, self.n_inputs
        _check_dense(self.n_outputs * g.shape[0] * d ** f, f"f_hat_{k}(., g) slices")
        coef = self.weights(k)[:, :, None] * (self.directions @ g.T)[None]  # (p, m, s)
        out = np.einsum("pms,mD->psD", coef, khatri_rao_power(self.directions, f))
        return out.reshape((self.n_outputs, g.shape[0]) + (d,) * f)

    def partial_contract(self, order: int, V: np.ndarray) -> np.ndarray:
        """``f_hat_k(., ..., ., v_1, ..., v_c)`` for ``V`` of shape (s, c, d): ``(p, s) + (d,)*(k-c)``."""
        k = _check_order(order, maximum=self.max_order)
        c, d = V.shape[1], self.n_inputs
        f = k - c
        if f < 0:
            raise InputError(f"cannot contract {c} vectors into an order-{k} tensor.")
        _check_dense(self.n_outputs * V.shape[0] * d ** f, f"f_hat_{k} partial contractions")
        proj = np.prod(np.einsum("md,scd->msc", self.directions, V), axis=2)  # (m, s)
        out = np.einsum("pms,mD->psD", self.weights(k)[:, :, None] * proj[None],
                        khatri_rao_power(self.directions, f))
        if k == 0:
            out += self.offset[:, None, None]
        return out.reshape((self.n_outputs, V.shape[0]) + (d,) * f)

    def matrix_slice(self, order: int, G: np.ndarray) -> np.ndarray:
        """``f_hat_k(., ..., ., G)`` for ``G`` of shape (s, d, d): ``(p, s) + (d,)*(k-2)``."""
        k = _check_order(order, minimum=2, maximum=self.max_order)
        f, d = k - 2, self.n_inputs
        _check_dense(self.n_outputs * G.shape[0] * d ** f, f"f_hat_{k}(., G) slices")
        quad = np.einsum("md,sde,me->ms", self.directions, G, self.directions)
        coef = self.weights(k)[:, :, None] * quad[None]
        out = np.einsum("pms,mD->psD", coef, khatri_rao_power(self.directions, f))
        return out.reshape((self.n_outputs, G.shape[0]) + (d,) * f)


def network_hermite_expansion(network: Any, max_order: int) -> HermiteExpansion:
    """Exact :class:`HermiteExpansion` of a :class:`~nnrecover.network.TwoLayerNetwork` up to ``max_order``.

    Valid for inputs ``x ~ N(0, I_d)`` (the setting of ATV21). Rows of any norm and any activation
    are handled by :func:`activation_hermite_coefficients`.
    """
    if not isinstance(network, TwoLayerNetwork):
        raise InputError(f"network must be a TwoLayerNetwork, got {type(network).__name__}.")
    K = _check_order(max_order, "max_order")
    W = network.hidden_weights
    s = np.linalg.norm(W, axis=1)
    U = np.zeros_like(W)
    nz = s > 0
    U[nz] = W[nz] / s[nz, None]
    c = activation_hermite_coefficients(network.activation, K, network.hidden_bias, s)  # (m, K+1)
    coeffs = network.output_weights[:, :, None] * c[None]
    return HermiteExpansion(U, coeffs, network.output_bias.copy())

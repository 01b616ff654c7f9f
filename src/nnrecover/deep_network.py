"""The deep network model ``f(x) = W_L act(... act(W_1 act(W_0 x + b_0) + b_1) ...) + b_L``.

A :class:`DeepNetwork` has any number ``L >= 1`` of hidden layers, the same activation on each of them
and a linear output layer; with ``L = 1`` it is a :class:`~nnrecover.TwoLayerNetwork` (hidden weights
``weights[0]``, output weights ``weights[1]``; :meth:`DeepNetwork.from_two_layer`,
:meth:`DeepNetwork.to_two_layer`).

Symbol map: ``weights[l]`` of shape ``(n_{l+1}, n_l)`` maps layer ``l`` to layer ``l + 1`` (layer 0 is the
input, ``n_0 = d``; layer ``L + 1`` the output, ``n_{L+1} = p``), ``biases[l]`` of shape ``(n_{l+1},)``;
hidden layer ``l`` (``1 <= l <= L``) has ``n_l`` units with incoming rows ``weights[l - 1]`` and outgoing
columns ``weights[l]``. scikit-learn's ``coefs_[l]`` is ``weights[l].T`` and ``intercepts_[l]`` is
``biases[l]``.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from ._validation import as_2d_float, as_float_array, check_finite
from .activations import Activation, get_activation
from .errors import InputError
from .network import TwoLayerNetwork, read_network_file, write_network_file

__all__ = ["DeepNetwork"]

_FORMAT = "nnrecover.DeepNetwork/1"

#: scikit-learn's MLP activations and their nnrecover names
_SKLEARN_ACTIVATIONS = {"relu": "relu", "identity": "identity", "tanh": "tanh", "logistic": "sigmoid"}
#: scikit-learn's output activations whose argument (the last layer's pre-activation) a DeepNetwork computes
_SKLEARN_OUTPUTS = ("identity", "softmax", "logistic")


def _layer_list(value: Any, name: str) -> list:
    """``value`` as a list of per-layer arrays; an array is split along its first axis."""
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise InputError(f"{name} must be a list with one array per layer, got {type(value).__name__}.")
    return list(value)


class DeepNetwork:
    """A network with any number of hidden layers (one activation) and a linear output layer.

    ``f(x) = W_L h_L + b_L`` with ``h_{l+1} = act(W_l h_l + b_l)``, ``h_0 = x``, ``L >= 1`` hidden layers.

    Parameters
    ----------
    weights : sequence of arrays
        ``weights[l]`` of shape ``(n_{l+1}, n_l)``, ``l = 0, ..., L``: at least two matrices (one hidden
        layer), each with as many columns as the previous one has rows.
    biases : sequence of arrays
        ``biases[l]`` of shape ``(n_{l+1},)``, one per weight matrix.
    activation : str or Activation
        Name from :func:`nnrecover.activations.available_activations` (``"relu"`` by default), applied to
        every hidden layer; the output layer is linear.

    Attributes
    ----------
    weights, biases : tuple of ndarray
        float64 copies of the arguments.
    activation : Activation

    Raises
    ------
    InputError
        Fewer than two weight matrices, shapes that do not chain, a weight that is not 2-D, a bias of
        the wrong length, non-numeric, complex, NaN or infinite parameters, unknown activation.

    See Also
    --------
    TwoLayerNetwork : the one-hidden-layer network every learner returns.

    Examples
    --------
    >>> import numpy as np, nnrecover as nr
    >>> net = nr.DeepNetwork([[[3.0, 4.0]], [[2.0]], [[1.0]]], [[5.0], [-1.0], [0.5]])
    >>> net.layer_sizes
    (2, 1, 1, 1)
    >>> net.predict(np.array([[1.0, 1.0]]))   # 1 * relu(2 * relu(3 + 4 + 5) - 1) + 0.5
    array([23.5])
    >>> net.canonical().weights[0]
    array([[0.6, 0.8]])
    """

    def __init__(self, weights, biases, activation: str | Activation = "relu"):
        weights, biases = _layer_list(weights, "weights"), _layer_list(biases, "biases")
        if len(weights) < 2:
            raise InputError(f"weights must hold at least two matrices (a hidden layer and the output layer), "
                             f"got {len(weights)}; a network without hidden layer is linear.")
        if len(biases) != len(weights):
            raise InputError(f"biases must hold one vector per weight matrix ({len(weights)}), got {len(biases)}.")
        Ws, bs = [], []
        for l, (w, b) in enumerate(zip(weights, biases)):
            W = as_float_array(w, f"weights[{l}]")
            if W.ndim != 2 or W.shape[0] < 1 or W.shape[1] < 1:
                raise InputError(f"weights[{l}] must be a 2-D array of shape (n_{l + 1}, n_{l}) (units of the next "
                                 f"layer, units of this one), got shape {W.shape}.")
            if Ws and W.shape[1] != Ws[-1].shape[0]:
                raise InputError(f"weights[{l}] has {W.shape[1]} columns but weights[{l - 1}] has "
                                 f"{Ws[-1].shape[0]} rows: weights[l] must have shape (n_(l+1), n_l), each matrix "
                                 "with as many columns as the previous one has rows.")
            check_finite(W, f"weights[{l}]")
            n = W.shape[0]
            bias = as_float_array(b, f"biases[{l}]").reshape(-1)
            if bias.shape != (n,):
                raise InputError(f"biases[{l}] must have shape ({n},) (one per row of weights[{l}]), got "
                                 f"{np.shape(b)}.")
            check_finite(bias, f"biases[{l}]")
            Ws.append(W)
            bs.append(bias)
        self.weights: tuple[np.ndarray, ...] = tuple(Ws)
        self.biases: tuple[np.ndarray, ...] = tuple(bs)
        self.activation = get_activation(activation)

    # ------------------------------------------------------------------ shape
    @property
    def layer_sizes(self) -> tuple[int, ...]:
        """``(d, n_1, ..., n_L, p)``: inputs, the units of each hidden layer, outputs."""
        return (self.weights[0].shape[1],) + tuple(W.shape[0] for W in self.weights)

    @property
    def n_inputs(self) -> int:
        """``d``, the input dimension."""
        return self.weights[0].shape[1]

    @property
    def n_outputs(self) -> int:
        """``p``, the number of outputs."""
        return self.weights[-1].shape[0]

    @property
    def hidden_sizes(self) -> tuple[int, ...]:
        """``(n_1, ..., n_L)``, the units of each hidden layer."""
        return tuple(W.shape[0] for W in self.weights[:-1])

    @property
    def depth(self) -> int:
        """``L``, the number of hidden layers."""
        return len(self.weights) - 1

    @property
    def n_parameters(self) -> int:
        """Number of real parameters, ``sum_l n_{l+1} (n_l + 1)``."""
        return sum(W.size + b.size for W, b in zip(self.weights, self.biases))

    # ------------------------------------------------------------------ evaluation
    def preactivations(self, X) -> list[np.ndarray]:
        """The pre-activations ``z_l = W_{l-1} h_{l-1} + b_{l-1}`` of the hidden layers ``l = 1, ..., L``.

        Parameters
        ----------
        X : array of shape (n, n_inputs)

        Returns
        -------
        list of L arrays, of shapes (n, n_1), ..., (n, n_L)
            ``act`` of the last one, times ``weights[L].T`` plus ``biases[L]``, is :meth:`predict`.
        """
        h = as_2d_float(X, "X", n_features=self.n_inputs)
        out = []
        for W, b in zip(self.weights[:-1], self.biases[:-1]):
            z = h @ W.T + b
            out.append(z)
            h = self.activation(z)
        return out

    def predict(self, X) -> np.ndarray:
        """Network output: shape (n,) when there is one output, else (n, p)."""
        out = self._forward(as_2d_float(X, "X", n_features=self.n_inputs))
        return out[:, 0] if self.n_outputs == 1 else out

    def _forward(self, X: np.ndarray) -> np.ndarray:
        """Outputs ``(n, p)`` of rows already checked (finite float64, ``n_inputs`` columns)."""
        h = X
        for W, b in zip(self.weights[:-1], self.biases[:-1]):
            h = self.activation(h @ W.T + b)
        return h @ self.weights[-1].T + self.biases[-1]

    __call__ = predict

    # ------------------------------------------------------------------ forms
    def copy(self) -> DeepNetwork:
        """A deep copy (the arrays are copied)."""
        return DeepNetwork(self.weights, self.biases, self.activation)

    def canonical(self) -> DeepNetwork:
        """Canonical form: every hidden unit's incoming row scaled to unit norm, the scale moved on.

        Layer by layer from the input, each hidden layer with its incoming weights, biases and outgoing
        weights is put in the canonical form of :meth:`TwoLayerNetwork.canonical`: for an activation
        homogeneous of degree ``q`` (relu, leaky_relu: 1), row ``i`` of ``weights[l - 1]`` and
        ``biases[l - 1][i]`` are divided by ``s_i = ||row i||`` and column ``i`` of ``weights[l]`` is
        multiplied by ``s_i**q``, which leaves the function unchanged (``act(s t) = s**q act(t)``,
        ``s > 0``). The outgoing columns are rescaled before the next layer's rows are normalised, so
        every hidden row of the result has unit norm. Zero rows stay zero, units are not reordered
        (like :meth:`TwoLayerNetwork.canonical`: :func:`nnrecover.metrics.parameter_error` matches them),
        and a non-homogeneous activation gives a copy.

        Raises
        ------
        InputError
            A unit whose rescaled bias or outgoing weight overflows float64 (the message names its
            hidden layer).
        """
        if self.activation.degree is None:
            return self.copy()
        Ws, bs = list(self.weights), list(self.biases)
        for l in range(self.depth):
            # the block (incoming rows, biases, outgoing columns) of hidden layer l + 1 is a two-layer
            # network: one home for the scaling rule and its overflow check
            block = TwoLayerNetwork(Ws[l], bs[l], Ws[l + 1], np.zeros(Ws[l + 1].shape[0]), self.activation)
            try:
                block = block.canonical()
            except InputError as exc:
                raise InputError(f"hidden layer {l + 1}: {exc}") from None
            Ws[l], bs[l], Ws[l + 1] = block.hidden_weights, block.hidden_bias, block.output_weights
        return DeepNetwork(Ws, bs, self.activation)

    @classmethod
    def from_two_layer(cls, network: TwoLayerNetwork) -> DeepNetwork:
        """The one-hidden-layer DeepNetwork of a :class:`~nnrecover.TwoLayerNetwork` (same parameters)."""
        if not isinstance(network, TwoLayerNetwork):
            raise InputError(f"network must be a TwoLayerNetwork, got {type(network).__name__}.")
        return cls([network.hidden_weights, network.output_weights], [network.hidden_bias, network.output_bias],
                   network.activation)

    def to_two_layer(self) -> TwoLayerNetwork:
        """The :class:`~nnrecover.TwoLayerNetwork` with the same parameters (only for ``depth == 1``)."""
        if self.depth != 1:
            raise InputError(f"to_two_layer needs a network with one hidden layer (depth 1); this one has depth "
                             f"{self.depth} (layer_sizes {self.layer_sizes}).")
        return TwoLayerNetwork(self.weights[0], self.biases[0], self.weights[1], self.biases[1], self.activation)

    # ------------------------------------------------------------------ io
    def to_dict(self) -> dict:
        """A JSON-serialisable description (nested lists of floats); inverse of :meth:`from_dict`."""
        return {
            "format": _FORMAT,
            "activation": self.activation.spec,
            "weights": [W.tolist() for W in self.weights],
            "biases": [b.tolist() for b in self.biases],
        }

    @classmethod
    def from_dict(cls, data: dict) -> DeepNetwork:
        """Build a network from :meth:`to_dict` output, the arrays of an ``.npz`` file
        (``weights_0, ..., biases_0, ...``), or a :meth:`TwoLayerNetwork.to_dict` description (one
        hidden layer)."""
        if not isinstance(data, dict):
            raise InputError(f"a network description must be a dict, got {type(data).__name__}.")
        if "hidden_weights" in data:  # a TwoLayerNetwork description: that class checks its own format
            return cls.from_two_layer(TwoLayerNetwork.from_dict(data))
        fmt = data.get("format", _FORMAT)
        if str(fmt) != _FORMAT:
            raise InputError(f"unknown network format {str(fmt)!r}; this version reads {_FORMAT!r} (and "
                             "TwoLayerNetwork files).")
        if "activation" not in data:
            raise InputError("network description lacks ['activation']; is it an nnrecover network file?")
        if not isinstance(data["activation"], str):
            raise InputError(f"the activation of a network description must be a string, got "
                             f"{data['activation']!r}.")
        return cls(_layers(data, "weights"), _layers(data, "biases"), data["activation"])

    def save(self, path: str | os.PathLike) -> None:
        """Write the network to ``path``; the suffix picks the format. No pickle.

        Parameters
        ----------
        path : str or path-like
            ``*.json``: text; floats are written by ``repr`` and read back bit-exactly.
            ``*.npz``: binary numpy archive with members ``weights_0, ..., weights_L``,
            ``biases_0, ..., biases_L``, ``activation`` and ``format``, written to exactly this name.

        Notes
        -----
        The file is written to a temporary name in the same folder and renamed into place when
        complete (:func:`nnrecover.files.atomic_output`): an interrupted save leaves the old file.
        """
        def arrays():
            out = {f"weights_{l}": W for l, W in enumerate(self.weights)}
            out.update({f"biases_{l}": b for l, b in enumerate(self.biases)})
            out.update(activation=np.array(self.activation.spec), format=np.array(_FORMAT))
            return out

        write_network_file(path, self.to_dict, arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> DeepNetwork:
        """Read a network written by :meth:`save` or by :meth:`TwoLayerNetwork.save` (``.json`` or ``.npz``;
        pickles are refused); a two-layer file gives the one-hidden-layer DeepNetwork.

        Raises
        ------
        InputError
            Missing or unreadable file, wrong suffix, or content that is not a network description
            (ragged or non-numeric arrays, a truncated archive, an array header that promises more
            data than the archive holds).
        """
        return read_network_file(path, cls.from_dict, "DeepNetwork.save")

    @classmethod
    def from_sklearn(cls, model: Any) -> DeepNetwork:
        """Convert a fitted ``sklearn.neural_network.MLPRegressor`` or ``MLPClassifier`` of any depth.

        Supported activations: relu, identity, tanh, logistic (= sigmoid). ``coefs_[l]`` is transposed
        into ``weights[l]`` and ``intercepts_[l]`` is ``biases[l]``. A regressor's :meth:`predict` equals
        ``model.predict`` up to rounding; a classifier's is its **logits**, the last layer's
        pre-activation (one column for a binary classifier: ``predict_proba(X)[:, 1]`` is its logistic
        function; for several classes ``predict_proba`` is the softmax of the rows).

        Parameters
        ----------
        model : sklearn.neural_network.MLPRegressor or MLPClassifier
            Fitted, with at least one hidden layer.

        Returns
        -------
        DeepNetwork
        """
        if not hasattr(model, "activation"):
            raise InputError(f"from_sklearn needs a fitted sklearn MLPRegressor or MLPClassifier, got "
                             f"{type(model).__name__}.")
        coefs = getattr(model, "coefs_", None)
        if coefs is None:
            raise InputError(f"from_sklearn needs a fitted {type(model).__name__} (it has no coefs_); "
                             "call fit first.")
        act = model.activation
        if act not in _SKLEARN_ACTIVATIONS:
            raise InputError(f"MLP activation {act!r} is not supported ({', '.join(_SKLEARN_ACTIVATIONS)}).")
        out = getattr(model, "out_activation_", "identity")
        if out not in _SKLEARN_OUTPUTS:
            raise InputError(f"MLP output activation {out!r} is not supported ({', '.join(_SKLEARN_OUTPUTS)}).")
        if len(coefs) < 2:
            raise InputError(f"from_sklearn needs an MLP with at least one hidden layer; this "
                             f"{type(model).__name__} has none.")
        return cls([np.asarray(c).T for c in coefs], [np.asarray(b) for b in model.intercepts_],
                   _SKLEARN_ACTIVATIONS[act])

    # ------------------------------------------------------------------ misc
    def __repr__(self) -> str:
        return f"DeepNetwork(layer_sizes={self.layer_sizes}, activation={self.activation.spec!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DeepNetwork):
            return NotImplemented
        return (self.activation == other.activation and len(self.weights) == len(other.weights)
                and all(np.array_equal(x, y) for x, y in zip(self.weights + self.biases,
                                                              other.weights + other.biases)))

    __hash__ = None  # type: ignore[assignment]


def _layers(data: dict, key: str) -> list:
    """The per-layer arrays ``data[key]`` (JSON: a list) or ``data[key_0], data[key_1], ...`` (``.npz``)."""
    if key in data:
        return _layer_list(data[key], key)
    numbered = {int(m.group(1)) for name in data if (m := re.fullmatch(rf"{key}_(\d+)", str(name)))}
    if not numbered:
        raise InputError(f"network description lacks [{key!r}]; is it an nnrecover network file?")
    if numbered != set(range(len(numbered))):
        missing = sorted(set(range(max(numbered) + 1)) - numbered)
        raise InputError(f"network description lacks {[f'{key}_{i}' for i in missing]} (it has "
                         f"{[f'{key}_{i}' for i in sorted(numbered)]}); the layers must be numbered from 0.")
    return [data[f"{key}_{i}"] for i in range(len(numbered))]

"""Black boxes from files, without pickle where the format allows.

:func:`load_model` turns a model specification into a vectorised callable ``(n, d) -> (n,) | (n, p)``
for :func:`nnrecover.extraction.extract`:

``*.skops``
    A fitted scikit-learn ``MLPRegressor`` or ``MLPClassifier`` with ReLU hidden layers (any number of
    them), saved with ``skops.io.dump`` (skops' secure format: no pickle, only types from scikit-learn,
    NumPy and SciPy are accepted). A regressor is queried through ``predict``; a classifier through the
    logits its probabilities determine, read from ``predict_proba``: binary (and each label of a
    multi-label one), the log-odds ``log p1 - log p0``; multi-class, the log-ratios
    ``log p_i - log p_0`` to the first class (``classes_[0]``), ``C - 1`` outputs. Both are again
    ReLU networks of the input (output weights ``a_1`` or ``a_i - a_0``). They are exact only while
    the probabilities do not saturate: ``1 - p`` of a binary classifier keeps the absolute round-off
    of ``p``, so the log-odds carry an error of about ``1e-16 e^z`` at log-odds ``z > 0`` (``p`` itself
    is exact to its last bits down to ``e^-700``), and a softmax probability underflows near
    ``e^-700``. The loaded model therefore declares ``output_range`` (``[-700, 4]`` for log-odds, where
    the error stays below 6e-15; ``[-600, 600]`` for softmax log-ratios), and
    :func:`~nnrecover.extraction.extract` queries a region that keeps the outputs within it. Another
    hidden activation (``tanh``, ``logistic``, ``identity``) is refused.
``*.safetensors``
    A PyTorch ``state_dict`` of ``nn.Sequential(nn.Linear(d, k_1), nn.ReLU(), nn.Linear(k_1, k_2),
    nn.ReLU(), ..., nn.Linear(k_L, p))`` (keys ``<i>.weight`` / ``<i>.bias``, ordered by ``i``; any
    number of hidden layers), evaluated with NumPy in the file's dtype (a float32 file is a float32
    black box) with a ReLU between consecutive layers. The shapes must chain (``weight`` of layer
    ``i + 1`` is ``(k_{i+1}, k_i)``, ``bias`` ``(k_i,)``); a file whose shapes do not, or with fewer than
    two layers, is refused naming them. A state_dict does not record the activations: a file saved from
    another one loads as the ReLU network of its weights.
``*.onnx``
    Any ONNX model with one input ``(n, d)`` and one output, run with ``onnxruntime`` on the CPU in the
    input's declared dtype; a model exported with a fixed batch size is queried in batches of that
    size. When the ``onnx`` package can read the graph, its weight layers (``MatMul``/``Gemm`` on a
    stored weight, any number of them, ``Add`` for a bias) give the widths, and a hidden activation
    other than ``Relu`` (``Sigmoid``, ``Tanh``, ``LeakyRelu``, ``Elu``, ``Softplus``, ``Clip``, ...: a node
    of such an operator that the last weight layer depends on) is refused before any query, naming the
    node.
    Without ``onnx`` the graph is run as a black box of unknown widths.
``module:function``
    Any importable Python callable (``module`` may be a dotted name; attributes may be nested, e.g.
    ``pkg.mod:obj.predict``).

Every loaded model declares ``hidden_sizes``, the widths of its hidden layers as the file records
them (``(8, 6)`` for ``d -> 8 -> 6 -> p``; None when the format does not say, as for a callable or an
ONNX graph read without the ``onnx`` package), and ``n_hidden``, the width of a one-hidden-layer
file (None for a deeper one): :func:`~nnrecover.extraction.extract` counts the units of one hidden
layer that the queries cannot see against it.

The optional dependencies are the ``extract`` extra: ``pip install nnrecover[extract]``.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import InputError

__all__ = ["load_model", "LoadedModel"]

#: type-name prefixes a skops file may contain
_SKOPS_ALLOWED = ("sklearn.", "numpy.", "scipy.", "builtins.")


#: log-odds at which a binary classifier's logit is still exact: above, 1 - p loses bits (1e-16 e^z is
#: 6e-15 at 4); below, p = expit(z) is exact until it underflows near e^-745
_LOGODDS_RANGE = (-700.0, 4.0)
#: log-ratios of softmax probabilities kept away from underflow (e^-708)
_SOFTMAX_RANGE = (-600.0, 600.0)


class LoadedModel:
    """A loaded black box: ``model(X)`` evaluates it; ``n_inputs`` is ``d`` when the file says so.

    ``output_range`` (or None): ``(lo, hi)``, the outputs at which the box is still exact (see the
    module docstring); ``hidden_sizes``: the widths of the hidden layers the file declares, a tuple
    (None when it does not say); ``n_hidden``: the width when there is exactly one hidden layer (None
    otherwise), so that units the queries cannot see (never active, zero output weight) can be counted.
    """

    def __init__(self, func: Callable[[np.ndarray], np.ndarray], n_inputs: int | None, kind: str, source: str,
                 *, output_range: tuple[float, float] | None = None,
                 hidden_sizes: tuple[int, ...] | None = None):
        self.func, self.n_inputs, self.kind, self.source = func, n_inputs, kind, source
        self.output_range = output_range
        self.hidden_sizes = None if hidden_sizes is None else tuple(int(k) for k in hidden_sizes)
        self.n_hidden = self.hidden_sizes[0] if self.hidden_sizes is not None and len(self.hidden_sizes) == 1 \
            else None

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return self.func(X)

    def __repr__(self) -> str:
        return (f"LoadedModel(kind={self.kind!r}, n_inputs={self.n_inputs}, hidden_sizes={self.hidden_sizes}, "
                f"source={self.source!r})")


def _need(module: str):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise InputError(f"reading this model needs the optional package {module.split('.')[0]!r}; install "
                         f"it with: pip install 'nnrecover[extract]'") from exc


def _check_file(path: Path) -> None:
    if not path.is_file():
        raise InputError(f"model file {str(path)!r} does not exist (or is not a file).")


def _load_skops(path: Path) -> LoadedModel:
    sio = _need("skops.io")
    try:
        untrusted = sio.get_untrusted_types(file=path)
    except Exception as exc:  # skops raises several types for a file that is not a skops archive
        raise InputError(f"{path.name} is not a readable skops file: {exc}") from exc
    bad = [t for t in untrusted if not t.startswith(_SKOPS_ALLOWED)]
    if bad:
        raise InputError(f"{path.name} contains types outside scikit-learn/NumPy/SciPy ({', '.join(bad)}); "
                         "refusing to load them.")
    model = sio.load(path, trusted=untrusted)
    # deferred: scikit-learn is heavy (about 2 s to import) and needed only for a .skops file
    from sklearn.neural_network import (
        MLPClassifier,
        MLPRegressor,
    )

    if not isinstance(model, (MLPRegressor, MLPClassifier)):
        raise InputError(f"{path.name} holds a {type(model).__name__}; the skops loader reads a fitted "
                         "MLPRegressor or MLPClassifier.")
    if not hasattr(model, "coefs_"):
        raise InputError(f"the {type(model).__name__} in {path.name} is not fitted.")
    name = type(model).__name__
    sizes = [int(model.coefs_[0].shape[0])] + [int(c.shape[1]) for c in model.coefs_]
    out_act = getattr(model, "out_activation_", "identity")
    layers = ", ".join(f"{sizes[i]}->{sizes[i + 1]} {model.activation if i < len(sizes) - 2 else out_act}"
                       for i in range(len(sizes) - 1))
    if len(sizes) < 3:
        raise InputError(f"{path.name} holds an {name} without a hidden layer (layers: {layers}): an affine "
                         "model, with no ReLU unit to extract. Refused before any query.")
    if model.activation != "relu":
        raise InputError(f"{path.name} holds an {name} with activation={model.activation!r} (layers: {layers}); "
                         "extraction recovers ReLU networks only. Refused before any query.")
    d, hidden = sizes[0], tuple(sizes[1:-1])
    if isinstance(model, MLPRegressor):
        def func(X):
            return model.predict(X)
        return LoadedModel(func, d, "sklearn MLPRegressor (skops)", str(path), hidden_sizes=hidden)
    if out_act == "logistic":
        binary = int(model.n_outputs_) == 1

        def func(X):
            P = model.predict_proba(X)
            with np.errstate(divide="ignore", invalid="ignore"):
                if binary:
                    return np.log(P[:, 1]) - np.log(P[:, 0])
                return np.log(P) - np.log1p(-P)
        kind = "sklearn MLPClassifier log-odds (skops)"
        limit = _LOGODDS_RANGE
    else:
        def func(X):
            with np.errstate(divide="ignore", invalid="ignore"):
                logp = np.log(model.predict_proba(X))
            return logp[:, 1:] - logp[:, :1]
        kind = f"sklearn MLPClassifier log-ratios to class {model.classes_[0]!r} (skops)"
        limit = _SOFTMAX_RANGE
    return LoadedModel(func, d, kind, str(path), output_range=limit, hidden_sizes=hidden)


def _linear_layers(tensors: dict) -> list[tuple[np.ndarray, np.ndarray]]:
    """``[(weight, bias), ...]`` of ``<prefix><i>.weight/.bias`` keys, ordered by the layer index ``i``."""
    layers = {}
    for key in tensors:
        m = re.fullmatch(r"(.*?)(\d+)\.(weight|bias)", key)
        if m is None:
            raise InputError(f"unexpected tensor {key!r}; expected nn.Sequential keys such as '0.weight', '2.bias'.")
        layers.setdefault(int(m.group(2)), {})[m.group(3)] = np.asarray(tensors[key])
    out = []
    for i in sorted(layers):
        if "weight" not in layers[i]:
            raise InputError(f"layer {i} has a bias but no weight.")
        W = layers[i]["weight"]
        b = layers[i].get("bias", np.zeros(W.shape[0] if W.ndim else 0, W.dtype))
        out.append((W, b))
    return out


def _load_safetensors(path: Path) -> LoadedModel:
    stn = _need("safetensors.numpy")
    try:
        tensors = stn.load_file(str(path))
    except Exception as exc:
        raise InputError(f"{path.name} is not a readable safetensors file: {exc}") from exc
    layers = _linear_layers(tensors)
    shapes = ", ".join(f"{i}: weight {W.shape}, bias {b.shape}" for i, (W, b) in enumerate(layers))
    if len(layers) < 2:
        raise InputError(f"{path.name} has {len(layers)} linear layer(s) ({shapes or 'none'}); extraction needs a "
                         "chain Linear, ReLU, Linear, ... with at least one hidden layer. Refused before any query.")
    for i, (W, b) in enumerate(layers):
        chains = W.ndim == 2 and b.shape == (W.shape[0],) and (i == 0 or W.shape[1] == layers[i - 1][0].shape[0])
        if not chains:
            raise InputError(f"{path.name}: layer shapes do not chain as Linear(d, k_1), Linear(k_1, k_2), ..., "
                             f"Linear(k_L, p) (layer {i} breaks the chain; layers {shapes}). Refused before any "
                             "query.")
    dtype = np.result_type(*(a for layer in layers for a in layer))
    *hidden, (W_out, b_out) = layers

    def func(X):
        H = np.asarray(X, dtype)
        for W, b in hidden:
            H = np.maximum(H @ W.T + b, 0)
        Y = H @ W_out.T + b_out
        return Y[:, 0] if Y.shape[1] == 1 else Y
    return LoadedModel(func, int(layers[0][0].shape[1]), f"PyTorch state_dict (safetensors, {dtype})", str(path),
                       hidden_sizes=tuple(int(W.shape[0]) for W, _ in hidden))


_ONNX_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16}


def _load_onnx(path: Path) -> LoadedModel:
    ort = _need("onnxruntime")
    hidden = _onnx_hidden_sizes(path)         # first: a refused activation need not be one onnxruntime runs
    try:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise InputError(f"{path.name} is not a model onnxruntime can run: {exc}") from exc
    inputs, outputs = sess.get_inputs(), sess.get_outputs()
    if len(inputs) != 1 or len(outputs) < 1:
        raise InputError(f"{path.name} has {len(inputs)} inputs; extraction needs a model with one input (n, d).")
    spec = inputs[0]
    dtype = _ONNX_TYPES.get(spec.type)
    if dtype is None:
        raise InputError(f"{path.name}: input type {spec.type} is not a float tensor.")
    shape = spec.shape
    d = shape[-1] if len(shape) == 2 and isinstance(shape[-1], int) else None
    name = spec.name
    # an export with a fixed batch size (torch.onnx.export of a (1, d) example without dynamic_axes)
    # accepts exactly that many rows: the queries are sent in such batches, the last one padded
    batch = shape[0] if len(shape) == 2 and isinstance(shape[0], int) and shape[0] > 0 else None

    def run(X):
        Y = np.asarray(sess.run(None, {name: np.ascontiguousarray(X, dtype)})[0])
        return Y.reshape(X.shape[0], -1)

    def func(X):
        n = X.shape[0]
        if batch is None:
            Y = run(X)
        else:
            pad = -n % batch
            Xp = np.concatenate([X, np.repeat(X[-1:], pad, axis=0)]) if pad else X
            Y = np.concatenate([run(Xp[i:i + batch]) for i in range(0, Xp.shape[0], batch)])[:n]
        return Y[:, 0] if Y.shape[1] == 1 else Y
    kind = f"ONNX ({spec.type}{f', batch size {batch}' if batch else ''})"
    return LoadedModel(func, d, kind, str(path), hidden_sizes=hidden)


#: ONNX operators of activations other than ReLU, refused in the hidden layers
_ONNX_NOT_RELU = frozenset({
    "Sigmoid", "HardSigmoid", "Tanh", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "ThresholdedRelu", "Softplus",
    "Softsign", "HardSwish", "Gelu", "Mish", "Erf", "Clip", "Exp", "Log", "Abs", "Sign", "Sin", "Cos", "Sqrt",
    "Pow", "Reciprocal", "Softmax", "LogSoftmax", "Hardmax", "Round", "Floor", "Ceil"})


def _onnx_hidden_sizes(path: Path) -> tuple[int, ...] | None:
    """Widths of the hidden layers of an ONNX chain of weight layers and ReLUs (None when unknown).

    The weight layers are the ``MatMul``/``Gemm`` nodes on a stored 2-D weight (``(in, out)`` for
    ``MatMul(x, W)`` and ``Gemm``, ``(out, in)`` for ``Gemm`` with ``transB``); their widths are read
    from the weights when they chain. A node of another activation than ``Relu`` (:data:`_ONNX_NOT_RELU`)
    among the nodes the last weight layer depends on is refused, naming it. Needs the ``onnx`` package to
    read the graph; without it (or for a graph it cannot parse) the model is run as a black box of
    unknown widths.
    """
    try:
        import onnx  # deferred: optional (the extract extra), only to inspect an .onnx graph
    except ImportError:
        return None
    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception:  # onnxruntime read it; a graph onnx cannot parse is left to the black-box route
        return None
    weights = {t.name: tuple(int(n) for n in t.dims) for t in graph.initializer}
    nodes = list(graph.node)
    layers = []                                  # (node index, label, (in, out) or None)
    for i, node in enumerate(nodes):
        if node.op_type not in ("MatMul", "Gemm"):
            continue
        pos = [j for j, name in enumerate(node.input[:2]) if len(weights.get(name, ())) == 2]
        if not pos:
            continue
        dims = weights[node.input[pos[0]]]
        trans_b = node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
        io = (dims[1], dims[0]) if trans_b else dims
        layers.append((i, f"{node.name or node.op_type} {'x'.join(map(str, dims))}", io if pos[0] == 1 else None))
    if not layers:
        return None
    # the nodes the last weight layer depends on: the hidden layers (and anything before the first)
    producer = {out: i for i, node in enumerate(nodes) for out in node.output}
    upstream, todo = set(), list(nodes[layers[-1][0]].input)
    while todo:
        i = producer.get(todo.pop())
        if i is not None and i not in upstream:
            upstream.add(i)
            todo.extend(nodes[i].input)
    bad = [f"{nodes[i].name or '(unnamed)'} ({nodes[i].op_type})" for i in sorted(upstream)
           if nodes[i].op_type in _ONNX_NOT_RELU]
    if bad:
        raise InputError(f"{path.name} has a hidden activation other than ReLU: node {', '.join(bad)} (weight "
                         f"layers: {', '.join(label for _, label, _ in layers)}); extraction recovers ReLU "
                         "networks only. Refused before any query.")
    io = [layer[2] for layer in layers]
    if any(x is None for x in io) or any(io[i][1] != io[i + 1][0] for i in range(len(io) - 1)):
        return None
    return tuple(a[1] for a in io[:-1])


def _load_callable(spec: str) -> LoadedModel:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InputError(f"a callable is given as 'module:function', got {spec!r}.")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"cannot import module {module_name!r} of {spec!r}: {exc}") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InputError(f"{module_name!r} has no attribute {attr!r}.")
        obj = getattr(obj, part)
    if not callable(obj):
        raise InputError(f"{spec!r} is not callable.")
    return LoadedModel(obj, getattr(obj, "n_inputs", None), "Python callable", spec)


def load_model(spec: "str | os.PathLike") -> LoadedModel:
    """A black box from a file (``.skops``, ``.safetensors``, ``.onnx``) or a ``module:function`` name.

    Parameters
    ----------
    spec : str or path-like

    Returns
    -------
    LoadedModel
        Callable ``(n, d) -> (n,) | (n, p)``; ``n_inputs`` is ``d`` when the format records it,
        ``hidden_sizes`` the widths of the hidden layers (``n_hidden`` the width of a one-hidden-layer file).

    Raises
    ------
    InputError
        Missing file, unknown suffix, unreadable content, a model that is not a ReLU network (another
        hidden activation, layers that do not chain, no hidden layer), untrusted types in a skops file,
        or a missing optional package (the message names the extra to install).
    """
    text = os.fspath(spec)
    path = Path(text)
    suffix = path.suffix.lower()
    loaders = {".skops": _load_skops, ".safetensors": _load_safetensors, ".onnx": _load_onnx}
    if suffix in loaders:
        _check_file(path)
        return loaders[suffix](path)
    if ":" in text and not path.exists():
        return _load_callable(text)
    raise InputError(f"cannot read a model from {text!r}: give a .skops, .safetensors or .onnx file or a "
                     "'module:function' callable.")

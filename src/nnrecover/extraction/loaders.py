"""Black boxes from files, without pickle where the format allows.

:func:`load_model` turns a model specification into a vectorised callable ``(n, d) -> (n,) | (n, p)``
for :func:`nnrecover.extraction.extract`:

``*.skops``
    A fitted scikit-learn ``MLPRegressor`` or ``MLPClassifier`` saved with ``skops.io.dump`` (skops'
    secure format: no pickle, only types from scikit-learn, NumPy and SciPy are accepted). A regressor
    is queried through ``predict``; a classifier through its logits read from ``predict_proba``
    (binary: ``log p1 - log p0``; multi-class: centred log-probabilities, the logits minus their mean,
    which is again a ReLU network of the input).
``*.safetensors``
    A PyTorch ``state_dict`` of ``nn.Sequential(nn.Linear(d, k), nn.ReLU(), nn.Linear(k, p))``
    (keys ``<i>.weight`` / ``<i>.bias``), evaluated with NumPy in the file's dtype (a float32 file is a
    float32 black box).
``*.onnx``
    Any ONNX model with one input ``(n, d)`` and one output, run with ``onnxruntime`` on the CPU in the
    input's declared dtype.
``module:function``
    Any importable Python callable (``module`` may be a dotted name; attributes may be nested, e.g.
    ``pkg.mod:obj.predict``).

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


class LoadedModel:
    """A loaded black box: ``model(X)`` evaluates it; ``n_inputs`` is ``d`` when the file says so."""

    def __init__(self, func: Callable[[np.ndarray], np.ndarray], n_inputs: int | None, kind: str, source: str):
        self.func, self.n_inputs, self.kind, self.source = func, n_inputs, kind, source

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return self.func(X)

    def __repr__(self) -> str:
        return f"LoadedModel(kind={self.kind!r}, n_inputs={self.n_inputs}, source={self.source!r})"


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
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    if not isinstance(model, (MLPRegressor, MLPClassifier)):
        raise InputError(f"{path.name} holds a {type(model).__name__}; the skops loader reads a fitted "
                         "MLPRegressor or MLPClassifier.")
    if not hasattr(model, "coefs_"):
        raise InputError(f"the {type(model).__name__} in {path.name} is not fitted.")
    d = int(model.n_features_in_)
    if isinstance(model, MLPRegressor):
        def func(X):
            return model.predict(X)
        kind = "sklearn MLPRegressor (skops)"
    else:
        def func(X):
            with np.errstate(divide="ignore"):
                logp = np.log(model.predict_proba(X))
            if logp.shape[1] == 2:
                return logp[:, 1] - logp[:, 0]
            return logp - logp.mean(axis=1, keepdims=True)
        kind = "sklearn MLPClassifier logits (skops)"
    return LoadedModel(func, d, kind, str(path))


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
        b = layers[i].get("bias", np.zeros(W.shape[0], W.dtype))
        out.append((W, b))
    return out


def _load_safetensors(path: Path) -> LoadedModel:
    stn = _need("safetensors.numpy")
    try:
        tensors = stn.load_file(str(path))
    except Exception as exc:
        raise InputError(f"{path.name} is not a readable safetensors file: {exc}") from exc
    layers = _linear_layers(tensors)
    if len(layers) != 2:
        raise InputError(f"{path.name} has {len(layers)} linear layers; one hidden layer "
                         "(Linear, ReLU, Linear) is supported.")
    (W1, b1), (W2, b2) = layers
    if W1.ndim != 2 or W2.ndim != 2 or W2.shape[1] != W1.shape[0] or b1.shape != (W1.shape[0],) \
            or b2.shape != (W2.shape[0],):
        raise InputError(f"{path.name}: layer shapes {W1.shape}, {b1.shape}, {W2.shape}, {b2.shape} do not "
                         "chain as Linear(d, k), Linear(k, p).")
    dtype = np.result_type(W1, b1, W2, b2)

    def func(X):
        X = np.asarray(X, dtype)
        Y = np.maximum(X @ W1.T + b1, 0) @ W2.T + b2
        return Y[:, 0] if Y.shape[1] == 1 else Y
    return LoadedModel(func, int(W1.shape[1]), f"PyTorch state_dict (safetensors, {dtype})", str(path))


_ONNX_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16}


def _load_onnx(path: Path) -> LoadedModel:
    ort = _need("onnxruntime")
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

    def func(X):
        Y = np.asarray(sess.run(None, {name: np.ascontiguousarray(X, dtype)})[0])
        return Y.reshape(Y.shape[0], -1)[:, 0] if Y.ndim == 1 or Y.reshape(Y.shape[0], -1).shape[1] == 1 \
            else Y.reshape(Y.shape[0], -1)
    return LoadedModel(func, d, f"ONNX ({spec.type})", str(path))


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
        Callable ``(n, d) -> (n,) | (n, p)``; ``n_inputs`` is ``d`` when the format records it.

    Raises
    ------
    InputError
        Missing file, unknown suffix, unreadable content, a model that is not one hidden layer, untrusted
        types in a skops file, or a missing optional package (the message names the extra to install).
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

"""nnrecover: provable recovery of two-layer neural networks from input-output samples.

Implements the algorithms of Awasthi-Tang-Vijayaraghavan 2021, Ge-Kuditipudi-Li-Wang 2019,
Bakshi-Jayaram-Woodruff 2019 and Goel-Panigrahy 2019 on one network model,
``f(x) = A act(W x + b) + c`` (:class:`TwoLayerNetwork`); :class:`DeepNetwork` holds a network with any
number of hidden layers (conversion, evaluation, canonical form, files, metrics).
"""

from importlib import import_module as _import_module

from . import activations, distributions, errors
from .activations import Activation, get_activation
from .deep_network import DeepNetwork
from .network import TwoLayerNetwork, random_network
from .sampling import SampleStream, sample, sample_stream

__version__ = "0.1.0"

__all__ = ["TwoLayerNetwork", "DeepNetwork", "random_network", "sample", "sample_stream", "SampleStream",
           "activations", "distributions", "errors", "Activation", "get_activation",
           "learners", "metrics", "moments", "hermite", "tensor", "refine", "experiments", "check",
           "extract", "extraction", "__version__"]

_LAZY = {"learners", "metrics", "moments", "hermite", "tensor", "refine", "experiments", "io", "files", "extraction", "data", "evidence"}
#: functions imported on first use: name -> module
_LAZY_FUNCTIONS = {"check": "assumptions", "extract": "extraction"}


def __getattr__(name):  # lazy subpackages keep `import nnrecover` fast (no dask/tensorly at import)
    if name in _LAZY:
        module = _import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    if name in _LAZY_FUNCTIONS:
        value = getattr(_import_module(f".{_LAZY_FUNCTIONS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nnrecover' has no attribute {name!r}")

"""The two-layer network model ``f(x) = A act(W x + b) + c`` and random teachers.

Symbol map (every paper onto one form, the form of every nnrecover function):

=====================  ==================  ================  ===================  =============
ours                   Awasthi et al.      Ge et al.         Bakshi et al.        Goel et al.
=====================  ==================  ================  ===================  =============
hidden_weights (k, d)  W^T (columns w_i)   W (rows w_i)      V* (k x d)           W* (rows)
hidden_bias (k,)       b                   0                 0                    -t (threshold)
output_weights (p, k)  a^T                 A (l x k)         U* (m x k)           P (poly.)
output_bias (p,)       0                   0                 0                    0
=====================  ==================  ================  ===================  =============
"""

from __future__ import annotations

import json
import numbers
import os
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ._memory import free_memory
from ._validation import (
    as_2d_float,
    as_float_array,
    check_finite,
    check_positive_int,
    check_random_state,
    check_real,
)
from .activations import Activation, get_activation
from .errors import InputError
from .files import atomic_output, check_npz_members

__all__ = ["TwoLayerNetwork", "random_network"]

_FORMAT = "nnrecover.TwoLayerNetwork/1"



def _row_norms(W: np.ndarray) -> np.ndarray:
    """Euclidean row norms without overflow or underflow (rows are scaled by their max first)."""
    m = np.max(np.abs(W), axis=1)
    out = np.zeros(W.shape[0])
    ok = m > 0
    out[ok] = m[ok] * np.linalg.norm(W[ok] / m[ok, None], axis=1)
    return out


class TwoLayerNetwork:
    """A two-layer network ``f(x) = A @ act(W @ x + b) + c``.

    Parameters
    ----------
    hidden_weights : array of shape (k, d)
        ``W``, one row per hidden unit.
    hidden_bias : array of shape (k,), optional
        ``b``; zeros by default.
    output_weights : array of shape (p, k) or (k,), optional
        ``A``; a 1-D array is one output. Ones (a single output summing the units) by default.
    output_bias : array of shape (p,), optional
        ``c``; zeros by default.
    activation : str or Activation
        Name from :func:`nnrecover.activations.available_activations` (``"relu"`` by default).

    Attributes
    ----------
    hidden_weights, hidden_bias, output_weights, output_bias : ndarray
        float64 copies of the arguments, shapes (k, d), (k,), (p, k), (p,).
    activation : Activation

    Raises
    ------
    InputError
        Wrong shapes, non-numeric, complex, NaN or infinite parameters, unknown activation.

    Examples
    --------
    >>> import numpy as np, nnrecover as nr
    >>> net = nr.TwoLayerNetwork([[3.0, 4.0]], hidden_bias=[5.0], output_weights=[2.0])
    >>> net.predict(np.array([[1.0, 1.0]]))
    array([24.])
    >>> net.canonical().hidden_weights
    array([[0.6, 0.8]])
    """

    def __init__(self, hidden_weights, hidden_bias=None, output_weights=None, output_bias=None,
                 activation: "str | Activation" = "relu"):
        W = as_float_array(hidden_weights, "hidden_weights")
        if W.ndim != 2 or W.shape[0] < 1 or W.shape[1] < 1:
            raise InputError(f"hidden_weights must have shape (n_hidden, n_inputs), got {W.shape}.")
        check_finite(W, "hidden_weights")
        k = W.shape[0]
        b = np.zeros(k) if hidden_bias is None else as_float_array(hidden_bias, "hidden_bias").reshape(-1)
        if b.shape != (k,):
            raise InputError(f"hidden_bias must have shape ({k},), got {np.shape(hidden_bias)}.")
        check_finite(b, "hidden_bias")
        A = np.ones((1, k)) if output_weights is None else as_float_array(output_weights, "output_weights")
        if A.ndim == 1:
            A = A[None, :]
        if A.ndim != 2 or A.shape[1] != k:
            raise InputError(
                f"output_weights must have shape (n_outputs, {k}) (or ({k},) for one output), got "
                f"{np.shape(output_weights)}.")
        check_finite(A, "output_weights")
        p = A.shape[0]
        c = np.zeros(p) if output_bias is None else as_float_array(output_bias, "output_bias").reshape(-1)
        if c.shape != (p,):
            raise InputError(f"output_bias must have shape ({p},), got {np.shape(output_bias)}.")
        check_finite(c, "output_bias")
        self.hidden_weights = W
        self.hidden_bias = b
        self.output_weights = A
        self.output_bias = c
        self.activation = get_activation(activation)

    # ------------------------------------------------------------------ shape
    @property
    def n_inputs(self) -> int:
        """``d``, the input dimension."""
        return self.hidden_weights.shape[1]

    @property
    def n_hidden(self) -> int:
        """``k``, the number of hidden units."""
        return self.hidden_weights.shape[0]

    @property
    def n_outputs(self) -> int:
        """``p``, the number of outputs."""
        return self.output_weights.shape[0]

    @property
    def n_parameters(self) -> int:
        """Number of real parameters, ``k d + k + p k + p``."""
        return sum(a.size for a in (self.hidden_weights, self.hidden_bias, self.output_weights, self.output_bias))

    # ------------------------------------------------------------------ evaluation
    def hidden_activations(self, X) -> np.ndarray:
        """``act(X W^T + b)``, shape (n, k)."""
        X = as_2d_float(X, "X", n_features=self.n_inputs)
        return self.activation(X @ self.hidden_weights.T + self.hidden_bias)

    def predict(self, X) -> np.ndarray:
        """Network output: shape (n,) when there is one output, else (n, p)."""
        out = self._forward(as_2d_float(X, "X", n_features=self.n_inputs))
        return out[:, 0] if self.n_outputs == 1 else out

    def _forward(self, X: np.ndarray) -> np.ndarray:
        """Outputs ``(n, p)`` of rows the caller has already checked (finite float64, ``n_inputs`` columns):
        :meth:`predict` without its validation, for the library's own passes over such rows.

        Computed with the samples in columns, ``A act(W X^T + b)``: with few hidden units the product
        ``W X^T`` is the faster BLAS orientation (one thread, d = 100, k = 10, 10^6 rows: the whole
        forward pass 0.11 s against 0.15 s for ``X W^T``); the small product with the output weights gives
        C-ordered rows again."""
        pre = self.hidden_weights @ X.T
        pre += self.hidden_bias[:, None]
        return self.activation(pre).T @ self.output_weights.T + self.output_bias

    __call__ = predict

    # ------------------------------------------------------------------ forms
    def copy(self) -> "TwoLayerNetwork":
        """A deep copy (the arrays are copied)."""
        return TwoLayerNetwork(self.hidden_weights.copy(), self.hidden_bias.copy(),
                               self.output_weights.copy(), self.output_bias.copy(), self.activation)

    def first_outputs(self, m: int) -> "TwoLayerNetwork":
        """The network computing only the first ``m`` outputs (the same hidden layer).

        Parameters
        ----------
        m : int
            Outputs to keep, ``1 <= m <= n_outputs``.
        """
        m = check_positive_int(m, "m")
        if m > self.n_outputs:
            raise InputError(f"m must be at most n_outputs = {self.n_outputs}; got {m}.")
        return TwoLayerNetwork(self.hidden_weights, self.hidden_bias, self.output_weights[:m],
                               self.output_bias[:m], self.activation)

    def canonical(self) -> "TwoLayerNetwork":
        """Canonical form: rows of ``W`` scaled to unit norm, the scale moved into ``b`` and ``A``.

        This is nnrecover's canonical form (unit hidden rows, units unordered) for degree-1 activations, and
        its natural extension to any positively homogeneous activation.

        For an activation homogeneous of degree ``q`` (relu, leaky_relu: 1; relu_power(p): p; step: 0)
        ``act(s t) = s**q act(t)`` for ``s > 0``, so row ``i`` is divided by ``s_i = ||w_i||``, ``b_i``
        too, and column ``i`` of ``A`` is multiplied by ``s_i**q``: the function is unchanged.
        Zero rows and non-homogeneous activations are left as they are (a copy is returned).
        Row norms are computed without underflow or overflow; a unit whose rescaled bias or output
        weight overflows float64 raises :class:`~nnrecover.errors.InputError`.
        """
        net = self.copy()
        q = self.activation.degree
        if q is None:
            return net
        s = _row_norms(net.hidden_weights)
        ok = s > 0
        with np.errstate(over="ignore"):
            net.hidden_weights[ok] /= s[ok, None]
            net.hidden_bias[ok] /= s[ok]
            net.output_weights[:, ok] *= s[ok] ** q
        bad = ~(np.isfinite(net.hidden_bias) & np.all(np.isfinite(net.output_weights), axis=0))
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            raise InputError(
                f"hidden unit {i} cannot be put in canonical form: its rescaled bias or output weight "
                f"overflows (||w_{i}|| = {s[i]:.3g}, b_{i} = {self.hidden_bias[i]:.3g}); such a unit is "
                "numerically constant or huge, remove or rescale it.")
        return net

    def permuted(self, order) -> "TwoLayerNetwork":
        """The same network with its hidden units reordered (``order`` a permutation of range(k))."""
        order = np.asarray(order, dtype=int)
        if sorted(order.tolist()) != list(range(self.n_hidden)):
            raise InputError(f"order must be a permutation of range({self.n_hidden}).")
        return TwoLayerNetwork(self.hidden_weights[order], self.hidden_bias[order],
                               self.output_weights[:, order], self.output_bias, self.activation)

    # ------------------------------------------------------------------ io
    def to_dict(self) -> dict:
        """A JSON-serialisable description (nested lists of floats); inverse of :meth:`from_dict`."""
        return {
            "format": _FORMAT,
            "activation": self.activation.spec,
            "hidden_weights": self.hidden_weights.tolist(),
            "hidden_bias": self.hidden_bias.tolist(),
            "output_weights": self.output_weights.tolist(),
            "output_bias": self.output_bias.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "TwoLayerNetwork":
        """Build a network from :meth:`to_dict` output (or the arrays of an ``.npz`` file)."""
        if not isinstance(data, dict):
            raise InputError(f"a network description must be a dict, got {type(data).__name__}.")
        missing = {"hidden_weights", "activation"} - set(data)
        if missing:
            raise InputError(f"network description lacks {sorted(missing)}; is it an nnrecover network file?")
        fmt = data.get("format", _FORMAT)
        if str(fmt) != _FORMAT:
            raise InputError(f"unknown network format {str(fmt)!r}; this version reads {_FORMAT!r}.")
        if data.get("output_bias") is not None and data.get("output_weights") is None:
            raise InputError("network description has output_bias but lacks output_weights; add output_weights "
                             "(shape (n_outputs, n_hidden)) or remove output_bias.")
        if not isinstance(data["activation"], str):
            raise InputError(f"the activation of a network description must be a string, got "
                             f"{data['activation']!r}.")
        return cls(data["hidden_weights"], data.get("hidden_bias"), data.get("output_weights"),
                   data.get("output_bias"), data["activation"])

    def save(self, path: "str | os.PathLike") -> None:
        """Write the network to ``path``; the suffix picks the format. No pickle.

        Parameters
        ----------
        path : str or path-like
            ``*.json``: text; floats are written by ``repr`` and read back bit-exactly.
            ``*.npz``: binary numpy archive, written to exactly this name (any case of the suffix).

        Notes
        -----
        The file is written to a temporary name in the same folder and renamed into place when
        complete (:func:`nnrecover.files.atomic_output`): an interrupted save leaves the old file.
        """
        write_network_file(path, self.to_dict, lambda: {
            "hidden_weights": self.hidden_weights, "hidden_bias": self.hidden_bias,
            "output_weights": self.output_weights, "output_bias": self.output_bias,
            "activation": np.array(self.activation.spec), "format": np.array(_FORMAT)})

    @classmethod
    def load(cls, path: "str | os.PathLike") -> "TwoLayerNetwork":
        """Read a network written by :meth:`save` (``.json`` or ``.npz``; pickles are refused).

        Raises
        ------
        InputError
            Missing or unreadable file, wrong suffix, or content that is not a network description
            (ragged or non-numeric arrays, a truncated archive, an array header that promises more
            data than the archive holds).
        """
        return read_network_file(path, cls.from_dict, "TwoLayerNetwork.save")

    @classmethod
    def from_sklearn(cls, model: Any) -> "TwoLayerNetwork":
        """Convert a fitted one-hidden-layer ``sklearn.neural_network.MLPRegressor``.

        Supported activations: relu, identity, tanh, logistic (= sigmoid). ``coefs_[0]`` (d, k) and
        ``coefs_[1]`` (k, p) are transposed into ``W`` and ``A``; the intercepts become ``b`` and ``c``,
        so ``from_sklearn(m).predict(X)`` equals ``m.predict(X)`` up to rounding.

        Parameters
        ----------
        model : sklearn.neural_network.MLPRegressor
            Fitted, with ``len(hidden_layer_sizes) == 1``.

        Returns
        -------
        TwoLayerNetwork
        """
        if not hasattr(model, "activation"):
            raise InputError(f"from_sklearn needs a fitted sklearn MLPRegressor, got {type(model).__name__}.")
        coefs = getattr(model, "coefs_", None)
        if coefs is None:
            raise InputError("from_sklearn needs a fitted MLPRegressor (it has no coefs_); call fit first.")
        if len(coefs) != 2:
            raise InputError(f"from_sklearn supports one hidden layer; the model has {len(coefs) - 1}.")
        if getattr(model, "out_activation_", "identity") != "identity":
            raise InputError("from_sklearn supports regressors (identity output activation) only.")
        act = model.activation
        if act not in ("relu", "identity", "tanh", "logistic"):
            raise InputError(f"MLP activation {act!r} is not supported (relu, identity, tanh, logistic).")
        return cls(np.asarray(coefs[0]).T, model.intercepts_[0], np.asarray(coefs[1]).T,
                   model.intercepts_[1], "sigmoid" if act == "logistic" else act)

    # ------------------------------------------------------------------ misc
    def __repr__(self) -> str:
        return (f"TwoLayerNetwork(n_inputs={self.n_inputs}, n_hidden={self.n_hidden}, "
                f"n_outputs={self.n_outputs}, activation={self.activation.spec!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TwoLayerNetwork):
            return NotImplemented
        return (self.activation == other.activation
                and all(np.array_equal(x, y) for x, y in zip(self._arrays(), other._arrays())))

    __hash__ = None  # type: ignore[assignment]

    def _arrays(self):
        return (self.hidden_weights, self.hidden_bias, self.output_weights, self.output_bias)


def write_network_file(path: str | os.PathLike, description: Callable[[], dict],
                       arrays: Callable[[], dict]) -> None:
    """Write a network file, the suffix picking the format (:meth:`TwoLayerNetwork.save`,
    :meth:`nnrecover.DeepNetwork.save`).

    Parameters
    ----------
    path : str or path-like
        ``*.json`` or ``*.npz`` (any case of the suffix).
    description : callable
        Returns the JSON-able description (``to_dict``); called only for a ``.json`` file.
    arrays : callable
        Returns the ``{name: ndarray}`` members of the ``.npz`` archive (strings as 0-d unicode arrays);
        called only for an ``.npz`` file. Both are callables so that a large network is converted to
        nested lists, or gathered into arrays, only for the format it is written in.

    Raises
    ------
    InputError
        Another suffix, or a file that cannot be written.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".npz"):
        raise InputError(f"cannot save a network to {path.name!r}: use a .json or .npz file name.")
    try:
        with atomic_output(path) as tmp:
            if suffix == ".json":
                tmp.write_text(json.dumps(description(), indent=1))
            else:
                # through a file object: np.savez would append ".npz" to a name ending in ".NPZ"
                with open(tmp, "wb") as fh:
                    np.savez(fh, **arrays())
    except OSError as exc:
        raise InputError(f"cannot write network file {str(path)!r}: {exc.strerror or exc}.") from exc


def read_network_file(path: str | os.PathLike, from_dict: Callable[[dict], Any], writer: str) -> Any:
    """Read a network file written by :func:`write_network_file` and build it with ``from_dict``.

    Parameters
    ----------
    path : str or path-like
        ``*.json`` or ``*.npz``; pickles are refused, ``.npz`` headers are checked against the member
        sizes before anything is read (:func:`nnrecover.files.check_npz_members`).
    from_dict : callable
        Builds the network from the description (a dict; for an ``.npz`` file its members, with the
        ``activation`` and ``format`` entries as str).
    writer : str
        The method that writes such files, named in the message for a file that is not an archive.

    Raises
    ------
    InputError
        Missing or unreadable file, wrong suffix, or content that is not a network description; the
        message of an error of ``from_dict`` is prefixed with the file name.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".npz"):
        raise InputError(f"cannot load a network from {path.name!r}: use a .json or .npz file.")
    if not path.is_file():
        raise InputError(f"network file {str(path)!r} does not exist (or is not a file).")
    try:
        if suffix == ".json":
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # JSONDecodeError is a ValueError
                raise InputError(f"{path.name} is not valid JSON: {' '.join(str(exc).split())[:200]}") from None
            if not isinstance(data, dict):
                raise InputError(f"{path.name} does not hold a network description.")
        else:
            if not zipfile.is_zipfile(path):
                with open(path, "rb") as fh:
                    single = fh.read(6) == b"\x93NUMPY"
                raise InputError(f"{path.name} holds a single array, not a network archive." if single else
                                 f"{path.name} is not a readable .npz network archive (not a zip file); "
                                 f"write it with {writer}.")
            check_npz_members(path)  # headers against sizes: no allocation of what a corrupt header claims
            try:
                archive = np.load(path, allow_pickle=False)
                if not isinstance(archive, np.lib.npyio.NpzFile):
                    raise InputError(f"{path.name} holds a single array, not a network archive.")
                with archive:
                    data = {key: archive[key] for key in archive.files}
            except InputError:
                raise
            except (ValueError, zipfile.BadZipFile, EOFError, zlib.error) as exc:
                raise InputError(f"{path.name} is not a readable .npz network archive: {exc}") from exc
            for key in ("activation", "format"):
                if key in data:
                    if data[key].ndim != 0 or data[key].dtype.kind != "U":
                        raise InputError(f"{path.name}: entry {key!r} must be a string.")
                    data[key] = str(data[key])
    except OSError as exc:
        raise InputError(f"cannot read network file {str(path)!r}: {exc.strerror or exc}.") from exc
    try:
        return from_dict(data)
    except InputError as exc:
        # name the file: a samples file given where a model is expected reads as "lacks [...]"
        hint = (" (it holds arrays X, Y: a samples file, not a network)"
                if isinstance(data, dict) and {"X", "Y"} <= set(data) else "")
        raise InputError(f"{path.name}: {exc}{hint}") from None


_RANDOM_OPTIONS = {"bias_range", "output_weight_range", "output_signs", "rows", "condition_number",
                   "output_bias_range"}


def _as_range(value, name):
    try:
        if isinstance(value, numbers.Real):
            value = (value, value)
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be a number or a (low, high) pair, got {value!r}.") from exc
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo > hi:
        raise InputError(f"{name} must be a number or a (low, high) pair with low <= high, got {value!r}.")
    return lo, hi


def _check_network_memory(d: int, k: int, p: int) -> None:
    """Refuse, before drawing it, a network whose parameters (and one temporary copy) exceed the memory."""

    need = 16 * (k * d + k + p * k + p)
    avail = free_memory()
    if avail is not None and need > avail:
        raise InputError(f"a network with n_inputs={d}, n_hidden={k}, n_outputs={p} needs {need / 2**30:.3g} GiB "
                         f"(its {k} x {d} hidden weights and a temporary copy) but {avail / 2**30:.3g} GiB of memory "
                         "is available; lower n_inputs or n_hidden.")


def random_network(n_inputs: int, n_hidden: int, n_outputs: int = 1, *, activation="relu", rng=None,
                   **options) -> TwoLayerNetwork:
    """Draw a random teacher network.

    Parameters
    ----------
    n_inputs, n_hidden, n_outputs : int
        ``d``, ``k``, ``p``.
    activation : str or Activation
    rng : int, Generator or None
    bias_range : (float, float) or float, default (0, 0)
        Hidden biases uniform in this range (a float gives that constant bias).
    output_weight_range : (float, float) or float, default (0.5, 1.5)
        Magnitudes ``|A_ij|`` uniform in this range.
    output_signs : {"random", "positive", "negative"}, default "random"
    output_bias_range : (float, float) or float, default 0
    rows : {"unit", "orthonormal", "gaussian"}, default "unit"
        Unit-norm rows (uniform directions), orthonormal rows (needs ``k <= d``), or i.i.d. N(0, 1/d)
        entries.
    condition_number : float, optional
        Prescribe the singular values of ``W``: geometrically spaced from 1 to ``1/condition_number``,
        between Haar-random orthonormal factors, ``W = U diag(s) V^T`` (Ge et al.'s conditioned
        teachers); needs ``k <= d`` (and ``k >= 2`` unless it is 1). Rows are then not
        renormalised, so ``rows`` cannot be combined with it.

    Returns
    -------
    TwoLayerNetwork

    Raises
    ------
    InputError
        Unknown or invalid options, or a network larger than the available memory (checked before
        anything is allocated).

    Notes
    -----
    Draws happen in a fixed order (W, b, A, signs, c), so the same ``rng`` gives the same network.
    """
    unknown = set(options) - _RANDOM_OPTIONS
    if unknown:
        raise InputError(f"unknown random_network option(s) {sorted(unknown)}; known: {sorted(_RANDOM_OPTIONS)}.")
    d = check_positive_int(n_inputs, "n_inputs")
    k = check_positive_int(n_hidden, "n_hidden")
    p = check_positive_int(n_outputs, "n_outputs")
    act = get_activation(activation)
    _check_network_memory(d, k, p)
    gen = check_random_state(rng)
    rows = options.get("rows", "unit")
    kappa = options.get("condition_number")
    if rows not in ("unit", "orthonormal", "gaussian"):
        raise InputError(f"rows must be 'unit', 'orthonormal' or 'gaussian', got {rows!r}.")
    if kappa is not None:
        if "rows" in options:
            raise InputError("give either rows or condition_number: a prescribed spectrum fixes the rows.")
        kappa = check_real(kappa, "condition_number", minimum=1)
        if k > d:
            raise InputError(f"condition_number needs n_hidden <= n_inputs (got {k} > {d}).")
        if k == 1 and kappa != 1.0:
            raise InputError(f"a single hidden unit has condition number 1, got condition_number={kappa}.")
        left = _haar_orthonormal(k, k, gen)
        right = _haar_orthonormal(k, d, gen)
        sv = np.geomspace(1.0, 1.0 / kappa, k) if k > 1 else np.ones(1)
        W = (left * sv) @ right
    elif rows == "orthonormal":
        if k > d:
            raise InputError(f"orthonormal rows need n_hidden <= n_inputs (got {k} > {d}); use rows='unit'.")
        W = _haar_orthonormal(k, d, gen)
    elif rows == "unit":
        W = gen.standard_normal((k, d))
        W /= np.linalg.norm(W, axis=1, keepdims=True)
    else:
        W = gen.standard_normal((k, d)) / np.sqrt(d)
    lo, hi = _as_range(options.get("bias_range", 0.0), "bias_range")
    b = gen.uniform(lo, hi, size=k)
    lo, hi = _as_range(options.get("output_weight_range", (0.5, 1.5)), "output_weight_range")
    if lo < 0:
        raise InputError("output_weight_range gives magnitudes; use output_signs for the signs.")
    A = gen.uniform(lo, hi, size=(p, k))
    signs = options.get("output_signs", "random")
    if signs == "random":
        A *= gen.choice([-1.0, 1.0], size=(p, k))
    elif signs == "negative":
        A = -A
    elif signs != "positive":
        raise InputError(f"output_signs must be 'random', 'positive' or 'negative', got {signs!r}.")
    lo, hi = _as_range(options.get("output_bias_range", 0.0), "output_bias_range")
    c = gen.uniform(lo, hi, size=p)
    return TwoLayerNetwork(W, b, A, c, act)


def _haar_orthonormal(k: int, d: int, gen: np.random.Generator) -> np.ndarray:
    """k x d matrix with orthonormal rows, Haar distributed (QR with sign fix)."""
    q, r = np.linalg.qr(gen.standard_normal((d, k)))
    q *= np.sign(np.diag(r))
    return q.T

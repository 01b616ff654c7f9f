"""Input validation shared by every public entry point (internal).

Every helper raises :class:`nnrecover.errors.InputError` with a message that names the argument and
says what is expected, so that public functions can pass user input straight through them.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .errors import InputError

__all__ = ["check_random_state", "as_2d_float", "as_targets", "as_real_array", "as_float_array", "check_xy",
           "check_positive_int", "check_finite", "check_real", "validate_params", "Interval", "Options"]


def check_random_state(seed: Any) -> np.random.Generator:
    """Turn ``seed`` into a ``numpy.random.Generator``.

    Parameters
    ----------
    seed : None, int, numpy.random.Generator, numpy.random.SeedSequence or numpy.random.RandomState
        A Generator is returned as is (callers then share and advance its stream). ``None`` gives fresh
        OS entropy; a non-negative int or a SeedSequence a fresh PCG64 stream, the same for the same
        seed. A legacy RandomState is advanced by one draw that seeds a new Generator.

    Returns
    -------
    numpy.random.Generator

    Raises
    ------
    InputError
        Negative ints, bools and any other type.
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (bool, np.bool_)):
        raise InputError(f"random_state/rng must be None, an int or a numpy.random.Generator, got {seed!r}.")
    if seed is None or isinstance(seed, (numbers.Integral, np.random.SeedSequence)):
        if isinstance(seed, numbers.Integral) and int(seed) < 0:
            raise InputError(f"random_state/rng must be a non-negative int, got {seed}.")
        return np.random.default_rng(seed)
    if isinstance(seed, np.random.RandomState):
        return np.random.default_rng(seed.randint(0, 2**31 - 1))
    raise InputError(
        f"random_state/rng must be None, an int or a numpy.random.Generator, got {type(seed).__name__}."
    )


def all_finite(a: np.ndarray) -> bool:
    """Whether the numeric array ``a`` holds no NaN or inf.

    First one pairwise sum, which is finite unless ``a`` holds NaN/inf or the sum overflows (two to three
    times faster than ``isfinite(a).all()``, which writes a boolean array); only then each value.
    """
    a = np.asarray(a)
    if not a.size:
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.add.reduce(a, axis=None)):
            return True
    return bool(np.isfinite(a).all())


def check_finite(a: np.ndarray, name: str) -> None:
    """Raise InputError naming ``name`` and the number of bad entries if ``a`` has NaN or inf."""
    if not all_finite(a):
        bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
        raise InputError(f"{name} contains {bad} NaN or infinite value(s); remove or impute them first.")


def numeric_array(value: Any, name: str, *, what: str = "numeric") -> np.ndarray:
    """``np.asarray(value)`` after checking that it is a real numeric (or bool) array.

    Raises :class:`InputError` naming ``name`` for ragged input, non-numeric dtypes (the message says
    ``"{name} must be {what}"``) and complex dtypes. No copy, no dtype conversion, no finiteness check.
    """
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists etc.
        raise InputError(f"{name} could not be converted to an array: {exc}") from exc
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise InputError(f"{name} must be {what}, got dtype {arr.dtype}.")
    if np.iscomplexobj(arr):
        raise InputError(f"{name} must be real, got complex dtype {arr.dtype}.")
    return arr


def as_real_array(value: Any, name: str) -> np.ndarray:
    """Validate a real, finite, numeric array of any shape; returns it as float64 (no copy if possible)."""
    arr = np.asarray(numeric_array(value, name), dtype=np.float64)
    check_finite(arr, name)
    return arr


def as_float_array(value: Any, name: str) -> np.ndarray:
    """A float64 copy of ``value`` (any shape); InputError naming ``name`` for non-numeric or complex input.

    Unlike :func:`as_real_array` this does not check finiteness (callers check shapes first) and always
    copies (the result is owned by the caller, e.g. a network's parameter arrays).
    """
    try:
        if np.iscomplexobj(value):
            raise InputError(f"{name} must be real, got a complex array.")
        return np.array(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:  # ragged nesting, text, None, huge ints
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{name} must be an array of real numbers with rectangular nesting: "
                         f"{' '.join(str(exc).split())}") from None


def as_2d_float(X: Any, name: str = "X", *, n_features: int | None = None, min_rows: int = 1,
                allow_1d_as_column: bool = False) -> np.ndarray:
    """Validate a sample matrix: 2-D, real, finite; returns it as float64 (no copy if possible).

    Parameters
    ----------
    X : array-like
        The matrix, shape (n_samples, n_features). Bool and integer dtypes are converted.
    name : str
        Argument name used in error messages.
    n_features : int, optional
        Required number of columns.
    min_rows : int, default 1
        Required minimum number of rows.
    allow_1d_as_column : bool, default False
        Treat a 1-D array as one column.
    """
    arr = numeric_array(X, name)
    if arr.ndim == 1 and allow_1d_as_column:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise InputError(f"{name} must be 2-D with shape (n_samples, n_features), got shape {arr.shape}.")
    arr = np.asarray(arr, dtype=np.float64)
    if arr.shape[0] < min_rows:
        raise InputError(f"{name} has {arr.shape[0]} row(s); at least {min_rows} are needed.")
    if n_features is not None and arr.shape[1] != n_features:
        raise InputError(f"{name} has {arr.shape[1]} columns but {n_features} were expected (n_inputs).")
    check_finite(arr, name)
    return arr


def as_targets(Y: Any, name: str = "Y", *, n_rows: int | None = None) -> np.ndarray:
    """Validate targets: shape (n,) or (n, p), real, finite; returned as float64, 1-D stays 1-D.

    ``n_rows``, when given, is the number of input rows the targets must match.
    """
    arr = numeric_array(Y, name)
    if arr.ndim not in (1, 2):
        raise InputError(f"{name} must have shape (n,) or (n, p), got shape {arr.shape}.")
    arr = np.asarray(arr, dtype=np.float64)
    if n_rows is not None and arr.shape[0] != n_rows:
        raise InputError(
            f"X and {name} have different numbers of samples ({n_rows} vs {arr.shape[0]}); "
            "pass one target row per input row."
        )
    check_finite(arr, name)
    return arr


def check_xy(X: Any, Y: Any, *, min_samples: int = 1, n_features: int | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """Validate a pair (X, Y) of samples (see :func:`as_2d_float`, :func:`as_targets`); Y is returned 2-D (n, p)."""
    X = as_2d_float(X, "X", n_features=n_features)
    Y = as_targets(Y, "Y", n_rows=X.shape[0])
    if X.shape[0] < min_samples:
        raise InputError(f"got {X.shape[0]} samples, at least {min_samples} are needed.")
    return X, (Y[:, None] if Y.ndim == 1 else Y)


def check_positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    """Return ``value`` as an ``int`` if it is an integer (not bool) ``>= minimum``, else InputError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name} must be an integer, got {value!r}.")
    if int(value) < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {value}.")
    return int(value)



def check_real(value: Any, name: str, *, minimum: float | None = None, meaning: str = "") -> float:
    """``value`` as a finite float ``>= minimum``; InputError naming ``name`` (and ``meaning``) otherwise."""
    what = f"{name} is {meaning} and must be" if meaning else f"{name} must be"
    bound = "a finite number" + ("" if minimum is None else f" >= {minimum:g}")
    if isinstance(value, (bool, np.bool_)):
        raise InputError(f"{what} {bound}, got {value!r}.")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{what} {bound}, got {value!r}.") from None
    if not np.isfinite(out) or (minimum is not None and out < minimum):
        raise InputError(f"{what} {bound}, got {out}.")
    return out

# ---------------------------------------------------------------------------------------------------
# Declarative parameter constraints (the estimators' ``_parameter_constraints`` tables)
#
# Each hyper-parameter maps to a list of alternatives; a value is valid when it meets one of them.
# An alternative is ``None`` (the value None), ``"boolean"`` (True/False, numpy bools included),
# ``"random_state"`` (what :func:`check_random_state` accepts), ``callable``, a type, an
# :class:`Interval` or an :class:`Options`. Numbers are checked through :mod:`numbers`, so numpy
# scalars (``np.int64(5)``, ``np.float32(1.5)``) are accepted wherever Python numbers are; bools are
# never numbers here.


class Interval:
    """Numbers of kind ``kind`` (``numbers.Integral`` or ``numbers.Real``) in a range.

    ``low``/``high`` of None leave that side open-ended; ``closed`` is ``"both"``, ``"left"``,
    ``"right"`` or ``"neither"`` and says which finite ends belong to the range.
    """

    def __init__(self, kind: type, low: float | None, high: float | None, *, closed: str = "both"):
        self.kind, self.low, self.high, self.closed = kind, low, high, closed

    def accepts(self, value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, self.kind):
            return False
        if not np.isfinite(float(value)):
            return False
        if self.low is not None:
            if value < self.low or (value == self.low and self.closed in ("right", "neither")):
                return False
        if self.high is not None:
            if value > self.high or (value == self.high and self.closed in ("left", "neither")):
                return False
        return True

    def __str__(self) -> str:
        if self.high is None and self.low == (1 if self.kind is numbers.Integral else 0) and \
                self.closed == ("both" if self.kind is numbers.Integral else "neither"):
            return "a positive integer" if self.kind is numbers.Integral else "a positive number"
        what = "an integer" if self.kind is numbers.Integral else "a real number"
        lo = "" if self.low is None else (">= " if self.closed in ("both", "left") else "> ") + f"{self.low:g}"
        hi = "" if self.high is None else (("<= " if self.closed in ("both", "right") else "< ") + f"{self.high:g}")
        return what + (f" {lo}" if lo else "") + (" and" if lo and hi else "") + (f" {hi}" if hi else "")


class Options:
    """One of a fixed set of values (strings, or numbers compared by value)."""

    def __init__(self, *values: Any):
        self.values = values

    def accepts(self, value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)):
            return any(v is value or (isinstance(v, bool) and v == bool(value)) for v in self.values)
        try:
            return any(type(v) is not bool and value == v for v in self.values)
        except (TypeError, ValueError):  # arrays and other values without a scalar ==
            return False

    def __str__(self) -> str:
        if len(self.values) == 1:
            return repr(self.values[0])
        return "one of " + ", ".join(repr(v) for v in self.values)


def _accepts(constraint: Any, value: Any) -> bool:
    if constraint is None:
        return value is None
    if constraint == "boolean":
        return isinstance(value, (bool, np.bool_))
    if constraint == "random_state":
        return value is None or isinstance(value, (np.random.Generator, np.random.SeedSequence,
                                                   np.random.RandomState)) or (
            isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)) and value >= 0)
    if constraint is callable:
        return callable(value)
    if isinstance(constraint, type):
        return isinstance(value, constraint)
    return constraint.accepts(value)


def _describe(constraint: Any) -> str:
    if constraint is None:
        return "None"
    if constraint == "boolean":
        return "True or False"
    if constraint == "random_state":
        return "None, a non-negative int or a numpy.random.Generator"
    if constraint is callable:
        return "a callable"
    if isinstance(constraint, type):
        return f"an instance of {constraint.__name__}"
    return str(constraint)


def validate_params(params: dict, constraints: dict, owner: str) -> None:
    """Check every parameter named in ``constraints`` against its list of alternatives.

    Parameters
    ----------
    params : dict
        Parameter name -> value (``estimator.get_params(deep=False)``).
    constraints : dict
        Parameter name -> list of alternatives (see the comment above :class:`Interval`).
    owner : str
        Shown in the message (the estimator's class name).

    Raises
    ------
    InputError
        Naming the parameter, what it must be and the value given.
    """
    for name, alternatives in constraints.items():
        if name not in params:
            continue
        value = params[name]
        if not any(_accepts(c, value) for c in alternatives):
            allowed = " or ".join(_describe(c) for c in alternatives)
            raise InputError(f"{owner}: {name} must be {allowed}; got {value!r}.")

"""Input validation shared by every public entry point (internal)."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .errors import InputError

__all__ = ["check_random_state", "as_2d_float", "as_targets", "check_xy", "check_positive_int",
           "check_finite"]


def check_random_state(seed: Any) -> np.random.Generator:
    """Turn ``seed`` (None, int, Generator, SeedSequence) into a ``numpy.random.Generator``.

    A Generator is returned as is (so that callers share its stream); ints give a fresh PCG64 stream.
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or isinstance(seed, (numbers.Integral, np.random.SeedSequence)):
        if isinstance(seed, numbers.Integral) and int(seed) < 0:
            raise InputError(f"random_state/rng must be a non-negative int, got {seed}.")
        return np.random.default_rng(seed)
    if isinstance(seed, np.random.RandomState):
        return np.random.default_rng(seed.randint(0, 2**31 - 1))
    raise InputError(
        f"random_state/rng must be None, an int or a numpy.random.Generator, got {type(seed).__name__}."
    )


def check_finite(a: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(a)):
        bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
        raise InputError(f"{name} contains {bad} NaN or infinite value(s); remove or impute them first.")


def as_2d_float(X: Any, name: str = "X", *, n_features: int | None = None, min_rows: int = 1,
                allow_1d_as_column: bool = False) -> np.ndarray:
    """Validate a sample matrix: 2-D, real, finite, float64; returns a float64 array (no copy if possible)."""
    try:
        arr = np.asarray(X)
    except Exception as exc:  # ragged lists etc.
        raise InputError(f"{name} could not be converted to an array: {exc}") from exc
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise InputError(f"{name} must be numeric, got dtype {arr.dtype}.")
    if np.iscomplexobj(arr):
        raise InputError(f"{name} must be real, got complex dtype {arr.dtype}.")
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
    """Validate targets: shape (n,) or (n, p), finite, float64. Returned as given (1-D stays 1-D)."""
    try:
        arr = np.asarray(Y)
    except Exception as exc:
        raise InputError(f"{name} could not be converted to an array: {exc}") from exc
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise InputError(f"{name} must be numeric, got dtype {arr.dtype}.")
    if np.iscomplexobj(arr):
        raise InputError(f"{name} must be real, got complex dtype {arr.dtype}.")
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
    """Validate a pair (X, Y) of samples; Y is returned 2-D (n, p)."""
    X = as_2d_float(X, "X", n_features=n_features)
    Y = as_targets(Y, "Y", n_rows=X.shape[0])
    if X.shape[0] < min_samples:
        raise InputError(f"got {X.shape[0]} samples, at least {min_samples} are needed.")
    return X, (Y[:, None] if Y.ndim == 1 else Y)


def check_positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name} must be an integer, got {value!r}.")
    if int(value) < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {value}.")
    return int(value)

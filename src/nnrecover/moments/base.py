"""Streaming statistics: the monoid every moment computation is built on.

A :class:`Statistic` accumulates sums over chunks of samples (``update``), combines with another
partial result of the same kind (``merge``), and turns the sums into the estimate (``finalize``).
That one design gives bounded memory for any number of samples, parallelism, and distribution on
Dask (map over blocks, tree-reduce with ``merge``).

:func:`accumulate` feeds one or several statistics in a single pass over any supported data source.
"""

from __future__ import annotations

import copy
from typing import Any, Iterable, Sequence

import numpy as np

from .._validation import as_2d_float, as_targets
from ..errors import InputError

__all__ = ["Statistic", "accumulate", "DEFAULT_CHUNK_ROWS"]

DEFAULT_CHUNK_ROWS = 1 << 16


class Statistic:
    """Base class of streaming statistics.

    Subclasses set their accumulators in ``_reset`` and implement ``_update(X, Y)`` with validated
    float64 chunks (``Y`` 2-D, shape (n, p)), ``_merge(other)`` and ``finalize()``. ``n`` counts the
    samples seen. A statistic must be picklable (Dask ships it to workers).
    """

    def __init__(self) -> None:
        self.n = 0
        self._reset()

    def _reset(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _merge(self, other: "Statistic") -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def finalize(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    # public API --------------------------------------------------------------------------------
    def update(self, X, Y=None) -> "Statistic":
        """Add a chunk of samples; returns self."""
        X = as_2d_float(X, "X", min_rows=0)
        if Y is None:
            Y = np.zeros((X.shape[0], 0))
        else:
            Y = as_targets(Y, "Y", n_rows=X.shape[0])
            if Y.ndim == 1:
                Y = Y[:, None]
        if X.shape[0]:
            self._update(X, Y)
            self.n += X.shape[0]
        return self

    def merge(self, other: "Statistic") -> "Statistic":
        """Add the sums of another partial result of the same statistic; returns self."""
        if type(other) is not type(self):
            raise InputError(f"cannot merge {type(other).__name__} into {type(self).__name__}.")
        if other.n:
            self._merge(other)
            self.n += other.n
        return self

    def empty_like(self) -> "Statistic":
        """A fresh statistic with the same parameters and no samples."""
        new = copy.copy(self)
        new.n = 0
        new._reset()
        return new

    def require(self, n_min: int, what: str = "this statistic") -> None:
        if self.n < n_min:
            raise InputError(f"{what} needs at least {n_min} samples, got {self.n}.")


def accumulate(statistics: "Statistic | Sequence[Statistic]", data: Any, *, chunk_size: int | None = None,
               progress: bool | None = None) -> "Statistic | list[Statistic]":
    """Feed one statistic or a list of statistics with every sample of ``data`` in one pass.

    ``data`` may be a tuple ``(X, Y)`` of arrays (numpy, memory-mapped, or dask), or an iterable of
    ``(X, Y)`` chunks (e.g. :func:`nnrecover.sample_stream`). Returns the statistic(s), updated.
    """
    from .engine import iterate_chunks  # the engine owns data-source handling (dask, memmap, progress)

    single = isinstance(statistics, Statistic)
    stats = [statistics] if single else list(statistics)
    for X, Y in iterate_chunks(data, chunk_size=chunk_size, progress=progress, statistics=stats):
        for s in stats:
            s.update(X, Y)
    return stats[0] if single else stats

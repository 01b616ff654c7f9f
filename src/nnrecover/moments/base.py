"""Streaming statistics: the monoid every moment computation is built on.

A :class:`Statistic` accumulates sums over chunks of samples (``update``), combines with another
partial result of the same kind (``merge``), and turns the sums into the estimate (``finalize``).
Because ``merge`` is associative and ``empty_like()`` is its identity, a statistic can be computed

* in one pass over any number of samples with memory ``O(chunk_size * d + size of the statistic)``,
* in parallel, one partial result per block, combined by a tree of merges, and
* on a Dask cluster (:mod:`nnrecover.data` maps over blocks and tree-reduces with ``merge``).

:func:`accumulate` feeds one or several statistics in a single pass over any supported data source
(see :func:`nnrecover.data.as_data_source`).

Writing a statistic
-------------------
Subclass :class:`Statistic` and implement

``_reset()``
    set the accumulators to their empty state (allocate lazily: the dimensions are known at the
    first chunk);
``_update(X, Y)``
    add a validated chunk: ``X`` float64 of shape (m, d) with m >= 1, ``Y`` float64 of shape (m, p)
    (p = 0 when the data have no targets);
``_merge(other)``
    add the accumulators of ``other`` (same type, ``other.n > 0``; ``self`` may be empty);
``finalize()``
    return the estimate (raise :class:`~nnrecover.errors.InputError` through :meth:`require` when
    too few samples were seen).

The base class keeps ``n`` (samples seen) and checks that every chunk and every merged partial
result has the same ``d`` and ``p``. A statistic must be picklable (Dask ships it to workers).

Threads
-------
:func:`accumulate` runs the updates in worker threads (``n_jobs``; one BLAS thread each, see
:mod:`nnrecover._threads`), so ``_update`` must not touch shared mutable state other than its own
accumulators. By default one worker updates a statistic chunk after chunk, in order: the arithmetic,
hence every bit of the result, is that of a sequential pass. A subclass whose ``_update`` depends only
on the chunk (not on the rows seen before, such as a row counter or a running mean) may set the class
attribute ``parallel_chunks = True``: each chunk is then added to a fresh ``empty_like()`` partial on
any worker and the partials are merged in chunk order, for every ``n_jobs`` alike (so the bits do not
depend on the number of workers, but may differ in round-off from ``update`` called chunk by chunk,
e.g. when ``_update`` adds into its accumulator inside a BLAS call with ``beta = 1``). ``_reset``
must then assign new accumulator objects (never clear shared ones in place), since a partial starts
as a shallow copy.
"""

from __future__ import annotations

import abc
import copy
from typing import Any

import numpy as np

from .._validation import as_2d_float, as_targets
from ..errors import InputError

__all__ = ["Statistic", "row_blocks", "ROW_BLOCK_VALUES", "MIN_BLOCK_ROWS"]


class Statistic(abc.ABC):
    """Base class of streaming statistics (a monoid under :meth:`merge`).

    Attributes
    ----------
    n : int
        Number of samples accumulated so far.
    n_inputs, n_outputs : int or None
        ``d`` and ``p`` of the data seen so far (``None`` before the first sample; ``p = 0`` when the
        data have no targets).
    """

    parallel_chunks: bool = False
    """Whether a pass may compute each chunk's contribution separately and merge them in order."""

    def __init__(self) -> None:
        self.n = 0
        self._dims: tuple[int, int] | None = None
        self._reset()

    # ---------------------------------------------------------------- to implement in subclasses
    @abc.abstractmethod
    def _reset(self) -> None:
        """Set the accumulators to their empty state."""

    @abc.abstractmethod
    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        """Add a validated chunk (``X`` (m, d) float64, ``Y`` (m, p) float64, m >= 1)."""

    @abc.abstractmethod
    def _merge(self, other: "Statistic") -> None:
        """Add the accumulators of ``other`` (same type, ``other.n > 0``)."""

    @abc.abstractmethod
    def finalize(self) -> Any:
        """The estimate from the accumulated sums."""

    # ---------------------------------------------------------------- dimensions
    @property
    def n_inputs(self) -> int | None:
        dims = getattr(self, "_dims", None)
        return None if dims is None else dims[0]

    @property
    def n_outputs(self) -> int | None:
        dims = getattr(self, "_dims", None)
        return None if dims is None else dims[1]

    def _check_dims(self, dims: tuple[int, int], what: str) -> None:
        mine = getattr(self, "_dims", None)
        if mine is None:
            self._dims = dims
        elif mine != dims:
            raise InputError(
                f"{type(self).__name__} has seen data with n_inputs={mine[0]}, n_outputs={mine[1]}, but "
                f"{what} has n_inputs={dims[0]}, n_outputs={dims[1]}; every chunk of one data set must "
                "have the same number of columns (and targets in every chunk or in none).")

    # ---------------------------------------------------------------- public API
    def update(self, X, Y=None) -> "Statistic":
        """Add a chunk of samples.

        Parameters
        ----------
        X : array of shape (m, d)
            Inputs, one sample per row; must be finite.
        Y : array of shape (m,) or (m, p), optional
            Targets of the same samples; ``None`` when the data have no targets.

        Returns
        -------
        self
        """
        X = as_2d_float(X, "X", min_rows=0)
        if Y is None:
            Y = np.zeros((X.shape[0], 0))
        else:
            Y = as_targets(Y, "Y", n_rows=X.shape[0])
            if Y.ndim == 1:
                Y = Y[:, None]
        return self._add(X, Y)

    def _add(self, X: np.ndarray, Y: np.ndarray) -> "Statistic":
        """Add an already validated chunk (float64, finite, ``Y`` 2-D with as many rows as ``X``)."""
        if X.shape[0]:
            self._check_dims((X.shape[1], Y.shape[1]), "this chunk")
            self._update(X, Y)
            self.n += X.shape[0]
        return self

    def merge(self, other: "Statistic") -> "Statistic":
        """Add the sums of another partial result of the same statistic.

        ``merge`` is associative and ``empty_like()`` is its identity, so partial results over
        disjoint blocks of samples combine, in any grouping, into the statistic of their union.

        Returns
        -------
        self
        """
        if type(other) is not type(self):
            raise InputError(f"cannot merge {type(other).__name__} into {type(self).__name__}.")
        if other.n:
            other_dims = getattr(other, "_dims", None)
            if other_dims is not None:
                self._check_dims(other_dims, "the merged partial result")
            self._merge(other)
            self.n += other.n
        return self

    def empty_like(self) -> "Statistic":
        """A fresh statistic with the same parameters and no samples."""
        new = copy.copy(self)
        new.n = 0
        new._dims = None
        new._reset()
        return new

    def require(self, n_min: int, what: str = "this statistic") -> None:
        """Raise :class:`~nnrecover.errors.InputError` unless at least ``n_min`` samples were seen."""
        if self.n < n_min:
            raise InputError(f"{what} needs at least {n_min} samples, got {self.n}; pass more data.")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, n_inputs={self.n_inputs}, n_outputs={self.n_outputs})"


#: float64 values per temporary row block (8 MiB): the chunks of a stream can be much larger (65536 rows
#: of d = 1000 are 0.5 GB), and per-row features are often wider than x
ROW_BLOCK_VALUES = 1 << 20


#: BLAS products keep their speed down to about this many rows
MIN_BLOCK_ROWS = 1024


def row_blocks(n: int, width: int, values: int = ROW_BLOCK_VALUES) -> list[slice]:
    """Row slices of a chunk such that a temporary of ``width`` values per row stays near ``values``
    (8 MiB by default).

    The slices have an even number of rows (the last one aside), so that the ``+-x`` pairs of an antithetic
    sample are never split between two blocks and their odd sums cancel exactly inside each block."""
    step = max(MIN_BLOCK_ROWS, values // max(int(width), 1))
    step += step % 2
    return [slice(s, min(n, s + step)) for s in range(0, n, step)]

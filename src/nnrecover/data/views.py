"""Views of a data source: a subset of its rows or outputs, re-iterable as ``(X, Y)`` chunks.

Each view is data for :func:`nnrecover.data.accumulate` and declares what a pass may assume of its chunks
(``fresh_chunks``: never rewritten while later ones are read; ``finite_chunks``: values of an already
validated pass), so that reading a view costs no copy and no second finiteness check.

==========================  ==========================================================================
:class:`Head`               the first ``n`` rows (a stream is generated only as far as they go)
:class:`EveryOtherRow`      the even or the odd rows of every chunk (two independent halves)
:class:`Tail`, :func:`tail` the rows after the first ``skip``, optionally transformed chunk by chunk
:class:`FirstOutputs`       the first ``m`` target columns
==========================  ==========================================================================
"""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

from ..sampling import SampleStream
from .sources import ArraySource, as_data_source, fresh_chunks

__all__ = ["Head", "EveryOtherRow", "Tail", "tail", "FirstOutputs"]


class Head:
    """The first ``n`` rows of a data source, as a re-iterable of ``(X, Y)`` chunks (a stream is generated
    only as far as they go); ``chunk_rows=None``: the source's own chunks."""

    #: its chunks are slices of the source's validated chunks (:func:`nnrecover.data.finite_chunks`)
    finite_chunks = True

    def __init__(self, source, n: int, chunk_rows: int | None):
        self.source, self.n = source, int(n)
        self.chunk_rows = None if chunk_rows is None else int(chunk_rows)
        # slices of fresh chunks are fresh (a pass reading ahead need not copy them)
        self.fresh_chunks = fresh_chunks(source)

    def __iter__(self):
        have = 0
        it = iter(self.source.chunks(self.chunk_rows))
        try:
            for X, Y in it:
                take = min(self.n - have, X.shape[0])
                yield X[:take], Y[:take]
                have += take
                if have >= self.n:
                    break
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()


class EveryOtherRow:
    """The even (``parity = 0``) or odd rows of every chunk of a source (re-iterable)."""

    #: its chunks are slices of the source's validated chunks (:func:`nnrecover.data.finite_chunks`)
    finite_chunks = True

    def __init__(self, source, parity: int):
        self.source, self.parity = source, parity
        self.fresh_chunks = fresh_chunks(source)

    def __iter__(self):
        for X, Y in self.source.chunks():
            yield X[self.parity::2], Y[self.parity::2]


class Tail:
    """Re-iterable view of a data source without its first ``skip`` rows, with a chunk transform."""

    def __init__(self, source, skip: int, transform: Callable | None = None, chunk_size: int | None = None):
        self.source, self.skip, self.transform, self.chunk_size = source, skip, transform, chunk_size
        # the shapes, when the source knows its own: otherwise a pass would generate a chunk to learn them
        info = source.info
        self.n_samples = None if info.n_samples is None else max(info.n_samples - skip, 0)
        self.n_inputs, self.n_outputs = info.n_inputs, info.n_outputs
        # rows of a source whose chunks are never rewritten stay so here: a pass need not copy them
        self.fresh_chunks = fresh_chunks(source)
        # rows of a validated pass, not read again for finiteness (a transform's output is checked)
        self.finite_chunks = transform is None
        if transform is not None and info.n_inputs is not None and info.n_outputs is not None:
            Xo, Yo = transform(np.zeros((1, info.n_inputs)), np.zeros((1, info.n_outputs)))
            self.n_inputs, self.n_outputs = Xo.shape[1], Yo.shape[1]

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        source, skip = self.source, self.skip
        if isinstance(getattr(source, "obj", None), SampleStream) and skip:
            # a stream's tail is generated from the block that holds row `skip` on
            stream = source.obj
            first = min(skip, stream.n_samples)
            first -= first % 2 if stream.antithetic else 0      # an antithetic tail starts on a pair
            source, skip = as_data_source(stream.rows_from(first)), skip - first
        seen = 0
        for X, Y in source.chunks(self.chunk_size, progress=False):
            n = X.shape[0]
            start = min(max(skip - seen, 0), n)
            seen += n
            if start >= n:
                continue
            X, Y = X[start:], Y[start:]
            yield (X, Y) if self.transform is None else self.transform(X, Y)


def tail(source, skip: int, transform: Callable | None = None, chunk_size: int | None = None):
    """The rows after the first ``skip`` of ``source``, transformed chunk by chunk, as data for ``accumulate``.

    For dask arrays the rows stay on the workers (sliced dask arrays, the transform applied per block), so
    the statistics pass runs on the cluster; numpy arrays and memory maps without a transform are sliced
    (views: each chunk is validated once and never copied by the pass); other sources are read through
    :class:`Tail`. Pass ``chunk_size`` to ``accumulate`` too (it reads sliced arrays).
    """
    if (transform is None and source.kind in ("arrays", "memmap") and isinstance(source.X, np.ndarray)
            and isinstance(source.Y, np.ndarray)):
        return ArraySource(source.X[skip:], source.Y[skip:], row_offset=skip + getattr(source, "row_offset", 0))
    if not getattr(source, "is_dask", False):
        return Tail(source, skip, transform, chunk_size)
    import dask  # deferred: dask is only needed for dask sources
    import dask.array as da  # deferred: dask is needed only for dask sources

    X, Y = source.X[skip:], source.Y[skip:]
    if Y.ndim == 1:
        Y = Y[:, None]
    if transform is None:
        return X, Y
    px, py = transform(np.zeros((1, X.shape[1])), np.zeros((1, Y.shape[1])))  # output widths
    xs, ys = [], []
    for xb, yb, rows in zip(X.to_delayed().ravel(), Y.to_delayed().ravel(), X.chunks[0]):
        pair = dask.delayed(transform, nout=2, pure=True)(xb, yb)
        xs.append(da.from_delayed(pair[0], (rows, px.shape[1]), dtype=np.float64))
        ys.append(da.from_delayed(pair[1], (rows, py.shape[1]), dtype=np.float64))
    return da.concatenate(xs), da.concatenate(ys)


class FirstOutputs:
    """Re-iterable view of a stream of ``(X, Y)`` chunks keeping the first ``m`` target columns."""

    def __init__(self, stream, m: int):
        self.stream, self.m = stream, m
        self.n_samples = getattr(stream, "n_samples", None)

    def __iter__(self):
        for X, Y in self.stream:
            Y2 = np.asarray(Y).reshape(len(Y), -1)[:, : self.m]
            yield X, (Y2[:, 0] if self.m == 1 else Y2)

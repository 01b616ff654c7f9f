"""Data sources and the pass driver: arrays, memory maps, chunk streams and dask arrays, read once each.

Every learner accepts its samples in one of these forms; :func:`accumulate` reads them in one pass
and feeds streaming statistics (:class:`nnrecover.moments.Statistic`: ``update`` / ``merge`` /
``finalize``). This package knows nothing about what a statistic computes (it calls those methods and
imports nothing from :mod:`nnrecover.moments`), and :mod:`nnrecover.moments` nothing about where rows
come from:

==========================================  ===========  ==========================================
``fit`` / ``accumulate`` argument            kind         how it is read
==========================================  ===========  ==========================================
``X, Y`` numpy arrays (``Y`` may be None)    "arrays"     row slices of ``chunk_size`` rows (views)
``np.memmap`` / ``np.load(mmap_mode="r")``   "memmap"     row slices: only one chunk is read at a time
path to a ``.npy`` file (X and/or Y)         "memmap"     opened with ``np.load(mmap_mode="r")``
iterable of ``(X, Y)`` chunks                "iterable"   chunks as they come; re-iterable
:class:`nnrecover.SampleStream`              "stream"     chunks as they come; re-iterable
generator / iterator of ``(X, Y)`` chunks    "iterator"   chunks as they come; ONE pass only
dask arrays                                  "dask"       one task per block, tree of ``merge``
==========================================  ===========  ==========================================

Memory of a pass over a non-dask source is ``O(chunk_size * d)`` for the chunk plus the size of
the statistics, never ``O(n * d)`` (arrays are sliced, streams are consumed chunk by chunk).

Dask arrays are never iterated on the client by :func:`accumulate_dask`: the rows of ``X`` and
``Y`` are aligned (``Y`` rechunked to ``X``'s row chunks, columns in one chunk), each block pair
becomes one ``dask.delayed`` task that returns fresh statistics of that block, and the partial
results are combined by a tree of ``merge`` tasks (fan-in ``split_every``). The graph runs on the
current scheduler, so with an active ``dask.distributed.Client`` it runs on the cluster and only
the final statistics travel back to the client.

Every chunk is validated (2-D float64, finite, ``Y`` with as many rows as ``X``, the same number of
columns in every chunk) before any statistic sees it; errors name the rows or the chunk at fault.

Modules, from the bottom up: :mod:`~nnrecover.data.progress` (progress bars), :mod:`~nnrecover.data.sources`
(the sources and :func:`as_data_source`), :mod:`~nnrecover.data.views` (row and output subsets of a source),
:mod:`~nnrecover.data.checks` (coercion and magnitude checks of whole arrays), :mod:`~nnrecover.data.dask`
(the dask reduction) and :mod:`~nnrecover.data.passes` (:func:`iterate_chunks`, :func:`feed_statistics`,
:func:`accumulate`).
"""

from __future__ import annotations

from .dask import accumulate_dask, build_dask_reduction
from .passes import accumulate, feed_statistics, iterate_chunks
from .progress import (
    PROGRESS_DELAY,
    describe_statistics,
    progress_bar,
    progress_enabled,
)
from .sources import (
    DEFAULT_CHUNK_ROWS,
    ArraySource,
    DaskSource,
    DataInfo,
    DataSource,
    as_data_source,
    default_chunk_rows,
    describe_data,
    finite_chunks,
    fresh_chunks,
    iid_stream,
    known_finite,
)

__all__ = ["accumulate", "DEFAULT_CHUNK_ROWS", "DataInfo", "DataSource", "ArraySource", "DaskSource",
           "as_data_source", "describe_data", "iterate_chunks", "accumulate_dask", "build_dask_reduction",
           "default_chunk_rows", "feed_statistics", "known_finite", "fresh_chunks", "iid_stream",
           "finite_chunks", "PROGRESS_DELAY", "progress_enabled", "progress_bar", "describe_statistics"]

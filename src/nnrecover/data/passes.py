"""The pass driver: every chunk of a source fed once to a list of statistics, in worker threads."""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from .._threads import blas_threads, effective_n_jobs
from ..errors import InputError
from .dask import accumulate_dask
from .progress import describe_statistics
from .sources import ArraySource, DataSource, as_data_source, fresh_chunks

if TYPE_CHECKING:  # annotations only: the pass calls a statistic's methods, whatever its class
    from ..moments.base import Statistic


def iterate_chunks(data: Any, *, chunk_size: int | None = None, progress: bool | None = None,
                   statistics: Sequence[Statistic] | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Iterate over validated chunks ``(X, Y)`` of any data source.

    Parameters
    ----------
    data : data source
        Anything :func:`as_data_source` accepts as one argument (e.g. ``(X, Y)``, a stream).
    chunk_size : int, optional
        Rows per chunk for array sources (default :func:`default_chunk_rows`).
    progress : bool, optional
        Progress bar on stderr counting rows; ``None``: only on a terminal, after ``PROGRESS_DELAY`` s.
    statistics : sequence of Statistic, optional
        Only used to label the progress bar.

    Yields
    ------
    X : ndarray of shape (m, d), float64, finite
    Y : ndarray of shape (m, p), float64, finite (``p = 0`` when there are no targets)

    Notes
    -----
    Dask arrays are iterated block by block on the client here; :func:`nnrecover.moments.accumulate`
    does not do that (it runs :func:`accumulate_dask`).
    """
    source = as_data_source(data)
    return source.chunks(chunk_size=chunk_size, progress=progress, desc=describe_statistics(statistics))


_IN_FLIGHT_PER_WORKER = 2
"""Chunks read ahead per worker: bounds the memory of a pass to about ``2 * workers`` chunks."""


def _chunk_partial(template: Statistic, X: np.ndarray, Y: np.ndarray) -> Statistic:
    """Fresh statistic of one chunk (runs in a worker); ``template`` is never modified."""
    return template.empty_like()._add(X, Y)


def feed_statistics(statistics: Sequence[Statistic], source: DataSource, *, chunk_size: int | None = None,
                    progress: bool | None = None, n_jobs: int | None = None) -> list[Statistic]:
    """Add every chunk of a (non-dask) source to ``statistics``, with worker threads; one BLAS thread each.

    The main thread reads and validates the chunks (so one-pass iterators work) and hands them to
    ``workers = effective_n_jobs(n_jobs)`` worker threads, at most ``2 * workers`` chunks ahead:

    * a statistic with ``parallel_chunks = False`` (the default) is updated by one worker, chunk after
      chunk in order, exactly as in a sequential pass: the same arithmetic, the same bits. Several
      statistics of one pass run on different workers, and reading the next chunk (validation, the
      generation of a stream) overlaps with the updates. A single such statistic over an array
      source (nothing to overlap: its chunks are views) is updated in the calling thread;
    * a statistic with ``parallel_chunks = True`` gets one fresh partial statistic per chunk, computed
      on any worker, and the partials are merged into it in chunk order on the main thread. This
      happens for every ``n_jobs`` (also 1), so the result does not depend on the number of workers.

    BLAS is limited to one thread during the pass (:func:`nnrecover._threads.blas_threads`): the
    workers, not BLAS, use the cores, and the caller's BLAS setting is restored afterwards.

    Parameters
    ----------
    statistics : sequence of Statistic
        Updated in place.
    source : DataSource
        A non-dask source (dask sources go to :func:`accumulate_dask`).
    chunk_size : int, optional
        Rows per chunk of an array source (default :func:`default_chunk_rows`).
    progress : bool, optional
        Progress bar (see :func:`nnrecover.moments.accumulate`).
    n_jobs : int or None
        Worker threads (:func:`nnrecover._threads.effective_n_jobs`: ``None`` follows the caller's BLAS
        thread count, every core by default; ``1`` runs the pass in the calling thread).

    Returns
    -------
    list of Statistic
        ``statistics``, updated. After an exception their contents are unspecified.
    """
    stats = list(statistics)
    workers = effective_n_jobs(n_jobs)
    chunks = source.chunks(chunk_size=chunk_size, progress=progress, desc=describe_statistics(stats))
    with blas_threads(1):
        templates = {id(s): s.empty_like() for s in stats if s.parallel_chunks}
        serial = [s for s in stats if not s.parallel_chunks]
        # workers pay only when there is something to overlap: several statistics, chunk-parallel ones,
        # or chunks that cost something to produce (a stream's generation, a generator's work); the
        # chunks of an array source are views, so one statistic over arrays runs in the calling thread
        overlap = bool(templates) or len(serial) > 1 or not isinstance(source, ArraySource)
        if workers == 1 or not overlap:
            for X, Y in chunks:
                for s in stats:
                    if s.parallel_chunks:
                        s.merge(_chunk_partial(templates[id(s)], X, Y))
                    else:
                        s._add(X, Y)
            return stats
        try:
            lanes = workers if templates else min(workers, len(serial))  # serial ones: a lane each at most
            _feed_in_workers(stats, serial, templates, chunks, lanes, copy=not fresh_chunks(source))
        finally:
            chunks.close()  # closes the progress bar now, also after an error
    return stats


def _feed_in_workers(stats: list[Statistic], serial: list[Statistic], templates: dict, chunks: Iterator,
                     workers: int, *, copy: bool) -> None:
    # one single-thread executor per worker: a FIFO lane, so the updates of a serial statistic (always
    # on the same lane) run in chunk order
    lanes = [ThreadPoolExecutor(max_workers=1, thread_name_prefix="nnrecover-chunks") for _ in range(workers)]
    lane_of = {id(s): lanes[j % workers] for j, s in enumerate(serial)}
    pending: deque = deque()

    def finish(entry) -> None:
        updates, partials = entry
        for fut in updates:
            fut.result()
        for s, fut in partials:  # in chunk order: the same merges as a sequential pass of partials
            s.merge(fut.result())

    try:
        i = 0
        while True:
            try:
                item = next(chunks, None)
            except BaseException:
                while pending:  # an error of an earlier chunk comes first, as in a sequential pass
                    finish(pending.popleft())
                raise
            if item is None:
                break
            X, Y = (item[0].copy(), item[1].copy()) if copy else item
            while len(pending) >= _IN_FLIGHT_PER_WORKER * workers:
                finish(pending.popleft())
            updates, partials = [], []
            for j, s in enumerate(stats):
                if s.parallel_chunks:
                    lane = lanes[(i + j) % workers]
                    partials.append((s, lane.submit(_chunk_partial, templates[id(s)], X, Y)))
                else:
                    updates.append(lane_of[id(s)].submit(s._add, X, Y))
            pending.append((updates, partials))
            i += 1
        while pending:
            finish(pending.popleft())
    finally:
        for lane in lanes:
            lane.shutdown(wait=True, cancel_futures=True)


def _is_statistic(obj: Any) -> bool:
    """Whether ``obj`` has the methods a pass calls (:class:`nnrecover.moments.Statistic`'s contract)."""
    return all(callable(getattr(obj, name, None)) for name in ("update", "merge", "empty_like", "finalize", "_add"))


def accumulate(statistics: "Statistic | Sequence[Statistic]", data: Any, *, chunk_size: int | None = None,
               progress: bool | None = None, n_jobs: int | None = None) -> "Statistic | list[Statistic]":
    """Feed one statistic or a list of statistics with every sample of ``data`` in one pass.

    Parameters
    ----------
    statistics : Statistic or sequence of Statistic
        Updated in place (their previous contents are kept: this adds ``data`` to them).
    data : data source
        Anything :func:`nnrecover.data.as_data_source` accepts with a single argument:
        a tuple ``(X, Y)`` of arrays (numpy, ``np.memmap``, ``np.load(..., mmap_mode="r")``, dask;
        ``Y`` may be ``None``), a single array ``X`` (no targets), a path to a ``.npy`` file, an
        iterable of ``(X, Y)`` chunks (e.g. :func:`nnrecover.sample_stream`, a list, a generator),
        or a :class:`~nnrecover.data.DataSource`.
    chunk_size : int, optional
        Rows per chunk when reading arrays (default :func:`~nnrecover.data.default_chunk_rows`).
        Chunks of an iterable are used as they come. Memory is ``O(chunk_size * d)`` plus the size of
        the statistics.
    progress : bool, optional
        Show a progress bar (tqdm, counting rows) on stderr. ``None`` (default): only when stderr is
        a terminal and the pass takes more than half a second. ``False``: never.
    n_jobs : int, optional
        Worker threads of a non-dask pass (:func:`nnrecover._threads.effective_n_jobs`). ``None``
        (default): as many as BLAS threads the caller allows, every core unless the caller limited
        BLAS (``OMP_NUM_THREADS=1``, ``threadpoolctl.threadpool_limits(1)``); ``1``: the calling thread
        only; ``-1``: every core. The result is bit-identical for every ``n_jobs`` (see "Threads" in
        this module's docstring). BLAS runs on one thread during the pass; the caller's setting is
        restored afterwards.

    Returns
    -------
    Statistic or list of Statistic
        The statistic(s) passed in, updated.

    Notes
    -----
    When ``X`` is a dask array nothing is iterated on the client: every block pair ``(X_b, Y_b)``
    becomes one task computing fresh statistics, the partial results are combined by a tree of
    ``merge`` tasks, and the graph runs on the current dask scheduler (a ``dask.distributed``
    cluster when a ``Client`` is active). See :func:`nnrecover.data.accumulate_dask`.
    """
    single = _is_statistic(statistics)
    stats = [statistics] if single else list(statistics)
    if not stats or not all(_is_statistic(s) for s in stats):
        raise InputError("statistics must be a Statistic or a non-empty sequence of Statistic objects.")
    if n_jobs is not None:
        effective_n_jobs(n_jobs)  # validated before any data is read (a dask pass ignores it)
    source = as_data_source(data)
    if source.is_dask:
        accumulate_dask(stats, source, chunk_size=chunk_size, progress=progress)
    else:
        feed_statistics(stats, source, chunk_size=chunk_size, progress=progress, n_jobs=n_jobs)
    return stats[0] if single else stats

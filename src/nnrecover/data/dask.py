"""Passes over dask arrays: one task per block, a tree of ``merge`` tasks, run by the current scheduler."""

from __future__ import annotations

import sys
import uuid
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .._validation import check_positive_int
from ..errors import InputError
from .progress import describe_statistics, progress_bar
from .sources import DaskSource, DataSource, _validate_chunk

if TYPE_CHECKING:
    from ..moments.base import Statistic


def _block_statistics(templates: list[Statistic], X: Any, Y: Any, where: str) -> list[Statistic]:
    """One task: fresh statistics of one block pair (runs on a worker)."""
    Xv, Yv = _validate_chunk(X, Y, where)
    stats = [t.empty_like() for t in templates]
    for s in stats:
        s._add(Xv, Yv)
    return stats


def _empty_statistics(templates: list[Statistic]) -> list[Statistic]:
    return [t.empty_like() for t in templates]


def _merge_partials(*parts: list[Statistic]) -> list[Statistic]:
    """One task of the reduction tree: merge the partial results of consecutive blocks, in order."""
    out = [s.empty_like() for s in parts[0]]
    for part in parts:
        for acc, s in zip(out, part):
            acc.merge(s)
    return out


def _active_client(obj: Any) -> Any:
    """The dask.distributed Client that would run ``obj``, or None for a local scheduler."""
    if "distributed" not in sys.modules:
        return None
    import dask.base  # deferred: dask is needed only for dask sources
    # deferred: dask.distributed is needed only with a cluster
    from distributed import Client

    scheduler = dask.base.get_scheduler(collections=[obj])
    client = getattr(scheduler, "__self__", None)
    return client if isinstance(client, Client) else None


def build_dask_reduction(statistics: Sequence[Statistic], source: DataSource, *, split_every: int = 8):
    """The delayed graph of a dask pass (exposed for inspection and tests).

    Returns
    -------
    root : dask.delayed.Delayed
        Computes to a list of statistics (fresh, one per entry of ``statistics``) of all the data.
    leaves : list of (Delayed, int or None)
        The per-block tasks and their numbers of rows (``None`` when unknown).
    """
    from dask import delayed  # deferred: dask is needed only for dask sources

    if not isinstance(source, DaskSource):
        raise InputError("build_dask_reduction needs a data source made of dask arrays.")
    split_every = check_positive_int(split_every, "split_every", minimum=2)
    templates = [s.empty_like() for s in statistics]
    token = uuid.uuid4().hex[:12]
    rows = source.X.chunks[0]
    leaves = []
    for i, (xb, yb, where) in enumerate(source.blocks()):
        leaf = delayed(_block_statistics, pure=False)(templates, xb, yb, where,
                                                      dask_key_name=f"nnrecover-block-statistics-{token}-{i}")
        leaves.append((leaf, None if np.isnan(rows[i]) else int(rows[i])))
    level = [leaf for leaf, _ in leaves]
    depth = 0
    while len(level) > 1:
        level = [delayed(_merge_partials, pure=False)(*level[j:j + split_every],
                                                      dask_key_name=f"nnrecover-merge-statistics-{token}-{depth}-{j}")
                 for j in range(0, len(level), split_every)]
        depth += 1
    if not level:  # an empty dask array: the statistics of nothing
        level = [delayed(_empty_statistics, pure=False)(templates,
                                                        dask_key_name=f"nnrecover-empty-statistics-{token}")]
    return level[0], leaves


def accumulate_dask(statistics: Sequence[Statistic], source: DataSource, *, chunk_size: int | None = None,
                    progress: bool | None = None, split_every: int = 8) -> list[Statistic]:
    """Add a dask data source to ``statistics`` without iterating on the client.

    One ``dask.delayed`` task per row block computes fresh statistics of that block (validated on the
    worker), a tree of ``merge`` tasks with fan-in ``split_every`` combines them in block order, and
    the graph is computed with the current dask scheduler (threads by default; the cluster of an
    active ``dask.distributed.Client``). The result is merged into ``statistics`` on the client.

    Parameters
    ----------
    statistics : sequence of Statistic
        Updated in place.
    source : DataSource
        A dask source (``as_data_source(X_dask, Y_dask)``).
    chunk_size : int, optional
        Rechunk the rows to this many per block (default: keep the arrays' blocks).
    progress : bool, optional
        Progress bar counting rows as blocks finish (see :func:`nnrecover.moments.accumulate`).
    split_every : int, default 8
        Fan-in of the reduction tree.

    Returns
    -------
    list of Statistic
        ``statistics``, updated.
    """
    import dask  # deferred: dask is needed only for dask sources

    if not isinstance(source, DaskSource):
        raise InputError("accumulate_dask needs a data source made of dask arrays.")
    if chunk_size is not None:
        source = source.with_row_chunks(check_positive_int(chunk_size, "chunk_size"))
    stats = list(statistics)
    root, leaves = build_dask_reduction(stats, source, split_every=split_every)
    bar = progress_bar(source.n_samples, progress, describe_statistics(stats))
    try:
        if bar is None:
            (result,) = dask.compute(root)
        else:
            result = _compute_with_progress(root, leaves, bar)
    finally:
        if bar is not None:
            bar.close()
    for s, r in zip(stats, result):
        s.merge(r)
    return stats


def _compute_with_progress(root: Any, leaves: list, bar: Any) -> list[Statistic]:
    import dask  # deferred: dask is needed only for dask sources

    rows = {leaf.key: (n if n is not None else 0) for leaf, n in leaves}
    client = _active_client(root)
    if client is not None:
        # deferred: dask.distributed is needed only with a cluster
        from distributed import as_completed

        futures = client.compute([root] + [leaf for leaf, _ in leaves])
        root_future = futures[0]
        for fut in as_completed(futures[1:]):
            bar.update(rows.get(fut.key, 0))
        del futures
        return root_future.result()

    # deferred: dask is needed only for dask sources
    from dask.callbacks import Callback

    class _RowProgress(Callback):
        def _posttask(self, key, result, dsk, state, worker_id):  # noqa: D401 - dask hook
            if key in rows:
                bar.update(rows[key])

    with _RowProgress():
        (result,) = dask.compute(root)
    return result

"""The rows a refinement trains and validates on: a uniform subsample of any data source, and the training rows in memory.

Data. ``data`` is anything :func:`nnrecover.data.as_data_source` accepts: ``(X, Y)`` arrays
(numpy, memory maps, dask), an iterable of ``(X, Y)`` chunks (:class:`nnrecover.SampleStream`), a
one-pass iterator. :func:`gather_samples` reads it once in chunks and keeps a uniformly random subset of
at most ``max_samples`` rows (priority sampling: every row gets a uniform key from ``rng``, the rows with
the smallest keys are kept), so memory is ``O((max_samples + chunk) (d + p))`` for any ``N``. The keys
are drawn row by row in data order, so the subset does not depend on how the data are chunked. From a
:class:`~nnrecover.SampleStream`, whose rows are independent draws, the first ``max_samples`` rows are
taken instead, and only they are generated.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .._threads import blas_threads
from .._validation import check_positive_int, check_random_state
from ..data import as_data_source, iid_stream
from ..errors import InputError
from ..network import TwoLayerNetwork
from .model import _LOSS_CHUNK_ROWS, _checked_loss

#: rows :func:`refine_network` gathers by default
DEFAULT_MAX_SAMPLES = 200_000


#: ``refine_network``'s default held-out fraction of the rows it reads
_DEFAULT_HOLDOUT = 0.2


#: bytes of gathered rows :func:`refine_network` holds by default when they are copies (a source read in chunks)
GATHER_MEMORY = 1 << 29


def gather_samples(data: Any, max_samples: int = 200_000, *, rng=None, chunk_size: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray, int]:
    """A uniformly random subset of at most ``max_samples`` rows of a data source, in bounded memory.

    Priority sampling: each row gets a key ``U(0, 1)`` drawn from ``rng`` in data order; the rows with
    the ``max_samples`` smallest keys are kept (a uniform sample without replacement), returned in
    their original order. One pass; memory ``O((max_samples + chunk) (d + p))``. From a
    :class:`~nnrecover.sampling.SampleStream`, whose rows are independent draws, the first ``max_samples``
    rows (as uniform a sample, and only they are generated).

    Parameters
    ----------
    data : data source
        ``(X, Y)`` arrays (numpy, memmap, dask), an iterable of ``(X, Y)`` chunks, a one-pass
        iterator, or a :class:`nnrecover.data.DataSource`. Targets are required.
    max_samples : int, default 200_000
    rng : int, Generator or None
    chunk_size : int, optional
        Rows per chunk when reading arrays.

    Returns
    -------
    X : (m, d) array
    Y : (m, p) array (2-D)
    n_seen : int
        Rows in the data.
    """
    max_samples = check_positive_int(max_samples, "max_samples")
    gen = check_random_state(rng)
    source = as_data_source(data)
    source.require_targets("refinement")
    if source.supports_take_rows and source.n_samples is not None:
        return _gather_rows_by_keys(source, max_samples, gen)
    if source.n_samples is not None and source.info.reiterable:
        return _gather_chosen_rows(source, max_samples, gen, chunk_size)
    # chunks are collected and pruned to the max_samples smallest keys only when twice that many are
    # held: O(N) copying in all (concatenating at every chunk would copy O(N^2 / chunk) rows)
    parts: list = []
    held = 0
    threshold = np.inf  # largest kept key after a pruning: rows with larger keys can never enter
    n_cols = None
    seen = 0

    def prune(parts):
        Xr, Yr, kk, ii = (np.concatenate([part[j] for part in parts]) for j in range(4))
        if kk.size > max_samples:
            sel = np.argpartition(kk, max_samples - 1)[:max_samples]
            Xr, Yr, kk, ii = Xr[sel], Yr[sel], kk[sel], ii[sel]
        return [(Xr, Yr, kk, ii)]

    for X, Y in source.chunks(chunk_size=chunk_size, progress=False):
        if Y.shape[1] == 0:
            raise InputError("refinement needs targets Y; the data have none.")
        m = X.shape[0]
        keys = gen.random(m)
        idx = np.arange(seen, seen + m, dtype=np.int64)
        seen += m
        if n_cols is None:
            n_cols = (X.shape[1], Y.shape[1])
        elif (X.shape[1], Y.shape[1]) != n_cols:
            raise InputError("every chunk must have the same numbers of input and target columns.")
        if np.isfinite(threshold):
            sel = keys < threshold
            if not np.any(sel):
                continue
            X, Y, keys, idx = X[sel], Y[sel], keys[sel], idx[sel]
        parts.append((np.array(X), np.array(Y), keys, idx))
        held += keys.size
        if held > 2 * max_samples:
            parts = prune(parts)
            held = parts[0][2].size
            threshold = parts[0][2].max()
    if not parts:
        raise InputError("the data are empty: refinement needs samples (X, Y).")
    Xr, Yr, keep_key, keep_idx = prune(parts)[0]
    if Xr.shape[0] == 0:
        raise InputError("the data are empty: refinement needs samples (X, Y).")
    order = np.argsort(keep_idx, kind="stable")
    return Xr[order], Yr[order], seen


def _gather_rows_by_keys(source, max_samples: int, gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`gather_samples` for sources that read given rows (numpy arrays, memory maps, dask arrays):
    the same keys, drawn in row order from ``gen`` (so the same rows as the chunk pass), chosen in
    blocks of at most 2^20 keys (:func:`_chosen_rows`); then only the chosen rows are read (on a dask
    cluster: gathered on the workers and sent to the client). Memory: the output and ``O(max_samples)``
    keys, instead of the chunk pass's up to ``2 max_samples`` held rows and their concatenation."""
    rows, n = _chosen_rows(source, max_samples, gen)
    X, Y = source.take_rows(rows)
    return X, Y, n


def _gather_chosen_rows(source, max_samples: int, gen: np.random.Generator, chunk_size: int | None
                        ) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`gather_samples` for a re-iterable source of known size read in chunks (a stream): the rows
    are chosen first (:func:`_chosen_rows`: the same keys, hence the same rows, as the chunk pass) and
    copied from one pass into the output, which is all the memory it takes (the chunk pass holds up to
    ``2 max_samples`` rows and their concatenation: 8.7 GB at d = 1000 for 200000 rows)."""
    rows, n = _chosen_rows(source, max_samples, gen)
    (X, Y), = _read_sorted_rows(source, [rows], n, chunk_size)
    return X, Y, n


def _read_sorted_rows(source, row_sets: list[np.ndarray], n: int, chunk_size: int | None = None
                      ) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(X, Y)`` of each sorted array of row indices in ``row_sets``, from one pass over ``source`` (which
    must give ``n`` rows). A stream of nnrecover's own (:func:`nnrecover.data.iid_stream`, which gives the
    rows it announces by construction) is read only up to the last row asked for."""
    out: list = [None] * len(row_sets)
    pos = [0] * len(row_sets)
    seen = 0
    stop_early = iid_stream(source)
    it = iter(source.chunks(chunk_size=chunk_size, progress=False))
    try:
        for Xc, Yc in it:
            if Yc.shape[1] == 0:
                raise InputError("refinement needs targets Y; the data have none.")
            m = Xc.shape[0]
            for i, rows in enumerate(row_sets):
                if out[i] is None:
                    out[i] = (np.empty((rows.size, Xc.shape[1])), np.empty((rows.size, Yc.shape[1])))
                end = int(np.searchsorted(rows, seen + m))
                if end > pos[i]:
                    at = rows[pos[i]:end] - seen
                    out[i][0][pos[i]:end], out[i][1][pos[i]:end] = Xc[at], Yc[at]
                pos[i] = end
            seen += m
            if stop_early and all(done == wanted.size for done, wanted in zip(pos, row_sets)):
                return out
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    if seen != n:
        raise InputError(f"the data source announced {n} rows but gave {seen}; it must give the same rows on "
                         "every pass.")
    return out


def _chosen_rows(source, max_samples: int, gen: np.random.Generator) -> tuple[np.ndarray, int]:
    """The sorted indices of the rows :func:`_gather_rows_by_keys` reads, and the number of rows."""
    n = int(source.n_samples)
    if n == 0:
        raise InputError("the data are empty: refinement needs samples (X, Y).")
    if iid_stream(source):
        # independent draws: the first rows are a uniform sample too, and a stream is then read only as far
        # as them (NoisyReLULearner at d = 1000, k = 50: its refinement's 64000 of 10^6 rows)
        return np.arange(min(max_samples, n), dtype=np.int64), n
    best_keys = np.empty(0)
    best_idx = np.empty(0, dtype=np.int64)
    # keys in blocks of about max_samples (the same keys for any block size: one sequence of draws), so that
    # the keys held stay O(max_samples)
    block = min(1 << 20, max(1 << 16, max_samples))
    for start in range(0, n, block):
        keys = gen.random(min(block, n - start))
        best_keys = np.concatenate([best_keys, keys])
        best_idx = np.concatenate([best_idx, np.arange(start, start + keys.size, dtype=np.int64)])
        if best_keys.size > max_samples:
            sel = np.argpartition(best_keys, max_samples - 1)[:max_samples]
            best_keys, best_idx = best_keys[sel], best_idx[sel]
    return np.sort(best_idx), n




class _TrainingRows:
    """The training rows of the span path: arrays in memory, or rows of a data source (numpy array or
    memory map) read on demand, so that on noiseless data, where the subsample stages reach round-off, only
    the subsample is ever held and the losses over all rows are chunked passes (``O(chunk d)`` memory)."""

    def __init__(self, X: np.ndarray | None = None, Y: np.ndarray | None = None, *, source=None,
                 rows: np.ndarray | None = None, network: TwoLayerNetwork | None = None):
        self.X, self.Y, self.source, self.rows, self.network = X, Y, source, rows, network
        self.n = int(X.shape[0] if X is not None else rows.size)
        self._msy: float | None = None

    def _read(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # take_rows validates every value (finite float64, Y 2-D); the columns were checked against the
        # network on the first training row (refine_network), and every row has the same columns
        return self.source.take_rows(rows)

    def _chunks(self):
        for s in range(0, self.n, _LOSS_CHUNK_ROWS):
            yield self._read(self.rows[s:s + _LOSS_CHUNK_ROWS])

    def mean_square_y(self) -> float:
        """``mean(Y * Y)`` over all rows and outputs (from the first chunked loss pass when rows are read on
        demand)."""
        if self._msy is None:
            if self.X is not None:
                self._msy = float(np.mean(self.Y * self.Y))
            else:
                self.loss(self.network)
        return self._msy

    def loss(self, network: TwoLayerNetwork) -> float:
        """:func:`mean_squared_loss` over all rows (chunk by chunk when they are read on demand)."""
        return self.losses([network])[0]

    def losses(self, networks: Sequence[TwoLayerNetwork]) -> list[float]:
        """:func:`mean_squared_loss` of several networks over all rows, from one read of the rows."""
        if self.X is not None:
            return [_checked_loss(net, self.X, self.Y) for net in networks]
        totals, yy = np.zeros(len(networks)), 0.0
        for Xc, Yc in self._chunks():
            for j, net in enumerate(networks):
                # the rows were validated by take_rows and their columns checked against the network
                F = net._forward(Xc).reshape(Yc.shape)
                totals[j] += float(np.sum((F - Yc) ** 2))
            if self._msy is None:
                yy += float(np.sum(Yc * Yc))
        if self._msy is None:
            self._msy = yy / (self.n * self.network.n_outputs)
        return [float(t) / self.n for t in totals]

    def strided(self, stride: int) -> tuple[np.ndarray, np.ndarray]:
        """Every ``stride``-th row."""
        if self.X is not None:
            return self.X[::stride], self.Y[::stride]
        return self._read(self.rows[::stride])

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """All rows in memory (read once)."""
        if self.X is None:
            self.X, self.Y = self._read(self.rows)
        return self.X, self.Y


@blas_threads(1)  # a public heavy entry point: many small products, bits independent of the thread count
def _default_max_samples(source) -> int:
    """``refine_network``'s ``max_samples=None``: ``DEFAULT_MAX_SAMPLES``, and for a source read in chunks
    at most the rows that fit ``GATHER_MEMORY``."""
    max_samples = DEFAULT_MAX_SAMPLES
    width = (source.n_inputs or 0) + (source.n_outputs or 0)
    if not source.supports_take_rows and width:
        max_samples = max(1, min(max_samples, GATHER_MEMORY // (8 * width)))
    return max_samples

"""Drawing labelled samples from a teacher network, in memory or as a bounded-memory stream.

Data are generated in fixed blocks of ``block_rows(d, p)`` rows (``BLOCK_ROWS = 65536`` unless a block
would hold more than ``BLOCK_VALUES`` floats, 64 MiB), block ``j`` from its own random stream
(``SeedSequence(entropy, spawn_key=(j,))``). ``sample`` concatenates the blocks and ``sample_stream``
re-slices them into chunks, so for the same seed every chunk size gives the same rows, and
``sample(...)`` equals the concatenated stream. Within a block, ``X`` is drawn first and the label noise
after it, so ``X`` does not depend on ``noise`` and ``Y`` depends on it linearly (same seed).

Memory of a stream: one block and one chunk at a time, ``O((block_rows + chunk_size) (d + p))`` floats,
at most 64 MiB per block by default, whatever ``n``; with several cores the next blocks' random numbers
are drawn ahead in worker threads (at most ``STREAM_WORKERS`` blocks more), with the same values.
"""

from __future__ import annotations

import itertools
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import numpy as np

from ._memory import free_memory
from ._threads import effective_n_jobs
from ._validation import all_finite, check_positive_int, check_random_state, check_real
from .distributions import Distribution
from .errors import InputError
from .network import TwoLayerNetwork

__all__ = ["sample", "sample_stream", "SampleStream", "BLOCK_ROWS", "BLOCK_VALUES", "block_rows"]

#: rows of one generated block (fewer when a block would exceed BLOCK_VALUES)
BLOCK_ROWS = 1 << 16
#: floats of one generated block at most (64 MiB): at d = 1000, 65536 rows would be 0.5 GB per block,
#: and a pass reading ahead holds several
BLOCK_VALUES = 1 << 23
#: worker threads drawing blocks ahead at most (each holds one block; fewer on fewer cores, one under
#: threadpool_limits(1), see nnrecover._threads.effective_n_jobs)
STREAM_WORKERS = 2


def block_rows(n_inputs: int, n_outputs: int) -> int:
    """Rows per generated block for ``d`` inputs and ``p`` outputs: ``BLOCK_ROWS``, or the even number
    of rows that keeps a block within ``BLOCK_VALUES`` floats (at least 1024)."""
    rows = BLOCK_VALUES // max(int(n_inputs) + int(n_outputs), 1)
    return int(max(1024, min(BLOCK_ROWS, rows - rows % 2)))


def _check(network, distribution, noise):
    if not isinstance(network, TwoLayerNetwork):
        raise InputError(f"network must be a TwoLayerNetwork, got {type(network).__name__}.")
    if not isinstance(distribution, Distribution):
        raise InputError(f"distribution must be an nnrecover distribution, got {type(distribution).__name__}.")
    if distribution.dim != network.n_inputs:
        raise InputError(f"distribution has dim {distribution.dim} but the network has "
                         f"{network.n_inputs} inputs.")
    return check_real(noise, "noise", minimum=0, meaning="the label-noise standard deviation")


class SampleStream:
    """A re-iterable stream of ``(X, Y)`` chunks drawn from a teacher.

    Iterating twice yields the same data (multi-pass algorithms rely on it). ``len()`` is the number
    of chunks; ``n_samples``, ``n_inputs`` and ``n_outputs`` describe the whole stream. Every chunk has
    ``chunk_size`` rows except possibly the last. Memory at any time is
    O((block_rows + chunk_size) * (d + p)) (:func:`block_rows`): the block in use and, with several
    cores, up to ``STREAM_WORKERS`` blocks whose random numbers are drawn ahead in worker threads (the
    same values as one thread). Build it with :func:`sample_stream`.

    Chunks may be views into an internal block: they stay valid, but writing into one writes into
    nothing else the stream will yield.
    """

    def __init__(self, network, distribution, n, chunk_size, noise, entropy, antithetic, start=0):
        self.network, self.distribution = network, distribution
        self.chunk_size, self.noise = chunk_size, noise
        self.entropy, self.antithetic = entropy, antithetic
        self.n_inputs = network.n_inputs
        self.n_outputs = network.n_outputs
        self.block_rows = block_rows(self.n_inputs, self.n_outputs)
        # rows [start, start + n_samples) of the generating sequence (rows_from)
        self._start, self._end = int(start), int(start) + int(n)
        self.n_samples = int(n)

    def __len__(self) -> int:
        return -(-self._end // self.chunk_size) - self._start // self.chunk_size

    def rows_from(self, start: int) -> "SampleStream":
        """The same stream without its first ``start`` rows (its rows ``start, ..., n - 1``, same values).

        Blocks before the one holding row ``start`` are not generated: a pass over the tail of a stream
        costs only its own rows. Its chunks follow the whole stream's chunk grid, so the first one can
        be shorter than ``chunk_size``.
        """
        start = check_positive_int(start, "start", minimum=0)
        if start > self.n_samples:
            raise InputError(f"start={start} is beyond the stream's {self.n_samples} rows.")
        if self.antithetic and start % 2:
            raise InputError(f"an antithetic stream emits pairs (x, -x): start must be even, got {start}.")
        return SampleStream(self.network, self.distribution, self.n_samples - start, self.chunk_size, self.noise,
                            self.entropy, self.antithetic, start=self._start + start)

    def _draw(self, j: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The inputs of block ``j`` and its label noise (``None`` without noise), from the block's own
        generator: blocks share no state, so several can be drawn at once in any order."""
        rows = min(self.block_rows, self._end - j * self.block_rows)
        gen = np.random.default_rng(np.random.SeedSequence(self.entropy, spawn_key=(j,)))
        # a block is drawn whole even when only rows[first:] are wanted: its random stream fixes its rows
        X = np.asarray(self.distribution.sample(rows, gen, antithetic=self.antithetic), dtype=np.float64)
        noise = None
        if self.noise > 0:  # drawn after X from the same generator (the teacher's outputs draw nothing)
            noise = gen.standard_normal(rows if self.network.n_outputs == 1 else (rows, self.network.n_outputs))
        return X, noise

    def _draws(self, blocks: range) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        """:meth:`_draw` of ``blocks`` in order. With more than one core the draws run ahead in worker
        threads (the generators release the GIL), at most ``workers`` blocks ahead: the random numbers are
        most of a stream's cost, and each block's come from its own generator, so the values are the same
        for any number of workers."""

        # (one block, the common case of small samples, needs no worker and not the thread-count query)
        workers = 1 if len(blocks) <= 1 else min(effective_n_jobs(None), STREAM_WORKERS, len(blocks))
        if workers <= 1:
            yield from map(self._draw, blocks)
            return
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nnrecover-stream")
        ahead: deque = deque()
        it = iter(blocks)
        try:
            for j in itertools.islice(it, workers):
                ahead.append(pool.submit(self._draw, j))
            while ahead:
                yield ahead.popleft().result()
                # the next draw starts once the consumer is done with this block: at most `workers` blocks
                # are drawn while it waits, and `workers - 1` while it works
                j = next(it, None)
                if j is not None:
                    ahead.append(pool.submit(self._draw, j))
        finally:
            # also when the consumer stops early (a prefix of the stream): drop the draws not started
            for fut in ahead:
                fut.cancel()
            pool.shutdown(wait=True)

    def _blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        size = self.block_rows
        blocks = range(self._start // size, -(-self._end // size))
        for j, (X, noise) in zip(blocks, self._draws(blocks)):
            first = max(self._start - j * size, 0)
            with np.errstate(over="ignore", invalid="ignore"):
                # the teacher labels the whole block (its products round alike only on the same rows); the
                # rows are checked below with its outputs, so predict's own check is skipped
                Y = self.network._forward(X)
                if self.network.n_outputs == 1:
                    Y = Y[:, 0]
                if noise is not None:
                    Y = Y + self.noise * noise
            if first:
                X, Y = X[first:], Y[first:]
            if not (all_finite(X) and all_finite(Y)):
                raise InputError(
                    f"the samples overflow float64: {'X' if not all_finite(X) else 'Y'} has non-finite "
                    f"values in block {j} (teacher {self.network!r}, noise={self.noise:g}, input law "
                    f"{self.distribution!r}); lower the teacher's weights, biases or activation exponent, the noise "
                    "or the input scale.")
            yield X, Y

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        # Chunks inside one block are slices of it; only a chunk straddling blocks is assembled by
        # concatenation. Every row is touched O(1) times whatever chunk_size is.
        size = self.chunk_size
        pending: list[tuple[np.ndarray, np.ndarray]] = []
        # a tail (rows_from) keeps the chunk grid of the whole stream: its first chunk ends where the
        # stream's chunk would, so with the default chunk size every chunk is one block (no concatenation)
        have = self._start % size
        for X, Y in self._blocks():
            rows, start = X.shape[0], 0
            if have:  # complete the chunk started in earlier blocks
                take = min(size - have, rows)
                pending.append((X[:take], Y[:take]))
                have += take
                start = take
                if have == size:
                    yield self._join(pending)
                    pending, have = [], 0
            while rows - start >= size:
                yield X[start:start + size], Y[start:start + size]
                start += size
            if start < rows:
                pending.append((X[start:], Y[start:]))
                have += rows - start
        if pending:
            yield self._join(pending)

    @staticmethod
    def _join(parts):
        if len(parts) == 1:
            return parts[0]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Materialise the whole stream: ``X`` (n, d) and ``Y`` ((n,) or (n, p)); O(n (d + p)) memory.

        Raises :class:`InputError` before allocating when the arrays exceed the available physical
        memory (stream them with :func:`sample_stream` instead).
        """

        n = self.n_samples
        need = 8 * n * (self.n_inputs + self.n_outputs)
        avail = free_memory()
        if avail is not None and need > avail:
            raise InputError(f"sample(n={n}) needs {need / 2**30:.3g} GiB for X ({n} x {self.n_inputs}) and Y "
                             f"({n} x {self.n_outputs}) but {avail / 2**30:.3g} GiB of memory is available; lower n "
                             "or use sample_stream, which holds one chunk at a time.")
        X = np.empty((n, self.n_inputs))
        Y = np.empty((n,) if self.n_outputs == 1 else (n, self.n_outputs))
        start = 0
        for Xb, Yb in self._blocks():
            X[start:start + Xb.shape[0]] = Xb
            Y[start:start + Xb.shape[0]] = Yb
            start += Xb.shape[0]
        return X, Y

    def __repr__(self) -> str:
        return (f"SampleStream(n_samples={self.n_samples}, n_inputs={self.n_inputs}, "
                f"chunk_size={self.chunk_size}, noise={self.noise})")


def _make_stream(network, distribution, n, chunk_size, noise, rng, antithetic) -> SampleStream:
    noise = _check(network, distribution, noise)
    n = check_positive_int(n, "n")
    chunk_size = (block_rows(network.n_inputs, network.n_outputs) if chunk_size is None
                  else check_positive_int(chunk_size, "chunk_size"))
    if antithetic and (n % 2 or chunk_size % 2):
        raise InputError(f"antithetic sampling emits pairs (x, -x): n and chunk_size must be even, got "
                         f"n={n}, chunk_size={chunk_size}.")
    if antithetic and not distribution.is_symmetric:
        raise InputError(f"antithetic sampling emits pairs (x, -x), which needs a symmetric distribution; "
                         f"{distribution!r} is not symmetric. Use antithetic=False.")
    gen = check_random_state(rng)
    entropy = [int(v) for v in gen.integers(0, 2**63, size=2)]
    return SampleStream(network, distribution, n, chunk_size, noise, entropy, bool(antithetic))


def sample(network: TwoLayerNetwork, distribution: Distribution, n: int, *, noise: float = 0.0,
           rng=None, antithetic: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n`` labelled samples ``Y = network(X) + noise * N(0, 1)``, ``X ~ distribution``.

    Parameters
    ----------
    network : TwoLayerNetwork
        The teacher.
    distribution : Distribution
        Input law, ``distribution.dim == network.n_inputs``.
    n : int
        Number of samples, ``>= 1``.
    noise : float, default 0
        Standard deviation of i.i.d. Gaussian label noise (added to every output).
    rng : None, int or numpy.random.Generator
        Same seed, same data, bit for bit. A Generator is advanced by two draws.
    antithetic : bool, default False
        Rows in adjacent pairs ``(x, -x)`` (needs even ``n`` and a symmetric distribution); the noise
        of the two rows of a pair is independent.

    Returns
    -------
    X : (n, d) array
    Y : (n,) array for one output, else (n, p)

    Notes
    -----
    Identical to concatenating :func:`sample_stream` with the same arguments, for any chunk size.
    """
    return _make_stream(network, distribution, n, None, noise, rng, antithetic).to_arrays()


def sample_stream(network: TwoLayerNetwork, distribution: Distribution, n: int, *,
                  chunk_size: int | None = None, noise: float = 0.0, rng=None,
                  antithetic: bool = False) -> SampleStream:
    """The same samples as :func:`sample`, as a re-iterable stream of ``(X, Y)`` chunks.

    Parameters
    ----------
    network, distribution, n, noise, rng, antithetic
        As in :func:`sample`.
    chunk_size : int, optional
        Rows per chunk (the last chunk may be shorter); even when ``antithetic``, so that pairs stay
        within a chunk. The rows do not depend on it. Default: the rows of one generated block,
        :func:`block_rows` (65536 rows up to ``d + p = 128``, 64 MiB per chunk beyond).

    Returns
    -------
    SampleStream
        Iterable (any number of times, same data each time) of ``(X, Y)`` chunks, ``len()`` chunks,
        memory bounded by ``O((block_rows + chunk_size) (d + p))`` whatever ``n``.
    """
    return _make_stream(network, distribution, n, chunk_size, noise, rng, antithetic)

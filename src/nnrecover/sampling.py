"""Drawing labelled samples from a teacher network, in memory or as a bounded-memory stream.

Data are generated in fixed blocks of ``BLOCK_ROWS`` rows, block ``j`` from its own random stream
(``SeedSequence(entropy, spawn_key=(j,))``). ``sample`` concatenates the blocks and ``sample_stream``
re-slices them into chunks, so for the same seed every chunk size gives the same rows, and
``sample(...)`` equals the concatenated stream.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ._validation import check_positive_int, check_random_state
from .distributions import Distribution
from .errors import InputError
from .network import TwoLayerNetwork

__all__ = ["sample", "sample_stream", "SampleStream", "BLOCK_ROWS"]

BLOCK_ROWS = 1 << 16


def _check(network, distribution, noise):
    if not isinstance(network, TwoLayerNetwork):
        raise InputError(f"network must be a TwoLayerNetwork, got {type(network).__name__}.")
    if not isinstance(distribution, Distribution):
        raise InputError(f"distribution must be an nnrecover distribution, got {type(distribution).__name__}.")
    if distribution.dim != network.n_inputs:
        raise InputError(f"distribution has dim {distribution.dim} but the network has "
                         f"{network.n_inputs} inputs.")
    noise = float(noise)
    if not (np.isfinite(noise) and noise >= 0):
        raise InputError(f"noise is the label-noise standard deviation and must be >= 0, got {noise}.")
    return noise


class SampleStream:
    """A re-iterable stream of ``(X, Y)`` chunks drawn from a teacher.

    Iterating twice yields the same data (multi-pass algorithms rely on it). ``len()`` is the number
    of chunks; ``n_samples`` and ``n_inputs`` describe the whole stream. Memory at any time is
    O((BLOCK_ROWS + chunk_size) * d).
    """

    def __init__(self, network, distribution, n, chunk_size, noise, entropy, antithetic):
        self.network, self.distribution = network, distribution
        self.n_samples, self.chunk_size, self.noise = n, chunk_size, noise
        self.entropy, self.antithetic = entropy, antithetic
        self.n_inputs = network.n_inputs

    def __len__(self) -> int:
        return -(-self.n_samples // self.chunk_size)

    def _blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        n_blocks = -(-self.n_samples // BLOCK_ROWS)
        for j in range(n_blocks):
            rows = min(BLOCK_ROWS, self.n_samples - j * BLOCK_ROWS)
            gen = np.random.default_rng(np.random.SeedSequence(self.entropy, spawn_key=(j,)))
            X = self.distribution.sample(rows, gen, antithetic=self.antithetic)
            Y = self.network.predict(X)
            if self.noise > 0:
                Y = Y + self.noise * gen.standard_normal(Y.shape)
            yield X, Y

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        bufX: list[np.ndarray] = []
        bufY: list[np.ndarray] = []
        have = 0
        for X, Y in self._blocks():
            bufX.append(X)
            bufY.append(Y)
            have += X.shape[0]
            while have >= self.chunk_size:
                Xc, Yc = np.concatenate(bufX), np.concatenate(bufY)
                yield Xc[: self.chunk_size], Yc[: self.chunk_size]
                bufX, bufY = [Xc[self.chunk_size:]], [Yc[self.chunk_size:]]
                have -= self.chunk_size
        if have:
            yield np.concatenate(bufX), np.concatenate(bufY)

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Materialise the whole stream (O(n d) memory)."""
        parts = list(self._blocks())
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def __repr__(self) -> str:
        return (f"SampleStream(n_samples={self.n_samples}, n_inputs={self.n_inputs}, "
                f"chunk_size={self.chunk_size}, noise={self.noise})")


def _make_stream(network, distribution, n, chunk_size, noise, rng, antithetic) -> SampleStream:
    noise = _check(network, distribution, noise)
    n = check_positive_int(n, "n")
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    if antithetic and (n % 2 or chunk_size % 2):
        raise InputError("antithetic sampling emits pairs (x, -x): n and chunk_size must be even.")
    gen = check_random_state(rng)
    entropy = [int(v) for v in gen.integers(0, 2**63, size=2)]
    return SampleStream(network, distribution, n, chunk_size, noise, entropy, bool(antithetic))


def sample(network: TwoLayerNetwork, distribution: Distribution, n: int, *, noise: float = 0.0,
           rng=None, antithetic: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n`` labelled samples ``Y = network(X) + noise * N(0, 1)``.

    Returns
    -------
    X : (n, d) array
    Y : (n,) array for one output, else (n, p)
    """
    return _make_stream(network, distribution, n, BLOCK_ROWS, noise, rng, antithetic).to_arrays()


def sample_stream(network: TwoLayerNetwork, distribution: Distribution, n: int, *,
                  chunk_size: int = BLOCK_ROWS, noise: float = 0.0, rng=None,
                  antithetic: bool = False) -> SampleStream:
    """The same samples as :func:`sample`, as a re-iterable stream of ``(X, Y)`` chunks."""
    return _make_stream(network, distribution, n, chunk_size, noise, rng, antithetic)

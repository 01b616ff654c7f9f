"""Tests of sample / sample_stream (src/nnrecover/sampling.py): chunk-size invariance, re-iterability,
label noise, antithetic pairs, validation and bounded memory."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnrecover as nr
from nnrecover.distributions import Gaussian, StandardGaussian, SymmetricMixture
from nnrecover.errors import InputError
from nnrecover.sampling import BLOCK_ROWS, SampleStream

N = BLOCK_ROWS + 4465  # 70001 rows: crosses a block boundary, odd, and small enough to stay fast


@pytest.fixture(scope="module")
def teacher():
    return nr.random_network(3, 2, 2, rng=0, bias_range=(-0.5, 0.5), output_bias_range=(-1, 1))


@pytest.fixture(scope="module")
def reference(teacher):
    return nr.sample(teacher, StandardGaussian(3), N, noise=0.1, rng=42)


def _concat(stream):
    parts = list(stream)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), parts


@pytest.mark.parametrize("chunk_size", [1, 7, BLOCK_ROWS, 100_001])
def test_every_chunk_size_gives_the_same_rows(teacher, reference, chunk_size):
    stream = nr.sample_stream(teacher, StandardGaussian(3), N, chunk_size=chunk_size, noise=0.1, rng=42)
    assert isinstance(stream, SampleStream)
    X, Y, parts = _concat(stream)
    assert np.array_equal(X, reference[0]) and np.array_equal(Y, reference[1])
    assert len(stream) == len(parts) == math.ceil(N / chunk_size)
    assert all(p[0].shape[0] == chunk_size for p in parts[:-1])
    assert parts[-1][0].shape[0] == N - (len(parts) - 1) * chunk_size
    assert all(p[0].shape[0] == p[1].shape[0] for p in parts)


@settings(max_examples=25)
@given(n=st.integers(1, 3 * 1024), chunk=st.integers(1, 5000), seed=st.integers(0, 2**32 - 1))
def test_stream_equals_sample_property(n, chunk, seed):
    # small blocks would be ideal here; BLOCK_ROWS is fixed, so n stays below one block and the
    # block-crossing case is covered by test_every_chunk_size_gives_the_same_rows
    net = nr.random_network(2, 3, rng=1)
    dist = StandardGaussian(2)
    X, Y, _ = _concat(nr.sample_stream(net, dist, n, chunk_size=chunk, rng=seed, noise=0.5))
    Xs, Ys = nr.sample(net, dist, n, rng=seed, noise=0.5)
    assert np.array_equal(X, Xs) and np.array_equal(Y, Ys)


def test_shapes_and_labels(teacher):
    dist = StandardGaussian(3)
    X, Y = nr.sample(teacher, dist, 500, rng=1)
    assert X.shape == (500, 3) and Y.shape == (500, 2) and X.dtype == Y.dtype == np.float64
    assert np.array_equal(Y, teacher.predict(X))  # noise = 0: labels are exactly the teacher's
    single = nr.random_network(3, 2, rng=0)
    X1, Y1 = nr.sample(single, dist, 10, rng=1)
    assert Y1.shape == (10,) and np.array_equal(Y1, single.predict(X1))
    for Xc, Yc in nr.sample_stream(single, dist, 10, chunk_size=4, rng=1):
        assert Yc.shape == (Xc.shape[0],)


def test_stream_is_re_iterable(teacher):
    stream = nr.sample_stream(teacher, StandardGaussian(3), 1000, chunk_size=300, rng=5)
    first = [(x.copy(), y.copy()) for x, y in stream]
    second = list(stream)
    assert len(first) == len(second) == 4
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(first, second))
    assert (stream.n_samples, stream.n_inputs, stream.n_outputs, stream.chunk_size) == (1000, 3, 2, 300)
    assert "n_samples=1000" in repr(stream)
    X, Y = stream.to_arrays()
    assert np.array_equal(X, np.concatenate([a[0] for a in first]))


def test_seeds(teacher):
    dist = StandardGaussian(3)
    a = nr.sample(teacher, dist, 100, rng=3)
    assert np.array_equal(a[0], nr.sample(teacher, dist, 100, rng=3)[0])
    assert np.array_equal(a[0], nr.sample(teacher, dist, 100, rng=np.random.default_rng(3))[0])
    assert not np.array_equal(a[0], nr.sample(teacher, dist, 100, rng=4)[0])
    gen = np.random.default_rng(0)
    assert not np.array_equal(nr.sample(teacher, dist, 100, rng=gen)[0], nr.sample(teacher, dist, 100, rng=gen)[0])


def test_label_noise(teacher):
    dist = StandardGaussian(3)
    n = 40_000
    X0, Y0 = nr.sample(teacher, dist, n, rng=9)
    X1, Y1 = nr.sample(teacher, dist, n, noise=0.3, rng=9)
    X2, Y2 = nr.sample(teacher, dist, n, noise=1.2, rng=9)
    # X does not depend on the noise level, and the noise is linear in it (same seed)
    assert np.array_equal(X0, X1) and np.array_equal(X0, X2)
    e1, e2 = (Y1 - Y0) / 0.3, (Y2 - Y0) / 1.2
    assert np.allclose(e1, e2, rtol=0, atol=1e-12)
    # e1 ~ N(0, 1) i.i.d. over rows and outputs: mean z-score, and the sample variance s^2 has
    # sd sqrt(2 / n) around 1 (Gaussian fourth moment); |z| < 6 for each of the two outputs
    z_mean = e1.mean(axis=0) * math.sqrt(n)
    z_var = (e1.var(axis=0, ddof=1) - 1.0) / math.sqrt(2.0 / n)
    assert np.all(np.abs(z_mean) < 6) and np.all(np.abs(z_var) < 6), (z_mean, z_var)
    # independent across outputs: correlation ~ N(0, 1/n)
    assert abs(np.corrcoef(e1.T)[0, 1]) * math.sqrt(n) < 6


def test_antithetic_sampling(teacher):
    dist = SymmetricMixture(np.ones((1, 3)))
    X, Y = nr.sample(teacher, dist, 1000, rng=2, antithetic=True)
    assert np.array_equal(X[1::2], -X[0::2])
    assert np.array_equal(Y, teacher.predict(X))
    Xs, Ys, parts = _concat(nr.sample_stream(teacher, dist, 1000, chunk_size=64, rng=2, antithetic=True))
    assert np.array_equal(Xs, X) and np.array_equal(Ys, Y)
    assert all(np.array_equal(p[0][1::2], -p[0][0::2]) for p in parts)  # pairs never split across chunks
    # across a block boundary too
    Xb, _ = nr.sample(teacher, StandardGaussian(3), BLOCK_ROWS + 2, rng=1, antithetic=True)
    assert np.array_equal(Xb[1::2], -Xb[0::2])
    # noise is independent within a pair
    _, Yn = nr.sample(teacher, dist, 1000, rng=2, antithetic=True, noise=1.0)
    assert not np.array_equal((Yn - Y)[0::2], -(Yn - Y)[1::2])


def test_antithetic_errors(teacher):
    dist = StandardGaussian(3)
    with pytest.raises(InputError, match="must be even"):
        nr.sample(teacher, dist, 1001, rng=0, antithetic=True)
    with pytest.raises(InputError, match="must be even"):
        nr.sample_stream(teacher, dist, 1000, chunk_size=7, rng=0, antithetic=True)
    with pytest.raises(InputError, match="symmetric"):
        nr.sample(teacher, Gaussian(np.eye(3), mean=np.ones(3)), 10, rng=0, antithetic=True)


@pytest.mark.parametrize("call, match", [
    (lambda t: nr.sample("net", StandardGaussian(3), 10), "network must be a TwoLayerNetwork"),
    (lambda t: nr.sample(t, np.eye(3), 10), "distribution must be an nnrecover distribution"),
    (lambda t: nr.sample(t, StandardGaussian(4), 10), "dim 4"),
    (lambda t: nr.sample(t, StandardGaussian(3), 0), "n must be >= 1"),
    (lambda t: nr.sample(t, StandardGaussian(3), 10.0), "n must be an integer"),
    (lambda t: nr.sample(t, StandardGaussian(3), 10, noise=-1.0), "noise"),
    (lambda t: nr.sample(t, StandardGaussian(3), 10, noise=np.nan), "noise"),
    (lambda t: nr.sample(t, StandardGaussian(3), 10, noise="loud"), "noise"),
    (lambda t: nr.sample(t, StandardGaussian(3), 10, rng=-3), "random_state"),
    (lambda t: nr.sample_stream(t, StandardGaussian(3), 10, chunk_size=0), "chunk_size must be >= 1"),
    (lambda t: nr.sample_stream(t, StandardGaussian(3), 10, chunk_size=2.5), "chunk_size must be an integer"),
])
def test_validation(teacher, call, match):
    with pytest.raises(InputError, match=match):
        call(teacher)


def test_stream_memory_is_bounded():
    """n = 10^6, d = 20: the whole X is 160 MB; the stream holds a few blocks at a time: the consumer's,
    the one being labelled (with temporaries of about half a block) and up to STREAM_WORKERS drawn ahead."""
    from nnrecover.sampling import STREAM_WORKERS

    net = nr.random_network(20, 4, rng=0)
    stream = nr.sample_stream(net, StandardGaussian(20), 1_000_000, rng=1)
    tracemalloc.start()
    try:
        rows, total = 0, 0.0
        for X, Y in stream:
            rows += X.shape[0]
            total += float(Y.sum())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rows == 1_000_000 and np.isfinite(total)
    # one block is BLOCK_ROWS * 20 * 8 B = 10.5 MB; measured 4.7 blocks (49.8 MB) with two workers, against
    # 160 MB for the whole X
    assert peak < (STREAM_WORKERS + 4) * BLOCK_ROWS * 20 * 8, f"peak {peak / 1e6:.1f} MB"


def test_sample_memory_is_about_one_copy():
    from nnrecover.sampling import STREAM_WORKERS

    net = nr.random_network(20, 4, rng=0)
    n = 400_000
    tracemalloc.start()
    try:
        X, Y = nr.sample(net, StandardGaussian(20), n, rng=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    out = X.nbytes + Y.nbytes  # 67.2 MB
    # preallocated output, the block being copied in and the one before it (still referenced while the
    # next is awaited), up to STREAM_WORKERS blocks drawn ahead (BLOCK_ROWS x 20 x 8 B = 10.5 MB each)
    # and the labelling's temporaries (about half a block): measured 50 MB, not a second copy of X and Y
    block = BLOCK_ROWS * 20 * 8
    assert peak < out + (STREAM_WORKERS + 3) * block, f"peak {peak / 1e6:.1f} MB for {out / 1e6:.1f} MB of output"


def test_blocks_drawn_ahead_in_threads_are_the_blocks_drawn_in_order(monkeypatch):
    # several blocks (d = 300: 27 000 rows per block), label noise and antithetic pairs; the draws of
    # worker threads must give the same bits as one thread, also for a tail and when stopped early
    import nnrecover.sampling as sampling

    net = nr.random_network(300, 3, 2, rng=4)
    streams = lambda: [nr.sample_stream(net, StandardGaussian(300), 100_000, noise=0.1, rng=5),  # noqa: E731
                       nr.sample_stream(net, StandardGaussian(300), 90_000, rng=6, antithetic=True).rows_from(30_002)]
    runs = {}
    for workers in (1, 3):
        monkeypatch.setattr(sampling, "STREAM_WORKERS", workers)
        monkeypatch.setattr(sampling, "effective_n_jobs", lambda n_jobs=None: workers)
        runs[workers] = [[(X.copy(), Y.copy()) for X, Y in s] for s in streams()]
        for s in streams():  # a prefix: stop after the first chunk, with draws still pending
            it = iter(s)
            next(it)
            it.close()
    assert streams()[0].block_rows < 100_000 // 3
    for one, many in zip(runs[1], runs[3]):
        assert len(one) == len(many)
        for (X1, Y1), (X3, Y3) in zip(one, many):
            np.testing.assert_array_equal(X1, X3)
            np.testing.assert_array_equal(Y1, Y3)


def test_an_overflow_in_a_block_drawn_ahead_is_reported(monkeypatch):
    import nnrecover.sampling as sampling

    monkeypatch.setattr(sampling, "effective_n_jobs", lambda n_jobs=None: 2)
    net = nr.TwoLayerNetwork(np.eye(2), np.zeros(2), np.array([[1e308, 1e308]]), np.zeros(1))
    stream = nr.sample_stream(net, StandardGaussian(2), 3 * BLOCK_ROWS, rng=2)
    with pytest.raises(InputError, match="overflow float64"):
        list(stream)

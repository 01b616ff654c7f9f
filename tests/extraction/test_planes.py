"""Tests of the hyperplane refit through located critical points (nnrecover.extraction.planes): the
anchors and their stencils generated chunk by chunk give the same bits as all at once, in bounded memory."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.extraction import planes, queries
from nnrecover.extraction.planes import _anchors_and_kinks, _located, refine_hyperplanes
from nnrecover.extraction.queries import NoiseModel, QueryOracle

FIELDS = ("W", "b", "alpha", "accepted", "n_points", "residual", "tilt")


class _Recorder:
    def __init__(self, f):
        self.f, self.batches = f, []

    def __call__(self, X):
        self.batches.append(X.copy())
        return self.f(X)


def _refit(monkeypatch, net, chunk, centers, seed=0, m=None):
    d, u = net.n_inputs, net.n_hidden
    rng = np.random.default_rng(seed)
    norms = np.linalg.norm(net.hidden_weights, axis=1)
    W = net.hidden_weights / norms[:, None] + 1e-3 * rng.standard_normal((u, d))     # coarse estimates
    b = net.hidden_bias / norms
    box = _Recorder(net.predict)
    oracle = QueryOracle(box, d)
    noise, _ = oracle.calibrate(rng, 1.0)
    c = rng.standard_normal((u, d)) if centers else None
    monkeypatch.setattr(planes, "CHUNK_POINTS", chunk)
    res = refine_hyperplanes(oracle, W, b, np.full(u, 1e-2), noise, rng, scale=1.0, centers=c, n_points=m)
    return res, box.batches, rng.random()


@pytest.mark.parametrize("centers, m", [(False, None), (True, None), (False, 9)])
def test_refit_chunk_by_chunk_gives_the_same_bits(monkeypatch, centers, m):
    # one chunk holding every anchor (the refit as it was) against chunks of 7 anchors; batches of 53
    # rows split inside a point's 6-row stencil; m = 9 < d + 8 makes every unit take the two retries
    monkeypatch.setattr(queries, "MAX_BATCH", 53)
    net = nr.random_network(6, 8, 2, rng=4, bias_range=(-1, 1))
    whole, sent_whole, after_whole = _refit(monkeypatch, net, 10**9, centers, m=m)
    chunked, sent_chunked, after_chunked = _refit(monkeypatch, net, 7, centers, m=m)
    for name in FIELDS:
        assert np.array_equal(getattr(whole, name), getattr(chunked, name)), name
    assert len(sent_whole) == len(sent_chunked) and all(np.array_equal(a, b) for a, b in zip(sent_whole, sent_chunked))
    assert after_whole == after_chunked              # the generator is left where one draw leaves it
    assert whole.accepted.all()
    if m is not None:
        assert whole.n_points.max() > m              # the retries ran


def test_located_points_memory_is_bounded_by_the_batch():
    # u = 24 units of d = 784, m = d + d // 4 = 980 anchors each: their 6-row stencils all at once were
    # 24 * 980 * 6 * 784 * 8 bytes = 885 MB (twice that with the temporaries, and the anchors, their
    # normals and the located points 148 MB each; 2.2 GB measured for the whole refit). Chunk by chunk:
    # one batch of MAX_BATCH rows (32768 * 784 * 8 = 205 MB) and the chunk of anchors being drawn (two
    # of CHUNK_POINTS = 2048 points, 13 MB each): 300 MB leaves margin. (The plane fits that follow
    # take CHUNK_POINTS located points at a time, and many seconds of SVDs: not run here.)
    d, u, m = 784, 24, 980
    net = nr.random_network(d, u, rng=2, bias_range=(-1, 1))
    rng = np.random.default_rng(0)
    norms = np.linalg.norm(net.hidden_weights, axis=1)
    W, b = net.hidden_weights / norms[:, None], net.hidden_bias / norms
    A, c = net.output_weights[0], net.output_bias[0]
    oracle = QueryOracle(lambda X: np.maximum(X @ net.hidden_weights.T + net.hidden_bias, 0) @ A + c, d)
    oracle(np.zeros((1, d)))                         # the number of outputs
    noise = NoiseModel(rel=1e-15, f_scale=1.0, g_scale=1.0)
    tracemalloc.start()
    try:
        anchors, s, _, ok, _ = _anchors_and_kinks(oracle, W, b, np.full(u, 1e-8), noise, rng, 1.0, m, None, None)
        Q = _located([(np.arange(u), anchors, s)], W, m, 5, 7, m)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert oracle.n_queries == 1 + u * m * 7
    assert peak < 300e6, f"peak {peak / 1e6:.0f} MB"
    # the located points of units 5 and 6 lie on their hyperplanes
    assert ok.mean() > 0.99 and Q.shape == (2, m, d)
    assert np.max(np.abs(np.einsum("umd,ud->um", Q, W[5:7]) + b[5:7, None])[ok[5:7]]) < 1e-9

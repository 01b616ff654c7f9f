"""Tests of the line search for critical points and of the gradient jumps (nnrecover.extraction.lines)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.extraction import queries
from nnrecover.extraction.lines import H_FRACTION, gradient_jumps, search_line
from nnrecover.extraction.queries import KAPPA, NoiseModel, QueryOracle, query_batched


def test_search_line_finds_every_kink_exactly():
    d, k = 5, 8
    net = nr.random_network(d, k, rng=23, bias_range=(-1, 1)).canonical()
    oracle = QueryOracle(net.predict, d)
    rng = np.random.default_rng(0)
    noise, evidence = oracle.calibrate(rng, 1.0)
    assert evidence["max_repeat_difference"] == 0.0
    x0, v = rng.standard_normal(d), rng.standard_normal(d)
    v /= np.linalg.norm(v)
    lk = search_line(oracle, x0, v, -10.0, 10.0, noise)
    true_s = -(net.hidden_weights @ x0 + net.hidden_bias) / (net.hidden_weights @ v)
    true_s = np.sort(true_s[np.abs(true_s) < 10.0])
    assert lk.s.size == true_s.size
    # kinks are intersections of exact linear pieces: position error ~ eps |f| / slope change
    assert np.max(np.abs(np.sort(lk.s) - true_s)) < 1e-11
    assert lk.queries == oracle.n_queries - evidence["queries"]


# ------------------------------------------------------------------ gradient jumps: batches and memory
def _jumps_all_at_once(oracle, x_star, v, room_left, room_right, noise, h_fraction=H_FRACTION):
    """gradient_jumps as it was before the rows were generated batch by batch: every row of every
    point built at once ((m, 2, 2 d + 1, d) numbers) and handed to query_batched."""
    m, d = x_star.shape
    eps_l, eps_r = 0.5 * room_left, 0.5 * room_right
    h = h_fraction * np.minimum(eps_l, eps_r)
    eye = np.eye(d)
    blocks = []
    for sign, eps in ((-1.0, eps_l), (1.0, eps_r)):
        base = x_star + sign * eps[:, None] * v
        step1 = base[:, None, :] + h[:, None, None] * eye[None]
        step2 = base[:, None, :] + 2 * h[:, None, None] * eye[None]
        blocks.append((base, step1, step2))
    rows = np.concatenate([np.concatenate([b[:, None, :], s1, s2], axis=1) for b, s1, s2 in blocks], axis=1)
    F = query_batched(oracle, rows.reshape(-1, d)).reshape(m, 2, 2 * d + 1, -1)
    ok = np.ones(m, bool)
    grads = []
    for side in range(2):
        f0, f1, f2 = F[:, side, 0, :], F[:, side, 1:d + 1, :], F[:, side, d + 1:, :]
        tol = KAPPA * noise.abs(np.linalg.norm(blocks[side][0], axis=1), np.linalg.norm(f0, axis=1))
        ok &= np.max(np.abs(f2 - 2 * f1 + f0[:, None, :]), axis=(1, 2)) <= 2 * tol
        grads.append(np.transpose((f1 - f0[:, None, :]) / h[:, None, None], (0, 2, 1)))
    err = 2 * np.sqrt(d) * noise.abs(np.linalg.norm(x_star, axis=1), 0.0) / h
    return grads[1] - grads[0], err, ok


class _Recorder:
    """A box that keeps a copy of every batch it is sent."""

    def __init__(self, f):
        self.f, self.batches = f, []

    def __call__(self, X):
        self.batches.append(X.copy())
        return self.f(X)


def _critical_points(net, m, rng):
    """``m`` critical points of ``net`` (on random units' hyperplanes) with random line directions."""
    W, b = net.hidden_weights, net.hidden_bias
    j = rng.integers(0, W.shape[0], m)
    x = rng.standard_normal((m, W.shape[1]))
    x -= ((np.sum(x * W[j], axis=1) + b[j]) / np.sum(W[j] ** 2, axis=1))[:, None] * W[j]
    v = rng.standard_normal(x.shape)
    return x, v / np.linalg.norm(v, axis=1, keepdims=True), rng.uniform(0.05, 0.5, m), rng.uniform(0.05, 0.5, m)


@pytest.mark.parametrize("max_batch", [None, 1000, 37])
def test_gradient_jumps_batch_by_batch_equals_all_at_once(monkeypatch, max_batch):
    # the same rows in the same batches (37 and 1000 rows split inside a point's 2 (2 d + 1) = 54 rows),
    # hence the same bits; the default batch holds all of them
    if max_batch is not None:
        monkeypatch.setattr(queries, "MAX_BATCH", max_batch)
    d, m = 13, 40
    net = nr.random_network(d, 9, 2, rng=3, bias_range=(-1, 1))
    x, v, left, right = _critical_points(net, m, np.random.default_rng(1))
    noise = NoiseModel(rel=1e-15, f_scale=1.0, g_scale=1.0)
    runs = []
    for fn in (gradient_jumps, _jumps_all_at_once):
        box = _Recorder(net.predict)
        runs.append((fn(QueryOracle(box, d), x, v, left, right, noise), box.batches))
    (new, sent_new), (old, sent_old) = runs
    for a, b in zip(new, old):
        assert np.array_equal(a, b)
    assert len(sent_new) == len(sent_old) == -(-m * 2 * (2 * d + 1) // queries.MAX_BATCH)
    assert all(np.array_equal(a, b) for a, b in zip(sent_new, sent_old))
    assert new[2].any()


def test_gradient_jumps_memory_is_bounded_by_the_batch():
    # d = 784, m = 200 critical points: all rows at once were m 2 (2 d + 1) d float64 = 200 * 3138 * 784 * 8
    # bytes = 3.9 GB (plus as much again in temporaries). Batch by batch, at most MAX_BATCH + 2 * 3138 rows
    # exist at a time: (32768 + 6276) * 784 * 8 = 245 MB, plus the (m, 3138, p) outputs (5 MB), the
    # (m, d) points (1.3 MB each) and the box's (MAX_BATCH,) vectors: 400 MB leaves margin, a tenth of before
    d, m = 784, 200
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal(d) / np.sqrt(d), rng.standard_normal(d) / np.sqrt(d)

    def box(X):              # a linear-plus-relu box, one kink: cheap beside the rows themselves
        return np.maximum(X @ w1 + 0.1, 0.0) + X @ w2

    x = rng.standard_normal((m, d))
    x -= ((x @ w1 + 0.1) / (w1 @ w1))[:, None] * w1
    v = rng.standard_normal((m, d))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    oracle = QueryOracle(box, d)
    noise = NoiseModel(rel=1e-15, f_scale=1.0, g_scale=1.0)
    tracemalloc.start()
    try:
        J, _, ok = gradient_jumps(oracle, x, v, np.ones(m), np.ones(m), noise)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert oracle.n_queries == m * 2 * (2 * d + 1)
    assert peak < 400e6, f"peak {peak / 1e6:.0f} MB"
    # the jump of relu(w1 . x + 0.1) across its hyperplane is +-w1 (where the steps stayed on one piece)
    assert ok.mean() > 0.9 and np.allclose(np.abs(J[ok, 0, :] @ w1), w1 @ w1, rtol=1e-6)

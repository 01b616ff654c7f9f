"""Tests of the line search for critical points (nnrecover.extraction.lines)."""

from __future__ import annotations

import numpy as np

import nnrecover as nr
from nnrecover.extraction.lines import search_line
from nnrecover.extraction.queries import QueryOracle


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

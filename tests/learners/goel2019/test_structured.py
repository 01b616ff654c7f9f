"""Goel-Panigrahy 2019, Theorem 8 (correlation graph, Algorithm 3) and Theorem 9 (group sums, experimental)."""

import itertools
import math

import numpy as np
import pytest

from nnrecover.errors import AssumptionError, InputError
from nnrecover.learners.goel2019.structured import (ExponentialBinaryNetwork, SampleShiftedMean,
                                                    correlation_graph,
                                                    group_sum_maximization, learn_sparse_binary_weights,
                                                    theorem8_condition)


def _supports(n=12, d=3, k=3, seed=0):
    perm = np.random.default_rng(seed).permutation(n)
    W = np.zeros((d, n))
    for i in range(d):
        W[i, perm[k * i:k * (i + 1)]] = 1.0
    return W


def _pairs_upper(d, linear, pair, big=None):
    P = {tuple(int(j == i) for j in range(d)): linear for i in range(d)}
    for i, j in itertools.combinations(range(d), 2):
        P[tuple(int(m in (i, j)) for m in range(d))] = pair
    if big is not None:
        P[tuple(int(m in (0, 1)) for m in range(d))] = big
    return P


def _rows(W):
    return {tuple(r) for r in W}


# ------------------------------------------------------------------ Theorem 8
def test_population_correlations_match_quadrature():
    # n = 4 coordinates, supports {0, 1} and {2}, coordinate 3 unused: E[f x_i x_j] by a 4-D tensor
    # Gauss-Hermite rule (the integrand is a polynomial times exponentials of linear forms: converged).
    W = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    net = ExponentialBinaryNetwork(W, 0.5, 1.0, {(1, 0): 1.0, (0, 1): 0.7, (1, 1): 0.3})
    nodes, w = np.polynomial.hermite_e.hermegauss(30)
    w = w / math.sqrt(2 * math.pi)
    G = np.array(list(itertools.product(nodes, repeat=4)))
    wt = np.prod(np.array(list(itertools.product(w, repeat=4))), axis=1)
    f = net.predict(G)
    quad = (G * (wt * f)[:, None]).T @ G
    np.fill_diagonal(quad, 0.0)
    np.testing.assert_allclose(net.population_correlations(), quad, rtol=1e-10, atol=1e-13)
    # mu corrected: E[u_t(w . x)] = exp(-rho (t - rho k / 2))
    np.testing.assert_allclose(net.mu, [wt @ np.exp(0.5 * (G @ W[i] - 1.0)) for i in range(2)], rtol=1e-12)


def test_theorem8_population_graph_recovers_w_exactly():
    W = _supports()
    net = ExponentialBinaryNetwork(W, 0.5, 1.0, _pairs_upper(3, 1.0, 0.2))
    cond = theorem8_condition(net)
    assert cond["met"] and cond["ratio"] > 1
    # the within-block value is the coefficient of X_r in Q = rho^2 P(mu (X + 1))
    A = net.population_correlations()
    i, j = np.flatnonzero(W[0])[:2]
    assert A[i, j] == pytest.approx(cond["linear"][0], rel=1e-14)
    res = correlation_graph(A)
    assert _rows(res.weights) == _rows(W)
    assert np.all(res.clique_density == 1.0)


def test_theorem8_samples_alpha_within_standard_errors_and_recovery():
    W = _supports()
    net = ExponentialBinaryNetwork(W, 0.5, 1.0, _pairs_upper(3, 1.0, 0.2))
    X = np.random.default_rng(1).standard_normal((200_000, 12))
    y = net.predict(X)
    res = learn_sparse_binary_weights(X, y)
    A, se = res.info["alpha"], res.info["standard_errors"]
    off = ~np.eye(12, dtype=bool)
    # 66 pairs: 4.5 standard errors bounds every one of them with probability > 1 - 66 * 7e-6
    assert np.all(np.abs(A - net.population_correlations())[off] < 4.5 * se[off])
    assert _rows(res.weights) == _rows(W) and np.all(res.clique_density == 1.0)


def test_theorem8_violated_condition_merges_units():
    # a pairwise coefficient above the linear ones (Theorem 8's gap fails): units 0 and 1 form one clique
    W = _supports()
    net = ExponentialBinaryNetwork(W, 0.5, 1.0, _pairs_upper(3, 1.0, 0.2, big=3.0))
    cond = theorem8_condition(net)
    assert not cond["met"]
    res = correlation_graph(net.population_correlations())
    assert _rows(res.weights) == {tuple(W[0] + W[1])}           # the merged support, unit 2 lost below the cut


def test_theorem8_refusals():
    with pytest.raises(AssumptionError, match="binary"):
        ExponentialBinaryNetwork(np.array([[0.5, 1.0]]))
    with pytest.raises(AssumptionError, match="disjoint"):
        ExponentialBinaryNetwork(np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]))
    with pytest.raises(AssumptionError, match="multilinear"):
        ExponentialBinaryNetwork(np.eye(2), upper={(2, 0): 1.0})
    with pytest.raises(InputError, match="square"):
        correlation_graph(np.ones((2, 3)))


# ------------------------------------------------------------------ Theorem 9 (experimental)
def _thm9(pair):
    W = np.zeros((3, 6))
    for i in range(3):
        W[i, [i, i + 3]] = 1.0
    return ExponentialBinaryNetwork(W, 1.0, 0.0, _pairs_upper(3, 1.0, 0.0, big=pair)), W


def test_theorem9_shifted_mean_identity_and_population_recovery():
    net, W = _thm9(1e-4)
    # g(z) = E_{N(z, I)}[f] against a Monte-Carlo-free check: the closed form at z = 0 is E[f] = sum c_S e^{|U_S|/2}
    assert net.shifted_mean(np.zeros(6))[0] == pytest.approx(3 * math.e + 1e-4 * math.e ** 2, rel=1e-14)
    h = 1e-6
    z = np.linspace(0.1, 0.6, 6)
    fd = [(net.shifted_mean(z + h * e)[0] - net.shifted_mean(z - h * e)[0]) / (2 * h) for e in np.eye(6)]
    np.testing.assert_allclose(net.shifted_mean_gradient(z)[0], fd, rtol=1e-8)
    res = group_sum_maximization(net, 3, rng=0)
    assert {tuple(s) for s in res.supports} == {tuple(np.flatnonzero(r)) for r in W}
    assert res.at_box.all()                                     # the maximiser is a box artefact (erratum)


def test_theorem9_samples_shifted_mean_within_standard_error_and_recovery():
    net, W = _thm9(1e-4)
    X = np.random.default_rng(2).standard_normal((200_000, 6))
    y = net.predict(X)
    src = SampleShiftedMean(X, y)
    for z in (np.zeros(6), np.full(6, 0.2), np.array([0.5, 0, 0, 0.5, 0, 0])):
        terms = y * np.exp(X @ z - 0.5 * z @ z)
        se = terms.std() / math.sqrt(X.shape[0])
        assert abs(src.shifted_mean(z)[0] - net.shifted_mean(z)[0]) < 4 * se
    res = group_sum_maximization(src, 3, box=0.5, rng=0)
    assert {tuple(s) for s in res.supports} == {tuple(np.flatnonzero(r)) for r in W}


def test_theorem9_product_term_merges_groups_and_box_is_needed():
    # a product term with c_S e^{|U_S|/2 + k B} > lambda - c_j e^{k/2} couples the groups at the box corner
    net, W = _thm9(0.05)
    res = group_sum_maximization(net, 3, rng=0)
    assert {0, 1, 3, 4} in [set(s) for s in res.supports]
    # the printed objective is unbounded above: h grows without limit along s 1_{T_i}
    hs = [net.shifted_mean(s * W[0])[0] - 0.1 * s * 2 - 0.1 * 2 * s * s for s in (2.0, 4.0, 8.0)]
    assert hs[0] < hs[1] < hs[2]
    with pytest.raises(AssumptionError, match=">= 0"):
        group_sum_maximization(ExponentialBinaryNetwork(W, 1.0, 0.0, {(1, 0, 0): 1.0, (0, 1, 0): -1.0}), 2)

"""Goel-Panigrahy 2019 Section 3 (Theorem 7, Corollary 1, Lemma 8) and Appendix C.1 (Lemmas 19-20)."""

import itertools
import math

import numpy as np
import pytest
from scipy.special import ndtr
from scipy.stats import ortho_group

from nnrecover.errors import AssumptionError, InputError
from nnrecover.learners.goel2019.correlation import (corollary1_prediction, delta_double_prime_correlation,
                                                     delta_prime_correlation, delta_prime_local_search,
                                                     delta_prime_search, delta_prime_test,
                                                     expected_band_statistic, sphere_net)
from nnrecover.learners.goel2019.model import HighThresholdNetwork

PHI1 = math.exp(-0.5) / math.sqrt(2 * math.pi)


def _pairs_net(n, d, activation="step", t=1.0, seed=3, pairs=None):
    """Orthogonal W (d rows in R^n), P = sum of pairwise products (no linear terms)."""
    W = ortho_group.rvs(n, random_state=seed)[:d]
    pairs = list(itertools.combinations(range(d), 2)) if pairs is None else pairs
    P = {tuple(int(k in S) for k in range(d)): 1.0 for S in pairs}
    P[(0,) * d] = 0.0
    return HighThresholdNetwork(W, t, activation, P), W


def _sample(net, N, seed):
    X = np.random.default_rng(seed).standard_normal((N, net.n_inputs))
    return X, net.predict(X)


def _angles(D, W):
    return np.arccos(np.clip((D @ W.T).max(axis=0), -1, 1))


# ------------------------------------------------------------------ population forms
def test_expected_band_statistic_step_closed_form():
    net, W = _pairs_net(3, 3)
    mu = ndtr(-1.0)
    for s, b in ((1.3, 0.1), (0.8, 0.05), (1.04, 0.1)):
        fired = max(ndtr(s) - ndtr(max(s - b, 1.0)), 0.0)         # X_1 = 1 on [1, s), 0 below t = 1
        unfired = max(ndtr(min(s, 1.0)) - ndtr(s - b), 0.0)
        closed = (fired * (2 * mu + mu * mu) + unfired * mu * mu) / b
        assert expected_band_statistic(net, 0, [s], [1.0], band=b) == pytest.approx(closed, rel=1e-12)


def test_corollary1_prediction_formula_and_limit():
    net, W = _pairs_net(3, 3)
    mu = ndtr(-1.0)
    # Q_i(mu, mu) for P = sum of pairs with d = 3 is 2 mu (coefficient of X_i in P(mu(X + 1)) over mu)
    np.testing.assert_allclose(corollary1_prediction(net), PHI1 * 2 * mu, rtol=1e-14)
    pred = corollary1_prediction(net)[0]
    # The exact expectation of C_2^ tends to the prediction linearly in eps (Lemma 8: + eps d^O(1)).
    errs = [expected_band_statistic(net, 0, [1 + e, 1 - e], [1, -1], band=e / 4) - pred for e in (4e-3, 2e-3, 1e-3)]
    assert 1.9 < errs[0] / errs[1] < 2.1 and 1.9 < errs[1] / errs[2] < 2.1
    # first-order size: |d/deps [phi(t + eps) E_1 - phi(t - eps) E_0]| <= phi(t)(1 + t)(E_1 + E_0), plus the
    # band shift eps'/2 = eps/8 of the same order: E_1 = 2 mu + mu^2, E_0 = mu^2
    assert abs(errs[2]) < 1e-3 * PHI1 * 2 * (2 * mu + 2 * mu * mu)


def test_relu_slope_jump_prediction_is_the_limit_of_c3():
    # Corrected Lemma 19: C_3(w_i, t) -> phi(t) E[dP/dX_i | w_i.x = t] (the printed one-sided D(t + eps) is not it)
    net, W = _pairs_net(3, 3, activation="relu")
    m = PHI1 - ndtr(-1.0)                                       # E[(g - 1)_+]
    pred = corollary1_prediction(net)
    np.testing.assert_allclose(pred, PHI1 * 2 * m, rtol=1e-14)

    def c3(e):
        e2 = e / 4
        return expected_band_statistic(net, 0, [1 + e + e2, 1 + e - e2, 1 - e + e2, 1 - e - e2],
                                       np.array([1, -1, -1, 1]) / (2 * e2), band=e2 / 2)
    errs = [c3(e) - pred[0] for e in (4e-3, 2e-3, 1e-3)]
    assert 1.9 < errs[0] / errs[1] < 2.1 and 1.9 < errs[1] / errs[2] < 2.1
    assert abs(errs[2]) < 5e-3 * pred[0]


# ------------------------------------------------------------------ finite samples
@pytest.fixture(scope="module")
def step3():
    net, W = _pairs_net(3, 3)
    X, y = _sample(net, 600_000, 0)
    return net, W, X, y


def test_c2_at_units_matches_corollary1_within_standard_error(step3):
    net, W, X, y = step3
    eps, band = 0.02, 0.01
    st = delta_prime_correlation(X, y, W, 1.0, eps=eps, band=band)
    pred = corollary1_prediction(net)
    exact = [expected_band_statistic(net, i, [1 + eps, 1 - eps], [1, -1], band=band) for i in range(3)]
    # The estimator is unbiased for its exact expectation: 4 standard errors (each per unit).
    assert np.all(np.abs(st.values - exact) < 4 * st.standard_errors)
    # The eps-bias of the prediction is below one standard error here, so it matches within 4 as well.
    assert np.all(np.abs(np.asarray(exact) - pred) < st.standard_errors)
    assert np.all(np.abs(st.values - pred) < 4 * st.standard_errors)


def test_direction_test_accepts_units_and_rejects_far_directions(step3):
    net, W, X, y = step3
    eps3 = 2 * ndtr(-1.0) * 0.8                                 # 80% of Q_i(mu): the test level is phi eps_3/2
    acc, st = delta_prime_test(X, y, W, 1.0, eps3=eps3, eps=0.05)
    assert acc.all()
    rng = np.random.default_rng(9)
    far = rng.standard_normal((200, 3))
    far /= np.linalg.norm(far, axis=1, keepdims=True)
    far = far[np.max(far @ W.T, axis=1) < math.cos(math.radians(30))]
    acc_far, st_far = delta_prime_test(X, y, far, 1.0, eps3=eps3, eps=0.05)
    assert far.shape[0] > 50 and not acc_far.any()             # Claim 5: |C_2| <= eps d^O(1) / eps_2


@pytest.mark.parametrize("n,resolution,N", [(2, 0.05, 300_000), (3, 0.1, 400_000)])
def test_net_search_recovers_orthogonal_w_to_net_resolution(n, resolution, N):
    net, W = _pairs_net(n, n, seed=5)
    X, y = _sample(net, N, 1)
    eps3 = corollary1_prediction(net).min() / PHI1 * 0.8
    res = delta_prime_search(X, y, 1.0, resolution=resolution, eps3=eps3)
    assert res.directions.shape[0] == n                         # one cluster per unit, no spurious one
    assert np.all(_angles(res.directions, W) <= resolution)


def test_net_search_misses_a_unit_with_vanishing_q():
    # Theorem 7 needs E[Q_i | w_i.x = t] >= eps_3 for every i; with P = X_1 X_2, Q_3 = 0: unit 3 is invisible
    net, W = _pairs_net(3, 3, seed=5, pairs=[(0, 1)])
    assert corollary1_prediction(net)[2] == 0.0
    X, y = _sample(net, 400_000, 2)
    eps3 = corollary1_prediction(net)[0] / PHI1 * 0.8
    res = delta_prime_search(X, y, 1.0, resolution=0.1, eps3=eps3)
    assert res.directions.shape[0] == 2
    assert np.all(_angles(res.directions, W[:2]) <= 0.1)


def test_local_search_beyond_n3():
    net, W = _pairs_net(5, 3, seed=4)
    X, y = _sample(net, 300_000, 1)
    g = np.random.default_rng(2).standard_normal(5)
    g -= (g @ W[0]) * W[0]
    g /= np.linalg.norm(g)
    z0 = math.cos(0.4) * W[0] + math.sin(0.4) * g               # 23 degrees off
    Z, v = delta_prime_local_search(X, y, z0, 1.0, eps=0.05, rng=0)
    assert math.acos(min(1.0, Z[0] @ W[0])) < 0.05


def test_relu_c3_matches_exact_expectation_and_separates():
    net, W = _pairs_net(3, 3, activation="relu")
    X, y = _sample(net, 600_000, 3)
    eps, e2, b = 0.2, 0.05, 0.025
    far = np.ones(3) / math.sqrt(3)
    st = delta_double_prime_correlation(X, y, np.vstack([W, far]), 1.0, eps=eps, eps2=e2, band=b)
    pos = [1 + eps + e2, 1 + eps - e2, 1 - eps + e2, 1 - eps - e2]
    exact = expected_band_statistic(net, 0, pos, np.array([1, -1, -1, 1]) / (2 * e2), band=b)
    assert np.all(np.abs(st.values[:3] - exact) < 4 * st.standard_errors[:3])
    assert abs(st.values[3]) < 4 * st.standard_errors[3] + 0.2 * exact


def test_refusals():
    with pytest.raises(InputError, match="n_inputs <= 3"):
        sphere_net(4, 0.1)
    W = np.array([[1.0, 0.0], [0.6, 0.8]])
    with pytest.raises(AssumptionError, match="orthogonal"):
        corollary1_prediction(HighThresholdNetwork(W, 1.0, "step", {(1, 1): 1.0}))
    with pytest.raises(AssumptionError, match="relu"):
        corollary1_prediction(HighThresholdNetwork(np.eye(2), 1.0, "sigmoid", {(1, 1): 1.0}))
    X = np.random.default_rng(0).standard_normal((100, 2))
    with pytest.raises(InputError, match="eps2"):
        delta_double_prime_correlation(X, X[:, 0], np.eye(2), 1.0, eps=0.1, eps2=0.2)
    with pytest.raises(InputError, match="statistic"):
        delta_prime_search(X, X[:, 0], 1.0, resolution=0.5, eps3=0.1, statistic="c4")
    with pytest.raises(InputError, match="eps"):
        delta_prime_correlation(X, X[:, 0], np.eye(2), 1.0, eps=-1.0)

"""Goel-Panigrahy 2019, Appendix B.6 / Theorem 13: sigmoid units learned from f-biased samples."""

import math

import numpy as np
import pytest
from scipy.stats import ortho_group

from nnrecover.errors import AssumptionError, InputError
from nnrecover.learners.goel2019.model import HighThresholdNetwork, population_hermite_moment
from nnrecover.learners.goel2019.sigmoid import (RejectionOracle, biased_moments, biased_population_moments,
                                                 sigmoid_biased_step1)
from nnrecover.learners.goel2019.statistics import PopulationMoments
from nnrecover.learners.goel2019.step1 import step1

T = 4.0                                 # u_hat_4 of the sigmoid is ~0 near t = 3; t = 4 keeps it clearly positive
C = np.array([1.0, 0.7, 1.3])


def _net():
    W = ortho_group.rvs(3, random_state=0)
    return HighThresholdNetwork(W, T, "sigmoid", {(1, 0, 0): C[0], (0, 1, 0): C[1], (0, 0, 1): C[2]}), W


def _angles(Wh, W):
    """Angle of each true row to its best estimate, up to sign (2 asin(chord/2): exact near 0)."""
    D = np.minimum(np.linalg.norm(Wh[:, None] - W[None], axis=2), np.linalg.norm(Wh[:, None] + W[None], axis=2))
    return 2 * np.arcsin(np.minimum(D.min(axis=0) / 2, 1.0))


def test_biased_population_moments_recover_w_and_scaled_coefficients():
    net, W = _net()
    pm = biased_population_moments(net)
    Ef = float(population_hermite_moment(net, 0))
    np.testing.assert_allclose(pm.second() * Ef, PopulationMoments(net).second(), rtol=1e-13, atol=1e-16)
    res = step1(pm, 3, rng=0)
    assert np.all(_angles(res.weights, W) < 1e-8)
    order = np.argmax(np.abs(res.weights @ W.T), axis=1)
    np.testing.assert_allclose(res.coefficients * Ef, C[order], rtol=1e-8)   # c_i / E[f]: only the scale moves
    assert np.all(np.sum(res.weights * W[order], axis=1) > 0)                 # signs resolved


def test_biased_second_moment_within_standard_errors():
    net, W = _net()
    X, info = RejectionOracle(net).sample(20_000, rng=1)
    assert info["acceptance"] == pytest.approx(info["mean_f"] / 3.0)
    m = biased_moments(X, "sigmoid", T)
    exact = biased_population_moments(net).second()
    # per row the summand is (x x^T - I) / (sqrt(2) u_hat_2); its sample standard deviation / sqrt(m)
    # is the standard error of each entry; 9 entries (6 distinct) within 4.5 standard errors
    S = (X[:, :, None] * X[:, None, :] - np.eye(3)) / (math.sqrt(2) * m.u_hat[2])
    se = S.std(axis=0) / math.sqrt(X.shape[0])
    assert np.all(np.abs(m.second() - exact) < 4.5 * se)


def test_theorem13_error_falls_with_samples():
    net, W = _net()
    oracle = RejectionOracle(net)
    errs = []
    for n, seed in ((40_000, 5), (160_000, 3)):
        X, info = oracle.sample(n, rng=seed)
        res = sigmoid_biased_step1(X, 3, T, scale=info["mean_f"], rng=0)
        errs.append(_angles(res.weights, W).max())
    # the error is a sampling error ~ 1/sqrt(n): 4x the rows should cut it by ~2; ask for a factor 1.5
    assert errs[1] < errs[0] / 1.5 and errs[1] < 0.1


def test_oracle_refuses_negative_f_and_a_low_bound():
    W = np.eye(2)
    neg = HighThresholdNetwork(W, 1.0, "sigmoid", {(1, 0): 1.0, (0, 1): -1.0})
    with pytest.raises(AssumptionError, match="f >= 0"):
        RejectionOracle(neg, f_max=1.0).sample(10, rng=0)
    pos = HighThresholdNetwork(W, 1.0, "sigmoid", {(1, 0): 1.0, (0, 1): 1.0})
    with pytest.raises(AssumptionError, match="exceeds f_max"):
        RejectionOracle(pos, f_max=0.1).sample(10, rng=0)
    with pytest.raises(InputError, match="f_max"):
        RejectionOracle(lambda X: X[:, 0] ** 2, n_inputs=2)
    with pytest.raises(InputError, match="scale"):
        biased_moments(np.ones((3, 2)), "sigmoid", 1.0, scale=0.0)

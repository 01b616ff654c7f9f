"""Goel-Panigrahy 2019, Appendix B.7: P of higher degree per variable (Assumption 4)."""

import math

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import ortho_group

from nnrecover.errors import AssumptionError
from nnrecover.learners.goel2019.higher_degree import (assumption4_check, higher_degree_step1,
                                                       univariate_hermite_coefficients, univariate_parts)
from nnrecover.learners.goel2019.model import HighThresholdNetwork
from nnrecover.learners.goel2019.statistics import PopulationMoments, SampleMoments


def _net(b2=0.5, c2=0.7):
    W = ortho_group.rvs(3, random_state=0)
    P = {(1, 0, 0): 1.0, (0, 1, 0): c2, (0, 0, 1): 1.3, (2, 0, 0): 0.5, (0, 2, 0): b2, (0, 0, 3): 0.2}
    return HighThresholdNetwork(W, 2.0, "relu", P), W


def _angles(Wh, W):
    """Angle of each true row to its best estimate, up to sign (2 asin(chord/2): exact near 0)."""
    D = np.minimum(np.linalg.norm(Wh[:, None] - W[None], axis=2), np.linalg.norm(Wh[:, None] + W[None], axis=2))
    return 2 * np.arcsin(np.minimum(D.min(axis=0) / 2, 1.0))


def test_univariate_coefficients_match_quadrature():
    net, W = _net()
    assert univariate_parts(net.upper)[2] == {1: 1.3, 3: 0.2}
    a = univariate_hermite_coefficients(net, 4)
    he = [lambda g: 1.0, lambda g: g, lambda g: g * g - 1, lambda g: g ** 3 - 3 * g, lambda g: g ** 4 - 6 * g * g + 3]
    for i, q in enumerate(univariate_parts(net.upper)):
        for k in range(5):
            def f(g, k=k, q=q):
                r = g - 2.0
                return sum(c * r ** p for p, c in q.items()) * he[k](g) * math.exp(-0.5 * g * g)
            quad = integrate.quad(f, 2.0, np.inf, epsabs=1e-15, epsrel=1e-13)[0] / math.sqrt(2 * math.pi)
            assert a[i, k] == pytest.approx(quad / math.sqrt(math.factorial(k)), rel=1e-9)


def test_population_recovers_w_and_univariate_scale():
    # P univariate per unit (no products): f = f_uni, so Step 1 is exact, and the coefficient it returns
    # is T_ii^2 = a_i^(2) / u_hat_2 (Appendix B.7), not the linear coefficient c_i
    net, W = _net()
    chk = assumption4_check(net)
    assert chk["met"]
    res = higher_degree_step1(PopulationMoments(net), 3, rng=0)
    assert np.all(_angles(res.weights, W) < 1e-8)
    order = np.argmax(np.abs(res.weights @ W.T), axis=1)
    np.testing.assert_allclose(res.coefficients, chk["scaled2"][order], rtol=1e-8)
    np.testing.assert_allclose(res.info["quartic_values"], chk["scaled4"][order] / chk["scaled2"][order] ** 2,
                               rtol=1e-8)


def test_samples_error_falls_with_n():
    net, W = _net()
    errs = []
    for N in (100_000, 800_000):
        X = np.random.default_rng(1).standard_normal((N, 3))
        y = net.predict(X)
        keep = y != 0
        res = higher_degree_step1(SampleMoments(X[keep], y[keep], N, "relu", 2.0), 3, rng=0)
        errs.append(_angles(res.weights, W).max())
    # sampling error ~ 1/sqrt(N): 8x the samples should cut it by ~2.8; ask for a factor 1.8
    assert errs[1] < errs[0] / 1.8 and errs[1] < 0.05


def test_assumption4_violated_sign_of_a4_is_refused():
    # q_2(x) = x - 0.9 x^2 on relu units at t = 2: a^(2) > 0 but a^(4) < 0 (flip at -0.75, see the coefficients)
    net, W = _net(b2=-0.9, c2=1.0)
    chk = assumption4_check(net)
    assert chk["scaled2"][1] > 0 and chk["scaled4"][1] < 0 and not chk["met"]
    with pytest.raises(AssumptionError, match="Assumption 4"):
        higher_degree_step1(PopulationMoments(net), 3, rng=0)

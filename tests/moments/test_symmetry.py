"""The symmetry test of Ge et al. 2019's learner on many rows: means and variances of the odd features
g(x) = (x, x**3) from every row, their correlations from every stride-th row (SymmetryStatistic(stride))."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import nnrecover as nr
from nnrecover.distributions import Gaussian, SymmetricMixture
from nnrecover.errors import AssumptionError, InputError
from nnrecover.learners import ge2019 as ge
from nnrecover.moments import symmetry as gm


def _by_hand(X: np.ndarray, stride: int) -> float:
    """n z^T R^-1 z with the mean and standard deviation of g over every row and the correlation of g over
    the rows 0, stride, 2 stride, ... (full rank here)."""
    g = np.hstack([X, X ** 3])
    z = g.mean(axis=0) / g.std(axis=0)
    R = np.corrcoef(g[::stride], rowvar=False)
    return float(X.shape[0] * z @ np.linalg.solve(R, z))


def test_strided_statistic_equals_its_formula_to_round_off(rng):
    X = rng.standard_normal((3000, 4)) + 0.01
    t = ge.symmetry_test(X, gram_rows=300)
    assert t.gram_rows == 300 and t.n == 3000 and t.df == 8
    expected = _by_hand(X, 10)
    assert abs(t.statistic - expected) <= 1e-9 * expected
    # the p-value is the F law of Hotelling's statistic with a covariance from m = 300 rows
    assert t.p_value == pytest.approx(stats.f.sf(expected * (300 - 8) / (8 * 299), 8, 300 - 8), rel=1e-9)
    # chunks fed in order (the running row index decides the strided rows) give the same test
    stat = gm.SymmetryStatistic(10)
    for s in range(0, 3000, 700):
        stat.update(X[s:s + 700])
    assert stat.finalize().statistic == pytest.approx(t.statistic, rel=1e-12)
    # merging partial results of consecutive blocks of a multiple of the stride rows is the same sum
    a, b = gm.SymmetryStatistic(10).update(X[:1500]), gm.SymmetryStatistic(10).update(X[1500:])
    assert a.merge(b).finalize().statistic == pytest.approx(t.statistic, rel=1e-12)


def test_gram_rows_of_all_rows_is_the_plain_test(rng):
    X = rng.standard_normal((1000, 3))
    assert ge.symmetry_test(X, gram_rows=1000) == ge.symmetry_test(X)
    assert ge.symmetry_test(X).gram_rows is None


def test_strided_test_on_an_antithetic_sample(rng):
    X = nr.distributions.StandardGaussian(5).sample(20_000, rng, antithetic=True)
    t = ge.symmetry_test(X, gram_rows=1000)
    # the odd sums vanish up to the round-off of the BLAS column sums: |sum| <~ n eps max|g| = 2e4 * 2.2e-16
    # * 1e2 (|x|^3 <= 5^3), so z_j <~ 5e-14 and n |z|^2 <~ 10 * 2e4 * (5e-14)^2 = 5e-22
    assert t.statistic < 1e-18 and t.p_value == 1.0


def test_null_calibration_on_a_symmetric_non_gaussian_law(rng):
    # under H0 the p-value is (asymptotically) uniform: out of 200 independent tests at level 0.05 the
    # count of rejections is Binomial(200, 0.05) (mean 10, sd 3.1) or smaller (the F law is conservative);
    # P(count > 25) = 3e-5 for an exact calibration
    law = SymmetricMixture(np.ones(3))
    pvals = [ge.symmetry_test(law.sample(4000, rng), gram_rows=400).p_value for _ in range(200)]
    assert sum(p < 0.05 for p in pvals) <= 25
    # ... and not a test that never rejects: Binomial(200, 0.05) <= 1 has probability 4e-4
    assert sum(p < 0.05 for p in pvals) >= 2


def test_power_on_a_small_shift_equals_the_all_rows_test(rng):
    # a shift mu = 0.03 of one coordinate of N(0, I_3): noncentrality n mu^2 (1 + ...) >= 1e5 * 9e-4 = 90
    # against a critical value chi2_6(1 - 1e-6) = 38: both forms reject; their statistics differ only by
    # the correlation estimate from m = 2000 rows, a relative O(sqrt(p / m)) = 5 %
    X = rng.standard_normal((100_000, 3))
    X[:, 0] += 0.03
    full, strided = ge.symmetry_test(X), ge.symmetry_test(X, gram_rows=2000)
    assert full.p_value < 1e-6 and strided.p_value < 1e-6
    assert abs(strided.statistic - full.statistic) <= 0.15 * full.statistic


def test_learner_refuses_an_asymmetric_law_with_the_strided_test(rng):
    d = k = 4
    net = nr.random_network(d, k, n_outputs=k, rng=1)
    # 60000 > max(20000, 100 d) rows: the strided form (stride 3); the shift 0.05 of every mean has
    # noncentrality >= n 0.05^2 = 150 per coordinate, far above chi2_8(1 - 1e-6) = 44
    X, Y = nr.sample(net, Gaussian(np.eye(d), mean=0.05 * np.ones(d)), 60_000, rng=rng)
    mom = ge.pure_neuron_moments(X, Y, detector=False)
    assert mom.symmetry.gram_rows == 20_000 and mom.symmetry.p_value < 1e-6
    with pytest.raises(AssumptionError, match="symmetric.*p-value"):
        ge.PureNeuronLearner(k, refine=False).fit(X, Y)
    # the symmetric law passes (p-value of a uniform variable: below 1e-6 with probability 1e-6)
    Xs, Ys = nr.sample(net, nr.distributions.StandardGaussian(d), 60_000, rng=rng)
    assert ge.pure_neuron_moments(Xs, Ys, detector=False).symmetry.p_value > ge.SYMMETRY_ALPHA
    # the plain test when asked for
    assert ge.pure_neuron_moments(X, Y, detector=False, symmetry_gram_rows=None).symmetry.gram_rows is None


def test_stride_rule_and_input_checks():
    assert gm.symmetry_stride(10**6, 100) == 50
    assert gm.symmetry_stride(10**6, 1000) == 10        # at least 50 rows per odd feature
    assert gm.symmetry_stride(10_000, 100) == 1
    assert gm.symmetry_stride(None, 100) == 1
    for bad in (0, 1.5, True):
        with pytest.raises(InputError, match="stride"):
            gm.SymmetryStatistic(bad)
    with pytest.raises(InputError, match="gram_rows"):
        ge.symmetry_test(np.ones((10, 2)), gram_rows=1)
    with pytest.raises(InputError, match="strides"):
        gm.SymmetryStatistic(2).update(np.ones((4, 2))).merge(gm.SymmetryStatistic(3).update(np.ones((4, 2))))

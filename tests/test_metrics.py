"""Tests of nnrecover.metrics: matching metrics, the exact ReLU pair kernel, and function-space errors."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate

import nnrecover as nr
from nnrecover.activations import norm_cdf, norm_pdf
from nnrecover.distributions import Gaussian, Rademacher, StandardGaussian, SymmetricMixture
from nnrecover.errors import InputError
from nnrecover.metrics import (bivariate_normal_cdf, function_error, parameter_error, relu_inner_product,
                               relu_kernel, relu_l2_distance, relu_second_moment, weight_error)


def _net(d=4, k=3, p=1, seed=0, activation="relu", bias=(-1.0, 1.0), rows="gaussian"):
    return nr.random_network(d, k, p, activation=activation, rng=seed, bias_range=bias, rows=rows,
                             output_bias_range=(-0.5, 0.5))


# ----------------------------------------------------------------------------- references

def _quad(f, lo, hi, points=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        val, _ = integrate.quad(f, lo, hi, points=points, epsabs=1e-15, epsrel=1e-14, limit=500)
    return val


def _phi2_quad(h, k, rho):
    """Phi2(h, k; rho) = int_{-inf}^h phi(x) Phi((k - rho x)/s) dx (conditioning on the first coordinate)."""
    s = math.sqrt(1 - rho * rho)
    return _quad(lambda x: norm_pdf(x) * norm_cdf((k - rho * x) / s), -40.0, h)


def _kappa_dblquad(b, c, rho):
    """kappa by genuine 2-D quadrature: x1 = u.x, x2 the orthogonal coordinate, z2 = rho x1 + s x2 + c.

    Region {x1 > -b, x2 > (-c - rho x1)/s}; Gaussian mass beyond |x| = 12 is < 1e-32."""
    s = math.sqrt(1 - rho * rho)

    def f(x2, x1):
        return (x1 + b) * (rho * x1 + s * x2 + c) * norm_pdf(x1) * norm_pdf(x2)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        val, _ = integrate.dblquad(f, -b, 12.0, lambda x1: min(max((-c - rho * x1) / s, -12.0), 12.0),
                                   lambda x1: 12.0, epsabs=1e-14, epsrel=1e-13)
    return val


def _kappa_edge_quad(b, c, sign):
    """kappa at rho = +-1: E[relu(z + b) relu(+-z + c)] as a 1-D integral over the support."""
    if sign > 0:
        return _quad(lambda z: (z + b) * (z + c) * norm_pdf(z), -min(b, c), 40.0)
    if b + c <= 0:
        return 0.0
    return _quad(lambda z: (z + b) * (c - z) * norm_pdf(z), -b, c)


def _kappa_series(b, c, rho, n_terms):
    """Hermite series kappa = sum_k c_k(b) c_k(c) rho^k / k! (Awasthi et al. Appendix B), in normalised form.

    c_0, c_1 from Lemma 3.5; for k >= 2, c_k/sqrt(k!) = (-1)^k h_{k-2}(b) phi(b) / sqrt(k (k-1)) with the
    normalised Hermite functions h_n = He_n / sqrt(n!) (recurrence h_{n+1} = (t h_n - sqrt(n) h_{n-1})/sqrt(n+1)),
    so the terms never overflow. Returns (partial sum, rigorous tail bound): by Cramer's inequality
    |h_n(t)| <= 1.0865 exp(t^2/4), so |term_k| <= 1.0865^2 e^{(b^2+c^2)/4} phi(b) phi(c) |rho|^k / (k (k-1))
    and the tail after K terms is at most that constant times sum_{k>K} 1/(k(k-1)) = 1/K.
    """
    total = (b * norm_cdf(b) + norm_pdf(b)) * (c * norm_cdf(c) + norm_pdf(c)) + norm_cdf(b) * norm_cdf(c) * rho
    hb_prev, hb = 0.0, 1.0
    hc_prev, hc = 0.0, 1.0
    pref = norm_pdf(b) * norm_pdf(c)
    rk = rho * rho
    for k in range(2, n_terms):
        n = k - 2  # hb = h_n(b)
        total += rk * hb * hc * pref / (k * (k - 1))
        hb_prev, hb = hb, (b * hb - math.sqrt(n) * hb_prev) / math.sqrt(n + 1)
        hc_prev, hc = hc, (c * hc - math.sqrt(n) * hc_prev) / math.sqrt(n + 1)
        rk *= rho
    tail = 1.0865 ** 2 * math.exp((b * b + c * c) / 4) * pref * abs(rho) ** n_terms / (n_terms - 1)
    return total, tail


# ----------------------------------------------------------------------------- bivariate normal CDF

def test_bivariate_normal_cdf_matches_quadrature_to_1e13():
    rng = np.random.default_rng(1)
    h = rng.uniform(-3, 3, 30)
    k = rng.uniform(-3, 3, 30)
    rho = rng.uniform(-0.999, 0.999, 30)
    got = bivariate_normal_cdf(h, k, rho)
    ref = np.array([_phi2_quad(*t) for t in zip(h, k, rho)])
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-13)


def test_bivariate_normal_cdf_special_values_and_broadcasting():
    # Phi2(0, 0; rho) = 1/4 + asin(rho)/(2 pi); h = 0 or k = 0 uses T(0, +-inf) = +-1/4
    rho = np.array([-0.9, -0.3, 0.0, 0.5, 0.95])
    np.testing.assert_allclose(bivariate_normal_cdf(0.0, 0.0, rho), 0.25 + np.arcsin(rho) / (2 * np.pi),
                               atol=1e-16)
    for hk in [(0.0, 0.7), (0.0, -0.7), (1.3, 0.0), (-1.3, 0.0)]:
        assert abs(bivariate_normal_cdf(*hk, 0.4) - _phi2_quad(*hk, 0.4)) < 1e-13
    # independence and the degenerate correlations
    np.testing.assert_allclose(bivariate_normal_cdf(0.3, -1.2, 0.0), norm_cdf(0.3) * norm_cdf(-1.2), atol=1e-16)
    assert bivariate_normal_cdf(0.3, -1.2, 1.0) == norm_cdf(-1.2)
    assert bivariate_normal_cdf(0.3, -1.2, -1.0) == 0.0
    assert abs(bivariate_normal_cdf(0.3, 1.2, -1.0) - (norm_cdf(0.3) + norm_cdf(1.2) - 1)) < 1e-16
    out = bivariate_normal_cdf(np.zeros((2, 1)), np.zeros((1, 3)), 0.2)
    assert out.shape == (2, 3)
    with pytest.raises(InputError, match="rho"):
        bivariate_normal_cdf(0.0, 0.0, 1.5)


# ----------------------------------------------------------------------------- the pair kernel

@pytest.mark.parametrize("b,c,rho", [(0.3, -0.5, 0.4), (-1.0, 2.0, -0.7), (1.5, 1.5, 0.9), (0.0, 0.7, 0.2),
                                     (-2.0, -1.5, 0.5), (2.0, -1.0, -0.95), (0.8, 0.1, 0.0)])
def test_relu_kernel_matches_2d_quadrature_to_1e10(b, c, rho):
    assert abs(relu_kernel(b, c, rho) - _kappa_dblquad(b, c, rho)) < 1e-10


@pytest.mark.parametrize("b,c", [(0.3, 0.3), (0.5, -0.2), (-0.7, -0.7), (2.0, 1.0), (0.0, 0.0), (-3.0, 4.0),
                                 (-1.0, 0.4)])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_relu_kernel_at_rho_plus_minus_one(b, c, sign):
    exact = float(relu_kernel(b, c, sign))
    assert abs(exact - _kappa_edge_quad(b, c, sign)) < 1e-12
    # the Hermite series converges only like 1/K at |rho| = 1; compare within its rigorous tail bound
    series, tail = _kappa_series(b, c, sign, 20_000)
    assert abs(exact - series) <= tail + 1e-12
    # continuity into the general formula: |d kappa / d rho| = Phi2 <= 1, and near |rho| = 1 the general
    # formula must not lose accuracy (the textbook form loses eps / sqrt(1 - |rho|))
    for delta in (2.220446049250313e-16, 1e-12, 1e-8):
        near = float(relu_kernel(b, c, sign * (1 - delta)))
        assert abs(near - exact) <= delta + 1e-14


def test_relu_kernel_near_rho_one_matches_price_theorem_integral():
    # kappa(b, c, 1 - delta) = kappa(b, c, 1) - int_0^delta Phi2(b, c; 1 - u) du  (Price: d kappa/d rho = Phi2)
    for b, c in [(0.3, 0.3), (1.2, 1.2), (-0.7, -0.6), (2.5, 2.5)]:
        for delta in (1e-10, 1e-8, 1e-6, 1e-3):
            ref = float(relu_kernel(b, c, 1.0)) - _quad(lambda u: float(bivariate_normal_cdf(b, c, 1 - u)), 0, delta)
            assert abs(relu_kernel(b, c, 1 - delta) - ref) < 1e-14


def test_relu_kernel_matches_hermite_series_for_inner_rho():
    # |rho| <= 0.8: the series tail after 400 terms is < 0.8^400 ~ 1e-39 (see _kappa_series)
    rng = np.random.default_rng(3)
    for b, c, rho in zip(rng.uniform(-2, 2, 8), rng.uniform(-2, 2, 8), rng.uniform(-0.8, 0.8, 8)):
        series, tail = _kappa_series(b, c, rho, 400)
        assert tail < 1e-30
        assert abs(relu_kernel(b, c, rho) - series) < 1e-13


def test_relu_kernel_rejects_bad_rho():
    with pytest.raises(InputError, match="rho"):
        relu_kernel(0.0, 0.0, 1.1)
    with pytest.raises(InputError, match="finite"):
        relu_kernel(np.nan, 0.0, 0.1)


# ----------------------------------------------------------------------------- exact L2 vs Monte Carlo

def _mc_sq_distance(f, g, n, seed):
    X = np.random.default_rng(seed).standard_normal((n, f.n_inputs))
    F, G = f.predict(X), g.predict(X)
    diff2 = ((F - G) ** 2).reshape(n, -1).sum(axis=1)
    return diff2.mean(), diff2.std(ddof=1) / math.sqrt(n)


@pytest.mark.parametrize("activation", ["relu", "leaky_relu(0.2)", "abs", "identity"])
def test_relu_l2_distance_matches_monte_carlo(activation):
    f = _net(5, 3, 2, seed=10, activation=activation)
    g = _net(5, 4, 2, seed=11, activation=activation)
    exact = relu_l2_distance(f, g, squared=True)
    mean, se = _mc_sq_distance(f, g, 200_000, seed=12)
    # the Monte Carlo mean is unbiased with standard error se: |z| < 4.5 fails with probability < 1e-5
    assert abs(exact - mean) / se < 4.5
    assert relu_second_moment(g) == pytest.approx(relu_l2_distance(g, nr.TwoLayerNetwork(
        np.ones((1, 5)), [0.0], np.zeros((2, 1)), activation="relu"), squared=True), rel=1e-13)


def test_relu_second_moment_and_inner_product_match_monte_carlo():
    f = _net(4, 3, 2, seed=20)
    g = _net(4, 2, 3, seed=21)
    X = np.random.default_rng(22).standard_normal((200_000, 4))
    F, G = f.predict(X), g.predict(X)
    exact = relu_inner_product(f, g)
    assert exact.shape == (2, 3)
    prod = F[:, :, None] * G[:, None, :]
    z = (exact - prod.mean(axis=0)) / (prod.std(axis=0, ddof=1) / math.sqrt(X.shape[0]))
    assert np.all(np.abs(z) < 4.5)
    sq = (F ** 2).sum(axis=1)
    assert abs(relu_second_moment(f) - sq.mean()) / (sq.std(ddof=1) / math.sqrt(sq.size)) < 4.5


def test_relu_l2_distance_identities():
    f = _net(6, 4, 1, seed=30)
    ef2 = relu_second_moment(f)
    # identical networks: the Gram sums cancel to round-off, ~1e-16 * E f^2 per unit pair
    assert relu_l2_distance(f, f, squared=True) <= 64 * 1e-16 * ef2
    # positive rescaling of rows (function unchanged) and unit permutation
    s = np.array([0.5, 2.0, 3.0, 0.1])
    g = nr.TwoLayerNetwork(f.hidden_weights * s[:, None], f.hidden_bias * s, f.output_weights / s,
                           f.output_bias).permuted([2, 0, 3, 1])
    assert relu_l2_distance(f, g, squared=True) <= 64 * 1e-16 * ef2
    # zero rows are constants relu(b): a network of a zero row equals its constant
    h = nr.TwoLayerNetwork(np.zeros((1, 6)), [0.7], [[2.0]], [0.1])
    assert relu_second_moment(h) == pytest.approx((2 * 0.7 + 0.1) ** 2, rel=1e-15)
    # a single ReLU unit: E relu(z + b)^2 = (1 + b^2) Phi(b) + b phi(b)
    u = nr.TwoLayerNetwork(np.array([[0.6, 0.8, 0, 0, 0, 0]]), [0.4])
    assert relu_second_moment(u) == pytest.approx((1 + 0.16) * norm_cdf(0.4) + 0.4 * norm_pdf(0.4), rel=1e-14)
    # distance to the zero network is the norm
    zero = nr.TwoLayerNetwork(np.ones((1, 6)), [0.0], [[0.0]])
    assert relu_l2_distance(f, zero) == pytest.approx(math.sqrt(ef2), rel=1e-14)


def test_relu_l2_rejects_other_activations_and_shapes():
    with pytest.raises(InputError, match="activation"):
        relu_l2_distance(_net(activation="sigmoid"), _net(activation="sigmoid"))
    with pytest.raises(InputError, match="outputs"):
        relu_l2_distance(_net(p=1), _net(p=2))
    with pytest.raises(InputError, match="TwoLayerNetwork"):
        relu_second_moment(np.eye(3))


# ----------------------------------------------------------------------------- function_error

def test_function_error_zero_on_identical_networks_and_deterministic():
    f = _net(4, 3, 2, seed=40)
    assert function_error(f, f.copy(), StandardGaussian(4), n=5000, rng=0) == 0.0
    g = _net(4, 3, 2, seed=41)
    e1 = function_error(g, f, StandardGaussian(4), n=10_000, rng=5, chunk_size=3000)
    e2 = function_error(g, f, StandardGaussian(4), n=10_000, rng=5, chunk_size=3000)
    assert e1 == e2 and e1 > 0
    assert function_error(f, f, StandardGaussian(4), method="exact") <= 1e-7


@pytest.mark.parametrize("dist", [StandardGaussian(4), Gaussian(np.diag([2.0, 0.5, 1.0, 1.5]) + 0.2,
                                                                 mean=[0.3, -0.2, 0.0, 0.1]),
                                  SymmetricMixture([[1.0, 0.0, 0.5, 0.0], [0.0, -0.7, 0.0, 0.3]])])
def test_function_error_exact_matches_monte_carlo(dist):
    f, g = _net(4, 3, 1, seed=50), _net(4, 3, 1, seed=51)
    exact = function_error(g, f, dist, method="exact")
    n = 200_000
    X = dist.sample(n, np.random.default_rng(52))
    d2, f2 = (g.predict(X) - f.predict(X)) ** 2, f.predict(X) ** 2
    # delta method for the ratio r^2 = E d2 / E f2: var(r^2) ~ var(d2 - r^2 f2) / (n E[f2]^2)
    r2 = exact ** 2
    se = np.std(d2 - r2 * f2, ddof=1) / (math.sqrt(n) * f2.mean())
    assert abs(d2.mean() / f2.mean() - r2) / se < 4.5
    mc = function_error(g, f, dist, n=n, rng=52, chunk_size=n)  # one chunk: the same draws as X
    assert mc == pytest.approx(math.sqrt(d2.mean() / f2.mean()), rel=1e-12)


def test_function_error_validation():
    f = _net(4, 3)
    with pytest.raises(InputError, match="dim"):
        function_error(f, f, StandardGaussian(5), n=100, rng=0)
    with pytest.raises(InputError, match="n must be"):
        function_error(f, f, StandardGaussian(4), n=0)
    with pytest.raises(InputError, match="method"):
        function_error(f, f, StandardGaussian(4), method="quadrature")
    with pytest.raises(InputError, match="Gaussian"):
        function_error(f, f, Rademacher(4), method="exact")
    with pytest.raises(InputError, match="distribution"):
        function_error(f, f, "gaussian")
    zero = nr.TwoLayerNetwork(np.ones((1, 4)), [0.0], [[0.0]])
    with pytest.raises(InputError, match="relative=False"):
        function_error(f, zero, StandardGaussian(4), n=100, rng=0)
    assert function_error(f, zero, StandardGaussian(4), method="exact", relative=False) == pytest.approx(
        math.sqrt(relu_second_moment(f)), rel=1e-14)


# ----------------------------------------------------------------------------- parameter_error

@settings(max_examples=30, deadline=None)
@given(st.permutations(list(range(5))), st.integers(0, 2**31 - 1))
def test_parameter_error_permutation_invariant(order, seed):
    truth = _net(6, 5, 2, seed=seed)
    res = parameter_error(truth.permuted(order), truth)
    assert res["max_unit_error"] == 0.0
    # matching[i] is the position of true unit i in the permuted estimate
    np.testing.assert_array_equal(np.asarray(order)[res["matching"]], np.arange(5))
    assert res["missing_units"] == [] and res["extra_units"] == [] and res["n_sign_flips"] == 0


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.05, 20.0), min_size=4, max_size=4), st.integers(0, 2**31 - 1))
def test_parameter_error_canonical_scaling_invariant(scales, seed):
    truth = _net(5, 4, 1, seed=seed, activation="leaky_relu(0.1)")
    s = np.asarray(scales)
    est = nr.TwoLayerNetwork(truth.hidden_weights * s[:, None], truth.hidden_bias * s,
                             truth.output_weights / s, truth.output_bias, truth.activation)
    # canonical() divides by the row norm: a few ulps per entry
    assert parameter_error(est, truth)["max_unit_error"] < 1e-13
    # without canonicalisation the rescaled rows differ (rows are nonzero Gaussian draws)
    assert (parameter_error(est, truth, canonical=False)["max_unit_error"] > 0) == bool(np.any(s != 1.0))


def test_parameter_error_known_perturbation_and_sign_flip():
    truth = _net(5, 3, 2, seed=60, rows="unit")
    est = truth.copy()
    est.hidden_bias[1] += 1e-3
    est.output_weights[:, 2] += np.array([3e-4, -4e-4])  # norm 5e-4
    res = parameter_error(est, truth)
    assert res["max_unit_error"] == pytest.approx(1e-3, rel=1e-9)
    np.testing.assert_allclose(res["per_unit"], [0.0, 1e-3, 5e-4], rtol=1e-9, atol=1e-15)
    assert res["mean_unit_error"] == pytest.approx(5e-4, rel=1e-9)
    # flip (b, w) of unit 0: an error unless sign flips are allowed
    flipped = truth.copy()
    flipped.hidden_weights[0] *= -1
    flipped.hidden_bias[0] *= -1
    assert parameter_error(flipped, truth)["max_unit_error"] > 1.0
    res = parameter_error(flipped, truth, allow_sign_flip=True)
    assert res["max_unit_error"] == 0.0
    np.testing.assert_array_equal(res["sign_flips"], [True, False, False])
    est.output_bias += 0.25
    assert parameter_error(est, truth)["output_bias_error"] == pytest.approx(0.25 * math.sqrt(2))


def test_parameter_error_missing_and_extra_units():
    truth = _net(5, 3, 1, seed=61, rows="unit")
    fewer = nr.TwoLayerNetwork(truth.hidden_weights[[0, 2]], truth.hidden_bias[[0, 2]],
                               truth.output_weights[:, [0, 2]], truth.output_bias)
    res = parameter_error(fewer, truth)
    assert res["missing_units"] == [1]
    assert res["matching"].tolist() == [0, -1, 1]
    expected = 1.0 + abs(truth.hidden_bias[1]) + abs(truth.output_weights[0, 1])
    assert res["max_unit_error"] == pytest.approx(expected, rel=1e-14)
    more = nr.TwoLayerNetwork(np.vstack([truth.hidden_weights, np.eye(5)[:1]]),
                              np.append(truth.hidden_bias, 0.5), np.append(truth.output_weights, [[0.0]], axis=1),
                              truth.output_bias)
    res = parameter_error(more, truth)
    assert res["max_unit_error"] == 0.0 and res["extra_units"] == [3]
    assert res["extra_output_weight_norms"].tolist() == [0.0]
    assert res["max_unit_error_with_extra"] == pytest.approx(1.5)


def test_parameter_error_validation():
    with pytest.raises(InputError, match="inputs"):
        parameter_error(_net(4, 2), _net(5, 2))
    with pytest.raises(InputError, match="outputs"):
        parameter_error(_net(4, 2, 1), _net(4, 2, 2))
    with pytest.raises(InputError, match="TwoLayerNetwork"):
        parameter_error(np.eye(2), _net(4, 2))


# ----------------------------------------------------------------------------- parameter_error of deep networks

def _deep(sizes=(5, 4, 3, 2), seed=0, activation="relu"):
    gen = np.random.default_rng(seed)
    return nr.DeepNetwork([gen.standard_normal((sizes[i + 1], sizes[i])) for i in range(len(sizes) - 1)],
                          [gen.uniform(-1.0, 1.0, sizes[i + 1]) for i in range(len(sizes) - 1)], activation)


def _permuted_and_rescaled(net, seed):
    """The same function: hidden units of each layer permuted and their incoming weights scaled by s > 0
    (the outgoing column divided by s**q); returns the network and the permutations."""
    gen = np.random.default_rng(seed)
    q = net.activation.degree
    Ws, bs = [W.copy() for W in net.weights], [b.copy() for b in net.biases]
    perms = []
    for l, n in enumerate(net.hidden_sizes):
        perm, s = gen.permutation(n), gen.uniform(0.05, 20.0, n)
        Ws[l], bs[l] = Ws[l][perm] * s[:, None], bs[l][perm] * s
        Ws[l + 1] = Ws[l + 1][:, perm] / s ** q
        perms.append(perm)
    return nr.DeepNetwork(Ws, bs, net.activation), perms


@pytest.mark.parametrize("activation", ["relu", "leaky_relu(0.1)", "relu_power(2)"])
@pytest.mark.parametrize("sizes", [(5, 4, 3, 2), (3, 6, 5, 4, 1)])
def test_deep_parameter_error_is_zero_for_permuted_rescaled_copies(activation, sizes):
    truth = _deep(sizes, seed=80, activation=activation)
    est, perms = _permuted_and_rescaled(truth, seed=81)
    X = np.random.default_rng(82).standard_normal((20, sizes[0]))
    np.testing.assert_allclose(est.predict(X), truth.predict(X), rtol=1e-12, atol=1e-12)  # the same function
    res = parameter_error(est, truth)
    # canonical forms: a few ulps of the largest canonical parameter (relu_power(2) gathers the squared row
    # norms of every layer into the output weights, here 5e4)
    scale = max(1.0, *(np.abs(a).max() for a in truth.canonical().weights + truth.canonical().biases))
    assert res["max_unit_error"] < 1e-12 * scale and res["output_error"] < 1e-12 * scale
    assert len(res["per_layer"]) == len(sizes) - 2 and max(res["per_layer"]) == res["max_unit_error"]
    # matchings[l][i] is the position of true unit i of hidden layer l + 1 in the estimate
    for perm, matching in zip(perms, res["matchings"]):
        np.testing.assert_array_equal(perm[matching], np.arange(perm.size))
    assert res["canonical"] and res["same_activation"]
    assert parameter_error(est, truth, canonical=False)["max_unit_error"] > 1e-3


def test_deep_parameter_error_equals_a_known_perturbation():
    truth = _deep((5, 4, 3, 2), seed=83).canonical()
    delta = 1e-3
    out = [W.copy() for W in truth.weights]
    out[2][1, 2] += delta  # an output weight: the outgoing column of unit 2 of the last hidden layer
    res = parameter_error(nr.DeepNetwork(out, truth.biases), truth)
    assert abs(res["max_unit_error"] - delta) < 1e-12 and abs(res["output_error"] - delta) < 1e-12
    assert res["per_layer"][0] < 1e-12 and abs(res["per_layer"][1] - delta) < 1e-12
    assert abs(res["per_unit"][1][2] - delta) < 1e-12 and abs(res["outgoing_errors"][1][2] - delta) < 1e-12
    biases = [b.copy() for b in truth.biases]
    biases[0][3] -= delta  # a hidden bias of layer 1: the canonical rows do not move
    res = parameter_error(nr.DeepNetwork(truth.weights, biases), truth)
    assert abs(res["max_unit_error"] - delta) < 1e-12 and abs(res["bias_errors"][0][3] - delta) < 1e-12
    assert res["per_layer"][1] < 1e-12 and res["output_error"] < 1e-12
    weights = [W.copy() for W in truth.weights]
    weights[1][0, 0] += delta  # an incoming weight of layer 2: its row, bias and column change in canonical form
    res = parameter_error(nr.DeepNetwork(weights, truth.biases), truth)
    assert 0.1 * delta < res["per_layer"][1] < 10 * delta


def test_deep_parameter_error_of_one_hidden_layer_is_the_two_layer_error():
    truth, est = _net(5, 4, 2, seed=84), _net(5, 4, 2, seed=85)
    expected = parameter_error(est, truth)
    deep = nr.DeepNetwork.from_two_layer
    for res in (parameter_error(deep(est), truth), parameter_error(est, deep(truth)),
                parameter_error(deep(est), deep(truth))):
        assert res["max_unit_error"] == expected["max_unit_error"]
        np.testing.assert_array_equal(res["matchings"][0], expected["matching"])
        np.testing.assert_array_equal(res["per_unit"][0], expected["per_unit"])


def test_deep_parameter_error_validation():
    with pytest.raises(InputError, match=r"layer_sizes \(5, 4, 3, 2\) but the truth has \(5, 4, 2, 2\)"):
        parameter_error(_deep((5, 4, 3, 2)), _deep((5, 4, 2, 2)))
    with pytest.raises(InputError, match=r"layer_sizes \(5, 4, 2\) but the truth has \(5, 4, 3, 2\)"):
        parameter_error(_net(5, 4, 2), _deep((5, 4, 3, 2)))
    with pytest.raises(InputError, match="allow_sign_flip"):
        parameter_error(_deep(), _deep(), allow_sign_flip=True)
    with pytest.raises(InputError, match="TwoLayerNetwork"):
        parameter_error(np.eye(2), _deep())


def test_function_error_of_deep_networks():
    truth, est = _deep((4, 5, 3, 2), seed=86), _deep((4, 5, 3, 2), seed=87)
    dist = StandardGaussian(4)
    X = dist.sample(5000, np.random.default_rng(88))
    expected = math.sqrt(np.sum((est.predict(X) - truth.predict(X)) ** 2) / np.sum(truth.predict(X) ** 2))
    assert function_error(est, truth, dist, n=5000, rng=88, chunk_size=5000) == pytest.approx(expected, rel=1e-12)
    assert function_error(truth, truth.copy(), dist, n=1000, rng=0) == 0.0
    with pytest.raises(InputError, match="estimated has 4 inputs but the distribution has dim 3"):
        function_error(est, truth, StandardGaussian(3), n=100, rng=0)
    with pytest.raises(InputError, match="one hidden layer; estimated is a DeepNetwork.*monte_carlo"):
        function_error(est, truth, dist, method="exact")
    # one hidden layer: the exact route of its TwoLayerNetwork
    f, g = _net(4, 3, 1, seed=89), _net(4, 3, 1, seed=90)
    assert (function_error(nr.DeepNetwork.from_two_layer(g), nr.DeepNetwork.from_two_layer(f), dist, method="exact")
            == function_error(g, f, dist, method="exact"))


# ----------------------------------------------------------------------------- weight_error

def test_weight_error_tiny_angles_signs_and_matching():
    rng = np.random.default_rng(70)
    W = rng.standard_normal((3, 6))
    # rotate row 1 by 1e-12 inside a plane: arccos(cos) would give exactly 0 here
    u = W[1] / np.linalg.norm(W[1])
    v = rng.standard_normal(6)
    v -= (v @ u) * u
    v /= np.linalg.norm(v)
    est = W.copy()
    est[1] = 2.5 * (math.cos(1e-12) * u + math.sin(1e-12) * v)
    res = weight_error(est[[2, 0, 1]], W)
    assert res["max_angle"] == pytest.approx(1e-12, rel=1e-3)
    assert res["matching"].tolist() == [1, 2, 0]
    assert res["max_norm_ratio_error"] == pytest.approx(abs(2.5 / np.linalg.norm(W[1]) - 1), rel=1e-12)
    # sign counts: w and -w are at angle pi (one row, so the matching cannot avoid it)
    res = weight_error(-W[:1], W[:1])
    assert res["max_angle"] == pytest.approx(math.pi, abs=1e-15)
    assert res["sign_flips"].tolist() == [True]
    assert res["max_angle_up_to_sign"] < 1e-15 and res["max_abs_cos_error"] < 1e-15
    flipped = W.copy()
    flipped[0] *= -1
    assert weight_error(flipped, W)["max_angle"] > 0.5
    res = weight_error(flipped, W, allow_sign_flip=True)
    assert res["max_angle"] < 1e-15 and res["sign_flips"].tolist() == [True, False, False]


def test_weight_error_missing_rows_and_validation():
    W = np.eye(3)
    res = weight_error(W[:2], W)
    assert res["missing_rows"] == [2] and res["max_angle"] == pytest.approx(math.pi / 2)
    assert weight_error(np.vstack([W, [1.0, 1.0, 0.0]]), W)["extra_rows"] == [3]
    with pytest.raises(InputError, match="zero row"):
        weight_error(W, np.zeros((2, 3)))
    with pytest.raises(InputError, match="columns"):
        weight_error(np.eye(2), W)
    with pytest.raises(InputError, match="NaN"):
        weight_error(np.full((2, 3), np.nan), W)

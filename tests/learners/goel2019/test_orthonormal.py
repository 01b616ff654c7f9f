"""Goel-Panigrahy 2019, Appendix B.1 and Theorem 10: sphere maximisation with orthonormal weights."""

import itertools
import math

import numpy as np
import pytest
from scipy.stats import ortho_group

from nnrecover.errors import AssumptionError, InputError
from nnrecover.learners.goel2019.model import (HighThresholdNetwork, population_hermite_moment,
                                               random_unit_weights, threshold_hermite_coefficients)
from nnrecover.learners.goel2019.orthonormal import (EvenActivationNetwork, PowerSumForm, QuarticForm,
                                                     SampleHermiteCorrelation, even_activation_recovery,
                                                     even_hermite_coefficients, orthonormal_sphere_route,
                                                     sphere_maximization, theorem10_condition)


def _match(D, W):
    """|cos| of each true row with its best estimate, and the estimate order."""
    C = np.abs(D @ W.T)
    return C.max(axis=0)


def _linear_net(rng, d=4, n=6, t=2.0):
    W = random_unit_weights(d, n, rng=rng)
    c = np.array([1.0, 0.7, 1.3, 0.9])[:d]
    coefs = {tuple(int(j == i) for j in range(d)): float(c[i]) for i in range(d)}
    return HighThresholdNetwork(W, t, "step", coefs), W, c


# ------------------------------------------------------------------ Appendix B.1
@pytest.mark.parametrize("order", [4, 6])
def test_power_sum_form_matches_population_hermite_moment(order):
    net, W, c = _linear_net(0)
    src = PowerSumForm.from_network(net, order)
    T = population_hermite_moment(net, order)
    z = np.random.default_rng(1).standard_normal(6)
    z /= np.linalg.norm(z)
    contracted = T
    for _ in range(order - 1):
        contracted = contracted @ z                            # T(I, z, .., z)
    norm = math.sqrt(math.factorial(order))
    assert src.value(z[:, None])[0] == pytest.approx(contracted @ z / norm, rel=1e-12)
    np.testing.assert_allclose(src.action(z[:, None])[:, 0], contracted / norm, rtol=1e-11, atol=1e-16)


@pytest.mark.parametrize("order", [4, 6])
def test_appendix_b1_population_recovers_w_exactly(order):
    net, W, c = _linear_net(0)
    src = PowerSumForm.from_network(net, order)
    # maximise sgn(u_hat_l) F: u_hat_6 of the step at t = 2 is phi(2) He_5(2)/sqrt(720) < 0
    assert np.all(np.sign(src.a) == np.sign(threshold_hermite_coefficients("step", 2.0, order)[order]))
    res = sphere_maximization(src, 4, maximize=bool(src.a[0] > 0), rng=3)
    assert np.all(1.0 - _match(res.directions, W) < 1e-12)
    assert np.all(res.hessian_max < 0)                          # certified local maxima
    assert np.all(res.gradient_norms < 1e-12)


def test_sample_correlation_action_is_gradient_over_l():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((500, 5))
    y = rng.standard_normal(500)
    src = SampleHermiteCorrelation(X, y, 6)
    z = rng.standard_normal(5)
    z /= np.linalg.norm(z)

    def homog(v):                                               # |v|^l F(v/|v|): the homogeneous extension
        r = np.linalg.norm(v)
        return r ** 6 * src.value((v / r)[:, None])[0]

    h = 1e-6
    fd = np.array([(homog(z + h * e) - homog(z - h * e)) / (2 * h) for e in np.eye(5)])
    np.testing.assert_allclose(6 * src.action(z[:, None])[:, 0], fd, rtol=1e-6, atol=1e-9)


def test_appendix_b1_samples_within_derived_error():
    net, W, c = _linear_net(0)
    N = 300_000
    X = np.random.default_rng(5).standard_normal((N, 6))
    y = net.predict(X)
    res = orthonormal_sphere_route(X, y, 4, activation="step", threshold=2.0, rng=0)
    # Sign resolved by the first-order test: every estimate points along its unit (not its negative).
    C = res.directions @ W.T
    assert np.all(C.max(axis=0) > 0.9)
    # Derived tolerance: the maximiser moves by delta = g_tan / (l a_i) with g_tan the tangential sample
    # gradient at w_i, l a_i the curvature (F = a_i cos^4 theta near w_i; the other units add no curvature
    # at w_i for orthonormal W). Per sample g_tan = 4 y~ He_3(w_i.x) P_perp x / sqrt(24), so
    # E|delta|^2 = E[y~^2 He_3^2 |P_perp x|^2] / (N 24 a_i^2). Deflation carries the earlier errors into
    # the later components, hence the bound uses the root-sum of all of them; 5 standard deviations.
    u4 = threshold_hermite_coefficients("step", 2.0, 4)[4]
    var = 0.0
    for i in range(4):
        a = X @ W[i]
        perp2 = np.einsum("ij,ij->i", X, X) - a * a
        var += np.mean(y ** 2 * (a ** 3 - 3 * a) ** 2 * perp2) / (N * 24 * (u4 * c[i]) ** 2)
    angles = np.arccos(np.clip(C.max(axis=0), -1, 1))
    assert angles.max() < 5 * math.sqrt(var)


def test_appendix_b1_refuses_vanishing_hermite_coefficient_and_odd_order():
    net, W, c = _linear_net(0)
    X = np.random.default_rng(0).standard_normal((2000, 6))
    y = net.predict(X)
    with pytest.raises(AssumptionError, match="u_hat_4"):       # step at t = sqrt(3): He_3(t) = 0
        orthonormal_sphere_route(X, y, 4, activation="step", threshold=math.sqrt(3.0))
    with pytest.raises(InputError, match="even"):
        orthonormal_sphere_route(X, y, 4, activation="step", threshold=2.0, order=5)
    with pytest.raises(InputError, match="no unit fired"):
        orthonormal_sphere_route(X, np.zeros(2000), 4, activation="step", threshold=2.0)


# ------------------------------------------------------------------ Theorem 10
def test_even_hermite_coefficients_closed_forms():
    k = np.arange(5)
    cosh = np.where(k % 2 == 0, math.exp(0.5) / np.sqrt([math.factorial(j) for j in k]), 0.0)
    np.testing.assert_allclose(even_hermite_coefficients(np.cosh), cosh, rtol=1e-11, atol=1e-14)
    s = math.sqrt(2 / math.pi)                                  # E|g| = s, E|g|^3 = 2s, E|g|^5 = 8s
    absval = np.array([s, 0, (2 * s - s) / math.sqrt(2), 0, (8 * s - 12 * s + 3 * s) / math.sqrt(24)])
    np.testing.assert_allclose(even_hermite_coefficients(np.abs), absval, rtol=1e-10, atol=1e-14)
    with pytest.raises(AssumptionError, match="even"):
        even_hermite_coefficients(np.exp)


def test_theorem10_quartic_matches_quadrature():
    # u = a^4 and cosh: F(z) = E[f h_4(z.x)] by tensor Gauss-Hermite quadrature (exact for polynomials,
    # converged to round-off for cosh) vs the corrected closed form (sqrt(6) u_hat_2^2, no beta term).
    nodes, w = np.polynomial.hermite_e.hermegauss(60)
    w = w / math.sqrt(2 * math.pi)
    G = np.array(list(itertools.product(nodes, nodes)))
    wt = np.outer(w, w).ravel()
    R = ortho_group.rvs(2, random_state=2)
    for u in (lambda a: a ** 4, np.cosh):
        net = EvenActivationNetwork(R, u, {(1, 0): 0.5, (0, 1): 1.5, (1, 1): 0.7})
        q = net.quartic_form()
        for z in (np.array([0.6, 0.8]), np.array([1.0, 0.0]), np.array([-0.28, 0.96])):
            a = G @ z
            quad = wt @ (net.predict(G) * (a ** 4 - 6 * a ** 2 + 3) / math.sqrt(24))
            assert q.value(z[:, None])[0] == pytest.approx(quad, rel=1e-10)


def _thm10(cij, u=np.cosh, seed=1):
    W = ortho_group.rvs(3, random_state=seed)
    P = {(1, 0, 0): 1.0, (0, 1, 0): 1.0, (0, 0, 1): 1.0, (1, 1, 0): cij, (0, 1, 1): cij, (1, 0, 1): cij}
    return EvenActivationNetwork(W, u, P), W


def test_theorem10_condition_met_population_recovers_e_i():
    net, W = _thm10(0.1)
    q = net.quartic_form()
    cond = theorem10_condition(q.alpha, q.gamma)
    assert cond["met"] and cond["vertices_are_maxima"]
    res = sphere_maximization(q, 3, rng=0)
    assert np.all(1.0 - _match(res.directions, W) < 1e-12)
    assert np.all(res.hessian_max[:2] < 0)


def test_theorem10_condition_violated_gives_mixed_maximum():
    # gamma_ij > 2 alpha (cosh, c_ij = 1): the theory predicts the fully mixed point (w_1+w_2+w_3)/sqrt(3)
    # as the global maximum, and no +-w_i is a local maximum.
    net, W = _thm10(1.0)
    q = net.quartic_form()
    cond = theorem10_condition(q.alpha, q.gamma)
    assert not cond["met"] and not cond["vertices_are_maxima"]
    assert cond["margins"][0, 1] < 0
    res = sphere_maximization(q, 1, rng=0)
    np.testing.assert_allclose(np.abs(res.directions[0] @ W.T), np.full(3, 1 / math.sqrt(3)), atol=1e-10)
    assert res.hessian_max[0] < 0
    # a vertex is a saddle here: moving from w_1 towards w_2 increases F
    th = 1e-3
    assert q.value((math.cos(th) * W[0] + math.sin(th) * W[1])[:, None])[0] > q.value(W[0][:, None])[0]


def test_theorem10_samples_abs_activation_within_derived_error():
    # u = |a| has u_hat_4 < 0: alpha_i < 0 and the algorithm minimises F.
    net, W = _thm10(0.1, u=np.abs)
    q = net.quartic_form()
    assert np.all(q.alpha < 0) and theorem10_condition(q.alpha, q.gamma)["met"]
    N = 200_000
    X = np.random.default_rng(7).standard_normal((N, 3))
    y = net.predict(X)
    res = even_activation_recovery(X, y, 3, activation=np.abs, rng=0)
    assert res.info["maximize"] is False
    # Derived tolerance: at w_i the Riemannian Hessian of F towards w_j is -4 alpha_i + 2 gamma_ij and the
    # tangential sample gradient is 4 E^[y~ He_3(w_i.x) (w_j.x)] / sqrt(24); their ratio is the moved angle.
    yt = y - y.mean()
    var = 0.0
    for i in range(3):
        a = X @ W[i]
        for j in range(3):
            if j != i:
                g2 = np.mean((yt * (a ** 3 - 3 * a) * (X @ W[j])) ** 2) * 16 / 24 / N
                var += g2 / (4 * q.alpha[i] - 2 * q.gamma[i, j]) ** 2
    angles = np.arccos(np.clip(_match(res.directions, W), -1, 1))
    assert angles.max() < 5 * math.sqrt(var)


def test_even_network_refuses_non_orthonormal_weights():
    with pytest.raises(AssumptionError, match="orthonormal"):
        EvenActivationNetwork(np.array([[1.0, 0.0], [0.6, 0.8]]), np.cosh, {(1, 0): 1.0, (0, 1): 1.0})
    with pytest.raises(InputError, match="symmetric"):
        QuarticForm(np.eye(2), [1.0, 1.0], [[0.0, 1.0], [0.0, 0.0]])
    with pytest.raises(InputError, match="source must provide"):
        sphere_maximization(np.eye(2), 1)
    with pytest.raises(InputError, match="exceeds"):
        sphere_maximization(QuarticForm(np.eye(2), [1.0, 1.0], np.zeros((2, 2))), 3)

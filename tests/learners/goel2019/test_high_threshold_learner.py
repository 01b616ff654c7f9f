"""Goel & Panigrahy (2019) main line: model, statistics, the three Step 1 routes, the learner."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import integrate

import nnrecover as nr
from nnrecover.errors import AssumptionError, AssumptionWarning, InputError
from nnrecover.hermite import hermite_tensor
from nnrecover.learners.goel2019 import (STEP1_METHODS, HighThresholdLearner, HighThresholdNetwork,
                                         PopulationMoments, SampleMoments, UpperPolynomial, landscape_objective,
                                         population_hermite_moment, random_unit_weights, random_upper_polynomial,
                                         simultaneous_objective, step1, threshold_activation,
                                         threshold_hermite_coefficients, violating_upper_polynomial,
                                         whitening_basis)
from nnrecover.learners.goel2019.statistics import check_gaussian_inputs
from nnrecover.metrics import weight_error


def _network(d, n, cond, act, t, *, upper=None, seed=0):
    W = random_unit_weights(d, n, condition_number=cond, rng=seed)
    if upper is None:
        c = np.random.default_rng(seed + 1).uniform(0.5, 1.5, d)
        upper = UpperPolynomial.linear(c, 0.3)
    return HighThresholdNetwork(W, t, act, upper)


# ---------------------------------------------------------------------------------------------- model

@pytest.mark.parametrize("act", ["step", "relu", "sigmoid"])
@pytest.mark.parametrize("t", [1.0, 2.5])
def test_hermite_coefficients_match_quadrature(act, t):
    u = threshold_activation(act, t)
    got = threshold_hermite_coefficients(act, t, 5)
    for k in range(6):
        he = np.polynomial.hermite_e.HermiteE.basis(k)

        def f(g):
            return u(g) * he(g) * math.exp(-g * g / 2) / math.sqrt(2 * math.pi * math.factorial(k))
        ref = integrate.quad(f, -15, t, limit=200)[0] + integrate.quad(f, t, 15, limit=200)[0]
        assert abs(got[k] - ref) < 1e-12


def test_relu_power_coefficients_match_quadrature():
    got = threshold_hermite_coefficients("relu", 1.5, 4, power=2)
    for k in range(5):
        he = np.polynomial.hermite_e.HermiteE.basis(k)
        ref = integrate.quad(lambda g: (g - 1.5) ** 2 * he(g) * math.exp(-g * g / 2), 1.5, 15)[0] \
            / math.sqrt(2 * math.pi * math.factorial(k))
        assert abs(got[k] - ref) < 1e-12


def test_network_predict_save_load(tmp_path):
    W = random_unit_weights(3, 4, rng=0)
    P = UpperPolynomial({(0, 0, 0): 0.5, (1, 0, 0): 1.0, (0, 1, 0): 2.0, (0, 0, 1): 1.5, (1, 1, 0): -0.3,
                         (2, 0, 1): 0.7})
    net = HighThresholdNetwork(W, 1.2, "relu", P)
    X = np.random.default_rng(1).standard_normal((7, 4))
    H = np.maximum(X @ W.T - 1.2, 0)
    manual = 0.5 + H[:, 0] + 2 * H[:, 1] + 1.5 * H[:, 2] - 0.3 * H[:, 0] * H[:, 1] + 0.7 * H[:, 0] ** 2 * H[:, 2]
    np.testing.assert_allclose(net.predict(X), manual, rtol=1e-14)
    path = tmp_path / "net.json"
    net.save(path)
    back = HighThresholdNetwork.load(path)
    assert back.upper == net.upper and back.threshold == net.threshold and back.activation == "relu"
    np.testing.assert_array_equal(back.hidden_weights, W)
    with pytest.raises(InputError, match=".json"):
        net.save(tmp_path / "net.pkl")


def test_network_validation():
    with pytest.raises(InputError, match="unit norm"):
        HighThresholdNetwork(2 * np.eye(2), 1.0)
    with pytest.raises(InputError, match="activation"):
        HighThresholdNetwork(np.eye(2), 1.0, "tanh")
    with pytest.raises(InputError, match="exponent"):
        UpperPolynomial({(1, -1): 1.0})
    with pytest.raises(InputError, match="variables"):
        HighThresholdNetwork(np.eye(2), 1.0, upper={(1, 0, 0): 1.0})


def test_monotonicity_and_generators():
    assert UpperPolynomial.or_polynomial(4).is_monotone("binary")
    assert not UpperPolynomial.or_polynomial(4).is_monotone("nonnegative")   # negative c_S on [0, inf)^d
    assert random_upper_polynomial(5, monotone=True, rng=0).is_monotone("nonnegative")
    assert not violating_upper_polynomial(5, "monotone", rng=0).is_monotone("binary")
    assert violating_upper_polynomial(5, "linear", rng=0).linear_coefficients[0] == 0
    assert violating_upper_polynomial(5, "bounded", rng=0).max_product_coefficient() == 50
    W = random_unit_weights(6, 8, condition_number=2.0, rng=3)
    np.testing.assert_allclose(np.linalg.norm(W, axis=1), 1, atol=1e-14)
    assert abs(np.linalg.cond(W) - 2.0) < 1e-6


def test_population_moments_match_monte_carlo():
    """Product-Hermite formula (orthonormal W, P with a square and products) against a sample mean.

    Tolerance: 5 standard errors of the sample mean of f(x) He_k(z.x)-contractions (estimated on the
    same samples), so a correct formula fails with probability < 1e-6.
    """
    W = random_unit_weights(3, 4, rng=1)
    P = UpperPolynomial({(0, 0, 0): 0.3, (1, 0, 0): 1.0, (0, 1, 0): 0.8, (0, 0, 1): 1.2, (1, 1, 0): 0.6,
                         (1, 1, 1): -0.9, (2, 0, 1): 0.7})
    net = HighThresholdNetwork(W, 1.0, "relu", P)
    rng = np.random.default_rng(2)
    X = rng.standard_normal((400_000, 4))
    y = net.predict(X)
    z = rng.standard_normal(4)
    z /= np.linalg.norm(z)
    a = X @ z
    for k, he in ((2, a * a - 1), (3, a ** 3 - 3 * a), (4, a ** 4 - 6 * a * a + 3)):
        exact = population_hermite_moment(net, k)
        for _ in range(k):
            exact = exact @ z
        vals = y * he
        assert abs(exact - vals.mean()) < 5 * vals.std() / math.sqrt(vals.size)


def test_population_moment_refuses_products_with_correlated_rows():
    net = _network(3, 3, 2.0, "step", 2.0, upper=random_upper_polynomial(3, rng=0))
    with pytest.raises(AssumptionError, match="orthonormal"):
        population_hermite_moment(net, 2)


# ---------------------------------------------------------------------------------------------- statistics

def test_sample_contractions_equal_dense_hermite_tensor():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((40, 4)), rng.standard_normal(40)
    sm = SampleMoments(X, y, 40, "relu", 2.0)
    u = threshold_hermite_coefficients("relu", 2.0, 4)
    T4 = np.einsum("s,sijkl->ijkl", y, hermite_tensor(4, X)) / (40 * math.sqrt(24) * u[4])
    T2 = np.einsum("s,sij->ij", y, hermite_tensor(2, X)) / (40 * math.sqrt(2) * u[2])
    pm = PopulationMoments(tensors=(X.T @ y / (40 * u[1]), T2, T4), activation="relu", threshold=2.0)
    Z = rng.standard_normal((4, 3))
    a, b, c = Z.T
    for got, ref in ((sm.second(), pm.second()), (sm.t4(a, b, c), pm.t4(a, b, c)),
                     (sm.t4_matrix(a), pm.t4_matrix(a)), (sm.t4_batch(Z), pm.t4_batch(Z)),
                     (sm.t4_sum(Z), pm.t4_sum(Z)), (sm.t4_pairs(Z), pm.t4_pairs(Z))):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


def test_objective_gradients_match_finite_differences():
    net = _network(4, 4, 2.0, "step", 2.0)
    pm = PopulationMoments(net)
    z = np.random.default_rng(0).standard_normal(4)
    f, g, H = landscape_objective(pm, z, 4.0)
    h = 1e-6
    E = np.eye(4) * h
    g_fd = np.array([(landscape_objective(pm, z + e, 4.0)[0] - landscape_objective(pm, z - e, 4.0)[0]) / (2 * h)
                     for e in E])
    H_fd = np.array([(landscape_objective(pm, z + e, 4.0)[1] - landscape_objective(pm, z - e, 4.0)[1]) / (2 * h)
                     for e in E])
    np.testing.assert_allclose(g, g_fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(H, H_fd, rtol=1e-6, atol=1e-7)
    W = np.random.default_rng(1).standard_normal((4, 4))
    _, G = simultaneous_objective(pm, W, 0.01, 4.0)
    G_fd = np.zeros_like(W)
    for i in range(4):
        for j in range(4):
            D = np.zeros_like(W)
            D[i, j] = h
            G_fd[i, j] = (simultaneous_objective(pm, W + D, 0.01, 4.0)[0]
                          - simultaneous_objective(pm, W - D, 0.01, 4.0)[0]) / (2 * h)
    np.testing.assert_allclose(G, G_fd, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------------- Step 1 exactness

@pytest.mark.parametrize("method", STEP1_METHODS)
@pytest.mark.parametrize("d,cond", [(5, 1.0), (5, 2.0), (10, 1.0), (10, 2.0)])
@pytest.mark.parametrize("act", ["step", "relu"])
def test_step1_exact_in_population(method, d, cond, act):
    """Linear P: M = sum c_i w_i w_i^T and T4 = sum c_i w_i^(x)4 exactly, so every route is exact (Claim 1)."""
    for t in (1.5, 2.0, 3.0):
        net = _network(d, d, cond, act, t, seed=d)
        res = step1(PopulationMoments(net), d, method=method, rng=0)
        err = weight_error(res.weights, net.hidden_weights)
        assert err["max_angle"] < 1e-8                                      # signs count
        c_true = net.upper.linear_coefficients
        assert np.max(np.abs(np.sort(res.coefficients) - np.sort(c_true))) < 1e-8
        for cert in res.certificates:                                       # (eps, tau)-local minima
            assert cert["eps"] < 1e-9 and cert["tau"] == 0.0


def test_step1_exact_when_n_exceeds_d():
    net = _network(4, 7, 1.5, "relu", 2.0, seed=3)
    for method in STEP1_METHODS:
        res = step1(PopulationMoments(net), 4, method=method, rng=1)
        assert weight_error(res.weights, net.hidden_weights)["max_angle"] < 1e-8


def test_fit_population_learner():
    net = _network(5, 5, 2.0, "step", 2.0, seed=4)
    est = HighThresholdLearner(5, activation="step", threshold=2.0, random_state=0).fit_population(net)
    assert weight_error(est.hidden_weights_, net.hidden_weights)["max_angle"] < 1e-8
    assert est.diagnostics_["population"] and not est.diagnostics_["refinement"]["ran"]
    assert abs(est.baseline_ - 0.3) < 1e-15


def test_population_bias_floor_shrinks_with_threshold():
    """Orthonormal W*, P with products (|c_S| <= 1): the Step 1 error in population is the bias of
    Lemma 2, which must shrink as t grows."""
    d = 6
    P = random_upper_polynomial(d, rng=5)
    W = random_unit_weights(d, rng=6)
    errors = []
    for t in (1.5, 2.0, 2.5, 3.0):
        net = HighThresholdNetwork(W, t, "step", P)
        res = step1(PopulationMoments(net), d, method="power", rng=0)
        errors.append(weight_error(res.weights, W)["max_angle"])
    assert all(b < a for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 0.2 * errors[0]


# ---------------------------------------------------------------------------------------------- samples

def test_sample_error_falls_with_n():
    """Linear P, d = 5, t = 2: no bias, so the error is sampling error ~ N^{-1/2}; 16x the samples must
    shrink it by at least 2x (the expected factor is 4; a factor 2 leaves room for the fluctuation of
    one run)."""
    net = _network(5, 5, 1.5, "step", 2.0, seed=7)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((800_000, 5))
    y = net.predict(X)
    errs = []
    for N in (50_000, 800_000):
        est = HighThresholdLearner(5, threshold=2.0, refine=False, random_state=0).fit(X[:N], y[:N])
        errs.append(weight_error(est.hidden_weights_, net.hidden_weights)["max_angle"])
    assert errs[1] < errs[0] / 2, errs


def test_streaming_sources_give_identical_results():
    net = _network(4, 4, 1.5, "relu", 2.0, seed=8)
    X = np.random.default_rng(1).standard_normal((60_000, 4))
    y = net.predict(X)
    a = HighThresholdLearner(4, activation="relu", threshold=2.0, refine=False, random_state=0).fit(X, y)
    chunks = [(X[i:i + 7000], y[i:i + 7000]) for i in range(0, 60_000, 7000)]
    b = HighThresholdLearner(4, activation="relu", threshold=2.0, refine=False, random_state=0).fit(chunks)
    np.testing.assert_array_equal(a.hidden_weights_, b.hidden_weights_)
    assert a.diagnostics_["n_active"] == b.diagnostics_["n_active"]


def test_lemma_diagnostics_and_network():
    """The estimated E|Delta| (learned units) against the true E|Delta| of the teacher on the same
    samples: equal up to the effect of the unit error, so within a factor 2 here."""
    P = random_upper_polynomial(4, monotone=True, rng=3, constant=0.3)
    net = _network(4, 4, 1.0, "step", 2.5, seed=9, upper=P)
    X = np.random.default_rng(2).standard_normal((200_000, 4))
    y = net.predict(X)
    est = HighThresholdLearner(4, threshold=2.5, method="landscape", refine=False, random_state=0).fit(X, y)
    lem = est.diagnostics_["lemmas"]
    assert lem["lemma1"]["max_ratio"] <= 1.0                 # Lemma 1 bound holds on the samples
    # the residual of the learned f_lin on the rows where some unit fires (Delta = 0 elsewhere): Delta plus
    # the effect of the unit error, hence at least the true E|Delta| up to that error
    fired = y != est.baseline_
    resid = y[fired] - est.network_.predict(X[fired])
    assert abs(lem["lemma2"]["mean_abs_residual"] - np.abs(resid).sum() / y.size) < 1e-15
    true_delta = np.mean(np.abs(y - net.linear_part().predict(X)))
    assert lem["lemma2"]["mean_abs_residual"] > true_delta
    assert all(c["passed"] for c in est.diagnostics_["certificates"].values())
    assert isinstance(est.network_, nr.TwoLayerNetwork)
    np.testing.assert_allclose(est.network_.hidden_bias, -2.5)


# ---------------------------------------------------------------------------------------------- refusals

def test_refuses_threshold_too_low():
    net = _network(5, 5, 1.0, "step", 0.3, seed=1)
    X = np.random.default_rng(0).standard_normal((5000, 5))
    with pytest.raises(AssumptionError, match="too low"):
        HighThresholdLearner(5, threshold=0.3, refine=False).fit(X, net.predict(X))


def test_refuses_m_not_positive_definite():
    c = np.array([1.0, 1.0, -0.5, 1.0])
    net = HighThresholdNetwork(random_unit_weights(4, rng=0), 2.0, "relu", UpperPolynomial.linear(c))
    with pytest.raises(AssumptionError, match="not positive definite"):
        whitening_basis(PopulationMoments(net), 4)


def test_refuses_vanishing_linear_coefficient():
    P = violating_upper_polynomial(5, "linear", rng=0)
    net = HighThresholdNetwork(random_unit_weights(5, rng=1), 2.0, "step", P)
    with pytest.raises(AssumptionError, match="vanishing linear coefficient"):
        HighThresholdLearner(5, threshold=2.0).fit_population(net)


def test_warns_on_non_gaussian_inputs():
    net = _network(3, 3, 1.0, "step", 2.0, seed=2)
    X = 2.0 * np.random.default_rng(0).standard_normal((20_000, 3))
    with pytest.warns(AssumptionWarning, match="N\\(0, I\\)"):
        HighThresholdLearner(3, threshold=2.0, refine=False, min_coefficient_ratio=0.0).fit(X, net.predict(X))


@pytest.mark.parametrize("law", ["uniform", "rademacher", "laplace"])
def test_warns_on_inputs_with_the_covariance_of_n01_but_another_shape(law):
    # mean 0, covariance I, not Gaussian: Step 1 is biased on both split halves alike (5 units in 10 inputs,
    # 3e5 rows: every unit 0.5-1.2 rad off while unit_angles estimates 0.02-0.08), so only the input
    # check can say it; the excess kurtosis of a coordinate is -1.2, -2 and +3 (tolerance 0.52 at 30000 rows)
    g = np.random.default_rng(0)
    n, d = 30_000, 10
    X = {"uniform": lambda: g.uniform(-math.sqrt(3), math.sqrt(3), (n, d)),
         "rademacher": lambda: g.choice([-1.0, 1.0], (n, d)),
         "laplace": lambda: g.laplace(0, 1 / math.sqrt(2), (n, d))}[law]()
    net = HighThresholdNetwork(random_unit_weights(5, d, rng=0), 2.0, "step", UpperPolynomial.linear(np.ones(5), 0.3))
    learner = HighThresholdLearner(5, threshold=2.0, refine=False, max_angle_error=None)
    with pytest.warns(AssumptionWarning, match="kurtosis"):
        try:
            learner.fit(X, net.predict(X))
        except AssumptionError:  # Step 1 may also refuse (Rademacher rows here): the warning came first
            return
    check = learner.diagnostics_["input_check"]
    assert not check["plausible"] and check["excess_kurtosis"] > check["excess_kurtosis_tolerance"]


def test_the_average_kurtosis_sees_a_shared_law_at_large_d():
    # d = 200 on a first chunk of 5216 rows: a uniform coordinate's -1.2 is within the largest coordinate's
    # tolerance (1.45), not the average's (0.08)
    X = np.random.default_rng(0).uniform(-math.sqrt(3), math.sqrt(3), (5216, 200))
    with pytest.warns(AssumptionWarning, match="on average"):
        check = check_gaussian_inputs(X)
    assert check["excess_kurtosis"] < check["excess_kurtosis_tolerance"]
    assert check["mean_excess_kurtosis"] > 10 * check["mean_excess_kurtosis_tolerance"]


def test_gaussian_inputs_pass_the_input_check():
    # N(0, I) rows stay within the mean, covariance and kurtosis tolerances (each fails with probability
    # at most 1e-3) for every seed tried
    net = HighThresholdNetwork(random_unit_weights(5, 10, rng=0), 2.0, "step", UpperPolynomial.linear(np.ones(5), 0.3))
    for seed in range(5):
        X = np.random.default_rng(seed).standard_normal((30_000, 10))
        with warnings.catch_warnings():
            warnings.simplefilter("error", AssumptionWarning)
            learner = HighThresholdLearner(5, threshold=2.0, refine=False, max_angle_error=None).fit(X, net.predict(X))
        check = learner.diagnostics_["input_check"]
        assert check["plausible"] and check["excess_kurtosis"] <= check["excess_kurtosis_tolerance"]


def test_more_units_in_the_data_than_n_hidden_are_reported():
    # M's rank is the number of units (Claim 1, Lemma 2): with n_hidden one or two short the returned
    # units can each be right while the others are missing, so only M's spectrum can say it
    from nnrecover.learners.goel2019 import extra_directions

    W = random_unit_weights(5, 10, rng=0)
    net = HighThresholdNetwork(W, 2.0, "step", UpperPolynomial.linear(np.linspace(0.6, 1.4, 5), 0.3))
    exact = extra_directions(PopulationMoments(net), 5)
    assert exact["count"] == 5 and not exact["extra"] and exact["eigenvalues"][5] < 1e-12
    assert extra_directions(PopulationMoments(net), 4)["extra"]
    X = np.random.default_rng(1).standard_normal((300_000, 10))
    y = net.predict(X)
    for k in (4, 3):
        with pytest.warns(AssumptionWarning, match=f"more than n_hidden = {k}.*n_hidden=5"):
            learner = HighThresholdLearner(k, threshold=2.0, refine=False, max_angle_error=None).fit(X, y)
        info = learner.diagnostics_["extra_directions"]
        assert info["extra"] and info["count"] == 5 and info["eigenvalues"][k] > 2 * info["noise_level"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", AssumptionWarning)
        learner = HighThresholdLearner(5, threshold=2.0, refine=False, max_angle_error=None).fit(X, y)
    info = learner.diagnostics_["extra_directions"]
    assert info["count"] == 5 and info["eigenvalues"][5] < 2 * info["noise_level"]


def test_second_moment_group_spread_is_that_of_its_row_groups():
    # ||M_g - M|| for the row groups r mod M_GROUPS, each M_g on n_total / G rows
    from nnrecover.learners.goel2019.statistics import M_GROUPS

    g = np.random.default_rng(3)
    X, yt = g.standard_normal((9001, 6)), g.standard_normal(9001)
    mom = SampleMoments(X, yt, 50_000, "step", 2.0)
    norm = math.sqrt(2) * mom.u_hat[2]
    np.testing.assert_allclose(mom.second() * 50_000 * norm, (X.T * yt) @ X - np.eye(6) * yt.sum(), rtol=0,
                               atol=1e-9)
    groups = [((X[r::M_GROUPS].T * yt[r::M_GROUPS]) @ X[r::M_GROUPS] - np.eye(6) * yt[r::M_GROUPS].sum())
              / (50_000 / M_GROUPS * norm) for r in range(M_GROUPS)]
    np.testing.assert_allclose(np.mean(groups, axis=0), mom.second(), rtol=0, atol=1e-13)
    np.testing.assert_allclose(mom.second_group_spread(), [np.linalg.norm(Mg - mom.second(), 2) for Mg in groups],
                               rtol=1e-12)


def test_refuses_degenerate_u4_and_bad_parameters():
    X, y = np.zeros((3, 2)), np.zeros(3)
    with pytest.raises(AssumptionError, match="u_hat_4"):
        HighThresholdLearner(2, threshold=math.sqrt(3)).fit(X, y)
    with pytest.raises(InputError, match="threshold"):
        HighThresholdLearner(2).fit(X, y)
    with pytest.raises(InputError, match="method"):
        HighThresholdLearner(2, threshold=2.0, method="sgd").fit(X, y)
    with pytest.raises(InputError, match="activation"):
        HighThresholdLearner(2, activation="tanh", threshold=2.0).fit(X, y)


def test_registry():
    assert nr.learners.HighThresholdLearner is HighThresholdLearner
    names = {r.name for r in nr.learners.available("goel2019")}
    assert {"goel2019", "goel2019-step1-power", "goel2019-step1-landscape",
            "goel2019-step1-simultaneous"} <= names


@pytest.mark.parametrize("name", ["goel2019-threshold", "goel2019-routes"])
def test_experiments_quick(name):
    from nnrecover.experiments import get_experiment

    df, fig = get_experiment(name).func(rng=0, quick=True)
    assert len(df) and fig is not None
    done = df[df["refused"] == ""]
    assert len(done) and np.all(np.isfinite(done["max_angle"])) and np.all(done["max_angle"] < np.pi / 2)
    if name == "goel2019-threshold":
        assert np.all(done["estimated_max_angle"] > 0)
        assert np.all(done["certificate_passed"] == (done["estimated_max_angle"] <= 0.1))


def test_dask_arrays_match_numpy():
    import dask.array as da

    net = _network(4, 4, 1.5, "relu", 2.0, seed=8)
    X = np.random.default_rng(1).standard_normal((40_000, 4))
    y = net.predict(X)
    a = HighThresholdLearner(4, activation="relu", threshold=2.0, refine=False, random_state=0).fit(X, y)
    b = HighThresholdLearner(4, activation="relu", threshold=2.0, refine=False, random_state=0).fit(
        da.from_array(X, chunks=(9000, 4)), da.from_array(y, chunks=9000))
    np.testing.assert_allclose(a.hidden_weights_, b.hidden_weights_, rtol=0, atol=1e-12)


def test_refine_runs_step2_and_skips_sigmoid():
    P = random_upper_polynomial(3, monotone=True, rng=0)
    net = _network(3, 3, 1.0, "step", 2.5, seed=3, upper=P)
    X = np.random.default_rng(4).standard_normal((100_000, 3))
    y = net.predict(X)
    est = HighThresholdLearner(3, threshold=2.5, random_state=0, refine_options={"max_iter": 10}).fit(X, y)
    ref = est.diagnostics_["refinement"]
    assert ref["ran"] and len(ref["units"]) == 3
    step1_only = HighThresholdLearner(3, threshold=2.5, refine=False, random_state=0).fit(X, y)
    for unit in ref["units"]:                 # a unit is replaced only when its estimated angle dropped
        i = unit["unit"]
        if unit["kept"] == "step1":
            np.testing.assert_array_equal(est.hidden_weights_[i], step1_only.hidden_weights_[i])
        else:
            assert unit["angle_estimate_end"] < unit["angle_estimate_start"]
    sig = HighThresholdNetwork(random_unit_weights(2, rng=1), 2.0, "sigmoid")
    Xs = np.random.default_rng(5).standard_normal((200_000, 2))
    est = HighThresholdLearner(2, activation="sigmoid", threshold=2.0, random_state=0).fit(Xs, sig.predict(Xs))
    assert not est.diagnostics_["refinement"]["ran"] and "sigmoid" in est.diagnostics_["refinement"]["reason"]


def _unit_angles(estimate, W):
    """Angle (rad) from each estimated row to its nearest true unit (sign counts)."""
    C = (estimate @ W.T) / np.linalg.norm(estimate, axis=1)[:, None]
    return np.arccos(np.clip(C.max(axis=1), -1.0, 1.0))


def _step1_and_step2(units, inputs, t, n=200_000):
    """Step units at threshold t under a monotone P with products, n noiseless samples: the true rows, and
    the learner fitted without and with Step 2."""
    gen = np.random.default_rng(0)
    W = random_unit_weights(units, inputs, rng=gen)
    net = HighThresholdNetwork(W, t, "step", random_upper_polynomial(units, monotone=True, rng=gen))
    X = np.random.default_rng(1).standard_normal((n, inputs))
    y = net.predict(X)
    step1_only = HighThresholdLearner(units, threshold=t, refine=False, random_state=0).fit(X, y)
    return W, step1_only, HighThresholdLearner(units, threshold=t, random_state=0).fit(X, y)


def test_step2_goes_below_the_step1_floor_from_samples():
    # d = 5 step units at t = 2, monotone P with products, 2e5 samples: Step 1 carries the bias of the products
    # (Lemma 2; here 2-6.5 degrees, mean 3.9). Step 2 (Theorem 5) shrinks each angle geometrically down to its
    # O(eps_1) floor (Lemma 3), eps_1 >= 200 / (n phi(t)) = 0.0046 for the 1.6e5 search rows, about 0.3 degrees.
    # A search can stall on a fixed sample, and the held-out check keeps a unit whose gain it cannot confirm,
    # so the test asks for most units, not all: over random_state 0-7 every unit Step 2 replaced was closer to
    # the truth, 4-5 of 5 were replaced, and the mean angle fell to 0.3-1.4 degrees
    W, step1_only, est = _step1_and_step2(5, 5, 2.0)
    before, after = _unit_angles(step1_only.hidden_weights_, W), _unit_angles(est.hidden_weights_, W)
    assert before.max() > math.radians(5.0)
    assert after.mean() < 0.5 * before.mean()
    ref = est.diagnostics_["refinement"]
    assert ref["ran"] and ref["improved_units"] >= 3 and ref["search_rows"] + ref["held_out_rows"] == 200_000
    for unit in ref["units"]:
        i = unit["unit"]
        if unit["kept"] == "step2":   # replaced only on the held-out rows' evidence, and then closer to the truth
            assert unit["angle_estimate_end"] < unit["angle_estimate_start"] - 2 * unit["difference_std_error"]
            assert after[i] < before[i]
        else:
            np.testing.assert_array_equal(est.hidden_weights_[i], step1_only.hidden_weights_[i])


def test_step2_keeps_step1_units_the_held_out_rows_do_not_confirm():
    # d = 20, t = 2.5, 2e5 samples: the slabs hold too few rows to see Step 2's moves. The search, which accepts
    # what lowers its estimate on its own rows, reports gains (selection), and replacing the units on that
    # evidence made two of them worse (3.72 -> 3.79 and 3.83 -> 3.99 degrees); on the held-out rows the gain is
    # within the noise, so every unit stays as Step 1 left it
    W, step1_only, est = _step1_and_step2(5, 20, 2.5)
    assert np.all(_unit_angles(est.hidden_weights_, W) <= _unit_angles(step1_only.hidden_weights_, W) + 1e-12)
    ref = est.diagnostics_["refinement"]
    assert all({"unit", "kept", "iterations"} <= set(u) for u in ref["units"])     # every unit's record
    searched = [u for u in ref["units"] if u["iterations"] > 0]
    assert searched and ref["improved_units"] == 0
    for unit in searched:
        assert unit["search_angle_estimate_end"] < unit["search_angle_estimate_start"]
        assert unit["kept"] == "step1"
        assert not unit["angle_estimate_end"] < unit["angle_estimate_start"] - 2 * unit["difference_std_error"]


def test_step2_gives_the_same_bits_for_any_number_of_workers(monkeypatch):
    import nnrecover.learners.goel2019.step2 as goel_step2

    P = random_upper_polynomial(4, monotone=True, rng=1)
    net = _network(4, 4, 1.0, "step", 2.0, seed=5, upper=P)
    X = np.random.default_rng(6).standard_normal((80_000, 4))
    y = net.predict(X)
    fits = []
    for workers in (1, 3):
        monkeypatch.setattr(goel_step2, "effective_n_jobs", lambda n_jobs=None, w=workers: w)
        est = HighThresholdLearner(4, threshold=2.0, random_state=0, refine_options={"max_iter": 20}).fit(X, y)
        fits.append(est)
    np.testing.assert_array_equal(fits[0].hidden_weights_, fits[1].hidden_weights_)
    assert fits[0].diagnostics_["refinement"]["units"] == fits[1].diagnostics_["refinement"]["units"]
    assert any(u["iterations"] > 0 for u in fits[0].diagnostics_["refinement"]["units"])


def test_step2_gathers_a_bounded_subsample_of_data_not_in_memory(monkeypatch):
    import nnrecover.learners.goel2019.step2 as goel_step2

    P = random_upper_polynomial(3, monotone=True, rng=0)
    net = _network(3, 3, 1.0, "step", 2.5, seed=3, upper=P)
    X = np.random.default_rng(4).standard_normal((60_000, 3))
    y = net.predict(X)
    chunks = [(X[i:i + 10_000], y[i:i + 10_000]) for i in range(0, 60_000, 10_000)]
    monkeypatch.setattr(goel_step2, "STEP2_GATHER_BYTES", 8 * 3 * 25_000)
    est = HighThresholdLearner(3, threshold=2.5, random_state=0, refine_options={"max_iter": 5}).fit(chunks)
    ref = est.diagnostics_["refinement"]
    assert ref["search_rows"] + ref["held_out_rows"] == 25_000
    in_memory = HighThresholdLearner(3, threshold=2.5, random_state=0, refine_options={"max_iter": 5}).fit(X, y)
    ref = in_memory.diagnostics_["refinement"]
    assert ref["search_rows"] + ref["held_out_rows"] == 60_000     # an array in memory is used in place


def test_refine_options_are_step2_arguments():
    P = random_upper_polynomial(3, monotone=True, rng=0)
    net = _network(3, 3, 1.0, "step", 2.5, seed=3, upper=P)
    X = np.random.default_rng(4).standard_normal((60_000, 3))
    y = net.predict(X)
    est = HighThresholdLearner(3, threshold=2.5, random_state=0,
                               refine_options={"slab_width": 0.05, "levels": (0.4, 0.6), "max_iter": 5}).fit(X, y)
    opts = est.diagnostics_["refinement"]["options"]
    assert opts["slab_width"] == 0.05 and opts["levels"] == (0.4, 0.6) and opts["max_iter"] == 5
    assert opts["search_interval"] == (1.5, 5.5)              # the defaults that were not replaced stay
    with pytest.raises(InputError, match=r"holdout_fraction.*refine_estimate"):
        HighThresholdLearner(3, threshold=2.5, refine_options={"holdout_fraction": 0.1}).fit(X, y)
    with pytest.raises(InputError, match="threshold"):        # the learner passes t itself
        HighThresholdLearner(3, threshold=2.5, refine_options={"threshold": 3.0}).fit(X, y)
    # max_iter="auto" (the default) is Theorem 5's budget down to target_angle, or to half the thinnest slab:
    # with neither it has no end point and is refused, as is a budget that is neither a number nor "auto"
    with pytest.raises(InputError, match="max_iter='auto' needs"):
        HighThresholdLearner(3, threshold=2.5, refine_options={"target_angle": 0.0, "min_slab_width": 0.0}).fit(X, y)
    with pytest.raises(InputError, match="positive int or 'auto'"):
        HighThresholdLearner(3, threshold=2.5, refine_options={"max_iter": "long"}).fit(X, y)


def test_sigmoid_step1_exact_in_population():
    net = HighThresholdNetwork(random_unit_weights(5, rng=1), 3.0, "sigmoid",
                               UpperPolynomial.linear(np.linspace(0.5, 1.5, 5)))
    for method in STEP1_METHODS:
        res = step1(PopulationMoments(net), 5, method=method, rng=0)
        assert weight_error(res.weights, net.hidden_weights)["max_angle"] < 1e-8


def test_auto_width():
    net = HighThresholdNetwork(random_unit_weights(4, 6, rng=1), 2.0, "step", UpperPolynomial.linear([1, 0.8, 1.2, 0.9]))
    X = np.random.default_rng(0).standard_normal((200_000, 6))
    est = HighThresholdLearner("auto", threshold=2.0, refine=False, random_state=0).fit(X, net.predict(X))
    assert est.hidden_weights_.shape == (4, 6) and est.diagnostics_["width"]["n_hidden"] == 4
    with pytest.raises(InputError, match="n_hidden"):
        HighThresholdLearner("auto", threshold=2.0).fit_population(net)


def test_step2_skips_searches_too_short_to_show_a_gain():
    """A random search of T steps in n dimensions shrinks the angle by at most about exp(-0.2 T / n) in
    expectation (the (1+1) evolution strategy on a sphere model): with 5 steps in 20 dimensions not even twice
    that rate could clear the held-out margin, so no unit is searched and Step 1 is returned as it is."""
    gen = np.random.default_rng(0)
    W = random_unit_weights(5, 20, rng=gen)
    net = HighThresholdNetwork(W, 2.5, "step", random_upper_polynomial(5, monotone=True, rng=gen))
    X = np.random.default_rng(1).standard_normal((200_000, 20))
    y = net.predict(X)
    step1_only = HighThresholdLearner(5, threshold=2.5, refine=False, random_state=0).fit(X, y)
    est = HighThresholdLearner(5, threshold=2.5, refine_options={"max_iter": 5}, random_state=0).fit(X, y)
    units = est.diagnostics_["refinement"]["units"]
    assert all(u["iterations"] == 0 for u in units)
    # the units not already ruled out by the margin of angle 0 are ruled out by the search's reach
    beyond = [u for u in units if u["angle_estimate_start"] > 2 * np.sqrt(2) * u["held_out_std_error"]]
    assert beyond and all("evolution strategy" in u["reason"] for u in beyond)
    np.testing.assert_array_equal(est.hidden_weights_, step1_only.hidden_weights_)


def test_step2_in_the_learner_reaches_what_algorithm_1_reaches():
    # issue 34: Step 2 inside the learner stopped after 100 iterations (or 30 rejections in a row) whatever n
    # and the start, while Theorem 5 asks for O(n log(gamma / eps)); most searches were still descending (d = 10,
    # t = 2, linear P, 10^6 rows: largest angle 0.107 -> 0.032 rad). With the budget of step2_budget, the
    # search's target at the estimate's floor, the jittered slab widths and a second search where the budget ran
    # out it is 0.0057 there (0.0037-0.0076 rad and 0.054-0.086 of Step 1 over five seeds:
    # docs/papers/goel2019.rst). The same claim at the smallest size that still holds it: 5 units, 5 * 10^5 rows,
    # where the thinnest slab (200 rows near t) puts the search's target at 0.0046 rad
    d, t, n = 5, 2.0, 500_000
    W = random_unit_weights(d, rng=np.random.default_rng(0))
    net = HighThresholdNetwork(W, t, "step", UpperPolynomial.linear(np.random.default_rng(1).uniform(0.5, 1.5, d), 0.3))
    X = np.random.default_rng(1).standard_normal((n, d))
    y = net.predict(X)
    step1_only = HighThresholdLearner(d, threshold=t, refine=False, random_state=0).fit(X, y)
    est = HighThresholdLearner(d, threshold=t, random_state=0).fit(X, y)
    before = _unit_angles(step1_only.hidden_weights_, W).max()
    after = _unit_angles(est.hidden_weights_, W).max()
    assert before > 0.04
    assert after <= 0.01 and after <= before / 5
    units = est.diagnostics_["refinement"]["units"]
    assert all(u["kept"] == "step2" and u["max_iter"] >= 100 for u in units)

"""Large-d pieces of the Awasthi et al. learner: the matrix-free Gauss-Newton polish
(``awasthi2021.scale``), its use by ``HermiteTensorLearner`` when the shared refinement's normal matrix
is too large, and the control variate of pass 1's subspace iterations (``RangeStatistic``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.errors import InputError
from nnrecover.learners.awasthi2021.coefficients import RangeStatistic
from nnrecover.learners.awasthi2021.scale import matrix_free_polish
from nnrecover.data import accumulate


def _teacher(d, k, n, seed=0):
    net = nr.random_network(d, k, rng=seed)
    X, Y = nr.sample(net, nr.distributions.StandardGaussian(d), n, rng=seed + 1)
    return net, X, Y


def _perturbed(net, scale, seed=5):
    g = np.random.default_rng(seed)
    k, d = net.hidden_weights.shape
    return nr.TwoLayerNetwork(net.hidden_weights + scale * g.standard_normal((k, d)) / np.sqrt(d),
                              net.hidden_bias + scale * g.standard_normal(k),
                              net.output_weights * (1 + scale * g.standard_normal((1, k))), net.output_bias)


@pytest.mark.parametrize("operator_dtype", ["float32", "float64"])
def test_matrix_free_polish_reaches_round_off_on_noiseless_data(operator_dtype):
    # noiseless rows determine the teacher (three residuals per parameter); Gauss-Newton from a start
    # 0.5 away must end at the teacher to round-off, which no statistical tolerance explains. The float32
    # J^T J products only choose the steps (the residual and gradient are float64), so they must end there too
    d, k = 60, 6
    P = k * (d + 2) + 1
    net, X, Y = _teacher(d, k, 3 * P)
    start = _perturbed(net, 0.5)
    assert nr.metrics.parameter_error(start, net)["max_unit_error"] > 0.3
    out, info = matrix_free_polish(start, X, Y, operator_dtype=operator_dtype)
    assert info["stop"] == "round-off"
    assert info["train_loss_refined"] <= (64 * np.finfo(float).eps) ** 2 * np.mean(Y ** 2)
    assert nr.metrics.parameter_error(out, net)["max_unit_error"] < 1e-10


def test_matrix_free_polish_stops_at_a_positive_minimum(monkeypatch):
    # label noise: the loss tends to a positive minimum and the polish must stop there ("stationary") instead
    # of running its step budget; what the steps it skips could still gain must be far below the statistical
    # resolution of the loss, which the fit's own parameter error sets at about loss P / n (a third of the loss
    # at n = 3 P): at most 1% of that against the same trajectory continued to max_iter without the stop
    import nnrecover.learners.awasthi2021.scale as scale

    d, k = 60, 6
    P = k * (d + 2) + 1
    net = nr.random_network(d, k, rng=0)
    X, Y = nr.sample(net, nr.distributions.StandardGaussian(d), 3 * P, noise=0.05, rng=1)
    start = _perturbed(net, 0.3)
    out, info = matrix_free_polish(start, X, Y)
    assert info["stop"] == "stationary" and info["n_iter"] < 60
    monkeypatch.setattr(scale, "_STATIONARY_GAIN", 0.0)
    _, full = matrix_free_polish(start, X, Y, max_iter=60)
    assert full["train_loss_refined"] <= info["train_loss_refined"]
    assert info["train_loss_refined"] - full["train_loss_refined"] <= 0.01 * full["train_loss_refined"] * P / (3 * P)


def test_matrix_free_polish_is_deterministic():
    net, X, Y = _teacher(30, 3, 1000)
    start = _perturbed(net, 0.2)
    a, _ = matrix_free_polish(start, X, Y)
    b, _ = matrix_free_polish(start, X, Y)
    np.testing.assert_array_equal(a.hidden_weights, b.hidden_weights)


def test_matrix_free_polish_refuses_other_networks():
    net, X, Y = _teacher(10, 2, 200)
    two = nr.random_network(10, 2, n_outputs=2, rng=0)
    with pytest.raises(InputError, match="one-output ReLU"):
        matrix_free_polish(two, X, Y)
    with pytest.raises(InputError, match=r"X must be \(n, 10\)"):
        matrix_free_polish(net, X[:, :5], Y)
    with pytest.raises(InputError, match="max_iter"):
        matrix_free_polish(net, X, Y, max_iter=0)
    with pytest.raises(InputError, match="cg_rtol"):
        matrix_free_polish(net, X, Y, cg_rtol=1.5)
    with pytest.raises(InputError, match="operator_dtype"):
        matrix_free_polish(net, X, Y, operator_dtype="float16")


def test_learner_refines_noiseless_data_matrix_free_to_round_off():
    # noiseless rows: the matrix-free polish of the first 3 P rows reaches round-off on the held-out rows,
    # so it is the refinement (the shared refinement's O(n P^2) full-space stage does not run)
    net, X, Y = _teacher(40, 4, 60_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = nr.learners.HermiteTensorLearner(4, random_state=0).fit(X, Y)
    ref = est.diagnostics_["refinement"]
    assert ref["method"].startswith("matrix-free") and ref["at_round_off"] and ref["kept"] == "refined"
    assert nr.metrics.parameter_error(est.network_, net)["max_unit_error"] < 1e-10
    assert est.diagnostics_["certificates"]["residual_fit"]["passed"]


@pytest.mark.parametrize("budget", ["default", "matrix-free", "tiny"])
def test_label_noise_falls_back_to_the_shared_refinement(monkeypatch, budget):
    # with label noise the 3 P rows' fit is not at round-off: the shared refinement runs from the same
    # start as without the matrix-free step; when it could only run L-BFGS (its normal matrix exceeds its
    # budget, lowered here so that not even the matrix-free solver's span block fits), the better of start
    # and polish on held-out rows is kept and the reason recorded
    import nnrecover.refine.staged as staged

    # "matrix-free": J^T J (8 P^2 = 35912 bytes) exceeds the budget but the matrix-free solver's span block
    # (8 * 16^2 bytes) fits, so the shared refinement still runs Gauss-Newton and is handed the fit
    if budget != "default":
        monkeypatch.setattr(staged, "_JACOBIAN_MEMORY", 1000 if budget == "tiny" else 10_000)
    net = nr.random_network(20, 3, rng=0)
    X, Y = nr.sample(net, nr.distributions.StandardGaussian(20), 40_000, noise=0.05, rng=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = nr.learners.HermiteTensorLearner(3, random_state=0).fit(X, Y)
    ref = est.diagnostics_["refinement"]
    P = 3 * (20 + 2) + 1
    if budget != "tiny":
        assert not est.diagnostics_["matrix_free_refinement"]["at_round_off"]
        assert not ref["method"].startswith("matrix-free")
        # least squares on n rows: parameter error ~ sigma sqrt(P / n) (2.3e-3 here, measured 4.0e-3);
        # 10 times that separates the statistical error from a wrong unit
        tol = 10 * 0.05 * np.sqrt(P / ref["n_samples_used"])
    else:
        assert ref["method"].startswith("matrix-free") and not ref["at_round_off"]
        assert "exceeds its budget" in ref["reason"]
        assert ref["holdout_loss_" + ref["kept"]] <= ref["holdout_loss_start"]
        # n = 3 P rows: sigma sqrt(P / (n - P)) = 0.035 (measured 0.056 with the conditioning); 5 times that
        tol = 5 * 0.05 * np.sqrt(P / (ref["n_samples_used"] - P))
    assert nr.metrics.parameter_error(est.network_, net)["max_unit_error"] < tol


def test_range_control_variate_is_exact_for_a_quadratic_target():
    # y = p(x) exactly: the residual vanishes, so the sketch is p^_2 Omega = Q M Q^T Omega to round-off,
    # whatever the rows (the plain estimate of the same rows carries its sampling error, ~ sqrt(d / N))
    d, q, n = 20, 3, 5000
    g = np.random.default_rng(0)
    X = g.standard_normal((n, d))
    Q = np.linalg.qr(g.standard_normal((d, q)))[0]
    M = g.standard_normal((q, q))
    M = M + M.T
    t1 = g.standard_normal(d)
    U = X @ Q
    y = 0.7 + X @ t1 + 0.5 * (np.einsum("ni,ij,nj->n", U, M, U) - np.trace(M))
    omega = np.linalg.qr(g.standard_normal((d, 5)))[0]
    cov = g.standard_normal((d, 2))
    exact = Q @ M @ Q.T @ omega
    cv = accumulate(RangeStatistic(d, method="sketch", omega=omega, omega_cov=cov, rayleigh_ritz=True,
                                   center=0.7, control_variate=(t1, Q, M)), (X, y[:, None]))
    plain = accumulate(RangeStatistic(d, method="sketch", omega=omega, omega_cov=cov, rayleigh_ritz=True,
                                      center=0.7), (X, y[:, None]))
    assert np.abs(cv.finalize()["t2_omega"] - exact).max() < 1e-12
    assert np.abs(plain.finalize()["t2_omega"] - exact).max() > 1e-3


def test_range_control_variate_checks_its_shapes():
    d = 6
    omega = np.eye(d)[:, :2]
    with pytest.raises(InputError, match="control_variate must be"):
        RangeStatistic(d, method="sketch", omega=omega, omega_cov=omega, control_variate=(np.ones(3), omega,
                                                                                          np.eye(2)))
    # the full T_2 takes the linear part only (t1,)
    with pytest.raises(InputError, match="method='full' control_variate must be"):
        RangeStatistic(d, method="full", omega=None, omega_cov=omega, control_variate=(np.ones(d), omega,
                                                                                       np.eye(2)))


def test_range_detection_threshold_is_the_noise_scale_of_the_sketched_residual():
    # the threshold is s sqrt(d / N) with s^2 the mean square of the sketched residual: for a constant
    # target 2 and no centre the residual is 2 on every row, so it is 2 sqrt(d / N) exactly; the eigenvalues
    # of the sample T_2 (pure noise here) are all of that order, none above 3 times it
    d, n = 50, 4000
    X = np.random.default_rng(0).standard_normal((n, d))
    omega = np.linalg.qr(np.random.default_rng(1).standard_normal((d, 8)))[0]
    stat = accumulate(RangeStatistic(d, method="sketch", omega=omega, omega_cov=omega[:, :2], rayleigh_ritz=True),
                      (X, np.full((n, 1), 2.0)))
    _, info = stat.basis(3)
    assert abs(info["t2_detection_threshold"] - 2.0 * np.sqrt(d / n)) < 1e-12
    assert max(info["t2_eigenvalue_magnitudes"]) < 3 * info["t2_detection_threshold"]


def test_power_basis_is_exact_when_the_sketch_is():
    # y = p(x) exactly and the control variate is p: the sketch is T_2 Omega = Q M Q^T Omega to round-off
    # (previous test), so T_2 applied once more to the top-q Ritz vectors spans range(Q) exactly and the
    # Nystrom estimate on the Ritz pairs, R Lambda_q^{-1} R^T, is P^T T_2 P exactly (T_2 has rank q and
    # Omega^T Q has full rank); the residual vanishes, so the statistical sine is 0 and the iteration's
    # contraction ratio too
    d, q, n = 20, 3, 5000
    g = np.random.default_rng(0)
    X = g.standard_normal((n, d))
    Q = np.linalg.qr(g.standard_normal((d, q)))[0]
    M = np.diag([2.0, -1.0, 0.5]) + 0.1 * np.ones((q, q))
    t1 = g.standard_normal(d)
    U = X @ Q
    y = 0.7 + X @ t1 + 0.5 * (np.einsum("ni,ij,nj->n", U, M, U) - np.trace(M))
    omega = np.linalg.qr(g.standard_normal((d, 6)))[0]
    stat = accumulate(RangeStatistic(d, method="sketch", omega=omega, omega_cov=g.standard_normal((d, 2)),
                                     rayleigh_ritz=True, center=0.7, control_variate=(t1, Q, M)), (X, y[:, None]))
    P, M_est, info = stat.power_basis(q, keep=5)
    T2 = Q @ M @ Q.T
    assert np.abs(P.T @ P - np.eye(q)).max() < 1e-13
    assert np.abs(Q - P @ (P.T @ Q)).max() < 1e-12
    assert np.abs(M_est - P.T @ T2 @ P).max() < 1e-11
    assert info["statistical_sine"] < 1e-6 and info["noise_ratio"] < 1e-6
    nxt = info["next_omega"]
    assert nxt.shape == (d, 5) and np.abs(nxt.T @ nxt - np.eye(5)).max() < 1e-12
    with pytest.raises(InputError, match="rayleigh_ritz"):
        RangeStatistic(d, method="sketch", omega=omega, omega_cov=omega[:, :2]).power_basis(q, 5)

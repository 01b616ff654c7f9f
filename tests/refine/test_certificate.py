"""Certificates with a stated meaning: the max-unit-error bound, its use by the learners, the experiment."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.errors import AssumptionWarning, CertificateWarning, InputError
from nnrecover.learners import ExactReLULearner, NoisyReLULearner, PureNeuronLearner
from nnrecover.refine.certificate import _lack_of_fit, unit_error_bound
from nnrecover.distributions import StandardGaussian
from nnrecover.metrics import parameter_error
from nnrecover.refine import refine_network

GAUSS = nr.distributions.StandardGaussian


def _err(net, truth):
    return nr.metrics.parameter_error(net, truth)["max_unit_error"]


def _perturbed(truth, eps, seed):
    g = np.random.default_rng(seed)
    return nr.TwoLayerNetwork(truth.hidden_weights + eps * g.standard_normal(truth.hidden_weights.shape), None,
                              truth.output_weights + eps * g.standard_normal(truth.output_weights.shape))


@pytest.fixture(scope="module")
def teacher():
    return nr.random_network(12, 5, 5, rng=0).canonical()


def test_bound_is_round_off_at_the_teacher(teacher):
    """Noiseless rows, estimate = teacher: R is round-off, so both the Gauss-Newton step and the noise
    term are round-off (kappa(J) eps relative)."""
    X, Y = nr.sample(teacher, GAUSS(12), 5000, rng=1)
    info = unit_error_bound(teacher, X, Y)
    assert info["bound"] < 1e-12
    assert info["n_params"] == 5 * 12 + 5 * 5 + 5  # (w_i, b_i) on the sphere, a_i, c


@pytest.mark.parametrize("eps", [1e-6, 1e-3])
def test_bound_brackets_the_error_of_a_perturbed_estimate(teacher, eps):
    """Noiseless rows: the step term is the metric of the first-order error, equal to the true error
    up to a relative O(error) term; the bound doubles it, so error <= bound <= 2 (1 + O(error)) error."""
    X, Y = nr.sample(teacher, GAUSS(12), 5000, rng=2)
    est = _perturbed(teacher, eps, 3)
    err, info = _err(est, teacher), unit_error_bound(est, X, Y)
    assert err <= info["bound"] <= 2.0 * (1.0 + 10 * err) * err


def test_bound_with_label_noise(teacher):
    """sigma = 0.1: the noise term of the least-squares fit is ~ sigma sqrt(P_i / n) / s_min per unit;
    the bound holds at the teacher itself and shrinks as n^{-1/2} (n x 4: about half)."""
    b = []
    for n in (5000, 20000):
        X, Y = nr.sample(teacher, GAUSS(12), n, noise=0.1, rng=4)
        info = unit_error_bound(teacher, X, Y)
        assert abs(info["sigma"] - 0.1) < 0.01
        b.append(info["bound"])
    assert 0.0 < b[1] < b[0] < 0.5
    assert 0.35 < b[1] / b[0] < 0.7


def test_lack_of_fit_separates_noise_from_a_structured_residual():
    """Residual = noise independent of x: chi-square statistic, p-value far from 0; residual = noise plus
    a ReLU of x (a missing unit): its He_2 projection is c_2 u u^T != 0 and the p-value is ~ 0."""
    g = np.random.default_rng(5)
    net = nr.random_network(6, 2, 2, rng=6).canonical()
    X = g.standard_normal((20000, 6))
    zero_wb, zero_a, zero_c = np.zeros((2, 7)), np.zeros((2, 2)), np.zeros(2)
    noise = 0.1 * g.standard_normal((20000, 2))
    assert _lack_of_fit(net, X, noise, zero_wb, zero_a, zero_c, 0.01, 4096) > 1e-3
    u = g.standard_normal(6)
    structured = noise + 0.05 * np.maximum(X @ (u / np.linalg.norm(u)), 0.0)[:, None]
    assert _lack_of_fit(net, X, structured, zero_wb, zero_a, zero_c, 0.01, 4096) < 1e-6


def test_pure_neuron_refined_estimate_certified_despite_a_poor_gap():
    """Issue case d = 20, k = 10, 10 outputs: the provable stage's null-space gap is below 5 (recorded
    as a stage check, no warning) but the refined network is right to ~1e-7: the final certificate passes
    with a bound above the true error. Without refinement the estimate is off and the certificate fails."""
    truth = nr.random_network(20, 10, 10, rng=0).canonical()
    X, Y = nr.sample(truth, GAUSS(20), 20000, rng=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CertificateWarning)
        learner = PureNeuronLearner(10, random_state=0, span=False).fit(X, Y)  # the paper's d-dimensional detector
    stage = learner.diagnostics_["stage_checks"]["null_gap_ratio"]
    cert = learner.diagnostics_["certificates"]["max_unit_error"]
    assert stage["passed"] is False and "before refinement" in stage["stage"]
    assert cert["passed"] is True and "parameter_error" in cert["meaning"]
    assert _err(learner.network_, truth) <= cert["bound"] <= 1e-5
    with pytest.warns(CertificateWarning, match="max_unit_error"):
        raw = PureNeuronLearner(10, refine=False, random_state=0).fit(X, Y)
    assert _err(raw.network_, truth) > raw.certificate_tol


def test_noisy_learner_certified_matrix_free_with_label_noise():
    """d = 300, k = 9, 9 outputs: P = 2790, P^3 > 2e10, so the certificate takes its matrix-free form, on all
    20000 certificate rows. Label noise 0.05: the bound (0.027 measured) is above the true error (0.0043)
    and below the default tolerance 0.1; nothing is warned."""
    truth = nr.random_network(300, 9, 9, rng=0)
    X, Y = nr.sample(truth, GAUSS(300), 60_000, rng=1, noise=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CertificateWarning)
        warnings.simplefilter("error", AssumptionWarning)
        learner = NoisyReLULearner(9, random_state=0).fit(X, Y)
    cert = learner.diagnostics_["certificates"]["max_unit_error"]
    assert cert["method"] == "matrix-free" and cert["n_rows"] == 20_000 and cert["passed"] is True
    assert _err(learner.network_, truth) <= cert["bound"] <= learner.certificate_tol
    assert cert["sigma"] == pytest.approx(0.05, rel=0.05)


def test_pure_neuron_span_warning_is_held_when_the_final_certificate_passes():
    """The same data with the span reduction (span="auto"): the k-th singular value of E[y x^T] Sigma^-1 is
    not separated from its sampling error (an AssumptionWarning of the provable stage), yet the refined
    network is certified: the warning is recorded in diagnostics_["input_law_notes"], not issued. Without
    refinement the certificate fails and the warning, which explains it, is issued."""
    truth = nr.random_network(20, 10, 10, rng=0).canonical()
    X, Y = nr.sample(truth, GAUSS(20), 20000, rng=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AssumptionWarning)
        warnings.simplefilter("error", CertificateWarning)
        learner = PureNeuronLearner(10, random_state=0).fit(X, Y)
    assert learner.diagnostics_["certificates"]["max_unit_error"]["passed"] is True
    assert any("k-th singular value" in note for note in learner.diagnostics_["input_law_notes"])
    assert "after refinement" in learner.diagnostics_["certificates"]["max_unit_error"]["stage"]
    with pytest.warns(AssumptionWarning, match="k-th singular value"):
        with pytest.warns(CertificateWarning, match="max_unit_error"):
            PureNeuronLearner(10, refine=False, random_state=0).fit(X, Y)


def test_exact_relu_complex_initialisation_is_not_a_warning():
    """Issue case d = 50, k = 20: the Jennrich pencil that starts the joint diagonalisation has complex
    eigenvalues in every draw (recorded), yet the answer is certified exact; nothing is warned."""
    truth = nr.random_network(50, 20, 20, rng=4).canonical()
    X, Y = nr.sample(truth, GAUSS(50), 100_000, rng=14)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CertificateWarning)
        learner = ExactReLULearner(20, random_state=0).fit(X, Y)
    dec = learner.diagnostics_["exact"]["approximate"]["decomposition"]
    assert dec["jennrich_complex_eigenvalues"] is True and dec["initialisation_notes"]
    assert learner.diagnostics_["certified"] and learner.diagnostics_["certificates"]["max_unit_error"]["passed"]
    assert _err(learner.network_, truth) < 1e-10


def test_noisy_learner_warns_on_student_t_inputs():
    """Student-t(1.5) inputs have no variance: the tensor step measures the covariance deviation. The
    unrefined estimate is then off: the certificate fails and the input-law warning (AssumptionWarning
    naming the statistic, as the other Gaussian learners do) explains why. Refined, the estimate is
    exact on these data and certified so: the deviation is recorded, not warned about."""
    truth = nr.random_network(10, 3, 4, rng=0).canonical()
    X = np.random.default_rng(1).standard_t(1.5, size=(20000, 10))
    Y = truth.predict(X)
    with pytest.warns(AssumptionWarning, match=r"covariance deviation [0-9.e+]+ \(tolerance"):
        with pytest.warns(CertificateWarning, match="max_unit_error"):
            raw = NoisyReLULearner(3, refine=False, random_state=0).fit(X, Y)
    assert _err(raw.network_, truth) > raw.certificate_tol
    dev = raw.diagnostics_["noisy"]["approximate"]["input_deviation"]
    assert not dev["plausible"] and dev["covariance"] > 10 * dev["covariance_tolerance"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        refined = NoisyReLULearner(3, random_state=0).fit(X, Y)
    assert refined.diagnostics_["certificates"]["max_unit_error"]["passed"]
    assert "covariance deviation" in refined.diagnostics_["input_law_notes"][0]
    assert _err(refined.network_, truth) < 1e-10


def test_tensor_step_flags_standardised_heavy_tails():
    """Student-t(5) scaled to unit variance: mean and covariance look like N(0, I), the excess kurtosis
    (6 in the population) does not; N(0, I) rows of the same size stay silent (tolerance
    2 sqrt(96 / n) sqrt(2 log(4 d / 1e-3)) = 0.65 at n = 2e4, d = 8; measured deviation ~ 0.1)."""
    from nnrecover.learners.bakshi2019 import approximate_hidden_weights

    truth = nr.random_network(8, 3, 3, rng=0).canonical()
    g = np.random.default_rng(2)
    X = g.standard_t(5, size=(20000, 8)) / np.sqrt(5 / 3)
    with pytest.warns(AssumptionWarning, match=r"inputs are not N\(0, I\).*excess kurtosis"):
        res = approximate_hidden_weights(X, truth.predict(X), 3, rng=0)
    assert res.diagnostics["input_deviation"]["kurtosis"] > res.diagnostics["input_deviation"]["kurtosis_tolerance"]
    X = g.standard_normal((20000, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error", AssumptionWarning)
        res = approximate_hidden_weights(X, truth.predict(X), 3, rng=0)
    assert res.diagnostics["input_deviation"]["plausible"]


def test_certificate_options_are_validated(teacher):
    X, Y = nr.sample(teacher, GAUSS(12), 2000, rng=1)
    for cls in (PureNeuronLearner, ExactReLULearner, NoisyReLULearner):
        with pytest.raises(InputError, match="certificate_tol"):
            cls(5, certificate_tol=0.0).fit(X, Y)
        with pytest.raises(InputError, match="certificate_rows"):
            cls(5, certificate_rows=0).fit(X, Y)


def test_certificates_experiment_quick():
    """The quick grid: no certificate passes an estimate whose error exceeds the stated tolerance, and
    every row records verdict, tolerance, bound and error; the table has one line per learner."""
    from nnrecover.experiments.certificates import certificate_table, certificates_experiment

    assert nr.experiments.get_experiment("certificates").func is certificates_experiment

    df, fig = certificates_experiment(rng=0, quick=True, learners=["pure-neuron", "exact-relu", "bakshi2019-noisy"])
    fitted = df[df["status"] == "fitted"]
    assert len(df) == 12 and len(fitted) >= 9
    assert not fitted["false_pass"].any()
    assert fitted["stated_tolerance"].all()
    assert (fitted["error"] <= fitted["bound"].where(np.isfinite(fitted["bound"]), math.inf)).all()
    table = certificate_table(df)
    assert table.count("\n") == 2 + 3 - 1 and "exact-relu" in table
    assert fig.axes
    with pytest.raises(InputError, match="learners"):
        certificates_experiment(quick=True, learners=["nope"])


@pytest.mark.parametrize("case", ["leaky relu beyond the dense budget", "relu beyond both budgets"])
def test_too_large_certificate_is_not_evaluated_and_claims_nothing(case):
    """Above MAX_CERTIFICATE_FLOPS the Gauss-Newton matrix (P^2 entries, P^3 flops) is not formed, and the
    matrix-free form is for ReLU units within MAX_MATRIX_FREE_FLOPS: beyond both, the record says so with
    passed=None, the learner is not asked to certify (no warning, no error) and rows given as a callable
    are not read."""
    import nnrecover as nr
    from nnrecover.refine.certificate import MAX_CERTIFICATE_FLOPS, MAX_MATRIX_FREE_FLOPS, certify_max_unit_error

    if case.startswith("leaky"):
        net = nr.random_network(200, 30, n_outputs=30, activation="leaky_relu(0.1)", rng=0)
    else:
        net = nr.random_network(3000, 120, n_outputs=120, rng=0)  # a span block of 29160 coordinates
    X = np.random.default_rng(0).standard_normal((100, net.n_inputs))

    class NoCertify:
        def _certify(self, *args, **kwargs):
            raise AssertionError("a skipped certificate must not be issued")

    def rows():
        raise AssertionError("the rows of an unaffordable certificate must not be read")

    for given in ((X, net.predict(X)), rows):
        diag: dict = {}
        assert certify_max_unit_error(NoCertify(), net, given, diag, tol=0.1) is None
        rec = diag["certificates"]["max_unit_error"]
        assert rec["passed"] is None and rec["detail"].startswith("not evaluated")
    assert 0 < MAX_CERTIFICATE_FLOPS < MAX_MATRIX_FREE_FLOPS


def _dense_and_matrix_free(truth, n, noise, seed):
    X, Y = nr.sample(truth, StandardGaussian(truth.n_inputs), n, rng=seed, noise=noise)
    est = refine_network(truth, (X, Y), rng=0, holdout_fraction=0.0).network if noise else truth
    return est, X, Y, (unit_error_bound(est, X, Y, method="dense"), unit_error_bound(est, X, Y, method="matrix-free"))


@pytest.mark.parametrize("n", [1500, 8000])
def test_matrix_free_bound_has_the_dense_step_and_a_larger_noise_term(n):
    """The matrix-free bound solves for the same Gauss-Newton step (to its tolerance) and bounds the
    noise term from above through the preconditioner M: with lambda = LANCZOS_SAFETY theta_min and
    theta_max the extreme eigenvalues of M^{-1} J^T J / n, each unit's covariance block lies between the
    dense one and theta_max / lambda times it, so the noise term is at most sqrt(theta_max / lambda) times
    the dense one (about 1.4 at n = 1500, 1.1 at n = 8000: 32 and 170 residuals per parameter). Label
    noise 0.1; the bound holds."""
    from nnrecover.refine.certificate import STEP_RTOL

    truth = nr.random_network(30, 4, 3, rng=0)
    est, X, Y, (dense, free) = _dense_and_matrix_free(truth, n, 0.1, seed=1)
    assert dense["method"] == "dense" and free["method"] == "matrix-free"
    # its conjugate gradients stop at STEP_RTOL in the preconditioner's norm, which bounds the relative error
    # of the step by STEP_RTOL sqrt(theta_max / theta_min) (the preconditioned condition number, below 3 here)
    np.testing.assert_allclose(free["step"], dense["step"], rtol=3 * STEP_RTOL)
    assert free["sigma"] == pytest.approx(dense["sigma"], rel=1e-8)
    lam, theta_max = free["lanczos_lambda"], free["lanczos_ritz_range"][1]
    assert 0 < lam < 1.0 < theta_max
    assert np.all(free["noise"] >= dense["noise"] * (1 - 1e-9))
    assert np.all(free["noise"] <= dense["noise"] * np.sqrt(theta_max / lam) * (1 + 1e-9))
    assert parameter_error(est, truth)["max_unit_error"] <= free["bound"] < 0.5


def test_matrix_free_bound_at_round_off_on_noiseless_data_and_refuses_a_wrong_network():
    truth = nr.random_network(30, 4, 3, rng=0)
    _, X, Y, (dense, free) = _dense_and_matrix_free(truth, 3000, 0.0, seed=1)
    assert free["bound"] < 1e-12 and dense["bound"] < 1e-12
    wrong = truth.copy()
    wrong.hidden_weights[0] += 0.02 * np.random.default_rng(3).standard_normal(30)
    err = parameter_error(wrong, truth)["max_unit_error"]
    info = unit_error_bound(wrong, X, Y, method="matrix-free")
    # the step part finds the error (first order: 2 x the step covers it)
    assert err <= info["first_order"] and info["step"].max() == pytest.approx(err, rel=0.2)
    # a unit active on no row: J is rank deficient, no bound (as in the dense form), and no warning
    dead = truth.copy()
    dead.hidden_bias[1] = -50.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert unit_error_bound(dead, X, Y, method="matrix-free")["bound"] == math.inf
    assert unit_error_bound(dead, X, Y, method="dense")["bound"] == math.inf
    with pytest.raises(InputError, match="ReLU"):
        unit_error_bound(nr.random_network(30, 4, 3, activation="leaky_relu(0.1)", rng=0), X, Y,
                         method="matrix-free")
    with pytest.raises(InputError, match="method"):
        unit_error_bound(truth, X, Y, method="exact")


@pytest.mark.parametrize("d, k, p", [(20, 3, 2), (100, 10, 1)])
def test_lanczos_smallest_ritz_value_is_the_smallest_generalized_eigenvalue(d, k, p):
    """LANCZOS_SAFETY's premise: the Lanczos steps, stopped by LANCZOS_PLATEAU, give a smallest Ritz value of
    M^{-1} J^T J / n between the smallest eigenvalue of the pencil (V^T J^T J V / n, (V^T M^{-1} V)^{-1}) off
    the k rescaling directions and that eigenvalue / LANCZOS_SAFETY (Ritz values lie inside the spectrum),
    at 4 and 20 rows per parameter and output (the certificate's two looks). P = 68: the Krylov space is
    exhausted (to round-off); P = 1021 at 4 rows per parameter: condition number about 30, where the
    smallest Ritz value settles slowly (measured: 1.4 % above the eigenvalue after 40 steps, 2e-4 at 20 rows
    per parameter after 25)."""
    from scipy import linalg

    from nnrecover.refine import matrix_free
    from nnrecover.refine.certificate import LANCZOS_PLATEAU, LANCZOS_SAFETY, LANCZOS_STEPS, _preconditioned_lanczos

    net = nr.random_network(d, k, p, rng=5).canonical()
    P = k * d + k + p * k + p
    W, b, A = net.hidden_weights, net.hidden_bias, net.output_weights

    def unflat(x):
        return x[:k * d].reshape(k, d), x[k * d:k * d + k], x[k * d + k:k * d + k + p * k].reshape(p, k), x[-p:]

    def flat(v):
        return np.concatenate([np.ravel(a) for a in v])

    gauge = np.column_stack([flat(tuple(g * (np.arange(k) == i)[sl] for g, sl in
                                        ((W, (slice(None), None)), (b, slice(None)), (-A, (None, slice(None)))))
                                  + (np.zeros(p),)) for i in range(k)])
    V = linalg.null_space(gauge.T)
    for rows in (4, 20):
        X = np.random.default_rng(rows).standard_normal((rows * P // p, d))
        op = matrix_free.Operator(W, b, A, X, X @ W.T + b, X.astype(np.float32), chunk_rows=4096)
        op.factor(0.0)
        ritz = _preconditioned_lanczos(op, LANCZOS_STEPS, np.random.default_rng(0), LANCZOS_PLATEAU)
        JtJ = np.column_stack([flat(op.jtj(*unflat(e))) for e in np.eye(P)])
        Minv = np.column_stack([flat(op.m_apply(*unflat(e), inverse=True)) for e in np.eye(P)])
        pencil = linalg.eigvalsh(V.T @ (JtJ + JtJ.T) / 2 @ V, linalg.inv(V.T @ (Minv + Minv.T) / 2 @ V))
        # float32 products: the Ritz values within ~1e-6 of the float64 ones
        assert pencil.min() * (1 - 1e-5) <= ritz.min() <= pencil.min() / LANCZOS_SAFETY
        assert ritz.max() <= pencil.max() * (1 + 1e-5)


def test_largest_eigenvalue_matches_eigvalsh():
    from nnrecover.refine.certificate import _largest_eigenvalue

    rng = np.random.default_rng(3)
    for n in (5, 300):
        J = rng.standard_normal((2 * n, n)) * np.logspace(0, 3, n)   # G = J^T J: condition about 1e6
        G = J.T @ J
        ev = np.linalg.eigvalsh(G)
        assert abs(_largest_eigenvalue(G) - ev[-1]) <= 1e-8 * ev[-1]
        assert abs(1.0 / _largest_eigenvalue(np.linalg.inv(G)) - ev[0]) <= 1e-7 * ev[0]


class _Recorder:
    """A learner stand-in that records a certificate's verdict (``certify_max_unit_error`` calls ``_certify``)."""

    def _certify(self, name, passed, detail, diagnostics):
        diagnostics.setdefault("certificates", {})[name] = {"passed": passed, "detail": detail}


def test_certificate_decides_on_a_fifth_of_the_rows_only_a_residual_at_round_off():
    """Two looks at the rows, each at half the failure probability: the first (4 rows per parameter)
    settles a pass when the residual is at round-off; with label noise (where the lack-of-fit test needs
    power) and on a failing first look, every row the dense form affords (CHEAP_CERTIFICATE_FLOPS) decides."""
    import nnrecover as nr
    from nnrecover.refine.certificate import CHEAP_CERTIFICATE_FLOPS, certify_max_unit_error

    net = nr.random_network(8, 3, n_outputs=2, rng=0)
    P = 3 * 8 + 3 * 2 + 2
    X = np.random.default_rng(1).standard_normal((40_000, 8))
    Y = net.predict(X) + 0.05 * np.random.default_rng(2).standard_normal((40_000, 2))
    assert 40_000 * (3 * 9) ** 2 + P ** 3 < CHEAP_CERTIFICATE_FLOPS

    exact: dict = {}
    assert certify_max_unit_error(_Recorder(), net, (X, net.predict(X)), exact, tol=1e-6) is True
    assert exact["certificates"]["max_unit_error"]["n_rows"] == max(2000, 4 * P // 2)
    loose: dict = {}
    assert certify_max_unit_error(_Recorder(), net, (X, Y), loose, tol=1.0) is True
    assert loose["certificates"]["max_unit_error"]["n_rows"] == 40_000
    tight: dict = {}
    assert certify_max_unit_error(_Recorder(), net, (X, Y), tight, tol=1e-6) is False
    assert tight["certificates"]["max_unit_error"]["n_rows"] == 40_000


def test_relu_first_look_matrix_free_above_the_dense_first_look_budget():
    """d = 40, k = p = 6: the dense form's first look (2000 rows) would cost 1.4e8 flops > 1e8, so a ReLU
    network's first look takes the matrix-free form; it settles a residual at round-off, and otherwise the
    second look is dense (the tighter noise term), on the rows that CHEAP_CERTIFICATE_FLOPS affords. A
    leaky-ReLU network keeps the dense form for both."""
    from nnrecover.refine.certificate import CHEAP_CERTIFICATE_FLOPS, DENSE_FIRST_LOOK_FLOPS, certify_max_unit_error

    net = nr.random_network(40, 6, n_outputs=6, rng=0)
    P = 6 * 40 + 6 * 6 + 6
    assert 2000 * (6 * 41) ** 2 + P ** 3 > DENSE_FIRST_LOOK_FLOPS
    X = np.random.default_rng(1).standard_normal((40_000, 40))
    Y = net.predict(X) + 0.05 * np.random.default_rng(2).standard_normal((40_000, 6))

    exact: dict = {}
    assert certify_max_unit_error(_Recorder(), net, (X, net.predict(X)), exact, tol=1e-6) is True
    rec = exact["certificates"]["max_unit_error"]
    assert rec["method"] == "matrix-free" and rec["n_rows"] == 2000
    second = max(2000, -(-20 * P // 6), int((CHEAP_CERTIFICATE_FLOPS - P ** 3) // (6 * 41) ** 2))
    for tol, verdict in ((1.0, True), (1e-6, False)):
        noisy: dict = {}
        assert certify_max_unit_error(_Recorder(), net, (X, Y), noisy, tol=tol) is verdict
        rec = noisy["certificates"]["max_unit_error"]
        assert rec["method"] == "dense" and rec["n_rows"] == second
    leaky = nr.random_network(40, 6, n_outputs=6, activation="leaky_relu(0.1)", rng=0)
    other: dict = {}
    certify_max_unit_error(_Recorder(), leaky, (X, leaky.predict(X)), other, tol=1.0)
    assert other["certificates"]["max_unit_error"]["method"] == "dense"


@pytest.mark.parametrize("activation", ["relu", "leaky_relu"])
def test_bound_by_unit_pairs_equals_the_one_product_form(monkeypatch, activation):
    # from UNIT_PAIR_MIN_INPUTS inputs the hidden block of J^T J is summed unit pair by unit pair over
    # the rows where both derivatives are nonzero; it is the same sum as the product of the rows
    # z_n = f'(W x_n + b) (x) (x_n, 1), reordered, so every output agrees to round-off
    from nnrecover.refine import certificate

    gen = np.random.default_rng(4)
    net = nr.random_network(30, 4, 3, activation=activation, rng=5, bias_range=(-0.3, 0.3))
    X, Y = nr.sample(net, nr.distributions.StandardGaussian(30), 3000, noise=0.1, rng=6)
    est = nr.TwoLayerNetwork(net.hidden_weights + 1e-3 * gen.standard_normal(net.hidden_weights.shape),
                             net.hidden_bias, net.output_weights, net.output_bias, activation=activation)
    pairs = unit_error_bound(est, X, Y)
    monkeypatch.setattr(certificate, "UNIT_PAIR_MIN_INPUTS", 10**9)
    dense = unit_error_bound(est, X, Y)
    assert np.isfinite(pairs["bound"])
    np.testing.assert_allclose(pairs["per_unit"], dense["per_unit"], rtol=1e-10)
    np.testing.assert_allclose(pairs["noise"], dense["noise"], rtol=1e-10)
    assert pairs["jacobian_condition"] == pytest.approx(dense["jacobian_condition"], rel=1e-8)

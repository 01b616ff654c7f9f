"""Bakshi-Jayaram-Woodruff 2019: tensor step, Gaussian and ICA pipelines, ExactReLULearner.

Small, fast versions of the "Must show" runs; the full seed sweeps live in the ``bakshi2019-exact`` experiment.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from sklearn.base import clone

import nnrecover as nr
from nnrecover.errors import AssumptionError, AssumptionWarning, CertificateWarning, ConvergenceError, InputError
from nnrecover.learners import ExactReLULearner
from nnrecover.learners.bakshi2019 import (algorithm3, algorithm4, approximate_hidden_weights,
                                           approximate_hidden_weights_population, choose_order,
                                           gaussian_pipeline)
from nnrecover.learners.bakshi2019._common import match_rows

GAUSS = nr.distributions.StandardGaussian


def _dir_error(V_est, V_true):
    V_true = V_true / np.linalg.norm(V_true, axis=1, keepdims=True)
    order, signs = match_rows(V_est, V_true)
    return float(np.max(np.linalg.norm(V_est[order] * signs[:, None] - V_true, axis=1)))


def _max_unit_error(res_or_learner, truth):
    return nr.metrics.parameter_error(res_or_learner.network if hasattr(res_or_learner, "certified")
                                      else res_or_learner.network_, truth)["max_unit_error"]


# --------------------------------------------------------------------------------------- order choice

def test_relu_third_hermite_coefficient_is_zero():
    """Why Algorithm 4 fails for ReLU: c_3 = E[relu(z) He_3(z)] = E[z^4; z>0] - 3 E[z^2; z>0] = 3/2 - 3/2 = 0
    (half-line moments E[z^{2q}; z>0] = (2q-1)!!/2), while c_2 = 1/√(2π), c_4 = -1/√(2π) (quadrature)."""
    c = nr.get_activation("relu").hermite_coefficients(4, method="quadrature")
    assert abs(c[3]) < 1e-13
    assert c[2] == pytest.approx(1 / math.sqrt(2 * math.pi), abs=1e-13)
    assert c[4] == pytest.approx(-1 / math.sqrt(2 * math.pi), abs=1e-13)


def test_choose_order():
    assert choose_order("relu", 8)[0] == 2
    assert choose_order("relu", 1)[0] == 4            # Option B: c_3 = 0
    assert choose_order("relu_power(2)", 1)[0] == 3   # c_3 != 0
    assert choose_order("exp_minus_one", 1)[0] == 3
    with pytest.raises(AssumptionError, match="c_3 = E\\[relu"):
        choose_order("relu", 8, 3)
    with pytest.raises(AssumptionError, match="two outputs"):
        choose_order("relu", 1, 2)
    with pytest.raises(InputError, match="order"):
        choose_order("relu", 8, 5)


def test_algorithm4_refuses_relu_and_works_with_c3():
    net = nr.random_network(8, 3, 4, rng=1).canonical()
    X, Y = nr.sample(net, GAUSS(8), 2000, rng=2)
    with pytest.raises(AssumptionError, match="cannot work as written"):
        algorithm4(X, Y, 3)
    net2 = nr.random_network(8, 3, 4, activation="relu_power(2)", rng=3).canonical()
    X, Y = nr.sample(net2, GAUSS(8), 100_000, rng=4)
    res = algorithm4(X, Y, 3, activation="relu_power(2)", rng=0)
    assert res.diagnostics["approximate"]["order"] == 3
    assert res.certified
    assert _max_unit_error(res, net2) < 1e-10


# ------------------------------------------------------------------------------------ tensor step

@pytest.mark.parametrize("act, m, order, span", [
    ("relu", 4, 2, "linear"), ("relu", 4, 2, "second"), ("relu", 1, 4, "second"), ("relu", 4, 4, "linear"),
    ("relu_power(2)", 1, 3, "second"), ("relu_power(3)", 5, 2, "linear"), ("exp_minus_one", 4, 3, "linear")])
def test_tensor_step_population_exact(act, m, order, span):
    """On exact population moments the tensor step returns the directions to round-off (every order)."""
    net = nr.random_network(9, 3, m, activation=act, rng=5, condition_number=4).canonical()
    res = approximate_hidden_weights_population(net, order=order, span=span, rng=0)
    assert res.diagnostics["order"] == order
    assert _dir_error(res.hidden_weights, net.hidden_weights) < 1e-11


@pytest.mark.parametrize("method", ["joint", "jennrich", "whiten"])
def test_tensor_step_decompositions_population(method):
    """Option A's decompositions are exact on population moments; "whiten" uses a definite combination
    N(θ) of the slices (checked, since M_2(θ) is indefinite in general), for k = 10 found from the
    Jennrich estimate of the weights when random θ fail (probability of one sign pattern ~ 2^-9)."""
    net = nr.random_network(24, 10, 10, rng=1, condition_number=5).canonical()
    res = approximate_hidden_weights_population(net, decomposition=method, rng=0)
    assert res.diagnostics["decomposition"]["method"] == method
    assert _dir_error(res.hidden_weights, net.hidden_weights) < 1e-12
    if method == "whiten":
        assert res.diagnostics["decomposition"]["definiteness"] > 0


def test_tensor_step_samples_and_control_variates():
    """Finite samples, d = 10, k = 3, m = 4, n = 1e5. Entries of the order-2 moment have standard error
    about sqrt(E[y^2] E[(x_a x_b)^2] / n) ~ 2e-3 x ||U|| while the smallest component is c_2 min_j ||U_j||
    ~ 0.3: relative perturbation ~ 1e-2, amplified by the joint diagonalisation's condition (κ(V) = 3): a
    direction error well below 0.1. Control variates (unbiased since He_2 is orthogonal to degree <= 1)
    reduce the moment error on the same data."""
    net = nr.random_network(10, 3, 4, rng=6, condition_number=3).canonical()
    X, Y = nr.sample(net, GAUSS(10), 100_000, rng=7)
    with_cv = approximate_hidden_weights(X, Y, 3, rng=0)
    without = approximate_hidden_weights(X, Y, 3, control_variates=False, rng=0)
    assert _dir_error(with_cv.hidden_weights, net.hidden_weights) < 0.1
    assert _dir_error(without.hidden_weights, net.hidden_weights) < 0.1
    from nnrecover.hermite.statistics import HermiteTensorStatistic
    P = np.linalg.qr(net.hidden_weights.T)[0]
    exact = HermiteTensorStatistic(2, basis=P).exact(net)
    resid = Y - Y.mean(0) - X @ (Y.T @ X / X.shape[0]).T
    err_cv = np.linalg.norm(HermiteTensorStatistic(2, basis=P).update(X, resid).finalize() - exact)
    err_plain = np.linalg.norm(HermiteTensorStatistic(2, basis=P).update(X, Y).finalize() - exact)
    assert err_cv < 0.8 * err_plain


def test_option_b_single_output_samples():
    """Option B (order 4) works with m = 1 where Option A cannot (one slice)."""
    net = nr.random_network(6, 2, 1, rng=8, condition_number=2).canonical()
    X, Y = nr.sample(net, GAUSS(6), 200_000, rng=9)
    res = approximate_hidden_weights(X, Y, 2, rng=0)
    assert res.diagnostics["order"] == 4
    # order-4 moments have ~E[He_4^2] = 24 times the variance per entry: error ~ 0.1 at n = 2e5
    assert _dir_error(res.hidden_weights, net.hidden_weights) < 0.3
    with pytest.raises(AssumptionError, match="k <= min"):
        gaussian_pipeline(X, Y, 2)


def test_whitening_for_non_identity_covariance():
    """Remark 3: inputs N(0, Σ), κ(Σ) = 5. The Stein identity needs whitened inputs: without whitening the
    directions are biased (error does not shrink with n), with whitening they are accurate, and the exact
    step (which needs no whitening) then returns the teacher."""
    d, k, m = 10, 3, 4
    net = nr.random_network(d, k, m, rng=0, condition_number=2).canonical()
    g = np.random.default_rng(1)
    Q, _ = np.linalg.qr(g.standard_normal((d, d)))
    dist = nr.distributions.Gaussian((Q * np.geomspace(1, 0.2, d)) @ Q.T)
    X, Y = nr.sample(net, dist, 100_000, rng=2)
    white = approximate_hidden_weights(X, Y, k, whiten=True, rng=0)
    with pytest.warns(AssumptionWarning, match="covariance deviation.*whiten=True"):
        raw = approximate_hidden_weights(X, Y, k, whiten=False, rng=0)
    assert _dir_error(white.hidden_weights, net.hidden_weights) < 0.05
    assert _dir_error(raw.hidden_weights, net.hidden_weights) > 0.2
    res = gaussian_pipeline(X, Y, k, whiten=True, rng=0)
    assert res.certified and _max_unit_error(res, net) < 1e-10
    learner = ExactReLULearner(k, whiten=True, refine=False, random_state=0).fit(X, Y)
    assert learner.diagnostics_["certified"] and learner.diagnostics_["exact"]["approximate"]["whitened"]
    assert _max_unit_error(learner, net) < 1e-10


# ------------------------------------------------------------------------------------------ pipelines

@pytest.mark.parametrize("seed", [0, 1])
def test_gaussian_pipeline_must_show_small(seed):
    """Must show 1 at test size: d = 20, k = 5, m = 8, κ(V) = 10 before normalisation, n = 2e5 (the full
    20-seed sweep at n = 1e6 and the d = 50 case are in the bakshi2019-exact experiment)."""
    net = nr.random_network(20, 5, 8, rng=seed, condition_number=10).canonical()
    stream = nr.sample_stream(net, GAUSS(20), 200_000, rng=seed + 100)
    res = gaussian_pipeline(stream, None, 5, rng=seed)
    assert res.certified, res.diagnostics["failure_reasons"]
    assert _max_unit_error(res, net) < 1e-10
    assert res.diagnostics["approximate"]["n_moment_samples"] == 200_000 - res.diagnostics["n_refine"]


def test_ica_route_orthonormal():
    """Algorithm 3: V* orthonormal, x ~ N(0, I): ICA on the sketched outputs, then steps 4-8, exact."""
    net = nr.random_network(10, 3, 5, rng=3, rows="orthonormal").canonical()
    X, Y = nr.sample(net, GAUSS(10), 100_000, rng=4)
    for sketch in ("svd", "gaussian"):
        res = algorithm3(X, Y, 3, sketch=sketch, rng=0)
        assert res.certified, res.diagnostics["failure_reasons"]
        assert _max_unit_error(res, net) < 1e-10
    paper = algorithm3(X, Y, 3, form="threshold", rng=0)   # the paper's rounding at τ
    assert not paper.certified or _max_unit_error(paper, net) < 1e-10


def test_ica_route_never_certifies_wrong_answer_for_non_orthonormal_v():
    """Outside its assumption (V* far from orthonormal: ICA returns mixtures) the route either still finds
    the exact teacher or refuses."""
    net = nr.random_network(8, 3, 4, rng=5, condition_number=8).canonical()
    X, Y = nr.sample(net, GAUSS(8), 30_000, rng=6)
    res = algorithm3(X, Y, 3, rng=0)
    if res.certified:
        assert _max_unit_error(res, net) < 1e-10
    else:
        assert res.diagnostics["failure_reasons"]


def test_rectified_activations_pipeline():
    """Appendix 9.1 through the whole pipeline (default order 2, then φ^{-1} in the exact systems):
    relu_power(2), relu_power(3) and exp_minus_one (identifiable row norms)."""
    for act in ("relu_power(2)", "relu_power(3)", "exp_minus_one"):
        net = nr.random_network(8, 3, 4, activation=act, rng=7, condition_number=3).canonical()
        X, Y = nr.sample(net, GAUSS(8), 100_000, rng=8)
        res = gaussian_pipeline(X, Y, 3, activation=act, rng=0)
        assert res.certified, (act, res.diagnostics["failure_reasons"])
        assert _max_unit_error(res, net) < 1e-10


def test_pipeline_streams_equal_arrays_and_reproducible():
    net = nr.random_network(8, 3, 4, rng=9).canonical()
    X, Y = nr.sample(net, GAUSS(8), 50_000, rng=10)
    a = gaussian_pipeline(X, Y, 3, rng=0)
    b = gaussian_pipeline(nr.sample_stream(net, GAUSS(8), 50_000, chunk_size=7_777, rng=10), None, 3, rng=0)
    c = gaussian_pipeline(X, Y, 3, rng=0)
    assert a.certified and b.certified
    assert np.array_equal(a.hidden_weights, c.hidden_weights)     # same seed: bit-identical
    assert np.max(np.abs(a.hidden_weights - b.hidden_weights)) < 1e-13


def test_pipeline_validation():
    net = nr.random_network(8, 3, 4, rng=11).canonical()
    X, Y = nr.sample(net, GAUSS(8), 5_000, rng=12)
    with pytest.raises(AssumptionError, match="k <= min"):
        gaussian_pipeline(X, Y, 5)
    with pytest.raises(AssumptionError, match="rectified"):
        gaussian_pipeline(X, Y, 3, activation="sigmoid")
    with pytest.raises(InputError, match="one-pass"):
        gaussian_pipeline(iter([(X, Y)]), None, 3)
    with pytest.raises(InputError, match="span"):
        approximate_hidden_weights(X, Y, 3, span="cubic")


# -------------------------------------------------------------------------------------------- learner

def test_learner_exact_and_sklearn_api():
    net = nr.random_network(10, 3, 4, rng=13, condition_number=5).canonical()
    X, Y = nr.sample(net, GAUSS(10), 60_000, rng=14)
    learner = ExactReLULearner(3, random_state=0).fit(X, Y)
    assert learner.diagnostics_["certified"]
    assert learner.diagnostics_["refinement"]["ran"] is False
    assert _max_unit_error(learner, net) < 1e-10
    assert learner.predict(X[:5]).shape == (5, 4)
    assert learner.hidden_weights_.shape == (3, 10)
    assert clone(learner).get_params()["n_hidden"] == 3
    ica = ExactReLULearner(3, approximate="ica", random_state=0)
    with pytest.raises(InputError, match="whiten"):
        ExactReLULearner(3, approximate="ica", whiten=True).fit(X, Y)
    assert ica.get_params()["approximate"] == "ica"


def test_learner_certificates_hold_the_line():
    """Must show 2: with far too few samples the approximate directions are off; the learner says so
    (exact step not certified, with failure reasons; the final certificate fails with a CertificateWarning
    and a bound above the true error), raises with strict=True, and its uncertified estimate comes from
    the fallback (Algorithm 6 signs + least squares), not from a claimed exact answer."""
    net = nr.random_network(20, 5, 8, rng=15, condition_number=10).canonical()
    X, Y = nr.sample(net, GAUSS(20), 600, rng=16)
    with pytest.warns(CertificateWarning, match="max_unit_error"):
        learner = ExactReLULearner(5, refine=False, random_state=0).fit(X, Y)
    assert learner.diagnostics_["certified"] is False
    assert learner.diagnostics_["failure_reasons"]
    cert = learner.diagnostics_["certificates"]["max_unit_error"]
    assert cert["passed"] is False and cert["bound"] >= _max_unit_error(learner, net) > 1e-6  # inf: no bound
    with pytest.raises(ConvergenceError, match="max_unit_error"):
        ExactReLULearner(5, strict=True, random_state=0).fit(X, Y)


def test_learner_refuses_noisy_labels_and_wrong_k():
    net = nr.random_network(8, 3, 4, rng=17).canonical()
    X, Y = nr.sample(net, GAUSS(8), 40_000, noise=1e-3, rng=18)
    with pytest.raises(ConvergenceError):
        ExactReLULearner(3, strict=True, random_state=0).fit(X, Y)
    X, Y = nr.sample(net, GAUSS(8), 40_000, rng=18)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CertificateWarning)
        two = ExactReLULearner(2, refine=False, random_state=0).fit(X, Y)
    assert two.diagnostics_["certified"] is False


def test_paper_noise_device_and_dask_input():
    """Algorithm 4 step 2 adds G ~ N(0, 1) to A (an analysis device): same G on every pass, only more
    variance; and the learner reads dask arrays chunk by chunk."""
    import dask.array as da

    net = nr.random_network(8, 3, 4, rng=19).canonical()
    X, Y = nr.sample(net, GAUSS(8), 100_000, rng=20)
    a = approximate_hidden_weights(X, Y, 3, paper_noise=True, rng=0)
    b = approximate_hidden_weights(X, Y, 3, paper_noise=True, rng=0)
    assert np.array_equal(a.hidden_weights, b.hidden_weights)
    assert _dir_error(a.hidden_weights, net.hidden_weights) < 0.2
    learner = ExactReLULearner(3, random_state=0).fit(da.from_array(X, chunks=(20_000, 8)),
                                                      da.from_array(Y, chunks=(20_000, 4)))
    assert learner.diagnostics_["certified"] and _max_unit_error(learner, net) < 1e-10


# ------------------------------------------------------------------------------------- applies_to hooks

@pytest.mark.parametrize("learner", [ExactReLULearner, nr.learners.NoisyReLULearner])
def test_applies_to(learner):
    """The optional hook read by the learner comparison (experiments/compare.py): (bool, reason), never
    raising; refused: m < k, k > d, non-rectified f, non-Gaussian or non-centred inputs."""
    D = nr.distributions
    net = nr.random_network(10, 4, 4, rng=0)
    ok, why = learner.applies_to(net, GAUSS(10))
    assert ok and "Gaussian" in why
    ok, why = learner.applies_to(net, D.Gaussian(np.diag(np.arange(1.0, 11.0))))
    assert ok and "whiten=True" in why
    ok, why = learner.applies_to(nr.random_network(10, 4, 4, rng=0, bias_range=(-0.1, 0.1)), GAUSS(10))
    assert ok and "biases" in why
    refused = [(nr.random_network(10, 4, 2, rng=0), GAUSS(10), "at least as many outputs as hidden units"),
               (nr.random_network(3, 4, 5, rng=0), GAUSS(3), "at least as many inputs as hidden units"),
               (nr.random_network(10, 4, 5, activation="tanh", rng=0), GAUSS(10), "rectified"),
               (net, D.Rademacher(10), "not Gaussian"),
               (net, D.SymmetricMixture(np.ones((1, 10))), "not Gaussian"),
               (net, D.Gaussian(np.eye(10), mean=np.ones(10)), "non-zero mean"),
               ("not a network", GAUSS(10), "TwoLayerNetwork")]
    for teacher, dist, reason in refused:
        ok, why = learner.applies_to(teacher, dist)
        assert not ok and reason in why, (reason, why)
    U = net.output_weights.copy()
    U[:, 1] = U[:, 0]
    ok, why = learner.applies_to(nr.TwoLayerNetwork(net.hidden_weights, None, U), GAUSS(10))
    assert not ok and "U* are rank deficient" in why


def test_compare_learners_reads_applies_to():
    """With m < k the comparison reports both learners as not applicable without fitting them."""
    from nnrecover.experiments.compare import compare_learners

    teacher = nr.random_network(6, 3, 2, rng=0)
    df = compare_learners(teacher, GAUSS(6), 2_000, rng=0, learners=["exact-relu", "bakshi2019-noisy"])
    assert list(df["learner"]) == ["exact-relu", "bakshi2019-noisy"]
    assert df["status"].str.startswith("not applicable: Bakshi et al.'s learners need at least as many outputs "
                                 "as hidden units (k <= min(m, d)").all()
    assert df["fit_time_s"].isna().all()


# ------------------------------------------------------------------------------------ errata 2 and 8

def test_order2_slice_combination_is_indefinite_unless_one_sign():
    """Erratum to Algorithm 4 (whitening): M_2(θ) = c_2 sum_j <θ, U*_j> V*_j^T V*_j restricted to the span is
    definite iff all <θ, U*_j> share one sign (Sylvester's law of inertia), so JSA15's PSD whitening of a
    random M_2(θ) is invalid; nnrecover.tensor.whiten refuses such a matrix, and the "whiten"
    decomposition only whitens a checked definite combination (population moments, round-off)."""
    from nnrecover.errors import AssumptionError as AE
    from nnrecover.hermite.statistics import HermiteTensorStatistic
    from nnrecover.tensor import whiten

    net = nr.random_network(8, 3, 5, rng=2, condition_number=3).canonical()
    P = np.linalg.qr(net.hidden_weights.T)[0]
    T = HermiteTensorStatistic(2, basis=P).exact(net)          # (m, k, k) projected slices
    U = net.output_weights
    g = np.random.default_rng(3)
    seen = {"mixed": 0, "one-sign": 0}
    for _ in range(40):
        theta = g.standard_normal(5)
        lam = np.linalg.eigvalsh(np.tensordot(theta, T, axes=(0, 0)))
        w = theta @ U
        if np.all(w > 0) or np.all(w < 0):
            seen["one-sign"] += 1
            assert np.all(lam * np.sign(w[0]) > 0)           # definite, with the sign of the weights
        else:
            seen["mixed"] += 1
            assert lam[0] < 0 < lam[-1]                      # indefinite: no real M^{-1/2}
            with pytest.raises(AE):
                whiten(np.tensordot(theta, T, axes=(0, 0)), 3)
    assert seen["mixed"] > 0 and seen["one-sign"] > 0          # both cases occurred (P[one sign] = 1/4)


def test_ica_sources_are_super_gaussian_and_signs_fixed_by_skewness():
    """Erratum 8: Definition 6 asks for sources with kurtosis below the Gaussian's, but the rectified
    Gaussian max(z, 0) has excess kurtosis +2.41 and skewness +1.64 (closed form from the half-line moments
    E[z^q; z > 0]); ICA still separates it, and fixing each column's sign by positive skewness makes
    M Ā ≈ D f(V* X̄) with D > 0 (Theorem 3's positive diagonal), which is what steps 4-8 need."""
    from nnrecover.learners.bakshi2019 import ica_unmixing

    r = 1 / math.sqrt(2 * math.pi)
    m1, m2, m3, m4 = r, 0.5, 2 * r, 1.5                        # E[z^q; z > 0], q = 1..4
    var = m2 - m1 ** 2
    skew = (m3 - 3 * m1 * m2 + 2 * m1 ** 3) / var ** 1.5
    kurt = (m4 - 4 * m1 * m3 + 6 * m1 ** 2 * m2 - 3 * m1 ** 4) / var ** 2 - 3
    assert skew == pytest.approx(1.64, abs=5e-3) and kurt == pytest.approx(2.41, abs=5e-3)   # skewness and kurtosis of the ReLU output
    net = nr.random_network(6, 3, 4, rng=4, rows="orthonormal").canonical()
    X, Y = nr.sample(net, GAUSS(6), 50_000, rng=5)
    M, diag = ica_unmixing(X, Y, 3, rng=0)
    Z = Y @ M.T
    H = np.maximum(X @ net.hidden_weights.T, 0)
    C = np.corrcoef(Z.T, H.T)[:3, 3:]
    best = C[np.arange(3), np.argmax(np.abs(C), axis=1)]
    # ICA error ~ 1/sqrt(n) relative: the matched correlations are 1 - O(1e-4), and all positive
    assert np.all(best > 0.99)
    assert np.all(diag["source_skewness"] > 1.0)


@pytest.mark.parametrize("learner", [ExactReLULearner, nr.learners.NoisyReLULearner])
def test_learners_accept_arrays_chunks_streams_and_dask(learner):
    """ARCHITECTURE §1: fit(X, Y), fit(iterable of (X, Y) chunks), fit(SampleStream), fit(dask X, dask Y).
    The statistics are the same sums accumulated in other chunkings, so the fits agree to round-off
    (the noiseless exact learner returns the teacher in every case)."""
    import dask.array as da

    net = nr.random_network(8, 3, 4, rng=19).canonical()
    X, Y = nr.sample(net, GAUSS(8), 40_000, rng=20)
    inputs = {"arrays": (X, Y), "list": ([(X[i:i + 7_000], Y[i:i + 7_000]) for i in range(0, 40_000, 7_000)],),
              "stream": (nr.sample_stream(net, GAUSS(8), 40_000, chunk_size=7_000, rng=20),),
              "dask": (da.from_array(X, chunks=(7_000, 8)), da.from_array(Y, chunks=(7_000, 4)))}
    fits = {name: learner(3, refine=False, random_state=0).fit(*args) for name, args in inputs.items()}
    ref = fits["arrays"].hidden_weights_
    for name, est in fits.items():
        assert np.max(np.abs(est.hidden_weights_ - ref)) < 1e-12, name
        if learner is ExactReLULearner:
            assert est.diagnostics_["certified"] and _max_unit_error(est, net) < 1e-10, name

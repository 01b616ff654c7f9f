"""n_hidden="auto": the width from the spectrum, checked on held-out rows (nnrecover.learners.width)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.errors import AssumptionWarning, InputError


def _data(d, k, p, n, *, bias=0.0, noise=0.0, seed=0):
    t = nr.random_network(d, k, n_outputs=p, rng=seed, bias_range=(-bias, bias) if bias else 0.0)
    X, Y = nr.sample(t, nr.distributions.StandardGaussian(d), n, noise=noise, rng=seed + 100)
    return t, X, Y


@pytest.mark.parametrize("k", [3, 5])
def test_scalar_output_width_from_the_hermite_matrix(k):
    # p = 1: the rank of T_2 = sum_i a_i phi(b_i) w_i w_i^T is k (k < d); noiseless, 1e5 rows
    t, X, y = _data(20, k, 1, 100_000, bias=1.0, seed=k)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AssumptionWarning)  # a sure estimate: no warning
        est = nr.learners.HermiteTensorLearner("auto", random_state=0).fit(X, y)
    assert est.n_hidden_ == k and est.network_.n_hidden == k
    w = est.diagnostics_["width"]
    assert w["sure"] and w["rule_sure"] and "T_2" in w["method"] and w["range"] == (k, k)
    # the learner's certificates judge the width (test_width_by_certificates.py): the fit with k passes
    assert [(c["n_hidden"], c["passed"]) for c in w["candidates"]] == [(k, True)] and "holdout" not in w
    assert est.get_params()["n_hidden"] == "auto"  # the estimator keeps its parameter


def test_vector_output_width_from_the_output_covariance_and_same_bits_as_explicit_k():
    t, X, Y = _data(12, 4, 6, 30_000, seed=1)
    auto = nr.learners.ExactReLULearner("auto", random_state=0).fit(X, Y)
    explicit = nr.learners.ExactReLULearner(4, random_state=0).fit(X, Y)
    assert auto.n_hidden_ == 4 and "Cov(y)" in auto.diagnostics_["width"]["method"]
    for name in ("hidden_weights", "hidden_bias", "output_weights", "output_bias"):
        assert np.array_equal(getattr(auto.network_, name), getattr(explicit.network_, name))


def test_held_out_rows_raise_a_width_one_short_when_the_outputs_are_as_many_as_the_units():
    # p = k = 5: the smallest eigenvalue of Cov(y) (0.034 here) is signal, so the spectrum says "at least
    # 4"; 5 units fit the held-out rows to round-off (MSE 1e-30 against 0.27 for 4), and are chosen
    t = nr.random_network(10, 5, n_outputs=5, rng=0, bias_range=(-1, 1))
    X, Y = nr.sample(t, nr.distributions.StandardGaussian(10), 20_000, rng=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AssumptionWarning)
        est = nr.learners.ExactReLULearner("auto", random_state=0).fit(X, Y)
    w = est.diagnostics_["width"]
    assert w["range"] == (4, None) and w["raised_by_holdout"] == {"from": 4, "to": 5} and w["sure"]
    assert est.n_hidden_ == 5
    assert nr.metrics.parameter_error(t, est.network_)["max_unit_error"] < 1e-8


def test_label_noise_right_or_unsure():
    # noise 0.1 on a scalar output: the spectrum's noise level grows; the rule either finds k or warns
    t, X, y = _data(20, 4, 1, 100_000, bias=1.0, noise=0.1, seed=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = nr.learners.HermiteTensorLearner("auto", random_state=0).fit(X, y)
    unsure = any(issubclass(w.category, AssumptionWarning) and "auto" in str(w.message) for w in caught)
    assert est.n_hidden_ == 4 or unsure
    assert est.diagnostics_["width"]["sure"] == (not unsure)


def test_no_rule_and_other_refusals():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (5_000, 6))
    y = np.maximum(X @ rng.standard_normal(6), 0)
    with pytest.raises(InputError, match="no rule"):
        nr.learners.HermiteTensorLearner("auto").fit(X, y)
    with pytest.raises(InputError, match="positive integer or 'auto'"):
        nr.learners.HermiteTensorLearner("many").fit(X, y)
    with pytest.raises(InputError, match="population"):
        nr.learners.HermiteTensorLearner("auto").fit_population(nr.random_network(5, 2, rng=0))


def test_cli_fit_auto(tmp_path):
    from nnrecover.cli import main

    t, X, Y = _data(8, 3, 5, 20_000, seed=2)
    np.savez(tmp_path / "s.npz", X=X, Y=Y)
    out = tmp_path / "m.json"
    assert main(["fit", str(tmp_path / "s.npz"), "--learner", "exact-relu", "-k", "auto", "--seed", "0",
                 "--out", str(out)]) == 0
    assert nr.TwoLayerNetwork.load(out).n_hidden == 3
    assert main(["fit", str(tmp_path / "s.npz"), "--learner", "exact-relu", "-k", "some"]) == 2


def test_auto_width_high_threshold_learner():
    """Goel-Panigrahy: the rank of T_2 = sum c_i u_hat_2 w_i w_i^T is the number of lowest-layer units
    (c_i > 0, Assumption 1), so n_hidden='auto' finds it; the fit then equals the fit with k given."""
    from nnrecover.learners.goel2019 import HighThresholdNetwork, UpperPolynomial, random_unit_weights

    k, d, t = 5, 20, 2.0
    W = random_unit_weights(k, d, rng=0)
    net = HighThresholdNetwork(W, t, "step", UpperPolynomial.linear(np.random.default_rng(1).uniform(0.5, 1.5, k), 0.3))
    X = np.random.default_rng(2).standard_normal((400_000, d))
    y = net.predict(X)
    # Step 2 with a fixed 100 iterations (its budget of Theorem 5 runs for minutes at 20 inputs; the width is
    # read before it)
    step2 = {"max_iter": 100}
    auto = nr.learners.HighThresholdLearner("auto", threshold=t, refine_options=step2, random_state=0).fit(X, y)
    assert auto.n_hidden_ == k and auto.diagnostics_["width"]["sure"]
    given = nr.learners.HighThresholdLearner(k, threshold=t, refine_options=step2, random_state=0).fit(X, y)
    np.testing.assert_array_equal(auto.hidden_weights_, given.hidden_weights_)


def test_unsure_spectrum_is_read_again_from_every_row(monkeypatch):
    """When the first rows leave the T_2 rule unsure, T_2 and its noise level are accumulated over the
    whole (streamed) data: tau falls like 1/sqrt(rows), so the width becomes certain."""
    import nnrecover.evidence as evidence
    import nnrecover.learners.width as width
    from nnrecover.data import as_data_source

    t = nr.random_network(10, 4, rng=2, bias_range=(-1, 1))
    stream = nr.sample_stream(t, nr.distributions.StandardGaussian(10), 200_000, rng=5)
    full = evidence.streamed_t2_rank(as_data_source(stream))
    assert full["rows"] == 200_000 and full["low"] == full["high"] == 4
    monkeypatch.setattr(width, "MAX_ROWS", 20_000)  # the first-rows spectrum sees 20,000 rows only
    first = evidence.estimate_width(*nr.sample(t, nr.distributions.StandardGaussian(10), 20_000, rng=5))
    assert not first["sure"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", AssumptionWarning)  # sure after the full pass: no warning
        est = nr.learners.HermiteTensorLearner("auto", random_state=0).fit(stream)
    w = est.diagnostics_["width"]
    assert est.n_hidden_ == 4 and w["rows_for_spectrum"] == 200_000 and w["range"] == (4, 4)

"""HighThresholdLearner's certificate ``unit_angles``: Step 1's sampling error, measured on split halves."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest

from nnrecover.errors import CertificateWarning, ConvergenceError, InputError
from nnrecover.learners.goel2019 import (HighThresholdLearner, HighThresholdNetwork, PopulationMoments,
                                         UpperPolynomial, random_unit_weights, random_upper_polynomial, step1)
from nnrecover.metrics import weight_error

# the module (the package exports its function under the same name)
step1_module = importlib.import_module("nnrecover.learners.goel2019.step1")


def _network(d, n, cond, t, *, seed=0):
    """d step units at threshold t in n inputs under a linear P (Step 1 has no bias: Lemma 2's products)."""
    W = random_unit_weights(d, n, condition_number=cond, rng=seed)
    c = np.random.default_rng(seed + 1).uniform(0.5, 1.5, d)
    return HighThresholdNetwork(W, t, "step", UpperPolynomial.linear(c, 0.3))


def _samples(net, n, seed):
    X = np.random.default_rng(seed).standard_normal((n, net.hidden_weights.shape[1]))
    return X, net.predict(X)


@pytest.mark.parametrize("method", ["power", "landscape", "simultaneous"])
def test_routes_from_a_start_are_exact_in_population(method):
    """Started from perturbed duals (in another order), every Step 1 route reaches the exact units
    (Claims 1-2, Theorem 11)."""
    net = _network(6, 8, 2.0, 2.0, seed=3)
    pop = PopulationMoments(net)
    ref = step1(pop, 6, rng=0)
    start = ref.duals + 0.05 * np.random.default_rng(1).standard_normal(ref.duals.shape)
    got = step1(pop, 6, method=method, start=start[:, ::-1], rng=2)
    assert weight_error(got.weights, net.hidden_weights)["max_angle"] < 1e-9
    with pytest.raises(InputError, match="start"):
        step1(pop, 6, method=method, start=start[:, :5])


def test_split_half_estimate_follows_the_true_angles():
    """10 units in 50 inputs, t = 3, 3e5 samples: Step 1 is about 0.2 rad off, so the default
    max_angle_error (0.1) fails. A unit's angle in 50 dimensions varies like a chi variable with 49 degrees
    of freedom (relative spread 1/sqrt(98) = 0.10), the true one and the estimate alike (the estimate: the
    root mean square over 2 splits, 0.07), so log(estimate / true) has a spread of about 0.12: each unit's
    ratio must lie within exp(+-0.48) = 0.62-1.6 (4 spreads), the mean of 10 within 0.85-1.18 (4 spreads
    of a mean of 10)."""
    net = _network(10, 50, 1.0, 3.0, seed=11)
    X, y = _samples(net, 300_000, 12)
    with pytest.warns(CertificateWarning, match="unit_angles"):
        est = HighThresholdLearner(10, threshold=3.0, refine=False, random_state=0).fit(X, y)
    err = weight_error(est.hidden_weights_, net.hidden_weights)
    cert = est.diagnostics_["certificates"]["unit_angles"]
    assert not cert["passed"]
    ratio = cert["detail"]["unit_angles"][err["matching"]] / err["angles"]
    assert np.all((ratio > 0.62) & (ratio < 1.6)), ratio
    assert 0.85 < ratio.mean() < 1.18, ratio
    # the samples that would meet the bound, from N^-1/2: (max angle / 0.1)^2 times as many
    worst = cert["detail"]["unit_angles"].max()
    assert cert["detail"]["samples_needed"] == pytest.approx(300_000 * (worst / 0.1) ** 2, rel=1e-6)
    assert cert["detail"]["source"] == ["split_half"] * 10
    with pytest.raises(ConvergenceError, match="unit_angles"):
        HighThresholdLearner(10, threshold=3.0, refine=False, strict=True, random_state=0).fit(X, y)
    # the bound is the user's: a looser one passes
    with warnings.catch_warnings():
        warnings.simplefilter("error", CertificateWarning)
        loose = HighThresholdLearner(10, threshold=3.0, refine=False, max_angle_error=0.5, random_state=0).fit(X, y)
    assert loose.diagnostics_["certificates"]["unit_angles"]["passed"]


def test_enough_samples_pass_and_the_check_leaves_step2_alone():
    """5 units, t = 2, 8e5 samples: Step 1 is about 0.05 rad off, the certificate passes silently. Without
    the check (max_angle_error=None) the fit is the same to the bit, Step 2 included; a unit Step 2
    replaced is judged by its held-out estimate, a Step 1 unit by the larger of its two estimates."""
    net = _network(5, 5, 1.5, 2.0, seed=7)
    X, y = _samples(net, 800_000, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CertificateWarning)
        est = HighThresholdLearner(5, threshold=2.0, random_state=0).fit(X, y)
    cert = est.diagnostics_["certificates"]["unit_angles"]
    assert cert["passed"]
    assert weight_error(est.hidden_weights_, net.hidden_weights)["max_angle"] < 0.1
    unchecked = HighThresholdLearner(5, threshold=2.0, max_angle_error=None, random_state=0).fit(X, y)
    np.testing.assert_array_equal(unchecked.hidden_weights_, est.hidden_weights_)
    assert "unit_angles" not in unchecked.diagnostics_["certificates"]
    assert "split_half" not in unchecked.diagnostics_
    for unit in est.diagnostics_["refinement"]["units"]:
        i = unit["unit"]
        split = est.diagnostics_["split_half"]["unit_angles"][i]
        if unit["kept"] == "step2":
            assert cert["detail"]["source"][i] == "step2_held_out"
            assert cert["detail"]["unit_angles"][i] == unit["angle_estimate_end"]
        else:
            assert cert["detail"]["unit_angles"][i] == max(split, unit.get("angle_estimate_start", 0.0))


def test_a_half_that_step1_cannot_fit_fails_the_certificate(monkeypatch):
    """When Step 1 refuses a half of the samples the estimate cannot be checked: the certificate fails
    and says why (here Step 1 is made to refuse every half)."""
    net = _network(5, 5, 1.5, 2.0, seed=7)
    X, y = _samples(net, 200_000, 0)
    full = step1_module.step1

    def refuse_halves(moments, *args, **kwargs):
        if moments.n_total < X.shape[0]:
            raise ConvergenceError("tensor power iteration did not converge")
        return full(moments, *args, **kwargs)

    monkeypatch.setattr(step1_module, "step1", refuse_halves)
    with pytest.warns(CertificateWarning, match="half of the samples"):
        est = HighThresholdLearner(5, threshold=2.0, refine=False, random_state=0).fit(X, y)
    assert "failed" in est.diagnostics_["split_half"]
    assert not est.diagnostics_["certificates"]["unit_angles"]["passed"]


@pytest.mark.parametrize("bad", [0, -0.1, "0.1"])
def test_max_angle_error_is_validated(bad):
    net = _network(3, 3, 1.0, 2.0, seed=1)
    X, y = _samples(net, 20_000, 0)
    with pytest.raises(InputError, match="max_angle_error"):
        HighThresholdLearner(3, threshold=2.0, max_angle_error=bad).fit(X, y)


def test_step2_held_out_rows_see_the_bias_split_halves_miss():
    """3 units at t = 2 under a monotone P with products: Step 1's population directions are biased
    (Lemma 2), 0.54-0.66 rad for two units, which split halves cannot see (they measure 0.14 for the
    0.66 one). Step 2's held-out estimate of that unit, which it could not improve, sees it (0.67) and
    fails the certificate."""
    net = HighThresholdNetwork(random_unit_weights(3, 10, condition_number=1.7, rng=22), 2.0, "step",
                               random_upper_polynomial(3, monotone=True, rng=22))
    X, y = _samples(net, 1_000_000, 122)
    with pytest.warns(CertificateWarning, match="step2_held_out"):
        est = HighThresholdLearner(3, threshold=2.0, random_state=22).fit(X, y)
    err = weight_error(est.hidden_weights_, net.hidden_weights)
    detail = est.diagnostics_["certificates"]["unit_angles"]["detail"]
    worst = err["matching"][np.argmax(err["angles"])]
    assert err["max_angle"] > 0.3
    assert detail["source"][worst] == "step2_held_out"
    assert detail["unit_angles"][worst] > 0.5 * err["max_angle"]
    assert est.diagnostics_["split_half"]["unit_angles"][worst] < 0.5 * err["max_angle"]


def test_certificate_experiment_quick():
    """The calibration experiment: every verdict agrees with the certificate and the true angle."""
    from nnrecover.experiments import get_experiment

    df, fig = get_experiment("goel2019-certificate").func(rng=0, quick=True)
    assert fig is not None and len(df) == 6
    done = df[df["refused"] == ""]
    assert len(done)
    for _, row in done.iterrows():
        over = row["true_max_angle"] > 0.1
        expected = {(True, True): "false pass", (True, False): "pass", (False, True): "fail",
                    (False, False): "false alarm"}[(row["passed"], over)]
        assert row["verdict"] == expected
        assert row["passed"] == (row["estimated_max_angle"] <= 0.1)


def test_landscape_route_start_with_nothing_left_falls_back_to_random():
    """A start with nothing left after the deflation (here a zero column; also one whose unit an earlier
    search already found): that search starts at random instead, and the route is still exact."""
    net = _network(6, 8, 2.0, 2.0, seed=3)
    pop = PopulationMoments(net)
    ref = step1(pop, 6, rng=0)
    start = ref.duals.copy()
    start[:, 1] = 0.0
    got = step1(pop, 6, method="landscape", start=start, rng=2)
    assert weight_error(got.weights, net.hidden_weights)["max_angle"] < 1e-9

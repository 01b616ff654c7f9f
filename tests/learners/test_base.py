"""Tests of the learner base class, the registry entry and the gradient-descent baseline."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.exceptions import NotFittedError as SkNotFittedError
from sklearn.utils.estimator_checks import check_estimator
from sklearn.utils.validation import check_is_fitted

import nnrecover as nr
from nnrecover.distributions import StandardGaussian
from nnrecover.errors import CertificateWarning, ConvergenceError, InputError, NotFittedError
from nnrecover.learners import available, get_learner
from nnrecover.learners.base import BaseLearner
from nnrecover.learners.baseline import GradientDescentLearner, fit_random_restarts, random_start
from nnrecover.metrics import parameter_error, relu_l2_distance


@pytest.fixture(scope="module")
def small_teacher():
    # d = 5, k = 2. For this teacher 33 of 50 restarts (random_state 0..9, 5 restarts each) reached the
    # global minimum, and every one of the 10 fits did; the other restarts stop at the known local
    # minimum in which one ReLU is active on every sample and acts as a linear function. With 5
    # restarts the chance that all fail is about (17/50)^5 < 0.5%; the seed below makes it deterministic.
    truth = nr.random_network(5, 2, rng=11, bias_range=(-0.5, 0.5))
    X, Y = nr.sample(truth, StandardGaussian(5), 3000, rng=7)
    return truth, X, Y


# ----------------------------------------------------------------------------- registry

def test_gradient_descent_is_registered():
    recs = [r for r in available() if r.name == "gradient-descent"]
    assert len(recs) == 1
    rec = recs[0]
    assert rec.paper == "baseline" and rec.algorithm == "random init + local refinement"
    assert rec.target is GradientDescentLearner and rec.is_learner
    assert get_learner("gradient-descent") is GradientDescentLearner
    assert nr.learners.GradientDescentLearner is GradientDescentLearner
    assert nr.learners.BaseLearner is BaseLearner
    assert [r.name for r in available("baseline", learners_only=True)] == ["gradient-descent"]
    with pytest.raises(InputError, match="unknown paper 'nope'"):
        available("nope")


def test_every_exported_learner_name_imports():
    import nnrecover.learners as learners

    namespace: dict = {}
    exec("from nnrecover.learners import *", namespace)
    assert set(learners.__all__) <= set(namespace) and "GradientDescentLearner" in namespace


# ----------------------------------------------------------------------------- the baseline learner

def test_gradient_descent_recovers_small_network_noiseless(small_teacher):
    truth, X, Y = small_teacher
    est = GradientDescentLearner(2, n_restarts=5, random_state=0).fit(X, Y)
    # noiseless data, global minimum: Levenberg-Marquardt converges to round-off (issue 2, item 7)
    assert parameter_error(est.network_, truth)["max_unit_error"] < 1e-9
    diag = est.diagnostics_
    losses = [r["train_loss_refined"] for r in diag["restarts"]]
    assert len(losses) == 5 and diag["best_restart"] == int(np.argmin(losses))
    assert diag["train_loss"] == min(losses) < 1e-20
    assert diag["refinement"]["ran"] and diag["n_samples_used"] == 3000
    np.testing.assert_allclose(est.predict(X[:50]), Y[:50], atol=1e-10)
    # canonical form: unit hidden rows; hidden_weights_ mirrors the network
    np.testing.assert_allclose(np.linalg.norm(est.hidden_weights_, axis=1), 1.0, atol=1e-14)
    assert est.hidden_weights_ is est.network_.hidden_weights
    assert est.n_features_in_ == 5 and est.n_outputs_ == 1 and est.n_iter_ >= 1
    assert est.score(X, Y) == pytest.approx(1.0, abs=1e-12)


def test_gradient_descent_noisy_training_loss_matches_least_squares_theory(small_teacher):
    """At the least-squares optimum of a well-specified model the training residual is the noise
    projected off the P_eff-dimensional tangent space: E loss = sigma^2 (n - P_eff)/n with
    P_eff = P - k = 15 - 2 (one rescaling symmetry per ReLU unit), and sd = sigma^2 sqrt(2 (n - P_eff))/n.
    We allow 5 sd.

    The estimate itself: n ||f_hat - f||^2 / sigma^2 -> chi^2 with P_eff = 13 degrees of freedom
    (the same law as in tests/refine/test_refine_network.py), so ||f_hat - f||^2 / (sigma^2 P_eff / n) lies in
    [1/10, 4] except with probability chi2_13.cdf(1.3) + chi2_13.sf(52) < 2e-5."""
    truth, X, _ = small_teacher
    sigma, n = 0.1, X.shape[0]
    rng = np.random.default_rng(8)
    Y = truth.predict(X) + sigma * rng.standard_normal(n)
    est = GradientDescentLearner(2, n_restarts=5, random_state=0).fit(X, Y)
    mean, sd = sigma ** 2 * (n - 13) / n, sigma ** 2 * np.sqrt(2 * (n - 13)) / n
    assert abs(est.diagnostics_["train_loss"] - mean) < 5 * sd
    expected = sigma ** 2 * 13 / n
    assert expected / 10 < relu_l2_distance(est.network_, truth, squared=True) < 4 * expected


def test_gradient_descent_deterministic_and_data_forms(small_teacher):
    truth, X, Y = small_teacher
    kw = dict(n_restarts=2, max_iter=30, random_state=3)
    a = GradientDescentLearner(2, **kw).fit(X, Y)
    b = GradientDescentLearner(2, **kw).fit(X, Y)
    assert a.network_ == b.network_  # bit-identical
    chunks = [(X[i:i + 700], Y[i:i + 700]) for i in range(0, X.shape[0], 700)]
    c = GradientDescentLearner(2, **kw).fit(chunks)
    d = GradientDescentLearner(2, **kw).fit(iter(chunks))
    # The chunked forms gather the same rows (checked bit-exactly in test_refine), but the rows live in
    # differently laid-out buffers; BLAS kernels may then round differently, and 30 LM iterations can
    # amplify that to ~1e-13. Bit-identity is promised for the same input, not across data layouts.
    for other in (c, d):
        for u, v in zip(other.network_._arrays(), a.network_._arrays()):
            np.testing.assert_allclose(u, v, rtol=1e-9, atol=1e-12)
    # max_samples subsamples the data
    e = GradientDescentLearner(2, max_samples=1000, **kw).fit(X, Y)
    assert e.diagnostics_["n_samples_used"] == 1000 and e.diagnostics_["n_samples_seen"] == 3000
    # multi-output targets
    Y2 = np.column_stack([Y, -2 * Y])
    f = GradientDescentLearner(2, **kw).fit(X, Y2)
    assert f.predict(X[:3]).shape == (3, 2) and f.n_outputs_ == 2


def test_random_start_output_layer_is_least_squares_optimal(small_teacher):
    _, X, Y = small_teacher
    net = random_start(X, Y[:, None], 3, rng=0)
    H = np.hstack([net.hidden_activations(X), np.ones((X.shape[0], 1))])
    resid = net.predict(X) - Y
    # normal equations of the output layer hold at the start
    np.testing.assert_allclose(H.T @ resid, 0.0, atol=1e-9 * np.abs(H).sum() * np.abs(Y).max())
    best, info = fit_random_restarts(X, Y, 2, n_restarts=2, max_iter=5, rng=0)
    assert info["best_restart"] in (0, 1) and len(info["restarts"]) == 2


# ----------------------------------------------------------------------------- scikit-learn conventions

def test_sklearn_clone_get_set_params():
    est = GradientDescentLearner(3, n_restarts=2, method="lbfgs", random_state=4)
    params = est.get_params()
    assert params["n_hidden"] == 3 and params["n_restarts"] == 2 and params["method"] == "lbfgs"
    assert set(params) == {"n_hidden", "activation", "n_restarts", "method", "max_samples", "max_iter", "tol",
                           "init_scale", "bias_scale", "jacobian_memory", "time_budget", "random_state"}
    twin = clone(est)
    assert twin is not est and twin.get_params() == params
    assert est.set_params(n_restarts=7, tol=1e-12) is est
    assert est.n_restarts == 7 and est.tol == 1e-12
    with pytest.raises(ValueError, match="Invalid parameter"):
        est.set_params(learning_rate=0.1)
    with pytest.raises(TypeError):
        GradientDescentLearner(3, learning_rate=0.1)
    # __init__ does no validation and no work: bad values are stored and rejected by fit
    bad = GradientDescentLearner(0)
    assert bad.n_hidden == 0 and not hasattr(bad, "network_")


def test_not_fitted_errors(small_teacher):
    _, X, _ = small_teacher
    est = GradientDescentLearner(2)
    with pytest.raises(NotFittedError, match="not fitted"):
        est.predict(X)
    assert issubclass(NotFittedError, SkNotFittedError)
    assert not hasattr(est, "network_") and not hasattr(est, "hidden_weights_")
    with pytest.raises(SkNotFittedError):
        check_is_fitted(est)


def test_fitted_learner_pickles_and_refits_cleanly(small_teacher):
    truth, X, Y = small_teacher
    est = GradientDescentLearner(2, n_restarts=1, max_iter=10, random_state=0).fit(X, Y)
    check_is_fitted(est)
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict(X[:5]), est.predict(X[:5]))
    # refitting on other data replaces every fitted attribute (the number of features changes)
    X3, Y3 = nr.sample(nr.random_network(3, 2, rng=1), StandardGaussian(3), 500, rng=2)
    est.fit(X3, Y3)
    assert est.n_features_in_ == 3 and est.hidden_weights_.shape == (2, 3)


@pytest.mark.parametrize("kwargs,match", [
    (dict(n_hidden=0), "n_hidden"), (dict(n_hidden=2.5), "n_hidden"), (dict(n_restarts=0), "n_restarts"),
    (dict(method="sgd"), "method"), (dict(activation="swish"), "activation"), (dict(tol=0.0), "tol"),
    (dict(tol=1e-17), "tol"), (dict(init_scale=-1.0), "init_scale"), (dict(max_iter=0), "max_iter"),
    (dict(max_samples=0), "max_samples"), (dict(random_state=-3), "random_state"),
    (dict(random_state="seed"), "random_state")])
def test_gradient_descent_parameter_validation(small_teacher, kwargs, match):
    _, X, Y = small_teacher
    params = dict(n_hidden=2, n_restarts=1, max_iter=5)
    params.update(kwargs)
    with pytest.raises(InputError, match=match):
        GradientDescentLearner(**params).fit(X[:100], Y[:100])


def test_plain_baseline_functions_validate_their_input(small_teacher):
    _, X, Y = small_teacher
    X, Y = X[:100], Y[:100]
    Xnan = X.copy()
    Xnan[3, 1] = np.nan
    for call, match in [(lambda: random_start(X, Y[:10], 2), "different numbers of samples"),
                        (lambda: random_start(X[:, 0], Y, 2), "2-D"),
                        (lambda: random_start(Xnan, Y, 2), "X contains 1 NaN"),
                        (lambda: random_start(X, Y, 0), "n_hidden"),
                        (lambda: random_start(X, Y, 2, init_scale=-1.0), "init_scale"),
                        (lambda: random_start(X, Y, 2, bias_scale=np.inf), "bias_scale"),
                        (lambda: fit_random_restarts(X, Y, 2, n_restarts=0), "n_restarts"),
                        (lambda: fit_random_restarts(X, Y[:10], 2), "different numbers of samples"),
                        (lambda: fit_random_restarts(X, Y, 2, method="sgd"), "method")]:
        with pytest.raises(InputError, match=match):
            call()
    # a zero bias scale is allowed: bias-free random starts
    assert not np.any(random_start(X, Y, 2, bias_scale=0.0, rng=0).hidden_bias)


def test_fit_and_predict_data_validation(small_teacher):
    _, X, Y = small_teacher
    est = GradientDescentLearner(2, n_restarts=1, max_iter=5, random_state=0)
    with pytest.raises(InputError, match="requires y"):
        est.fit(X)
    with pytest.raises(InputError, match="different numbers of samples"):
        est.fit(X, Y[:-1])
    Xn = X[:100].copy()
    Xn[3, 2] = np.nan
    with pytest.raises(InputError, match="NaN"):
        est.fit(Xn, Y[:100])
    with pytest.raises(InputError, match="Reshape"):
        est.fit(X[:, 0], Y)
    with pytest.raises(InputError, match="Complex"):
        est.fit(X[:10] + 1j, Y[:10])
    with pytest.raises(InputError, match="0 sample"):
        est.fit(X[:0], Y[:0])
    est.fit(X[:200], Y[:200])
    with pytest.raises(InputError, match="expecting 5 features"):
        est.predict(X[:3, :4])
    with pytest.raises(InputError, match="Reshape"):
        est.predict(X[0])


def test_gradient_descent_has_no_population_mode(small_teacher):
    truth, _, _ = small_teacher
    with pytest.raises(InputError, match="population"):
        GradientDescentLearner(2).fit_population(truth)


def test_sklearn_check_estimator_passes():
    # the whole scikit-learn API conformance suite (clone, get/set_params, pickling, n_features_in_,
    # error messages, dtypes, memmaps, idempotent fit...). One check is skipped by scikit-learn itself
    # (array API, needs SCIPY_ARRAY_API=1); it is reported as "skipped" here, not failed.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sklearn.exceptions.SkipTestWarning)
        results = check_estimator(GradientDescentLearner(2, n_restarts=1, max_iter=20, random_state=0),
                                  on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:200]) for r in results if r["status"] == "failed"]
    assert failed == []
    assert sum(r["status"] == "passed" for r in results) >= 50


# ----------------------------------------------------------------------------- BaseLearner hooks

class _ShiftedTruthLearner(BaseLearner):
    """Test double: "learns" a fixed teacher plus an offset (a stand-in for a provable estimate)."""

    _supports_population = True

    def __init__(self, n_hidden, *, teacher=None, offset=0.0, refine=True, refine_options=None, strict=False,
                 random_state=None):
        self.n_hidden = n_hidden
        self.teacher = teacher
        self.offset = offset
        self.refine = refine
        self.refine_options = refine_options
        self.strict = strict
        self.random_state = random_state

    def _estimate(self):
        net = self.teacher.copy()
        net.hidden_bias += self.offset
        return net

    def _fit(self, source, rng, diagnostics):
        start = self._estimate()
        self._certify("offset-small", abs(self.offset) < 0.1, f"offset={self.offset}", diagnostics)
        return self._maybe_refine(start, source, rng, diagnostics)

    def _fit_population(self, truth, rng, diagnostics, **kwargs):
        return self._maybe_refine(truth.copy(), None, rng, diagnostics)


def test_maybe_refine_polishes_a_provable_start(small_teacher):
    truth, X, Y = small_teacher
    est = _ShiftedTruthLearner(2, teacher=truth, offset=0.05, refine_options={"method": "lm"}, random_state=0)
    est.fit(X, Y)
    ref = est.diagnostics_["refinement"]
    assert ref["ran"] and ref["kept"] == "refined" and ref["method"] == "lm"
    assert parameter_error(est.network_, truth)["max_unit_error"] < 1e-9
    assert est.diagnostics_["certificates"]["offset-small"]["passed"]
    assert est.diagnostics_["fit_time"] > 0
    raw = _ShiftedTruthLearner(2, teacher=truth, offset=0.05, refine=False).fit(X, Y)
    assert raw.diagnostics_["refinement"] == {"ran": False, "reason": "refine=False"}
    assert parameter_error(raw.network_, truth)["max_unit_error"] == pytest.approx(0.05, rel=1e-12)
    # a one-pass iterator cannot be read twice: refinement is skipped with a warning
    chunks = iter([(X[:1500], Y[:1500]), (X[1500:], Y[1500:])])
    with pytest.warns(UserWarning, match="one-pass"):
        it = _ShiftedTruthLearner(2, teacher=truth, offset=0.05).fit(chunks)
    assert it.diagnostics_["refinement"]["reason"] == "one-pass iterator"


def test_certificates_strict_and_warning(small_teacher):
    truth, X, Y = small_teacher
    with pytest.warns(CertificateWarning, match="offset-small"):
        est = _ShiftedTruthLearner(2, teacher=truth, offset=0.5, refine=False).fit(X, Y)
    assert not est.diagnostics_["certificates"]["offset-small"]["passed"]
    with pytest.raises(ConvergenceError, match="offset-small"):
        _ShiftedTruthLearner(2, teacher=truth, offset=0.5, strict=True).fit(X, Y)


def test_refine_options_and_flags_are_validated(small_teacher):
    truth, X, Y = small_teacher
    with pytest.raises(InputError, match="unknown refine_options"):
        _ShiftedTruthLearner(2, teacher=truth, refine_options={"learning_rate": 1}).fit(X, Y)
    with pytest.raises(InputError, match="refine_options"):
        _ShiftedTruthLearner(2, teacher=truth, refine_options="lm").fit(X, Y)
    with pytest.raises(InputError, match="refine"):
        _ShiftedTruthLearner(2, teacher=truth, refine="yes").fit(X, Y)
    with pytest.raises(InputError, match="strict"):
        _ShiftedTruthLearner(2, teacher=truth, strict=1).fit(X, Y)


def test_fit_population_hook(small_teacher):
    truth, _, _ = small_teacher
    est = _ShiftedTruthLearner(2, teacher=truth).fit_population(truth)
    assert est.network_ == truth and est.diagnostics_["population"] is True
    assert est.diagnostics_["refinement"]["ran"] is False
    with pytest.raises(InputError, match="TwoLayerNetwork"):
        _ShiftedTruthLearner(2, teacher=truth).fit_population(truth.hidden_weights)


def test_registry_names_follow_the_paper():
    """One name per paper in the listings (awasthi2021-*, ge2019-*, bakshi2019-*, goel2019-*), each once;
    a name of no record is an unknown learner or experiment."""
    from nnrecover.experiments import get_experiment
    from nnrecover.learners import available, get_learner

    names = [r.name for r in available()]
    assert len(names) == len(set(names))
    papers = ("awasthi2021-", "ge2019-", "bakshi2019-", "goel2019-")
    assert all(r.name.startswith(papers) for r in available() if not r.is_learner)
    assert get_learner("bakshi2019-noisy") is nr.learners.NoisyReLULearner
    assert get_experiment("ge2019-fig2").name == "ge2019-fig2"
    with pytest.raises(InputError, match="unknown learner"):
        get_learner("bjw19-noisy")
    with pytest.raises(InputError, match="unknown experiment"):
        get_experiment("ge19-fig2")

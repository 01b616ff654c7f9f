"""Review tests of ``nr.extract``: cases outside the main suite (d = 1, leaky-ReLU, deeper or smooth
models, models that raise, the moment route's sample-count argument)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.errors import AssumptionError, CertificateWarning, InputError


def _relu_net(k, d, p=1, seed=0):
    r = np.random.default_rng(seed)
    W, b, A, c = r.standard_normal((k, d)), 0.5 * r.standard_normal(k), r.standard_normal((p, k)), r.standard_normal(p)
    return W, b, A, c


def test_d1_exact():
    # one input: each "hyperplane" is a point; the three kinks of this model lie in [-2.1, -0.2], inside
    # the searched radius 4, so all three are recovered to round-off (piecewise-linear exact fit)
    W, b, A, c = _relu_net(3, 1)
    f = lambda X: (np.maximum(X @ W.T + b, 0) @ A.T + c)[:, 0]  # noqa: E731
    res = nr.extract(f, 1, rng=0)
    assert res.network_.n_hidden == 3 and res.diagnostics_["certificate"]["passed"]
    X = np.linspace(-5, 5, 401)[:, None]
    assert np.max(np.abs(res.predict(X).ravel() - f(X))) <= 1e-12 * (1 + np.max(np.abs(f(X))))
    kinks = np.sort(-res.network_.hidden_bias / res.network_.hidden_weights[:, 0])
    assert np.allclose(kinks, np.sort(-b / W[:, 0]), rtol=0, atol=1e-12)


def test_leaky_relu_not_silently_wrong():
    # leaky(z) = 0.9 relu(z) + 0.1 z: the linear part is no set of flipped units (t_j = -1/9), so the
    # sign solve must not round it away; the result keeps it as flagged extra unit pairs (exact function)
    W, b, A, c = _relu_net(3, 4)
    f = lambda X: (np.where(X @ W.T + b > 0, X @ W.T + b, 0.1 * (X @ W.T + b)) @ A.T + c)[:, 0]  # noqa: E731
    with pytest.warns(CertificateWarning, match="orientation"):
        res = nr.extract(f, 4, rng=0)
    assert res.diagnostics_["linear_units"] > 0
    assert res.diagnostics_["certificate"]["passed"]
    assert res.diagnostics_["signs"]["max_relative_residual"] > 1e-3


def test_failed_certificate_warns():
    # a two-hidden-layer ReLU model has bent hyperplanes: no one-hidden-layer network matches it and the
    # certificate must say so loudly, not only in diagnostics
    r = np.random.default_rng(0)
    W1, W2, a = r.standard_normal((4, 3)), r.standard_normal((3, 4)), r.standard_normal(3)
    f = lambda X: np.maximum(np.maximum(X @ W1.T + 0.3, 0) @ W2.T - 0.2, 0) @ a  # noqa: E731
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = nr.extract(f, 3, rng=0)
    assert not res.diagnostics_["certificate"]["passed"]
    assert any("certificate failed" in str(w.message) for w in caught
               if issubclass(w.category, CertificateWarning))


@pytest.mark.parametrize("model", [lambda X: np.tanh(X).sum(axis=1), lambda X: np.zeros(X.shape[0]),
                                   lambda X: X @ np.arange(1.0, 5.0)],
                         ids=["tanh", "constant", "affine"])
def test_no_unit_is_an_assumption_error(model):
    with pytest.raises(AssumptionError, match="no hidden unit found"):
        nr.extract(model, 4, rng=0)


def test_model_that_raises_is_input_error_and_counted():
    calls = []

    def bad(X):
        calls.append(len(X))
        raise RuntimeError("boom")

    with pytest.raises(InputError, match="model raised RuntimeError: boom") as info:
        nr.extract(bad, 4, rng=0)
    assert isinstance(info.value.__cause__, RuntimeError) and len(calls) == 1
    W, b, A, c = _relu_net(3, 4)
    with pytest.raises(InputError, match="check n_inputs"):
        nr.extract(lambda X: np.maximum(X @ W.T + b, 0) @ A[0], 5, rng=0)


def test_moments_n_samples_validated():
    f = lambda X: np.maximum(X, 0).sum(axis=1)  # noqa: E731
    for bad in (10, 2.5, True, -3):
        with pytest.raises(InputError, match="n_samples must be an int >= 1000"):
            nr.extract(f, 3, method="moments", n_samples=bad, rng=0)
    with pytest.raises(InputError, match="max_queries=2500 leaves 500"):
        nr.extract(f, 3, method="moments", max_queries=2500, rng=0)

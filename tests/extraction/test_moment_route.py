"""Tests of the sample-only extraction route (nnrecover.extraction.moments)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from extraction_boxes import rel_error

import nnrecover as nr
from nnrecover.errors import CertificateWarning, InputError, QueryBudgetError
from nnrecover.extraction import extract


# ------------------------------------------------------------------------------------ sample-only
def test_moments_route_scalar_and_vector():
    # k < d, noiseless Gaussian queries: the learners' refinement reaches round-off (measured 1e-16),
    # so 1e-9 is a real check of the whole route (width from the spectrum, learner, rescaling)
    d, k = 5, 3
    net = nr.random_network(d, k, rng=0, bias_range=(-0.5, 0.5))
    res = extract(net.predict, d, method="moments", rng=0, n_samples=60_000, input_scale=2.0)
    assert res.network_.n_hidden == k and res.diagnostics_["width"]["n_hidden"] == k
    assert rel_error(res.network_, net, d) < 1e-9
    assert res.n_queries_ == 60_000 + 2000 and res.diagnostics_["certificate"]["passed"]
    net3 = nr.random_network(6, 3, 4, rng=0, bias_range=(-0.5, 0.5))
    res3 = extract(net3.predict, 6, method="moments", rng=0, n_samples=60_000, n_hidden=3)
    assert res3.network_.n_outputs == 4 and rel_error(res3.network_, net3, 6) < 1e-9


def test_moments_route_warns_when_its_certificate_fails():
    # a leaky-ReLU box is outside the model: the route's own certificate (1e-6 on fresh queries) fails and
    # says so, beside whatever the learner itself warns
    W = np.random.default_rng(0).standard_normal((3, 5))

    def box(X):
        Z = X @ W.T
        return np.where(Z > 0, Z, 0.2 * Z).sum(axis=1)

    with pytest.warns(CertificateWarning, match="extraction certificate failed"):
        res = extract(box, 5, method="moments", rng=0, n_samples=60_000, n_hidden=3)
    assert not res.diagnostics_["certificate"]["passed"] and res.diagnostics_["certificate"]["relative_error"] > 1e-3


def test_moment_width_statistics_and_refusals():
    from scipy.stats import norm

    from nnrecover.errors import AssumptionError
    from nnrecover.extraction.moments import _he2, _he4_unfolded, moment_width

    d, k = 4, 6
    net = nr.random_network(d, k, rng=1, bias_range=(-0.3, 0.3)).canonical()
    X = np.random.default_rng(2).standard_normal((200_000, d))
    y = net.predict(X)
    W, b, a = net.hidden_weights, net.hidden_bias, net.output_weights[0]
    # population forms: E[relu(t + b) He_2(t)] = phi(b), E[relu(t + b) He_4(t)] = phi''(b) = (b^2 - 1) phi(b)
    P2 = np.einsum("j,ji,jk->ik", a * norm.pdf(b), W, W)
    V = np.einsum("ji,jk->jik", W, W).reshape(k, d * d)
    P4 = np.einsum("j,jm,jn->mn", a * (b ** 2 - 1) * norm.pdf(b), V, V)
    width, ev = moment_width(X, y[:, None])
    # the sample statistics agree with the population forms to a few times the sampling error the
    # function measures itself (half-sample difference; 4 covers a 4-sigma deviation of the norm)
    assert np.linalg.norm(_he2(X, y) - P2, 2) <= 4 * ev["order2"]["sampling_error"]
    assert np.linalg.norm(_he4_unfolded(X, y) - P4, 2) <= 4 * ev["order4"]["sampling_error"]
    # the width is the number of singular values above 3x that error, never more than the truth here
    assert width == max(ev["order2"]["rank"], ev["order4"]["rank"]) and 1 <= width <= k
    with pytest.raises(AssumptionError, match="no hidden unit"):
        extract(lambda X: np.ones(X.shape[0]), 3, method="moments", rng=0, n_samples=5000)
    with pytest.raises(InputError, match="at least 1000"):
        extract(net.predict, d, method="moments", rng=0, max_queries=2500)
    with pytest.raises(QueryBudgetError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the learner fitted on 5000 rows warns about its certificates
        extract(net.predict, d, method="moments", rng=0, n_samples=5000, max_queries=6000)
    assert info.value.partial.network_ is None and info.value.n_queries == 5000


def test_moments_n_samples_validated():
    f = lambda X: np.maximum(X, 0).sum(axis=1)  # noqa: E731
    for bad in (10, 2.5, True, -3):
        with pytest.raises(InputError, match="n_samples must be an int >= 1000"):
            nr.extract(f, 3, method="moments", n_samples=bad, rng=0)
    with pytest.raises(InputError, match="max_queries=2500 leaves 500"):
        nr.extract(f, 3, method="moments", max_queries=2500, rng=0)

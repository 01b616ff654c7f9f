"""Tests of black-box extraction by critical points (nnrecover.extraction)."""

from __future__ import annotations

import platform
import sys
import warnings

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.errors import CertificateWarning, InputError, QueryBudgetError
from nnrecover.extraction import ExtractionResult, extract
from nnrecover.extraction.critical_points import resolve_signs, search_line
from nnrecover.extraction.queries import QueryOracle


def _angles(est: nr.TwoLayerNetwork, truth: nr.TwoLayerNetwork) -> np.ndarray:
    """For every true row, the angle to the closest recovered row (sign counts), computed as
    2 arcsin(|w - w'| / 2) so that it is accurate near 0 (arccos of a cosine is not)."""
    E, T = est.canonical().hidden_weights, truth.canonical().hidden_weights
    dist = np.linalg.norm(E[:, None, :] - T[None, :, :], axis=2)
    return 2 * np.arcsin(np.minimum(dist.min(axis=0), 2.0) / 2)


def _rel_error(est, truth, d, rng=123, n=4000):
    X = np.random.default_rng(rng).standard_normal((n, d))
    y, g = truth.predict(X), est.predict(X)
    return float(np.linalg.norm(g - y) / np.linalg.norm(y))


class CountingModel:
    """A black box that counts the rows it is asked for, independently of the library."""

    def __init__(self, net, dtype=np.float64):
        self.net, self.rows, self.dtype = net, 0, dtype
        self.arrays = [np.asarray(a, dtype) for a in (net.hidden_weights, net.hidden_bias,
                                                       net.output_weights, net.output_bias)]

    def __call__(self, X):
        self.rows += X.shape[0]
        W, b, A, c = self.arrays
        X = np.asarray(X, self.dtype)
        Y = np.maximum(X @ W.T + b, 0) @ A.T + c
        return Y[:, 0] if Y.shape[1] == 1 else Y


# ------------------------------------------------------------------------------------ exactness
def test_exact_wide_scalar_network_with_biases():
    # k > d: the signs need the 0/1 solve; float64 black box, so every row and the function are
    # recovered to round-off (angles ~1e-14 measured; 1e-8 asks for 6 orders of margin)
    d, k = 5, 12
    net = nr.random_network(d, k, rng=3, bias_range=(-1, 1))
    model = CountingModel(net)
    res = extract(model, d, rng=0)
    assert isinstance(res, ExtractionResult)
    assert res.network_.n_hidden == k
    assert _angles(res.network_, net).max() < 1e-8
    assert _rel_error(res.network_, net, d) < 1e-9
    assert res.n_queries_ == model.rows == res.diagnostics_["queries"]
    assert res.diagnostics_["certificate"]["passed"]
    assert res.diagnostics_["certificate"]["relative_error"] < 1e-9
    assert res.diagnostics_["width"]["n_hidden"] == k
    # canonical form: unit rows
    assert np.allclose(np.linalg.norm(res.network_.hidden_weights, axis=1), 1.0, atol=1e-14)


def test_d10_k50_float64_and_float32_boxes():
    # the sizes: k = 5 d, scalar output, so the orientations need the 0/1 solve (lattice).
    # float64: rows and function to round-off (measured 1.5e-14 rad, 4e-15). float32: the box rounds
    # to 2^-24 ~ 6e-8 per operation; through the d + k sums the function agrees to ~1e-6 (measured
    # 9e-7), which is what the certificate must report, with exactly k units (no false ones)
    d, k = 10, 50
    net = nr.random_network(d, k, rng=1, bias_range=(-1, 1))
    res = extract(net.predict, d, rng=0)
    assert res.network_.n_hidden == k
    assert _angles(res.network_, net).max() < 1e-8
    assert _rel_error(res.network_, net, d) < 1e-9
    assert res.n_queries_ == res.diagnostics_["queries"] > 0
    box = CountingModel(net, np.float32)
    res32 = extract(box, d, rng=0)
    assert res32.network_.n_hidden == k
    cert = res32.diagnostics_["certificate"]
    assert cert["passed"] and 1e-8 < cert["relative_error"] < 1e-5
    assert _rel_error(res32.network_, net, d) < 1e-5


def test_exact_vector_outputs_and_given_width():
    d, k, p = 4, 6, 3
    net = nr.random_network(d, k, p, rng=5, bias_range=(-1, 1), output_bias_range=(-1, 1))
    res = extract(net.predict, d, n_hidden=k, rng=1)
    assert res.network_.n_outputs == p and res.network_.n_hidden == k
    assert _angles(res.network_, net).max() < 1e-8
    assert _rel_error(res.network_, net, d) < 1e-9
    err = nr.metrics.parameter_error(res.network_, net)["max_unit_error"]
    assert err < 1e-8


def test_rarely_active_unit_is_found():
    # unit 0 has bias -3.5 with a unit row: active on P(N(0,1) > 3.5) = 2.3e-4 of Gaussian inputs,
    # so a fit on Gaussian samples would hardly see it; the long lines cross its hyperplane
    d, k = 4, 5
    net = nr.random_network(d, k, rng=7, bias_range=(-0.5, 0.5)).canonical()
    b = net.hidden_bias.copy()
    b[0] = -3.5
    net = nr.TwoLayerNetwork(net.hidden_weights, b, net.output_weights, net.output_bias)
    res = extract(net.predict, d, rng=2)
    assert res.network_.n_hidden == k
    assert _angles(res.network_, net).max() < 1e-8
    X = 4.0 * np.random.default_rng(0).standard_normal((4000, d))   # a region where unit 0 is active
    assert np.max(np.abs(res.predict(X) - net.predict(X))) < 1e-9 * np.max(np.abs(net.predict(X)))


def test_unit_without_output_weight_is_reported_unidentifiable():
    d, k = 4, 5
    net = nr.random_network(d, k, rng=11, bias_range=(-1, 1))
    A = net.output_weights.copy()
    A[0, 2] = 0.0                      # unit 2 leaves no kink: nothing can reveal it
    net = nr.TwoLayerNetwork(net.hidden_weights, net.hidden_bias, A, net.output_bias)
    res = extract(net.predict, d, rng=0)
    assert res.network_.n_hidden == k - 1
    assert _rel_error(res.network_, net, d) < 1e-9
    with pytest.warns(CertificateWarning, match="unidentifiable"):
        res2 = extract(net.predict, d, n_hidden=k, rng=0)
    assert res2.diagnostics_["unidentifiable_units"] == 1


def test_a_unit_missed_in_a_noisy_box_fails_the_certificate():
    # additive noise 3e-5 and one unit with output weight 0.03: its kinks drown and it is missed; the 0.8 %
    # it leaves is about 560 times the measured relative noise (the complete extraction of the same box
    # with the unit's weight at full size leaves 5.6 times), above the certificate's 10 sqrt(P) = 60 times
    base = nr.random_network(5, 5, rng=7, bias_range=(-0.5, 0.5)).canonical()
    A = base.output_weights.copy()
    A[0, 0] = 0.03
    weak = nr.TwoLayerNetwork(base.hidden_weights, base.hidden_bias, A, base.output_bias)

    def box(net):
        g = np.random.default_rng(0)
        return lambda X: net.predict(X) + 3e-5 * g.standard_normal(np.asarray(X).shape[0])

    with pytest.warns(CertificateWarning, match="units were missed"):
        res = extract(box(weak), 5, rng=0)
    cert = res.diagnostics_["certificate"]
    assert res.network_.n_hidden == 4 and not cert["passed"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CertificateWarning)
        full = extract(box(base), 5, rng=0)
    assert full.network_.n_hidden == 5 and full.diagnostics_["certificate"]["passed"]


def test_float32_black_box_precision_and_no_false_units():
    # a float32 model rounds every input and output to 2^-24 = 6e-8 relative; the measured noise must
    # say so, and the recovered network then matches the float32 box only to that round-off (times
    # the growth through d + k sums: the certificate's relative error is ~1e-6, measured 6e-7)
    d, k = 6, 5
    net = nr.random_network(d, k, rng=13, bias_range=(-1, 1))
    model = CountingModel(net, np.float32)
    res = extract(model, d, rng=0)
    noise = res.diagnostics_["noise"]["relative_noise"]
    assert 1e-9 < noise < 1e-6
    assert res.network_.n_hidden == k                          # no false units
    cert = res.diagnostics_["certificate"]
    assert cert["passed"] and 1e-8 < cert["relative_error"] < 1e-5
    assert _angles(res.network_, net).max() < 1e-4
    assert _rel_error(res.network_, net, d) < 1e-5


def test_float32_box_d100_k50_reaches_round_off_with_every_unit():
    # d = 100, k = 50: the box's own error against the float64 network is 2.3e-7 (measured); the rows
    # come from total-least-squares fits through 4 d critical points each, whose normal error is
    # about the location error (~1e-6 here) times sqrt(d) / (sqrt(m) - sqrt(d)) = 1 for m = 4 d;
    # measured: rows within 3.3e-6 rad, function 1.9e-6. A refit through 1.25 d points (factor ~9)
    # without the final polish measured 9.6e-5 rad and 2.7e-5, so the bounds below separate the two
    d, k = 100, 50
    net = nr.random_network(d, k, rng=0, bias_range=(-1, 1))
    res = extract(CountingModel(net, np.float32), d, rng=0)
    assert res.network_.n_hidden == k                          # every unit, none false
    assert res.diagnostics_["certificate"]["passed"]
    assert _angles(res.network_, net).max() < 3e-5
    assert _rel_error(res.network_, net, d) < 1e-5


@pytest.mark.slow
def test_float32_box_d100_k200_every_weak_unit_found():
    # the last cell of `nnrecover experiment extract --seed 0` (d = 100, k = 200, float32), drawn the
    # way the experiment draws it; its box evaluated with one BLAS thread (the float32 sums, hence the
    # box's round-off, depend on the thread count). A unit with output weight 0.5 has its gradient
    # jump read only coarsely among ~100 kinks per line; skipping such jumps, or losing their refits
    # to stencils crossed by other kinks, left 199 units and a failed certificate (measured). Bounds
    # as in the d = 100, k = 50 test (measured here: rows 8.7e-6 rad, function 3.8e-6)
    from threadpoolctl import threadpool_limits

    gen = np.random.default_rng(0)
    for d in (10, 100):
        for k in (5, 10, 20, 50, 100, 200):
            net = nr.random_network(d, k, rng=gen, bias_range=(-1, 1))
            gen.standard_normal((20_000, d))
            seeds = [int(gen.integers(0, 2**63 - 1)) for _ in range(2)]
    box = CountingModel(net, np.float32)
    with threadpool_limits(1):
        res = extract(box, d, rng=seeds[1], sign_time_limit=5)
    assert res.diagnostics_["n_hidden"] == k
    assert res.diagnostics_["certificate"]["passed"]
    E, T = res.network_.canonical().hidden_weights[:k], net.canonical().hidden_weights
    dist = np.minimum(np.linalg.norm(E[:, None] - T[None], axis=2), np.linalg.norm(E[:, None] + T[None], axis=2))
    assert np.max(2 * np.arcsin(dist.min(axis=0) / 2)) < 3e-5    # every true row, up to orientation


def test_same_seed_same_result():
    d, k = 4, 6
    net = nr.random_network(d, k, rng=17, bias_range=(-1, 1))
    a = extract(net.predict, d, rng=4)
    b = extract(net.predict, d, rng=4)
    assert a.network_ == b.network_ and a.n_queries_ == b.n_queries_


# ----------------------------------------------------------------------------------------- budget
def test_budget_is_honoured_exactly_and_partial_result_is_returned():
    d, k = 4, 6
    net = nr.random_network(d, k, rng=19, bias_range=(-1, 1))
    full = extract(net.predict, d, rng=9)
    n = full.n_queries_
    # the same run fits in exactly its own number of queries
    exact = extract(net.predict, d, rng=9, max_queries=n)
    assert exact.n_queries_ == n and exact.network_ == full.network_
    for budget in (n - 1, n // 2, 300):
        model = CountingModel(net)
        with pytest.raises(QueryBudgetError, match="query budget exhausted") as info:
            extract(model, d, rng=9, max_queries=budget)
        exc = info.value
        assert model.rows <= budget and exc.n_queries == model.rows
        part = exc.partial
        assert isinstance(part, ExtractionResult) and part.diagnostics_["complete"] is False
        assert part.n_queries_ == model.rows
        assert "Recovered so far" in str(exc)
    # 300 rows end during the search of the first line: nothing recovered yet
    assert part.network_ is None and part.diagnostics_["n_hidden"] == 0
    # a budget that ends after the search still carries the units found, on the true hyperplanes
    model = CountingModel(net)
    with pytest.raises(QueryBudgetError) as info:
        extract(model, d, rng=9, max_queries=n - 1)
    W = info.value.partial.network_.hidden_weights
    T = net.canonical().hidden_weights
    assert info.value.partial.network_.n_hidden == k
    dist = np.minimum(np.linalg.norm(W[:, None] - T[None], axis=2), np.linalg.norm(W[:, None] + T[None], axis=2))
    assert dist.min(axis=1).max() < 1e-8


# ------------------------------------------------------------------------------------ components
def test_search_line_finds_every_kink_exactly():
    d, k = 5, 8
    net = nr.random_network(d, k, rng=23, bias_range=(-1, 1)).canonical()
    oracle = QueryOracle(net.predict, d)
    rng = np.random.default_rng(0)
    noise, evidence = oracle.calibrate(rng, 1.0)
    assert evidence["max_repeat_difference"] == 0.0
    x0, v = rng.standard_normal(d), rng.standard_normal(d)
    v /= np.linalg.norm(v)
    lk = search_line(oracle, x0, v, -10.0, 10.0, noise)
    true_s = -(net.hidden_weights @ x0 + net.hidden_bias) / (net.hidden_weights @ v)
    true_s = np.sort(true_s[np.abs(true_s) < 10.0])
    assert lk.s.size == true_s.size
    # kinks are intersections of exact linear pieces: position error ~ eps |f| / slope change
    assert np.max(np.abs(np.sort(lk.s) - true_s)) < 1e-11
    assert lk.queries == oracle.n_queries - evidence["queries"]


def test_resolve_signs_recovers_orientations_when_k_exceeds_d():
    rng = np.random.default_rng(1)
    d, k = 4, 10
    W = rng.standard_normal((k, d))
    W /= np.linalg.norm(W, axis=1, keepdims=True)
    alpha = rng.uniform(0.5, 1.5, (k, 1)) * rng.choice([-1, 1], (k, 1))
    t = rng.integers(0, 2, k)
    U = -(t[:, None] * alpha * W).sum(axis=0)[None, :]
    found, info = resolve_signs(W, alpha, U, rel_tol=1e-11)
    assert np.array_equal(found, t) and info["max_relative_residual"] < 1e-11
    assert info["method"].startswith("0/1")
    # k <= d: a plain least-squares solve
    found, info = resolve_signs(W[:3], alpha[:3], -(t[:3, None] * alpha[:3] * W[:3]).sum(0)[None], rel_tol=1e-11)
    assert np.array_equal(found, t[:3]) and info["method"] == "least squares"


def test_lattice_reduction_and_wide_binary_solve():
    from nnrecover.extraction._lattice import _gram_schmidt, binary_solution, lll_reduce

    rng = np.random.default_rng(3)
    B = rng.integers(-50, 50, (8, 8)).astype(float)
    R, finished = lll_reduce(B)
    assert finished
    # same lattice: R = U B with U integral and unimodular
    U = R @ np.linalg.inv(B)
    assert np.allclose(U, np.rint(U), atol=1e-8) and abs(abs(np.linalg.det(np.rint(U))) - 1) < 1e-8
    # LLL-reduced (delta = 0.99): size-reduced and the Lovasz condition on consecutive vectors
    mu, Bn = _gram_schmidt(R)
    assert np.all(np.abs(np.tril(mu, -1)) <= 0.5 + 1e-9)
    assert np.all(Bn[1:] >= (0.99 - np.diag(mu, -1) ** 2) * Bn[:-1] * (1 - 1e-9))
    # k = 40 binary unknowns, m = 5 equations known to 1e-13: a low-density subset sum; the solution
    # is unique with overwhelming probability (2^40 sums spread over a 5-dimensional box of side ~10
    # resolved to 1e-11), so the lattice must return exactly t
    m, k = 5, 40
    M = rng.standard_normal((m, k))
    t = rng.integers(0, 2, k)
    rhs = M @ t + 1e-13 * rng.standard_normal(m)
    tol = 1e-11 * (np.abs(M).sum(axis=1) + np.abs(rhs))
    assert np.array_equal(binary_solution(M, rhs, tol), t)


def _subset_sum(m, k, noise, seed):
    """An orientation system ``M t = rhs`` like the extractor's: unit rows times output weights, the
    right-hand side off by ``noise`` relative to each equation's coefficient scale."""
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((k, m))
    W /= np.linalg.norm(W, axis=1, keepdims=True)
    alpha = rng.uniform(0.5, 1.5, k) * rng.choice([-1, 1], k)
    M = -(alpha[:, None] * W).T
    t = rng.integers(0, 2, k)
    scale = np.abs(M).sum(axis=1)
    return M, M @ t + noise * scale * rng.standard_normal(m), t, scale, W, alpha


@pytest.mark.parametrize("backend", ["numpy", "auto"])
def test_lattice_backends_solve_the_same_subset_sum(backend):
    from nnrecover.extraction._lattice import binary_solution, have_fpylll

    if backend == "auto" and sys.platform == "linux" and platform.machine() == "x86_64":
        assert have_fpylll(), "fpylll is a dependency of the test extra on Linux x86_64"
    # m = 6 equations known to 1e-15 weighted at 1e-14, k = 40 unknowns: density 40 / (6 * 46) = 0.14,
    # far below the 0.94 at which the solution is the lattice's shortest vector; the solution is unique
    # with overwhelming probability (2^40 sums in a 6-dimensional box resolved to 1e-14), so both
    # backends must return exactly t
    M, rhs, t, scale, _, _ = _subset_sum(6, 40, 1e-15, seed=5)
    info = {}
    found = binary_solution(M, rhs, 1e-14 * scale, time_limit=60, backend=backend, info=info)
    assert np.array_equal(found, t)
    assert info["reduction"].endswith("(fplll)" if backend == "auto" and have_fpylll() else "(numpy)")
    with pytest.raises(InputError, match="backend"):
        binary_solution(M, rhs, scale, backend="magic")


def test_lattice_falls_back_to_numpy_when_fplll_aborts(monkeypatch):
    from nnrecover.extraction import _lattice

    def abort(*args, **kwargs):
        raise RuntimeError("Aborted")     # what cysignals raises for fplll's "infinite loop in babai"

    monkeypatch.setattr(_lattice, "_solve_fpylll", abort)
    monkeypatch.setattr(_lattice, "have_fpylll", lambda: True)
    M, rhs, t, scale, _, _ = _subset_sum(6, 40, 1e-15, seed=5)
    info = {}
    assert np.array_equal(_lattice.binary_solution(M, rhs, 1e-14 * scale, info=info), t)
    assert info["fplll_error"] == "Aborted" and info["reduction"] == "LLL (numpy)"
    with pytest.raises(RuntimeError, match="Aborted"):
        _lattice.binary_solution(M, rhs, 1e-14 * scale, backend="fpylll")


def test_resolve_signs_weights_the_lattice_by_precision():
    # d = 10 equations, k = 100 units: the extractor's case of a scalar output with k = 10 d. Weighted
    # by the acceptance tolerance (1e-11) the subset sum has density 100 / (10 * 36) = 0.28, weighted by
    # the coefficients' precision (1e-14) 0.22: the weight ladder must reach the solution, which meets
    # the equations to the noise (1e-15) and therefore within rel_tol
    _, _, t, _, W, alpha = _subset_sum(10, 100, 0.0, seed=7)
    U = -(t[:, None] * alpha[:, None] * W).sum(axis=0)[None, :]
    U = U * (1 + 1e-15 * np.random.default_rng(8).standard_normal(U.shape))
    found, info = resolve_signs(W, alpha[:, None], U, rel_tol=1e-11, precision=1e-14, time_limit=120)
    assert np.array_equal(found, t)
    assert info["max_relative_residual"] <= 1e-11
    assert info["lattice_weights_tried"][0] == 1e-14


def test_wide_scalar_box_k_10d_is_oriented():
    # d = 10, k = 100, scalar output: 10 equations for 100 orientations; solved by the lattice at the
    # precision of a float64 box (max angle ~1e-14 and function ~1e-14 measured)
    d, k = 10, 100
    net = nr.random_network(d, k, rng=0, bias_range=(-1, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CertificateWarning)
        res = extract(CountingModel(net), d, rng=0, sign_time_limit=60)
    assert res.network_.n_hidden == k and res.diagnostics_["linear_units"] == 0
    assert _angles(res.network_, net).max() < 1e-8
    assert _rel_error(res.network_, net, d) < 1e-9
    assert res.diagnostics_["signs"]["method"].startswith("0/1 solve by lattice")


# ------------------------------------------------------------------------------------- validation
def test_input_validation():
    net = nr.random_network(3, 2, rng=0, bias_range=(-1, 1))
    with pytest.raises(InputError, match="max_queries"):
        extract(net.predict, 3, max_queries=0)
    with pytest.raises(InputError, match="method"):
        extract(net.predict, 3, method="magic")
    with pytest.raises(InputError, match="n_hidden"):
        extract(net.predict, 3, n_hidden="many")
    with pytest.raises(InputError, match="model must be a callable"):
        extract("not a model", 3)
    with pytest.raises(InputError, match="must return shape"):
        extract(lambda X: np.zeros((X.shape[0], 2, 2)), 3)
    with pytest.raises(InputError, match="NaN or infinite"):
        extract(lambda X: np.full(X.shape[0], np.nan), 3)
    with pytest.raises(InputError, match="input_scale"):
        extract(net.predict, 3, input_scale=-1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = extract(net.predict, 3, rng=0)
    assert res.network_.n_hidden == 2


# ------------------------------------------------------------------------------------ sample-only
def test_moments_route_scalar_and_vector():
    # k < d, noiseless Gaussian queries: the learners' refinement reaches round-off (measured 1e-16),
    # so 1e-9 is a real check of the whole route (width from the spectrum, learner, rescaling)
    d, k = 5, 3
    net = nr.random_network(d, k, rng=0, bias_range=(-0.5, 0.5))
    res = extract(net.predict, d, method="moments", rng=0, n_samples=60_000, input_scale=2.0)
    assert res.network_.n_hidden == k and res.diagnostics_["width"]["n_hidden"] == k
    assert _rel_error(res.network_, net, d) < 1e-9
    assert res.n_queries_ == 60_000 + 2000 and res.diagnostics_["certificate"]["passed"]
    net3 = nr.random_network(6, 3, 4, rng=0, bias_range=(-0.5, 0.5))
    res3 = extract(net3.predict, 6, method="moments", rng=0, n_samples=60_000, n_hidden=3)
    assert res3.network_.n_outputs == 4 and _rel_error(res3.network_, net3, 6) < 1e-9


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


def test_extract_experiment_quick(tmp_path):
    from nnrecover.experiments.runner import run_experiment

    df = run_experiment("extract", tmp_path, quick=True, rng=0)
    assert set(df["dtype"]) == {"float64", "float32"} and (df["status"] == "ok").all()
    f64 = df[df["dtype"] == "float64"]
    assert (f64["k_found"] == f64["k"]).all() and (f64["function_error"] < 1e-9).all()
    assert (f64["max_angle"] < 1e-8).all()
    f32 = df[df["dtype"] == "float32"]
    assert (f32["function_error"] < 1e-5).all() and (f32["noise"] > 1e-9).all()
    assert (df["queries"] > 0).all() and (tmp_path / "figure.png").exists()

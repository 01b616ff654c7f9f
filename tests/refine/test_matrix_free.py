"""The matrix-free Gauss-Newton of the shared refinement (nnrecover.refine.matrix_free and its use by
nnrecover.refine): its operator and preconditioner, round-off on noiseless data where the dense normal
matrix does not fit the memory budget, label noise, and inputs that are not Gaussian."""

from __future__ import annotations

import time

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.refine import matrix_free
from nnrecover._threads import blas_threads
from nnrecover.distributions import StandardGaussian
from nnrecover.metrics import parameter_error
from nnrecover.refine import BLOCKS, Model, fit_least_squares, refine_network


def _perturbed(net, scale, seed):
    g = np.random.default_rng(seed)
    out = net.copy()
    for arr in (out.hidden_weights, out.hidden_bias, out.output_weights, out.output_bias):
        arr += scale * g.standard_normal(arr.shape)
    return out


def _operator(net, X):
    W, b, A = net.hidden_weights, net.hidden_bias, net.output_weights
    return matrix_free.Operator(W, b, A, X, X @ W.T + b, X, chunk_rows=4096)


def _direction(net, seed):
    g = np.random.default_rng(seed)
    k, d, p = net.n_hidden, net.n_inputs, net.n_outputs
    return g.standard_normal((k, d)), g.standard_normal(k), g.standard_normal((p, k)), g.standard_normal(p)


def _flat(v):
    return np.concatenate([np.ravel(x) for x in v])


def test_operator_products_are_the_normal_matrix_and_the_gradient():
    # the float64 operator is J^T J / m and J^T R / m of the dense Jacobian (refine.Model.jacobian, whose
    # rows carry 1 / sqrt(m)), to round-off: the same sums in another order
    net = nr.random_network(7, 3, 2, rng=0)
    X = np.random.default_rng(1).standard_normal((400, 7))
    Y = np.random.default_rng(2).standard_normal((400, 2))
    model = Model(net, BLOCKS)
    theta = model.pack(net)
    J = model.jacobian(theta, X, Y)
    op = _operator(net, X)
    v = _direction(net, 3)
    dense = J.T @ (J @ _flat(v))
    assert np.abs(_flat(op.jtj(*v)) - dense).max() < 1e-12 * np.abs(dense).max()
    R = model.forward(theta, X, Y)[-1]
    grad = model.loss_and_grad(theta, X, Y)[1]
    assert np.abs(_flat(op.jt(R)) - grad).max() < 1e-12 * np.abs(grad).max()
    # the rescaling directions (w_i, b_i, -A[:, i]) are null directions of J, and project() removes them
    gauge = (net.hidden_weights * [[1], [0], [0]], net.hidden_bias * [1, 0, 0],
             -net.output_weights * [1, 0, 0], np.zeros(2))
    assert np.abs(J @ _flat(gauge)).max() < 1e-12
    assert np.abs(_flat(op.project(*gauge))).max() < 1e-12
    proj = op.project(*v)
    assert abs(_flat(proj) @ _flat(gauge)) < 1e-10


def test_preconditioner_span_block_is_the_sample_normal_matrix():
    # M's span block is the exact normal matrix of the coordinates (dW Q, b, A, c) when it is built from every
    # row (m <= 20 per span coordinate): for directions u, v inside the span, u.M v = u.J^T J v / m to round-off
    net = nr.random_network(9, 3, 2, rng=4)
    X = np.random.default_rng(5).standard_normal((300, 9))
    op = _operator(net, X)
    Q = op.Q

    def in_span(seed):
        dW, db, dA, dc = _direction(net, seed)
        return dW @ Q @ Q.T, db, dA, dc

    u, v = in_span(6), in_span(7)
    exact = _flat(u) @ _flat(op.jtj(*v))
    assert abs(_flat(u) @ _flat(op.m_apply(*v, inverse=False)) - exact) < 1e-12 * abs(exact)


@pytest.mark.parametrize("p", [1, 4])
def test_span_block_solve_by_its_schur_complement_is_the_dense_solve(p):
    # the output coordinates (A[o, :], c[o]) of different outputs do not interact, so the span block is solved
    # by eliminating them (its Schur complement on the k^2 + k hidden coordinates): the same solution as a
    # Cholesky solve of the whole block, to round-off on a well-conditioned block (a ridge of 1e-2 here; the
    # solver's own 1e-8 ridge leaves the rescaling directions with a condition number near 1e8)
    from scipy import linalg

    net = nr.random_network(9, 3, p, rng=4)
    X = np.random.default_rng(5).standard_normal((500, 9))
    S = _operator(net, X).S
    k = 3
    assert S.shape == (k * k + k + p * (k + 1),) * 2
    groups = matrix_free._output_groups(S.shape[0], k)
    for o in range(p):  # the output block is block diagonal, all blocks equal
        for q in range(p):
            block = S[np.ix_(groups[o], groups[q])]
            assert np.array_equal(block, S[np.ix_(groups[0], groups[0])]) if o == q else not block.any()
    S = S + np.diag(1e-2 * np.diag(S))
    factors = matrix_free._span_block_factors(S, k)
    vecs = np.random.default_rng(6).standard_normal((S.shape[0], 3))
    dense = linalg.cho_solve(linalg.cho_factor(S), vecs)
    for vec, ref in ((vecs[:, 0], dense[:, 0]), (vecs, dense)):  # one vector, and columns
        schur = matrix_free._span_block_solve(factors, vec)
        assert schur.shape == ref.shape and np.abs(schur - ref).max() < 1e-12 * np.abs(ref).max()


@pytest.mark.parametrize("d, k, p", [(9, 3, 4), (40, 26, 2)])
def test_operator_keeps_the_span_block_in_parts_that_are_the_normal_matrix(d, k, p):
    # the operator holds the span block as its hidden part, K and F (never the whole matrix): assembled, they
    # are the normal matrix of the span coordinates (refine._normal_equations on the projected rows), its
    # product and its structured Schur-complement factors agree with the general ones (k = 26: the hidden
    # block by unit pairs)
    from nnrecover.network import TwoLayerNetwork
    from nnrecover.refine.model import _normal_equations

    net = nr.random_network(d, k, p, rng=4)
    X = np.random.default_rng(5).standard_normal((3000, d))
    op = _operator(net, X)
    W, b, A = net.hidden_weights, net.hidden_bias, net.output_weights
    small = Model(TwoLayerNetwork(W @ op.Q, b, A, np.zeros(p), "relu"), BLOCKS)
    n_s = min(3000, 20 * matrix_free.span_block_size(k, p))
    dense = _normal_equations(small, small.pack(small.net), X[:n_s] @ op.Q, None, np.zeros((n_s, p)), 4096)[0]
    assert np.abs(op.S - dense).max() < 1e-13 * np.abs(dense).max()
    vec = np.random.default_rng(6).standard_normal(dense.shape[0])
    assert np.abs(op._span_apply(vec) - dense @ vec).max() < 1e-12 * np.abs(dense @ vec).max()
    ridged = dense + np.diag(1e-8 * np.diag(dense) + 1e-300)
    general = matrix_free._span_block_solve(matrix_free._span_block_factors(ridged, k), vec)
    structured = matrix_free._span_block_solve(op._span_factors(), vec)
    # the ridge leaves the k rescaling directions with a condition number near 1e8: compare off them
    assert np.abs(ridged @ structured - vec).max() < 1e-6 * np.abs(vec).max()
    assert np.abs(ridged @ (structured - general)).max() < 1e-6 * np.abs(vec).max()


@pytest.mark.parametrize("p", [1, 4])
def test_span_block_unit_inverses_are_the_diagonal_blocks_of_the_inverse(p):
    # the max-unit-error certificate's matrix-free form needs S^{-1} on each unit's span coordinates
    # (v_i, b_i, A[:, i]) only, from the Schur complement's factors
    from scipy import linalg

    k = 3
    net = nr.random_network(9, k, p, rng=4)
    S = _operator(net, np.random.default_rng(5).standard_normal((500, 9))).S
    S = S + np.diag(1e-2 * np.diag(S))
    inverse = linalg.inv(S)
    blocks = matrix_free.span_block_unit_inverses(matrix_free._span_block_factors(S, k), k)
    kb = k * k + k
    for i in range(k):
        idx = np.r_[i * k:(i + 1) * k, k * k + i, kb + np.arange(p) * k + i]
        ref = inverse[np.ix_(idx, idx)]
        assert np.abs(blocks[i] - ref).max() < 1e-12 * np.abs(ref).max()


def test_preconditioner_is_close_to_the_normal_matrix_for_gaussian_rows():
    # x ~ N(0, I): M is the expected normal matrix (exact on the span, C (x) (I - Q Q^T) on the complement), so
    # M^{-1/2} J^T J M^{-1/2} has its eigenvalues within (1 +- O(sqrt(P / m)))^2 of 1 off the null space;
    # P = 62 parameters and m = 20000 rows: sqrt(62 / 20000) = 0.06 and sqrt(d / m_ij) for the co-active rows
    # (about m / 4) 0.04: every eigenvalue within [0.5, 2] leaves a margin of more than 5 such widths
    d, k, p = 12, 3, 2
    net = nr.random_network(d, k, p, rng=8)
    X = np.random.default_rng(9).standard_normal((20_000, d))
    op = _operator(net, X)
    op.factor(0.0)
    P = k * d + k + p * k + p
    J = Model(net, BLOCKS).jacobian(Model(net, BLOCKS).pack(net), X, np.zeros((X.shape[0], p)))
    JtJ = J.T @ J

    def unflat(x):
        return x[:k * d].reshape(k, d), x[k * d:k * d + k], x[k * d + k:k * d + k + p * k].reshape(p, k), x[-p:]

    Minv = np.column_stack([_flat(op.m_apply(*unflat(e), inverse=True)) for e in np.eye(P)])
    # eigenvalues of M^{-1} J^T J on the complement of the k rescaling directions (J^T J's null space)
    eig = np.sort(np.linalg.eigvals(Minv @ JtJ).real)[k:]
    assert 0.5 < eig.min() and eig.max() < 2.0


def test_refinement_reaches_round_off_when_the_normal_matrix_exceeds_the_budget():
    # d = 30, k = 4, p = 3: P = 139, J^T J = 154568 bytes > jacobian_memory = 100000, so the dense
    # normal equations are out; noiseless rows determine the teacher, and Gauss-Newton by conjugate gradients
    # reaches it to round-off (the L-BFGS fallback this replaces stops near 1e-8 here). 1e-10 leaves five
    # orders of margin over round-off on units of norm ~1
    d, k, p = 30, 4, 3
    truth = nr.random_network(d, k, p, rng=0)
    X, Y = nr.sample(truth, StandardGaussian(d), 20_000, rng=1)
    start = _perturbed(truth, 0.05, seed=2)
    assert parameter_error(start, truth)["max_unit_error"] > 0.1
    P = k * d + k + p * k + p
    assert 8 * P * P > 100_000
    res = refine_network(start, (X, Y), jacobian_memory=100_000, rng=0)
    assert res.method == "gn-matrix-free" and res.kept == "refined"
    assert parameter_error(res.network, truth)["max_unit_error"] < 1e-10
    # a subsample too small for the coarse stage (1455 < 3 * 600 rows): the matrix-free full-space stage runs
    # without a span stage before it (its preconditioner holds the span block) and reaches round-off
    small = refine_network(start, (X, Y), jacobian_memory=100_000, full_samples=1500, rng=0)
    assert [(st["stage"], st["method"]) for st in small.extra["stages"]] == [("full", "gn-matrix-free")]
    assert parameter_error(small.network, truth)["max_unit_error"] < 1e-10
    # the optimiser alone, one run on all rows (no span stages)
    net, info = fit_least_squares(start, X[:3000], Y[:3000], jacobian_memory=100_000)
    assert info["method"] == "gn-matrix-free" and info["status"] == 1 and info["n_jacobian"] == 0
    assert parameter_error(net, truth)["max_unit_error"] < 1e-10


def test_few_residuals_per_parameter_run_the_matrix_free_solver_not_lbfgs():
    # one output, P = 67: 3 P rows are fewer than the 4 P residuals of dense Gauss-Newton, but from 2 P the
    # matrix-free solver runs (its preconditioner keeps the conjugate gradients convergent) and reaches the
    # noiseless teacher to round-off; below 2 P "auto" still runs L-BFGS
    truth = nr.random_network(20, 3, rng=95, bias_range=(-0.5, 0.5), output_bias_range=(-0.3, 0.3))
    X, Y = nr.sample(truth, StandardGaussian(20), 201, rng=96)
    start = _perturbed(truth, 1e-2, seed=97)
    net, info = fit_least_squares(start, X, Y, jacobian_memory=10_000)
    assert info["method"] == "gn-matrix-free"
    assert parameter_error(net, truth)["max_unit_error"] < 1e-10
    _, few = fit_least_squares(start, X[:120], Y[:120], jacobian_memory=10_000, max_iter=50)
    assert few["method"] == "lbfgs"


def test_large_networks_are_refined_matrix_free_by_default_without_a_normal_matrix():
    # from _MATRIX_FREE_MIN_PARAMS parameters "auto" solves matrix free even when J^T J fits the budget (P =
    # 4041: 8 P^2 = 131 MB, within the 256 MiB default); below it the dense normal equations run (as in
    # tests/refine/test_refine_network.py). Nothing P x P is formed: the solver holds the rows in float32 (13 MB), a few
    # (m, k) arrays (2.6 MB each) and the span block (8 * 441^2 = 1.6 MB), so its peak stays below half of
    # one P x P matrix, which a normal matrix would exceed by itself
    import tracemalloc

    from nnrecover.refine.least_squares import _MATRIX_FREE_MIN_PARAMS

    d, k = 200, 20
    P = k * d + k + k + 1
    assert P >= _MATRIX_FREE_MIN_PARAMS and 8 * P * P < 1 << 28
    truth = nr.random_network(d, k, rng=3)
    X, Y = nr.sample(truth, StandardGaussian(d), 4 * P, rng=4)
    start = _perturbed(truth, 0.01, seed=5)
    tracemalloc.start()
    try:
        net, info = fit_least_squares(start, X, Y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info["method"] == "gn-matrix-free" and info["status"] == 1
    assert peak < 4 * P * P
    assert parameter_error(net, truth)["max_unit_error"] < 1e-10


def test_label_noise_stops_within_the_statistical_error_of_the_dense_path(monkeypatch):
    # both paths minimise the same empirical loss from the same start; with label noise sigma its minimiser
    # is off the teacher by the statistical error, about sigma sqrt(P / (n p)) per parameter (0.05 sqrt(139 /
    # 48000) = 2.7e-3; a unit holds d + 1 + p = 34 of them, measured max unit error 5.5e-3). The ReLU kinks make
    # the loss piecewise smooth, so two optimisers can stop at nearby points (module docstring of refine:
    # measured 3.6e-3 apart against 1.9e-2 statistical error): the two results must be closer to each other
    # than half the dense result's distance to the teacher, and both stages on the whole subsample must stop
    # by their own tests, not by the step budget
    import nnrecover.refine.least_squares as least_squares

    d, k, p = 30, 4, 3
    truth = nr.random_network(d, k, p, rng=0)
    X, Y = nr.sample(truth, StandardGaussian(d), 20_000, noise=0.05, rng=1)
    start = _perturbed(truth, 0.05, seed=2)
    monkeypatch.setattr(least_squares, "_MATRIX_FREE_MIN_PARAMS", 1)
    free = refine_network(start, (X, Y), full_samples=5000, rng=0)
    monkeypatch.setattr(least_squares, "_MATRIX_FREE_MIN_PARAMS", 10 ** 9)
    with blas_threads(1):  # the dense path's small products, as inside a learner's fit
        dense = refine_network(start, (X, Y), full_samples=5000, rng=0)
    assert free.method == "gn-matrix-free" and dense.method == "gn"
    full = [st for st in free.extra["stages"] if st["stage"] == "full"]
    assert full[-1]["status"] in (1, 2, 3) and full[-1]["n_samples_used"] == 4000
    assert [st["stage"] for st in free.extra["stages"]][-2:] == ["full-gradient", "span"]
    err_dense = parameter_error(dense.network, truth)["max_unit_error"]
    assert err_dense < 10 * 0.05 * np.sqrt(139 / 48_000) * np.sqrt(d + 1 + p)
    assert parameter_error(free.network, dense.network)["max_unit_error"] < 0.5 * err_dense
    # the all-rows loss: no worse than the dense path's beyond its statistical resolution loss * P / n
    assert free.train_loss_refined <= dense.train_loss_refined * (1 + 139 / 48_000)


@pytest.mark.parametrize("law", ["uniform", "student-t"])
def test_non_gaussian_rows_only_accept_loss_lowering_steps(law):
    # the preconditioner is the Gaussian population normal matrix; for uniform or heavy-tailed (Student t, 3
    # degrees of freedom, scaled to unit variance) rows it is only an approximation of J^T J: the conjugate
    # gradients are capped (here at 4 iterations per step, so the solves stay inexact), and a step is taken
    # only when it lowers the loss. Noiseless rows: the least-squares minimiser is still the teacher, which the
    # loss-lowering steps reach to round-off
    d, k, p = 20, 3, 2
    truth = nr.random_network(d, k, p, rng=10)
    g = np.random.default_rng(11)
    n = 3000
    X = (g.uniform(-np.sqrt(3), np.sqrt(3), (n, d)) if law == "uniform"
         else g.standard_t(3, (n, d)) / np.sqrt(3))
    Y = truth.predict(X)
    start = _perturbed(truth, 0.05, seed=12)
    model = Model(start, BLOCKS)
    out = matrix_free.gauss_newton(model.pack(start), X, Y, (k, d, p), max_iter=100, tol=1e-15, ftol=1e-15,
                                    roundoff=(64 * np.finfo(float).eps) ** 2 * float(np.mean(Y * Y)),
                                    chunk_rows=4096, operator_bytes=1 << 28, max_cg=4)
    losses = np.array(out["losses"])
    assert np.all(np.diff(losses) < 0)
    assert max(out["cg_iterations"]) <= 4
    assert out["status"] == 1
    assert parameter_error(model.network(out["theta"]), truth)["max_unit_error"] < 1e-10
    # the whole refinement on such rows, under a budget that rules out J^T J (as in the Gaussian test above)
    d, k, p = 30, 4, 3
    truth = nr.random_network(d, k, p, rng=0)
    X = (g.uniform(-np.sqrt(3), np.sqrt(3), (20_000, d)) if law == "uniform"
         else g.standard_t(3, (20_000, d)) / np.sqrt(3))
    res = refine_network(_perturbed(truth, 0.05, seed=2), (X, truth.predict(X)), jacobian_memory=100_000, rng=0)
    assert res.method == "gn-matrix-free" and res.kept == "refined"
    assert parameter_error(res.network, truth)["max_unit_error"] < 1e-10


def test_deadline_stops_the_matrix_free_solver():
    d, k, p = 30, 4, 3
    truth = nr.random_network(d, k, p, rng=0)
    X, Y = nr.sample(truth, StandardGaussian(d), 3000, rng=1)
    start = _perturbed(truth, 0.05, seed=2)
    net, info = fit_least_squares(start, X, Y, jacobian_memory=100_000, deadline=time.perf_counter())
    assert info["method"] == "gn-matrix-free" and info["status"] == -2 and not info["success"]
    assert net == start

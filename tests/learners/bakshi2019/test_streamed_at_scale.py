"""The exact route (Bakshi et al. 2019, Algorithms 4-5) at large d: what it reads, what it holds, and that
the shortcuts that keep it near two passes over the data change neither its answer nor its checks."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.distributions import Gaussian, StandardGaussian
from nnrecover.learners.bakshi2019._common import _solve_well_posed
from nnrecover.learners.bakshi2019.tensor_step import approximate_hidden_weights, gram_stride
from nnrecover.metrics import parameter_error
from nnrecover.sampling import BLOCK_ROWS, BLOCK_VALUES, block_rows


class _CountingStream:
    """A re-iterable over a SampleStream that counts the iterations read to the end (full passes)."""

    def __init__(self, stream):
        self.stream = stream
        self.n_samples, self.n_inputs, self.n_outputs = stream.n_samples, stream.n_inputs, stream.n_outputs
        self.full_passes = 0

    def __iter__(self):
        yield from self.stream
        self.full_passes += 1


def test_gram_stride_keeps_the_gram_at_the_cost_of_the_other_products():
    assert gram_stride(10, 3, 3) == 1
    assert gram_stride(100, 10, 10) == 5
    assert gram_stride(1000, 50, 50) == 10
    assert gram_stride(5, 10, 10) == 1


def test_strided_gram_still_detects_a_covariance_off_the_identity():
    # d = 60, k = m = 3: E[x x^T] on every 10th of the 60000 moment rows (6000 rows). The spectral
    # tolerance for 6000 rows is about (1 + (sqrt(60) + 3.9) / sqrt(6000))^2 - 1 = 0.31, so a covariance
    # with one eigenvalue 2 (deviation 1) is flagged, and the identity is not (probability 1e-3).
    d, k = 60, 3
    truth = nr.random_network(d, k, k, rng=0)
    cov = np.eye(d)
    cov[0, 0] = 2.0
    for law, bad in ((StandardGaussian(d), False), (Gaussian(cov), True)):
        X, Y = nr.sample(truth, law, 60_000, rng=1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = approximate_hidden_weights(X, Y, k, rng=0)
        dev = res.diagnostics["input_deviation"]
        flagged = any(issubclass(w.category, nr.errors.AssumptionWarning) for w in caught)
        assert flagged == bad
        assert (dev["covariance"] > dev["covariance_tolerance"]) == bad
        # the covariance tolerance is that of the strided rows (every 10th row of each chunk: 6000 rows
        # plus at most one per chunk), the mean's that of every row
        n_xx = 60_000 // 10
        eps = (math.sqrt(d) + math.sqrt(2 * math.log(4 / 1e-3))) / math.sqrt(n_xx - 1)
        assert dev["covariance_tolerance"] == pytest.approx((n_xx - 1) / n_xx * (1 + eps) ** 2 - 1, rel=2e-3)
        assert dev["mean_tolerance"] == pytest.approx(math.sqrt(2 * math.log(4 * d / 1e-3) / 60_000), rel=1e-12)


def test_whitening_uses_the_gram_of_every_row():
    # whiten=True needs Sigma^{-1/2} itself, so no stride: the tolerance is that of all 60000 rows
    d, k = 60, 3
    truth = nr.random_network(d, k, k, rng=0)
    X, Y = nr.sample(truth, StandardGaussian(d), 60_000, rng=1)
    res = approximate_hidden_weights(X, Y, k, whiten=True, rng=0)
    n = 60_000
    eps = (math.sqrt(d) + math.sqrt(2 * math.log(4 / 1e-3))) / math.sqrt(n - 1)
    assert res.diagnostics["input_deviation"]["covariance_tolerance"] == pytest.approx(
        (n - 1) / n * (1 + eps) ** 2 - 1, rel=1e-12)


def test_stream_blocks_are_bounded_and_the_rows_do_not_depend_on_the_chunks():
    assert block_rows(10, 1) == BLOCK_ROWS                      # small d: the 65536-row blocks
    rows = block_rows(1000, 50)
    assert rows % 2 == 0 and rows * 1050 <= BLOCK_VALUES and rows >= 1024
    assert block_rows(10**6, 1) == 1024
    # d = 300: blocks of 27776 rows; antithetic pairs stay in a block, every chunk size gives the same rows
    truth = nr.random_network(300, 2, 1, rng=0)
    n = 2 * block_rows(300, 1) + 10
    X, Y = nr.sample(truth, StandardGaussian(300), n, rng=5, antithetic=True)
    assert np.array_equal(X[0::2], -X[1::2])
    for chunk in (998, block_rows(300, 1), 100_000):
        stream = nr.sample_stream(truth, StandardGaussian(300), n, chunk_size=chunk, rng=5, antithetic=True)
        assert np.array_equal(np.concatenate([c[0] for c in stream]), X)
    default = nr.sample_stream(truth, StandardGaussian(300), n, rng=5)
    assert default.chunk_size == block_rows(300, 1)


def test_exact_fit_on_a_stream_reads_it_three_times_and_certifies_matrix_free():
    # d = 300, k = m = 9: P = 300 * 9 + 81 + 9 = 2790 parameters, P^3 = 2.2e10 > 2e10 flops: the
    # max-unit-error certificate's Gauss-Newton matrix is not formed; its matrix-free form runs on 6200 rows
    # chosen at random from this generic stream (a third pass). What is read in full besides: pass 1 and
    # pass 2 of the tensor step; the exact step reads only the first rows.
    d, k = 300, 9
    truth = nr.random_network(d, k, k, rng=0)
    stream = _CountingStream(nr.sample_stream(truth, StandardGaussian(d), 40_000, rng=1))
    learner = nr.learners.ExactReLULearner(k, random_state=0).fit(stream)
    assert learner.diagnostics_["certified"]
    assert parameter_error(learner.network_, truth)["max_unit_error"] < 1e-10
    record = learner.diagnostics_["certificates"]["max_unit_error"]
    assert record["passed"] is True and record["bound"] < 1e-10
    assert stream.full_passes == 3


def test_exact_fit_on_a_stream_equals_the_fit_in_memory():
    # the pass-2 projection runs in the pass's workers for streams and arrays alike; the same rows give
    # the same estimate to round-off
    d, k = 40, 4
    truth = nr.random_network(d, k, k, rng=2)
    stream = nr.sample_stream(truth, StandardGaussian(d), 30_000, chunk_size=4096, rng=3)
    X, Y = stream.to_arrays()
    a = nr.learners.ExactReLULearner(k, random_state=0).fit(stream)
    b = nr.learners.ExactReLULearner(k, random_state=0).fit(X, Y)
    assert parameter_error(a.network_, truth)["max_unit_error"] < 1e-10
    assert parameter_error(a.network_, b.network_)["max_unit_error"] < 1e-12


def test_unit_systems_by_normal_equations_are_exact_and_fall_back_when_ill_conditioned():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((400, 200))
    z = rng.standard_normal(200)
    # Gaussian 2d x d rows: condition number about 6, normal equations lose a factor ~36 of eps at most
    assert np.linalg.norm(_solve_well_posed(A, A @ z) - z) <= 1e-13 * np.linalg.norm(z)
    # two nearly equal columns (condition ~1e9): the QR-based solver answers; the system stays consistent
    B = A.copy()
    B[:, 1] = B[:, 0] + 1e-9 * B[:, 2]
    b = B @ z
    sol = _solve_well_posed(B, b)
    assert np.linalg.norm(B @ sol - b) <= 1e-12 * np.linalg.norm(b)


def test_algorithm5_units_in_threads_give_the_same_bits(monkeypatch):
    # Algorithm 5's units run side by side when the refinement sample is large; each unit reads only X̄
    # and the row basis, so the result must not depend on the number of workers
    import nnrecover.learners.bakshi2019.exact as exact

    d, k = 30, 5
    truth = nr.random_network(d, k, k, rng=4)
    X, Y = nr.sample(truth, StandardGaussian(d), 3000, rng=5)
    V0 = truth.hidden_weights + 0.02 * np.random.default_rng(6).standard_normal((k, d)) / np.sqrt(d)
    results = []
    for threshold in (10**18, 1):                                   # units in turn, then side by side
        monkeypatch.setattr(exact, "_PARALLEL_UNITS_MIN", threshold)
        results.append(exact.algorithm5(V0, X, Y))
    monkeypatch.setattr(exact, "effective_n_jobs", lambda n_jobs=None: 3)   # more workers than cores
    results.append(exact.algorithm5(V0, X, Y))
    assert all(r.certified for r in results)
    assert parameter_error(results[0].network, truth)["max_unit_error"] < 1e-10
    for r in results[1:]:
        assert np.array_equal(r.hidden_weights, results[0].hidden_weights)
        assert np.array_equal(r.output_weights, results[0].output_weights)


@pytest.mark.parametrize("antithetic, noise", [(False, 0.0), (True, 0.3)])
def test_stream_tail_has_the_same_rows_without_generating_the_skipped_blocks(antithetic, noise, monkeypatch):
    truth = nr.random_network(300, 3, 2, rng=0)
    stream = nr.sample_stream(truth, StandardGaussian(300), 70_000, chunk_size=5000, rng=2, noise=noise,
                              antithetic=antithetic)
    X, Y = stream.to_arrays()
    size = stream.block_rows
    for start in (0, 2, size, size + 2224, 69_998):
        tail = stream.rows_from(start)
        assert tail.n_samples == 70_000 - start
        # the whole stream's chunk grid: the first chunk ends at a multiple of 5000 rows
        sizes = [c[0].shape[0] for c in tail]
        assert len(sizes) == len(tail) and sizes[0] == 5000 - start % 5000
        assert all(n == 5000 for n in sizes[1:-1])
        assert np.array_equal(np.concatenate([c[0] for c in tail]), X[start:])
        assert np.array_equal(np.concatenate([c[1] for c in tail]), Y[start:])
    # blocks before the one holding row `start` are not drawn
    drawn = []
    law = stream.distribution
    original = type(law).sample
    monkeypatch.setattr(type(law), "sample", lambda self, n, gen, **kw: drawn.append(n) or original(self, n, gen, **kw))
    list(stream.rows_from(2 * size + 2))
    assert sum(drawn) == 70_000 - 2 * size
    with pytest.raises(nr.errors.InputError, match="start"):
        stream.rows_from(70_001)
    if antithetic:
        with pytest.raises(nr.errors.InputError, match="pairs"):
            stream.rows_from(3)


def test_projected_control_variate_identity():
    # pass 2 in the "linear" span uses B^T Qout = P diag(s_k) for the top-k singular vectors of B itself
    # (B = U S V^T: B^T U_k = V_k S_k), so the residual's projection needs x P only; any m x d matrix,
    # also one with a noise tail beyond rank k
    from nnrecover.learners.bakshi2019.tensor_step import _top_right

    rng = np.random.default_rng(7)
    B = rng.standard_normal((9, 4)) @ rng.standard_normal((4, 60)) + 1e-3 * rng.standard_normal((9, 60))
    Qout, s, P = _top_right(B, 4)
    assert np.allclose(B.T @ Qout, P * s[:4], rtol=0, atol=1e-12 * s[0])
    X = rng.standard_normal((50, 60))
    assert np.allclose((X @ B.T) @ Qout, (X @ P) * s[:4], rtol=0, atol=1e-11 * s[0])

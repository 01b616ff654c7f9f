"""BLAS threads and chunk workers (nnrecover._threads, moments.engine.feed_statistics).

What is checked:

* ``blas_threads`` limits every loaded BLAS/OpenMP library and restores the caller's setting on exit,
  after an exception too, nested and as a decorator;
* ``BaseLearner.fit`` / ``fit_population`` run with one BLAS thread and give the caller's setting back
  (normal return and exception);
* ``accumulate`` with worker threads is bit-identical to the sequential pass (``Statistic.update``
  chunk by chunk) for several statistics and chunkings (arrays, uneven lists, a one-pass generator
  that refills one buffer), and a ``parallel_chunks`` statistic gives the same bits for every
  ``n_jobs``;
* a whole fit with one worker (``threadpool_limits(1)``, hence ``n_jobs=None`` -> 1) equals the default.

The caller's setting is made explicit with ``threadpool_limits(2)`` (``make test`` runs with
``OMP_NUM_THREADS=1``), so the tests do not depend on the machine's default.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import nnrecover as nr
from nnrecover._threads import blas_threads, caller_blas_threads, effective_n_jobs
from nnrecover.errors import InputError
from nnrecover.learners.base import BaseLearner
from nnrecover.moments import Statistic
from nnrecover.data import accumulate
from nnrecover.data import as_data_source, feed_statistics
from nnrecover.hermite.statistics import HermiteTensorStatistic
from nnrecover.moments.statistics import (CovarianceStatistic, MeanStatistic, SecondMoment,
                                          ThirdMomentContraction, WeightedSecondMoment)


def _threads() -> list[int]:
    import scipy.linalg  # noqa: F401  (its OpenBLAS is loaded by nnrecover anyway)

    return [lib["num_threads"] for lib in threadpool_info()]


# ------------------------------------------------------------------------------------ blas_threads
def test_blas_threads_limits_and_restores():
    with threadpool_limits(2):
        assert set(_threads()) == {2}
        with blas_threads(1):
            assert set(_threads()) == {1}
            assert caller_blas_threads() == 2
            with blas_threads(1):  # nested at the same limit
                assert set(_threads()) == {1}
            assert set(_threads()) == {1}
        assert set(_threads()) == {2}


def test_blas_threads_restores_after_exception_and_as_decorator():
    @blas_threads(1)
    def inside(fail: bool) -> list[int]:
        if fail:
            raise RuntimeError("boom")
        return _threads()

    with threadpool_limits(2):
        assert set(inside(False)) == {1}
        assert set(_threads()) == {2}
        with pytest.raises(RuntimeError, match="boom"):
            inside(True)
        assert set(_threads()) == {2}


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1", None])
def test_blas_threads_refuses_bad_limit(bad):
    with pytest.raises(InputError, match="limit"):
        blas_threads(bad)


def test_effective_n_jobs():
    cpus = os.cpu_count() or 1
    assert effective_n_jobs(3) == 3
    assert effective_n_jobs(-1) == cpus
    assert effective_n_jobs(-cpus - 5) == 1
    with threadpool_limits(1):
        assert effective_n_jobs(None) == 1  # follows the caller's BLAS threads
    with threadpool_limits(2):
        assert effective_n_jobs(None) == min(2, cpus)
        with blas_threads(1):  # inside the library: still the caller's count
            assert effective_n_jobs(None) == min(2, cpus)
    for bad in (0, 1.0, False, "2"):
        with pytest.raises(InputError, match="n_jobs"):
            effective_n_jobs(bad)
    with pytest.raises(InputError, match="n_jobs"):
        accumulate(MeanStatistic(), np.ones((3, 2)), n_jobs=0)


# ------------------------------------------------------------------------------------ fit
class _Probe(BaseLearner):
    """A learner whose algorithm records the BLAS threads it ran with (and can fail)."""

    _supports_population = True

    def __init__(self, n_hidden: int = 1, *, fail: bool = False, random_state=None):
        self.n_hidden = n_hidden
        self.fail = fail
        self.random_state = random_state

    def _algorithm(self, d: int) -> nr.TwoLayerNetwork:
        self.seen_threads_ = _threads()
        if self.fail:
            raise RuntimeError("algorithm failed")
        return nr.TwoLayerNetwork(np.ones((1, d)), np.zeros(1), np.ones((1, 1)), np.zeros(1))

    def _fit(self, source, rng, diagnostics):
        return self._algorithm(source.n_inputs)

    def _fit_population(self, truth, rng, diagnostics, **kwargs):
        return self._algorithm(truth.n_inputs)


@pytest.mark.parametrize("population", [False, True])
def test_fit_uses_one_blas_thread_and_restores(population):
    X = np.random.default_rng(0).standard_normal((50, 3))
    y = X[:, 0]
    truth = nr.random_network(3, 1, rng=0)
    run = (lambda est: est.fit_population(truth)) if population else (lambda est: est.fit(X, y))
    with threadpool_limits(2):
        est = run(_Probe())
        assert set(est.seen_threads_) == {1}
        assert set(_threads()) == {2}
        failing = _Probe(fail=True)
        with pytest.raises(RuntimeError, match="algorithm failed"):
            run(failing)
        assert set(failing.seen_threads_) == {1}
        assert set(_threads()) == {2}  # restored after the exception too


def test_real_fit_restores_and_one_worker_equals_default():
    """A whole PureNeuronLearner fit: the caller's setting survives, and one worker gives the same bits."""
    rng = np.random.default_rng(1)
    net = nr.random_network(6, 3, 3, rng=rng)
    X, Y = nr.sample(net, nr.distributions.StandardGaussian(6), 20_000, rng=rng, antithetic=True)
    chunks = [(X[i:i + 1500], Y[i:i + 1500]) for i in range(0, len(X), 1500)]
    with threadpool_limits(2):
        default = nr.learners.PureNeuronLearner(3, refine=False, random_state=0).fit(chunks)
        assert set(_threads()) == {2}
    with threadpool_limits(1):
        serial = nr.learners.PureNeuronLearner(3, refine=False, random_state=0).fit(chunks)
        assert set(_threads()) == {1}
    for name in ("hidden_weights", "hidden_bias", "output_weights", "output_bias"):
        np.testing.assert_array_equal(getattr(default.network_, name), getattr(serial.network_, name))


# ------------------------------------------------------------------------------------ accumulate
def _statistics(d: int) -> list[Statistic]:
    G = np.random.default_rng(5).standard_normal((2, d))
    return [MeanStatistic(), SecondMoment(), CovarianceStatistic(), WeightedSecondMoment(),
            ThirdMomentContraction(G), HermiteTensorStatistic(3)]


def _state(s: Statistic):
    out = s.finalize()
    if hasattr(out, "__dataclass_fields__"):
        return [np.asarray(getattr(out, f)) for f in out.__dataclass_fields__ if getattr(out, f) is not None]
    return [np.asarray(out)]


def _assert_same_bits(a: Statistic, b: Statistic) -> None:
    assert a.n == b.n
    for u, v in zip(_state(a), _state(b)):
        assert u.shape == v.shape
        # bit for bit (view as integers: also tells -0.0 from 0.0 and compares NaN payloads)
        np.testing.assert_array_equal(u.view(np.int64), v.view(np.int64))


def _data(seed: int = 0, n: int = 5003, d: int = 5, p: int = 2):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    Y = np.column_stack([np.tanh(X @ rng.standard_normal(d)) for _ in range(p)]) + 1.0
    return X, Y


@pytest.mark.parametrize("chunking", ["rows-97", "rows-1000", "uneven-list", "refilled-generator"])
@pytest.mark.parametrize("n_jobs", [2, 3])
def test_parallel_accumulate_equals_sequential_bits(chunking, n_jobs):
    X, Y = _data()
    if chunking.startswith("rows"):
        size = int(chunking.split("-")[1])
        bounds = list(range(0, len(X), size)) + [len(X)]
    else:
        bounds = [0, 1, 400, 401, 2000, 3900, 5003]
    pieces = [(X[a:b], Y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]

    reference = _statistics(X.shape[1])
    for Xc, Yc in pieces:
        for s in reference:
            s.update(Xc, Yc)

    if chunking.startswith("rows"):
        data = (X, Y)
        kwargs = {"chunk_size": int(chunking.split("-")[1])}
    elif chunking == "uneven-list":
        data, kwargs = pieces, {}
    else:
        def refilled():  # one buffer refilled for every chunk: the pass must copy before reading ahead
            buf_x, buf_y = np.empty_like(X), np.empty_like(Y)
            for Xc, Yc in pieces:
                m = len(Xc)
                buf_x[:m], buf_y[:m] = Xc, Yc
                yield buf_x[:m], buf_y[:m]
                buf_x[:] = np.nan  # what a careless producer leaves behind
        data, kwargs = refilled(), {}
    parallel = accumulate(_statistics(X.shape[1]), data, n_jobs=n_jobs, **kwargs)
    for a, b in zip(reference, parallel):
        _assert_same_bits(a, b)


class _ChunkGram(Statistic):
    """``sum x x^T`` by BLAS ``dsyrk`` with ``beta = 1`` (adds inside the BLAS call): chunk-local."""

    parallel_chunks = True

    def _reset(self) -> None:
        self.g = None

    def _update(self, X, Y) -> None:
        from scipy.linalg import blas

        if self.g is None:
            self.g = np.zeros((X.shape[1], X.shape[1]), order="F")
        self.g = blas.dsyrk(1.0, X.T, beta=1.0, c=self.g, trans=0, lower=0, overwrite_c=1)

    def _merge(self, other) -> None:
        if self.g is None:
            self.g = other.g.copy(order="F")
        else:
            self.g += other.g

    def finalize(self):
        return np.triu(self.g) / self.n


@pytest.mark.parametrize("chunk_size", [64, 333])
def test_parallel_chunks_statistic_same_bits_for_every_n_jobs(chunk_size):
    X, _ = _data(seed=2, n=4000, d=40)
    results = [accumulate(_ChunkGram(), X, chunk_size=chunk_size, n_jobs=j) for j in (1, 2, 4)]
    # the definition: fresh partial per chunk, merged in chunk order
    reference = _ChunkGram()
    for a in range(0, len(X), chunk_size):
        reference.merge(_ChunkGram().update(X[a:a + chunk_size]))
    for r in results:
        _assert_same_bits(reference, r)
    # and the estimate itself: (1/n) X^T X to round-off (relative error ~ n eps, n = 4000)
    np.testing.assert_allclose(results[0].finalize(), np.triu(X.T @ X) / len(X), rtol=0, atol=1e-12)


def test_pass_restores_threads_and_reports_first_error_in_chunk_order():
    X, Y = _data(n=3000)
    bad = X.copy()
    bad[2500, 0] = np.nan
    with threadpool_limits(2):
        accumulate(SecondMoment(), (X, Y), chunk_size=500, n_jobs=2)
        assert set(_threads()) == {2}
        with pytest.raises(InputError, match="rows 2500:3000"):
            accumulate(SecondMoment(), (bad, Y), chunk_size=500, n_jobs=2)
        assert set(_threads()) == {2}
        # a statistic failing on the first chunk wins over a bad later chunk, as in a sequential pass
        with pytest.raises(InputError, match="needs targets"):
            accumulate(WeightedSecondMoment(), [(X[:500], None), (bad[2000:], None)], n_jobs=2)
        assert set(_threads()) == {2}


def test_one_pass_iterator_with_workers():
    X, Y = _data(n=2000)
    it = ((X[a:a + 300], Y[a:a + 300]) for a in range(0, 2000, 300))
    source = as_data_source(it)
    stats = feed_statistics([SecondMoment()], source, n_jobs=2)
    ref = SecondMoment().update(X, Y)
    np.testing.assert_allclose(stats[0].finalize().xx, ref.finalize().xx, rtol=1e-13, atol=1e-13)
    with pytest.raises(InputError, match="already consumed"):
        feed_statistics([SecondMoment()], source, n_jobs=2)


def test_stream_single_statistic_read_ahead_same_bits():
    """A SampleStream is generated on the calling thread while one worker adds the previous chunk."""
    net = nr.random_network(7, 3, 2, rng=3)
    stream = nr.sample_stream(net, nr.distributions.StandardGaussian(7), 9000, rng=4, chunk_size=1000)
    one, two = (accumulate(HermiteTensorStatistic(3), stream, n_jobs=j) for j in (1, 2))
    reference = HermiteTensorStatistic(3)
    for Xc, Yc in stream:
        reference.update(Xc, Yc)
    _assert_same_bits(reference, one)
    _assert_same_bits(reference, two)

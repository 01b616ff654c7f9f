"""A fit checks every entry of in-memory arrays once (magnitude and finiteness) and its passes then skip
the per-chunk finite check on views of those arrays, and only on them."""

from __future__ import annotations

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.data import as_data_source, known_finite
from nnrecover.distributions import StandardGaussian
from nnrecover.moments import MeanStatistic
from nnrecover.data import accumulate


def test_chunks_of_known_finite_arrays_skip_the_check_and_others_do_not():
    X = np.random.default_rng(0).standard_normal((1000, 3))
    Y = X[:, :1].copy()
    bad = X.copy()
    bad[500, 1] = np.nan
    with known_finite(X, Y):
        # a view into a known array is passed through (the check would have been the same)
        assert accumulate(MeanStatistic(), (X[100:], Y[100:]), chunk_size=128).n == 900
        # another buffer is checked: NaN names the chunk
        with pytest.raises(nr.errors.InputError, match="NaN"):
            accumulate(MeanStatistic(), (bad, Y), chunk_size=128)
    # outside the block the known arrays are checked again
    X[3, 0] = np.inf
    with pytest.raises(nr.errors.InputError):
        list(as_data_source(X, Y).chunks(chunk_size=128))


def test_a_fit_refuses_non_finite_arrays_and_is_unchanged_on_finite_ones():
    truth = nr.random_network(6, 2, 2, rng=0)
    X, Y = nr.sample(truth, StandardGaussian(6), 20_000, rng=1)
    a = nr.learners.ExactReLULearner(2, random_state=0).fit(X, Y)
    # the same data as a list of chunks (no magnitude check, every chunk checked) gives the same network
    b = nr.learners.ExactReLULearner(2, random_state=0).fit([(X, Y)])
    assert nr.metrics.parameter_error(a.network_, truth)["max_unit_error"] < 1e-10
    assert nr.metrics.parameter_error(a.network_, b.network_)["max_unit_error"] < 1e-12
    X_bad = X.copy()
    X_bad[15_000, 4] = np.nan
    with pytest.raises(nr.errors.InputError, match="NaN"):
        nr.learners.ExactReLULearner(2, random_state=0).fit(X_bad, Y)
    Y_bad = Y.copy()
    Y_bad[7, 0] = np.inf
    with pytest.raises(nr.errors.InputError):
        nr.learners.ExactReLULearner(2, random_state=0).fit(X, Y_bad)


def test_a_tuple_of_two_arrays_is_checked_as_fit_X_Y():
    truth = nr.random_network(6, 2, 2, rng=0)
    X, Y = nr.sample(truth, StandardGaussian(6), 20_000, rng=1)
    a = nr.learners.ExactReLULearner(2, random_state=0).fit(X, Y)
    b = nr.learners.ExactReLULearner(2, random_state=0).fit((X, Y))
    assert nr.metrics.parameter_error(a.network_, b.network_)["max_unit_error"] == 0.0
    # the magnitude check of fit(X, Y) applies to the tuple too: an entry beyond 2^64 is refused by name
    X_big = X.copy()
    X_big[9, 2] = 1e30
    with pytest.raises(nr.errors.InputError, match=r"largest \|X\| entry"):
        nr.learners.ExactReLULearner(2, random_state=0).fit((X_big, Y))
    # and so does scikit-learn's row-count check
    with pytest.raises(nr.errors.InputError):
        nr.learners.ExactReLULearner(2, random_state=0).fit((X, Y[:-1]))


def test_all_finite_and_check_finite():
    from nnrecover._validation import all_finite, check_finite

    big = np.full(4, 1e308)                   # finite entries whose sum overflows: decided value by value
    assert all_finite(big) and all_finite(np.empty((0, 3))) and all_finite(np.arange(5))
    for bad in (np.nan, np.inf, -np.inf):
        a = np.ones((6, 2))
        a[4, 1] = bad
        assert not all_finite(a)
    a = np.ones((6, 2))
    a[[1, 3], 0] = np.nan
    with pytest.raises(nr.errors.InputError, match="A contains 2 NaN or infinite"):
        check_finite(a, "A")


class _Chunks:
    """A re-iterable of fixed chunks that may declare them checked (``finite_chunks``)."""

    def __init__(self, chunks, finite: bool):
        self.items, self.finite_chunks = chunks, finite

    def __iter__(self):
        return iter(self.items)


def test_sources_that_checked_their_chunks_are_not_read_again_and_others_are():
    from nnrecover.data import finite_chunks

    X = np.random.default_rng(1).standard_normal((300, 4))
    bad = X.copy()
    bad[7, 2] = np.nan
    stream = nr.sample_stream(nr.random_network(4, 2, 1, rng=0), StandardGaussian(4), 1000, rng=1)
    assert finite_chunks(as_data_source(stream))
    assert not finite_chunks(as_data_source([(X, X[:, 0])]))
    # undeclared: every value is checked and NaN named
    with pytest.raises(nr.errors.InputError, match="NaN"):
        accumulate(MeanStatistic(), _Chunks([(X, X[:, 0]), (bad, bad[:, 0])], finite=False))
    # a declared source is taken at its word for float64 chunks, but other dtypes are still converted
    # and checked, and shapes always are
    assert accumulate(MeanStatistic(), _Chunks([(X, X[:, 0])], finite=True)).n == 300
    with pytest.raises(nr.errors.InputError, match="NaN"):
        accumulate(MeanStatistic(), _Chunks([(bad.astype(np.float32), X[:, 0])], finite=True))
    with pytest.raises(nr.errors.InputError):
        accumulate(MeanStatistic(), _Chunks([(X[:, 0], X[:, 0])], finite=True))


def test_a_stream_whose_teacher_overflows_is_refused():
    # the stream checks its own blocks (its chunks are then not read again): outputs of 1e308 times a
    # sum of two ReLUs overflow to inf on a good share of N(0, I) rows
    net = nr.TwoLayerNetwork(np.eye(2), np.zeros(2), np.array([[1e308, 1e308]]), np.zeros(1))
    stream = nr.sample_stream(net, StandardGaussian(2), 1000, rng=2)
    with pytest.raises(nr.errors.InputError, match="overflow float64: Y has non-finite"):
        accumulate(MeanStatistic(), stream)

"""A fit checks every entry of in-memory arrays once (magnitude and finiteness) and its passes then skip
the per-chunk finite check on views of those arrays, and only on them."""

from __future__ import annotations

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.data import as_data_source, known_finite
from nnrecover.distributions import StandardGaussian
from nnrecover.moments import MeanStatistic, accumulate


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

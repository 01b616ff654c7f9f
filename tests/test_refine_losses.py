"""The all-rows losses of the refinement's span path: several networks from one read of the rows and one
product ``X [W_1; W_2]^T``, on rows the data source already validated."""

from __future__ import annotations

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.data import as_data_source
from nnrecover.refine import _squared_residual_sums, _TrainingRows, mean_squared_loss


@pytest.mark.parametrize("n_outputs", [1, 3])
def test_squared_residual_sums_are_the_mean_squared_losses_times_the_rows(n_outputs, rng):
    # two networks of different widths and activations on the same rows; each sum has 500 n_outputs
    # terms of size ~1-10: the two orders of summation agree to ~1e3 eps relative, far below 1e-12
    a = nr.random_network(6, 3, n_outputs=n_outputs, rng=1, bias_range=(-0.5, 0.5))
    b = nr.random_network(6, 5, n_outputs=n_outputs, rng=2, activation="tanh")
    X = rng.standard_normal((500, 6))
    Y = rng.standard_normal((500, n_outputs))
    got = _squared_residual_sums([a, b, a], X, Y)
    for value, net in zip(got, (a, b, a)):
        assert value == pytest.approx(500 * mean_squared_loss(net, X, Y), rel=1e-12)
    # a network that generated the targets has residual exactly zero on them
    assert _squared_residual_sums([a], X, a.predict(X).reshape(500, n_outputs))[0] == 0.0


def test_chunked_losses_over_source_rows_equal_those_of_the_rows_in_memory(rng):
    # 20000 rows read in chunks of 8192 by take_rows: the same terms summed in another order, to ~1e4 eps
    truth = nr.random_network(5, 3, n_outputs=2, rng=3)
    X = rng.standard_normal((30_000, 5))
    Y = truth.predict(X) + 0.1 * rng.standard_normal((30_000, 2))
    rows = np.sort(rng.choice(30_000, 20_000, replace=False))
    start = nr.random_network(5, 3, n_outputs=2, rng=4)
    streamed = _TrainingRows(source=as_data_source((X, Y)), rows=rows, network=start)
    in_memory = _TrainingRows(X[rows], Y[rows])
    np.testing.assert_allclose(streamed.losses([start, truth]), in_memory.losses([start, truth]), rtol=1e-12)
    assert streamed.mean_square_y() == pytest.approx(in_memory.mean_square_y(), rel=1e-12)

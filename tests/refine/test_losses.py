"""The all-rows losses of the refinement's span path over rows read from the data source on demand (chunks
of ``take_rows``) equal those of the same rows held in memory."""

from __future__ import annotations

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.data import as_data_source
from nnrecover.refine.rows import _TrainingRows


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

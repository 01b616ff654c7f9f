"""Data-source handling for the moment engine (placeholder: in-memory arrays and iterables).

The full engine (dask arrays via map-over-blocks + tree-reduce, memory-mapped .npy, progress bars) is
built on top of this interface.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from ..errors import InputError

DEFAULT_CHUNK_ROWS = 1 << 16


def iterate_chunks(data: Any, *, chunk_size=None, progress=None, statistics=None) -> Iterator:
    chunk = chunk_size or DEFAULT_CHUNK_ROWS
    if isinstance(data, tuple) and len(data) == 2 and hasattr(data[0], "shape"):
        X, Y = data
        n = X.shape[0]
        if Y is not None and Y.shape[0] != n:
            raise InputError(f"X and Y have different numbers of samples ({n} vs {Y.shape[0]}).")
        for start in range(0, n, chunk):
            yield np.asarray(X[start:start + chunk]), (None if Y is None else np.asarray(Y[start:start + chunk]))
        return
    for item in data:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise InputError("a stream must yield (X, Y) pairs of arrays.")
        yield item

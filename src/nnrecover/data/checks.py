"""Checks of whole array arguments before a pass: scikit-learn's wording, and the magnitude range.

A learner's ``fit`` calls :func:`coerce_array` on each array argument (cheap: shapes, dtypes, sparse
and pandas inputs, never reading a memory map or a dask array) and :func:`check_magnitude` on numpy
arrays (one read, split between worker threads), which also tells the passes that every entry is
finite; :func:`nnrecover.check` applies the same two checks.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .._threads import effective_n_jobs
from ..errors import InputError

__all__ = ["MAGNITUDE_RANGE", "check_magnitude", "magnitude_refusal", "coerce_array", "is_dask_array", "is_single_array"]


def is_dask_array(A: Any) -> bool:
    return type(A).__module__.split(".")[0] == "dask"


def is_single_array(X: Any) -> bool:
    """True for one array argument (as opposed to a tuple/iterable of chunks, a path, a DataSource)."""
    # deferred: scipy.sparse costs a tenth of a second to import
    from scipy import sparse

    if isinstance(X, (np.ndarray, list)) and not (isinstance(X, list) and X and isinstance(X[0], tuple)):
        return True
    return sparse.issparse(X) or is_dask_array(X) or type(X).__module__.split(".")[0] == "pandas" or (
        hasattr(X, "__array__") and not hasattr(X, "__iter__"))


#: Range of max |entry| of X and Y that every learner computes with. Inside [2^-64, 2^64] a product of
#: up to 8 input entries and one target (the highest-order moment any learner forms, e.g. E[y He_k(w^T x)])
#: stays a normal float64 (|t| <= 2^576 < 2^1024, |t| >= 2^-576 > 2^-1022), summed over up to 2^40 rows:
#: no overflow to inf and no underflow to zero, which would turn into NaN moments or singular matrices.
MAGNITUDE_RANGE = (2.0 ** -64, 2.0 ** 64)


def _max_abs(A: np.ndarray, rows: int | None = None) -> float:
    """max |A| read ``rows`` rows at a time (a memory map is never loaded whole); NaN if A has NaN.

    The default block is about 1 MiB, so that its second reduction reads it from the cache. Large
    arrays are split between the fit's worker threads (:func:`nnrecover._threads.effective_n_jobs`;
    numpy releases the GIL in reductions); a maximum is the same for any split.
    """
    if rows is None:
        rows = max(1, (1 << 20) // (8 * max(1, int(np.prod(A.shape[1:], dtype=np.int64)))))

    def span(first: int, last: int) -> float:
        out = 0.0
        for start in range(first, last, rows):
            block = np.asarray(A[start:min(start + rows, last)], dtype=np.float64)
            if block.size:
                # max and -min: two reductions that read the block, where abs would also write a copy
                hi, lo = float(np.max(block)), float(np.min(block))
                if not (hi <= np.inf and lo >= -np.inf):  # NaN: the finiteness check names it, later
                    return float("nan")
                out = max(out, hi, -lo)
        return out

    n = A.shape[0]
    workers = min(effective_n_jobs(None), max(1, A.size // _PARALLEL_MAX_ABS_MIN))
    if workers <= 1:
        return span(0, n)
    bounds = np.linspace(0, n, workers + 1).astype(int)
    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(span, bounds[:-1], bounds[1:]))
    return float("nan") if any(np.isnan(parts)) else max(parts)


#: entries per worker below which the magnitude check runs in the calling thread (thread start-up costs
#: more than it saves on a smaller array)
_PARALLEL_MAX_ABS_MIN = 1 << 22


def check_magnitude(A: Any, name: str, learner: str) -> bool:
    """InputError when the entries of the numpy array ``A`` lie outside :data:`MAGNITUDE_RANGE`.

    An all-zero target is left to the learner; an all-zero X carries no information and is refused.
    Other array types (dask, lazily read array-likes) are not read here. Returns whether every entry
    of ``A`` was read and found finite.
    """
    if not isinstance(A, np.ndarray) or A.size == 0 or A.dtype == object or A.ndim == 0:
        return False
    m = _max_abs(A)
    if not np.isfinite(m):
        return False
    if m == 0 and name == "Y":
        return True
    if m == 0:
        raise InputError(f"X is all zeros; {learner} cannot learn anything from it.")
    why = magnitude_refusal(m, name, learner)
    if why:
        raise InputError(why)
    return True


def magnitude_refusal(m: float, name: str, who: str) -> str | None:
    """Why a largest entry ``m = max |A|`` of the array ``name`` is outside :data:`MAGNITUDE_RANGE`, or None
    (``m = 0`` is left to the caller: an all-zero target is the learner's business, an all-zero X is refused by
    :func:`check_magnitude`). ``who`` names the computation, e.g. a learner or ``check``."""
    lo, hi = MAGNITUDE_RANGE
    if m == 0 or lo <= m <= hi:
        return None
    return (f"the largest |{name}| entry is {m:.3g}, outside the range [2^-64, 2^64] = [{lo:.3g}, {hi:.3g}] in which "
            f"{who}'s moments and products stay finite and nonzero in float64; rescale {name} (e.g. "
            f"divide by its standard deviation; the learners built on Gaussian moments assume x ~ N(0, I)), "
            "or use gradient-descent, which rescales exactly by itself.")


def coerce_array(A: Any, name: str, *, is_X: bool) -> Any:
    """Cheap checks of one array argument with scikit-learn's wording; never reads a memmap/dask array."""
    # deferred: scipy.sparse costs a tenth of a second to import
    from scipy import sparse

    if sparse.issparse(A):
        raise InputError(f"Sparse data was passed for {name}, but dense data is required; nnrecover learners "
                         f"do not support sparse input: use {name}.toarray().")
    if is_dask_array(A):
        return A
    if not isinstance(A, np.ndarray) or A.dtype == object:
        if isinstance(A, (str, bytes)) or (hasattr(A, "shape") and not isinstance(A, np.ndarray)
                                           and type(A).__module__.split(".")[0] != "pandas"):
            return A  # paths and lazily read array-likes (h5py, zarr): checked while reading
        try:
            arr = np.asarray(A)
            if arr.dtype == object:
                arr = arr.astype(np.float64)
        except TypeError as exc:
            if "NAType" in str(exc):  # a pandas nullable column with missing values: a data problem
                raise InputError(f"{name} contains missing values (pandas NA); remove or impute those rows "
                                 "first.") from None
            raise TypeError(f"{name} could not be converted to float64: {exc}") from exc
        except ValueError as exc:
            raise InputError(f"{name} could not be converted to a numeric array: {exc}") from exc
        A = arr
    if np.iscomplexobj(A):
        raise InputError(f"Complex data not supported: {name} must be real, got dtype {A.dtype}.")
    if A.ndim <= 1 and A.size == 0:  # fit([]): no samples, whatever the intended shape
        raise InputError(f"{name} is empty (shape {A.shape}); fit needs at least one sample, as an array of shape "
                         "(n_samples, n_features).")
    if is_X:
        if A.ndim == 1:
            raise InputError(f"Expected 2D array, got 1D array instead: {name} must have shape (n_samples, "
                             "n_features). Reshape your data either using X.reshape(-1, 1) if your data has a "
                             "single feature or X.reshape(1, -1) if it contains a single sample.")
        if A.ndim == 2 and A.shape[1] == 0:
            raise InputError(f"Found array with 0 feature(s) (shape={A.shape}) while a minimum of 1 is required.")
    if A.ndim >= 1 and A.shape[0] == 0:
        raise InputError(f"Found array with 0 sample(s) (shape={A.shape}) while a minimum of 1 is required.")
    return A

"""Data sources: arrays, memory maps, chunk streams and dask arrays behind one interface, read chunk by chunk."""

from __future__ import annotations

import abc
import contextvars
import itertools
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

try:
    from numpy.lib.array_utils import byte_bounds as _numpy_byte_bounds
except ImportError:  # numpy < 2
    _numpy_byte_bounds = np.byte_bounds

from .._validation import as_2d_float, as_targets, check_positive_int
from ..errors import InputError
from ..sampling import SampleStream
from .progress import progress_bar

#: the largest chunk the engine reads by default (rows)
DEFAULT_CHUNK_ROWS = 1 << 16


_TARGET_CHUNK_BYTES = 8 << 20


_MIN_CHUNK_ROWS = 1024


def default_chunk_rows(n_columns: int) -> int:
    """Rows per chunk when reading an array with ``n_columns`` columns (inputs plus targets).

    About 8 MiB of float64 per chunk, between 1024 and ``DEFAULT_CHUNK_ROWS`` (65536) rows: large
    enough for BLAS to run at full speed and for the per-chunk Python overhead to vanish, small
    enough that a chunk stays in the last-level cache between its validation and its statistics
    (measured in ``benchmarks/``), and that the memory of a pass stays bounded.
    """
    n_columns = max(int(n_columns), 1)
    return int(min(DEFAULT_CHUNK_ROWS, max(_MIN_CHUNK_ROWS, _TARGET_CHUNK_BYTES // (8 * n_columns))))


@dataclass(frozen=True)
class DataInfo:
    """What is known about a data source before reading it.

    Attributes
    ----------
    kind : str
        ``"arrays"``, ``"memmap"``, ``"dask"``, ``"stream"`` (a :class:`nnrecover.SampleStream`),
        ``"iterable"`` (a re-iterable collection of chunks) or ``"iterator"`` (one pass only).
    n_samples : int or None
        Number of samples, ``None`` when unknown without reading everything (iterators, dask arrays
        with unknown chunk sizes).
    n_inputs : int or None
        ``d``, the number of columns of ``X``.
    n_outputs : int or None
        ``p``, the number of target columns (1 for 1-D targets, 0 when there are no targets).
    reiterable : bool
        Whether the source can be read more than once (multi-pass algorithms need this).
    """

    kind: str
    n_samples: int | None
    n_inputs: int | None
    n_outputs: int | None
    reiterable: bool

    @property
    def has_targets(self) -> bool | None:
        """``True``/``False`` when known, ``None`` when ``n_outputs`` is unknown."""
        return None if self.n_outputs is None else self.n_outputs > 0


class DataSource(abc.ABC):
    """A validated, normalised source of samples; build one with :func:`as_data_source`.

    Iterating a source yields validated chunks ``(X, Y)``: ``X`` float64 of shape (m, d) and ``Y``
    float64 of shape (m, p) (always 2-D; ``p = 0`` when there are no targets).
    """

    kind: str = "abstract"
    is_dask: bool = False
    #: ``take_rows(rows)`` reads just those rows (numpy arrays, memory maps, dask arrays)
    supports_take_rows: bool = False

    # -- description
    @property
    @abc.abstractmethod
    def info(self) -> DataInfo:
        """What is known about the source before reading it."""

    @property
    def n_samples(self) -> int | None:
        return self.info.n_samples

    @property
    def n_inputs(self) -> int | None:
        return self.info.n_inputs

    @property
    def n_outputs(self) -> int | None:
        return self.info.n_outputs

    # -- reading
    @abc.abstractmethod
    def _raw_chunks(self, chunk_size: int | None) -> Iterator[tuple[Any, Any, str]]:
        """Unvalidated ``(X, Y, where)`` chunks; ``where`` labels the chunk in error messages."""

    def chunks(self, chunk_size: int | None = None, progress: bool | None = None,
               desc: str | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Iterate over validated chunks ``(X, Y)`` (``Y`` 2-D, ``p = 0`` without targets).

        Parameters
        ----------
        chunk_size : int, optional
            Rows per chunk for array sources (default :func:`default_chunk_rows`); row chunks of a
            dask array are rechunked to it. Chunks of iterables are used as they come.
        progress : bool, optional
            Progress bar on stderr (see :func:`nnrecover.moments.accumulate`).
        desc : str, optional
            Label of the progress bar.
        """
        if chunk_size is not None:
            chunk_size = check_positive_int(chunk_size, "chunk_size")
        if progress is not None and not isinstance(progress, (bool, np.bool_)):
            raise InputError(f"progress must be True, False or None, got {progress!r}.")
        expected = self._expected_dims()
        bar = progress_bar(self._total_rows(), progress, desc)
        checked = finite_chunks(self)
        try:
            for Xr, Yr, where in self._raw_chunks(chunk_size):
                X, Y = _validate_chunk(Xr, Yr, where, checked)
                if X.shape[0] == 0:
                    continue
                dims = (X.shape[1], Y.shape[1])
                if expected is None:
                    expected = dims
                elif dims != expected:
                    raise InputError(
                        f"{where.strip(' ()') or 'a chunk'} has {dims[0]} input column(s) and {dims[1]} "
                        f"target column(s) but the data so far have {expected[0]} and {expected[1]}; "
                        "every chunk must have the same columns (and targets in every chunk or in none).")
                if bar is not None:
                    bar.update(X.shape[0])
                yield X, Y
        finally:
            if bar is not None:
                bar.close()

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        return self.chunks()

    def _expected_dims(self) -> tuple[int, int] | None:
        info = self.info
        if info.n_inputs is None or info.n_outputs is None:
            return None
        return info.n_inputs, info.n_outputs

    def _total_rows(self) -> int | None:
        return self.info.n_samples

    def peek(self) -> tuple[np.ndarray, np.ndarray]:
        """The first validated chunk, without consuming it (also for one-pass iterators).

        Raises :class:`~nnrecover.errors.InputError` if the source is empty.
        """
        for chunk in self.chunks(progress=False):
            return chunk
        raise InputError("the data source is empty: pass at least one sample.")

    # -- requirements a learner can state
    def require_reiterable(self, what: str = "this algorithm") -> None:
        """Raise :class:`~nnrecover.errors.InputError` if the source can be read only once."""
        if not self.info.reiterable:
            raise InputError(
                f"{what} reads the data more than once, but a one-pass iterator was given; pass arrays, "
                "a memory map, a list of (X, Y) chunks or an nnrecover.SampleStream instead.")

    def require_targets(self, what: str = "this algorithm") -> None:
        """Raise :class:`~nnrecover.errors.InputError` if the source is known to have no targets."""
        if self.info.n_outputs == 0:
            raise InputError(f"{what} needs targets Y; pass fit(X, Y) or chunks (X, Y) with Y not None.")

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Concatenate every chunk: ``(X, Y)`` in memory, ``Y`` 2-D. Uses ``O(n (d + p))`` memory."""
        parts = list(self.chunks(progress=False))
        if not parts:
            raise InputError("the data source is empty: pass at least one sample.")
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def __repr__(self) -> str:
        i = self.info
        return (f"DataSource(kind={i.kind!r}, n_samples={i.n_samples}, n_inputs={i.n_inputs}, "
                f"n_outputs={i.n_outputs}, reiterable={i.reiterable})")


# byte spans of arrays the caller has read whole and found finite (known_finite); a ContextVar, so it
# holds for the thread (and context) that set it, where a pass reads and validates its chunks
_KNOWN_FINITE: contextvars.ContextVar[tuple[tuple[int, int], ...]] = contextvars.ContextVar(
    "nnrecover_known_finite", default=())


def _byte_bounds(a: np.ndarray) -> tuple[int, int]:
    return tuple(int(v) for v in _numpy_byte_bounds(a))


@contextmanager
def known_finite(*arrays: Any) -> Iterator[None]:
    """Within the block, chunks that are views into these float64 arrays skip the finite check.

    For callers that have read every entry already (``BaseLearner.fit``'s magnitude check): a second
    finite check in each pass of the fit would read the data once more per pass. Other arrays and
    every chunk outside these buffers are checked as usual.
    """
    spans = tuple(_byte_bounds(a) for a in arrays
                  if isinstance(a, np.ndarray) and a.dtype == np.float64 and a.size)
    token = _KNOWN_FINITE.set(_KNOWN_FINITE.get() + spans)
    try:
        yield
    finally:
        _KNOWN_FINITE.reset(token)


def _is_known_finite(arr: np.ndarray) -> bool:
    spans = _KNOWN_FINITE.get()
    if not spans or not arr.size:
        return False
    lo, hi = _byte_bounds(arr)
    return any(a <= lo and hi <= b for a, b in spans)


def _finite_float64(a: Any, ndims: tuple[int, ...], checked: bool = False) -> np.ndarray | None:
    """``a`` as a float64 array if it already is one of the given ndims and holds only finite values.

    The finite check is one pairwise sum (two to three times faster than ``isfinite(a).all()``): a sum
    is finite unless ``a`` holds NaN/inf or the sum overflows; only then is each value examined (by
    the full validation, which also reports how many values are bad). Returns None to request the
    full validation.
    """
    arr = np.asarray(a)
    if arr.dtype != np.float64 or arr.ndim not in ndims:
        return None
    if checked or _is_known_finite(arr):
        return arr
    if not np.isfinite(np.add.reduce(arr, axis=None)) and not np.isfinite(arr).all():
        return None
    return arr


def _validate_chunk(X: Any, Y: Any, where: str, checked: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(X, Y)`` as float64 arrays, ``Y`` 2-D; InputError naming the chunk unless they are finite numbers of
    the right shapes. ``checked``: the source has already checked the values (:func:`finite_chunks`), so
    float64 chunks are not read again."""
    Xv = _finite_float64(X, (2,), checked)
    X = as_2d_float(X, f"X{where}", min_rows=0) if Xv is None else Xv
    if Y is None:
        return X, np.empty((X.shape[0], 0))
    Yv = _finite_float64(Y, (1, 2), checked)
    if Yv is None or Yv.shape[0] != X.shape[0]:
        Yv = as_targets(Y, f"Y{where}", n_rows=X.shape[0])
    return X, (Yv[:, None] if Yv.ndim == 1 else Yv)


def _n_target_columns(Y: Any) -> int:
    if Y is None:
        return 0
    try:
        shape = np.shape(Y)
    except ValueError:  # nested lists of unequal lengths
        raise InputError("Y is ragged (rows of different lengths); give every sample the same number of "
                         "targets.") from None
    if len(shape) not in (1, 2):
        raise InputError(f"Y must have shape (n,) or (n, p), got shape {tuple(shape)}.")
    return 1 if len(shape) == 1 else int(shape[1])


def _check_array_meta(A: Any, name: str, ndims: tuple[int, ...]) -> None:
    """Check shape and dtype of an array-like without reading its data."""
    shape = getattr(A, "shape", None)
    if shape is None or len(shape) not in ndims:
        want = "2-D with shape (n_samples, n_features)" if ndims == (2,) else "shape (n,) or (n, p)"
        raise InputError(f"{name} must be {want}, got shape {None if shape is None else tuple(shape)}.")
    dtype = getattr(A, "dtype", None)
    if dtype is not None:
        try:
            dtype = np.dtype(dtype)
        except TypeError:  # pandas extension dtypes etc.: checked chunk by chunk
            return
        if dtype == object or not (np.issubdtype(dtype, np.number) or dtype == bool):
            raise InputError(f"{name} must be numeric, got dtype {dtype}.")
        if np.issubdtype(dtype, np.complexfloating):
            raise InputError(f"{name} must be real, got complex dtype {dtype}.")


class ArraySource(DataSource):
    def __init__(self, X: Any, Y: Any, *, row_offset: int = 0) -> None:
        #: the row of the caller's data that row 0 of ``X`` is (a source of the rows after ``skip``: the
        #: error messages then name the caller's rows)
        self.row_offset = int(row_offset)
        if not hasattr(X, "shape"):  # nested lists: validate everything now (it is in memory anyway)
            X = as_2d_float(X, "X", min_rows=0)
        if Y is not None and not hasattr(Y, "shape"):
            Y = as_targets(Y, "Y")
        _check_array_meta(X, "X", (2,))
        if Y is not None:
            _check_array_meta(Y, "Y", (1, 2))
            if Y.shape[0] != X.shape[0]:
                raise InputError(f"X and Y have different numbers of samples ({X.shape[0]} vs {Y.shape[0]}); "
                                 "pass one target row per input row.")
        self.X, self.Y = X, Y
        self.kind = "memmap" if isinstance(X, np.memmap) else "arrays"
        self._info = DataInfo(self.kind, int(X.shape[0]), int(X.shape[1]), _n_target_columns(Y), True)
        # fancy indexing of h5py/zarr datasets has other rules and costs: those are read in chunks
        self.supports_take_rows = isinstance(X, np.ndarray) and (Y is None or isinstance(Y, np.ndarray))

    @property
    def info(self) -> DataInfo:
        return self._info

    def take_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows ``rows`` (sorted indices) of ``X`` and ``Y``, validated like every chunk; a memory
        map reads only those rows."""
        rows = np.asarray(rows, dtype=np.int64)

        def gather(A):
            # np.take gathers whole rows faster than fancy indexing (4x for a narrow Y); other
            # array-likes (h5py, zarr) read their rows through their own indexing
            return np.take(A, rows, axis=0) if isinstance(A, np.ndarray) else A[rows]
        return _validate_chunk(gather(self.X), None if self.Y is None else gather(self.Y), " (rows gathered)")

    def _raw_chunks(self, chunk_size):
        n, d, p = self._info.n_samples, self._info.n_inputs, self._info.n_outputs
        rows = chunk_size or default_chunk_rows(d + p)
        for start in range(0, n, rows):
            stop = min(n, start + rows)
            yield (self.X[start:stop], None if self.Y is None else self.Y[start:stop],
                   f" (rows {start + self.row_offset}:{stop + self.row_offset})")


def _open_npy(path: Any, name: str) -> np.ndarray:
    path = os.fspath(path)
    if not path.endswith(".npy"):
        raise InputError(f"{name} path {path!r} must name a .npy file (np.save); for other formats load "
                         "the data yourself and pass arrays or an iterable of (X, Y) chunks.")
    if not os.path.exists(path):
        raise InputError(f"{name} file {path!r} does not exist.")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise InputError(f"cannot memory-map {name} file {path!r}: {exc}") from exc


def _is_dask_array(A: Any) -> bool:
    if A is None or "dask" not in sys.modules:
        return False
    import dask.array as da  # deferred: dask is needed only for dask sources

    return isinstance(A, da.Array)


class DaskSource(DataSource):
    """Dask arrays with aligned blocks: ``X`` in one column chunk, ``Y`` on ``X``'s row chunks."""

    kind = "dask"
    is_dask = True
    supports_take_rows = True

    def __init__(self, X: Any, Y: Any) -> None:
        import dask.array as da  # deferred: dask is needed only for dask sources

        if not _is_dask_array(X):  # numpy X with dask Y: wrap X on Y's row chunks
            X = as_2d_float(X, "X", min_rows=0) if not hasattr(X, "shape") else X
            _check_array_meta(X, "X", (2,))
            X = da.from_array(X, chunks=(Y.chunks[0], -1))
        _check_array_meta(X, "X", (2,))
        if X.numblocks[1] > 1:
            X = X.rechunk({1: -1})
        row_chunks = X.chunks[0]
        unknown = any(np.isnan(c) for c in row_chunks)
        if Y is not None:
            if not _is_dask_array(Y):
                if not hasattr(Y, "shape"):
                    Y = as_targets(Y, "Y")
                _check_array_meta(Y, "Y", (1, 2))
                if unknown:
                    raise InputError("X is a dask array with unknown chunk sizes; call X.compute_chunk_sizes() "
                                     "before passing it with targets Y.")
                Y = da.from_array(Y, chunks=(row_chunks,) + ((-1,) if len(Y.shape) == 2 else ()))
            _check_array_meta(Y, "Y", (1, 2))
            if unknown or any(np.isnan(c) for c in Y.chunks[0]):
                raise InputError("X or Y is a dask array with unknown chunk sizes; call .compute_chunk_sizes() "
                                 "on it first so that the rows of X and Y can be aligned.")
            if Y.shape[0] != X.shape[0]:
                raise InputError(f"X and Y have different numbers of samples ({X.shape[0]} vs {Y.shape[0]}); "
                                 "pass one target row per input row.")
            if Y.chunks[0] != row_chunks or (Y.ndim == 2 and Y.numblocks[1] > 1):
                Y = Y.rechunk((row_chunks,) + ((Y.shape[1],) if Y.ndim == 2 else ()))
        self.X, self.Y = X, Y
        n = None if unknown else int(X.shape[0])
        self._info = DataInfo("dask", n, int(X.shape[1]), _n_target_columns(Y), True)

    @property
    def info(self) -> DataInfo:
        return self._info

    def with_row_chunks(self, chunk_size: int | None) -> "DaskSource":
        """The same arrays with row chunks of ``chunk_size`` rows (``None``: unchanged)."""
        if chunk_size is None:
            return self
        X = self.X.rechunk({0: chunk_size})
        return DaskSource(X, None if self.Y is None else self.Y.rechunk({0: chunk_size}))

    def blocks(self) -> list[tuple[Any, Any, str]]:
        """``(X block, Y block or None, label)`` as delayed objects, one per row block."""
        xb = self.X.to_delayed().ravel()
        yb = [None] * len(xb) if self.Y is None else self.Y.to_delayed().ravel()
        return [(x, y, f" (dask block {i})") for i, (x, y) in enumerate(zip(xb, yb))]

    def take_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows ``rows`` (sorted indices) of ``X`` and ``Y``, gathered on the workers: only those rows
        travel to the client, validated like every chunk."""
        import dask  # deferred: dask is needed only for dask sources

        rows = np.asarray(rows, dtype=np.int64)
        Xs, Ys = dask.compute(self.X[rows], None if self.Y is None else self.Y[rows])
        Xs, Ys = _validate_chunk(Xs, Ys, " (rows gathered from the dask arrays)")
        return Xs, Ys

    def peek(self) -> tuple[np.ndarray, np.ndarray]:
        """The first ``default_chunk_rows(d + p)`` rows, the rows an in-memory array's ``peek`` returns:
        only they are computed and sent to the client, whatever the size of the first block."""
        import dask  # deferred: dask is needed only for dask sources

        n, d = self.X.shape
        if n == 0:
            raise InputError("the data source is empty: pass at least one sample.")
        p = 0 if self.Y is None else (1 if self.Y.ndim == 1 else int(self.Y.shape[1]))
        m = min(int(n), default_chunk_rows(int(d) + p))
        Xc, Yc = dask.compute(self.X[:m], None if self.Y is None else self.Y[:m])
        return _validate_chunk(Xc, Yc, " (first rows of the dask arrays)")

    def _raw_chunks(self, chunk_size):
        # iteration on the client, block by block (used by chunks(); accumulate_dask never does this)
        import dask  # deferred: dask is needed only for dask sources

        src = self.with_row_chunks(chunk_size)
        for i in range(src.X.numblocks[0]):
            xb = src.X.blocks[i]
            yb = None if src.Y is None else src.Y.blocks[i]
            Xc, Yc = dask.compute(xb, yb)
            yield Xc, Yc, f" (dask block {i})"


def _item_pair(item: Any, index: int) -> tuple[Any, Any]:
    if not (isinstance(item, (tuple, list)) and len(item) == 2):
        raise InputError(f"item {index} of the data stream is a {type(item).__name__}; a stream must yield "
                         "(X, Y) pairs of arrays (Y may be None).")
    return item[0], item[1]


def _raw_dims(item: Any, index: int) -> tuple[int, int, int]:
    X, Y = _item_pair(item, index)
    try:
        shape = np.shape(X)
    except ValueError:  # nested lists of unequal lengths
        raise InputError(f"X in chunk {index} of the data stream is ragged (rows of different lengths); "
                         "every row needs n_features values.") from None
    if len(shape) != 2:
        raise InputError(f"X in chunk {index} of the data stream must be 2-D with shape (n_samples, "
                         f"n_features), got shape {tuple(shape)}.")
    return int(shape[0]), int(shape[1]), _n_target_columns(Y)


class _IterableSource(DataSource):
    """A re-iterable collection or stream of ``(X, Y)`` chunks."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self._info: DataInfo | None = None
        if isinstance(obj, SampleStream):
            self.kind = "stream"
            self._info = DataInfo("stream", int(obj.n_samples), int(obj.n_inputs),
                                  int(obj.network.n_outputs), True)
        elif isinstance(obj, (list, tuple)):
            self.kind = "iterable"
            dims = [_raw_dims(item, i) for i, item in enumerate(obj)]
            if dims:
                self._info = DataInfo("iterable", sum(r for r, _, _ in dims), dims[0][1], dims[0][2], True)
            else:
                self._info = DataInfo("iterable", 0, None, None, True)
        else:
            self.kind = "iterable"

    @property
    def info(self) -> DataInfo:
        if self._info is None:  # a generic re-iterable: attributes if it has them, else look at chunk 0
            n = getattr(self.obj, "n_samples", None)
            d = getattr(self.obj, "n_inputs", None)
            p = getattr(self.obj, "n_outputs", None)
            if d is None or p is None:
                first = next(iter(self.obj), None)
                if first is not None:
                    _, d0, p0 = _raw_dims(first, 0)
                    d = d0 if d is None else d
                    p = p0 if p is None else p
            self._info = DataInfo("iterable", None if n is None else int(n), None if d is None else int(d),
                                  None if p is None else int(p), True)
        return self._info

    def _raw_chunks(self, chunk_size):
        for i, item in enumerate(self.obj):
            X, Y = _item_pair(item, i)
            yield X, Y, f" (chunk {i})"


class _IteratorSource(DataSource):
    """A one-pass iterator of ``(X, Y)`` chunks; the first chunk is buffered so it can be peeked."""

    kind = "iterator"
    _EMPTY = object()

    def __init__(self, it: Iterator) -> None:
        self._it = it
        self._head: Any = None
        self._started = False
        self._info: DataInfo | None = None

    def _fetch_head(self) -> Any:
        if self._started:
            raise InputError("this one-pass iterator of (X, Y) chunks was already consumed; pass a re-iterable "
                             "source (arrays, a list of chunks, an nnrecover.SampleStream) to read it again.")
        if self._head is None:
            self._head = next(self._it, self._EMPTY)
        return self._head

    @property
    def info(self) -> DataInfo:
        if self._info is None:
            head = self._head if self._started else self._fetch_head()
            if head is None or head is self._EMPTY:
                self._info = DataInfo("iterator", None, None, None, False)
            else:
                _, d, p = _raw_dims(head, 0)
                self._info = DataInfo("iterator", None, d, p, False)
        return self._info

    def _raw_chunks(self, chunk_size):
        head = self._fetch_head()
        self._started = True
        self._head = None
        items = self._it if head is self._EMPTY else itertools.chain([head], self._it)
        for i, item in enumerate(items):
            X, Y = _item_pair(item, i)
            yield X, Y, f" (chunk {i})"

    def peek(self) -> tuple[np.ndarray, np.ndarray]:
        head = self._fetch_head()
        if head is self._EMPTY:
            raise InputError("the data source is empty: pass at least one sample.")
        X, Y = _item_pair(head, 0)
        return _validate_chunk(X, Y, " (chunk 0)")


def _is_arraylike(A: Any) -> bool:
    return hasattr(A, "shape") and hasattr(A, "__getitem__")


def _is_array_or_path(A: Any) -> bool:
    return _is_arraylike(A) or isinstance(A, (str, os.PathLike))


def as_data_source(X: Any, Y: Any = None) -> DataSource:
    """Normalise the data arguments of ``fit(X, Y)`` or ``accumulate(stats, data)``.

    Accepted forms:

    * ``X`` an array (numpy, ``np.memmap``, ``np.load(..., mmap_mode="r")``, any sliceable array
      with ``.shape`` such as h5py/zarr datasets, or nested lists) of shape (n, d) and ``Y`` an
      array of shape (n,) or (n, p), or ``None`` (no targets);
    * ``X`` and/or ``Y`` paths to ``.npy`` files (memory-mapped, read chunk by chunk);
    * ``X`` a tuple ``(X, Y)`` of arrays with ``Y=None`` (the form ``accumulate`` takes);
    * ``X`` and ``Y`` dask arrays (or one dask and one numpy array);
    * ``X`` an iterable of ``(X, Y)`` chunks with ``Y=None``: a list or tuple of pairs, an
      :class:`nnrecover.SampleStream`, any re-iterable object, or a one-pass generator/iterator;
    * ``X`` a :class:`DataSource` (returned as is).

    Only metadata are checked here (shapes, dtypes, lengths); values (NaN, inf) are checked chunk by
    chunk while reading, so a memory map or a stream is never loaded whole.

    Returns
    -------
    DataSource

    Raises
    ------
    InputError
        ``X`` is None or of an unsupported type; ``X`` not 2-D; ``Y`` not 1-D/2-D; lengths differ;
        non-numeric dtype; ``Y`` given together with a stream of chunks.
    """
    if X is None:
        raise InputError("X is None; pass an array of shape (n_samples, n_features) or an iterable of "
                         "(X, Y) chunks.")
    if isinstance(X, DataSource):
        if Y is not None:
            raise InputError("Y must be None when X is already a DataSource (it carries its targets).")
        return X
    if isinstance(X, (str, os.PathLike)):
        X = _open_npy(X, "X")
    if isinstance(Y, (str, os.PathLike)):
        Y = _open_npy(Y, "Y")
    if (Y is None and isinstance(X, tuple) and len(X) == 2 and _is_array_or_path(X[0])
            and (X[1] is None or _is_array_or_path(X[1]))):
        return as_data_source(X[0], X[1])
    if _is_dask_array(X) or _is_dask_array(Y):
        return DaskSource(X, Y)
    if _is_arraylike(X) or (isinstance(X, list) and not _looks_like_chunk_list(X)):
        return ArraySource(X, Y)
    if isinstance(X, (bytes, dict, set)) or not hasattr(X, "__iter__"):
        raise InputError(f"X must be an array, a path to a .npy file, or an iterable of (X, Y) chunks; got "
                         f"{type(X).__name__}.")
    if Y is not None:
        raise InputError("when X is an iterable of (X, Y) chunks, the chunks carry the targets: leave Y=None.")
    if isinstance(X, (list, tuple)):
        return _IterableSource(X)
    if iter(X) is X:
        return _IteratorSource(X)
    return _IterableSource(X)


def _looks_like_chunk_list(obj: list) -> bool:
    # a list whose first item is an (X, Y) pair is a list of chunks (later items are checked as read)
    return bool(obj) and isinstance(obj[0], tuple) and len(obj[0]) == 2 and _is_arraylike(obj[0][0])


def describe_data(X: Any, Y: Any = None) -> DataInfo:
    """Describe a data source without reading its values (see :func:`as_data_source` for the forms).

    A one-pass iterator is not advanced (its ``n_inputs``/``n_outputs`` are reported as ``None``);
    use ``as_data_source(it).info`` to look at its first chunk while keeping it for the pass.

    Returns
    -------
    DataInfo
    """
    if Y is None and not isinstance(X, DataSource) and hasattr(X, "__next__") and iter(X) is X:
        return DataInfo("iterator", None, None, None, False)
    return as_data_source(X, Y).info


def fresh_chunks(source: DataSource) -> bool:
    """Whether a chunk stays unchanged while later chunks are read (else a pass reading ahead copies it).

    Array slices, list items and nnrecover's own streams are never rewritten; a generic generator may
    hand out one buffer refilled for every chunk. A re-iterable can declare its chunks fresh with an
    attribute ``fresh_chunks = True`` (nnrecover's own views of other sources do).
    """
    if isinstance(source, (ArraySource, DaskSource)):
        return True
    obj = getattr(source, "obj", None)
    return isinstance(obj, (list, tuple, SampleStream)) or getattr(obj, "fresh_chunks", False) is True


def iid_stream(source: DataSource) -> bool:
    """Whether the source is one of nnrecover's own streams (:class:`~nnrecover.sampling.SampleStream`),
    whose rows are independent draws from one law by construction: any ``m`` of its rows, the first ones
    included, are a uniform sample of ``m`` rows, and reading the first ones costs ``m / n`` of a pass.
    A generic stream may be ordered (by time, by label), so its rows are chosen at random."""
    return isinstance(getattr(source, "obj", None), SampleStream)


def finite_chunks(source: DataSource) -> bool:
    """Whether the source's chunks are float64 values it has itself checked to be finite, so that reading
    them does not check every value again.

    nnrecover's streams check each block they generate (:class:`~nnrecover.sampling.SampleStream`); a
    re-iterable declares it with an attribute ``finite_chunks = True`` (nnrecover's own views of other
    sources do: their chunks come from a validated pass).
    """
    obj = getattr(source, "obj", None)
    return isinstance(obj, SampleStream) or getattr(obj, "finite_chunks", False) is True

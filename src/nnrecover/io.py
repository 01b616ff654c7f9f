"""Reading and writing labelled samples ``(X, Y)`` in the formats the command line accepts.

Formats (chosen by the file suffix):

============  ===========================================================================================
``.npz``      arrays under the keys ``X`` (shape (n, d)) and ``Y`` (shape (n,) or (n, p)); other key
              names with ``x_key`` / ``y_key``.
``.npy``      one 2-D array; the target column(s) are chosen by ``target_columns`` (positions, default
              the last column), or the whole array is ``X`` when the targets come from a separate
              ``targets`` file. Opened memory-mapped (``numpy.load(mmap_mode="r")``): nothing is read
              until a row is used, so files larger than memory stream chunk by chunk.
``.csv``      a table read with pandas; with a header row, targets are the columns named by
              ``target_columns``, else the column ``y``, else ``y0, y1, ...``, else the last column. A
              file without a header (every field of the first row is a number) is read header-less;
              its columns are then addressed by position. A first row ``0, 1, ..., m - 1`` above a column
              of floats is pandas' default header (``DataFrame(array).to_csv()``), and a
              first column ``Unnamed: 0`` holding ``0, 1, ..., n - 1`` is the row index pandas writes
              without ``index=False``: neither is data.
``.parquet``  as ``.csv`` (needs ``pyarrow``: ``pip install 'nnrecover[parquet]'``).
============  ===========================================================================================

:func:`save_samples` writes all four formats so that :func:`load_samples` reads them back exactly
(``.csv`` uses 17 significant digits, which round-trips every float64). :func:`save_sample_stream`
writes an iterable of ``(X, Y)`` chunks with bounded memory (``.npy``, ``.csv`` and ``.parquet``).

Every problem with a file (missing, unreadable, truncated, wrong shape, non-numeric column, NaN,
unknown key or column) raises :class:`nnrecover.errors.InputError` naming the file and the fix. The
header of every ``.npy`` array (a file, or a member of an ``.npz`` archive) is checked against the bytes
that follow it before anything is read, so a truncated or corrupt file is reported as such and never
makes numpy allocate what the header claims.

Files are written whole or not at all (:mod:`nnrecover.files`).
"""

from __future__ import annotations

import os
import re
import zipfile
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence
import numpy as np
from ._validation import as_2d_float, as_targets, check_positive_int
from .errors import InputError
from .files import atomic_output, check_free_space, check_npy_file, check_npz_members, first_line, output_name

__all__ = ["load_samples", "save_samples", "save_sample_stream", "SAMPLE_FORMATS", "sample_file_bytes"]


SAMPLE_FORMATS = (".npz", ".npy", ".csv", ".parquet")


#: rows read at a time when checking a memory-mapped array for NaN/inf (bounded memory)
_CHECK_ROWS = 1 << 16


def sample_file_bytes(n_samples: int, n_columns: int, suffix: str) -> int:
    """An upper estimate of the size of a samples file of ``n_samples`` rows and ``n_columns`` columns.

    ``.npy``/``.npz``: 8 bytes a value (+ header); ``.csv``: 25 characters a value (17 significant
    digits, sign, point, exponent, separator); ``.parquet``: 9 bytes a value (float64 pages do not
    compress random data).
    """
    per_value = {".npy": 8, ".npz": 8, ".csv": 25, ".parquet": 9}.get(suffix.lower(), 25)
    return int(n_samples) * int(n_columns) * per_value + 4096


# ------------------------------------------------------------------------------------------ helpers
def _suffix(path: Path, what: str) -> str:
    suffix = path.suffix.lower()
    if suffix not in SAMPLE_FORMATS:
        raise InputError(f"cannot read {what} from {path.name!r}: the file name must end in one of "
                         f"{', '.join(SAMPLE_FORMATS)}.")
    return suffix


def _existing(path: "str | os.PathLike[str]", what: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise InputError(f"{what} file {str(path)!r} does not exist.")
    if path.is_dir():
        raise InputError(f"{what} path {str(path)!r} is a directory; give a file.")
    return path


def _check_numeric(arr: np.ndarray, name: str) -> None:
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise InputError(f"{name} must be numeric, got dtype {arr.dtype}.")
    if np.iscomplexobj(arr):
        raise InputError(f"{name} must be real, got complex dtype {arr.dtype}.")


def _check_finite_chunked(arr: np.ndarray, name: str) -> None:
    """NaN/inf check reading ``_CHECK_ROWS`` rows at a time (a memmap is never loaded whole)."""
    for start in range(0, arr.shape[0], _CHECK_ROWS):
        block = np.asarray(arr[start:start + _CHECK_ROWS])
        if not np.all(np.isfinite(block)):
            rows = np.flatnonzero(~np.isfinite(block.reshape(block.shape[0], -1)).all(axis=1)) + start
            raise InputError(f"{name} contains NaN or infinite values (first at row {int(rows[0])}); "
                             "remove or impute them first.")


def _validate_pair(X: np.ndarray, Y: np.ndarray, source: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate without copying memory maps: X 2-D numeric finite, Y (n,) or (n, p) matching X."""
    if isinstance(X, np.memmap) or isinstance(Y, np.memmap) or _is_memmap_view(X) or _is_memmap_view(Y):
        _check_numeric(X, f"X in {source}")
        _check_numeric(Y, f"Y in {source}")
        if X.ndim != 2:
            raise InputError(f"X in {source} must be 2-D (n_samples, n_features), got shape {X.shape}.")
        if Y.ndim not in (1, 2):
            raise InputError(f"Y in {source} must have shape (n,) or (n, p), got shape {Y.shape}.")
        if X.shape[0] < 1 or X.shape[1] < 1:
            raise InputError(f"{source} holds no samples (X has shape {X.shape}).")
        if Y.shape[0] != X.shape[0]:
            raise InputError(f"X and Y in {source} have different numbers of samples "
                             f"({X.shape[0]} vs {Y.shape[0]}); pass one target row per input row.")
        _check_finite_chunked(X, f"X in {source}")
        _check_finite_chunked(Y, f"Y in {source}")
        return X, Y
    try:
        X = as_2d_float(X, f"X in {source}")
        Y = as_targets(Y, f"Y in {source}", n_rows=X.shape[0])
    except InputError as exc:
        raise InputError(str(exc)) from None
    if X.shape[1] < 1:
        raise InputError(f"{source} has no input columns (X has shape {X.shape}).")
    return X, Y


def _is_memmap_view(a: Any) -> bool:
    base = getattr(a, "base", None)
    while base is not None:
        if isinstance(base, np.memmap):
            return True
        base = getattr(base, "base", None)
    return False


def _magic(path: Path, n: int) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(n)


def _load_npy(path: Path, mmap: bool) -> np.ndarray:
    if _magic(path, 6) != b"\x93NUMPY":
        raise InputError(f"{path.name} is not a valid .npy file (no NumPy header); write it with numpy.save.")
    check_npy_file(path)
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{path.name} is not a valid .npy file: {first_line(exc)}") from None


def _split_columns(arr: np.ndarray, target_columns, source: str) -> tuple[np.ndarray, np.ndarray]:
    """Split a 2-D array into inputs and targets by column positions (default: the last column)."""
    if arr.ndim != 2:
        raise InputError(f"{source} must hold a 2-D array (samples as rows, targets in the last column), "
                         f"got shape {arr.shape}.")
    m = arr.shape[1]
    if m < 2:
        raise InputError(f"{source} has {m} column(s); it needs inputs and at least one target column "
                         "(or pass the targets as a separate file).")
    cols = [-1] if target_columns is None else _as_list(target_columns)
    pos = []
    for c in cols:
        if isinstance(c, str):
            if not re.fullmatch(r"-?\d+", c.strip()):
                raise InputError(f"{source} is a plain array: target columns are positions (integers), got {c!r}.")
            c = int(c)
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not -m <= int(c) < m:
            raise InputError(f"target column {c!r} is out of range for {source} with {m} columns.")
        pos.append(int(c) % m)
    if len(set(pos)) != len(pos) or len(pos) >= m:
        raise InputError(f"target columns {cols} of {source} must be distinct and leave at least one input column.")
    ycols = sorted(pos)
    xcols = [j for j in range(m) if j not in set(ycols)]
    # trailing target block: both parts stay views (no copy of a memory map)
    if ycols == list(range(m - len(ycols), m)):
        X = arr[:, : m - len(ycols)]
        Y = arr[:, -1] if len(ycols) == 1 else arr[:, m - len(ycols):]
    else:
        X = arr[:, xcols]
        Y = arr[:, ycols[0]] if len(ycols) == 1 else arr[:, ycols]
    return X, Y


def _as_list(value) -> list:
    if isinstance(value, (str, int, np.integer)):
        return [value]
    return list(value)


def _read_table(path: Path, suffix: str):
    import pandas as pd  # deferred: pandas is slow to import

    if suffix == ".parquet":
        try:
            return pd.read_parquet(path)
        except ImportError as exc:
            raise InputError(f"reading {path.name} needs pyarrow: pip install 'nnrecover[parquet]' ({exc}).") from None
        except Exception as exc:  # pyarrow raises its own error types for corrupt files
            raise InputError(f"{path.name} is not a readable parquet file: {exc}") from None
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise InputError(f"{path.name} is empty.") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(f"{path.name} is not a readable CSV file: {str(exc).strip()}") from None
    names = [str(c) for c in df.columns]
    if names == [str(i) for i in range(len(names))] and _has_float_column(df):
        # pandas' default column names 0, 1, ..., d - 1 (DataFrame(array).to_csv()) above rows written as
        # floats ("1.0" too): a header, not a row of data (read as data, it shifted every target by a row
        # and the fit was off); above integer rows the first row may be data, and is kept as such
        df.columns = list(range(len(names)))
    elif all(_is_number(c) for c in df.columns):  # first row is data: no header
        df = pd.read_csv(path, header=None)
    if len(df.columns) and str(df.columns[0]).startswith("Unnamed: 0") and \
            np.array_equal(df.iloc[:, 0].to_numpy(), np.arange(len(df))):
        # the row index pandas writes without index=False: not an input
        df = df.iloc[:, 1:]
        if names[1:] == [str(i) for i in range(len(names) - 1)]:
            df.columns = list(range(len(names) - 1))
    return df


def _has_float_column(df) -> bool:
    """Whether pandas parsed some column of the table as floats (its values written with a point or an
    exponent), which a row of column numbers above it cannot be part of."""
    return any(np.issubdtype(dtype, np.floating) for dtype in df.dtypes if isinstance(dtype, np.dtype))


def _is_number(text: Any) -> bool:
    try:
        float(str(text))
    except ValueError:
        return False
    return True


def _table_targets(df, target_columns, source: str) -> list:
    columns = list(df.columns)
    if target_columns is not None:
        chosen = []
        for c in _as_list(target_columns):
            if c in columns:
                chosen.append(c)
            elif isinstance(c, str) and re.fullmatch(r"-?\d+", c.strip()) and all(isinstance(k, (int, np.integer)) for k in columns):
                j = int(c)
                if not -len(columns) <= j < len(columns):
                    raise InputError(f"target column {c!r} is out of range for {source} with {len(columns)} columns.")
                chosen.append(columns[j])
            elif isinstance(c, (int, np.integer)) and not isinstance(c, bool) and -len(columns) <= int(c) < len(columns):
                chosen.append(columns[int(c)])
            else:
                raise InputError(f"{source} has no column {c!r}; its columns are "
                                 f"{', '.join(map(str, columns[:20]))}{' ...' if len(columns) > 20 else ''}.")
        if len(set(map(str, chosen))) != len(chosen):
            raise InputError(f"target columns {list(_as_list(target_columns))} of {source} must be distinct.")
        return chosen
    names = [str(c) for c in columns]
    if "y" in names:
        return [columns[names.index("y")]]
    numbered = sorted((int(m.group(1)), c) for c, s in zip(columns, names) if (m := re.fullmatch(r"y(\d+)", s)))
    if numbered:
        return [c for _, c in numbered]
    return [columns[-1]]


def _table_to_arrays(df, target_columns, source: str, has_targets: bool) -> tuple[np.ndarray, np.ndarray | None]:
    if df.shape[0] == 0:
        raise InputError(f"{source} has no rows.")
    from pandas.api.types import (  # deferred: pandas is slow to import
        is_bool_dtype,
        is_complex_dtype,
        is_numeric_dtype,
    )

    bad = [str(c) for c in df.columns
           if not (is_numeric_dtype(df[c].dtype) or is_bool_dtype(df[c].dtype)) or is_complex_dtype(df[c].dtype)]
    if bad:
        raise InputError(f"{source}: column(s) {', '.join(bad[:10])} are not numeric; drop or encode them first.")
    if not has_targets:
        return df.to_numpy(dtype=np.float64), None
    ycols = _table_targets(df, target_columns, source)
    xcols = [c for c in df.columns if c not in set(ycols)]
    if not xcols:
        raise InputError(f"{source}: every column is a target; at least one input column is needed.")
    X = df[xcols].to_numpy(dtype=np.float64)
    Y = df[ycols].to_numpy(dtype=np.float64)
    return X, (Y[:, 0] if len(ycols) == 1 else Y)


def _read_inputs_only(path: Path, suffix: str, x_key: str, mmap: bool) -> np.ndarray:
    if suffix == ".npy":
        return _load_npy(path, mmap)
    if suffix == ".npz":
        data = _open_npz(path)
        with data:
            if x_key not in data.files:
                raise InputError(f"{path.name} has no array {x_key!r} (it holds {', '.join(data.files) or 'nothing'}).")
            return _npz_array(data, x_key, path.name)
    X, _ = _table_to_arrays(_read_table(path, suffix), None, path.name, has_targets=False)
    return X


def _open_npz(path: Path):
    if not zipfile.is_zipfile(path):
        raise InputError(f"{path.name} is not a valid .npz file (not a zip archive); write it with numpy.savez.")
    check_npz_members(path)
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InputError(f"{path.name} is not a valid .npz file: {exc}") from None


def _npz_array(data, key: str, source: str) -> np.ndarray:
    """``data[key]`` of an open ``.npz`` archive; a corrupt member is an InputError naming it."""

    try:
        return data[key]
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise InputError(f"array {key!r} of {source} cannot be read ({first_line(exc)}); re-create the file.") from None


def _read_targets(path: Path, target_columns, y_key: str, mmap: bool) -> np.ndarray:
    suffix = _suffix(path, "targets")
    if target_columns is not None and suffix in (".npy", ".npz"):
        raise InputError(f"target_columns (--target-column) select columns of a .csv/.parquet targets file; "
                         f"{path.name} is a whole targets array: drop them, or pass the columns wanted in a file of "
                         "their own.")
    if suffix == ".npy":
        return _load_npy(path, mmap)
    if suffix == ".npz":
        with _open_npz(path) as data:
            # the only array of the file stands in for the default name, never for one the caller chose
            key = y_key if y_key in data.files else (data.files[0] if len(data.files) == 1 and y_key == "Y" else None)
            if key is None:
                raise InputError(f"{path.name} has no array {y_key!r} (it holds {', '.join(data.files)}).")
            return _npz_array(data, key, path.name)
    df = _read_table(path, suffix)
    if target_columns is not None:
        df = df[_table_targets(df, target_columns, path.name)]
    Y, _ = _table_to_arrays(df, None, path.name, has_targets=False)
    return Y[:, 0] if Y.shape[1] == 1 else Y


# ------------------------------------------------------------------------------------------ public
def load_samples(path: "str | os.PathLike[str]", *, targets: "str | os.PathLike[str] | None" = None,
                 target_columns: "str | int | Sequence[str | int] | None" = None, x_key: str = "X",
                 y_key: str = "Y", mmap: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Read labelled samples from ``.npz``, ``.npy``, ``.csv`` or ``.parquet``.

    Parameters
    ----------
    path : path-like
        The data file; the format is chosen by its suffix (see the module docstring).
    targets : path-like, optional
        A separate file with the targets (one row per sample). The data file then holds the inputs
        only (for ``.npz``: the array ``x_key``). For a table, ``target_columns`` then selects columns
        of this file (default: all of them).
    target_columns : str, int or sequence, optional
        Which columns are targets: names or positions for ``.csv``/``.parquet``, positions for
        ``.npy`` (negative positions count from the end; default: last column). Ignored for ``.npz``
        data; with a ``targets`` file, columns of a ``.csv``/``.parquet`` one (refused for a ``.npy``/``.npz``
        one, a whole targets array).
    x_key, y_key : str
        Array names in an ``.npz`` file. A ``.npz`` targets file with a single array is read whatever its
        name when ``y_key`` is the default ``"Y"``.
    mmap : bool, default True
        Open ``.npy`` files memory-mapped (read-only): the returned arrays are views on the file and
        memory use stays bounded by the chunk a consumer reads.

    Returns
    -------
    X : ndarray of shape (n, d)
        float64, except that a memory-mapped ``.npy`` keeps its stored dtype (converting would read it
        all); the moment engine converts chunk by chunk.
    Y : ndarray of shape (n,) or (n, p)

    Raises
    ------
    InputError
        Missing or unreadable file, unsupported suffix, missing key or column, non-numeric column,
        NaN/inf (checked chunk by chunk for memory maps), or X and Y of different lengths.
    """
    path = _existing(path, "data")
    suffix = _suffix(path, "samples")
    if targets is not None:
        tpath = _existing(targets, "targets")
        X = _read_inputs_only(path, suffix, x_key, mmap)
        Y = _read_targets(tpath, target_columns, y_key, mmap)
        return _validate_pair(X, Y, f"{path.name} + {tpath.name}")
    if suffix == ".npz":
        with _open_npz(path) as data:
            missing = [k for k in (x_key, y_key) if k not in data.files]
            if missing:
                raise InputError(f"{path.name} lacks the array(s) {', '.join(map(repr, missing))} (it holds "
                                 f"{', '.join(data.files) or 'nothing'}); save X and Y with "
                                 "numpy.savez(path, X=X, Y=Y), name other keys with --x-key/--y-key, "
                                 "or give the targets as a separate file.")
            X, Y = _npz_array(data, x_key, path.name), _npz_array(data, y_key, path.name)
        return _validate_pair(X, Y, path.name)
    if suffix == ".npy":
        X, Y = _split_columns(_load_npy(path, mmap), target_columns, path.name)
        return _validate_pair(X, Y, path.name)
    X, Y = _table_to_arrays(_read_table(path, suffix), target_columns, path.name, has_targets=True)
    return _validate_pair(X, Y, path.name)


def _column_names(d: int, p: int | None) -> tuple[list[str], list[str]]:
    xcols = [f"x{j}" for j in range(d)]
    ycols = [] if p is None else (["y"] if p == 1 else [f"y{j}" for j in range(p)])
    return xcols, ycols


def _prepare(X, Y, where: str = "") -> tuple[np.ndarray, np.ndarray | None, bool]:
    X = as_2d_float(X, f"X{where}")
    if Y is None:
        return X, None, False
    Y = as_targets(Y, f"Y{where}", n_rows=X.shape[0])
    return X, (Y[:, None] if Y.ndim == 1 else Y), Y.ndim == 1


def _checked_chunks(chunks: Any) -> Iterator[tuple[np.ndarray, np.ndarray | None, bool]]:
    """Validated ``(X, Y 2-D or None, Y was 1-D)`` per chunk, each with the columns of the first chunk."""
    if isinstance(chunks, (str, bytes, dict)) or not hasattr(chunks, "__iter__"):
        raise InputError("chunks must be an iterable of (X, Y) pairs of arrays (e.g. nnrecover.sample_stream), "
                         f"got {type(chunks).__name__}.")
    first = None
    for i, item in enumerate(chunks):
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise InputError(f"item {i} of the sample stream is a {type(item).__name__}; a stream must yield "
                             "(X, Y) pairs of arrays (Y may be None).")
        X, Y2, one = _prepare(*item, where=f" (chunk {i})")
        dims = (X.shape[1], None if Y2 is None else Y2.shape[1])
        if first is None:
            first = dims
        elif dims != first:
            raise InputError(f"chunk {i} has {dims[0]} input and {dims[1] or 0} target column(s) but chunk 0 has "
                             f"{first[0]} and {first[1] or 0}; every chunk must have the same columns.")
        yield X, Y2, one


def save_samples(path: "str | os.PathLike[str]", X, Y=None) -> Path:
    """Write samples so that :func:`load_samples` reads them back exactly.

    Parameters
    ----------
    path : path-like
        ``.npz`` (arrays ``X``, ``Y``), ``.npy`` (one array ``[X | Y]``; targets in the last column(s)),
        ``.csv`` or ``.parquet`` (columns ``x0 .. x{d-1}`` and ``y``, or ``y0 .. y{p-1}`` for several
        outputs).
    X : array of shape (n, d)
    Y : array of shape (n,) or (n, p), optional
        Without ``Y`` only the inputs are written (e.g. for a separate ``targets`` file pairing).

    Returns
    -------
    pathlib.Path
        The path written.

    Notes
    -----
    A ``.npy`` file with several target columns is read back with ``target_columns=[-p, ..., -1]``:
    the format has no place to record ``p``.

    The file is written through :func:`atomic_output`: complete, or not at all.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SAMPLE_FORMATS:
        raise InputError(f"cannot write samples to {path.name!r}: use a file name ending in "
                         f"{', '.join(SAMPLE_FORMATS)}.")
    X, Y2, one = _prepare(X, Y)
    with atomic_output(path) as tmp:
        if suffix == ".npz":
            arrays = {"X": X} if Y2 is None else {"X": X, "Y": Y2[:, 0] if one else Y2}
            with open(tmp, "wb") as fh:  # a file object: np.savez appends ".npz" to other names
                np.savez(fh, **arrays)
        elif suffix == ".npy":
            with open(tmp, "wb") as fh:
                np.save(fh, X if Y2 is None else np.hstack([X, Y2]))
        else:
            _write_table(tmp, suffix, X, Y2, header=True, mode="w")
    return path


def _frame(X: np.ndarray, Y: np.ndarray | None):
    import pandas as pd  # deferred: pandas is slow to import

    xcols, ycols = _column_names(X.shape[1], None if Y is None else Y.shape[1])
    data = X if Y is None else np.hstack([X, Y])
    return pd.DataFrame(data, columns=xcols + ycols)


def _write_table(path: Path, suffix: str, X, Y, *, header: bool, mode: str) -> None:
    """Write a table; the format is ``suffix`` (``path`` may be a temporary name without it)."""
    df = _frame(X, Y)
    if suffix == ".csv":
        df.to_csv(path, index=False, float_format="%.17g", header=header, mode=mode)
        return
    try:
        df.to_parquet(path, index=False)
    except ImportError as exc:
        raise InputError(f"writing {output_name(path)} needs pyarrow: pip install 'nnrecover[parquet]' ({exc}).") from None


def save_sample_stream(path: "str | os.PathLike[str]", chunks: Iterable[tuple[Any, Any]], *,
                       n_samples: int | None = None) -> tuple[Path, int]:
    """Write an iterable of ``(X, Y)`` chunks (e.g. :func:`nnrecover.sample_stream`) to a file.

    ``.npy`` (needs ``n_samples``, or a stream with an ``n_samples`` attribute), ``.csv`` and
    ``.parquet`` are written chunk by chunk, so memory stays bounded by one chunk; ``.npz`` collects
    the chunks first (the zip container needs every array whole). Everything is written to a
    temporary file renamed onto ``path`` only after the last row (:func:`atomic_output`): a stream
    that fails or is interrupted part-way leaves ``path`` as it was, never a file whose unwritten
    rows read as zeros. Before the first ``.npy`` row is written, the folder's free space is checked
    against the size of the whole file.

    Returns
    -------
    (pathlib.Path, int)
        The path written and the number of rows.

    Raises
    ------
    InputError
        Unknown suffix, an item that is not an ``(X, Y)`` pair, a chunk with NaN/inf or other columns
        than the first, an empty stream, a ``.npy`` stream without ``n_samples`` or with another length.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SAMPLE_FORMATS:
        raise InputError(f"cannot write samples to {path.name!r}: use a file name ending in "
                         f"{', '.join(SAMPLE_FORMATS)}.")
    if n_samples is None:
        n_samples = getattr(chunks, "n_samples", None)
    checked = _checked_chunks(chunks)
    if suffix == ".npz":
        parts = list(checked)
        if not parts:
            raise InputError("the sample stream is empty.")
        X = np.concatenate([p[0] for p in parts])
        Y = None if parts[0][1] is None else np.concatenate([p[1] for p in parts])
        save_samples(path, X, Y[:, 0] if Y is not None and parts[0][2] else Y)
        return path, X.shape[0]
    if suffix == ".npy" and n_samples is None:
        raise InputError("writing a stream to .npy needs n_samples (the file header records the shape).")
    with atomic_output(path) as tmp:
        if suffix == ".npy":
            rows = _stream_npy(tmp, checked, check_positive_int(n_samples, "n_samples"), path)
        elif suffix == ".csv":
            rows = 0
            for i, (X, Y2, _) in enumerate(checked):
                _write_table(tmp, suffix, X, Y2, header=i == 0, mode="w" if i == 0 else "a")
                rows += X.shape[0]
            if rows == 0:
                raise InputError("the sample stream is empty.")
        else:
            rows = _stream_parquet(tmp, checked)
    return path, rows


def _stream_npy(tmp: Path, chunks, n: int, path: Path) -> int:
    out = None
    row = 0
    for X, Y2, _ in chunks:
        block = np.hstack([X, Y2]) if Y2 is not None else X
        if out is None:
            check_free_space(path, sample_file_bytes(n, block.shape[1], ".npy"), f"n_samples={n} rows")
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float64, shape=(n, block.shape[1]))
        if row + block.shape[0] > n:
            raise InputError(f"the stream holds more than n_samples={n} rows.")
        out[row:row + block.shape[0]] = block
        row += block.shape[0]
    if out is None:
        raise InputError("the sample stream is empty.")
    out.flush()
    del out
    if row != n:
        raise InputError(f"the stream held {row} rows, not n_samples={n}.")
    return row


def _stream_parquet(path: Path, chunks) -> int:
    try:
        import pyarrow as pa  # deferred: pyarrow is an optional extra
        import pyarrow.parquet as pq  # deferred: pyarrow is an optional extra
    except ImportError as exc:
        raise InputError(f"writing {output_name(path)} needs pyarrow: pip install 'nnrecover[parquet]' ({exc}).") from None
    writer = None
    rows = 0
    try:
        for X, Y2, _ in chunks:
            table = pa.Table.from_pandas(_frame(X, Y2), preserve_index=False)
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
            rows += X.shape[0]
    finally:
        if writer is not None:
            writer.close()
    if rows == 0:
        raise InputError("the sample stream is empty.")
    return rows

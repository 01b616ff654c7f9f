"""Files written whole or not at all, and files checked before they are read.

Every file nnrecover writes goes through :func:`atomic_output` (a temporary file in the same
folder, flushed to disk and renamed over the target only when complete), so an interrupted or killed
writer leaves the previous file untouched or no file, never a partial one. :func:`check_writable`
and :func:`check_free_space` let a command refuse an output path before it starts its work.

The header of every ``.npy`` array (a file, or a member of an ``.npz`` archive) is checked against the bytes
that follow it before anything is read (:func:`check_npy_file`, :func:`check_npz_members`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import zipfile
from pathlib import Path
from typing import Iterable, Iterator
import numpy as np
from ._memory import format_bytes, free_memory
from .errors import InputError

__all__ = ["atomic_output", "atomic_outputs", "check_distinct", "check_free_space", "check_npy_file",
           "check_npz_members", "check_writable", "first_line", "output_name", "prepare_output_dir", "write_text_atomic"]


# ------------------------------------------------------------------------------------------ writing safely
def _temp_name(out: Path, kind: str) -> Path:
    """A hidden sibling of ``out`` that no reader mistakes for the file itself; it keeps ``out``'s suffix,
    so writers that pick a format by suffix (:meth:`nnrecover.TwoLayerNetwork.save`) can write to it."""
    return out.with_name(f".{out.name}.{kind}-{secrets.token_hex(6)}{out.suffix}")


def _output_target(path: "str | os.PathLike[str]", what: str = "output") -> Path:
    """The file an output path replaces: a symbolic link's target; refused when it exists and is not a
    regular file (a device, a pipe, a folder), which a rename would replace by a file."""
    out = Path(path)
    if out.is_symlink():  # replace the file the link points to, not the link itself
        out = Path(os.path.realpath(out))
    if out.exists() and not out.is_file():
        kind = "a folder" if out.is_dir() else "not a regular file (a device, pipe or socket)"
        raise InputError(f"{what} {str(path)!r} is {kind}; nnrecover writes an output as a new file and "
                         "renames it into place, which would replace it: choose a file name.")
    return out


def check_distinct(inputs: dict, outputs: dict) -> None:
    """Refuse outputs that would overwrite an input or each other (``{flag: path}`` each; ``None`` paths
    are skipped): a fit writing its model over its data file would destroy the data.

    Raises
    ------
    InputError
        Naming the two flags that point to the same file.
    """
    def key(p):
        p = Path(os.path.realpath(p))
        try:
            st = p.stat()
        except OSError:
            return ("path", str(p))
        return ("inode", st.st_dev, st.st_ino)

    seen = {}
    for flag, path in [(f, p) for f, p in inputs.items() if p is not None]:
        seen.setdefault(key(path), flag)
    for flag, path in [(f, p) for f, p in outputs.items() if p is not None]:
        k = key(path)
        if k in seen:
            other = seen[k]
            role = "an input" if other in inputs else "another output"
            raise InputError(f"{flag} {str(path)!r} is the same file as {other} ({role}); writing it would "
                             f"destroy that file: choose another name.")
        seen[k] = flag


def check_writable(path: "str | os.PathLike[str]", what: str = "output") -> Path:
    """Refuse an output path before any work is done; returns it as a :class:`~pathlib.Path`.

    The folder is created if missing, then a probe file is created in it and removed again (the only
    test that also catches read-only mounts and ACLs). An existing file must be writable too:
    :func:`atomic_output` would replace it, but a file the user made read-only is not ours to replace.

    Raises
    ------
    InputError
        ``path`` is a directory, its folder cannot be created or written, or it is a read-only file.
    """
    out = Path(path)
    if out.is_dir():
        raise InputError(f"{what} {str(out)!r} is a directory; give a file name.")
    _output_target(out, what)
    for folder in out.parents:  # the nearest existing ancestor must be a folder
        if folder.exists():
            if not folder.is_dir():
                raise InputError(f"cannot write {what} {str(out)!r}: {str(folder)!r} is a file, not a folder; "
                                 "choose another location.")
            break
    probe = _temp_name(out, "probe")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError as exc:
        raise InputError(f"cannot write {what} {str(out)!r}: {exc.strerror or exc} (in folder "
                         f"{str(out.parent)!r}); choose a writable location.") from None
    with contextlib.suppress(OSError):
        os.unlink(probe)
    if out.exists() and not os.access(out, os.W_OK):
        raise InputError(f"{what} {str(out)!r} exists and is read-only; remove it or choose another name.")
    return out


def prepare_output_dir(path: "str | os.PathLike[str]", names=(), what: str = "output directory") -> Path:
    """An output folder (created if missing) in which each of ``names`` can be written, checked before
    any work is done (each file by :func:`check_writable`).

    Raises
    ------
    InputError
        ``path`` is an existing file, the folder cannot be created, or a file in it cannot be written.
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise InputError(f"{what} {str(out)!r} is an existing file; choose a directory.")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {what} {str(out)!r}: {exc.strerror or exc}; choose a writable "
                         "location.") from None
    for name in names:
        check_writable(out / name, f"{what} file")
    return out


def output_name(path: Path) -> str:
    """The name of the file a temporary path of :func:`atomic_output` stands for (else ``path.name``)."""
    name = path.name
    if name.startswith(".") and ".part-" in name:
        return name[1:name.rindex(".part-")]
    return name


def _fsync_path(path: "str | os.PathLike[str]", *, directory: bool = False) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        if directory:  # some platforms cannot open a folder; the rename is then as durable as they allow
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not directory:
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_output(path: "str | os.PathLike[str]") -> Iterator[Path]:
    """Write a file completely or not at all.

    Yields a temporary path in the same folder as ``path`` (with the same suffix); the caller writes the
    whole file there (by name, or with ``open(tmp, "wb")``). When the ``with`` block ends normally the
    temporary file is flushed to disk (``os.fsync``) and renamed onto ``path`` (``os.replace``, atomic on
    POSIX and Windows), so a reader sees the old file or the complete new one. When the block raises
    (including ``KeyboardInterrupt``) the temporary file is removed and ``path`` is untouched. A symbolic
    link is followed: the file it points to is replaced and the link kept. A path that exists and is not
    a regular file (a device, a pipe) is refused (:class:`~nnrecover.errors.InputError`). A process killed
    with SIGKILL can leave only the hidden temporary file ``.NAME.part-XXXX`` behind.

    The new file gets the mode of the file it replaces, or ``0o666`` minus the umask.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "model.npz")
    >>> with atomic_output(path) as tmp:
    ...     with open(tmp, "wb") as fh:
    ...         np.savez(fh, W=np.eye(2))
    >>> sorted(os.listdir(os.path.dirname(path)))   # the temporary file was renamed into place
    ['model.npz']
    """
    with atomic_outputs([path]) as (tmp,):
        yield tmp


@contextlib.contextmanager
def atomic_outputs(paths) -> Iterator[list]:
    """Write several files as one: all of them, or none (:func:`atomic_output` for each, renamed together).

    Yields one temporary path per entry of ``paths``. Only when the ``with`` block ends normally are they
    flushed and renamed onto their targets, one after the other with nothing in between; an error or an
    interrupt before that leaves every target as it was. Used for the files of one result (a model and
    its diagnostics, an experiment's table, figure and metadata), so that a reader never finds a new
    table beside an old figure.

    Raises
    ------
    InputError
        Two paths name the same file, a path is not a regular file, or a folder is not writable.
    """
    outs = [_output_target(p) for p in paths]
    resolved = [os.path.realpath(o) for o in outs]
    if len(set(resolved)) != len(resolved):
        raise InputError(f"the output files {[str(p) for p in paths]} name the same file twice; give distinct names.")
    temps: list = []
    try:
        for out in outs:
            tmp = _temp_name(out, "part")
            try:
                os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))  # mode from the umask
            except OSError as exc:
                raise InputError(f"cannot write {str(out)!r}: {exc.strerror or exc}; choose a writable "
                                 "location.") from None
            temps.append(tmp)
        yield list(temps)
        for out, tmp in zip(outs, temps):
            if out.exists():
                with contextlib.suppress(OSError):
                    shutil.copymode(out, tmp)
            _fsync_path(tmp)
        while temps:
            os.replace(temps[0], outs[len(outs) - len(temps)])
            temps.pop(0)
    except BaseException:
        for tmp in temps:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    for folder in {str(out.parent) or "." for out in outs}:
        _fsync_path(folder, directory=True)


def write_text_atomic(path: "str | os.PathLike[str]", text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_output`; returns the path."""
    out = Path(path)
    with atomic_output(out) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return out


def check_free_space(path: "str | os.PathLike[str]", n_bytes: int, what: str, *, in_memory: bool = False,
                     fix: str = "write fewer rows or choose another folder") -> None:
    """Refuse to start writing ``n_bytes`` to ``path`` when its folder (or memory) cannot hold them.

    Parameters
    ----------
    path : path-like
        The output file (its folder must exist).
    n_bytes : int
        Bytes the file will take (e.g. :func:`sample_file_bytes`).
    what : str
        What is being written, for the message (e.g. ``"--n 1000000000000 samples"``).
    in_memory : bool
        The writer holds the whole content in memory first (``.npz``): the available physical
        memory is checked too (twice ``n_bytes``: the chunks and their concatenation).
    fix : str
        The advice at the end of the message.

    Raises
    ------
    InputError
        Naming the size needed and the space available.
    """
    folder = Path(path).parent if str(Path(path).parent) else Path(".")
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        free = None
    if free is not None and n_bytes > free:
        raise InputError(f"{what} need about {format_bytes(n_bytes)} in {str(path)!r} but its folder has "
                         f"{format_bytes(free)} free; {fix}.")
    mem = free_memory() if in_memory else None
    if mem is not None and 2 * n_bytes > mem:
        raise InputError(f"{what} need about {format_bytes(2 * n_bytes)} of memory to write {Path(path).name!r} "
                         f"(.npz is assembled in memory) but {format_bytes(mem)} is available; {fix}, or write "
                         ".npy/.csv/.parquet, which are streamed to disk.")


# ------------------------------------------------------------------------------------------ .npy headers
def _npy_header(fh, available: int, source: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """Read and check an ``.npy`` header from the open binary ``fh`` (positioned at its start).

    ``available`` is the number of bytes of the whole ``.npy`` stream. Returns ``(shape, dtype,
    header_length)``. Raises :class:`InputError` for a missing magic string, a malformed header, an
    object dtype (would need pickle) or fewer data bytes than the header promises (a truncated file).
    """
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(fh, max_header_size=1 << 20)
        else:
            shape, fortran, dtype = fmt.read_array_header_2_0(fh, max_header_size=1 << 20)
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as exc:
        raise InputError(f"{source} is not a valid .npy array (bad header: {first_line(exc)}); "
                         "write it with numpy.save.") from None
    header_length = fh.tell()
    if dtype.hasobject:
        raise InputError(f"{source} holds Python objects (dtype {dtype}), which cannot be read without pickle; "
                         "save plain numeric arrays.")
    count = 1
    for s in shape:
        count *= int(s)
    need = count * dtype.itemsize
    have = available - header_length
    if have < need:
        raise InputError(f"{source} is truncated or corrupt: its header promises shape {tuple(shape)} "
                         f"({format_bytes(need)}) but only {format_bytes(max(have, 0))} follow; re-create the file.")
    return tuple(int(s) for s in shape), dtype, header_length


def first_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line of at most 200 characters (for an error that names a file)."""
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def check_npy_file(path: Path, source: str | None = None) -> None:
    """Check the header of the ``.npy`` file ``path`` against its size (see :func:`_npy_header`)."""
    with open(path, "rb") as fh:
        _npy_header(fh, os.fstat(fh.fileno()).st_size, source or path.name)


def check_npz_members(path: Path, names: Iterable[str] | None = None, source: str | None = None) -> None:
    """Check the headers of the ``.npy`` members of the ``.npz`` archive ``path`` (all, or ``names``)."""
    source = source or path.name
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                if names is not None and key not in names:
                    continue
                with zf.open(info) as fh:
                    _npy_header(fh, info.file_size, f"array {key!r} of {source}")
    except InputError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise InputError(f"{source} is not a readable .npz archive: {first_line(exc)}") from None
